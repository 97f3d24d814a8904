"""The summary of a load, built from its verdicts.

``Summary`` aggregates records: verdicts by layer and kind, latency
percentiles (and the tail of _tails: with the failures inside, certified),
goodput against SLOs, the cross-check's pairs and a rate sweep's steps;
``_summary_table()`` is its terminal form.
"""
import array
import calendar
import collections
import math
import statistics
import textwrap

from ._limits import _count, FAILURE_KINDS, _shorten, UsageError
from ._request import _positive_finite
from ._gates import _gate_lines, _LATENCY_FIELDS, _SCHEDULE_FIELDS, _UNCLASSIFIED
from ._tails import _certified_tail, _late_percentiles, _tail_lines, _TERMINAL_COLUMNS


def _percentiles(values) -> dict | None:
    """p50, p90, p99 (nearest rank) and max of values, or None when there are none."""
    ordered = sorted(values)
    if not ordered:
        return None
    def rank(p: float) -> float:
        return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]
    return {'p50': rank(50), 'p90': rank(90), 'p99': rank(99), 'max': ordered[-1]}


class _GapHistogram:
    """Content-event gaps pooled over many runs in bounded memory: counted in buckets 1% wide (and zero
    apart), so each percentile is the upper bound of its bucket, at most 1% above the true value."""

    STEP = math.log(1.01)

    def __init__(self) -> None:
        self.buckets: collections.Counter = collections.Counter()
        self.count = 0
        self.total = 0.0  # the gaps added up, for their mean (exact, unlike the percentiles)
        self.max = 0.0

    def add(self, gaps: list[float]) -> None:
        step, log, floor = self.STEP, math.log, math.floor
        self.buckets.update([None if gap <= 0 else floor(log(gap) / step) for gap in gaps])
        self.count += len(gaps)
        self.total += sum(gaps)
        self.max = max([self.max, *gaps])

    def percentile(self, p: float) -> float:
        """The p-th percentile (nearest rank) as the upper bound of its bucket; needs a gap."""
        needed, seen = max(1, math.ceil(p / 100 * self.count)), 0
        for key in sorted(self.buckets, key=lambda key: -math.inf if key is None else key):
            seen += self.buckets[key]
            if seen >= needed:
                return 0.0 if key is None else min(self.max, round(math.exp((key + 1) * self.STEP), 3))
        return self.max

    def result(self) -> dict | None:
        if not self.count:
            return None
        return {'p50': self.percentile(50), 'p90': self.percentile(90), 'p99': self.percentile(99), 'max': self.max,
                'count': self.count}



# The per-run figures a service-level objective (--slo NAME=MS) may bound, named as the record names them.
_SLO_FIGURES = {'first_text_ms': 'time to the first content event',
               'duration_ms': 'time from the start of the run to its end',
               'first_text_from_schedule_ms': 'time from when an open loop had the run due to its first content event',
               'duration_from_schedule_ms': 'time from when an open loop had the run due to its end',
               'mean_event_gap_ms': 'the mean gap between content events',
               'max_event_gap_ms': 'the largest gap between content events'}
_DEFAULT_SLO_TARGET = 0.99   # the attainment a sweep step needs to be under capacity
_RATE_TOLERANCE = 0.05       # a step also needs its achieved start rate within 5% of its schedule's
_KNEE_SHARE = 0.5            # a closed-loop step pays when its goodput grew by half what its added concurrency
                             # would give if goodput grew in proportion to it


def _parse_slos(texts: list[str], flag: str = '--slo', figures=_SLO_FIGURES, example: int = 500) -> tuple:
    """--slo NAME=MS values (or another flag's, over its figures) as sorted (name, ms) pairs; UsageError naming
    what is wrong."""
    slos = {}
    for text in texts:
        name, equals, value = text.partition('=')
        if name not in figures:
            raise UsageError(f'{flag} {text!r}: the figure must be one of {", ".join(figures)}, as NAME=MS')
        try:
            bound = float(value) if equals else math.nan
        except ValueError:
            bound = math.nan
        if not _positive_finite(bound):
            raise UsageError(f'{flag} {text!r}: the bound must be a positive number of milliseconds, '
                             f'e.g. {name}={example}')
        if name in slos:
            raise UsageError(f'{flag} bounds {name} twice')
        slos[name] = bound
    return tuple(sorted(slos.items()))


