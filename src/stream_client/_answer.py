"""The answer as a whole: the signals one stream shows, the unstreamed twin, the cross-check (sans-IO).

``VALIDATORS`` names each API's grammar; ``_answer_problem()`` adds the
signals of a finished stream (the whole budget used by a tool-call finish,
tool-call markup in the text); ``unstreamed_answer()`` parses an unstreamed
answer, and ``compare_answers()`` is the ``--cross-check`` of the two.
"""
import dataclasses
import json
import os
import re
import typing

from ._limits import _count, _failure, _preview, _shorten, StreamError
from ._json import _json_key, _paired, _seen, strict_json
from ._validator import AnswerSpec, _describe_server_error, _server_error_fields, StreamValidator
from ._chat import ChatChunks, CompletionChunks, _token_count
from ._responses import _output_text, ResponseEvents
from ._messages import MessagesEvents


VALIDATORS = {'chat': ChatChunks, 'completions': CompletionChunks, 'responses': ResponseEvents,
              'messages': MessagesEvents}


_TOKEN_ID_APIS = ('chat', 'completions')  # the APIs on which vLLM 0.32 returns token ids (return_token_ids)
_STREAMED_ONLY_KEYS = ('stream_options',)  # request keys vLLM refuses on an unstreamed request
_MAX_UNSTREAMED_BODY = 16 * 1024 * 1024    # bytes of an unstreamed answer that are read
# The markup tool-call parsers extract (hermes, llama3, mistral, functionary, gpt-oss harmony, kimi, deepseek).
_TOOL_MARKUP = ('<tool_call>', '</tool_call>', '<|python_tag|>', '[TOOL_CALLS]', '<function=', '<|channel|>',
               '<|call|>', '<|tool_calls_section_begin|>', '<|tool_call_begin|>', '<｜tool▁calls▁begin｜>',
               '<｜tool▁call▁begin｜>')
# the first marker in a text, the least in code point order where two start at the same place (a regex tries
# its alternatives in order at each place)
_TOOL_MARKUP_FOUND = re.compile('|'.join(map(re.escape, sorted(_TOOL_MARKUP)))).search
# How each API's finish words end an answer: stop, length (the output budget), tool_calls.
_ENDED_AS = {'stop': 'stop', 'end_turn': 'stop', 'stop_sequence': 'stop', 'completed': 'stop',
            'length': 'length', 'max_tokens': 'length', 'incomplete (max_output_tokens)': 'length',
            'tool_calls': 'tool_calls', 'tool_use': 'tool_calls'}


class AnsweredCall(typing.NamedTuple):
    """A tool call of a finished answer: its name and arguments; ``textual`` is false when the arguments
    arrived as a JSON value rather than text (an unstreamed Messages tool_use input), so only their JSON
    can be compared."""

    name: str
    arguments: str
    textual: bool = True


@dataclasses.dataclass(frozen=True)
class Answer:
    """One answer, streamed or not, in the terms the signals and the cross-check compare. ``finish`` is
    in the API's words (finish_reason, stop_reason, a Responses status); ``token_ids`` is None when the
    server sent none."""

    text: str
    reasoning: str
    calls: tuple[AnsweredCall, ...]
    finish: str | None
    completion_tokens: int | None
    token_ids: tuple[int, ...] | None = None

    @property
    def ended_as(self) -> str | None:
        """stop, length or tool_calls (a stop with calls is a tool-call finish), or None for other words."""
        ended = _ENDED_AS.get(self.finish)
        return 'tool_calls' if self.calls and ended in ('stop', 'tool_calls') else ended


def _responses_finish(status: object, reason: object) -> str | None:
    if not isinstance(status, str):
        return None
    return f'{status} ({reason})' if isinstance(reason, str) and reason else status


_STREAMED_FINISH = {'chat': lambda v: v.finish_reason, 'completions': lambda v: v.finish_reason,
                   'responses': lambda v: _responses_finish(v.status, v.incomplete_reason),
                   'messages': lambda v: v.stop_reason}


def _streamed_answer(validator: StreamValidator) -> Answer:
    """The answer a validator assembled."""
    return Answer(validator.text, validator.reasoning,
                  tuple(AnsweredCall(call.name, call.arguments) for call in validator.calls),
                  _STREAMED_FINISH[validator.api](validator), validator.completion_tokens,
                  None if validator.token_ids is None else tuple(validator.token_ids))


