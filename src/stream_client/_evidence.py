"""Evidence files: each created once and never overwritten, and read back.

``_reserve_output()`` creates a file before anything is sent; ``iter_records()``
and ``summarize()`` read saved records back. A signal never leaves a reserved
file without a valid record.
"""
import csv
import io
import itertools
import json
import math
import os
import re
import signal

from ._limits import UsageError
from ._json import _json_text, _seen
from ._reader import Capture
from ._plan import _LoadCheck, _ShardCheck
from ._summary import _from_schedule, Summary
from ._report import Report


def _reserve_output(path: str) -> int:
    """Create the evidence file exclusively (mode 0600) before anything is sent."""
    if not path:
        raise UsageError("cannot create '': the file name is empty")
    try:
        return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise UsageError(f'{path!r} already exists; evidence is never overwritten, choose a new file name') \
            from None
    except FileNotFoundError:
        raise UsageError(f'cannot create {path!r}: its directory does not exist') from None
    except OSError as exc:
        raise UsageError(f'cannot create {path!r}: {exc.strerror or exc}') from None


def _write_record(fd: int, record: dict) -> None:
    with os.fdopen(fd, 'w', encoding='utf-8') as output:
        output.write(_json_text(record, indent=2) + '\n')


def _save_capture(fd: int, path: str, capture: Capture, secrets: tuple[str, ...]) -> str | None:
    """Write the raw response to its reserved file and return the path; when nothing at all arrived,
    remove the empty file instead (so that the name is free again) and return None.

    The API key and proxy credentials are masked by asterisks of the same length, so the framing stays valid.
    """
    data = bytes(capture.data)
    if not data:
        os.close(fd)
        os.unlink(path)
        return None
    for secret in secrets:
        data = data.replace(secret.encode(), b'*' * len(secret.encode()))
    with os.fdopen(fd, 'wb') as output:
        output.write(data)
    return path


# The flat figures of a record, one CSV column each, by the record's names (load.* and http.status from
# their objects; the two schedule figures computed as the summary computes them).
_CSV_COLUMNS = ('run', 'ok', 'error_layer', 'error_kind', 'warmup', 'load.step', 'load.rate', 'load.concurrency',
                'started_at', 'offset_ms', 'scheduled_ms', 'queued_ms', 'http.status', 'headers_ms', 'first_event_ms',
                'first_text_ms', 'duration_ms', 'first_text_from_schedule_ms', 'duration_from_schedule_ms',
                'content_events', 'completion_tokens', 'mean_event_gap_ms', 'max_event_gap_ms', 'finish_reason',
                'api', 'model', 'source', 'error')


def _csv_row(record: dict) -> list:
    """A record's CSV row, in CSV_COLUMNS' order; a figure the record lacks is an empty cell."""
    flat = {**record, **_from_schedule(record),
            **{f'load.{key}': value for key, value in (record.get('load') or {}).items()},
            'http.status': (record.get('http') or {}).get('status')}
    return ['' if flat.get(column) is None else flat[column] for column in _CSV_COLUMNS]


class _CsvFile:
    """The --csv file of a load: its header, then a row per record, flushed as each run ends."""

    def __init__(self, fd: int) -> None:
        self.file = os.fdopen(fd, 'w', encoding='utf-8', newline='')
        self.writer = csv.writer(self.file)
        self.writer.writerow(_CSV_COLUMNS)

    def add(self, record: dict) -> None:
        self.writer.writerow(_csv_row(record))
        self.file.flush()

    def close(self) -> None:
        self.file.close()


