"""The Prometheus exporter (_exporter, _exporter_cli)."""
from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import tempfile
import threading
import time
import unittest
import urllib.error
import urllib.request
from pathlib import Path
from typing import NamedTuple

import fixture_server
import stream_client
from .support import (
    CLIENT, fake_record, Fixture, PageReader, run_cli, run_fixture, script_command,
    script_env, TwinServer)
from .tiers import sans_io


# The exporter: a strict reader of the Prometheus text exposition format 0.0.4

METRIC_NAME = re.compile(r'[a-zA-Z_:][a-zA-Z0-9_:]*')
LABEL_PAIR = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"')
SAMPLE_VALUE = re.compile(r'[+-]?(?:\d+\.?\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?|Inf|NaN)')
METRIC_TYPES = ('counter', 'gauge', 'histogram', 'summary', 'untyped')


class Metric(NamedTuple):
    type: str
    help: str
    samples: dict  # frozenset of (label, value) pairs -> float


def _unescape(text: str, escapable: str) -> str:
    out, chars = [], iter(text)
    for char in chars:
        if char == '\\':
            following = next(chars, '')
            if following not in escapable:
                raise ValueError(f'invalid escape \\{following} in {text!r}')
            out.append('\n' if following == 'n' else following)
        else:
            out.append(char)
    return ''.join(out)


def _labels(text: str, line: str) -> frozenset:
    """The label pairs of '{a="1",b="2"}' (a trailing comma allowed, as the format does), strictly."""
    pairs, rest = {}, text
    while rest:
        match = LABEL_PAIR.match(rest)
        if not match:
            raise ValueError(f'bad label pair in {line!r}')
        name, value = match[1], _unescape(match[2], '\\"n')
        if name in pairs or name.startswith('__'):
            raise ValueError(f'duplicate or reserved label {name} in {line!r}')
        pairs[name] = value
        rest = rest[match.end():]
        if rest.startswith(','):
            rest = rest[1:]
        elif rest:
            raise ValueError(f'expected "," between labels in {line!r}')
    return frozenset(pairs.items())


def parse_exposition(text: str) -> dict[str, Metric]:
    """Families by name from text in the exposition format 0.0.4, checked strictly: every line ends with a
    line feed; HELP and TYPE at most once per name, TYPE before its samples; a family's samples together
    (one group per family); valid metric and label names; label values with only \\\\, \\" and \\n escaped;
    Go-parsable values; no series twice. Our exporter writes no timestamps and no blank lines: refused too."""
    if not text.endswith('\n'):
        raise ValueError('the exposition does not end with a line feed')
    families: dict[str, dict] = {}
    current = None
    for line in text[:-1].split('\n'):
        if line.startswith('#'):
            parts = line.split(' ', 3)
            if len(parts) >= 3 and parts[1] in ('HELP', 'TYPE'):
                keyword, name = parts[1], parts[2]
                if not METRIC_NAME.fullmatch(name):
                    raise ValueError(f'bad metric name in {line!r}')
                family = families.setdefault(name, {'type': None, 'help': None, 'samples': {}})
                if name != current and (family['samples'] or family['type'] or family['help']):
                    raise ValueError(f'{name} appears in two places: {line!r}')
                current = name
                value = parts[3] if len(parts) == 4 else ''
                if family[keyword.lower()] is not None:
                    raise ValueError(f'second {keyword} for {name}')
                if keyword == 'TYPE':
                    if value not in METRIC_TYPES or family['samples']:
                        raise ValueError(f'bad or late TYPE: {line!r}')
                    family['type'] = value
                else:
                    family['help'] = _unescape(value, '\\n')
            continue
        match = re.fullmatch(r'([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)', line)
        if not match:
            raise ValueError(f'not a sample line: {line!r}')
        name, labels, value = match[1], _labels(match[2] or '', line), match[3]
        if not SAMPLE_VALUE.fullmatch(value):
            raise ValueError(f'bad value in {line!r}')
        if name != current:
            if name in families:
                raise ValueError(f'samples of {name} are not together: {line!r}')
            families[name] = {'type': None, 'help': None, 'samples': {}}
            current = name
        if labels in families[name]['samples']:
            raise ValueError(f'series twice: {line!r}')
        families[name]['samples'][labels] = float(value)
    return {name: Metric(family['type'] or 'untyped', family['help'], family['samples'])
            for name, family in families.items()}


def value_of(metrics: dict[str, Metric], name: str, **labels: str) -> float:
    return metrics[name].samples[frozenset(labels.items())]


