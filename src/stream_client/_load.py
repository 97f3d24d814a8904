"""Many runs: a load of strict runs.

``run_load()`` runs prepared requests on the engine (``_runs``; worker threads
where there is no epoll), in this process or forked worker processes,
closed-loop or at seeded arrival times, and hands each record on as it is
written.
"""
import dataclasses
import itertools
import os
import queue
import random
import threading
import time
import typing

from ._request import _positive_finite, PreparedRequest
from ._salt import _pass_salt, _SALT_CHOICES, _salted
from ._exchange import Cancel, KeptConnections
from ._record import _client_failure, _utc_iso
from ._transport import _run, _Show
from ._runs import _Engine, _EPOLL, _wait_until
from ._plan import _plan_id, _shard_runs
from ._processes import _spread_load


_ARRIVALS = ('poisson', 'constant')
_MAX_OPEN_LOOP_IN_FLIGHT = 512  # runs in flight at most under --rate without --concurrency
_MAX_PROCESSES = 64             # worker processes of one load at most


@dataclasses.dataclass(frozen=True)
class LoadSettings:
    """How many runs, how many at once, and how fast they start: a closed loop (no rate: each run
    starts when a slot is free) or an open loop (rate runs per second, at most concurrency at once)."""

    runs: int = 1
    concurrency: int | None = None
    rate: float | None = None
    arrivals: str = 'poisson'
    seed: int = 0
    keep_alive: bool = False  # each worker reuses its connection while the responses allow it
    duration: float | None = None  # an open loop bounded by time: runs is then what the schedule holds
    step: int | None = None        # the step of a rate sweep, from 0
    slos: tuple = ()               # (name, ms) pairs that a good run meets: see SLO_FIGURES
    slo_target: float | None = None  # a sweep's attainment under capacity (None: DEFAULT_SLO_TARGET)
    processes: int = 1             # worker processes the runs are spread over (Linux: forked)
    warmup_runs: int = 0           # the first runs (by index) are warm-up: kept, marked, left out of the summary
    warmup_s: float | None = None  # or the runs that start within this many seconds of the load's start
    search: tuple | None = None    # (LO, HI) of the --find-capacity search the step is a probe of
    repeat: int | None = None      # which of --repeat K loads this is, from 0
    shard: tuple = (0, 1)          # (I, N): this process sends the runs i with i % N == I (see _plan)
    start_at: float | None = None  # the epoch time the schedule starts at (None: now)
    cache_salt: str = 'off'        # --cache-salt: a marker per pass (or per session) before every prompt (_salt)
    session_slos: tuple = ()       # --session-slo (name, ms) pairs a good session meets (sessions only)

    def __post_init__(self) -> None:
        if isinstance(self.runs, bool) or not isinstance(self.runs, int) or self.runs < 1:
            raise ValueError(f'runs must be a positive integer, got {self.runs!r}')
        if self.concurrency is not None and (isinstance(self.concurrency, bool) or
                                             not isinstance(self.concurrency, int) or self.concurrency < 1):
            raise ValueError(f'concurrency must be a positive integer, got {self.concurrency!r}')
        if self.rate is not None and not _positive_finite(self.rate):
            raise ValueError(f'rate must be a positive finite number of runs per second, got {self.rate!r}')
        if self.arrivals not in _ARRIVALS:
            raise ValueError(f'arrivals must be one of {", ".join(_ARRIVALS)}, got {self.arrivals!r}')
        if isinstance(self.processes, bool) or not isinstance(self.processes, int) or \
                not 1 <= self.processes <= _MAX_PROCESSES:
            raise ValueError(f'processes must be a whole number from 1 to {_MAX_PROCESSES}, got {self.processes!r}')
        if not (isinstance(self.shard, tuple) and len(self.shard) == 2 and
                all(isinstance(part, int) and not isinstance(part, bool) for part in self.shard) and
                0 <= self.shard[0] < self.shard[1]):
            raise ValueError(f'shard must be (I, N) with 0 <= I < N, got {self.shard!r}')
        if self.start_at is not None and not _positive_finite(self.start_at):
            raise ValueError(f'start_at must be a time in seconds since the epoch, got {self.start_at!r}')
        if self.duration is not None and (self.rate is None or not _positive_finite(self.duration)):
            raise ValueError(f'duration bounds an open loop: a positive number of seconds with a rate, '
                             f'got {self.duration!r}')
        if isinstance(self.warmup_runs, bool) or not isinstance(self.warmup_runs, int) or \
                not 0 <= self.warmup_runs < self.runs:
            raise ValueError(f'warmup_runs must be a whole number from 0 to runs - 1 ({self.runs - 1}), '
                             f'got {self.warmup_runs!r}')
        if self.warmup_s is not None and not _positive_finite(self.warmup_s):
            raise ValueError(f'warmup_s must be a positive number of seconds, got {self.warmup_s!r}')
        if self.cache_salt not in _SALT_CHOICES:
            raise ValueError(f'cache_salt must be one of {", ".join(_SALT_CHOICES)}, got {self.cache_salt!r}')

    @property
    def in_flight(self) -> int:
        """The most runs that may be in flight at once."""
        default = 1 if self.rate is None else _MAX_OPEN_LOOP_IN_FLIGHT
        return min(self.runs, self.concurrency or default)

    def described(self) -> dict:
        return {'runs': self.runs, 'concurrency': self.in_flight, 'rate': self.rate,
                'arrivals': self.arrivals if self.rate is not None else None, 'seed': self.seed,
                'keep_alive': self.keep_alive, 'duration': self.duration, 'step': self.step,
                'slo': dict(self.slos) or None, 'slo_target': self.slo_target, 'processes': self.processes,
                'warmup_runs': self.warmup_runs, 'warmup_s': self.warmup_s,
                'search': list(self.search) if self.search else None, 'repeat': self.repeat,
                'cache_salt': self.cache_salt}

    def warms_up(self, index: int, offset_s: float) -> bool:
        """Whether run index, started offset_s after the load's start, is a warm-up run."""
        return index < self.warmup_runs or (self.warmup_s is not None and offset_s < self.warmup_s)


