"""The command line: one run, a load, a sweep, the exporter, or reading saved evidence.

``main()`` turns expected failures into one line and exit status 2, and
every other path into evidence on disk and a summary on stdout.
"""
import dataclasses
import itertools
import math
import os
import signal
import sys
import time

from ._limits import _count, _failure, Interrupted, UsageError
from ._json import _json_text
from ._reader import Capture
from ._request import _DEFAULT_URL, _models_request, _positive_finite, PreparedRequest
from ._exchange import Cancel
from ._failures import _interrupted_before_sending
from ._record import _failed_record
from ._transport import run
from ._plan import _LoadCheck, _planned_steps, _shard_runs
from ._load import LoadSettings, run_load, _scheduled_runs
from ._gates import _default_gates, _evaluate_gates, _gates_held, _parse_gates, _SCHEDULE_FIELDS
from ._summary import _parse_slos, _saturation_step, Summary, _summary_table
from ._comparison import _compare_loads, _comparison_markdown, _LoadHeader, _loads_differ, _settings_differ
from ._report import Report
from ._evidence import (
    _check_sources, _default_signals, _EvidenceFiles, _ignore_signals, iter_records, _load_records, _not_a_load,
    _reserve_output, _save_capture, _SIGNAL_EXIT, _summary_csv, summarize, _write_record, _write_report)
from ._args import (
    _checked_line, _Fixture, _given_flags, _in_flag_terms, _parser, _READING_FLAGS, _requests_from_args,
    _served_model, _terminate, _unchecked_line, _unset_key_note, _warmup)
from ._workload_flags import _check_workload_flags
from ._views import _compare_table, _LiveView, _LoadView, _say_lost
from ._workloads_cli import _plan_workload, _synthetic_requests, _workload_blocks, _workload_load
from ._server_metrics import _metrics_lines, _metrics_settings, _saved_metrics, _Scraper
from ._exporter_cli import _exporter_command


def _reserve_files(args) -> tuple[int, int | None]:
    """Create the output (and capture) file before anything is sent; undo the first if the second fails.

    From here until the record is written, SIGINT and SIGTERM are ignored, so that a reserved file
    can never be left empty."""
    if args.capture is not None and os.path.abspath(args.capture) == os.path.abspath(args.output):
        raise UsageError('--capture and --output must be different files')
    _ignore_signals()
    fd = _reserve_output(args.output)
    if args.capture is None:
        return fd, None
    try:
        return fd, _reserve_output(args.capture)
    except UsageError:
        os.close(fd)
        os.unlink(args.output)
        raise


def _run_command(args, request: PreparedRequest, fd: int, capture_fd: int | None) -> tuple[dict, int]:
    """Run once and write the record (and capture) whatever happens; return the record and exit status.

    SIGINT and SIGTERM are ignored by the caller from before the output is
    reserved; they are handled again only inside the block that always writes it.
    """
    view = _LiveView(sys.stderr, args.quiet)
    on_text, on_reasoning, on_call = (view.text, view.reasoning, view.call) if view.live else (None, None, None)
    record, status = None, 1
    capture = Capture() if capture_fd is not None else None
    try:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, _terminate)
        view.start_waiting(request)
        record = run(request, on_text=on_text, on_reasoning=on_reasoning, on_call=on_call, capture=capture)
        status = 0 if record['ok'] else 1
    except Interrupted as exc:
        record = exc.record or _failed_record(request, _interrupted_before_sending(exc.signal_name))
        status = _SIGNAL_EXIT[exc.signal_name]
    except KeyboardInterrupt:
        record, status = _failed_record(request, _interrupted_before_sending('SIGINT')), 130
    finally:
        _ignore_signals()  # until the process ends: the record is written next, then reported
        if record is None:  # a bug in this client: still leave a valid record, then show the traceback
            record = _failed_record(request, _failure('client_error', 'the client failed before finishing its record'))
        if capture_fd is not None:
            kept = _save_capture(capture_fd, args.capture, capture, request.secrets())
            record = {**record, 'capture': {**(record['capture'] or {'bytes': 0, 'truncated': False}), 'file': kept}}
        _write_record(fd, record)
    view.verdict(record)
    return record, status


