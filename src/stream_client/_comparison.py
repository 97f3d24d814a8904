"""Two loads side by side: ``--compare BASE CANDIDATE`` of JSON Lines files.

``_compare_loads()`` takes the two loads' summaries and gives their verdict
counts and kinds, each latency figure's p50, p90 and p99 with a seeded
bootstrap 95% interval of the difference, and the differences in goodput
and attainment; ``_comparison_markdown()`` is its table for a pull request.
No I/O: the caller reads the files and owns the seed.
"""
import math
import random

from ._limits import _plain_number
from ._gates import _LATENCY_FIELDS, _SCHEDULE_FIELDS
from ._summary import Summary

_RESAMPLES = 1000      # bootstrap resamples of each latency figure
_COMPARED_PERCENTILES = (('p50', 50), ('p90', 90), ('p99', 99))
_PLAIN_DELTAS = ('ok_ratio', 'not_ok', 'good', 'goodput_per_s', 'slo_attainment')


def _rank(ordered: list[float], p: float) -> float:
    """The nearest-rank percentile p of ordered values, as the summary computes it."""
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def _difference(base: float | None, candidate: float | None) -> dict:
    """The candidate against the base: both, the difference, and the difference in % of the base."""
    known = base is not None and candidate is not None
    return {'base': base, 'candidate': candidate, 'difference': round(candidate - base, 6) if known else None,
            'relative_pct': round(100 * (candidate - base) / base, 3) if known and base else None}


def _bootstrap(base: list[float], candidate: list[float], rng: random.Random) -> dict:
    """For each compared percentile, the 95% interval (2.5th and 97.5th of RESAMPLES) of the candidate's
    percentile less the base's, both resampled with replacement."""
    differences = {name: [] for name, _ in _COMPARED_PERCENTILES}
    for _ in range(_RESAMPLES):
        one, other = sorted(rng.choices(base, k=len(base))), sorted(rng.choices(candidate, k=len(candidate)))
        for name, p in _COMPARED_PERCENTILES:
            differences[name].append(_rank(other, p) - _rank(one, p))
    intervals = {}
    for name, values in differences.items():
        values.sort()
        intervals[name] = [round(_rank(values, 2.5), 3), round(_rank(values, 97.5), 3)]
    return intervals


def _compare_loads(base: Summary, candidate: Summary, seed: int) -> dict:
    """The comparison of two loads' summaries (see docs/decisions.md): each summary whole, and ``delta``,
    keyed by the figures' gate names (``first_text_ms.p99``, ``goodput_per_s``), each with the base, the
    candidate, the difference and its share of the base, and for latency a seeded bootstrap 95%
    interval of the difference (``ci95``) and whether it excludes 0 (``significant``)."""
    rng = random.Random(seed)
    results = base.result(), candidate.result()
    delta = {}
    for field in _LATENCY_FIELDS + _SCHEDULE_FIELDS:
        values = list(base.latency[field]), list(candidate.latency[field])
        if not (values[0] and values[1]):
            continue
        intervals = _bootstrap(*values, rng)
        for name, _ in _COMPARED_PERCENTILES:
            entry = _difference(*(result['latency_ms'][field][name] for result in results))
            entry['ci95'] = intervals[name]
            entry['significant'] = not intervals[name][0] <= 0 <= intervals[name][1]
            delta[f'{field}.{name}'] = entry
    for name in _PLAIN_DELTAS:
        delta[name] = _difference(*(result[name] for result in results))
    kinds = sorted(set(results[0]['not_ok_by_kind']) | set(results[1]['not_ok_by_kind']))
    for kind in kinds:
        delta[f'error_kind.{kind}'] = _difference(*(result['not_ok_by_kind'].get(kind, 0) for result in results))
    return {'base': results[0], 'candidate': results[1], 'delta': delta, 'seed': seed, 'resamples': _RESAMPLES}


def _comparison_markdown(comparison: dict, names: tuple[str, str]) -> str:
    """The comparison as a Markdown table, to paste in a pull-request comment."""
    base, candidate = comparison['base'], comparison['candidate']
    lines = [f'| figure | base ({names[0]}) | candidate ({names[1]}) | difference | 95% interval |',
             '| --- | ---: | ---: | ---: | --- |']
    for key in ('runs', 'ok', 'not_ok'):
        lines.append(f'| {key} | {base[key]} | {candidate[key]} | {candidate[key] - base[key]:+d} | |')
    for name, entry in comparison['delta'].items():
        if name in ('not_ok',):
            continue
        difference = entry['difference']
        shown = '-' if difference is None else f'{difference:+g}' + (
            f' ({entry["relative_pct"]:+.1f}%)' if entry['relative_pct'] is not None else '')
        interval = ''
        if 'ci95' in entry:
            interval = f'[{entry["ci95"][0]:g}, {entry["ci95"][1]:g}]' + (' significant' if entry['significant']
                                                                         else '')
        lines.append(f'| {name} | {_plain_number(entry["base"])} | {_plain_number(entry["candidate"])} | {shown} | {interval} |')
    for gate in comparison.get('gates') or ():
        lines.append(f'| gate `fail if {gate["expr"]}` | | {_plain_number(gate["value"])} | '
                     f'{"held" if gate["held"] else "**FAILED**"} | |')
    return '\n'.join(lines)