def _from_schedule(record: dict) -> dict:
    """The run's first text and duration counted from when its open loop's schedule had it due (its send
    was queued_ms later, the offset_ms of its start less its scheduled_ms), by SCHEDULE_FIELDS; None for
    a run that has no schedule (a closed loop, a single run) or no such figure."""
    scheduled, late = record.get('scheduled_ms'), None
    if scheduled is not None:
        late = record['offset_ms'] - scheduled
    return {name: None if late is None or record.get(field) is None else round(late + record[field], 3)
            for name, field in zip(_SCHEDULE_FIELDS, ('first_text_ms', 'duration_ms'))}


def _meets_slos(record: dict, slos) -> bool:
    """Whether the run's figures are within every bound; a figure the run does not have fails its
    bound, except a gap bound of a run with fewer than two content events, which has no gap."""
    schedule = _from_schedule(record) if any(name in _SCHEDULE_FIELDS for name, _ in slos) else {}
    for name, bound in slos:
        value = schedule[name] if name in _SCHEDULE_FIELDS else record.get(name)
        if value is None and not (name.endswith('_event_gap_ms') and record.get('first_text_ms') is not None):
            return False
        if value is not None and value > bound:
            return False
    return True


def _first_chunk_success(record: dict) -> bool:
    """Success as a load tool that stops at the first chunk counts it: a 2xx status and a first
    content event, whatever came after."""
    status = (record.get('http') or {}).get('status')
    return status is not None and 200 <= status < 300 and record.get('first_text_ms') is not None


_STAMP_FIELDS = ((0, 4), (5, 2), (8, 2), (11, 2), (14, 2), (17, 2))  # year to second of 2026-12-01T23:50:00