def _emit(text: str) -> None:
    """Print to stdout; if its reader has gone (a closed pipe), drop the rest quietly: the evidence is on disk."""
    try:
        print(text, flush=True)
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so that the exit's flush cannot fail


def _compare(args, prog: str, gates: tuple) -> int:
    if _holds_loads(args.compare):
        return _compare_two_loads(args, prog, gates)
    if args.fail_if or args.format != 'json' or args.slo or args.slo_target is not None or args.seed != 0:
        raise UsageError('--fail-if, --format, --slo, --slo-target and --seed compare two loads (JSON Lines files); '
                         'single records are only printed side by side')
    records = _load_records(args.compare, args.mixed_sources)
    differ = _settings_differ(records)
    if differ:
        print(f'{prog}: warning: the records differ in {", ".join(differ)}; compare only '
              'runs made with the same request settings and model', file=sys.stderr)
    _emit(_compare_table(args.compare, records))
    return 0


def _holds_loads(paths: list[str]) -> bool:
    """Whether a file among paths holds the records of a load (several, or one with its load's settings).
    Lines that are not JSON are passed over here: a load's cut line, or a file that holds no record at all."""
    for path in paths:
        reading = iter_records(path, [])
        found = list(itertools.islice(reading, 2))
        reading.close()
        if len(found) > 1 or any('load' in record for record in found):
            return True
    return False


def _compare_two_loads(args, prog: str, gates: tuple) -> int:
    """--compare BASE CANDIDATE of two loads: the comparison's JSON line (or Markdown table) on stdout,
    the exit status what the gates say (0 without --fail-if)."""
    if len(args.compare) != 2:
        one = f'; use --summary {args.compare[0]} to read one load' if len(args.compare) == 1 else ''
        raise UsageError(f'--compare of loads takes two files, BASE CANDIDATE, not {len(args.compare)}{one}')
    for path in args.compare:
        problem = _not_a_load(path)
        if problem:
            raise UsageError(f'--compare of two loads: {problem}; compare two loads, or two single runs\' records')
    slos = _parse_slos(args.slo) if args.slo else None
    headers = _LoadHeader(), _LoadHeader()
    summaries = [summarize([path], args.mixed_sources, slos=slos, slo_target=_slo_target(args), each=header.add)[0]
                 for path, header in zip(args.compare, headers)]
    _check_sources(summaries[0].seen['sources'] | summaries[1].seen['sources'], args.mixed_sources, 'compare')
    whole = [_reading_warnings(prog, summary, [path]) for summary, path in zip(summaries, args.compare)]  # as --summary
    differ = _loads_differ(*headers, ('slo',) * bool(args.slo) + ('slo_target',) * (args.slo_target is not None))
    if differ:
        print(f'{prog}: warning: the two loads differ in {", ".join(differ)}; a difference between them may come '
              'from that rather than from the server', file=sys.stderr)
    comparison = _compare_loads(*summaries, args.seed)
    comparison['gates'] = _evaluate_gates(gates, comparison)
    table = _comparison_markdown(comparison, tuple(os.path.basename(path) for path in args.compare))
    if args.format == 'markdown':
        _emit(table)
    else:
        if not args.quiet and sys.stderr.isatty():
            print(table, file=sys.stderr)
        _emit(_json_text(comparison))
    return 0 if _gates_held(comparison) and all(whole) else 1