class _EvidenceFiles:
    """What a load writes as each of its runs ends: the record, one JSON line of the reserved evidence file
    (fd, path), and its row of --csv when asked. A write that fails cancels the load, which ends with the
    records it has; ``failed`` keeps the first such file and why, for the load's last line (exit 2)."""

    def __init__(self, fd: int, path: str, csv_fd: int | None, csv_path: str | None, cancel) -> None:
        self.output, self.path = os.fdopen(fd, 'w', encoding='utf-8'), path
        self.table, self.csv_path = (_CsvFile(csv_fd) if csv_fd is not None else None), csv_path
        self.cancel = cancel
        self.failed: tuple[str, OSError] | None = None

    def write(self, record: dict) -> None:
        try:
            self.output.write(_json_text(record) + '\n')
            self.output.flush()
        except OSError as exc:
            self._fail(self.path, exc, 'the evidence file')
        if self.table is not None:
            try:
                self.table.add(record)
            except OSError as exc:
                self._fail(self.csv_path, exc, 'the --csv file')

    def _fail(self, path: str, exc: OSError, what: str) -> None:
        self.failed = self.failed or (path, exc)
        self.cancel.cancel(f'a failed write to {what}')

    def close(self) -> None:
        """Close both files; one that cannot be closed (its last bytes not written) fails as a write does."""
        for path, file in ((self.path, self.output), (self.csv_path, self.table)):
            try:
                if file is not None:
                    file.close()
            except OSError as exc:
                self.failed = self.failed or (path, exc)


def _summary_csv(result: dict) -> str:
    """The summary as CSV, figure,value: nested objects flattened to dotted names (latency_ms.first_text_ms.p99,
    not_ok_by_kind.KIND, gates.0.held), lists of names joined by spaces; null is an empty cell."""
    rows: list[tuple[str, object]] = []

    def flatten(prefix: str, value) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                flatten(f'{prefix}.{key}' if prefix else str(key), item)
        elif isinstance(value, list) and all(isinstance(item, dict) for item in value) and value:
            for number, item in enumerate(value):
                flatten(f'{prefix}.{number}', item)
        elif isinstance(value, list):
            rows.append((prefix, ' '.join('' if item is None else str(item) for item in value)))
        else:
            rows.append((prefix, '' if value is None else value))
    flatten('', result)
    text = io.StringIO()
    writer = csv.writer(text, lineterminator='\n')
    writer.writerow(('figure', 'value'))
    writer.writerows(rows)
    return text.getvalue().rstrip('\n')


def _write_report(fd: int, report: Report) -> None:
    with os.fdopen(fd, 'w', encoding='utf-8') as output:
        output.write(report.html())


