"""--cache-salt: where the marker goes on each API, one per pass (or per session), and against the fixture's
prefix cache (--prefix-cache) that a salted replay is served as its first pass was, and an unsalted one is not."""
from __future__ import annotations

import json
import os
import tempfile
import unittest

import fixture_server
import stream_client
from stream_client._salt import _pass_salt, _Salt, _salted
from .support import Fixture, HERE, run_cli
from .tiers import sans_io

SALT = _Salt('pass', '0a1b2c3d')
PROMPTS = str(HERE / 'testdata' / 'examples' / 'prompts.jsonl')  # docs/goodput.md's: four, none sharing a block
PREFILL = 0.3  # seconds the fixture's prefill of a prompt with nothing cached takes


def load_block(load_id: str = 'a' * 16, shards: int = 1, plan: str = 'p' * 16) -> dict:
    return {'id': load_id, 'plan': {'id': plan, 'shard': 0, 'shards': shards}}


class SaltTests(unittest.TestCase):

    @sans_io
    def test_the_marker_goes_before_the_system_message_where_there_is_one_else_the_first_message(self):
        marked = SALT.text
        cases = [
            ('chat', {'messages': [{'role': 'system', 'content': 'S'}, {'role': 'user', 'content': 'U'}]},
             {'messages': [{'role': 'system', 'content': marked + 'S'}, {'role': 'user', 'content': 'U'}]}),
            ('chat', {'messages': [{'role': 'user', 'content': 'U'}, {'role': 'assistant', 'content': 'A'}]},
             {'messages': [{'role': 'user', 'content': marked + 'U'}, {'role': 'assistant', 'content': 'A'}]}),
            ('completions', {'prompt': 'P'}, {'prompt': marked + 'P'}),
            ('responses', {'input': 'I', 'instructions': 'S'}, {'input': 'I', 'instructions': marked + 'S'}),
            ('responses', {'input': [{'role': 'user', 'content': 'I'}]},
             {'input': [{'role': 'user', 'content': marked + 'I'}]}),
            ('messages', {'system': 'S', 'messages': [{'role': 'user', 'content': 'U'}]},
             {'system': marked + 'S', 'messages': [{'role': 'user', 'content': 'U'}]}),
            ('messages', {'messages': [{'role': 'user', 'content': [{'type': 'image'},
                                                                    {'type': 'text', 'text': 'U'}]}]},
             {'messages': [{'role': 'user', 'content': [{'type': 'image'},
                                                        {'type': 'text', 'text': marked + 'U'}]}]}),
        ]
        for api, body, salted in cases:
            with self.subTest(api=api, body=body):
                self.assertEqual(SALT.body(api, body), salted)
        self.assertEqual(cases[0][1]['messages'][0]['content'], 'S', 'the body given is left as it was')

    @sans_io
    def test_with_vllm_the_marker_is_also_the_cache_salt_field(self):
        salt = _Salt('pass', '0a1b2c3d', field=True)
        self.assertEqual(salt.body('completions', {'prompt': 'P'}),
                         {'prompt': salt.text + 'P', 'cache_salt': '0a1b2c3d'})

    @sans_io
    def test_each_pass_has_its_marker_and_the_shards_of_one_plan_share_theirs(self):
        self.assertIsNone(_pass_salt('off', load_block()))
        first, second = _pass_salt('pass', load_block('a' * 16)), _pass_salt('pass', load_block('b' * 16))
        self.assertNotEqual(first.marker, second.marker)  # two loads (repeats, steps, commands): two markers
        self.assertRegex(first.marker, r'^[0-9a-f]{8}$')
        repeats = {_pass_salt('pass', {**load_block(), 'repeat': repeat, 'step': None}).marker for repeat in (0, 1)}
        steps = {_pass_salt('pass', {**load_block(), 'repeat': None, 'step': step}).marker for step in (0, 1)}
        self.assertEqual((len(repeats), len(steps)), (2, 2))  # even were a load's id shared by its passes
        shards = [_pass_salt('pass', load_block(f'{"p" * 16}.{index}', shards=2)) for index in range(2)]
        self.assertEqual(shards[0], shards[1])
        self.assertNotEqual(shards[0], _pass_salt('pass', load_block('p' * 16 + '.0', shards=2, plan='q' * 16)))
        self.assertEqual(_pass_salt('pass,vllm', load_block()).field, True)

    @sans_io
    def test_a_session_gets_its_own_marker_only_when_asked(self):
        self.assertEqual(SALT.for_session('s1'), SALT)
        by_session = _Salt('session', '0a1b2c3d')
        markers = {by_session.for_session(name).marker for name in ('s1', 's2')}
        self.assertEqual(len(markers), 2)
        self.assertNotIn('0a1b2c3d', markers)
        self.assertEqual(by_session.for_session('s1'), by_session.for_session('s1'))

    @sans_io
    def test_a_salted_request_keeps_its_prompt_digest_says_its_salt_and_salts_its_twin(self):
        request = stream_client.prepare('http://127.0.0.1:9/v1/chat/completions', 'm', 'hello', cross_check=True)
        salted = _salted(request, SALT)
        self.assertIs(_salted(request, None), request)
        self.assertEqual(salted.settings['prompt_sha256'], request.settings['prompt_sha256'])
        self.assertEqual(salted.settings['cache_salt'], {'mode': 'pass', 'marker': '0a1b2c3d', 'field': False})
        for sent in (salted, salted.twin):
            self.assertEqual(json.loads(sent.body)['messages'][0]['content'], SALT.text + 'hello')
            self.assertIn(sent.body, sent.wire)
        self.assertFalse(json.loads(salted.twin.body)['stream'])


