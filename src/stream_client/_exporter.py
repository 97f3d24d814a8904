"""The exporter: the verdict of one run per scrape, for Prometheus.

``Exporter`` answers ``/probe?target=NAME`` with one run's verdict in the text
exposition format (``parse_targets()``, ``probe_families()``, ``exposition()``
and ``SingleFlight`` are sans-IO), and ``ExporterServer`` serves it.
"""
import argparse
import collections
import contextlib
import dataclasses
import http.server
import ipaddress
import json
import math
import os
import re
import socket
import sys
import threading
import time
import typing
from urllib.parse import parse_qsl, quote, urlsplit

from ._limits import _host_port, LAYERS, _preview, _shorten, UsageError, __version__
from ._json import _seen
from ._request import _DEFAULT_URL, PreparedRequest
from ._record import _client_failure
from ._gates import _UNCLASSIFIED
from ._otel import _EXPOSITION_TYPE, _label_value, _sample_value
from ._report import _e
from ._args import _FIXTURE_FILE, _fixture_server, _in_flag_terms, _requests_from_args
from ._views import _verdict_line


# blackbox_exporter's multi-target pattern: Prometheus asks GET /probe?target=NAME, NAME being one of the
# targets of the --targets file (never a URL), and gets the verdict of one run made now, in the text
# exposition format 0.0.4. The targets file, the exposition and the single-flight are sans-IO; ExporterServer
# is the HTTP server around them, and _exporter_command() the command line's part.

_SCRAPE_TIMEOUT_HEADER = 'X-Prometheus-Scrape-Timeout-Seconds'
_SCRAPE_TIMEOUT_MARGIN = 0.5     # seconds between a run's deadline and the scrape timeout Prometheus sent
_MAX_EXPORTER_CONNECTIONS = 64   # connections to the exporter served at once; more get a short 503
_EXPORTER_READ_TIMEOUT = 10.0    # seconds a client of the exporter may take to send its request
_TARGET_NAME = re.compile(r'[A-Za-z0-9][A-Za-z0-9_.-]{0,63}')
_ENV_NAME = re.compile(r'[A-Za-z_][A-Za-z0-9_]*')
# A target's keys, each standing for the long flag of a run; a key whose flag this version lacks is refused.
_TARGET_FLAGS = {'url': '--url', 'api': '--api', 'model': '--model', 'prompt': '--prompt', 'system': '--system',
                'max_tokens': '--max-tokens', 'temperature': '--temperature', 'stop': '--stop',
                'tools': '--tools', 'tool_choice': '--tool-choice', 'json_schema': '--json-schema',
                'expect_finish': '--expect-finish', 'extra': '--extra', 'idle': '--idle', 'deadline': '--deadline',
                'ca_file': '--ca-file', 'fixture': '--fixture', 'fixture_profile': '--fixture-profile',
                'cross_check': '--cross-check', 'dialect': '--dialect', 'header': '--header'}
# Keys whose value in the file is JSON itself rather than the flag's text (the flag takes it as a string).
_TARGET_JSON_KEYS = {'extra': 'object'}
_TARGET_VALUES = {  # what a target's value must be, by the kind of its flag
    'string': (lambda value: isinstance(value, str), 'a string'),
    'integer': (lambda value: isinstance(value, int) and not isinstance(value, bool), 'an integer'),
    'number': (lambda value: isinstance(value, (int, float)) and not isinstance(value, bool), 'a number'),
    'strings': (lambda value: isinstance(value, list) and all(isinstance(item, str) for item in value),
                'a list of strings'),
    'switch': (lambda value: isinstance(value, bool), 'true or false'),
    'object': (lambda value: isinstance(value, dict), 'a JSON object'),
}


class _Target(typing.NamedTuple):
    """One target of the file, checked: the run's flags as the command line would hold them, and the name
    of the environment variable that holds its API key (None: no key)."""

    name: str
    args: argparse.Namespace
    api_key_env: str | None


def _value_kind(action: argparse.Action) -> str:
    if action.nargs == 0:
        return 'switch'
    if isinstance(action, argparse._AppendAction):
        return 'strings'
    return {int: 'integer', float: 'number'}.get(action.type, 'string')


