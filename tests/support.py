"""What the test files share: loopback servers, the proxy, the fixture, the splitters and the
script launcher. No test lives here."""
from __future__ import annotations

import atexit
import collections
import contextlib
import dataclasses
import html.parser
import importlib.util
import io
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import types
import unittest
from pathlib import Path
from typing import Iterator, NamedTuple
from unittest import mock

import fixture_server
import stream_client
from stream_client import ChatChunks, Events, stream, StreamError
from stream_client._http import _ChunkedBody
from stream_client._limits import _ANSWER_LINE_CHARS


HERE = Path(__file__).resolve().parent.parent  # the top of the checkout
TRACES = HERE / 'testdata' / 'vllm-0.32.0-cpu'
CLIENT = str(HERE / 'stream_client.py')
_spec = importlib.util.spec_from_file_location('amalgamate', HERE / 'tools' / 'amalgamate.py')
AMALGAMATE = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(AMALGAMATE)
FIXTURE_SCRIPT = str(HERE / 'fixture_server.py')

# The tests run the scripts as `python3 SCRIPT ARGS` does, in a new process, with three differences.
# CLIENT (stream_client.py) runs as the package in src/, the code that is edited, not as the generated file
# (test_stream.py runs the generated file itself): the launcher puts src/ and the checkout's top first on
# the path and calls the package's main() with argv[0] CLIENT, so that the program names itself as the file
# does. Other scripts' bytecode comes from a cache: Python compiles a script given by its path on every
# start and never caches it; this launcher runs the same code, compiled once into a cache of the suite's
# own, as __main__ with the script's argv[0], __file__ and sys.path[0]. Both run without the site module
# (-S: the scripts need the standard library only, and a site-packages .pth file can cost more than the
# script's own start). And the built-in fixture (--fixture) writes FIXTURE_DELAY apart, not 50 ms: the
# launcher loads fixture_server first and sets its DELAY, which --fixture then uses. Users have no such
# knob: the pacing of --fixture is for a person to watch, and only this launcher changes it. A test that
# needs the person's pacing passes fixture_delay=None. CopiedAloneTests and the tests of how a script
# names itself start the generated file itself (SHIPPED_COMMAND).
_PYCACHE = tempfile.TemporaryDirectory(prefix='stream-tests-pycache-')
atexit.register(_PYCACHE.cleanup)
FIXTURE_DELAY = 0.002  # seconds between the built-in fixture's writes in the tests' command lines
SRC = str(HERE / 'src')
_LAUNCHER = ('import __main__, importlib.machinery, os, sys\n'
             'sys.argv.pop(0)\n'
             'delay = sys.argv.pop(0)\n'
             'package = sys.argv.pop(0)\n'
             'sys.path[0] = os.path.dirname(sys.argv[0])\n'
             'if package:\n'
             '    sys.path[:0] = [package]\n'
             'if delay:\n'
             '    import fixture_server\n'
             '    fixture_server.DELAY = float(delay)\n'
             'if package:\n'
             '    from stream_client._cli import main\n'
             '    sys.exit(main())\n'
             '__main__.__file__ = sys.argv[0]\n'
             "exec(importlib.machinery.SourceFileLoader('__main__', sys.argv[0]).get_code('__main__'), "
             "__main__.__dict__)\n")


def script_command(path: str, *args: str, fixture_delay: float | None = FIXTURE_DELAY) -> list[str]:
    """The command that runs the script at path with args (CLIENT: the package in src/), its bytecode cached
    and the built-in fixture paced fixture_delay apart (None: as for a user; see _LAUNCHER). Only
    stream_client.py has --fixture."""
    client = path == CLIENT
    paced = fixture_delay is not None and client
    return [sys.executable, '-S', '-c', _LAUNCHER, repr(fixture_delay) if paced else '', SRC if client else '', path,
            *args]


def shipped_command(*args: str, fixture_delay: float | None = FIXTURE_DELAY) -> list[str]:
    """The command that runs the generated stream_client.py itself (its bytecode cached, --fixture paced)."""
    paced = fixture_delay is not None
    return [sys.executable, '-S', '-c', _LAUNCHER, repr(fixture_delay) if paced else '', '', CLIENT, *args]


