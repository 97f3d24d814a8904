"""A load's steps: what --runs, --rate, --duration, --rates, --concurrencies, --find-capacity, --warmup and
--repeat ask for, as the LoadSettings of each step, for any workload.

A step is one pass of the workload under one schedule: a load of prompts (its runs), a --sessions file (its
sessions) or a --trace (its lines). ``_load_settings()`` turns the flags into the steps; ``units`` is the
workload's own count where it has one (the sessions of the file, the lines of the trace), which is then what
a closed-loop step runs. ``_CapacitySearch`` chooses each probe from the summary of the ones before it.
"""
import dataclasses
import math

from ._limits import UsageError
from ._request import _positive_finite
from ._load import LoadSettings, _scheduled_runs
from ._gates import _SCHEDULE_FIELDS
from ._summary import _parse_slos, _saturation_step, Summary
from ._session_summary import _parse_session_slos
from ._args import _cache_salt, _warmup


def _pass_fields(args) -> dict:
    """What every step of a workload carries beside its schedule: --cache-salt (checked against the workload)
    and --session-slo (sessions only: the flag table refuses it elsewhere)."""
    return {'cache_salt': _cache_salt(args, sessions=args.sessions is not None),
            'session_slos': _parse_session_slos(args.session_slo or [])}


def _load_settings(args, units: int | None = None):
    """The load the command line asks for, as its steps (one, one per rate of --rates or per concurrency of
    --concurrencies, or the probes of --find-capacity), or None for a single run (--runs 1, no load flags).
    units: the workload's own count (its sessions, its lines), which --runs has cut already and which a
    closed-loop step runs; None for a load of prompts, whose runs --runs gives."""
    rates = _rates(args.rates) if args.rates is not None else None
    if args.concurrencies is not None:
        return _concurrency_steps(args, units)
    if args.find_capacity is not None:
        return _CapacitySearch(args, units)
    if rates is not None and args.rate is not None:
        raise UsageError('--rates runs one step per rate: it replaces --rate')
    if args.duration is not None and args.runs is not None and units is None:
        raise UsageError('--duration bounds a load by time: it replaces --runs')
    if rates is not None and args.duration is None:
        raise UsageError('--rates needs --duration: how many seconds each step runs')
    if args.duration is not None and args.rate is None and rates is None:
        raise UsageError('--duration bounds an open loop: give it --rate or --rates')
    runs = units if units is not None else 1 if args.runs is None else args.runs
    if args.keep_alive and runs < 2 and args.duration is None and units is None:
        raise UsageError('--keep-alive needs --runs of 2 or more: one run uses one connection')
    slos, target = _parse_slos(args.slo or []), _slo_target(args)
    warmup_runs, warmup_s = _warmup(args.warmup)
    scheduled = [name for name, _ in slos if name in _SCHEDULE_FIELDS]
    if scheduled and args.rate is None and rates is None:
        raise UsageError(f'--slo {scheduled[0]} counts from an open loop\'s schedule: give --rate or --rates (a '
                         'closed loop sends each run when a slot frees, and has no schedule)')
    if units is None and runs == 1 and args.duration is None and args.concurrency is None and args.rate is None \
            and args.prompts is None:
        return None  # one run: _FLAG_TABLE has refused the flags of a load already
    processes = 1 if args.processes is None else args.processes
    if args.duration is None:
        if warmup_runs and warmup_runs >= runs:
            raise UsageError(f'--warmup {args.warmup} leaves no run of the {runs} to summarise: the warm-up runs '
                             'are the first of --runs')
        return [LoadSettings(runs, args.concurrency, args.rate, args.arrivals, args.seed, args.keep_alive,
                             slos=slos, slo_target=target, processes=processes, warmup_runs=warmup_runs,
                             warmup_s=warmup_s, **_pass_fields(args))]
    if not _positive_finite(args.duration):
        raise UsageError(f'--duration must be a positive number of seconds, not {args.duration}')
    if not _positive_finite(rates[0] if rates else args.rate):
        raise UsageError(f'--rate must be a positive number of runs per second, not {args.rate}')
    steps = [LoadSettings(_scheduled_runs(rate, args.arrivals, args.seed, args.duration), args.concurrency, rate,
                          args.arrivals, args.seed, args.keep_alive, args.duration, number if rates else None,
                          slos, target, processes)
             for number, rate in enumerate(rates or [args.rate])]
    if warmup_runs and warmup_runs >= min(step.runs for step in steps):
        raise UsageError(f'--warmup {args.warmup} leaves no run to summarise: a step of --duration '
                         f'{args.duration:g} s schedules {min(step.runs for step in steps)} runs')
    return [dataclasses.replace(step, warmup_runs=warmup_runs, warmup_s=warmup_s, **_pass_fields(args))
            for step in steps]


