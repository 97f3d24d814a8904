"""HTTP/1.x: the response head and the body framing (sans-IO).

``_ResponseHeadParser`` reads the status line and headers strictly,
``_body_reader()`` chooses the framing, and one reader per framing knows how
its body ends (RFC 9112).
"""
import dataclasses
import enum
import re

from ._limits import _count, _failure, _shorten, StreamError


# http.client hides what a strict verdict needs: it stops reading headers at a
# malformed line and frames the body from what it had, reads only the first
# Transfer-Encoding line, takes a 102 or 103 for the final response, and its
# read1() returns b'' without complaint when a Content-Length body is cut
# short. So http.client only formats the request; the response is read from the
# socket and parsed here, as h11 does. Each body reader knows only how its
# framing ends: feed() returns payload bytes, overrun counts bytes seen past
# the end of the message, eof_failure() says why a close was premature.

_MAX_HEAD_BYTES = 65_536        # status lines and header sections, 1xx responses included
_MAX_BODY_SIZE = 2**60 - 1      # the largest Content-Length or chunk size accepted, in bytes (leading zeros are free)

_TOKEN = rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"
_TEXT = rb'[\t \x21-\x7e\x80-\xff]*'  # visible characters, space and tab: a field value or reason phrase
_QUOTED = rb'"(?:[\t !#-\[\]-~\x80-\xff]|\\[\t -~\x80-\xff])*"'
# RFC 9110 5.5 / RFC 9112 5: field-line = field-name ":" OWS field-value OWS, no whitespace before the colon
_FIELD_LINE = re.compile(b'(' + _TOKEN + b'):[ \t]*(' + _TEXT + b')')
_STATUS_LINE = re.compile(rb'HTTP/(\d)\.(\d) (\d{3})(?: (' + _TEXT + b'))?')
_FIELD_VALUE = re.compile(_TEXT)
_HEAD_END = re.compile(rb'\n\r?\n')


@dataclasses.dataclass(frozen=True)
class _ResponseHead:
    """The status line and header fields of the final response, and the 1xx statuses skipped before it."""

    status: int
    reason: str
    version: str
    headers: tuple[tuple[str, str], ...]
    interim: tuple[int, ...] = ()
    by_name: dict = dataclasses.field(init=False, repr=False, compare=False)  # lower-cased name: values

    def __post_init__(self) -> None:
        by_name: dict[str, list[str]] = {}
        for key, value in self.headers:
            by_name.setdefault(key.lower(), []).append(value)
        object.__setattr__(self, 'by_name', by_name)

    def get_all(self, name: str) -> list[str]:
        return list(self.by_name.get(name.lower(), ()))

    def get(self, name: str) -> str | None:
        values = self.get_all(name)
        return values[0] if values else None

    def field_list(self, name: str) -> list[str]:
        """The elements of a list-valued field, all its lines combined in order (RFC 9110, 5.3)."""
        return [part.strip().lower() for value in self.get_all(name) for part in value.split(',') if part.strip()]


class _ResponseHeadParser:
    """The head of a response: status line and header section (RFC 9112, 4 and 5).

    ``feed(bytes)`` returns the final ResponseHead once its blank line has
    arrived (None before), skipping 1xx interim responses as RFC 9110, 15.2
    asks of a client; the bytes after it, the start of the body, are in
    ``rest``. Lines may end in CRLF or a bare LF (RFC 9112, 2.2); an obs-fold
    continuation line is joined to its field with a space (5.2). A line that
    is not a field line, a bad status line or a 101 raise StreamError('http');
    the whole head is bounded by MAX_HEAD_BYTES.
    """

    def __init__(self) -> None:
        self._buf = b''
        self._skipped = 0             # bytes of the interim responses already parsed
        self.interim: list[int] = []  # their statuses
        self.rest = b''

    def feed(self, raw: bytes) -> _ResponseHead | None:
        searched = max(0, len(self._buf) - 2)
        self._buf += raw
        while True:
            end = _HEAD_END.search(self._buf, searched)
            if end is None:
                if self._skipped + len(self._buf) > _MAX_HEAD_BYTES:
                    raise _failure('head_too_long', f'response head longer than {_MAX_HEAD_BYTES} bytes')
                return None
            head = _parse_head(self._buf[:end.start()], tuple(self.interim))
            self._skipped += end.end()
            self._buf, searched = self._buf[end.end():], 0
            if head.status == 101:
                raise _failure('unexpected_101', 'unexpected 101 Switching Protocols: this client asked for no upgrade')
            if not 100 <= head.status < 200:
                self.rest, self._buf = self._buf, b''
                return head
            self.interim.append(head.status)

    def eof_failure(self) -> StreamError:
        """Why a connection that closed now has not delivered a response."""
        received = self._skipped + len(self._buf)
        if not received:
            return _failure('no_response', 'connection closed before any response bytes arrived')
        return _failure('eof_in_head', f'connection closed inside the response head after {_count(received, "byte")}')


