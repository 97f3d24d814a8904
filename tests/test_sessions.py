"""--sessions: multi-turn agent sessions against the fixture's agent mode, and the sessions file's checks."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest
import weakref
from unittest import mock

import fixture_server
import stream_client
from stream_client import UsageError
from stream_client._workloads import _Conversation, _parse_sessions
from .support import (arguments, chunk_json, Fixture, HERE, LoopbackServer, MESSAGE_START, message_end, message_event,
                      opening, run_cli, sse_response, TEXT_BLOCK, text_delta, URL_PATHS)
from .support import CLIENT, instant_run, instant_start, read_request, script_command, script_env, VirtualClock
from .tiers import sans_io

SESSION_APIS = ('chat', 'messages', 'responses')
RESULTS = [{'temp': 20}, 'sunny']  # get_weather's results, consumed in order (the last repeats)


def session_line(number: int, turns: int = 6, **extra) -> dict:
    return {'id': f's{number}', 'system': 'You are an agent.', 'tools': fixture_server.TOOLS,
            'turns': [f'session {number} turn {turn}: weather?' for turn in range(1, turns + 1)],
            'tool_results': {'get_weather': RESULTS}, **extra}


class SessionLoadTests(unittest.TestCase):

    def setUp(self) -> None:
        self.folder = tempfile.mkdtemp()

    def write(self, name: str, text: str) -> str:
        path = os.path.join(self.folder, name)
        with open(path, 'w', encoding='utf-8') as file:
            file.write(text)
        return path

    def sessions_file(self, count: int, turns: int = 6) -> str:
        return self.write('sessions.jsonl', ''.join(json.dumps(session_line(n, turns)) + '\n' for n in range(count)))

    def records(self, name: str) -> list[dict]:
        with open(os.path.join(self.folder, name), encoding='utf-8') as file:
            return [json.loads(line) for line in file]

    def test_fifty_sessions_of_six_turns_with_tools_give_exact_counts_on_each_api(self):
        # fifty sessions on chat, ten on the others: the same rule, each count exact
        for api in SESSION_APIS:
            count = 50 if api == 'chat' else 10
            path = self.sessions_file(count)
            with self.subTest(api=api):
                done = run_cli('--fixture', 'agent', '--fixture-profile', 'vllm', '--api', api, '--sessions', path,
                               '--concurrency', '16', '--output', f'{api}.jsonl', cwd=self.folder, timeout=120)
                self.assertEqual(done.returncode, 0, done.stderr)
                summary = json.loads(done.stdout)
                sessions = summary['sessions']
                runs = count * 12  # six turns of two runs: the call, and the answer after its result
                self.assertEqual((summary['runs'], summary['ok'], summary['planned_runs']), (runs, runs, runs))
                self.assertEqual({key: sessions[key] for key in ('sessions', 'ok', 'not_ok', 'runs', 'turns',
                                                                'turns_not_started', 'tool_rounds')},
                                 {'sessions': count, 'ok': count, 'not_ok': 0, 'runs': runs, 'turns': count * 6,
                                  'turns_not_started': 0, 'tool_rounds': count * 6})
                self.assertEqual(sorted(sessions['latency_by_turn_ms']), ['1', '2', '3', '4', '5', '6'])
                self.assertEqual({row['turns'] for row in sessions['latency_by_turn_ms'].values()}, {count})
                records = self.records(f'{api}.jsonl')
                self.assertEqual(sorted(r['run'] for r in records), list(range(runs)))
                self.assertEqual({(r['session'], r['turn'], r['round']) for r in records},
                                 {(f's{n}', t, r) for n in range(count) for t in range(1, 7) for r in (0, 1)})
                self.assertEqual(sum('session_end' in r for r in records), count)

    def test_a_cut_tool_call_in_turn_3_ends_that_session_there(self):
        path = self.sessions_file(10)
        for api in SESSION_APIS:
            with self.subTest(api=api):
                self.check_cut(path, api)

    def check_cut(self, path: str, api: str) -> None:
        with Fixture('agent', cut_turn=3, cut_session='session 7 ') as fixture:
            done = run_cli('--url', fixture.url.replace('/v1/chat/completions', URL_PATHS[api]), '--model', 'm',
                           '--sessions', path, '--concurrency', '4', '--output', f'cut-{api}.jsonl', '--report',
                           f'cut-{api}.html', cwd=self.folder, timeout=60)
        self.assertEqual(done.returncode, 1, done.stderr)
        sessions = json.loads(done.stdout)['sessions']
        self.assertEqual({key: sessions[key] for key in ('sessions', 'ok', 'not_ok', 'not_ok_by_kind', 'runs',
                                                        'turns', 'turns_not_started', 'tool_rounds')},
                         {'sessions': 10, 'ok': 9, 'not_ok': 1, 'not_ok_by_kind': {'tool_arguments_not_json': 1},
                          'runs': 9 * 12 + 5, 'turns': 9 * 6 + 3, 'turns_not_started': 3, 'tool_rounds': 9 * 6 + 2})
        cut = [r for r in self.records(f'cut-{api}.jsonl') if r['session'] == 's7']
        self.assertEqual([(r['turn'], r['round'], r['ok']) for r in cut],
                         [(1, 0, True), (1, 1, True), (2, 0, True), (2, 1, True), (3, 0, False)])
        end = cut[-1]['session_end']
        self.assertEqual((end['ok'], end['ended_by'], end['turns_run'], end['not_started_turns']),
                         (False, 'tool_arguments_not_json', 3, [4, 5, 6]))
        self.assertIn('turn 3 round 0 not ok', end['reason'])
        self.assertIn('session s7 turn 3 round 0: NOT OK [application]', done.stderr)
        with open(os.path.join(self.folder, f'cut-{api}.html'), encoding='utf-8') as page:
            rows = re.findall(r'<tr><th>(s\d+)</th>(.*?)</tr>', page.read())
        self.assertEqual(sorted(session for session, _ in rows), sorted(f's{n}' for n in range(10)))
        for session, cells in rows:
            texts = [text.split(',')[0] for text in re.findall(r'<td[^>]*>(.*?)</td>', cells)]
            self.assertEqual(texts, ['1: 2 runs', '2: 2 runs', '3: tool_arguments_not_json', '4: not started',
                                     '5: not started', '6: not started'] if session == 's7' else
                             [f'{turn}: 2 runs' for turn in range(1, 7)])
        again = run_cli('--summary', f'cut-{api}.jsonl', cwd=self.folder)
        self.assertEqual(json.loads(again.stdout)['sessions'], sessions)  # recomputed from the records alone

    def test_the_history_sent_in_turn_n_plus_1_is_the_answer_of_turn_n_byte_for_byte(self):
        path = self.sessions_file(3, turns=4)
        for api in SESSION_APIS:
            with self.subTest(api=api), Fixture('agent', profile='vllm', record=True) as fixture:
                url = fixture.url.replace('/v1/chat/completions', URL_PATHS[api])
                done = run_cli('--url', url, '--model', 'm', '--sessions', path, '--concurrency', '3',
                               '--output', f'history-{api}.jsonl', cwd=self.folder, timeout=60)
                self.assertEqual(done.returncode, 0, done.stderr)
                by_session: dict[str, list] = {}
                for answer in fixture.instance.received:
                    by_session.setdefault(fixture_server.first_user_text(api, json.loads(answer.body)),
                                          []).append(answer)
                self.assertEqual(len(by_session), 3)
                for answers in by_session.values():
                    self.assertEqual(len(answers), 8)
                    results = iter(RESULTS + RESULTS[-1:] * 8)
                    for sent, following in zip(answers, answers[1:]):
                        expected = self.expected_addition(api, sent, following, results)
                        history = json.loads(sent.body)['input' if api == 'responses' else 'messages']
                        wanted = json.dumps(history + expected, ensure_ascii=False).encode()
                        self.assertIn(wanted, following.body)

    @staticmethod
    def expected_addition(api: str, sent, following, results) -> list:
        """What the agent adds to the history after the answer it was sent: the answer (text, or calls), the
        tool results, and the next user turn when there were no calls; built here from the fixture's side."""
        user = json.loads(following.body)['input' if api == 'responses' else 'messages'][-1]
        if api == 'chat':
            if not sent.calls:
                return [{'role': 'assistant', 'content': sent.text}, user]
            return [{'role': 'assistant', 'content': None, 'tool_calls': [
                {'id': id_, 'type': 'function', 'function': {'name': name, 'arguments': arguments}}
                for id_, name, arguments in sent.calls]},
                *[{'role': 'tool', 'tool_call_id': id_, 'content': fixture_result(next(results))}
                  for id_, _, _ in sent.calls]]
        if api == 'messages':
            if not sent.calls:
                return [{'role': 'assistant', 'content': [{'type': 'text', 'text': sent.text}]}, user]
            return [{'role': 'assistant', 'content': [{'type': 'tool_use', 'id': id_, 'name': name,
                                                      'input': json.loads(arguments)}
                                                     for id_, name, arguments in sent.calls]},
                    {'role': 'user', 'content': [{'type': 'tool_result', 'tool_use_id': id_,
                                                  'content': fixture_result(next(results))}
                                                 for id_, _, _ in sent.calls]}]
        if not sent.calls:
            return [{'type': 'message', 'role': 'assistant', 'content': [{'type': 'output_text', 'text': sent.text}]},
                    user]
        return [*[{'type': 'function_call', 'call_id': id_, 'name': name, 'arguments': arguments}
                  for id_, name, arguments in sent.calls],
                *[{'type': 'function_call_output', 'call_id': id_, 'output': fixture_result(next(results))}
                  for id_, _, _ in sent.calls]]

    def test_sharegpt_conversations_run_their_human_turns(self):
        path = self.write('share.json', json.dumps([
            {'id': 'a', 'conversations': [{'from': 'system', 'value': 'Be brief.'}, {'from': 'human', 'value': 'hi'},
                                          {'from': 'gpt', 'value': 'hello'}, {'from': 'human', 'value': 'again'}]},
            {'conversations': [{'from': 'human', 'value': 'one'}]}]))
        with Fixture('agent', record=True) as fixture:
            done = run_cli('--url', fixture.url, '--model', 'm', '--sessions', path, '--output', 'share.jsonl',
                           cwd=self.folder)
            bodies = [json.loads(answer.body) for answer in fixture.instance.received]
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual({(r['session'], r['turn'], r['round']) for r in self.records('share.jsonl')},
                         {('a', 1, 0), ('a', 2, 0), ('sharegpt-2', 1, 0)})
        second = next(body for body in bodies if len(body['messages']) == 4)
        self.assertEqual(second['messages'], [{'role': 'system', 'content': 'Be brief.'},
                                              {'role': 'user', 'content': 'hi'},
                                              {'role': 'assistant', 'content': 'READY \u2713'},
                                              {'role': 'user', 'content': 'again'}])

    def test_keep_alive_keeps_one_connection_per_session(self):
        path = self.sessions_file(3, turns=2)
        with Fixture('agent', profile='vllm') as fixture:
            done = run_cli('--url', fixture.url, '--model', 'm', '--sessions', path, '--keep-alive',
                           '--concurrency', '3', '--output', 'kept.jsonl', cwd=self.folder)
        self.assertEqual(done.returncode, 0, done.stderr)
        records = self.records('kept.jsonl')
        for number in range(3):
            runs = sorted((r for r in records if r['session'] == f's{number}'), key=lambda r: (r['turn'], r['round']))
            self.assertEqual([r['connection']['request_on_connection'] for r in runs], [1, 2, 3, 4])
            self.assertEqual(len({r['connection']['local_port'] for r in runs}), 1)

    def test_the_readme_session_command_runs(self):
        line = next(line for line in (HERE / 'README.md').read_text(encoding='utf-8').splitlines()
                    if '--sessions' in line and line.startswith('python3 stream_client.py'))
        args = line.split()[2:]
        args[args.index('--sessions') + 1] = str(HERE / args[args.index('--sessions') + 1])
        done = run_cli(*args, cwd=self.folder, timeout=60)
        self.assertEqual(done.returncode, 0, done.stderr)
        sessions = json.loads(done.stdout)['sessions']
        self.assertEqual((sessions['sessions'], sessions['ok'], sessions['runs'], sessions['turns']), (4, 4, 24, 12))

    def test_a_turn_past_its_tool_rounds_ends_the_session_and_think_time_spaces_the_turns(self):
        lines = [session_line(0, turns=3, max_tool_rounds=0), session_line(1, turns=2, think_time_s=0.05)]
        path = self.write('rounds.jsonl', ''.join(json.dumps(line) + '\n' for line in lines))
        done = run_cli('--fixture', 'agent', '--sessions', path, '--concurrency', '2', '--output', 'rounds-out.jsonl',
                       cwd=self.folder)
        self.assertEqual(done.returncode, 1, done.stderr)
        self.assertEqual(json.loads(done.stdout)['sessions']['not_ok_by_kind'], {'max_tool_rounds': 1})
        records = self.records('rounds-out.jsonl')
        bounded = [r for r in records if r['session'] == 's0']
        self.assertEqual([(r['turn'], r['round'], r['ok']) for r in bounded], [(1, 0, True)])  # every run ok
        self.assertEqual((bounded[0]['session_end']['ended_by'], bounded[0]['session_end']['not_started_turns']),
                         ('max_tool_rounds', [2, 3]))
        thinking = sorted((r for r in records if r['session'] == 's1'), key=lambda r: r['offset_ms'])
        turn_one_end = thinking[1]['offset_ms'] + thinking[1]['duration_ms']
        self.assertGreaterEqual(thinking[2]['offset_ms'] - turn_one_end, 50)  # at least the think time

    def test_a_gate_sees_a_session_that_ended_not_ok_with_every_run_of_it_ok(self):
        # s0's one run is ok, but it still calls a tool after its 0 tool rounds: the session is not ok. A gate
        # on ok_ratio (over runs) holds; sessions_ok_ratio (over the planned sessions) fails, as it must.
        lines = [session_line(0, turns=2, max_tool_rounds=0), session_line(1, turns=1)]
        path = self.write('gated.jsonl', ''.join(json.dumps(line) + '\n' for line in lines))
        for number, (gate, status) in enumerate((('ok_ratio < 1', 0), ('sessions_ok_ratio < 1', 1))):
            with self.subTest(gate=gate):
                done = run_cli('--fixture', 'agent', '--sessions', path, '--fail-if', gate, '--output',
                               f'gated-{number}.jsonl', cwd=self.folder)
                self.assertEqual(done.returncode, status, done.stderr)
                summary = json.loads(done.stdout)
                self.assertEqual((summary['sessions']['planned'], summary['sessions']['ok_ratio']), (2, 0.5))
                again = run_cli('--summary', f'gated-{number}.jsonl', '--fail-if', gate, cwd=self.folder)
                self.assertEqual((again.returncode, json.loads(again.stdout)['gates']), (status, summary['gates']))
        # Without --fail-if, the default gates: every run ok and every planned session ok, live and read back.
        done = run_cli('--fixture', 'agent', '--sessions', path, '--output', 'default.jsonl', cwd=self.folder)
        again = run_cli('--summary', 'default.jsonl', cwd=self.folder)
        for ran in (done, again):
            self.assertEqual((ran.returncode, [(g['expr'], g['held']) for g in json.loads(ran.stdout)['gates']]),
                             (1, [('ok_ratio < 1', True), ('sessions_ok_ratio < 1', False)]), ran.stderr)
        # The same file given twice would count each session twice (2 of 2 planned ok, say): refused.
        twice = run_cli('--summary', 'default.jsonl', 'default.jsonl', '--fail-if', 'sessions_ok_ratio < 0.5',
                        cwd=self.folder)
        self.assertEqual(twice.returncode, 2, twice.stderr)
        self.assertRegex(twice.stderr, r'^stream_client\.py: error: load [0-9a-f]+: run 0 appears twice \(a file given '
                                       r'twice, or a record repeated\): give each load\'s file once\n$')

    def test_a_cancel_ends_the_sessions_in_flight_as_interrupted_and_starts_no_other(self):
        sessions = _parse_sessions('f', ''.join(json.dumps(session_line(n, turns=3, think_time_s=30)) + '\n'
                                                for n in range(3)))
        cancel, records = stream_client.Cancel(), []

        def on_record(record: dict) -> None:
            records.append(record)
            if len(records) == 2:  # each session in flight has sent its first round: stop the load
                cancel.cancel('SIGINT')
        with Fixture('agent') as fixture:
            requests = [stream_client.prepare(fixture.url, 'm', session.turns[0], tools=session.tools)
                        for session in sessions]
            stream_client._sessions._run_sessions(sessions, requests, stream_client.LoadSettings(3, 2), on_record,
                                                  cancel)
        self.assertEqual(sorted({r['session'] for r in records}), ['s0', 's1'])  # s2 never started
        ends = [r['session_end'] for r in records if 'session_end' in r]
        self.assertEqual([(end['ok'], end['ended_by'], end['not_started_turns']) for end in ends],
                         [(False, 'interrupted', [2, 3])] * 2)

    def test_a_run_whose_request_cannot_be_built_is_a_client_error_record_and_the_other_sessions_go_on(self):
        path = self.sessions_file(2, turns=2)
        real = stream_client._sessions._Turns.build

        def failing(turns, conversation):  # session s1's second turn cannot be encoded
            if any(item.get('content') == 'session 1 turn 2: weather?' for item in conversation.items):
                raise UnicodeEncodeError('utf-8', '\ud83d', 0, 1, 'surrogates not allowed')
            return real(turns, conversation)
        with mock.patch.object(stream_client._sessions._Turns, 'build', failing):
            done = run_cli('--fixture', 'agent', '--sessions', path, '--concurrency', '2', '--output', 'built.jsonl',
                           cwd=self.folder)
        self.assertEqual(done.returncode, 1, done.stderr)  # a session not ok
        self.assertNotIn('Traceback', done.stderr)
        records = self.records('built.jsonl')
        self.assertEqual(sorted(r['run'] for r in records), list(range(7)))
        self.assertEqual(sorted((r['session'], r['turn'], r['round'], r['ok'], r['error_kind']) for r in records),
                         [('s0', 1, 0, True, None), ('s0', 1, 1, True, None), ('s0', 2, 0, True, None),
                          ('s0', 2, 1, True, None), ('s1', 1, 0, True, None), ('s1', 1, 1, True, None),
                          ('s1', 2, 0, False, 'client_error')])
        failed = next(r for r in records if not r['ok'])
        self.assertIn('the client failed building the request: UnicodeEncodeError', failed['error'])
        self.assertIsNone(failed['request']['prompt_sha256'])
        end = failed['session_end']
        self.assertEqual((end['ok'], end['ended_by'], end['turns_run'], end['not_started_turns']),
                         (False, 'client_error', 2, []))
        sessions = json.loads(done.stdout)['sessions']
        self.assertEqual((sessions['sessions'], sessions['ok'], sessions['not_ok_by_kind']),
                         (2, 1, {'client_error': 1}))

    def test_a_failure_between_two_runs_ends_the_session_on_its_last_record(self):
        path = self.sessions_file(2, turns=2)
        real = stream_client._workloads._Conversation.answer

        def failing(conversation, text, calls):  # session s1's answer in turn 2 cannot go into its history
            if any(item.get('content') == 'session 1 turn 2: weather?' for item in conversation.items):
                raise ValueError('a deliberate failure taking the answer')
            return real(conversation, text, calls)
        with mock.patch.object(stream_client._workloads._Conversation, 'answer', failing):
            done = run_cli('--fixture', 'agent', '--sessions', path, '--concurrency', '2', '--output', 'between.jsonl',
                           cwd=self.folder)
        self.assertEqual(done.returncode, 1, done.stderr)
        self.assertNotIn('Traceback', done.stderr)
        records = self.records('between.jsonl')
        self.assertEqual(sorted(r['run'] for r in records), list(range(7)))
        self.assertTrue(all(r['ok'] for r in records))  # every run was; the session was not
        end = next(r for r in records if r['session'] == 's1' and 'session_end' in r)
        self.assertEqual((end['turn'], end['round']), (2, 0))
        self.assertEqual((end['session_end']['ok'], end['session_end']['ended_by'], end['session_end']['turns_run']),
                         (False, 'client_error', 2))
        self.assertIn('turn 2 round 0: the client failed after the run: ValueError', end['session_end']['reason'])

    def test_summary_of_a_sessions_file_that_lacks_a_session_or_a_run_names_what_and_exits_1(self):
        path = self.sessions_file(2, turns=2)
        done = run_cli('--fixture', 'agent', '--sessions', path, '--concurrency', '2', '--output', 'whole.jsonl',
                       cwd=self.folder)
        self.assertEqual(done.returncode, 0, done.stderr)
        with open(os.path.join(self.folder, 'whole.jsonl'), encoding='utf-8') as file:
            lines = file.readlines()
        records = [json.loads(line) for line in lines]
        self.assertEqual((len(records), records[0]['load']['sessions'], records[0]['load']['runs']), (8, 2, None))
        load = records[0]['load']['id']
        by_run = sorted(range(8), key=lambda index: records[index]['run'])
        middle = next(index for index in by_run[:-1] if 'session_end' not in records[index])
        last = by_run[-1]  # the last record written ends its session
        cuts = {'whole': ([], None),
                'a session': ([i for i, r in enumerate(records) if r['session'] == 's1'],
                              f'load {load}: 1 of 2 planned sessions has no record'),
                'a run': ([middle], f'load {load}: 1 of its runs numbered 0 to 7 has no record'),
                'the last run': ([last], f'load {load}: session {records[last]["session"]} has no last record '
                                         '(session_end)')}
        for name, (dropped, words) in cuts.items():
            with self.subTest(name):
                with open(os.path.join(self.folder, 'cut.jsonl'), 'w', encoding='utf-8') as file:
                    file.writelines(line for index, line in enumerate(lines) if index not in dropped)
                again = run_cli('--summary', 'cut.jsonl', cwd=self.folder)
                if words is None:
                    self.assertEqual((again.returncode, again.stderr), (0, ''))
                    continue
                self.assertEqual(again.returncode, 1, again.stderr)
                self.assertEqual(again.stderr.count('\n'), 1, again.stderr)  # one line
                self.assertTrue(again.stderr.startswith('stream_client.py: warning: cut.jsonl: not every planned run '
                                                        f'has a record: load {load}: '), again.stderr)
                self.assertIn(words.split(': ', 1)[1], again.stderr)
                self.assertTrue(json.loads(again.stdout)['sessions']['ok'] >= 1)  # the summary is still printed

    def test_runs_caps_the_sessions_and_rate_records_how_late_each_session_started(self):
        path = self.sessions_file(5, turns=1)
        done = run_cli('--fixture', 'agent', '--sessions', path, '--runs', '3', '--rate', '50', '--output',
                       'capped.jsonl', cwd=self.folder)
        self.assertEqual(done.returncode, 0, done.stderr)
        records = self.records('capped.jsonl')
        self.assertEqual(sorted({r['session'] for r in records}), ['s0', 's1', 's2'])
        self.assertEqual(json.loads(done.stdout)['sessions']['sessions'], 3)
        firsts = [r for r in records if r['round'] == 0]
        self.assertTrue(all(isinstance(r['queued_ms'], float) for r in firsts))
        self.assertTrue(all(r['queued_ms'] is None for r in records if r['round'] == 1))


