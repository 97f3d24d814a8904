"""Strict client for the streamed answers vLLM serves.

It sends a request with ``stream: true`` to chat completions, completions,
the Responses API or the Anthropic-compatible Messages API, shows the answer as it arrives and writes an evidence
record that says whether the answer really finished: the HTTP message ended
as its framing promised, the event stream ended on an event boundary, and the
answer ended as its API says a finished answer ends (for chat: visible text,
finish_reason "stop" and ``data: [DONE]``). Everything else is a failure
naming the layer where it happened. Standard library only; no retries.

One file by design: copy it to a GPU host and run it with the Python that is
there, nothing to install. The public names are in ``__all__``.

The module reads top to bottom as the layers of a response, then what is
built on them. Each item is the title of a section banner below (a test
keeps this map and the banners in step):

1. Limits and errors
   The bounds, and ``StreamError``, which carries the layer of a failure.
2. SSE: bytes to event data (sans-IO)
   ``Events`` (and ``TypedEvents``): bytes in, event data out.
3. JSON answers: strict JSON and the JSON Schema subset that tools use (sans-IO)
   ``strict_json()`` and ``JsonSchema``, for tool-call arguments and JSON answers.
4. The protocol seam: event data to the answer (sans-IO)
   ``StreamValidator``: event data in through ``accept()``, the ``Pieces``
   (text, reasoning, tool call) out, and the API's own idea of "finished"
   (``done``, ``outcome_problem()``, ``fields()``). ``ChatChunks``,
   ``CompletionChunks``, ``ResponseEvents`` and ``MessagesEvents`` implement
   it for the four APIs; an ``AnswerSpec`` says what the request asked for
   (text, tool calls, JSON).
5. HTTP: the response head and the body framing (sans-IO)
   ``ResponseHeadParser`` reads the status line and headers strictly,
   ``body_reader()`` chooses the framing, and one reader per framing knows
   how its body ends.
6. The whole response (sans-IO): bytes in, the answer's pieces and the verdict out
   ``ResponseReader`` composes 2 to 5: bytes in through ``feed()`` and
   ``eof()``, the answer's pieces and each layer's state out; tests, fuzzers
   and offline analysis use it as the transport does.
7. The request (checked before any connection)
   ``prepare()`` returns a frozen ``PreparedRequest``, which is what a run sends.
8. Transport: one request, read under the idle timeout and the overall deadline
   ``run()`` connects, sends, and is the socket loop around a ``ResponseReader``,
   filling an ``Exchange`` (what a run saw) and its ``Timeline``.
9. The verdict and the evidence record
   ``judge()`` decides why a run is not ok, in one place, and
   ``build_record()`` turns an exchange into the evidence record.
10. Many runs: a load of strict runs, and a summary built from their verdicts
    ``run_load()`` runs prepared requests from worker threads; ``Summary``
    aggregates their records.
11. The report: one self-contained HTML page per load
    ``Report`` draws a load as one static HTML page.
12. Evidence files: each created once and never overwritten, and read back
    ``iter_records()`` and ``summarize()`` read them back.
13. Command line
    ``main()``: one run, a load, or reading saved evidence.
"""
import os
import sys

# The first statements, so that Python 3.6 to 3.9 stop here with one line (3.5 and older cannot read
# the f-strings below, and stop with their own SyntaxError before any line runs).
if sys.version_info < (3, 10):
    sys.exit(f'{os.path.basename(sys.argv[0])}: needs Python 3.10 or newer, not {sys.version.split()[0]}')


import argparse
import array
import base64
import calendar
import codecs
import collections
import dataclasses
import difflib
import encodings.idna  # noqa: F401 -- the first connect() of a process needs it; imported here, not in the timed run
import enum
import hashlib
import html
import http.client
import importlib.util
import itertools
import ipaddress
import json
import math
import queue
import random
import re
import signal
import socket
import ssl
import textwrap
import threading
import time
import typing
from urllib.parse import unquote, urlsplit

__version__ = '0.1.0'

__all__ = [
    # one run, and the record it returns
    'stream', 'prepare', 'run', 'PreparedRequest', 'Capture', 'Cancel', 'Interrupted', 'KeptConnections',
    # judging bytes without a socket
    'ResponseReader', 'judge', 'Verdict', 'Events', 'TypedEvents', 'StreamValidator', 'Pieces', 'ChatChunks',
    'CompletionChunks', 'ResponseEvents', 'MessagesEvents', 'VALIDATORS', 'StreamError', 'SSEError',
    'SSEDecodeError', 'LAYERS', 'MAX_LINE_CHARS', 'MAX_EVENT_CHARS', 'MAX_TEXT_CHARS',
    # tool calls and JSON answers
    'AnswerSpec', 'ToolCall', 'JsonSchema', 'SchemaError', 'strict_json',
    # many runs, and reading saved evidence
    'run_load', 'LoadSettings', 'arrival_offsets', 'Summary', 'Report', 'iter_records', 'summarize',
    'main', 'UsageError',
]


# ---------------------------------------------------------------------------
# Limits and errors
# ---------------------------------------------------------------------------

MAX_TEXT_CHARS = 1_048_576    # the answer bound: the assembled text and tool-call arguments (and, apart, the reasoning)
JSON_ESCAPE_CHARS = 12        # the longest JSON escape of one character: an astral one as two \\uXXXX escapes
MAX_ENVELOPE_CHARS = 1_048_576  # what one event carries besides the answer: ids, usage, the settings echoed
# One SSE event, and one line of it. The Responses API repeats the whole answer (text, reasoning and
# arguments) in one data line of its done events and of response.completed, so these bounds follow from
# the answer bound: every answer within MAX_TEXT_CHARS fits, however the server escapes it.
MAX_EVENT_CHARS = 2 * MAX_TEXT_CHARS * JSON_ESCAPE_CHARS + MAX_ENVELOPE_CHARS
MAX_LINE_CHARS = MAX_EVENT_CHARS
MAX_ERROR_BODY = 65_536       # bytes of an HTTP error body that are read
MAX_SERVER_MESSAGE = 1_000    # characters of a server error message kept
READ_SIZE = 65_536            # each recv() asks for this much; it returns what is there
MAX_CAPTURE_BYTES = 16 * 1024 * 1024  # raw response bytes kept for --capture
DATA_PREFIX = 'data: '        # the usual start of an SSE data line (the space is optional)
REPLAY_HEADER = 'x-synthetic-fixture'  # fixture_server.py adds "x-synthetic-fixture: replay" to a replayed capture

# Where a run failed, in the order a response is received.
LAYERS = ('connect', 'proxy', 'tls', 'http', 'transport', 'sse', 'protocol',
          'application', 'timeout', 'interrupted', 'client')


class StreamError(Exception):
    """A failure inside the stream, with the layer it belongs to.

    ``server_error`` holds the server's own message, type and code when the
    failure is an error the server reported (an error event or a JSON error body).
    """

    def __init__(self, layer: str, message: str, *, server_error: dict | None = None) -> None:
        if layer not in LAYERS:
            raise ValueError(f'unknown layer {layer!r}')
        super().__init__(f'{layer}: {message}')
        self.layer = layer
        self.message = message
        self.server_error = server_error

    def __str__(self) -> str:
        return f'{self.layer}: {self.message}'


class SSEError(StreamError, ValueError):
    """The event stream broke its format (layer ``sse``). A ValueError too, as the guide's parser raised."""

    def __init__(self, message: str) -> None:
        super().__init__('sse', message)


class SSEDecodeError(SSEError, UnicodeDecodeError):
    """Bytes of the event stream that are not UTF-8: an SSEError that is also a UnicodeDecodeError."""

    def __init__(self, data: bytes, start: int, end: int, message: str) -> None:
        UnicodeDecodeError.__init__(self, 'utf-8', data, start, end, message)
        self.layer, self.message, self.server_error = 'sse', message, None


class StaleConnectionError(StreamError):
    """A reused connection that ended before any response byte: the server or a proxy closed it while
    it was idle (layer ``transport``). Not retried: the load counts these apart."""

    def __init__(self, requests: int, idle_s: float) -> None:
        super().__init__('transport', f'the reused connection (request {requests} on it, idle {idle_s:.2f} s) '
                                      'closed before any response byte; the server or a proxy closed it while idle')


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


def _host_port(host: str, port: int) -> str:
    """host:port as a URL writes it: an IPv6 address in brackets."""
    return f'[{host}]:{port}' if ':' in host else f'{host}:{port}'


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
    line is never dispatched, and ``pending()`` says what the stream would
    end inside. ``TypedEvents`` also returns each event's type.

    The guide's contract holds: a line over MAX_LINE_CHARS raises a
    ValueError (SSEError), bytes that are not UTF-8 raise a
    UnicodeDecodeError (SSEDecodeError), and ``finish()`` raises only for an
    incomplete UTF-8 character: an unterminated final event is dropped, not
    an error of the parser.

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
        self._open: list[str] = []  # the pieces of the unterminated last line (joined once, when it ends)
        self._open_chars = 0        # characters in self._open
        self._data: list[str] = []  # data lines of the event in progress
        self._size = 0              # characters in self._data
        self._type = ''             # the event field of the event in progress

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
        block = ''.join(self._open) + text[:last] if self._open else text[:last]
        self._open, self._open_chars = [], 0
        self._hold(text[last + 1:])
        if not self._data and not self._type and block.endswith('\n') and block.startswith(DATA_PREFIX):
            events = self._single_line_events(block[:-1])
            if events is not None:
                return self._untyped(events)
        return self._events_by_line(block)

    def pending(self) -> str | None:
        """What the stream would end inside if it ended now, or None at an event boundary."""
        if self._undecoded:
            return f'stream ended inside a UTF-8 character ({_count(len(self._undecoded), "byte")} pending)'
        if self._open:
            return f'stream ended inside a line: {_preview("".join(self._open))}'
        if self._data:
            return 'stream ended inside an event: its blank line never arrived'
        return None

    def finish(self) -> None:
        """Declare the body ended: SSEDecodeError if it ended inside a UTF-8 character.

        An unterminated final line or event is not dispatched and is not an
        error here; the client judges the event layer from pending().
        """
        if self._undecoded:
            raise SSEDecodeError(self._undecoded, 0, len(self._undecoded),
                                 f'stream ended inside a UTF-8 character '
                                 f'({_count(len(self._undecoded), "byte")} pending)')

    def _decode(self, raw: bytes) -> str:
        data = self._undecoded + raw if self._undecoded else raw
        try:
            text, used = codecs.utf_8_decode(data, 'strict', False)
        except UnicodeDecodeError as exc:
            raise SSEDecodeError(data, exc.start, exc.end,
                                 f'invalid UTF-8 byte {data[exc.start]:#04x} in the event stream') from None
        self._undecoded = data[used:]
        if not self._started and text:
            self._started = True
            if text[0] == '\ufeff':
                text = text[1:]
        return text

    def _hold(self, piece: str) -> None:
        """Keep the start of a line whose end has not arrived, within MAX_LINE_CHARS."""
        if piece:
            self._open.append(piece)
            self._open_chars += len(piece)
            if self._open_chars > MAX_LINE_CHARS:
                raise SSEError(f'line longer than {MAX_LINE_CHARS} characters without a line end')

    @staticmethod
    def _single_line_events(core: str) -> list[str] | None:
        """Split ``data: A\\n\\ndata: B`` into ['A', 'B'], or None if the block has another shape."""
        events = core.split('\n\n' + DATA_PREFIX)
        if core.count('\n') != 2 * (len(events) - 1):
            return None  # some event has several lines, or extra blank lines
        events[0] = events[0][len(DATA_PREFIX):]
        if max(map(len, events)) > MAX_LINE_CHARS - len(DATA_PREFIX):
            raise SSEError(f'line longer than {MAX_LINE_CHARS} characters')
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
            if len(line) > MAX_LINE_CHARS:
                raise SSEError(f'line longer than {MAX_LINE_CHARS} characters')
            name, _, value = line.partition(':')
            if value[:1] == ' ':
                value = value[1:]
            if name != 'data':
                if name == 'event':
                    self._type = value
                continue  # a comment (empty name) or a field this client does not use
            self._size += len(value) + 1
            if self._size > MAX_EVENT_CHARS:
                raise SSEError(f'event data longer than {MAX_EVENT_CHARS} characters')
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


# ---------------------------------------------------------------------------
# JSON answers: strict JSON and the JSON Schema subset that tools use (sans-IO)
# ---------------------------------------------------------------------------

class SchemaError(ValueError):
    """A schema (of a tool's parameters, or of --json-schema) that is itself invalid."""


def _reject_constant(name: str) -> None:
    raise ValueError(f'{name} is not JSON')


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f'the number {_shorten(text, 30)} is out of range (it would be {value})')
    return value


def _unique_keys(pairs: list) -> dict:
    value = dict(pairs)
    if len(value) != len(pairs):
        seen = set()
        repeated = next(key for key, _ in pairs if key in seen or seen.add(key))
        raise ValueError(f'the key {_shorten(repr(repeated), 40)} appears twice')
    return value


def strict_json(text: str) -> object:
    """One JSON value and nothing else (RFC 8259): ValueError for NaN, Infinity, a number out of the
    float range, a repeated key, trailing text or anything json.loads refuses."""
    try:
        return json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float,
                          object_pairs_hook=_unique_keys)
    except RecursionError:
        raise ValueError('nested too deeply') from None


def _json_type(value: object) -> str:
    if value is None:
        return 'null'
    if isinstance(value, bool):
        return 'boolean'
    if isinstance(value, int):
        return 'integer'
    return {float: 'number', str: 'string', list: 'array', dict: 'object'}[type(value)]


def _is_type(value: object, name: str) -> bool:
    kind = _json_type(value)
    return kind == name or (name == 'number' and kind == 'integer') or \
        (name == 'integer' and kind == 'number' and float(value).is_integer())


def _json_equal(a: object, b: object) -> bool:
    """Equality as JSON sees it: true is not 1, and 1.0 is 1."""
    if isinstance(a, bool) or isinstance(b, bool) or a is None or b is None:
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_json_equal(a[key], b[key]) for key in a)
    return type(a) is type(b) and a == b


def _child(path: str, key: object) -> str:
    if isinstance(key, int):
        return f'{path}[{key}]'
    return f'{path}.{key}' if re.fullmatch(r'[A-Za-z_][A-Za-z0-9_]*', key) else f'{path}[{json.dumps(key)}]'


def _seen(value: object) -> str:
    return _shorten(json.dumps(value, ensure_ascii=False), 40)


def _size_problem(schema: dict, keywords: tuple[str, str], size: int, noun: str, path: str) -> str | None:
    """A length under its minimum or over its maximum keyword (minLength/maxLength, minItems/maxItems)."""
    low, high = keywords
    if size < schema.get(low, 0):
        return f'{path}: expected at least {_count(schema[low], noun)}, got {_count(size, noun)}'
    if high in schema and size > schema[high]:
        return f'{path}: expected at most {_count(schema[high], noun)}, got {_count(size, noun)}'
    return None


JSON_TYPES = ('null', 'boolean', 'integer', 'number', 'string', 'array', 'object')
# The keywords that are checked, and those that never change whether a value is valid.
CHECKED_KEYWORDS = frozenset({'type', 'properties', 'required', 'additionalProperties', 'enum', 'const', 'items',
                              'minItems', 'maxItems', 'minLength', 'maxLength', 'minimum', 'maximum',
                              'exclusiveMinimum', 'exclusiveMaximum', 'pattern', 'anyOf', 'oneOf', 'allOf', '$ref',
                              '$defs', 'definitions'})
ANNOTATIONS = frozenset({'title', 'description', 'default', 'examples', '$schema', '$id', '$comment', 'deprecated',
                         'readOnly', 'writeOnly', 'strict'})


class JsonSchema:
    """A JSON Schema of the subset tool definitions use, checked when built (SchemaError), that
    says of a value the first place where it breaks the schema.

    Checked: type (a name or a list), properties, required, additionalProperties, enum, const,
    items, minItems/maxItems, minLength/maxLength, minimum/maximum and the exclusive bounds,
    pattern (Python's re, searched), anyOf/oneOf/allOf and $ref to #/$defs/... or
    #/definitions/.... Any other keyword is listed in ``unchecked`` with where it stands; it is
    never taken as passed without saying so.
    """

    def __init__(self, schema: object) -> None:
        self.root = schema
        self.unchecked: list[str] = []
        self._patterns: dict[str, re.Pattern] = {}
        self._check_schema(schema, '#')

    def problem(self, value: object) -> str | None:
        """The first violation, as '$.city: expected string, got 3', or None when the value is valid."""
        return self._problem(self.root, value, '$', 0)

    # -- the schema itself --------------------------------------------------------------------------

    def _check_schema(self, schema: object, where: str) -> None:
        if isinstance(schema, bool):
            return
        if not isinstance(schema, dict):
            raise SchemaError(f'{where}: a schema must be an object or a boolean, not {_seen(schema)}')
        for key, value in schema.items():
            self._check_keyword(key, value, f'{where}/{key}')
        for key in ('properties', '$defs', 'definitions'):
            for name, sub in (schema.get(key) or {}).items():
                self._check_schema(sub, f'{where}/{key}/{name}')
        for key in ('anyOf', 'oneOf', 'allOf'):
            for number, sub in enumerate(schema.get(key) or ()):
                self._check_schema(sub, f'{where}/{key}/{number}')
        items = schema.get('items')
        for number, sub in enumerate(items if isinstance(items, list) else [] if items is None else [items]):
            self._check_schema(sub, f'{where}/items' + (f'/{number}' if isinstance(items, list) else ''))
        if isinstance(schema.get('additionalProperties'), dict):
            self._check_schema(schema['additionalProperties'], f'{where}/additionalProperties')

    def _check_keyword(self, key: str, value: object, where: str) -> None:
        def need(ok: bool, what: str) -> None:
            if not ok:
                raise SchemaError(f'{where}: expected {what}, got {_seen(value)}')
        if key == 'type':
            names = value if isinstance(value, list) else [value]
            need(bool(names) and all(name in JSON_TYPES for name in names), f'one of {", ".join(JSON_TYPES)}')
        elif key in ('properties', '$defs', 'definitions'):
            need(isinstance(value, dict), 'an object of schemas')
        elif key == 'required':
            need(isinstance(value, list) and all(isinstance(name, str) for name in value), 'a list of names')
        elif key == 'additionalProperties':
            need(isinstance(value, (bool, dict)), 'a boolean or a schema')
        elif key == 'enum':
            need(isinstance(value, list) and bool(value), 'a non-empty list')
        elif key == 'items':
            need(isinstance(value, (bool, dict, list)), 'a schema or a list of schemas')
        elif key in ('minItems', 'maxItems', 'minLength', 'maxLength'):
            need(isinstance(value, int) and not isinstance(value, bool) and value >= 0, 'a non-negative integer')
        elif key in ('minimum', 'maximum'):
            need(isinstance(value, (int, float)) and not isinstance(value, bool), 'a number')
        elif key in ('exclusiveMinimum', 'exclusiveMaximum'):
            need(isinstance(value, (int, float)), 'a number (or, as in draft 4, a boolean)')
        elif key == 'pattern':
            need(isinstance(value, str), 'a regular expression')
            try:
                self._patterns[value] = re.compile(value)
            except re.error as exc:
                raise SchemaError(f'{where}: invalid pattern {_seen(value)}: {exc}') from None
        elif key in ('anyOf', 'oneOf', 'allOf'):
            need(isinstance(value, list) and bool(value), 'a non-empty list of schemas')
        elif key == '$ref':
            need(isinstance(value, str), 'a reference')
            self._resolve(value, where)
        elif key not in CHECKED_KEYWORDS and key not in ANNOTATIONS:
            self.unchecked.append(f'{key} at {where.rpartition("/")[0] or "#"}')

    def _resolve(self, ref: str, where: str) -> object:
        section, _, name = ref.partition('/')[2].partition('/')
        target = self.root.get(section, {}).get(name) if isinstance(self.root, dict) and ref.startswith('#/') else None
        if section not in ('$defs', 'definitions') or not name or '/' in name or target is None:
            raise SchemaError(f'{where}: $ref {ref!r} is not a local #/$defs/NAME or #/definitions/NAME of this schema')
        return target

    # -- a value ------------------------------------------------------------------------------------

    def _problem(self, schema: object, value: object, path: str, depth: int) -> str | None:
        if schema is True:
            return None
        if schema is False:
            return f'{path}: no value is allowed here, got {_seen(value)}'
        if depth > 64:
            return f'{path}: the schema refers to itself more than 64 levels deep'
        if '$ref' in schema:
            problem = self._problem(self._resolve(schema['$ref'], '$ref'), value, path, depth + 1)
            if problem:
                return problem
        for check in (self._type, self._choices, self._string, self._number, self._array, self._object,
                      self._combined):
            problem = check(schema, value, path, depth)
            if problem:
                return problem
        return None

    @staticmethod
    def _type(schema: dict, value: object, path: str, depth: int) -> str | None:
        names = schema.get('type')
        if names is None:
            return None
        names = names if isinstance(names, list) else [names]
        if any(_is_type(value, name) for name in names):
            return None
        return f'{path}: expected {" or ".join(names)}, got {_seen(value)}'

    @staticmethod
    def _choices(schema: dict, value: object, path: str, depth: int) -> str | None:
        if 'enum' in schema and not any(_json_equal(value, option) for option in schema['enum']):
            return f'{path}: expected one of {_seen(schema["enum"])}, got {_seen(value)}'
        if 'const' in schema and not _json_equal(value, schema['const']):
            return f'{path}: expected {_seen(schema["const"])}, got {_seen(value)}'
        return None

    def _string(self, schema: dict, value: object, path: str, depth: int) -> str | None:
        if not isinstance(value, str):
            return None
        problem = _size_problem(schema, ('minLength', 'maxLength'), len(value), 'character', path)
        if problem:
            return problem
        if 'pattern' in schema and not self._patterns[schema['pattern']].search(value):
            return f'{path}: expected a match of {schema["pattern"]!r}, got {_seen(value)}'
        return None

    @staticmethod
    def _number(schema: dict, value: object, path: str, depth: int) -> str | None:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return None
        low, high = schema.get('minimum'), schema.get('maximum')
        low_open, high_open = schema.get('exclusiveMinimum'), schema.get('exclusiveMaximum')
        if low_open is True:  # draft 4: a flag on minimum
            low, low_open = None, low
        if high_open is True:
            high, high_open = None, high
        for bound, fails, word in ((low, lambda b: value < b, 'at least'), (high, lambda b: value > b, 'at most'),
                                   (low_open if low_open is not False else None, lambda b: value <= b, 'more than'),
                                   (high_open if high_open is not False else None, lambda b: value >= b, 'less than')):
            if bound is not None and fails(bound):
                return f'{path}: expected a number {word} {bound}, got {_seen(value)}'
        return None

    def _array(self, schema: dict, value: object, path: str, depth: int) -> str | None:
        if not isinstance(value, list):
            return None
        problem = _size_problem(schema, ('minItems', 'maxItems'), len(value), 'item', path)
        if problem:
            return problem
        items = schema.get('items')
        if items is None:
            return None
        for number, item in enumerate(value):
            sub = (items[number] if number < len(items) else True) if isinstance(items, list) else items
            problem = self._problem(sub, item, _child(path, number), depth + 1)
            if problem:
                return problem
        return None

    def _object(self, schema: dict, value: object, path: str, depth: int) -> str | None:
        if not isinstance(value, dict):
            return None
        for name in schema.get('required', ()):
            if name not in value:
                return f'{_child(path, name)}: required, but missing'
        properties, extra = schema.get('properties', {}), schema.get('additionalProperties', True)
        for name, item in value.items():
            sub = properties.get(name, extra)
            if sub is False and name not in properties:
                return f'{_child(path, name)}: not allowed (additionalProperties is false)'
            problem = self._problem(sub, item, _child(path, name), depth + 1)
            if problem:
                return problem
        return None

    def _combined(self, schema: dict, value: object, path: str, depth: int) -> str | None:
        for sub in schema.get('allOf', ()):
            problem = self._problem(sub, value, path, depth + 1)
            if problem:
                return problem
        if 'anyOf' in schema:
            problems = [self._problem(sub, value, path, depth + 1) for sub in schema['anyOf']]
            if all(problems):
                return f'{path}: matches none of anyOf ({"; ".join(problems)})'
        if 'oneOf' in schema:
            matching = sum(self._problem(sub, value, path, depth + 1) is None for sub in schema['oneOf'])
            if matching != 1:
                return f'{path}: matches {matching} of oneOf, expected exactly 1'
        return None


