"""Loads and their summary (_load, _summary): runs, goodput, sweeps and --processes."""
from __future__ import annotations

import collections
import contextlib
import csv
import dataclasses
import errno
import io
import json
import os
import select
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import types
import unittest
from pathlib import Path
from unittest import mock

import fixture_server
import stream_client
from stream_client import stream, StreamError
from .support import (
    ANSWER_EVENTS, APIS, CLIENT, fake_exchange, fake_record, Fixture, FIXTURE_EXPECTED, FIXTURE_SCRIPT, instant_start,
    PageReader, resolving_llm_test_to_loopback, run_building_fails_for, run_cli, run_in_process, run_in_terminal,
    script_command, script_env, sse_response, TRACES, URL_PATHS, VirtualClock)
from .tiers import sans_io


class LoadTests(unittest.TestCase):
    """Many runs at once: every run judged strictly, the summary built from the verdicts."""

    def setUp(self) -> None:
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.dir = Path(self.tmp.name)

    def load(self, url: str, settings: stream_client.LoadSettings, **options) -> list[dict]:
        """The records of a load, in the order its runs ended."""
        records: list[dict] = []
        requests = [stream_client.prepare(url, 'synthetic-fixture', 'READY', **options)]
        stream_client.run_load(requests, settings, records.append, stream_client.Cancel())
        return records

    def test_a_mixed_load_counts_exactly_what_the_fixture_served(self):
        layers = {mode: row.verdict.error_layer for mode, row in FIXTURE_EXPECTED.items()}
        for api in APIS:
            with self.subTest(api=api), Fixture('mixed', seed=7, profile='vllm') as fixture:
                url = fixture.url.replace('/v1/chat/completions', URL_PATHS[api])
                records = self.load(url, stream_client.LoadSettings(runs=60, concurrency=8), idle=2)
                served = fixture.instance.schedule.served
            summary = stream_client.Summary()
            for record in records:
                summary.add(record)
            result = summary.result()
            expected = collections.Counter()
            for mode, count in served.items():
                if layers[mode]:
                    expected[layers[mode]] += count
            self.assertEqual(sum(served.values()), 60)
            self.assertEqual(result['not_ok_by_layer'], dict(expected))
            self.assertEqual((result['runs'], result['ok']), (60, served['ok']))
            self.assertGreaterEqual(len(result['not_ok_by_layer']), 4)
            self.assertEqual(sorted(record['run'] for record in records), list(range(60)))
            self.assertEqual({record['load']['concurrency'] for record in records}, {8})

    def test_the_fixture_serves_64_streams_at_once(self):
        # Every response waits until all 64 are being answered at once. Served one at a time, the first
        # would wait alone until the barrier broke, and no run would be ok.
        together = threading.Barrier(64, timeout=60)
        answer = fixture_server.Handler._answer

        def answer_together(handler, *plan) -> None:
            together.wait()
            answer(handler, *plan)
        with mock.patch.object(fixture_server.Handler, '_answer', answer_together), Fixture('ok') as fixture:
            records = self.load(fixture.url, stream_client.LoadSettings(runs=64, concurrency=64),
                                   idle=60, deadline=120)
        self.assertEqual([r['error'] for r in records if not r['ok']], [])
        self.assertEqual((len(records), together.broken), (64, False))

    def test_a_load_of_tool_call_runs_is_counted_exactly(self):
        with Fixture('tool-call', profile='vllm') as good, Fixture('tool-args-array', profile='vllm') as bad:
            requests = [stream_client.prepare(url, 'm', 'p', tools=fixture_server.TOOLS, tool_choice='required')
                        for url in (good.url, bad.url, good.url)]
            records: list[dict] = []
            stream_client.run_load(requests, stream_client.LoadSettings(runs=30, concurrency=6), records.append,
                                   stream_client.Cancel())
        summary = stream_client.Summary()
        for record in records:
            summary.add(record)
        result = summary.result()
        self.assertEqual((result['runs'], result['ok'], result['not_ok_by_layer']), (30, 20, {'application': 10}))
        self.assertEqual(result['not_ok_by_kind'],
                         {'tool_arguments_not_object': 10})
        self.assertEqual({record['run'] % 3 for record in records if not record['ok']}, {1})
        self.assertEqual(result['latency_runs'], 20)  # the ok runs' first text is their first tool-call piece

    def test_keep_alive_reuses_each_workers_connection(self):
        for profile in fixture_server.PROFILES:
            with self.subTest(profile=profile), Fixture(profile=profile) as fixture:
                records = self.load(fixture.url, stream_client.LoadSettings(runs=12, concurrency=3, keep_alive=True))
            connections = {record['connection']['local_port'] for record in records}
            self.assertTrue(all(record['ok'] for record in records), [r['error'] for r in records])
            self.assertLessEqual(len(connections), 3)
            self.assertEqual(sum(not record['connection']['reused'] for record in records), len(connections))
            carried = collections.Counter()  # each connection carried as many requests as its last one counts
            for record in records:
                port, count = record['connection']['local_port'], record['connection']['request_on_connection']
                carried[port] = max(carried[port], count)
            self.assertEqual(sum(carried.values()), 12)
            self.assertEqual({record['load']['keep_alive'] for record in records}, {True})
        with Fixture() as fixture:  # without --keep-alive, one connection per run
            records = self.load(fixture.url, stream_client.LoadSettings(runs=4, concurrency=2))
        self.assertEqual([record['connection']['reused'] for record in records], [False] * 4)

    def test_a_response_that_ends_its_connection_is_not_reused(self):
        body = ANSWER_EVENTS
        cases = {'Connection: close': sse_response(body, headers=f'Content-Length: {len(body)}\r\n'
                                                                 'Connection: close\r\n'),
                 'HTTP/1.0': sse_response(body, headers=f'Content-Length: {len(body)}\r\n', status='200 OK')
                 .replace(b'HTTP/1.1', b'HTTP/1.0', 1),
                 'a body ended by closing': sse_response(body)}
        for name, response in cases.items():
            with self.subTest(name), Fixture(replay=response) as fixture:
                records = self.load(fixture.url, stream_client.LoadSettings(runs=3, keep_alive=True))
                self.assertEqual([(record['ok'], record['connection']['reused']) for record in records],
                                 [(True, False)] * 3, [record['error'] for record in records])

    def test_a_kept_connection_closed_while_idle_is_named_and_not_retried(self):
        with Fixture(profile='vllm', idle_close=0.05) as fixture:
            request = stream_client.prepare(fixture.url, 'm', 'p')
            kept = stream_client.KeptConnections()
            first = stream_client.run(request, kept=kept)
            connection = kept.take(request.origin)
            self.assertTrue(select.select([connection.sock], [], [], 30)[0])  # the server's close has arrived
            kept.keep(request.origin, connection)
            stale = stream_client.run(request, kept=kept)
            after = stream_client.run(request, kept=kept)
            kept.close()
        self.assertTrue(first['ok'])
        self.assertRegex(stale['error'], r'^transport: the reused connection \(request 2 on it, idle \d+\.\d\d s\) '
                                         r'closed before any response byte; the server or a proxy closed it while '
                                         r'idle$')
        self.assertEqual((stale['connection']['reused'], stale['connection']['stale'], stale['headers_ms']),
                         (True, True, None))
        self.assertEqual((after['ok'], after['connection']['reused'], after['connection']['request_on_connection']),
                         (True, False, 1))  # not retried: the next run opens a new connection
        summary = stream_client.Summary()
        for record in (first, stale, after):
            summary.add(record)
        self.assertEqual(summary.result()['stale_connection_failures'], 1)
        # The stale run got no head, but its connection had carried the fixture's answer: so does the record,
        # and a summary of the three is not refused as mixing sources.
        self.assertEqual([record['source'] for record in (first, stale, after)], ['fixture'] * 3)
        self.assertEqual(summary.result()['sources'], ['fixture'])

    def test_plain_http_is_judged_by_the_address_a_name_resolves_to(self):
        real = socket.getaddrinfo

        def getaddrinfo(host, port, *args, **kwargs):  # llm.test resolves to a documentation address
            if host == 'llm.test':
                return [(socket.AF_INET, socket.SOCK_STREAM, 6, '', ('192.0.2.7', port))]
            return real(host, port, *args, **kwargs)
        with mock.patch('socket.getaddrinfo', getaddrinfo), self.assertRaises(ValueError) as caught:
            stream_client.prepare('http://llm.test:8000/v1/chat/completions', 'm', 'p')
        self.assertEqual(str(caught.exception), "plain http is allowed only to loopback addresses, but 'llm.test' "
                                                'resolves to 192.0.2.7; use https or an SSH tunnel to 127.0.0.1')
        with Fixture() as fixture, resolving_llm_test_to_loopback():  # a name that resolves to loopback is fine
            record = stream(fixture.url.replace('127.0.0.1', 'llm.test'), 'm', 'p')
        self.assertEqual((record['ok'], record['connection']['peer'][:10]), (True, '127.0.0.1:'))
        reached = types.SimpleNamespace(peer_ip='192.0.2.7', peer='192.0.2.7:8000')  # as if DNS changed meanwhile
        with self.assertRaises(StreamError) as caught:
            stream_client._transport._check_plain_peer(reached, types.SimpleNamespace(host='llm.test'))
        self.assertEqual(str(caught.exception), 'connect: plain http is allowed only to loopback addresses, but '
                                                'llm.test connected to 192.0.2.7:8000; nothing was sent')

    @sans_io
    def test_failed_runs_stay_out_of_the_latency_figures(self):
        summary = stream_client.Summary()
        base = {'started_at': '2026-11-30T10:00:00.000Z', 'event_gaps_ms': [1.0], 'content_events': 2,
                'completion_tokens': 3, 'headers_ms': 1.0, 'first_text_ms': 10.0, 'duration_ms': 100.0}
        summary.add({**base, 'ok': True})
        summary.add({**base, 'ok': False, 'error_layer': 'transport', 'first_text_ms': 5000.0,
                     'duration_ms': 9000.0, 'error': 'transport: connection closed after 4 of 9 body bytes',
                     'error_kind': 'body_truncated'})
        result = summary.result()
        self.assertEqual(result['latency_ms']['first_text_ms'], {'p50': 10.0, 'p90': 10.0, 'p99': 10.0, 'max': 10.0})
        self.assertEqual((result['latency_runs'], result['latency_excludes']), (1, 1))
        self.assertEqual(result['not_ok_by_kind'], {'body_truncated': 1})
        self.assertEqual((result['wall_s'], result['completion_tokens_per_s']), (9.0, round(3 / 9, 3)))

    @sans_io
    def test_a_kept_connection_shut_by_a_cancel_is_an_interruption_not_a_stale_connection(self):
        cancel = stream_client.Cancel()
        x = fake_exchange('HEADERS', reused=True, idle_s=0.0, cancel=cancel,
                          connection=types.SimpleNamespace(requests=29))
        self.assertEqual(stream_client._failures._exchange_failure(ConnectionResetError(104, 'reset'), x).kind,
                         'stale_connection')  # before any cancel: the server closed it while idle
        cancel.cancel('SIGINT')
        failure = stream_client._failures._exchange_failure(ConnectionResetError(104, 'reset'), x)
        self.assertEqual((failure.layer, failure.kind), ('interrupted', 'interrupted'))
        self.assertEqual(failure.message, 'SIGINT during the headers phase after 0 content events')

    @sans_io
    def test_the_mean_in_flight_is_the_runs_durations_over_the_wall_time(self):
        summary = stream_client.Summary()
        for start, duration in (('00.000', 1000.0), ('00.500', 1000.0), ('01.000', 500.0), ('02.000', None)):
            summary.add({'started_at': f'2026-11-30T10:00:{start}Z', 'duration_ms': duration, 'ok': False,
                         'error_layer': 'connect', 'error_kind': 'connect_refused', 'error': 'connect: refused'})
        result = summary.result()
        self.assertEqual(result['wall_s'], 2.0)  # from the first start to the last end
        self.assertEqual(result['mean_in_flight'], round(2.5 / 2.0, 3))  # failed runs were in flight too

    def test_a_stalled_connection_does_not_hold_back_the_others(self):
        # Runs alternate between a server that never sends a byte of body and a quick one. The stalled runs
        # would wait far longer than the test; once the four quick runs have their records, the load is
        # cancelled. Had a stalled run held the others back, no quick run could have ended before it.
        cancel, records = stream_client.Cancel(), []

        def on_record(record: dict) -> None:
            records.append(record)
            if sum(record['ok'] for record in records) == 4:
                cancel.cancel('SIGINT')
        with Fixture('stall') as stalled, Fixture('ok', delay=0) as quick:
            requests = [stream_client.prepare(stalled.url, 'm', 'p', idle=60, deadline=120),
                        stream_client.prepare(quick.url, 'm', 'p')]
            stream_client.run_load(requests, stream_client.LoadSettings(runs=8, concurrency=8), on_record, cancel)
        self.assertEqual([(record['run'] % 2, record['ok']) for record in records[:4]], [(1, True)] * 4)
        self.assertEqual([(record['run'] % 2, record['error_layer']) for record in records[4:]],
                         [(0, 'interrupted')] * 4)

    def test_an_open_loop_follows_its_seeded_schedule(self):
        # The schedule is computed, so it is tested without sleeping: evenly spaced or Poisson at the rate.
        constant = stream_client.LoadSettings(runs=5, rate=20, arrivals='constant')
        self.assertEqual([round(at, 9) for at in stream_client.arrival_offsets(constant)], [0, .05, .1, .15, .2])
        poisson = stream_client.LoadSettings(runs=20_000, rate=10, seed=3)
        offsets = list(stream_client.arrival_offsets(poisson))
        self.assertEqual(offsets, list(stream_client.arrival_offsets(poisson)))
        self.assertNotEqual(offsets[:5], list(stream_client.arrival_offsets(dataclasses.replace(poisson, seed=4)))[:5])
        gaps = [later - earlier for earlier, later in zip(offsets, offsets[1:])]
        self.assertTrue(all(gap >= 0 for gap in gaps))
        self.assertAlmostEqual(statistics.mean(gaps) / 0.1, 1, places=1)   # mean gap 1/rate
        self.assertAlmostEqual(statistics.stdev(gaps) / 0.1, 1, places=1)  # exponential: stdev = mean
        # The load starts no run before it is due, and says how late each one started.
        settings = stream_client.LoadSettings(runs=6, rate=20, arrivals='constant')
        due_ms = [at * 1000 for at in stream_client.arrival_offsets(settings)]
        with Fixture('ok', delay=0) as fixture:
            records = self.load(fixture.url, settings)
        self.assertEqual(sorted(record['run'] for record in records), list(range(6)))
        for record in records:
            with self.subTest(run=record['run']):
                self.assertGreaterEqual(record['offset_ms'] + 0.001, due_ms[record['run']])
                self.assertAlmostEqual(record['queued_ms'], record['offset_ms'] - due_ms[record['run']], places=2)

    def test_the_command_line_writes_one_record_per_line_and_a_summary(self):
        with Fixture('mixed', profile='vllm', seed=5) as fixture:
            done = run_cli('--url', fixture.url, '--model', 'm', '--runs', '30', '--concurrency', '6',
                           '--output', 'mixed.jsonl', cwd=self.tmp.name, timeout=60)
        self.assertIn(done.returncode, (0, 1), done.stderr)
        lines = (self.dir / 'mixed.jsonl').read_text().splitlines()
        records = [json.loads(line) for line in lines]
        self.assertEqual(sorted(record['run'] for record in records), list(range(30)))
        for record in records:
            self.assertEqual(set(record) >= {'ok', 'error_layer', 'request', 'offset_ms', 'load'}, True)
            self.assertEqual(len(record['request']['prompt_sha256']), 64)
        summary = json.loads(done.stdout)
        self.assertEqual((summary['runs'], summary['ok']), (30, sum(record['ok'] for record in records)))
        self.assertEqual(done.returncode, 0 if summary['ok'] == 30 else 1)
        # one line per run that is not ok, then one per gate that failed (here the default: every run ok)
        self.assertEqual(done.stderr.count('\n'), summary['not_ok'] + (summary['not_ok'] > 0))
        if summary['not_ok']:
            self.assertEqual(done.stderr.splitlines()[-1], f'gate FAILED fail if ok_ratio < 1: {summary["ok"] / 30:g}')
        again = run_cli('--fixture', 'ok', '--runs', '2', '--output', 'mixed.jsonl', cwd=self.tmp.name)
        self.assertEqual(again.returncode, 2)
        self.assertEqual((self.dir / 'mixed.jsonl').read_text().splitlines(), lines)
        missing = run_cli('--fixture', 'ok', '--runs', '2', '--output', 'no/such/dir.jsonl', cwd=self.tmp.name)
        self.assertEqual((missing.returncode, missing.stderr.count('\n')), (2, 1))

    def test_summary_of_two_files_equals_that_of_one_holding_both(self):
        for name, seed in (('a', 1), ('b', 2)):
            with Fixture('mixed', seed=seed) as fixture:
                run_cli('--url', fixture.url, '--model', 'm', '--runs', '12', '--concurrency', '4',
                        '--output', f'{name}.jsonl', '--quiet', cwd=self.tmp.name, timeout=60)
        both = self.dir / 'both.jsonl'
        both.write_text((self.dir / 'a.jsonl').read_text() + (self.dir / 'b.jsonl').read_text())
        split = run_cli('--summary', 'a.jsonl', 'b.jsonl', cwd=self.tmp.name)
        whole = run_cli('--summary', 'both.jsonl', cwd=self.tmp.name)
        self.assertEqual(json.loads(split.stdout), json.loads(whole.stdout))
        self.assertEqual(json.loads(whole.stdout)['runs'], 24)
        self.assertEqual(split.returncode, 0 if json.loads(split.stdout)['not_ok'] == 0 else 1)

    def test_summary_recomputes_what_the_load_printed_and_refuses_mixed_sources(self):
        with Fixture('mixed', seed=3) as fixture:
            done = run_cli('--url', fixture.url, '--model', 'm', '--runs', '10', '--concurrency', '4',
                           '--output', 'load.jsonl', '--quiet', cwd=self.tmp.name, timeout=60)
        again = run_cli('--summary', 'load.jsonl', cwd=self.tmp.name)
        self.assertEqual(json.loads(again.stdout), json.loads(done.stdout))
        capture = (TRACES / 'a2_chat_stream_usage_eos_stop.http').read_bytes()
        with Fixture(replay=capture) as fixture:
            run_cli('--url', fixture.url, '--model', 'tiny', '--output', 'replay.json', cwd=self.tmp.name)
        refused = run_cli('--summary', 'load.jsonl', 'replay.json', cwd=self.tmp.name)
        self.assertEqual((refused.returncode, refused.stdout), (2, ''))
        self.assertIn('refusing to summarize records of different sources (fixture, replay)', refused.stderr)
        mixed = run_cli('--summary', 'load.jsonl', 'replay.json', '--mixed-sources', cwd=self.tmp.name)
        self.assertEqual(json.loads(mixed.stdout)['runs'], 11)
        (self.dir / 'bad.jsonl').write_text((self.dir / 'load.jsonl').read_text() + '["not a record"]\n')
        bad = run_cli('--summary', 'bad.jsonl', cwd=self.tmp.name)
        self.assertEqual((bad.returncode, bad.stderr.strip()), (2, 'stream_client.py: error: bad.jsonl line 11 is '
                                                                   'not an evidence record'))

    def test_prompts_cycle_in_order_and_a_bad_line_is_named_before_anything_is_sent(self):
        (self.dir / 'prompts.jsonl').write_text('"first"\n{"prompt": "second", "system": "terse", "max_tokens": 9}\n')
        with Fixture(delay=0) as fixture:
            seen = []
            original = fixture_server.Handler._read_request
            def spy(handler):
                request = original(handler)
                seen.append(request)
                return request
            fixture_server.Handler._read_request = spy
            try:
                done = run_cli('--url', fixture.url, '--model', 'm', '--prompts', 'prompts.jsonl', '--runs', '3',
                               '--output', 'p.jsonl', cwd=self.tmp.name)
            finally:
                fixture_server.Handler._read_request = original
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual([request['messages'][-1]['content'] for request in seen], ['first', 'second', 'first'])
        self.assertEqual((seen[1]['messages'][0], seen[1]['max_tokens'], seen[0]['max_tokens']),
                         ({'role': 'system', 'content': 'terse'}, 9, 128))
        for content, line, words in (('"a"\n{"prompt": 3}\n', 2, 'expected a JSON string, or an object'),
                                     ('"a"\n\n', 2, 'not JSON'),
                                     ('{"prompt": "a", "temp": 1}\n', 1, 'unknown keys temp'),
                                     ('{"prompt": "a", "max_tokens": 0}\n', 1, '"max_tokens" must be an integer')):
            with self.subTest(content=content):
                (self.dir / 'bad.jsonl').write_text(content)
                with Fixture() as fixture:
                    bad = run_cli('--url', fixture.url, '--model', 'm', '--prompts', 'bad.jsonl', '--runs', '2',
                                  '--output', 'bad-run.jsonl', cwd=self.tmp.name)
                    self.assertIsNone(fixture.last_request)
                self.assertEqual(bad.returncode, 2)
                self.assertEqual(bad.stderr, f'stream_client.py: error: --prompts bad.jsonl line {line}: {words}'
                                 + bad.stderr.split(words, 1)[1])
                self.assertFalse((self.dir / 'bad-run.jsonl').exists())

    def test_a_run_that_cannot_be_built_is_a_client_error_record_and_the_load_goes_on(self):
        (self.dir / 'prompts.jsonl').write_text('"one"\n"two"\n')
        (self.dir / 'tools.json').write_text(json.dumps(fixture_server.TOOLS))
        with run_building_fails_for(b'"two"'):
            done = run_cli('--fixture', 'ok', '--prompts', 'prompts.jsonl', '--tools', 'tools.json', '--runs', '4',
                           '--output', 'built.jsonl', cwd=self.tmp.name)
        self.assertEqual(done.returncode, 1, done.stderr)  # the default gate: a run is not ok
        self.assertNotIn('Traceback', done.stderr)
        with open(self.dir / 'built.jsonl', encoding='utf-8') as file:
            records = sorted((json.loads(line) for line in file), key=lambda record: record['run'])
        self.assertEqual([(r['run'], r['ok'], r['error_kind']) for r in records],
                         [(0, True, None), (1, False, 'client_error'), (2, True, None), (3, False, 'client_error')])
        self.assertIn('the client failed during the run: RuntimeError: a deliberate failure building the run',
                      records[1]['error'])
        self.assertEqual(json.loads(done.stdout)['not_ok_by_kind'], {'client_error': 2})
        again = run_cli('--summary', 'built.jsonl', cwd=self.tmp.name)  # every line a valid record
        self.assertEqual((again.returncode, json.loads(again.stdout)['runs']), (1, 4))

    def test_a_fixed_length_load_expects_length(self):
        with Fixture('length') as fixture:
            ok = run_cli('--url', fixture.url, '--model', 'm', '--max-tokens', '3', '--expect-finish', 'length',
                         '--runs', '2', '--output', 'a.jsonl', '--quiet', cwd=self.tmp.name)
            short = run_cli('--url', fixture.url, '--model', 'm', '--max-tokens', '4', '--expect-finish', 'length',
                            '--runs', '2', '--output', 'b.jsonl', '--quiet', cwd=self.tmp.name)
        self.assertEqual(json.loads(ok.stdout)['ok'], 2)
        self.assertEqual(json.loads(short.stdout)['not_ok_by_kind'],
                         {'length_tokens_differ': 2})
        stop = run_cli('--fixture', 'ok', '--expect-finish', 'length', '--output', 'c.json', cwd=self.tmp.name)
        self.assertIn('expected finish_reason=length (--expect-finish length), got finish_reason=stop', stop.stderr)
        self.assertEqual(json.loads((self.dir / 'c.json').read_text())['request']['expect_finish'], 'length')

    def test_load_flags_that_do_not_fit_exit_2(self):
        cases = {'capture with runs': ['--runs', '2', '--capture', 'c.http'], 'zero runs': ['--runs', '0'],
                 'zero concurrency': ['--runs', '2', '--concurrency', '0'], 'negative rate': ['--rate', '-1'],
                 'prompts and prompt': ['--prompts', 'p.jsonl', '--prompt', 'x'], 'unknown arrivals':
                 ['--rate', '2', '--arrivals', 'bursty'], 'missing prompts file': ['--prompts', 'absent.jsonl']}
        (self.dir / 'p.jsonl').write_text('"x"\n')
        for name, args in cases.items():
            with self.subTest(name):
                done = run_cli('--fixture', 'ok', '--output', 'run.jsonl', *args, cwd=self.tmp.name)
                self.assertEqual((done.returncode, done.stderr.count('\n')), (2, 1), done.stderr)
                self.assertFalse((self.dir / 'run.jsonl').exists())

    def test_the_runs_that_start_are_the_first_ones_whatever_the_threads_timing(self):
        cancelled, decided, ran = threading.Event(), [], []

        def admit(job: int) -> bool:
            if job == 0:
                time.sleep(0.2)  # the chance for another thread to take job 1 and decide first
            decided.append(job)
            return not cancelled.is_set()

        def work(job: int) -> None:
            ran.append(job)
            if job == 1:
                cancelled.set()
        pool = stream_client._load._Pool(2, work, admit)
        for job in range(6):
            pool.submit(job)
        pool.close()
        self.assertEqual(decided, list(range(6)))
        self.assertEqual(sorted(ran), list(range(len(ran))))
        self.assertLess(len(ran), 6)

    def test_a_run_taken_up_just_before_the_cancel_is_interrupted_and_connects_nowhere(self):
        listener = socket.create_server(('127.0.0.1', 0))
        self.addCleanup(listener.close)
        listener.setblocking(False)
        request = stream_client.prepare(f'http://127.0.0.1:{listener.getsockname()[1]}/v1/chat/completions', 'm', 'p')
        cancel = stream_client.Cancel()
        cancel.cancel('SIGTERM')
        record = stream_client._transport._run(request, stream_client._transport._Show(), None, cancel, None)
        self.assertEqual((record['error_layer'], record['error']),
                         ('interrupted', 'interrupted: SIGTERM before the request was sent'))
        with self.assertRaises(BlockingIOError):
            listener.accept()

    def test_ctrl_c_keeps_one_valid_line_per_started_run(self):
        for signum, status, presses in ((signal.SIGINT, 130, 1), (signal.SIGINT, 130, 2), (signal.SIGTERM, 143, 1)):
            with self.subTest(signal=signum.name, presses=presses), Fixture('ok', delay=0.02) as fixture:
                output = self.dir / f'{signum.name}-{presses}.jsonl'
                process = subprocess.Popen(script_command(CLIENT, '--url', fixture.url, '--model', 'm', '--runs',
                                                   '200', '--concurrency', '4', '--output', str(output)),
                                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=script_env())
                deadline = time.monotonic() + 20
                while time.monotonic() < deadline and (not output.exists() or output.read_text().count('\n') < 6):
                    time.sleep(0.05)
                for _ in range(presses):
                    process.send_signal(signum)
                    time.sleep(0.01)
                stdout, stderr = process.communicate(timeout=20)
                self.assertEqual(process.returncode, status, stderr)
                records = [json.loads(line) for line in output.read_text().splitlines()]
                self.assertEqual(sorted(record['run'] for record in records), list(range(len(records))))
                self.assertLess(len(records), 200)
                interrupted = [record for record in records if record['error_layer'] == 'interrupted']
                self.assertTrue(interrupted)
                self.assertTrue(all(signum.name in record['error'] for record in interrupted))
                self.assertEqual(json.loads(stdout)['runs'], len(records))
                self.assertEqual(json.loads(stdout)['planned_runs'], 200)
                # with the failures inside, the runs that never started and the ones cut are infinitely late
                summary = json.loads(stdout)
                self.assertEqual((summary['latency_all_runs'], summary['latency_all_never_started'],
                                  summary['latency_all_late']), (200, 200 - len(records), 200 - summary['ok']))
                ranks = (('p50', 100), ('p90', 180), ('p99', 198), ('max', 200))  # nearest ranks of 200
                self.assertEqual(summary['latency_all_ms']['first_text_ms']['late'],
                                 [name for name, rank in ranks if rank > summary['ok']])
                self.assertEqual({record['load']['runs'] for record in records}, {200})
                self.assertEqual(len({record['load']['id'] for record in records}), 1)

    def test_progress_on_a_terminal_then_the_table(self):
        status, text = run_in_terminal('--fixture', 'mixed', '--runs', '12', '--concurrency', '4', '--output',
                                       'p.jsonl', cwd=self.tmp.name)
        self.assertIn(status, (0, 1))
        self.assertRegex(text, r'\r\x1b\[Kruns \d+/12  ok \d+  not ok \d+  [\d.]+ s  p50 first text (\d+ ms|-)')
        self.assertIn('\r\x1b[Kruns 12  ok ', text)
        self.assertIn('latency of ', text)
        self.assertIn('content-event gaps', text)

    def test_on_a_terminal_the_table_replaces_the_json_line(self):
        status, text = run_in_terminal('--fixture', 'ok', '--runs', '6', '--concurrency', '2', '--output', 'c.jsonl',
                                       '--report', 'c.html', cwd=self.tmp.name, stdout_too=True)
        self.assertEqual(status, 0, text)
        self.assertRegex(text, r'p50 first text \d+ ms\r\x1b\[Kruns 6  ok 6')  # the table starts on a cleared line
        self.assertNotIn('{"runs"', text)  # 1.5 KB of JSON would wrap to a screenful before the table
        self.assertIn('(the JSON summary goes to stdout when it is redirected; or run --summary c.jsonl)', text)
        self.assertTrue(text.rstrip().endswith('report written to c.html'), text)
        for line in text.split('\r\x1b[K')[-1].splitlines():
            self.assertLessEqual(len(line), 100, line)
        status, text = run_in_terminal('--summary', 'c.jsonl', cwd=self.tmp.name, stdout_too=True)
        self.assertEqual(status, 0, text)
        self.assertIn('latency of 6 ok runs', text)
        self.assertIn('(the JSON summary goes to stdout when it is redirected)', text)

    def test_a_run_that_shows_nothing_says_what_it_waits_for(self):
        class Terminal(list):
            def isatty(self) -> bool:
                return True
            write = list.append

            def flush(self) -> None:
                pass
        request = stream_client.prepare('http://[::1]:8000/v1/chat/completions', 'm', 'p', idle=10, deadline=60)
        quiet, shown = Terminal(), Terminal()
        stream_client._views._LiveView(quiet, False).wait_notice(request)  # the timer's call, made at once
        self.assertEqual(''.join(quiet), f'waiting {stream_client._views._LiveView.WAIT_NOTICE_S:g} s so far for the '
                                         'answer from [::1]:8000; the run ends after --idle 10 s without a byte or at '
                                         '--deadline 60 s; Ctrl+C stops it and keeps the record\n')
        view = stream_client._views._LiveView(shown, False)
        view.text('READY')
        view.wait_notice(request)  # too late: something is on the screen
        self.assertEqual(shown, ['READY'])
        view.start_waiting(request)
        view.verdict(fake_record(0))
        self.assertTrue(view._timer.finished.is_set())  # the verdict cancelled the notice

    @sans_io
    def test_the_tables_fit_80_columns(self):
        summary = stream_client.Summary()
        for run in range(30):
            summary.add(fake_record(run, ok=run % 3 == 0, error=f'{stream_client.LAYERS[run % 11]}: '
                                                                f'{"a long message " * 10}{run}'))
        table = stream_client._summary._summary_table(summary.result())
        self.assertIn('not ok by layer', table)
        for line in table.splitlines():
            self.assertLessEqual(len(line), stream_client._summary._TERMINAL_COLUMNS, line)
        records = [{**fake_record(0), 'model': 'Qwen/Qwen2.5-1.5B-Instruct', 'source': 'endpoint'}] * 2
        for line in stream_client._views._compare_table(['before.json', 'after.json'], records).splitlines():
            self.assertLessEqual(len(line), stream_client._summary._TERMINAL_COLUMNS, line)

    @sans_io
    def test_a_summary_counts_the_runs_each_load_planned(self):
        def line(run: int, load_id: str | None, runs: int) -> dict:
            record = fake_record(run)
            if load_id:
                record['load'] = {'runs': runs, 'concurrency': 1, 'rate': None, 'arrivals': None, 'seed': 0,
                                  'id': load_id}
            return record
        summary = stream_client.Summary()
        for record in [line(0, 'a', 200), line(1, 'a', 200), line(0, 'b', 50), line(0, None, 1)]:
            summary.add(record)
        result = summary.result()
        self.assertEqual((result['runs'], result['planned_runs']), (4, 251))
        self.assertIn('runs 4  ok 4  not ok 0  (of 251 planned)', stream_client._summary._summary_table(result))
        report = stream_client.Report(summary)
        self.assertIn('<h1>4 of 4 runs ok  (of 251 planned)</h1>', report.html())


    def test_warm_up_runs_are_kept_and_marked_and_left_out_of_the_summary(self):
        with Fixture('ok') as fixture:
            done = run_cli('--url', fixture.url, '--model', 'm', '--runs', '7', '--warmup', '3', '--concurrency', '2',
                           '--output', 'warm.jsonl', '--quiet', cwd=self.tmp.name)
        records = [json.loads(line) for line in (self.dir / 'warm.jsonl').read_text().splitlines()]
        self.assertEqual(sorted((record['run'], record['warmup']) for record in records),
                         [(run, run < 3) for run in range(7)])
        self.assertEqual({record['load']['warmup_runs'] for record in records}, {3})
        summary = json.loads(done.stdout)
        self.assertEqual((summary['runs'], summary['warmup_runs'], summary['planned_runs']), (4, 3, 4))
        self.assertEqual(json.loads(run_cli('--summary', 'warm.jsonl', cwd=self.tmp.name).stdout), summary)
        settings = stream_client.LoadSettings(runs=10, warmup_s=2.0)
        self.assertEqual([settings.warms_up(9, offset) for offset in (0.0, 1.999, 2.0, 5.0)],
                         [True, True, False, False])
        for warmup in ('7', '0', '-1', 'x', '0s', 'nans'):
            with self.subTest(warmup=warmup):
                refused = run_cli('--fixture', 'ok', '--runs', '7', '--warmup', warmup, '--output', 'no.jsonl',
                                  cwd=self.tmp.name)
                self.assertEqual((refused.returncode, refused.stderr.count('\n')), (2, 1), refused.stderr)

    @sans_io
    def test_warm_up_runs_are_left_out_of_the_gates_and_the_report(self):
        records = [{**fake_record(run, ok=run >= 2, error=None if run >= 2 else 'transport: cut'),
                    'warmup': run < 2} for run in range(6)]
        (self.dir / 'warm.jsonl').write_text(''.join(json.dumps(record) + '\n' for record in records))
        done = run_cli('--summary', 'warm.jsonl', '--report', 'warm.html', cwd=self.tmp.name)
        summary = json.loads(done.stdout)
        self.assertEqual((done.returncode, summary['runs'], summary['not_ok'], summary['warmup_runs']), (0, 4, 0, 2))
        self.assertEqual(summary['gates'], [{'expr': 'ok_ratio < 1', 'value': 1.0, 'held': True}])
        self.assertIn('<h1>4 of 4 runs ok</h1>', (self.dir / 'warm.html').read_text())
        self.assertIn('and 2 warm-up runs, left out of every figure below',
                      stream_client._summary._summary_table(summary))
        (self.dir / 'cold.jsonl').write_text(''.join(json.dumps({**record, 'warmup': False}) + '\n'
                                                     for record in records))
        self.assertEqual(run_cli('--summary', 'cold.jsonl', cwd=self.tmp.name).returncode, 1)


    def test_csv_has_a_row_of_flat_figures_per_run_and_the_summary_as_figure_value_rows(self):
        with Fixture('mixed', seed=4) as fixture:
            done = run_cli('--url', fixture.url, '--model', 'm', '--rate', '200', '--runs', '10', '--warmup', '2',
                           '--output', 'load.jsonl', '--csv', 'load.csv', '--quiet', cwd=self.tmp.name, timeout=60)
        records = {record['run']: record
                   for record in map(json.loads, (self.dir / 'load.jsonl').read_text().splitlines())}
        with open(self.dir / 'load.csv', newline='', encoding='utf-8') as file:
            rows = list(csv.DictReader(file))
        self.assertEqual(list(rows[0]), list(stream_client._evidence._CSV_COLUMNS))
        self.assertEqual(sorted(int(row['run']) for row in rows), list(range(10)))
        for row in rows:
            record = records[int(row['run'])]
            self.assertEqual((row['ok'], row['warmup'], row['error_kind']),
                             (str(record['ok']), str(record['warmup']), record['error_kind'] or ''))
            self.assertEqual((float(row['scheduled_ms']), float(row['load.rate'])), (record['scheduled_ms'], 200.0))
            if record['first_text_ms'] is not None:
                self.assertAlmostEqual(float(row['first_text_from_schedule_ms']),
                                       record['offset_ms'] - record['scheduled_ms'] + record['first_text_ms'], places=2)
        summary = json.loads(done.stdout)
        table = run_cli('--summary', 'load.jsonl', '--format', 'csv', cwd=self.tmp.name)
        self.assertEqual(table.returncode, done.returncode)
        figures = dict(csv.reader(io.StringIO(table.stdout)))
        self.assertEqual(figures['figure'], 'value')
        self.assertEqual((figures['runs'], figures['warmup_runs']), ('8', '2'))
        self.assertEqual(figures['latency_ms.first_text_ms.p50'], str(summary['latency_ms']['first_text_ms']['p50']))
        self.assertEqual(figures['gates.0.expr'], 'ok_ratio < 1')
        self.assertEqual(figures['gates.0.held'], str(summary['gates'][0]['held']))
        for kind, count in summary['not_ok_by_kind'].items():
            self.assertEqual(figures[f'not_ok_by_kind.{kind}'], str(count))
        for args in (('--fixture', 'ok', '--runs', '2', '--output', 'x.jsonl', '--csv', 'x.jsonl'),
                     ('--fixture', 'ok', '--runs', '2', '--output', 'y.jsonl', '--report', 'y.html', '--csv', 'y.html'),
                     ('--fixture', 'ok', '--output', 'one.json', '--csv', 'one.csv'),
                     ('--fixture', 'ok', '--runs', '2', '--output', 'z.jsonl', '--format', 'csv'),
                     ('--summary', 'load.jsonl', '--format', 'markdown')):
            with self.subTest(args=args):
                refused = run_cli(*args, cwd=self.tmp.name)
                self.assertEqual((refused.returncode, refused.stderr.count('\n')), (2, 1), refused.stderr)
        self.assertEqual(sorted(path.name for path in self.dir.iterdir()), ['load.csv', 'load.jsonl'])


    def test_a_repeated_load_gives_each_figures_spread_across_its_repeats(self):
        with Fixture('ok') as fixture:
            done = run_cli('--url', fixture.url, '--model', 'm', '--runs', '4', '--rate', '50', '--repeat', '3',
                           '--seed', '7', '--output', 'fresh.jsonl', '--quiet', cwd=self.tmp.name, timeout=60)
            same = run_cli('--url', fixture.url, '--model', 'm', '--runs', '2', '--repeat', '2', '--repeat-seeds',
                           'same', '--output', 'same.jsonl', '--quiet', cwd=self.tmp.name, timeout=60)
        self.assertEqual((done.returncode, same.returncode), (0, 0), done.stderr + same.stderr)
        records = [json.loads(line) for line in (self.dir / 'fresh.jsonl').read_text().splitlines()]
        self.assertEqual(sorted((r['load']['repeat'], r['load']['seed'], r['run']) for r in records),
                         [(repeat, 7 + repeat, run) for repeat in range(3) for run in range(4)])
        self.assertEqual(len({r['load']['id'] for r in records}), 3)
        summary = json.loads(done.stdout)
        self.assertEqual((summary['runs'], summary['repeats']['count']), (12, 3))
        spread = summary['repeats']['spread']
        for repeat in range(3):
            firsts = sorted(r['first_text_ms'] for r in records if r['load']['repeat'] == repeat)
            self.assertEqual(spread['first_text_ms.p50']['values'][repeat], firsts[1])  # the nearest rank of 4
        values = spread['first_text_ms.p50']['values']
        self.assertEqual((spread['first_text_ms.p50']['min'], spread['first_text_ms.p50']['max']),
                         (min(values), max(values)))
        self.assertAlmostEqual(spread['first_text_ms.p50']['stdev'], statistics.stdev(values), places=2)
        self.assertEqual(spread['ok_ratio'], {'values': [1.0] * 3, 'min': 1.0, 'max': 1.0, 'mean': 1.0, 'stdev': 0.0})
        self.assertEqual(json.loads(run_cli('--summary', 'fresh.jsonl', cwd=self.tmp.name).stdout), summary)
        self.assertIn('across 3 repeats:', stream_client._summary._summary_table(summary))
        seeds = {json.loads(line)['load']['seed'] for line in (self.dir / 'same.jsonl').read_text().splitlines()}
        self.assertEqual(seeds, {0})
        for args in (('--runs', '2', '--repeat', '1'), ('--repeat', '2'), ('--runs', '2', '--repeat-seeds', 'same'),
                     ('--rates', '1,2', '--duration', '1', '--repeat', '2')):
            with self.subTest(args=args):
                refused = run_cli('--fixture', 'ok', *args, '--output', 'no.jsonl', cwd=self.tmp.name)
                self.assertEqual((refused.returncode, refused.stderr.count('\n')), (2, 1), refused.stderr)


