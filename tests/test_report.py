"""The HTML report of a load (_report)."""
from __future__ import annotations

import itertools
import json
import math
import os
import re
import tempfile
import unittest
from pathlib import Path

import stream_client
from .support import fake_record, Fixture, PageReader, run_cli
from .tiers import sans_io


class ReportTests(unittest.TestCase):
    def setUp(self) -> None:
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.dir = Path(self.tmp.name)

    def test_a_load_draws_one_row_per_run_and_its_counts_match_the_summary(self):
        with Fixture('mixed', seed=9) as fixture:
            done = run_cli('--url', fixture.url, '--model', 'm', '--runs', '40', '--concurrency', '8',
                           '--output', 'load.jsonl', '--report', 'load.html', '--quiet', cwd=self.tmp.name, timeout=60)
        summary = json.loads(run_cli('--summary', 'load.jsonl', cwd=self.tmp.name).stdout)
        self.assertEqual(json.loads(done.stdout), summary)
        page = PageReader((self.dir / 'load.html').read_text())
        self.assertEqual(page.rows, 40)
        self.assertEqual((page.cell('runs'), page.cell('ok'), page.cell('not ok')),
                         (str(summary['runs']), str(summary['ok']), str(summary['not_ok'])))
        for layer, count in summary['not_ok_by_layer'].items():
            self.assertEqual(page.cell(f'not ok: {layer}'), str(count))
        # the tail: about two in five runs failed, so p99 with the failures inside is late, and 40 runs certify none
        rows = {row[0]: row[1:] for row in page.cells}
        self.assertEqual(rows['first_text_ms_all'][2:], ['late', 'late'])
        self.assertEqual(rows['first_text_ms_certified'], [str(summary['ok']), 'needs 64', 'needs 662'])
        self.assertEqual(page.tags['script'], 0)
        self.assertFalse([value for name, value in page.attributes if value and re.search(r'https?:|//|url\(', value)])
        self.assertNotIn('url(', (self.dir / 'load.html').read_text())
        self.assertEqual(os.stat(self.dir / 'load.html').st_mode & 0o777, 0o600)

    def test_the_servers_words_come_out_as_text(self):
        hostile = '<script>alert(1)</script><img src=x onerror=alert(2)> & "quotes"'
        body = json.dumps({'error': {'message': hostile, 'type': '<b>Bad</b>', 'code': 500}})
        response = (f'HTTP/1.1 500 Internal Server Error\r\ncontent-type: application/json\r\n'
                    f'content-length: {len(body)}\r\n\r\n{body}').encode()
        with Fixture(replay=response) as fixture:
            run_cli('--url', fixture.url, '--model', '<i>model</i>', '--runs', '2', '--output', 'bad.jsonl',
                    '--report', 'bad.html', '--quiet', cwd=self.tmp.name)
        text = (self.dir / 'bad.html').read_text()
        page = PageReader(text)
        self.assertEqual((page.tags['script'], page.tags['img'], page.tags['b'], page.tags['i']), (0, 0, 0, 0))
        self.assertIn(hostile, ''.join(page.text))
        self.assertIn('<i>model</i>', ''.join(page.text))
        self.assertIn('&lt;script&gt;', text)

    def test_merged_files_give_the_same_page_as_one_file(self):
        for name, seed in (('a', 1), ('b', 2)):
            with Fixture('mixed', seed=seed) as fixture:
                run_cli('--url', fixture.url, '--model', 'm', '--runs', '10', '--concurrency', '5',
                        '--output', f'{name}.jsonl', '--quiet', cwd=self.tmp.name, timeout=60)
        (self.dir / 'both.jsonl').write_text((self.dir / 'b.jsonl').read_text() + (self.dir / 'a.jsonl').read_text())
        run_cli('--summary', 'a.jsonl', 'b.jsonl', '--report', 'split.html', cwd=self.tmp.name)
        run_cli('--summary', 'both.jsonl', '--report', 'whole.html', cwd=self.tmp.name)
        self.assertEqual((self.dir / 'split.html').read_text(), (self.dir / 'whole.html').read_text())
        self.assertEqual(PageReader((self.dir / 'whole.html').read_text()).rows, 20)

    @sans_io
    def test_beyond_two_thousand_runs_the_timeline_is_a_sample_and_says_so(self):
        summary = stream_client.Summary()
        report = stream_client.Report(summary)
        for run in range(2500):
            record = fake_record(run, ok=run % 10 != 0,
                                 error=None if run % 10 else 'transport: closed after 4 of 9 bytes',
                                 start=f'2026-11-30T10:00:{run // 100:02d}.{run % 100 * 10:03d}Z')
            summary.add(record)
            report.add(record)
        page = report.html()
        reader = PageReader(page)
        self.assertEqual(reader.rows, stream_client._report._REPORT_TIMELINE_ROWS)
        self.assertIn(f'A sample of {stream_client._report._REPORT_TIMELINE_ROWS} of the 2500 runs', page)
        self.assertEqual(reader.cell('not ok: transport'), '250')
        self.assertIn('250 runs, 1 distinct message', page)

    @sans_io
    def test_the_layers_colours_are_far_apart(self):
        def rgb(colour: str) -> tuple[int, ...]:
            return tuple(int(colour[i:i + 2], 16) for i in (1, 3, 5))
        colours = list(stream_client._report._LAYER_COLOURS.values())
        self.assertEqual(set(stream_client._report._LAYER_COLOURS) - {None}, set(stream_client.LAYERS))
        closest = min(math.dist(rgb(a), rgb(b)) for a, b in itertools.combinations(colours, 2))
        self.assertGreater(closest, 60)  # the four purples and two blacks of before were under 45 apart

    @sans_io
    def test_the_timeline_packs_runs_in_lanes_and_the_axes_have_round_ticks(self):
        summary = stream_client.Summary()
        report = stream_client.Report(summary)
        for run in range(500):  # four in flight at a time, each 100 ms long, 25 ms apart
            record = fake_record(run, start=f'2026-11-30T10:00:{run * 25 // 1000:02d}.{run * 25 % 1000:03d}Z')
            record['duration_ms'] = 100.0
            summary.add(record)
            report.add(record)
        page = report.html()
        self.assertEqual(PageReader(page).rows, 500)
        self.assertIn('as many lanes as runs were in flight at most (4)', page)
        heights = {float(value) for value in re.findall(r'<rect x="[\d.]+" y="\d+" width="[\d.]+" height="([\d.]+)" '
                                                        r'fill="#008856"/>', page)}
        self.assertEqual(heights, {stream_client._report._MAX_LANE_PX - 1})  # not 1 px: 500 runs share 4 lanes
        self.assertEqual(stream_client._report._lanes(report.rows[:6]), [0, 1, 2, 3, 0, 1])
        self.assertEqual(stream_client._report._ticks(0, 12.4), [0, 2, 4, 6, 8, 10, 12])
        self.assertEqual(stream_client._report._ticks(152.0, 155.4), [152.0, 152.5, 153.0, 153.5, 154.0, 154.5, 155.0])
        for label in ('0 s', '2 s', '10 s', '12 s'):  # the span is 12.575 s
            self.assertTrue(f'>{label}</text>' in page, label)
        self.assertTrue('viewBox="0 0 1400 ' in page)

    def test_report_rules_on_the_command_line(self):
        (self.dir / 'taken.html').write_text('kept')
        with Fixture(delay=0) as fixture:
            base = ['--url', fixture.url, '--model', 'm', '--output', 'run.jsonl']
            cases = {'a single run': base + ['--report', 'r.html'],
                     'an existing report': base + ['--runs', '2', '--report', 'taken.html'],
                     'report is the output': base + ['--runs', '2', '--report', 'run.jsonl']}
            for name, args in cases.items():
                with self.subTest(name):
                    done = run_cli(*args, cwd=self.tmp.name)
                    self.assertEqual((done.returncode, done.stderr.count('\n')), (2, 1), done.stderr)
                    self.assertEqual(sorted(path.name for path in self.dir.iterdir()), ['taken.html'])
            self.assertIsNone(fixture.last_request)
        missing = run_cli('--summary', 'absent.jsonl', '--report', 'r.html', cwd=self.tmp.name)
        self.assertEqual(missing.returncode, 2)
        self.assertFalse((self.dir / 'r.html').exists())
        self.assertEqual((self.dir / 'taken.html').read_text(), 'kept')
