"""--trace: timed replay of Mooncake-format and plain traces, the prompts they build, and the file's checks."""
from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import socket
import subprocess
import tempfile
import time
import unittest
from pathlib import Path
from unittest import mock

import fixture_server
import stream_client
from stream_client._trace import _trace_offsets, _trace_prompts, _Tokenizer
from stream_client._workloads import _parse_trace, _prompt_words
from .support import (
    CLIENT, Fixture, instant_start, LoopbackServer, read_request, run_building_fails_for, run_cli, script_command,
    script_env, VirtualClock)
from .tiers import sans_io

BLOCK = 16


def mooncake_lines(count: int = 200, seed: int = 1) -> list[dict]:
    """A Mooncake-format trace: timestamps 0 to 10 ms apart, prefixes that share their first block (0 or 1)."""
    rng, lines, at = random.Random(seed), [], 0
    for number in range(count):
        at += rng.choice((0, 5, 10))
        blocks = rng.randint(1, 3)
        hash_ids = [rng.choice((0, 1))] + [100 + number * 10 + block for block in range(blocks - 1)]
        lines.append({'timestamp': at, 'input_length': blocks * BLOCK - rng.randint(0, 8),
                      'output_length': rng.randint(1, 4), 'hash_ids': hash_ids})
    return lines


