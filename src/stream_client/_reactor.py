"""The reactor: one thread per process that reads every response of a load.

``_Reactor`` waits on every run's socket with epoll (select where there is
none), stamps each ready read before feeding any, and reads by the rules of a
single run (``_take_read()``, ``_read_over()``).
"""
import collections
import contextlib
import heapq
import itertools
import math
import os
import select
import ssl
import threading
import time

from ._limits import _READ_SIZE
from ._exchange import _Connection, _Exchange, _Gate, _OPEN_GATE, _recv_stamped, _recv_unstamped
from ._transport import _read_over, _take_read


_EPOLL = hasattr(select, 'epoll')  # Linux: a load's responses are read by one _Reactor per process
_FEEDS_PER_LOOK = 16  # reads a _Reactor feeds between two looks for connections that became ready


class _Reading:
    """A response that a _Reactor reads for the worker thread waiting on it in _Reactor.read()."""

    def __init__(self, connection: _Connection, x: _Exchange, now: float) -> None:
        self.connection, self.x, self.fd = connection, x, connection.sock.fileno()
        self.receive = _recv_stamped if connection.kernel_stamps else _receive_unstamped  # see _read_ready
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
        if connection.sock.gettimeout() != 0.0:  # a kept connection is non-blocking from its last response
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
        reads: collections.deque = collections.deque()  # (reading, bytes or error, when it returned, stamp, offset)
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
        """Read every ready connection whose last read has been fed, and stamp each read as it returns
        (with the wall clock's offset from the monotonic one, taken once for the pass)."""
        wall_offset_ns = time.time_ns() - time.perf_counter_ns()
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
                raw, kernel_ns = reading.receive(reading.connection)
            except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
                continue  # nothing to read yet (a TLS record not yet whole)
            except Exception as exc:
                raw = exc
            reading.queued, reading.last = True, time.perf_counter()
            reads.append((reading, raw, reading.last, kernel_ns, wall_offset_ns))

    def _feed(self, reading: _Reading, raw: bytes | Exception, now: float, kernel_ns: int | None,
              wall_offset_ns: int) -> None:
        """Feed one read to its run's reader, as a blocking read would be fed; end the run if it is over."""
        reading.queued = False
        if reading.finished:  # its deadline ran out while the read waited
            return
        if isinstance(raw, Exception):
            self._finish(reading, raw)
            return
        try:
            _take_read(reading.x, raw, now, kernel_ns, wall_offset_ns)
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


def _receive_unstamped(connection: _Connection) -> tuple[bytes, None]:
    """What a ready non-blocking connection without the kernel's stamps holds: one recv(), and for TLS
    the rest of the record that OpenSSL has already decrypted, which the epoll set cannot see."""
    raw, _ = _recv_unstamped(connection)
    if raw and isinstance(connection.sock, ssl.SSLSocket):
        while connection.sock.pending():
            raw += connection.sock.recv(_READ_SIZE)
    return raw, None