def exporter_get(port: int, path: str, headers: dict | None = None) -> tuple[int, str, str]:
    """(status, content type, body) of GET path from the exporter on loopback."""
    request = urllib.request.Request(f'http://127.0.0.1:{port}{path}', headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.headers['Content-Type'], response.read().decode()
    except urllib.error.HTTPError as error:
        with error:
            return error.code, error.headers['Content-Type'], error.read().decode()


def raw_exchange(port: int, data: bytes) -> bytes:
    """What the exporter answers to these bytes, read until it closes."""
    with socket.create_connection(('127.0.0.1', port), timeout=30) as sock:
        sock.sendall(data)
        answer = b''
        while True:
            piece = sock.recv(65536)
            if not piece:
                return answer
            answer += piece


class Exporter:
    """The exporter as a process (the command line), on a free loopback port, with its targets file."""

    def __init__(self, directory: Path, targets: dict, env: dict | None = None) -> None:
        (directory / 'targets.json').write_text(json.dumps({'targets': targets}))
        self.output = directory / 'evidence.jsonl'
        self.process = subprocess.Popen(script_command(CLIENT, '--exporter', '127.0.0.1:0', '--targets',
                                               'targets.json', '--output', 'evidence.jsonl'), cwd=directory,
                                        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        text=True, env=script_env(env))
        first = self.process.stderr.readline()
        match = re.search(r'listening on http://127\.0\.0\.1:(\d+)/', first)
        if not match:
            self.process.kill()
            raise AssertionError(f'the exporter did not start: {first}{self.process.stderr.read()}')
        self.port = int(match[1])

    def get(self, path: str, headers: dict | None = None) -> tuple[int, str, str]:
        return exporter_get(self.port, path, headers)

    def stop(self) -> tuple[int, str]:
        """SIGTERM; (exit status, what it wrote on stderr after its first line)."""
        self.process.send_signal(signal.SIGTERM)
        _, stderr = self.process.communicate(timeout=60)
        return self.process.returncode, stderr

    def records(self) -> list[dict]:
        return [json.loads(line) for line in self.output.read_text().splitlines()]


@sans_io
class ExpositionParserTests(unittest.TestCase):
    """The strict reader itself: it must refuse what Prometheus would, or its passes mean nothing."""

    def test_it_refuses_each_breach_of_the_format(self):
        good = '# HELP a_total A.\n# TYPE a_total counter\na_total{x="1"} 3\n'
        self.assertEqual(value_of(parse_exposition(good), 'a_total', x='1'), 3)
        bad = {
            'no final line feed': good[:-1],
            'TYPE after a sample': 'a 1\n# TYPE a gauge\n',
            'two TYPE lines': '# TYPE a gauge\n# TYPE a gauge\na 1\n',
            'unknown type': '# TYPE a meter\na 1\n',
            'bad metric name': '1a 1\n',
            'bad label name': 'a{1x="1"} 1\n',
            'unquoted label value': 'a{x=1} 1\n',
            'invalid escape': 'a{x="\\t"} 1\n',
            'raw quote in a value': 'a{x="say "hi""} 1\n',
            'bad value': 'a 1,5\n',
            'a series twice': 'a{x="1"} 1\na{x="1"} 2\n',
            'family split in two': 'a 1\nb 1\na{x="1"} 2\n',
            'blank line': 'a 1\n\nb 1\n',
            'two spaces': 'a  1\n',
            'duplicate label': 'a{x="1",x="2"} 1\n',
        }
        for name, text in bad.items():
            with self.subTest(name), self.assertRaises(ValueError):
                parse_exposition(text)


class ExporterCoreTests(unittest.TestCase):
    """The sans-IO parts: the targets file, the deadline, the query, the exposition, the single-flight."""

    def setUp(self) -> None:
        self.parser = stream_client._args._parser()

    @sans_io
    def test_targets_read_like_the_command_line_they_replace(self):
        targets = stream_client.parse_targets({'targets': {
            'prod': {'url': 'https://llm.example/v1/chat/completions', 'model': 'm', 'max_tokens': 16,
                     'stop': ['x'], 'extra': {'min_tokens': 2}, 'idle': 5, 'api_key_env': 'PROD_KEY'},
            'demo': {'fixture': 'tool-call', 'fixture_profile': 'vllm'}}}, self.parser)
        prod = targets['prod']
        self.assertEqual((prod.args.url, prod.args.max_tokens, prod.args.stop, prod.args.idle, prod.api_key_env),
                         ('https://llm.example/v1/chat/completions', 16, ['x'], 5, 'PROD_KEY'))
        self.assertEqual(json.loads(prod.args.extra), {'min_tokens': 2})
        self.assertEqual(prod.args.deadline, 60.0)  # the flag's default
        self.assertEqual((targets['demo'].args.fixture, targets['demo'].api_key_env), ('tool-call', None))

    @sans_io
    def test_a_bad_targets_file_names_the_target_and_the_field(self):
        cases = {
            'not the shape': ([], 'expected {"targets"'),
            'no target': ({'targets': {}}, 'at least one target'),
            'a key beside targets': ({'targets': {'a': {}}, 'x': 1}, 'expected {"targets"'),
            'a name with a slash': ({'targets': {'a/b': {}}}, "target 'a/b'"),
            'settings not an object': ({'targets': {'a': 'http://x'}}, 'target a: expected an object'),
            'unknown key': ({'targets': {'a': {'prompt_file': 'p.txt'}}}, 'target a: prompt_file is not a setting'),
            'wrong type': ({'targets': {'a': {'max_tokens': '16'}}}, "target a: max_tokens must be an integer"),
            'a bool for a number': ({'targets': {'a': {'idle': True}}}, 'target a: idle must be a number'),
            'bad choice': ({'targets': {'a': {'api': 'embeddings'}}}, 'target a: api must be one of chat'),
            'unknown fixture mode': ({'targets': {'a': {'fixture': 'nope'}}}, 'target a: fixture must be one of'),
            'extra as text': ({'targets': {'a': {'extra': '{}'}}}, 'target a: extra must be a JSON object'),
            'stop not a list': ({'targets': {'a': {'stop': 'x'}}}, 'target a: stop must be a list of strings'),
            'url and fixture': ({'targets': {'a': {'url': 'http://127.0.0.1:1/v1/chat/completions',
                                                    'fixture': 'ok'}}}, 'target a: fixture and url exclude'),
            'a key instead of its variable': ({'targets': {'a': {'api_key_env': 'sk-live 12345'}}},
                                              'target a: api_key_env must be the name of an environment variable'),
        }
        for name, (data, expected) in cases.items():
            with self.subTest(name):
                with self.assertRaises(stream_client.UsageError) as caught:
                    stream_client.parse_targets(data, self.parser)
                self.assertIn(expected, str(caught.exception))
                self.assertNotIn('\n', str(caught.exception))
                self.assertNotIn('12345', str(caught.exception))

    @sans_io
    def test_cross_check_is_a_target_key_only_once_its_flag_exists(self):
        data = {'targets': {'a': {'fixture': 'ok', 'cross_check': True}}}
        if '--cross-check' not in self.parser._option_string_actions:
            with self.assertRaises(stream_client.UsageError) as caught:
                stream_client.parse_targets(data, self.parser)
            self.assertIn('cross_check is not a setting', str(caught.exception))
            self.parser.add_argument('--cross-check', action='store_true')
        self.assertIs(stream_client.parse_targets(data, self.parser)['a'].args.cross_check, True)

    @sans_io
    def test_a_target_may_name_its_servers_dialect(self):
        targets = stream_client.parse_targets({'targets': {'a': {'fixture': 'ok', 'dialect': 'llama.cpp'}}},
                                              self.parser)
        self.assertEqual(targets['a'].args.dialect, 'llama.cpp')
        with self.assertRaises(stream_client.UsageError):
            stream_client.parse_targets({'targets': {'a': {'fixture': 'ok', 'dialect': 'vllm'}}}, self.parser)

    @sans_io
    def test_a_target_sends_its_headers_and_refuses_those_the_client_owns(self):
        targets = stream_client.parse_targets({'targets': {'a': {
            'url': 'http://127.0.0.1:8000/v1/chat/completions', 'model': 'm',
            'header': ['X-Tenant: tenant-7f3a9c2e41d8', 'X-Route: eu']}}}, self.parser)
        request = stream_client._exporter._prepare_targets(targets, None)['a']
        self.assertIn(b'X-Tenant: tenant-7f3a9c2e41d8\r\nX-Route: eu\r\n', request.wire)
        self.assertEqual(request.settings['headers'], ['X-Tenant', 'X-Route'])
        owned = stream_client.parse_targets({'targets': {'a': {'fixture': 'ok', 'header': ['Host: x.example']}}},
                                            self.parser)
        with self.assertRaises(stream_client.UsageError) as caught:
            stream_client._exporter._prepare_targets(owned, lambda *settings: 'http://127.0.0.1:9/v1/chat/completions')
        self.assertEqual(str(caught.exception), "target a: header 'Host' is set by the client (the client sends the "
                                                'host of url); it cannot be given')

    @sans_io
    def test_the_deadline_is_the_sooner_of_the_targets_and_the_scrape_timeout_less_a_margin(self):
        margin = stream_client._exporter._SCRAPE_TIMEOUT_MARGIN
        cases = [(60.0, None, 60.0), (60.0, '10', 10 - margin), (5.0, '30', 5.0), (60.0, '0.6', 0.3),
                 (60.0, 'soon', 60.0), (60.0, '-1', 60.0), (60.0, 'nan', 60.0), (60.0, '0', 60.0)]
        for target, header, expected in cases:
            with self.subTest(header=header):
                self.assertAlmostEqual(stream_client._exporter._probe_deadline(target, header), expected)

    @sans_io
    def test_the_probe_query_names_a_target_of_the_file_and_never_a_url(self):
        names = {'ok', 'prod-eu'}
        refused = {'target=nope': ('unknown_target', "unknown target 'nope'"),
                   'target=http%3A%2F%2F10.0.0.1%2Fv1': ('url_target', 'not a URL'),
                   'target=127.0.0.1:8000': ('url_target', 'not a URL'),
                   '': ('bad_query', 'expected target=NAME exactly once'),
                   'target=ok&target=ok': ('bad_query', 'exactly once'),
                   'target=ok&module=x': ('bad_query', 'unknown parameter'), '%zz': ('bad_query', 'malformed query')}
        for query, name in {'target=ok': 'ok', 'target=prod-eu': 'prod-eu'}.items():
            with self.subTest(query):
                self.assertEqual(stream_client._exporter._probe_target(query, names), name)
        for query, (reason, message) in refused.items():
            with self.subTest(query):
                refusal = stream_client._exporter._probe_target(query, names)
                self.assertEqual(refusal.reason, reason)
                self.assertIn(message, refusal.message)

    @sans_io
    def test_exporter_addresses_are_loopback_unless_spelled_out(self):
        cases = {'9116': ('127.0.0.1', 9116), ':9116': ('127.0.0.1', 9116), 'localhost:9116': ('127.0.0.1', 9116),
                 '0.0.0.0:9116': ('0.0.0.0', 9116), '[::1]:9116': ('::1', 9116), '10.1.2.3:0': ('10.1.2.3', 0)}
        for value, address in cases.items():
            with self.subTest(value):
                self.assertEqual(stream_client._exporter_cli._exporter_address(value), address)
        for value in ('monitor.example:9116', '9116x', '70000', '', 'host:'):
            with self.subTest(value), self.assertRaises(ValueError):
                stream_client._exporter_cli._exporter_address(value)

    def test_probe_metrics_follow_the_format_and_the_naming_conventions(self):
        records = {'ok': run_fixture('ok'), 'broken': run_fixture('broken'),
                   'tool-call': run_fixture('tool-call', tools=fixture_server.TOOLS),
                   'json-invalid': run_fixture('json-invalid', json_schema=fixture_server.JSON_SCHEMA)}
        metrics = {name: parse_exposition(stream_client.exposition(stream_client.probe_families(record)))
                   for name, record in records.items()}
        for name, parsed in metrics.items():
            with self.subTest(name):
                for metric, family in parsed.items():
                    self.assertEqual(family.type, 'gauge', metric)
                    self.assertFalse(metric.endswith('_total'), metric)
                    self.assertTrue(family.help, metric)
                    self.assertTrue(metric.startswith(('probe_', 'stream_probe_')), metric)
                self.assertEqual(value_of(parsed, 'probe_success'), int(records[name]['ok']))
                failed = {dict(labels)['layer']: value
                          for labels, value in parsed['stream_probe_failed'].samples.items()}
                self.assertEqual(set(failed), set(stream_client.LAYERS))
                self.assertEqual(sum(failed.values()), 0 if records[name]['ok'] else 1)
        self.assertEqual(value_of(metrics['broken'], 'stream_probe_failed', layer='application'), 1)
        self.assertEqual([dict(labels)['kind'] for labels in metrics['broken']['stream_probe_error_info'].samples],
                         ['eof_before_done'])
        self.assertEqual(metrics['ok']['stream_probe_error_info'].samples, {})
        self.assertAlmostEqual(value_of(metrics['ok'], 'stream_probe_first_text_seconds'),
                               records['ok']['first_text_ms'] / 1000, places=5)
        self.assertEqual(value_of(metrics['ok'], 'stream_probe_http_status'), 200)
        self.assertEqual(value_of(metrics['tool-call'], 'stream_probe_tool_calls_verified'), 1)
        self.assertEqual(value_of(metrics['json-invalid'], 'stream_probe_json_verified'), 0)
        self.assertNotIn('stream_probe_tool_calls_verified', metrics['ok'])  # no tools offered: nothing to verify

    def test_label_values_are_escaped(self):
        record = {**run_fixture('broken'), 'error_kind': 'say "hi" \\ then\nstop'}
        parsed = parse_exposition(stream_client.exposition(stream_client.probe_families(record)))
        self.assertEqual([dict(labels)['kind'] for labels in parsed['stream_probe_error_info'].samples],
                         ['say "hi" \\ then\nstop'])

    def test_one_run_per_target_at_a_time_and_a_bound_on_all(self):
        flights = stream_client.SingleFlight(limit=1)
        started, release, calls = threading.Event(), threading.Event(), []

        def slow(waited: float) -> dict:
            calls.append(waited)
            started.set()
            release.wait(30)
            return {'run': len(calls)}
        results = {}
        leader = threading.Thread(target=lambda: results.update(leader=flights.do('a', slow, 30)))
        leader.start()
        started.wait(30)
        follower = threading.Thread(target=lambda: results.update(follower=flights.do('a', slow, 30)))
        follower.start()
        self.assertEqual(flights.do('b', slow, 0), (None, False))  # the one slot is taken: no run of b
        while follower.is_alive() and flights.joined['a'] == 0:
            time.sleep(0.01)
        release.set()
        leader.join(30)
        follower.join(30)
        self.assertEqual(calls, [0.0])
        self.assertEqual(results, {'leader': ({'run': 1}, False), 'follower': ({'run': 1}, True)})
        self.assertEqual(flights.do('b', lambda waited: 'b ran', 0), ('b ran', False))
        self.assertEqual(flights.in_flight(), 0)

    def test_a_probe_that_joins_a_run_in_flight_is_counted_and_answered_with_its_result(self):
        request = stream_client.prepare('http://127.0.0.1:9/v1/chat/completions', 'm', 'p')
        started, release, runs, kept = threading.Event(), threading.Event(), [], []

        def run_one(prepared):
            runs.append(prepared.deadline)
            started.set()
            release.wait(30)
            return {**run_fixture('ok'), 'started_at': '2026-12-01T00:00:00.000Z'}
        exporter = stream_client.Exporter({'a': request}, 2, run_one, lambda name, record: kept.append(name),
                                          lambda line: None)
        answers = []
        first = threading.Thread(target=lambda: answers.append(exporter.probe('target=a', '10')))
        first.start()
        started.wait(30)
        second = threading.Thread(target=lambda: answers.append(exporter.probe('target=a', '10')))
        second.start()
        while exporter.flights.joined['a'] == 0 and second.is_alive():
            time.sleep(0.01)
        release.set()
        first.join(30)
        second.join(30)
        self.assertEqual(runs, [10 - stream_client._exporter._SCRAPE_TIMEOUT_MARGIN])
        self.assertEqual(kept, ['a'])
        self.assertEqual([answer.status for answer in answers], [200, 200])
        self.assertEqual(answers[0].body, answers[1].body)
        own = parse_exposition(exporter.metrics().body)
        self.assertEqual(value_of(own, 'stream_exporter_runs_total', target='a', result='ok'), 1)
        self.assertEqual(value_of(own, 'stream_exporter_joined_scrapes_total', target='a'), 1)
        self.assertEqual(exporter.answer('/probe?target=b', None).status, 400)
        self.assertEqual(exporter.answer('/probe.php', None).status, 404)
        self.assertEqual(value_of(parse_exposition(exporter.metrics().body), 'stream_exporter_scrape_errors_total',
                                  reason='unknown_target'), 1)

    def test_a_cross_check_targets_twin_runs_inside_the_scrape_timeout(self):
        server = TwinServer('answer')  # the streamed answer is whole; its twin never answers
        self.addCleanup(server.close)
        request = stream_client.prepare(server.url, 'm', 'p', idle=3, cross_check=True)  # the target's deadline: 60 s
        kept = []
        exporter = stream_client.Exporter({'a': request}, 1, stream_client.run,
                                          lambda name, record: kept.append(record), lambda line: None)
        answer = exporter.answer('/probe?target=a', '1.5')
        self.assertEqual(answer.status, 200)
        (record,) = kept
        self.assertEqual(record['cross_check']['unstreamed_problem'], 'timeout: overall deadline of 1 s reached during '
                                                                      'the headers phase after 0 content events')
        self.assertEqual(server.twins, 1)

    @sans_io
    def test_the_request_target_follows_rfc_9112_host_and_absolute_form(self):
        here = ('127.0.0.1', 9118)
        target = stream_client._exporter._origin_target
        self.assertEqual(target('/probe?target=a', 'HTTP/1.1', ['127.0.0.1:9118'], here), '/probe?target=a')
        self.assertEqual(target('/metrics', 'HTTP/1.0', [], here), '/metrics')  # HTTP/1.0 needs no Host
        self.assertEqual(target('/metrics', 'HTTP/1.1', [''], here), '/metrics')  # an empty Host is a Host
        for url in ('http://127.0.0.1:9118/probe?target=a', 'HTTP://LOCALHOST:9118/probe?target=a'):
            self.assertEqual(target(url, 'HTTP/1.1', ['127.0.0.1:9118'], here), '/probe?target=a', url)
        self.assertEqual(target('http://127.0.0.1:9118', 'HTTP/1.1', ['x'], here), '/')
        self.assertEqual(target('http://gpu-7:9118/metrics', 'HTTP/1.1', ['x'], ('0.0.0.0', 9118)), '/metrics')
        self.assertEqual(target('http://[::1]:9118/metrics', 'HTTP/1.1', ['x'], ('::1', 9118, 0, 0)), '/metrics')
        refused = {
            ('/metrics', 'HTTP/1.1', ()): (400, 'an HTTP/1.1 request needs a Host header (RFC 9112 3.2)'),
            ('/metrics', 'HTTP/1.1', ('a', 'a')): (400, '2 Host header lines; a request carries one (RFC 9112 3.2)'),
            ('/metrics', 'HTTP/1.0', ('a', 'b')): (400, '2 Host header lines; a request carries one (RFC 9112 3.2)'),
            ('/metrics', 'HTTP/1.1', ('a b',)): (400, "invalid Host header 'a b'"),
            ('http://127.0.0.1:9118/metrics', 'HTTP/1.1', ()): (400, 'an HTTP/1.1 request needs a Host header'),
            ('https://127.0.0.1:9118/metrics', 'HTTP/1.1', ('a',)): (400, 'is neither a path nor an http:// URL'),
            ('http://u@127.0.0.1:9118/metrics', 'HTTP/1.1', ('a',)): (400, 'is neither a path nor an http:// URL'),
            ('http://[::1/metrics', 'HTTP/1.1', ('a',)): (400, 'is neither a path nor an http:// URL'),
            ('*', 'HTTP/1.1', ('a',)): (400, 'is neither a path nor an http:// URL'),
            ('http://example.com/metrics', 'HTTP/1.1', ('a',)): (421, 'this exporter is not a proxy'),
            ('http://127.0.0.1:9/metrics', 'HTTP/1.1', ('a',)): (421, "it answers for http://127.0.0.1:9118/, not for "
                                                                      "'127.0.0.1:9'"),
            ('http://10.0.0.1:9118/metrics', 'HTTP/1.1', ('a',)): (421, "not for '10.0.0.1:9118'"),
        }
        for (path, version, hosts), (status, words) in refused.items():
            with self.subTest(path=path, version=version, hosts=hosts):
                answer = target(path, version, list(hosts), here)
                self.assertEqual(answer.status, status)
                self.assertIn(words, answer.body)
                self.assertEqual(answer.body.count('\n'), 1)

    def test_the_server_answers_400_without_a_host_or_with_two_and_serves_the_absolute_form(self):
        kept = []
        exporter = stream_client.Exporter({'a': stream_client.prepare('http://127.0.0.1:9/v1/chat/completions', 'm',
                                                                      'p')}, 1, lambda request: run_fixture('ok'),
                                          lambda name, record: kept.append(name), lambda line: None)
        server = stream_client.ExporterServer(('127.0.0.1', 0), exporter)
        thread = threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True)
        thread.start()
        self.addCleanup(thread.join)
        self.addCleanup(server.server_close)
        self.addCleanup(server.shutdown)
        port = server.server_address[1]
        answers = {name: raw_exchange(port, data).partition(b'\r\n\r\n') for name, data in {
            'no Host': b'GET /metrics HTTP/1.1\r\n\r\n',
            'two Host lines': b'GET /metrics HTTP/1.1\r\nHost: a\r\nhost: a\r\n\r\n',
            'HTTP/1.0 without Host': b'GET /metrics HTTP/1.0\r\n\r\n',
            'absolute form': b'GET http://127.0.0.1:%d/probe?target=a HTTP/1.1\r\nHost: x\r\n\r\n' % port,
            'another origin': b'GET http://example.com/metrics HTTP/1.1\r\nHost: example.com\r\n\r\n',
        }.items()}
        statuses = {name: int(head.split()[1]) for name, (head, _, _) in answers.items()}
        self.assertEqual(statuses, {'no Host': 400, 'two Host lines': 400, 'HTTP/1.0 without Host': 200,
                                    'absolute form': 200, 'another origin': 421})
        self.assertIn(b'probe_success 1', answers['absolute form'][2])
        self.assertEqual(answers['no Host'][2], b'an HTTP/1.1 request needs a Host header (RFC 9112 3.2)\n')
        self.assertEqual(kept, ['a'])
        own = parse_exposition(exporter.metrics().body)
        self.assertEqual(value_of(own, 'stream_exporter_scrape_errors_total', reason='bad_request'), 2)
        self.assertEqual(value_of(own, 'stream_exporter_scrape_errors_total', reason='misdirected'), 1)

    @sans_io
    def test_a_run_that_fails_in_the_client_keeps_a_record_and_a_probe_after_sigterm_starts_none(self):
        request = stream_client.prepare('http://127.0.0.1:9/v1/chat/completions', 'm', 'p')
        kept, runs = [], []

        def broken_client(prepared):
            runs.append(prepared)
            raise RuntimeError('a bug')
        exporter = stream_client.Exporter({'a': request}, 1, broken_client,
                                          lambda name, record: kept.append(record), lambda line: None)
        answer = exporter.answer('/probe?target=a', None)
        self.assertEqual(value_of(parse_exposition(answer.body), 'stream_probe_failed', layer='client'), 1)
        self.assertEqual([(record['target'], record['error']) for record in kept],
                         [('a', 'client: the client failed during the run: RuntimeError: a bug')])
        exporter.stopping = True
        self.assertEqual(exporter.answer('/probe?target=a', None).status, 503)
        self.assertEqual(len(runs), 1)

    @sans_io
    def test_appending_is_only_to_a_file_of_whole_record_lines(self):
        with tempfile.TemporaryDirectory() as tmp:
            lines = Path(tmp, 'lines.jsonl')
            lines.write_text(json.dumps(fake_record(0)) + '\n')
            os.close(stream_client._exporter_cli._append_output(str(lines)))
            cases = {'cut.jsonl': json.dumps(fake_record(0)),
                     'single.json': json.dumps(fake_record(0), indent=2) + '\n', 'notes.txt': 'hello\n'}
            for name, text in cases.items():
                with self.subTest(name):
                    Path(tmp, name).write_text(text)
                    with self.assertRaises(stream_client.UsageError):
                        stream_client._exporter_cli._append_output(str(Path(tmp, name)))
                    self.assertEqual(Path(tmp, name).read_text(), text)
            fd = stream_client._exporter_cli._append_output(str(Path(tmp, 'new.jsonl')))
            os.close(fd)
            self.assertEqual(os.stat(Path(tmp, 'new.jsonl')).st_mode & 0o777, 0o600)


