"""The bounds, the failures and the words for them.

``FAILURE_KINDS`` is the one table of every failure's stable kind and layer,
and ``StreamError`` carries both; the small helpers here put a value into a
message without ever printing too much of it.
"""


__version__ = '0.1.0'


MAX_TEXT_CHARS = 1_048_576    # the answer bound: the assembled text and tool-call arguments (and, apart, the reasoning)
_JSON_ESCAPE_CHARS = 12        # the longest JSON escape of one character: an astral one as two \\uXXXX escapes
_MAX_ENVELOPE_CHARS = 1_048_576  # what one event carries besides the answer: ids, usage, the settings echoed
# The guide's bounds of one SSE line and one event's data: what Events() refuses unless its caller asks
# for others. Code written against the guide's Events relies on them.
MAX_LINE_CHARS = 65_536
MAX_EVENT_CHARS = 1_048_576
# The bounds the client's own response readers ask for, on every API. The Responses API repeats the whole
# answer (text, reasoning and arguments) in one data line of its done events and of response.completed, and
# any API may send a long piece in one delta, so these follow from the answer bound: every answer within
# MAX_TEXT_CHARS fits, however the server escapes it.
_ANSWER_EVENT_CHARS = 2 * MAX_TEXT_CHARS * _JSON_ESCAPE_CHARS + _MAX_ENVELOPE_CHARS
_ANSWER_LINE_CHARS = _ANSWER_EVENT_CHARS
_MAX_TOKEN_IDS = 1_048_576     # generated token ids kept from one answer (--cross-check)
_MAX_ERROR_BODY = 65_536       # bytes of an HTTP error body that are read
_MAX_SERVER_MESSAGE = 1_000    # characters of a server error message kept
_READ_SIZE = 65_536            # each recv() asks for this much; it returns what is there
_STAMP_SLACK = 0.001           # s: how far outside its read's window a kernel stamp may fall and be taken
_MAX_CAPTURE_BYTES = 16 * 1024 * 1024  # raw response bytes kept for --capture
_DATA_PREFIX = 'data: '        # the usual start of an SSE data line (the space is optional)
_REPLAY_HEADER = 'x-synthetic-fixture'  # fixture_server.py adds "x-synthetic-fixture: replay" to a replayed capture

# Where a run failed, in the order a response is received.
LAYERS = ('connect', 'proxy', 'tls', 'http', 'transport', 'sse', 'protocol',
          'application', 'cross-check', 'timeout', 'interrupted', 'client')


