"""The Messages API's grammar (_messages), without a socket."""
from __future__ import annotations

import unittest

import stream_client
from stream_client import StreamError
from .support import ANSWER, message_end, message_event, message_of, MESSAGE_START, TEXT_BLOCK, text_delta, WEATHER
from .tiers import sans_io


TOOL_BLOCK = message_event('content_block_start', content_block={'type': 'tool_use', 'id': 'toolu_1',
                                                                 'name': 'get_weather', 'input': {}}, index=0)


@sans_io
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
        self.assertEqual((fields['text'], fields['reasoning_text'], fields['finish_reason'],
                          fields['completion_tokens'], fields['response_id'], fields['content_events']),
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
            'a delta after its block stopped': ([MESSAGE_START, TEXT_BLOCK,
                                                 message_event('content_block_stop', index=0), text_delta('x')],
                                                'content_block_delta for block 0 in event 4, after '
                                                'its content_block_stop'),
            'a block index that skips': ([MESSAGE_START, TEXT_BLOCK[0:1] + (TEXT_BLOCK[1].replace('"index": 0',
                                                                                                  '"index": 2'),)],
                                         'content_block_start for block 2 in event 2: the next block was 0'),
            'a text_delta in a tool_use block': ([MESSAGE_START, TOOL_BLOCK, text_delta('x')],
                                                 'a text_delta in event 3 for block 0, a tool_use block'),
            'a block still open at message_delta': ([MESSAGE_START, TEXT_BLOCK, text_delta('x')] + message_end()[1:],
                                                   'message_delta in event 4 while block 0 was still open'),
            'an event after message_stop': ([MESSAGE_START, TEXT_BLOCK, text_delta('x')] + message_end()
                                             + [message_event('ping')],
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

    def test_a_refusal_stop_reason_is_a_refusal_with_its_text(self):
        for details, text in (({'type': 'refusal', 'explanation': 'Declined: policy.'}, 'Declined: policy.'),
                              (None, 'hi')):
            with self.subTest(details=details):
                validator = self.run_events([MESSAGE_START, TEXT_BLOCK, text_delta('hi'),
                                             message_event('content_block_stop', index=0),
                                             message_event('message_delta', delta={'stop_reason': 'refusal',
                                                                                   'stop_details': details}),
                                             message_event('message_stop')])
                failure = validator.outcome()
                self.assertEqual((failure.layer, failure.kind, validator.fields()['refusal']),
                                 ('application', 'refusal', text))
                self.assertIn('the model declined (stop_reason=refusal)', failure.message)

    def test_an_error_event_with_a_bare_error_object_is_a_server_error(self):
        # llama-server's error event: the error object itself, without Anthropic's "type": "error" wrapper
        for data, error in (
                ('{"code": 500, "message": "context overflow", "type": "server_error"}',
                 {'message': 'context overflow', 'type': 'server_error', 'code': 500}),
                ('{"error": {"message": "slot lost", "type": "api_error"}}',
                 {'message': 'slot lost', 'type': 'api_error', 'code': None}),
                ('engine died', {'message': 'engine died', 'type': None, 'code': None})):
            with self.subTest(data), self.assertRaises(StreamError) as caught:
                self.run_events([MESSAGE_START, TEXT_BLOCK, ('error', data)])
            self.assertEqual((caught.exception.kind, caught.exception.server_error), ('server_error_event', error))
            self.assertIn(repr(error['message']), caught.exception.message)

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
            'a refusal': (text + message_end('refusal'), None, "the model declined (stop_reason=refusal): 'hi'"),
        }
        for name, (events, spec, problem) in cases.items():
            with self.subTest(name):
                self.assertEqual(message_of(self.run_events(events, spec).outcome()), problem)
