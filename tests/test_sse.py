"""The SSE parser (_sse): every chunk boundary, the line ends, the bounds."""
from __future__ import annotations

import json
import random
import unittest

import stream_client
from stream_client import Events, MAX_EVENT_CHARS, MAX_LINE_CHARS, StreamError
from .support import chunk_json, dechunk, feedings, message_of, parse_all, split_capture, SSE_HEAD, TRACES
from .tiers import sans_io


def reference_events(text: str) -> tuple[list[str], bool]:
    """A naive character-by-character SSE parser, written from the spec; returns (events, ended on boundary)."""
    if text.startswith('\ufeff'):
        text = text[1:]
    events, data, line, i = [], [], '', 0
    while i < len(text):
        char = text[i]
        i += 1
        if char in '\r\n':
            if char == '\r' and i < len(text) and text[i] == '\n':
                i += 1
            if not line:
                if data:
                    events.append('\n'.join(data))
                data = []
            else:
                name, _, value = line.partition(':')
                if name == 'data':
                    data.append(value[1:] if value.startswith(' ') else value)
            line = ''
        else:
            line += char
    return events, not line and not data


@sans_io
class ParserTests(unittest.TestCase):
    MIXED = ('\ufeff: comment\rdata: one \u2713\rdata: two\r\rdata: three\n\n'
             'data: four\r\n\r\nevent: x\nid: 7\ndata:five\n\n').encode()

    def test_every_chunking_gives_the_same_events(self):
        for name, chunks in feedings(self.MIXED):
            with self.subTest(name):
                self.assertEqual(parse_all(chunks), ['one \u2713\ntwo', 'three', 'four', 'five'])

    def test_vllm_capture_parses_identically_at_every_chunk_size(self):
        payload = dechunk(split_capture(TRACES / 'u2_chat_stream_emoji_split_tokens.http')[1])
        expected = parse_all([payload])
        self.assertEqual(expected[-1], '[DONE]')
        self.assertEqual(len(expected), 8)
        for name, chunks in feedings(payload):
            self.assertEqual(parse_all(chunks), expected, name)

    def test_typed_events_keep_their_event_field_at_every_chunking(self):
        raw = (b'event: response.created\ndata: {"a": 1}\n\ndata: plain\n\n'
               b'event: ignored\n\nevent:tight\r\ndata: x\r\n\r\nevent: late\nid: 3\ndata: y\n\n')
        expected = [('response.created', '{"a": 1}'), ('message', 'plain'), ('tight', 'x'), ('late', 'y')]
        for name, chunks in feedings(raw):
            parser = stream_client.TypedEvents()
            self.assertEqual([event for chunk in chunks for event in parser.feed(chunk)], expected, name)
            self.assertIsNone(parser.pending(), name)
        self.assertEqual(parse_all([raw]), ['{"a": 1}', 'plain', 'x', 'y'])

    def test_crlf_split_across_reads_counts_as_one_line_end(self):
        self.assertEqual(parse_all([b'data: a\r', b'\ndata: b\r\n\r\n']), ['a\nb'])

    def test_bare_data_line_is_empty_data_and_one_space_is_stripped(self):
        self.assertEqual(parse_all([b'data\ndata: x\n\n']), ['\nx'])
        self.assertEqual(parse_all([b'data:  two spaces\n\n']), [' two spaces'])
        self.assertEqual(parse_all([b'data:\n\n']), [''])

    def test_only_data_fields_count_and_blank_lines_without_data_dispatch_nothing(self):
        self.assertEqual(parse_all([b'database: no\nevent: e\nretry: 1\n\n\n\n: c\n\ndata: y\n\n']), ['y'])

    def test_unicode_line_separators_are_not_line_ends(self):
        self.assertEqual(parse_all(['data: a\u2028b\u0085c\n\n'.encode()]), ['a\u2028b\u0085c'])

    def test_bom_split_across_reads_is_dropped_once(self):
        raw = '\ufeffdata: x\n\n'.encode()
        self.assertEqual(parse_all([raw[:1], raw[1:2], raw[2:]]), ['x'])
        self.assertEqual(parse_all(['\ufeff\ufeffdata: x\n\ndata: y\n\n'.encode()]), ['y'])

    def test_the_default_bounds_are_the_guides_and_a_reader_asks_for_its_own(self):
        self.assertEqual((MAX_LINE_CHARS, MAX_EVENT_CHARS), (65_536, 1_048_576))
        line = b'data: ' + b'x' * 100_000 + b'\n\n'
        with self.assertRaises(StreamError) as caught:
            Events().feed(line)
        self.assertEqual(caught.exception.kind, 'line_too_long')
        self.assertEqual(len(Events(max_line_chars=200_000).feed(line)[0]), 100_000)
        with self.assertRaises(StreamError) as caught:
            Events(max_line_chars=200_000, max_event_chars=50_000).feed(line)
        self.assertEqual(caught.exception.kind, 'event_too_long')
        # the client's response reader asks for the answer's bounds: a 100,000-character delta in one line is ok
        content = json.dumps({'choices': [{'index': 0, 'delta': {'content': 'x' * 100_000}}]})
        reader = stream_client.ResponseReader(stream_client.ChatChunks())
        reader.feed(SSE_HEAD + b'\r\n' + f'data: {content}\n\ndata: {chunk_json(finish_reason="stop")}\n\n'
                                         'data: [DONE]\n\n'.encode())
        reader.eof()
        self.assertTrue(stream_client.judge(reader).ok, stream_client.judge(reader).message)

    def test_the_guides_parser_contract_holds(self):
        # Code written against the guide's Events must keep working: an unfinished last event is
        # silently not dispatched, a line over the bound is a ValueError, and finish() complains
        # only about a UTF-8 character cut in half, as a UnicodeDecodeError.
        parser = Events()
        self.assertEqual(parser.feed(b'data: unfinished'), [])
        self.assertIsNone(parser.finish())
        with self.assertRaises(ValueError):
            Events().feed(b'x' * (MAX_LINE_CHARS + 1))
        parser = Events()
        parser.feed(b'data: \xe2')
        with self.assertRaises(UnicodeDecodeError):
            parser.finish()
        with self.assertRaises(UnicodeDecodeError):  # a bad byte inside a line is refused, not replaced
            Events().feed(b'data: \xff\n\n')

    def test_parser_errors_are_stream_errors_of_the_sse_layer(self):
        for feed in (b'x' * (MAX_LINE_CHARS + 1), b'data: \xff\n\n'):
            with self.subTest(feed=feed[:10]), self.assertRaises(StreamError) as caught:
                Events().feed(feed)
            self.assertEqual(caught.exception.layer, 'sse')
            self.assertTrue(str(caught.exception).startswith('sse: '))

    def test_pending_names_what_an_unterminated_stream_ended_inside(self):
        for raw, words in ((b'data: unfinished', 'inside a line'), (b'data: x\n', 'inside an event'),
                           ('data: \u2713'.encode()[:-1], 'UTF-8 character')):
            parser = Events()
            self.assertEqual(parser.feed(raw), [])
            self.assertIn(words, message_of(parser.pending()))

    def test_invalid_utf8_is_an_sse_error(self):
        with self.assertRaises(StreamError) as caught:
            Events().feed(b'data: \xff\n\n')
        self.assertIn('0xff', caught.exception.message)

    def test_line_bound_holds_on_both_paths_and_without_line_ends(self):
        fits = 'data: ' + 'x' * (MAX_LINE_CHARS - 6)
        self.assertEqual(len(parse_all([(fits + '\n\n').encode()])[0]), MAX_LINE_CHARS - 6)
        for prefix in ('', ': slow path\n'):
            with self.subTest(prefix=prefix), self.assertRaises(StreamError):
                Events().feed((prefix + fits + 'x\n\n').encode())
        parser = Events()
        with self.assertRaises(StreamError):
            for _ in range(MAX_LINE_CHARS // 4096 + 2):
                parser.feed(b'y' * 4096)
        self.assertLessEqual(parser._open_chars, MAX_LINE_CHARS + 4096)

    def test_event_bound_counts_all_data_lines(self):
        line = ('data: ' + 'z' * 60_000 + '\n').encode()
        parser = Events()
        with self.assertRaises(StreamError) as caught:
            for _ in range(MAX_EVENT_CHARS // 60_000 + 1):
                parser.feed(line)
        self.assertIn('event data longer', caught.exception.message)

    def test_fast_path_agrees_with_a_naive_parser_on_random_streams(self):
        rng = random.Random(2026)
        parts = ['data: {"a":1}', 'data: x', 'data:y', 'data', ': c', 'event: e', '', 'data: \u2713\u00e9',
                 'data: a\rb']
        for _ in range(300):
            text = ''.join(rng.choice(parts) + rng.choice(['\n', '\r', '\r\n', '\n\n', '\r\n\r\n'])
                           for _ in range(rng.randint(1, 12)))
            raw = text.encode()
            cuts = sorted(rng.sample(range(1, len(raw)), min(len(raw) - 1, rng.randint(0, 6))))
            chunks = [raw[a:b] for a, b in zip([0] + cuts, cuts + [len(raw)])]
            expected, at_boundary = reference_events(text)
            parser = Events()
            got = [event for chunk in chunks for event in parser.feed(chunk)]
            if text.endswith('\r'):
                at_boundary = at_boundary and True
            self.assertEqual(got, expected, repr(text))
            self.assertEqual(parser.pending() is None, at_boundary, repr(text))


@sans_io
class StrayLineTests(unittest.TestCase):
    """Lines outside SSE that look like a server's error are ignored as SSE says, but kept (bounded)."""

    def test_a_bare_json_line_and_an_error_field_are_kept_the_rest_ignored(self):
        parser = Events()
        events = parser.feed(b'data: a\n\n{"error": "oom"}\nerror: {"message": "x"}\nid: 7\nretry: 5\n: hi\n\n'
                             b'data: b\n\n')
        self.assertEqual(events, ['a', 'b'])
        self.assertEqual(parser.stray, ['{"error": "oom"}', 'error: {"message": "x"}'])

    def test_the_kept_lines_are_bounded(self):
        parser = Events()
        parser.feed(b''.join(b'{"error": "%d%s"}\n' % (number, b'x' * 3000) for number in range(9)))
        self.assertEqual(len(parser.stray), 4)
        self.assertTrue(all(len(line) == 2000 for line in parser.stray))