class Summary:
    """The aggregate of many runs, built from their records alone, so that --summary recomputes from the
    saved evidence exactly what the load printed. Keeps a few numbers per run, never the records."""

    def __init__(self, slos: tuple | None = None, slo_target: float | None = None, by_step: bool = True) -> None:
        self.slos, self.slo_target = slos, slo_target  # None: the bounds the records' loads were run with
        self.slos_seen: set = set()        # the distinct --slo of the loads added, to refuse a mix
        self.good = self.first_chunk_good = 0
        self.steps: dict[float, _Step] | None = {} if by_step else None  # by rate
        self.searched = False              # the steps are the probes of a --find-capacity search
        self.repeats: dict[int, Summary] | None = {} if by_step else None  # --repeat's loads, by repeat
        self.levels: dict[int, Summary] | None = {} if by_step else None  # a --concurrencies sweep's, by concurrency
        self.runs = self.ok = 0
        self.warmup_runs = 0               # warm-up runs: their records are kept, their figures left out
        self.warmup_planned = 0            # ... those of loads that planned their runs (not a session's)
        self.by_layer: collections.Counter = collections.Counter()
        self.by_kind: collections.Counter = collections.Counter()
        self.latency = {field: array.array('d') for field in _LATENCY_FIELDS + _SCHEDULE_FIELDS}
        self.gaps = _GapHistogram()
        self.worst_gaps = array.array('d')  # each ok run's largest content-event gap (0 without one)
        self.completion_tokens = self.token_runs = self.content_events = 0
        self.first_start: float | None = None
        self.last_end: float | None = None
        self.busy_s = 0.0                  # the runs' durations added up
        self.seen = {'sources': set(), 'apis': set(), 'models': set(), 'expected_finishes': set()}
        self.planned: dict[str, int] = {}  # runs planned, by load id
        self.stale = 0                     # runs whose reused connection had been closed while idle
        self.single_runs = 0               # records of runs that were not part of a load
        self.pairs: collections.Counter = collections.Counter()  # --cross-check pairs, by what they showed
        self.skipped: list[str] = []       # why each line of the files read that was broken JSON was left out
        self.missing: list[str] = []       # what the loads read planned and has no record (see _LoadCheck)
        self._second = ('', 0)  # the last whole second parsed from a started_at, and its epoch

    def epoch(self, started_at: str) -> float:
        """Seconds since the epoch of a record's started_at (UTC, millisecond precision)."""
        second = started_at[:19]
        if second != self._second[0]:  # runs of a load share their seconds: parse each once
            self._second = (second, calendar.timegm(tuple(int(second[at:at + size]) for at, size in _STAMP_FIELDS)))
        return self._second[1] + int(started_at[20:23]) / 1000

    def add(self, record: dict) -> None:
        if record.get('warmup'):
            self.warmup_runs += 1
            self.warmup_planned += (record.get('load') or {}).get('runs') is not None
            return
        self.runs += 1
        start = self.epoch(record['started_at'])
        end = start + (record['duration_ms'] or 0) / 1000
        self.busy_s += end - start
        self.first_start = start if self.first_start is None else min(self.first_start, start)
        self.last_end = end if self.last_end is None else max(self.last_end, end)
        if 'http' not in record or record['http'] is not None:  # no response head: nothing said who answered
            self.seen['sources'].add(record.get('source', 'endpoint'))
        self.seen['apis'].add(record.get('api', 'chat'))
        self.seen['models'].add(record.get('model'))
        self.seen['expected_finishes'].add((record.get('request') or {}).get('expect_finish', 'stop'))
        load = record.get('load') or {}
        if 'id' in load and load['runs'] is not None:
            self.planned[load['id']] = load['runs']
        else:  # a single run, or a run of --sessions (whose runs are not known ahead): planned as it comes
            self.single_runs += 1
        if record.get('cross_check'):
            self.pairs.update(_pair_outcomes(record['cross_check']))
        self._add_goodput(record, load)
        if not record['ok']:
            self.stale += bool((record.get('connection') or {}).get('stale'))
            self.by_layer[record['error_layer']] += 1
            self.by_kind[record.get('error_kind') or _UNCLASSIFIED] += 1
            return
        self.ok += 1
        for field in _LATENCY_FIELDS:
            self.latency[field].append(record[field])
        for field, value in _from_schedule(record).items():
            if value is not None:
                self.latency[field].append(value)
        self.gaps.add(record['event_gaps_ms'])
        self.worst_gaps.append(max(record['event_gaps_ms'], default=0.0))
        self.content_events += record['content_events']
        if record['completion_tokens'] is not None:
            self.completion_tokens += record['completion_tokens']
            self.token_runs += 1

    def _add_goodput(self, record: dict, load: dict) -> None:
        """Count the run as good (ok and within every bound) and as a first-chunk success, and add it
        to its sweep step."""
        slos = self.slos if self.slos is not None else tuple(sorted((load.get('slo') or {}).items()))
        self.slos_seen.add(slos)
        if self.slo_target is None and load.get('slo_target') is not None:
            self.slo_target = load['slo_target']  # the target the sweep was run with
        within = _meets_slos(record, slos)
        self.good += record['ok'] and within
        self.first_chunk_good += _first_chunk_success(record) and within
        if self.repeats is not None and load.get('repeat') is not None:
            repeat = self.repeats.get(load['repeat'])
            if repeat is None:
                repeat = self.repeats[load['repeat']] = Summary(self.slos, self.slo_target, by_step=False)
            repeat.add(record)
        if self.levels is not None and load.get('step') is not None and load.get('rate') is None:
            level = self.levels.get(load['concurrency'])
            if level is None:
                level = self.levels[load['concurrency']] = Summary(self.slos, self.slo_target, by_step=False)
            level.add(record)
        elif self.steps is not None and load.get('step') is not None:
            self.searched = self.searched or bool(load.get('search'))
            step = self.steps.get(load['rate'])  # a sweep's steps differ in rate, also across merged files
            if step is None:
                step = self.steps[load['rate']] = _Step(load['rate'], load['duration'],
                                                        Summary(self.slos, self.slo_target, by_step=False))
            step.add(record)

    def slo_bounds(self) -> tuple:
        """The bounds good runs met: the ones given, or the one set the records' loads shared."""
        if self.slos is not None:
            return self.slos
        if len(self.slos_seen) > 1:
            raise UsageError('these records come from loads with different --slo bounds: give --slo to judge '
                             'them all by the same ones')
        return next(iter(self.slos_seen), ())

    def target(self) -> float:
        return self.slo_target if self.slo_target is not None else _DEFAULT_SLO_TARGET

    def p50_first_text(self) -> float | None:
        values = _percentiles(self.latency['first_text_ms'])
        return values and values['p50']

    def result(self) -> dict:
        """The summary as one JSON object (see the README's "Many runs")."""
        wall = (self.last_end - self.first_start) if self.runs else 0.0
        def per_second(count: float) -> float | None:
            return round(count / wall, 3) if wall > 0 else None
        return {
            'runs': self.runs, 'ok': self.ok, 'not_ok': self.runs - self.ok,
            'ok_ratio': self.ok / self.runs if self.runs else None,  # not rounded: 1 only when every run is ok
            'planned_runs': self.planned_runs(),
            'warmup_runs': self.warmup_runs, 'skipped_lines': len(self.skipped),
            'stale_connection_failures': self.stale,
            'not_ok_by_layer': dict(sorted(self.by_layer.items(), key=lambda item: (-item[1], item[0]))),
            'not_ok_by_kind': dict(sorted(self.by_kind.items(), key=lambda item: (-item[1], item[0]))),
            'latency_ms': {field: _percentiles(self.latency[field]) for field in _LATENCY_FIELDS + _SCHEDULE_FIELDS},
            'latency_runs': self.ok, 'latency_excludes': self.runs - self.ok,
            'event_gaps_ms': self.gaps.result(),
            'wall_s': round(wall, 3), 'runs_per_s': per_second(self.runs), 'ok_runs_per_s': per_second(self.ok),
            'mean_in_flight': per_second(self.busy_s),
            'completion_tokens_per_s': per_second(self.completion_tokens) if self.token_runs else None,
            'content_events_per_s': per_second(self.content_events),
            'cross_check': {outcome: self.pairs[outcome] for outcome in _PAIR_OUTCOMES} if self.pairs else None,
            **{key: sorted(value, key=str) for key, value in self.seen.items()},
            **self._goodput(per_second),
            **self._tails(),
        }

    def planned_runs(self) -> int:
        """The runs the loads planned, each load counted once by its id, less the warm-up runs; a run that was
        not part of a load, or of a load that does not plan its runs ahead (--sessions), as it came."""
        return sum(self.planned.values()) + self.single_runs - self.warmup_planned

    def _tails(self) -> dict:
        """The tail with the failures inside, over every planned run (one not ok or never started infinitely
        late), and the certified tail over the ok runs (docs/decisions.md)."""
        planned = max(self.planned_runs(), self.runs)
        figures = {'first_text_ms': self.latency['first_text_ms'], 'duration_ms': self.latency['duration_ms'],
                   'max_event_gap_ms': self.worst_gaps}
        late = planned - self.ok
        return {'latency_all_ms': {field: _late_percentiles(values, late) for field, values in figures.items()},
                'latency_all_runs': planned, 'latency_all_late': late,
                'latency_all_never_started': planned - self.runs, 'certified_tail': _certified_tail(figures)}

    def _goodput(self, per_second) -> dict:
        """Goodput, attainment and the first-chunk count; with sweep steps, a block per step and the
        saturation rate."""
        steps = [step.result(number) for number, (_, step) in enumerate(sorted((self.steps or {}).items()))]
        saturation = _saturation_step(steps, self.target())
        levels = [_level(number, concurrency, summary.result())
                  for number, (concurrency, summary) in enumerate(sorted((self.levels or {}).items()))]
        return {'slo': dict(self.slo_bounds()) or None, 'good': self.good, 'goodput_per_s': per_second(self.good),
                'slo_attainment': round(self.good / self.runs, 4) if self.runs else None,
                'first_chunk_good': self.first_chunk_good, 'slo_target': self.target(), 'steps': steps,
                'saturation_rate': saturation['rate'], 'saturation': saturation if steps else None,
                'capacity': {'rate': saturation['rate'], 'bracket': [saturation['rate'], saturation['exceeded_at']],
                             'probes': len(steps)} if self.searched else None,
                'concurrency_steps': levels, 'knee': _knee(levels) if levels else None,
                'repeats': _spread([summary.result() for _, summary in sorted(self.repeats.items())])
                if self.repeats else None}


