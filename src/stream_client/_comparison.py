"""Two loads side by side: ``--compare BASE CANDIDATE`` of JSON Lines files.

``_compare_loads()`` takes the two loads' summaries and gives their verdict
counts and kinds, each latency figure's p50, p90 and p99 with a seeded
bootstrap 95% interval of the difference, the differences in goodput
and attainment, and in the tail (with the failures inside, and certified);
``_comparison_markdown()`` is its table for a pull request.
``_LoadHeader`` gathers what each load was run as while its records are
read, and ``_loads_differ()`` names what the two differ in (API, workload,
model, request and load settings). No I/O: the caller reads the files and
owns the seed.
"""
import json
import math
import random

from ._limits import _plain_number
from ._gates import _ALL, _CERTIFIED, _CERTIFIED_PERCENTILES, _LATENCY_FIELDS, _SCHEDULE_FIELDS, _TAIL_FIELDS
from ._summary import Summary

_RESAMPLES = 1000      # bootstrap resamples of each latency figure
_COMPARED_PERCENTILES = (('p50', 50), ('p90', 90), ('p99', 99))
_PLAIN_DELTAS = ('ok_ratio', 'not_ok', 'good', 'goodput_per_s', 'slo_attainment')


def _settings_differ(records: list[dict]) -> list[str]:
    """The request settings (every key of the record's request, and the model) that differ between records."""
    keys = sorted({key for record in records for key in (record.get('request') or {})})
    differ = [key.removesuffix('_sha256') for key in keys
              if len({json.dumps((record.get('request') or {}).get(key)) for record in records}) > 1]
    if len({record.get('model') for record in records}) > 1:
        differ.append('model')
    return differ


# What a load's header (a record's "load") says of how it was sent, compared between two loads: the runs in
# flight and their pacing. runs, duration and seed set how many runs there are; processes, warm-up and ids
# change nothing the server sees.
_COMPARED_LOAD_KEYS = ('concurrency', 'rate', 'arrivals', 'keep_alive', 'trace_speed', 'sessions')
# The request settings that change from run to run within a workload that is not one request repeated: a
# first run's are compared only when both loads have their first run in common (the same workload).
_PER_SESSION_KEYS = ('prompt_sha256', 'max_tokens')


def _workload_kind(record: dict) -> str:
    """What sent the run: sessions, a trace, synthetic lengths, or a load of requests; 'sweep' added for a
    step of --rates, --concurrencies or --find-capacity, 'repeat' for one of --repeats."""
    request, load = record.get('request') or {}, record.get('load') or {}
    kind = ('sessions' if 'session' in record else 'trace' if 'trace' in record
            else 'synthetic' if 'input_tokens' in request or 'output_tokens' in request else 'requests')
    return (kind + (' sweep' if load.get('step') is not None else '')
            + (' repeat' if load.get('repeat') is not None else ''))


class _LoadHeader:
    """What one load was run as, gathered from its records as they are read: its APIs, its workload kinds,
    its sessions' ids, and the record of its first run (the lowest run number: in two loads of the same
    flags, the same request)."""

    def __init__(self) -> None:
        self.apis: set = set()
        self.kinds: set = set()
        self.sessions: set = set()
        self.first: dict | None = None

    def add(self, record: dict) -> None:
        self.apis.add(record.get('api', 'chat'))
        self.kinds.add(_workload_kind(record))
        if 'session' in record:
            self.sessions.add(record['session'])
        if self.first is None or record.get('run', 0) < self.first.get('run', 0):
            self.first = record


def _loads_differ(base: _LoadHeader, candidate: _LoadHeader, overridden: tuple[str, ...] = ()) -> list[str]:
    """What two loads differ in, of what decides what a server is asked and how it is judged: API,
    workload, sessions, the request's settings and model (those of each load's first run), how the runs
    were sent and their SLO bounds (the load's header), but the bounds in ``overridden`` ('slo',
    'slo_target': the command line judges both loads by the same)."""
    differ = []
    if base.apis != candidate.apis:
        differ.append('API')
    if base.kinds != candidate.kinds:
        differ.append('workload')
    if base.sessions != candidate.sessions:
        differ.append('sessions')
    if base.first is None or candidate.first is None:
        return differ
    firsts = [base.first, candidate.first]
    per_session = base.sessions or candidate.sessions  # a first run is any session's: its prompt says nothing
    differ += [name for name in _settings_differ(firsts)
               if not (per_session and name in (key.removesuffix('_sha256') for key in _PER_SESSION_KEYS))
               and (name == 'model' or base.kinds == candidate.kinds)]  # other workloads: other requests
    loads = [record.get('load') or {} for record in firsts]
    differ += [key for key in _COMPARED_LOAD_KEYS + ('slo', 'slo_target')
               if key not in overridden and loads[0].get(key) != loads[1].get(key)]
    return differ


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
    delta.update(_tail_deltas(results))
    for name in _PLAIN_DELTAS:
        delta[name] = _difference(*(result[name] for result in results))
    kinds = sorted(set(results[0]['not_ok_by_kind']) | set(results[1]['not_ok_by_kind']))
    for kind in kinds:
        delta[f'error_kind.{kind}'] = _difference(*(result['not_ok_by_kind'].get(kind, 0) for result in results))
    return {'base': results[0], 'candidate': results[1], 'delta': delta, 'seed': seed, 'resamples': _RESAMPLES}


def _tail_deltas(results: tuple[dict, dict]) -> dict:
    """The differences in the tail, by gate name: each TAIL_FIELD's p50, p90 and p99 with the failures inside
    (one infinitely late is null, and the entry's ``late`` says which side's: its difference is then null,
    and a gate reads it as +inf when only the candidate's is late, -inf when only the base's), and its
    certified p90 and p99 (null with too few ok runs)."""
    delta = {}
    for field in _TAIL_FIELDS:
        entries = [result['latency_all_ms'][field] or {'late': []} for result in results]
        for name, _ in _COMPARED_PERCENTILES:
            entry = _difference(*(one.get(name) for one in entries))
            late = {side: name in one['late'] for side, one in zip(('base', 'candidate'), entries)}
            delta[f'{field}{_ALL}.{name}'] = {**entry, 'late': late} if any(late.values()) else entry
        for p in _CERTIFIED_PERCENTILES:
            delta[f'{field}{_CERTIFIED}.p{p}'] = _difference(*(result['certified_tail'][field][f'p{p}']
                                                                for result in results))
    return delta


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
        difference, late = entry['difference'], entry.get('late') or {}
        shown = '-' if difference is None else f'{difference:+g}' + (
            f' ({entry["relative_pct"]:+.1f}%)' if entry['relative_pct'] is not None else '')
        if late.get('base') != late.get('candidate'):
            shown = '+inf' if late['candidate'] else '-inf'
        values = ['late' if late.get(side) else _plain_number(entry[side]) for side in ('base', 'candidate')]
        interval = ''
        if 'ci95' in entry:
            interval = f'[{entry["ci95"][0]:g}, {entry["ci95"][1]:g}]' + (' significant' if entry['significant']
                                                                         else '')
        lines.append(f'| {name} | {values[0]} | {values[1]} | {shown} | {interval} |')
    for gate in comparison.get('gates') or ():
        lines.append(f'| gate `fail if {gate["expr"]}` | | {gate.get("infinite") or _plain_number(gate["value"])} | '
                     f'{"held" if gate["held"] else "**FAILED**"} | |')
    return '\n'.join(lines)
