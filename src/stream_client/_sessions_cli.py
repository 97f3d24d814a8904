"""--sessions FILE: multi-turn agent sessions from the command line.

``_plan_sessions()`` reads the file and prepares each session's request before
any file is created (a bad file is one line and exit 2); ``_session_load()``
runs them, writing each run's record as it ends, and prints the summary with
its ``sessions`` block.
"""
import dataclasses
import json
import os
import signal
import sys

from ._limits import _count, UsageError
from ._request import prepare, PreparedRequest
from ._exchange import Cancel
from ._load import LoadSettings
from ._summary import _parse_slos, Summary, _summary_table
from ._evidence import _ignore_signals, _SIGNAL_EXIT
from ._workloads import _parse_sessions, _Session
from ._sessions import _run_sessions, _SessionSummary
from ._args import _extra
from ._views import _verdict_line

# The flags that do not go with --sessions, and why (each session brings its own prompts and tools).
_NOT_WITH_SESSIONS = {'prompt': '--prompt', 'prompt_file': '--prompt-file', 'prompts': '--prompts', 'tools': '--tools',
                      'json_schema': '--json-schema', 'cross_check': '--cross-check', 'capture': '--capture',
                      'rates': '--rates', 'duration': '--duration', 'processes': '--processes',
                      'report': '--report'}
_SESSION_APIS = ('chat', 'messages', 'responses')


@dataclasses.dataclass(frozen=True)
class _SessionPlan:
    """The sessions to run (capped by --runs), each with its request prepared for its first turn."""

    sessions: list
    requests: list
    settings: LoadSettings


def _read_text(path: str) -> str:
    try:
        with open(path, encoding='utf-8') as file:
            return file.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f'cannot read --sessions {path}: {getattr(exc, "strerror", None) or exc}') from None


def _plan_sessions(args, url: str, key_env: str = 'MODEL_API_KEY') -> _SessionPlan:
    """The sessions the command line asks for, checked and prepared; UsageError before anything is sent."""
    given = [flag for dest, flag in _NOT_WITH_SESSIONS.items() if getattr(args, dest) not in (None, False)]
    if given:
        raise UsageError(f'--sessions does not go with {", ".join(given)}: each session brings its own turns '
                         'and tools')
    model = args.model or ('synthetic-fixture' if args.fixture is not None else None)
    if model is None:
        raise UsageError('--model is required (unless --fixture is used)')
    if args.runs is not None and args.runs < 1:
        raise UsageError(f'--runs must be at least 1, not {args.runs}')
    sessions = _parse_sessions(args.sessions, _read_text(args.sessions))[:args.runs]
    extra = _extra(args)
    requests = [_prepare_session(args, url, model, session, extra, key_env) for session in sessions]
    if requests[0].api not in _SESSION_APIS:
        raise UsageError(f'--sessions runs on {", ".join(_SESSION_APIS)}; {requests[0].api} has no tools and '
                         'no turns')
    settings = LoadSettings(len(sessions), args.concurrency, args.rate, args.arrivals, args.seed, args.keep_alive,
                            slos=_parse_slos(args.slo or []), slo_target=args.slo_target)
    return _SessionPlan(sessions, requests, settings)


def _prepare_session(args, url: str, model: str, session: _Session, extra: dict | None,
                     key_env: str) -> PreparedRequest:
    try:
        return prepare(url, model, session.turns[0], max_tokens=args.max_tokens, idle=args.idle,
                       deadline=args.deadline, ca_file=args.ca_file, token=os.environ.get(key_env),
                       system=session.system if session.system is not None else args.system,
                       temperature=args.temperature, stop=args.stop, extra=extra, api=args.api,
                       expect_finish=args.expect_finish, source='endpoint' if args.fixture is None else 'fixture',
                       tools=session.tools, tool_choice=args.tool_choice if session.tools else None,
                       trust_env=not args.no_proxy)
    except ValueError as exc:
        raise UsageError(f'{session.where}: {exc}') from None


def _session_load(args, plan: _SessionPlan, fd: int, prog: str) -> int:
    """Run the sessions, appending each run's record to the reserved JSON Lines file as it ends; print the
    summary (its sessions block too); return the exit status: 0 when every session is ok. SIGINT and
    SIGTERM cancel: no session starts, the runs in flight end as interrupted."""
    summary, sessions, cancel = Summary(plan.settings.slos, plan.settings.slo_target), _SessionSummary(), Cancel()
    write_error: list[OSError] = []
    quiet = args.quiet

    def on_record(record: dict) -> None:
        try:
            output.write(json.dumps(record, ensure_ascii=False) + '\n')
            output.flush()
        except OSError as exc:
            write_error.append(exc)
            cancel.cancel('a failed write to the evidence file')
        summary.add(record)
        sessions.add(record)
        if not quiet and not record['ok']:
            sys.stderr.write(f'session {record["session"]} turn {record["turn"]} round {record["round"]}: '
                             f'{_verdict_line(record)}\n')
            sys.stderr.flush()

    def on_signal(signum, frame) -> None:
        cancel.cancel(signal.Signals(signum).name)
    with os.fdopen(fd, 'w', encoding='utf-8') as output:
        signal.signal(signal.SIGINT, on_signal)
        signal.signal(signal.SIGTERM, on_signal)
        _run_sessions(plan.sessions, plan.requests, plan.settings, on_record, cancel)
    _ignore_signals()
    result = {**summary.result(), 'sessions': sessions.result()}
    if not quiet and sys.stderr.isatty():
        print(_summary_table(result) + '\n' + _sessions_table(result['sessions']), file=sys.stderr)
    elif not quiet:
        print(_sessions_table(result['sessions']), file=sys.stderr)
    try:
        print(json.dumps(result, ensure_ascii=False), flush=True)
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    if write_error:
        print(f'{prog}: error: cannot write {args.output}: {write_error[0].strerror or write_error[0]}',
              file=sys.stderr)
        return 2
    if cancel.reason in _SIGNAL_EXIT:
        return _SIGNAL_EXIT[cancel.reason]
    done = result['sessions']
    return 0 if done['sessions'] == plan.settings.runs and done['ok'] == done['sessions'] else 1


def _sessions_table(result: dict) -> str:
    """The sessions block for a person: the counts, then per turn index the p50 times."""
    kinds = ', '.join(f'{kind} {count}' for kind, count in result['not_ok_by_kind'].items())
    lines = [f'{_count(result["sessions"], "session")}: ok {result["ok"]}, not ok {result["not_ok"]}'
             + (f' ({kinds})' if kinds else ''),
             f'turns {result["turns"]} (not started {result["turns_not_started"]}), tool rounds '
             f'{result["tool_rounds"]}, runs {result["runs"]}']
    for index, row in result['latency_by_turn_ms'].items():
        first, whole = row['first_text_ms'], row['turn_ms']
        lines.append(f'  turn {index:>3}: {row["turns"]} ok, p50 first text '
                     + ('-' if first is None else f'{first["p50"]:.0f} ms')
                     + ', p50 turn ' + ('-' if whole is None else f'{whole["p50"]:.0f} ms'))
    return '\n'.join(lines)
