"""Multi-turn agent sessions: each request one strict run, the history exactly what came back.

``_run_sessions()`` runs the sessions of a --sessions file as a load (sessions
in flight, sessions started per second); within a session, one run after
another: the user turn, then while the answer is tool calls that ran ok, their
results and the next round. A run that is not ok ends its session; its record
says which turns were not started, and why. ``_SessionSummary`` counts the
sessions, turns, tool rounds and the latency per turn index, from the records
alone.
"""
import collections
import dataclasses
import hashlib
import html
import json

from ._limits import _count
from ._json import _json_text
from ._request import _render_request, PreparedRequest, _unstreamed_twin
from ._exchange import Cancel
from ._record import _client_failure
from ._plan import _session_key, _shard_runs
from ._load import (
    _Clock, arrival_offsets, _load_description, LoadSettings, _REAL_CLOCK, _run_scheduled, _run_shares, _slots,
    _started)
from ._summary import _percentiles
from ._workloads import _Conversation, _Session, _ToolResults


def _with_conversation(request: PreparedRequest, conversation: _Conversation) -> PreparedRequest:
    """The session's prepared request with the conversation as it stands as its body's history (the
    record's prompt_sha256 is then that of the history's JSON), and its unstreamed twin (--cross-check) the same."""
    fields = conversation.body_fields()
    body = {**json.loads(request.body), **fields}
    data = _json_text(body).encode()  # a surrogate pair streamed in halves goes back as the escapes it came as
    history = _json_text(fields, sort_keys=True).encode()
    turn = dataclasses.replace(request, body=data,
                               wire=_render_request(request.scheme, request.host, request.port, request.path,
                                                    request.headers, data),
                               settings={**request.settings, 'prompt_sha256': hashlib.sha256(history).hexdigest()})
    return turn if request.twin is None else dataclasses.replace(turn, twin=_unstreamed_twin(turn, body))


def _sessions_digest(sessions: list[_Session]) -> str:
    """A hash of everything the sessions send and answer (turns, system, tools, tool results, rounds, think
    times), so that a plan's id tells two session files apart whose first turns are the same."""
    fields = [{**dataclasses.asdict(session), 'where': None} for session in sessions]
    return hashlib.sha256(_json_text(fields, sort_keys=True).encode()).hexdigest()


def _answer_calls(record: dict) -> list[tuple[str, str, str]]:
    """The calls of an ok run, (id, name, arguments) as streamed."""
    return [(call['id'] or f'call_{call["index"]}', call['name'], call['arguments']) for call in record['tool_calls']]


class _SessionRun:
    """One session's runs, in order, as a job of the engine (see _load._run_scheduled): steps() yields each
    run's request and each think time; emit(record) is called for each run, the session's last one carrying
    ``session_end`` (held back until the session knows it is the last)."""

    def __init__(self, session: _Session, request: PreparedRequest, cancel: Cancel, emit, started: float,
                 queued_ms: float | None, clock: _Clock = _REAL_CLOCK) -> None:
        self.session, self.request, self.cancel, self.emit = session, request, cancel, emit
        self.clock = clock           # what offsets are read from
        self.started = started       # the load's start (on the clock), which offset_ms counts from
        self.queued_ms = queued_ms   # how late the session started (open loop), kept by its first record
        self.pending: dict | None = None
        self.tool_rounds = 0

    def steps(self):
        """The session's runs and think times, then its end. An exception of this client's own between two runs
        (taking an answer into the history) ends the session there, not ok (client_error), its records kept."""
        try:
            ended = yield from self._turns()
        except Exception as exc:  # a bug in this client: the session still ends, with every record it has
            if self.pending is None:  # raised by emit(), the load's writer: not the session's to record
                raise
            turn, round_ = self.pending['turn'], self.pending['round']
            ended = (turn, 'client_error', f'turn {turn} round {round_}: the client failed after the run: '
                                           f'{type(exc).__name__}: {exc}')
        self._end(*ended)

    def _turns(self) -> tuple[int, str | None, str | None]:
        """Run the turns; return how the session ended: (turns run, ended_by, reason)."""
        session = self.session
        conversation, results = _Conversation(self.request.api, session.system), _ToolResults(session)
        for turn, text in enumerate(session.turns, 1):
            if turn > 1 and not (yield session.think_time_s):  # False: the load was cancelled meanwhile
                return turn - 1, 'interrupted', f'{self.cancel.reason} before turn {turn}'
            conversation.user(text)
            round_ = 0
            while True:
                record = yield from self._one(lambda: _with_conversation(self.request, conversation), turn, round_)
                if not record['ok']:
                    return turn, record['error_kind'] or 'unclassified', f'turn {turn} round {round_} not ok: ' \
                                                                         f'{record["error"]}'
                calls = _answer_calls(record)
                conversation.answer(record['text'] or '', calls)
                if not calls:
                    break
                if round_ == session.max_tool_rounds:
                    return turn, 'max_tool_rounds', f'turn {turn} still called tools after ' \
                                                    f'{session.max_tool_rounds} tool rounds'
                conversation.results([(id_, results.next(name)) for id_, name, _ in calls])
                self.tool_rounds += 1
                round_ += 1
        return len(session.turns), None, None

    def _one(self, build, turn: int, round_: int):
        """One run: its request, build() (the history as it stands), then sent (yielded: the record comes
        back). A build that raises is a client_error record of the run, as a run that fails inside the
        client is: a run that started always has its record."""
        previous, self.pending = self.pending, None
        if previous is not None:
            self.emit(previous)
        begun = self.clock.now()
        try:
            request = build()
        except Exception as exc:  # a bug in this client: the run still has its record (its prompt not the first turn's)
            record = _client_failure(dataclasses.replace(self.request, settings={**self.request.settings,
                                                                                 'prompt_sha256': None}),
                                     exc, 'building the request')
        else:
            record = yield request
        self.pending = {**record, 'session': self.session.id, 'turn': turn, 'round': round_,
                        'offset_ms': round((begun - self.started) * 1000, 3),
                        'queued_ms': self.queued_ms if previous is None else None}
        return record

    def _end(self, turns_run: int, ended_by: str | None, reason: str | None) -> None:
        """Emit the last record with the session's outcome; a session cancelled before its first run
        has no record."""
        if self.pending is None:
            return
        turns = len(self.session.turns)
        last, self.pending = self.pending, None
        last['session_end'] = {
            'ok': ended_by is None, 'ended_by': ended_by, 'reason': reason, 'turns': turns, 'turns_run': turns_run,
            'tool_rounds': self.tool_rounds,
            'not_started_turns': list(range(turns_run + 1, turns + 1))}
        self.emit(last)


