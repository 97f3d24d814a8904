"""``--exporter``: the command that serves probes until a signal.
"""
import argparse
import ipaddress
import json
import os
import signal
import sys
import threading
import time

from ._limits import _count, _DEFAULT_EXPORTER_IN_FLIGHT, _MAX_CAPTURE_BYTES, UsageError
from ._json import _json_text, strict_json
from ._exchange import Cancel
from ._transport import run
from ._evidence import _ignore_signals, _is_record, _SIGNAL_EXIT
from ._args import _Fixture, _given_flags
from ._exporter import Exporter, ExporterServer, parse_targets, _prepare_targets, _Target


def _exporter_address(value: str) -> tuple[str, int]:
    """The address of --exporter: PORT or :PORT (loopback), or HOST:PORT with HOST an IP address
    ([::1]:PORT for IPv6) or localhost. ValueError otherwise."""
    host, colon, port = value.rpartition(':')
    host = host.removeprefix('[').removesuffix(']') if host.startswith('[') else host
    if not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(f'--exporter takes HOST:PORT (or PORT for 127.0.0.1), not {value!r}')
    if not host or host == 'localhost':
        return '127.0.0.1', int(port)
    try:
        ipaddress.ip_address(host)
    except ValueError:
        raise ValueError(f'--exporter needs an IP address to bind, not {host!r}: 127.0.0.1 for this host only, '
                         '0.0.0.0 for every interface') from None
    return host, int(port)


class _EvidenceLog:
    """The exporter's evidence file: each record appended as one JSON line by one write, never rewritten."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._lock = threading.Lock()

    def append(self, record: dict) -> None:
        data = (_json_text(record) + '\n').encode()
        with self._lock:
            while data:
                data = data[os.write(self.fd, data):]


def _append_output(path: str) -> int:
    """Open --output for appending, creating it (mode 0600) if absent. An existing file must hold JSON
    Lines records ending with a line end, so that appending cannot change any line."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
    except FileNotFoundError:
        raise UsageError(f'cannot create {path!r}: its directory does not exist') from None
    except OSError as exc:
        raise UsageError(f'cannot open {path!r}: {exc.strerror or exc}') from None
    size = os.fstat(fd).st_size
    if size:
        with open(path, 'rb') as existing:
            first = existing.readline(_MAX_CAPTURE_BYTES)
        last = os.pread(fd, 1, size - 1)
        try:
            starts_a_record = _is_record(json.loads(first))
        except (ValueError, RecursionError):
            starts_a_record = False
        if last != b'\n' or not starts_a_record:
            os.close(fd)
            raise UsageError(f'{path} is not a JSON Lines file of records ending with a line end; the exporter '
                             'appends only to such a file (or a new one)')
    return fd


# What --exporter takes besides its targets; every other flag of a run belongs in the targets file.
_EXPORTER_FLAGS = ('exporter', 'targets', 'output', 'concurrency', 'quiet')


def _read_targets(path: str, parser: argparse.ArgumentParser) -> dict[str, _Target]:
    """The targets of --targets, checked (strict JSON: no NaN, no repeated key); UsageError names the file."""
    try:
        with open(path, encoding='utf-8') as file:
            data = strict_json(file.read())
    except OSError as exc:
        raise UsageError(f'cannot read --targets {path!r}: {exc.strerror or exc}') from None
    except ValueError as exc:  # UnicodeDecodeError too
        raise UsageError(f'--targets {path} is not JSON: {exc}') from None
    try:
        return parse_targets(data, parser)
    except UsageError as exc:
        raise UsageError(f'--targets {path}: {exc}') from None


def _exporter_command(args, parser: argparse.ArgumentParser) -> int:
    """Serve /probe until SIGTERM or SIGINT; then let the runs in flight end (each within its deadline) and
    keep their records, and exit 143 or 130. A second signal interrupts those runs."""
    prog = parser.prog
    if args.exporter is None or args.targets is None:
        raise UsageError('--exporter and --targets go together')
    extra = _given_flags(parser, args, _EXPORTER_FLAGS)
    if extra:
        raise UsageError(f'{", ".join(extra)} {"does" if len(extra) == 1 else "do"} not go with --exporter: '
                         'the settings of its runs go in the targets file')
    if args.output is None:
        raise UsageError('--output is required: every run\'s record is appended to it')
    if args.concurrency is not None and args.concurrency < 1:
        raise UsageError(f'--concurrency must be at least 1, got {args.concurrency}')
    address = _exporter_address(args.exporter)
    targets = _read_targets(args.targets, parser)
    fixtures: dict[tuple, _Fixture] = {}

    def fixture_url(mode: str, profile: str, api: str) -> str:
        if (mode, profile, api) not in fixtures:
            fixtures[mode, profile, api] = _Fixture(mode, profile, api, 0)
        return fixtures[mode, profile, api].url
    quiet, lock = args.quiet, threading.Lock()

    def log(line: str) -> None:
        if not quiet:
            with lock:
                print(line, file=sys.stderr, flush=True)
    try:
        try:
            requests = _prepare_targets(targets, fixture_url)
        except UsageError as exc:
            raise UsageError(f'--targets {args.targets}: {exc}') from None
        fd = _append_output(args.output)
        evidence, cancel = _EvidenceLog(fd), Cancel()

        def keep(name: str, record: dict) -> None:
            try:
                evidence.append(record)
            except OSError as exc:
                exporter.write_error()
                log(f'{prog}: error: cannot append the record of {name} to {args.output}: {exc.strerror or exc}')
        exporter = Exporter(requests, args.concurrency or _DEFAULT_EXPORTER_IN_FLIGHT,
                            lambda request: run(request, cancel=cancel), keep, log)
        try:
            server = ExporterServer(address, exporter)
        except OSError as exc:
            os.close(fd)
            raise UsageError(f'cannot serve on {args.exporter}: {exc.strerror or exc}') from None
        try:
            return _serve_until_signal(server, exporter, cancel, args, log)
        finally:
            os.close(fd)
    finally:
        for fixture in fixtures.values():
            fixture.close()


def _serve_until_signal(server: ExporterServer, exporter: Exporter, cancel: Cancel, args, log) -> int:
    stopping: list[str] = []

    def on_signal(signum, frame) -> None:
        stopping.append(signal.Signals(signum).name)
        if len(stopping) > 1:
            cancel.cancel(stopping[-1])
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, on_signal)
    threading.Thread(target=server.serve_forever, args=(0.1,), daemon=True).start()
    host, port = server.server_address[:2]
    shown = f'[{host}]' if ':' in host else host
    log(f'exporter: listening on http://{shown}:{port}/ with {_count(len(exporter.requests), "target")}; '
        f'records appended to {args.output}')
    while not stopping:
        time.sleep(0.1)
    exporter.stopping = True
    log(f'exporter: {stopping[0]}: ending {_count(exporter.flights.in_flight(), "run")} in flight')
    server.shutdown()
    server.server_close()
    server.wait_answered()  # every run is inside a request being answered: their records are kept by then
    _ignore_signals()  # the records are on disk
    return _SIGNAL_EXIT[stopping[0]]
