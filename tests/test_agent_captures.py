"""Real tool-call bytes in every run of the suite: the live tier's captures of vLLM 0.32 serving the agent
model (testdata/vllm-0.32.0-agent/), replayed without a server; and the rule of --cross-check they showed
(white space the unstreamed path drops beside calls), with its hostile cases."""
from __future__ import annotations

import json
import unittest

import stream_client
from .agent_support import AFTER_TOOL_RESULT, AGENT_CAPTURES, CASES, judge_raw, raw_answer, record_calls
from .support import answer, Fixture, TRACES
from .tiers import sans_io

# the live tier's relay cuts (tests/live/test_agent_live.py CUTS) and the failure each must be
CUT_KINDS = {'inside-an-event': 'eof_in_chunk', 'after-the-event': 'no_last_chunk',
             'after-the-event-with-a-last-chunk': 'eof_before_done'}
CASES_BY_NAME = {case.name: case for case in CASES + (AFTER_TOOL_RESULT,)}


def captures() -> list[tuple[str, str, object, bool]]:
    """(file stem, api, case, is a pair) of every kept streamed capture: NAME is i{interval}_{api}_{case}[_pair]."""
    found = []
    for path in sorted(AGENT_CAPTURES.glob('i*.http')):
        stem = path.name[:-len('.http')]
        if stem.endswith('_unstreamed'):
            continue
        interval, api, rest = stem.split('_', 2)
        pair = rest.endswith('_pair')
        found.append((stem, api, CASES_BY_NAME[rest[:-len('_pair')] if pair else rest], pair))
    return found


def judged(stem: str, api: str, pair: bool) -> tuple[stream_client.Verdict, stream_client.ResponseReader, dict | None]:
    """A kept capture judged as a run judges it, sans-IO, its request rebuilt from the kept body."""
    sent = json.loads((AGENT_CAPTURES / f'{stem}.request.json').read_text())
    twin = (AGENT_CAPTURES / f'{stem}_unstreamed.http').read_bytes() if pair else None
    return judge_raw(sent['path'], sent['body'], (AGENT_CAPTURES / f'{stem}.http').read_bytes(), twin)


@sans_io
class AgentCaptureTests(unittest.TestCase):
    def test_there_are_captures_of_each_kind_on_each_api(self):
        kept = {(api, case.name, pair) for _, api, case, pair in captures()}
        for case in CASES:
            for api in ('chat', 'responses', 'messages'):
                self.assertIn((api, case.name, False), kept)
            self.assertIn(('chat', case.name, True), kept)
        for api in ('chat', 'responses', 'messages'):
            self.assertIn((api, 'after_tool_result', False), kept)
            self.assertEqual(len(list(AGENT_CAPTURES.glob(f'cut_{api}_*.http'))), len(CUT_KINDS))

    def test_each_real_stream_the_relay_cut_inside_a_calls_arguments_is_not_ok(self):
        for path in sorted(AGENT_CAPTURES.glob('cut_*.http')):
            with self.subTest(path.name):
                _, api, cut = path.name[:-len('.http')].split('_', 2)
                sent = json.loads(path.with_name(path.name.replace('.http', '.request.json')).read_text())
                verdict, reader, _ = judge_raw(sent['path'], sent['body'], path.read_bytes())
                self.assertEqual((verdict.ok, verdict.kind), (False, CUT_KINDS[cut]), verdict.message)
                self.assertTrue(raw_answer(api, path.read_bytes())['calls'])  # a call had begun

    def test_each_kept_capture_is_ok_with_the_calls_its_bytes_carry(self):
        for stem, api, case, pair in captures():
            with self.subTest(stem):
                verdict, reader, cross = judged(stem, api, pair)
                self.assertTrue(verdict.ok, verdict.message)
                fields = reader.validator.fields()
                raw = raw_answer(api, (AGENT_CAPTURES / f'{stem}.http').read_bytes())
                self.assertEqual(record_calls(fields), raw['calls'])
                self.assertEqual([(name, json.loads(arguments)) for name, arguments in raw['calls']],
                                 [(name, arguments) for name, arguments in case.calls])
                self.assertEqual(bool(fields['reasoning_text']), case.reasoning)
                if pair:
                    self.assertEqual((cross['comparable'], cross['same']), (True, True), cross)

    def test_the_white_space_before_a_thinking_models_call_is_a_note_not_a_difference(self):
        # vLLM 0.32: reasoning, then "\n\n" as content, then the call; the unstreamed path drops the "\n\n"
        stem = next(stem for stem, api, case, pair in captures() if pair and case.name == 'think_then_call')
        verdict, reader, cross = judged(stem, 'chat', True)
        self.assertEqual(reader.validator.text, '\n\n')
        self.assertEqual((verdict.ok, cross['comparable'], cross['same'], cross['differences']), (True, True, True, []))
        self.assertEqual(cross['notes'], ["the streamed text '\\n\\n' is white space only, which the unstreamed "
                                          'answer drops beside its tool calls'])