def _run_sessions(sessions: list[_Session], requests: list[PreparedRequest], settings: LoadSettings, on_record,
                  cancel: Cancel, clock: _Clock = _REAL_CLOCK, on_started=None, on_run=None) -> None:
    """Run settings.runs sessions (session i is sessions[i % len(sessions)] with its request, its first turn
    prepared; this shard's, i % N == I), at most settings.in_flight at once, started closed-loop or at the
    open loop's arrivals (from settings.start_at when given), here or spread over settings.processes
    processes; call on_record for each run as it ends, one call at a time. Each record gains run (numbered
    here as records come), session, session_index (i), turn, round, offset_ms, queued_ms (a session's first
    run, open loop: how late the session started), warmup (every run of a warm-up session), load (with
    sessions, the shard's, and runs None: a session's runs are not known ahead) and, on a session's last
    run, session_end. With keep_alive, each session keeps one connection. ``clock`` is what the schedule and
    the think times wait by; on_started() is called before the first session starts, on_run() as each run
    starts."""
    started = _started(settings, clock)
    described = {**_load_description(requests, settings, sessions_sha256=_sessions_digest(sessions)), 'runs': None,
                 'sessions': _shard_runs(settings.runs, settings.shard)}
    numbers = iter(range(2 ** 62))

    def numbered(record: dict) -> None:  # one call at a time: the runs of every share, in the order they end
        on_record({'run': next(numbers), **record})

    def run_share(share: tuple[int, int], out, cancel: Cancel, on_run=None) -> None:
        _run_session_share(sessions, requests, settings, out, cancel, started, described, share, clock, on_run)
    _run_shares(settings, run_share, numbered, cancel, on_started, on_run)


def _run_session_share(sessions: list[_Session], requests: list[PreparedRequest], settings: LoadSettings, out,
                       cancel: Cancel, started: float, described: dict, share: tuple[int, int],
                       clock: _Clock = _REAL_CLOCK, on_run=None) -> None:
    """The sessions i with i % workers == number of share (number, workers), with that share of the slots: on
    Linux each a job of one _Engine in this thread (its runs state machines, its think times the engine's
    timers), elsewhere on worker threads; out(record) for each run, one call at a time. With keep_alive,
    each session keeps one connection. on_run() is called as each run starts."""
    def session(index: int, due: float, begun: float):
        """The job of session index (see _load._run_scheduled): its steps."""
        queued = None if settings.rate is None else round((begun - started - due) * 1000, 3)
        fields = {'session_index': index, 'warmup': settings.warms_up(index, begun - started), 'load': described}
        return _SessionRun(sessions[index % len(sessions)], requests[index % len(requests)], cancel,
                           lambda record: out({**record, **fields}), started, queued, clock).steps()
    number, workers = share
    mine = ((index, due) for index, due in enumerate(arrival_offsets(settings)) if index % workers == number)
    _run_scheduled(session, settings.keep_alive, mine, _slots(settings, share), started, cancel, clock,
                   kept_per_job=True, on_run=on_run)


