"""The report: one self-contained HTML page per load.

``Report`` draws a load as one static page: the verdicts, a timeline of the
runs, the gaps and a sweep's steps, with no script and nothing fetched.
"""
import collections
import html
import math
import typing

from ._limits import _count
from ._gates import _ALL, _CERTIFIED, _LATENCY_FIELDS, _TAIL_FIELDS, _UNCLASSIFIED
from ._summary import _meaning, Summary, _unplanned


_REPORT_TIMELINE_ROWS = 2000  # runs drawn in the timeline at most (a bounded sample beyond)
_REPORT_ERRORS_PER_KIND = 5  # distinct error messages shown per kind of failure
# One colour per layer, far apart (Kelly's colours of maximum contrast), ok in green.
_LAYER_COLOURS = {None: '#008856', 'connect': '#0067a5', 'proxy': '#a1caf1', 'tls': '#875692', 'http': '#e68fac',
                 'transport': '#be0032', 'sse': '#882d17', 'protocol': '#f3c300', 'application': '#f38400',
                 'cross-check': '#8db600', 'timeout': '#5e5e5e', 'interrupted': '#222222', 'client': '#c2b280'}
_REPORT_WIDTH = 1400     # the drawings' width in px; they shrink to fit a narrower window
_MIN_LANE_PX = 4   # the height of one lane of the timeline, px: at least
_MAX_LANE_PX = 16  # and at most
_REPORT_CSS = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 2em; color: #111; max-width: 1400px; }
h1 { font-size: 1.5em; } h2 { font-size: 1.15em; margin-top: 2em; }
table { border-collapse: collapse; } td, th { padding: 2px 10px; border-bottom: 1px solid #ddd; text-align: left; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
code { font-size: 12px; word-break: break-all; }
svg { display: block; margin: 0.5em 0; width: 100%; height: auto; } svg text { font-size: 11px; fill: #333; }
.key span { display: inline-block; margin-right: 1em; } .key .swatch { width: 10px; height: 10px; margin: 0; }
@media print { body { margin: 0; } h2 { break-after: avoid; } svg { break-inside: avoid; } }
"""


def _tail_tables(result: dict) -> str:
    """The tail with the failures inside (a late percentile says late) and the certified tail, as tables."""
    if not result['latency_all_runs']:
        return ''
    heads, tail = ('p50', 'p90', 'p99', 'max'), result['certified_tail']
    out = [f'<table><tr><th>over {_count(result["latency_all_runs"], "planned run")}, '
           f'{result["latency_all_late"]} infinitely late (not ok or never started)</th>'
           + ''.join(f'<th>{head}</th>' for head in heads) + '</tr>']
    for field in _TAIL_FIELDS:
        values = result['latency_all_ms'][field]
        out.append(f'<tr><td>{field}{_ALL}</td>' + ''.join(
            '<td class="n">late</td>' if values[head] is None else f'<td class="n">{values[head]:.1f}</td>'
            for head in heads) + '</tr>')
    out.append(f'</table><table><tr><th>certified at {100 * tail["confidence"]:g}% confidence (early stopping), '
               f'over ok runs</th><th>runs</th><th>p90</th><th>p99</th></tr>')
    for field in _TAIL_FIELDS:
        values = tail[field]
        out.append(f'<tr><td>{field}{_CERTIFIED}</td><td class="n">{values["runs"]}</td>' + ''.join(
            f'<td class="n">needs {tail["min_runs"][head]}</td>' if values[head] is None
            else f'<td class="n">{values[head]:.1f}</td>' for head in ('p90', 'p99')) + '</tr>')
    return '\n'.join(out) + '</table>'


class _Row(typing.NamedTuple):
    """What the report keeps of one run."""

    start: float            # seconds since the epoch
    duration_ms: float
    run: int
    headers_ms: float | None
    first_text_ms: float | None
    error: str              # '' when ok
    layer: str | None


class Report:
    """A load drawn as one static HTML page: summary and settings, a timeline of every run, histograms of
    time to first text and duration (ok runs), first text against start time, and the error messages.
    Built from records alone, like Summary, so a page from merged files equals one from a file holding
    them all; every string the server sent is escaped, and the page has no script and fetches nothing."""

    def __init__(self, summary: Summary) -> None:
        self.summary = summary  # the load's summary, which the caller keeps adding the same records to
        self.rows: list[_Row] = []
        self.errors: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        self.settings: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        self.drawn_on_timeline: list = []  # (origin, span, x0, x1) -> HTML under the timeline, on its time axis

    def add(self, record: dict) -> None:
        if record.get('warmup'):  # left out of the page as of the summary it draws
            return
        self.rows.append(_Row(self.summary.epoch(record['started_at']), record['duration_ms'] or 0.0,
                              record.get('run', 0), record['headers_ms'], record['first_text_ms'],
                              record['error'] or '', record['error_layer']))
        if not record['ok']:
            self.errors[record.get('error_kind') or _UNCLASSIFIED][record['error']] += 1
        load = record.get('load') or {}
        request = record.get('request') or {}
        for name, value in (('URL', record.get('url')), ('model', record.get('model')),
                            ('API', record.get('api', 'chat')), ('source', record.get('source')),
                            ('prompt SHA-256', request.get('prompt_sha256')),
                            ('expected finish', request.get('expect_finish', 'stop')),
                            ('concurrency', load.get('concurrency')), ('rate (runs/s)', load.get('rate')),
                            ('arrivals', load.get('arrivals')),
                            ('client', (record.get('client') or {}).get('version'))):
            self.settings[name][value] += 1

    def html(self) -> str:
        result = self.summary.result()
        rows = sorted(self.rows, key=lambda row: (row.start, row.run, row.duration_ms, row.error))
        parts = ['<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">',
                 f'<title>stream-client report: {result["ok"]} of {_count(result["runs"], "run")} ok</title>',
                 f'<style>{_REPORT_CSS}</style></head><body>',
                 f'<h1>{result["ok"]} of {_count(result["runs"], "run")} ok{_e(_unplanned(result))}</h1>',
                 self._summary_section(result), _sweep_section(result), self._timeline(rows), self._histograms(result),
                 self._scatter(rows), self._errors_section(), '</body></html>\n']
        return '\n'.join(parts)

    def _summary_section(self, result: dict) -> str:
        cells = [('runs planned', result['planned_runs']), ('runs', result['runs']), ('ok', result['ok']),
                 ('not ok', result['not_ok']), ('good (ok and within every --slo)', result['good']),
                 ('good runs per second', result['goodput_per_s']),
                 ('counted by a first-chunk tool', result['first_chunk_good'])]
        cells += [(f'not ok: {layer}', count) for layer, count in result['not_ok_by_layer'].items()]
        cells += [(f'  {kind}', count) for kind, count in list(result['not_ok_by_kind'].items())[:10]]
        cells += [(f'cross-check: {outcome.replace("_", " ")}', count)
                  for outcome, count in (result.get('cross_check') or {}).items()]
        out = ['<h2>Summary</h2><table>'] + [f'<tr><th>{_e(name)}</th><td class="n">{value}</td></tr>'
                                           for name, value in cells]
        out.append('</table><table><tr><th>over ok runs (' + str(result['latency_excludes']) + ' not ok excluded)'
                   '</th><th>p50</th><th>p90</th><th>p99</th><th>max</th></tr>')
        for field in _LATENCY_FIELDS:
            values = result['latency_ms'][field]
            out.append(f'<tr><td>{field}</td>' + ''.join(
                f'<td class="n">{values[key]:.1f}</td>' if values else '<td class="n">-</td>'
                for key in ('p50', 'p90', 'p99', 'max')) + '</tr>')
        out.append('</table>' + _tail_tables(result))
        out.append(f'<p>Wall time {result["wall_s"]} s: {result["runs_per_s"]} runs/s, '
                   f'{result["ok_runs_per_s"]} ok runs/s.</p>')
        out.append('<h2>Settings</h2><table>')
        for name, values in self.settings.items():
            if set(values) == {None}:
                continue  # a setting these runs did not use (a rate in a closed loop, say)
            shown = sorted(values.items(), key=lambda item: (-item[1], str(item[0])))
            text = ', '.join(f'{_e(str(value))} ({count})' if len(shown) > 1 else _e(str(value))
                             for value, count in shown[:5]) + (f', and {len(shown) - 5} more' if len(shown) > 5 else '')
            out.append(f'<tr><th>{_e(name)}</th><td><code>{text}</code></td></tr>')
        return '\n'.join(out) + '</table>'

    def _timeline(self, rows: list[_Row]) -> str:
        if not rows:
            return '<h2>Timeline</h2><p>No runs.</p>'
        shown = rows if len(rows) <= _REPORT_TIMELINE_ROWS else \
            [rows[i * len(rows) // _REPORT_TIMELINE_ROWS] for i in range(_REPORT_TIMELINE_ROWS)]
        lanes = _lanes(shown)
        origin = rows[0].start
        span = max(row.start - origin + row.duration_ms / 1000 for row in rows) or 1.0
        height = max(_MIN_LANE_PX, min(_MAX_LANE_PX, 600 // (max(lanes) + 1)))
        width, left = _REPORT_WIDTH, 40
        scale = (width - left - 10) / span
        bottom = (max(lanes) + 1) * height
        out = ['<h2>Timeline</h2>', f'<p>One bar per run, from its start to its end, in lanes: a run takes the '
               f'first lane free when it starts, so there are as many lanes as runs were in flight at most '
               f'({max(lanes) + 1}). A tick at the response head, a dot at the first text; {_legend()}'
               + (f' A sample of {len(shown)} of the {len(rows)} runs, evenly spaced in start order.'
                  if len(shown) < len(rows) else '') + '</p>',
               f'<svg viewBox="0 0 {width} {bottom + 20}" width="{width}" height="{bottom + 20}" role="img" '
               f'aria-label="timeline">', _axis(left, width - 10, bottom, 0, span, 's')]
        for row, lane in zip(shown, lanes):
            x, y = left + (row.start - origin) * scale, lane * height
            title = f'run {row.run}: ' + (f'NOT OK {row.error}' if row.error else 'ok') + f', {row.duration_ms:.0f} ms'
            marks = ''
            if row.headers_ms is not None:
                marks += (f'<rect x="{x + row.headers_ms / 1000 * scale:.1f}" y="{y}" width="1.5" '
                          f'height="{height - 1}" fill="#000"/>')
            if row.first_text_ms is not None:
                marks += (f'<circle cx="{x + row.first_text_ms / 1000 * scale:.1f}" cy="{y + (height - 1) / 2}" '
                          f'r="{max(1, (height - 1) / 2)}" fill="#fff" stroke="#000" stroke-width="0.5"/>')
            out.append(f'<g class="run"><title>{_e(title)}</title><rect x="{x:.1f}" y="{y}" '
                       f'width="{max(1.0, row.duration_ms / 1000 * scale):.1f}" height="{height - 1}" '
                       f'fill="{_LAYER_COLOURS.get(row.layer, "#000")}"/>{marks}</g>')
        return '\n'.join(out) + '</svg>' + ''.join(draw(origin, span, left, width - 10)
                                                 for draw in self.drawn_on_timeline)

    def _histograms(self, result: dict) -> str:
        out = [f'<h2>Distributions over ok runs</h2><p>{_count(result["latency_runs"], "ok run")}; '
               f'{_count(result["latency_excludes"], "run")} not ok, excluded.</p>']
        for field in ('first_text_ms', 'duration_ms'):
            out.append(f'<p>{field}</p>' + _histogram([value for value in self.summary.latency[field]]))
        return '\n'.join(out)

    def _scatter(self, rows: list[_Row]) -> str:
        points = [(row.start, row.first_text_ms) for row in rows if not row.error and row.first_text_ms is not None]
        out = ['<h2>Time to first text against start time</h2>',
               '<p>Each dot an ok run: drift upwards means first text slows as the load goes on.</p>']
        if not points:
            return '\n'.join(out + ['<p>No ok runs.</p>'])
        origin, width, height, left = rows[0].start, _REPORT_WIDTH, 260, 70
        span = max(start - origin for start, _ in points) or 1.0
        low, top = min(value for _, value in points), max(value for _, value in points)
        room = (top - low) or 1.0
        out.append(f'<svg viewBox="0 0 {width} {height + 30}" width="{width}" height="{height + 30}" role="img" '
                   f'aria-label="first text against start">'
                   f'<line x1="{left}" y1="0" x2="{left}" y2="{height + 5}" stroke="#999"/>'
                   f'<text x="{left - 4}" y="10" text-anchor="end">{top:.1f} ms</text>'
                   f'<text x="{left - 4}" y="{height}" text-anchor="end">{low:.1f} ms</text>'
                   + _axis(left + 3, width - 5, height + 5, 0, span, 's'))
        out += [f'<circle cx="{left + 3 + (start - origin) / span * (width - left - 8):.1f}" '
                f'cy="{height - (value - low) / room * (height - 8):.1f}" r="2" fill="{_LAYER_COLOURS[None]}"/>'
                for start, value in points]
        return '\n'.join(out) + '</svg>'

    def _errors_section(self) -> str:
        out = ['<h2>Errors</h2>']
        if not self.errors:
            return '\n'.join(out + ['<p>None: every run was ok.</p>'])
        for kind in sorted(self.errors, key=lambda kind: (-sum(self.errors[kind].values()), kind)):
            counts = sorted(self.errors[kind].items(), key=lambda item: (-item[1], item[0]))
            out.append(f'<h3>{_e(kind)}: {_count(sum(self.errors[kind].values()), "run")}, '
                       f'{_count(len(counts), "distinct message")}</h3><p>{_e(_meaning(kind))}</p><table>')
            out += [f'<tr><td class="n">{count}</td><td><code>{_e(message)}</code></td></tr>'
                    for message, count in counts[:_REPORT_ERRORS_PER_KIND]]
            out.append('</table>')
        return '\n'.join(out)


def _sweep_section(result: dict) -> str:
    """A sweep's steps: goodput and attainment against the offered rate, and first text per step."""
    steps = result['steps']
    if not steps:
        return ''
    width, height, left, top_rate = 700, 200, 50, max(step['rate'] for step in steps)
    top_goodput = max([step['rate'] for step in steps] + [step['goodput_per_s'] for step in steps])
    def x(rate: float) -> float:
        return left + rate / top_rate * (width - left - 20)
    def line(values: list[tuple[float, float]], colour: str, dash: str = '') -> str:
        points = ' '.join(f'{x(rate):.1f},{height - value * (height - 10):.1f}' for rate, value in values)
        return f'<polyline points="{points}" fill="none" stroke="{colour}" stroke-width="2" {dash}/>'
    goodput = [(step['rate'], step['goodput_per_s'] / top_goodput) for step in steps]
    attained = [(step['rate'], step['slo_attainment'] or 0.0) for step in steps]
    offered = [(step['rate'], step['rate'] / top_goodput) for step in steps]
    saturation = result['saturation']
    under = 'at no step' if saturation['rate'] is None else f'up to {saturation["rate"]:g} runs/s'
    past = '' if saturation['exceeded_at'] is None else f'At {saturation["exceeded_at"]:g} runs/s '
    out = ['<h2>Sweep</h2>', f'<p>Under capacity (attainment at least {result["slo_target"]}) {_e(under)}. '
           f'{_e(past + saturation["why"])}.</p>',
           '<p><span style="color:#2e7d32">goodput (runs/s)</span>, <span style="color:#999">offered rate</span>, '
           '<span style="color:#1565c0">attainment (0 to 1)</span>, against the offered rate.</p>',
           f'<svg width="{width}" height="{height + 25}" role="img" aria-label="goodput against offered rate">',
           f'<line x1="{left}" y1="{height}" x2="{width}" y2="{height}" stroke="#999"/>',
           f'<text x="{left - 4}" y="14" text-anchor="end">{top_goodput:g}/s</text>',
           line(offered, '#999', 'stroke-dasharray="4 3"'), line(goodput, '#2e7d32'), line(attained, '#1565c0')]
    out += [f'<text x="{x(step["rate"]):.1f}" y="{height + 15}" text-anchor="middle">{step["rate"]:g}</text>'
            for step in steps]
    out.append('</svg><table><tr><th>offered runs/s</th><th>started runs/s</th><th>runs</th><th>ok</th><th>good</th>'
               '<th>good runs/s</th><th>attainment</th><th>first text p50 (ms)</th><th>p99</th>'
               '<th>duration p99 (ms)</th></tr>')
    for step in steps:
        first, duration = step['latency_ms']['first_text_ms'], step['latency_ms']['duration_ms']
        cells = [f'{step["rate"]:g} (cut)' if step['interrupted'] else step['rate'], step['achieved_rate'],
                 step['runs'], step['ok'], step['good'], step['goodput_per_s'],
                 step['slo_attainment'], first and first['p50'], first and first['p99'], duration and duration['p99']]
        out.append('<tr>' + ''.join(f'<td class="n">{"-" if value is None else value}</td>' for value in cells)
                   + '</tr>')
    return '\n'.join(out) + '</table>'


def _e(text: str) -> str:
    return html.escape(text, quote=True)


def _legend() -> str:
    return ('<span class="key">' + ''.join(f'<span><span class="swatch" style="background:{colour}"></span> '
                                           f'{layer or "ok"}</span>' for layer, colour in _LAYER_COLOURS.items())
            + '</span>')


def _lanes(rows: list[_Row]) -> list[int]:
    """The timeline lane of each run (rows in start order): the first lane whose last run has ended."""
    ends: list[float] = []  # when each lane's last run ends
    lanes = []
    for row in rows:
        lane = next((i for i, end in enumerate(ends) if end <= row.start), len(ends))
        if lane == len(ends):
            ends.append(0.0)
        ends[lane] = row.start + row.duration_ms / 1000
        lanes.append(lane)
    return lanes


def _ticks(low: float, high: float, most: int = 8) -> list[float]:
    """Round values from low to high for an axis: steps of 1, 2 or 5 times a power of ten, at most ``most``."""
    room = high - low
    if room <= 0:
        return [low]
    step = 10 ** math.floor(math.log10(room / most))
    step = next(step * factor for factor in (1, 2, 5, 10) if room / (step * factor) <= most)
    first = math.ceil(low / step) * step
    return [first + i * step for i in range(int((high - first) / step + 1e-9) + 1)]


def _axis(x0: float, x1: float, y: float, low: float, high: float, unit: str) -> str:
    """A horizontal axis from x0 (low) to x1 (high) at height y, with a labelled tick at each round value."""
    scale = (x1 - x0) / ((high - low) or 1.0)
    ticks = _ticks(low, high)
    decimals = max(0, -math.floor(math.log10(ticks[1] - ticks[0]))) if len(ticks) > 1 else 1
    out = [f'<line x1="{x0}" y1="{y}" x2="{x1}" y2="{y}" stroke="#999"/>']
    for tick in ticks:
        x = x0 + (tick - low) * scale
        out.append(f'<line x1="{x:.1f}" y1="{y}" x2="{x:.1f}" y2="{y + 4}" stroke="#999"/>'
                   f'<text x="{x:.1f}" y="{y + 15}" text-anchor="middle">{tick:.{decimals}f} {unit}</text>')
    return ''.join(out)


def _histogram(values: list[float], bins: int = 40) -> str:
    """An SVG histogram of values (ms), its axis labelled at round values."""
    if not values:
        return '<p>No ok runs.</p>'
    low, high = min(values), max(values)
    width_ms = (high - low) / bins or 1.0
    counts = [0] * bins
    for value in values:
        counts[min(bins - 1, int((value - low) / width_ms))] += 1
    tallest, width, height, left = max(counts), _REPORT_WIDTH, 120, 60
    bar = (width - left - 10) / bins
    out = [f'<svg viewBox="0 0 {width} {height + 22}" width="{width}" height="{height + 22}" role="img" '
           f'aria-label="histogram">', f'<text x="{left - 4}" y="10" text-anchor="end">{tallest} runs</text>',
           _axis(left, left + bins * bar, height + 2, low, low + bins * width_ms, 'ms')]
    out += [f'<rect x="{left + i * bar:.1f}" y="{height - count / tallest * height:.1f}" width="{bar - 1:.1f}" '
            f'height="{count / tallest * height:.1f}" fill="{_LAYER_COLOURS[None]}"><title>{_count(count, "run")} '
            f'from {low + i * width_ms:.1f} ms</title></rect>' for i, count in enumerate(counts) if count]
    return '\n'.join(out) + '</svg>'
