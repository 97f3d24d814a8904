"""The whole response (_reader): fuzzed, hostile and grammar cases, whole, split and over loopback."""
from __future__ import annotations

import contextlib
import json
import os
import random
import re
import socket
import threading
import unittest

import fixture_server
import stream_client
from stream_client import stream
from .support import (
    APIS, capture_events, CHUNKED, chunked, consume, Fixture, HERE, LoopbackServer, message_end, message_event,
    MESSAGE_START, R2, sse_response, TEXT_BLOCK, text_delta, TRACES, with_data)
from .tiers import sans_io


def capture_api(name: str) -> str:
    """The API a capture in testdata answers (its name says: c* and g* completions, r* responses)."""
    return {'c': 'completions', 'g': 'completions', 'r': 'responses'}.get(name[0], 'chat')


def framed_responses() -> list[tuple[str, bytes, str]]:
    """(name, whole response, api): the real vLLM captures and the fixture's streams in both framings."""
    responses = [(path.name, path.read_bytes(), capture_api(path.name)) for path in sorted(TRACES.glob('*.http'))]
    for mode in ('ok', 'reasoning', 'error-event', 'length'):
        for (profile, api), builder in fixture_server.BUILDERS.items():
            if not fixture_server.applies(mode, api):
                continue
            writes = fixture_server.MODES[mode](builder('m')).writes
            if builder.framing == 'chunked':
                body = b''.join(b'%x\r\n%s\r\n' % (len(w), w) for w in writes) + b'0\r\n\r\n'
                response = sse_response(body, headers='Transfer-Encoding: chunked\r\n')
            else:
                body = b''.join(writes)
                response = sse_response(body, headers=f'Content-Length: {len(body)}\r\n')
            responses.append((f'{profile}/{api}/{mode}', response, api))
    return responses


def mutate(data: bytes, rng: random.Random) -> bytes:
    """One to three flipped, inserted, deleted or duplicated bytes."""
    data = bytearray(data)
    for _ in range(rng.randint(1, 3)):
        at = rng.randrange(len(data))
        kind = rng.choice(('flip', 'insert', 'delete', 'duplicate'))
        if kind == 'flip':
            data[at] ^= 1 << rng.randrange(8)
        elif kind == 'insert':
            data.insert(at, rng.choice(b'\r\n:{}[]"\\ \x00\xff\xe2'))
        elif kind == 'delete':
            del data[at]
        else:
            data[at:at] = data[at:at + rng.randint(1, 8)]
    return bytes(data)


def rechunk(data: bytes, rng: random.Random) -> list[bytes]:
    cuts = sorted(rng.sample(range(1, len(data)), min(len(data) - 1, rng.randint(0, 8)))) if len(data) > 1 else []
    return [data[a:b] for a, b in zip([0] + cuts, cuts + [len(data)])]


def _edit_head(response: bytes, edit) -> bytes:
    head, _, body = response.partition(b'\r\n\r\n')
    return edit(head) + b'\r\n\r\n' + body


def _edit_chunk_line(response: bytes, rng: random.Random, edit) -> bytes:
    """Apply edit(size digits) -> bytes replacing one chunk-size line, CRLF included."""
    head, _, body = response.partition(b'\r\n\r\n')
    lines, pos = [], 0
    while True:
        eol = body.find(b'\r\n', pos)
        size = int(body[pos:eol], 16)
        lines.append((pos, eol + 2))
        if not size:
            break
        pos = eol + 2 + size + 2
    start, stop = rng.choice(lines)
    return head + b'\r\n\r\n' + body[:start] + edit(body[start:stop - 2]) + body[stop:]


def _insert_header(line: bytes):
    return lambda head: head.replace(b'\r\n', b'\r\n' + line + b'\r\n', 1)