# ---------------------------------------------------------------------------
# The protocol seam: event data to the answer (sans-IO)
# ---------------------------------------------------------------------------

TOOL_CHOICES = ('auto', 'required', 'none')  # or the name of one tool


@dataclasses.dataclass(frozen=True)
class AnswerSpec:
    """What the request asked the answer to be, beyond text: the tools offered (each name with the
    schema of its parameters, None when it declares none), the tool choice (auto, required, none or
    a tool's name; None when no tools), and the schema of a JSON answer."""

    tools: tuple[tuple[str, JsonSchema | None], ...] = ()
    tool_choice: str | None = None
    json_schema: JsonSchema | None = dataclasses.field(default=None, compare=False)

    def __post_init__(self) -> None:
        names = [name for name, _ in self.tools]
        if len(set(names)) != len(names):
            raise ValueError('each tool needs a name of its own')
        if (self.tool_choice is None) != (not self.tools):
            raise ValueError('a tool choice goes with tools, and tools with a tool choice')
        if self.tool_choice is not None and self.tool_choice not in TOOL_CHOICES and self.tool_choice not in names:
            raise ValueError(f'tool_choice {self.tool_choice!r} is none of {", ".join(TOOL_CHOICES)} and '
                             f'names no tool offered ({", ".join(names)})')

    @property
    def named(self) -> str | None:
        """The one tool the choice forces, or None."""
        return self.tool_choice if self.tool_choice not in (None, *TOOL_CHOICES) else None

    def unchecked(self) -> list[str]:
        """The schema keywords that are not checked, with the tool or answer whose schema has them."""
        schemas = [(f'tool {name}', schema) for name, schema in self.tools] + [('json-schema', self.json_schema)]
        return [f'{owner}: {keyword}' for owner, schema in schemas if schema for keyword in schema.unchecked]


class ToolCall:
    """One tool call as the stream assembles it: opened with an id and a name, then its arguments
    arrive in pieces."""

    def __init__(self, index: int, call_id: str, name: str) -> None:
        self.index, self.id, self.name = index, call_id, name
        self.parts: list[str] = []

    @property
    def arguments(self) -> str:
        return ''.join(self.parts)

    def problem(self, spec: AnswerSpec) -> str | None:
        """Why these arguments cannot be used: not one strict JSON object matching the tool's parameters."""
        schemas = dict(spec.tools)
        if self.name not in schemas:
            return f'{self.name!r} is not a tool the request offered ({", ".join(schemas) or "none"})'
        arguments = self.arguments
        if not arguments.strip():
            return 'the arguments are empty'
        try:
            value = strict_json(arguments)
        except ValueError as exc:
            return f'the arguments are not JSON ({exc}): {_preview(arguments)}'
        if not isinstance(value, dict):
            return f'arguments are not a JSON object: {_preview(arguments)}'
        problem = schemas[self.name].problem(value) if schemas[self.name] is not None else None
        return f'the arguments do not match its parameters: {problem}' if problem else None

    def record(self, spec: AnswerSpec) -> dict:
        return {'index': self.index, 'id': self.id, 'name': self.name, 'arguments': self.arguments,
                'arguments_problem': self.problem(spec)}


class Pieces(typing.NamedTuple):
    """What one event adds to the answer, each '' when it adds none: text, reasoning text, and a piece
    of a tool call for display (its name and "(" as the call opens, then its arguments)."""

    text: str = ''
    reasoning: str = ''
    call: str = ''


_NOTHING = Pieces()  # an event that adds nothing to show (a role, a finish, a usage event...)


class StreamValidator:
    """What the read loop needs from the validator of one streaming API.

    The read loop creates the API's ``parser`` and gives each event it
    returns to ``accept()``, which returns its ``Pieces`` (text, reasoning, call): the
    answer and reasoning text that event carried, and a piece of a tool call
    for display (see ``_shown``); '' when none. It
    raises StreamError. ``done`` says that the API's ``terminal`` marker
    arrived; ``outcome_problem()`` says why the answer is not finished (None
    when it is); ``fields()`` are the record's fields that the API decides. A
    validator never reads a clock or touches a socket. ``spec`` says what the
    answer was asked to be: text, tool calls or JSON.
    """

    api = ''
    parser = Events
    terminal = '[DONE]'

    def __init__(self, spec: AnswerSpec | None = None) -> None:
        self.spec = spec or AnswerSpec()
        self.calls: list[ToolCall] = []
        self._shown_call: ToolCall | None = None  # the call whose pieces were shown last
        self.text_parts: list[str] = []
        self.text_chars = 0
        self.reasoning_parts: list[str] = []
        self.reasoning_chars = 0
        self.data_events = 0
        self.content_events = 0
        self.done = False
        self.completion_tokens: int | None = None
        self.response_id: str | None = None

    def accept(self, event) -> Pieces:
        raise NotImplementedError

    def outcome_problem(self) -> str | None:
        raise NotImplementedError

    @property
    def answer_kind(self) -> str:
        """tool_calls when calls arrived, json when a JSON answer was asked for, otherwise text."""
        return 'tool_calls' if self.calls else 'json' if self.spec.json_schema is not None else 'text'

    calls_finish = 'finish_reason=tool_calls'  # what a finished tool answer ends with, in this API's words

    def _answer_problem(self, finished_as_calls: bool, finish: str) -> str | None:
        """Why an answer whose API says it finished (as ``finish`` says) is not a usable one: for tool
        calls, the finish that calls need (``finished_as_calls``), the tool choice, and each call's
        arguments; otherwise the tool choice, then a JSON answer's JSON, or visible text."""
        spec, calls = self.spec, self.calls
        if calls:
            if not finished_as_calls:
                return f'expected {self.calls_finish} after {_count(len(calls), "tool call")}, got {finish}'
            if spec.tool_choice == 'none':
                return f'tool_choice none, but {_count(len(calls), "tool call")} arrived'
            for call in calls:
                problem = (f'tool_choice named {spec.named}' if spec.named and call.name != spec.named
                           else call.problem(spec))
                if problem:
                    return f'tool call {call.index} ({call.name}): {problem}'
            return None
        if spec.tool_choice == 'required' or spec.named:
            return f'tool_choice {spec.tool_choice} asked for a tool call, but the answer is text ({finish})'
        if spec.json_schema is not None:
            return self._json_problem()
        if not any(part.strip() for part in self.text_parts):
            return f'{finish}, but no visible text arrived'
        return None

    def _json_problem(self) -> str | None:
        text = self.text
        try:
            value = strict_json(text)
        except ValueError as exc:
            return f'the answer is not JSON ({exc}): {_preview(text)}'
        problem = self.spec.json_schema.problem(value)
        return f'the JSON answer does not match the schema: {problem}' if problem else None

    def _budget_problem(self, problem: str) -> str:
        """A budget-exhausted problem, saying so when the budget ran out inside a tool call."""
        if self.calls:
            call = self.calls[-1]
            return f'{problem} inside tool call {call.index} ({call.name})'
        return problem

    def _shown(self, call: ToolCall, piece: str = '', opening: bool = False) -> str:
        """A tool call's piece for display: ``name(`` as the call opens, then its arguments, so that
        the pieces of calls that arrive one after the other read ``get_weather({"city": "Paris"}``
        (the view closes the last). A piece of another call than the last one shown first closes
        that line and resumes the call as ``name(…`` (calls interleaved by index)."""
        prefix = ''
        if opening or call is not self._shown_call:
            prefix = (')\n' if self._shown_call is not None else '') + call.name + ('(' if opening else '(…')
        self._shown_call = call
        return prefix + piece

    def _add_call_arguments(self, call: ToolCall, arguments: str) -> None:
        self.content_events += 1
        self.text_chars += len(arguments)
        if self.text_chars > MAX_TEXT_CHARS:
            raise StreamError('application', f'answer longer than {MAX_TEXT_CHARS} characters')
        call.parts.append(arguments)

    @property
    def text(self) -> str:
        return ''.join(self.text_parts)

    @property
    def reasoning(self) -> str:
        return ''.join(self.reasoning_parts)

    def fields(self) -> dict:
        """The record's fields that this API decides."""
        return {'text': self.text, 'reasoning_text': self.reasoning, 'done': self.done,
                'completion_tokens': self.completion_tokens, 'content_events': self.content_events,
                'data_events': self.data_events, 'response_id': self.response_id,
                'response_status': None, 'incomplete_reason': None, 'answer_kind': self.answer_kind,
                'tool_calls': [call.record(self.spec) for call in self.calls]}

    def _add_text(self, text: str) -> None:
        self.content_events += 1
        self.text_chars += len(text)
        if self.text_chars > MAX_TEXT_CHARS:
            raise StreamError('application', f'answer longer than {MAX_TEXT_CHARS} characters')
        self.text_parts.append(text)

    def _add_reasoning(self, text: str) -> None:
        self.reasoning_chars += len(text)
        if self.reasoning_chars > MAX_TEXT_CHARS:
            raise StreamError('application', f'reasoning longer than {MAX_TEXT_CHARS} characters')
        self.reasoning_parts.append(text)

    def _typed_body(self, event: tuple[str, str], ended_by: str) -> tuple[str, dict]:
        """The type and JSON body of a typed event, after the checks both typed APIs make: nothing may
        follow the event that ended the stream (``ended_by`` names it), and the event field must name
        the type its data says."""
        kind, data = event
        if self.done:
            raise StreamError('protocol', f'event {_preview(kind)} after {ended_by}')
        self.data_events += 1
        body = self._load_object(data)
        if body.get('type') != kind:
            raise StreamError('protocol', f'event {self.data_events}: its event field says {_preview(kind)} but '
                                          f'its data says type {_shorten(repr(body.get("type")))}')
        return kind, body

    def _load_object(self, data: str) -> dict:
        """One event's JSON object, or StreamError('protocol')."""
        try:
            value = json.loads(data)
        except (ValueError, RecursionError) as exc:
            raise StreamError('protocol', f'malformed JSON in event {self.data_events} '
                                          f'({type(exc).__name__}): {_preview(data)}') from None
        if not isinstance(value, dict):
            raise StreamError('protocol', f'expected a JSON object in event {self.data_events}, '
                                          f'got {type(value).__name__}')
        return value


class _ChoiceChunks(StreamValidator):
    """What chat and completions chunks share: one choice (n=1) with index 0, a usage chunk,
    in-band error objects, a finish_reason and the terminal data: [DONE].

    ``expect_finish`` is the finish a finished answer has: "stop", or "length"
    for a fixed-length load, where the usage (when sent) must also count
    exactly ``max_tokens`` completion tokens.
    """

    def __init__(self, expect_finish: str = 'stop', max_tokens: int | None = None,
                 spec: AnswerSpec | None = None) -> None:
        super().__init__(spec)
        self.finish_reason: str | None = None
        self.expect_finish = expect_finish
        self.max_tokens = max_tokens

    def accept(self, data: str) -> Pieces:
        """Apply one event's data; return the answer text, reasoning text and tool-call piece it carried."""
        if self.done:
            raise StreamError('protocol', f'event after [DONE]: {_preview(data)}')
        self.data_events += 1
        if data == '[DONE]':
            self.done = True
            return _NOTHING
        chunk = self._load_object(data)
        if 'error' in chunk:
            error = server_error_fields(chunk)
            raise StreamError('application', 'server sent an error event: ' + describe_server_error(error),
                              server_error=error)
        if self.response_id is None and isinstance(chunk.get('id'), str):
            self.response_id = chunk['id']
        usage = chunk.get('usage')
        if usage is not None:
            self.completion_tokens = _token_count(usage, 'completion_tokens')
        choices = chunk.get('choices')
        if choices is None or choices == []:
            return _NOTHING
        if not isinstance(choices, list) or len(choices) != 1:
            count = len(choices) if isinstance(choices, list) else type(choices).__name__
            raise StreamError('protocol', f'expected one choice per chunk (n=1), got {count}')
        choice = choices[0]
        if not isinstance(choice, dict) or choice.get('index') != 0:
            seen = choice.get('index') if isinstance(choice, dict) else choice
            raise StreamError('protocol', f'expected choice index 0, got {_shorten(repr(seen))}')
        return self._take_choice(choice)

    def _take_choice(self, choice: dict) -> Pieces:
        raise NotImplementedError

    def _text_field(self, value: object, name: str) -> str | None:
        """A text field of the choice: a string or null, and no text after the finish."""
        if value is None or isinstance(value, str):
            if value and self.finish_reason is not None:
                raise StreamError('protocol', f'{name} arrived after finish_reason={self.finish_reason}')
            return value
        raise StreamError('protocol', f'expected {name} to be a string, got {type(value).__name__}')

    def _take_finish(self, reason: object) -> None:
        if reason is None:
            return
        if self.finish_reason is not None:
            raise StreamError('protocol', f'a second finish_reason ({_preview(str(reason))}) '
                                          f'after finish_reason={self.finish_reason}')
        if not isinstance(reason, str):
            raise StreamError('protocol', f'expected finish_reason to be a string, got {type(reason).__name__}')
        self.finish_reason = reason

    def outcome_problem(self) -> str | None:
        """Why the completion is not a finished answer, or None when it is."""
        if not self.done:
            return f'EOF before [DONE] after {_count(self.content_events, "content event")}'
        reason = self.finish_reason
        if reason is None:
            return f'[DONE] without a finish_reason after {_count(self.content_events, "content event")}'
        if self.expect_finish == 'length':
            return self._fixed_length_problem()
        if reason == 'length':
            return self._budget_problem('output budget exhausted (finish_reason=length)')
        finish = f'finish_reason={reason}'
        if self.calls:  # vLLM says tool_calls, or stop when the choice named the function (as OpenAI does)
            return self._answer_problem(reason == 'tool_calls' or (reason == 'stop' and self.spec.named is not None),
                                        finish)
        if reason == 'tool_calls':
            return 'finish_reason=tool_calls, but no tool call arrived'
        if reason != 'stop':
            return f'expected finish_reason=stop, got {finish}'
        return self._answer_problem(False, f'{finish} and [DONE] arrived')

    def _fixed_length_problem(self) -> str | None:
        reason = self.finish_reason
        if reason != 'length':
            return f'expected finish_reason=length (--expect-finish length), got finish_reason={reason}'
        if self.completion_tokens is not None and self.completion_tokens != self.max_tokens:
            return (f'finish_reason=length after {_count(self.completion_tokens, "completion token")}, '
                    f'not the {self.max_tokens} requested')
        if not any(part.strip() for part in self.text_parts) and not self.calls:
            return 'finish_reason=length and [DONE] arrived, but no visible text'
        return None

    def fields(self) -> dict:
        return {**super().fields(), 'finish_reason': self.finish_reason}


class ChatChunks(_ChoiceChunks):
    """Validates the events of one streamed chat completion (n=1): the answer is ``delta.content``,
    or tool calls assembled from ``delta.tool_calls`` by index when tools were offered; reasoning is
    ``delta.reasoning`` (or the older ``reasoning_content``). A violation raises StreamError:
    ``protocol`` for a chunk this client cannot accept, ``application`` for a server error event or
    an answer over the size bound.
    """

    api = 'chat'

    def _take_choice(self, choice: dict) -> Pieces:
        delta = choice.get('delta')
        if delta is None:
            delta = {}
        elif not isinstance(delta, dict):
            raise StreamError('protocol', f'expected delta to be an object, got {type(delta).__name__}')
        if delta.get('function_call'):
            raise StreamError('protocol', 'a legacy function_call delta arrived; this client reads tool_calls')
        text = self._text_field(delta.get('content'), 'delta.content')
        reasoning = self._text_field(delta.get('reasoning'), 'delta.reasoning')
        if reasoning is None:
            reasoning = self._text_field(delta.get('reasoning_content'), 'delta.reasoning_content')
        if text:
            if self.calls and text.strip():
                call = self.calls[-1]
                raise StreamError('protocol', f'content text {_preview(text)} arrived inside tool call {call.index} '
                                              f'({call.name}), in event {self.data_events}')
            self._add_text(text)
        if reasoning:
            self._add_reasoning(reasoning)
        call = self._take_tool_deltas(delta['tool_calls']) if delta.get('tool_calls') else ''
        self._take_finish(choice.get('finish_reason'))
        return Pieces(text or '', reasoning or '', call)

    def _take_tool_deltas(self, deltas: object) -> str:
        """Assemble delta.tool_calls; return what they add, for display ('name(' as a call opens, then
        its arguments)."""
        event = self.data_events
        if not self.spec.tools:
            raise StreamError('protocol', f'tool call deltas arrived in event {event}, but the request offered no '
                                          'tools (--tools)')
        if not isinstance(deltas, list):
            raise StreamError('protocol', f'expected delta.tool_calls to be a list in event {event}, '
                                          f'got {type(deltas).__name__}')
        shown = []
        for delta in deltas:
            index = delta.get('index') if isinstance(delta, dict) else None
            function = delta.get('function') if isinstance(delta, dict) else None
            if type(index) is not int or index < 0 or not isinstance(function or {}, dict):
                raise StreamError('protocol', f'expected a tool call delta with an integer index and a function '
                                              f'object in event {event}, got {_preview(json.dumps(delta))}')
            call_id, name, arguments = delta.get('id'), (function or {}).get('name'), (function or {}).get('arguments')
            for key, value in (('id', call_id), ('function.name', name), ('function.arguments', arguments)):
                if value is not None and not isinstance(value, str):
                    raise StreamError('protocol', f'expected tool call {index} {key} to be a string in event '
                                                  f'{event}, got {type(value).__name__}')
            if index == len(self.calls):
                if not call_id or not name:
                    raise StreamError('protocol', f'tool call {index} got arguments in event {event} but was never '
                                                  'opened with an id and a name')
                self.calls.append(ToolCall(index, call_id, name))
                self.content_events += 1
                shown.append(self._shown(self.calls[-1], opening=True))
            elif index > len(self.calls):
                raise StreamError('protocol', f'tool call index {index} in event {event} skips ahead: the next '
                                              f'call to open was index {len(self.calls)}')
            else:
                call = self.calls[index]
                if call_id and call_id != call.id:
                    raise StreamError('protocol', f'tool call {index} ({call.name}) got a second id {call_id!r} in '
                                                  f'event {event}; it opened as {call.id!r}')
                if name and name != call.name:
                    raise StreamError('protocol', f'tool call {index} changed its name from {call.name!r} to '
                                                  f'{name!r} in event {event}')
            if arguments:
                self._add_call_arguments(self.calls[index], arguments)
                shown.append(self._shown(self.calls[index], arguments))
        return ''.join(shown)


class CompletionChunks(_ChoiceChunks):
    """Validates the events of one streamed completion (/v1/completions, n=1): the answer is
    ``choices[0].text``; otherwise the rules of chat chunks."""

    api = 'completions'

    def _take_choice(self, choice: dict) -> Pieces:
        text = self._text_field(choice.get('text'), 'text')
        if text:
            self._add_text(text)
        self._take_finish(choice.get('finish_reason'))
        return Pieces(text=text or '')


def _token_count(usage: object, key: str) -> int:
    count = usage.get(key) if isinstance(usage, dict) else None
    if type(count) is not int or count < 0:
        raise StreamError('protocol', f'expected usage.{key} to be a non-negative integer, '
                                      f'got {_shorten(repr(count))}')
    return count


RESPONSE_TERMINALS = ('response.completed', 'response.incomplete', 'response.failed', 'error')


