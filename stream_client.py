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
   The bounds; ``FAILURE_KINDS``, the one table of every failure's stable
   kind and layer; and ``StreamError``, which carries both.
2. SSE: bytes to event data (sans-IO)
   ``Events`` (and ``TypedEvents``): bytes in, event data out.
3. JSON answers: strict JSON and JSON Schema, drafts 2020-12 and 7 (sans-IO)
   ``strict_json()`` and ``JsonSchema`` (ECMA-262 patterns; docs/json-schema.md),
   for tool-call arguments and JSON answers.
4. The protocol seam: event data to the answer (sans-IO)
   ``StreamValidator``: event data in through ``accept()``, the ``Pieces``
   (text, reasoning, tool call) out, with the outcome rules the APIs share
   written once (``outcome()``). ``ChatChunks``, ``CompletionChunks``,
   ``ResponseEvents`` and ``MessagesEvents`` are each API's grammar (the
   parts of an answer, their states, the events each state accepts), and
   declare its own signals through ``parser``, ``done``, ``terminal``,
   ``finish()`` and ``fields()``; an ``AnswerSpec`` says what the request
   asked for (text, tool calls, JSON).
5. The answer as a whole: the signals one stream shows, the unstreamed twin, the cross-check (sans-IO)
   ``_answer_problem()`` adds the signals of a finished stream (the whole
   budget used by a tool-call finish, tool-call markup in the text);
   ``unstreamed_answer()`` parses an unstreamed answer, and
   ``compare_answers()`` is the ``--cross-check`` of the two.
6. HTTP: the response head and the body framing (sans-IO)
   ``_ResponseHeadParser`` reads the status line and headers strictly,
   ``_body_reader()`` chooses the framing, and one reader per framing knows
   how its body ends.
7. The whole response (sans-IO): bytes in, the answer's pieces and the verdict out
   ``ResponseReader`` composes 2 to 6: bytes in through ``feed()`` and
   ``eof()``, the answer's pieces and each layer's state out; tests, fuzzers
   and offline analysis use it as the transport does. ``UnstreamedReader``
   reads the cross-check's unstreamed twin.
8. The request (checked before any connection)
   ``prepare()`` returns a frozen ``PreparedRequest``, which is what a run sends.
9. Transport: one request, read under the idle timeout and the overall deadline
   ``run()`` connects, sends, and is the socket loop around a ``ResponseReader``,
   filling an ``_Exchange`` (what a run saw) and its ``_Timeline``, whose
   stamps are the kernel's times of arrival where Linux gives them; with
   ``--cross-check`` it then sends the unstreamed twin. In a load, one
   ``_Reactor`` thread per process reads every run's response instead, by the
   same rules (``_take_read()``, ``_read_over()``), and a ``_Gate`` lets it or
   one worker thread at a time run Python, the reactor first.
10. The verdict and the evidence record
    ``judge()`` decides why a run is not ok, in one place and without I/O,
    from a ``ResponseReader`` and the transport's failure, which is built next
    to it (timeouts, the deadline, a stale connection, a signal);
    ``_build_record()`` turns an exchange into the evidence record.
11. Many runs: a load of strict runs, and a summary built from their verdicts
    ``run_load()`` runs prepared requests from worker threads (or forked
    worker processes); ``Summary`` aggregates their records, with goodput
    and a rate sweep's steps.
12. The report: one self-contained HTML page per load
    ``Report`` draws a load as one static HTML page.
13. Evidence files: each created once and never overwritten, and read back
    ``iter_records()`` and ``summarize()`` read them back.
14. The exporter: the verdict of one run per scrape, for Prometheus
    ``Exporter`` answers Prometheus's scrapes of ``/probe?target=NAME`` with
    one run's verdict in the text exposition format (``parse_targets()``,
    ``probe_families()``, ``exposition()`` and ``SingleFlight`` are sans-IO),
    and ``ExporterServer`` serves it.
15. Command line
    ``main()``: one run, a load, a sweep, the exporter, or reading saved evidence.
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
import contextlib
import dataclasses
import difflib
import encodings.idna  # noqa: F401 -- the first connect() of a process needs it; imported here, not in the timed run
import enum
import fractions
import hashlib
import heapq
import html
import http.client
import http.server
import importlib.util
import itertools
import ipaddress
import json
import math
import operator
import queue
import random
import re
import select
import signal
import socket
import ssl
import struct
import textwrap
import threading
import time
import traceback
import typing
import unicodedata
import warnings
from urllib.parse import parse_qsl, quote, unquote, urljoin, urlsplit

__version__ = '0.1.0'

__all__ = [
    # one run, and the record it returns
    'stream', 'prepare', 'run', 'PreparedRequest', 'Capture', 'Cancel', 'Interrupted', 'KeptConnections',
    # judging bytes without a socket
    'ResponseReader', 'judge', 'Verdict', 'Events', 'TypedEvents', 'StreamValidator', 'Pieces', 'ChatChunks',
    'CompletionChunks', 'ResponseEvents', 'MessagesEvents', 'VALIDATORS', 'StreamError', 'SSEError',
    'SSEDecodeError', 'LAYERS', 'FAILURE_KINDS', 'MAX_LINE_CHARS', 'MAX_EVENT_CHARS', 'MAX_TEXT_CHARS',
    # tool calls and JSON answers
    'AnswerSpec', 'ToolCall', 'JsonSchema', 'SchemaError', 'strict_json',
    # --cross-check: the unstreamed twin and the comparison
    'Answer', 'AnsweredCall', 'UnstreamedReader', 'compare_twin', 'unstreamed_answer', 'compare_answers',
    'cross_check_record',
    # many runs, and reading saved evidence
    'run_load', 'LoadSettings', 'arrival_offsets', 'Summary', 'Report', 'iter_records', 'summarize',
    # the Prometheus exporter
    'Exporter', 'ExporterServer', 'SingleFlight', 'parse_targets', 'probe_families', 'exposition',
    'main', 'UsageError',
]


# ---------------------------------------------------------------------------
# Limits and errors
# ---------------------------------------------------------------------------

MAX_TEXT_CHARS = 1_048_576    # the answer bound: the assembled text and tool-call arguments (and, apart, the reasoning)
_JSON_ESCAPE_CHARS = 12        # the longest JSON escape of one character: an astral one as two \\uXXXX escapes
_MAX_ENVELOPE_CHARS = 1_048_576  # what one event carries besides the answer: ids, usage, the settings echoed
# One SSE event, and one line of it. The Responses API repeats the whole answer (text, reasoning and
# arguments) in one data line of its done events and of response.completed, so these bounds follow from
# the answer bound: every answer within MAX_TEXT_CHARS fits, however the server escapes it.
MAX_EVENT_CHARS = 2 * MAX_TEXT_CHARS * _JSON_ESCAPE_CHARS + _MAX_ENVELOPE_CHARS
MAX_LINE_CHARS = MAX_EVENT_CHARS
_MAX_TOKEN_IDS = 1_048_576     # generated token ids kept from one answer (--cross-check)
_MAX_ERROR_BODY = 65_536       # bytes of an HTTP error body that are read
_MAX_SERVER_MESSAGE = 1_000    # characters of a server error message kept
_READ_SIZE = 65_536            # each recv() asks for this much; it returns what is there
_SEND_HOLDING_GATE = 65_536    # bytes: the largest request a load's worker sends holding its gate
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
    'unsupported_part': ('protocol', 'an output item or content block of a type this client does not read'),
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
                raise SSEError('line_too_long', f'line longer than {MAX_LINE_CHARS} characters without a line end')

    @staticmethod
    def _single_line_events(core: str) -> list[str] | None:
        """Split ``data: A\\n\\ndata: B`` into ['A', 'B'], or None if the block has another shape."""
        events = core.split('\n\n' + _DATA_PREFIX)
        if core.count('\n') != 2 * (len(events) - 1):
            return None  # some event has several lines, or extra blank lines
        events[0] = events[0][len(_DATA_PREFIX):]
        if max(map(len, events)) > MAX_LINE_CHARS - len(_DATA_PREFIX):
            raise SSEError('line_too_long', f'line longer than {MAX_LINE_CHARS} characters')
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
                raise SSEError('line_too_long', f'line longer than {MAX_LINE_CHARS} characters')
            name, _, value = line.partition(':')
            if value[:1] == ' ':
                value = value[1:]
            if name != 'data':
                if name == 'event':
                    self._type = value
                continue  # a comment (empty name) or a field this client does not use
            self._size += len(value) + 1
            if self._size > MAX_EVENT_CHARS:
                raise SSEError('event_too_long', f'event data longer than {MAX_EVENT_CHARS} characters')
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
# JSON answers: strict JSON and JSON Schema, drafts 2020-12 and 7 (sans-IO)
# ---------------------------------------------------------------------------

class SchemaError(ValueError):
    """A schema (of a tool's parameters, or of --json-schema) that cannot be checked. ``kind`` says why:
    'invalid' (the schema breaks its draft's rules), 'remote' (it needs another document, which is never
    fetched) or 'unsupported' (a construct that cannot be checked faithfully, e.g. a pattern Python's re
    cannot express with ECMA-262's meaning)."""

    def __init__(self, message: str, kind: str = 'invalid') -> None:
        super().__init__(message)
        self.kind = kind


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


def _json_key(value: object) -> tuple:
    """A hashable stand-in that is equal exactly when the values are equal as JSON: 1 and 1.0 are
    equal, true and 1 are not, and the order of an object's members does not matter."""
    if isinstance(value, bool) or value is None:
        return ('literal', value)
    if isinstance(value, (int, float)):
        return ('number', value)  # Python's 1 == 1.0 and hash(1) == hash(1.0), exactly as JSON means it
    if isinstance(value, str):
        return ('string', value)
    if isinstance(value, list):
        return ('array', tuple(_json_key(item) for item in value))
    return ('object', frozenset((name, _json_key(item)) for name, item in value.items()))


def _exact(number: int | float) -> fractions.Fraction:
    """The number as its shortest decimal text says it, exactly: 0.1 is 1/10, not the binary float."""
    return fractions.Fraction(number if isinstance(number, int) else repr(number))


def _where(path: tuple | None) -> str:
    """An instance location, kept as (parent, key) pairs while checking, in the user's terms: $.tags[2]."""
    keys = []
    while path is not None:
        path, key = path
        keys.append(key)
    text = '$'
    for key in reversed(keys):
        text = _child(text, key)
    return text


def _child(path: str, key: object) -> str:
    if isinstance(key, int):
        return f'{path}[{key}]'
    return f'{path}.{key}' if re.fullmatch(r'[A-Za-z_][A-Za-z0-9_]*', key) else f'{path}[{json.dumps(key)}]'


def _properties(number: int) -> str:
    return f'{number} {"property" if number == 1 else "properties"}'


def _seen(value: object) -> str:
    return _shorten(json.dumps(value, ensure_ascii=False), 40)


# -- ECMA-262 patterns in Python's re -----------------------------------------------------------------
# JSON Schema patterns are ECMA-262 regular expressions with Unicode semantics. Each one is translated
# construct by construct; what has no faithful translation is refused, never given a looser meaning.
# Compiled with re.ASCII, \d, \w and \b keep ECMA's ASCII meaning; the rest is spelled out here.

_ECMA_SPACE = '\t\n\x0b\x0c\r \xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff'  # \s: WhiteSpace, LineTerminator
_ECMA_NOT_NEWLINE = '[^\n\r\u2028\u2029]'  # what . matches
_CONTROL_ESCAPES = {'t': '\t', 'n': '\n', 'v': '\x0b', 'f': '\x0c', 'r': '\r'}
# General_Category names and aliases ECMA-262 accepts in \p{...}, each to the categories it covers.
_GENERAL_CATEGORIES = {
    'L': 'Lu Ll Lt Lm Lo', 'Letter': 'Lu Ll Lt Lm Lo', 'LC': 'Lu Ll Lt', 'Cased_Letter': 'Lu Ll Lt',
    'Lu': 'Lu', 'Uppercase_Letter': 'Lu', 'Ll': 'Ll', 'Lowercase_Letter': 'Ll', 'Lt': 'Lt',
    'Titlecase_Letter': 'Lt', 'Lm': 'Lm', 'Modifier_Letter': 'Lm', 'Lo': 'Lo', 'Other_Letter': 'Lo',
    'M': 'Mn Mc Me', 'Mark': 'Mn Mc Me', 'Combining_Mark': 'Mn Mc Me', 'Mn': 'Mn', 'Nonspacing_Mark': 'Mn',
    'Mc': 'Mc', 'Spacing_Mark': 'Mc', 'Me': 'Me', 'Enclosing_Mark': 'Me',
    'N': 'Nd Nl No', 'Number': 'Nd Nl No', 'Nd': 'Nd', 'Decimal_Number': 'Nd', 'digit': 'Nd', 'Nl': 'Nl',
    'Letter_Number': 'Nl', 'No': 'No', 'Other_Number': 'No',
    'P': 'Pc Pd Ps Pe Pi Pf Po', 'Punctuation': 'Pc Pd Ps Pe Pi Pf Po', 'punct': 'Pc Pd Ps Pe Pi Pf Po',
    'Pc': 'Pc', 'Connector_Punctuation': 'Pc', 'Pd': 'Pd', 'Dash_Punctuation': 'Pd', 'Ps': 'Ps',
    'Open_Punctuation': 'Ps', 'Pe': 'Pe', 'Close_Punctuation': 'Pe', 'Pi': 'Pi', 'Initial_Punctuation': 'Pi',
    'Pf': 'Pf', 'Final_Punctuation': 'Pf', 'Po': 'Po', 'Other_Punctuation': 'Po',
    'S': 'Sm Sc Sk So', 'Symbol': 'Sm Sc Sk So', 'Sm': 'Sm', 'Math_Symbol': 'Sm', 'Sc': 'Sc',
    'Currency_Symbol': 'Sc', 'Sk': 'Sk', 'Modifier_Symbol': 'Sk', 'So': 'So', 'Other_Symbol': 'So',
    'Z': 'Zs Zl Zp', 'Separator': 'Zs Zl Zp', 'Zs': 'Zs', 'Space_Separator': 'Zs', 'Zl': 'Zl',
    'Line_Separator': 'Zl', 'Zp': 'Zp', 'Paragraph_Separator': 'Zp',
    'C': 'Cc Cf Cs Co Cn', 'Other': 'Cc Cf Cs Co Cn', 'Cc': 'Cc', 'Control': 'Cc', 'cntrl': 'Cc', 'Cf': 'Cf',
    'Format': 'Cf', 'Cs': 'Cs', 'Surrogate': 'Cs', 'Co': 'Co', 'Private_Use': 'Co', 'Cn': 'Cn', 'Unassigned': 'Cn',
}
_CATEGORY_RANGES: dict[str, list[tuple[int, int]]] = {}  # filled once, on the first \p{...}
_PATTERNS: dict[str, re.Pattern] = {}  # each pattern source, translated and compiled once per process


def _category_ranges(category: str) -> list[tuple[int, int]]:
    """The code point ranges of one General_Category, from this Python's Unicode database."""
    if not _CATEGORY_RANGES:
        found: dict[str, list[tuple[int, int]]] = {}
        start, current = 0, unicodedata.category('\0')
        for point in range(1, 0x110000):
            kind = unicodedata.category(chr(point))
            if kind != current:
                found.setdefault(current, []).append((start, point - 1))
                start, current = point, kind
        found.setdefault(current, []).append((start, 0x10FFFF))
        _CATEGORY_RANGES.update(found)  # whole, at once: another thread never sees a part
    return _CATEGORY_RANGES.get(category, [])


def _property_members(name: str) -> str:
    """The members of a class for \\p{name}; SchemaError for a property that has no faithful translation."""
    key = name.split('=', 1)[1] if name.startswith(('General_Category=', 'gc=')) else name
    if key == 'Any':
        return '\\x00-\\U0010ffff'
    if key == 'ASCII':
        return '\\x00-\\x7f'
    if key not in _GENERAL_CATEGORIES:
        raise SchemaError(f'the property class \\p{{{name}}} is not supported (only General_Category '
                          'values, ASCII and Any are)', 'unsupported')
    ranges = sorted(piece for category in _GENERAL_CATEGORIES[key].split() for piece in _category_ranges(category))
    return ''.join(f'\\U{low:08x}' if low == high else f'\\U{low:08x}-\\U{high:08x}' for low, high in ranges)


class _EcmaPattern:
    """One ECMA-262 pattern read left to right and written out as a Python pattern of the same meaning."""

    QUANTIFIER = re.compile(r'\{(\d+)(,(\d*))?\}')

    def __init__(self, source: str) -> None:
        self.source, self.at, self.out = source, 0, []
        self.quantifiable = False  # whether the last piece written may take a quantifier

    def refuse(self, what: str, kind: str = 'unsupported') -> typing.NoReturn:
        raise SchemaError(f'pattern {_seen(self.source)}: {what}', kind)

    def translate(self) -> str:
        source = self.source
        while self.at < len(source):
            char = source[self.at]
            self.at += 1
            if char == '\\':
                self.out.append(self.escape(in_class=False))
                self.quantifiable = self.out[-1] not in ('\\b', '\\B')
            elif char == '[':
                self.out.append(self.character_class())
                self.quantifiable = True
            elif char == '(':
                self.out.append(self.group_opening())
            elif char in '*+?{':
                self.quantifier(char)
            elif char in ')|^':
                self.out.append(char)
                self.quantifiable = char == ')'
            elif char == '$':
                self.out.append('\\Z')  # end of input only: Python's $ also matches before a final newline
                self.quantifiable = False
            elif char == '.':
                self.out.append(_ECMA_NOT_NEWLINE)
                self.quantifiable = True
            else:
                self.out.append(re.escape(char))
                self.quantifiable = True
        return ''.join(self.out)

    def quantifier(self, char: str) -> None:
        if char == '{':
            match = self.QUANTIFIER.match(self.source, self.at - 1)
            if match is None:
                self.out.append('\\{')  # not a quantifier: the character itself
                self.quantifiable = True
                return
            low, _, high = match.groups()
            if high and int(high) < int(low):
                self.refuse(f'the quantifier {match.group()} has its numbers out of order', 'invalid')
            self.at = match.end()
            char = match.group()
        if not self.quantifiable:
            self.refuse(f'nothing to repeat before {char}', 'invalid')
        self.out.append(char)
        if self.source.startswith('?', self.at):  # lazy
            self.out.append('?')
            self.at += 1
        self.quantifiable = False

    def group_opening(self) -> str:
        self.quantifiable = False
        rest = self.source[self.at:]
        for opening in ('?:', '?=', '?!', '?<=', '?<!'):
            if rest.startswith(opening):
                self.at += len(opening)
                return '(' + opening
        name = re.match(r'\?<([A-Za-z_$][A-Za-z0-9_$]*)>', rest)
        if name:
            self.at += name.end()
            return f'(?P<{name.group(1)}>'
        if rest.startswith('?'):
            self.refuse(f'the group ({rest[:2]} is not ECMA-262', 'invalid')
        return '('

    def code_point(self) -> int:
        """After \\u: XXXX, a surrogate pair \\uXXXX\\uXXXX (one code point), or {X...}."""
        braces = re.match(r'\{([0-9A-Fa-f]{1,6})\}', self.source[self.at:])
        if braces:
            self.at += braces.end()
            point = int(braces.group(1), 16)
            if point > 0x10FFFF:
                self.refuse(f'\\u{{{braces.group(1)}}} is beyond U+10FFFF', 'invalid')
            return point
        four = re.match(r'[0-9A-Fa-f]{4}', self.source[self.at:])
        if not four:
            self.refuse('\\u needs four hex digits or {...}', 'invalid')
        self.at += 4
        point = int(four.group(), 16)
        low = re.match(r'\\u(d[c-f][0-9a-f]{2})', self.source[self.at:], re.I)
        if 0xD800 <= point <= 0xDBFF and low:
            self.at += 6
            point = 0x10000 + ((point - 0xD800) << 10) + (int(low.group(1), 16) - 0xDC00)
        return point

    def escape(self, in_class: bool) -> str:
        """The Python for the escape after a backslash: a class member when in_class, else a piece."""
        if self.at >= len(self.source):
            self.refuse('it ends with a lone backslash', 'invalid')
        char = self.source[self.at]
        self.at += 1
        if char in 'dDwW' or (char == 'B' and not in_class):
            return '\\' + char  # ASCII-only under re.ASCII, as in ECMA-262
        if char == 'b':
            return '\\x08' if in_class else '\\b'
        if char == 's':
            return _ECMA_SPACE if in_class else f'[{_ECMA_SPACE}]'
        if char == 'S':
            return f'[^{_ECMA_SPACE}]'
        if char in _CONTROL_ESCAPES:
            return re.escape(_CONTROL_ESCAPES[char])
        if char == 'c':
            letter = self.source[self.at:self.at + 1]
            if not ('A' <= letter <= 'Z' or 'a' <= letter <= 'z'):
                self.refuse('\\c needs a letter', 'invalid')
            self.at += 1
            return f'\\x{ord(letter) % 32:02x}'
        if char == 'x':
            digits = self.source[self.at:self.at + 2]
            if not re.fullmatch(r'[0-9A-Fa-f]{2}', digits):
                self.refuse('\\x needs two hex digits', 'invalid')
            self.at += 2
            return f'\\x{digits}'
        if char == 'u':
            return f'\\U{self.code_point():08x}'
        if char == '0' and not self.source[self.at:self.at + 1].isdigit():
            return '\\x00'
        if char.isdigit():
            self.refuse(f'the backreference \\{char} is not supported (a reference to a group that has not '
                        'matched matches nothing in Python, the empty string in ECMA-262)')
        if char == 'k':
            self.refuse('the named backreference \\k is not supported')
        if char in 'pP':
            name = re.match(r'\{([A-Za-z_=]+)\}', self.source[self.at:])
            if not name:
                self.refuse(f'\\{char} needs a property name in braces', 'invalid')
            self.at += name.end()
            members = _property_members(name.group(1))
            return (members if in_class else f'[{members}]') if char == 'p' else f'[^{members}]'
        if char.isalnum() or char == '_':
            self.refuse(f'the escape \\{char} is not ECMA-262', 'invalid')
        return re.escape(char)

    def character_class(self) -> str:
        """A [...] class. Members that are themselves negated (\\S, \\P{...}) become alternatives."""
        negated = self.source.startswith('^', self.at)
        self.at += negated
        members, complements = [], []
        while True:
            if self.at >= len(self.source):
                self.refuse('a [ is never closed', 'invalid')
            char = self.source[self.at]
            self.at += 1
            if char == ']':
                break
            member = self.escape(in_class=True) if char == '\\' else re.escape(char)
            if member.startswith('[^'):
                complements.append(member)
                continue
            if self.source.startswith('-', self.at) and not self.source.startswith('-]', self.at):
                self.at += 1
                high_char = self.source[self.at]
                self.at += 1
                high = self.escape(in_class=True) if high_char == '\\' else re.escape(high_char)
                if not (_single(member) and _single(high)):
                    self.refuse('a range in a class must go from one character to another', 'invalid')
                if _single(member) > _single(high):
                    self.refuse('a range in a class has its ends out of order', 'invalid')
                member = f'{member}-{high}'
            members.append(member)
        alternatives = ([f'[{"".join(members)}]'] if members else []) + complements
        if not negated:
            return alternatives[0] if len(alternatives) == 1 else f'(?:{"|".join(alternatives) or "(?!)"})'
        if not alternatives:
            return '(?s:.)'
        if not complements:
            return f'[^{"".join(members)}]'
        return f'(?:(?!{"|".join(alternatives)})(?s:.))'


def _single(member: str) -> str | None:
    """The one character a translated class member stands for, or None when it stands for a set."""
    if len(member) == 1:
        return member
    if re.fullmatch(r'\\x[0-9a-fA-F]{2}|\\U[0-9a-f]{8}', member):
        return chr(int(member[2:], 16))
    if len(member) == 2 and member[0] == '\\' and not member[1].isalnum():
        return member[1]
    return None


def _ecma_pattern(source: str) -> re.Pattern:
    """The compiled Python pattern with the meaning of an ECMA-262 pattern, cached; SchemaError
    (naming the construct) when there is no faithful translation."""
    compiled = _PATTERNS.get(source)
    if compiled is None:
        python = _EcmaPattern(source).translate()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter('ignore')
                compiled = re.compile(python, re.ASCII)
        except re.error as exc:
            raise SchemaError(f'pattern {_seen(source)} cannot be checked here ({exc})', 'unsupported') from None
        except RecursionError:
            raise SchemaError(f'pattern {_seen(source)} nests too deeply', 'unsupported') from None
        _PATTERNS[source] = compiled
    return compiled


# -- the schema ---------------------------------------------------------------------------------------

_JSON_TYPES = ('null', 'boolean', 'integer', 'number', 'string', 'array', 'object')
_DRAFTS = {'https://json-schema.org/draft/2020-12/schema': '2020-12', 'http://json-schema.org/draft-07/schema': '7',
          'http://json-schema.org/draft-06/schema': '7', 'http://json-schema.org/draft-04/schema': '7'}
# Keywords that never change whether a value is valid, and are not reported.
_ANNOTATIONS = frozenset({'title', 'description', 'default', 'examples', '$schema', '$id', '$comment', 'deprecated',
                         'readOnly', 'writeOnly', 'strict', '$vocabulary', '$anchor', '$dynamicAnchor', '$defs',
                         'definitions'})
# Annotations that some tools assert: reported in ``unchecked`` as not asserted.
_NOT_ASSERTED = frozenset({'format', 'contentMediaType', 'contentEncoding', 'contentSchema'})
_COMMON_KEYWORDS = frozenset({
    '$ref', 'type', 'enum', 'const', 'minLength', 'maxLength', 'pattern', 'minimum', 'maximum', 'exclusiveMinimum',
    'exclusiveMaximum', 'multipleOf', 'minItems', 'maxItems', 'uniqueItems', 'items', 'contains', 'required',
    'minProperties', 'maxProperties', 'properties', 'patternProperties', 'additionalProperties', 'propertyNames',
    'allOf', 'anyOf', 'oneOf', 'not', 'if', 'then', 'else'})
_CHECKED_KEYWORDS = {
    '2020-12': _COMMON_KEYWORDS | {'$dynamicRef', 'prefixItems', 'minContains', 'maxContains', 'dependentRequired',
                                  'dependentSchemas', 'unevaluatedItems', 'unevaluatedProperties',
                                  'dependencies'},  # draft 7's, still read by 2020-12 validators for compatibility
    '7': _COMMON_KEYWORDS | {'additionalItems', 'dependencies'},
}
# Where subschemas sit: keyword -> 'one' (a schema), 'list' (schemas), 'map' (name -> schema).
_SUBSCHEMAS = {
    'additionalProperties': 'one', 'propertyNames': 'one', 'not': 'one', 'if': 'one', 'then': 'one', 'else': 'one',
    'contains': 'one', 'unevaluatedItems': 'one', 'unevaluatedProperties': 'one', 'additionalItems': 'one',
    'allOf': 'list', 'anyOf': 'list', 'oneOf': 'list', 'prefixItems': 'list',
    'properties': 'map', 'patternProperties': 'map', '$defs': 'map', 'definitions': 'map', 'dependentSchemas': 'map',
}
_MAX_REFERENCES = 256  # references followed within one check, beyond which a schema is taken to loop
_ROOT_URI = 'urn:stream-client:schema'  # the base URI of a schema without $id


def _join(base: str, ref: str) -> str:
    """A reference resolved against a base URI (RFC 3986), URNs included."""
    if ref.startswith('#'):
        return base.partition('#')[0] + ref
    if urlsplit(ref).scheme:
        return ref
    return urljoin(base, ref)


def _pointer_tokens(fragment: str) -> list[str]:
    """The reference tokens of a JSON pointer fragment, with %-escapes, ~1 and ~0 undone."""
    return [token.replace('~1', '/').replace('~0', '~') for token in unquote(fragment).split('/')[1:]]


class _Seen:
    """What the keywords applied so far evaluated at one instance location (for unevaluated*):
    property names, and array items as a leading count plus single indices."""

    __slots__ = ('names', 'upto', 'indices')

    def __init__(self) -> None:
        self.names: set = set()
        self.upto = 0
        self.indices: set = set()

    def add(self, other: '_Seen') -> None:
        self.names |= other.names
        self.upto = max(self.upto, other.upto)
        self.indices |= other.indices


class _Node:
    """One compiled schema: the checks of its keywords, in a fixed order, and its schema resource.
    Each check takes (value, path, seen, scope) and returns a problem or None; ``final`` holds the
    unevaluated* checks, which run after the others with what they evaluated."""

    __slots__ = ('checks', 'final', 'resource')

    def __init__(self, resource: str) -> None:
        self.checks: list = []
        self.final: list = []
        self.resource = resource

    def problem(self, value: object, path: tuple | None, seen: _Seen | None, scope: tuple) -> str | None:
        if self.resource != scope[0]:
            scope = (self.resource, scope, scope[2])
        if not self.final:
            for check in self.checks:
                problem = check(value, path, seen, scope)
                if problem:
                    return problem
            return None
        own = _Seen()
        for check in itertools.chain(self.checks, self.final):
            problem = check(value, path, own, scope)
            if problem:
                return problem
        if seen is not None:
            seen.add(own)
        return None