# name: (edit(response, rng) -> response, applies to chunked responses only, layer the result must get)
FRAMING_MUTATIONS = {
    'space before a colon': (lambda r, g: _edit_head(r, lambda h: re.sub(rb'(?i)(content-type):', rb'\1 :', h)),
                             False, 'http'),
    'header line without a colon': (lambda r, g: _edit_head(r, _insert_header(b'X-Broken-Line')), False, 'http'),
    'obs-fold': (lambda r, g: _edit_head(r, _insert_header(b'X-Folded: a\r\n  b')), False, None),
    'Transfer-Encoding twice': (lambda r, g: _edit_head(r, _insert_header(b'Transfer-Encoding: gzip')), True, 'http'),
    'Transfer-Encoding and Content-Length': (lambda r, g: _edit_head(r, _insert_header(b'Content-Length: 9')),
                                             True, 'http'),
    'Content-Encoding gzip': (lambda r, g: _edit_head(r, _insert_header(b'Content-Encoding: gzip')), False, 'http'),
    'chunked in HTTP/1.0': (lambda r, g: b'HTTP/1.0' + r[len(b'HTTP/1.1'):], True, 'http'),
    'Content-Length of 3000 digits': (lambda r, g: _edit_head(r, _insert_header(b'Content-Length: 1' + b'0' * 2999)),
                                      False, 'http'),
    'a 103 first': (lambda r, g: b'HTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\n' + r, False, None),
    'a 101 first': (lambda r, g: b'HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\n' + r, False, 'http'),
    'cut inside the head': (lambda r, g: r[:g.randrange(1, r.index(b'\r\n\r\n') + 3)], False, 'transport'),
    'chunk line ending in a bare LF': (lambda r, g: _edit_chunk_line(r, g, lambda s: s + b'\n'), True, 'transport'),
    'chunk line with a bare CR': (lambda r, g: _edit_chunk_line(r, g, lambda s: s + b'\r \r\n'), True, 'transport'),
    'chunk line ending in CR CR LF': (lambda r, g: _edit_chunk_line(r, g, lambda s: s + b'\r\r\n'), True,
                                      'transport'),
    'space before the chunk size': (lambda r, g: _edit_chunk_line(r, g, lambda s: b' ' + s + b'\r\n'), True,
                                    'transport'),
    'leading zeros': (lambda r, g: _edit_chunk_line(r, g, lambda s: b'0' * 40 + s + b'\r\n'), True, None),
    'chunk extension': (lambda r, g: _edit_chunk_line(r, g, lambda s: s + b' \t;name="v";flag\r\n'), True, None),
    'trailer that is not a field line': (lambda r, g: r[:-2] + b'not a field\r\n\r\n', True, 'transport'),
    'trailer field': (lambda r, g: r[:-2] + b'X-Checksum: 1\r\n\r\n', True, None),
}


def complete_responses() -> list[tuple[str, bytes, str]]:
    """The framed responses whose answer is complete (an ok record), both framings, all three APIs."""
    return [(name, response, api) for name, response, api in framed_responses() if consume([response], api) is None]


FUZZ_SCALE = int(os.environ.get('FUZZ_SCALE', '1'))  # FUZZ_SCALE=20 python3 -m unittest ... runs 20x the cases