class _Step:
    """One rate of a sweep: its offered rate and duration, the summary of its runs, and how many of
    them started within the duration (the achieved start rate)."""

    def __init__(self, rate: float, duration: float, summary: Summary) -> None:
        self.rate, self.duration, self.summary = rate, duration, summary
        self.on_time = 0

    def add(self, record: dict) -> None:
        self.summary.add(record)
        self.on_time += record.get('offset_ms', 0) < self.duration * 1000

    def result(self, number: int) -> dict:
        whole = self.summary.result()
        scheduled = whole['planned_runs']
        # cut by a signal (or a failed write): runs ended interrupted, or fewer started than were scheduled
        cut = whole['runs'] < scheduled or 'interrupted' in whole['not_ok_by_kind']
        return {'step': number, 'rate': self.rate, 'duration_s': self.duration, 'interrupted': cut,
                'scheduled_runs': scheduled,
                'scheduled_rate': round(scheduled / self.duration, 3),
                'achieved_rate': round(self.on_time / self.duration, 3),
                'runs': whole['runs'], 'ok': whole['ok'], 'good': whole['good'],
                'goodput_per_s': round(whole['good'] / self.duration, 3), 'slo_attainment': whole['slo_attainment'],
                'first_chunk_good': whole['first_chunk_good'],
                'latency_ms': {field: whole['latency_ms'][field] for field in ('first_text_ms', 'duration_ms')},
                'latency_all_ms': {field: whole['latency_all_ms'][field] for field in ('first_text_ms', 'duration_ms')},
                'event_gaps_ms': whole['event_gaps_ms']}


