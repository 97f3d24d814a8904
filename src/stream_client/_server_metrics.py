"""The server's own metrics during a load (``--server-metrics``): scraped, kept, summarized.

``_parse_exposition()`` reads the Prometheus text format (0.0.4) strictly, sans-IO: any line that is not
a comment, a HELP or TYPE line or a well-formed sample fails the whole scrape, naming the line. A
``_Scraper`` thread scrapes at the start of each step of a load, every ``--metrics-interval`` seconds,
and at its end, each scrape bounded in time and size, and appends each one (its samples, or why it
failed) to its own evidence file; it never touches the load, whose runs go on whatever the endpoint
does. ``_MetricsSummary`` gives, per step, the increase of each counter and the max and mean of each gauge.
"""
import calendar
import html
import http.client
import json
import math
import os
import re
import threading
import time
from urllib.parse import urlsplit

from ._limits import _plain_number, _shorten, UsageError
from ._json import _json_text
from ._request import _check_url, _positive_finite, _ssl_context
from ._record import _utc_iso

_METRIC_NAME = re.compile(r'[a-zA-Z_:][a-zA-Z0-9_:]*')
_LABEL = re.compile(r'[ \t]*([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*"((?:[^"\\\n]|\\[\\"n])*)"[ \t]*')
_TYPES = ('counter', 'gauge', 'histogram', 'summary', 'untyped')
# The sample names of a family of each type, by their suffix. In the text format 0.0.4 a *_created series is a
# gauge family of its own (prometheus_client, and so vLLM, writes it with its own TYPE line), not a suffix.
_SUFFIXES = {'counter': ('', '_total'), 'gauge': ('',), 'untyped': ('',),
             'histogram': ('_bucket', '_sum', '_count'), 'summary': ('', '_sum', '_count')}
_NUMBER = re.compile(r'[+-]?(?:\d+\.?\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?|[Ii]nf|NaN)')
_MAX_SCRAPE_BYTES = 8 * 1024 * 1024
_SCRAPE_DEADLINE_S = 5.0        # a scrape takes at most this long, or the interval if that is shorter
_MIN_INTERVAL_S = 0.1


class _ExpositionError(ValueError):
    """A scrape that is not the Prometheus text format; the message names the line."""


def _value(text: str, number: int) -> float:
    if not _NUMBER.fullmatch(text):
        raise _ExpositionError(f'line {number}: {_shorten(repr(text), 40)} is not a sample value')
    return float(text)


