"""Strict client for one streamed OpenAI-compatible chat completion.

It sends one request with ``stream: true``, shows the answer as it arrives and
writes an evidence record that says whether the answer really finished: the
HTTP message ended as its framing promised, the event stream ended on an event
boundary, and the completion ended with visible text, finish_reason "stop"
and ``data: [DONE]``. Everything else is a failure naming the layer where it
happened. Standard library only; no retries.

The module reads top to bottom as the layers of a response: limits and
errors, the SSE parser and the chat-chunk validator (both sans-IO), the HTTP
body framing readers (sans-IO), the transport, the record, the command line.
Modules that only a run needs (json, http.client, ssl, signal) are imported
where they are used, so that `--help` and an import of the parser stay cheap.
"""
import codecs
import math
import os
import sys
import time

__version__ = '0.1.0'

MAX_LINE_CHARS = 65_536       # one SSE line, decoded characters
MAX_EVENT_CHARS = 1_048_576   # the data of one SSE event
MAX_TEXT_CHARS = 1_048_576    # the assembled answer (and reasoning) text
MAX_ERROR_BODY = 65_536       # bytes of an HTTP error body that are read
MAX_SERVER_MESSAGE = 1_000    # characters of a server error message kept
READ_SIZE = 65_536            # read1() asks for this much; it returns what is there
MAX_CAPTURE_BYTES = 16 * 1024 * 1024  # raw response bytes kept for --capture

# Where a run failed, in the order a response is received.
LAYERS = ('connect', 'tls', 'http', 'transport', 'sse', 'protocol',
          'application', 'timeout', 'interrupted', 'client')


class StreamError(Exception):
    """A failure inside the stream, with the layer it belongs to."""

    def __init__(self, layer: str, message: str) -> None:
        if layer not in LAYERS:
            raise ValueError(f'unknown layer {layer!r}')
        super().__init__(f'{layer}: {message}')
        self.layer = layer
        self.message = message


class Interrupted(KeyboardInterrupt):
    """Ctrl+C or SIGTERM during a run; carries the record of the run so far."""

    def __init__(self, signal_name: str = 'SIGINT', record: dict | None = None) -> None:
        super().__init__(signal_name)
        self.signal_name = signal_name
        self.record = record