# The figures whose spread across --repeat's loads the summary gives, by their gate names.
_SPREAD_FIGURES = ('ok_ratio', 'slo_attainment', 'goodput_per_s', 'runs_per_s',
                   *(f'{field}.{p}' for field in _LATENCY_FIELDS for p in ('p50', 'p90', 'p99')))


def _spread(results: list[dict]) -> dict:
    """Each SPREAD_FIGURE across the repeats' summaries: its value in each (null where a repeat lacks it),
    and the min, max, mean and standard deviation of the values there are."""
    spread = {}
    for figure in _SPREAD_FIGURES:
        field, _, part = figure.partition('.')
        values = [(result['latency_ms'][field] or {}).get(part) if part else result[field] for result in results]
        known = [value for value in values if value is not None]
        spread[figure] = {'values': values, 'min': min(known, default=None), 'max': max(known, default=None),
                          'mean': round(statistics.fmean(known), 3) if known else None,
                          'stdev': round(statistics.stdev(known), 3) if len(known) > 1 else None}
    return {'count': len(results), 'spread': spread}


def _level(number: int, concurrency: int, whole: dict) -> dict:
    """One step of a --concurrencies sweep: its runs in flight, throughput, goodput and first text."""
    return {'step': number, 'concurrency': concurrency, 'runs': whole['runs'], 'ok': whole['ok'], 'good': whole['good'],
            'wall_s': whole['wall_s'], 'runs_per_s': whole['runs_per_s'], 'goodput_per_s': whole['goodput_per_s'],
            'slo_attainment': whole['slo_attainment'],
            'latency_ms': {field: whole['latency_ms'][field] for field in ('first_text_ms', 'duration_ms')},
            'latency_all_ms': {field: whole['latency_all_ms'][field] for field in ('first_text_ms', 'duration_ms')}}