class GoodputTests(unittest.TestCase):
    """Goodput: runs that are ok and within every --slo bound; sweeps of open-loop steps to saturation."""

    def setUp(self) -> None:
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.dir = Path(self.tmp.name)

    def records(self, name: str) -> list[dict]:
        return [json.loads(line) for line in (self.dir / name).read_text().splitlines()]

    def interrupted_load(self, name: str, *args: str, after: int) -> tuple[int, dict, str, list[dict]]:
        """A load of the command line stopped by SIGINT once ``after`` records are in its file: its exit
        status, its summary, its stderr and its records."""
        with Fixture('ok', delay=0.05) as fixture:
            output = self.dir / name
            process = subprocess.Popen(script_command(CLIENT, '--url', fixture.url, '--model', 'm', *args,
                                              '--output', str(output)), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                       text=True, env=script_env())
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and (not output.exists() or output.read_text().count('\n') < after):
                time.sleep(0.05)
            process.send_signal(signal.SIGINT)
            stdout, stderr = process.communicate(timeout=30)
        return process.returncode, json.loads(stdout), stderr, self.records(name)

    def test_goodput_counts_exactly_the_ok_runs_within_every_bound(self):
        with Fixture('mixed', seed=11, delay=0.01) as fixture:
            done = run_cli('--url', fixture.url, '--model', 'm', '--runs', '40', '--concurrency', '8', '--idle', '2',
                           '--slo', 'first_text_ms=30000', '--slo', 'max_event_gap_ms=30000',
                           '--output', 'mixed.jsonl', '--quiet', cwd=self.tmp.name, timeout=90)
        summary, records = json.loads(done.stdout), self.records('mixed.jsonl')
        bounds = (('first_text_ms', 30000), ('max_event_gap_ms', 30000))
        good = [r for r in records if r['ok'] and stream_client._summary._meets_slos(r, bounds)]
        self.assertEqual(summary['good'], len(good))
        self.assertLess(summary['good'], summary['runs'])  # mixed serves failures too: some runs are not good
        self.assertEqual(summary['slo_attainment'], round(len(good) / len(records), 4))
        self.assertEqual(summary['slo'], {'first_text_ms': 30000.0, 'max_event_gap_ms': 30000.0})
        first_chunk = [r for r in records if 200 <= ((r['http'] or {}).get('status') or 0) < 300
                       and r['first_text_ms'] is not None]
        self.assertEqual(summary['first_chunk_good'], len(first_chunk))
        self.assertGreater(summary['first_chunk_good'], summary['good'])  # cut streams after a first chunk
        # a tighter bound read back from the same evidence: fewer good runs, the same runs
        tight = json.loads(run_cli('--summary', 'mixed.jsonl', '--slo', 'first_text_ms=0.001',
                                   cwd=self.tmp.name).stdout)
        self.assertEqual((tight['good'], tight['runs']), (0, summary['runs']))
        self.assertEqual(json.loads(run_cli('--summary', 'mixed.jsonl', cwd=self.tmp.name).stdout), summary)

    def test_a_cut_stream_is_never_good_however_fast_it_was(self):
        for mode in ('broken', 'no-done', 'truncated'):
            with self.subTest(mode=mode), Fixture(mode) as fixture:
                done = run_cli('--url', fixture.url, '--model', 'm', '--runs', '6', '--concurrency', '3', '--idle', '2',
                               '--slo', 'first_text_ms=60000', '--slo', 'duration_ms=60000',
                               '--output', f'{mode}.jsonl', '--quiet', cwd=self.tmp.name, timeout=60)
                summary = json.loads(done.stdout)
                self.assertEqual((summary['ok'], summary['good'], summary['goodput_per_s']), (0, 0, 0.0))
                self.assertEqual(summary['first_chunk_good'], 6)  # what a first-chunk tool reports

    @sans_io
    def test_a_bound_on_a_figure_the_run_lacks_is_not_met(self):
        ok = {'ok': True, 'first_text_ms': 10.0, 'duration_ms': 50.0, 'mean_event_gap_ms': None,
              'max_event_gap_ms': None}
        # one content event: no gap
        self.assertTrue(stream_client._summary._meets_slos(ok, (('max_event_gap_ms', 5.0),)))
        self.assertFalse(stream_client._summary._meets_slos({**ok, 'first_text_ms': None},
                                                            (('max_event_gap_ms', 5.0),)))
        self.assertFalse(stream_client._summary._meets_slos({**ok, 'first_text_ms': None}, (('first_text_ms', 5.0),)))
        self.assertFalse(stream_client._summary._meets_slos(ok, (('duration_ms', 49.9),)))
        self.assertTrue(stream_client._summary._meets_slos(ok, (('duration_ms', 50.0),)))

    @sans_io
    def test_the_saturation_step_is_the_last_under_capacity_and_says_what_failed_next(self):
        def step(rate, attainment, achieved=None, scheduled=None, interrupted=False):
            return {'rate': rate, 'slo_attainment': attainment, 'achieved_rate': rate if achieved is None else achieved,
                    'scheduled_rate': rate if scheduled is None else scheduled, 'interrupted': interrupted}
        cases = [([step(1, 1.0), step(2, 0.995), step(4, 0.9), step(8, 1.0)], (2, 4, 'attainment 0.9')),
                 # a step cut by Ctrl+C is not judged, however its runs fared, nor any after it
                 ([step(1, 1.0), step(2, 0.5, achieved=0.4, interrupted=True)],
                  (1, None, 'the sweep was cut during the step at 2 runs/s, which is not judged; every whole step '
                            'before it met the target')),
                 ([step(1, 0.2, interrupted=True)], (None, None, 'cut during the step at 1 runs/s, which is not '
                                                                 'judged; no whole step came before it')),
                 ([step(1, 0.2), step(2, 0.2, interrupted=True)], (None, 1, 'attainment 0.2')),
                 ([step(1, 1.0), step(2, 1.0, achieved=1.89)], (1, 2, '1.89 runs/s started')),
                 ([step(1, 1.0), step(2, 1.0, achieved=1.91)], (2, None, 'every step met the target')),
                 ([step(1, 0.5)], (None, 1, 'attainment 0.5')),
                 ([step(1, None)], (None, 1, 'attainment None'))]
        for steps, (rate, exceeded, why) in cases:
            with self.subTest(steps=steps):
                found = stream_client._summary._saturation_step(steps, 0.99)
                self.assertEqual((found['rate'], found['exceeded_at']), (rate, exceeded))
                self.assertIn(why, found['why'])

    @sans_io
    def test_the_schedule_of_a_timed_step_is_computed_in_advance(self):
        self.assertEqual(stream_client._load._scheduled_runs(4, 'constant', 0, 1.0), 4)
        self.assertEqual(stream_client._load._scheduled_runs(4, 'constant', 0, 1.01), 5)
        settings = stream_client.LoadSettings(runs=stream_client._load._scheduled_runs(50, 'poisson', 3, 2.0), rate=50,
                                              seed=3, duration=2.0)
        offsets = list(stream_client.arrival_offsets(settings))
        self.assertTrue(offsets and max(offsets) < 2.0)
        self.assertEqual(len(offsets), settings.runs)
        longer = list(stream_client.arrival_offsets(dataclasses.replace(settings, runs=settings.runs + 1)))
        self.assertGreaterEqual(longer[-1], 2.0)  # the next arrival falls outside the duration

    def test_a_sweep_names_the_step_past_a_server_of_known_capacity(self):
        # The server answers one request at a time, each in at least 7 fixture delays of 10 ms: a capacity
        # of at most 14 runs/s. At 2 runs/s nothing waits; at 40 runs/s run k waits at least 45k ms, so
        # from the twelfth run on every run is past the 500 ms bound: 8 of the 20 at least.
        one_at_a_time = threading.Lock()
        answer = fixture_server.Handler._answer

        def answer_alone(handler, *plan) -> None:
            with one_at_a_time:
                answer(handler, *plan)
        with mock.patch.object(fixture_server.Handler, '_answer', answer_alone), Fixture('ok', delay=0.01) as fixture:
            done = run_cli('--url', fixture.url, '--model', 'm', '--rates', '40,2', '--duration', '0.5',
                           '--arrivals', 'constant', '--slo', 'first_text_ms=500', '--deadline', '30', '--idle', '30',
                           '--output', 'sweep.jsonl', '--report', 'sweep.html', '--quiet', cwd=self.tmp.name,
                           timeout=120)
        self.assertIn(done.returncode, (0, 1), done.stderr)
        summary, records = json.loads(done.stdout), self.records('sweep.jsonl')
        self.assertEqual([step['rate'] for step in summary['steps']], [2.0, 40.0])
        self.assertEqual([step['scheduled_runs'] for step in summary['steps']], [1, 20])
        self.assertEqual({(r['load']['step'], r['load']['rate']) for r in records}, {(0, 2.0), (1, 40.0)})
        self.assertEqual((summary['saturation_rate'], summary['saturation']['exceeded_at']), (2.0, 40.0))
        self.assertIn('under the target 0.99', summary['saturation']['why'])
        self.assertEqual(sum(step['good'] for step in summary['steps']), summary['good'])
        self.assertEqual(json.loads(run_cli('--summary', 'sweep.jsonl', cwd=self.tmp.name).stdout), summary)
        page = (self.dir / 'sweep.html').read_text()
        self.assertIn('<h2>Sweep</h2>', page)
        self.assertIn('up to 2 runs/s', page)

    def test_latency_from_the_schedule_shows_a_stall_that_latency_from_the_send_hides(self):
        # The server stalls once, its first request for 1 s; one run in flight at a time, due every 50 ms.
        # From their sends, 29 of the 30 runs are fast and p90 hides the stall; from the schedule, run k (due
        # at 50k ms) cannot start before run 0 ends, after at least 1,000 ms: runs 1 to 3 are at least 850 ms
        # late, so p90 (the 4th largest of 30) is at least 850 ms.
        stalled = threading.Event()
        answer = fixture_server.Handler._answer

        def stall_once(handler, *plan) -> None:
            if not stalled.is_set():
                stalled.set()
                time.sleep(1.0)
            answer(handler, *plan)
        with mock.patch.object(fixture_server.Handler, '_answer', stall_once), Fixture('ok') as fixture:
            done = run_cli('--url', fixture.url, '--model', 'm', '--rate', '20', '--runs', '30', '--concurrency', '1',
                           '--arrivals', 'constant', '--slo', 'first_text_from_schedule_ms=500',
                           '--fail-if', 'first_text_from_schedule_ms.p90 > 500', '--fail-if', 'first_text_ms.p90 > 500',
                           '--output', 'stall.jsonl', '--quiet', cwd=self.tmp.name, timeout=60)
        summary, records = json.loads(done.stdout), self.records('stall.jsonl')
        self.assertEqual(sorted(record['scheduled_ms'] for record in records), [50.0 * run for run in range(30)])
        self.assertTrue(all(record['ok'] for record in records))
        first = next(record for record in records if record['run'] == 0)
        self.assertGreaterEqual(first['first_text_ms'], 1000)
        from_send = sorted(record['first_text_ms'] for record in records)
        from_schedule = sorted(record['offset_ms'] - record['scheduled_ms'] + record['first_text_ms']
                               for record in records)
        latency = summary['latency_ms']
        self.assertEqual(latency['first_text_ms']['p90'], from_send[26])
        self.assertAlmostEqual(latency['first_text_from_schedule_ms']['p90'], from_schedule[26], places=2)
        self.assertLess(latency['first_text_ms']['p90'], first['first_text_ms'])  # the stall is one run of 30
        self.assertGreaterEqual(latency['first_text_from_schedule_ms']['p90'], 850)
        self.assertEqual(summary['good'], sum(value <= 500 for value in from_schedule))
        self.assertEqual([gate['held'] for gate in summary['gates']], [False, True])
        self.assertEqual(done.returncode, 1)
        self.assertEqual(json.loads(run_cli('--summary', 'stall.jsonl', cwd=self.tmp.name).stdout)['latency_ms'],
                         latency)

    def test_a_concurrency_sweep_runs_its_steps_in_order_and_judges_them_by_the_knee_rule(self):
        # The server answers at most 4 requests at once, each in at least 7 fixture delays of 10 ms. Which step
        # is the knee depends on wall times, so on the machine: the knee's rule is asserted on given goodputs
        # (test_the_knee_is_the_last_concurrency_whose_goodput_grew_by_half_its_share); here, what the sweep ran
        # and that its summary applies the rule to what it measured.
        four_at_a_time = threading.Semaphore(4)
        answer = fixture_server.Handler._answer

        def answer_four(handler, *plan) -> None:
            with four_at_a_time:
                answer(handler, *plan)
        with mock.patch.object(fixture_server.Handler, '_answer', answer_four), Fixture('ok', delay=0.01) as fixture:
            done = run_cli('--url', fixture.url, '--model', 'm', '--concurrencies', '8,1,4', '--runs', '8',
                           '--output', 'knee.jsonl', '--quiet', cwd=self.tmp.name, timeout=120)
        self.assertEqual(done.returncode, 0, done.stderr)
        summary, records = json.loads(done.stdout), self.records('knee.jsonl')
        self.assertEqual({(r['load']['step'], r['load']['concurrency']) for r in records}, {(0, 1), (1, 4), (2, 8)})
        levels = summary['concurrency_steps']
        self.assertEqual([(level['concurrency'], level['runs'], level['ok']) for level in levels],
                         [(1, 8, 8), (4, 8, 8), (8, 8, 8)])
        self.assertEqual(summary['knee'], stream_client._summary._knee(levels))
        # at 8 in flight, 4 runs wait for a slot: for a run to end (at least 70 ms), then 3 delays to first text
        self.assertGreaterEqual(levels[2]['latency_ms']['first_text_ms']['p90'], 100)
        self.assertEqual(json.loads(run_cli('--summary', 'knee.jsonl', cwd=self.tmp.name).stdout), summary)
        self.assertIn(f'knee at {summary["knee"]["concurrency"]} in flight',
                      stream_client._summary._summary_table(summary))
        for args in (('--concurrencies', '1,4'), ('--concurrencies', '1,x', '--runs', '2'),
                     ('--concurrencies', '1,1', '--runs', '2'),
                     ('--concurrencies', '1,2', '--runs', '2', '--rate', '3'),
                     ('--concurrencies', '1,2', '--runs', '2', '--concurrency', '3')):
            with self.subTest(args=args):
                refused = run_cli('--fixture', 'ok', *args, '--output', 'no.jsonl', cwd=self.tmp.name)
                self.assertEqual((refused.returncode, refused.stderr.count('\n')), (2, 1), refused.stderr)

    @sans_io
    def test_the_knee_is_the_last_concurrency_whose_goodput_grew_by_half_its_share(self):
        def levels(*goodputs: tuple[int, float]) -> list[dict]:
            return [{'concurrency': c, 'goodput_per_s': g, 'latency_ms': {'first_text_ms': {'p50': 10.0 * c}}}
                    for c, g in goodputs]
        # a server that answers 4 at a time, 8 runs a step in rounds of T: 8 rounds at 1 in flight, 2 at 4 and 8
        four_at_a_time = levels((1, 8 / 8), (4, 8 / 2), (8, 8 / 2))
        cases = [(four_at_a_time, (4, 8, 'from 4 to 8 runs in flight goodput grew 0.0%, under half of 100%, while '
                                         'first text p50 went from 40.0 ms to 80.0 ms')),
                 # a busy machine blurs a step by tens of per cent, not by half: the same knee
                 (levels((1, 1.0), (4, 4.0 * 0.85), (8, 4.0 * 1.15)), (4, 8, 'grew 35.3%, under half of 100%')),
                 (levels((1, 1.0), (2, 1.5), (4, 2.0)), (2, 4, 'grew 33.3%, under half of 100%')),  # 50% counts
                 (levels((1, 1.0), (2, 1.6), (4, 2.5)), (4, None, 'the knee lies above the highest')),
                 (levels((1, 1.0), (2, 1.49)), (1, 2, 'grew 49.0%, under half of 100%')),
                 (levels((1, 0.0), (2, 1.0)), (1, 2, 'no goodput to compare')),
                 (levels((1, 1.0)), (1, None, 'the knee lies above the highest'))]
        for steps, (knee, past, why) in cases:
            with self.subTest(steps=steps):
                found = stream_client._summary._knee(steps)
                self.assertEqual((found['concurrency'], found['past']), (knee, past))
                self.assertIn(why, found['why'])

    @sans_io
    def test_a_capacity_search_bisects_on_its_probes_verdicts(self):
        # The search's decisions from given verdicts: a server whose capacity is 40 runs/s passes every probe
        # at or under 40 and fails every one above, however fast the machine that runs the test.
        def search(low: float, high: float, capacity: float, unjudged: float | None = None) -> list[float]:
            verdicts = []
            while (rate := stream_client._steps._next_probe(low, high, verdicts, 0.05)) is not None:
                verdicts.append((rate, None if rate == unjudged else rate <= capacity))
            return [rate for rate, _ in verdicts]
        probes = search(10, 80, 40)
        self.assertEqual(probes, [10, 80, 45, 27.5, 36.25, 40.625, 38.438, 39.532])  # LO, HI, then the middles
        steps = [{'rate': rate, 'slo_attainment': 1.0 if rate <= 40 else 0.5, 'achieved_rate': rate,
                  'scheduled_rate': rate, 'interrupted': False} for rate in sorted(probes)]
        found = stream_client._summary._saturation_step(steps, 0.99)  # what the summary makes of the probes
        self.assertEqual((found['rate'], found['exceeded_at']), (39.532, 40.625))
        self.assertLessEqual(40.625 - 39.532, 0.05 * 40.625)
        self.assertEqual(search(10, 80, 5), [10])  # LO fails: the capacity is below it
        self.assertEqual(search(10, 80, 100), [10, 80])  # HI passes: at least HI
        self.assertEqual(search(10, 80, 40, unjudged=27.5), [10, 80, 45, 27.5])  # no run of a probe ran: stop
        self.assertEqual(search(10, 80, 40, unjudged=10), [10])
        self.assertEqual(search(38, 40, 39), [38, 40])  # LO and HI within 5% already: nothing between

    def test_a_capacity_search_of_the_fixture_keeps_every_probe_and_follows_their_verdicts(self):
        # --fixture capacity starts at most 20 answers per second. Which probes pass depends on the machine's
        # speed; what the search does with their verdicts does not: each probe is the one _next_probe chooses
        # from the verdicts of those before, as the summary judged them.
        done = run_cli('--fixture', 'capacity', '--find-capacity', '10:80', '--duration', '0.3', '--arrivals',
                       'constant', '--slo', 'first_text_ms=70', '--slo-target', '0.8', '--output', 'capacity.jsonl',
                       '--quiet', cwd=self.tmp.name, timeout=120)
        self.assertEqual(done.returncode, 0, done.stderr)  # every run ok: the default gate holds
        summary, records = json.loads(done.stdout), self.records('capacity.jsonl')
        self.assertEqual(stream_client._load._scheduled_runs(10, 'constant', 0, 1.0), 10)  # not 11: no summed rounding
        steps = {step['rate']: step for step in summary['steps']}
        probed = [rate for _, rate in sorted({(r['load']['step'], r['load']['rate']) for r in records})]
        verdicts = [(rate, stream_client._summary._saturation_step([steps[rate]], 0.8)['rate'] is not None)
                    for rate in probed]
        for number, rate in enumerate(probed):
            self.assertEqual(stream_client._steps._next_probe(10, 80, verdicts[:number], 0.05), rate, verdicts)
        self.assertIsNone(stream_client._steps._next_probe(10, 80, verdicts, 0.05), verdicts)
        self.assertEqual(sorted(probed), sorted(steps))
        capacity = summary['capacity']
        self.assertEqual(capacity, {'rate': summary['saturation_rate'], 'probes': len(probed),
                                    'bracket': [summary['saturation_rate'], summary['saturation']['exceeded_at']]})
        self.assertEqual({tuple(r['load']['search']) for r in records}, {(10.0, 80.0)})
        self.assertEqual(len(records), sum(step['scheduled_runs'] for step in summary['steps']))
        self.assertEqual(json.loads(run_cli('--summary', 'capacity.jsonl', cwd=self.tmp.name).stdout), summary)
        if capacity['rate'] is not None:
            self.assertIn(f'capacity {capacity["rate"]:g} runs/s at the target',
                          stream_client._summary._summary_table(summary))
        for args in (('--find-capacity', '10:80'), ('--find-capacity', '80:10', '--duration', '1'),
                     ('--find-capacity', '10', '--duration', '1'), ('--find-capacity', '1:8', '--duration', '1',
                                                                   '--rate', '3')):
            with self.subTest(args=args):
                refused = run_cli('--fixture', 'ok', *args, '--output', 'no.jsonl', cwd=self.tmp.name)
                self.assertEqual((refused.returncode, refused.stderr.count('\n')), (2, 1), refused.stderr)

    def test_a_step_whose_runs_cannot_start_on_time_is_past_capacity(self):
        # One run in flight at a time, each at least 7 fixture delays of 10 ms long: at most about 14 starts
        # per second, under 95% of the 20 per second scheduled, however fast the machine.
        with Fixture('ok', delay=0.01) as fixture:
            done = run_cli('--url', fixture.url, '--model', 'm', '--rates', '20', '--duration', '1', '--concurrency',
                           '1', '--arrivals', 'constant', '--output', 'late.jsonl', '--quiet', cwd=self.tmp.name,
                           timeout=120)
        summary = json.loads(done.stdout)
        step = summary['steps'][0]
        self.assertEqual((step['scheduled_runs'], step['runs'], step['ok']), (20, 20, 20))
        self.assertLess(step['achieved_rate'], 0.95 * step['scheduled_rate'])
        self.assertEqual((summary['saturation_rate'], summary['saturation']['exceeded_at']), (None, 20.0))
        self.assertIn('runs/s started', summary['saturation']['why'])

    def test_ctrl_c_in_a_sweep_keeps_every_started_run_and_the_steps_done(self):
        status, summary, stderr, records = self.interrupted_load('sweep.jsonl', '--rates', '4,8', '--duration', '5',
                                                                 after=3)
        self.assertEqual(status, 130, stderr)
        self.assertEqual(summary['runs'], len(records))
        self.assertEqual([step['rate'] for step in summary['steps']], [4.0])  # the second step never started
        self.assertLess(len(records), summary['steps'][0]['scheduled_runs'])
        # the cut step is marked, and not judged as if it had run in full
        self.assertTrue(summary['steps'][0]['interrupted'])
        self.assertEqual(summary['saturation'], {'rate': None, 'exceeded_at': None, 'why': 'the sweep was cut during '
                         'the step at 4 runs/s, which is not judged; no whole step came before it'})
        again = run_cli('--summary', 'sweep.jsonl', '--report', 'sweep.html', cwd=self.tmp.name)
        self.assertEqual((again.returncode, json.loads(again.stdout or 'null')), (1, summary), again.stderr)
        self.assertIn(['4 (cut)'], [cells[:1] for cells in PageReader((self.dir / 'sweep.html').read_text()).cells])
        table = stream_client._summary._summary_table(summary).splitlines()
        step = next(line for line in table if line.startswith('       4'))  # the step's row
        self.assertTrue(step.endswith('  cut'), table)
        self.assertLessEqual(len(step), stream_client._summary._TERMINAL_COLUMNS)

    @sans_io
    def test_a_cancel_calls_its_hooks_once_at_once(self):
        cancel, called = stream_client.Cancel(), []
        cancel.on_cancel(lambda reason: called.append(('before', reason)))
        gone = lambda reason: called.append(('forgotten', reason))  # noqa: E731
        cancel.on_cancel(gone)
        cancel.forget(gone)
        cancel.cancel('SIGTERM')
        cancel.cancel('SIGINT')  # a second cancel changes nothing
        self.assertEqual(called, [('before', 'SIGTERM')])
        cancel.on_cancel(lambda reason: called.append(('after', reason)))
        self.assertEqual(called, [('before', 'SIGTERM'), ('after', 'SIGTERM')])

    def test_a_spread_load_tells_its_workers_before_the_cancel_returns(self):
        server = subprocess.Popen(script_command(FIXTURE_SCRIPT, '--port', '0', '--mode', 'stall'),
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=script_env())
        self.addCleanup(lambda: (server.kill(), server.communicate()))
        url = server.stdout.readline().split()[-1]
        records, cancel, told, listening = [], stream_client.Cancel(), [], threading.Event()
        write, on_cancel = os.write, cancel.on_cancel

        def watched_write(fd: int, data: bytes) -> int:
            if data.startswith(b'SIGINT'):
                told.append(data)
            return write(fd, data)

        def watched_on_cancel(hook) -> None:
            on_cancel(hook)
            listening.set()
        with mock.patch.object(os, 'write', watched_write), mock.patch.object(cancel, 'on_cancel', watched_on_cancel):
            load = threading.Thread(target=stream_client.run_load, args=(
                [stream_client.prepare(url, 'm', 'p', idle=30)],
                stream_client.LoadSettings(runs=40, concurrency=4, processes=2), records.append, cancel))
            load.start()
            self.assertTrue(listening.wait(30))  # the workers are forked, and the load waits for its cancel
            cancel.cancel('SIGINT')
            self.assertEqual(told, [b'SIGINT'.ljust(16) * 2])  # written by cancel() itself, not later
            load.join(30)
        self.assertFalse(load.is_alive())
        # stalled: only the cancel ends them
        self.assertLessEqual({record['error_layer'] for record in records}, {'interrupted'})

    @sans_io
    def test_telling_workers_that_have_all_ended_is_no_error(self):
        read, write = os.pipe()
        os.close(read)  # every worker has ended: EPIPE
        try:
            stream_client._processes._tell_workers(write, 'SIGINT', 2)
        finally:
            os.close(write)

    def test_a_spread_load_forks_every_worker_before_it_starts_a_thread(self):
        # A fork copies only the thread that calls it; a lock another thread holds stays locked in the child.
        forked, fork = [], os.fork

        def watched_fork() -> int:
            forked.append(set(threading.enumerate()))
            return fork()
        server = subprocess.Popen(script_command(FIXTURE_SCRIPT, '--port', '0', '--delay', '0.002'),
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=script_env())
        self.addCleanup(lambda: (server.kill(), server.communicate()))
        url = server.stdout.readline().split()[-1]  # a server in a process of its own: no thread of it here
        records, before = [], set(threading.enumerate())
        with mock.patch.object(os, 'fork', watched_fork):
            stream_client.run_load([stream_client.prepare(url, 'm', 'p')],
                                   stream_client.LoadSettings(runs=6, concurrency=3, processes=3), records.append,
                                   stream_client.Cancel())
        self.assertEqual(sorted(record['run'] for record in records), list(range(6)))
        self.assertEqual(len(forked), 3)
        for threads in forked:  # threads of earlier tests may end meanwhile; none may begin
            self.assertLessEqual(threads, before)

    def test_a_load_spread_over_processes_is_counted_exactly_in_one_file(self):
        layers = {mode: row.verdict.error_layer for mode, row in FIXTURE_EXPECTED.items()}
        with Fixture('mixed', seed=4, delay=0.005) as fixture:
            done = run_cli('--url', fixture.url, '--model', 'm', '--runs', '45', '--concurrency', '6', '--processes',
                           '3', '--idle', '2', '--output', 'spread.jsonl', '--quiet', cwd=self.tmp.name, timeout=90)
            served = fixture.instance.schedule.served
        records, summary = self.records('spread.jsonl'), json.loads(done.stdout)
        self.assertEqual(sorted(record['run'] for record in records), list(range(45)))
        self.assertEqual({record['load']['id'] for record in records}
                         | {record['load']['processes'] for record in records},
                         {records[0]['load']['id'], 3})
        expected = collections.Counter()
        for mode, count in served.items():
            if layers[mode]:
                expected[layers[mode]] += count
        self.assertEqual(summary['not_ok_by_layer'], dict(expected))
        self.assertEqual((summary['runs'], summary['ok']), (45, served['ok']))

    def test_a_spread_load_on_the_built_in_fixture_forks_without_a_thread_and_without_a_warning(self):
        # Python 3.12 and later warn when a process with a thread alive forks: the fixture's server thread was.
        interpreters = [sys.executable] if sys.version_info >= (3, 12) else sorted(
            str(path) for root in {os.environ.get('PYENV_ROOT', ''), str(Path.home() / '.pyenv')} if root
            for path in Path(root).glob('versions/3.1[2-9]*/bin/python3'))
        if not interpreters:
            self.skipTest('no CPython 3.12 or later here to show the warning')
        for number, python in enumerate(interpreters):
            with self.subTest(python):
                command = script_command(CLIENT, '--fixture', 'ok', '--runs', '4', '--concurrency', '2', '--processes',
                                         '2', '--output', f'spread{number}.jsonl')
                command[:2] = [python, '-S', '-W', 'always::DeprecationWarning']
                done = subprocess.run(command, cwd=self.tmp.name, capture_output=True, text=True, timeout=60,
                                      env=script_env(), stdin=subprocess.DEVNULL)
                self.assertEqual((done.returncode, done.stderr), (0, ''))
                self.assertEqual(json.loads(done.stdout)['ok'], 4)

    def test_the_fixture_of_a_spread_load_serves_from_its_own_process(self):
        threads = threading.active_count()
        fixture = stream_client._args._Fixture('ok', 'vllm', 'chat', 0, own_process=True)
        try:
            self.assertEqual(threading.active_count(), threads)  # nothing alive here for the workers' forks
            record = stream(fixture.url, 'm', 'p')
        finally:
            fixture.close()
        self.assertTrue(record['ok'], record['error'])
        self.assertEqual(record['source'], 'fixture')
        with self.assertRaises(ChildProcessError):  # ended and reaped
            os.waitpid(fixture.pid, os.WNOHANG)

    def test_a_worker_process_that_dies_leaves_a_load_that_says_what_it_lost_and_exits_1(self):
        # A worker process that dies mid-load (a bug, the kernel's OOM killer) took runs with it: the load
        # ran to its end, so every planned run should have a record. One warning line and exit 1, never 0.
        real_build = stream_client._record._build_record

        def die_in_run_5(x):
            record = real_build(x)
            if b'"die"' in x.request.body:
                os._exit(3)
            return record
        prompts = self.dir / 'prompts.txt'
        prompts.write_text(''.join(json.dumps(text) + '\n' for text in ('a', 'b', 'c', 'd', 'e', 'die') * 2))
        with mock.patch.object(stream_client._machine, '_build_record', die_in_run_5), \
                mock.patch.object(stream_client._transport, '_build_record', die_in_run_5), \
                contextlib.redirect_stdout(io.StringIO()):  # the engine's, and worker threads' (no epoll)
            done = run_in_process('--fixture', 'ok', '--prompts', str(prompts), '--runs', '12', '--concurrency', '2',
                                  '--processes', '2', '--output', 'died.jsonl', cwd=self.tmp.name)
        self.assertEqual(done.returncode, 1, done.stderr)
        lost = [line for line in done.stderr.splitlines() if 'planned run' in line]
        self.assertEqual(len(lost), 1, done.stderr)
        self.assertRegex(lost[0], r'^stream_client\.py: warning: the load ran to its end, but not every planned run '
                                  r'has a record: load [0-9a-f]+: \d+ of 12 planned runs ha(s|ve) no record')
        self.assertNotIn('Traceback', done.stderr)

    def test_the_runs_of_a_spread_load_run_in_other_processes(self):
        # _build_record is wrapped before the fork (the engine's, and worker threads' where there is no epoll), so
        # each worker's records say which process ran them
        real_build = stream_client._record._build_record

        def say_where(x):
            return {**real_build(x), 'pid': os.getpid()}
        records: list[dict] = []
        with Fixture('ok') as fixture, mock.patch.object(stream_client._machine, '_build_record', say_where), \
                mock.patch.object(stream_client._transport, '_build_record', say_where):
            requests = [stream_client.prepare(fixture.url, 'm', 'p')]
            stream_client.run_load(requests, stream_client.LoadSettings(runs=12, concurrency=4, processes=2),
                                   records.append, stream_client.Cancel())
        self.assertEqual(sorted(record['run'] for record in records), list(range(12)))
        by_pid = collections.defaultdict(set)
        for record in records:
            by_pid[record['pid']].add(record['run'] % 2)
        self.assertNotIn(os.getpid(), by_pid)
        self.assertEqual(sorted(by_pid.values(), key=min), [{0}, {1}])  # each process its share of the runs

    def test_ctrl_c_in_a_spread_load_keeps_one_valid_line_per_started_run(self):
        status, summary, stderr, records = self.interrupted_load('spread.jsonl', '--runs', '200', '--concurrency', '4',
                                                                 '--processes', '2', after=6)
        self.assertEqual(status, 130, stderr)
        self.assertEqual(len({record['run'] for record in records}), len(records))
        self.assertLess(len(records), 200)
        interrupted = [record for record in records if record['error_layer'] == 'interrupted']
        self.assertTrue(interrupted)
        self.assertTrue(all('SIGINT' in record['error'] for record in interrupted))
        self.assertEqual((summary['runs'], summary['planned_runs']), (len(records), 200))

    @sans_io
    def test_sweep_and_slo_flags_that_do_not_fit_exit_2_with_one_line(self):
        cases = {'unknown figure': ['--runs', '2', '--slo', 'ttft=100'],
                 'no bound': ['--runs', '2', '--slo', 'duration_ms'],
                 'negative bound': ['--runs', '2', '--slo', 'duration_ms=-5'], 'bound twice':
                 ['--runs', '2', '--slo', 'duration_ms=5', '--slo', 'duration_ms=6'],
                 'negative rate': ['--rates', '2,-1', '--duration', '1'],
                 'zero rate': ['--rates', '0', '--duration', '1'],
                 'duplicate rate': ['--rates', '2,4,2', '--duration', '1'],
                 'not a rate': ['--rates', '2,x', '--duration', '1'],
                 'duration with runs': ['--rate', '2', '--duration', '1', '--runs', '3'],
                 'rates without duration': ['--rates', '1,2'],
                 'rates and rate': ['--rates', '1,2', '--rate', '3', '--duration', '1'],
                 'duration without a rate': ['--duration', '1'],
                 'negative duration': ['--rate', '2', '--duration', '-1'],
                 'target above 1': ['--runs', '2', '--slo-target', '1.5'], 'slo on one run': ['--slo', 'duration_ms=5'],
                 'no processes': ['--runs', '2', '--processes', '0'], 'processes on one run': ['--processes', '2']}
        output = str(self.dir / 'run.jsonl')
        for name, args in cases.items():
            with self.subTest(name):  # in this process: each is refused before a fixture starts or a file is made
                with contextlib.redirect_stderr(io.StringIO()) as stderr, mock.patch('signal.signal'):
                    status = stream_client.main(['--fixture', 'ok', '--output', output, *args])
                self.assertEqual((status, stderr.getvalue().count('\n')), (2, 1), stderr.getvalue())
                self.assertFalse(os.path.exists(output))


