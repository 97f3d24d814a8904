"""The command line's flags: the parser, and the requests and settings they give.

``_parser()`` builds the flags (grouped by task); ``_requests_from_args()``
turns them into prepared requests; ``_Fixture`` runs the built-in fixture.
"""
import argparse
import difflib
import importlib.util
import json
import math
import os
import re
import signal
import sys
import threading

from ._limits import _and_list, _DEFAULT_EXPORTER_IN_FLIGHT, Interrupted, StreamError, UsageError, __version__
from ._dialects import DIALECTS
from ._validator import AnswerSpec
from ._headers import _parse_header
from ._answer import _seeded, VALIDATORS
from ._request import (
    _API_PATHS, _DEFAULT_PROMPT, _DEFAULT_URL, _FINISHES, _models_request, _positive_finite, prepare, PreparedRequest)
from ._exchange import _Exchange
from ._transport import _fetch_unstreamed
from ._salt import _SALT_CHOICES, _SALT_FIELD
from ._load import _ARRIVALS, _MAX_OPEN_LOOP_IN_FLIGHT
from ._summary import _DEFAULT_SLO_TARGET, _SLO_FIGURES


class _OneLineParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line on stderr and exit status 2."""

    def error(self, message: str):
        self.exit(2, f'{self.prog}: error: {message}\n')


_FIXTURE_FILE = 'fixture_server.py'
# fixture_server.PROFILE_NAMES, named here so that --help needs no fixture
_FIXTURE_PROFILES = ('guide', 'vllm', 'llama.cpp', 'tgi', 'sglang', 'ollama')


def _fixture_server():
    """The fixture module, for --fixture: fixture_server.py beside this file (or, for the package in src/,
    where the path finds it: the checkout's top), loaded only then, so that this file copied alone runs
    everything else. UsageError if it is not there."""
    loaded = sys.modules.get('fixture_server')
    if loaded is not None:
        return loaded
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), _FIXTURE_FILE)
    if not os.path.isfile(path):  # the package in src/, run from a checkout: fixture_server.py on the path
        found = importlib.util.find_spec('fixture_server')
        path = found.origin if found is not None and found.origin else path
    if not os.path.isfile(path):
        raise UsageError(f'--fixture needs {_FIXTURE_FILE} beside {os.path.basename(__file__)} (in '
                         f'{os.path.dirname(path)}); copy it there, or point --url at a server')
    spec = importlib.util.spec_from_file_location('fixture_server', path)
    module = importlib.util.module_from_spec(spec)
    sys.modules['fixture_server'] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules['fixture_server']
        raise
    return module


def _fixture_mode(fixture, mode: str) -> str:
    """mode, if the fixture has it; else UsageError with the closest modes."""
    if mode in fixture.CHOICES:
        return mode
    close = difflib.get_close_matches(mode, fixture.CHOICES, n=3)
    hint = f'did you mean {" or ".join(close)}? ' if close else ''
    raise UsageError(f'--fixture has no mode {mode!r}; {hint}python3 {_FIXTURE_FILE} --help lists its '
                     f'{len(fixture.CHOICES)} modes')


def _program_name(module: str) -> str | None:
    """How the program was started, when argparse's default (the script's file name) would be wrong:
    ``python3 -m MODULE``. None otherwise."""
    spec = getattr(sys.modules.get('__main__'), '__spec__', None)
    if spec is not None and spec.name == module:
        return f'{os.path.basename(sys.executable)} -m {module}'
    return None


def _parser() -> _OneLineParser:
    parser = _OneLineParser(
        prog=_program_name('stream_client'), allow_abbrev=False,
        description='Stream answers from vLLM or another compatible server (chat completions, completions, the '
                    'Responses API or the Anthropic Messages API) and save evidence of whether each really '
                    'finished: one run, or many at once with a summary built from their verdicts. Exit status: 0 '
                    'every run ok (or every --fail-if gate held), 1 a run not ok (or a gate failed), 2 bad '
                    'arguments or output path, 130/143 interrupted.',
        epilog='The API key is read from MODEL_API_KEY and sent as a Bearer token; it is never saved or printed.')
    send = parser.add_argument_group('what to send')
    send.add_argument('--url', help=f'the endpoint (default {_DEFAULT_URL}); a path ending in '
                                    f'{", ".join(_API_PATHS)} chooses the API')
    send.add_argument('--api', choices=list(VALIDATORS),
                      help='the API, for a server mounted at another path (default: from the URL path)')
    send.add_argument('--model', help='model name to request (default: the one model GET /v1/models lists; with '
                                      '--fixture: synthetic-fixture)')
    send.add_argument('--prompt', help=f'user message (default: {_DEFAULT_PROMPT!r})')
    send.add_argument('--prompt-file', metavar='PATH', help='read the user message from a file, or - for stdin')
    send.add_argument('--system', metavar='TEXT', help='a system message before the user message')
    send.add_argument('--max-tokens', type=int, default=128, metavar='N',
                      help='output budget: max_tokens, or max_output_tokens for the Responses API (default 128)')
    send.add_argument('--temperature', type=float, default=0.0, metavar='T', help='sampling temperature (default 0)')
    send.add_argument('--stop', action='append', metavar='TEXT', help='a stop string (repeatable)')
    send.add_argument('--extra', metavar='JSON',
                      help='a JSON object merged into the request body, e.g. \'{"min_tokens": 3}\'; '
                           'it may not set model, stream, n or a key that has its own flag')
    send.add_argument('--tools', metavar='FILE',
                      help='a JSON array of tools in the chat-completions shape ({"type": "function", "function": '
                           '{"name", "description", "parameters"}}); the answer may then be tool calls, whose '
                           'arguments must be one JSON object matching their parameters. Not for completions')
    send.add_argument('--tool-choice', metavar='CHOICE',
                      help='auto (default with --tools), required, none, or the NAME of one tool to force')
    send.add_argument('--json-schema', metavar='FILE',
                      help='ask for a JSON answer matching this JSON Schema; a finished answer parses and matches')
    send.add_argument('--expect-finish', choices=_FINISHES, default='stop',
                      help='the finish of a finished answer: stop (default), or length for a fixed-length load '
                           '(with "ignore_eos" in --extra), where the usage must also count --max-tokens tokens')
    send.add_argument('--cross-check', action='store_true',
                      help='after each streamed request, send the same body unstreamed (stream false) and compare '
                           'the answers; on chat and completions both ask for "return_token_ids": true, and when the '
                           'token ids agree a different answer is a failure at layer cross-check. Needs --temperature '
                           '0 or a "seed" in --extra')
    send.add_argument('--dialect', choices=tuple(DIALECTS), metavar='NAME',
                      help='the server\'s known departures from its vendor\'s protocol, each with the other proof '
                           'of completeness it needs: strict (the vendor rules, which vLLM follows), '
                           + ' or '.join(name for name in DIALECTS if name != 'strict') + '; without it the dialect '
                           'is detected from the response (docs/dialects.md)')
    send.add_argument('--header', action='append', metavar="'NAME: VALUE'",
                      help='a header sent on every request, repeatable (routing, tenant, session); not Host, '
                           'Content-Length, Transfer-Encoding, Connection or Authorization (the key comes from '
                           'MODEL_API_KEY). Only its name is ever saved or shown, never its value')
    send.add_argument('--idle', type=float, default=10.0, metavar='S',
                      help='seconds to wait for the next bytes (default 10)')
    send.add_argument('--deadline', type=float, default=60.0, metavar='S',
                      help='seconds one run may take (default 60)')
    send.add_argument('--ca-file', metavar='PEM', help='extra trusted CA certificates for https')
    send.add_argument('--no-proxy', action='store_true',
                      help='ignore HTTPS_PROXY, HTTP_PROXY and NO_PROXY: connect directly')
    load = parser.add_argument_group('many runs')
    load.add_argument('--runs', type=int, metavar='N', help='how many runs (default 1)')
    load.add_argument('--concurrency', type=int, metavar='C',
                      help='at most C runs in flight (default 1; under --rate, up to '
                           f'{_MAX_OPEN_LOOP_IN_FLIGHT})')
    load.add_argument('--rate', type=float, metavar='R',
                      help='start R runs per second whatever is in flight (an open loop; default: a closed loop)')
    load.add_argument('--processes', type=int, metavar='P',
                      help='spread the load\'s runs and its --concurrency over P forked worker processes '
                           '(default 1), so that at hundreds of streams the client\'s own work does not delay '
                           'the timestamps; this process still writes the one evidence file')
    sweep = parser.add_argument_group('goodput and sweeps (docs/goodput.md)')
    sweep.add_argument('--rates', metavar='R1,R2,...',
                      help='a sweep: one open-loop step per rate, each for --duration seconds, to find the rate '
                           'at which the server saturates (see --slo)')
    load.add_argument('--duration', type=float, metavar='S',
                      help='bound an open loop (--rate, or each step of --rates) by time instead of --runs')
    sweep.add_argument('--concurrencies', metavar='C1,C2,...',
                       help='a closed-loop sweep: one step of --runs runs per concurrency, to find the knee, the '
                            'highest concurrency whose goodput still grew by half as much as its concurrency did')
    sweep.add_argument('--find-capacity', metavar='LO:HI',
                       help='bisect on the open-loop rate between LO and HI runs/s, each probe a step of --duration '
                            'seconds, until the bracket is within 5%%: the capacity is the highest rate whose '
                            'probe met --slo-target (and started its runs on time)')
    sweep.add_argument('--slo', action='append', metavar='NAME=MS',
                      help='a bound a good run meets, repeatable: ' + ', '.join(_SLO_FIGURES) + '; goodput counts '
                           'the runs that are ok and within every bound')
    sweep.add_argument('--slo-target', type=float, metavar='F',
                      help=f'the attainment (good runs over all) a sweep step needs to count as under capacity '
                           f'(default {_DEFAULT_SLO_TARGET})')
    sweep.add_argument('--session-slo', action='append', metavar='NAME=MS',
                       help='with --sessions: a bound a good session meets, repeatable: total_ms (from its first '
                            'run\'s start to its last run\'s end); a good session also ended ok with every run '
                            'within --slo (docs/goodput.md#session-goodput)')
    load.add_argument('--cache-salt', choices=_SALT_CHOICES, default='off',
                      help='a marker before every prompt so that a prefix cache cannot serve a pass from an earlier '
                           'one: pass (one per load, --repeat, sweep step or command), session (one per session of '
                           '--sessions), off (default); ",vllm" also sends it as vLLM\'s cache_salt field '
                           '(docs/goodput.md#no-cache-that-flatters-a-replay)')
    load.add_argument('--arrivals', choices=_ARRIVALS, default='poisson',
                      help='how --rate spaces the starts (default poisson, seeded by --seed)')
    load.add_argument('--seed', type=int, default=0, help='seed of the arrivals and of --fixture mixed (default 0)')
    load.add_argument('--keep-alive', action='store_true',
                      help='each slot of --concurrency sends its next run on its kept connection while the '
                           'responses allow it '
                           '(needs --runs of 2 or more); a kept connection closed while idle is a failure counted '
                           'as stale_connection_failures')
    load.add_argument('--prompts', metavar='FILE',
                      help='JSON Lines of prompts, each a string or {"prompt", "system", "max_tokens"}; '
                           'the runs cycle through them')
    load.add_argument('--sessions', metavar='FILE',
                      help='multi-turn agent sessions: JSON Lines, one conversation per line ({"id", "turns", '
                           '"system", "tools", "tool_results", ...}), or a ShareGPT JSON array; each request is one '
                           'run, the history is what came back, a run not ok ends its session. --concurrency and '
                           '--rate count sessions, --runs caps them (docs/workloads.md)')
    load.add_argument('--trace', metavar='FILE',
                      help='replay a timed trace: JSON Lines of {"timestamp" (ms), "input_length", "output_length", '
                           '"hash_ids"} (Mooncake) or {"timestamp", "prompt"}; each request starts at its timestamp '
                           'whatever is in flight, and its record keeps how late it was (docs/workloads.md)')
    load.add_argument('--trace-speed', type=float, metavar='X',
                      help='with --trace: replay X times as fast (default 1)')
    load.add_argument('--block-size', type=int, metavar='N',
                      help='with --trace: tokens per hash_ids block (default 512, as in Mooncake)')
    load.add_argument('--input-tokens', metavar='MEAN[:SPREAD]',
                      help='synthetic prompts of MEAN tokens (each drawn from MEAN-SPREAD to MEAN+SPREAD, seeded by '
                           '--seed), met with the server\'s /tokenize where offered (docs/workloads.md)')
    load.add_argument('--output-tokens', metavar='MEAN[:SPREAD]',
                      help='each run\'s output budget drawn from MEAN-SPREAD to MEAN+SPREAD (seeded by --seed)')
    load.add_argument('--shared-prefix-tokens', metavar='N[:K]',
                      help='with --input-tokens: the first N tokens shared by all prompts, or by K groups of them')
    load.add_argument('--repeat', type=int, metavar='K',
                      help='run the same load K times, one after another (fresh seeds of the arrivals: --seed, '
                           '--seed + 1, ...; see --repeat-seeds); the summary gives each figure\'s spread across them')
    load.add_argument('--repeat-seeds', choices=('fresh', 'same'), default='fresh',
                      help='the arrivals\' seed of each --repeat: fresh (default) or the same --seed every time')
    load.add_argument('--warmup', metavar='N|Ss',
                      help='the first N runs of the load (or its first S seconds, as 5s) warm the server up: their '
                           'records are kept and marked "warmup": true, and left out of the summary and the gates')
    gate = parser.add_argument_group('gating a decision on the summary (docs/decisions.md)')
    gate.add_argument('--fail-if', action='append', metavar='EXPR',
                      help='exit 1 when EXPR, FIGURE OP NUMBER, is true of the summary, repeatable, e.g. '
                           '"first_text_ms.p99 > 500", "ok_ratio < 0.999", "error_kind.eof_before_done > 0", '
                           '"first_text_ms_all.p99 > 500" (a failed run infinitely late); '
                           'with a load or --summary FILE; without it, the gate is every run ok. With --compare '
                           'BASE CANDIDATE, "delta.FIGURE" reads a difference, in %% of the base with NUMBER%%')
    load.add_argument('--shard', metavar='I/N',
                      help='send shard I (from 0) of N of the load: the runs i with i %% N == I, at their planned '
                           'times, so that N processes (on N machines) send the one seeded load between them, '
                           'each writing its own evidence; --summary of the N files checks that none is '
                           'missing or given twice')
    load.add_argument('--start-at', metavar='UTC',
                      help='start the load\'s schedule at this UTC time (2026-12-01T23:50:00Z), so that the '
                           'shards start together')
    load.add_argument('--server-metrics', nargs='?', const='', metavar='URL',
                      help='scrape the server\'s Prometheus metrics during the load (at the start and end of each '
                           'step and every --metrics-interval seconds) on a thread of their own, keep every scrape '
                           'in OUTPUT-without-extension.server-metrics.jsonl, and summarize them per step; URL '
                           'defaults to /metrics at the origin of --url, where vLLM serves them')
    load.add_argument('--metrics-interval', type=float, metavar='S',
                      help='seconds between scrapes of --server-metrics (default 1)')
    live = parser.add_argument_group('the figures as OpenTelemetry GenAI metrics while the load runs '
                                     '(docs/formats.md)')
    live.add_argument('--metrics-port', type=int, metavar='PORT',
                      help='serve the load\'s figures for Prometheus at http://HOST:PORT/metrics during the whole '
                           'load, from a thread of its own (0: a free port, named on stderr)')
    live.add_argument('--metrics-host', metavar='HOST',
                      help='the address --metrics-port listens on (default 127.0.0.1: this host only)')
    live.add_argument('--otlp-json', metavar='FILE',
                      help='new file for the same metrics as OTLP/JSON, one ExportMetricsServiceRequest per line: '
                           'one every OTEL_METRIC_EXPORT_INTERVAL milliseconds (default 60000) and one at the end')
    live.add_argument('--otlp-endpoint', metavar='URL',
                      help='POST each of those exports to an OTLP/HTTP receiver (JSON; a bare origin gets '
                           '/v1/metrics), 5 s at most each; a failure is reported, never stops the load')
    out = parser.add_argument_group('where the evidence goes')
    out.add_argument('--output', metavar='FILE',
                     help='new file for the evidence (required): one JSON record, or with many runs one record '
                          'per line; an existing file is never overwritten')
    out.add_argument('--capture', metavar='FILE',
                     help='new file for the raw response of one run (status line, headers, body bytes as '
                          'received), for --replay in fixture_server.py and bug reports')
    out.add_argument('--report', metavar='FILE',
                     help='new file for an HTML page of the load (with --runs, or from --summary files): summary, '
                          'settings, a timeline of every run, distributions, errors; static, no script')
    out.add_argument('--csv', metavar='FILE',
                     help='new file for a CSV table of the load: a header, then one row per run of its flat figures '
                          '(verdict, timings, schedule, step), for spreadsheets and pandas')
    out.add_argument('--quiet', action='store_true',
                     help='nothing on stderr: no live text, verdict, progress or table (stdout keeps its JSON line)')
    fix = parser.add_argument_group('the built-in fixture')
    fix.add_argument('--fixture', metavar='MODE',
                     help=f'stream from the synthetic fixture ({_FIXTURE_FILE}, beside this file), run in this '
                          'process on a free loopback port. MODE is one of its modes: ok, broken, truncated, '
                          f'stall... (python3 {_FIXTURE_FILE} --help lists them). Slow on purpose: stall and '
                          'held-open last until --idle, drip until --deadline. mixed gives each run a mode from '
                          'a seeded schedule, for a demo of --runs')
    fix.add_argument('--fixture-profile', choices=_FIXTURE_PROFILES, default='guide',
                     help="the bytes --fixture speaks: the guide's fixture or vLLM 0.32's (default guide), or "
                          "a server beside vLLM in its own bytes: llama.cpp, tgi, sglang or ollama")
    read = parser.add_argument_group('reading saved evidence (nothing is sent)')
    read.add_argument('--compare', nargs='+', metavar='RECORD',
                      help='print saved records side by side; given two loads (JSON Lines files), BASE CANDIDATE: '
                           'their verdicts, each latency figure\'s p50, p90 and p99 with a bootstrap 95%% interval '
                           'of the difference (seeded by --seed), goodput and attainment; --fail-if can gate on a '
                           'difference, as "delta.first_text_ms.p99 > 10%%"')
    read.add_argument('--format', choices=('json', 'markdown', 'csv', 'benchmark-report'), default='json',
                      help='what stdout gets instead of the JSON line (json, the default): markdown, a table of '
                           '--compare of two loads for a pull-request comment; csv, the --summary as figure,value '
                           'rows; benchmark-report, the --summary as an llm-d Benchmark Report v0.2.1 (JSON)')
    read.add_argument('--summary', nargs='+', metavar='FILE',
                      help='the summary of saved runs (JSON Lines or single records), as a load prints it')
    read.add_argument('--mixed-sources', action='store_true',
                      help='let --compare and --summary mix records from the fixture, a replay and an endpoint')
    probe = parser.add_argument_group('monitoring: a Prometheus exporter (docs/exporter.md)')
    probe.add_argument('--exporter', metavar='HOST:PORT',
                       help='serve GET /probe?target=NAME, one run of that target per scrape as Prometheus '
                            'metrics, until SIGTERM; PORT alone binds 127.0.0.1, another address must be given '
                            'in full (0.0.0.0 exposes the probes to the network). Each record is appended to '
                            '--output (JSON Lines); --concurrency bounds the runs in flight (default '
                            f'{_DEFAULT_EXPORTER_IN_FLIGHT})')
    probe.add_argument('--targets', metavar='FILE',
                       help='JSON {"targets": {"NAME": {"url": ..., "model": ..., "api_key_env": ...}}}: each '
                            'target holds the settings of one run, keyed by the long flags\' names')
    parser.add_argument('--version', action='version', version=f'%(prog)s {__version__}')
    return parser


def _requests_from_args(args, url: str, key_env: str | None = 'MODEL_API_KEY',
                        served_model=None) -> list[PreparedRequest]:
    """The requests the command line asks for, sent to url (the fixture's, with --fixture): one,
    or one per line of --prompts; the API key is read from the environment variable key_env. Without
    --model, served_model(request) names the model (the command line asks the server: _served_model()),
    once every flag has been checked; without either, --model is required."""
    model = args.model or ('synthetic-fixture' if args.fixture is not None else None)
    if model is None and served_model is None:
        raise UsageError('--model is required (unless --fixture is used)')
    if args.prompts is None:
        prompts = [{'prompt': _prompt(args), 'system': args.system, 'max_tokens': args.max_tokens}]
    elif args.prompt is not None or args.prompt_file is not None:
        raise UsageError('--prompts replaces --prompt and --prompt-file; give only one of them')
    else:
        prompts = _load_prompts(args.prompts, args.system, args.max_tokens)
    extra = _extra(args)
    if args.cross_check and args.temperature != 0 and not _seeded(extra):
        raise UsageError(f'--cross-check needs a deterministic request: --temperature {args.temperature:g} without a '
                         '"seed" in --extra samples the two answers apart')
    tools, json_schema = _answer_files(args)
    if args.tool_choice is not None and tools is None:
        raise UsageError('--tool-choice needs --tools')
    def requests(model: str) -> list[PreparedRequest]:
        return [prepare(url, model, line['prompt'], max_tokens=line['max_tokens'], idle=args.idle,
                        deadline=args.deadline, ca_file=args.ca_file,
                        token=os.environ.get(key_env) if key_env else None, system=line['system'],
                        temperature=args.temperature, stop=args.stop, extra=extra, api=args.api,
                        expect_finish=args.expect_finish, source='endpoint' if args.fixture is None else 'fixture',
                        tools=tools, tool_choice=args.tool_choice, json_schema=json_schema,
                        trust_env=not args.no_proxy, cross_check=args.cross_check, dialect=args.dialect,
                        headers=[_parse_header(text) for text in args.header or ()])
                for line in prompts]
    if model is not None:
        return requests(model)
    return requests(served_model(requests('model-not-yet-known')[0]))  # every flag checked before the server is asked


_MAX_MODELS_NAMED = 10  # models of /v1/models the line that asks for --model names; it counts the rest


def _served_model(request: PreparedRequest) -> str:
    """The model to ask for when --model is not given: the one GET /v1/models lists, as vllm chat takes it,
    asked under the run's bounds (--idle, --deadline, the key, the proxy and TLS). UsageError, one line,
    when the server lists several models (naming them), none, or cannot be asked."""
    models = _models_request(request)
    asked = f'--model not given, and GET {models.url}'
    reader = _fetch_unstreamed(_Exchange(models))
    try:
        listed = json.loads(reader.content())
    except StreamError as exc:
        note = _unset_key_note(reader.head.status if reader.head is not None else None)
        raise UsageError(f'{asked} failed: {exc.message}{"; " + note if note else ""}; give --model') from None
    except ValueError:
        listed = None
    data = listed.get('data') if isinstance(listed, dict) else None
    if not isinstance(data, list) or not all(isinstance(item, dict) and isinstance(item.get('id'), str) and item['id']
                                             for item in data):
        raise UsageError(f'{asked} did not answer with a list of models ({{"data": [{{"id": ...}}]}}); give --model')
    names = list(dict.fromkeys(item['id'] for item in data))
    if len(names) == 1:
        return names[0]
    if not names:
        raise UsageError(f'{asked} lists no model; give --model')
    more = len(names) - _MAX_MODELS_NAMED
    listing = ', '.join(names[:_MAX_MODELS_NAMED]) + (f' and {more} more' if more > 0 else '')
    raise UsageError(f'{asked} lists {len(names)} models: {listing}; choose one with --model')


def _unset_key_note(status: int | None, key_env: str = 'MODEL_API_KEY') -> str | None:
    """What a 401 means when the key's variable is unset or empty: no key was sent. Names the variable,
    never a key or a header's value."""
    if status != 401 or os.environ.get(key_env):
        return None
    return (f'the server answered 401 Unauthorized and {key_env} is {"empty" if key_env in os.environ else "not set"}: '
            f'no API key was sent (export {key_env}, e.g. the key vllm serve --api-key was given)')


def _answer_files(args) -> tuple[list | None, dict | None]:
    """The --tools and --json-schema files, read; with a --fixture mode that needs them and none
    given, the fixture's own (its get_weather tool, its city schema)."""
    fixture = _fixture_server() if args.fixture is not None else None
    tools = _json_file(args.tools, '--tools') if args.tools is not None else \
        fixture.TOOLS if fixture and args.fixture in fixture.TOOL_MODES else None
    schema = _json_file(args.json_schema, '--json-schema') if args.json_schema is not None else \
        fixture.JSON_SCHEMA if fixture and args.fixture in fixture.JSON_MODES else None
    return tools, schema


def _unchecked_line(spec: AnswerSpec, shown: int = 4) -> str:
    """The schema keywords that are not checked, in one line (the record lists them all)."""
    unchecked = spec.unchecked()
    more = f' and {len(unchecked) - shown} more (see unchecked_schema_keywords)' if len(unchecked) > shown else ''
    return f'not checked against the schema: {"; ".join(unchecked[:shown])}{more}'


def _checked_line(spec: AnswerSpec, record: dict) -> str | None:
    """What a run checked against a schema and found matching: the JSON answer, or each tool call
    whose tool declares parameters; None when nothing was."""
    schemas = dict(spec.tools)
    calls = [f'tool call {call["index"]} ({call["name"]})' for call in record.get('tool_calls') or ()
             if schemas.get(call['name']) is not None and call['arguments_problem'] is None]
    if record['ok'] and record.get('answer_kind') == 'json' and spec.json_schema is not None:
        calls.append('the JSON answer')
    return f'checked against its schema, and matching: {", ".join(calls)}' if calls else None


def _json_file(path: str, flag: str) -> object:
    try:
        with open(path, encoding='utf-8') as file:
            return json.load(file)
    except OSError as exc:
        raise UsageError(f'cannot read {flag} {path!r}: {exc.strerror or exc}') from None
    except (ValueError, RecursionError) as exc:
        raise UsageError(f'{flag} {path!r} is not JSON: {exc}') from None


def _load_prompts(path: str, system: str | None, max_tokens: int) -> list[dict]:
    """The lines of a --prompts file: each a JSON string (the prompt) or an object with "prompt" and
    optionally "system" and "max_tokens" (which override the flags). UsageError names a bad line."""
    try:
        with open(path, encoding='utf-8') as file:
            lines = file.read().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f'cannot read --prompts {path}: {getattr(exc, "strerror", None) or exc}') from None
    prompts = []
    for number, line in enumerate(lines, 1):
        try:
            value = json.loads(line)
        except (ValueError, RecursionError):
            raise UsageError(f'--prompts {path} line {number}: not JSON') from None
        if isinstance(value, str):
            value = {'prompt': value}
        problem = _prompt_line_problem(value)
        if problem:
            raise UsageError(f'--prompts {path} line {number}: {problem}')
        prompts.append({'prompt': value['prompt'], 'system': value.get('system', system),
                        'max_tokens': value.get('max_tokens', max_tokens)})
    if not prompts:
        raise UsageError(f'--prompts {path} has no lines')
    return prompts


