"""--server-metrics: the server's Prometheus metrics during a load, parsed strictly, kept, summarized
(_server_metrics)."""
from __future__ import annotations

import json
import re
import socket
import tempfile
import unittest
from pathlib import Path

import fixture_server
from stream_client._server_metrics import (
    _ExpositionError, _metrics_lines, _parse_exposition, _quantiles, _MetricsSummary)
from .support import Fixture, HERE, LoopbackServer, run_cli, run_in_terminal
from .tiers import sans_io

TESTDATA = HERE / 'testdata' / 'vllm-0.32.0-cpu'

VLLM_LIKE = '''# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 2.0
# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="m"} 5.0
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{le="0.1",model_name="m"} 3.0
vllm:time_to_first_token_seconds_bucket{le="+Inf",model_name="m"} 4.0
vllm:time_to_first_token_seconds_count{model_name="m"} 4.0
vllm:time_to_first_token_seconds_sum{model_name="m"} 0.52
# TYPE python_gc_objects_collected counter
python_gc_objects_collected_total{generation="0"} 1.0e+03
python_gc_objects_collected_created{generation="0"} 1.7e9
escaped{path="a\\\\b \\"q\\"\\n",} NaN 1700000000000
no_labels +Inf
'''


def scrape_lines(folder: str, name: str = 'load.server-metrics.jsonl') -> list[dict]:
    return [json.loads(line) for line in Path(folder, name).read_text().splitlines()]


