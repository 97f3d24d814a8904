"""Which flag each workload honours (_FLAG_TABLE): every refused pair is refused before anything is sent,
every honoured pair has its effect, --fail-if gates sessions and traces, and docs/cli.md shows the table."""
from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import tempfile
import threading
import time
import typing
import unittest

import fixture_server
import stream_client
from stream_client._workload_flags import _FLAG_TABLE, _LOAD_MAKERS, _WORKLOADS
from .support import Fixture, HERE, run_cli
from .tiers import sans_io

COLUMNS = ('one', 'load', 'sessions', 'trace')  # the table's columns, in its order, as the tests name them
ONE, LOAD, SESSIONS, TRACE = COLUMNS


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def past(seconds: float) -> str:
    return time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(time.time() - seconds))


# A value for each flag of the table, as typed after it (a path is a file of the folder the inputs are in).
SAMPLE = {
    '--prompt': ['hello'], '--prompt-file': ['{in}/prompt.txt'], '--tools': ['{in}/tools.json'],
    '--tool-choice': ['auto'], '--json-schema': ['{in}/schema.json'], '--cross-check': [], '--dialect': ['strict'],
    '--header': ['X-Test: 1'], '--runs': ['3'], '--concurrency': ['2'], '--rate': ['50'], '--processes': ['2'],
    '--duration': ['0.1'], '--arrivals': ['constant'], '--seed': ['3'], '--keep-alive': [],
    '--prompts': ['{in}/prompts.jsonl'], '--trace-speed': ['2'], '--block-size': ['8'], '--input-tokens': ['12'],
    '--output-tokens': ['7'], '--shared-prefix-tokens': ['4'], '--repeat': ['2'], '--repeat-seeds': ['same'],
    '--warmup': ['1'], '--shard': ['0/2'], '--start-at': ['{past}'], '--server-metrics': [],
    '--metrics-interval': ['0.5'], '--rates': ['40,80'], '--concurrencies': ['1,2'], '--find-capacity': ['20:40'],
    '--slo': ['first_text_ms=60000'], '--slo-target': ['0.5'], '--fail-if': ['runs > 1000'],
    '--capture': ['c.http'], '--report': ['r.html'], '--csv': ['c.csv'], '--metrics-port': ['0'],
    '--metrics-host': ['127.0.0.1'], '--otlp-json': ['m.otlp.jsonl'], '--otlp-endpoint': ['http://127.0.0.1:9'],
    '--cache-salt': ['pass'], '--session-slo': ['total_ms=60000'],
}


class Ran(typing.NamedTuple):
    """What one command line left: its exit status, its summary line, its records, the files of its folder."""

    status: int
    summary: dict
    records: list
    files: set
    folder: str
    stderr: str

    def request(self, key: str) -> set:
        """A setting of every record's request, as a set (lists as tuples)."""
        return {tuple(value) if isinstance(value, list) else value
                for value in (record['request'][key] for record in self.records)}

    def markers(self) -> int:
        """How many distinct --cache-salt markers the records were sent with."""
        return len({record['request']['cache_salt']['marker'] for record in self.records})

    def load(self, key: str) -> set:
        return {record['load'][key] for record in self.records}

    def text(self, name: str) -> str:
        with open(os.path.join(self.folder, name), encoding='utf-8') as file:
            return file.read()


def finished_runs(otlp: str) -> int:
    """The runs finished in the last export of an --otlp-json file."""
    metrics = json.loads(otlp.splitlines()[-1])['resourceMetrics'][0]['scopeMetrics'][0]['metrics']
    points = next(metric for metric in metrics if metric['name'] == 'stream_client.runs.finished')['sum']['dataPoints']
    return sum(int(point['asInt']) for point in points)


class Effect(typing.NamedTuple):
    """One honoured pair's check: the flags to add, what to read from the run, and what it must be. mode is
    the fixture's mode, served by --fixture or, with served, by the tests' own fixture server (--url)."""

    args: list
    read: typing.Callable
    expected: object
    mode: str = 'ok'
    served: bool = False


