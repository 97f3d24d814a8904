"""The transport's failures, next to the verdict: what the socket, TLS, http.client, the clocks and the
signals saw, which the reader could not, turned into layered ``StreamError``s in one place (as urllib3's
``_error_catcher`` does): a timeout or the overall deadline, a stale kept connection, a plain request to a
TLS port, an interruption. ``judge()`` (``_verdict``) then reads the failure with the reader.
"""
import http.client
import socket
import ssl
import time

from ._limits import _count, _failure, _StaleConnectionError, StreamError
from ._exchange import _Exchange, _Phase


def _interruption(x: _Exchange, signal_name: str | None = None) -> StreamError | None:
    """The failure of a run stopped by a signal (or by its Cancel), or None if it was not."""
    signal_name = signal_name or (x.cancel.reason if x.cancel is not None else None)
    if signal_name is None:
        return None
    return _failure('interrupted', f'{signal_name} during the {x.phase.value} phase '
                                   f'after {_count(x.reader.validator.content_events, "content event")}')


def _interrupted_before_sending(signal_name: str) -> StreamError:
    return _failure('interrupted', f'{signal_name} before the request was sent')


def _exchange_failure(exc: OSError | StreamError, x: _Exchange) -> BaseException:
    """What a failure while the request was sent or the response read means: the signal that shut the
    connection down; the status line, when an error response had begun; a stale kept connection; a plain
    request to a TLS port; or itself."""
    stop = _interruption(x)
    if stop:  # a cancel shuts connections down: not the server's doing
        return stop
    if x.reader.reading_error_body:  # the status line already says what failed; keep what arrived
        return x.reader.status_failure()
    if _closed_while_idle(x, exc):
        return _StaleConnectionError(x.connection.requests, x.idle_s)
    if isinstance(exc, StreamError) and _looks_like_tls(x):
        return StreamError(exc.layer, f'{exc.message}; is this port TLS? try https://', kind=exc.kind)
    return exc


def _closed_while_idle(x: _Exchange, exc: BaseException) -> bool:
    """Whether a reused connection ended (closed or reset) before any response byte: not a timeout, and
    not a failure of a later layer."""
    if not x.reused or x.reader.received or isinstance(exc, TimeoutError):
        return False
    return isinstance(exc, OSError) or exc.layer == 'transport'


def _looks_like_tls(x: _Exchange) -> bool:
    """Whether a plain http request that got no response head reached a TLS port: the server closed
    without a byte (as TLS servers do on a plaintext request), or its bytes start a TLS record."""
    reader = x.reader
    if x.request.scheme != 'http' or reader.head is not None:
        return False
    opening = reader.opening
    return reader.received == 0 or (len(opening) >= 2 and 20 <= opening[0] <= 23 and opening[1] == 3)


def _deadline_failure(x: _Exchange) -> StreamError:
    deadline = f'{x.request.deadline:g} s'
    validator = x.reader.validator
    if x.phase is _Phase.BODY and validator.done:
        return _unended_after_terminal(x, f'the overall deadline of {deadline}')
    return _failure('deadline', f'overall deadline of {deadline} reached during the {x.phase.value} phase '
                                f'after {_count(validator.content_events, "content event")}')


def _unended_after_terminal(x: _Exchange, bound: str) -> StreamError:
    """The terminal event arrived but the HTTP message never ended: a transport failure, whichever bound noticed."""
    return _failure('unended_after_terminal', f'message did not end within {bound} after '
                                              f'{x.reader.validator.terminal}; received {x.reader.body.progress()}')


def _classify(exc: BaseException, x: _Exchange) -> StreamError:
    """Turn an exception from the socket, TLS or http.client into a layered failure."""
    request = x.request
    stop = _interruption(x)
    if stop:
        return stop
    if isinstance(exc, (TimeoutError, socket.timeout)):
        return _timeout_failure(x)
    if isinstance(exc, ssl.SSLCertVerificationError):
        return _failure('certificate_invalid', f'certificate verification failed for {request.host}: '
                                               f'{exc.verify_message or exc.reason}')
    if isinstance(exc, ssl.SSLError):
        hint = '; the answer was not TLS: is this port plain http?' if exc.reason in _NOT_TLS else ''
        return _failure('tls_failed', f'TLS failed with {request.host}: {exc.reason or exc}{hint}')
    if x.phase is _Phase.CONNECT and isinstance(exc, OSError):
        reason = exc.strerror or str(exc) or type(exc).__name__
        hint = '; is the server running, and listening on that port?' if isinstance(exc, ConnectionRefusedError) \
            else ''
        if request.proxy is not None:
            return _failure('proxy_unreachable', f'cannot connect to the proxy {request.proxy.address}: {reason}{hint}')
        return _failure('connect_failed', f'cannot connect to {request.address}: {reason}{hint}')
    if x.phase is _Phase.PROXY and isinstance(exc, OSError):
        return _failure('proxy_tunnel_failed', f'the tunnel through the proxy {request.proxy.address} failed: '
                                               f'{type(exc).__name__}: {exc}')
    if x.phase is _Phase.TLS and isinstance(exc, OSError):
        return _failure('tls_failed', f'TLS handshake with {request.host} failed: {type(exc).__name__}: {exc}')
    if x.phase in (_Phase.REQUEST, _Phase.HEADERS) and isinstance(exc, (OSError, http.client.HTTPException)):
        return _failure('no_response_head', f'no valid response headers: {type(exc).__name__}: {exc}')
    if x.phase is _Phase.BODY and isinstance(exc, OSError):
        received = x.reader.body.received if x.reader.body else 0
        return _failure('connection_failed', f'connection failed after {_count(received, "body byte")}: '
                                             f'{type(exc).__name__}: {exc}')
    return _failure('client_error', f'unexpected {type(exc).__name__} during the {x.phase.value} phase: {exc}')


# OpenSSL's reasons for a handshake answered by something that is not TLS (a plain http server's reply).
_NOT_TLS = frozenset({'WRONG_VERSION_NUMBER', 'RECORD_LAYER_FAILURE', 'PACKET_LENGTH_TOO_LONG', 'UNKNOWN_PROTOCOL',
                      'HTTP_REQUEST', 'UNEXPECTED_RECORD'})


def _timeout_failure(x: _Exchange) -> StreamError:
    request = x.request
    if time.perf_counter() - x.timeline.started >= request.deadline - 0.001:
        return _deadline_failure(x)
    idle = f'{request.idle:g} s'
    if x.phase is _Phase.CONNECT:
        where = f'the proxy {request.proxy.address}' if request.proxy else request.address
        return _failure('connect_timeout', f'no connection to {where} within {idle}')
    if x.phase is _Phase.PROXY:
        return _failure('proxy_timeout', f'no answer to CONNECT from the proxy {request.proxy.address} within {idle}')
    if x.phase is _Phase.TLS:
        return _failure('tls_timeout', f'TLS handshake with {request.host} not finished within {idle}')
    if x.phase is not _Phase.BODY:
        return _failure('headers_timeout', f'no response headers within the idle timeout of {idle}')
    if x.reader.validator.done:
        return _unended_after_terminal(x, f'the idle timeout of {idle}')
    return _failure('idle_timeout', f'no bytes for {idle} (idle timeout) after '
                                    f'{_count(x.reader.validator.content_events, "content event")}')
