"""A load's figures as OpenTelemetry's GenAI client metrics, sans-IO: records in, Prometheus text and OTLP/JSON out.

``_LoadMetrics`` is an observer: ``started()`` as a run begins and ``add(record)`` as it ends keep the
convention's histograms and counters (open-telemetry/semantic-conventions-genai, docs/gen-ai/client-inference.md
and gen-ai-token-metrics.md) and the load's own counts; ``_prometheus_text()`` and ``_otlp_request()`` render a
copy of them at a time the caller gives. docs/formats.md maps each figure and says where ours differ.
"""
import bisect
import math
import typing
from urllib.parse import urlsplit

from ._limits import __version__
from ._gates import _UNCLASSIFIED
from ._summary import _meets_slos

# The conventions' explicit bucket boundaries: seconds for the times, tokens for the per-operation counts.
_SECONDS_BOUNDS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)
_TOKEN_BOUNDS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864)


class _Instrument(typing.NamedTuple):
    """One metric: its OpenTelemetry name, kind (histogram, counter, or updown: a sum that can fall), unit
    (UCUM) and description, and a histogram's bucket boundaries."""

    name: str
    kind: str
    unit: str
    description: str
    bounds: tuple = ()


_DURATION = _Instrument('gen_ai.client.inference.duration', 'histogram', 's',
                        'GenAI client inference operation duration: start of the run (before the connection) to its '
                        'end; failed runs carry error.type', _SECONDS_BOUNDS)
_FIRST_CHUNK = _Instrument('gen_ai.client.inference.time_to_first_chunk', 'histogram', 's',
                           'Start of the run to the first content event (visible text or a piece of a tool call)',
                           _SECONDS_BOUNDS)
_PER_CHUNK = _Instrument('gen_ai.client.inference.time_per_output_chunk', 'histogram', 's',
                         'Gaps between consecutive content events, one per content event after the first',
                         _SECONDS_BOUNDS)
_INPUT_TOKENS = _Instrument('gen_ai.client.inference.usage.input_tokens', 'counter', '{token}',
                            'Input (prompt) tokens as the server\'s usage reported them')
_OUTPUT_TOKENS = _Instrument('gen_ai.client.inference.usage.output_tokens', 'counter', '{token}',
                             'Output (completion) tokens as the server\'s usage reported them')
_OPERATION_INPUT = _Instrument('gen_ai.client.inference.operation.input_tokens', 'histogram', '{token}',
                               'Input tokens per run, where the server reported them', _TOKEN_BOUNDS)
_OPERATION_OUTPUT = _Instrument('gen_ai.client.inference.operation.output_tokens', 'histogram', '{token}',
                                'Output tokens per run, where the server reported them', _TOKEN_BOUNDS)
_STARTED = _Instrument('stream_client.runs.started', 'counter', '{run}', 'Runs of the load started (warm-ups too)')
_IN_FLIGHT = _Instrument('stream_client.runs.in_flight', 'updown', '{run}', 'Runs started and not yet ended')
_FINISHED = _Instrument('stream_client.runs.finished', 'counter', '{run}',
                        'Runs ended, warm-ups left out, by verdict (ok: verified finished) and failure kind '
                        '(error.type, docs/failures.md)')
_GOOD = _Instrument('stream_client.runs.good', 'counter', '{run}',
                    'Runs ok and within every --slo bound (all ok runs without --slo): goodput is its rate')
_WARMUP = _Instrument('stream_client.runs.warmup', 'counter', '{run}', 'Warm-up runs ended, left out of the figures')
_INSTRUMENTS = (_DURATION, _FIRST_CHUNK, _PER_CHUNK, _INPUT_TOKENS, _OUTPUT_TOKENS, _OPERATION_INPUT,
                _OPERATION_OUTPUT, _STARTED, _IN_FLIGHT, _FINISHED, _GOOD, _WARMUP)