def _shorten(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[:limit] + '...'


def _preview(text: str, limit: int = 60) -> str:
    """A quoted, shortened copy of untrusted text for an error message."""
    return repr(_shorten(text, limit))


# ---------------------------------------------------------------------------
# SSE: bytes to event data (sans-IO)
# ---------------------------------------------------------------------------

class Events:
    """Incremental parser for a text/event-stream body (WHATWG HTML, 9.2.6).

    ``feed(bytes)`` returns the data of every event completed by those bytes.
    UTF-8 is decoded incrementally and one leading BOM is dropped. Lines end
    in CR, LF or CRLF (a CRLF split across reads counts once); a blank line
    dispatches the event; only ``data`` fields contribute, several joined by
    LF; comments and other fields are ignored. An event without its blank
    line is never dispatched: ``finish()`` reports it.

    Fast path: the bytes are decoded and split with str methods running in C.
    When every complete line of a read is ``data: ...`` followed by a blank
    line (vLLM's shape), one ``split`` yields all the events at once; any
    other shape goes line by line. Bounds are checked on line lengths, never
    by walking characters.
    """

    def __init__(self) -> None:
        self._undecoded = b''       # an incomplete UTF-8 character from the last read
        self._started = False       # a character has been decoded (so a BOM is no longer leading)
        self._after_cr = False      # the last read ended in CR: a leading LF completes that CRLF
        self._line = ''             # the unterminated last line
        self._data: list[str] = []  # data lines of the event in progress
        self._size = 0              # characters in self._data

    def feed(self, raw: bytes) -> list[str]:
        """Consume the next bytes of the body; return the data of completed events."""
        text = self._decode(raw)
        if not text:
            return []
        if self._after_cr:
            self._after_cr = False
            if text[0] == '\n':
                text = text[1:]
        if '\r' in text:
            self._after_cr = text[-1] == '\r'
            text = text.replace('\r\n', '\n').replace('\r', '\n')
        last = text.rfind('\n')
        if last < 0:
            self._line += text
            self._check_open_line()
            return []
        block = self._line + text[:last] if self._line else text[:last]
        self._line = text[last + 1:]
        self._check_open_line()
        if not self._data and block.endswith('\n') and block.startswith('data: '):
            events = self._single_line_events(block[:-1])
            if events is not None:
                return events
        return self._events_by_line(block)

    def pending(self) -> str | None:
        """What the stream would end inside if it ended now, or None at an event boundary."""
        if self._undecoded:
            return f'stream ended inside a UTF-8 character ({len(self._undecoded)} bytes pending)'
        if self._line:
            return f'stream ended inside a line: {_preview(self._line)}'
        if self._data:
            return 'stream ended inside an event: its blank line never arrived'
        return None

    def finish(self) -> None:
        """Declare the body ended; raise StreamError('sse') unless it ended on an event boundary."""
        problem = self.pending()
        if problem:
            raise StreamError('sse', problem)

    def _decode(self, raw: bytes) -> str:
        data = self._undecoded + raw if self._undecoded else raw
        try:
            text, used = codecs.utf_8_decode(data, 'strict', False)
        except UnicodeDecodeError as exc:
            raise StreamError('sse', f'invalid UTF-8 byte {data[exc.start]:#04x} in the event stream') from None
        self._undecoded = data[used:]
        if not self._started and text:
            self._started = True
            if text[0] == '\ufeff':
                text = text[1:]
        return text

    def _check_open_line(self) -> None:
        if len(self._line) > MAX_LINE_CHARS:
            raise StreamError('sse', f'line longer than {MAX_LINE_CHARS} characters without a line end')

    @staticmethod
    def _single_line_events(core: str) -> list[str] | None:
        """Split ``data: A\\n\\ndata: B`` into ['A', 'B'], or None if the block has another shape."""
        events = core.split('\n\ndata: ')
        if core.count('\n') != 2 * (len(events) - 1):
            return None  # some event has several lines, or extra blank lines
        events[0] = events[0][6:]
        if max(map(len, events)) > MAX_LINE_CHARS - 6:
            raise StreamError('sse', f'line longer than {MAX_LINE_CHARS} characters')
        return events

    def _events_by_line(self, block: str) -> list[str]:
        events = []
        for line in block.split('\n'):
            if not line:
                if self._data:
                    events.append('\n'.join(self._data))
                    self._data, self._size = [], 0
                continue
            if len(line) > MAX_LINE_CHARS:
                raise StreamError('sse', f'line longer than {MAX_LINE_CHARS} characters')
            name, _, value = line.partition(':')
            if name != 'data':
                continue  # a comment (empty name) or a field this client does not use
            if value[:1] == ' ':
                value = value[1:]
            self._size += len(value) + 1
            if self._size > MAX_EVENT_CHARS:
                raise StreamError('sse', f'event data longer than {MAX_EVENT_CHARS} characters')
            self._data.append(value)
        return events


# ---------------------------------------------------------------------------
# Chat chunks: event data to the completion (sans-IO)
# ---------------------------------------------------------------------------

class ChatChunks:
    """Validates the events of one streamed chat completion (n=1, text only).

    ``accept(data)`` applies one event and returns ``(text, reasoning)``,
    the visible answer text and reasoning text it carried ('' when none).
    A violation raises StreamError: ``protocol`` for a chunk this client
    cannot accept, ``application`` for a server error event or an answer
    over the size bound. The outcome is read from the attributes.
    """

    def __init__(self) -> None:
        import json
        self._loads = json.loads
        self.text_parts: list[str] = []
        self.text_chars = 0
        self.reasoning_parts: list[str] = []
        self.reasoning_chars = 0
        self.data_events = 0
        self.content_events = 0
        self.finish_reason: str | None = None
        self.done = False
        self.completion_tokens: int | None = None
        self.response_id: str | None = None
        self.server_error: dict | None = None

    def accept(self, data: str) -> tuple[str, str]:
        """Apply one event's data; return the answer and reasoning text it carried."""
        if self.done:
            raise StreamError('protocol', f'event after [DONE]: {_preview(data)}')
        self.data_events += 1
        if data == '[DONE]':
            self.done = True
            return '', ''
        try:
            chunk = self._loads(data)
        except (ValueError, RecursionError) as exc:
            raise StreamError('protocol', f'malformed JSON in event {self.data_events} '
                                          f'({type(exc).__name__}): {_preview(data)}') from None
        if not isinstance(chunk, dict):
            raise StreamError('protocol', f'expected a JSON object in event {self.data_events}, '
                                          f'got {type(chunk).__name__}')
        if 'error' in chunk:
            self.server_error = server_error_fields(chunk)
            raise StreamError('application', 'server sent an error event: '
                                             + describe_server_error(self.server_error))
        if self.response_id is None and isinstance(chunk.get('id'), str):
            self.response_id = chunk['id']
        usage = chunk.get('usage')
        if usage is not None:
            self._take_usage(usage)
        choices = chunk.get('choices')
        if choices is None or choices == []:
            return '', ''
        if not isinstance(choices, list) or len(choices) != 1:
            count = len(choices) if isinstance(choices, list) else type(choices).__name__
            raise StreamError('protocol', f'expected one choice per chunk (n=1), got {count}')
        return self._take_choice(choices[0])

    def _take_choice(self, choice: object) -> tuple[str, str]:
        if not isinstance(choice, dict) or choice.get('index') != 0:
            seen = choice.get('index') if isinstance(choice, dict) else choice
            raise StreamError('protocol', f'expected choice index 0, got {_shorten(repr(seen))}')
        delta = choice.get('delta')
        if delta is None:
            delta = {}
        elif not isinstance(delta, dict):
            raise StreamError('protocol', f'expected delta to be an object, got {type(delta).__name__}')
        if delta.get('tool_calls') or delta.get('function_call'):
            raise StreamError('protocol', 'tool call deltas arrived; this client accepts text answers only')
        text = self._take_text(delta, 'content')
        reasoning = self._take_text(delta, 'reasoning')
        if reasoning is None:
            reasoning = self._take_text(delta, 'reasoning_content')
        if text:
            self.content_events += 1
            self.text_chars += len(text)
            if self.text_chars > MAX_TEXT_CHARS:
                raise StreamError('application', f'answer longer than {MAX_TEXT_CHARS} characters')
            self.text_parts.append(text)
        if reasoning:
            self.reasoning_chars += len(reasoning)
            if self.reasoning_chars > MAX_TEXT_CHARS:
                raise StreamError('application', f'reasoning longer than {MAX_TEXT_CHARS} characters')
            self.reasoning_parts.append(reasoning)
        reason = choice.get('finish_reason')
        if reason is not None:
            if self.finish_reason is not None:
                raise StreamError('protocol', f'a second finish_reason ({_preview(str(reason))}) '
                                              f'after finish_reason={self.finish_reason}')
            if not isinstance(reason, str):
                raise StreamError('protocol', f'expected finish_reason to be a string, got {type(reason).__name__}')
            self.finish_reason = reason
        return text or '', reasoning or ''

    def _take_text(self, delta: dict, key: str) -> str | None:
        value = delta.get(key)
        if value is None or isinstance(value, str):
            if value and self.finish_reason is not None:
                raise StreamError('protocol', f'{key} arrived after finish_reason={self.finish_reason}')
            return value
        raise StreamError('protocol', f'expected delta.{key} to be a string, got {type(value).__name__}')

    def _take_usage(self, usage: object) -> None:
        count = usage.get('completion_tokens') if isinstance(usage, dict) else None
        if type(count) is not int or count < 0:
            raise StreamError('protocol', f'expected usage.completion_tokens to be a non-negative integer, '
                                          f'got {_shorten(repr(count))}')
        self.completion_tokens = count

    @property
    def text(self) -> str:
        return ''.join(self.text_parts)

    @property
    def reasoning(self) -> str:
        return ''.join(self.reasoning_parts)

    def outcome_problem(self) -> str | None:
        """Why the completion is not a finished answer, or None when it is."""
        if not self.done:
            return f'EOF before [DONE] after {self.content_events} content events'
        if self.finish_reason is None:
            return f'[DONE] without a finish_reason after {self.content_events} content events'
        if self.finish_reason == 'length':
            return 'output budget exhausted (finish_reason=length)'
        if self.finish_reason == 'tool_calls':
            return ('finish_reason=tool_calls: the answer is a tool call, which this client does not accept '
                    '(vLLM also reports tool_calls for a tool call cut off by max_tokens)')
        if self.finish_reason != 'stop':
            return f'expected finish_reason=stop, got finish_reason={self.finish_reason}'
        if not any(part.strip() for part in self.text_parts):
            return 'finish_reason=stop and [DONE] arrived, but no visible text'
        return None


def server_error_fields(body: object) -> dict:
    """message/type/code from an error object: vLLM's nested or flat forms, or a bare string."""
    error = body.get('error', body) if isinstance(body, dict) else body
    if isinstance(error, str):
        error = {'message': error}
    if not isinstance(error, dict):
        error = {'message': repr(error)}
    message = error.get('message')
    message = '' if message is None else str(message)
    return {'message': message[:MAX_SERVER_MESSAGE],
            'type': error.get('type') if isinstance(error.get('type'), str) else None,
            'code': error.get('code') if isinstance(error.get('code'), (int, str)) else None}


def describe_server_error(error: dict) -> str:
    kind = ' '.join(str(part) for part in (error['type'], error['code']) if part is not None)
    message = error['message'] or '(empty message)'
    return f'{message!r}' + (f' ({kind})' if kind else '')


# ---------------------------------------------------------------------------
# HTTP body framing (sans-IO)
# ---------------------------------------------------------------------------
# http.client's read1() returns b'' without complaint when a Content-Length body
# is cut short, and discards bytes past the end, so the body is read from the
# response's buffered socket file and framed here. Each reader knows only how
# its framing ends. feed() returns payload bytes; overrun counts bytes seen past
# the end of the message; eof_problem() says why a close was premature.

class ContentLengthBody:
    """A body of exactly `declared` bytes."""

    framing = 'content-length'

    def __init__(self, declared: int) -> None:
        self.declared = declared
        self.received = 0
        self.overrun = 0

    @property
    def complete(self) -> bool:
        return self.received == self.declared

    def feed(self, raw: bytes) -> bytes:
        room = self.declared - self.received
        if len(raw) > room:
            self.overrun += len(raw) - room
            raw = raw[:room]
        self.received += len(raw)
        return raw

    def eof_problem(self) -> str | None:
        return None if self.complete else f'connection closed after {self.progress()}'

    def progress(self) -> str:
        return f'{self.received} of {self.declared} body bytes'

    def overrun_problem(self) -> str:
        return f'{self.overrun} bytes beyond the declared Content-Length of {self.declared}'


class ChunkedBody:
    """A body in chunked transfer coding (RFC 9112, 7.1), ending with its zero chunk and trailer."""

    framing = 'chunked'
    _HEX = b'0123456789abcdefABCDEF'

    def __init__(self) -> None:
        self.received = 0
        self.overrun = 0
        self.complete = False
        self._pending = b''     # an incomplete size line, trailer line or chunk-ending CRLF
        self._chunk_left = 0    # payload bytes still owed by the current chunk
        self._state = 'size'    # size -> data -> data-end -> size ... size(0) -> trailer -> complete

    def feed(self, raw: bytes) -> bytes:
        buf = self._pending + raw if self._pending else raw
        self._pending = b''
        out = []
        pos, end = 0, len(buf)
        while pos < end:
            if self.complete:
                self.overrun += end - pos
                break
            state = self._state
            if state == 'data':
                take = min(self._chunk_left, end - pos)
                out.append(buf[pos:pos + take])
                pos += take
                self._chunk_left -= take
                if not self._chunk_left:
                    self._state = 'data-end'
            elif state == 'data-end':
                if end - pos < 2:
                    self._pending = buf[pos:]
                    break
                if buf[pos:pos + 2] != b'\r\n':
                    raise StreamError('transport', f'chunk data not followed by CRLF: {bytes(buf[pos:pos + 8])!r}')
                pos += 2
                self._state = 'size'
            else:
                eol = buf.find(b'\n', pos)
                if eol < 0:
                    if end - pos > 4096:
                        raise StreamError('transport', 'chunk size or trailer line longer than 4096 bytes')
                    self._pending = buf[pos:]
                    break
                line = buf[pos:eol].rstrip(b'\r')
                pos = eol + 1
                if state == 'size':
                    self._start_chunk(line)
                elif not line:
                    self.complete = True  # the blank line closing the trailer section
        payload = b''.join(out) if len(out) != 1 else out[0]
        self.received += len(payload)
        return payload

    def _start_chunk(self, line: bytes) -> None:
        size = line.split(b';', 1)[0].strip(b' \t')
        if not size or size.strip(self._HEX) or len(size) > 16:
            raise StreamError('transport', f'invalid chunk size line {bytes(line[:40])!r}')
        self._chunk_left = int(size, 16)
        self._state = 'data' if self._chunk_left else 'trailer'

    def eof_problem(self) -> str | None:
        if self.complete:
            return None
        if self._state in ('data', 'data-end'):
            return (f'connection closed inside a chunk after {self.received} body bytes '
                    f'({self._chunk_left} bytes of that chunk missing)')
        if self._state == 'trailer':
            return f'chunked body ended inside its trailer after {self.received} body bytes'
        return f'chunked body ended without its terminating chunk after {self.received} body bytes'

    def progress(self) -> str:
        return f'{self.received} body bytes and no terminating chunk'

    def overrun_problem(self) -> str:
        return f'{self.overrun} bytes after the terminating chunk'


class CloseDelimitedBody:
    """A body with neither length nor chunking: it ends when the server closes."""

    framing = 'close'
    complete = False
    overrun = 0

    def __init__(self) -> None:
        self.received = 0

    def feed(self, raw: bytes) -> bytes:
        self.received += len(raw)
        return raw

    def eof_problem(self) -> None:
        return None

    def progress(self) -> str:
        return f'{self.received} body bytes and the connection still open'


# ---------------------------------------------------------------------------
# Request preparation (validates everything before any connection)
# ---------------------------------------------------------------------------

DEFAULT_URL = 'http://127.0.0.1:8000/v1/chat/completions'
DEFAULT_PROMPT = 'Reply with exactly the word READY.'


def _is_loopback(host: str) -> bool:
    import ipaddress
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host.lower().rstrip('.') == 'localhost'


# Request keys with a flag of their own, which --extra may not set.
RESERVED_KEYS = {'model': '--model', 'messages': '--prompt/--system', 'stream': None, 'n': None,
                 'max_tokens': '--max-tokens', 'temperature': '--temperature', 'stop': '--stop'}


def _check_url(url: str):
    """The parts and port of a URL this client may connect to, or ValueError."""
    from urllib.parse import urlsplit
    parts = urlsplit(url)
    if parts.scheme not in ('http', 'https'):
        raise ValueError(f'expected an http:// or https:// URL, got scheme {parts.scheme or "(none)"!r}')
    if parts.username is not None or parts.password is not None:
        raise ValueError('the URL must not contain credentials; put the API key in MODEL_API_KEY')
    if not parts.hostname:
        raise ValueError(f'the URL has no host: {url!r}')
    if parts.query or parts.fragment:
        raise ValueError('the URL must not contain a query or fragment')
    try:
        port = parts.port or (443 if parts.scheme == 'https' else 80)
    except ValueError:
        raise ValueError(f'the URL has an invalid port: {parts.netloc!r}') from None
    if parts.scheme == 'http' and not _is_loopback(parts.hostname):
        raise ValueError(f'plain http is allowed only to loopback addresses, not {parts.hostname!r}; '
                         'use https or an SSH tunnel to 127.0.0.1')
    return parts, port


def _check_number(name: str, value, low: float, low_ok: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or value < low or (value == low and not low_ok):
        bound = f'at least {low:g}' if low_ok else f'more than {low:g}'
        raise ValueError(f'{name} must be a finite number {bound}, got {value!r}')
    return float(value)


def _request_body(model: str, prompt: str, system: str | None, max_tokens: int, temperature: float,
                  stop: list[str] | None, extra: dict | None) -> dict:
    if not isinstance(model, str) or not model:
        raise ValueError('model must be a non-empty string')
    if not isinstance(prompt, str) or not (system is None or isinstance(system, str)):
        raise ValueError('prompt and system must be strings')
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or not 1 <= max_tokens <= 32768:
        raise ValueError(f'max_tokens must be an integer from 1 to 32768, got {max_tokens!r}')
    if stop is not None and (not isinstance(stop, list) or not all(isinstance(s, str) and s for s in stop)):
        raise ValueError('stop must be a list of non-empty strings')
    if extra is not None and not isinstance(extra, dict):
        raise ValueError(f'extra must be a JSON object, got {type(extra).__name__}')
    for key in extra or {}:
        if key in RESERVED_KEYS:
            flag = RESERVED_KEYS[key]
            raise ValueError(f'extra may not set {key!r}' + (f'; use {flag}' if flag else ''))
    messages = ([{'role': 'system', 'content': system}] if system is not None else []) \
        + [{'role': 'user', 'content': prompt}]
    body = {'model': model, 'messages': messages, 'stream': True, 'stream_options': {'include_usage': True},
            'max_tokens': max_tokens, 'temperature': temperature, 'n': 1}
    if stop:
        body['stop'] = stop
    return {**body, **(extra or {})}


def prepare(url: str, model: str, prompt: str, *, max_tokens: int = 128, idle: float = 10.0,
            deadline: float = 60.0, ca_file: str | None = None, token: str | None = None,
            system: str | None = None, temperature: float = 0.0, stop: list[str] | None = None,
            extra: dict | None = None, source: str = 'endpoint') -> dict:
    """Check the arguments and build the request; raise ValueError before any connection."""
    import json
    parts, port = _check_url(url)
    idle = _check_number('idle', idle, 0, False)
    deadline = _check_number('deadline', deadline, 0, False)
    temperature = _check_number('temperature', temperature, 0, True)
    body = _request_body(model, prompt, system, max_tokens, temperature, stop, extra)
    headers = {'Content-Type': 'application/json', 'Accept': 'text/event-stream',
               'User-Agent': f'stream-client/{__version__}'}
    if token:
        if not token.isprintable() or not token.isascii() or ' ' in token:
            raise ValueError('MODEL_API_KEY holds characters that cannot go into an HTTP header')
        headers['Authorization'] = 'Bearer ' + token
    context = None
    if parts.scheme == 'https' or ca_file:
        import ssl
        try:
            context = ssl.create_default_context(cafile=ca_file)
        except (OSError, ssl.SSLError) as exc:
            raise ValueError(f'cannot load --ca-file {ca_file!r}: {exc.strerror or exc}') from None
    import hashlib
    return {'scheme': parts.scheme, 'host': parts.hostname, 'port': port, 'path': parts.path or '/', 'url': url,
            'headers': headers, 'body': json.dumps(body, ensure_ascii=False).encode(), 'model': model,
            'idle': idle, 'deadline': deadline, 'context': context, 'token': token or '', 'source': source,
            'parameters': {'max_tokens': max_tokens, 'temperature': temperature, 'stop': stop,
                           'system': system is not None, 'extra_keys': sorted(extra or {}),
                           'prompt_sha256': hashlib.sha256(prompt.encode()).hexdigest()}}


# ---------------------------------------------------------------------------
# Transport: one request, read under the idle timeout and the overall deadline
# ---------------------------------------------------------------------------

class Observation:
    """What the client has seen of one run so far. The record is built from it."""

    def __init__(self, request: dict, capture: bytearray | None = None) -> None:
        self.request = request
        self.started_wall = time.time()
        self.started = time.perf_counter()
        self.capture = capture  # raw response bytes, when the caller asked for them
        self.capture_truncated = False
        self.on_text = self.on_reasoning = None  # callbacks for text as it arrives
        self.ended: float | None = None
        self.expired = False  # the watchdog shut the connection at the overall deadline
        self.phase = 'connect'
        self.http: dict | None = None
        self.response = None  # http.client.HTTPResponse, closed with the connection
        self.body: ContentLengthBody | ChunkedBody | CloseDelimitedBody | None = None
        self.events = Events()
        self.chunks = ChatChunks()
        self.failure: StreamError | None = None
        self.transport_complete: bool | None = None
        self.event_complete: bool | None = None
        self.transport_problem: str | None = None  # how the body's end broke its framing
        self.event_problem: str | None = None      # how the body's end broke the event stream
        self.headers_at: float | None = None
        self.first_event_at: float | None = None
        self.first_text_at: float | None = None
        self.first_reasoning_at: float | None = None
        self.last_text_at: float | None = None
        self.event_gaps: list[float] = []
        self.reads = 0
        self.text_reads = 0

    def fail(self, error: StreamError) -> None:
        if self.failure is None:
            self.failure = error

    def keep(self, raw: bytes) -> None:
        """Add received bytes to the capture, up to its bound."""
        if len(self.capture) + len(raw) <= MAX_CAPTURE_BYTES:
            self.capture += raw
        else:
            self.capture_truncated = True


def stream(url: str, model: str, prompt: str, *, max_tokens: int = 128, idle: float = 10.0,
           deadline: float = 60.0, ca_file: str | None = None, token: str | None = None,
           on_text=None, on_reasoning=None, **options) -> dict:
    """Stream one chat completion and return its evidence record.

    Invalid arguments raise ValueError before any connection. Everything that
    goes wrong afterwards is reported in the record, never raised; Ctrl+C
    raises Interrupted, which carries the record so far.
    ``on_text(text)`` and ``on_reasoning(text)`` are called with each piece of
    answer and reasoning text as it arrives.
    ``options`` are prepare()'s: system, temperature, stop, extra.
    """
    request = prepare(url, model, prompt, max_tokens=max_tokens, idle=idle,
                      deadline=deadline, ca_file=ca_file, token=token, **options)
    return run(request, on_text, on_reasoning)


def run(request: dict, on_text=None, on_reasoning=None, capture: bytearray | None = None) -> dict:
    """Perform a prepared request; return the record (see stream()).

    When ``capture`` is given, the raw response (status line, headers, body
    bytes as received, up to MAX_CAPTURE_BYTES) is appended to it.
    """
    import http.client  # noqa: F401 -- imported before the clock starts, so its cost is not timed
    import threading
    obs = Observation(request, capture)
    obs.on_text, obs.on_reasoning = on_text, on_reasoning
    interrupted = None
    conn = None
    watchdog = None
    try:
        conn = _open(request)
        watchdog = threading.Timer(max(0.0, request['deadline'] - (time.perf_counter() - obs.started)),
                                   _expire, (conn, obs))
        watchdog.daemon = True
        watchdog.start()
        _exchange(conn, obs)
    except StreamError as exc:
        obs.fail(exc)
    except KeyboardInterrupt as exc:
        interrupted = getattr(exc, 'signal_name', 'SIGINT')
        obs.fail(StreamError('interrupted', f'interrupted by {interrupted} during the {obs.phase} phase '
                                            f'after {obs.chunks.content_events} content events'))
    except Exception as exc:  # a server must never crash the run: keep the evidence
        obs.fail(_classify(exc, obs))
    finally:
        if watchdog is not None:
            watchdog.cancel()
        if obs.response is not None:
            obs.response.close()
        if conn is not None:
            conn.close()
        obs.ended = time.perf_counter()
    record = build_record(obs)
    if interrupted:
        raise Interrupted(interrupted, record)
    return record


def _expire(conn, obs: Observation) -> None:
    """At the overall deadline, shut the connection down, so that even a read inside
    http.client's header parsing (which only the idle timeout bounds) returns."""
    import socket
    obs.expired = True
    sock = conn.sock
    if sock is not None:
        try:
            socket.socket.shutdown(sock, socket.SHUT_RDWR)  # the plain socket's method: no TLS state is touched
        except OSError:
            pass


def _open(request: dict):
    import http.client
    timeout = min(request['idle'], request['deadline'])
    if request['scheme'] == 'https':
        return http.client.HTTPSConnection(request['host'], request['port'], timeout=timeout,
                                           context=request['context'])
    return http.client.HTTPConnection(request['host'], request['port'], timeout=timeout)


def _exchange(conn, obs: Observation) -> None:
    request = obs.request
    conn.connect()
    obs.phase = 'request'
    sock = conn.sock
    conn.request('POST', request['path'], body=request['body'], headers=request['headers'])
    obs.phase = 'headers'
    sock.settimeout(_wait(obs))
    response = obs.response = conn.getresponse()
    if obs.expired:  # http.client takes the watchdog's shutdown for the end of the headers
        raise _deadline_failure(obs)
    obs.headers_at = time.perf_counter()
    obs.http = describe_response(response)
    if obs.capture is not None:
        obs.keep(response_head(response))
    if response.status != 200:
        raise StreamError('http', _status_problem(response, sock, obs))
    _check_content_type(obs.http['content_type'])
    obs.body = body_reader(response)
    obs.phase = 'body'
    _read_body(response.fp, sock, obs)


def _read_body(fp, sock, obs: Observation) -> None:
    """Read until the HTTP message ends, feeding each layer; then judge the ends."""
    body, events, chunks, capture = obs.body, obs.events, obs.chunks, obs.capture
    on_text, on_reasoning = obs.on_text, obs.on_reasoning
    deadline_at = obs.started + obs.request['deadline']
    while not body.complete:
        sock.settimeout(_wait(obs))
        raw = fp.read1(READ_SIZE)
        if not raw:
            if obs.expired:
                raise _deadline_failure(obs)
            break
        obs.reads += 1
        if capture is not None:
            obs.keep(raw)
        payload = body.feed(raw)
        text_before = chunks.content_events
        for data in events.feed(payload):
            now = time.perf_counter()
            if now > deadline_at:
                raise _deadline_failure(obs)
            if obs.first_event_at is None:
                obs.first_event_at = now
            text, reasoning = chunks.accept(data)
            if text:
                if obs.first_text_at is None:
                    obs.first_text_at = now
                else:
                    obs.event_gaps.append(now - obs.last_text_at)
                obs.last_text_at = now
                if on_text:
                    on_text(text)
            if reasoning:
                if obs.first_reasoning_at is None:
                    obs.first_reasoning_at = now
                if on_reasoning:
                    on_reasoning(reasoning)
        if chunks.content_events != text_before:
            obs.text_reads += 1
        if body.overrun:
            obs.transport_complete = False
            obs.event_complete = events.pending() is None
            raise StreamError('transport', body.overrun_problem())
    _note_ends(obs)


def _note_ends(obs: Observation) -> None:
    """The body has ended: note whether the HTTP message and the event stream ended properly."""
    obs.transport_problem = obs.body.eof_problem()
    obs.event_problem = obs.events.pending()
    obs.transport_complete = obs.transport_problem is None
    obs.event_complete = obs.event_problem is None


def _wait(obs: Observation) -> float:
    """The socket timeout for the next operation: the idle timeout, cut to the deadline."""
    remaining = obs.request['deadline'] - (time.perf_counter() - obs.started)
    if remaining <= 0:
        raise _deadline_failure(obs)
    return min(obs.request['idle'], remaining)


def _deadline_failure(obs: Observation) -> StreamError:
    deadline = f'{obs.request["deadline"]:g} s'
    if obs.phase == 'body' and obs.chunks.done:
        return _unended_after_done(obs, f'the overall deadline of {deadline}')
    return StreamError('timeout', f'overall deadline of {deadline} reached during the {obs.phase} phase '
                                  f'after {obs.chunks.content_events} content events')


def _unended_after_done(obs: Observation, bound: str) -> StreamError:
    """[DONE] arrived but the HTTP message never ended: a transport failure, whichever bound noticed it."""
    obs.transport_complete = False
    obs.event_complete = obs.events.pending() is None
    return StreamError('transport', f'message did not end within {bound} after [DONE]; '
                                    f'received {obs.body.progress()}')


def _classify(exc: BaseException, obs: Observation) -> StreamError:
    """Turn an exception from the socket, TLS or http.client into a layered failure."""
    import http.client
    import socket
    import ssl
    request = obs.request
    if obs.expired or isinstance(exc, (TimeoutError, socket.timeout)):
        return _timeout_failure(obs)
    if isinstance(exc, ssl.SSLCertVerificationError):
        return StreamError('tls', f'certificate verification failed for {request["host"]}: '
                                  f'{exc.verify_message or exc.reason}')
    if isinstance(exc, ssl.SSLError):
        return StreamError('tls', f'TLS failed with {request["host"]}: {exc.reason or exc}')
    if obs.phase == 'connect' and isinstance(exc, OSError):
        reason = exc.strerror or str(exc) or type(exc).__name__
        return StreamError('connect', f'cannot connect to {request["host"]}:{request["port"]}: {reason}')
    if obs.phase in ('request', 'headers') and isinstance(exc, (OSError, http.client.HTTPException)):
        return StreamError('http', f'no valid response headers: {type(exc).__name__}: {exc}')
    if obs.phase == 'body' and isinstance(exc, OSError):
        received = obs.body.received if obs.body else 0
        return StreamError('transport', f'connection failed after {received} body bytes: '
                                        f'{type(exc).__name__}: {exc}')
    return StreamError('client', f'unexpected {type(exc).__name__} during the {obs.phase} phase: {exc}')


def _timeout_failure(obs: Observation) -> StreamError:
    request = obs.request
    if time.perf_counter() - obs.started >= request['deadline'] - 0.001:
        return _deadline_failure(obs)
    idle = f'{request["idle"]:g} s'
    if obs.phase == 'connect':
        return StreamError('timeout', f'no connection to {request["host"]}:{request["port"]} within {idle}')
    if obs.phase != 'body':
        return StreamError('timeout', f'no response headers within the idle timeout of {idle}')
    if obs.chunks.done:
        return _unended_after_done(obs, f'the idle timeout of {idle}')
    return StreamError('timeout', f'no bytes for {idle} (idle timeout) after '
                                  f'{obs.chunks.content_events} content events')


_PRIVATE_HEADERS = frozenset({'set-cookie', 'set-cookie2', 'cookie', 'authorization',
                              'proxy-authorization', 'www-authenticate', 'proxy-authenticate'})


def describe_response(response) -> dict:
    """Status line and headers worth keeping (no cookies, nothing auth-related)."""
    headers = response.msg
    lengths = headers.get_all('Content-Length') or []
    return {'status': response.status, 'reason': response.reason,
            'version': {10: '1.0', 11: '1.1'}.get(response.version, str(response.version)),
            'content_type': headers.get('Content-Type'),
            'transfer_encoding': headers.get('Transfer-Encoding'),
            'content_length': ', '.join(lengths) if lengths else None,
            'body_bytes': 0,
            'headers': [[name, value] for name, value in headers.items()
                        if name.lower() not in _PRIVATE_HEADERS]}


def _check_content_type(value: str | None) -> None:
    media_type = (value or '').split(';')[0].strip().lower()
    if media_type != 'text/event-stream':
        raise StreamError('http', f'expected content-type text/event-stream, got {value or "none"!r}')


def body_reader(response) -> ContentLengthBody | ChunkedBody | CloseDelimitedBody:
    """Choose the body framing from the response headers (RFC 9112, 6.3)."""
    headers = response.msg
    encoding = headers.get('Transfer-Encoding')
    if encoding is not None:
        codings = [part.strip().lower() for part in encoding.split(',') if part.strip()]
        if codings != ['chunked']:
            raise StreamError('http', f'unsupported transfer-encoding {encoding!r}; expected chunked')
        return ChunkedBody()
    if (headers.get('Content-Encoding') or 'identity').strip().lower() != 'identity':
        raise StreamError('http', f'unsupported content-encoding {headers.get("Content-Encoding")!r}')
    lengths = {part.strip() for value in headers.get_all('Content-Length') or [] for part in value.split(',')}
    if not lengths:
        return CloseDelimitedBody()
    if len(lengths) != 1 or not next(iter(lengths)).isdigit() or not next(iter(lengths)).isascii():
        raise StreamError('http', f'invalid Content-Length {", ".join(sorted(lengths))!r}')
    return ContentLengthBody(int(next(iter(lengths))))


def _status_problem(response, sock, obs: Observation) -> str:
    """The unexpected status, with the server's own error message when its body has one."""
    import json
    problem = f'expected status 200, got {response.status} {response.reason}'.rstrip()
    body = _read_error_body(response, sock, obs)
    try:
        error = server_error_fields(json.loads(body))
    except (ValueError, RecursionError):
        text = body.decode('utf-8', 'replace')
        if 'html' in (obs.http['content_type'] or '').lower():
            import re
            text = re.sub(r'<[^>]*>', ' ', text)
        text = ' '.join(text.split())
        return f'{problem}: {_preview(text, 200)}' if text else problem
    obs.chunks.server_error = error
    return f'{problem}: {describe_server_error(error)}'


def _read_error_body(response, sock, obs: Observation) -> bytes:
    """Up to MAX_ERROR_BODY bytes of an error response, under the same time bounds."""
    parts, size = [], 0
    try:
        body = obs.body = body_reader(response)
        while not body.complete and size < MAX_ERROR_BODY:
            sock.settimeout(_wait(obs))
            raw = response.fp.read1(min(READ_SIZE, MAX_ERROR_BODY - size))
            if not raw:
                break
            if obs.capture is not None:
                obs.keep(raw)
            parts.append(body.feed(raw))
            size += len(parts[-1])
    except (OSError, StreamError):
        pass  # the status line already says what failed; keep what arrived
    return b''.join(parts)


def response_head(response) -> bytes:
    """The status line and headers as received (minus cookies and auth headers), for a capture."""
    version = {10: 'HTTP/1.0', 11: 'HTTP/1.1'}.get(response.version, 'HTTP/1.1')
    lines = [f'{version} {response.status} {response.reason}']
    lines += [f'{name}: {value}' for name, value in response.msg.items() if name.lower() not in _PRIVATE_HEADERS]
    return ('\r\n'.join(lines) + '\r\n\r\n').encode('latin-1', 'replace')


# ---------------------------------------------------------------------------
# The evidence record
# ---------------------------------------------------------------------------

def _ms(start: float, at: float | None) -> float | None:
    return None if at is None else round((at - start) * 1000, 3)


def judge(obs: Observation) -> tuple[str, str] | None:
    """Why this run is not ok, as (layer, message); None when it is ok.

    A failure that stopped the reading (no connection, a bad status, invalid
    JSON, a timeout...) wins: the layers after it were never seen. A run that
    read its body to the end is judged in the order a response is built: the
    HTTP framing, then the event stream, then the completion itself.
    """
    if obs.failure is not None:
        return obs.failure.layer, obs.failure.message
    if obs.transport_problem:
        return 'transport', obs.transport_problem
    if obs.event_problem:
        return 'sse', obs.event_problem
    problem = obs.chunks.outcome_problem()
    if problem:
        return 'application', problem
    return None


def build_record(obs: Observation) -> dict:
    """The JSON evidence record of a run (never contains the API key)."""
    chunks, start = obs.chunks, obs.started
    verdict = judge(obs)
    http = obs.http
    if http is not None and obs.body is not None:
        http['body_bytes'] = obs.body.received
        http['framing'] = obs.body.framing
    ended = obs.ended if obs.ended is not None else time.perf_counter()
    record = {
        'ok': verdict is None,
        'error_layer': verdict[0] if verdict else None,
        'error': f'{verdict[0]}: {verdict[1]}' if verdict else None,
        'transport_complete': obs.transport_complete,
        'event_complete': obs.event_complete,
        'application_complete': chunks.server_error is None and chunks.outcome_problem() is None,
        'model': obs.request['model'],
        'text': chunks.text,
        'reasoning_text': chunks.reasoning,
        'finish_reason': chunks.finish_reason,
        'done': chunks.done,
        'completion_tokens': chunks.completion_tokens,
        'content_events': chunks.content_events,
        'data_events': chunks.data_events,
        'headers_ms': _ms(start, obs.headers_at),
        'first_event_ms': _ms(start, obs.first_event_at),
        'first_reasoning_ms': _ms(start, obs.first_reasoning_at),
        'first_text_ms': _ms(start, obs.first_text_at),
        'duration_ms': _ms(start, ended),
        'event_gaps_ms': [round(gap * 1000, 3) for gap in obs.event_gaps],
        'reads': obs.reads,
        'buffered_delivery': chunks.content_events >= 2 and obs.text_reads == 1,
        'response_id': chunks.response_id,
        'request_id': _header(http, 'x-request-id'),
        'server_error': chunks.server_error,
        'http': http,
        'source': 'fixture' if (_header(http, 'server') or '').startswith('synthetic-fixture')
                  else obs.request['source'],
        'url': obs.request['url'],
        'request': obs.request['parameters'],
        'started_at': _utc_iso(obs.started_wall),
        'client': {'version': __version__, 'python': sys.version.split()[0], 'platform': _platform()},
        'capture': None if obs.capture is None else {'bytes': len(obs.capture), 'truncated': obs.capture_truncated},
    }
    return redact(record, obs.request['token'])


def _utc_iso(timestamp: float) -> str:
    return time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime(timestamp)) + f'.{int(timestamp % 1 * 1000):03d}Z'


def _platform() -> str:
    if not hasattr(os, 'uname'):
        return sys.platform
    uname = os.uname()
    return f'{uname.sysname} {uname.release} {uname.machine}'


def _header(http: dict | None, name: str) -> str | None:
    for key, value in (http or {}).get('headers', []):
        if key.lower() == name:
            return value
    return None


def redact(value, secret: str):
    """A copy of value with every occurrence of secret in its strings replaced."""
    if not secret:
        return value
    if isinstance(value, str):
        return value.replace(secret, '[redacted]')
    if isinstance(value, dict):
        return {key: redact(item, secret) for key, item in value.items()}
    if isinstance(value, list):
        return [redact(item, secret) for item in value]
    return value


def interrupted_record(request: dict, signal_name: str) -> dict:
    """The record of a run that was interrupted before it could start."""
    obs = Observation(request)
    obs.fail(StreamError('interrupted', f'interrupted by {signal_name} before the request was sent'))
    obs.ended = obs.started
    return build_record(obs)


# ---------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------

SIGNAL_EXIT = {'SIGINT': 130, 'SIGTERM': 143}


class UsageError(Exception):
    """Invalid input from the command line: exit status 2, one line on stderr."""


def _parser():
    import argparse

    class OneLineParser(argparse.ArgumentParser):
        def error(self, message: str):
            self.exit(2, f'{self.prog}: error: {message}\n')

    parser = OneLineParser(
        prog='stream_client.py',
        description='Stream one chat completion and save evidence of whether it really finished. '
                    'Exit status: 0 ok, 1 not ok, 2 bad arguments or output path, 130/143 interrupted.',
        epilog='The API key is read from MODEL_API_KEY and sent as a Bearer token; it is never saved or printed.')
    parser.add_argument('--url', help=f'chat completions endpoint (default {DEFAULT_URL})')
    parser.add_argument('--model', help='model name to request (default with --fixture: synthetic-fixture)')
    parser.add_argument('--prompt', help=f'user message (default: {DEFAULT_PROMPT!r})')
    parser.add_argument('--prompt-file', metavar='PATH', help='read the user message from a file, or - for stdin')
    parser.add_argument('--system', metavar='TEXT', help='a system message before the user message')
    parser.add_argument('--max-tokens', type=int, default=128, metavar='N', help='output budget (default 128)')
    parser.add_argument('--temperature', type=float, default=0.0, metavar='T', help='sampling temperature (default 0)')
    parser.add_argument('--stop', action='append', metavar='TEXT', help='a stop string (repeatable)')
    parser.add_argument('--extra', metavar='JSON',
                        help='a JSON object merged into the request body, e.g. \'{"min_tokens": 3}\'; '
                             'it may not set model, messages, stream or n')
    parser.add_argument('--idle', type=float, default=10.0, metavar='S',
                        help='seconds to wait for the next bytes (default 10)')
    parser.add_argument('--deadline', type=float, default=60.0, metavar='S',
                        help='seconds the whole run may take (default 60)')
    parser.add_argument('--ca-file', metavar='PEM', help='extra trusted CA certificates for https')
    parser.add_argument('--output', metavar='FILE',
                        help='new file for the JSON evidence record (required); an existing file is never overwritten')
    parser.add_argument('--capture', metavar='FILE',
                        help='new file for the raw response (status line, headers, body bytes as received), '
                             'for --replay in fixture_server.py and bug reports')
    parser.add_argument('--fixture', metavar='MODE',
                        help='stream from the synthetic fixture, run in this process on a free loopback port')
    parser.add_argument('--quiet', action='store_true',
                        help='no live text and no verdict line on stderr (stdout keeps its JSON summary)')
    parser.add_argument('--compare', nargs='+', metavar='RECORD',
                        help='print saved records side by side instead of running')
    parser.add_argument('--version', action='version', version=f'%(prog)s {__version__}')
    return parser


def _request_from_args(args) -> dict:
    if args.fixture is not None:
        if args.url is not None:
            raise UsageError('--fixture and --url exclude each other')
        import fixture_server
        if args.fixture not in fixture_server.MODES:
            raise UsageError(f'unknown fixture mode {args.fixture!r}; choose from {", ".join(fixture_server.MODES)}')
        # The port is known only once the fixture listens: _start_fixture sets it, after the output is reserved.
        url, model = 'http://127.0.0.1:1/v1/chat/completions', args.model or 'synthetic-fixture'
    elif args.model is None:
        raise UsageError('--model is required (unless --fixture is used)')
    else:
        url, model = args.url or DEFAULT_URL, args.model
    return prepare(url, model, _prompt(args), max_tokens=args.max_tokens, idle=args.idle,
                   deadline=args.deadline, ca_file=args.ca_file, token=os.environ.get('MODEL_API_KEY'),
                   system=args.system, temperature=args.temperature, stop=args.stop, extra=_extra(args),
                   source='endpoint' if args.fixture is None else 'fixture')


def _prompt(args) -> str:
    if args.prompt_file is None:
        return DEFAULT_PROMPT if args.prompt is None else args.prompt
    if args.prompt is not None:
        raise UsageError('--prompt and --prompt-file exclude each other')
    try:
        if args.prompt_file == '-':
            return sys.stdin.read()
        with open(args.prompt_file, encoding='utf-8') as prompt:
            return prompt.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f'cannot read --prompt-file {args.prompt_file}: {getattr(exc, "strerror", None) or exc}') \
            from None


