"""Every fixture mode's verdict, the fixture's command line and the vllm profile."""
from __future__ import annotations

import hashlib
import re
import json
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import types
import unittest
import urllib.request
from unittest import mock

import fixture_server
import stream_client
from stream_client import ChatChunks, stream
from .support import (
    ANSWER, APIS, chunk_json, dechunk, Fixture, FIXTURE_EXPECTED, FIXTURE_SCRIPT, HERE, in_threads,
    JSON_ANSWER, mode_runs, parse_all, replay, run_fixture, script_command, script_env, split_capture, SSE_HEAD,
    sse_response, SRC, TOOLS, TRACES, URL_PATHS, Verdict, with_body, AFTER_TOOL_RESULT)
from .tiers import sans_io


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


def for_run(value, api: str, profile: str):
    """A row's value for one api and profile."""
    if not isinstance(value, dict):
        return value
    return next(value[key] for key in (f'{api}/{profile}', api, profile, '') if key in value)


def fixture_record(mode: str, api: str, profile: str, **options) -> dict:
    with Fixture(mode, profile=profile) as fixture:
        url = fixture.url.replace('/v1/chat/completions', URL_PATHS[api])
        return stream(url, 'synthetic-fixture', 'READY', **options)


class FixtureVerdictTests(unittest.TestCase):
    EXPECTED = FIXTURE_EXPECTED

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

    @sans_io
    def test_the_timeline_stamps_each_read_with_its_time(self):
        # The reads of one response, each at a made-up time: every event of a read gets that read's time.
        def event(**delta: str) -> bytes:
            return f'data: {chunk_json(delta=delta)}\n\n'.encode()
        reads = [(1.0, SSE_HEAD + b'\r\n' + event(role='assistant')), (2.0, event(reasoning='think')),
                 (3.0, event(content='a')), (4.0, event(content='b') + event(content='c')),
                 (5.0, f'data: {chunk_json(finish_reason="stop")}\n\ndata: [DONE]\n\n'.encode())]
        reader, timeline = stream_client.ResponseReader(ChatChunks()), stream_client._exchange._Timeline()
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
            start, connect = stream_client._exchange._Timeline.start, socket.create_connection
            def logged_start(self):
                note('clock')
                start(self)
            def logged_connect(*args, **kwargs):
                sock = connect(*args, **kwargs)
                note('connected')
                return sock
            stream_client._exchange._Timeline.start, socket.create_connection = logged_start, logged_connect
            record = stream_client.stream(sys.argv[2], 'm', 'p')
            print(json.dumps([record['ok'], log]))
        ''')
        with Fixture(delay=0) as fixture:
            done = subprocess.run([sys.executable, '-c', code, SRC, fixture.url], capture_output=True,
                                  text=True, timeout=60, check=True)
        ok, log = json.loads(done.stdout)
        self.assertTrue(ok)
        self.assertEqual([what for what, _, _ in log[-2:]], ['clock', 'connected'])
        (_, modules_at_start, threads_at_start), (_, modules_connected, threads_connected) = log[-2:]
        self.assertEqual(sorted(set(modules_connected) - set(modules_at_start)), [])
        self.assertEqual(threads_connected, threads_at_start)

    @sans_io
    def test_buffering_rule(self):
        self.assertEqual([stream_client._record._buffered_delivery(events, reads) for events, reads in
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
        self.assertEqual((lowered['anthropic-version'], lowered['authorization']),
                         ('2023-06-01', 'Bearer sk-test-1234'))
        self.assertNotIn('x-api-key', lowered)
        self.assertEqual({key: body[key] for key in ('messages', 'system', 'stop_sequences', 'max_tokens',
                                                     'tool_choice', 'output_config')},
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

    @sans_io
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
               ('/v1/responses', {'extra': {'max_output_tokens': 3}},
                "may not set 'max_output_tokens'; use --max-tokens"),
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
        cases = {'/v1/models': 200, '/health': 200, '/v1/chat/completions': 405, '/metrics': 200, '/v1/metrics': 404}
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
                        if path == '/metrics':  # vLLM's, in the text format (tests/test_server_metrics.py)
                            self.assertIn(b'\n# TYPE vllm:num_requests_running gauge\n', body)
                        elif path == '/v1/models':
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
                    self.assertEqual(wrong['server_error'],
                                     {key: d2['error'][key] for key in ('message', 'type', 'code')})
        with Fixture(profile='vllm') as anything:  # without it, any model is answered
            self.assertTrue(stream(anything.url, 'whatever-a-proxy-sends', 'p')['ok'])

    def test_a_mixed_fixtures_error_status_says_mixed_chose_it(self):
        with Fixture('mixed', profile='vllm', seed=7) as fixture:
            records = [stream(fixture.url, 'm', 'p') for _ in range(40)]
        errors = {record['error'] for record in records if record['error_layer'] == 'http'}
        self.assertEqual(errors, {"http: expected status 200, got 503 Service Unavailable: 'the fixture in mixed "
                                  "mode served http-error to this request'"})  # the type and code repeated the status

    @sans_io
    def test_a_server_error_kind_is_kept_when_the_status_does_not_say_it(self):
        error = {'message': 'no', 'type': 'BadRequestError', 'code': 400}
        self.assertEqual(stream_client._validator._describe_server_error(error, ('400', 'Bad Request')),
                         "'no' (BadRequestError)")
        self.assertEqual(stream_client._validator._describe_server_error(error, ('503', 'Service Unavailable')),
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

    def test_sigterm_stops_it_as_ctrl_c_does_and_the_mixed_mode_says_what_it_served(self):
        server, url = self.start('--mode', 'mixed', '--seed', '3')
        stream(url, 'm', 'p')
        server.send_signal(signal.SIGTERM)
        out, err = server.communicate(timeout=30)
        self.assertEqual((server.returncode, err), (0, ''))
        self.assertRegex(out.splitlines()[-1], r'^served: [a-z-]+ 1$')

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


class ServerProfileTests(unittest.TestCase):
    """The servers beside vLLM, each in its own bytes: llama.cpp and TGI in their dialects, SGLang and Ollama
    under the vendor rules; each mode gets the verdict it gets from vLLM, and the record names the dialect."""

    # (profile, api, mode): (error_kind, dialect); the dialect modes of docs/dialects.md first
    CASES = {
        ('llama.cpp', 'responses', 'ok'): (None, 'llama.cpp'),
        ('llama.cpp', 'responses', 'reasoning'): (None, 'llama.cpp'),
        ('llama.cpp', 'responses', 'tool-call'): (None, 'llama.cpp'),
        ('llama.cpp', 'responses', 'length'): ('budget_exhausted', 'llama.cpp'),  # its status says completed
        ('llama.cpp', 'responses', 'broken'): ('eof_before_done', 'llama.cpp'),
        ('llama.cpp', 'messages', 'reasoning'): (None, 'llama.cpp'),
        ('llama.cpp', 'messages', 'length'): ('budget_exhausted', 'llama.cpp'),
        ('llama.cpp', 'chat', 'ok'): (None, 'llama.cpp'),
        ('tgi', 'chat', 'tool-call'): (None, 'tgi'),
        ('tgi', 'chat', 'tool-args-cut'): ('tool_arguments_not_json', 'tgi'),
        ('tgi', 'chat', 'broken'): ('eof_before_done', 'tgi'),
        ('tgi', 'chat', 'length'): ('budget_exhausted', 'tgi'),
        ('sglang', 'chat', 'ok'): (None, None),
        ('sglang', 'chat', 'length'): ('budget_exhausted', None),
        ('ollama', 'chat', 'ok'): (None, None),
        ('ollama', 'chat', 'error-event'): ('server_error_event', None),
    }

    def test_each_server_profile_gets_its_verdict_and_dialect(self):
        for (profile, api, mode), (kind, dialect) in self.CASES.items():
            with self.subTest(profile=profile, api=api, mode=mode):
                tools = fixture_server.TOOLS if mode.startswith('tool') else None
                record = fixture_record(mode, api, profile, tools=tools)
                self.assertEqual((record['ok'], record['error_kind'], record['dialect'], record['source']),
                                 (kind is None, kind, dialect, 'fixture'), record['error'])

    def test_the_vendor_rules_refuse_the_dialects(self):
        for (profile, api, mode), kind in {('llama.cpp', 'responses', 'ok'): 'sequence_number',
                                           ('llama.cpp', 'messages', 'reasoning'): 'event_out_of_order',
                                           ('tgi', 'chat', 'tool-call'): 'no_finish_reason'}.items():
            with self.subTest(profile=profile, api=api, mode=mode):
                record = fixture_record(mode, api, profile,
                                        tools=fixture_server.TOOLS if mode.startswith('tool') else None,
                                        dialect='strict')
                self.assertEqual((record['ok'], record['error_kind'], record['dialect']), (False, kind, 'strict'))

    def test_ollamas_error_line_is_kept_and_shown(self):
        record = fixture_record('error-event', 'chat', 'ollama')
        self.assertEqual(record['server_error']['message'], fixture_server.ENGINE_CRASH)
        self.assertEqual(len(record['stray_lines']), 1)
        self.assertIn(fixture_server.ENGINE_CRASH, record['error'])


class AgentModeTests(unittest.TestCase):
    """The agent mode: a tool call after a user turn when tools are offered, text after a tool result,
    the prompt counted with prompt_tokens(), and turn N cut on request."""

    AGENT_APIS = ('chat', 'responses', 'messages')

    def agent_run(self, fixture: Fixture, api: str, body: dict | None = None, prompt: str = 'weather?',
                  tools: list | None = fixture_server.TOOLS) -> dict:
        request = stream_client.prepare(fixture.url.replace('/v1/chat/completions', URL_PATHS[api]),
                                        'synthetic-fixture', prompt, tools=tools, idle=2)
        if body is not None:
            request = with_body(request, {**json.loads(request.body), **body})
        return stream_client.run(request)

    def test_a_user_turn_with_tools_gets_a_call_and_a_tool_result_gets_text(self):
        with Fixture('agent', profile='vllm', record=True) as fixture:
            for api in self.AGENT_APIS:
                with self.subTest(api=api):
                    called = self.agent_run(fixture, api)
                    self.assertTrue(called['ok'], called['error'])
                    self.assertEqual([(c['name'], c['arguments']) for c in called['tool_calls']],
                                     [('get_weather', '{"city": "Paris"}')])
                    answered = self.agent_run(fixture, api, AFTER_TOOL_RESULT[api])
                    self.assertTrue(answered['ok'], answered['error'])
                    self.assertEqual((answered['text'], answered['tool_calls']), (''.join(ANSWER), []))
                    plain = self.agent_run(fixture, api, tools=None)
                    self.assertEqual((plain['ok'], plain['text'], plain['tool_calls']), (True, ''.join(ANSWER), []))
            received = fixture.instance.received
            self.assertEqual([(a.api, a.turn, a.calls != ()) for a in received],
                             [(api, 1, called) for api in self.AGENT_APIS for called in (True, False, False)])

    def test_the_usage_counts_the_prompt_deterministically(self):
        body = AFTER_TOOL_RESULT['chat']
        # every string of the conversation, split on spaces: roles, contents, ids, names, arguments, types
        self.assertEqual(fixture_server.prompt_tokens('chat', body), 11)
        for api in self.AGENT_APIS:
            with self.subTest(api=api), Fixture('agent', profile='vllm') as fixture:
                request = stream_client.prepare(fixture.url.replace('/v1/chat/completions', URL_PATHS[api]),
                                                'synthetic-fixture', 'x', tools=fixture_server.TOOLS)
                request = with_body(request, {**json.loads(request.body), **AFTER_TOOL_RESULT[api]})
                capture = stream_client.Capture()
                record = stream_client.run(request, capture=capture)
                self.assertTrue(record['ok'])
                expected = fixture_server.prompt_tokens(api, json.loads(request.body))
                self.assertEqual(record['prompt_tokens'], expected)  # the record keeps the server's count
                usage = re.findall(rb'"(?:prompt|input)_tokens":(\d+)', capture.data)
                self.assertTrue(usage)
                self.assertEqual({int(n) for n in usage}, {expected})

    def test_turn_n_of_the_named_session_is_cut(self):
        two_turns = {'chat': [{'role': 'user', 'content': 'session B: weather?'},
                              {'role': 'assistant', 'content': 'READY'}, {'role': 'user', 'content': 'again?'}]}
        with Fixture('agent', cut_turn=2, cut_session='session B') as fixture:
            first = self.agent_run(fixture, 'chat', {'messages': two_turns['chat'][:1]})
            self.assertTrue(first['ok'], first['error'])
            cut = self.agent_run(fixture, 'chat', {'messages': two_turns['chat']})
            self.assertEqual((cut['error_layer'], cut['error_kind']), ('application', 'tool_arguments_not_json'))
            other = {'messages': [{**two_turns['chat'][0], 'content': 'session A'}, *two_turns['chat'][1:]]}
            self.assertTrue(self.agent_run(fixture, 'chat', other)['ok'])
            text_cut = self.agent_run(fixture, 'chat', {'messages': two_turns['chat']}, tools=None)
            self.assertFalse(text_cut['ok'])
            self.assertEqual(text_cut['error_layer'], 'transport')

    @sans_io
    def test_the_cut_settings_are_checked(self):
        for settings, words in (({'cut_turn': 0}, 'turn number'), ({'cut_session': 'x'}, 'give cut_turn'),
                                ({'cut_turn': 2, 'mode': 'ok'}, 'agent mode')):
            with self.subTest(settings=settings), self.assertRaisesRegex(ValueError, words):
                fixture_server.server(0, **{'mode': 'agent', **settings})