def script_env(env: dict | None = None) -> dict:
    """The environment of a script's process: env (by default this one's), writing bytecode to the suite's cache."""
    env = dict(os.environ if env is None else env)
    env.pop('PYTHONDONTWRITEBYTECODE', None)
    env['PYTHONPYCACHEPREFIX'] = _PYCACHE.name
    return env


def message_of(failure: StreamError | None) -> str | None:
    """The message of a failure that a sans-IO part returns, or None."""
    return None if failure is None else failure.message


def pieces(data: bytes, size: int) -> list[bytes]:
    return [data[i:i + size] for i in range(0, len(data), size)]


EXHAUSTIVE_UP_TO = 2048  # bytes; longer inputs get a thinned sweep (see feedings)


def feedings(data: bytes) -> Iterator[tuple[str, list[bytes]]]:
    """The same bytes whole, in pieces of every size (1 is byte by byte), and cut in two at every
    point, each named for a failure message: the sweep of h11's t_body_reader.

    Above EXHAUSTIVE_UP_TO bytes the sweep thins out, to keep the suite fast: pieces of 1 to 64 bytes
    and of every power of two, and cuts at every line end and every 13th byte.
    """
    yield 'whole', [data]
    exhaustive = len(data) <= EXHAUSTIVE_UP_TO
    sizes = range(1, len(data)) if exhaustive else sorted(set(range(1, 65)) | {2 ** n for n in range(7, 20)})
    for size in sizes:
        if size < len(data):
            yield f'{size}-byte pieces', pieces(data, size)
    for at in range(1, len(data)):
        if exhaustive or at % 13 == 0 or data[at - 1:at] == b'\n':
            yield f'cut at {at}', [data[:at], data[at:]]


def parse_all(chunks: list[bytes]) -> list[str]:
    parser = Events()
    events = []
    for chunk in chunks:
        events.extend(parser.feed(chunk))
    parser.finish()
    return events


def split_capture(path: Path) -> tuple[bytes, bytes]:
    head, _, body = path.read_bytes().partition(b'\r\n\r\n')
    return head + b'\r\n\r\n', body


def dechunk(body: bytes) -> bytes:
    reader = _ChunkedBody()
    payload = reader.feed(body)
    assert reader.complete and not reader.overrun
    return payload


def chunk_json(**choice) -> str:
    return json.dumps({'choices': [dict({'index': 0, 'delta': {}}, **choice)]})


def capture_events(name: str) -> list[tuple[str, str]]:
    """The (type, data) events of a captured Responses stream."""
    return stream_client.TypedEvents().feed(dechunk(split_capture(TRACES / name)[1]))


R2 = 'r2_responses_stream_stopstring_completed.http'


def with_data(event: tuple[str, str], **changes) -> tuple[str, str]:
    """An event with some keys of its data replaced."""
    return event[0], json.dumps({**json.loads(event[1]), **changes})


WEATHER = stream_client.AnswerSpec((('get_weather', stream_client.JsonSchema(
    fixture_server.TOOLS[0]['function']['parameters'])),), 'auto')


def opening(index: int = 0, name: str = 'get_weather', call_id: str = 'c1') -> str:
    return chunk_json(delta={'tool_calls': [{'id': call_id, 'type': 'function', 'index': index,
                                             'function': {'name': name}}]})


def arguments(text: str, index: int = 0, **extra) -> str:
    return chunk_json(delta={'tool_calls': [{'index': index, 'function': {'arguments': text}, **extra}]})


def message_event(kind: str, **body) -> tuple[str, str]:
    return kind, json.dumps({'type': kind, **body})


def text_delta(text: str, index: int = 0) -> tuple[str, str]:
    return message_event('content_block_delta', delta={'type': 'text_delta', 'text': text}, index=index)


MESSAGE_START = message_event('message_start', message={'id': 'msg_1', 'type': 'message', 'content': []})
TEXT_BLOCK = message_event('content_block_start', content_block={'type': 'text', 'text': ''}, index=0)


def message_end(reason: str = 'end_turn', index: int = 0, tokens: int = 2) -> list[tuple[str, str]]:
    return [message_event('content_block_stop', index=index),
            message_event('message_delta', delta={'stop_reason': reason, 'stop_sequence': None},
                          usage={'output_tokens': tokens}),
            message_event('message_stop')]