@sans_io
class ExpositionTests(unittest.TestCase):
    def test_the_text_format_is_read_with_its_types_labels_escapes_and_special_values(self):
        families = _parse_exposition(VLLM_LIKE)
        self.assertEqual(list(families), ['vllm:num_requests_running', 'vllm:num_preemptions_total',
                                          'vllm:time_to_first_token_seconds', 'python_gc_objects_collected',
                                          'python_gc_objects_collected_created',
                                          'escaped', 'no_labels'])
        self.assertEqual(families['vllm:num_requests_running'],
                         {'type': 'gauge',
                          'samples': [['vllm:num_requests_running', {'engine': '0', 'model_name': 'm'}, 2.0]]})
        self.assertEqual(len(families['vllm:time_to_first_token_seconds']['samples']), 4)
        self.assertEqual(families['python_gc_objects_collected']['type'], 'counter')
        name, labels, value = families['escaped']['samples'][0]
        self.assertEqual((families['escaped']['type'], labels), ('untyped', {'path': 'a\\b "q"\n'}))
        self.assertNotEqual(value, value)  # NaN
        self.assertEqual(families['no_labels']['samples'][0][2], float('inf'))

    def test_a_real_vllm_scrape_is_read_whole(self):
        families = _parse_exposition((TESTDATA / 'metrics_busy.txt').read_text())
        self.assertEqual(len(families), 92)
        self.assertEqual({family['type'] for family in families.values()}, {'counter', 'gauge', 'histogram', 'summary'})
        self.assertEqual(families['vllm:num_requests_running']['samples'],
                         [['vllm:num_requests_running', {'engine': '0', 'model_name': 'tiny'}, 16.0]])
        self.assertEqual(families['vllm:prompt_tokens_created']['type'], 'gauge')  # its own family in 0.0.4
        self.assertEqual(families['vllm:time_to_first_token_seconds']['type'], 'histogram')
        summary = _MetricsSummary()
        summary.add(0, {'ok': True, 'error_kind': None, 'families': families})
        step, = summary.result({'url': 'u', 'file': 'f', 'interval': 1.0})['steps']
        self.assertEqual(step['gauges']['vllm:num_requests_running']['max'], 16)
        self.assertNotIn('vllm:prompt_tokens_created', step['gauges'])  # a start time, not a gauge of the load
        self.assertEqual(step['counters']['vllm:num_preemptions_total'], 0)

    def test_the_servers_own_latency_histograms_give_the_quantiles_of_what_they_gained(self):
        summary = _MetricsSummary()
        for name in ('metrics_idle.txt', 'metrics_busy.txt'):  # a fresh server, then 40 first tokens later
            summary.add(0, {'ok': True, 'error_kind': None,
                            'families': _parse_exposition((TESTDATA / name).read_text())})
        result = summary.result({'url': 'u', 'file': 'f', 'interval': 1.0})
        first_token = result['steps'][0]['histograms']['vllm:time_to_first_token_seconds']
        # rank 20 of 40 falls in (0.06, 0.08], which holds the 9th to the 21st: 60 + 20 * 12 / 13 ms
        self.assertEqual(first_token, {'count': 40.0, 'p50_ms': 78.462, 'p90_ms': 210.0, 'p99_ms': 246.0})
        self.assertIn('as the server saw them: time_to_first_token p50 78.462 p99 246 ms',
                      '\n'.join(_metrics_lines(result)))
        beyond = _quantiles({}, {0.1: 1.0, float('inf'): 4.0})
        self.assertEqual(beyond, {'count': 4.0, 'p50_ms': None, 'p90_ms': None, 'p99_ms': None})  # past the last bound
        # a restart
        self.assertEqual(_quantiles({1.0: 5.0, float('inf'): 5.0}, {1.0: 2.0, float('inf'): 2.0})['count'], 2.0)

    def test_each_breach_of_the_format_fails_the_scrape_naming_its_line(self):
        cases = {
            'html': ('<html>oops</html>\n', 'line 1: a sample must start with a metric name'),
            'no value': ('up\n', 'line 1: expected a value'),
            'a word for a value': ('up one\n', "line 1: 'one' is not a sample value"),
            'three fields': ('up 1 2 3\n', 'line 1: expected a value'),
            'a timestamp that is not an integer': ('up 1 2.5\n', 'line 1: the timestamp'),
            'labels not closed': ('up{a="b" 1\n', 'line 1: malformed labels'),
            'a label without quotes': ('up{a=b} 1\n', 'line 1: malformed labels'),
            'a label twice': ('up{a="1",a="2"} 1\n', 'line 1: label a given twice'),
            'a bad escape': ('up{a="\\x"} 1\n', 'line 1: malformed labels'),
            'a series twice': ('up 1\nup 2\n', 'line 2: the series up is given twice'),
            'a type after the samples': ('up 1\n# TYPE up gauge\n', 'line 2: TYPE of up after its samples'),
            'an unknown type': ('# TYPE up meter\n', "line 1: TYPE 'meter' is not one of"),
            'a family in two groups': ('a 1\nb 1\na{x="1"} 2\n', 'line 3: the samples of a are not in one group'),
            'no space before the value': ('up{a="b"}1\n', 'line 1: expected a value'),
            'a negative counter': ('# TYPE reqs counter\nreqs_total{a="b"} 3\nreqs_total{a="c"} -2\n',
                                   'line 3: reqs_total{\'a\': \'c\'} is -2, and a counter is never negative'),
            'a counter at -Inf': ('# TYPE reqs_total counter\nreqs_total -Inf\n', 'line 2: reqs_total is -inf'),
            'a negative bucket': ('# TYPE t histogram\nt_bucket{le="+Inf"} -1\nt_count 0\nt_sum 0\n',
                                  "line 2: t_bucket{'le': '+Inf'} is -1, and a counter"),
        }
        for case, (text, message) in cases.items():
            with self.subTest(case=case), self.assertRaises(_ExpositionError) as caught:
                _parse_exposition(text)
            self.assertIn(message, str(caught.exception))

    def test_counters_give_their_increase_and_gauges_their_max_and_mean_per_step(self):
        def scrape(preemptions: float, running: list[float], usage: list[float]) -> dict:
            return {'ok': True, 'error_kind': None, 'families': {
                'vllm:num_preemptions_total': {'type': 'counter', 'samples': [
                    ['vllm:num_preemptions_total', {'engine': '0'}, preemptions]]},
                'vllm:num_requests_running': {'type': 'gauge', 'samples': [
                    ['vllm:num_requests_running', {'engine': str(n)}, value] for n, value in enumerate(running)]},
                'vllm:kv_cache_usage_perc': {'type': 'gauge', 'samples': [
                    ['vllm:kv_cache_usage_perc', {'engine': str(n)}, value] for n, value in enumerate(usage)]}}}
        summary = _MetricsSummary()
        for step, preemptions, running, usage in ((0, 10, [1, 2], [0.1, 0.3]), (0, 12, [3, 3], [0.5, 0.2]),
                                                  (0, 3, [0, 1], [0.0, 0.1]),  # a restart: counted from 0
                                                  (1, 3, [4, 4], [0.9, 0.8]), (1, 7, [2, 0], [0.2, 0.1])):
            summary.add(step, scrape(preemptions, running, usage))
        summary.add(1, {'ok': False, 'error_kind': 'timeout', 'families': None})
        result = summary.result({'url': 'u', 'file': 'f', 'interval': 1.0})
        first, second = result['steps']
        self.assertEqual(first['counters'], {'vllm:num_preemptions_total': 5.0})  # +2, then 3 after the restart
        self.assertEqual(first['gauges']['vllm:num_requests_running'], {'max': 6, 'mean': 3.333333, 'scrapes': 3})
        self.assertEqual(first['gauges']['vllm:kv_cache_usage_perc']['max'], 0.5)  # a share: the max of the engines
        self.assertEqual((second['counters'], second['scrapes'], second['failed']),
                         ({'vllm:num_preemptions_total': 4.0}, 3, 1))
        self.assertEqual((result['scrapes'], result['failed'], result['failures']), (6, 1, {'timeout': 1}))

    def test_a_counter_s_increase_is_never_below_zero(self):
        # a negative counter fails its scrape (above); one kept before that rule, read back by --summary, is
        # no value of the counter: the increase counts only what a counter can do, and from 0 after a reset
        self.assertEqual(_parse_exposition('# TYPE g gauge\ng -2\nu -2\n#TYPE t summary\nt_sum -1\n')['g']['samples'],
                         [['g', {}, -2.0]])  # gauges, untyped samples and sums may be negative
        def scrape(value: float) -> dict:
            return {'ok': True, 'error_kind': None, 'families': {
                'reqs': {'type': 'counter', 'samples': [['reqs_total', {}, value]]}}}
        for values, increase in (([10, -4], 0.0), ([10, -4, 3], 3.0), ([-4, 3], 0.0), ([5, 7, 2, 4], 6.0)):
            summary = _MetricsSummary()
            for value in values:
                summary.add(0, scrape(value))
            with self.subTest(values=values):
                self.assertEqual(summary.result({'url': 'u', 'file': 'f', 'interval': 1.0})['steps'][0]['counters'],
                                 {'reqs_total': increase})