def _target_keys(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """The keys a target may hold: those of TARGET_FLAGS whose flag this parser has, with its action."""
    actions = {option: action for action in parser._actions for option in action.option_strings}
    return {key: actions[flag] for key, flag in _TARGET_FLAGS.items() if flag in actions}


def _target_problem(key: str, keys: dict[str, argparse.Action], value: object) -> str | None:
    """Why one key of a target cannot be used, or None."""
    action = keys.get(key)
    if action is None:
        return f'is not a setting of a target; a target may hold {", ".join(("api_key_env", *keys))}'
    check, noun = _TARGET_VALUES[_TARGET_JSON_KEYS.get(key) or _value_kind(action)]
    if not check(value):
        return f'must be {noun}, not {_seen(value)}'
    if action.choices is not None and value not in action.choices:
        return f'must be one of {", ".join(map(str, action.choices))}, not {_preview(str(value))}'
    if key == 'fixture' and value not in _fixture_server().CHOICES:
        return f'must be one of the fixture\'s modes (python3 {_FIXTURE_FILE} --help), not {_preview(str(value))}'
    return None


def parse_targets(data: object, parser: argparse.ArgumentParser) -> dict[str, _Target]:
    """The targets of a decoded targets file, {"targets": {"NAME": {key: value, ...}, ...}}; UsageError
    naming the target and the field for anything that is not one. Sans-IO: the files a target names
    are read later, by prepare_targets()."""
    if not isinstance(data, dict) or set(data) != {'targets'} or not isinstance(data['targets'], dict) \
            or not data['targets']:
        raise UsageError('expected {"targets": {"NAME": {...}, ...}} with at least one target')
    keys, defaults = _target_keys(parser), parser.parse_args([])
    targets = {}
    for name, settings in data['targets'].items():
        if not _TARGET_NAME.fullmatch(name):
            raise UsageError(f'target {_preview(name)}: a name is 1 to 64 letters, digits, "_", "." or "-", '
                             'starting with a letter or digit')
        if not isinstance(settings, dict):
            raise UsageError(f'target {name}: expected an object of settings, not {_seen(settings)}')
        args = argparse.Namespace(**vars(defaults))
        key_env = settings.get('api_key_env')
        if key_env is not None and not (isinstance(key_env, str) and _ENV_NAME.fullmatch(key_env)):
            raise UsageError(f'target {name}: api_key_env must be the name of an environment variable '
                             '(the key itself never goes in this file)')
        for key, value in settings.items():
            if key == 'api_key_env':
                continue
            problem = _target_problem(key, keys, value)
            if problem:
                raise UsageError(f'target {name}: {key} {problem}')
            setattr(args, keys[key].dest, json.dumps(value) if key in _TARGET_JSON_KEYS else value)
        if args.fixture is not None and args.url is not None:
            raise UsageError(f'target {name}: fixture and url exclude each other')
        targets[name] = _Target(name, args, key_env)
    return targets


def _in_key_terms(message: str) -> str:
    """A message that names flags (--max-tokens), with each named as the key of a target (max_tokens)."""
    return re.sub(r'--[a-z][a-z-]*', lambda flag: flag[0][2:].replace('-', '_'), _in_flag_terms(message))


def _prepare_targets(targets: dict[str, _Target], fixture_url) -> dict[str, PreparedRequest]:
    """Each target's prepared request (its files read, its key taken from its environment variable); a
    fixture target is sent to fixture_url(mode, profile, api). UsageError names the target and the field."""
    requests = {}
    for name, target in targets.items():
        args = target.args
        if target.api_key_env is not None and not os.environ.get(target.api_key_env):
            raise UsageError(f'target {name}: api_key_env names {target.api_key_env}, which is not set')
        try:
            url = (args.url or _DEFAULT_URL) if args.fixture is None else \
                fixture_url(args.fixture, args.fixture_profile, args.api or 'chat')
            requests[name] = _requests_from_args(args, url, target.api_key_env)[0]
        except (UsageError, ValueError) as exc:
            raise UsageError(f'target {name}: {_in_key_terms(str(exc))}') from None
    return requests


def _probe_deadline(target_deadline: float, scrape_timeout: str | None) -> float:
    """A run's deadline under a scrape: the target's, or Prometheus's scrape timeout less
    SCRAPE_TIMEOUT_MARGIN if that is sooner (half a timeout too short for the margin). A header that is
    not a positive number is ignored."""
    try:
        timeout = float(scrape_timeout) if scrape_timeout is not None else math.inf
    except ValueError:
        timeout = math.inf
    if not timeout > 0:
        timeout = math.inf  # NaN, zero and negative numbers say nothing usable
    budget = timeout - _SCRAPE_TIMEOUT_MARGIN if timeout > 2 * _SCRAPE_TIMEOUT_MARGIN else timeout / 2
    return min(target_deadline, budget)


class _Refusal(typing.NamedTuple):
    """Why a request gets no metrics: a stable reason (a label of the scrape-error counter) and one line."""

    reason: str
    message: str


def _probe_target(query: str, names: typing.Container[str]) -> str | _Refusal:
    """The target a /probe query names, or why it names none."""
    try:
        fields = parse_qsl(query, keep_blank_values=True, strict_parsing=True) if query else []
    except ValueError:
        return _Refusal('bad_query', 'malformed query; expected target=NAME')
    unknown = sorted({key for key, _ in fields} - {'target'})
    if unknown:
        return _Refusal('bad_query', f'unknown parameter {_preview(unknown[0])}; /probe takes target=NAME only')
    values = [value for _, value in fields]
    if len(values) != 1:
        return _Refusal('bad_query', 'expected target=NAME exactly once')
    if ':' in values[0] or '/' in values[0]:
        return _Refusal('url_target', 'target must be the name of a target in the targets file, not a URL')
    if values[0] not in names:
        return _Refusal('unknown_target', f'unknown target {_preview(values[0])}')
    return values[0]


# ---- the text exposition format, version 0.0.4 ----

class _Family(typing.NamedTuple):
    """One metric family: its name, type (gauge or counter), help text and samples (labels, value)."""

    name: str
    type: str
    help: str
    samples: list


def exposition(families: list[_Family]) -> str:
    """The families in the text exposition format 0.0.4: HELP and TYPE lines, then one line per sample."""
    lines = []
    for family in families:
        help_text = family.help.replace('\\', r'\\').replace('\n', r'\n')
        lines.append(f'# HELP {family.name} {help_text}')
        lines.append(f'# TYPE {family.name} {family.type}')
        for labels, value in family.samples:
            pairs = ','.join(f'{name}="{_label_value(str(text))}"' for name, text in labels.items())
            lines.append(f'{family.name}{{{pairs}}} {_sample_value(value)}' if pairs
                         else f'{family.name} {_sample_value(value)}')
    return '\n'.join(lines) + '\n'


def _seconds(ms: float | None) -> float | None:
    return None if ms is None else round(ms / 1000, 6)


# The gauges of one probe, each read from the run's record; a value of None leaves the sample out.
_PROBE_GAUGES = (
    ('probe_success', 'Whether the streamed answer really finished: the HTTP message, the event stream and the '
                      'answer all complete (1), or not (0)', lambda r: int(r['ok'])),
    ('probe_duration_seconds', 'How long the run took, from before the connection to its end',
     lambda r: _seconds(r['duration_ms'])),
    ('stream_probe_headers_seconds', 'From the start of the run to the response head; absent without one',
     lambda r: _seconds(r['headers_ms'])),
    ('stream_probe_first_text_seconds', 'From the start of the run to the first visible text (or first piece '
                                        'of a tool call); absent when none arrived',
     lambda r: _seconds(r['first_text_ms'])),
    ('stream_probe_content_events', 'Events that carried visible text or a piece of a tool call',
     lambda r: r['content_events']),
    ('stream_probe_http_status', 'The status of the final HTTP response; absent when none arrived',
     lambda r: (r['http'] or {}).get('status')),
    ('stream_probe_tool_calls', 'Tool calls that arrived', lambda r: len(r['tool_calls'])),
)
# Gauges present only when the target asks for them (it offers tools, or asks for a JSON answer).
_PROBE_CHECKS = (
    ('stream_probe_tool_calls_verified', 'With tools offered: 1 when the run is ok and its answer is tool calls, '
                                         'each one\'s arguments one JSON object matching its tool\'s parameters',
     lambda r: bool((r['request'] or {}).get('tools')), 'tool_calls'),
    ('stream_probe_json_verified', 'With a JSON schema asked for: 1 when the run is ok and its answer is JSON '
                                   'that parsed and matched the schema',
     lambda r: (r['request'] or {}).get('json_schema_sha256') is not None, 'json'),
)


def probe_families(record: dict) -> list[_Family]:
    """The metrics of one run, from its record alone."""
    families = [_Family(name, 'gauge', text, [({}, value)] if value is not None else [])
                for name, text, value in ((name, text, read(record)) for name, text, read in _PROBE_GAUGES)]
    families.append(_Family('stream_probe_failed', 'gauge', 'Per layer, 1 for the layer where the run failed '
                           '(the first failure) and 0 for the others',
                           [({'layer': layer}, int(record['error_layer'] == layer)) for layer in LAYERS]))
    families.append(_Family('stream_probe_error_info', 'gauge', 'The kind of the failure, as a label; absent '
                           'when the run is ok', [] if record['ok'] else
                           [({'kind': record['error_kind'] or _UNCLASSIFIED}, 1)]))
    families.extend(_Family(name, 'gauge', text, [({}, int(record['ok'] and record['answer_kind'] == kind))])
                    for name, text, asked, kind in _PROBE_CHECKS if asked(record))
    return families


# ---- the exporter's state: runs in flight, counters and last verdicts (no sockets) ----

class _Flight:
    def __init__(self) -> None:
        self.done = threading.Event()
        self.result: object = None


class SingleFlight:
    """One run per key at a time, and at most ``limit`` runs at once: a caller that finds a run of its key
    in flight waits for that run's result instead of starting another."""

    def __init__(self, limit: int) -> None:
        self._lock = threading.Lock()
        self._flights: dict[str, _Flight] = {}
        self._slots = threading.BoundedSemaphore(limit)
        self.joined: collections.Counter = collections.Counter()  # calls that joined a run in flight, by key

    def do(self, key: str, work: typing.Callable[[float], object], wait: float) -> tuple[object, bool]:
        """(the result of work(seconds waited for a slot), or None if none came within ``wait`` seconds;
        whether this call joined a run already in flight). The call that starts a run waits up to ``wait``
        for a slot."""
        with self._lock:
            flight = self._flights.get(key)
            joined = flight is not None
            if joined:
                self.joined[key] += 1
            else:
                flight = self._flights[key] = _Flight()
        if joined:
            flight.done.wait(wait)
            return flight.result, True
        try:
            waited = self._take_slot(wait)
            if waited is not None:
                try:
                    flight.result = work(waited)
                finally:
                    self._slots.release()
        finally:
            with self._lock:
                del self._flights[key]
            flight.done.set()
        return flight.result, False

    def _take_slot(self, wait: float) -> float | None:
        """The seconds waited for a slot (0 when one was free), or None when none came within ``wait``."""
        if self._slots.acquire(blocking=False):
            return 0.0
        began = time.monotonic()
        return time.monotonic() - began if self._slots.acquire(timeout=max(wait, 0)) else None

    def in_flight(self) -> int:
        """Keys with a run in flight (or waiting for a slot)."""
        with self._lock:
            return len(self._flights)


class _Reply(typing.NamedTuple):
    """What the exporter answers one request with; ``problem`` names a scrape error for the counters."""

    status: int
    content_type: str
    body: str
    problem: str | None = None


def _one_line(status: int, text: str, problem: str) -> _Reply:
    return _Reply(status, 'text/plain; charset=utf-8', text + '\n', problem)


# A Host field's value (RFC 9112 3.2, RFC 3986 3.2.2): a bracketed IPv6 address or a reg-name (an IPv4 address is one),
# then an optional port.
_HOST_VALUE = re.compile(r"(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._~!$&'()*+,;=%-]*)(?::[0-9]*)?")


def _own_origin(host: str, port: int | None, listening: tuple) -> bool:
    """Whether an absolute form's http authority names this exporter: its port, and the address it listens on,
    localhost when that is loopback, or any name when it listens on every address."""
    own_host, own_port = listening[:2]
    if (port if port is not None else 80) != own_port:
        return False
    own = ipaddress.ip_address(own_host)
    if own.is_unspecified:
        return True
    try:
        return ipaddress.ip_address(host) == own
    except ValueError:
        return own.is_loopback and host == 'localhost'


def _origin_target(target: str, version: str, hosts: list[str], listening: tuple) -> str | _Reply:
    """The path and query a request asks for, or the error to answer: RFC 9112 3.2, an HTTP/1.1 request
    carries a Host line, and no request two, nor an invalid one (400); the absolute form (3.2.2), which a
    server must accept, is taken for this exporter's own origin (its port, and its address or a name of it)
    and answered 421 for another, since the exporter is not a proxy. ``listening`` is the server's
    address. Sans-IO."""
    if len(hosts) > 1:
        return _one_line(400, f'{len(hosts)} Host header lines; a request carries one (RFC 9112 3.2)', 'bad_request')
    if not hosts and version != 'HTTP/1.0':  # 1.1 and later minor versions
        return _one_line(400, 'an HTTP/1.1 request needs a Host header (RFC 9112 3.2)', 'bad_request')
    if hosts and not _HOST_VALUE.fullmatch(hosts[0].strip(' \t')):
        return _one_line(400, f'invalid Host header {_preview(hosts[0])}', 'bad_request')
    if target.startswith('/'):
        return target
    try:
        parts = urlsplit(target)
        host, port = parts.hostname, parts.port
    except ValueError:  # a bracket left open, a port that is not a number
        parts, host, port = None, None, None
    if parts is None or parts.scheme.lower() != 'http' or not host or '@' in parts.netloc or '#' in target:
        return _one_line(400, f'the request target {_preview(target)} is neither a path nor an http:// URL '
                              'of this exporter', 'bad_request')
    if not _own_origin(host, port, listening):
        return _one_line(421, f'this exporter is not a proxy: it answers for http://{_host_port(*listening[:2])}/, '
                              f'not for {_preview(parts.netloc)}', 'misdirected')
    return (parts.path or '/') + (f'?{parts.query}' if parts.query else '')


class Exporter:
    """The exporter without its server: its targets, the runs in flight, its counters and each target's
    last record. ``run_one(request)`` makes a run and returns its record; ``on_record(name,
    record)`` keeps it (the evidence file) and ``log(line)`` tells the operator."""

    def __init__(self, requests: dict[str, PreparedRequest], limit: int, run_one, on_record, log) -> None:
        self.requests = requests
        self.flights = SingleFlight(limit)
        self.run_one, self.on_record, self.log = run_one, on_record, log
        self._lock = threading.Lock()
        self.runs = collections.Counter({(name, result): 0 for name in requests for result in ('ok', 'failed')})
        self.failures: collections.Counter = collections.Counter()
        self.scrape_errors: collections.Counter = collections.Counter()
        self.write_errors = 0
        self.last: dict[str, dict] = {}
        self.stopping = False  # set once a signal came: a probe that arrives later starts no run

    routes = {'/probe': 'probe', '/metrics': 'metrics', '/': 'page'}

    def answer(self, target: str, scrape_timeout: str | None) -> _Reply:
        """The answer to GET target (a path and query), with ``scrape_timeout`` the value of Prometheus's
        X-Prometheus-Scrape-Timeout-Seconds header if sent; an error is counted and logged."""
        path, _, query = target.partition('?')
        route = self.routes.get(path)
        if route is None:
            answer = _one_line(404, f'no such page {_preview(path)}; try /probe?target=NAME, /metrics or /',
                               'not_found')
        else:
            answer = self.probe(query, scrape_timeout) if route == 'probe' else getattr(self, route)()
        if answer.problem is not None:
            self.scrape_error(answer.problem)
            self.log(f'{answer.status} for GET {_shorten(target, 100)}: {answer.body.strip()}')
        return answer

    def probe(self, query: str, scrape_timeout: str | None) -> _Reply:
        """One scrape of /probe: a run of the target the query names (or the result of the one in flight)."""
        name = _probe_target(query, self.requests)
        if isinstance(name, _Refusal):
            return _one_line(400, name.message, name.reason)
        if self.stopping:
            return _one_line(503, 'the exporter is stopping', 'stopping')
        request = self.requests[name]
        budget = _probe_deadline(request.deadline, scrape_timeout)
        record, joined = self.flights.do(name, lambda waited: self._run(name, request, budget - waited), budget)
        if record is None:
            return _one_line(503, f'no result for {name} within {budget:g} s: '
                             + ('its run in flight has not ended' if joined else 'too many runs in flight'), 'busy')
        return _Reply(200, _EXPOSITION_TYPE, exposition(probe_families(record)))

    def _run(self, name: str, request: PreparedRequest, deadline: float) -> dict | None:
        """One run of a target under ``deadline`` seconds, its record kept and counted (None: no time left)."""
        if deadline <= 0:
            return None
        request = dataclasses.replace(request, deadline=deadline)
        try:
            record = self.run_one(request)
        except Exception as exc:  # a bug in this client: the run still leaves its record, saying so
            record = _client_failure(request, exc, 'during the run')
        record = {**record, 'target': name}
        with self._lock:
            self.runs[name, 'ok' if record['ok'] else 'failed'] += 1
            if not record['ok']:
                self.failures[name, record['error_layer'], record['error_kind'] or _UNCLASSIFIED] += 1
            self.last[name] = record
        self.on_record(name, record)
        self.log(f'probe {name}: {_verdict_line(record)}')
        return record

    def scrape_error(self, problem: str) -> None:
        with self._lock:
            self.scrape_errors[problem] += 1

    def write_error(self) -> None:
        with self._lock:
            self.write_errors += 1

    def metrics(self) -> _Reply:
        """/metrics: the exporter's own counters."""
        with self._lock:
            families = [
                _Family('stream_exporter_runs_total', 'counter', 'Runs made, by target and result (ok or failed)',
                       [({'target': name, 'result': result}, count)
                        for (name, result), count in sorted(self.runs.items())]),
                _Family('stream_exporter_failures_total', 'counter', 'Runs not ok, by target, failing layer and '
                       'error kind', [({'target': name, 'layer': layer, 'kind': kind}, count)
                                      for (name, layer, kind), count in sorted(self.failures.items())]),
                _Family('stream_exporter_joined_scrapes_total', 'counter', 'Scrapes answered with the result of '
                       'a run of their target already in flight, by target',
                       [({'target': name}, self.flights.joined[name]) for name in sorted(self.requests)]),
                _Family('stream_exporter_scrape_errors_total', 'counter', 'Requests to the exporter answered '
                       'with an error instead of metrics, by reason',
                       [({'reason': reason}, count) for reason, count in sorted(self.scrape_errors.items())]),
                _Family('stream_exporter_evidence_write_errors_total', 'counter', 'Records that could not be '
                       'appended to the evidence file', [({}, self.write_errors)]),
                _Family('stream_exporter_runs_in_flight', 'gauge', 'Runs in flight now (those waiting for a slot too)',
                       [({}, self.flights.in_flight())]),
                _Family('stream_exporter_targets', 'gauge', 'Targets in the targets file',
                       [({}, len(self.requests))]),
            ]
        return _Reply(200, _EXPOSITION_TYPE, exposition(families))

    def page(self) -> _Reply:
        """/: the targets, with the last verdict of each, its error and when it ran."""
        with self._lock:
            last = dict(self.last)
        rows = []
        for name, request in self.requests.items():
            record = last.get(name)
            verdict = 'not run yet' if record is None else 'ok' if record['ok'] else 'NOT OK'
            rows.append(f'<tr><td><a href="/probe?target={_e(quote(name))}">{_e(name)}</a></td>'
                        f'<td>{_e(request.api)}</td><td>{_e(request.url)}</td><td>{verdict}</td>'
                        f'<td>{_e((record or {}).get("error") or "")}</td>'
                        f'<td>{_e((record or {}).get("started_at") or "")}</td></tr>')
        body = ('<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>stream-client exporter'
                '</title></head><body><h1>stream-client exporter</h1><p>A probe (a target\'s link) runs one streamed '
                'request to that target now. The exporter\'s own counters: <a href="/metrics">/metrics</a>.</p>'
                '<table><tr><th>target</th><th>API</th><th>URL</th><th>last verdict</th>'
                f'<th>error</th><th>started (UTC)</th></tr>{"".join(rows)}</table></body></html>\n')
        return _Reply(200, 'text/html; charset=utf-8', body)


# ---- the HTTP server around it ----

class _ExporterHandler(http.server.BaseHTTPRequestHandler):
    """GET /probe, /metrics and /; anything else a short 4xx with one line of text."""

    server_version = f'stream-client-exporter/{__version__}'
    timeout = _EXPORTER_READ_TIMEOUT
    problems = {400: 'bad_request', 404: 'not_found', 405: 'method', 413: 'too_large', 414: 'too_large',
                421: 'misdirected', 431: 'too_large'}

    def parse_request(self) -> bool:
        if not super().parse_request():
            return False
        if self.request_version == 'HTTP/0.9':
            self.send_error(400, 'HTTP/0.9 is not served; send an HTTP/1.x request')
            return False
        if self.command != 'GET':
            self.send_error(405, f'{_shorten(self.command, 20)} is not served here; use GET')
            return False
        if self.headers.get('Content-Length', '0').strip() != '0' or 'Transfer-Encoding' in self.headers:
            self.send_error(413, 'a request to the exporter has no body')
            return False
        target = _origin_target(self.path, self.request_version, self.headers.get_all('Host') or [],
                                self.server.server_address)
        if isinstance(target, _Reply):
            self.send_error(target.status, target.body.strip())
            return False
        self.path = target
        return True

    def do_GET(self) -> None:
        with self.server.serving():
            self._answer(self.server.exporter.answer(self.path, self.headers.get(_SCRAPE_TIMEOUT_HEADER)))

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """The base class's errors (malformed, too large, timed out) and ours: one line of text."""
        problem = self.problems.get(code, 'bad_request')
        self.server.exporter.scrape_error(problem)
        text = _shorten(' '.join((message or http.HTTPStatus(code).phrase).split()), 200)
        self.server.exporter.log(f'{code} for a request: {text}')
        self.close_connection = True
        self.request_version = 'HTTP/1.0'  # a status line even for a request that named no version
        self._answer(_one_line(code, text, problem))

    def _answer(self, answer: _Reply) -> None:
        data = answer.body.encode()
        try:
            self.send_response(answer.status)
            self.send_header('Content-Type', answer.content_type)
            self.send_header('Content-Length', str(len(data)))
            if answer.status == 405:
                self.send_header('Allow', 'GET')
            self.send_header('Connection', 'close')
            self.end_headers()
            self.wfile.write(data)
        except OSError:  # the scraper went away; the run's record is already kept
            self.close_connection = True

    def log_message(self, format: str, *args) -> None:  # noqa: A002 -- the base class's name
        pass  # each probe and each error is logged once, in the exporter's own words


class ExporterServer(http.server.ThreadingHTTPServer):
    """The exporter's HTTP server. It serves at most MAX_EXPORTER_CONNECTIONS connections at once (more get
    a short 503) and counts the requests it is answering, so that a stop can wait for them."""

    daemon_threads = True
    request_queue_size = 128  # connections the kernel holds until they are accepted

    def __init__(self, address: tuple[str, int], exporter: Exporter) -> None:
        self.address_family = socket.AF_INET6 if ':' in address[0] else socket.AF_INET
        self.exporter = exporter
        self._connections = threading.BoundedSemaphore(_MAX_EXPORTER_CONNECTIONS)
        self._busy = threading.Condition()
        self._answering = 0
        super().__init__(address, _ExporterHandler)

    @contextlib.contextmanager
    def serving(self):
        with self._busy:
            self._answering += 1
        try:
            yield
        finally:
            with self._busy:
                self._answering -= 1
                self._busy.notify_all()

    def wait_answered(self) -> None:
        """Until every request being answered has had its answer."""
        with self._busy:
            self._busy.wait_for(lambda: self._answering == 0)

    def process_request(self, request, client_address) -> None:
        if not self._connections.acquire(blocking=False):
            self.exporter.scrape_error('too_many_connections')
            try:
                request.sendall(b'HTTP/1.0 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n'
                                b'Content-Length: 33\r\nConnection: close\r\n\r\ntoo many connections to exporter\n')
            except OSError:
                pass
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._connections.release()

    def handle_error(self, request, client_address) -> None:
        if not isinstance(sys.exc_info()[1], OSError):  # a bug: show it; the exporter goes on
            super().handle_error(request, client_address)
