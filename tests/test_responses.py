"""The Responses API's grammar (_responses), without a socket."""
from __future__ import annotations

import json
import unittest

import stream_client
from stream_client import StreamError
from .support import (
    capture_events, dechunk, feedings, kind_of_events, message_of, R2, responses_events, split_capture, TRACES, WEATHER,
    with_data)
from .tiers import sans_io


@sans_io
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
            'an event repeated': (events[:6] + [events[5]] + events[6:], 'protocol',
                                  'expected sequence_number 6, got 5'),
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
                '"response.completed"', '"response.incomplete"')
                .replace('"status":"completed"', '"status":"incomplete"')
                .replace('"incomplete_details":null', '"incomplete_details":{"reason":"content_filter"}'))],
                'application', "not completed: response.incomplete carries status 'incomplete' "
                               '(incomplete_details.reason=content_filter)'),
        }
        for name, (feed, layer, words) in cases.items():
            with self.subTest(name):
                got_layer, message = self.outcome(feed)
                self.assertEqual(got_layer, layer, message)
                self.assertIn(words, message)

    def test_a_refusal_part_is_a_refusal_with_its_text(self):
        item = {'type': 'message', 'id': 'msg_1', 'role': 'assistant', 'content': []}
        part = {'type': 'refusal', 'refusal': "I can't help."}
        where = {'output_index': 0, 'item_id': 'msg_1', 'content_index': 0}
        events = responses_events(
            {'type': 'response.created', 'response': {}},
            {'type': 'response.output_item.added', 'output_index': 0, 'item': item},
            {'type': 'response.content_part.added', **where, 'part': {'type': 'refusal', 'refusal': ''}},
            {'type': 'response.refusal.delta', **where, 'delta': "I can't "},
            {'type': 'response.refusal.delta', **where, 'delta': 'help.'},
            {'type': 'response.refusal.done', **where, 'refusal': "I can't help."},
            {'type': 'response.content_part.done', **where, 'part': part},
            {'type': 'response.output_item.done', 'output_index': 0, 'item': {**item, 'content': [part]}},
            {'type': 'response.completed',
             'response': {'status': 'completed', 'output': [{**item, 'content': [part]}]}})
        self.assertEqual(self.outcome(events), ('application', "the model declined (refusal deltas instead of an "
                                                               "answer): \"I can't help.\""))
        wrong = events[:5] + [(events[5][0], events[5][1].replace('help.', 'help!'))]
        self.assertEqual(self.outcome(wrong)[0], 'protocol')

    def test_an_item_id_that_is_no_string_is_refused_not_a_crash(self):
        events = responses_events({'type': 'response.created', 'response': {}},
                                  {'type': 'response.output_item.added', 'output_index': 0,
                                   'item': {'type': 'message', 'id': [1]}})
        self.assertEqual(self.outcome(events), ('protocol', 'expected the id of output item 0 to be a string in event '
                                                            '2, got list'))

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


@sans_io
class SplitSurrogatePairTests(unittest.TestCase):
    """JSON escapes a character beyond the BMP as a UTF-16 surrogate pair (RFC 8259, section 7), and a
    byte-level tokenizer may end a delta between the two halves: each delta is then valid JSON holding a
    lone half, and the deltas joined are the character. A closing copy that carries the whole character is
    the same text; one that carries another character, or that drops a half, is not."""

    DELTAS = ['E', 'x', '7', 'r', 'E', 'x\ud83d', '\ude00u', 'nt', 'p']  # nine deltas, as in the capture
    WHOLE = 'Ex7rEx\U0001f600untp'

    def events(self, copy: str, ensure_ascii: bool = True) -> list:
        """The real capture with its deltas replaced by DELTAS and every closing copy of the text by copy
        (escaped as json.dumps escapes, or as raw characters)."""
        events = capture_events(R2)
        deltas = [with_data(event, delta=piece) for event, piece in zip(events[4:13], self.DELTAS)]
        closing = [(kind, json.dumps(_replaced(json.loads(data), 'Ex7rEx7untrgExp', copy), ensure_ascii=ensure_ascii))
                   for kind, data in events[13:]]
        return events[:4] + deltas + closing

    def outcome(self, events: list) -> str | None:
        return kind_of_events(stream_client.ResponseEvents(), events)

    def test_a_pair_split_between_two_deltas_is_the_character_its_closing_copies_carry(self):
        for ensure_ascii in (True, False):
            with self.subTest(escaped=ensure_ascii):
                self.assertIsNone(self.outcome(self.events(self.WHOLE, ensure_ascii)))

    def test_a_closing_copy_with_another_character_or_a_half_dropped_still_differs(self):
        for copy in ('Ex7rEx\U0001f601untp', 'Ex7rEx\ud83duntp', 'Ex7rEx\ude00untp', 'Ex7rExuntp'):
            with self.subTest(copy=ascii(copy)):
                self.assertEqual(self.outcome(self.events(copy)), 'closing_copy_differs')

    def test_a_pair_split_in_a_calls_arguments_is_the_character_the_terminal_events_calls_carry(self):
        call = {'type': 'function_call', 'id': 'fc_1', 'call_id': 'call_1', 'name': 'get_weather', 'arguments': ''}
        whole = '{"city": "X\U0001f600Y"}'
        for copy, verdict in ((whole, None), ('{"city": "X\U0001f601Y"}', 'closing_copy_differs')):
            with self.subTest(copy=ascii(copy)):
                events = responses_events(
                    {'type': 'response.created', 'response': {'status': 'in_progress', 'output': []}},
                    {'type': 'response.output_item.added', 'output_index': 0, 'item': call},
                    *[{'type': 'response.function_call_arguments.delta', 'output_index': 0, 'item_id': 'fc_1',
                       'delta': piece} for piece in ('{"city": "X\ud83d', '\ude00Y"}')],
                    {'type': 'response.function_call_arguments.done', 'output_index': 0, 'item_id': 'fc_1',
                     'arguments': whole},
                    {'type': 'response.output_item.done', 'output_index': 0, 'item': {**call, 'arguments': whole}},
                    {'type': 'response.completed', 'response': {'status': 'completed',
                                                                'output': [{**call, 'arguments': copy}]}})
                self.assertEqual(kind_of_events(stream_client.ResponseEvents(spec=WEATHER), events), verdict)

    def test_a_lone_half_that_never_pairs_is_the_same_text_as_a_copy_with_that_half(self):
        self.DELTAS = ['E', 'x', '7', 'r', 'E', 'x\ud83d', 'u', 'nt', 'p']
        self.assertIsNone(self.outcome(self.events('Ex7rEx\ud83duntp')))
        self.assertEqual(self.outcome(self.events(self.WHOLE)), 'closing_copy_differs')


def _replaced(value, old: str, new: str):
    """value (parsed JSON) with every string equal to old replaced by new."""
    if isinstance(value, dict):
        return {key: _replaced(item, old, new) for key, item in value.items()}
    if isinstance(value, list):
        return [_replaced(item, old, new) for item in value]
    return new if value == old else value
