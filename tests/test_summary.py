"""The summary of many runs (_summary), without a socket: its percentiles and its reading of records.
The summaries of real loads are checked in test_load.py, beside the loads."""
from __future__ import annotations

import unittest

import stream_client
from .support import fake_record
from .tiers import sans_io


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


if __name__ == '__main__':
    unittest.main()