def _knee(levels: list[dict]) -> dict:
    """The knee of a closed-loop sweep: walking up the concurrencies, the last one whose goodput grew by at
    least KNEE_SHARE of what its added concurrency would give in proportion (from 4 to 8 in flight, by
    half of 100%: 50%; the first step always counts). Past it, more runs in flight add waiting, not
    answers. Says what the step past it showed."""
    knee, past, why = levels[0], None, None
    for before, level in zip(levels, levels[1:]):
        gain = None if not before['goodput_per_s'] or level['goodput_per_s'] is None else \
            level['goodput_per_s'] / before['goodput_per_s'] - 1
        proportional = level['concurrency'] / before['concurrency'] - 1
        if gain is not None and gain >= _KNEE_SHARE * proportional:
            knee = level
            continue
        past = level
        first = [(step['latency_ms']['first_text_ms'] or {}).get('p50') for step in (before, level)]
        grew = 'no goodput to compare' if gain is None else f'goodput grew {100 * gain:.1f}%'
        why = (f'from {before["concurrency"]} to {level["concurrency"]} runs in flight {grew}, under half of '
               f'{100 * proportional:.0f}%, while first text p50 went from {_ms(first[0])} to {_ms(first[1])}')
        break
    if past is None:
        why = 'goodput grew by half its concurrency\'s growth or more at every step: the knee lies above the highest'
    return {'concurrency': knee['concurrency'], 'past': past and past['concurrency'], 'why': why}


def _ms(value: float | None) -> str:
    return '-' if value is None else f'{value:.1f} ms'


def _saturation_step(steps: list[dict], target: float) -> dict:
    """The highest rate under capacity: walking up the rates, each step must keep its attainment at or
    above target and start its runs within RATE_TOLERANCE of its schedule's rate. Says which condition
    the first step past it failed. A step the sweep was cut in (and any after it) is not judged: its
    runs were interrupted, not slow."""
    under, exceeded, why = None, None, None
    for step in steps:
        if step['interrupted']:
            before = ('every whole step before it met the target' if under is not None
                      else 'no whole step came before it')
            why = f'the sweep was cut during the step at {step["rate"]:g} runs/s, which is not judged; {before}'
            return {'rate': under, 'exceeded_at': None, 'why': why}
        problems = []
        if step['slo_attainment'] is None or step['slo_attainment'] < target:
            problems.append(f'attainment {step["slo_attainment"]} is under the target {target}')
        if step['achieved_rate'] < (1 - _RATE_TOLERANCE) * step['scheduled_rate']:
            problems.append(f'{step["achieved_rate"]} runs/s started, under {100 - _RATE_TOLERANCE * 100:.0f}% '
                            f'of the {step["scheduled_rate"]} runs/s scheduled')
        if problems:
            exceeded, why = step['rate'], ' and '.join(problems)
            break
        under = step['rate']
    if exceeded is None and steps:
        why = 'every step met the target: the capacity lies above the highest rate'
    return {'rate': under, 'exceeded_at': exceeded, 'why': why}


# What the summary counts of --cross-check pairs: compared (both answers there), of which same or different;
# not comparable (the token ids diverged), without token ids, and unstreamed requests that failed.
_PAIR_OUTCOMES = ('pairs', 'compared', 'same', 'different', 'not_comparable', 'without_token_ids',
                 'unstreamed_failed')


def _pair_outcomes(cross: dict) -> list[str]:
    """The PAIR_OUTCOMES one cross-check record counts in."""
    if cross['same'] is None:
        return ['pairs', 'unstreamed_failed']
    token_ids = {True: [], False: ['not_comparable'], None: ['without_token_ids']}[cross['comparable']]
    return ['pairs', 'compared', 'same' if cross['same'] else 'different', *token_ids]