# The API's operation and provider, as the convention names them: the provider is the protocol's vendor, since
# the record knows which protocol answered, not which engine served it.
_OPERATIONS = {'chat': 'chat', 'completions': 'text_completion', 'responses': 'chat', 'messages': 'chat'}
_PROVIDERS = {'chat': 'openai', 'completions': 'openai', 'responses': 'openai', 'messages': 'anthropic'}
_DEFAULT_PORTS = {'http': 80, 'https': 443}
_RESOURCE = (('service.name', 'stream-client'), ('service.version', __version__))
_SCOPE = 'stream_client'
_EXPOSITION_TYPE = 'text/plain; version=0.0.4; charset=utf-8'
_CUMULATIVE = 2  # AggregationTemporality.AGGREGATION_TEMPORALITY_CUMULATIVE: OTLP/JSON writes enums as integers


class _Histogram:
    """One attribute set's explicit-bucket histogram: counts per bucket (upper bound inclusive, and one
    above the last bound), their sum, min and max."""

    __slots__ = ('counts', 'sum', 'min', 'max')

    def __init__(self, buckets: int) -> None:
        self.counts = [0] * buckets
        self.sum, self.min, self.max = 0.0, math.inf, -math.inf

    def copy(self) -> '_Histogram':
        other = _Histogram(0)
        other.counts, other.sum, other.min, other.max = list(self.counts), self.sum, self.min, self.max
        return other


