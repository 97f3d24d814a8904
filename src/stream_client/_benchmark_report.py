"""The llm-d Benchmark Report (v0.2.1) of a load, sans-IO.

``_llm_d_report()`` turns a ``Summary`` and the ``_ReportFacts`` of the same records into the report's
dict: the counts, latencies and throughputs the summary measures in the schema's fields, what a client
cannot know (the GPU, the engine's configuration) null, and what the schema has no field for (verdicts
by kind, goodput, the rule that the figures cover verified answers only) in ``results.observability``'s
``metadata``, the one object under ``results`` the schema leaves open (docs/formats.md).
"""
import array
import datetime
import hashlib
import statistics

from ._summary import Summary

_BR_VERSION = '0.2.1'
_TOOL = 'stream-client'
# The Statistics percentiles, by the schema's names, in per mille (nearest rank, as the summary's own).
_PER_MILLE = (('p0p1', 1), ('p1', 10), ('p5', 50), ('p10', 100), ('p25', 250), ('p50', 500), ('p75', 750),
              ('p90', 900), ('p95', 950), ('p99', 990), ('p99p9', 999))
_DIGITS = 6  # seconds to the microsecond: the records' milliseconds have three decimals

# How each of the summary's figures sits in the schema's field, said in the report itself.
_MAPPING = {
    'requests.total': 'runs: every run of the load that has a record, warm-up runs left out',
    'requests.failures': 'runs not ok for any reason but an interruption: an error status, a cut or malformed '
                         'stream, an unfinished answer, a timeout (their kinds: verdicts.not_ok_by_kind, '
                         'docs/failures.md)',
    'requests.incomplete': 'runs stopped by the client (error_layer interrupted: SIGINT, SIGTERM, a cancelled '
                           'load); runs planned but never started are verdicts.not_started',
    'latency.time_to_first_token': 'first_text_ms: from just before the connection opened (name resolution '
                                   'included) to the first content event with visible text or a piece of a '
                                   'tool call, on the client; not the first token the engine generated (a role '
                                   'event or reasoning text comes earlier and does not count)',
    'latency.inter_token_latency': 'event_gaps_ms: gaps between consecutive content events as read, pooled over '
                                   'verified runs; one event may carry several tokens and one read several '
                                   'events (a gap of 0), so this is time per content event, not per token. '
                                   'Percentiles are upper bounds of 1%-wide buckets; the mean is exact',
    'latency.request_latency': 'duration_ms: from just before the connection opened to the end of the HTTP '
                               'message',
    'requests.input_length': "prompt_tokens as the server's usage reported them, of verified runs that have one",
    'requests.output_length': "completion_tokens as the server's usage reported them, of verified runs that "
                              'have one',
    'throughput.request_rate': 'verified answers per second of the wall time from the first start to the last '
                               'end (ok_runs_per_s); every run: rates.runs_per_s',
    'throughput.output_token_rate': 'completion tokens of verified runs per second of the same wall time',
    'throughput.input_token_rate': 'prompt tokens of verified runs per second of the same wall time',
}
_COVERS = ('Every latency, length and throughput figure covers verified answers only: runs whose HTTP message, '
           'event stream and answer all completed (ok true in the evidence). A failed or interrupted run counts '
           'in requests and in verdicts, never in a latency figure.')
_UNKNOWN = {
    'scenario.stack': 'null: the accelerator, its count, the parallelism and the engine configuration are not '
                      'visible from the client (the schema requires all of them of an inference engine)',
    'scenario.load': 'null when no verified run reported its prompt tokens: the schema requires an input '
                     'sequence length, and the client does not count tokens',
    'latency.time_per_output_token': 'absent: the client sees events, not tokens',
    'latency.normalized_time_per_output_token': 'absent: the client sees events, not tokens',
    'run.cid, run.pid, run.user': 'null: not recorded in the evidence',
}


class _ReportFacts:
    """What the report reads from the records besides the summary: the loads' settings, the client's
    version, and the token counts of the runs the summary's latencies cover (ok, not warm-up)."""

    def __init__(self) -> None:
        self.loads: dict[str, dict] = {}  # the load block of each load, by its id
        self.versions: set[str] = set()
        self.prompt_tokens = array.array('d')
        self.completion_tokens = array.array('d')

    def add(self, record: dict) -> None:
        load = record.get('load')
        if load and 'id' in load:
            self.loads.setdefault(load['id'], load)
        self.versions.add((record.get('client') or {}).get('version') or 'unknown')
        if record.get('warmup') or not record['ok']:
            return
        for counts, field in ((self.prompt_tokens, 'prompt_tokens'), (self.completion_tokens, 'completion_tokens')):
            if record.get(field) is not None:
                counts.append(record[field])


