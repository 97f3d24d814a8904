"""The live tier: a real vLLM 0.32 (serve_agent.sh: hermes tool parser, qwen3 reasoning parser) whose tiny
trained model really calls tools, on chat, Responses and Messages; with and without --cross-check; a
--sessions load; and a relay that cuts the real stream inside a call's arguments (the only fake part).

    STREAM_CLIENT_LIVE_URL       the server's base URL, loopback only (http://127.0.0.1:8012)
    STREAM_CLIENT_LIVE_MODEL     its model name (agent)
    STREAM_CLIENT_LIVE_INTERVAL  the --stream-interval it was started with (1); checked on the token ids
    STREAM_CLIENT_LIVE_KEEP      a folder: keep each case's raw response and request there (a capture)
"""
from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import unittest
import urllib.parse
from pathlib import Path

import stream_client
from tests.agent_support import (
    AFTER_TOOL_RESULT, after_tool_result, APIS, CASES, Case, HERE, judge_raw, PATHS, raw_answer, record_calls,
    WEATHER_TOOL)

URL = os.environ.get('STREAM_CLIENT_LIVE_URL', '').rstrip('/')
MODEL = os.environ.get('STREAM_CLIENT_LIVE_MODEL', 'agent')
INTERVAL = int(os.environ.get('STREAM_CLIENT_LIVE_INTERVAL', '1'))
KEEP = os.environ.get('STREAM_CLIENT_LIVE_KEEP')


def setUpModule() -> None:
    if not URL:
        print('live tier skipped: no live server (set STREAM_CLIENT_LIVE_URL=http://127.0.0.1:8012 to a vLLM '
              'started by ../shared/tools/vllm-cpu/serve_agent.sh)', file=sys.stderr)
        raise unittest.SkipTest('no live server: set STREAM_CLIENT_LIVE_URL')
    host = urllib.parse.urlsplit(URL).hostname
    if host not in ('127.0.0.1', '::1', 'localhost'):
        raise unittest.SkipTest(f'STREAM_CLIENT_LIVE_URL must be a loopback address, not {host!r}')


def prepared(api: str, case: Case, cross_check: bool = False, base: str | None = None) -> stream_client.PreparedRequest:
    return stream_client.prepare((base or URL) + PATHS[api], MODEL, case.prompt, max_tokens=case.max_tokens,
                                 system=case.system, tools=[WEATHER_TOOL] if case.tools else None,
                                 tool_choice=case.tool_choice, json_schema=case.json_schema, idle=60, deadline=120,
                                 cross_check=cross_check, trust_env=False)


def raw_exchange(url: str, body: bytes, accept: str = 'text/event-stream') -> bytes:
    """The raw HTTP response to a POST of body, byte for byte as the server sent it (status line, headers,
    chunked framing): what a capture keeps."""
    parts = urllib.parse.urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=120) as sock:
        sock.sendall(f'POST {parts.path} HTTP/1.1\r\nHost: {parts.netloc}\r\nContent-Type: application/json\r\n'
                     f'Accept: {accept}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n'.encode() + body)
        data = bytearray()
        while chunk := sock.recv(65536):
            data += chunk
    return bytes(data)


def keep(name: str, request: stream_client.PreparedRequest) -> None:
    """With STREAM_CLIENT_LIVE_KEEP: the case's raw response and its request (and, for a cross-check, the
    unstreamed twin's), as testdata/vllm-0.32.0-agent/ keeps them."""
    if not KEEP:
        return
    folder = Path(KEEP)
    folder.mkdir(parents=True, exist_ok=True)
    for suffix, sent in (('', request), ('_unstreamed', request.twin)):
        if sent is None:
            continue
        accept = 'application/json' if suffix else 'text/event-stream'
        (folder / f'{name}{suffix}.http').write_bytes(raw_exchange(URL + sent.path, sent.body, accept))
        (folder / f'{name}{suffix}.request.json').write_text(
            json.dumps({'path': sent.path, 'body': json.loads(sent.body)}, ensure_ascii=False) + '\n')


