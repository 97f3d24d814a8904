"""The Responses API's events, as a grammar (docs/apis.md).

``ResponseEvents``: output items and their content parts, each opened, filled
by deltas and closed by a copy that must equal what the deltas assembled.
"""
import json

from ._limits import _failure, _preview, _shorten
from ._sse import TypedEvents
from ._json import _same_text
from ._dialects import Dialect, _RESPONSES_UNNUMBERED, _RESPONSES_UNTYPED
from ._validator import AnswerSpec, _NOTHING, Pieces, _reported_count, StreamValidator, ToolCall
from ._chat import _token_count


_RESPONSE_TERMINALS = ('response.completed', 'response.incomplete', 'response.failed', 'error')
_RESPONSE_ITEMS = {'message': 'message', 'reasoning': 'reasoning item', 'function_call': 'function call'}
# The output items each part event may be for: vLLM opens and closes a reasoning item's text with
# response.reasoning_part.added and .done (or with no part event at all, the first delta opening it).
# The events of a whole item, which carry no content_index.
_ITEM_EVENTS = ('response.output_item.added', 'response.output_item.done', 'response.function_call_arguments.delta',
                'response.function_call_arguments.done')
_PART_ITEMS = {'response.content_part.added': ('message', 'reasoning'),
               'response.content_part.done': ('message', 'reasoning'),
               'response.reasoning_part.added': ('reasoning',), 'response.reasoning_part.done': ('reasoning',)}


class _Part:
    """One part of an answer: an output item or one of its content parts, or a content block. Its type
    and id, whether it is still open, the text assembled for it and whether that text was closed
    (a .done event), its tool call, and an item's content parts by index."""

    __slots__ = ('kind', 'id', 'open', 'pieces', 'text_done', 'call', 'parts')

    def __init__(self, kind: str, part_id: object = None, call: ToolCall | None = None) -> None:
        self.kind, self.id, self.call = kind, part_id, call
        self.open, self.text_done = True, False
        self.pieces: list[str] = []
        self.parts: list[_Part] = []

    @property
    def text(self) -> str:
        return ''.join(self.pieces)


