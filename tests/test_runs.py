"""The engine (_runs): a load's runs as state machines on one epoll set, with no thread per run."""
from __future__ import annotations

import socket
import threading
import unittest

import stream_client
from .support import Fixture, TLS


def client_threads() -> int:
    """The threads running a function of the client's (not the fixture server's, in this process too)."""
    return sum(getattr(getattr(thread, '_target', None), '__module__', '').startswith('stream_client')
               for thread in threading.enumerate())


@unittest.skipUnless(stream_client._reactor._EPOLL, 'the engine needs epoll (Linux)')
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