class SummaryReadingTests(unittest.TestCase):
    """--summary of files that are not whole: a field of the wrong type, a cut line, no record at all."""

    def setUp(self) -> None:
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.dir = Path(self.tmp.name)

    def write(self, name: str, lines: list) -> None:
        (self.dir / name).write_bytes(b''.join((line if isinstance(line, bytes) else json.dumps(line).encode())
                                               + b'\n' for line in lines))

    @sans_io
    def test_a_field_of_the_wrong_type_is_one_line_naming_the_file_the_line_and_the_field(self):
        def edited(**fields) -> dict:
            record = fake_record(1)
            for name, value in fields.items():
                outer, _, inner = name.partition('__')
                if inner:
                    record[outer] = {**record[outer], inner: value}
                elif value is None:
                    del record[outer]
                else:
                    record[outer] = value
            return record
        cases = {
            'a word for a number': (edited(duration_ms='fast'), '"duration_ms" must be a number or null, not "fast"'),
            'a number as text': (edited(load__runs='3'), '"load.runs" must be an integer or null, not "3"'),
            'NaN': (b'{"ok": true, "duration_ms": NaN, ' + json.dumps(fake_record(1)).encode()[1:].replace(
                b'"duration_ms"', b'"was"'), '"duration_ms" must be a number or null, not NaN'),
            'a gap that is text': (edited(event_gaps_ms=[1.0, 'x']), '"event_gaps_ms" must be a list of numbers'),
            'a start that is no time': (edited(started_at='yesterday'), '"started_at" must be a UTC time'),
            'a cross-check of words': (edited(cross_check={'same': 'yes', 'comparable': None}),
                                       '"cross_check.same" must be true, false or null, not "yes"'),
            'an ok run without its first text': (edited(first_text_ms=None), 'the record has no "first_text_ms"'),
            'a load without its runs': (edited(load={'id': 'ab'}), 'the record\'s "load" has an "id" but no "runs"'),
        }
        for name, (record, words) in cases.items():
            with self.subTest(name):
                self.write('bad.jsonl', [fake_record(0), record])
                done = run_cli('--summary', 'bad.jsonl', '--report', 'bad.html', cwd=self.tmp.name)
                self.assertEqual((done.returncode, done.stdout), (2, ''), done.stderr)
                self.assertEqual(done.stderr.count('\n'), 1, done.stderr)
                self.assertTrue(done.stderr.startswith('stream_client.py: error: bad.jsonl line 2: '), done.stderr)
                self.assertIn(words, done.stderr)
                self.assertFalse((self.dir / 'bad.html').exists())
        (self.dir / 'one.json').write_text(json.dumps({**fake_record(0), 'content_events': 2.5}, indent=2))
        done = run_cli('--summary', 'one.json', cwd=self.tmp.name)
        self.assertEqual((done.returncode, done.stderr), (2, 'stream_client.py: error: one.json: "content_events" must '
                                                             'be an integer, not 2.5\n'))

    def test_a_load_file_that_lacks_a_run_names_it_and_exits_1(self):
        done = run_cli('--fixture', 'ok', '--runs', '4', '--concurrency', '2', '--output', 'load.jsonl',
                       cwd=self.tmp.name)
        self.assertEqual(done.returncode, 0, done.stderr)
        lines = (self.dir / 'load.jsonl').read_bytes().splitlines(keepends=True)
        load = json.loads(lines[0])['load']['id']
        (self.dir / 'short.jsonl').write_bytes(b''.join(lines[:2] + lines[3:]))
        again = run_cli('--summary', 'short.jsonl', cwd=self.tmp.name)
        self.assertEqual(again.returncode, 1, again.stderr)  # every record there is ok; one is not there
        self.assertEqual(again.stderr, 'stream_client.py: warning: short.jsonl: not every planned run has a record: '
                                       f'load {load}: 1 of 4 planned runs has no record\n')
        self.assertEqual((json.loads(again.stdout)['runs'], json.loads(again.stdout)['ok']), (3, 3))
        for name, text in (('twice', b''.join(lines) * 2), ('repeated', b''.join(lines + lines[1:2]))):
            with self.subTest(name):
                (self.dir / f'{name}.jsonl').write_bytes(text)
                doubled = run_cli('--summary', f'{name}.jsonl', cwd=self.tmp.name)
                self.assertEqual(doubled.returncode, 2, doubled.stderr)
                self.assertIn(f'error: load {load}: run ', doubled.stderr)
                self.assertEqual(doubled.stderr.count('\n'), 1)
        whole = run_cli('--summary', 'load.jsonl', cwd=self.tmp.name)
        self.assertEqual((whole.returncode, whole.stderr), (0, ''))

    @sans_io
    def test_a_cut_line_is_named_skipped_and_counted_and_the_rest_summarized(self):
        records = [fake_record(run) for run in range(4)]
        whole = [json.dumps(record, ensure_ascii=False).encode() for record in records]
        records[2]['error'] = None
        cut_in_a_character = json.dumps({**records[3], 'text': 'READY \u2713'}, ensure_ascii=False).encode()
        self.write('cut.jsonl', [whole[0], whole[1][:57], whole[2], cut_in_a_character[:-15] + b'\xe2\x9c'])
        self.write('kept.jsonl', [whole[0], whole[2]])
        done = run_cli('--summary', 'cut.jsonl', cwd=self.tmp.name)
        self.assertEqual(done.returncode, 1, done.stderr)  # not every run is known to be ok
        self.assertEqual(done.stderr.splitlines(), [
            "stream_client.py: warning: cut.jsonl line 2 is broken JSON (Expecting ',' delimiter at column 58): "
            "skipped",
            'stream_client.py: warning: cut.jsonl line 4 is broken JSON (not UTF-8): skipped',
            'stream_client.py: warning: the summary counts the 2 other records ("skipped_lines": 2)'])
        summary = json.loads(done.stdout)
        kept = json.loads(run_cli('--summary', 'kept.jsonl', cwd=self.tmp.name).stdout)
        self.assertEqual((summary['runs'], summary['skipped_lines'], kept['skipped_lines']), (2, 2, 0))
        self.assertEqual({**summary, 'skipped_lines': 0}, kept)  # the rest, summarized as if alone
        with self.assertRaisesRegex(stream_client.UsageError, 'cut.jsonl line 2 is broken JSON'):
            list(stream_client.iter_records(str(self.dir / 'cut.jsonl')))  # strict unless told where to skip

    def test_a_file_without_records_says_there_are_no_runs(self):
        (self.dir / 'empty.jsonl').write_text('')
        status, screen = run_in_terminal('--summary', 'empty.jsonl', cwd=self.tmp.name)
        self.assertEqual(status, 1)
        self.assertIn('no runs: no record to summarize', screen)
        self.assertNotIn('None', screen)
        done = run_cli('--summary', 'empty.jsonl', cwd=self.tmp.name)
        self.assertEqual((done.returncode, done.stderr), (1, 'stream_client.py: warning: no runs: empty.jsonl holds no '
                                                             'record\n'))
        self.assertEqual(json.loads(done.stdout)['runs'], 0)


