"""Strict client for the streamed answers vLLM serves.

It sends a request with ``stream: true`` to chat completions, completions,
the Responses API or the Anthropic-compatible Messages API, shows the answer
as it arrives and writes an evidence record that says whether the answer
really finished: the HTTP message ended as its framing promised, the event
stream ended on an event boundary, and the answer ended as its API says a
finished answer ends (for chat: visible text, finish_reason "stop" and
``data: [DONE]``). Everything else is a failure naming the layer where it
happened. Standard library only; no retries.

One file to ship: ``stream_client.py`` is generated from this package by
``tools/amalgamate.py`` (docs/development.md), so that it can be copied to a
GPU host and run with the Python there, nothing to install. The public names
are in ``__all__``.

The modules, bottom to top: each imports only from those above it in this
list (a test keeps the list, the generator's order and the imports in step).

_limits        the bounds; ``FAILURE_KINDS``, the one table of every failure's
               stable kind and layer; ``StreamError``, which carries both
_sse           SSE, sans-IO: ``Events`` (and ``TypedEvents``), bytes in, event data out
_json          strict JSON: ``strict_json()``; every event's JSON: ``_json_value()``
_ecma          ECMA-262 regular expressions, for JSON Schema's pattern keyword
_schema        ``JsonSchema``, drafts 2020-12 and 7 (docs/json-schema.md)
_dialects      a server's known departures from its vendor's protocol, as data:
               ``Dialect``, ``DIALECTS`` (strict, llama.cpp, tgi, litellm), each rule with its proof
_validator     the protocol seam, sans-IO: ``StreamValidator`` takes event data
               through ``accept()`` and gives the ``Pieces`` out, with the
               outcome rules the APIs share (``outcome()``); ``AnswerSpec``
_chat          ``ChatChunks`` and ``CompletionChunks``: the grammar of chat and
               completions chunks (the parts of an answer, their states, the
               events each state accepts)
_responses     ``ResponseEvents``: the grammar of the Responses API's events
_messages      ``MessagesEvents``: the grammar of the Messages API's events
_answer        the answer as a whole, sans-IO: ``VALIDATORS``, the signals one
               stream shows (``_answer_problem()``), the unstreamed twin
               (``unstreamed_answer()``) and the cross-check (``compare_answers()``)
_http          HTTP/1.x, sans-IO: the response head and one reader per body framing
_reader        the whole response, sans-IO: ``ResponseReader`` composes HTTP,
               SSE and the grammar (bytes in through ``feed()`` and ``eof()``);
               ``UnstreamedReader`` reads the twin
_headers       the headers a user adds (--header), checked; only their names are ever kept
_request       ``prepare()`` checks a request before any connection and returns
               the frozen ``PreparedRequest`` a run sends
_salt          --cache-salt, sans-IO: a pass's (or a session's) marker before the first text of
               every request, so that a prefix cache cannot serve a replayed pass
_exchange      what one run owns: ``_Exchange``, its ``_Timeline`` (kernel
               arrival stamps where Linux gives them), its connection,
               ``Cancel`` and ``KeptConnections``
_verdict       ``judge()`` decides why a run is not ok, in one place and without I/O
_failures      the transport's failures, next to it: where socket, TLS and clock
               trouble (timeouts, the deadline, a stale connection, a signal) become failures
_record        ``_build_record()``: the evidence record of one run
_transport     ``run()`` and ``stream()``: one request, read under the idle
               timeout and the overall deadline; the cross-check's twin
_machine       ``_Machine``: one run on the engine as a state machine (connect, send, read, record)
_runs          ``_Engine``: the runs of a load, a trace or sessions as state machines on one
               epoll set in the load's thread, no thread per run (Linux)
_processes     ``_spread_load()``: a workload's shares over forked worker processes (--processes)
_plan          a load's plan: its id, ``--shard I/N`` and ``--start-at``; which shard is missing
_load          ``run_load()``: runs on the engine (worker threads without epoll) or forked processes
_gates         ``--fail-if`` gates on a summary, sans-IO: parsed before anything
               is sent, evaluated on the summary's figures
_tails         the tail, sans-IO: percentiles with the failures inside (a run not ok or never
               started infinitely late) and MLPerf's certified tail (early stopping)
_summary       ``Summary``: the verdicts, latencies, goodput and sweep steps of a load
_comparison    two loads side by side, sans-IO: the differences of their figures,
               with seeded bootstrap intervals for latency (``--compare BASE CANDIDATE``)
_otel          a load's figures as OpenTelemetry's GenAI client metrics, sans-IO: ``_LoadMetrics``
               (an observer of records), ``_prometheus_text()`` and ``_otlp_request()`` (docs/formats.md)
_workloads     workload files, sans-IO: ``_parse_sessions()`` reads a --sessions file, and
               ``_Conversation`` is the history a session sends, in its API's shape
_sessions      ``_run_sessions()``: multi-turn agent sessions, each request one run, a run not ok
               ending its session
_session_summary ``_SessionSummary``, sans-IO: sessions, turns and tool rounds counted from the records,
               and session goodput beside turn goodput; ``_SessionRows``, a report's turns
_trace         ``_run_trace()``: a timed trace replayed open-loop, each run's lateness kept; the
               prompts' lengths met with the server's /tokenize where it offers one
_report        ``Report``: one self-contained HTML page per load
_benchmark_report the llm-d Benchmark Report v0.2.1 of a load, sans-IO: ``_llm_d_report()``
               (--summary FILE... --format benchmark-report; docs/formats.md)
_evidence      evidence files, each created once and never overwritten, and
               read back (``iter_records()``, ``summarize()``)
_server_metrics --server-metrics: the server's Prometheus metrics during a load, scraped on a thread
               of their own, kept, and summarized per step
_live_metrics  --metrics-port and --otlp-json: the GenAI metrics served to Prometheus and written as
               OTLP/JSON while a load runs, from threads of their own
_args          the command line's flags, and the requests and settings they give
_workload_flags which flag each workload honours (``_FLAG_TABLE``), the rest refused before anything
               is sent
_steps         a load's steps for any workload: --rates, --concurrencies, --find-capacity, --warmup, --repeat
_views         what the terminal shows while runs go on and once they end
_engine        ``_Workload`` and ``_drive()``: any workload's steps in turn, its records to every observer
_workloads_cli --sessions and --trace: the file read and every request prepared before any file, then run
_exporter      ``Exporter``: the verdict of one run per scrape, for Prometheus
               (``parse_targets()``, ``probe_families()``, ``exposition()`` and
               ``SingleFlight`` are sans-IO), served by ``ExporterServer``
_exporter_cli  ``--exporter``: serve probes until a signal
_cli           ``main()``: one run, a load, a sweep, the exporter, or reading saved evidence
"""
import os
import sys