def _parse_head(block: bytes, interim: tuple[int, ...]) -> _ResponseHead:
    """The status line and fields of one head, without its blank line."""
    lines = [line[:-1] if line.endswith(b'\r') else line for line in block.split(b'\n')]
    status = _STATUS_LINE.fullmatch(lines[0])
    if status is None:
        raise _failure('bad_status_line', f'invalid status line {bytes(lines[0][:60])!r}: expected "HTTP/1.1 200 OK"')
    if status[1] != b'1':
        raise _failure('http_version', f'unsupported HTTP version {status[1].decode()}.{status[2].decode()}; '
                                       'expected HTTP/1.x')
    fields: list[list[str]] = []
    for line in lines[1:]:
        if line[:1] in (b' ', b'\t') and fields and _FIELD_VALUE.fullmatch(line):
            fields[-1][1] = (fields[-1][1] + ' ' + line.strip(b' \t').decode('latin-1')).strip()  # obs-fold
            continue
        field = _FIELD_LINE.fullmatch(line)
        if field is None:
            raise _failure('bad_header_line', _malformed_field(line))
        fields.append([field[1].decode('ascii'), field[2].rstrip(b' \t').decode('latin-1')])
    return _ResponseHead(int(status[3]), (status[4] or b'').decode('latin-1'),
                         f'{status[1].decode()}.{status[2].decode()}',
                         tuple((name, value) for name, value in fields), interim)


def _malformed_field(line: bytes) -> str:
    seen = repr(bytes(line[:60]))
    if line[:1] in (b' ', b'\t'):
        return f'header continuation line {seen} with no field before it; expected "name: value"'
    name, colon, _ = line.partition(b':')
    if not colon:
        return f'header line without a colon: {seen}; expected "name: value"'
    if name.rstrip(b' \t') != name:
        return f'whitespace between the field name and the colon in {seen}; expected "name: value"'
    return f'invalid header line {seen}; expected "name: value" with a token name and visible characters'


class _ContentLengthBody:
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

    def eof_failure(self, incomplete_close: bool = False) -> StreamError | None:
        """Why a close now is premature; the length ends the body, whatever the close (RFC 9112, 9.8)."""
        return None if self.complete else _failure('body_truncated', f'connection closed after {self.progress()}')

    def progress(self) -> str:
        return f'{self.received} of {_count(self.declared, "body byte")}'

    def overrun_failure(self) -> StreamError:
        return _failure('body_overrun', f'{_count(self.overrun, "byte")} beyond the declared Content-Length of '
                                        f'{self.declared}')


class _Chunk(enum.Enum):
    """Where a chunked body is: the states of ChunkedBody."""

    SIZE = 'chunk-size line'
    DATA = 'chunk data'
    DATA_END = 'CRLF after chunk data'
    TRAILER = 'trailer section'
    COMPLETE = 'complete'


# The states by name: before Python 3.12 an enum member costs a slow lookup, and feed() runs for every read.
_CHUNK_SIZE, _CHUNK_DATA, _CHUNK_DATA_END, _CHUNK_TRAILER, _CHUNK_COMPLETE = _Chunk