class BrokenMetrics(LoopbackServer):
    """A metrics endpoint that stalls (reads the request, never answers), answers garbage, or answers 500."""

    def __init__(self, how: str) -> None:
        super().__init__()
        self.how, self.held = how, []
        self.url = self.url.replace('/v1/chat/completions', '/metrics')

    def serve(self, sock: socket.socket) -> None:
        sock.recv(65536)
        if self.how == 'stall':
            self.held.append(sock)
            return
        body = b'<html><body>Gateway says hello</body></html>\n' if self.how == 'garbage' else b'oops\n'
        status = b'200 OK' if self.how == 'garbage' else b'500 Internal Server Error'
        sock.sendall(b'HTTP/1.1 %s\r\ncontent-type: text/plain\r\ncontent-length: %d\r\n\r\n%s'
                     % (status, len(body), body))
        sock.close()

    def close(self) -> None:
        super().close()
        for sock in self.held:
            sock.close()


class ServerMetricsTests(unittest.TestCase):
    def setUp(self) -> None:
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)

    def test_the_fixtures_gauges_recorded_during_a_load_are_its_truth(self):
        with Fixture('stall') as fixture:
            done = run_cli('--url', fixture.url, '--model', 'm', '--runs', '3', '--concurrency', '3', '--idle', '1',
                           '--server-metrics', '--metrics-interval', '0.1', '--output', 'load.jsonl', cwd=self.tmp.name)
        self.assertEqual(done.returncode, 1, done.stderr)  # three stalls, cut at --idle
        scrapes = scrape_lines(self.tmp.name)
        self.assertTrue(all(scrape['ok'] for scrape in scrapes), scrapes)
        self.assertEqual([scrape['phase'] for scrape in scrapes][0], 'start')
        self.assertEqual([scrape['phase'] for scrape in scrapes][-1], 'end')
        self.assertEqual([scrape['scrape'] for scrape in scrapes], list(range(1, len(scrapes) + 1)))

        def value(scrape: dict, name: str) -> float:
            return scrape['families'][name]['samples'][0][2]
        running = [value(scrape, 'vllm:num_requests_running') for scrape in scrapes]
        self.assertLessEqual(set(running), {0.0, 1.0, 2.0, 3.0})
        self.assertEqual(max(running), 3)  # the three stalled streams, all in flight at once
        for scrape in scrapes:
            self.assertEqual(value(scrape, 'vllm:kv_cache_usage_perc'),
                             value(scrape, 'vllm:num_requests_running') / fixture_server.KV_CACHE_SLOTS)
            self.assertEqual(value(scrape, 'vllm:num_requests_waiting'), 0)
        self.assertEqual(value(scrapes[-1], 'vllm:prompt_tokens_total'), 3 * 6)  # 'Reply with exactly the word READY.'
        summary = json.loads(done.stdout)['server_metrics']
        step, = summary['steps']
        self.assertEqual(step['gauges']['vllm:num_requests_running']['max'], 3)
        self.assertEqual(step['gauges']['vllm:kv_cache_usage_perc']['max'], 3 / fixture_server.KV_CACHE_SLOTS)
        self.assertEqual(step['counters']['vllm:num_preemptions_total'], 0)
        self.assertEqual((summary['scrapes'], summary['failed'], summary['file']),
                         (len(scrapes), 0, 'load.server-metrics.jsonl'))

    def test_a_broken_metrics_endpoint_leaves_the_loads_verdicts_unchanged_and_is_noted(self):
        load = ('--fixture', 'mixed', '--seed', '5', '--runs', '12', '--idle', '2', '--metrics-interval', '0.2')

        def verdicts(name: str) -> list[tuple]:
            return sorted((record['run'], record['ok'], record['error_layer'], record['error_kind'])
                          for record in map(json.loads, Path(self.tmp.name, name).read_text().splitlines()))
        healthy = run_cli(*load, '--server-metrics', '--output', 'healthy.jsonl', cwd=self.tmp.name)
        self.assertEqual(json.loads(healthy.stdout)['server_metrics']['failed'], 0)
        expected = verdicts('healthy.jsonl')
        self.assertIn(False, {ok for _, ok, _, _ in expected})
        for how, kind in (('stall', 'timeout'), ('garbage', 'format'), ('500', 'status')):
            with self.subTest(endpoint=how):
                server = BrokenMetrics(how)
                server.start()
                try:
                    done = run_cli(*load, '--server-metrics', server.url, '--output', f'{how}.jsonl', cwd=self.tmp.name)
                finally:
                    server.close()
                self.assertEqual(done.returncode, healthy.returncode)
                self.assertEqual(verdicts(f'{how}.jsonl'), expected)
                summary = json.loads(done.stdout)
                self.assertEqual((summary['runs'], summary['ok'], summary['not_ok_by_kind']),
                                 tuple(json.loads(healthy.stdout)[key] for key in ('runs', 'ok', 'not_ok_by_kind')))
                metrics = summary['server_metrics']
                self.assertGreaterEqual(metrics['failed'], 2)  # the start and the end at least
                self.assertEqual((metrics['failed'], metrics['failures']),
                                 (metrics['scrapes'], {kind: metrics['scrapes']}))
                scrapes = scrape_lines(self.tmp.name, f'{how}.server-metrics.jsonl')
                self.assertEqual({(scrape['ok'], scrape['error_kind']) for scrape in scrapes}, {(False, kind)})
                self.assertIn(f'failed ({kind} {metrics["scrapes"]})', done.stderr)

    def test_each_step_of_a_sweep_is_scraped_from_its_start_to_its_end_and_summarized_apart(self):
        done = run_cli('--fixture', 'ok', '--rates', '5,10', '--duration', '0.6', '--server-metrics',
                       '--metrics-interval', '0.2', '--output', 'load.jsonl', cwd=self.tmp.name)
        self.assertEqual(done.returncode, 0, done.stderr)
        scrapes = scrape_lines(self.tmp.name)
        for step in (0, 1):
            phases = [scrape['phase'] for scrape in scrapes if scrape['step'] == step]
            self.assertEqual((phases[0], phases[-1], set(phases[1:-1]) <= {'every'}), ('start', 'end', True))
        steps = json.loads(done.stdout)['server_metrics']['steps']
        self.assertEqual([step['step'] for step in steps], [0, 1])
        self.assertEqual([step['scrapes'] for step in steps],
                         [sum(scrape['step'] == number for scrape in scrapes) for number in (0, 1)])

    def test_summary_of_the_saved_load_reads_its_scrapes_and_gives_what_the_load_printed(self):
        done = run_cli('--fixture', 'ok', '--runs', '6', '--concurrency', '2', '--server-metrics', '--metrics-interval',
                       '0.2', '--output', 'load.jsonl', cwd=self.tmp.name)
        again = run_cli('--summary', 'load.jsonl', cwd=self.tmp.name)
        self.assertEqual(json.loads(again.stdout), json.loads(done.stdout))
        self.assertEqual(json.loads(again.stdout)['server_metrics']['file'], 'load.server-metrics.jsonl')
        run_cli('--fixture', 'ok', '--runs', '2', '--server-metrics', '--output', 'other.jsonl', cwd=self.tmp.name)
        both = run_cli('--summary', 'load.jsonl', 'other.jsonl', '--report', 'both.html', cwd=self.tmp.name)
        self.assertEqual(both.returncode, 2)
        self.assertIn('the server metrics of several loads are not merged', both.stderr)
        self.assertFalse(Path(self.tmp.name, 'both.html').exists())
        Path(self.tmp.name, 'load.server-metrics.jsonl').write_text('{"scrape": 1}\n')
        broken = run_cli('--summary', 'load.jsonl', cwd=self.tmp.name)
        self.assertEqual(broken.returncode, 2)
        self.assertIn('load.server-metrics.jsonl line 1 is not a scrape of --server-metrics', broken.stderr)

    def test_a_person_at_a_terminal_reads_the_servers_figures_under_the_loads(self):
        status, screen = run_in_terminal('--fixture', 'ok', '--runs', '4', '--concurrency', '2', '--server-metrics',
                                         '--output', 'load.jsonl', cwd=self.tmp.name)
        self.assertEqual(status, 0, screen)
        table, metrics = screen.index('latency of 4 ok runs'), screen.index('server metrics from http://127.0.0.1:')
        self.assertLess(table, metrics)
        self.assertIn('kept in load.server-metrics.jsonl', screen)
        self.assertRegex(screen, r'num_requests_running max [0-2] mean [0-9.]+; num_requests_waiting max 0 mean 0')

    def test_the_report_draws_the_servers_gauges_on_the_loads_timeline_and_summary_draws_the_same(self):
        done = run_cli('--fixture', 'ok', '--runs', '12', '--concurrency', '3', '--server-metrics',
                       '--metrics-interval', '0.1', '--output', 'load.jsonl', '--report', 'load.html',
                       cwd=self.tmp.name)
        self.assertEqual(done.returncode, 0, done.stderr)
        run_cli('--summary', 'load.jsonl', '--report', 'again.html', cwd=self.tmp.name)
        page, redrawn = (Path(self.tmp.name, name).read_text() for name in ('load.html', 'again.html'))
        self.assertEqual(page, redrawn)
        drawing = page[page.index('aria-label="server metrics"'):]
        drawing = drawing[:drawing.index('</svg>')]
        self.assertEqual(re.findall(r'<title>([^<]+)</title></polyline>', drawing),
                         ['running', 'waiting', 'KV cache usage'])
        scrapes = sum(scrape['ok'] for scrape in scrape_lines(self.tmp.name))
        self.assertIn(f'from {scrapes} scrapes', page)
        running = re.search(r'points="([^"]+)"><title>running', drawing)[1].split()
        self.assertEqual(len(running), scrapes)
        self.assertTrue(page.index('<h2>Timeline</h2>') < page.index('aria-label="server metrics"'))
        plain = run_cli('--fixture', 'ok', '--runs', '2', '--output', 'plain.jsonl', '--report', 'plain.html',
                        cwd=self.tmp.name)
        self.assertEqual(plain.returncode, 0)
        self.assertNotIn('server metrics', Path(self.tmp.name, 'plain.html').read_text())

    def test_server_metrics_that_cannot_be_kept_are_refused_before_anything_is_sent(self):
        Path(self.tmp.name, 'taken.server-metrics.jsonl').write_text('')
        cases = {('--server-metrics',): '--server-metrics is for a load, not a single run',
                 ('--runs', '2', '--metrics-interval', '1'): '--metrics-interval needs --server-metrics',
                 ('--runs', '2', '--server-metrics', '--metrics-interval', '0.01'):
                 '--metrics-interval must be at least',
                 ('--runs', '2', '--server-metrics', 'http://192.0.2.1/metrics'):
                 '--server-metrics: plain http is allowed only',
                 ('--runs', '2', '--server-metrics', '--output', 'taken.jsonl'): 'taken.server-metrics.jsonl'}
        for flags, message in cases.items():
            with self.subTest(flags=flags):
                output = () if '--output' in flags else ('--output', 'load.jsonl')
                done = run_cli('--fixture', 'ok', *flags, *output, cwd=self.tmp.name)
                self.assertEqual(done.returncode, 2, done.stderr)
                self.assertIn(message, done.stderr)
                self.assertEqual(sorted(path.name for path in Path(self.tmp.name).iterdir()),
                                 ['taken.server-metrics.jsonl'])


if __name__ == '__main__':
    unittest.main()