def _summary_command(args, prog: str, gates: tuple) -> int:
    report_fd = _reserve_output(args.report) if args.report else None
    try:
        summary, report = summarize(args.summary, args.mixed_sources, report=report_fd is not None,
                                    slos=_parse_slos(args.slo) if args.slo else None,
                                    slo_target=_slo_target(args))
        metrics, drawing = _saved_metrics(args.summary) or (None, None)
    except UsageError:
        if report_fd is not None:  # nothing to draw: free the name again
            os.close(report_fd)
            os.unlink(args.report)
        raise
    result = {**summary.result(), **_workload_blocks(args.summary)}
    if metrics is not None:
        result['server_metrics'] = metrics
        if report is not None:
            report.drawn_on_timeline.append(drawing)
    result['gates'] = _evaluate_gates(gates or _default_gates(result), result)
    if report_fd is not None:
        _write_report(report_fd, report)
    whole = _reading_warnings(prog, summary, args.summary)
    person = not args.quiet and sys.stderr.isatty()
    if person:
        print('\n'.join([_summary_table(result)] + (_metrics_lines(metrics) if metrics else [])), file=sys.stderr)
    elif not result['runs']:
        print(f'{prog}: warning: no runs: {" and ".join(args.summary)} hold{"s" * (len(args.summary) == 1)} no record',
              file=sys.stderr)
    if args.format == 'csv':
        _emit(_summary_csv(result))
    else:
        _emit_summary(result, person, None)
    _say_written(args)
    return 0 if _gates_held(result) and whole else 1


_MAX_SKIPPED_SHOWN = 10  # lines of broken JSON --summary names one by one; it counts the rest


def _reading_warnings(prog: str, summary: Summary, paths: list[str]) -> bool:
    """What --summary says, and --compare of each load, of files that are not whole: each line of broken JSON
    left out (the first ones), and what their loads planned and has no record (a load interrupted, a file cut
    between lines, a lost worker: see _LoadCheck); whether they were whole (the exit status is 1 when not)."""
    for line in summary.skipped[:_MAX_SKIPPED_SHOWN]:
        print(f'{prog}: warning: {line}', file=sys.stderr)
    if summary.skipped:
        more = len(summary.skipped) - _MAX_SKIPPED_SHOWN
        print(f'{prog}: warning: ' + (f'and {_count(more, "more line")}; ' if more > 0 else '')
              + f'the summary counts the {_count(summary.runs, "other record")} ("skipped_lines": '
                f'{len(summary.skipped)})', file=sys.stderr)
    if summary.missing:  # a file cut by whole lines, or a load that lost runs: never a whole load's summary
        print(f'{prog}: warning: {" and ".join(paths)}: not every planned run has a record: '
              f'{"; ".join(summary.missing)}', file=sys.stderr)
    return not summary.skipped and not summary.missing


def _emit_summary(result: dict, person: bool, files: list[str] | None) -> None:
    """The summary's JSON line on stdout, unless stdout and stderr are both a terminal where a person
    reads the table instead (the line wraps to a screenful): then a line that says how to get it (from
    the load's files, when they are not being read already)."""
    if person and sys.stdout.isatty():
        later = f'; or run --summary {" ".join(files)}' if files else ''
        print(f'(the JSON summary goes to stdout when it is redirected{later})', file=sys.stderr)
    else:
        _emit(_json_text(result))


def _say_written(args) -> None:
    """Where the report went, unless --quiet."""
    if args.report is not None and not args.quiet:
        print(f'report written to {args.report}', file=sys.stderr)


