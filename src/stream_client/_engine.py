"""The engine under every workload: its steps run one after another, and observers watch its records.

A ``_Workload`` is what a load command runs, whichever it is (prompts, --sessions, --trace): its prepared
requests, its steps (the LoadSettings of each pass, or the probes of a capacity search: see _steps), and
``run(settings, on_record, cancel, on_started)``, which runs one step. ``_drive()`` runs the steps in turn
and hands each record, as its run ends, to every observer in turn: the evidence file and its --csv row, the
plan check, the summary and the workload's block, the report, the terminal's view, and any the caller adds.
SIGINT and SIGTERM cancel: nothing more starts, the runs in flight end as interrupted and keep their
records. Then the summary, its gates and the exit status, the same way for every workload.
"""
import signal
import sys
import typing

from ._exchange import Cancel
from ._plan import _LoadCheck, _shard_runs
from ._gates import _default_gates, _evaluate_gates, _gates_held
from ._summary import Summary
from ._report import Report
from ._session_summary import _SessionRows
from ._evidence import _EvidenceFiles, _ignore_signals, _SIGNAL_EXIT, _write_report
from ._server_metrics import _metrics_lines, _Scraper
from ._args import _unset_key_note
from ._steps import _CapacitySearch, _first_step
from ._views import _emit_summary, _LoadView, _say_lost, _say_written


class _Workload(typing.NamedTuple):
    """A workload read and prepared: its requests (the first one's settings stand for all), its steps,
    how to run one step (run(settings, on_record, cancel, on_started, on_run)), and for --sessions and --trace the
    block its summary adds (block() makes a _SessionSummary or a _TraceSummary) under its name."""

    requests: list
    steps: typing.Any  # list[LoadSettings] or a _CapacitySearch
    run: typing.Callable
    block: typing.Callable | None = None
    name: str | None = None


class _WorkloadReport(Report):
    """The load's page, and for sessions a row of turns per session after the timeline."""

    def __init__(self, summary: Summary) -> None:
        super().__init__(summary)
        self.sessions = _SessionRows()

    def add(self, record: dict) -> None:
        super().add(record)
        self.sessions.add(record)

    def html(self) -> str:
        page = super().html()
        return page if not self.sessions.rows else page.replace('</body></html>\n', self.sessions.html()
                                                                  + '\n</body></html>\n')


def _planned_runs(workload: _Workload) -> int | None:
    """The runs the view counts towards: every step's share, or None when not known ahead (a search chooses
    its probes as it goes; a session's runs depend on its answers)."""
    if isinstance(workload.steps, _CapacitySearch) or workload.name == 'sessions':
        return None
    return sum(_shard_runs(step.runs, step.shard) for step in workload.steps)


def _drive(args, workload: _Workload, fd: int, report_fd: int | None, prog: str, gates: tuple = (),
           csv_fd: int | None = None, scraper: _Scraper | None = None, observers: tuple = (), on_run=None) -> int:
    """Run the workload's steps, appending each record to the reserved JSON Lines file as its run ends (and
    its row to --csv), with --server-metrics scraped meanwhile; print the summary (with the workload's block
    and the gates) and write the report; return the exit status: 0 when every gate held (those of --fail-if;
    without, the default ones) and every planned run has its record; 1 otherwise; 2 when the evidence could
    not be written; a signal's status when one cancelled. observers: more callables given each record;
    on_run(): called as each run starts, from its worker thread (runs in --processes workers excepted)."""
    steps = workload.steps
    first = _first_step(steps)
    summary, cancel = Summary(first.slos, first.slo_target), Cancel()
    block = workload.block() if workload.block is not None else None
    report = _WorkloadReport(summary) if report_fd is not None else None
    files = _EvidenceFiles(fd, args.output, csv_fd, args.csv, cancel)
    view = _LoadView(sys.stderr, args.quiet, _planned_runs(workload), summary)
    statuses: set = set()  # the HTTP statuses the runs got
    loads = _LoadCheck()   # what each load (step) planned, against the records it wrote
    watching = [files.write, loads.add, summary.add, *([block.add] if block is not None else []),
                *([report.add] if report is not None else []), view.add, *observers,
                lambda record: statuses.add((record['http'] or {}).get('status'))]

    def on_record(record: dict) -> None:
        for observer in watching:
            observer(record)

    def on_signal(signum, frame) -> None:
        cancel.cancel(signal.Signals(signum).name)
    try:
        signal.signal(signal.SIGINT, on_signal)
        signal.signal(signal.SIGTERM, on_signal)
        for settings in steps.probes(summary) if isinstance(steps, _CapacitySearch) else steps:
            if cancel.reason is not None:
                break
            if scraper is not None:
                scraper.begin(settings.step)
            workload.run(settings, on_record, cancel, scraper and scraper.started, on_run)
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
    if block is not None:
        result[workload.name] = block.result()
    if metrics is not None:
        result['server_metrics'] = metrics
    result['gates'] = _evaluate_gates(gates or _default_gates(result), result)
    view.clear()
    view.finish(result, block.table() if block is not None else None)
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
