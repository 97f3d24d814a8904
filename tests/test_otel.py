"""A load's figures as OpenTelemetry GenAI client metrics (_otel, sans-IO) and live (_live_metrics): the
convention's names, units and buckets, verified and failed runs apart, the Prometheus text and OTLP/JSON, the
endpoint served during a load and the exports written."""
from __future__ import annotations

import collections
import http.client
import json
import os
import signal
import socket
import subprocess
import tempfile
import threading
import time
import unittest
import urllib.request
from unittest import mock

import fixture_server
from stream_client import _live_metrics
from stream_client._limits import UsageError
from stream_client._otel import (
    _FIRST_CHUNK, _INSTRUMENTS, _prometheus_name, _SECONDS_BOUNDS, _TOKEN_BOUNDS, _LoadMetrics, _otlp_request,
    _prometheus_text)
from stream_client._live_metrics import (
    _export_interval_s, _LiveMetrics, _MetricsServer, _OtlpExport, _otlp_target)
from stream_client._server_metrics import _parse_exposition
from stream_client._summary import Summary
from .support import (CLIENT, fake_record, Fixture, LoopbackServer, read_message, run_in_process, script_command,
                      script_env)
from .tiers import sans_io


def record(run: int = 0, ok: bool = True, kind: str | None = None, **fields) -> dict:
    """A record as a load writes it: fake_record's, with a failure's kind, usage and the load's block."""
    base = fake_record(run, ok, None if ok else 'application: EOF before [DONE]')
    return {**base, 'error_kind': None if ok else kind or 'eof_before_done', 'prompt_tokens': 5,
            'finish_reason': 'stop' if ok else None, 'warmup': False, 'load': {'slo': None}, **fields}


def rendered(metrics: _LoadMetrics) -> dict:
    """The Prometheus text of the metrics, read back by the project's strict reader of the format."""
    return _parse_exposition(_prometheus_text(metrics.copy()))


def lines(path: str) -> int:
    with open(path, encoding='utf-8') as file:
        return file.read().count('\n')


def samples(families: dict, family: str, sample: str | None = None, **labels) -> list[float]:
    return [value for name, have, value in families[family]['samples']
            if name == (sample or family) and all(have.get(key, '') == want for key, want in labels.items())]