def _open_loop_offsets(rate: float, arrivals: str, seed: int):
    """The endless seeded schedule of an open loop: evenly spaced or Poisson arrivals, from 0 s. Even
    arrivals are computed from their index (n / rate), not summed, so that no rounding adds a run at the
    end of a duration (ten 0.1 s steps add up to 0.9999999999999999 s)."""
    if arrivals == 'constant':
        yield from (index / rate for index in itertools.count())
        return
    rng, at = random.Random(seed), 0.0
    while True:
        yield at
        at += rng.expovariate(rate)


def _scheduled_runs(rate: float, arrivals: str, seed: int, duration: float) -> int:
    """How many runs the seeded open-loop schedule at rate starts within duration seconds."""
    if not (_positive_finite(rate) and _positive_finite(duration)):
        raise ValueError(f'rate and duration must be positive finite numbers, got {rate!r} and {duration!r}')
    return sum(1 for _ in itertools.takewhile(lambda at: at < duration, _open_loop_offsets(rate, arrivals, seed)))


def arrival_offsets(settings: LoadSettings):
    """Seconds after the load's start at which each run is due: all at once in a closed loop (the slots
    pace them); evenly spaced or at Poisson arrivals (seeded) in an open loop."""
    if settings.rate is None:
        return itertools.repeat(0.0, settings.runs)
    return itertools.islice(_open_loop_offsets(settings.rate, settings.arrivals, settings.seed), settings.runs)


class _Pool:
    """Worker threads, started as jobs need them, up to ``size``; work(job) runs in one of them. The
    threads take jobs one at a time, in the order submitted, and admit(job), called as each is taken,
    says whether it runs at all: so the jobs that run are the first ones submitted, whatever the threads'
    timing (a load's cancel leaves no gap in the numbers of the runs that started)."""

    def __init__(self, size: int, work, admit) -> None:
        self._size, self._work, self._admit = size, work, admit
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._taking = threading.Lock()  # held from taking a job to deciding whether it runs
        self._lock = threading.Lock()
        self._pending = 0  # jobs submitted and not finished
        self._threads: list[threading.Thread] = []

    def submit(self, job) -> None:
        with self._lock:
            self._pending += 1
            spawn = self._pending > len(self._threads) and len(self._threads) < self._size
            if spawn:
                self._threads.append(threading.Thread(target=self._loop, daemon=True))
        self._jobs.put(job)
        if spawn:
            self._threads[-1].start()

    def _loop(self) -> None:
        while True:
            with self._taking:
                job = self._jobs.get()
                admitted = job is not None and self._admit(job)
            if job is None:
                return
            try:
                if admitted:
                    self._work(job)
            finally:
                with self._lock:
                    self._pending -= 1

    def close(self) -> None:
        """Wait for every job, then for the threads (in short waits, so that signals are handled)."""
        for _ in self._threads:
            self._jobs.put(None)
        for thread in self._threads:
            while thread.is_alive():
                thread.join(0.1)


@dataclasses.dataclass(frozen=True)
class _Clock:
    """What a load reads the time from and waits by: now() on a monotonic scale (seconds), sleep(seconds),
    and wall(), seconds since the epoch (for --start-at). _REAL_CLOCK is the system's; the tests drive a
    virtual one, so that a schedule, a think time or a trace's timestamps are checked without waiting."""

    now: typing.Callable[[], float] = time.perf_counter
    sleep: typing.Callable[[float], None] = time.sleep
    wall: typing.Callable[[], float] = time.time