def _prompt_line_problem(value: object) -> str | None:
    if not isinstance(value, dict) or not isinstance(value.get('prompt'), str):
        return 'expected a JSON string, or an object with a string "prompt"'
    unknown = sorted(set(value) - {'prompt', 'system', 'max_tokens'})
    if unknown:
        return f'unknown keys {", ".join(unknown)}; a line may have prompt, system and max_tokens'
    if 'system' in value and not isinstance(value['system'], str):
        return '"system" must be a string'
    tokens = value.get('max_tokens', 1)
    if isinstance(tokens, bool) or not isinstance(tokens, int) or not 1 <= tokens <= 32768:
        return f'"max_tokens" must be an integer from 1 to 32768, got {tokens!r}'
    return None


def _prompt(args) -> str:
    if args.prompt_file is None:
        return _DEFAULT_PROMPT if args.prompt is None else args.prompt
    if args.prompt is not None:
        raise UsageError('--prompt and --prompt-file exclude each other')
    try:
        if args.prompt_file == '-':
            return sys.stdin.read()
        with open(args.prompt_file, encoding='utf-8') as prompt:
            return prompt.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f'cannot read --prompt-file {args.prompt_file}: {getattr(exc, "strerror", None) or exc}') \
            from None


def _extra(args) -> dict | None:
    if args.extra is None:
        return None
    try:
        return json.loads(args.extra)
    except (ValueError, RecursionError) as exc:
        raise UsageError(f'--extra is not valid JSON: {exc}') from None