class VirtualScheduleTests(unittest.TestCase):
    """The open loop's schedule on a virtual clock: each run starts when it is due, never before, and the
    load waits out the whole schedule; 20 s of schedule checked without waiting (one real-time test of the
    same feature is LoadTests.test_an_open_loop_follows_its_seeded_schedule)."""

    def test_an_open_loop_starts_each_run_when_it_is_due_and_never_before(self):
        clock, records = VirtualClock(), []
        request = stream_client.prepare('http://127.0.0.1:9/v1/chat/completions', 'm', 'p')
        settings = stream_client.LoadSettings(runs=40, rate=2.0, arrivals='constant', concurrency=4)
        with mock.patch.object(stream_client._machine._Machine, 'start', instant_start()):
            stream_client.run_load([request], settings, records.append, stream_client.Cancel(),
                                   clock=clock.clock())
        records.sort(key=lambda record: record['run'])
        self.assertEqual([record['scheduled_ms'] for record in records], [index * 500.0 for index in range(40)])
        for record in records:
            self.assertGreaterEqual(record['offset_ms'], record['scheduled_ms'])  # never early
            self.assertEqual(record['queued_ms'], round(record['offset_ms'] - record['scheduled_ms'], 3))
        self.assertEqual(round(clock.now() - clock.start, 6), 19.5)  # the schedule waited out, and not a moment more

    def test_start_at_is_read_against_the_clocks_wall_time(self):
        clock, records = VirtualClock(), []
        request = stream_client.prepare('http://127.0.0.1:9/v1/chat/completions', 'm', 'p')
        settings = stream_client.LoadSettings(runs=2, rate=10.0, arrivals='constant', start_at=clock.wall() + 60)
        with mock.patch.object(stream_client._machine._Machine, 'start', instant_start()):
            stream_client.run_load([request], settings, records.append, stream_client.Cancel(),
                                   clock=clock.clock())
        self.assertEqual(sorted(record['scheduled_ms'] for record in records), [0.0, 100.0])
        self.assertGreaterEqual(min(record['offset_ms'] for record in records), 0.0)
        self.assertEqual(round(clock.now() - clock.start, 6), 60.1)  # a minute to the start, then the schedule


