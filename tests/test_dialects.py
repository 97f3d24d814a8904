"""Dialects (_dialects): a server's known departures from its vendor's protocol, each with the proof of
completeness it needs instead, judged on streams written from the servers' own formatters."""
from __future__ import annotations

import json
import unittest

import fixture_server
import stream_client
from .support import dechunk, HERE, split_capture
from .tiers import sans_io

STREAMS = HERE / 'testdata' / 'dialects' / 'streams'
# each stream written from its server's formatter: its API, whether --tools went with it, and the
# verdict under its dialect (max_tokens 16; 4 for the budget streams, whose usage reached it)
VERDICTS = {
    'llama_responses_text': ('responses', False, None),
    'llama_responses_reasoning': ('responses', False, None),
    'llama_responses_tool_call': ('responses', True, None),
    'llama_responses_budget_used': ('responses', False, 'budget_exhausted'),
    'llama_messages_thinking': ('messages', False, None),
    'llama_messages_thinking_tool_call': ('messages', True, None),
    'llama_messages_thinking_budget': ('messages', False, 'budget_exhausted'),
    'tgi_tool_call': ('chat/completions', True, None),
    'tgi_tool_call_budget': ('chat/completions', True, 'budget_exhausted'),
    'tgi_tool_call_not_json': ('chat/completions', True, 'tool_arguments_not_json'),
}


def judge_bytes(name: str, raw: bytes, dialect: str | None = None) -> tuple[stream_client.Verdict, dict]:
    api, tools, _ = VERDICTS[name]
    request = stream_client.prepare(f'http://127.0.0.1:9/v1/{api}', 'tiny', 'hi',
                                    max_tokens=4 if 'budget' in name else 16,
                                    tools=fixture_server.TOOLS if tools else None, dialect=dialect)
    reader = stream_client.ResponseReader(request.new_validator())
    reader.feed(raw)
    reader.eof()
    return stream_client.judge(reader, None, None), reader.validator.fields()


def events_of(name: str) -> tuple[bytes, list[bytes]]:
    """A stream's head (without its framing headers) and its events, each with its blank line."""
    head, body = split_capture(STREAMS / f'{name}.http')
    lines = [line for line in head.split(b'\r\n') if line and not line.lower().startswith(b'transfer-encoding')]
    return b'\r\n'.join(lines) + b'\r\n', [event + b'\n\n' for event in dechunk(body).split(b'\n\n') if event]