def fixture_result(value) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


SPLIT = ('X\ud83d', '\ude00Y')  # one emoji's UTF-16 surrogate pair, split across two events


class SplitPairServer(LoopbackServer):
    """An agent's model on chat and Messages that splits an emoji's surrogate pair across two events, as a
    byte-level tokenizer's server may: a call of get_weather whose arguments split it when the last message
    is a user turn, text that splits it after a tool result. Keeps every request body received."""

    def __init__(self, api: str) -> None:
        super().__init__()
        self.api, self.bodies = api, []
        self.url = self.url.replace('/v1/chat/completions', URL_PATHS[api])
        self.start()

    def serve(self, sock) -> None:
        with sock:
            body = read_request(sock)
            self.bodies.append(body)
            calling = json.loads(body)['messages'][-1]['role'] == 'user' and \
                not isinstance(json.loads(body)['messages'][-1]['content'], list)
            events = (self.chat_events if self.api == 'chat' else self.messages_events)(calling)
            payload = ''.join(f'event: {kind}\ndata: {data}\n\n' if kind else f'data: {data}\n\n'
                              for kind, data in events).encode()
            sock.sendall(sse_response(payload, headers=f'Content-Length: {len(payload)}\r\n'))

    @staticmethod
    def chat_events(calling: bool) -> list:
        if calling:
            return [(None, opening()), (None, arguments('{"city": "' + SPLIT[0])), (None, arguments(SPLIT[1] + '"}')),
                    (None, chunk_json(finish_reason='tool_calls')), (None, '[DONE]')]
        return [(None, chunk_json(delta={'content': SPLIT[0]})), (None, chunk_json(delta={'content': SPLIT[1]})),
                (None, chunk_json(finish_reason='stop')), (None, '[DONE]')]

    @staticmethod
    def messages_events(calling: bool) -> list:
        if calling:
            return [MESSAGE_START,
                    message_event('content_block_start', index=0, content_block={
                        'type': 'tool_use', 'id': 'c1', 'name': 'get_weather', 'input': {}}),
                    *[message_event('content_block_delta', index=0,
                                    delta={'type': 'input_json_delta', 'partial_json': piece})
                      for piece in ('{"city": "' + SPLIT[0], SPLIT[1] + '"}')],
                    *message_end('tool_use')]
        return [MESSAGE_START, TEXT_BLOCK, text_delta(SPLIT[0]), text_delta(SPLIT[1]), *message_end()]


