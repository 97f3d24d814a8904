"""The tail of a load (_tails), without a socket: percentiles with the failures inside, and the certified
tail (MLPerf's early stopping) against the published minimum sample counts and a direct exact computation."""
from __future__ import annotations

import fractions
import math
import random
import unittest

import stream_client
from .tiers import sans_io

tails = stream_client._tails


def exact_tail(n: int, over: int, p: float) -> fractions.Fraction:
    """F(over; n, q), q = 1 - p/100, summed naively in fractions: the chance that n samples of a system exactly
    at its p-th percentile show at most ``over`` over it."""
    q = 1 - fractions.Fraction(repr(p)) / 100
    return sum(math.comb(n, k) * q ** k * (1 - q) ** (n - k) for k in range(over + 1))


def exact_certifies(n: int, over: int, p: float, confidence: float) -> bool:
    return exact_tail(n, over, p) <= 1 - fractions.Fraction(repr(confidence))


@sans_io
class LatePercentileTests(unittest.TestCase):
    def test_with_none_late_they_are_the_verified_percentiles(self):
        values = [float(value) for value in range(100, 0, -1)]
        expected = stream_client._summary._percentiles(values)
        self.assertEqual(tails._late_percentiles(values, 0), {**expected, 'late': []})

    def test_a_percentile_whose_rank_falls_among_the_late_runs_is_none_and_named(self):
        # 98 answers and 2 runs that failed: p99's rank (99 of 100) is a failure, p90's (90) an answer
        values = list(range(1, 99))
        result = tails._late_percentiles(values, 2)
        self.assertEqual(result, {'p50': 50, 'p90': 90, 'p99': None, 'max': None, 'late': ['p99', 'max']})
        # exactly 1% late: p99's rank is 99 of 100, still an answer; max is late
        self.assertEqual(tails._late_percentiles(range(1, 100), 1)['late'], ['max'])
        # of 7 runs, 3 late: p50's rank is 4 (3.5 rounds up, as the nearest rank is computed everywhere), the
        # slowest answer; of 7 runs, 4 late, it is late
        self.assertEqual(tails._late_percentiles([5, 1, 3, 2], 3),
                         {'p50': 5, 'p90': None, 'p99': None, 'max': None, 'late': ['p90', 'p99', 'max']})
        self.assertEqual(tails._late_percentiles([1, 3, 2], 4)['late'], ['p50', 'p90', 'p99', 'max'])
        self.assertEqual(tails._late_percentiles([], 2)['late'], ['p50', 'p90', 'p99', 'max'])
        self.assertIsNone(tails._late_percentiles([], 0))

    def test_more_than_one_percent_late_makes_p99_late_whatever_the_answers_took(self):
        for runs in (100, 101, 250, 1000, 4321):
            for late in range(0, runs // 20):
                result = tails._late_percentiles([1.0] * (runs - late), late)
                self.assertEqual(result['p99'] is None, late > runs / 100, (runs, late))
                self.assertEqual(result['max'] is None, late > 0)


@sans_io
class CertifiedTailTests(unittest.TestCase):
    def test_the_published_minimum_sample_counts(self):
        # mlcommons/endpoints docs/early_stopping.md (LoadGen's values): "h_min(t=0,p99)=459", the fewest queries
        # that certify p99 at 99% confidence with none over the latency bound (the Server scenario's test), and
        # the floor of the estimate, "find_min_passing(1, p, d, c) + 1 (662 for p99)".
        self.assertEqual(tails._min_samples(0, 99), 459)
        self.assertEqual(tails._min_samples(1, 99), 662)
        # mlcommons/inference issue #1629: "for SingleStream early stopping still requires at least 64 samples to
        # estimate the 90th percentile ... MultiStream early stopping requires at least 662 samples to estimate the
        # 99th percentile"; mlperf.conf has *.MultiStream.min_query_count = 662.
        self.assertEqual(tails._min_samples(1, 90), 64)
        # mlcommons/mlperf_automotive issue #56: 6636 queries, "the minimum needed to meet the 99.9% latency early
        # stopping criteria".
        self.assertEqual(tails._min_samples(1, 99.9), 6636)
        # with none over, the rules' F(0; h, 1 - p) = p^h <= 1 - c: h = ceil(log(1 - c) / log(p)), LoadGen's
        # starting point (early_stopping.cc): 44 for p90
        self.assertEqual(tails._min_samples(0, 90), 44)
        self.assertEqual(tails._min_samples(0, 90), math.ceil(math.log(0.01) / math.log(0.9)))

    def test_the_estimate_needs_the_published_counts_and_then_reports_the_largest(self):
        for p, needed in ((90, 64), (99, 662)):
            values = [float(value) for value in range(1, needed + 1)]
            self.assertIsNone(tails._certified_value(values[:-1], p))
            self.assertEqual(tails._certified_value(values, p), values[-1])  # t = 1: nothing discarded
        self.assertEqual(tails._certified_over(661, 99), 0)
        self.assertEqual(tails._certified_over(458, 99), -1)

    def test_the_estimate_is_loadgens_single_stream_estimate(self):
        # LoadGen (results.cc): t is the largest i with n >= h_min(i) + i, where h_min(i) + i is _min_samples(i);
        # the estimate is sorted[n - t], the t-th largest, never under the empirical percentile's rank
        for p in (90, 99):
            floors = [tails._min_samples(t, p) for t in range(1, 40)]
            for n in sorted({floors[0], floors[1] - 1, floors[1], floors[5] + 3, floors[20] - 1, floors[-1]}):
                over = max(t for t, floor in enumerate(floors, 1) if floor <= n)
                self.assertEqual(tails._certified_over(n, p), over, (n, p))
                values = [float(value) for value in range(n)]
                self.assertEqual(tails._certified_value(values, p), values[n - over])
                self.assertGreaterEqual(n - over + 1, math.ceil(p / 100 * n), (n, p))

    def test_agrees_exactly_with_a_direct_computation_on_1000_cases(self):
        rng = random.Random(48)
        cases = 0
        for _ in range(1100):
            p = rng.choice((50, 75, 80, 90, 95, 97.5, 99, 99.5, 99.9))
            confidence = rng.choice((0.5, 0.8, 0.9, 0.95, 0.99, 0.999))
            n = rng.randint(1, 1200)
            boundary = tails._certified_over(n, p, confidence)
            # half of the cases at the boundary the function found (where a rounding would show), half anywhere
            over = min(n, max(0, boundary + rng.choice((0, 1)))) if rng.random() < 0.5 else rng.randint(0, min(n, 80))
            self.assertEqual(tails._certifies(n, over, p, confidence), exact_certifies(n, over, p, confidence),
                             (n, over, p, confidence))
            cases += 1
        self.assertGreaterEqual(cases, 1000)

    def test_the_boundary_agrees_with_a_direct_search(self):
        rng = random.Random(7)
        for _ in range(60):
            p, confidence, n = rng.choice((90, 95, 99)), rng.choice((0.9, 0.99)), rng.randint(1, 900)
            over = -1
            while over + 1 <= n and exact_certifies(n, over + 1, p, confidence):
                over += 1
            self.assertEqual(tails._certified_over(n, p, confidence), over, (n, p, confidence))

    def test_a_tie_at_the_bound_is_decided_exactly(self):
        # F(0; 2, 1/2) = 1/4 exactly: certified at confidence 0.75 (F <= 1 - c), where the float sum could round
        # either way, and not at 0.76
        self.assertTrue(tails._certifies(2, 0, 50, 0.75))
        self.assertFalse(tails._certifies(2, 0, 50, 0.76))
        self.assertTrue(tails._exact_tail_within(2, 0, fractions.Fraction(1, 2), fractions.Fraction(1, 4)))
        self.assertEqual(tails._certified_over(2, 50, 0.75), 0)

    def test_many_samples_neither_overflow_nor_underflow(self):
        # (0.99)^1_000_000 underflows a float by far; in log space the walk stays finite and the bound is where the
        # normal approximation puts it: about n q - 2.33 sd
        over = tails._certified_over(1_000_000, 99)
        expected = 10_000 - 2.326 * math.sqrt(1_000_000 * 0.01 * 0.99)
        self.assertLess(abs(over - expected), 5, over)
        self.assertFalse(tails._certifies(1_000_000, over + 1, 99))
        self.assertTrue(tails._certifies(1_000_000, over, 99))

    def test_bad_arguments_are_refused(self):
        for p, confidence in ((0, 0.99), (100, 0.99), (99, 0), (99, 1)):
            with self.assertRaises(ValueError):
                tails._certifies(10, 1, p, confidence)
        with self.assertRaises(ValueError):
            tails._certifies(10, 11, 99)

    def test_the_summary_block(self):
        block = tails._certified_tail({'first_text_ms': [float(value) for value in range(700)], 'duration_ms': []})
        self.assertEqual((block['confidence'], block['min_runs']), (0.99, {'p90': 64, 'p99': 662}))
        self.assertEqual(block['duration_ms'], {'runs': 0, 'p90': None, 'p99': None})
        first = block['first_text_ms']
        self.assertEqual((first['runs'], first['p99']), (700, 699.0))  # 700 samples: t = 1, the largest
        self.assertGreater(first['p90'], stream_client._summary._percentiles(range(700))['p90'])


if __name__ == '__main__':
    unittest.main()
