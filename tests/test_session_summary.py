"""The sessions' figures from their records (_session_summary): session goodput beside turn goodput, against
loads whose truth is known (the fixture's agent mode cutting every session's last turn, bounds no run or
session can meet), and records written by hand."""
from __future__ import annotations

import json
import os
import tempfile
import unittest

import stream_client
from stream_client import UsageError
from .support import Fixture, HERE, run_cli
from .tiers import sans_io


def session_record(session: str, turn: int, round_: int, *, ok: bool = True, calls: int = 0, first: float = 10.0,
                   at: float = 0.0, end: dict | None = None, load: dict | None = None) -> dict:
    """A record of one run of a session, as _run_sessions writes it, with only what the summary reads."""
    record = {'session': session, 'turn': turn, 'round': round_, 'ok': ok, 'first_text_ms': first if ok else None,
              'duration_ms': 20.0, 'offset_ms': at, 'started_at': '2026-12-06T18:00:00.000Z',
              'tool_calls': [{'id': 'c', 'index': 0, 'name': 'f', 'arguments': '{}'}] * calls,
              'load': load or {'id': 'L', 'sessions': 4, 'slo': {'first_text_ms': 100.0}, 'session_slo': None}}
    return {**record, 'session_end': end} if end is not None else record


def ended(ok: bool, turns: int, turns_run: int, ended_by: str | None = None) -> dict:
    return {'ok': ok, 'ended_by': ended_by, 'reason': None, 'turns': turns, 'turns_run': turns_run, 'tool_rounds': 0,
            'not_started_turns': list(range(turns_run + 1, turns + 1))}