class SplitPairTests(unittest.TestCase):
    """An answer whose emoji arrives as two halves of a surrogate pair, in two events: the next request
    carries the pair as the server sent it, and every run has its record."""

    def setUp(self) -> None:
        self.folder = tempfile.mkdtemp()

    def test_a_pair_split_across_events_goes_back_whole_in_the_history(self):
        sent = json.loads('"' + json.dumps(SPLIT[0])[1:-1] + json.dumps(SPLIT[1])[1:-1] + '"')  # the server's text
        self.assertEqual(sent, 'X\U0001F600Y')
        for api in ('chat', 'messages'):
            for count in (1, 2):
                with self.subTest(api=api, sessions=count):
                    path = os.path.join(self.folder, f'split-{api}-{count}.jsonl')
                    with open(path, 'w', encoding='utf-8') as file:
                        file.write(''.join(json.dumps(session_line(n, turns=2)) + '\n' for n in range(count)))
                    server = SplitPairServer(api)
                    try:
                        done = run_cli('--url', server.url, '--model', 'm', '--sessions', path, '--concurrency', '2',
                                       '--output', f'out-{api}-{count}.jsonl', cwd=self.folder)
                    finally:
                        server.close()
                    self.assertEqual(done.returncode, 0, done.stderr)
                    with open(os.path.join(self.folder, f'out-{api}-{count}.jsonl'), encoding='utf-8') as file:
                        records = [json.loads(line) for line in file]
                    self.assertEqual(len(records), 4 * count)
                    self.assertTrue(all(record['ok'] for record in records))
                    self.assertEqual(sum(record['session_end']['ok'] for record in records if 'session_end' in record),
                                     count)
                    self.assertEqual(len(server.bodies), 4 * count)
                    last = max((json.loads(body)['messages'] for body in server.bodies), key=len)
                    if api == 'chat':
                        self.assertEqual([m['tool_calls'][0]['function']['arguments'] for m in last
                                          if m.get('tool_calls')], ['{"city": "' + sent + '"}'] * 2)
                        self.assertEqual([m['content'] for m in last if m['role'] == 'assistant' and m['content']],
                                         [sent])
                    else:
                        blocks = [block for m in last if m['role'] == 'assistant' for block in m['content']]
                        self.assertEqual([block.get('input') or block.get('text') for block in blocks],
                                         [{'city': sent}, sent, {'city': sent}])


