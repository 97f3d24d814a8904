"""Speed and memory of stream_client, as ratios measured in one run.

    python3 benchmarks/bench_stream.py

The tool-call figure compares verifying a streamed tool call with verifying a
text answer of as many events. Each figure is compared with a baseline measured in the same run, so a noisy
machine moves both. Prints every figure and ratio; exits 1 if a target is
missed. Loopback only; standard library only; about half a minute.
"""
from __future__ import annotations

import codecs
import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
import stream_client  # noqa: E402
from _common import PEAK_WRAPPER, report  # noqa: E402

E2E_EVENTS = 50_000
TOOL_DELTAS = 2_000             # argument deltas of the tool-call stream (and text events of its baseline)
MEMORY_TEXT_CHARS = 1_048_576   # the answer carried by the memory run: 1 MiB, the answer bound
READ = 4096                     # parser benchmark read size


def vllm_event(text: str, reason: str | None = None, delta: dict | None = None) -> bytes:
    chunk = {'id': 'chatcmpl-911f8aa92f7e377a', 'object': 'chat.completion.chunk', 'created': 1796034415,
             'model': 'tiny', 'choices': [{'index': 0, 'delta': {'content': text} if delta is None else delta,
                                           'logprobs': None, 'finish_reason': reason, 'token_ids': None}]}
    return b'data: ' + json.dumps(chunk, separators=(',', ':')).encode() + b'\n\n'


def vllm_body(texts: list[str]) -> bytes:
    """A complete stream in vLLM's chunked framing: one event per chunk, then [DONE] and the zero chunk."""
    events = [vllm_event(text) for text in texts] + [vllm_event('', 'stop'), b'data: [DONE]\n\n']
    return b''.join(b'%x\r\n%s\r\n' % (len(event), event) for event in events) + b'0\r\n\r\n'


class NaiveEvents:
    """The character-by-character parser the fast one replaces (the guide's approach), for comparison."""

    def __init__(self) -> None:
        self.decoder = codecs.getincrementaldecoder('utf-8-sig')()
        self.line, self.data, self.after_cr = '', [], False

    def feed(self, raw: bytes) -> list[str]:
        events = []
        for char in self.decoder.decode(raw):
            if self.after_cr:
                self.after_cr = False
                if char == '\n':
                    continue
            if char in '\r\n':
                line, self.line = self.line, ''
                self.after_cr = char == '\r'
                if not line:
                    if self.data:
                        events.append('\n'.join(self.data))
                    self.data = []
                elif line.startswith('data:'):
                    value = line[5:]
                    self.data.append(value[1:] if value.startswith(' ') else value)
            else:
                self.line += char
        return events


def best_of(runs: int, work, clock=time.perf_counter) -> float:
    best = float('inf')
    for _ in range(runs):
        start = clock()
        work()
        best = min(best, clock() - start)
    return best


def bench_parser() -> list[tuple[str, float, float, str]]:
    corpus = b''.join(vllm_event(f' token{i}') for i in range(20_000))
    reads = [corpus[i:i + READ] for i in range(0, len(corpus), READ)]
    megabytes = len(corpus) / 1e6

    def parse(parser_class):
        def work():
            parser = parser_class()
            count = sum(len(parser.feed(raw)) for raw in reads)
            assert count == 20_000, count
        return work

    fast = best_of(15, parse(stream_client.Events))
    naive = best_of(3, parse(NaiveEvents))
    split = best_of(15, lambda: corpus.split(b"\n\n"))
    print(f'parser: {megabytes:.1f} MB of vLLM-shaped events in {READ}-byte reads')
    print(f'  stream_client.Events  {megabytes / fast:8.0f} MB/s  ({fast / 20_000 * 1e6:.2f} us/event)')
    print(f'  naive per-character   {megabytes / naive:8.0f} MB/s')
    print(f'  bytes.split(b"\\n\\n")  {megabytes / split:8.0f} MB/s (whole corpus, one call)')
    return [('parser vs naive parser', naive / fast, 25, 'at least'),
            ('parser vs bytes.split', split / fast, 0.5, 'at least')]


def tool_call_body(pieces: list[str]) -> bytes:
    """One get_weather call whose arguments arrive as these deltas, in vLLM's chunked framing."""
    def call(**fields) -> bytes:
        return vllm_event('', delta={'content': None, 'tool_calls': [{'index': 0, **fields}]})
    events = ([call(id='chatcmpl-tool-1', type='function', function={'name': 'get_weather'})]
              + [call(function={'arguments': piece}) for piece in pieces]
              + [vllm_event('', 'tool_calls', delta={}), b'data: [DONE]\n\n'])
    return b''.join(b'%x\r\n%s\r\n' % (len(event), event) for event in events) + b'0\r\n\r\n'


