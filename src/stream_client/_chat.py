"""Chat completions and completions chunks, as a grammar (docs/apis.md).

``ChatChunks`` and ``CompletionChunks`` share ``_ChoiceChunks``: one choice,
open until its finish_reason, then closed until ``data: [DONE]``.
"""
import json

from ._limits import _failure, _preview, _shorten
from ._dialects import _CALLS_WITHOUT_FINISH, _detect_in_chunk
from ._validator import _NOTHING, Pieces, _reported_count, StreamValidator


def _carries_nothing(value: object) -> bool:
    """Whether a chunk's value carries nothing for the answer: null, an empty string or list, or an object
    of such values. LiteLLM ends every stream with usage and ``"choices": [{"index": 0, "delta": {}}]``
    where OpenAI and vLLM send ``"choices": []``: an entry for a closed choice that cannot change it."""
    if isinstance(value, dict):
        return all(_carries_nothing(item) for item in value.values())
    return value is None or value == '' or value == []


class _ChoiceChunks(StreamValidator):
    """What chat and completions chunks share: one choice (n=1) with index 0, a usage chunk,
    in-band error objects, a finish_reason and the terminal data: [DONE].

    The grammar: the choice is open until its finish_reason, which closes it
    and its tool calls; a closed choice accepts no text, reasoning, tool-call
    piece, role or second finish_reason, only usage, entries that carry nothing
    (``_carries_nothing()``) and [DONE], after which nothing is accepted.
    """

    token_noun = 'completion token'
    finish_reason: str | None = None  # until the choice's finish_reason arrives

    def accept(self, data: str) -> Pieces:
        """Apply one event's data; return the answer text, reasoning text and tool-call piece it carried."""
        if self.done:
            raise _failure('event_after_terminal', f'event after [DONE]: {_preview(data)}')
        self.data_events += 1
        if data == '[DONE]':
            self.done = True
            return _NOTHING
        chunk = self._load_object(data)
        if chunk.get('error') is not None:  # "error": null is no error
            raise self._server_error(chunk)
        if not self.dialect_chosen:
            found = _detect_in_chunk(chunk)
            if found is not None:
                self.detected(found)
        if self.response_id is None and isinstance(chunk.get('id'), str):
            self.response_id = chunk['id']
        usage = chunk.get('usage')
        if usage is not None:
            self.completion_tokens = _token_count(usage, 'completion_tokens')
            self.prompt_tokens = _reported_count(usage, 'prompt_tokens')
        choices = chunk.get('choices')
        if choices is None or choices == []:
            return _NOTHING
        if not isinstance(choices, list) or len(choices) != 1:
            count = len(choices) if isinstance(choices, list) else type(choices).__name__
            raise _failure('choices_not_one', f'expected one choice per chunk (n=1), got {count}')
        choice = choices[0]
        if not isinstance(choice, dict) or choice.get('index') != 0:
            seen = choice.get('index') if isinstance(choice, dict) else choice
            raise _failure('choice_index', f'expected choice index 0, got {_shorten(repr(seen))}')
        if self.finish_reason is not None and _carries_nothing({**choice, 'index': None}):
            return _NOTHING  # a closed choice's empty entry, as LiteLLM's last (usage) chunk has
        token_ids = choice.get('token_ids')
        if token_ids is not None:
            self._take_token_ids(token_ids)
        closed_by = self.finish_reason
        carried = self._take_choice(choice)  # names what a closed choice got, if it carried anything
        if closed_by is not None:
            raise _failure('event_after_close', f'a chunk for choice 0 arrived in event {self.data_events}, after '
                                                f'finish_reason {closed_by!r} closed it')
        return carried

    def _take_choice(self, choice: dict) -> Pieces:
        raise NotImplementedError

    def _text_field(self, value: object, name: str) -> str | None:
        """A text field of the choice: a string or null, and no text after the finish."""
        if value is None or isinstance(value, str):
            if value and self.finish_reason is not None:
                raise _failure('event_after_close', f'{name} arrived after finish_reason={self.finish_reason}')
            return value
        raise _failure('field_type', f'expected {name} to be a string, got {type(value).__name__}')

    def _take_finish(self, reason: object) -> None:
        if reason is None:
            return
        if self.finish_reason is not None:
            raise _failure('event_after_close', f'a second finish_reason ({_preview(str(reason))}) '
                                                f'after finish_reason={self.finish_reason}')
        if not isinstance(reason, str):
            raise _failure('field_type', f'expected finish_reason to be a string, got {type(reason).__name__}')
        self.finish_reason = reason

    def _one_call_alone(self) -> bool:
        """Whether the answer has the one shape the tgi dialect excuses a missing finish_reason for: one
        tool call alone, with no text, reasoning or refusal beside it, as TGI's router streams a call
        (docs/dialects.md). Any other shape is judged by the vendor rules."""
        return (self.finish_reason is None and self.dialect.allows(_CALLS_WITHOUT_FINISH) and len(self.calls) == 1
                and not self.text_parts and not self.reasoning_parts and not self.refusal_parts)

    def finish(self) -> str | None:
        reason = self.finish_reason
        if self.done and self._one_call_alone():
            return 'calls'  # TGI: [DONE] ends its one call without a finish; the call's arguments must prove it
        if reason == 'stop' and self.calls and self.spec.named is not None:
            return 'calls'  # vLLM says tool_calls, or stop when the choice named the function (as OpenAI does)
        return None if reason is None else self._FINISHES.get(reason, 'other')

    _FINISHES = {'stop': 'stop', 'length': 'length', 'tool_calls': 'calls'}

    def finish_words(self) -> str:
        if self._one_call_alone():
            return f'[DONE] without a finish_reason after 1 tool call ({self.dialect.name} dialect)'
        return f'finish_reason={self.finish_reason}'

    def no_finish_words(self) -> str:
        words = super().no_finish_words()
        if not self.calls or not self.dialect.allows(_CALLS_WITHOUT_FINISH):
            return words
        beside = f'{len(self.calls)} tool calls' if len(self.calls) > 1 else 'text or reasoning beside its call'
        return (f'{words}: the {self.dialect.name} dialect excuses that for one tool call alone, and this answer '
                f'has {beside}')

    def fields(self) -> dict:
        return {**super().fields(), 'finish_reason': self.finish_reason}