class SessionFileTests(unittest.TestCase):
    """A malformed sessions file: one line naming the file, the line and the field; exit 2; no evidence file."""

    def setUp(self) -> None:
        self.folder = tempfile.mkdtemp()

    def check_refused(self, text: str, words: str) -> None:
        path = os.path.join(self.folder, 'bad.jsonl')
        with open(path, 'w', encoding='utf-8') as file:
            file.write(text)
        done = run_cli('--fixture', 'agent', '--sessions', path, '--output', 'never.jsonl', cwd=self.folder)
        self.assertEqual(done.returncode, 2)
        self.assertEqual(len(done.stderr.splitlines()), 1, done.stderr)
        self.assertIn(f'--sessions {path} {words}', done.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.folder, 'never.jsonl')))

    def test_each_malformed_line_is_named(self):
        good = json.dumps(session_line(0)) + '\n'
        no_result = {k: v for k, v in session_line(1).items() if k != 'tool_results'}
        cases = [
            (good + '{"id": "s1", "turns": [\n', 'line 2: not JSON'),
            (good + json.dumps({'id': 's1'}) + '\n', 'line 2: turns: missing'),
            (json.dumps({'turns': ['x']}) + '\n', 'line 1: id: missing'),
            (good + json.dumps(no_result) + '\n', "line 2: tool_results: no result for tool 'get_weather'"),
            (good + json.dumps(session_line(0)) + '\n', "line 2: id: 's0' is the id of line 1 too"),
            (json.dumps({**session_line(0), 'turns': ['x', 3]}) + '\n', 'line 1: turns[1]: must be a non-empty string'),
            (json.dumps({**session_line(0), 'tools': [{'type': 'function', 'function': {}}]}) + '\n',
             'line 1: tools[0].function.name: missing'),
            (json.dumps({**session_line(0), 'max_tool_rounds': -1}) + '\n', 'line 1: max_tool_rounds'),
            (json.dumps({**session_line(0), 'think': 1}) + '\n', 'line 1: think: unknown key'),
            ('[{"conversations": [{"from": "robot", "value": "x"}]}]', 'item 1: conversations[0].from'),
            ('[{"id": "a", "conversations": [{"from": "human", "value": "x"}]},'
             ' {"id": "a", "conversations": [{"from": "human", "value": "y"}]}]',
             "item 2: id: 'a' is the id of item 1 too"),
            ('[{"conversations": [{"from": "human", "value": "x"}]},'
             ' {"id": "sharegpt-1", "conversations": [{"from": "human", "value": "y"}]}]',
             "item 2: id: 'sharegpt-1' is the id of item 1 too"),
            ('', 'has no sessions'),
        ]
        for text, words in cases:
            with self.subTest(words=words):
                self.check_refused(text, words)

    def test_a_tool_the_server_would_refuse_is_named_by_its_line(self):
        line = {**session_line(0), 'tools': [{'type': 'function', 'function': {'name': 'f', 'parameters': 3}}],
                'tool_results': {'f': 'x'}}
        self.check_refused(json.dumps(line) + '\n', 'line 1: tools[0]')

    @sans_io
    def test_the_results_of_a_tool_are_consumed_in_order_and_the_last_repeats(self):
        from stream_client._workloads import _ToolResults
        session = _parse_sessions('f', json.dumps(session_line(0)))[0]
        results = _ToolResults(session)
        self.assertEqual([results.next('get_weather') for _ in range(4)], ['{"temp": 20}', 'sunny', 'sunny', 'sunny'])
        with self.assertRaises(UsageError):
            _parse_sessions('f', json.dumps({**session_line(0), 'tool_results': {'get_weather': []}}))

    @sans_io
    def test_the_conversation_of_each_api(self):
        calls = [('c1', 'get_weather', '{"city": "Paris"}')]
        shapes = {}
        for api in SESSION_APIS:
            conversation = _Conversation(api, 'sys')
            conversation.user('hi')
            conversation.answer('', calls)
            conversation.results([('c1', 'sunny')])
            conversation.answer('done', [])
            shapes[api] = conversation.body_fields()
        self.assertEqual(shapes['chat']['messages'][0], {'role': 'system', 'content': 'sys'})
        self.assertEqual([m['role'] for m in shapes['messages']['messages']],
                         ['user', 'assistant', 'user', 'assistant'])
        self.assertEqual([item.get('type') for item in shapes['responses']['input']],
                         [None, 'function_call', 'function_call_output', 'message'])