def _unplanned(result: dict) -> str:
    """'  (of 200 planned)' when fewer runs have records than were planned (an interrupted load), else ''."""
    return f'  (of {result["planned_runs"]} planned)' if result['planned_runs'] > result['runs'] else ''


def _meaning(kind: str) -> str:
    return FAILURE_KINDS.get(kind, ('', 'a record written before failures had kinds'))[1]


def _summary_table(result: dict) -> str:
    """The summary for a person, within TERMINAL_COLUMNS: counts, kinds of failure, the latency of ok runs."""
    skipped = [f'{_count(result["skipped_lines"], "line")} of broken JSON skipped'] if result['skipped_lines'] else []
    if not result['runs']:
        return '\n'.join(['no runs: no record to summarize'] + skipped)
    lines = [f'runs {result["runs"]}  ok {result["ok"]}  not ok {result["not_ok"]}' + _unplanned(result)] + skipped
    if result['warmup_runs']:
        lines.append(f'  and {_count(result["warmup_runs"], "warm-up run")}, left out of every figure below')
    if result['stale_connection_failures']:
        lines.append(f'stale connections: {result["stale_connection_failures"]} runs on a kept connection that was '
                     'closed while idle')
    if result['not_ok']:
        lines += textwrap.wrap('not ok by layer: ' + ', '.join(f'{layer} {count}' for layer, count
                                                               in result['not_ok_by_layer'].items()),
                               _TERMINAL_COLUMNS, subsequent_indent='  ')
        lines += [f'  {count:5d}  {_shorten(f"{kind}: {_meaning(kind)}", _TERMINAL_COLUMNS - 12)}'
                  for kind, count in list(result['not_ok_by_kind'].items())[:10]]
    lines.append(f'latency of {_count(result["latency_runs"], "ok run")}, ms '
                 f'({_count(result["latency_excludes"], "not ok run")} excluded):')
    gaps = result['event_gaps_ms']
    rows = [(field, result['latency_ms'][field]) for field in _LATENCY_FIELDS]
    rows += [(field, result['latency_ms'].get(field)) for field in _SCHEDULE_FIELDS
             if result['latency_ms'].get(field)]  # an open loop's: from when each run was due
    rows.append((f'content-event gaps ({gaps["count"] if gaps else 0})', gaps))
    width = max(len(name) for name, _ in rows) + 2
    lines.append(' ' * width + ''.join(f'{key:>9}' for key in ('p50', 'p90', 'p99', 'max')))
    for name, values in rows:
        cells = ''.join(f'{values[key]:9.1f}' if values else f'{"-":>9}' for key in ('p50', 'p90', 'p99', 'max'))
        lines.append(f'  {name:<{width - 2}}{cells}')
    pairs = result.get('cross_check')
    if pairs:
        lines.append(f'cross-check: {_count(pairs["pairs"], "pair")}, {pairs["compared"]} compared: '
                     f'{pairs["same"]} same, '
                     f'{pairs["different"]} different; {pairs["not_comparable"]} not comparable, '
                     f'{pairs["without_token_ids"]} without token ids, {pairs["unstreamed_failed"]} unstreamed failed')
    runs, tokens = ([f'{result[key]} {label}' for key, label in group if result[key] is not None]
                    for group in ((('runs_per_s', 'runs/s'), ('ok_runs_per_s', 'ok runs/s')),
                                  (('completion_tokens_per_s', 'completion tokens/s'),
                                   ('content_events_per_s', 'content events/s'))))
    lines.append(f'wall {result["wall_s"]} s: ' + ', '.join(runs))
    if tokens:
        lines.append('  ' + ', '.join(tokens))
    return '\n'.join(lines + _tail_lines(result) + _goodput_lines(result) + _gate_lines(result.get('gates') or []))