# Every failure the client reports, by its stable kind: the layer it belongs to and what it means. Records
# carry the kind as error_kind; the summary, the report and the command line group by it.
FAILURE_KINDS = {
    'connect_failed': ('connect', 'no TCP connection to the server'),
    'not_loopback': ('connect', 'plain http to an address that is not loopback; nothing was sent'),
    'proxy_unreachable': ('proxy', 'no TCP connection to the proxy'),
    'proxy_closed': ('proxy', 'the proxy closed the connection before answering CONNECT'),
    'proxy_bad_answer': ('proxy', 'the proxy answered CONNECT with a malformed response head'),
    'proxy_refused': ('proxy', 'the proxy answered CONNECT with a status other than 2xx'),
    'proxy_extra_bytes': ('proxy', 'the proxy sent bytes after its 2xx, before the tunnel was used'),
    'proxy_tunnel_failed': ('proxy', 'the connection to the proxy failed during CONNECT'),
    'certificate_invalid': ('tls', 'the server certificate did not verify'),
    'tls_failed': ('tls', 'the TLS handshake or a TLS record failed'),
    'head_too_long': ('http', 'a response head over the bound'),
    'unexpected_101': ('http', 'a 101 Switching Protocols nobody asked for'),
    'bad_status_line': ('http', 'the status line is not "HTTP/1.x NNN reason"'),
    'http_version': ('http', 'an HTTP version other than 1.x'),
    'bad_header_line': ('http', 'a header line that is not "name: value"'),
    'unsupported_encoding': ('http', 'a Content-Encoding or Transfer-Encoding this client does not read'),
    'ambiguous_framing': ('http', 'both Transfer-Encoding and Content-Length'),
    'http10_transfer_encoding': ('http', 'an HTTP/1.0 response with Transfer-Encoding, whose framing is faulty'),
    'bad_content_length': ('http', 'a Content-Length that is not digits, too large, or values that disagree'),
    'content_type': ('http', 'a 200 whose content type is not text/event-stream'),
    'status_not_200': ('http', "a status other than 200, with the server's message when it sent one"),
    'no_response_head': ('http', 'the connection failed while the request was sent or before a response head'),
    'no_response': ('transport', 'the connection closed before any response byte'),
    'eof_in_head': ('transport', 'the connection closed inside the response head'),
    'stale_connection': ('transport', 'a kept connection closed before any response byte: closed while idle'),
    'body_truncated': ('transport', 'the connection closed before the Content-Length body ended'),
    'eof_in_chunk': ('transport', 'the connection closed inside a chunk'),
    'eof_in_trailer': ('transport', 'the connection closed inside the chunked trailer section'),
    'no_last_chunk': ('transport', 'the chunked body ended without its terminating chunk'),
    'tls_truncated': ('transport', 'a body that only the close delimits ended without TLS\'s close_notify'),
    'body_overrun': ('transport', 'bytes after the end of the message its framing declared'),
    'bad_chunk_size': ('transport', 'a chunk-size line that is not hexadecimal digits'),
    'chunk_too_large': ('transport', 'a chunk size over the bound'),
    'bad_chunk_extension': ('transport', 'a chunk extension that is not ;name[=value]'),
    'bad_chunk_end': ('transport', 'chunk data not followed by CRLF'),
    'bad_line_end': ('transport', 'a chunk-size or trailer line not ended by CRLF'),
    'chunk_line_too_long': ('transport', 'a chunk-size or trailer line over the bound'),
    'trailer_too_long': ('transport', 'a trailer section over the bound'),
    'bad_trailer_line': ('transport', 'a trailer line that is not "name: value"'),
    'connection_failed': ('transport', 'the connection failed (reset, broken) while the body arrived'),
    'unended_after_terminal': ('transport', 'the terminal event arrived but the HTTP message never ended'),
    'unstreamed_too_long': ('transport', "the --cross-check twin's body is over the bound"),
    'line_too_long': ('sse', 'an SSE line over the bound'),
    'event_too_long': ('sse', 'the data of one SSE event over the bound'),
    'invalid_utf8': ('sse', 'bytes of the event stream that are not UTF-8'),
    'eof_in_utf8': ('sse', 'the stream ended inside a UTF-8 character'),
    'eof_in_line': ('sse', 'the stream ended inside a line'),
    'eof_in_event': ('sse', 'the stream ended inside an event: its blank line never arrived'),
    'malformed_json': ('protocol', 'event data that is not JSON'),
    'not_an_object': ('protocol', 'event data that is JSON but not an object'),
    'field_type': ('protocol', 'a field of an event with the wrong JSON type'),
    'event_type_mismatch': ('protocol', 'the SSE event field names another type than the data says'),
    'sequence_number': ('protocol', 'a Responses sequence_number that does not count up by 1'),
    'event_after_terminal': ('protocol', 'an event after the one that ends the stream'),
    'event_after_close': ('protocol', 'an event for a part of the answer that its API had already closed'),
    'event_out_of_order': ('protocol', 'an event that the state of its part does not accept'),
    'part_not_open': ('protocol', 'an event for a part (a block, an item, a call) that never opened'),
    'part_still_open': ('protocol', 'the answer ended while a part of it was still open'),
    'part_index_skips': ('protocol', 'a part opened at an index that skips the next one'),
    'duplicate_part': ('protocol', 'a second part opened at the index (or output_index) of another'),
    'duplicate_id': ('protocol', 'a tool-call, item or tool_use id used twice in one answer'),
    'closing_copy_differs': ('protocol', 'a closing copy (.done, output_item.done, the terminal output) differs from '
                                         'what the deltas assembled'),
    'unsupported_part': ('protocol',
                         'an output item of a type this client does not read, or a content block without a type'),
    'delta_type': ('protocol', 'a delta of a type its part does not take'),
    'choices_not_one': ('protocol', 'a chunk without exactly one choice (n=1)'),
    'choice_index': ('protocol', 'a choice whose index is not 0'),
    'legacy_function_call': ('protocol', 'a legacy function_call delta (this client reads tool_calls)'),
    'text_in_tool_call': ('protocol', 'visible text inside a tool-call answer'),
    'no_tools_offered': ('protocol', 'a tool call although the request offered no tools'),
    'bad_tool_call_delta': ('protocol', 'a tool-call delta without an integer index and a function object'),
    'call_without_id': ('protocol', 'a tool call opened without its id and name'),
    'call_id_changed': ('protocol', 'a tool call got a second id'),
    'call_name_changed': ('protocol', 'a tool call changed its name'),
    'bad_usage': ('protocol', 'a token count that is not a non-negative integer'),
    'token_ids_invalid': ('protocol', 'token_ids (asked for by --cross-check) that are not a list of integers'),
    'unstreamed_malformed': ('protocol', 'the --cross-check twin is not a well-formed unstreamed answer of its API'),
    'server_error_event': ('application', 'the server sent an error event in the stream'),
    'response_failed': ('application', 'the server ended the response with response.failed'),
    'answer_too_long': ('application', 'an answer over the bound'),
    'reasoning_too_long': ('application', 'reasoning over the bound'),
    'eof_before_done': ('application', "the stream ended before its API's terminal event"),
    'no_finish_reason': ('application', 'the terminal event arrived without a finish or stop reason'),
    'unexpected_finish': ('application', 'a finish other than the one a finished answer has'),
    'budget_exhausted': ('application', 'the output budget (max_tokens) ended the answer'),
    'refusal': ('application', 'the model declined to answer: a refusal, whose text the record keeps'),
    'dialect_unproven': ('application',
                         'the server\'s dialect says finished without the proof it needs (docs/dialects.md)'),
    'length_tokens_differ': ('application', 'a fixed-length answer counted other than max_tokens tokens'),
    'no_visible_text': ('application', 'a text answer finished without visible text'),
    'finish_without_calls': ('application', 'the finish says tool calls, but none arrived'),
    'calls_without_call_finish': ('application', 'tool calls arrived, but the finish is not the tool-call one'),
    'tool_choice_none': ('application', 'tool calls arrived although tool_choice was none'),
    'text_not_tool_call': ('application', 'tool_choice required (or named) a call, but the answer is text'),
    'wrong_tool': ('application', 'a call of another tool than the one tool_choice named'),
    'unknown_tool': ('application', 'a call of a tool the request did not offer'),
    'tool_arguments_empty': ('application', 'a tool call with empty arguments'),
    'tool_arguments_not_json': ('application', 'tool-call arguments that are not strict JSON'),
    'tool_arguments_not_object': ('application', 'tool-call arguments that are JSON but not an object'),
    'tool_arguments_schema': ('application', "tool-call arguments that do not match the tool's parameters"),
    'answer_not_json': ('application', 'a JSON answer (--json-schema) that is not strict JSON'),
    'answer_schema': ('application', 'a JSON answer that does not match its schema'),
    'unstreamed_error': ('application', 'the --cross-check twin is an error the server reported'),
    'too_many_token_ids': ('application', 'more token ids than the bound'),
    'budget_used_by_tool_call': ('application', 'a tool-call finish with the whole output budget used: a call cut by '
                                                'max_tokens, which vLLM relabels as finished'),
    'tool_markup_in_text': ('application', "tool-call markup in the visible text, tools offered: the server's parser "
                                           'failed to extract a call'),
    'cross_check_differs': ('cross-check', 'the same tokens streamed and unstreamed, another answer'),
    'connect_timeout': ('timeout', 'no connection within the idle timeout'),
    'proxy_timeout': ('timeout', 'no answer to CONNECT within the idle timeout'),
    'tls_timeout': ('timeout', 'the TLS handshake did not finish within the idle timeout'),
    'headers_timeout': ('timeout', 'no response head within the idle timeout'),
    'idle_timeout': ('timeout', 'no bytes for the idle timeout while the body arrived'),
    'deadline': ('timeout', 'the overall deadline was reached before the answer finished'),
    'interrupted': ('interrupted', 'SIGINT or SIGTERM (or a cancelled load) stopped the run'),
    'client_error': ('client', 'a bug in this client: an exception it did not expect'),
}


