"""The sessions of a load, from their records alone, sans-IO: counts, latency per turn index, and goodput.

``_SessionSummary`` is the summary's ``sessions`` block (``--sessions``, and ``--summary`` of its files): the
sessions ok and not, the turns and tool rounds, per turn index the first text and the turn's time, and
session goodput beside turn goodput (docs/goodput.md#session-goodput): a session is good when it ended ok
with every run within --slo and its total time within --session-slo (``_parse_session_slos()``); a turn
when it finished with every run within --slo. ``_SessionRows`` draws a report's row of turns per session.
"""
import calendar
import collections
import dataclasses
import html

from ._limits import _count, UsageError
from ._plan import _session_key
from ._summary import _meets_slos, _parse_slos, _percentiles, _STAMP_FIELDS


# Why a session is not good, the first that applies, as the summary's not_good_by names it.
_NOT_GOOD = ('ended_not_ok', 'run_over_slo', 'over_session_slo')
# The per-session figures --session-slo NAME=MS may bound.
_SESSION_SLO_FIGURES = {'total_ms': 'from the start of the session\'s first run to the end of its last, think '
                                    'times and tool rounds included'}


def _parse_session_slos(texts: list[str]) -> tuple:
    """--session-slo NAME=MS values as sorted (name, ms) pairs; UsageError naming what is wrong."""
    return _parse_slos(texts, '--session-slo', _SESSION_SLO_FIGURES, 60000)


@dataclasses.dataclass
class _OpenSession:
    """A session whose last record has not come yet: its turn so far, and what its runs so far showed."""

    first_offset_ms: float | None   # when its first run started, after the load's start
    turn: int | None = None         # the turn of the records so far (None: before the first)
    turn_ms: float = 0.0            # the turn's runs' durations added up
    turn_ok: bool = True            # every run of the turn ok
    turn_good: bool = True          # every run of the turn ok and within --slo
    turn_finished: bool = False     # the turn's last run so far ended it: ok, with no tool call
    runs_good: bool = True          # every run of the session so far ok and within --slo
    good_turns: int = 0