class AgentCaseTests(unittest.TestCase):
    """Each case on each API, streamed alone and with --cross-check: ok, and the calls the client reports
    are the ones the raw bytes carry (read without the client's code) and the ones the model makes."""

    def check_case(self, api: str, case: Case, cross_check: bool) -> dict:
        request = prepared(api, case, cross_check)
        capture = stream_client.Capture()
        record = stream_client.run(request, capture=capture)
        self.assertTrue(record['ok'], f'{api} {case.name}: {record["error"]}; cross_check {record["cross_check"]}')
        raw = raw_answer(api, bytes(capture.data))
        self.assertEqual(record_calls(record), raw['calls'])
        self.assertEqual(record['text'], raw['text'])
        self.assertEqual([(name, json.loads(arguments)) for name, arguments in raw['calls']],
                         [(name, arguments) for name, arguments in case.calls])
        if case.text is not None:
            self.assertEqual(record['text'].strip(), case.text)
        self.assertEqual(bool(record['reasoning_text']), case.reasoning, record['reasoning_text'])
        if cross_check:
            cross = record['cross_check']
            self.assertEqual((cross['same'], cross['unstreamed_problem']), (True, None), cross)
            self.assertEqual(cross['comparable'], True if api == 'chat' else None, cross)
        tokens = record['tokens_per_event']
        if tokens is not None and INTERVAL > 1 and tokens['tokens'] >= 3 * INTERVAL:
            # chat with --cross-check: the ids show the server's --stream-interval (at least that many per
            # event; more when vLLM merges the outputs of a slow reader, as it may at any interval)
            self.assertGreaterEqual(tokens['median'], INTERVAL, tokens)
        return record

    def test_each_case_on_each_api_streamed(self):
        for api in APIS:
            for case in CASES:
                with self.subTest(api=api, case=case.name):
                    self.check_case(api, case, cross_check=False)
                    keep(f'i{INTERVAL}_{api}_{case.name}', prepared(api, case))

    def test_each_case_on_each_api_with_cross_check(self):
        for api in APIS:
            for case in CASES:
                with self.subTest(api=api, case=case.name):
                    self.check_case(api, case, cross_check=True)
                    if api == 'chat':
                        keep(f'i{INTERVAL}_{api}_{case.name}_pair', prepared(api, case, cross_check=True))

    def test_the_answer_after_a_tool_result_on_each_api(self):
        # the client sends such a history only in --sessions (below); here one round, judged sans-IO
        for api in APIS:
            with self.subTest(api=api):
                request = prepared(api, AFTER_TOOL_RESULT)
                body = after_tool_result(api, json.loads(request.body))
                data = json.dumps(body).encode()
                raw = raw_exchange(URL + request.path, data)
                verdict, reader, _ = judge_raw(request.path, body, raw)
                self.assertTrue(verdict.ok, verdict.message)
                self.assertEqual((reader.validator.text, reader.validator.calls), (AFTER_TOOL_RESULT.text, []))
                self.assertEqual(raw_answer(api, raw)['text'], AFTER_TOOL_RESULT.text)
                if KEEP:
                    (Path(KEEP) / f'i{INTERVAL}_{api}_after_tool_result.http').write_bytes(raw)
                    (Path(KEEP) / f'i{INTERVAL}_{api}_after_tool_result.request.json').write_text(
                        json.dumps({'path': request.path, 'body': body}, ensure_ascii=False) + '\n')


SESSIONS_CITIES = ('Paris', 'Tokyo', 'London', 'Berlin', 'Rome', 'Madrid', 'Cairo', 'Lima', 'Oslo', 'Delhi',
                   'Seoul', 'Dublin')


def sessions_file(path: Path, sessions: int = 10) -> None:
    """sessions × 3 turns, each a full weather question (the model answers a short follow-up with the
    earlier city), each answered by a tool result and then by the model's text."""
    lines = []
    for number in range(sessions):
        cities = [SESSIONS_CITIES[(number + turn * 5) % len(SESSIONS_CITIES)] for turn in range(3)]
        lines.append(json.dumps({'id': f'agent-{number}', 'tools': [WEATHER_TOOL],
                                 'turns': [f'What is the weather in {city}?' for city in cities],
                                 'tool_results': {'get_weather': [{'condition': 'sunny'}]}}))
    path.write_text('\n'.join(lines) + '\n')