FIRST_MIXED_OK = fixture_server.Schedule(1).next_mode() == 'ok' != fixture_server.Schedule(0).next_mode()
TWO_MIXED_OK = [fixture_server.Schedule(3).next_mode() for _ in range(2)] == ['ok', 'ok']

# A capacity search ran: its probes (how many passed depends on the machine: LO failing ends it) are in the
# summary, and every record is a probe of the search asked for.
SEARCHED = lambda ran: (ran.summary['capacity']['probes'] >= 1, {tuple(r['load']['search']) for r in ran.records})  # noqa: E731

# The effect of each flag a request carries, the same on every workload that honours it.
REQUEST_EFFECTS = {
    '--prompt': Effect(['--prompt', 'hello'], lambda ran: ran.request('prompt_sha256'), {sha('hello')}),
    '--prompt-file': Effect(['--prompt-file', '{in}/prompt.txt'], lambda ran: ran.request('prompt_sha256'),
                            {sha('from a file')}),
    '--tools': Effect(['--tools', '{in}/tools.json'], lambda ran: ran.request('tools'), {('get_weather',)}),
    '--tool-choice': Effect(['--tools', '{in}/tools.json', '--tool-choice', 'none'],
                            lambda ran: ran.request('tool_choice'), {'none'}),
    '--json-schema': Effect(['--json-schema', '{in}/schema.json'],
                            lambda ran: ran.request('json_schema_sha256') != {None}, True),
    '--cross-check': Effect(['--cross-check'], lambda ran: {record['cross_check']['same']
                                                            for record in ran.records}, {True}, mode='pair-honest'),
    '--dialect': Effect(['--dialect', 'strict'], lambda ran: ran.request('dialect'), {'strict'}),
    '--header': Effect(['--header', 'X-Test: 1'], lambda ran: ran.request('headers'), {('X-Test',)}),
    '--input-tokens': Effect(['--input-tokens', '12'], lambda ran: ran.request('input_tokens'), {12}),
    '--output-tokens': Effect(['--output-tokens', '7'], lambda ran: ran.request('max_tokens'), {7}),
    '--shared-prefix-tokens': Effect(['--input-tokens', '12', '--shared-prefix-tokens', '4'],
                                     lambda ran: ran.request('shared_prefix_tokens'), {4}),
}
# The effect of each flag on a load's summary, sessions and traces alike (their runs: 2 sessions of one
# turn, or 2 trace lines).
SUMMARY_EFFECTS = {
    '--slo': Effect(['--slo', 'first_text_ms=60000'], lambda ran: (ran.summary['slo'], ran.summary['good']),
                    ({'first_text_ms': 60000.0}, 2)),
    '--slo-target': Effect(['--slo-target', '0.5'], lambda ran: ran.summary['slo_target'], 0.5),
    '--fail-if': Effect(['--fail-if', 'runs > 1'], lambda ran: (ran.status, ran.summary['gates']),
                        (1, [{'expr': 'runs > 1', 'value': 2, 'held': False}])),
    '--report': Effect(['--report', 'r.html'], lambda ran: '<html' in ran.text('r.html'), True),
    '--csv': Effect(['--csv', 'c.csv'], lambda ran: (len(ran.text('c.csv').splitlines()), ran.text('c.csv')[:7]),
                    (3, 'run,ok,')),
    '--server-metrics': Effect(['--server-metrics'], lambda ran: (
        ran.summary['server_metrics']['failed'], ran.summary['server_metrics']['scrapes'] >= 2,
        'out.server-metrics.jsonl' in ran.files), (0, True, True)),
    '--metrics-interval': Effect(['--server-metrics', '--metrics-interval', '0.5'],
                                 lambda ran: ran.summary['server_metrics']['interval_s'], 0.5),
    '--metrics-port': Effect(['--metrics-port', '0'], lambda ran: bool(
        re.search(r'metrics served at http://127\.0\.0\.1:\d+/metrics during the load', ran.stderr)), True),
    '--metrics-host': Effect(['--metrics-port', '0', '--metrics-host', '127.0.0.2'],
                             lambda ran: 'metrics served at http://127.0.0.2:' in ran.stderr, True),
    '--otlp-json': Effect(['--otlp-json', 'm.otlp.jsonl'], lambda ran: finished_runs(ran.text('m.otlp.jsonl')), 2),
    '--otlp-endpoint': Effect(['--otlp-endpoint', 'http://127.0.0.1:9'], lambda ran: bool(
        re.search(r'warning: --otlp-endpoint 127\.0\.0\.1:9/v1/metrics: \w+', ran.stderr)), True),
}
EFFECTS = {
    **{(flag, ONE): effect for flag, effect in REQUEST_EFFECTS.items()},
    ('--seed', ONE): Effect(['--seed', '1'], lambda ran: (FIRST_MIXED_OK, ran.status), (True, 0), mode='mixed'),
    ('--capture', ONE): Effect(['--capture', 'c.http'], lambda ran: ran.text('c.http').startswith('HTTP/1.'), True),

    **{(flag, LOAD): effect._replace(args=['--runs', '2', *effect.args])
       for flag, effect in {**REQUEST_EFFECTS, **SUMMARY_EFFECTS}.items()},
    ('--runs', LOAD): Effect(['--runs', '3'], lambda ran: ran.summary['runs'], 3),
    ('--concurrency', LOAD): Effect(['--runs', '2', '--concurrency', '2'], lambda ran: ran.load('concurrency'), {2}),
    ('--rate', LOAD): Effect(['--runs', '2', '--rate', '100'], lambda ran: ran.load('rate'), {100}),
    ('--processes', LOAD): Effect(['--runs', '2', '--processes', '2'], lambda ran: ran.load('processes'), {2}),
    ('--duration', LOAD): Effect(['--rate', '40', '--duration', '0.1'], lambda ran: ran.load('duration'), {0.1}),
    ('--arrivals', LOAD): Effect(['--runs', '2', '--rate', '100', '--arrivals', 'constant'],
                                 lambda ran: ran.load('arrivals'), {'constant'}),
    ('--seed', LOAD): Effect(['--runs', '2', '--rate', '100', '--seed', '5'], lambda ran: ran.load('seed'), {5}),
    ('--keep-alive', LOAD): Effect(['--runs', '2', '--keep-alive'], lambda ran: ran.load('keep_alive'), {True}),
    ('--prompts', LOAD): Effect(['--runs', '2', '--prompts', '{in}/prompts.jsonl'],
                                lambda ran: ran.request('prompt_sha256'), {sha('first'), sha('second')}),
    ('--repeat', LOAD): Effect(['--runs', '2', '--repeat', '2'], lambda ran: ran.load('repeat'), {0, 1}),
    ('--repeat-seeds', LOAD): Effect(['--runs', '2', '--rate', '100', '--repeat', '2', '--repeat-seeds', 'same'],
                                     lambda ran: ran.load('seed'), {0}),
    ('--warmup', LOAD): Effect(['--runs', '3', '--warmup', '1'], lambda ran: ran.summary['warmup_runs'], 1),
    ('--shard', LOAD): Effect(['--runs', '4', '--shard', '1/2'],
                              lambda ran: sorted((r['run'], r['load']['plan']['shard']) for r in ran.records),
                              [(1, 1), (3, 1)]),
    ('--start-at', LOAD): Effect(['--runs', '2', '--start-at', '{past}'],
                                 lambda ran: {r['load']['plan']['start_at'] is not None for r in ran.records}, {True}),
    ('--rates', LOAD): Effect(['--rates', '40,80', '--duration', '0.05'],
                              lambda ran: [step['rate'] for step in ran.summary['steps']], [40.0, 80.0]),
    ('--concurrencies', LOAD): Effect(['--runs', '2', '--concurrencies', '1,2'],
                                      lambda ran: [step['concurrency'] for step in ran.summary['concurrency_steps']],
                                      [1, 2]),
    ('--cache-salt', LOAD): Effect(['--runs', '2', '--repeat', '2', '--cache-salt', 'pass'],
                                   lambda ran: (ran.load('cache_salt'), ran.markers()), ({'pass'}, 2)),
    ('--find-capacity', LOAD): Effect(['--find-capacity', '20:40', '--duration', '0.05'],
                                      SEARCHED, (True, {(20.0, 40.0)}), served=True),

    **{(flag, SESSIONS): effect for flag, effect in SUMMARY_EFFECTS.items()},
    **{(flag, SESSIONS): REQUEST_EFFECTS[flag] for flag in ('--dialect', '--header')},
    ('--tool-choice', SESSIONS): Effect(['--sessions', '{in}/agent.jsonl', '--tool-choice', 'required'],
                                        lambda ran: ran.request('tool_choice'), {'required'}, mode='agent'),
    ('--runs', SESSIONS): Effect(['--runs', '1'], lambda ran: ran.summary['sessions']['sessions'], 1),
    ('--concurrency', SESSIONS): Effect(['--concurrency', '2'], lambda ran: ran.load('concurrency'), {2}),
    ('--rate', SESSIONS): Effect(['--rate', '100'], lambda ran: ran.load('rate'), {100}),
    ('--arrivals', SESSIONS): Effect(['--rate', '100', '--arrivals', 'constant'], lambda ran: ran.load('arrivals'),
                                     {'constant'}),
    ('--seed', SESSIONS): Effect(['--rate', '100', '--seed', '4'], lambda ran: ran.load('seed'), {4}),
    ('--cache-salt', SESSIONS): Effect(['--cache-salt', 'session'], lambda ran: (ran.load('cache_salt'), ran.markers()),
                                       ({'session'}, 2)),
    ('--session-slo', SESSIONS): Effect(['--session-slo', 'total_ms=60000'],
                                        lambda ran: (ran.summary['sessions']['session_slo'],
                                                     {r['load']['session_slo']['total_ms'] for r in ran.records},
                                                     ran.summary['sessions']['good']),
                                        ({'total_ms': 60000.0}, {60000.0}, 2)),
    ('--keep-alive', SESSIONS): Effect(['--sessions', '{in}/two-turns.jsonl', '--keep-alive'],
                                       lambda ran: sorted(r['connection']['reused'] for r in ran.records),
                                       [False, True]),
    ('--cross-check', SESSIONS): Effect(['--sessions', '{in}/agent.jsonl', '--cross-check'],  # each turn's twin
                                        lambda ran: ({r['cross_check']['same'] for r in ran.records},
                                                     len(ran.records) > 1),
                                        ({True}, True), mode='pair-honest'),
    ('--duration', SESSIONS): Effect(['--rate', '40', '--duration', '0.1'],
                                     lambda ran: (ran.load('duration'), ran.summary['sessions']['sessions']),
                                     ({0.1}, stream_client._load._scheduled_runs(40, 'poisson', 0, 0.1))),
    ('--output-tokens', SESSIONS): Effect(['--output-tokens', '7:2', '--seed', '1'],  # a budget drawn per session
                                          lambda ran: sorted((r['session_index'], r['request']['max_tokens'])
                                                             for r in ran.records),
                                          [(index, budget) for index, (_, budget, _) in enumerate(
                                              stream_client._workloads._Synthetic(output_tokens=(7, 2)).plan(2, 1))]),
    ('--processes', SESSIONS): Effect(['--processes', '2'],
                                      lambda ran: (ran.load('processes'), sorted(r['run'] for r in ran.records),
                                                   sorted(r['session_index'] for r in ran.records)),
                                      ({2}, [0, 1], [0, 1])),
    ('--repeat', SESSIONS): Effect(['--repeat', '2'], lambda ran: (ran.load('repeat'), len(ran.records)), ({0, 1}, 4)),
    ('--repeat-seeds', SESSIONS): Effect(['--rate', '100', '--repeat', '2', '--repeat-seeds', 'same'],
                                         lambda ran: ran.load('seed'), {0}),
    ('--warmup', SESSIONS): Effect(['--warmup', '1'],
                                   lambda ran: (ran.summary['warmup_runs'], ran.summary['sessions']['sessions'],
                                                sorted((r['session_index'], r['warmup']) for r in ran.records)),
                                   (1, 1, [(0, True), (1, False)])),
    ('--shard', SESSIONS): Effect(['--shard', '1/2'],
                                  lambda ran: sorted((r['session'], r['session_index'], r['load']['plan']['shard'])
                                                     for r in ran.records), [('s1', 1, 1)]),
    ('--start-at', SESSIONS): Effect(['--start-at', '{past}'],
                                     lambda ran: {r['load']['plan']['start_at'] is not None for r in ran.records},
                                     {True}),
    ('--rates', SESSIONS): Effect(['--rates', '40,80', '--duration', '0.05'],
                                  lambda ran: [step['rate'] for step in ran.summary['steps']], [40.0, 80.0]),
    ('--concurrencies', SESSIONS): Effect(['--concurrencies', '1,2'],
                                          lambda ran: [step['concurrency']
                                                       for step in ran.summary['concurrency_steps']], [1, 2]),
    ('--find-capacity', SESSIONS): Effect(['--find-capacity', '20:40', '--duration', '0.05'],
                                          SEARCHED, (True, {(20.0, 40.0)}), served=True),

    **{(flag, TRACE): effect for flag, effect in SUMMARY_EFFECTS.items()},
    **{(flag, TRACE): REQUEST_EFFECTS[flag] for flag in ('--tools', '--tool-choice', '--json-schema', '--dialect',
                                                         '--header')},
    ('--runs', TRACE): Effect(['--runs', '1'], lambda ran: ran.summary['trace']['lines'], 1),
    ('--cross-check', TRACE): REQUEST_EFFECTS['--cross-check'],
    ('--processes', TRACE): Effect(['--processes', '2'], lambda ran: (ran.load('processes'),
                                                                      sorted(r['run'] for r in ran.records)),
                                   ({2}, [0, 1])),
    ('--keep-alive', TRACE): Effect(['--keep-alive', '--concurrency', '1'],
                                    lambda ran: sorted(r['connection']['reused'] for r in ran.records), [False, True]),
    ('--repeat', TRACE): Effect(['--repeat', '2'],
                                lambda ran: (sorted((r['load']['repeat'], r['run']) for r in ran.records),
                                             ran.summary['trace']['lines']),
                                ([(0, 0), (0, 1), (1, 0), (1, 1)], 4)),
    ('--shard', TRACE): Effect(['--shard', '1/2'],
                               lambda ran: sorted((r['run'], r['load']['plan']['shard']) for r in ran.records),
                               [(1, 1)]),
    ('--warmup', TRACE): Effect(['--warmup', '1'],
                                lambda ran: (ran.summary['warmup_runs'], ran.summary['trace']['lines'],
                                             sorted(r['warmup'] for r in ran.records)), (1, 1, [False, True])),
    ('--start-at', TRACE): Effect(['--start-at', '{past}'],
                                  lambda ran: {r['load']['plan']['start_at'] is not None for r in ran.records}, {True}),
    ('--concurrency', TRACE): Effect(['--concurrency', '1'], lambda ran: ran.load('concurrency'), {1}),
    ('--seed', TRACE): Effect(['--seed', '3'], lambda ran: (TWO_MIXED_OK, ran.summary['ok']), (True, 2), mode='mixed'),
    ('--cache-salt', TRACE): Effect(['--cache-salt', 'pass'], lambda ran: (ran.load('cache_salt'), ran.markers()),
                                    ({'pass'}, 1)),
    ('--trace-speed', TRACE): Effect(['--trace-speed', '2'], lambda ran: ran.summary['trace']['speed'], 2),
    ('--block-size', TRACE): Effect(['--trace', '{in}/mooncake.jsonl', '--block-size', '8'],
                                    lambda ran: {r['trace']['block_size'] for r in ran.records}, {8}),
}


