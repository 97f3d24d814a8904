"""The command line: one run, a load, a sweep, the exporter, or reading saved evidence.

``main()`` turns expected failures into one line and exit status 2, and
every other path into evidence on disk and a summary on stdout.
"""
import contextlib
import itertools
import os
import signal
import sys
import time

from ._limits import _count, _failure, Interrupted, UsageError
from ._json import _json_text
from ._reader import Capture
from ._request import _DEFAULT_URL, _models_request, PreparedRequest
from ._exchange import Cancel
from ._failures import _interrupted_before_sending
from ._record import _failed_record
from ._transport import run
from ._plan import _planned_steps
from ._load import LoadSettings, run_load
from ._gates import _default_gates, _evaluate_gates, _gates_held, _parse_gates
from ._summary import _parse_slos, Summary, _summary_table
from ._comparison import _compare_loads, _comparison_markdown, _LoadHeader, _loads_differ, _settings_differ
from ._benchmark_report import _llm_d_report, _ReportFacts
from ._evidence import (
    _check_sources, _default_signals, _ignore_signals, iter_records, _load_records, _not_a_load,
    _reserve_output, _save_capture, _SIGNAL_EXIT, _summary_csv, summarize, _write_record, _write_report)
from ._args import (
    _checked_line, _Fixture, _given_flags, _in_flag_terms, _parser, _READING_FLAGS, _requests_from_args,
    _served_model, _terminate, _unchecked_line, _unset_key_note)
from ._workload_flags import _check_workload_flags
from ._steps import _first_step, _load_settings, _repeated, _slo_target
from ._views import _compare_table, _emit, _emit_summary, _LiveView, _say_written
from ._engine import _drive, _Workload
from ._session_summary import _parse_session_slos
from ._workloads_cli import _plan_workload, _synthetic_requests, _workload_blocks
from ._server_metrics import _metrics_lines, _metrics_settings, _saved_metrics, _Scraper
from ._exporter_cli import _exporter_command
from ._live_metrics import _live_figures


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
    facts = _ReportFacts() if args.format == 'benchmark-report' else None
    try:
        summary, report = summarize(args.summary, args.mixed_sources, report=report_fd is not None,
                                    slos=_parse_slos(args.slo) if args.slo else None,
                                    slo_target=_slo_target(args), each=facts and facts.add)
        metrics, drawing = _saved_metrics(args.summary) or (None, None)
    except UsageError:
        if report_fd is not None:  # nothing to draw: free the name again
            os.close(report_fd)
            os.unlink(args.report)
        raise
    result = {**summary.result(), **_workload_blocks(args.summary, _parse_slos(args.slo) if args.slo else None,
                                                     _parse_session_slos(args.session_slo) if args.session_slo
                                                     else None)}
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
    elif facts is not None:
        _emit(_json_text(_llm_d_report(summary, facts), indent=2))
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


def _prompts_workload(requests: list[PreparedRequest], steps) -> _Workload:
    """A load of prompts as the engine's workload: run i sends requests[i % len(requests)]."""
    def run(settings: LoadSettings, on_record, cancel: Cancel, on_started=None, on_run=None) -> None:
        run_load(requests, settings, on_record, cancel, on_started, on_run=on_run)
    return _Workload(requests, steps, run)


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
            if args.format == 'benchmark-report' and not args.summary:
                raise UsageError('--format benchmark-report is for --summary FILE...: the report of a load is '
                                 'written from its evidence file once it has ended')
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
            if args.fixture is not None:
                if args.url is not None:
                    raise UsageError('--fixture and --url exclude each other')
                fixture = _Fixture(args.fixture, args.fixture_profile, args.api or 'chat', args.seed,
                                   own_process=(args.processes or 1) > 1)  # a forked worker cannot serve it
            url = fixture.url if fixture else args.url or _DEFAULT_URL
            workload = _plan_workload(args, url)
            requests = workload.requests if workload is not None else \
                _synthetic_requests(args, url, sum(step.runs for step in steps) if isinstance(steps, list) else 1) or \
                _requests_from_args(args, url, served_model=_served_model)
            if workload is None and steps is not None:
                workload = _prompts_workload(requests, steps)
            metrics = _metrics_settings(args, workload, requests[0])  # None for one run
            figures = _live_figures(args, workload and _first_step(workload.steps).slos)  # binds --metrics-port
            fd, capture_fd = _reserve_files(args)
            reserved = [(fd, args.output)]
            report_fd = _reserve_beside(args.report, '--report', reserved)
            csv_fd = _reserve_beside(args.csv, '--csv', reserved)
            metrics_fd = _reserve_beside(metrics and metrics['file'], '--server-metrics', reserved)
            otlp_fd = _reserve_beside(args.otlp_json, '--otlp-json', reserved)
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
            with figures.serving(otlp_fd, parser.prog, args.quiet) if figures else contextlib.nullcontext() as live:
                return _drive(args, workload, fd, report_fd, parser.prog, gates, csv_fd,
                              _Scraper(metrics, metrics_fd) if metrics else None,
                              (live.add,) if live else (), live and live.started)
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