def _extra(args) -> dict | None:
    if args.extra is None:
        return None
    import json
    try:
        return json.loads(args.extra)
    except (ValueError, RecursionError) as exc:
        raise UsageError(f'--extra is not valid JSON: {exc}') from None


def reserve_output(path: str) -> int:
    """Create the evidence file exclusively (mode 0600) before anything is sent."""
    try:
        return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise UsageError(f'{path} already exists; evidence is never overwritten, choose a new file name') from None
    except FileNotFoundError:
        raise UsageError(f'cannot create {path}: its directory does not exist') from None
    except OSError as exc:
        raise UsageError(f'cannot create {path}: {exc.strerror or exc}') from None


def write_record(fd: int, record: dict) -> None:
    import json
    with os.fdopen(fd, 'w', encoding='utf-8') as output:
        json.dump(record, output, indent=2, ensure_ascii=False)
        output.write('\n')


def write_capture(fd: int, capture: bytearray, token: str) -> None:
    """Write the raw response, with the API key masked by asterisks of the same length (framing stays valid)."""
    data = bytes(capture)
    if token:
        data = data.replace(token.encode(), b'*' * len(token.encode()))
    with os.fdopen(fd, 'wb') as output:
        output.write(data)


def _terminate(signum, frame):
    raise Interrupted('SIGTERM')