def _budget_used_by_tool_call(answer: Answer, max_tokens: int) -> str | None:
    """Why a tool-call finish is not trusted: the usage shows the whole output budget used, which is how
    a call cut by max_tokens looks when the server relabels it (vLLM #53269, #58228)."""
    if answer.ended_as != 'tool_calls' or None in (answer.completion_tokens, max_tokens) or \
            answer.completion_tokens < max_tokens:
        return None
    return (f'the whole budget of {max_tokens} tokens was used; vLLM reports a call cut by max_tokens as '
            f'"{answer.finish}"; raise --max-tokens')


def _tool_markup_in_text(answer: Answer, spec: AnswerSpec) -> str | None:
    """Why visible text is not the answer, when tools were offered: it holds tool-call markup, so the
    server's parser failed to extract a call (vLLM #47903, #50512)."""
    if not spec.tools:
        return None
    found = _TOOL_MARKUP_FOUND(answer.text)
    if found is None:
        return None
    position, marker = found.start(), found.group()
    return (f'tool-call markup {marker} in the visible text at character {position} '
            f'({_preview(answer.text[max(0, position - 20):position + 40])}): the server\'s tool-call parser '
            'did not extract a call')


def _budget_proof_wanted(validator: StreamValidator) -> int | None:
    """The budget to give the unstreamed twin so that it can show whether the model ended by itself, when
    the stream shows the whole budget used by a tool-call finish and carries token ids: one token more.
    None otherwise (the twin is then the same request)."""
    if not validator.done or validator.token_ids is None or validator.expect_finish != 'stop':
        return None
    if _budget_used_by_tool_call(_streamed_answer(validator), validator.max_tokens) is None:
        return None
    return validator.max_tokens + 1


def _ended_by_itself(streamed: Answer, unstreamed: Answer | None, budget: int | None) -> bool:
    """Whether a twin given one token more than the stream used (``budget``) proves that the model ended
    by itself on the stream's last token: the twin generated exactly the stream's token ids, fewer than its
    budget, and did not end by the budget; and each side's usage, where it counts completion tokens, counts
    exactly those ids (ids that undercount the tokens prove nothing). vLLM's stream names no end-of-sequence
    id (its stop_reason is null for the model's own end, as for a cut), so the ids of a run with room for
    one more are the proof."""
    if budget is None or unstreamed is None or streamed.token_ids is None:
        return False
    generated = len(streamed.token_ids)
    return (unstreamed.token_ids == streamed.token_ids and generated < budget
            and all(count == generated for count in (streamed.completion_tokens, unstreamed.completion_tokens)
                    if count is not None)
            and unstreamed.ended_as in ('stop', 'tool_calls'))


def _answer_problem(validator: StreamValidator, cross_check: dict | None = None) -> StreamError | None:
    """Why the streamed answer is not a finished one, or None when it is: the validator's outcome, and
    the two signals of a finished stream. The whole budget used by a tool-call finish comes first (it
    explains arguments cut short), markup in the text after the outcome. It reads the stream alone, but
    for one proof: a --cross-check twin given one token more that generated the same token ids and
    stopped (``ended_by_itself`` in ``cross_check``) shows that the last token was the model's own end."""
    outcome = validator.outcome()
    if not validator.done:
        return outcome
    answer = _streamed_answer(validator)
    budget = _budget_used_by_tool_call(answer, validator.max_tokens) if validator.expect_finish == 'stop' else None
    if budget and not (cross_check and cross_check.get('ended_by_itself') is True):
        return _failure('budget_used_by_tool_call', budget)
    if outcome:
        return outcome
    markup = _tool_markup_in_text(answer, validator.spec)
    return _failure('tool_markup_in_text', markup) if markup else None