class VirtualThinkTimeTests(unittest.TestCase):
    """Sessions on a virtual clock: a turn after the first starts its think time after the turn before
    ended, not sooner and not later; minutes of think time checked without waiting (the real-time test of
    the same is SessionLoadTests' think-time test). One session at a time, so that one thread waits."""

    def test_each_turn_waits_its_think_time_exactly_on_the_engine_and_on_worker_threads(self):
        text = ''.join(json.dumps({'id': f's{n}', 'turns': ['one', 'two', 'three'], 'think_time_s': 45}) + '\n'
                       for n in range(3))
        sessions = stream_client._workloads._parse_sessions('think.jsonl', text)
        requests = [stream_client.prepare('http://127.0.0.1:9/v1/chat/completions', 'm', session.turns[0])
                    for session in sessions]
        for engine in (True, False):  # without epoll, each session on a worker thread that sleeps its thinks
            with self.subTest(engine=engine), mock.patch.object(stream_client._load, '_EPOLL', engine), \
                    mock.patch.object(stream_client._machine._Machine, 'start', instant_start()), \
                    mock.patch.object(stream_client._load, '_run', instant_run()):
                clock, records = VirtualClock(), []
                settings = stream_client.LoadSettings(runs=3, concurrency=1)
                stream_client._sessions._run_sessions(sessions, requests, settings, records.append,
                                                      stream_client.Cancel(), clock.clock())
                self.assertEqual(len(records), 9)
                for session in ('s0', 's1', 's2'):
                    runs = sorted((r for r in records if r['session'] == session), key=lambda r: r['turn'])
                    self.assertEqual([r['turn'] for r in runs], [1, 2, 3])
                    for before, after in zip(runs, runs[1:]):  # the runs take no time
                        self.assertEqual(round(after['offset_ms'] - before['offset_ms'], 3), 45_000)
                self.assertEqual(round(clock.now() - clock.start, 6), 3 * 2 * 45)  # three sessions, two thinks each