class PrefixCacheReplayTests(unittest.TestCase):
    """docs/goodput.md's --prompts load repeated against the fixture's prefix cache: without a salt the second
    pass finds every prompt cached and answers faster than the first did; with it, the second pass is a first
    pass."""

    def setUp(self) -> None:
        self.folder = tempfile.mkdtemp()

    def repeated(self, *salt: str) -> tuple[list[list[float]], list[tuple[int, int]], list[dict]]:
        """The first texts of each of two passes, what the fixture's cache found for each request, the records."""
        with Fixture('ok', prefix_cache=PREFILL) as fixture:
            done = run_cli('--url', fixture.url, '--model', 'm', '--prompts', PROMPTS, '--runs', '4',
                           '--repeat', '2', *salt, '--output', 'out.jsonl', cwd=self.folder)
            served = list(fixture.instance.prefix_cache.served)
        self.assertEqual(done.returncode, 0, done.stderr)
        with open(os.path.join(self.folder, 'out.jsonl'), encoding='utf-8') as file:
            records = [json.loads(line) for line in file]
        os.unlink(os.path.join(self.folder, 'out.jsonl'))
        passes = [[r['first_text_ms'] for r in records if r['load']['repeat'] == repeat] for repeat in (0, 1)]
        return passes, served, records

    def test_a_salted_replay_is_served_as_a_first_pass_and_an_unsalted_one_faster(self):
        plain, plain_served, _ = self.repeated()
        salted, salted_served, records = self.repeated('--cache-salt', 'pass')
        # the truth, from the fixture: the unsalted replay found each prompt's blocks, the salted one none
        self.assertEqual([cached for cached, _ in plain_served[:4]], [0] * 4)
        self.assertTrue(all(cached >= words - 7 for cached, words in plain_served[4:]), plain_served)
        self.assertEqual([cached for cached, _ in salted_served], [0] * 8)
        # what the client measured, as orderings: the unsalted replay is faster than any run of its first
        # pass; the salted replay is slower than every run of the unsalted one, as its own first pass is
        self.assertLess(max(plain[1]), min(plain[0]))
        self.assertGreater(min(salted[1]), max(plain[1]))
        self.assertGreater(min(salted[0]), max(plain[1]))
        markers = [{r['request']['cache_salt']['marker'] for r in records if r['load']['repeat'] == repeat}
                   for repeat in (0, 1)]
        self.assertEqual([len(markers[0]), len(markers[1]), len(markers[0] | markers[1])], [1, 1, 2])
        self.assertEqual({r['load']['cache_salt'] for r in records}, {'pass'})

    def test_session_is_for_sessions_and_the_field_is_not_given_twice(self):
        for flags, words in ((['--cache-salt', 'session'], 'it is for --sessions'),
                             (['--cache-salt', 'pass,vllm', '--extra', '{"cache_salt": "x"}'], 'leave it out')):
            with self.subTest(flags=flags):
                done = run_cli('--fixture', 'ok', '--runs', '2', *flags, '--output', 'refused.jsonl', cwd=self.folder)
                self.assertEqual(done.returncode, 2, done.stderr)
                self.assertIn(words, done.stderr)
                self.assertFalse(os.path.exists(os.path.join(self.folder, 'refused.jsonl')))



