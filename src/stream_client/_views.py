"""What the terminal shows while runs go on and once they end.

``_LiveView`` shows one answer as it arrives, ``_LoadView`` a load's progress;
the verdict and comparison lines are written here.
"""
import os
import sys
import threading
import time

from ._limits import _count
from ._json import _json_text
from ._request import PreparedRequest
from ._plan import _LoadCheck
from ._gates import _gate_lines
from ._summary import Summary, _summary_table


class _LiveView:
    """What stderr shows during a run: on a terminal the answer as it arrives
    (reasoning dimmed), then a one-line verdict; elsewhere only a failure."""

    DIM, RESET = '\x1b[2m', '\x1b[0m'
    WAIT_NOTICE_S = 3.0  # seconds without anything to show before a run says what it is waiting for

    def __init__(self, out, quiet: bool) -> None:
        self.out = out
        self.quiet = quiet
        self.live = not quiet and out.isatty()
        self.color = self.live and 'NO_COLOR' not in os.environ
        self.showing = None  # 'reasoning' or 'text' once something was written
        self._lock = threading.Lock()  # the wait notice is written from a timer's thread
        self._timer: threading.Timer | None = None

    def _write(self, text: str) -> None:
        with self._lock:
            self.out.write(text)
            self.out.flush()

    def start_waiting(self, request: PreparedRequest) -> None:
        """On a terminal: if nothing has been shown after WAIT_NOTICE_S, say what the run waits for."""
        if self.live:
            self._timer = threading.Timer(self.WAIT_NOTICE_S, self.wait_notice, (request,))
            self._timer.daemon = True
            self._timer.start()

    def wait_notice(self, request: PreparedRequest) -> None:
        with self._lock:
            if self.showing is None:
                self.out.write(f'waiting {self.WAIT_NOTICE_S:g} s so far for the answer from {request.address}; '
                               f'the run ends after --idle {request.idle:g} s without a byte or at --deadline '
                               f'{request.deadline:g} s; Ctrl+C stops it and keeps the record\n')
                self.out.flush()

    def stop_waiting(self) -> None:
        if self._timer is not None:
            self._timer.cancel()

    def reasoning(self, text: str) -> None:
        if self.showing != 'reasoning':
            self.showing = 'reasoning'
            text = 'reasoning: ' + text
        self._write(f'{self.DIM}{text}{self.RESET}' if self.color else text)

    def text(self, text: str) -> None:
        if self.showing == 'reasoning':
            self._write('\n')
        self.showing = 'text'
        self._write(text)

    def call(self, piece: str) -> None:
        """A piece of a tool call: 'get_weather(' as it opens, then its arguments as they arrive."""
        if self.showing and self.showing != 'call':
            self._write('\n')
        self.showing = 'call'
        self._write(piece)

    def verdict(self, record: dict) -> None:
        self.stop_waiting()
        if self.quiet or (record['ok'] and not self.live):
            return
        if self.showing == 'call':
            self._write(')')
        if self.showing:
            self._write('\n')
        self._write(_verdict_line(record) + '\n')


def _verdict_line(record: dict) -> str:
    """The run at a glance: 'ok: 2 content events, ...' or 'NOT OK [layer]: what went wrong', the server's
    dialect when one applied, and what the cross-check found, when there was one."""
    cross = _cross_check_line(record.get('cross_check'))
    if record.get('dialect') not in (None, 'strict'):  # judged by a server's dialect: said, never silent
        cross = f'; dialect {record["dialect"]} (docs/dialects.md)' + cross
    if record['ok']:
        return (f'ok: {_count(record["content_events"], "content event")}, '
                f'first text {record["first_text_ms"]:.0f} ms, done {record["duration_ms"]:.0f} ms' + cross)
    layer = record['error_layer']
    return f'NOT OK [{layer}]: {record["error"].removeprefix(layer + ": ")}' + ('' if layer == 'cross-check' else cross)


def _cross_check_line(cross: dict | None) -> str:
    """'; cross-check: the same answer, 57 equal token ids' and the like, or '' without a cross-check."""
    if not cross:
        return ''
    if cross['same'] is None:
        return f'; cross-check: no unstreamed answer ({cross["unstreamed_problem"]})'
    if cross['comparable'] is False:
        return f'; cross-check: not comparable, the token ids diverged at token {cross["diverged_at_token"]}'
    ids = f', {_count(cross["token_ids"]["streamed"], "equal token id")}' if cross['comparable'] else \
        ', no token ids to compare'
    return f'; cross-check: {"the same answer" if cross["same"] else cross["differences"][0]}{ids}'


