"""--sessions FILE and --trace FILE from the command line.

``_plan_workload()`` reads the file and prepares every request before any file
is created (a bad file is one line and exit 2), and returns a ``_Workload``
whose ``run()`` writes each run's record as it ends and prints the summary
with its ``sessions`` or ``trace`` block.
"""
import dataclasses
import os
import time

from ._limits import UsageError
from ._request import _positive_finite, prepare, PreparedRequest
from ._exchange import Cancel
from ._load import LoadSettings, _MAX_OPEN_LOOP_IN_FLIGHT
from ._plan import _parse_shard, _planned_steps, _shard_runs
from ._gates import _SCHEDULE_FIELDS
from ._summary import _parse_slos
from ._evidence import iter_records
from ._workloads import (
    _mean_spread, _MAX_TRACE_TOKENS, _parse_sessions, _parse_trace, _Session, _Synthetic, _synthetic_words)
from ._sessions import _run_sessions
from ._session_summary import _SessionSummary
from ._trace import _fitted, _run_trace, _Tokenizer, _trace_prompts, _TraceSummary
from ._headers import _parse_header
from ._args import _answer_files, _extra, _prompt, _warmup
from ._steps import _load_settings, _pass_fields, _repeated, _slo_target
from ._engine import _Workload

_SESSION_APIS = ('chat', 'messages', 'responses')


def _read_text(path: str, flag: str) -> str:
    try:
        with open(path, encoding='utf-8') as file:
            return file.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f'cannot read {flag} {path}: {getattr(exc, "strerror", None) or exc}') from None


def _plan_workload(args, url: str, key_env: str = 'MODEL_API_KEY') -> _Workload | None:
    """The --sessions or --trace workload, read and prepared; None when neither is given. The flags each
    does not honour were refused before (_check_workload_flags())."""
    if args.sessions is None and args.trace is None:
        return None
    return _plan_sessions(args, url, key_env) if args.sessions is not None else _plan_trace(args, url, key_env)


def _plan_sessions(args, url: str, key_env: str) -> _Workload:
    """The sessions the command line asks for, checked and prepared; UsageError before anything is sent."""
    model = args.model or ('synthetic-fixture' if args.fixture is not None else None)
    if model is None:
        raise UsageError('--model is required (unless --fixture is used)')
    if args.runs is not None and args.runs < 1:
        raise UsageError(f'--runs must be at least 1, not {args.runs}')
    parsed = _parse_sessions(args.sessions, _read_text(args.sessions, '--sessions'))
    sessions = [session if session.system is not None or args.system is None else  # --system where it has none
                dataclasses.replace(session, system=args.system) for session in parsed[:args.runs]]
    scheduled = [name for name, _ in _parse_slos(args.slo or []) if name in _SCHEDULE_FIELDS]
    if scheduled:
        raise UsageError(f'--slo {scheduled[0]} counts from the schedule, and a session\'s later runs follow the '
                         'run before them, not the schedule: bound first_text_ms or duration_ms')
    if args.tool_choice is not None and not any(session.tools for session in sessions):
        raise UsageError(f'--tool-choice needs tools, and no session of --sessions {args.sessions} brings "tools"')
    extra = _extra(args)
    outputs = _mean_spread(args.output_tokens, '--output-tokens', 1, 32768) if args.output_tokens else None
    budgets = [budget or args.max_tokens for _, budget, _ in _Synthetic(output_tokens=outputs).plan(len(sessions),
                                                                                                  args.seed)]
    requests = [_prepare_session(args, url, model, session, extra, key_env, budget)
                for session, budget in zip(sessions, budgets)]
    if requests[0].api not in _SESSION_APIS:
        raise UsageError(f'--sessions runs on {", ".join(_SESSION_APIS)}; {requests[0].api} has no tools and '
                         'no turns')
    units = len(parsed) if args.runs is None else args.runs  # --runs N: N sessions, the file's first N or cycled
    steps = _planned_steps(args, _repeated(args, _load_settings(args, units)), time.time(), 'session')

    def run(settings: LoadSettings, on_record, cancel: Cancel, on_started=None, on_run=None) -> None:
        _run_sessions(sessions, requests, settings, on_record, cancel, on_started=on_started, on_run=on_run)
    return _Workload(requests, steps, run, _SessionSummary, 'sessions')


