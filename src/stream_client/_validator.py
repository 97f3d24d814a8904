"""The protocol seam: event data to the answer (sans-IO).

``StreamValidator`` takes event data through ``accept()`` and gives the
``Pieces`` (text, reasoning, tool call) back, with the outcome rules the APIs
share written once (``outcome()``); an ``AnswerSpec`` says what the request
asked for (text, tool calls, JSON) and a ``ToolCall`` is one call assembled.
"""
import dataclasses
import typing

from ._limits import (
    _count, _failure, _MAX_SERVER_MESSAGE, MAX_TEXT_CHARS, _MAX_TOKEN_IDS, _preview, _shorten, StreamError)
from ._sse import Events
from ._json import _json_value, strict_json
from ._schema import JsonSchema
from ._dialects import Dialect, _RESPONSES_UNTYPED, _STRICT


_TOOL_CHOICES = ('auto', 'required', 'none')  # or the name of one tool


@dataclasses.dataclass(frozen=True)
class AnswerSpec:
    """What the request asked the answer to be, beyond text: the tools offered (each name with the
    schema of its parameters, None when it declares none), the tool choice (auto, required, none or
    a tool's name; None when no tools), and the schema of a JSON answer."""

    tools: tuple[tuple[str, JsonSchema | None], ...] = ()
    tool_choice: str | None = None
    json_schema: JsonSchema | None = dataclasses.field(default=None, compare=False)

    def __post_init__(self) -> None:
        names = [name for name, _ in self.tools]
        if len(set(names)) != len(names):
            raise ValueError('each tool needs a name of its own')
        if (self.tool_choice is None) != (not self.tools):
            raise ValueError('a tool choice goes with tools, and tools with a tool choice')
        if self.tool_choice is not None and self.tool_choice not in _TOOL_CHOICES and self.tool_choice not in names:
            raise ValueError(f'tool_choice {self.tool_choice!r} is none of {", ".join(_TOOL_CHOICES)} and '
                             f'names no tool offered ({", ".join(names)})')

    @property
    def named(self) -> str | None:
        """The one tool the choice forces, or None."""
        return self.tool_choice if self.tool_choice not in (None, *_TOOL_CHOICES) else None

    def unchecked(self) -> list[str]:
        """The schema keywords that are not checked, with the tool or answer whose schema has them."""
        schemas = [(f'tool {name}', schema) for name, schema in self.tools] + [('json-schema', self.json_schema)]
        return [f'{owner}: {keyword}' for owner, schema in schemas if schema for keyword in schema.unchecked]


class ToolCall:
    """One tool call as the stream assembles it: opened with an id and a name, then its arguments
    arrive in pieces."""

    def __init__(self, index: int, call_id: str, name: str) -> None:
        self.index, self.id, self.name = index, call_id, name
        self.parts: list[str] = []

    @property
    def arguments(self) -> str:
        return ''.join(self.parts)

    def problem(self, spec: AnswerSpec) -> StreamError | None:
        """Why these arguments cannot be used: not one strict JSON object matching the tool's parameters."""
        schemas = dict(spec.tools)
        if self.name not in schemas:
            return _failure('unknown_tool', f'{self.name!r} is not a tool the request offered '
                                            f'({", ".join(schemas) or "none"})')
        arguments = self.arguments
        if not arguments.strip():
            return _failure('tool_arguments_empty', 'the arguments are empty')
        try:
            value = strict_json(arguments)
        except ValueError as exc:
            return _failure('tool_arguments_not_json', f'the arguments are not JSON ({exc}): {_preview(arguments)}')
        if not isinstance(value, dict):
            return _failure('tool_arguments_not_object', f'arguments are not a JSON object: {_preview(arguments)}')
        problem = schemas[self.name].problem(value) if schemas[self.name] is not None else None
        return _failure('tool_arguments_schema', f'the arguments do not match its parameters: {problem}') \
            if problem else None

    def record(self, spec: AnswerSpec) -> dict:
        problem = self.problem(spec)
        return {'index': self.index, 'id': self.id, 'name': self.name, 'arguments': self.arguments,
                'arguments_problem': problem and problem.message}