class ResponseEvents(StreamValidator):
    """Validates one streamed response of the Responses API (/v1/responses).

    Every event's ``event`` field must name the ``type`` in its data, and
    ``sequence_number`` must count up from 0 by exactly 1, so a lost or
    repeated event is caught. Exactly one terminal event ends the stream
    (response.completed, response.incomplete, response.failed or error) and
    nothing may follow it. The answer is the ``response.output_text.delta``
    text; it must equal the text of every ``response.output_text.done`` and
    of the message in the terminal event's ``response.output``, which catches
    a dropped or duplicated delta that kept the numbering. The terminal
    event's name is not trusted: vLLM 0.32 ends a budget-exhausted response
    with ``response.completed`` whose status is "incomplete", so the outcome
    is read from ``response.status``.

    A function call (when tools were offered) opens with an output item of
    type function_call carrying its call_id and name; its arguments arrive as
    ``response.function_call_arguments.delta`` events, and must equal the
    arguments of its ``.done`` event, of its ``response.output_item.done``
    and of the same call in the terminal event's output.
    """

    api = 'responses'
    parser = TypedEvents

    def __init__(self, expect_finish: str = 'stop', max_tokens: int | None = None,
                 spec: AnswerSpec | None = None) -> None:
        super().__init__(spec)
        self._calls_at: dict[object, ToolCall] = {}  # function calls by output_index
        self.expect_finish = expect_finish
        self.max_tokens = max_tokens
        self.terminal_event: str | None = None
        self.status: str | None = None
        self.incomplete_reason: str | None = None
        self._sequence = 0
        self._texts: dict[tuple, list[str]] = {}  # deltas per (output_index, content_index)

    @property
    def terminal(self) -> str:
        return self.terminal_event or 'the terminal event'

    def accept(self, event: tuple[str, str]) -> Pieces:
        """Apply one (type, data) event; return the answer text, reasoning text and tool-call piece it carried."""
        kind, body = self._typed_body(event, f'the terminal event {self.terminal_event}')
        sequence = body.get('sequence_number')
        if type(sequence) is not int or sequence != self._sequence:
            raise StreamError('protocol', f'expected sequence_number {self._sequence}, got '
                                          f'{_shorten(repr(sequence))} in {kind}: an event was lost or repeated')
        self._sequence += 1
        take = self._TAKE.get(kind)
        return take(self, body) if take else _NOTHING

    def _take_started(self, body: dict) -> Pieces:
        response = body.get('response')
        if self.response_id is None and isinstance(response, dict) and isinstance(response.get('id'), str):
            self.response_id = response['id']
        return _NOTHING

    def _take_item(self, body: dict) -> Pieces:
        item = body.get('item')
        kind = item.get('type') if isinstance(item, dict) else None
        if kind == 'function_call':
            return Pieces(call=self._open_call(item, body.get('output_index')))
        if kind not in ('message', 'reasoning'):
            raise StreamError('protocol', f'an output item of type {_shorten(repr(kind))} arrived in event '
                                          f'{self.data_events}; this client reads messages, reasoning and '
                                          'function calls')
        return _NOTHING

    def _open_call(self, item: dict, output_index: object) -> str:
        event = self.data_events
        if not self.spec.tools:
            raise StreamError('protocol', f'a function call arrived in event {event}, but the request offered no '
                                          'tools (--tools)')
        call_id, name = item.get('call_id'), item.get('name')
        if not isinstance(call_id, str) or not call_id or not isinstance(name, str) or not name:
            raise StreamError('protocol', f'a function call opened in event {event} without a call_id and a name')
        if output_index in self._calls_at:
            raise StreamError('protocol', f'a second function call opened at output_index {output_index} in event '
                                          f'{event}')
        call = ToolCall(len(self.calls), call_id, name)
        self.calls.append(call)
        self._calls_at[output_index] = call
        self.content_events += 1
        return self._shown(call, opening=True)

    def _call_at(self, body: dict) -> ToolCall:
        call = self._calls_at.get(body.get('output_index'))
        if call is None:
            raise StreamError('protocol', f'{body["type"]} in event {self.data_events} is for output_index '
                                          f'{_shorten(repr(body.get("output_index")))}, where no function call opened')
        return call

    def _take_arguments_delta(self, body: dict) -> Pieces:
        call, delta = self._call_at(body), self._string(body, 'delta')
        if not delta:
            return _NOTHING
        self._add_call_arguments(call, delta)
        return Pieces(call=self._shown(call, delta))

    def _take_arguments_done(self, body: dict) -> Pieces:
        call = self._call_at(body)
        self._check_arguments('response.function_call_arguments.done', call, self._string(body, 'arguments'))
        return _NOTHING

    def _take_item_done(self, body: dict) -> Pieces:
        item = body.get('item')
        if isinstance(item, dict) and item.get('type') == 'function_call':
            call = self._call_at(body)
            self._check_arguments('response.output_item.done', call, item.get('arguments'))
        return _NOTHING

    def _check_arguments(self, source: str, call: ToolCall, claimed: object) -> None:
        if claimed != call.arguments:
            raise StreamError('protocol', f'{source} says tool call {call.index} ({call.name}) has the arguments '
                                          f'{_preview(str(claimed))}, but its deltas assembled '
                                          f'{_preview(call.arguments)}')

    def _take_text_delta(self, body: dict) -> Pieces:
        delta = self._string(body, 'delta')
        self._texts.setdefault(self._part(body), []).append(delta)
        if delta:
            self._add_text(delta)
        return Pieces(text=delta)

    def _take_text_done(self, body: dict) -> Pieces:
        assembled = ''.join(self._texts.get(self._part(body), []))
        self._check_same('response.output_text.done', self._string(body, 'text'), assembled)
        return _NOTHING

    def _take_reasoning_delta(self, body: dict) -> Pieces:
        delta = self._string(body, 'delta')
        if delta:
            self._add_reasoning(delta)
        return Pieces(reasoning=delta)

    def _take_terminal(self, body: dict) -> Pieces:
        kind = body['type']
        self.terminal_event, self.done = kind, True
        response = body.get('response') if isinstance(body.get('response'), dict) else {}
        if kind == 'error':
            error = server_error_fields({'message': body.get('message'), 'code': body.get('code')})
            raise StreamError('application', f'server sent an error event: {describe_server_error(error)}',
                              server_error=error)
        if kind == 'response.failed':
            error = server_error_fields(response.get('error') or {'message': 'no error given'})
            raise StreamError('application', f'server sent response.failed: {describe_server_error(error)}',
                              server_error=error)
        self._take_started(body)
        self.status = response.get('status') if isinstance(response.get('status'), str) else None
        details = response.get('incomplete_details')
        reason = details.get('reason') if isinstance(details, dict) else None
        self.incomplete_reason = reason if isinstance(reason, str) else None
        if response.get('usage') is not None:
            self.completion_tokens = _token_count(response['usage'], 'output_tokens')
        self._check_same(kind, _output_text(response.get('output')), self.text)
        self._check_output_calls(kind, response.get('output'))
        return _NOTHING

    def _check_output_calls(self, kind: str, output: object) -> None:
        """The terminal event's function calls must be the ones the stream assembled, in order."""
        claimed = [(item.get('call_id'), item.get('name'), item.get('arguments'))
                   for item in (output if isinstance(output, list) else [])
                   if isinstance(item, dict) and item.get('type') == 'function_call']
        assembled = [(call.id, call.name, call.arguments) for call in self.calls]
        if claimed != assembled:
            raise StreamError('protocol', f'{kind} lists the function calls {_preview(json.dumps(claimed))}, but the '
                                          f'stream assembled {_preview(json.dumps(assembled))}')

    _TAKE = {'response.created': _take_started, 'response.in_progress': _take_started,
             'response.output_item.added': _take_item, 'response.output_item.done': _take_item_done,
             'response.output_text.delta': _take_text_delta, 'response.output_text.done': _take_text_done,
             'response.reasoning_text.delta': _take_reasoning_delta,
             'response.function_call_arguments.delta': _take_arguments_delta,
             'response.function_call_arguments.done': _take_arguments_done,
             **dict.fromkeys(RESPONSE_TERMINALS, _take_terminal)}

    @staticmethod
    def _string(body: dict, key: str) -> str:
        value = body.get(key)
        if not isinstance(value, str):
            raise StreamError('protocol', f'expected {key} to be a string in {body["type"]}, '
                                          f'got {type(value).__name__}')
        return value

    @staticmethod
    def _part(body: dict) -> tuple:
        return body.get('output_index'), body.get('content_index')

    @staticmethod
    def _check_same(source: str, claimed: str, assembled: str) -> None:
        if claimed != assembled:
            raise StreamError('protocol', f'{source} says the text is {_preview(claimed)} ({len(claimed)} characters) '
                                          f'but the deltas assembled {_preview(assembled)} ({len(assembled)})')

    def outcome_problem(self) -> str | None:
        """Why the response is not a finished answer, or None when it is."""
        if not self.done:
            return (f'EOF before a terminal event (response.completed) after '
                    f'{_count(self.content_events, "content event")}')
        carries = f'{self.terminal_event} carries status {self.status!r}'
        if self.expect_finish == 'length':
            if self.status != 'incomplete' or self.incomplete_reason != 'max_output_tokens':
                return (f'expected status "incomplete" with incomplete_details.reason=max_output_tokens '
                        f'(--expect-finish length), but {carries}')
            if self.completion_tokens is not None and self.completion_tokens != self.max_tokens:
                return (f'the output budget ended the response after {_count(self.completion_tokens, "output token")}, '
                        f'not the {self.max_tokens} requested')
            if not any(part.strip() for part in self.text_parts) and not self.calls:
                return f'{carries}, but no visible text arrived'
            return None
        if self.status == 'incomplete':
            if self.incomplete_reason != 'max_output_tokens':
                return f'not completed: {carries} (incomplete_details.reason={self.incomplete_reason})'
            return self._budget_problem(f'output budget exhausted: {carries} '
                                        f'(incomplete_details.reason={self.incomplete_reason})')
        if self.status != 'completed':
            return f'expected status "completed", but {carries}'
        return self._answer_problem(True, carries)

    def fields(self) -> dict:
        return {**super().fields(), 'finish_reason': None, 'response_status': self.status,
                'incomplete_reason': self.incomplete_reason}


def _output_text(output: object) -> str:
    """The text of the message items in a response's output."""
    return ''.join(part.get('text') or '' for item in (output if isinstance(output, list) else [])
                   if isinstance(item, dict) and item.get('type') == 'message'
                   for part in (item.get('content') if isinstance(item.get('content'), list) else [])
                   if isinstance(part, dict) and part.get('type') == 'output_text')


MESSAGE_STOP_REASONS = ('end_turn', 'stop_sequence', 'tool_use', 'max_tokens')
_BLOCK_DELTAS = {'text': ('text_delta',), 'thinking': ('thinking_delta', 'signature_delta'),
                 'redacted_thinking': (), 'tool_use': ('input_json_delta',)}


class _Block:
    """One content block of a Messages stream: its type, whether it is still open, and its tool call."""

    __slots__ = ('kind', 'open', 'call')

    def __init__(self, kind: str, call: ToolCall | None) -> None:
        self.kind, self.open, self.call = kind, True, call


class MessagesEvents(StreamValidator):
    """Validates one streamed answer of the Anthropic Messages API (/v1/messages), as vLLM serves it.

    Every event's ``event`` field must name the ``type`` in its data. The
    stream is message_start, then content blocks numbered from 0, each
    content_block_start, its deltas and content_block_stop, then a
    message_delta with the ``stop_reason`` and the usage, then message_stop;
    ``ping`` may come anywhere. An event before message_start, a second
    message_start, a block index that skips, a delta for a block that never
    started or already stopped, a delta of the wrong type for its block
    (text_delta in a tool_use block), a block still open at message_stop and
    anything after message_stop are ``protocol`` failures naming the event;
    an ``error`` event keeps the server's type and message. The answer is the
    text blocks; thinking blocks go to the reasoning; a tool_use block is a
    tool call whose input is its input_json_delta pieces joined.
    """

    api = 'messages'
    parser = TypedEvents
    terminal = 'message_stop'
    calls_finish = 'stop_reason=tool_use'

    def __init__(self, expect_finish: str = 'stop', max_tokens: int | None = None,
                 spec: AnswerSpec | None = None) -> None:
        super().__init__(spec)
        self.expect_finish = expect_finish
        self.max_tokens = max_tokens
        self.started = False
        self.stop_reason: str | None = None
        self.blocks: list[_Block] = []

    def accept(self, event: tuple[str, str]) -> Pieces:
        """Apply one (type, data) event; return the answer text, reasoning text and tool-call piece it carried."""
        kind, body = self._typed_body(event, 'message_stop')
        if kind == 'ping':
            return _NOTHING
        if kind == 'error':
            error = server_error_fields(body)
            raise StreamError('application', 'server sent an error event: ' + describe_server_error(error),
                              server_error=error)
        if not self.started and kind != 'message_start':
            raise StreamError('protocol', f'{kind} arrived in event {self.data_events}, before message_start')
        take = self._TAKE.get(kind)
        return take(self, body) if take else _NOTHING

    def _take_message_start(self, body: dict) -> Pieces:
        if self.started:
            raise StreamError('protocol', f'a second message_start in event {self.data_events}')
        self.started = True
        message = body.get('message')
        if isinstance(message, dict) and isinstance(message.get('id'), str):
            self.response_id = message['id']
        return _NOTHING

    def _take_block_start(self, body: dict) -> Pieces:
        index, block = body.get('index'), body.get('content_block')
        kind = block.get('type') if isinstance(block, dict) else None
        if index != len(self.blocks):
            raise StreamError('protocol', f'content_block_start for block {_shorten(repr(index))} in event '
                                          f'{self.data_events}: the next block was {len(self.blocks)}')
        if kind not in _BLOCK_DELTAS:
            raise StreamError('protocol', f'a content block of type {_shorten(repr(kind))} in event '
                                          f'{self.data_events}; this client reads text, thinking and tool_use blocks')
        call = None
        if kind == 'tool_use':
            call_id, name = block.get('id'), block.get('name')
            if not self.spec.tools:
                raise StreamError('protocol', f'a tool_use block arrived in event {self.data_events}, but the '
                                              'request offered no tools (--tools)')
            if not isinstance(call_id, str) or not call_id or not isinstance(name, str) or not name:
                raise StreamError('protocol', f'a tool_use block started in event {self.data_events} without an id '
                                              'and a name')
            call = ToolCall(len(self.calls), call_id, name)
            self.calls.append(call)
            self.content_events += 1
        self.blocks.append(_Block(kind, call))
        return Pieces(call=self._shown(call, opening=True) if call else '')

    def _open_block(self, body: dict, what: str) -> _Block:
        index = body.get('index')
        if type(index) is not int or not 0 <= index < len(self.blocks):
            raise StreamError('protocol', f'{what} for block {_shorten(repr(index))} in event {self.data_events}, '
                                          'which never started')
        block = self.blocks[index]
        if not block.open:
            raise StreamError('protocol', f'{what} for block {index} in event {self.data_events}, after its '
                                          'content_block_stop')
        return block

    def _take_block_delta(self, body: dict) -> Pieces:
        block = self._open_block(body, 'content_block_delta')
        delta = body.get('delta') if isinstance(body.get('delta'), dict) else {}
        kind = delta.get('type')
        if kind not in _BLOCK_DELTAS[block.kind]:
            raise StreamError('protocol', f'a {_shorten(str(kind))} in event {self.data_events} for block '
                                          f'{body["index"]}, a {block.kind} block')
        field = {'text_delta': 'text', 'thinking_delta': 'thinking', 'input_json_delta': 'partial_json'}.get(kind)
        if field is None:  # a signature_delta: nothing to show
            return _NOTHING
        piece = delta.get(field)
        if not isinstance(piece, str):
            raise StreamError('protocol', f'expected {kind}.{field} to be a string in event {self.data_events}, '
                                          f'got {type(piece).__name__}')
        if not piece:
            return _NOTHING
        if kind == 'text_delta':
            self._add_text(piece)
            return Pieces(text=piece)
        if kind == 'thinking_delta':
            self._add_reasoning(piece)
            return Pieces(reasoning=piece)
        self._add_call_arguments(block.call, piece)
        return Pieces(call=self._shown(block.call, piece))

    def _take_block_stop(self, body: dict) -> Pieces:
        self._open_block(body, 'content_block_stop').open = False
        return _NOTHING

    def _take_message_delta(self, body: dict) -> Pieces:
        delta = body.get('delta') if isinstance(body.get('delta'), dict) else {}
        reason = delta.get('stop_reason')
        if reason is not None and not isinstance(reason, str):
            raise StreamError('protocol', f'expected stop_reason to be a string in event {self.data_events}, '
                                          f'got {type(reason).__name__}')
        self.stop_reason = reason if reason is not None else self.stop_reason
        if body.get('usage') is not None:
            self.completion_tokens = _token_count(body['usage'], 'output_tokens')
        return _NOTHING

    def _take_message_stop(self, body: dict) -> Pieces:
        still_open = [index for index, block in enumerate(self.blocks) if block.open]
        if still_open:
            raise StreamError('protocol', f'message_stop in event {self.data_events} while block {still_open[0]} '
                                          'was still open (no content_block_stop)')
        self.done = True
        return _NOTHING

    _TAKE = {'message_start': _take_message_start, 'content_block_start': _take_block_start,
             'content_block_delta': _take_block_delta, 'content_block_stop': _take_block_stop,
             'message_delta': _take_message_delta, 'message_stop': _take_message_stop}

    def outcome_problem(self) -> str | None:
        """Why the message is not a finished answer, or None when it is."""
        if not self.done:
            return f'EOF before message_stop after {_count(self.content_events, "content event")}'
        reason = self.stop_reason
        if reason is None:
            return 'message_stop arrived, but no message_delta said its stop_reason'
        finish = f'stop_reason={reason}'
        if self.expect_finish == 'length':
            if reason != 'max_tokens':
                return f'expected stop_reason=max_tokens (--expect-finish length), got {finish}'
            if self.completion_tokens is not None and self.completion_tokens != self.max_tokens:
                return (f'stop_reason=max_tokens after {_count(self.completion_tokens, "output token")}, '
                        f'not the {self.max_tokens} requested')
            if not any(part.strip() for part in self.text_parts) and not self.calls:
                return 'stop_reason=max_tokens and message_stop arrived, but no visible text'
            return None
        if reason == 'max_tokens':
            return self._budget_problem('output budget exhausted (stop_reason=max_tokens)')
        if reason not in MESSAGE_STOP_REASONS:
            return f'expected stop_reason end_turn, stop_sequence or tool_use, got {finish}'
        if self.calls:  # vLLM says tool_use also when the choice named the tool
            return self._answer_problem(reason == 'tool_use', finish)
        if reason == 'tool_use':
            return 'stop_reason=tool_use, but no tool_use block arrived'
        return self._answer_problem(False, f'{finish} and message_stop arrived')

    def fields(self) -> dict:
        return {**super().fields(), 'finish_reason': self.stop_reason}


VALIDATORS = {'chat': ChatChunks, 'completions': CompletionChunks, 'responses': ResponseEvents,
              'messages': MessagesEvents}


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


def describe_server_error(error: dict, said: tuple[str, ...] = ()) -> str:
    """The server's message, quoted, and its type and code, those the words in ``said`` (the status
    line already shown) do not repeat."""
    repeated = {word.lower().replace(' ', '') for word in said}
    kind = ' '.join(str(part) for part in (error['type'], error['code'])
                    if part is not None and str(part).lower().replace(' ', '') not in repeated)
    message = error['message'] or '(empty message)'
    return f'{message!r}' + (f' ({kind})' if kind else '')


# ---------------------------------------------------------------------------
# HTTP: the response head and the body framing (sans-IO)
# ---------------------------------------------------------------------------
# http.client hides what a strict verdict needs: it stops reading headers at a
# malformed line and frames the body from what it had, reads only the first
# Transfer-Encoding line, takes a 102 or 103 for the final response, and its
# read1() returns b'' without complaint when a Content-Length body is cut
# short. So http.client only formats the request; the response is read from the
# socket and parsed here, as h11 does. Each body reader knows only how its
# framing ends: feed() returns payload bytes, overrun counts bytes seen past
# the end of the message, eof_problem() says why a close was premature.

MAX_HEAD_BYTES = 65_536        # status lines and header sections, 1xx responses included
MAX_BODY_SIZE = 2**60 - 1      # the largest Content-Length or chunk size accepted, in bytes (leading zeros are free)

_TOKEN = rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"
_TEXT = rb'[\t \x21-\x7e\x80-\xff]*'  # visible characters, space and tab: a field value or reason phrase
_QUOTED = rb'"(?:[\t !#-\[\]-~\x80-\xff]|\\[\t -~\x80-\xff])*"'
# RFC 9110 5.5 / RFC 9112 5: field-line = field-name ":" OWS field-value OWS, no whitespace before the colon
_FIELD_LINE = re.compile(b'(' + _TOKEN + b'):[ \t]*(' + _TEXT + b')')
_STATUS_LINE = re.compile(rb'HTTP/(\d)\.(\d) (\d{3})(?: (' + _TEXT + b'))?')
_FIELD_VALUE = re.compile(_TEXT)
_HEAD_END = re.compile(rb'\n\r?\n')


@dataclasses.dataclass(frozen=True)
class ResponseHead:
    """The status line and header fields of the final response, and the 1xx statuses skipped before it."""

    status: int
    reason: str
    version: str
    headers: tuple[tuple[str, str], ...]
    interim: tuple[int, ...] = ()

    def get_all(self, name: str) -> list[str]:
        name = name.lower()
        return [value for key, value in self.headers if key.lower() == name]

    def get(self, name: str) -> str | None:
        values = self.get_all(name)
        return values[0] if values else None

    def field_list(self, name: str) -> list[str]:
        """The elements of a list-valued field, all its lines combined in order (RFC 9110, 5.3)."""
        return [part.strip().lower() for value in self.get_all(name) for part in value.split(',') if part.strip()]


class ResponseHeadParser:
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

    def feed(self, raw: bytes) -> ResponseHead | None:
        searched = max(0, len(self._buf) - 2)
        self._buf += raw
        while True:
            end = _HEAD_END.search(self._buf, searched)
            if end is None:
                if self._skipped + len(self._buf) > MAX_HEAD_BYTES:
                    raise StreamError('http', f'response head longer than {MAX_HEAD_BYTES} bytes')
                return None
            head = _parse_head(self._buf[:end.start()], tuple(self.interim))
            self._skipped += end.end()
            self._buf, searched = self._buf[end.end():], 0
            if head.status == 101:
                raise StreamError('http', 'unexpected 101 Switching Protocols: this client asked for no upgrade')
            if not 100 <= head.status < 200:
                self.rest, self._buf = self._buf, b''
                return head
            self.interim.append(head.status)

    def eof_problem(self) -> str:
        """Why a connection that closed now has not delivered a response."""
        received = self._skipped + len(self._buf)
        if not received:
            return 'connection closed before any response bytes arrived'
        return f'connection closed inside the response head after {_count(received, "byte")}'