class FuzzTests(unittest.TestCase):
    @sans_io
    def test_truncated_responses_are_never_complete(self):
        responses = framed_responses()
        self.assertEqual({api for _, _, api in responses}, set(APIS))
        for name, response, api in responses:
            boundaries = {i + 1 for i in range(len(response)) if response[i:i + 1] == b'\n'}
            offsets = set(range(max(0, len(response) - 100), len(response))) | boundaries - {len(response)}
            for offset in sorted(offsets):
                verdict = consume([response[:offset]], api)
                self.assertIsNotNone(verdict, f'{name} cut at {offset} of {len(response)} was judged complete')

    @sans_io
    def test_mutated_and_rechunked_responses_only_raise_stream_errors(self):
        rng = random.Random(6)
        responses = framed_responses()
        for case in range(1500 * FUZZ_SCALE):
            name, response, api = rng.choice(responses)
            truncated = case % 3 == 0
            cut = response[:rng.randrange(len(response))] if truncated else mutate(response, rng)
            layer = consume(rechunk(cut, rng), api)  # must not raise anything but StreamError
            self.assertIn(layer, (None, *stream_client.LAYERS), name)
            self.assertNotEqual(layer, 'client', name)
            if truncated:
                self.assertIsNotNone(layer, f'{name} cut after {len(cut)} bytes was ok')

    def test_framing_mutations_get_their_layer_in_the_layers_and_over_loopback(self):
        rng = random.Random(1071)
        bases = complete_responses()
        self.assertEqual({b'chunked' in r.lower() for _, r, _ in bases}, {True, False})  # both framings
        self.assertEqual({api for _, _, api in bases}, set(APIS))
        with Fixture(delay=0) as fixture:
            for case in range(len(FRAMING_MUTATIONS) * 6 * FUZZ_SCALE):
                mutation = list(FRAMING_MUTATIONS)[case % len(FRAMING_MUTATIONS)]
                edit, chunked_only, layer = FRAMING_MUTATIONS[mutation]
                name, base, api = rng.choice([(n, r, a) for n, r, a in bases
                                              if b'transfer-encoding: chunked' in r.lower() or not chunked_only])
                response = edit(base, rng)
                with self.subTest(mutation=mutation, base=name):
                    self.assertEqual(consume(rechunk(response, rng), api), layer)
                    fixture.instance.replay = (b'', rechunk(response, rng))
                    record = stream(fixture.url, 'tiny', 'hi', idle=1, deadline=2, api=api)
                    self.assertEqual(record['error_layer'], layer, record['error'])

    def test_full_client_survives_mutated_responses_over_loopback(self):
        rng = random.Random(3440)
        responses = [(path.read_bytes(), capture_api(path.name)) for path in sorted(TRACES.glob('*.http'))]
        with Fixture(delay=0) as fixture:
            for case in range(150 * FUZZ_SCALE):
                original, api = rng.choice(responses)
                if case % 3 == 0:
                    response, truncated = original[:rng.randrange(len(original))], True
                else:
                    response, truncated = mutate(original, rng), False
                fixture.instance.replay = (b'', rechunk(response, rng))
                record = stream(fixture.url, 'tiny', 'hi', idle=1, deadline=2, api=api)
                json.dumps(record)
                self.assertNotEqual(record['error_layer'], 'client', record['error'])
                if truncated:
                    self.assertFalse(record['ok'], f'case {case}: a truncated response was ok')


HOSTILE = HERE / 'testdata' / 'hostile'
HOSTILE_CASES = json.loads((HOSTILE / 'cases.json').read_text())
# The kind each hostile stream that is not ok gets: the rule of the grammar it breaks.
HOSTILE_KINDS = {
    '13': 'event_after_close', '14': 'event_after_close', '15': 'event_after_close',
    '17': 'event_after_close', '18': 'event_after_close', '19': 'duplicate_id', '20': 'event_after_terminal',
    '21': 'event_after_terminal', '22': 'call_without_id', '23': 'event_after_close', '24': 'event_after_terminal',
    '25': 'event_after_close', '26': 'event_after_close', '27': 'event_after_close', '28': 'event_after_close',
    '29': 'event_after_close', '30': 'event_after_close', '31': 'event_after_terminal', '32': 'duplicate_id',
    '33': 'duplicate_id', '34': 'duplicate_id', '35': 'closing_copy_differs', '36': 'closing_copy_differs',
    '37': 'closing_copy_differs', '38': 'closing_copy_differs', '39': 'closing_copy_differs',
    '40': 'closing_copy_differs', '41': 'closing_copy_differs', '42': 'closing_copy_differs',
    '43': 'event_out_of_order', '44': 'event_out_of_order', '45': 'part_not_open', '46': 'part_index_skips',
    '47': 'part_not_open', '48': 'event_after_close', '49': 'event_after_close', '50': 'part_not_open',
    '51': 'part_still_open', '52': 'part_not_open', '53': 'part_not_open', '54': 'closing_copy_differs',
    '55': 'duplicate_part', '56': 'event_after_close', '57': 'event_after_close', '58': 'event_after_terminal',
    '59': 'event_after_close', '60': 'duplicate_id', '61': 'part_still_open', '62': 'part_not_open',
    '63': 'event_out_of_order', '64': 'part_index_skips', '65': 'part_not_open',
}


def hostile_options(case: dict) -> dict:
    """prepare()'s options for a hostile case, from its command-line args."""
    args, options = case['args'], {'api': case['api']}
    for flag, option in (('--tools', 'tools'), ('--json-schema', 'json_schema')):
        if flag in args:
            options[option] = json.loads((HOSTILE / 'cases' / args[args.index(flag) + 1]).read_text())
    return options