def _prepare_session(args, url: str, model: str, session: _Session, extra: dict | None,
                     key_env: str, max_tokens: int) -> PreparedRequest:
    """The session's first request, with max_tokens (--max-tokens, or the session's --output-tokens draw) the
    budget of each of its runs."""
    try:
        return prepare(url, model, session.turns[0], max_tokens=max_tokens, idle=args.idle,
                       deadline=args.deadline, ca_file=args.ca_file, token=os.environ.get(key_env),
                       system=session.system,
                       temperature=args.temperature, stop=args.stop, extra=extra, api=args.api,
                       expect_finish=args.expect_finish, source='endpoint' if args.fixture is None else 'fixture',
                       tools=session.tools, tool_choice=args.tool_choice if session.tools else None,
                       trust_env=not args.no_proxy, dialect=args.dialect, cross_check=args.cross_check,
                       headers=[_parse_header(text) for text in args.header or ()])
    except ValueError as exc:
        raise UsageError(f'{session.where}: {exc}') from None


_DEFAULT_BLOCK_SIZE = 512  # tokens per hash_ids block, as in Mooncake's traces


def _plan_trace(args, url: str, key_env: str) -> _Workload:
    """The --trace file read, every prompt built (its length met with the server's /tokenize when it offers
    one), every request prepared; UsageError before anything is created."""
    speed = 1.0 if args.trace_speed is None else args.trace_speed
    if not _positive_finite(speed):
        raise UsageError(f'--trace-speed must be a positive number, not {speed}')
    block_size = _DEFAULT_BLOCK_SIZE if args.block_size is None else args.block_size
    if not 1 <= block_size <= 65536:
        raise UsageError(f'--block-size must be a whole number of tokens from 1 to 65536, not {block_size}')
    if args.runs is not None and args.runs < 1:
        raise UsageError(f'--runs must be at least 1, not {args.runs}')
    if args.concurrency is not None and args.concurrency < 1:
        raise UsageError(f'--concurrency must be at least 1, not {args.concurrency}')
    model = args.model or ('synthetic-fixture' if args.fixture is not None else None)
    if model is None:
        raise UsageError('--model is required (unless --fixture is used)')
    lines = _parse_trace(args.trace, _read_text(args.trace, '--trace'))[:args.runs]
    if args.shard is not None and _shard_runs(len(lines), _parse_shard(args.shard)) == 0:
        raise UsageError(f'--shard {args.shard}: the trace has {len(lines)} lines, so shard '
                         f'{args.shard.partition("/")[0]} would send none; use fewer shards')
    warmup_runs, warmup_s = _warmup(args.warmup)
    if warmup_runs >= len(lines):
        raise UsageError(f'--warmup {args.warmup} leaves no line of the {len(lines)} to summarise: the warm-up runs '
                         'are left out of every figure')
    base = LoadSettings(len(lines), min(len(lines), args.concurrency or _MAX_OPEN_LOOP_IN_FLIGHT),
                        keep_alive=args.keep_alive, slos=_parse_slos(args.slo or []), slo_target=_slo_target(args),
                        processes=1 if args.processes is None else args.processes, warmup_runs=warmup_runs,
                        warmup_s=warmup_s, **_pass_fields(args))
    steps = _planned_steps(args, _repeated(args, [base]), time.time(), 'line')
    prepared = _preparer(args, url, model, key_env)
    tokenizer = _Tokenizer(prepared('x', args.max_tokens))
    prompts = _trace_prompts(lines, tokenizer, block_size)
    requests = [prepared(prompt, line.output_length or args.max_tokens) for line, (prompt, _) in zip(lines, prompts)]
    facts = [{'input_length': line.input_length, 'output_length': line.output_length, 'hash_ids': list(line.hash_ids),
              'block_size': block_size if line.prompt is None else None, 'prompt_tokens_counted': counted,
              'length_by': 'prompt' if line.prompt is not None else 'tokenize' if counted is not None
              else 'approximation'}
             for line, (_, counted) in zip(lines, prompts)]

    def run(settings: LoadSettings, on_record, cancel: Cancel, on_started=None, on_run=None) -> None:
        _run_trace(lines, requests, facts, speed, settings, on_record, cancel, on_started=on_started, on_run=on_run)
    return _Workload(requests, steps, run, lambda: _TraceSummary(speed), 'trace')


def _preparer(args, url: str, model: str, key_env: str):
    """prepare() with the command line's settings: a function of the prompt and the output budget. A
    ValueError it raises names its parameter, which main() turns into the flag's name."""
    extra, (tools, json_schema) = _extra(args), _answer_files(args)

    def prepared(prompt: str, max_tokens: int) -> PreparedRequest:
        return prepare(url, model, prompt, max_tokens=max_tokens, idle=args.idle, deadline=args.deadline,
                       ca_file=args.ca_file, token=os.environ.get(key_env), system=args.system,
                       temperature=args.temperature, stop=args.stop, extra=extra, api=args.api,
                       expect_finish=args.expect_finish, source='endpoint' if args.fixture is None else 'fixture',
                       tools=tools, tool_choice=args.tool_choice, json_schema=json_schema,
                       trust_env=not args.no_proxy, cross_check=args.cross_check, dialect=args.dialect,
                       headers=[_parse_header(text) for text in args.header or ()])
    return prepared