_REAL_CLOCK = _Clock()


def _run_on_schedule(schedule, slots: int, work, started: float, cancel: Cancel, clock: _Clock = _REAL_CLOCK) -> None:
    """The scheduling loop of every workload where there is no epoll (the engine's is _Engine.run): for each
    (index, due) of schedule, in order, wait until started + due on the clock, then hand (index, due) to work
    on one of at most slots worker threads. Once cancel is cancelled nothing more is submitted, and a job not yet
    taken does not run; this returns when every job that started has ended."""
    pool = _Pool(slots, work, lambda job: cancel.reason is None)
    try:
        for index, due in schedule:
            if not _wait_until(started + due, cancel, clock):
                break
            pool.submit((index, due))
    finally:
        pool.close()


def run_load(requests: list[PreparedRequest], settings: LoadSettings, on_record, cancel: Cancel,
             on_started=None, clock: _Clock = _REAL_CLOCK, on_run=None) -> None:
    """Run requests[i % len(requests)] for each run i, as settings say; call on_record(record) for each
    run as it ends, one call at a time (in this thread on Linux, else from the worker threads).

    Each record gains ``run`` (its index), ``offset_ms`` (its start after the load's), ``queued_ms``
    and ``scheduled_ms`` (open loop: how late it started after it was due, and when it was due, after the
    load's start), ``warmup`` (a warm-up run) and ``load`` (the settings, and an ``id`` of the
    load). With ``settings.keep_alive`` each slot (the engine's, or a worker thread) keeps its
    connections between its runs (see run()) and closes them when the load ends. Once ``cancel`` is
    cancelled, no run starts and the runs in flight end as interrupted; this returns when every run that
    started has its record. With ``settings.processes`` above 1 the runs are spread over that many forked
    processes (see _spread_load), and on_record is still called here, in this process. On Linux the runs
    of each process are state machines on one _Engine, with no thread per run (see _runs). on_started(),
    if given, is called here once the worker processes are forked (at once without them), before any run starts.
    ``clock`` is what the schedule waits by (the real one in forked processes). on_run(), if given, is called
    as each run starts (see _run_shares).
    """
    started = _started(settings, clock)
    described = _load_description(requests, settings)
    salt = _pass_salt(settings.cache_salt, described)
    requests = [_salted(request, salt) for request in requests]

    def run_share(share: tuple[int, int], out, cancel: Cancel, on_run=None) -> None:
        _run_share(requests, settings, out, cancel, started, described, share, clock, on_run=on_run)
    _run_shares(settings, run_share, on_record, cancel, on_started, on_run)


def _run_shares(settings: LoadSettings, run_share, on_record, cancel: Cancel, on_started=None, on_run=None) -> None:
    """Run every share of a workload's units (runs, sessions, lines) of this shard: run_share(share, out,
    cancel, on_run) runs the units i with i % workers == number (share is (number, workers): see _share),
    handing each record to out and calling on_run() as each run starts. In this process, or spread over
    settings.processes forked ones (_spread_load), and on_record and on_run are called here either way, one
    call at a time (a forked worker says each start on its pipe: the parent's on_run, and the locks it
    takes, never run in the worker, whose copy of a lock another thread held at the fork is never released)."""
    if settings.processes > 1:
        _spread_load([_share(settings, number) for number in range(settings.processes)], run_share, on_record, cancel,
                     on_started, on_run)
        return
    if on_started is not None:
        on_started()
    run_share(_share(settings, 0), on_record, cancel, on_run)


def _started(settings: LoadSettings, clock: _Clock) -> float:
    """When the schedule starts on the clock: now, or at --start-at's wall time."""
    return clock.now() + (0.0 if settings.start_at is None else settings.start_at - clock.wall())


def _load_description(requests: list[PreparedRequest], settings: LoadSettings, **fields) -> dict:
    """The ``load`` block of a load's records: its settings (and the workload's own fields), the runs this
    shard sends, an id, and its plan (the id of the whole load, whichever shard sends it: _plan_id)."""
    described = {**settings.described(), **fields}
    index, shards = settings.shard
    plan = _plan_id(requests, described, shards, settings.start_at)
    return {**described, 'runs': _shard_runs(settings.runs, settings.shard),
            'id': f'{plan}.{index}' if shards > 1 else os.urandom(8).hex(),  # the id tells merged loads apart
            'plan': {'id': plan, 'shard': index, 'shards': shards, 'runs': settings.runs,
                     'start_at': None if settings.start_at is None else _utc_iso(settings.start_at)}}


