"""The engine (_runs): the runs of a load, a trace or sessions as state machines on one epoll set, with no
thread per run (Linux); worker threads elsewhere."""
from __future__ import annotations

import os
import resource
import socket
import threading
import time
import unittest
from unittest import mock

import stream_client
from stream_client import stream
from .support import ANSWER, Fixture, FIXTURE_EXPECTED, in_threads, mode_runs, tcp_pair, TLS

KERNEL_STAMPS = stream_client._exchange._SO_TIMESTAMPNS is not None  # Linux on the common architectures


def client_threads() -> int:
    """The threads running a function of the client's (not the fixture server's, in this process too)."""
    return sum(getattr(getattr(thread, '_target', None), '__module__', '').startswith('stream_client')
               for thread in threading.enumerate())


def new_engine(test: unittest.TestCase) -> stream_client._runs._Engine:
    """An engine of one slot, closed when the test ends, whose loop the test drives (_pass)."""
    engine = stream_client._runs._Engine(1, stream_client.Cancel(), stream_client._load._REAL_CLOCK, False)
    test.addCleanup(engine._close)
    return engine


def reading_machine(engine: stream_client._machine._Machine, ours: socket.socket,
                    steps=iter(())) -> stream_client._machine._Machine:
    """A run on the engine whose request has gone out on ours: it waits for the response's reads (its job's
    steps are sent its record)."""
    request = stream_client.prepare('http://127.0.0.1:9/v1/chat/completions', 'm', 'p')
    machine = stream_client._machine._Machine(engine, stream_client._machine._Job(steps, None), request)
    machine.x = stream_client._exchange._Exchange(request)
    machine.deadline_at = machine.x.timeline.started + request.deadline
    machine.sock, machine.connection = ours, stream_client._exchange._Connection(ours)
    ours.setblocking(False)
    engine._live.add(machine)
    machine.read_response()
    return machine


