"""Evidence files: each created once and never overwritten, and read back.

``_reserve_output()`` creates a file before anything is sent; ``iter_records()``
and ``summarize()`` read saved records back. A signal never leaves a reserved
file without a valid record.
"""
import itertools
import json
import os
import signal

from ._limits import UsageError
from ._reader import Capture
from ._plan import _ShardCheck
from ._summary import Summary
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
        json.dump(record, output, indent=2, ensure_ascii=False)
        output.write('\n')


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


def _write_report(fd: int, report: Report) -> None:
    with os.fdopen(fd, 'w', encoding='utf-8') as output:
        output.write(report.html())


def _is_record(value: object) -> bool:
    return isinstance(value, dict) and 'ok' in value and 'started_at' in value


def _load_records(paths: list[str], mixed_sources: bool = False) -> list[dict]:
    """Saved evidence records, one per file; UsageError when one cannot be read, or when records of
    different sources mix and mixed_sources is not set."""
    records = []
    for path in paths:
        reading = iter_records(path)
        found = list(itertools.islice(reading, 2))
        reading.close()
        if len(found) != 1:
            raise UsageError(f'{path} holds the records of a load, one per line: --compare takes files of one '
                             f'record each; use --summary {path} to read a load' if found
                             else f'{path} holds no record')
        records.append(found[0])
    _check_sources({record.get('source', 'endpoint') for record in records}, mixed_sources, 'compare')
    return records


def _check_sources(sources: set, mixed_sources: bool, verb: str) -> None:
    """UsageError when records of different sources would mix (fixture and replay timings are synthetic)."""
    if len(sources) > 1 and not mixed_sources:
        raise UsageError(f'refusing to {verb} records of different sources ({", ".join(sorted(sources))}): fixture '
                         'and replay timings say nothing about a live model; add --mixed-sources to do it anyway')


def iter_records(path: str):
    """The records of a saved evidence file: a JSON Lines file of a load, or one pretty-printed record.
    UsageError names the line that is not a record."""
    try:
        with open(path, encoding='utf-8') as file:
            first = file.readline()
            if first.strip() == '{':  # one record, as a single run writes it
                value = json.loads(first + file.read())
                if not _is_record(value):
                    raise UsageError(f'{path} is not an evidence record')
                yield value
                return
            for number, line in enumerate(itertools.chain([first], file), 1):
                if not line.strip():
                    continue
                try:
                    value = json.loads(line)
                except ValueError:
                    value = None
                if not _is_record(value):
                    raise UsageError(f'{path} line {number} is not an evidence record')
                yield value
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f'cannot read {path}: {getattr(exc, "strerror", None) or exc}') from None
    except ValueError as exc:
        raise UsageError(f'{path} is not an evidence record: {exc}') from None


def summarize(paths: list[str], mixed_sources: bool = False, report: bool = False, slos: tuple | None = None,
              slo_target: float | None = None) -> tuple[Summary, Report | None]:
    """The summary (and, if asked, the report) of the records in saved evidence files, judged by slos
    (default: the bounds their loads were run with); UsageError for unreadable files, mixed sources
    or loads run with different bounds."""
    summary, shards = Summary(slos, slo_target), _ShardCheck()
    drawing = Report(summary) if report else None
    for path in paths:
        for record in iter_records(path):
            shards.add(record)
            summary.add(record)
            if drawing is not None:
                drawing.add(record)
    _check_sources(summary.seen['sources'], mixed_sources, 'summarize')
    shards.check()
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
