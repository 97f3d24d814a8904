"""Transport (_exchange, _transport, _record): TLS, proxies, timeouts, captures and arrival stamps."""
from __future__ import annotations

import base64
import contextlib
import dataclasses
import json
import os
import re
import select
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from pathlib import Path
from unittest import mock

import fixture_server
import stream_client
from stream_client import stream
from stream_client._limits import _ANSWER_LINE_CHARS
from .support import (
    ANSWER_EVENTS, chunk_json, chunked, CLIENT, Fixture, in_threads, LoopbackServer, read_request, replay,
    resolving_llm_test_to_loopback, run_cli, split_capture, SSE_HEAD, sse_response, TLS,
    TRACES, TwinServer)
from .tiers import sans_io


def answer_options(capture: str) -> dict:
    """stream()'s api, tools, tool_choice and json_schema, as the request of a capture asked for them."""
    request = json.loads((TRACES / f'{capture}.request.json').read_text())
    body = request.get('body', request)
    api = stream_client._request._API_PATHS.get(request.get('path'), 'chat')
    tools, choice = body.get('tools'), body.get('tool_choice')
    if tools and api == 'responses':  # back to the chat-completions shape that --tools takes
        tools = [{'type': 'function', 'function': {k: v for k, v in tool.items() if k != 'type'}} for tool in tools]
    if tools and api == 'messages':
        tools = [{'type': 'function', 'function': {'name': tool['name'], 'parameters': tool['input_schema']}}
                 for tool in tools]
        choice = {'any': 'required'}.get(choice['type'], choice.get('name') or choice['type'])
    if isinstance(choice, dict):
        choice = (choice.get('function') or choice)['name']
    schema = (((body.get('response_format') or {}).get('json_schema') or {}).get('schema')
              or ((body.get('text') or {}).get('format') or {}).get('schema'))
    return {'api': api, 'tools': tools, 'tool_choice': choice, 'json_schema': schema}


