"""The whole response (sans-IO): bytes in, the answer's pieces and each layer's state out.

``ResponseReader`` composes HTTP, SSE and the API's grammar: bytes in through
``feed()`` and ``eof()``; tests, fuzzers and offline analysis use it as the
transport does. ``UnstreamedReader`` reads the cross-check's unstreamed twin.
"""
import json
import re

from ._limits import (
    _ANSWER_EVENT_CHARS, _ANSWER_LINE_CHARS, _failure, _MAX_CAPTURE_BYTES, _MAX_ERROR_BODY, _preview, StreamError)
from ._dialects import _detect_dialect
from ._validator import _describe_server_error, Pieces, _server_error_fields, StreamValidator
from ._answer import Answer, _MAX_UNSTREAMED_BODY, unstreamed_answer
from ._http import (
    _body_reader, _ChunkedBody, _CloseDelimitedBody, _ContentLengthBody, _ResponseHead, _ResponseHeadParser)


class Capture:
    """The raw response bytes (status line, headers, body as received), up to a bound."""

    def __init__(self, limit: int = _MAX_CAPTURE_BYTES) -> None:
        self.data = bytearray()
        self.limit = limit
        self.truncated = False

    def keep(self, raw: bytes) -> None:
        if len(self.data) + len(raw) <= self.limit:
            self.data += raw
        else:
            self.truncated = True


_PRIVATE_HEADERS = frozenset({'set-cookie', 'set-cookie2', 'cookie', 'authorization',
                              'proxy-authorization', 'www-authenticate', 'proxy-authenticate'})


def _public_headers(head: _ResponseHead) -> list[list[str]]:
    """The response headers worth keeping: no cookies, nothing auth-related."""
    return [[name, value] for name, value in head.headers if name.lower() not in _PRIVATE_HEADERS]


def _check_content_type(value: str | None) -> None:
    media_type = (value or '').split(';')[0].strip().lower()
    if media_type != 'text/event-stream':
        raise _failure('content_type', f'expected content-type text/event-stream, got {value or "none"!r}')


def _status_failure(head: _ResponseHead, body: bytes) -> StreamError:
    """The unexpected status, with the server's own error message when its body has one."""
    problem = f'expected status 200, got {head.status} {head.reason}'.rstrip()
    try:
        error = _server_error_fields(json.loads(body))
    except (ValueError, RecursionError):
        text = body.decode('utf-8', 'replace')
        if 'html' in (head.get('Content-Type') or '').lower():
            text = re.sub(r'(?is)<head>.*?</head>|<[^>]*>', ' ', text)  # the title repeats the heading
        text = ' '.join(text.split())
        return _failure('status_not_200', f'{problem}: {_preview(text, 200)}' if text else problem)
    said = (str(head.status), head.reason)
    return _failure('status_not_200', f'{problem}: {_describe_server_error(error, said)}', server_error=error)


def _error_body_reader(head: _ResponseHead):
    """The framing reader of an error response, or None when its framing is unusable too
    (the status already says what failed)."""
    try:
        return _body_reader(head)
    except StreamError:
        return None


def _response_head(head: _ResponseHead) -> bytes:
    """The status line and headers as received (minus cookies and auth headers), for a capture."""
    lines = [f'HTTP/{head.version} {head.status} {head.reason}']
    lines += [f'{name}: {value}' for name, value in _public_headers(head)]
    return ('\r\n'.join(lines) + '\r\n\r\n').encode('latin-1', 'replace')