@sans_io
class ConventionTests(unittest.TestCase):
    def test_the_names_are_the_conventions_and_their_prometheus_translation(self):
        self.assertEqual([(instrument.name, instrument.unit, _prometheus_name(instrument))
                          for instrument in _INSTRUMENTS[:7]], [
            ('gen_ai.client.inference.duration', 's', 'gen_ai_client_inference_duration_seconds'),
            ('gen_ai.client.inference.time_to_first_chunk', 's', 'gen_ai_client_inference_time_to_first_chunk_seconds'),
            ('gen_ai.client.inference.time_per_output_chunk', 's',
             'gen_ai_client_inference_time_per_output_chunk_seconds'),
            ('gen_ai.client.inference.usage.input_tokens', '{token}',
             'gen_ai_client_inference_usage_input_tokens_total'),
            ('gen_ai.client.inference.usage.output_tokens', '{token}',
             'gen_ai_client_inference_usage_output_tokens_total'),
            ('gen_ai.client.inference.operation.input_tokens', '{token}',
             'gen_ai_client_inference_operation_input_tokens'),
            ('gen_ai.client.inference.operation.output_tokens', '{token}',
             'gen_ai_client_inference_operation_output_tokens')])
        self.assertEqual(_SECONDS_BOUNDS, tuple(round(0.01 * 2 ** n, 2) for n in range(14)))
        self.assertEqual(_TOKEN_BOUNDS, tuple(4 ** n for n in range(14)))

    def test_a_value_on_a_boundary_is_counted_in_that_bucket_and_the_buckets_are_cumulative(self):
        metrics = _LoadMetrics()
        for first in (150.0, 160.0, 161.0, 90_000.0):
            metrics.add(record(first_text_ms=first))
        families = rendered(metrics)
        name = 'gen_ai_client_inference_time_to_first_chunk_seconds'
        self.assertEqual(samples(families, name, name + '_bucket', le='0.08'), [0])
        self.assertEqual(samples(families, name, name + '_bucket', le='0.16'), [2])
        self.assertEqual(samples(families, name, name + '_bucket', le='0.32'), [3])
        self.assertEqual(samples(families, name, name + '_bucket', le='81.92'), [3])
        self.assertEqual(samples(families, name, name + '_bucket', le='+Inf'), [4])
        self.assertEqual(samples(families, name, name + '_count'), [4])
        self.assertAlmostEqual(samples(families, name, name + '_sum')[0], 90.471)

    def test_verified_and_failed_runs_stay_apart_and_a_failure_carries_its_kind(self):
        metrics = _LoadMetrics()
        metrics.add(record(0))
        metrics.add(record(1, ok=False, kind='eof_before_done'))
        metrics.add(record(2, ok=False, kind='status_not_200', first_text_ms=None, event_gaps_ms=[]))
        families = rendered(metrics)
        duration = 'gen_ai_client_inference_duration_seconds'
        self.assertEqual(samples(families, duration, duration + '_count', error_type=''), [1])
        self.assertEqual(samples(families, duration, duration + '_count', error_type='eof_before_done'), [1])
        self.assertEqual(samples(families, duration, duration + '_count', error_type='status_not_200'), [1])
        first = 'gen_ai_client_inference_time_to_first_chunk_seconds'
        self.assertEqual(sorted(labels.get('error_type', '') for name, labels, _ in families[first]['samples']
                                if name == first + '_count'), ['', 'eof_before_done'])
        finished = 'stream_client_runs_finished_total'
        self.assertEqual(samples(families, finished, stream_client_verdict='ok', error_type=''), [1])
        self.assertEqual(samples(families, finished, stream_client_verdict='not_ok', error_type='status_not_200'),
                         [1])
        self.assertEqual(samples(families, 'stream_client_runs_good_total'), [1])

    def test_the_attributes_name_the_operation_provider_model_and_server_and_nothing_else_of_the_url(self):
        metrics = _LoadMetrics()
        metrics.add(record(0, api='messages', url='https://llm.example/v1/messages?key=secret-value', model='m1'))
        metrics.add(record(1, api='completions', url='http://[::1]/v1/completions'))
        text = _prometheus_text(metrics.copy())
        self.assertIn('gen_ai_operation_name="chat",gen_ai_provider_name="anthropic",gen_ai_request_model="m1",'
                      'server_address="llm.example",server_port="443"', text)
        self.assertIn('gen_ai_operation_name="text_completion",gen_ai_provider_name="openai",gen_ai_request_model="m",'
                      'server_address="::1",server_port="80"', text)
        self.assertNotIn('secret-value', text)
        self.assertNotIn('/v1/', text)

    def test_warmup_runs_are_counted_apart_and_left_out_of_every_figure(self):
        metrics = _LoadMetrics()
        for run in range(3):
            metrics.started()
        metrics.add(record(0, warmup=True))
        metrics.add(record(1))
        families = rendered(metrics)
        self.assertEqual(samples(families, 'stream_client_runs_warmup_total'), [1])
        self.assertEqual(samples(families, 'stream_client_runs_started_total'), [3])
        self.assertEqual(samples(families, 'stream_client_runs_in_flight'), [1])
        self.assertEqual(sum(samples(families, 'stream_client_runs_finished_total')), 1)
        duration = 'gen_ai_client_inference_duration_seconds'
        self.assertEqual(samples(families, duration, duration + '_count'), [1])

    def test_good_runs_meet_the_loads_bounds_or_the_ones_given(self):
        load = {'slo': {'first_text_ms': 12.0}}
        records = [record(run, load=load) for run in range(7)]  # first_text_ms 10 + run
        from_records, given = _LoadMetrics(), _LoadMetrics((('first_text_ms', 100.0),))
        for each in records:
            from_records.add(each)
            given.add(each)
        self.assertEqual(samples(rendered(from_records), 'stream_client_runs_good_total'), [3])
        self.assertEqual(samples(rendered(given), 'stream_client_runs_good_total'), [7])

    def test_usage_is_counted_where_the_server_reported_it_and_zero_under_unknown_where_not(self):
        metrics = _LoadMetrics()
        metrics.add(record(0, prompt_tokens=5, completion_tokens=3))
        metrics.add(record(1, prompt_tokens=None, completion_tokens=None))
        families = rendered(metrics)
        family = 'gen_ai_client_inference_usage_input_tokens_total'
        self.assertEqual(samples(families, family, gen_ai_token_modality='text'), [5])
        self.assertEqual(samples(families, family, gen_ai_token_modality='unknown'), [0])
        output = 'gen_ai_client_inference_operation_output_tokens'
        self.assertEqual(samples(families, output, output + '_count'), [1])
        self.assertEqual(samples(families, output, output + '_bucket', le='4'), [1])
        self.assertEqual(samples(families, output, output + '_bucket', le='1'), [0])

    def test_each_content_event_after_the_first_is_one_time_per_output_chunk(self):
        metrics = _LoadMetrics()
        metrics.add(record(0, event_gaps_ms=[5.0, 15.0, 30.0]))
        families = rendered(metrics)
        name = 'gen_ai_client_inference_time_per_output_chunk_seconds'
        self.assertEqual(samples(families, name, name + '_count'), [3])
        self.assertEqual(samples(families, name, name + '_bucket', le='0.01'), [1])
        self.assertEqual(samples(families, name, name + '_bucket', le='0.02'), [2])

    def test_the_counts_equal_the_summarys_by_verdict_and_kind(self):
        kinds = ['eof_before_done', 'status_not_200', 'malformed_json']
        records = [record(run, ok=run % 3 != 0, kind=kinds[run % len(kinds)]) for run in range(30)]
        metrics, summary = _LoadMetrics(), Summary()
        for each in records:
            metrics.add(each)
            summary.add(each)
        result, families = summary.result(), rendered(metrics)
        finished = 'stream_client_runs_finished_total'
        self.assertEqual(sum(samples(families, finished)), result['runs'])
        self.assertEqual(samples(families, finished, stream_client_verdict='ok'), [result['ok']])
        self.assertEqual({labels['error_type']: value for _, labels, value in families[finished]['samples']
                          if 'error_type' in labels}, result['not_ok_by_kind'])
        self.assertEqual(samples(families, 'stream_client_runs_good_total'), [result['good']])

    def test_the_otlp_request_is_the_protobuf_json_mapping(self):
        metrics = _LoadMetrics()
        metrics.started()
        metrics.add(record(0))
        metrics.add(record(1, ok=False))
        request = json.loads(json.dumps(_otlp_request(metrics.copy(), 1_700_000_000_000_000_000,
                                                     1_700_000_001_000_000_000)))
        scope = request['resourceMetrics'][0]['scopeMetrics'][0]
        self.assertEqual(scope['scope']['name'], 'stream_client')
        by_name = {metric['name']: metric for metric in scope['metrics']}
        first = by_name[_FIRST_CHUNK.name]
        self.assertEqual(first['unit'], 's')
        self.assertEqual(first['histogram']['aggregationTemporality'], 2)
        point = first['histogram']['dataPoints'][0]
        self.assertEqual(point['explicitBounds'], list(_SECONDS_BOUNDS))
        self.assertEqual(len(point['bucketCounts']), len(_SECONDS_BOUNDS) + 1)
        self.assertTrue(all(isinstance(count, str) for count in point['bucketCounts']))
        self.assertEqual((point['startTimeUnixNano'], point['timeUnixNano']),
                         ('1700000000000000000', '1700000001000000000'))
        self.assertIn({'key': 'server.port', 'value': {'intValue': '8000'}}, point['attributes'])
        finished = by_name['stream_client.runs.finished']['sum']
        self.assertEqual((finished['aggregationTemporality'], finished['isMonotonic']), (2, True))
        self.assertEqual(sorted(point['asInt'] for point in finished['dataPoints']), ['1', '1'])
        in_flight = by_name['stream_client.runs.in_flight']['sum']
        self.assertEqual((in_flight['isMonotonic'], in_flight['dataPoints'][0]['asInt']), (False, '0'))

    def test_a_copy_does_not_move_with_the_load(self):
        metrics = _LoadMetrics()
        metrics.add(record(0))
        copy = metrics.copy()
        metrics.add(record(1))
        duration = 'gen_ai_client_inference_duration_seconds'
        self.assertEqual(samples(rendered(copy), duration, duration + '_count'), [1])
        self.assertEqual(samples(rendered(metrics), duration, duration + '_count'), [2])

    def test_the_export_interval_is_otel_metric_export_interval_in_milliseconds(self):
        self.assertEqual(_export_interval_s({}), 60.0)
        self.assertEqual(_export_interval_s({'OTEL_METRIC_EXPORT_INTERVAL': '500'}), 0.5)
        for bad in ('0', '50', '1.5', 'soon'):
            with self.assertRaisesRegex(UsageError, 'OTEL_METRIC_EXPORT_INTERVAL must be'):
                _export_interval_s({'OTEL_METRIC_EXPORT_INTERVAL': bad})

    def test_an_otlp_endpoint_is_checked_and_a_bare_origin_gets_v1_metrics(self):
        self.assertEqual(_otlp_target('http://127.0.0.1:4318'), ('http', '127.0.0.1', 4318, '/v1/metrics'))
        self.assertEqual(_otlp_target('https://collector.example/otlp/v1/metrics'),
                         ('https', 'collector.example', 443, '/otlp/v1/metrics'))
        for bad in ('ftp://x', 'http://user:pw@host:4318', 'http://host:99999', 'nothing'):
            with self.assertRaises(UsageError) as caught:
                _otlp_target(bad)
            self.assertNotIn('pw', str(caught.exception))