def _statistics(values, units: str, scale: float = 1.0) -> dict | None:
    """The schema's Statistics of values (times scale): mean, standard deviation, min, the percentiles
    (nearest rank) and max; None when there are none."""
    ordered = sorted(values)
    if not ordered:
        return None
    count = len(ordered)
    figures = {'mean': statistics.fmean(ordered), 'stddev': statistics.pstdev(ordered), 'min': ordered[0],
               **{name: ordered[max(0, -(-per_mille * count // 1000) - 1)] for name, per_mille in _PER_MILLE},
               'max': ordered[-1]}
    return {'units': units, **{name: round(value * scale, _DIGITS) for name, value in figures.items()}}


def _gap_statistics(summary: Summary) -> dict | None:
    """inter_token_latency from the summary's pooled content-event gaps, in seconds."""
    gaps = summary.gaps
    if not gaps.count:
        return None
    figures = {'mean': gaps.total / gaps.count,
               **{name: gaps.percentile(per_mille / 10) for name, per_mille in _PER_MILLE}, 'max': gaps.max}
    return {'units': 's/token', **{name: round(value / 1000, _DIGITS) for name, value in figures.items()}}


def _rate(count: float, wall: float) -> dict | None:
    """A token rate over the wall time, rounded as the summary's rates; None without tokens or time."""
    return {'units': 'tokens/s', 'mean': round(count / wall, 3)} if wall > 0 and count else None


def _stamp(epoch: float) -> str:
    """An instant as RFC 3339 in UTC, to the millisecond, as the records' started_at."""
    ms = round(epoch * 1000)
    instant = datetime.datetime(1970, 1, 1) + datetime.timedelta(milliseconds=ms)
    return instant.strftime('%Y-%m-%dT%H:%M:%S') + f'.{ms % 1000:03d}Z'


def _one(values) -> object:
    """The value every load shares, or None when they differ or none has one."""
    distinct = {value for value in values if value is not None}
    return distinct.pop() if len(distinct) == 1 else None


def _report_run(summary: Summary, result: dict, facts: _ReportFacts) -> dict:
    """run: an id derived from the evidence (the same records give the same report), the plan's id as the
    experiment's, and the time from the first start to the last end."""
    plan = _one((load.get('plan') or {}).get('id') for load in facts.loads.values())
    start = _stamp(summary.first_start) if result['runs'] else None
    identity = '\n'.join([*sorted(facts.loads), str(result['runs']), str(start)])
    models = [model for model in result['models'] if model is not None]
    return {'uid': hashlib.sha256(identity.encode()).hexdigest()[:32], 'eid': plan, 'cid': None, 'pid': None,
            'time': {'start': start, 'end': _stamp(summary.last_end) if result['runs'] else None,
                     'duration': f'PT{result["wall_s"]:.3f}S'},
            'user': None,
            'description': f'{", ".join(models) or "no model"} [{plan or "stream-client --summary"}]'}


def _sequence_length(values) -> dict | None:
    """input_seq_len from the prompt tokens reported: fixed when all equal, else other with its range."""
    if not values:
        return None
    low, high = int(min(values)), int(max(values))
    if low == high:
        return {'distribution': 'fixed', 'value': low}
    return {'distribution': 'other', 'value': round(statistics.fmean(values), 3), 'min': low, 'max': high}


def _scenario(facts: _ReportFacts) -> dict:
    """scenario: no stack (a client cannot see it); the load, when the schema's required input sequence
    length is known from the server's usage."""
    input_seq_len = _sequence_length(facts.prompt_tokens)
    if input_seq_len is None:
        return {'stack': None, 'load': None}
    loads = list(facts.loads.values())
    shards = _one((load.get('plan') or {}).get('shards') for load in loads) or 1
    processes = _one(load.get('processes') for load in loads) or 1
    concurrency = _one(load.get('concurrency') for load in loads)
    standardized = {'tool': _TOOL, 'tool_version': ', '.join(sorted(facts.versions)) or 'unknown',
                    'parallelism': shards * processes, 'source': 'unknown',
                    'stage': _one(load.get('step') for load in loads) or 0, 'input_seq_len': input_seq_len,
                    'multi_turn': {'enabled': True} if any('sessions' in load for load in loads) else None,
                    'rate_qps': _one(load.get('rate') for load in loads),
                    'concurrency': concurrency and concurrency * shards}
    shared = {name: _one(load.get(name) for load in loads) for name in ('runs', 'concurrency', 'rate', 'duration')}
    settings = [f'{name} {value:g}' for name, value in shared.items() if value is not None]
    parts = [_TOOL, ', '.join(settings), f'({len(loads)} loads)' if len(loads) > 1 else '']
    description = ' '.join(part for part in parts if part)
    return {'stack': None, 'load': {'metadata': {'schema_version': '0.0.1', 'cfg_id': None, 'description': description},
                                    'standardized': standardized, 'native': {}}}


def _requests(result: dict, facts: _ReportFacts) -> dict:
    """Every run, those that failed and those the client stopped, and the token counts of verified runs."""
    incomplete = result['not_ok_by_layer'].get('interrupted', 0)
    return {'total': result['runs'], 'failures': result['not_ok'] - incomplete, 'incomplete': incomplete,
            'input_length': _statistics(facts.prompt_tokens, 'count'),
            'output_length': _statistics(facts.completion_tokens, 'count')}


def _throughput(summary: Summary, result: dict, facts: _ReportFacts) -> dict:
    """The rates over the summary's wall time (its first start to its last end, unrounded)."""
    wall = summary.last_end - summary.first_start if result['runs'] else 0.0
    prompt, completion = sum(facts.prompt_tokens), sum(facts.completion_tokens)
    both = facts.prompt_tokens and facts.completion_tokens
    return {'input_token_rate': _rate(prompt, wall), 'output_token_rate': _rate(completion, wall),
            'total_token_rate': _rate(prompt + completion, wall) if both else None,
            'request_rate': None if result['ok_runs_per_s'] is None else
            {'units': 'queries/s', 'mean': result['ok_runs_per_s']}}


def _metadata(result: dict, facts: _ReportFacts) -> dict:
    """What the schema has no field for: the verified-only rule, every verdict by layer and kind, goodput,
    the rates of every run, how each figure maps, what is unknown, and the loads' settings."""
    sweep = {key: result[key] for key in ('steps', 'concurrency_steps', 'repeats') if result.get(key)}
    return {'tool': _TOOL, 'covers': _COVERS,
            'verdicts': {'runs': result['runs'], 'ok': result['ok'], 'not_ok': result['not_ok'],
                         'interrupted': result['not_ok_by_layer'].get('interrupted', 0),
                         'planned_runs': result['planned_runs'],
                         'not_started': max(0, result['planned_runs'] - result['runs']),
                         'warmup_runs': result['warmup_runs'],
                         'not_ok_by_layer': result['not_ok_by_layer'], 'not_ok_by_kind': result['not_ok_by_kind'],
                         'stale_connection_failures': result['stale_connection_failures']},
            'goodput': {key: result[key] for key in ('slo', 'good', 'goodput_per_s', 'slo_attainment',
                                                     'first_chunk_good')},
            'rates': {key: result[key] for key in ('wall_s', 'runs_per_s', 'ok_runs_per_s', 'mean_in_flight',
                                                   'content_events_per_s')},
            'apis': result['apis'], 'models': result['models'], 'sources': result['sources'],
            'mapping': _MAPPING, 'unknown': _UNKNOWN,
            'loads': [facts.loads[key] for key in sorted(facts.loads)], **sweep}


def _llm_d_report(summary: Summary, facts: _ReportFacts) -> dict:
    """The llm-d Benchmark Report v0.2.1 of the records summary and facts were both given."""
    result = summary.result()
    latency = {'time_to_first_token': _statistics(summary.latency['first_text_ms'], 's', 0.001),
               'inter_token_latency': _gap_statistics(summary),
               'request_latency': _statistics(summary.latency['duration_ms'], 's', 0.001)}
    return {'version': _BR_VERSION, 'run': _report_run(summary, result, facts), 'scenario': _scenario(facts),
            'results': {'request_performance': {'aggregate': {'requests': _requests(result, facts),
                                                              'latency': latency,
                                                              'throughput': _throughput(summary, result, facts)}},
                        'observability': {'metadata': _metadata(result, facts)}}}
