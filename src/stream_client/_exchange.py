"""What one run owns while it runs: its phase, its timeline, its connection and its cancel.

``_Exchange`` is what a run saw; ``_Timeline`` keeps its stamps, the kernel's
times of arrival where Linux gives them; ``KeptConnections`` keeps
connections between runs; ``Cancel`` stops runs on a signal.
"""
import enum
import os
import socket
import ssl
import struct
import sys
import threading
import time

from ._limits import _host_port, _READ_SIZE, _STAMP_SLACK, StreamError
from ._validator import Pieces
from ._reader import Capture, ResponseReader
from ._request import PreparedRequest


class _Phase(enum.Enum):
    """The part of the exchange a run is in; failures name it."""

    CONNECT = 'connect'
    PROXY = 'proxy CONNECT'
    TLS = 'TLS handshake'
    REQUEST = 'request'
    HEADERS = 'headers'
    BODY = 'body'


class _Timeline:
    """Monotonic stamps of one run, taken only by the transport, and how the text was delivered."""

    def __init__(self) -> None:
        self.start()
        self.latest: float | None = None     # the latest stamp of a read
        self.stamped_reads = 0               # reads that carried bytes
        self.kernel_stamped_reads = 0        # ... and that the kernel stamped (see arrival())
        self.headers_at: float | None = None
        self.first_event_at: float | None = None
        self.first_text_at: float | None = None
        self.first_reasoning_at: float | None = None
        self.last_text_at: float | None = None
        self.ended: float | None = None
        self.gaps: list[float] = []
        self.content_reads = 0               # reads that carried visible text
        self.max_content_events_per_read = 0

    def start(self) -> None:
        """Start the clock: run() calls this just before it opens the connection."""
        self.started_wall = time.time()
        self.started = time.perf_counter()

    def ms(self, at: float | None) -> float | None:
        return None if at is None else round((at - self.started) * 1000, 3)

    def arrival(self, returned: float, kernel_ns: int | None, wall_offset_ns: int) -> float:
        """When a read's bytes arrived: the kernel's stamp of its last bytes (nanoseconds on the wall clock,
        which is ``wall_offset_ns`` ahead of the monotonic one), if it falls between the latest stamp (or
        the start) and the read's return; else, or without one, the read's return. A stamp outside by
        more than _STAMP_SLACK is the wall clock's step between the arrival and the read, and is not taken."""
        self.stamped_reads += 1
        earliest = self.started if self.latest is None else self.latest
        at = returned
        if kernel_ns is not None:
            stamped = (kernel_ns - wall_offset_ns) / 1e9
            if earliest - _STAMP_SLACK <= stamped <= returned + _STAMP_SLACK:
                self.kernel_stamped_reads += 1
                at = min(returned, max(earliest, stamped))
        self.latest = at
        return at

    @property
    def read_stamps(self) -> str | None:
        """Who stamped the reads: 'kernel' for every one, else 'client'; None when none carried bytes."""
        if not self.stamped_reads:
            return None
        return 'kernel' if self.kernel_stamped_reads == self.stamped_reads else 'client'

    def note_read(self, at: float, pieces: list[Pieces]) -> None:
        """Stamp the events of one read, which all arrived at ``at``: the first event, first text (a
        tool call's name and arguments count as the answer's text) and first reasoning, the gaps
        between content events, and how many content events the read carried."""
        texts = 0
        for text, reasoning, call in pieces:
            if self.first_event_at is None:
                self.first_event_at = at
            if text or call:
                texts += 1
                if self.first_text_at is None:
                    self.first_text_at = at
                else:
                    self.gaps.append(at - self.last_text_at)
                self.last_text_at = at
            if reasoning and self.first_reasoning_at is None:
                self.first_reasoning_at = at
        if texts:
            self.content_reads += 1
            if texts > self.max_content_events_per_read:
                self.max_content_events_per_read = texts


