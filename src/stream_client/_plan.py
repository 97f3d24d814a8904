"""A load's plan, and one plan sent by many processes: ``--shard I/N`` and ``--start-at``.

A load's plan is what its seed and flags fix before anything is sent: how many runs, the arrival of
each (seeded), and the request of each (run i sends the prompt i % len(--prompts)). ``_plan_id()``
names it by a hash of exactly that, so that N processes on N machines, given the same flags, name the
same plan without talking to each other. ``--shard I/N`` makes a process send the runs i with
i % N == I, at their planned times from the shared ``--start-at``, and write its own evidence; every
record carries the plan's id and its shard (``load.plan``). ``_ShardCheck`` reads the records of many
files and says which shard of a plan is missing or given twice, ``_LoadCheck`` which runs or sessions a
load planned have no record.
"""
import calendar
import datetime
import dataclasses
import hashlib
import json
import re

from ._limits import UsageError
from ._record import _utc_iso

_MAX_SHARDS = 4096
_START_AT = re.compile(r'(\d{4})-(\d\d)-(\d\d)[T ](\d\d):(\d\d):(\d\d)(\.\d{1,6})?(Z|\+00:00)')
_START_AT_AHEAD_S = 86_400  # --start-at at most a day ahead
_START_AT_BEHIND_S = 3_600  # ... and at most an hour behind: later, every run would be due at once


def _parse_shard(text: str) -> tuple[int, int]:
    """--shard I/N as (I, N), 0 <= I < N; UsageError otherwise."""
    index, slash, count = text.partition('/')
    if not (slash and index.isdigit() and count.isdigit()) or not 0 <= int(index) < int(count) <= _MAX_SHARDS:
        raise UsageError(f'--shard {text!r}: expected I/N, the shard I (from 0) of N shards, 0 <= I < N <= '
                         f'{_MAX_SHARDS}, e.g. 0/4')
    return int(index), int(count)


def _parse_start_at(text: str, now: float) -> float:
    """--start-at as seconds since the epoch: a UTC time (2026-12-01T23:50:00Z), within a day ahead of now
    and an hour behind it; UsageError otherwise."""
    match = _START_AT.fullmatch(text.strip())
    if match is None:
        raise UsageError(f'--start-at {text!r}: expected a UTC time such as 2026-12-01T23:50:00Z (the Z, or '
                         '+00:00, is required)')
    year, month, day, hour, minute, second = (int(part) for part in match.groups()[:6])
    try:
        datetime.datetime(year, month, day, hour, minute, second)
    except ValueError:
        raise UsageError(f'--start-at {text!r} is not a valid date and time') from None
    at = calendar.timegm((year, month, day, hour, minute, second)) + float(match[7] or 0)
    if at > now + _START_AT_AHEAD_S:
        raise UsageError(f'--start-at {text!r} is more than a day ahead of this machine\'s clock '
                         f'({_utc_iso(now)})')
    if at < now - _START_AT_BEHIND_S:
        raise UsageError(f'--start-at {text!r} is more than an hour past by this machine\'s clock '
                         f'({_utc_iso(now)}): every run would be due at once')
    return at


def _plan_id(requests, described: dict, shards: int, start_at: float | None) -> str:
    """The id of a load's plan: a hash of what fixes its runs (the load's settings but the processes,
    each request as the record describes it, where it goes unless that is the built-in fixture on a
    port of its own, the number of shards and the start), the same in every process given the same flags."""
    plan = {'load': {key: value for key, value in described.items() if key != 'processes'},
            'requests': [[request.api, request.model, request.source, request.path, request.settings,
                          None if request.source == 'fixture' else request.url] for request in requests],
            'shards': shards, 'start_at': start_at}
    return hashlib.sha256(json.dumps(plan, sort_keys=True, separators=(',', ':')).encode()).hexdigest()[:16]


def _session_key(record: dict):
    """Which session of its load a session's record belongs to: its session_index (the session's number in
    the plan: one session file may be run more than once in a load) or, in evidence written before there
    was one, its session id."""
    return record.get('session_index', record['session'])


def _run_key(record: dict):
    """What names a run within its plan, whichever shard sent it: a load's or a trace's run number, or a
    session's run by its session, turn and round (a shard numbers its sessions' runs as it writes them)."""
    if 'session' in record:
        return _session_key(record), record['turn'], record['round']
    return record['run']