# The first statements, so that Python 3.6 to 3.9 stop here with one line (3.5 and older cannot read
# the f-strings below, and stop with their own SyntaxError before any line runs).
if sys.version_info < (3, 10):
    sys.exit(f'{os.path.basename(sys.argv[0])}: needs Python 3.10 or newer, not {sys.version.split()[0]}')

from ._limits import (
    __version__,  # noqa: F401 -- re-exported: stream_client.__version__, as --version and the records show it
    Interrupted, StreamError, SSEError, SSEDecodeError, LAYERS, FAILURE_KINDS, MAX_LINE_CHARS, MAX_EVENT_CHARS,
    MAX_TEXT_CHARS, UsageError)
from ._sse import Events, TypedEvents
from ._json import SchemaError, strict_json
from ._schema import JsonSchema
from ._dialects import Dialect, DialectRule, DIALECTS
from ._validator import StreamValidator, Pieces, AnswerSpec, ToolCall
from ._chat import ChatChunks, CompletionChunks
from ._responses import ResponseEvents
from ._messages import MessagesEvents
from ._answer import VALIDATORS, Answer, AnsweredCall, unstreamed_answer, compare_answers, cross_check_record
from ._reader import Capture, ResponseReader, UnstreamedReader
from ._request import prepare, PreparedRequest
from ._exchange import Cancel, KeptConnections
from ._verdict import compare_twin, judge, Verdict
from ._transport import stream, run
from ._load import run_load, LoadSettings, arrival_offsets
from ._summary import Summary
from ._report import Report
from ._evidence import iter_records, summarize
from ._exporter import Exporter, ExporterServer, SingleFlight, parse_targets, probe_families, exposition
from ._cli import main

__all__ = [
    # one run, and the record it returns
    'stream', 'prepare', 'run', 'PreparedRequest', 'Capture', 'Cancel', 'Interrupted', 'KeptConnections',
    # judging bytes without a socket
    'ResponseReader', 'judge', 'Verdict', 'Events', 'TypedEvents', 'StreamValidator', 'Pieces', 'ChatChunks',
    'CompletionChunks', 'ResponseEvents', 'MessagesEvents', 'VALIDATORS', 'StreamError', 'SSEError',
    'SSEDecodeError', 'LAYERS', 'FAILURE_KINDS', 'MAX_LINE_CHARS', 'MAX_EVENT_CHARS', 'MAX_TEXT_CHARS',
    # tool calls and JSON answers
    'AnswerSpec', 'ToolCall', 'JsonSchema', 'SchemaError', 'strict_json',
    # servers' known departures from their vendor's protocol
    'Dialect', 'DialectRule', 'DIALECTS',
    # --cross-check: the unstreamed twin and the comparison
    'Answer', 'AnsweredCall', 'UnstreamedReader', 'compare_twin', 'unstreamed_answer', 'compare_answers',
    'cross_check_record',
    # many runs, and reading saved evidence
    'run_load', 'LoadSettings', 'arrival_offsets', 'Summary', 'Report', 'iter_records', 'summarize',
    # the Prometheus exporter
    'Exporter', 'ExporterServer', 'SingleFlight', 'parse_targets', 'probe_families', 'exposition',
    'main', 'UsageError',
]