def _start_fixture(mode: str, request: dict):
    import threading
    import fixture_server
    instance = fixture_server.server(0, mode)
    threading.Thread(target=instance.serve_forever, args=(0.05,), daemon=True).start()
    request['port'] = instance.server_port
    request['url'] = f'http://127.0.0.1:{instance.server_port}/v1/chat/completions'
    return instance


class LiveView:
    """What stderr shows during a run: on a terminal the answer as it arrives
    (reasoning dimmed), then a one-line verdict; elsewhere only a failure."""

    DIM, RESET = '\x1b[2m', '\x1b[0m'

    def __init__(self, out, quiet: bool) -> None:
        self.out = out
        self.quiet = quiet
        self.live = not quiet and out.isatty()
        self.color = self.live and 'NO_COLOR' not in os.environ
        self.showing = None  # 'reasoning' or 'text' once something was written

    def _write(self, text: str) -> None:
        self.out.write(text)
        self.out.flush()

    def reasoning(self, text: str) -> None:
        if self.showing != 'reasoning':
            self.showing = 'reasoning'
            text = 'reasoning: ' + text
        self._write(f'{self.DIM}{text}{self.RESET}' if self.color else text)

    def text(self, text: str) -> None:
        if self.showing == 'reasoning':
            self._write('\n')
        self.showing = 'text'
        self._write(text)

    def verdict(self, record: dict) -> None:
        if self.quiet or (record['ok'] and not self.live):
            return
        if self.showing:
            self._write('\n')
        self._write(verdict_line(record) + '\n')