class Cancel:
    """Lets another thread stop runs in flight: cancel() shuts down their connections, and each of
    those runs records an interrupted failure. Shared by the runs of one load; safe in threads."""

    def __init__(self) -> None:
        self._lock = threading.RLock()  # a signal handler that cancels may run in a thread that holds it
        self._sockets: set[socket.socket] = set()
        self._hooks: list = []
        self.reason: str | None = None  # the signal that cancelled, once it did

    def cancel(self, reason: str) -> None:
        with self._lock:
            hooks = list(self._hooks) if self.reason is None else []
            self.reason = self.reason or reason
            sockets = list(self._sockets)
        for sock in sockets:
            _shut(sock)
        for hook in hooks:
            hook(self.reason)

    def on_cancel(self, hook) -> None:
        """Call hook(reason) when the cancel comes, in the thread that cancels (at once if it has come)."""
        with self._lock:
            self._hooks.append(hook)
            reason = self.reason
        if reason is not None:
            hook(reason)

    def forget(self, hook) -> None:
        with self._lock:
            self._hooks.remove(hook)

    def attach(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.add(sock)
            cancelled = self.reason is not None
        if cancelled:
            _shut(sock)

    def detach(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.discard(sock)


def _shut(sock: socket.socket) -> None:
    """Shut a connection down so that a read blocked on it returns; the plain socket's method, so that
    no TLS state is touched from this thread."""
    try:
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError:
        pass


class _Connection:
    """An open connection: its socket, the address it really reached, and how often it has been used."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        host, port = sock.getpeername()[:2]
        self.peer = _host_port(host, port)
        self.peer_ip = host
        self.local_port = sock.getsockname()[1]
        self.kernel_stamps = _ask_kernel_stamps(sock)  # its reads come with the kernel's arrival stamps
        self.requests = 0                     # requests sent on it so far
        self.idle_since: float | None = None  # monotonic time at which its last response ended
        self.source: str | None = None        # who answered on it (see _source), once a response head came
        self.incomplete_close = False         # TLS: it ended without close_notify (see _recv_unstamped)


# SO_TIMESTAMPNS, which Python's socket module does not name: 35 in the asm-generic socket options, which these
# Linux architectures use (others, such as MIPS and SPARC, number it differently and go without).
_SO_TIMESTAMPNS = 35 if sys.platform.startswith('linux') and os.uname().machine in (
    'x86_64', 'i386', 'i686', 'aarch64', 'arm64', 'armv7l', 'armv6l', 'riscv64') else None
_TIMESPEC = struct.Struct('ll')  # the stamp: struct timespec, seconds and nanoseconds
_STAMP_SPACE = socket.CMSG_SPACE(_TIMESPEC.size) if hasattr(socket, 'CMSG_SPACE') else 0


def _ask_kernel_stamps(sock: socket.socket) -> bool:
    """Ask Linux to stamp each read of a plain TCP connection with when its last bytes arrived, so that a
    busy client does not delay its own timestamps; whether it will. Not for TLS: OpenSSL does its reads."""
    if _SO_TIMESTAMPNS is None or type(sock) is not socket.socket or sock.family not in (socket.AF_INET,
                                                                                         socket.AF_INET6):
        return False
    try:
        sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
    except OSError:
        return False
    return True


def _recv_stamped(connection: '_Connection') -> tuple[bytes, int | None]:
    """One recv() of a plain connection that asked for kernel stamps, and the stamp of when its last
    bytes arrived, in nanoseconds on the wall clock (None when the kernel sent none, as at the end of file)."""
    raw, ancillary, _, _ = connection.sock.recvmsg(_READ_SIZE, _STAMP_SPACE)
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == _SO_TIMESTAMPNS and len(data) == _TIMESPEC.size:
            seconds, nanoseconds = _TIMESPEC.unpack(data)
            return raw, seconds * 1_000_000_000 + nanoseconds
    return raw, None


def _recv_unstamped(connection: '_Connection') -> tuple[bytes, None]:
    """One recv(). A TLS connection that ends without close_notify (an incomplete close) ends as b'' too,
    and the connection keeps that fact for the reader (RFC 9112, 9.8)."""
    try:
        return connection.sock.recv(_READ_SIZE), None
    except ssl.SSLEOFError:
        connection.incomplete_close = True
        return b'', None


def _stray_bytes(sock: socket.socket) -> bool:
    """Whether bytes wait on an idle plain connection (not an end of file), peeked at without waiting
    (select() cannot watch a descriptor above 1,023). Not asked of TLS, whose post-handshake records
    make a socket readable. The next use of the socket sets its timeout again."""
    if isinstance(sock, ssl.SSLSocket):
        return False
    if sock.gettimeout() != 0.0:  # a load's engine leaves it non-blocking: no system call to say so again
        sock.setblocking(False)
    try:
        return bool(sock.recv(1, socket.MSG_PEEK))
    except BlockingIOError:  # nothing waits
        return False
    except OSError:  # reset while idle: the run reports it as a stale connection
        return False


class KeptConnections:
    """The connections one worker keeps alive between its runs (--keep-alive), one per origin. Used by one
    thread at a time."""

    def __init__(self) -> None:
        self._by_origin: dict[tuple, _Connection] = {}

    def take(self, origin: tuple) -> _Connection | None:
        """The connection kept to this origin, unless bytes arrived on it while it was idle: they answer no
        request, and RFC 9112 (6.3) forbids reading them as the next response, so it is closed and a new
        one is used. One the server closed while idle is taken: the run reports a stale connection."""
        connection = self._by_origin.pop(origin, None)
        if connection is not None and _stray_bytes(connection.sock):
            connection.sock.close()
            return None
        return connection

    def keep(self, origin: tuple, connection: _Connection) -> None:
        connection.idle_since = time.monotonic()
        self._by_origin[origin] = connection

    def close(self) -> None:
        for connection in self._by_origin.values():
            connection.sock.close()
        self._by_origin.clear()


class _Exchange:
    """What one run saw: the timeline, owned by the transport, and the response reader, which owns the
    head, the body framing, the events and the answer. ``failure`` is the first failure, whichever
    layer it came from."""

    def __init__(self, request: PreparedRequest, capture: Capture | None = None,
                 cancel: Cancel | None = None) -> None:
        self.request = request
        self.cancel = cancel
        self.timeline = _Timeline()
        self.phase = _Phase.CONNECT
        self.reader = ResponseReader(request.new_validator(), capture)
        self.failure: StreamError | None = None
        self.connection: _Connection | None = None
        self.reused = False            # the connection was kept from an earlier run
        self.idle_s: float | None = None  # how long a reused connection had been idle
        self.cross_check: dict | None = None  # --cross-check: the unstreamed twin and the comparison

    def fail(self, error: StreamError) -> None:
        if self.failure is None:
            self.failure = error
