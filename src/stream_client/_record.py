"""The evidence record of one run.

``_build_record()`` turns an exchange and its verdict into the record that is
written to disk: the answer, the timings, the HTTP facts, never a key or a
header value.
"""
import dataclasses
import os
import sys
import time

from ._limits import _failure, _REPLAY_HEADER, _StaleConnectionError, StreamError, __version__
from ._validator import AnswerSpec
from ._answer import _tokens_per_event
from ._http import _content_length, _ResponseHead
from ._reader import _public_headers
from ._request import PreparedRequest
from ._exchange import _Exchange
from ._verdict import judge


def _build_record(x: _Exchange) -> dict:
    """The JSON evidence record of a run (never contains the API key)."""
    verdict = judge(x.reader, x.failure, x.cross_check)
    timeline, request, reader = x.timeline, x.request, x.reader
    ended = timeline.ended if timeline.ended is not None else time.perf_counter()
    answer = reader.validator.fields()
    head = reader.head
    record = {
        'ok': verdict.ok,
        'error_layer': verdict.layer,
        'error_kind': verdict.kind,
        'error': f'{verdict.layer}: {verdict.message}' if verdict.layer else None,
        'transport_complete': verdict.transport_complete,
        'event_complete': verdict.event_complete,
        'application_complete': verdict.application_complete,
        'api': request.api,
        'model': request.model,
        'text': answer['text'],
        'reasoning_text': answer['reasoning_text'],
        'finish_reason': answer['finish_reason'],
        'response_status': answer['response_status'],
        'incomplete_reason': answer['incomplete_reason'],
        'answer_kind': answer['answer_kind'],
        'tool_calls': answer['tool_calls'],
        'skipped_events': answer['skipped_events'],
        'refusal': answer['refusal'],
        'dialect': answer['dialect'],
        'stray_lines': list(reader.events.stray),
        'notes': answer['notes'],
        'unchecked_schema_keywords': request.spec.unchecked(),
        'done': answer['done'],
        'completion_tokens': answer['completion_tokens'],
        'prompt_tokens': answer['prompt_tokens'],
        'content_events': answer['content_events'],
        'data_events': answer['data_events'],
        'headers_ms': timeline.ms(timeline.headers_at),
        'first_event_ms': timeline.ms(timeline.first_event_at),
        'first_reasoning_ms': timeline.ms(timeline.first_reasoning_at),
        'first_text_ms': timeline.ms(timeline.first_text_at),
        'duration_ms': timeline.ms(ended),
        'event_gaps_ms': [round(gap * 1e6) / 1000 for gap in timeline.gaps],  # to the µs, quicker than round(ms, 3)
        'mean_event_gap_ms': round(sum(timeline.gaps) / len(timeline.gaps) * 1000, 3) if timeline.gaps else None,
        'max_event_gap_ms': round(max(timeline.gaps) * 1000, 3) if timeline.gaps else None,
        'reads': reader.reads,
        'content_reads': timeline.content_reads,
        'max_content_events_per_read': timeline.max_content_events_per_read,
        'read_stamps': timeline.read_stamps,
        'content_span_ms': _span_ms(timeline.first_text_at, timeline.last_text_at),
        'buffered_delivery': _buffered_delivery(answer['content_events'], timeline.content_reads),
        'tokens_per_event': _tokens_per_event(reader.validator),
        'cross_check': x.cross_check,
        'response_id': answer['response_id'],
        'request_id': head.get('x-request-id') if head else None,
        'server_error': x.failure.server_error if x.failure is not None else None,
        'http': _http_facts(head, reader.body),
        'connection': _connection_facts(x),
        'proxy': request.proxy.facts() if request.proxy is not None else None,
        'source': _run_source(x),
        'url': request.url,
        'request': dict(request.settings),
        'started_at': _utc_iso(timeline.started_wall),
        'client': {'version': __version__, 'python': _PYTHON_VERSION, 'platform': _PLATFORM},
        'capture': None if reader.capture is None else {'bytes': len(reader.capture.data),
                                                        'truncated': reader.capture.truncated},
    }
    return _redact(record, request.secrets())


_MIN_EVENTS_FOR_BUFFERING_HINT = 8   # fewer content events than this: too short to tell
_BUFFERED_EVENTS_PER_READ = 4        # content events per content-carrying read that mean "held back"


