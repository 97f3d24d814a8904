"""One run on the engine (_runs) as a state machine: connect, send, read, judge, record.

``_Machine`` takes each step when the engine says that its socket is ready,
its timer has run out or its blocking step has ended, by the rules of a single
run: the same reads (``_take_read()``, ``_read_over()``), the same failures,
classified by the same code (``_transport._run``). ``_Job`` is what holds an
engine's slot: a generator of the requests to send and the think times to wait.
"""
import contextlib
import errno
import os
import select
import socket
import ssl
import time

from ._limits import _READ_SIZE, StreamError
from ._exchange import _Connection, _Exchange, KeptConnections, _Phase, _recv_stamped, _recv_unstamped
from ._failures import _classify, _exchange_failure, _interrupted_before_sending, _interruption
from ._request import PreparedRequest
from ._record import _build_record, _client_failure, _source
from ._transport import (_check_plain_peer, _connect, _cross_check, _read_over, _reusable, _reuse, _take_read,
                         _wait)

_IN_PROGRESS = (0, errno.EINPROGRESS, errno.EAGAIN)


def _receive_unstamped(connection: _Connection) -> tuple[bytes, None]:
    """What a ready non-blocking connection without the kernel's stamps holds: one recv(), and for TLS
    the rest of the record that OpenSSL has already decrypted, which the epoll set cannot see."""
    raw, _ = _recv_unstamped(connection)
    if raw and isinstance(connection.sock, ssl.SSLSocket):
        while connection.sock.pending():
            raw += connection.sock.recv(_READ_SIZE)
    return raw, None


def _connected_at_once(sock: socket.socket) -> bool:
    """Whether a non-blocking connect has already completed (it has a peer)."""
    try:
        sock.getpeername()
    except OSError:
        return False
    return True


class _Job:
    """What holds a slot of the engine: a generator of steps (a PreparedRequest to send, or seconds to think;
    it is sent each run's record, and after a think whether the load goes on), and the slot's kept
    connections (None without keep-alive)."""

    __slots__ = ('steps', 'kept')

    def __init__(self, steps, kept: KeptConnections | None) -> None:
        self.steps, self.kept = steps, kept