class ResponseEvents(StreamValidator):
    """Validates one streamed response of the Responses API (/v1/responses), as a grammar (docs/apis.md).

    Every event's ``event`` field names the ``type`` in its data, and
    ``sequence_number`` counts up from 0 by 1. ``response.created`` comes
    first; each output item opens at the next ``output_index`` with an id of
    its own and closes with ``response.output_item.done``; a message's text
    arrives in content parts, a reasoning item's and a function call's in
    their deltas, each closed by its ``.done``. A closed part accepts nothing
    more, and every closing copy (each ``.done``, ``output_item.done``, the
    terminal event's ``output``) must equal what the deltas assembled. One
    terminal event ends the stream, with every item closed. Its name is not
    trusted: vLLM 0.32 ends a budget-exhausted response with
    ``response.completed`` whose status is "incomplete", so the outcome is
    read from ``response.status``. An unknown event type is skipped and listed.
    """

    api = 'responses'
    parser = TypedEvents

    def __init__(self, expect_finish: str = 'stop', max_tokens: int | None = None,
                 spec: AnswerSpec | None = None, dialect: Dialect | None = None) -> None:
        super().__init__(expect_finish, max_tokens, spec, dialect)
        self.items: list[_Part] = []  # the output items, by output_index
        self._item_ids: set = set()
        self.created = False
        self.terminal_event: str | None = None
        self.status: str | None = None
        self.incomplete_reason: str | None = None
        self._sequence = 0
        self.done_marker = False  # the litellm dialect's data: [DONE] after the terminal event came
        self._item_keys: dict = {}  # an item's id (a function call's call_id without one) to its output_index

    @property
    def terminal(self) -> str:
        return self.terminal_event or 'the terminal event'

    def accept(self, event: tuple[str, str]) -> Pieces:
        """Apply one (type, data) event; return the answer text, reasoning text and tool-call piece it carried."""
        if self._done_marker_allowed(event):
            self.done_marker = True
            return _NOTHING
        kind, body = self._typed_body(event, f'the terminal event {self.terminal_event}')
        sequence = body.get('sequence_number')
        unnumbered = self.dialect.allows(_RESPONSES_UNNUMBERED)
        if not (unnumbered and sequence is None):
            if type(sequence) is not int or sequence != self._sequence:
                raise _failure('sequence_number', f'expected sequence_number {self._sequence}, got '
                                                  f'{_shorten(repr(sequence))} in {kind}: an event was lost or '
                                                  'repeated')
            self._sequence += 1
        take = self._GRAMMAR.get(kind)
        if take is None:  # not an event of the grammar below: skipped, and listed in the record
            self.skipped_events.append(kind)
            return _NOTHING
        if unnumbered:
            body = self._placed(kind, body)
        if not self.created and kind not in ('response.created', 'error'):
            raise _failure('event_out_of_order', f'{kind} arrived in event {self.data_events}, before response.created')
        return take(self, body)

    def _placed(self, kind: str, body: dict) -> dict:
        """An event of the llama.cpp dialect with the indices it leaves out put in: a new item at the next
        output_index, another event at the item its item_id (or, for output_item.done, its item's id or
        call_id) names, a new part at the item's next content_index, another at its last part. An event
        that names no known item is left without an index, which the grammar refuses (part_not_open)."""
        body = dict(body)
        if kind == 'response.output_item.added':
            body.setdefault('output_index', len(self.items))
            return body
        if 'output_index' not in body:
            key = body.get('item_id')
            copy = body.get('item')
            if key is None and isinstance(copy, dict):
                key = copy.get('id') if copy.get('id') is not None else copy.get('call_id')
            index = self._item_keys.get(key) if isinstance(key, str) else None
            if index is not None:
                body['output_index'] = index
                if self.items[index].id is None:  # a call named by its call_id: no item id to compare
                    body.pop('item_id', None)
        index = body.get('output_index')
        if 'content_index' not in body and kind not in _ITEM_EVENTS and type(index) is int \
                and 0 <= index < len(self.items):
            parts = self.items[index].parts
            body['content_index'] = len(parts) if kind.endswith('_part.added') else max(len(parts) - 1, 0)
        return body

    def _done_marker_allowed(self, event: tuple[str, str]) -> bool:
        """Whether this is the one data: [DONE] the litellm dialect sends after the terminal event."""
        return (self.done and not self.done_marker and event == ('message', '[DONE]')
                and self.dialect.allows(_RESPONSES_UNTYPED))

    def _take_created(self, body: dict) -> Pieces:
        if self.created:
            raise _failure('event_out_of_order', f'a second response.created in event {self.data_events}')
        self.created = True
        return self._take_started(body)

    def _take_started(self, body: dict) -> Pieces:
        response = body.get('response')
        if self.response_id is None and isinstance(response, dict) and isinstance(response.get('id'), str):
            self.response_id = response['id']
        return _NOTHING

    def _take_item(self, body: dict) -> Pieces:
        item, index, event = body.get('item'), body.get('output_index'), self.data_events
        kind = item.get('type') if isinstance(item, dict) else None
        if kind not in _RESPONSE_ITEMS:
            raise _failure('unsupported_part', f'an output item of type {_shorten(repr(kind))} arrived in event '
                                               f'{event}; this client reads messages, reasoning and function calls')
        self._next_index(index, self.items, f'an output item at output_index {_shorten(repr(index))}')
        if item.get('id') is not None and not isinstance(item['id'], str):
            raise _failure('field_type', f'expected the id of output item {index} to be a string in event {event}, '
                                         f'got {type(item["id"]).__name__}')
        if item.get('id') is not None and item['id'] in self._item_ids:
            raise _failure('duplicate_id', f'output item {index} in event {event} reuses the id '
                                           f'{_preview(str(item["id"]))} of an earlier item')
        call = self._open_call(item) if kind == 'function_call' else None
        self._item_ids.add(item.get('id'))
        key = item.get('id') if item.get('id') is not None else item.get('call_id')
        if isinstance(key, str):
            self._item_keys.setdefault(key, len(self.items))
        self.items.append(_Part(kind, item.get('id'), call))
        return Pieces(call=self._shown(call, opening=True) if call else '')

    def _next_index(self, index: object, parts: list, what: str) -> None:
        """A part opens at the next index of its list: not at one already taken, and without skipping."""
        if index == len(parts) and type(index) is int:
            return
        if type(index) is int and 0 <= index < len(parts):
            raise _failure('duplicate_part', f'a second part opened as {what} in event {self.data_events}')
        raise _failure('part_index_skips', f'{what} opened in event {self.data_events}: the next was {len(parts)}')

    def _open_call(self, item: dict) -> ToolCall:
        event = self._offered_tools('a function call')
        call_id, name = item.get('call_id'), item.get('name')
        if not isinstance(call_id, str) or not call_id or not isinstance(name, str) or not name:
            raise _failure('call_without_id', f'a function call opened in event {event} without a call_id and a name')
        return self._new_call('a function call', call_id, name)

    def _open_item(self, body: dict, kinds: tuple[str, ...]) -> _Part:
        """The open output item (of one of these types) that the event is for."""
        index, kind, event = body.get('output_index'), body['type'], self.data_events
        item = self.items[index] if type(index) is int and 0 <= index < len(self.items) else None
        if item is None or item.kind not in kinds:
            raise _failure('part_not_open', f'{kind} in event {event} is for output_index {_shorten(repr(index))}, '
                                            f'where no {_RESPONSE_ITEMS[kinds[0]]} opened')
        if not item.open:
            raise _failure('event_after_close', f'{kind} in event {event} for output item {index}, after its '
                                                'response.output_item.done')
        if body.get('item_id', item.id) != item.id:
            raise _failure('part_not_open', f'{kind} in event {event} is for the item '
                                            f'{_preview(str(body["item_id"]))}, but output item {index} is '
                                            f'{_preview(str(item.id))}')
        return item

    def _open_part(self, body: dict, kinds: tuple[str, ...], closed_by: str | None) -> tuple[_Part, _Part]:
        """The output item and its open content part that the event is for, whose text ``closed_by``
        (when given) has not closed yet."""
        item = self._open_item(body, kinds)
        index, kind, event = body.get('content_index'), body['type'], self.data_events
        if item.kind == 'reasoning' and index == len(item.parts):
            item.parts.append(_Part('reasoning_text'))  # vLLM 0.32 sends no content_part.added for reasoning text
        part = item.parts[index] if type(index) is int and 0 <= index < len(item.parts) else None
        if part is None:
            raise _failure('part_not_open', f'{kind} in event {event} is for content part {_shorten(repr(index))} '
                                            f'of output item {body["output_index"]}, which never opened '
                                            '(no response.content_part.added)')
        if not part.open or (part.text_done and closed_by):
            after = closed_by if part.open else 'response.content_part.done'
            raise _failure('event_after_close', f'{kind} in event {event} for content part {index} of output item '
                                                f'{body["output_index"]}, after its {after}')
        return item, part

    def _take_part_added(self, body: dict) -> Pieces:
        item = self._open_item(body, _PART_ITEMS[body['type']])
        index = body.get('content_index')
        self._next_index(index, item.parts,
                         f'content part {_shorten(repr(index))} of output item {body["output_index"]}')
        part = body.get('part') if isinstance(body.get('part'), dict) else {}
        item.parts.append(_Part(part.get('type')))
        return _NOTHING

    def _take_part_done(self, body: dict) -> Pieces:
        """A content part's closing copy: an output_text or reasoning_text part (every part of
        response.reasoning_part.done is one) must hold the text its deltas assembled."""
        _, part = self._open_part(body, _PART_ITEMS[body['type']], None)
        copy = body.get('part') if isinstance(body.get('part'), dict) else {}
        if copy.get('type') in ('output_text', 'reasoning_text') or body['type'] == 'response.reasoning_part.done':
            self._check_same(body['type'], copy.get('text'), part.text)
        elif copy.get('type') == 'refusal':
            self._check_same(body['type'], copy.get('refusal'), part.text)
        part.open = False
        return _NOTHING

    def _take_delta(self, body: dict) -> Pieces:
        """A piece of a message's text or of a reasoning item's, for its open part."""
        reasoning = body['type'] == 'response.reasoning_text.delta'
        _, part = self._open_part(body, ('reasoning',) if reasoning else ('message',),
                                  body['type'].replace('.delta', '.done'))
        delta = self._string(body, 'delta')
        part.pieces.append(delta)
        if delta:
            (self._add_reasoning if reasoning else self._add_text)(delta)
        return Pieces(reasoning=delta) if reasoning else Pieces(text=delta)

    def _take_refusal_delta(self, body: dict) -> Pieces:
        """A piece of the model's refusal, in a message's refusal part: kept apart from the answer."""
        _, part = self._open_part(body, ('message',), 'response.refusal.done')
        delta = self._string(body, 'delta')
        part.pieces.append(delta)
        if delta:
            self._add_refusal(delta)
        return _NOTHING

    def _take_refusal_done(self, body: dict) -> Pieces:
        _, part = self._open_part(body, ('message',), 'response.refusal.done')
        self._check_same('response.refusal.done', self._string(body, 'refusal'), part.text)
        part.text_done = True
        return _NOTHING

    def _take_text_done(self, body: dict) -> Pieces:
        kinds = ('reasoning',) if body['type'] == 'response.reasoning_text.done' else ('message',)
        _, part = self._open_part(body, kinds, body['type'])
        self._check_same(body['type'], self._string(body, 'text'), part.text)
        part.text_done = True
        return _NOTHING

    def _open_arguments(self, body: dict) -> ToolCall:
        item = self._open_item(body, ('function_call',))
        if item.text_done:
            raise _failure('event_after_close', f'{body["type"]} in event {self.data_events} for tool call '
                                                f'{item.call.index} ({item.call.name}), after its '
                                                'response.function_call_arguments.done')
        return item

    def _take_arguments_delta(self, body: dict) -> Pieces:
        call, delta = self._open_arguments(body).call, self._string(body, 'delta')
        if not delta:
            return _NOTHING
        self._add_call_arguments(call, delta)
        return Pieces(call=self._shown(call, delta))

    def _take_arguments_done(self, body: dict) -> Pieces:
        item = self._open_arguments(body)
        self._check_arguments('response.function_call_arguments.done', item.call, self._string(body, 'arguments'))
        if body.get('name', item.call.name) != item.call.name:
            raise _failure('closing_copy_differs', f'response.function_call_arguments.done in event {self.data_events} '
                                                   f'names {_preview(str(body["name"]))}, but tool call '
                                                   f'{item.call.index} opened as {item.call.name!r}')
        item.text_done = True
        return _NOTHING

    def _take_item_done(self, body: dict) -> Pieces:
        item = self._open_item(body, tuple(_RESPONSE_ITEMS))
        still_open = [index for index, part in enumerate(item.parts) if part.open and part.kind != 'reasoning_text']
        if still_open:
            raise _failure('part_still_open', f'response.output_item.done in event {self.data_events} while content '
                                              f'part {still_open[0]} of output item {body["output_index"]} was still '
                                              'open (no response.content_part.done)')
        self._check_item('response.output_item.done', item, body.get('item'))
        item.open = False
        return _NOTHING

    def _check_item(self, source: str, item: _Part, copy: object) -> None:
        """A closing copy of an output item must be the item the stream opened and assembled."""
        copy = copy if isinstance(copy, dict) else {}
        if (copy.get('type'), copy.get('id')) != (item.kind, item.id):
            raise _failure('closing_copy_differs', f'{source} says output item {self.items.index(item)} is '
                                                   f'{_shorten(repr(copy.get("type")))} '
                                                   f'{_shorten(repr(copy.get("id")))}, '
                                                   f'but it opened as {item.kind!r} {_shorten(repr(item.id))}')
        if item.call is not None:
            self._check_arguments(source, item.call, copy.get('arguments'))
        elif item.kind == 'message':
            self._check_same(source, _output_text([copy]),
                             ''.join(part.text for part in item.parts if part.kind != 'refusal'))
        elif copy.get('content'):
            claimed = ''.join(part.get('text') or '' for part in copy['content'] if isinstance(part, dict))
            self._check_same(source, claimed, ''.join(part.text for part in item.parts))

    def _check_arguments(self, source: str, call: ToolCall, claimed: object) -> None:
        if not _same_text(claimed, call.arguments):
            raise _failure('closing_copy_differs', f'{source} says tool call {call.index} ({call.name}) has the '
                                                   f'arguments {_preview(str(claimed))}, but its deltas assembled '
                                                   f'{_preview(call.arguments)}')

    def _take_terminal(self, body: dict) -> Pieces:
        kind = body['type']
        self.terminal_event, self.done = kind, True
        response = body.get('response') if isinstance(body.get('response'), dict) else {}
        if kind == 'error':
            raise self._server_error({'message': body.get('message'), 'code': body.get('code')})
        if kind == 'response.failed':
            raise self._server_error(response.get('error') or {'message': 'no error given'}, 'response.failed')
        still_open = [index for index, item in enumerate(self.items) if item.open]
        if still_open:
            raise _failure('part_still_open', f'{kind} in event {self.data_events} while output item {still_open[0]} '
                                              'was still open (no response.output_item.done)')
        self._take_started(body)
        self.status = response.get('status') if isinstance(response.get('status'), str) else None
        details = response.get('incomplete_details')
        reason = details.get('reason') if isinstance(details, dict) else None
        self.incomplete_reason = reason if isinstance(reason, str) else None
        if response.get('usage') is not None:
            self.completion_tokens = _token_count(response['usage'], 'output_tokens')
            self.prompt_tokens = _reported_count(response['usage'], 'input_tokens')
        output = response.get('output') if isinstance(response.get('output'), list) else []
        self._check_same(kind, _output_text(output), self.text)
        self._check_output_calls(kind, output)
        claimed = [item.get('id') if isinstance(item, dict) else None for item in output]
        if claimed != [item.id for item in self.items]:
            raise _failure('closing_copy_differs', f'{kind} lists the output items {_preview(json.dumps(claimed))}, '
                                                   'but the stream opened '
                                                   f'{_preview(json.dumps([i.id for i in self.items]))}')
        return _NOTHING

    def _check_output_calls(self, kind: str, output: list) -> None:
        """The terminal event's function calls must be the ones the stream assembled, in order."""
        claimed = [(item.get('call_id'), item.get('name'), item.get('arguments'))
                   for item in output if isinstance(item, dict) and item.get('type') == 'function_call']
        assembled = [(call.id, call.name, call.arguments) for call in self.calls]
        if len(claimed) != len(assembled) or not all(
                said[:2] == made[:2] and _same_text(said[2], made[2]) for said, made in zip(claimed, assembled)):
            raise _failure('closing_copy_differs', f'{kind} lists the function calls {_preview(json.dumps(claimed))}, '
                                                   f'but the stream assembled {_preview(json.dumps(assembled))}')

    # The grammar: each event type this client reads, and what takes it. An event for a part that is not
    # open (or whose text its .done closed) is refused by the part lookups above.
    _GRAMMAR = {'response.created': _take_created, 'response.in_progress': _take_started,
                'response.output_item.added': _take_item, 'response.output_item.done': _take_item_done,
                'response.content_part.added': _take_part_added, 'response.content_part.done': _take_part_done,
                'response.reasoning_part.added': _take_part_added, 'response.reasoning_part.done': _take_part_done,
                'response.output_text.delta': _take_delta, 'response.output_text.done': _take_text_done,
                'response.refusal.delta': _take_refusal_delta, 'response.refusal.done': _take_refusal_done,
                'response.reasoning_text.delta': _take_delta,
                'response.reasoning_text.done': _take_text_done,
                'response.function_call_arguments.delta': _take_arguments_delta,
                'response.function_call_arguments.done': _take_arguments_done,
                **dict.fromkeys(_RESPONSE_TERMINALS, _take_terminal)}

    @staticmethod
    def _string(body: dict, key: str) -> str:
        value = body.get(key)
        if not isinstance(value, str):
            raise _failure('field_type', f'expected {key} to be a string in {body["type"]}, '
                                         f'got {type(value).__name__}')
        return value

    @staticmethod
    def _check_same(source: str, claimed: object, assembled: str) -> None:
        if not _same_text(claimed, assembled):
            claimed = str(claimed)
            raise _failure('closing_copy_differs', f'{source} says the text is {_preview(claimed)} '
                                                   f'({len(claimed)} characters) but the deltas assembled '
                                                   f'{_preview(assembled)} ({len(assembled)})')

    eof_words = 'a terminal event (response.completed)'
    stop_words = 'status "completed"'
    length_words = 'status "incomplete" with incomplete_details.reason=max_output_tokens'
    budget_words = 'output budget exhausted: {}'

    def finish(self) -> str:
        # vLLM 0.32 ends a budget-exhausted response with response.completed whose status is "incomplete"
        if self.status == 'completed':
            if self._budget_used():
                return 'length'
            return 'calls' if self.calls else 'stop'
        return 'length' if self.status == 'incomplete' and self.incomplete_reason == 'max_output_tokens' else 'other'

    def _budget_used(self) -> bool:
        """The llama.cpp dialect's proof: its status says "completed" whatever ended the answer, so the
        usage must show the budget (max_output_tokens) not used up."""
        return (self.dialect.allows(_RESPONSES_UNNUMBERED) and self.completion_tokens is not None
                and self.max_tokens is not None and self.completion_tokens >= self.max_tokens)

    def outcome(self):
        if (self.done and self.status == 'completed' and self.dialect.allows(_RESPONSES_UNNUMBERED)
                and (self.completion_tokens is None or self.max_tokens is None)):
            missing = 'usage.output_tokens' if self.completion_tokens is None else 'the max_output_tokens asked for'
            return _failure('dialect_unproven', f'{self.terminal_event} says "completed", which the '
                                                f'{self.dialect.name} dialect says also when max_output_tokens cut '
                                                f'the answer, and without {missing} the budget cannot be shown unused')
        return super().outcome()

    def finish_words(self) -> str:
        carries = f'{self.terminal_event} carries status {self.status!r}'
        if self._budget_used():
            return (f'{carries}, but usage.output_tokens {self.completion_tokens} reached max_output_tokens '
                    f'{self.max_tokens} ({self.dialect.name} says "completed" also when the budget cut the answer)')
        return carries + (f' (incomplete_details.reason={self.incomplete_reason})' if self.status == 'incomplete'
                          else '')

    def finished_words(self) -> str:
        return self.finish_words()

    def unexpected_words(self, words: str) -> str:
        return f'not completed: {words}'

    def fields(self) -> dict:
        return {**super().fields(), 'finish_reason': None, 'response_status': self.status,
                'incomplete_reason': self.incomplete_reason}


def _output_text(output: object) -> str:
    """The text of the message items in a response's output."""
    return ''.join(part.get('text') or '' for item in (output if isinstance(output, list) else [])
                   if isinstance(item, dict) and item.get('type') == 'message'
                   for part in (item.get('content') if isinstance(item.get('content'), list) else [])
                   if isinstance(part, dict) and part.get('type') == 'output_text')
