"""A load's GenAI metrics while it runs: --metrics-port serves them to Prometheus, --otlp-json writes OTLP/JSON.

``_LiveMetrics`` is the observer the load driver calls (``started()``, ``add(record)``), a ``_LoadMetrics``
behind a lock that is held only to count and to copy; ``_MetricsServer`` answers GET /metrics from a thread of
its own, and ``_OtlpExport`` writes one export per interval and one at the end (and POSTs each to
--otlp-endpoint). Neither touches a connection of the load, and neither ever holds a header value or a key:
what they render is ``_otel``'s, built from the records' verdicts, timings, model and server alone.
"""
import contextlib
import http.client
import http.server
import os
import ssl
import sys
import threading
import time
from urllib.parse import urlsplit

from ._limits import UsageError
from ._json import _json_text
from ._otel import _EXPOSITION_TYPE, _LoadMetrics, _otlp_request, _prometheus_text

_DEFAULT_EXPORT_INTERVAL_MS = 60_000   # OTEL_METRIC_EXPORT_INTERVAL's default in the OpenTelemetry SDKs
_MIN_EXPORT_INTERVAL_MS = 100
_POST_TIMEOUT_S = 5.0                  # connect and each read of an --otlp-endpoint POST
_SCRAPE_READ_TIMEOUT_S = 10.0          # a scraper that sends nothing for this long is dropped
_MAX_POST_FAILURES_SHOWN = 3


class _LiveMetrics:
    """The observer of a load that feeds the endpoint and the exports: the metrics behind a lock, and the
    wall time the load started (the start of every cumulative point)."""

    def __init__(self, slos: tuple | None = None, clock_ns=time.time_ns) -> None:
        self._lock = threading.Lock()
        self._metrics = _LoadMetrics(slos)
        self._clock_ns = clock_ns
        self.start_ns = clock_ns()

    def begin(self) -> None:
        """The load starts now: the start of its cumulative points."""
        self.start_ns = self._clock_ns()

    def started(self) -> None:
        with self._lock:
            self._metrics.started()

    def add(self, record: dict) -> None:
        with self._lock:
            self._metrics.add(record)

    def snapshot(self) -> _LoadMetrics:
        """A copy to render, taken under the lock; the rendering is done outside it."""
        with self._lock:
            return self._metrics.copy()

    def prometheus(self) -> str:
        return _prometheus_text(self.snapshot())

    def otlp_line(self) -> str:
        return _json_text(_otlp_request(self.snapshot(), self.start_ns, self._clock_ns()), separators=(',', ':'))


class _ScrapeHandler(http.server.BaseHTTPRequestHandler):
    """GET /metrics: the exposition; any other path 404, in one line."""

    server_version = 'stream-client'
    sys_version = ''
    timeout = _SCRAPE_READ_TIMEOUT_S

    def do_GET(self) -> None:
        if urlsplit(self.path).path != '/metrics':
            self._reply(404, 'text/plain; charset=utf-8', b'not found: the metrics are at /metrics\n')
            return
        self._reply(200, _EXPOSITION_TYPE, self.server.metrics.prometheus().encode())

    def _reply(self, status: int, content_type: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header('Content-Type', content_type)
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args) -> None:  # noqa: A002 -- the base class's name
        pass  # a scrape is not the load's business on stderr