@unittest.skipUnless(os.path.exists('/dev/full'), 'needs /dev/full, where every write fails (Linux)')
class EvidenceWriteTests(unittest.TestCase):
    """A write of the evidence or of --csv that fails cancels the load, and the load says which file, once."""

    def test_a_failed_write_cancels_the_load_and_keeps_the_first_file_and_why(self):
        for where in ('evidence', 'csv'):
            with self.subTest(where=where):
                cancel, good = stream_client.Cancel(), os.open(os.devnull, os.O_WRONLY)
                full = os.open('/dev/full', os.O_WRONLY)
                files = stream_client._evidence._EvidenceFiles(
                    full if where == 'evidence' else good, 'out.jsonl', good if where == 'evidence' else full,
                    'out.csv', cancel)
                files.write(fake_record(0))
                files.write(fake_record(1))
                self.assertEqual(files.failed[0], 'out.jsonl' if where == 'evidence' else 'out.csv')
                self.assertEqual(files.failed[1].errno, errno.ENOSPC)
                what = 'the evidence file' if where == 'evidence' else 'the --csv file'
                self.assertEqual(cancel.reason, f'a failed write to {what}')
                files.close()  # a row still buffered fails to reach /dev/full: kept as the same failure, not raised
                self.assertEqual(files.failed[1].errno, errno.ENOSPC)
