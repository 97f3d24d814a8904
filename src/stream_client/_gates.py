"""Gates on a summary: ``--fail-if FIGURE OP NUMBER``, parsed and evaluated without I/O.

``_parse_gate()`` turns one expression into a ``_FailIf`` (or a UsageError that
names what is wrong), before anything is sent; ``_evaluate_gates()`` reads
each gate's figure from a summary (the JSON object ``Summary.result()``
gives) and says whether it held. A gate fails when its expression is true,
and also when the summary lacks its figure (no ok run has no percentile):
a missing figure cannot show that the load was good. A percentile with the
failures inside that fell among them (null in JSON, and named in its entry's
``late``) is not missing but infinitely late: +inf, over any bound.
"""
import dataclasses
import math
import operator
import re

from ._limits import FAILURE_KINDS, UsageError

# The per-run latency figures whose percentiles a summary reports under latency_ms, by the record's names.
_LATENCY_FIELDS = ('headers_ms', 'first_text_ms', 'duration_ms')
# The same figures counted from the time an open loop's schedule had the run due, not from its send.
_SCHEDULE_FIELDS = ('first_text_from_schedule_ms', 'duration_from_schedule_ms')
_PERCENTILES = ('p50', 'p90', 'p99', 'max')
# The per-run figures whose tail a summary also reports over every planned run with its failures inside
# (latency_all_ms, read by a gate as FIELD_all.P) and certified by early stopping over ok runs (certified_tail,
# FIELD_certified.P, P one of CERTIFIED_PERCENTILES); max_event_gap_ms is each run's largest gap (docs/decisions.md).
_TAIL_FIELDS = ('first_text_ms', 'duration_ms', 'max_event_gap_ms')
_ALL, _CERTIFIED = '_all', '_certified'
_CERTIFIED_PERCENTILES = (90, 99)
# The summary's own figures a gate may read, by the name the summary's JSON gives them.
_PLAIN_FIGURES = ('runs', 'ok', 'not_ok', 'ok_ratio', 'good', 'goodput_per_s', 'slo_attainment', 'first_chunk_good',
                  'runs_per_s', 'ok_runs_per_s', 'stale_connection_failures', 'sessions_ok_ratio', 'sessions_good',
                  'sessions_good_ratio', 'sessions_goodput_per_s', 'turns_good_ratio', 'turns_goodput_per_s')
# The figures a gate reads from a workload's block of the summary, by (block, field): a session can end not
# ok with every run of it ok (ended by max_tool_rounds), which ok_ratio, over runs, cannot show; and session
# goodput, which turn goodput beside it cannot show either (docs/goodput.md#session-goodput).
_BLOCK_FIGURES = {'sessions_ok_ratio': ('sessions', 'ok_ratio'), 'sessions_good': ('sessions', 'good'),
                  'sessions_good_ratio': ('sessions', 'good_ratio'),
                  'sessions_goodput_per_s': ('sessions', 'goodput_per_s'),
                  'turns_good_ratio': ('sessions', 'turns_good_ratio'),
                  'turns_goodput_per_s': ('sessions', 'turns_goodput_per_s')}
_UNCLASSIFIED = 'unclassified'  # the kind of a failure in a record older than error_kind
_OPERATORS = {'<=': operator.le, '>=': operator.ge, '==': operator.eq, '!=': operator.ne, '<': operator.lt,
              '>': operator.gt}
_EXPRESSION = re.compile(r'\s*([A-Za-z_][\w.-]*)\s*(<=|>=|==|!=|<|>)\s*(\S+?)(%?)\s*$')
_DELTA = 'delta.'  # a figure's difference between two loads (--compare BASE CANDIDATE): candidate less base
# The gate a load is held to without --fail-if: every run ok (a summary without runs has no ratio, and fails).
_DEFAULT_GATE = 'ok_ratio < 1'
_DEFAULT_SESSIONS_GATE = 'sessions_ok_ratio < 1'  # and, for a load of sessions, every session ok


@dataclasses.dataclass(frozen=True)
class _FailIf:
    """One --fail-if expression: the figure it reads, its operator and its bound."""

    text: str
    figure: str
    operator: str
    bound: float
    relative: bool = False  # a delta. figure's bound in % of the base's figure

    @property
    def compares(self) -> bool:
        """Whether the gate reads a difference between two loads."""
        return self.figure.startswith(_DELTA)

    def failed_by(self, value: float | None) -> bool:
        """Whether value fails the gate: the expression is true of it, or there is no value."""
        return value is None or _OPERATORS[self.operator](value, self.bound)


def _figure_problem(figure: str) -> str | None:
    """Why figure is not one a gate can read, or None."""
    if figure in _PLAIN_FIGURES:
        return None
    name, dot, part = figure.partition('.')
    if name in _LATENCY_FIELDS + _SCHEDULE_FIELDS + ('event_gaps_ms',):
        if part in _PERCENTILES:
            return None
        return f'{name} has the percentiles {", ".join(_PERCENTILES)}, as in {name}.p99'
    if name == 'error_kind':
        if part in FAILURE_KINDS or part == _UNCLASSIFIED:
            return None
        return f'error_kind.KIND needs a failure kind of docs/failures.md, not {part!r}'
    for suffix, percentiles in ((_ALL, _PERCENTILES), (_CERTIFIED, tuple(f'p{p}' for p in _CERTIFIED_PERCENTILES))):
        if name.endswith(suffix) and name.removesuffix(suffix) in _TAIL_FIELDS:
            return None if part in percentiles else (f'{name} has the percentiles {", ".join(percentiles)}, '
                                                      f'as in {name}.p99')
    return (f'no figure {figure!r}; a gate reads one of {", ".join(_PLAIN_FIGURES)}, a percentile of a latency '
            f'figure ({", ".join(_LATENCY_FIELDS + _SCHEDULE_FIELDS)}, event_gaps_ms; e.g. first_text_ms.p99), '
            f'one with the failures inside or certified ({", ".join(_TAIL_FIELDS)} with {_ALL} or {_CERTIFIED}; '
            'e.g. first_text_ms_all.p99) or error_kind.KIND')