def _cache_salt(args, sessions: bool = False) -> str:
    """--cache-salt, checked against the workload (session is for --sessions) and --extra; UsageError."""
    choice = args.cache_salt
    if choice.startswith('session') and not sessions:
        raise UsageError(f'--cache-salt {choice} gives each session its own marker: it is for --sessions; use pass')
    if choice.endswith(',vllm') and _SALT_FIELD in (_extra(args) or {}):
        raise UsageError(f'--cache-salt {choice} sends {_SALT_FIELD} itself: leave it out of --extra')
    return choice


def _terminate(signum, frame):
    raise Interrupted('SIGTERM')


class _Fixture:
    """The synthetic fixture on a free loopback port, for --fixture MODE: served from a thread of this
    process, or, with ``own_process``, from a process of its own, forked before any thread is started
    (a load spread over forked workers forks them later, and a thread alive at a fork can deadlock
    the child: Python 3.12 and later warn of it)."""

    def __init__(self, mode: str, profile: str, api: str, seed: int, own_process: bool = False) -> None:
        fixture = _fixture_server()
        mode = _fixture_mode(fixture, mode)
        if mode != fixture.MIXED and not fixture.applies(mode, api):
            raise UsageError(f'fixture mode {mode} applies to {_and_list(fixture.ONLY_ON[mode])} only; '
                             f'add --api {fixture.ONLY_ON[mode][0]}')
        self.instance = fixture.server(0, mode, profile=profile, seed=seed)
        path = next(path for path, name in _API_PATHS.items() if name == api)
        self.url = f'http://127.0.0.1:{self.instance.server_port}{path}'
        self.pid = os.fork() if own_process and hasattr(os, 'fork') else None
        if self.pid == 0:  # the fixture's process: serve until the one that started it ends it
            try:
                signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl+C is the load's to handle, not the server's
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                self.instance.serve_forever(0.05)
            finally:
                os._exit(0)
        if self.pid is not None:
            self.instance.server_close()  # the listening socket is the fixture process's now
        else:
            threading.Thread(target=self.instance.serve_forever, args=(0.05,), daemon=True).start()

    def close(self) -> None:
        if self.pid is not None:
            os.kill(self.pid, signal.SIGTERM)
            os.waitpid(self.pid, 0)
            return
        self.instance.shutdown()
        self.instance.server_close()


