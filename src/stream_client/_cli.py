"""The command line: one run, a load, a sweep, the exporter, or reading saved evidence.

``main()`` turns expected failures into one line and exit status 2, and
every other path into evidence on disk and a summary on stdout.
"""
import json
import math
import os
import signal
import sys

from ._limits import _failure, Interrupted, UsageError
from ._reader import Capture
from ._request import _DEFAULT_URL, _positive_finite, PreparedRequest
from ._exchange import Cancel
from ._verdict import _interrupted_before_sending
from ._record import _failed_record
from ._transport import run
from ._plan import _planned_steps, _shard_runs
from ._load import LoadSettings, run_load, _scheduled_runs
from ._summary import _parse_slos, Summary, _summary_table
from ._report import Report
from ._evidence import (
    _default_signals, _ignore_signals, _load_records, _reserve_output, _save_capture, _SIGNAL_EXIT, summarize,
    _write_record, _write_report)
from ._args import (
    _checked_line, _Fixture, _given_flags, _in_flag_terms, _parser, _READING_FLAGS, _requests_from_args, _terminate,
    _unchecked_line)
from ._views import _compare_table, _LiveView, _LoadView, _settings_differ
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


def _compare(args, prog: str) -> int:
    records = _load_records(args.compare, args.mixed_sources)
    differ = _settings_differ(records)
    if differ:
        print(f'{prog}: warning: the records differ in {", ".join(differ)}; compare only '
              'runs made with the same request settings and model', file=sys.stderr)
    _emit(_compare_table(args.compare, records))
    return 0


def _summary_command(args, prog: str) -> int:
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
    result = summary.result()
    if metrics is not None:
        result['server_metrics'] = metrics
        if report is not None:
            report.drawn_on_timeline.append(drawing)
    if report_fd is not None:
        _write_report(report_fd, report)
    person = not args.quiet and sys.stderr.isatty()
    if person:
        print('\n'.join([_summary_table(result)] + (_metrics_lines(metrics) if metrics else [])), file=sys.stderr)
    _emit_summary(result, person, None)
    _say_written(args)
    return 0 if result['runs'] and result['ok'] == result['runs'] else 1


def _emit_summary(result: dict, person: bool, files: list[str] | None) -> None:
    """The summary's JSON line on stdout, unless stdout and stderr are both a terminal where a person
    reads the table instead (the line wraps to a screenful): then a line that says how to get it (from
    the load's files, when they are not being read already)."""
    if person and sys.stdout.isatty():
        later = f'; or run --summary {" ".join(files)}' if files else ''
        print(f'(the JSON summary goes to stdout when it is redirected{later})', file=sys.stderr)
    else:
        _emit(json.dumps(result, ensure_ascii=False))


def _say_written(args) -> None:
    """Where the report went, unless --quiet."""
    if args.report is not None and not args.quiet:
        print(f'report written to {args.report}', file=sys.stderr)


def _load_settings(args) -> list[LoadSettings] | None:
    """The load the command line asks for, as its steps (one, or one per rate of --rates), or None for a
    single run as before (--runs 1, no load flags)."""
    rates = _rates(args.rates) if args.rates is not None else None
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
    if runs == 1 and args.duration is None and args.concurrency is None and args.rate is None and args.prompts is None:
        if slos or target is not None or args.processes is not None:
            raise UsageError('--slo, --slo-target and --processes are for a load: give --runs, --duration or --rates')
        return None
    processes = 1 if args.processes is None else args.processes
    if args.capture is not None:
        raise UsageError('--capture keeps the raw bytes of one run; it does not go with --runs, --concurrency, '
                         '--rate, --rates, --duration or --prompts')
    if args.duration is None:
        return [LoadSettings(runs, args.concurrency, args.rate, args.arrivals, args.seed, args.keep_alive,
                             slos=slos, slo_target=target, processes=processes)]
    if not _positive_finite(args.duration):
        raise UsageError(f'--duration must be a positive number of seconds, not {args.duration}')
    if not _positive_finite(rates[0] if rates else args.rate):
        raise UsageError(f'--rate must be a positive number of runs per second, not {args.rate}')
    return [LoadSettings(_scheduled_runs(rate, args.arrivals, args.seed, args.duration), args.concurrency, rate,
                         args.arrivals, args.seed, args.keep_alive, args.duration, number if rates else None,
                         slos, target, processes)
            for number, rate in enumerate(rates or [args.rate])]


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


def _reserve_report(args, output_fd: int) -> int | None:
    """Create the --report file beside the reserved output; if that fails, undo the output too."""
    if args.report is None:
        return None
    if os.path.abspath(args.report) == os.path.abspath(args.output):
        error: UsageError | None = UsageError('--report and --output must be different files')
    else:
        try:
            return _reserve_output(args.report)
        except UsageError as exc:
            error = exc
    os.close(output_fd)
    os.unlink(args.output)
    raise error


def _reserve_metrics(args, metrics: dict | None, output_fd: int, report_fd: int | None) -> int | None:
    """Create the --server-metrics file beside the reserved output; if that fails, undo the others too."""
    if metrics is None:
        return None
    try:
        return _reserve_output(metrics['file'])
    except UsageError:
        for fd, path in ((output_fd, args.output), (report_fd, args.report)):
            if fd is not None:
                os.close(fd)
                os.unlink(path)
        raise