class _SessionSummary:
    """The sessions of a load, from their records alone: ok and not ok (by the kind of the first failing
    turn, or max_tool_rounds, or interrupted), the turns run and not started, the tool rounds, and per
    turn index the time to first text of the turn's first run and the turn's whole time (its runs' durations
    added up), over the turns whose runs were all ok."""

    def __init__(self) -> None:
        self.sessions = self.ok = self.turns = self.not_started = self.tool_rounds = self.runs = 0
        self.planned: dict = {}  # load id: the sessions it planned (load.sessions)
        self.by_kind: collections.Counter = collections.Counter()
        self.first_text: dict[int, list] = collections.defaultdict(list)
        self.turn_ms: dict[int, list] = collections.defaultdict(list)
        self._open: dict[tuple, list] = {}  # (load id, session) -> [turn, its time so far, all ok]

    def add(self, record: dict) -> None:
        if 'session' not in record or record.get('warmup'):  # a warm-up session is kept, and left out of figures
            return
        self.runs += 1
        key = ((record.get('load') or {}).get('id'), _session_key(record))
        self.planned.setdefault(key[0], (record.get('load') or {}).get('sessions'))
        turn = self._open.get(key)
        if turn is not None and turn[0] != record['turn']:
            self._close_turn(turn)
            turn = None
        if turn is None:
            turn = self._open[key] = [record['turn'], 0.0, True]
            if record['ok'] and record['first_text_ms'] is not None:
                self.first_text[record['turn']].append(record['first_text_ms'])
        turn[1] += record['duration_ms'] or 0.0
        turn[2] = turn[2] and record['ok']
        end = record.get('session_end')
        if end is not None:
            self._close_turn(self._open.pop(key))
            self.sessions += 1
            self.ok += end['ok']
            if not end['ok']:
                self.by_kind[end['ended_by']] += 1
            self.turns += end['turns_run']
            self.not_started += len(end['not_started_turns'])
            self.tool_rounds += end['tool_rounds']

    def _close_turn(self, turn: list) -> None:
        if turn[2]:
            self.turn_ms[turn[0]].append(round(turn[1], 3))

    def result(self) -> dict:
        indexes = sorted(set(self.first_text) | set(self.turn_ms))
        planned = sum(count for count in self.planned.values() if isinstance(count, int)) or None
        return {'sessions': self.sessions, 'planned': planned, 'ok': self.ok, 'not_ok': self.sessions - self.ok,
                'ok_ratio': None if planned is None else self.ok / planned,  # of the planned: one never run is not ok
                'not_ok_by_kind': dict(sorted(self.by_kind.items(), key=lambda item: (-item[1], item[0]))),
                'runs': self.runs, 'turns': self.turns, 'turns_not_started': self.not_started,
                'tool_rounds': self.tool_rounds,
                'latency_by_turn_ms': {str(index): {'turns': len(self.turn_ms[index]),
                                                    'first_text_ms': _percentiles(self.first_text[index]),
                                                    'turn_ms': _percentiles(self.turn_ms[index])}
                                       for index in indexes}}


    def table(self) -> str:
        """The sessions block for a person: the counts, then per turn index the p50 times."""
        result = self.result()
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


_REPORT_SESSIONS = 300  # session rows a report draws at most (the first ones to end)
_TURN_COLOURS = {True: '#cfe8cf', False: '#f4c7c3', None: '#eee'}  # ok, not ok, not started


class _SessionRows:
    """The sessions of a report, a row of turns each: per turn, ok or not (and its kind), its tool rounds
    and its time; the turns not started, greyed. The first _REPORT_SESSIONS sessions to end are drawn."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, list]] = []
        self.more = 0
        self._open: dict[tuple, list] = {}  # (load id, session) -> its turns so far: [turn, ok, rounds, ms, kind]

    def add(self, record: dict) -> None:
        if 'session' not in record or record.get('warmup'):  # a warm-up session is left out, as by the summary
            return
        key = ((record.get('load') or {}).get('id'), _session_key(record))
        turns = self._open.setdefault(key, [])
        if not turns or turns[-1][0] != record['turn']:
            turns.append([record['turn'], True, 0, 0.0, None])
        turn = turns[-1]
        turn[1] = turn[1] and record['ok']
        turn[2] += 1
        turn[3] += record['duration_ms'] or 0.0
        turn[4] = turn[4] or record.get('error_kind')
        end = record.get('session_end')
        if end is None:
            return
        del self._open[key]
        if len(self.rows) >= _REPORT_SESSIONS:
            self.more += 1
            return
        self.rows.append((record['session'], turns + [[number, None, 0, 0.0, end['reason']]
                                                      for number in end['not_started_turns']]))

    def html(self) -> str:
        out = ['<h2>Sessions</h2><p>One row per session, one cell per turn: green ok (its runs, its time), red '
               'not ok (the kind), grey not started.</p><table>']
        for session, turns in self.rows:
            cells = ''.join(
                f'<td style="background:{_TURN_COLOURS[ok]}" title="{html.escape(str(kind or ""))}">'
                + (f'{number}: {rounds} run{"s" if rounds != 1 else ""}, {ms:.0f} ms' if ok else
                   f'{number}: {html.escape(str(kind))}' if ok is False else f'{number}: not started') + '</td>'
                for number, ok, rounds, ms, kind in turns)
            out.append(f'<tr><th>{html.escape(session)}</th>{cells}</tr>')
        out.append('</table>' + (f'<p>and {self.more} more sessions.</p>' if self.more else ''))
        return '\n'.join(out)