class SessionEngineTests(unittest.TestCase):
    """Sessions under the engine's steps: shards that merge into exactly the file, a capacity search whose
    probes start sessions, repeats that are new sessions."""

    def setUp(self) -> None:
        self.folder = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.folder)

    def write_sessions(self, count: int, turns: int) -> str:
        path = os.path.join(self.folder, 'sessions.jsonl')
        with open(path, 'w', encoding='utf-8') as file:
            file.write(''.join(json.dumps(session_line(n, turns)) + '\n' for n in range(count)))
        return path

    def records(self, *names: str) -> list[dict]:
        out = []
        for name in names:
            with open(os.path.join(self.folder, name), encoding='utf-8') as file:
                out += [json.loads(line) for line in file]
        return out

    def test_three_shards_of_sessions_as_three_processes_merge_into_exactly_the_file(self):
        path = self.write_sessions(10, 2)
        start = time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(time.time() + 2))
        with Fixture('agent') as fixture:
            shards = [subprocess.Popen(script_command(CLIENT, '--url', fixture.url, '--model', 'm', '--sessions', path,
                                                      '--shard', f'{index}/3', '--start-at', start, '--concurrency',
                                                      '2', '--quiet', '--output', f'shard-{index}.jsonl'),
                                       cwd=self.folder, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                       env=script_env())
                      for index in range(3)]
            done = [shard.communicate(timeout=120) + (shard.returncode,) for shard in shards]
        self.assertEqual([status for _, _, status in done], [0] * 3, done)
        files = [f'shard-{index}.jsonl' for index in range(3)]
        records = self.records(*files)
        ends = sorted((r['session_index'], r['session'], r['load']['plan']['shard']) for r in records
                      if r.get('session_end'))
        self.assertEqual(ends, [(n, f's{n}', n % 3) for n in range(10)])  # each session once, by its shard
        self.assertEqual(len({r['load']['plan']['id'] for r in records}), 1)
        self.assertEqual([len(self.records(name)) for name in files], [4 * 4, 3 * 4, 3 * 4])  # 2 turns of 2 runs
        merged = run_cli('--summary', *files, cwd=self.folder)
        self.assertEqual(merged.returncode, 0, merged.stderr)
        summary = json.loads(merged.stdout)
        self.assertEqual((summary['sessions']['sessions'], summary['sessions']['ok'], summary['runs']), (10, 10, 40))
        missing = run_cli('--summary', *files[:2], cwd=self.folder)
        self.assertEqual(missing.returncode, 2, missing.stderr)
        self.assertIn('shard 2/3 missing', missing.stderr)
        twice = run_cli('--summary', *files, files[0], cwd=self.folder)
        self.assertEqual(twice.returncode, 2, twice.stderr)

    def test_a_capacity_search_over_sessions_follows_its_probes_verdicts(self):
        # --fixture capacity starts at most 20 answers per second; each probe starts one-turn sessions at its
        # rate, cycling through the file. Which probes pass depends on the machine (5 per second within 500 ms
        # passes on a busy one, 80 cannot); that each probe is the one _next_probe chooses from the verdicts
        # before it does not.
        path = self.write_sessions(3, 1)
        done = run_cli('--fixture', 'capacity', '--sessions', path, '--find-capacity', '5:80', '--duration', '0.3',
                       '--arrivals', 'constant', '--slo', 'first_text_ms=500', '--slo-target', '0.8', '--output',
                       'capacity.jsonl', '--quiet', cwd=self.folder, timeout=120)
        self.assertNotEqual(done.returncode, 2, done.stderr)
        summary, records = json.loads(done.stdout), self.records('capacity.jsonl')
        steps = {step['rate']: step for step in summary['steps']}
        probed = [rate for _, rate in sorted({(r['load']['step'], r['load']['rate']) for r in records})]
        self.assertGreaterEqual(len(probed), 2)
        verdicts = [(rate, stream_client._summary._saturation_step([steps[rate]], 0.8)['rate'] is not None)
                    for rate in probed]
        for number, rate in enumerate(probed):
            self.assertEqual(stream_client._steps._next_probe(5, 80, verdicts[:number], 0.05), rate, verdicts)
        self.assertEqual(summary['capacity']['probes'], len(probed))
        for step, rate in enumerate(probed):  # each probe started its scheduled sessions, the file cycled
            planned = stream_client._load._scheduled_runs(rate, 'constant', 0, 0.3)
            ends = [r for r in records if r['load']['step'] == step and r.get('session_end')]
            self.assertEqual(sorted(r['session_index'] for r in ends), list(range(planned)))
            self.assertEqual({r['session'] for r in ends}, {f's{n % 3}' for n in range(planned)})
        self.assertEqual(summary['sessions']['sessions'], len([r for r in records if r.get('session_end')]))

    def test_a_repeated_session_file_is_run_again_as_new_sessions_each_pass(self):
        path = self.write_sessions(2, 1)
        done = run_cli('--fixture', 'agent', '--sessions', path, '--repeat', '3', '--output', 'again.jsonl',
                       '--quiet', cwd=self.folder)
        self.assertEqual(done.returncode, 0, done.stderr)
        records = self.records('again.jsonl')
        self.assertEqual(sorted((r['load']['repeat'], r['session']) for r in records if r.get('session_end')),
                         [(repeat, f's{n}') for repeat in range(3) for n in range(2)])
        self.assertEqual(len({r['load']['id'] for r in records}), 3)  # a load per pass
        self.assertEqual(json.loads(done.stdout)['sessions']['sessions'], 6)

    def write_lines(self, name: str, lines: list[dict]) -> str:
        path = os.path.join(self.folder, name)
        with open(path, 'w', encoding='utf-8') as file:
            file.write(''.join(json.dumps(line) + '\n' for line in lines))
        return path

    def test_two_session_files_with_the_same_first_turns_are_two_plans(self):
        first = self.write_lines('a.jsonl', [{'id': 's0', 'turns': ['hi', 'more']}, {'id': 's1', 'turns': ['hi']}])
        second = self.write_lines('b.jsonl', [{'id': 's0', 'turns': ['hi', 'other']}, {'id': 's1', 'turns': ['hi']}])
        for index, path in enumerate((first, second)):
            done = run_cli('--fixture', 'ok', '--sessions', path, '--shard', f'{index}/2', '--quiet', '--output',
                           f'shard-{index}.jsonl', cwd=self.folder)
            self.assertEqual(done.returncode, 0, done.stderr)
        plans = {r['load']['plan']['id'] for r in self.records('shard-0.jsonl', 'shard-1.jsonl')}
        self.assertEqual(len(plans), 2)
        mixed = run_cli('--summary', 'shard-0.jsonl', 'shard-1.jsonl', cwd=self.folder)
        self.assertEqual(mixed.returncode, 2, mixed.stderr)  # each plan lacks a shard: never one whole load
        self.assertIn('missing', mixed.stderr)

    def test_system_is_sent_to_a_session_without_its_own_and_the_record_says_so(self):
        for session, expected in (({'id': 'own', 'system': 'OWN', 'turns': ['a', 'b']}, 'OWN'),
                                  ({'id': 'none', 'turns': ['a', 'b']}, 'FLAG')):
            with self.subTest(session=session['id']):
                path = self.write_lines(f'{session["id"]}.jsonl', [session])
                with Fixture('ok') as fixture:
                    done = run_cli('--url', fixture.url, '--model', 'm', '--sessions', path, '--system', 'FLAG',
                                   '--quiet', '--output', f'{session["id"]}-out.jsonl', cwd=self.folder)
                    _, body = fixture.last_request  # the second turn's: the history as it stands
                self.assertEqual(done.returncode, 0, done.stderr)
                self.assertEqual(body['messages'][0], {'role': 'system', 'content': expected})
                self.assertEqual([m['role'] for m in body['messages']], ['system', 'user', 'assistant', 'user'])
                self.assertEqual({r['request']['system'] for r in self.records(f'{session["id"]}-out.jsonl')}, {True})

    def test_runs_beyond_the_file_cycle_through_it_as_new_sessions(self):
        path = self.write_sessions(2, 1)
        done = run_cli('--fixture', 'agent', '--sessions', path, '--runs', '5', '--quiet', '--output', 'o.jsonl',
                       cwd=self.folder)
        self.assertEqual(done.returncode, 0, done.stderr)
        ends = sorted((r['session_index'], r['session']) for r in self.records('o.jsonl') if r.get('session_end'))
        self.assertEqual(ends, [(index, f's{index % 2}') for index in range(5)])
        self.assertEqual(json.loads(done.stdout)['sessions']['sessions'], 5)

    def test_a_bound_from_the_schedule_is_refused_for_sessions(self):
        path = self.write_sessions(1, 2)
        done = run_cli('--fixture', 'agent', '--sessions', path, '--rate', '5', '--slo',
                       'first_text_from_schedule_ms=60000', '--output', 'o.jsonl', cwd=self.folder)
        self.assertEqual((done.returncode, len(done.stderr.splitlines())), (2, 1), done.stderr)
        self.assertIn('follow the run before them', done.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.folder, 'o.jsonl')))

    @sans_io
    def test_a_warm_up_session_is_left_out_of_the_reports_rows(self):
        rows = stream_client._session_summary._SessionRows()
        load = {'id': 'L'}
        for index, warmup in ((0, True), (1, False)):
            rows.add({'session': f's{index}', 'session_index': index, 'turn': 1, 'round': 0, 'ok': not warmup,
                      'duration_ms': 1.0, 'error_kind': 'eof_before_done' if warmup else None, 'warmup': warmup,
                      'load': load, 'session_end': {'reason': None, 'not_started_turns': []}})
        self.assertEqual([session for session, _ in rows.rows], ['s1'])
        self.assertNotIn('eof_before_done', rows.html())