def _parse_head(block: bytes, interim: tuple[int, ...]) -> ResponseHead:
    """The status line and fields of one head, without its blank line."""
    lines = [line[:-1] if line.endswith(b'\r') else line for line in block.split(b'\n')]
    status = _STATUS_LINE.fullmatch(lines[0])
    if status is None:
        raise StreamError('http', f'invalid status line {bytes(lines[0][:60])!r}: expected "HTTP/1.1 200 OK"')
    if status[1] != b'1':
        raise StreamError('http', f'unsupported HTTP version {status[1].decode()}.{status[2].decode()}; '
                                  'expected HTTP/1.x')
    fields: list[list[str]] = []
    for line in lines[1:]:
        if line[:1] in (b' ', b'\t') and fields and _FIELD_VALUE.fullmatch(line):
            fields[-1][1] = (fields[-1][1] + ' ' + line.strip(b' \t').decode('latin-1')).strip()  # obs-fold
            continue
        field = _FIELD_LINE.fullmatch(line)
        if field is None:
            raise StreamError('http', _malformed_field(line))
        fields.append([field[1].decode('ascii'), field[2].rstrip(b' \t').decode('latin-1')])
    return ResponseHead(int(status[3]), (status[4] or b'').decode('latin-1'), f'{status[1].decode()}.{status[2].decode()}',
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
        return f'{self.received} of {_count(self.declared, "body byte")}'

    def overrun_problem(self) -> str:
        return f'{_count(self.overrun, "byte")} beyond the declared Content-Length of {self.declared}'


class Chunk(enum.Enum):
    """Where a chunked body is: the states of ChunkedBody."""

    SIZE = 'chunk-size line'
    DATA = 'chunk data'
    DATA_END = 'CRLF after chunk data'
    TRAILER = 'trailer section'
    COMPLETE = 'complete'


MAX_CHUNK_LINE = 4096        # bytes of one chunk-size or trailer line
MAX_TRAILER_BYTES = 16_384   # bytes of the whole trailer section

# RFC 9112 7.1.1: chunk-ext = *( BWS ";" BWS chunk-ext-name [ BWS "=" BWS chunk-ext-val ] )
_CHUNK_EXTENSIONS = re.compile(rb'(?:[ \t]*;[ \t]*' + _TOKEN + rb'(?:[ \t]*=[ \t]*(?:' + _TOKEN + b'|' + _QUOTED
                               + rb'))?)*[ \t]*')


class ChunkedBody:
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
        self._state = Chunk.SIZE   # SIZE -> (DATA -> DATA_END ->) SIZE ... SIZE(0) -> TRAILER -> COMPLETE

    @property
    def complete(self) -> bool:
        return self._state is Chunk.COMPLETE

    def feed(self, raw: bytes) -> bytes:
        SIZE, DATA, DATA_END, COMPLETE, HEX = Chunk.SIZE, Chunk.DATA, Chunk.DATA_END, Chunk.COMPLETE, self._HEX
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
                line = buf[pos:eol]
                if 1 < len(line) <= 16 and line[-1] == 13 and not line[:-1].strip(HEX):  # under 2**60: in bound
                    size = int(line[:-1], 16)  # the usual line: hex digits and CR, nothing else
                else:
                    size = self._chunk_size(line)
                pos = eol + 1
                if not size:
                    state = Chunk.TRAILER
                    continue
                stop = pos + size
                if stop + 2 <= end:  # the whole chunk and its CRLF are here: take them in one step
                    if buf[stop:stop + 2] != b'\r\n':
                        raise StreamError('transport', f'chunk data not followed by CRLF: {bytes(buf[stop:stop + 8])!r}')
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
                    raise StreamError('transport', f'chunk data not followed by CRLF: {bytes(buf[pos:pos + 8])!r}')
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
        if end - pos > MAX_CHUNK_LINE:
            raise StreamError('transport', f'{self._state.value} longer than {MAX_CHUNK_LINE} bytes without a line end')
        self._pending = buf[pos:]

    @staticmethod
    def _line_content(line: bytes, what: str) -> bytes:
        """A line (up to its LF) without its CR; StreamError unless it ended in exactly CRLF."""
        if not line.endswith(b'\r') or b'\r' in line[:-1]:
            ended = 'CR CR LF' if line.endswith(b'\r\r') else 'a bare CR inside it' if line.endswith(b'\r') \
                else 'a bare LF'
            raise StreamError('transport', f'{what} ending in {ended}, expected CRLF: {bytes(line[:40])!r}')
        return line[:-1]

    def _chunk_size(self, line: bytes) -> int:
        """The size declared by a chunk-size line (RFC 9112, 7.1)."""
        content = self._line_content(line, 'chunk-size line')
        digits, semicolon, extensions = content.partition(b';')
        if semicolon:
            digits, extensions = digits.rstrip(b' \t'), semicolon + extensions
            if not _CHUNK_EXTENSIONS.fullmatch(b' ' + extensions):
                raise StreamError('transport', f'invalid chunk extension in {bytes(content[:40])!r}')
        elif digits[-1:] in (b' ', b'\t'):
            digits = digits.rstrip(b' \t')
        if not digits or digits.strip(self._HEX):
            raise StreamError('transport', f'invalid chunk size line {bytes(content[:40])!r}: '
                                           'expected hexadecimal digits')
        size = int(digits, 16)  # base 16 has no digit limit, and the line is bounded
        if size > MAX_BODY_SIZE:
            raise StreamError('transport', f'chunk size 0x{bytes(digits.lstrip(b"0")[:40]).decode()} is over the '
                                           f'bound of {MAX_BODY_SIZE} bytes')
        return size

    def _trailer_line(self, line: bytes) -> bool:
        """Check one trailer line (up to its LF); True when it is the blank line that ends the message.
        Like a header line, it may end in CRLF or a bare LF (RFC 9112, 2.2)."""
        content = line[:-1] if line.endswith(b'\r') else line
        if not content:
            return True
        self._trailer_bytes += len(line) + 1
        if self._trailer_bytes > MAX_TRAILER_BYTES:
            raise StreamError('transport', f'trailer section longer than {MAX_TRAILER_BYTES} bytes')
        if not _FIELD_LINE.fullmatch(content):
            raise StreamError('transport', f'invalid trailer line {bytes(content[:40])!r}: '
                                           'expected a field line "name: value"')
        return False

    def eof_problem(self) -> str | None:
        state = self._state
        if state is Chunk.COMPLETE:
            return None
        if state is Chunk.DATA or state is Chunk.DATA_END:
            return (f'connection closed inside a chunk after {_count(self.received, "body byte")} '
                    f'({_count(self._chunk_left, "byte")} of that chunk missing)')
        if state is Chunk.TRAILER:
            return f'chunked body ended inside its trailer after {_count(self.received, "body byte")}'
        return f'chunked body ended without its terminating chunk after {_count(self.received, "body byte")}'

    def progress(self) -> str:
        return f'{_count(self.received, "body byte")} and no terminating chunk'

    def overrun_problem(self) -> str:
        return f'{_count(self.overrun, "byte")} after the terminating chunk'


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
        return f'{_count(self.received, "body byte")} and the connection still open'


def body_reader(head: ResponseHead) -> ContentLengthBody | ChunkedBody | CloseDelimitedBody:
    """Choose the body framing from the response head (RFC 9112, 6.3), refusing what cannot be decoded."""
    encodings = head.field_list('Content-Encoding')
    if any(coding != 'identity' for coding in encodings):
        raise StreamError('http', f'unsupported content-encoding {", ".join(head.get_all("Content-Encoding"))!r}')
    if head.get_all('Transfer-Encoding'):
        if head.field_list('Transfer-Encoding') != ['chunked']:
            raise StreamError('http', f'unsupported transfer-encoding '
                                      f'{", ".join(head.get_all("Transfer-Encoding"))!r}; expected chunked alone')
        if head.get_all('Content-Length'):
            raise StreamError('http', 'both Transfer-Encoding and Content-Length: the framing is ambiguous')
        return ChunkedBody()
    length = content_length(head)
    return CloseDelimitedBody() if length is None else ContentLengthBody(length)


def content_length(head: ResponseHead) -> int | None:
    """The declared Content-Length, or None when there is none. StreamError('http') when it is not
    1*DIGIT, when a list of values disagrees, or when its value is over MAX_BODY_SIZE; any number of
    leading zeros is allowed (RFC 9110, 8.6)."""
    parts = [part.strip() for value in head.get_all('Content-Length') for part in value.split(',')]
    if not parts:
        return None
    values = set()
    for part in parts:
        if not part.isdigit() or not part.isascii():
            raise StreamError('http', f'invalid Content-Length {_shorten(", ".join(parts))!r}: expected digits')
        significant = part.lstrip('0') or '0'
        if len(significant) > len(str(MAX_BODY_SIZE)) or int(significant) > MAX_BODY_SIZE:  # no int() of 4,300 digits
            raise StreamError('http', f'Content-Length {_shorten(significant, 30)} is over the bound of '
                                      f'{MAX_BODY_SIZE} bytes')
        values.add(int(significant))
    if len(values) != 1:
        raise StreamError('http', f'Content-Length values disagree: {_shorten(", ".join(parts))!r}')
    return values.pop()


# ---------------------------------------------------------------------------
# The whole response (sans-IO): bytes in, the answer's pieces and the verdict out
# ---------------------------------------------------------------------------

class Capture:
    """The raw response bytes (status line, headers, body as received), up to a bound."""

    def __init__(self, limit: int = MAX_CAPTURE_BYTES) -> None:
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


def _public_headers(head: ResponseHead) -> list[list[str]]:
    """The response headers worth keeping: no cookies, nothing auth-related."""
    return [[name, value] for name, value in head.headers if name.lower() not in _PRIVATE_HEADERS]


def _check_content_type(value: str | None) -> None:
    media_type = (value or '').split(';')[0].strip().lower()
    if media_type != 'text/event-stream':
        raise StreamError('http', f'expected content-type text/event-stream, got {value or "none"!r}')


def _status_failure(head: ResponseHead, body: bytes) -> StreamError:
    """The unexpected status, with the server's own error message when its body has one."""
    problem = f'expected status 200, got {head.status} {head.reason}'.rstrip()
    try:
        error = server_error_fields(json.loads(body))
    except (ValueError, RecursionError):
        text = body.decode('utf-8', 'replace')
        if 'html' in (head.get('Content-Type') or '').lower():
            text = re.sub(r'(?is)<head>.*?</head>|<[^>]*>', ' ', text)  # the title repeats the heading
        text = ' '.join(text.split())
        return StreamError('http', f'{problem}: {_preview(text, 200)}' if text else problem)
    said = (str(head.status), head.reason)
    return StreamError('http', f'{problem}: {describe_server_error(error, said)}', server_error=error)


def _error_body_reader(head: ResponseHead):
    """The framing reader of an error response, or None when its framing is unusable too
    (the status already says what failed)."""
    try:
        return body_reader(head)
    except StreamError:
        return None


def response_head(head: ResponseHead) -> bytes:
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
    the break, and nothing more should be fed. ``message_complete`` says the message ended as its framing promised. A status
    other than 200 becomes an ``http`` error once up to MAX_ERROR_BODY bytes of its body (the
    server's own message) have arrived, or the connection closed. judge() gives the verdict.
    """

    def __init__(self, validator: StreamValidator, capture: Capture | None = None) -> None:
        self.validator = validator
        self.events = validator.parser()
        self.capture = capture
        self.head: ResponseHead | None = None
        self.body: ContentLengthBody | ChunkedBody | CloseDelimitedBody | None = None
        self.error: StreamError | None = None
        self.received = 0     # bytes fed, head included
        self.opening = b''    # the first bytes fed, which say what kind of server answered
        self.reads = 0        # feeds that carried body bytes
        self._heads = ResponseHeadParser()
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

    def eof(self) -> None:
        """The connection closed. An error if that was inside the head or the body of an error status;
        otherwise judge() reads how each layer ended."""
        if self.error is not None:
            return
        if self.head is None:
            self.error = StreamError('transport', self._heads.eof_problem())
        elif self._error_body is not None:
            self.error = self.status_failure()

    def status_failure(self) -> StreamError:
        """The failure of a response whose status is not 200, with the server's message when it sent one."""
        return _status_failure(self.head, b''.join(self._error_body or ())[:MAX_ERROR_BODY])

    def _feed_head(self, data: bytes) -> bytes:
        """Feed the head parser; once the head is whole, choose the body reader and return the body's first bytes."""
        head = self._heads.feed(data)
        if head is None:
            return b''
        self.head = head
        if self.capture is not None:
            self.capture.keep(response_head(head))
        if head.status != 200:
            self._error_body = []
            self.body = _error_body_reader(head)
            if self.body is None:  # its framing is unusable too: the status says what failed
                raise self.status_failure()
        else:
            _check_content_type(head.get('Content-Type'))
            self.body = body_reader(head)
        return self._heads.rest

    def _feed_body(self, data: bytes, pieces: list[Pieces]) -> None:
        accept = self.validator.accept
        for event in self.events.feed(self.body.feed(data)):
            pieces.append(accept(event))
        if self.body.overrun:
            raise StreamError('transport', self.body.overrun_problem())

    def _feed_error_body(self, data: bytes) -> None:
        try:
            part = self.body.feed(data)
        except StreamError:  # broken framing in an error body: the status already says what failed
            raise self.status_failure() from None
        self._error_body.append(part)
        self._error_size += len(part)
        if self.body.complete or self._error_size >= MAX_ERROR_BODY:
            raise self.status_failure()


# ---------------------------------------------------------------------------
# The request (checked before any connection)
# ---------------------------------------------------------------------------

DEFAULT_URL = 'http://127.0.0.1:8000/v1/chat/completions'
DEFAULT_PROMPT = 'Reply with exactly the word READY.'

# The APIs, by the end of the URL path that serves them.
API_PATHS = {'/v1/chat/completions': 'chat', '/v1/completions': 'completions', '/v1/responses': 'responses',
             '/v1/messages': 'messages'}
# Per API, the request keys that have a flag of their own (or no say at all), which --extra may not set.
RESERVED_KEYS = {
    'chat': {'model': '--model', 'messages': '--prompt/--system', 'stream': None, 'n': None,
             'max_tokens': '--max-tokens', 'temperature': '--temperature', 'stop': '--stop', 'tools': '--tools',
             'tool_choice': '--tool-choice', 'response_format': '--json-schema'},
    'completions': {'model': '--model', 'prompt': '--prompt', 'stream': None, 'n': None,
                    'max_tokens': '--max-tokens', 'temperature': '--temperature', 'stop': '--stop',
                    'response_format': '--json-schema'},
    'responses': {'model': '--model', 'input': '--prompt', 'instructions': '--system', 'stream': None,
                  'max_output_tokens': '--max-tokens', 'temperature': '--temperature', 'stop': '--stop',
                  'tools': '--tools', 'tool_choice': '--tool-choice', 'text': '--json-schema'},
    'messages': {'model': '--model', 'messages': '--prompt', 'system': '--system', 'stream': None,
                 'max_tokens': '--max-tokens', 'temperature': '--temperature', 'stop_sequences': '--stop',
                 'tools': '--tools', 'tool_choice': '--tool-choice', 'output_config': '--json-schema'},
}
FINISHES = ('stop', 'length')
ANTHROPIC_VERSION = '2023-06-01'  # the anthropic-version header of a /v1/messages request


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host.lower().rstrip('.') == 'localhost'


def _positive_finite(value: float) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value) and value > 0


@dataclasses.dataclass(frozen=True)
class Proxy:
    """A forward proxy to tunnel https through (CONNECT): where it is, and the Proxy-Authorization that
    the credentials of its URL make. The credentials stay out of its repr and of every output."""

    host: str
    port: int
    authorization: str = dataclasses.field(default='', repr=False)
    secrets: tuple[str, ...] = dataclasses.field(default=(), repr=False)  # what the outputs must never hold

    @property
    def address(self) -> str:
        return _host_port(self.host, self.port)

    def connect_request(self, host: str, port: int) -> bytes:
        host = host if host.isascii() else host.encode('idna').decode('ascii')  # as DNS and TLS name it
        target = _host_port(host, port)
        lines = [f'CONNECT {target} HTTP/1.1', f'Host: {target}', f'User-Agent: stream-client/{__version__}']
        if self.authorization:
            lines.append(f'Proxy-Authorization: {self.authorization}')
        return ('\r\n'.join(lines) + '\r\n\r\n').encode('ascii')

    def facts(self) -> dict:
        """What the record says of the proxy: where it is and whether credentials were used, never which."""
        return {'address': self.address, 'credentials': bool(self.authorization)}


def proxy_from_environment(scheme: str, host: str, environ: typing.Mapping[str, str]) -> Proxy | None:
    """The proxy that HTTPS_PROXY/https_proxy (HTTP_PROXY/http_proxy for http; lower case first, as
    curl reads them, and an empty one as unset) names for this host, unless NO_PROXY/no_proxy covers
    it; loopback never goes through a proxy. ValueError for a proxy URL this client cannot use."""
    if _is_loopback(host):
        return None
    names = ('https_proxy', 'HTTPS_PROXY') if scheme == 'https' else ('http_proxy', 'HTTP_PROXY')
    url = next((environ[name] for name in names if environ.get(name)), None)
    no_proxy = next((environ[name] for name in ('no_proxy', 'NO_PROXY') if environ.get(name)), '')
    if url is None or bypasses_proxy(host, no_proxy):
        return None
    parts = urlsplit(url if '://' in url else 'http://' + url)
    if parts.scheme != 'http' or not parts.hostname:
        raise ValueError(f'the proxy in {names[1]} must be an http:// URL (CONNECT over plain TCP), not '
                         f'{parts.scheme or "(none)"}://...')
    try:
        port = parts.port or 80
    except ValueError:
        raise ValueError(f'the proxy in {names[1]} has an invalid port') from None
    user, password = unquote(parts.username or ''), unquote(parts.password or '')
    if not (user or password):
        return Proxy(parts.hostname, port)
    pair = f'{user}:{password}'
    if not pair.isascii() or not pair.isprintable():
        raise ValueError(f'the proxy credentials in {names[1]} hold characters that cannot go into a header')
    authorization = 'Basic ' + base64.b64encode(pair.encode()).decode()
    return Proxy(parts.hostname, port, authorization, tuple(secret for secret in (authorization, pair, password)
                                                            if secret))


def bypasses_proxy(host: str, no_proxy: str) -> bool:
    """Whether NO_PROXY covers host, as curl matches it: '*' covers every host; a name covers itself and the
    hosts of its domain (a leading dot is ignored); an IP address covers itself, a CIDR block its addresses."""
    host = host.lower().strip('[]').rstrip('.')
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        address = None
    for entry in (part.strip().lower() for part in no_proxy.split(',')):
        if entry == '*':
            return True
        if not entry:
            continue
        try:
            network = ipaddress.ip_network(entry.strip('[]'), strict=False)
        except ValueError:
            name = entry.lstrip('.').rstrip('.')
            if name and (host == name or host.endswith('.' + name)):
                return True
            continue
        if address is not None and address.version == network.version and address in network:
            return True
    return False


@dataclasses.dataclass(frozen=True)
class PreparedRequest:
    """One checked request: where it goes, what it sends and how long it may take.

    Build it with prepare(). It checks its own invariants when built, and its
    repr shows neither the API key nor the headers that carry it.
    """

    url: str
    scheme: str
    host: str
    port: int
    path: str
    api: str
    model: str
    body: bytes = dataclasses.field(repr=False)
    headers: dict = dataclasses.field(repr=False)
    wire: bytes = dataclasses.field(repr=False)  # the whole request as sent, formatted once by http.client
    idle: float
    deadline: float
    settings: dict  # the request settings the record reports (no prompt text, no key)
    max_tokens: int = 128
    expect_finish: str = 'stop'
    source: str = 'endpoint'
    ssl_context: ssl.SSLContext | None = dataclasses.field(default=None, repr=False, compare=False)
    token: str = dataclasses.field(default='', repr=False)
    spec: AnswerSpec = dataclasses.field(default_factory=AnswerSpec, repr=False)  # tools, tool choice, JSON schema
    proxy: Proxy | None = None  # the forward proxy https goes through, if one does

    def __post_init__(self) -> None:
        if self.scheme not in ('http', 'https'):
            raise ValueError(f'expected scheme http or https, got {self.scheme!r}')
        if self.scheme == 'https' and self.ssl_context is None:
            raise ValueError('an https request needs an SSL context')
        if self.scheme == 'http' and self.proxy is not None:
            raise ValueError('plain http goes to loopback only, and loopback never goes through a proxy')
        if not 0 < self.port < 65536:
            raise ValueError(f'port must be 1 to 65535, got {self.port}')
        if not (_positive_finite(self.idle) and _positive_finite(self.deadline)):
            raise ValueError('idle and deadline must be positive finite numbers')
        if self.api not in VALIDATORS or self.expect_finish not in FINISHES:
            raise ValueError(f'unknown api {self.api!r} or expected finish {self.expect_finish!r}')

    @property
    def origin(self) -> tuple:
        """Where a connection of this request leads: requests with the same origin may share one."""
        return self.scheme, self.host, self.port, self.proxy

    @property
    def address(self) -> str:
        """host:port as a URL writes it ([::1]:8000 for an IPv6 address)."""
        return _host_port(self.host, self.port)

    def secrets(self) -> tuple[str, ...]:
        """The strings no output may hold: the API key and the proxy's credentials."""
        return ((self.token,) if self.token else ()) + (self.proxy.secrets if self.proxy else ())

    def new_validator(self) -> StreamValidator:
        return VALIDATORS[self.api](self.expect_finish, self.max_tokens, self.spec)


def _check_url(url: str):
    """The parts and port of a URL this client may connect to, or ValueError."""
    parts = urlsplit(url)
    if parts.scheme not in ('http', 'https'):
        path = '' if '/' in url else '/v1/chat/completions'
        hint = f'; did you mean http://{url}{path}?' if '://' not in url and url[:1].isalnum() else ''
        raise ValueError(f'expected an http:// or https:// URL such as {DEFAULT_URL}, got '
                         f'{_shorten(repr(url), 80)}{hint}')
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
    if parts.scheme == 'http':
        _check_plain_host(parts.hostname, port)
    return parts, port


def _check_plain_host(host: str, port: int) -> None:
    """Plain http only to loopback: an IP address must be one, and a name must resolve only to loopback
    addresses (the connection checks again the address it really reached)."""
    try:
        addresses = [ipaddress.ip_address(host)]
    except ValueError:
        try:
            found = {info[4][0] for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)}
        except (OSError, UnicodeError) as exc:
            raise ValueError(f'cannot resolve {host!r} for plain http: '
                             f'{getattr(exc, "strerror", None) or exc}') from None
        addresses = [ipaddress.ip_address(address.partition('%')[0]) for address in found]
    outside = sorted(str(address) for address in addresses if not address.is_loopback)
    if outside:
        resolved = '' if outside == [host] else f', but {host!r} resolves to {", ".join(outside)}'
        raise ValueError(f'plain http is allowed only to loopback addresses{resolved or f", not {host!r}"}; '
                         'use https or an SSH tunnel to 127.0.0.1')


