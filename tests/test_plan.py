"""One load's plan sent by many processes: --shard I/N, --start-at, and --summary of the shards (_plan)."""
from __future__ import annotations

import json
import subprocess
import tempfile
import time
import unittest
from pathlib import Path

import stream_client
from stream_client import UsageError
from stream_client._plan import _parse_shard, _parse_start_at, _plan_id
from .support import CLIENT, FIXTURE_SCRIPT, run_cli, run_in_terminal, script_command, script_env
from .tiers import sans_io

RUNS, SHARDS = 400, 4


def start_in(seconds: float) -> str:
    return time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(time.time() + seconds))


def records_of(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def schedule(records: list[dict]) -> dict[int, tuple]:
    """Each run's plan, by run: its prompt, and when it was due after the load's start (offset less lateness)."""
    return {record['run']: (record['request']['prompt_sha256'], record['offset_ms'] - record['queued_ms'])
            for record in records}


class ShardTests(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        """A 400-run seeded open-loop load with 7 prompts, sent once by one process and once as 4 shards
        by 4 processes at once (shard 3 over 2 worker processes of its own), to one fixture server."""
        cls.tmp = tempfile.TemporaryDirectory()
        cls.dir = Path(cls.tmp.name)
        (cls.dir / 'prompts.jsonl').write_text(''.join(json.dumps(f'prompt {n}') + '\n' for n in range(7)))
        server = subprocess.Popen(script_command(FIXTURE_SCRIPT, '--port', '0', '--delay', '0.001'),
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=script_env())
        try:
            url = server.stdout.readline().split()[-1]
            load = ('--url', url, '--model', 'm', '--prompts', 'prompts.jsonl', '--runs', str(RUNS), '--rate', '400',
                    '--seed', '7', '--quiet')
            start = start_in(2)
            shards = [subprocess.Popen(script_command(CLIENT, *load, '--shard', f'{index}/{SHARDS}', '--start-at',
                                                      start, '--output', f'shard-{index}.jsonl',
                                                      *(('--processes', '2') if index == 3 else ())),
                                       cwd=cls.dir, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                       env=script_env())
                      for index in range(SHARDS)]
            cls.shard_runs = [shard.communicate(timeout=120) + (shard.returncode,) for shard in shards]
            cls.single = run_cli(*load, '--output', 'single.jsonl', cwd=cls.tmp.name, timeout=120)
        finally:
            server.kill()
            server.communicate()

    @classmethod
    def tearDownClass(cls) -> None:
        cls.tmp.cleanup()

    def summary(self, *files: str) -> subprocess.CompletedProcess:
        return run_cli('--summary', *files, cwd=self.tmp.name)

    def test_each_shard_sends_its_share_of_the_one_plan_and_together_they_send_it_exactly(self):
        self.assertEqual([status for _, _, status in self.shard_runs], [0] * SHARDS, self.shard_runs)
        single = records_of(self.dir / 'single.jsonl')
        shards = [records_of(self.dir / f'shard-{index}.jsonl') for index in range(SHARDS)]
        for index, records in enumerate(shards):
            with self.subTest(shard=index):
                self.assertEqual(sorted(record['run'] for record in records), list(range(index, RUNS, SHARDS)))
                self.assertEqual({(record['load']['plan']['shard'], record['load']['plan']['shards'],
                                   record['load']['runs']) for record in records}, {(index, SHARDS, RUNS // SHARDS)})
        merged = [record for records in shards for record in records]
        self.assertEqual(len({record['load']['plan']['id'] for record in merged}), 1)  # named alike, apart
        self.assertEqual(sorted(record['run'] for record in merged), list(range(RUNS)))
        ours, theirs = schedule(single), schedule(merged)
        self.assertEqual(sorted(ours), sorted(theirs))
        planned = list(stream_client.arrival_offsets(stream_client.LoadSettings(runs=RUNS, rate=400.0, seed=7)))
        for run in range(RUNS):
            self.assertEqual(ours[run][0], theirs[run][0])
            self.assertAlmostEqual(ours[run][1], planned[run] * 1000, delta=0.002)
            self.assertAlmostEqual(theirs[run][1], planned[run] * 1000, delta=0.002)
        prompts = {record['request']['prompt_sha256'] for record in single if record['run'] % 7 == 3}
        self.assertEqual(len(prompts), 1)  # run i sends prompt i % 7 in both
        self.assertEqual({(record['load']['plan']['shards'], record['load']['plan']['start_at']) for record in single},
                         {(1, None)})

    def test_the_summary_of_the_shards_is_the_summary_of_the_load_in_one_process(self):
        merged = self.summary(*(f'shard-{index}.jsonl' for index in range(SHARDS)))
        single = self.summary('single.jsonl')
        self.assertEqual((merged.returncode, single.returncode), (0, 0), merged.stderr + single.stderr)
        merged, single = json.loads(merged.stdout), json.loads(single.stdout)
        for key in ('runs', 'ok', 'planned_runs', 'not_ok_by_kind', 'latency_runs', 'good', 'sources', 'apis',
                    'models'):
            self.assertEqual(merged[key], single[key], key)
        self.assertEqual((merged['runs'], merged['planned_runs']), (RUNS, RUNS))

    def test_a_missing_or_doubled_shard_is_an_error_that_names_it(self):
        missing = self.summary('shard-0.jsonl', 'shard-1.jsonl', 'shard-3.jsonl')
        doubled = self.summary('shard-0.jsonl', 'shard-1.jsonl', 'shard-1.jsonl', 'shard-2.jsonl', 'shard-3.jsonl')
        plan = records_of(self.dir / 'shard-0.jsonl')[0]['load']['plan']['id']
        self.assertEqual((missing.returncode, doubled.returncode), (2, 2))
        self.assertEqual(missing.stderr.splitlines(), [
            f'stream_client.py: error: plan {plan}: shard 2/4 missing: no record of it in these files (each shard '
            'writes its own evidence file; give them all)'])
        self.assertIn(f'error: shard 1/4 of plan {plan} is given twice', doubled.stderr)
        self.assertEqual(len(doubled.stderr.splitlines()), 1)


class PlanFlagTests(unittest.TestCase):
    @sans_io
    def test_shard_and_start_at_are_read_strictly(self):
        self.assertEqual(_parse_shard('3/4'), (3, 4))
        for text in ('4/4', '-1/4', '1', '1/0', 'a/b', '1/4/2', ' 1/4'):
            with self.subTest(shard=text), self.assertRaisesRegex(UsageError, '^--shard .*expected I/N'):
                _parse_shard(text)
        now = 1_800_000_000.0  # 2027-01-15T08:00:00Z
        self.assertEqual(_parse_start_at('2027-01-15T08:00:30Z', now), now + 30)
        self.assertEqual(_parse_start_at('2027-01-15 08:00:30.25+00:00', now), now + 30.25)
        refusals = {'2027-01-15T08:00:30': 'expected a UTC time', '2027-01-15T09:00:30+01:00': 'expected a UTC time',
                    '2027-02-30T08:00:00Z': 'not a valid date', '2027-01-17T08:00:00Z': 'more than a day ahead',
                    '2027-01-15T06:00:00Z': 'more than an hour past'}
        for text, message in refusals.items():
            with self.subTest(start_at=text), self.assertRaisesRegex(UsageError, message):
                _parse_start_at(text, now)

    @sans_io
    def test_the_plan_id_follows_what_fixes_the_runs_and_nothing_else(self):
        request = stream_client.prepare('http://127.0.0.1:8000/v1/chat/completions', 'm', 'p')
        load = stream_client.LoadSettings(runs=10, rate=5.0, seed=1)
        same = _plan_id([request], load.described(), 4, None)
        self.assertEqual(same, _plan_id([request], {**load.described(), 'processes': 3}, 4, None))
        for other in (_plan_id([request], {**load.described(), 'seed': 2}, 4, None),
                      _plan_id([request], load.described(), 2, None),
                      _plan_id([request], load.described(), 4, 1_800_000_000.0),
                      _plan_id([stream_client.prepare('http://127.0.0.1:8000/v1/chat/completions', 'm', 'q')],
                               load.described(), 4, None)):
            self.assertNotEqual(other, same)

    def test_a_shards_progress_on_a_terminal_counts_its_own_runs(self):
        with tempfile.TemporaryDirectory() as tmp:
            status, screen = run_in_terminal('--fixture', 'ok', '--runs', '8', '--shard', '1/4', '--output',
                                             'load.jsonl', cwd=tmp)
        self.assertEqual(status, 0, screen)
        self.assertIn('runs 2/2  ok 2', screen)
        self.assertNotIn('/8', screen)

    @sans_io
    def test_load_settings_check_their_shard_and_start(self):
        for shard in ((1, 1), (0, 0), (-1, 2), [0, 2], (True, 2), (0, 2.0)):
            with self.subTest(shard=shard), self.assertRaisesRegex(ValueError, '^shard must be'):
                stream_client.LoadSettings(runs=4, shard=shard)
        with self.assertRaisesRegex(ValueError, '^start_at must be'):
            stream_client.LoadSettings(runs=4, start_at=float('nan'))

    @sans_io
    def test_a_shard_that_cannot_be_sent_is_refused_before_anything_is_sent(self):
        cases = {('--shard', '0/2'): '--shard is for a load',
                 ('--start-at', start_in(60)): '--start-at is for a load',
                 ('--runs', '3', '--shard', '3/4'): 'shard 3 would send none',
                 ('--rates', '1,2', '--duration', '1', '--shard', '0/2'): '--shard does not go with --rates',
                 ('--runs', '4', '--concurrencies', '1,2', '--shard', '0/2'): 'not go with --concurrencies',
                 ('--runs', '4', '--repeat', '2', '--start-at', start_in(60)): '--start-at starts one pass',
                 ('--runs', '2', '--shard', '2/2'): 'expected I/N'}
        with tempfile.TemporaryDirectory() as tmp:
            for flags, message in cases.items():
                with self.subTest(flags=flags):
                    done = run_cli('--fixture', 'ok', *flags, '--output', 'load.jsonl', cwd=tmp)
                    self.assertEqual(done.returncode, 2)
                    self.assertIn(message, done.stderr)
                    self.assertFalse(Path(tmp, 'load.jsonl').exists())


if __name__ == '__main__':
    unittest.main()


class ShardRepeatTests(unittest.TestCase):

    def test_two_shards_of_a_repeated_load_are_each_pass_sharded_and_merge_into_the_whole(self):
        with tempfile.TemporaryDirectory() as tmp:
            for index in range(2):
                done = run_cli('--fixture', 'ok', '--runs', '3', '--repeat', '2', '--shard', f'{index}/2', '--quiet',
                               '--output', f'shard-{index}.jsonl', cwd=tmp)
                self.assertEqual(done.returncode, 0, done.stderr)
            records = [json.loads(line) for index in range(2)
                       for line in Path(tmp, f'shard-{index}.jsonl').read_text().splitlines()]
            self.assertEqual(sorted((r['load']['repeat'], r['run'], r['load']['plan']['shard']) for r in records),
                             [(repeat, run, run % 2) for repeat in range(2) for run in range(3)])
            self.assertEqual(len({r['load']['plan']['id'] for r in records}), 2)  # a plan per pass
            merged = run_cli('--summary', 'shard-0.jsonl', 'shard-1.jsonl', cwd=tmp)
            self.assertEqual(merged.returncode, 0, merged.stderr)
            self.assertEqual(json.loads(merged.stdout)['runs'], 6)
            alone = run_cli('--summary', 'shard-0.jsonl', cwd=tmp)
            self.assertEqual(alone.returncode, 2, alone.stderr)
            self.assertIn('shard 1/2', alone.stderr)