_COMPARE_COLUMNS = (('file', None), ('source', 'source'), ('model', 'model'), ('ok', 'ok'),
                   ('layer', 'error_layer'), ('headers ms', 'headers_ms'), ('1st event ms', 'first_event_ms'),
                   ('1st text ms', 'first_text_ms'), ('duration ms', 'duration_ms'),
                   ('events', 'content_events'), ('tokens', 'completion_tokens'), ('text reads', 'content_reads'),
                   ('buffered', 'buffered_delivery'))


def _compare_table(paths: list[str], records: list[dict]) -> str:
    """One line per field and one column per record, so that a few records fit a terminal."""
    rows = [[name] + [os.path.basename(path) if key is None else _cell(record.get(key))
                      for path, record in zip(paths, records)] for name, key in _COMPARE_COLUMNS]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return '\n'.join('  '.join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows)


def _cell(value) -> str:
    if value is None:
        return '-'
    if isinstance(value, bool):
        return 'yes' if value else 'no'
    if isinstance(value, float):
        return f'{value:.1f}'
    return str(value)


class _LoadView:
    """What stderr shows during a load (of prompts, sessions or a trace): on a terminal one status line
    updated in place, then the summary table; elsewhere one line per run that is not ok, and at the end one
    per gate that failed. The workload's own block (sessions, trace) is shown after the table, and alone
    elsewhere. --quiet shows nothing. An observer of the engine: add() is called for each record."""

    def __init__(self, out, quiet: bool, runs: int | None, summary: Summary) -> None:
        self.out, self.quiet, self.runs, self.summary = out, quiet, runs, summary
        self.live = not quiet and out.isatty()
        self.started = time.monotonic()
        self.shown = 0.0
        self.ended = 0  # runs ended, warm-up runs too

    def add(self, record: dict) -> None:
        """Called for each record as its run ends (one call at a time), after the summary's add()."""
        self.ended += 1
        if self.live:
            now = time.monotonic()
            if now - self.shown >= 0.1 or self.ended == self.runs:
                self.shown = now
                summary = self.summary
                p50 = summary.p50_first_text()
                planned = '' if self.runs is None else f'/{self.runs}'
                self.out.write(f'\r\x1b[Kruns {self.ended}{planned}  ok {summary.ok}  '
                               f'not ok {summary.runs - summary.ok}  {now - self.started:.1f} s  p50 first text '
                               + ('-' if p50 is None else f'{p50:.0f} ms'))
                self.out.flush()
        elif not self.quiet and not record['ok']:
            self.out.write(f'{_run_where(record)}: {_verdict_line(record)}\n')
            self.out.flush()

    def clear(self) -> None:
        """Clear the status line, so that what goes to stdout next (on the same terminal) starts a line."""
        if self.live:
            self.out.write('\r\x1b[K')
            self.out.flush()

    def finish(self, result: dict, block: str | None = None) -> None:
        """The summary table on a terminal; elsewhere (a CI log) the line of each gate that failed. block:
        the workload's own lines (sessions, trace), shown after the table, or alone elsewhere."""
        lines = [_summary_table(result)] if self.live else []
        if not self.quiet:
            lines += [block] if block else []
        if not self.live and not self.quiet:
            lines += [line for line, gate in zip(_gate_lines(result['gates']), result['gates']) if not gate['held']]
        self.out.write(''.join(line + '\n' for line in lines))
        self.out.flush()


def _run_where(record: dict) -> str:
    """Which run of a workload a record is, in its own terms: 'session S turn T round R', 'line L', 'run N'."""
    if 'session' in record:
        return f'session {record["session"]} turn {record["turn"]} round {record["round"]}'
    if 'trace' in record:
        return f'line {record["trace"]["line"]}'
    return f'run {record["run"]}'


def _say_lost(prog: str, loads: _LoadCheck) -> bool:
    """Say in one line what a load that ran to its end has no record of (a worker process that died, a bug
    in this client), and whether it lacked anything: such a load is never ok (exit 1)."""
    missing = loads.missing()
    if missing:
        print(f'{prog}: warning: the load ran to its end, but not every planned run has a record: '
              f'{"; ".join(missing)}', file=sys.stderr)
    return bool(missing)


def _emit(text: str) -> None:
    """Print to stdout; if its reader has gone (a closed pipe), drop the rest quietly: the evidence is on disk."""
    try:
        print(text, flush=True)
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so that the exit's flush cannot fail


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