def _check_number(name: str, value, low: float, low_ok: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or value < low or (value == low and not low_ok):
        bound = f'at least {low:g}' if low_ok else f'more than {low:g}'
        raise ValueError(f'{name} must be a finite number {bound}, got {value!r}')
    return float(value)


def api_of(path: str, api: str | None = None) -> str:
    """The API a request goes to: the one named, or the one its URL path ends with."""
    if api is not None:
        if api not in VALIDATORS:
            raise ValueError(f'unknown api {api!r}; choose from {", ".join(VALIDATORS)}')
        return api
    for suffix, name in API_PATHS.items():
        if path.endswith(suffix):
            return name
    base = path.rstrip('/')
    hint = (f'; did you mean {base}/chat/completions? (an SDK\'s base_url ends in /v1; give the endpoint)'
            if base.endswith('/v1') else '')
    raise ValueError(f'cannot tell the API from the URL path {path!r}: expected a path ending in '
                     f'{", ".join(API_PATHS)}, or --api {"|".join(VALIDATORS)} for a server mounted elsewhere{hint}')


def _request_body(api: str, model: str, prompt: str, system: str | None, max_tokens: int, temperature: float,
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
        if key in RESERVED_KEYS[api]:
            flag = RESERVED_KEYS[api][key]
            raise ValueError(f'extra may not set {key!r}' + (f'; use {flag}' if flag else ''))
    if api == 'chat':
        messages = ([{'role': 'system', 'content': system}] if system is not None else []) \
            + [{'role': 'user', 'content': prompt}]
        body = {'model': model, 'messages': messages, 'stream': True, 'stream_options': {'include_usage': True},
                'max_tokens': max_tokens, 'temperature': temperature, 'n': 1}
    elif api == 'completions':
        if system is not None:
            raise ValueError('the completions API has no system message; put it in the prompt')
        body = {'model': model, 'prompt': prompt, 'stream': True, 'stream_options': {'include_usage': True},
                'max_tokens': max_tokens, 'temperature': temperature, 'n': 1}
    elif api == 'responses':  # no n, no stream_options (the usage comes with the terminal event)
        body = {'model': model, 'input': prompt, 'stream': True, 'max_output_tokens': max_tokens,
                'temperature': temperature}
        if system is not None:
            body['instructions'] = system
    else:  # messages: the Anthropic shape, system apart from the messages, stop strings as stop_sequences
        body = {'model': model, 'messages': [{'role': 'user', 'content': prompt}], 'max_tokens': max_tokens,
                'temperature': temperature, 'stream': True}
        if system is not None:
            body['system'] = system
    if stop:
        body['stop_sequences' if api == 'messages' else 'stop'] = stop
    return {**body, **(extra or {})}


def _answer_spec(api: str, tools: list | None, tool_choice: str | None, json_schema: object) -> AnswerSpec:
    """What the answer is asked to be, checked: tools in the chat-completions shape, each with a name
    and optional parameters (a schema), a tool choice, and a JSON schema. ValueError for anything
    that cannot be sent or checked."""
    if tools is None:
        if tool_choice is not None:
            raise ValueError('tool_choice needs tools')
        declared: tuple = ()
    else:
        if api == 'completions':
            raise ValueError('the completions API has no tools; use chat completions or the Responses API')
        if not isinstance(tools, list) or not tools:
            raise ValueError('tools must be a non-empty JSON array of tools')
        declared = tuple(_declared_tool(number, tool) for number, tool in enumerate(tools))
        tool_choice = 'auto' if tool_choice is None else tool_choice
    schema = None
    if json_schema is not None:
        if not isinstance(json_schema, dict):
            raise ValueError(f'json_schema must be a JSON object (a schema), not {_seen(json_schema)}')
        try:
            schema = JsonSchema(json_schema)
        except SchemaError as exc:
            raise ValueError(f'json_schema is not a valid schema: {exc}') from None
    return AnswerSpec(declared, tool_choice, schema)


def _declared_tool(number: int, tool: object) -> tuple[str, JsonSchema | None]:
    function = tool.get('function') if isinstance(tool, dict) else None
    name = function.get('name') if isinstance(function, dict) else None
    if not isinstance(tool, dict) or tool.get('type') != 'function' or not isinstance(name, str) or not name:
        raise ValueError(f'tools[{number}] is not {{"type": "function", "function": {{"name": ..., '
                         f'"parameters": ...}}}}: {_seen(tool)}')
    if 'parameters' not in function:
        return name, None
    try:
        return name, JsonSchema(function['parameters'])
    except SchemaError as exc:
        raise ValueError(f'tools[{number}] ({name}) has parameters that are not a valid schema: {exc}') from None


def _answer_fields(api: str, tools: list | None, spec: AnswerSpec, json_schema: dict | None) -> dict:
    """The request keys that ask for tool calls or a JSON answer, in the API's own shape."""
    fields: dict = {}
    if tools is not None:
        choice = spec.tool_choice
        if api == 'messages':  # Anthropic's names: input_schema, and any for required
            fields['tools'] = [{key: value for key, value in (('name', tool['function']['name']),
                                                               ('description', tool['function'].get('description')),
                                                               ('input_schema', tool['function'].get('parameters')))
                                if value is not None} for tool in tools]
            fields['tool_choice'] = ({'type': {'required': 'any'}.get(choice, choice)} if choice in TOOL_CHOICES
                                     else {'type': 'tool', 'name': choice})
        elif api == 'responses':  # the Responses API takes the function's keys flattened into the tool
            fields['tools'] = [{'type': 'function', **tool['function']} for tool in tools]
            fields['tool_choice'] = choice if choice in TOOL_CHOICES else {'type': 'function', 'name': choice}
        else:
            fields['tools'] = tools
            fields['tool_choice'] = choice if choice in TOOL_CHOICES else {'type': 'function',
                                                                           'function': {'name': choice}}
    if json_schema is not None:
        if api == 'messages':
            fields['output_config'] = {'format': {'type': 'json_schema', 'schema': json_schema}}
        elif api == 'responses':
            fields['text'] = {'format': {'type': 'json_schema', 'name': 'answer', 'schema': json_schema}}
        else:
            fields['response_format'] = {'type': 'json_schema', 'json_schema': {'name': 'answer',
                                                                                'schema': json_schema}}
    return fields


def _ssl_context(ca_file: str | None) -> ssl.SSLContext:
    try:
        return ssl.create_default_context(cafile=ca_file)
    except (OSError, ssl.SSLError) as exc:
        raise ValueError(f'cannot load --ca-file {ca_file!r}: {exc.strerror or exc}') from None


def prepare(url: str, model: str, prompt: str, *, max_tokens: int = 128, idle: float = 10.0,
            deadline: float = 60.0, ca_file: str | None = None, token: str | None = None,
            system: str | None = None, temperature: float = 0.0, stop: list[str] | None = None,
            extra: dict | None = None, api: str | None = None, expect_finish: str = 'stop',
            source: str = 'endpoint', tools: list | None = None, tool_choice: str | None = None,
            json_schema: dict | None = None, trust_env: bool = True) -> PreparedRequest:
    """Check the arguments and build the request; raise ValueError before any connection.

    The API (chat, completions or responses) follows from the URL path unless ``api`` names it.
    ``tools`` (in the chat-completions shape) and ``tool_choice`` (auto, required, none or a
    tool's name; auto by default) ask for tool calls; ``json_schema`` asks for a JSON answer.
    ``trust_env`` honours HTTPS_PROXY and NO_PROXY (see proxy_from_environment()).
    """
    parts, port = _check_url(url)
    api = api_of(parts.path, api)
    if expect_finish not in FINISHES:
        raise ValueError(f'expect_finish must be one of {", ".join(FINISHES)}, got {expect_finish!r}')
    idle = _check_number('idle', idle, 0, False)
    deadline = _check_number('deadline', deadline, 0, False)
    temperature = _check_number('temperature', temperature, 0, True)
    body = _request_body(api, model, prompt, system, max_tokens, temperature, stop, extra)
    spec = _answer_spec(api, tools, tool_choice, json_schema)
    body.update(_answer_fields(api, tools, spec, json_schema))
    headers = {'Content-Type': 'application/json', 'Accept': 'text/event-stream',
               'Accept-Encoding': 'identity',  # no compression: a proxy must pass the events as they are
               'User-Agent': f'stream-client/{__version__}'}
    if api == 'messages':
        headers['anthropic-version'] = ANTHROPIC_VERSION
    if token:
        if not token.isprintable() or not token.isascii() or ' ' in token:
            raise ValueError('MODEL_API_KEY holds characters that cannot go into an HTTP header')
        # vLLM's --api-key checks only this header, on /v1/messages too (not x-api-key): sent once, here
        headers['Authorization'] = 'Bearer ' + token
    context = _ssl_context(ca_file) if parts.scheme == 'https' or ca_file else None
    settings = {'max_tokens': max_tokens, 'temperature': temperature, 'stop': stop,
                'system': system is not None, 'extra_keys': sorted(extra or {}),
                'prompt_sha256': hashlib.sha256(prompt.encode()).hexdigest(), 'expect_finish': expect_finish,
                'tools': [name for name, _ in spec.tools], 'tool_choice': spec.tool_choice,
                'json_schema_sha256': None if json_schema is None else hashlib.sha256(
                    json.dumps(json_schema, sort_keys=True, separators=(',', ':')).encode()).hexdigest()}
    data = json.dumps(body, ensure_ascii=False).encode()
    return PreparedRequest(url=url, scheme=parts.scheme, host=parts.hostname, port=port, path=parts.path or '/',
                           api=api, model=model, body=data, headers=headers,
                           wire=render_request(parts.scheme, parts.hostname, port, parts.path or '/', headers, data),
                           idle=idle, deadline=deadline, settings=settings, max_tokens=max_tokens,
                           expect_finish=expect_finish, source=source, ssl_context=context, token=token or '',
                           spec=spec, proxy=proxy_from_environment(parts.scheme, parts.hostname, os.environ)
                           if trust_env else None)


class _Recorder:
    """Stands in for a socket: keeps what http.client sends."""

    def __init__(self) -> None:
        self.sent = bytearray()

    def sendall(self, data: bytes) -> None:
        self.sent += data


def render_request(scheme: str, host: str, port: int, path: str, headers: dict, body: bytes) -> bytes:
    """The bytes of a POST request, formatted (and its header names and values checked) by http.client.
    Done once per prepared request; every run sends these bytes on its own connection."""
    connection_class = http.client.HTTPSConnection if scheme == 'https' else http.client.HTTPConnection
    conn = connection_class(host, port)
    conn.sock = _Recorder()  # http.client writes to a connection it is given, as it is
    try:
        conn.request('POST', path, body=body, headers=headers)
    except ValueError as exc:  # http.client refuses a header value or path it cannot send
        raise ValueError(f'cannot send this request: {exc}') from None
    return bytes(conn.sock.sent)


# ---------------------------------------------------------------------------
# Transport: one request, read under the idle timeout and the overall deadline
# ---------------------------------------------------------------------------

class Phase(enum.Enum):
    """The part of the exchange a run is in; failures name it."""

    CONNECT = 'connect'
    PROXY = 'proxy CONNECT'
    TLS = 'TLS handshake'
    REQUEST = 'request'
    HEADERS = 'headers'
    BODY = 'body'


class Timeline:
    """Monotonic stamps of one run, taken only by the transport, and how the text was delivered."""

    def __init__(self) -> None:
        self.start()
        self.headers_at: float | None = None
        self.first_event_at: float | None = None
        self.first_text_at: float | None = None
        self.first_reasoning_at: float | None = None
        self.last_text_at: float | None = None
        self.ended: float | None = None
        self.gaps: list[float] = []
        self.content_reads = 0               # reads that carried visible text
        self.max_content_events_per_read = 0

    def start(self) -> None:
        """Start the clock: run() calls this just before it opens the connection."""
        self.started_wall = time.time()
        self.started = time.perf_counter()

    def ms(self, at: float | None) -> float | None:
        return None if at is None else round((at - self.started) * 1000, 3)

    def note_read(self, at: float, pieces: list[Pieces]) -> None:
        """Stamp the events of one read, which all arrived at ``at``: the first event, first text (a
        tool call's name and arguments count as the answer's text) and first reasoning, the gaps
        between content events, and how many content events the read carried."""
        texts = 0
        for text, reasoning, call in pieces:
            if self.first_event_at is None:
                self.first_event_at = at
            if text or call:
                texts += 1
                if self.first_text_at is None:
                    self.first_text_at = at
                else:
                    self.gaps.append(at - self.last_text_at)
                self.last_text_at = at
            if reasoning and self.first_reasoning_at is None:
                self.first_reasoning_at = at
        if texts:
            self.content_reads += 1
            if texts > self.max_content_events_per_read:
                self.max_content_events_per_read = texts


class Cancel:
    """Lets another thread stop runs in flight: cancel() shuts down their connections, and each of
    those runs records an interrupted failure. Shared by the runs of one load; safe in threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self.reason: str | None = None  # the signal that cancelled, once it did

    def cancel(self, reason: str) -> None:
        with self._lock:
            self.reason = self.reason or reason
            sockets = list(self._sockets)
        for sock in sockets:
            _shut(sock)

    def attach(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.add(sock)
            cancelled = self.reason is not None
        if cancelled:
            _shut(sock)

    def detach(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.discard(sock)


def _shut(sock: socket.socket) -> None:
    """Shut a connection down so that a read blocked on it returns; the plain socket's method, so that
    no TLS state is touched from this thread."""
    try:
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError:
        pass


class Connection:
    """An open connection: its socket, the address it really reached, and how often it has been used."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        host, port = sock.getpeername()[:2]
        self.peer = _host_port(host, port)
        self.peer_ip = host
        self.local_port = sock.getsockname()[1]
        self.requests = 0                     # requests sent on it so far
        self.idle_since: float | None = None  # monotonic time at which its last response ended
        self.source: str | None = None        # who answered on it (see _source), once a response head came


class KeptConnections:
    """The connections one worker keeps alive between its runs (--keep-alive), one per origin. Used by one
    thread at a time."""

    def __init__(self) -> None:
        self._by_origin: dict[tuple, Connection] = {}

    def take(self, origin: tuple) -> Connection | None:
        return self._by_origin.pop(origin, None)

    def keep(self, origin: tuple, connection: Connection) -> None:
        connection.idle_since = time.monotonic()
        self._by_origin[origin] = connection

    def close(self) -> None:
        for connection in self._by_origin.values():
            connection.sock.close()
        self._by_origin.clear()


class Exchange:
    """What one run saw: the timeline, owned by the transport, and the response reader, which owns the
    head, the body framing, the events and the answer. ``failure`` is the first failure, whichever
    layer it came from."""

    def __init__(self, request: PreparedRequest, capture: Capture | None = None,
                 cancel: Cancel | None = None) -> None:
        self.request = request
        self.cancel = cancel
        self.timeline = Timeline()
        self.phase = Phase.CONNECT
        self.reader = ResponseReader(request.new_validator(), capture)
        self.failure: StreamError | None = None
        self.connection: Connection | None = None
        self.reused = False            # the connection was kept from an earlier run
        self.idle_s: float | None = None  # how long a reused connection had been idle

    def fail(self, error: StreamError) -> None:
        if self.failure is None:
            self.failure = error

    def interruption(self, signal_name: str | None = None) -> StreamError | None:
        """The failure of a run stopped by a signal (or by its Cancel), or None if it was not."""
        signal_name = signal_name or (self.cancel.reason if self.cancel is not None else None)
        if signal_name is None:
            return None
        return StreamError('interrupted', f'{signal_name} during the {self.phase.value} phase '
                                          f'after {_count(self.reader.validator.content_events, "content event")}')


def stream(url: str, model: str, prompt: str, *, max_tokens: int = 128, idle: float = 10.0,
           deadline: float = 60.0, ca_file: str | None = None, token: str | None = None,
           on_text=None, on_reasoning=None, on_call=None, **options) -> dict:
    """Stream one answer and return its evidence record.

    Invalid arguments raise ValueError before any connection. Everything that
    goes wrong afterwards is reported in the record, never raised; Ctrl+C
    raises Interrupted, which carries the record so far.
    ``on_text(text)`` and ``on_reasoning(text)`` are called with each piece of
    answer and reasoning text as it arrives, and ``on_call(piece)`` with each
    piece of a tool call (its name and "(" as it opens, then its arguments).
    ``options`` are prepare()'s: system, temperature, stop, extra, api,
    expect_finish, tools, tool_choice, json_schema.
    """
    request = prepare(url, model, prompt, max_tokens=max_tokens, idle=idle,
                      deadline=deadline, ca_file=ca_file, token=token, **options)
    return run(request, on_text=on_text, on_reasoning=on_reasoning, on_call=on_call)


class _Show(typing.NamedTuple):
    """Who is shown the answer as it arrives: callbacks for text, reasoning and tool-call pieces."""

    text: typing.Callable | None = None
    reasoning: typing.Callable | None = None
    call: typing.Callable | None = None


def run(request: PreparedRequest, *, on_text=None, on_reasoning=None, on_call=None,
        capture: Capture | None = None, cancel: Cancel | None = None, kept: KeptConnections | None = None) -> dict:
    """Perform a prepared request; return the record (see stream()).

    Safe to call from many threads at once. When ``capture`` is given, the
    raw response is kept in it (see Capture). A ``cancel`` shared with
    other runs lets another thread interrupt this one. With ``kept`` (one
    per worker), a connection kept from an earlier run to the same origin
    is reused, and this run's connection is kept if its response ended
    cleanly on a framing that lets the connection go on.
    """
    x = Exchange(request, capture, cancel)
    interrupted = None
    connection = kept.take(request.origin) if kept is not None else None
    try:
        x.timeline.start()
        if connection is None:
            connection = _connect(x)
        else:
            _reuse(x, connection)
        x.connection = connection
        connection.requests += 1
        _exchange(connection.sock, x, _Show(on_text, on_reasoning, on_call))
    except StreamError as exc:
        x.fail(exc)
    except KeyboardInterrupt as exc:
        interrupted = getattr(exc, 'signal_name', 'SIGINT')
        x.fail(x.interruption(interrupted))
    except Exception as exc:  # a server must never crash the run: keep the evidence
        x.fail(_classify(exc, x))
    finally:
        if connection is not None:
            if x.reader.head is not None:
                connection.source = _source(x.reader.head, request.source)
            if cancel is not None:
                cancel.detach(connection.sock)
            if kept is not None and interrupted is None and _reusable(x):
                kept.keep(request.origin, connection)
            else:
                connection.sock.close()
        x.timeline.ended = time.perf_counter()
    record = build_record(x)
    if interrupted:
        raise Interrupted(interrupted, record)
    return record


def _connect(x: Exchange) -> Connection:
    """The TCP connection (to the proxy, when one is used, then a tunnel through it) and, for https,
    the TLS handshake, each step under the idle timeout cut to the deadline."""
    request, proxy = x.request, x.request.proxy
    stop = x.interruption()
    if stop:
        raise stop
    sock = socket.create_connection((proxy.host, proxy.port) if proxy else (request.host, request.port),
                                    timeout=_wait(x))
    if x.cancel is not None:
        x.cancel.attach(sock)
    try:
        if proxy is not None:
            x.phase = Phase.PROXY
            _open_tunnel(sock, x)
        if request.scheme == 'http':
            connection = Connection(sock)
            _check_plain_peer(connection, request)
            return connection
        x.phase = Phase.TLS
        sock.settimeout(_wait(x))
        tls = request.ssl_context.wrap_socket(sock, server_hostname=request.host)
    except BaseException:
        if x.cancel is not None:
            x.cancel.detach(sock)
        sock.close()
        raise
    if x.cancel is not None:  # the TLS socket took over the connection
        x.cancel.detach(sock)
        x.cancel.attach(tls)
    return Connection(tls)


def _check_plain_peer(connection: Connection, request: PreparedRequest) -> None:
    """Plain http only to loopback, judged by the address really connected to, not by the name."""
    if not ipaddress.ip_address(connection.peer_ip.partition('%')[0]).is_loopback:
        raise StreamError('connect', f'plain http is allowed only to loopback addresses, but {request.host} '
                                     f'connected to {connection.peer}; nothing was sent')


def _open_tunnel(sock: socket.socket, x: Exchange) -> None:
    """CONNECT through the proxy to the origin (RFC 9110, 9.3.6); StreamError('proxy') unless it answers 2xx."""
    request, proxy = x.request, x.request.proxy
    sock.settimeout(_wait(x))
    sock.sendall(proxy.connect_request(request.host, request.port))
    heads = ResponseHeadParser()
    head = None
    while head is None:
        sock.settimeout(_wait(x))
        raw = sock.recv(READ_SIZE)
        if not raw:
            raise StreamError('proxy', f'the proxy {proxy.address} closed the connection before answering CONNECT '
                                       f'{request.address}')
        try:
            head = heads.feed(raw)
        except StreamError as exc:
            raise StreamError('proxy', f'the proxy {proxy.address} answered CONNECT with {exc.message}') from None
    if not 200 <= head.status < 300:
        raise StreamError('proxy', f'the proxy {proxy.address} refused the tunnel to {request.address}: '
                                   f'{head.status} {head.reason}'.rstrip())
    if heads.rest:
        raise StreamError('proxy', f'the proxy {proxy.address} sent {_count(len(heads.rest), "byte")} after its '
                                   '2xx to CONNECT, before the tunnel was used')


def _reuse(x: Exchange, connection: Connection) -> None:
    """Take up a kept connection: the clock starts now, as the request goes out on it."""
    x.reused, x.idle_s = True, time.monotonic() - connection.idle_since
    if x.cancel is not None:
        x.cancel.attach(connection.sock)


def _reusable(x: Exchange) -> bool:
    """Whether a connection may carry the next request: its response ended cleanly on a framing that says
    where it ends (Content-Length, or chunked and read to its last chunk), in HTTP/1.1, without
    Connection: close, and nothing went wrong below the event stream."""
    head, body, failure = x.reader.head, x.reader.body, x.failure
    if failure is not None and failure.layer not in ('http', 'sse', 'protocol', 'application'):
        return False
    return (head is not None and body is not None and body.complete and body.framing != 'close'
            and not body.overrun and head.version == '1.1' and 'close' not in head.field_list('Connection'))


def _exchange(sock: socket.socket, x: Exchange, show: _Show) -> None:
    try:
        x.phase = Phase.REQUEST
        sock.settimeout(_wait(x))
        sock.sendall(x.request.wire)
        x.phase = Phase.HEADERS
        _read_response(sock, x, show)
    except (OSError, StreamError) as exc:
        if x.reader.reading_error_body:  # the status line already says what failed; keep what arrived
            raise x.reader.status_failure() from None
        if _closed_while_idle(x, exc):
            raise StaleConnectionError(x.connection.requests, x.idle_s) from None
        if isinstance(exc, StreamError) and _looks_like_tls(x):
            raise StreamError(exc.layer, f'{exc.message}; is this port TLS? try https://') from None
        raise


def _closed_while_idle(x: Exchange, exc: BaseException) -> bool:
    """Whether a reused connection ended (closed or reset) before any response byte: not a timeout, and
    not a failure of a later layer."""
    if not x.reused or x.reader.received or isinstance(exc, TimeoutError):
        return False
    return isinstance(exc, OSError) or exc.layer == 'transport'


def _looks_like_tls(x: Exchange) -> bool:
    """Whether a plain http request that got no response head reached a TLS port: the server closed
    without a byte (as TLS servers do on a plaintext request), or its bytes start a TLS record."""
    reader = x.reader
    if x.request.scheme != 'http' or reader.head is not None:
        return False
    opening = reader.opening
    return reader.received == 0 or (len(opening) >= 2 and 20 <= opening[0] <= 23 and opening[1] == 3)


def _read_response(sock: socket.socket, x: Exchange, show: _Show) -> None:
    """Feed the reader until the HTTP message ends or the connection closes, under both time bounds.

    The clock is read once per read, right after it returns: every event of one read gets that time,
    so events that arrived together are 0 ms apart.
    """
    reader, timeline = x.reader, x.timeline
    on_text, on_reasoning, on_call = show
    showing = any(show)  # a load shows nothing: no second pass over its events
    deadline_at = timeline.started + x.request.deadline
    while True:
        sock.settimeout(_wait(x))
        raw = sock.recv(READ_SIZE)
        now = time.perf_counter()
        if not raw:
            stop = x.interruption()
            if stop:
                raise stop
            reader.eof()
            if reader.error is not None:
                raise reader.error
            return  # judge() reads how each layer ended
        if now > deadline_at:
            raise _deadline_failure(x)
        pieces = reader.feed(raw)
        if x.phase is Phase.HEADERS and reader.head is not None:
            timeline.headers_at = now
            x.phase = Phase.BODY
        if pieces:
            timeline.note_read(now, pieces)
        if pieces and showing:
            for text, reasoning, call in pieces:
                if text and on_text:
                    on_text(text)
                if reasoning and on_reasoning:
                    on_reasoning(reasoning)
                if call and on_call:
                    on_call(call)
        if reader.error is not None:
            raise reader.error
        if reader.message_complete:
            return


def _wait(x: Exchange) -> float:
    """The socket timeout for the next operation: the idle timeout, cut to the deadline."""
    remaining = x.request.deadline - (time.perf_counter() - x.timeline.started)
    if remaining <= 0:
        raise _deadline_failure(x)
    return min(x.request.idle, remaining)


def _deadline_failure(x: Exchange) -> StreamError:
    deadline = f'{x.request.deadline:g} s'
    validator = x.reader.validator
    if x.phase is Phase.BODY and validator.done:
        return _unended_after_terminal(x, f'the overall deadline of {deadline}')
    return StreamError('timeout', f'overall deadline of {deadline} reached during the {x.phase.value} phase '
                                  f'after {_count(validator.content_events, "content event")}')


def _unended_after_terminal(x: Exchange, bound: str) -> StreamError:
    """The terminal event arrived but the HTTP message never ended: a transport failure, whichever bound noticed."""
    return StreamError('transport', f'message did not end within {bound} after {x.reader.validator.terminal}; '
                                    f'received {x.reader.body.progress()}')


def _classify(exc: BaseException, x: Exchange) -> StreamError:
    """Turn an exception from the socket, TLS or http.client into a layered failure."""
    request = x.request
    stop = x.interruption()
    if stop:
        return stop
    if isinstance(exc, (TimeoutError, socket.timeout)):
        return _timeout_failure(x)
    if isinstance(exc, ssl.SSLCertVerificationError):
        return StreamError('tls', f'certificate verification failed for {request.host}: '
                                  f'{exc.verify_message or exc.reason}')
    if isinstance(exc, ssl.SSLError):
        hint = '; the answer was not TLS: is this port plain http?' if exc.reason in _NOT_TLS else ''
        return StreamError('tls', f'TLS failed with {request.host}: {exc.reason or exc}{hint}')
    if x.phase is Phase.CONNECT and isinstance(exc, OSError):
        reason = exc.strerror or str(exc) or type(exc).__name__
        hint = '; is the server running, and listening on that port?' if isinstance(exc, ConnectionRefusedError) \
            else ''
        if request.proxy is not None:
            return StreamError('proxy', f'cannot connect to the proxy {request.proxy.address}: {reason}{hint}')
        return StreamError('connect', f'cannot connect to {request.address}: {reason}{hint}')
    if x.phase is Phase.PROXY and isinstance(exc, OSError):
        return StreamError('proxy', f'the tunnel through the proxy {request.proxy.address} failed: '
                                    f'{type(exc).__name__}: {exc}')
    if x.phase is Phase.TLS and isinstance(exc, OSError):
        return StreamError('tls', f'TLS handshake with {request.host} failed: {type(exc).__name__}: {exc}')
    if x.phase in (Phase.REQUEST, Phase.HEADERS) and isinstance(exc, (OSError, http.client.HTTPException)):
        return StreamError('http', f'no valid response headers: {type(exc).__name__}: {exc}')
    if x.phase is Phase.BODY and isinstance(exc, OSError):
        received = x.reader.body.received if x.reader.body else 0
        return StreamError('transport', f'connection failed after {_count(received, "body byte")}: '
                                        f'{type(exc).__name__}: {exc}')
    return StreamError('client', f'unexpected {type(exc).__name__} during the {x.phase.value} phase: {exc}')


# OpenSSL's reasons for a handshake answered by something that is not TLS (a plain http server's reply).
_NOT_TLS = frozenset({'WRONG_VERSION_NUMBER', 'RECORD_LAYER_FAILURE', 'PACKET_LENGTH_TOO_LONG', 'UNKNOWN_PROTOCOL',
                      'HTTP_REQUEST', 'UNEXPECTED_RECORD'})


def _timeout_failure(x: Exchange) -> StreamError:
    request = x.request
    if time.perf_counter() - x.timeline.started >= request.deadline - 0.001:
        return _deadline_failure(x)
    idle = f'{request.idle:g} s'
    if x.phase is Phase.CONNECT:
        where = f'the proxy {request.proxy.address}' if request.proxy else request.address
        return StreamError('timeout', f'no connection to {where} within {idle}')
    if x.phase is Phase.PROXY:
        return StreamError('timeout', f'no answer to CONNECT from the proxy {request.proxy.address} within {idle}')
    if x.phase is Phase.TLS:
        return StreamError('timeout', f'TLS handshake with {request.host} not finished within {idle}')
    if x.phase is not Phase.BODY:
        return StreamError('timeout', f'no response headers within the idle timeout of {idle}')
    if x.reader.validator.done:
        return _unended_after_terminal(x, f'the idle timeout of {idle}')
    return StreamError('timeout', f'no bytes for {idle} (idle timeout) after '
                                  f'{_count(x.reader.validator.content_events, "content event")}')


# ---------------------------------------------------------------------------
# The verdict and the evidence record
# ---------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Verdict:
    """Whether a run is ok, which layer failed first, and which layers completed."""

    layer: str | None
    message: str | None
    transport_complete: bool | None
    event_complete: bool | None
    application_complete: bool

    @property
    def ok(self) -> bool:
        return self.layer is None


def judge(reader: ResponseReader, failure: StreamError | None = None) -> Verdict:
    """Why this response is not a finished answer; the one place that decides, and that sets the
    completeness flags. ``failure`` is one the reader could not see (no connection, a timeout, a
    signal); otherwise the reader's own error, if any, is the failure.

    A failure that stopped the reading (no connection, a bad status, invalid
    JSON, a timeout...) wins: the layers after it were never seen, so their
    flags are null. A transport failure still says whether the events that
    arrived ended on a boundary. A response read to its end is judged in the
    order a response is built: the HTTP framing, then the event stream, then
    the answer itself.
    """
    failure = failure if failure is not None else reader.error
    outcome = reader.validator.outcome_problem()
    application_complete = outcome is None and not (failure is not None and failure.server_error)
    if failure is not None:
        if failure.layer != 'transport':
            return Verdict(failure.layer, failure.message, None, None, application_complete)
        event_complete = reader.events.pending() is None if reader.body is not None else None
        return Verdict('transport', failure.message, False, event_complete, application_complete)
    transport_problem = reader.body.eof_problem()
    event_problem = reader.events.pending()
    layer, message = next(((layer, problem) for layer, problem in
                           (('transport', transport_problem), ('sse', event_problem), ('application', outcome))
                           if problem), (None, None))
    return Verdict(layer, message, transport_problem is None, event_problem is None, application_complete)


def build_record(x: Exchange) -> dict:
    """The JSON evidence record of a run (never contains the API key)."""
    verdict = judge(x.reader, x.failure)
    timeline, request, reader = x.timeline, x.request, x.reader
    ended = timeline.ended if timeline.ended is not None else time.perf_counter()
    answer = reader.validator.fields()
    head = reader.head
    record = {
        'ok': verdict.ok,
        'error_layer': verdict.layer,
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
        'unchecked_schema_keywords': request.spec.unchecked(),
        'done': answer['done'],
        'completion_tokens': answer['completion_tokens'],
        'content_events': answer['content_events'],
        'data_events': answer['data_events'],
        'headers_ms': timeline.ms(timeline.headers_at),
        'first_event_ms': timeline.ms(timeline.first_event_at),
        'first_reasoning_ms': timeline.ms(timeline.first_reasoning_at),
        'first_text_ms': timeline.ms(timeline.first_text_at),
        'duration_ms': timeline.ms(ended),
        'event_gaps_ms': [round(gap * 1000, 3) for gap in timeline.gaps],
        'reads': reader.reads,
        'content_reads': timeline.content_reads,
        'max_content_events_per_read': timeline.max_content_events_per_read,
        'content_span_ms': _span_ms(timeline.first_text_at, timeline.last_text_at),
        'buffered_delivery': buffered_delivery(answer['content_events'], timeline.content_reads),
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
        'client': {'version': __version__, 'python': PYTHON_VERSION, 'platform': PLATFORM},
        'capture': None if reader.capture is None else {'bytes': len(reader.capture.data),
                                                        'truncated': reader.capture.truncated},
    }
    return redact(record, request.secrets())


MIN_EVENTS_FOR_BUFFERING_HINT = 8   # fewer content events than this: too short to tell
BUFFERED_EVENTS_PER_READ = 4        # content events per content-carrying read that mean "held back"


def buffered_delivery(content_events: int, content_reads: int) -> bool | None:
    """Whether the text arrived in bursts, as a proxy that holds the stream back delivers it.

    None (cannot tell) under MIN_EVENTS_FOR_BUFFERING_HINT content events: a
    short answer often fits one TCP segment even straight from the server.
    Otherwise true when the reads that carried text carried, on average, at
    least BUFFERED_EVENTS_PER_READ content events each.
    """
    if content_events < MIN_EVENTS_FOR_BUFFERING_HINT:
        return None
    return content_events >= BUFFERED_EVENTS_PER_READ * content_reads


def _connection_facts(x: Exchange) -> dict | None:
    """What the record says of the connection: whether it was kept from an earlier run, how many requests
    it has carried, the address really reached (the proxy's, through one) and the local port."""
    connection = x.connection
    if connection is None:
        return None
    return {'reused': x.reused, 'request_on_connection': connection.requests, 'peer': connection.peer,
            'local_port': connection.local_port, 'stale': isinstance(x.failure, StaleConnectionError)}


def _span_ms(first: float | None, last: float | None) -> float | None:
    return None if first is None else round((last - first) * 1000, 3)


def _run_source(x: Exchange) -> str:
    """Who answered the run: what its response head says; without a head (a kept connection found closed),
    what the last response on the same connection said; else where the request was sent."""
    earlier = x.connection.source if x.connection is not None else None
    return _source(x.reader.head, earlier or x.request.source)


def _source(head: ResponseHead | None, requested: str) -> str:
    """fixture (the synthetic fixture answered), replay (the fixture replayed a capture), or what was asked."""
    if head is not None:
        if head.get(REPLAY_HEADER) == 'replay':
            return 'replay'
        if (head.get('server') or '').startswith('synthetic-fixture'):
            return 'fixture'
    return requested


def _declared_length(head: ResponseHead) -> int | None:
    """The Content-Length for the record: None when there is none or it is not usable."""
    try:
        return content_length(head)
    except StreamError:
        return None


def _http_facts(head: ResponseHead | None, body) -> dict | None:
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


PYTHON_VERSION = sys.version.split()[0]
PLATFORM = _platform()  # constant for the life of the process


def redact(value, secrets: tuple[str, ...]):
    """A copy of value with every occurrence of each secret in its strings replaced."""
    if not secrets:
        return value
    if isinstance(value, str):
        for secret in secrets:
            value = value.replace(secret, '[redacted]')
        return value
    if isinstance(value, dict):
        return {key: redact(item, secrets) for key, item in value.items()}
    if isinstance(value, list):
        return [redact(item, secrets) for item in value]
    return value


def failed_record(request: PreparedRequest, failure: StreamError) -> dict:
    """The record of a run that never started (interrupted before sending, or a bug in this client)."""
    x = Exchange(request)
    x.fail(failure)
    x.timeline.ended = x.timeline.started
    return build_record(x)


# ---------------------------------------------------------------------------
# Many runs: a load of strict runs, and a summary built from their verdicts
# ---------------------------------------------------------------------------

ARRIVALS = ('poisson', 'constant')
MAX_OPEN_LOOP_IN_FLIGHT = 512  # runs in flight at most under --rate without --concurrency


@dataclasses.dataclass(frozen=True)
class LoadSettings:
    """How many runs, how many at once, and how fast they start: a closed loop (no rate: each run
    starts when a slot is free) or an open loop (rate runs per second, at most concurrency at once)."""

    runs: int = 1
    concurrency: int | None = None
    rate: float | None = None
    arrivals: str = 'poisson'
    seed: int = 0
    keep_alive: bool = False  # each worker reuses its connection while the responses allow it

    def __post_init__(self) -> None:
        if isinstance(self.runs, bool) or not isinstance(self.runs, int) or self.runs < 1:
            raise ValueError(f'runs must be a positive integer, got {self.runs!r}')
        if self.concurrency is not None and (isinstance(self.concurrency, bool) or
                                             not isinstance(self.concurrency, int) or self.concurrency < 1):
            raise ValueError(f'concurrency must be a positive integer, got {self.concurrency!r}')
        if self.rate is not None and not _positive_finite(self.rate):
            raise ValueError(f'rate must be a positive finite number of runs per second, got {self.rate!r}')
        if self.arrivals not in ARRIVALS:
            raise ValueError(f'arrivals must be one of {", ".join(ARRIVALS)}, got {self.arrivals!r}')

    @property
    def in_flight(self) -> int:
        """The most runs that may be in flight at once."""
        default = 1 if self.rate is None else MAX_OPEN_LOOP_IN_FLIGHT
        return min(self.runs, self.concurrency or default)

    def described(self) -> dict:
        return {'runs': self.runs, 'concurrency': self.in_flight, 'rate': self.rate,
                'arrivals': self.arrivals if self.rate is not None else None, 'seed': self.seed,
                'keep_alive': self.keep_alive}


def arrival_offsets(settings: LoadSettings):
    """Seconds after the load's start at which each run is due: all at once in a closed loop (the slots
    pace them); evenly spaced or at Poisson arrivals (seeded) in an open loop."""
    if settings.rate is None:
        yield from (0.0 for _ in range(settings.runs))
        return
    rng, at = random.Random(settings.seed), 0.0
    for _ in range(settings.runs):
        yield at
        at += 1 / settings.rate if settings.arrivals == 'constant' else rng.expovariate(settings.rate)


class _Pool:
    """Worker threads, started as jobs need them, up to ``size``; work(job) runs in one of them."""

    def __init__(self, size: int, work) -> None:
        self._size, self._work = size, work
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._pending = 0  # jobs submitted and not finished
        self._threads: list[threading.Thread] = []

    def submit(self, job) -> None:
        with self._lock:
            self._pending += 1
            spawn = self._pending > len(self._threads) and len(self._threads) < self._size
            if spawn:
                self._threads.append(threading.Thread(target=self._loop, daemon=True))
        self._jobs.put(job)
        if spawn:
            self._threads[-1].start()

    def _loop(self) -> None:
        for job in iter(self._jobs.get, None):
            try:
                self._work(job)
            finally:
                with self._lock:
                    self._pending -= 1

    def close(self) -> None:
        """Wait for every job, then for the threads (in short waits, so that signals are handled)."""
        for _ in self._threads:
            self._jobs.put(None)
        for thread in self._threads:
            while thread.is_alive():
                thread.join(0.1)


def run_load(requests: list[PreparedRequest], settings: LoadSettings, on_record, cancel: Cancel) -> None:
    """Run requests[i % len(requests)] for each run i, as settings say; call on_record(record) for each
    run as it ends, one call at a time, from the worker threads.

    Each record gains ``run`` (its index), ``offset_ms`` (its start after the load's), ``queued_ms``
    (open loop: how late it started after it was due) and ``load`` (the settings, and an ``id`` of the
    load). With ``settings.keep_alive`` each worker thread keeps its connections between its runs (see
    run()) and closes them when the load ends. Once ``cancel`` is cancelled, no run starts and the runs
    in flight end as interrupted; this returns when every run that started has its record.
    """
    started, lock = time.perf_counter(), threading.Lock()
    described = {**settings.described(), 'id': os.urandom(8).hex()}  # the id tells merged loads apart
    workers, kept_by_worker = threading.local(), []

    def kept() -> KeptConnections | None:
        if not settings.keep_alive:
            return None
        if not hasattr(workers, 'kept'):
            workers.kept = KeptConnections()
            with lock:
                kept_by_worker.append(workers.kept)
        return workers.kept

    def one(job: tuple[int, float]) -> None:
        index, due = job
        if cancel.reason is not None:
            return  # cancelled before it started: no run, no record
        begun = time.perf_counter()
        record = run(requests[index % len(requests)], cancel=cancel, kept=kept())
        record = {'run': index, **record, 'offset_ms': round((begun - started) * 1000, 3),
                  'queued_ms': None if settings.rate is None else round((begun - started - due) * 1000, 3),
                  'load': described}
        with lock:
            on_record(record)
    pool = _Pool(settings.in_flight, one)
    try:
        for index, due in enumerate(arrival_offsets(settings)):
            wait = started + due - time.perf_counter()
            while wait > 0 and cancel.reason is None:
                time.sleep(min(wait, 0.05))
                wait = started + due - time.perf_counter()
            if cancel.reason is not None:
                break
            pool.submit((index, due))
    finally:
        pool.close()
        for connections in kept_by_worker:
            connections.close()


_QUOTED_TEXT = re.compile(r"""b?'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*\"""")
_NUMBER = re.compile(r'(?<![\w.])\d+(?:\.\d+)?(?![\w.])')
# '1 byte' and '2 bytes' are one kind of error: a singular after N becomes plural
_SINGULAR_COUNT = re.compile(r'\bN (content event|body byte|byte|output token|completion token)\b(?!s)')


def error_kind(error: str) -> str:
    """An error with its counts and quoted server text taken out, so that errors of one kind group:
    'application: EOF before [DONE] after 2 content events' -> '... after N content events'.
    The HTTP status stays."""
    status = re.match(r'http: expected status 200, got (\d{3})', error)
    kind = _SINGULAR_COUNT.sub(r'N \1s', _NUMBER.sub('N', _QUOTED_TEXT.sub('...', error)))
    return kind.replace('expected status N, got N', f'expected status 200, got {status[1]}', 1) if status else kind


def percentiles(values) -> dict | None:
    """p50, p90, p99 (nearest rank) and max of values, or None when there are none."""
    ordered = sorted(values)
    if not ordered:
        return None
    def rank(p: float) -> float:
        return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]
    return {'p50': rank(50), 'p90': rank(90), 'p99': rank(99), 'max': ordered[-1]}


class GapHistogram:
    """Content-event gaps pooled over many runs in bounded memory: counted in buckets 1% wide (and zero
    apart), so each percentile is the upper bound of its bucket, at most 1% above the true value."""

    STEP = math.log(1.01)

    def __init__(self) -> None:
        self.buckets: collections.Counter = collections.Counter()
        self.count = 0
        self.max = 0.0

    def add(self, gaps: list[float]) -> None:
        for gap in gaps:
            self.buckets[None if gap <= 0 else math.floor(math.log(gap) / self.STEP)] += 1
        self.count += len(gaps)
        self.max = max([self.max, *gaps])

    def result(self) -> dict | None:
        if not self.count:
            return None
        keys = sorted(self.buckets, key=lambda key: -math.inf if key is None else key)
        def rank(p: float) -> float:
            needed, seen = max(1, math.ceil(p / 100 * self.count)), 0
            for key in keys:
                seen += self.buckets[key]
                if seen >= needed:
                    return 0.0 if key is None else min(self.max, round(math.exp((key + 1) * self.STEP), 3))
            return self.max
        return {'p50': rank(50), 'p90': rank(90), 'p99': rank(99), 'max': self.max, 'count': self.count}


LATENCY_FIELDS = ('headers_ms', 'first_text_ms', 'duration_ms')


class Summary:
    """The aggregate of many runs, built from their records alone, so that --summary recomputes from the
    saved evidence exactly what the load printed. Keeps a few numbers per run, never the records."""

    def __init__(self) -> None:
        self.runs = self.ok = 0
        self.by_layer: collections.Counter = collections.Counter()
        self.by_kind: collections.Counter = collections.Counter()
        self.latency = {field: array.array('d') for field in LATENCY_FIELDS}
        self.gaps = GapHistogram()
        self.completion_tokens = self.token_runs = self.content_events = 0
        self.first_start: float | None = None
        self.last_end: float | None = None
        self.seen = {'sources': set(), 'apis': set(), 'models': set(), 'expected_finishes': set()}
        self.planned: dict[str, int] = {}  # runs planned, by load id
        self.stale = 0                     # runs whose reused connection had been closed while idle
        self.single_runs = 0               # records of runs that were not part of a load
        self._second = ('', 0)  # the last whole second parsed from a started_at, and its epoch

    def epoch(self, started_at: str) -> float:
        """Seconds since the epoch of a record's started_at (UTC, millisecond precision)."""
        second = started_at[:19]
        if second != self._second[0]:  # runs of a load share their seconds: parse each once
            self._second = (second, calendar.timegm(time.strptime(second, '%Y-%m-%dT%H:%M:%S')))
        return self._second[1] + int(started_at[20:23]) / 1000

    def add(self, record: dict) -> None:
        self.runs += 1
        start = self.epoch(record['started_at'])
        end = start + (record['duration_ms'] or 0) / 1000
        self.first_start = start if self.first_start is None else min(self.first_start, start)
        self.last_end = end if self.last_end is None else max(self.last_end, end)
        self.seen['sources'].add(record.get('source', 'endpoint'))
        self.seen['apis'].add(record.get('api', 'chat'))
        self.seen['models'].add(record.get('model'))
        self.seen['expected_finishes'].add((record.get('request') or {}).get('expect_finish', 'stop'))
        load = record.get('load') or {}
        if 'id' in load:
            self.planned[load['id']] = load['runs']
        else:
            self.single_runs += 1
        if not record['ok']:
            self.stale += bool((record.get('connection') or {}).get('stale'))
            self.by_layer[record['error_layer']] += 1
            self.by_kind[error_kind(record['error'])] += 1
            return
        self.ok += 1
        for field in LATENCY_FIELDS:
            self.latency[field].append(record[field])
        self.gaps.add(record['event_gaps_ms'])
        self.content_events += record['content_events']
        if record['completion_tokens'] is not None:
            self.completion_tokens += record['completion_tokens']
            self.token_runs += 1

    def p50_first_text(self) -> float | None:
        values = percentiles(self.latency['first_text_ms'])
        return values and values['p50']

    def result(self) -> dict:
        """The summary as one JSON object (see the README's "Many runs")."""
        wall = (self.last_end - self.first_start) if self.runs else 0.0
        def per_second(count: float) -> float | None:
            return round(count / wall, 3) if wall > 0 else None
        return {
            'runs': self.runs, 'ok': self.ok, 'not_ok': self.runs - self.ok,
            'planned_runs': sum(self.planned.values()) + self.single_runs,
            'stale_connection_failures': self.stale,
            'not_ok_by_layer': dict(sorted(self.by_layer.items(), key=lambda item: (-item[1], item[0]))),
            'not_ok_by_kind': dict(sorted(self.by_kind.items(), key=lambda item: (-item[1], item[0]))),
            'latency_ms': {field: percentiles(self.latency[field]) for field in LATENCY_FIELDS},
            'latency_runs': self.ok, 'latency_excludes': self.runs - self.ok,
            'event_gaps_ms': self.gaps.result(),
            'wall_s': round(wall, 3), 'runs_per_s': per_second(self.runs), 'ok_runs_per_s': per_second(self.ok),
            'completion_tokens_per_s': per_second(self.completion_tokens) if self.token_runs else None,
            'content_events_per_s': per_second(self.content_events),
            **{key: sorted(value, key=str) for key, value in self.seen.items()},
        }


def _unplanned(result: dict) -> str:
    """'  (of 200 planned)' when fewer runs have records than were planned (an interrupted load), else ''."""
    return f'  (of {result["planned_runs"]} planned)' if result['planned_runs'] > result['runs'] else ''


TERMINAL_COLUMNS = 80  # the width the tables for a person fit in


def summary_table(result: dict) -> str:
    """The summary for a person, within TERMINAL_COLUMNS: counts, kinds of failure, the latency of ok runs."""
    lines = [f'runs {result["runs"]}  ok {result["ok"]}  not ok {result["not_ok"]}' + _unplanned(result)]
    if result['stale_connection_failures']:
        lines.append(f'stale connections: {result["stale_connection_failures"]} runs on a kept connection that was '
                     'closed while idle')
    if result['not_ok']:
        lines += textwrap.wrap('not ok by layer: ' + ', '.join(f'{layer} {count}' for layer, count
                                                               in result['not_ok_by_layer'].items()),
                               TERMINAL_COLUMNS, subsequent_indent='  ')
        lines += [f'  {count:5d}  {_shorten(kind, TERMINAL_COLUMNS - 12)}'
                  for kind, count in list(result['not_ok_by_kind'].items())[:10]]
    lines.append(f'latency of {_count(result["latency_runs"], "ok run")}, ms '
                 f'({_count(result["latency_excludes"], "not ok run")} excluded):')
    gaps = result['event_gaps_ms']
    rows = [(field, result['latency_ms'][field]) for field in LATENCY_FIELDS]
    rows.append((f'content-event gaps ({gaps["count"] if gaps else 0})', gaps))
    width = max(len(name) for name, _ in rows) + 2
    lines.append(' ' * width + ''.join(f'{key:>9}' for key in ('p50', 'p90', 'p99', 'max')))
    for name, values in rows:
        cells = ''.join(f'{values[key]:9.1f}' if values else f'{"-":>9}' for key in ('p50', 'p90', 'p99', 'max'))
        lines.append(f'  {name:<{width - 2}}{cells}')
    runs, tokens = ([f'{result[key]} {label}' for key, label in group if result[key] is not None]
                    for group in ((('runs_per_s', 'runs/s'), ('ok_runs_per_s', 'ok runs/s')),
                                  (('completion_tokens_per_s', 'completion tokens/s'),
                                   ('content_events_per_s', 'content events/s'))))
    lines.append(f'wall {result["wall_s"]} s: ' + ', '.join(runs))
    if tokens:
        lines.append('  ' + ', '.join(tokens))
    return '\n'.join(lines)


# ---------------------------------------------------------------------------
# The report: one self-contained HTML page per load
# ---------------------------------------------------------------------------

REPORT_TIMELINE_ROWS = 2000  # runs drawn in the timeline at most (a bounded sample beyond)
REPORT_ERRORS_PER_LAYER = 5  # distinct error messages shown per layer
# One colour per layer, far apart (Kelly's colours of maximum contrast), ok in green.
LAYER_COLOURS = {None: '#008856', 'connect': '#0067a5', 'proxy': '#a1caf1', 'tls': '#875692', 'http': '#e68fac',
                 'transport': '#be0032', 'sse': '#882d17', 'protocol': '#f3c300', 'application': '#f38400',
                 'timeout': '#5e5e5e', 'interrupted': '#222222', 'client': '#c2b280'}
REPORT_WIDTH = 1400     # the drawings' width in px; they shrink to fit a narrower window
MIN_LANE_PX, MAX_LANE_PX = 4, 16  # the height of one lane of the timeline
_REPORT_CSS = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 2em; color: #111; max-width: 1400px; }
h1 { font-size: 1.5em; } h2 { font-size: 1.15em; margin-top: 2em; }
table { border-collapse: collapse; } td, th { padding: 2px 10px; border-bottom: 1px solid #ddd; text-align: left; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
code { font-size: 12px; word-break: break-all; }
svg { display: block; margin: 0.5em 0; width: 100%; height: auto; } svg text { font-size: 11px; fill: #333; }
.key span { display: inline-block; margin-right: 1em; } .key .swatch { width: 10px; height: 10px; margin: 0; }
@media print { body { margin: 0; } h2 { break-after: avoid; } svg { break-inside: avoid; } }
"""


class _Row(typing.NamedTuple):
    """What the report keeps of one run."""

    start: float            # seconds since the epoch
    duration_ms: float
    run: int
    headers_ms: float | None
    first_text_ms: float | None
    error: str              # '' when ok
    layer: str | None


class Report:
    """A load drawn as one static HTML page: summary and settings, a timeline of every run, histograms of
    time to first text and duration (ok runs), first text against start time, and the error messages.
    Built from records alone, like Summary, so a page from merged files equals one from a file holding
    them all; every string the server sent is escaped, and the page has no script and fetches nothing."""

    def __init__(self, summary: Summary) -> None:
        self.summary = summary  # the load's summary, which the caller keeps adding the same records to
        self.rows: list[_Row] = []
        self.errors: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        self.settings: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)

    def add(self, record: dict) -> None:
        self.rows.append(_Row(self.summary.epoch(record['started_at']), record['duration_ms'] or 0.0,
                              record.get('run', 0), record['headers_ms'], record['first_text_ms'],
                              record['error'] or '', record['error_layer']))
        if not record['ok']:
            self.errors[record['error_layer']][record['error']] += 1
        load = record.get('load') or {}
        request = record.get('request') or {}
        for name, value in (('URL', record.get('url')), ('model', record.get('model')),
                            ('API', record.get('api', 'chat')), ('source', record.get('source')),
                            ('prompt SHA-256', request.get('prompt_sha256')),
                            ('expected finish', request.get('expect_finish', 'stop')),
                            ('concurrency', load.get('concurrency')), ('rate (runs/s)', load.get('rate')),
                            ('arrivals', load.get('arrivals')),
                            ('client', (record.get('client') or {}).get('version'))):
            self.settings[name][value] += 1

    def html(self) -> str:
        result = self.summary.result()
        rows = sorted(self.rows, key=lambda row: (row.start, row.run, row.duration_ms, row.error))
        parts = ['<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">',
                 f'<title>stream-client report: {result["ok"]} of {_count(result["runs"], "run")} ok</title>',
                 f'<style>{_REPORT_CSS}</style></head><body>',
                 f'<h1>{result["ok"]} of {_count(result["runs"], "run")} ok{_e(_unplanned(result))}</h1>',
                 self._summary_section(result), self._timeline(rows), self._histograms(result),
                 self._scatter(rows), self._errors_section(), '</body></html>\n']
        return '\n'.join(parts)

    def _summary_section(self, result: dict) -> str:
        cells = [('runs planned', result['planned_runs']), ('runs', result['runs']), ('ok', result['ok']),
                 ('not ok', result['not_ok'])]
        cells += [(f'not ok: {layer}', count) for layer, count in result['not_ok_by_layer'].items()]
        cells += [(f'  {kind}', count) for kind, count in list(result['not_ok_by_kind'].items())[:10]]
        out = ['<h2>Summary</h2><table>'] + [f'<tr><th>{_e(name)}</th><td class="n">{value}</td></tr>'
                                           for name, value in cells]
        out.append('</table><table><tr><th>over ok runs (' + str(result['latency_excludes']) + ' not ok excluded)'
                   '</th><th>p50</th><th>p90</th><th>p99</th><th>max</th></tr>')
        for field in LATENCY_FIELDS:
            values = result['latency_ms'][field]
            out.append(f'<tr><td>{field}</td>' + ''.join(
                f'<td class="n">{values[key]:.1f}</td>' if values else '<td class="n">-</td>'
                for key in ('p50', 'p90', 'p99', 'max')) + '</tr>')
        out.append(f'</table><p>Wall time {result["wall_s"]} s: {result["runs_per_s"]} runs/s, '
                   f'{result["ok_runs_per_s"]} ok runs/s.</p>')
        out.append('<h2>Settings</h2><table>')
        for name, values in self.settings.items():
            if set(values) == {None}:
                continue  # a setting these runs did not use (a rate in a closed loop, say)
            shown = sorted(values.items(), key=lambda item: (-item[1], str(item[0])))
            text = ', '.join(f'{_e(str(value))} ({count})' if len(shown) > 1 else _e(str(value))
                             for value, count in shown[:5]) + (f', and {len(shown) - 5} more' if len(shown) > 5 else '')
            out.append(f'<tr><th>{_e(name)}</th><td><code>{text}</code></td></tr>')
        return '\n'.join(out) + '</table>'

    def _timeline(self, rows: list[_Row]) -> str:
        if not rows:
            return '<h2>Timeline</h2><p>No runs.</p>'
        shown = rows if len(rows) <= REPORT_TIMELINE_ROWS else \
            [rows[i * len(rows) // REPORT_TIMELINE_ROWS] for i in range(REPORT_TIMELINE_ROWS)]
        lanes = _lanes(shown)
        origin = rows[0].start
        span = max(row.start - origin + row.duration_ms / 1000 for row in rows) or 1.0
        height = max(MIN_LANE_PX, min(MAX_LANE_PX, 600 // (max(lanes) + 1)))
        width, left = REPORT_WIDTH, 40
        scale = (width - left - 10) / span
        bottom = (max(lanes) + 1) * height
        out = ['<h2>Timeline</h2>', f'<p>One bar per run, from its start to its end, in lanes: a run takes the '
               f'first lane free when it starts, so there are as many lanes as runs were in flight at most '
               f'({max(lanes) + 1}). A tick at the response head, a dot at the first text; {_legend()}'
               + (f' A sample of {len(shown)} of the {len(rows)} runs, evenly spaced in start order.'
                  if len(shown) < len(rows) else '') + '</p>',
               f'<svg viewBox="0 0 {width} {bottom + 20}" width="{width}" height="{bottom + 20}" role="img" '
               f'aria-label="timeline">', _axis(left, width - 10, bottom, 0, span, 's')]
        for row, lane in zip(shown, lanes):
            x, y = left + (row.start - origin) * scale, lane * height
            title = f'run {row.run}: ' + (f'NOT OK {row.error}' if row.error else 'ok') + f', {row.duration_ms:.0f} ms'
            marks = ''
            if row.headers_ms is not None:
                marks += (f'<rect x="{x + row.headers_ms / 1000 * scale:.1f}" y="{y}" width="1.5" height="{height - 1}" '
                          f'fill="#000"/>')
            if row.first_text_ms is not None:
                marks += (f'<circle cx="{x + row.first_text_ms / 1000 * scale:.1f}" cy="{y + (height - 1) / 2}" '
                          f'r="{max(1, (height - 1) / 2)}" fill="#fff" stroke="#000" stroke-width="0.5"/>')
            out.append(f'<g class="run"><title>{_e(title)}</title><rect x="{x:.1f}" y="{y}" '
                       f'width="{max(1.0, row.duration_ms / 1000 * scale):.1f}" height="{height - 1}" '
                       f'fill="{LAYER_COLOURS.get(row.layer, "#000")}"/>{marks}</g>')
        return '\n'.join(out) + '</svg>'

    def _histograms(self, result: dict) -> str:
        out = [f'<h2>Distributions over ok runs</h2><p>{_count(result["latency_runs"], "ok run")}; '
               f'{_count(result["latency_excludes"], "run")} not ok, excluded.</p>']
        for field in ('first_text_ms', 'duration_ms'):
            out.append(f'<p>{field}</p>' + _histogram([value for value in self.summary.latency[field]]))
        return '\n'.join(out)

    def _scatter(self, rows: list[_Row]) -> str:
        points = [(row.start, row.first_text_ms) for row in rows if not row.error and row.first_text_ms is not None]
        out = ['<h2>Time to first text against start time</h2>',
               '<p>Each dot an ok run: drift upwards means first text slows as the load goes on.</p>']
        if not points:
            return '\n'.join(out + ['<p>No ok runs.</p>'])
        origin, width, height, left = rows[0].start, REPORT_WIDTH, 260, 70
        span = max(start - origin for start, _ in points) or 1.0
        low, top = min(value for _, value in points), max(value for _, value in points)
        room = (top - low) or 1.0
        out.append(f'<svg viewBox="0 0 {width} {height + 30}" width="{width}" height="{height + 30}" role="img" '
                   f'aria-label="first text against start">'
                   f'<line x1="{left}" y1="0" x2="{left}" y2="{height + 5}" stroke="#999"/>'
                   f'<text x="{left - 4}" y="10" text-anchor="end">{top:.1f} ms</text>'
                   f'<text x="{left - 4}" y="{height}" text-anchor="end">{low:.1f} ms</text>'
                   + _axis(left + 3, width - 5, height + 5, 0, span, 's'))
        out += [f'<circle cx="{left + 3 + (start - origin) / span * (width - left - 8):.1f}" '
                f'cy="{height - (value - low) / room * (height - 8):.1f}" r="2" fill="{LAYER_COLOURS[None]}"/>'
                for start, value in points]
        return '\n'.join(out) + '</svg>'

    def _errors_section(self) -> str:
        out = ['<h2>Errors</h2>']
        if not self.errors:
            return '\n'.join(out + ['<p>None: every run was ok.</p>'])
        for layer in sorted(self.errors):
            counts = sorted(self.errors[layer].items(), key=lambda item: (-item[1], item[0]))
            out.append(f'<h3>{_e(layer)}: {_count(sum(self.errors[layer].values()), "run")}, '
                       f'{_count(len(counts), "distinct message")}</h3><table>')
            out += [f'<tr><td class="n">{count}</td><td><code>{_e(message)}</code></td></tr>'
                    for message, count in counts[:REPORT_ERRORS_PER_LAYER]]
            out.append('</table>')
        return '\n'.join(out)


def _e(text: str) -> str:
    return html.escape(text, quote=True)


def _legend() -> str:
    return '<span class="key">' + ''.join(f'<span><span class="swatch" style="background:{colour}"></span> '
                                          f'{layer or "ok"}</span>' for layer, colour in LAYER_COLOURS.items()) + '</span>'


def _lanes(rows: list[_Row]) -> list[int]:
    """The timeline lane of each run (rows in start order): the first lane whose last run has ended."""
    ends: list[float] = []  # when each lane's last run ends
    lanes = []
    for row in rows:
        lane = next((i for i, end in enumerate(ends) if end <= row.start), len(ends))
        if lane == len(ends):
            ends.append(0.0)
        ends[lane] = row.start + row.duration_ms / 1000
        lanes.append(lane)
    return lanes


def _ticks(low: float, high: float, most: int = 8) -> list[float]:
    """Round values from low to high for an axis: steps of 1, 2 or 5 times a power of ten, at most ``most``."""
    room = high - low
    if room <= 0:
        return [low]
    step = 10 ** math.floor(math.log10(room / most))
    step = next(step * factor for factor in (1, 2, 5, 10) if room / (step * factor) <= most)
    first = math.ceil(low / step) * step
    return [first + i * step for i in range(int((high - first) / step + 1e-9) + 1)]


def _axis(x0: float, x1: float, y: float, low: float, high: float, unit: str) -> str:
    """A horizontal axis from x0 (low) to x1 (high) at height y, with a labelled tick at each round value."""
    scale = (x1 - x0) / ((high - low) or 1.0)
    ticks = _ticks(low, high)
    decimals = max(0, -math.floor(math.log10(ticks[1] - ticks[0]))) if len(ticks) > 1 else 1
    out = [f'<line x1="{x0}" y1="{y}" x2="{x1}" y2="{y}" stroke="#999"/>']
    for tick in ticks:
        x = x0 + (tick - low) * scale
        out.append(f'<line x1="{x:.1f}" y1="{y}" x2="{x:.1f}" y2="{y + 4}" stroke="#999"/>'
                   f'<text x="{x:.1f}" y="{y + 15}" text-anchor="middle">{tick:.{decimals}f} {unit}</text>')
    return ''.join(out)


def _histogram(values: list[float], bins: int = 40) -> str:
    """An SVG histogram of values (ms), its axis labelled at round values."""
    if not values:
        return '<p>No ok runs.</p>'
    low, high = min(values), max(values)
    width_ms = (high - low) / bins or 1.0
    counts = [0] * bins
    for value in values:
        counts[min(bins - 1, int((value - low) / width_ms))] += 1
    tallest, width, height, left = max(counts), REPORT_WIDTH, 120, 60
    bar = (width - left - 10) / bins
    out = [f'<svg viewBox="0 0 {width} {height + 22}" width="{width}" height="{height + 22}" role="img" '
           f'aria-label="histogram">', f'<text x="{left - 4}" y="10" text-anchor="end">{tallest} runs</text>',
           _axis(left, left + bins * bar, height + 2, low, low + bins * width_ms, 'ms')]
    out += [f'<rect x="{left + i * bar:.1f}" y="{height - count / tallest * height:.1f}" width="{bar - 1:.1f}" '
            f'height="{count / tallest * height:.1f}" fill="{LAYER_COLOURS[None]}"><title>{_count(count, "run")} '
            f'from {low + i * width_ms:.1f} ms</title></rect>' for i, count in enumerate(counts) if count]
    return '\n'.join(out) + '</svg>'


# ---------------------------------------------------------------------------
# Evidence files: each created once and never overwritten, and read back
# ---------------------------------------------------------------------------

def reserve_output(path: str) -> int:
    """Create the evidence file exclusively (mode 0600) before anything is sent."""
    if not path:
        raise UsageError("cannot create '': the file name is empty")
    try:
        return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise UsageError(f'{path!r} already exists; evidence is never overwritten, choose a new file name') \
            from None
    except FileNotFoundError:
        raise UsageError(f'cannot create {path!r}: its directory does not exist') from None
    except OSError as exc:
        raise UsageError(f'cannot create {path!r}: {exc.strerror or exc}') from None


def write_record(fd: int, record: dict) -> None:
    with os.fdopen(fd, 'w', encoding='utf-8') as output:
        json.dump(record, output, indent=2, ensure_ascii=False)
        output.write('\n')


def save_capture(fd: int, path: str, capture: Capture, secrets: tuple[str, ...]) -> str | None:
    """Write the raw response to its reserved file and return the path; when nothing at all arrived,
    remove the empty file instead (so that the name is free again) and return None.

    The API key and proxy credentials are masked by asterisks of the same length, so the framing stays valid.
    """
    data = bytes(capture.data)
    if not data:
        os.close(fd)
        os.unlink(path)
        return None
    for secret in secrets:
        data = data.replace(secret.encode(), b'*' * len(secret.encode()))
    with os.fdopen(fd, 'wb') as output:
        output.write(data)
    return path


def write_report(fd: int, report: Report) -> None:
    with os.fdopen(fd, 'w', encoding='utf-8') as output:
        output.write(report.html())


def _is_record(value: object) -> bool:
    return isinstance(value, dict) and 'ok' in value and 'started_at' in value


def load_records(paths: list[str], mixed_sources: bool = False) -> list[dict]:
    """Saved evidence records, one per file; UsageError when one cannot be read, or when records of
    different sources mix and mixed_sources is not set."""
    records = []
    for path in paths:
        reading = iter_records(path)
        found = list(itertools.islice(reading, 2))
        reading.close()
        if len(found) != 1:
            raise UsageError(f'{path} holds the records of a load, one per line: --compare takes files of one '
                             f'record each; use --summary {path} to read a load' if found
                             else f'{path} holds no record')
        records.append(found[0])
    check_sources({record.get('source', 'endpoint') for record in records}, mixed_sources, 'compare')
    return records


def check_sources(sources: set, mixed_sources: bool, verb: str) -> None:
    """UsageError when records of different sources would mix (fixture and replay timings are synthetic)."""
    if len(sources) > 1 and not mixed_sources:
        raise UsageError(f'refusing to {verb} records of different sources ({", ".join(sorted(sources))}): fixture '
                         'and replay timings say nothing about a live model; add --mixed-sources to do it anyway')


def iter_records(path: str):
    """The records of a saved evidence file: a JSON Lines file of a load, or one pretty-printed record.
    UsageError names the line that is not a record."""
    try:
        with open(path, encoding='utf-8') as file:
            first = file.readline()
            if first.strip() == '{':  # one record, as a single run writes it
                value = json.loads(first + file.read())
                if not _is_record(value):
                    raise UsageError(f'{path} is not an evidence record')
                yield value
                return
            for number, line in enumerate(itertools.chain([first], file), 1):
                if not line.strip():
                    continue
                try:
                    value = json.loads(line)
                except ValueError:
                    value = None
                if not _is_record(value):
                    raise UsageError(f'{path} line {number} is not an evidence record')
                yield value
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f'cannot read {path}: {getattr(exc, "strerror", None) or exc}') from None
    except ValueError as exc:
        raise UsageError(f'{path} is not an evidence record: {exc}') from None


def summarize(paths: list[str], mixed_sources: bool = False, report: bool = False) -> tuple[Summary, Report | None]:
    """The summary (and, if asked, the report) of the records in saved evidence files; UsageError for
    unreadable files or mixed sources."""
    summary = Summary()
    drawing = Report(summary) if report else None
    for path in paths:
        for record in iter_records(path):
            summary.add(record)
            if drawing is not None:
                drawing.add(record)
    check_sources(summary.seen['sources'], mixed_sources, 'summarize')
    return summary, drawing


# ---------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------

SIGNAL_EXIT = {'SIGINT': 130, 'SIGTERM': 143}


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line on stderr and exit status 2."""

    def error(self, message: str):
        self.exit(2, f'{self.prog}: error: {message}\n')


FIXTURE_FILE = 'fixture_server.py'
FIXTURE_PROFILES = ('guide', 'vllm')  # fixture_server.PROFILES, named here so that --help needs no fixture


def _fixture_server():
    """The fixture module, for --fixture: fixture_server.py beside this file, loaded only then, so that
    this file copied alone runs everything else. UsageError if it is not there."""
    loaded = sys.modules.get('fixture_server')
    if loaded is not None:
        return loaded
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), FIXTURE_FILE)
    if not os.path.isfile(path):
        raise UsageError(f'--fixture needs {FIXTURE_FILE} beside {os.path.basename(__file__)} (in '
                         f'{os.path.dirname(path)}); copy it there, or point --url at a server')
    spec = importlib.util.spec_from_file_location('fixture_server', path)
    module = importlib.util.module_from_spec(spec)
    sys.modules['fixture_server'] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules['fixture_server']
        raise
    return module


def _fixture_mode(fixture, mode: str) -> str:
    """mode, if the fixture has it; else UsageError with the closest modes."""
    if mode in fixture.CHOICES:
        return mode
    close = difflib.get_close_matches(mode, fixture.CHOICES, n=3)
    hint = f'did you mean {" or ".join(close)}? ' if close else ''
    raise UsageError(f'--fixture has no mode {mode!r}; {hint}python3 {FIXTURE_FILE} --help lists its '
                     f'{len(fixture.CHOICES)} modes')


def _program_name(module: str) -> str | None:
    """How the program was started, when argparse's default (the script's file name) would be wrong:
    ``python3 -m MODULE``. None otherwise."""
    spec = getattr(sys.modules.get('__main__'), '__spec__', None)
    if spec is not None and spec.name == module:
        return f'{os.path.basename(sys.executable)} -m {module}'
    return None


def _parser() -> OneLineParser:
    parser = OneLineParser(
        prog=_program_name('stream_client'), allow_abbrev=False,
        description='Stream answers from vLLM or another compatible server (chat completions, completions, the '
                    'Responses API or the Anthropic Messages API) and save evidence of whether each really finished: one run, or many at '
                    'once with a summary built from their verdicts. Exit status: 0 every run ok, 1 a run not ok, '
                    '2 bad arguments or output path, 130/143 interrupted.',
        epilog='The API key is read from MODEL_API_KEY and sent as a Bearer token; it is never saved or printed.')
    send = parser.add_argument_group('what to send')
    send.add_argument('--url', help=f'the endpoint (default {DEFAULT_URL}); a path ending in '
                                    f'{", ".join(API_PATHS)} chooses the API')
    send.add_argument('--api', choices=list(VALIDATORS),
                      help='the API, for a server mounted at another path (default: from the URL path)')
    send.add_argument('--model', help='model name to request (default with --fixture: synthetic-fixture)')
    send.add_argument('--prompt', help=f'user message (default: {DEFAULT_PROMPT!r})')
    send.add_argument('--prompt-file', metavar='PATH', help='read the user message from a file, or - for stdin')
    send.add_argument('--system', metavar='TEXT', help='a system message before the user message')
    send.add_argument('--max-tokens', type=int, default=128, metavar='N',
                      help='output budget: max_tokens, or max_output_tokens for the Responses API (default 128)')
    send.add_argument('--temperature', type=float, default=0.0, metavar='T', help='sampling temperature (default 0)')
    send.add_argument('--stop', action='append', metavar='TEXT', help='a stop string (repeatable)')
    send.add_argument('--extra', metavar='JSON',
                      help='a JSON object merged into the request body, e.g. \'{"min_tokens": 3}\'; '
                           'it may not set model, stream, n or a key that has its own flag')
    send.add_argument('--tools', metavar='FILE',
                      help='a JSON array of tools in the chat-completions shape ({"type": "function", "function": '
                           '{"name", "description", "parameters"}}); the answer may then be tool calls, whose '
                           'arguments must be one JSON object matching their parameters. Not for completions')
    send.add_argument('--tool-choice', metavar='CHOICE',
                      help='auto (default with --tools), required, none, or the NAME of one tool to force')
    send.add_argument('--json-schema', metavar='FILE',
                      help='ask for a JSON answer matching this JSON Schema; a finished answer parses and matches')
    send.add_argument('--expect-finish', choices=FINISHES, default='stop',
                      help='the finish of a finished answer: stop (default), or length for a fixed-length load '
                           '(with "ignore_eos" in --extra), where the usage must also count --max-tokens tokens')
    send.add_argument('--idle', type=float, default=10.0, metavar='S',
                      help='seconds to wait for the next bytes (default 10)')
    send.add_argument('--deadline', type=float, default=60.0, metavar='S',
                      help='seconds one run may take (default 60)')
    send.add_argument('--ca-file', metavar='PEM', help='extra trusted CA certificates for https')
    send.add_argument('--no-proxy', action='store_true',
                      help='ignore HTTPS_PROXY, HTTP_PROXY and NO_PROXY: connect directly')
    load = parser.add_argument_group('many runs')
    load.add_argument('--runs', type=int, default=1, metavar='N', help='how many runs (default 1)')
    load.add_argument('--concurrency', type=int, metavar='C',
                      help='at most C runs in flight (default 1; under --rate, up to '
                           f'{MAX_OPEN_LOOP_IN_FLIGHT})')
    load.add_argument('--rate', type=float, metavar='R',
                      help='start R runs per second whatever is in flight (an open loop; default: a closed loop)')
    load.add_argument('--arrivals', choices=ARRIVALS, default='poisson',
                      help='how --rate spaces the starts (default poisson, seeded by --seed)')
    load.add_argument('--seed', type=int, default=0, help='seed of the arrivals and of --fixture mixed (default 0)')
    load.add_argument('--keep-alive', action='store_true',
                      help='each worker sends its next run on its kept connection while the responses allow it '
                           '(needs --runs of 2 or more); a kept connection closed while idle is a failure counted '
                           'as stale_connection_failures')
    load.add_argument('--prompts', metavar='FILE',
                      help='JSON Lines of prompts, each a string or {"prompt", "system", "max_tokens"}; '
                           'the runs cycle through them')
    out = parser.add_argument_group('where the evidence goes')
    out.add_argument('--output', metavar='FILE',
                     help='new file for the evidence (required): one JSON record, or with many runs one record '
                          'per line; an existing file is never overwritten')
    out.add_argument('--capture', metavar='FILE',
                     help='new file for the raw response of one run (status line, headers, body bytes as '
                          'received), for --replay in fixture_server.py and bug reports')
    out.add_argument('--report', metavar='FILE',
                     help='new file for an HTML page of the load (with --runs, or from --summary files): summary, '
                          'settings, a timeline of every run, distributions, errors; static, no script')
    out.add_argument('--quiet', action='store_true',
                     help='nothing on stderr: no live text, verdict, progress or table (stdout keeps its JSON line)')
    fix = parser.add_argument_group('the built-in fixture')
    fix.add_argument('--fixture', metavar='MODE',
                     help=f'stream from the synthetic fixture ({FIXTURE_FILE}, beside this file), run in this '
                          'process on a free loopback port. MODE is one of its modes: ok, broken, truncated, '
                          f'stall... (python3 {FIXTURE_FILE} --help lists them). Slow on purpose: stall and '
                          'held-open last until --idle, drip until --deadline. mixed gives each run a mode from '
                          'a seeded schedule, for a demo of --runs')
    fix.add_argument('--fixture-profile', choices=FIXTURE_PROFILES, default='guide',
                     help="the bytes --fixture speaks: the guide's fixture or vLLM 0.32's (default guide)")
    read = parser.add_argument_group('reading saved evidence (nothing is sent)')
    read.add_argument('--compare', nargs='+', metavar='RECORD', help='print saved records side by side')
    read.add_argument('--summary', nargs='+', metavar='FILE',
                      help='the summary of saved runs (JSON Lines or single records), as a load prints it')
    read.add_argument('--mixed-sources', action='store_true',
                      help='let --compare and --summary mix records from the fixture, a replay and an endpoint')
    parser.add_argument('--version', action='version', version=f'%(prog)s {__version__}')
    return parser


def _requests_from_args(args, url: str) -> list[PreparedRequest]:
    """The requests the command line asks for, sent to url (the fixture's, with --fixture): one,
    or one per line of --prompts."""
    model = args.model or ('synthetic-fixture' if args.fixture is not None else None)
    if model is None:
        raise UsageError('--model is required (unless --fixture is used)')
    if args.prompts is None:
        prompts = [{'prompt': _prompt(args), 'system': args.system, 'max_tokens': args.max_tokens}]
    elif args.prompt is not None or args.prompt_file is not None:
        raise UsageError('--prompts replaces --prompt and --prompt-file; give only one of them')
    else:
        prompts = load_prompts(args.prompts, args.system, args.max_tokens)
    extra = _extra(args)
    tools, json_schema = _answer_files(args)
    if args.tool_choice is not None and tools is None:
        raise UsageError('--tool-choice needs --tools')
    return [prepare(url, model, line['prompt'], max_tokens=line['max_tokens'], idle=args.idle,
                    deadline=args.deadline, ca_file=args.ca_file, token=os.environ.get('MODEL_API_KEY'),
                    system=line['system'], temperature=args.temperature, stop=args.stop, extra=extra,
                    api=args.api, expect_finish=args.expect_finish,
                    source='endpoint' if args.fixture is None else 'fixture', tools=tools,
                    tool_choice=args.tool_choice, json_schema=json_schema, trust_env=not args.no_proxy)
            for line in prompts]


def _answer_files(args) -> tuple[list | None, dict | None]:
    """The --tools and --json-schema files, read; with a --fixture mode that needs them and none
    given, the fixture's own (its get_weather tool, its city schema)."""
    fixture = _fixture_server() if args.fixture is not None else None
    tools = _json_file(args.tools, '--tools') if args.tools is not None else \
        fixture.TOOLS if fixture and args.fixture in fixture.TOOL_MODES else None
    schema = _json_file(args.json_schema, '--json-schema') if args.json_schema is not None else \
        fixture.JSON_SCHEMA if fixture and args.fixture in fixture.JSON_MODES else None
    return tools, schema


def _json_file(path: str, flag: str) -> object:
    try:
        with open(path, encoding='utf-8') as file:
            return json.load(file)
    except OSError as exc:
        raise UsageError(f'cannot read {flag} {path!r}: {exc.strerror or exc}') from None
    except (ValueError, RecursionError) as exc:
        raise UsageError(f'{flag} {path!r} is not JSON: {exc}') from None


def load_prompts(path: str, system: str | None, max_tokens: int) -> list[dict]:
    """The lines of a --prompts file: each a JSON string (the prompt) or an object with "prompt" and
    optionally "system" and "max_tokens" (which override the flags). UsageError names a bad line."""
    try:
        with open(path, encoding='utf-8') as file:
            lines = file.read().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f'cannot read --prompts {path}: {getattr(exc, "strerror", None) or exc}') from None
    prompts = []
    for number, line in enumerate(lines, 1):
        try:
            value = json.loads(line)
        except (ValueError, RecursionError):
            raise UsageError(f'--prompts {path} line {number}: not JSON') from None
        if isinstance(value, str):
            value = {'prompt': value}
        problem = _prompt_line_problem(value)
        if problem:
            raise UsageError(f'--prompts {path} line {number}: {problem}')
        prompts.append({'prompt': value['prompt'], 'system': value.get('system', system),
                        'max_tokens': value.get('max_tokens', max_tokens)})
    if not prompts:
        raise UsageError(f'--prompts {path} has no lines')
    return prompts