class StreamError(Exception):
    """A failure inside the stream: its layer, its stable ``kind`` (a key of FAILURE_KINDS) and a message.

    ``server_error`` holds the server's own message, type and code when the
    failure is an error the server reported (an error event or a JSON error body).
    ``kind`` is a stable name for the failure, which code reads instead of the message.
    """

    def __init__(self, layer: str, message: str, *, kind: str, server_error: dict | None = None) -> None:
        if FAILURE_KINDS.get(kind, ('',))[0] != layer:
            raise ValueError(f'{kind!r} is not a failure kind of the layer {layer!r}')
        super().__init__(f'{layer}: {message}')
        self.layer = layer
        self.kind = kind
        self.message = message
        self.kind = kind
        self.server_error = server_error

    def __str__(self) -> str:
        return f'{self.layer}: {self.message}'


def _failure(kind: str, message: str, server_error: dict | None = None) -> StreamError:
    """The StreamError of a kind, in its layer."""
    return StreamError(FAILURE_KINDS[kind][0], message, kind=kind, server_error=server_error)


class SSEError(StreamError, ValueError):
    """The event stream broke its format (layer ``sse``). A ValueError too, as the guide's parser raised."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__('sse', message, kind=kind)


class SSEDecodeError(SSEError, UnicodeDecodeError):
    """Bytes of the event stream that are not UTF-8: an SSEError that is also a UnicodeDecodeError."""

    def __init__(self, data: bytes, start: int, end: int, message: str, kind: str = 'invalid_utf8') -> None:
        UnicodeDecodeError.__init__(self, 'utf-8', data, start, end, message)
        self.layer, self.kind, self.message, self.server_error = 'sse', kind, message, None


class _StaleConnectionError(StreamError):
    """A reused connection that ended before any response byte: the server or a proxy closed it while
    it was idle (layer ``transport``). Not retried: the load counts these apart."""

    def __init__(self, requests: int, idle_s: float) -> None:
        super().__init__('transport', f'the reused connection (request {requests} on it, idle {idle_s:.2f} s) '
                                      'closed before any response byte; the server or a proxy closed it while idle',
                         kind='stale_connection')


class Interrupted(KeyboardInterrupt):
    """Ctrl+C or SIGTERM during a run; carries the record of the run so far."""

    def __init__(self, signal_name: str = 'SIGINT', record: dict | None = None) -> None:
        super().__init__(signal_name)
        self.signal_name = signal_name
        self.record = record


class UsageError(Exception):
    """Input from the user that cannot be used (a flag, an output path, a file to read): on the command
    line, exit status 2 and one line on stderr."""


def _shorten(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[:limit] + '...'


def _count(number: int, noun: str) -> str:
    """'1 content event', '2 content events': a count with its noun in the right number."""
    return f'{number} {noun}' if number == 1 else f'{number} {noun}s'


def _and_list(words) -> str:
    """'a', 'a and b', 'a, b and c'."""
    words = list(words)
    return ' and '.join(words) if len(words) < 3 else f'{", ".join(words[:-1])} and {words[-1]}'


def _host_port(host: str, port: int) -> str:
    """host:port as a URL writes it: an IPv6 address in brackets."""
    return f'[{host}]:{port}' if ':' in host else f'{host}:{port}'


def _plain_number(value: float | None) -> str:
    """A figure in a table's cell, as short as it can be said: - for none."""
    return '-' if value is None else f'{value:g}'


def _preview(text: str, limit: int = 60) -> str:
    """A quoted, shortened copy of untrusted text for an error message."""
    return repr(_shorten(text, limit))
_DEFAULT_EXPORTER_IN_FLIGHT = 4  # runs in flight at most across all targets, unless --concurrency says