class TraceReplayTests(unittest.TestCase):

    def setUp(self) -> None:
        self.folder = tempfile.mkdtemp()

    def write(self, name: str, lines: list) -> str:
        path = os.path.join(self.folder, name)
        with open(path, 'w', encoding='utf-8') as file:
            file.write(''.join((line if isinstance(line, str) else json.dumps(line)) + '\n' for line in lines))
        return path

    def records(self, name: str) -> list[dict]:
        with open(os.path.join(self.folder, name), encoding='utf-8') as file:
            return [json.loads(line) for line in file]

    def test_a_line_whose_run_cannot_be_built_is_a_client_error_record_and_the_replay_goes_on(self):
        path = self.write('built.jsonl', [{'timestamp': 0, 'prompt': word} for word in ('one', 'two', 'three')])
        with open(os.path.join(self.folder, 'tools.json'), 'w', encoding='utf-8') as file:
            json.dump(fixture_server.TOOLS, file)
        with run_building_fails_for(b'"two"'):
            done = run_cli('--fixture', 'ok', '--trace', path, '--tools', 'tools.json', '--concurrency', '1',
                           '--output', 'built-out.jsonl', cwd=self.folder)
        self.assertEqual(done.returncode, 1, done.stderr)  # a line not ok
        self.assertNotIn('Traceback', done.stderr)
        records = sorted(self.records('built-out.jsonl'), key=lambda record: record['run'])
        self.assertEqual([(r['trace']['line'], r['ok'], r['error_kind']) for r in records],
                         [(1, True, None), (2, False, 'client_error'), (3, True, None)])
        self.assertEqual(json.loads(done.stdout)['trace']['lines'], 3)

    def test_a_200_line_mooncake_trace_replays_with_lateness_and_equal_hash_ids_send_equal_prefixes(self):
        lines = mooncake_lines()
        path = self.write('trace.jsonl', lines)
        with Fixture('agent', profile='vllm', record=True) as fixture:
            done = run_cli('--url', fixture.url, '--model', 'm', '--trace', path, '--block-size', str(BLOCK),
                           '--trace-speed', '2', '--output', 'replay.jsonl', cwd=self.folder, timeout=120)
            bodies = [json.loads(answer.body) for answer in fixture.instance.received]
        self.assertEqual(done.returncode, 0, done.stderr)
        summary = json.loads(done.stdout)
        self.assertEqual((summary['runs'], summary['ok'], summary['planned_runs']), (200, 200, 200))
        self.assertEqual({key: summary['trace'][key] for key in ('lines', 'ok', 'speed', 'length_by')},
                         {'lines': 200, 'ok': 200, 'speed': 2.0, 'length_by': {'tokenize': 200}})
        self.assertEqual(summary['gates'], [{'expr': 'ok_ratio < 1', 'value': 1.0, 'held': True}])  # the default
        again = run_cli('--summary', 'replay.jsonl', cwd=self.folder)
        self.assertEqual(json.loads(again.stdout)['trace'], summary['trace'])  # recomputed from the records alone
        twice = run_cli('--summary', 'replay.jsonl', 'replay.jsonl', cwd=self.folder)  # 400 runs of 200: refused
        self.assertEqual((twice.returncode, twice.stderr.count('\n')), (2, 1), twice.stderr)
        records = sorted(self.records('replay.jsonl'), key=lambda record: record['run'])
        self.assertEqual([record['trace']['line'] for record in records], list(range(1, 201)))
        for record, line in zip(records, lines):
            trace = record['trace']
            self.assertEqual(trace['scheduled_ms'], line['timestamp'] / 2)  # the first line is at 0
            self.assertIsInstance(trace['late_ms'], float)
            self.assertEqual(trace['late_ms'], record['queued_ms'])
            self.assertEqual((trace['input_length'], trace['hash_ids'], trace['output_length']),
                             (line['input_length'], line['hash_ids'], line['output_length']))
            self.assertEqual(record['request']['max_tokens'], line['output_length'])
            # the length met with /tokenize: the server's count is the requested length
            self.assertEqual((trace['prompt_tokens_counted'], record['prompt_tokens']),
                             (line['input_length'], line['input_length']))
        prompts = {hashlib.sha256(body['messages'][-1]['content'].encode()).hexdigest(): body['messages'][-1]['content']
                   for body in bodies}
        sent = [prompts[record['request']['prompt_sha256']] for record in records]
        heads: dict[int, list[bytes]] = {}  # per first hash id, the words of its block that each line sent
        for text, line in zip(sent, lines):
            heads.setdefault(line['hash_ids'][0], []).append(' '.join(text.split(' ')[:BLOCK]).encode())
        for block, sent_heads in heads.items():
            whole = max(sent_heads, key=len)  # a line long enough to send the whole block
            self.assertEqual(len(whole.split(b' ')), BLOCK)
            for head in sent_heads:
                self.assertTrue(whole.startswith(head), (block, head, whole))  # byte-equal as far as it goes
        self.assertFalse(max(heads[0], key=len).startswith(max(heads[1], key=len)[:20]))
        # the same blocks and length send the same bytes; other blocks, or another length, other bytes
        self.assertEqual(len(set(sent)), len({(tuple(line['hash_ids']), line['input_length']) for line in lines}))

    def test_without_tokenize_the_words_approximate_the_length(self):
        path = self.write('trace.jsonl', mooncake_lines(5))
        with Fixture('agent', record=True, tokenize=False) as fixture:
            done = run_cli('--url', fixture.url, '--model', 'm', '--trace', path, '--block-size', str(BLOCK),
                           '--output', 'approx.jsonl', cwd=self.folder)
            bodies = [json.loads(answer.body) for answer in fixture.instance.received]
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual(json.loads(done.stdout)['trace']['length_by'], {'approximation': 5})
        self.assertEqual(sorted(len(body['messages'][-1]['content'].split(' ')) for body in bodies),
                         sorted(line['input_length'] for line in mooncake_lines(5)))
        self.assertTrue(all(record['trace']['prompt_tokens_counted'] is None
                            for record in self.records('approx.jsonl')))

    def test_a_plain_trace_sends_its_prompts_at_their_times(self):
        path = self.write('plain.jsonl', [{'timestamp': 0, 'prompt': 'first'}, {'timestamp': 30, 'prompt': 'second'},
                                          {'timestamp': 30, 'prompt': 'third', 'output_length': 7}])
        done = run_cli('--fixture', 'ok', '--trace', path, '--output', 'plain-out.jsonl', cwd=self.folder)
        self.assertEqual(done.returncode, 0, done.stderr)
        records = sorted(self.records('plain-out.jsonl'), key=lambda record: record['run'])
        self.assertEqual([(r['trace']['scheduled_ms'], r['trace']['length_by'], r['request']['max_tokens'])
                          for r in records], [(0.0, 'prompt', 128), (30.0, 'prompt', 128), (30.0, 'prompt', 7)])
        self.assertEqual([r['request']['prompt_sha256'] for r in records],
                         [hashlib.sha256(text.encode()).hexdigest() for text in ('first', 'second', 'third')])

    def test_a_malformed_trace_is_one_line_and_exit_2_with_no_evidence_file(self):
        good = {'timestamp': 10, 'input_length': 8}
        cases = [
            ([good, '{"timestamp": 20,'], 'line 2: not JSON'),
            ([good, {'input_length': 8}], 'line 2: timestamp: missing'),
            ([good, {'timestamp': 5, 'input_length': 8}], 'line 2: timestamp: 5 goes backwards (line 1 has 10)'),
            ([good, {'timestamp': 20}], 'line 2: input_length: missing'),
            ([{**good, 'hash_ids': [1, 'x']}], 'line 1: hash_ids: must be a list'),
            ([{**good, 'output_length': 0}], 'line 1: output_length: must be a whole number'),
            ([{**good, 'prompt': 'x'}], 'line 1: prompt: a line has a prompt, or input_length'),
            ([{**good, 'input': 3}], 'line 1: input: unknown key'),
            ([], 'has no lines'),
        ]
        for lines, words in cases:
            with self.subTest(words=words):
                path = self.write('bad.jsonl', lines)
                done = run_cli('--fixture', 'ok', '--trace', path, '--output', 'never.jsonl', cwd=self.folder)
                self.assertEqual(done.returncode, 2)
                self.assertEqual(len(done.stderr.splitlines()), 1, done.stderr)
                self.assertIn(f'--trace {path} {words}', done.stderr)
                self.assertFalse(os.path.exists(os.path.join(self.folder, 'never.jsonl')))

    def test_the_flags_that_do_not_go_with_a_trace(self):
        path = self.write('trace.jsonl', [{'timestamp': 0, 'prompt': 'x'}])
        for extra, words in ((('--rate', '5'), '--rate does not go with --trace'),
                             (('--trace-speed', '0'), '--trace-speed must be a positive number'),
                             (('--block-size', '0'), '--block-size must be'),
                             (('--sessions', path), '--sessions and --trace exclude each other')):
            with self.subTest(extra=extra):
                done = run_cli('--fixture', 'ok', '--trace', path, *extra, '--output', 'never.jsonl', cwd=self.folder)
                self.assertEqual(done.returncode, 2)
                self.assertIn(words, done.stderr)
        done = run_cli('--fixture', 'ok', '--block-size', '8', '--output', 'never.jsonl', cwd=self.folder)
        self.assertEqual((done.returncode, done.stderr.splitlines()),
                         (2, ['stream_client.py: error: --block-size is for '
                              '--trace (docs/cli.md#flags-and-workloads)']))


