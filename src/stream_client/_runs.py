"""The engine: the runs of a load as state machines, with no thread per run (Linux).

``_Engine`` runs a schedule of jobs in the thread that calls it (a load's
run, a trace's line, a session: each a generator that yields the requests to
send and the think times to wait, and gets back each run's record): one epoll
set waits for every run's socket, the next start and the end of each think
time, and each run (``_machine._Machine``) steps through connect, send, read,
judge and its record as its socket becomes ready or its timer runs out. The
blocking steps that remain (a name lookup, a proxy's tunnel, a TLS handshake,
the cross-check's twin) run on ``_BlockingSteps``, a few threads at most.
"""
import contextlib
import heapq
import itertools
import math
import os
import queue
import select
import socket
import ssl
import threading
import time
import traceback

from ._exchange import Cancel, _Connection, KeptConnections
from ._request import PreparedRequest
from ._machine import _Job, _Machine

_EPOLL = hasattr(select, 'epoll')  # Linux: a load's runs are state machines on an _Engine (else worker threads)
_BLOCKING_THREADS = 8  # threads at most for the steps of runs that block (see _BlockingSteps)
_EPOLL_RESOLUTION = 0.001  # epoll waits in whole milliseconds


def _wait_until(at: float, cancel: Cancel, clock) -> bool:
    """Sleep until the clock's time ``at``, waking every 50 ms to see a cancel; False when one came."""
    wait = at - clock.now()
    while wait > 0 and cancel.reason is None:
        clock.sleep(min(wait, 0.05))
        wait = at - clock.now()
    return cancel.reason is None


def _drained(fd: int) -> bool:
    """Read what the bell rang into a non-blocking pipe; False once it is empty."""
    try:
        return bool(os.read(fd, 4096))
    except BlockingIOError:
        return False


def _raise(exc: Exception) -> None:
    """A step that fails its run with exc (a blocking step's failure, a timer run out)."""
    raise exc


class _BlockingSteps:
    """The steps of a run that block, each on one of at most ``size`` threads, started as they are needed:
    a TCP connect by name, a proxy's tunnel and a TLS handshake (transport's _connect), and the cross-check's
    unstreamed twin. Each result is handed back to the engine's thread (``done``), and the bell rung."""

    def __init__(self, size: int, ring) -> None:
        self._size, self._ring = size, ring
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self.done: queue.SimpleQueue = queue.SimpleQueue()  # (flight, then, result, error)
        self._threads: list[threading.Thread] = []
        self._pending = 0  # jobs submitted and not handed back

    def submit(self, flight: '_Machine', step, then, *args) -> None:
        self._pending += 1
        self._jobs.put((flight, step, then, args))
        if self._pending > len(self._threads) and len(self._threads) < self._size:
            self._threads.append(threading.Thread(target=self._loop, daemon=True, name='blocking steps'))
            self._threads[-1].start()

    def taken(self) -> None:
        """One result has been taken from ``done``."""
        self._pending -= 1

    def _loop(self) -> None:
        for flight, step, then, args in iter(self._jobs.get, None):
            try:
                self.done.put((flight, then, step(*args), None))
            except Exception as exc:  # the run's failure, classified in the engine's thread
                self.done.put((flight, then, None, exc))
            self._ring()

    def close(self) -> None:
        for _ in self._threads:
            self._jobs.put(None)
        for thread in self._threads:
            thread.join()