def _is_record(value: object) -> bool:
    return isinstance(value, dict) and 'ok' in value and 'started_at' in value


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _integer(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _or_null(check):
    return lambda value: value is None or check(value)


_STAMP = re.compile(r'\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z')
# What --summary, --report and --compare read of a record: each field, what it must hold, and whether a record
# (an ok one, for OK_FIELDS) must have it. Checked before a record is counted, so that a record edited by hand or
# written by another tool stops the reading with its file, line and field named, not a traceback.
_NUMBER_OR_NULL = (_or_null(_number), 'a number or null')
_TEXT_OR_NULL = (_or_null(lambda value: isinstance(value, str)), 'a string or null')
_OBJECT_OR_NULL = (_or_null(lambda value: isinstance(value, dict)), 'an object or null')
_BOOLEAN_OR_NULL = (_or_null(lambda value: isinstance(value, bool)), 'true, false or null')
_RECORD_FIELDS = {
    'ok': ((lambda value: isinstance(value, bool)), 'true or false'),
    'started_at': ((lambda value: isinstance(value, str) and bool(_STAMP.fullmatch(value))),
                   'a UTC time such as "2026-12-01T10:00:00.000Z"'),
    'duration_ms': _NUMBER_OR_NULL, 'headers_ms': _NUMBER_OR_NULL, 'first_text_ms': _NUMBER_OR_NULL,
    'error_layer': _TEXT_OR_NULL, 'error': _TEXT_OR_NULL, 'error_kind': _TEXT_OR_NULL,
    'mean_event_gap_ms': _NUMBER_OR_NULL, 'max_event_gap_ms': _NUMBER_OR_NULL,
    'event_gaps_ms': ((lambda value: isinstance(value, list) and all(map(_number, value))), 'a list of numbers'),
    'content_events': (_integer, 'an integer'), 'completion_tokens': (_or_null(_integer), 'an integer or null'),
    'run': (_integer, 'an integer'), 'offset_ms': (_number, 'a number'),
    'source': ((lambda value: isinstance(value, str)), 'a string'),
    'api': ((lambda value: isinstance(value, str)), 'a string'),
    'model': _TEXT_OR_NULL, 'url': _TEXT_OR_NULL,
    'request': _OBJECT_OR_NULL, 'load': _OBJECT_OR_NULL, 'cross_check': _OBJECT_OR_NULL,
    'connection': _OBJECT_OR_NULL, 'http': _OBJECT_OR_NULL, 'client': _OBJECT_OR_NULL,
    'load.id': _TEXT_OR_NULL, 'load.runs': (_or_null(_integer), 'an integer or null'),
    'load.sessions': (_or_null(_integer), 'an integer or null'), 'load.rate': _NUMBER_OR_NULL,
    'load.duration': _NUMBER_OR_NULL, 'load.step': (_or_null(_integer), 'an integer or null'),
    'load.concurrency': (_or_null(_integer), 'an integer or null'), 'load.slo_target': _NUMBER_OR_NULL,
    'load.slo': (_or_null(lambda value: isinstance(value, dict) and all(map(_number, value.values()))),
                 'an object of numbers or null'),
    'cross_check.same': _BOOLEAN_OR_NULL, 'cross_check.comparable': _BOOLEAN_OR_NULL,
    'connection.stale': _BOOLEAN_OR_NULL, 'http.status': (_or_null(_integer), 'an integer or null'),
    'request.expect_finish': _TEXT_OR_NULL, 'request.prompt_sha256': _TEXT_OR_NULL, 'client.version': _TEXT_OR_NULL,
}
_REQUIRED_FIELDS = ('ok', 'started_at', 'duration_ms', 'headers_ms', 'first_text_ms', 'error_layer', 'error')
_OK_FIELDS = ('duration_ms', 'headers_ms', 'first_text_ms', 'event_gaps_ms', 'content_events', 'completion_tokens')


def _record_problem(record: dict) -> str | None:
    """Why a record cannot be counted: a field it lacks, or one that holds the wrong type; None when it can."""
    for name in _REQUIRED_FIELDS + (_OK_FIELDS if record.get('ok') is True else ()):
        if name not in record:
            return f'the record has no "{name}"'
    load = record.get('load')
    if isinstance(load, dict) and load.get('id') is not None and 'runs' not in load:
        return 'the record\'s "load" has an "id" but no "runs"'
    if isinstance(load, dict) and load.get('step') is not None and not ('rate' in load and 'duration' in load):
        return 'the record\'s "load" has a "step" but no "rate" or "duration"'
    cross = record.get('cross_check')
    if isinstance(cross, dict) and cross and not ('same' in cross and 'comparable' in cross):
        return 'the record\'s "cross_check" has no "same" or "comparable"'
    for name, (check, what) in _RECORD_FIELDS.items():
        outer, _, inner = name.partition('.')
        holder = record.get(outer) if inner else record
        field = inner or outer
        if isinstance(holder, dict) and field in holder and not check(holder[field]):
            return f'"{name}" must be {what}, not {_seen(holder[field])}'
    if record['ok'] and None in (record['duration_ms'], record['headers_ms'], record['first_text_ms']):
        return 'an ok run has "duration_ms", "headers_ms" and "first_text_ms", but this one holds null'
    return None


def _load_records(paths: list[str], mixed_sources: bool = False) -> list[dict]:
    """Saved evidence records, one per file; UsageError when one cannot be read, or when records of
    different sources mix and mixed_sources is not set."""
    records = []
    for path in paths:
        reading = iter_records(path)
        found = list(itertools.islice(reading, 2))
        reading.close()
        if len(found) != 1:  # a file of a load is compared as a load (_holds_loads), before this
            raise UsageError(f'{path} holds no record')
        records.append(found[0])
    _check_sources({record.get('source', 'endpoint') for record in records}, mixed_sources, 'compare')
    return records


def _not_a_load(path: str) -> str | None:
    """Why a file given to --compare of two loads holds no load: no record (empty, or its lines not JSON, as
    a --csv table's are), or a record of a single run; None when its first record is one of a load's. A
    cut line is left for the summary to warn of."""
    skipped: list = []
    reading = iter_records(path, skipped)
    first = next(reading, None)
    reading.close()
    if first is None:
        return f'{path} holds no record' + (': its lines are not JSON (a --csv table?)' if skipped else '')
    if not isinstance(first.get('load'), dict):
        return f'{path} is a single run\'s record, not a load'
    return None


def _check_sources(sources: set, mixed_sources: bool, verb: str) -> None:
    """UsageError when records of different sources would mix (fixture and replay timings are synthetic)."""
    if len(sources) > 1 and not mixed_sources:
        raise UsageError(f'refusing to {verb} records of different sources ({", ".join(sorted(sources))}): fixture '
                         'and replay timings say nothing about a live model; add --mixed-sources to do it anyway')


def iter_records(path: str, skipped: list | None = None):
    """The records of a saved evidence file: a JSON Lines file of a load, or one pretty-printed record.
    UsageError names the line (and the field) that is not a record. With ``skipped`` (a list), a line
    that is not JSON at all, as a line cut by a crash or a full disk is, is left out and a line saying
    so appended to the list; without it, that is a UsageError too."""
    try:
        with open(path, 'rb') as file:  # each line decoded alone: a line cut inside a character spoils only itself
            first = file.readline()
            if first.strip() == b'{':  # one record, as a single run writes it
                value = json.loads((first + file.read()).decode('utf-8'))
                if not _is_record(value):
                    raise UsageError(f'{path} is not an evidence record')
                problem = _record_problem(value)
                if problem:
                    raise UsageError(f'{path}: {problem}')
                yield value
                return
            for number, line in enumerate(itertools.chain([first], file), 1):
                if not line.strip():
                    continue
                try:
                    value = json.loads(line.rstrip(b'\r\n').decode('utf-8'))
                except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
                    why = 'not UTF-8' if isinstance(exc, UnicodeDecodeError) else \
                        f'{exc.msg.removesuffix(" at")} at column {exc.colno}' \
                        if isinstance(exc, json.JSONDecodeError) else 'nested too deeply'
                    broken = f'{path} line {number} is broken JSON ({why})'
                    if skipped is None:
                        raise UsageError(broken) from None
                    skipped.append(f'{broken}: skipped')
                    continue
                if not _is_record(value):
                    raise UsageError(f'{path} line {number} is not an evidence record')
                problem = _record_problem(value)
                if problem:
                    raise UsageError(f'{path} line {number}: {problem}')
                yield value
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f'cannot read {path}: {getattr(exc, "strerror", None) or exc}') from None
    except ValueError as exc:
        raise UsageError(f'{path} is not an evidence record: {exc}') from None