def hostile_request(case: dict, url: str = 'http://127.0.0.1:9/v1/chat/completions') -> stream_client.PreparedRequest:
    idle = float(case['args'][case['args'].index('--idle') + 1]) if '--idle' in case['args'] else 3.0
    return stream_client.prepare(url, 'tiny', 'hi', idle=idle, deadline=20, **hostile_options(case))


def hostile_splits(raw: bytes) -> list[int]:
    """Where a hostile response is split in two: around every line end (where framing and events
    break) and at a stride through the rest (inside JSON and UTF-8); every byte in the benchmarks' sweep
    (benchmarks/sweep_hostile.py)."""
    ends = {at + shift for at, byte in enumerate(raw) if byte in b'\r\n' for shift in (0, 1)}
    return sorted(at for at in ends | set(range(1, len(raw), 127)) if 0 < at < len(raw))


def verdict_of(case: dict, reads: list[bytes]) -> tuple:
    reader = stream_client.ResponseReader(hostile_request(case).new_validator())
    for raw in reads:
        reader.feed(raw)
    reader.eof()
    verdict = stream_client.judge(reader)
    return verdict.ok, verdict.layer, verdict.kind


class KeepAliveReplay(LoopbackServer):
    """A loopback server that answers every request on a connection with the same bytes and keeps the
    connection open; with ``split_at``, the bytes after it (stray bytes beyond the framed response)
    follow in a second write once ``run_ended`` is set, and ``sent`` is set once everything of a
    response is written."""

    def __init__(self, data: bytes, split_at: int | None = None) -> None:
        super().__init__()
        self.data, self.split_at = data, split_at
        self.run_ended, self.sent = threading.Event(), threading.Event()

    def serve(self, sock: socket.socket) -> None:
        with sock, contextlib.suppress(OSError):  # the client closed or reset the connection
            self.answer(sock)

    def answer(self, sock: socket.socket) -> None:
        """Answer each request on the connection with the bytes, until it closes."""
        buffered = b''
        while True:
            while b'\r\n\r\n' not in buffered:
                data = sock.recv(65536)
                if not data:
                    return
                buffered += data
            head, buffered = buffered.split(b'\r\n\r\n', 1)
            length = int(re.search(rb'(?im)^content-length:\s*(\d+)', head)[1])
            while len(buffered) < length:
                buffered += sock.recv(65536)
            buffered = buffered[length:]
            cut = self.split_at or len(self.data)
            sock.sendall(self.data[:cut])
            if cut < len(self.data):
                self.run_ended.wait(5)
                sock.sendall(self.data[cut:])
            self.sent.set()

    def between_runs(self) -> None:
        """Say a run has ended, and wait until the stray bytes of a late case are on the idle connection."""
        self.run_ended.set()
        self.sent.wait(5)
        self.run_ended.clear()
        self.sent.clear()


