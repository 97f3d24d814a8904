"""The llm-d Benchmark Report v0.2.1 (_benchmark_report): loads whose truth is known, their counts and
figures in the schema's fields, and the report valid against the published schema in ../shared/standards
(skipped where that folder is not beside the checkout)."""
from __future__ import annotations

import copy
import json
import statistics
import tempfile
import unittest
from pathlib import Path

import stream_client
from stream_client._benchmark_report import _llm_d_report, _ReportFacts
from .support import fake_record, HERE, run_cli
from .tiers import sans_io

SCHEMA_FILE = HERE.parent / 'shared' / 'standards' / 'llm-d-benchmark-report' / 'br_v0_2_1_json_schema.json'
SCHEMA_ABSENT = f'{SCHEMA_FILE} is not beside this checkout (../shared/standards holds the published schema)'
_schema = None


def schema() -> stream_client.JsonSchema:
    """The published v0.2.1 schema, read once, checked by the project's own validator (draft 2020-12:
    the file names no $schema, and its README links draft 2020-12)."""
    global _schema
    if _schema is None:
        _schema = stream_client.JsonSchema(json.loads(SCHEMA_FILE.read_text()))
    return _schema


LOAD = {'id': 'load-a', 'runs': 12, 'concurrency': 4, 'rate': None, 'processes': 1, 'step': None,
        'plan': {'id': 'plan-a', 'shard': 0, 'shards': 1, 'runs': 12, 'start_at': None}}


def record(run: int, kind: str | None = None, layer: str | None = None, **fields) -> dict:
    """A record of LOAD: ok without a kind, else not ok with that kind (in its FAILURE_KINDS layer)."""
    ok = kind is None
    layer = layer or (None if ok else stream_client.FAILURE_KINDS[kind][0])
    one = fake_record(run, ok, None if ok else f'{layer}: made up', start=f'2026-11-30T10:00:0{run % 10}.{run:03d}Z')
    return {**one, 'error_kind': kind, 'load': LOAD, **fields}


def known_load() -> list[dict]:
    """Twelve runs planned, eleven recorded: a warm-up, five verified (first text 100 to 500 ms), three
    failed (two of one kind), two interrupted; one never started."""
    verified = [record(run, first_text_ms=100.0 * (run + 1), duration_ms=1000.0 + run, prompt_tokens=20 + run,
                       completion_tokens=10, event_gaps_ms=[4.0, 6.0]) for run in range(5)]
    failed = [record(5, 'status_not_200', first_text_ms=None, event_gaps_ms=[]),
              record(6, 'status_not_200', first_text_ms=None, event_gaps_ms=[]),
              record(7, 'eof_before_done', first_text_ms=9999.0, duration_ms=9999.0, prompt_tokens=500)]
    interrupted = [record(run, 'interrupted', first_text_ms=None, event_gaps_ms=[]) for run in (8, 9)]
    warmup = record(10, first_text_ms=7777.0, warmup=True)
    return [warmup, *verified, *failed, *interrupted]


def report_of(records: list[dict]) -> tuple[dict, dict]:
    """The report of records, and the summary's result of the same records."""
    summary, facts = stream_client.Summary(), _ReportFacts()
    for one in records:
        summary.add(one)
        facts.add(one)
    return _llm_d_report(summary, facts), summary.result()