_MAX_SYNTHETIC_PROMPTS = 10_000  # distinct prompts of a synthetic load at most; its runs cycle through them


def _synthetic_requests(args, url: str, count: int, key_env: str = 'MODEL_API_KEY') -> list[PreparedRequest] | None:
    """The requests of --input-tokens, --output-tokens and --shared-prefix-tokens, one per run (up to
    _MAX_SYNTHETIC_PROMPTS, then cycled), drawn with --seed; None when none of them is given. Each request's
    settings (the record's request) say what was asked: input_tokens, shared_prefix_tokens, prefix_group,
    prompt_tokens_counted (by the server's /tokenize, where offered) and length_by."""
    if args.input_tokens is None and args.output_tokens is None and args.shared_prefix_tokens is None:
        return None
    given = ['--prompts'] if args.prompts is not None else []  # --sessions and --trace: _FLAG_TABLE
    if args.input_tokens is not None:
        given += [flag for dest, flag in (('prompt', '--prompt'), ('prompt_file', '--prompt-file'))
                  if getattr(args, dest) is not None]
    if given:
        raise UsageError(f'--input-tokens, --output-tokens and --shared-prefix-tokens make the prompts; they do not '
                         f'go with {", ".join(given)}')
    if args.shared_prefix_tokens is not None and args.input_tokens is None:
        raise UsageError('--shared-prefix-tokens needs --input-tokens: the prompt\'s length, prefix included')
    inputs = _mean_spread(args.input_tokens, '--input-tokens', 1, _MAX_TRACE_TOKENS) if args.input_tokens else None
    outputs = _mean_spread(args.output_tokens, '--output-tokens', 1, 32768) if args.output_tokens else None
    prefix, groups = _mean_spread(args.shared_prefix_tokens, '--shared-prefix-tokens', 1, _MAX_TRACE_TOKENS) \
        if args.shared_prefix_tokens else (0, 1)
    if prefix and inputs[0] - inputs[1] <= prefix:
        raise UsageError(f'--shared-prefix-tokens {prefix} leaves no tokens of their own to prompts of '
                         f'{inputs[0] - inputs[1]} (--input-tokens counts the prefix too)')
    synthetic = _Synthetic(inputs, outputs, prefix, max(groups, 1))
    model = args.model or ('synthetic-fixture' if args.fixture is not None else None)
    if model is None:
        raise UsageError('--model is required (unless --fixture is used)')
    prepared = _preparer(args, url, model, key_env)
    tokenizer = _Tokenizer(prepared('x', args.max_tokens)) if inputs else None
    requests = []
    for run, (length, budget, group) in enumerate(synthetic.plan(min(count, _MAX_SYNTHETIC_PROMPTS), args.seed)):
        if length is None:
            prompt, counted = _prompt(args), None
        else:
            prompt, counted = _fitted(tokenizer, length, lambda words, run=run, group=group: ' '.join(
                _synthetic_words(words, run, args.seed, prefix, group)))
        request = prepared(prompt, budget or args.max_tokens)
        requests.append(dataclasses.replace(request, settings={
            **request.settings, 'input_tokens': length, 'shared_prefix_tokens': prefix or None, 'prefix_group': group,
            'prompt_tokens_counted': counted,
            'length_by': None if length is None else 'tokenize' if counted is not None else 'approximation'}))
    return requests


def _workload_blocks(paths: list[str], slos: tuple | None = None, session_slos: tuple | None = None) -> dict:
    """The sessions and trace blocks of saved evidence, for --summary: each recomputed from the records,
    as the load printed it (the sessions judged by slos and session_slos when given, else by their
    loads'); none for files without such runs."""
    sessions, trace = _SessionSummary(slos, session_slos), None
    for path in paths:
        for record in iter_records(path, []):  # a line that is not JSON: left out here as in the summary
            sessions.add(record)
            if 'trace' in record:
                trace = trace or _TraceSummary((record.get('load') or {}).get('trace_speed'))
                trace.add(record)
    return {**({'sessions': sessions.result()} if sessions.runs else {}),
            **({'trace': trace.result()} if trace is not None else {})}
