"""CI only, from the development tools' environment (never imported by the project): a fixture load's
--otlp-json parsed by the official protobuf definitions (opentelemetry-proto) into ExportMetricsServiceRequest,
and its figures against the load's own summary.

usage: check_otlp.py   (run from the checkout; exits 0 when every export parses and the last one's counts
equal the summary's, 1 otherwise, naming what differs)
"""
import collections
import json
import os
import subprocess
import sys
import tempfile

from google.protobuf import json_format
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

CHECKOUT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def attributes(point) -> dict:
    return {kv.key: kv.value.string_value or kv.value.int_value for kv in point.attributes}


def figures(request: ExportMetricsServiceRequest) -> dict:
    """The counts of one export: runs finished by verdict and kind, good runs, and the first-chunk
    histogram's count of verified runs."""
    out = {'finished': collections.Counter(), 'good': 0, 'first_chunk_ok': 0, 'started': 0}
    for resource in request.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name == 'stream_client.runs.finished':
                    for point in metric.sum.data_points:
                        labels = attributes(point)
                        out['finished'][labels.get('error.type') or labels['stream_client.verdict']] += point.as_int
                elif metric.name == 'stream_client.runs.good':
                    out['good'] = sum(point.as_int for point in metric.sum.data_points)
                elif metric.name == 'stream_client.runs.started':
                    out['started'] = sum(point.as_int for point in metric.sum.data_points)
                elif metric.name == 'gen_ai.client.inference.time_to_first_chunk':
                    out['first_chunk_ok'] = sum(point.count for point in metric.histogram.data_points
                                                if 'error.type' not in attributes(point))
                    for point in metric.histogram.data_points:
                        assert len(point.bucket_counts) == len(point.explicit_bounds) + 1, 'buckets and bounds'
                        assert sum(point.bucket_counts) == point.count, 'bucket counts add up to the count'
    return out


def main() -> int:
    folder = tempfile.mkdtemp()
    otlp, evidence = os.path.join(folder, 'load.otlp.jsonl'), os.path.join(folder, 'load.jsonl')
    command = [sys.executable, os.path.join(CHECKOUT, 'stream_client.py'), '--fixture', 'mixed', '--seed', '3',
               '--runs', '40', '--concurrency', '8', '--slo', 'first_text_ms=400', '--otlp-json', otlp,
               '--output', evidence, '--quiet']
    done = subprocess.run(command, capture_output=True, text=True, timeout=300,
                          env={**os.environ, 'OTEL_METRIC_EXPORT_INTERVAL': '200'})
    if done.returncode not in (0, 1):
        print(f'otlp: the load failed ({done.returncode}): {done.stderr.strip()[-500:]}')
        return 1
    summary = json.loads(done.stdout.splitlines()[-1])
    with open(otlp, encoding='utf-8') as file:
        exports = [json_format.Parse(line, ExportMetricsServiceRequest()) for line in file if line.strip()]
    seen = [figures(export) for export in exports]
    last = seen[-1]
    want = {'finished': collections.Counter({'ok': summary['ok'], **summary['not_ok_by_kind']}),
            'good': summary['good'], 'first_chunk_ok': summary['latency_runs'], 'started': summary['runs']}
    problems = [f'{key}: the export says {last[key]}, the summary {value}' for key, value in want.items()
                if last[key] != value]
    totals = [sum(each['finished'].values()) for each in seen]
    if totals != sorted(totals):
        problems.append(f'the cumulative runs finished went back between exports: {totals}')
    for problem in problems:
        print(f'otlp: {problem}')
    print(f'otlp: {len(exports)} exports parsed into ExportMetricsServiceRequest; the last one: runs '
          f'{sum(last["finished"].values())}, ok {last["finished"]["ok"]}, good {last["good"]}, kinds '
          f'{len(last["finished"]) - 1}: {"differs" if problems else "equal to the summary"}')
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main())