@sans_io
class TracePromptTests(unittest.TestCase):

    def test_a_block_s_words_depend_on_its_id_alone_and_never_change(self):
        self.assertEqual(_prompt_words(40, (7, 8), 16, 'a')[:32], _prompt_words(32, (7, 8, 9), 16, 'b'))
        self.assertNotEqual(_prompt_words(16, (7,), 16), _prompt_words(16, (6,), 16))
        self.assertEqual(len(_prompt_words(1000, (1,), 16, 'x')), 1000)
        # a fixed value: the same trace sends the same bytes with every version of this client
        self.assertEqual(hashlib.sha256(' '.join(_prompt_words(512, (0, 1), 256)).encode()).hexdigest()[:16],
                         GOLDEN_PREFIX)

    def test_the_schedule_is_the_timestamps_after_the_first_divided_by_the_speed(self):
        lines = _parse_trace('t', '\n'.join(json.dumps({'timestamp': at, 'prompt': 'x'})
                                            for at in (1000, 1000, 1500, 4000)))
        self.assertEqual(_trace_offsets(lines, 1.0), [0.0, 0.0, 0.5, 3.0])
        self.assertEqual(_trace_offsets(lines, 2.0), [0.0, 0.0, 0.25, 1.5])


class TokenizeServer(LoopbackServer):
    """Answers every request (POST /tokenize) with 200 and the JSON body it was given; ``asked`` counts them."""

    def __init__(self, answer: bytes) -> None:
        super().__init__()
        self.answer, self.asked = answer, 0
        self.start()

    def serve(self, sock: socket.socket) -> None:
        with sock:
            read_request(sock)
            self.asked += 1
            sock.sendall(b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n'
                         b'Connection: close\r\n\r\n' % len(self.answer) + self.answer)


