"""Transport: one request, read under the idle timeout and the overall deadline.

``run()`` connects, sends, and is the socket loop around a ``ResponseReader``;
with ``--cross-check`` it then sends the unstreamed twin. ``stream()`` is the
guide's one-call interface.
"""
import dataclasses
import encodings.idna  # noqa: F401 -- the first connect() of a process needs it; imported here, not in the timed run
import ipaddress
import socket
import struct
import sys
import time
import typing

from ._limits import _count, _failure, Interrupted, _READ_SIZE, StreamError
from ._validator import Pieces
from ._answer import _budget_proof_wanted, cross_check_record, _streamed_answer
from ._http import _ResponseHeadParser
from ._reader import Capture, UnstreamedReader
from ._request import prepare, PreparedRequest, _twin_with_budget
from ._exchange import (
    Cancel, _Connection, _Exchange, KeptConnections, _Phase, _recv_stamped, _recv_unstamped)
from ._verdict import compare_twin
from ._failures import _classify, _deadline_failure, _exchange_failure, _interrupted_before_sending, _interruption
from ._record import _build_record, _source


def stream(url: str, model: str, prompt: str, *, max_tokens: int = 128, idle: float = 10.0,
           deadline: float = 60.0, ca_file: str | None = None, token: str | None = None,
           on_text=None, on_reasoning=None, on_call=None, **options) -> dict:
    """Stream one answer and return its evidence record.

    Invalid arguments raise ValueError before any connection. Everything that
    goes wrong afterwards is reported in the record, never raised; Ctrl+C
    raises Interrupted, which carries the record so far.
    ``on_text(text)`` and ``on_reasoning(text)`` are called with each piece of
    answer and reasoning text as it arrives, and ``on_call(piece)`` with each
    piece of a tool call (its name and "(" as it opens, then its arguments).
    ``options`` are prepare()'s: system, temperature, stop, extra, api,
    expect_finish, tools, tool_choice, json_schema, cross_check, dialect.
    """
    request = prepare(url, model, prompt, max_tokens=max_tokens, idle=idle,
                      deadline=deadline, ca_file=ca_file, token=token, **options)
    return run(request, on_text=on_text, on_reasoning=on_reasoning, on_call=on_call)


class _Show(typing.NamedTuple):
    """Who is shown the answer as it arrives: callbacks for text, reasoning and tool-call pieces."""

    text: typing.Callable | None = None
    reasoning: typing.Callable | None = None
    call: typing.Callable | None = None


def run(request: PreparedRequest, *, on_text=None, on_reasoning=None, on_call=None,
        capture: Capture | None = None, cancel: Cancel | None = None, kept: KeptConnections | None = None) -> dict:
    """Perform a prepared request; return the record (see stream()).

    Safe to call from many threads at once. When ``capture`` is given, the
    raw response is kept in it (see Capture). A ``cancel`` shared with
    other runs lets another thread interrupt this one. With ``kept`` (one
    per worker), a connection kept from an earlier run to the same origin
    is reused, and this run's connection is kept if its response ended
    cleanly on a framing that lets the connection go on. A request built
    with ``cross_check`` then sends its unstreamed twin on a connection of
    its own, and the record's ``cross_check`` compares the two answers.
    """
    return _run(request, _Show(on_text, on_reasoning, on_call), capture, cancel, kept)


