"""The Anthropic-style Messages API's events, as a grammar (docs/apis.md).

``MessagesEvents``: the message, then content blocks that start, take deltas
and stop, then ``message_delta`` and ``message_stop``.
"""
import json

from ._limits import _failure, _shorten, StreamError
from ._sse import TypedEvents
from ._dialects import Dialect, _MESSAGES_BLOCKS_OVERLAP
from ._validator import AnswerSpec, _NOTHING, Pieces, _reported_count, StreamValidator
from ._chat import _token_count
from ._responses import _Part


# The Messages grammar. The message goes through these states, and each state accepts these events;
# ping and error are accepted in every state, and an event type named nowhere here is skipped and
# listed in the record, as Anthropic tells clients to do with event types they do not know.
_MESSAGE_STATES = {'unstarted': ('message_start',),
                  'content': ('content_block_start', 'content_block_delta', 'content_block_stop', 'message_delta',
                              'message_stop'),
                  'finishing': ('message_delta', 'message_stop')}
# A content block's type and the delta types it accepts; the field of each delta that carries its piece.
_BLOCK_DELTAS = {'text': ('text_delta', 'citations_delta'), 'thinking': ('thinking_delta', 'signature_delta'),
                'redacted_thinking': (), 'tool_use': ('input_json_delta',)}
_DELTA_PIECES = {'text_delta': 'text', 'thinking_delta': 'thinking', 'input_json_delta': 'partial_json'}