class Fixture:
    """The fixture server on a free loopback port, in a background thread (polled every 5 ms, so that
    closing it waits 2.5 ms on average, not 25: the suite starts over 400)."""

    def __init__(self, mode: str = 'ok', delay: float = 0.002, **settings) -> None:
        self.instance = fixture_server.server(0, mode, delay, **settings)
        self.url = f'http://127.0.0.1:{self.instance.server_port}/v1/chat/completions'
        self.thread = threading.Thread(target=self.instance.serve_forever, args=(0.005,), daemon=True)

    def __enter__(self) -> Fixture:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.instance.shutdown()
        self.instance.server_close()
        self.thread.join()

    @property
    def last_request(self) -> tuple[dict, dict]:
        return self.instance.last_request


def run_fixture(mode: str = 'ok', *, settings: dict | None = None, **kwargs) -> dict:
    with Fixture(mode, **(settings or {})) as fixture:
        return stream(fixture.url, 'synthetic-fixture', 'READY', **kwargs)


def replay(response: bytes, **kwargs) -> dict:
    """The client's record for a response replayed byte for byte by the fixture."""
    with Fixture(replay=response) as fixture:
        return stream(fixture.url, 'tiny', 'hi', **{'idle': 2, **kwargs})


def sse_response(body: bytes, *, headers: str = '', status: str = '200 OK') -> bytes:
    return f'HTTP/1.1 {status}\r\nContent-Type: text/event-stream\r\n{headers}\r\n'.encode() + body


ANSWER = 'READY \u2713'


class Verdict(NamedTuple):
    """What a record says of its layers, by name, so that a failing comparison names the field."""

    transport_complete: bool | None
    event_complete: bool | None
    application_complete: bool
    error_layer: str | None

    @classmethod
    def of(cls, record: dict) -> Verdict:
        return cls(*(record[field] for field in cls._fields))


class ModeRow(NamedTuple):
    """A fixture mode's expected verdict, words in its error and text. words and text are one value, or a
    dict by "api/profile", api or profile (the most specific key wins; "" is the default)."""

    verdict: Verdict
    words: str | dict | None
    text: str | dict
    options: dict = {}


def row(transport, event, application, layer, words, text, options=None) -> ModeRow:
    return ModeRow(Verdict(transport, event, application, layer), words, text, options or {})


APIS = ('chat', 'completions', 'responses', 'messages')
TOOLS = {'tools': fixture_server.TOOLS}  # the options of a run that offers the fixture's tool
JSON_ANSWER = {'json_schema': fixture_server.JSON_SCHEMA}  # ... that asks for a JSON answer
TOKENS16 = ''.join(f'token{i} ' for i in range(16))
URL_PATHS = {'chat': '/v1/chat/completions', 'completions': '/v1/completions', 'responses': '/v1/responses',
             'messages': '/v1/messages'}


def mode_runs() -> list[tuple[str, str, str]]:
    """(mode, api, profile) for the mode table: every mode on every API it applies to, chat in both profiles
    and the other APIs in vLLM's (the guide profile differs only in its wire format, which chat covers)."""
    return [(mode, api, profile) for mode in fixture_server.MODES for api in APIS
            for profile in (fixture_server.PROFILES if api == 'chat' else ('vllm',))
            if fixture_server.applies(mode, api)]


def tcp_pair(test: unittest.TestCase) -> tuple[socket.socket, socket.socket]:
    """Two ends of a loopback TCP connection, closed when the test ends."""
    listener = socket.create_server(('127.0.0.1', 0))
    ours = socket.create_connection(listener.getsockname())
    theirs, _ = listener.accept()
    listener.close()
    test.addCleanup(ours.close)
    test.addCleanup(theirs.close)
    return ours, theirs