def _buffered_delivery(content_events: int, content_reads: int) -> bool | None:
    """Whether the text arrived in bursts, as a proxy that holds the stream back delivers it.

    None (cannot tell) under MIN_EVENTS_FOR_BUFFERING_HINT content events: a
    short answer often fits one TCP segment even straight from the server.
    Otherwise true when the reads that carried text carried, on average, at
    least BUFFERED_EVENTS_PER_READ content events each.
    """
    if content_events < _MIN_EVENTS_FOR_BUFFERING_HINT:
        return None
    return content_events >= _BUFFERED_EVENTS_PER_READ * content_reads


def _connection_facts(x: _Exchange) -> dict | None:
    """What the record says of the connection: whether it was kept from an earlier run, how many requests
    it has carried, the address really reached (the proxy's, through one) and the local port."""
    connection = x.connection
    if connection is None:
        return None
    return {'reused': x.reused, 'request_on_connection': connection.requests, 'peer': connection.peer,
            'local_port': connection.local_port, 'stale': isinstance(x.failure, _StaleConnectionError)}


def _span_ms(first: float | None, last: float | None) -> float | None:
    return None if first is None else round((last - first) * 1000, 3)


def _run_source(x: _Exchange) -> str:
    """Who answered the run: what its response head says; without a head (a kept connection found closed),
    what the last response on the same connection said; else where the request was sent."""
    earlier = x.connection.source if x.connection is not None else None
    return _source(x.reader.head, earlier or x.request.source)


def _source(head: _ResponseHead | None, requested: str) -> str:
    """fixture (the synthetic fixture answered), replay (the fixture replayed a capture), or what was asked."""
    if head is not None:
        if head.get(_REPLAY_HEADER) == 'replay':
            return 'replay'
        if (head.get('server') or '').startswith('synthetic-fixture'):
            return 'fixture'
    return requested


def _declared_length(head: _ResponseHead) -> int | None:
    """The Content-Length for the record: None when there is none or it is not usable."""
    try:
        return _content_length(head)
    except StreamError:
        return None


def _http_facts(head: _ResponseHead | None, body) -> dict | None:
    """What the record says of the HTTP message: its status line, framing headers and body size."""
    if head is None:
        return None
    facts = {'status': head.status, 'reason': head.reason, 'version': head.version,
             'content_type': head.get('Content-Type'), 'transfer_encoding': head.get('Transfer-Encoding'),
             'content_length': _declared_length(head),
             'body_bytes': body.received if body is not None else 0,
             'interim': list(head.interim),
             'headers': _public_headers(head)}
    if body is not None:
        facts['framing'] = body.framing
    return facts


def _utc_iso(timestamp: float) -> str:
    return time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime(timestamp)) + f'.{int(timestamp % 1 * 1000):03d}Z'


def _platform() -> str:
    if not hasattr(os, 'uname'):
        return sys.platform
    uname = os.uname()
    return f'{uname.sysname} {uname.release} {uname.machine}'


_PYTHON_VERSION = sys.version.split()[0]
_PLATFORM = _platform()  # constant for the life of the process


def _redact(value, secrets: tuple[str, ...]):
    """A copy of value with every occurrence of each secret in its strings replaced."""
    if not secrets:
        return value
    if isinstance(value, str):
        for secret in secrets:
            value = value.replace(secret, '[redacted]')
        return value
    if isinstance(value, dict):
        return {key: _redact(item, secrets) for key, item in value.items()}
    if isinstance(value, list):
        return [_redact(item, secrets) for item in value]
    return value


def _failed_record(request: PreparedRequest, failure: StreamError) -> dict:
    """The record of a run that never started (interrupted before sending, or a bug in this client)."""
    x = _Exchange(request)
    x.fail(failure)
    x.timeline.ended = x.timeline.started
    return _build_record(x)


def _client_failure(request: PreparedRequest, exc: Exception, doing: str) -> dict:
    """The record of a run this client failed to send or to record, whatever raised (a bug in this client:
    a request that cannot be built or encoded, or anything raising before, while or after sending):
    client_error, with the exception's type and message. The one place a load's, a session's and a trace's
    workers turn an exception into a record, so that no run that started is left without one. When even
    that record cannot be built from the request (the bug is in what a run builds from it, such as the
    checks of its tools), it is built from the request without its answer's spec and twin."""
    failure = _failure('client_error', f'the client failed {doing}: {type(exc).__name__}: {exc}')
    try:
        return _failed_record(request, failure)
    except Exception as again:  # the same bug once more: the record without what the run built from the request
        failure = _failure('client_error', f'{failure.message}; and building its record: '
                                           f'{type(again).__name__}: {again}')
        return _failed_record(dataclasses.replace(request, spec=AnswerSpec(), twin=None), failure)
