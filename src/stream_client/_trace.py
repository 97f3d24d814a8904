"""Timed trace replay: each request starts at its timestamp, whatever is in flight.

``_trace_prompts()`` builds each line's prompt before the replay starts (its
length met with the server's /tokenize where it offers one, else the
approximation of ``_prompt_words()``); ``_run_trace()`` starts each run at its
scheduled time and records how late it was.
"""
import collections
import http.client
import json

from ._request import PreparedRequest
from ._salt import _pass_salt, _salted
from ._load import _Clock, _load_description, LoadSettings, _REAL_CLOCK, _run_share, _run_shares, _started
from ._summary import _percentiles
from ._workloads import _prompt_words, _TraceLine

_TOKENIZE_ROUNDS = 4  # /tokenize calls per prompt at most while its length is being met


class _Tokenizer:
    """The server's POST /tokenize (vLLM's), asked in the shape the API's requests take (a prompt for
    completions, chat messages otherwise, so that the chat template's tokens count); ``offered`` turns
    False, for good, at the first answer that is not a count (a 404: not offered; a "count" that is not
    a non-negative whole number: negative, a bool, a float, a string, missing), and then nothing more is
    asked. Not through a forward proxy."""

    def __init__(self, request: PreparedRequest) -> None:
        self.request = request
        self.offered = request.proxy is None

    def count(self, text: str) -> int | None:
        if not self.offered:
            return None
        request = self.request
        shape = {'prompt': text} if request.api == 'completions' else {'messages': [{'role': 'user', 'content': text}]}
        body = json.dumps({'model': request.model, **shape}, ensure_ascii=False).encode()
        headers = {'Content-Type': 'application/json', **{name: value for name, value in request.headers.items()
                                                          if name == 'Authorization'}}
        connection = (http.client.HTTPSConnection(request.host, request.port, timeout=request.idle,
                                                  context=request.ssl_context)
                      if request.scheme == 'https' else
                      http.client.HTTPConnection(request.host, request.port, timeout=request.idle))
        try:
            connection.request('POST', '/tokenize', body, headers)
            response = connection.getresponse()
            answer = json.loads(response.read(1 << 24)) if response.status == 200 else None
        except (OSError, ValueError, http.client.HTTPException):
            answer = None
        finally:
            connection.close()
        count = answer.get('count') if isinstance(answer, dict) else None
        if type(count) is not int or count < 0:  # a count is a non-negative whole number (a bool is not one)
            self.offered = False
            return None
        return count


def _fitted(tokenizer: _Tokenizer, length: int, build) -> tuple[str, int | None]:
    """build(words), the text of that many words, with the word count that makes it length tokens by the
    server's /tokenize (corrected by the difference, at most _TOKENIZE_ROUNDS asks; build takes words off
    or on at the end, so a prefix stays); without /tokenize, length words. Also what /tokenize counted."""
    words, counted = length, None
    for _ in range(_TOKENIZE_ROUNDS):
        text = build(words)
        counted = tokenizer.count(text)
        if counted is None or counted == length:
            return text, counted
        words = max(1, words + length - counted)
    return build(words), counted


def _trace_prompts(lines: list[_TraceLine], tokenizer: _Tokenizer, block_size: int) -> list[tuple[str, int | None]]:
    """Each line's prompt and what /tokenize counted in it (None: the approximation, one token per word)."""
    return [(line.prompt, tokenizer.count(line.prompt)) if line.prompt is not None else
            _fitted(tokenizer, line.input_length,
                    lambda words, line=line: ' '.join(_prompt_words(words, line.hash_ids, block_size,
                                                                    f'line {line.line}')))
            for line in lines]


def _trace_offsets(lines: list[_TraceLine], speed: float) -> list[float]:
    """Seconds after the replay's start at which each line is due: its timestamp after the first line's,
    divided by speed."""
    first = lines[0].timestamp_ms
    return [(line.timestamp_ms - first) / 1000 / speed for line in lines]


def _run_trace(lines: list[_TraceLine], requests: list[PreparedRequest], facts: list[dict], speed: float,
               settings: LoadSettings, on_record, cancel, clock: _Clock = _REAL_CLOCK, on_started=None,
               on_run=None) -> None:
    """Start requests[i] at lines[i]'s scheduled time, at most settings.in_flight at once (the lines i of
    this shard, i % N == I, of settings.shard; from settings.start_at when given), here or spread over
    settings.processes processes, on the load's engine (_run_share: --keep-alive too); call on_record for
    each run as it ends, one call at a time. Each record gains run, offset_ms, queued_ms and scheduled_ms
    (how late it started, and when it was due), load (with the plan every shard shares), and trace: the
    line, its timestamp, scheduled_ms, late_ms and the facts of its prompt. With settings.cache_salt, every
    prompt starts with the pass's marker (_salt). ``clock`` is what the schedule waits by; on_started() is
    called before the first line starts, on_run() as each line's run starts."""
    described = _load_description(requests, settings, arrivals='trace', trace_speed=speed)
    salt = _pass_salt(settings.cache_salt, described)
    requests = [_salted(request, salt) for request in requests]
    offsets = _trace_offsets(lines, speed)
    started = _started(settings, clock)

    def line_fields(index: int, late: float) -> dict:
        line = lines[index]
        return {'trace': {'line': line.line, 'timestamp_ms': line.timestamp_ms,
                          'scheduled_ms': round(offsets[index] * 1000, 3), 'late_ms': late, **facts[index]}}

    def run_share(share: tuple[int, int], out, cancel, on_run=None) -> None:
        _run_share(requests, settings, out, cancel, started, described, share, clock, offsets, line_fields, on_run)
    _run_shares(settings, run_share, on_record, cancel, on_started, on_run)


class _TraceSummary:
    """A replay's block of the summary, from its records alone: the lines run, how late they started
    (late_ms percentiles, every run counted, ok or not), and how their lengths were met."""

    def __init__(self, speed: float) -> None:
        self.speed, self.runs, self.ok = speed, 0, 0
        self.late: list[float] = []
        self.length_by: collections.Counter = collections.Counter()

    def add(self, record: dict) -> None:
        trace = record.get('trace')
        if trace is None or record.get('warmup'):  # a warm-up line is kept, and left out of the figures
            return
        self.runs += 1
        self.ok += record['ok']
        self.late.append(trace['late_ms'])
        self.length_by[trace['length_by']] += 1

    def result(self) -> dict:
        return {'lines': self.runs, 'ok': self.ok, 'speed': self.speed, 'late_ms': _percentiles(self.late),
                'length_by': dict(sorted(self.length_by.items()))}


    def table(self) -> str:
        late = _percentiles(self.late)
        how = ', '.join(f'{name} {count}' for name, count in sorted(self.length_by.items()))
        return (f'trace: {self.ok} of {self.runs} lines ok at speed {self.speed:g}; lengths by {how or "-"}; late '
                + ('-' if late is None
                   else f'p50 {late["p50"]:.1f} ms, p99 {late["p99"]:.1f} ms, max {late["max"]:.1f} ms'))