class _Collector(LoopbackServer):
    """An OTLP/HTTP receiver on loopback: keeps each request's bytes."""

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[bytes] = []

    @property
    def port(self) -> int:
        return self.listener.getsockname()[1]

    def serve(self, sock: socket.socket) -> None:
        with sock:
            head, body = read_message(sock)
            self.requests.append(head + b'\r\n\r\n' + body)
            sock.sendall(b'HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}')


class LiveTests(unittest.TestCase):
    def test_the_endpoint_serves_the_metrics_while_records_are_added(self):
        live = _LiveMetrics()
        server = _MetricsServer('127.0.0.1', 0, live)
        server.start()
        self.addCleanup(server.close)

        def load() -> None:
            for run in range(200):
                live.started()
                live.add(record(run, ok=run % 4 != 0))
        loader = threading.Thread(target=load)
        loader.start()
        seen = []
        while loader.is_alive() or len(seen) < 2:
            with urllib.request.urlopen(server.url, timeout=10) as response:
                self.assertEqual(response.headers['Content-Type'], 'text/plain; version=0.0.4; charset=utf-8')
                families = _parse_exposition(response.read().decode())
            seen.append(sum(samples(families, 'stream_client_runs_finished_total')))
        loader.join()
        self.assertEqual(seen, sorted(seen))  # a counter never goes back
        self.assertEqual(seen[-1], 200)
        connection = http.client.HTTPConnection('127.0.0.1', server.server_address[1], timeout=10)
        connection.request('GET', '/probe')
        self.assertEqual(connection.getresponse().status, 404)
        connection.close()

    def test_a_port_in_use_is_refused_in_one_line(self):
        taken = socket.socket()
        taken.bind(('127.0.0.1', 0))
        taken.listen()
        self.addCleanup(taken.close)
        with self.assertRaisesRegex(UsageError, r'^--metrics-port \d+ on 127.0.0.1: cannot listen: '):
            _MetricsServer('127.0.0.1', taken.getsockname()[1], _LiveMetrics())

    def test_the_exports_are_one_json_object_a_line_and_one_at_the_end_also_posted(self):
        collector = _Collector()
        collector.start()
        self.addCleanup(collector.close)
        live = _LiveMetrics(clock_ns=lambda: 1_700_000_000_000_000_000)
        folder = tempfile.mkdtemp()
        path = os.path.join(folder, 'm.otlp.jsonl')
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        export = _OtlpExport(live, 3600.0, fd, f'http://127.0.0.1:{collector.port}')
        export.start()
        live.add(record(0))
        self.assertEqual(export.close(), [])
        with open(path, encoding='utf-8') as file:
            lines = file.read().splitlines()
        self.assertEqual(len(lines), 1)  # the interval never came: the one at the end
        exported = json.loads(lines[0])
        self.assertIn('resourceMetrics', exported)
        head, _, body = collector.requests[0].partition(b'\r\n\r\n')
        self.assertTrue(head.startswith(b'POST /v1/metrics HTTP/1.1'))
        self.assertIn(b'content-type: application/json', head.lower())
        self.assertEqual(json.loads(body), exported)

    def test_a_port_out_of_range_is_refused_in_one_line(self):
        with self.assertRaisesRegex(UsageError, r'^--metrics-port 70000 on 127.0.0.1: cannot listen: '):
            _MetricsServer('127.0.0.1', 70000, _LiveMetrics())

    def test_an_export_is_written_every_interval_each_one_cumulative(self):
        live = _LiveMetrics()
        read, write = os.pipe()
        self.addCleanup(os.close, read)
        export = _OtlpExport(live, 0.05, write, None)
        export.start()
        lines, added = b'', 0
        while lines.count(b'\n') < 2:  # two exports of the interval, whenever they come
            live.add(record(added))
            added += 1
            lines += os.read(read, 1 << 20)
        live.add(record(added))
        export.close()  # the last export, and the file closed
        while more := os.read(read, 1 << 20):
            lines += more
        finished = []
        for line in lines.splitlines():
            metrics = json.loads(line)['resourceMetrics'][0]['scopeMetrics'][0]['metrics']
            points = next(metric for metric in metrics if metric['name'] == 'stream_client.runs.finished')['sum']
            finished.append((int(points['dataPoints'][0]['timeUnixNano']),
                             sum(int(point['asInt']) for point in points['dataPoints'])))
        self.assertGreaterEqual(len(finished), 3)
        for column in zip(*finished):  # later exports: later times, never fewer runs
            self.assertEqual(list(column), sorted(column))
        self.assertEqual(finished[-1][1], added + 1)

    def test_a_refused_post_is_reported_and_the_file_still_written(self):
        closed = socket.socket()
        closed.bind(('127.0.0.1', 0))
        port = closed.getsockname()[1]
        closed.close()
        export = _OtlpExport(_LiveMetrics(), 3600.0, None, f'http://127.0.0.1:{port}')
        problems = export.close()
        self.assertEqual(len(problems), 1)
        self.assertRegex(problems[0], rf'^--otlp-endpoint 127.0.0.1:{port}/v1/metrics: ConnectionRefusedError')