def _parse_exposition(text: str) -> dict[str, dict]:
    """The families of a scrape in the text format 0.0.4: {name: {"type": ..., "samples": [[sample name,
    {label: value}, value], ...]}}, in order. _ExpositionError for anything else: a malformed line, a
    TYPE given twice or after its samples, a family split in two groups, a series given twice, a counter
    (a counter's sample, a histogram's bucket or count, a summary's count) below 0."""
    families: dict[str, dict] = {}
    owner: dict[str, str] = {}   # sample name -> its family, for the suffixes of typed families
    series: set = set()
    current = None
    for number, line in enumerate(text.split('\n'), 1):
        if not line.strip():
            continue
        if line.startswith('#'):
            parts = line[1:].strip(' \t').split(None, 2)
            if len(parts) >= 2 and parts[0] in ('HELP', 'TYPE'):
                if not _METRIC_NAME.fullmatch(parts[1]):
                    raise _ExpositionError(f'line {number}: {parts[0]} of {_shorten(repr(parts[1]), 40)}, not a '
                                           'metric name')
                if parts[0] == 'TYPE':
                    kind = parts[2].strip() if len(parts) == 3 else ''
                    if kind not in _TYPES:
                        raise _ExpositionError(f'line {number}: TYPE {_shorten(repr(kind), 20)} is not one of '
                                               f'{", ".join(_TYPES)}')
                    if parts[1] in families or parts[1] in owner:
                        raise _ExpositionError(f'line {number}: TYPE of {parts[1]} after its samples or twice')
                    families[parts[1]] = {'type': kind, 'samples': []}
                    for suffix in _SUFFIXES[kind]:
                        owner.setdefault(parts[1] + suffix, parts[1])
            continue
        name_match = _METRIC_NAME.match(line)
        if name_match is None:
            raise _ExpositionError(f'line {number}: a sample must start with a metric name: {_shorten(repr(line), 60)}')
        name, rest = name_match[0], line[name_match.end():]
        labels = {}
        if rest.startswith('{'):
            rest = rest[1:]
            while not rest.lstrip(' \t').startswith('}'):
                label = _LABEL.match(rest)
                if label is None:
                    raise _ExpositionError(f'line {number}: malformed labels: {_shorten(repr(line), 60)}')
                if label[1] in labels:
                    raise _ExpositionError(f'line {number}: label {label[1]} given twice')
                labels[label[1]] = re.sub(r'\\(.)', lambda m: '\n' if m[1] == 'n' else m[1], label[2])
                rest = rest[label.end():]
                if rest.startswith(','):
                    rest = rest[1:]
                elif not rest.startswith('}'):
                    raise _ExpositionError(f'line {number}: malformed labels: {_shorten(repr(line), 60)}')
            rest = rest.lstrip(' \t')[1:]
        fields = rest.split()
        if rest[:1] not in (' ', '\t') or not 1 <= len(fields) <= 2:
            raise _ExpositionError(f'line {number}: expected a value (and a timestamp) after the series: '
                                  f'{_shorten(repr(line), 60)}')
        value = _value(fields[0], number)
        if len(fields) == 2 and not re.fullmatch(r'-?\d+', fields[1]):
            raise _ExpositionError(f'line {number}: the timestamp {_shorten(repr(fields[1]), 30)} is not an integer')
        family = owner.get(name, name)
        if family not in families:
            families[family] = {'type': 'untyped', 'samples': []}
            owner[name] = family
        if current != family and families[family]['samples']:
            raise _ExpositionError(f'line {number}: the samples of {family} are not in one group')
        current = family
        kind = families[family]['type']
        if value < 0 and (kind == 'counter'
                          or kind in ('histogram', 'summary') and name.endswith(('_bucket', '_count'))):
            raise _ExpositionError(f'line {number}: {name}{labels or ""} is {value:g}, and a counter is never negative')
        key = (name, tuple(sorted(labels.items())))
        if key in series:
            raise _ExpositionError(f'line {number}: the series {name}{labels or ""} is given twice')
        series.add(key)
        families[family]['samples'].append([name, labels, value])
    return families


def _default_url(request_url: str) -> str:
    """vLLM's metrics: /metrics at the origin of the endpoint."""
    parts = urlsplit(request_url)
    return f'{parts.scheme}://{parts.netloc}/metrics'


def _metrics_settings(args, steps, request) -> dict | None:
    """--server-metrics and --metrics-interval, checked, with the file the scrapes go to; None without them."""
    if args.server_metrics is None:
        if args.metrics_interval is not None:
            raise UsageError('--metrics-interval needs --server-metrics')
        return None
    if steps is None:
        raise UsageError('--server-metrics watches a load: give --runs, --duration or --rates')
    interval = 1.0 if args.metrics_interval is None else args.metrics_interval
    if not _positive_finite(interval) or interval < _MIN_INTERVAL_S:
        raise UsageError(f'--metrics-interval must be at least {_MIN_INTERVAL_S} seconds, not {interval}')
    url = args.server_metrics or _default_url(request.url)
    try:
        parts, port = _check_url(url)
    except ValueError as exc:
        raise UsageError(f'--server-metrics: {exc}') from None
    path = _metrics_file(args.output)
    if os.path.abspath(path) in {os.path.abspath(name) for name in (args.output, args.report) if name}:
        raise UsageError(f'--server-metrics writes {path}, which is --output or --report: name them apart')
    context = _ssl_context(args.ca_file) if parts.scheme == 'https' else None
    return {'url': url, 'scheme': parts.scheme, 'host': parts.hostname, 'port': port,
            'path': parts.path or '/', 'interval': interval, 'file': path, 'context': context}