@unittest.skipUnless(stream_client._runs._EPOLL, 'the engine needs epoll (Linux)')
class EngineTests(unittest.TestCase):
    """Runs on the engine start no thread of their own (a TLS handshake takes one of a few), get the records
    a single run gets, and rest their kept connections in the epoll set between runs."""

    def load(self, url: str, settings: stream_client.LoadSettings, **options) -> tuple[list[dict], list[tuple]]:
        """The records of a load, in order, and for each: the thread on_record was called in and how many
        threads of the client's were running then."""
        records, seen = [], []

        def on_record(record: dict) -> None:
            records.append(record)
            seen.append((threading.current_thread(), client_threads()))
        request = stream_client.prepare(url, 'synthetic-fixture', 'READY', **options)
        stream_client.run_load([request], settings, on_record, stream_client.Cancel())
        return sorted(records, key=lambda record: record['run']), seen

    def test_a_plain_load_runs_in_the_callers_thread_and_starts_no_thread(self):
        with Fixture('ok', profile='vllm') as fixture:
            for keep_alive in (False, True):
                with self.subTest(keep_alive=keep_alive):
                    records, seen = self.load(fixture.url, stream_client.LoadSettings(runs=40, concurrency=16,
                                                                                      keep_alive=keep_alive))
                    self.assertEqual([record['ok'] for record in records], [True] * 40)
                    self.assertEqual({thread for thread, _ in seen}, {threading.current_thread()})
                    self.assertEqual({count for _, count in seen}, {0})

    def test_tls_handshakes_take_a_few_blocking_step_threads_at_most(self):
        with Fixture('ok', profile='vllm', tls_cert=str(TLS / 'server.pem'),
                     tls_key=str(TLS / 'server.key')) as fixture:
            records, seen = self.load(fixture.url.replace('http:', 'https:'),
                                      stream_client.LoadSettings(runs=48, concurrency=24), ca_file=str(TLS / 'ca.pem'))
        self.assertEqual([record['ok'] for record in records], [True] * 48, [record['error'] for record in records])
        self.assertEqual({thread for thread, _ in seen}, {threading.current_thread()})
        self.assertLessEqual(max(count for _, count in seen), stream_client._runs._BLOCKING_THREADS)
        self.assertGreater(max(count for _, count in seen), 0)

    def test_a_keyboard_interrupt_cancels_the_load_and_is_raised_once_the_runs_in_flight_have_ended(self):
        # a caller without a SIGINT handler of its own: here on_record raises it, on the third record
        records: list[dict] = []

        def on_record(record: dict) -> None:
            records.append(record)
            if len(records) == 3:
                raise KeyboardInterrupt
        with Fixture('ok', profile='vllm', delay=0.05) as fixture:
            request = stream_client.prepare(fixture.url, 'synthetic-fixture', 'READY')
            with self.assertRaises(KeyboardInterrupt):
                stream_client.run_load([request], stream_client.LoadSettings(runs=40, concurrency=4), on_record,
                                       stream_client.Cancel())
        kinds = [record['error_kind'] for record in records]
        self.assertLess(len(records), 40)  # no run started after it
        self.assertEqual(kinds[:3], [None] * 3)
        self.assertIn('interrupted', kinds[3:])  # the runs in flight, each with its record (some had ended)
        self.assertLessEqual(set(kinds[3:]), {None, 'interrupted'})
        self.assertEqual(sorted(record['run'] for record in records), list(range(len(records))))

    def test_a_refused_connect_gets_a_single_runs_record(self):
        closed = socket.create_server(('127.0.0.1', 0))
        url = f'http://127.0.0.1:{closed.getsockname()[1]}/v1/chat/completions'
        closed.close()
        alone = stream_client.stream(url, 'synthetic-fixture', 'READY')
        records, _ = self.load(url, stream_client.LoadSettings(runs=3, concurrency=3))
        self.assertEqual(alone['error_kind'], 'connect_failed')
        self.assertEqual([(record['error_kind'], record['error']) for record in records],
                         [(alone['error_kind'], alone['error'])] * 3)

    def test_a_kept_connection_closed_while_resting_is_a_stale_connection_and_not_reused_again(self):
        # The server closes each kept connection 50 ms after its response; the runs start 300 ms apart, so
        # each close arrives while the connection rests in the engine's epoll set between two runs.
        with Fixture(profile='vllm', idle_close=0.05) as fixture:
            records, _ = self.load(fixture.url, stream_client.LoadSettings(runs=4, concurrency=1, rate=1 / 0.3,
                                                                           arrivals='constant', keep_alive=True))
        self.assertEqual([(record['ok'], record['connection']['reused'], record['connection']['stale'])
                          for record in records],
                         [(True, False, False), (False, True, True), (True, False, False), (False, True, True)],
                         [record['error'] for record in records])