@sans_io
class ReportOfKnownRecordsTests(unittest.TestCase):
    def setUp(self) -> None:
        self.report, self.result = report_of(known_load())
        self.aggregate = self.report['results']['request_performance']['aggregate']
        self.metadata = self.report['results']['observability']['metadata']

    def test_runs_count_as_total_failures_and_incomplete_and_the_warm_up_not_at_all(self):
        self.assertEqual(self.aggregate['requests']['total'], 10)
        self.assertEqual(self.aggregate['requests']['failures'], 3)    # two error statuses and a cut stream
        self.assertEqual(self.aggregate['requests']['incomplete'], 2)  # the interrupted ones
        verdicts = self.metadata['verdicts']
        self.assertEqual((verdicts['ok'], verdicts['not_ok'], verdicts['interrupted']), (5, 5, 2))
        self.assertEqual((verdicts['planned_runs'], verdicts['not_started'], verdicts['warmup_runs']), (11, 1, 1))
        self.assertEqual(verdicts['not_ok_by_kind'], {'interrupted': 2, 'status_not_200': 2, 'eof_before_done': 1})
        self.assertEqual(verdicts['not_ok_by_layer'], {'http': 2, 'interrupted': 2, 'application': 1})

    def test_latency_covers_the_verified_runs_in_seconds_as_the_summary_has_them(self):
        ttft = self.aggregate['latency']['time_to_first_token']
        self.assertEqual(ttft['units'], 's')
        self.assertEqual((ttft['min'], ttft['mean'], ttft['max']), (0.1, 0.3, 0.5))  # not 9.999 s nor 7.777 s
        self.assertAlmostEqual(ttft['stddev'], statistics.pstdev([0.1, 0.2, 0.3, 0.4, 0.5]), places=6)
        for name in ('first_text_ms', 'duration_ms'):
            field = {'first_text_ms': 'time_to_first_token', 'duration_ms': 'request_latency'}[name]
            for rank in ('p50', 'p90', 'p99', 'max'):
                self.assertEqual(self.aggregate['latency'][field][rank],
                                 round(self.result['latency_ms'][name][rank] / 1000, 6), (field, rank))
        self.assertEqual(self.aggregate['latency']['request_latency']['mean'], 1.002)
        self.assertEqual(ttft['p25'], 0.2)  # the 2nd of 5 (1.25 up), by the nearest rank

    def test_event_gaps_are_inter_token_latency_with_an_exact_mean(self):
        gaps = self.aggregate['latency']['inter_token_latency']
        self.assertEqual((gaps['units'], gaps['mean'], gaps['max']), ('s/token', 0.005, 0.006))
        self.assertEqual(gaps['p50'], round(self.result['event_gaps_ms']['p50'] / 1000, 6))
        self.assertTrue(0.004 <= gaps['p10'] <= 0.00404, gaps)  # a bucket's upper bound, at most 1% above
        self.assertIn('not per token', self.metadata['mapping']['latency.inter_token_latency'])

    def test_token_lengths_and_rates_are_of_verified_runs_as_the_server_reported_them(self):
        self.assertEqual(self.aggregate['requests']['input_length']['mean'], 22.0)  # 20 to 24, not the cut run's 500
        self.assertEqual(self.aggregate['requests']['output_length']['max'], 10.0)
        wall = self.result['wall_s']
        throughput = self.aggregate['throughput']
        self.assertEqual(throughput['request_rate'], {'units': 'queries/s', 'mean': self.result['ok_runs_per_s']})
        for name, tokens in (('output_token_rate', 50), ('input_token_rate', 110), ('total_token_rate', 160)):
            self.assertEqual(throughput[name], {'units': 'tokens/s', 'mean': round(tokens / wall, 3)})  # the records'

    def test_what_the_client_cannot_know_is_null_and_the_load_is_described(self):
        self.assertIsNone(self.report['scenario']['stack'])
        self.assertEqual((self.report['run']['cid'], self.report['run']['pid'], self.report['run']['user']),
                         (None, None, None))
        load = self.report['scenario']['load']['standardized']
        self.assertEqual((load['tool'], load['concurrency'], load['rate_qps'], load['parallelism']),
                         ('stream-client', 4, None, 1))
        self.assertEqual(load['input_seq_len'], {'distribution': 'other', 'value': 22.0, 'min': 20, 'max': 24})
        self.assertIsNone(load['multi_turn'])
        self.assertEqual(self.metadata['loads'], [LOAD])
        self.assertEqual(self.report['run']['eid'], 'plan-a')
        self.assertIn('verified answers only', self.metadata['covers'])
        self.assertEqual(self.metadata['goodput']['good'], 5)

    def test_without_prompt_tokens_the_load_is_null_as_the_schema_requires_an_input_length(self):
        records = [{**one, 'prompt_tokens': None} for one in known_load()]
        report, _ = report_of(records)
        self.assertEqual(report['scenario'], {'stack': None, 'load': None})
        self.assertIsNone(report['results']['request_performance']['aggregate']['throughput']['input_token_rate'])

    def test_a_load_of_sessions_is_multi_turn(self):
        sessions = [{**one, 'load': {**LOAD, 'runs': None, 'sessions': 3}} for one in known_load()]
        report, _ = report_of(sessions)
        self.assertEqual(report['scenario']['load']['standardized']['multi_turn'], {'enabled': True})
        self.assertEqual(report['results']['request_performance']['aggregate']['requests']['total'], 10)

    def test_the_run_has_its_times_and_an_id_that_the_same_records_give_again(self):
        run = self.report['run']
        self.assertEqual(run['time']['start'], '2026-11-30T10:00:00.000Z')  # the earliest start, warm-up left out
        self.assertEqual(run['time']['end'], '2026-11-30T10:00:17.006Z')    # the cut run 7: 7.007 s, 9,999 ms long
        self.assertEqual(run['time']['duration'], 'PT17.006S')
        self.assertEqual(run['uid'], report_of(known_load())[0]['run']['uid'])
        other = [{**one, 'load': {**LOAD, 'id': 'load-b'}} for one in known_load()]
        self.assertNotEqual(run['uid'], report_of(other)[0]['run']['uid'])

    def test_no_runs_gives_a_report_of_nothing(self):
        report, _ = report_of([])
        aggregate = report['results']['request_performance']['aggregate']
        self.assertEqual((aggregate['requests']['total'], aggregate['requests']['failures']), (0, 0))
        self.assertEqual(set(aggregate['latency'].values()), {None})
        self.assertEqual(report['run']['time'], {'start': None, 'end': None, 'duration': 'PT0.000S'})


