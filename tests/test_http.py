"""HTTP/1.x framing (_http): the head and every body framing, sans-IO and over loopback."""
from __future__ import annotations

import unittest
from typing import NamedTuple

import stream_client
from stream_client import stream, StreamError
from stream_client._http import _ChunkedBody, _ContentLengthBody
from .support import (
    ANSWER_EVENTS, chunked, consume, dechunk, feedings, Fixture, message_of, replay, split_capture, SSE_HEAD, TRACES)
from .tiers import sans_io


@sans_io
class FramingTests(unittest.TestCase):
    def test_content_length_counts_bytes_and_reports_shortfall_and_overrun(self):
        body = _ContentLengthBody(10)
        self.assertEqual(body.feed(b'12345'), b'12345')
        self.assertEqual(message_of(body.eof_failure()), 'connection closed after 5 of 10 body bytes')
        self.assertEqual(body.feed(b'6789012'), b'67890')
        self.assertTrue(body.complete)
        self.assertEqual(message_of(body.overrun_failure()), '2 bytes beyond the declared Content-Length of 10')

    def test_chunked_capture_decodes_at_every_chunk_size(self):
        raw = split_capture(TRACES / 'a2_chat_stream_usage_eos_stop.http')[1]
        expected = dechunk(raw)
        self.assertTrue(expected.endswith(b'data: [DONE]\n\n'))
        for name, chunks in feedings(raw):
            reader = _ChunkedBody()
            payload = b''.join(reader.feed(piece) for piece in chunks)
            self.assertEqual((payload, reader.complete, reader.overrun), (expected, True, 0), name)

    def test_chunked_premature_ends_are_named(self):
        raw = split_capture(TRACES / 'a2_chat_stream_usage_eos_stop.http')[1]
        for cut, words in ((len(raw) - 5, 'without its terminating chunk'), (20, 'inside a chunk'),
                           (len(raw) - 2, 'inside its trailer')):
            reader = _ChunkedBody()
            reader.feed(raw[:cut])
            self.assertIn(words, message_of(reader.eof_failure()))

    def test_chunked_rejects_bad_size_lines_and_missing_crlf(self):
        for bad in (b'zz\r\n', b'-1\r\n', b'0x10\r\n', b'1_0\r\n', b'\r\n', b'+5\r\n', b'5\r\nhelloXY'):
            with self.subTest(bad=bad), self.assertRaises(StreamError) as caught:
                _ChunkedBody().feed(bad)
            self.assertEqual(caught.exception.layer, 'transport')

    def test_a_chunk_size_or_trailer_line_over_its_bound_fails_whether_or_not_it_arrived_whole(self):
        zeros = b'0' * 5_000 + b'5\r\nhello\r\n'
        trailer = b'5\r\nhello\r\n0\r\nX-Long: ' + b'a' * 5_000 + b'\r\n\r\n'
        for name, raw in (('size line', zeros), ('trailer line', trailer)):
            for pieces in ([raw], [raw[:4_000], raw[4_000:]], [raw[:4_100], raw[4_100:]]):
                with self.subTest(name, pieces=len(pieces[0])), self.assertRaises(StreamError) as caught:
                    reader = _ChunkedBody()
                    for piece in pieces:
                        reader.feed(piece)
                self.assertEqual((caught.exception.layer, caught.exception.kind), ('transport', 'chunk_line_too_long'))
        reader = _ChunkedBody()  # at the bound: taken
        self.assertEqual(reader.feed(b'0' * 4_093 + b'5\r\nhello\r\n0\r\n\r\n'), b'hello')
        self.assertTrue(reader.complete)

    def test_chunked_accepts_extensions_and_trailers_and_counts_overrun(self):
        reader = _ChunkedBody()
        self.assertEqual(reader.feed(b'5;ext=1\r\nhello\r\n0\r\nX-Trailer: 1\r\n\r\nextra'), b'hello')
        self.assertTrue(reader.complete)
        self.assertEqual(reader.overrun, 5)


def sized(size_line: bytes) -> bytes:
    """A chunked response whose one chunk has this size line ({n}: the chunk's size in hex)."""
    line = size_line.replace(b'{n}', b'%x' % len(ANSWER_EVENTS))
    return SSE_HEAD + b'Transfer-Encoding: chunked\r\n\r\n' + chunked(ANSWER_EVENTS, line)


class StrictCase(NamedTuple):
    response: bytes
    layer: str | None
    words: str = ''