@unittest.skipUnless(stream_client._runs._EPOLL, 'the engine needs epoll (Linux)')
class LoadOnTheEngineTests(unittest.TestCase):
    """A load's runs on the engine (Linux) or on worker threads get a single run's verdicts; every read of a
    pass is stamped (by the kernel, on arrival) before any is fed; a bug in the engine fails the runs
    instead of hanging them, and every run has its record."""

    def load_records(self, url: str, runs: int, **options) -> list[dict]:
        records: list[dict] = []
        request = stream_client.prepare(url, 'synthetic-fixture', 'READY', **options)
        stream_client.run_load([request], stream_client.LoadSettings(runs=runs, concurrency=runs), records.append,
                               stream_client.Cancel())
        return sorted(records, key=lambda record: record['run'])

    def test_every_mode_gets_a_single_runs_verdict_in_a_load_on_the_engine_or_on_worker_threads(self):
        runs = [(mode, profile) for mode, api, profile in mode_runs() if api == 'chat']

        def verdicts(run: tuple[str, str]) -> list[tuple]:
            mode, profile = run
            options = {'idle': 0.3, **FIXTURE_EXPECTED[mode].options}
            with Fixture(mode, profile=profile) as fixture:
                records = [stream(fixture.url, 'synthetic-fixture', 'READY', **options)]
                records += self.load_records(fixture.url, 2, **options)
            return [(record['ok'], record['error_layer'], record['error_kind'], record['text']) for record in records]
        on_the_engine = in_threads(verdicts, runs)
        with mock.patch.object(stream_client._load, '_EPOLL', False):  # once for all threads: patches do not nest
            on_threads = in_threads(verdicts, runs)
        for (mode, profile), engine, threads in zip(runs, on_the_engine, on_threads):
            with self.subTest(mode=mode, profile=profile):
                self.assertEqual(engine[0][1], FIXTURE_EXPECTED[mode].verdict.error_layer)
                self.assertEqual(engine + threads, engine[:1] * 6)

    def test_every_read_of_a_pass_is_stamped_before_any_of_them_is_fed(self):
        engine, fed, pairs = new_engine(self), [], [tcp_pair(self) for _ in range(3)]
        for ours, theirs in pairs:
            reading_machine(engine, ours)
            theirs.sendall(b'HTTP/1.1 200 OK\r\n')

        def take_read(x, raw, now, kernel_ns, wall_offset_ns=None):
            fed.append((time.perf_counter(), now))
            return []
        with mock.patch.object(stream_client._machine, '_take_read', take_read):
            while len(fed) < 3:
                engine._pass(10)
        self.assertEqual(len(fed), 3)
        self.assertLess(max(stamp for _, stamp in fed), min(when for when, _ in fed))
        self.assertEqual([stamp for _, stamp in fed], sorted(stamp for _, stamp in fed))  # fed in the order read

    @unittest.skipUnless(KERNEL_STAMPS, 'the kernel stamps reads on Linux only')
    def test_a_read_is_stamped_when_its_bytes_arrived_not_when_the_engine_got_to_it(self):
        ours, theirs = tcp_pair(self)
        engine = new_engine(self)
        machine = reading_machine(engine, ours)
        self.assertTrue(machine.connection.kernel_stamps)
        x = machine.x
        time.sleep(0.02)  # Linux turns stamping on a moment after the first socket asks (deferred work)
        before = time.perf_counter()
        theirs.sendall(b'HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n')
        sent = time.perf_counter()
        time.sleep(0.05)  # the engine is late
        engine._pass(10)
        # 5 ms either way: the wall clock, which the kernel's stamps are on, may be slewed while it runs
        self.assertLess(x.timeline.headers_at, sent + 0.005)  # the read returned 50 ms later
        self.assertGreater(x.timeline.headers_at, before - 0.005)

    def test_a_timer_that_ran_out_before_the_engine_waits_is_a_wait_of_none_not_a_wait_for_ever(self):
        # A slow thread (a busy machine, another thread's turn) reaches the wait after the earliest timer is
        # due: epoll takes a negative timeout as none at all, and a silent connection's run waited until the
        # server closed it, judged an EOF (body_truncated) instead of its idle timeout.
        ours, theirs = tcp_pair(self)
        engine, records, timeouts = new_engine(self), [], []

        def job():
            records.append((yield))
        steps = job()
        next(steps)
        machine = reading_machine(engine, ours, steps)
        theirs.sendall(b'HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: 100\r\n\r\ndata: {')
        while machine.x.timeline.headers_at is None:  # the head, and part of the body, then silence
            engine._pass(10)
        machine.last -= machine.request.idle + 1  # silent for longer than its idle timeout
        engine._timers = [(machine.due_at(), machine.timer, machine)]
        poll = engine._poll

        class Recorded:
            def poll(self, timeout):
                timeouts.append(timeout)
                return poll.poll(max(timeout, 0))  # the test itself waits for nothing

            def __getattr__(self, name):
                return getattr(poll, name)
        with mock.patch.object(engine, '_poll', Recorded()):
            engine._wait()
        self.assertEqual(timeouts, [0])
        self.assertEqual([record['error_kind'] for record in records], ['idle_timeout'])

    def test_ringing_the_engine_never_blocks(self):
        engine = new_engine(self)
        for _ in range(100_000):  # more bytes than a pipe holds, and no loop to drain them
            engine._ring()
        engine._pass(0)  # the bell drained
        self.assertFalse(stream_client._runs._drained(engine._waker))

    def test_a_bug_in_the_engine_fails_its_runs_and_hangs_none(self):
        def broken(*args):
            raise RuntimeError('a bug')
        with Fixture('ok') as fixture:
            for where in ('_pass', '_expire'):
                with self.subTest(where=where), mock.patch.object(stream_client._runs._Engine, where, broken):
                    records = self.load_records(fixture.url, 4)
                    self.assertEqual([record['error_kind'] for record in records], ['client_error'] * 4)
                    self.assertTrue(all('RuntimeError' in record['error'] for record in records))
            with mock.patch.object(stream_client._machine, '_take_read', broken):  # a bug in one run's read
                records = self.load_records(fixture.url, 4)
            self.assertEqual([record['error_kind'] for record in records], ['client_error'] * 4)
            self.assertTrue(all(record['ok'] for record in self.load_records(fixture.url, 4)))

    def test_kept_connections_are_reused_when_their_descriptors_are_above_1023(self):
        # select() refuses descriptors from 1,024 up: a load at concurrency 1,024 in one process has them
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft < 1200:
            self.skipTest(f'this process may open only {soft} files')
        padding = [os.open(os.devnull, os.O_RDONLY) for _ in range(1030)]
        try:
            with Fixture('ok', profile='vllm') as fixture:
                records: list[dict] = []
                stream_client.run_load([stream_client.prepare(fixture.url, 'synthetic-fixture', 'READY')],
                                       stream_client.LoadSettings(runs=3, keep_alive=True), records.append,
                                       stream_client.Cancel())
        finally:
            for fd in padding:
                os.close(fd)
        self.assertEqual([record['ok'] for record in records], [True] * 3, [record['error'] for record in records])
        self.assertEqual([record['connection']['reused'] for record in records], [False, True, True])

    def test_every_run_of_a_load_has_its_record_when_the_client_fails_in_it(self):
        def broken(*args, **kwargs):
            raise RuntimeError('a bug')
        with Fixture('ok', profile='vllm') as fixture:
            for target, name in ((stream_client.KeptConnections, 'take'), (stream_client._machine, '_build_record'),
                                 (stream_client._machine._Machine, 'send')):
                with self.subTest(name), mock.patch.object(target, name, broken):
                    records: list[dict] = []
                    stream_client.run_load([stream_client.prepare(fixture.url, 'synthetic-fixture', 'READY')],
                                           stream_client.LoadSettings(runs=4, concurrency=2, keep_alive=True),
                                           records.append, stream_client.Cancel())
                    self.assertEqual(sorted(record['run'] for record in records), [0, 1, 2, 3])
                    self.assertEqual({record['error_kind'] for record in records}, {'client_error'})
                    self.assertTrue(all('RuntimeError' in record['error'] and 'a bug' in record['error']
                                        for record in records))

    def test_a_tls_load_runs_on_the_engine_on_kept_connections(self):
        with Fixture('ok', profile='vllm', tls_cert=str(TLS / 'server.pem'),
                     tls_key=str(TLS / 'server.key')) as fixture:
            url = fixture.url.replace('http:', 'https:')
            for keep_alive in (False, True):
                records: list[dict] = []
                request = stream_client.prepare(url, 'synthetic-fixture', 'READY', ca_file=str(TLS / 'ca.pem'))
                stream_client.run_load([request],
                                       stream_client.LoadSettings(runs=6, concurrency=2, keep_alive=keep_alive),
                                       records.append, stream_client.Cancel())
                with self.subTest(keep_alive=keep_alive):
                    self.assertEqual([record['ok'] for record in records], [True] * 6, [r['error'] for r in records])
                    self.assertEqual({record['text'] for record in records}, {ANSWER})
                    self.assertEqual(sum(record['connection']['reused'] for record in records), 4 if keep_alive else 0)