def _tokens_per_event(validator: StreamValidator) -> dict | None:
    """How many token ids the events that carried any had (several per event is the known trigger of
    streaming bugs), or None when the server sent no token ids."""
    if validator.token_ids is None:
        return None
    counts = sorted(validator.tokens_per_event)
    median = (counts[(len(counts) - 1) // 2] + counts[len(counts) // 2]) / 2 if counts else None
    return {'events': len(counts), 'tokens': len(validator.token_ids), 'most': counts[-1] if counts else None,
            'median': int(median) if median is not None and median.is_integer() else median}


def _unstreamed_body(data: bytes) -> dict:
    """The JSON object of an unstreamed answer, strictly parsed; an error object becomes the server's error."""
    try:
        value = strict_json(data.decode('utf-8'))
    except UnicodeDecodeError:
        raise _failure('unstreamed_malformed', 'the unstreamed answer is not UTF-8') from None
    except ValueError as exc:
        raise _failure('unstreamed_malformed', f'the unstreamed answer is not strict JSON ({exc}): '
                                               f'{_preview(data.decode("utf-8", "replace"))}') from None
    if not isinstance(value, dict):
        raise _failure('unstreamed_malformed', f'the unstreamed answer is {_seen(value)}, not a JSON object')
    if value.get('error') is not None:  # OpenAI's objects carry "error": null when there is none
        error = _server_error_fields(value)
        raise _failure('unstreamed_error', 'the unstreamed answer is an error: ' + _describe_server_error(error),
                       server_error=error)
    return value


def _field(owner: dict, key: str, types: tuple, what: str) -> object:
    value = owner.get(key)
    if not isinstance(value, types):
        raise _failure('unstreamed_malformed', f'the unstreamed answer\'s {what} is {_seen(value)}')
    return value


def _one_choice(body: dict) -> dict:
    choices = body.get('choices')
    if not isinstance(choices, list) or len(choices) != 1:
        count = len(choices) if isinstance(choices, list) else _seen(choices)
        raise _failure('unstreamed_malformed', f'expected one choice in the unstreamed answer (n=1), got {count}')
    choice = choices[0]
    if not isinstance(choice, dict) or choice.get('index') != 0:
        raise _failure('unstreamed_malformed', 'expected the unstreamed answer\'s choice to have index 0')
    return choice


def _token_list(value: object) -> tuple[int, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(type(token) is int for token in value):
        raise _failure('unstreamed_malformed', f'expected the unstreamed token_ids to be a list of integers, '
                                               f'got {_seen(value)}')
    return tuple(value)


def _usage(body: dict, key: str) -> int | None:
    return None if body.get('usage') is None else _token_count(body['usage'], key)


def _unstreamed_chat(body: dict) -> Answer:
    choice = _one_choice(body)
    message = _field(choice, 'message', (dict,), 'message')
    calls = []
    for number, call in enumerate(_field(message, 'tool_calls', (list, type(None)), 'tool_calls') or []):
        function = call.get('function') if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get('name'), str) \
                or not isinstance(function.get('arguments'), str):
            raise _failure('unstreamed_malformed', f'unstreamed tool call {number} has no function name and '
                                                   'arguments')
        calls.append(AnsweredCall(function['name'], function['arguments']))
    reasoning = message.get('reasoning') if message.get('reasoning') is not None else message.get('reasoning_content')
    if not isinstance(reasoning, (str, type(None))):
        raise _failure('unstreamed_malformed', f'the unstreamed answer\'s reasoning is {_seen(reasoning)}')
    return Answer(_field(message, 'content', (str, type(None)), 'content') or '', reasoning or '', tuple(calls),
                  _field(choice, 'finish_reason', (str, type(None)), 'finish_reason'),
                  _usage(body, 'completion_tokens'), _token_list(choice.get('token_ids')))


def _unstreamed_completion(body: dict) -> Answer:
    choice = _one_choice(body)
    return Answer(_field(choice, 'text', (str,), 'text'), '', (),
                  _field(choice, 'finish_reason', (str, type(None)), 'finish_reason'),
                  _usage(body, 'completion_tokens'), _token_list(choice.get('token_ids')))


def _unstreamed_response(body: dict) -> Answer:
    output = _field(body, 'output', (list,), 'output')
    items = [item for item in output if isinstance(item, dict)]
    calls = tuple(AnsweredCall(item.get('name'), item.get('arguments')) for item in items
                  if item.get('type') == 'function_call')
    if any(not isinstance(call.name, str) or not isinstance(call.arguments, str) for call in calls):
        raise _failure('unstreamed_malformed', 'an unstreamed function call has no name and arguments')
    reasoning = ''.join(part.get('text') or '' for item in items if item.get('type') == 'reasoning'
                        for part in (item.get('content') if isinstance(item.get('content'), list) else [])
                        if isinstance(part, dict))
    details = body.get('incomplete_details')
    return Answer(_output_text(output), reasoning, calls,
                  _responses_finish(body.get('status'), details.get('reason') if isinstance(details, dict) else None),
                  _usage(body, 'output_tokens'))


def _unstreamed_message(body: dict) -> Answer:
    blocks = [block for block in _field(body, 'content', (list,), 'content') if isinstance(block, dict)]
    calls = []
    for block in blocks:
        if block.get('type') == 'tool_use':
            if not isinstance(block.get('name'), str) or 'input' not in block:
                raise _failure('unstreamed_malformed', 'an unstreamed tool_use block has no name and input')
            calls.append(AnsweredCall(block['name'], json.dumps(block['input'], ensure_ascii=False), False))
    return Answer(''.join(block.get('text') or '' for block in blocks if block.get('type') == 'text'),
                  ''.join(block.get('thinking') or '' for block in blocks if block.get('type') == 'thinking'),
                  tuple(calls), _field(body, 'stop_reason', (str, type(None)), 'stop_reason'),
                  _usage(body, 'output_tokens'))


_UNSTREAMED_ANSWERS = {'chat': _unstreamed_chat, 'completions': _unstreamed_completion,
                      'responses': _unstreamed_response, 'messages': _unstreamed_message}


def unstreamed_answer(api: str, data: bytes) -> Answer:
    """The answer in the body of an unstreamed (``stream: false``) response with status 200, judged in
    its own right: strict JSON, one choice, its text, reasoning, tool calls, finish, usage and token
    ids. StreamError when it is not one."""
    return _UNSTREAMED_ANSWERS[api](_unstreamed_body(data))


def _first_divergence(streamed: tuple[int, ...], unstreamed: tuple[int, ...]) -> int | None:
    """The index of the first token that differs (or where the shorter one ends); None when they are equal."""
    if streamed == unstreamed:
        return None
    return next((index for index, (a, b) in enumerate(zip(streamed, unstreamed)) if a != b),
                min(len(streamed), len(unstreamed)))


def _text_difference(what: str, streamed: str, unstreamed: str) -> str:
    at = len(os.path.commonprefix([streamed, unstreamed]))
    window = slice(max(0, at - 20), at + 40)
    return (f'streamed {what} and unstreamed differ from character {at}: {_preview(streamed[window])} '
            f'and {_preview(unstreamed[window])}')


def _same_json(streamed: str, unstreamed: str) -> bool:
    try:
        return _json_key(strict_json(streamed)) == _json_key(strict_json(unstreamed))
    except ValueError:
        return False


def _call_difference(index: int, streamed: AnsweredCall, unstreamed: AnsweredCall) -> str | None:
    """How two tool calls differ: by name, or by arguments as JSON. Arguments equal as JSON but not as text
    are the same call: vLLM 0.32's unstreamed path re-serializes them (json.dumps), whitespace and all."""
    if streamed.name != unstreamed.name:
        return f'streamed tool call {index} is {streamed.name!r} and unstreamed {unstreamed.name!r}'
    if streamed.arguments == unstreamed.arguments or _same_json(streamed.arguments, unstreamed.arguments):
        return None
    return (f'streamed tool call {index} has arguments {_shorten(streamed.arguments, 80)} and unstreamed '
            f'{_shorten(unstreamed.arguments, 80)}')


def _text_only_differences(streamed: Answer, unstreamed: Answer) -> list[str]:
    """What differs without being a difference, kept in the record: the stream's white-space text the
    unstreamed path drops beside calls, and tool calls whose arguments are equal as JSON but not as text."""
    dropped = [f'the streamed text {_preview(streamed.text)} is white space only, which the unstreamed answer '
               'drops beside its tool calls'] if _white_space_dropped(streamed, unstreamed) else []
    return dropped + [f'tool call {index} has arguments equal as JSON, not as text' for index, (a, b)
                      in enumerate(zip(streamed.calls, unstreamed.calls))
                      if a.name == b.name and b.textual and a.arguments != b.arguments
                      and _same_json(a.arguments, b.arguments)]


def _white_space_dropped(streamed: Answer, unstreamed: Answer) -> bool:
    """Whether the texts differ only as vLLM's two paths promise when calls were made: the stream keeps
    content that is only white space (Qwen3's "\n\n" after its reasoning), the unstreamed path drops it
    (vLLM 0.32, parser/abstract_parser.py: ``if content and content.strip() == "": content = None``
    once calls are extracted). Python's own str.strip, as vLLM's."""
    return bool(unstreamed.calls) and unstreamed.text == '' and streamed.text != '' and not streamed.text.strip()


def _with_pairs_joined(answer: Answer) -> Answer:
    """The answer with each surrogate pair in its text, reasoning and arguments joined (_paired)."""
    return dataclasses.replace(answer, text=_paired(answer.text), reasoning=_paired(answer.reasoning),
                               calls=tuple(call._replace(arguments=_paired(call.arguments)) for call in answer.calls))


def compare_answers(streamed: Answer, unstreamed: Answer) -> list[str]:
    """The differences between a streamed answer and its unstreamed twin in the user's terms, the first
    first: text and reasoning, the tool calls (names and order, arguments as JSON; ids may differ), the
    finish and the completion-token count. Empty when they are the same answer. A surrogate pair split
    between two deltas is the character the twin carries whole (_paired); white space alone as the stream's
    text beside calls, which the unstreamed path drops, is a note (_text_only_differences)."""
    streamed, unstreamed = _with_pairs_joined(streamed), _with_pairs_joined(unstreamed)
    differences = [_text_difference(what, a, b) for what, a, b in (('text', streamed.text, unstreamed.text),
                                                                    ('reasoning', streamed.reasoning,
                                                                     unstreamed.reasoning))
                   if a != b and not (what == 'text' and _white_space_dropped(streamed, unstreamed))]
    if len(streamed.calls) != len(unstreamed.calls):
        differences.append(f'the stream has {_count(len(streamed.calls), "tool call")} and the unstreamed '
                           f'answer {len(unstreamed.calls)}')
    differences += [problem for index, pair in enumerate(zip(streamed.calls, unstreamed.calls))
                    for problem in [_call_difference(index, *pair)] if problem]
    if streamed.finish != unstreamed.finish and unstreamed.finish is not None:  # None: unstreamed_problem says so
        differences.append(f'streamed finish {streamed.finish} and unstreamed {unstreamed.finish}')
    if None not in (streamed.completion_tokens, unstreamed.completion_tokens) \
            and streamed.completion_tokens != unstreamed.completion_tokens:
        differences.append(f'streamed usage counts {_count(streamed.completion_tokens, "completion token")} and '
                           f'unstreamed {unstreamed.completion_tokens}')
    return differences


def cross_check_record(streamed: Answer, status: int | None, unstreamed: Answer | None,
                       problem: str | None, budget: int | None = None) -> dict:
    """The record's ``cross_check``: whether the pair is comparable (both sent token ids: true when they
    are equal, false when they diverge; null without them), whether the answers are the same, and how
    they differ. ``problem`` says why the unstreamed request failed, or why its answer is not finished.
    ``budget``: the twin was given that many tokens, one more than the stream used (_budget_proof_wanted)."""
    streamed_ids = streamed.token_ids
    unstreamed_ids = unstreamed.token_ids if unstreamed is not None else None
    comparable = None if streamed_ids is None or unstreamed_ids is None else streamed_ids == unstreamed_ids
    differences = compare_answers(streamed, unstreamed) if unstreamed is not None else []
    return {'comparable': comparable, 'same': None if unstreamed is None else not differences,
            'differences': differences,
            'notes': _text_only_differences(streamed, unstreamed) if unstreamed is not None else [],
            'diverged_at_token': _first_divergence(streamed_ids, unstreamed_ids) if comparable is False else None,
            'token_ids': {'streamed': None if streamed_ids is None else len(streamed_ids),
                          'unstreamed': None if unstreamed_ids is None else len(unstreamed_ids)},
            'completion_tokens': {'streamed': streamed.completion_tokens,
                                  'unstreamed': unstreamed.completion_tokens if unstreamed else None},
            'unstreamed_max_tokens': budget, 'ended_by_itself': _ended_by_itself(streamed, unstreamed, budget)
            if budget is not None else None,
            'unstreamed_status': status, 'unstreamed_finish': unstreamed.finish if unstreamed else None,
            'unstreamed_problem': problem,
            'unstreamed_text': unstreamed.text if unstreamed else None,
            'unstreamed_tool_calls': [{'name': call.name, 'arguments': call.arguments}
                                      for call in unstreamed.calls] if unstreamed else None}


def _seeded(extra: object) -> bool:
    """Whether --extra fixes the sampling seed: an integer "seed" (null or a string fixes nothing)."""
    return isinstance(extra, dict) and type(extra.get('seed')) is int


def _unstreamed_problem(answer: Answer, expect_finish: str = 'stop') -> str | None:
    """Why an unstreamed answer is not a finished one, judged by its finish alone (a fixed-length load
    expects the budget to end it)."""
    if answer.ended_as in (('length',) if expect_finish == 'length' else ('stop', 'tool_calls')):
        return None
    said = 'it has no finish' if answer.finish is None else f'its finish is {answer.finish}'
    return f'the unstreamed answer did not finish: {said}'


def _cross_check_failure(cross_check: dict | None) -> StreamError | None:
    """The cross-check failure of a pair: the same tokens, another answer. Pairs without token ids, or
    whose tokens diverged, never fail: a different generation cannot be ruled out."""
    if not cross_check or cross_check['comparable'] is not True or cross_check['same'] is not False:
        return None
    return _failure('cross_check_differs', f'the same {_count(cross_check["token_ids"]["streamed"], "token")}, '
                                           f'but {cross_check["differences"][0]}')