class _CapacitySearch:
    """--find-capacity LO:HI: open-loop probes of --duration seconds, bisecting on the rate. A probe
    passes when it is under capacity as a sweep's step is (attainment at the target, runs started on
    time); LO is probed first (failing it, the capacity is below LO), then HI (passing it, above HI),
    then the middle of the bracket until the bracket is within TOLERANCE of its top (_next_probe)."""

    TOLERANCE = 0.05

    def __init__(self, args, units: int | None = None) -> None:
        runs = args.runs if units is None else None  # a workload's --runs cuts its file: a probe cycles through it
        for flag, given in (('--rate', args.rate), ('--rates', args.rates), ('--runs', runs)):
            if given is not None:
                raise UsageError(f'--find-capacity probes rates of its own, each for --duration seconds: it does not '
                                 f'go with {flag}')
        low, colon, high = args.find_capacity.partition(':')
        try:
            self.low, self.high = float(low), float(high)
        except ValueError:
            self.low = self.high = math.nan
        if not (colon and _positive_finite(self.low) and _positive_finite(self.high) and self.low < self.high):
            raise UsageError(f'--find-capacity {args.find_capacity!r}: give LO:HI, two rates in runs per second with '
                             'LO below HI, e.g. 1:64')
        if args.duration is None or not _positive_finite(args.duration):
            raise UsageError('--find-capacity needs --duration: how many seconds each probe runs')
        self.args, self.processes = args, 1 if args.processes is None else args.processes
        self.slos, self.slo_target = _parse_slos(args.slo or []), _slo_target(args)
        self.warmup = _warmup(args.warmup)
        self.fields = _pass_fields(args)
        fewest = _scheduled_runs(self.low, args.arrivals, args.seed, args.duration)  # more runs at a higher rate
        if self.warmup[0] and self.warmup[0] >= fewest:
            raise UsageError(f'--warmup {args.warmup} leaves no run to summarise: a probe at {self.low:g} runs/s '
                             f'for {args.duration:g} s schedules {fewest}')

    def probe(self, number: int, rate: float) -> LoadSettings:
        args = self.args
        return LoadSettings(_scheduled_runs(rate, args.arrivals, args.seed, args.duration), args.concurrency, rate,
                            args.arrivals, args.seed, args.keep_alive, args.duration, number, self.slos,
                            self.slo_target, self.processes, *self.warmup, search=(self.low, self.high),
                            **self.fields)

    def probes(self, summary: Summary):
        """The probes in turn, each chosen (by _next_probe) from the summary of the ones before."""
        def passed(rate: float) -> bool | None:
            step = (summary.steps or {}).get(rate)
            return None if step is None else \
                _saturation_step([step.result(0)], summary.target())['rate'] is not None
        verdicts: list[tuple[float, bool | None]] = []
        rate = _next_probe(self.low, self.high, verdicts, self.TOLERANCE)
        while rate is not None:
            yield self.probe(len(verdicts), rate)
            verdicts.append((rate, passed(rate)))
            rate = _next_probe(self.low, self.high, verdicts, self.TOLERANCE)