# What --compare and --summary take besides their files; every other flag is for a run.
_READING_FLAGS = {'compare': ('compare', 'quiet', 'mixed_sources', 'fail_if', 'format', 'seed', 'slo', 'slo_target'),
                 'summary': ('summary', 'report', 'quiet', 'mixed_sources', 'slo', 'slo_target', 'fail_if', 'format',
                             'session_slo')}
# prepare()'s and LoadSettings' parameters, by the flag a user typed.
_FLAG_OF_PARAMETER = {'max_tokens': '--max-tokens', 'idle': '--idle', 'deadline': '--deadline',
                     'temperature': '--temperature', 'stop': '--stop', 'extra': '--extra', 'model': '--model',
                     'runs': '--runs', 'concurrency': '--concurrency', 'rate': '--rate', 'tools': '--tools',
                     'processes': '--processes', 'header': '--header',
                     'tool_choice': '--tool-choice', 'json_schema': '--json-schema', 'cross_check': '--cross-check',
                     'dialect': '--dialect'}


def _given_flags(parser: argparse.ArgumentParser, args, allowed: tuple[str, ...]) -> list[str]:
    """The flags given (with a value other than their default) that are not among allowed."""
    return [action.option_strings[-1] for action in parser._actions
            if action.option_strings and action.dest not in allowed
            and getattr(args, action.dest, action.default) != action.default]


def _in_flag_terms(message: str) -> str:
    """A message from prepare() or LoadSettings with the parameter it starts with (tools[0] too)
    named as its flag."""
    name, bracket, rest = re.match(r'(\w*)(\[?)(.*)', message, re.S).groups()  # always matches
    return _FLAG_OF_PARAMETER.get(name, name) + bracket + rest


def _warmup(text: str | None) -> tuple[int, float | None]:
    """--warmup N (the first N runs) or Ss (the runs that start in the first S seconds), as (runs, seconds)."""
    if text is None:
        return 0, None
    try:
        value = float(text[:-1]) if text.endswith('s') else int(text)
    except ValueError:
        value = math.nan
    if not _positive_finite(value):
        raise UsageError(f'--warmup {text!r}: give a number of runs (5) or of seconds (5s), above 0')
    return (0, value) if text.endswith('s') else (value, None)