def _run_load(args, requests: list[PreparedRequest], steps: list[LoadSettings], fd: int, report_fd: int | None,
              prog: str, scraper: _Scraper | None = None) -> int:
    """Run the load, its steps one after another, appending each record to the reserved JSON Lines file
    as its run ends; print the summary (and write the report); return the exit status. SIGINT and
    SIGTERM cancel the load: no new run or step starts, the runs in flight end as interrupted and keep
    their records; a second signal changes nothing."""
    summary, cancel = Summary(steps[0].slos, steps[0].slo_target), Cancel()
    report = Report(summary) if report_fd is not None else None
    view = _LoadView(sys.stderr, args.quiet, sum(_shard_runs(step.runs, step.shard) for step in steps))
    write_error: list[OSError] = []

    def on_record(record: dict) -> None:
        try:
            output.write(json.dumps(record, ensure_ascii=False) + '\n')
            output.flush()
        except OSError as exc:
            write_error.append(exc)
            cancel.cancel('a failed write to the evidence file')
        summary.add(record)
        if report is not None:
            report.add(record)
        view.record(record, summary)

    def on_signal(signum, frame) -> None:
        cancel.cancel(signal.Signals(signum).name)
    with os.fdopen(fd, 'w', encoding='utf-8') as output:
        signal.signal(signal.SIGINT, on_signal)
        signal.signal(signal.SIGTERM, on_signal)
        for settings in steps:
            if cancel.reason is None:
                if scraper is not None:
                    scraper.begin(settings.step)
                run_load(requests, settings, on_record, cancel, scraper and scraper.started)
                if scraper is not None:
                    scraper.end()
    metrics, drawing = scraper.close() if scraper is not None else (None, None)
    if report is not None:
        if drawing is not None:
            report.drawn_on_timeline.append(drawing)
        _write_report(report_fd, report)
    _ignore_signals()  # the records are on disk: what is left is to report them
    result = summary.result()
    if metrics is not None:
        result['server_metrics'] = metrics
    view.clear()
    view.finish(result)
    if scraper is not None and not args.quiet and (view.live or result['server_metrics']['failed']):
        print('\n'.join(_metrics_lines(result['server_metrics'])), file=sys.stderr)
    _emit_summary(result, view.live, [args.output])
    _say_written(args)
    if write_error:
        print(f'{prog}: error: cannot write {args.output}: {write_error[0].strerror or write_error[0]}',
              file=sys.stderr)
        return 2
    if cancel.reason in _SIGNAL_EXIT:
        return _SIGNAL_EXIT[cancel.reason]
    return 0 if result['ok'] == result['runs'] else 1


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
            command = 'compare' if args.compare else 'summary' if args.summary else None
            if command is not None:
                extra = _given_flags(parser, args, _READING_FLAGS[command])
                if extra:
                    raise UsageError(f'--{command} only reads saved evidence; {", ".join(extra)} '
                                     f'{"is" if len(extra) == 1 else "are"} for runs that send requests')
                return (_compare if args.compare else _summary_command)(args, parser.prog)
            if args.output is None:
                raise UsageError('--output is required')
            if args.output == '-':
                raise UsageError('--output - is not supported: stdout carries the summary line; '
                                 'give the evidence a file name')
            steps = _planned_steps(args, _load_settings(args))
            if args.report is not None and steps is None:
                raise UsageError('--report draws a load: give --runs (or --summary FILE... to draw saved runs)')
            if args.fixture is not None:
                if args.url is not None:
                    raise UsageError('--fixture and --url exclude each other')
                fixture = _Fixture(args.fixture, args.fixture_profile, args.api or 'chat', args.seed)
            requests = _requests_from_args(args, fixture.url if fixture else args.url or _DEFAULT_URL)
            metrics = _metrics_settings(args, steps, requests[0])
            fd, capture_fd = _reserve_files(args)
            report_fd = _reserve_report(args, fd)
            metrics_fd = _reserve_metrics(args, metrics, fd, report_fd)
        except (UsageError, ValueError) as exc:
            _default_signals()
            message = str(exc) if isinstance(exc, UsageError) else _in_flag_terms(str(exc))
            print(f'{parser.prog}: error: {message}', file=sys.stderr)
            return 2
        if not args.quiet and requests[0].spec.unchecked():
            print(f'{parser.prog}: note: {_unchecked_line(requests[0].spec)}', file=sys.stderr)
        if steps is not None:
            return _run_load(args, requests, steps, fd, report_fd, parser.prog,
                             _Scraper(metrics, metrics_fd) if metrics else None)
        record, status = _run_command(args, requests[0], fd, capture_fd)
    finally:
        if fixture is not None:
            fixture.close()
    checked = _checked_line(requests[0].spec, record)
    if checked and not args.quiet:
        print(f'{parser.prog}: {checked}', file=sys.stderr)
    summary = {key: record[key] for key in ('ok', 'error_layer', 'error_kind', 'api', 'first_text_ms', 'duration_ms',
                                            'finish_reason', 'response_status', 'error')}
    _emit(json.dumps(summary, ensure_ascii=False))
    return status
