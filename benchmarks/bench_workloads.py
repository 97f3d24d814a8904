"""Workload speed, as ratios in one run (issues 36 and 46):

- trace replay's send lateness (when a run begins less its scheduled time), p99, at 500 requests per
  second from one process on loopback, against a raw socket sender's on the same schedule and server:
  at most 2x;
- sessions at concurrency 256 with 8 turns each: the client's CPU per verified event against a
  single-turn load of as many runs, after a warm-up load, three pairs in turns, the median pair's: at most
  1.2x (issue 46: every workload on one engine).

Both against the fixture (its agent mode) in a process of its own. Usage: python3 benchmarks/bench_workloads.py
[--lines N] [--sessions N]
"""
from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import report  # noqa: E402

HERE = Path(__file__).resolve().parent.parent
RATE = 500.0
PAIRS = 3  # sessions against the single-turn load, in turns (a single pair moves by 0.1 between runs here)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


def start_fixture(delay: float) -> tuple[subprocess.Popen, int]:
    port = free_port()
    server = subprocess.Popen([sys.executable, str(HERE / 'fixture_server.py'), '--port', str(port), '--mode', 'agent',
                               '--profile', 'vllm', '--delay', str(delay)], stdout=subprocess.PIPE, text=True)
    server.stdout.readline()  # its "listening" line
    return server, port


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[max(0, -(-99 * len(ordered) // 100) - 1)]


def client(args: list[str], tmp: str, name: str) -> tuple[list[dict], float]:
    """The client's records and the CPU seconds it used (a process of its own)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, str(HERE / 'stream_client.py'), *args, '--quiet', '--output', name], cwd=tmp,
                   stdout=subprocess.DEVNULL, check=False, timeout=900)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    with open(os.path.join(tmp, name), encoding='utf-8') as file:
        records = [json.loads(line) for line in file]
    return records, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def raw_sender(port: int, offsets: list[float]) -> list[float]:
    """Lateness (ms) of a raw socket sender on the same schedule: a thread per request from a pool, which
    sends a fixed request and reads the response to its end."""
    body = json.dumps({'model': 'm', 'messages': [{'role': 'user', 'content': 'x'}], 'stream': True}).encode()
    wire = (f'POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n'
            f'Connection: close\r\nContent-Length: {len(body)}\r\n\r\n').encode() + body
    late, lock = [], threading.Lock()
    started = time.perf_counter()

    def one(due: float) -> None:
        begun = time.perf_counter()
        with lock:
            late.append((begun - started - due) * 1000)
        with socket.create_connection(('127.0.0.1', port)) as sock:
            sock.sendall(wire)
            while sock.recv(65536):
                pass
    with concurrent.futures.ThreadPoolExecutor(512) as pool:
        for due in offsets:
            wait = started + due - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            pool.submit(one, due)
    return late


def bench_trace(lines: int, tmp: str) -> list[tuple[str, float, float, str]]:
    offsets = [index / RATE for index in range(lines)]
    path = os.path.join(tmp, 'trace.jsonl')
    with open(path, 'w', encoding='utf-8') as file:
        file.writelines(json.dumps({'timestamp': round(at * 1000, 3), 'prompt': 'x'}) + '\n' for at in offsets)
    server, port = start_fixture(0.002)
    try:
        raw = p99(raw_sender(port, offsets))
        records, _ = client(['--url', f'http://127.0.0.1:{port}/v1/chat/completions', '--model', 'm',
                             '--trace', path], tmp, 'trace-out.jsonl')
    finally:
        server.terminate()
        server.wait()
    ours = p99([record['trace']['late_ms'] for record in records])
    print(f'trace at {RATE:g}/s, {lines} lines: lateness p99 {ours:.2f} ms (raw sender {raw:.2f} ms); '
          f'{sum(r["ok"] for r in records)} ok')
    return [('trace lateness p99 / raw sender p99', ours / max(raw, 0.01), 2.0, 'at most')]


def bench_sessions(sessions: int, tmp: str) -> list[tuple[str, float, float, str]]:
    """Sessions and a single-turn load of as many runs, in turns after a warm-up load: PAIRS pairs, each pair's
    order the other way round from the pair before (sessions first, then the single-turn load first, ...), so
    that neither load always goes first; the target takes the median pair's ratio."""
    tools = [{'type': 'function', 'function': {
        'name': 'get_weather', 'parameters': {'type': 'object', 'properties': {'city': {'type': 'string'}},
                                              'required': ['city']}}}]
    path = os.path.join(tmp, 'sessions.jsonl')
    with open(path, 'w', encoding='utf-8') as file:
        file.writelines(json.dumps({'id': f's{n}', 'tools': tools, 'turns': [f'turn {t}' for t in range(8)],
                                    'tool_results': {'get_weather': 'sunny'}}) + '\n' for n in range(sessions))
    server, port = start_fixture(0.02)
    url = f'http://127.0.0.1:{port}/v1/chat/completions'
    runs = [0]  # the sessions' runs, which the single-turn load sends as many of

    def sessions_load(pair: int) -> tuple[list[dict], float]:
        records, cpu = client(['--url', url, '--model', 'm', '--sessions', path, '--concurrency', '256'], tmp,
                              f'sessions-out-{pair}.jsonl')
        runs[0] = len(records)
        return records, cpu

    def single_load(pair: int) -> tuple[list[dict], float]:
        return client(['--url', url, '--model', 'm', '--runs', str(runs[0]), '--concurrency', '256'], tmp,
                      f'single-out-{pair}.jsonl')
    ratios = []
    try:
        # unmeasured: a fixture's first load costs the client more (with a fresh fixture for each pair, sessions
        # run first cost 3 to 5% more CPU than run second, and a single-turn load the same either way)
        client(['--url', url, '--model', 'm', '--runs', '1024', '--concurrency', '256'], tmp, 'warm-up.jsonl')
        for pair in range(PAIRS):
            if pair % 2 == 0:
                (session_records, session_cpu), (single_records, single_cpu) = sessions_load(pair), single_load(pair)
            else:
                (single_records, single_cpu), (session_records, session_cpu) = single_load(pair), sessions_load(pair)
            per_event = [cpu / max(1, sum(r['data_events'] for r in records if r['ok']))
                         for cpu, records in ((session_cpu, session_records), (single_cpu, single_records))]
            ratios.append(per_event[0] / per_event[1])
            print(f'pair {pair + 1} ({"sessions" if pair % 2 == 0 else "single-turn"} first): sessions '
                  f'{len(session_records)} runs, CPU {session_cpu:.2f} s, {per_event[0] * 1e6:.1f} us per verified '
                  f'event; single-turn: {len(single_records)} runs, CPU {single_cpu:.2f} s, '
                  f'{per_event[1] * 1e6:.1f} us per event; ratio {ratios[-1]:.2f}')
    finally:
        server.terminate()
        server.wait()
    return [(f'sessions CPU per verified event / single-turn load (median of {PAIRS} pairs)',
             statistics.median(ratios), 1.2, 'at most')]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--lines', type=int, default=2500, help='trace lines at 500/s (default 2500)')
    parser.add_argument('--sessions', type=int, default=256, help='sessions of 8 turns (default 256)')
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        return report(bench_trace(args.lines, tmp) + bench_sessions(args.sessions, tmp))


if __name__ == '__main__':
    raise SystemExit(main())