def _shard_runs(runs: int, shard: tuple[int, int]) -> int:
    """How many of a plan's runs shard (I, N) sends: the runs i < runs with i % N == I."""
    index, count = shard
    return max(0, (runs - index + count - 1) // count)


class _ShardCheck:
    """The shards of each plan seen in records read one by one: which are missing or given twice."""

    def __init__(self) -> None:
        self.plans: dict[str, dict] = {}  # plan id: its shard count, the shards seen, the runs seen

    def add(self, record: dict) -> None:
        plan = (record.get('load') or {}).get('plan')
        if not plan or plan['shards'] == 1:
            return
        seen = self.plans.setdefault(plan['id'], {'shards': plan['shards'], 'seen': set(), 'runs': set()})
        shard = f'shard {plan["shard"]}/{plan["shards"]} of plan {plan["id"]}'
        key = _run_key(record)
        if key in seen['runs']:
            raise UsageError(f'{shard} is given twice (run {record["run"]} appears twice): give each shard\'s '
                             'file once')
        seen['runs'].add(key)
        seen['seen'].add(plan['shard'])

    def check(self) -> None:
        """UsageError naming the first shard missing from a plan whose other shards were read."""
        for plan, seen in sorted(self.plans.items()):
            missing = [index for index in range(seen['shards']) if index not in seen['seen']]
            if missing:
                named = ', '.join(f'{index}/{seen["shards"]}' for index in missing)
                raise UsageError(f'plan {plan}: shard{"s" if len(missing) > 1 else ""} {named} missing: no '
                                 f'record of {"them" if len(missing) > 1 else "it"} in these files (each shard '
                                 'writes its own evidence file; give them all)')


class _LoadCheck:
    """What each load planned, against the records read: its ``load.runs`` runs (a load, a trace, a shard's
    share), or for --sessions its ``load.sessions`` sessions, each ending on a record with ``session_end``,
    and its runs, numbered from 0 as they were written. ``missing()`` says what has no record, so that no
    summary calls a file ok that lacks a planned run or session."""

    def __init__(self) -> None:
        self.loads: dict[str, dict] = {}  # load id: what it planned, the records seen, the sessions seen and ended
        self.repeated: str | None = None  # the first run number seen twice in one load

    def add(self, record: dict) -> None:
        load = record.get('load')
        if not isinstance(load, dict) or load.get('id') is None:
            return
        seen = self.loads.get(load['id'])
        if seen is None:
            seen = self.loads[load['id']] = {'runs': load.get('runs'), 'sessions': load.get('sessions'),
                                             'records': 0, 'last_run': -1, 'sessions_seen': {}, 'ended': set(),
                                             'numbers': set()}
        seen['records'] += 1
        if record.get('run') is not None:
            if record['run'] in seen['numbers'] and self.repeated is None:
                self.repeated = f'load {load["id"]}: run {record["run"]} appears twice'
            seen['numbers'].add(record['run'])
            seen['last_run'] = max(seen['last_run'], record['run'])
        if 'session' in record:
            seen['sessions_seen'][_session_key(record)] = record['session']  # its key: the session's id
            if record.get('session_end') is not None:
                seen['ended'].add(_session_key(record))

    def check(self) -> None:
        """UsageError when a load's run appears twice: a file given twice, or a record repeated, would count
        its runs twice (a shard given twice is _ShardCheck's)."""
        if self.repeated is not None:
            raise UsageError(f'{self.repeated} (a file given twice, or a record repeated): give each load\'s '
                             'file once')

    def missing(self) -> list[str]:
        """What each load that is not whole lacks, one phrase per load: 'load ID: 1 of 200 planned runs has
        no record'; empty when every load is whole."""
        phrases = []
        for load, seen in sorted(self.loads.items()):
            lacks = []
            if seen['runs'] is not None and seen['records'] < seen['runs']:
                lacks.append(f'{_of(seen["runs"] - seen["records"], seen["runs"], "run")} no record')
            if seen['sessions'] is not None:
                if len(seen['sessions_seen']) < seen['sessions']:
                    lacks.append(f'{_of(seen["sessions"] - len(seen["sessions_seen"]), seen["sessions"], "session")}'
                                 ' no record')
                unended = sorted(str(name) for key, name in seen['sessions_seen'].items() if key not in seen['ended'])
                if unended:
                    named = ', '.join(unended[:3]) + (f' and {len(unended) - 3} more' if len(unended) > 3 else '')
                    lacks.append(f'session{"s" * (len(unended) > 1)} {named} '
                                 f'{"have" if len(unended) > 1 else "has"} no last record (session_end)')
                gap = seen['last_run'] + 1 - seen['records']
                if gap > 0:  # a session load numbers its runs from 0 as it writes them
                    lacks.append(f'{gap} of its runs numbered 0 to {seen["last_run"]} '
                                 f'{"has" if gap == 1 else "have"} no record')
            if lacks:
                phrases.append(f'load {load}: ' + ', '.join(lacks))
        return phrases


def _of(count: int, planned: int, noun: str) -> str:
    """'1 of 4 planned runs has', '2 of 4 planned sessions have'."""
    return f'{count} of {planned} planned {noun}s {"has" if count == 1 else "have"}'


def _planned_steps(args, steps: list | None, now: float, unit: str = 'run') -> list | None:
    """The load's steps with --shard and --start-at (read against now, the machine's clock in seconds since
    the epoch) applied (dataclasses.replace on each LoadSettings); UsageError for a combination they do not
    go with. --shard goes with --repeat (each pass is a plan of its own, sharded the same way); --start-at
    starts one pass, and neither goes with a sweep or a search. unit: what the workload plans (run,
    session, line), for the messages."""
    if args.shard is None and args.start_at is None:
        return steps
    flags = ' and '.join(flag for flag, value in (('--shard', args.shard), ('--start-at', args.start_at)) if value)
    verb = 'do' if ' and ' in flags else 'does'
    if steps is None:
        raise UsageError(f'{flags} {"are" if " and " in flags else "is"} for a load: give --runs, or --rate '
                         'with --duration')
    sweep = next((flag for flag, value in (('--rates', args.rates), ('--concurrencies', args.concurrencies),
                                            ('--find-capacity', args.find_capacity)) if value is not None), None)
    if sweep is not None or not isinstance(steps, list):
        raise UsageError(f'{flags} {verb} not go with {sweep or "a search"}: shard a load of one rate (--rate with '
                         '--runs or --duration)')
    if args.start_at is not None and len(steps) > 1:
        raise UsageError('--start-at starts one pass: with --repeat every pass after the first would be due at '
                         'once; shard the repeats without it')
    shard = (0, 1) if args.shard is None else _parse_shard(args.shard)
    start_at = None if args.start_at is None else _parse_start_at(args.start_at, now)
    if _shard_runs(steps[0].runs, shard) == 0:
        raise UsageError(f'--shard {args.shard}: the load plans {steps[0].runs} {unit}{"s" * (steps[0].runs != 1)}, '
                         f'so shard {shard[0]} would send none; use fewer shards')
    return [dataclasses.replace(step, shard=shard, start_at=start_at) for step in steps]