class SessionGoodputTests(unittest.TestCase):
    """Session goodput against loads whose truth is known: a session is good when it ended ok with every run
    within --slo (and its total time within --session-slo); a turn is good when it finished within --slo."""

    def setUp(self) -> None:
        self.folder = tempfile.mkdtemp()

    @sans_io
    def test_which_sessions_and_turns_are_good(self):
        summary = stream_client._session_summary._SessionSummary()
        records = [
            # a: two turns, all ok and within the bound: good, and so are its turns
            session_record('a', 1, 0, calls=1), session_record('a', 1, 1, at=30.0),
            session_record('a', 2, 0, at=100.0, end=ended(True, 2, 2)),
            # b: its second turn's first text is over the bound: not good; its first turn is
            session_record('b', 1, 0), session_record('b', 2, 0, first=150.0, end=ended(True, 2, 2)),
            # c: still calling tools when its rounds ran out: its second turn did not finish
            session_record('c', 1, 0), session_record('c', 2, 0, calls=1, end=ended(False, 3, 2, 'max_tool_rounds')),
            # d never started: planned, not good
        ]
        for record in records:
            summary.add(record)
        result = summary.result()
        self.assertEqual((result['good'], result['good_ratio'], result['not_good_by']),
                         (1, 0.25, {'ended_not_ok': 1, 'run_over_slo': 1}))
        self.assertEqual((result['turns_good'], result['turns_good_ratio'], result['good_turns_in_sessions_not_good']),
                         (4, 4 / 7, 2))
        self.assertEqual(result['total_ms'], {'p50': 20.0, 'p90': 120.0, 'p99': 120.0, 'max': 120.0})
        within = stream_client._session_summary._SessionSummary(session_slos=(('total_ms', 50.0),))
        for record in records:
            within.add(record)
        self.assertEqual(within.result()['not_good_by'], {'ended_not_ok': 1, 'run_over_slo': 1, 'over_session_slo': 1})
        self.assertEqual(within.result()['good'], 0)  # a took 120 ms from its first run's start

    @sans_io
    def test_session_slo_takes_total_ms_once_as_a_positive_number_of_milliseconds(self):
        parse = stream_client._session_summary._parse_session_slos
        self.assertEqual(parse(['total_ms=60000']), (('total_ms', 60000.0),))
        for texts, words in ((['turn_ms=5'], 'must be one of total_ms'), (['total_ms=-1'], 'positive number'),
                             (['total_ms'], 'positive number'), (['total_ms=inf'], 'positive number'),
                             (['total_ms=1', 'total_ms=2'], 'bounds total_ms twice')):
            with self.subTest(texts=texts), self.assertRaises(UsageError) as caught:
                parse(texts)
            self.assertIn(words, str(caught.exception))

    def test_every_session_cut_in_its_last_turn_has_no_goodput_and_two_thirds_of_its_turns_good(self):
        with Fixture('agent', cut_turn=3) as fixture:
            done = run_cli('--url', fixture.url, '--model', 'm', '--sessions', str(HERE / 'testdata' / 'examples' /
                                                                                   'sessions.jsonl'),
                           '--concurrency', '4', '--slo', 'first_text_ms=60000', '--fail-if', 'sessions_good_ratio < 1',
                           '--fail-if', 'turns_good_ratio < 0.5', '--output', 'cut.jsonl', cwd=self.folder)
        self.assertEqual(done.returncode, 1, done.stderr)
        block = json.loads(done.stdout)['sessions']
        self.assertEqual({key: block[key] for key in ('sessions', 'planned', 'good', 'good_ratio', 'goodput_per_s',
                                                      'not_good_by', 'turns_good', 'turns_good_ratio',
                                                      'good_turns_in_sessions_not_good')},
                         {'sessions': 8, 'planned': 8, 'good': 0, 'good_ratio': 0.0, 'goodput_per_s': 0.0,
                          'not_good_by': {'ended_not_ok': 8}, 'turns_good': 16, 'turns_good_ratio': 2 / 3,
                          'good_turns_in_sessions_not_good': 16})
        self.assertGreater(block['turns_goodput_per_s'], 0)
        self.assertEqual([(gate['value'], gate['held']) for gate in json.loads(done.stdout)['gates']],
                         [(0.0, False), (2 / 3, True)])
        self.assertIn('good sessions 0 of 8 planned (0/s); good turns 16 of 24 (', done.stderr)
        self.assertIn('  the difference: 16 good turns in sessions not good (ended not ok 8): ', done.stderr)
        again = run_cli('--summary', 'cut.jsonl', cwd=self.folder)
        self.assertEqual(json.loads(again.stdout)['sessions'], block)

    def test_warm_up_sessions_are_neither_planned_nor_good(self):
        done = run_cli('--fixture', 'agent', '--sessions', str(HERE / 'testdata' / 'examples' / 'sessions.jsonl'),
                       '--warmup', '2', '--output', 'warm.jsonl', cwd=self.folder)
        self.assertEqual(done.returncode, 0, done.stderr)
        summary = json.loads(done.stdout)
        block = summary['sessions']
        self.assertEqual((block['sessions'], block['planned'], block['ok_ratio'], block['good'], block['good_ratio']),
                         (6, 6, 1.0, 6, 1.0))
        # a session's runs are not planned ahead: its warm-up runs are not taken off the runs it has
        self.assertEqual((summary['planned_runs'], summary['latency_all_never_started']), (summary['runs'], 0))
        self.assertGreater(summary['warmup_runs'], 0)

    def test_a_run_over_slo_or_a_session_over_its_total_bound_is_not_good_and_summary_judges_again(self):
        sessions = str(HERE / 'testdata' / 'examples' / 'sessions.jsonl')
        done = run_cli('--fixture', 'agent', '--sessions', sessions, '--concurrency', '4', '--slo',
                       'first_text_ms=60000', '--session-slo', 'total_ms=60000', '--output', 'all.jsonl',
                       cwd=self.folder)
        self.assertEqual(done.returncode, 0, done.stderr)
        block = json.loads(done.stdout)['sessions']
        self.assertEqual((block['good'], block['good_ratio'], block['turns_good'], block['not_good_by'],
                          block['session_slo'], block['good_turns_in_sessions_not_good']),
                         (8, 1.0, 24, {}, {'total_ms': 60000.0}, 0))
        with open(os.path.join(self.folder, 'all.jsonl'), encoding='utf-8') as file:
            records = [json.loads(line) for line in file]
        totals = [round(last['offset_ms'] + last['duration_ms'] - min(r['offset_ms'] for r in records
                                                                      if r['session'] == last['session']), 3)
                  for last in records if 'session_end' in last]  # from its first run's start to its last's end
        self.assertEqual((block['total_ms']['max'], len(totals)), (max(totals), 8))
        for flags, good, why, turns_good in (
                (['--session-slo', 'total_ms=1'], 0, {'over_session_slo': 8}, 24),
                (['--slo', 'first_text_ms=0.001'], 0, {'run_over_slo': 8}, 0),
                ([], 8, {}, 24)):
            with self.subTest(flags=flags):
                again = json.loads(run_cli('--summary', 'all.jsonl', *flags, cwd=self.folder).stdout)['sessions']
                self.assertEqual((again['good'], again['not_good_by'], again['turns_good']), (good, why, turns_good))


if __name__ == '__main__':
    unittest.main()