_MAX_CHUNK_LINE = 4096        # bytes of one chunk-size or trailer line
_MAX_TRAILER_BYTES = 16_384   # bytes of the whole trailer section

# RFC 9112 7.1.1: chunk-ext = *( BWS ";" BWS chunk-ext-name [ BWS "=" BWS chunk-ext-val ] )
_CHUNK_EXTENSIONS = re.compile(rb'(?:[ \t]*;[ \t]*' + _TOKEN + rb'(?:[ \t]*=[ \t]*(?:' + _TOKEN + b'|' + _QUOTED
                               + rb'))?)*[ \t]*')


_USUAL_CHUNK_SIZE = re.compile(rb'([0-9a-fA-F]{1,15})\r\n')  # a chunk-size line as servers write it


def _check_line_length(line: bytes, what: str) -> None:
    """A chunk-size or trailer line that arrived whole is bounded as one still arriving is."""
    if len(line) > _MAX_CHUNK_LINE:
        raise _failure('chunk_line_too_long', f'{what} longer than {_MAX_CHUNK_LINE} bytes')


class _ChunkedBody:
    """A body in chunked transfer coding (RFC 9112, 7.1), ending with its zero chunk and trailer.

    Every chunk-size line ends in CRLF (a trailer line, like a header line, may
    also end in a bare LF); the size has no leading
    whitespace, any number of leading zeros and a value up to MAX_BODY_SIZE; extensions
    are parsed and ignored; trailer lines must be field lines, and the trailer
    section is bounded. Anything else raises StreamError('transport').
    """

    framing = 'chunked'
    _HEX = b'0123456789abcdefABCDEF'

    def __init__(self) -> None:
        self.received = 0
        self.overrun = 0
        self._pending = b''        # an incomplete line or chunk-ending CRLF
        self._chunk_left = 0       # payload bytes still owed by the current chunk
        self._trailer_bytes = 0
        self._state = _CHUNK_SIZE   # SIZE -> (DATA -> DATA_END ->) SIZE ... SIZE(0) -> TRAILER -> COMPLETE

    @property
    def complete(self) -> bool:
        return self._state is _CHUNK_COMPLETE

    def feed(self, raw: bytes) -> bytes:
        SIZE, DATA, DATA_END, COMPLETE = _CHUNK_SIZE, _CHUNK_DATA, _CHUNK_DATA_END, _CHUNK_COMPLETE
        buf = self._pending + raw if self._pending else raw
        self._pending = b''
        out = []
        pos, end = 0, len(buf)
        state = self._state
        while pos < end:
            if state is SIZE:
                eol = buf.find(b'\n', pos)
                if eol < 0:
                    self._keep_partial_line(buf, pos, end)
                    break
                usual = _USUAL_CHUNK_SIZE.match(buf, pos, eol + 1)
                if usual is not None:  # hex digits and CRLF, nothing else, under 2**60: in bound
                    size = int(usual[1], 16)
                else:
                    size = self._chunk_size(buf[pos:eol])
                pos = eol + 1
                if not size:
                    state = _CHUNK_TRAILER
                    continue
                stop = pos + size
                if stop + 2 <= end:  # the whole chunk and its CRLF are here: take them in one step
                    if buf[stop:stop + 2] != b'\r\n':
                        raise _failure('bad_chunk_end', 'chunk data not followed by CRLF: '
                                                        f'{bytes(buf[stop:stop + 8])!r}')
                    out.append(buf[pos:stop])
                    pos = stop + 2
                else:
                    self._chunk_left, state = size, DATA
            elif state is DATA:
                take = min(self._chunk_left, end - pos)
                out.append(buf[pos:pos + take])
                pos += take
                self._chunk_left -= take
                if not self._chunk_left:
                    state = DATA_END
            elif state is DATA_END:
                if end - pos < 2:
                    self._pending = buf[pos:]
                    break
                if buf[pos:pos + 2] != b'\r\n':
                    raise _failure('bad_chunk_end', f'chunk data not followed by CRLF: {bytes(buf[pos:pos + 8])!r}')
                pos += 2
                state = SIZE
            elif state is COMPLETE:
                self.overrun += end - pos
                break
            else:
                eol = buf.find(b'\n', pos)
                if eol < 0:
                    self._keep_partial_line(buf, pos, end)
                    break
                if self._trailer_line(buf[pos:eol]):
                    state = COMPLETE
                pos = eol + 1
        self._state = state
        payload = b''.join(out) if len(out) != 1 else out[0]
        self.received += len(payload)
        return payload

    def _keep_partial_line(self, buf: bytes, pos: int, end: int) -> None:
        if end - pos > _MAX_CHUNK_LINE:
            raise _failure('chunk_line_too_long', f'{self._state.value} longer than {_MAX_CHUNK_LINE} bytes without '
                                                  'a line end')
        self._pending = buf[pos:]

    @staticmethod
    def _line_content(line: bytes, what: str) -> bytes:
        """A line (up to its LF) without its CR; StreamError unless it ended in exactly CRLF."""
        if not line.endswith(b'\r') or b'\r' in line[:-1]:
            ended = 'CR CR LF' if line.endswith(b'\r\r') else 'a bare CR inside it' if line.endswith(b'\r') \
                else 'a bare LF'
            raise _failure('bad_line_end', f'{what} ending in {ended}, expected CRLF: {bytes(line[:40])!r}')
        return line[:-1]

    def _chunk_size(self, line: bytes) -> int:
        """The size declared by a chunk-size line (RFC 9112, 7.1)."""
        _check_line_length(line, 'chunk-size line')
        content = self._line_content(line, 'chunk-size line')
        digits, semicolon, extensions = content.partition(b';')
        if semicolon:
            digits, extensions = digits.rstrip(b' \t'), semicolon + extensions
            if not _CHUNK_EXTENSIONS.fullmatch(b' ' + extensions):
                raise _failure('bad_chunk_extension', f'invalid chunk extension in {bytes(content[:40])!r}')
        elif digits[-1:] in (b' ', b'\t'):
            digits = digits.rstrip(b' \t')
        if not digits or digits.strip(self._HEX):
            raise _failure('bad_chunk_size', f'invalid chunk size line {bytes(content[:40])!r}: '
                                             'expected hexadecimal digits')
        size = int(digits, 16)  # base 16 has no digit limit, and the line is bounded (_check_line_length)
        if size > _MAX_BODY_SIZE:
            raise _failure('chunk_too_large', f'chunk size 0x{bytes(digits.lstrip(b"0")[:40]).decode()} is over the '
                                              f'bound of {_MAX_BODY_SIZE} bytes')
        return size

    def _trailer_line(self, line: bytes) -> bool:
        """Check one trailer line (up to its LF); True when it is the blank line that ends the message.
        Like a header line, it may end in CRLF or a bare LF (RFC 9112, 2.2)."""
        content = line[:-1] if line.endswith(b'\r') else line
        if not content:
            return True
        _check_line_length(line, 'trailer line')
        self._trailer_bytes += len(line) + 1
        if self._trailer_bytes > _MAX_TRAILER_BYTES:
            raise _failure('trailer_too_long', f'trailer section longer than {_MAX_TRAILER_BYTES} bytes')
        if not _FIELD_LINE.fullmatch(content):
            raise _failure('bad_trailer_line', f'invalid trailer line {bytes(content[:40])!r}: '
                                               'expected a field line "name: value"')
        return False

    def eof_failure(self, incomplete_close: bool = False) -> StreamError | None:
        """Why a close now is premature; the last chunk ends the body, whatever the close (RFC 9112, 9.8)."""
        state, received = self._state, _count(self.received, 'body byte')
        if state is _Chunk.COMPLETE:
            return None
        if state is _Chunk.DATA or state is _Chunk.DATA_END:
            return _failure('eof_in_chunk', f'connection closed inside a chunk after {received} '
                                            f'({_count(self._chunk_left, "byte")} of that chunk missing)')
        if state is _Chunk.TRAILER:
            return _failure('eof_in_trailer', f'chunked body ended inside its trailer after {received}')
        return _failure('no_last_chunk', f'chunked body ended without its terminating chunk after {received}')

    def progress(self) -> str:
        return f'{_count(self.received, "body byte")} and no terminating chunk'

    def overrun_failure(self) -> StreamError:
        return _failure('body_overrun', f'{_count(self.overrun, "byte")} after the terminating chunk')


