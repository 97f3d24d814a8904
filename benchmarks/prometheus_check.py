"""A real Prometheus scrapes --metrics-port during a fixture load, and PromQL's histogram_quantile over what it
kept agrees with the load's own summary within one bucket of the GenAI conventions' boundaries (docs/formats.md).

Needs the prometheus binary (Debian: apt-get install prometheus); without it, one line says so and the script
exits 0. promtool, where it is beside it, lints one scrape (promtool check metrics). About 20 seconds.

usage: python3 benchmarks/prometheus_check.py [--duration S] [--rate R]
"""
from __future__ import annotations

import argparse
import http.client
import bisect
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(HERE, 'src'))
from stream_client._otel import _SECONDS_BOUNDS  # noqa: E402 -- the package of this checkout

# (what, PromQL over the last samples kept, the summary's figure in ms)
CHECKS = (
    ('first text p50', 'histogram_quantile(0.5, sum by (le) (last_over_time('
     'gen_ai_client_inference_time_to_first_chunk_seconds_bucket{error_type=""}[5m])))', ('first_text_ms', 'p50')),
    ('first text p90', 'histogram_quantile(0.9, sum by (le) (last_over_time('
     'gen_ai_client_inference_time_to_first_chunk_seconds_bucket{error_type=""}[5m])))', ('first_text_ms', 'p90')),
    ('duration p50', 'histogram_quantile(0.5, sum by (le) (last_over_time('
     'gen_ai_client_inference_duration_seconds_bucket{error_type=""}[5m])))', ('duration_ms', 'p50')),
)
FINISHED = 'sum(last_over_time(stream_client_runs_finished_total[5m]))'


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(('127.0.0.1', 0))
        return probe.getsockname()[1]


def get(url: str, timeout: float = 5) -> bytes:
    with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(url, timeout=timeout) as response:
        return response.read()


def query(prometheus: int, promql: str) -> float | None:
    answer = json.loads(get(f'http://127.0.0.1:{prometheus}/api/v1/query?' + urllib.parse.urlencode({'query': promql})))
    result = answer['data']['result']
    return float(result[0]['value'][1]) if result else None


def bucket(seconds: float) -> int:
    """The index of the conventions' bucket that holds seconds (upper bound inclusive)."""
    return bisect.bisect_left(_SECONDS_BOUNDS, seconds)


def wait_ready(prometheus: int, process: subprocess.Popen) -> None:
    for _ in range(100):
        if process.poll() is not None:
            raise SystemExit(f'prometheus_check: prometheus exited ({process.returncode})')
        try:
            get(f'http://127.0.0.1:{prometheus}/-/ready', timeout=1)
            return
        except (urllib.error.URLError, OSError):
            time.sleep(0.2)
    raise SystemExit('prometheus_check: prometheus was not ready in 20 s')


def keep_one_scrape(url: str, into: list, done: threading.Event) -> None:
    """One scrape of the endpoint taken during the load, for promtool."""
    while not done.is_set() and not into:
        try:
            body = get(url, timeout=2).decode()
            if 'gen_ai_client_inference_duration_seconds_bucket' in body:
                into.append(body)
        except (urllib.error.URLError, OSError, http.client.HTTPException):
            pass
        done.wait(0.2)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--duration', type=float, default=8.0, help='seconds of the load (default 8)')
    parser.add_argument('--rate', type=float, default=25.0, help='runs per second (default 25)')
    args = parser.parse_args()
    binary = shutil.which('prometheus')
    if binary is None:
        print('prometheus_check: skipped: no prometheus on PATH (Debian: apt-get install prometheus)')
        return 0
    version = subprocess.run([binary, '--version'], capture_output=True, text=True).stdout.split('\n')[0]
    metrics_port, prometheus_port = free_port(), free_port()
    with tempfile.TemporaryDirectory() as folder:
        config = os.path.join(folder, 'prometheus.yml')
        with open(config, 'w', encoding='utf-8') as file:
            file.write('global:\n  scrape_interval: 500ms\n  scrape_timeout: 400ms\nscrape_configs:\n'
                       f'  - job_name: stream-client\n    static_configs:\n'
                       f'      - targets: ["127.0.0.1:{metrics_port}"]\n')
        with open(os.path.join(folder, 'prometheus.log'), 'w') as log:
            prometheus = subprocess.Popen([binary, f'--config.file={config}',
                                           f'--storage.tsdb.path={os.path.join(folder, "data")}',
                                           f'--web.listen-address=127.0.0.1:{prometheus_port}'],
                                          stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_ready(prometheus_port, prometheus)
            scrape, done = [], threading.Event()
            keeper = threading.Thread(target=keep_one_scrape, args=(f'http://127.0.0.1:{metrics_port}/metrics',
                                                                    scrape, done))
            keeper.start()
            load = subprocess.run([sys.executable, os.path.join(HERE, 'stream_client.py'), '--fixture', 'mixed',
                                   '--rate', str(args.rate), '--duration', str(args.duration),
                                   '--metrics-port', str(metrics_port), '--output', os.path.join(folder, 'load.jsonl'),
                                   '--quiet'], capture_output=True, text=True, timeout=args.duration + 120)
            done.set()
            keeper.join()
            summary = json.loads(load.stdout)
            time.sleep(1.0)  # the last scrape's samples written
            finished = query(prometheus_port, FINISHED)
            rows, agree = [], True
            for what, promql, (field, rank) in CHECKS:
                theirs, ours = query(prometheus_port, promql), summary['latency_ms'][field][rank] / 1000
                apart = None if theirs is None else abs(bucket(theirs) - bucket(ours))
                agree = agree and apart is not None and apart <= 1
                rows.append(f'  {what}: PromQL {theirs if theirs is None else round(theirs, 4)} s, summary '
                            f'{ours:.4f} s; buckets apart: {apart}')
        finally:
            prometheus.terminate()
            prometheus.wait()
    print(f'prometheus_check: {version}; a --fixture mixed load of {summary["runs"]} runs ({summary["ok"]} ok); '
          f'the last scrape counted {finished if finished is None else int(finished)} finished')
    print('\n'.join(rows))
    promtool = shutil.which('promtool')
    if promtool and scrape:
        lint = subprocess.run([promtool, 'check', 'metrics'], input=scrape[0], capture_output=True, text=True)
        clean = lint.returncode == 0 and not lint.stdout.strip()
        print(f'  promtool check metrics: {"clean" if clean else lint.stdout + lint.stderr}')
    print(f'prometheus_check: {"agrees" if agree else "DISAGREES"} with the summary within one bucket')
    return 0 if agree else 1


if __name__ == '__main__':
    sys.exit(main())
