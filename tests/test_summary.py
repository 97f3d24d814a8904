"""The summary of many runs (_summary), without a socket: its percentiles and its reading of records.
The summaries of real loads are checked in test_load.py, beside the loads."""
from __future__ import annotations

import math
import unittest

import stream_client
from .support import fake_record
from .tiers import sans_io


def scripted_load(planned: int, failed: set[int], started: int | None = None, warmup: int = 0) -> list[dict]:
    """The records of a load whose truth is known: ``planned`` runs (the first ``warmup`` of them warm-up
    runs), of which the first ``started`` have a record, the runs in ``failed`` cut; run i's first text took
    1000 - i ms, so the slowest answers are the first runs."""
    records = []
    for run in range(planned if started is None else started):
        ok = run not in failed
        record = fake_record(run, ok, None if ok else 'application: EOF before [DONE]')
        records.append({**record, 'first_text_ms': 1000.0 - run, 'duration_ms': 2000.0 - run,
                        'event_gaps_ms': [1.0, 5.0 + run % 10], 'error_kind': None if ok else 'eof_before_done',
                        'warmup': run < warmup, 'load': {'id': 'L', 'runs': planned, 'concurrency': 4}})
    return records


def summarized(records: list[dict]) -> dict:
    summary = stream_client.Summary()
    for record in records:
        summary.add(record)
    return summary.result()


def nearest_rank(values, p: float):
    ordered = sorted(values)
    return ordered[math.ceil(p / 100 * len(ordered)) - 1]


@sans_io
class SummaryTests(unittest.TestCase):
    def test_percentiles_use_the_nearest_rank(self):
        values = list(range(1, 101))
        self.assertEqual(stream_client._summary._percentiles(values), {'p50': 50, 'p90': 90, 'p99': 99, 'max': 100})
        # the rank rounds up: of 7 values, p50 is the 4th (3.5 up), p90 the 7th (6.3 up), p99 the 7th
        self.assertEqual(stream_client._summary._percentiles([7, 1, 6, 2, 5, 3, 4]),
                         {'p50': 4, 'p90': 7, 'p99': 7, 'max': 7})
        self.assertEqual(stream_client._summary._percentiles([3.5]), {'p50': 3.5, 'p90': 3.5, 'p99': 3.5, 'max': 3.5})
        self.assertIsNone(stream_client._summary._percentiles([]))
        histogram = stream_client._summary._GapHistogram()
        histogram.add([0.0] * 50 + [10.0] * 49 + [200.0])
        result = histogram.result()
        self.assertEqual((result['p50'], result['max'], result['count']), (0.0, 200.0, 100))
        self.assertTrue(10.0 <= result['p90'] <= 10.1, result)

    def test_a_records_start_is_read_to_the_millisecond_in_utc(self):
        summary = stream_client.Summary()
        self.assertEqual(summary.epoch('2027-01-15T08:00:30.250Z'), 1_800_000_030.25)
        self.assertEqual(summary.epoch('2027-01-15T08:00:30.999Z'), 1_800_000_030.999)  # the second parsed once
        self.assertEqual(summary.epoch('2024-02-29T00:00:00.000Z'), 1_709_164_800.0)  # a leap day


    def test_a_run_that_got_no_response_head_names_no_source(self):
        # A run interrupted (or refused) before any response head cannot tell what would have answered: its
        # record says the source it asked for. It does not make a load of the fixture one of mixed sources,
        # which --summary would refuse; two sources that answered still do.
        def record(source: str, status: int | None) -> dict:
            ok = status is not None
            return {**fake_record(1, ok, None if ok else 'interrupted: SIGINT during the headers phase'),
                    'source': source, 'http': {'status': status} if ok else None}
        summary = stream_client.Summary()
        for one in (record('fixture', 200), record('fixture', 200), record('endpoint', None)):
            summary.add(one)
        self.assertEqual(summary.seen['sources'], {'fixture'})
        summary.add(record('endpoint', 200))
        self.assertEqual(summary.seen['sources'], {'fixture', 'endpoint'})