class CountingServer:
    """A loopback listener that only counts the connections made to it."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(('127.0.0.1', 0))
        self.sock.listen(16)
        self.sock.settimeout(0.05)
        self.connections = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f'http://127.0.0.1:{self.sock.getsockname()[1]}/v1/chat/completions'

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                connection, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            connection.close()

    def close(self) -> None:
        self.stop.set()
        self.thread.join()
        self.sock.close()


class FlagTableTests(unittest.TestCase):

    @classmethod
    def setUpClass(cls) -> None:
        cls.tmp = tempfile.TemporaryDirectory()
        cls.inputs = os.path.join(cls.tmp.name, 'in')
        os.mkdir(cls.inputs)
        one_turn = [{'id': f's{n}', 'turns': [f'session {n}: hello']} for n in range(2)]
        files = {
            'prompt.txt': 'from a file', 'tools.json': json.dumps(fixture_server.TOOLS),
            'schema.json': json.dumps(fixture_server.JSON_SCHEMA),
            'prompts.jsonl': '"first"\n"second"\n',
            'sessions.jsonl': ''.join(json.dumps(line) + '\n' for line in one_turn),
            'two-turns.jsonl': json.dumps({'id': 's', 'turns': ['one', 'two']}) + '\n',
            'agent.jsonl': json.dumps({'id': 'a', 'tools': fixture_server.TOOLS, 'turns': ['weather?'],
                                       'tool_results': {'get_weather': ['sunny']}}) + '\n',
            'trace.jsonl': '{"timestamp": 0, "prompt": "a"}\n{"timestamp": 0, "prompt": "b"}\n',
            'mooncake.jsonl': '{"timestamp": 0, "input_length": 8, "hash_ids": [1]}\n',
        }
        for name, text in files.items():
            with open(os.path.join(cls.inputs, name), 'w', encoding='utf-8') as file:
                file.write(text)
        cls.runs = 0

    @classmethod
    def tearDownClass(cls) -> None:
        cls.tmp.cleanup()

    def typed(self, args: list) -> list:
        return [arg.replace('{in}', self.inputs).replace('{past}', past(5)) for arg in args]

    def folder(self) -> str:
        type(self).runs += 1
        path = os.path.join(self.tmp.name, f'run{self.runs}')
        os.mkdir(path)
        return path

    def base(self, column: str, args: list) -> list:
        """The command line of a workload, the workload's own file left out when args give one."""
        given = {SESSIONS: '--sessions', TRACE: '--trace'}.get(column)
        workload = [given, f'{{in}}/{column}.jsonl'] if given and given not in args else []
        return [*workload, '--output', 'out.json' if column == ONE else 'out.jsonl']

    def run_workload(self, column: str, effect: Effect) -> Ran:
        folder = self.folder()
        if effect.served:
            server = Fixture(effect.mode).__enter__()  # (TestCase.enterContext is Python 3.11's)
            self.addCleanup(server.__exit__, None, None, None)
            source = ['--url', server.url, '--model', 'm']
        else:
            source = ['--fixture', effect.mode]
        done = run_cli(*self.typed([*source, *self.base(column, effect.args), *effect.args]), cwd=folder, timeout=60)
        output = os.path.join(folder, 'out.json' if column == ONE else 'out.jsonl')
        records = []
        if os.path.exists(output):
            with open(output, encoding='utf-8') as file:
                text = file.read()
            records = [json.loads(text)] if column == ONE else [json.loads(line) for line in text.splitlines()]
        summary = json.loads(done.stdout) if done.stdout.strip() else {}
        return Ran(done.returncode, summary, records, set(os.listdir(folder)), folder, done.stderr)

    @sans_io
    def test_the_table_has_a_row_for_every_flag_of_a_workload_and_a_cell_for_each_workload(self):
        flags = {option for action in stream_client._args._parser()._actions for option in action.option_strings
                 if option.startswith('--')}
        decided = (set(_FLAG_TABLE) | set(stream_client._workload_flags._EVERY_WORKLOAD)
                   | set(stream_client._workload_flags._OTHER_COMMANDS))
        self.assertEqual(flags - decided, set(), 'a flag nobody decided for the workloads')
        self.assertEqual(decided - flags, set(), 'a flag the parser does not have')
        self.assertEqual(len(set(_FLAG_TABLE) & (set(stream_client._workload_flags._EVERY_WORKLOAD)
                                                 | set(stream_client._workload_flags._OTHER_COMMANDS))), 0)
        words = {'yes', 'load', *stream_client._workload_flags._WHY}
        for flag, cells in _FLAG_TABLE.items():
            with self.subTest(flag=flag):
                self.assertEqual(len(cells), len(_WORKLOADS))
                self.assertLessEqual(set(cells), words)
                self.assertEqual(cells[0] == 'load' and cells[1] == 'yes', cells[0] == 'load')
        self.assertEqual(set(SAMPLE), set(_FLAG_TABLE))

    @sans_io
    def test_the_flags_that_make_a_load_make_one(self):
        parser = stream_client._args._parser()
        for flag in _LOAD_MAKERS:
            with self.subTest(flag=flag):
                self.assertEqual(_FLAG_TABLE[flag][:2], ('load', 'yes'))
                typed = [flag, *self.typed(SAMPLE[flag]), '--output', 'x']
                self.assertEqual(stream_client._workload_flags._workload_of(parser, parser.parse_args(typed), typed),
                                 (1, flag))
        for typed in ([], ['--runs', '1'], ['--seed', '3', '--input-tokens', '5']):
            with self.subTest(typed=typed):
                self.assertEqual(stream_client._workload_flags._workload_of(parser, parser.parse_args(typed), typed),
                                 (0, None))

    def test_each_refused_pair_exits_2_naming_both_flags_before_anything_is_sent(self):
        server = CountingServer()
        self.addCleanup(server.close)
        refused = [(flag, column, cell) for flag, cells in _FLAG_TABLE.items() for column, cell in zip(COLUMNS, cells)
                   if cell != 'yes' and not (cell == 'load' and flag in _LOAD_MAKERS)]
        self.assertGreater(len(refused), 40)
        chosen = {ONE: None, LOAD: '--runs', SESSIONS: '--sessions', TRACE: '--trace'}
        for flag, column, cell in refused:
            with self.subTest(flag=flag, workload=column):
                folder = self.folder()
                load = ['--runs', '2'] if column == LOAD else []
                done = run_cli(*self.typed(['--url', server.url, '--model', 'm', *load, *self.base(column, []), flag,
                                            *SAMPLE[flag]]), cwd=folder)
                self.assertEqual((done.returncode, done.stdout), (2, ''), done.stderr)
                lines = done.stderr.splitlines()
                self.assertEqual(len(lines), 1, done.stderr)
                self.assertTrue(lines[0].startswith(f'stream_client.py: error: {flag} '), lines[0])
                self.assertTrue(lines[0].endswith('(docs/cli.md#flags-and-workloads)'), lines[0])
                if chosen[column]:
                    self.assertIn(chosen[column], lines[0].replace(flag, '', 1))
                else:
                    self.assertIn('not a single run' if cell == 'load' else f'--{cell[4:]}', lines[0])
                self.assertEqual(os.listdir(folder), [])
        self.assertEqual(server.connections, 0)

    def test_each_honoured_pair_has_its_effect(self):
        honoured = {(flag, column) for flag, cells in _FLAG_TABLE.items() for column, cell in zip(COLUMNS, cells)
                    if cell == 'yes'}
        self.assertEqual(set(EFFECTS), honoured, 'an honoured pair without its effect, or an effect of a refused pair')
        for (flag, column), effect in sorted(EFFECTS.items()):
            with self.subTest(flag=flag, workload=column):
                ran = self.run_workload(column, effect)
                self.assertNotIn(ran.status, (2, None), ran.stderr)
                self.assertEqual(effect.read(ran), effect.expected, ran.stderr)

    def test_a_gate_on_sessions_and_on_a_trace_decides_the_exit_status_and_is_in_the_summary(self):
        for column in (SESSIONS, TRACE):
            for gate, status in (('ok_ratio < 1', 0), ('runs > 1', 1), ('first_text_ms.p50 > 60000', 0),
                                 ('error_kind.eof_before_done > 0', 0)):
                with self.subTest(workload=column, gate=gate):
                    ran = self.run_workload(column, Effect(['--fail-if', gate, '--fail-if', 'runs < 1'], None, None))
                    self.assertEqual(ran.status, status, ran.stderr)
                    self.assertEqual([(g['expr'], g['held']) for g in ran.summary['gates']],
                                     [(gate, not status), ('runs < 1', True)])
                    failed = f'gate FAILED fail if {gate}'  # elsewhere than a terminal, as a load: those that failed
                    self.assertEqual((failed in ran.stderr, 'gate held' in ran.stderr), (bool(status), False),
                                     ran.stderr)
            with self.subTest(workload=column, gate='a broken run'):
                ran = self.run_workload(column, Effect(['--fail-if', 'not_ok > 0'], None, None, mode='truncated'))
                self.assertEqual((ran.status, ran.summary['gates'][0]['held']), (1, False), ran.stderr)
                ran = self.run_workload(column, Effect([], None, None, mode='truncated'))  # the default gates
                self.assertEqual((ran.status, ran.summary['gates'][0]), (1, {'expr': 'ok_ratio < 1', 'value': 0.0,
                                                                             'held': False}))

    def test_what_sessions_and_traces_honour_is_checked_before_anything_is_sent(self):
        server = CountingServer()
        self.addCleanup(server.close)
        cases = {(SESSIONS, '--tool-choice', 'none'): '--tool-choice needs tools, and no session of --sessions',
                 (SESSIONS, '--slo-target', '5'): '--slo-target must be a fraction above 0 and at most 1',
                 (TRACE, '--slo-target', '0'): '--slo-target must be a fraction above 0 and at most 1',
                 (SESSIONS, '--arrivals', 'constant'): '--arrivals spaces the starts of an open loop: give --rate',
                 (LOAD, '--runs', '2', '--arrivals', 'constant'): '--arrivals spaces the starts of an open loop',
                 (LOAD, '--runs', '2', '--arrivals', 'poisson'): '--arrivals spaces the starts of an open loop',
                 (LOAD, '--runs', '2', '--seed', '9'): '--seed seeds what a load draws',
                 (TRACE, '--seed', '0'): '--seed seeds what a load draws'}
        for (column, *flags), words in cases.items():
            with self.subTest(workload=column, flags=flags):
                folder = self.folder()
                done = run_cli(*self.typed(['--url', server.url, '--model', 'm', *self.base(column, []), *flags]),
                               cwd=folder)
                self.assertEqual((done.returncode, len(done.stderr.splitlines())), (2, 1), done.stderr)
                self.assertIn(words, done.stderr)
                self.assertEqual(os.listdir(folder), [])
        self.assertEqual(server.connections, 0)

    def test_an_input_tokens_load_sends_the_headers_dialect_and_cross_check_it_is_given(self):
        ran = self.run_workload(LOAD, Effect(['--runs', '2', '--input-tokens', '6', '--header', 'X-Test: 1',
                                              '--dialect', 'strict', '--cross-check'], None, None, mode='pair-honest'))
        self.assertEqual(ran.status, 0, ran.stderr)
        self.assertEqual((ran.request('headers'), ran.request('dialect'), ran.request('input_tokens')),
                         ({('X-Test',)}, {'strict'}, {6}))
        self.assertEqual({record['cross_check']['same'] for record in ran.records}, {True})

    @sans_io
    def test_docs_cli_shows_the_table(self):
        with open(HERE / 'docs' / 'cli.md', encoding='utf-8') as file:
            doc = file.read()
        header = '| flag | ' + ' | '.join(f'`{name}`' if name.startswith('--') else name for name in _WORKLOADS) + ' |'
        rows = [header, '| --- |' + ' --- |' * len(_WORKLOADS)]
        words = {'yes': 'yes', 'load': 'no'}
        for flag, cells in _FLAG_TABLE.items():
            shown = ['a load' if cell == 'load' and flag in _LOAD_MAKERS else words.get(cell, 'no') for cell in cells]
            rows.append(f'| `{flag}` | ' + ' | '.join(shown) + ' |')
        table = re.search(r'<!-- the flag table -->\n(.*?)\n<!-- end of the flag table -->', doc, re.S)
        self.assertIsNotNone(table, 'docs/cli.md has no flag table between its markers')
        self.assertEqual(table[1], '\n'.join(rows))
        for name in stream_client._workload_flags._EVERY_WORKLOAD:
            self.assertIn(f'`{name}`', doc[table.end():table.end() + 2000], 'the flags every workload honours')


if __name__ == '__main__':
    unittest.main()