def in_threads(work, items: list, threads: int = 8) -> list:
    """work(item) for every item, eight at a time; the results in order (run() is safe in threads)."""
    results = [None] * len(items)
    lock, position = threading.Lock(), iter(range(len(items)))

    def worker() -> None:
        while True:
            with lock:
                index = next(position, None)
            if index is None:
                return
            results[index] = work(items[index])
    pool = [threading.Thread(target=worker) for _ in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    return results


# The verdict of every fixture mode: what the fixture tests and loads (on the engine or on threads) expect.
FIXTURE_EXPECTED = {
    'ok': row(True, True, True, None, None, ANSWER),
    'capacity': row(True, True, True, None, None, ANSWER),
    'broken': row(True, True, False, 'application',
                  {'': 'EOF before [DONE] after 2 content events',
                   'responses': 'EOF before a terminal event (response.completed) after 2 content events',
                   'messages': 'EOF before message_stop after 2 content events'}, ANSWER),
    'length': row(True, True, False, 'application',
                  {'': 'output budget exhausted (finish_reason=length)',
                   'responses': "output budget exhausted: response.completed carries status 'incomplete' "
                                "(incomplete_details.reason=max_output_tokens)",
                   'messages': 'output budget exhausted (stop_reason=max_tokens)'}, ANSWER),
    'malformed': row(None, None, False, 'protocol', 'malformed JSON', ANSWER),
    'http-error': row(None, None, False, 'http', 'expected status 200, got 503', ''),
    'truncated': row(False, True, True, 'transport',
                     {'guide': 'connection closed after 445 of 509 body bytes',
                      'vllm': 'chunked body ended without its terminating chunk'}, ANSWER),
    'cut-mid-answer': row(False, False, False, 'transport',
                          {'guide': 'connection closed after', 'vllm': 'chunked body ended without its terminating '
                                                                       'chunk'}, 'READY '),
    'no-done': row(True, True, False, 'application', {'': 'EOF before [DONE]', 'responses': 'EOF before a terminal',
                                                      'messages': 'EOF before message_stop'}, ANSWER),
    'unterminated': row(True, False, False, 'sse', 'inside an event', ANSWER),
    'held-open': row(False, True, True, 'transport',
                     {'': 'did not end within the idle timeout of 0.3 s after [DONE]',
                      'responses': 'did not end within the idle timeout of 0.3 s after response.completed',
                      'messages': 'did not end within the idle timeout of 0.3 s after message_stop'},
                     ANSWER),
    'after-done': row(None, None, True, 'protocol',
                      {'': 'event after [DONE]',
                       'responses': "event 'response.output_text.delta' after the terminal event "
                                    'response.completed',
                       'messages': "event 'content_block_delta' after message_stop"}, ANSWER),
    'reasoning': row(True, True, True, None, None, ANSWER),
    'tool-call': row(True, True, True, None, None, '', TOOLS),
    'tool-args-cut': row(True, True, False, 'application', 'tool call 0 (get_weather): the arguments are not JSON '
                         '(Unterminated string starting at: line 1 column 10 (char 9)): \'{"city": "Par\'', '', TOOLS),
    'tool-args-empty': row(True, True, False, 'application', 'tool call 0 (get_weather): the arguments are empty',
                           '', TOOLS),
    'tool-args-array': row(True, True, False, 'application',
                           "tool call 0 (get_weather): arguments are not a JSON object: '[]'", '', TOOLS),
    'tool-args-schema': row(True, True, False, 'application', 'tool call 0 (get_weather): the arguments do not match '
                            'its parameters: $.city: required, but missing', '', TOOLS),
    'tool-parallel': row(True, True, True, None, None, '', TOOLS),
    'tool-args-mismatch': row(None, None, False, 'protocol', 'response.function_call_arguments.done says tool call 0 '
                              "(get_weather) has the arguments '{\"city\": \"Lyon\"}', but its deltas assembled "
                              '\'{"city": "Paris"}\'', '', TOOLS),
    'block-unclosed': row(None, None, False, 'protocol', 'message_delta in event 5 while block 0 was still open '
                          '(no content_block_stop)', ANSWER),
    'block-unknown-index': row(None, None, False, 'protocol', 'content_block_delta for block 5 in event 4, which '
                               'never started', 'READY '),
    'json-ok': row(True, True, True, None, None, '{"city": "Paris"}', JSON_ANSWER),
    'json-invalid': row(True, True, False, 'application', 'the JSON answer does not match the schema: $.city: '
                        'expected string, got 3', '{"city": 3}', JSON_ANSWER),
    'error-event': row(None, None, False, 'application',
                       {'': "server sent an error event: 'EngineCore",
                        'messages': "server sent an error event: 'Overloaded' (overloaded_error)"}, 'READY '),
    'stall': row(None, None, False, 'timeout', 'no bytes for 0.3 s (idle timeout) after 0 content events', ''),
    'drip': row(None, None, False, 'timeout', 'overall deadline of 0.8 s', '', {'deadline': 0.8}),
    'buffered': row(True, True, True, None, None, TOKENS16),
    'paired': row(True, True, True, None, None, TOKENS16),
    'multi-choice': row(None, None, False, 'protocol', 'expected choice index 0, got 1',
                        {'': '', 'completions': 'READY '}),
    'split-utf8': row(True, True, True, None, None, ANSWER),
    'flood': row(None, None, False, 'sse', f'line longer than {_ANSWER_LINE_CHARS} characters without a line end', ''),
    'sequence-gap': row(None, None, False, 'protocol',
                        'expected sequence_number 6, got 7 in response.output_text.done: an event was lost', ANSWER),
    'type-mismatch': row(None, None, False, 'protocol', "its event field says 'response.text.delta' but its data "
                                                        "says type 'response.output_text.delta'", ''),
    'text-mismatch': row(None, None, True, 'protocol', "response.completed says the text is 'READY!' (6 characters)"
                                                       " but the deltas assembled 'READY \u2713' (7)", ANSWER),
    'failed': row(None, None, False, 'application', "server sent response.failed: 'EngineCore", ANSWER),
    'incomplete': row(True, True, False, 'application',
                      "output budget exhausted: response.incomplete carries status 'incomplete'", ANSWER),
    # the streamed side of each pair, without --cross-check (CrossCheckTests runs them with it)
    'pair-honest': row(True, True, True, None, None, '', TOOLS),
    'pair-args-dropped': row(True, True, True, None, None, '', TOOLS),
    'pair-call-dropped': row(True, True, True, None, None, '', TOOLS),
    'pair-markup-leak': row(True, True, False, 'application', 'tool-call markup <tool_call> in the visible text at '
                            'character 0', '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n'
                            '</tool_call>', TOOLS),
    'pair-budget-relabelled': row(True, True, False, 'application', 'the whole budget of 128 tokens was used; vLLM '
                                  'reports a call cut by max_tokens as "tool_calls"; raise --max-tokens', '', TOOLS),
    'pair-diverged': row(True, True, True, None, None, ANSWER),
}


TLS = HERE / 'testdata' / 'tls'


def resolving_llm_test_to_loopback():
    """socket.getaddrinfo with llm.test (a name that never resolves) answering 127.0.0.1, in this process."""
    real = socket.getaddrinfo

    def getaddrinfo(host, *args, **kwargs):
        return real('127.0.0.1' if host == 'llm.test' else host, *args, **kwargs)
    return mock.patch('socket.getaddrinfo', getaddrinfo)


def consume(reads: list[bytes], api: str = 'chat') -> str | None:
    """Feed a whole response to the client's sans-IO ResponseReader, read by read, then close;
    return the layer of its verdict (None when the answer is complete).

    Any exception other than StreamError escapes, which is what the fuzz tests look for.
    """
    reader = stream_client.ResponseReader(stream_client.VALIDATORS[api]())
    for raw in reads:
        reader.feed(raw)
        if reader.error is not None or reader.message_complete:
            break
    else:
        reader.eof()
    return stream_client.judge(reader).layer


ANSWER_EVENTS = (f'data: {chunk_json(delta={"content": "hi"})}\n\ndata: {chunk_json(finish_reason="stop")}\n\n'
                 'data: [DONE]\n\n').encode()
SSE_HEAD = b'HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n'


def chunked(payload: bytes, size_line: bytes | None = None, end: bytes = b'0\r\n\r\n') -> bytes:
    """payload as one chunk (with size_line instead of the usual one, if given), then end."""
    return (size_line or b'%x\r\n' % len(payload)) + payload + b'\r\n' + end


def read_message(sock) -> tuple[bytes, bytes]:
    """The head and the body of one HTTP request read from sock (its body by Content-Length)."""
    data = b''
    while b'\r\n\r\n' not in data:
        data += sock.recv(65536)
    head, _, body = data.partition(b'\r\n\r\n')
    length = int(re.search(rb'(?im)^content-length:\s*(\d+)', head)[1])
    while len(body) < length:
        body += sock.recv(65536)
    return head, body


def read_request(sock) -> bytes:
    """The body of one HTTP request read from sock."""
    return read_message(sock)[1]


class LoopbackServer(threading.Thread):
    """A server on a free loopback port that serves each connection in a thread of its own (serve())
    until close()."""

    def __init__(self, scheme: str = 'http') -> None:
        super().__init__(daemon=True)
        self.listener = socket.create_server(('127.0.0.1', 0))
        self.url = f'{scheme}://127.0.0.1:{self.listener.getsockname()[1]}/v1/chat/completions'

    def run(self) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self.serve, args=(sock,), daemon=True).start()

    def serve(self, sock: socket.socket) -> None:
        raise NotImplementedError

    def close(self) -> None:
        self.listener.close()