PARIS = (('get_weather', '{"city": "Paris"}'),)


@sans_io
class WhiteSpaceRuleTests(unittest.TestCase):
    """The rule is vLLM's (content.strip() == "" dropped once calls are extracted) and nothing wider."""

    def differences(self, streamed_text: str, unstreamed_text: str, streamed_calls=PARIS, unstreamed_calls=PARIS):
        streamed = answer(streamed_text, streamed_calls, 'tool_calls', 9, tuple(range(9)))
        unstreamed = answer(unstreamed_text, unstreamed_calls, 'tool_calls', 9, tuple(range(9)))
        return stream_client.compare_answers(streamed, unstreamed)

    def test_white_space_alone_beside_calls_is_the_same_answer(self):
        for text in ('\n\n', ' ', '\t\n ', '\u3000', '\n' * 50):
            with self.subTest(text=text):
                self.assertEqual(self.differences(text, ''), [])

    def test_anything_else_still_differs(self):
        cases = {
            'text beside the white space': ('\n\nx', ''),
            'the unstreamed side kept other white space': ('\n\n', '\n'),
            'the unstreamed side has text': ('\n\n', 'It is sunny.'),
            'the stream is empty, the twin white space': ('', '\n\n'),
            'no calls on the unstreamed side': ('\n\n', '', PARIS, ()),
            'no calls on either side': ('\n\n', '', (), ()),
            'a zero-width space is not white space': ('\u200b', ''),
        }
        for name, (streamed, unstreamed, *calls) in cases.items():
            with self.subTest(name):
                self.assertTrue(self.differences(streamed, unstreamed, *calls))

    def test_a_pair_that_differs_only_so_is_ok_and_one_that_differs_otherwise_fails(self):
        streamed = answer('\n\n', PARIS, 'tool_calls', 9, tuple(range(9)))
        same = stream_client.cross_check_record(streamed, 200, answer('', PARIS, 'tool_calls', 9, tuple(range(9))),
                                                None)
        self.assertIsNone(stream_client._answer._cross_check_failure(same))
        other = stream_client.cross_check_record(streamed, 200, answer('\n', PARIS, 'tool_calls', 9, tuple(range(9))),
                                                 None)
        self.assertEqual(stream_client._answer._cross_check_failure(other).kind, 'cross_check_differs')