class _CloseDelimitedBody:
    """A body with neither length nor chunking: it ends when the server closes."""

    framing = 'close'
    complete = False
    overrun = 0

    def __init__(self) -> None:
        self.received = 0

    def feed(self, raw: bytes) -> bytes:
        self.received += len(raw)
        return raw

    def eof_failure(self, incomplete_close: bool = False) -> StreamError | None:
        """None: the close ends this body, unless it was an incomplete close, a TLS connection closed
        without close_notify, which could be an attacker's or a proxy's cut (RFC 9112, 9.8)."""
        if not incomplete_close:
            return None
        return _failure('tls_truncated', f'the TLS connection closed without close_notify after '
                                         f'{_count(self.received, "body byte")}: a body that ends with the '
                                         f'connection is complete only with that alert')

    def progress(self) -> str:
        return f'{_count(self.received, "body byte")} and the connection still open'


def _body_reader(head: _ResponseHead) -> _ContentLengthBody | _ChunkedBody | _CloseDelimitedBody:
    """Choose the body framing from the response head (RFC 9112, 6.3), refusing what cannot be decoded."""
    encodings = head.field_list('Content-Encoding')
    if any(coding != 'identity' for coding in encodings):
        raise _failure('unsupported_encoding', 'unsupported content-encoding '
                                               f'{", ".join(head.get_all("Content-Encoding"))!r}')
    if head.get_all('Transfer-Encoding'):
        if head.version == '1.0':  # RFC 9112, 6.1: a hop that speaks only HTTP/1.0 may have passed chunks on
            raise _failure('http10_transfer_encoding', 'an HTTP/1.0 response with Transfer-Encoding: its framing '
                                                       'is faulty, as an HTTP/1.0 hop may have passed it on unread')
        if head.field_list('Transfer-Encoding') != ['chunked']:
            raise _failure('unsupported_encoding', f'unsupported transfer-encoding '
                                                   f'{", ".join(head.get_all("Transfer-Encoding"))!r}; expected '
                                                   'chunked alone')
        if head.get_all('Content-Length'):
            raise _failure('ambiguous_framing', 'both Transfer-Encoding and Content-Length: the framing is ambiguous')
        return _ChunkedBody()
    length = _content_length(head)
    return _CloseDelimitedBody() if length is None else _ContentLengthBody(length)


def _content_length(head: _ResponseHead) -> int | None:
    """The declared Content-Length, or None when there is none. StreamError('http') when it is not
    1*DIGIT, when a list of values disagrees, or when its value is over MAX_BODY_SIZE; any number of
    leading zeros is allowed (RFC 9110, 8.6)."""
    parts = [part.strip() for value in head.get_all('Content-Length') for part in value.split(',')]
    if not parts:
        return None
    values = set()
    for part in parts:
        if not part.isdigit() or not part.isascii():
            raise _failure('bad_content_length', f'invalid Content-Length {_shorten(", ".join(parts))!r}: expected '
                                                 'digits')
        significant = part.lstrip('0') or '0'
        if len(significant) > len(str(_MAX_BODY_SIZE)) or int(significant) > _MAX_BODY_SIZE:  # no int() of 4,300 digits
            raise _failure('bad_content_length', f'Content-Length {_shorten(significant, 30)} is over the bound of '
                                                 f'{_MAX_BODY_SIZE} bytes')
        values.add(int(significant))
    if len(values) != 1:
        raise _failure('bad_content_length', f'Content-Length values disagree: {_shorten(", ".join(parts))!r}')
    return values.pop()