@sans_io
class DialectTests(unittest.TestCase):
    def test_each_stream_gets_its_verdict_under_its_dialect_detected_or_named(self):
        for name, (_, _, kind) in VERDICTS.items():
            dialect = 'tgi' if name.startswith('tgi') else 'llama.cpp'
            for given in (None, dialect):
                with self.subTest(name, given=given):
                    verdict, fields = judge_bytes(name, (STREAMS / f'{name}.http').read_bytes(), given)
                    self.assertEqual((verdict.ok, verdict.kind), (kind is None, kind), verdict.message)
                    self.assertEqual(fields['dialect'], dialect)
                    detected = [note for note in fields['notes'] if note.startswith('dialect ')]
                    self.assertEqual(len(detected), 1 if given is None else 0, fields['notes'])

    def test_the_vendor_rules_refuse_each_departure(self):
        expected = {'responses': 'sequence_number', 'messages': 'event_out_of_order',
                    'chat/completions': 'no_finish_reason'}
        for name, (api, _, kind) in VERDICTS.items():
            with self.subTest(name):
                verdict, fields = judge_bytes(name, (STREAMS / f'{name}.http').read_bytes(), 'strict')
                self.assertFalse(verdict.ok)
                self.assertIn(verdict.kind, (expected[api], kind))
                self.assertEqual((fields['dialect'], fields['notes']), ('strict', []))

    def test_a_stream_cut_at_any_event_boundary_is_never_ok(self):
        # the message itself ends cleanly (Content-Length) after each event: only the grammar and the
        # dialect's proof can tell that the answer did not finish
        for name, (_, _, kind) in VERDICTS.items():
            if kind is not None:
                continue
            head, events = events_of(name)
            for cut in range(len(events)):
                body = b''.join(events[:cut])
                raw = head + b'Content-Length: %d\r\n\r\n' % len(body) + body
                with self.subTest(name, events=cut):
                    self.assertFalse(judge_bytes(name, raw)[0].ok)
            body = b''.join(events)
            self.assertTrue(judge_bytes(name, head + b'Content-Length: %d\r\n\r\n' % len(body) + body)[0].ok, name)

    def test_llama_responses_without_usage_cannot_be_proven_finished(self):
        head, events = events_of('llama_responses_text')
        last = json.loads(events[-1].split(b'data: ', 1)[1])
        del last['response']['usage']
        events[-1] = b'event: response.completed\ndata: ' + json.dumps(last).encode() + b'\n\n'
        body = b''.join(events)
        verdict, _ = judge_bytes('llama_responses_text', head + b'Content-Length: %d\r\n\r\n' % len(body) + body)
        self.assertEqual((verdict.ok, verdict.layer, verdict.kind), (False, 'application', 'dialect_unproven'))
        self.assertIn('without usage.output_tokens', verdict.message)

    def test_llama_responses_an_event_for_no_item_is_refused(self):
        head, events = events_of('llama_responses_text')
        events.insert(5, b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta",'
                         b'"item_id":"msg_nowhere","delta":"x"}\n\n')
        body = b''.join(events)
        verdict, _ = judge_bytes('llama_responses_text', head + b'Content-Length: %d\r\n\r\n' % len(body) + body)
        self.assertEqual((verdict.ok, verdict.kind), (False, 'part_not_open'), verdict.message)

    def test_tgi_is_detected_from_its_system_fingerprint(self):
        head, events = events_of('tgi_tool_call')
        head = head.replace(b'x-compute-type: cpu\r\n', b'')
        body = b''.join(events)
        verdict, fields = judge_bytes('tgi_tool_call', head + b'Content-Length: %d\r\n\r\n' % len(body) + body)
        self.assertTrue(verdict.ok, verdict.message)
        self.assertEqual(fields['notes'], ["dialect tgi detected from system_fingerprint '3.3.6-native' (TGI)"])

    def test_tgi_calls_must_match_their_schema(self):
        head, events = events_of('tgi_tool_call')
        body = b''.join(events).replace(b'"city', b'"town')
        verdict, _ = judge_bytes('tgi_tool_call', head + b'Content-Length: %d\r\n\r\n' % len(body) + body)
        self.assertEqual((verdict.ok, verdict.kind), (False, 'tool_arguments_schema'), verdict.message)

    def test_tgi_excuses_the_missing_finish_only_for_the_one_call_it_sends(self):
        # TGI's router streams one call at most (router/src/chat.rs: its grammar is one {"function": ...}
        # object, every delta names index 0) and no text beside it: any other shape is judged strictly
        head, events = events_of('tgi_tool_call')
        call_events, done = events[:-1], events[-1]
        second = [event.replace(b'"id":"0","index":0', b'"id":"1","index":1') for event in call_events]
        text = call_events[0].split(b'"delta":', 1)[0] + (b'"delta":{"content":"Let me look.","role":"assistant"},'
                                                          b'"finish_reason":null,"index":0,"logprobs":null}],'
                                                          b'"created":1796170000,"id":"","model":"tiny",'
                                                          b'"object":"chat.completion.chunk",'
                                                          b'"system_fingerprint":"3.3.6-native","usage":null}\n\n')
        shapes = {'two calls': call_events + second + [done], 'text, then the call': [text] + call_events + [done]}
        for shape, kept in shapes.items():
            body = b''.join(kept)
            for dialect in (None, 'tgi'):
                with self.subTest(shape, dialect=dialect):
                    verdict, fields = judge_bytes('tgi_tool_call',
                                                  head + b'Content-Length: %d\r\n\r\n' % len(body) + body, dialect)
                    self.assertEqual((verdict.ok, verdict.kind, fields['dialect']), (False, 'no_finish_reason', 'tgi'),
                                     verdict.message)
                    self.assertIn('one tool call alone', verdict.message)
        body = b''.join(events)  # the shape TGI sends is still ok
        self.assertTrue(judge_bytes('tgi_tool_call', head + b'Content-Length: %d\r\n\r\n' % len(body) + body)[0].ok)

    def test_every_rule_states_its_proof_and_source(self):
        self.assertEqual(list(stream_client.DIALECTS), ['strict', 'llama.cpp', 'tgi', 'litellm'])
        self.assertEqual(stream_client.DIALECTS['strict'].rules, ())
        for dialect in stream_client.DIALECTS.values():
            for rule in dialect.rules:
                with self.subTest(rule.name):
                    self.assertTrue(rule.departs and rule.proof)
                    self.assertRegex(rule.source, r'(server-task\.cpp|chat\.rs|testdata/litellm)')
        with self.assertRaisesRegex(ValueError, 'dialect must be one of strict, llama.cpp, tgi, litellm'):
            stream_client.prepare('http://127.0.0.1:9/v1/chat/completions', 'tiny', 'hi', dialect='ollama')


LITELLM_RESPONSES = HERE / 'testdata' / 'litellm-1.108.7' / 'e3_responses_budget.http'