class BudgetProofTests(unittest.TestCase):
    """The whole budget used by a tool-call finish is cleared only by a twin given one token more that
    generated exactly the stream's ids and stopped: hostile twins, judged sans-IO. The stream is vLLM 0.32's
    x3 (end-of-sequence on the 40th of 40 tokens, finish tool_calls, arguments "true")."""

    def reader(self, name: str = 'x3_chat_pair_eos_on_last_budget_token_stream.http', max_tokens: int = 40):
        request = stream_client.prepare('http://127.0.0.1:9/v1/chat/completions', 'tiny', 'hi', cross_check=True,
                                        max_tokens=max_tokens, tools=json.loads(
                                            (TRACES / 'x3_chat_pair_eos_on_last_budget_token_stream.request.json')
                                            .read_text())['tools'], tool_choice='required')
        reader = stream_client.ResponseReader(request.new_validator())
        reader.feed((TRACES / name).read_bytes())
        reader.eof()
        return reader

    def verdict(self, twin: stream_client.Answer | None, budget: int | None) -> tuple[str | None, bool | None]:
        reader = self.reader()
        streamed = stream_client._answer._streamed_answer(reader.validator)
        cross = stream_client.cross_check_record(streamed, 200, twin, None, budget)
        return stream_client.judge(reader, None, cross).kind, cross['ended_by_itself']

    @sans_io
    def test_the_twin_is_given_one_token_more_only_when_the_signal_fires_on_a_stream_with_ids(self):
        self.assertEqual(stream_client._answer._budget_proof_wanted(self.reader().validator), 41)
        # budget not used
        self.assertIsNone(stream_client._answer._budget_proof_wanted(self.reader(max_tokens=41).validator))
        self.assertIsNone(stream_client._answer._budget_proof_wanted(
            self.reader('x1_chat_pair_tool_call_stream.http', max_tokens=200).validator))

    def test_the_agent_models_end_on_the_last_budget_token_is_ok_with_its_twin_and_refused_alone(self):
        # vLLM 0.32, the agent model, max_tokens 24: <|im_end|> is the 24th token of one whole call, finish
        # tool_calls. The kept twin was sent with max_tokens 25 and stopped on the same 24 ids.
        stem = AGENT_CAPTURES / 'eos_chat_single_call_max24'
        streamed, twin = (stem.with_name(stem.name + '_stream.http').read_bytes(),
                          stem.with_name(stem.name + '_unstreamed.http').read_bytes())
        sent = json.loads(stem.with_name(stem.name + '_unstreamed.request.json').read_text())['body']
        self.assertEqual(sent['max_tokens'], 25)
        records = {}
        for cross_check in (False, True):
            with Fixture(replay=streamed, replay_twin=twin) as fixture:
                records[cross_check] = stream_client.stream(fixture.url, 'agent', 'What is the weather in Paris?',
                                                            idle=5, max_tokens=24, tools=sent['tools'],
                                                            cross_check=cross_check)
                if cross_check:
                    self.assertEqual(fixture.last_request[1]['max_tokens'], 25)
        self.assertEqual((records[False]['ok'], records[False]['error_kind']), (False, 'budget_used_by_tool_call'))
        cross = records[True]['cross_check']
        self.assertTrue(records[True]['ok'], records[True]['error'])
        self.assertEqual((cross['comparable'], cross['ended_by_itself'], cross['token_ids']['streamed']),
                         (True, True, 24))
        self.assertEqual(records[True]['tool_calls'][0]['arguments'], '{"city": "Paris"}')

    @sans_io
    def test_only_the_same_ids_below_the_raised_budget_and_a_stop_clear_it(self):
        ids = stream_client._answer._streamed_answer(self.reader().validator).token_ids
        same = answer('', (('get_time', 'true'),), 'tool_calls', 40, ids)
        cases = {
            'the same ids, one token of room left, stopped': (same, 41, ('tool_arguments_not_object', True)),
            'one token more: the stream was cut': (answer('', (('get_time', 'true'),), 'tool_calls', 41, ids + (7,)),
                                                   41, ('budget_used_by_tool_call', False)),
            'the twin was not given more': (same, None, ('budget_used_by_tool_call', None)),
            'a budget no larger than the ids': (same, 40, ('budget_used_by_tool_call', False)),
            'a twin without ids': (answer('', (('get_time', 'true'),), 'tool_calls', 40, None), 41,
                                   ('budget_used_by_tool_call', False)),
            'the same ids, ended by the budget': (answer('', (('get_time', 'true'),), 'length', 40, ids), 41,
                                                  ('budget_used_by_tool_call', False)),
            'one id differs': (answer('', (('get_time', 'true'),), 'tool_calls', 40, ids[:-1] + (3,)), 41,
                               ('budget_used_by_tool_call', False)),
            'no twin answer': (None, 41, ('budget_used_by_tool_call', None)),
            # the same ids, but a usage that counts the whole raised budget: the ids undercount what it generated
            'the twin\'s usage counts 41': (answer('', (('get_time', 'true'),), 'tool_calls', 41, ids), 41,
                                             ('budget_used_by_tool_call', False)),
        }
        for name, (twin, budget, expected) in cases.items():
            with self.subTest(name):
                kind, ended = self.verdict(twin, budget)
                self.assertEqual((kind, ended if twin is not None else None), expected)


if __name__ == '__main__':
    unittest.main()