class _Record(dict):
    """A run's record that a weak reference can point at."""


class HeldRecordTests(unittest.TestCase):
    """A session's job keeps what its next run needs from a record (text, calls, failure), not the record: a
    record held while the next run is in flight outlives the collector's youngest generation."""

    @sans_io
    def test_a_sessions_job_holds_no_record_while_its_next_run_is_in_flight(self):
        """Neither the record the engine gave (a weak reference says when it is gone) nor the copy held back
        for session_end once emitted (its reference count: the test's list and the call's argument), with
        and without the wrapper that announces each run, across a tool round (no think time between)."""
        session = stream_client._workloads._Session('s0', ('one',), tool_results={'get_weather': ('sunny',)})
        request = stream_client.prepare('http://127.0.0.1:8000/v1/chat/completions', 'm', 'one', max_tokens=8)
        call = {'index': 0, 'id': 'call_1', 'name': 'get_weather', 'arguments': '{"city": "Paris"}'}
        for announced in (False, True):
            emitted = []
            run = stream_client._sessions._SessionRun(session, request, stream_client.Cancel(), emitted.append, 0.0,
                                                      None, fields={'session_index': 0})
            steps = run.steps() if not announced else \
                stream_client._load._announcing(lambda *_: run.steps(), lambda: None)(0, 0.0, 0.0)
            self.assertIsInstance(next(steps), stream_client.PreparedRequest)
            record = _Record(ok=True, text='', tool_calls=[call], error_kind=None, error=None)
            held = weakref.ref(record)
            second = steps.send(record)  # the tool round's run, at once
            del record
            with self.subTest(announced=announced):
                self.assertIsInstance(second, stream_client.PreparedRequest)
                self.assertIn(b'"tool_call_id": "call_1"', second.body)  # the call went into the history
                self.assertIsNone(held())  # and the record itself is gone
                self.assertEqual(len(emitted), 1)  # the first run's, emitted as the second began...
                self.assertEqual(sys.getrefcount(emitted[0]), 2)  # ...and held by nothing else
                with self.assertRaises(StopIteration):  # the session is over
                    steps.send(_Record(ok=True, text='sunny in Paris', tool_calls=[], error_kind=None, error=None))
                self.assertEqual([(r['run'], r['round'], r['session_index'], 'session_end' in r) for r in emitted],
                                 [(None, 0, 0, False), (None, 1, 0, True)])