def _repeat_lines(result: dict) -> list[str]:
    """The spread of a few figures across --repeat's loads."""
    repeats = result.get('repeats')
    if not repeats:
        return []
    lines = [f'across {repeats["count"]} repeats:{"min":>20}{"mean":>10}{"max":>10}{"stdev":>10}']
    for figure in ('ok_ratio', 'goodput_per_s', 'first_text_ms.p50', 'first_text_ms.p99', 'duration_ms.p99'):
        values = repeats['spread'][figure]
        lines.append(f'  {figure:<29}' + ''.join(f'{_figure_text(values[key]):>10}'
                                                  for key in ('min', 'mean', 'max', 'stdev')))
    return lines


def _knee_lines(result: dict) -> list[str]:
    """A --concurrencies sweep's steps and its knee."""
    if not result.get('concurrency_steps'):
        return []
    lines = [f'{"in flight":>10}{"runs":>6}{"ok":>6}{"good":>6}{"runs/s":>9}{"good/s":>9}'
             f'{"first text p50":>15}{"p99":>8}']
    for level in result['concurrency_steps']:
        first = level['latency_ms']['first_text_ms']
        cells = f'{first["p50"]:15.1f}{first["p99"]:8.1f}' if first else f'{"-":>15}{"-":>8}'
        lines.append(f'{level["concurrency"]:10d}{level["runs"]:6d}{level["ok"]:6d}{level["good"]:6d}'
                     f'{_figure_text(level["runs_per_s"]):>9}{_figure_text(level["goodput_per_s"]):>9}' + cells)
    knee = result['knee']
    lines += textwrap.wrap(f'knee at {knee["concurrency"]} in flight; {knee["why"]}', _TERMINAL_COLUMNS,
                           subsequent_indent='  ')
    return lines


def _figure_text(value: float | None) -> str:
    return '-' if value is None else f'{value:g}'


def _goodput_lines(result: dict) -> list[str]:
    """Goodput against what a first-chunk tool would count, and a sweep's steps and saturation."""
    bounds = ', '.join(f'{name} <= {bound:g} ms' for name, bound in (result['slo'] or {}).items())
    within = f'ok and {bounds}' if bounds else 'ok; no --slo bounds'
    lines = [f'good {result["good"]} of {result["runs"]} ({within}): {result["goodput_per_s"]} good runs/s',
             f'  a tool that counts a first chunk as success would report {result["first_chunk_good"]} good']
    lines += _knee_lines(result) + _repeat_lines(result)
    if not result['steps']:
        return lines
    lines.append(f'{"rate/s":>8}{"started/s":>10}{"runs":>6}{"ok":>6}{"good":>6}{"good/s":>8}{"attain":>8}'
                 f'{"first text p50":>15}{"p99":>8}')
    for step in result['steps']:
        first = step['latency_ms']['first_text_ms']
        cells = f'{first["p50"]:15.1f}{first["p99"]:8.1f}' if first else f'{"-":>15}{"-":>8}'
        attain = '-' if step['slo_attainment'] is None else f'{step["slo_attainment"]:.3f}'
        lines.append(f'{step["rate"]:8g}{step["achieved_rate"]:10g}{step["runs"]:6d}{step["ok"]:6d}{step["good"]:6d}'
                     f'{step["goodput_per_s"]:8g}{attain:>8}' + cells + ('  cut' if step['interrupted'] else ''))
    saturation = result['saturation']
    under = 'at no step' if saturation['rate'] is None else f'up to {saturation["rate"]:g} runs/s'
    past = '' if saturation['exceeded_at'] is None else f'at {saturation["exceeded_at"]:g} runs/s '
    lines.append(f'under capacity {under}; {past}{saturation["why"]}')
    capacity = result.get('capacity')
    if capacity:
        low, high = (_figure_text(rate) for rate in capacity['bracket'])
        lines.append(f'capacity {_figure_text(capacity["rate"])} runs/s at the target, bracket {low} to {high} runs/s, '
                     f'{capacity["probes"]} probes')
    return lines
