"""Two loads side by side (_comparison): --compare BASE CANDIDATE, bootstrap intervals, gates on a difference."""
from __future__ import annotations

import json
import random
import tempfile
import unittest
from pathlib import Path

import stream_client
from .support import fake_record, Fixture, run_cli
from .tiers import sans_io


def load_records(values: list[float], load_id: str) -> list[dict]:
    """The records of a made-up load of ok runs whose first text took the given values (ms)."""
    return [{**fake_record(run), 'first_text_ms': value, 'duration_ms': value + 100.0,
             'load': {'id': load_id, 'runs': len(values), 'concurrency': 1}} for run, value in enumerate(values)]


def summary_of(records: list[dict]) -> stream_client.Summary:
    summary = stream_client.Summary()
    for record in records:
        summary.add(record)
    return summary


@sans_io
class ComparisonTests(unittest.TestCase):
    """The difference of each figure, and whether its interval excludes 0, computed without I/O."""

    def test_two_loads_of_the_same_settings_differ_by_nothing_significant_in_19_of_20_repeats(self):
        # Each repeat draws two loads of 100 runs from the same distribution, each load from its own seeded
        # generator (computed latencies, not wall time): the 95% interval of each percentile's difference
        # should include 0. (Over 100 repeats of one shared generator, seeded 0 to 99, the p50 interval
        # included 0 in 93 and the p90 one in 97: near the nominal 95%, as a nearest-rank bootstrap is.)
        def draw(seed: str) -> list[float]:
            rng = random.Random(seed)
            return [rng.lognormvariate(5, 0.3) for _ in range(100)]
        including = {name: 0 for name in ('first_text_ms.p50', 'first_text_ms.p90', 'first_text_ms.p99')}
        for repeat in range(20):
            loads = [load_records(draw(f'{repeat} {name}'), name) for name in ('base', 'candidate')]
            comparison = stream_client._comparison._compare_loads(summary_of(loads[0]), summary_of(loads[1]),
                                                                  seed=repeat)
            for name in including:
                low, high = comparison['delta'][name]['ci95']
                including[name] += low <= 0 <= high
                self.assertEqual(comparison['delta'][name]['significant'], not low <= 0 <= high)
        for name, count in including.items():
            self.assertGreaterEqual(count, 19, name)

    def test_a_slower_candidate_is_significant_with_the_right_sign(self):
        rng = random.Random(7)
        base = load_records([rng.lognormvariate(5, 0.3) for _ in range(60)], 'a')
        slower = load_records([1.2 * rng.lognormvariate(5, 0.3) for _ in range(60)], 'b')
        forward = stream_client._comparison._compare_loads(summary_of(base), summary_of(slower), seed=1)
        backward = stream_client._comparison._compare_loads(summary_of(slower), summary_of(base), seed=1)
        for name in ('first_text_ms.p50', 'duration_ms.p50'):
            self.assertTrue(forward['delta'][name]['significant'])
            self.assertGreater(forward['delta'][name]['ci95'][0], 0)
            self.assertLess(backward['delta'][name]['ci95'][1], 0)
        entry = forward['delta']['first_text_ms.p50']
        self.assertAlmostEqual(entry['difference'], entry['candidate'] - entry['base'], places=5)
        self.assertAlmostEqual(entry['relative_pct'], 100 * entry['difference'] / entry['base'], places=2)

    def test_the_same_seed_gives_the_same_intervals(self):
        rng = random.Random(3)
        loads = [summary_of(load_records([rng.uniform(10, 20) for _ in range(30)], name)) for name in 'ab']
        first, again = (stream_client._comparison._compare_loads(*loads, seed=5) for _ in range(2))
        self.assertEqual(first, again)
        self.assertNotEqual(first['delta']['first_text_ms.p50']['ci95'],
                            stream_client._comparison._compare_loads(*loads, seed=6)['delta']['first_text_ms.p50'][
                                'ci95'])

    def test_verdicts_goodput_and_attainment_are_compared(self):
        base = load_records([10.0] * 4, 'a')
        candidate = load_records([10.0] * 4, 'b')
        candidate[0] = {**candidate[0], 'ok': False, 'error_layer': 'application', 'error_kind': 'eof_before_done',
                        'error': 'application: cut'}
        comparison = stream_client._comparison._compare_loads(summary_of(base), summary_of(candidate), seed=0)
        delta = comparison['delta']
        self.assertEqual((delta['not_ok']['base'], delta['not_ok']['candidate']), (0, 1))
        self.assertEqual(delta['error_kind.eof_before_done']['difference'], 1)
        self.assertEqual((delta['slo_attainment']['difference'], delta['ok_ratio']['relative_pct']), (-0.25, -25.0))
        self.assertIn('goodput_per_s', delta)
        table = stream_client._comparison._comparison_markdown(comparison, ('a.jsonl', 'b.jsonl'))
        self.assertIn('| figure | base (a.jsonl) | candidate (b.jsonl) | difference | 95% interval |', table)
        self.assertIn('| not_ok | 0 | 1 | +1 | |', table)
        self.assertIn('| error_kind.eof_before_done | 0 | 1 | +1 |', table)

    def test_the_tail_is_compared_with_the_failures_inside_and_certified(self):
        base = load_records([float(value) for value in range(1, 101)], 'a')
        candidate = load_records([float(value) for value in range(1, 101)], 'b')
        for run in (98, 99):  # two of 100 cut: the candidate's p99 with the failures inside is late
            candidate[run] = {**candidate[run], 'ok': False, 'error_layer': 'application',
                              'error_kind': 'eof_before_done', 'error': 'application: cut'}
        comparison = stream_client._comparison._compare_loads(summary_of(base), summary_of(candidate), seed=0)
        delta = comparison['delta']
        self.assertEqual(delta['first_text_ms_all.p99'], {'base': 99.0, 'candidate': None, 'difference': None,
                                                          'relative_pct': None,
                                                          'late': {'base': False, 'candidate': True}})
        self.assertEqual(delta['first_text_ms_all.p90'], {'base': 90.0, 'candidate': 90.0, 'difference': 0.0,
                                                          'relative_pct': 0.0})
        self.assertEqual(delta['first_text_ms.p99']['candidate'], 98.0)  # over ok runs: it looks faster
        # 100 and 98 ok runs certify p90 (64 needed), not p99 (662)
        self.assertEqual(delta['first_text_ms_certified.p99']['difference'], None)
        self.assertLess(delta['first_text_ms_certified.p90']['difference'], 0)
        gates = stream_client._gates._parse_gates(['delta.first_text_ms_all.p99 > 50', 'delta.first_text_ms.p99 > 50'])
        self.assertEqual([gate['held'] for gate in stream_client._gates._evaluate_gates(gates, comparison)],
                         [False, True])
        comparison['gates'] = stream_client._gates._evaluate_gates(gates, comparison)
        table = stream_client._comparison._comparison_markdown(comparison, ('a.jsonl', 'b.jsonl'))
        self.assertIn('| first_text_ms_all.p99 | 99 | late | +inf |  |', table)
        self.assertIn('| gate `fail if delta.first_text_ms_all.p99 > 50` | | +inf | **FAILED** | |', table)