class TwinServer(LoopbackServer):
    """A chat server for --cross-check: the streamed request gets a whole answer (``streamed`` 'answer') or
    its head and one event, then nothing (``stall``); the unstreamed twin gets nothing, its connection held
    until the client closes it. ``connections`` counts the connections accepted, ``twins`` the twins read."""

    def __init__(self, streamed: str) -> None:
        super().__init__()
        self.streamed, self.connections, self.twins = streamed, 0, 0
        self.start()

    def serve(self, sock: socket.socket) -> None:
        self.connections += 1
        with sock:
            body = read_request(sock)
            if json.loads(body)['stream'] is False:
                self.twins += 1
            elif self.streamed == 'answer':
                sock.sendall(sse_response(ANSWER_EVENTS, headers=f'Content-Length: {len(ANSWER_EVENTS)}\r\n'))
            else:
                first = f'data: {chunk_json(delta={"content": "hi"})}\n\n'.encode()
                sock.sendall(sse_response(first, headers='Content-Length: 1000\r\n'))
            while sock.recv(65536):  # until the client closes
                pass


class PageReader(html.parser.HTMLParser):
    """What a report page holds: element names, timeline rows, every attribute, the text of each table row."""

    def __init__(self, page: str) -> None:
        super().__init__()
        self.tags, self.attributes, self.rows, self.cells, self.text = collections.Counter(), [], 0, [], []
        self._row: list[str] | None = None
        self.feed(page)
        self.close()

    def handle_starttag(self, tag: str, attrs: list) -> None:
        self.tags[tag] += 1
        self.attributes += attrs
        if tag == 'g' and ('class', 'run') in attrs:
            self.rows += 1
        if tag == 'tr':
            self._row = []

    def handle_endtag(self, tag: str) -> None:
        if tag == 'tr' and self._row is not None:
            self.cells.append(self._row)
            self._row = None

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self._row is not None and data.strip():
            self._row.append(data.strip())

    def cell(self, name: str) -> str:
        return next(row[1] for row in self.cells if row[0] == name)