def verdict_line(record: dict) -> str:
    """The run at a glance: 'ok: 2 content events, ...' or 'NOT OK [layer]: what went wrong'."""
    if record['ok']:
        return (f'ok: {record["content_events"]} content events, first text {record["first_text_ms"]:.0f} ms, '
                f'done {record["duration_ms"]:.0f} ms')
    layer = record['error_layer']
    return f'NOT OK [{layer}]: {record["error"].removeprefix(layer + ": ")}'


COMPARE_COLUMNS = (('file', None), ('source', 'source'), ('model', 'model'), ('ok', 'ok'),
                   ('layer', 'error_layer'), ('headers ms', 'headers_ms'), ('1st event ms', 'first_event_ms'),
                   ('1st text ms', 'first_text_ms'), ('duration ms', 'duration_ms'),
                   ('events', 'content_events'), ('tokens', 'completion_tokens'), ('reads', 'reads'),
                   ('buffered', 'buffered_delivery'))
COMPARED_SETTINGS = (('prompt', 'prompt_sha256'), ('max_tokens', 'max_tokens'), ('temperature', 'temperature'))


def load_records(paths: list[str]) -> list[dict]:
    """Saved evidence records; UsageError when one cannot be read or fixture and endpoint records mix."""
    import json
    records = []
    for path in paths:
        try:
            with open(path, encoding='utf-8') as file:
                record = json.load(file)
        except (OSError, ValueError) as exc:
            raise UsageError(f'cannot read record {path}: {getattr(exc, "strerror", None) or exc}') from None
        if not isinstance(record, dict) or 'ok' not in record:
            raise UsageError(f'{path} is not an evidence record')
        records.append(record)
    if len({record.get('source', 'endpoint') for record in records}) > 1:
        raise UsageError('refusing to compare fixture records with endpoint records: '
                         'fixture timings are synthetic and say nothing about a model')
    return records