class HostileCaseTests(unittest.TestCase):
    """The hostile suite of testdata/hostile (written from the protocols by a session that had not read
    this code): each stream gets its expected verdict in the sans-IO reader, whole and split, and over
    loopback; the kept-alive cases over one kept connection."""

    def single_runs(self) -> list[dict]:
        return [case for case in HOSTILE_CASES if case['runs'] == 1]

    def expected(self, case: dict) -> tuple:
        return case['expect_ok'], case['expect_layer'], HOSTILE_KINDS.get(case['file'][:2])

    @sans_io
    def test_the_suite_is_whole(self):
        self.assertGreaterEqual(len(HOSTILE_CASES), 45)
        self.assertEqual({case['file'] for case in HOSTILE_CASES},
                         {path.name for path in (HOSTILE / 'cases').glob('*.http')})
        not_ok = {case['file'][:2] for case in self.single_runs() if not case['expect_ok']}
        self.assertEqual(not_ok, set(HOSTILE_KINDS))

    @sans_io
    def test_each_hostile_stream_gets_its_verdict_whole_and_split(self):
        for case in self.single_runs():
            raw = (HOSTILE / 'cases' / case['file']).read_bytes()
            with self.subTest(case['file']):
                self.assertEqual(verdict_of(case, [raw]), self.expected(case))
                for at in hostile_splits(raw):
                    self.assertEqual(verdict_of(case, [raw[:at], raw[at:]]), self.expected(case), f'split at {at}')

    def test_each_hostile_stream_gets_its_verdict_over_loopback(self):
        with Fixture(delay=0) as fixture:
            for case in self.single_runs():
                fixture.instance.replay = (b'', [(HOSTILE / 'cases' / case['file']).read_bytes()])
                with self.subTest(case['file']):
                    record = stream_client.run(hostile_request(case, fixture.url))
                    self.assertEqual((record['ok'], record['error_layer'], record['error_kind']), self.expected(case),
                                     record['error'])

    def test_each_hostile_stream_gets_its_verdict_in_a_load(self):
        # a load's responses are read by the engine (Linux), not by the run's own thread
        with Fixture(delay=0) as fixture:
            for case in self.single_runs():
                fixture.instance.replay = (b'', [(HOSTILE / 'cases' / case['file']).read_bytes()])
                with self.subTest(case['file']):
                    records: list[dict] = []
                    stream_client.run_load([hostile_request(case, fixture.url)], stream_client.LoadSettings(),
                                           records.append, stream_client.Cancel())
                    self.assertEqual((records[0]['ok'], records[0]['error_layer'], records[0]['error_kind']),
                                     self.expected(case), records[0]['error'])

    def test_each_kept_alive_case_gets_its_verdict_on_both_runs_of_a_load(self):
        for case in [case for case in HOSTILE_CASES if case['keep_alive']]:
            with self.subTest(case['file']):
                server = KeepAliveReplay((HOSTILE / 'cases' / case['file']).read_bytes(), case.get('split_at'))
                server.start()
                records: list[dict] = []

                def on_record(record: dict) -> None:  # called before the next run starts (one worker)
                    records.append(record)
                    server.between_runs()
                try:
                    stream_client.run_load([hostile_request(case, server.url)],
                                           stream_client.LoadSettings(runs=case['runs'], keep_alive=True), on_record,
                                           stream_client.Cancel())
                finally:
                    server.close()
                self.assertEqual([(record['ok'], record['error_layer']) for record in records],
                                 list(zip(case['expect_ok'], case['expect_layer'])), [r['error'] for r in records])

    def test_each_kept_alive_case_gets_its_verdict_on_both_runs(self):
        for case in [case for case in HOSTILE_CASES if case['keep_alive']]:
            with self.subTest(case['file']):
                server = KeepAliveReplay((HOSTILE / 'cases' / case['file']).read_bytes(), case.get('split_at'))
                server.start()
                kept = stream_client.KeptConnections()
                try:
                    records = []
                    for _ in range(case['runs']):
                        records.append(stream_client.run(hostile_request(case, server.url), kept=kept))
                        server.between_runs()
                finally:
                    kept.close()
                    server.close()
                self.assertEqual([(record['ok'], record['error_layer']) for record in records],
                                 list(zip(case['expect_ok'], case['expect_layer'])), [r['error'] for r in records])


