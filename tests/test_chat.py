"""The chat and completions grammar (_chat), without a socket."""
from __future__ import annotations

import json
import unittest

import stream_client
from stream_client import ChatChunks, StreamError
from .support import arguments, chunk_json, DONE, HERE, message_of, opening, STOP, TEXT, URL_PATHS, WEATHER
from .tiers import sans_io


@sans_io
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
        error = stream_client._validator._server_error_fields({'error': {'message': 'x' * 5000, 'type': 'T',
                                                                         'code': 500}})
        self.assertEqual((len(error['message']), error['type'], error['code']), (1000, 'T', 500))
        self.assertEqual(stream_client._validator._server_error_fields({'object': 'error', 'message': 'flat',
                                                                        'code': 404}),
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


@sans_io
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


LITELLM = HERE / 'testdata' / 'litellm-1.108.7'


@sans_io
class LiteLLMTests(unittest.TestCase):
    """Real LiteLLM 1.108.7 streams in front of vLLM 0.32: each ends with LiteLLM's usage chunk, an entry
    for choice 0 that carries nothing, and gets the verdict the same request got straight from vLLM."""

    CASES = {  # file: (api, whether it offered the tool, the verdict)
        'a_chat_stop.http': ('chat', False, (True, None, None)),
        'b_chat_length.http': ('chat', False, (False, 'application', 'budget_exhausted')),
        'c1_tool_required.http': ('chat', True, (False, 'application', 'budget_exhausted')),
        'c6_tool_required_stopstr.http': ('chat', True, (False, 'application', 'tool_arguments_not_object')),
        'd1_compl_stop.http': ('completions', False, (True, None, None)),
        'd2_compl_length.http': ('completions', False, (False, 'application', 'budget_exhausted')),
    }

    def test_each_capture_gets_the_verdict_vllm_alone_gets(self):
        responses = {'e3_responses_budget.http'}  # judged by its dialect: tests/test_dialects.py
        self.assertEqual(set(self.CASES) | responses, {path.name for path in LITELLM.glob('*.http')})
        tools = json.loads((LITELLM / 'tools.json').read_text())
        for name, (api, offered, expected) in self.CASES.items():
            with self.subTest(name):
                raw = (LITELLM / name).read_bytes()
                self.assertRegex(raw, rb'"choices":\[\{"index":0(,"delta":\{\})?\}\]')  # LiteLLM's last chunk
                request = stream_client.prepare(f'http://127.0.0.1:9/v1/{URL_PATHS[api][4:]}', 'tiny', 'hi',
                                                max_tokens=64, tools=tools if offered else None,
                                                tool_choice='required' if offered else None)
                reader = stream_client.ResponseReader(request.new_validator())
                reader.feed(raw)
                reader.eof()
                verdict = stream_client.judge(reader)
                self.assertEqual((verdict.ok, verdict.layer, verdict.kind), expected, verdict.message)


@sans_io
class RefusalTests(unittest.TestCase):
    """OpenAI's refusal deltas: the model declined, which is named as such and kept in the record."""

    def test_refusal_deltas_are_a_refusal_with_their_text(self):
        validator = ChatChunks()
        for event in (chunk_json(delta={'role': 'assistant', 'content': None, 'refusal': ''}),
                      chunk_json(delta={'refusal': "I'm sorry, "}), chunk_json(delta={'refusal': "I can't."}),
                      STOP, DONE):
            validator.accept(event)
        failure = validator.outcome()
        self.assertEqual((failure.layer, failure.kind), ('application', 'refusal'))
        self.assertIn("the model declined (refusal deltas instead of an answer): \"I'm sorry, I can't.\"",
                      failure.message)
        self.assertEqual(validator.fields()['refusal'], "I'm sorry, I can't.")

    def test_a_cut_refusal_is_a_cut_and_no_refusal_is_null(self):
        validator = ChatChunks()
        validator.accept(chunk_json(delta={'refusal': 'No.'}))
        self.assertEqual(validator.outcome().kind, 'eof_before_done')
        validator = ChatChunks()
        for event in (TEXT, STOP, DONE):
            validator.accept(event)
        self.assertEqual((validator.outcome(), validator.fields()['refusal']), (None, None))
