"""The protocol seam (_validator): tool calls, JSON answers and the answer bound, on every API."""
from __future__ import annotations

import dataclasses
import json
import unittest

import fixture_server
import stream_client
from stream_client import ChatChunks, StreamError
from .support import arguments, capture_events, chunk_json, message_of, opening, pieces, SSE_HEAD, WEATHER
from .tiers import sans_io


@sans_io
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
                                   "tool call 0 (get_time): 'get_time' is not a tool the request offered "
                                   "(get_weather)"),
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

    def test_the_schema_subset(self):
        JsonSchema = stream_client.JsonSchema
        defs = {'$defs': {'city': {'type': 'string', 'minLength': 2}}, 'definitions': {'n': {'type': 'integer'}}}
        cases = [
            ({'type': ['string', 'null']}, None, None), ({'type': ['string', 'null']}, 1, '$: expected string or null'),
            ({'type': 'integer'}, 1.0, None), ({'type': 'integer'}, True, '$: expected integer, got true'),
            ({'enum': [1, 'a']}, True, '$: expected one of [1, "a"], got true'), ({'const': 0}, 0.0, None),
            ({'items': {'type': 'string'}}, ['a', 2], '$[1]: expected string, got 2'),
            ({'minItems': 2}, [1], '$: expected at least 2 items, got 1 item'),
            ({'maxItems': 1}, [1, 2], 'at most 1 item'),
            ({'minLength': 2}, 'a', 'at least 2 characters'),
            ({'maxLength': 1}, 'ab', 'at most 1 character, got 2 characters'),
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


@sans_io
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
        for piece in pieces(SSE_HEAD + b'Transfer-Encoding: chunked\r\n\r\n' + body, stream_client._limits._READ_SIZE):
            reader.feed(piece)
        return stream_client.judge(reader)

    @classmethod
    def text(cls, chars: int) -> list[str]:
        return [cls.ASTRAL * 4096] * (chars // 4096) + [cls.ASTRAL * (chars % 4096)]

    def test_a_text_at_the_answer_bound_is_ok_and_one_character_more_is_not(self):
        for api in stream_client.VALIDATORS:
            for chars, layer in ((stream_client.MAX_TEXT_CHARS, None),
                                 (stream_client.MAX_TEXT_CHARS + 1, 'application')):
                with self.subTest(api=api, chars=chars):
                    verdict = self.verdict(api, lambda p: p.preamble()
                                           + [p.content(piece) for piece in self.text(chars)]
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
        self.assertEqual(escaped, stream_client._limits._JSON_ESCAPE_CHARS)
        self.assertGreaterEqual(stream_client._limits._ANSWER_LINE_CHARS,
                                2 * stream_client.MAX_TEXT_CHARS * escaped + stream_client._limits._MAX_ENVELOPE_CHARS)
