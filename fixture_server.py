"""Synthetic chat-completions server for testing streaming clients on loopback.

It contains no model and no GPU code: every mode replays fixed bytes, paced by
--delay, so each way a stream can end (complete, cut short, malformed, held
open...) can be reproduced on demand. Only 127.0.0.1 is ever bound.
"""
from __future__ import annotations

import argparse
import json
import select
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MAX_REQUEST_BYTES = 65_536
HOLD_LIMIT = 60.0          # seconds a held-open response waits for the client to leave
MISSING_BYTES = 64         # how far a truncated Content-Length body falls short


class GuideProfile:
    """The bytes of the guide's fixture: CRLF events, Content-Length framing."""

    framing = 'content-length'

    def event(self, delta: dict | None = None, reason: str | None = None) -> bytes:
        chunk = {'choices': [{'index': 0, 'delta': delta or {}, 'finish_reason': reason}]}
        return ('data: ' + json.dumps(chunk, ensure_ascii=False) + '\r\n\r\n').encode()

    def opening(self) -> list[bytes]:
        """Everything before the finish event: a comment, the role, two content events."""
        return [b': synthetic keepalive\r\n\r\n', self.event({'role': 'assistant'}),
                self.event({'content': 'READY '}), self.event({'content': '\u2713'})]

    def closing(self, reason: str) -> list[bytes]:
        """The finish event, the usage event and [DONE]."""
        return [self.event(reason=reason),
                b'data: {"choices": [], "usage": {"completion_tokens": 3}}\n\n',
                b'data: [DONE]\n\n']


class Plan:
    """What one response sends: its status, body pieces (one write each) and how it ends."""

    def __init__(self, writes: list[bytes] = (), *, status: int = 200, complete: bool = True,
                 hold: bool = False) -> None:
        self.writes = list(writes)
        self.status = status
        self.complete = complete   # False: the framing promises more than is sent
        self.hold = hold           # True: keep the connection open afterwards instead of closing


def _unterminated(profile) -> Plan:
    *events, done = profile.closing('stop')
    return Plan(profile.opening() + events + [done.rstrip(b'\r\n') + b'\n'])


# Each mode maps a profile to a plan. Add a mode by adding a line.
MODES = {
    'ok': lambda p: Plan(p.opening() + p.closing('stop')),
    'broken': lambda p: Plan(p.opening()),
    'length': lambda p: Plan(p.opening() + p.closing('length')),
    'malformed': lambda p: Plan(p.opening() + [b'data: {invalid}\n\n']),
    'http-error': lambda p: Plan(status=503),
    'truncated': lambda p: Plan(p.opening() + p.closing('stop'), complete=False),
    'no-done': lambda p: Plan(p.opening() + p.closing('stop')[:-1]),
    'unterminated': _unterminated,
    'held-open': lambda p: Plan(p.opening() + p.closing('stop'), complete=False, hold=True),
    'after-done': lambda p: Plan(p.opening() + p.closing('stop') + [p.event({'content': ' again'})]),
}

PROFILES = {'guide': GuideProfile}


class Handler(BaseHTTPRequestHandler):
    """Answers POST /v1/chat/completions with the server's mode."""

    protocol_version = 'HTTP/1.1'
    server_version = 'synthetic-fixture/0.1'

    def log_message(self, format, *args):
        pass

    def do_POST(self):
        if self.path != '/v1/chat/completions':
            self.send_error(404, 'only /v1/chat/completions is served')
            return
        if self._read_request() is None:
            return
        plan = MODES[self.server.mode](self.server.profile)
        if plan.status != 200:
            self.send_error(plan.status)
            return
        try:
            self._send_stream(plan)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client left; nothing to report to it
        self.close_connection = True

    def _read_request(self) -> dict | None:
        """The JSON request, or None after answering 413 or 400."""
        length = self.headers.get('Content-Length', '')
        if not length.isdigit() or not 0 < int(length) <= MAX_REQUEST_BYTES:
            self.send_error(413, f'expected a JSON body of 1 to {MAX_REQUEST_BYTES} bytes')
            return None
        try:
            request = json.loads(self.rfile.read(int(length)))
        except (ValueError, RecursionError):
            self.send_error(400, 'the body is not JSON')
            return None
        if not isinstance(request, dict) or request.get('stream') is not True:
            self.send_error(400, 'expected a JSON object with "stream": true')
            return None
        return request

    def _send_stream(self, plan: Plan) -> None:
        profile = self.server.profile
        chunked = profile.framing == 'chunked'
        self.send_response(200)
        self.send_header('Content-Type', 'text/event-stream; charset=utf-8')
        self.send_header('Cache-Control', 'no-store')
        if chunked:
            self.send_header('Transfer-Encoding', 'chunked')
        else:
            declared = sum(map(len, plan.writes)) + (0 if plan.complete else MISSING_BYTES)
            self.send_header('Content-Length', str(declared))
        self.end_headers()
        for piece in plan.writes:
            time.sleep(self.server.delay)
            self.wfile.write(b'%x\r\n%s\r\n' % (len(piece), piece) if chunked else piece)
        if chunked and plan.complete:
            self.wfile.write(b'0\r\n\r\n')
        if plan.hold:
            self._wait_for_client_to_leave(HOLD_LIMIT)

    def _wait_for_client_to_leave(self, limit: float) -> None:
        end = time.monotonic() + limit
        while (left := end - time.monotonic()) > 0:
            readable, _, _ = select.select([self.connection], [], [], min(left, 0.2))
            if readable and not self.connection.recv(4096):
                return


def server(port: int = 18080, mode: str = 'ok', delay: float = 0.05,
           profile: str = 'guide') -> ThreadingHTTPServer:
    """A fixture server bound to 127.0.0.1:port (0 picks a free port); call serve_forever()."""
    if mode not in MODES:
        raise ValueError(f'unknown mode {mode!r}; choose from {", ".join(MODES)}')
    if not delay >= 0:
        raise ValueError('delay must be non-negative')
    instance = ThreadingHTTPServer(('127.0.0.1', port), Handler)
    instance.mode, instance.delay, instance.profile = mode, delay, PROFILES[profile]()
    return instance


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog='fixture_server.py', description=__doc__.splitlines()[0])
    parser.add_argument('--port', type=int, default=18080, help='port on 127.0.0.1; 0 picks a free one')
    parser.add_argument('--mode', choices=list(MODES), default='ok', help='how the stream behaves')
    parser.add_argument('--delay', type=float, default=0.05, help='seconds before each write (default 0.05)')
    args = parser.parse_args(argv)
    if not args.delay >= 0:
        parser.error('--delay must be non-negative')
    try:
        instance = server(args.port, args.mode, args.delay)
    except OSError as exc:
        parser.exit(2, f'fixture_server.py: error: cannot listen on 127.0.0.1:{args.port}: {exc.strerror}\n')
    with instance:
        print(f'Synthetic fixture ({args.mode}) listening on '
              f'http://127.0.0.1:{instance.server_port}/v1/chat/completions', flush=True)
        try:
            instance.serve_forever()
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