def fake_record(run: int, ok: bool = True, error: str | None = None, start: str = '2026-11-30T10:00:00.000Z') -> dict:
    return {'run': run, 'ok': ok, 'error_layer': None if ok else error.split(':')[0], 'error': error,
            'started_at': start, 'headers_ms': 1.0, 'first_text_ms': 10.0 + run % 7, 'duration_ms': 100.0 + run % 5,
            'event_gaps_ms': [1.0], 'content_events': 2, 'completion_tokens': 3, 'source': 'endpoint', 'api': 'chat',
            'model': 'm', 'url': 'http://127.0.0.1:8000/v1/chat/completions', 'request': {'prompt_sha256': 'ab'},
            'load': {'concurrency': 4}, 'client': {'version': stream_client.__version__}}


def run_in_terminal(*args: str, cwd: str, stdout_too: bool = False) -> tuple[int, str]:
    """Run the command line with stderr on a pseudo-terminal, as a person would (stdout stays a pipe
    unless stdout_too); return its exit status and what the terminal showed."""
    import pty
    master, slave = pty.openpty()
    process = subprocess.Popen(script_command(CLIENT, *args), cwd=cwd, stdin=subprocess.DEVNULL,
                               stdout=slave if stdout_too else subprocess.PIPE, stderr=slave,
                               env=script_env(dict(os.environ, TERM='xterm')))
    os.close(slave)
    screen = b''
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        screen += data
    os.close(master)
    process.communicate(timeout=30)
    return process.returncode, screen.decode()


def run_cli(*args: str, cwd: str, timeout: float = 30, fixture_delay: float | None = FIXTURE_DELAY,
            process: bool = False, **kwargs) -> subprocess.CompletedProcess:
    """The command line run with args in cwd, as a finished process: in this process when it can be (see
    run_in_process), in a new one (script_command) when asked, off the main thread, or with --processes."""
    if process or '--processes' in args or threading.current_thread() is not threading.main_thread():
        kwargs['env'] = script_env(kwargs.get('env'))
        return subprocess.run(script_command(CLIENT, *args, fixture_delay=fixture_delay), cwd=cwd, capture_output=True,
                              text=True, timeout=timeout,
                              **({} if 'input' in kwargs else {'stdin': subprocess.DEVNULL}), **kwargs)
    return run_in_process(*args, cwd=cwd, fixture_delay=fixture_delay, **kwargs)