class TokenizeAnswerTests(unittest.TestCase):
    """What /tokenize answers is a count only when it is a non-negative whole number (docs/workloads.md)."""

    def test_an_answer_that_is_not_a_non_negative_count_falls_back_to_the_approximation(self):
        lines = _parse_trace('t', json.dumps({'timestamp': 0, 'input_length': 12}))
        for answer in (b'{"count": -248}', b'{"count": -1}', b'{"count": true}', b'{"count": 12.0}',
                       b'{"count": "12"}', b'{"tokens": [1, 2]}', b'[12]'):
            with self.subTest(answer=answer):
                server = TokenizeServer(answer)
                try:
                    tokenizer = _Tokenizer(stream_client.prepare(server.url, 'm', 'x'))
                    [(text, counted)] = _trace_prompts(lines, tokenizer, 16)
                finally:
                    server.close()
                self.assertEqual((len(text.split(' ')), counted, tokenizer.offered, server.asked), (12, None, False, 1))
        server = TokenizeServer(b'{"count": 12}')  # a count is taken as one
        try:
            [(text, counted)] = _trace_prompts(lines, _Tokenizer(stream_client.prepare(server.url, 'm', 'x')), 16)
        finally:
            server.close()
        self.assertEqual((len(text.split(' ')), counted), (12, 12))


GOLDEN_PREFIX = '2f1065558aa220c6'  # sha256 of the words of blocks 0 and 1 (256 tokens each), its first 16 digits


class SyntheticLengthTests(unittest.TestCase):
    """--input-tokens, --output-tokens and --shared-prefix-tokens: seeded lengths, prefixes shared by groups."""

    def setUp(self) -> None:
        self.folder = tempfile.mkdtemp()

    def load(self, name: str, *flags: str) -> tuple[list[dict], list[str]]:
        with Fixture('agent', record=True) as fixture:
            done = run_cli('--url', fixture.url, '--model', 'm', '--runs', '12', '--concurrency', '4', *flags,
                           '--output', name, cwd=self.folder)
            prompts = {hashlib.sha256(json.loads(a.body)['messages'][-1]['content'].encode()).hexdigest():
                       json.loads(a.body)['messages'][-1]['content'] for a in fixture.instance.received}
        self.assertEqual(done.returncode, 0, done.stderr)
        with open(os.path.join(self.folder, name), encoding='utf-8') as file:
            records = sorted((json.loads(line) for line in file), key=lambda record: record['run'])
        return records, [prompts[record['request']['prompt_sha256']] for record in records]

    def test_lengths_are_drawn_with_the_seed_and_met_and_groups_share_their_prefix(self):
        flags = ('--input-tokens', '40:5', '--output-tokens', '6:2', '--shared-prefix-tokens', '20:3', '--seed', '7')
        records, prompts = self.load('a.jsonl', *flags)
        for record in records:
            asked = record['request']
            self.assertTrue(35 <= asked['input_tokens'] <= 45 and 4 <= asked['max_tokens'] <= 8, asked)
            self.assertEqual((record['prompt_tokens'], asked['prompt_tokens_counted'], asked['length_by']),
                             (asked['input_tokens'], asked['input_tokens'], 'tokenize'))
            self.assertEqual((asked['prefix_group'], asked['shared_prefix_tokens']), (record['run'] % 3, 20))
        self.assertGreater(len({record['request']['input_tokens'] for record in records}), 1)
        prefixes = [' '.join(prompt.split(' ')[:20]) for prompt in prompts]
        for group in range(3):
            self.assertEqual(len(set(prefixes[group::3])), 1)  # byte-equal within a group
        self.assertEqual(len(set(prefixes)), 3)
        self.assertEqual(len(set(prompts)), 12)  # each prompt has words of its own after the prefix
        again, again_prompts = self.load('b.jsonl', *flags)
        self.assertEqual(again_prompts, prompts)  # the same seed, the same load
        _, other = self.load('c.jsonl', *flags[:-1], '8')
        self.assertNotEqual(other, prompts)

    def test_the_flags_are_checked(self):
        for flags, words in ((('--input-tokens', '10:20'), 'every length (MEAN-SPREAD to MEAN+SPREAD) must be'),
                             (('--input-tokens', 'ten'), 'expected MEAN or MEAN:SPREAD'),
                             (('--input-tokens', '40', '--shared-prefix-tokens', '40'), 'leaves no tokens'),
                             (('--shared-prefix-tokens', '5'), 'needs --input-tokens'),
                             (('--input-tokens', '40', '--prompt', 'x'), 'do not go with --prompt'),
                             (('--output-tokens', '0'), '--output-tokens')):
            with self.subTest(flags=flags):
                done = run_cli('--fixture', 'ok', '--runs', '2', *flags, '--output', 'never.jsonl', cwd=self.folder)
                self.assertEqual(done.returncode, 2)
                self.assertIn(words, done.stderr)
                self.assertFalse(os.path.exists(os.path.join(self.folder, 'never.jsonl')))