class ResponseReader:
    """One streamed response, fed as its bytes arrive: the head parser, the body framing, the SSE
    parser and the API's validator composed into one object, as h11's Connection composes its
    readers. No socket, no clock: run() is the socket loop around it, and tests, fuzzers and
    offline analysis of a capture feed it the same way.

    ``feed(data)`` returns the ``Pieces`` (text, reasoning, call) of each event those bytes completed,
    in order, as the validator's accept() gives them. ``eof()`` says the connection closed. When
    a layer breaks, ``error`` holds its StreamError, ``feed`` returns what was accepted before
    the break, and nothing more should be fed. ``message_complete`` says the message ended as its
    framing promised. A status other than 200 becomes an ``http`` error once up to MAX_ERROR_BODY
    bytes of its body (the server's own message) have arrived, or the connection closed. judge()
    gives the verdict.
    """

    def __init__(self, validator: StreamValidator, capture: Capture | None = None) -> None:
        self.validator = validator
        self.events = validator.parser(_ANSWER_LINE_CHARS, _ANSWER_EVENT_CHARS)  # the answer's bounds, not the guide's
        self.capture = capture
        self.head: _ResponseHead | None = None
        self.body: _ContentLengthBody | _ChunkedBody | _CloseDelimitedBody | None = None
        self.error: StreamError | None = None
        self.received = 0     # bytes fed, head included
        self.opening = b''    # the first bytes fed, which say what kind of server answered
        self.reads = 0        # feeds that carried body bytes
        self.incomplete_close = False  # the connection closed: over TLS, without close_notify (see eof())
        self._heads = _ResponseHeadParser()
        self._error_body: list[bytes] | None = None  # the body of a response whose status is not 200
        self._error_size = 0

    @property
    def message_complete(self) -> bool:
        return self.body is not None and self.body.complete

    @property
    def reading_error_body(self) -> bool:
        return self._error_body is not None

    def feed(self, data: bytes) -> list[Pieces]:
        """Consume the next bytes of the response; return the Pieces of each event completed."""
        pieces: list[Pieces] = []
        if self.error is not None:
            return pieces
        if len(self.opening) < 8:
            self.opening = (self.opening + data)[:8]
        self.received += len(data)
        try:
            if self.head is None:
                data = self._feed_head(data)
            if data:
                self.reads += 1
                if self.capture is not None:
                    self.capture.keep(data)
                if self._error_body is not None:
                    self._feed_error_body(data)
                else:
                    self._feed_body(data, pieces)
        except StreamError as exc:
            self.error = exc
        return pieces

    def eof(self, incomplete_close: bool = False) -> None:
        """The connection closed (``incomplete_close``: a TLS connection, without close_notify). An error
        if that was inside the head or the body of an error status; otherwise judge() reads how each
        layer ended."""
        self.incomplete_close = incomplete_close
        if self.error is not None:
            return
        self.error = self.early_end()

    def early_end(self) -> StreamError | None:
        """The failure if the response ended now, before its body: inside the head, or inside an error body."""
        if self.head is None:
            return self._heads.eof_failure()
        return self.status_failure() if self._error_body is not None else None

    def status_failure(self) -> StreamError:
        """The failure of a response whose status is not 200, with the server's message when it sent one."""
        return _status_failure(self.head, b''.join(self._error_body or ())[:_MAX_ERROR_BODY])

    def _feed_head(self, data: bytes) -> bytes:
        """Feed the head parser; once the head is whole, choose the body reader and return the body's first bytes."""
        head = self._heads.feed(data)
        if head is None:
            return b''
        self.head = head
        if self.capture is not None:
            self.capture.keep(_response_head(head))
        if head.status != 200:
            self._error_body = []
            self.body = _error_body_reader(head)
            if self.body is None:  # its framing is unusable too: the status says what failed
                raise self.status_failure()
        else:
            _check_content_type(head.get('Content-Type'))
            self.body = _body_reader(head)
            self.validator.detected(_detect_dialect(head.get))
        return self._heads.rest

    def _feed_body(self, data: bytes, pieces: list[Pieces]) -> None:
        accept = self.validator.accept
        for event in self.events.feed(self.body.feed(data)):
            pieces.append(accept(event))
        if self.events.stray:
            self._check_stray()
        if self.body.overrun:
            raise self.body.overrun_failure()

    def _check_stray(self) -> None:
        """A server error written outside SSE (Ollama's bare JSON line, older llama.cpp's ``error:``
        field) fails as an error event does, with its message; other stray lines are only kept."""
        for line in self.events.stray:
            name, _, value = line.partition(':')
            try:
                body = json.loads(value if name == 'error' else line)
            except (ValueError, RecursionError):
                body = value.strip() if name == 'error' else None
            if name == 'error' or (isinstance(body, dict) and body.get('error') is not None):
                error = _server_error_fields(body)
                raise _failure('server_error_event', f'server sent an error outside SSE ({_preview(line)}): '
                                                     f'{_describe_server_error(error)}', error)

    def _feed_error_body(self, data: bytes) -> None:
        try:
            part = self.body.feed(data)
        except StreamError:  # broken framing in an error body: the status already says what failed
            raise self.status_failure() from None
        self._error_body.append(part)
        self._error_size += len(part)
        if self.body.complete or self._error_size >= _MAX_ERROR_BODY:
            raise self.status_failure()


class UnstreamedReader:
    """One unstreamed response (the cross-check's ``stream: false`` twin), fed as its bytes arrive: the
    head, then the body its framing delimits, kept whole up to MAX_UNSTREAMED_BODY bytes. No socket, no
    clock. ``complete`` once the message ended or a layer broke (``error``); ``answer()`` judges it."""

    def __init__(self) -> None:
        self.head: _ResponseHead | None = None
        self.body: _ContentLengthBody | _ChunkedBody | _CloseDelimitedBody | None = None
        self.error: StreamError | None = None
        self._heads = _ResponseHeadParser()
        self._parts: list[bytes] = []
        self._size = 0

    @property
    def complete(self) -> bool:
        return self.error is not None or (self.body is not None and self.body.complete)

    def feed(self, data: bytes) -> None:
        if self.complete:
            return
        try:
            if self.head is None:
                self.head = self._heads.feed(data)
                if self.head is None:
                    return
                self.body = _body_reader(self.head)
                data = self._heads.rest
            if data:
                self._keep(self.body.feed(data))
        except StreamError as exc:
            self.error = exc

    def _keep(self, part: bytes) -> None:
        self._size += len(part)
        if self._size > _MAX_UNSTREAMED_BODY:
            raise _failure('unstreamed_too_long', f'the unstreamed answer is longer than {_MAX_UNSTREAMED_BODY} bytes')
        self._parts.append(part)

    def eof(self, incomplete_close: bool = False) -> None:
        """The connection closed (``incomplete_close``: a TLS connection, without close_notify): an error
        unless the message had ended as its framing promised."""
        if self.complete:
            return
        self.error = self._heads.eof_failure() if self.head is None else self.body.eof_failure(incomplete_close)

    def content(self) -> bytes:
        """The whole body of a response with status 200; StreamError for a broken message or another status
        (with the server's message)."""
        if self.error is not None:
            raise self.error
        body = b''.join(self._parts)
        if self.head.status != 200:
            raise _status_failure(self.head, body[:_MAX_ERROR_BODY])
        return body

    def answer(self, api: str) -> Answer:
        """The answer of the whole response; StreamError for a broken message, a status other than 200
        (with the server's message) or a body that is not an answer of this API."""
        return unstreamed_answer(api, self.content())