def _scrape(settings: dict, deadline_s: float) -> dict:
    """One GET of the metrics, bounded by deadline_s in all (each wait on the socket too) and by
    _MAX_SCRAPE_BYTES: the families, or why it failed (connect, timeout, status, too_large, format)."""
    begun = time.perf_counter()
    ends = begun + deadline_s
    cls = http.client.HTTPSConnection if settings['scheme'] == 'https' else http.client.HTTPConnection
    extra = {'context': settings['context']} if settings['scheme'] == 'https' else {}
    conn = cls(settings['host'], settings['port'], timeout=deadline_s, **extra)
    outcome: dict = {'ok': False, 'status': None, 'error_kind': None, 'error': None, 'families': None}
    try:
        conn.request('GET', settings['path'], headers={'Accept': 'text/plain;version=0.0.4',
                                                       'Accept-Encoding': 'identity'})
        response = conn.getresponse()
        outcome['status'] = response.status
        body = bytearray()
        while True:
            left = ends - time.perf_counter()
            if left <= 0:
                raise TimeoutError
            conn.sock.settimeout(left)
            piece = response.read1(65536)
            if not piece:
                break
            body += piece
            if len(body) > _MAX_SCRAPE_BYTES:
                outcome.update(error_kind='too_large', error=f'more than {_MAX_SCRAPE_BYTES} bytes')
                return outcome
        if response.status != 200:
            outcome.update(error_kind='status', error=f'status {response.status} {response.reason}')
            return outcome
        outcome.update(ok=True, families=_parse_exposition(body.decode('utf-8')))
    except (TimeoutError, OSError, http.client.HTTPException) as exc:
        timeout = isinstance(exc, TimeoutError) or 'timed out' in str(exc)
        outcome.update(error_kind='timeout' if timeout else 'connect',
                       error=f'no answer within {deadline_s:g} s' if timeout else f'{type(exc).__name__}: {exc}')
    except (_ExpositionError, UnicodeDecodeError) as exc:
        outcome.update(ok=False, families=None, error_kind='format', error=f'not the Prometheus text format: {exc}')
    finally:
        conn.close()
        outcome['duration_ms'] = round((time.perf_counter() - begun) * 1000, 3)
    return outcome


def _finite(value: float):
    """A sample value as JSON holds it: non-finite values as the strings the format writes."""
    return value if math.isfinite(value) else ('NaN' if math.isnan(value) else '+Inf' if value > 0 else '-Inf')


class _Scraper:
    """The scraping of a load: for each step, a thread of its own that scrapes at its start, every interval
    and at end(), each scrape appended to the evidence file as one JSON line as it ends. Its failures are
    noted there and counted, never raised. The thread starts at started(), which run_load() calls once its
    worker processes are forked, so that no fork happens while it runs."""

    def __init__(self, settings: dict, fd: int) -> None:
        self.settings = settings
        self.deadline_s = min(_SCRAPE_DEADLINE_S, max(1.0, settings['interval']))
        self.out = os.fdopen(fd, 'w', encoding='utf-8')
        self.summary = _MetricsSummary()
        self.condition = threading.Condition()
        self.step: int | None = None      # the step being watched (None: a load of one step)
        self.generation = 0               # the step's number here: a thread left from an earlier one stops
        self.asked: list[str] = []        # phases asked for and not yet scraped
        self.thread: threading.Thread | None = None
        self.number = 0
        self.started_at = time.perf_counter()

    def begin(self, step: int | None) -> None:
        """A step begins: its first scrape comes once started() is called."""
        with self.condition:
            self.step, self.asked = step, ['start']
            self.generation += 1

    def started(self) -> None:
        self.thread = threading.Thread(target=self._loop, args=(self.step, self.generation), name='server-metrics',
                                       daemon=True)
        self.thread.start()

    def end(self) -> None:
        """Ask for the step's last scrape and wait for it: at most a scrape's deadline for each scrape asked
        and not yet done, and a second. A thread still waiting on its endpoint then stops after that scrape."""
        if self.thread is None:
            return  # the step was cancelled before it started
        with self.condition:
            self.asked.append('end')
            waiting = len(self.asked) * self.deadline_s + 1
            self.condition.notify_all()
        self.thread.join(waiting)
        with self.condition:
            self.generation += 1
            self.condition.notify_all()
        self.thread = None

    def close(self):
        """Close the evidence file (a scrape still under way is not kept); the summary, and the drawing of the
        scrapes for the report."""
        with self.condition:
            self.generation += 1
            self.out.close()
            self.out = None
        return self.summary.result(self.settings), _timeline_drawing(self.summary.points)

    def _loop(self, step: int | None, generation: int) -> None:
        next_at = None
        while True:
            with self.condition:
                while self.generation == generation and not self.asked and (next_at is None or
                                                                            time.perf_counter() < next_at):
                    self.condition.wait(None if next_at is None else max(0.0, next_at - time.perf_counter()))
                if self.generation != generation:
                    return
                phase = self.asked[0] if self.asked else 'every'
            outcome = _scrape(self.settings, self.deadline_s)
            now = time.perf_counter()
            interval = self.settings['interval']
            if next_at is None:
                next_at = now + interval
            while next_at <= now:  # a slow scrape skips the times it overran
                next_at += interval
            self._keep(phase, step, now, outcome)
            with self.condition:
                if self.asked and self.asked[0] == phase:
                    self.asked.pop(0)
                self.condition.notify_all()
            if phase == 'end':
                return

    def _keep(self, phase: str, step: int, now: float, outcome: dict) -> None:
        self.number += 1
        at = _utc_iso(time.time())
        line = {'scrape': self.number, 'step': step, 'phase': phase,
                'at': at, 'offset_ms': round((now - self.started_at) * 1000, 3),
                'url': self.settings['url'], 'interval_s': self.settings['interval'], **outcome}
        if outcome['families'] is not None:
            line['families'] = {name: {'type': family['type'],
                                       'samples': [[name_, labels, _finite(value)] for name_, labels, value
                                                   in family['samples']]}
                                for name, family in outcome['families'].items()}
        self.summary.add(step, outcome, _epoch(at))
        with self.condition:
            if self.out is None:
                return
            try:
                self.out.write(_json_text(line) + '\n')
                self.out.flush()
            except OSError as exc:
                self.summary.write_error = exc.strerror or str(exc)