def _load_settings(args) -> list[LoadSettings] | None:
    """The load the command line asks for, as its steps (one, or one per rate of --rates), or None for a
    single run as before (--runs 1, no load flags)."""
    rates = _rates(args.rates) if args.rates is not None else None
    if args.concurrencies is not None:
        return _concurrency_steps(args)
    if args.find_capacity is not None:
        return _CapacitySearch(args)
    if rates is not None and args.rate is not None:
        raise UsageError('--rates runs one step per rate: it replaces --rate')
    if args.duration is not None and args.runs is not None:
        raise UsageError('--duration bounds a load by time: it replaces --runs')
    if rates is not None and args.duration is None:
        raise UsageError('--rates needs --duration: how many seconds each step runs')
    if args.duration is not None and args.rate is None and rates is None:
        raise UsageError('--duration bounds an open loop: give it --rate or --rates')
    runs = 1 if args.runs is None else args.runs
    if args.keep_alive and runs < 2 and args.duration is None:
        raise UsageError('--keep-alive needs --runs of 2 or more: one run uses one connection')
    slos, target = _parse_slos(args.slo or []), _slo_target(args)
    warmup_runs, warmup_s = _warmup(args.warmup)
    scheduled = [name for name, _ in slos if name in _SCHEDULE_FIELDS]
    if scheduled and args.rate is None and rates is None:
        raise UsageError(f'--slo {scheduled[0]} counts from an open loop\'s schedule: give --rate or --rates (a '
                         'closed loop sends each run when a slot frees, and has no schedule)')
    if runs == 1 and args.duration is None and args.concurrency is None and args.rate is None and args.prompts is None:
        return None  # one run: _FLAG_TABLE has refused the flags of a load already
    processes = 1 if args.processes is None else args.processes
    if args.duration is None:
        if warmup_runs and warmup_runs >= runs:
            raise UsageError(f'--warmup {args.warmup} leaves no run of the {runs} to summarise: the warm-up runs '
                             'are the first of --runs')
        return [LoadSettings(runs, args.concurrency, args.rate, args.arrivals, args.seed, args.keep_alive,
                             slos=slos, slo_target=target, processes=processes, warmup_runs=warmup_runs,
                             warmup_s=warmup_s)]
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
    return [dataclasses.replace(step, warmup_runs=warmup_runs, warmup_s=warmup_s) for step in steps]


class _CapacitySearch:
    """--find-capacity LO:HI: open-loop probes of --duration seconds, bisecting on the rate. A probe
    passes when it is under capacity as a sweep's step is (attainment at the target, runs started on
    time); LO is probed first (failing it, the capacity is below LO), then HI (passing it, above HI),
    then the middle of the bracket until the bracket is within TOLERANCE of its top (_next_probe)."""

    TOLERANCE = 0.05

    def __init__(self, args) -> None:
        for flag, given in (('--rate', args.rate), ('--rates', args.rates), ('--runs', args.runs)):
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
        fewest = _scheduled_runs(self.low, args.arrivals, args.seed, args.duration)  # more runs at a higher rate
        if self.warmup[0] and self.warmup[0] >= fewest:
            raise UsageError(f'--warmup {args.warmup} leaves no run to summarise: a probe at {self.low:g} runs/s '
                             f'for {args.duration:g} s schedules {fewest}')

    def probe(self, number: int, rate: float) -> LoadSettings:
        args = self.args
        return LoadSettings(_scheduled_runs(rate, args.arrivals, args.seed, args.duration), args.concurrency, rate,
                            args.arrivals, args.seed, args.keep_alive, args.duration, number, self.slos,
                            self.slo_target, self.processes, *self.warmup, search=(self.low, self.high))

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