class ChatChunks(_ChoiceChunks):
    """Validates the events of one streamed chat completion (n=1): the answer is ``delta.content``,
    or tool calls assembled from ``delta.tool_calls`` by index when tools were offered; reasoning is
    ``delta.reasoning`` (or the older ``reasoning_content``). A violation raises StreamError:
    ``protocol`` for a chunk this client cannot accept, ``application`` for a server error event or
    an answer over the size bound.
    """

    api = 'chat'

    def _take_choice(self, choice: dict) -> Pieces:
        delta = choice.get('delta')
        if delta is None:
            delta = {}
        elif not isinstance(delta, dict):
            raise _failure('field_type', f'expected delta to be an object, got {type(delta).__name__}')
        if delta.get('function_call'):
            raise _failure('legacy_function_call', 'a legacy function_call delta arrived; this client reads tool_calls')
        text = self._text_field(delta.get('content'), 'delta.content')
        reasoning = delta.get('reasoning')  # most chunks carry no reasoning and no refusal: no call for them
        if reasoning is not None:
            reasoning = self._text_field(reasoning, 'delta.reasoning')
        elif delta.get('reasoning_content') is not None:
            reasoning = self._text_field(delta['reasoning_content'], 'delta.reasoning_content')
        if text:
            if self.calls and text.strip():
                call = self.calls[-1]
                raise _failure('text_in_tool_call', f'content text {_preview(text)} arrived inside tool call '
                                                    f'{call.index} ({call.name}), in event {self.data_events}')
            self._add_text(text)
        if reasoning:
            self._add_reasoning(reasoning)
        refusal = delta.get('refusal')
        if refusal is not None and self._text_field(refusal, 'delta.refusal'):
            self._add_refusal(refusal)
        call = self._take_tool_deltas(delta['tool_calls']) if delta.get('tool_calls') else ''
        self._take_finish(choice.get('finish_reason'))
        return Pieces(text or '', reasoning or '', call)

    def _take_tool_deltas(self, deltas: object) -> str:
        """Assemble delta.tool_calls; return what they add, for display ('name(' as a call opens, then
        its arguments)."""
        event = self._offered_tools('tool call deltas')
        if self.finish_reason is not None:
            raise _failure('event_after_close', f'tool call deltas arrived in event {event}, after finish_reason '
                                                f'{self.finish_reason!r} closed the choice and its calls')
        if not isinstance(deltas, list):
            raise _failure('field_type', f'expected delta.tool_calls to be a list in event {event}, '
                                         f'got {type(deltas).__name__}')
        shown = []
        for delta in deltas:
            index = delta.get('index') if isinstance(delta, dict) else None
            function = delta.get('function') if isinstance(delta, dict) else None
            if type(index) is not int or index < 0 or not isinstance(function or {}, dict):
                raise _failure('bad_tool_call_delta', 'expected a tool call delta with an integer index and a '
                                                      f'function object in event {event}, got '
                                                      f'{_preview(json.dumps(delta))}')
            call_id, name, arguments = delta.get('id'), (function or {}).get('name'), (function or {}).get('arguments')
            for key, value in (('id', call_id), ('function.name', name), ('function.arguments', arguments)):
                if value is not None and not isinstance(value, str):
                    raise _failure('field_type', f'expected tool call {index} {key} to be a string in event '
                                                 f'{event}, got {type(value).__name__}')
            if index == len(self.calls):
                if not call_id or not name:
                    raise _failure('call_without_id', f'tool call {index} got arguments in event {event} but was never '
                                                      'opened with an id and a name')
                shown.append(self._shown(self._new_call(f'tool call {index}', call_id, name), opening=True))
            elif index > len(self.calls):
                raise _failure('part_index_skips', f'tool call index {index} in event {event} skips ahead: the next '
                                                   f'call to open was index {len(self.calls)}')
            else:
                call = self.calls[index]
                if call_id and call_id != call.id:
                    raise _failure('call_id_changed', f'tool call {index} ({call.name}) got a second id {call_id!r} in '
                                                      f'event {event}; it opened as {call.id!r}')
                if name and name != call.name:
                    raise _failure('call_name_changed', f'tool call {index} changed its name from {call.name!r} to '
                                                        f'{name!r} in event {event}')
            if arguments:
                self._add_call_arguments(self.calls[index], arguments)
                shown.append(self._shown(self.calls[index], arguments))
        return ''.join(shown)


class CompletionChunks(_ChoiceChunks):
    """Validates the events of one streamed completion (/v1/completions, n=1): the answer is
    ``choices[0].text``; otherwise the rules of chat chunks."""

    api = 'completions'

    def _take_choice(self, choice: dict) -> Pieces:
        text = self._text_field(choice.get('text'), 'text')
        if text:
            self._add_text(text)
        self._take_finish(choice.get('finish_reason'))
        return Pieces(text=text or '')


def _token_count(usage: object, key: str) -> int:
    count = usage.get(key) if isinstance(usage, dict) else None
    if type(count) is not int or count < 0:
        raise _failure('bad_usage', f'expected usage.{key} to be a non-negative integer, '
                                    f'got {_shorten(repr(count))}')
    return count