class Pieces(typing.NamedTuple):
    """What one event adds to the answer, each '' when it adds none: text, reasoning text, and a piece
    of a tool call for display (its name and "(" as the call opens, then its arguments)."""

    text: str = ''
    reasoning: str = ''
    call: str = ''


_NOTHING = Pieces()  # an event that adds nothing to show (a role, a finish, a usage event...)


class StreamValidator:
    """What the read loop needs from the validator of one streaming API, and the rules all four share.

    The read loop creates the API's ``parser`` and gives each event it
    returns to ``accept()``, which returns its ``Pieces`` (text, reasoning, call): the
    answer and reasoning text that event carried, and a piece of a tool call
    for display (see ``_shown``); '' when none. It raises StreamError.
    ``done`` says that the API's ``terminal`` marker arrived; ``outcome()``
    says why the answer is not finished (a StreamError, None when it is);
    ``fields()`` are the record's fields that the API decides. A validator
    never reads a clock or touches a socket. ``spec`` says what the answer
    was asked to be: text, tool calls or JSON; ``expect_finish`` is the
    finish a finished answer has: "stop", or "length" for a fixed-length
    load, where the usage (when sent) must also count exactly ``max_tokens``.

    The outcome rules are written once, here: each API declares only its own
    signals, ``finish()`` (its finish read as stop, length, calls or other)
    and the words it says them in.
    """

    api = ''
    parser = Events
    terminal = '[DONE]'
    eof_words = '[DONE]'             # what a finished stream ends with, as the EOF failure names it
    stop_words = 'finish_reason=stop'  # the finish of a finished answer, in this API's words
    length_words = 'finish_reason=length'  # the finish of a fixed-length answer
    calls_finish = 'finish_reason=tool_calls'  # what a finished tool answer ends with
    call_noun = 'tool call'          # what a tool call is called in this API
    token_noun = 'output token'
    budget_words = 'output budget exhausted ({})'

    def __init__(self, expect_finish: str = 'stop', max_tokens: int | None = None,
                 spec: AnswerSpec | None = None, dialect: Dialect | None = None) -> None:
        self.spec = spec or AnswerSpec()
        self.dialect = dialect or _STRICT  # the server's known departures (docs/dialects.md)
        self.dialect_chosen = dialect is not None  # named by the caller: nothing in the response changes it
        self.expect_finish = expect_finish
        self.max_tokens = max_tokens
        self.calls: list[ToolCall] = []
        self._call_ids: set[str] = set()
        self._shown_call: ToolCall | None = None  # the call whose pieces were shown last
        self.text_parts: list[str] = []
        self.text_chars = 0
        self.reasoning_parts: list[str] = []
        self.reasoning_chars = 0
        self.data_events = 0
        self.content_events = 0
        self.done = False
        self.completion_tokens: int | None = None
        self.prompt_tokens: int | None = None  # the usage's count of the prompt, as the server reports it
        self.response_id: str | None = None
        self.token_ids: list[int] | None = None  # the generated token ids, when the server sends them
        self.tokens_per_event: list[int] = []     # how many each event that carried any had
        self.skipped_events: list[str] = []  # event types the API says to ignore, each skipped here
        self.refusal_parts: list[str] = []  # the model's refusal (OpenAI's delta.refusal), as it arrived
        self.notes: list[str] = []  # what the stream did that the protocol allows but a reader may not expect

    def accept(self, event) -> Pieces:
        raise NotImplementedError

    def detected(self, found: 'tuple[Dialect, str] | None') -> None:
        """A dialect the response showed (and what showed it), applied unless the caller named one;
        the record's notes say so, so that nothing changes silently."""
        if found is None or self.dialect_chosen or self.dialect is not _STRICT:
            return
        self.dialect = found[0]
        self.notes.append(f'dialect {found[0].name} detected from {found[1]}')

    def _take_token_ids(self, value: object) -> None:
        """The generated token ids an event carries (vLLM's ``return_token_ids``; not null), for the cross-check."""
        if not isinstance(value, list) or not all(type(token) is int for token in value):
            raise _failure('token_ids_invalid', f'expected token_ids to be a list of integers in event '
                                                f'{self.data_events}, got {_shorten(repr(value))}')
        self.token_ids = self.token_ids if self.token_ids is not None else []
        if len(self.token_ids) + len(value) > _MAX_TOKEN_IDS:
            raise _failure('too_many_token_ids', f'more than {_MAX_TOKEN_IDS} token ids')
        self.token_ids.extend(value)
        if value:
            self.tokens_per_event.append(len(value))

    def finish(self) -> str | None:
        """The API's finish: 'stop', 'length' (the budget), 'calls' (finished as tool calls) or 'other';
        None when the terminal event arrived without one."""
        raise NotImplementedError

    def finish_words(self) -> str:
        """The finish as the API said it, e.g. 'finish_reason=stop'."""
        raise NotImplementedError

    def finished_words(self) -> str:
        return f'{self.finish_words()} and {self.terminal} arrived'

    def unexpected_words(self, words: str) -> str:
        return f'expected {self.stop_words}, got {words}'

    def no_finish_words(self) -> str:
        return f'[DONE] without a finish_reason after {_count(self.content_events, "content event")}'

    def outcome(self) -> StreamError | None:
        """Why the answer is not finished (a StreamError of the application layer), or None when it is."""
        if not self.done:
            return _failure('eof_before_done', f'EOF before {self.eof_words} after '
                                               f'{_count(self.content_events, "content event")}')
        refusal = self.refusal()
        if refusal is not None:
            return _failure('refusal', f'the model declined ({self.refusal_words()}): {_preview(refusal)}')
        finish = self.finish()
        if finish is None:
            return _failure('no_finish_reason', self.no_finish_words())
        words = self.finish_words()
        if self.expect_finish == 'length':
            return self._fixed_length_outcome(finish, words)
        if finish == 'length':
            return self._budget_failure(self.budget_words.format(words))
        if finish == 'other':
            return _failure('unexpected_finish', self.unexpected_words(words))
        if self.calls:
            return self._answer_failure(finish == 'calls', words)
        if finish == 'calls':
            return _failure('finish_without_calls', f'{words}, but no {self.call_noun} arrived')
        return self._answer_failure(False, self.finished_words())

    def _fixed_length_outcome(self, finish: str, words: str) -> StreamError | None:
        if finish != 'length':
            return _failure('unexpected_finish', f'expected {self.length_words} (--expect-finish length), got {words}')
        if self.completion_tokens is not None and self.completion_tokens != self.max_tokens:
            return _failure('length_tokens_differ', f'{words} after {_count(self.completion_tokens, self.token_noun)}, '
                                                    f'not the {self.max_tokens} requested')
        if not self._visible_text() and not self.calls:
            return _failure('no_visible_text', f'{self.finished_words()}, but no visible text')
        return None

    def refusal(self) -> str | None:
        """The refusal's text when the model declined (OpenAI's refusal deltas), or None."""
        return ''.join(self.refusal_parts) if self.refusal_parts else None

    def refusal_words(self) -> str:
        return 'refusal deltas instead of an answer'

    def _add_refusal(self, text: str) -> None:
        self.reasoning_chars += len(text)  # bounded with the reasoning: neither is the answer
        if self.reasoning_chars > MAX_TEXT_CHARS:
            raise _failure('reasoning_too_long', f'reasoning and refusal longer than {MAX_TEXT_CHARS} characters')
        self.refusal_parts.append(text)

    @property
    def answer_kind(self) -> str:
        """tool_calls when calls arrived, json when a JSON answer was asked for, otherwise text."""
        return 'tool_calls' if self.calls else 'json' if self.spec.json_schema is not None else 'text'

    def _answer_failure(self, finished_as_calls: bool, finish: str) -> StreamError | None:
        """Why an answer whose API says it finished (as ``finish`` says) is not a usable one: for tool
        calls, the finish that calls need (``finished_as_calls``), the tool choice, and each call's
        arguments; otherwise the tool choice, then a JSON answer's JSON, or visible text."""
        spec, calls = self.spec, self.calls
        if calls:
            if not finished_as_calls:
                return _failure('calls_without_call_finish', f'expected {self.calls_finish} after '
                                                             f'{_count(len(calls), "tool call")}, got {finish}')
            if spec.tool_choice == 'none':
                return _failure('tool_choice_none', f'tool_choice none, but {_count(len(calls), "tool call")} arrived')
            for call in calls:
                failure = (_failure('wrong_tool', f'tool_choice named {spec.named}')
                           if spec.named and call.name != spec.named else call.problem(spec))
                if failure:
                    return _failure(failure.kind, f'tool call {call.index} ({call.name}): {failure.message}')
            return None
        if spec.tool_choice == 'required' or spec.named:
            return _failure('text_not_tool_call', f'tool_choice {spec.tool_choice} asked for a tool call, but the '
                                                  f'answer is text ({finish})')
        if spec.json_schema is not None:
            return self._json_failure()
        if not self._visible_text():
            return _failure('no_visible_text', f'{finish}, but no visible text arrived')
        return None

    def _visible_text(self) -> bool:
        return any(part.strip() for part in self.text_parts)

    def _json_failure(self) -> StreamError | None:
        text = self.text
        try:
            value = strict_json(text)
        except ValueError as exc:
            return _failure('answer_not_json', f'the answer is not JSON ({exc}): {_preview(text)}')
        problem = self.spec.json_schema.problem(value)
        return _failure('answer_schema', f'the JSON answer does not match the schema: {problem}') if problem else None

    def _budget_failure(self, problem: str) -> StreamError:
        """A budget-exhausted failure, saying so when the budget ran out inside a tool call."""
        if self.calls:
            call = self.calls[-1]
            problem = f'{problem} inside tool call {call.index} ({call.name})'
        return _failure('budget_exhausted', problem)

    def _server_error(self, fields: dict, sent: str = 'an error event') -> StreamError:
        """The failure of an error the server reported in the stream, with its own message."""
        error = _server_error_fields(fields)
        return _failure('server_error_event' if sent == 'an error event' else 'response_failed',
                        f'server sent {sent}: {_describe_server_error(error)}', error)

    def _offered_tools(self, what: str) -> int:
        """The event number, once it is known that the request offered tools, which ``what`` needs."""
        if not self.spec.tools:
            raise _failure('no_tools_offered', f'{what} arrived in event {self.data_events}, but the request offered '
                                               'no tools (--tools)')
        return self.data_events

    def _new_call(self, what: str, call_id: object, name: object, index: int | None = None) -> ToolCall:
        """Open a tool call (``what`` names it in the API's words), which the request must have offered
        tools for; its id is unique within the answer."""
        event = self._offered_tools(what)
        if call_id in self._call_ids:
            raise _failure('duplicate_id', f'{what} in event {event} reuses the id {_preview(str(call_id))} of '
                                           'an earlier call')
        call = ToolCall(len(self.calls) if index is None else index, call_id, name)
        self._call_ids.add(call_id)
        self.calls.append(call)
        self.content_events += 1
        return call

    def _shown(self, call: ToolCall, piece: str = '', opening: bool = False) -> str:
        """A tool call's piece for display: ``name(`` as the call opens, then its arguments, so that
        the pieces of calls that arrive one after the other read ``get_weather({"city": "Paris"}``
        (the view closes the last). A piece of another call than the last one shown first closes
        that line and resumes the call as ``name(…`` (calls interleaved by index)."""
        prefix = ''
        if opening or call is not self._shown_call:
            prefix = (')\n' if self._shown_call is not None else '') + call.name + ('(' if opening else '(…')
        self._shown_call = call
        return prefix + piece

    def _add_call_arguments(self, call: ToolCall, arguments: str) -> None:
        self.content_events += 1
        self.text_chars += len(arguments)
        if self.text_chars > MAX_TEXT_CHARS:
            raise _failure('answer_too_long', f'answer longer than {MAX_TEXT_CHARS} characters')
        call.parts.append(arguments)

    @property
    def text(self) -> str:
        return ''.join(self.text_parts)

    @property
    def reasoning(self) -> str:
        return ''.join(self.reasoning_parts)

    def fields(self) -> dict:
        """The record's fields that this API decides."""
        return {'text': self.text, 'reasoning_text': self.reasoning, 'done': self.done,
                'completion_tokens': self.completion_tokens, 'prompt_tokens': self.prompt_tokens,
                'content_events': self.content_events,
                'data_events': self.data_events, 'response_id': self.response_id,
                'response_status': None, 'incomplete_reason': None, 'answer_kind': self.answer_kind,
                'tool_calls': [call.record(self.spec) for call in self.calls],
                'skipped_events': list(self.skipped_events), 'notes': list(self.notes), 'refusal': self.refusal(),
                'dialect': self.dialect.name if self.dialect_chosen or self.dialect is not _STRICT else None}

    def _add_text(self, text: str) -> None:
        self.content_events += 1
        self.text_chars += len(text)
        if self.text_chars > MAX_TEXT_CHARS:
            raise _failure('answer_too_long', f'answer longer than {MAX_TEXT_CHARS} characters')
        self.text_parts.append(text)

    def _add_reasoning(self, text: str) -> None:
        self.reasoning_chars += len(text)
        if self.reasoning_chars > MAX_TEXT_CHARS:
            raise _failure('reasoning_too_long', f'reasoning longer than {MAX_TEXT_CHARS} characters')
        self.reasoning_parts.append(text)

    def _typed_body(self, event: tuple[str, str], ended_by: str) -> tuple[str, dict]:
        """The type and JSON body of a typed event, after the checks both typed APIs make: nothing may
        follow the event that ended the stream (``ended_by`` names it), and the event field must name
        the type its data says."""
        kind, data = event
        if self.done:
            raise _failure('event_after_terminal', f'event {_preview(kind)} after {ended_by}')
        self.data_events += 1
        body = self._load_object(data)
        if (kind == 'message' and self.api == 'responses' and isinstance(body.get('type'), str)
                and self.dialect.allows(_RESPONSES_UNTYPED)):
            kind = body['type']  # no event: line; its type is the data's (the litellm dialect)
        if body.get('type') != kind:
            raise _failure('event_type_mismatch', f'event {self.data_events}: its event field says {_preview(kind)} '
                                                  f'but its data says type {_shorten(repr(body.get("type")))}')
        return kind, body

    def _load_object(self, data: str) -> dict:
        """One event's JSON object, or StreamError('protocol')."""
        try:
            value = _json_value(data)
        except (ValueError, RecursionError) as exc:
            raise _failure('malformed_json', f'malformed JSON in event {self.data_events} '
                                             f'({type(exc).__name__}): {_preview(data)}') from None
        if not isinstance(value, dict):
            raise _failure('not_an_object', f'expected a JSON object in event {self.data_events}, '
                                            f'got {type(value).__name__}')
        return value