def _parse_gate(text: str) -> _FailIf:
    """One --fail-if expression, FIGURE OP NUMBER; UsageError in one line naming what is wrong."""
    match = _EXPRESSION.match(text)
    if match is None:
        raise UsageError(f'--fail-if {text!r}: expected FIGURE OP NUMBER, e.g. "first_text_ms.p99 > 500", with OP '
                         f'one of {" ".join(sorted(_OPERATORS, key=len))}')
    figure, op, number, percent = match.groups()
    problem = _figure_problem(figure.removeprefix(_DELTA))
    if not problem and percent and not figure.startswith(_DELTA):
        problem = f'a bound in % is for a difference between two loads, as in delta.{figure} > 10%'
    if problem:
        raise UsageError(f'--fail-if {text!r}: {problem}')
    try:
        bound = float(number)
    except ValueError:
        bound = math.nan
    if not math.isfinite(bound):
        raise UsageError(f'--fail-if {text!r}: the bound must be a finite number, not {number!r}')
    return _FailIf(text.strip(), figure, op, bound, bool(percent))


def _parse_gates(texts: list[str] | None) -> tuple:
    """The --fail-if expressions given, parsed; without any, the default gate (every run ok)."""
    return tuple(_parse_gate(text) for text in texts or [_DEFAULT_GATE])


def _default_gates(result: dict) -> tuple:
    """The gates a summary is held to without --fail-if: every run ok, and with a sessions block, every
    planned session ok too (a session can end not ok with all its runs ok)."""
    return _parse_gates(None) + ((_parse_gate(_DEFAULT_SESSIONS_GATE),) if 'sessions' in result else ())


def _figure_value(result: dict, gate: _FailIf) -> float | None:
    """The figure a gate reads from a summary, or None when the summary does not have it. From a
    comparison of two loads, a delta. figure reads the difference (in % of the base's figure with a bound
    in %), and any other figure reads the candidate's summary."""
    if gate.compares:
        entry = result.get('delta', {}).get(gate.figure.removeprefix(_DELTA))
        return entry and (_late_difference(entry) or entry['relative_pct' if gate.relative else 'difference'])
    result = result.get('candidate', result)
    if gate.figure in _BLOCK_FIGURES:
        block, field = _BLOCK_FIGURES[gate.figure]
        return (result.get(block) or {}).get(field)
    name, _, part = gate.figure.partition('.')
    if name == 'error_kind':
        return result['not_ok_by_kind'].get(part, 0)
    if name.endswith(_ALL):
        return _late_value((result.get('latency_all_ms') or {}).get(name.removesuffix(_ALL)), part)
    if name.endswith(_CERTIFIED):
        return ((result.get('certified_tail') or {}).get(name.removesuffix(_CERTIFIED)) or {}).get(part)
    if name == 'event_gaps_ms':
        values = result.get('event_gaps_ms')
    elif part:
        values = (result.get('latency_ms') or {}).get(name)
    else:
        return result.get(name)
    return values and values[part]


def _late_value(entry: dict | None, part: str) -> float | None:
    """A percentile with the failures inside (an entry of latency_all_ms): inf where its rank fell among the
    runs that failed or never started (null in the entry, and named in its late), None without an entry."""
    if entry is None:
        return None
    return math.inf if part in entry['late'] else entry[part]


def _late_difference(entry: dict) -> float | None:
    """A compared percentile with the failures inside: +inf when only the candidate's is infinitely late,
    -inf when only the base's; None otherwise (both late have no difference: the figure is missing)."""
    late = entry.get('late') or {}
    if late.get('base') != late.get('candidate'):
        return math.inf if late['candidate'] else -math.inf
    return None


def _evaluate_gates(gates: tuple, result: dict) -> list[dict]:
    """Each gate as the summary's JSON (or a comparison's) gives it: its expression, the figure's value
    and whether it held. JSON has no infinity: an infinitely late value is null there, with "infinite"
    saying "+inf" (or "-inf", a difference whose base was late), and it is held to the gate as infinite: over
    any bound."""
    evaluated = []
    for gate in gates:
        value = _figure_value(result, gate)
        infinite = value is not None and math.isinf(value)
        evaluated.append({'expr': gate.text, 'value': None if infinite else value,
                          **({'infinite': '+inf' if value > 0 else '-inf'} if infinite else {}),
                          'held': not gate.failed_by(value)})
    return evaluated


def _gates_held(result: dict) -> bool:
    """Whether every gate of a summary held (its exit status is 0 then, 1 otherwise)."""
    return all(gate['held'] for gate in result['gates'])


def _gate_lines(gates: list[dict]) -> list[str]:
    """A line per gate for the summary's table."""
    return [f'gate {"held  " if gate["held"] else "FAILED"} fail if {gate["expr"]}: ' + _gate_value_text(gate)
            for gate in gates]


def _gate_value_text(gate: dict) -> str:
    """What a gate read, for a person."""
    if 'infinite' in gate:
        return {'+inf': 'infinitely late (+inf)', '-inf': '-inf (the base infinitely late)'}[gate['infinite']]
    if gate['value'] is not None:
        return f'{gate["value"]:g}'
    figure = _EXPRESSION.match(gate['expr'])[1].partition('.')[0]
    return 'none: too few ok runs to certify it' if figure.endswith(_CERTIFIED) else 'no such figure in this summary'