class JsonSchema:
    """A JSON Schema (draft 2020-12, or draft 7 and older when ``$schema`` names them), checked when
    built (SchemaError), that says of a value the first place where it breaks the schema.

    Every keyword of the applicator and validation vocabularies is checked, with boolean schemas,
    $ref to any JSON pointer or $anchor of the same document (and $id-relative references within
    it), $dynamicRef, and unevaluatedProperties/unevaluatedItems. Patterns are ECMA-262 and are
    translated faithfully or refused. ``format`` and the content keywords are annotations: they
    are listed in ``unchecked`` as not asserted, with any keyword this draft does not know.
    A reference to another document is refused (kind 'remote'): nothing is ever fetched.
    """

    def __init__(self, schema: object) -> None:
        self.root = schema
        self.unchecked: list[str] = []
        self.draft = self._draft(schema)
        self.keywords = _CHECKED_KEYWORDS[self.draft]
        self._resources: dict[str, object] = {}       # absolute URI (no fragment) -> schema
        self._anchors: dict[str, object] = {}         # absolute URI with #name -> schema
        self._dynamic: set[str] = set()               # the anchors of those that are $dynamicAnchor
        self._base_of: dict[int, str] = {}            # id(schema) -> the base URI it sits under
        self._nodes: dict[int, _Node] = {}
        self._resources[_ROOT_URI] = schema
        try:
            self._register(schema, _ROOT_URI, '#')
            self._node = self._compile(schema, _ROOT_URI, '#')
        except RecursionError:
            raise SchemaError('the schema is nested too deeply to be checked', 'unsupported') from None

    def problem(self, value: object) -> str | None:
        """The first violation, as '$.city: expected string, got 3', or None when the value is valid."""
        try:
            return self._node.problem(value, None, None, (_ROOT_URI, None, 0))
        except RecursionError:  # a value nested deeper than Python's stack: not shown to be valid
            return '$: nested too deeply to be checked against the schema'

    # -- the document: drafts, resources and anchors -------------------------------------------------

    @staticmethod
    def _draft(schema: object) -> str:
        named = schema.get('$schema') if isinstance(schema, dict) else None
        if named is None:
            return '2020-12'
        if not isinstance(named, str):
            raise SchemaError(f'#/$schema: expected a URI, got {_seen(named)}')
        draft = _DRAFTS.get(named.rstrip('#'))
        if draft is None:
            raise SchemaError(f'#/$schema: {named!r} is neither draft 2020-12 nor draft 7 (or older); another '
                              'meta-schema is another document, which is never fetched', 'remote')
        return draft

    def _register(self, schema: object, base: str, where: str) -> None:
        """Record the resources ($id) and anchors of the document, with the base URI of each schema."""
        if not isinstance(schema, dict):
            return
        if where != '#' and '$schema' in schema and _DRAFTS.get(str(schema['$schema']).rstrip('#')) != self.draft:
            raise SchemaError(f'{where}: $schema {_seen(schema["$schema"])} differs from the document\'s; '
                              'one draft per document is supported', 'unsupported')
        ignore_siblings = self.draft == '7' and '$ref' in schema
        identifier = schema.get('$id') if not ignore_siblings else None
        if identifier is not None:
            if not isinstance(identifier, str):
                raise SchemaError(f'{where}/$id: expected a URI reference, got {_seen(identifier)}')
            resolved = _join(base, identifier)
            uri, _, fragment = resolved.partition('#')
            if fragment and self.draft == '7' and identifier.startswith('#'):
                self._anchors[resolved] = schema  # draft 7: "$id": "#name" names a location
            elif fragment:
                raise SchemaError(f'{where}/$id: {identifier!r} has a fragment; use $anchor', 'invalid')
            else:
                base = uri
                self._resources[uri] = schema
        self._base_of[id(schema)] = base
        for keyword in ('$anchor', '$dynamicAnchor') if self.draft == '2020-12' else ():
            name = schema.get(keyword)
            if name is None:
                continue
            if not isinstance(name, str) or not re.fullmatch(r'[A-Za-z_][-A-Za-z0-9._]*', name):
                raise SchemaError(f'{where}/{keyword}: expected a plain name, got {_seen(name)}')
            self._anchors[f'{base}#{name}'] = schema
            if keyword == '$dynamicAnchor':
                self._dynamic.add(f'{base}#{name}')
        if ignore_siblings:
            return
        for keyword, sub, at in self._subschemas(schema, where):
            self._register(sub, base, at)

    def _subschemas(self, schema: dict, where: str):
        """(keyword, subschema, where) for each subschema this draft reads, known keywords only."""
        for keyword, value in schema.items():
            shape = _SUBSCHEMAS.get(keyword) if keyword in self.keywords or keyword in ('$defs', 'definitions') \
                else None
            if keyword == 'items':
                shape = 'list' if isinstance(value, list) and self.draft == '7' else 'one'
            elif keyword == 'dependencies':
                shape = 'map'
            if shape == 'one':
                yield keyword, value, f'{where}/{keyword}'
            elif shape == 'list' and isinstance(value, list):
                for number, sub in enumerate(value):
                    yield keyword, sub, f'{where}/{keyword}/{number}'
            elif shape == 'map' and isinstance(value, dict):
                for name, sub in value.items():
                    if not (keyword == 'dependencies' and isinstance(sub, list)):
                        yield keyword, sub, f'{where}/{keyword}/{name}'

    def _target(self, ref: str, base: str, where: str) -> tuple[object, str]:
        """The schema a reference names, and its base URI; SchemaError when it is not in this document."""
        resolved = _join(base, ref)
        uri, _, fragment = resolved.partition('#')
        if resolved in self._anchors:
            found = self._anchors[resolved]
            return found, self._base_of.get(id(found), uri)
        if uri not in self._resources:
            raise SchemaError(f'{where}: $ref {ref!r} is another document, which is never fetched', 'remote')
        found = self._resources[uri]
        if fragment and not fragment.startswith('/'):
            raise SchemaError(f'{where}: $ref {ref!r} names no $anchor of this schema')
        for token in _pointer_tokens(fragment) if fragment else ():
            if isinstance(found, dict) and token in found:
                found = found[token]
            elif isinstance(found, list) and re.fullmatch(r'0|[1-9][0-9]*', token) and int(token) < len(found):
                found = found[int(token)]
            else:
                raise SchemaError(f'{where}: $ref {ref!r} points to nothing in this schema')
            if isinstance(found, dict) and isinstance(found.get('$id'), str) and id(found) not in self._base_of:
                uri = _join(uri, found['$id']).partition('#')[0]
        if not isinstance(found, (bool, dict)):
            raise SchemaError(f'{where}: $ref {ref!r} points to {_seen(found)}, which is not a schema')
        return found, self._base_of.get(id(found), uri)

    # -- compiling: the schema's keywords to checks ---------------------------------------------------

    def _compile(self, schema: object, base: str, where: str) -> _Node:
        node = self._nodes.get(id(schema))
        if node is not None:
            return node
        if isinstance(schema, bool):
            node = _Node(base)
            if not schema:
                node.checks.append(lambda value, path, seen, scope: f'{_where(path)}: no value is allowed here, '
                                                                    f'got {_seen(value)}')
            return node
        if not isinstance(schema, dict):
            raise SchemaError(f'{where}: a schema must be an object or a boolean, not {_seen(schema)}')
        base = self._base_of.get(id(schema), base)
        node = self._nodes[id(schema)] = _Node(base)  # before its keywords, so that a schema may refer to itself
        overridden = self.draft == '7' and '$ref' in schema  # draft 7: $ref alone counts
        applied = {'$ref': schema['$ref']} if overridden else schema
        for key in schema:
            if key in self.keywords and key not in applied:
                self.unchecked.append(f'{key} at {where} (ignored beside $ref, as draft 7 says)')
            elif key not in self.keywords and key not in _ANNOTATIONS:
                note = ' (an annotation, not asserted)' if key in _NOT_ASSERTED else ''
                self.unchecked.append(f'{key} at {where}{note}')
        for keyword in ('$defs', 'definitions'):
            if keyword in schema and not isinstance(schema[keyword], dict):
                raise SchemaError(f'{where}/{keyword}: expected an object of schemas, got {_seen(schema[keyword])}')
        for build in self._BUILDERS:
            check = build(self, applied, base, where)
            if check is not None:
                (node.final if build in self._FINAL else node.checks).append(check)
        for keyword, sub, at in self._subschemas(schema, where) if not overridden else ():
            self._compile(sub, base, at)  # the schemas under $defs too, so that every error shows now
        return node

    def _sub(self, schema: dict, keyword: str, base: str, where: str) -> _Node:
        return self._compile(schema[keyword], base, f'{where}/{keyword}')

    def _subs(self, schema: dict, keyword: str, base: str, where: str, non_empty: bool = True) -> list[_Node]:
        value = schema[keyword]
        if not isinstance(value, list) or (non_empty and not value):
            raise SchemaError(f'{where}/{keyword}: expected a {"non-empty " if non_empty else ""}list of schemas, '
                              f'got {_seen(value)}')
        return [self._compile(sub, base, f'{where}/{keyword}/{number}') for number, sub in enumerate(value)]

    def _schema_map(self, schema: dict, keyword: str, base: str, where: str) -> dict[str, _Node]:
        value = schema.get(keyword, {})
        if not isinstance(value, dict):
            raise SchemaError(f'{where}/{keyword}: expected an object of schemas, got {_seen(value)}')
        return {name: self._compile(sub, base, f'{where}/{keyword}/{name}') for name, sub in value.items()}

    @staticmethod
    def _count_of(schema: dict, keyword: str, where: str, default: int | None = None) -> int | None:
        """A non-negative integer keyword (2.0 is 2, as the spec says), or the default when absent."""
        if keyword not in schema:
            return default
        value = schema[keyword]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or value != int(value):
            raise SchemaError(f'{where}/{keyword}: expected a non-negative integer, got {_seen(value)}')
        return int(value)

    @staticmethod
    def _number_of(schema: dict, keyword: str, where: str) -> int | float | None:
        value = schema.get(keyword)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise SchemaError(f'{where}/{keyword}: expected a number, got {_seen(value)}')
        return value

    def _build_ref(self, schema: dict, base: str, where: str):
        if '$ref' not in schema:
            return None
        ref = schema['$ref']
        if not isinstance(ref, str):
            raise SchemaError(f'{where}/$ref: expected a reference, got {_seen(ref)}')
        target, target_base = self._target(ref, base, f'{where}/$ref')
        node = self._compile(target, target_base, f'{where}/$ref')

        def check(value, path, seen, scope):
            if scope[2] >= _MAX_REFERENCES:
                return f'{_where(path)}: the schema refers to itself more than {_MAX_REFERENCES} times here'
            return node.problem(value, path, seen, (scope[0], scope[1], scope[2] + 1))
        return check

    def _build_dynamic_ref(self, schema: dict, base: str, where: str):
        if '$dynamicRef' not in schema or self.draft == '7':
            return None
        ref = schema['$dynamicRef']
        if not isinstance(ref, str):
            raise SchemaError(f'{where}/$dynamicRef: expected a reference, got {_seen(ref)}')
        target, target_base = self._target(ref, base, f'{where}/$dynamicRef')
        initial = self._compile(target, target_base, f'{where}/$dynamicRef')
        resolved = _join(base, ref)
        name = resolved.partition('#')[2]
        dynamic = resolved in self._dynamic  # else it behaves as $ref
        candidates = {uri: self._compile(found, uri.partition('#')[0], f'{where}/$dynamicRef')
                      for uri, found in self._anchors.items() if uri in self._dynamic and uri.endswith('#' + name)}

        def check(value, path, seen, scope):
            if scope[2] >= _MAX_REFERENCES:
                return f'{_where(path)}: the schema refers to itself more than {_MAX_REFERENCES} times here'
            node = initial
            if dynamic:
                resources, link = [], scope
                while link is not None:
                    resources.append(link[0])
                    link = link[1]
                for resource in reversed(resources):  # the outermost dynamic scope first
                    if f'{resource}#{name}' in candidates:
                        node = candidates[f'{resource}#{name}']
                        break
            return node.problem(value, path, seen, (scope[0], scope[1], scope[2] + 1))
        return check

    def _build_type(self, schema: dict, base: str, where: str):
        if 'type' not in schema:
            return None
        names = schema['type'] if isinstance(schema['type'], list) else [schema['type']]
        if not names or any(name not in _JSON_TYPES for name in names) or len(set(names)) != len(names):
            raise SchemaError(f'{where}/type: expected one of {", ".join(_JSON_TYPES)}, got {_seen(schema["type"])}')

        def check(value, path, seen, scope):
            if any(_is_type(value, name) for name in names):
                return None
            return f'{_where(path)}: expected {" or ".join(names)}, got {_seen(value)}'
        return check

    def _build_choices(self, schema: dict, base: str, where: str):
        if 'enum' not in schema and 'const' not in schema:
            return None
        options = schema.get('enum')
        if options is not None and not isinstance(options, list):
            raise SchemaError(f'{where}/enum: expected a list, got {_seen(options)}')
        allowed = None if options is None else {_json_key(option) for option in options}
        constant = _json_key(schema['const']) if 'const' in schema else None

        def check(value, path, seen, scope):
            key = _json_key(value)
            if allowed is not None and key not in allowed:
                return f'{_where(path)}: expected one of {_seen(options)}, got {_seen(value)}'
            if constant is not None and key != constant:
                return f'{_where(path)}: expected {_seen(schema["const"])}, got {_seen(value)}'
            return None
        return check

    def _build_string(self, schema: dict, base: str, where: str):
        low, high = self._count_of(schema, 'minLength', where), self._count_of(schema, 'maxLength', where)
        source = schema.get('pattern')
        if source is not None and not isinstance(source, str):
            raise SchemaError(f'{where}/pattern: expected a regular expression, got {_seen(source)}')
        pattern = _ecma_pattern(source) if source is not None else None
        if low is None and high is None and pattern is None:
            return None

        def check(value, path, seen, scope):
            if not isinstance(value, str):
                return None
            if low is not None and len(value) < low:
                return f'{_where(path)}: expected at least {_count(low, "character")}, got {_count(len(value), "character")}'
            if high is not None and len(value) > high:
                return f'{_where(path)}: expected at most {_count(high, "character")}, got {_count(len(value), "character")}'
            if pattern is not None and not pattern.search(value):
                return f'{_where(path)}: expected a match of {source!r}, got {_seen(value)}'
            return None
        return check

    def _build_number(self, schema: dict, base: str, where: str):
        low, high = self._number_of(schema, 'minimum', where), self._number_of(schema, 'maximum', where)
        low_open, high_open = schema.get('exclusiveMinimum'), schema.get('exclusiveMaximum')
        for keyword, value in (('exclusiveMinimum', low_open), ('exclusiveMaximum', high_open)):
            if value is not None and not isinstance(value, (int, float)):
                raise SchemaError(f'{where}/{keyword}: expected a number (or, as in draft 4, a boolean), got '
                                  f'{_seen(value)}')
        if low_open is True:  # draft 4: a flag on minimum
            low, low_open = None, low
        if high_open is True:
            high, high_open = None, high
        divisor = self._number_of(schema, 'multipleOf', where)
        if divisor is not None and divisor <= 0:
            raise SchemaError(f'{where}/multipleOf: expected a number above 0, got {_seen(divisor)}')
        bounds = [(bound, fails, word) for bound, fails, word in (
            (low, operator.lt, 'at least'), (high, operator.gt, 'at most'),
            (low_open if low_open is not False else None, operator.le, 'more than'),
            (high_open if high_open is not False else None, operator.ge, 'less than')) if bound is not None]
        exact_divisor = _exact(divisor) if divisor is not None else None
        if not bounds and divisor is None:
            return None

        def check(value, path, seen, scope):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                return None
            for bound, fails, word in bounds:
                if fails(value, bound):
                    return f'{_where(path)}: expected a number {word} {bound}, got {_seen(value)}'
            if exact_divisor is not None and (_exact(value) / exact_divisor).denominator != 1:
                return f'{_where(path)}: expected a multiple of {divisor}, got {_seen(value)}'
            return None
        return check

    def _build_array(self, schema: dict, base: str, where: str):
        low, high = self._count_of(schema, 'minItems', where), self._count_of(schema, 'maxItems', where)
        unique = schema.get('uniqueItems', False)
        if not isinstance(unique, bool):
            raise SchemaError(f'{where}/uniqueItems: expected a boolean, got {_seen(unique)}')
        prefix: list[_Node] = []
        rest = None
        if self.draft == '7' and isinstance(schema.get('items'), list):
            prefix = self._subs(schema, 'items', base, where, non_empty=False)
            rest = self._sub(schema, 'additionalItems', base, where) if 'additionalItems' in schema else None
        else:
            if 'prefixItems' in schema and self.draft != '7':
                prefix = self._subs(schema, 'prefixItems', base, where)
            if 'items' in schema:
                if isinstance(schema['items'], list):
                    raise SchemaError(f'{where}/items: a list of schemas is draft 7\'s items; name draft 7 in '
                                      '$schema, or use prefixItems (draft 2020-12)')
                rest = self._sub(schema, 'items', base, where)
        contains = self._sub(schema, 'contains', base, where) if 'contains' in schema else None
        fewest = self._count_of(schema, 'minContains', where, 1) if self.draft != '7' else 1
        most = self._count_of(schema, 'maxContains', where) if self.draft != '7' else None
        if low is None and high is None and not unique and not prefix and rest is None and contains is None:
            return None

        def check(value, path, seen, scope):
            if not isinstance(value, list):
                return None
            size = len(value)
            if low is not None and size < low:
                return f'{_where(path)}: expected at least {_count(low, "item")}, got {_count(size, "item")}'
            if high is not None and size > high:
                return f'{_where(path)}: expected at most {_count(high, "item")}, got {_count(size, "item")}'
            for number, item in enumerate(value):
                sub = prefix[number] if number < len(prefix) else rest
                if sub is None:
                    break
                problem = sub.problem(item, (path, number), None, scope)
                if problem:
                    return problem
            if seen is not None:
                seen.upto = max(seen.upto, size if rest is not None else min(len(prefix), size))
            if contains is not None:
                problem = self._contains_problem(contains, fewest, most, value, path, seen, scope)
                if problem:
                    return problem
            return _duplicate(value, path) if unique else None
        return check

    @staticmethod
    def _contains_problem(contains: _Node, fewest: int, most: int | None, value: list, path, seen, scope):
        matched = [number for number, item in enumerate(value)
                   if contains.problem(item, (path, number), None, scope) is None]
        if seen is not None:
            seen.indices.update(matched)
        if len(matched) < fewest:
            return (f'{_where(path)}: expected at least {_count(fewest, "item")} matching "contains", '
                    f'got {len(matched)}')
        if most is not None and len(matched) > most:
            return f'{_where(path)}: expected at most {_count(most, "item")} matching "contains", got {len(matched)}'
        return None

    def _build_object(self, schema: dict, base: str, where: str):
        required = schema.get('required', [])
        if not isinstance(required, list) or not all(isinstance(name, str) for name in required):
            raise SchemaError(f'{where}/required: expected a list of names, got {_seen(required)}')
        low, high = self._count_of(schema, 'minProperties', where), self._count_of(schema, 'maxProperties', where)
        properties = self._schema_map(schema, 'properties', base, where)
        patterns = [(_ecma_pattern(source), node) for source, node in
                    self._schema_map(schema, 'patternProperties', base, where).items()]
        extra = self._sub(schema, 'additionalProperties', base, where) if 'additionalProperties' in schema else None
        extra_false = schema.get('additionalProperties') is False
        names = self._sub(schema, 'propertyNames', base, where) if 'propertyNames' in schema else None
        needs, dependents = self._dependencies(schema, base, where)
        if not (required or low is not None or high is not None or properties or patterns or extra or names or
                needs or dependents):
            return None

        def check(value, path, seen, scope):
            if not isinstance(value, dict):
                return None
            for name in required:
                if name not in value:
                    return f'{_where((path, name))}: required, but missing'
            if low is not None and len(value) < low:
                return f'{_where(path)}: expected at least {_properties(low)}, got {len(value)}'
            if high is not None and len(value) > high:
                return f'{_where(path)}: expected at most {_properties(high)}, got {len(value)}'
            for name, item in value.items():
                here = (path, name)
                node = properties.get(name)
                matched = node is not None
                if matched:
                    problem = node.problem(item, here, None, scope)
                    if problem:
                        return problem
                for pattern, sub in patterns:
                    if pattern.search(name):
                        matched = True
                        problem = sub.problem(item, here, None, scope)
                        if problem:
                            return problem
                if not matched and extra is not None:
                    if extra_false:
                        return f'{_where(here)}: not allowed (additionalProperties is false)'
                    problem = extra.problem(item, here, None, scope)
                    if problem:
                        return problem
                if matched or extra is not None:
                    if seen is not None:
                        seen.names.add(name)
                if names is not None:
                    problem = names.problem(name, None, None, scope)
                    if problem:
                        return f'the name of {_where(here)}: {problem.partition(": ")[2]}'
            for name, wanted in needs:
                if name in value:
                    for other in wanted:
                        if other not in value:
                            return f'{_where((path, other))}: required when {_where((path, name))} is present, but missing'
            for name, node in dependents:
                if name in value:
                    problem = node.problem(value, path, seen, scope)
                    if problem:
                        return problem
            return None
        return check

    def _dependencies(self, schema: dict, base: str, where: str) -> tuple[list, list]:
        """(name, names it requires) and (name, schema applied when it is present), from
        dependentRequired/dependentSchemas (2020-12) and dependencies (draft 7, and 2020-12 too)."""
        needs, dependents = [], []
        for keyword in ('dependencies',) if self.draft == '7' else ('dependentRequired', 'dependentSchemas',
                                                                     'dependencies'):
            value = schema.get(keyword)
            if value is None:
                continue
            if not isinstance(value, dict):
                raise SchemaError(f'{where}/{keyword}: expected an object, got {_seen(value)}')
            for name, sub in value.items():
                if keyword != 'dependentSchemas' and isinstance(sub, list):
                    if not all(isinstance(other, str) for other in sub):
                        raise SchemaError(f'{where}/{keyword}/{name}: expected a list of names, got {_seen(sub)}')
                    needs.append((name, sub))
                elif keyword == 'dependentRequired':
                    raise SchemaError(f'{where}/{keyword}/{name}: expected a list of names, got {_seen(sub)}')
                else:
                    dependents.append((name, self._compile(sub, base, f'{where}/{keyword}/{name}')))
        return needs, dependents

    def _build_combined(self, schema: dict, base: str, where: str):
        every = self._subs(schema, 'allOf', base, where) if 'allOf' in schema else []
        some = self._subs(schema, 'anyOf', base, where) if 'anyOf' in schema else None
        one = self._subs(schema, 'oneOf', base, where) if 'oneOf' in schema else None
        negated = self._sub(schema, 'not', base, where) if 'not' in schema else None
        condition = self._sub(schema, 'if', base, where) if 'if' in schema else None
        then = self._sub(schema, 'then', base, where) if 'then' in schema and condition else None
        otherwise = self._sub(schema, 'else', base, where) if 'else' in schema and condition else None
        if not every and some is None and one is None and negated is None and condition is None:
            return None

        def check(value, path, seen, scope):
            for node in every:
                problem = node.problem(value, path, seen, scope)
                if problem:
                    return problem
            if some is not None:
                problem = _any_of_problem(some, value, path, seen, scope)
                if problem:
                    return problem
            if one is not None:
                problem = _one_of_problem(one, value, path, seen, scope)
                if problem:
                    return problem
            if negated is not None and negated.problem(value, path, None, scope) is None:
                return f'{_where(path)}: expected not to match the schema under "not", got {_seen(value)}'
            if condition is not None and (then or otherwise or seen is not None):
                own = _Seen() if seen is not None else None
                branch = then if condition.problem(value, path, own, scope) is None else otherwise
                if own is not None and branch is then:
                    seen.add(own)
                if branch is not None:
                    return branch.problem(value, path, seen, scope)
            return None
        return check

    def _build_unevaluated_items(self, schema: dict, base: str, where: str):
        if 'unevaluatedItems' not in schema or self.draft == '7':
            return None
        node = self._sub(schema, 'unevaluatedItems', base, where)

        def check(value, path, seen, scope):
            if not isinstance(value, list):
                return None
            for number in range(seen.upto, len(value)):
                if number not in seen.indices:
                    problem = node.problem(value[number], (path, number), None, scope)
                    if problem:
                        return problem
            seen.upto = len(value)
            return None
        return check

    def _build_unevaluated_properties(self, schema: dict, base: str, where: str):
        if 'unevaluatedProperties' not in schema or self.draft == '7':
            return None
        node = self._sub(schema, 'unevaluatedProperties', base, where)
        refused = schema['unevaluatedProperties'] is False

        def check(value, path, seen, scope):
            if not isinstance(value, dict):
                return None
            for name, item in value.items():
                if name not in seen.names:
                    if refused:
                        return f'{_where((path, name))}: not allowed (unevaluatedProperties is false)'
                    problem = node.problem(item, (path, name), None, scope)
                    if problem:
                        return problem
            seen.names.update(value)
            return None
        return check

    _BUILDERS = (_build_ref, _build_dynamic_ref, _build_type, _build_choices, _build_string, _build_number,
                 _build_array, _build_object, _build_combined, _build_unevaluated_items,
                 _build_unevaluated_properties)
    _FINAL = (_build_unevaluated_items, _build_unevaluated_properties)


def _duplicate(value: list, path) -> str | None:
    """The second of two equal items, as JSON equality sees them, in linear time. Only the hash of
    each item's key is kept (a large array of keys would crowd memory); equal hashes are compared."""
    first: dict[int, list[int]] = {}
    for number, item in enumerate(value):
        key = _json_key(item)
        earlier = first.setdefault(hash(key), [])
        if any(_json_key(value[other]) == key for other in earlier):
            return f'{_where((path, number))}: expected unique items, got {_seen(item)} twice'
        earlier.append(number)
    return None


def _any_of_problem(nodes: list[_Node], value, path, seen, scope) -> str | None:
    """None when a schema of anyOf matches; with ``seen``, every one is tried, for what it evaluates."""
    problems, matched = [], False
    for node in nodes:
        own = _Seen() if seen is not None else None
        problem = node.problem(value, path, own, scope)
        if problem is None:
            matched = True
            if seen is None:
                return None
            seen.add(own)
        else:
            problems.append(problem)
    return None if matched else f'{_where(path)}: matches none of anyOf ({"; ".join(problems)})'


def _one_of_problem(nodes: list[_Node], value, path, seen, scope) -> str | None:
    matching = []
    for node in nodes:
        own = _Seen() if seen is not None else None
        if node.problem(value, path, own, scope) is None:
            matching.append(own)
    if len(matching) != 1:
        return f'{_where(path)}: matches {len(matching)} of oneOf, expected exactly 1'
    if seen is not None:
        seen.add(matching[0])
    return None


# ---------------------------------------------------------------------------
# The protocol seam: event data to the answer (sans-IO)
# ---------------------------------------------------------------------------

_TOOL_CHOICES = ('auto', 'required', 'none')  # or the name of one tool


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
        if self.tool_choice is not None and self.tool_choice not in _TOOL_CHOICES and self.tool_choice not in names:
            raise ValueError(f'tool_choice {self.tool_choice!r} is none of {", ".join(_TOOL_CHOICES)} and '
                             f'names no tool offered ({", ".join(names)})')

    @property
    def named(self) -> str | None:
        """The one tool the choice forces, or None."""
        return self.tool_choice if self.tool_choice not in (None, *_TOOL_CHOICES) else None

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

    def problem(self, spec: AnswerSpec) -> StreamError | None:
        """Why these arguments cannot be used: not one strict JSON object matching the tool's parameters."""
        schemas = dict(spec.tools)
        if self.name not in schemas:
            return _failure('unknown_tool', f'{self.name!r} is not a tool the request offered '
                                            f'({", ".join(schemas) or "none"})')
        arguments = self.arguments
        if not arguments.strip():
            return _failure('tool_arguments_empty', 'the arguments are empty')
        try:
            value = strict_json(arguments)
        except ValueError as exc:
            return _failure('tool_arguments_not_json', f'the arguments are not JSON ({exc}): {_preview(arguments)}')
        if not isinstance(value, dict):
            return _failure('tool_arguments_not_object', f'arguments are not a JSON object: {_preview(arguments)}')
        problem = schemas[self.name].problem(value) if schemas[self.name] is not None else None
        return _failure('tool_arguments_schema', f'the arguments do not match its parameters: {problem}') \
            if problem else None

    def record(self, spec: AnswerSpec) -> dict:
        problem = self.problem(spec)
        return {'index': self.index, 'id': self.id, 'name': self.name, 'arguments': self.arguments,
                'arguments_problem': problem and problem.message}


class Pieces(typing.NamedTuple):
    """What one event adds to the answer, each '' when it adds none: text, reasoning text, and a piece
    of a tool call for display (its name and "(" as the call opens, then its arguments)."""

    text: str = ''
    reasoning: str = ''
    call: str = ''


_NOTHING = Pieces()  # an event that adds nothing to show (a role, a finish, a usage event...)


class StreamValidator:
    """What the read loop needs from the validator of one streaming API, and the rules all four share.

    The read loop creates the API's ``parser`` and gives each event it
    returns to ``accept()``, which returns its ``Pieces`` (text, reasoning, call): the
    answer and reasoning text that event carried, and a piece of a tool call
    for display (see ``_shown``); '' when none. It raises StreamError.
    ``done`` says that the API's ``terminal`` marker arrived; ``outcome()``
    says why the answer is not finished (a StreamError, None when it is);
    ``fields()`` are the record's fields that the API decides. A validator
    never reads a clock or touches a socket. ``spec`` says what the answer
    was asked to be: text, tool calls or JSON; ``expect_finish`` is the
    finish a finished answer has: "stop", or "length" for a fixed-length
    load, where the usage (when sent) must also count exactly ``max_tokens``.

    The outcome rules are written once, here: each API declares only its own
    signals, ``finish()`` (its finish read as stop, length, calls or other)
    and the words it says them in.
    """

    api = ''
    parser = Events
    terminal = '[DONE]'
    eof_words = '[DONE]'             # what a finished stream ends with, as the EOF failure names it
    stop_words = 'finish_reason=stop'  # the finish of a finished answer, in this API's words
    length_words = 'finish_reason=length'  # the finish of a fixed-length answer
    calls_finish = 'finish_reason=tool_calls'  # what a finished tool answer ends with
    call_noun = 'tool call'          # what a tool call is called in this API
    token_noun = 'output token'
    budget_words = 'output budget exhausted ({})'

    def __init__(self, expect_finish: str = 'stop', max_tokens: int | None = None,
                 spec: AnswerSpec | None = None) -> None:
        self.spec = spec or AnswerSpec()
        self.expect_finish = expect_finish
        self.max_tokens = max_tokens
        self.calls: list[ToolCall] = []
        self._call_ids: set[str] = set()
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
        self.token_ids: list[int] | None = None  # the generated token ids, when the server sends them
        self.tokens_per_event: list[int] = []     # how many each event that carried any had
        self.skipped_events: list[str] = []  # event types the API says to ignore, each skipped here

    def accept(self, event) -> Pieces:
        raise NotImplementedError

    def _take_token_ids(self, value: object) -> None:
        """The generated token ids an event carries (vLLM's ``return_token_ids``), for the cross-check."""
        if value is None:
            return
        if not isinstance(value, list) or not all(type(token) is int for token in value):
            raise _failure('token_ids_invalid', f'expected token_ids to be a list of integers in event '
                                                f'{self.data_events}, got {_shorten(repr(value))}')
        self.token_ids = self.token_ids if self.token_ids is not None else []
        if len(self.token_ids) + len(value) > _MAX_TOKEN_IDS:
            raise _failure('too_many_token_ids', f'more than {_MAX_TOKEN_IDS} token ids')
        self.token_ids.extend(value)
        if value:
            self.tokens_per_event.append(len(value))

    def finish(self) -> str | None:
        """The API's finish: 'stop', 'length' (the budget), 'calls' (finished as tool calls) or 'other';
        None when the terminal event arrived without one."""
        raise NotImplementedError

    def finish_words(self) -> str:
        """The finish as the API said it, e.g. 'finish_reason=stop'."""
        raise NotImplementedError

    def finished_words(self) -> str:
        return f'{self.finish_words()} and {self.terminal} arrived'

    def unexpected_words(self, words: str) -> str:
        return f'expected {self.stop_words}, got {words}'

    def no_finish_words(self) -> str:
        return f'[DONE] without a finish_reason after {_count(self.content_events, "content event")}'

    def outcome(self) -> StreamError | None:
        """Why the answer is not finished (a StreamError of the application layer), or None when it is."""
        if not self.done:
            return _failure('eof_before_done', f'EOF before {self.eof_words} after '
                                               f'{_count(self.content_events, "content event")}')
        finish = self.finish()
        if finish is None:
            return _failure('no_finish_reason', self.no_finish_words())
        words = self.finish_words()
        if self.expect_finish == 'length':
            return self._fixed_length_outcome(finish, words)
        if finish == 'length':
            return self._budget_failure(self.budget_words.format(words))
        if finish == 'other':
            return _failure('unexpected_finish', self.unexpected_words(words))
        if self.calls:
            return self._answer_failure(finish == 'calls', words)
        if finish == 'calls':
            return _failure('finish_without_calls', f'{words}, but no {self.call_noun} arrived')
        return self._answer_failure(False, self.finished_words())

    def _fixed_length_outcome(self, finish: str, words: str) -> StreamError | None:
        if finish != 'length':
            return _failure('unexpected_finish', f'expected {self.length_words} (--expect-finish length), got {words}')
        if self.completion_tokens is not None and self.completion_tokens != self.max_tokens:
            return _failure('length_tokens_differ', f'{words} after {_count(self.completion_tokens, self.token_noun)}, '
                                                    f'not the {self.max_tokens} requested')
        if not self._visible_text() and not self.calls:
            return _failure('no_visible_text', f'{self.finished_words()}, but no visible text')
        return None

    @property
    def answer_kind(self) -> str:
        """tool_calls when calls arrived, json when a JSON answer was asked for, otherwise text."""
        return 'tool_calls' if self.calls else 'json' if self.spec.json_schema is not None else 'text'

    def _answer_failure(self, finished_as_calls: bool, finish: str) -> StreamError | None:
        """Why an answer whose API says it finished (as ``finish`` says) is not a usable one: for tool
        calls, the finish that calls need (``finished_as_calls``), the tool choice, and each call's
        arguments; otherwise the tool choice, then a JSON answer's JSON, or visible text."""
        spec, calls = self.spec, self.calls
        if calls:
            if not finished_as_calls:
                return _failure('calls_without_call_finish', f'expected {self.calls_finish} after '
                                                             f'{_count(len(calls), "tool call")}, got {finish}')
            if spec.tool_choice == 'none':
                return _failure('tool_choice_none', f'tool_choice none, but {_count(len(calls), "tool call")} arrived')
            for call in calls:
                failure = (_failure('wrong_tool', f'tool_choice named {spec.named}')
                           if spec.named and call.name != spec.named else call.problem(spec))
                if failure:
                    return _failure(failure.kind, f'tool call {call.index} ({call.name}): {failure.message}')
            return None
        if spec.tool_choice == 'required' or spec.named:
            return _failure('text_not_tool_call', f'tool_choice {spec.tool_choice} asked for a tool call, but the '
                                                  f'answer is text ({finish})')
        if spec.json_schema is not None:
            return self._json_failure()
        if not self._visible_text():
            return _failure('no_visible_text', f'{finish}, but no visible text arrived')
        return None

    def _visible_text(self) -> bool:
        return any(part.strip() for part in self.text_parts)

    def _json_failure(self) -> StreamError | None:
        text = self.text
        try:
            value = strict_json(text)
        except ValueError as exc:
            return _failure('answer_not_json', f'the answer is not JSON ({exc}): {_preview(text)}')
        problem = self.spec.json_schema.problem(value)
        return _failure('answer_schema', f'the JSON answer does not match the schema: {problem}') if problem else None

    def _budget_failure(self, problem: str) -> StreamError:
        """A budget-exhausted failure, saying so when the budget ran out inside a tool call."""
        if self.calls:
            call = self.calls[-1]
            problem = f'{problem} inside tool call {call.index} ({call.name})'
        return _failure('budget_exhausted', problem)

    def _server_error(self, fields: dict, sent: str = 'an error event') -> StreamError:
        """The failure of an error the server reported in the stream, with its own message."""
        error = _server_error_fields(fields)
        return _failure('server_error_event' if sent == 'an error event' else 'response_failed',
                        f'server sent {sent}: {_describe_server_error(error)}', error)

    def _offered_tools(self, what: str) -> int:
        """The event number, once it is known that the request offered tools, which ``what`` needs."""
        if not self.spec.tools:
            raise _failure('no_tools_offered', f'{what} arrived in event {self.data_events}, but the request offered '
                                               'no tools (--tools)')
        return self.data_events

    def _new_call(self, what: str, call_id: object, name: object, index: int | None = None) -> ToolCall:
        """Open a tool call (``what`` names it in the API's words), which the request must have offered
        tools for; its id is unique within the answer."""
        event = self._offered_tools(what)
        if call_id in self._call_ids:
            raise _failure('duplicate_id', f'{what} in event {event} reuses the id {_preview(str(call_id))} of '
                                           'an earlier call')
        call = ToolCall(len(self.calls) if index is None else index, call_id, name)
        self._call_ids.add(call_id)
        self.calls.append(call)
        self.content_events += 1
        return call

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
            raise _failure('answer_too_long', f'answer longer than {MAX_TEXT_CHARS} characters')
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
                'tool_calls': [call.record(self.spec) for call in self.calls],
                'skipped_events': list(self.skipped_events)}

    def _add_text(self, text: str) -> None:
        self.content_events += 1
        self.text_chars += len(text)
        if self.text_chars > MAX_TEXT_CHARS:
            raise _failure('answer_too_long', f'answer longer than {MAX_TEXT_CHARS} characters')
        self.text_parts.append(text)

    def _add_reasoning(self, text: str) -> None:
        self.reasoning_chars += len(text)
        if self.reasoning_chars > MAX_TEXT_CHARS:
            raise _failure('reasoning_too_long', f'reasoning longer than {MAX_TEXT_CHARS} characters')
        self.reasoning_parts.append(text)

    def _typed_body(self, event: tuple[str, str], ended_by: str) -> tuple[str, dict]:
        """The type and JSON body of a typed event, after the checks both typed APIs make: nothing may
        follow the event that ended the stream (``ended_by`` names it), and the event field must name
        the type its data says."""
        kind, data = event
        if self.done:
            raise _failure('event_after_terminal', f'event {_preview(kind)} after {ended_by}')
        self.data_events += 1
        body = self._load_object(data)
        if body.get('type') != kind:
            raise _failure('event_type_mismatch', f'event {self.data_events}: its event field says {_preview(kind)} but '
                                                  f'its data says type {_shorten(repr(body.get("type")))}')
        return kind, body

    def _load_object(self, data: str) -> dict:
        """One event's JSON object, or StreamError('protocol')."""
        try:
            value = json.loads(data)
        except (ValueError, RecursionError) as exc:
            raise _failure('malformed_json', f'malformed JSON in event {self.data_events} '
                                             f'({type(exc).__name__}): {_preview(data)}') from None
        if not isinstance(value, dict):
            raise _failure('not_an_object', f'expected a JSON object in event {self.data_events}, '
                                            f'got {type(value).__name__}')
        return value


