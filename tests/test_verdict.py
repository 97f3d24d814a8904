"""The verdict (_verdict): every failure kind produced by the code that reports it."""
from __future__ import annotations

import contextlib
import json
import re
import ssl
import sys
import types
import unittest
from unittest import mock

import stream_client
from stream_client import ChatChunks, Events, MAX_LINE_CHARS, StreamError
from .support import (
    ANSWER_EVENTS, arguments, capture_events, chunk_json, CHUNKED, chunked, CITY, DONE, fake_exchange, HERE,
    kind_of_events, message_end, message_event, MESSAGE_START, opening, R2, responses_events, run_fixture,
    ScriptedSocket, SSE_HEAD, STOP, TEXT, TEXT_BLOCK, text_delta, WEATHER, with_data)
from .tiers import sans_io


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
    failure = stream_client._answer._answer_problem(validator)
    return failure and failure.kind


def with_bound(name: str, value: int, action):
    """What action returns while the bound NAME is VALUE in every module of the package that reads it."""
    modules = [module for module_name, module in sorted(sys.modules.items())
               if module_name.startswith('stream_client.') and hasattr(module, name)]
    with contextlib.ExitStack() as patches:
        for module in modules:
            patches.enter_context(mock.patch.object(module, name, value))
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
    'connect_failed': lambda: stream_client._failures._classify(ConnectionRefusedError(111, 'refused'),
                                                      fake_exchange('CONNECT')).kind,
    'not_loopback': lambda: kind_raised(lambda: stream_client._transport._check_plain_peer(
        types.SimpleNamespace(peer_ip='192.0.2.7', peer='192.0.2.7:80'), types.SimpleNamespace(host='x.test'))),
    'proxy_unreachable': lambda: stream_client._failures._classify(ConnectionRefusedError(111, 'refused'),
                                                         fake_exchange('CONNECT', proxy=True)).kind,
    'proxy_closed': lambda: kind_raised(lambda: stream_client._transport._open_tunnel(ScriptedSocket(),
                                                                           fake_exchange('PROXY', proxy=True))),
    'proxy_bad_answer': lambda: kind_raised(lambda: stream_client._transport._open_tunnel(
        ScriptedSocket(b'HTTX/1.1 200 OK\r\n\r\n'), fake_exchange('PROXY', proxy=True))),
    'proxy_refused': lambda: kind_raised(lambda: stream_client._transport._open_tunnel(
        ScriptedSocket(b'HTTP/1.1 407 Proxy Authentication Required\r\n\r\n'), fake_exchange('PROXY', proxy=True))),
    'proxy_extra_bytes': lambda: kind_raised(lambda: stream_client._transport._open_tunnel(
        ScriptedSocket(b'HTTP/1.1 200 OK\r\n\r\nearly'), fake_exchange('PROXY', proxy=True))),
    'proxy_tunnel_failed': lambda: stream_client._failures._classify(ConnectionResetError(104, 'reset'),
                                                           fake_exchange('PROXY', proxy=True)).kind,
    'certificate_invalid': lambda: stream_client._failures._classify(_certificate_error(), fake_exchange('TLS')).kind,
    'tls_failed': lambda: stream_client._failures._classify(_tls_error(), fake_exchange('TLS')).kind,
    'head_too_long': lambda: kind_of_response(SSE_HEAD + b'X-Long: ' + b'a' * 70_000),
    'unexpected_101': lambda: kind_of_response(b'HTTP/1.1 101 Switching Protocols\r\n\r\n'),
    'bad_status_line': lambda: kind_of_response(b'HTTX/1.1 200 OK\r\n\r\n'),
    'http_version': lambda: kind_of_response(b'HTTP/2.0 200 OK\r\n\r\n'),
    'bad_header_line': lambda: kind_of_response(SSE_HEAD + b'no colon here\r\n\r\n'),
    'unsupported_encoding': lambda: kind_of_response(SSE_HEAD + b'Content-Encoding: gzip\r\n\r\n'),
    'ambiguous_framing': lambda: kind_of_response(SSE_HEAD + b'Transfer-Encoding: chunked\r\n'
                                                  b'Content-Length: 5\r\n\r\n'),
    'http10_transfer_encoding': lambda: kind_of_response(b'HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n'
                                                         b'Transfer-Encoding: chunked\r\n\r\n'),
    'bad_content_length': lambda: kind_of_response(SSE_HEAD + b'Content-Length: five\r\n\r\n'),
    'content_type': lambda: kind_of_response(b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n{}'),
    'status_not_200': lambda: kind_of_response(b'HTTP/1.1 503 Busy\r\nContent-Length: 0\r\n\r\n'),
    'no_response_head': lambda: stream_client._failures._classify(ConnectionResetError(104, 'reset'),
                                                        fake_exchange('HEADERS')).kind,
    'no_response': lambda: kind_of_response(b''),
    'eof_in_head': lambda: kind_of_response(b'HTTP/1.1 200 OK\r\n'),
    'stale_connection': lambda: stream_client._failures._exchange_failure(
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
    'connection_failed': lambda: stream_client._failures._classify(ConnectionResetError(104, 'reset'),
                                                         fake_exchange('BODY')).kind,
    'unended_after_terminal': lambda: stream_client._failures._timeout_failure(_done_but_unended()).kind,
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
    'refusal': lambda: kind_of_events(ChatChunks(), [chunk_json(delta={'refusal': 'No.'}), STOP, DONE]),
    'dialect_unproven': lambda: kind_of_events(
        stream_client.ResponseEvents(dialect=stream_client.DIALECTS['llama.cpp']),
        [('response.created', '{"type": "response.created", "response": {"id": "r"}}'),
         ('response.completed', '{"type": "response.completed", "response": {"status": "completed", "output": []}}')]),
    'unsupported_part': lambda: kind_of_events(stream_client.MessagesEvents(), [
        MESSAGE_START, message_event('content_block_start', content_block={'text': 'no type'}, index=0)]),
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
    'connect_timeout': lambda: stream_client._failures._timeout_failure(fake_exchange('CONNECT')).kind,
    'proxy_timeout': lambda: stream_client._failures._timeout_failure(fake_exchange('PROXY', proxy=True)).kind,
    'tls_timeout': lambda: stream_client._failures._timeout_failure(fake_exchange('TLS')).kind,
    'headers_timeout': lambda: stream_client._failures._timeout_failure(fake_exchange('HEADERS')).kind,
    'idle_timeout': lambda: stream_client._failures._timeout_failure(fake_exchange('BODY')).kind,
    'deadline': lambda: stream_client._failures._timeout_failure(fake_exchange('BODY', started_ago=10.0)).kind,
    'interrupted': lambda: stream_client._failures._interruption(fake_exchange('BODY'), 'SIGINT').kind,
    'client_error': lambda: stream_client._failures._classify(ValueError('a bug'), fake_exchange('BODY')).kind,
    'budget_used_by_tool_call': lambda: answer_problem_kind(ChatChunks(max_tokens=5, spec=WEATHER), [
        opening(), arguments('{"city": "Paris"}'), chunk_json(finish_reason='tool_calls'),
        '{"choices": [], "usage": {"completion_tokens": 5}}', '[DONE]']),
    'tool_markup_in_text': lambda: answer_problem_kind(ChatChunks(spec=WEATHER), [
        chunk_json(delta={'content': '<tool_call>{"name": "get_weather"}</tool_call>'}, finish_reason='stop'),
        '[DONE]']),
    'cross_check_differs': lambda: stream_client._answer._cross_check_failure(
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

    @sans_io
    def test_every_kind_in_the_table_is_produced(self):
        self.assertEqual(set(FAILURE_PRODUCERS), set(stream_client.FAILURE_KINDS))
        for kind, produce in FAILURE_PRODUCERS.items():
            with self.subTest(kind):
                self.assertEqual(produce(), kind)

    @sans_io
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

    @sans_io
    def test_the_failures_doc_shows_the_table_row_for_row(self):
        text = (HERE / 'docs' / 'failures.md').read_text()
        rows = re.findall(r'^\| `(\w+)` \| `([\w-]+)` \| (.+) \|$', text, re.M)
        self.assertEqual(rows, [(kind, layer, meaning)
                                for kind, (layer, meaning) in stream_client.FAILURE_KINDS.items()])

    @sans_io
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

    @sans_io
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
