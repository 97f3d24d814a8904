"""The floor of a paced load's CPU per event: the least a reader can do.

A thread per connection sends a request, then calls ``recv()`` and takes one
timestamp per read until the chunked body's last chunk, parsing nothing. Its
CPU is the process's own, from just before the first connect to just after
the last byte, so the interpreter's start-up and imports are not counted.

    python3 benchmarks/floor_reader.py PORT CONCURRENCY STREAMS

prints one JSON object: ``cpu_s``, ``gaps_ms`` (between a stream's reads
after its first) and ``first_ms`` (from before each request to its first
read). It imports nothing from the client or the benchmarks.
"""
import json
import socket
import sys
import threading
import time

REQUEST = (b'POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n'
           b'Content-Length: 2\r\n\r\n{}')
LAST_CHUNK = b'0\r\n\r\n'


def read_streams(port: int, concurrency: int, streams: int) -> dict:
    """Read `streams` responses on `concurrency` kept connections, a thread each; see the module."""
    gaps: list[float] = []
    firsts: list[float] = []
    lock = threading.Lock()
    numbers = iter(range(streams))

    def reader() -> None:
        sock = socket.create_connection(('127.0.0.1', port))
        mine, first = [], []
        while next(numbers, None) is not None:
            began = time.perf_counter()
            sock.sendall(REQUEST)
            last = None
            while True:
                data = sock.recv(65536)
                now = time.perf_counter()
                if last is None:
                    first.append(now - began)
                else:
                    mine.append(now - last)
                last = now
                if not data or data.endswith(LAST_CHUNK):
                    break
        sock.close()
        with lock:
            gaps.extend(mine)
            firsts.extend(first)

    threads = [threading.Thread(target=reader) for _ in range(concurrency)]
    cpu = time.process_time()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    cpu = time.process_time() - cpu
    return {'cpu_s': cpu, 'gaps_ms': [gap * 1000 for gap in gaps], 'first_ms': [first * 1000 for first in firsts]}


if __name__ == '__main__':
    print(json.dumps(read_streams(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))))