class _MetricsServer(http.server.HTTPServer):
    """The live endpoint: bound when made (a port in use is refused before anything is sent), served from a
    thread of its own from ``start()`` to ``close()``, one scrape at a time (a scraper that stalls is dropped
    after _SCRAPE_READ_TIMEOUT_S): a thread per scrape cost the load twice the CPU."""

    def __init__(self, host: str, port: int, metrics: _LiveMetrics) -> None:
        self.metrics = metrics
        try:
            super().__init__((host, port), _ScrapeHandler)
        except (OSError, OverflowError) as exc:
            raise UsageError(f'--metrics-port {port} on {host}: cannot listen: '
                             f'{getattr(exc, "strerror", None) or exc}') from None
        self._thread = threading.Thread(target=self.serve_forever, kwargs={'poll_interval': 0.2}, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f'http://{f"[{host}]" if ":" in host else host}:{port}/metrics'

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        if self._thread.is_alive():
            self.shutdown()
        self.server_close()

    def handle_error(self, request, client_address) -> None:
        pass  # a scraper that went away mid-answer: nothing the load's stderr needs


def _export_interval_s(environ: dict) -> float:
    """OTEL_METRIC_EXPORT_INTERVAL (milliseconds, as the OpenTelemetry SDKs read it), in seconds."""
    text = environ.get('OTEL_METRIC_EXPORT_INTERVAL', '').strip()
    if not text:
        return _DEFAULT_EXPORT_INTERVAL_MS / 1000
    if not text.isdigit() or int(text) < _MIN_EXPORT_INTERVAL_MS:
        raise UsageError(f'OTEL_METRIC_EXPORT_INTERVAL must be whole milliseconds, at least '
                         f'{_MIN_EXPORT_INTERVAL_MS}, not {text[:20]!r}')
    return int(text) / 1000


def _otlp_target(url: str) -> tuple[str, str, int, str]:
    """--otlp-endpoint URL checked: (scheme, host, port, path); a bare origin gets /v1/metrics, as
    OTEL_EXPORTER_OTLP_ENDPOINT does. A URL with credentials is refused: they would be sent and shown."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        parts, port = None, None
    if parts is None or parts.scheme not in ('http', 'https') or not parts.hostname:
        raise UsageError('--otlp-endpoint must be an http:// or https:// URL, e.g. http://127.0.0.1:4318')
    if parts.username is not None or parts.password is not None:
        raise UsageError('--otlp-endpoint must not hold credentials')
    path = parts.path if parts.path not in ('', '/') else '/v1/metrics'
    return parts.scheme, parts.hostname, port or (443 if parts.scheme == 'https' else 80), path


class _OtlpExport:
    """--otlp-json FILE (reserved already: fd) and --otlp-endpoint URL: one ExportMetricsServiceRequest per
    interval and one at the end, a JSON object per line of the file and a POST each. A failed write or POST
    never stops the load: ``close()`` says what failed, in lines without a header or a body."""

    def __init__(self, metrics: _LiveMetrics, interval_s: float, fd: int | None, endpoint: str | None) -> None:
        self.metrics, self.interval_s, self.fd = metrics, interval_s, fd
        self.target = _otlp_target(endpoint) if endpoint else None
        self.exports, self.problems = 0, []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._export()

    def close(self) -> list[str]:
        """Stop the interval, write the last export, close the file; the problems, one line each."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        self._export()
        if self.fd is not None:
            os.close(self.fd)
        return self.problems

    def _export(self) -> None:
        line = self.metrics.otlp_line()
        self.exports += 1
        if self.fd is not None:
            self._write((line + '\n').encode())
        if self.target is not None:
            self._post(line.encode())

    def _write(self, data: bytes) -> None:
        try:
            while data:
                data = data[os.write(self.fd, data):]
        except OSError as exc:
            self._problem(f'--otlp-json: cannot write: {exc.strerror or exc}')

    def _post(self, body: bytes) -> None:
        scheme, host, port, path = self.target
        connection = (http.client.HTTPSConnection(host, port, timeout=_POST_TIMEOUT_S,
                                                  context=ssl.create_default_context())
                      if scheme == 'https' else http.client.HTTPConnection(host, port, timeout=_POST_TIMEOUT_S))
        try:
            connection.request('POST', path, body, {'Content-Type': 'application/json'})
            response = connection.getresponse()
            response.read(65536)
            if not 200 <= response.status < 300:
                self._problem(f'--otlp-endpoint {host}:{port}{path}: status {response.status}')
        except (OSError, ValueError, http.client.HTTPException) as exc:  # ValueError: a path http.client refuses
            self._problem(f'--otlp-endpoint {host}:{port}{path}: {type(exc).__name__}: {exc}'[:300])
        finally:
            connection.close()

    def _problem(self, line: str) -> None:
        if len(self.problems) < _MAX_POST_FAILURES_SHOWN:
            self.problems.append(line)



class _LiveFigures:
    """What --metrics-port, --otlp-json and --otlp-endpoint ask of a load: the observer, the endpoint (bound
    when made, so that a port in use is refused before anything is sent or created) and the exports."""

    def __init__(self, args, slos: tuple | None, environ=os.environ) -> None:
        self.metrics = _LiveMetrics(slos)
        self.server = _MetricsServer(args.metrics_host or '127.0.0.1', args.metrics_port, self.metrics) \
            if args.metrics_port is not None else None
        exporting = args.otlp_json is not None or args.otlp_endpoint is not None
        self.export = _OtlpExport(self.metrics, _export_interval_s(environ), None, args.otlp_endpoint) \
            if exporting else None

    @contextlib.contextmanager
    def serving(self, otlp_fd: int | None, prog: str, quiet: bool):
        """Serve and export while the block runs the load (otlp_fd: --otlp-json's file, reserved beside the
        evidence); then the last export, the endpoint closed, and what failed on the way as warnings."""
        self.metrics.begin()
        if self.server is not None:
            self.server.start()
            if not quiet:
                print(f'{prog}: metrics served at {self.server.url} during the load', file=sys.stderr)
        if self.export is not None:
            self.export.fd = otlp_fd
            self.export.start()
        try:
            yield self.metrics
        finally:
            for problem in self.close():
                print(f'{prog}: warning: {problem}', file=sys.stderr)

    def close(self) -> list[str]:
        """The last export, then the endpoint closed; what failed on the way, one line each."""
        problems = self.export.close() if self.export is not None else []
        if self.server is not None:
            self.server.close()
        return problems


def _live_figures(args, slos: tuple | None) -> _LiveFigures | None:
    """The live figures the command line asks for, or None without --metrics-port, --otlp-json and
    --otlp-endpoint."""
    if args.metrics_port is None and args.otlp_json is None and args.otlp_endpoint is None:
        if args.metrics_host is not None:
            raise UsageError('--metrics-host goes with --metrics-port')
        return None
    return _LiveFigures(args, slos)