class _MetricsSummary:
    """Per step: each counter's increase (over its series, a decrease read as a restart from 0, so never
    below 0; a negative value is skipped) and each gauge's max and mean over the scrapes (a scrape's value
    is the sum over its series, or their max for a *_perc gauge, a share)."""

    def __init__(self) -> None:
        self.steps: dict = {}
        self.scrapes = self.failed = 0
        self.failures: dict[str, int] = {}
        self.write_error: str | None = None
        self.points: list[tuple[float, dict]] = []  # (epoch, {drawn gauge: value}) of each scrape that worked

    def add(self, step: int, outcome: dict, at: float | None = None) -> None:
        """One scrape of a step, taken at the epoch time at (drawn on the report's timeline when given)."""
        self.scrapes += 1
        if outcome['ok'] and at is not None and len(self.points) < _MAX_DRAWN_SCRAPES:
            self.points.append((at, {name: _gauge_value(name, outcome['families'][name]['samples'])
                                     for name, _, _ in _DRAWN if name in outcome['families']}))
        if not outcome['ok']:
            self.failed += 1
            self.failures[outcome['error_kind']] = self.failures.get(outcome['error_kind'], 0) + 1
        state = self.steps.setdefault(step, {'scrapes': 0, 'failed': 0, 'counters': {}, 'last': {}, 'gauges': {},
                                             'first_buckets': {}, 'last_buckets': {}})
        state['scrapes'] += 1
        if not outcome['ok']:
            state['failed'] += 1
            return
        for name, family in outcome['families'].items():
            if family['type'] == 'counter':
                name = name if name.endswith('_total') else name + '_total'  # as the samples name it
                total = state['counters'].setdefault(name, 0.0)
                for sample_name, labels, value in family['samples']:
                    if sample_name.endswith('_created') or not math.isfinite(value) or value < 0:
                        continue  # a negative value is no counter's (a scrape with one fails, as format)
                    key = (sample_name, tuple(sorted(labels.items())))
                    before = state['last'].get(key)
                    # as Prometheus's increase(): a value below the one before is a reset, counted from 0
                    total += 0.0 if before is None else value - before if value >= before else value
                    state['last'][key] = value
                state['counters'][name] = total
            elif family['type'] == 'histogram' and name.startswith('vllm:') and name.endswith('_seconds'):
                buckets = _buckets(family['samples'])
                state['first_buckets'].setdefault(name, buckets)
                state['last_buckets'][name] = buckets
            elif family['type'] == 'gauge' and not name.endswith('_created'):
                value = _gauge_value(name, family['samples'])
                if value is not None:
                    state['gauges'].setdefault(name, []).append(value)

    def result(self, settings: dict) -> dict:
        steps = [{'step': step, 'scrapes': state['scrapes'], 'failed': state['failed'],
                  'counters': {name: round(value, 6) for name, value in sorted(state['counters'].items())},
                  'gauges': {name: {'max': max(values), 'mean': round(sum(values) / len(values), 6),
                                    'scrapes': len(values)} for name, values in sorted(state['gauges'].items())},
                  'histograms': {name: _quantiles(state['first_buckets'][name], last)
                                 for name, last in sorted(state['last_buckets'].items())}}
                 for step, state in sorted(self.steps.items(), key=lambda item: item[0])]
        return {'url': settings['url'], 'file': settings['file'], 'interval_s': settings['interval'],
                'scrapes': self.scrapes, 'failed': self.failed, 'failures': dict(sorted(self.failures.items())),
                'write_error': self.write_error, 'steps': steps}