def _carries_nothing(value: object) -> bool:
    """Whether a chunk's value carries nothing for the answer: null, an empty string or list, or an object
    of such values. LiteLLM ends every stream with usage and ``"choices": [{"index": 0, "delta": {}}]``
    where OpenAI and vLLM send ``"choices": []``: an entry for a closed choice that cannot change it."""
    if isinstance(value, dict):
        return all(_carries_nothing(item) for item in value.values())
    return value is None or value == '' or value == []


class _ChoiceChunks(StreamValidator):
    """What chat and completions chunks share: one choice (n=1) with index 0, a usage chunk,
    in-band error objects, a finish_reason and the terminal data: [DONE].

    The grammar: the choice is open until its finish_reason, which closes it
    and its tool calls; a closed choice accepts no text, reasoning, tool-call
    piece, role or second finish_reason, only usage, entries that carry nothing
    (``_carries_nothing()``) and [DONE], after which nothing is accepted.
    """

    token_noun = 'completion token'
    finish_reason: str | None = None  # until the choice's finish_reason arrives

    def accept(self, data: str) -> Pieces:
        """Apply one event's data; return the answer text, reasoning text and tool-call piece it carried."""
        if self.done:
            raise _failure('event_after_terminal', f'event after [DONE]: {_preview(data)}')
        self.data_events += 1
        if data == '[DONE]':
            self.done = True
            return _NOTHING
        chunk = self._load_object(data)
        if chunk.get('error') is not None:  # "error": null is no error
            raise self._server_error(chunk)
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
            raise _failure('choices_not_one', f'expected one choice per chunk (n=1), got {count}')
        choice = choices[0]
        if not isinstance(choice, dict) or choice.get('index') != 0:
            seen = choice.get('index') if isinstance(choice, dict) else choice
            raise _failure('choice_index', f'expected choice index 0, got {_shorten(repr(seen))}')
        if self.finish_reason is not None and _carries_nothing({**choice, 'index': None}):
            return _NOTHING  # a closed choice's empty entry, as LiteLLM's last (usage) chunk has
        self._take_token_ids(choice.get('token_ids'))
        closed_by = self.finish_reason
        carried = self._take_choice(choice)  # names what a closed choice got, if it carried anything
        if closed_by is not None:
            raise _failure('event_after_close', f'a chunk for choice 0 arrived in event {self.data_events}, after '
                                                f'finish_reason {closed_by!r} closed it')
        return carried

    def _take_choice(self, choice: dict) -> Pieces:
        raise NotImplementedError

    def _text_field(self, value: object, name: str) -> str | None:
        """A text field of the choice: a string or null, and no text after the finish."""
        if value is None or isinstance(value, str):
            if value and self.finish_reason is not None:
                raise _failure('event_after_close', f'{name} arrived after finish_reason={self.finish_reason}')
            return value
        raise _failure('field_type', f'expected {name} to be a string, got {type(value).__name__}')

    def _take_finish(self, reason: object) -> None:
        if reason is None:
            return
        if self.finish_reason is not None:
            raise _failure('event_after_close', f'a second finish_reason ({_preview(str(reason))}) '
                                                f'after finish_reason={self.finish_reason}')
        if not isinstance(reason, str):
            raise _failure('field_type', f'expected finish_reason to be a string, got {type(reason).__name__}')
        self.finish_reason = reason

    def finish(self) -> str | None:
        reason = self.finish_reason
        if reason == 'stop' and self.calls and self.spec.named is not None:
            return 'calls'  # vLLM says tool_calls, or stop when the choice named the function (as OpenAI does)
        return None if reason is None else self._FINISHES.get(reason, 'other')

    _FINISHES = {'stop': 'stop', 'length': 'length', 'tool_calls': 'calls'}

    def finish_words(self) -> str:
        return f'finish_reason={self.finish_reason}'

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
            raise _failure('field_type', f'expected delta to be an object, got {type(delta).__name__}')
        if delta.get('function_call'):
            raise _failure('legacy_function_call', 'a legacy function_call delta arrived; this client reads tool_calls')
        text = self._text_field(delta.get('content'), 'delta.content')
        reasoning = self._text_field(delta.get('reasoning'), 'delta.reasoning')
        if reasoning is None:
            reasoning = self._text_field(delta.get('reasoning_content'), 'delta.reasoning_content')
        if text:
            if self.calls and text.strip():
                call = self.calls[-1]
                raise _failure('text_in_tool_call', f'content text {_preview(text)} arrived inside tool call {call.index} '
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
        event = self._offered_tools('tool call deltas')
        if self.finish_reason is not None:
            raise _failure('event_after_close', f'tool call deltas arrived in event {event}, after finish_reason '
                                                f'{self.finish_reason!r} closed the choice and its calls')
        if not isinstance(deltas, list):
            raise _failure('field_type', f'expected delta.tool_calls to be a list in event {event}, '
                                         f'got {type(deltas).__name__}')
        shown = []
        for delta in deltas:
            index = delta.get('index') if isinstance(delta, dict) else None
            function = delta.get('function') if isinstance(delta, dict) else None
            if type(index) is not int or index < 0 or not isinstance(function or {}, dict):
                raise _failure('bad_tool_call_delta', f'expected a tool call delta with an integer index and a function '
                                                      f'object in event {event}, got {_preview(json.dumps(delta))}')
            call_id, name, arguments = delta.get('id'), (function or {}).get('name'), (function or {}).get('arguments')
            for key, value in (('id', call_id), ('function.name', name), ('function.arguments', arguments)):
                if value is not None and not isinstance(value, str):
                    raise _failure('field_type', f'expected tool call {index} {key} to be a string in event '
                                                 f'{event}, got {type(value).__name__}')
            if index == len(self.calls):
                if not call_id or not name:
                    raise _failure('call_without_id', f'tool call {index} got arguments in event {event} but was never '
                                                      'opened with an id and a name')
                shown.append(self._shown(self._new_call(f'tool call {index}', call_id, name), opening=True))
            elif index > len(self.calls):
                raise _failure('part_index_skips', f'tool call index {index} in event {event} skips ahead: the next '
                                                   f'call to open was index {len(self.calls)}')
            else:
                call = self.calls[index]
                if call_id and call_id != call.id:
                    raise _failure('call_id_changed', f'tool call {index} ({call.name}) got a second id {call_id!r} in '
                                                      f'event {event}; it opened as {call.id!r}')
                if name and name != call.name:
                    raise _failure('call_name_changed', f'tool call {index} changed its name from {call.name!r} to '
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
        raise _failure('bad_usage', f'expected usage.{key} to be a non-negative integer, '
                                    f'got {_shorten(repr(count))}')
    return count


_RESPONSE_TERMINALS = ('response.completed', 'response.incomplete', 'response.failed', 'error')
_RESPONSE_ITEMS = {'message': 'message', 'reasoning': 'reasoning item', 'function_call': 'function call'}


class _Part:
    """One part of an answer: an output item or one of its content parts, or a content block. Its type
    and id, whether it is still open, the text assembled for it and whether that text was closed
    (a .done event), its tool call, and an item's content parts by index."""

    __slots__ = ('kind', 'id', 'open', 'pieces', 'text_done', 'call', 'parts')

    def __init__(self, kind: str, part_id: object = None, call: ToolCall | None = None) -> None:
        self.kind, self.id, self.call = kind, part_id, call
        self.open, self.text_done = True, False
        self.pieces: list[str] = []
        self.parts: list[_Part] = []

    @property
    def text(self) -> str:
        return ''.join(self.pieces)


class ResponseEvents(StreamValidator):
    """Validates one streamed response of the Responses API (/v1/responses), as a grammar (docs/apis.md).

    Every event's ``event`` field names the ``type`` in its data, and
    ``sequence_number`` counts up from 0 by 1. ``response.created`` comes
    first; each output item opens at the next ``output_index`` with an id of
    its own and closes with ``response.output_item.done``; a message's text
    arrives in content parts, a reasoning item's and a function call's in
    their deltas, each closed by its ``.done``. A closed part accepts nothing
    more, and every closing copy (each ``.done``, ``output_item.done``, the
    terminal event's ``output``) must equal what the deltas assembled. One
    terminal event ends the stream, with every item closed. Its name is not
    trusted: vLLM 0.32 ends a budget-exhausted response with
    ``response.completed`` whose status is "incomplete", so the outcome is
    read from ``response.status``. An unknown event type is skipped and listed.
    """

    api = 'responses'
    parser = TypedEvents

    def __init__(self, expect_finish: str = 'stop', max_tokens: int | None = None,
                 spec: AnswerSpec | None = None) -> None:
        super().__init__(expect_finish, max_tokens, spec)
        self.items: list[_Part] = []  # the output items, by output_index
        self._item_ids: set = set()
        self.created = False
        self.terminal_event: str | None = None
        self.status: str | None = None
        self.incomplete_reason: str | None = None
        self._sequence = 0

    @property
    def terminal(self) -> str:
        return self.terminal_event or 'the terminal event'

    def accept(self, event: tuple[str, str]) -> Pieces:
        """Apply one (type, data) event; return the answer text, reasoning text and tool-call piece it carried."""
        kind, body = self._typed_body(event, f'the terminal event {self.terminal_event}')
        sequence = body.get('sequence_number')
        if type(sequence) is not int or sequence != self._sequence:
            raise _failure('sequence_number', f'expected sequence_number {self._sequence}, got '
                                              f'{_shorten(repr(sequence))} in {kind}: an event was lost or repeated')
        self._sequence += 1
        take = self._GRAMMAR.get(kind)
        if take is None:  # not an event of the grammar below: skipped, and listed in the record
            self.skipped_events.append(kind)
            return _NOTHING
        if not self.created and kind not in ('response.created', 'error'):
            raise _failure('event_out_of_order', f'{kind} arrived in event {self.data_events}, before response.created')
        return take(self, body)

    def _take_created(self, body: dict) -> Pieces:
        if self.created:
            raise _failure('event_out_of_order', f'a second response.created in event {self.data_events}')
        self.created = True
        return self._take_started(body)

    def _take_started(self, body: dict) -> Pieces:
        response = body.get('response')
        if self.response_id is None and isinstance(response, dict) and isinstance(response.get('id'), str):
            self.response_id = response['id']
        return _NOTHING

    def _take_item(self, body: dict) -> Pieces:
        item, index, event = body.get('item'), body.get('output_index'), self.data_events
        kind = item.get('type') if isinstance(item, dict) else None
        if kind not in _RESPONSE_ITEMS:
            raise _failure('unsupported_part', f'an output item of type {_shorten(repr(kind))} arrived in event '
                                               f'{event}; this client reads messages, reasoning and function calls')
        self._next_index(index, self.items, f'an output item at output_index {_shorten(repr(index))}')
        if item.get('id') is not None and item['id'] in self._item_ids:
            raise _failure('duplicate_id', f'output item {index} in event {event} reuses the id '
                                           f'{_preview(str(item["id"]))} of an earlier item')
        call = self._open_call(item) if kind == 'function_call' else None
        self._item_ids.add(item.get('id'))
        self.items.append(_Part(kind, item.get('id'), call))
        return Pieces(call=self._shown(call, opening=True) if call else '')

    def _next_index(self, index: object, parts: list, what: str) -> None:
        """A part opens at the next index of its list: not at one already taken, and without skipping."""
        if index == len(parts) and type(index) is int:
            return
        if type(index) is int and 0 <= index < len(parts):
            raise _failure('duplicate_part', f'a second part opened as {what} in event {self.data_events}')
        raise _failure('part_index_skips', f'{what} opened in event {self.data_events}: the next was {len(parts)}')

    def _open_call(self, item: dict) -> ToolCall:
        event = self._offered_tools('a function call')
        call_id, name = item.get('call_id'), item.get('name')
        if not isinstance(call_id, str) or not call_id or not isinstance(name, str) or not name:
            raise _failure('call_without_id', f'a function call opened in event {event} without a call_id and a name')
        return self._new_call('a function call', call_id, name)

    def _open_item(self, body: dict, kinds: tuple[str, ...]) -> _Part:
        """The open output item (of one of these types) that the event is for."""
        index, kind, event = body.get('output_index'), body['type'], self.data_events
        item = self.items[index] if type(index) is int and 0 <= index < len(self.items) else None
        if item is None or item.kind not in kinds:
            raise _failure('part_not_open', f'{kind} in event {event} is for output_index {_shorten(repr(index))}, '
                                            f'where no {_RESPONSE_ITEMS[kinds[0]]} opened')
        if not item.open:
            raise _failure('event_after_close', f'{kind} in event {event} for output item {index}, after its '
                                                'response.output_item.done')
        if body.get('item_id', item.id) != item.id:
            raise _failure('part_not_open', f'{kind} in event {event} is for the item '
                                            f'{_preview(str(body["item_id"]))}, but output item {index} is '
                                            f'{_preview(str(item.id))}')
        return item

    def _open_part(self, body: dict, kinds: tuple[str, ...], closed_by: str | None) -> tuple[_Part, _Part]:
        """The output item and its open content part that the event is for, whose text ``closed_by``
        (when given) has not closed yet."""
        item = self._open_item(body, kinds)
        index, kind, event = body.get('content_index'), body['type'], self.data_events
        if item.kind == 'reasoning' and index == len(item.parts):
            item.parts.append(_Part('reasoning_text'))  # vLLM 0.32 sends no content_part.added for reasoning text
        part = item.parts[index] if type(index) is int and 0 <= index < len(item.parts) else None
        if part is None:
            raise _failure('part_not_open', f'{kind} in event {event} is for content part {_shorten(repr(index))} '
                                            f'of output item {body["output_index"]}, which never opened '
                                            '(no response.content_part.added)')
        if not part.open or (part.text_done and closed_by):
            after = closed_by if part.open else 'response.content_part.done'
            raise _failure('event_after_close', f'{kind} in event {event} for content part {index} of output item '
                                                f'{body["output_index"]}, after its {after}')
        return item, part

    def _take_part_added(self, body: dict) -> Pieces:
        item = self._open_item(body, ('message', 'reasoning'))
        index = body.get('content_index')
        self._next_index(index, item.parts, f'content part {_shorten(repr(index))} of output item {body["output_index"]}')
        part = body.get('part') if isinstance(body.get('part'), dict) else {}
        item.parts.append(_Part(part.get('type')))
        return _NOTHING

    def _take_part_done(self, body: dict) -> Pieces:
        _, part = self._open_part(body, ('message', 'reasoning'), None)
        copy = body.get('part') if isinstance(body.get('part'), dict) else {}
        if copy.get('type') == 'output_text':
            self._check_same('response.content_part.done', copy.get('text'), part.text)
        part.open = False
        return _NOTHING

    def _take_delta(self, body: dict) -> Pieces:
        """A piece of a message's text or of a reasoning item's, for its open part."""
        reasoning = body['type'] == 'response.reasoning_text.delta'
        _, part = self._open_part(body, ('reasoning',) if reasoning else ('message',),
                                  body['type'].replace('.delta', '.done'))
        delta = self._string(body, 'delta')
        part.pieces.append(delta)
        if delta:
            (self._add_reasoning if reasoning else self._add_text)(delta)
        return Pieces(reasoning=delta) if reasoning else Pieces(text=delta)

    def _take_text_done(self, body: dict) -> Pieces:
        kinds = ('reasoning',) if body['type'] == 'response.reasoning_text.done' else ('message',)
        _, part = self._open_part(body, kinds, body['type'])
        self._check_same(body['type'], self._string(body, 'text'), part.text)
        part.text_done = True
        return _NOTHING

    def _open_arguments(self, body: dict) -> ToolCall:
        item = self._open_item(body, ('function_call',))
        if item.text_done:
            raise _failure('event_after_close', f'{body["type"]} in event {self.data_events} for tool call '
                                                f'{item.call.index} ({item.call.name}), after its '
                                                'response.function_call_arguments.done')
        return item

    def _take_arguments_delta(self, body: dict) -> Pieces:
        call, delta = self._open_arguments(body).call, self._string(body, 'delta')
        if not delta:
            return _NOTHING
        self._add_call_arguments(call, delta)
        return Pieces(call=self._shown(call, delta))

    def _take_arguments_done(self, body: dict) -> Pieces:
        item = self._open_arguments(body)
        self._check_arguments('response.function_call_arguments.done', item.call, self._string(body, 'arguments'))
        if body.get('name', item.call.name) != item.call.name:
            raise _failure('closing_copy_differs', f'response.function_call_arguments.done in event {self.data_events} '
                                                   f'names {_preview(str(body["name"]))}, but tool call '
                                                   f'{item.call.index} opened as {item.call.name!r}')
        item.text_done = True
        return _NOTHING

    def _take_item_done(self, body: dict) -> Pieces:
        item = self._open_item(body, tuple(_RESPONSE_ITEMS))
        still_open = [index for index, part in enumerate(item.parts) if part.open and part.kind != 'reasoning_text']
        if still_open:
            raise _failure('part_still_open', f'response.output_item.done in event {self.data_events} while content '
                                              f'part {still_open[0]} of output item {body["output_index"]} was still '
                                              'open (no response.content_part.done)')
        self._check_item('response.output_item.done', item, body.get('item'))
        item.open = False
        return _NOTHING

    def _check_item(self, source: str, item: _Part, copy: object) -> None:
        """A closing copy of an output item must be the item the stream opened and assembled."""
        copy = copy if isinstance(copy, dict) else {}
        if (copy.get('type'), copy.get('id')) != (item.kind, item.id):
            raise _failure('closing_copy_differs', f'{source} says output item {self.items.index(item)} is '
                                                   f'{_shorten(repr(copy.get("type")))} {_shorten(repr(copy.get("id")))}, '
                                                   f'but it opened as {item.kind!r} {_shorten(repr(item.id))}')
        if item.call is not None:
            self._check_arguments(source, item.call, copy.get('arguments'))
        elif item.kind == 'message':
            self._check_same(source, _output_text([copy]), ''.join(part.text for part in item.parts))
        elif copy.get('content'):
            claimed = ''.join(part.get('text') or '' for part in copy['content'] if isinstance(part, dict))
            self._check_same(source, claimed, ''.join(part.text for part in item.parts))

    def _check_arguments(self, source: str, call: ToolCall, claimed: object) -> None:
        if claimed != call.arguments:
            raise _failure('closing_copy_differs', f'{source} says tool call {call.index} ({call.name}) has the '
                                                   f'arguments {_preview(str(claimed))}, but its deltas assembled '
                                                   f'{_preview(call.arguments)}')

    def _take_terminal(self, body: dict) -> Pieces:
        kind = body['type']
        self.terminal_event, self.done = kind, True
        response = body.get('response') if isinstance(body.get('response'), dict) else {}
        if kind == 'error':
            raise self._server_error({'message': body.get('message'), 'code': body.get('code')})
        if kind == 'response.failed':
            raise self._server_error(response.get('error') or {'message': 'no error given'}, 'response.failed')
        still_open = [index for index, item in enumerate(self.items) if item.open]
        if still_open:
            raise _failure('part_still_open', f'{kind} in event {self.data_events} while output item {still_open[0]} '
                                              'was still open (no response.output_item.done)')
        self._take_started(body)
        self.status = response.get('status') if isinstance(response.get('status'), str) else None
        details = response.get('incomplete_details')
        reason = details.get('reason') if isinstance(details, dict) else None
        self.incomplete_reason = reason if isinstance(reason, str) else None
        if response.get('usage') is not None:
            self.completion_tokens = _token_count(response['usage'], 'output_tokens')
        output = response.get('output') if isinstance(response.get('output'), list) else []
        self._check_same(kind, _output_text(output), self.text)
        self._check_output_calls(kind, output)
        claimed = [item.get('id') if isinstance(item, dict) else None for item in output]
        if claimed != [item.id for item in self.items]:
            raise _failure('closing_copy_differs', f'{kind} lists the output items {_preview(json.dumps(claimed))}, '
                                                   f'but the stream opened {_preview(json.dumps([i.id for i in self.items]))}')
        return _NOTHING

    def _check_output_calls(self, kind: str, output: list) -> None:
        """The terminal event's function calls must be the ones the stream assembled, in order."""
        claimed = [(item.get('call_id'), item.get('name'), item.get('arguments'))
                   for item in output if isinstance(item, dict) and item.get('type') == 'function_call']
        assembled = [(call.id, call.name, call.arguments) for call in self.calls]
        if claimed != assembled:
            raise _failure('closing_copy_differs', f'{kind} lists the function calls {_preview(json.dumps(claimed))}, '
                                                   f'but the stream assembled {_preview(json.dumps(assembled))}')

    # The grammar: each event type this client reads, and what takes it. An event for a part that is not
    # open (or whose text its .done closed) is refused by the part lookups above.
    _GRAMMAR = {'response.created': _take_created, 'response.in_progress': _take_started,
                'response.output_item.added': _take_item, 'response.output_item.done': _take_item_done,
                'response.content_part.added': _take_part_added, 'response.content_part.done': _take_part_done,
                'response.output_text.delta': _take_delta, 'response.output_text.done': _take_text_done,
                'response.reasoning_text.delta': _take_delta,
                'response.reasoning_text.done': _take_text_done,
                'response.function_call_arguments.delta': _take_arguments_delta,
                'response.function_call_arguments.done': _take_arguments_done,
                **dict.fromkeys(_RESPONSE_TERMINALS, _take_terminal)}

    @staticmethod
    def _string(body: dict, key: str) -> str:
        value = body.get(key)
        if not isinstance(value, str):
            raise _failure('field_type', f'expected {key} to be a string in {body["type"]}, '
                                         f'got {type(value).__name__}')
        return value

    @staticmethod
    def _check_same(source: str, claimed: object, assembled: str) -> None:
        if claimed != assembled:
            claimed = str(claimed)
            raise _failure('closing_copy_differs', f'{source} says the text is {_preview(claimed)} '
                                                   f'({len(claimed)} characters) but the deltas assembled '
                                                   f'{_preview(assembled)} ({len(assembled)})')

    eof_words = 'a terminal event (response.completed)'
    stop_words = 'status "completed"'
    length_words = 'status "incomplete" with incomplete_details.reason=max_output_tokens'
    budget_words = 'output budget exhausted: {}'

    def finish(self) -> str:
        # vLLM 0.32 ends a budget-exhausted response with response.completed whose status is "incomplete"
        if self.status == 'completed':
            return 'calls' if self.calls else 'stop'
        return 'length' if self.status == 'incomplete' and self.incomplete_reason == 'max_output_tokens' else 'other'

    def finish_words(self) -> str:
        carries = f'{self.terminal_event} carries status {self.status!r}'
        return carries + (f' (incomplete_details.reason={self.incomplete_reason})' if self.status == 'incomplete' else '')

    def finished_words(self) -> str:
        return self.finish_words()

    def unexpected_words(self, words: str) -> str:
        return f'not completed: {words}'

    def fields(self) -> dict:
        return {**super().fields(), 'finish_reason': None, 'response_status': self.status,
                'incomplete_reason': self.incomplete_reason}


def _output_text(output: object) -> str:
    """The text of the message items in a response's output."""
    return ''.join(part.get('text') or '' for item in (output if isinstance(output, list) else [])
                   if isinstance(item, dict) and item.get('type') == 'message'
                   for part in (item.get('content') if isinstance(item.get('content'), list) else [])
                   if isinstance(part, dict) and part.get('type') == 'output_text')


# The Messages grammar. The message goes through these states, and each state accepts these events;
# ping and error are accepted in every state, and an event type named nowhere here is skipped and
# listed in the record, as Anthropic tells clients to do with event types they do not know.
_MESSAGE_STATES = {'unstarted': ('message_start',),
                  'content': ('content_block_start', 'content_block_delta', 'content_block_stop', 'message_delta',
                              'message_stop'),
                  'finishing': ('message_delta', 'message_stop')}
# A content block's type and the delta types it accepts; the field of each delta that carries its piece.
_BLOCK_DELTAS = {'text': ('text_delta', 'citations_delta'), 'thinking': ('thinking_delta', 'signature_delta'),
                'redacted_thinking': (), 'tool_use': ('input_json_delta',)}
_DELTA_PIECES = {'text_delta': 'text', 'thinking_delta': 'thinking', 'input_json_delta': 'partial_json'}


class MessagesEvents(StreamValidator):
    """Validates one streamed answer of the Anthropic Messages API (/v1/messages), as a grammar (docs/apis.md).

    Every event's ``event`` field names the ``type`` in its data. The message
    goes through ``_MESSAGE_STATES``: blocks numbered from 0 follow one another
    in ``content``, each content_block_start, its deltas (``_BLOCK_DELTAS``)
    and content_block_stop; the first message_delta, with every block
    stopped, moves it to ``finishing``; message_stop ends it. ``ping`` may
    come anywhere; an ``error`` event keeps the server's type and message.
    The answer is the text blocks; thinking blocks go to the reasoning; a
    tool_use block is a tool call whose input is its input_json_delta pieces.
    """

    api = 'messages'
    parser = TypedEvents
    terminal = 'message_stop'
    calls_finish = 'stop_reason=tool_use'

    def __init__(self, expect_finish: str = 'stop', max_tokens: int | None = None,
                 spec: AnswerSpec | None = None) -> None:
        super().__init__(expect_finish, max_tokens, spec)
        self.state = 'unstarted'
        self.stop_reason: str | None = None
        self.blocks: list[_Part] = []

    def accept(self, event: tuple[str, str]) -> Pieces:
        """Apply one (type, data) event; return the answer text, reasoning text and tool-call piece it carried."""
        kind, body = self._typed_body(event, 'message_stop')
        if kind == 'error':
            raise self._server_error(body)
        take = self._TAKE.get(kind)
        if take is None:
            self.skipped_events.append(kind)
            return _NOTHING
        if kind != 'ping' and kind not in _MESSAGE_STATES[self.state]:
            raise self._out_of_state(kind)
        return take(self, body)

    def _out_of_state(self, kind: str) -> StreamError:
        event = self.data_events
        if self.state == 'unstarted':
            return _failure('event_out_of_order', f'{kind} arrived in event {event}, before message_start')
        if kind == 'message_start':
            return _failure('event_out_of_order', f'a second message_start in event {event}')
        return _failure('event_after_close', f'{kind} in event {event}, after message_delta ended the content')

    def _take_ping(self, body: dict) -> Pieces:
        return _NOTHING

    def _take_message_start(self, body: dict) -> Pieces:
        self.state = 'content'
        message = body.get('message')
        if isinstance(message, dict) and isinstance(message.get('id'), str):
            self.response_id = message['id']
        return _NOTHING

    def _take_block_start(self, body: dict) -> Pieces:
        index, block, event = body.get('index'), body.get('content_block'), self.data_events
        kind = block.get('type') if isinstance(block, dict) else None
        if index != len(self.blocks):
            raise _failure('part_index_skips', f'content_block_start for block {_shorten(repr(index))} in event '
                                               f'{event}: the next block was {len(self.blocks)}')
        if self.blocks and self.blocks[-1].open:
            raise _failure('event_out_of_order', f'content_block_start for block {index} in event {event} while '
                                                 f'block {index - 1} was still open (no content_block_stop)')
        if kind not in _BLOCK_DELTAS:
            raise _failure('unsupported_part', f'a content block of type {_shorten(repr(kind))} in event '
                                               f'{event}; this client reads text, thinking and tool_use blocks')
        call = None
        if kind == 'tool_use':
            call_id, name = block.get('id'), block.get('name')
            self._offered_tools('a tool_use block')
            if not isinstance(call_id, str) or not call_id or not isinstance(name, str) or not name:
                raise _failure('call_without_id', f'a tool_use block started in event {event} without an id '
                                                  'and a name')
            call = self._new_call('a tool_use block', call_id, name)
        self.blocks.append(_Part(kind, call=call))
        return Pieces(call=self._shown(call, opening=True) if call else '')

    def _open_block(self, body: dict, what: str) -> _Part:
        index = body.get('index')
        if type(index) is not int or not 0 <= index < len(self.blocks):
            raise _failure('part_not_open', f'{what} for block {_shorten(repr(index))} in event {self.data_events}, '
                                            'which never started')
        block = self.blocks[index]
        if not block.open:
            raise _failure('event_after_close', f'{what} for block {index} in event {self.data_events}, after its '
                                                'content_block_stop')
        return block

    def _take_block_delta(self, body: dict) -> Pieces:
        block = self._open_block(body, 'content_block_delta')
        delta = body.get('delta') if isinstance(body.get('delta'), dict) else {}
        kind = delta.get('type')
        if kind not in _BLOCK_DELTAS[block.kind]:
            raise _failure('delta_type', f'a {_shorten(str(kind))} in event {self.data_events} for block '
                                         f'{body["index"]}, a {block.kind} block')
        field = _DELTA_PIECES.get(kind)
        if field is None:  # a signature_delta or a citations_delta: nothing to show
            return _NOTHING
        piece = delta.get(field)
        if not isinstance(piece, str):
            raise _failure('field_type', f'expected {kind}.{field} to be a string in event {self.data_events}, '
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

    def _still_open(self, kind: str) -> None:
        """The content ends (message_delta, message_stop) only with every block stopped."""
        still_open = [index for index, block in enumerate(self.blocks) if block.open]
        if still_open:
            raise _failure('part_still_open', f'{kind} in event {self.data_events} while block {still_open[0]} '
                                              'was still open (no content_block_stop)')

    def _take_message_delta(self, body: dict) -> Pieces:
        self._still_open('message_delta')
        delta = body.get('delta') if isinstance(body.get('delta'), dict) else {}
        reason = delta.get('stop_reason')
        if reason is not None and not isinstance(reason, str):
            raise _failure('field_type', f'expected stop_reason to be a string in event {self.data_events}, '
                                         f'got {type(reason).__name__}')
        if reason is not None and self.stop_reason not in (None, reason):
            raise _failure('closing_copy_differs', f'message_delta in event {self.data_events} says stop_reason='
                                                   f'{_shorten(reason)}, but an earlier one said {self.stop_reason}')
        self.state, self.stop_reason = 'finishing', reason or self.stop_reason
        if body.get('usage') is not None:
            self.completion_tokens = _token_count(body['usage'], 'output_tokens')
        return _NOTHING

    def _take_message_stop(self, body: dict) -> Pieces:
        self._still_open('message_stop')
        self.done = True
        return _NOTHING

    _TAKE = {'ping': _take_ping, 'message_start': _take_message_start, 'content_block_start': _take_block_start,
             'content_block_delta': _take_block_delta, 'content_block_stop': _take_block_stop,
             'message_delta': _take_message_delta, 'message_stop': _take_message_stop}

    eof_words = 'message_stop'
    stop_words = 'stop_reason end_turn, stop_sequence or tool_use'
    length_words = 'stop_reason=max_tokens'
    call_noun = 'tool_use block'
    _FINISHES = {'end_turn': 'stop', 'stop_sequence': 'stop', 'tool_use': 'calls', 'max_tokens': 'length'}

    def finish(self) -> str | None:
        # vLLM says tool_use also when the choice named the tool
        return None if self.stop_reason is None else self._FINISHES.get(self.stop_reason, 'other')

    def finish_words(self) -> str:
        return f'stop_reason={self.stop_reason}'

    def no_finish_words(self) -> str:
        return 'message_stop arrived, but no message_delta said its stop_reason'

    def fields(self) -> dict:
        return {**super().fields(), 'finish_reason': self.stop_reason}


VALIDATORS = {'chat': ChatChunks, 'completions': CompletionChunks, 'responses': ResponseEvents,
              'messages': MessagesEvents}


def _server_error_fields(body: object) -> dict:
    """message/type/code from an error object: vLLM's nested or flat forms, or a bare string."""
    error = body.get('error', body) if isinstance(body, dict) else body
    if isinstance(error, str):
        error = {'message': error}
    if not isinstance(error, dict):
        error = {'message': repr(error)}
    message = error.get('message')
    message = '' if message is None else str(message)
    return {'message': message[:_MAX_SERVER_MESSAGE],
            'type': error.get('type') if isinstance(error.get('type'), str) else None,
            'code': error.get('code') if isinstance(error.get('code'), (int, str)) else None}


def _describe_server_error(error: dict, said: tuple[str, ...] = ()) -> str:
    """The server's message, quoted, and its type and code, those the words in ``said`` (the status
    line already shown) do not repeat."""
    repeated = {word.lower().replace(' ', '') for word in said}
    kind = ' '.join(str(part) for part in (error['type'], error['code'])
                    if part is not None and str(part).lower().replace(' ', '') not in repeated)
    message = error['message'] or '(empty message)'
    return f'{message!r}' + (f' ({kind})' if kind else '')


# ---------------------------------------------------------------------------
# The answer as a whole: the signals one stream shows, the unstreamed twin, the cross-check (sans-IO)
# ---------------------------------------------------------------------------

_TOKEN_ID_APIS = ('chat', 'completions')  # the APIs on which vLLM 0.32 returns token ids (return_token_ids)
_STREAMED_ONLY_KEYS = ('stream_options',)  # request keys vLLM refuses on an unstreamed request
_MAX_UNSTREAMED_BODY = 16 * 1024 * 1024    # bytes of an unstreamed answer that are read
# The markup tool-call parsers extract (hermes, llama3, mistral, functionary, gpt-oss harmony, kimi, deepseek).
_TOOL_MARKUP = ('<tool_call>', '</tool_call>', '<|python_tag|>', '[TOOL_CALLS]', '<function=', '<|channel|>',
               '<|call|>', '<|tool_calls_section_begin|>', '<|tool_call_begin|>', '<｜tool▁calls▁begin｜>',
               '<｜tool▁call▁begin｜>')
# How each API's finish words end an answer: stop, length (the output budget), tool_calls.
_ENDED_AS = {'stop': 'stop', 'end_turn': 'stop', 'stop_sequence': 'stop', 'completed': 'stop',
            'length': 'length', 'max_tokens': 'length', 'incomplete (max_output_tokens)': 'length',
            'tool_calls': 'tool_calls', 'tool_use': 'tool_calls'}


class AnsweredCall(typing.NamedTuple):
    """A tool call of a finished answer: its name and arguments; ``textual`` is false when the arguments
    arrived as a JSON value rather than text (an unstreamed Messages tool_use input), so only their JSON
    can be compared."""

    name: str
    arguments: str
    textual: bool = True


@dataclasses.dataclass(frozen=True)
class Answer:
    """One answer, streamed or not, in the terms the signals and the cross-check compare. ``finish`` is
    in the API's words (finish_reason, stop_reason, a Responses status); ``token_ids`` is None when the
    server sent none."""

    text: str
    reasoning: str
    calls: tuple[AnsweredCall, ...]
    finish: str | None
    completion_tokens: int | None
    token_ids: tuple[int, ...] | None = None

    @property
    def ended_as(self) -> str | None:
        """stop, length or tool_calls (a stop with calls is a tool-call finish), or None for other words."""
        ended = _ENDED_AS.get(self.finish)
        return 'tool_calls' if self.calls and ended in ('stop', 'tool_calls') else ended


def _responses_finish(status: object, reason: object) -> str | None:
    if not isinstance(status, str):
        return None
    return f'{status} ({reason})' if isinstance(reason, str) and reason else status


_STREAMED_FINISH = {'chat': lambda v: v.finish_reason, 'completions': lambda v: v.finish_reason,
                   'responses': lambda v: _responses_finish(v.status, v.incomplete_reason),
                   'messages': lambda v: v.stop_reason}


def _streamed_answer(validator: StreamValidator) -> Answer:
    """The answer a validator assembled."""
    return Answer(validator.text, validator.reasoning,
                  tuple(AnsweredCall(call.name, call.arguments) for call in validator.calls),
                  _STREAMED_FINISH[validator.api](validator), validator.completion_tokens,
                  None if validator.token_ids is None else tuple(validator.token_ids))


def _budget_used_by_tool_call(answer: Answer, max_tokens: int) -> str | None:
    """Why a tool-call finish is not trusted: the usage shows the whole output budget used, which is how
    a call cut by max_tokens looks when the server relabels it (vLLM #53269, #58228)."""
    if answer.ended_as != 'tool_calls' or None in (answer.completion_tokens, max_tokens) or \
            answer.completion_tokens < max_tokens:
        return None
    return (f'the whole budget of {max_tokens} tokens was used; vLLM reports a call cut by max_tokens as '
            f'"{answer.finish}"; raise --max-tokens')


def _tool_markup_in_text(answer: Answer, spec: AnswerSpec) -> str | None:
    """Why visible text is not the answer, when tools were offered: it holds tool-call markup, so the
    server's parser failed to extract a call (vLLM #47903, #50512)."""
    if not spec.tools:
        return None
    found = sorted((position, marker) for marker in _TOOL_MARKUP for position in [answer.text.find(marker)]
                   if position >= 0)
    if not found:
        return None
    position, marker = found[0]
    return (f'tool-call markup {marker} in the visible text at character {position} '
            f'({_preview(answer.text[max(0, position - 20):position + 40])}): the server\'s tool-call parser '
            'did not extract a call')


def _answer_problem(validator: StreamValidator) -> StreamError | None:
    """Why the streamed answer is not a finished one, or None when it is: the validator's outcome, and
    the two signals of a finished stream. The whole budget used by a tool-call finish comes first (it
    explains arguments cut short), markup in the text after the outcome. It reads the stream alone:
    no later phase (the unstreamed twin of --cross-check) can clear what it finds."""
    outcome = validator.outcome()
    if not validator.done:
        return outcome
    answer = _streamed_answer(validator)
    budget = _budget_used_by_tool_call(answer, validator.max_tokens) if validator.expect_finish == 'stop' else None
    if budget:
        return _failure('budget_used_by_tool_call', budget)
    if outcome:
        return outcome
    markup = _tool_markup_in_text(answer, validator.spec)
    return _failure('tool_markup_in_text', markup) if markup else None


def _tokens_per_event(validator: StreamValidator) -> dict | None:
    """How many token ids the events that carried any had (several per event is the known trigger of
    streaming bugs), or None when the server sent no token ids."""
    if validator.token_ids is None:
        return None
    counts = sorted(validator.tokens_per_event)
    median = (counts[(len(counts) - 1) // 2] + counts[len(counts) // 2]) / 2 if counts else None
    return {'events': len(counts), 'tokens': len(validator.token_ids), 'most': counts[-1] if counts else None,
            'median': int(median) if median is not None and median.is_integer() else median}


def _unstreamed_body(data: bytes) -> dict:
    """The JSON object of an unstreamed answer, strictly parsed; an error object becomes the server's error."""
    try:
        value = strict_json(data.decode('utf-8'))
    except UnicodeDecodeError:
        raise _failure('unstreamed_malformed', 'the unstreamed answer is not UTF-8') from None
    except ValueError as exc:
        raise _failure('unstreamed_malformed', f'the unstreamed answer is not strict JSON ({exc}): '
                                               f'{_preview(data.decode("utf-8", "replace"))}') from None
    if not isinstance(value, dict):
        raise _failure('unstreamed_malformed', f'the unstreamed answer is {_seen(value)}, not a JSON object')
    if value.get('error') is not None:  # OpenAI's objects carry "error": null when there is none
        error = _server_error_fields(value)
        raise _failure('unstreamed_error', 'the unstreamed answer is an error: ' + _describe_server_error(error),
                       server_error=error)
    return value


def _field(owner: dict, key: str, types: tuple, what: str) -> object:
    value = owner.get(key)
    if not isinstance(value, types):
        raise _failure('unstreamed_malformed', f'the unstreamed answer\'s {what} is {_seen(value)}')
    return value


def _one_choice(body: dict) -> dict:
    choices = body.get('choices')
    if not isinstance(choices, list) or len(choices) != 1:
        count = len(choices) if isinstance(choices, list) else _seen(choices)
        raise _failure('unstreamed_malformed', f'expected one choice in the unstreamed answer (n=1), got {count}')
    choice = choices[0]
    if not isinstance(choice, dict) or choice.get('index') != 0:
        raise _failure('unstreamed_malformed', 'expected the unstreamed answer\'s choice to have index 0')
    return choice


def _token_list(value: object) -> tuple[int, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(type(token) is int for token in value):
        raise _failure('unstreamed_malformed', f'expected the unstreamed token_ids to be a list of integers, '
                                               f'got {_seen(value)}')
    return tuple(value)


def _usage(body: dict, key: str) -> int | None:
    return None if body.get('usage') is None else _token_count(body['usage'], key)


def _unstreamed_chat(body: dict) -> Answer:
    choice = _one_choice(body)
    message = _field(choice, 'message', (dict,), 'message')
    calls = []
    for number, call in enumerate(_field(message, 'tool_calls', (list, type(None)), 'tool_calls') or []):
        function = call.get('function') if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get('name'), str) \
                or not isinstance(function.get('arguments'), str):
            raise _failure('unstreamed_malformed', f'unstreamed tool call {number} has no function name and '
                                                   'arguments')
        calls.append(AnsweredCall(function['name'], function['arguments']))
    reasoning = message.get('reasoning') if message.get('reasoning') is not None else message.get('reasoning_content')
    if not isinstance(reasoning, (str, type(None))):
        raise _failure('unstreamed_malformed', f'the unstreamed answer\'s reasoning is {_seen(reasoning)}')
    return Answer(_field(message, 'content', (str, type(None)), 'content') or '', reasoning or '', tuple(calls),
                  _field(choice, 'finish_reason', (str, type(None)), 'finish_reason'),
                  _usage(body, 'completion_tokens'), _token_list(choice.get('token_ids')))


def _unstreamed_completion(body: dict) -> Answer:
    choice = _one_choice(body)
    return Answer(_field(choice, 'text', (str,), 'text'), '', (),
                  _field(choice, 'finish_reason', (str, type(None)), 'finish_reason'),
                  _usage(body, 'completion_tokens'), _token_list(choice.get('token_ids')))


def _unstreamed_response(body: dict) -> Answer:
    output = _field(body, 'output', (list,), 'output')
    items = [item for item in output if isinstance(item, dict)]
    calls = tuple(AnsweredCall(item.get('name'), item.get('arguments')) for item in items
                  if item.get('type') == 'function_call')
    if any(not isinstance(call.name, str) or not isinstance(call.arguments, str) for call in calls):
        raise _failure('unstreamed_malformed', 'an unstreamed function call has no name and arguments')
    reasoning = ''.join(part.get('text') or '' for item in items if item.get('type') == 'reasoning'
                        for part in (item.get('content') if isinstance(item.get('content'), list) else [])
                        if isinstance(part, dict))
    details = body.get('incomplete_details')
    return Answer(_output_text(output), reasoning, calls,
                  _responses_finish(body.get('status'), details.get('reason') if isinstance(details, dict) else None),
                  _usage(body, 'output_tokens'))


def _unstreamed_message(body: dict) -> Answer:
    blocks = [block for block in _field(body, 'content', (list,), 'content') if isinstance(block, dict)]
    calls = []
    for block in blocks:
        if block.get('type') == 'tool_use':
            if not isinstance(block.get('name'), str) or 'input' not in block:
                raise _failure('unstreamed_malformed', 'an unstreamed tool_use block has no name and input')
            calls.append(AnsweredCall(block['name'], json.dumps(block['input'], ensure_ascii=False), False))
    return Answer(''.join(block.get('text') or '' for block in blocks if block.get('type') == 'text'),
                  ''.join(block.get('thinking') or '' for block in blocks if block.get('type') == 'thinking'),
                  tuple(calls), _field(body, 'stop_reason', (str, type(None)), 'stop_reason'),
                  _usage(body, 'output_tokens'))


_UNSTREAMED_ANSWERS = {'chat': _unstreamed_chat, 'completions': _unstreamed_completion,
                      'responses': _unstreamed_response, 'messages': _unstreamed_message}


def unstreamed_answer(api: str, data: bytes) -> Answer:
    """The answer in the body of an unstreamed (``stream: false``) response with status 200, judged in
    its own right: strict JSON, one choice, its text, reasoning, tool calls, finish, usage and token
    ids. StreamError when it is not one."""
    return _UNSTREAMED_ANSWERS[api](_unstreamed_body(data))


def _first_divergence(streamed: tuple[int, ...], unstreamed: tuple[int, ...]) -> int | None:
    """The index of the first token that differs (or where the shorter one ends); None when they are equal."""
    if streamed == unstreamed:
        return None
    return next((index for index, (a, b) in enumerate(zip(streamed, unstreamed)) if a != b),
                min(len(streamed), len(unstreamed)))


def _text_difference(what: str, streamed: str, unstreamed: str) -> str:
    at = len(os.path.commonprefix([streamed, unstreamed]))
    window = slice(max(0, at - 20), at + 40)
    return (f'streamed {what} and unstreamed differ from character {at}: {_preview(streamed[window])} '
            f'and {_preview(unstreamed[window])}')


def _same_json(streamed: str, unstreamed: str) -> bool:
    try:
        return _json_key(strict_json(streamed)) == _json_key(strict_json(unstreamed))
    except ValueError:
        return False


def _call_difference(index: int, streamed: AnsweredCall, unstreamed: AnsweredCall) -> str | None:
    """How two tool calls differ: by name, or by arguments as JSON. Arguments equal as JSON but not as text
    are the same call: vLLM 0.32's unstreamed path re-serializes them (json.dumps), whitespace and all."""
    if streamed.name != unstreamed.name:
        return f'streamed tool call {index} is {streamed.name!r} and unstreamed {unstreamed.name!r}'
    if streamed.arguments == unstreamed.arguments or _same_json(streamed.arguments, unstreamed.arguments):
        return None
    return (f'streamed tool call {index} has arguments {_shorten(streamed.arguments, 80)} and unstreamed '
            f'{_shorten(unstreamed.arguments, 80)}')


def _text_only_differences(streamed: Answer, unstreamed: Answer) -> list[str]:
    """The tool calls whose arguments are equal as JSON but not as text: kept in the record, not a difference."""
    return [f'tool call {index} has arguments equal as JSON, not as text' for index, (a, b)
            in enumerate(zip(streamed.calls, unstreamed.calls))
            if a.name == b.name and b.textual and a.arguments != b.arguments and _same_json(a.arguments, b.arguments)]


def compare_answers(streamed: Answer, unstreamed: Answer) -> list[str]:
    """The differences between a streamed answer and its unstreamed twin in the user's terms, the first
    first: text and reasoning, the tool calls (names and order, arguments as JSON; ids may differ), the
    finish and the completion-token count. Empty when they are the same answer."""
    differences = [_text_difference(what, a, b) for what, a, b in (('text', streamed.text, unstreamed.text),
                                                                    ('reasoning', streamed.reasoning,
                                                                     unstreamed.reasoning)) if a != b]
    if len(streamed.calls) != len(unstreamed.calls):
        differences.append(f'the stream has {_count(len(streamed.calls), "tool call")} and the unstreamed '
                           f'answer {len(unstreamed.calls)}')
    differences += [problem for index, pair in enumerate(zip(streamed.calls, unstreamed.calls))
                    for problem in [_call_difference(index, *pair)] if problem]
    if streamed.finish != unstreamed.finish and unstreamed.finish is not None:  # None: unstreamed_problem says so
        differences.append(f'streamed finish {streamed.finish} and unstreamed {unstreamed.finish}')
    if None not in (streamed.completion_tokens, unstreamed.completion_tokens) \
            and streamed.completion_tokens != unstreamed.completion_tokens:
        differences.append(f'streamed usage counts {_count(streamed.completion_tokens, "completion token")} and '
                           f'unstreamed {unstreamed.completion_tokens}')
    return differences


def cross_check_record(streamed: Answer, status: int | None, unstreamed: Answer | None,
                       problem: str | None) -> dict:
    """The record's ``cross_check``: whether the pair is comparable (both sent token ids: true when they
    are equal, false when they diverge; null without them), whether the answers are the same, and how
    they differ. ``problem`` says why the unstreamed request failed, or why its answer is not finished."""
    streamed_ids = streamed.token_ids
    unstreamed_ids = unstreamed.token_ids if unstreamed is not None else None
    comparable = None if streamed_ids is None or unstreamed_ids is None else streamed_ids == unstreamed_ids
    differences = compare_answers(streamed, unstreamed) if unstreamed is not None else []
    return {'comparable': comparable, 'same': None if unstreamed is None else not differences,
            'differences': differences,
            'notes': _text_only_differences(streamed, unstreamed) if unstreamed is not None else [],
            'diverged_at_token': _first_divergence(streamed_ids, unstreamed_ids) if comparable is False else None,
            'token_ids': {'streamed': None if streamed_ids is None else len(streamed_ids),
                          'unstreamed': None if unstreamed_ids is None else len(unstreamed_ids)},
            'completion_tokens': {'streamed': streamed.completion_tokens,
                                  'unstreamed': unstreamed.completion_tokens if unstreamed else None},
            'unstreamed_status': status, 'unstreamed_finish': unstreamed.finish if unstreamed else None,
            'unstreamed_problem': problem,
            'unstreamed_text': unstreamed.text if unstreamed else None,
            'unstreamed_tool_calls': [{'name': call.name, 'arguments': call.arguments}
                                      for call in unstreamed.calls] if unstreamed else None}


def _seeded(extra: object) -> bool:
    """Whether --extra fixes the sampling seed: an integer "seed" (null or a string fixes nothing)."""
    return isinstance(extra, dict) and type(extra.get('seed')) is int


def _unstreamed_problem(answer: Answer, expect_finish: str = 'stop') -> str | None:
    """Why an unstreamed answer is not a finished one, judged by its finish alone (a fixed-length load
    expects the budget to end it)."""
    if answer.ended_as in (('length',) if expect_finish == 'length' else ('stop', 'tool_calls')):
        return None
    said = 'it has no finish' if answer.finish is None else f'its finish is {answer.finish}'
    return f'the unstreamed answer did not finish: {said}'


def _cross_check_failure(cross_check: dict | None) -> StreamError | None:
    """The cross-check failure of a pair: the same tokens, another answer. Pairs without token ids, or
    whose tokens diverged, never fail: a different generation cannot be ruled out."""
    if not cross_check or cross_check['comparable'] is not True or cross_check['same'] is not False:
        return None
    return _failure('cross_check_differs', f'the same {_count(cross_check["token_ids"]["streamed"], "token")}, '
                                           f'but {cross_check["differences"][0]}')


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

    def get_all(self, name: str) -> list[str]:
        name = name.lower()
        return [value for key, value in self.headers if key.lower() == name]

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
    return _ResponseHead(int(status[3]), (status[4] or b'').decode('latin-1'), f'{status[1].decode()}.{status[2].decode()}',
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


_MAX_CHUNK_LINE = 4096        # bytes of one chunk-size or trailer line
_MAX_TRAILER_BYTES = 16_384   # bytes of the whole trailer section

# RFC 9112 7.1.1: chunk-ext = *( BWS ";" BWS chunk-ext-name [ BWS "=" BWS chunk-ext-val ] )
_CHUNK_EXTENSIONS = re.compile(rb'(?:[ \t]*;[ \t]*' + _TOKEN + rb'(?:[ \t]*=[ \t]*(?:' + _TOKEN + b'|' + _QUOTED
                               + rb'))?)*[ \t]*')


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
        self._state = _Chunk.SIZE   # SIZE -> (DATA -> DATA_END ->) SIZE ... SIZE(0) -> TRAILER -> COMPLETE

    @property
    def complete(self) -> bool:
        return self._state is _Chunk.COMPLETE

    def feed(self, raw: bytes) -> bytes:
        SIZE, DATA, DATA_END, COMPLETE, HEX = _Chunk.SIZE, _Chunk.DATA, _Chunk.DATA_END, _Chunk.COMPLETE, self._HEX
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
                    state = _Chunk.TRAILER
                    continue
                stop = pos + size
                if stop + 2 <= end:  # the whole chunk and its CRLF are here: take them in one step
                    if buf[stop:stop + 2] != b'\r\n':
                        raise _failure('bad_chunk_end', f'chunk data not followed by CRLF: {bytes(buf[stop:stop + 8])!r}')
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
            raise _failure('chunk_line_too_long', f'{self._state.value} longer than {_MAX_CHUNK_LINE} bytes without a line end')
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
        size = int(digits, 16)  # base 16 has no digit limit, and the line is bounded
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
        raise _failure('unsupported_encoding', f'unsupported content-encoding {", ".join(head.get_all("Content-Encoding"))!r}')
    if head.get_all('Transfer-Encoding'):
        if head.version == '1.0':  # RFC 9112, 6.1: a hop that speaks only HTTP/1.0 may have passed chunks on
            raise _failure('http10_transfer_encoding', 'an HTTP/1.0 response with Transfer-Encoding: its framing '
                                                       'is faulty, as an HTTP/1.0 hop may have passed it on unread')
        if head.field_list('Transfer-Encoding') != ['chunked']:
            raise _failure('unsupported_encoding', f'unsupported transfer-encoding '
                                                   f'{", ".join(head.get_all("Transfer-Encoding"))!r}; expected chunked alone')
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
            raise _failure('bad_content_length', f'invalid Content-Length {_shorten(", ".join(parts))!r}: expected digits')
        significant = part.lstrip('0') or '0'
        if len(significant) > len(str(_MAX_BODY_SIZE)) or int(significant) > _MAX_BODY_SIZE:  # no int() of 4,300 digits
            raise _failure('bad_content_length', f'Content-Length {_shorten(significant, 30)} is over the bound of '
                                                 f'{_MAX_BODY_SIZE} bytes')
        values.add(int(significant))
    if len(values) != 1:
        raise _failure('bad_content_length', f'Content-Length values disagree: {_shorten(", ".join(parts))!r}')
    return values.pop()


# ---------------------------------------------------------------------------
# The whole response (sans-IO): bytes in, the answer's pieces and the verdict out
# ---------------------------------------------------------------------------

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
    the break, and nothing more should be fed. ``message_complete`` says the message ended as its framing promised. A status
    other than 200 becomes an ``http`` error once up to MAX_ERROR_BODY bytes of its body (the
    server's own message) have arrived, or the connection closed. judge() gives the verdict.
    """

    def __init__(self, validator: StreamValidator, capture: Capture | None = None) -> None:
        self.validator = validator
        self.events = validator.parser()
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
        return self._heads.rest

    def _feed_body(self, data: bytes, pieces: list[Pieces]) -> None:
        accept = self.validator.accept
        for event in self.events.feed(self.body.feed(data)):
            pieces.append(accept(event))
        if self.body.overrun:
            raise self.body.overrun_failure()

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

    def answer(self, api: str) -> Answer:
        """The answer of the whole response; StreamError for a broken message, a status other than 200
        (with the server's message) or a body that is not an answer of this API."""
        if self.error is not None:
            raise self.error
        body = b''.join(self._parts)
        if self.head.status != 200:
            raise _status_failure(self.head, body[:_MAX_ERROR_BODY])
        return unstreamed_answer(api, body)


# ---------------------------------------------------------------------------
# The request (checked before any connection)
# ---------------------------------------------------------------------------

_DEFAULT_URL = 'http://127.0.0.1:8000/v1/chat/completions'
_DEFAULT_PROMPT = 'Reply with exactly the word READY.'

# The APIs, by the end of the URL path that serves them.
_API_PATHS = {'/v1/chat/completions': 'chat', '/v1/completions': 'completions', '/v1/responses': 'responses',
             '/v1/messages': 'messages'}
# Per API, the request keys that have a flag of their own (or no say at all), which --extra may not set.
_RESERVED_KEYS = {
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
_FINISHES = ('stop', 'length')
_ANTHROPIC_VERSION = '2023-06-01'  # the anthropic-version header of a /v1/messages request


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host.lower().rstrip('.') == 'localhost'


def _positive_finite(value: float) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value) and value > 0


@dataclasses.dataclass(frozen=True)
class _Proxy:
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


def _proxy_from_environment(scheme: str, host: str, environ: typing.Mapping[str, str]) -> _Proxy | None:
    """The proxy that HTTPS_PROXY/https_proxy (HTTP_PROXY/http_proxy for http; lower case first, as
    curl reads them, and an empty one as unset) names for this host, unless NO_PROXY/no_proxy covers
    it; loopback never goes through a proxy. ValueError for a proxy URL this client cannot use."""
    if _is_loopback(host):
        return None
    names = ('https_proxy', 'HTTPS_PROXY') if scheme == 'https' else ('http_proxy', 'HTTP_PROXY')
    url = next((environ[name] for name in names if environ.get(name)), None)
    no_proxy = next((environ[name] for name in ('no_proxy', 'NO_PROXY') if environ.get(name)), '')
    if url is None or _bypasses_proxy(host, no_proxy):
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
        return _Proxy(parts.hostname, port)
    pair = f'{user}:{password}'
    if not pair.isascii() or not pair.isprintable():
        raise ValueError(f'the proxy credentials in {names[1]} hold characters that cannot go into a header')
    authorization = 'Basic ' + base64.b64encode(pair.encode()).decode()
    return _Proxy(parts.hostname, port, authorization, tuple(secret for secret in (authorization, pair, password)
                                                            if secret))


def _bypasses_proxy(host: str, no_proxy: str) -> bool:
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
    proxy: _Proxy | None = None  # the forward proxy https goes through, if one does
    twin: 'PreparedRequest | None' = dataclasses.field(default=None, repr=False)  # --cross-check's unstreamed twin

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
        if self.api not in VALIDATORS or self.expect_finish not in _FINISHES:
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
        raise ValueError(f'expected an http:// or https:// URL such as {_DEFAULT_URL}, got '
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


def _api_of(path: str, api: str | None = None) -> str:
    """The API a request goes to: the one named, or the one its URL path ends with."""
    if api is not None:
        if api not in VALIDATORS:
            raise ValueError(f'unknown api {api!r}; choose from {", ".join(VALIDATORS)}')
        return api
    for suffix, name in _API_PATHS.items():
        if path.endswith(suffix):
            return name
    base = path.rstrip('/')
    hint = (f'; did you mean {base}/chat/completions? (an SDK\'s base_url ends in /v1; give the endpoint)'
            if base.endswith('/v1') else '')
    raise ValueError(f'cannot tell the API from the URL path {path!r}: expected a path ending in '
                     f'{", ".join(_API_PATHS)}, or --api {"|".join(VALIDATORS)} for a server mounted elsewhere{hint}')


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
        if key in _RESERVED_KEYS[api]:
            flag = _RESERVED_KEYS[api][key]
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


_SCHEMA_REFUSALS = {'invalid': 'not a valid schema', 'remote': 'a schema that needs another document',
                   'unsupported': 'a schema that cannot be checked faithfully'}  # SchemaError.kind, in a sentence


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
        if not isinstance(json_schema, (dict, bool)):
            raise ValueError(f'json_schema must be a JSON object or a boolean (a schema), not {_seen(json_schema)}')
        try:
            schema = JsonSchema(json_schema)
        except SchemaError as exc:
            raise ValueError(f'json_schema is {_SCHEMA_REFUSALS[exc.kind]}: {exc}') from None
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
        raise ValueError(f'tools[{number}] ({name}) has parameters that are {_SCHEMA_REFUSALS[exc.kind]}: {exc}') from None


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
            fields['tool_choice'] = ({'type': {'required': 'any'}.get(choice, choice)} if choice in _TOOL_CHOICES
                                     else {'type': 'tool', 'name': choice})
        elif api == 'responses':  # the Responses API takes the function's keys flattened into the tool
            fields['tools'] = [{'type': 'function', **tool['function']} for tool in tools]
            fields['tool_choice'] = choice if choice in _TOOL_CHOICES else {'type': 'function', 'name': choice}
        else:
            fields['tools'] = tools
            fields['tool_choice'] = choice if choice in _TOOL_CHOICES else {'type': 'function',
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


_IGNORE_UNEXPECTED_EOF = getattr(ssl, 'OP_IGNORE_UNEXPECTED_EOF', 0)  # OpenSSL 3 only


def _ssl_context(ca_file: str | None) -> ssl.SSLContext:
    """The default context, with an end of the connection without close_notify reported, never taken for
    one with it (OpenSSL's OP_IGNORE_UNEXPECTED_EOF, which some Pythons and configurations set)."""
    try:
        context = ssl.create_default_context(cafile=ca_file)
    except (OSError, ssl.SSLError) as exc:
        raise ValueError(f'cannot load --ca-file {ca_file!r}: {exc.strerror or exc}') from None
    context.options &= ~_IGNORE_UNEXPECTED_EOF
    return context


def prepare(url: str, model: str, prompt: str, *, max_tokens: int = 128, idle: float = 10.0,
            deadline: float = 60.0, ca_file: str | None = None, token: str | None = None,
            system: str | None = None, temperature: float = 0.0, stop: list[str] | None = None,
            extra: dict | None = None, api: str | None = None, expect_finish: str = 'stop',
            source: str = 'endpoint', tools: list | None = None, tool_choice: str | None = None,
            json_schema: dict | None = None, trust_env: bool = True, cross_check: bool = False) -> PreparedRequest:
    """Check the arguments and build the request; raise ValueError before any connection.

    The API (chat, completions or responses) follows from the URL path unless ``api`` names it.
    ``tools`` (in the chat-completions shape) and ``tool_choice`` (auto, required, none or a
    tool's name; auto by default) ask for tool calls; ``json_schema`` asks for a JSON answer.
    ``trust_env`` honours HTTPS_PROXY and NO_PROXY (see proxy_from_environment()).
    ``cross_check`` builds the unstreamed twin too (``twin``), and asks both for token ids where the
    API returns them; it needs temperature 0 or a ``seed`` in ``extra``.
    """
    parts, port = _check_url(url)
    api = _api_of(parts.path, api)
    if expect_finish not in _FINISHES:
        raise ValueError(f'expect_finish must be one of {", ".join(_FINISHES)}, got {expect_finish!r}')
    idle = _check_number('idle', idle, 0, False)
    deadline = _check_number('deadline', deadline, 0, False)
    temperature = _check_number('temperature', temperature, 0, True)
    if cross_check and temperature != 0 and not _seeded(extra):
        raise ValueError(f'cross_check needs a deterministic request: temperature {temperature:g} without a "seed" '
                         'in extra would sample the two answers apart')
    body = _request_body(api, model, prompt, system, max_tokens, temperature, stop, extra)
    spec = _answer_spec(api, tools, tool_choice, json_schema)
    body.update(_answer_fields(api, tools, spec, json_schema))
    if cross_check and api in _TOKEN_ID_APIS:
        body['return_token_ids'] = True
    headers = {'Content-Type': 'application/json', 'Accept': 'text/event-stream',
               'Accept-Encoding': 'identity',  # no compression: a proxy must pass the events as they are
               'User-Agent': f'stream-client/{__version__}'}
    if api == 'messages':
        headers['anthropic-version'] = _ANTHROPIC_VERSION
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
                    json.dumps(json_schema, sort_keys=True, separators=(',', ':')).encode()).hexdigest(),
                'cross_check': cross_check}
    data = json.dumps(body, ensure_ascii=False).encode()
    request = PreparedRequest(url=url, scheme=parts.scheme, host=parts.hostname, port=port, path=parts.path or '/',
                              api=api, model=model, body=data, headers=headers,
                              wire=_render_request(parts.scheme, parts.hostname, port, parts.path or '/', headers,
                                                  data),
                              idle=idle, deadline=deadline, settings=settings, max_tokens=max_tokens,
                              expect_finish=expect_finish, source=source, ssl_context=context, token=token or '',
                              spec=spec, proxy=_proxy_from_environment(parts.scheme, parts.hostname, os.environ)
                              if trust_env else None)
    return dataclasses.replace(request, twin=_unstreamed_twin(request, body)) if cross_check else request


def _unstreamed_twin(request: PreparedRequest, body: dict) -> PreparedRequest:
    """The same request with ``stream: false`` and without what only a streamed request may carry."""
    twin_body = {key: False if key == 'stream' else value for key, value in body.items()
                 if key not in _STREAMED_ONLY_KEYS}
    data = json.dumps(twin_body, ensure_ascii=False).encode()
    headers = {**request.headers, 'Accept': 'application/json'}
    return dataclasses.replace(request, body=data, headers=headers,
                               wire=_render_request(request.scheme, request.host, request.port, request.path,
                                                   headers, data))


class _Recorder:
    """Stands in for a socket: keeps what http.client sends."""

    def __init__(self) -> None:
        self.sent = bytearray()

    def sendall(self, data: bytes) -> None:
        self.sent += data


def _render_request(scheme: str, host: str, port: int, path: str, headers: dict, body: bytes) -> bytes:
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

class _Phase(enum.Enum):
    """The part of the exchange a run is in; failures name it."""

    CONNECT = 'connect'
    PROXY = 'proxy CONNECT'
    TLS = 'TLS handshake'
    REQUEST = 'request'
    HEADERS = 'headers'
    BODY = 'body'


class _Timeline:
    """Monotonic stamps of one run, taken only by the transport, and how the text was delivered."""

    def __init__(self) -> None:
        self.start()
        self.latest: float | None = None     # the latest stamp of a read
        self.stamped_reads = 0               # reads that carried bytes
        self.kernel_stamped_reads = 0        # ... and that the kernel stamped (see arrival())
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

    def arrival(self, returned: float, kernel_ns: int | None, wall_offset_ns: int) -> float:
        """When a read's bytes arrived: the kernel's stamp of its last bytes (nanoseconds on the wall clock,
        which is ``wall_offset_ns`` ahead of the monotonic one), if it falls between the latest stamp (or
        the start) and the read's return; else, or without one, the read's return. A stamp outside by
        more than _STAMP_SLACK is the wall clock's step between the arrival and the read, and is not taken."""
        self.stamped_reads += 1
        earliest = self.started if self.latest is None else self.latest
        at = returned
        if kernel_ns is not None:
            stamped = (kernel_ns - wall_offset_ns) / 1e9
            if earliest - _STAMP_SLACK <= stamped <= returned + _STAMP_SLACK:
                self.kernel_stamped_reads += 1
                at = min(returned, max(earliest, stamped))
        self.latest = at
        return at

    @property
    def read_stamps(self) -> str | None:
        """Who stamped the reads: 'kernel' for every one, else 'client'; None when none carried bytes."""
        if not self.stamped_reads:
            return None
        return 'kernel' if self.kernel_stamped_reads == self.stamped_reads else 'client'

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
        self._lock = threading.RLock()  # a signal handler that cancels may run in a thread that holds it
        self._sockets: set[socket.socket] = set()
        self._hooks: list = []
        self.reason: str | None = None  # the signal that cancelled, once it did

    def cancel(self, reason: str) -> None:
        with self._lock:
            hooks = list(self._hooks) if self.reason is None else []
            self.reason = self.reason or reason
            sockets = list(self._sockets)
        for sock in sockets:
            _shut(sock)
        for hook in hooks:
            hook(self.reason)

    def on_cancel(self, hook) -> None:
        """Call hook(reason) when the cancel comes, in the thread that cancels (at once if it has come)."""
        with self._lock:
            self._hooks.append(hook)
            reason = self.reason
        if reason is not None:
            hook(reason)

    def forget(self, hook) -> None:
        with self._lock:
            self._hooks.remove(hook)

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


class _Connection:
    """An open connection: its socket, the address it really reached, and how often it has been used."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        host, port = sock.getpeername()[:2]
        self.peer = _host_port(host, port)
        self.peer_ip = host
        self.local_port = sock.getsockname()[1]
        self.kernel_stamps = _ask_kernel_stamps(sock)  # its reads come with the kernel's arrival stamps
        self.requests = 0                     # requests sent on it so far
        self.idle_since: float | None = None  # monotonic time at which its last response ended
        self.source: str | None = None        # who answered on it (see _source), once a response head came
        self.incomplete_close = False         # TLS: it ended without close_notify (see _recv_unstamped)


# SO_TIMESTAMPNS, which Python's socket module does not name: 35 in the asm-generic socket options, which these
# Linux architectures use (others, such as MIPS and SPARC, number it differently and go without).
_SO_TIMESTAMPNS = 35 if sys.platform.startswith('linux') and os.uname().machine in (
    'x86_64', 'i386', 'i686', 'aarch64', 'arm64', 'armv7l', 'armv6l', 'riscv64') else None
_TIMESPEC = struct.Struct('ll')  # the stamp: struct timespec, seconds and nanoseconds


def _ask_kernel_stamps(sock: socket.socket) -> bool:
    """Ask Linux to stamp each read of a plain TCP connection with when its last bytes arrived, so that a
    busy client does not delay its own timestamps; whether it will. Not for TLS: OpenSSL does its reads."""
    if _SO_TIMESTAMPNS is None or type(sock) is not socket.socket or sock.family not in (socket.AF_INET,
                                                                                         socket.AF_INET6):
        return False
    try:
        sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
    except OSError:
        return False
    return True


def _recv_stamped(connection: '_Connection') -> tuple[bytes, int | None]:
    """One recv() of a plain connection that asked for kernel stamps, and the stamp of when its last
    bytes arrived, in nanoseconds on the wall clock (None when the kernel sent none, as at the end of file)."""
    raw, ancillary, _, _ = connection.sock.recvmsg(_READ_SIZE, socket.CMSG_SPACE(_TIMESPEC.size))
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == _SO_TIMESTAMPNS and len(data) == _TIMESPEC.size:
            seconds, nanoseconds = _TIMESPEC.unpack(data)
            return raw, seconds * 1_000_000_000 + nanoseconds
    return raw, None


def _recv_unstamped(connection: '_Connection') -> tuple[bytes, None]:
    """One recv(). A TLS connection that ends without close_notify (an incomplete close) ends as b'' too,
    and the connection keeps that fact for the reader (RFC 9112, 9.8)."""
    try:
        return connection.sock.recv(_READ_SIZE), None
    except ssl.SSLEOFError:
        connection.incomplete_close = True
        return b'', None


def _stray_bytes(sock: socket.socket) -> bool:
    """Whether bytes wait on an idle plain connection (not an end of file), peeked at without waiting
    (select() cannot watch a descriptor above 1,023). Not asked of TLS, whose post-handshake records
    make a socket readable. The next use of the socket sets its timeout again."""
    if isinstance(sock, ssl.SSLSocket):
        return False
    sock.setblocking(False)
    try:
        return bool(sock.recv(1, socket.MSG_PEEK))
    except BlockingIOError:  # nothing waits
        return False
    except OSError:  # reset while idle: the run reports it as a stale connection
        return False


class KeptConnections:
    """The connections one worker keeps alive between its runs (--keep-alive), one per origin. Used by one
    thread at a time."""

    def __init__(self) -> None:
        self._by_origin: dict[tuple, _Connection] = {}

    def take(self, origin: tuple) -> _Connection | None:
        """The connection kept to this origin, unless bytes arrived on it while it was idle: they answer no
        request, and RFC 9112 (6.3) forbids reading them as the next response, so it is closed and a new
        one is used. One the server closed while idle is taken: the run reports a stale connection."""
        connection = self._by_origin.pop(origin, None)
        if connection is not None and _stray_bytes(connection.sock):
            connection.sock.close()
            return None
        return connection

    def keep(self, origin: tuple, connection: _Connection) -> None:
        connection.idle_since = time.monotonic()
        self._by_origin[origin] = connection

    def close(self) -> None:
        for connection in self._by_origin.values():
            connection.sock.close()
        self._by_origin.clear()


class _Gate:
    """Lets one thread of a load's process at a time run Python: the _Reactor, or one worker thread.
    Workers line up for it one behind another, so that the reactor, which holds it while it has reads to
    take or to feed (take(), leave()), waits for the worker inside, not behind hundreds whose runs end and
    begin together: reading comes first. A worker lets the gate go while it waits on the network
    (released()). A single run's gate, without a lock, lets everything through."""

    def __init__(self, lock: 'threading.Lock | None' = None) -> None:
        self._lock = lock
        self._line = threading.Lock() if lock is not None else None  # the workers wait here, all but one

    def __enter__(self) -> None:
        if self._lock is not None:
            self._line.acquire()
            self._lock.acquire()

    def __exit__(self, *exc_info) -> None:
        if self._lock is not None:
            self._lock.release()
            self._line.release()

    @contextlib.contextmanager
    def released(self):
        """Let other workers through while this one waits on the network."""
        if self._lock is None:
            yield
            return
        self._lock.release()
        self._line.release()
        try:
            yield
        finally:
            self._line.acquire()
            self._lock.acquire()

    def take(self) -> None:
        """The reactor's way in, past the workers' line."""
        if self._lock is not None:
            self._lock.acquire()

    def leave(self) -> None:
        if self._lock is not None:
            self._lock.release()


_OPEN_GATE = _Gate()


class _Exchange:
    """What one run saw: the timeline, owned by the transport, and the response reader, which owns the
    head, the body framing, the events and the answer. ``failure`` is the first failure, whichever
    layer it came from."""

    def __init__(self, request: PreparedRequest, capture: Capture | None = None,
                 cancel: Cancel | None = None, gate: _Gate = _OPEN_GATE) -> None:
        self.request = request
        self.cancel = cancel
        self.gate = gate               # held by a load's worker while it runs Python (see _Gate)
        self.timeline = _Timeline()
        self.phase = _Phase.CONNECT
        self.reader = ResponseReader(request.new_validator(), capture)
        self.failure: StreamError | None = None
        self.connection: _Connection | None = None
        self.reused = False            # the connection was kept from an earlier run
        self.idle_s: float | None = None  # how long a reused connection had been idle
        self.cross_check: dict | None = None  # --cross-check: the unstreamed twin and the comparison

    def fail(self, error: StreamError) -> None:
        if self.failure is None:
            self.failure = error


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
    expect_finish, tools, tool_choice, json_schema, cross_check.
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
    cleanly on a framing that lets the connection go on. A request built
    with ``cross_check`` then sends its unstreamed twin on a connection of
    its own, and the record's ``cross_check`` compares the two answers.
    """
    return _run(request, _Show(on_text, on_reasoning, on_call), capture, cancel, kept)


def _run(request: PreparedRequest, show: _Show, capture: Capture | None, cancel: Cancel | None,
         kept: KeptConnections | None, reactor: '_Reactor | None' = None, gate: _Gate = _OPEN_GATE) -> dict:
    """run(); in a load, a _Reactor reads the response, and the worker holds its gate (see _Gate)."""
    x = _Exchange(request, capture, cancel, gate)
    interrupted, connection = None, None
    try:
        x.timeline.start()
        if cancel is not None and cancel.reason is not None:  # a load's run taken up just before its cancel
            raise _interrupted_before_sending(cancel.reason)
        connection = kept.take(request.origin) if kept is not None else None
        if connection is None:
            connection = _connect(x)
        else:
            _reuse(x, connection)
        x.connection = connection
        connection.requests += 1
        _exchange(connection, x, show, reactor)
    except StreamError as exc:
        x.fail(exc)
    except KeyboardInterrupt as exc:
        interrupted = getattr(exc, 'signal_name', 'SIGINT')
        x.fail(_interruption(x, interrupted))
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
        if x.timeline.ended is None:  # not ended by the message's last bytes
            x.timeline.ended = time.perf_counter()
    if request.twin is not None and interrupted is None:
        try:
            x.cross_check = _cross_check(x, cancel)
        except KeyboardInterrupt as exc:
            interrupted = getattr(exc, 'signal_name', 'SIGINT')
            x.cross_check = cross_check_record(_streamed_answer(x.reader.validator), None, None,
                                               f'interrupted by {interrupted} during the unstreamed request')
    record = _build_record(x)
    if interrupted:
        raise Interrupted(interrupted, record)
    return record


def _cross_check(x: _Exchange, cancel: Cancel | None) -> dict:
    """Send the unstreamed twin of a streamed run that got an answer with status 200, and compare."""
    if x.reader.head is None or x.reader.head.status != 200:
        return compare_twin(x.reader, None, x.request)
    with x.gate.released():
        twin = _fetch_unstreamed(_Exchange(x.request.twin, cancel=cancel))
    return compare_twin(x.reader, twin, x.request)


def compare_twin(reader: ResponseReader, twin: UnstreamedReader | None, request: PreparedRequest) -> dict:
    """The record's ``cross_check`` from the streamed response and its unstreamed twin, both read to their
    end (sans-IO); ``twin`` None when it was not sent, the streamed request having got no 200."""
    streamed = _streamed_answer(reader.validator)
    if twin is None:
        return cross_check_record(streamed, None, None, 'not sent: the streamed request got no answer with status 200')
    status = twin.head.status if twin.head is not None else None
    try:
        answer = twin.answer(request.api)
    except StreamError as exc:
        return cross_check_record(streamed, status, None, str(exc))
    return cross_check_record(streamed, status, answer, _unstreamed_problem(answer, request.expect_finish))


def _fetch_unstreamed(x: _Exchange) -> UnstreamedReader:
    """Send an unstreamed request on a connection of its own and read its whole response, under the same
    time bounds as a run; a failure ends up as the reader's error."""
    reader, connection = UnstreamedReader(), None
    try:
        x.timeline.start()
        connection = _connect(x)
        x.phase = _Phase.REQUEST
        connection.sock.settimeout(_wait(x))
        connection.sock.sendall(x.request.wire)
        x.phase = _Phase.HEADERS
        while not reader.complete:
            connection.sock.settimeout(_wait(x))
            raw, _ = _recv_unstamped(connection)
            if not raw:
                stop = _interruption(x)
                if stop:
                    raise stop
                reader.eof(connection.incomplete_close)
                break
            reader.feed(raw)
            x.phase = _Phase.BODY if reader.head is not None else x.phase
    except StreamError as exc:
        reader.error = reader.error or exc
    except Exception as exc:  # as in run(): keep the evidence
        reader.error = reader.error or _classify(exc, x)
    finally:
        if connection is not None:
            if x.cancel is not None:
                x.cancel.detach(connection.sock)
            connection.sock.close()
    return reader


def _connect(x: _Exchange) -> _Connection:
    """The TCP connection (to the proxy, when one is used, then a tunnel through it) and, for https,
    the TLS handshake, each step under the idle timeout cut to the deadline."""
    request, proxy = x.request, x.request.proxy
    stop = _interruption(x)
    if stop:
        raise stop
    with x.gate.released():
        sock = socket.create_connection((proxy.host, proxy.port) if proxy else (request.host, request.port),
                                        timeout=_wait(x))
    if x.cancel is not None:
        x.cancel.attach(sock)
    try:
        if proxy is not None:
            x.phase = _Phase.PROXY
            with x.gate.released():
                _open_tunnel(sock, x)
        if request.scheme == 'http':
            connection = _Connection(sock)
            _check_plain_peer(connection, request)
            return connection
        x.phase = _Phase.TLS
        sock.settimeout(_wait(x))
        with x.gate.released():
            tls = request.ssl_context.wrap_socket(sock, server_hostname=request.host,
                                                  suppress_ragged_eofs=False)  # see _recv_unstamped
    except BaseException:
        if x.cancel is not None:
            x.cancel.detach(sock)
        sock.close()
        raise
    if x.cancel is not None:  # the TLS socket took over the connection
        x.cancel.detach(sock)
        x.cancel.attach(tls)
    return _Connection(tls)


def _check_plain_peer(connection: _Connection, request: PreparedRequest) -> None:
    """Plain http only to loopback, judged by the address really connected to, not by the name."""
    if not ipaddress.ip_address(connection.peer_ip.partition('%')[0]).is_loopback:
        raise _failure('not_loopback', f'plain http is allowed only to loopback addresses, but {request.host} '
                                       f'connected to {connection.peer}; nothing was sent')


def _open_tunnel(sock: socket.socket, x: _Exchange) -> None:
    """CONNECT through the proxy to the origin (RFC 9110, 9.3.6); StreamError('proxy') unless it answers 2xx."""
    request, proxy = x.request, x.request.proxy
    sock.settimeout(_wait(x))
    sock.sendall(proxy.connect_request(request.host, request.port))
    heads = _ResponseHeadParser()
    head = None
    while head is None:
        sock.settimeout(_wait(x))
        raw = sock.recv(_READ_SIZE)
        if not raw:
            raise _failure('proxy_closed', f'the proxy {proxy.address} closed the connection before answering CONNECT '
                                           f'{request.address}')
        try:
            head = heads.feed(raw)
        except StreamError as exc:
            raise _failure('proxy_bad_answer', f'the proxy {proxy.address} answered CONNECT with {exc.message}') from None
    if not 200 <= head.status < 300:
        raise _failure('proxy_refused', f'the proxy {proxy.address} refused the tunnel to {request.address}: '
                                        f'{head.status} {head.reason}'.rstrip())
    if heads.rest:
        raise _failure('proxy_extra_bytes', f'the proxy {proxy.address} sent {_count(len(heads.rest), "byte")} after its '
                                            '2xx to CONNECT, before the tunnel was used')


def _reuse(x: _Exchange, connection: _Connection) -> None:
    """Take up a kept connection: the clock starts now, as the request goes out on it."""
    x.reused, x.idle_s = True, time.monotonic() - connection.idle_since
    if x.cancel is not None:
        x.cancel.attach(connection.sock)


def _reusable(x: _Exchange) -> bool:
    """Whether a connection may carry the next request: its response ended cleanly on a framing that says
    where it ends (Content-Length, or chunked and read to its last chunk), in HTTP/1.1, without
    Connection: close, and nothing went wrong below the event stream."""
    head, body, failure = x.reader.head, x.reader.body, x.failure
    if failure is not None and failure.layer not in ('http', 'sse', 'protocol', 'application'):
        return False
    return (head is not None and body is not None and body.complete and body.framing != 'close'
            and not body.overrun and head.version == '1.1' and 'close' not in head.field_list('Connection'))


def _exchange(connection: _Connection, x: _Exchange, show: _Show, reactor: '_Reactor | None') -> None:
    try:
        x.phase = _Phase.REQUEST
        connection.sock.settimeout(_wait(x))
        wire = x.request.wire
        # a request that fits the socket's buffer is sent at once, with the gate held (letting it go costs every
        # run a wait for it); a bigger one may wait for the server to read, so the gate is let go
        with x.gate.released() if len(wire) > _SEND_HOLDING_GATE else contextlib.nullcontext():
            connection.sock.sendall(wire)
        x.phase = _Phase.HEADERS
        if reactor is not None:
            reactor.read(connection, x)
        else:
            _read_response(connection, x, show)
    except (OSError, StreamError) as exc:
        raise _exchange_failure(exc, x) from None


def _read_response(connection: _Connection, x: _Exchange, show: _Show) -> None:
    """Feed the reader until the HTTP message ends or the connection closes, under both time bounds.

    Every event of one read gets the read's one stamp (see _Timeline.arrival), so events that arrived
    together are 0 ms apart.
    """
    on_text, on_reasoning, on_call = show
    showing = any(show)  # a load shows nothing: no second pass over its events
    receive = _receiver(connection, x)
    while True:
        raw, kernel_ns = receive()
        pieces = _take_read(x, raw, time.perf_counter(), kernel_ns)
        if pieces and showing:
            for text, reasoning, call in pieces:
                if text and on_text:
                    on_text(text)
                if reasoning and on_reasoning:
                    on_reasoning(reasoning)
                if call and on_call:
                    on_call(call)
        if _read_over(x, raw):
            return


def _take_read(x: _Exchange, raw: bytes, returned: float, kernel_ns: int | None = None) -> list[Pieces]:
    """One read's bytes (b'' at the end of the connection), which returned at ``returned`` (with the
    kernel's stamp of their arrival, when it gave one), into the exchange: fed to the reader and stamped
    on the timeline; returns their pieces. Raises what a read alone shows: a signal, the deadline passed,
    or the reader's failure at the end of the connection."""
    reader, timeline = x.reader, x.timeline
    if not raw:
        stop = _interruption(x)
        if stop:
            raise stop
        reader.eof(x.connection is not None and x.connection.incomplete_close)
        return []
    if returned > timeline.started + x.request.deadline:
        raise _deadline_failure(x)
    wall_offset_ns = 0 if kernel_ns is None else time.time_ns() - time.perf_counter_ns()
    at = timeline.arrival(returned, kernel_ns, wall_offset_ns)
    pieces = reader.feed(raw)
    if x.phase is _Phase.HEADERS and reader.head is not None:
        timeline.headers_at = at
        x.phase = _Phase.BODY
    if pieces:
        timeline.note_read(at, pieces)
    if reader.message_complete:
        timeline.ended = at
    return pieces


def _read_over(x: _Exchange, raw: bytes) -> bool:
    """Whether the response has been read to its end after this read: the message ended, or the connection
    did (judge() reads how each layer ended). Raises the reader's failure."""
    if x.reader.error is not None:
        raise x.reader.error
    return not raw or x.reader.message_complete


def _receiver(connection: _Connection, x: _Exchange):
    """A function that reads the next bytes under the idle timeout cut to the deadline (TimeoutError), and
    returns them with the kernel's stamp of their arrival (None without one: see _recv_stamped).

    A plain socket on Linux waits in the kernel, under SO_RCVTIMEO, so that each read is one system
    call: with a Python timeout, every recv() is a poll() and a recv(). Other sockets (TLS) keep
    Python's timeout."""
    sock = connection.sock
    if type(sock) is not socket.socket or not sys.platform.startswith('linux'):
        def receive() -> tuple[bytes, None]:
            sock.settimeout(_wait(x))
            return _recv_unstamped(connection)
        return receive
    sock.settimeout(None)
    armed = [-1.0]  # the SO_RCVTIMEO in force, in seconds
    read = _recv_stamped if connection.kernel_stamps else _recv_unstamped

    def receive() -> tuple[bytes, int | None]:
        wait = _wait(x)
        if wait < armed[0] - 0.001 or armed[0] < 0:
            seconds = max(wait, 0.001)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO,
                            struct.pack('ll', int(seconds), int(seconds % 1 * 1_000_000)))
            armed[0] = seconds
        try:
            return read(connection)
        except BlockingIOError:  # SO_RCVTIMEO ran out
            raise TimeoutError('timed out') from None
    return receive


def _wait(x: _Exchange) -> float:
    """The socket timeout for the next operation: the idle timeout, cut to the deadline."""
    remaining = x.request.deadline - (time.perf_counter() - x.timeline.started)
    if remaining <= 0:
        raise _deadline_failure(x)
    return min(x.request.idle, remaining)


_EPOLL = hasattr(select, 'epoll')  # Linux: a load's responses are read by one _Reactor per process
_FEEDS_PER_LOOK = 16  # reads a _Reactor feeds between two looks for connections that became ready


class _Reading:
    """A response that a _Reactor reads for the worker thread waiting on it in _Reactor.read()."""

    def __init__(self, connection: _Connection, x: _Exchange, now: float) -> None:
        self.connection, self.x, self.fd = connection, x, connection.sock.fileno()
        self.last = now                  # when the latest read returned (the idle timeout runs from it)
        self.idle, self.deadline_at = x.request.idle, x.timeline.started + x.request.deadline
        self.error: BaseException | None = None
        self.over = threading.Lock()     # held until the response has ended or failed
        self.over.acquire()
        self.finished = False
        self.queued = False              # a read of it waits to be fed

    def due(self) -> float:
        """When the idle timeout, cut to the deadline, runs out."""
        return min(self.last + self.idle, self.deadline_at)


class _Reactor:
    """The thread that reads every response of a load's share from one epoll set (Linux), so that a read
    costs no thread wake-up and no GIL hand-off: each pass first reads every connection that is ready,
    with the kernel's stamp of each read's arrival (or the time it returned), then feeds what it read to
    the readers; it holds the gate (_Gate) from the moment a connection is ready until it has fed every
    read. A run's worker thread connects and sends, then sleeps in read() until the response has ended
    or failed. The rules of a read are a single
    run's (_take_read, _read_over), and so are its failures: read() raises them in the worker, where
    _exchange() and run() classify them as they classify a blocking read's."""

    def __init__(self, gate: _Gate = _OPEN_GATE) -> None:
        self._gate = gate                          # held while there are reads to take or feed
        self._poll = select.epoll()
        self._readings: dict[int, _Reading] = {}  # by file descriptor
        self._due: list = []                       # heap of (due, sequence, reading), refreshed when popped
        self._handed: list[_Reading] = []          # handed over, not yet in the heap
        self._sequence = itertools.count()
        self._lock = threading.Lock()
        self._wake_at = math.inf                   # when the loop's wait for the next read ends
        self._waker, self._bell = os.pipe()
        os.set_blocking(self._waker, False)
        os.set_blocking(self._bell, False)  # a worker that rings holds the gate, which the loop may wait for
        self._poll.register(self._waker, select.EPOLLIN)
        self._closing = False
        self._broken: BaseException | None = None  # a bug in the loop: every reading gets it
        self._thread = threading.Thread(target=self._loop, daemon=True, name='reactor')
        self._thread.start()

    def read(self, connection: _Connection, x: _Exchange) -> None:
        """Read the response of a request sent on the connection into x; returns once it has been read to
        its end, or raises what ended it (see _Reactor)."""
        reading = _Reading(connection, x, time.perf_counter())
        connection.sock.setblocking(False)
        with self._lock:
            if self._broken is not None:
                raise self._broken
            self._readings[reading.fd] = reading
            self._handed.append(reading)
            ring = reading.due() < self._wake_at
        try:
            self._poll.register(reading.fd, select.EPOLLIN)
        except BaseException:
            with self._lock:
                self._readings.pop(reading.fd, None)
            reading.finished = True
            raise
        if ring:
            self._ring()
        with x.gate.released():
            reading.over.acquire()
        if reading.error is not None:
            raise reading.error

    def close(self) -> None:
        """Stop the loop, once no run is reading."""
        self._closing = True
        self._ring()
        self._thread.join()
        self._poll.close()
        os.close(self._waker)
        os.close(self._bell)

    def _ring(self) -> None:
        """Wake the loop; a full pipe has already rung."""
        with contextlib.suppress(BlockingIOError):
            os.write(self._bell, b'.')

    def _loop(self) -> None:
        reads: collections.deque = collections.deque()  # (reading, its bytes or error, when it returned, stamp)
        holding = False  # the gate
        try:
            while not self._closing:
                if holding and not reads:  # the workers run while this waits for the network
                    self._gate.leave()
                    holding = False
                ready = self._poll.poll(0 if reads else self._timeout())
                if not holding:
                    self._gate.take()
                    holding = True
                self._read_ready(ready, reads)
                for _ in range(min(len(reads), _FEEDS_PER_LOOK)):
                    self._feed(*reads.popleft())
                self._expire(time.perf_counter())
        except BaseException as exc:  # a bug in this client: no run may wait for ever
            with self._lock:
                self._broken = exc
                self._handed.clear()
                readings = list(self._readings.values())
            for reading in readings:
                self._finish(reading, exc)
        finally:
            if holding:
                self._gate.leave()

    def _timeout(self) -> float:
        """Seconds to wait for the next read: until the earliest due idle timeout or deadline."""
        with self._lock:
            for reading in self._handed:
                if not reading.finished:
                    heapq.heappush(self._due, (reading.due(), next(self._sequence), reading))
            self._handed.clear()
            if len(self._due) > 2 * len(self._readings) + 64:  # mostly runs that have ended
                self._due = [entry for entry in self._due if not entry[2].finished]
                heapq.heapify(self._due)
            self._wake_at = self._due[0][0] if self._due else math.inf
        return -1 if self._wake_at == math.inf else max(0.0, self._wake_at - time.perf_counter())

    def _read_ready(self, ready: list, reads: collections.deque) -> None:
        """Read every ready connection whose last read has been fed, and stamp each read as it returns."""
        for fd, _ in ready:
            reading = self._readings.get(fd)
            if reading is None:  # the bell: a reading handed over, or close()
                while _drained(self._waker):
                    pass
                continue
            if reading.queued:  # fed in order: its next bytes wait in the kernel
                continue
            kernel_ns = None
            try:
                raw, kernel_ns = _receive_ready(reading)
            except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
                continue  # nothing to read yet (a TLS record not yet whole)
            except Exception as exc:
                raw = exc
            reading.queued, reading.last = True, time.perf_counter()
            reads.append((reading, raw, reading.last, kernel_ns))

    def _feed(self, reading: _Reading, raw: bytes | Exception, now: float, kernel_ns: int | None) -> None:
        """Feed one read to its run's reader, as a blocking read would be fed; end the run if it is over."""
        reading.queued = False
        if reading.finished:  # its deadline ran out while the read waited
            return
        if isinstance(raw, Exception):
            self._finish(reading, raw)
            return
        try:
            _take_read(reading.x, raw, now, kernel_ns)
            if _read_over(reading.x, raw):
                self._finish(reading, None)
        except Exception as exc:
            self._finish(reading, exc)

    def _expire(self, now: float) -> None:
        """End the runs whose idle timeout or deadline has run out as a blocking read would end them."""
        while self._due and self._due[0][0] <= now:
            _, _, reading = heapq.heappop(self._due)
            if reading.finished:
                continue
            due = reading.due()
            if due > now:
                heapq.heappush(self._due, (due, next(self._sequence), reading))
            else:
                self._finish(reading, TimeoutError('timed out'))

    def _finish(self, reading: _Reading, error: BaseException | None) -> None:
        if reading.finished:
            return
        reading.finished, reading.error = True, error
        if self._readings.get(reading.fd) is reading:
            del self._readings[reading.fd]
            try:
                self._poll.unregister(reading.fd)
            except (OSError, ValueError):
                pass
        reading.connection = reading.x = None  # its heap entry may outlive it until its due time
        reading.over.release()


def _drained(fd: int) -> bool:
    """Read what the bell rang into a non-blocking pipe; False once it is empty."""
    try:
        return bool(os.read(fd, 4096))
    except BlockingIOError:
        return False


def _receive_ready(reading: _Reading) -> tuple[bytes, int | None]:
    """What a ready non-blocking connection holds: one recv(), with the kernel's stamp when it gives them,
    and for TLS the rest of the record that OpenSSL has already decrypted, which the epoll set cannot see."""
    connection = reading.connection
    if connection.kernel_stamps:
        return _recv_stamped(connection)
    raw, _ = _recv_unstamped(connection)
    if raw and isinstance(connection.sock, ssl.SSLSocket):
        while connection.sock.pending():
            raw += connection.sock.recv(_READ_SIZE)
    return raw, None


# ---------------------------------------------------------------------------
# The verdict and the evidence record
# ---------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Verdict:
    """Whether a run is ok, which layer failed first and the kind of failure, and which layers completed."""

    layer: str | None
    message: str | None
    transport_complete: bool | None
    event_complete: bool | None
    application_complete: bool
    kind: str | None = None

    @property
    def ok(self) -> bool:
        return self.layer is None


def judge(reader: ResponseReader, failure: StreamError | None = None, cross_check: dict | None = None) -> Verdict:
    """Why this response is not a finished answer: the one place that decides, and that sets the
    completeness flags. Sans-IO: ``failure`` is the transport's fact, one the reader could not see
    (no connection, a timeout, a signal, a stale connection; see below); otherwise the reader's own
    error, if any, is the failure, and a reader fed no whole head or only part of an error body
    ended there. ``cross_check`` is the comparison with the unstreamed twin (cross_check_record()),
    judged after the answer itself: it can add a failure, never clear one, since the checks of the
    stream never see it.

    A failure that stopped the reading (no connection, a bad status, invalid
    JSON, a timeout...) wins: the layers after it were never seen, so their
    flags are null. A transport failure still says whether the events that
    arrived ended on a boundary. A response read to its end is judged in the
    order a response is built: the HTTP framing, then the event stream, then
    the answer itself.
    """
    failure = failure or reader.error or reader.early_end()
    outcome = _answer_problem(reader.validator)
    application_complete = outcome is None and not (failure is not None and failure.server_error)
    if failure is not None:
        if failure.layer != 'transport':
            return Verdict(failure.layer, failure.message, None, None, application_complete, failure.kind)
        event_complete = reader.events.pending() is None if reader.body is not None else None
        return Verdict('transport', failure.message, False, event_complete, application_complete, failure.kind)
    transport, events = reader.body.eof_failure(reader.incomplete_close), reader.events.pending()
    first = transport or events or outcome or _cross_check_failure(cross_check)
    return Verdict(first and first.layer, first and first.message, transport is None, events is None,
                   application_complete, first and first.kind)


# The transport's failures: what the socket, the clocks and the signals saw, which the reader could not.

def _interruption(x: _Exchange, signal_name: str | None = None) -> StreamError | None:
    """The failure of a run stopped by a signal (or by its Cancel), or None if it was not."""
    signal_name = signal_name or (x.cancel.reason if x.cancel is not None else None)
    if signal_name is None:
        return None
    return _failure('interrupted', f'{signal_name} during the {x.phase.value} phase '
                                   f'after {_count(x.reader.validator.content_events, "content event")}')


def _interrupted_before_sending(signal_name: str) -> StreamError:
    return _failure('interrupted', f'{signal_name} before the request was sent')


def _exchange_failure(exc: OSError | StreamError, x: _Exchange) -> BaseException:
    """What a failure while the request was sent or the response read means: the signal that shut the
    connection down; the status line, when an error response had begun; a stale kept connection; a plain
    request to a TLS port; or itself."""
    stop = _interruption(x)
    if stop:  # a cancel shuts connections down: not the server's doing
        return stop
    if x.reader.reading_error_body:  # the status line already says what failed; keep what arrived
        return x.reader.status_failure()
    if _closed_while_idle(x, exc):
        return _StaleConnectionError(x.connection.requests, x.idle_s)
    if isinstance(exc, StreamError) and _looks_like_tls(x):
        return StreamError(exc.layer, f'{exc.message}; is this port TLS? try https://', kind=exc.kind)
    return exc


def _closed_while_idle(x: _Exchange, exc: BaseException) -> bool:
    """Whether a reused connection ended (closed or reset) before any response byte: not a timeout, and
    not a failure of a later layer."""
    if not x.reused or x.reader.received or isinstance(exc, TimeoutError):
        return False
    return isinstance(exc, OSError) or exc.layer == 'transport'


def _looks_like_tls(x: _Exchange) -> bool:
    """Whether a plain http request that got no response head reached a TLS port: the server closed
    without a byte (as TLS servers do on a plaintext request), or its bytes start a TLS record."""
    reader = x.reader
    if x.request.scheme != 'http' or reader.head is not None:
        return False
    opening = reader.opening
    return reader.received == 0 or (len(opening) >= 2 and 20 <= opening[0] <= 23 and opening[1] == 3)


def _deadline_failure(x: _Exchange) -> StreamError:
    deadline = f'{x.request.deadline:g} s'
    validator = x.reader.validator
    if x.phase is _Phase.BODY and validator.done:
        return _unended_after_terminal(x, f'the overall deadline of {deadline}')
    return _failure('deadline', f'overall deadline of {deadline} reached during the {x.phase.value} phase '
                                f'after {_count(validator.content_events, "content event")}')


def _unended_after_terminal(x: _Exchange, bound: str) -> StreamError:
    """The terminal event arrived but the HTTP message never ended: a transport failure, whichever bound noticed."""
    return _failure('unended_after_terminal', f'message did not end within {bound} after {x.reader.validator.terminal}; '
                                              f'received {x.reader.body.progress()}')


def _classify(exc: BaseException, x: _Exchange) -> StreamError:
    """Turn an exception from the socket, TLS or http.client into a layered failure."""
    request = x.request
    stop = _interruption(x)
    if stop:
        return stop
    if isinstance(exc, (TimeoutError, socket.timeout)):
        return _timeout_failure(x)
    if isinstance(exc, ssl.SSLCertVerificationError):
        return _failure('certificate_invalid', f'certificate verification failed for {request.host}: '
                                               f'{exc.verify_message or exc.reason}')
    if isinstance(exc, ssl.SSLError):
        hint = '; the answer was not TLS: is this port plain http?' if exc.reason in _NOT_TLS else ''
        return _failure('tls_failed', f'TLS failed with {request.host}: {exc.reason or exc}{hint}')
    if x.phase is _Phase.CONNECT and isinstance(exc, OSError):
        reason = exc.strerror or str(exc) or type(exc).__name__
        hint = '; is the server running, and listening on that port?' if isinstance(exc, ConnectionRefusedError) \
            else ''
        if request.proxy is not None:
            return _failure('proxy_unreachable', f'cannot connect to the proxy {request.proxy.address}: {reason}{hint}')
        return _failure('connect_failed', f'cannot connect to {request.address}: {reason}{hint}')
    if x.phase is _Phase.PROXY and isinstance(exc, OSError):
        return _failure('proxy_tunnel_failed', f'the tunnel through the proxy {request.proxy.address} failed: '
                                               f'{type(exc).__name__}: {exc}')
    if x.phase is _Phase.TLS and isinstance(exc, OSError):
        return _failure('tls_failed', f'TLS handshake with {request.host} failed: {type(exc).__name__}: {exc}')
    if x.phase in (_Phase.REQUEST, _Phase.HEADERS) and isinstance(exc, (OSError, http.client.HTTPException)):
        return _failure('no_response_head', f'no valid response headers: {type(exc).__name__}: {exc}')
    if x.phase is _Phase.BODY and isinstance(exc, OSError):
        received = x.reader.body.received if x.reader.body else 0
        return _failure('connection_failed', f'connection failed after {_count(received, "body byte")}: '
                                             f'{type(exc).__name__}: {exc}')
    return _failure('client_error', f'unexpected {type(exc).__name__} during the {x.phase.value} phase: {exc}')


# OpenSSL's reasons for a handshake answered by something that is not TLS (a plain http server's reply).
_NOT_TLS = frozenset({'WRONG_VERSION_NUMBER', 'RECORD_LAYER_FAILURE', 'PACKET_LENGTH_TOO_LONG', 'UNKNOWN_PROTOCOL',
                      'HTTP_REQUEST', 'UNEXPECTED_RECORD'})


def _timeout_failure(x: _Exchange) -> StreamError:
    request = x.request
    if time.perf_counter() - x.timeline.started >= request.deadline - 0.001:
        return _deadline_failure(x)
    idle = f'{request.idle:g} s'
    if x.phase is _Phase.CONNECT:
        where = f'the proxy {request.proxy.address}' if request.proxy else request.address
        return _failure('connect_timeout', f'no connection to {where} within {idle}')
    if x.phase is _Phase.PROXY:
        return _failure('proxy_timeout', f'no answer to CONNECT from the proxy {request.proxy.address} within {idle}')
    if x.phase is _Phase.TLS:
        return _failure('tls_timeout', f'TLS handshake with {request.host} not finished within {idle}')
    if x.phase is not _Phase.BODY:
        return _failure('headers_timeout', f'no response headers within the idle timeout of {idle}')
    if x.reader.validator.done:
        return _unended_after_terminal(x, f'the idle timeout of {idle}')
    return _failure('idle_timeout', f'no bytes for {idle} (idle timeout) after '
                                    f'{_count(x.reader.validator.content_events, "content event")}')


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


# ---------------------------------------------------------------------------
# Many runs: a load of strict runs, and a summary built from their verdicts
# ---------------------------------------------------------------------------

_ARRIVALS = ('poisson', 'constant')
_MAX_OPEN_LOOP_IN_FLIGHT = 512  # runs in flight at most under --rate without --concurrency
_MAX_PROCESSES = 64             # worker processes of one load at most


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
    duration: float | None = None  # an open loop bounded by time: runs is then what the schedule holds
    step: int | None = None        # the step of a rate sweep, from 0
    slos: tuple = ()               # (name, ms) pairs that a good run meets: see SLO_FIGURES
    slo_target: float | None = None  # a sweep's attainment under capacity (None: DEFAULT_SLO_TARGET)
    processes: int = 1             # worker processes the runs are spread over (Linux: forked)

    def __post_init__(self) -> None:
        if isinstance(self.runs, bool) or not isinstance(self.runs, int) or self.runs < 1:
            raise ValueError(f'runs must be a positive integer, got {self.runs!r}')
        if self.concurrency is not None and (isinstance(self.concurrency, bool) or
                                             not isinstance(self.concurrency, int) or self.concurrency < 1):
            raise ValueError(f'concurrency must be a positive integer, got {self.concurrency!r}')
        if self.rate is not None and not _positive_finite(self.rate):
            raise ValueError(f'rate must be a positive finite number of runs per second, got {self.rate!r}')
        if self.arrivals not in _ARRIVALS:
            raise ValueError(f'arrivals must be one of {", ".join(_ARRIVALS)}, got {self.arrivals!r}')
        if isinstance(self.processes, bool) or not isinstance(self.processes, int) or \
                not 1 <= self.processes <= _MAX_PROCESSES:
            raise ValueError(f'processes must be a whole number from 1 to {_MAX_PROCESSES}, got {self.processes!r}')
        if self.duration is not None and (self.rate is None or not _positive_finite(self.duration)):
            raise ValueError(f'duration bounds an open loop: a positive number of seconds with a rate, '
                             f'got {self.duration!r}')

    @property
    def in_flight(self) -> int:
        """The most runs that may be in flight at once."""
        default = 1 if self.rate is None else _MAX_OPEN_LOOP_IN_FLIGHT
        return min(self.runs, self.concurrency or default)

    def described(self) -> dict:
        return {'runs': self.runs, 'concurrency': self.in_flight, 'rate': self.rate,
                'arrivals': self.arrivals if self.rate is not None else None, 'seed': self.seed,
                'keep_alive': self.keep_alive, 'duration': self.duration, 'step': self.step,
                'slo': dict(self.slos) or None, 'slo_target': self.slo_target, 'processes': self.processes}


def _open_loop_offsets(rate: float, arrivals: str, seed: int):
    """The endless seeded schedule of an open loop: evenly spaced or Poisson arrivals, from 0 s."""
    rng, at = random.Random(seed), 0.0
    while True:
        yield at
        at += 1 / rate if arrivals == 'constant' else rng.expovariate(rate)


def _scheduled_runs(rate: float, arrivals: str, seed: int, duration: float) -> int:
    """How many runs the seeded open-loop schedule at rate starts within duration seconds."""
    if not (_positive_finite(rate) and _positive_finite(duration)):
        raise ValueError(f'rate and duration must be positive finite numbers, got {rate!r} and {duration!r}')
    return sum(1 for _ in itertools.takewhile(lambda at: at < duration, _open_loop_offsets(rate, arrivals, seed)))


def arrival_offsets(settings: LoadSettings):
    """Seconds after the load's start at which each run is due: all at once in a closed loop (the slots
    pace them); evenly spaced or at Poisson arrivals (seeded) in an open loop."""
    if settings.rate is None:
        return itertools.repeat(0.0, settings.runs)
    return itertools.islice(_open_loop_offsets(settings.rate, settings.arrivals, settings.seed), settings.runs)


class _Pool:
    """Worker threads, started as jobs need them, up to ``size``; work(job) runs in one of them. The
    threads take jobs one at a time, in the order submitted, and admit(job), called as each is taken,
    says whether it runs at all: so the jobs that run are the first ones submitted, whatever the threads'
    timing (a load's cancel leaves no gap in the numbers of the runs that started)."""

    def __init__(self, size: int, work, admit) -> None:
        self._size, self._work, self._admit = size, work, admit
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._taking = threading.Lock()  # held from taking a job to deciding whether it runs
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
        while True:
            with self._taking:
                job = self._jobs.get()
                admitted = job is not None and self._admit(job)
            if job is None:
                return
            try:
                if admitted:
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
    in flight end as interrupted; this returns when every run that started has its record. With
    ``settings.processes`` above 1 the runs are spread over that many forked processes (see
    _spread_load), and on_record is still called here, in this process. On Linux one _Reactor thread
    per process reads the responses, and the workers pass through a _Gate.
    """
    started = time.perf_counter()
    described = {**settings.described(), 'id': os.urandom(8).hex()}  # the id tells merged loads apart
    if settings.processes > 1:
        _spread_load(requests, settings, on_record, cancel, started, described)
    else:
        _run_share(requests, settings, on_record, cancel, started, described, (0, 1))


def _run_share(requests: list[PreparedRequest], settings: LoadSettings, on_record, cancel: Cancel, started: float,
               described: dict, share: tuple[int, int]) -> None:
    """The runs i with i % processes == number, on worker threads of this process (share is (number,
    processes)), with that share of the slots, on the load's schedule from ``started``."""
    number, processes = share
    slots = max(1, settings.in_flight // processes + (number < settings.in_flight % processes))
    lock = threading.Lock()
    workers, kept_by_worker = threading.local(), []
    gate = _Gate(threading.Lock()) if _EPOLL else _OPEN_GATE
    reactor = _Reactor(gate) if _EPOLL else None  # elsewhere each worker reads its own responses

    def kept() -> KeptConnections | None:
        if not settings.keep_alive:
            return None
        if not hasattr(workers, 'kept'):
            workers.kept = KeptConnections()
            with lock:
                kept_by_worker.append(workers.kept)
        return workers.kept

    def one(job: tuple[int, float]) -> None:
        with gate:
            run_one(*job)

    def run_one(index: int, due: float) -> None:
        begun, request = time.perf_counter(), requests[index % len(requests)]
        try:
            record = _run(request, _Show(), None, cancel, kept(), reactor, gate)
        except Exception as exc:  # a bug in this client: the run still has its record, and the count stays exact
            record = _failed_record(request, _failure('client_error', f'the client failed during the run: '
                                                                      f'{type(exc).__name__}: {exc}'))
        record = {'run': index, **record, 'offset_ms': round((begun - started) * 1000, 3),
                  'queued_ms': None if settings.rate is None else round((begun - started - due) * 1000, 3),
                  'load': described}
        with lock:
            on_record(record)
    pool = _Pool(slots, one, lambda job: cancel.reason is None)  # a run cancelled before it was taken has no record
    try:
        for index, due in enumerate(arrival_offsets(settings)):
            if index % processes != number:
                continue
            wait = started + due - time.perf_counter()
            while wait > 0 and cancel.reason is None:
                time.sleep(min(wait, 0.05))
                wait = started + due - time.perf_counter()
            if cancel.reason is not None:
                break
            pool.submit((index, due))
    finally:
        pool.close()
        if reactor is not None:
            reactor.close()
        for connections in kept_by_worker:
            connections.close()


_CANCEL_MESSAGE = 16  # bytes a cancelled load writes per worker process: the reason, padded


def _spread_load(requests: list[PreparedRequest], settings: LoadSettings, on_record, cancel: Cancel, started: float,
                 described: dict) -> None:
    """Fork settings.processes worker processes, each running its share of the runs (_run_share) and
    writing each record as one JSON line to its own pipe; call on_record for every line here, one at a
    time, so that this process stays the one owner of the evidence. The clock (perf_counter) is the
    system's monotonic one, shared by the processes, so offsets stay on one schedule. A cancel here
    is written to one control pipe that every worker watches; a worker whose parent is gone cancels
    itself too. Workers ignore SIGINT and SIGTERM: the parent alone decides."""
    control_read, control_write = os.pipe()
    lock, pids, parent_fds = threading.Lock(), [], [control_write]

    def tell(reason: str) -> None:  # at once, so that no worker starts a run after the cancel
        _tell_workers(control_write, reason, settings.processes)

    def relay(fd: int) -> None:
        with os.fdopen(fd, 'r', encoding='utf-8') as lines:
            for line in lines:
                with lock:
                    on_record(json.loads(line))
    cancel.on_cancel(tell)  # before the forks: a worker forked after a cancel finds it waiting in the pipe
    try:
        for number in range(settings.processes):  # every fork before any thread of this load starts
            record_read, record_write = os.pipe()
            pid = os.fork()
            if pid == 0:  # the worker
                for fd in parent_fds + [record_read]:
                    os.close(fd)
                _worker_process(requests, settings, started, described, (number, settings.processes),
                                control_read, record_write)
            os.close(record_write)
            parent_fds.append(record_read)
            pids.append(pid)
        os.close(control_read)
        readers = [threading.Thread(target=relay, args=(fd,), daemon=True) for fd in parent_fds[1:]]
        for reader in readers:
            reader.start()
        for reader in readers:
            while reader.is_alive():
                reader.join(0.1)  # in short waits, so that signals are handled
    finally:
        cancel.forget(tell)  # before the pipe closes: its descriptor's number may be reused
        os.close(control_write)
    for pid in pids:
        os.waitpid(pid, 0)


def _tell_workers(control: int, reason: str, processes: int) -> None:
    """Write a cancel's reason to the control pipe once for each worker process; a pipe that every worker
    has left already (EPIPE: the load was ending) has nobody to tell."""
    try:
        os.write(control, reason.encode()[:_CANCEL_MESSAGE].ljust(_CANCEL_MESSAGE) * processes)
    except OSError:
        pass


def _worker_process(requests: list[PreparedRequest], settings: LoadSettings, started: float, described: dict,
                    share: tuple[int, int], control: int, records: int) -> None:
    """The body of a forked worker: run the share, write its records, exit (never returns)."""
    status = 1
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        cancel = Cancel()

        def watch() -> None:
            reason = os.read(control, _CANCEL_MESSAGE).decode(errors='replace').strip()
            cancel.cancel(reason or 'the end of the process that started the load')
        threading.Thread(target=watch, daemon=True).start()
        with os.fdopen(records, 'w', encoding='utf-8') as out:
            def write(record: dict) -> None:
                out.write(json.dumps(record, ensure_ascii=False) + '\n')
                out.flush()
            _run_share(requests, settings, write, cancel, started, described, share)
        status = 0
    except BaseException:  # a bug in this client: say so, and let the parent see the status
        traceback.print_exc()
    finally:
        os._exit(status)


def _percentiles(values) -> dict | None:
    """p50, p90, p99 (nearest rank) and max of values, or None when there are none."""
    ordered = sorted(values)
    if not ordered:
        return None
    def rank(p: float) -> float:
        return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]
    return {'p50': rank(50), 'p90': rank(90), 'p99': rank(99), 'max': ordered[-1]}


class _GapHistogram:
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


_LATENCY_FIELDS = ('headers_ms', 'first_text_ms', 'duration_ms')
_UNCLASSIFIED = 'unclassified'  # the kind of a failure in a record older than error_kind

# The per-run figures a service-level objective (--slo NAME=MS) may bound, named as the record names them.
_SLO_FIGURES = {'first_text_ms': 'time to the first content event',
               'duration_ms': 'time from the start of the run to its end',
               'mean_event_gap_ms': 'the mean gap between content events',
               'max_event_gap_ms': 'the largest gap between content events'}
_DEFAULT_SLO_TARGET = 0.99   # the attainment a sweep step needs to be under capacity
_RATE_TOLERANCE = 0.05       # a step also needs its achieved start rate within 5% of its schedule's


def _parse_slos(texts: list[str]) -> tuple:
    """--slo NAME=MS values as sorted (name, ms) pairs; UsageError naming what is wrong."""
    slos = {}
    for text in texts:
        name, equals, value = text.partition('=')
        if name not in _SLO_FIGURES:
            raise UsageError(f'--slo {text!r}: the figure must be one of {", ".join(_SLO_FIGURES)}, as NAME=MS')
        try:
            bound = float(value) if equals else math.nan
        except ValueError:
            bound = math.nan
        if not _positive_finite(bound):
            raise UsageError(f'--slo {text!r}: the bound must be a positive number of milliseconds, '
                             f'e.g. {name}=500')
        if name in slos:
            raise UsageError(f'--slo bounds {name} twice')
        slos[name] = bound
    return tuple(sorted(slos.items()))


def _meets_slos(record: dict, slos) -> bool:
    """Whether the run's figures are within every bound; a figure the run does not have fails its
    bound, except a gap bound of a run with fewer than two content events, which has no gap."""
    for name, bound in slos:
        value = record.get(name)
        if value is None and not (name.endswith('_event_gap_ms') and record.get('first_text_ms') is not None):
            return False
        if value is not None and value > bound:
            return False
    return True


def _first_chunk_success(record: dict) -> bool:
    """Success as a load tool that stops at the first chunk counts it: a 2xx status and a first
    content event, whatever came after."""
    status = (record.get('http') or {}).get('status')
    return status is not None and 200 <= status < 300 and record.get('first_text_ms') is not None


class Summary:
    """The aggregate of many runs, built from their records alone, so that --summary recomputes from the
    saved evidence exactly what the load printed. Keeps a few numbers per run, never the records."""

    def __init__(self, slos: tuple | None = None, slo_target: float | None = None, by_step: bool = True) -> None:
        self.slos, self.slo_target = slos, slo_target  # None: the bounds the records' loads were run with
        self.slos_seen: set = set()        # the distinct --slo of the loads added, to refuse a mix
        self.good = self.first_chunk_good = 0
        self.steps: dict[float, _Step] | None = {} if by_step else None  # by rate
        self.runs = self.ok = 0
        self.by_layer: collections.Counter = collections.Counter()
        self.by_kind: collections.Counter = collections.Counter()
        self.latency = {field: array.array('d') for field in _LATENCY_FIELDS}
        self.gaps = _GapHistogram()
        self.completion_tokens = self.token_runs = self.content_events = 0
        self.first_start: float | None = None
        self.last_end: float | None = None
        self.busy_s = 0.0                  # the runs' durations added up
        self.seen = {'sources': set(), 'apis': set(), 'models': set(), 'expected_finishes': set()}
        self.planned: dict[str, int] = {}  # runs planned, by load id
        self.stale = 0                     # runs whose reused connection had been closed while idle
        self.single_runs = 0               # records of runs that were not part of a load
        self.pairs: collections.Counter = collections.Counter()  # --cross-check pairs, by what they showed
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
        self.busy_s += end - start
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
        if record.get('cross_check'):
            self.pairs.update(_pair_outcomes(record['cross_check']))
        self._add_goodput(record, load)
        if not record['ok']:
            self.stale += bool((record.get('connection') or {}).get('stale'))
            self.by_layer[record['error_layer']] += 1
            self.by_kind[record.get('error_kind') or _UNCLASSIFIED] += 1
            return
        self.ok += 1
        for field in _LATENCY_FIELDS:
            self.latency[field].append(record[field])
        self.gaps.add(record['event_gaps_ms'])
        self.content_events += record['content_events']
        if record['completion_tokens'] is not None:
            self.completion_tokens += record['completion_tokens']
            self.token_runs += 1

    def _add_goodput(self, record: dict, load: dict) -> None:
        """Count the run as good (ok and within every bound) and as a first-chunk success, and add it
        to its sweep step."""
        slos = self.slos if self.slos is not None else tuple(sorted((load.get('slo') or {}).items()))
        self.slos_seen.add(slos)
        if self.slo_target is None and load.get('slo_target') is not None:
            self.slo_target = load['slo_target']  # the target the sweep was run with
        within = _meets_slos(record, slos)
        self.good += record['ok'] and within
        self.first_chunk_good += _first_chunk_success(record) and within
        if self.steps is not None and load.get('step') is not None:
            step = self.steps.get(load['rate'])  # a sweep's steps differ in rate, also across merged files
            if step is None:
                step = self.steps[load['rate']] = _Step(load['rate'], load['duration'],
                                                        Summary(self.slos, self.slo_target, by_step=False))
            step.add(record)

    def slo_bounds(self) -> tuple:
        """The bounds good runs met: the ones given, or the one set the records' loads shared."""
        if self.slos is not None:
            return self.slos
        if len(self.slos_seen) > 1:
            raise UsageError('these records come from loads with different --slo bounds: give --slo to judge '
                             'them all by the same ones')
        return next(iter(self.slos_seen), ())

    def target(self) -> float:
        return self.slo_target if self.slo_target is not None else _DEFAULT_SLO_TARGET

    def p50_first_text(self) -> float | None:
        values = _percentiles(self.latency['first_text_ms'])
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
            'latency_ms': {field: _percentiles(self.latency[field]) for field in _LATENCY_FIELDS},
            'latency_runs': self.ok, 'latency_excludes': self.runs - self.ok,
            'event_gaps_ms': self.gaps.result(),
            'wall_s': round(wall, 3), 'runs_per_s': per_second(self.runs), 'ok_runs_per_s': per_second(self.ok),
            'mean_in_flight': per_second(self.busy_s),
            'completion_tokens_per_s': per_second(self.completion_tokens) if self.token_runs else None,
            'content_events_per_s': per_second(self.content_events),
            'cross_check': {outcome: self.pairs[outcome] for outcome in _PAIR_OUTCOMES} if self.pairs else None,
            **{key: sorted(value, key=str) for key, value in self.seen.items()},
            **self._goodput(per_second),
        }

    def _goodput(self, per_second) -> dict:
        """Goodput, attainment and the first-chunk count; with sweep steps, a block per step and the
        saturation rate."""
        steps = [step.result(number) for number, (_, step) in enumerate(sorted((self.steps or {}).items()))]
        saturation = _saturation_step(steps, self.target())
        return {'slo': dict(self.slo_bounds()) or None, 'good': self.good, 'goodput_per_s': per_second(self.good),
                'slo_attainment': round(self.good / self.runs, 4) if self.runs else None,
                'first_chunk_good': self.first_chunk_good, 'slo_target': self.target(), 'steps': steps,
                'saturation_rate': saturation['rate'], 'saturation': saturation if steps else None}


class _Step:
    """One rate of a sweep: its offered rate and duration, the summary of its runs, and how many of
    them started within the duration (the achieved start rate)."""

    def __init__(self, rate: float, duration: float, summary: Summary) -> None:
        self.rate, self.duration, self.summary = rate, duration, summary
        self.on_time = 0

    def add(self, record: dict) -> None:
        self.summary.add(record)
        self.on_time += record.get('offset_ms', 0) < self.duration * 1000

    def result(self, number: int) -> dict:
        whole = self.summary.result()
        scheduled = whole['planned_runs']
        return {'step': number, 'rate': self.rate, 'duration_s': self.duration, 'scheduled_runs': scheduled,
                'scheduled_rate': round(scheduled / self.duration, 3), 'achieved_rate': round(self.on_time / self.duration, 3),
                'runs': whole['runs'], 'ok': whole['ok'], 'good': whole['good'],
                'goodput_per_s': round(whole['good'] / self.duration, 3), 'slo_attainment': whole['slo_attainment'],
                'first_chunk_good': whole['first_chunk_good'],
                'latency_ms': {field: whole['latency_ms'][field] for field in ('first_text_ms', 'duration_ms')},
                'event_gaps_ms': whole['event_gaps_ms']}


def _saturation_step(steps: list[dict], target: float) -> dict:
    """The highest rate under capacity: walking up the rates, each step must keep its attainment at or
    above target and start its runs within RATE_TOLERANCE of its schedule's rate. Says which condition
    the first step past it failed."""
    under, exceeded, why = None, None, None
    for step in steps:
        problems = []
        if step['slo_attainment'] is None or step['slo_attainment'] < target:
            problems.append(f'attainment {step["slo_attainment"]} is under the target {target}')
        if step['achieved_rate'] < (1 - _RATE_TOLERANCE) * step['scheduled_rate']:
            problems.append(f'{step["achieved_rate"]} runs/s started, under {100 - _RATE_TOLERANCE * 100:.0f}% '
                            f'of the {step["scheduled_rate"]} runs/s scheduled')
        if problems:
            exceeded, why = step['rate'], ' and '.join(problems)
            break
        under = step['rate']
    if exceeded is None and steps:
        why = 'every step met the target: the capacity lies above the highest rate'
    return {'rate': under, 'exceeded_at': exceeded, 'why': why}


# What the summary counts of --cross-check pairs: compared (both answers there), of which same or different;
# not comparable (the token ids diverged), without token ids, and unstreamed requests that failed.
_PAIR_OUTCOMES = ('pairs', 'compared', 'same', 'different', 'not_comparable', 'without_token_ids',
                 'unstreamed_failed')


def _pair_outcomes(cross: dict) -> list[str]:
    """The PAIR_OUTCOMES one cross-check record counts in."""
    if cross['same'] is None:
        return ['pairs', 'unstreamed_failed']
    token_ids = {True: [], False: ['not_comparable'], None: ['without_token_ids']}[cross['comparable']]
    return ['pairs', 'compared', 'same' if cross['same'] else 'different', *token_ids]


def _unplanned(result: dict) -> str:
    """'  (of 200 planned)' when fewer runs have records than were planned (an interrupted load), else ''."""
    return f'  (of {result["planned_runs"]} planned)' if result['planned_runs'] > result['runs'] else ''


def _meaning(kind: str) -> str:
    return FAILURE_KINDS.get(kind, ('', 'a record written before failures had kinds'))[1]


_TERMINAL_COLUMNS = 80  # the width the tables for a person fit in


def _summary_table(result: dict) -> str:
    """The summary for a person, within TERMINAL_COLUMNS: counts, kinds of failure, the latency of ok runs."""
    lines = [f'runs {result["runs"]}  ok {result["ok"]}  not ok {result["not_ok"]}' + _unplanned(result)]
    if result['stale_connection_failures']:
        lines.append(f'stale connections: {result["stale_connection_failures"]} runs on a kept connection that was '
                     'closed while idle')
    if result['not_ok']:
        lines += textwrap.wrap('not ok by layer: ' + ', '.join(f'{layer} {count}' for layer, count
                                                               in result['not_ok_by_layer'].items()),
                               _TERMINAL_COLUMNS, subsequent_indent='  ')
        lines += [f'  {count:5d}  {_shorten(f"{kind}: {_meaning(kind)}", _TERMINAL_COLUMNS - 12)}'
                  for kind, count in list(result['not_ok_by_kind'].items())[:10]]
    lines.append(f'latency of {_count(result["latency_runs"], "ok run")}, ms '
                 f'({_count(result["latency_excludes"], "not ok run")} excluded):')
    gaps = result['event_gaps_ms']
    rows = [(field, result['latency_ms'][field]) for field in _LATENCY_FIELDS]
    rows.append((f'content-event gaps ({gaps["count"] if gaps else 0})', gaps))
    width = max(len(name) for name, _ in rows) + 2
    lines.append(' ' * width + ''.join(f'{key:>9}' for key in ('p50', 'p90', 'p99', 'max')))
    for name, values in rows:
        cells = ''.join(f'{values[key]:9.1f}' if values else f'{"-":>9}' for key in ('p50', 'p90', 'p99', 'max'))
        lines.append(f'  {name:<{width - 2}}{cells}')
    pairs = result.get('cross_check')
    if pairs:
        lines.append(f'cross-check: {_count(pairs["pairs"], "pair")}, {pairs["compared"]} compared: {pairs["same"]} same, '
                     f'{pairs["different"]} different; {pairs["not_comparable"]} not comparable, '
                     f'{pairs["without_token_ids"]} without token ids, {pairs["unstreamed_failed"]} unstreamed failed')
    runs, tokens = ([f'{result[key]} {label}' for key, label in group if result[key] is not None]
                    for group in ((('runs_per_s', 'runs/s'), ('ok_runs_per_s', 'ok runs/s')),
                                  (('completion_tokens_per_s', 'completion tokens/s'),
                                   ('content_events_per_s', 'content events/s'))))
    lines.append(f'wall {result["wall_s"]} s: ' + ', '.join(runs))
    if tokens:
        lines.append('  ' + ', '.join(tokens))
    return '\n'.join(lines + _goodput_lines(result))

def _goodput_lines(result: dict) -> list[str]:
    """Goodput against what a first-chunk tool would count, and a sweep's steps and saturation."""
    bounds = ', '.join(f'{name} <= {bound:g} ms' for name, bound in (result['slo'] or {}).items())
    within = f'ok and {bounds}' if bounds else 'ok; no --slo bounds'
    lines = [f'good {result["good"]} of {result["runs"]} ({within}): {result["goodput_per_s"]} good runs/s',
             f'  a tool that counts a first chunk as success would report {result["first_chunk_good"]} good']
    if not result['steps']:
        return lines
    lines.append(f'{"rate/s":>8}{"started/s":>10}{"runs":>6}{"ok":>6}{"good":>6}{"good/s":>8}{"attain":>8}'
                 f'{"first text p50":>15}{"p99":>8}')
    for step in result['steps']:
        first = step['latency_ms']['first_text_ms']
        cells = f'{first["p50"]:15.1f}{first["p99"]:8.1f}' if first else f'{"-":>15}{"-":>8}'
        attain = '-' if step['slo_attainment'] is None else f'{step["slo_attainment"]:.3f}'
        lines.append(f'{step["rate"]:8g}{step["achieved_rate"]:10g}{step["runs"]:6d}{step["ok"]:6d}{step["good"]:6d}'
                     f'{step["goodput_per_s"]:8g}{attain:>8}' + cells)
    saturation = result['saturation']
    under = 'at no step' if saturation['rate'] is None else f'up to {saturation["rate"]:g} runs/s'
    past = '' if saturation['exceeded_at'] is None else f'at {saturation["exceeded_at"]:g} runs/s '
    lines.append(f'under capacity {under}; {past}{saturation["why"]}')
    return lines


# ---------------------------------------------------------------------------
# The report: one self-contained HTML page per load
# ---------------------------------------------------------------------------

_REPORT_TIMELINE_ROWS = 2000  # runs drawn in the timeline at most (a bounded sample beyond)
_REPORT_ERRORS_PER_KIND = 5  # distinct error messages shown per kind of failure
# One colour per layer, far apart (Kelly's colours of maximum contrast), ok in green.
_LAYER_COLOURS = {None: '#008856', 'connect': '#0067a5', 'proxy': '#a1caf1', 'tls': '#875692', 'http': '#e68fac',
                 'transport': '#be0032', 'sse': '#882d17', 'protocol': '#f3c300', 'application': '#f38400',
                 'cross-check': '#8db600', 'timeout': '#5e5e5e', 'interrupted': '#222222', 'client': '#c2b280'}
_REPORT_WIDTH = 1400     # the drawings' width in px; they shrink to fit a narrower window
_MIN_LANE_PX = 4   # the height of one lane of the timeline, px: at least
_MAX_LANE_PX = 16  # and at most
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
            self.errors[record.get('error_kind') or _UNCLASSIFIED][record['error']] += 1
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
                 self._summary_section(result), _sweep_section(result), self._timeline(rows), self._histograms(result),
                 self._scatter(rows), self._errors_section(), '</body></html>\n']
        return '\n'.join(parts)

    def _summary_section(self, result: dict) -> str:
        cells = [('runs planned', result['planned_runs']), ('runs', result['runs']), ('ok', result['ok']),
                 ('not ok', result['not_ok']), ('good (ok and within every --slo)', result['good']),
                 ('good runs per second', result['goodput_per_s']),
                 ('counted by a first-chunk tool', result['first_chunk_good'])]
        cells += [(f'not ok: {layer}', count) for layer, count in result['not_ok_by_layer'].items()]
        cells += [(f'  {kind}', count) for kind, count in list(result['not_ok_by_kind'].items())[:10]]
        cells += [(f'cross-check: {outcome.replace("_", " ")}', count)
                  for outcome, count in (result.get('cross_check') or {}).items()]
        out = ['<h2>Summary</h2><table>'] + [f'<tr><th>{_e(name)}</th><td class="n">{value}</td></tr>'
                                           for name, value in cells]
        out.append('</table><table><tr><th>over ok runs (' + str(result['latency_excludes']) + ' not ok excluded)'
                   '</th><th>p50</th><th>p90</th><th>p99</th><th>max</th></tr>')
        for field in _LATENCY_FIELDS:
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
        shown = rows if len(rows) <= _REPORT_TIMELINE_ROWS else \
            [rows[i * len(rows) // _REPORT_TIMELINE_ROWS] for i in range(_REPORT_TIMELINE_ROWS)]
        lanes = _lanes(shown)
        origin = rows[0].start
        span = max(row.start - origin + row.duration_ms / 1000 for row in rows) or 1.0
        height = max(_MIN_LANE_PX, min(_MAX_LANE_PX, 600 // (max(lanes) + 1)))
        width, left = _REPORT_WIDTH, 40
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
                       f'fill="{_LAYER_COLOURS.get(row.layer, "#000")}"/>{marks}</g>')
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
        origin, width, height, left = rows[0].start, _REPORT_WIDTH, 260, 70
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
                f'cy="{height - (value - low) / room * (height - 8):.1f}" r="2" fill="{_LAYER_COLOURS[None]}"/>'
                for start, value in points]
        return '\n'.join(out) + '</svg>'

    def _errors_section(self) -> str:
        out = ['<h2>Errors</h2>']
        if not self.errors:
            return '\n'.join(out + ['<p>None: every run was ok.</p>'])
        for kind in sorted(self.errors, key=lambda kind: (-sum(self.errors[kind].values()), kind)):
            counts = sorted(self.errors[kind].items(), key=lambda item: (-item[1], item[0]))
            out.append(f'<h3>{_e(kind)}: {_count(sum(self.errors[kind].values()), "run")}, '
                       f'{_count(len(counts), "distinct message")}</h3><p>{_e(_meaning(kind))}</p><table>')
            out += [f'<tr><td class="n">{count}</td><td><code>{_e(message)}</code></td></tr>'
                    for message, count in counts[:_REPORT_ERRORS_PER_KIND]]
            out.append('</table>')
        return '\n'.join(out)


def _sweep_section(result: dict) -> str:
    """A sweep's steps: goodput and attainment against the offered rate, and first text per step."""
    steps = result['steps']
    if not steps:
        return ''
    width, height, left, top_rate = 700, 200, 50, max(step['rate'] for step in steps)
    top_goodput = max([step['rate'] for step in steps] + [step['goodput_per_s'] for step in steps])
    def x(rate: float) -> float:
        return left + rate / top_rate * (width - left - 20)
    def line(values: list[tuple[float, float]], colour: str, dash: str = '') -> str:
        points = ' '.join(f'{x(rate):.1f},{height - value * (height - 10):.1f}' for rate, value in values)
        return f'<polyline points="{points}" fill="none" stroke="{colour}" stroke-width="2" {dash}/>'
    goodput = [(step['rate'], step['goodput_per_s'] / top_goodput) for step in steps]
    attained = [(step['rate'], step['slo_attainment'] or 0.0) for step in steps]
    offered = [(step['rate'], step['rate'] / top_goodput) for step in steps]
    saturation = result['saturation']
    under = 'at no step' if saturation['rate'] is None else f'up to {saturation["rate"]:g} runs/s'
    past = '' if saturation['exceeded_at'] is None else f'At {saturation["exceeded_at"]:g} runs/s '
    out = ['<h2>Sweep</h2>', f'<p>Under capacity (attainment at least {result["slo_target"]}) {_e(under)}. '
           f'{_e(past + saturation["why"])}.</p>',
           '<p><span style="color:#2e7d32">goodput (runs/s)</span>, <span style="color:#999">offered rate</span>, '
           '<span style="color:#1565c0">attainment (0 to 1)</span>, against the offered rate.</p>',
           f'<svg width="{width}" height="{height + 25}" role="img" aria-label="goodput against offered rate">',
           f'<line x1="{left}" y1="{height}" x2="{width}" y2="{height}" stroke="#999"/>',
           f'<text x="{left - 4}" y="14" text-anchor="end">{top_goodput:g}/s</text>',
           line(offered, '#999', 'stroke-dasharray="4 3"'), line(goodput, '#2e7d32'), line(attained, '#1565c0')]
    out += [f'<text x="{x(step["rate"]):.1f}" y="{height + 15}" text-anchor="middle">{step["rate"]:g}</text>'
            for step in steps]
    out.append('</svg><table><tr><th>offered runs/s</th><th>started runs/s</th><th>runs</th><th>ok</th><th>good</th>'
               '<th>good runs/s</th><th>attainment</th><th>first text p50 (ms)</th><th>p99</th>'
               '<th>duration p99 (ms)</th></tr>')
    for step in steps:
        first, duration = step['latency_ms']['first_text_ms'], step['latency_ms']['duration_ms']
        cells = [step['rate'], step['achieved_rate'], step['runs'], step['ok'], step['good'], step['goodput_per_s'],
                 step['slo_attainment'], first and first['p50'], first and first['p99'], duration and duration['p99']]
        out.append('<tr>' + ''.join(f'<td class="n">{"-" if value is None else value}</td>' for value in cells) + '</tr>')
    return '\n'.join(out) + '</table>'


def _e(text: str) -> str:
    return html.escape(text, quote=True)


def _legend() -> str:
    return '<span class="key">' + ''.join(f'<span><span class="swatch" style="background:{colour}"></span> '
                                          f'{layer or "ok"}</span>' for layer, colour in _LAYER_COLOURS.items()) + '</span>'


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
    tallest, width, height, left = max(counts), _REPORT_WIDTH, 120, 60
    bar = (width - left - 10) / bins
    out = [f'<svg viewBox="0 0 {width} {height + 22}" width="{width}" height="{height + 22}" role="img" '
           f'aria-label="histogram">', f'<text x="{left - 4}" y="10" text-anchor="end">{tallest} runs</text>',
           _axis(left, left + bins * bar, height + 2, low, low + bins * width_ms, 'ms')]
    out += [f'<rect x="{left + i * bar:.1f}" y="{height - count / tallest * height:.1f}" width="{bar - 1:.1f}" '
            f'height="{count / tallest * height:.1f}" fill="{_LAYER_COLOURS[None]}"><title>{_count(count, "run")} '
            f'from {low + i * width_ms:.1f} ms</title></rect>' for i, count in enumerate(counts) if count]
    return '\n'.join(out) + '</svg>'


# ---------------------------------------------------------------------------
# Evidence files: each created once and never overwritten, and read back
# ---------------------------------------------------------------------------

def _reserve_output(path: str) -> int:
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


def _write_record(fd: int, record: dict) -> None:
    with os.fdopen(fd, 'w', encoding='utf-8') as output:
        json.dump(record, output, indent=2, ensure_ascii=False)
        output.write('\n')


def _save_capture(fd: int, path: str, capture: Capture, secrets: tuple[str, ...]) -> str | None:
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


def _write_report(fd: int, report: Report) -> None:
    with os.fdopen(fd, 'w', encoding='utf-8') as output:
        output.write(report.html())


def _is_record(value: object) -> bool:
    return isinstance(value, dict) and 'ok' in value and 'started_at' in value


def _load_records(paths: list[str], mixed_sources: bool = False) -> list[dict]:
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
    _check_sources({record.get('source', 'endpoint') for record in records}, mixed_sources, 'compare')
    return records


def _check_sources(sources: set, mixed_sources: bool, verb: str) -> None:
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


def summarize(paths: list[str], mixed_sources: bool = False, report: bool = False, slos: tuple | None = None,
              slo_target: float | None = None) -> tuple[Summary, Report | None]:
    """The summary (and, if asked, the report) of the records in saved evidence files, judged by slos
    (default: the bounds their loads were run with); UsageError for unreadable files, mixed sources
    or loads run with different bounds."""
    summary = Summary(slos, slo_target)
    drawing = Report(summary) if report else None
    for path in paths:
        for record in iter_records(path):
            summary.add(record)
            if drawing is not None:
                drawing.add(record)
    _check_sources(summary.seen['sources'], mixed_sources, 'summarize')
    summary.slo_bounds()
    return summary, drawing


# ---------------------------------------------------------------------------
# The exporter: the verdict of one run per scrape, for Prometheus
# ---------------------------------------------------------------------------
# blackbox_exporter's multi-target pattern: Prometheus asks GET /probe?target=NAME, NAME being one of the
# targets of the --targets file (never a URL), and gets the verdict of one run made now, in the text
# exposition format 0.0.4. The targets file, the exposition and the single-flight are sans-IO; ExporterServer
# is the HTTP server around them, and _exporter_command() the command line's part.

_EXPOSITION_TYPE = 'text/plain; version=0.0.4; charset=utf-8'
_SCRAPE_TIMEOUT_HEADER = 'X-Prometheus-Scrape-Timeout-Seconds'
_SCRAPE_TIMEOUT_MARGIN = 0.5     # seconds between a run's deadline and the scrape timeout Prometheus sent
_DEFAULT_EXPORTER_IN_FLIGHT = 4  # runs in flight at most across all targets, unless --concurrency says
_MAX_EXPORTER_CONNECTIONS = 64   # connections to the exporter served at once; more get a short 503
_EXPORTER_READ_TIMEOUT = 10.0    # seconds a client of the exporter may take to send its request
_TARGET_NAME = re.compile(r'[A-Za-z0-9][A-Za-z0-9_.-]{0,63}')
_ENV_NAME = re.compile(r'[A-Za-z_][A-Za-z0-9_]*')
# A target's keys, each standing for the long flag of a run; a key whose flag this version lacks is refused.
_TARGET_FLAGS = {'url': '--url', 'api': '--api', 'model': '--model', 'prompt': '--prompt', 'system': '--system',
                'max_tokens': '--max-tokens', 'temperature': '--temperature', 'stop': '--stop',
                'tools': '--tools', 'tool_choice': '--tool-choice', 'json_schema': '--json-schema',
                'expect_finish': '--expect-finish', 'extra': '--extra', 'idle': '--idle', 'deadline': '--deadline',
                'ca_file': '--ca-file', 'fixture': '--fixture', 'fixture_profile': '--fixture-profile',
                'cross_check': '--cross-check'}
# Keys whose value in the file is JSON itself rather than the flag's text (the flag takes it as a string).
_TARGET_JSON_KEYS = {'extra': 'object'}
_TARGET_VALUES = {  # what a target's value must be, by the kind of its flag
    'string': (lambda value: isinstance(value, str), 'a string'),
    'integer': (lambda value: isinstance(value, int) and not isinstance(value, bool), 'an integer'),
    'number': (lambda value: isinstance(value, (int, float)) and not isinstance(value, bool), 'a number'),
    'strings': (lambda value: isinstance(value, list) and all(isinstance(item, str) for item in value),
                'a list of strings'),
    'switch': (lambda value: isinstance(value, bool), 'true or false'),
    'object': (lambda value: isinstance(value, dict), 'a JSON object'),
}


class _Target(typing.NamedTuple):
    """One target of the file, checked: the run's flags as the command line would hold them, and the name
    of the environment variable that holds its API key (None: no key)."""

    name: str
    args: argparse.Namespace
    api_key_env: str | None


def _value_kind(action: argparse.Action) -> str:
    if action.nargs == 0:
        return 'switch'
    if isinstance(action, argparse._AppendAction):
        return 'strings'
    return {int: 'integer', float: 'number'}.get(action.type, 'string')


def _target_keys(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """The keys a target may hold: those of TARGET_FLAGS whose flag this parser has, with its action."""
    actions = {option: action for action in parser._actions for option in action.option_strings}
    return {key: actions[flag] for key, flag in _TARGET_FLAGS.items() if flag in actions}


def _target_problem(key: str, keys: dict[str, argparse.Action], value: object) -> str | None:
    """Why one key of a target cannot be used, or None."""
    action = keys.get(key)
    if action is None:
        return f'is not a setting of a target; a target may hold {", ".join(("api_key_env", *keys))}'
    check, noun = _TARGET_VALUES[_TARGET_JSON_KEYS.get(key) or _value_kind(action)]
    if not check(value):
        return f'must be {noun}, not {_seen(value)}'
    if action.choices is not None and value not in action.choices:
        return f'must be one of {", ".join(map(str, action.choices))}, not {_preview(str(value))}'
    if key == 'fixture' and value not in _fixture_server().CHOICES:
        return f'must be one of the fixture\'s modes (python3 {_FIXTURE_FILE} --help), not {_preview(str(value))}'
    return None


def parse_targets(data: object, parser: argparse.ArgumentParser) -> dict[str, _Target]:
    """The targets of a decoded targets file, {"targets": {"NAME": {key: value, ...}, ...}}; UsageError
    naming the target and the field for anything that is not one. Sans-IO: the files a target names
    are read later, by prepare_targets()."""
    if not isinstance(data, dict) or set(data) != {'targets'} or not isinstance(data['targets'], dict) \
            or not data['targets']:
        raise UsageError('expected {"targets": {"NAME": {...}, ...}} with at least one target')
    keys, defaults = _target_keys(parser), parser.parse_args([])
    targets = {}
    for name, settings in data['targets'].items():
        if not _TARGET_NAME.fullmatch(name):
            raise UsageError(f'target {_preview(name)}: a name is 1 to 64 letters, digits, "_", "." or "-", '
                             'starting with a letter or digit')
        if not isinstance(settings, dict):
            raise UsageError(f'target {name}: expected an object of settings, not {_seen(settings)}')
        args = argparse.Namespace(**vars(defaults))
        key_env = settings.get('api_key_env')
        if key_env is not None and not (isinstance(key_env, str) and _ENV_NAME.fullmatch(key_env)):
            raise UsageError(f'target {name}: api_key_env must be the name of an environment variable '
                             '(the key itself never goes in this file)')
        for key, value in settings.items():
            if key == 'api_key_env':
                continue
            problem = _target_problem(key, keys, value)
            if problem:
                raise UsageError(f'target {name}: {key} {problem}')
            setattr(args, keys[key].dest, json.dumps(value) if key in _TARGET_JSON_KEYS else value)
        if args.fixture is not None and args.url is not None:
            raise UsageError(f'target {name}: fixture and url exclude each other')
        targets[name] = _Target(name, args, key_env)
    return targets


def _in_key_terms(message: str) -> str:
    """A message that names flags (--max-tokens), with each named as the key of a target (max_tokens)."""
    return re.sub(r'--[a-z][a-z-]*', lambda flag: flag[0][2:].replace('-', '_'), _in_flag_terms(message))


def _prepare_targets(targets: dict[str, _Target], fixture_url) -> dict[str, PreparedRequest]:
    """Each target's prepared request (its files read, its key taken from its environment variable); a
    fixture target is sent to fixture_url(mode, profile, api). UsageError names the target and the field."""
    requests = {}
    for name, target in targets.items():
        args = target.args
        if target.api_key_env is not None and not os.environ.get(target.api_key_env):
            raise UsageError(f'target {name}: api_key_env names {target.api_key_env}, which is not set')
        try:
            url = (args.url or _DEFAULT_URL) if args.fixture is None else \
                fixture_url(args.fixture, args.fixture_profile, args.api or 'chat')
            requests[name] = _requests_from_args(args, url, target.api_key_env)[0]
        except (UsageError, ValueError) as exc:
            raise UsageError(f'target {name}: {_in_key_terms(str(exc))}') from None
    return requests


def _probe_deadline(target_deadline: float, scrape_timeout: str | None) -> float:
    """A run's deadline under a scrape: the target's, or Prometheus's scrape timeout less
    SCRAPE_TIMEOUT_MARGIN if that is sooner (half a timeout too short for the margin). A header that is
    not a positive number is ignored."""
    try:
        timeout = float(scrape_timeout) if scrape_timeout is not None else math.inf
    except ValueError:
        timeout = math.inf
    if not timeout > 0:
        timeout = math.inf  # NaN, zero and negative numbers say nothing usable
    budget = timeout - _SCRAPE_TIMEOUT_MARGIN if timeout > 2 * _SCRAPE_TIMEOUT_MARGIN else timeout / 2
    return min(target_deadline, budget)


class _Refusal(typing.NamedTuple):
    """Why a request gets no metrics: a stable reason (a label of the scrape-error counter) and one line."""

    reason: str
    message: str


def _probe_target(query: str, names: typing.Container[str]) -> str | _Refusal:
    """The target a /probe query names, or why it names none."""
    try:
        fields = parse_qsl(query, keep_blank_values=True, strict_parsing=True) if query else []
    except ValueError:
        return _Refusal('bad_query', 'malformed query; expected target=NAME')
    unknown = sorted({key for key, _ in fields} - {'target'})
    if unknown:
        return _Refusal('bad_query', f'unknown parameter {_preview(unknown[0])}; /probe takes target=NAME only')
    values = [value for _, value in fields]
    if len(values) != 1:
        return _Refusal('bad_query', 'expected target=NAME exactly once')
    if ':' in values[0] or '/' in values[0]:
        return _Refusal('url_target', 'target must be the name of a target in the targets file, not a URL')
    if values[0] not in names:
        return _Refusal('unknown_target', f'unknown target {_preview(values[0])}')
    return values[0]


# ---- the text exposition format, version 0.0.4 ----

class _Family(typing.NamedTuple):
    """One metric family: its name, type (gauge or counter), help text and samples (labels, value)."""

    name: str
    type: str
    help: str
    samples: list


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


def exposition(families: list[_Family]) -> str:
    """The families in the text exposition format 0.0.4: HELP and TYPE lines, then one line per sample."""
    lines = []
    for family in families:
        help_text = family.help.replace('\\', r'\\').replace('\n', r'\n')
        lines.append(f'# HELP {family.name} {help_text}')
        lines.append(f'# TYPE {family.name} {family.type}')
        for labels, value in family.samples:
            pairs = ','.join(f'{name}="{_label_value(str(text))}"' for name, text in labels.items())
            lines.append(f'{family.name}{{{pairs}}} {_sample_value(value)}' if pairs
                         else f'{family.name} {_sample_value(value)}')
    return '\n'.join(lines) + '\n'


def _seconds(ms: float | None) -> float | None:
    return None if ms is None else round(ms / 1000, 6)


# The gauges of one probe, each read from the run's record; a value of None leaves the sample out.
_PROBE_GAUGES = (
    ('probe_success', 'Whether the streamed answer really finished: the HTTP message, the event stream and the '
                      'answer all complete (1), or not (0)', lambda r: int(r['ok'])),
    ('probe_duration_seconds', 'How long the run took, from before the connection to its end',
     lambda r: _seconds(r['duration_ms'])),
    ('stream_probe_headers_seconds', 'From the start of the run to the response head; absent without one',
     lambda r: _seconds(r['headers_ms'])),
    ('stream_probe_first_text_seconds', 'From the start of the run to the first visible text (or first piece '
                                        'of a tool call); absent when none arrived',
     lambda r: _seconds(r['first_text_ms'])),
    ('stream_probe_content_events', 'Events that carried visible text or a piece of a tool call',
     lambda r: r['content_events']),
    ('stream_probe_http_status', 'The status of the final HTTP response; absent when none arrived',
     lambda r: (r['http'] or {}).get('status')),
    ('stream_probe_tool_calls', 'Tool calls that arrived', lambda r: len(r['tool_calls'])),
)
# Gauges present only when the target asks for them (it offers tools, or asks for a JSON answer).
_PROBE_CHECKS = (
    ('stream_probe_tool_calls_verified', 'With tools offered: 1 when the run is ok and its answer is tool calls, '
                                         'each one\'s arguments one JSON object matching its tool\'s parameters',
     lambda r: bool((r['request'] or {}).get('tools')), 'tool_calls'),
    ('stream_probe_json_verified', 'With a JSON schema asked for: 1 when the run is ok and its answer is JSON '
                                   'that parsed and matched the schema',
     lambda r: (r['request'] or {}).get('json_schema_sha256') is not None, 'json'),
)


def probe_families(record: dict) -> list[_Family]:
    """The metrics of one run, from its record alone."""
    families = [_Family(name, 'gauge', text, [({}, value)] if value is not None else [])
                for name, text, value in ((name, text, read(record)) for name, text, read in _PROBE_GAUGES)]
    families.append(_Family('stream_probe_failed', 'gauge', 'Per layer, 1 for the layer where the run failed '
                           '(the first failure) and 0 for the others',
                           [({'layer': layer}, int(record['error_layer'] == layer)) for layer in LAYERS]))
    families.append(_Family('stream_probe_error_info', 'gauge', 'The kind of the failure, as a label; absent '
                           'when the run is ok', [] if record['ok'] else
                           [({'kind': record['error_kind'] or _UNCLASSIFIED}, 1)]))
    families.extend(_Family(name, 'gauge', text, [({}, int(record['ok'] and record['answer_kind'] == kind))])
                    for name, text, asked, kind in _PROBE_CHECKS if asked(record))
    return families


# ---- the exporter's state: runs in flight, counters and last verdicts (no sockets) ----

class _Flight:
    def __init__(self) -> None:
        self.done = threading.Event()
        self.result: object = None


class SingleFlight:
    """One run per key at a time, and at most ``limit`` runs at once: a caller that finds a run of its key
    in flight waits for that run's result instead of starting another."""

    def __init__(self, limit: int) -> None:
        self._lock = threading.Lock()
        self._flights: dict[str, _Flight] = {}
        self._slots = threading.BoundedSemaphore(limit)
        self.joined: collections.Counter = collections.Counter()  # calls that joined a run in flight, by key

    def do(self, key: str, work: typing.Callable[[float], object], wait: float) -> tuple[object, bool]:
        """(the result of work(seconds waited for a slot), or None if none came within ``wait`` seconds;
        whether this call joined a run already in flight). The call that starts a run waits up to ``wait``
        for a slot."""
        with self._lock:
            flight = self._flights.get(key)
            joined = flight is not None
            if joined:
                self.joined[key] += 1
            else:
                flight = self._flights[key] = _Flight()
        if joined:
            flight.done.wait(wait)
            return flight.result, True
        try:
            waited = self._take_slot(wait)
            if waited is not None:
                try:
                    flight.result = work(waited)
                finally:
                    self._slots.release()
        finally:
            with self._lock:
                del self._flights[key]
            flight.done.set()
        return flight.result, False

    def _take_slot(self, wait: float) -> float | None:
        """The seconds waited for a slot (0 when one was free), or None when none came within ``wait``."""
        if self._slots.acquire(blocking=False):
            return 0.0
        began = time.monotonic()
        return time.monotonic() - began if self._slots.acquire(timeout=max(wait, 0)) else None

    def in_flight(self) -> int:
        """Keys with a run in flight (or waiting for a slot)."""
        with self._lock:
            return len(self._flights)


class _Reply(typing.NamedTuple):
    """What the exporter answers one request with; ``problem`` names a scrape error for the counters."""

    status: int
    content_type: str
    body: str
    problem: str | None = None


def _one_line(status: int, text: str, problem: str) -> _Reply:
    return _Reply(status, 'text/plain; charset=utf-8', text + '\n', problem)


class Exporter:
    """The exporter without its server: its targets, the runs in flight, its counters and each target's
    last record. ``run_one(request)`` makes a run and returns its record; ``on_record(name,
    record)`` keeps it (the evidence file) and ``log(line)`` tells the operator."""

    def __init__(self, requests: dict[str, PreparedRequest], limit: int, run_one, on_record, log) -> None:
        self.requests = requests
        self.flights = SingleFlight(limit)
        self.run_one, self.on_record, self.log = run_one, on_record, log
        self._lock = threading.Lock()
        self.runs = collections.Counter({(name, result): 0 for name in requests for result in ('ok', 'failed')})
        self.failures: collections.Counter = collections.Counter()
        self.scrape_errors: collections.Counter = collections.Counter()
        self.write_errors = 0
        self.last: dict[str, dict] = {}
        self.stopping = False  # set once a signal came: a probe that arrives later starts no run

    routes = {'/probe': 'probe', '/metrics': 'metrics', '/': 'page'}

    def answer(self, target: str, scrape_timeout: str | None) -> _Reply:
        """The answer to GET target (a path and query), with ``scrape_timeout`` the value of Prometheus's
        X-Prometheus-Scrape-Timeout-Seconds header if sent; an error is counted and logged."""
        path, _, query = target.partition('?')
        route = self.routes.get(path)
        if route is None:
            answer = _one_line(404, f'no such page {_preview(path)}; try /probe?target=NAME, /metrics or /',
                               'not_found')
        else:
            answer = self.probe(query, scrape_timeout) if route == 'probe' else getattr(self, route)()
        if answer.problem is not None:
            self.scrape_error(answer.problem)
            self.log(f'{answer.status} for GET {_shorten(target, 100)}: {answer.body.strip()}')
        return answer

    def probe(self, query: str, scrape_timeout: str | None) -> _Reply:
        """One scrape of /probe: a run of the target the query names (or the result of the one in flight)."""
        name = _probe_target(query, self.requests)
        if isinstance(name, _Refusal):
            return _one_line(400, name.message, name.reason)
        if self.stopping:
            return _one_line(503, 'the exporter is stopping', 'stopping')
        request = self.requests[name]
        budget = _probe_deadline(request.deadline, scrape_timeout)
        record, joined = self.flights.do(name, lambda waited: self._run(name, request, budget - waited), budget)
        if record is None:
            return _one_line(503, f'no result for {name} within {budget:g} s: '
                             + ('its run in flight has not ended' if joined else 'too many runs in flight'), 'busy')
        return _Reply(200, _EXPOSITION_TYPE, exposition(probe_families(record)))

    def _run(self, name: str, request: PreparedRequest, deadline: float) -> dict | None:
        """One run of a target under ``deadline`` seconds, its record kept and counted (None: no time left)."""
        if deadline <= 0:
            return None
        request = dataclasses.replace(request, deadline=deadline)
        try:
            record = self.run_one(request)
        except Exception as exc:  # a bug in this client: the run still leaves its record, saying so
            record = _failed_record(request, _failure('client_error', f'the client failed during the run: '
                                                                     f'{type(exc).__name__}: {exc}'))
        record = {**record, 'target': name}
        with self._lock:
            self.runs[name, 'ok' if record['ok'] else 'failed'] += 1
            if not record['ok']:
                self.failures[name, record['error_layer'], record['error_kind'] or _UNCLASSIFIED] += 1
            self.last[name] = record
        self.on_record(name, record)
        self.log(f'probe {name}: {_verdict_line(record)}')
        return record

    def scrape_error(self, problem: str) -> None:
        with self._lock:
            self.scrape_errors[problem] += 1

    def write_error(self) -> None:
        with self._lock:
            self.write_errors += 1

    def metrics(self) -> _Reply:
        """/metrics: the exporter's own counters."""
        with self._lock:
            families = [
                _Family('stream_exporter_runs_total', 'counter', 'Runs made, by target and result (ok or failed)',
                       [({'target': name, 'result': result}, count)
                        for (name, result), count in sorted(self.runs.items())]),
                _Family('stream_exporter_failures_total', 'counter', 'Runs not ok, by target, failing layer and '
                       'error kind', [({'target': name, 'layer': layer, 'kind': kind}, count)
                                      for (name, layer, kind), count in sorted(self.failures.items())]),
                _Family('stream_exporter_joined_scrapes_total', 'counter', 'Scrapes answered with the result of '
                       'a run of their target already in flight, by target',
                       [({'target': name}, self.flights.joined[name]) for name in sorted(self.requests)]),
                _Family('stream_exporter_scrape_errors_total', 'counter', 'Requests to the exporter answered '
                       'with an error instead of metrics, by reason',
                       [({'reason': reason}, count) for reason, count in sorted(self.scrape_errors.items())]),
                _Family('stream_exporter_evidence_write_errors_total', 'counter', 'Records that could not be '
                       'appended to the evidence file', [({}, self.write_errors)]),
                _Family('stream_exporter_runs_in_flight', 'gauge', 'Runs in flight now (those waiting for a slot too)',
                       [({}, self.flights.in_flight())]),
                _Family('stream_exporter_targets', 'gauge', 'Targets in the targets file',
                       [({}, len(self.requests))]),
            ]
        return _Reply(200, _EXPOSITION_TYPE, exposition(families))

    def page(self) -> _Reply:
        """/: the targets, with the last verdict of each, its error and when it ran."""
        with self._lock:
            last = dict(self.last)
        rows = []
        for name, request in self.requests.items():
            record = last.get(name)
            verdict = 'not run yet' if record is None else 'ok' if record['ok'] else 'NOT OK'
            rows.append(f'<tr><td><a href="/probe?target={_e(quote(name))}">{_e(name)}</a></td>'
                        f'<td>{_e(request.api)}</td><td>{_e(request.url)}</td><td>{verdict}</td>'
                        f'<td>{_e((record or {}).get("error") or "")}</td>'
                        f'<td>{_e((record or {}).get("started_at") or "")}</td></tr>')
        body = ('<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>stream-client exporter'
                '</title></head><body><h1>stream-client exporter</h1><p>A probe (a target\'s link) runs one streamed '
                'request to that target now. The exporter\'s own counters: <a href="/metrics">/metrics</a>.</p><table><tr><th>target</th><th>API</th><th>URL</th><th>last verdict</th>'
                f'<th>error</th><th>started (UTC)</th></tr>{"".join(rows)}</table></body></html>\n')
        return _Reply(200, 'text/html; charset=utf-8', body)


# ---- the HTTP server around it ----

class _ExporterHandler(http.server.BaseHTTPRequestHandler):
    """GET /probe, /metrics and /; anything else a short 4xx with one line of text."""

    server_version = f'stream-client-exporter/{__version__}'
    timeout = _EXPORTER_READ_TIMEOUT
    problems = {400: 'bad_request', 404: 'not_found', 405: 'method', 413: 'too_large', 414: 'too_large',
                431: 'too_large'}

    def parse_request(self) -> bool:
        if not super().parse_request():
            return False
        if self.request_version == 'HTTP/0.9':
            self.send_error(400, 'HTTP/0.9 is not served; send an HTTP/1.x request')
            return False
        if self.command != 'GET':
            self.send_error(405, f'{_shorten(self.command, 20)} is not served here; use GET')
            return False
        if self.headers.get('Content-Length', '0').strip() != '0' or 'Transfer-Encoding' in self.headers:
            self.send_error(413, 'a request to the exporter has no body')
            return False
        return True

    def do_GET(self) -> None:
        with self.server.serving():
            self._answer(self.server.exporter.answer(self.path, self.headers.get(_SCRAPE_TIMEOUT_HEADER)))

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """The base class's errors (malformed, too large, timed out) and ours: one line of text."""
        problem = self.problems.get(code, 'bad_request')
        self.server.exporter.scrape_error(problem)
        text = _shorten(' '.join((message or http.HTTPStatus(code).phrase).split()), 200)
        self.server.exporter.log(f'{code} for a request: {text}')
        self.close_connection = True
        self.request_version = 'HTTP/1.0'  # a status line even for a request that named no version
        self._answer(_one_line(code, text, problem))

    def _answer(self, answer: _Reply) -> None:
        data = answer.body.encode()
        try:
            self.send_response(answer.status)
            self.send_header('Content-Type', answer.content_type)
            self.send_header('Content-Length', str(len(data)))
            if answer.status == 405:
                self.send_header('Allow', 'GET')
            self.send_header('Connection', 'close')
            self.end_headers()
            self.wfile.write(data)
        except OSError:  # the scraper went away; the run's record is already kept
            self.close_connection = True

    def log_message(self, format: str, *args) -> None:  # noqa: A002 -- the base class's name
        pass  # each probe and each error is logged once, in the exporter's own words


class ExporterServer(http.server.ThreadingHTTPServer):
    """The exporter's HTTP server. It serves at most MAX_EXPORTER_CONNECTIONS connections at once (more get
    a short 503) and counts the requests it is answering, so that a stop can wait for them."""

    daemon_threads = True
    request_queue_size = 128  # connections the kernel holds until they are accepted

    def __init__(self, address: tuple[str, int], exporter: Exporter) -> None:
        self.address_family = socket.AF_INET6 if ':' in address[0] else socket.AF_INET
        self.exporter = exporter
        self._connections = threading.BoundedSemaphore(_MAX_EXPORTER_CONNECTIONS)
        self._busy = threading.Condition()
        self._answering = 0
        super().__init__(address, _ExporterHandler)

    @contextlib.contextmanager
    def serving(self):
        with self._busy:
            self._answering += 1
        try:
            yield
        finally:
            with self._busy:
                self._answering -= 1
                self._busy.notify_all()

    def wait_answered(self) -> None:
        """Until every request being answered has had its answer."""
        with self._busy:
            self._busy.wait_for(lambda: self._answering == 0)

    def process_request(self, request, client_address) -> None:
        if not self._connections.acquire(blocking=False):
            self.exporter.scrape_error('too_many_connections')
            try:
                request.sendall(b'HTTP/1.0 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n'
                                b'Content-Length: 33\r\nConnection: close\r\n\r\ntoo many connections to exporter\n')
            except OSError:
                pass
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._connections.release()

    def handle_error(self, request, client_address) -> None:
        if not isinstance(sys.exc_info()[1], OSError):  # a bug: show it; the exporter goes on
            super().handle_error(request, client_address)


def _exporter_address(value: str) -> tuple[str, int]:
    """The address of --exporter: PORT or :PORT (loopback), or HOST:PORT with HOST an IP address
    ([::1]:PORT for IPv6) or localhost. ValueError otherwise."""
    host, colon, port = value.rpartition(':')
    host = host.removeprefix('[').removesuffix(']') if host.startswith('[') else host
    if not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(f'--exporter takes HOST:PORT (or PORT for 127.0.0.1), not {value!r}')
    if not host or host == 'localhost':
        return '127.0.0.1', int(port)
    try:
        ipaddress.ip_address(host)
    except ValueError:
        raise ValueError(f'--exporter needs an IP address to bind, not {host!r}: 127.0.0.1 for this host only, '
                         '0.0.0.0 for every interface') from None
    return host, int(port)


class _EvidenceLog:
    """The exporter's evidence file: each record appended as one JSON line by one write, never rewritten."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._lock = threading.Lock()

    def append(self, record: dict) -> None:
        data = (json.dumps(record, ensure_ascii=False) + '\n').encode()
        with self._lock:
            while data:
                data = data[os.write(self.fd, data):]


def _append_output(path: str) -> int:
    """Open --output for appending, creating it (mode 0600) if absent. An existing file must hold JSON
    Lines records ending with a line end, so that appending cannot change any line."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
    except FileNotFoundError:
        raise UsageError(f'cannot create {path!r}: its directory does not exist') from None
    except OSError as exc:
        raise UsageError(f'cannot open {path!r}: {exc.strerror or exc}') from None
    size = os.fstat(fd).st_size
    if size:
        with open(path, 'rb') as existing:
            first = existing.readline(_MAX_CAPTURE_BYTES)
        last = os.pread(fd, 1, size - 1)
        try:
            starts_a_record = _is_record(json.loads(first))
        except (ValueError, RecursionError):
            starts_a_record = False
        if last != b'\n' or not starts_a_record:
            os.close(fd)
            raise UsageError(f'{path} is not a JSON Lines file of records ending with a line end; the exporter '
                             'appends only to such a file (or a new one)')
    return fd


# What --exporter takes besides its targets; every other flag of a run belongs in the targets file.
_EXPORTER_FLAGS = ('exporter', 'targets', 'output', 'concurrency', 'quiet')


def _read_targets(path: str, parser: argparse.ArgumentParser) -> dict[str, _Target]:
    """The targets of --targets, checked (strict JSON: no NaN, no repeated key); UsageError names the file."""
    try:
        with open(path, encoding='utf-8') as file:
            data = strict_json(file.read())
    except OSError as exc:
        raise UsageError(f'cannot read --targets {path!r}: {exc.strerror or exc}') from None
    except ValueError as exc:  # UnicodeDecodeError too
        raise UsageError(f'--targets {path} is not JSON: {exc}') from None
    try:
        return parse_targets(data, parser)
    except UsageError as exc:
        raise UsageError(f'--targets {path}: {exc}') from None


def _exporter_command(args, parser: argparse.ArgumentParser) -> int:
    """Serve /probe until SIGTERM or SIGINT; then let the runs in flight end (each within its deadline) and
    keep their records, and exit 143 or 130. A second signal interrupts those runs."""
    prog = parser.prog
    if args.exporter is None or args.targets is None:
        raise UsageError('--exporter and --targets go together')
    extra = _given_flags(parser, args, _EXPORTER_FLAGS)
    if extra:
        raise UsageError(f'{", ".join(extra)} {"does" if len(extra) == 1 else "do"} not go with --exporter: '
                         'the settings of its runs go in the targets file')
    if args.output is None:
        raise UsageError('--output is required: every run\'s record is appended to it')
    if args.concurrency is not None and args.concurrency < 1:
        raise UsageError(f'--concurrency must be at least 1, got {args.concurrency}')
    address = _exporter_address(args.exporter)
    targets = _read_targets(args.targets, parser)
    fixtures: dict[tuple, _Fixture] = {}

    def fixture_url(mode: str, profile: str, api: str) -> str:
        if (mode, profile, api) not in fixtures:
            fixtures[mode, profile, api] = _Fixture(mode, profile, api, 0)
        return fixtures[mode, profile, api].url
    quiet, lock = args.quiet, threading.Lock()

    def log(line: str) -> None:
        if not quiet:
            with lock:
                print(line, file=sys.stderr, flush=True)
    try:
        try:
            requests = _prepare_targets(targets, fixture_url)
        except UsageError as exc:
            raise UsageError(f'--targets {args.targets}: {exc}') from None
        fd = _append_output(args.output)
        evidence, cancel = _EvidenceLog(fd), Cancel()

        def keep(name: str, record: dict) -> None:
            try:
                evidence.append(record)
            except OSError as exc:
                exporter.write_error()
                log(f'{prog}: error: cannot append the record of {name} to {args.output}: {exc.strerror or exc}')
        exporter = Exporter(requests, args.concurrency or _DEFAULT_EXPORTER_IN_FLIGHT,
                            lambda request: run(request, cancel=cancel), keep, log)
        try:
            server = ExporterServer(address, exporter)
        except OSError as exc:
            os.close(fd)
            raise UsageError(f'cannot serve on {args.exporter}: {exc.strerror or exc}') from None
        try:
            return _serve_until_signal(server, exporter, cancel, args, log)
        finally:
            os.close(fd)
    finally:
        for fixture in fixtures.values():
            fixture.close()


def _serve_until_signal(server: ExporterServer, exporter: Exporter, cancel: Cancel, args, log) -> int:
    stopping: list[str] = []

    def on_signal(signum, frame) -> None:
        stopping.append(signal.Signals(signum).name)
        if len(stopping) > 1:
            cancel.cancel(stopping[-1])
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, on_signal)
    threading.Thread(target=server.serve_forever, args=(0.1,), daemon=True).start()
    host, port = server.server_address[:2]
    shown = f'[{host}]' if ':' in host else host
    log(f'exporter: listening on http://{shown}:{port}/ with {_count(len(exporter.requests), "target")}; '
        f'records appended to {args.output}')
    while not stopping:
        time.sleep(0.1)
    exporter.stopping = True
    log(f'exporter: {stopping[0]}: ending {_count(exporter.flights.in_flight(), "run")} in flight')
    server.shutdown()
    server.server_close()
    server.wait_answered()  # every run is inside a request being answered: their records are kept by then
    _ignore_signals()  # the records are on disk
    return _SIGNAL_EXIT[stopping[0]]


# ---------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------

_SIGNAL_EXIT = {'SIGINT': 130, 'SIGTERM': 143}


class _OneLineParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line on stderr and exit status 2."""

    def error(self, message: str):
        self.exit(2, f'{self.prog}: error: {message}\n')


_FIXTURE_FILE = 'fixture_server.py'
_FIXTURE_PROFILES = ('guide', 'vllm')  # fixture_server.PROFILES, named here so that --help needs no fixture


def _fixture_server():
    """The fixture module, for --fixture: fixture_server.py beside this file, loaded only then, so that
    this file copied alone runs everything else. UsageError if it is not there."""
    loaded = sys.modules.get('fixture_server')
    if loaded is not None:
        return loaded
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), _FIXTURE_FILE)
    if not os.path.isfile(path):
        raise UsageError(f'--fixture needs {_FIXTURE_FILE} beside {os.path.basename(__file__)} (in '
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
    raise UsageError(f'--fixture has no mode {mode!r}; {hint}python3 {_FIXTURE_FILE} --help lists its '
                     f'{len(fixture.CHOICES)} modes')


def _program_name(module: str) -> str | None:
    """How the program was started, when argparse's default (the script's file name) would be wrong:
    ``python3 -m MODULE``. None otherwise."""
    spec = getattr(sys.modules.get('__main__'), '__spec__', None)
    if spec is not None and spec.name == module:
        return f'{os.path.basename(sys.executable)} -m {module}'
    return None


def _parser() -> _OneLineParser:
    parser = _OneLineParser(
        prog=_program_name('stream_client'), allow_abbrev=False,
        description='Stream answers from vLLM or another compatible server (chat completions, completions, the '
                    'Responses API or the Anthropic Messages API) and save evidence of whether each really finished: one run, or many at '
                    'once with a summary built from their verdicts. Exit status: 0 every run ok, 1 a run not ok, '
                    '2 bad arguments or output path, 130/143 interrupted.',
        epilog='The API key is read from MODEL_API_KEY and sent as a Bearer token; it is never saved or printed.')
    send = parser.add_argument_group('what to send')
    send.add_argument('--url', help=f'the endpoint (default {_DEFAULT_URL}); a path ending in '
                                    f'{", ".join(_API_PATHS)} chooses the API')
    send.add_argument('--api', choices=list(VALIDATORS),
                      help='the API, for a server mounted at another path (default: from the URL path)')
    send.add_argument('--model', help='model name to request (default with --fixture: synthetic-fixture)')
    send.add_argument('--prompt', help=f'user message (default: {_DEFAULT_PROMPT!r})')
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
    send.add_argument('--expect-finish', choices=_FINISHES, default='stop',
                      help='the finish of a finished answer: stop (default), or length for a fixed-length load '
                           '(with "ignore_eos" in --extra), where the usage must also count --max-tokens tokens')
    send.add_argument('--cross-check', action='store_true',
                      help='after each streamed request, send the same body unstreamed (stream false) and compare '
                           'the answers; on chat and completions both ask for "return_token_ids": true, and when the '
                           'token ids agree a different answer is a failure at layer cross-check. Needs --temperature '
                           '0 or a "seed" in --extra')
    send.add_argument('--idle', type=float, default=10.0, metavar='S',
                      help='seconds to wait for the next bytes (default 10)')
    send.add_argument('--deadline', type=float, default=60.0, metavar='S',
                      help='seconds one run may take (default 60)')
    send.add_argument('--ca-file', metavar='PEM', help='extra trusted CA certificates for https')
    send.add_argument('--no-proxy', action='store_true',
                      help='ignore HTTPS_PROXY, HTTP_PROXY and NO_PROXY: connect directly')
    load = parser.add_argument_group('many runs')
    load.add_argument('--runs', type=int, metavar='N', help='how many runs (default 1)')
    load.add_argument('--concurrency', type=int, metavar='C',
                      help='at most C runs in flight (default 1; under --rate, up to '
                           f'{_MAX_OPEN_LOOP_IN_FLIGHT})')
    load.add_argument('--rate', type=float, metavar='R',
                      help='start R runs per second whatever is in flight (an open loop; default: a closed loop)')
    load.add_argument('--processes', type=int, metavar='P',
                      help='spread the load\'s runs and its --concurrency over P forked worker processes '
                           '(default 1), so that at hundreds of streams the client\'s own work does not delay '
                           'the timestamps; this process still writes the one evidence file')
    load.add_argument('--rates', metavar='R1,R2,...',
                      help='a sweep: one open-loop step per rate, each for --duration seconds, to find the rate '
                           'at which the server saturates (see --slo)')
    load.add_argument('--duration', type=float, metavar='S',
                      help='bound an open loop (--rate, or each step of --rates) by time instead of --runs')
    load.add_argument('--slo', action='append', metavar='NAME=MS',
                      help='a bound a good run meets, repeatable: ' + ', '.join(_SLO_FIGURES) + '; goodput counts '
                           'the runs that are ok and within every bound')
    load.add_argument('--slo-target', type=float, metavar='F',
                      help=f'the attainment (good runs over all) a sweep step needs to count as under capacity '
                           f'(default {_DEFAULT_SLO_TARGET})')
    load.add_argument('--arrivals', choices=_ARRIVALS, default='poisson',
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
                     help=f'stream from the synthetic fixture ({_FIXTURE_FILE}, beside this file), run in this '
                          'process on a free loopback port. MODE is one of its modes: ok, broken, truncated, '
                          f'stall... (python3 {_FIXTURE_FILE} --help lists them). Slow on purpose: stall and '
                          'held-open last until --idle, drip until --deadline. mixed gives each run a mode from '
                          'a seeded schedule, for a demo of --runs')
    fix.add_argument('--fixture-profile', choices=_FIXTURE_PROFILES, default='guide',
                     help="the bytes --fixture speaks: the guide's fixture or vLLM 0.32's (default guide)")
    read = parser.add_argument_group('reading saved evidence (nothing is sent)')
    read.add_argument('--compare', nargs='+', metavar='RECORD', help='print saved records side by side')
    read.add_argument('--summary', nargs='+', metavar='FILE',
                      help='the summary of saved runs (JSON Lines or single records), as a load prints it')
    read.add_argument('--mixed-sources', action='store_true',
                      help='let --compare and --summary mix records from the fixture, a replay and an endpoint')
    probe = parser.add_argument_group('monitoring: a Prometheus exporter (docs/exporter.md)')
    probe.add_argument('--exporter', metavar='HOST:PORT',
                       help='serve GET /probe?target=NAME, one run of that target per scrape as Prometheus '
                            'metrics, until SIGTERM; PORT alone binds 127.0.0.1, another address must be given '
                            'in full (0.0.0.0 exposes the probes to the network). Each record is appended to '
                            '--output (JSON Lines); --concurrency bounds the runs in flight (default '
                            f'{_DEFAULT_EXPORTER_IN_FLIGHT})')
    probe.add_argument('--targets', metavar='FILE',
                       help='JSON {"targets": {"NAME": {"url": ..., "model": ..., "api_key_env": ...}}}: each '
                            'target holds the settings of one run, keyed by the long flags\' names')
    parser.add_argument('--version', action='version', version=f'%(prog)s {__version__}')
    return parser


def _requests_from_args(args, url: str, key_env: str | None = 'MODEL_API_KEY') -> list[PreparedRequest]:
    """The requests the command line asks for, sent to url (the fixture's, with --fixture): one,
    or one per line of --prompts; the API key is read from the environment variable key_env."""
    model = args.model or ('synthetic-fixture' if args.fixture is not None else None)
    if model is None:
        raise UsageError('--model is required (unless --fixture is used)')
    if args.prompts is None:
        prompts = [{'prompt': _prompt(args), 'system': args.system, 'max_tokens': args.max_tokens}]
    elif args.prompt is not None or args.prompt_file is not None:
        raise UsageError('--prompts replaces --prompt and --prompt-file; give only one of them')
    else:
        prompts = _load_prompts(args.prompts, args.system, args.max_tokens)
    extra = _extra(args)
    if args.cross_check and args.temperature != 0 and not _seeded(extra):
        raise UsageError(f'--cross-check needs a deterministic request: --temperature {args.temperature:g} without a '
                         '"seed" in --extra samples the two answers apart')
    tools, json_schema = _answer_files(args)
    if args.tool_choice is not None and tools is None:
        raise UsageError('--tool-choice needs --tools')
    return [prepare(url, model, line['prompt'], max_tokens=line['max_tokens'], idle=args.idle,
                    deadline=args.deadline, ca_file=args.ca_file, token=os.environ.get(key_env) if key_env else None,
                    system=line['system'], temperature=args.temperature, stop=args.stop, extra=extra,
                    api=args.api, expect_finish=args.expect_finish,
                    source='endpoint' if args.fixture is None else 'fixture', tools=tools,
                    tool_choice=args.tool_choice, json_schema=json_schema, trust_env=not args.no_proxy,
                    cross_check=args.cross_check)
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


def _unchecked_line(spec: AnswerSpec, shown: int = 4) -> str:
    """The schema keywords that are not checked, in one line (the record lists them all)."""
    unchecked = spec.unchecked()
    more = f' and {len(unchecked) - shown} more (see unchecked_schema_keywords)' if len(unchecked) > shown else ''
    return f'not checked against the schema: {"; ".join(unchecked[:shown])}{more}'


def _checked_line(spec: AnswerSpec, record: dict) -> str | None:
    """What a run checked against a schema and found matching: the JSON answer, or each tool call
    whose tool declares parameters; None when nothing was."""
    schemas = dict(spec.tools)
    calls = [f'tool call {call["index"]} ({call["name"]})' for call in record.get('tool_calls') or ()
             if schemas.get(call['name']) is not None and call['arguments_problem'] is None]
    if record['ok'] and record.get('answer_kind') == 'json' and spec.json_schema is not None:
        calls.append('the JSON answer')
    return f'checked against its schema, and matching: {", ".join(calls)}' if calls else None


def _json_file(path: str, flag: str) -> object:
    try:
        with open(path, encoding='utf-8') as file:
            return json.load(file)
    except OSError as exc:
        raise UsageError(f'cannot read {flag} {path!r}: {exc.strerror or exc}') from None
    except (ValueError, RecursionError) as exc:
        raise UsageError(f'{flag} {path!r} is not JSON: {exc}') from None


def _load_prompts(path: str, system: str | None, max_tokens: int) -> list[dict]:
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
        return _DEFAULT_PROMPT if args.prompt is None else args.prompt
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
            raise UsageError(f'fixture mode {mode} applies to {_and_list(fixture.ONLY_ON[mode])} only; '
                             f'add --api {fixture.ONLY_ON[mode][0]}')
        self.instance = fixture.server(0, mode, profile=profile, seed=seed)
        path = next(path for path, name in _API_PATHS.items() if name == api)
        self.url = f'http://127.0.0.1:{self.instance.server_port}{path}'
        threading.Thread(target=self.instance.serve_forever, args=(0.05,), daemon=True).start()

    def close(self) -> None:
        self.instance.shutdown()
        self.instance.server_close()


class _LiveView:
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
        self._write(_verdict_line(record) + '\n')


def _verdict_line(record: dict) -> str:
    """The run at a glance: 'ok: 2 content events, ...' or 'NOT OK [layer]: what went wrong', and what the
    cross-check found, when there was one."""
    cross = _cross_check_line(record.get('cross_check'))
    if record['ok']:
        return (f'ok: {_count(record["content_events"], "content event")}, first text {record["first_text_ms"]:.0f} ms, '
                f'done {record["duration_ms"]:.0f} ms' + cross)
    layer = record['error_layer']
    return f'NOT OK [{layer}]: {record["error"].removeprefix(layer + ": ")}' + ('' if layer == 'cross-check' else cross)


def _cross_check_line(cross: dict | None) -> str:
    """'; cross-check: the same answer, 57 equal token ids' and the like, or '' without a cross-check."""
    if not cross:
        return ''
    if cross['same'] is None:
        return f'; cross-check: no unstreamed answer ({cross["unstreamed_problem"]})'
    if cross['comparable'] is False:
        return f'; cross-check: not comparable, the token ids diverged at token {cross["diverged_at_token"]}'
    ids = f', {_count(cross["token_ids"]["streamed"], "equal token id")}' if cross['comparable'] else \
        ', no token ids to compare'
    return f'; cross-check: {"the same answer" if cross["same"] else cross["differences"][0]}{ids}'


_COMPARE_COLUMNS = (('file', None), ('source', 'source'), ('model', 'model'), ('ok', 'ok'),
                   ('layer', 'error_layer'), ('headers ms', 'headers_ms'), ('1st event ms', 'first_event_ms'),
                   ('1st text ms', 'first_text_ms'), ('duration ms', 'duration_ms'),
                   ('events', 'content_events'), ('tokens', 'completion_tokens'), ('text reads', 'content_reads'),
                   ('buffered', 'buffered_delivery'))


def _compare_table(paths: list[str], records: list[dict]) -> str:
    """One line per field and one column per record, so that a few records fit a terminal."""
    rows = [[name] + [os.path.basename(path) if key is None else _cell(record.get(key))
                      for path, record in zip(paths, records)] for name, key in _COMPARE_COLUMNS]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return '\n'.join('  '.join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows)


def _settings_differ(records: list[dict]) -> list[str]:
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
    _ignore_signals()
    fd = _reserve_output(args.output)
    if args.capture is None:
        return fd, None
    try:
        return fd, _reserve_output(args.capture)
    except UsageError:
        os.close(fd)
        os.unlink(args.output)
        raise


def _run_command(args, request: PreparedRequest, fd: int, capture_fd: int | None) -> tuple[dict, int]:
    """Run once and write the record (and capture) whatever happens; return the record and exit status.

    SIGINT and SIGTERM are ignored by the caller from before the output is
    reserved; they are handled again only inside the block that always writes it.
    """
    view = _LiveView(sys.stderr, args.quiet)
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
        record = exc.record or _failed_record(request, _interrupted_before_sending(exc.signal_name))
        status = _SIGNAL_EXIT[exc.signal_name]
    except KeyboardInterrupt:
        record, status = _failed_record(request, _interrupted_before_sending('SIGINT')), 130
    finally:
        _ignore_signals()  # until the process ends: the record is written next, then reported
        if record is None:  # a bug in this client: still leave a valid record, then show the traceback
            record = _failed_record(request, _failure('client_error', 'the client failed before finishing its record'))
        if capture_fd is not None:
            kept = _save_capture(capture_fd, args.capture, capture, request.secrets())
            record = {**record, 'capture': {**(record['capture'] or {'bytes': 0, 'truncated': False}), 'file': kept}}
        _write_record(fd, record)
    view.verdict(record)
    return record, status


def _ignore_signals() -> None:
    """SIGINT and SIGTERM change nothing from here on: while an evidence file is reserved but not yet
    written, and once the evidence is on disk and the process only reports it, where a signal could only
    lose the summary (and the exit status it would say)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def _default_signals() -> None:
    """Back to Python's own handling of SIGINT and SIGTERM: nothing was reserved."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _emit(text: str) -> None:
    """Print to stdout; if its reader has gone (a closed pipe), drop the rest quietly: the evidence is on disk."""
    try:
        print(text, flush=True)
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so that the exit's flush cannot fail


def _compare(args, prog: str) -> int:
    records = _load_records(args.compare, args.mixed_sources)
    differ = _settings_differ(records)
    if differ:
        print(f'{prog}: warning: the records differ in {", ".join(differ)}; compare only '
              'runs made with the same request settings and model', file=sys.stderr)
    _emit(_compare_table(args.compare, records))
    return 0


def _summary_command(args, prog: str) -> int:
    report_fd = _reserve_output(args.report) if args.report else None
    try:
        summary, report = summarize(args.summary, args.mixed_sources, report=report_fd is not None,
                                    slos=_parse_slos(args.slo) if args.slo else None,
                                    slo_target=_slo_target(args))
    except UsageError:
        if report_fd is not None:  # nothing to draw: free the name again
            os.close(report_fd)
            os.unlink(args.report)
        raise
    result = summary.result()
    if report_fd is not None:
        _write_report(report_fd, report)
    person = not args.quiet and sys.stderr.isatty()
    if person:
        print(_summary_table(result), file=sys.stderr)
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
        _emit(json.dumps(result, ensure_ascii=False))


def _say_written(args) -> None:
    """Where the report went, unless --quiet."""
    if args.report is not None and not args.quiet:
        print(f'report written to {args.report}', file=sys.stderr)


def _load_settings(args) -> list[LoadSettings] | None:
    """The load the command line asks for, as its steps (one, or one per rate of --rates), or None for a
    single run as before (--runs 1, no load flags)."""
    rates = _rates(args.rates) if args.rates is not None else None
    if rates is not None and args.rate is not None:
        raise UsageError('--rates runs one step per rate: it replaces --rate')
    if args.duration is not None and args.runs is not None:
        raise UsageError('--duration bounds a load by time: it replaces --runs')
    if rates is not None and args.duration is None:
        raise UsageError('--rates needs --duration: how many seconds each step runs')
    if args.duration is not None and args.rate is None and rates is None:
        raise UsageError('--duration bounds an open loop: give it --rate or --rates')
    runs = 1 if args.runs is None else args.runs
    if args.keep_alive and runs < 2 and args.duration is None:
        raise UsageError('--keep-alive needs --runs of 2 or more: one run uses one connection')
    slos, target = _parse_slos(args.slo or []), _slo_target(args)
    if runs == 1 and args.duration is None and args.concurrency is None and args.rate is None and args.prompts is None:
        if slos or target is not None or args.processes is not None:
            raise UsageError('--slo, --slo-target and --processes are for a load: give --runs, --duration or --rates')
        return None
    processes = 1 if args.processes is None else args.processes
    if args.capture is not None:
        raise UsageError('--capture keeps the raw bytes of one run; it does not go with --runs, --concurrency, '
                         '--rate, --rates, --duration or --prompts')
    if args.duration is None:
        return [LoadSettings(runs, args.concurrency, args.rate, args.arrivals, args.seed, args.keep_alive,
                             slos=slos, slo_target=target, processes=processes)]
    if not _positive_finite(args.duration):
        raise UsageError(f'--duration must be a positive number of seconds, not {args.duration}')
    if not _positive_finite(rates[0] if rates else args.rate):
        raise UsageError(f'--rate must be a positive number of runs per second, not {args.rate}')
    return [LoadSettings(_scheduled_runs(rate, args.arrivals, args.seed, args.duration), args.concurrency, rate,
                         args.arrivals, args.seed, args.keep_alive, args.duration, number if rates else None,
                         slos, target, processes)
            for number, rate in enumerate(rates or [args.rate])]


def _rates(text: str) -> list[float]:
    """--rates R1,R2,...: distinct positive rates, in ascending order."""
    rates = []
    for part in text.split(','):
        try:
            rate = float(part)
        except ValueError:
            rate = math.nan
        if not _positive_finite(rate):
            raise UsageError(f'--rates {text!r}: each rate must be a positive number of runs per second, '
                             f'not {part.strip()!r}')
        if rate in rates:
            raise UsageError(f'--rates {text!r} lists {part.strip()} twice')
        rates.append(rate)
    return sorted(rates)


def _slo_target(args) -> float | None:
    """--slo-target, checked: a fraction in (0, 1], or None when not given."""
    target = args.slo_target
    if target is not None and not 0 < target <= 1:
        raise UsageError(f'--slo-target must be a fraction above 0 and at most 1 (e.g. 0.99), not {target}')
    return target


def _reserve_report(args, output_fd: int) -> int | None:
    """Create the --report file beside the reserved output; if that fails, undo the output too."""
    if args.report is None:
        return None
    if os.path.abspath(args.report) == os.path.abspath(args.output):
        error: UsageError | None = UsageError('--report and --output must be different files')
    else:
        try:
            return _reserve_output(args.report)
        except UsageError as exc:
            error = exc
    os.close(output_fd)
    os.unlink(args.output)
    raise error


class _LoadView:
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
            self.out.write(f'run {record["run"]}: {_verdict_line(record)}\n')
            self.out.flush()

    def clear(self) -> None:
        """Clear the status line, so that what goes to stdout next (on the same terminal) starts a line."""
        if self.live:
            self.out.write('\r\x1b[K')
            self.out.flush()

    def finish(self, result: dict) -> None:
        if self.live:
            self.out.write(_summary_table(result) + '\n')
            self.out.flush()


def _run_load(args, requests: list[PreparedRequest], steps: list[LoadSettings], fd: int, report_fd: int | None,
              prog: str) -> int:
    """Run the load, its steps one after another, appending each record to the reserved JSON Lines file
    as its run ends; print the summary (and write the report); return the exit status. SIGINT and
    SIGTERM cancel the load: no new run or step starts, the runs in flight end as interrupted and keep
    their records; a second signal changes nothing."""
    summary, cancel = Summary(steps[0].slos, steps[0].slo_target), Cancel()
    report = Report(summary) if report_fd is not None else None
    view = _LoadView(sys.stderr, args.quiet, sum(step.runs for step in steps))
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
        for settings in steps:
            if cancel.reason is None:
                run_load(requests, settings, on_record, cancel)
    if report is not None:
        _write_report(report_fd, report)
    _ignore_signals()  # the records are on disk: what is left is to report them
    result = summary.result()
    view.clear()
    view.finish(result)
    _emit_summary(result, view.live, [args.output])
    _say_written(args)
    if write_error:
        print(f'{prog}: error: cannot write {args.output}: {write_error[0].strerror or write_error[0]}',
              file=sys.stderr)
        return 2
    if cancel.reason in _SIGNAL_EXIT:
        return _SIGNAL_EXIT[cancel.reason]
    return 0 if result['ok'] == result['runs'] else 1


# What --compare and --summary take besides their files; every other flag is for a run.
_READING_FLAGS = {'compare': ('compare', 'quiet', 'mixed_sources'),
                 'summary': ('summary', 'report', 'quiet', 'mixed_sources', 'slo', 'slo_target')}
# prepare()'s and LoadSettings' parameters, by the flag a user typed.
_FLAG_OF_PARAMETER = {'max_tokens': '--max-tokens', 'idle': '--idle', 'deadline': '--deadline',
                     'temperature': '--temperature', 'stop': '--stop', 'extra': '--extra', 'model': '--model',
                     'runs': '--runs', 'concurrency': '--concurrency', 'rate': '--rate', 'tools': '--tools',
                     'processes': '--processes',
                     'tool_choice': '--tool-choice', 'json_schema': '--json-schema', 'cross_check': '--cross-check'}


def _given_flags(parser: argparse.ArgumentParser, args, allowed: tuple[str, ...]) -> list[str]:
    """The flags given (with a value other than their default) that are not among allowed."""
    return [action.option_strings[-1] for action in parser._actions
            if action.option_strings and action.dest not in allowed
            and getattr(args, action.dest, action.default) != action.default]


def _in_flag_terms(message: str) -> str:
    """A message from prepare() or LoadSettings with the parameter it starts with (tools[0] too)
    named as its flag."""
    name, bracket, rest = re.match(r'(\w*)(\[?)(.*)', message, re.S).groups()  # always matches
    return _FLAG_OF_PARAMETER.get(name, name) + bracket + rest


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    fixture = None
    try:
        try:
            if args.exporter is not None or args.targets is not None:
                return _exporter_command(args, parser)
            if args.compare and args.summary:
                raise UsageError('--compare and --summary exclude each other: compare single records side '
                                 'by side, or summarise loads')
            command = 'compare' if args.compare else 'summary' if args.summary else None
            if command is not None:
                extra = _given_flags(parser, args, _READING_FLAGS[command])
                if extra:
                    raise UsageError(f'--{command} only reads saved evidence; {", ".join(extra)} '
                                     f'{"is" if len(extra) == 1 else "are"} for runs that send requests')
                return (_compare if args.compare else _summary_command)(args, parser.prog)
            if args.output is None:
                raise UsageError('--output is required')
            if args.output == '-':
                raise UsageError('--output - is not supported: stdout carries the summary line; '
                                 'give the evidence a file name')
            steps = _load_settings(args)
            if args.report is not None and steps is None:
                raise UsageError('--report draws a load: give --runs (or --summary FILE... to draw saved runs)')
            if args.fixture is not None:
                if args.url is not None:
                    raise UsageError('--fixture and --url exclude each other')
                fixture = _Fixture(args.fixture, args.fixture_profile, args.api or 'chat', args.seed)
            requests = _requests_from_args(args, fixture.url if fixture else args.url or _DEFAULT_URL)
            fd, capture_fd = _reserve_files(args)
            report_fd = _reserve_report(args, fd)
        except (UsageError, ValueError) as exc:
            _default_signals()
            message = str(exc) if isinstance(exc, UsageError) else _in_flag_terms(str(exc))
            print(f'{parser.prog}: error: {message}', file=sys.stderr)
            return 2
        if not args.quiet and requests[0].spec.unchecked():
            print(f'{parser.prog}: note: {_unchecked_line(requests[0].spec)}', file=sys.stderr)
        if steps is not None:
            return _run_load(args, requests, steps, fd, report_fd, parser.prog)
        record, status = _run_command(args, requests[0], fd, capture_fd)
    finally:
        if fixture is not None:
            fixture.close()
    checked = _checked_line(requests[0].spec, record)
    if checked and not args.quiet:
        print(f'{parser.prog}: {checked}', file=sys.stderr)
    summary = {key: record[key] for key in ('ok', 'error_layer', 'error_kind', 'api', 'first_text_ms', 'duration_ms',
                                            'finish_reason', 'response_status', 'error')}
    _emit(json.dumps(summary, ensure_ascii=False))
    return status


if __name__ == '__main__':
    sys.exit(main())