def summarize(paths: list[str], mixed_sources: bool = False, report: bool = False, slos: tuple | None = None,
              slo_target: float | None = None, each=None) -> tuple[Summary, Report | None]:
    """The summary (and, if asked, the report) of the records in saved evidence files, judged by slos
    (default: the bounds their loads were run with); UsageError for unreadable files, records that
    cannot be counted, mixed sources, loads run with different bounds or a run given twice. A line of broken JSON is
    left out, and said so in the summary's ``skipped``; what a load planned and has no record of (a run,
    a session, a session's last record) is said in its ``missing``. ``each``, if given, is called with every
    record."""
    summary, shards, loads = Summary(slos, slo_target), _ShardCheck(), _LoadCheck()
    drawing = Report(summary) if report else None
    for path in paths:
        for record in iter_records(path, summary.skipped):
            shards.add(record)
            loads.add(record)
            summary.add(record)
            if each is not None:
                each(record)
            if drawing is not None:
                drawing.add(record)
    _check_sources(summary.seen['sources'], mixed_sources, 'summarize')
    shards.check()
    loads.check()
    summary.missing = loads.missing()
    summary.slo_bounds()
    return summary, drawing


_SIGNAL_EXIT = {'SIGINT': 130, 'SIGTERM': 143}


def _ignore_signals() -> None:
    """SIGINT and SIGTERM change nothing from here on: while an evidence file is reserved but not yet
    written, and once the evidence is on disk and the process only reports it, where a signal could only
    lose the summary (and the exit status it would say)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def _default_signals() -> None:
    """Back to Python's own handling of SIGINT and SIGTERM: nothing was reserved."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