def _metrics_file(output: str) -> str:
    """Where the scrapes of a load whose --output is output are kept."""
    return os.path.splitext(output)[0] + '.server-metrics.jsonl'


def _saved_metrics(paths: list[str]):
    """The server metrics' summary of saved evidence, from the scrapes kept beside it, as the load printed it,
    and their drawing for the report (see _timeline_drawing); None when no file has them. UsageError for
    several (each load scraped its own; they are not merged) or for a file of scrapes that cannot be read."""
    kept = [_metrics_file(path) for path in paths if os.path.isfile(_metrics_file(path))]
    if not kept:
        return None
    if len(kept) > 1:
        raise UsageError(f'{" and ".join(kept)}: the server metrics of several loads are not merged; run --summary '
                         'on one file at a time to see each')
    summary, settings = _MetricsSummary(), {'url': None, 'file': kept[0], 'interval': None}
    try:
        with open(kept[0], encoding='utf-8') as file:
            for number, line in enumerate(file, 1):
                try:
                    scrape = json.loads(line)
                    families = scrape['families'] and {
                        name: {'type': family['type'], 'samples': [[name_, labels, float(value)]
                                                                   for name_, labels, value in family['samples']]}
                        for name, family in scrape['families'].items()}
                    summary.add(scrape['step'], {**scrape, 'families': families}, _epoch(scrape['at']))
                    settings.update(url=scrape['url'], interval=scrape['interval_s'])
                except (ValueError, KeyError, TypeError, AttributeError):
                    raise UsageError(f'{kept[0]} line {number} is not a scrape of --server-metrics') from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f'cannot read {kept[0]}: {getattr(exc, "strerror", None) or exc}') from None
    return summary.result(settings), _timeline_drawing(summary.points)


def _buckets(samples: list) -> dict[float, float]:
    """A histogram's cumulative counts by upper bound (le), summed over its series."""
    counts: dict[float, float] = {}
    for name, labels, value in samples:
        if name.endswith('_bucket') and 'le' in labels and math.isfinite(value):
            try:
                bound = float(labels['le'])
            except ValueError:
                continue
            counts[bound] = counts.get(bound, 0.0) + value
    return counts


def _quantiles(first: dict[float, float], last: dict[float, float]) -> dict:
    """The observations a histogram gained between two scrapes (a decrease read as a restart from 0): how
    many, and their p50, p90 and p99 in milliseconds, interpolated within their bucket as Prometheus's
    histogram_quantile() does (None in the +Inf bucket's range, or with no observation)."""
    bounds = sorted(last)
    gained = [last[bound] - first.get(bound, 0.0) for bound in bounds]
    if any(count < 0 for count in gained):
        gained = [last[bound] for bound in bounds]
    count = gained[-1] if bounds and bounds[-1] == math.inf else None
    result: dict = {'count': count}
    for q in (50, 90, 99):
        result[f'p{q}_ms'] = None
        if not count:
            continue
        rank, below, lower = q / 100 * count, 0.0, 0.0
        for bound, cumulative in zip(bounds, gained):
            if cumulative >= rank:
                if bound != math.inf:
                    share = (rank - below) / (cumulative - below) if cumulative > below else 1.0
                    result[f'p{q}_ms'] = round((lower + (bound - lower) * share) * 1000, 3)
                break
            below, lower = cumulative, bound
    return result


# The families a person reads first, in the terminal's table.
_SHOWN_GAUGES = ('vllm:num_requests_running', 'vllm:num_requests_waiting', 'vllm:kv_cache_usage_perc')
_SHOWN_COUNTERS = ('vllm:num_preemptions_total', 'vllm:prompt_tokens_total', 'vllm:generation_tokens_total')
_SHOWN_HISTOGRAMS = ('vllm:time_to_first_token_seconds', 'vllm:inter_token_latency_seconds',
                     'vllm:request_queue_time_seconds')