class MessagesEvents(StreamValidator):
    """Validates one streamed answer of the Anthropic Messages API (/v1/messages), as a grammar (docs/apis.md).

    Every event's ``event`` field names the ``type`` in its data. The message
    goes through ``_MESSAGE_STATES``: blocks numbered from 0 follow one another
    in ``content``, each content_block_start, its deltas (``_BLOCK_DELTAS``)
    and content_block_stop; the first message_delta, with every block
    stopped, moves it to ``finishing``; message_stop ends it. ``ping`` may
    come anywhere; an ``error`` event keeps the server's type and message.
    The answer is the text blocks; thinking blocks go to the reasoning; a
    tool_use block is a tool call whose input is its input_json_delta pieces.
    """

    api = 'messages'
    parser = TypedEvents
    terminal = 'message_stop'
    calls_finish = 'stop_reason=tool_use'

    def __init__(self, expect_finish: str = 'stop', max_tokens: int | None = None,
                 spec: AnswerSpec | None = None, dialect: Dialect | None = None) -> None:
        super().__init__(expect_finish, max_tokens, spec, dialect)
        self.state = 'unstarted'
        self.stop_reason: str | None = None
        self.stop_details: object = None  # Anthropic's details of a refusal
        self.blocks: list[_Part] = []

    def accept(self, event: tuple[str, str]) -> Pieces:
        """Apply one (type, data) event; return the answer text, reasoning text and tool-call piece it carried."""
        if event[0] == 'error' and not self.done:
            raise self._error_event(event[1])
        kind, body = self._typed_body(event, 'message_stop')
        take = self._TAKE.get(kind)
        if take is None:
            self.skipped_events.append(kind)
            return _NOTHING
        if kind != 'ping' and kind not in _MESSAGE_STATES[self.state]:
            raise self._out_of_state(kind)
        return take(self, body)

    def _error_event(self, data: str) -> StreamError:
        """An error event: Anthropic's ``{"type": "error", "error": {...}}``, or the bare error object
        (``{"message": ..., "type": ...}``) llama-server and others send, or text: the server's
        message is kept either way."""
        self.data_events += 1
        try:
            body = json.loads(data)
        except (ValueError, RecursionError):
            body = {'message': data}
        return self._server_error(body)

    def _out_of_state(self, kind: str) -> StreamError:
        event = self.data_events
        if self.state == 'unstarted':
            return _failure('event_out_of_order', f'{kind} arrived in event {event}, before message_start')
        if kind == 'message_start':
            return _failure('event_out_of_order', f'a second message_start in event {event}')
        return _failure('event_after_close', f'{kind} in event {event}, after message_delta ended the content')

    def _take_ping(self, body: dict) -> Pieces:
        return _NOTHING

    def _take_message_start(self, body: dict) -> Pieces:
        self.state = 'content'
        message = body.get('message')
        if isinstance(message, dict) and isinstance(message.get('id'), str):
            self.response_id = message['id']
        if isinstance(message, dict):
            self.prompt_tokens = _reported_count(message.get('usage'), 'input_tokens')
        return _NOTHING

    def _take_block_start(self, body: dict) -> Pieces:
        index, block, event = body.get('index'), body.get('content_block'), self.data_events
        kind = block.get('type') if isinstance(block, dict) else None
        if index != len(self.blocks):
            raise _failure('part_index_skips', f'content_block_start for block {_shorten(repr(index))} in event '
                                               f'{event}: the next block was {len(self.blocks)}')
        if self.blocks and self.blocks[-1].open and not self.dialect.allows(_MESSAGES_BLOCKS_OVERLAP):
            raise _failure('event_out_of_order', f'content_block_start for block {index} in event {event} while '
                                                 f'block {index - 1} was still open (no content_block_stop)')
        if not isinstance(kind, str) or not kind:
            raise _failure('unsupported_part', f'a content block of type {_shorten(repr(kind))} in event '
                                               f'{event}: a block names its type')
        if kind not in _BLOCK_DELTAS:  # a block this client does not read (beta, server tools): opaque
            self.skipped_events.append(f'content_block {_shorten(kind)}')
        call = None
        if kind == 'tool_use':
            call_id, name = block.get('id'), block.get('name')
            self._offered_tools('a tool_use block')
            if not isinstance(call_id, str) or not call_id or not isinstance(name, str) or not name:
                raise _failure('call_without_id', f'a tool_use block started in event {event} without an id '
                                                  'and a name')
            call = self._new_call('a tool_use block', call_id, name)
        self.blocks.append(_Part(kind, call=call))
        return Pieces(call=self._shown(call, opening=True) if call else '')

    def _open_block(self, body: dict, what: str) -> _Part:
        index = body.get('index')
        if type(index) is not int or not 0 <= index < len(self.blocks):
            raise _failure('part_not_open', f'{what} for block {_shorten(repr(index))} in event {self.data_events}, '
                                            'which never started')
        block = self.blocks[index]
        if not block.open:
            raise _failure('event_after_close', f'{what} for block {index} in event {self.data_events}, after its '
                                                'content_block_stop')
        return block

    def _take_block_delta(self, body: dict) -> Pieces:
        block = self._open_block(body, 'content_block_delta')
        delta = body.get('delta') if isinstance(body.get('delta'), dict) else {}
        kind = delta.get('type')
        if block.kind not in _BLOCK_DELTAS and isinstance(kind, str):
            return _NOTHING  # a delta of an opaque block: never part of the answer
        if kind not in _BLOCK_DELTAS.get(block.kind, ()):
            raise _failure('delta_type', f'a {_shorten(str(kind))} in event {self.data_events} for block '
                                         f'{body["index"]}, a {block.kind} block')
        field = _DELTA_PIECES.get(kind)
        if field is None:  # a signature_delta or a citations_delta: nothing to show
            return _NOTHING
        piece = delta.get(field)
        if not isinstance(piece, str):
            raise _failure('field_type', f'expected {kind}.{field} to be a string in event {self.data_events}, '
                                         f'got {type(piece).__name__}')
        if not piece:
            return _NOTHING
        if kind == 'text_delta':
            self._add_text(piece)
            return Pieces(text=piece)
        if kind == 'thinking_delta':
            self._add_reasoning(piece)
            return Pieces(reasoning=piece)
        self._add_call_arguments(block.call, piece)
        return Pieces(call=self._shown(block.call, piece))

    def _take_block_stop(self, body: dict) -> Pieces:
        self._open_block(body, 'content_block_stop').open = False
        return _NOTHING

    def _still_open(self, kind: str) -> None:
        """The content ends (message_delta, message_stop) only with every block stopped."""
        still_open = [index for index, block in enumerate(self.blocks) if block.open]
        if still_open:
            raise _failure('part_still_open', f'{kind} in event {self.data_events} while block {still_open[0]} '
                                              'was still open (no content_block_stop)')

    def _take_message_delta(self, body: dict) -> Pieces:
        delta = body.get('delta') if isinstance(body.get('delta'), dict) else {}
        reason = delta.get('stop_reason')
        if reason == 'max_tokens' and any(block.open for block in self.blocks):
            # the budget ended the answer inside a block, which never stopped (Anthropic's SDK fixtures)
            raise self._budget_failure(f'output budget exhausted (stop_reason=max_tokens in event {self.data_events}, '
                                       'with a block still open)')
        self._still_open('message_delta')
        if reason is not None and not isinstance(reason, str):
            raise _failure('field_type', f'expected stop_reason to be a string in event {self.data_events}, '
                                         f'got {type(reason).__name__}')
        if reason is not None and self.stop_reason not in (None, reason):
            # Anthropic: "one or more message_delta events, indicating top-level changes to the final
            # Message object"; its SDK keeps the last value, and so does this client, saying so
            self.notes.append(f'message_delta in event {self.data_events} changed stop_reason from '
                              f'{self.stop_reason} to {_shorten(reason)}; the last is kept, as Anthropic documents')
        self.state, self.stop_reason = 'finishing', reason or self.stop_reason
        if delta.get('stop_details') is not None:
            self.stop_details = delta['stop_details']
        if body.get('usage') is not None:
            self.completion_tokens = _token_count(body['usage'], 'output_tokens')
            reported = _reported_count(body['usage'], 'input_tokens')
            self.prompt_tokens = self.prompt_tokens if reported is None else reported
        return _NOTHING

    def _take_message_stop(self, body: dict) -> Pieces:
        self._still_open('message_stop')
        self.done = True
        return _NOTHING

    _TAKE = {'ping': _take_ping, 'message_start': _take_message_start, 'content_block_start': _take_block_start,
             'content_block_delta': _take_block_delta, 'content_block_stop': _take_block_stop,
             'message_delta': _take_message_delta, 'message_stop': _take_message_stop}

    eof_words = 'message_stop'
    stop_words = 'stop_reason end_turn, stop_sequence or tool_use'
    length_words = 'stop_reason=max_tokens'
    call_noun = 'tool_use block'
    _FINISHES = {'end_turn': 'stop', 'stop_sequence': 'stop', 'tool_use': 'calls', 'max_tokens': 'length'}

    def refusal(self) -> str | None:
        """stop_reason "refusal": the model declined; its text is stop_details' explanation when the
        server gives one, otherwise the text that arrived before it."""
        if self.stop_reason != 'refusal':
            return None
        details = self.stop_details if isinstance(self.stop_details, dict) else {}
        explanation = details.get('explanation')
        return explanation if isinstance(explanation, str) and explanation else self.text

    def refusal_words(self) -> str:
        return 'stop_reason=refusal'

    def finish(self) -> str | None:
        # vLLM says tool_use also when the choice named the tool
        return None if self.stop_reason is None else self._FINISHES.get(self.stop_reason, 'other')

    def finish_words(self) -> str:
        return f'stop_reason={self.stop_reason}'

    def no_finish_words(self) -> str:
        return 'message_stop arrived, but no message_delta said its stop_reason'

    def fields(self) -> dict:
        return {**super().fields(), 'finish_reason': self.stop_reason}