def _server_error_fields(body: object) -> dict:
    """message/type/code from an error object: vLLM's nested or flat forms, or a bare string."""
    error = body.get('error', body) if isinstance(body, dict) else body
    if isinstance(error, str):
        error = {'message': error}
    if not isinstance(error, dict):
        error = {'message': repr(error)}
    message = error.get('message')
    message = '' if message is None else str(message)
    return {'message': message[:_MAX_SERVER_MESSAGE],
            'type': error.get('type') if isinstance(error.get('type'), str) else None,
            'code': error.get('code') if isinstance(error.get('code'), (int, str)) else None}


def _describe_server_error(error: dict, said: tuple[str, ...] = ()) -> str:
    """The server's message, quoted, and its type and code, those the words in ``said`` (the status
    line already shown) do not repeat."""
    repeated = {word.lower().replace(' ', '') for word in said}
    kind = ' '.join(str(part) for part in (error['type'], error['code'])
                    if part is not None and str(part).lower().replace(' ', '') not in repeated)
    message = error['message'] or '(empty message)'
    return f'{message!r}' + (f' ({kind})' if kind else '')


def _reported_count(usage: object, key: str) -> int | None:
    """A count the usage reports for the record alone (the prompt's tokens): a non-negative integer, else
    None. Nothing is judged on it."""
    count = usage.get(key) if isinstance(usage, dict) else None
    return count if type(count) is int and count >= 0 else None