def _metrics_lines(result: dict) -> list[str]:
    """The server's metrics per step, for a person: the vLLM gauges' max and mean, the counters' increase."""
    lines = [f'server metrics from {result["url"]}: {result["scrapes"]} scrapes'
             + (f', {result["failed"]} failed (' + ', '.join(f'{kind} {count}' for kind, count
                                                            in result['failures'].items()) + ')'
                if result['failed'] else '') + f'; kept in {result["file"]}']
    for step in result['steps']:
        label = '' if step['step'] is None else f'step {step["step"]}: '
        gauges = [f'{name.split(":")[-1]} max {step["gauges"][name]["max"]:g} mean {step["gauges"][name]["mean"]:g}'
                  for name in _SHOWN_GAUGES if name in step['gauges']]
        counters = [f'{name.split(":")[-1]} +{step["counters"][name]:g}' for name in _SHOWN_COUNTERS
                    if name in step['counters']]
        if gauges or counters:
            lines.append(f'  {label}' + '; '.join(gauges + counters))
        times = [f'{name.split(":")[-1][:-len("_seconds")]} '
                 f'p50 {_plain_number(step["histograms"][name]["p50_ms"])} '
                 f'p99 {_plain_number(step["histograms"][name]["p99_ms"])} ms' for name in _SHOWN_HISTOGRAMS
                 if (step.get('histograms') or {}).get(name, {}).get('count')]
        if times:
            lines.append(f'  {label}as the server saw them: ' + '; '.join(times))
    return lines


def _epoch(at: str) -> float:
    """Seconds since the epoch of a scrape's at (UTC, millisecond precision), as a record's started_at is read."""
    return calendar.timegm(time.strptime(at[:19], '%Y-%m-%dT%H:%M:%S')) + int(at[20:23]) / 1000


def _gauge_value(name: str, samples: list) -> float | None:
    """A gauge's value in one scrape: the sum over its series, or their max for a *_perc gauge (a share)."""
    values = [value for _, _, value in samples if math.isfinite(value)]
    if not values:
        return None
    return max(values) if name.endswith('_perc') else sum(values)


# The gauges drawn under the report's timeline: (name, label, colour); a *_perc one on its own 0-100% scale.
_DRAWN = (('vllm:num_requests_running', 'running', '#0067a5'), ('vllm:num_requests_waiting', 'waiting', '#be0032'),
          ('vllm:kv_cache_usage_perc', 'KV cache usage', '#f38400'))
_MAX_DRAWN_SCRAPES = 20_000


def _timeline_drawing(points: list[tuple[float, dict]]):
    """A function that draws the scrapes' gauges on the report's timeline axis: (origin, span, x0, x1) -> HTML."""
    def draw(origin: float, span: float, x0: float, x1: float) -> str:
        if not points:
            return '<p>Server metrics: no scrape of them worked.</p>'
        height, scale = 100, (x1 - x0) / (span or 1.0)
        counts = [values[name] for _, values in points for name, _, _ in _DRAWN[:2] if values.get(name) is not None]
        top = max(counts + [1.0])
        out = [f'<p>The server\'s own gauges from {len(points)} scrapes (<code>--server-metrics</code>), on the '
               f'timeline\'s time axis: ' + ', '.join(
                   f'<span style="color:{colour}">{html.escape(label)}</span>' for _, label, colour in _DRAWN)
               + f' (running and waiting from 0 to {top:g}; KV cache usage dashed, from 0 to 100%).</p>',
               f'<svg viewBox="0 0 {x1 + 10:.0f} {height + 10}" width="{x1 + 10:.0f}" height="{height + 10}" '
               f'role="img" aria-label="server metrics">',
               f'<line x1="{x0}" y1="{height}" x2="{x1}" y2="{height}" stroke="#999"/>']
        for name, label, colour in _DRAWN:
            scale_top = 1.0 if name.endswith('_perc') else top
            line = [(min(x1, max(x0, x0 + (at - origin) * scale)),
                     height - min(values[name], scale_top) / scale_top * height)
                    for at, values in points if values.get(name) is not None]
            if line:
                dash = ' stroke-dasharray="4 3"' if name.endswith('_perc') else ''
                out.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.5"{dash} points="'
                           + ' '.join(f'{x:.1f},{y:.1f}' for x, y in line) + f'"><title>{html.escape(label)}'
                           f'</title></polyline>')
        return '\n'.join(out) + '</svg>'
    return draw