class _LoadMetrics:
    """The GenAI client metrics of a load and its own run counts, kept as its records end. Warm-up runs
    (``record['warmup']``) are counted apart and left out of every figure, as the summary leaves them out.
    ``slos`` are the --slo bounds good runs meet (None: each record's load's, as the summary reads them)."""

    def __init__(self, slos: tuple | None = None) -> None:
        self.slos = slos
        self.points: dict[_Instrument, dict[tuple, object]] = {instrument: {} for instrument in _INSTRUMENTS}
        self.points[_STARTED][()] = self.points[_WARMUP][()] = self.points[_GOOD][()] = 0
        self._servers: dict[str, tuple] = {}  # url: its server.address and server.port attributes

    def started(self) -> None:
        """A run of the load began."""
        self.points[_STARTED][()] += 1

    def add(self, record: dict) -> None:
        """A run ended: its record, as the evidence file has it."""
        if record.get('warmup'):
            self.points[_WARMUP][()] += 1
            return
        base = self._attributes(record)
        failed = () if record['ok'] else (('error.type', record.get('error_kind') or _UNCLASSIFIED),)
        self._count(_FINISHED, base + (('stream_client.verdict', 'ok' if record['ok'] else 'not_ok'),) + failed, 1)
        load = record.get('load') or {}
        slos = self.slos if self.slos is not None else tuple(sorted((load.get('slo') or {}).items()))
        if record['ok'] and _meets_slos(record, slos):
            self.points[_GOOD][()] += 1
        self._add_times(record, base + failed)
        self._add_usage(record, base + failed)

    def _add_times(self, record: dict, attributes: tuple) -> None:
        """The run's duration, its first content event and the gaps between its content events, in seconds."""
        if record.get('duration_ms') is not None:
            self._observe(_DURATION, attributes, record['duration_ms'] / 1000)
        if record.get('first_text_ms') is not None:
            self._observe(_FIRST_CHUNK, attributes, record['first_text_ms'] / 1000)
        for gap in record.get('event_gaps_ms') or ():
            self._observe(_PER_CHUNK, attributes, gap / 1000)

    def _add_usage(self, record: dict, attributes: tuple) -> None:
        """The server's token counts: a count for every run, as the convention asks (0 under modality unknown
        where no usage came), and the per-run distribution where it came."""
        for counter, histogram, field in ((_INPUT_TOKENS, _OPERATION_INPUT, 'prompt_tokens'),
                                          (_OUTPUT_TOKENS, _OPERATION_OUTPUT, 'completion_tokens')):
            tokens = record.get(field)
            counted = isinstance(tokens, int) and not isinstance(tokens, bool) and tokens >= 0
            self._count(counter, attributes + (('gen_ai.token.modality', 'text' if counted else 'unknown'),),
                        tokens if counted else 0)
            if counted:
                self._observe(histogram, attributes, tokens)

    def _attributes(self, record: dict) -> tuple:
        api = record.get('api') or 'chat'
        attributes = (('gen_ai.operation.name', _OPERATIONS.get(api, api)),
                      ('gen_ai.provider.name', _PROVIDERS.get(api, api)))
        if record.get('model'):
            attributes += (('gen_ai.request.model', record['model']),)
        return attributes + self._server(record.get('url') or '')

    def _server(self, url: str) -> tuple:
        """server.address and server.port of a URL (none when it names no host); the URL never holds
        credentials, and nothing else of it is kept."""
        if url not in self._servers:
            try:
                parts = urlsplit(url)
                port = parts.port or _DEFAULT_PORTS.get(parts.scheme)
            except ValueError:
                parts, port = None, None
            self._servers[url] = (('server.address', parts.hostname), ('server.port', port)) \
                if parts is not None and parts.hostname and port else ()
        return self._servers[url]

    def _count(self, instrument: _Instrument, attributes: tuple, value: int) -> None:
        points = self.points[instrument]
        points[attributes] = points.get(attributes, 0) + value

    def _observe(self, instrument: _Instrument, attributes: tuple, value: float) -> None:
        points = self.points[instrument]
        histogram = points.get(attributes)
        if histogram is None:
            histogram = points[attributes] = _Histogram(len(instrument.bounds) + 1)
        histogram.counts[bisect.bisect_left(instrument.bounds, value)] += 1
        histogram.sum += value
        histogram.min, histogram.max = min(histogram.min, value), max(histogram.max, value)

    def in_flight(self) -> int:
        """Runs started and not yet ended (0 when the driver says nothing of starts)."""
        ended = self.points[_WARMUP][()] + sum(self.points[_FINISHED].values())
        return max(0, self.points[_STARTED][()] - ended)

    def copy(self) -> '_LoadMetrics':
        """A copy to render while the load goes on adding to this one."""
        other = _LoadMetrics(self.slos)
        other.points = {instrument: {attributes: point.copy() if isinstance(point, _Histogram) else point
                                     for attributes, point in points.items()}
                        for instrument, points in self.points.items()}
        other.points[_IN_FLIGHT] = {(): self.in_flight()}
        return other


# ---- the Prometheus text exposition format 0.0.4, under OpenTelemetry's translation of the names ----

def _label_value(value: str) -> str:
    return value.replace('\\', r'\\').replace('"', r'\"').replace('\n', r'\n')


def _sample_value(value: float) -> str:
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return 'NaN'
    if math.isinf(value):
        return '+Inf' if value > 0 else '-Inf'
    return repr(value)


def _prometheus_name(instrument: _Instrument) -> str:
    """The name Prometheus reads: dots to underscores, the unit's word added (seconds; a unit in braces is
    an annotation and adds nothing), and _total after a counter's."""
    name = instrument.name.replace('.', '_')
    unit = {'s': 'seconds'}.get(instrument.unit)
    if unit and not name.endswith('_' + unit):
        name += '_' + unit
    return name + '_total' if instrument.kind == 'counter' else name


def _label_pairs(attributes: tuple) -> str:
    return ','.join(f'{key.replace(".", "_")}="{_label_value(str(value))}"' for key, value in attributes)


def _bound_text(bound: float) -> str:
    return '+Inf' if bound == math.inf else str(bound) if isinstance(bound, int) else repr(float(bound))


