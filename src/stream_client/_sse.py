"""SSE: bytes to event data (sans-IO).

``Events`` (and ``TypedEvents``, which keeps each event's type) take the bytes
of a body in any chunks and give back the data of each whole event.
"""
import codecs

from ._limits import _count, _DATA_PREFIX, MAX_EVENT_CHARS, MAX_LINE_CHARS, _preview, SSEDecodeError, SSEError


_MAX_STRAY_LINES = 4     # lines outside SSE kept (a bare JSON line, an error: field), each at most:
_MAX_STRAY_CHARS = 2000


class Events:
    """Incremental parser for a text/event-stream body (WHATWG HTML, 9.2.6).

    ``feed(bytes)`` returns the data of every event completed by those bytes.
    UTF-8 is decoded incrementally and one leading BOM is dropped. Lines end
    in CR, LF or CRLF (a CRLF split across reads counts once); a blank line
    dispatches the event; only ``data`` fields contribute, several joined by
    LF; comments and other fields are ignored (the first few lines that look like
    a server's error, a bare JSON object or an ``error`` field, are kept in
    ``stray``). An event without its blank
    line is never dispatched, and ``pending()`` says what the stream would
    end inside. ``TypedEvents`` also returns each event's type.

    The guide's contract holds: a line over ``max_line_chars`` raises a
    ValueError (SSEError), and so does an event whose data is over
    ``max_event_chars``; bytes that are not UTF-8 raise a UnicodeDecodeError
    (SSEDecodeError), and ``finish()`` raises only for an incomplete UTF-8
    character: an unterminated final event is dropped, not an error of the
    parser. The bounds are the guide's (MAX_LINE_CHARS, MAX_EVENT_CHARS)
    unless the caller asks for others, as the client's response reader does
    (docs/limits.md).

    Fast path: the bytes are decoded and split with str methods running in C.
    When every complete line of a read is ``data: ...`` followed by a blank
    line (vLLM's shape), one ``split`` yields all the events at once; any
    other shape goes line by line. Bounds are checked on line lengths, never
    by walking characters.
    """

    def __init__(self, max_line_chars: int | None = None, max_event_chars: int | None = None) -> None:
        self._max_line = MAX_LINE_CHARS if max_line_chars is None else max_line_chars
        self._max_event = MAX_EVENT_CHARS if max_event_chars is None else max_event_chars
        self._undecoded = b''       # an incomplete UTF-8 character from the last read
        self._started = False       # a character has been decoded (so a BOM is no longer leading)
        self._after_cr = False      # the last read ended in CR: a leading LF completes that CRLF
        self._open: list[str] = []  # the pieces of the unterminated last line (joined once, when it ends)
        self._open_chars = 0        # characters in self._open
        self._data: list[str] = []  # data lines of the event in progress
        self._size = 0              # characters in self._data
        self._type = ''             # the event field of the event in progress
        self.stray: list[str] = []  # lines outside SSE that look like a server's error, the first few, shortened

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
            self._hold(text)
            return []
        if self._open:
            block = ''.join(self._open) + text[:last]
            self._open, self._open_chars = [], 0
        else:
            block = text[:last]
        if last + 1 < len(text):
            self._hold(text[last + 1:])
        if not self._data and not self._type and block.endswith('\n') and block.startswith(_DATA_PREFIX):
            events = self._single_line_events(block[:-1])
            if events is not None:
                return self._untyped(events)
        return self._events_by_line(block)

    def pending(self) -> SSEError | None:
        """What the stream would end inside if it ended now (an SSEError), or None at an event boundary."""
        if self._undecoded:
            return SSEError('eof_in_utf8', f'stream ended inside a UTF-8 character '
                                           f'({_count(len(self._undecoded), "byte")} pending)')
        if self._open:
            return SSEError('eof_in_line', f'stream ended inside a line: {_preview("".join(self._open))}')
        if self._data:
            return SSEError('eof_in_event', 'stream ended inside an event: its blank line never arrived')
        return None

    def finish(self) -> None:
        """Declare the body ended: SSEDecodeError if it ended inside a UTF-8 character.

        An unterminated final line or event is not dispatched and is not an
        error here; the client judges the event layer from pending().
        """
        if self._undecoded:
            raise SSEDecodeError(self._undecoded, 0, len(self._undecoded),
                                 f'stream ended inside a UTF-8 character '
                                 f'({_count(len(self._undecoded), "byte")} pending)', 'eof_in_utf8')

    def _decode(self, raw: bytes) -> str:
        data = self._undecoded + raw if self._undecoded else raw
        try:
            text = data.decode()  # the usual read: whole characters only (and the quicker call)
            self._undecoded = b''
        except UnicodeDecodeError:
            text = self._decode_partial(data)
        if not self._started and text:
            self._started = True
            if text[0] == '\ufeff':
                text = text[1:]
        return text

    def _decode_partial(self, data: bytes) -> str:
        """The whole characters of bytes that may end inside one, which is kept for the next read."""
        try:
            text, used = codecs.utf_8_decode(data, 'strict', False)
        except UnicodeDecodeError as exc:
            raise SSEDecodeError(data, exc.start, exc.end,
                                 f'invalid UTF-8 byte {data[exc.start]:#04x} in the event stream') from None
        self._undecoded = data[used:]
        return text

    def _hold(self, piece: str) -> None:
        """Keep the start of a line whose end has not arrived, within the line bound."""
        if piece:
            self._open.append(piece)
            self._open_chars += len(piece)
            if self._open_chars > self._max_line:
                raise SSEError('line_too_long', f'line longer than {self._max_line} characters without a line end')

    def _single_line_events(self, core: str) -> list[str] | None:
        """Split ``data: A\\n\\ndata: B`` into ['A', 'B'], or None if the block has another shape."""
        events = core.split('\n\n' + _DATA_PREFIX)
        if core.count('\n') != 2 * (len(events) - 1):
            return None  # some event has several lines, or extra blank lines
        events[0] = events[0][len(_DATA_PREFIX):]
        longest = max(map(len, events)) if len(events) > 1 else len(events[0])
        if longest > self._max_line - len(_DATA_PREFIX):
            raise SSEError('line_too_long', f'line longer than {self._max_line} characters')
        if longest + 1 > self._max_event:  # counted as the line-by-line path counts it
            raise SSEError('event_too_long', f'event data longer than {self._max_event} characters')
        return events

    def _events_by_line(self, block: str) -> list:
        events = []
        for line in block.split('\n'):
            if not line:
                if self._data:
                    events.append(self._dispatch('\n'.join(self._data)))
                    self._data, self._size = [], 0
                self._type = ''
                continue
            if len(line) > self._max_line:
                raise SSEError('line_too_long', f'line longer than {self._max_line} characters')
            name, _, value = line.partition(':')
            if value[:1] == ' ':
                value = value[1:]
            if name != 'data':
                if name == 'event':
                    self._type = value
                elif (name == 'error' or line[:1] == '{') and len(self.stray) < _MAX_STRAY_LINES:
                    self.stray.append(line[:_MAX_STRAY_CHARS])  # Ollama's bare JSON error, an older error: field
                continue  # a comment (empty name) or a field this client does not use
            self._size += len(value) + 1
            if self._size > self._max_event:
                raise SSEError('event_too_long', f'event data longer than {self._max_event} characters')
            self._data.append(value)
        return events

    def _dispatch(self, data: str):
        return data

    @staticmethod
    def _untyped(events: list[str]) -> list:
        return events


class TypedEvents(Events):
    """Events that keep their type: ``feed()`` returns ``(type, data)`` pairs,
    the type being the event field, or "message" when there was none."""

    def _dispatch(self, data: str) -> tuple[str, str]:
        return self._type or 'message', data

    @staticmethod
    def _untyped(events: list[str]) -> list[tuple[str, str]]:
        return [('message', data) for data in events]