def _prompt_line_problem(value: object) -> str | None:
    if not isinstance(value, dict) or not isinstance(value.get('prompt'), str):
        return 'expected a JSON string, or an object with a string "prompt"'
    unknown = sorted(set(value) - {'prompt', 'system', 'max_tokens'})
    if unknown:
        return f'unknown keys {", ".join(unknown)}; a line may have prompt, system and max_tokens'
    if 'system' in value and not isinstance(value['system'], str):
        return '"system" must be a string'
    tokens = value.get('max_tokens', 1)
    if isinstance(tokens, bool) or not isinstance(tokens, int) or not 1 <= tokens <= 32768:
        return f'"max_tokens" must be an integer from 1 to 32768, got {tokens!r}'
    return None


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
    try:
        return json.loads(args.extra)
    except (ValueError, RecursionError) as exc:
        raise UsageError(f'--extra is not valid JSON: {exc}') from None


def _terminate(signum, frame):
    raise Interrupted('SIGTERM')


class _Fixture:
    """The synthetic fixture, served from this process on a free loopback port, for --fixture MODE."""

    def __init__(self, mode: str, profile: str, api: str, seed: int) -> None:
        fixture = _fixture_server()
        mode = _fixture_mode(fixture, mode)
        if mode != fixture.MIXED and not fixture.applies(mode, api):
            raise UsageError(f'fixture mode {mode} applies to {" and ".join(fixture.ONLY_ON[mode])} only; '
                             f'add --api {fixture.ONLY_ON[mode][0]}')
        self.instance = fixture.server(0, mode, profile=profile, seed=seed)
        path = next(path for path, name in API_PATHS.items() if name == api)
        self.url = f'http://127.0.0.1:{self.instance.server_port}{path}'
        threading.Thread(target=self.instance.serve_forever, args=(0.05,), daemon=True).start()

    def close(self) -> None:
        self.instance.shutdown()
        self.instance.server_close()


