"""Two builds of the client, measured in turns in one run (issue 46's before and after).

    python3 benchmarks/bench_turns.py OLD/stream_client.py NEW/stream_client.py paced|keepalive|memory [ROUNDS]

Two builds of stream_client.py, each in a folder of its own under that name (`git show
REV:stream_client.py > old/stream_client.py`; bench_load's CPU wrapper imports it from its folder). The
scenarios are bench_load.py's, with the client file swapped:

- paced: 512 paced streams at concurrency 256 on kept connections (64 events 20 ms apart), each build
  right after a run of the minimal floor (floor_reader.py); per round and build, the CPU per event
  against the floor's and the gap p99 error against the floor's, then the medians;
- keepalive: 4,000 16-event streams with --keep-alive at concurrency 8 and 64 against the asyncio
  server; verified streams per CPU-second of main() (start-up left out), then the medians and the ratio;
- memory: the peak RSS of 10,000 runs at concurrency 1,024.

The machine is shared, so only ratios taken in the same round mean anything. Standard library only;
loopback only.
"""
from __future__ import annotations

import os
import statistics
import sys
import tempfile

import bench_load as load
from _common import PEAK_WRAPPER


def with_client(path: str, measure, *args, **options):
    load.CLIENT = path
    return measure(*args, **options)


def paced(builds: dict, rounds: int, tmp: str) -> None:
    server, port = load.start_server(load.PACED_EVENTS, 'paced', os.path.join(tmp, 'wire.json'))
    truth, cpu, error = load.PACED_GAP * 1000, {name: [] for name in builds}, {name: [] for name in builds}
    try:
        for number in range(rounds):
            for name, path in builds.items():
                floor = load.floor_run(port, 256, 512)
                client = with_client(path, load.client_run, port, 256, 512, tmp, 1)
                cpu[name].append((client['cpu'] / client['events']) / (floor['cpu'] / floor['events']))
                error[name].append((client['gap_p99'] - truth) / max(floor['gap_p99'] - truth, 0.1))
                print(f'round {number} {name}: floor {floor["cpu"] / floor["events"] * 1e6:.1f} us per event, gap p99 '
                      f'{floor["gap_p99"]:.2f} ms; client {client["cpu"] / client["events"] * 1e6:.1f} us, gap p99 '
                      f'{client["gap_p99"]:.2f} ms, first text p50 {client["first_p50"]:.1f} ms; CPU '
                      f'{cpu[name][-1]:.2f} times the floor\'s, gap error {error[name][-1]:.2f} times', flush=True)
    finally:
        server.kill()
        server.wait()
    for name in builds:
        print(f'{name}: CPU per event {statistics.median(cpu[name]):.2f} times the floor\'s (median of '
              f'{", ".join(f"{ratio:.2f}" for ratio in cpu[name])}); gap p99 error '
              f'{statistics.median(error[name]):.2f} times (median of {", ".join(f"{r:.2f}" for r in error[name])})')


def keepalive(builds: dict, rounds: int, tmp: str) -> None:
    server, port = load.start_server(16, 'asyncio')
    per_cpu = {(name, concurrency): [] for name in builds for concurrency in (8, 64)}
    try:
        load.load(port, 400, 8, tmp)  # warm up
        for number in range(rounds):
            for name, path in builds.items():
                for concurrency in (8, 64):
                    result = with_client(path, load.load, port, 4000, concurrency, tmp, load.CPU_WRAPPER,
                                         keep_alive=True)
                    per_cpu[name, concurrency].append(result['summary']['runs'] / result['cpu'])
                    print(f'round {number} {name}, concurrency {concurrency}: {result["summary"]["runs_per_s"]:.0f} '
                          f'streams/s, {per_cpu[name, concurrency][-1]:.0f} per CPU-second', flush=True)
    finally:
        server.kill()
        server.wait()
    old, new = builds
    for concurrency in (8, 64):
        before, after = (statistics.median(per_cpu[name, concurrency]) for name in (old, new))
        print(f'concurrency {concurrency}: verified streams per CPU-second, {old} {before:.0f}, {new} {after:.0f}: '
              f'{after / before:.2f} times')


def memory(builds: dict, rounds: int, tmp: str) -> None:
    server, port = load.start_server(load.EVENTS)
    try:
        for _ in range(rounds):
            for name, path in builds.items():
                result = with_client(path, load.load, port, 10_000, 1024, tmp, PEAK_WRAPPER)
                print(f'{name}: 10,000 runs at concurrency 1,024: peak RSS {result["peak_mib"]:.1f} MiB', flush=True)
    finally:
        server.kill()
        server.wait()


def main() -> int:
    scenarios = {'paced': paced, 'keepalive': keepalive, 'memory': memory}
    if len(sys.argv) not in (4, 5) or sys.argv[3] not in scenarios:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    builds = {'old': os.path.abspath(sys.argv[1]), 'new': os.path.abspath(sys.argv[2])}
    with tempfile.TemporaryDirectory() as tmp:
        scenarios[sys.argv[3]](builds, int(sys.argv[4]) if len(sys.argv) == 5 else 3, tmp)
    return 0


if __name__ == '__main__':
    sys.exit(main())
