"""Does a scrape of --metrics-port slow the load it watches? The same load against a local fixture, in turns:
without the endpoint, and with it scraped as fast as one client can (a GET /metrics every 5 ms, some thousand
times what Prometheus asks), the two of a turn back to back; the medians over the turns of the ratios of
their throughputs (runs per second) and of their first text p50, in one run of this script. About 40 seconds.

usage: python3 benchmarks/bench_metrics.py [--runs N] [--concurrency C] [--turns K]
"""
from __future__ import annotations

import argparse
import http.client
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
import urllib.error
import urllib.request

from _common import report

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, HERE)
import stream_client  # noqa: E402 -- the generated file of this checkout
# Scraped hard over without the endpoint, medians of the turns' ratios: runs per second at least, first text p50
# at most.
# The turns of one setting differ by up to a third on a busy 2-core machine, hence the margins.
TARGET_RATE_RATIO, TARGET_FIRST_TEXT_RATIO = 0.8, 1.2


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(('127.0.0.1', 0))
        return probe.getsockname()[1]


def start_fixture() -> tuple[subprocess.Popen, str]:
    server = subprocess.Popen([sys.executable, os.path.join(HERE, 'fixture_server.py'), '--port', '0',
                               '--mode', 'ok', '--delay', '0.002'], stdout=subprocess.PIPE, text=True)
    line = server.stdout.readline()
    return server, line.rsplit(' ', 1)[-1].strip()


def scrape_until(url: str, done: threading.Event, counts: list) -> None:
    """GET url every 5 ms until done; counts[0] the scrapes answered, counts[1] their bytes."""
    while not done.is_set():
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                counts[1] += len(response.read())
            counts[0] += 1
        except (urllib.error.URLError, OSError, http.client.HTTPException):
            pass  # not listening yet, or closed with the load
        done.wait(0.005)


def one_load(url: str, runs: int, concurrency: int, folder: str, scraped: bool) -> dict:
    """One load in its own process; its runs per second, first-text p50 and CPU seconds, and the scrapes."""
    output = os.path.join(folder, f'load-{time.monotonic_ns()}.jsonl')
    command = [sys.executable, os.path.join(HERE, 'stream_client.py'), '--url', url, '--model', 'm',
               '--runs', str(runs), '--concurrency', str(concurrency), '--output', output, '--quiet']
    counts, done, scraper = [0, 0], threading.Event(), None
    if scraped:
        port = free_port()
        command += ['--metrics-port', str(port)]
        scraper = threading.Thread(target=scrape_until, args=(f'http://127.0.0.1:{port}/metrics', done, counts))
        scraper.start()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    finished = subprocess.run(command, capture_output=True, text=True, timeout=600)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    done.set()
    if scraper is not None:
        scraper.join()
    summary = json.loads(finished.stdout)
    if summary['ok'] != runs:
        raise SystemExit(f'bench_metrics: the load was not all ok: {finished.stderr.strip()[-300:]}')
    return {'output': output, 'runs_per_s': summary['runs_per_s'],
            'first_text_p50': summary['latency_ms']['first_text_ms']['p50'],
            'cpu_s': (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
            'scrapes': counts[0], 'scrape_bytes': counts[1]}


def scrape_cost(evidence: str) -> tuple[float, float, int]:
    """What one scrape of a load's metrics costs its process: the copy taken under the lock (us), and the
    text rendered outside it (ms, bytes), each the mean of many."""
    metrics = stream_client._LoadMetrics()
    with open(evidence, encoding='utf-8') as file:
        for line in file:
            metrics.add(json.loads(line))
    began = time.perf_counter()
    for _ in range(1000):
        copy = metrics.copy()
    lock_us = (time.perf_counter() - began) * 1000
    began = time.perf_counter()
    for _ in range(100):
        text = stream_client._prometheus_text(copy)
    return lock_us, (time.perf_counter() - began) * 10, len(text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--runs', type=int, default=600)
    parser.add_argument('--concurrency', type=int, default=32)
    parser.add_argument('--turns', type=int, default=5)
    args = parser.parse_args()
    server, url = start_fixture()
    try:
        with tempfile.TemporaryDirectory() as folder:
            one_load(url, 50, args.concurrency, folder, False)  # warm the caches and the fixture
            turns = {False: [], True: []}
            for turn in range(args.turns):  # in pairs, ABBA, so that a drift of the machine weighs on both
                for scraped in (False, True) if turn % 2 == 0 else (True, False):
                    turns[scraped].append(one_load(url, args.runs, args.concurrency, folder, scraped))
            lock_us, render_ms, size = scrape_cost(turns[True][-1]['output'])
    finally:
        server.terminate()
        server.wait()
    for scraped, results in turns.items():
        def figures(key: str, form: str) -> str:
            return ', '.join(format(result[key], form) for result in results)
        line = (f'{"scraped every 5 ms" if scraped else "no endpoint"}: runs/s {figures("runs_per_s", ".0f")}; '
                f'first text p50 ms {figures("first_text_p50", ".1f")}; client CPU s {figures("cpu_s", ".2f")}')
        if scraped:
            line += (f'; scrapes {figures("scrapes", "d")} '
                     f'({results[0]["scrape_bytes"] // max(1, results[0]["scrapes"])} bytes each)')
        print(line)
    cpu_ms = 1000 * (sum(r['cpu_s'] for r in turns[True]) - sum(r['cpu_s'] for r in turns[False])) \
        / sum(r['scrapes'] for r in turns[True])
    print(f'one scrape of that load: the lock held {lock_us:.0f} us (a copy of the counts), then {render_ms:.2f} ms '
          f'rendering {size} bytes outside it; {cpu_ms:.2f} ms of the client\'s CPU in all (the HTTP exchange '
          f'included), {cpu_ms / 10:.3f}% of a core at one scrape a second')

    def ratio(key: str) -> float:
        """The median over the turns of scraped / without, each pair run back to back."""
        return statistics.median(scraped[key] / alone[key] for scraped, alone in zip(turns[True], turns[False]))
    return report([('runs per second, scraped every 5 ms / without the endpoint', ratio('runs_per_s'),
                    TARGET_RATE_RATIO, 'at least'),
                   ('first text p50, scraped every 5 ms / without the endpoint', ratio('first_text_p50'),
                    TARGET_FIRST_TEXT_RATIO, 'at most')])

if __name__ == '__main__':
    sys.exit(main())