def run_in_process(*args: str, cwd: str, fixture_delay: float | None = FIXTURE_DELAY, env: dict | None = None,
                   input: str | None = None) -> subprocess.CompletedProcess:
    """stream_client.main(args) in this process, as `python3 stream_client.py ARGS` in cwd would run: its
    own argv[0], cwd, environment, stdin, stdout and stderr, and the signal handlers it sets put back after.
    A new process costs 0.2 s of CPU here (the interpreter and the standard library's imports); most
    command-line tests need none of what a process adds."""
    handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    out, err, here = io.StringIO(), io.StringIO(), os.getcwd()
    delay = fixture_server.DELAY if fixture_delay is None else fixture_delay
    try:
        os.chdir(cwd)
        with mock.patch.dict(os.environ, os.environ if env is None else env, clear=True), \
                mock.patch.object(sys, 'argv', [CLIENT, *args]), \
                mock.patch.object(sys, 'stdin', io.StringIO(input or '')), \
                mock.patch.object(fixture_server, 'DELAY', delay), contextlib.redirect_stdout(out), \
                contextlib.redirect_stderr(err):
            try:
                status = stream_client.main(list(args))
            except SystemExit as exc:  # argparse's usage errors
                status = exc.code if isinstance(exc.code, int) else 1
    finally:
        os.chdir(here)
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
    return subprocess.CompletedProcess([CLIENT, *args], status, out.getvalue(), err.getvalue())


def answer(text: str = '', calls: tuple = (), finish: str | None = 'stop', tokens: int | None = 3,
           ids: tuple | None = (1, 2, 3), reasoning: str = '') -> stream_client.Answer:
    return stream_client.Answer(text, reasoning, tuple(stream_client.AnsweredCall(*call) for call in calls), finish,
                                tokens, ids)


def responses_events(*bodies: dict) -> list[tuple[str, str]]:
    """Responses events numbered from 0, each body's type its event type."""
    return [(body['type'], json.dumps({**body, 'sequence_number': number})) for number, body in enumerate(bodies)]


def fake_exchange(phase: str, *, proxy: bool = False, started_ago: float = 0.0, **extra) -> types.SimpleNamespace:
    """Enough of an Exchange for the transport's failures, without a socket."""
    request = types.SimpleNamespace(host='127.0.0.1', port=9, address='127.0.0.1:9', scheme='http', idle=1.0,
                                    deadline=5.0,
                                    proxy=types.SimpleNamespace(address='127.0.0.1:3128',
                                                                connect_request=lambda host, port: b'')
                                    if proxy else None)
    fields = dict(request=request, phase=stream_client._exchange._Phase[phase], cancel=None, reused=False,
                  reader=stream_client.ResponseReader(ChatChunks()), connection=None, idle_s=None,
                  timeline=types.SimpleNamespace(started=time.perf_counter() - started_ago))
    return types.SimpleNamespace(**{**fields, **extra})


class ScriptedSocket:
    """A socket whose recv() returns the given byte strings in turn."""

    def __init__(self, *reads: bytes) -> None:
        self.reads = list(reads)

    def settimeout(self, timeout: float) -> None:
        pass

    def sendall(self, data: bytes) -> None:
        pass

    def recv(self, size: int) -> bytes:
        return self.reads.pop(0) if self.reads else b''
CITY = stream_client.AnswerSpec(json_schema=stream_client.JsonSchema(fixture_server.JSON_SCHEMA))
CHUNKED = SSE_HEAD + b'Transfer-Encoding: chunked\r\n\r\n'
STOP, DONE = chunk_json(finish_reason='stop'), '[DONE]'
TEXT = chunk_json(delta={'content': 'hi'})