def _slots(settings: LoadSettings, share: tuple[int, int]) -> int:
    """The runs a share may have in flight: its part of settings.in_flight, at least one."""
    number, processes = share
    return max(1, settings.in_flight // processes + (number < settings.in_flight % processes))


def _share(settings: LoadSettings, process: int) -> tuple[int, int]:
    """(number, workers) of a worker process of a shard: run i is its when i % workers == number (i % N is
    the shard, and i // N % processes the process within it), and it takes that share of the slots."""
    index, shards = settings.shard
    return process * shards + index, settings.processes * shards


def _run_share(requests: list[PreparedRequest], settings: LoadSettings, on_record, cancel: Cancel, started: float,
               described: dict, share: tuple[int, int], clock: _Clock = _REAL_CLOCK, offsets=None,
               fields=None, on_run=None) -> None:
    """The runs i with i % processes == number (share is (number, processes)), with that share of the slots,
    on the schedule from ``started``: the load's arrivals, or offsets[i] (a trace's timestamps); on Linux as
    state machines on one _Engine in this thread, elsewhere on worker threads. fields(i, late_ms), when
    given, adds a workload's own fields to run i's record (a trace's line); on_run() is called as each run
    starts."""
    number, processes = share
    timed = offsets is not None or settings.rate is not None  # a closed loop has no schedule to be late on

    def emit(index: int, due: float, begun: float, record: dict) -> None:
        late = round((begun - started - due) * 1000, 3)
        on_record({'run': index, **record, 'offset_ms': round((begun - started) * 1000, 3),
                   'queued_ms': late if timed else None, 'scheduled_ms': round(due * 1000, 3) if timed else None,
                   'warmup': settings.warms_up(index, begun - started), 'load': described,
                   **(fields(index, late) if fields is not None else {})})
    schedule = enumerate(arrival_offsets(settings) if offsets is None else offsets)
    mine = ((index, due) for index, due in schedule if index % processes == number)
    _run_scheduled(_single_runs(lambda index: requests[index % len(requests)], emit), settings.keep_alive, mine,
                   _slots(settings, share), started, cancel, clock, on_run=on_run)


def _single_runs(request_of, emit):
    """The job of one run (see _run_scheduled): send request_of(index), then emit(index, due, begun, record)."""
    def job(index: int, due: float, begun: float):
        emit(index, due, begun, (yield request_of(index)))
    return job


def _announcing(start_job, on_run):
    """start_job, its jobs calling on_run() as each of their runs starts: as they yield a PreparedRequest."""
    def job(index: int, due: float, begun: float):
        steps, value = start_job(index, due, begun), None
        while True:
            try:
                step, value = steps.send(value), None  # a record not held while the next run is in flight
            except StopIteration:
                return
            if isinstance(step, PreparedRequest):
                on_run()
            value = yield step
    return job


def _run_scheduled(start_job, keep_alive: bool, schedule, slots: int, started: float, cancel: Cancel,
                   clock: _Clock, kept_per_job: bool = False, on_run=None) -> None:
    """For each (index, due) of schedule, at started + due on the clock, with at most slots at once, take the
    steps of the job start_job(index, due, begun) (begun: when it started): a generator that yields each
    PreparedRequest to send and is sent its record, or yields seconds to think and is sent whether the
    load goes on (False once it is cancelled); its generator's code runs one job at a time. On Linux the
    jobs' runs are state machines on one _Engine in this thread; elsewhere each job runs on a worker
    thread that reads its own responses. With keep_alive each slot (or worker thread) keeps its
    connections between its runs (with kept_per_job, between the runs of one job). on_run(), when given,
    is called as each run starts."""
    if on_run is not None:
        start_job = _announcing(start_job, on_run)
    if _EPOLL:
        _Engine(slots, cancel, clock, keep_alive, kept_per_job).run(schedule, start_job, started)
        return
    lock = threading.Lock()
    workers, kept_by_worker = threading.local(), []

    def kept() -> KeptConnections | None:
        if not keep_alive:
            return None
        if kept_per_job or not hasattr(workers, 'kept'):
            workers.kept = KeptConnections()
            with lock:
                kept_by_worker.append(workers.kept)
        return workers.kept

    def one(job: tuple[int, float]) -> None:
        steps, connections, value = start_job(*job, clock.now()), kept(), None
        while True:
            try:
                with lock:
                    step, value = steps.send(value), None  # a record not held while the next run is in flight
            except StopIteration:
                break
            if isinstance(step, PreparedRequest):
                try:
                    value = _run(step, _Show(), None, cancel, connections)
                except Exception as exc:  # a bug in this client: the run still has its record
                    value = _client_failure(step, exc, 'during the run')
            else:
                value = _wait_until(clock.now() + step, cancel, clock)
        if kept_per_job and connections is not None:
            connections.close()
    try:
        _run_on_schedule(schedule, slots, one, started, cancel, clock)  # one cancelled before it was taken: no job
    finally:
        for connections in kept_by_worker:
            connections.close()