@sans_io
class TailTests(unittest.TestCase):
    """The summary's tail on loads whose truth is known: with the failures inside, and certified."""

    def test_with_none_failing_the_tail_with_failures_inside_is_the_verified_one(self):
        result = summarized(scripted_load(200, failed=set()))
        self.assertEqual((result['latency_all_runs'], result['latency_all_late'], result['latency_all_never_started']),
                         (200, 0, 0))
        for field in ('first_text_ms', 'duration_ms'):
            self.assertEqual(result['latency_all_ms'][field], {**result['latency_ms'][field], 'late': []})
        gaps = [5.0 + run % 10 for run in range(200)]
        self.assertEqual(result['latency_all_ms']['max_event_gap_ms'],
                         {'p50': nearest_rank(gaps, 50), 'p90': nearest_rank(gaps, 90), 'p99': nearest_rank(gaps, 99),
                          'max': 14.0, 'late': []})

    def test_two_percent_failing_makes_p99_infinitely_late_however_fast_the_answers(self):
        # 200 planned: runs 0 and 1, the slowest, cut; the verified p99 looks fine, the one with them inside is late
        result = summarized(scripted_load(200, failed={0, 1, 2, 3}))
        answers = [1000.0 - run for run in range(4, 200)]
        self.assertEqual(result['latency_ms']['first_text_ms']['p99'], nearest_rank(answers, 99))
        everything = result['latency_all_ms']['first_text_ms']
        self.assertEqual((everything['p99'], everything['max'], everything['late']), (None, None, ['p99', 'max']))
        # p90's rank is 180 of 200, among the 196 answers: the 180th fastest
        self.assertEqual(everything['p90'], sorted(answers)[179])
        self.assertEqual((result['latency_all_late'], result['not_ok']), (4, 4))

    def test_runs_that_never_started_count_as_late_and_warm_up_runs_do_not(self):
        # 300 planned, 5 of them warm-up (one failed), the load cut after 297: 3 never started, 1 failed
        result = summarized(scripted_load(300, failed={2, 100}, started=297, warmup=5))
        self.assertEqual((result['planned_runs'], result['runs'], result['warmup_runs']), (295, 292, 5))
        self.assertEqual((result['latency_all_runs'], result['latency_all_late'], result['latency_all_never_started']),
                         (295, 4, 3))
        self.assertEqual(result['latency_all_ms']['duration_ms']['late'], ['p99', 'max'])  # 4 of 295 is over 1%
        one_late = summarized(scripted_load(300, failed=set(), started=298, warmup=5))
        self.assertEqual(one_late['latency_all_ms']['duration_ms']['late'], ['max'])  # 2 of 295 is under 1%
        self.assertEqual(one_late['latency_all_ms']['duration_ms']['p99'],
                         nearest_rank([2000.0 - run for run in range(5, 298)] + [math.inf] * 2, 99))

    def test_the_certified_tail_of_the_ok_runs(self):
        result = summarized(scripted_load(700, failed={10}))
        tail = result['certified_tail']
        answers = sorted(1000.0 - run for run in range(700) if run != 10)
        self.assertEqual((tail['first_text_ms']['runs'], tail['first_text_ms']['p99']), (699, answers[-1]))
        over = stream_client._tails._certified_over(699, 90)
        self.assertEqual(tail['first_text_ms']['p90'], answers[699 - over])
        self.assertGreater(tail['first_text_ms']['p90'], result['latency_ms']['first_text_ms']['p90'])
        short = summarized(scripted_load(63, failed=set()))['certified_tail']
        self.assertEqual((short['first_text_ms']['p90'], short['min_runs']['p90']), (None, 64))

    def test_each_step_of_a_sweep_has_its_tail(self):
        records = []
        for step, (rate, failed) in enumerate(((2.0, set()), (4.0, {5}))):
            for record in scripted_load(40, failed):
                records.append({**record, 'offset_ms': 10.0 * record['run'],
                                'load': {'id': f'S{step}', 'runs': 40, 'step': step, 'rate': rate, 'duration': 20.0}})
        steps = summarized(records)['steps']
        self.assertEqual([step['latency_all_ms']['first_text_ms']['late'] for step in steps], [[], ['p99', 'max']])
        self.assertEqual(steps[0]['latency_all_ms']['duration_ms']['p99'], steps[0]['latency_ms']['duration_ms']['p99'])

    def test_the_table_names_the_tail(self):
        result = summarized(scripted_load(200, failed={0, 1, 2, 3}))
        table = stream_client._summary._summary_table(result)
        self.assertIn('with failures inside: 200 planned runs, 4 late (4 not ok, 0 never started), ms:\n', table)
        self.assertRegex(table, r'first_text_ms_all +\d+\.\d +\d+\.\d +late +late')
        self.assertRegex(table, r'first_text_ms_certified +196 +\d+\.\d +-')
        self.assertIn('too few ok runs to certify: p99 needs 662', table)
        self.assertTrue(all(len(line) <= 80 for line in table.splitlines()), table)


if __name__ == '__main__':
    unittest.main()