def renumbered(events: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Responses events with their sequence_number counted again from 0, so that only the order is wrong."""
    return [with_data(event, sequence_number=number) for number, event in enumerate(events)]


def typed_response(events: list[tuple[str, str]]) -> bytes:
    """A chunked 200 response carrying these typed events, one per chunk, as vLLM frames them."""
    body = b''.join(chunked(f'event: {kind}\ndata: {data}\n\n'.encode(), end=b'') for kind, data in events)
    return CHUNKED + body + b'0\r\n\r\n'


def _r2(edit) -> list[tuple[str, str]]:
    return renumbered(edit(capture_events(R2)))  # 2 item added, 3 part added, 13 text done, 14 part done, 15 item done


TEXT_MESSAGE = [MESSAGE_START, TEXT_BLOCK, text_delta('hi')]
# Rules of the grammars that the hostile suite does not break, each with the kind it gets.
GRAMMAR_CASES = {
    'messages: a block starts while the last is open': ('messages', TEXT_MESSAGE + [message_event(
        'content_block_start', content_block={'type': 'text', 'text': ''}, index=1)] + message_end(index=1),
        'event_out_of_order'),
    'messages: a later message_delta changes stop_reason, and the last is kept': ('messages', TEXT_MESSAGE
        + message_end()[:2] + [message_event('message_delta', delta={'stop_reason': 'stop_sequence'}),
                               message_event('message_stop')], None),
    'messages: ping, citations and an unknown event are fine': ('messages', TEXT_MESSAGE + [
        message_event('ping'), message_event('content_block_delta', index=0, delta={
            'type': 'citations_delta', 'citation': {'type': 'char_location', 'cited_text': 'x'}}),
        message_event('brand_new_event')] + message_end(), None),
    'responses: an item closes with its content part open': ('responses', _r2(
        lambda e: e[:14] + [e[15], e[14], e[16]]), 'part_still_open'),
    'responses: a content part skips its index': ('responses', _r2(
        lambda e: e[:3] + [(e[3][0], e[3][1].replace('"content_index":0', '"content_index":1'))] + e[4:]),
        'part_index_skips'),
    'responses: the terminal lists another item': ('responses', _r2(
        lambda e: e[:16] + [(e[16][0], e[16][1].replace(json.loads(e[2][1])['item']['id'], 'msg_other'))]),
        'closing_copy_differs'),
    'responses: an unknown event is skipped': ('responses', _r2(
        lambda e: e[:5] + [('response.new_thing', '{"type": "response.new_thing"}')] + e[5:]), None),
}


class GrammarCaseTests(unittest.TestCase):
    """Each grammar rule the hostile suite leaves out: whole, split (see hostile_splits) and over loopback."""

    def test_each_rule_gets_its_kind_whole_split_and_over_loopback(self):
        with Fixture(delay=0) as fixture:
            for name, (api, events, kind) in GRAMMAR_CASES.items():
                raw = typed_response(events)
                case = {'api': api, 'args': []}
                expected = (kind is None, None if kind is None else 'protocol', kind)
                with self.subTest(name):
                    for at in [0, *hostile_splits(raw)]:
                        self.assertEqual(verdict_of(case, [raw[:at], raw[at:]]), expected, f'split at {at}')
                    fixture.instance.replay = (b'', [raw])
                    record = stream_client.run(hostile_request(case, fixture.url))
                    self.assertEqual((record['ok'], record['error_layer'], record['error_kind']), expected,
                                     record['error'])


@sans_io
class StrayErrorTests(unittest.TestCase):
    """A server error written outside SSE fails as an error event does, with the server's message."""

    HEAD = b'HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n'
    TEXT = b'data: {"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}\n\n'

    def verdict(self, body: bytes) -> tuple[stream_client.Verdict, stream_client.ResponseReader]:
        reader = stream_client.ResponseReader(stream_client.ChatChunks())
        reader.feed(self.HEAD + self.TEXT + body)
        reader.eof()
        return stream_client.judge(reader, None, None), reader

    def test_ollamas_bare_json_error_line_and_an_error_field(self):
        cases = {b'{"error":{"message":"model runner crashed","type":"api_error","param":null,"code":null}}\n':
                 {'message': 'model runner crashed', 'type': 'api_error', 'code': None},
                 b'error: {"code":500,"message":"slot unavailable","type":"server_error"}\n\n':
                 {'message': 'slot unavailable', 'type': 'server_error', 'code': 500},
                 b'error: boom\n\n': {'message': 'boom', 'type': None, 'code': None}}
        for body, error in cases.items():
            with self.subTest(body):
                verdict, reader = self.verdict(body)
                self.assertEqual((verdict.ok, verdict.layer, verdict.kind),
                                 (False, 'application', 'server_error_event'))
                self.assertEqual(reader.error.server_error, error)
                self.assertIn(repr(error['message']), verdict.message)
                self.assertEqual(reader.events.stray, [body.split(b'\n')[0].decode()])

    def test_a_stray_line_without_an_error_changes_nothing(self):
        verdict, reader = self.verdict(b'{"note": 1}\n'
                                       + b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}'
                                       b'\n\ndata: [DONE]\n\n')
        self.assertEqual((verdict.ok, reader.events.stray), (True, ['{"note": 1}']))
