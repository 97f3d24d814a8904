"""Multi-turn agent sessions: each request one strict run, the history exactly what came back.

``_run_sessions()`` runs the sessions of a --sessions file as a load (sessions
in flight, sessions started per second); within a session, one run after
another: the user turn, then while the answer is tool calls that ran ok, their
results and the next round. A run that is not ok ends its session; its record
says which turns were not started, and why. Their figures, from the records
alone, are _session_summary's.
"""
import dataclasses
import hashlib
import json

from ._json import _json_text, _GrowingJson, _utf8_json
from ._request import PreparedRequest, _wire_head, _wire_with_body, _with_body, _unstreamed_twin
from ._salt import _pass_salt, _Salt
from ._exchange import Cancel
from ._record import _client_failure
from ._plan import _shard_runs
from ._load import (
    _Clock, arrival_offsets, _load_description, LoadSettings, _REAL_CLOCK, _run_scheduled, _run_shares, _slots,
    _started)
from ._workloads import _Conversation, _history_key, _Session, _ToolResults


class _Turns:
    """A session's requests, one a run: the prepared request with the conversation as it stands as its
    body's history (the record's prompt_sha256 is then that of the history's JSON, without the salt), and
    its unstreamed twin (--cross-check) the same; with a salt, its marker before the first text (the system
    message, else the first user turn) of every request of the session, which the history keeps shared
    from one run to the next. Each item of the history is encoded once (_GrowingJson), not each turn."""

    def __init__(self, request: PreparedRequest, salt: _Salt | None = None) -> None:
        if salt is not None:
            request = dataclasses.replace(request, settings={**request.settings, 'cache_salt': salt.described()})
        self.request, self.salt = request, salt
        self.base, self.head = json.loads(request.body), _wire_head(request.wire)
        key = _history_key(request.api)
        self.key, self.body_json, self.history_json = key, _GrowingJson(key), _GrowingJson(key, sort_keys=True)
        self.body_around = self.body_json.around({**self.base, key: None})  # where {**base, **fields} has it
        self.history_around = self.history_json.around({key: None})

    def build(self, conversation: _Conversation) -> PreparedRequest:
        """The request of the next run, the history as conversation holds it."""
        request, items, key = self.request, conversation.items, self.key
        # a surrogate pair streamed in halves goes back as the escapes it came as (_json_text)
        if self.salt is None:
            body = None
            data = _utf8_json(self.body_around, self.body_json.list_text(items), lambda: {**self.base, key: items})
        else:
            body = self.salt.body(request.api, {**self.base, **conversation.body_fields()})
            data = self.body_json.text(body).encode()
        history = _utf8_json(self.history_around, self.history_json.list_text(items), lambda: {key: items},
                             sort_keys=True)
        turn = _with_body(request, data, _wire_with_body(self.head, data),
                          {**request.settings, 'prompt_sha256': hashlib.sha256(history).hexdigest()})
        if request.twin is None:
            return turn
        if body is None:
            body = {**self.base, **conversation.body_fields()}
        return dataclasses.replace(turn, twin=_unstreamed_twin(turn, body))


def _sessions_digest(sessions: list[_Session]) -> str:
    """A hash of everything the sessions send and answer (turns, system, tools, tool results, rounds, think
    times), so that a plan's id tells two session files apart whose first turns are the same."""
    fields = [{**vars(session), 'where': None} for session in sessions]  # its JSON is asdict()'s, without copies
    return hashlib.sha256(_json_text(fields, sort_keys=True).encode()).hexdigest()


def _outcome(record: dict) -> tuple[tuple[str, str] | None, str, list[tuple[str, str, str]]]:
    """What a session takes from a run's record: why it is not ok (its error kind and message) or None, its
    text and its calls. The session keeps these, not the record, while its next run is in flight: a record
    held that long outlives the collector's youngest generation, which then walks it again and again."""
    if not record['ok']:
        return (record['error_kind'] or 'unclassified', record['error']), '', []
    return None, record['text'] or '', _answer_calls(record)


def _answer_calls(record: dict) -> list[tuple[str, str, str]]:
    """The calls of an ok run, (id, name, arguments) as streamed."""
    return [(call['id'] or f'call_{call["index"]}', call['name'], call['arguments']) for call in record['tool_calls']]