class LiveView:
    """What stderr shows during a run: on a terminal the answer as it arrives
    (reasoning dimmed), then a one-line verdict; elsewhere only a failure."""

    DIM, RESET = '\x1b[2m', '\x1b[0m'
    WAIT_NOTICE_S = 3.0  # seconds without anything to show before a run says what it is waiting for

    def __init__(self, out, quiet: bool) -> None:
        self.out = out
        self.quiet = quiet
        self.live = not quiet and out.isatty()
        self.color = self.live and 'NO_COLOR' not in os.environ
        self.showing = None  # 'reasoning' or 'text' once something was written
        self._lock = threading.Lock()  # the wait notice is written from a timer's thread
        self._timer: threading.Timer | None = None

    def _write(self, text: str) -> None:
        with self._lock:
            self.out.write(text)
            self.out.flush()

    def start_waiting(self, request: PreparedRequest) -> None:
        """On a terminal: if nothing has been shown after WAIT_NOTICE_S, say what the run waits for."""
        if self.live:
            self._timer = threading.Timer(self.WAIT_NOTICE_S, self.wait_notice, (request,))
            self._timer.daemon = True
            self._timer.start()

    def wait_notice(self, request: PreparedRequest) -> None:
        with self._lock:
            if self.showing is None:
                self.out.write(f'waiting {self.WAIT_NOTICE_S:g} s so far for the answer from {request.address}; '
                               f'the run ends after --idle {request.idle:g} s without a byte or at --deadline '
                               f'{request.deadline:g} s; Ctrl+C stops it and keeps the record\n')
                self.out.flush()

    def stop_waiting(self) -> None:
        if self._timer is not None:
            self._timer.cancel()

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

    def call(self, piece: str) -> None:
        """A piece of a tool call: 'get_weather(' as it opens, then its arguments as they arrive."""
        if self.showing and self.showing != 'call':
            self._write('\n')
        self.showing = 'call'
        self._write(piece)

    def verdict(self, record: dict) -> None:
        self.stop_waiting()
        if self.quiet or (record['ok'] and not self.live):
            return
        if self.showing == 'call':
            self._write(')')
        if self.showing:
            self._write('\n')
        self._write(verdict_line(record) + '\n')