STRICT_CASES = {
    # 1. malformed header lines; the first is http.client's silent failure: it stops at the line,
    #    frames the rest as close-delimited and the events come out whole, without the zero chunk.
    'whitespace before a colon': StrictCase(
        SSE_HEAD + b'Transfer-Encoding : chunked\r\n\r\n' + chunked(ANSWER_EVENTS, end=b''), 'http',
        "whitespace between the field name and the colon in b'Transfer-Encoding : chunked'"),
    'a line without a colon': StrictCase(SSE_HEAD + b'X-No-Colon\r\nContent-Length: 1\r\n\r\nx', 'http',
                                         "header line without a colon: b'X-No-Colon'"),
    'a control character in a value': StrictCase(SSE_HEAD + b'X-Bad: a\x00b\r\n\r\n' + ANSWER_EVENTS, 'http',
                                                 'invalid header line'),
    'an obs-fold line is joined': StrictCase(SSE_HEAD + b'X-Long: a\r\n\t b\r\n\r\n' + ANSWER_EVENTS, None),
    # 2. several Transfer-Encoding lines are one list; HTTP/1.0 has none (RFC 9112, 6.1) and ends at the close
    'Transfer-Encoding in HTTP/1.0': StrictCase(
        b'HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n'
        + chunked(ANSWER_EVENTS), 'http', 'an HTTP/1.0 response with Transfer-Encoding: its framing is faulty'),
    'HTTP/1.0 delimited by the close': StrictCase(
        b'HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n' + ANSWER_EVENTS, None),
    'gzip then chunked': StrictCase(SSE_HEAD + b'Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n'
                                    + chunked(ANSWER_EVENTS), 'http', "unsupported transfer-encoding 'gzip, chunked'"),
    'chunked twice': StrictCase(SSE_HEAD + b'Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n'
                                + chunked(ANSWER_EVENTS), 'http', 'expected chunked alone'),
    # 3. the chunk-size line grammar ({n} stands for the chunk's size in hex)
    'a bare LF after the size': StrictCase(sized(b'{n}\n'), 'transport', 'ending in a bare LF, expected CRLF'),
    'a bare CR after the size': StrictCase(sized(b'{n}\r;x\r\n'), 'transport', 'a bare CR inside it'),
    'CR CR LF after the size': StrictCase(sized(b'{n}\r\r\n'), 'transport', 'ending in CR CR LF'),
    'whitespace before the size': StrictCase(sized(b' {n}\r\n'), 'transport', 'expected hexadecimal digits'),
    'a size over the bound': StrictCase(sized(b'1' + b'0' * 15 + b'\r\n'), 'transport',
                                        'chunk size 0x1000000000000000 is over the bound of 1152921504606846975 bytes'),
    'leading zeros are a size': StrictCase(sized(b'0' * 30 + b'{n}\r\n'), None),
    'extensions after BWS': StrictCase(sized(b'{n} \t; a=1 ;b="q;\\"x"\r\n'), None),
    # 4. trailer lines
    'a trailer that is not a field line': StrictCase(
        SSE_HEAD + b'Transfer-Encoding: chunked\r\n\r\n' + chunked(ANSWER_EVENTS, end=b'0\r\nnonsense\r\n\r\n'),
        'transport', "invalid trailer line b'nonsense'"),
    'a trailer section over its bound': StrictCase(
        SSE_HEAD + b'Transfer-Encoding: chunked\r\n\r\n'
        + chunked(ANSWER_EVENTS, end=b'0\r\n' + b'X-Pad: ' + b'p' * 4000 + b'\r\n' * 1 + (b'X-Pad: ' + b'p' * 4000
                                                                                      + b'\r\n') * 4 + b'\r\n'),
        'transport', 'trailer section longer than 16384 bytes'),
    'a trailer field is accepted': StrictCase(
        SSE_HEAD + b'Transfer-Encoding: chunked\r\n\r\n' + chunked(ANSWER_EVENTS, end=b'0\r\nX-Sum: 1\r\n\r\n'), None),
    'trailer lines ending in a bare LF, as header lines may': StrictCase(
        SSE_HEAD + b'Transfer-Encoding: chunked\r\n\r\n' + chunked(ANSWER_EVENTS, end=b'0\r\nX-Sum: 1\n\n'), None),
    # 5. interim responses
    '103 then 200': StrictCase(b'HTTP/1.1 103 Early Hints\r\nLink: </style.css>\r\n\r\n'
                               + SSE_HEAD + b'\r\n' + ANSWER_EVENTS, None),
    '102 and 103 then 200': StrictCase(b'HTTP/1.1 102 Processing\r\n\r\nHTTP/1.1 103 Early Hints\r\n\r\n'
                                       + SSE_HEAD + b'\r\n' + ANSWER_EVENTS, None),
    '101': StrictCase(b'HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\n\r\n' + SSE_HEAD + b'\r\n' + ANSWER_EVENTS,
                      'http', 'unexpected 101 Switching Protocols'),
    # 6. an absurd Content-Length
    'a Content-Length of 3000 digits': StrictCase(SSE_HEAD + b'Content-Length: 7' + b'0' * 2999 + b'\r\n\r\n'
                                                  + ANSWER_EVENTS, 'http',
                                                  "is over the bound of 1152921504606846975 bytes"),
    'a Content-Length one over the bound': StrictCase(SSE_HEAD + b'Content-Length: 1152921504606846976\r\n\r\n'
                                                      + ANSWER_EVENTS, 'http', 'is over the bound of'),
    '4400 leading zeros are a Content-Length': StrictCase(
        SSE_HEAD + b'Content-Length: ' + b'0' * 4400 + str(len(ANSWER_EVENTS)).encode() + b'\r\n\r\n' + ANSWER_EVENTS,
        None),
    'a list of one Content-Length value': StrictCase(
        SSE_HEAD + f'Content-Length: {len(ANSWER_EVENTS)}, 0{len(ANSWER_EVENTS)}\r\n\r\n'.encode() + ANSWER_EVENTS,
        None),
    'Content-Length values that disagree': StrictCase(
        SSE_HEAD + f'Content-Length: {len(ANSWER_EVENTS)}, 1\r\n\r\n'.encode() + ANSWER_EVENTS, 'http',
        'Content-Length values disagree'),
    # 7. the connection closes inside the head
    'a close inside the head': StrictCase(SSE_HEAD + b'X-Half', 'transport',
                                          'connection closed inside the response head after'),
    'a close before any byte': StrictCase(b'', 'transport', 'connection closed before any response bytes arrived'),
    # 8. a compressed body
    'gzip content-encoding on a chunked body': StrictCase(
        SSE_HEAD + b'Content-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n'
        + chunked(b'\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03'), 'http', "unsupported content-encoding 'gzip'"),
}