@sans_io
@unittest.skipUnless(SCHEMA_FILE.is_file(), SCHEMA_ABSENT)
class PublishedSchemaTests(unittest.TestCase):
    def test_the_reports_of_known_loads_are_valid(self):
        without_prompts = [{**one, 'prompt_tokens': None} for one in known_load()]
        sessions = [{**one, 'load': {**LOAD, 'runs': None, 'sessions': 3}} for one in known_load()]
        for records in (known_load(), without_prompts, sessions, []):
            report, _ = report_of(records)
            self.assertIsNone(schema().problem(report))

    def test_the_check_can_fail(self):
        report, _ = report_of(known_load())
        broken = copy.deepcopy(report)
        broken['results']['request_performance']['aggregate']['requests']['failures'] = -1
        self.assertIn('failures', schema().problem(broken))
        broken = copy.deepcopy(report)
        broken['results']['request_performance']['aggregate']['latency']['time_to_first_token']['units'] = 'sec'
        self.assertIn('units', schema().problem(broken))
        broken = copy.deepcopy(report)
        broken['results']['goodput'] = 1  # the schema's results are closed: goodput lives in the metadata
        self.assertIn('goodput', schema().problem(broken))


class CommandLineTests(unittest.TestCase):
    def setUp(self) -> None:
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.dir = Path(self.tmp.name)

    def test_a_mixed_load_of_the_fixture_reports_what_its_evidence_counts(self):
        run_cli('--fixture', 'mixed', '--runs', '30', '--concurrency', '6', '--output', 'load.jsonl', '--quiet',
                cwd=self.tmp.name, timeout=60)
        done = run_cli('--summary', 'load.jsonl', '--format', 'benchmark-report', cwd=self.tmp.name)
        self.assertEqual(done.returncode, 1, done.stderr)  # the default gate: not every run was ok
        report = json.loads(done.stdout)
        records = [json.loads(line) for line in (self.dir / 'load.jsonl').read_text().splitlines()]
        requests = report['results']['request_performance']['aggregate']['requests']
        self.assertEqual(requests['total'], 30)
        self.assertEqual(requests['failures'], sum(not one['ok'] for one in records))
        self.assertEqual(requests['incomplete'], 0)
        self.assertGreater(requests['failures'], 0)
        kinds = report['results']['observability']['metadata']['verdicts']['not_ok_by_kind']
        self.assertEqual(sum(kinds.values()), requests['failures'])
        first_text = sorted(one['first_text_ms'] for one in records if one['ok'])
        ttft = report['results']['request_performance']['aggregate']['latency']['time_to_first_token']
        self.assertEqual((ttft['min'], ttft['max']), (round(first_text[0] / 1000, 6), round(first_text[-1] / 1000, 6)))
        if SCHEMA_FILE.is_file():
            self.assertIsNone(schema().problem(report))

    def test_an_interrupted_load_counts_its_cut_runs_as_incomplete(self):
        lines = [json.dumps(one) for one in known_load()]
        (self.dir / 'cut.jsonl').write_text('\n'.join(lines) + '\n')
        done = run_cli('--summary', 'cut.jsonl', '--format', 'benchmark-report', cwd=self.tmp.name)
        requests = json.loads(done.stdout)['results']['request_performance']['aggregate']['requests']
        self.assertEqual((requests['total'], requests['failures'], requests['incomplete']), (10, 3, 2))
        self.assertIn('not every planned run has a record', done.stderr)
        self.assertEqual(done.returncode, 1)

    def test_the_format_is_for_the_summary_of_saved_evidence_only(self):
        for args in (('--fixture', 'ok', '--runs', '2', '--output', 'load.jsonl'), ('--compare', 'a.json', 'b.json')):
            done = run_cli(*args, '--format', 'benchmark-report', cwd=self.tmp.name)
            self.assertEqual(done.returncode, 2, done.stderr)
            self.assertIn('--format benchmark-report is for --summary FILE', done.stderr)
        self.assertEqual(list(self.dir.iterdir()), [])  # refused before any file


if __name__ == '__main__':
    unittest.main()