def _prometheus_text(metrics: _LoadMetrics) -> str:
    """The metrics (a copy: ``_LoadMetrics.copy()``) in the text exposition format 0.0.4: target_info with
    the resource's attributes, then each metric's HELP and TYPE and its samples (a histogram's cumulative
    _bucket lines with le, its _sum and _count)."""
    lines = ['# HELP target_info Target metadata', '# TYPE target_info gauge',
             f'target_info{{{_label_pairs(_RESOURCE)}}} 1']
    for instrument in _INSTRUMENTS:
        points = metrics.points[instrument]
        if not points:
            continue
        name = _prometheus_name(instrument)
        kind = {'updown': 'gauge'}.get(instrument.kind, instrument.kind)
        lines += [f'# HELP {name} {instrument.description}', f'# TYPE {name} {kind}']
        les = [f'le="{_bound_text(bound)}"}} ' for bound in instrument.bounds + (math.inf,)]
        for attributes, point in sorted(points.items(), key=lambda item: [str(part) for part in item[0]]):
            pairs = _label_pairs(attributes)
            labels = f'{{{pairs}}}' if pairs else ''
            if instrument.kind != 'histogram':
                lines.append(f'{name}{labels} {_sample_value(point)}')
                continue
            bucket, seen = f'{name}_bucket{{{pairs},' if pairs else f'{name}_bucket{{', 0
            for le, count in zip(les, point.counts):
                seen += count
                lines.append(f'{bucket}{le}{seen}')
            lines.append(f'{name}_sum{labels} {_sample_value(float(point.sum))}')
            lines.append(f'{name}_count{labels} {seen}')
    return '\n'.join(lines) + '\n'


# ---- OTLP/JSON: the protobuf JSON mapping of ExportMetricsServiceRequest ----

def _any_value(value: object) -> dict:
    """A KeyValue's value: 64-bit integers as JSON strings, as the protobuf JSON mapping writes them."""
    if isinstance(value, int) and not isinstance(value, bool):
        return {'intValue': str(value)}
    return {'stringValue': str(value)}


def _key_values(attributes: tuple) -> list:
    return [{'key': key, 'value': _any_value(value)} for key, value in attributes]


def _data_point(instrument: _Instrument, attributes: tuple, point, start_ns: int, now_ns: int) -> dict:
    times = {'attributes': _key_values(attributes), 'startTimeUnixNano': str(start_ns), 'timeUnixNano': str(now_ns)}
    if instrument.kind != 'histogram':
        return {**times, 'asInt': str(point)}
    return {**times, 'count': str(sum(point.counts)), 'sum': point.sum,
            'bucketCounts': [str(count) for count in point.counts], 'explicitBounds': list(instrument.bounds),
            'min': point.min, 'max': point.max}


def _otlp_request(metrics: _LoadMetrics, start_ns: int, now_ns: int) -> dict:
    """The metrics (a copy) as one ExportMetricsServiceRequest in the protobuf JSON mapping (what the
    Collector's file receiver reads a line of, and OTLP/HTTP takes as JSON): cumulative sums and histograms
    from start_ns (the load's start) to now_ns, in nanoseconds since the epoch."""
    out = []
    for instrument in _INSTRUMENTS:
        points = metrics.points[instrument]
        if not points:
            continue
        data = [_data_point(instrument, attributes, point, start_ns, now_ns) for attributes, point in points.items()]
        if instrument.kind == 'histogram':
            body = {'histogram': {'dataPoints': data, 'aggregationTemporality': _CUMULATIVE}}
        else:
            body = {'sum': {'dataPoints': data, 'aggregationTemporality': _CUMULATIVE,
                            'isMonotonic': instrument.kind == 'counter'}}
        out.append({'name': instrument.name, 'description': instrument.description, 'unit': instrument.unit, **body})
    return {'resourceMetrics': [{'resource': {'attributes': _key_values(_RESOURCE)},
                                 'scopeMetrics': [{'scope': {'name': _SCOPE, 'version': __version__},
                                                   'metrics': out}]}]}