class EndpointDuringALoadTests(unittest.TestCase):
    def test_the_endpoints_counts_at_the_end_equal_the_evidence_files_by_verdict_and_kind(self):
        runs, seed = 40, 0
        schedule = fixture_server.Schedule(seed)
        self.assertLessEqual(set(fixture_server.MIXED_FAILURES), {schedule.next_mode() for _ in range(runs)},
                             'the load must meet every fault the mixed fixture makes')
        scrapes, close = [], _live_metrics._LiveFigures.close

        def scraped_then_closed(figures) -> list:
            with urllib.request.urlopen(figures.server.url, timeout=10) as response:
                scrapes.append(response.read().decode())
            return close(figures)
        folder = tempfile.mkdtemp()
        with mock.patch.object(_live_metrics._LiveFigures, 'close', scraped_then_closed):
            done = run_in_process('--fixture', 'mixed', '--seed', str(seed), '--runs', str(runs), '--concurrency', '8',
                                  '--metrics-port', '0', '--header', 'X-Team: secret-header-value',
                                  '--output', 'load.jsonl', cwd=folder,
                                  env={**os.environ, 'MODEL_API_KEY': 'sk-secret'})
        self.assertEqual(done.returncode, 1, done.stderr)  # not every run is ok
        with open(os.path.join(folder, 'load.jsonl'), encoding='utf-8') as file:
            records = [json.loads(line) for line in file]
        families = _parse_exposition(scrapes[-1])
        finished = {(labels['stream_client_verdict'], labels.get('error_type')): value
                    for _, labels, value in families['stream_client_runs_finished_total']['samples']}
        expected = collections.Counter(('ok' if r['ok'] else 'not_ok', r['error_kind']) for r in records)
        self.assertEqual(finished, dict(expected))
        self.assertGreaterEqual(len(expected), len(fixture_server.MIXED_FAILURES))
        self.assertEqual(samples(families, 'stream_client_runs_started_total'), [runs])
        self.assertEqual(samples(families, 'stream_client_runs_in_flight'), [0])
        duration = 'gen_ai_client_inference_duration_seconds'
        self.assertEqual(sum(samples(families, duration, duration + '_count')), runs)
        self.assertNotIn('secret', scrapes[-1])
        self.assertRegex(done.stderr, r'metrics served at http://127\.0\.0\.1:\d+/metrics during the load')

    def test_sessions_and_traces_count_their_runs_started_as_a_load_does(self):
        files = {'sessions.jsonl': ''.join(json.dumps({'id': f's{n}', 'turns': ['one', 'two']}) + '\n'
                                           for n in range(2)),
                 'trace.jsonl': '{"timestamp": 0, "prompt": "a"}\n{"timestamp": 5, "prompt": "b"}\n'}
        for flag, name, runs, more in (('--sessions', 'sessions.jsonl', 4, []), ('--trace', 'trace.jsonl', 2, []),
                                       ('--sessions', 'sessions.jsonl', 4, ['--processes', '2']),  # said on the pipe
                                       ('--runs', None, 6, ['--processes', '2'])):
            with self.subTest(flag=flag, more=more):
                folder = tempfile.mkdtemp()
                if name is not None:
                    with open(os.path.join(folder, name), 'w', encoding='utf-8') as file:
                        file.write(files[name])
                done = run_in_process('--fixture', 'ok', flag, name or str(runs), *more, '--otlp-json',
                                      'm.otlp.jsonl', '--output', 'l.jsonl', cwd=folder)
                self.assertEqual(done.returncode, 0, done.stderr)
                with open(os.path.join(folder, 'm.otlp.jsonl'), encoding='utf-8') as file:
                    last = json.loads(file.read().splitlines()[-1])
                sums = {metric['name']: sum(int(point['asInt']) for point in metric['sum']['dataPoints'])
                        for metric in last['resourceMetrics'][0]['scopeMetrics'][0]['metrics'] if 'sum' in metric}
                self.assertEqual((sums['stream_client.runs.started'], sums['stream_client.runs.finished'],
                                  sums['stream_client.runs.in_flight']), (runs, runs, 0))

    def test_a_load_cut_by_ctrl_c_still_writes_its_last_export_with_every_run_that_started(self):
        folder = tempfile.mkdtemp()
        output, otlp = os.path.join(folder, 'cut.jsonl'), os.path.join(folder, 'cut.otlp.jsonl')
        with Fixture('ok', delay=0.02) as fixture:
            process = subprocess.Popen(script_command(CLIENT, '--url', fixture.url, '--model', 'm', '--runs', '200',
                                                      '--concurrency', '4', '--otlp-json', otlp, '--output', output),
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=script_env())
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and (not os.path.exists(output) or lines(output) < 6):
                time.sleep(0.05)
            process.send_signal(signal.SIGINT)
            _, stderr = process.communicate(timeout=20)
        self.assertEqual(process.returncode, 130, stderr)
        with open(output, encoding='utf-8') as file:
            records = [json.loads(line) for line in file]
        with open(otlp, encoding='utf-8') as file:
            last = json.loads(file.read().splitlines()[-1])
        sums = {metric['name']: sum(int(point['asInt']) for point in metric['sum']['dataPoints'])
                for metric in last['resourceMetrics'][0]['scopeMetrics'][0]['metrics'] if 'sum' in metric}
        self.assertLess(len(records), 200)
        self.assertEqual((sums['stream_client.runs.started'], sums['stream_client.runs.finished'],
                          sums['stream_client.runs.in_flight']), (len(records), len(records), 0))

    def test_metrics_host_without_metrics_port_is_refused_before_anything_is_sent(self):
        folder = tempfile.mkdtemp()
        done = run_in_process('--fixture', 'ok', '--runs', '2', '--metrics-host', '0.0.0.0', '--output', 'l.jsonl',
                              cwd=folder)
        self.assertEqual((done.returncode, os.listdir(folder)), (2, []))
        self.assertIn('--metrics-host goes with --metrics-port', done.stderr)


if __name__ == '__main__':
    unittest.main()