def _run(request: PreparedRequest, show: _Show, capture: Capture | None, cancel: Cancel | None,
         kept: KeptConnections | None) -> dict:
    """run(), blocking in the thread that calls it (a load's runs are the engine's: _runs)."""
    x = _Exchange(request, capture, cancel)
    interrupted, connection = None, None
    try:
        x.timeline.start()
        if cancel is not None and cancel.reason is not None:  # a load's run taken up just before its cancel
            raise _interrupted_before_sending(cancel.reason)
        connection = kept.take(request.origin) if kept is not None else None
        if connection is None:
            connection = _connect(x)
        else:
            _reuse(x, connection)
        x.connection = connection
        connection.requests += 1
        _exchange(connection, x, show)
    except StreamError as exc:
        x.fail(exc)
    except KeyboardInterrupt as exc:
        interrupted = getattr(exc, 'signal_name', 'SIGINT')
        x.fail(_interruption(x, interrupted))
    except Exception as exc:  # a server must never crash the run: keep the evidence
        x.fail(_classify(exc, x))
    finally:
        if connection is not None:
            if x.reader.head is not None:
                connection.source = _source(x.reader.head, request.source)
            if cancel is not None:
                cancel.detach(connection.sock)
            if kept is not None and interrupted is None and _reusable(x):
                kept.keep(request.origin, connection)
            else:
                connection.sock.close()
        if x.timeline.ended is None:  # not ended by the message's last bytes
            x.timeline.ended = time.perf_counter()
    if request.twin is not None and interrupted is None:
        twin_started = time.perf_counter()
        try:
            x.cross_check = _cross_check(x, cancel)
        except KeyboardInterrupt as exc:
            interrupted = getattr(exc, 'signal_name', 'SIGINT')
            x.cross_check = {**cross_check_record(_streamed_answer(x.reader.validator), None, None,
                                                  f'interrupted by {interrupted} during the unstreamed request'),
                             **_twin_stamps(x, twin_started)}
    record = _build_record(x)
    if interrupted:
        raise Interrupted(interrupted, record)
    return record


def _cross_check(x: _Exchange, cancel: Cancel | None) -> dict:
    """Send the unstreamed twin of a streamed run that got an answer with status 200, and compare."""
    if x.reader.head is None or x.reader.head.status != 200:
        return {**compare_twin(x.reader, None, x.request), 'unstreamed_started_ms': None, 'unstreamed_ended_ms': None}
    started = time.perf_counter()
    budget = _budget_proof_wanted(x.reader.validator)  # the whole budget used by a call: one token more
    request = _twin_with_budget(x.request.twin, budget) if budget is not None else x.request.twin
    twin = _fetch_unstreamed(_twin_exchange(x, request, cancel))
    return {**compare_twin(x.reader, twin, x.request, budget), **_twin_stamps(x, started)}


def _twin_exchange(x: _Exchange, request: PreparedRequest, cancel: Cancel | None) -> _Exchange:
    """The twin's exchange, inside the run's bounds: the run's idle timeout and deadline (which a caller such
    as the exporter may have cut) on the run's own clock, so that --deadline bounds the pair as a whole."""
    twin = _Exchange(dataclasses.replace(request, idle=x.request.idle, deadline=x.request.deadline),
                     cancel=cancel)
    twin.timeline = x.timeline
    return twin


def _twin_stamps(x: _Exchange, started: float) -> dict:
    """When the twin began (``started``, before its connection) and ended, in ms on the run's clock (from
    before the streamed request's connection), as the record's other stamps are."""
    return {'unstreamed_started_ms': x.timeline.ms(started), 'unstreamed_ended_ms': x.timeline.ms(time.perf_counter())}


def _fetch_unstreamed(x: _Exchange) -> UnstreamedReader:
    """Send an unstreamed request on a connection of its own and read its whole response, under the time
    bounds of the exchange's clock (a twin's is its run's); a failure ends up as the reader's error."""
    reader, connection = UnstreamedReader(), None
    try:
        connection = _connect(x)
        x.phase = _Phase.REQUEST
        connection.sock.settimeout(_wait(x))
        connection.sock.sendall(x.request.wire)
        x.phase = _Phase.HEADERS
        while not reader.complete:
            connection.sock.settimeout(_wait(x))
            raw, _ = _recv_unstamped(connection)
            if not raw:
                stop = _interruption(x)
                if stop:
                    raise stop
                reader.eof(connection.incomplete_close)
                break
            reader.feed(raw)
            x.phase = _Phase.BODY if reader.head is not None else x.phase
    except StreamError as exc:
        reader.error = reader.error or exc
    except Exception as exc:  # as in run(): keep the evidence
        reader.error = reader.error or _classify(exc, x)
    finally:
        if connection is not None:
            if x.cancel is not None:
                x.cancel.detach(connection.sock)
            connection.sock.close()
    return reader