def _next_probe(low: float, high: float, verdicts: list[tuple[float, bool | None]], tolerance: float) -> float | None:
    """The rate --find-capacity LOW:HIGH probes next, given the (rate, passed) of its probes so far in
    order (passed None: the probe was not judged, no run of it ran), or None when the search is over:
    LOW first (failing it, the capacity is below LOW), then HIGH (passing it, at least HIGH), then the
    middle of the bracket, keeping the half where the capacity lies, until the bracket is within
    tolerance of its top. Sans-IO: the decisions of a search, from its probes' verdicts alone."""
    for number, (rate, passed) in enumerate(verdicts):
        if passed is None or (number == 0 and not passed) or (number == 1 and passed):
            return None  # none ran, LOW failed or HIGH passed: nothing between to search
        if number >= 2:
            low, high = (rate, high) if passed else (low, rate)
    if len(verdicts) < 2:
        return (low, high)[len(verdicts)]
    return round((low + high) / 2, 3) if high - low > tolerance * high else None


def _first_step(steps: list[LoadSettings] | _CapacitySearch) -> LoadSettings | _CapacitySearch:
    """What every step of a load shares (its SLOs, its processes): the first step's, or the search's."""
    return steps if isinstance(steps, _CapacitySearch) else steps[0]


def _concurrency_steps(args, units: int | None = None) -> list[LoadSettings]:
    """--concurrencies C1,C2,...: one closed-loop step per concurrency, ascending, of --runs runs (or of the
    workload's units: every session, every line)."""
    for flag, given in (('--rate', args.rate), ('--rates', args.rates), ('--duration', args.duration),
                        ('--concurrency', args.concurrency), ('--find-capacity', args.find_capacity)):
        if given is not None:
            raise UsageError(f'--concurrencies runs closed-loop steps of --runs runs, one per concurrency: it does '
                             f'not go with {flag}')
    runs = units if units is not None else args.runs
    if runs is None:
        raise UsageError('--concurrencies needs --runs: how many runs each step makes')
    levels = []
    for part in args.concurrencies.split(','):
        level = int(part) if part.strip().isdigit() else 0
        if level < 1:
            raise UsageError(f'--concurrencies {args.concurrencies!r}: each must be a whole number above 0, not '
                             f'{part.strip()!r}')
        if level in levels:
            raise UsageError(f'--concurrencies {args.concurrencies!r} lists {level} twice')
        levels.append(level)
    slos, target = _parse_slos(args.slo or []), _slo_target(args)
    warmup_runs, warmup_s = _warmup(args.warmup)
    if warmup_runs >= runs:
        raise UsageError(f'--warmup {args.warmup} leaves no run of the {runs} of a step to summarise')
    return [LoadSettings(runs, level, None, args.arrivals, args.seed, args.keep_alive, None, number, slos, target,
                         1 if args.processes is None else args.processes, warmup_runs, warmup_s,
                         **_pass_fields(args))
            for number, level in enumerate(sorted(levels))]


def _rates(text: str) -> list[float]:
    """--rates R1,R2,...: distinct positive rates, in ascending order."""
    rates = []
    for part in text.split(','):
        try:
            rate = float(part)
        except ValueError:
            rate = math.nan
        if not _positive_finite(rate):
            raise UsageError(f'--rates {text!r}: each rate must be a positive number of runs per second, '
                             f'not {part.strip()!r}')
        if rate in rates:
            raise UsageError(f'--rates {text!r} lists {part.strip()} twice')
        rates.append(rate)
    return sorted(rates)


def _slo_target(args) -> float | None:
    """--slo-target, checked: a fraction in (0, 1], or None when not given."""
    target = args.slo_target
    if target is not None and not 0 < target <= 1:
        raise UsageError(f'--slo-target must be a fraction above 0 and at most 1 (e.g. 0.99), not {target}')
    return target


def _repeated(args, steps):
    """The load --repeat K asks for: its one step K times, with fresh seeds or the same one."""
    if args.repeat is None:
        if args.repeat_seeds != 'fresh':
            raise UsageError('--repeat-seeds goes with --repeat K')
        return steps
    if args.repeat < 2:
        raise UsageError(f'--repeat must be 2 or more loads, not {args.repeat}')
    if isinstance(steps, _CapacitySearch) or len(steps) > 1:  # one run: refused by _FLAG_TABLE already
        raise UsageError('--repeat repeats one load (--runs, or --rate with --duration): not a sweep or a search')
    fresh = args.repeat_seeds == 'fresh'
    return [dataclasses.replace(steps[0], seed=steps[0].seed + repeat * fresh, repeat=repeat)
            for repeat in range(args.repeat)]