def bench_tool_calls() -> list[tuple[str, float, float, str]]:
    """CPU per event of a tool call whose arguments arrive in TOOL_DELTAS deltas, against a text answer
    of as many events: the whole verification, from bytes to the verdict (arguments parsed and checked)."""
    head = b'HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n'
    tools = [{'type': 'function', 'function': {'name': 'get_weather', 'parameters': {
        'type': 'object', 'properties': {'city': {'type': 'string'}}, 'required': ['city']}}}]
    spec = stream_client._answer_spec('chat', tools, 'auto', None)
    streams = {'text': (head + vllm_body([' tok'] * TOOL_DELTAS), stream_client.AnswerSpec()),
               'tool call': (head + tool_call_body(['{"city": "'] + ['ab'] * (TOOL_DELTAS - 2) + ['"}']), spec)}
    cpu = {}
    for name, (response, answer) in streams.items():
        reads = [response[i:i + READ] for i in range(0, len(response), READ)]

        def verify() -> None:
            reader = stream_client.ResponseReader(stream_client.ChatChunks(spec=answer))
            for raw in reads:
                reader.feed(raw)
            reader.eof()
            assert stream_client.judge(reader).ok, stream_client.judge(reader)
        cpu[name] = best_of(15, verify, clock=time.process_time) / TOOL_DELTAS
    print(f'tool calls: {TOOL_DELTAS} argument deltas of one call, against {TOOL_DELTAS} text events '
          f'(vLLM framing, {READ}-byte reads, bytes to verdict)')
    for name, seconds in cpu.items():
        print(f'  {name:<10} {seconds * 1e6:6.2f} us CPU per event')
    return [('tool-call stream vs text stream, CPU per event', cpu['tool call'] / cpu['text'], 1.5, 'at most')]


def start_server(kind: str) -> tuple[subprocess.Popen, int]:
    server = subprocess.Popen([sys.executable, __file__, '--serve', kind], stdout=subprocess.PIPE, text=True)
    return server, int(server.stdout.readline())


def serve(kind: str) -> None:
    """Answer every connection with one prebuilt chunked stream, written at once."""
    if kind == 'e2e':
        texts = ['x'] * E2E_EVENTS
    else:
        texts = ['y' * 1024] * (MEMORY_TEXT_CHARS // 1024)
    body = vllm_body(texts)
    response = (b'HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n'
                b'transfer-encoding: chunked\r\n\r\n' + body)
    with socket.create_server(('127.0.0.1', 0)) as listener:
        print(listener.getsockname()[1], flush=True)
        while True:
            conn, _ = listener.accept()
            with conn:
                request = b''
                while b'\r\n\r\n' not in request:
                    request += conn.recv(65536)
                head, _, rest = request.partition(b'\r\n\r\n')
                length = int(head.lower().split(b'content-length:')[1].split(b'\r\n')[0])
                while len(rest) < length:
                    rest += conn.recv(65536)
                conn.sendall(response)


def ceiling_loop(port: int) -> int:
    """The least a client can do: read1() and json.loads() each event."""
    conn = http.client.HTTPConnection('127.0.0.1', port, timeout=60)
    conn.request('POST', '/v1/chat/completions', body=b'{"stream": true}',
                 headers={'Content-Type': 'application/json'})
    response = conn.getresponse()
    buffer, count = b'', 0
    while piece := response.read1(65536):
        buffer += piece
        *events, buffer = buffer.split(b'\n\n')
        for event in events:
            if event != b'data: [DONE]':
                json.loads(event[6:])
                count += 1
    conn.close()
    return count


def bench_end_to_end() -> list[tuple[str, float, float, str]]:
    server, port = start_server('e2e')
    url = f'http://127.0.0.1:{port}/v1/chat/completions'
    try:
        client_times, ceiling_times = [], []
        for _ in range(3):
            start = time.perf_counter()
            record = stream_client.stream(url, 'tiny', 'hi', idle=60, deadline=600)
            client_times.append(time.perf_counter() - start)
            assert record['ok'] and record['content_events'] == E2E_EVENTS, record['error']
            start = time.perf_counter()
            assert ceiling_loop(port) == E2E_EVENTS + 1
            ceiling_times.append(time.perf_counter() - start)
    finally:
        server.kill()
        server.wait()
    client, ceiling = min(client_times), min(ceiling_times)
    print(f'end to end: {E2E_EVENTS} content events over loopback, vLLM chunked framing, one write')
    print(f'  stream_client.stream  {client * 1000:8.1f} ms  ({client / E2E_EVENTS * 1e6:.2f} us/event)')
    print(f'  read1 + json.loads    {ceiling * 1000:8.1f} ms  ({ceiling / E2E_EVENTS * 1e6:.2f} us/event)')
    return [('end to end vs read1+json.loads', client / ceiling, 2.0, 'at most')]


def peak_rss_mib(*script_and_args: str) -> float:
    done = subprocess.run([sys.executable, '-c', PEAK_WRAPPER, *script_and_args],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=True)
    return int(done.stderr.split()[-1]) / 1024


def bench_memory() -> list[tuple[str, float, float, str]]:
    server, port = start_server('memory')
    try:
        with tempfile.TemporaryDirectory() as tmp:
            output = os.path.join(tmp, 'run.json')
            client = peak_rss_mib(str(ROOT / 'stream_client.py'), '--model', 'tiny',
                                  '--url', f'http://127.0.0.1:{port}/v1/chat/completions', '--output', output)
            record = json.loads(Path(output).read_text())
            assert record['ok'] and len(record['text']) == MEMORY_TEXT_CHARS, record['error']
        bare = peak_rss_mib()
    finally:
        server.kill()
        server.wait()
    print(f'memory: peak RSS of the command line for a {MEMORY_TEXT_CHARS:,}-character answer')
    print(f'  stream_client.py   {client:6.1f} MiB')
    print(f'  bare interpreter   {bare:6.1f} MiB')
    return [('memory above bare interpreter (MiB)', client - bare, 30, 'at most')]


def main() -> int:
    if sys.argv[1:2] == ['--serve']:
        serve(sys.argv[2])
        return 0
    print(f'Python {sys.version.split()[0]} on {sys.platform}, {os.cpu_count()} CPUs\n')
    results = []
    for bench in (bench_parser, bench_tool_calls, bench_end_to_end, bench_memory):
        results += bench()
        print()
    return report(results)


if __name__ == '__main__':
    sys.exit(main())