class _SessionRun:
    """One session's runs, in order, as a job of the engine (see _load._run_scheduled): steps() yields each
    run's request and each think time; emit(record) is called for each run, its ``run`` None (the load numbers
    it) and fields at the end, the session's last one carrying ``session_end`` (held back until the session
    knows it is the last)."""

    def __init__(self, session: _Session, request: PreparedRequest, cancel: Cancel, emit, started: float,
                 queued_ms: float | None, clock: _Clock = _REAL_CLOCK, salt: _Salt | None = None,
                 fields: dict | None = None) -> None:
        self.session, self.request, self.cancel, self.emit = session, request, cancel, emit
        self.fields = fields or {}  # the load's fields of each record (session_index, warmup, load)
        self.turns = _Turns(request, salt)  # each run's request, with the session's --cache-salt marker if any
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
                failure, answer, calls = yield from self._one(lambda: self.turns.build(conversation), turn, round_)
                if failure is not None:
                    return turn, failure[0], f'turn {turn} round {round_} not ok: {failure[1]}'
                conversation.answer(answer, calls)
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
        back); returns what the session takes from its record (_outcome). A build that raises is a
        client_error record of the run, as a run that fails inside the client is: a run that started always
        has its record."""
        first = not self._emit_held()
        begun = self.clock.now()
        try:
            request = build()
        except Exception as exc:  # a bug in this client: the run still has its record (its prompt not the first turn's)
            record = _client_failure(dataclasses.replace(self.request, settings={**self.request.settings,
                                                                                 'prompt_sha256': None}),
                                     exc, 'building the request')
        else:
            record = yield request
        self.pending = {'run': None, **record, 'session': self.session.id, 'turn': turn, 'round': round_,
                        'offset_ms': round((begun - self.started) * 1000, 3),
                        'queued_ms': self.queued_ms if first else None, **self.fields}
        return _outcome(record)

    def _emit_held(self) -> bool:
        """Emit the record held back, if any (the run before this one was not the session's last); whether
        there was one. Not held in _one's frame while the next run is in flight."""
        previous, self.pending = self.pending, None
        if previous is None:
            return False
        self.emit(previous)
        return True

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
    run, session_end. With keep_alive, each session keeps one connection. With settings.cache_salt, each
    request starts with the pass's (or, under session, the session's) marker. ``clock`` is what the schedule
    and the think times wait by; on_started() is called before the first session starts, on_run() as each run
    starts."""
    started = _started(settings, clock)
    described = {**_load_description(requests, settings, sessions_sha256=_sessions_digest(sessions)), 'runs': None,
                 'sessions': _shard_runs(settings.runs, settings.shard),
                 'session_slo': dict(settings.session_slos) or None}
    salt = _pass_salt(settings.cache_salt, described)
    numbers = iter(range(2 ** 62))

    def numbered(record: dict) -> None:  # one call at a time: the runs of every share, in the order they end
        record['run'] = next(numbers)  # its first key (_SessionRun), given here
        on_record(record)

    def run_share(share: tuple[int, int], out, cancel: Cancel, on_run=None) -> None:
        _run_session_share(sessions, requests, settings, out, cancel, started, described, share, clock, on_run,
                           salt)
    _run_shares(settings, run_share, numbered, cancel, on_started, on_run)


def _run_session_share(sessions: list[_Session], requests: list[PreparedRequest], settings: LoadSettings, out,
                       cancel: Cancel, started: float, described: dict, share: tuple[int, int],
                       clock: _Clock = _REAL_CLOCK, on_run=None, salt: _Salt | None = None) -> None:
    """The sessions i with i % workers == number of share (number, workers), with that share of the slots: on
    Linux each a job of one _Engine in this thread (its runs state machines, its think times the engine's
    timers), elsewhere on worker threads; out(record) for each run, one call at a time. With keep_alive,
    each session keeps one connection; with a salt, each session its marker (for_session). on_run() is called
    as each run starts."""
    def session(index: int, due: float, begun: float):
        """The job of session index (see _load._run_scheduled): its steps."""
        queued = None if settings.rate is None else round((begun - started - due) * 1000, 3)
        fields = {'session_index': index, 'warmup': settings.warms_up(index, begun - started), 'load': described}
        return _SessionRun(sessions[index % len(sessions)], requests[index % len(requests)], cancel, out, started,
                           queued, clock, salt and salt.for_session(str(index)), fields).steps()
    number, workers = share
    mine = ((index, due) for index, due in enumerate(arrival_offsets(settings)) if index % workers == number)
    _run_scheduled(session, settings.keep_alive, mine, _slots(settings, share), started, cancel, clock,
                   kept_per_job=True, on_run=on_run)