def verdict_line(record: dict) -> str:
    """The run at a glance: 'ok: 2 content events, ...' or 'NOT OK [layer]: what went wrong'."""
    if record['ok']:
        return (f'ok: {_count(record["content_events"], "content event")}, first text {record["first_text_ms"]:.0f} ms, '
                f'done {record["duration_ms"]:.0f} ms')
    layer = record['error_layer']
    return f'NOT OK [{layer}]: {record["error"].removeprefix(layer + ": ")}'


COMPARE_COLUMNS = (('file', None), ('source', 'source'), ('model', 'model'), ('ok', 'ok'),
                   ('layer', 'error_layer'), ('headers ms', 'headers_ms'), ('1st event ms', 'first_event_ms'),
                   ('1st text ms', 'first_text_ms'), ('duration ms', 'duration_ms'),
                   ('events', 'content_events'), ('tokens', 'completion_tokens'), ('text reads', 'content_reads'),
                   ('buffered', 'buffered_delivery'))


def compare_table(paths: list[str], records: list[dict]) -> str:
    """One line per field and one column per record, so that a few records fit a terminal."""
    rows = [[name] + [os.path.basename(path) if key is None else _cell(record.get(key))
                      for path, record in zip(paths, records)] for name, key in COMPARE_COLUMNS]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return '\n'.join('  '.join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows)


def settings_differ(records: list[dict]) -> list[str]:
    """The request settings (every key of the record's request, and the model) that differ between records."""
    keys = sorted({key for record in records for key in (record.get('request') or {})})
    differ = [key.removesuffix('_sha256') for key in keys
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
    """Create the output (and capture) file before anything is sent; undo the first if the second fails.

    From here until the record is written, SIGINT and SIGTERM are ignored, so that a reserved file
    can never be left empty."""
    if args.capture is not None and os.path.abspath(args.capture) == os.path.abspath(args.output):
        raise UsageError('--capture and --output must be different files')
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_IGN)
    fd = reserve_output(args.output)
    if args.capture is None:
        return fd, None
    try:
        return fd, reserve_output(args.capture)
    except UsageError:
        os.close(fd)
        os.unlink(args.output)
        raise


def _run_command(args, request: PreparedRequest, fd: int, capture_fd: int | None) -> tuple[dict, int]:
    """Run once and write the record (and capture) whatever happens; return the record and exit status.

    SIGINT and SIGTERM are ignored by the caller from before the output is
    reserved; they are handled again only inside the block that always writes it.
    """
    view = LiveView(sys.stderr, args.quiet)
    on_text, on_reasoning, on_call = (view.text, view.reasoning, view.call) if view.live else (None, None, None)
    record, status = None, 1
    capture = Capture() if capture_fd is not None else None
    try:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, _terminate)
        view.start_waiting(request)
        record = run(request, on_text=on_text, on_reasoning=on_reasoning, on_call=on_call, capture=capture)
        status = 0 if record['ok'] else 1
    except Interrupted as exc:
        record = exc.record or failed_record(request, _interrupted_before_sending(exc.signal_name))
        status = SIGNAL_EXIT[exc.signal_name]
    except KeyboardInterrupt:
        record, status = failed_record(request, _interrupted_before_sending('SIGINT')), 130
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if record is None:  # a bug in this client: still leave a valid record, then show the traceback
            record = failed_record(request, StreamError('client', 'the client failed before finishing its record'))
        if capture_fd is not None:
            kept = save_capture(capture_fd, args.capture, capture, request.secrets())
            record = {**record, 'capture': {**(record['capture'] or {'bytes': 0, 'truncated': False}), 'file': kept}}
        write_record(fd, record)
    _after_signals(status in SIGNAL_EXIT.values())  # the evidence is safe on disk now
    view.verdict(record)
    return record, status


def _after_signals(interrupted: bool) -> None:
    """Once the evidence is on disk: back to the default signal handling, unless a signal already
    interrupted the work, in which case further ones are ignored until the process has said its last."""
    if interrupted:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    else:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def emit(text: str) -> None:
    """Print to stdout; if its reader has gone (a closed pipe), drop the rest quietly: the evidence is on disk."""
    try:
        print(text, flush=True)
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so that the exit's flush cannot fail


def _interrupted_before_sending(signal_name: str) -> StreamError:
    return StreamError('interrupted', f'{signal_name} before the request was sent')


def _compare(args, prog: str) -> int:
    records = load_records(args.compare, args.mixed_sources)
    differ = settings_differ(records)
    if differ:
        print(f'{prog}: warning: the records differ in {", ".join(differ)}; compare only '
              'runs made with the same request settings and model', file=sys.stderr)
    emit(compare_table(args.compare, records))
    return 0


def _summary_command(args, prog: str) -> int:
    report_fd = reserve_output(args.report) if args.report else None
    try:
        summary, report = summarize(args.summary, args.mixed_sources, report=report_fd is not None)
    except UsageError:
        if report_fd is not None:  # nothing to draw: free the name again
            os.close(report_fd)
            os.unlink(args.report)
        raise
    result = summary.result()
    if report_fd is not None:
        write_report(report_fd, report)
    person = not args.quiet and sys.stderr.isatty()
    if person:
        print(summary_table(result), file=sys.stderr)
    _emit_summary(result, person, None)
    _say_written(args)
    return 0 if result['runs'] and result['ok'] == result['runs'] else 1


def _emit_summary(result: dict, person: bool, files: list[str] | None) -> None:
    """The summary's JSON line on stdout, unless stdout and stderr are both a terminal where a person
    reads the table instead (the line wraps to a screenful): then a line that says how to get it (from
    the load's files, when they are not being read already)."""
    if person and sys.stdout.isatty():
        later = f'; or run --summary {" ".join(files)}' if files else ''
        print(f'(the JSON summary goes to stdout when it is redirected{later})', file=sys.stderr)
    else:
        emit(json.dumps(result, ensure_ascii=False))


def _say_written(args) -> None:
    """Where the report went, unless --quiet."""
    if args.report is not None and not args.quiet:
        print(f'report written to {args.report}', file=sys.stderr)


def _load_settings(args) -> LoadSettings | None:
    """The load the command line asks for, or None for a single run as before (--runs 1, no load flags)."""
    if args.keep_alive and args.runs < 2:
        raise UsageError('--keep-alive needs --runs of 2 or more: one run uses one connection')
    if args.runs == 1 and args.concurrency is None and args.rate is None and args.prompts is None:
        return None
    if args.capture is not None:
        raise UsageError('--capture keeps the raw bytes of one run; it does not go with --runs, --concurrency, '
                         '--rate or --prompts')
    return LoadSettings(args.runs, args.concurrency, args.rate, args.arrivals, args.seed, args.keep_alive)


def _reserve_report(args, output_fd: int) -> int | None:
    """Create the --report file beside the reserved output; if that fails, undo the output too."""
    if args.report is None:
        return None
    if os.path.abspath(args.report) == os.path.abspath(args.output):
        error: UsageError | None = UsageError('--report and --output must be different files')
    else:
        try:
            return reserve_output(args.report)
        except UsageError as exc:
            error = exc
    os.close(output_fd)
    os.unlink(args.output)
    raise error


class LoadView:
    """What stderr shows during a load: on a terminal one status line updated in place, then the summary
    table; elsewhere one line per run that is not ok. --quiet shows nothing."""

    def __init__(self, out, quiet: bool, runs: int) -> None:
        self.out, self.quiet, self.runs = out, quiet, runs
        self.live = not quiet and out.isatty()
        self.started = time.monotonic()
        self.shown = 0.0

    def record(self, record: dict, summary: Summary) -> None:
        """Called for each record as its run ends (one call at a time)."""
        if self.live:
            now = time.monotonic()
            if now - self.shown >= 0.1 or summary.runs == self.runs:
                self.shown = now
                p50 = summary.p50_first_text()
                self.out.write(f'\r\x1b[Kruns {summary.runs}/{self.runs}  ok {summary.ok}  '
                               f'not ok {summary.runs - summary.ok}  {now - self.started:.1f} s  p50 first text '
                               + ('-' if p50 is None else f'{p50:.0f} ms'))
                self.out.flush()
        elif not self.quiet and not record['ok']:
            self.out.write(f'run {record["run"]}: {verdict_line(record)}\n')
            self.out.flush()

    def clear(self) -> None:
        """Clear the status line, so that what goes to stdout next (on the same terminal) starts a line."""
        if self.live:
            self.out.write('\r\x1b[K')
            self.out.flush()

    def finish(self, result: dict) -> None:
        if self.live:
            self.out.write(summary_table(result) + '\n')
            self.out.flush()


def _run_load(args, requests: list[PreparedRequest], settings: LoadSettings, fd: int, report_fd: int | None,
              prog: str) -> int:
    """Run the load, appending each record to the reserved JSON Lines file as its run ends; print the
    summary (and write the report); return the exit status. SIGINT and SIGTERM cancel the load: no new
    run starts, the runs in flight end as interrupted and keep their records; a second signal changes
    nothing."""
    summary, cancel = Summary(), Cancel()
    report = Report(summary) if report_fd is not None else None
    view = LoadView(sys.stderr, args.quiet, settings.runs)
    write_error: list[OSError] = []

    def on_record(record: dict) -> None:
        try:
            output.write(json.dumps(record, ensure_ascii=False) + '\n')
            output.flush()
        except OSError as exc:
            write_error.append(exc)
            cancel.cancel('a failed write to the evidence file')
        summary.add(record)
        if report is not None:
            report.add(record)
        view.record(record, summary)

    def on_signal(signum, frame) -> None:
        cancel.cancel(signal.Signals(signum).name)
    with os.fdopen(fd, 'w', encoding='utf-8') as output:
        signal.signal(signal.SIGINT, on_signal)
        signal.signal(signal.SIGTERM, on_signal)
        run_load(requests, settings, on_record, cancel)
    if report is not None:
        write_report(report_fd, report)
    _after_signals(cancel.reason is not None)
    result = summary.result()
    view.clear()
    view.finish(result)
    _emit_summary(result, view.live, [args.output])
    _say_written(args)
    if write_error:
        print(f'{prog}: error: cannot write {args.output}: {write_error[0].strerror or write_error[0]}',
              file=sys.stderr)
        return 2
    if cancel.reason in SIGNAL_EXIT:
        return SIGNAL_EXIT[cancel.reason]
    return 0 if result['ok'] == result['runs'] else 1


# What --compare and --summary take besides their files; every other flag is for a run.
READING_FLAGS = {'compare': ('compare', 'quiet', 'mixed_sources'),
                 'summary': ('summary', 'report', 'quiet', 'mixed_sources')}
# prepare()'s and LoadSettings' parameters, by the flag a user typed.
FLAG_OF_PARAMETER = {'max_tokens': '--max-tokens', 'idle': '--idle', 'deadline': '--deadline',
                     'temperature': '--temperature', 'stop': '--stop', 'extra': '--extra', 'model': '--model',
                     'runs': '--runs', 'concurrency': '--concurrency', 'rate': '--rate', 'tools': '--tools',
                     'tool_choice': '--tool-choice', 'json_schema': '--json-schema'}


def _given_flags(parser: argparse.ArgumentParser, args, allowed: tuple[str, ...]) -> list[str]:
    """The flags given (with a value other than their default) that are not among allowed."""
    return [action.option_strings[-1] for action in parser._actions
            if action.option_strings and action.dest not in allowed
            and getattr(args, action.dest, action.default) != action.default]


def _in_flag_terms(message: str) -> str:
    """A message from prepare() or LoadSettings with the parameter it starts with (tools[0] too)
    named as its flag."""
    name, bracket, rest = re.match(r'(\w*)(\[?)(.*)', message, re.S).groups()  # always matches
    return FLAG_OF_PARAMETER.get(name, name) + bracket + rest


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    fixture = None
    try:
        try:
            if args.compare and args.summary:
                raise UsageError('--compare and --summary exclude each other: compare single records side '
                                 'by side, or summarise loads')
            command = 'compare' if args.compare else 'summary' if args.summary else None
            if command is not None:
                extra = _given_flags(parser, args, READING_FLAGS[command])
                if extra:
                    raise UsageError(f'--{command} only reads saved evidence; {", ".join(extra)} '
                                     f'{"is" if len(extra) == 1 else "are"} for runs that send requests')
                return (_compare if args.compare else _summary_command)(args, parser.prog)
            if args.output is None:
                raise UsageError('--output is required')
            if args.output == '-':
                raise UsageError('--output - is not supported: stdout carries the summary line; '
                                 'give the evidence a file name')
            settings = _load_settings(args)
            if args.report is not None and settings is None:
                raise UsageError('--report draws a load: give --runs (or --summary FILE... to draw saved runs)')
            if args.fixture is not None:
                if args.url is not None:
                    raise UsageError('--fixture and --url exclude each other')
                fixture = _Fixture(args.fixture, args.fixture_profile, args.api or 'chat', args.seed)
            requests = _requests_from_args(args, fixture.url if fixture else args.url or DEFAULT_URL)
            fd, capture_fd = _reserve_files(args)
            report_fd = _reserve_report(args, fd)
        except (UsageError, ValueError) as exc:
            _after_signals(False)
            message = str(exc) if isinstance(exc, UsageError) else _in_flag_terms(str(exc))
            print(f'{parser.prog}: error: {message}', file=sys.stderr)
            return 2
        if settings is not None:
            return _run_load(args, requests, settings, fd, report_fd, parser.prog)
        record, status = _run_command(args, requests[0], fd, capture_fd)
    finally:
        if fixture is not None:
            fixture.close()
    summary = {key: record[key] for key in ('ok', 'error_layer', 'api', 'first_text_ms', 'duration_ms',
                                            'finish_reason', 'response_status', 'error')}
    emit(json.dumps(summary, ensure_ascii=False))
    return status


if __name__ == '__main__':
    sys.exit(main())