def compare_table(paths: list[str], records: list[dict]) -> str:
    """One aligned row per record."""
    rows = [[name for name, _ in COMPARE_COLUMNS]]
    for path, record in zip(paths, records):
        rows.append([os.path.basename(path)] + [_cell(record.get(key)) for _, key in COMPARE_COLUMNS[1:]])
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return '\n'.join('  '.join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows)


def settings_differ(records: list[dict]) -> list[str]:
    """The settings (prompt, max_tokens, temperature, model) that differ between records."""
    import json
    differ = [name for name, key in COMPARED_SETTINGS
              if len({json.dumps((record.get('request') or {}).get(key)) for record in records}) > 1]
    if len({record.get('model') for record in records}) > 1:
        differ.append('model')
    return differ


def _cell(value) -> str:
    if value is None:
        return '-'
    if isinstance(value, bool):
        return 'yes' if value else 'no'
    if isinstance(value, float):
        return f'{value:.1f}'
    return str(value)


def _reserve_files(args) -> tuple[int, int | None]:
    """Create the output (and capture) file before anything is sent; undo the first if the second fails."""
    if args.capture is not None and os.path.abspath(args.capture) == os.path.abspath(args.output):
        raise UsageError('--capture and --output must be different files')
    fd = reserve_output(args.output)
    if args.capture is None:
        return fd, None
    try:
        return fd, reserve_output(args.capture)
    except UsageError:
        os.close(fd)
        os.unlink(args.output)
        raise