class TurnWireTests(unittest.TestCase):
    """A session's turn sends the prepared request's head with its new body: byte for byte what rendering
    the request again would give."""

    @sans_io
    def test_a_turns_body_and_prompt_digest_are_what_encoding_the_whole_history_gives(self):
        """Each item of the history is encoded once (_GrowingJson); every turn's body, twin and prompt_sha256 are
        still those of the whole history encoded again, on every API, salted or not, with tool calls, non-ASCII
        text and a surrogate pair's halves (which make the whole body escaped)."""
        json_text, salt = stream_client._json._json_text, stream_client._salt._Salt('session', '0badcafe', True)
        calls = [('call_1', 'get_weather', '{"city": "Z\u00fcrich"}')]
        answers = [('', calls), ('caf\u00e9 \u2713', []), ('X\ud83d', []), ('\ude00 done', calls), ('ok', [])]
        for api in SESSION_APIS:
            url = 'http://127.0.0.1:8000' + URL_PATHS[api]
            for system, salted in ((None, None), ('be brief', None), (None, salt), ('be brief', salt)):
                request = stream_client.prepare(url, 'm', 'first', tools=fixture_server.TOOLS, system=system,
                                                cross_check=True)
                turns = stream_client._sessions._Turns(request, salted)
                conversation = _Conversation(request.api, system)
                for number, (text, called) in enumerate(answers):
                    conversation.user(f'turn {number}')
                    turn = turns.build(conversation)
                    fields = conversation.body_fields()
                    body = {**json.loads(request.body), **fields}
                    body = body if salted is None else salted.body(request.api, body)
                    digest = hashlib.sha256(json_text(fields, sort_keys=True).encode()).hexdigest()
                    with self.subTest(api=request.api, system=system, salted=bool(salted), turn=number):
                        self.assertEqual(turn.body, json_text(body).encode())
                        self.assertEqual(turn.settings['prompt_sha256'], digest)
                        self.assertEqual(turn.twin.body, stream_client._request._unstreamed_twin(turn, body).body)
                        self.assertEqual(turn.settings.get('cache_salt'), salted and salted.described())
                        self.assertEqual(turn, dataclasses.replace(turns.request, body=turn.body, wire=turn.wire,
                                                                   settings=turn.settings, twin=turn.twin))
                    conversation.answer(text, called)
                    if called:
                        conversation.results([('call_1', 'sunny \u2600')])
                self.assertTrue(turn.body.isascii())  # a lone half in the history: all of it escaped

    @sans_io
    def test_a_turns_wire_is_what_rendering_the_request_again_gives(self):
        urls = ('http://127.0.0.1:8000/v1/chat/completions', 'https://example.test:8443/proxy/v1/messages',
                'http://[::1]:9000/v1/responses')
        for url in urls:
            for headers in ([], [('X-Tenant', 'a b'), ('X-Trace', '1')]):
                request = stream_client.prepare(url, 'm', 'first', max_tokens=9, token='sk-test',
                                                headers=headers, system='be brief')
                conversation, turns = _Conversation(request.api, 'be brief'), stream_client._sessions._Turns(request)
                for text in ('hi', 'ünïcode ✓ and "quotes"', 'x' * 70_000):
                    conversation.user(text)
                    turn = turns.build(conversation)
                    rendered = stream_client._request._render_request(request.scheme, request.host, request.port,
                                                                      request.path, request.headers, turn.body)
                    with self.subTest(url=url, headers=headers, text=text[:12]):
                        self.assertEqual(turn.wire, rendered)
                        self.assertEqual(turn.wire.count(b'Content-Length:'), 1)
                    conversation.answer('ok', [])
        with self.assertRaisesRegex(ValueError, 'no Content-Length'):
            stream_client._request._wire_head(b'GET / HTTP/1.1\r\nHost: h\r\n\r\n')