def _connect(x: _Exchange) -> _Connection:
    """The TCP connection (to the proxy, when one is used, then a tunnel through it) and, for https,
    the TLS handshake, each step under the idle timeout cut to the deadline."""
    request, proxy = x.request, x.request.proxy
    stop = _interruption(x)
    if stop:
        raise stop
    sock = socket.create_connection((proxy.host, proxy.port) if proxy else (request.host, request.port),
                                    timeout=_wait(x))
    if x.cancel is not None:
        x.cancel.attach(sock)
    try:
        if proxy is not None:
            x.phase = _Phase.PROXY
            _open_tunnel(sock, x)
        if request.scheme == 'http':
            connection = _Connection(sock)
            _check_plain_peer(connection, request)
            return connection
        x.phase = _Phase.TLS
        sock.settimeout(_wait(x))
        tls = request.ssl_context.wrap_socket(sock, server_hostname=request.host,
                                              suppress_ragged_eofs=False)  # see _recv_unstamped
    except BaseException:
        if x.cancel is not None:
            x.cancel.detach(sock)
        sock.close()
        raise
    if x.cancel is not None:  # the TLS socket took over the connection
        x.cancel.detach(sock)
        x.cancel.attach(tls)
    return _Connection(tls)


def _check_plain_peer(connection: _Connection, request: PreparedRequest) -> None:
    """Plain http only to loopback, judged by the address really connected to, not by the name."""
    if not ipaddress.ip_address(connection.peer_ip.partition('%')[0]).is_loopback:
        raise _failure('not_loopback', f'plain http is allowed only to loopback addresses, but {request.host} '
                                       f'connected to {connection.peer}; nothing was sent')


def _open_tunnel(sock: socket.socket, x: _Exchange) -> None:
    """CONNECT through the proxy to the origin (RFC 9110, 9.3.6); StreamError('proxy') unless it answers 2xx."""
    request, proxy = x.request, x.request.proxy
    sock.settimeout(_wait(x))
    sock.sendall(proxy.connect_request(request.host, request.port))
    heads = _ResponseHeadParser()
    head = None
    while head is None:
        sock.settimeout(_wait(x))
        raw = sock.recv(_READ_SIZE)
        if not raw:
            raise _failure('proxy_closed', f'the proxy {proxy.address} closed the connection before answering CONNECT '
                                           f'{request.address}')
        try:
            head = heads.feed(raw)
        except StreamError as exc:
            raise _failure('proxy_bad_answer', f'the proxy {proxy.address} answered CONNECT with '
                                               f'{exc.message}') from None
    if not 200 <= head.status < 300:
        raise _failure('proxy_refused', f'the proxy {proxy.address} refused the tunnel to {request.address}: '
                                        f'{head.status} {head.reason}'.rstrip())
    if heads.rest:
        raise _failure('proxy_extra_bytes', f'the proxy {proxy.address} sent {_count(len(heads.rest), "byte")} '
                                            'after its 2xx to CONNECT, before the tunnel was used')


def _reuse(x: _Exchange, connection: _Connection) -> None:
    """Take up a kept connection: the clock starts now, as the request goes out on it."""
    x.reused, x.idle_s = True, time.monotonic() - connection.idle_since
    if x.cancel is not None:
        x.cancel.attach(connection.sock)


def _reusable(x: _Exchange) -> bool:
    """Whether a connection may carry the next request: its response ended cleanly on a framing that says
    where it ends (Content-Length, or chunked and read to its last chunk), in HTTP/1.1, without
    Connection: close, and nothing went wrong below the event stream."""
    head, body, failure = x.reader.head, x.reader.body, x.failure
    if failure is not None and failure.layer not in ('http', 'sse', 'protocol', 'application'):
        return False
    return (head is not None and body is not None and body.complete and body.framing != 'close'
            and not body.overrun and head.version == '1.1' and 'close' not in head.field_list('Connection'))


def _exchange(connection: _Connection, x: _Exchange, show: _Show) -> None:
    try:
        x.phase = _Phase.REQUEST
        connection.sock.settimeout(_wait(x))
        connection.sock.sendall(x.request.wire)
        x.phase = _Phase.HEADERS
        _read_response(connection, x, show)
    except (OSError, StreamError) as exc:
        raise _exchange_failure(exc, x) from None