def _concurrency_steps(args) -> list[LoadSettings]:
    """--concurrencies C1,C2,...: one closed-loop step of --runs runs per concurrency, ascending."""
    for flag, given in (('--rate', args.rate), ('--rates', args.rates), ('--duration', args.duration),
                        ('--concurrency', args.concurrency), ('--find-capacity', args.find_capacity)):
        if given is not None:
            raise UsageError(f'--concurrencies runs closed-loop steps of --runs runs, one per concurrency: it does '
                             f'not go with {flag}')
    if args.runs is None:
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
    if warmup_runs >= args.runs:
        raise UsageError(f'--warmup {args.warmup} leaves no run of the {args.runs} of a step to summarise')
    return [LoadSettings(args.runs, level, None, args.arrivals, args.seed, args.keep_alive, None, number, slos, target,
                         1 if args.processes is None else args.processes, warmup_runs, warmup_s)
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


def _reserve_beside(path: str | None, flag: str, reserved: list[tuple[int, str]]) -> int | None:
    """Create the file of flag (--report, --csv) beside the files reserved already; if that fails, undo
    those too. Adds it to reserved."""
    if path is None:
        return None
    if any(os.path.abspath(path) == os.path.abspath(other) for _, other in reserved):
        error: UsageError | None = UsageError(f'{flag} must be a file of its own, not one of --output, --report '
                                              'and --csv')
    else:
        try:
            reserved.append((_reserve_output(path), path))
            return reserved[-1][0]
        except UsageError as exc:
            error = exc
    for fd, other in reserved:
        os.close(fd)
        os.unlink(other)
    raise error


def _run_load(args, requests: list[PreparedRequest], steps: list[LoadSettings], fd: int, report_fd: int | None,
              prog: str, gates: tuple, csv_fd: int | None, scraper: _Scraper | None = None) -> int:
    """Run the load, its steps one after another, appending each record to the reserved JSON Lines file
    as its run ends; print the summary (and write the report); return the exit status. SIGINT and
    SIGTERM cancel the load: no new run or step starts, the runs in flight end as interrupted and keep
    their records; a second signal changes nothing."""
    first = _first_step(steps)
    summary, cancel = Summary(first.slos, first.slo_target), Cancel()
    report = Report(summary) if report_fd is not None else None
    files = _EvidenceFiles(fd, args.output, csv_fd, args.csv, cancel)
    searching = isinstance(steps, _CapacitySearch)
    view = _LoadView(sys.stderr, args.quiet,
                     None if searching else sum(_shard_runs(step.runs, step.shard) for step in steps))
    statuses: set = set()  # the HTTP statuses the runs got
    loads = _LoadCheck()   # what each load (step) planned, against the records it wrote

    def on_record(record: dict) -> None:
        statuses.add((record['http'] or {}).get('status'))
        loads.add(record)
        files.write(record)
        summary.add(record)
        if report is not None:
            report.add(record)
        view.record(record, summary)

    def on_signal(signum, frame) -> None:
        cancel.cancel(signal.Signals(signum).name)
    try:
        signal.signal(signal.SIGINT, on_signal)
        signal.signal(signal.SIGTERM, on_signal)
        for settings in steps.probes(summary) if searching else steps:
            if cancel.reason is not None:
                break
            if scraper is not None:
                scraper.begin(settings.step)
            run_load(requests, settings, on_record, cancel, scraper and scraper.started)
            if scraper is not None:
                scraper.end()
    finally:
        files.close()
    metrics, drawing = scraper.close() if scraper is not None else (None, None)
    if report is not None:
        if drawing is not None:
            report.drawn_on_timeline.append(drawing)
        _write_report(report_fd, report)
    _ignore_signals()  # the records are on disk: what is left is to report them
    result = summary.result()
    if metrics is not None:
        result['server_metrics'] = metrics
    result['gates'] = _evaluate_gates(gates or _default_gates(result), result)
    view.clear()
    view.finish(result)
    if scraper is not None and not args.quiet and (view.live or result['server_metrics']['failed']):
        print('\n'.join(_metrics_lines(result['server_metrics'])), file=sys.stderr)
    _emit_summary(result, view.live, [args.output])
    _say_written(args)
    unset_key = _unset_key_note(401 if 401 in statuses else None)
    if unset_key and not args.quiet:
        print(f'{prog}: note: {unset_key}', file=sys.stderr)
    if files.failed:
        path, exc = files.failed
        print(f'{prog}: error: cannot write {path}: {exc.strerror or exc}', file=sys.stderr)
        return 2
    if cancel.reason in _SIGNAL_EXIT:
        return _SIGNAL_EXIT[cancel.reason]
    lost = _say_lost(prog, loads)
    return 0 if _gates_held(result) and not lost else 1


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


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    fixture = None
    try:
        try:
            if args.exporter is not None or args.targets is not None:
                return _exporter_command(args, parser)
            if args.compare and args.summary:
                raise UsageError('--compare and --summary exclude each other: compare single records side '
                                 'by side, or summarise loads')
            gates = _parse_gates(args.fail_if) if args.fail_if else ()  # none: each summary's default gates
            if any(gate.compares for gate in gates) and not args.compare:
                raise UsageError(f'--fail-if {next(gate.text for gate in gates if gate.compares)!r}: a delta. '
                                 'figure compares two loads: give --compare BASE CANDIDATE')
            if args.format == 'markdown' and not args.compare:
                raise UsageError('--format markdown is for --compare of two loads')
            if args.format == 'csv' and not args.summary:
                raise UsageError('--format csv is for --summary FILE...; a load writes its rows with --csv FILE')
            command = 'compare' if args.compare else 'summary' if args.summary else None
            if command is not None:
                extra = _given_flags(parser, args, _READING_FLAGS[command])
                if extra:
                    raise UsageError(f'--{command} only reads saved evidence; {", ".join(extra)} '
                                     f'{"is" if len(extra) == 1 else "are"} for runs that send requests')
                return (_compare(args, parser.prog, gates) if args.compare
                        else _summary_command(args, parser.prog, gates))
            if args.output is None:
                raise UsageError('--output is required')
            if args.output == '-':
                raise UsageError('--output - is not supported: stdout carries the summary line; '
                                 'give the evidence a file name')
            _check_workload_flags(parser, args, sys.argv[1:] if argv is None else argv)  # refused before anything
            workload_flag = args.sessions is not None or args.trace is not None
            steps = None if workload_flag else _planned_steps(args, _repeated(args, _load_settings(args)), time.time())
            if workload_flag:
                _slo_target(args)  # checked as a load's is
            if args.fixture is not None:
                if args.url is not None:
                    raise UsageError('--fixture and --url exclude each other')
                fixture = _Fixture(args.fixture, args.fixture_profile, args.api or 'chat', args.seed,
                                   own_process=steps is not None and _first_step(steps).processes > 1)
            url = fixture.url if fixture else args.url or _DEFAULT_URL
            workload = _plan_workload(args, url)
            requests = workload.requests if workload is not None else \
                _synthetic_requests(args, url, sum(step.runs for step in steps) if isinstance(steps, list) else 1) or \
                _requests_from_args(args, url, served_model=_served_model)
            metrics = _metrics_settings(args, steps or workload, requests[0])  # a load's steps, or the workload
            fd, capture_fd = _reserve_files(args)
            reserved = [(fd, args.output)]
            report_fd = _reserve_beside(args.report, '--report', reserved)
            csv_fd = _reserve_beside(args.csv, '--csv', reserved)
            metrics_fd = _reserve_beside(metrics and metrics['file'], '--server-metrics', reserved)
        except (UsageError, ValueError) as exc:
            _default_signals()
            message = str(exc) if isinstance(exc, UsageError) else _in_flag_terms(str(exc))
            print(f'{parser.prog}: error: {message}', file=sys.stderr)
            return 2
        if not args.quiet and args.model is None and fixture is None:
            print(f'{parser.prog}: note: model {requests[0].model}, the one GET {_models_request(requests[0]).url} '
                  'lists', file=sys.stderr)
        if not args.quiet and requests[0].spec.unchecked():
            print(f'{parser.prog}: note: {_unchecked_line(requests[0].spec)}', file=sys.stderr)
        if workload is not None:
            return _workload_load(args, workload, fd, report_fd, parser.prog, gates, csv_fd,
                                  _Scraper(metrics, metrics_fd) if metrics else None)
        if steps is not None:
            return _run_load(args, requests, steps, fd, report_fd, parser.prog, gates, csv_fd,
                             _Scraper(metrics, metrics_fd) if metrics else None)
        record, status = _run_command(args, requests[0], fd, capture_fd)
    finally:
        if fixture is not None:
            fixture.close()
    checked = _checked_line(requests[0].spec, record)
    if checked and not args.quiet:
        print(f'{parser.prog}: {checked}', file=sys.stderr)
    unset_key = _unset_key_note((record['http'] or {}).get('status'))
    if unset_key and not args.quiet:
        print(f'{parser.prog}: note: {unset_key}', file=sys.stderr)
    summary = {key: record[key] for key in ('ok', 'error_layer', 'error_kind', 'api', 'first_text_ms', 'duration_ms',
                                            'finish_reason', 'response_status', 'error')}
    _emit(_json_text(summary))
    return status
