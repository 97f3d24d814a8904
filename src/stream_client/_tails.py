"""The tail of a load, sans-IO: percentiles with its failures inside, and a certified tail.

**With failures inside** (``_late_percentiles``): the summary's percentiles are over verified answers, so a
load whose slowest runs failed shows a fine p99. Counted over every planned run instead, a run that is not
ok or never started is infinitely late: a percentile whose nearest rank falls among them has no value
(null in JSON, which has no +Inf, and named in the entry's ``late``).

**A certified tail** (``_certified_value``): MLPerf's early-stopping estimate, the value that the true
p-th percentile is at or below with a stated confidence c (MLPerf: 99%), given n samples
(mlcommons/inference_policies, inference_rules.adoc, appendix "Early Stopping Criterion"; LoadGen's
loadgen/early_stopping.cc and results.cc):

- a system whose p-th percentile were exactly at a bound leaves each sample over it with chance
  q = 1 - p/100, so the chance that n samples show at most t over it is the binomial tail
  F(t; n, q) = sum over k <= t of C(n, k) q^k (1 - q)^(n - k);
- n samples with t at or over a bound certify that the p-th percentile is at or below it when
  F(t; n, q) <= 1 - c (``_certifies``): a system no better than the bound shows so few over it at most
  1 - c of the time (the rules' tolerance d is 0 here, as LoadGen uses it);
- the certified value of n samples is their t-th largest, for the largest t >= 1 that n certifies (the
  rules: discard the t - 1 highest, report the largest of the rest); under ``_min_samples(1, p)``
  samples (64 for p90, 662 for p99 at 99%) there is none.

F is summed in log space, each term from its neighbour starting at (1 - q)^n, so that nothing overflows
or underflows; a sum within _MARGIN of log(1 - c) is decided again in exact integer arithmetic, so that
every decision is the exact one.
"""
import dataclasses
import fractions
import functools
import math
import textwrap

from ._limits import _count
from ._gates import _ALL, _CERTIFIED, _CERTIFIED_PERCENTILES, _PERCENTILES, _TAIL_FIELDS

_CONFIDENCE = 0.99  # MLPerf's, for every certified tail the summary reports
_MARGIN = 1e-7      # a log tail this near log(1 - c) is decided exactly (the float sum is good to ~1e-9)
_NAME_WIDTH = 28    # the first column of the table's lines
_TERMINAL_COLUMNS = 80  # the width the summary's tables for a person fit in


def _late_percentiles(values, late: int) -> dict | None:
    """p50, p90, p99 (nearest rank) and max over values and ``late`` more that are infinitely late: a
    percentile whose rank falls among the late ones is None and named in ``late``; None without any."""
    ordered = sorted(values)
    count = len(ordered) + late
    if not count:
        return None
    ranks = {name: math.ceil(float(name[1:]) / 100 * count) for name in _PERCENTILES if name != 'max'}
    ranks['max'] = count
    result = {name: ordered[rank - 1] if rank <= len(ordered) else None for name, rank in ranks.items()}
    return {**result, 'late': [name for name in _PERCENTILES if result[name] is None]}


@dataclasses.dataclass(frozen=True)
class _Tail:
    """A percentile p (0 < p < 100) and a confidence c (0 < c < 1): the share q = 1 - p/100 of samples a
    system at the percentile leaves over it, and the bound 1 - c on the tail, as decimals are written
    (0.99 is 99/100) and as floats."""

    p: float
    confidence: float

    def __post_init__(self) -> None:
        if not (0 < self.p < 100 and 0 < self.confidence < 1):
            raise ValueError(f'a certified tail needs 0 < p < 100 and 0 < confidence < 1, not {self.p}, '
                             f'{self.confidence}')

    @functools.cached_property
    def q(self) -> fractions.Fraction:
        return 1 - fractions.Fraction(repr(self.p)) / 100

    @functools.cached_property
    def alpha(self) -> fractions.Fraction:
        return 1 - fractions.Fraction(repr(self.confidence))

    @functools.cached_property
    def log_alpha(self) -> float:
        return math.log(self.alpha)

    def log_terms(self, n: int):
        """log P(X = k) for k = 0, 1, ..., n of X ~ Binomial(n, q), each from the one before by the ratio
        of neighbours, in a compensated sum (Neumaier's) so that rounding does not grow with k."""
        q = float(self.q)
        step = math.log(q) - math.log1p(-q)
        value, carry = n * math.log1p(-q), 0.0
        for k in range(n + 1):
            yield value + carry
            if k < n:
                increment = math.log((n - k) / (k + 1)) + step
                total = value + increment
                carry += (value - total) + increment if abs(value) >= abs(increment) else (increment - total) + value
                value = total

    def within(self, log_tail: float, n: int, over: int) -> bool:
        """Whether F(over; n, q), whose log is about log_tail, is at most 1 - c: by the float unless it is
        within _MARGIN of the bound, exactly then."""
        if abs(log_tail - self.log_alpha) > _MARGIN:
            return log_tail < self.log_alpha
        return _exact_tail_within(n, over, self.q, self.alpha)


