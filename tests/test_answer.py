"""The answer as a whole (_answer): the signals one stream shows, the unstreamed twin and --cross-check."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import subprocess
import tempfile
import unittest
from pathlib import Path
from typing import NamedTuple
from unittest import mock

import fixture_server
import stream_client
from stream_client import ChatChunks, stream
from .support import (
    answer, arguments, chunk_json, CITY, DONE, fake_record, feedings, Fixture, HERE, message_end,
    MESSAGE_START, opening, PageReader, run_cli, split_capture, SSE_HEAD, STOP, TEXT, TEXT_BLOCK, text_delta, TRACES,
    URL_PATHS, WEATHER)
from .tiers import sans_io


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
        'pair-args-dropped': PairRow('cross-check', 'cross_check_differs', 'the same 12 tokens, but streamed tool '
                                     'call 0 has arguments {"city": "Paris"} and unstreamed {"city": "Paris", "unit": '
                                     '"celsius"}', True, False, 'streamed tool call 0 has arguments', 'tool_calls'),
        'pair-call-dropped': PairRow('cross-check', 'cross_check_differs', 'the same 16 tokens, but the stream has 1 '
                                     'tool call and the unstreamed answer 2', True, False, 'the stream has 1 tool call',
                                     'tool_calls'),
        'pair-markup-leak': PairRow('application', 'tool_markup_in_text', 'tool-call markup <tool_call> in the visible '
                                    'text at character 0', True, False, 'streamed text and unstreamed differ from '
                                    "character 0: '<tool_call>", 'tool_calls'),
        # the twin is given one token more (129) to show whether the model ended by itself: it used it
        'pair-budget-relabelled': PairRow('application', 'budget_used_by_tool_call', 'the whole budget of 128 tokens '
                                          'was used', False, False, "streamed text and unstreamed differ from "
                                          "character 0: '' and '<tool_call>", 'length', diverged_at=128),
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
        raised = cross['unstreamed_max_tokens']  # a twin given one more token than the stream used
        self.assertEqual(cross['token_ids']['streamed'] + (raised is not None), cross['token_ids']['unstreamed'])
        self.assertEqual(cross['ended_by_itself'], False if raised is not None else None)
        self.assertEqual(record['tokens_per_event']['tokens'], cross['token_ids']['streamed'])

    def test_every_pair_mode_gets_its_record_through_the_command_line_in_one_run_and_in_a_load(self):
        self.assertEqual(set(self.PAIRS), set(fixture_server.PAIRS))

        def one(mode: str) -> tuple[subprocess.CompletedProcess, subprocess.CompletedProcess]:
            single = run_cli('--fixture', mode, '--cross-check', '--output', f'{mode}.json', cwd=self.tmp.name)
            load = run_cli('--fixture', mode, '--cross-check', '--runs', '2', '--concurrency', '2',
                           '--output', f'{mode}.jsonl', cwd=self.tmp.name)
            return single, load
        for mode, (single, load) in zip(self.PAIRS, map(one, self.PAIRS)):
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

    @sans_io
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

    @sans_io
    def test_the_twin_is_the_same_body_unstreamed_and_token_ids_are_asked_only_where_served(self):
        for api, path in URL_PATHS.items():
            with self.subTest(api=api):
                request = stream_client.prepare(f'http://127.0.0.1:8000{path}', 'tiny', 'hi', cross_check=True)
                streamed, twin = json.loads(request.body), json.loads(request.twin.body)
                asks = api in ('chat', 'completions')
                self.assertEqual(streamed.get('return_token_ids'), True if asks else None)
                self.assertEqual((twin['stream'], 'stream_options' in twin), (False, False))
                self.assertEqual({key: value for key, value in streamed.items()
                                  if key not in ('stream', 'stream_options')},
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
        self.assertEqual((cross['comparable'], cross['same'], cross['token_ids']),
                         (None, False, {'streamed': 39, 'unstreamed': None}))
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

    def test_a_real_end_on_the_last_budget_token_is_shown_by_a_twin_given_one_token_more(self):
        # vLLM 0.32, seed 22: end-of-sequence (id 2) is the 40th of 40 tokens, finish tool_calls. Alone, the
        # stream cannot show it ended by itself; with --cross-check the twin is sent with max_tokens 41, and
        # its 40 ids (the kept twin: the same generation, which stopped there) prove it, so the verdict is
        # the call's own: its arguments "true" are not an object.
        alone = replay_pair('x3_chat_pair_eos_on_last_budget_token', cross_check=False)
        self.assertEqual((alone['ok'], alone['error_layer'], alone['error_kind']),
                         (False, 'application', 'budget_used_by_tool_call'))
        self.assertIn('the whole budget of 40 tokens was used', alone['error'])
        streamed, unstreamed, body = pair_capture('x3_chat_pair_eos_on_last_budget_token')
        with Fixture(replay=streamed, replay_twin=unstreamed) as fixture:
            paired = stream(fixture.url, 'tiny', 'hi', idle=2, max_tokens=body['max_tokens'], tools=body['tools'],
                            tool_choice=body['tool_choice'], temperature=body['temperature'],
                            extra={'seed': body['seed']}, cross_check=True)
            self.assertEqual(fixture.last_request[1]['max_tokens'], 41)
        cross = paired['cross_check']
        self.assertEqual((cross['comparable'], cross['unstreamed_max_tokens'], cross['ended_by_itself']),
                         (True, 41, True))
        self.assertEqual((paired['ok'], paired['error_kind']), (False, 'tool_arguments_not_object'))

    def test_the_exporters_probe_of_a_cross_check_target_judges_as_a_run_does(self):
        # the same pair as above, probed as Prometheus would: the twin given one token more proves the end there too
        streamed, unstreamed, body = pair_capture('x3_chat_pair_eos_on_last_budget_token')
        with Fixture(replay=streamed, replay_twin=unstreamed) as fixture:
            request = stream_client.prepare(fixture.url, 'tiny', 'hi', idle=2, max_tokens=body['max_tokens'],
                                            tools=body['tools'], tool_choice=body['tool_choice'],
                                            temperature=body['temperature'], extra={'seed': body['seed']},
                                            cross_check=True)
            kept = []
            exporter = stream_client.Exporter({'pair': request}, 1, stream_client.run,
                                              lambda name, record: kept.append(record), lambda line: None)
            answer = exporter.probe('target=pair', '10')
        self.assertEqual(answer.status, 200)
        self.assertEqual((kept[0]['ok'], kept[0]['error_kind'], kept[0]['cross_check']['ended_by_itself']),
                         (False, 'tool_arguments_not_object', True))
        self.assertRegex(answer.body, r'(?m)^probe_success 0$')
        self.assertRegex(answer.body, r'(?m)^stream_probe_error_info\{kind="tool_arguments_not_object"\} 1$')

    @sans_io
    def test_every_signal_of_the_stream_alone_stands_with_an_agreeing_twin(self):
        for kind, (validator, events) in STREAM_SIGNALS.items():
            with self.subTest(kind):
                reader = stream_client.ResponseReader(validator)
                reader.feed(SSE_HEAD + b'\r\n' + sse_body(events))
                reader.eof()
                alone = stream_client.judge(reader)
                streamed = stream_client._answer._streamed_answer(reader.validator)
                twin = stream_client.cross_check_record(streamed, 200, streamed,
                                                        stream_client._answer._unstreamed_problem(streamed))
                self.assertEqual((twin['comparable'], twin['same']),
                                 (True if streamed.token_ids is not None else None, True))
                self.assertEqual(alone.kind, kind)
                self.assertEqual(stream_client.judge(reader, None, twin), alone)

    @sans_io
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

    @sans_io
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

    @sans_io
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
            'arguments equal as JSON': (answer(calls=(('get_weather', '{ "city":"Paris" }'),)), answer(calls=paris),
                                        []),
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

    @sans_io
    def test_a_surrogate_pair_split_between_deltas_is_the_character_the_twin_carries(self):
        # The deltas "X\ud83d" and "\ude00Y" join to two lone halves; the unstreamed body's "\ud83d\ude00"
        # decodes to one character (RFC 8259, section 7): the same text, arguments and reasoning.
        split, whole = 'X\ud83d\ude00Y', 'X\U0001f600Y'
        args_split, args_whole = '{"city": "\ud83d\ude00"}', '{"city": "\U0001f600"}'
        self.assertEqual(stream_client.compare_answers(
            answer(split, calls=(('get_weather', args_split),), reasoning=split),
            answer(whole, calls=(('get_weather', args_whole),), reasoning=whole)), [])
        for streamed, unstreamed in ((answer('X\ud83dY'), answer(whole)), (answer(split), answer('X\U0001f601Y')),
                                     (answer(calls=(('get_weather', '{"city": "\ud83d"}'),)),
                                      answer(calls=(('get_weather', args_whole),)))):
            with self.subTest(streamed=ascii(streamed)):
                self.assertEqual(len(stream_client.compare_answers(streamed, unstreamed)), 1)

    @sans_io
    def test_a_pair_is_comparable_only_by_equal_token_ids_and_only_then_can_fail(self):
        cut, whole = answer(calls=(('get_weather', '{"city": "Par"}'),)), answer(calls=(('get_weather',
                                                                                          '{"city": "Paris"}'),))
        record = stream_client.cross_check_record(cut, 200, whole, None)
        self.assertEqual((record['comparable'], record['same'], record['diverged_at_token']), (True, False, None))
        failure = stream_client._answer._cross_check_failure(record)
        self.assertEqual((failure.layer, failure.kind), ('cross-check', 'cross_check_differs'))
        self.assertEqual(failure.message, 'the same 3 tokens, but streamed tool call 0 has arguments {"city": "Par"} '
                                          'and unstreamed {"city": "Paris"}')
        diverged = stream_client.cross_check_record(cut, 200, dataclasses.replace(whole, token_ids=(1, 9, 3, 4)), None)
        self.assertEqual((diverged['comparable'], diverged['diverged_at_token']), (False, 1))
        self.assertIsNone(stream_client._answer._cross_check_failure(diverged))
        without = stream_client.cross_check_record(dataclasses.replace(cut, token_ids=None), 200, whole, None)
        self.assertEqual((without['comparable'], without['same'], without['token_ids']['streamed']),
                         (None, False, None))
        self.assertIsNone(stream_client._answer._cross_check_failure(without))
        failed = stream_client.cross_check_record(cut, 503, None, 'http: expected status 200, got 503')
        self.assertEqual((failed['comparable'], failed['same'], failed['unstreamed_status']), (None, None, 503))
        self.assertIsNone(stream_client._answer._cross_check_failure(failed))
        self.assertIsNone(stream_client._answer._unstreamed_problem(answer(finish='length'), 'length'))
        self.assertEqual(stream_client._answer._unstreamed_problem(answer(finish='length')),
                         'the unstreamed answer did not finish: its finish is length')
        self.assertEqual(stream_client._answer._first_divergence((1, 2), (1, 2, 3)), 2)
        self.assertIsNone(stream_client._answer._first_divergence((1, 2), (1, 2)))

    @sans_io
    def test_the_two_single_stream_signals(self):
        spec = stream_client.AnswerSpec((('get_weather', None),), 'auto')
        budget = stream_client._answer._budget_used_by_tool_call
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
        markup = stream_client._answer._tool_markup_in_text
        for text, marker in (('Sure. <tool_call>{"name": "x"}</tool_call>', '<tool_call> in the visible text at '
                                                                            'character 6'),
                             ('<|python_tag|>{"name": "x"}', '<|python_tag|> in the visible text at character 0'),
                             ('ok [TOOL_CALLS] [{}]', '[TOOL_CALLS] in the visible text at character 3'),
                             ('<function=get_weather>{}</function>', '<function= in the visible text'),
                             ('a </tool_call> then <|python_tag|>', '</tool_call> in the visible text at character 2'),
                             ('<｜tool▁calls▁begin｜> and [TOOL_CALLS]',
                              '<｜tool▁calls▁begin｜> in the visible text at character 0')):
            with self.subTest(text=text):
                self.assertIn(marker, markup(answer(text), spec))
        self.assertIsNone(markup(answer('<tool_call>'), stream_client.AnswerSpec()))  # no tools offered
        self.assertIsNone(markup(answer('Paris is sunny.'), spec))

    @sans_io
    def test_the_budget_signal_explains_cut_arguments_once(self):
        validator = ChatChunks(max_tokens=5, spec=WEATHER)
        for data in (opening(), arguments('{"city": "Par'), chunk_json(finish_reason='tool_calls'),
                     '{"choices": [], "usage": {"completion_tokens": 5}}', '[DONE]'):
            validator.accept(data)
        self.assertIn('the arguments are not JSON', validator.outcome().message)
        failure = stream_client._answer._answer_problem(validator)
        self.assertEqual(failure.kind, 'budget_used_by_tool_call')
        self.assertTrue(failure.message.startswith('the whole budget of 5 tokens was used'))

    @sans_io
    def test_token_ids_are_kept_and_counted_per_event(self):
        validator = ChatChunks()
        for data in (chunk_json(delta={'content': 'a'}, token_ids=[1, 2, 3]), chunk_json(delta={}, token_ids=[4]),
                     chunk_json(delta={'content': 'b'}, token_ids=[]), chunk_json(finish_reason='stop'), '[DONE]'):
            validator.accept(data)
        self.assertEqual((validator.token_ids, validator.tokens_per_event), ([1, 2, 3, 4], [3, 1]))
        self.assertEqual(stream_client._answer._tokens_per_event(validator),
                         {'events': 2, 'tokens': 4, 'most': 3, 'median': 2})
        four = ChatChunks()  # an even count of events: the median is the mean of the two middle counts
        for data in (chunk_json(delta={'content': 'a'}, token_ids=[1]),
                     chunk_json(delta={'content': 'b'}, token_ids=[2, 3]),
                     chunk_json(delta={'content': 'c'}, token_ids=[4, 5]),
                     chunk_json(delta={'content': 'd'}, token_ids=[6]),
                     chunk_json(finish_reason='stop'), '[DONE]'):
            four.accept(data)
        self.assertEqual(stream_client._answer._tokens_per_event(four)['median'], 1.5)
        self.assertIsNone(stream_client._answer._tokens_per_event(ChatChunks()))
        with self.assertRaisesRegex(stream_client.StreamError,
                                    'expected token_ids to be a list of integers in event 1'):
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
                         (40, 41))  # the twin was given one token more, and used it: the stream was cut
        self.assertEqual((record['error_kind'], record['cross_check']['ended_by_itself']),
                         ('budget_used_by_tool_call', False))

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
                      '1 unstreamed failed', stream_client._summary._summary_table(result))
        cells = PageReader(report.html()).text
        self.assertIn('cross-check: not comparable', cells)
        self.assertIsNone(stream_client.Summary().result()['cross_check'])


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


HOSTILE_34 = HERE / 'testdata' / 'hostile-34'


def hostile_verdict(folder: Path, case: dict) -> stream_client.Verdict:
    """A hostile case's verdict (cases.json's form: its API, files and command-line arguments), judged
    without a socket as a run judges it, alone or with its --cross-check twin."""
    args = case['args']
    def value(flag, default=None):
        return args[args.index(flag) + 1] if flag in args else default
    def loaded(flag):
        return json.loads((folder / 'cases' / value(flag)).read_text()) if flag in args else None
    path = {'chat': 'chat/completions', 'completions': 'completions', 'responses': 'responses',
            'messages': 'messages'}[case['api']]
    request = stream_client.prepare(
        f'http://127.0.0.1:9/v1/{path}', 'tiny', 'hi', cross_check='--cross-check' in args, tools=loaded('--tools'),
        json_schema=loaded('--json-schema'), tool_choice=value('--tool-choice'),
        max_tokens=int(value('--max-tokens', 128)), temperature=float(value('--temperature', 0)),
        extra=json.loads(value('--extra', 'null')), dialect=value('--dialect'))
    reader = stream_client.ResponseReader(request.new_validator())
    reader.feed((folder / 'cases' / case['files'][0]).read_bytes())
    reader.eof()
    cross = None
    if '--cross-check' in args:
        twin = stream_client.UnstreamedReader()
        twin.feed((folder / 'cases' / case['files'][1]).read_bytes())
        twin.eof()
        cross = stream_client.compare_twin(reader, twin, request)
    return stream_client.judge(reader, None, cross)


@sans_io
class HostileIssue34Tests(unittest.TestCase):
    """Issue 34's cases, written from the protocols by someone who had not read this code: an entry that
    carries nothing after the finish is accepted, anything carried is refused, and a --cross-check twin
    that agrees never changes the verdict of the stream alone."""

    def verdict(self, case: dict) -> stream_client.Verdict:
        return hostile_verdict(HOSTILE_34, case)

    def test_each_case_gets_its_verdict_alone_and_with_its_twin(self):
        cases = json.loads((HOSTILE_34 / 'cases.json').read_text())
        self.assertGreaterEqual(len(cases), 70)
        for case in cases:
            with self.subTest(case['name']):
                verdict = self.verdict(case)
                expect = (case['expect_ok'], case['expect_layer'], case['expect_kind'] or verdict.kind)
                self.assertEqual((verdict.ok, verdict.layer, verdict.kind), expect,
                                 f'{verdict.message}; {case["rule"]}')


@sans_io
class HostileIssue39Tests(unittest.TestCase):
    """Issue 39's cases (testdata/hostile-39), written from the servers' source by someone who had not read
    this code: streams each dialect must accept, streams it must refuse, and streams where no dialect may
    be applied."""

    def test_each_case_gets_its_verdict(self):
        cases = json.loads((HERE / 'testdata' / 'hostile-39' / 'cases.json').read_text())
        self.assertGreaterEqual(len(cases), 50)
        for case in cases:
            with self.subTest(case['name']):
                verdict = hostile_verdict(HERE / 'testdata' / 'hostile-39', case)
                expect = (case['expect_ok'], case['expect_layer'], case['expect_kind'] or verdict.kind)
                self.assertEqual((verdict.ok, verdict.layer, verdict.kind), expect,
                                 f'{verdict.message}; {case["rule"]}')


@sans_io
class FuzzIssue39Tests(unittest.TestCase):
    """The grammar fuzzer's three cases of issue 39 (testdata/fuzz-39), each beside the stream it was
    mutated from: two false successes on the Responses API's reasoning parts, and one false reject of a
    Messages stop_reason that a later message_delta changes."""

    def test_each_case_gets_its_verdict(self):
        cases = json.loads((HERE / 'testdata' / 'fuzz-39' / 'cases.json').read_text())
        self.assertEqual(len(cases), 5)
        for case in cases:
            with self.subTest(case['name']):
                verdict = hostile_verdict(HERE / 'testdata' / 'fuzz-39', case)
                self.assertEqual((verdict.ok, verdict.layer, verdict.kind),
                                 (case['expect_ok'], case['expect_layer'], case['expect_kind']),
                                 f'{verdict.message}; {case["rule"]}')

    def test_a_changed_stop_reason_is_said_in_the_record(self):
        reader = stream_client.ResponseReader(stream_client.MessagesEvents(spec=WEATHER))
        reader.feed((HERE / 'testdata' / 'fuzz-39' / 'cases' / '05_messages_stop_reason_changed.http').read_bytes())
        reader.eof()
        fields = reader.validator.fields()
        self.assertEqual(fields['finish_reason'], 'tool_use')
        self.assertEqual(fields['notes'], ['message_delta in event 6 changed stop_reason from stop_sequence to '
                                           'tool_use; the last is kept, as Anthropic documents'])


PEER_STREAMS = HERE / 'testdata' / 'peer_streams'


@sans_io
class PeerStreamTests(unittest.TestCase):
    """Streams other projects recorded (the OpenAI and Anthropic SDKs' fixtures, TGI's snapshots), each
    judged as its own project's tests say: complete is ok; cut, budget and refusal are not, with the right
    kind. The open questions are decided in docs/apis.md (Streams from other projects)."""

    def test_each_capture_gets_the_verdict_its_project_gives(self):
        cases = json.loads((PEER_STREAMS / 'cases.json').read_text())
        self.assertEqual(len(cases), 36)
        for case in cases:
            with self.subTest(case['name']):
                args = dict(zip(case['args'][::2], case['args'][1::2]))
                def loaded(flag):
                    return json.loads((PEER_STREAMS / args[flag]).read_text()) if flag in args else None
                path = {'chat': 'chat/completions', 'messages': 'messages'}[case['api']]
                request = stream_client.prepare(f'http://127.0.0.1:9/v1/{path}', 'tiny', 'hi', tools=loaded('--tools'),
                                                json_schema=loaded('--json-schema'),
                                                tool_choice=args.get('--tool-choice'))
                reader = stream_client.ResponseReader(request.new_validator())
                reader.feed((PEER_STREAMS / case['name']).read_bytes())
                reader.eof()
                verdict = stream_client.judge(reader, None, None)
                self.assertEqual((verdict.ok, verdict.layer, verdict.kind),
                                 (case['expect_ok'], case['expect_layer'], case['expect_kind']),
                                 f'{verdict.message}; {case["truth"]}: {case["why"]}')
                if case['expect_kind'] == 'refusal':
                    self.assertTrue(reader.validator.fields()['refusal'])

    def test_blocks_this_client_does_not_read_are_listed(self):
        request = stream_client.prepare('http://127.0.0.1:9/v1/messages', 'tiny', 'hi')
        reader = stream_client.ResponseReader(request.new_validator())
        reader.feed((PEER_STREAMS / 'ant_compaction_response.http').read_bytes())
        reader.eof()
        self.assertEqual(reader.validator.fields()['skipped_events'], ['content_block compaction'])
        self.assertEqual(reader.validator.text, 'Hello there!')


HOSTILE_PAIRS = HERE / 'testdata' / 'hostile-cc'


@sans_io
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