class CompareCommandTests(unittest.TestCase):
    """--compare BASE CANDIDATE of two fixture loads on the command line."""

    def setUp(self) -> None:
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.dir = Path(self.tmp.name)

    def test_two_loads_that_differ_only_in_pacing_differ_significantly_in_first_text(self):
        # The fixture writes the events of an answer DELAY apart, the first text three of them in: 2 ms apart
        # against 50 ms apart, so every slow run's first text is at least 150 ms.
        for name, delay in (('fast.jsonl', 0.002), ('slow.jsonl', 0.05)):
            with Fixture('ok', delay=delay) as fixture:
                done = run_cli('--url', fixture.url, '--model', 'm', '--runs', '12', '--concurrency', '4',
                               '--output', name, '--quiet', cwd=self.tmp.name, timeout=60)
                self.assertEqual(done.returncode, 0, done.stderr)
        done = run_cli('--compare', 'fast.jsonl', 'slow.jsonl', '--fail-if', 'delta.first_text_ms.p50 > 10%',
                       '--fail-if', 'delta.ok_ratio < 0', cwd=self.tmp.name)
        comparison = json.loads(done.stdout)
        entry = comparison['delta']['first_text_ms.p50']
        self.assertTrue(entry['significant'], entry)
        self.assertGreater(entry['ci95'][0], 0)
        self.assertEqual([(gate['held'], gate['value']) for gate in comparison['gates']],
                         [(False, entry['relative_pct']), (True, 0.0)])
        self.assertEqual(done.returncode, 1)
        reverse = run_cli('--compare', 'slow.jsonl', 'fast.jsonl', '--fail-if', 'delta.first_text_ms.p50 > 10%',
                          cwd=self.tmp.name)
        self.assertEqual(reverse.returncode, 0)
        self.assertLess(json.loads(reverse.stdout)['delta']['first_text_ms.p50']['ci95'][1], 0)
        markdown = run_cli('--compare', 'fast.jsonl', 'slow.jsonl', '--format', 'markdown', cwd=self.tmp.name)
        self.assertEqual(markdown.returncode, 0)
        self.assertTrue(markdown.stdout.startswith('| figure | base (fast.jsonl) | candidate (slow.jsonl) |'))
        self.assertRegex(markdown.stdout, r'\| first_text_ms\.p50 \| [\d.]+ \| [\d.]+ \| \+[\d.]+ \(\+[\d.]+%\) \| '
                                          r'\[[\d.]+, [\d.]+\] significant \|')

    def write_load(self, name: str, records: list[dict], tail: str = '') -> None:
        (self.dir / name).write_text(''.join(json.dumps(record) + '\n' for record in records) + tail)

    @sans_io
    def test_compare_says_what_summary_says_of_a_file_that_is_not_whole_and_exits_1(self):
        records = load_records([1.0, 2.0, 3.0, 4.0], 'x')
        self.write_load('base.jsonl', load_records([1.0, 2.0, 3.0, 4.0], 'y'))
        self.write_load('cut.jsonl', records[:3], json.dumps(records[3])[:40])  # a crash cut its last line
        self.write_load('short.jsonl', records[:2])  # a copy that stopped between lines: 2 of 4 planned runs
        for name in ('cut.jsonl', 'short.jsonl'):
            summary = run_cli('--summary', name, cwd=self.tmp.name)
            warnings = [line for line in summary.stderr.splitlines() if ': warning: ' in line]
            self.assertEqual(summary.returncode, 1, summary.stderr)
            self.assertTrue(warnings, summary.stderr)
            for pair in (('base.jsonl', name), (name, 'base.jsonl')):
                with self.subTest(pair=pair):
                    done = run_cli('--compare', *pair, cwd=self.tmp.name)
                    self.assertEqual(done.returncode, 1, done.stderr)
                    self.assertEqual([line for line in done.stderr.splitlines() if ': warning: ' in line], warnings)
                    self.assertEqual(json.loads(done.stdout)['gates'], [])
        whole = run_cli('--compare', 'base.jsonl', 'base.jsonl', cwd=self.tmp.name)
        self.assertEqual((whole.returncode, whole.stderr), (0, ''))

    @sans_io
    def test_compare_of_a_load_refuses_what_is_not_a_load(self):
        self.write_load('base.jsonl', load_records([1.0, 2.0], 'y'))
        (self.dir / 'table.csv').write_text('run,ok,first_text_ms\n0,true,1.0\n1,true,2.0\n')
        (self.dir / 'one.json').write_text(json.dumps(fake_record(0) | {'load': None}, indent=2))
        (self.dir / 'empty.jsonl').write_text('')
        for name, words in (('table.csv', 'table.csv holds no record: its lines are not JSON'),
                            ('one.json', "one.json is a single run's record, not a load"),
                            ('empty.jsonl', 'empty.jsonl holds no record')):
            for pair in (('base.jsonl', name), (name, 'base.jsonl')):
                with self.subTest(pair=pair):
                    done = run_cli('--compare', *pair, cwd=self.tmp.name)
                    self.assertEqual((done.returncode, done.stderr.count('\n'), done.stdout), (2, 1, ''), done.stderr)
                    self.assertIn(words, done.stderr)

    @sans_io
    def test_compare_warns_in_one_line_when_the_loads_differ_in_api_workload_or_settings(self):
        self.write_load('base.jsonl', load_records([1.0, 2.0], 'y'))
        def changed(**changes) -> list[dict]:
            records = load_records([1.0, 2.0], 'z')
            for record in records:
                for key, value in changes.items():
                    if key in ('concurrency', 'rate'):
                        record['load'][key] = value
                    elif key in ('max_tokens', 'prompt_sha256'):
                        record['request'] = {**record['request'], key: value}
                    else:
                        record[key] = value
            return records
        cases = {'api': (changed(api='completions'), 'API'),
                 'trace': (changed(trace={'line': 1}), 'workload'),
                 'model': (changed(model='other'), 'model'),
                 'concurrency': (changed(concurrency=8), 'concurrency'),
                 'max_tokens': (changed(max_tokens=64), 'max_tokens'),
                 'prompt': (changed(prompt_sha256='cd'), 'prompt'),
                 'same': (changed(), None)}
        for case, (records, words) in cases.items():
            with self.subTest(case):
                self.write_load('candidate.jsonl', records)
                done = run_cli('--compare', 'base.jsonl', 'candidate.jsonl', cwd=self.tmp.name)
                self.assertEqual(done.returncode, 0, done.stderr)
                if words is None:
                    self.assertEqual(done.stderr, '')
                    continue
                self.assertEqual(done.stderr.count('\n'), 1, done.stderr)
                self.assertRegex(done.stderr, rf'warning: the two loads differ in (\S+, )*{words}\b')

    def test_single_records_compare_as_before_and_refuse_what_is_for_loads(self):
        for name in ('one.json', 'two.json'):
            self.assertEqual(run_cli('--fixture', 'ok', '--output', name, '--quiet', cwd=self.tmp.name).returncode, 0)
        done = run_cli('--compare', 'one.json', 'two.json', cwd=self.tmp.name)
        self.assertEqual(done.returncode, 0)
        self.assertTrue(done.stdout.startswith('file'))
        for extra in (('--format', 'markdown'), ('--fail-if', 'not_ok > 0')):
            refused = run_cli('--compare', 'one.json', 'two.json', *extra, cwd=self.tmp.name)
            self.assertEqual((refused.returncode, refused.stderr.count('\n')), (2, 1), refused.stderr)
        (self.dir / 'load.jsonl').write_text(''.join(json.dumps(record) + '\n'
                                                     for record in load_records([1.0, 2.0], 'x')))
        three = run_cli('--compare', 'load.jsonl', 'load.jsonl', 'load.jsonl', cwd=self.tmp.name)
        self.assertEqual((three.returncode, three.stderr.count('\n')), (2, 1))
        self.assertIn('takes two files, BASE CANDIDATE', three.stderr)
        loose = run_cli('--fixture', 'ok', '--runs', '2', '--fail-if', 'delta.ok > 0', '--output', 'x.jsonl',
                        cwd=self.tmp.name)
        self.assertEqual((loose.returncode, loose.stderr.count('\n')), (2, 1))