class _SessionSummary:
    """The sessions of a load, from their records alone: ok and not ok (by the kind of the first failing
    turn, or max_tool_rounds, or interrupted), the turns run and not started, the tool rounds, and per
    turn index the time to first text of the turn's first run and the turn's whole time (its runs' durations
    added up), over the turns whose runs were all ok. And goodput: a session is good when it ended ok, every
    run of it was within --slo, and its total time within --session-slo; a turn is good when it finished
    (its last run ok and without a tool call) and each of its runs was within --slo. The bounds are the ones
    given here, or those each record's load was run with."""

    def __init__(self, slos: tuple | None = None, session_slos: tuple | None = None) -> None:
        self.slos, self.session_slos = slos, session_slos
        self.sessions = self.ok = self.turns = self.not_started = self.tool_rounds = self.runs = 0
        self.good = self.turns_good = self.good_turns_not_good = 0
        self.planned: dict = {}  # load id: the sessions it planned (load.sessions)
        self.by_kind: collections.Counter = collections.Counter()
        self.not_good_by: collections.Counter = collections.Counter()
        self.first_text: dict[int, list] = collections.defaultdict(list)
        self.turn_ms: dict[int, list] = collections.defaultdict(list)
        self.total_ms: list[float] = []  # each session that ended ok: its total time
        self.bounds_seen: set = set()    # the distinct (--slo, --session-slo) of the loads read
        self.span: list[float] = []      # the first start and the last end of the sessions' runs (epoch s)
        self._open: dict[tuple, _OpenSession] = {}  # (load id, session) -> what its records showed so far
        self._second = ('', 0)  # the last whole second read from a started_at, and its epoch
        self.warmups: set = set()  # (load id, session) of each warm-up session
        self._last: tuple = (None, None)  # the last load block read, and its bounds (_bounds)

    def add(self, record: dict) -> None:
        if 'session' not in record:
            return
        load = record.get('load') or {}
        key = (load.get('id'), _session_key(record))
        self.planned.setdefault(key[0], load.get('sessions'))
        if record.get('warmup'):  # a warm-up session is kept, and left out of the figures and of the planned
            self.warmups.add(key)
            return
        self.runs += 1
        slos, session_slos = self._bounds(load)
        self._add_span(record)
        state = self._open.get(key)
        if state is None:
            state = self._open[key] = _OpenSession(record.get('offset_ms'))
        if state.turn is not None and state.turn != record['turn']:
            self._close_turn(state)
        if state.turn is None:
            state.turn, state.turn_ms, state.turn_ok, state.turn_good = record['turn'], 0.0, True, True
            if record['ok'] and record['first_text_ms'] is not None:
                self.first_text[record['turn']].append(record['first_text_ms'])
        good = record['ok'] and _meets_slos(record, slos)
        state.turn_ms += record['duration_ms'] or 0.0
        state.turn_ok = state.turn_ok and record['ok']
        state.turn_good = state.turn_good and good
        state.runs_good = state.runs_good and good
        state.turn_finished = record['ok'] and not record.get('tool_calls')
        end = record.get('session_end')
        if end is not None:
            self._close_turn(self._open.pop(key))
            self._end(record, end, state, session_slos)

    def _bounds(self, load: dict) -> tuple[tuple, tuple]:
        """The --slo and --session-slo a record is judged by: the ones given, or its load's (the last load's
        again when the record shares its load's block, as the records of a load run here do)."""
        if load is self._last[0]:
            return self._last[1]
        slos = self.slos if self.slos is not None else tuple(sorted((load.get('slo') or {}).items()))
        session_slos = self.session_slos if self.session_slos is not None else \
            tuple(sorted((load.get('session_slo') or {}).items()))
        self.bounds_seen.add((slos, session_slos))
        self._last = load, (slos, session_slos)  # held: no other block can take its id
        return slos, session_slos

    def _add_span(self, record: dict) -> None:
        """Widen the sessions' wall time to the run's start and end (started_at: UTC, millisecond precision)."""
        second = record['started_at'][:19]
        if second != self._second[0]:  # runs of a load share their seconds: parse each once
            self._second = (second, calendar.timegm(tuple(int(second[at:at + size]) for at, size in _STAMP_FIELDS)))
        start = self._second[1] + int(record['started_at'][20:23]) / 1000
        end = start + (record['duration_ms'] or 0) / 1000
        self.span = [min(self.span[0], start), max(self.span[1], end)] if self.span else [start, end]

    def _close_turn(self, state: _OpenSession) -> None:
        if state.turn_ok:
            self.turn_ms[state.turn].append(round(state.turn_ms, 3))
        if state.turn_good and state.turn_finished:
            self.turns_good += 1
            state.good_turns += 1
        state.turn = None

    def _end(self, record: dict, end: dict, state: _OpenSession, session_slos: tuple) -> None:
        """Count a session at its last record: ok or not, good or not (and why), its turns and rounds."""
        self.sessions += 1
        self.ok += end['ok']
        if not end['ok']:
            self.by_kind[end['ended_by']] += 1
        self.turns += end['turns_run']
        self.not_started += len(end['not_started_turns'])
        self.tool_rounds += end['tool_rounds']
        total = None if state.first_offset_ms is None or record.get('offset_ms') is None else \
            round(record['offset_ms'] + (record['duration_ms'] or 0.0) - state.first_offset_ms, 3)
        if end['ok'] and total is not None:
            self.total_ms.append(total)
        why = 'ended_not_ok' if not end['ok'] else 'run_over_slo' if not state.runs_good else \
            'over_session_slo' if any(total is None or total > bound for _, bound in session_slos) else None
        if why is None:
            self.good += 1
        else:
            self.not_good_by[why] += 1
            self.good_turns_not_good += state.good_turns

    def result(self) -> dict:
        indexes = sorted(set(self.first_text) | set(self.turn_ms))
        planned = sum(count for count in self.planned.values() if isinstance(count, int))
        planned = max(0, planned - len(self.warmups)) or None  # a warm-up session is not one the figures plan
        wall = self.span[1] - self.span[0] if self.span else 0.0
        turns = self.turns + self.not_started  # the turns of the sessions that started

        def per_second(count: int) -> float | None:
            return round(count / wall, 3) if wall > 0 else None
        return {'sessions': self.sessions, 'planned': planned, 'ok': self.ok, 'not_ok': self.sessions - self.ok,
                'ok_ratio': None if planned is None else self.ok / planned,  # of the planned: one never run is not ok
                'not_ok_by_kind': dict(sorted(self.by_kind.items(), key=lambda item: (-item[1], item[0]))),
                'good': self.good, 'good_ratio': None if planned is None else self.good / planned,
                'goodput_per_s': per_second(self.good),
                'not_good_by': {why: self.not_good_by[why] for why in _NOT_GOOD if self.not_good_by[why]},
                'session_slo': self._session_bounds(), 'total_ms': _percentiles(self.total_ms),
                'turns_good': self.turns_good, 'turns_good_ratio': self.turns_good / turns if turns else None,
                'turns_goodput_per_s': per_second(self.turns_good),
                'good_turns_in_sessions_not_good': self.good_turns_not_good,
                'runs': self.runs, 'turns': self.turns, 'turns_not_started': self.not_started,
                'tool_rounds': self.tool_rounds,
                'latency_by_turn_ms': {str(index): {'turns': len(self.turn_ms[index]),
                                                    'first_text_ms': _percentiles(self.first_text[index]),
                                                    'turn_ms': _percentiles(self.turn_ms[index])}
                                       for index in indexes}}

    def _session_bounds(self) -> dict | None:
        """The --session-slo bounds the sessions were judged by: the ones given, or the one set their
        loads shared."""
        if self.session_slos is not None:
            return dict(self.session_slos) or None
        seen = {session for _, session in self.bounds_seen}
        if len(seen) > 1:
            raise UsageError('these records come from loads with different --session-slo bounds: give '
                             '--session-slo to judge them all by the same ones')
        return dict(next(iter(seen), ())) or None

    def table(self) -> str:
        """The sessions block for a person: the counts, per turn index the p50 times, then session goodput
        beside turn goodput and why they differ."""
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
        return '\n'.join(lines + _session_goodput_lines(result))


_NOT_GOOD_WORDS = {'ended_not_ok': 'ended not ok', 'run_over_slo': 'a run over --slo',
                   'over_session_slo': 'over --session-slo'}


def _session_goodput_lines(result: dict) -> list[str]:
    """Session goodput beside turn goodput, and in one line why they differ."""
    planned = result['planned'] if result['planned'] is not None else result['sessions']
    turns = result['turns'] + result['turns_not_started']
    def rate(value: float | None) -> str:
        return '-' if value is None else f'{value:g}/s'
    why = ', '.join(f'{_NOT_GOOD_WORDS[reason]} {count}' for reason, count in result['not_good_by'].items())
    return [f'good sessions {result["good"]} of {planned} planned ({rate(result["goodput_per_s"])}); good turns '
            f'{result["turns_good"]} of {turns} ({rate(result["turns_goodput_per_s"])})',
            f'  the difference: {_count(result["good_turns_in_sessions_not_good"], "good turn")} in sessions not good'
            + (f' ({why})' if why else '') + ': a session is good when it ended ok with every turn good']


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