class ExporterTests(unittest.TestCase):
    """The exporter as Prometheus meets it: a process on loopback, scraped, stopped by SIGTERM."""

    KEY = 'sk-probe-5e3a91'

    def setUp(self) -> None:
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.dir = Path(self.tmp.name)

    def test_scraped_like_prometheus_it_answers_each_target_with_its_verdict(self):
        echo = json.dumps({'error': {'message': f'invalid key {self.KEY}', 'type': 'AuthenticationError',
                                     'code': 401}})
        response = (f'HTTP/1.1 401 Unauthorized\r\ncontent-type: application/json\r\nx-echo: {self.KEY}\r\n'
                    f'content-length: {len(echo)}\r\n\r\n{echo}').encode()
        targets = {'ok': {'fixture': 'ok'}, 'broken': {'fixture': 'broken'}, 'tools': {'fixture': 'tool-call'},
                   'slow': {'fixture': 'stall', 'idle': 30}}
        before = json.dumps(fake_record(0)) + '\n'  # a line already there, which appending must keep
        (self.dir / 'evidence.jsonl').write_text(before)
        with Fixture(replay=response) as echoing:
            targets['keyed'] = {'url': echoing.url, 'model': 'm', 'api_key_env': 'PROBE_KEY'}
            exporter = Exporter(self.dir, targets, env=dict(os.environ, PROBE_KEY=self.KEY))
            try:
                scrapes = {name: exporter.get(f'/probe?target={name}', {'X-Prometheus-Scrape-Timeout-Seconds': '10'})
                           for name in ('ok', 'broken', 'tools', 'keyed')}
                errors = {
                    'unknown target': exporter.get('/probe?target=nope'),
                    'URL as target': exporter.get('/probe?target=http%3A%2F%2F127.0.0.1%3A9%2Fv1%2Fchat%2Fcompletions'),
                    'no target': exporter.get('/probe'),
                    'unknown page': exporter.get('/nope'),
                }
                raw = {'malformed': raw_exchange(exporter.port, b'GARBAGE\r\n\r\n'),
                       'other method': raw_exchange(exporter.port, b'POST /probe?target=ok HTTP/1.1\r\n'
                                                                   b'Content-Length: 0\r\n\r\n'),
                       'a body': raw_exchange(exporter.port, b'GET /probe?target=ok HTTP/1.1\r\n'
                                                             b'Content-Length: 3\r\n\r\nabc'),
                       'too large': raw_exchange(exporter.port, b'GET /' + b'a' * 70_000 + b' HTTP/1.1\r\n\r\n')}
                again = exporter.get('/probe?target=ok')  # still serving after all of that
                page = exporter.get('/')
                own = exporter.get('/metrics')
                # A slow scrape timeout: the target allows 60 s, Prometheus 1.5 s; SIGTERM comes during the run.
                slow: list = []
                scrape = threading.Thread(target=lambda: slow.append(exporter.get(
                    '/probe?target=slow', {'X-Prometheus-Scrape-Timeout-Seconds': '1.5'})))
                scrape.start()
                while scrape.is_alive() and value_of(parse_exposition(exporter.get('/metrics')[2]),
                                                     'stream_exporter_runs_in_flight') == 0:
                    time.sleep(0.01)
            finally:
                status, stderr = exporter.stop()
            scrape.join(30)
            self.assertEqual(echoing.last_request[0]['Authorization'], f'Bearer {self.KEY}')
        self.assertEqual(status, 143, stderr)
        self.assertIn('SIGTERM: ending 1 run in flight', stderr)
        metrics = {name: parse_exposition(body) for name, (_, _, body) in scrapes.items()}
        for name, (code, content_type, _) in scrapes.items():
            with self.subTest(name):
                self.assertEqual((code, content_type), (200, 'text/plain; version=0.0.4; charset=utf-8'))
        self.assertEqual({name: value_of(parsed, 'probe_success') for name, parsed in metrics.items()},
                         {'ok': 1, 'broken': 0, 'tools': 1, 'keyed': 0})
        self.assertEqual(value_of(metrics['broken'], 'stream_probe_failed', layer='application'), 1)
        self.assertEqual(value_of(metrics['keyed'], 'stream_probe_failed', layer='http'), 1)
        self.assertEqual(value_of(metrics['keyed'], 'stream_probe_http_status'), 401)
        self.assertEqual(value_of(metrics['tools'], 'stream_probe_tool_calls_verified'), 1)
        self.assertEqual(slow[0][0], 200)
        self.assertEqual(value_of(parse_exposition(slow[0][2]), 'stream_probe_failed', layer='timeout'), 1)
        for name, (code, content_type, body) in errors.items():
            with self.subTest(name):
                self.assertEqual(code // 100, 4)
                self.assertEqual((content_type, body.count('\n')), ('text/plain; charset=utf-8', 1))
        self.assertIn('not a URL', errors['URL as target'][2])
        self.assertIn("unknown target 'nope'", errors['unknown target'][2])
        for name, answer in raw.items():
            with self.subTest(name):
                head, _, body = answer.partition(b'\r\n\r\n')
                self.assertRegex(head, rb'^HTTP/1\.[01] 4\d\d ')
                self.assertEqual(body.count(b'\n'), 1, body)
        self.assertEqual(again[0], 200)
        own_metrics = parse_exposition(own[2])
        for metric, family in own_metrics.items():
            self.assertEqual(metric.endswith('_total'), family.type == 'counter', metric)
        self.assertEqual(value_of(own_metrics, 'stream_exporter_runs_total', target='broken', result='failed'), 1)
        self.assertEqual(value_of(own_metrics, 'stream_exporter_failures_total', target='broken', layer='application',
                                  kind='eof_before_done'), 1)
        self.assertEqual(value_of(own_metrics, 'stream_exporter_scrape_errors_total', reason='url_target'), 1)
        rows = {row[0]: row for row in PageReader(page[2]).cells[1:]}
        self.assertEqual((rows['ok'][3], rows['broken'][3]), ('ok', 'NOT OK'))
        text = exporter.output.read_text()
        self.assertTrue(text.startswith(before))
        records = exporter.records()[1:]
        self.assertEqual([record['target'] for record in records], ['ok', 'broken', 'tools', 'keyed', 'ok', 'slow'])
        self.assertEqual(records[-1]['error_layer'], 'timeout')
        self.assertIn('overall deadline of 1 s', records[-1]['error'])  # 1.5 s less the margin, not the 60 s
        outputs = {'metrics': ''.join(body for _, _, body in scrapes.values()) + own[2], 'page': page[2],
                   'records': text, 'stderr': stderr}
        for name, text in outputs.items():
            with self.subTest(output=name):
                self.assertNotIn(self.KEY, text)
                self.assertNotIn('5e3a91', text)
        summary = run_cli('--summary', 'evidence.jsonl', '--mixed-sources', cwd=self.tmp.name)
        self.assertEqual(json.loads(summary.stdout)['runs'], 7, summary.stderr)

    def test_a_bad_targets_file_or_flag_exits_2_with_one_line_and_serves_nothing(self):
        cases = {
            'a bad field': ({'a': {'max_tokens': 0, 'fixture': 'ok'}}, [], 'target a: max_tokens must be an integer'),
            'an unset key variable': ({'a': {'fixture': 'ok', 'api_key_env': 'NO_SUCH_VARIABLE_29'}}, [],
                                      'target a: api_key_env names NO_SUCH_VARIABLE_29, which is not set'),
            'a missing tools file': ({'a': {'fixture': 'ok', 'tools': 'absent.json'}}, [],
                                     "target a: cannot read tools 'absent.json'"),
            'a fixture mode of another API': ({'a': {'fixture': 'sequence-gap'}}, [], 'target a: fixture mode'),
            'a run flag beside it': ({'a': {'fixture': 'ok'}}, ['--model', 'm'], '--model does not go with --exporter'),
            'a host name to bind': ({'a': {'fixture': 'ok'}}, ['--exporter', 'example.com:0'],
                                    'needs an IP address to bind'),
        }
        for number, (targets, _, _) in enumerate(cases.values()):
            (self.dir / f'targets{number}.json').write_text(json.dumps({'targets': targets}))
        results = [run_cli('--exporter', '127.0.0.1:0', '--targets', f'targets{number}.json', '--output', 'e.jsonl',
                           *flags, cwd=self.tmp.name) for number, (_, flags, _) in enumerate(cases.values())]
        for (name, (_, _, expected)), done in zip(cases.items(), results):
            with self.subTest(name):
                self.assertEqual(done.returncode, 2, done.stderr)
                self.assertEqual(done.stderr.count('\n'), 1, done.stderr)
                self.assertIn(expected, done.stderr)
                self.assertFalse((self.dir / 'e.jsonl').exists())