class _Engine:
    """Runs a schedule of jobs in the calling thread, at most ``slots`` at once, each run of a job a _Machine
    driven by one epoll set's readiness and timers; with ``keep_alive``, each slot keeps its connections
    between its runs, as a worker thread did (with ``kept_per_job``, between the runs of one job only). A
    cancel stops the schedule (rung on the engine's bell), ends every think time, and shuts the runs'
    connections down, so that they end as interrupted; a bug in the engine's loop fails the runs in flight
    and every later one, so that none waits for ever and each has its record."""

    def __init__(self, slots: int, cancel: Cancel, clock, keep_alive: bool, kept_per_job: bool = False) -> None:
        self.cancel, self._clock, self._kept_per_job = cancel, clock, kept_per_job
        self._free = [KeptConnections() if keep_alive else None for _ in range(slots)]  # free slots
        self._slots = list(self._free)
        self._upcoming = None                      # the next (index, due) of the schedule to start (see run())
        self._jobs: set[_Job] = set()              # jobs started and not ended
        self._thinking: list = []                  # heap of (when on the clock, token, job): jobs in a think time
        self._live: set[_Machine] = set()           # runs started and not ended
        self._watched: dict[int, _Machine] = {}     # by descriptor
        self._resting: dict[int, socket.socket] = {}  # idle kept connections left in the epoll set, by descriptor
        self._timers: list = []                    # heap of (due, token, flight), refreshed when popped
        self._tokens = itertools.count(1)
        self._addresses: dict[tuple, tuple | None] = {}
        self.broken: BaseException | None = None   # a bug in the loop: every later run fails with it
        self._poll = select.epoll()
        self._waker, self._bell = os.pipe()
        os.set_blocking(self._waker, False)
        os.set_blocking(self._bell, False)
        self._poll.register(self._waker, select.EPOLLIN)
        self._blocking = _BlockingSteps(_BLOCKING_THREADS, self._ring)

    def run(self, schedule, start_job, started: float) -> None:
        """For each (index, due) of schedule, in order, once the clock passes started + due and a slot is free,
        start the job start_job(index, due, begun) (begun: its start on the clock) and take its steps, in this
        thread. Returns when every job that started has ended; a KeyboardInterrupt cancels the load and is
        raised once they have."""
        self._start_job, self._schedule, self._started = start_job, schedule, started
        interrupted = None
        self.cancel.on_cancel(self._ring_on_cancel)
        try:
            self._upcoming = next(schedule, None)  # the next (index, due) to start
            while True:
                try:
                    self._start_due()
                    self._end_thinking()
                    if self._upcoming is None and not self._jobs:
                        break
                    if not self._live:  # no run in flight: wait on the clock for the next start or think's end
                        at = self._next_on_clock()
                        if at == math.inf:  # jobs that wait for nothing: cut short by a KeyboardInterrupt
                            break
                        _wait_until(at, self.cancel, self._clock)
                        continue
                    self._wait()
                except KeyboardInterrupt as exc:
                    interrupted = interrupted or exc
                    self.cancel.cancel(getattr(exc, 'signal_name', 'SIGINT'))
                except Exception as exc:  # a bug in this client: no run may wait for ever
                    self.broken = exc
                    for flight in list(self._live):
                        flight.crash(exc)
        finally:
            self.cancel.forget(self._ring_on_cancel)
            self._close()
        if interrupted is not None:
            raise interrupted

    def _start_due(self) -> None:
        """Start every job that is due while a slot is free (none once the load is cancelled)."""
        while self._upcoming is not None:
            if self.cancel.reason is not None:  # nothing more starts
                self._upcoming = None
                return
            if not self._free or self._started + self._upcoming[1] > self._clock.now():
                return
            job = _Job(self._start_job(*self._upcoming, self._clock.now()), self._free.pop())
            self._upcoming = next(self._schedule, None)
            self._jobs.add(job)
            self._advance(job, None)

    def _advance(self, job: _Job, value) -> None:
        """Send the job what its last step gave (None to begin), and take its next step: a run, a think time
        (none when the load was cancelled), or its end, which frees its slot."""
        try:
            step = job.steps.send(value)
        except StopIteration:
            step = None
        except Exception:  # the caller's bug (its emit's), as a worker thread's would be: said, and the load goes on
            traceback.print_exc()
            step = None
        if step is None:
            self._jobs.discard(job)
            if self._kept_per_job and job.kept is not None:
                job.kept.close()
            self._free.append(job.kept)
        elif isinstance(step, PreparedRequest):
            machine = _Machine(self, job, step)
            self._live.add(machine)
            self._step(machine, machine.start)
        elif step <= 0 or self.cancel.reason is not None:
            self._advance(job, self.cancel.reason is None)
        else:
            heapq.heappush(self._thinking, (self._clock.now() + step, next(self._tokens), job))

    def _end_thinking(self) -> None:
        """Take up the jobs whose think time is over on the clock, every one once the load is cancelled."""
        if not self._thinking:
            return
        cancelled, now = self.cancel.reason is not None, self._clock.now()
        while self._thinking and (cancelled or self._thinking[0][0] <= now):
            self._advance(heapq.heappop(self._thinking)[2], not cancelled)

    def _next_on_clock(self) -> float:
        """When on the clock the next job starts (if a slot is free) or the next think time ends."""
        at = self._started + self._upcoming[1] if self._upcoming is not None and self._free else math.inf
        return min(at, self._thinking[0][0]) if self._thinking else at

    def _wait(self) -> None:
        """Wait for sockets until the earliest timer, the next start when a slot is free or the end of a think
        time, and take what became ready. epoll waits in whole milliseconds, rounded up: for a start or a
        think's end it waits the whole milliseconds before it, and the rest by the clock, after a look at
        the sockets that does not wait. A timer that ran out since the last pass (the thread was slow to get
        here) is a wait of none: epoll takes a negative timeout as no timeout at all."""
        if len(self._timers) > 2 * len(self._live) + 64:  # mostly entries of runs that moved on
            self._timers = [entry for entry in self._timers if entry[2].timer == entry[1]]
            heapq.heapify(self._timers)
        wait = max(0.0, self._timers[0][0] - time.perf_counter()) if self._timers else math.inf
        at = self._next_on_clock()
        if at < math.inf:
            until = at - self._clock.now()
            if until < _EPOLL_RESOLUTION and until <= wait:
                self._pass(0)
                self._clock.sleep(max(0.0, at - self._clock.now()))
                return
            until = math.floor(until / _EPOLL_RESOLUTION) * _EPOLL_RESOLUTION  # woken before it, not after
            wait = min(wait, until)
        self._pass(-1 if wait == math.inf else wait)

    def _pass(self, timeout: float) -> None:
        """Wait for sockets, then read every ready response, stamping each read as it returns (with the wall
        clock's offset from the monotonic one, taken once for the pass), before any of them is fed; take the
        other steps that became ready, the results of blocking steps, and the timers that ran out."""
        ready = self._poll.poll(timeout)
        wall_offset_ns = time.time_ns() - time.perf_counter_ns()
        reads = []
        for fd, _ in ready:
            flight = self._watched.get(fd)
            if flight is None:
                if fd == self._waker:  # the bell
                    while _drained(self._waker):
                        pass
                elif self._resting.pop(fd, None) is not None:  # bytes or an end while idle
                    self._poll.unregister(fd)
            elif flight.reading:
                kernel_ns = None
                try:
                    raw, kernel_ns = flight.receive(flight.connection)
                except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
                    continue  # nothing to read yet (a TLS record not yet whole)
                except Exception as exc:
                    raw = exc
                flight.last = time.perf_counter()
                reads.append((flight, raw, flight.last, kernel_ns))
            else:
                self._step(flight, flight.wake)
        for flight, raw, returned, kernel_ns in reads:
            self._step(flight, flight.take, raw, returned, kernel_ns, wall_offset_ns)
            self._start_due()  # a long pass: the starts that came due go first
        self._take_blocked()
        self._expire(time.perf_counter())

    def _step(self, flight: _Machine, step, *args) -> None:
        try:
            step(*args)
        except Exception as exc:
            if flight.ending:  # a bug once it had ended (its twin's, its record's): said in its record
                flight.crash(exc)
            else:
                flight.fail(exc)

    def _take_blocked(self) -> None:
        """Resume the runs whose blocking step has ended."""
        while True:
            try:
                flight, then, result, error = self._blocking.done.get_nowait()
            except queue.Empty:
                return
            self._blocking.taken()
            if flight.over:  # crashed meanwhile: what the step opened is let go
                if isinstance(result, _Connection):
                    self.cancel.detach(result.sock)
                    result.sock.close()
            elif error is not None:
                self._step(flight, _raise, error)
            else:
                self._step(flight, then, result)

    def _expire(self, now: float) -> None:
        """Fail the runs whose idle timeout or deadline has run out, as a blocking socket would."""
        while self._timers and self._timers[0][0] <= now:
            _, token, flight = heapq.heappop(self._timers)
            if flight.timer != token:
                continue
            due = flight.due_at()
            if due > now:
                heapq.heappush(self._timers, (due, token, flight))
            else:
                self._step(flight, _raise, TimeoutError('timed out'))

    def watch(self, flight: _Machine, events: int, wake) -> None:
        """Wait for the flight's socket to be ready for events, then take wake (or read it), under its timer."""
        flight.wake = wake
        if flight.fd < 0:
            flight.fd = flight.sock.fileno()
            if self._resting.pop(flight.fd, None) is flight.sock:  # a kept connection, still in the set
                flight.events = select.EPOLLIN
            else:
                self._poll.register(flight.fd, events)
                flight.events = events
            self._watched[flight.fd] = flight
        if flight.events != events:
            self._poll.modify(flight.fd, events)
            flight.events = events
        if not flight.timer:
            flight.timer = next(self._tokens)
            heapq.heappush(self._timers, (flight.due_at(), flight.timer, flight))

    def unwatch(self, flight: _Machine, keep_registered: bool = False) -> None:
        """Stop waiting for the flight's socket; with keep_registered, leave it in the epoll set (rest())."""
        flight.timer = 0
        if flight.fd >= 0:
            if self._watched.get(flight.fd) is flight:
                del self._watched[flight.fd]
                if not keep_registered:
                    self._poll.unregister(flight.fd)
                elif flight.events != select.EPOLLIN:
                    self._poll.modify(flight.fd, select.EPOLLIN)
            flight.fd = -1

    def rest(self, sock: socket.socket) -> None:
        """Keep an idle kept connection in the epoll set (left there by unwatch), so that the slot's next run
        on it costs no system call to add it again; if it becomes readable while idle, it leaves the set, and
        the next run's take() of it sees why."""
        self._resting[sock.fileno()] = sock

    def block(self, flight: _Machine, step, then, *args) -> None:
        """Take step(*args) on a blocking-step thread, then then(result) here (or fail the flight)."""
        self.unwatch(flight)
        self._blocking.submit(flight, step, then, *args)

    def ended(self, flight: _Machine, record: dict) -> None:
        """The run has its record: its job has it."""
        flight.over = True
        flight.x = flight.connection = flight.sock = None  # a timer's entry may outlive it until its due time
        flight.wake = flight.receive = None  # a bound method of its own: no cycle left for the collector
        self._live.discard(flight)
        self._advance(flight.job, record)

    def numeric_address(self, request) -> tuple | None:
        """The address of a plain http request without a proxy to a numeric host, which the engine connects
        to itself; None for any other (see _BlockingSteps)."""
        key = (request.scheme, request.proxy, request.host, request.port)
        if key not in self._addresses:
            self._addresses[key] = None
            if request.scheme == 'http' and request.proxy is None:
                with contextlib.suppress(socket.gaierror, UnicodeError):
                    found = socket.getaddrinfo(request.host, request.port, 0, socket.SOCK_STREAM, 0,
                                               socket.AI_NUMERICHOST)
                    self._addresses[key] = found[0] if len(found) == 1 else None
        return self._addresses[key]

    def _ring_on_cancel(self, reason: str) -> None:
        self._ring()

    def _ring(self) -> None:
        """Wake the loop; a full pipe has already rung."""
        with contextlib.suppress(BlockingIOError):
            os.write(self._bell, b'.')

    def _close(self) -> None:
        self._blocking.close()
        for kept in self._slots:
            if kept is not None:
                kept.close()
        self._poll.close()
        os.close(self._waker)
        os.close(self._bell)