class AgentSessionTests(unittest.TestCase):
    """A --sessions load through the real server: every turn verified, and the history the client sends
    back (the assembled answers and the tool results) accepted by vLLM's own request validation."""

    def test_ten_sessions_of_three_turns_with_tool_results_are_all_ok(self):
        with tempfile.TemporaryDirectory() as folder:
            folder = Path(folder)
            sessions_file(folder / 'sessions.jsonl')
            for api in APIS:
                with self.subTest(api=api):
                    out = folder / f'{api}.jsonl'
                    done = subprocess.run([sys.executable, str(HERE / 'stream_client.py'), '--url', URL + PATHS[api],
                                           '--model', MODEL, '--sessions', str(folder / 'sessions.jsonl'),
                                           '--concurrency', '4', '--max-tokens', '200', '--idle', '60',
                                           '--output', str(out)], capture_output=True, text=True, timeout=900,
                                          env={**os.environ, 'NO_PROXY': '*'})
                    records = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
                    bad = [(r.get('session'), r.get('error')) for r in records if not r['ok']]
                    self.assertEqual(bad, [], done.stderr[-2000:])
                    self.assertEqual(done.returncode, 0, done.stderr[-2000:])
                    calls = [r for r in records if r['tool_calls']]
                    answers = [r for r in records if not r['tool_calls']]
                    self.assertEqual((len(calls), len(answers)), (30, 30))  # each turn: a call, then the answer
                    self.assertTrue(all(r['text'].startswith('It is sunny in') for r in answers),
                                    [r['text'] for r in answers])


# The relay: the only fake part. It passes the request to the real server and the response back until a
# call's arguments begin, then cuts there.

_ARGUMENTS = {'chat': re.compile(rb'"arguments":"[^"]'),
              'responses': re.compile(rb'response\.function_call_arguments\.delta'),
              'messages': re.compile(rb'input_json_delta')}
# each cut and the failure it must be: the transport's, then (a whole HTTP body) the event stream's end
CUTS = {'inside-an-event': 'eof_in_chunk', 'after-the-event': 'no_last_chunk',
        'after-the-event-with-a-last-chunk': 'eof_before_done'}


class CuttingRelay(threading.Thread):
    """A loopback relay to the live server that cuts its response in the middle of a call's arguments:
    inside the event that carries the first piece, just after that event, or just after it with a last
    chunk added (so that the HTTP framing is whole and only the stream itself shows the cut)."""

    def __init__(self, api: str, cut: str) -> None:
        super().__init__(daemon=True)
        self.api, self.cut = api, cut
        self.listener = socket.create_server(('127.0.0.1', 0))
        self.url = f'http://127.0.0.1:{self.listener.getsockname()[1]}'
        self.cut_at: int | None = None
        self.sent = b''

    def run(self) -> None:
        client, _ = self.listener.accept()
        with client:
            request = bytearray()
            while b'\r\n\r\n' not in request:
                request += client.recv(65536)
            head, _, body = bytes(request).partition(b'\r\n\r\n')
            length = int(re.search(rb'(?i)content-length: *(\d+)', head).group(1))
            while len(body) < length:
                body += client.recv(65536)
            upstream = urllib.parse.urlsplit(URL)
            with socket.create_connection((upstream.hostname, upstream.port), timeout=120) as server:
                server.sendall(head + b'\r\n\r\n' + body)
                response = bytearray()
                while (found := _ARGUMENTS[self.api].search(response)) is None:
                    chunk = server.recv(65536)
                    if not chunk:
                        client.sendall(response)  # no call: the response as it came (the test then fails)
                        return
                    response += chunk
                while (end := response.find(b'\n\n', found.end())) < 0 or len(response) < end + 4:
                    response += server.recv(65536)
                event_end = end + 4  # the event's blank line, then the chunk's CRLF
                self.cut_at = {'inside-an-event': found.end() + 2}.get(self.cut, event_end)
                tail = b'0\r\n\r\n' if self.cut == 'after-the-event-with-a-last-chunk' else b''
                self.sent = bytes(response[:self.cut_at]) + tail
                client.sendall(self.sent)

    def __enter__(self) -> CuttingRelay:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.join(timeout=120)
        self.listener.close()


class CutRelayTests(unittest.TestCase):
    def test_a_real_stream_cut_inside_a_calls_arguments_is_never_ok(self):
        case = CASES[0]
        for api in APIS:
            for cut, kind in CUTS.items():
                with self.subTest(api=api, cut=cut):
                    request = prepared(api, case)
                    with CuttingRelay(api, cut) as relay:
                        record = stream_client.run(prepared(api, case, base=relay.url))
                    self.assertIsNotNone(relay.cut_at, 'the relay saw no call arguments')
                    self.assertEqual((record['ok'], record['error_kind']), (False, kind), record['error'])
                    if KEEP:
                        (Path(KEEP) / f'cut_{api}_{cut}.http').write_bytes(relay.sent)
                        (Path(KEEP) / f'cut_{api}_{cut}.request.json').write_text(json.dumps(
                            {'path': request.path, 'body': json.loads(request.body)}, ensure_ascii=False) + '\n')