class SharingKeptTests(unittest.TestCase):
    """The salt breaks sharing across passes (and sessions, when asked), never the sharing a session's history
    or a trace's hash_ids intend: the fixture's cache finds those within a pass."""

    def setUp(self) -> None:
        self.folder = tempfile.mkdtemp()

    def write(self, name: str, lines: list[dict]) -> None:
        with open(os.path.join(self.folder, name), 'w', encoding='utf-8') as file:
            file.write(''.join(json.dumps(line) + '\n' for line in lines))

    def served(self, mode: str, *args: str) -> list[tuple[int, int]]:
        with Fixture(mode, prefix_cache=0.01) as fixture:
            output = f'{len(os.listdir(self.folder))}.jsonl'
            done = run_cli('--url', fixture.url, '--model', 'm', *args, '--output', output, cwd=self.folder)
            self.assertEqual(done.returncode, 0, done.stderr)
            return list(fixture.instance.prefix_cache.served)

    def test_sessions_share_their_history_and_under_pass_their_system_message_but_not_under_session(self):
        system = 'You are a travel agent who always checks the weather first.'
        self.write('sessions.jsonl', [{'id': f's{n}', 'system': system, 'tools': fixture_server.TOOLS,
                                       'turns': [f'session {n}: weather?', 'and tomorrow?'],
                                       'tool_results': {'get_weather': ['sunny']}} for n in range(2)])
        for mode in ('pass', 'session'):
            with self.subTest(mode=mode):
                served = self.served('agent', '--sessions', 'sessions.jsonl', '--cache-salt', mode)
                self.assertEqual(len(served), 8)  # two sessions of two turns of two rounds, one after the other
                self.assertEqual(served[0][0], 0)
                self.assertTrue(all(cached > 0 for cached, _ in served[1:4] + served[5:8]), served)  # the history
                self.assertEqual(served[4][0] > 0, mode == 'pass', served)  # s1's first run: the system message

    def test_a_repeated_session_file_or_trace_finds_its_first_pass_cached_only_without_the_salt(self):
        self.write('sessions.jsonl', [{'id': f's{n}', 'turns': [f'session {n}: what is the weather in Paris today?']}
                                      for n in range(2)])
        self.write('trace.jsonl', [{'timestamp': 0, 'input_length': 24, 'hash_ids': [n]} for n in range(2)])
        for workload in (['--sessions', 'sessions.jsonl'], ['--trace', 'trace.jsonl', '--block-size', '8']):
            for salt in ([], ['--cache-salt', 'pass']):
                with self.subTest(workload=workload[0], salt=salt):
                    served = self.served('ok', *workload, '--concurrency', '1', '--repeat', '2', *salt)
                    self.assertEqual(len(served), 4)  # two requests a pass, nothing shared within a pass
                    self.assertEqual([cached > 0 for cached, _ in served], [False, False] + [not salt] * 2, served)

    def test_a_trace_s_shared_blocks_stay_shared_behind_the_salt(self):
        self.write('trace.jsonl', [{'timestamp': 0, 'input_length': 40, 'hash_ids': [0, 1]},
                                   {'timestamp': 20, 'input_length': 40, 'hash_ids': [0, 1]},
                                   {'timestamp': 40, 'input_length': 40, 'hash_ids': [2]}])
        served = self.served('ok', '--trace', 'trace.jsonl', '--block-size', '16', '--cache-salt', 'pass')
        self.assertEqual([cached >= 32 for cached, _ in served], [False, True, False], served)


if __name__ == '__main__':
    unittest.main()
