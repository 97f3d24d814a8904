"""Protocol tests: no model, no third-party package, loopback only."""
from __future__ import annotations

import ast
import atexit
import base64
import collections
import contextlib
import dataclasses
import hashlib
import importlib.util
import html.parser
import io
import itertools
import json
import math
import os
import random
import re
import resource
import select
import signal
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import urllib.error
import urllib.request
import types
import unittest
from pathlib import Path
from typing import Iterator, NamedTuple
from unittest import mock

import fixture_server
import stream_client
from stream_client import (MAX_EVENT_CHARS, MAX_LINE_CHARS, ChatChunks, _ChunkedBody, _ContentLengthBody,
                           Events, StreamError, stream)

HERE = Path(__file__).resolve().parent
TRACES = HERE / 'testdata' / 'vllm-0.32.0-cpu'
CLIENT = str(HERE / 'stream_client.py')
SOURCE = HERE / 'src' / 'stream_client'
_spec = importlib.util.spec_from_file_location('amalgamate', HERE / 'tools' / 'amalgamate.py')
AMALGAMATE = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(AMALGAMATE)
FIXTURE_SCRIPT = str(HERE / 'fixture_server.py')

# The tests run the scripts as `python3 SCRIPT ARGS` does, in a new process, with one difference: the
# script's bytecode comes from a cache. Python compiles a script given by its path on every start and
# never caches it (0.12 s for stream_client.py here, in each of about 200 children); this launcher runs
# the same code, compiled once into a cache of the suite's own, as __main__ with the script's argv[0],
# __file__ and sys.path[0]. CopiedAloneTests and the tests of how a script names itself start the file
# itself.
_PYCACHE = tempfile.TemporaryDirectory(prefix='stream-tests-pycache-')
atexit.register(_PYCACHE.cleanup)
_LAUNCHER = ('import __main__, importlib.machinery, os, sys\n'
             'sys.argv.pop(0)\n'
             'sys.path[0] = os.path.dirname(sys.argv[0])\n'
             '__main__.__file__ = sys.argv[0]\n'
             "exec(importlib.machinery.SourceFileLoader('__main__', sys.argv[0]).get_code('__main__'), __main__.__dict__)\n")


def script_command(path: str, *args: str) -> list[str]:
    """The command that runs the script at path with args, its bytecode cached (see _LAUNCHER)."""
    return [sys.executable, '-c', _LAUNCHER, path, *args]


def script_env(env: dict | None = None) -> dict:
    """The environment of a script's process: env (by default this one's), writing bytecode to the suite's cache."""
    env = dict(os.environ if env is None else env)
    env.pop('PYTHONDONTWRITEBYTECODE', None)
    env['PYTHONPYCACHEPREFIX'] = _PYCACHE.name
    return env


def message_of(failure: StreamError | None) -> str | None:
    """The message of a failure that a sans-IO part returns, or None."""
    return None if failure is None else failure.message


def pieces(data: bytes, size: int) -> list[bytes]:
    return [data[i:i + size] for i in range(0, len(data), size)]


EXHAUSTIVE_UP_TO = 2048  # bytes; longer inputs get a thinned sweep (see feedings)


def feedings(data: bytes) -> Iterator[tuple[str, list[bytes]]]:
    """The same bytes whole, in pieces of every size (1 is byte by byte), and cut in two at every
    point, each named for a failure message: the sweep of h11's t_body_reader.

    Above EXHAUSTIVE_UP_TO bytes the sweep thins out, to keep the suite fast: pieces of 1 to 64 bytes
    and of every power of two, and cuts at every line end and every 13th byte.
    """
    yield 'whole', [data]
    exhaustive = len(data) <= EXHAUSTIVE_UP_TO
    sizes = range(1, len(data)) if exhaustive else sorted(set(range(1, 65)) | {2 ** n for n in range(7, 20)})
    for size in sizes:
        if size < len(data):
            yield f'{size}-byte pieces', pieces(data, size)
    for at in range(1, len(data)):
        if exhaustive or at % 13 == 0 or data[at - 1:at] == b'\n':
            yield f'cut at {at}', [data[:at], data[at:]]


def parse_all(chunks: list[bytes]) -> list[str]:
    parser = Events()
    events = []
    for chunk in chunks:
        events.extend(parser.feed(chunk))
    parser.finish()
    return events


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


def split_capture(path: Path) -> tuple[bytes, bytes]:
    head, _, body = path.read_bytes().partition(b'\r\n\r\n')
    return head + b'\r\n\r\n', body


def dechunk(body: bytes) -> bytes:
    reader = _ChunkedBody()
    payload = reader.feed(body)
    assert reader.complete and not reader.overrun
    return payload


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


def chunk_json(**choice) -> str:
    return json.dumps({'choices': [dict({'index': 0, 'delta': {}}, **choice)]})


class ChatChunkTests(unittest.TestCase):
    def rejected(self, *events: str) -> StreamError:
        chunks = ChatChunks()
        with self.assertRaises(StreamError) as caught:
            for data in events:
                chunks.accept(data)
        return caught.exception

    def test_litellms_empty_entry_after_the_finish_is_accepted(self):
        # LiteLLM ends every stream with its usage beside "choices": [{"index": 0, "delta": {}}]
        litellm = json.dumps({'id': 'chatcmpl-1', 'object': 'chat.completion.chunk', 'model': 'tiny',
                              'choices': [{'index': 0, 'delta': {}}], 'usage': {'completion_tokens': 2}})
        empty = [litellm, chunk_json(), chunk_json(delta={'content': '', 'role': None, 'tool_calls': None},
                                                   logprobs=None, finish_reason=None, token_ids=None)]
        for entry in empty:
            with self.subTest(entry=entry):
                chunks = ChatChunks()
                for data in (TEXT, STOP, entry, DONE):
                    chunks.accept(data)
                self.assertEqual((chunks.outcome(), chunks.text, chunks.finish_reason), (None, 'hi', 'stop'))
        completions = stream_client.CompletionChunks()
        for data in (chunk_json(text='hi', finish_reason='stop'), chunk_json(text='', logprobs=None), DONE):
            completions.accept(data)
        self.assertIsNone(completions.outcome())

    def test_an_entry_after_the_finish_that_carries_anything_is_refused(self):
        for delta, extra in (({'content': 'late'}, {}), ({'reasoning': 'late'}, {}), ({'role': 'assistant'}, {}),
                             ({}, {'finish_reason': 'stop'}), ({}, {'token_ids': [7]})):
            with self.subTest(delta=delta, extra=extra):
                error = self.rejected(TEXT, STOP, chunk_json(delta=delta, **extra))
                self.assertEqual((error.layer, error.kind), ('protocol', 'event_after_close'))
        chunks = ChatChunks(spec=WEATHER)
        for data in (opening(), arguments('{"city": "Paris"'), chunk_json(finish_reason='tool_calls')):
            chunks.accept(data)
        with self.assertRaises(StreamError) as caught:
            chunks.accept(arguments('}'))
        self.assertEqual(caught.exception.kind, 'event_after_close')
        error = self.rejected(TEXT, STOP, DONE, json.dumps({'choices': [{'index': 0, 'delta': {}}]}))
        self.assertEqual(error.kind, 'event_after_terminal')

    def test_each_violation_names_its_layer(self):
        cases = [
            (['{"choices": [{"index": 0, "delta": {}}, {"index": 1, "delta": {}}]}'], 'protocol', 'one choice'),
            ([chunk_json(index=1)], 'protocol', 'index 0'),
            ([chunk_json(delta={'tool_calls': [{'index': 0}]})], 'protocol', 'tool call'),
            ([chunk_json(delta={'function_call': {'name': 'f'}})], 'protocol', 'a legacy function_call delta'),
            ([chunk_json(delta={'content': 7})], 'protocol', 'delta.content to be a string'),
            ([chunk_json(finish_reason='stop'), chunk_json(delta={'content': 'late'})], 'protocol',
             'after finish_reason=stop'),
            ([chunk_json(finish_reason='stop'), chunk_json(finish_reason='stop')], 'protocol', 'second finish'),
            (['[DONE]', chunk_json()], 'protocol', 'after [DONE]'),
            (['{"choices": [], "usage": {"completion_tokens": -1}}'], 'protocol', 'completion_tokens'),
            (['{"choices": [], "usage": {"completion_tokens": true}}'], 'protocol', 'completion_tokens'),
            (['{"choices": [], "usage": {"prompt_tokens": 3}}'], 'protocol', 'completion_tokens'),
            (['[1, 2]'], 'protocol', 'JSON object'),
            (['{invalid}'], 'protocol', 'malformed JSON'),
            (['[' * 20_000], 'protocol', 'malformed JSON'),
            (['{"error": {"message": "boom", "type": "InternalServerError", "code": 500}}'], 'application',
             "'boom' (InternalServerError 500)"),
        ]
        for events, layer, words in cases:
            with self.subTest(events=events[-1][:40]):
                error = self.rejected(*events)
                self.assertEqual(error.layer, layer)
                self.assertIn(words, error.message)

    def test_server_error_message_is_bounded(self):
        error = stream_client._server_error_fields({'error': {'message': 'x' * 5000, 'type': 'T', 'code': 500}})
        self.assertEqual((len(error['message']), error['type'], error['code']), (1000, 'T', 500))
        self.assertEqual(stream_client._server_error_fields({'object': 'error', 'message': 'flat', 'code': 404}),
                         {'message': 'flat', 'type': None, 'code': 404})

    def test_error_event_keeps_the_servers_fields(self):
        with self.assertRaises(StreamError) as caught:
            ChatChunks().accept('{"error": "Unauthorized"}')
        self.assertEqual(caught.exception.server_error, {'message': 'Unauthorized', 'type': None, 'code': None})

    def test_outcome_needs_done_stop_and_visible_text(self):
        def outcome(*events):
            chunks = ChatChunks()
            for data in events:
                chunks.accept(data)
            return message_of(chunks.outcome())
        text = chunk_json(delta={'content': 'hi'})
        self.assertIsNone(outcome(text, chunk_json(finish_reason='stop'), '[DONE]'))
        self.assertIn('EOF before [DONE] after 1 content event', outcome(text, chunk_json(finish_reason='stop')))
        self.assertIn('without a finish_reason', outcome(text, '[DONE]'))
        self.assertIn('finish_reason=length', outcome(text, chunk_json(finish_reason='length'), '[DONE]'))
        self.assertIn('tool call', outcome(text, chunk_json(finish_reason='tool_calls'), '[DONE]'))
        self.assertIn('got finish_reason=abort', outcome(text, chunk_json(finish_reason='abort'), '[DONE]'))
        blank = chunk_json(delta={'content': ' \n'})
        self.assertIn('no visible text', outcome(blank, chunk_json(finish_reason='stop'), '[DONE]'))

    def test_reasoning_is_kept_apart_from_the_answer(self):
        chunks = ChatChunks()
        self.assertEqual(chunks.accept(chunk_json(delta={'reasoning': 'think'})), ('', 'think', ''))
        self.assertEqual(chunks.accept(chunk_json(delta={'reasoning_content': 'more'})), ('', 'more', ''))
        self.assertEqual(chunks.accept(chunk_json(delta={'reasoning': 'a', 'reasoning_content': 'a'})), ('', 'a', ''))
        self.assertEqual((chunks.text, chunks.reasoning, chunks.content_events), ('', 'thinkmorea', 0))

    def test_text_content_finish_in_one_chunk_and_null_fields_are_accepted(self):
        chunks = ChatChunks()
        chunks.accept('{"choices": [{"index": 0, "delta": {"role": "assistant", "content": null}, '
                      '"logprobs": null, "finish_reason": null}], "usage": null}')
        chunks.accept(chunk_json(delta={'content': 'Ex'}, finish_reason='length'))
        self.assertEqual((chunks.text, chunks.finish_reason), ('Ex', 'length'))


def capture_events(name: str) -> list[tuple[str, str]]:
    """The (type, data) events of a captured Responses stream."""
    return stream_client.TypedEvents().feed(dechunk(split_capture(TRACES / name)[1]))


R2 = 'r2_responses_stream_stopstring_completed.http'


def with_data(event: tuple[str, str], **changes) -> tuple[str, str]:
    """An event with some keys of its data replaced."""
    return event[0], json.dumps({**json.loads(event[1]), **changes})


class ResponseEventsTests(unittest.TestCase):
    def outcome(self, events: list, **expect) -> tuple[str | None, str]:
        """(layer, message) of the first failure, or (None, '') when the response is a finished answer."""
        validator = stream_client.ResponseEvents(**expect)
        try:
            for event in events:
                validator.accept(event)
        except StreamError as exc:
            return exc.layer, exc.message
        problem = message_of(validator.outcome())
        return ('application', problem) if problem else (None, '')

    def test_a_real_completed_response_is_finished_at_every_chunking(self):
        payload = dechunk(split_capture(TRACES / R2)[1])
        for name, chunks in feedings(payload):
            parser, validator = stream_client.TypedEvents(), stream_client.ResponseEvents()
            text = ''.join(validator.accept(event)[0] for chunk in chunks for event in parser.feed(chunk))
            self.assertEqual((text, message_of(validator.outcome()), validator.terminal), ('Ex7rEx7untrgExp', None,
                                                                                        'response.completed'), name)

    def test_each_broken_rule_names_its_layer(self):
        events = capture_events(R2)  # 0 created, 1 in_progress, 2 item added, 3 part added, 4-12 deltas, 13 text done,
        delta = events[5]            # 14 part done, 15 item done, 16 completed
        item = json.loads(events[2][1])['item']
        cases = {
            'an event lost': (events[:5] + events[6:], 'protocol', 'expected sequence_number 5, got 6'),
            'an event repeated': (events[:6] + [events[5]] + events[6:], 'protocol', 'expected sequence_number 6, got 5'),
            'no sequence_number': ([with_data(events[0], sequence_number=None)], 'protocol',
                                   'expected sequence_number 0, got None'),
            'event field and type differ': ([('message', events[0][1])], 'protocol',
                                            "its event field says 'message' but its data says type 'response.created'"),
            'a delta changed, numbering kept': (events[:5] + [with_data(delta, delta='X')] + events[6:], 'protocol',
                                                "response.output_text.done says the text is 'Ex7rEx7untrgExp'"),
            'the terminal text disagrees': (events[:13] + [events[13], events[14], events[15]]
                                            + [events[16][:1] + (events[16][1].replace('Ex7rEx7untrgExp', 'Ex7r'),)],
                                            'protocol', "response.completed says the text is 'Ex7r'"),
            'no terminal event': (events[:16], 'application',
                                  'EOF before a terminal event (response.completed) after 9 content events'),
            'an event after the terminal': (events + [with_data(delta, sequence_number=17)], 'protocol',
                                            "event 'response.output_text.delta' after the terminal event "
                                            'response.completed'),
            'a function call': (events[:2] + [with_data(events[2], item={**item, 'type': 'function_call'})],
                                'protocol', 'a function call arrived in event 3, but the request offered no tools'),
            'function call arguments': (events[:2] + [('response.function_call_arguments.delta', json.dumps(
                {'type': 'response.function_call_arguments.delta', 'sequence_number': 2, 'delta': '{}'}))],
                'protocol', 'response.function_call_arguments.delta in event 3 is for output_index None, where no '
                            'function call opened'),
            'response.failed': (events[:2] + [('response.failed', json.dumps(
                {'type': 'response.failed', 'sequence_number': 2,
                 'response': {'status': 'failed', 'error': {'code': 'server_error', 'message': 'engine died'}}}))],
                'application', "server sent response.failed: 'engine died' (server_error)"),
            'an error event': (events[:2] + [('error', json.dumps({'type': 'error', 'sequence_number': 2,
                                                                   'code': 'rate_limit', 'message': 'slow down'}))],
                               'application', "server sent an error event: 'slow down' (rate_limit)"),
            "OpenAI's response.incomplete": (events[:16] + [('response.incomplete', events[16][1].replace(
                '"response.completed"', '"response.incomplete"').replace('"status":"completed"', '"status":"incomplete"')
                .replace('"incomplete_details":null', '"incomplete_details":{"reason":"content_filter"}'))],
                'application', "not completed: response.incomplete carries status 'incomplete' "
                               '(incomplete_details.reason=content_filter)'),
        }
        for name, (feed, layer, words) in cases.items():
            with self.subTest(name):
                got_layer, message = self.outcome(feed)
                self.assertEqual(got_layer, layer, message)
                self.assertIn(words, message)

    def test_the_server_error_is_kept_with_the_failure(self):
        with self.assertRaises(StreamError) as caught:
            stream_client.ResponseEvents().accept(('error', '{"type": "error", "sequence_number": 0, '
                                                            '"code": "server_error", "message": "boom"}'))
        self.assertEqual(caught.exception.server_error, {'message': 'boom', 'type': None, 'code': 'server_error'})

    def test_reasoning_deltas_are_kept_apart(self):
        # a delta needs its response and its reasoning item opened first (the grammar)
        events = responses_events({'type': 'response.created', 'response': {'id': 'resp_1'}},
                                  {'type': 'response.output_item.added', 'output_index': 0,
                                   'item': {'type': 'reasoning', 'id': 'rs_1'}},
                                  {'type': 'response.reasoning_text.delta', 'delta': 'hmm', 'output_index': 0,
                                   'content_index': 0})
        validator = stream_client.ResponseEvents()
        self.assertEqual([validator.accept(event) for event in events][-1], ('', 'hmm', ''))
        self.assertEqual((validator.reasoning, validator.content_events), ('hmm', 0))

    def test_a_fixed_length_load_expects_the_budget_to_end_it(self):
        r1 = capture_events('r1_responses_stream_max16_incomplete.http')
        self.assertEqual(self.outcome(r1, expect_finish='length', max_tokens=16), (None, ''))
        self.assertIn('after 16 output tokens, not the 17 requested',
                      self.outcome(r1, expect_finish='length', max_tokens=17)[1])
        self.assertIn('expected status "incomplete" with incomplete_details.reason=max_output_tokens',
                      self.outcome(capture_events(R2), expect_finish='length', max_tokens=32)[1])


WEATHER = stream_client.AnswerSpec((('get_weather', stream_client.JsonSchema(
    fixture_server.TOOLS[0]['function']['parameters'])),), 'auto')


def opening(index: int = 0, name: str = 'get_weather', call_id: str = 'c1') -> str:
    return chunk_json(delta={'tool_calls': [{'id': call_id, 'type': 'function', 'index': index,
                                             'function': {'name': name}}]})


def arguments(text: str, index: int = 0, **extra) -> str:
    return chunk_json(delta={'tool_calls': [{'index': index, 'function': {'arguments': text}, **extra}]})


class ToolCallTests(unittest.TestCase):
    """Tool calls and JSON answers, without a socket: the chat and Responses assembly rules, the
    finished-answer rules, strict JSON and the schema subset."""

    def outcome(self, spec: stream_client.AnswerSpec, *events: str) -> str | None:
        chunks = ChatChunks(spec=spec)
        for data in events:
            chunks.accept(data)
        return message_of(chunks.outcome())

    def test_each_broken_chat_tool_delta_is_a_protocol_failure_naming_the_index_and_event(self):
        cases = {
            'arguments for a call never opened': ([arguments('{}')],
                                                  'tool call 0 got arguments in event 1 but was never opened'),
            'an index that skips': ([opening(), opening(2, call_id='c3')],
                                    'tool call index 2 in event 2 skips ahead: the next call to open was index 1'),
            'a second id': ([opening(), arguments('{}', id='c9')],
                            "tool call 0 (get_weather) got a second id 'c9' in event 2; it opened as 'c1'"),
            'a name that changes': ([opening(), chunk_json(delta={'tool_calls': [{'index': 0, 'function': {
                'name': 'get_time'}}]})], "tool call 0 changed its name from 'get_weather' to 'get_time' in event 2"),
            'text inside a call': ([opening(), chunk_json(delta={'content': 'hello'})],
                                   "content text 'hello' arrived inside tool call 0 (get_weather), in event 2"),
            'an index that is not a number': ([chunk_json(delta={'tool_calls': [{'index': '0'}]})],
                                              'expected a tool call delta with an integer index'),
            'no tools offered': ([opening()], 'tool call deltas arrived in event 1, but the request offered no tools'),
        }
        for name, (events, words) in cases.items():
            with self.subTest(name):
                chunks = ChatChunks(spec=stream_client.AnswerSpec() if name == 'no tools offered' else WEATHER)
                with self.assertRaises(StreamError) as caught:
                    for data in events:
                        chunks.accept(data)
                self.assertEqual(caught.exception.layer, 'protocol')
                self.assertIn(words, caught.exception.message)

    def test_a_finished_tool_answer_keeps_the_tool_choice_and_valid_arguments(self):
        def spec(choice: str) -> stream_client.AnswerSpec:
            return dataclasses.replace(WEATHER, tool_choice=choice)
        stop, calls, done = chunk_json(finish_reason='stop'), chunk_json(finish_reason='tool_calls'), '[DONE]'
        paris = [opening(), arguments('{"city": '), arguments('"Paris"}')]
        text = chunk_json(delta={'content': 'It rains.'})
        cases = {
            'a call under auto': (spec('auto'), [*paris, calls, done], None),
            'text under auto: the model may choose not to call': (spec('auto'), [text, stop, done], None),
            'a named call ends with stop': (spec('get_weather'), [*paris, stop, done], None),
            'a call ending in stop under auto': (spec('auto'), [*paris, stop, done],
                                                 'expected finish_reason=tool_calls after 1 tool call, '
                                                 'got finish_reason=stop'),
            'text under required': (spec('required'), [text, stop, done],
                                    'tool_choice required asked for a tool call, but the answer is text '
                                    '(finish_reason=stop and [DONE] arrived)'),
            'a call under none': (spec('none'), [*paris, calls, done], 'tool_choice none, but 1 tool call arrived'),
            'tool_calls without a call': (spec('auto'), [text, calls, done],
                                          'finish_reason=tool_calls, but no tool call arrived'),
            'an undeclared tool': (spec('auto'), [opening(name='get_time'), arguments('{}'), calls, done],
                                   "tool call 0 (get_time): 'get_time' is not a tool the request offered (get_weather)"),
            'the budget ends inside a call': (spec('auto'), [opening(), arguments('{"ci'),
                                                             chunk_json(finish_reason='length'), done],
                                              'output budget exhausted (finish_reason=length) inside tool call 0 '
                                              '(get_weather)'),
            'NaN arguments': (spec('auto'), [opening(), arguments('{"city": NaN}'), calls, done],
                              'tool call 0 (get_weather): the arguments are not JSON (NaN is not JSON)'),
            'a bare number': (spec('auto'), [opening(), arguments('3'), calls, done],
                              "tool call 0 (get_weather): arguments are not a JSON object: '3'"),
            'trailing text': (spec('auto'), [opening(), arguments('{"city": "Paris"} ok'), calls, done],
                              'tool call 0 (get_weather): the arguments are not JSON (Extra data'),
            'a second call that fails': (spec('auto'), [*paris, opening(1, call_id='c2'), arguments('{"city": 3}', 1),
                                                        calls, done],
                                         'tool call 1 (get_weather): the arguments do not match its parameters: '
                                         '$.city: expected string, got 3'),
        }
        for name, (answer_spec, events, words) in cases.items():
            with self.subTest(name):
                problem = self.outcome(answer_spec, *events)
                self.assertEqual(problem is None, words is None, problem)
                self.assertTrue((problem or '').startswith(words or ''), problem)

    def test_a_json_answer_parses_strictly_and_matches_its_schema(self):
        schema = stream_client.AnswerSpec(json_schema=stream_client.JsonSchema(fixture_server.JSON_SCHEMA))
        stop = chunk_json(finish_reason='stop')
        cases = {'{"city": "Paris"}': None,
                 '{"city": 3}': 'the JSON answer does not match the schema: $.city: expected string, got 3',
                 '{"city": "Paris"': 'the answer is not JSON (Expecting',
                 '{"city": "Paris", "city": "Rome"}': "the answer is not JSON (the key 'city' appears twice)",
                 '   ': 'the answer is not JSON'}
        for text, words in cases.items():
            with self.subTest(text=text):
                problem = self.outcome(schema, chunk_json(delta={'content': text}), stop, '[DONE]')
                self.assertIn(words or '', problem or '')
                self.assertEqual(problem is None, words is None)

    def test_strict_json_refuses_what_json_loads_lets_through(self):
        for text in ('NaN', '-Infinity', '{"a": Infinity}', '1e999', '26e00008859', '{"a": 1, "a": 2}', '{} {}'):
            with self.subTest(text=text), self.assertRaises(ValueError):
                stream_client.strict_json(text)
        self.assertEqual(stream_client.strict_json(' {"a": [1, 2.5, null, true]} '), {'a': [1, 2.5, None, True]})

    def test_the_schema_subset(self):
        JsonSchema = stream_client.JsonSchema
        defs = {'$defs': {'city': {'type': 'string', 'minLength': 2}}, 'definitions': {'n': {'type': 'integer'}}}
        cases = [
            ({'type': ['string', 'null']}, None, None), ({'type': ['string', 'null']}, 1, '$: expected string or null'),
            ({'type': 'integer'}, 1.0, None), ({'type': 'integer'}, True, '$: expected integer, got true'),
            ({'enum': [1, 'a']}, True, '$: expected one of [1, "a"], got true'), ({'const': 0}, 0.0, None),
            ({'items': {'type': 'string'}}, ['a', 2], '$[1]: expected string, got 2'),
            ({'minItems': 2}, [1], '$: expected at least 2 items, got 1 item'), ({'maxItems': 1}, [1, 2], 'at most 1 item'),
            ({'minLength': 2}, 'a', 'at least 2 characters'), ({'maxLength': 1}, 'ab', 'at most 1 character, got 2 characters'),
            ({'minimum': 1}, 0, 'a number at least 1'), ({'maximum': 1}, 2, 'a number at most 1'),
            ({'exclusiveMinimum': 1}, 1, 'more than 1'), ({'maximum': 1, 'exclusiveMaximum': True}, 1, 'less than 1'),
            ({'pattern': '^[A-Z]'}, 'paris', "expected a match of '^[A-Z]'"),
            ({'anyOf': [{'type': 'string'}, {'type': 'null'}]}, 1, '$: matches none of anyOf'),
            ({'oneOf': [{'type': 'integer'}, {'type': 'number'}]}, 1, 'matches 2 of oneOf, expected exactly 1'),
            ({'allOf': [{'type': 'number'}, {'minimum': 5}]}, 4, 'a number at least 5'),
            ({**defs, 'properties': {'c': {'$ref': '#/$defs/city'}, 'n': {'$ref': '#/definitions/n'}}},
             {'c': 'X', 'n': 1}, '$.c: expected at least 2 characters'),
            ({'additionalProperties': False, 'properties': {'a': {}}}, {'a': 1, 'b': 2},
             '$.b: not allowed (additionalProperties is false)'),
            ({'additionalProperties': {'type': 'string'}}, {'odd key': 1}, '$["odd key"]: expected string, got 1'),
            ({'required': ['a']}, {}, '$.a: required, but missing'), (True, 'anything', None),
            (False, 1, '$: no value is allowed here'),
        ]
        for schema, value, words in cases:
            with self.subTest(schema=schema, value=value):
                problem = JsonSchema(schema).problem(value)
                self.assertEqual(problem is None, words is None, problem)
                self.assertIn(words or '', problem or '')
        self.assertEqual(JsonSchema({'format': 'date', 'properties': {'a': {'x-unit': 'km'}}}).unchecked,
                         ['format at # (an annotation, not asserted)', 'x-unit at #/properties/a'])
        for bad in ({'type': 'str'}, {'required': 'a'}, {'pattern': '('}, {'$ref': 'http://x/s.json'},
                    {'$ref': '#/$defs/none'}, {'minLength': -1}, {'properties': {'a': 3}}, [1]):
            with self.subTest(bad=bad), self.assertRaises(stream_client.SchemaError):
                JsonSchema(bad)

    def test_each_broken_responses_function_call_rule_is_a_protocol_failure(self):
        events = capture_events('r9_responses_tool_valid_empty_object.http')
        spec = stream_client.AnswerSpec((('get_time', None),), 'required')
        kinds = [kind for kind, _ in events]
        item_done, terminal = kinds.index('response.output_item.done'), len(events) - 1

        def changed(at: int, old: str, new: str) -> list:
            return events[:at] + [(events[at][0], events[at][1].replace(old, new))] + events[at + 1:]
        cases = {
            'the real stream': (events, None),
            'output_item.done disagrees': (changed(item_done, '"arguments":"{}"', '"arguments":"[]"'),
                                           "response.output_item.done says tool call 0 (get_time) has the arguments "
                                           "'[]', but its deltas assembled '{}'"),
            'the terminal output disagrees': (changed(terminal, '"name":"get_time"', '"name":"get_day"'),
                                              'response.completed lists the function calls'),
            'no call_id': (changed(2, '"call_id":"chatcmpl-tool-a05e51ffe044707e",', ''),
                           'a function call opened in event 3 without a call_id and a name'),
            'a delta for another output': (changed(3, '"output_index":0', '"output_index":1'),
                                           'is for output_index 1, where no function call opened'),
        }
        for name, (stream_events, words) in cases.items():
            with self.subTest(name):
                validator = stream_client.ResponseEvents(spec=spec)
                try:
                    for event in stream_events:
                        validator.accept(event)
                except StreamError as exc:
                    self.assertEqual((exc.layer, words is not None), ('protocol', True), exc)
                    self.assertIn(words, exc.message)
                else:
                    self.assertIsNone(words, f'{name} was accepted')
                    self.assertIsNone(message_of(validator.outcome()))


def message_event(kind: str, **body) -> tuple[str, str]:
    return kind, json.dumps({'type': kind, **body})


def text_delta(text: str, index: int = 0) -> tuple[str, str]:
    return message_event('content_block_delta', delta={'type': 'text_delta', 'text': text}, index=index)


MESSAGE_START = message_event('message_start', message={'id': 'msg_1', 'type': 'message', 'content': []})
TEXT_BLOCK = message_event('content_block_start', content_block={'type': 'text', 'text': ''}, index=0)
TOOL_BLOCK = message_event('content_block_start', content_block={'type': 'tool_use', 'id': 'toolu_1',
                                                                 'name': 'get_weather', 'input': {}}, index=0)


def message_end(reason: str = 'end_turn', index: int = 0, tokens: int = 2) -> list[tuple[str, str]]:
    return [message_event('content_block_stop', index=index),
            message_event('message_delta', delta={'stop_reason': reason, 'stop_sequence': None},
                          usage={'output_tokens': tokens}),
            message_event('message_stop')]


DRAFT_7 = 'http://json-schema.org/draft-07/schema#'


class JsonSchemaTests(unittest.TestCase):
    """JSON Schema drafts 2020-12 and 7 without a socket: each keyword's verdict and message, references
    within the document, ECMA-262 patterns, and what is refused. The official suites run in
    benchmarks/conformance.py, not here."""

    def verdicts(self, cases: list) -> None:
        for schema, value, words in cases:
            with self.subTest(schema=schema, value=value):
                problem = stream_client.JsonSchema(schema).problem(value)
                self.assertEqual(problem is None, words is None, problem)
                self.assertIn(words or '', problem or '')

    def refused(self, schema: object, kind: str, words: str) -> None:
        with self.subTest(schema=schema), self.assertRaises(stream_client.SchemaError) as caught:
            stream_client.JsonSchema(schema)
        self.assertEqual(caught.exception.kind, kind, caught.exception)
        self.assertIn(words, str(caught.exception))
        self.assertNotIn('\n', str(caught.exception))

    def test_the_applicator_and_validation_keywords(self):
        self.verdicts([
            ({'not': {'type': 'string'}}, 'a', '$: expected not to match the schema under "not", got "a"'),
            ({'not': {'type': 'string'}}, 1, None),
            ({'if': {'minimum': 10}, 'then': {'multipleOf': 5}, 'else': {'maximum': 3}}, 12, 'a multiple of 5'),
            ({'if': {'minimum': 10}, 'then': {'multipleOf': 5}, 'else': {'maximum': 3}}, 4, 'a number at most 3'),
            ({'if': {'minimum': 10}, 'then': {'multipleOf': 5}, 'else': {'maximum': 3}}, 15, None),
            ({'dependentRequired': {'a': ['b']}}, {'a': 1}, '$.b: required when $.a is present, but missing'),
            ({'dependentSchemas': {'a': {'required': ['c']}}}, {'a': 1}, '$.c: required, but missing'),
            ({'prefixItems': [{'type': 'string'}], 'items': {'type': 'integer'}}, ['a', 1, 'b'],
             '$[2]: expected integer, got "b"'),
            ({'prefixItems': [{'type': 'string'}], 'items': False}, ['a'], None),
            ({'contains': {'type': 'integer'}, 'minContains': 2}, [1, 'a'], 'expected at least 2 items matching'),
            ({'contains': {'type': 'integer'}, 'maxContains': 1}, [1, 2], 'expected at most 1 item matching'),
            ({'contains': {'type': 'integer'}, 'minContains': 0}, ['a'], None),
            ({'uniqueItems': True}, ['a', 'b', 'a'], '$[2]: expected unique items, got "a" twice'),
            ({'uniqueItems': True}, [1, 1.0], '$[1]: expected unique items, got 1.0 twice'),
            ({'uniqueItems': True}, [1, True, [0], [False], {'a': 1, 'b': 2}, {'b': 2, 'a': 1}],
             '$[5]: expected unique items'),
            ({'uniqueItems': True}, [1, True, 0, False, [0], [False]], None),
            ({'multipleOf': 0.01}, 19.99, None), ({'multipleOf': 0.0001}, 0.0075, None),
            ({'multipleOf': 0.01}, 0.075, '$: expected a multiple of 0.01, got 0.075'),
            ({'multipleOf': 3}, 10 ** 30 + 1, 'a multiple of 3'), ({'multipleOf': 1e-8}, 12391239123, None),
            ({'patternProperties': {'^x-': {'type': 'string'}}, 'additionalProperties': False},
             {'x-a': 'ok', 'b': 1}, '$.b: not allowed (additionalProperties is false)'),
            ({'patternProperties': {'^x-': {'type': 'string'}}}, {'x-a': 2}, '$["x-a"]: expected string, got 2'),
            ({'propertyNames': {'maxLength': 3}}, {'abcd': 1}, 'the name of $.abcd: expected at most 3 characters'),
            ({'minProperties': 2}, {'a': 1}, '$: expected at least 2 properties, got 1'),
            ({'maxProperties': 1}, {'a': 1, 'b': 2}, 'expected at most 1 property, got 2'),
            ({'const': {'a': [1.0]}}, {'a': [1]}, None), ({'const': 1}, True, '$: expected 1, got true'),
            ({'enum': [[0]]}, [False], 'expected one of [[0]], got [false]'), ({'enum': []}, 1, 'expected one of []'),
            ({'minLength': 2.0, 'maxItems': 1.0}, 'ab', None), ({'minItems': 2.0}, [1], 'expected at least 2 items'),
            ({'properties': {'a': False}}, {'a': 1}, '$.a: no value is allowed here, got 1'),
            ({'items': True, 'maxItems': 2}, [1, 2, 3], 'expected at most 2 items, got 3 items'),
        ])

    def test_unevaluated_keywords_see_what_every_applicator_evaluated(self):
        schema = {'type': 'object', 'properties': {'kind': {}},
                  'allOf': [{'properties': {'a': {}}}],
                  'anyOf': [{'properties': {'b': {}}, 'required': ['b']}, {'patternProperties': {'^c': {}}}],
                  'if': {'properties': {'kind': {'const': 'x'}}}, 'then': {'properties': {'x': {}}},
                  '$ref': '#/$defs/more', '$defs': {'more': {'properties': {'d': {}}}},
                  'unevaluatedProperties': False}
        self.verdicts([
            (schema, {'kind': 'x', 'a': 1, 'b': 2, 'c1': 3, 'd': 4, 'x': 5}, None),
            (schema, {'kind': 'y', 'x': 5}, '$.x: not allowed (unevaluatedProperties is false)'),
            (schema, {'e': 1}, '$.e: not allowed (unevaluatedProperties is false)'),
            ({'anyOf': [{'properties': {'a': {}}, 'allOf': [False]}, {'properties': {'b': {}}}],
              'unevaluatedProperties': False}, {'a': 1, 'b': 2}, '$.a: not allowed'),  # a failed branch evaluates nothing
            ({'not': {'not': {'properties': {'a': {}}}}, 'unevaluatedProperties': False}, {'a': 1}, '$.a: not allowed'),
            ({'prefixItems': [{}], 'allOf': [{'contains': {'const': 'z'}}], 'unevaluatedItems': {'type': 'integer'}},
             [0, 'z', 2, 'y'], '$[3]: expected integer, got "y"'),
            ({'prefixItems': [{}], 'allOf': [{'contains': {'const': 'z'}}], 'unevaluatedItems': {'type': 'integer'}},
             [0, 'z', 2], None),
        ])

    def test_references_within_the_document(self):
        self.verdicts([
            ({'$defs': {'a/b': {'type': 'integer'}, 'c~d': {'type': 'string'}, 'e%f': {'type': 'null'}},
              'prefixItems': [{'$ref': '#/$defs/a~1b'}, {'$ref': '#/$defs/c~0d'}, {'$ref': '#/$defs/e%25f'}]},
             [1, 'x', 0], '$[2]: expected null, got 0'),
            ({'properties': {'next': {'$ref': '#'}}, 'required': ['v']}, {'v': 1, 'next': {'v': 2, 'next': {}}},
             '$.next.next.v: required, but missing'),
            ({'$defs': {'n': {'$anchor': 'num', 'type': 'number'}}, 'items': {'$ref': '#num'}}, [1, 'a'],
             '$[1]: expected number, got "a"'),
            ({'$id': 'https://example.com/root', '$defs': {'s': {'$id': 'str', 'type': 'string'}},
              '$ref': 'str'}, 3, '$: expected string, got 3'),
            ({'$schema': DRAFT_7, 'items': [{'type': 'integer'}, {'$ref': '#/items/0'}]}, [1, 'a'],
             '$[1]: expected integer, got "a"'),
            ({'$ref': '#/$defs/a', '$defs': {'a': {'$ref': '#/$defs/b'}, 'b': {'type': 'boolean'}}}, 1,
             '$: expected boolean, got 1'),
            ({'$ref': '#/$defs/loop', '$defs': {'loop': {'$ref': '#/$defs/loop'}}}, 1,
             'the schema refers to itself more than 256 times here'),
            ({'$id': 'https://example.com/root', '$ref': 'list',  # the outermost $dynamicAnchor "items" wins
              '$defs': {'items': {'$dynamicAnchor': 'items', 'type': 'string'},
                        'list': {'$id': 'list', 'items': {'$dynamicRef': '#items'},
                                 '$defs': {'items': {'$dynamicAnchor': 'items'}}}}}, ['a', 1],
             '$[1]: expected string, got 1'),
            ({'$dynamicAnchor': 'node', 'properties': {'kids': {'items': {'$dynamicRef': '#node'}}},
              'type': 'object'}, {'kids': [{'kids': [3]}]}, '$.kids[0].kids[0]: expected object, got 3'),
        ])

    def test_draft_7_keeps_its_own_rules(self):
        self.verdicts([
            ({'$schema': DRAFT_7, '$ref': '#/definitions/s', 'definitions': {'s': {'type': 'string'}},
              'minLength': 5}, 'ab', None),  # $ref overrides its siblings
            ({'$ref': '#/$defs/s', '$defs': {'s': {'type': 'string'}}, 'minLength': 5}, 'ab',
             'expected at least 5 characters'),  # 2020-12: it does not
            ({'$schema': DRAFT_7, 'items': [{'type': 'string'}], 'additionalItems': {'type': 'integer'}},
             ['a', 'b'], '$[1]: expected integer, got "b"'),
            ({'$schema': DRAFT_7, 'dependencies': {'a': ['b'], 'c': {'required': ['d']}}}, {'c': 1},
             '$.d: required, but missing'),
            ({'$schema': DRAFT_7, 'prefixItems': [{'type': 'string'}]}, [1], None),  # not a draft 7 keyword
            ({'$schema': 'http://json-schema.org/draft-04/schema#', 'maximum': 1, 'exclusiveMaximum': True}, 1,
             'less than 1'),
        ])
        self.assertEqual(stream_client.JsonSchema({'$schema': DRAFT_7, 'prefixItems': [], 'properties': {
            'a': {'$ref': '#', 'minLength': 5, 'title': 'A'}}}).unchecked,
            ['prefixItems at #', 'minLength at #/properties/a (ignored beside $ref, as draft 7 says)'])

    def test_patterns_mean_what_ecma_262_says(self):
        self.verdicts([
            ({'pattern': '^[a-z]+$'}, 'abc\n', "$: expected a match of '^[a-z]+$', got \"abc\\n\""),
            ({'pattern': '^\\d+$'}, '\u0661\u0662', 'expected a match'), ({'pattern': '^\\d+$'}, '12', None),
            ({'pattern': '^\\w$'}, '\u00e9', 'expected a match'), ({'pattern': '^\\W$'}, '\u00e9', None),
            ({'pattern': '^\\s$'}, '\ufeff', None), ({'pattern': '^\\S$'}, '\ufeff', 'expected a match'),
            ({'pattern': '^\\s$'}, '\x1c', 'expected a match'),  # Python's \s has U+001C; ECMA-262's does not
            ({'pattern': '^.$'}, '\u2028', 'expected a match'), ({'pattern': '^.$'}, '\U0001f600', None),
            ({'pattern': '^\\p{Letter}+$'}, '\u00e9cole', None), ({'pattern': '^\\p{L}$'}, '1', 'expected a match'),
            ({'pattern': '^\\p{digit}+$'}, '\u0661', None), ({'pattern': '^[^\\S ]$'}, '\t', None),
            ({'pattern': '^[^\\S ]$'}, ' ', 'expected a match'), ({'pattern': '^\\cC\\u{1F600}$'}, '\x03\U0001f600', None),
            ({'pattern': 'es'}, 'test', None), ({'pattern': '^a{,2}$'}, 'a{,2}', None),
            ({'patternProperties': {'^\\d+$': True}, 'additionalProperties': False}, {'\u0661': 1}, 'not allowed'),
        ])
        for pattern, words in (('(a)\\1', 'the backreference \\1 is not supported'),
                               ('\\p{Script=Greek}', 'the property class \\p{Script=Greek} is not supported'),
                               ('(?<=a+)b', 'cannot be checked here'), ('\\k<n>', 'named backreference')):
            self.refused({'pattern': pattern}, 'unsupported', words)
        for pattern, words in (('(?i)a', 'the group (?i is not ECMA-262'), ('\\a', 'the escape \\a is not ECMA-262'),
                               ('a**', 'nothing to repeat'), ('[z-a]', 'out of order'), ('[a', 'never closed')):
            self.refused({'pattern': pattern}, 'invalid', words)
        self.assertIs(stream_client._ecma_pattern('^x$'), stream_client._ecma_pattern('^x$'))  # compiled once

    def test_what_is_refused_and_what_is_only_listed(self):
        for schema, kind, words in (
                ({'$ref': 'https://example.com/s.json'}, 'remote', "$ref 'https://example.com/s.json' is another "
                                                                   'document, which is never fetched'),
                ({'$ref': 'other.json#/a'}, 'remote', 'never fetched'),
                ({'$ref': 'urn:uuid:1234'}, 'remote', 'never fetched'),
                ({'$schema': 'https://example.com/meta'}, 'remote', 'another meta-schema'),
                ({'$ref': '#/$defs/a', '$defs': [1]}, 'invalid', '#/$defs: expected an object of schemas, got [1]'),
                ({'$ref': '#/$defs/none', '$defs': {}}, 'invalid', 'points to nothing in this schema'),
                ({'$ref': '#/required', 'required': ['a']}, 'invalid', 'which is not a schema'),
                ({'$ref': '#nowhere'}, 'invalid', 'names no $anchor'),
                ({'items': [{'type': 'integer'}, {'$ref': '#/items/0'}]}, 'invalid', "draft 7's items"),
                ({'minLength': 1.5}, 'invalid', 'expected a non-negative integer'),
                ({'multipleOf': 0}, 'invalid', 'expected a number above 0'),
                ({'type': ['string', 'string']}, 'invalid', 'expected one of null'),
                ({'$schema': 'https://json-schema.org/draft/2020-12/schema',
                  '$defs': {'a': {'$schema': DRAFT_7}}}, 'unsupported', 'one draft per document')):
            self.refused(schema, kind, words)
        checker = stream_client.JsonSchema({'properties': {'when': {'format': 'date-time', 'x-unit': 's'},
                                                           'blob': {'contentEncoding': 'base64'}}})
        self.assertEqual(checker.unchecked, ['format at #/properties/when (an annotation, not asserted)',
                                             'x-unit at #/properties/when',
                                             'contentEncoding at #/properties/blob (an annotation, not asserted)'])
        self.assertIsNone(checker.problem({'when': 'not a date'}))

    def test_the_schema_command_line(self):
        """--json-schema and --tools through the command line, against the fixture's JSON answer
        {"city": "Paris"} and its get_weather call with the same arguments."""
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        folder = Path(tmp.name)
        schemas = {'ok': {'type': 'object', 'properties': {'city': {'type': 'string', 'pattern': '^\\p{Lu}',
                                                                    'format': 'city'}}},
                   'short': {'properties': {'city': {'$ref': '#/$defs/name'}},
                             '$defs': {'name': {'maxLength': 3}}},
                   'unique': {'properties': {'city': {'enum': ['Rome', 'Lyon']}}},
                   'remote': {'properties': {'city': {'$ref': 'https://example.com/city.json'}}},
                   'list-ref': {'items': [{'type': 'integer'}, {'$ref': '#/items/0'}]},
                   'bad-defs': {'$ref': '#/$defs/a', '$defs': [1]}}
        for name, schema in schemas.items():
            (folder / f'{name}.json').write_text(json.dumps(schema))
            tool = [{'type': 'function', 'function': {'name': 'get_weather', 'parameters': schema}}]
            (folder / f'tools-{name}.json').write_text(json.dumps(tool))

        def run(args: tuple) -> subprocess.CompletedProcess:
            mode, flag, name = args
            file = f'{name}.json' if flag == '--json-schema' else f'tools-{name}.json'
            with Fixture(mode) as fixture:
                return run_cli('--url', fixture.url, '--model', 'synthetic-fixture', flag, file,
                               '--output', f'{mode}-{name}.json', cwd=tmp.name)
        cases = {
            ('json-ok', '--json-schema', 'ok'): (0, 'checked against its schema, and matching: the JSON answer'),
            ('tool-call', '--tools', 'ok'): (0, 'checked against its schema, and matching: tool call 0 (get_weather)'),
            ('json-ok', '--json-schema', 'short'): (1, '$.city: expected at most 3 characters, got 5 characters'),
            ('tool-call', '--tools', 'unique'): (1, '$.city: expected one of ["Rome", "Lyon"], got "Paris"'),
            ('json-ok', '--json-schema', 'remote'): (2, "--json-schema is a schema that needs another document: "
                                                        "#/properties/city/$ref: $ref 'https://example.com/city.json'"),
            ('tool-call', '--tools', 'remote'): (2, '--tools[0] (get_weather) has parameters that are a schema that '
                                                    'needs another document'),
            ('json-ok', '--json-schema', 'list-ref'): (2, "--json-schema is not a valid schema: #/items: a list of "
                                                          "schemas is draft 7's items"),
            ('json-ok', '--json-schema', 'bad-defs'): (2, '#/$defs: expected an object of schemas, got [1]'),
        }
        for (args, (status, words)), done in zip(cases.items(), in_threads(run, list(cases))):
            with self.subTest(args=args):
                self.assertEqual(done.returncode, status, done.stderr)
                self.assertIn(words, done.stderr)
                self.assertNotIn('Traceback', done.stderr)
                record = folder / f'{args[0]}-{args[2]}.json'
                self.assertEqual(record.exists(), status != 2)
                if status == 2:
                    self.assertEqual((done.stdout, done.stderr.count('\n')), ('', 1))
                if args[2] == 'ok':
                    self.assertIn('note: not checked against the schema: ', done.stderr)
                    self.assertIn('format at #/properties/city (an annotation, not asserted)', done.stderr)
                    self.assertEqual(json.loads(record.read_text())['unchecked_schema_keywords'],
                                     [f'{"json-schema" if args[1] == "--json-schema" else "tool get_weather"}: '
                                      'format at #/properties/city (an annotation, not asserted)'])
                else:
                    self.assertNotIn('not checked', done.stderr)
                    self.assertNotIn('and matching', done.stderr)

    def test_the_conformance_runner_says_when_the_suites_are_not_beside_it(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        checkout = Path(tmp.name) / 'checkout'
        (checkout / 'benchmarks').mkdir(parents=True)
        for name in ('stream_client.py', 'benchmarks/conformance.py'):
            (checkout / name).write_text((Path(CLIENT).parent / name).read_text())
        done = subprocess.run([sys.executable, 'benchmarks/conformance.py'], cwd=checkout, capture_output=True,
                              text=True, timeout=30)
        self.assertEqual((done.returncode, done.stdout.count('\n')), (0, 1), done.stderr)
        self.assertIn('conformance: skipped, the suites are not at', done.stdout)


class MessagesEventsTests(unittest.TestCase):
    """The Anthropic Messages API's stream rules, without a socket."""

    def run_events(self, events: list, spec: stream_client.AnswerSpec | None = None) -> stream_client.MessagesEvents:
        validator = stream_client.MessagesEvents(spec=spec)
        for event in events:
            validator.accept(event)
        return validator

    def test_a_finished_text_answer_and_what_the_record_takes_from_it(self):
        ping = message_event('ping')
        thinking = [message_event('content_block_start', content_block={'type': 'thinking', 'thinking': ''}, index=0),
                    message_event('content_block_delta', delta={'type': 'thinking_delta', 'thinking': 'hmm'}, index=0),
                    message_event('content_block_delta', delta={'type': 'signature_delta', 'signature': 'x'}, index=0),
                    message_event('content_block_stop', index=0)]
        text = [message_event('content_block_start', content_block={'type': 'text', 'text': ''}, index=1),
                text_delta('READY ', 1), ping, text_delta('\u2713', 1)]
        validator = self.run_events([ping, MESSAGE_START] + thinking + text + message_end(index=1, tokens=3))
        self.assertIsNone(message_of(validator.outcome()))
        fields = validator.fields()
        self.assertEqual((fields['text'], fields['reasoning_text'], fields['finish_reason'], fields['completion_tokens'],
                          fields['response_id'], fields['content_events']),
                         (ANSWER, 'hmm', 'end_turn', 3, 'msg_1', 2))

    def test_each_broken_rule_is_a_protocol_failure_naming_the_event(self):
        tools = WEATHER
        cases = {
            'the event line differs from the type': ([MESSAGE_START, ('content_block_start', TEXT_BLOCK[1]
                                                                      .replace('content_block_start', 'ping'))],
                                                     "event 2: its event field says 'content_block_start' but its data "
                                                     "says type 'ping'"),
            'an event before message_start': ([TEXT_BLOCK], 'content_block_start arrived in event 1, before '
                                                            'message_start'),
            'a second message_start': ([MESSAGE_START, MESSAGE_START], 'a second message_start in event 2'),
            'a delta for a block never started': ([MESSAGE_START, text_delta('x')],
                                                  'content_block_delta for block 0 in event 2, which never started'),
            'a delta after its block stopped': ([MESSAGE_START, TEXT_BLOCK, message_event('content_block_stop', index=0),
                                                 text_delta('x')], 'content_block_delta for block 0 in event 4, after '
                                                                   'its content_block_stop'),
            'a block index that skips': ([MESSAGE_START, TEXT_BLOCK[0:1] + (TEXT_BLOCK[1].replace('"index": 0',
                                                                                                  '"index": 2'),)],
                                         'content_block_start for block 2 in event 2: the next block was 0'),
            'a text_delta in a tool_use block': ([MESSAGE_START, TOOL_BLOCK, text_delta('x')],
                                                 'a text_delta in event 3 for block 0, a tool_use block'),
            'a block still open at message_delta': ([MESSAGE_START, TEXT_BLOCK, text_delta('x')] + message_end()[1:],
                                                   'message_delta in event 4 while block 0 was still open'),
            'an event after message_stop': ([MESSAGE_START, TEXT_BLOCK, text_delta('x')] + message_end() + [message_event('ping')],
                                            "event 'ping' after message_stop"),
            'a tool_use block nobody asked for': ([MESSAGE_START, TOOL_BLOCK], 'a tool_use block arrived in event 2, '
                                                                              'but the request offered no tools'),
        }
        for name, (events, words) in cases.items():
            with self.subTest(name):
                with self.assertRaises(StreamError) as caught:
                    self.run_events(events, None if 'nobody' in name else tools)
                self.assertEqual(caught.exception.layer, 'protocol')
                self.assertIn(words, caught.exception.message)

    def test_an_error_event_keeps_the_servers_type_and_message(self):
        error = message_event('error', error={'type': 'overloaded_error', 'message': 'Overloaded'})
        with self.assertRaises(StreamError) as caught:
            self.run_events([MESSAGE_START, TEXT_BLOCK, text_delta('x'), error])
        self.assertEqual((caught.exception.layer, caught.exception.server_error),
                         ('application', {'message': 'Overloaded', 'type': 'overloaded_error', 'code': None}))

    def test_a_fixed_length_messages_load_expects_the_budget_to_end_it(self):
        text = [MESSAGE_START, TEXT_BLOCK, text_delta('hi')]
        cases = {'the whole budget': (text + message_end('max_tokens', tokens=2), None),
                 'a short count': (text + message_end('max_tokens', tokens=1),
                                   'stop_reason=max_tokens after 1 output token, not the 2 requested'),
                 'an end_turn': (text + message_end('end_turn', tokens=2),
                                 'expected stop_reason=max_tokens (--expect-finish length), got stop_reason=end_turn'),
                 'no text': ([MESSAGE_START, TEXT_BLOCK] + message_end('max_tokens', tokens=2),
                             'stop_reason=max_tokens and message_stop arrived, but no visible text')}
        for name, (events, problem) in cases.items():
            with self.subTest(name):
                validator = stream_client.MessagesEvents('length', 2)
                for event in events:
                    validator.accept(event)
                self.assertEqual(message_of(validator.outcome()), problem)

    def test_when_a_messages_answer_is_finished(self):
        text = [MESSAGE_START, TEXT_BLOCK, text_delta('hi')]
        call = [MESSAGE_START, TOOL_BLOCK, message_event('content_block_delta', delta={
            'type': 'input_json_delta', 'partial_json': '{"city": "Paris"}'}, index=0)]
        cases = {
            'end_turn with text': (text + message_end('end_turn'), None, None),
            'stop_sequence with text': (text + message_end('stop_sequence'), None, None),
            'max_tokens': (text + message_end('max_tokens'), None, 'output budget exhausted (stop_reason=max_tokens)'),
            'no message_stop': (text + message_end()[:2], None, 'EOF before message_stop after 1 content event'),
            'no message_delta': (text + [message_end()[0], message_end()[2]], None,
                                 'message_stop arrived, but no message_delta said its stop_reason'),
            'a tool call': (call + message_end('tool_use'), WEATHER, None),
            'a tool call cut by the budget': (call[:2] + message_end('max_tokens'), WEATHER,
                                              'output budget exhausted (stop_reason=max_tokens) inside tool call 0 '
                                              '(get_weather)'),
            'a tool call that ends as end_turn': (call + message_end('end_turn'), WEATHER,
                                                  'expected stop_reason=tool_use after 1 tool call, got '
                                                  'stop_reason=end_turn'),
            'tool_use without a block': (text + message_end('tool_use'), WEATHER,
                                         'stop_reason=tool_use, but no tool_use block arrived'),
            'a refusal': (text + message_end('refusal'), None,
                          'expected stop_reason end_turn, stop_sequence or tool_use, got stop_reason=refusal'),
        }
        for name, (events, spec, problem) in cases.items():
            with self.subTest(name):
                self.assertEqual(message_of(self.run_events(events, spec).outcome()), problem)


class CompletionChunksTests(unittest.TestCase):
    def test_text_finish_usage_and_done(self):
        chunks = stream_client.CompletionChunks()
        for data in ('{"choices": [{"index": 0, "text": "hi", "finish_reason": null}]}',
                     '{"choices": [{"index": 0, "text": "", "finish_reason": "stop"}]}',
                     '{"choices": [], "usage": {"completion_tokens": 1}}', '[DONE]'):
            chunks.accept(data)
        self.assertEqual((chunks.text, chunks.finish_reason, chunks.completion_tokens, message_of(chunks.outcome())),
                         ('hi', 'stop', 1, None))

    def test_violations(self):
        cases = [('{"choices": [{"index": 0, "text": 5}]}', 'expected text to be a string'),
                 ('{"choices": [{"index": 1, "text": "x"}]}', 'expected choice index 0, got 1')]
        for data, words in cases:
            with self.subTest(data=data), self.assertRaises(StreamError) as caught:
                stream_client.CompletionChunks().accept(data)
            self.assertIn(words, caught.exception.message)
        chunks = stream_client.CompletionChunks()
        chunks.accept('{"choices": [{"index": 0, "text": "a", "finish_reason": "stop"}]}')
        with self.assertRaises(StreamError) as caught:
            chunks.accept('{"choices": [{"index": 0, "text": "late"}]}')
        self.assertIn('text arrived after finish_reason=stop', caught.exception.message)

    def test_a_fixed_length_load_needs_the_whole_budget(self):
        def outcome(tokens: int, reason: str, max_tokens: int) -> str | None:
            chunks = stream_client.CompletionChunks(expect_finish='length', max_tokens=max_tokens)
            for data in (f'{{"choices": [{{"index": 0, "text": "x", "finish_reason": "{reason}"}}]}}',
                         f'{{"choices": [], "usage": {{"completion_tokens": {tokens}}}}}', '[DONE]'):
                chunks.accept(data)
            return message_of(chunks.outcome())
        self.assertIsNone(outcome(8, 'length', 8))
        self.assertIn('after 5 completion tokens, not the 8 requested', outcome(5, 'length', 8))
        self.assertIn('expected finish_reason=length (--expect-finish length), got finish_reason=stop',
                      outcome(8, 'stop', 8))


class AnswerBoundTests(unittest.TestCase):
    """Every answer within the answer bound gets through, on every API, however the server escapes it:
    the Responses API repeats the whole text (or arguments) in one data line of its done events and of
    response.completed. The bytes are vLLM 0.32's (the fixture's vllm profile), with every character
    escaped as Python's json.dumps does by default, so an astral character takes 12."""

    ASTRAL = '\U0001F600'
    API_WITH_TOOLS = ('chat', 'responses', 'messages')

    def verdict(self, api: str, plan, spec: stream_client.AnswerSpec | None = None) -> stream_client.Verdict:
        profile = fixture_server.BUILDERS['vllm', api]('m', 3)
        profile.dumps = lambda value: json.dumps(value).encode()
        body = b''.join(b'%x\r\n%s\r\n' % (len(write), write) for write in plan(profile)) + b'0\r\n\r\n'
        reader = stream_client.ResponseReader(stream_client.VALIDATORS[api](spec=spec))
        for piece in pieces(SSE_HEAD + b'Transfer-Encoding: chunked\r\n\r\n' + body, stream_client._READ_SIZE):
            reader.feed(piece)
        return stream_client.judge(reader)

    @classmethod
    def text(cls, chars: int) -> list[str]:
        return [cls.ASTRAL * 4096] * (chars // 4096) + [cls.ASTRAL * (chars % 4096)]

    def test_a_text_at_the_answer_bound_is_ok_and_one_character_more_is_not(self):
        for api in stream_client.VALIDATORS:
            for chars, layer in ((stream_client.MAX_TEXT_CHARS, None), (stream_client.MAX_TEXT_CHARS + 1, 'application')):
                with self.subTest(api=api, chars=chars):
                    verdict = self.verdict(api, lambda p: p.preamble() + [p.content(piece) for piece in self.text(chars)]
                                           + p.closing('stop'))
                    self.assertEqual(verdict.layer, layer, verdict.message)
                    if layer:
                        self.assertIn(f'answer longer than {stream_client.MAX_TEXT_CHARS} characters', verdict.message)

    def test_tool_call_arguments_at_the_answer_bound_are_ok(self):
        for api in self.API_WITH_TOOLS:
            with self.subTest(api=api):
                city = self.text(stream_client.MAX_TEXT_CHARS - len('{"city": ""}'))
                verdict = self.verdict(api, lambda p: p.tool_calls([('get_weather', ('{"city": "', *city, '"}'))]),
                                       WEATHER)
                self.assertEqual(verdict.layer, None, verdict.message)

    def test_the_line_bound_follows_from_the_answer_bound(self):
        escaped = len(json.dumps(self.ASTRAL)) - 2
        self.assertEqual(escaped, stream_client._JSON_ESCAPE_CHARS)
        self.assertGreaterEqual(stream_client.MAX_LINE_CHARS,
                                2 * stream_client.MAX_TEXT_CHARS * escaped + stream_client._MAX_ENVELOPE_CHARS)

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

    def test_chunked_accepts_extensions_and_trailers_and_counts_overrun(self):
        reader = _ChunkedBody()
        self.assertEqual(reader.feed(b'5;ext=1\r\nhello\r\n0\r\nX-Trailer: 1\r\n\r\nextra'), b'hello')
        self.assertTrue(reader.complete)
        self.assertEqual(reader.overrun, 5)


class Fixture:
    """The fixture server on a free loopback port, in a background thread (polled every 5 ms, so that
    closing it waits 2.5 ms on average, not 25: the suite starts over 400)."""

    def __init__(self, mode: str = 'ok', delay: float = 0.002, **settings) -> None:
        self.instance = fixture_server.server(0, mode, delay, **settings)
        self.url = f'http://127.0.0.1:{self.instance.server_port}/v1/chat/completions'
        self.thread = threading.Thread(target=self.instance.serve_forever, args=(0.005,), daemon=True)

    def __enter__(self) -> Fixture:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.instance.shutdown()
        self.instance.server_close()
        self.thread.join()

    @property
    def last_request(self) -> tuple[dict, dict]:
        return self.instance.last_request


def run_fixture(mode: str = 'ok', *, settings: dict | None = None, **kwargs) -> dict:
    with Fixture(mode, **(settings or {})) as fixture:
        return stream(fixture.url, 'synthetic-fixture', 'READY', **kwargs)


def replay(response: bytes, **kwargs) -> dict:
    """The client's record for a response replayed byte for byte by the fixture."""
    with Fixture(replay=response) as fixture:
        return stream(fixture.url, 'tiny', 'hi', **{'idle': 2, **kwargs})


def sse_response(body: bytes, *, headers: str = '', status: str = '200 OK') -> bytes:
    return f'HTTP/1.1 {status}\r\nContent-Type: text/event-stream\r\n{headers}\r\n'.encode() + body


def chunk_keys(payload: bytes) -> list[tuple]:
    """The key structure of each JSON event: top-level keys, then each choice's and delta's keys."""
    shapes = []
    for event in parse_all([payload]):
        if event == '[DONE]':
            shapes.append(('[DONE]',))
            continue
        chunk = json.loads(event)
        choices = tuple((tuple(c), tuple(c['delta'])) for c in chunk.get('choices', []))
        shapes.append((tuple(chunk), choices, tuple(chunk.get('usage') or ())))
    return shapes


ANSWER = 'READY \u2713'


class Verdict(NamedTuple):
    """What a record says of its layers, by name, so that a failing comparison names the field."""

    transport_complete: bool | None
    event_complete: bool | None
    application_complete: bool
    error_layer: str | None

    @classmethod
    def of(cls, record: dict) -> Verdict:
        return cls(*(record[field] for field in cls._fields))


class ModeRow(NamedTuple):
    """A fixture mode's expected verdict, words in its error and text. words and text are one value, or a
    dict by "api/profile", api or profile (the most specific key wins; "" is the default)."""

    verdict: Verdict
    words: str | dict | None
    text: str | dict
    options: dict = {}


def row(transport, event, application, layer, words, text, options=None) -> ModeRow:
    return ModeRow(Verdict(transport, event, application, layer), words, text, options or {})


def for_run(value, api: str, profile: str):
    """A row's value for one api and profile."""
    if not isinstance(value, dict):
        return value
    return next(value[key] for key in (f'{api}/{profile}', api, profile, '') if key in value)


APIS = ('chat', 'completions', 'responses', 'messages')
TOOLS = {'tools': fixture_server.TOOLS}  # the options of a run that offers the fixture's tool
JSON_ANSWER = {'json_schema': fixture_server.JSON_SCHEMA}  # ... that asks for a JSON answer
TOKENS16 = ''.join(f'token{i} ' for i in range(16))
URL_PATHS = {'chat': '/v1/chat/completions', 'completions': '/v1/completions', 'responses': '/v1/responses',
             'messages': '/v1/messages'}


def mode_runs() -> list[tuple[str, str, str]]:
    """(mode, api, profile) for the mode table: every mode on every API it applies to, chat in both profiles
    and the other APIs in vLLM's (the guide profile differs only in its wire format, which chat covers)."""
    return [(mode, api, profile) for mode in fixture_server.MODES for api in APIS
            for profile in (fixture_server.PROFILES if api == 'chat' else ('vllm',))
            if fixture_server.applies(mode, api)]


def fixture_record(mode: str, api: str, profile: str, **options) -> dict:
    with Fixture(mode, profile=profile) as fixture:
        url = fixture.url.replace('/v1/chat/completions', URL_PATHS[api])
        return stream(url, 'synthetic-fixture', 'READY', **options)


def tcp_pair(test: unittest.TestCase) -> tuple[socket.socket, socket.socket]:
    """Two ends of a loopback TCP connection, closed when the test ends."""
    listener = socket.create_server(('127.0.0.1', 0))
    ours = socket.create_connection(listener.getsockname())
    theirs, _ = listener.accept()
    listener.close()
    test.addCleanup(ours.close)
    test.addCleanup(theirs.close)
    return ours, theirs


def in_threads(work, items: list, threads: int = 8) -> list:
    """work(item) for every item, eight at a time; the results in order (run() is safe in threads)."""
    results = [None] * len(items)
    lock, position = threading.Lock(), iter(range(len(items)))

    def worker() -> None:
        while True:
            with lock:
                index = next(position, None)
            if index is None:
                return
            results[index] = work(items[index])
    pool = [threading.Thread(target=worker) for _ in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    return results


class FixtureVerdictTests(unittest.TestCase):
    EXPECTED = {
        'ok': row(True, True, True, None, None, ANSWER),
        'broken': row(True, True, False, 'application',
                      {'': 'EOF before [DONE] after 2 content events',
                       'responses': 'EOF before a terminal event (response.completed) after 2 content events',
                       'messages': 'EOF before message_stop after 2 content events'}, ANSWER),
        'length': row(True, True, False, 'application',
                      {'': 'output budget exhausted (finish_reason=length)',
                       'responses': "output budget exhausted: response.completed carries status 'incomplete' "
                                    "(incomplete_details.reason=max_output_tokens)",
                       'messages': 'output budget exhausted (stop_reason=max_tokens)'}, ANSWER),
        'malformed': row(None, None, False, 'protocol', 'malformed JSON', ANSWER),
        'http-error': row(None, None, False, 'http', 'expected status 200, got 503', ''),
        'truncated': row(False, True, True, 'transport',
                         {'guide': 'connection closed after 445 of 509 body bytes',
                          'vllm': 'chunked body ended without its terminating chunk'}, ANSWER),
        'cut-mid-answer': row(False, False, False, 'transport',
                              {'guide': 'connection closed after', 'vllm': 'chunked body ended without its terminating '
                                                                           'chunk'}, 'READY '),
        'no-done': row(True, True, False, 'application', {'': 'EOF before [DONE]', 'responses': 'EOF before a terminal',
                                                          'messages': 'EOF before message_stop'}, ANSWER),
        'unterminated': row(True, False, False, 'sse', 'inside an event', ANSWER),
        'held-open': row(False, True, True, 'transport',
                         {'': 'did not end within the idle timeout of 0.3 s after [DONE]',
                          'responses': 'did not end within the idle timeout of 0.3 s after response.completed',
                          'messages': 'did not end within the idle timeout of 0.3 s after message_stop'},
                         ANSWER),
        'after-done': row(None, None, True, 'protocol',
                          {'': 'event after [DONE]',
                           'responses': "event 'response.output_text.delta' after the terminal event "
                                        'response.completed',
                           'messages': "event 'content_block_delta' after message_stop"}, ANSWER),
        'reasoning': row(True, True, True, None, None, ANSWER),
        'tool-call': row(True, True, True, None, None, '', TOOLS),
        'tool-args-cut': row(True, True, False, 'application', 'tool call 0 (get_weather): the arguments are not JSON '
                             '(Unterminated string starting at: line 1 column 10 (char 9)): \'{"city": "Par\'', '', TOOLS),
        'tool-args-empty': row(True, True, False, 'application', 'tool call 0 (get_weather): the arguments are empty',
                               '', TOOLS),
        'tool-args-array': row(True, True, False, 'application',
                               "tool call 0 (get_weather): arguments are not a JSON object: '[]'", '', TOOLS),
        'tool-args-schema': row(True, True, False, 'application', 'tool call 0 (get_weather): the arguments do not match '
                                'its parameters: $.city: required, but missing', '', TOOLS),
        'tool-parallel': row(True, True, True, None, None, '', TOOLS),
        'tool-args-mismatch': row(None, None, False, 'protocol', 'response.function_call_arguments.done says tool call 0 '
                                  "(get_weather) has the arguments '{\"city\": \"Lyon\"}', but its deltas assembled "
                                  '\'{"city": "Paris"}\'', '', TOOLS),
        'block-unclosed': row(None, None, False, 'protocol', 'message_delta in event 5 while block 0 was still open '
                              '(no content_block_stop)', ANSWER),
        'block-unknown-index': row(None, None, False, 'protocol', 'content_block_delta for block 5 in event 4, which '
                                   'never started', 'READY '),
        'json-ok': row(True, True, True, None, None, '{"city": "Paris"}', JSON_ANSWER),
        'json-invalid': row(True, True, False, 'application', 'the JSON answer does not match the schema: $.city: '
                            'expected string, got 3', '{"city": 3}', JSON_ANSWER),
        'error-event': row(None, None, False, 'application',
                           {'': "server sent an error event: 'EngineCore",
                            'messages': "server sent an error event: 'Overloaded' (overloaded_error)"}, 'READY '),
        'stall': row(None, None, False, 'timeout', 'no bytes for 0.3 s (idle timeout) after 0 content events', ''),
        'drip': row(None, None, False, 'timeout', 'overall deadline of 0.8 s', '', {'deadline': 0.8}),
        'buffered': row(True, True, True, None, None, TOKENS16),
        'paired': row(True, True, True, None, None, TOKENS16),
        'multi-choice': row(None, None, False, 'protocol', 'expected choice index 0, got 1',
                            {'': '', 'completions': 'READY '}),
        'split-utf8': row(True, True, True, None, None, ANSWER),
        'flood': row(None, None, False, 'sse', f'line longer than {MAX_LINE_CHARS} characters without a line end', ''),
        'sequence-gap': row(None, None, False, 'protocol',
                            'expected sequence_number 6, got 7 in response.output_text.done: an event was lost', ANSWER),
        'type-mismatch': row(None, None, False, 'protocol', "its event field says 'response.text.delta' but its data "
                                                            "says type 'response.output_text.delta'", ''),
        'text-mismatch': row(None, None, True, 'protocol', "response.completed says the text is 'READY!' (6 characters)"
                                                           " but the deltas assembled 'READY \u2713' (7)", ANSWER),
        'failed': row(None, None, False, 'application', "server sent response.failed: 'EngineCore", ANSWER),
        'incomplete': row(True, True, False, 'application',
                          "output budget exhausted: response.incomplete carries status 'incomplete'", ANSWER),
        # the streamed side of each pair, without --cross-check (CrossCheckTests runs them with it)
        'pair-honest': row(True, True, True, None, None, '', TOOLS),
        'pair-args-dropped': row(True, True, True, None, None, '', TOOLS),
        'pair-call-dropped': row(True, True, True, None, None, '', TOOLS),
        'pair-markup-leak': row(True, True, False, 'application', 'tool-call markup <tool_call> in the visible text at '
                                'character 0', '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n'
                                '</tool_call>', TOOLS),
        'pair-budget-relabelled': row(True, True, False, 'application', 'the whole budget of 128 tokens was used; vLLM '
                                      'reports a call cut by max_tokens as "tool_calls"; raise --max-tokens', '', TOOLS),
        'pair-diverged': row(True, True, True, None, None, ANSWER),
    }

    def test_every_mode_gets_its_verdict_on_every_api_it_applies_to(self):
        self.assertEqual(set(self.EXPECTED), set(fixture_server.MODES))
        runs = mode_runs()
        self.assertEqual({api for _, api, _ in runs}, set(APIS))

        def one(run: tuple[str, str, str]) -> dict:
            mode, api, profile = run
            return fixture_record(mode, api, profile, **{'idle': 0.3, **self.EXPECTED[mode].options})
        for (mode, api, profile), record in zip(runs, in_threads(one, runs)):
            expected = self.EXPECTED[mode]
            with self.subTest(mode=mode, api=api, profile=profile):
                json.dumps(record)
                self.assertEqual(record['api'], api)
                self.assertEqual(Verdict.of(record)._asdict(), expected.verdict._asdict())
                layer = expected.verdict.error_layer
                self.assertEqual(record['ok'], layer is None)
                words = for_run(expected.words, api, profile)
                if words:
                    self.assertIn(words, record['error'])
                    self.assertTrue(record['error'].startswith(layer + ': '))
                self.assertEqual(record['text'], for_run(expected.text, api, profile))
                if record['http'] and record['http']['status'] == 200:
                    self.assertEqual(record['http']['framing'], 'chunked' if profile == 'vllm' else 'content-length')

    def test_each_api_streams_ok_in_both_profiles(self):
        for api in APIS:
            for profile in fixture_server.PROFILES:
                with self.subTest(api=api, profile=profile):
                    record = fixture_record('ok', api, profile)
                    self.assertTrue(record['ok'], record['error'])
                    self.assertEqual((record['api'], record['text'], record['completion_tokens']), (api, ANSWER, 3))

    def test_a_mode_for_another_api_is_refused_by_the_fixture(self):
        record = fixture_record('sequence-gap', 'chat', 'vllm')
        self.assertIn("got 400 Bad Request: 'mode sequence-gap does not apply to /v1/chat/completions; "
                      "it applies to responses'", record['error'])

    def test_seed_control_cases_get_three_different_classifications(self):
        verdicts = {mode: (run_fixture(mode)['error_layer']) for mode in ('ok', 'truncated', 'no-done')}
        self.assertEqual(verdicts, {'ok': None, 'truncated': 'transport', 'no-done': 'application'})

    def test_ok_record_keeps_text_usage_and_clock_order(self):
        record = run_fixture('ok')
        self.assertTrue(record['ok'])
        self.assertEqual((record['text'], record['finish_reason'], record['done']), (ANSWER, 'stop', True))
        self.assertEqual((record['content_events'], record['completion_tokens']), (2, 3))
        self.assertEqual(len(record['event_gaps_ms']), 1)
        # Orderings that hold however the machine's load merges writes into reads (the exact per-read
        # accounting is tested without a socket, in test_the_timeline_stamps_each_read_with_its_time).
        self.assertLess(0, record['headers_ms'])
        self.assertLessEqual(record['headers_ms'], record['first_event_ms'])
        self.assertLessEqual(record['first_event_ms'], record['first_text_ms'])
        self.assertLess(record['first_text_ms'], record['duration_ms'])
        self.assertIsNone(record['buffered_delivery'])  # two content events: too few to tell
        self.assertIn(record['content_reads'], (1, 2))  # the two texts in one read or in two
        self.assertEqual(record['max_content_events_per_read'], 3 - record['content_reads'])
        self.assertGreaterEqual(record['reads'], record['content_reads'])
        # the span from the first text to the last: 0 when both arrived in one read, and within the run
        self.assertEqual(record['content_span_ms'] == 0, record['content_reads'] == 1, record['content_span_ms'])
        self.assertLessEqual(record['first_text_ms'] + record['content_span_ms'], record['duration_ms'])
        http = record['http']
        self.assertEqual((http['status'], http['version'], http['framing'], http['content_length'],
                          http['body_bytes'], http['interim']), (200, '1.1', 'content-length', 445, 445, []))
        self.assertEqual((record['source'], record['request']['max_tokens'], record['client']['python']),
                         ('fixture', 128, sys.version.split()[0]))
        self.assertRegex(record['started_at'], r'^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$')

    def test_reasoning_is_timed_and_kept_apart_in_both_field_names(self):
        for field in ('reasoning', 'reasoning_content'):
            with self.subTest(field=field):
                record = run_fixture('reasoning', settings={'profile': 'vllm', 'reasoning_field': field})
                self.assertEqual((record['ok'], record['reasoning_text'], record['text']),
                                 (True, 'The user wants one word.', ANSWER))
                self.assertLessEqual(record['first_event_ms'], record['first_reasoning_ms'])
                self.assertLessEqual(record['first_reasoning_ms'], record['first_text_ms'])

    def test_buffered_delivery_is_flagged_and_split_bytes_decode_exactly(self):
        # buffered sends the whole body in one write after the delays: one read whatever the load.
        buffered = run_fixture('buffered', settings={'profile': 'vllm'})
        self.assertIs(buffered['buffered_delivery'], True)
        self.assertEqual((buffered['reads'], buffered['content_reads'], buffered['max_content_events_per_read'],
                          buffered['content_span_ms']), (1, 1, 16, 0))
        split = run_fixture('split-utf8', settings={'profile': 'vllm'})
        self.assertEqual((split['ok'], split['text']), (True, ANSWER))
        self.assertIsNone(split['buffered_delivery'])  # too few events to tell
        short = run_fixture('ok', settings={'profile': 'vllm', 'tokens': 3})
        self.assertEqual((short['ok'], short['buffered_delivery']), (True, None))
        paired = run_fixture('paired', settings={'profile': 'vllm'})
        self.assertEqual((paired['ok'], paired['content_events']), (True, 16))

    def test_the_pacing_modes_group_writes_as_a_proxy_would(self):
        class Sink:
            def __init__(self) -> None:
                self.writes: list[bytes] = []
                self.write = self.writes.append
        handler = types.SimpleNamespace(server=types.SimpleNamespace(delay=0), wfile=Sink(),
                                        connection=types.SimpleNamespace(setsockopt=lambda *option: None))
        writes = [b'ab', b'cd', b'ef']
        expected = {'each': writes, 'flat-out': writes, 'burst': [b'abcdef'], 'pairs': [b'abcd', b'ef'],
                    'bytes': [b'a', b'b', b'c', b'd', b'e', b'f']}
        self.assertEqual(set(expected), set(fixture_server.PACES))
        for pace, grouped in expected.items():
            with self.subTest(pace=pace):
                handler.wfile = Sink()
                fixture_server.PACES[pace](handler, iter(writes))
                self.assertEqual(handler.wfile.writes, grouped)

    def test_the_timeline_stamps_each_read_with_its_time(self):
        # The reads of one response, each at a made-up time: every event of a read gets that read's time.
        def event(**delta: str) -> bytes:
            return f'data: {chunk_json(delta=delta)}\n\n'.encode()
        reads = [(1.0, SSE_HEAD + b'\r\n' + event(role='assistant')), (2.0, event(reasoning='think')),
                 (3.0, event(content='a')), (4.0, event(content='b') + event(content='c')),
                 (5.0, f'data: {chunk_json(finish_reason="stop")}\n\ndata: [DONE]\n\n'.encode())]
        reader, timeline = stream_client.ResponseReader(ChatChunks()), stream_client._Timeline()
        timeline.started = 0.0
        for at, raw in reads:
            timeline.note_read(at, reader.feed(raw))
        reader.eof()
        self.assertIsNone(stream_client.judge(reader).layer)
        self.assertEqual([timeline.ms(at) for at in (timeline.first_event_at, timeline.first_reasoning_at,
                                                     timeline.first_text_at, timeline.last_text_at)],
                         [1000, 2000, 3000, 4000])
        self.assertEqual(timeline.gaps, [1.0, 0.0])
        self.assertEqual((reader.reads, timeline.content_reads, timeline.max_content_events_per_read), (5, 2, 2))

    def test_the_clock_starts_just_before_the_connection_in_a_fresh_process(self):
        # An ordering, not a number of milliseconds: in a fresh process, the last clock start comes before
        # the connection, and between the two nothing is imported and no thread starts. (An import of
        # encodings.idna inside the first connect, or a watchdog thread, once cost 1.5 to 2.5 ms here.)
        code = textwrap.dedent('''
            import json, socket, sys, threading
            sys.path.insert(0, sys.argv[1])
            import stream_client
            log = []
            def note(what):
                log.append((what, sorted(sys.modules), threading.active_count()))
            start, connect = stream_client._Timeline.start, socket.create_connection
            def logged_start(self):
                note('clock')
                start(self)
            def logged_connect(*args, **kwargs):
                sock = connect(*args, **kwargs)
                note('connected')
                return sock
            stream_client._Timeline.start, socket.create_connection = logged_start, logged_connect
            record = stream_client.stream(sys.argv[2], 'm', 'p')
            print(json.dumps([record['ok'], log]))
        ''')
        with Fixture(delay=0) as fixture:
            done = subprocess.run([sys.executable, '-c', code, str(HERE), fixture.url], capture_output=True,
                                  text=True, timeout=60, check=True)
        ok, log = json.loads(done.stdout)
        self.assertTrue(ok)
        self.assertEqual([what for what, _, _ in log[-2:]], ['clock', 'connected'])
        (_, modules_at_start, threads_at_start), (_, modules_connected, threads_connected) = log[-2:]
        self.assertEqual(sorted(set(modules_connected) - set(modules_at_start)), [])
        self.assertEqual(threads_connected, threads_at_start)

    def test_buffering_rule(self):
        self.assertEqual([stream_client._buffered_delivery(events, reads) for events, reads in
                          ((7, 1), (8, 1), (8, 2), (8, 3), (64, 16), (64, 17), (0, 0))],
                         [None, True, True, False, True, False, None])

    def test_events_of_one_read_share_its_time_whatever_on_text_costs(self):
        def slow(text: str) -> None:
            time.sleep(0.02)  # 16 events: 0.3 s spent inside one read
        record = run_fixture('buffered', settings={'profile': 'vllm'}, on_text=slow)
        self.assertTrue(record['ok'], record['error'])
        self.assertEqual(record['event_gaps_ms'], [0.0] * 15)
        self.assertEqual(record['first_event_ms'], record['first_text_ms'])

    def test_error_event_keeps_the_servers_error(self):
        record = run_fixture('error-event', settings={'profile': 'vllm'})
        self.assertEqual(record['server_error']['type'], 'InternalServerError')
        self.assertEqual(record['server_error']['code'], 500)
        self.assertIn(record['server_error']['message'], record['error'])

    def test_tokens_option_streams_n_content_events(self):
        record = run_fixture('ok', settings={'profile': 'vllm', 'tokens': 40})
        self.assertEqual((record['ok'], record['content_events'], record['completion_tokens']), (True, 40, 40))
        self.assertTrue(record['text'].startswith('token0 token1 '))

    def test_api_key_is_required_when_set_and_never_recorded(self):
        with Fixture(api_key='sk-fixture-51d2', profile='vllm') as fixture:
            refused = stream(fixture.url, 'm', 'p')
            accepted = stream(fixture.url, 'm', 'p', token='sk-fixture-51d2')
            headers, _ = fixture.last_request
        self.assertEqual(refused['error'], "http: expected status 200, got 401 Unauthorized: 'Unauthorized'")
        self.assertEqual(refused['server_error'], {'message': 'Unauthorized', 'type': None, 'code': None})
        self.assertTrue(accepted['ok'])
        self.assertEqual(headers['Authorization'], 'Bearer sk-fixture-51d2')
        self.assertNotIn('sk-fixture-51d2', json.dumps(accepted))

    def test_request_carries_the_options(self):
        with Fixture() as fixture:
            stream(fixture.url, 'tiny', 'hello', max_tokens=7, system='be brief', temperature=0.5,
                   stop=['\n', 'END'], extra={'chat_template_kwargs': {'enable_thinking': False}, 'min_tokens': 3})
            headers, body = fixture.last_request
        self.assertEqual(headers['Accept'], 'text/event-stream')
        self.assertEqual(headers['Content-Type'], 'application/json')
        self.assertEqual(body, {'model': 'tiny', 'messages': [{'role': 'system', 'content': 'be brief'},
                                                               {'role': 'user', 'content': 'hello'}],
                                'stream': True, 'stream_options': {'include_usage': True}, 'max_tokens': 7,
                                'temperature': 0.5, 'n': 1, 'stop': ['\n', 'END'],
                                'chat_template_kwargs': {'enable_thinking': False}, 'min_tokens': 3})
        for key in ('model', 'messages', 'stream', 'n', 'max_tokens'):
            with self.subTest(key=key), self.assertRaises(ValueError):
                stream('http://127.0.0.1:9/v1/chat/completions', 'm', 'p', extra={key: 1})

    def test_tools_and_a_json_schema_go_in_each_apis_own_shape(self):
        tool = fixture_server.TOOLS[0]
        cases = {  # (api, options): what the request body carries
            ('chat', 'auto'): {'tools': [tool], 'tool_choice': 'auto'},
            ('chat', 'get_weather'): {'tools': [tool],
                                      'tool_choice': {'type': 'function', 'function': {'name': 'get_weather'}}},
            ('responses', 'required'): {'tools': [{'type': 'function', **tool['function']}], 'tool_choice': 'required'},
            ('responses', 'get_weather'): {'tools': [{'type': 'function', **tool['function']}],
                                           'tool_choice': {'type': 'function', 'name': 'get_weather'}},
            ('chat', 'schema'): {'response_format': {'type': 'json_schema', 'json_schema': {
                'name': 'answer', 'schema': fixture_server.JSON_SCHEMA}}},
            ('completions', 'schema'): {'response_format': {'type': 'json_schema', 'json_schema': {
                'name': 'answer', 'schema': fixture_server.JSON_SCHEMA}}},
            ('responses', 'schema'): {'text': {'format': {'type': 'json_schema', 'name': 'answer',
                                                          'schema': fixture_server.JSON_SCHEMA}}},
        }
        with Fixture() as fixture:
            for (api, choice), expected in cases.items():
                with self.subTest(api=api, choice=choice):
                    options = JSON_ANSWER if choice == 'schema' else {**TOOLS, 'tool_choice': choice}
                    record = stream(fixture.url.replace('/v1/chat/completions', URL_PATHS[api]), 'm', 'p', **options)
                    body = fixture.last_request[1]
                    self.assertEqual({key: body.get(key) for key in expected}, expected)
                    self.assertEqual((record['request']['tools'], record['request']['tool_choice']),
                                     ([], None) if choice == 'schema' else (['get_weather'], choice))
                    self.assertEqual(record['request']['json_schema_sha256'] is not None, choice == 'schema')
                    self.assertEqual(record['unchecked_schema_keywords'], [])

    def test_a_messages_request_speaks_anthropic_and_sends_the_key_once(self):
        with Fixture(api_key='sk-test-1234') as fixture:
            url = fixture.url.replace('/v1/chat/completions', '/v1/messages')
            record = stream(url, 'm', 'p', token='sk-test-1234', system='be brief', stop=['e'], max_tokens=20,
                            tools=fixture_server.TOOLS, tool_choice='required', json_schema={'type': 'object'})
            headers, body = fixture.last_request
            named = stream(url, 'm', 'p', tools=fixture_server.TOOLS, tool_choice='get_weather')
            named_body = fixture.last_request[1]
        self.assertEqual((record['api'], record['error']),  # accepted: the key went where vLLM looks for it
                         ('messages', 'application: tool_choice required asked for a tool call, but the answer is '
                                      'text (stop_reason=end_turn and message_stop arrived)'))
        lowered = {name.lower(): value for name, value in headers.items()}
        self.assertEqual((lowered['anthropic-version'], lowered['authorization']), ('2023-06-01', 'Bearer sk-test-1234'))
        self.assertNotIn('x-api-key', lowered)
        self.assertEqual({key: body[key] for key in ('messages', 'system', 'stop_sequences', 'max_tokens', 'tool_choice',
                                                     'output_config')},
                         {'messages': [{'role': 'user', 'content': 'p'}], 'system': 'be brief', 'stop_sequences': ['e'],
                          'max_tokens': 20, 'tool_choice': {'type': 'any'},
                          'output_config': {'format': {'type': 'json_schema', 'schema': {'type': 'object'}}}})
        self.assertEqual(body['tools'], [{'name': 'get_weather', 'description': 'The current weather in a city',
                                          'input_schema': fixture_server.TOOLS[0]['function']['parameters']}])
        self.assertEqual(named_body['tool_choice'], {'type': 'tool', 'name': 'get_weather'})
        self.assertEqual(named['error'], 'http: expected status 200, got 401 Unauthorized: '
                                         "'Unauthorized'")  # no key: vLLM's middleware answers before the route

    def test_each_api_gets_its_own_field_names(self):
        expected = {
            'completions': {'model': 'tiny', 'prompt': 'hello', 'stream': True,
                            'stream_options': {'include_usage': True}, 'max_tokens': 7, 'temperature': 0.5, 'n': 1,
                            'stop': ['END'], 'min_tokens': 2},
            'responses': {'model': 'tiny', 'input': 'hello', 'stream': True, 'max_output_tokens': 7,
                          'temperature': 0.5, 'instructions': 'be brief', 'stop': ['END'], 'min_tokens': 2},
        }
        for api, body in expected.items():
            with self.subTest(api=api), Fixture() as fixture:
                record = stream(fixture.url.replace('/v1/chat/completions', URL_PATHS[api]), 'tiny', 'hello',
                                max_tokens=7, temperature=0.5, stop=['END'], extra={'min_tokens': 2},
                                system='be brief' if api == 'responses' else None)
                self.assertTrue(record['ok'], record['error'])
                self.assertEqual(fixture.last_request[1], body)

    def test_the_url_path_or_api_chooses_the_api(self):
        request = stream_client.prepare('http://127.0.0.1:8000/proxy/v1/responses', 'm', 'p')
        self.assertEqual(request.api, 'responses')
        self.assertEqual(stream_client.prepare('http://127.0.0.1:8000/llm', 'm', 'p', api='completions').api,
                         'completions')
        with self.assertRaises(ValueError) as caught:
            stream_client.prepare('http://127.0.0.1:8000/v1/chat', 'm', 'p')
        self.assertIn('/v1/chat/completions, /v1/completions, /v1/responses', str(caught.exception))
        bad = [('/v1/completions', {'system': 'x'}, 'no system message'),
               ('/v1/completions', {'extra': {'prompt': 'x'}}, "extra may not set 'prompt'; use --prompt"),
               ('/v1/responses', {'extra': {'max_output_tokens': 3}}, "may not set 'max_output_tokens'; use --max-tokens"),
               ('/v1/responses', {'extra': {'instructions': 'x'}}, "may not set 'instructions'; use --system"),
               ('/v1/responses', {'expect_finish': 'eos'}, 'expect_finish must be one of stop, length')]
        for path, options, words in bad:
            with self.subTest(path=path, options=options), self.assertRaises(ValueError) as caught:
                stream_client.prepare(f'http://127.0.0.1:8000{path}', 'm', 'p', **options)
            self.assertIn(words, str(caught.exception))
        self.assertEqual(json.loads(stream_client.prepare('http://127.0.0.1:8000/v1/responses', 'm', 'p',
                                                          extra={'max_tokens': 3}).body)['max_tokens'], 3)

    def test_message_held_open_after_done_is_a_transport_failure_whichever_bound_notices(self):
        record = run_fixture('held-open', idle=5, deadline=0.5)
        self.assertEqual(record['error'], 'transport: message did not end within the overall deadline of 0.5 s '
                                          'after [DONE]; received 445 of 509 body bytes')
        self.assertEqual((record['transport_complete'], record['event_complete']), (False, True))

    def test_capture_is_bounded_and_says_so(self):
        with Fixture(profile='vllm') as fixture:
            request = stream_client.prepare(fixture.url, 'm', 'p')
            capture = stream_client.Capture(limit=300)
            record = stream_client.run(request, capture=capture)
        self.assertTrue(record['ok'])
        self.assertEqual(record['capture'], {'bytes': len(capture.data), 'truncated': True})
        self.assertLessEqual(len(capture.data), 300)
        self.assertTrue(capture.data.startswith(b'HTTP/1.1 200 OK\r\n'))

    def test_deadline_bounds_the_run(self):
        record = run_fixture('ok', deadline=0.001)
        self.assertFalse(record['ok'])
        self.assertEqual(record['error_layer'], 'timeout')
        self.assertIn('overall deadline of 0.001 s', record['error'])

    def test_events_are_seen_when_their_bytes_arrive_not_when_a_buffer_fills(self):
        # The server sends the second text only after the client has shown the first. A client that waited
        # for a buffer to fill would show nothing until the server gave up waiting and sent the rest.
        first_shown, order = threading.Event(), []
        events = [f'data: {chunk_json(delta={"content": "READY "})}\n\n',
                  f'data: {chunk_json(delta={"content": "go"}, finish_reason="stop")}\n\ndata: [DONE]\n\n']
        response = sse_response(b''.join(b'%x\r\n%s\r\n' % (len(e), e.encode()) for e in events) + b'0\r\n\r\n',
                                headers='Transfer-Encoding: chunked\r\n')

        def replay_after_the_first_text(handler, head: bytes, writes: list[bytes]) -> None:
            handler.wfile.write(head + writes[0])
            first_shown.wait(30)
            order.append('second text sent')
            for data in writes[1:]:
                handler.wfile.write(data)

        def on_text(text: str) -> None:
            order.append(text)
            first_shown.set()
        with mock.patch.object(fixture_server.Handler, '_replay', replay_after_the_first_text), \
                Fixture(replay=response) as fixture:
            record = stream(fixture.url, 'm', 'p', on_text=on_text)
        self.assertTrue(record['ok'], record['error'])
        self.assertEqual(order, ['READY ', 'second text sent', 'go'])
        self.assertEqual(len(record['event_gaps_ms']), 1)
        self.assertGreater(record['event_gaps_ms'][0], 0)  # two reads, so two clock readings

    def test_sixteen_streams_at_once_each_get_their_own_record(self):
        records, texts = {}, {n: [] for n in range(16)}
        with Fixture(profile='vllm', tokens=12) as fixture:
            def one(n: int) -> None:
                records[n] = stream(fixture.url, 'm', f'prompt {n}', max_tokens=100 + n, on_text=texts[n].append)
            threads = [threading.Thread(target=one, args=(n,)) for n in range(16)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(30)
        self.assertEqual(sorted(records), list(range(16)))
        import hashlib
        for n, record in records.items():
            with self.subTest(run=n):
                self.assertTrue(record['ok'], record['error'])
                self.assertEqual((record['content_events'], record['completion_tokens']), (12, 12))
                self.assertEqual(record['request']['max_tokens'], 100 + n)
                self.assertEqual(record['request']['prompt_sha256'], hashlib.sha256(f'prompt {n}'.encode()).hexdigest())
                self.assertEqual(''.join(texts[n]), record['text'])
                self.assertLess(record['first_text_ms'], record['duration_ms'])
        self.assertEqual(len({record['response_id'] for record in records.values()}), 16)

    def test_on_text_sees_each_piece_of_visible_text_as_it_arrives(self):
        seen = []
        record = run_fixture('ok', on_text=seen.append)
        self.assertEqual(seen, ['READY ', '\u2713'])
        self.assertEqual(''.join(seen), record['text'])

    def test_fixture_rejects_requests_it_cannot_answer(self):
        import http.client
        cases = [('/v1/models', b'{"stream": true}', 404), ('/v1/chat/completions', b'', 413),
                 ('/v1/chat/completions', b'x' * 65_537, 413), ('/v1/chat/completions', b'{not json', 400),
                 ('/v1/chat/completions', b'{"stream": false}', 400), ('/v1/chat/completions', b'[1]', 400)]
        for profile in fixture_server.PROFILES:
            with Fixture(profile=profile) as fixture:
                for path, body, status in cases:
                    with self.subTest(profile=profile, path=path, body=body[:20]):
                        conn = http.client.HTTPConnection('127.0.0.1', fixture.instance.server_port, timeout=5)
                        conn.request('POST', path, body=body)
                        response = conn.getresponse()
                        self.assertEqual(response.status, status)
                        if profile == 'vllm':
                            self.assertEqual(json.loads(response.read())['error']['code'], status)
                        conn.close()


    def test_fixture_answers_the_routes_a_user_checks_first(self):
        import http.client
        cases = {'/v1/models': 200, '/health': 200, '/v1/chat/completions': 405, '/metrics': 404}
        for profile in fixture_server.PROFILES:
            with Fixture(profile=profile) as fixture:
                for path, status in cases.items():
                    with self.subTest(profile=profile, path=path):
                        conn = http.client.HTTPConnection('127.0.0.1', fixture.instance.server_port, timeout=5)
                        conn.request('GET', path)
                        response = conn.getresponse()
                        body = response.read()
                        conn.close()
                        self.assertEqual(response.status, status)
                        if path == '/v1/models':
                            self.assertEqual([card['id'] for card in json.loads(body)['data']], ['synthetic-fixture'])
                        elif status != 200 and profile == 'vllm':
                            self.assertEqual(json.loads(body), {'detail': {404: 'Not Found',
                                                                           405: 'Method Not Allowed'}[status]})

    def test_model_name_is_the_one_model_listed_and_served(self):
        d2 = json.loads(split_capture(TRACES / 'd2_err_stream_unknown_model.http')[1])
        for profile in fixture_server.PROFILES:
            with self.subTest(profile=profile), Fixture(profile=profile, model_name='tiny') as fixture:
                with urllib.request.urlopen(fixture.url.replace('/chat/completions', '/models'), timeout=30) as answer:
                    self.assertEqual([card['id'] for card in json.load(answer)['data']], ['tiny'])
                self.assertTrue(stream(fixture.url, 'tiny', 'p')['ok'])
                wrong = stream(fixture.url, 'nope', 'p')
                self.assertEqual(wrong['error_layer'], 'http')
                self.assertIn('expected status 200, got 404 Not Found', wrong['error'])
                self.assertIn(d2['error']['message'], wrong['error'])  # "The model `nope` does not exist..."
                if profile == 'vllm':  # vLLM's body, as capture d2 has it
                    self.assertEqual(wrong['server_error'], {key: d2['error'][key] for key in ('message', 'type', 'code')})
        with Fixture(profile='vllm') as anything:  # without it, any model is answered
            self.assertTrue(stream(anything.url, 'whatever-a-proxy-sends', 'p')['ok'])

    def test_a_mixed_fixtures_error_status_says_mixed_chose_it(self):
        with Fixture('mixed', profile='vllm', seed=7) as fixture:
            records = [stream(fixture.url, 'm', 'p') for _ in range(40)]
        errors = {record['error'] for record in records if record['error_layer'] == 'http'}
        self.assertEqual(errors, {"http: expected status 200, got 503 Service Unavailable: 'the fixture in mixed "
                                  "mode served http-error to this request'"})  # the type and code repeated the status

    def test_a_server_error_kind_is_kept_when_the_status_does_not_say_it(self):
        error = {'message': 'no', 'type': 'BadRequestError', 'code': 400}
        self.assertEqual(stream_client._describe_server_error(error, ('400', 'Bad Request')), "'no' (BadRequestError)")
        self.assertEqual(stream_client._describe_server_error(error, ('503', 'Service Unavailable')),
                         "'no' (BadRequestError 400)")

    def test_guide_error_page_says_its_message_once(self):
        record = run_fixture('http-error')
        self.assertEqual(record['error'], "http: expected status 200, got 503 Service Unavailable: "
                                          "'the fixture was started in http-error mode'")


class FixtureCommandLineTests(unittest.TestCase):
    def start(self, *args: str) -> tuple[subprocess.Popen, str]:
        server = subprocess.Popen(script_command(FIXTURE_SCRIPT, '--port', '0', *args),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=script_env())
        self.addCleanup(lambda: (server.kill(), server.communicate()))
        return server, server.stdout.readline().split()[-1]

    def test_tokens_at_a_rate_are_paced(self):
        server, url = self.start('--profile', 'vllm', '--tokens', '6', '--rate', '40')
        self.assertTrue(url.startswith('http://127.0.0.1:'))
        record = stream(url, 'm', 'p')
        self.assertEqual((record['ok'], record['content_events']), (True, 6))
        self.assertGreater(record['duration_ms'], 6 / 40 * 1000)

    def test_replay_file_and_tls_flags(self):
        server, url = self.start('--replay', str(TRACES / 'z1_engine_crash_midstream_error_http200.http'))
        self.assertEqual(stream(url, 'm', 'p')['error_layer'], 'application')
        server, url = self.start('--tls-cert', str(HERE / 'testdata' / 'tls' / 'server.pem'),
                                 '--tls-key', str(HERE / 'testdata' / 'tls' / 'server.key'))
        self.assertTrue(url.startswith('https://127.0.0.1:'))
        self.assertTrue(stream(url, 'm', 'p', ca_file=str(HERE / 'testdata' / 'tls' / 'ca.pem'))['ok'])

    def test_bad_flags_exit_2(self):
        for args in (['--rate', '5'], ['--tokens', '3', '--rate', '0'], ['--delay', '-1'], ['--tokens', '0'],
                     ['--idle-close', '0'], ['--tls-no-close-notify'],
                     ['--tls-cert', 'a.pem'], ['--replay', 'absent.http'], ['--mode', 'nope'],
                     ['--replay-twin', str(TRACES / 'x1_chat_pair_tool_call_unstreamed.http')],
                     ['--replay', str(TRACES / 'x1_chat_pair_tool_call_stream.http'), '--replay-twin', 'absent.http']):
            with self.subTest(args=args):
                done = subprocess.run(script_command(FIXTURE_SCRIPT, '--port', '0', *args),
                                      capture_output=True, text=True, timeout=30, env=script_env())
                self.assertEqual(done.returncode, 2, done.stderr)
                self.assertNotIn('Traceback', done.stderr)


class VllmFidelityTests(unittest.TestCase):
    CAPTURE = TRACES / 'a2_chat_stream_usage_eos_stop.http'

    def fixture_response(self, path: str = '/v1/chat/completions') -> bytes:
        with Fixture(profile='vllm') as fixture, socket.create_connection(
                ('127.0.0.1', fixture.instance.server_port)) as conn:
            body = b'{"model": "tiny", "stream": true}'
            conn.sendall(b'POST %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s'
                         % (path.encode(), len(body), body))  # as the captures were requested
            received = b''
            while data := conn.recv(65536):
                received += data
        return received

    def test_vllm_profile_matches_a_real_capture_byte_shape(self):
        ours_head, ours_body = self.fixture_response().split(b'\r\n\r\n', 1)
        real_head, real_body = split_capture(self.CAPTURE)
        def names(head: bytes) -> list[bytes]:
            return [line.split(b':')[0] for line in head.split(b'\r\n')[1:] if line]
        self.assertEqual(names(ours_head), names(real_head.rstrip(b'\r\n')))
        self.assertIn(b'content-type: text/event-stream; charset=utf-8', ours_head)
        self.assertTrue(ours_body.endswith(b'e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n'))
        ours, real = chunk_keys(dechunk(ours_body)), chunk_keys(dechunk(real_body))
        self.assertEqual(ours[0], real[0])        # role chunk
        self.assertEqual(ours[1], real[1])        # content chunk
        self.assertEqual(ours[-3:], real[-3:])    # finish chunk, usage chunk, [DONE]
        for payload in (dechunk(ours_body), dechunk(real_body)):
            self.assertNotIn(b'\r', payload)

    def test_completions_profile_matches_a_real_capture_byte_shape(self):
        ours_head, ours_body = self.fixture_response('/v1/completions').split(b'\r\n\r\n', 1)
        real_head, real_body = split_capture(TRACES / 'g2_completions_stream_usage.http')
        self.assertEqual(header_names(ours_head), header_names(real_head))
        ours, real = parse_all([dechunk(ours_body)]), parse_all([dechunk(real_body)])
        self.assertEqual(json_keys(ours[0]), json_keys(real[0]))      # a text chunk
        self.assertEqual(json_keys(ours[-2]), json_keys(real[-2]))    # the usage chunk
        self.assertEqual((ours[-1], json.loads(ours[0])['object']), ('[DONE]', 'text_completion'))

    def test_responses_profile_matches_a_real_capture_event_skeleton(self):
        ours_head, ours_body = self.fixture_response('/v1/responses').split(b'\r\n\r\n', 1)
        real_head, real_body = split_capture(TRACES / 'r2_responses_stream_stopstring_completed.http')
        # the capture's request asked for "Connection: close"; the client does not
        self.assertEqual(header_names(ours_head), [name for name in header_names(real_head) if name != b'connection'])
        ours, real = (stream_client.TypedEvents().feed(dechunk(body)) for body in (ours_body, real_body))
        self.assertEqual(event_skeleton(ours), event_skeleton(real))
        for body in (ours_body, real_body):  # one event per HTTP chunk, LF line ends
            self.assertEqual(len(body.split(b'\r\n')) // 2 - 1, len(ours if body is ours_body else real))

    def test_messages_profile_matches_a_real_capture_event_skeleton(self):
        ours_head, ours_body = self.fixture_response('/v1/messages').split(b'\r\n\r\n', 1)
        real_head, real_body = split_capture(TRACES / 'm1_messages_stream_stop_sequence.http')
        self.assertEqual(header_names(ours_head), header_names(real_head))
        ours, real = (stream_client.TypedEvents().feed(dechunk(body)) for body in (ours_body, real_body))
        self.assertEqual(event_skeleton(ours), event_skeleton(real))
        for body, events in ((ours_body, ours), (real_body, real)):  # one event per HTTP chunk, LF line ends
            self.assertEqual(len(body.split(b'\r\n')) // 2 - 1, len(events))
            self.assertEqual([json.loads(data)['type'] for _, data in events][:2],
                             ['message_start', 'content_block_start'])

    def test_client_records_for_fixture_and_capture_agree(self):
        fixture_record = run_fixture('ok', settings={'profile': 'vllm'})
        capture_record = replay(self.CAPTURE.read_bytes())
        same = ('ok', 'error_layer', 'transport_complete', 'event_complete', 'application_complete',
                'finish_reason', 'done', 'reasoning_text', 'buffered_delivery', 'server_error')
        self.assertEqual({k: fixture_record[k] for k in same}, {k: capture_record[k] for k in same})
        http_same = ('status', 'version', 'content_type', 'transfer_encoding', 'content_length', 'framing')
        self.assertEqual({k: fixture_record['http'][k] for k in http_same},
                         {k: capture_record['http'][k] for k in http_same})
        for record in (fixture_record, capture_record):
            self.assertRegex(record['response_id'], r'^chatcmpl-[0-9a-f]{16}$')


def answer_options(capture: str) -> dict:
    """stream()'s api, tools, tool_choice and json_schema, as the request of a capture asked for them."""
    request = json.loads((TRACES / f'{capture}.request.json').read_text())
    body = request.get('body', request)
    api = stream_client._API_PATHS.get(request.get('path'), 'chat')
    tools, choice = body.get('tools'), body.get('tool_choice')
    if tools and api == 'responses':  # back to the chat-completions shape that --tools takes
        tools = [{'type': 'function', 'function': {k: v for k, v in tool.items() if k != 'type'}} for tool in tools]
    if tools and api == 'messages':
        tools = [{'type': 'function', 'function': {'name': tool['name'], 'parameters': tool['input_schema']}}
                 for tool in tools]
        choice = {'any': 'required'}.get(choice['type'], choice.get('name') or choice['type'])
    if isinstance(choice, dict):
        choice = (choice.get('function') or choice)['name']
    schema = (((body.get('response_format') or {}).get('json_schema') or {}).get('schema')
              or ((body.get('text') or {}).get('format') or {}).get('schema'))
    return {'api': api, 'tools': tools, 'tool_choice': choice, 'json_schema': schema}


def header_names(head: bytes) -> list[bytes]:
    return [line.split(b':')[0].lower() for line in head.split(b'\r\n')[1:] if line]


def json_keys(data: str) -> tuple:
    """The key structure of a JSON event: its keys, and those of its nested objects and their lists."""
    value = json.loads(data)
    def keys(node):
        if isinstance(node, dict):
            return tuple((key, keys(item)) for key, item in node.items())
        if isinstance(node, list):
            return tuple(keys(item) for item in node[:1])
        return None
    return keys(value)


def event_skeleton(events: list[tuple[str, str]]) -> list[tuple]:
    """(event type, key structure) of each event, consecutive repeats folded into one."""
    skeleton = [(kind, json_keys(data)) for kind, data in events]
    return [shape for i, shape in enumerate(skeleton) if i == 0 or shape != skeleton[i - 1]]


class CaptureReplayTests(unittest.TestCase):
    def test_real_vllm_captures_get_their_verdicts(self):
        length = 'application: output budget exhausted (finish_reason=length)'
        expected = {
            'a2_chat_stream_usage_eos_stop.http': (True, None),
            'a3_chat_stream_usage_stopstring.http': (True, None),
            'a1_chat_stream_usage_max16_length.http': (False, length),
            'b1_chat_stream_usage_max1_length.http': (False, length),
            'v1_chat_stream_max64.http': (False, 'finish_reason=length'),
            'd1_err_stream_max_tokens_too_big.http':
                (False, 'http: expected status 200, got 400 Bad Request: '
                        "'max_tokens=100000 cannot be greater than max_model_len=512"),
            'd2_err_stream_unknown_model.http':
                (False, "http: expected status 200, got 404 Not Found: 'The model `nope` does not exist."),
            'z1_engine_crash_midstream_error_http200.http':
                (False, "application: server sent an error event: 'EngineCore encountered an issue."),
        }
        for capture, (ok, words) in expected.items():
            with self.subTest(capture=capture):
                record = replay((TRACES / capture).read_bytes())
                self.assertEqual(record['ok'], ok, record['error'])
                if words:
                    self.assertIn(words, record['error'])
                else:
                    self.assertEqual((record['transport_complete'], record['http']['framing']), (True, 'chunked'))

    def test_real_completions_and_responses_captures_get_their_verdicts(self):
        expected = {
            'g2_completions_stream_usage.http': ('completions', 'application: output budget exhausted '
                                                                '(finish_reason=length)', 'SS\ufffdVE', 4),
            'c3_completions_stream_max8_length.http': ('completions', 'finish_reason=length', None, 8),
            'r1_responses_stream_max16_incomplete.http':
                ('responses', "application: output budget exhausted: response.completed carries status 'incomplete' "
                              '(incomplete_details.reason=max_output_tokens)', None, 16),
            'r2_responses_stream_stopstring_completed.http': ('responses', None, 'Ex7rEx7untrgExp', 9),
            'r5_err_responses_stream_too_many_tokens.http':
                ('responses', "http: expected status 200, got 400 Bad Request: 'max_output_tokens=100000 cannot be "
                              'greater than max_model_len=512', '', None),
        }
        for capture, (api, words, text, tokens) in expected.items():
            with self.subTest(capture=capture):
                record = replay((TRACES / capture).read_bytes(), api=api)
                self.assertEqual((record['api'], record['ok'], record['completion_tokens']),
                                 (api, words is None, tokens), record['error'])
                self.assertIn(words or '', record['error'] or '')
                if text is not None:
                    self.assertEqual(record['text'], text)
        r1 = replay((TRACES / 'r1_responses_stream_max16_incomplete.http').read_bytes(), api='responses')
        self.assertEqual((r1['response_status'], r1['incomplete_reason'], r1['finish_reason'], r1['done']),
                         ('incomplete', 'max_output_tokens', None, True))
        self.assertEqual(r1['response_id'], 'resp_967796df2251c8be')
        r5 = replay((TRACES / 'r5_err_responses_stream_too_many_tokens.http').read_bytes(), api='responses')
        self.assertEqual((r5['server_error']['type'], r5['server_error']['code']), ('BadRequestError', 400))

    def test_real_tool_call_and_json_captures_get_their_verdicts(self):
        budget = 'application: output budget exhausted (finish_reason=length)'
        budget_r = ("application: output budget exhausted: response.completed carries status 'incomplete' "
                    '(incomplete_details.reason=max_output_tokens)')
        out_of_range = ("application: tool call 0 (get_weather): the arguments are not JSON (the number 26e00008859 is "
                        "out of range (it would be inf)): '26e00008859'")
        expected = {  # capture: (error, answer_kind, [(name, arguments) of each call])
            't1_chat_tool_required_max64_number_cut_by_length': (budget + ' inside tool call 0 (get_weather)',
                                                                 'tool_calls', 1),
            't2_chat_tool_required_three_calls_not_objects': (out_of_range, 'tool_calls',
                                                              [('get_weather', '26e00008859'), ('get_weather', '1'),
                                                               ('get_weather', 'false')]),
            't3_chat_tool_named_finish_stop_number_out_of_range': (out_of_range, 'tool_calls', 1),
            't4_chat_tool_required_max16_no_call_yet': (budget, 'text', []),
            't5_chat_json_schema_whitespace_runaway': (budget, 'json', []),
            't6_chat_tool_valid_empty_object': (None, 'tool_calls', [('get_time', '{}')]),
            't7_chat_tool_args_array': ("application: tool call 0 (get_weather): arguments are not a JSON object: '[]'",
                                        'tool_calls', [('get_weather', '[]')]),
            't8_chat_tool_args_missing_required_key': ('application: tool call 0 (get_weather): the arguments do not '
                                                       'match its parameters: $.city: required, but missing',
                                                       'tool_calls', [('get_weather', '{}')]),
            't9_chat_json_schema_ok': (None, 'json', []),
            'r6_responses_tool_required_incomplete': (budget_r + ' inside tool call 0 (get_weather)', 'tool_calls', 1),
            'r7_responses_json_schema_runaway_incomplete': (budget_r, 'json', []),
            'r8_responses_tool_required_completed_not_objects': (out_of_range, 'tool_calls', 3),
            'r9_responses_tool_valid_empty_object': (None, 'tool_calls', [('get_time', '{}')]),
            'r10_responses_json_schema_ok': (None, 'json', []),
        }
        answers = [path.stem for path in TRACES.glob('*.http')  # every chat or Responses tool call or JSON answer
                   if path.stem.startswith('t') or re.match(r'r([6-9]|\d\d)_', path.stem)]
        self.assertEqual(sorted(expected), sorted(answers))
        for name, (error, kind, calls) in expected.items():
            with self.subTest(capture=name):
                record = replay((TRACES / f'{name}.http').read_bytes(), **answer_options(name))
                self.assertEqual((record['ok'], record['error'], record['answer_kind']), (error is None, error, kind))
                seen = [(call['name'], call['arguments']) for call in record['tool_calls']]
                self.assertEqual(len(seen) if isinstance(calls, int) else seen, calls)
                self.assertEqual([call['arguments_problem'] is None for call in record['tool_calls']],
                                 [error is None] * len(seen))
                if kind == 'json' and error is None:
                    self.assertEqual(record['text'], '{}')

    def test_real_messages_captures_get_their_verdicts(self):
        expected = {  # capture: (error, finish_reason, text, tool-call arguments)
            'm1_messages_stream_stop_sequence': (None, 'stop_sequence', 'Ex7rEx7untrgExp', []),
            'm2_messages_stream_max8_max_tokens': ('application: output budget exhausted (stop_reason=max_tokens)',
                                                   'max_tokens', 'Ex7rEx7untrgEx', []),
            'm3_err_messages_unknown_model': ("http: expected status 200, got 404 Not Found: 'The model `nope` does not "
                                              "exist. Valid aliases: tiny.' (NotFoundError)", None, '', []),
            'm4_messages_tool_any_not_an_object': ("application: tool call 0 (get_weather): arguments are not a JSON "
                                                   "object: '10532112110000'", 'tool_use', '', ['10532112110000']),
            'm5_messages_tool_any_empty_string': ("application: tool call 0 (get_weather): arguments are not a JSON "
                                                  "object: '\"\"'", 'tool_use', '', ['""']),
        }
        self.assertEqual(sorted(expected), sorted(path.stem for path in TRACES.glob('m*.http')))
        for name, (error, finish, text, arguments) in expected.items():
            with self.subTest(capture=name):
                record = replay((TRACES / f'{name}.http').read_bytes(), **answer_options(name))
                self.assertEqual((record['api'], record['ok'], record['error'], record['finish_reason'], record['text']),
                                 ('messages', error is None, error, finish, text))
                self.assertEqual([call['arguments'] for call in record['tool_calls']], arguments)
        m3 = replay((TRACES / 'm3_err_messages_unknown_model.http').read_bytes(), api='messages')
        self.assertEqual(m3['server_error'], {'message': 'The model `nope` does not exist. Valid aliases: tiny.',
                                              'type': 'NotFoundError', 'code': None})
        m1 = replay((TRACES / 'm1_messages_stream_stop_sequence.http').read_bytes(), api='messages')
        self.assertEqual((m1['completion_tokens'], m1['response_id']), (9, 'chatcmpl-a61c05345a434ea5'))

    def test_server_killed_midstream_is_a_transport_failure(self):
        record = replay((TRACES / 'k1_server_killed_midstream.http').read_bytes())
        self.assertEqual(record['error'],
                         'transport: chunked body ended without its terminating chunk after 39374 body bytes')
        self.assertEqual((record['transport_complete'], record['event_complete'], record['content_events']),
                         (False, True, 167))

    def test_http_errors_keep_the_servers_fields(self):
        record = replay((TRACES / 'd1_err_stream_max_tokens_too_big.http').read_bytes())
        self.assertEqual(record['server_error']['type'], 'BadRequestError')
        self.assertEqual(record['server_error']['code'], 400)
        self.assertEqual(record['http']['body_bytes'], 213)

    def test_split_emoji_capture_gives_exact_text(self):
        record = replay((TRACES / 'u2_chat_stream_emoji_split_tokens.http').read_bytes())
        self.assertEqual(record['source'], 'replay')  # the fixture marks a replayed head
        self.assertEqual(record['text'], '\ufffd\ufffd\U0001f600\U0001f600')
        self.assertEqual(record['response_id'], 'chatcmpl-9d93a102b876c169')

    def test_request_id_header_is_recorded(self):
        head, body = split_capture(TRACES / 'a2_chat_stream_usage_eos_stop.http')
        head = head.replace(b'vary: Origin\r\n', b'vary: Origin\r\nx-request-id: req-42\r\n')
        self.assertEqual(replay(head + body)['request_id'], 'req-42')

    def test_cut_chunked_body_is_a_transport_failure_even_with_done_inside(self):
        head, body = split_capture(TRACES / 'a2_chat_stream_usage_eos_stop.http')
        record = replay(head + body[:-5])
        self.assertEqual((record['error_layer'], record['transport_complete'], record['application_complete']),
                         ('transport', False, True))
        self.assertIn('without its terminating chunk', record['error'])
        record = replay(head + body[:400])
        self.assertEqual(record['error_layer'], 'transport')
        self.assertIn('inside a chunk', record['error'])

    def test_overlong_and_invalid_framing_fail_at_the_transport(self):
        record = replay(sse_response(b'data: [DONE]\n\nextra', headers='Content-Length: 14\r\n'))
        self.assertEqual(record['error'], 'transport: 5 bytes beyond the declared Content-Length of 14')
        record = replay(sse_response(b'zz\r\n', headers='Transfer-Encoding: chunked\r\n'))
        self.assertIn("transport: invalid chunk size line b'zz'", record['error'])

    def test_a_replay_says_it_closes_so_a_kept_alive_load_is_never_stale(self):
        capture = (TRACES / 'a2_chat_stream_usage_eos_stop.http').read_bytes()
        records: list[dict] = []
        with Fixture(replay=capture) as fixture:
            requests = [stream_client.prepare(fixture.url, 'tiny', 'hi', idle=2)]
            stream_client.run_load(requests, stream_client.LoadSettings(runs=3, keep_alive=True), records.append,
                                   stream_client.Cancel())
        self.assertEqual([(r['ok'], r['error_kind'], r['connection']['reused']) for r in records],
                         [(True, None, False)] * 3)
        self.assertIn(['connection', 'close'], records[0]['http']['headers'])

    def test_close_delimited_body_ends_at_close(self):
        good = (chunk_json(delta={'content': 'hi'}), chunk_json(finish_reason='stop'), '[DONE]')
        body = ''.join(f'data: {data}\n\n' for data in good).encode()
        record = replay(sse_response(body))
        self.assertTrue(record['ok'], record['error'])
        self.assertEqual(record['http']['framing'], 'close')

    def test_wrong_content_type_and_transfer_coding_are_http_failures(self):
        record = replay(b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n{}')
        self.assertEqual(record['error'], "http: expected content-type text/event-stream, got 'application/json'")
        record = replay(sse_response(b'', headers='Transfer-Encoding: gzip, chunked\r\n'))
        self.assertIn('unsupported transfer-encoding', record['error'])

    def test_deeply_nested_json_becomes_an_error_record(self):
        body = b'data: ' + b'[' * 20_000 + b'\n\n'
        record = replay(sse_response(body, headers=f'Content-Length: {len(body)}\r\n'))
        self.assertEqual(record['error_layer'], 'protocol')
        json.dumps(record)

    def test_refused_connection_is_a_connect_failure(self):
        with socket.create_server(('127.0.0.1', 0)) as probe:
            port = probe.getsockname()[1]
        record = stream(f'http://127.0.0.1:{port}/v1/chat/completions', 'm', 'p')
        self.assertEqual(record['error_layer'], 'connect')
        self.assertIn(f'cannot connect to 127.0.0.1:{port}', record['error'])
        self.assertTrue(record['error'].endswith('; is the server running, and listening on that port?'))
        if socket.has_ipv6:
            try:
                with socket.create_server(('::1', 0), family=socket.AF_INET6) as probe:
                    port = probe.getsockname()[1]
            except OSError:
                return  # no IPv6 loopback here
            record = stream(f'http://[::1]:{port}/v1/chat/completions', 'm', 'p')
            self.assertIn(f'cannot connect to [::1]:{port}: ', record['error'])

    def test_a_url_without_scheme_or_path_gets_an_example(self):
        for url, hint in (('localhost:8000', 'did you mean http://localhost:8000/v1/chat/completions?'),
                          ('http://127.0.0.1:8000/v1', 'did you mean /v1/chat/completions?'),
                          ('http://127.0.0.1:8000/v1/', 'did you mean /v1/chat/completions?')):
            with self.subTest(url=url), self.assertRaises(ValueError) as caught:
                stream_client.prepare(url, 'm', 'p')
            self.assertIn(hint, str(caught.exception))

    def test_invalid_arguments_raise_before_connecting(self):
        bad = [('ftp://127.0.0.1/v1/chat/completions', {}), ('https://user:secret@example.com/v1/chat/completions', {}),
               ('http://192.0.2.1:8000/v1/chat/completions', {}), ('http://127.0.0.1:8000/x?q=1', {}),
               ('http://127.0.0.1:8000/x#f', {}), ('http:///v1', {}), ('http://127.0.0.1:99999/x', {}),
               ('http://127.0.0.1/x', {'idle': float('nan')}), ('http://127.0.0.1/x', {'deadline': float('inf')}),
               ('http://127.0.0.1/x', {'idle': -1}), ('http://127.0.0.1/x', {'max_tokens': 0}),
               ('http://127.0.0.1/x', {'max_tokens': 32769}), ('http://127.0.0.1/x', {'token': 'a\nb'}),
               ('http://127.0.0.1/x', {'temperature': -0.5}), ('http://127.0.0.1/x', {'stop': 'x'}),
               ('http://127.0.0.1/x', {'extra': [1]}),
               ('https://localhost/x', {'ca_file': '/nonexistent/ca.pem'})]
        for url, kwargs in bad:
            with self.subTest(url=url, **kwargs), self.assertRaises(ValueError) as caught:
                stream(url, 'demo', 'hi', **kwargs)
            self.assertNotIn('secret', str(caught.exception))


TLS = HERE / 'testdata' / 'tls'


class TlsAndSecretTests(unittest.TestCase):
    def tls_fixture(self, name: str = 'server', **settings) -> Fixture:
        return Fixture(tls_cert=str(TLS / f'{name}.pem'), tls_key=str(TLS / f'{name}.key'), **settings)

    def test_untrusted_certificate_fails_at_the_tls_layer(self):
        with self.tls_fixture() as fixture:
            record = stream(fixture.url.replace('http:', 'https:'), 'm', 'p')
        self.assertEqual(record['error_layer'], 'tls')
        self.assertIn('certificate verification failed for 127.0.0.1', record['error'])

    def test_ca_file_trusts_the_test_ca_for_ip_and_hostname(self):
        with self.tls_fixture(profile='vllm') as fixture:
            for host in ('127.0.0.1', 'localhost'):
                with self.subTest(host=host):
                    url = fixture.url.replace('http://127.0.0.1', f'https://{host}')
                    record = stream(url, 'm', 'p', ca_file=str(TLS / 'ca.pem'))
                    self.assertTrue(record['ok'], record['error'])

    def test_a_scheme_that_does_not_fit_the_port_gets_a_hint(self):
        with Fixture() as plain, self.tls_fixture() as tls:
            https_to_plain = stream(plain.url.replace('http:', 'https:'), 'm', 'p', ca_file=str(TLS / 'ca.pem'))
            http_to_tls = stream(tls.url, 'm', 'p')
            plain.instance.replay = (b'', [b'\x15\x03\x01\x00\x02\x02\x46'])  # a TLS alert, as some servers send
            alert = stream(plain.url, 'm', 'p')
        self.assertEqual(https_to_plain['error'], 'tls: TLS failed with 127.0.0.1: WRONG_VERSION_NUMBER; '
                                                  'the answer was not TLS: is this port plain http?')
        self.assertEqual(http_to_tls['error'], 'transport: connection closed before any response bytes arrived; '
                                               'is this port TLS? try https://')
        self.assertEqual(alert['error'], 'transport: connection closed inside the response head after 7 bytes; '
                                         'is this port TLS? try https://')
        with Fixture(replay=b'HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n') as fixture:
            wrong_type = stream(fixture.url, 'm', 'p')  # a response head arrived: no hint
        self.assertNotIn('TLS', wrong_type['error'])

    def test_certificate_for_another_hostname_fails(self):
        with self.tls_fixture('other') as fixture:
            record = stream(fixture.url.replace('http:', 'https:'), 'm', 'p', ca_file=str(TLS / 'ca.pem'))
        self.assertEqual(record['error_layer'], 'tls')
        self.assertIn("not valid for '127.0.0.1'", record['error'])

    def test_api_key_appears_in_no_output_even_when_the_server_echoes_it(self):
        key = 'sk-secret-8c1f7e'
        echo = json.dumps({'error': {'message': f'invalid key {key}', 'type': 'AuthenticationError', 'code': 401}})
        response = (f'HTTP/1.1 401 Unauthorized\r\ncontent-type: application/json\r\n'
                    f'x-echo: {key}\r\ncontent-length: {len(echo)}\r\n\r\n{echo}').encode()
        with tempfile.TemporaryDirectory() as tmp, Fixture(replay=response) as fixture:
            done = run_cli('--url', fixture.url, '--model', 'm', '--output', 'run.json', '--capture', 'run.http',
                           cwd=tmp, env=dict(os.environ, MODEL_API_KEY=key))
            self.assertEqual(fixture.last_request[0]['Authorization'], f'Bearer {key}')
            outputs = {'stdout': done.stdout, 'stderr': done.stderr,
                       'record': Path(tmp, 'run.json').read_text(), 'capture': Path(tmp, 'run.http').read_text()}
        self.assertEqual(done.returncode, 1)
        self.assertIn('[redacted]', outputs['record'])
        for name, text in outputs.items():
            with self.subTest(output=name):
                self.assertNotIn(key, text)
                self.assertNotIn('8c1f7e', text)


class ConnectProxy:
    """A small forward proxy on loopback, for the tests. It answers CONNECT with ``answer`` (a whole
    response, None to close without a word, or 'stall' to say nothing); after a 2xx it relays bytes both
    ways to the port CONNECT named, on 127.0.0.1 whatever the name. ``seen`` holds each request head."""

    ESTABLISHED = b'HTTP/1.1 200 Connection established\r\n\r\n'

    def __init__(self, answer: bytes | str | None = ESTABLISHED) -> None:
        self.answer, self.seen = answer, []
        self.listener = socket.create_server(('127.0.0.1', 0))
        self.address = f'127.0.0.1:{self.listener.getsockname()[1]}'
        self.closing = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> ConnectProxy:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.closing.set()
        self.thread.join()
        self.listener.close()

    def _serve(self) -> None:
        while not self.closing.is_set():  # a blocked accept() would not wake when the listener closes
            if select.select([self.listener], [], [], 0.05)[0]:
                conn, _ = self.listener.accept()
                threading.Thread(target=self._tunnel, args=(conn,), daemon=True).start()

    def _tunnel(self, conn: socket.socket) -> None:
        with conn:
            head = b''
            while b'\r\n\r\n' not in head:
                data = conn.recv(4096)
                if not data:
                    return
                head += data
            self.seen.append(head)
            if self.answer == 'stall':
                self.closing.wait(30)
            if not isinstance(self.answer, bytes):
                return
            conn.sendall(self.answer)
            if not self.answer.startswith(b'HTTP/1.1 200'):
                return
            port = int(head.split(b'\r\n')[0].split()[1].rsplit(b':', 1)[1])
            with socket.create_connection(('127.0.0.1', port)) as upstream:
                while True:
                    readable, _, _ = select.select([conn, upstream], [], [], 30)
                    for side in readable:
                        data = side.recv(65536)
                        if not data:
                            return
                        (upstream if side is conn else conn).sendall(data)
                    if not readable:
                        return


def resolving_llm_test_to_loopback():
    """socket.getaddrinfo with llm.test (a name that never resolves) answering 127.0.0.1, in this process."""
    real = socket.getaddrinfo

    def getaddrinfo(host, *args, **kwargs):
        return real('127.0.0.1' if host == 'llm.test' else host, *args, **kwargs)
    return mock.patch('socket.getaddrinfo', getaddrinfo)


class ProxyTests(unittest.TestCase):
    """https through a forward proxy (HTTPS_PROXY, CONNECT), NO_PROXY and --no-proxy, and the proxy layer."""

    def setUp(self) -> None:
        self.origin = Fixture(profile='vllm', tls_cert=str(TLS / 'proxied.pem'), tls_key=str(TLS / 'proxied.key'))
        self.origin.__enter__()
        self.addCleanup(self.origin.__exit__)
        self.url = f'https://llm.test:{self.origin.instance.server_port}/v1/chat/completions'

    def environment(self, proxy: ConnectProxy | str, **more: str):
        address = proxy.address if isinstance(proxy, ConnectProxy) else proxy
        variables = {'HTTPS_PROXY': f'http://alice:s3cret-pw@{address}', **more}
        cleared = {name: '' for name in ('https_proxy', 'http_proxy', 'no_proxy', 'NO_PROXY')}
        return mock.patch.dict(os.environ, {**cleared, **variables})

    def test_https_through_a_proxy_is_ok_names_it_and_keeps_its_credentials_out(self):
        with ConnectProxy() as proxy, self.environment(proxy):
            record = stream(self.url, 'm', 'p', ca_file=str(TLS / 'ca.pem'))
            with tempfile.TemporaryDirectory() as tmp:
                done = run_cli('--url', self.url, '--model', 'm', '--ca-file', str(TLS / 'ca.pem'), '--output', 'r.json',
                               '--capture', 'r.http', cwd=tmp, env=dict(os.environ))
                outputs = [done.stdout, done.stderr] + [(Path(tmp) / name).read_bytes().decode('latin-1')
                                                        for name in ('r.json', 'r.http')]
        self.assertTrue(record['ok'], record['error'])
        self.assertEqual((record['proxy'], record['connection']['peer']),
                         ({'address': proxy.address, 'credentials': True}, proxy.address))
        basic = base64.b64encode(b'alice:s3cret-pw').decode()
        self.assertTrue(proxy.seen[0].startswith(f'CONNECT llm.test:{self.origin.instance.server_port} HTTP/1.1\r\n'
                                                 .encode()))
        self.assertIn(f'Proxy-Authorization: Basic {basic}\r\n'.encode(), proxy.seen[0])
        self.assertEqual(done.returncode, 0, done.stderr)
        for text in [json.dumps(record)] + outputs:
            for secret in ('alice', 's3cret-pw', basic):
                self.assertNotIn(secret, text)
        self.assertNotIn('s3cret', repr(stream_client.prepare(self.url, 'm', 'p')))  # nor in a request's repr

    def test_no_proxy_and_the_flag_go_around_it(self):
        with ConnectProxy() as proxy, resolving_llm_test_to_loopback():
            for variables, options in (({'NO_PROXY': 'llm.test'}, {}), ({'no_proxy': '.test'}, {}),
                                       ({'NO_PROXY': '*'}, {}), ({}, {'trust_env': False})):
                with self.subTest(variables=variables, options=options), self.environment(proxy, **variables):
                    record = stream(self.url, 'm', 'p', ca_file=str(TLS / 'ca.pem'), **options)
                    self.assertTrue(record['ok'], record['error'])
                    self.assertEqual((record['proxy'], record['connection']['peer']),
                                     (None, f'127.0.0.1:{self.origin.instance.server_port}'))
            self.assertEqual(proxy.seen, [])

    def test_a_refused_closed_or_silent_tunnel_is_a_proxy_failure(self):
        target = f'llm.test:{self.origin.instance.server_port}'
        cases = {b'HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic\r\n\r\n':
                 f'proxy: the proxy {{}} refused the tunnel to {target}: 407 Proxy Authentication Required',
                 b'HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n':
                 f'proxy: the proxy {{}} refused the tunnel to {target}: 502 Bad Gateway',
                 None: f'proxy: the proxy {{}} closed the connection before answering CONNECT {target}',
                 'stall': 'timeout: no answer to CONNECT from the proxy {} within 0.3 s'}
        for answer, error in cases.items():
            with self.subTest(answer=answer), ConnectProxy(answer) as proxy, self.environment(proxy):
                record = stream(self.url, 'm', 'p', ca_file=str(TLS / 'ca.pem'), idle=0.3)
                self.assertEqual(record['error'], error.format(proxy.address))
                self.assertEqual(record['proxy']['address'], proxy.address)
        with socket.socket() as unused:
            unused.bind(('127.0.0.1', 0))
            address = f'127.0.0.1:{unused.getsockname()[1]}'  # nothing listens there
            with self.environment(address):
                record = stream(self.url, 'm', 'p', ca_file=str(TLS / 'ca.pem'))
        self.assertEqual(record['error_layer'], 'proxy')
        self.assertIn(f'cannot connect to the proxy {address}', record['error'])

    def test_kept_alive_runs_share_one_tunnel(self):
        with ConnectProxy() as proxy, self.environment(proxy):
            request = stream_client.prepare(self.url, 'm', 'p', ca_file=str(TLS / 'ca.pem'))
            records: list[dict] = []
            stream_client.run_load([request], stream_client.LoadSettings(runs=3, keep_alive=True), records.append,
                                   stream_client.Cancel())
        self.assertEqual([(r['ok'], r['connection']['reused'], r['connection']['request_on_connection'])
                          for r in sorted(records, key=lambda r: r['run'])], [(True, False, 1), (True, True, 2),
                                                                               (True, True, 3)])
        self.assertEqual(len(proxy.seen), 1)

    def test_which_proxy_the_environment_names(self):
        from_env = stream_client._proxy_from_environment
        self.assertIsNone(from_env('https', '127.0.0.1', {'HTTPS_PROXY': 'http://p:3128'}))  # loopback: never
        self.assertIsNone(from_env('https', 'localhost', {'HTTPS_PROXY': 'http://p:3128'}))
        self.assertEqual(from_env('https', 'llm.test', {'HTTPS_PROXY': 'http://upper:1', 'https_proxy': 'lower:2'}).address,
                         'lower:2')  # lower case first, as curl reads it; the scheme defaults to http://
        self.assertEqual(from_env('https', 'llm.test', {'HTTPS_PROXY': 'http://p'}).port, 80)
        self.assertIsNone(from_env('https', 'llm.test', {'HTTP_PROXY': 'http://p:1'}))  # http_proxy is for http
        with self.assertRaises(ValueError):
            from_env('https', 'llm.test', {'HTTPS_PROXY': 'socks5://p:1080'})
        self.assertTrue(from_env('https', 'bücher.test', {'HTTPS_PROXY': 'http://p:1'})
                        .connect_request('bücher.test', 443).startswith(b'CONNECT xn--bcher-kva.test:443 HTTP/1.1\r\n'))
        proxy = from_env('https', 'llm.test', {'HTTPS_PROXY': 'http://us%40er:p%3Ass@p:1'})
        self.assertEqual(proxy.authorization, 'Basic ' + base64.b64encode(b'us@er:p:ss').decode())
        self.assertNotIn('p:ss', repr(proxy))

    def test_no_proxy_matches_as_curl_does(self):
        cases = [('*', 'anything.example', True), ('example.com', 'example.com', True),
                 ('example.com', 'www.example.com', True), ('.example.com', 'www.example.com', True),
                 ('example.com', 'notexample.com', False), ('example.com', 'example.com.evil', False),
                 (' Example.COM , other', 'EXAMPLE.com', True), ('10.1.2.3', '10.1.2.3', True),
                 ('10.0.0.0/8', '10.9.9.9', True), ('10.0.0.0/8', '11.0.0.1', False), ('fd00::/8', '[fd12::1]', True),
                 ('::1', '::1', True), ('', 'example.com', False), ('10.0.0.0/8', 'ten.example', False)]
        for no_proxy, host, bypasses in cases:
            with self.subTest(no_proxy=no_proxy, host=host):
                self.assertIs(stream_client._bypasses_proxy(host, no_proxy), bypasses)


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


def consume(reads: list[bytes], api: str = 'chat') -> str | None:
    """Feed a whole response to the client's sans-IO ResponseReader, read by read, then close;
    return the layer of its verdict (None when the answer is complete).

    Any exception other than StreamError escapes, which is what the fuzz tests look for.
    """
    reader = stream_client.ResponseReader(stream_client.VALIDATORS[api]())
    for raw in reads:
        reader.feed(raw)
        if reader.error is not None or reader.message_complete:
            break
    else:
        reader.eof()
    return stream_client.judge(reader).layer


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


ANSWER_EVENTS = (f'data: {chunk_json(delta={"content": "hi"})}\n\ndata: {chunk_json(finish_reason="stop")}\n\n'
                 'data: [DONE]\n\n').encode()
SSE_HEAD = b'HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n'


def chunked(payload: bytes, size_line: bytes | None = None, end: bytes = b'0\r\n\r\n') -> bytes:
    """payload as one chunk (with size_line instead of the usual one, if given), then end."""
    return (size_line or b'%x\r\n' % len(payload)) + payload + b'\r\n' + end


def sized(size_line: bytes) -> bytes:
    """A chunked response whose one chunk has this size line ({n}: the chunk's size in hex)."""
    line = size_line.replace(b'{n}', b'%x' % len(ANSWER_EVENTS))
    return SSE_HEAD + b'Transfer-Encoding: chunked\r\n\r\n' + chunked(ANSWER_EVENTS, line)


class LoopbackServer(threading.Thread):
    """A server on a free loopback port that serves each connection in a thread of its own (serve())
    until close()."""

    def __init__(self, scheme: str = 'http') -> None:
        super().__init__(daemon=True)
        self.listener = socket.create_server(('127.0.0.1', 0))
        self.url = f'{scheme}://127.0.0.1:{self.listener.getsockname()[1]}/v1/chat/completions'

    def run(self) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self.serve, args=(sock,), daemon=True).start()

    def serve(self, sock: socket.socket) -> None:
        raise NotImplementedError

    def close(self) -> None:
        self.listener.close()


class ClosingTlsServer(LoopbackServer):
    """A loopback TLS server that answers each connection's request with the same bytes, then ends the
    connection as ``closure`` says: ``notify`` (TLS's closure alert, close_notify, then the TCP close) or
    ``fin`` (a TCP close without close_notify: an incomplete close, RFC 9112 9.8)."""

    def __init__(self, data: bytes, closure: str) -> None:
        super().__init__('https')
        self.data, self.closure = data, closure
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(TLS / 'server.pem', TLS / 'server.key')

    def serve(self, sock: socket.socket) -> None:
        with contextlib.suppress(OSError):
            sock = self.context.wrap_socket(sock, server_side=True)  # it takes the descriptor over
            request = b''
            while b'\r\n\r\n' not in request:
                request += sock.recv(65536)
            sock.sendall(self.data)
            if self.closure == 'notify':
                sock.settimeout(5)
                sock.unwrap()  # sends close_notify; the client's own alert, or its TCP close, ends the wait
            else:
                sock = socket.socket(fileno=sock.detach())
                sock.shutdown(socket.SHUT_WR)
                sock.settimeout(5)
                sock.recv(1)  # until the client closes
        sock.close()

    def __enter__(self) -> 'ClosingTlsServer':
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class TlsClosureTests(unittest.TestCase):
    """RFC 9112 9.8 over TLS: a close without close_notify (an incomplete close) leaves unfinished a body
    that only the close delimits; Content-Length and chunked bodies end by their framing, whatever the close."""

    BODY = ANSWER_EVENTS
    FRAMINGS = {
        'content-length': SSE_HEAD + b'content-length: %d\r\n\r\n' % len(BODY) + BODY,
        'content-length short': SSE_HEAD + b'content-length: %d\r\n\r\n' % (len(BODY) + 10) + BODY,
        'chunked': SSE_HEAD + b'transfer-encoding: chunked\r\n\r\n' + chunked(BODY),
        'chunked without its last chunk': SSE_HEAD + b'transfer-encoding: chunked\r\n\r\n' + chunked(BODY, end=b''),
        'the close': SSE_HEAD + b'connection: close\r\n\r\n' + BODY,
        'the close, HTTP/1.0': b'HTTP/1.0 200 OK\r\ncontent-type: text/event-stream\r\n\r\n' + BODY,
        'the close, no [DONE]': SSE_HEAD + b'connection: close\r\n\r\n' + BODY.replace(b'data: [DONE]\n\n', b''),
    }
    EXPECTED = {  # (framing, closure): (ok, error_kind)
        ('content-length', 'notify'): (True, None),
        ('content-length', 'fin'): (True, None),
        ('content-length short', 'notify'): (False, 'body_truncated'),
        ('content-length short', 'fin'): (False, 'body_truncated'),
        ('chunked', 'notify'): (True, None),
        ('chunked', 'fin'): (True, None),
        ('chunked without its last chunk', 'notify'): (False, 'no_last_chunk'),
        ('chunked without its last chunk', 'fin'): (False, 'no_last_chunk'),
        ('the close', 'notify'): (True, None),
        ('the close', 'fin'): (False, 'tls_truncated'),
        ('the close, HTTP/1.0', 'notify'): (True, None),
        ('the close, HTTP/1.0', 'fin'): (False, 'tls_truncated'),
        ('the close, no [DONE]', 'notify'): (False, 'eof_before_done'),
        ('the close, no [DONE]', 'fin'): (False, 'tls_truncated'),
    }

    def verdicts(self, framing: str, closure: str) -> list[tuple]:
        """The verdict of one run, then of each run of a load of three (read by the reactor on Linux)."""
        with ClosingTlsServer(self.FRAMINGS[framing], closure) as server:
            request = stream_client.prepare(server.url, 'm', 'p', idle=5, ca_file=str(TLS / 'ca.pem'))
            records = [stream_client.run(request)]
            stream_client.run_load([request], stream_client.LoadSettings(runs=3, concurrency=3), records.append,
                                   stream_client.Cancel())
        return [(record['ok'], record['error_kind']) for record in records]

    def test_each_framing_ends_as_rfc_9112_says_with_and_without_close_notify(self):
        cases = list(self.EXPECTED)
        for case, found in zip(cases, in_threads(lambda case: self.verdicts(*case), cases)):
            with self.subTest(framing=case[0], closure=case[1]):
                self.assertEqual(found, [self.EXPECTED[case]] * 4)

    def test_the_message_names_the_missing_alert_and_what_had_arrived(self):
        with ClosingTlsServer(self.FRAMINGS['the close'], 'fin') as server:
            record = stream(server.url, 'm', 'p', idle=5, ca_file=str(TLS / 'ca.pem'))
        self.assertEqual(record['error_layer'], 'transport')
        self.assertEqual(record['error'], f'transport: the TLS connection closed without close_notify after '
                                          f'{len(self.BODY)} body bytes: a body that ends with the connection is '
                                          f'complete only with that alert')
        self.assertEqual((record['transport_complete'], record['text']), (False, 'hi'))

    def test_the_fixture_ends_its_tls_connections_with_close_notify_unless_told_not_to(self):
        tls = {'tls_cert': str(TLS / 'server.pem'), 'tls_key': str(TLS / 'server.key')}
        for close_notify, expected in ((True, (True, None)), (False, (False, 'tls_truncated'))):
            with self.subTest(close_notify=close_notify), \
                    Fixture(replay=self.FRAMINGS['the close'], close_notify=close_notify, **tls) as fixture:
                record = stream(fixture.url.replace('http:', 'https:'), 'm', 'p', ca_file=str(TLS / 'ca.pem'))
            self.assertEqual((record['ok'], record['error_kind']), expected)
        with self.assertRaisesRegex(ValueError, 'needs tls_cert'):
            fixture_server.server(0, close_notify=False)

    def test_over_plain_tcp_a_close_delimits_the_body(self):
        with Fixture(replay=self.FRAMINGS['the close']) as fixture:
            self.assertTrue(stream(fixture.url, 'm', 'p')['ok'])

    @unittest.skipUnless(hasattr(ssl, 'OP_IGNORE_UNEXPECTED_EOF'), 'OpenSSL 3 names the option')
    def test_the_context_reports_an_end_without_close_notify(self):
        lenient = ssl.create_default_context()
        lenient.options |= ssl.OP_IGNORE_UNEXPECTED_EOF  # as Python 3.8 and 3.9, or an OpenSSL configuration, set it
        with mock.patch.object(ssl, 'create_default_context', lambda **kwargs: lenient):
            context = stream_client._ssl_context(None)
        self.assertFalse(context.options & ssl.OP_IGNORE_UNEXPECTED_EOF)

    def test_the_reader_is_told_of_an_incomplete_close(self):
        for framing, expected in (('the close', 'tls_truncated'), ('content-length', None), ('chunked', None)):
            with self.subTest(framing=framing):
                reader = stream_client.ResponseReader(stream_client.ChatChunks())
                reader.feed(self.FRAMINGS[framing])
                reader.eof(incomplete_close=True)
                self.assertEqual(stream_client.judge(reader).kind, expected)
        reader = stream_client.ResponseReader(stream_client.ChatChunks())
        reader.feed(self.FRAMINGS['the close'])
        reader.eof()
        self.assertIsNone(stream_client.judge(reader).kind)


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
        SSE_HEAD + f'Content-Length: {len(ANSWER_EVENTS)}, 0{len(ANSWER_EVENTS)}\r\n\r\n'.encode() + ANSWER_EVENTS, None),
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

    def test_an_obs_fold_joins_its_value_with_a_space(self):
        head = stream_client._ResponseHeadParser().feed(SSE_HEAD + b'X-Long: a \r\n\t b\r\n\r\n')
        self.assertEqual(head.get('x-long'), 'a b')

    def test_the_request_asks_for_no_compression(self):
        with Fixture() as fixture:
            self.assertTrue(stream(fixture.url, 'm', 'p')['ok'])
            self.assertEqual(fixture.last_request[0]['Accept-Encoding'], 'identity')


FUZZ_SCALE = int(os.environ.get('FUZZ_SCALE', '1'))  # FUZZ_SCALE=20 python3 -m unittest ... runs 20x the cases


class FuzzTests(unittest.TestCase):
    def test_truncated_responses_are_never_complete(self):
        responses = framed_responses()
        self.assertEqual({api for _, _, api in responses}, set(APIS))
        for name, response, api in responses:
            boundaries = {i + 1 for i in range(len(response)) if response[i:i + 1] == b'\n'}
            offsets = set(range(max(0, len(response) - 100), len(response))) | boundaries - {len(response)}
            for offset in sorted(offsets):
                verdict = consume([response[:offset]], api)
                self.assertIsNotNone(verdict, f'{name} cut at {offset} of {len(response)} was judged complete')

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


class TimeoutUnderAttackTests(unittest.TestCase):
    def timed(self, url: str, **kwargs) -> tuple[dict, float]:
        started = time.monotonic()
        record = stream(url, 'm', 'p', **kwargs)
        return record, time.monotonic() - started

    def test_stall_ends_at_the_idle_timeout(self):
        with Fixture('stall') as fixture:
            record, took = self.timed(fixture.url, idle=0.5)
        self.assertEqual(record['error'], 'timeout: no bytes for 0.5 s (idle timeout) after 0 content events')
        self.assertGreaterEqual(took, 0.5)

    def test_drip_ends_at_the_deadline_despite_steady_bytes(self):
        with Fixture('drip', profile='vllm') as fixture:  # a keepalive comment every 0.1 s
            record, took = self.timed(fixture.url, idle=0.6, deadline=1.2)
        self.assertEqual(record['error'], 'timeout: overall deadline of 1.2 s reached during the body phase '
                                          'after 0 content events')
        self.assertGreaterEqual(took, 1.2)
        self.assertGreaterEqual(record['reads'], 1)

    def test_server_that_never_answers_ends_at_the_idle_timeout(self):
        with socket.create_server(('127.0.0.1', 0)) as silent:
            url = f'http://127.0.0.1:{silent.getsockname()[1]}/v1/chat/completions'
            record, took = self.timed(url, idle=0.5)
        self.assertEqual(record['error'], 'timeout: no response headers within the idle timeout of 0.5 s')
        self.assertGreaterEqual(took, 0.5)

    def test_trickled_headers_end_at_the_deadline(self):
        with Fixture(delay=0.1) as fixture:  # one header byte every 0.1 s: never idle for 0.5 s
            fixture.instance.replay = (b'', [b'HTTP/1.1 200 OK\r\nX-Slow: '] + [b'x'] * 40 + [b'\r\n\r\n'])
            record, took = self.timed(fixture.url, idle=0.5, deadline=0.8)
        self.assertEqual(record['error'], 'timeout: overall deadline of 0.8 s reached during the headers phase '
                                          'after 0 content events')
        self.assertGreaterEqual(took, 0.8)

    @unittest.skipUnless(Path('/proc/self/status').exists(), 'peak RSS is read from /proc')
    def test_flood_without_line_breaks_ends_at_the_line_bound_in_bounded_memory(self):
        peak = ('import os, runpy, sys\n'
                'sys.argv = sys.argv[1:]\n'
                'sys.path.insert(0, os.path.dirname(sys.argv[0]))\n'
                'try:\n'
                '    runpy.run_path(sys.argv[0], run_name="__main__")\n'
                'except SystemExit:\n'
                '    pass\n'
                'print([l for l in open("/proc/self/status") if l.startswith("VmHWM")][0], file=sys.stderr)\n')
        with tempfile.TemporaryDirectory() as tmp:
            done = subprocess.run([sys.executable, '-c', peak, CLIENT, '--fixture', 'flood', '--output', 'run.json'],
                                  cwd=tmp, capture_output=True, text=True, timeout=60)
            record = json.loads(Path(tmp, 'run.json').read_text())
        self.assertEqual(record['error'], f'sse: line longer than {MAX_LINE_CHARS} characters without a line end')
        peak_kib = int(done.stderr.split('VmHWM:')[1].split()[0])
        self.assertLess(peak_kib, 100 * 1024)



class LoadTests(unittest.TestCase):
    """Many runs at once: every run judged strictly, the summary built from the verdicts."""

    def setUp(self) -> None:
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.dir = Path(self.tmp.name)

    def load(self, url: str, settings: stream_client.LoadSettings, **options) -> list[dict]:
        """The records of a load, in the order its runs ended."""
        records: list[dict] = []
        requests = [stream_client.prepare(url, 'synthetic-fixture', 'READY', **options)]
        stream_client.run_load(requests, settings, records.append, stream_client.Cancel())
        return records

    def test_a_mixed_load_counts_exactly_what_the_fixture_served(self):
        layers = {mode: row.verdict.error_layer for mode, row in FixtureVerdictTests.EXPECTED.items()}
        for api in APIS:
            with self.subTest(api=api), Fixture('mixed', seed=7, profile='vllm') as fixture:
                url = fixture.url.replace('/v1/chat/completions', URL_PATHS[api])
                records = self.load(url, stream_client.LoadSettings(runs=60, concurrency=8), idle=2)
                served = fixture.instance.schedule.served
            summary = stream_client.Summary()
            for record in records:
                summary.add(record)
            result = summary.result()
            expected = collections.Counter()
            for mode, count in served.items():
                if layers[mode]:
                    expected[layers[mode]] += count
            self.assertEqual(sum(served.values()), 60)
            self.assertEqual(result['not_ok_by_layer'], dict(expected))
            self.assertEqual((result['runs'], result['ok']), (60, served['ok']))
            self.assertGreaterEqual(len(result['not_ok_by_layer']), 4)
            self.assertEqual(sorted(record['run'] for record in records), list(range(60)))
            self.assertEqual({record['load']['concurrency'] for record in records}, {8})

    def test_the_fixture_serves_64_streams_at_once(self):
        # Every response waits until all 64 are being answered at once. Served one at a time, the first
        # would wait alone until the barrier broke, and no run would be ok.
        together = threading.Barrier(64, timeout=60)
        answer = fixture_server.Handler._answer

        def answer_together(handler, *plan) -> None:
            together.wait()
            answer(handler, *plan)
        with mock.patch.object(fixture_server.Handler, '_answer', answer_together), Fixture('ok') as fixture:
            records = self.load(fixture.url, stream_client.LoadSettings(runs=64, concurrency=64),
                                   idle=60, deadline=120)
        self.assertEqual([r['error'] for r in records if not r['ok']], [])
        self.assertEqual((len(records), together.broken), (64, False))

    def test_a_load_of_tool_call_runs_is_counted_exactly(self):
        with Fixture('tool-call', profile='vllm') as good, Fixture('tool-args-array', profile='vllm') as bad:
            requests = [stream_client.prepare(url, 'm', 'p', tools=fixture_server.TOOLS, tool_choice='required')
                        for url in (good.url, bad.url, good.url)]
            records: list[dict] = []
            stream_client.run_load(requests, stream_client.LoadSettings(runs=30, concurrency=6), records.append,
                                   stream_client.Cancel())
        summary = stream_client.Summary()
        for record in records:
            summary.add(record)
        result = summary.result()
        self.assertEqual((result['runs'], result['ok'], result['not_ok_by_layer']), (30, 20, {'application': 10}))
        self.assertEqual(result['not_ok_by_kind'],
                         {'tool_arguments_not_object': 10})
        self.assertEqual({record['run'] % 3 for record in records if not record['ok']}, {1})
        self.assertEqual(result['latency_runs'], 20)  # the ok runs' first text is their first tool-call piece

    def test_keep_alive_reuses_each_workers_connection(self):
        for profile in fixture_server.PROFILES:
            with self.subTest(profile=profile), Fixture(profile=profile) as fixture:
                records = self.load(fixture.url, stream_client.LoadSettings(runs=12, concurrency=3, keep_alive=True))
            connections = {record['connection']['local_port'] for record in records}
            self.assertTrue(all(record['ok'] for record in records), [r['error'] for r in records])
            self.assertLessEqual(len(connections), 3)
            self.assertEqual(sum(not record['connection']['reused'] for record in records), len(connections))
            carried = collections.Counter()  # each connection carried as many requests as its last one counts
            for record in records:
                port, count = record['connection']['local_port'], record['connection']['request_on_connection']
                carried[port] = max(carried[port], count)
            self.assertEqual(sum(carried.values()), 12)
            self.assertEqual({record['load']['keep_alive'] for record in records}, {True})
        with Fixture() as fixture:  # without --keep-alive, one connection per run
            records = self.load(fixture.url, stream_client.LoadSettings(runs=4, concurrency=2))
        self.assertEqual([record['connection']['reused'] for record in records], [False] * 4)

    def test_a_response_that_ends_its_connection_is_not_reused(self):
        body = ANSWER_EVENTS
        cases = {'Connection: close': sse_response(body, headers=f'Content-Length: {len(body)}\r\nConnection: close\r\n'),
                 'HTTP/1.0': sse_response(body, headers=f'Content-Length: {len(body)}\r\n', status='200 OK')
                 .replace(b'HTTP/1.1', b'HTTP/1.0', 1),
                 'a body ended by closing': sse_response(body)}
        for name, response in cases.items():
            with self.subTest(name), Fixture(replay=response) as fixture:
                records = self.load(fixture.url, stream_client.LoadSettings(runs=3, keep_alive=True))
                self.assertEqual([(record['ok'], record['connection']['reused']) for record in records],
                                 [(True, False)] * 3, [record['error'] for record in records])

    def test_a_kept_connection_closed_while_idle_is_named_and_not_retried(self):
        with Fixture(profile='vllm', idle_close=0.05) as fixture:
            request = stream_client.prepare(fixture.url, 'm', 'p')
            kept = stream_client.KeptConnections()
            first = stream_client.run(request, kept=kept)
            connection = kept.take(request.origin)
            self.assertTrue(select.select([connection.sock], [], [], 30)[0])  # the server's close has arrived
            kept.keep(request.origin, connection)
            stale = stream_client.run(request, kept=kept)
            after = stream_client.run(request, kept=kept)
            kept.close()
        self.assertTrue(first['ok'])
        self.assertRegex(stale['error'], r'^transport: the reused connection \(request 2 on it, idle \d+\.\d\d s\) closed '
                                         r'before any response byte; the server or a proxy closed it while idle$')
        self.assertEqual((stale['connection']['reused'], stale['connection']['stale'], stale['headers_ms']),
                         (True, True, None))
        self.assertEqual((after['ok'], after['connection']['reused'], after['connection']['request_on_connection']),
                         (True, False, 1))  # not retried: the next run opens a new connection
        summary = stream_client.Summary()
        for record in (first, stale, after):
            summary.add(record)
        self.assertEqual(summary.result()['stale_connection_failures'], 1)
        # The stale run got no head, but its connection had carried the fixture's answer: so does the record,
        # and a summary of the three is not refused as mixing sources.
        self.assertEqual([record['source'] for record in (first, stale, after)], ['fixture'] * 3)
        self.assertEqual(summary.result()['sources'], ['fixture'])

    def test_plain_http_is_judged_by_the_address_a_name_resolves_to(self):
        real = socket.getaddrinfo

        def getaddrinfo(host, port, *args, **kwargs):  # llm.test resolves to a documentation address
            if host == 'llm.test':
                return [(socket.AF_INET, socket.SOCK_STREAM, 6, '', ('192.0.2.7', port))]
            return real(host, port, *args, **kwargs)
        with mock.patch('socket.getaddrinfo', getaddrinfo), self.assertRaises(ValueError) as caught:
            stream_client.prepare('http://llm.test:8000/v1/chat/completions', 'm', 'p')
        self.assertEqual(str(caught.exception), "plain http is allowed only to loopback addresses, but 'llm.test' "
                                                'resolves to 192.0.2.7; use https or an SSH tunnel to 127.0.0.1')
        with Fixture() as fixture, resolving_llm_test_to_loopback():  # a name that resolves to loopback is fine
            record = stream(fixture.url.replace('127.0.0.1', 'llm.test'), 'm', 'p')
        self.assertEqual((record['ok'], record['connection']['peer'][:10]), (True, '127.0.0.1:'))
        reached = types.SimpleNamespace(peer_ip='192.0.2.7', peer='192.0.2.7:8000')  # as if DNS changed meanwhile
        with self.assertRaises(StreamError) as caught:
            stream_client._check_plain_peer(reached, types.SimpleNamespace(host='llm.test'))
        self.assertEqual(str(caught.exception), 'connect: plain http is allowed only to loopback addresses, but '
                                                'llm.test connected to 192.0.2.7:8000; nothing was sent')

    def test_failed_runs_stay_out_of_the_latency_figures(self):
        summary = stream_client.Summary()
        base = {'started_at': '2026-11-30T10:00:00.000Z', 'event_gaps_ms': [1.0], 'content_events': 2,
                'completion_tokens': 3, 'headers_ms': 1.0, 'first_text_ms': 10.0, 'duration_ms': 100.0}
        summary.add({**base, 'ok': True})
        summary.add({**base, 'ok': False, 'error_layer': 'transport', 'first_text_ms': 5000.0,
                     'duration_ms': 9000.0, 'error': 'transport: connection closed after 4 of 9 body bytes',
                     'error_kind': 'body_truncated'})
        result = summary.result()
        self.assertEqual(result['latency_ms']['first_text_ms'], {'p50': 10.0, 'p90': 10.0, 'p99': 10.0, 'max': 10.0})
        self.assertEqual((result['latency_runs'], result['latency_excludes']), (1, 1))
        self.assertEqual(result['not_ok_by_kind'], {'body_truncated': 1})
        self.assertEqual((result['wall_s'], result['completion_tokens_per_s']), (9.0, round(3 / 9, 3)))

    def test_a_kept_connection_shut_by_a_cancel_is_an_interruption_not_a_stale_connection(self):
        cancel = stream_client.Cancel()
        x = fake_exchange('HEADERS', reused=True, idle_s=0.0, cancel=cancel,
                          connection=types.SimpleNamespace(requests=29))
        self.assertEqual(stream_client._exchange_failure(ConnectionResetError(104, 'reset'), x).kind,
                         'stale_connection')  # before any cancel: the server closed it while idle
        cancel.cancel('SIGINT')
        failure = stream_client._exchange_failure(ConnectionResetError(104, 'reset'), x)
        self.assertEqual((failure.layer, failure.kind), ('interrupted', 'interrupted'))
        self.assertEqual(failure.message, 'SIGINT during the headers phase after 0 content events')

    def test_the_mean_in_flight_is_the_runs_durations_over_the_wall_time(self):
        summary = stream_client.Summary()
        for start, duration in (('00.000', 1000.0), ('00.500', 1000.0), ('01.000', 500.0), ('02.000', None)):
            summary.add({'started_at': f'2026-11-30T10:00:{start}Z', 'duration_ms': duration, 'ok': False,
                         'error_layer': 'connect', 'error_kind': 'connect_refused', 'error': 'connect: refused'})
        result = summary.result()
        self.assertEqual(result['wall_s'], 2.0)  # from the first start to the last end
        self.assertEqual(result['mean_in_flight'], round(2.5 / 2.0, 3))  # failed runs were in flight too

    def test_percentiles_use_the_nearest_rank(self):
        values = list(range(1, 101))
        self.assertEqual(stream_client._percentiles(values), {'p50': 50, 'p90': 90, 'p99': 99, 'max': 100})
        histogram = stream_client._GapHistogram()
        histogram.add([0.0] * 50 + [10.0] * 49 + [200.0])
        result = histogram.result()
        self.assertEqual((result['p50'], result['max'], result['count']), (0.0, 200.0, 100))
        self.assertTrue(10.0 <= result['p90'] <= 10.1, result)

    def test_a_stalled_connection_does_not_hold_back_the_others(self):
        # Runs alternate between a server that never sends a byte of body and a quick one. The stalled runs
        # would wait far longer than the test; once the four quick runs have their records, the load is
        # cancelled. Had a stalled run held the others back, no quick run could have ended before it.
        cancel, records = stream_client.Cancel(), []

        def on_record(record: dict) -> None:
            records.append(record)
            if sum(record['ok'] for record in records) == 4:
                cancel.cancel('SIGINT')
        with Fixture('stall') as stalled, Fixture('ok', delay=0) as quick:
            requests = [stream_client.prepare(stalled.url, 'm', 'p', idle=60, deadline=120),
                        stream_client.prepare(quick.url, 'm', 'p')]
            stream_client.run_load(requests, stream_client.LoadSettings(runs=8, concurrency=8), on_record, cancel)
        self.assertEqual([(record['run'] % 2, record['ok']) for record in records[:4]], [(1, True)] * 4)
        self.assertEqual([(record['run'] % 2, record['error_layer']) for record in records[4:]],
                         [(0, 'interrupted')] * 4)

    def test_an_open_loop_follows_its_seeded_schedule(self):
        # The schedule is computed, so it is tested without sleeping: evenly spaced or Poisson at the rate.
        constant = stream_client.LoadSettings(runs=5, rate=20, arrivals='constant')
        self.assertEqual([round(at, 9) for at in stream_client.arrival_offsets(constant)], [0, .05, .1, .15, .2])
        poisson = stream_client.LoadSettings(runs=20_000, rate=10, seed=3)
        offsets = list(stream_client.arrival_offsets(poisson))
        self.assertEqual(offsets, list(stream_client.arrival_offsets(poisson)))
        self.assertNotEqual(offsets[:5], list(stream_client.arrival_offsets(dataclasses.replace(poisson, seed=4)))[:5])
        gaps = [later - earlier for earlier, later in zip(offsets, offsets[1:])]
        self.assertTrue(all(gap >= 0 for gap in gaps))
        self.assertAlmostEqual(statistics.mean(gaps) / 0.1, 1, places=1)   # mean gap 1/rate
        self.assertAlmostEqual(statistics.stdev(gaps) / 0.1, 1, places=1)  # exponential: stdev = mean
        # The load starts no run before it is due, and says how late each one started.
        settings = stream_client.LoadSettings(runs=6, rate=20, arrivals='constant')
        due_ms = [at * 1000 for at in stream_client.arrival_offsets(settings)]
        with Fixture('ok', delay=0) as fixture:
            records = self.load(fixture.url, settings)
        self.assertEqual(sorted(record['run'] for record in records), list(range(6)))
        for record in records:
            with self.subTest(run=record['run']):
                self.assertGreaterEqual(record['offset_ms'] + 0.001, due_ms[record['run']])
                self.assertAlmostEqual(record['queued_ms'], record['offset_ms'] - due_ms[record['run']], places=2)

    def test_the_command_line_writes_one_record_per_line_and_a_summary(self):
        with Fixture('mixed', profile='vllm', seed=5) as fixture:
            done = run_cli('--url', fixture.url, '--model', 'm', '--runs', '30', '--concurrency', '6',
                           '--output', 'mixed.jsonl', cwd=self.tmp.name, timeout=60)
        self.assertIn(done.returncode, (0, 1), done.stderr)
        lines = (self.dir / 'mixed.jsonl').read_text().splitlines()
        records = [json.loads(line) for line in lines]
        self.assertEqual(sorted(record['run'] for record in records), list(range(30)))
        for record in records:
            self.assertEqual(set(record) >= {'ok', 'error_layer', 'request', 'offset_ms', 'load'}, True)
            self.assertEqual(len(record['request']['prompt_sha256']), 64)
        summary = json.loads(done.stdout)
        self.assertEqual((summary['runs'], summary['ok']), (30, sum(record['ok'] for record in records)))
        self.assertEqual(done.returncode, 0 if summary['ok'] == 30 else 1)
        self.assertEqual(done.stderr.count('\n'), summary['not_ok'])  # one line per run that is not ok
        again = run_cli('--fixture', 'ok', '--runs', '2', '--output', 'mixed.jsonl', cwd=self.tmp.name)
        self.assertEqual(again.returncode, 2)
        self.assertEqual((self.dir / 'mixed.jsonl').read_text().splitlines(), lines)
        missing = run_cli('--fixture', 'ok', '--runs', '2', '--output', 'no/such/dir.jsonl', cwd=self.tmp.name)
        self.assertEqual((missing.returncode, missing.stderr.count('\n')), (2, 1))

    def test_summary_of_two_files_equals_that_of_one_holding_both(self):
        for name, seed in (('a', 1), ('b', 2)):
            with Fixture('mixed', seed=seed) as fixture:
                run_cli('--url', fixture.url, '--model', 'm', '--runs', '12', '--concurrency', '4',
                        '--output', f'{name}.jsonl', '--quiet', cwd=self.tmp.name, timeout=60)
        both = self.dir / 'both.jsonl'
        both.write_text((self.dir / 'a.jsonl').read_text() + (self.dir / 'b.jsonl').read_text())
        split = run_cli('--summary', 'a.jsonl', 'b.jsonl', cwd=self.tmp.name)
        whole = run_cli('--summary', 'both.jsonl', cwd=self.tmp.name)
        self.assertEqual(json.loads(split.stdout), json.loads(whole.stdout))
        self.assertEqual(json.loads(whole.stdout)['runs'], 24)
        self.assertEqual(split.returncode, 0 if json.loads(split.stdout)['not_ok'] == 0 else 1)

    def test_summary_recomputes_what_the_load_printed_and_refuses_mixed_sources(self):
        with Fixture('mixed', seed=3) as fixture:
            done = run_cli('--url', fixture.url, '--model', 'm', '--runs', '10', '--concurrency', '4',
                           '--output', 'load.jsonl', '--quiet', cwd=self.tmp.name, timeout=60)
        again = run_cli('--summary', 'load.jsonl', cwd=self.tmp.name)
        self.assertEqual(json.loads(again.stdout), json.loads(done.stdout))
        capture = (TRACES / 'a2_chat_stream_usage_eos_stop.http').read_bytes()
        with Fixture(replay=capture) as fixture:
            run_cli('--url', fixture.url, '--model', 'tiny', '--output', 'replay.json', cwd=self.tmp.name)
        refused = run_cli('--summary', 'load.jsonl', 'replay.json', cwd=self.tmp.name)
        self.assertEqual((refused.returncode, refused.stdout), (2, ''))
        self.assertIn('refusing to summarize records of different sources (fixture, replay)', refused.stderr)
        mixed = run_cli('--summary', 'load.jsonl', 'replay.json', '--mixed-sources', cwd=self.tmp.name)
        self.assertEqual(json.loads(mixed.stdout)['runs'], 11)
        (self.dir / 'bad.jsonl').write_text((self.dir / 'load.jsonl').read_text() + 'not a record\n')
        bad = run_cli('--summary', 'bad.jsonl', cwd=self.tmp.name)
        self.assertEqual((bad.returncode, bad.stderr.strip()), (2, 'stream_client.py: error: bad.jsonl line 11 is '
                                                                   'not an evidence record'))

    def test_prompts_cycle_in_order_and_a_bad_line_is_named_before_anything_is_sent(self):
        (self.dir / 'prompts.jsonl').write_text('"first"\n{"prompt": "second", "system": "terse", "max_tokens": 9}\n')
        with Fixture(delay=0) as fixture:
            seen = []
            original = fixture_server.Handler._read_request
            def spy(handler):
                request = original(handler)
                seen.append(request)
                return request
            fixture_server.Handler._read_request = spy
            try:
                done = run_cli('--url', fixture.url, '--model', 'm', '--prompts', 'prompts.jsonl', '--runs', '3',
                               '--output', 'p.jsonl', cwd=self.tmp.name)
            finally:
                fixture_server.Handler._read_request = original
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual([request['messages'][-1]['content'] for request in seen], ['first', 'second', 'first'])
        self.assertEqual((seen[1]['messages'][0], seen[1]['max_tokens'], seen[0]['max_tokens']),
                         ({'role': 'system', 'content': 'terse'}, 9, 128))
        for content, line, words in (('"a"\n{"prompt": 3}\n', 2, 'expected a JSON string, or an object'),
                                     ('"a"\n\n', 2, 'not JSON'), ('{"prompt": "a", "temp": 1}\n', 1, 'unknown keys temp'),
                                     ('{"prompt": "a", "max_tokens": 0}\n', 1, '"max_tokens" must be an integer')):
            with self.subTest(content=content):
                (self.dir / 'bad.jsonl').write_text(content)
                with Fixture() as fixture:
                    bad = run_cli('--url', fixture.url, '--model', 'm', '--prompts', 'bad.jsonl', '--runs', '2',
                                  '--output', 'bad-run.jsonl', cwd=self.tmp.name)
                    self.assertIsNone(fixture.last_request)
                self.assertEqual(bad.returncode, 2)
                self.assertEqual(bad.stderr, f'stream_client.py: error: --prompts bad.jsonl line {line}: {words}'
                                 + bad.stderr.split(words, 1)[1])
                self.assertFalse((self.dir / 'bad-run.jsonl').exists())

    def test_a_fixed_length_load_expects_length(self):
        with Fixture('length') as fixture:
            ok = run_cli('--url', fixture.url, '--model', 'm', '--max-tokens', '3', '--expect-finish', 'length',
                         '--runs', '2', '--output', 'a.jsonl', '--quiet', cwd=self.tmp.name)
            short = run_cli('--url', fixture.url, '--model', 'm', '--max-tokens', '4', '--expect-finish', 'length',
                            '--runs', '2', '--output', 'b.jsonl', '--quiet', cwd=self.tmp.name)
        self.assertEqual(json.loads(ok.stdout)['ok'], 2)
        self.assertEqual(json.loads(short.stdout)['not_ok_by_kind'],
                         {'length_tokens_differ': 2})
        stop = run_cli('--fixture', 'ok', '--expect-finish', 'length', '--output', 'c.json', cwd=self.tmp.name)
        self.assertIn('expected finish_reason=length (--expect-finish length), got finish_reason=stop', stop.stderr)
        self.assertEqual(json.loads((self.dir / 'c.json').read_text())['request']['expect_finish'], 'length')

    def test_load_flags_that_do_not_fit_exit_2(self):
        cases = {'capture with runs': ['--runs', '2', '--capture', 'c.http'], 'zero runs': ['--runs', '0'],
                 'zero concurrency': ['--runs', '2', '--concurrency', '0'], 'negative rate': ['--rate', '-1'],
                 'prompts and prompt': ['--prompts', 'p.jsonl', '--prompt', 'x'], 'unknown arrivals':
                 ['--rate', '2', '--arrivals', 'bursty'], 'missing prompts file': ['--prompts', 'absent.jsonl']}
        (self.dir / 'p.jsonl').write_text('"x"\n')
        for name, args in cases.items():
            with self.subTest(name):
                done = run_cli('--fixture', 'ok', '--output', 'run.jsonl', *args, cwd=self.tmp.name)
                self.assertEqual((done.returncode, done.stderr.count('\n')), (2, 1), done.stderr)
                self.assertFalse((self.dir / 'run.jsonl').exists())

    def test_the_runs_that_start_are_the_first_ones_whatever_the_threads_timing(self):
        cancelled, decided, ran = threading.Event(), [], []

        def admit(job: int) -> bool:
            if job == 0:
                time.sleep(0.2)  # the chance for another thread to take job 1 and decide first
            decided.append(job)
            return not cancelled.is_set()

        def work(job: int) -> None:
            ran.append(job)
            if job == 1:
                cancelled.set()
        pool = stream_client._Pool(2, work, admit)
        for job in range(6):
            pool.submit(job)
        pool.close()
        self.assertEqual(decided, list(range(6)))
        self.assertEqual(sorted(ran), list(range(len(ran))))
        self.assertLess(len(ran), 6)

    def test_a_run_taken_up_just_before_the_cancel_is_interrupted_and_connects_nowhere(self):
        listener = socket.create_server(('127.0.0.1', 0))
        self.addCleanup(listener.close)
        listener.setblocking(False)
        request = stream_client.prepare(f'http://127.0.0.1:{listener.getsockname()[1]}/v1/chat/completions', 'm', 'p')
        cancel = stream_client.Cancel()
        cancel.cancel('SIGTERM')
        record = stream_client._run(request, stream_client._Show(), None, cancel, None)
        self.assertEqual((record['error_layer'], record['error']), ('interrupted', 'interrupted: SIGTERM before the request was sent'))
        with self.assertRaises(BlockingIOError):
            listener.accept()

    def test_ctrl_c_keeps_one_valid_line_per_started_run(self):
        for signum, status, presses in ((signal.SIGINT, 130, 1), (signal.SIGINT, 130, 2), (signal.SIGTERM, 143, 1)):
            with self.subTest(signal=signum.name, presses=presses), Fixture('ok', delay=0.02) as fixture:
                output = self.dir / f'{signum.name}-{presses}.jsonl'
                process = subprocess.Popen(script_command(CLIENT, '--url', fixture.url, '--model', 'm', '--runs',
                                                   '200', '--concurrency', '4', '--output', str(output)),
                                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=script_env())
                deadline = time.monotonic() + 20
                while time.monotonic() < deadline and (not output.exists() or output.read_text().count('\n') < 6):
                    time.sleep(0.05)
                for _ in range(presses):
                    process.send_signal(signum)
                    time.sleep(0.01)
                stdout, stderr = process.communicate(timeout=20)
                self.assertEqual(process.returncode, status, stderr)
                records = [json.loads(line) for line in output.read_text().splitlines()]
                self.assertEqual(sorted(record['run'] for record in records), list(range(len(records))))
                self.assertLess(len(records), 200)
                interrupted = [record for record in records if record['error_layer'] == 'interrupted']
                self.assertTrue(interrupted)
                self.assertTrue(all(signum.name in record['error'] for record in interrupted))
                self.assertEqual(json.loads(stdout)['runs'], len(records))
                self.assertEqual(json.loads(stdout)['planned_runs'], 200)
                self.assertEqual({record['load']['runs'] for record in records}, {200})
                self.assertEqual(len({record['load']['id'] for record in records}), 1)

    def test_progress_on_a_terminal_then_the_table(self):
        status, text = run_in_terminal('--fixture', 'mixed', '--runs', '12', '--concurrency', '4', '--output', 'p.jsonl',
                                       cwd=self.tmp.name)
        self.assertIn(status, (0, 1))
        self.assertRegex(text, r'\r\x1b\[Kruns \d+/12  ok \d+  not ok \d+  [\d.]+ s  p50 first text (\d+ ms|-)')
        self.assertIn('\r\x1b[Kruns 12  ok ', text)
        self.assertIn('latency of ', text)
        self.assertIn('content-event gaps', text)

    def test_on_a_terminal_the_table_replaces_the_json_line(self):
        status, text = run_in_terminal('--fixture', 'ok', '--runs', '6', '--concurrency', '2', '--output', 'c.jsonl',
                                       '--report', 'c.html', cwd=self.tmp.name, stdout_too=True)
        self.assertEqual(status, 0, text)
        self.assertRegex(text, r'p50 first text \d+ ms\r\x1b\[Kruns 6  ok 6')  # the table starts on a cleared line
        self.assertNotIn('{"runs"', text)  # 1.5 KB of JSON would wrap to a screenful before the table
        self.assertIn('(the JSON summary goes to stdout when it is redirected; or run --summary c.jsonl)', text)
        self.assertTrue(text.rstrip().endswith('report written to c.html'), text)
        for line in text.split('\r\x1b[K')[-1].splitlines():
            self.assertLessEqual(len(line), 100, line)
        status, text = run_in_terminal('--summary', 'c.jsonl', cwd=self.tmp.name, stdout_too=True)
        self.assertEqual(status, 0, text)
        self.assertIn('latency of 6 ok runs', text)
        self.assertIn('(the JSON summary goes to stdout when it is redirected)', text)

    def test_a_run_that_shows_nothing_says_what_it_waits_for(self):
        class Terminal(list):
            def isatty(self) -> bool:
                return True
            write = list.append

            def flush(self) -> None:
                pass
        request = stream_client.prepare('http://[::1]:8000/v1/chat/completions', 'm', 'p', idle=10, deadline=60)
        quiet, shown = Terminal(), Terminal()
        stream_client._LiveView(quiet, False).wait_notice(request)  # the timer's call, made at once
        self.assertEqual(''.join(quiet), f'waiting {stream_client._LiveView.WAIT_NOTICE_S:g} s so far for the answer '
                                         'from [::1]:8000; the run ends after --idle 10 s without a byte or at '
                                         '--deadline 60 s; Ctrl+C stops it and keeps the record\n')
        view = stream_client._LiveView(shown, False)
        view.text('READY')
        view.wait_notice(request)  # too late: something is on the screen
        self.assertEqual(shown, ['READY'])
        view.start_waiting(request)
        view.verdict(fake_record(0))
        self.assertTrue(view._timer.finished.is_set())  # the verdict cancelled the notice

    def test_the_tables_fit_80_columns(self):
        summary = stream_client.Summary()
        for run in range(30):
            summary.add(fake_record(run, ok=run % 3 == 0, error=f'{stream_client.LAYERS[run % 11]}: '
                                                                f'{"a long message " * 10}{run}'))
        table = stream_client._summary_table(summary.result())
        self.assertIn('not ok by layer', table)
        for line in table.splitlines():
            self.assertLessEqual(len(line), stream_client._TERMINAL_COLUMNS, line)
        records = [{**fake_record(0), 'model': 'Qwen/Qwen2.5-1.5B-Instruct', 'source': 'endpoint'}] * 2
        for line in stream_client._compare_table(['before.json', 'after.json'], records).splitlines():
            self.assertLessEqual(len(line), stream_client._TERMINAL_COLUMNS, line)

    def test_a_summary_counts_the_runs_each_load_planned(self):
        def line(run: int, load_id: str | None, runs: int) -> dict:
            record = fake_record(run)
            if load_id:
                record['load'] = {'runs': runs, 'concurrency': 1, 'rate': None, 'arrivals': None, 'seed': 0,
                                  'id': load_id}
            return record
        summary = stream_client.Summary()
        for record in [line(0, 'a', 200), line(1, 'a', 200), line(0, 'b', 50), line(0, None, 1)]:
            summary.add(record)
        result = summary.result()
        self.assertEqual((result['runs'], result['planned_runs']), (4, 251))
        self.assertIn('runs 4  ok 4  not ok 0  (of 251 planned)', stream_client._summary_table(result))
        report = stream_client.Report(summary)
        self.assertIn('<h1>4 of 4 runs ok  (of 251 planned)</h1>', report.html())


class PageReader(html.parser.HTMLParser):
    """What a report page holds: element names, timeline rows, every attribute, the text of each table row."""

    def __init__(self, page: str) -> None:
        super().__init__()
        self.tags, self.attributes, self.rows, self.cells, self.text = collections.Counter(), [], 0, [], []
        self._row: list[str] | None = None
        self.feed(page)
        self.close()

    def handle_starttag(self, tag: str, attrs: list) -> None:
        self.tags[tag] += 1
        self.attributes += attrs
        if tag == 'g' and ('class', 'run') in attrs:
            self.rows += 1
        if tag == 'tr':
            self._row = []

    def handle_endtag(self, tag: str) -> None:
        if tag == 'tr' and self._row is not None:
            self.cells.append(self._row)
            self._row = None

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self._row is not None and data.strip():
            self._row.append(data.strip())

    def cell(self, name: str) -> str:
        return next(row[1] for row in self.cells if row[0] == name)


def fake_record(run: int, ok: bool = True, error: str | None = None, start: str = '2026-11-30T10:00:00.000Z') -> dict:
    return {'run': run, 'ok': ok, 'error_layer': None if ok else error.split(':')[0], 'error': error,
            'started_at': start, 'headers_ms': 1.0, 'first_text_ms': 10.0 + run % 7, 'duration_ms': 100.0 + run % 5,
            'event_gaps_ms': [1.0], 'content_events': 2, 'completion_tokens': 3, 'source': 'endpoint', 'api': 'chat',
            'model': 'm', 'url': 'http://127.0.0.1:8000/v1/chat/completions', 'request': {'prompt_sha256': 'ab'},
            'load': {'concurrency': 4}, 'client': {'version': stream_client.__version__}}


class ReactorTests(unittest.TestCase):
    """A load's responses are read by one _Reactor thread per process (Linux): the verdicts are a single
    run's, whether the reactor or the worker threads read; every read of a pass is stamped before any is
    fed; a bug in the reactor fails the runs instead of hanging them; the gate lets one worker through."""

    def load_records(self, url: str, runs: int, epoll: bool, **options) -> list[dict]:
        records: list[dict] = []
        request = stream_client.prepare(url, 'synthetic-fixture', 'READY', **options)
        with mock.patch.object(stream_client, '_EPOLL', epoll):
            stream_client.run_load([request], stream_client.LoadSettings(runs=runs, concurrency=runs), records.append,
                                   stream_client.Cancel())
        return sorted(records, key=lambda record: record['run'])

    def test_every_mode_gets_a_single_runs_verdict_in_a_load_read_by_the_reactor_or_by_the_workers(self):
        runs = [(mode, profile) for mode, api, profile in mode_runs() if api == 'chat']

        def verdicts(run: tuple[str, str]) -> list[tuple]:
            mode, profile = run
            options = {'idle': 0.3, **FixtureVerdictTests.EXPECTED[mode].options}
            with Fixture(mode, profile=profile) as fixture:
                records = [stream(fixture.url, 'synthetic-fixture', 'READY', **options)]
                records += self.load_records(fixture.url, 2, True, **options)
                records += self.load_records(fixture.url, 2, False, **options)
            return [(record['ok'], record['error_layer'], record['error_kind'], record['text']) for record in records]
        for (mode, profile), found in zip(runs, in_threads(verdicts, runs)):
            with self.subTest(mode=mode, profile=profile):
                self.assertEqual(found[0][1], FixtureVerdictTests.EXPECTED[mode].verdict.error_layer)
                self.assertEqual(found, found[:1] * 5)

    def test_every_read_of_a_pass_is_stamped_before_any_of_them_is_fed(self):
        reactor, fed, pairs = stream_client._Reactor(), [], [tcp_pair(self) for _ in range(3)]
        self.addCleanup(reactor.close)
        for ours, theirs in pairs:
            theirs.sendall(b'HTTP/1.1 200 OK\r\n')
        request = stream_client.prepare('http://127.0.0.1:9/v1/chat/completions', 'm', 'p')
        readings = [stream_client._Reading(stream_client._Connection(ours), stream_client._Exchange(request),
                                           time.perf_counter()) for ours, _ in pairs]
        reads = collections.deque()
        for reading in readings:
            reading.connection.sock.setblocking(False)
            reactor._readings[reading.fd] = reading
        reactor._read_ready([(reading.fd, select.EPOLLIN) for reading in readings], reads)

        def take_read(x, raw, now, kernel_ns):
            fed.append((time.perf_counter(), now))
            return []
        with mock.patch.object(stream_client, '_take_read', take_read):
            while reads:
                reactor._feed(*reads.popleft())
        self.assertEqual(len(fed), 3)
        self.assertLess(max(stamp for _, stamp in fed), min(when for when, _ in fed))
        self.assertEqual([stamp for _, stamp in fed], sorted(stamp for _, stamp in fed))  # fed in the order read

    def test_a_bug_in_the_reactor_fails_its_runs_and_hangs_none(self):
        def broken(*args):
            raise RuntimeError('a bug')
        with Fixture('ok') as fixture:
            for where in ('_read_ready', '_feed'):
                with self.subTest(where=where), mock.patch.object(stream_client._Reactor, where, broken):
                    records = self.load_records(fixture.url, 4, True)
                    self.assertEqual([record['error_kind'] for record in records], ['client_error'] * 4)
                    self.assertTrue(all('RuntimeError' in record['error'] for record in records))
            with mock.patch.object(stream_client, '_take_read', broken):  # a bug in one run's read
                records = self.load_records(fixture.url, 4, True)
            self.assertEqual([record['error_kind'] for record in records], ['client_error'] * 4)
            self.assertTrue(all(record['ok'] for record in self.load_records(fixture.url, 4, True)))

    def test_kept_connections_are_reused_when_their_descriptors_are_above_1023(self):
        # select() refuses descriptors from 1,024 up: a load at concurrency 1,024 in one process has them
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft < 1200:
            self.skipTest(f'this process may open only {soft} files')
        padding = [os.open(os.devnull, os.O_RDONLY) for _ in range(1030)]
        try:
            with Fixture('ok', profile='vllm') as fixture:
                records: list[dict] = []
                stream_client.run_load([stream_client.prepare(fixture.url, 'synthetic-fixture', 'READY')],
                                       stream_client.LoadSettings(runs=3, keep_alive=True), records.append,
                                       stream_client.Cancel())
        finally:
            for fd in padding:
                os.close(fd)
        self.assertEqual([record['ok'] for record in records], [True] * 3, [record['error'] for record in records])
        self.assertEqual([record['connection']['reused'] for record in records], [False, True, True])

    def test_every_run_of_a_load_has_its_record_when_the_client_fails_in_it(self):
        def broken(*args, **kwargs):
            raise RuntimeError('a bug')
        with Fixture('ok', profile='vllm') as fixture:
            for target, name in ((stream_client.KeptConnections, 'take'), (stream_client, '_run')):
                with self.subTest(name), mock.patch.object(target, name, broken):
                    records: list[dict] = []
                    stream_client.run_load([stream_client.prepare(fixture.url, 'synthetic-fixture', 'READY')],
                                           stream_client.LoadSettings(runs=4, concurrency=2, keep_alive=True),
                                           records.append, stream_client.Cancel())
                    self.assertEqual(sorted(record['run'] for record in records), [0, 1, 2, 3])
                    self.assertEqual({record['error_kind'] for record in records}, {'client_error'})
                    self.assertTrue(all('RuntimeError' in record['error'] and 'a bug' in record['error'] for record in records))

    def test_a_tls_load_is_read_by_the_reactor_on_kept_connections(self):
        with Fixture('ok', profile='vllm', tls_cert=str(TLS / 'server.pem'), tls_key=str(TLS / 'server.key')) as fixture:
            url = fixture.url.replace('http:', 'https:')
            for keep_alive in (False, True):
                records: list[dict] = []
                request = stream_client.prepare(url, 'synthetic-fixture', 'READY', ca_file=str(TLS / 'ca.pem'))
                stream_client.run_load([request], stream_client.LoadSettings(runs=6, concurrency=2, keep_alive=keep_alive),
                                       records.append, stream_client.Cancel())
                with self.subTest(keep_alive=keep_alive):
                    self.assertEqual([record['ok'] for record in records], [True] * 6, [r['error'] for r in records])
                    self.assertEqual({record['text'] for record in records}, {ANSWER})
                    self.assertEqual(sum(record['connection']['reused'] for record in records), 4 if keep_alive else 0)

    def test_the_gate_lets_one_worker_through_until_it_waits_on_the_network(self):
        gate, inside, order = stream_client._Gate(threading.Lock()), threading.Event(), []

        def second() -> None:
            with gate:
                order.append('second in')
                inside.set()
        with gate:
            other = threading.Thread(target=second)
            other.start()
            self.assertFalse(inside.wait(0.1))  # it cannot pass while the gate is held
            with gate.released():
                self.assertTrue(inside.wait(10))
            order.append('first back')
        other.join()
        self.assertEqual(order, ['second in', 'first back'])
        with stream_client._OPEN_GATE, stream_client._OPEN_GATE.released(), stream_client._OPEN_GATE:
            pass  # a single run's gate holds nothing


KERNEL_STAMPS = stream_client._SO_TIMESTAMPNS is not None  # Linux on the common architectures


class PacedServer(threading.Thread):
    """A loopback server that answers one request with a chat stream (framed by Content-Length) in two
    writes: the head and a first event, then, once ``go`` is set, a second event and the end, taking the
    monotonic time just before and just after that write (``second_sent``)."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.go, self.second_sent = threading.Event(), threading.Event()
        self.before = self.after = None
        self.listener = socket.create_server(('127.0.0.1', 0))
        self.url = f'http://127.0.0.1:{self.listener.getsockname()[1]}/v1/chat/completions'
        self.start()

    def run(self) -> None:
        sock, _ = self.listener.accept()
        self.listener.close()
        with sock:
            request = b''
            while b'\r\n\r\n' not in request:
                request += sock.recv(65536)
            head, _, body = request.partition(b'\r\n\r\n')
            length = int(re.search(rb'(?im)^content-length:\s*(\d+)', head)[1])
            while len(body) < length:
                body += sock.recv(65536)
            first = f'data: {chunk_json(delta={"content": "one"})}\n\n'.encode()
            rest = ''.join(f'data: {data}\n\n' for data in (chunk_json(delta={'content': ' two'}),
                                                             chunk_json(finish_reason='stop'), '[DONE]')).encode()
            sock.sendall(sse_response(first, headers=f'Content-Length: {len(first) + len(rest)}\r\n'))
            self.go.wait(10)
            self.before = time.perf_counter()
            sock.sendall(rest)
            self.after = time.perf_counter()
            self.second_sent.set()
            sock.shutdown(socket.SHUT_WR)
            sock.recv(1)


class ArrivalStampTests(unittest.TestCase):
    """On Linux a plain connection's reads carry the kernel's stamp of when their bytes arrived, so a busy
    client stamps an event when it came, not when it got round to reading it; a stamp stays between the
    latest one and the read's return. A load's reader holds the gate while it reads and feeds."""

    @classmethod
    def setUpClass(cls) -> None:
        """Keep a connection that asked for stamps open: Linux turns stamping on a moment after the first
        ask of all (a deferred work item), and off after the last one closes."""
        cls.keeper = []
        if not KERNEL_STAMPS:
            return
        listener = socket.create_server(('127.0.0.1', 0))
        ours = socket.create_connection(listener.getsockname())
        theirs, _ = listener.accept()
        listener.close()
        cls.keeper = [ours, theirs]
        stream_client._ask_kernel_stamps(ours)
        for _ in range(500):
            theirs.sendall(b'.')
            if stream_client._recv_stamped(stream_client._Connection(ours))[1] is not None:
                break
            time.sleep(0.01)

    @classmethod
    def tearDownClass(cls) -> None:
        for sock in cls.keeper:
            sock.close()

    def test_a_kernel_stamp_is_taken_only_between_the_latest_stamp_and_the_reads_return(self):
        timeline, offset = stream_client._Timeline(), 1_700_000_000 * 10**9  # the wall clock's lead
        self.assertIsNone(timeline.read_stamps)
        started, slack = timeline.started, stream_client._STAMP_SLACK

        def kernel(at: float) -> int:
            return round(at * 1e9) + offset
        self.assertAlmostEqual(timeline.arrival(started + 5, kernel(started + 2), offset), started + 2, places=6)
        self.assertEqual(timeline.arrival(started + 6, kernel(started + 2 - slack / 2), offset), started + 2)
        self.assertEqual(timeline.arrival(started + 7, kernel(started + 7 + slack / 2), offset), started + 7)
        self.assertEqual(timeline.read_stamps, 'kernel')
        # a stamp out of its window: the wall clock stepped between the arrival and the read
        self.assertEqual(timeline.arrival(started + 9, kernel(started + 1), offset), started + 9)
        self.assertEqual(timeline.read_stamps, 'client')
        for stepped in (-3.0, 30.0):
            later = stream_client._Timeline()
            self.assertEqual(later.arrival(later.started + 1, kernel(later.started + stepped), offset), later.started + 1)
            self.assertEqual(later.read_stamps, 'client')
        first = stream_client._Timeline()
        self.assertEqual(first.arrival(first.started + 1, None, offset), first.started + 1)  # no stamp: its return
        self.assertEqual(first.read_stamps, 'client')

    def busy_client_run(self, server: PacedServer, **options) -> tuple[dict, stream_client._Exchange, float]:
        """One run whose client, shown the first text, lets the server write the rest and stays busy 50 ms
        after that write: the exchange it filled, and when the client stopped being busy."""
        exchanges, free = [], []
        build = stream_client._build_record

        def keep(x):
            exchanges.append(x)
            return build(x)

        def busy(text: str) -> None:
            if text == 'one':
                server.go.set()
                server.second_sent.wait(10)
                time.sleep(0.05)
                free.append(time.perf_counter())
        with mock.patch.object(stream_client, '_build_record', keep):
            record = stream(server.url, 'm', 'p', on_text=busy, **options)
        return record, exchanges[0], free[0]

    @unittest.skipUnless(KERNEL_STAMPS, 'the kernel stamps reads on Linux only')
    def test_an_event_that_arrived_while_the_client_was_busy_is_stamped_when_it_arrived(self):
        server = PacedServer()
        record, x, free = self.busy_client_run(server)
        self.assertTrue(record['ok'], record['error'])
        self.assertEqual(record['read_stamps'], 'kernel')
        second = x.timeline.last_text_at
        self.assertLess(second, free)  # a client's stamp is at best the read's return, after the client was busy
        self.assertGreater(second, server.before - 0.005)  # 5 ms: the wall clock may be slewed while it runs
        self.assertEqual(record['event_gaps_ms'], [round((second - x.timeline.first_text_at) * 1000, 3)])
        self.assertEqual(record['duration_ms'], x.timeline.ms(x.timeline.ended))
        self.assertLessEqual(x.timeline.ended, free)  # the end is the last bytes' arrival, not the client's return

    def test_without_kernel_stamps_an_event_is_stamped_when_the_read_returned(self):
        with mock.patch.object(stream_client, '_SO_TIMESTAMPNS', None):
            server = PacedServer()
            record, x, free = self.busy_client_run(server)
        self.assertTrue(record['ok'], record['error'])
        self.assertEqual(record['read_stamps'], 'client')
        self.assertGreaterEqual(x.timeline.last_text_at, free)

    @unittest.skipUnless(KERNEL_STAMPS and stream_client._EPOLL, 'the kernel stamps reads on Linux only')
    def test_the_reactor_stamps_a_read_when_its_bytes_arrived(self):
        ours, theirs = tcp_pair(self)
        reactor, connection = stream_client._Reactor(), stream_client._Connection(ours)
        self.addCleanup(reactor.close)
        self.assertTrue(connection.kernel_stamps)
        request = stream_client.prepare('http://127.0.0.1:9/v1/chat/completions', 'm', 'p')
        x = stream_client._Exchange(request)
        x.phase = stream_client._Phase.HEADERS
        reading = stream_client._Reading(connection, x, time.perf_counter())
        ours.setblocking(False)
        reactor._readings[reading.fd] = reading
        before = time.perf_counter()
        theirs.sendall(b'HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n')
        sent = time.perf_counter()
        time.sleep(0.05)  # the reader is late
        reads = collections.deque()
        reactor._read_ready([(reading.fd, select.EPOLLIN)], reads)
        reactor._feed(*reads.popleft())
        # 5 ms either way: the wall clock, which the kernel's stamps are on, may be slewed while it runs
        self.assertLess(x.timeline.headers_at, sent + 0.005)  # the read returned 50 ms later
        self.assertGreater(x.timeline.headers_at, before - 0.005)

    @unittest.skipUnless(stream_client._EPOLL, 'a load is read by a reactor on Linux only')
    def test_the_reactor_holds_the_gate_while_it_feeds_and_lets_it_go_while_it_waits(self):
        gate = stream_client._Gate(threading.Lock())
        reactor = stream_client._Reactor(gate)
        self.addCleanup(reactor.close)
        ours, theirs = tcp_pair(self)
        entered, during = threading.Event(), []

        def worker() -> None:
            with gate:
                entered.set()

        def take_read(x, raw, now, kernel_ns):
            threading.Thread(target=worker, daemon=True).start()
            during.append(entered.wait(0.1))
            return []
        request = stream_client.prepare('http://127.0.0.1:9/v1/chat/completions', 'm', 'p')
        x = stream_client._Exchange(request, gate=gate)
        with mock.patch.object(stream_client, '_take_read', take_read), \
                mock.patch.object(stream_client, '_read_over', lambda x, raw: True):
            theirs.sendall(b'HTTP/1.1 200 OK\r\n')
            with gate:  # as a worker sends and then waits for its response
                reactor.read(stream_client._Connection(ours), x)
        self.assertEqual(during, [False])  # no worker got in while the reactor fed the read
        self.assertTrue(entered.is_set())  # one did once the reactor waited again

    def test_a_worker_lets_the_gate_go_to_send_a_request_that_may_not_fit_the_sockets_buffer(self):
        response = sse_response(b'data: ' + chunk_json(delta={'content': 'hi'}).encode() + b'\n\n'
                                b'data: ' + chunk_json(finish_reason='stop').encode() + b'\n\ndata: [DONE]\n\n')

        class Sock(ScriptedSocket):
            def sendall(self, data: bytes) -> None:
                held.append(gate._lock.locked())
        held, gate = [], stream_client._Gate(threading.Lock())
        limit = stream_client._SEND_HOLDING_GATE
        for prompt in ('p', 'p' * limit):
            x = stream_client._Exchange(stream_client.prepare('http://127.0.0.1:9/v1/chat/completions', 'm', prompt),
                                        gate=gate)
            with gate:
                stream_client._exchange(types.SimpleNamespace(sock=Sock(response)), x, stream_client._Show(), None)
            self.assertEqual(x.reader.validator.content_events, 1)
        self.assertEqual(held, [True, False])

    @unittest.skipUnless(stream_client._EPOLL, 'a load is read by a reactor on Linux only')
    def test_ringing_the_reactor_never_blocks_a_worker_that_holds_the_gate(self):
        gate = stream_client._Gate(threading.Lock())
        reactor, rang = stream_client._Reactor(gate), threading.Event()

        def ring_often() -> None:
            for _ in range(100_000):  # more bytes than a pipe holds
                reactor._ring()
            rang.set()
        with gate:  # a worker inside: the loop, woken by the first ring, waits for the gate and drains nothing
            threading.Thread(target=ring_often, daemon=True).start()
            finished = rang.wait(10)
        reactor.close()
        self.assertTrue(finished)


class ReportTests(unittest.TestCase):
    def setUp(self) -> None:
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.dir = Path(self.tmp.name)

    def test_a_load_draws_one_row_per_run_and_its_counts_match_the_summary(self):
        with Fixture('mixed', seed=9) as fixture:
            done = run_cli('--url', fixture.url, '--model', 'm', '--runs', '40', '--concurrency', '8',
                           '--output', 'load.jsonl', '--report', 'load.html', '--quiet', cwd=self.tmp.name, timeout=60)
        summary = json.loads(run_cli('--summary', 'load.jsonl', cwd=self.tmp.name).stdout)
        self.assertEqual(json.loads(done.stdout), summary)
        page = PageReader((self.dir / 'load.html').read_text())
        self.assertEqual(page.rows, 40)
        self.assertEqual((page.cell('runs'), page.cell('ok'), page.cell('not ok')),
                         (str(summary['runs']), str(summary['ok']), str(summary['not_ok'])))
        for layer, count in summary['not_ok_by_layer'].items():
            self.assertEqual(page.cell(f'not ok: {layer}'), str(count))
        self.assertEqual(page.tags['script'], 0)
        self.assertFalse([value for name, value in page.attributes if value and re.search(r'https?:|//|url\(', value)])
        self.assertNotIn('url(', (self.dir / 'load.html').read_text())
        self.assertEqual(os.stat(self.dir / 'load.html').st_mode & 0o777, 0o600)

    def test_the_servers_words_come_out_as_text(self):
        hostile = '<script>alert(1)</script><img src=x onerror=alert(2)> & "quotes"'
        body = json.dumps({'error': {'message': hostile, 'type': '<b>Bad</b>', 'code': 500}})
        response = (f'HTTP/1.1 500 Internal Server Error\r\ncontent-type: application/json\r\n'
                    f'content-length: {len(body)}\r\n\r\n{body}').encode()
        with Fixture(replay=response) as fixture:
            run_cli('--url', fixture.url, '--model', '<i>model</i>', '--runs', '2', '--output', 'bad.jsonl',
                    '--report', 'bad.html', '--quiet', cwd=self.tmp.name)
        text = (self.dir / 'bad.html').read_text()
        page = PageReader(text)
        self.assertEqual((page.tags['script'], page.tags['img'], page.tags['b'], page.tags['i']), (0, 0, 0, 0))
        self.assertIn(hostile, ''.join(page.text))
        self.assertIn('<i>model</i>', ''.join(page.text))
        self.assertIn('&lt;script&gt;', text)

    def test_merged_files_give_the_same_page_as_one_file(self):
        for name, seed in (('a', 1), ('b', 2)):
            with Fixture('mixed', seed=seed) as fixture:
                run_cli('--url', fixture.url, '--model', 'm', '--runs', '10', '--concurrency', '5',
                        '--output', f'{name}.jsonl', '--quiet', cwd=self.tmp.name, timeout=60)
        (self.dir / 'both.jsonl').write_text((self.dir / 'b.jsonl').read_text() + (self.dir / 'a.jsonl').read_text())
        run_cli('--summary', 'a.jsonl', 'b.jsonl', '--report', 'split.html', cwd=self.tmp.name)
        run_cli('--summary', 'both.jsonl', '--report', 'whole.html', cwd=self.tmp.name)
        self.assertEqual((self.dir / 'split.html').read_text(), (self.dir / 'whole.html').read_text())
        self.assertEqual(PageReader((self.dir / 'whole.html').read_text()).rows, 20)

    def test_beyond_two_thousand_runs_the_timeline_is_a_sample_and_says_so(self):
        summary = stream_client.Summary()
        report = stream_client.Report(summary)
        for run in range(2500):
            record = fake_record(run, ok=run % 10 != 0, error=None if run % 10 else 'transport: closed after 4 of 9 bytes',
                                 start=f'2026-11-30T10:00:{run // 100:02d}.{run % 100 * 10:03d}Z')
            summary.add(record)
            report.add(record)
        page = report.html()
        reader = PageReader(page)
        self.assertEqual(reader.rows, stream_client._REPORT_TIMELINE_ROWS)
        self.assertIn(f'A sample of {stream_client._REPORT_TIMELINE_ROWS} of the 2500 runs', page)
        self.assertEqual(reader.cell('not ok: transport'), '250')
        self.assertIn('250 runs, 1 distinct message', page)

    def test_the_layers_colours_are_far_apart(self):
        def rgb(colour: str) -> tuple[int, ...]:
            return tuple(int(colour[i:i + 2], 16) for i in (1, 3, 5))
        colours = list(stream_client._LAYER_COLOURS.values())
        self.assertEqual(set(stream_client._LAYER_COLOURS) - {None}, set(stream_client.LAYERS))
        closest = min(math.dist(rgb(a), rgb(b)) for a, b in itertools.combinations(colours, 2))
        self.assertGreater(closest, 60)  # the four purples and two blacks of before were under 45 apart

    def test_the_timeline_packs_runs_in_lanes_and_the_axes_have_round_ticks(self):
        summary = stream_client.Summary()
        report = stream_client.Report(summary)
        for run in range(500):  # four in flight at a time, each 100 ms long, 25 ms apart
            record = fake_record(run, start=f'2026-11-30T10:00:{run * 25 // 1000:02d}.{run * 25 % 1000:03d}Z')
            record['duration_ms'] = 100.0
            summary.add(record)
            report.add(record)
        page = report.html()
        self.assertEqual(PageReader(page).rows, 500)
        self.assertIn('as many lanes as runs were in flight at most (4)', page)
        heights = {float(value) for value in re.findall(r'<rect x="[\d.]+" y="\d+" width="[\d.]+" height="([\d.]+)" '
                                                        r'fill="#008856"/>', page)}
        self.assertEqual(heights, {stream_client._MAX_LANE_PX - 1})  # not 1 px: 500 runs share 4 lanes
        self.assertEqual(stream_client._lanes(report.rows[:6]), [0, 1, 2, 3, 0, 1])
        self.assertEqual(stream_client._ticks(0, 12.4), [0, 2, 4, 6, 8, 10, 12])
        self.assertEqual(stream_client._ticks(152.0, 155.4), [152.0, 152.5, 153.0, 153.5, 154.0, 154.5, 155.0])
        for label in ('0 s', '2 s', '10 s', '12 s'):  # the span is 12.575 s
            self.assertTrue(f'>{label}</text>' in page, label)
        self.assertTrue('viewBox="0 0 1400 ' in page)

    def test_report_rules_on_the_command_line(self):
        (self.dir / 'taken.html').write_text('kept')
        with Fixture(delay=0) as fixture:
            base = ['--url', fixture.url, '--model', 'm', '--output', 'run.jsonl']
            cases = {'a single run': base + ['--report', 'r.html'],
                     'an existing report': base + ['--runs', '2', '--report', 'taken.html'],
                     'report is the output': base + ['--runs', '2', '--report', 'run.jsonl']}
            for name, args in cases.items():
                with self.subTest(name):
                    done = run_cli(*args, cwd=self.tmp.name)
                    self.assertEqual((done.returncode, done.stderr.count('\n')), (2, 1), done.stderr)
                    self.assertEqual(sorted(path.name for path in self.dir.iterdir()), ['taken.html'])
            self.assertIsNone(fixture.last_request)
        missing = run_cli('--summary', 'absent.jsonl', '--report', 'r.html', cwd=self.tmp.name)
        self.assertEqual(missing.returncode, 2)
        self.assertFalse((self.dir / 'r.html').exists())
        self.assertEqual((self.dir / 'taken.html').read_text(), 'kept')


def run_in_terminal(*args: str, cwd: str, stdout_too: bool = False) -> tuple[int, str]:
    """Run the command line with stderr on a pseudo-terminal, as a person would (stdout stays a pipe
    unless stdout_too); return its exit status and what the terminal showed."""
    import pty
    master, slave = pty.openpty()
    process = subprocess.Popen(script_command(CLIENT, *args), cwd=cwd, stdin=subprocess.DEVNULL,
                               stdout=slave if stdout_too else subprocess.PIPE, stderr=slave,
                               env=script_env(dict(os.environ, TERM='xterm')))
    os.close(slave)
    screen = b''
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        screen += data
    os.close(master)
    process.communicate(timeout=30)
    return process.returncode, screen.decode()


def run_cli(*args: str, cwd: str, timeout: float = 30, **kwargs) -> subprocess.CompletedProcess:
    kwargs['env'] = script_env(kwargs.get('env'))
    return subprocess.run(script_command(CLIENT, *args), cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, **({} if 'input' in kwargs else {'stdin': subprocess.DEVNULL}), **kwargs)


class CommandLineTests(unittest.TestCase):
    def setUp(self) -> None:
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.dir = Path(self.tmp.name)

    def cli(self, mode: str, *args: str, **kwargs) -> subprocess.CompletedProcess:
        """The command line against a fast fixture in MODE (the built-in --fixture paces writes 50 ms apart)."""
        with Fixture(mode) as fixture:
            return run_cli('--url', fixture.url, '--model', 'synthetic-fixture', *args, cwd=self.tmp.name, **kwargs)

    def test_fixture_demo_writes_an_ok_record_and_one_summary_line(self):
        done = run_cli('--fixture', 'ok', '--output', 'run.json', cwd=self.tmp.name)
        self.assertEqual(done.returncode, 0, done.stderr)
        record = json.loads((self.dir / 'run.json').read_text())
        self.assertEqual((record['ok'], record['text'], record['model']), (True, 'READY \u2713', 'synthetic-fixture'))
        summary = json.loads(done.stdout)
        self.assertEqual(done.stdout.count('\n'), 1)
        self.assertTrue(summary['ok'])
        self.assertEqual(os.stat(self.dir / 'run.json').st_mode & 0o777, 0o600)

    def test_not_ok_run_exits_1_with_its_record(self):
        done = self.cli('broken', '--output', 'run.json')
        self.assertEqual(done.returncode, 1)
        record = json.loads((self.dir / 'run.json').read_text())
        self.assertEqual((record['ok'], record['text'], record['done']), (False, 'READY \u2713', False))

    def test_existing_output_is_refused_and_untouched(self):
        (self.dir / 'run.json').write_text('precious')
        done = run_cli('--fixture', 'ok', '--output', 'run.json', cwd=self.tmp.name)
        self.assertEqual(done.returncode, 2)
        self.assertEqual((self.dir / 'run.json').read_text(), 'precious')
        self.assertEqual(done.stderr.count('\n'), 1)
        self.assertIn('already exists', done.stderr)

    def test_bad_command_lines_exit_2_with_one_line_no_file_and_no_request(self):
        (self.dir / 'taken.json').write_text('kept')
        with Fixture() as fixture:
            good = ['--url', fixture.url, '--model', 'm', '--output', 'run.json']
            cases = {
                'model missing': ['--url', fixture.url, '--output', 'run.json'],
                'ftp URL': good + ['--url', 'ftp://127.0.0.1/v1/chat/completions'],
                'credentials in URL': good + ['--url', 'https://user:secret@localhost/v1/chat/completions'],
                'plain http to a remote host': good + ['--url', 'http://203.0.113.9/v1/chat/completions'],
                'negative idle': good + ['--idle', '-1'],
                'NaN deadline': good + ['--deadline', 'nan'],
                'infinite idle': good + ['--idle', 'inf'],
                'max tokens 0': good + ['--max-tokens', '0'],
                'max tokens 40000': good + ['--max-tokens', '40000'],
                'max tokens not a number': good + ['--max-tokens', 'many'],
                'extra not JSON': good + ['--extra', '{not json'],
                'extra not an object': good + ['--extra', '[1]'],
                'extra overrides stream': good + ['--extra', '{"stream": false}'],
                'missing CA file': good + ['--url', 'https://localhost:9/v1/chat/completions', '--ca-file', 'no.pem'],
                'output exists': good + ['--output', 'taken.json'],
                'output directory missing': good + ['--output', 'missing/run.json'],
                'unknown fixture mode': ['--fixture', 'no-such-mode', '--output', 'run.json'],
                'fixture and URL': good + ['--fixture', 'ok'],
                'missing prompt file': good + ['--prompt-file', 'absent.txt'],
                'prompt twice': good + ['--prompt', 'a', '--prompt-file', '-'],
                'capture is the output': good + ['--capture', 'run.json'],
                'unknown flag': good + ['--verify', 'no'],
                'a path of no known API': good + ['--url', fixture.url.replace('/v1/chat/completions', '/v2/chat')],
                'an unknown --api': good + ['--api', 'embeddings'],
                'a fixture mode of another API': ['--fixture', 'sequence-gap', '--output', 'run.json'],
            }
            results = dict(zip(cases, in_threads(lambda args: run_cli(*args, cwd=self.tmp.name), list(cases.values()))))
            for name, done in results.items():
                with self.subTest(name):
                    self.assertEqual(done.returncode, 2, done.stderr)
                    self.assertEqual(done.stderr.count('\n'), 1, done.stderr)
                    self.assertNotIn('Traceback', done.stderr)
                    self.assertNotIn('secret', done.stderr)
                    self.assertEqual(sorted(p.name for p in self.dir.iterdir()), ['taken.json'])
            self.assertIsNone(fixture.last_request)
        self.assertEqual((self.dir / 'taken.json').read_text(), 'kept')

    def test_messages_name_what_the_user_typed(self):
        load = self.dir / 'load.jsonl'
        load.write_text(''.join(json.dumps(fake_record(run)) + '\n' for run in range(2)))
        cases = {
            ('--fixture', 'ok', '--max-tokens', '0', '--output', 'a.json'):
                '--max-tokens must be an integer from 1 to 32768, got 0',
            ('--fixture', 'ok', '--idle', '0', '--output', 'a.json'): '--idle must be a finite number more than 0',
            ('--fixture', 'ok', '--temperature', '-1', '--output', 'a.json'): '--temperature must be a finite number',
            ('--fixture', 'ok', '--runs', '0', '--output', 'a.jsonl'): '--runs must be a positive integer, got 0',
            ('--fixture', 'ok', '--output', ''): "cannot create '': the file name is empty",
            ('--fixture', 'ok', '--output', '-'): '--output - is not supported: stdout carries the summary line',
            ('--fixture', 'ok', '--output', 'missing/a.json'): "cannot create 'missing/a.json': its directory does",
            ('--summary', 'load.jsonl', '--runs', '5', '--concurrency', '3'):
                '--summary only reads saved evidence; --runs, --concurrency are for runs that send requests',
            ('--compare', 'load.jsonl', '--capture', 'c.http'):
                '--compare only reads saved evidence; --capture is for runs that send requests',
            ('--summary', 'load.jsonl', '--compare', 'load.jsonl'): '--compare and --summary exclude each other',
            ('--fixture', 'ok', '--keep-alive', '--output', 'a.jsonl'): '--keep-alive needs --runs of 2 or more',
            ('--compare', 'load.jsonl'): 'load.jsonl holds the records of a load, one per line: --compare takes '
                                         'files of one record each; use --summary load.jsonl to read a load',
        }
        results = in_threads(lambda args: run_cli(*args, cwd=self.tmp.name), list(cases))
        for (args, words), done in zip(cases.items(), results):
            with self.subTest(args=args):
                self.assertEqual((done.returncode, done.stdout), (2, ''))
                self.assertEqual(done.stderr.count('\n'), 1, done.stderr)
                self.assertIn(words, done.stderr)
        self.assertEqual(sorted(p.name for p in self.dir.iterdir()), ['load.jsonl'])

    def test_tool_and_json_flags_that_cannot_be_sent_exit_2_before_anything(self):
        (self.dir / 'tools.json').write_text(json.dumps(fixture_server.TOOLS))
        (self.dir / 'bad-schema.json').write_text('{"type": "strng"}')
        (self.dir / 'not-json.json').write_text('[{')
        (self.dir / 'not-a-tool.json').write_text('[{"name": "get_weather"}]')
        cases = {
            ('--api', 'completions', '--tools', 'tools.json'): 'the completions API has no tools',
            ('--tool-choice', 'required'): '--tool-choice needs --tools',
            ('--tools', 'tools.json', '--tool-choice', 'get_time'): "--tool-choice 'get_time' is none of auto, "
                                                                     'required, none and names no tool offered',
            ('--tools', 'absent.json'): "cannot read --tools 'absent.json': No such file or directory",
            ('--tools', 'not-json.json'): "--tools 'not-json.json' is not JSON",
            ('--tools', 'not-a-tool.json'): '--tools[0] is not {"type": "function", "function": {"name": ...',
            ('--json-schema', 'bad-schema.json'): '--json-schema is not a valid schema: #/type: expected one of null,',
            ('--extra', '{"tools": []}'): "--extra may not set 'tools'; use --tools",
        }
        results = in_threads(lambda args: run_cli('--fixture', 'ok', '--output', 'run.json', *args,
                                                  cwd=self.tmp.name), list(cases))
        for (args, words), done in zip(cases.items(), results):
            with self.subTest(args=args):
                self.assertEqual((done.returncode, done.stdout, done.stderr.count('\n')), (2, '', 1), done.stderr)
                self.assertIn(words, done.stderr)
        self.assertFalse((self.dir / 'run.json').exists())

    def test_the_tool_call_demo_is_ok_and_a_cut_call_is_caught(self):
        done = run_cli('--fixture', 'tool-call', '--output', 'call.json', cwd=self.tmp.name)  # the fixture's own tool
        record = json.loads((self.dir / 'call.json').read_text())
        self.assertEqual((done.returncode, record['ok'], record['answer_kind']), (0, True, 'tool_calls'))
        self.assertEqual(record['tool_calls'], [{'index': 0, 'id': 'chatcmpl-tool-1', 'name': 'get_weather',
                                                 'arguments': '{"city": "Paris"}', 'arguments_problem': None}])
        cut = run_cli('--fixture', 'tool-args-cut', '--output', 'cut.json', cwd=self.tmp.name)
        self.assertEqual(cut.returncode, 1)
        self.assertIn('NOT OK [application]: tool call 0 (get_weather): the arguments are not JSON', cut.stderr)
        status, screen = run_in_terminal('--fixture', 'tool-call', '--api', 'responses', '--output', 'live.json',
                                         cwd=self.tmp.name)
        self.assertEqual(status, 0, screen)
        self.assertIn('get_weather({"city": "Paris"})\r\nok: 3 content events', screen)

    def test_capture_replays_to_the_same_verdict(self):
        done = self.cli('error-event', '--output', 'run.json', '--capture', 'run.http')
        self.assertEqual(done.returncode, 1, done.stderr)
        original = json.loads((self.dir / 'run.json').read_text())
        captured = (self.dir / 'run.http').read_bytes()
        self.assertTrue(captured.startswith(b'HTTP/1.1 200 OK\r\n'))
        replayed = replay(captured)
        for key in ('ok', 'error', 'text', 'server_error', 'transport_complete', 'data_events'):
            self.assertEqual(replayed[key], original[key], key)
        self.assertEqual(original['capture'], {'bytes': len(captured), 'truncated': False, 'file': 'run.http'})

    def test_capture_masks_the_key_without_changing_lengths(self):
        fd = os.open(self.dir / 'c.http', os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        capture = stream_client.Capture()
        capture.keep(b'5\r\nsk-ab\r\n')
        self.assertEqual(stream_client._save_capture(fd, str(self.dir / 'c.http'), capture, ('sk-ab',)),
                         str(self.dir / 'c.http'))
        self.assertEqual((self.dir / 'c.http').read_bytes(), b'5\r\n*****\r\n')

    def test_a_capture_of_nothing_is_removed_and_the_record_says_so(self):
        with socket.create_server(('127.0.0.1', 0)) as probe:
            port = probe.getsockname()[1]
        done = run_cli('--url', f'http://127.0.0.1:{port}/v1/chat/completions', '--model', 'm',
                       '--output', 'run.json', '--capture', 'run.http', cwd=self.tmp.name)
        self.assertEqual(done.returncode, 1)
        record = json.loads((self.dir / 'run.json').read_text())
        self.assertEqual((record['error_layer'], record['capture']), ('connect', {'bytes': 0, 'truncated': False,
                                                                                 'file': None}))
        self.assertFalse((self.dir / 'run.http').exists())

    def test_a_failed_run_keeps_what_arrived_in_its_capture(self):
        done = self.cli('truncated', '--output', 'run.json', '--capture', 'run.http')
        self.assertEqual(done.returncode, 1)
        record = json.loads((self.dir / 'run.json').read_text())
        captured = (self.dir / 'run.http').read_bytes()
        self.assertEqual(record['capture'], {'bytes': len(captured), 'truncated': False, 'file': 'run.http'})
        self.assertTrue(captured.endswith(b'data: [DONE]\n\n'))

    def test_existing_capture_file_is_refused_before_anything_is_created(self):
        (self.dir / 'run.http').write_text('old')
        done = run_cli('--fixture', 'ok', '--output', 'run.json', '--capture', 'run.http', cwd=self.tmp.name)
        self.assertEqual(done.returncode, 2)
        self.assertEqual(sorted(p.name for p in self.dir.iterdir()), ['run.http'])

    def test_prompt_file_and_stdin_become_the_user_message(self):
        with Fixture() as fixture:
            done = run_cli('--url', fixture.url, '--model', 'm', '--prompt-file', '-', '--output', 'run.json',
                           cwd=self.tmp.name, input='from stdin\n')
            self.assertEqual(done.returncode, 0, done.stderr)
            self.assertEqual(fixture.last_request[1]['messages'], [{'role': 'user', 'content': 'from stdin\n'}])
        record = json.loads((self.dir / 'run.json').read_text())
        import hashlib
        self.assertEqual(record['request']['prompt_sha256'], hashlib.sha256(b'from stdin\n').hexdigest())

    def run_in_pty(self, mode: str, *args: str) -> tuple[int, str]:
        """Run against a fast fixture with stderr on a pseudo-terminal, as a person would; stdout stays a pipe."""
        with Fixture(mode) as fixture:
            return run_in_terminal('--url', fixture.url, '--model', 'synthetic-fixture', *args, cwd=self.tmp.name)

    def test_terminal_shows_reasoning_dimmed_then_the_answer_then_a_verdict(self):
        status, screen = self.run_in_pty('reasoning', '--output', 'run.json')
        self.assertEqual(status, 0)
        lines = screen.replace('\r\n', '\n').split('\n')
        self.assertEqual(lines[0], '\x1b[2mreasoning: The user wants \x1b[0m\x1b[2mone word.\x1b[0m')
        self.assertEqual(lines[1], 'READY \u2713')
        self.assertRegex(lines[2], r'^ok: 2 content events, first text \d+ ms, done \d+ ms$')

    def test_terminal_verdict_names_the_failing_layer(self):
        status, screen = self.run_in_pty('truncated', '--output', 'run.json')
        self.assertEqual(status, 1)
        self.assertIn('READY \u2713\r\nNOT OK [transport]: connection closed after 445 of 509 body bytes\r\n', screen)

    def test_quiet_keeps_the_terminal_silent(self):
        status, screen = self.run_in_pty('broken', '--output', 'run.json', '--quiet')
        self.assertEqual((status, screen), (1, ''))

    def test_without_a_terminal_only_failures_reach_stderr(self):
        ok = self.cli('ok', '--output', 'ok.json')
        failed = self.cli('broken', '--output', 'broken.json')
        self.assertEqual(ok.stderr, '')
        self.assertEqual(failed.stderr, 'NOT OK [application]: EOF before [DONE] after 2 content events\n')

    def test_compare_prints_one_aligned_column_per_record(self):
        for mode in ('ok', 'broken'):
            self.cli(mode, '--output', f'{mode}.json')
        done = run_cli('--compare', 'ok.json', 'broken.json', cwd=self.tmp.name)
        self.assertEqual((done.returncode, done.stderr), (0, ''))
        lines = done.stdout.splitlines()
        self.assertEqual([line[:12].rstrip() for line in lines], [name for name, _ in stream_client._COMPARE_COLUMNS])
        rows = {name: line[12:].split() for (name, _), line in zip(stream_client._COMPARE_COLUMNS, lines)}
        reads = json.loads((self.dir / 'ok.json').read_text())['content_reads']  # 1 or 2, as the reads fell
        self.assertEqual(rows['file'], ['ok.json', 'broken.json'])
        self.assertEqual([rows[name] for name in ('source', 'ok', 'layer', 'events', 'tokens', 'text reads')],
                         [['fixture', 'fixture'], ['yes', 'no'], ['-', 'application'], ['2', '2'], ['3', '-'],
                          [str(reads), rows['text reads'][1]]])
        self.assertEqual(lines[0].index('broken.json'), lines[3].index('no'))  # aligned

    def test_compare_refuses_to_mix_sources_unless_asked(self):
        self.cli('ok', '--output', 'fixture.json')
        capture = (TRACES / 'a2_chat_stream_usage_eos_stop.http').read_bytes()
        with Fixture(replay=capture) as fixture:
            run_cli('--url', fixture.url, '--model', 'tiny', '--output', 'replay.json', cwd=self.tmp.name)
            fixture.instance.replay = (b'', [capture])  # the bytes exactly as a live vLLM sent them
            run_cli('--url', fixture.url, '--model', 'tiny', '--output', 'endpoint.json', cwd=self.tmp.name)
        sources = {name: json.loads((self.dir / f'{name}.json').read_text())['source']
                   for name in ('fixture', 'replay', 'endpoint')}
        self.assertEqual(sources, {'fixture': 'fixture', 'replay': 'replay', 'endpoint': 'endpoint'})
        for pair in (('fixture', 'endpoint'), ('replay', 'endpoint'), ('fixture', 'replay')):
            with self.subTest(pair=pair):
                done = run_cli('--compare', *(f'{name}.json' for name in pair), cwd=self.tmp.name)
                self.assertEqual((done.returncode, done.stdout), (2, ''))
                self.assertIn(f'refusing to compare records of different sources ({", ".join(sorted(pair))})',
                              done.stderr)
        done = run_cli('--compare', 'replay.json', 'endpoint.json', '--mixed-sources', cwd=self.tmp.name)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual(len(done.stdout.splitlines()), len(stream_client._COMPARE_COLUMNS))

    def test_compare_warns_when_the_configurations_differ(self):
        self.cli('ok', '--output', 'a.json')
        self.cli('ok', '--output', 'b.json', '--max-tokens', '64', '--prompt', 'other')
        self.cli('ok', '--output', 'c.json', '--stop', 'END', '--extra', '{"min_tokens": 2}')
        done = run_cli('--compare', 'a.json', 'b.json', cwd=self.tmp.name)
        self.assertEqual(done.returncode, 0)
        self.assertIn('the records differ in max_tokens, prompt;', done.stderr)
        done = run_cli('--compare', 'a.json', 'c.json', cwd=self.tmp.name)
        self.assertIn('the records differ in extra_keys, stop;', done.stderr)
        same = run_cli('--compare', 'a.json', 'a.json', cwd=self.tmp.name)
        self.assertEqual(same.stderr, '')

    def test_fixture_profile_and_the_modes_in_help(self):
        done = run_cli('--fixture', 'ok', '--fixture-profile', 'vllm', '--output', 'run.json', cwd=self.tmp.name)
        self.assertEqual(done.returncode, 0, done.stderr)
        record = json.loads((self.dir / 'run.json').read_text())
        self.assertEqual((record['http']['framing'], record['source']), ('chunked', 'fixture'))
        self.assertRegex(record['response_id'], r'^chatcmpl-[0-9a-f]{16}$')
        usage = re.sub(r'-\n\s+', '-', run_cli('--help', cwd=self.tmp.name).stdout)  # argparse wraps at hyphens
        self.assertIn('drip until --deadline', ' '.join(usage.split()))
        self.assertEqual(stream_client._FIXTURE_PROFILES, tuple(fixture_server.PROFILES))

    def test_a_mistyped_fixture_mode_gets_the_close_ones_in_one_line(self):
        done = run_cli('--fixture', 'okk', '--output', 'run.json', cwd=self.tmp.name)
        self.assertEqual((done.returncode, done.stderr.count('\n')), (2, 1), done.stderr)
        self.assertIn("no mode 'okk'; did you mean ok?", done.stderr)
        self.assertFalse((self.dir / 'run.json').exists())
        for args, words in ((['--mode', 'okk'], "no mode 'okk'; did you mean ok?"),
                            (['--mode', 'tool-cal'], 'did you mean tool-call'),
                            (['--tls-cert', 'a.pem'], '--tls-cert and --tls-key go together')):
            with self.subTest(args=args):
                done = subprocess.run(script_command(FIXTURE_SCRIPT, '--port', '0', *args),
                                      capture_output=True, text=True, timeout=30, env=script_env())
                self.assertEqual((done.returncode, done.stderr.count('\n')), (2, 1), done.stderr)
                self.assertIn(words, done.stderr)
                self.assertTrue(done.stderr.startswith('fixture_server.py: error: '), done.stderr)

    def test_abbreviated_flags_are_refused(self):
        done = run_cli('--fixture', 'ok', '--max-token', '64', '--output', 'run.json', cwd=self.tmp.name)
        self.assertEqual(done.returncode, 2)
        self.assertIn('unrecognized arguments: --max-token', done.stderr)
        done = subprocess.run(script_command(FIXTURE_SCRIPT, '--mod', 'ok'), capture_output=True, text=True, timeout=30,
                              env=script_env())
        self.assertEqual(done.returncode, 2)
        self.assertIn('unrecognized arguments: --mod', done.stderr)

    def test_scripts_name_themselves_as_invoked(self):
        for script, name in (('stream_client.py', 'stream-client'), ('fixture_server.py', 'stream-fixture')):
            with self.subTest(name=name):
                link = self.dir / name
                link.symlink_to(HERE / script)
                done = subprocess.run([sys.executable, str(link), '--bogus'], capture_output=True, text=True,
                                      timeout=30, env=dict(os.environ, PYTHONPATH=str(HERE)))
                self.assertEqual(done.returncode, 2)
                self.assertTrue(done.stderr.endswith(f'{name}: error: unrecognized arguments: --bogus\n'), done.stderr)
                self.assertNotIn(script, done.stderr)
        version = subprocess.run([sys.executable, str(self.dir / 'stream-client'), '--version'], capture_output=True,
                                 text=True, timeout=30, env=dict(os.environ, PYTHONPATH=str(HERE)))
        self.assertEqual(version.stdout.strip(), f'stream-client {stream_client.__version__}')

    def test_the_suites_launcher_runs_a_script_as_its_file_does(self):
        probe = self.dir / 'probe.py'
        probe.write_text('import __main__, json, sys\n'
                         "print(json.dumps([sys.argv, sys.path[0], __file__, __name__, __main__.__spec__]))\n")
        as_file = subprocess.run([sys.executable, str(probe), '--x', 'y'], capture_output=True, text=True, timeout=30)
        launched = subprocess.run(script_command(str(probe), '--x', 'y'), capture_output=True, text=True, timeout=30,
                                  env=script_env())
        self.assertEqual(json.loads(launched.stdout), json.loads(as_file.stdout))
        self.assertEqual(json.loads(as_file.stdout)[0], [str(probe), '--x', 'y'])
        for args in (['--bogus'], ['--fixture', 'okk']):
            with self.subTest(args=args):
                as_file = subprocess.run([sys.executable, CLIENT, *args], capture_output=True, text=True, timeout=30)
                launched = subprocess.run(script_command(CLIENT, *args), capture_output=True, text=True, timeout=30,
                                          env=script_env())
                self.assertEqual((launched.returncode, launched.stderr), (as_file.returncode, as_file.stderr))
                self.assertEqual(as_file.returncode, 2)

    def test_python_3_6_to_3_9_get_one_line_instead_of_a_traceback(self):
        # Each old interpreter must be able to read the whole file for its first statement, the version
        # check, to run: so the modules use no syntax newer than 3.6 (no walrus, no future import).
        for script in ('stream_client.py', 'fixture_server.py'):
            source = (HERE / script).read_text(encoding='utf-8')
            ast.parse(source, script, feature_version=(3, 6))
            self.assertNotIn('from __future__', source)
        versions = Path(os.environ.get('PYENV_ROOT', Path.home() / '.pyenv'), 'versions')
        pythons = [python for minor in ('3.6', '3.7', '3.8', '3.9')
                   for python in sorted(versions.glob(f'{minor}.*/bin/python3'))[-1:]]
        if not pythons:
            self.skipTest('no Python 3.6 to 3.9 installed under pyenv')
        for python, script in itertools.product(pythons, ('stream_client.py', 'fixture_server.py')):
            with self.subTest(python=python.parts[-3], script=script):
                done = subprocess.run([str(python), str(HERE / script), '--help'], capture_output=True,
                                      text=True, timeout=30)
                self.assertEqual((done.returncode, done.stdout), (1, ''))
                self.assertRegex(done.stderr, rf'^{script}: needs Python 3.10 or newer, not 3\.[6-9]\.\d+\n$')

    def test_a_closed_stdout_loses_nothing_and_shows_no_traceback(self):
        read, write = os.pipe()
        os.close(read)  # like `| head -c 0`: nobody reads the summary line
        try:
            done = subprocess.run(script_command(CLIENT, '--fixture', 'ok', '--runs', '2', '--output', 'run.jsonl'),
                                  cwd=self.tmp.name, stdout=write, stderr=subprocess.PIPE, text=True, timeout=30,
                                  env=script_env())
        finally:
            os.close(write)
        self.assertEqual((done.returncode, done.stderr), (0, ''))
        self.assertEqual(len((self.dir / 'run.jsonl').read_text().splitlines()), 2)

    def test_module_entry_points_and_version(self):
        version = subprocess.run([sys.executable, '-m', 'stream_client', '--version'], cwd=HERE,
                                 capture_output=True, text=True, timeout=30)
        python = os.path.basename(sys.executable)
        self.assertEqual(version.stdout.strip(), f'{python} -m stream_client {stream_client.__version__}')
        fixture_help = subprocess.run([sys.executable, '-m', 'fixture_server', '--help'], cwd=HERE,
                                      capture_output=True, text=True, timeout=30)
        self.assertIn('--profile', fixture_help.stdout)
        self.assertTrue(fixture_help.stdout.startswith(f'usage: {python} -m fixture_server'), fixture_help.stdout)

    def test_signals_leave_a_valid_record(self):
        for signum, status in ((signal.SIGINT, 130), (signal.SIGTERM, 143)):
            with self.subTest(signal=signum.name), Fixture('held-open') as fixture:
                output = self.dir / f'{signum.name}.json'
                process = subprocess.Popen(script_command(CLIENT, '--url', fixture.url, '--model', 'm',
                                                   '--idle', '20', '--output', str(output)), stdout=subprocess.PIPE,
                                           stderr=subprocess.PIPE, text=True, env=script_env())
                for _ in range(200):  # until the fixture has the request, then until the stream is under way
                    if fixture.last_request is not None:
                        break
                    time.sleep(0.02)
                time.sleep(0.2)
                process.send_signal(signum)
                stdout, stderr = process.communicate(timeout=10)
                self.assertEqual(process.returncode, status, stderr)
                record = json.loads(output.read_text())
                self.assertEqual((record['ok'], record['error_layer'], record['text']),
                                 (False, 'interrupted', 'READY \u2713'))
                self.assertRegex(record['error'], rf'^interrupted: {signum.name} during the \w+ phase after ')
                self.assertFalse(json.loads(stdout)['ok'])


    def test_a_signal_once_the_evidence_is_on_disk_changes_nothing(self):
        # The client, made to signal itself just before it prints its summary line: a run and a load.
        late = ('import os, signal, sys\n'
                f'sys.path.insert(0, {str(HERE)!r})\n'
                'import stream_client\n'
                'emit = stream_client._emit\n'
                'def signalled(text):\n'
                '    os.kill(os.getpid(), getattr(signal, os.environ["LATE_SIGNAL"]))\n'
                '    emit(text)\n'
                'stream_client._emit = signalled\n'
                'sys.exit(stream_client.main(sys.argv[1:]))\n')
        for name, args in (('one run', []), ('a load', ['--runs', '3', '--concurrency', '3'])):
            for signum in ('SIGINT', 'SIGTERM'):
                with self.subTest(name, signal=signum), Fixture() as fixture:
                    output = self.dir / f'{name}-{signum}.jsonl'
                    done = subprocess.run([sys.executable, '-c', late, '--url', fixture.url, '--model', 'm', *args,
                                           '--output', str(output)], capture_output=True, text=True, timeout=60,
                                          env=script_env(dict(os.environ, LATE_SIGNAL=signum)))
                    self.assertEqual((done.returncode, done.stderr), (0, ''))
                    self.assertTrue(json.loads(done.stdout)['ok'])
                    text = output.read_text()
                    records = [json.loads(line) for line in text.splitlines()] if args else [json.loads(text)]
                    self.assertEqual([record['ok'] for record in records], [True] * (3 if args else 1))

# ---------------------------------------------------------------------------
# The exporter: a strict reader of the Prometheus text exposition format 0.0.4
# ---------------------------------------------------------------------------

METRIC_NAME = re.compile(r'[a-zA-Z_:][a-zA-Z0-9_:]*')
LABEL_NAME = re.compile(r'[a-zA-Z_][a-zA-Z0-9_]*')
LABEL_PAIR = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"')
SAMPLE_VALUE = re.compile(r'[+-]?(?:\d+\.?\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?|Inf|NaN)')
METRIC_TYPES = ('counter', 'gauge', 'histogram', 'summary', 'untyped')


class Metric(NamedTuple):
    type: str
    help: str
    samples: dict  # frozenset of (label, value) pairs -> float


def _unescape(text: str, escapable: str) -> str:
    out, chars = [], iter(text)
    for char in chars:
        if char == '\\':
            following = next(chars, '')
            if following not in escapable:
                raise ValueError(f'invalid escape \\{following} in {text!r}')
            out.append('\n' if following == 'n' else following)
        else:
            out.append(char)
    return ''.join(out)


def _labels(text: str, line: str) -> frozenset:
    """The label pairs of '{a="1",b="2"}' (a trailing comma allowed, as the format does), strictly."""
    pairs, rest = {}, text
    while rest:
        match = LABEL_PAIR.match(rest)
        if not match:
            raise ValueError(f'bad label pair in {line!r}')
        name, value = match[1], _unescape(match[2], '\\"n')
        if name in pairs or name.startswith('__'):
            raise ValueError(f'duplicate or reserved label {name} in {line!r}')
        pairs[name] = value
        rest = rest[match.end():]
        if rest.startswith(','):
            rest = rest[1:]
        elif rest:
            raise ValueError(f'expected "," between labels in {line!r}')
    return frozenset(pairs.items())


def parse_exposition(text: str) -> dict[str, Metric]:
    """Families by name from text in the exposition format 0.0.4, checked strictly: every line ends with a
    line feed; HELP and TYPE at most once per name, TYPE before its samples; a family's samples together
    (one group per family); valid metric and label names; label values with only \\\\, \\" and \\n escaped;
    Go-parsable values; no series twice. Our exporter writes no timestamps and no blank lines: refused too."""
    if not text.endswith('\n'):
        raise ValueError('the exposition does not end with a line feed')
    families: dict[str, dict] = {}
    current = None
    for line in text[:-1].split('\n'):
        if line.startswith('#'):
            parts = line.split(' ', 3)
            if len(parts) >= 3 and parts[1] in ('HELP', 'TYPE'):
                keyword, name = parts[1], parts[2]
                if not METRIC_NAME.fullmatch(name):
                    raise ValueError(f'bad metric name in {line!r}')
                family = families.setdefault(name, {'type': None, 'help': None, 'samples': {}})
                if name != current and (family['samples'] or family['type'] or family['help']):
                    raise ValueError(f'{name} appears in two places: {line!r}')
                current = name
                value = parts[3] if len(parts) == 4 else ''
                if family[keyword.lower()] is not None:
                    raise ValueError(f'second {keyword} for {name}')
                if keyword == 'TYPE':
                    if value not in METRIC_TYPES or family['samples']:
                        raise ValueError(f'bad or late TYPE: {line!r}')
                    family['type'] = value
                else:
                    family['help'] = _unescape(value, '\\n')
            continue
        match = re.fullmatch(r'([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)', line)
        if not match:
            raise ValueError(f'not a sample line: {line!r}')
        name, labels, value = match[1], _labels(match[2] or '', line), match[3]
        if not SAMPLE_VALUE.fullmatch(value):
            raise ValueError(f'bad value in {line!r}')
        if name != current:
            if name in families:
                raise ValueError(f'samples of {name} are not together: {line!r}')
            families[name] = {'type': None, 'help': None, 'samples': {}}
            current = name
        if labels in families[name]['samples']:
            raise ValueError(f'series twice: {line!r}')
        families[name]['samples'][labels] = float(value)
    return {name: Metric(family['type'] or 'untyped', family['help'], family['samples'])
            for name, family in families.items()}


def value_of(metrics: dict[str, Metric], name: str, **labels: str) -> float:
    return metrics[name].samples[frozenset(labels.items())]


def exporter_get(port: int, path: str, headers: dict | None = None) -> tuple[int, str, str]:
    """(status, content type, body) of GET path from the exporter on loopback."""
    request = urllib.request.Request(f'http://127.0.0.1:{port}{path}', headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.headers['Content-Type'], response.read().decode()
    except urllib.error.HTTPError as error:
        with error:
            return error.code, error.headers['Content-Type'], error.read().decode()


def raw_exchange(port: int, data: bytes) -> bytes:
    """What the exporter answers to these bytes, read until it closes."""
    with socket.create_connection(('127.0.0.1', port), timeout=30) as sock:
        sock.sendall(data)
        answer = b''
        while True:
            piece = sock.recv(65536)
            if not piece:
                return answer
            answer += piece


class Exporter:
    """The exporter as a process (the command line), on a free loopback port, with its targets file."""

    def __init__(self, directory: Path, targets: dict, env: dict | None = None) -> None:
        (directory / 'targets.json').write_text(json.dumps({'targets': targets}))
        self.output = directory / 'evidence.jsonl'
        self.process = subprocess.Popen(script_command(CLIENT, '--exporter', '127.0.0.1:0', '--targets',
                                               'targets.json', '--output', 'evidence.jsonl'), cwd=directory,
                                        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        text=True, env=script_env(env))
        first = self.process.stderr.readline()
        match = re.search(r'listening on http://127\.0\.0\.1:(\d+)/', first)
        if not match:
            self.process.kill()
            raise AssertionError(f'the exporter did not start: {first}{self.process.stderr.read()}')
        self.port = int(match[1])

    def get(self, path: str, headers: dict | None = None) -> tuple[int, str, str]:
        return exporter_get(self.port, path, headers)

    def stop(self) -> tuple[int, str]:
        """SIGTERM; (exit status, what it wrote on stderr after its first line)."""
        self.process.send_signal(signal.SIGTERM)
        _, stderr = self.process.communicate(timeout=60)
        return self.process.returncode, stderr

    def records(self) -> list[dict]:
        return [json.loads(line) for line in self.output.read_text().splitlines()]


class ExpositionParserTests(unittest.TestCase):
    """The strict reader itself: it must refuse what Prometheus would, or its passes mean nothing."""

    def test_it_refuses_each_breach_of_the_format(self):
        good = '# HELP a_total A.\n# TYPE a_total counter\na_total{x="1"} 3\n'
        self.assertEqual(value_of(parse_exposition(good), 'a_total', x='1'), 3)
        bad = {
            'no final line feed': good[:-1],
            'TYPE after a sample': 'a 1\n# TYPE a gauge\n',
            'two TYPE lines': '# TYPE a gauge\n# TYPE a gauge\na 1\n',
            'unknown type': '# TYPE a meter\na 1\n',
            'bad metric name': '1a 1\n',
            'bad label name': 'a{1x="1"} 1\n',
            'unquoted label value': 'a{x=1} 1\n',
            'invalid escape': 'a{x="\\t"} 1\n',
            'raw quote in a value': 'a{x="say "hi""} 1\n',
            'bad value': 'a 1,5\n',
            'a series twice': 'a{x="1"} 1\na{x="1"} 2\n',
            'family split in two': 'a 1\nb 1\na{x="1"} 2\n',
            'blank line': 'a 1\n\nb 1\n',
            'two spaces': 'a  1\n',
            'duplicate label': 'a{x="1",x="2"} 1\n',
        }
        for name, text in bad.items():
            with self.subTest(name), self.assertRaises(ValueError):
                parse_exposition(text)


class ExporterCoreTests(unittest.TestCase):
    """The sans-IO parts: the targets file, the deadline, the query, the exposition, the single-flight."""

    def setUp(self) -> None:
        self.parser = stream_client._parser()

    def test_targets_read_like_the_command_line_they_replace(self):
        targets = stream_client.parse_targets({'targets': {
            'prod': {'url': 'https://llm.example/v1/chat/completions', 'model': 'm', 'max_tokens': 16,
                     'stop': ['x'], 'extra': {'min_tokens': 2}, 'idle': 5, 'api_key_env': 'PROD_KEY'},
            'demo': {'fixture': 'tool-call', 'fixture_profile': 'vllm'}}}, self.parser)
        prod = targets['prod']
        self.assertEqual((prod.args.url, prod.args.max_tokens, prod.args.stop, prod.args.idle, prod.api_key_env),
                         ('https://llm.example/v1/chat/completions', 16, ['x'], 5, 'PROD_KEY'))
        self.assertEqual(json.loads(prod.args.extra), {'min_tokens': 2})
        self.assertEqual(prod.args.deadline, 60.0)  # the flag's default
        self.assertEqual((targets['demo'].args.fixture, targets['demo'].api_key_env), ('tool-call', None))

    def test_a_bad_targets_file_names_the_target_and_the_field(self):
        cases = {
            'not the shape': ([], 'expected {"targets"'),
            'no target': ({'targets': {}}, 'at least one target'),
            'a key beside targets': ({'targets': {'a': {}}, 'x': 1}, 'expected {"targets"'),
            'a name with a slash': ({'targets': {'a/b': {}}}, "target 'a/b'"),
            'settings not an object': ({'targets': {'a': 'http://x'}}, 'target a: expected an object'),
            'unknown key': ({'targets': {'a': {'prompt_file': 'p.txt'}}}, 'target a: prompt_file is not a setting'),
            'wrong type': ({'targets': {'a': {'max_tokens': '16'}}}, "target a: max_tokens must be an integer"),
            'a bool for a number': ({'targets': {'a': {'idle': True}}}, 'target a: idle must be a number'),
            'bad choice': ({'targets': {'a': {'api': 'embeddings'}}}, 'target a: api must be one of chat'),
            'unknown fixture mode': ({'targets': {'a': {'fixture': 'nope'}}}, 'target a: fixture must be one of'),
            'extra as text': ({'targets': {'a': {'extra': '{}'}}}, 'target a: extra must be a JSON object'),
            'stop not a list': ({'targets': {'a': {'stop': 'x'}}}, 'target a: stop must be a list of strings'),
            'url and fixture': ({'targets': {'a': {'url': 'http://127.0.0.1:1/v1/chat/completions',
                                                    'fixture': 'ok'}}}, 'target a: fixture and url exclude'),
            'a key instead of its variable': ({'targets': {'a': {'api_key_env': 'sk-live 12345'}}},
                                              'target a: api_key_env must be the name of an environment variable'),
        }
        for name, (data, expected) in cases.items():
            with self.subTest(name):
                with self.assertRaises(stream_client.UsageError) as caught:
                    stream_client.parse_targets(data, self.parser)
                self.assertIn(expected, str(caught.exception))
                self.assertNotIn('\n', str(caught.exception))
                self.assertNotIn('12345', str(caught.exception))

    def test_cross_check_is_a_target_key_only_once_its_flag_exists(self):
        data = {'targets': {'a': {'fixture': 'ok', 'cross_check': True}}}
        if '--cross-check' not in self.parser._option_string_actions:
            with self.assertRaises(stream_client.UsageError) as caught:
                stream_client.parse_targets(data, self.parser)
            self.assertIn('cross_check is not a setting', str(caught.exception))
            self.parser.add_argument('--cross-check', action='store_true')
        self.assertIs(stream_client.parse_targets(data, self.parser)['a'].args.cross_check, True)

    def test_the_deadline_is_the_sooner_of_the_targets_and_the_scrape_timeout_less_a_margin(self):
        margin = stream_client._SCRAPE_TIMEOUT_MARGIN
        cases = [(60.0, None, 60.0), (60.0, '10', 10 - margin), (5.0, '30', 5.0), (60.0, '0.6', 0.3),
                 (60.0, 'soon', 60.0), (60.0, '-1', 60.0), (60.0, 'nan', 60.0), (60.0, '0', 60.0)]
        for target, header, expected in cases:
            with self.subTest(header=header):
                self.assertAlmostEqual(stream_client._probe_deadline(target, header), expected)

    def test_the_probe_query_names_a_target_of_the_file_and_never_a_url(self):
        names = {'ok', 'prod-eu'}
        refused = {'target=nope': ('unknown_target', "unknown target 'nope'"),
                   'target=http%3A%2F%2F10.0.0.1%2Fv1': ('url_target', 'not a URL'),
                   'target=127.0.0.1:8000': ('url_target', 'not a URL'),
                   '': ('bad_query', 'expected target=NAME exactly once'),
                   'target=ok&target=ok': ('bad_query', 'exactly once'),
                   'target=ok&module=x': ('bad_query', 'unknown parameter'), '%zz': ('bad_query', 'malformed query')}
        for query, name in {'target=ok': 'ok', 'target=prod-eu': 'prod-eu'}.items():
            with self.subTest(query):
                self.assertEqual(stream_client._probe_target(query, names), name)
        for query, (reason, message) in refused.items():
            with self.subTest(query):
                refusal = stream_client._probe_target(query, names)
                self.assertEqual(refusal.reason, reason)
                self.assertIn(message, refusal.message)

    def test_exporter_addresses_are_loopback_unless_spelled_out(self):
        cases = {'9116': ('127.0.0.1', 9116), ':9116': ('127.0.0.1', 9116), 'localhost:9116': ('127.0.0.1', 9116),
                 '0.0.0.0:9116': ('0.0.0.0', 9116), '[::1]:9116': ('::1', 9116), '10.1.2.3:0': ('10.1.2.3', 0)}
        for value, address in cases.items():
            with self.subTest(value):
                self.assertEqual(stream_client._exporter_address(value), address)
        for value in ('monitor.example:9116', '9116x', '70000', '', 'host:'):
            with self.subTest(value), self.assertRaises(ValueError):
                stream_client._exporter_address(value)

    def test_probe_metrics_follow_the_format_and_the_naming_conventions(self):
        records = {'ok': run_fixture('ok'), 'broken': run_fixture('broken'),
                   'tool-call': run_fixture('tool-call', tools=fixture_server.TOOLS),
                   'json-invalid': run_fixture('json-invalid', json_schema=fixture_server.JSON_SCHEMA)}
        metrics = {name: parse_exposition(stream_client.exposition(stream_client.probe_families(record)))
                   for name, record in records.items()}
        for name, parsed in metrics.items():
            with self.subTest(name):
                for metric, family in parsed.items():
                    self.assertEqual(family.type, 'gauge', metric)
                    self.assertFalse(metric.endswith('_total'), metric)
                    self.assertTrue(family.help, metric)
                    self.assertTrue(metric.startswith(('probe_', 'stream_probe_')), metric)
                self.assertEqual(value_of(parsed, 'probe_success'), int(records[name]['ok']))
                failed = {dict(labels)['layer']: value for labels, value in parsed['stream_probe_failed'].samples.items()}
                self.assertEqual(set(failed), set(stream_client.LAYERS))
                self.assertEqual(sum(failed.values()), 0 if records[name]['ok'] else 1)
        self.assertEqual(value_of(metrics['broken'], 'stream_probe_failed', layer='application'), 1)
        self.assertEqual([dict(labels)['kind'] for labels in metrics['broken']['stream_probe_error_info'].samples],
                         ['eof_before_done'])
        self.assertEqual(metrics['ok']['stream_probe_error_info'].samples, {})
        self.assertAlmostEqual(value_of(metrics['ok'], 'stream_probe_first_text_seconds'),
                               records['ok']['first_text_ms'] / 1000, places=5)
        self.assertEqual(value_of(metrics['ok'], 'stream_probe_http_status'), 200)
        self.assertEqual(value_of(metrics['tool-call'], 'stream_probe_tool_calls_verified'), 1)
        self.assertEqual(value_of(metrics['json-invalid'], 'stream_probe_json_verified'), 0)
        self.assertNotIn('stream_probe_tool_calls_verified', metrics['ok'])  # no tools offered: nothing to verify

    def test_label_values_are_escaped(self):
        record = {**run_fixture('broken'), 'error_kind': 'say "hi" \\ then\nstop'}
        parsed = parse_exposition(stream_client.exposition(stream_client.probe_families(record)))
        self.assertEqual([dict(labels)['kind'] for labels in parsed['stream_probe_error_info'].samples],
                         ['say "hi" \\ then\nstop'])

    def test_one_run_per_target_at_a_time_and_a_bound_on_all(self):
        flights = stream_client.SingleFlight(limit=1)
        started, release, calls = threading.Event(), threading.Event(), []

        def slow(waited: float) -> dict:
            calls.append(waited)
            started.set()
            release.wait(30)
            return {'run': len(calls)}
        results = {}
        leader = threading.Thread(target=lambda: results.update(leader=flights.do('a', slow, 30)))
        leader.start()
        started.wait(30)
        follower = threading.Thread(target=lambda: results.update(follower=flights.do('a', slow, 30)))
        follower.start()
        self.assertEqual(flights.do('b', slow, 0), (None, False))  # the one slot is taken: no run of b
        while follower.is_alive() and flights.joined['a'] == 0:
            time.sleep(0.01)
        release.set()
        leader.join(30)
        follower.join(30)
        self.assertEqual(calls, [0.0])
        self.assertEqual(results, {'leader': ({'run': 1}, False), 'follower': ({'run': 1}, True)})
        self.assertEqual(flights.do('b', lambda waited: 'b ran', 0), ('b ran', False))
        self.assertEqual(flights.in_flight(), 0)

    def test_a_probe_that_joins_a_run_in_flight_is_counted_and_answered_with_its_result(self):
        request = stream_client.prepare('http://127.0.0.1:9/v1/chat/completions', 'm', 'p')
        started, release, runs, kept = threading.Event(), threading.Event(), [], []

        def run_one(prepared):
            runs.append(prepared.deadline)
            started.set()
            release.wait(30)
            return {**run_fixture('ok'), 'started_at': '2026-12-01T00:00:00.000Z'}
        exporter = stream_client.Exporter({'a': request}, 2, run_one, lambda name, record: kept.append(name),
                                          lambda line: None)
        answers = []
        first = threading.Thread(target=lambda: answers.append(exporter.probe('target=a', '10')))
        first.start()
        started.wait(30)
        second = threading.Thread(target=lambda: answers.append(exporter.probe('target=a', '10')))
        second.start()
        while exporter.flights.joined['a'] == 0 and second.is_alive():
            time.sleep(0.01)
        release.set()
        first.join(30)
        second.join(30)
        self.assertEqual(runs, [10 - stream_client._SCRAPE_TIMEOUT_MARGIN])
        self.assertEqual(kept, ['a'])
        self.assertEqual([answer.status for answer in answers], [200, 200])
        self.assertEqual(answers[0].body, answers[1].body)
        own = parse_exposition(exporter.metrics().body)
        self.assertEqual(value_of(own, 'stream_exporter_runs_total', target='a', result='ok'), 1)
        self.assertEqual(value_of(own, 'stream_exporter_joined_scrapes_total', target='a'), 1)
        self.assertEqual(exporter.answer('/probe?target=b', None).status, 400)
        self.assertEqual(exporter.answer('/probe.php', None).status, 404)
        self.assertEqual(value_of(parse_exposition(exporter.metrics().body), 'stream_exporter_scrape_errors_total',
                                  reason='unknown_target'), 1)

    def test_a_run_that_fails_in_the_client_keeps_a_record_and_a_probe_after_sigterm_starts_none(self):
        request = stream_client.prepare('http://127.0.0.1:9/v1/chat/completions', 'm', 'p')
        kept, runs = [], []

        def broken_client(prepared):
            runs.append(prepared)
            raise RuntimeError('a bug')
        exporter = stream_client.Exporter({'a': request}, 1, broken_client,
                                          lambda name, record: kept.append(record), lambda line: None)
        answer = exporter.answer('/probe?target=a', None)
        self.assertEqual(value_of(parse_exposition(answer.body), 'stream_probe_failed', layer='client'), 1)
        self.assertEqual([(record['target'], record['error']) for record in kept],
                         [('a', 'client: the client failed during the run: RuntimeError: a bug')])
        exporter.stopping = True
        self.assertEqual(exporter.answer('/probe?target=a', None).status, 503)
        self.assertEqual(len(runs), 1)

    def test_appending_is_only_to_a_file_of_whole_record_lines(self):
        with tempfile.TemporaryDirectory() as tmp:
            lines = Path(tmp, 'lines.jsonl')
            lines.write_text(json.dumps(fake_record(0)) + '\n')
            os.close(stream_client._append_output(str(lines)))
            cases = {'cut.jsonl': json.dumps(fake_record(0)), 'single.json': json.dumps(fake_record(0), indent=2) + '\n',
                     'notes.txt': 'hello\n'}
            for name, text in cases.items():
                with self.subTest(name):
                    Path(tmp, name).write_text(text)
                    with self.assertRaises(stream_client.UsageError):
                        stream_client._append_output(str(Path(tmp, name)))
                    self.assertEqual(Path(tmp, name).read_text(), text)
            fd = stream_client._append_output(str(Path(tmp, 'new.jsonl')))
            os.close(fd)
            self.assertEqual(os.stat(Path(tmp, 'new.jsonl')).st_mode & 0o777, 0o600)


class ExporterTests(unittest.TestCase):
    """The exporter as Prometheus meets it: a process on loopback, scraped, stopped by SIGTERM."""

    KEY = 'sk-probe-5e3a91'

    def setUp(self) -> None:
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.dir = Path(self.tmp.name)

    def test_scraped_like_prometheus_it_answers_each_target_with_its_verdict(self):
        echo = json.dumps({'error': {'message': f'invalid key {self.KEY}', 'type': 'AuthenticationError',
                                     'code': 401}})
        response = (f'HTTP/1.1 401 Unauthorized\r\ncontent-type: application/json\r\nx-echo: {self.KEY}\r\n'
                    f'content-length: {len(echo)}\r\n\r\n{echo}').encode()
        targets = {'ok': {'fixture': 'ok'}, 'broken': {'fixture': 'broken'}, 'tools': {'fixture': 'tool-call'},
                   'slow': {'fixture': 'stall', 'idle': 30}}
        before = json.dumps(fake_record(0)) + '\n'  # a line already there, which appending must keep
        (self.dir / 'evidence.jsonl').write_text(before)
        with Fixture(replay=response) as echoing:
            targets['keyed'] = {'url': echoing.url, 'model': 'm', 'api_key_env': 'PROBE_KEY'}
            exporter = Exporter(self.dir, targets, env=dict(os.environ, PROBE_KEY=self.KEY))
            try:
                scrapes = {name: exporter.get(f'/probe?target={name}', {'X-Prometheus-Scrape-Timeout-Seconds': '10'})
                           for name in ('ok', 'broken', 'tools', 'keyed')}
                errors = {
                    'unknown target': exporter.get('/probe?target=nope'),
                    'URL as target': exporter.get('/probe?target=http%3A%2F%2F127.0.0.1%3A9%2Fv1%2Fchat%2Fcompletions'),
                    'no target': exporter.get('/probe'),
                    'unknown page': exporter.get('/nope'),
                }
                raw = {'malformed': raw_exchange(exporter.port, b'GARBAGE\r\n\r\n'),
                       'other method': raw_exchange(exporter.port, b'POST /probe?target=ok HTTP/1.1\r\n'
                                                                   b'Content-Length: 0\r\n\r\n'),
                       'a body': raw_exchange(exporter.port, b'GET /probe?target=ok HTTP/1.1\r\n'
                                                             b'Content-Length: 3\r\n\r\nabc'),
                       'too large': raw_exchange(exporter.port, b'GET /' + b'a' * 70_000 + b' HTTP/1.1\r\n\r\n')}
                again = exporter.get('/probe?target=ok')  # still serving after all of that
                page = exporter.get('/')
                own = exporter.get('/metrics')
                # A slow scrape timeout: the target allows 60 s, Prometheus 1.5 s; SIGTERM comes during the run.
                slow: list = []
                scrape = threading.Thread(target=lambda: slow.append(exporter.get(
                    '/probe?target=slow', {'X-Prometheus-Scrape-Timeout-Seconds': '1.5'})))
                scrape.start()
                while scrape.is_alive() and value_of(parse_exposition(exporter.get('/metrics')[2]),
                                                     'stream_exporter_runs_in_flight') == 0:
                    time.sleep(0.01)
            finally:
                status, stderr = exporter.stop()
            scrape.join(30)
            self.assertEqual(echoing.last_request[0]['Authorization'], f'Bearer {self.KEY}')
        self.assertEqual(status, 143, stderr)
        self.assertIn('SIGTERM: ending 1 run in flight', stderr)
        metrics = {name: parse_exposition(body) for name, (_, _, body) in scrapes.items()}
        for name, (code, content_type, _) in scrapes.items():
            with self.subTest(name):
                self.assertEqual((code, content_type), (200, 'text/plain; version=0.0.4; charset=utf-8'))
        self.assertEqual({name: value_of(parsed, 'probe_success') for name, parsed in metrics.items()},
                         {'ok': 1, 'broken': 0, 'tools': 1, 'keyed': 0})
        self.assertEqual(value_of(metrics['broken'], 'stream_probe_failed', layer='application'), 1)
        self.assertEqual(value_of(metrics['keyed'], 'stream_probe_failed', layer='http'), 1)
        self.assertEqual(value_of(metrics['keyed'], 'stream_probe_http_status'), 401)
        self.assertEqual(value_of(metrics['tools'], 'stream_probe_tool_calls_verified'), 1)
        self.assertEqual(slow[0][0], 200)
        self.assertEqual(value_of(parse_exposition(slow[0][2]), 'stream_probe_failed', layer='timeout'), 1)
        for name, (code, content_type, body) in errors.items():
            with self.subTest(name):
                self.assertEqual(code // 100, 4)
                self.assertEqual((content_type, body.count('\n')), ('text/plain; charset=utf-8', 1))
        self.assertIn('not a URL', errors['URL as target'][2])
        self.assertIn("unknown target 'nope'", errors['unknown target'][2])
        for name, answer in raw.items():
            with self.subTest(name):
                head, _, body = answer.partition(b'\r\n\r\n')
                self.assertRegex(head, rb'^HTTP/1\.[01] 4\d\d ')
                self.assertEqual(body.count(b'\n'), 1, body)
        self.assertEqual(again[0], 200)
        own_metrics = parse_exposition(own[2])
        for metric, family in own_metrics.items():
            self.assertEqual(metric.endswith('_total'), family.type == 'counter', metric)
        self.assertEqual(value_of(own_metrics, 'stream_exporter_runs_total', target='broken', result='failed'), 1)
        self.assertEqual(value_of(own_metrics, 'stream_exporter_failures_total', target='broken', layer='application',
                                  kind='eof_before_done'), 1)
        self.assertEqual(value_of(own_metrics, 'stream_exporter_scrape_errors_total', reason='url_target'), 1)
        rows = {row[0]: row for row in PageReader(page[2]).cells[1:]}
        self.assertEqual((rows['ok'][3], rows['broken'][3]), ('ok', 'NOT OK'))
        text = exporter.output.read_text()
        self.assertTrue(text.startswith(before))
        records = exporter.records()[1:]
        self.assertEqual([record['target'] for record in records], ['ok', 'broken', 'tools', 'keyed', 'ok', 'slow'])
        self.assertEqual(records[-1]['error_layer'], 'timeout')
        self.assertIn('overall deadline of 1 s', records[-1]['error'])  # 1.5 s less the margin, not the 60 s
        outputs = {'metrics': ''.join(body for _, _, body in scrapes.values()) + own[2], 'page': page[2],
                   'records': text, 'stderr': stderr}
        for name, text in outputs.items():
            with self.subTest(output=name):
                self.assertNotIn(self.KEY, text)
                self.assertNotIn('5e3a91', text)
        summary = run_cli('--summary', 'evidence.jsonl', '--mixed-sources', cwd=self.tmp.name)
        self.assertEqual(json.loads(summary.stdout)['runs'], 7, summary.stderr)

    def test_a_bad_targets_file_or_flag_exits_2_with_one_line_and_serves_nothing(self):
        cases = {
            'a bad field': ({'a': {'max_tokens': 0, 'fixture': 'ok'}}, [], 'target a: max_tokens must be an integer'),
            'an unset key variable': ({'a': {'fixture': 'ok', 'api_key_env': 'NO_SUCH_VARIABLE_29'}}, [],
                                      'target a: api_key_env names NO_SUCH_VARIABLE_29, which is not set'),
            'a missing tools file': ({'a': {'fixture': 'ok', 'tools': 'absent.json'}}, [],
                                     "target a: cannot read tools 'absent.json'"),
            'a fixture mode of another API': ({'a': {'fixture': 'sequence-gap'}}, [], 'target a: fixture mode'),
            'a run flag beside it': ({'a': {'fixture': 'ok'}}, ['--model', 'm'], '--model does not go with --exporter'),
            'a host name to bind': ({'a': {'fixture': 'ok'}}, ['--exporter', 'example.com:0'],
                                    'needs an IP address to bind'),
        }
        for number, (targets, _, _) in enumerate(cases.values()):
            (self.dir / f'targets{number}.json').write_text(json.dumps({'targets': targets}))
        results = in_threads(lambda item: run_cli('--exporter', '127.0.0.1:0', '--targets', f'targets{item[0]}.json',
                                                  '--output', 'e.jsonl', *item[1][1], cwd=self.tmp.name),
                             list(enumerate(cases.values())))
        for (name, (_, _, expected)), done in zip(cases.items(), results):
            with self.subTest(name):
                self.assertEqual(done.returncode, 2, done.stderr)
                self.assertEqual(done.stderr.count('\n'), 1, done.stderr)
                self.assertIn(expected, done.stderr)
                self.assertFalse((self.dir / 'e.jsonl').exists())

def pair_capture(name: str) -> tuple[bytes, bytes, dict]:
    """A vLLM capture pair: the streamed response, the unstreamed one, and the streamed request's body."""
    return ((TRACES / f'{name}_stream.http').read_bytes(), (TRACES / f'{name}_unstreamed.http').read_bytes(),
            json.loads((TRACES / f'{name}_stream.request.json').read_text()))


def replay_pair(name: str, cross_check: bool = True) -> dict:
    """The record of a vLLM capture pair replayed by the fixture, with the request options that made it."""
    streamed, unstreamed, body = pair_capture(name)
    with Fixture(replay=streamed, replay_twin=unstreamed) as fixture:
        return stream(fixture.url, 'tiny', 'hi', idle=2, max_tokens=body['max_tokens'], tools=body['tools'],
                      tool_choice=body['tool_choice'], temperature=body['temperature'], extra={'seed': body['seed']},
                      cross_check=cross_check)


def answer(text: str = '', calls: tuple = (), finish: str | None = 'stop', tokens: int | None = 3,
           ids: tuple | None = (1, 2, 3), reasoning: str = '') -> stream_client.Answer:
    return stream_client.Answer(text, reasoning, tuple(stream_client.AnsweredCall(*call) for call in calls), finish,
                                tokens, ids)


class PairRow(NamedTuple):
    """What --cross-check makes of a pair mode: the verdict, its kind and words, and the cross_check object."""

    layer: str | None
    kind: str | None
    words: str | None
    comparable: bool | None
    same: bool
    first_difference: str | None
    unstreamed_finish: str
    diverged_at: int | None = None


class CrossCheckTests(unittest.TestCase):
    PAIRS = {
        'pair-honest': PairRow(None, None, None, True, True, None, 'tool_calls'),
        'pair-args-dropped': PairRow('cross-check', 'cross_check_differs', 'the same 12 tokens, but streamed tool call 0 '
                                     'has arguments {"city": "Paris"} and unstreamed {"city": "Paris", "unit": '
                                     '"celsius"}', True, False, 'streamed tool call 0 has arguments', 'tool_calls'),
        'pair-call-dropped': PairRow('cross-check', 'cross_check_differs', 'the same 16 tokens, but the stream has 1 '
                                     'tool call and the unstreamed answer 2', True, False, 'the stream has 1 tool call',
                                     'tool_calls'),
        'pair-markup-leak': PairRow('application', 'tool_markup_in_text', 'tool-call markup <tool_call> in the visible '
                                    'text at character 0', True, False, 'streamed text and unstreamed differ from '
                                    "character 0: '<tool_call>", 'tool_calls'),
        'pair-budget-relabelled': PairRow('application', 'budget_used_by_tool_call', 'the whole budget of 128 tokens '
                                          'was used', True, False, "streamed text and unstreamed differ from character 0: "
                                          "'' and '<tool_call>", 'length'),
        'pair-diverged': PairRow(None, None, None, False, False, 'streamed text and unstreamed differ from character 5',
                                 'stop', diverged_at=1),
    }

    def setUp(self) -> None:
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.dir = Path(self.tmp.name)

    def check_pair(self, mode: str, record: dict) -> None:
        expected = self.PAIRS[mode]
        cross = record['cross_check']
        self.assertEqual((record['error_layer'], record['error_kind'], record['ok']),
                         (expected.layer, expected.kind, expected.layer is None), record['error'])
        if expected.words:
            self.assertIn(expected.words, record['error'])
        if expected.kind:
            self.assertEqual(stream_client.FAILURE_KINDS[expected.kind][0], expected.layer)
        self.assertEqual((cross['comparable'], cross['same'], cross['unstreamed_status'], cross['unstreamed_finish'],
                          cross['diverged_at_token']),
                         (expected.comparable, expected.same, 200, expected.unstreamed_finish, expected.diverged_at))
        self.assertEqual(bool(cross['differences']), not expected.same)
        if expected.first_difference:
            self.assertTrue(cross['differences'][0].startswith(expected.first_difference), cross['differences'])
        self.assertEqual(cross['token_ids']['streamed'], cross['token_ids']['unstreamed'])
        self.assertEqual(record['tokens_per_event']['tokens'], cross['token_ids']['streamed'])

    def test_every_pair_mode_gets_its_record_through_the_command_line_in_one_run_and_in_a_load(self):
        self.assertEqual(set(self.PAIRS), set(fixture_server.PAIRS))

        def one(mode: str) -> tuple[subprocess.CompletedProcess, subprocess.CompletedProcess]:
            single = run_cli('--fixture', mode, '--cross-check', '--output', f'{mode}.json', cwd=self.tmp.name)
            load = run_cli('--fixture', mode, '--cross-check', '--runs', '2', '--concurrency', '2',
                           '--output', f'{mode}.jsonl', cwd=self.tmp.name)
            return single, load
        for mode, (single, load) in zip(self.PAIRS, in_threads(one, list(self.PAIRS), threads=3)):
            expected = self.PAIRS[mode]
            with self.subTest(mode=mode):
                self.assertEqual(single.returncode, 0 if expected.layer is None else 1, single.stderr)
                self.check_pair(mode, json.loads((self.dir / f'{mode}.json').read_text()))
                self.assertEqual(load.returncode, 0 if expected.layer is None else 1, load.stderr)
                records = [json.loads(line) for line in (self.dir / f'{mode}.jsonl').read_text().splitlines()]
                self.assertEqual(len(records), 2)
                for record in records:
                    self.check_pair(mode, record)
                summary = json.loads(load.stdout)
                if expected.layer:
                    self.assertEqual(summary['not_ok_by_layer'], {expected.layer: 2})
                pairs = summary['cross_check']
                self.assertEqual(pairs, {'pairs': 2, 'compared': 2, 'same': 2 * expected.same,
                                         'different': 2 * (not expected.same),
                                         'not_comparable': 2 * (expected.comparable is False), 'without_token_ids': 0,
                                         'unstreamed_failed': 0})

    def test_without_cross_check_the_request_is_byte_for_byte_what_it_was(self):
        # sha256 of the whole request as sent, computed before --cross-check existed
        wires = {
            'chat': ({}, '905e9a6dfe2e9e93d3e90c60f516cdeb72e6dbb97a1c5d67b838b15ddc5ce6f5'),
            'chat-tools': ({'tools': fixture_server.TOOLS, 'tool_choice': 'required', 'temperature': 0.5,
                            'extra': {'seed': 7}}, '6d36f223bfafac2511d3b69cc44bf87694da0c4c0ee4131a5cbc2d8213de8770'),
            'completions': ({'stop': ['e']}, 'af64365d70a978014416d4b6935d856e2ec11659ce1a355258677e7a653afe7c'),
            'responses': ({'system': 'Be brief.', 'tools': fixture_server.TOOLS},
                          'e13aa038a3052e0048b184da4e156351e379d16b1d06e54c675aa1553662c533'),
            'messages': ({'json_schema': fixture_server.JSON_SCHEMA},
                         'c9b2a663442d356e800b49bd2ebfe4a44cb9f978c18766f836605bdd29599eb0'),
        }
        for name, (options, digest) in wires.items():
            with self.subTest(name=name):
                path = URL_PATHS[name.partition('-')[0]]
                request = stream_client.prepare(f'http://127.0.0.1:8000{path}', 'tiny', 'hi', max_tokens=64, **options)
                self.assertEqual(hashlib.sha256(request.wire).hexdigest(), digest)
                self.assertIsNone(request.twin)
                self.assertNotIn(b'return_token_ids', request.body)
        request = stream_client.prepare('http://127.0.0.1:8000/v1/chat/completions', 'tiny', 'hi', max_tokens=64)
        self.assertEqual(request.body, b'{"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "stream": '
                                       b'true, "stream_options": {"include_usage": true}, "max_tokens": 64, '
                                       b'"temperature": 0.0, "n": 1}')

    def test_the_twin_is_the_same_body_unstreamed_and_token_ids_are_asked_only_where_served(self):
        for api, path in URL_PATHS.items():
            with self.subTest(api=api):
                request = stream_client.prepare(f'http://127.0.0.1:8000{path}', 'tiny', 'hi', cross_check=True)
                streamed, twin = json.loads(request.body), json.loads(request.twin.body)
                asks = api in ('chat', 'completions')
                self.assertEqual(streamed.get('return_token_ids'), True if asks else None)
                self.assertEqual((twin['stream'], 'stream_options' in twin), (False, False))
                self.assertEqual({key: value for key, value in streamed.items() if key not in ('stream', 'stream_options')},
                                 {key: value for key, value in twin.items() if key != 'stream'})
                self.assertEqual((request.twin.headers['Accept'], request.headers['Accept']),
                                 ('application/json', 'text/event-stream'))
                self.assertIn(b'"stream": false', request.twin.wire)
                self.assertIsNone(request.twin.twin)
                self.assertTrue(request.settings['cross_check'])

    def test_a_random_request_without_a_seed_is_a_usage_error(self):
        with self.assertRaisesRegex(ValueError, 'cross_check needs a deterministic request: temperature 0.7'):
            stream_client.prepare('http://127.0.0.1:8000/v1/chat/completions', 'm', 'p', temperature=0.7,
                                  cross_check=True)
        stream_client.prepare('http://127.0.0.1:8000/v1/chat/completions', 'm', 'p', temperature=0.7,
                              extra={'seed': 1}, cross_check=True)
        done = run_cli('--fixture', 'pair-honest', '--cross-check', '--temperature', '0.7', '--output', 'run.json',
                       cwd=self.tmp.name)
        self.assertEqual(done.returncode, 2)
        self.assertEqual(done.stderr.count('\n'), 1, done.stderr)
        self.assertIn('--cross-check needs a deterministic request: --temperature 0.7 without a "seed" in --extra',
                      done.stderr)
        self.assertFalse((self.dir / 'run.json').exists())
        done = run_cli('--fixture', 'pair-honest', '--cross-check', '--temperature', '0.7', '--extra', '{"seed": 3}',
                       '--output', 'run.json', cwd=self.tmp.name)
        self.assertEqual(done.returncode, 0, done.stderr)

    def test_the_real_vllm_pair_replays_as_the_same_answer_with_its_token_ids(self):
        record = replay_pair('x1_chat_pair_tool_call')
        cross = record['cross_check']
        self.assertTrue(record['ok'], record['error'])
        self.assertEqual((cross['comparable'], cross['same'], cross['differences'], cross['unstreamed_finish']),
                         (True, True, [], 'tool_calls'))
        self.assertEqual((cross['token_ids'], cross['completion_tokens']),
                         ({'streamed': 39, 'unstreamed': 39}, {'streamed': 39, 'unstreamed': 39}))
        self.assertEqual(cross['unstreamed_tool_calls'], [{'name': 'get_time', 'arguments': '{}'}])
        self.assertEqual(record['tokens_per_event'], {'events': 11, 'tokens': 39, 'most': 4, 'median': 4})
        self.assertIsNone(replay_pair('x1_chat_pair_tool_call', cross_check=False)['cross_check'])

    def test_a_pair_without_token_ids_is_compared_and_never_fails(self):
        streamed, unstreamed, body = pair_capture('x1_chat_pair_tool_call')
        head, answer_body = unstreamed.split(b'\r\n\r\n', 1)
        answer_body = re.sub(rb',"token_ids":\[[0-9,]*\]', b'', answer_body)
        answer_body = answer_body.replace(b'"arguments":"{}"', b'"arguments":"{\\"a\\": 1}"')  # another answer
        head = re.sub(rb'content-length: \d+', b'content-length: %d' % len(answer_body), head)
        with Fixture(replay=streamed, replay_twin=head + b'\r\n\r\n' + answer_body) as fixture:
            record = stream(fixture.url, 'tiny', 'hi', idle=2, tools=body['tools'], tool_choice='required',
                            temperature=1, extra={'seed': 19}, cross_check=True)
        cross = record['cross_check']
        self.assertTrue(record['ok'], record['error'])
        self.assertEqual((cross['comparable'], cross['same'], cross['token_ids']), (None, False,
                                                                                    {'streamed': 39, 'unstreamed': None}))
        self.assertEqual(cross['differences'], ['streamed tool call 0 has arguments {} and unstreamed {"a": 1}'])

    def test_a_real_budget_cut_is_explained_once_and_its_twin_shows_the_raw_markup(self):
        record = replay_pair('x2_chat_pair_cut_by_length')
        self.assertEqual((record['error_layer'], record['error_kind']), ('application', 'budget_exhausted'))
        self.assertIn('output budget exhausted (finish_reason=length) inside tool call 0 (get_time)', record['error'])
        cross = record['cross_check']
        self.assertEqual((cross['comparable'], cross['same'], cross['unstreamed_finish']), (True, False, 'length'))
        self.assertEqual(cross['unstreamed_problem'], 'the unstreamed answer did not finish: its finish is length')
        self.assertTrue(cross['unstreamed_text'].startswith('<tool_call>\n{"name": "get_time"'))
        self.assertEqual(cross['differences'][1], 'the stream has 1 tool call and the unstreamed answer 0')

    def test_a_real_end_on_the_last_budget_token_stays_not_ok_with_its_agreeing_twin(self):
        # vLLM 0.32, seed 22: end-of-sequence is the 40th of 40 tokens, finish tool_calls on both sides.
        # Both answers agree, so both may be cut: the twin cannot clear what the stream alone shows.
        alone = replay_pair('x3_chat_pair_eos_on_last_budget_token', cross_check=False)
        paired = replay_pair('x3_chat_pair_eos_on_last_budget_token')
        for record in (alone, paired):
            self.assertEqual((record['ok'], record['error_layer'], record['error_kind']),
                             (False, 'application', 'budget_used_by_tool_call'))
            self.assertIn('the whole budget of 40 tokens was used', record['error'])
        self.assertEqual((paired['cross_check']['comparable'], paired['cross_check']['same']), (True, True))

    def test_every_signal_of_the_stream_alone_stands_with_an_agreeing_twin(self):
        for kind, (validator, events) in STREAM_SIGNALS.items():
            with self.subTest(kind):
                reader = stream_client.ResponseReader(validator)
                reader.feed(SSE_HEAD + b'\r\n' + sse_body(events))
                reader.eof()
                alone = stream_client.judge(reader)
                streamed = stream_client._streamed_answer(reader.validator)
                twin = stream_client.cross_check_record(streamed, 200, streamed,
                                                        stream_client._unstreamed_problem(streamed))
                self.assertEqual((twin['comparable'], twin['same']),
                                 (True if streamed.token_ids is not None else None, True))
                self.assertEqual(alone.kind, kind)
                self.assertEqual(stream_client.judge(reader, None, twin), alone)

    def test_unstreamed_answers_of_each_api_are_parsed_strictly(self):
        unstreamed = split_capture(TRACES / 'x1_chat_pair_tool_call_unstreamed.http')[1]
        self.assertEqual(stream_client.unstreamed_answer('chat', unstreamed),
                         answer('', (('get_time', '{}'),), 'tool_calls', 39, stream_client.unstreamed_answer(
                             'chat', unstreamed).token_ids))
        self.assertEqual(len(stream_client.unstreamed_answer('chat', unstreamed).token_ids), 39)
        responses = stream_client.unstreamed_answer('responses',
                                                    split_capture(TRACES / 'x4_responses_tool_call_unstreamed.http')[1])
        self.assertEqual(responses, answer('', (('get_time', '{}'),), 'completed', 39, None))
        self.assertEqual(responses.ended_as, 'tool_calls')
        completion = {'choices': [{'index': 0, 'text': 'hi', 'finish_reason': 'length', 'token_ids': [4, 5]}],
                      'usage': {'completion_tokens': 2}}
        self.assertEqual(stream_client.unstreamed_answer('completions', json.dumps(completion).encode()),
                         answer('hi', (), 'length', 2, (4, 5)))
        message = {'type': 'message', 'content': [{'type': 'thinking', 'thinking': 'hm'},
                                                  {'type': 'tool_use', 'id': 't', 'name': 'get_weather',
                                                   'input': {'city': 'Paris'}}],
                   'stop_reason': 'tool_use', 'usage': {'output_tokens': 7}}
        parsed = stream_client.unstreamed_answer('messages', json.dumps(message).encode())
        self.assertEqual((parsed.reasoning, parsed.calls, parsed.ended_as),
                         ('hm', (stream_client.AnsweredCall('get_weather', '{"city": "Paris"}', False),), 'tool_calls'))
        broken = {
            b'{"choices": [], "usage": null}': 'expected one choice in the unstreamed answer (n=1), got 0',
            b'{"a": 1, "a": 2}': "not strict JSON (the key 'a' appears twice)",
            b'{"choices": [{"index": 0, "message": {"content": NaN}}]}': 'not strict JSON',
            b'[1]': 'the unstreamed answer is [1], not a JSON object',
            b'{"error": {"message": "boom", "type": "InternalServerError", "code": 500}}':
                "application: the unstreamed answer is an error: 'boom' (InternalServerError 500)",
            b'{"choices": [{"index": 0, "message": {"content": "x"}, "finish_reason": "stop", "token_ids": ["a"]}]}':
                'expected the unstreamed token_ids to be a list of integers',
        }
        for body, words in broken.items():
            with self.subTest(body=body):
                with self.assertRaises(stream_client.StreamError) as caught:
                    stream_client.unstreamed_answer('chat', body)
                self.assertIn(words, str(caught.exception))

    def test_the_unstreamed_reader_reads_the_same_answer_at_every_chunk_boundary(self):
        capture = (TRACES / 'x1_chat_pair_tool_call_unstreamed.http').read_bytes()
        expected = stream_client.unstreamed_answer('chat', split_capture(TRACES /
                                                                         'x1_chat_pair_tool_call_unstreamed.http')[1])
        for name, reads in feedings(capture):
            with self.subTest(feeding=name):
                reader = stream_client.UnstreamedReader()
                for data in reads:
                    reader.feed(data)
                self.assertTrue(reader.complete)
                self.assertEqual(reader.answer('chat'), expected)
        cut = stream_client.UnstreamedReader()
        cut.feed(capture[:-10])
        cut.eof()
        with self.assertRaisesRegex(stream_client.StreamError, 'transport: connection closed after'):
            cut.answer('chat')
        refused = stream_client.UnstreamedReader()
        error = b'{"error": {"message": "no", "code": 400}}'
        refused.feed(b'HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s'
                     % (len(error), error))
        with self.assertRaisesRegex(stream_client.StreamError, "http: expected status 200, got 400 Bad Request: 'no'"):
            refused.answer('chat')

    def test_the_comparison_names_the_first_difference_in_the_users_terms(self):
        paris = (('get_weather', '{"city": "Paris"}'),)
        cases = {
            'same': (answer('hi'), answer('hi'), []),
            'text': (answer('Hello there'), answer('Hello world'),
                     ["streamed text and unstreamed differ from character 6: 'Hello there' and 'Hello world'"]),
            'reasoning': (answer(reasoning='a'), answer(reasoning='b'),
                          ["streamed reasoning and unstreamed differ from character 0: 'a' and 'b'"]),
            'cut arguments': (answer(calls=(('get_weather', '{"city": "Par"}'),)), answer(calls=paris),
                              ['streamed tool call 0 has arguments {"city": "Par"} and unstreamed {"city": "Paris"}']),
            'another tool': (answer(calls=(('get_time', '{}'),)), answer(calls=(('get_weather', '{}'),)),
                             ["streamed tool call 0 is 'get_time' and unstreamed 'get_weather'"]),
            'arguments equal as JSON': (answer(calls=(('get_weather', '{ "city":"Paris" }'),)), answer(calls=paris), []),
            'an input value': (answer(calls=paris), answer(calls=(('get_weather', '{"city": "Paris"}', False),)), []),
            'finish and tokens': (answer(finish='stop', tokens=3), answer(finish='length', tokens=4),
                                  ['streamed finish stop and unstreamed length',
                                   'streamed usage counts 3 completion tokens and unstreamed 4']),
        }
        for name, (streamed, unstreamed, differences) in cases.items():
            with self.subTest(name=name):
                self.assertEqual(stream_client.compare_answers(streamed, unstreamed), differences)
        notes = stream_client.cross_check_record(answer(calls=(('get_weather', '{ "city":"Paris" }'),)), 200,
                                                 answer(calls=paris), None)['notes']
        self.assertEqual(notes, ['tool call 0 has arguments equal as JSON, not as text'])

    def test_a_pair_is_comparable_only_by_equal_token_ids_and_only_then_can_fail(self):
        cut, whole = answer(calls=(('get_weather', '{"city": "Par"}'),)), answer(calls=(('get_weather',
                                                                                          '{"city": "Paris"}'),))
        record = stream_client.cross_check_record(cut, 200, whole, None)
        self.assertEqual((record['comparable'], record['same'], record['diverged_at_token']), (True, False, None))
        failure = stream_client._cross_check_failure(record)
        self.assertEqual((failure.layer, failure.kind), ('cross-check', 'cross_check_differs'))
        self.assertEqual(failure.message, 'the same 3 tokens, but streamed tool call 0 has arguments {"city": "Par"} '
                                          'and unstreamed {"city": "Paris"}')
        diverged = stream_client.cross_check_record(cut, 200, dataclasses.replace(whole, token_ids=(1, 9, 3, 4)), None)
        self.assertEqual((diverged['comparable'], diverged['diverged_at_token']), (False, 1))
        self.assertIsNone(stream_client._cross_check_failure(diverged))
        without = stream_client.cross_check_record(dataclasses.replace(cut, token_ids=None), 200, whole, None)
        self.assertEqual((without['comparable'], without['same'], without['token_ids']['streamed']), (None, False, None))
        self.assertIsNone(stream_client._cross_check_failure(without))
        failed = stream_client.cross_check_record(cut, 503, None, 'http: expected status 200, got 503')
        self.assertEqual((failed['comparable'], failed['same'], failed['unstreamed_status']), (None, None, 503))
        self.assertIsNone(stream_client._cross_check_failure(failed))
        self.assertIsNone(stream_client._unstreamed_problem(answer(finish='length'), 'length'))
        self.assertEqual(stream_client._unstreamed_problem(answer(finish='length')),
                         'the unstreamed answer did not finish: its finish is length')
        self.assertEqual(stream_client._first_divergence((1, 2), (1, 2, 3)), 2)
        self.assertIsNone(stream_client._first_divergence((1, 2), (1, 2)))

    def test_the_two_single_stream_signals(self):
        spec = stream_client.AnswerSpec((('get_weather', None),), 'auto')
        budget = stream_client._budget_used_by_tool_call
        self.assertEqual(budget(answer(calls=(('get_weather', '{}'),), finish='tool_calls', tokens=64), 64),
                         'the whole budget of 64 tokens was used; vLLM reports a call cut by max_tokens as '
                         '"tool_calls"; raise --max-tokens')
        self.assertIsNotNone(budget(answer(calls=(('get_weather', '{}'),), finish='tool_use', tokens=64), 64))
        self.assertIsNotNone(budget(answer(calls=(('get_weather', '{}'),), finish='completed', tokens=64), 64))
        for finished in (answer(calls=(('get_weather', '{}'),), finish='tool_calls', tokens=63),
                         answer(calls=(('get_weather', '{}'),), finish='length', tokens=64),
                         answer('text', finish='stop', tokens=64),
                         answer(calls=(('get_weather', '{}'),), finish='tool_calls', tokens=None)):
            self.assertIsNone(budget(finished, 64))
        markup = stream_client._tool_markup_in_text
        for text, marker in (('Sure. <tool_call>{"name": "x"}</tool_call>', '<tool_call> in the visible text at '
                                                                            'character 6'),
                             ('<|python_tag|>{"name": "x"}', '<|python_tag|> in the visible text at character 0'),
                             ('ok [TOOL_CALLS] [{}]', '[TOOL_CALLS] in the visible text at character 3'),
                             ('<function=get_weather>{}</function>', '<function= in the visible text')):
            with self.subTest(text=text):
                self.assertIn(marker, markup(answer(text), spec))
        self.assertIsNone(markup(answer('<tool_call>'), stream_client.AnswerSpec()))  # no tools offered
        self.assertIsNone(markup(answer('Paris is sunny.'), spec))

    def test_the_budget_signal_explains_cut_arguments_once(self):
        validator = ChatChunks(max_tokens=5, spec=WEATHER)
        for data in (opening(), arguments('{"city": "Par'), chunk_json(finish_reason='tool_calls'),
                     '{"choices": [], "usage": {"completion_tokens": 5}}', '[DONE]'):
            validator.accept(data)
        self.assertIn('the arguments are not JSON', validator.outcome().message)
        failure = stream_client._answer_problem(validator)
        self.assertEqual(failure.kind, 'budget_used_by_tool_call')
        self.assertTrue(failure.message.startswith('the whole budget of 5 tokens was used'))

    def test_token_ids_are_kept_and_counted_per_event(self):
        validator = ChatChunks()
        for data in (chunk_json(delta={'content': 'a'}, token_ids=[1, 2, 3]), chunk_json(delta={}, token_ids=[4]),
                     chunk_json(delta={'content': 'b'}, token_ids=[]), chunk_json(finish_reason='stop'), '[DONE]'):
            validator.accept(data)
        self.assertEqual((validator.token_ids, validator.tokens_per_event), ([1, 2, 3, 4], [3, 1]))
        self.assertEqual(stream_client._tokens_per_event(validator), {'events': 2, 'tokens': 4, 'most': 3, 'median': 2})
        four = ChatChunks()  # an even count of events: the median is the mean of the two middle counts
        for data in (chunk_json(delta={'content': 'a'}, token_ids=[1]), chunk_json(delta={'content': 'b'}, token_ids=[2, 3]),
                     chunk_json(delta={'content': 'c'}, token_ids=[4, 5]), chunk_json(delta={'content': 'd'}, token_ids=[6]),
                     chunk_json(finish_reason='stop'), '[DONE]'):
            four.accept(data)
        self.assertEqual(stream_client._tokens_per_event(four)['median'], 1.5)
        self.assertIsNone(stream_client._tokens_per_event(ChatChunks()))
        with self.assertRaisesRegex(stream_client.StreamError, 'expected token_ids to be a list of integers in event 1'):
            ChatChunks().accept(chunk_json(delta={}, token_ids=[1, 'x']))

    def test_the_fixture_answers_an_unstreamed_request_only_in_a_pair_mode(self):
        with Fixture('ok', profile='vllm') as fixture:
            record = stream(fixture.url, 'm', 'p', tools=fixture_server.TOOLS, cross_check=True)
        self.assertTrue(record['ok'], record['error'])
        cross = record['cross_check']
        self.assertEqual((cross['same'], cross['unstreamed_status']), (None, 400))
        self.assertIn("mode ok only streams; an unstreamed request (stream false) needs a pair mode",
                      cross['unstreamed_problem'])
        with Fixture('pair-budget-relabelled', profile='vllm') as fixture:
            record = stream(fixture.url, 'm', 'p', tools=fixture_server.TOOLS, max_tokens=40, cross_check=True)
        self.assertEqual((record['completion_tokens'], record['cross_check']['completion_tokens']['unstreamed']),
                         (40, 40))

    def test_a_load_cancelled_during_the_unstreamed_request_says_so(self):
        with Fixture('pair-honest', profile='vllm') as fixture:
            request = stream_client.prepare(fixture.url, 'm', 'p', tools=fixture_server.TOOLS, cross_check=True)
            cancel = stream_client.Cancel()
            sent = fixture_server.pair_unstreamed

            def slow_twin(*args):  # the unstreamed answer waits until the load has been cancelled
                cancel.cancel('SIGTERM')
                return sent(*args)
            with mock.patch.object(fixture_server, 'pair_unstreamed', slow_twin):
                record = stream_client.run(request, cancel=cancel)
        self.assertTrue(record['ok'], record['error'])
        cross = record['cross_check']
        self.assertEqual(cross['same'], None)
        self.assertTrue(cross['unstreamed_problem'].startswith('interrupted: SIGTERM'),
                        cross['unstreamed_problem'])

    def test_summary_and_report_count_the_pairs(self):
        records = []
        for mode in ('pair-honest', 'pair-args-dropped', 'pair-diverged'):
            with Fixture(mode, profile='vllm') as fixture:
                records.append(stream(fixture.url, 'm', 'p', cross_check=True,
                                      tools=fixture_server.TOOLS if mode != 'pair-diverged' else None))
        records.append({**fake_record(3), 'cross_check': stream_client.cross_check_record(answer(), None, None, 'no')})
        summary = stream_client.Summary()
        report = stream_client.Report(summary)
        for record in records:
            summary.add(record)
            report.add(record)
        result = summary.result()
        self.assertEqual(result['cross_check'], {'pairs': 4, 'compared': 3, 'same': 1, 'different': 2,
                                                 'not_comparable': 1, 'without_token_ids': 0, 'unstreamed_failed': 1})
        self.assertEqual(result['not_ok_by_layer'], {'cross-check': 1})
        self.assertIn('cross-check: 4 pairs, 3 compared: 1 same, 2 different; 1 not comparable, 0 without token ids, '
                      '1 unstreamed failed', stream_client._summary_table(result))
        cells = PageReader(report.html()).text
        self.assertIn('cross-check: not comparable', cells)
        self.assertIsNone(stream_client.Summary().result()['cross_check'])


def kind_of_events(validator: stream_client.StreamValidator, events: list) -> str | None:
    """The kind of the failure that these events (then their end) give: raised by accept(), or the outcome's."""
    try:
        for event in events:
            validator.accept(event)
    except StreamError as exc:
        return exc.kind
    failure = validator.outcome()
    return failure and failure.kind


def kind_of_response(raw: bytes, api: str = 'chat', incomplete_close: bool = False) -> str | None:
    """The kind of the verdict on these response bytes, fed whole and then closed."""
    reader = stream_client.ResponseReader(stream_client.VALIDATORS[api]())
    reader.feed(raw)
    reader.eof(incomplete_close)
    return stream_client.judge(reader).kind


def answer_problem_kind(validator: stream_client.StreamValidator, events: list) -> str | None:
    """The kind answer_problem() gives the answer these events make: the outcome, or a signal of the whole."""
    for event in events:
        validator.accept(event)
    failure = stream_client._answer_problem(validator)
    return failure and failure.kind


def with_bound(name: str, value: int, action):
    """What action returns while the module's bound NAME is VALUE."""
    with mock.patch.object(stream_client, name, value):
        return action()


def unstreamed_error_kind(response: bytes) -> str | None:
    reader = stream_client.UnstreamedReader()
    reader.feed(response)
    return reader.error and reader.error.kind


def kind_raised(action) -> str | None:
    try:
        action()
    except StreamError as exc:
        return exc.kind
    return None


def responses_events(*bodies: dict) -> list[tuple[str, str]]:
    """Responses events numbered from 0, each body's type its event type."""
    return [(body['type'], json.dumps({**body, 'sequence_number': number})) for number, body in enumerate(bodies)]


def fake_exchange(phase: str, *, proxy: bool = False, started_ago: float = 0.0, **extra) -> types.SimpleNamespace:
    """Enough of an Exchange for the transport's failures, without a socket."""
    request = types.SimpleNamespace(host='127.0.0.1', port=9, address='127.0.0.1:9', scheme='http', idle=1.0, deadline=5.0,
                                    proxy=types.SimpleNamespace(address='127.0.0.1:3128',
                                                                connect_request=lambda host, port: b'')
                                    if proxy else None)
    fields = dict(request=request, phase=stream_client._Phase[phase], cancel=None, reused=False,
                  reader=stream_client.ResponseReader(ChatChunks()), connection=None, idle_s=None,
                  timeline=types.SimpleNamespace(started=time.perf_counter() - started_ago))
    return types.SimpleNamespace(**{**fields, **extra})


class ScriptedSocket:
    """A socket whose recv() returns the given byte strings in turn."""

    def __init__(self, *reads: bytes) -> None:
        self.reads = list(reads)

    def settimeout(self, timeout: float) -> None:
        pass

    def sendall(self, data: bytes) -> None:
        pass

    def recv(self, size: int) -> bytes:
        return self.reads.pop(0) if self.reads else b''


def _certificate_error() -> ssl.SSLCertVerificationError:
    exc = ssl.SSLCertVerificationError(1, 'certificate verify failed')
    exc.verify_message, exc.reason = 'self-signed certificate', 'CERTIFICATE_VERIFY_FAILED'
    return exc


def _tls_error() -> ssl.SSLError:
    exc = ssl.SSLError(1, 'wrong version number')
    exc.reason = 'WRONG_VERSION_NUMBER'
    return exc


def _done_but_unended() -> types.SimpleNamespace:
    x = fake_exchange('BODY')
    x.reader.feed(SSE_HEAD + b'Transfer-Encoding: chunked\r\n\r\n' + chunked(ANSWER_EVENTS, end=b''))
    return x


TWO_TOOLS = stream_client.AnswerSpec((('get_weather', None), ('get_time', None)), 'get_time')
CITY = stream_client.AnswerSpec(json_schema=stream_client.JsonSchema(fixture_server.JSON_SCHEMA))
CHUNKED = SSE_HEAD + b'Transfer-Encoding: chunked\r\n\r\n'
STOP, DONE = chunk_json(finish_reason='stop'), '[DONE]'
TEXT = chunk_json(delta={'content': 'hi'})


def with_token_ids(events: list) -> list:
    """Chat chunks that each carry the token id of their place, as vLLM sends with return_token_ids."""
    marked = []
    for number, data in enumerate(events):
        chunk = json.loads(data) if data != '[DONE]' else None
        for choice in (chunk or {}).get('choices') or []:
            choice['token_ids'] = [number]
        marked.append(json.dumps(chunk) if chunk is not None else data)
    return marked


def sse_body(events: list) -> bytes:
    """The SSE body of these event data (a pair is a typed event: its type, then its data)."""
    return ''.join(f'event: {event[0]}\ndata: {event[1]}\n\n' if isinstance(event, tuple) else f'data: {event}\n\n'
                   for event in events).encode()


# A stream for each signal the streamed answer alone fails on, with token ids where chat sends them, so
# that an agreeing twin is comparable. judge() must give each the same verdict with that twin as alone.
STREAM_SIGNALS = {
    'budget_used_by_tool_call': (ChatChunks(max_tokens=5, spec=WEATHER), with_token_ids([
        opening(), arguments('{"city": "Paris"}'), chunk_json(finish_reason='tool_calls'),
        '{"choices": [], "usage": {"completion_tokens": 5}}', DONE])),
    'tool_markup_in_text': (ChatChunks(spec=WEATHER), with_token_ids([
        chunk_json(delta={'content': '<tool_call>{"name": "get_weather"}</tool_call>'}, finish_reason='stop'), DONE])),
    'eof_before_done': (ChatChunks(), with_token_ids([TEXT])),
    'no_finish_reason': (ChatChunks(), with_token_ids([TEXT, DONE])),
    'unexpected_finish': (ChatChunks(), with_token_ids([TEXT, chunk_json(finish_reason='content_filter'), DONE])),
    'budget_exhausted': (ChatChunks(), with_token_ids([TEXT, chunk_json(finish_reason='length'), DONE])),
    'no_visible_text': (ChatChunks(), with_token_ids([STOP, DONE])),
    'finish_without_calls': (ChatChunks(), with_token_ids([TEXT, chunk_json(finish_reason='tool_calls'), DONE])),
    'calls_without_call_finish': (ChatChunks(spec=WEATHER), with_token_ids([
        opening(), arguments('{"city": "Paris"}'), STOP, DONE])),
    'text_not_tool_call': (ChatChunks(spec=stream_client.AnswerSpec(WEATHER.tools, 'required')),
                           with_token_ids([TEXT, STOP, DONE])),
    'unknown_tool': (ChatChunks(spec=WEATHER), with_token_ids([
        opening(name='nope'), arguments('{}'), chunk_json(finish_reason='tool_calls'), DONE])),
    'tool_arguments_not_json': (ChatChunks(spec=WEATHER), with_token_ids([
        opening(), arguments('{"city": '), chunk_json(finish_reason='tool_calls'), DONE])),
    'tool_arguments_schema': (ChatChunks(spec=WEATHER), with_token_ids([
        opening(), arguments('{}'), chunk_json(finish_reason='tool_calls'), DONE])),
    'answer_not_json': (ChatChunks(spec=CITY), with_token_ids([TEXT, STOP, DONE])),
    'length_tokens_differ': (stream_client.CompletionChunks('length', 8), with_token_ids([
        json.dumps({'choices': [{'index': 0, 'text': 'hi', 'finish_reason': 'length'}],
                    'usage': {'completion_tokens': 5}}), DONE])),
    'event_after_close': (ChatChunks(), with_token_ids([TEXT, STOP, TEXT, DONE])),
    'server_error_event': (ChatChunks(), with_token_ids([TEXT, '{"error": {"message": "boom"}}'])),
    'part_still_open': (stream_client.MessagesEvents(), [MESSAGE_START, TEXT_BLOCK, text_delta('hi'),
                                                         message_end()[-1]]),
}


def _call(arguments_text: str, name: str = 'get_weather', finish: str = 'tool_calls', spec=WEATHER) -> str | None:
    return kind_of_events(ChatChunks(spec=spec), [opening(name=name), arguments(arguments_text),
                                                  chunk_json(finish_reason=finish), DONE])


def _responses(*bodies: dict, spec=None) -> str | None:
    created = {'type': 'response.created', 'response': {'id': 'resp_1', 'status': 'in_progress'}}
    return kind_of_events(stream_client.ResponseEvents(spec=spec), responses_events(created, *bodies))


FUNCTION_ITEM = {'type': 'response.output_item.added', 'output_index': 0,
                 'item': {'type': 'function_call', 'id': 'fc_1', 'call_id': 'call_1', 'name': 'get_weather',
                          'arguments': ''}}

# One way to produce each kind of failure, through the code that reports it. Each row is
# (kind, a producer returning the kind that the client reported).
FAILURE_PRODUCERS = {
    'connect_failed': lambda: stream_client._classify(ConnectionRefusedError(111, 'refused'),
                                                      fake_exchange('CONNECT')).kind,
    'not_loopback': lambda: kind_raised(lambda: stream_client._check_plain_peer(
        types.SimpleNamespace(peer_ip='192.0.2.7', peer='192.0.2.7:80'), types.SimpleNamespace(host='x.test'))),
    'proxy_unreachable': lambda: stream_client._classify(ConnectionRefusedError(111, 'refused'),
                                                         fake_exchange('CONNECT', proxy=True)).kind,
    'proxy_closed': lambda: kind_raised(lambda: stream_client._open_tunnel(ScriptedSocket(),
                                                                           fake_exchange('PROXY', proxy=True))),
    'proxy_bad_answer': lambda: kind_raised(lambda: stream_client._open_tunnel(
        ScriptedSocket(b'HTTX/1.1 200 OK\r\n\r\n'), fake_exchange('PROXY', proxy=True))),
    'proxy_refused': lambda: kind_raised(lambda: stream_client._open_tunnel(
        ScriptedSocket(b'HTTP/1.1 407 Proxy Authentication Required\r\n\r\n'), fake_exchange('PROXY', proxy=True))),
    'proxy_extra_bytes': lambda: kind_raised(lambda: stream_client._open_tunnel(
        ScriptedSocket(b'HTTP/1.1 200 OK\r\n\r\nearly'), fake_exchange('PROXY', proxy=True))),
    'proxy_tunnel_failed': lambda: stream_client._classify(ConnectionResetError(104, 'reset'),
                                                           fake_exchange('PROXY', proxy=True)).kind,
    'certificate_invalid': lambda: stream_client._classify(_certificate_error(), fake_exchange('TLS')).kind,
    'tls_failed': lambda: stream_client._classify(_tls_error(), fake_exchange('TLS')).kind,
    'head_too_long': lambda: kind_of_response(SSE_HEAD + b'X-Long: ' + b'a' * 70_000),
    'unexpected_101': lambda: kind_of_response(b'HTTP/1.1 101 Switching Protocols\r\n\r\n'),
    'bad_status_line': lambda: kind_of_response(b'HTTX/1.1 200 OK\r\n\r\n'),
    'http_version': lambda: kind_of_response(b'HTTP/2.0 200 OK\r\n\r\n'),
    'bad_header_line': lambda: kind_of_response(SSE_HEAD + b'no colon here\r\n\r\n'),
    'unsupported_encoding': lambda: kind_of_response(SSE_HEAD + b'Content-Encoding: gzip\r\n\r\n'),
    'ambiguous_framing': lambda: kind_of_response(SSE_HEAD + b'Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n'),
    'http10_transfer_encoding': lambda: kind_of_response(b'HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n'
                                                         b'Transfer-Encoding: chunked\r\n\r\n'),
    'bad_content_length': lambda: kind_of_response(SSE_HEAD + b'Content-Length: five\r\n\r\n'),
    'content_type': lambda: kind_of_response(b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n{}'),
    'status_not_200': lambda: kind_of_response(b'HTTP/1.1 503 Busy\r\nContent-Length: 0\r\n\r\n'),
    'no_response_head': lambda: stream_client._classify(ConnectionResetError(104, 'reset'),
                                                        fake_exchange('HEADERS')).kind,
    'no_response': lambda: kind_of_response(b''),
    'eof_in_head': lambda: kind_of_response(b'HTTP/1.1 200 OK\r\n'),
    'stale_connection': lambda: stream_client._exchange_failure(
        ConnectionResetError(104, 'reset'), fake_exchange('HEADERS', reused=True, idle_s=2.0,
                                                          connection=types.SimpleNamespace(requests=2))).kind,
    'body_truncated': lambda: kind_of_response(SSE_HEAD + b'Content-Length: 10\r\n\r\ndata'),
    'eof_in_chunk': lambda: kind_of_response(CHUNKED + b'9\r\ndata'),
    'eof_in_trailer': lambda: kind_of_response(CHUNKED + chunked(ANSWER_EVENTS, end=b'0\r\nX-T: 1\r\n')),
    'no_last_chunk': lambda: kind_of_response(CHUNKED + chunked(ANSWER_EVENTS, end=b'')),
    'tls_truncated': lambda: kind_of_response(SSE_HEAD + b'\r\n' + ANSWER_EVENTS, incomplete_close=True),
    'body_overrun': lambda: kind_of_response(SSE_HEAD + b'Content-Length: 2\r\n\r\n: more\n\n'),
    'bad_chunk_size': lambda: kind_of_response(CHUNKED + b'zz\r\n'),
    'chunk_too_large': lambda: kind_of_response(CHUNKED + b'f' * 20 + b'\r\n'),
    'bad_chunk_extension': lambda: kind_of_response(CHUNKED + b'5;=\r\n'),
    'bad_chunk_end': lambda: kind_of_response(CHUNKED + b'1\r\n::\r\n'),
    'bad_line_end': lambda: kind_of_response(CHUNKED + b'5\n'),
    'chunk_line_too_long': lambda: kind_of_response(CHUNKED + b'5;' + b'a' * 5000),
    'trailer_too_long': lambda: kind_of_response(CHUNKED + b'0\r\n' + b'X-T: ' + b'a' * 4000 + b'\r\n' * 1
                                                 + (b'X-T: ' + b'a' * 4000 + b'\r\n') * 5),
    'bad_trailer_line': lambda: kind_of_response(CHUNKED + b'0\r\nno colon\r\n\r\n'),
    'connection_failed': lambda: stream_client._classify(ConnectionResetError(104, 'reset'),
                                                         fake_exchange('BODY')).kind,
    'unended_after_terminal': lambda: stream_client._timeout_failure(_done_but_unended()).kind,
    'line_too_long': lambda: kind_raised(lambda: Events().feed(b'x' * (MAX_LINE_CHARS + 1))),
    'event_too_long': lambda: with_bound('MAX_EVENT_CHARS', 1000, lambda: kind_raised(
        lambda: Events().feed((b'data: ' + b'x' * 600 + b'\n') * 2))),
    'invalid_utf8': lambda: kind_raised(lambda: Events().feed(b'data: \xff\n\n')),
    'eof_in_utf8': lambda: (lambda parser: (parser.feed('é'.encode()[:1]), parser.pending().kind)[1])(Events()),
    'eof_in_line': lambda: kind_of_response(SSE_HEAD + b'\r\ndata: {}'),
    'eof_in_event': lambda: kind_of_response(SSE_HEAD + b'\r\ndata: {}\n'),
    'malformed_json': lambda: kind_of_events(ChatChunks(), ['{']),
    'not_an_object': lambda: kind_of_events(ChatChunks(), ['[]']),
    'field_type': lambda: kind_of_events(ChatChunks(), [chunk_json(delta={'content': 5})]),
    'event_type_mismatch': lambda: kind_of_events(stream_client.MessagesEvents(), [('ping', '{"type": "pong"}')]),
    'sequence_number': lambda: kind_of_events(stream_client.ResponseEvents(), [
        ('response.created', '{"type": "response.created", "sequence_number": 1}')]),
    'event_after_terminal': lambda: kind_of_events(ChatChunks(), [TEXT, STOP, DONE, DONE]),
    'event_after_close': lambda: kind_of_events(ChatChunks(), [STOP, TEXT]),
    'event_out_of_order': lambda: kind_of_events(stream_client.MessagesEvents(), [TEXT_BLOCK]),
    'part_not_open': lambda: kind_of_events(stream_client.MessagesEvents(), [MESSAGE_START, text_delta('x')]),
    'part_still_open': lambda: kind_of_events(stream_client.MessagesEvents(), [MESSAGE_START, TEXT_BLOCK,
                                                                               message_end()[-1]]),
    'part_index_skips': lambda: kind_of_events(stream_client.MessagesEvents(), [
        MESSAGE_START, message_event('content_block_start', content_block={'type': 'text', 'text': ''}, index=1)]),
    'duplicate_part': lambda: _responses(FUNCTION_ITEM, FUNCTION_ITEM, spec=WEATHER),
    'duplicate_id': lambda: kind_of_events(ChatChunks(spec=WEATHER), [opening(), opening(index=1)]),
    'closing_copy_differs': lambda: _responses(
        FUNCTION_ITEM, {'type': 'response.function_call_arguments.delta', 'output_index': 0, 'item_id': 'fc_1',
                        'delta': '{}'},
        {'type': 'response.function_call_arguments.done', 'output_index': 0, 'item_id': 'fc_1',
         'arguments': '{"city": "Paris"}'}, spec=WEATHER),
    'unsupported_part': lambda: kind_of_events(stream_client.MessagesEvents(), [
        MESSAGE_START, message_event('content_block_start', content_block={'type': 'image'}, index=0)]),
    'delta_type': lambda: kind_of_events(stream_client.MessagesEvents(), [
        MESSAGE_START, TEXT_BLOCK, message_event('content_block_delta', index=0,
                                                 delta={'type': 'input_json_delta', 'partial_json': '{}'})]),
    'choices_not_one': lambda: kind_of_events(ChatChunks(), ['{"choices": [{}, {}]}']),
    'choice_index': lambda: kind_of_events(ChatChunks(), [chunk_json(index=1)]),
    'legacy_function_call': lambda: kind_of_events(ChatChunks(), [chunk_json(delta={'function_call': {'name': 'f'}})]),
    'text_in_tool_call': lambda: kind_of_events(ChatChunks(spec=WEATHER), [opening(), TEXT]),
    'no_tools_offered': lambda: kind_of_events(ChatChunks(), [opening()]),
    'bad_tool_call_delta': lambda: kind_of_events(ChatChunks(spec=WEATHER),
                                                  [chunk_json(delta={'tool_calls': [{'function': {}}]})]),
    'call_without_id': lambda: kind_of_events(ChatChunks(spec=WEATHER), [arguments('{}')]),
    'call_id_changed': lambda: kind_of_events(ChatChunks(spec=WEATHER), [opening(), arguments('{}', id='c9')]),
    'call_name_changed': lambda: kind_of_events(ChatChunks(spec=WEATHER), [
        opening(), chunk_json(delta={'tool_calls': [{'index': 0, 'function': {'name': 'get_time'}}]})]),
    'bad_usage': lambda: kind_of_events(ChatChunks(), ['{"choices": [], "usage": {"completion_tokens": -1}}']),
    'server_error_event': lambda: kind_of_events(ChatChunks(), ['{"error": {"message": "boom"}}']),
    'response_failed': lambda: _responses({'type': 'response.failed', 'response': {'status': 'failed'}}),
    'answer_too_long': lambda: kind_of_events(ChatChunks(), [chunk_json(delta={'content': 'x' * 1_048_577})]),
    'reasoning_too_long': lambda: kind_of_events(ChatChunks(), [chunk_json(delta={'reasoning': 'x' * 1_048_577})]),
    'eof_before_done': lambda: kind_of_events(ChatChunks(), [TEXT]),
    'no_finish_reason': lambda: kind_of_events(ChatChunks(), [TEXT, DONE]),
    'unexpected_finish': lambda: kind_of_events(ChatChunks(), [TEXT, chunk_json(finish_reason='content_filter'), DONE]),
    'budget_exhausted': lambda: kind_of_events(ChatChunks(), [TEXT, chunk_json(finish_reason='length'), DONE]),
    'length_tokens_differ': lambda: kind_of_events(stream_client.CompletionChunks('length', 8), [
        json.dumps({'choices': [{'index': 0, 'text': 'hi', 'finish_reason': 'length'}],
                    'usage': {'completion_tokens': 5}}), DONE]),
    'no_visible_text': lambda: kind_of_events(ChatChunks(), [STOP, DONE]),
    'finish_without_calls': lambda: kind_of_events(ChatChunks(), [TEXT, chunk_json(finish_reason='tool_calls'), DONE]),
    'calls_without_call_finish': lambda: _call('{"city": "Paris"}', finish='stop'),
    'tool_choice_none': lambda: _call('{"city": "Paris"}', spec=stream_client.AnswerSpec(WEATHER.tools, 'none')),
    'text_not_tool_call': lambda: kind_of_events(ChatChunks(spec=stream_client.AnswerSpec(WEATHER.tools, 'required')),
                                                 [TEXT, STOP, DONE]),
    'wrong_tool': lambda: _call('{}', finish='stop', spec=TWO_TOOLS),
    'unknown_tool': lambda: _call('{}', name='nope'),
    'tool_arguments_empty': lambda: _call(''),
    'tool_arguments_not_json': lambda: _call('{"city": '),
    'tool_arguments_not_object': lambda: _call('[]'),
    'tool_arguments_schema': lambda: _call('{}'),
    'answer_not_json': lambda: kind_of_events(ChatChunks(spec=CITY), [TEXT, STOP, DONE]),
    'answer_schema': lambda: kind_of_events(ChatChunks(spec=CITY), [chunk_json(delta={'content': '{"city": 3}'}),
                                                                    STOP, DONE]),
    'connect_timeout': lambda: stream_client._timeout_failure(fake_exchange('CONNECT')).kind,
    'proxy_timeout': lambda: stream_client._timeout_failure(fake_exchange('PROXY', proxy=True)).kind,
    'tls_timeout': lambda: stream_client._timeout_failure(fake_exchange('TLS')).kind,
    'headers_timeout': lambda: stream_client._timeout_failure(fake_exchange('HEADERS')).kind,
    'idle_timeout': lambda: stream_client._timeout_failure(fake_exchange('BODY')).kind,
    'deadline': lambda: stream_client._timeout_failure(fake_exchange('BODY', started_ago=10.0)).kind,
    'interrupted': lambda: stream_client._interruption(fake_exchange('BODY'), 'SIGINT').kind,
    'client_error': lambda: stream_client._classify(ValueError('a bug'), fake_exchange('BODY')).kind,
    'budget_used_by_tool_call': lambda: answer_problem_kind(ChatChunks(max_tokens=5, spec=WEATHER), [
        opening(), arguments('{"city": "Paris"}'), chunk_json(finish_reason='tool_calls'),
        '{"choices": [], "usage": {"completion_tokens": 5}}', '[DONE]']),
    'tool_markup_in_text': lambda: answer_problem_kind(ChatChunks(spec=WEATHER), [
        chunk_json(delta={'content': '<tool_call>{"name": "get_weather"}</tool_call>'}, finish_reason='stop'), '[DONE]']),
    'cross_check_differs': lambda: stream_client._cross_check_failure(
        {'comparable': True, 'same': False, 'token_ids': {'streamed': 3}, 'differences': ['the text differs']}).kind,
    'token_ids_invalid': lambda: kind_raised(lambda: ChatChunks().accept(chunk_json(token_ids='12'))),
    'too_many_token_ids': lambda: with_bound('_MAX_TOKEN_IDS', 2, lambda: kind_raised(
        lambda: ChatChunks().accept(chunk_json(token_ids=[1, 2, 3])))),
    'unstreamed_malformed': lambda: kind_raised(lambda: stream_client.unstreamed_answer('chat', b'[]')),
    'unstreamed_error': lambda: kind_raised(lambda: stream_client.unstreamed_answer(
        'chat', b'{"error": {"message": "no such model", "type": "NotFoundError", "code": 404}}')),
    'unstreamed_too_long': lambda: with_bound('_MAX_UNSTREAMED_BODY', 4, lambda: unstreamed_error_kind(
        b'HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n0123456789')),
}


class FailureKindTests(unittest.TestCase):
    """The table of failures: every kind is produced by the code that reports it, in its layer."""

    def test_every_kind_in_the_table_is_produced(self):
        self.assertEqual(set(FAILURE_PRODUCERS), set(stream_client.FAILURE_KINDS))
        for kind, produce in FAILURE_PRODUCERS.items():
            with self.subTest(kind):
                self.assertEqual(produce(), kind)

    def test_a_kind_belongs_to_one_layer(self):
        for kind, (layer, meaning) in stream_client.FAILURE_KINDS.items():
            with self.subTest(kind):
                self.assertIn(layer, stream_client.LAYERS)
                self.assertRegex(kind, r'^[a-z0-9]+(_[a-z0-9]+)*$')
                self.assertTrue(meaning)
        with self.assertRaises(ValueError):
            StreamError('http', 'x', kind='eof_before_done')  # a kind of another layer
        with self.assertRaises(ValueError):
            StreamError('http', 'x', kind='no_such_kind')

    def test_the_failures_doc_shows_the_table_row_for_row(self):
        text = (HERE / 'docs' / 'failures.md').read_text()
        rows = re.findall(r'^\| `(\w+)` \| `([\w-]+)` \| (.+) \|$', text, re.M)
        self.assertEqual(rows, [(kind, layer, meaning) for kind, (layer, meaning) in stream_client.FAILURE_KINDS.items()])

    def test_an_unknown_event_type_is_skipped_and_listed(self):
        for api, events in (('messages', [MESSAGE_START, message_event('content_block_start', index=0, content_block={
                                'type': 'text', 'text': '', 'citations': []}), text_delta('hi'),
                                message_event('thinking_about_it', note='new in some version'),
                                message_event('content_block_delta', index=0, delta={
                                    'type': 'citations_delta', 'citation': {'type': 'char_location'}}),
                                message_event('ping')] + message_end()),
                            ('responses', capture_events(R2)[:5] + [('response.new_thing', json.dumps(
                                {'type': 'response.new_thing', 'sequence_number': 5}))]
                             + [with_data(event, sequence_number=number + 1)
                                for number, event in enumerate(capture_events(R2)[5:], 5)])):
            with self.subTest(api):
                validator = stream_client.VALIDATORS[api]()
                self.assertIsNone(kind_of_events(validator, events))
                self.assertEqual(validator.fields()['skipped_events'],
                                 ['thinking_about_it' if api == 'messages' else 'response.new_thing'])

    def test_judge_gives_a_verdict_on_a_reader_with_no_head(self):
        for fed, kind in ((b'', 'no_response'), (b'HTTP/1.1 200 OK\r\n', 'eof_in_head'),
                          (b'HTTP/1.1 503 Busy\r\nContent-Length: 9\r\n\r\nbusy', 'status_not_200')):
            with self.subTest(fed=fed):
                reader = stream_client.ResponseReader(ChatChunks())
                reader.feed(fed)
                verdict = stream_client.judge(reader)  # no eof(): judged as if it ended here
                self.assertEqual((verdict.ok, verdict.kind, verdict.layer),
                                 (False, kind, stream_client.FAILURE_KINDS[kind][0]))

    def test_every_failed_record_carries_its_kind(self):
        broken, ok = run_fixture('broken'), run_fixture('ok')
        self.assertEqual((broken['ok'], broken['error_layer'], broken['error_kind']),
                         (False, 'application', 'eof_before_done'))
        self.assertEqual((ok['ok'], ok['error_kind'], ok['skipped_events']), (True, None, []))


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
    break) and at a stride through the rest; every byte in the benchmarks' sweep."""
    ends = {at + shift for at, byte in enumerate(raw) if byte in b'\r\n' for shift in (0, 1)}
    return sorted(at for at in ends | set(range(1, len(raw), 61)) if 0 < at < len(raw))


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

    def test_the_suite_is_whole(self):
        self.assertGreaterEqual(len(HOSTILE_CASES), 45)
        self.assertEqual({case['file'] for case in HOSTILE_CASES}, {path.name for path in (HOSTILE / 'cases').glob('*.http')})
        not_ok = {case['file'][:2] for case in self.single_runs() if not case['expect_ok']}
        self.assertEqual(not_ok, set(HOSTILE_KINDS))

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
        # a load's responses are read by the reactor (Linux), not by the run's own thread
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


class ModuleShapeTests(unittest.TestCase):
    """What a maintainer relies on: ``__all__`` names exactly the public API (as httpx's
    tests/test_exported_members.py checks), and the map in the docstring stays true."""

    def test_all_names_exactly_the_public_names(self):
        tree = ast.parse(Path(CLIENT).read_text(encoding='utf-8'))
        defined = {node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))}
        defined |= {target.id for node in tree.body if isinstance(node, (ast.Assign, ast.AnnAssign))
                    for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
                    if isinstance(target, ast.Name)}
        public = sorted(name for name in defined if not name.startswith('_'))
        self.assertEqual(public, sorted(stream_client.__all__))  # a new name is public only when it says so
        self.assertEqual(len(stream_client.__all__), len(set(stream_client.__all__)))
        for name in stream_client.__all__:
            self.assertTrue(getattr(stream_client, name).__doc__ or name.isupper(), f'{name} has no docstring')

    def test_the_map_names_every_module_in_the_order_of_the_layers(self):
        doc = stream_client.__doc__
        self.assertEqual(tuple(re.findall(r'^(_\w+) ', doc, re.M)), AMALGAMATE.MODULES)
        banners = re.findall(r'^# ==== src/stream_client/(\w+)\.py ====$', Path(CLIENT).read_text(encoding='utf-8'), re.M)
        self.assertEqual(tuple(banners), AMALGAMATE.MODULES + ('__main__',))
        named = set(re.findall(r'``(\w+)(?:\(\))?``', doc))
        for validator in stream_client.VALIDATORS.values():
            self.assertIn(validator.__name__, named)
        instances = (stream_client.ChatChunks(), stream_client.ResponseReader(stream_client.ChatChunks()))
        for name in named - {'__all__'}:
            with self.subTest(name=name):  # every name the docstring gives exists, so none goes stale
                self.assertTrue(hasattr(stream_client, name) or any(hasattr(thing, name) for thing in instances), name)


@unittest.skipUnless(SOURCE.is_dir(), 'src/ is not beside this file (a copy of the shipped files)')
class LayerTests(unittest.TestCase):
    """The package in src/ is layered, and stream_client.py is what it builds (tools/amalgamate.py)."""

    def test_each_module_imports_only_from_modules_below_it(self):
        for position, name in enumerate(AMALGAMATE.MODULES):
            tree = ast.parse((SOURCE / f'{name}.py').read_text(encoding='utf-8'))
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.level:
                    with self.subTest(module=name, imports=node.module):
                        self.assertIn(node.module, AMALGAMATE.MODULES[:position])
                elif isinstance(node, (ast.Import, ast.ImportFrom)):  # else only the standard library
                    for module in [alias.name for alias in node.names] if isinstance(node, ast.Import) else [node.module]:
                        self.assertIn(module.split('.')[0], sys.stdlib_module_names, f'{name} imports {module}')

    def test_no_module_is_over_800_lines(self):
        for path in SOURCE.glob('*.py'):
            with self.subTest(path.name):
                self.assertLessEqual(path.read_text(encoding='utf-8').count('\n'), 800)

    def test_the_committed_file_is_what_the_package_builds(self):
        built = AMALGAMATE.text_of(AMALGAMATE.build(AMALGAMATE.load_package()))
        self.assertEqual(AMALGAMATE.first_difference(built, Path(CLIENT).read_text(encoding='utf-8')), None)
        self.assertTrue(built.startswith('# Generated by python3 tools/amalgamate.py from src/stream_client/'))

    def test_a_stale_file_fails_the_check_with_the_command_to_run(self):
        with tempfile.TemporaryDirectory() as tmp:
            stale = Path(tmp) / 'stream_client.py'
            stale.write_text(Path(CLIENT).read_text(encoding='utf-8').replace('class Events:', 'class Events:  # edited'))
            err = io.StringIO()
            with mock.patch.object(AMALGAMATE, 'TARGET', stale), contextlib.redirect_stderr(err), \
                    contextlib.redirect_stdout(io.StringIO()):
                self.assertEqual(AMALGAMATE.main(['--check']), 1)
        line = Path(CLIENT).read_text(encoding='utf-8').split('\n').index('class Events:') + 1
        self.assertIn(f'first at line {line} (src/stream_client/_sse.py:', err.getvalue())
        self.assertIn('run python3 tools/amalgamate.py and commit both', err.getvalue())

    def test_where_leads_a_line_of_the_file_back_to_its_line_in_src(self):
        lines = Path(CLIENT).read_text(encoding='utf-8').split('\n')
        for text in ('class Events:', 'def judge(reader: ResponseReader, failure: StreamError | None = None, '
                                      'cross_check: dict | None = None) -> Verdict:', 'def main(argv: list[str] | None = None) -> int:'):
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                self.assertEqual(AMALGAMATE.main(['--where', str(lines.index(text) + 1)]), 0)
            path, line = out.getvalue().strip().rsplit(':', 1)
            self.assertEqual((HERE / path).read_text(encoding='utf-8').split('\n')[int(line) - 1], text)

    def test_the_generator_refuses_what_one_file_cannot_hold(self):
        cases = {
            'an import from a later module': ({'_a': 'from ._b import B\n', '_b': 'B = 1\n'}, '_a.py:1: imports ._b, '
                                              'which comes later'),
            'a name defined in two modules': ({'_a': 'A = 1\n', '_b': 'A = 2\n'}, '_b.py:1: A is defined in '
                                              'src/stream_client/_a.py too'),
            'a name that resolves nowhere': ({'_a': 'A = 1\n', '_b': 'def f():\n    return A\n'},
                                             '_b.py:2: A resolves nowhere'),
            'an imported name its module lacks': ({'_a': 'A = 1\n', '_b': 'from ._a import C\n'},
                                                  '_b.py:1: C is not defined at the top of src/stream_client/_a.py'),
            'a module the order does not name': ({'_a': '', '_b': '', '_c': ''}, '_c.py is not in MODULES'),
        }
        for case, (files, message) in cases.items():
            with self.subTest(case), tempfile.TemporaryDirectory() as tmp:
                for name, text in {'__init__': '"""The map."""\n', '__main__': '', **files}.items():
                    (Path(tmp) / f'{name}.py').write_text(text)
                with mock.patch.object(AMALGAMATE, 'MODULES', ('_a', '_b')), \
                        self.assertRaises(AMALGAMATE.AmalgamationError) as caught:
                    AMALGAMATE.build(AMALGAMATE.load_package(Path(tmp)))
                self.assertIn(message, str(caught.exception))


def github_anchor(heading: str) -> str:
    """The #anchor GitHub gives a Markdown heading."""
    return re.sub(r'[^\w\- ]', '', heading.strip().lower()).replace(' ', '-')


class DocsTests(unittest.TestCase):
    """The manual in docs/ stays whole: every flag and fixture mode is documented, and no link is dead."""

    PAGES = [HERE / 'README.md', *sorted((HERE / 'docs').glob('*.md'))]

    def docs_text(self) -> str:
        return '\n'.join(page.read_text(encoding='utf-8') for page in self.PAGES[1:])

    def test_every_flag_that_help_prints_is_in_the_docs(self):
        docs = self.docs_text()
        for name in ('stream_client.py', 'fixture_server.py'):
            usage = subprocess.run(script_command(str(HERE / name), '--help'), capture_output=True, text=True, timeout=30,
                                   env=script_env()).stdout
            flags = set(re.findall(r'(?<![\w-])(--[a-z][a-z-]*)', re.sub(r'-\n\s+', '-', usage)))
            self.assertGreater(len(flags), 10)
            for flag in sorted(flags):
                with self.subTest(script=name, flag=flag):
                    self.assertTrue(re.search(rf'(?<![\w-]){re.escape(flag)}(?![a-z-])', docs), f'{flag} is not in docs/')

    def test_every_fixture_mode_is_in_the_docs(self):
        docs = self.docs_text()
        for mode in fixture_server.CHOICES:
            with self.subTest(mode=mode):
                self.assertIn(f'| `{mode}` |', docs)  # a row of the fixture's table of modes

    def test_every_relative_link_resolves(self):
        anchors = {}
        for page in self.PAGES:
            text = re.sub(r'```.*?```', '', page.read_text(encoding='utf-8'), flags=re.S)
            anchors[page.resolve()] = {github_anchor(heading) for heading in re.findall(r'^#+ (.+)$', text, re.M)}
        links = 0
        for page in self.PAGES:
            text = re.sub(r'```.*?```', '', page.read_text(encoding='utf-8'), flags=re.S)
            for target in re.findall(r'\]\(([^)\s]+)\)', text):
                if re.match(r'[a-z]+:', target):
                    continue  # not relative
                links += 1
                path, _, anchor = target.partition('#')
                destination = (page.parent / path).resolve() if path else page.resolve()
                with self.subTest(page=page.name, link=target):
                    self.assertTrue(destination.exists(), f'{page.name} links to {target}, which does not exist')
                    if anchor and destination.suffix == '.md':
                        self.assertIn(anchor, anchors.get(destination, set()), f'{page.name}: no heading #{anchor}')
        self.assertGreater(links, 20)

    def test_each_doc_opens_with_what_it_is_for_and_who_needs_it(self):
        for page in self.PAGES[1:]:
            with self.subTest(page=page.name):
                title, blank, first, *_ = page.read_text(encoding='utf-8').splitlines()
                self.assertTrue(title.startswith('# ') and blank == '', page.name)
                self.assertRegex(first, r'^For (anyone|everyone)')

    def test_the_readme_stays_short_and_its_test_command_is_what_ci_runs(self):
        readme = (HERE / 'README.md').read_text(encoding='utf-8')
        self.assertLessEqual(len(readme.splitlines()), 250)
        self.assertTrue(readme.split('```sh\n')[1].startswith('python3 stream_client.py --fixture ok --output '
                                                               'fixture-ok.json\npython3 -m unittest\n```'))
        self.assertIn('"$python" -m unittest 2>&1', (HERE / '.ci' / 'run').read_text())

class CopiedAloneTests(unittest.TestCase):
    """stream_client.py copied alone into an empty folder, run by an isolated Python (-I: nothing on the
    path but the standard library), as on a GPU host: everything but --fixture works."""

    def setUp(self) -> None:
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.dir = Path(tmp.name)
        (self.dir / 'stream_client.py').write_bytes(Path(CLIENT).read_bytes())

    def alone(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, '-I', 'stream_client.py', *args], cwd=self.dir, capture_output=True,
                              text=True, timeout=60, stdin=subprocess.DEVNULL, env={'PATH': os.environ['PATH']})

    def test_help_a_run_a_load_and_its_summary(self):
        self.assertEqual(sorted(path.name for path in self.dir.iterdir()), ['stream_client.py'])
        done = self.alone('--help')
        self.assertEqual((done.returncode, done.stderr), (0, ''))
        self.assertIn('--fixture MODE', done.stdout)
        with Fixture() as fixture:
            one = self.alone('--url', fixture.url, '--model', 'm', '--output', 'run.json')
            self.assertEqual(one.returncode, 0, one.stderr)
            self.assertTrue(json.loads((self.dir / 'run.json').read_text())['ok'])
            load = self.alone('--url', fixture.url, '--model', 'm', '--runs', '4', '--concurrency', '2',
                              '--output', 'load.jsonl')
            self.assertEqual(load.returncode, 0, load.stderr)
        self.assertEqual(json.loads(load.stdout)['ok'], 4)
        summary = self.alone('--summary', 'load.jsonl')
        self.assertEqual(summary.returncode, 0, summary.stderr)
        self.assertEqual(json.loads(summary.stdout)['runs'], 4)

    def test_fixture_without_its_file_is_one_line_and_exit_2(self):
        done = self.alone('--fixture', 'ok', '--output', 'run.json')
        self.assertEqual((done.returncode, done.stdout), (2, ''))
        self.assertRegex(done.stderr, r'^stream_client\.py: error: --fixture needs fixture_server\.py beside '
                                      r'stream_client\.py .*\n$')
        self.assertFalse((self.dir / 'run.json').exists())
        (self.dir / 'fixture_server.py').write_bytes((HERE / 'fixture_server.py').read_bytes())
        done = self.alone('--fixture', 'ok', '--output', 'run.json')  # beside it, -I or not, it is found
        self.assertEqual(done.returncode, 0, done.stderr)



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
    'messages: a second message_delta says another stop_reason': ('messages', TEXT_MESSAGE + message_end()[:2] + [
        message_event('message_delta', delta={'stop_reason': 'max_tokens'}), message_event('message_stop')],
        'closing_copy_differs'),
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


class GoodputTests(unittest.TestCase):
    """Goodput: runs that are ok and within every --slo bound; sweeps of open-loop steps to saturation."""

    def setUp(self) -> None:
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.dir = Path(self.tmp.name)

    def records(self, name: str) -> list[dict]:
        return [json.loads(line) for line in (self.dir / name).read_text().splitlines()]

    def interrupted_load(self, name: str, *args: str, after: int) -> tuple[int, dict, str, list[dict]]:
        """A load of the command line stopped by SIGINT once ``after`` records are in its file: its exit
        status, its summary, its stderr and its records."""
        with Fixture('ok', delay=0.05) as fixture:
            output = self.dir / name
            process = subprocess.Popen(script_command(CLIENT, '--url', fixture.url, '--model', 'm', *args,
                                              '--output', str(output)), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                       text=True, env=script_env())
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and (not output.exists() or output.read_text().count('\n') < after):
                time.sleep(0.05)
            process.send_signal(signal.SIGINT)
            stdout, stderr = process.communicate(timeout=30)
        return process.returncode, json.loads(stdout), stderr, self.records(name)

    def test_goodput_counts_exactly_the_ok_runs_within_every_bound(self):
        with Fixture('mixed', seed=11, delay=0.01) as fixture:
            done = run_cli('--url', fixture.url, '--model', 'm', '--runs', '40', '--concurrency', '8', '--idle', '2',
                           '--slo', 'first_text_ms=30000', '--slo', 'max_event_gap_ms=30000',
                           '--output', 'mixed.jsonl', '--quiet', cwd=self.tmp.name, timeout=90)
        summary, records = json.loads(done.stdout), self.records('mixed.jsonl')
        bounds = (('first_text_ms', 30000), ('max_event_gap_ms', 30000))
        good = [r for r in records if r['ok'] and stream_client._meets_slos(r, bounds)]
        self.assertEqual(summary['good'], len(good))
        self.assertLess(summary['good'], summary['runs'])  # mixed serves failures too: some runs are not good
        self.assertEqual(summary['slo_attainment'], round(len(good) / len(records), 4))
        self.assertEqual(summary['slo'], {'first_text_ms': 30000.0, 'max_event_gap_ms': 30000.0})
        first_chunk = [r for r in records if 200 <= ((r['http'] or {}).get('status') or 0) < 300
                       and r['first_text_ms'] is not None]
        self.assertEqual(summary['first_chunk_good'], len(first_chunk))
        self.assertGreater(summary['first_chunk_good'], summary['good'])  # cut streams after a first chunk
        # a tighter bound read back from the same evidence: fewer good runs, the same runs
        tight = json.loads(run_cli('--summary', 'mixed.jsonl', '--slo', 'first_text_ms=0.001', cwd=self.tmp.name).stdout)
        self.assertEqual((tight['good'], tight['runs']), (0, summary['runs']))
        self.assertEqual(json.loads(run_cli('--summary', 'mixed.jsonl', cwd=self.tmp.name).stdout), summary)

    def test_a_cut_stream_is_never_good_however_fast_it_was(self):
        for mode in ('broken', 'no-done', 'truncated'):
            with self.subTest(mode=mode), Fixture(mode) as fixture:
                done = run_cli('--url', fixture.url, '--model', 'm', '--runs', '6', '--concurrency', '3', '--idle', '2',
                               '--slo', 'first_text_ms=60000', '--slo', 'duration_ms=60000',
                               '--output', f'{mode}.jsonl', '--quiet', cwd=self.tmp.name, timeout=60)
                summary = json.loads(done.stdout)
                self.assertEqual((summary['ok'], summary['good'], summary['goodput_per_s']), (0, 0, 0.0))
                self.assertEqual(summary['first_chunk_good'], 6)  # what a first-chunk tool reports

    def test_a_bound_on_a_figure_the_run_lacks_is_not_met(self):
        ok = {'ok': True, 'first_text_ms': 10.0, 'duration_ms': 50.0, 'mean_event_gap_ms': None,
              'max_event_gap_ms': None}
        self.assertTrue(stream_client._meets_slos(ok, (('max_event_gap_ms', 5.0),)))  # one content event: no gap
        self.assertFalse(stream_client._meets_slos({**ok, 'first_text_ms': None}, (('max_event_gap_ms', 5.0),)))
        self.assertFalse(stream_client._meets_slos({**ok, 'first_text_ms': None}, (('first_text_ms', 5.0),)))
        self.assertFalse(stream_client._meets_slos(ok, (('duration_ms', 49.9),)))
        self.assertTrue(stream_client._meets_slos(ok, (('duration_ms', 50.0),)))

    def test_the_saturation_step_is_the_last_under_capacity_and_says_what_failed_next(self):
        def step(rate, attainment, achieved=None, scheduled=None):
            return {'rate': rate, 'slo_attainment': attainment, 'achieved_rate': rate if achieved is None else achieved,
                    'scheduled_rate': rate if scheduled is None else scheduled}
        cases = [([step(1, 1.0), step(2, 0.995), step(4, 0.9), step(8, 1.0)], (2, 4, 'attainment 0.9')),
                 ([step(1, 1.0), step(2, 1.0, achieved=1.89)], (1, 2, '1.89 runs/s started')),
                 ([step(1, 1.0), step(2, 1.0, achieved=1.91)], (2, None, 'every step met the target')),
                 ([step(1, 0.5)], (None, 1, 'attainment 0.5')),
                 ([step(1, None)], (None, 1, 'attainment None'))]
        for steps, (rate, exceeded, why) in cases:
            with self.subTest(steps=steps):
                found = stream_client._saturation_step(steps, 0.99)
                self.assertEqual((found['rate'], found['exceeded_at']), (rate, exceeded))
                self.assertIn(why, found['why'])

    def test_the_schedule_of_a_timed_step_is_computed_in_advance(self):
        self.assertEqual(stream_client._scheduled_runs(4, 'constant', 0, 1.0), 4)
        self.assertEqual(stream_client._scheduled_runs(4, 'constant', 0, 1.01), 5)
        settings = stream_client.LoadSettings(runs=stream_client._scheduled_runs(50, 'poisson', 3, 2.0), rate=50,
                                              seed=3, duration=2.0)
        offsets = list(stream_client.arrival_offsets(settings))
        self.assertTrue(offsets and max(offsets) < 2.0)
        self.assertEqual(len(offsets), settings.runs)
        longer = list(stream_client.arrival_offsets(dataclasses.replace(settings, runs=settings.runs + 1)))
        self.assertGreaterEqual(longer[-1], 2.0)  # the next arrival falls outside the duration

    def test_a_sweep_names_the_step_past_a_server_of_known_capacity(self):
        # The server answers one request at a time, each in at least 7 fixture delays of 10 ms: a capacity
        # of at most 14 runs/s. At 2 runs/s nothing waits; at 40 runs/s run k waits at least 45k ms, so
        # from the twelfth run on every run is past the 500 ms bound: 8 of the 20 at least.
        one_at_a_time = threading.Lock()
        answer = fixture_server.Handler._answer

        def answer_alone(handler, *plan) -> None:
            with one_at_a_time:
                answer(handler, *plan)
        with mock.patch.object(fixture_server.Handler, '_answer', answer_alone), Fixture('ok', delay=0.01) as fixture:
            done = run_cli('--url', fixture.url, '--model', 'm', '--rates', '40,2', '--duration', '0.5',
                           '--arrivals', 'constant', '--slo', 'first_text_ms=500', '--deadline', '30', '--idle', '30',
                           '--output', 'sweep.jsonl', '--report', 'sweep.html', '--quiet', cwd=self.tmp.name,
                           timeout=120)
        self.assertIn(done.returncode, (0, 1), done.stderr)
        summary, records = json.loads(done.stdout), self.records('sweep.jsonl')
        self.assertEqual([step['rate'] for step in summary['steps']], [2.0, 40.0])
        self.assertEqual([step['scheduled_runs'] for step in summary['steps']], [1, 20])
        self.assertEqual({(r['load']['step'], r['load']['rate']) for r in records}, {(0, 2.0), (1, 40.0)})
        self.assertEqual((summary['saturation_rate'], summary['saturation']['exceeded_at']), (2.0, 40.0))
        self.assertIn('under the target 0.99', summary['saturation']['why'])
        self.assertEqual(sum(step['good'] for step in summary['steps']), summary['good'])
        self.assertEqual(json.loads(run_cli('--summary', 'sweep.jsonl', cwd=self.tmp.name).stdout), summary)
        page = (self.dir / 'sweep.html').read_text()
        self.assertIn('<h2>Sweep</h2>', page)
        self.assertIn('up to 2 runs/s', page)

    def test_a_step_whose_runs_cannot_start_on_time_is_past_capacity(self):
        # One run in flight at a time, each at least 7 fixture delays of 10 ms long: at most about 14 starts
        # per second, under 95% of the 20 per second scheduled, however fast the machine.
        with Fixture('ok', delay=0.01) as fixture:
            done = run_cli('--url', fixture.url, '--model', 'm', '--rates', '20', '--duration', '1', '--concurrency',
                           '1', '--arrivals', 'constant', '--output', 'late.jsonl', '--quiet', cwd=self.tmp.name,
                           timeout=120)
        summary = json.loads(done.stdout)
        step = summary['steps'][0]
        self.assertEqual((step['scheduled_runs'], step['runs'], step['ok']), (20, 20, 20))
        self.assertLess(step['achieved_rate'], 0.95 * step['scheduled_rate'])
        self.assertEqual((summary['saturation_rate'], summary['saturation']['exceeded_at']), (None, 20.0))
        self.assertIn('runs/s started', summary['saturation']['why'])

    def test_ctrl_c_in_a_sweep_keeps_every_started_run_and_the_steps_done(self):
        status, summary, stderr, records = self.interrupted_load('sweep.jsonl', '--rates', '4,8', '--duration', '5',
                                                                 after=3)
        self.assertEqual(status, 130, stderr)
        self.assertEqual(summary['runs'], len(records))
        self.assertEqual([step['rate'] for step in summary['steps']], [4.0])  # the second step never started
        self.assertLess(len(records), summary['steps'][0]['scheduled_runs'])

    def test_a_cancel_calls_its_hooks_once_at_once(self):
        cancel, called = stream_client.Cancel(), []
        cancel.on_cancel(lambda reason: called.append(('before', reason)))
        gone = lambda reason: called.append(('forgotten', reason))  # noqa: E731
        cancel.on_cancel(gone)
        cancel.forget(gone)
        cancel.cancel('SIGTERM')
        cancel.cancel('SIGINT')  # a second cancel changes nothing
        self.assertEqual(called, [('before', 'SIGTERM')])
        cancel.on_cancel(lambda reason: called.append(('after', reason)))
        self.assertEqual(called, [('before', 'SIGTERM'), ('after', 'SIGTERM')])

    def test_a_spread_load_tells_its_workers_before_the_cancel_returns(self):
        server = subprocess.Popen(script_command(FIXTURE_SCRIPT, '--port', '0', '--mode', 'stall'),
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=script_env())
        self.addCleanup(lambda: (server.kill(), server.communicate()))
        url = server.stdout.readline().split()[-1]
        records, cancel, told, listening = [], stream_client.Cancel(), [], threading.Event()
        write, on_cancel = os.write, cancel.on_cancel

        def watched_write(fd: int, data: bytes) -> int:
            if data.startswith(b'SIGINT'):
                told.append(data)
            return write(fd, data)

        def watched_on_cancel(hook) -> None:
            on_cancel(hook)
            listening.set()
        with mock.patch.object(os, 'write', watched_write), mock.patch.object(cancel, 'on_cancel', watched_on_cancel):
            load = threading.Thread(target=stream_client.run_load, args=(
                [stream_client.prepare(url, 'm', 'p', idle=30)],
                stream_client.LoadSettings(runs=40, concurrency=4, processes=2), records.append, cancel))
            load.start()
            self.assertTrue(listening.wait(30))  # the workers are forked, and the load waits for its cancel
            cancel.cancel('SIGINT')
            self.assertEqual(told, [b'SIGINT'.ljust(16) * 2])  # written by cancel() itself, not later
            load.join(30)
        self.assertFalse(load.is_alive())
        self.assertLessEqual({record['error_layer'] for record in records}, {'interrupted'})  # stalled: only the cancel ends them

    def test_telling_workers_that_have_all_ended_is_no_error(self):
        read, write = os.pipe()
        os.close(read)  # every worker has ended: EPIPE
        try:
            stream_client._tell_workers(write, 'SIGINT', 2)
        finally:
            os.close(write)

    def test_a_spread_load_forks_every_worker_before_it_starts_a_thread(self):
        # A fork copies only the thread that calls it; a lock another thread holds stays locked in the child.
        forked, fork = [], os.fork

        def watched_fork() -> int:
            forked.append(set(threading.enumerate()))
            return fork()
        server = subprocess.Popen(script_command(FIXTURE_SCRIPT, '--port', '0', '--delay', '0.002'),
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=script_env())
        self.addCleanup(lambda: (server.kill(), server.communicate()))
        url = server.stdout.readline().split()[-1]  # a server in a process of its own: no thread of it here
        records, before = [], set(threading.enumerate())
        with mock.patch.object(os, 'fork', watched_fork):
            stream_client.run_load([stream_client.prepare(url, 'm', 'p')],
                                   stream_client.LoadSettings(runs=6, concurrency=3, processes=3), records.append,
                                   stream_client.Cancel())
        self.assertEqual(sorted(record['run'] for record in records), list(range(6)))
        self.assertEqual(len(forked), 3)
        for threads in forked:  # threads of earlier tests may end meanwhile; none may begin
            self.assertLessEqual(threads, before)

    def test_a_load_spread_over_processes_is_counted_exactly_in_one_file(self):
        layers = {mode: row.verdict.error_layer for mode, row in FixtureVerdictTests.EXPECTED.items()}
        with Fixture('mixed', seed=4, delay=0.005) as fixture:
            done = run_cli('--url', fixture.url, '--model', 'm', '--runs', '45', '--concurrency', '6', '--processes', '3',
                           '--idle', '2', '--output', 'spread.jsonl', '--quiet', cwd=self.tmp.name, timeout=90)
            served = fixture.instance.schedule.served
        records, summary = self.records('spread.jsonl'), json.loads(done.stdout)
        self.assertEqual(sorted(record['run'] for record in records), list(range(45)))
        self.assertEqual({record['load']['id'] for record in records} | {record['load']['processes'] for record in records},
                         {records[0]['load']['id'], 3})
        expected = collections.Counter()
        for mode, count in served.items():
            if layers[mode]:
                expected[layers[mode]] += count
        self.assertEqual(summary['not_ok_by_layer'], dict(expected))
        self.assertEqual((summary['runs'], summary['ok']), (45, served['ok']))

    def test_the_runs_of_a_spread_load_run_in_other_processes(self):
        # _run() is wrapped before the fork, so each worker's records say which process ran them.
        real_run = stream_client._run

        def run_and_say_where(*args, **kwargs):
            return {**real_run(*args, **kwargs), 'pid': os.getpid()}
        records: list[dict] = []
        with Fixture('ok') as fixture, mock.patch.object(stream_client, "_run", run_and_say_where):
            requests = [stream_client.prepare(fixture.url, 'm', 'p')]
            stream_client.run_load(requests, stream_client.LoadSettings(runs=12, concurrency=4, processes=2),
                                   records.append, stream_client.Cancel())
        self.assertEqual(sorted(record['run'] for record in records), list(range(12)))
        by_pid = collections.defaultdict(set)
        for record in records:
            by_pid[record['pid']].add(record['run'] % 2)
        self.assertNotIn(os.getpid(), by_pid)
        self.assertEqual(sorted(by_pid.values(), key=min), [{0}, {1}])  # each process its share of the runs

    def test_ctrl_c_in_a_spread_load_keeps_one_valid_line_per_started_run(self):
        status, summary, stderr, records = self.interrupted_load('spread.jsonl', '--runs', '200', '--concurrency', '4',
                                                                 '--processes', '2', after=6)
        self.assertEqual(status, 130, stderr)
        self.assertEqual(len({record['run'] for record in records}), len(records))
        self.assertLess(len(records), 200)
        interrupted = [record for record in records if record['error_layer'] == 'interrupted']
        self.assertTrue(interrupted)
        self.assertTrue(all('SIGINT' in record['error'] for record in interrupted))
        self.assertEqual((summary['runs'], summary['planned_runs']), (len(records), 200))

    def test_sweep_and_slo_flags_that_do_not_fit_exit_2_with_one_line(self):
        cases = {'unknown figure': ['--runs', '2', '--slo', 'ttft=100'], 'no bound': ['--runs', '2', '--slo', 'duration_ms'],
                 'negative bound': ['--runs', '2', '--slo', 'duration_ms=-5'], 'bound twice':
                 ['--runs', '2', '--slo', 'duration_ms=5', '--slo', 'duration_ms=6'],
                 'negative rate': ['--rates', '2,-1', '--duration', '1'], 'zero rate': ['--rates', '0', '--duration', '1'],
                 'duplicate rate': ['--rates', '2,4,2', '--duration', '1'], 'not a rate': ['--rates', '2,x', '--duration', '1'],
                 'duration with runs': ['--rate', '2', '--duration', '1', '--runs', '3'],
                 'rates without duration': ['--rates', '1,2'], 'rates and rate': ['--rates', '1,2', '--rate', '3', '--duration', '1'],
                 'duration without a rate': ['--duration', '1'], 'negative duration': ['--rate', '2', '--duration', '-1'],
                 'target above 1': ['--runs', '2', '--slo-target', '1.5'], 'slo on one run': ['--slo', 'duration_ms=5'],
                 'no processes': ['--runs', '2', '--processes', '0'], 'processes on one run': ['--processes', '2']}
        output = str(self.dir / 'run.jsonl')
        for name, args in cases.items():
            with self.subTest(name):  # in this process: each is refused before a fixture starts or a file is made
                with contextlib.redirect_stderr(io.StringIO()) as stderr, mock.patch('signal.signal'):
                    status = stream_client.main(['--fixture', 'ok', '--output', output, *args])
                self.assertEqual((status, stderr.getvalue().count('\n')), (2, 1), stderr.getvalue())
                self.assertFalse(os.path.exists(output))



HOSTILE_34 = HERE / 'testdata' / 'hostile-34'


class HostileIssue34Tests(unittest.TestCase):
    """Issue 34's cases, written from the protocols by someone who had not read this code: an entry that
    carries nothing after the finish is accepted, anything carried is refused, and a --cross-check twin
    that agrees never changes the verdict of the stream alone."""

    def verdict(self, case: dict) -> stream_client.Verdict:
        args = case['args']
        def value(flag, default=None):
            return args[args.index(flag) + 1] if flag in args else default
        def loaded(flag):
            return json.loads((HOSTILE_34 / 'cases' / value(flag)).read_text()) if flag in args else None
        path = {'chat': 'chat/completions', 'completions': 'completions'}[case['api']]
        request = stream_client.prepare(
            f'http://127.0.0.1:9/v1/{path}', 'tiny', 'hi', cross_check='--cross-check' in args, tools=loaded('--tools'),
            json_schema=loaded('--json-schema'), tool_choice=value('--tool-choice'),
            max_tokens=int(value('--max-tokens', 128)), temperature=float(value('--temperature', 0)),
            extra=json.loads(value('--extra', 'null')))
        reader = stream_client.ResponseReader(request.new_validator())
        reader.feed((HOSTILE_34 / 'cases' / case['files'][0]).read_bytes())
        reader.eof()
        cross = None
        if '--cross-check' in args:
            twin = stream_client.UnstreamedReader()
            twin.feed((HOSTILE_34 / 'cases' / case['files'][1]).read_bytes())
            twin.eof()
            cross = stream_client.compare_twin(reader, twin, request)
        return stream_client.judge(reader, None, cross)

    def test_each_case_gets_its_verdict_alone_and_with_its_twin(self):
        cases = json.loads((HOSTILE_34 / 'cases.json').read_text())
        self.assertGreaterEqual(len(cases), 70)
        for case in cases:
            with self.subTest(case['name']):
                verdict = self.verdict(case)
                expect = (case['expect_ok'], case['expect_layer'], case['expect_kind'] or verdict.kind)
                self.assertEqual((verdict.ok, verdict.layer, verdict.kind), expect, f'{verdict.message}; {case["rule"]}')


HOSTILE_PAIRS = HERE / 'testdata' / 'hostile-cc'


class HostilePairTests(unittest.TestCase):
    """Cross-check pairs written from the protocols by someone who had not read this code: each streamed
    response and its unstreamed twin, judged without a socket as a run judges them."""

    def verdict(self, case: dict) -> tuple[stream_client.Verdict, dict]:
        tools = json.loads((HOSTILE_PAIRS / 'cases' / 'tools.json').read_text()) if case.get('tools') else None
        path = {'chat': 'chat/completions', 'completions': 'completions', 'responses': 'responses'}[case['api']]
        request = stream_client.prepare(f'http://127.0.0.1:9/v1/{path}', 'tiny', 'hi', cross_check=True, tools=tools,
                                        tool_choice=case.get('tool_choice'), max_tokens=case.get('max_tokens', 128))
        reader = stream_client.ResponseReader(request.new_validator())
        reader.feed((HOSTILE_PAIRS / 'cases' / case['stream']).read_bytes())
        reader.eof()
        twin = stream_client.UnstreamedReader()
        twin.feed((HOSTILE_PAIRS / 'cases' / case['unstreamed']).read_bytes())
        twin.eof()
        cross = stream_client.compare_twin(reader, twin, request)
        return stream_client.judge(reader, None, cross), cross

    def test_each_pair_gets_its_verdict_and_comparison(self):
        cases = json.loads((HOSTILE_PAIRS / 'cases.json').read_text())
        self.assertGreaterEqual(len(cases), 100)
        for case in cases:
            with self.subTest(case['name']):
                verdict, cross = self.verdict(case)
                seen = {'ok': verdict.ok, 'error_layer': verdict.layer, 'error_kind': verdict.kind,
                        'comparable': cross['comparable'], 'same': cross['same'],
                        'diverged_at_token': cross['diverged_at_token'],
                        'unstreamed_problem': None if cross['unstreamed_problem'] is None else 'non-null',
                        'unstreamed_problem_or_difference': bool(cross['unstreamed_problem'] or cross['differences'])}
                expect = case['expect']  # each case names only what its rule decides; a list, what it allows
                got = {key: seen[key] if not isinstance(value, list) or seen[key] not in value else value
                       for key, value in expect.items()}
                self.assertEqual(got, expect,
                                 f'{verdict.message}; {cross["differences"] or cross["unstreamed_problem"]}; '
                                 f'{case["rule"]}')

    def test_a_null_seed_is_no_seed(self):
        for extra in ({'seed': None}, {'seed': 'x'}, {}):
            with self.subTest(extra=extra), self.assertRaises(ValueError):
                stream_client.prepare('http://127.0.0.1:9/v1/chat/completions', 'm', 'p', cross_check=True,
                                      temperature=1.0, extra=extra)
        stream_client.prepare('http://127.0.0.1:9/v1/chat/completions', 'm', 'p', cross_check=True, temperature=1.0,
                              extra={'seed': 19})


if __name__ == '__main__':
    unittest.main()