@contextlib.contextmanager
def run_building_fails_for(marker: bytes):
    """A bug in this client before anything is sent, patched in: building the run's checks of its answer
    (PreparedRequest.new_validator) raises for each request whose body holds marker and that offers tools,
    every time it is asked, so the record of the failure cannot be built from the request as it is either."""
    real = stream_client.PreparedRequest.new_validator

    def new_validator(request: stream_client.PreparedRequest):
        if marker in request.body and request.spec.tools:
            raise RuntimeError('a deliberate failure building the run')
        return real(request)
    with mock.patch.object(stream_client.PreparedRequest, 'new_validator', new_validator):
        yield


def with_body(request: stream_client.PreparedRequest, body: dict) -> stream_client.PreparedRequest:
    """The prepared request with another JSON body (its Content-Length and wire bytes made again)."""
    data = json.dumps(body, ensure_ascii=False).encode()
    head = request.wire[:request.wire.index(b'\r\n\r\n') + 4]
    head = re.sub(rb'(?im)^content-length: \d+', b'Content-Length: %d' % len(data), head)
    return dataclasses.replace(request, body=data, wire=head + data)


# The conversation after one tool round, in each API's shape: a user turn, the model's get_weather call,
# and the tool's result (the agent mode answers it with text).
AFTER_TOOL_RESULT = {
    'chat': {'messages': [
        {'role': 'user', 'content': 'weather?'},
        {'role': 'assistant', 'content': None, 'tool_calls': [
            {'id': 'c1', 'type': 'function', 'function': {'name': 'get_weather', 'arguments': '{"city": "Paris"}'}}]},
        {'role': 'tool', 'tool_call_id': 'c1', 'content': 'sunny'}]},
    'messages': {'messages': [
        {'role': 'user', 'content': 'weather?'},
        {'role': 'assistant', 'content': [{'type': 'tool_use', 'id': 'c1', 'name': 'get_weather',
                                           'input': {'city': 'Paris'}}]},
        {'role': 'user', 'content': [{'type': 'tool_result', 'tool_use_id': 'c1', 'content': 'sunny'}]}]},
    'responses': {'input': [
        {'role': 'user', 'content': 'weather?'},
        {'type': 'function_call', 'call_id': 'c1', 'name': 'get_weather', 'arguments': '{"city": "Paris"}'},
        {'type': 'function_call_output', 'call_id': 'c1', 'output': 'sunny'}]},
}


class VirtualClock:
    """A clock for a load's schedule that never waits (Trio's MockClock is the model): sleep(s) moves its
    time on by s at once, so that a schedule of minutes runs in milliseconds and the test can read when
    each run was due and when it started on the clock's own scale. Safe to read from the load's threads;
    faithful where one thread waits at a time (the load's scheduler, or one session's think time): two
    sleepers at once would each move the one time on."""

    def __init__(self, start: float = 1000.0, wall: float = 1_800_000_000.0) -> None:
        self.start, self.time, self.wall_at_start = start, start, wall
        self.slept: list[float] = []
        self._lock = threading.Lock()

    def now(self) -> float:
        with self._lock:
            return self.time

    def sleep(self, seconds: float) -> None:
        with self._lock:
            self.slept.append(seconds)
            self.time += max(0.0, seconds)

    def wall(self) -> float:
        return self.wall_at_start + self.now() - self.start

    def clock(self):
        """The load's _Clock that reads and waits by this one."""
        return stream_client._load._Clock(self.now, self.sleep, self.wall)


def instant_run(text: str = 'done'):
    """A stand-in for the transport's _run (patch it where the load reads it): an ok answer of text, at
    once, with no socket: for tests of a schedule, not of a stream."""
    def run(request, *args, **kwargs) -> dict:
        return {'ok': True, 'error_kind': None, 'error_layer': None, 'error': None, 'text': text, 'tool_calls': [],
                'duration_ms': 1.0, 'first_text_ms': 1.0, 'request': {'prompt_sha256': None}}
    return run


def instant_start(text: str = 'done'):
    """A stand-in for the engine's _Machine.start (patch it on the class): the run ends at once with
    instant_run()'s record, with no socket: for tests of a schedule, not of a stream."""
    def start(machine) -> None:
        machine.engine.ended(machine, instant_run(text)(machine.request))
    return start


def kind_of_events(validator: stream_client.StreamValidator, events: list) -> str | None:
    """The kind of the failure that these events (then their end) give: raised by accept(), or the outcome's."""
    try:
        for event in events:
            validator.accept(event)
    except StreamError as exc:
        return exc.kind
    failure = validator.outcome()
    return failure and failure.kind