class _Machine:
    """One run on the engine, from its start to its record: connect (or take a kept connection), send, read
    until the response ends, then its record. Each step runs in the engine's thread when the run's socket is
    ready (``wake``, or a read while ``reading``) or its blocking step has ended; a step that raises fails
    the run as run() would classify the failure (_transport._run)."""

    __slots__ = ('engine', 'job', 'request', 'kept', 'x', 'connection', 'sock', 'fd', 'events', 'wake', 'reading',
                 'receive', 'last', 'deadline_at', 'timer', 'exchanging', 'ending', 'over', 'wire', 'sent')

    def __init__(self, engine: '_Engine', job: _Job,  # noqa: F821 -- _runs defines it, a layer above
                 request: PreparedRequest) -> None:
        self.engine, self.job, self.request = engine, job, request
        self.kept = job.kept  # the KeptConnections of the slot it runs in (or None)
        self.x: _Exchange | None = None
        self.connection = None
        self.sock: socket.socket | None = None  # the socket it owns, once it has one
        self.fd = -1                            # the descriptor it is watched by (-1: none)
        self.events = 0                         # the epoll events it waits for
        self.wake = None                        # the step to take when its socket is writable
        self.reading = False
        self.receive = None
        self.last = 0.0                         # when its latest step or read began (the idle timeout runs from it)
        self.deadline_at = 0.0
        self.timer = 0                          # the token of its entry in the engine's timers (0: none)
        self.exchanging = False                 # failures pass through _exchange_failure, as in _exchange()
        self.ending = self.over = False
        self.wire = b''
        self.sent = 0

    def due_at(self) -> float:
        """When the idle timeout, cut to the deadline, runs out."""
        return min(self.last + self.request.idle, self.deadline_at)

    def start(self) -> None:
        engine, request = self.engine, self.request
        x = self.x = _Exchange(request, None, engine.cancel)
        x.timeline.start()
        self.deadline_at = x.timeline.started + request.deadline
        if engine.broken is not None:
            raise engine.broken
        if engine.cancel.reason is not None:  # cancelled as it was due
            raise _interrupted_before_sending(engine.cancel.reason)
        connection = self.kept.take(request.origin) if self.kept is not None else None
        if connection is not None:
            _reuse(x, connection)
            self.use(connection)
            return
        address = engine.numeric_address(request)
        if address is None:  # a name to look up, a proxy or TLS: a blocking step
            engine.block(self, _connect, self.use, x)
        else:
            self.connect(address)

    def connect(self, address: tuple) -> None:
        """A non-blocking TCP connect to a numeric address (plain http, no proxy)."""
        x = self.x
        stop = _interruption(x)
        if stop:
            raise stop
        _wait(x)  # the deadline
        self.last = time.perf_counter()
        family, kind, proto, _, where = address
        self.sock = socket.socket(family, kind, proto)
        self.sock.setblocking(False)
        self.engine.cancel.attach(self.sock)
        status = self.sock.connect_ex(where)
        if status not in _IN_PROGRESS:
            raise OSError(status, os.strerror(status))
        if _connected_at_once(self.sock):  # loopback connects within the call: the request goes out now
            self.connected()
        else:
            self.engine.watch(self, select.EPOLLOUT, self.connected)

    def connected(self) -> None:
        status = self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if status:
            raise OSError(status, os.strerror(status))
        connection = _Connection(self.sock)
        _check_plain_peer(connection, self.request)
        self.use(connection)

    def use(self, connection) -> None:
        """Send the request on the connection (a new one, or one kept from an earlier run)."""
        x = self.x
        self.sock = connection.sock
        x.connection = self.connection = connection
        connection.requests += 1
        if self.sock.gettimeout() != 0.0:
            self.sock.setblocking(False)
        self.exchanging = True
        x.phase = _Phase.REQUEST
        _wait(x)  # the deadline
        self.last = time.perf_counter()
        self.wire = self.request.wire
        self.send()

    def send(self) -> None:
        with contextlib.suppress(BlockingIOError, ssl.SSLWantWriteError):
            self.sent += self.sock.send(memoryview(self.wire)[self.sent:] if self.sent else self.wire)
        if self.sent < len(self.wire):
            self.engine.watch(self, select.EPOLLOUT, self.send)
            return
        self.wire = b''
        self.read_response()

    def read_response(self) -> None:
        """The request is sent: wait for the response's reads (see _Engine._pass), under the idle timeout."""
        self.x.phase = _Phase.HEADERS
        self.reading, self.last = True, time.perf_counter()
        self.receive = _recv_stamped if self.connection.kernel_stamps else _receive_unstamped
        self.engine.watch(self, select.EPOLLIN, None)

    def take(self, raw: bytes | Exception, returned: float, kernel_ns: int | None, wall_offset_ns: int) -> None:
        """One read of the response, stamped when it returned: fed to the reader; the run ends with the response."""
        if isinstance(raw, Exception):
            raise raw
        _take_read(self.x, raw, returned, kernel_ns, wall_offset_ns)
        if _read_over(self.x, raw):
            self.end()

    def fail(self, exc: Exception) -> None:
        """End the run with the failure that exc means (see _transport._run)."""
        x = self.x
        if x is None:  # not even its exchange could be built: a bug in this client
            self.engine.ended(self, _client_failure(self.request, exc, 'during the run'))
            return
        if self.exchanging and isinstance(exc, (OSError, StreamError)):
            exc = _exchange_failure(exc, x)
        x.fail(exc if isinstance(exc, StreamError) else _classify(exc, x))
        self.end()

    def end(self) -> None:
        """Let the connection go (kept for the slot's next run when the response allows it), then the record;
        with a twin to send (--cross-check), after it."""
        self.ending = True
        x, connection, sock = self.x, self.connection, self.sock
        self.engine.unwatch(self, keep_registered=self.kept is not None)
        if sock is not None:
            self.engine.cancel.detach(sock)
        if connection is not None:
            if x.reader.head is not None:
                connection.source = _source(x.reader.head, self.request.source)
            if self.kept is not None and _reusable(x):
                self.engine.rest(connection.sock)
                self.kept.keep(self.request.origin, connection)
            else:
                connection.sock.close()
        elif sock is not None:
            sock.close()
        if x.timeline.ended is None:  # not ended by the message's last bytes
            x.timeline.ended = time.perf_counter()
        if self.request.twin is not None:
            self.engine.block(self, _cross_check, self.checked, x, self.engine.cancel)
        else:
            self.record()

    def checked(self, cross_check: dict) -> None:
        self.x.cross_check = cross_check
        self.record()

    def record(self) -> None:
        try:
            record = _build_record(self.x)
        except Exception as exc:  # a bug in this client: the run still has its record
            record = _client_failure(self.request, exc, 'during the run')
        self.engine.ended(self, record)

    def crash(self, exc: BaseException) -> None:
        """End the run at once with a bug of this client's: its socket closed, a client_error record."""
        if self.over:
            return
        if not self.ending:  # else end() has let its connection go
            with contextlib.suppress(Exception):
                self.engine.unwatch(self)
            for sock in {self.sock, self.connection.sock if self.connection is not None else None} - {None}:
                self.engine.cancel.detach(sock)
                sock.close()
        self.engine.ended(self, _client_failure(self.request, exc, 'during the run'))