class VirtualReplayTests(unittest.TestCase):
    """A trace on a virtual clock: each line starts at its timestamp over the speed, never before, and the
    replay waits out the trace; ten minutes of trace checked without waiting (the real-time replay is
    TraceReplayTests' Mooncake test)."""

    def test_each_line_starts_at_its_timestamp_over_the_speed_and_never_before(self):
        stamps = (0, 1_000, 1_000, 90_000, 600_000)
        lines = _parse_trace('t', '\n'.join(json.dumps({'timestamp': at, 'prompt': 'x'}) for at in stamps))
        requests = [stream_client.prepare('http://127.0.0.1:9/v1/chat/completions', 'm', 'x') for _ in lines]
        for speed in (1.0, 4.0):
            with self.subTest(speed=speed):
                clock, records = VirtualClock(), []
                with mock.patch.object(stream_client._machine._Machine, 'start', instant_start()):
                    stream_client._trace._run_trace(lines, requests, [{}] * len(lines), speed,
                                                    stream_client.LoadSettings(len(lines), 2), records.append,
                                                    stream_client.Cancel(), clock.clock())
                records.sort(key=lambda record: record['run'])
                self.assertEqual([r['trace']['scheduled_ms'] for r in records], [at / speed for at in stamps])
                for record in records:
                    self.assertGreaterEqual(record['offset_ms'], record['trace']['scheduled_ms'])  # never early
                    self.assertEqual(record['trace']['late_ms'], record['queued_ms'])
                self.assertEqual(round(clock.now() - clock.start, 6), 600 / speed)  # waited out, not a moment more


class TraceShardTests(unittest.TestCase):
    """--shard I/N of a trace: N processes, each sending the lines i with i % N == I of the one plan at its
    planned time from --start-at, merge into exactly the trace; a shard missing is named."""

    def test_four_shards_of_a_trace_as_four_processes_merge_into_exactly_the_trace(self):
        folder = Path(tempfile.mkdtemp())
        self.addCleanup(shutil.rmtree, folder)
        trace = folder / 'trace.jsonl'
        trace.write_text(''.join(json.dumps({'timestamp': 25 * line, 'prompt': f'line {line}'}) + '\n'
                                 for line in range(40)))
        start = time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(time.time() + 2))
        with Fixture('ok') as fixture:
            shards = [subprocess.Popen(script_command(CLIENT, '--url', fixture.url, '--model', 'm', '--trace',
                                                      str(trace), '--shard', f'{index}/4', '--start-at', start,
                                                      '--quiet', '--output', f'shard-{index}.jsonl'),
                                       cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                       env=script_env())
                      for index in range(4)]
            done = [shard.communicate(timeout=120) + (shard.returncode,) for shard in shards]
        self.assertEqual([status for _, _, status in done], [0] * 4, done)
        files = [f'shard-{index}.jsonl' for index in range(4)]
        merged = run_cli('--summary', *files, cwd=str(folder))
        self.assertEqual(merged.returncode, 0, merged.stderr)
        summary = json.loads(merged.stdout)
        self.assertEqual((summary['runs'], summary['ok'], summary['trace']['lines']), (40, 40, 40))
        records = [json.loads(line) for name in files for line in (folder / name).read_text().splitlines()]
        self.assertEqual(sorted(record['trace']['line'] for record in records), list(range(1, 41)))  # each line once
        self.assertEqual(len({record['load']['plan']['id'] for record in records}), 1)  # one plan
        for record in records:
            self.assertEqual(record['run'] % 4, record['load']['plan']['shard'])
        missing = run_cli('--summary', *files[:3], cwd=str(folder))
        self.assertEqual(missing.returncode, 2, missing.stderr)
        self.assertIn('shard 3/4 missing', missing.stderr)
