"""Gates on a summary (_gates): --fail-if parsed before anything is sent, evaluated on every family of figures."""
from __future__ import annotations

import json
import math
import tempfile
import unittest
from pathlib import Path

import stream_client
from .support import Fixture, run_cli, run_in_terminal
from .tiers import sans_io


def nearest_rank(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


@sans_io
class GateParserTests(unittest.TestCase):
    """The expression FIGURE OP NUMBER, without I/O."""

    def test_an_expression_names_its_figure_operator_and_bound(self):
        gate = stream_client._gates._parse_gate(' first_text_ms.p99 >= 500 ')
        self.assertEqual((gate.text, gate.figure, gate.operator, gate.bound),
                         ('first_text_ms.p99 >= 500', 'first_text_ms.p99', '>=', 500.0))
        self.assertEqual(stream_client._gates._parse_gate('error_kind.eof_before_done>0').operator, '>')

    def test_a_gate_fails_when_its_expression_is_true_or_its_figure_is_missing(self):
        gate = stream_client._gates._parse_gate('not_ok > 0')
        self.assertEqual([gate.failed_by(value) for value in (0, 1, None)], [False, True, True])

    def test_a_bad_expression_says_what_is_wrong(self):
        for text, words in (('first_text_ms.p99', 'expected FIGURE OP NUMBER'),
                            ('first_text_ms.p95 > 3', 'has the percentiles p50, p90, p99, max'),
                            ('error_kind.no_such_kind > 0', 'needs a failure kind'),
                            ('latency > 3', "no figure 'latency'"),
                            ('ok_ratio < 1e999', 'must be a finite number'),
                            ('ok_ratio < abc', 'must be a finite number')):
            with self.subTest(text=text), self.assertRaises(stream_client.UsageError) as caught:
                stream_client._gates._parse_gate(text)
            self.assertIn(words, str(caught.exception))
            self.assertNotIn('\n', str(caught.exception))

    def test_without_fail_if_the_gate_is_every_run_ok(self):
        gates = stream_client._gates._parse_gates(None)
        base = {'not_ok_by_kind': {}, 'latency_ms': {}}
        for runs, ok, held in ((3, 3, True), (10_000, 9_999, False), (0, 0, False)):
            result = {**base, 'ok_ratio': ok / runs if runs else None}
            self.assertEqual([gate['held'] for gate in stream_client._gates._evaluate_gates(gates, result)], [held])

    def test_a_percentile_with_the_failures_inside_that_is_late_is_over_any_bound(self):
        late = {'p50': 12.5, 'p90': 40.0, 'p99': None, 'max': None, 'late': ['p99', 'max']}
        result = {'not_ok_by_kind': {}, 'latency_all_ms': {'first_text_ms': late, 'duration_ms': None}}
        evaluate = stream_client._gates._evaluate_gates
        gates = stream_client._gates._parse_gates(['first_text_ms_all.p99 > 1e300', 'first_text_ms_all.max >= 0',
                                                   'first_text_ms_all.p99 < 500', 'first_text_ms_all.p90 > 500',
                                                   'duration_ms_all.p50 > 500', 'duration_ms_all.p50 < 500'])
        self.assertEqual(evaluate(gates, result), [
            {'expr': 'first_text_ms_all.p99 > 1e300', 'value': None, 'infinite': '+inf', 'held': False},
            {'expr': 'first_text_ms_all.max >= 0', 'value': None, 'infinite': '+inf', 'held': False},
            {'expr': 'first_text_ms_all.p99 < 500', 'value': None, 'infinite': '+inf', 'held': True},
            {'expr': 'first_text_ms_all.p90 > 500', 'value': 40.0, 'held': True},
            # no planned run at all: no figure, and a gate on it fails whatever its operator
            {'expr': 'duration_ms_all.p50 > 500', 'value': None, 'held': False},
            {'expr': 'duration_ms_all.p50 < 500', 'value': None, 'held': False}])
        lines = stream_client._gates._gate_lines(evaluate(gates[:1], result))
        self.assertEqual(lines, ['gate FAILED fail if first_text_ms_all.p99 > 1e300: infinitely late (+inf)'])

    def test_a_certified_percentile_without_enough_runs_fails_its_gate(self):
        tail = {'first_text_ms': {'runs': 100, 'p90': 31.5, 'p99': None}}
        result = {'not_ok_by_kind': {}, 'certified_tail': tail}
        gates = stream_client._gates._parse_gates([f'first_text_ms_certified.{text}'
                                                   for text in ('p90 > 30', 'p99 > 30', 'p99 < 30')])
        evaluated = stream_client._gates._evaluate_gates(gates, result)
        self.assertEqual([(gate['value'], gate['held']) for gate in evaluated], [(31.5, False), (None, False),
                                                                                 (None, False)])
        self.assertEqual(stream_client._gates._gate_lines(evaluated[1:2]),
                         ['gate FAILED fail if first_text_ms_certified.p99 > 30: none: too few ok runs to certify it'])

    def test_the_tail_figures_are_named_as_the_summary_names_them(self):
        for text in ('max_event_gap_ms_all.p50 > 1', 'duration_ms_certified.p99 > 1',
                     'delta.first_text_ms_all.p99 > 5%'):
            self.assertEqual(stream_client._gates._parse_gate(text).text, text)
        for text, words in (('first_text_ms_certified.p50 > 1', 'has the percentiles p90, p99'),
                            ('first_text_ms_all.p95 > 1', 'has the percentiles p50, p90, p99, max'),
                            ('headers_ms_all.p99 > 1', "no figure 'headers_ms_all.p99'")):
            with self.subTest(text=text), self.assertRaises(stream_client.UsageError) as caught:
                stream_client._gates._parse_gate(text)
            self.assertIn(words, str(caught.exception))

    def test_a_difference_with_one_side_late_is_infinite_with_its_sign(self):
        def delta(base_late: bool, candidate_late: bool) -> dict:
            entry = {'base': None if base_late else 10.0, 'candidate': None if candidate_late else 12.0,
                     'difference': None if base_late or candidate_late else 2.0, 'relative_pct': None}
            return {'delta': {'first_text_ms_all.p99': {**entry, 'late': {'base': base_late,
                                                                          'candidate': candidate_late}}}}
        gates = stream_client._gates._parse_gates(['delta.first_text_ms_all.p99 > 5',
                                                   'delta.first_text_ms_all.p99 < 0'])
        held = {sides: [gate['held'] for gate in stream_client._gates._evaluate_gates(gates, delta(*sides))]
                for sides in ((False, True), (True, False), (True, True), (False, False))}
        self.assertEqual(held, {(False, True): [False, True],   # only the candidate late: +inf, over any bound
                                (True, False): [True, False],   # only the base late: -inf
                                (True, True): [False, False],   # both late: no difference, a missing figure
                                (False, False): [True, True]})  # 2 ms

    def test_session_and_turn_goodput_are_read_from_the_sessions_block_and_are_no_default_gate(self):
        block = {'ok_ratio': 1.0, 'good': 0, 'good_ratio': 0.0, 'goodput_per_s': 0.0, 'turns_good_ratio': 2 / 3,
                 'turns_goodput_per_s': 12.5}
        result = {'ok_ratio': 1.0, 'not_ok_by_kind': {}, 'latency_ms': {}, 'sessions': block}
        expressions = ['sessions_good < 1', 'sessions_good_ratio < 1', 'sessions_goodput_per_s <= 0',
                       'turns_good_ratio < 0.5', 'turns_goodput_per_s < 10']
        gates = tuple(stream_client._gates._parse_gate(text) for text in expressions)
        evaluated = stream_client._gates._evaluate_gates(gates, result)
        self.assertEqual([(gate['value'], gate['held']) for gate in evaluated],
                         [(0, False), (0.0, False), (0.0, False), (2 / 3, True), (12.5, True)])
        without = {key: value for key, value in result.items() if key != 'sessions'}  # not a load of sessions
        self.assertEqual([gate['held'] for gate in stream_client._gates._evaluate_gates(gates, without)], [False] * 5)
        defaults = [gate.text for gate in stream_client._gates._default_gates(result)]
        self.assertEqual(defaults, ['ok_ratio < 1', 'sessions_ok_ratio < 1'])

class GateCommandTests(unittest.TestCase):
    """--fail-if on a load and on --summary of its file: the exit status and the summary's gates agree."""

    @classmethod
    def setUpClass(cls) -> None:
        cls.tmp = tempfile.TemporaryDirectory()
        cls.dir = Path(cls.tmp.name)
        with Fixture('mixed', seed=11) as fixture:
            cls.done = run_cli('--url', fixture.url, '--model', 'm', '--runs', '40', '--concurrency', '8', '--idle',
                               '2', '--slo', 'first_text_ms=30000', '--output', 'load.jsonl', '--quiet',
                               cwd=cls.tmp.name, timeout=90)
        cls.records = [json.loads(line) for line in (cls.dir / 'load.jsonl').read_text().splitlines()]
        cls.summary = json.loads(cls.done.stdout)

    @classmethod
    def tearDownClass(cls) -> None:
        cls.tmp.cleanup()

    def gate(self, *expressions: str) -> tuple[int, list[dict]]:
        args = [part for text in expressions for part in ('--fail-if', text)]
        done = run_cli('--summary', 'load.jsonl', *args, cwd=self.tmp.name)
        self.assertEqual(done.stderr, '')
        return done.returncode, json.loads(done.stdout)['gates']

    def assert_family(self, figure: str, value: float) -> None:
        """A gate at the figure's value that holds (FIGURE > value) and one that fails (FIGURE >= value)."""
        status, gates = self.gate(f'{figure} > {value!r}')
        self.assertEqual((status, gates), (0, [{'expr': f'{figure} > {value!r}', 'value': value, 'held': True}]))
        status, gates = self.gate(f'{figure} >= {value!r}')
        self.assertEqual((status, gates), (1, [{'expr': f'{figure} >= {value!r}', 'value': value, 'held': False}]))

    def test_the_load_is_mixed_and_gated_by_default_on_every_run_ok(self):
        ok = sum(record['ok'] for record in self.records)
        self.assertLess(ok, len(self.records))
        self.assertEqual(self.done.returncode, 1)
        self.assertEqual(self.summary['gates'], [{'expr': 'ok_ratio < 1', 'value': ok / 40, 'held': False}])

    def test_counts_and_ratios(self):
        ok = sum(record['ok'] for record in self.records)
        self.assert_family('ok_ratio', ok / 40)
        self.assert_family('not_ok', 40 - ok)
        good = sum(record['ok'] and record['first_text_ms'] <= 30000 for record in self.records)
        self.assert_family('slo_attainment', round(good / 40, 4))

    def test_goodput(self):
        good = sum(record['ok'] and record['first_text_ms'] <= 30000 for record in self.records)
        self.assertAlmostEqual(self.summary['goodput_per_s'] * self.summary['wall_s'], good, delta=good / 100)
        self.assert_family('goodput_per_s', self.summary['goodput_per_s'])

    def test_percentiles_of_latency_figures(self):
        for field in ('headers_ms', 'first_text_ms', 'duration_ms'):
            for p in (50, 90, 99):
                with self.subTest(field=field, p=p):
                    values = [record[field] for record in self.records if record['ok']]
                    self.assert_family(f'{field}.p{p}', nearest_rank(values, p))
        self.assert_family('event_gaps_ms.max', max(gap for record in self.records if record['ok']
                                                    for gap in record['event_gaps_ms']))

    def test_percentiles_with_the_failures_inside(self):
        # 40 planned runs, about two in five not ok: each counts as infinitely late, so p50 is the nearest rank
        # over 40 values of which the failures are +inf, and p99 is late
        values = [record['first_text_ms'] if record['ok'] else math.inf for record in self.records]
        self.assertLess(nearest_rank(values, 50), math.inf)
        self.assert_family('first_text_ms_all.p50', nearest_rank(values, 50))
        status, gates = self.gate('first_text_ms_all.p99 > 60000', 'first_text_ms.p99 > 60000')
        self.assertEqual((status, gates), (1, [
            {'expr': 'first_text_ms_all.p99 > 60000', 'value': None, 'infinite': '+inf', 'held': False},
            {'expr': 'first_text_ms.p99 > 60000', 'value': self.summary['latency_ms']['first_text_ms']['p99'],
             'held': True}]))

    def test_counts_of_a_failure_kind(self):
        kinds = [record['error_kind'] for record in self.records if not record['ok']]
        kind = max(set(kinds), key=kinds.count)
        self.assert_family(f'error_kind.{kind}', kinds.count(kind))
        absent = next(kind for kind in stream_client.FAILURE_KINDS if kind not in kinds)
        self.assertEqual(self.gate(f'error_kind.{absent} > 0'), (0, [{'expr': f'error_kind.{absent} > 0', 'value': 0,
                                                                      'held': True}]))

    def test_every_gate_must_hold_and_a_missing_figure_fails(self):
        status, gates = self.gate('not_ok > 40', 'runs < 40')
        self.assertEqual((status, [gate['held'] for gate in gates]), (0, [True, True]))
        status, gates = self.gate('not_ok > 40', 'runs < 41')
        self.assertEqual((status, [gate['held'] for gate in gates]), (1, [True, False]))
        (self.dir / 'failed.jsonl').write_text(''.join(json.dumps(record) + '\n' for record in self.records
                                                       if not record['ok']))
        done = run_cli('--summary', 'failed.jsonl', '--fail-if', 'first_text_ms.p50 > 1000', cwd=self.tmp.name)
        self.assertEqual(done.returncode, 1)
        self.assertEqual(json.loads(done.stdout)['gates'],
                         [{'expr': 'first_text_ms.p50 > 1000', 'value': None, 'held': False}])

    def test_a_load_gated_by_fail_if_exits_as_its_gates_say(self):
        with Fixture('ok') as fixture:
            held = run_cli('--url', fixture.url, '--model', 'm', '--runs', '4', '--fail-if', 'not_ok > 0',
                           '--fail-if', 'first_text_ms.p99 > 60000', '--output', 'ok.jsonl', cwd=self.tmp.name)
            failed = run_cli('--url', fixture.url, '--model', 'm', '--runs', '4', '--fail-if', 'ok < 5',
                             '--output', 'short.jsonl', cwd=self.tmp.name)
        self.assertEqual(held.returncode, 0, held.stderr)
        self.assertEqual([gate['held'] for gate in json.loads(held.stdout)['gates']], [True, True])
        self.assertEqual(failed.returncode, 1, failed.stderr)
        self.assertEqual(json.loads(failed.stdout)['gates'], [{'expr': 'ok < 5', 'value': 4, 'held': False}])

    def test_the_table_shows_a_line_per_gate(self):
        status, text = run_in_terminal('--summary', 'load.jsonl', '--fail-if', 'not_ok > 40', '--fail-if',
                                       'runs < 41', cwd=self.tmp.name)
        self.assertEqual(status, 1, text)
        self.assertIn('gate held   fail if not_ok > 40: ', text)
        self.assertIn('gate FAILED fail if runs < 41: 40', text)

    def test_a_bad_expression_is_one_line_and_exit_2_before_anything_is_sent(self):
        with Fixture('ok') as fixture:
            done = run_cli('--url', fixture.url, '--model', 'm', '--runs', '3', '--fail-if', 'first_text_ms.p95 > 3',
                           '--output', 'never.jsonl', cwd=self.tmp.name)
            self.assertIsNone(fixture.last_request)
        self.assertEqual((done.returncode, done.stdout, done.stderr.count('\n')), (2, '', 1))
        self.assertIn("--fail-if 'first_text_ms.p95 > 3'", done.stderr)
        self.assertFalse((self.dir / 'never.jsonl').exists())
        for args in (('--summary', 'load.jsonl', '--fail-if', 'nonsense'),
                     ('--fixture', 'ok', '--output', 'one.json', '--fail-if', 'not_ok > 0')):
            with self.subTest(args=args):
                done = run_cli(*args, cwd=self.tmp.name)
                self.assertEqual((done.returncode, done.stdout, done.stderr.count('\n')), (2, '', 1))