def _exact_tail_within(n: int, over: int, q: fractions.Fraction, alpha: fractions.Fraction) -> bool:
    """F(over; n, q) <= alpha in integers: with q = a/b, the terms C(n, k) a^k (b - a)^(n - k), each from the
    one before, added up against alpha b^n."""
    a, b = q.numerator, q.denominator
    term = total = (b - a) ** n
    for k in range(over):
        term = term * (n - k) * a // ((k + 1) * (b - a))
        total += term
    return total * alpha.denominator <= alpha.numerator * b ** n


def _log_add(one: float, other: float) -> float:
    """log(e^one + e^other), without leaving log space."""
    high, low = max(one, other), min(one, other)
    return high if low == -math.inf else high + math.log1p(math.exp(low - high))


def _certifies(n: int, over: int, p: float, confidence: float = _CONFIDENCE) -> bool:
    """Whether n samples with ``over`` of them at or over a bound certify, at the confidence, that the true
    p-th percentile is at or below the bound: F(over; n, 1 - p/100) <= 1 - confidence."""
    if not 0 <= over <= n:
        raise ValueError(f'{over} samples over a bound of {n} samples')
    tail, log_tail = _Tail(p, confidence), -math.inf
    for _, term in zip(range(over + 1), tail.log_terms(n)):
        log_tail = _log_add(log_tail, term)
    return tail.within(log_tail, n, over)


def _certified_over(n: int, p: float, confidence: float = _CONFIDENCE) -> int:
    """The most of n samples that may lie at or over a bound that they still certify: the largest t with
    F(t; n, 1 - p/100) <= 1 - confidence, or -1 when not even none over would (F grows with t)."""
    tail, log_tail = _Tail(p, confidence), -math.inf
    for over, term in enumerate(tail.log_terms(n)):  # ends by over = n at the latest: F(n; n, q) = 1
        log_tail = _log_add(log_tail, term)
        if not tail.within(log_tail, n, over):
            break
    return over - 1


def _min_samples(over: int, p: float, confidence: float = _CONFIDENCE) -> int:
    """The fewest samples that certify the p-th percentile with ``over`` of them over the bound: the
    smallest n with F(over; n, 1 - p/100) <= 1 - confidence (F falls as n grows)."""
    low, high = over, over + 1  # n = over certifies nothing: F(over; over, q) = 1
    while not _certifies(high, over, p, confidence):
        low, high = high, 2 * high
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if _certifies(middle, over, p, confidence) else (middle, high)
    return high


def _certified_value(ordered, p: float, confidence: float = _CONFIDENCE) -> float | None:
    """The certified p-th percentile of ascending values: their t-th largest for the largest t >= 1 they
    certify; None with too few values for any (fewer than _min_samples(1, p, confidence))."""
    over = _certified_over(len(ordered), p, confidence)
    return ordered[len(ordered) - over] if over >= 1 else None


def _certified_tail(figures: dict) -> dict:
    """The summary's certified_tail: for each figure's verified values, how many there are and the
    certified p90 and p99 at _CONFIDENCE (None with too few), beside the fewest values each needs."""
    block = {'confidence': _CONFIDENCE,
             'min_runs': {f'p{p}': _min_samples(1, p) for p in _CERTIFIED_PERCENTILES}}
    for field, values in figures.items():
        ordered = sorted(values)
        block[field] = {'runs': len(ordered), **{f'p{p}': _certified_value(ordered, p)
                                                  for p in _CERTIFIED_PERCENTILES}}
    return block


def _tail_lines(result: dict) -> list[str]:
    """The summary table's lines of the tail: the percentiles with the failures inside, and the certified
    tail with what it needs where it has no value."""
    if not result['latency_all_runs']:
        return []
    heads = ('p50', 'p90', 'p99', 'max')
    lines = textwrap.wrap(f'with failures inside: {_count(result["latency_all_runs"], "planned run")}, '
                          f'{result["latency_all_late"]} late ({result["not_ok"]} not ok, '
                          f'{result["latency_all_never_started"]} never started), ms:', _TERMINAL_COLUMNS,
                          subsequent_indent='  ')
    lines.append(' ' * _NAME_WIDTH + ''.join(f'{head:>9}' for head in heads))
    for field in _TAIL_FIELDS:
        values = result['latency_all_ms'][field]
        lines.append(f'  {field + _ALL:<{_NAME_WIDTH - 2}}' + ''.join(
            f'{"late":>9}' if values[head] is None else f'{values[head]:9.1f}' for head in heads))
    tail = result['certified_tail']
    heads = tuple(f'p{p}' for p in _CERTIFIED_PERCENTILES)
    lines += [f'certified at {100 * tail["confidence"]:g}% confidence (early stopping), over ok runs, ms:',
              ' ' * _NAME_WIDTH + f'{"runs":>9}' + ''.join(f'{head:>9}' for head in heads)]
    for field in _TAIL_FIELDS:
        values = tail[field]
        lines.append(f'  {field + _CERTIFIED:<{_NAME_WIDTH - 2}}{values["runs"]:9d}' + ''.join(
            f'{"-":>9}' if values[head] is None else f'{values[head]:9.1f}' for head in heads))
    short = [head for head in heads if any(tail[field][head] is None for field in _TAIL_FIELDS)]
    if short:
        lines.append('  - too few ok runs to certify: ' + ', '.join(f'{head} needs {tail["min_runs"][head]}'
                                                                    for head in short))
    return lines