class CaptureReplayTests(unittest.TestCase):
    def test_real_vllm_captures_get_their_verdicts(self):
        length = 'application: output budget exhausted (finish_reason=length)'
        expected = {
            'a2_chat_stream_usage_eos_stop.http': (True, None),
            'a3_chat_stream_usage_stopstring.http': (True, None),
            'a1_chat_stream_usage_max16_length.http': (False, length),
            'b1_chat_stream_usage_max1_length.http': (False, length),
            'v1_chat_stream_max64.http': (False, 'finish_reason=length'),
            'd1_err_stream_max_tokens_too_big.http':
                (False, 'http: expected status 200, got 400 Bad Request: '
                        "'max_tokens=100000 cannot be greater than max_model_len=512"),
            'd2_err_stream_unknown_model.http':
                (False, "http: expected status 200, got 404 Not Found: 'The model `nope` does not exist."),
            'z1_engine_crash_midstream_error_http200.http':
                (False, "application: server sent an error event: 'EngineCore encountered an issue."),
        }
        for capture, (ok, words) in expected.items():
            with self.subTest(capture=capture):
                record = replay((TRACES / capture).read_bytes())
                self.assertEqual(record['ok'], ok, record['error'])
                if words:
                    self.assertIn(words, record['error'])
                else:
                    self.assertEqual((record['transport_complete'], record['http']['framing']), (True, 'chunked'))

    def test_real_completions_and_responses_captures_get_their_verdicts(self):
        expected = {
            'g2_completions_stream_usage.http': ('completions', 'application: output budget exhausted '
                                                                '(finish_reason=length)', 'SS\ufffdVE', 4),
            'c3_completions_stream_max8_length.http': ('completions', 'finish_reason=length', None, 8),
            'r1_responses_stream_max16_incomplete.http':
                ('responses', "application: output budget exhausted: response.completed carries status 'incomplete' "
                              '(incomplete_details.reason=max_output_tokens)', None, 16),
            'r2_responses_stream_stopstring_completed.http': ('responses', None, 'Ex7rEx7untrgExp', 9),
            'r5_err_responses_stream_too_many_tokens.http':
                ('responses', "http: expected status 200, got 400 Bad Request: 'max_output_tokens=100000 cannot be "
                              'greater than max_model_len=512', '', None),
        }
        for capture, (api, words, text, tokens) in expected.items():
            with self.subTest(capture=capture):
                record = replay((TRACES / capture).read_bytes(), api=api)
                self.assertEqual((record['api'], record['ok'], record['completion_tokens']),
                                 (api, words is None, tokens), record['error'])
                self.assertIn(words or '', record['error'] or '')
                if text is not None:
                    self.assertEqual(record['text'], text)
        r1 = replay((TRACES / 'r1_responses_stream_max16_incomplete.http').read_bytes(), api='responses')
        self.assertEqual((r1['response_status'], r1['incomplete_reason'], r1['finish_reason'], r1['done']),
                         ('incomplete', 'max_output_tokens', None, True))
        self.assertEqual(r1['response_id'], 'resp_967796df2251c8be')
        r5 = replay((TRACES / 'r5_err_responses_stream_too_many_tokens.http').read_bytes(), api='responses')
        self.assertEqual((r5['server_error']['type'], r5['server_error']['code']), ('BadRequestError', 400))

    def test_real_tool_call_and_json_captures_get_their_verdicts(self):
        budget = 'application: output budget exhausted (finish_reason=length)'
        budget_r = ("application: output budget exhausted: response.completed carries status 'incomplete' "
                    '(incomplete_details.reason=max_output_tokens)')
        out_of_range = ("application: tool call 0 (get_weather): the arguments are not JSON (the number 26e00008859 is "
                        "out of range (it would be inf)): '26e00008859'")
        expected = {  # capture: (error, answer_kind, [(name, arguments) of each call])
            't1_chat_tool_required_max64_number_cut_by_length': (budget + ' inside tool call 0 (get_weather)',
                                                                 'tool_calls', 1),
            't2_chat_tool_required_three_calls_not_objects': (out_of_range, 'tool_calls',
                                                              [('get_weather', '26e00008859'), ('get_weather', '1'),
                                                               ('get_weather', 'false')]),
            't3_chat_tool_named_finish_stop_number_out_of_range': (out_of_range, 'tool_calls', 1),
            't4_chat_tool_required_max16_no_call_yet': (budget, 'text', []),
            't5_chat_json_schema_whitespace_runaway': (budget, 'json', []),
            't6_chat_tool_valid_empty_object': (None, 'tool_calls', [('get_time', '{}')]),
            't7_chat_tool_args_array': ("application: tool call 0 (get_weather): arguments are not a JSON object: '[]'",
                                        'tool_calls', [('get_weather', '[]')]),
            't8_chat_tool_args_missing_required_key': ('application: tool call 0 (get_weather): the arguments do not '
                                                       'match its parameters: $.city: required, but missing',
                                                       'tool_calls', [('get_weather', '{}')]),
            't9_chat_json_schema_ok': (None, 'json', []),
            'r6_responses_tool_required_incomplete': (budget_r + ' inside tool call 0 (get_weather)', 'tool_calls', 1),
            'r7_responses_json_schema_runaway_incomplete': (budget_r, 'json', []),
            'r8_responses_tool_required_completed_not_objects': (out_of_range, 'tool_calls', 3),
            'r9_responses_tool_valid_empty_object': (None, 'tool_calls', [('get_time', '{}')]),
            'r10_responses_json_schema_ok': (None, 'json', []),
        }
        answers = [path.stem for path in TRACES.glob('*.http')  # every chat or Responses tool call or JSON answer
                   if path.stem.startswith('t') or re.match(r'r([6-9]|\d\d)_', path.stem)]
        self.assertEqual(sorted(expected), sorted(answers))
        for name, (error, kind, calls) in expected.items():
            with self.subTest(capture=name):
                record = replay((TRACES / f'{name}.http').read_bytes(), **answer_options(name))
                self.assertEqual((record['ok'], record['error'], record['answer_kind']), (error is None, error, kind))
                seen = [(call['name'], call['arguments']) for call in record['tool_calls']]
                self.assertEqual(len(seen) if isinstance(calls, int) else seen, calls)
                self.assertEqual([call['arguments_problem'] is None for call in record['tool_calls']],
                                 [error is None] * len(seen))
                if kind == 'json' and error is None:
                    self.assertEqual(record['text'], '{}')

    def test_real_messages_captures_get_their_verdicts(self):
        expected = {  # capture: (error, finish_reason, text, tool-call arguments)
            'm1_messages_stream_stop_sequence': (None, 'stop_sequence', 'Ex7rEx7untrgExp', []),
            'm2_messages_stream_max8_max_tokens': ('application: output budget exhausted (stop_reason=max_tokens)',
                                                   'max_tokens', 'Ex7rEx7untrgEx', []),
            'm3_err_messages_unknown_model': ("http: expected status 200, got 404 Not Found: 'The model `nope` does "
                                              "not exist. Valid aliases: tiny.' (NotFoundError)", None, '', []),
            'm4_messages_tool_any_not_an_object': ("application: tool call 0 (get_weather): arguments are not a JSON "
                                                   "object: '10532112110000'", 'tool_use', '', ['10532112110000']),
            'm5_messages_tool_any_empty_string': ("application: tool call 0 (get_weather): arguments are not a JSON "
                                                  "object: '\"\"'", 'tool_use', '', ['""']),
        }
        self.assertEqual(sorted(expected), sorted(path.stem for path in TRACES.glob('m*.http')))
        for name, (error, finish, text, arguments) in expected.items():
            with self.subTest(capture=name):
                record = replay((TRACES / f'{name}.http').read_bytes(), **answer_options(name))
                self.assertEqual((record['api'], record['ok'], record['error'], record['finish_reason'],
                                  record['text']),
                                 ('messages', error is None, error, finish, text))
                self.assertEqual([call['arguments'] for call in record['tool_calls']], arguments)
        m3 = replay((TRACES / 'm3_err_messages_unknown_model.http').read_bytes(), api='messages')
        self.assertEqual(m3['server_error'], {'message': 'The model `nope` does not exist. Valid aliases: tiny.',
                                              'type': 'NotFoundError', 'code': None})
        m1 = replay((TRACES / 'm1_messages_stream_stop_sequence.http').read_bytes(), api='messages')
        self.assertEqual((m1['completion_tokens'], m1['response_id']), (9, 'chatcmpl-a61c05345a434ea5'))

    def test_server_killed_midstream_is_a_transport_failure(self):
        record = replay((TRACES / 'k1_server_killed_midstream.http').read_bytes())
        self.assertEqual(record['error'],
                         'transport: chunked body ended without its terminating chunk after 39374 body bytes')
        self.assertEqual((record['transport_complete'], record['event_complete'], record['content_events']),
                         (False, True, 167))

    def test_http_errors_keep_the_servers_fields(self):
        record = replay((TRACES / 'd1_err_stream_max_tokens_too_big.http').read_bytes())
        self.assertEqual(record['server_error']['type'], 'BadRequestError')
        self.assertEqual(record['server_error']['code'], 400)
        self.assertEqual(record['http']['body_bytes'], 213)

    def test_split_emoji_capture_gives_exact_text(self):
        record = replay((TRACES / 'u2_chat_stream_emoji_split_tokens.http').read_bytes())
        self.assertEqual(record['source'], 'replay')  # the fixture marks a replayed head
        self.assertEqual(record['text'], '\ufffd\ufffd\U0001f600\U0001f600')
        self.assertEqual(record['response_id'], 'chatcmpl-9d93a102b876c169')

    def test_request_id_header_is_recorded(self):
        head, body = split_capture(TRACES / 'a2_chat_stream_usage_eos_stop.http')
        head = head.replace(b'vary: Origin\r\n', b'vary: Origin\r\nx-request-id: req-42\r\n')
        self.assertEqual(replay(head + body)['request_id'], 'req-42')

    def test_cut_chunked_body_is_a_transport_failure_even_with_done_inside(self):
        head, body = split_capture(TRACES / 'a2_chat_stream_usage_eos_stop.http')
        record = replay(head + body[:-5])
        self.assertEqual((record['error_layer'], record['transport_complete'], record['application_complete']),
                         ('transport', False, True))
        self.assertIn('without its terminating chunk', record['error'])
        record = replay(head + body[:400])
        self.assertEqual(record['error_layer'], 'transport')
        self.assertIn('inside a chunk', record['error'])

    def test_overlong_and_invalid_framing_fail_at_the_transport(self):
        record = replay(sse_response(b'data: [DONE]\n\nextra', headers='Content-Length: 14\r\n'))
        self.assertEqual(record['error'], 'transport: 5 bytes beyond the declared Content-Length of 14')
        record = replay(sse_response(b'zz\r\n', headers='Transfer-Encoding: chunked\r\n'))
        self.assertIn("transport: invalid chunk size line b'zz'", record['error'])

    def test_a_replay_says_it_closes_so_a_kept_alive_load_is_never_stale(self):
        capture = (TRACES / 'a2_chat_stream_usage_eos_stop.http').read_bytes()
        records: list[dict] = []
        with Fixture(replay=capture) as fixture:
            requests = [stream_client.prepare(fixture.url, 'tiny', 'hi', idle=2)]
            stream_client.run_load(requests, stream_client.LoadSettings(runs=3, keep_alive=True), records.append,
                                   stream_client.Cancel())
        self.assertEqual([(r['ok'], r['error_kind'], r['connection']['reused']) for r in records],
                         [(True, None, False)] * 3)
        self.assertIn(['connection', 'close'], records[0]['http']['headers'])

    def test_close_delimited_body_ends_at_close(self):
        good = (chunk_json(delta={'content': 'hi'}), chunk_json(finish_reason='stop'), '[DONE]')
        body = ''.join(f'data: {data}\n\n' for data in good).encode()
        record = replay(sse_response(body))
        self.assertTrue(record['ok'], record['error'])
        self.assertEqual(record['http']['framing'], 'close')

    def test_wrong_content_type_and_transfer_coding_are_http_failures(self):
        record = replay(b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n{}')
        self.assertEqual(record['error'], "http: expected content-type text/event-stream, got 'application/json'")
        record = replay(sse_response(b'', headers='Transfer-Encoding: gzip, chunked\r\n'))
        self.assertIn('unsupported transfer-encoding', record['error'])

    def test_deeply_nested_json_becomes_an_error_record(self):
        body = b'data: ' + b'[' * 20_000 + b'\n\n'
        record = replay(sse_response(body, headers=f'Content-Length: {len(body)}\r\n'))
        self.assertEqual(record['error_layer'], 'protocol')
        json.dumps(record)

    def test_refused_connection_is_a_connect_failure(self):
        with socket.create_server(('127.0.0.1', 0)) as probe:
            port = probe.getsockname()[1]
        record = stream(f'http://127.0.0.1:{port}/v1/chat/completions', 'm', 'p')
        self.assertEqual(record['error_layer'], 'connect')
        self.assertIn(f'cannot connect to 127.0.0.1:{port}', record['error'])
        self.assertTrue(record['error'].endswith('; is the server running, and listening on that port?'))
        if socket.has_ipv6:
            try:
                with socket.create_server(('::1', 0), family=socket.AF_INET6) as probe:
                    port = probe.getsockname()[1]
            except OSError:
                return  # no IPv6 loopback here
            record = stream(f'http://[::1]:{port}/v1/chat/completions', 'm', 'p')
            self.assertIn(f'cannot connect to [::1]:{port}: ', record['error'])

    @sans_io
    def test_a_url_without_scheme_or_path_gets_an_example(self):
        for url, hint in (('localhost:8000', 'did you mean http://localhost:8000/v1/chat/completions?'),
                          ('http://127.0.0.1:8000/v1', 'did you mean /v1/chat/completions?'),
                          ('http://127.0.0.1:8000/v1/', 'did you mean /v1/chat/completions?')):
            with self.subTest(url=url), self.assertRaises(ValueError) as caught:
                stream_client.prepare(url, 'm', 'p')
            self.assertIn(hint, str(caught.exception))

    @sans_io
    def test_invalid_arguments_raise_before_connecting(self):
        bad = [('ftp://127.0.0.1/v1/chat/completions', {}), ('https://user:secret@example.com/v1/chat/completions', {}),
               ('http://192.0.2.1:8000/v1/chat/completions', {}), ('http://127.0.0.1:8000/x?q=1', {}),
               ('http://127.0.0.1:8000/x#f', {}), ('http:///v1', {}), ('http://127.0.0.1:99999/x', {}),
               ('http://127.0.0.1/x', {'idle': float('nan')}), ('http://127.0.0.1/x', {'deadline': float('inf')}),
               ('http://127.0.0.1/x', {'idle': -1}), ('http://127.0.0.1/x', {'max_tokens': 0}),
               ('http://127.0.0.1/x', {'max_tokens': 32769}), ('http://127.0.0.1/x', {'token': 'a\nb'}),
               ('http://127.0.0.1/x', {'temperature': -0.5}), ('http://127.0.0.1/x', {'stop': 'x'}),
               ('http://127.0.0.1/x', {'extra': [1]}),
               ('https://localhost/x', {'ca_file': '/nonexistent/ca.pem'})]
        for url, kwargs in bad:
            with self.subTest(url=url, **kwargs), self.assertRaises(ValueError) as caught:
                stream(url, 'demo', 'hi', **kwargs)
            self.assertNotIn('secret', str(caught.exception))


class TlsAndSecretTests(unittest.TestCase):
    def tls_fixture(self, name: str = 'server', **settings) -> Fixture:
        return Fixture(tls_cert=str(TLS / f'{name}.pem'), tls_key=str(TLS / f'{name}.key'), **settings)

    def test_untrusted_certificate_fails_at_the_tls_layer(self):
        with self.tls_fixture() as fixture:
            record = stream(fixture.url.replace('http:', 'https:'), 'm', 'p')
        self.assertEqual(record['error_layer'], 'tls')
        self.assertIn('certificate verification failed for 127.0.0.1', record['error'])

    def test_ca_file_trusts_the_test_ca_for_ip_and_hostname(self):
        with self.tls_fixture(profile='vllm') as fixture:
            for host in ('127.0.0.1', 'localhost'):
                with self.subTest(host=host):
                    url = fixture.url.replace('http://127.0.0.1', f'https://{host}')
                    record = stream(url, 'm', 'p', ca_file=str(TLS / 'ca.pem'))
                    self.assertTrue(record['ok'], record['error'])

    def test_a_scheme_that_does_not_fit_the_port_gets_a_hint(self):
        with Fixture() as plain, self.tls_fixture() as tls:
            https_to_plain = stream(plain.url.replace('http:', 'https:'), 'm', 'p', ca_file=str(TLS / 'ca.pem'))
            http_to_tls = stream(tls.url, 'm', 'p')
            plain.instance.replay = (b'', [b'\x15\x03\x01\x00\x02\x02\x46'])  # a TLS alert, as some servers send
            alert = stream(plain.url, 'm', 'p')
        self.assertEqual(https_to_plain['error'], 'tls: TLS failed with 127.0.0.1: WRONG_VERSION_NUMBER; '
                                                  'the answer was not TLS: is this port plain http?')
        self.assertEqual(http_to_tls['error'], 'transport: connection closed before any response bytes arrived; '
                                               'is this port TLS? try https://')
        self.assertEqual(alert['error'], 'transport: connection closed inside the response head after 7 bytes; '
                                         'is this port TLS? try https://')
        with Fixture(replay=b'HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n') as fixture:
            wrong_type = stream(fixture.url, 'm', 'p')  # a response head arrived: no hint
        self.assertNotIn('TLS', wrong_type['error'])

    def test_certificate_for_another_hostname_fails(self):
        with self.tls_fixture('other') as fixture:
            record = stream(fixture.url.replace('http:', 'https:'), 'm', 'p', ca_file=str(TLS / 'ca.pem'))
        self.assertEqual(record['error_layer'], 'tls')
        self.assertIn("not valid for '127.0.0.1'", record['error'])

    def test_api_key_appears_in_no_output_even_when_the_server_echoes_it(self):
        key = 'sk-secret-8c1f7e'
        echo = json.dumps({'error': {'message': f'invalid key {key}', 'type': 'AuthenticationError', 'code': 401}})
        response = (f'HTTP/1.1 401 Unauthorized\r\ncontent-type: application/json\r\n'
                    f'x-echo: {key}\r\ncontent-length: {len(echo)}\r\n\r\n{echo}').encode()
        with tempfile.TemporaryDirectory() as tmp, Fixture(replay=response) as fixture:
            done = run_cli('--url', fixture.url, '--model', 'm', '--output', 'run.json', '--capture', 'run.http',
                           cwd=tmp, env=dict(os.environ, MODEL_API_KEY=key))
            self.assertEqual(fixture.last_request[0]['Authorization'], f'Bearer {key}')
            outputs = {'stdout': done.stdout, 'stderr': done.stderr,
                       'record': Path(tmp, 'run.json').read_text(), 'capture': Path(tmp, 'run.http').read_text()}
        self.assertEqual(done.returncode, 1)
        self.assertIn('[redacted]', outputs['record'])
        for name, text in outputs.items():
            with self.subTest(output=name):
                self.assertNotIn(key, text)
                self.assertNotIn('8c1f7e', text)


class ConnectProxy:
    """A small forward proxy on loopback, for the tests. It answers CONNECT with ``answer`` (a whole
    response, None to close without a word, or 'stall' to say nothing); after a 2xx it relays bytes both
    ways to the port CONNECT named, on 127.0.0.1 whatever the name. ``seen`` holds each request head."""

    ESTABLISHED = b'HTTP/1.1 200 Connection established\r\n\r\n'

    def __init__(self, answer: bytes | str | None = ESTABLISHED) -> None:
        self.answer, self.seen = answer, []
        self.listener = socket.create_server(('127.0.0.1', 0))
        self.address = f'127.0.0.1:{self.listener.getsockname()[1]}'
        self.closing = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> ConnectProxy:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.closing.set()
        self.thread.join()
        self.listener.close()

    def _serve(self) -> None:
        while not self.closing.is_set():  # a blocked accept() would not wake when the listener closes
            if select.select([self.listener], [], [], 0.05)[0]:
                conn, _ = self.listener.accept()
                threading.Thread(target=self._tunnel, args=(conn,), daemon=True).start()

    def _tunnel(self, conn: socket.socket) -> None:
        with conn:
            head = b''
            while b'\r\n\r\n' not in head:
                data = conn.recv(4096)
                if not data:
                    return
                head += data
            self.seen.append(head)
            if self.answer == 'stall':
                self.closing.wait(30)
            if not isinstance(self.answer, bytes):
                return
            conn.sendall(self.answer)
            if not self.answer.startswith(b'HTTP/1.1 200'):
                return
            port = int(head.split(b'\r\n')[0].split()[1].rsplit(b':', 1)[1])
            with socket.create_connection(('127.0.0.1', port)) as upstream:
                while True:
                    readable, _, _ = select.select([conn, upstream], [], [], 30)
                    for side in readable:
                        data = side.recv(65536)
                        if not data:
                            return
                        (upstream if side is conn else conn).sendall(data)
                    if not readable:
                        return


class ProxyTests(unittest.TestCase):
    """https through a forward proxy (HTTPS_PROXY, CONNECT), NO_PROXY and --no-proxy, and the proxy layer."""

    def setUp(self) -> None:
        self.origin = Fixture(profile='vllm', tls_cert=str(TLS / 'proxied.pem'), tls_key=str(TLS / 'proxied.key'))
        self.origin.__enter__()
        self.addCleanup(self.origin.__exit__)
        self.url = f'https://llm.test:{self.origin.instance.server_port}/v1/chat/completions'

    def environment(self, proxy: ConnectProxy | str, **more: str):
        address = proxy.address if isinstance(proxy, ConnectProxy) else proxy
        variables = {'HTTPS_PROXY': f'http://alice:s3cret-pw@{address}', **more}
        cleared = {name: '' for name in ('https_proxy', 'http_proxy', 'no_proxy', 'NO_PROXY')}
        return mock.patch.dict(os.environ, {**cleared, **variables})

    def test_https_through_a_proxy_is_ok_names_it_and_keeps_its_credentials_out(self):
        with ConnectProxy() as proxy, self.environment(proxy):
            record = stream(self.url, 'm', 'p', ca_file=str(TLS / 'ca.pem'))
            with tempfile.TemporaryDirectory() as tmp:
                done = run_cli('--url', self.url, '--model', 'm', '--ca-file', str(TLS / 'ca.pem'), '--output',
                               'r.json', '--capture', 'r.http', cwd=tmp, env=dict(os.environ))
                outputs = [done.stdout, done.stderr] + [(Path(tmp) / name).read_bytes().decode('latin-1')
                                                        for name in ('r.json', 'r.http')]
        self.assertTrue(record['ok'], record['error'])
        self.assertEqual((record['proxy'], record['connection']['peer']),
                         ({'address': proxy.address, 'credentials': True}, proxy.address))
        basic = base64.b64encode(b'alice:s3cret-pw').decode()
        self.assertTrue(proxy.seen[0].startswith(f'CONNECT llm.test:{self.origin.instance.server_port} HTTP/1.1\r\n'
                                                 .encode()))
        self.assertIn(f'Proxy-Authorization: Basic {basic}\r\n'.encode(), proxy.seen[0])
        self.assertEqual(done.returncode, 0, done.stderr)
        for text in [json.dumps(record)] + outputs:
            for secret in ('alice', 's3cret-pw', basic):
                self.assertNotIn(secret, text)
        self.assertNotIn('s3cret', repr(stream_client.prepare(self.url, 'm', 'p')))  # nor in a request's repr

    def test_a_load_through_a_proxy_tunnels_once_per_kept_connection(self):
        # on Linux the tunnel and the handshake are the engine's blocking steps; the responses its reads
        with ConnectProxy() as proxy, self.environment(proxy):
            records: list[dict] = []
            stream_client.run_load([stream_client.prepare(self.url, 'm', 'p', ca_file=str(TLS / 'ca.pem'))],
                                   stream_client.LoadSettings(runs=6, concurrency=3, keep_alive=True),
                                   records.append, stream_client.Cancel())
        self.assertEqual([record['ok'] for record in records], [True] * 6, [record['error'] for record in records])
        self.assertEqual(sum(record['connection']['reused'] for record in records), 3)
        self.assertEqual(len(proxy.seen), 3)  # one CONNECT per connection

    def test_no_proxy_and_the_flag_go_around_it(self):
        with ConnectProxy() as proxy, resolving_llm_test_to_loopback():
            for variables, options in (({'NO_PROXY': 'llm.test'}, {}), ({'no_proxy': '.test'}, {}),
                                       ({'NO_PROXY': '*'}, {}), ({}, {'trust_env': False})):
                with self.subTest(variables=variables, options=options), self.environment(proxy, **variables):
                    record = stream(self.url, 'm', 'p', ca_file=str(TLS / 'ca.pem'), **options)
                    self.assertTrue(record['ok'], record['error'])
                    self.assertEqual((record['proxy'], record['connection']['peer']),
                                     (None, f'127.0.0.1:{self.origin.instance.server_port}'))
            self.assertEqual(proxy.seen, [])

    def test_a_refused_closed_or_silent_tunnel_is_a_proxy_failure(self):
        target = f'llm.test:{self.origin.instance.server_port}'
        cases = {b'HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic\r\n\r\n':
                 f'proxy: the proxy {{}} refused the tunnel to {target}: 407 Proxy Authentication Required',
                 b'HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n':
                 f'proxy: the proxy {{}} refused the tunnel to {target}: 502 Bad Gateway',
                 None: f'proxy: the proxy {{}} closed the connection before answering CONNECT {target}',
                 'stall': 'timeout: no answer to CONNECT from the proxy {} within 0.3 s'}
        for answer, error in cases.items():
            with self.subTest(answer=answer), ConnectProxy(answer) as proxy, self.environment(proxy):
                record = stream(self.url, 'm', 'p', ca_file=str(TLS / 'ca.pem'), idle=0.3)
                self.assertEqual(record['error'], error.format(proxy.address))
                self.assertEqual(record['proxy']['address'], proxy.address)
        with socket.socket() as unused:
            unused.bind(('127.0.0.1', 0))
            address = f'127.0.0.1:{unused.getsockname()[1]}'  # nothing listens there
            with self.environment(address):
                record = stream(self.url, 'm', 'p', ca_file=str(TLS / 'ca.pem'))
        self.assertEqual(record['error_layer'], 'proxy')
        self.assertIn(f'cannot connect to the proxy {address}', record['error'])

    def test_kept_alive_runs_share_one_tunnel(self):
        with ConnectProxy() as proxy, self.environment(proxy):
            request = stream_client.prepare(self.url, 'm', 'p', ca_file=str(TLS / 'ca.pem'))
            records: list[dict] = []
            stream_client.run_load([request], stream_client.LoadSettings(runs=3, keep_alive=True), records.append,
                                   stream_client.Cancel())
        self.assertEqual([(r['ok'], r['connection']['reused'], r['connection']['request_on_connection'])
                          for r in sorted(records, key=lambda r: r['run'])], [(True, False, 1), (True, True, 2),
                                                                               (True, True, 3)])
        self.assertEqual(len(proxy.seen), 1)

    def test_which_proxy_the_environment_names(self):
        from_env = stream_client._request._proxy_from_environment
        self.assertIsNone(from_env('https', '127.0.0.1', {'HTTPS_PROXY': 'http://p:3128'}))  # loopback: never
        self.assertIsNone(from_env('https', 'localhost', {'HTTPS_PROXY': 'http://p:3128'}))
        self.assertEqual(from_env('https', 'llm.test', {'HTTPS_PROXY': 'http://upper:1',
                                                        'https_proxy': 'lower:2'}).address,
                         'lower:2')  # lower case first, as curl reads it; the scheme defaults to http://
        self.assertEqual(from_env('https', 'llm.test', {'HTTPS_PROXY': 'http://p'}).port, 80)
        self.assertIsNone(from_env('https', 'llm.test', {'HTTP_PROXY': 'http://p:1'}))  # http_proxy is for http
        with self.assertRaises(ValueError):
            from_env('https', 'llm.test', {'HTTPS_PROXY': 'socks5://p:1080'})
        self.assertTrue(from_env('https', 'bücher.test', {'HTTPS_PROXY': 'http://p:1'})
                        .connect_request('bücher.test', 443).startswith(b'CONNECT xn--bcher-kva.test:443 HTTP/1.1\r\n'))
        proxy = from_env('https', 'llm.test', {'HTTPS_PROXY': 'http://us%40er:p%3Ass@p:1'})
        self.assertEqual(proxy.authorization, 'Basic ' + base64.b64encode(b'us@er:p:ss').decode())
        self.assertNotIn('p:ss', repr(proxy))

    def test_no_proxy_matches_as_curl_does(self):
        cases = [('*', 'anything.example', True), ('example.com', 'example.com', True),
                 ('example.com', 'www.example.com', True), ('.example.com', 'www.example.com', True),
                 ('example.com', 'notexample.com', False), ('example.com', 'example.com.evil', False),
                 (' Example.COM , other', 'EXAMPLE.com', True), ('10.1.2.3', '10.1.2.3', True),
                 ('10.0.0.0/8', '10.9.9.9', True), ('10.0.0.0/8', '11.0.0.1', False), ('fd00::/8', '[fd12::1]', True),
                 ('::1', '::1', True), ('', 'example.com', False), ('10.0.0.0/8', 'ten.example', False)]
        for no_proxy, host, bypasses in cases:
            with self.subTest(no_proxy=no_proxy, host=host):
                self.assertIs(stream_client._request._bypasses_proxy(host, no_proxy), bypasses)


class ClosingTlsServer(LoopbackServer):
    """A loopback TLS server that answers each connection's request with the same bytes, then ends the
    connection as ``closure`` says: ``notify`` (TLS's closure alert, close_notify, then the TCP close) or
    ``fin`` (a TCP close without close_notify: an incomplete close, RFC 9112 9.8)."""

    def __init__(self, data: bytes, closure: str) -> None:
        super().__init__('https')
        self.data, self.closure = data, closure
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(TLS / 'server.pem', TLS / 'server.key')

    def serve(self, sock: socket.socket) -> None:
        with contextlib.suppress(OSError):
            sock = self.context.wrap_socket(sock, server_side=True)  # it takes the descriptor over
            request = b''
            while b'\r\n\r\n' not in request:
                request += sock.recv(65536)
            sock.sendall(self.data)
            if self.closure == 'notify':
                sock.settimeout(5)
                sock.unwrap()  # sends close_notify; the client's own alert, or its TCP close, ends the wait
            else:
                sock = socket.socket(fileno=sock.detach())
                sock.shutdown(socket.SHUT_WR)
                sock.settimeout(5)
                sock.recv(1)  # until the client closes
        sock.close()

    def __enter__(self) -> 'ClosingTlsServer':
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class TlsClosureTests(unittest.TestCase):
    """RFC 9112 9.8 over TLS: a close without close_notify (an incomplete close) leaves unfinished a body
    that only the close delimits; Content-Length and chunked bodies end by their framing, whatever the close."""

    BODY = ANSWER_EVENTS
    FRAMINGS = {
        'content-length': SSE_HEAD + b'content-length: %d\r\n\r\n' % len(BODY) + BODY,
        'content-length short': SSE_HEAD + b'content-length: %d\r\n\r\n' % (len(BODY) + 10) + BODY,
        'chunked': SSE_HEAD + b'transfer-encoding: chunked\r\n\r\n' + chunked(BODY),
        'chunked without its last chunk': SSE_HEAD + b'transfer-encoding: chunked\r\n\r\n' + chunked(BODY, end=b''),
        'the close': SSE_HEAD + b'connection: close\r\n\r\n' + BODY,
        'the close, HTTP/1.0': b'HTTP/1.0 200 OK\r\ncontent-type: text/event-stream\r\n\r\n' + BODY,
        'the close, no [DONE]': SSE_HEAD + b'connection: close\r\n\r\n' + BODY.replace(b'data: [DONE]\n\n', b''),
    }
    EXPECTED = {  # (framing, closure): (ok, error_kind)
        ('content-length', 'notify'): (True, None),
        ('content-length', 'fin'): (True, None),
        ('content-length short', 'notify'): (False, 'body_truncated'),
        ('content-length short', 'fin'): (False, 'body_truncated'),
        ('chunked', 'notify'): (True, None),
        ('chunked', 'fin'): (True, None),
        ('chunked without its last chunk', 'notify'): (False, 'no_last_chunk'),
        ('chunked without its last chunk', 'fin'): (False, 'no_last_chunk'),
        ('the close', 'notify'): (True, None),
        ('the close', 'fin'): (False, 'tls_truncated'),
        ('the close, HTTP/1.0', 'notify'): (True, None),
        ('the close, HTTP/1.0', 'fin'): (False, 'tls_truncated'),
        ('the close, no [DONE]', 'notify'): (False, 'eof_before_done'),
        ('the close, no [DONE]', 'fin'): (False, 'tls_truncated'),
    }

    def verdicts(self, framing: str, closure: str) -> list[tuple]:
        """The verdict of one run, then of each run of a load of three (on the engine on Linux)."""
        with ClosingTlsServer(self.FRAMINGS[framing], closure) as server:
            request = stream_client.prepare(server.url, 'm', 'p', idle=5, ca_file=str(TLS / 'ca.pem'))
            records = [stream_client.run(request)]
            stream_client.run_load([request], stream_client.LoadSettings(runs=3, concurrency=3), records.append,
                                   stream_client.Cancel())
        return [(record['ok'], record['error_kind']) for record in records]

    def test_each_framing_ends_as_rfc_9112_says_with_and_without_close_notify(self):
        cases = list(self.EXPECTED)
        for case, found in zip(cases, in_threads(lambda case: self.verdicts(*case), cases)):
            with self.subTest(framing=case[0], closure=case[1]):
                self.assertEqual(found, [self.EXPECTED[case]] * 4)

    def test_the_message_names_the_missing_alert_and_what_had_arrived(self):
        with ClosingTlsServer(self.FRAMINGS['the close'], 'fin') as server:
            record = stream(server.url, 'm', 'p', idle=5, ca_file=str(TLS / 'ca.pem'))
        self.assertEqual(record['error_layer'], 'transport')
        self.assertEqual(record['error'], f'transport: the TLS connection closed without close_notify after '
                                          f'{len(self.BODY)} body bytes: a body that ends with the connection is '
                                          f'complete only with that alert')
        self.assertEqual((record['transport_complete'], record['text']), (False, 'hi'))

    def test_the_fixture_ends_its_tls_connections_with_close_notify_unless_told_not_to(self):
        tls = {'tls_cert': str(TLS / 'server.pem'), 'tls_key': str(TLS / 'server.key')}
        for close_notify, expected in ((True, (True, None)), (False, (False, 'tls_truncated'))):
            with self.subTest(close_notify=close_notify), \
                    Fixture(replay=self.FRAMINGS['the close'], close_notify=close_notify, **tls) as fixture:
                record = stream(fixture.url.replace('http:', 'https:'), 'm', 'p', ca_file=str(TLS / 'ca.pem'))
            self.assertEqual((record['ok'], record['error_kind']), expected)
        with self.assertRaisesRegex(ValueError, 'needs tls_cert'):
            fixture_server.server(0, close_notify=False)

    def test_over_plain_tcp_a_close_delimits_the_body(self):
        with Fixture(replay=self.FRAMINGS['the close']) as fixture:
            self.assertTrue(stream(fixture.url, 'm', 'p')['ok'])

    @sans_io
    @unittest.skipUnless(hasattr(ssl, 'OP_IGNORE_UNEXPECTED_EOF'), 'OpenSSL 3 names the option')
    def test_the_context_reports_an_end_without_close_notify(self):
        lenient = ssl.create_default_context()
        lenient.options |= ssl.OP_IGNORE_UNEXPECTED_EOF  # as Python 3.8 and 3.9, or an OpenSSL configuration, set it
        with mock.patch.object(ssl, 'create_default_context', lambda **kwargs: lenient):
            context = stream_client._request._ssl_context(None)
        self.assertFalse(context.options & ssl.OP_IGNORE_UNEXPECTED_EOF)

    @sans_io
    def test_the_reader_is_told_of_an_incomplete_close(self):
        for framing, expected in (('the close', 'tls_truncated'), ('content-length', None), ('chunked', None)):
            with self.subTest(framing=framing):
                reader = stream_client.ResponseReader(stream_client.ChatChunks())
                reader.feed(self.FRAMINGS[framing])
                reader.eof(incomplete_close=True)
                self.assertEqual(stream_client.judge(reader).kind, expected)
        reader = stream_client.ResponseReader(stream_client.ChatChunks())
        reader.feed(self.FRAMINGS['the close'])
        reader.eof()
        self.assertIsNone(stream_client.judge(reader).kind)


class TimeoutUnderAttackTests(unittest.TestCase):
    def timed(self, url: str, **kwargs) -> tuple[dict, float]:
        started = time.monotonic()
        record = stream(url, 'm', 'p', **kwargs)
        return record, time.monotonic() - started

    def test_stall_ends_at_the_idle_timeout(self):
        with Fixture('stall') as fixture:
            record, took = self.timed(fixture.url, idle=0.5)
        self.assertEqual(record['error'], 'timeout: no bytes for 0.5 s (idle timeout) after 0 content events')
        self.assertGreaterEqual(took, 0.5)

    def test_drip_ends_at_the_deadline_despite_steady_bytes(self):
        with Fixture('drip', profile='vllm') as fixture:  # a keepalive comment every 0.1 s
            record, took = self.timed(fixture.url, idle=0.6, deadline=1.2)
        self.assertEqual(record['error'], 'timeout: overall deadline of 1.2 s reached during the body phase '
                                          'after 0 content events')
        self.assertGreaterEqual(took, 1.2)
        self.assertGreaterEqual(record['reads'], 1)

    def test_server_that_never_answers_ends_at_the_idle_timeout(self):
        with socket.create_server(('127.0.0.1', 0)) as silent:
            url = f'http://127.0.0.1:{silent.getsockname()[1]}/v1/chat/completions'
            record, took = self.timed(url, idle=0.5)
        self.assertEqual(record['error'], 'timeout: no response headers within the idle timeout of 0.5 s')
        self.assertGreaterEqual(took, 0.5)

    def test_trickled_headers_end_at_the_deadline(self):
        with Fixture(delay=0.1) as fixture:  # one header byte every 0.1 s: never idle for 0.5 s
            fixture.instance.replay = (b'', [b'HTTP/1.1 200 OK\r\nX-Slow: '] + [b'x'] * 40 + [b'\r\n\r\n'])
            record, took = self.timed(fixture.url, idle=0.5, deadline=0.8)
        self.assertEqual(record['error'], 'timeout: overall deadline of 0.8 s reached during the headers phase '
                                          'after 0 content events')
        self.assertGreaterEqual(took, 0.8)

    @unittest.skipUnless(Path('/proc/self/status').exists(), 'peak RSS is read from /proc')
    def test_flood_without_line_breaks_ends_at_the_line_bound_in_bounded_memory(self):
        peak = ('import os, runpy, sys\n'
                'sys.argv = sys.argv[1:]\n'
                'sys.path.insert(0, os.path.dirname(sys.argv[0]))\n'
                'try:\n'
                '    runpy.run_path(sys.argv[0], run_name="__main__")\n'
                'except SystemExit:\n'
                '    pass\n'
                'print([l for l in open("/proc/self/status") if l.startswith("VmHWM")][0], file=sys.stderr)\n')
        with tempfile.TemporaryDirectory() as tmp:
            done = subprocess.run([sys.executable, '-c', peak, CLIENT, '--fixture', 'flood', '--output', 'run.json'],
                                  cwd=tmp, capture_output=True, text=True, timeout=60)
            record = json.loads(Path(tmp, 'run.json').read_text())
        self.assertEqual(record['error'], f'sse: line longer than {_ANSWER_LINE_CHARS} characters without a line end')
        peak_kib = int(done.stderr.split('VmHWM:')[1].split()[0])
        self.assertLess(peak_kib, 100 * 1024)


class TwinDeadlineTests(unittest.TestCase):
    """--cross-check's unstreamed twin runs inside the run's deadline: --deadline bounds the pair as a whole."""

    def pair(self, streamed: str, **options) -> tuple[dict, TwinServer]:
        server = TwinServer(streamed)
        self.addCleanup(server.close)
        return stream(server.url, 'm', 'p', cross_check=True, **options), server

    def test_a_stalled_twin_fails_at_the_runs_deadline_as_the_records_stamps_show(self):
        record, server = self.pair('answer', idle=30, deadline=0.8)
        cross = record['cross_check']
        self.assertTrue(record['ok'], record['error'])  # the streamed verdict stands
        self.assertEqual(server.twins, 1)
        self.assertEqual(cross['unstreamed_problem'], 'timeout: overall deadline of 0.8 s reached during the headers '
                                                      'phase after 0 content events')
        # on the run's clock: the twin went after the streamed request had ended, and failed at the run's deadline
        self.assertLessEqual(record['duration_ms'], cross['unstreamed_started_ms'])
        self.assertGreaterEqual(cross['unstreamed_ended_ms'], 800 - 1)

    def test_a_run_that_used_its_whole_deadline_sends_no_twin(self):
        record, server = self.pair('stall', idle=30, deadline=0.5)
        cross = record['cross_check']
        self.assertEqual(record['error'], 'timeout: overall deadline of 0.5 s reached during the body phase after '
                                          '1 content event')
        self.assertEqual(cross['unstreamed_problem'], 'timeout: overall deadline of 0.5 s reached during the connect '
                                                      'phase after 0 content events')
        self.assertEqual((server.connections, server.twins, cross['unstreamed_status']), (1, 0, None))
        self.assertGreaterEqual(cross['unstreamed_started_ms'], 500 - 1)

    def test_the_twin_runs_on_the_runs_clock_and_under_its_bounds_as_a_caller_cut_them(self):
        twins = []
        real = stream_client._transport._fetch_unstreamed

        def fetch(x):
            entered = time.perf_counter()
            twins.append((x, entered))
            return real(x)
        with Fixture('pair-honest') as fixture, mock.patch.object(stream_client._transport, '_fetch_unstreamed', fetch):
            request = stream_client.prepare(fixture.url, 'm', 'p', tools=fixture_server.TOOLS, cross_check=True)
            record = stream_client.run(dataclasses.replace(request, idle=7.0, deadline=9.0))  # as the exporter cuts it
        (x, entered), = twins
        self.assertTrue(record['ok'], record['error'])
        self.assertEqual((x.request.idle, x.request.deadline, request.twin.deadline), (7.0, 9.0, 60.0))
        self.assertLess(x.timeline.started, entered)  # the clock started with the streamed request, not now
        self.assertEqual(record['cross_check']['same'], True)


KERNEL_STAMPS = stream_client._exchange._SO_TIMESTAMPNS is not None  # Linux on the common architectures


class PacedServer(threading.Thread):
    """A loopback server that answers one request with a chat stream (framed by Content-Length) in two
    writes: the head and a first event, then, once ``go`` is set, a second event and the end, taking the
    monotonic time just before and just after that write (``second_sent``)."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.go, self.second_sent = threading.Event(), threading.Event()
        self.before = self.after = None
        self.listener = socket.create_server(('127.0.0.1', 0))
        self.url = f'http://127.0.0.1:{self.listener.getsockname()[1]}/v1/chat/completions'
        self.start()

    def run(self) -> None:
        sock, _ = self.listener.accept()
        self.listener.close()
        with sock:
            read_request(sock)
            first = f'data: {chunk_json(delta={"content": "one"})}\n\n'.encode()
            rest = ''.join(f'data: {data}\n\n' for data in (chunk_json(delta={'content': ' two'}),
                                                             chunk_json(finish_reason='stop'), '[DONE]')).encode()
            sock.sendall(sse_response(first, headers=f'Content-Length: {len(first) + len(rest)}\r\n'))
            self.go.wait(10)
            self.before = time.perf_counter()
            sock.sendall(rest)
            self.after = time.perf_counter()
            self.second_sent.set()
            sock.shutdown(socket.SHUT_WR)
            sock.recv(1)


class ArrivalStampTests(unittest.TestCase):
    """On Linux a plain connection's reads carry the kernel's stamp of when their bytes arrived, so a busy
    client stamps an event when it came, not when it got round to reading it; a stamp stays between the
    latest one and the read's return. A load's reader holds the gate while it reads and feeds."""

    @classmethod
    def setUpClass(cls) -> None:
        """Keep a connection that asked for stamps open: Linux turns stamping on a moment after the first
        ask of all (a deferred work item), and off after the last one closes."""
        cls.keeper = []
        if not KERNEL_STAMPS:
            return
        listener = socket.create_server(('127.0.0.1', 0))
        ours = socket.create_connection(listener.getsockname())
        theirs, _ = listener.accept()
        listener.close()
        cls.keeper = [ours, theirs]
        stream_client._exchange._ask_kernel_stamps(ours)
        for _ in range(500):
            theirs.sendall(b'.')
            if stream_client._exchange._recv_stamped(stream_client._exchange._Connection(ours))[1] is not None:
                break
            time.sleep(0.01)

    @classmethod
    def tearDownClass(cls) -> None:
        for sock in cls.keeper:
            sock.close()

    def test_a_kernel_stamp_is_taken_only_between_the_latest_stamp_and_the_reads_return(self):
        timeline, offset = stream_client._exchange._Timeline(), 1_700_000_000 * 10**9  # the wall clock's lead
        self.assertIsNone(timeline.read_stamps)
        started, slack = timeline.started, stream_client._limits._STAMP_SLACK

        def kernel(at: float) -> int:
            return round(at * 1e9) + offset
        self.assertAlmostEqual(timeline.arrival(started + 5, kernel(started + 2), offset), started + 2, places=6)
        self.assertEqual(timeline.arrival(started + 6, kernel(started + 2 - slack / 2), offset), started + 2)
        self.assertEqual(timeline.arrival(started + 7, kernel(started + 7 + slack / 2), offset), started + 7)
        self.assertEqual(timeline.read_stamps, 'kernel')
        # a stamp out of its window: the wall clock stepped between the arrival and the read
        self.assertEqual(timeline.arrival(started + 9, kernel(started + 1), offset), started + 9)
        self.assertEqual(timeline.read_stamps, 'client')
        for stepped in (-3.0, 30.0):
            later = stream_client._exchange._Timeline()
            self.assertEqual(later.arrival(later.started + 1, kernel(later.started + stepped), offset),
                             later.started + 1)
            self.assertEqual(later.read_stamps, 'client')
        first = stream_client._exchange._Timeline()
        self.assertEqual(first.arrival(first.started + 1, None, offset), first.started + 1)  # no stamp: its return
        self.assertEqual(first.read_stamps, 'client')

    def busy_client_run(self, server: PacedServer, **options) -> tuple[dict, stream_client._exchange._Exchange, float]:
        """One run whose client, shown the first text, lets the server write the rest and stays busy 50 ms
        after that write: the exchange it filled, and when the client stopped being busy."""
        exchanges, free = [], []
        build = stream_client._record._build_record

        def keep(x):
            exchanges.append(x)
            return build(x)

        def busy(text: str) -> None:
            if text == 'one':
                server.go.set()
                server.second_sent.wait(10)
                time.sleep(0.05)
                free.append(time.perf_counter())
        with mock.patch.object(stream_client._transport, '_build_record', keep):
            record = stream(server.url, 'm', 'p', on_text=busy, **options)
        return record, exchanges[0], free[0]

    @unittest.skipUnless(KERNEL_STAMPS, 'the kernel stamps reads on Linux only')
    def test_an_event_that_arrived_while_the_client_was_busy_is_stamped_when_it_arrived(self):
        server = PacedServer()
        record, x, free = self.busy_client_run(server)
        self.assertTrue(record['ok'], record['error'])
        self.assertEqual(record['read_stamps'], 'kernel')
        second = x.timeline.last_text_at
        self.assertLess(second, free)  # a client's stamp is at best the read's return, after the client was busy
        self.assertGreater(second, server.before - 0.005)  # 5 ms: the wall clock may be slewed while it runs
        self.assertEqual(record['event_gaps_ms'], [round((second - x.timeline.first_text_at) * 1000, 3)])
        self.assertEqual(record['duration_ms'], x.timeline.ms(x.timeline.ended))
        self.assertLessEqual(x.timeline.ended, free)  # the end is the last bytes' arrival, not the client's return

    def test_without_kernel_stamps_an_event_is_stamped_when_the_read_returned(self):
        with mock.patch.object(stream_client._exchange, '_SO_TIMESTAMPNS', None):
            server = PacedServer()
            record, x, free = self.busy_client_run(server)
        self.assertTrue(record['ok'], record['error'])
        self.assertEqual(record['read_stamps'], 'client')
        self.assertGreaterEqual(x.timeline.last_text_at, free)