def _read_response(connection: _Connection, x: _Exchange, show: _Show) -> None:
    """Feed the reader until the HTTP message ends or the connection closes, under both time bounds.

    Every event of one read gets the read's one stamp (see _Timeline.arrival), so events that arrived
    together are 0 ms apart.
    """
    on_text, on_reasoning, on_call = show
    showing = any(show)  # a load shows nothing: no second pass over its events
    receive = _receiver(connection, x)
    while True:
        raw, kernel_ns = receive()
        pieces = _take_read(x, raw, time.perf_counter(), kernel_ns)
        if pieces and showing:
            for text, reasoning, call in pieces:
                if text and on_text:
                    on_text(text)
                if reasoning and on_reasoning:
                    on_reasoning(reasoning)
                if call and on_call:
                    on_call(call)
        if _read_over(x, raw):
            return


def _take_read(x: _Exchange, raw: bytes, returned: float, kernel_ns: int | None = None,
               wall_offset_ns: int | None = None) -> list[Pieces]:
    """One read's bytes (b'' at the end of the connection), which returned at ``returned`` (with the
    kernel's stamp of their arrival, when it gave one, and how far the wall clock is ahead of the
    monotonic one, if the caller already knows), into the exchange: fed to the reader and stamped
    on the timeline; returns their pieces. Raises what a read alone shows: a signal, the deadline passed,
    or the reader's failure at the end of the connection."""
    reader, timeline = x.reader, x.timeline
    if not raw:
        stop = _interruption(x)
        if stop:
            raise stop
        reader.eof(x.connection is not None and x.connection.incomplete_close)
        return []
    if returned > timeline.started + x.request.deadline:
        raise _deadline_failure(x)
    if kernel_ns is None:
        wall_offset_ns = 0
    elif wall_offset_ns is None:
        wall_offset_ns = time.time_ns() - time.perf_counter_ns()
    at = timeline.arrival(returned, kernel_ns, wall_offset_ns)
    pieces = reader.feed(raw)
    if timeline.headers_at is None and x.phase is _Phase.HEADERS and reader.head is not None:  # the first time only
        timeline.headers_at = at
        x.phase = _Phase.BODY
    if pieces:
        timeline.note_read(at, pieces)
    if reader.message_complete:
        timeline.ended = at
    return pieces


def _read_over(x: _Exchange, raw: bytes) -> bool:
    """Whether the response has been read to its end after this read, taken by _take_read(): the message
    ended (_take_read stamped its end), or the connection did (judge() reads how each layer ended). Raises
    the reader's failure."""
    if x.reader.error is not None:
        raise x.reader.error
    return not raw or x.timeline.ended is not None


def _receiver(connection: _Connection, x: _Exchange):
    """A function that reads the next bytes under the idle timeout cut to the deadline (TimeoutError), and
    returns them with the kernel's stamp of their arrival (None without one: see _recv_stamped).

    A plain socket on Linux waits in the kernel, under SO_RCVTIMEO, so that each read is one system
    call: with a Python timeout, every recv() is a poll() and a recv(). Other sockets (TLS) keep
    Python's timeout."""
    sock = connection.sock
    if type(sock) is not socket.socket or not sys.platform.startswith('linux'):
        def receive() -> tuple[bytes, None]:
            sock.settimeout(_wait(x))
            return _recv_unstamped(connection)
        return receive
    sock.settimeout(None)
    armed = [-1.0]  # the SO_RCVTIMEO in force, in seconds
    read = _recv_stamped if connection.kernel_stamps else _recv_unstamped

    def receive() -> tuple[bytes, int | None]:
        wait = _wait(x)
        if wait < armed[0] - 0.001 or armed[0] < 0:
            seconds = max(wait, 0.001)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO,
                            struct.pack('ll', int(seconds), int(seconds % 1 * 1_000_000)))
            armed[0] = seconds
        try:
            return read(connection)
        except BlockingIOError:  # SO_RCVTIMEO ran out
            raise TimeoutError('timed out') from None
    return receive


def _wait(x: _Exchange) -> float:
    """The socket timeout for the next operation: the idle timeout, cut to the deadline."""
    remaining = x.request.deadline - (time.perf_counter() - x.timeline.started)
    if remaining <= 0:
        raise _deadline_failure(x)
    return min(x.request.idle, remaining)