def _run_command(args, request: dict, fd: int, capture_fd: int | None) -> tuple[dict, int]:
    """Run once and write the record (and capture) whatever happens; return the record and exit status.

    SIGINT and SIGTERM are ignored by the caller from before the output is
    reserved; they are handled again only inside the block that always writes it.
    """
    import signal
    view = LiveView(sys.stderr, args.quiet)
    on_text, on_reasoning = (view.text, view.reasoning) if view.live else (None, None)
    record, status, fixture = None, 1, None
    capture = bytearray() if capture_fd is not None else None
    try:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, _terminate)
        if args.fixture is not None:
            fixture = _start_fixture(args.fixture, request)
        record = run(request, on_text, on_reasoning, capture)
        status = 0 if record['ok'] else 1
    except Interrupted as exc:
        record = exc.record or interrupted_record(request, exc.signal_name)
        status = SIGNAL_EXIT[exc.signal_name]
    except KeyboardInterrupt:
        record, status = interrupted_record(request, 'SIGINT'), 130
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if record is None:  # a bug in this client: still leave a valid record, then show the traceback
            obs = Observation(request)
            obs.fail(StreamError('client', 'the client failed before finishing its record'))
            record = build_record(obs)
        write_record(fd, record)
        if capture_fd is not None:
            write_capture(capture_fd, capture, request['token'])
        if fixture is not None:
            fixture.shutdown()
            fixture.server_close()
    signal.signal(signal.SIGINT, signal.default_int_handler)  # the evidence is safe on disk now
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    view.verdict(record)
    return record, status


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit status."""
    args = _parser().parse_args(argv)
    import json
    try:
        if args.compare:
            if args.output or args.fixture or args.url:
                raise UsageError('--compare only reads records; it takes no --output, --url or --fixture')
            records = load_records(args.compare)
            differ = settings_differ(records)
            if differ:
                print(f'stream_client.py: warning: the records differ in {", ".join(differ)}; compare only '
                      'runs with the same prompt, max_tokens, temperature and model', file=sys.stderr)
            print(compare_table(args.compare, records))
            return 0
        if args.output is None:
            raise UsageError('--output is required')
        request = _request_from_args(args)
        import signal
        for signum in (signal.SIGINT, signal.SIGTERM):  # no interruption between reserving and recording
            signal.signal(signum, signal.SIG_IGN)
        fd, capture_fd = _reserve_files(args)
    except (UsageError, ValueError) as exc:
        print(f'stream_client.py: error: {exc}', file=sys.stderr)
        return 2
    record, status = _run_command(args, request, fd, capture_fd)
    summary = {key: record[key] for key in ('ok', 'error_layer', 'first_text_ms', 'duration_ms',
                                            'finish_reason', 'error')}
    print(json.dumps(summary, ensure_ascii=False))
    return status


if __name__ == '__main__':
    sys.exit(main())
