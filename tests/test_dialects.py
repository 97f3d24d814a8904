"""Dialects (_dialects): a server's known departures from its vendor's protocol, each with the proof of
completeness it needs instead, judged on streams written from the servers' own formatters."""
from __future__ import annotations

import json
import unittest

import fixture_server
import stream_client
from .support import dechunk, HERE, split_capture

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
    request = stream_client.prepare(f'http://127.0.0.1:9/v1/{api}', 'tiny', 'hi', max_tokens=4 if 'budget' in name else 16,
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
        expected = {'responses': 'sequence_number', 'messages': 'event_out_of_order', 'chat/completions': 'no_finish_reason'}
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

    def test_every_rule_states_its_proof_and_source(self):
        self.assertEqual(list(stream_client.DIALECTS), ['strict', 'llama.cpp', 'tgi'])
        self.assertEqual(stream_client.DIALECTS['strict'].rules, ())
        for dialect in stream_client.DIALECTS.values():
            for rule in dialect.rules:
                with self.subTest(rule.name):
                    self.assertTrue(rule.departs and rule.proof)
                    self.assertRegex(rule.source, r'(server-task\.cpp|chat\.rs)')
        with self.assertRaisesRegex(ValueError, 'dialect must be one of strict, llama.cpp, tgi'):
            stream_client.prepare('http://127.0.0.1:9/v1/chat/completions', 'tiny', 'hi', dialect='ollama')