def litellm_responses(finished: bool = False) -> tuple[bytes, list[bytes]]:
    """LiteLLM's real Responses stream (its budget cut it) as a head and events; ``finished``: the same
    stream as it would end had the model stopped by itself (status "completed", no incomplete_details)."""
    head, body = split_capture(LITELLM_RESPONSES)
    head = b'\r\n'.join(line for line in head.split(b'\r\n') if line and not line.lower().startswith(b'transfer-'))
    events = [event + b'\n\n' for event in dechunk(body).split(b'\n\n') if event]
    if finished:
        events[-2] = events[-2].replace(b'"incomplete_details":{"reason":"max_output_tokens"}',
                                        b'"incomplete_details":null').replace(b'"status":"incomplete"',
                                                                              b'"status":"completed"')
    return head + b'\r\n', events


def judge_litellm(head: bytes, events: list[bytes], dialect: str | None = None) -> tuple[stream_client.Verdict, dict]:
    request = stream_client.prepare('http://127.0.0.1:9/v1/responses', 'tiny', 'hi', max_tokens=16, dialect=dialect)
    reader = stream_client.ResponseReader(request.new_validator())
    body = b''.join(events)
    reader.feed(head + b'Content-Length: %d\r\n\r\n' % len(body) + body)
    reader.eof()
    return stream_client.judge(reader, None, None), reader.validator.fields()


@sans_io
class LiteLLMDialectTests(unittest.TestCase):
    """LiteLLM's Responses stream: no event: lines, and data: [DONE] after response.completed."""

    def test_the_real_stream_is_judged_by_its_answer_under_the_detected_dialect(self):
        head, events = litellm_responses()
        self.assertEqual((events[0][:6], events[-1]), (b'data: ', b'data: [DONE]\n\n'))  # no event: line
        verdict, fields = judge_litellm(head, events)
        self.assertEqual((verdict.ok, verdict.kind, fields['dialect']), (False, 'budget_exhausted', 'litellm'))
        self.assertIn('dialect litellm detected from the x-litellm-version header (LiteLLM)', fields['notes'])
        verdict, _ = judge_litellm(head, events, 'strict')
        self.assertEqual(verdict.kind, 'event_type_mismatch')

    def test_a_finished_stream_is_ok_with_or_without_its_done_and_never_when_cut(self):
        head, events = litellm_responses(finished=True)
        for kept in (events, events[:-1]):
            verdict, fields = judge_litellm(head, kept)
            self.assertEqual((verdict.ok, fields['dialect']), (True, 'litellm'), verdict.message)
        for cut in range(1, len(events) - 1):
            with self.subTest(cut=cut):
                self.assertFalse(judge_litellm(head, events[:cut])[0].ok)

    def test_only_one_done_after_the_terminal_event_and_a_present_event_line_must_agree(self):
        head, events = litellm_responses(finished=True)
        for extra, kind in ((b'data: [DONE]\n\n', 'event_after_terminal'), (events[3], 'event_after_terminal')):
            with self.subTest(extra=extra[:20]):
                self.assertEqual(judge_litellm(head, events + [extra])[0].kind, kind)
        wrong = events[:2] + [b'event: response.completed\n' + events[2]] + events[3:]
        self.assertEqual(judge_litellm(head, wrong)[0].kind, 'event_type_mismatch')


HOSTILE_LITELLM = HERE / 'testdata' / 'hostile-litellm'


@sans_io
class HostileLiteLLMTests(unittest.TestCase):
    """The litellm dialect's cases, written from docs/dialects.md and the real capture by someone who had
    not read this code (testdata/hostile-litellm/README.md), each judged without a socket."""

    def test_each_case_gets_its_verdict(self):
        cases = json.loads((HOSTILE_LITELLM / 'cases.json').read_text())
        self.assertGreaterEqual(len(cases), 40)
        for case in cases:
            with self.subTest(case['name']):
                args = case['args']
                dialect = args[args.index('--dialect') + 1] if '--dialect' in args else None
                request = stream_client.prepare('http://127.0.0.1:9/v1/responses', 'tiny', 'hi', dialect=dialect,
                                                max_tokens=int(args[args.index('--max-tokens') + 1]))
                reader = stream_client.ResponseReader(request.new_validator())
                reader.feed((HOSTILE_LITELLM / 'cases' / case['files'][0]).read_bytes())
                reader.eof()
                verdict = stream_client.judge(reader)
                # any layer
                layer = case['expect_layer'] if case['expect_ok'] or case['expect_layer'] else verdict.layer
                expected = (case['expect_ok'], layer, case['expect_kind'] or verdict.kind)
                self.assertEqual((verdict.ok, verdict.layer, verdict.kind), expected,
                                 f'{verdict.message}; {case["rule"]}')
