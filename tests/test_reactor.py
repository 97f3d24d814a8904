"""A load's reader thread (_reactor) and its gate."""
from __future__ import annotations

import collections
import os
import resource
import select
import threading
import time
import unittest
from unittest import mock

import stream_client
from stream_client import stream
from .support import ANSWER, Fixture, FIXTURE_EXPECTED, in_threads, mode_runs, tcp_pair, TLS


class ReactorTests(unittest.TestCase):
    """A load's runs on the engine (Linux) or on worker threads get a single run's verdicts; a bug in the
    engine fails the runs instead of hanging them. Sessions' responses are read by one _Reactor thread per
    process: every read of a pass is stamped before any is fed; the gate lets one worker through."""

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
        reactor, fed, pairs = stream_client._reactor._Reactor(), [], [tcp_pair(self) for _ in range(3)]
        self.addCleanup(reactor.close)
        for ours, theirs in pairs:
            theirs.sendall(b'HTTP/1.1 200 OK\r\n')
        request = stream_client.prepare('http://127.0.0.1:9/v1/chat/completions', 'm', 'p')
        readings = [stream_client._reactor._Reading(stream_client._exchange._Connection(ours),
                                                    stream_client._exchange._Exchange(request), time.perf_counter())
                    for ours, _ in pairs]
        reads = collections.deque()
        for reading in readings:
            reading.connection.sock.setblocking(False)
            reactor._readings[reading.fd] = reading
        reactor._read_ready([(reading.fd, select.EPOLLIN) for reading in readings], reads)

        def take_read(x, raw, now, kernel_ns, wall_offset_ns=None):
            fed.append((time.perf_counter(), now))
            return []
        with mock.patch.object(stream_client._reactor, '_take_read', take_read):
            while reads:
                reactor._feed(*reads.popleft())
        self.assertEqual(len(fed), 3)
        self.assertLess(max(stamp for _, stamp in fed), min(when for when, _ in fed))
        self.assertEqual([stamp for _, stamp in fed], sorted(stamp for _, stamp in fed))  # fed in the order read

    def test_a_bug_in_the_engine_fails_its_runs_and_hangs_none(self):
        def broken(*args):
            raise RuntimeError('a bug')
        with Fixture('ok') as fixture:
            for where in ('_pass', '_expire'):
                with self.subTest(where=where), mock.patch.object(stream_client._runs._Engine, where, broken):
                    records = self.load_records(fixture.url, 4)
                    self.assertEqual([record['error_kind'] for record in records], ['client_error'] * 4)
                    self.assertTrue(all('RuntimeError' in record['error'] for record in records))
            with mock.patch.object(stream_client._runs, '_take_read', broken):  # a bug in one run's read
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
            for target, name in ((stream_client.KeptConnections, 'take'), (stream_client._runs, '_build_record'),
                                 (stream_client._runs._Machine, 'send')):
                with self.subTest(name), mock.patch.object(target, name, broken):
                    records: list[dict] = []
                    stream_client.run_load([stream_client.prepare(fixture.url, 'synthetic-fixture', 'READY')],
                                           stream_client.LoadSettings(runs=4, concurrency=2, keep_alive=True),
                                           records.append, stream_client.Cancel())
                    self.assertEqual(sorted(record['run'] for record in records), [0, 1, 2, 3])
                    self.assertEqual({record['error_kind'] for record in records}, {'client_error'})
                    self.assertTrue(all('RuntimeError' in record['error'] and 'a bug' in record['error']
                                        for record in records))

    def test_a_tls_load_is_read_by_the_reactor_on_kept_connections(self):
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

    def test_the_gate_lets_one_worker_through_until_it_waits_on_the_network(self):
        gate, inside, order = stream_client._exchange._Gate(threading.Lock()), threading.Event(), []

        def second() -> None:
            with gate:
                order.append('second in')
                inside.set()
        with gate:
            other = threading.Thread(target=second)
            other.start()
            self.assertFalse(inside.wait(0.1))  # it cannot pass while the gate is held
            with gate.released():
                self.assertTrue(inside.wait(10))
            order.append('first back')
        other.join()
        self.assertEqual(order, ['second in', 'first back'])
        with stream_client._exchange._OPEN_GATE, stream_client._exchange._OPEN_GATE.released(), \
                stream_client._exchange._OPEN_GATE:
            pass  # a single run's gate holds nothing
