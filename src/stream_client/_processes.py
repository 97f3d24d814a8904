"""A workload's shares spread over forked worker processes (--processes), on Linux.

``_spread_load()`` forks one worker per share (the units i with i % workers == number: see _load._share),
each running its share on its own engine and writing each record as a JSON line to a pipe of its own; the
parent reads them all and stays the one owner of the evidence. A cancel reaches every worker through one
control pipe.
"""
import json
import os
import signal
import threading
import traceback

from ._json import _json_text
from ._exchange import Cancel


_CANCEL_MESSAGE = 16  # bytes a cancelled load writes per worker process: the reason, padded


_STARTED_LINE = '0\n'  # the line a worker writes as one of its runs starts (a record is a JSON object)


def _spread_load(shares: list[tuple[int, int]], run_share, on_record, cancel: Cancel, on_started=None,
                 on_run=None) -> None:
    """Fork a worker process per share, each running its share of the units (run_share(share, out, cancel,
    started)) and
    writing each record as one JSON line to its own pipe; call on_record for every line here, one at a
    time, so that this process stays the one owner of the evidence. The clock (perf_counter) is the
    system's monotonic one, shared by the processes, so offsets stay on one schedule. A cancel here
    is written to one control pipe that every worker watches; a worker whose parent is gone cancels
    itself too. Workers ignore SIGINT and SIGTERM: the parent alone decides. A worker writes _STARTED_LINE as
    each of its runs starts, and on_run() is called here for it."""
    control_read, control_write = os.pipe()
    lock, pids, parent_fds = threading.Lock(), [], [control_write]

    def tell(reason: str) -> None:  # at once, so that no worker starts a run after the cancel
        _tell_workers(control_write, reason, len(shares))

    def relay(fd: int) -> None:
        with os.fdopen(fd, 'r', encoding='utf-8', errors='replace') as lines:
            for line in lines:
                if line == _STARTED_LINE:
                    if on_run is not None:
                        with lock:
                            on_run()
                    continue
                try:
                    record = json.loads(line)
                except ValueError:  # cut by the worker's death: that run has no record, and the load says so
                    continue
                with lock:
                    on_record(record)
    cancel.on_cancel(tell)  # before the forks: a worker forked after a cancel finds it waiting in the pipe
    try:
        for share in shares:  # every fork before any thread of this load starts
            record_read, record_write = os.pipe()
            pid = os.fork()
            if pid == 0:  # the worker
                for fd in parent_fds + [record_read]:
                    os.close(fd)
                _worker_process(run_share, share, control_read, record_write)
            os.close(record_write)
            parent_fds.append(record_read)
            pids.append(pid)
        os.close(control_read)
        if on_started is not None:
            on_started()
        readers = [threading.Thread(target=relay, args=(fd,), daemon=True) for fd in parent_fds[1:]]
        for reader in readers:
            reader.start()
        for reader in readers:
            while reader.is_alive():
                reader.join(0.1)  # in short waits, so that signals are handled
    finally:
        cancel.forget(tell)  # before the pipe closes: its descriptor's number may be reused
        os.close(control_write)
    for pid in pids:
        os.waitpid(pid, 0)


def _tell_workers(control: int, reason: str, processes: int) -> None:
    """Write a cancel's reason to the control pipe once for each worker process; a pipe that every worker
    has left already (EPIPE: the load was ending) has nobody to tell."""
    try:
        os.write(control, reason.encode()[:_CANCEL_MESSAGE].ljust(_CANCEL_MESSAGE) * processes)
    except OSError:
        pass


def _worker_process(run_share, share: tuple[int, int], control: int, records: int) -> None:
    """The body of a forked worker: run the share, write its records, exit (never returns)."""
    status = 1
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        cancel = Cancel()

        def watch() -> None:
            reason = os.read(control, _CANCEL_MESSAGE).decode(errors='replace').strip()
            cancel.cancel(reason or 'the end of the process that started the load')
        threading.Thread(target=watch, daemon=True).start()
        with os.fdopen(records, 'w', encoding='utf-8') as out:
            lock = threading.Lock()  # this process's own: the runs' starts and ends may come from threads

            def write(record: dict) -> None:
                with lock:
                    out.write(_json_text(record) + '\n')
                    out.flush()

            def started() -> None:
                with lock:
                    out.write(_STARTED_LINE)
                    out.flush()
            run_share(share, write, cancel, started)
        status = 0
    except BaseException:  # a bug in this client: say so, and let the parent see the status
        traceback.print_exc()
    finally:
        os._exit(status)