class StrictHttpTests(unittest.TestCase):
    @sans_io
    def test_each_case_gets_its_layer_at_every_chunking_of_the_layers(self):
        for name, case in STRICT_CASES.items():
            for feeding, chunks in feedings(case.response):
                with self.subTest(name, feeding=feeding):
                    self.assertEqual(consume(chunks), case.layer)

    def test_each_case_gets_its_layer_and_words_over_loopback(self):
        with Fixture(delay=0) as fixture:
            for name, case in STRICT_CASES.items():
                with self.subTest(name):
                    fixture.instance.replay = (b'', [case.response] if case.response else [])
                    record = stream(fixture.url, 'tiny', 'hi', idle=2)
                    self.assertEqual((record['ok'], record['error_layer']), (case.layer is None, case.layer),
                                     record['error'])
                    self.assertIn(case.words, record['error'] or '')
                    if case.layer == 'transport':
                        self.assertIs(record['transport_complete'], False)

    def test_interim_responses_are_skipped_and_named_in_the_record(self):
        record = replay(STRICT_CASES['102 and 103 then 200'].response)
        self.assertTrue(record['ok'], record['error'])
        self.assertEqual((record['http']['status'], record['http']['interim']), (200, [102, 103]))

    @sans_io
    def test_an_obs_fold_joins_its_value_with_a_space(self):
        head = stream_client._http._ResponseHeadParser().feed(SSE_HEAD + b'X-Long: a \r\n\t b\r\n\r\n')
        self.assertEqual(head.get('x-long'), 'a b')

    @sans_io
    def test_a_field_is_found_by_its_name_in_any_case_with_every_line_in_order(self):
        head = stream_client._http._ResponseHeadParser().feed(
            SSE_HEAD + b'Via: 1.1 a\r\nConnection: keep-alive, Upgrade\r\nvia: 1.1 b\r\nconnection: close\r\n'
                       b'VIA: 1.1 c\r\n\r\n')
        self.assertEqual(head.get_all('via'), ['1.1 a', '1.1 b', '1.1 c'])
        self.assertEqual((head.get('VIA'), head.get('X-Absent'), head.get_all('x-absent')), ('1.1 a', None, []))
        self.assertEqual(head.field_list('Connection'), ['keep-alive', 'upgrade', 'close'])
        head.get_all('Via').append('changed by a caller')
        self.assertEqual(len(head.get_all('Via')), 3)

    def test_the_request_asks_for_no_compression(self):
        with Fixture() as fixture:
            self.assertTrue(stream(fixture.url, 'm', 'p')['ok'])
            self.assertEqual(fixture.last_request[0]['Accept-Encoding'], 'identity')
