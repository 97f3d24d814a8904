"""Synthetic OpenAI-compatible streaming server for testing clients on loopback.

It streams chat completions, completions, the Responses API and the
Anthropic-compatible Messages API, and contains
no model and no GPU code: every mode sends fixed bytes, paced by --delay, so
each way a stream can end (complete, cut short, malformed, held open,
stalled...) can be reproduced on demand; mode mixed gives each request a mode
from a seeded schedule, for loads. --profile vllm gives the bytes vLLM 0.32
sends; --replay answers with a captured response. The pair modes (pair-*)
also answer the same request unstreamed (stream false), as the client's
--cross-check sends it, and --replay-twin gives a replay its unstreamed
capture. Only 127.0.0.1 is ever bound.
"""
import os
import sys

# The first statements, so that Python 3.6 to 3.9 stop here with one line (3.5 and older cannot read
# the f-strings below, and stop with their own SyntaxError before any line runs).
if sys.version_info < (3, 10):
    sys.exit(f'{os.path.basename(sys.argv[0])}: needs Python 3.10 or newer, not {sys.version.split()[0]}')


import argparse
import collections
import contextlib
import dataclasses
import difflib
import email.utils
import hashlib
import html
import itertools
import json
import random
import select
import signal
import socket
import ssl
import threading
import time
import typing
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MAX_REQUEST_BYTES = 65_536
DELAY = 0.05               # seconds before each write unless the caller says: slow enough to watch an answer arrive
CAPACITY = 20.0           # streams the capacity mode starts per second at most, unless the caller says
KEEP_ALIVE_TIMEOUT = 5.0   # seconds a kept-alive connection may wait for its next request (uvicorn's default)
HOLD_LIMIT = 60.0          # seconds a held, stalled or dripping response lasts at most
DRIP_INTERVAL = 0.1        # seconds between keepalive comments in drip mode
MISSING_BYTES = 64         # how far a truncated or held-open body falls short of its Content-Length
FLOOD_PIECE = b'x' * 65_536
FLOOD_PIECES = 16_384      # 1 GiB without a line break
ANSWER = ('READY ', '\u2713')
# vLLM sends "server: uvicorn"; the fixture names itself instead, in both profiles, so that a
# record made against it is never mistaken for evidence about a model (the client reads this).
SERVER_NAME = 'synthetic-fixture/0.1'
REPLAY_MARK = b'x-synthetic-fixture: replay'  # added to a replayed head, so that its record says source "replay"
BURST_TOKENS = 16          # content events of the buffered and paired modes, enough for the client's buffering hint
REASONING = ('The user wants ', 'one word.')
# The tool and JSON schema of the tool-call and JSON modes, which the client's --fixture uses when none is given.
TOOLS = [{'type': 'function', 'function': {
    'name': 'get_weather', 'description': 'The current weather in a city',
    'parameters': {'type': 'object', 'properties': {'city': {'type': 'string'}}, 'required': ['city']}}}]
JSON_SCHEMA = {'type': 'object', 'properties': {'city': {'type': 'string'}}, 'required': ['city']}
PARIS = ('{"city": ', '"Paris"}')  # arguments (or a JSON answer) in two pieces
ENGINE_CRASH = 'EngineCore encountered an issue. See stack trace (above) for the root cause.'


class GuideProfile:
    """Chat completions in the bytes of the guide's fixture: CRLF events, Content-Length framing,
    a keepalive comment first, HTML errors.

    A profile is the wire format (framing, line ends, JSON style, headers,
    error pages); its subclasses per API build that API's events in it. The
    modes call opening(), closing(reason), content(), crash(), and for the
    API-specific modes reasoning_plan(), tool_calls(...) and multi_choice_plan().
    """

    api = 'chat'
    framing = 'content-length'
    line_end = b'\r\n'

    def __init__(self, model: str = 'synthetic-fixture', tokens: int | None = None,
                 reasoning_field: str = 'reasoning', budget: int | None = None) -> None:
        self.model, self.tokens, self.reasoning_field = model, tokens, reasoning_field
        self.budget = budget  # the request's max_tokens, which a pair mode's budget cut uses up
        self.prompt_tokens: int | None = None  # the agent mode's count of the request's prompt (prompt_tokens())

    def dumps(self, value: object) -> bytes:
        return json.dumps(value, ensure_ascii=False).encode()

    def sse(self, data: bytes, event: str | None = None) -> bytes:
        """One event: an event line if typed, the data line, the blank line."""
        head = b'event: ' + event.encode() + self.line_end if event else b''
        return head + b'data: ' + data + self.line_end + self.line_end

    def comments(self) -> list[bytes]:
        return [b': synthetic keepalive\r\n\r\n']

    def event(self, delta: dict | None = None, reason: str | None = None, index: int = 0,
              token_ids: list[int] | None = None) -> bytes:
        choice = {'index': index, 'delta': delta or {}, 'finish_reason': reason}
        if token_ids is not None:
            choice['token_ids'] = token_ids
        return ('data: ' + json.dumps({'choices': [choice]}, ensure_ascii=False) + '\r\n\r\n').encode()

    def preamble(self) -> list[bytes]:
        """What comes before any text: the keepalive comment (guide only) and the role event."""
        return self.comments() + [self.role()]

    def roles(self, count: int) -> list[bytes]:
        return [self.role(index) for index in range(count)]

    def role(self, index: int = 0) -> bytes:
        return self.event({'role': 'assistant'}, index=index)

    def content(self, text: str, index: int = 0) -> bytes:
        return self.event({'content': text}, index=index)

    def finish(self, reason: str, index: int = 0) -> bytes:
        return self.event(reason=reason, index=index)

    def usage(self, completion_tokens: int) -> bytes:
        if self.prompt_tokens is not None:
            return b'data: {"choices": [], "usage": {"prompt_tokens": %d, "completion_tokens": %d}}\n\n' % (
                self.prompt_tokens, completion_tokens)
        return b'data: {"choices": [], "usage": {"completion_tokens": %d}}\n\n' % completion_tokens

    @property
    def input_tokens(self) -> int:
        """The prompt's tokens as the usage reports them: the agent mode's count, else 9."""
        return 9 if self.prompt_tokens is None else self.prompt_tokens

    def done(self) -> bytes:
        return b'data: [DONE]\n\n'

    def error_event(self, message: str, kind: str, code: int) -> bytes:
        error = {'error': {'message': message, 'type': kind, 'param': None, 'code': code}}
        return b'data: ' + json.dumps(error).encode() + b'\n\n'

    def crash(self) -> list[bytes]:
        """How vLLM reports an engine failure after the 200: an error event, then [DONE]."""
        return [self.error_event(ENGINE_CRASH, 'InternalServerError', 500), self.done()]

    def reasoning_plan(self) -> list[bytes]:
        thoughts = [self.event({self.reasoning_field: text}) for text in REASONING]
        return self.preamble() + thoughts + self.answer() + self.closing('stop')

    def tool_calls(self, calls: list[tuple[str, tuple[str, ...]]], finish: str = 'tool_calls',
                   interleaved: bool = False) -> list[bytes]:
        """Tool calls, each (name, argument pieces): every call opens with its id, type and name, then
        its arguments arrive in pieces; interleaved sends the pieces of all calls in turn, by index."""
        opened = [self.event(self.tool_delta({'id': f'chatcmpl-tool-{index + 1}', 'type': 'function', 'index': index,
                                              'function': {'name': name}}))
                  for index, (name, _) in enumerate(calls)]
        pieces = [[self.event(self.tool_delta({'index': index, 'function': {'arguments': piece}})) for piece in parts]
                  for index, (_, parts) in enumerate(calls)]
        if interleaved:
            writes = opened + [piece for turn in itertools.zip_longest(*pieces) for piece in turn if piece]
        else:
            writes = [write for opening, parts in zip(opened, pieces) for write in [opening, *parts]]
        count = 3 if self.tokens is None else self.tokens
        return self.preamble() + writes + [self.event(self.finish_delta(), finish), self.usage(count), self.done()]

    def tool_delta(self, call: dict) -> dict:
        return {'tool_calls': [call]}

    def finish_delta(self) -> dict:
        """The delta of a finish chunk after tool calls."""
        return {}

    def multi_choice_plan(self) -> list[bytes]:
        """n=2 as vLLM sends it: a role chunk per index, then the text interleaved, one choice per chunk."""
        texts = [self.content(text, index) for text in ANSWER for index in (0, 1)]
        return (self.comments() + self.roles(2) + texts + [self.finish('stop', 0), self.finish('stop', 1)]
                + [self.usage(6), self.done()])

    def headers(self) -> list[tuple[str, str]]:
        return [('Content-Type', 'text/event-stream; charset=utf-8'), ('Cache-Control', 'no-store')]

    def error(self, status: int, message: str, kind: str,
              param: str | None = None) -> tuple[list[tuple[str, str]], bytes]:
        """Headers and body of an error response: a small HTML page, as the guide's fixture answered with
        html; the status is in the title, the message alone in the body."""
        reason = BaseHTTPRequestHandler.responses.get(status, ('Error',))[0]
        body = (f'<!DOCTYPE html>\n<html><head><title>{status} {html.escape(reason)}</title></head>\n'
                f'<body><p>{html.escape(message)}</p></body></html>\n').encode()
        return self._error_headers(len(body), 'text/html;charset=utf-8') + [('Connection', 'close')], body

    def not_found(self) -> tuple[int, list[tuple[str, str]], bytes]:
        return (404, *self.error(404, 'no such route', 'NotFoundError'))

    def method_not_allowed(self) -> tuple[int, list[tuple[str, str]], bytes]:
        return (405, *self.error(405, 'method not allowed', 'MethodNotAllowed'))

    def models(self) -> tuple[int, list[tuple[str, str]], bytes]:
        """GET /v1/models: the one model the fixture pretends to serve, in vLLM's shape."""
        created = int(time.time())
        card = {'id': self.model, 'object': 'model', 'created': created, 'owned_by': 'vllm', 'root': self.model,
                'parent': None, 'max_model_len': 512,
                'permission': [{'id': f'modelperm-{os.urandom(8).hex()}', 'object': 'model_permission',
                                'created': created, 'allow_create_engine': False, 'allow_sampling': True,
                                'allow_logprobs': True, 'allow_search_indices': False, 'allow_view': True,
                                'allow_fine_tuning': False, 'organization': '*', 'group': None,
                                'is_blocking': False}]}
        body = json.dumps({'object': 'list', 'data': [card]}, separators=(',', ':')).encode()
        return 200, self._error_headers(len(body), 'application/json', vary=True), body

    def health(self) -> tuple[int, list[tuple[str, str]], bytes]:
        """GET /health: 200 with an empty body, as vLLM answers once the engine is up."""
        return 200, self._error_headers(0, 'application/json', vary=True)[:3], b''

    def unauthorized(self) -> tuple[int, list[tuple[str, str]], bytes]:
        """What vLLM's --api-key middleware answers, before any route: 401 {"error":"Unauthorized"}, no vary."""
        body = b'{"error":"Unauthorized"}'
        return 401, self._error_headers(len(body), 'application/json', vary=False), body

    @staticmethod
    def _error_headers(length: int, content_type: str, vary: bool = False) -> list[tuple[str, str]]:
        headers = [('date', email.utils.formatdate(usegmt=True)), ('server', SERVER_NAME),
                   ('content-length', str(length)), ('content-type', content_type)]
        return headers + ([('vary', 'Origin')] if vary else [])

    def answer(self) -> list[bytes]:
        """The content events: READY and a check mark, or --tokens N numbered tokens."""
        if self.tokens is None:
            return [self.content(text) for text in ANSWER]
        return [self.content(f'token{i} ') for i in range(self.tokens)]

    def opening(self) -> list[bytes]:
        return self.preamble() + self.answer()

    def closing(self, reason: str) -> list[bytes]:
        """The finish event, the usage event and [DONE]."""
        count = 3 if self.tokens is None else self.tokens
        return [self.finish(reason), self.usage(count), self.done()]


class VllmProfile(GuideProfile):
    """Chat completions in the bytes of vLLM 0.32: one compact JSON event per HTTP chunk, LF line ends,
    JSON errors."""

    framing = 'chunked'
    line_end = b'\n'
    object = 'chat.completion.chunk'
    id_prefix = 'chatcmpl'

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.id = f'{self.id_prefix}-{os.urandom(8).hex()}'  # unique across concurrent requests
        self.created = int(time.time())

    def dumps(self, value: object) -> bytes:
        return json.dumps(value, ensure_ascii=False, separators=(',', ':')).encode()

    def comments(self) -> list[bytes]:
        return []

    def chunk(self, choices: list, **extra) -> bytes:
        body = {'id': self.id, 'object': self.object, 'created': self.created,
                'model': self.model, 'choices': choices, **extra}
        return self.sse(self.dumps(body))

    def event(self, delta: dict | None = None, reason: str | None = None, index: int = 0,
              token_ids: list[int] | None = None) -> bytes:
        choice = {'index': index, 'delta': delta or {}, 'logprobs': None, 'finish_reason': reason}
        if reason is not None:
            choice['stop_reason'] = None
        choice['token_ids'] = token_ids
        return self.chunk([choice])

    def role(self, index: int = 0) -> bytes:
        choice = {'index': index, 'delta': {'role': 'assistant', 'content': ''}, 'logprobs': None,
                  'finish_reason': None}
        return self.chunk([choice], prompt_token_ids=None, prompt_text=None)

    def finish(self, reason: str, index: int = 0) -> bytes:
        return self.event({'content': ''}, reason, index)

    def tool_delta(self, call: dict) -> dict:
        return {'content': None, 'tool_calls': [call]}  # as vLLM 0.32 sends it (captures t6 to t8)

    def usage(self, completion_tokens: int) -> bytes:
        usage = {'prompt_tokens': self.input_tokens, 'total_tokens': self.input_tokens + completion_tokens,
                 'completion_tokens': completion_tokens}
        return self.chunk([], usage=usage, system_fingerprint='vllm-0.32.0-synthetic')

    def headers(self) -> list[tuple[str, str]]:
        return [('date', email.utils.formatdate(usegmt=True)), ('server', SERVER_NAME),
                ('content-type', 'text/event-stream; charset=utf-8'), ('vary', 'Origin')]

    def error(self, status: int, message: str, kind: str,
              param: str | None = None) -> tuple[list[tuple[str, str]], bytes]:
        """vLLM's JSON error body, with its status as the code (and the request key at fault, if one is)."""
        body = json.dumps({'error': {'message': message, 'type': kind, 'param': param, 'code': status}},
                          separators=(',', ':')).encode()
        return self._error_headers(len(body), 'application/json', vary=True), body

    def not_found(self) -> tuple[int, list[tuple[str, str]], bytes]:
        return self._detail(404, 'Not Found')  # FastAPI's answer for a route vLLM does not have

    def method_not_allowed(self) -> tuple[int, list[tuple[str, str]], bytes]:
        return self._detail(405, 'Method Not Allowed')

    def _detail(self, status: int, detail: str) -> tuple[int, list[tuple[str, str]], bytes]:
        body = json.dumps({'detail': detail}, separators=(',', ':')).encode()
        return status, self._error_headers(len(body), 'application/json', vary=True), body


class _Completions:
    """The completions API's pieces: the text is choices[0].text, and there is no role event."""

    api = 'completions'

    def content(self, text: str, index: int = 0) -> bytes:
        return self.completion(text, None, index)

    def finish(self, reason: str, index: int = 0) -> bytes:
        return self.completion('', reason, index)

    def preamble(self) -> list[bytes]:
        return self.comments()

    def roles(self, count: int) -> list[bytes]:
        return []


class GuideCompletions(_Completions, GuideProfile):
    """Completions in the guide's bytes."""

    def completion(self, text: str, reason: str | None, index: int) -> bytes:
        return self.sse(self.dumps({'choices': [{'index': index, 'text': text, 'finish_reason': reason}]}))


class VllmCompletions(_Completions, VllmProfile):
    """Completions as vLLM 0.32 streams them (capture g2)."""

    object = 'text_completion'
    id_prefix = 'cmpl'

    def completion(self, text: str, reason: str | None, index: int) -> bytes:
        return self.chunk([{'index': index, 'text': text, 'logprobs': None, 'finish_reason': reason,
                            'stop_reason': None, 'prompt_token_ids': None, 'token_ids': None}])


class _Responses:
    """The Responses API's events, as vLLM 0.32 streams them (captures r1, r2): each has an event field
    naming its type, the same type in its data, and a sequence_number counting up from 0; a message item
    opens, its text arrives as deltas and is repeated whole by the done events, and one terminal event
    carries the whole response."""

    api = 'responses'

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.response_id = f'resp_{os.urandom(8).hex()}'
        self.created_at = int(time.time())
        self.sequence = 0
        self.items: list[dict] = []  # output items completed so far, for the terminal event
        self.parts: list[str] = []   # text deltas of the open message

    def emit(self, kind: str, body: dict, event: str | None = None) -> bytes:
        """One event of type kind; event, if given, is a different event field (a broken stream)."""
        body = dict(sorted({**body, 'sequence_number': self.sequence, 'type': kind}.items()))  # vLLM's key order
        self.sequence += 1
        return self.sse(self.dumps(body), event or kind)

    def response(self, status: str, reason: str | None = None, output: list | None = None) -> dict:
        tokens = (3 if self.tokens is None else self.tokens) if status != 'in_progress' else None
        usage = None if tokens is None else {
            'input_tokens': self.input_tokens, 'input_tokens_details': {'cached_tokens': 0, 'cache_write_tokens': 0,
                                                        'input_tokens_per_turn': [], 'cached_tokens_per_turn': []},
            'output_tokens': tokens, 'output_tokens_details': {'reasoning_tokens': 0, 'tool_output_tokens': 0,
                                                               'output_tokens_per_turn': [],
                                                               'tool_output_tokens_per_turn': []},
            'total_tokens': self.input_tokens + tokens}
        return {'id': self.response_id, 'created_at': self.created_at,
                'incomplete_details': {'reason': reason} if reason else None, 'instructions': None,
                'metadata': None, 'model': self.model, 'object': 'response',
                'output': self.items if output is None else output, 'parallel_tool_calls': True,
                'temperature': 0.0, 'tool_choice': 'none', 'tools': [], 'top_p': 1.0, 'background': False,
                'max_output_tokens': 128, 'max_tool_calls': None, 'previous_response_id': None, 'prompt': None,
                'reasoning': None, 'service_tier': 'auto', 'status': status, 'text': None, 'top_logprobs': None,
                'truncation': 'disabled', 'usage': usage, 'user': None, 'presence_penalty': 0.0,
                'frequency_penalty': 0.0, 'kv_transfer_params': None, 'ec_transfer_params': None,
                'input_messages': None, 'output_messages': None}

    def started(self) -> list[bytes]:
        return self.comments() + [self.emit('response.created', {'response': self.response('in_progress')}),
                                  self.emit('response.in_progress', {'response': self.response('in_progress')})]

    def message_opened(self) -> list[bytes]:
        self.item_id, self.index, self.parts = f'msg_{os.urandom(8).hex()}', len(self.items), []
        item = {'id': self.item_id, 'content': [], 'role': 'assistant', 'status': 'in_progress', 'type': 'message',
                'phase': None}
        part = {'annotations': [], 'text': '', 'type': 'output_text', 'logprobs': []}
        return [self.emit('response.output_item.added', {'item': item, 'output_index': self.index}),
                self.emit('response.content_part.added', {'content_index': 0, 'item_id': self.item_id,
                                                          'output_index': self.index, 'part': part})]

    def preamble(self) -> list[bytes]:
        return self.started() + self.message_opened()

    def content(self, text: str, index: int = 0, event: str | None = None) -> bytes:
        self.parts.append(text)
        return self.emit('response.output_text.delta', {'content_index': 0, 'delta': text, 'item_id': self.item_id,
                                                        'logprobs': [], 'output_index': self.index}, event)

    def closing(self, reason: str, terminal: str = 'response.completed', final_text: str | None = None) -> list[bytes]:
        """The done events, then the terminal event. reason length ends with status "incomplete", which
        vLLM sends as response.completed (terminal="response.incomplete" is OpenAI's name for it).
        final_text, if given, is what the terminal event claims the answer was."""
        text = ''.join(self.parts)
        part = {'annotations': [], 'text': text, 'type': 'output_text', 'logprobs': None}
        item = {'id': self.item_id, 'content': [part], 'role': 'assistant', 'status': 'completed', 'type': 'message',
                'phase': None}
        writes = [self.emit('response.output_text.done', {'content_index': 0, 'item_id': self.item_id,
                                                          'logprobs': [], 'output_index': self.index, 'text': text}),
                  self.emit('response.content_part.done', {'content_index': 0, 'item_id': self.item_id,
                                                           'output_index': self.index, 'part': part}),
                  self.emit('response.output_item.done', {'item': item, 'output_index': self.index})]
        claimed = item if final_text is None else {**item, 'content': [{**part, 'text': final_text}]}
        self.items = self.items + [claimed]
        status, why = ('completed', None) if reason == 'stop' else ('incomplete', 'max_output_tokens')
        return writes + [self.emit(terminal, {'response': self.response(status, why)})]

    def crash(self) -> list[bytes]:
        """An error event, as OpenAI's Responses API reports a failure after the 200; it ends the stream."""
        return [self.emit('error', {'code': 'server_error', 'message': ENGINE_CRASH, 'param': None})]

    def failed(self) -> list[bytes]:
        failed = {**self.response('failed'), 'error': {'code': 'server_error', 'message': ENGINE_CRASH}}
        return [self.emit('response.failed', {'response': failed})]

    def reasoning_plan(self) -> list[bytes]:
        item_id = f'rs_{os.urandom(8).hex()}'
        item = {'id': item_id, 'summary': [], 'type': 'reasoning', 'content': [], 'encrypted_content': None,
                'status': 'in_progress'}
        writes = self.started() + [self.emit('response.output_item.added', {'item': item, 'output_index': 0})]
        writes += [self.emit('response.reasoning_text.delta', {'content_index': 0, 'delta': text, 'item_id': item_id,
                                                               'output_index': 0}) for text in REASONING]
        done = {**item, 'content': [{'text': ''.join(REASONING), 'type': 'reasoning_text'}], 'status': 'completed'}
        writes += [self.emit('response.reasoning_text.done', {'content_index': 0, 'item_id': item_id,
                                                              'output_index': 0, 'text': ''.join(REASONING)}),
                   self.emit('response.output_item.done', {'item': done, 'output_index': 0})]
        self.items = [done]
        return writes + self.message_opened() + self.answer() + self.closing('stop')

    def tool_calls(self, calls: list[tuple[str, tuple[str, ...]]], finish: str = 'tool_calls',
                   interleaved: bool = False, claimed: str | None = None) -> list[bytes]:
        """Function calls as vLLM 0.32 streams them (captures r8, r9): each output item opens with its
        call_id and name, its arguments arrive as deltas, then its .done and output_item.done, and the
        terminal event lists the calls. claimed, if given, is what the .done events say the first
        call's arguments were (a stream that contradicts itself)."""
        items = [{'arguments': '', 'call_id': f'chatcmpl-tool-{index + 1}', 'name': name, 'type': 'function_call',
                  'id': f'fc_{index + 1}', 'async': None, 'caller': None, 'namespace': None, 'status': 'in_progress'}
                 for index, (name, _) in enumerate(calls)]

        def opened(index: int) -> bytes:  # emit() numbers events as they are made: make them in sending order
            return self.emit('response.output_item.added', {'item': items[index], 'output_index': index})

        def delta(index: int, piece: str) -> bytes:
            return self.emit('response.function_call_arguments.delta',
                             {'delta': piece, 'item_id': items[index]['id'], 'output_index': index})
        writes = self.started()
        if interleaved:
            writes += [opened(index) for index in range(len(items))]
            turns = itertools.zip_longest(*[[(index, piece) for piece in parts]
                                            for index, (_, parts) in enumerate(calls)])
            writes += [delta(*turn_piece) for turn in turns for turn_piece in turn if turn_piece]
        else:
            for index, (_, parts) in enumerate(calls):
                writes += [opened(index)] + [delta(index, piece) for piece in parts]
        done = []
        for index, ((name, parts), item) in enumerate(zip(calls, items)):
            arguments = claimed if claimed is not None and index == 0 else ''.join(parts)
            done.append({**item, 'arguments': arguments, 'status': 'completed'})
            writes += [self.emit('response.function_call_arguments.done', {'arguments': arguments,
                                                                           'item_id': item['id'],
                                                                           'output_index': index, 'name': name}),
                       self.emit('response.output_item.done', {'item': done[-1], 'output_index': index})]
        self.items = done
        status, why = ('completed', None) if finish in ('tool_calls', 'stop') else ('incomplete', 'max_output_tokens')
        return writes + [self.emit('response.completed', {'response': self.response(status, why)})]


class _Messages:
    """The Anthropic Messages API's events, as vLLM 0.32 streams them (captures m1 to m5): each has an event
    field naming its type, and that type first in its data; message_start, then content blocks numbered
    from 0 (content_block_start, deltas, content_block_stop), a message_delta with the stop_reason and
    the usage, and message_stop."""

    api = 'messages'
    STOP_REASONS = {'stop': 'end_turn', 'length': 'max_tokens', 'tool_calls': 'tool_use'}

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.message_id = f'chatcmpl-{os.urandom(8).hex()}'
        self.block = -1  # the index of the last block started

    def emit(self, kind: str, body: dict | None = None) -> bytes:
        return self.sse(self.dumps({'type': kind, **(body or {})}), kind)

    def started(self) -> list[bytes]:
        message = {'id': self.message_id, 'type': 'message', 'role': 'assistant', 'content': [], 'model': self.model,
                   'stop_reason': None, 'stop_sequence': None,
                   'usage': {'input_tokens': self.input_tokens, 'output_tokens': 0}}
        return self.comments() + [self.emit('message_start', {'message': message})]

    def block_start(self, block: dict) -> bytes:
        self.block += 1
        return self.emit('content_block_start', {'content_block': block, 'index': self.block})

    def block_stop(self) -> bytes:
        return self.emit('content_block_stop', {'index': self.block})

    def delta(self, delta: dict, index: int | None = None) -> bytes:
        return self.emit('content_block_delta', {'delta': delta, 'index': self.block if index is None else index})

    def preamble(self) -> list[bytes]:
        return self.started() + [self.block_start({'type': 'text', 'text': ''})]

    def content(self, text: str, index: int = 0) -> bytes:
        return self.delta({'type': 'text_delta', 'text': text})

    def ending(self, reason: str) -> list[bytes]:
        """The message_delta with the stop_reason (end_turn, max_tokens or tool_use), then message_stop."""
        usage = {'input_tokens': self.input_tokens, 'output_tokens': 3 if self.tokens is None else self.tokens}
        return [self.emit('message_delta', {'delta': {'stop_reason': self.STOP_REASONS[reason], 'stop_sequence': None},
                                            'usage': usage}),
                self.emit('message_stop')]

    def closing(self, reason: str) -> list[bytes]:
        return [self.block_stop()] + self.ending(reason)

    def crash(self) -> list[bytes]:
        """Anthropic's error event, as its API reports an overloaded server after the 200."""
        return [self.emit('error', {'error': {'type': 'overloaded_error', 'message': 'Overloaded'}})]

    def reasoning_plan(self) -> list[bytes]:
        writes = self.started() + [self.block_start({'type': 'thinking', 'thinking': ''})]  # in sending order:
        writes += [self.delta({'type': 'thinking_delta', 'thinking': text}) for text in REASONING]  # a delta
        writes += [self.block_stop(), self.block_start({'type': 'text', 'text': ''})]  # takes the open block
        return writes + self.answer() + self.closing('stop')

    def tool_calls(self, calls: list[tuple[str, tuple[str, ...]]], finish: str = 'tool_calls',
                   interleaved: bool = False) -> list[bytes]:
        """tool_use blocks, one after another (the Messages API never interleaves blocks), their input
        in input_json_delta pieces."""
        writes = self.started()
        for index, (name, parts) in enumerate(calls):
            writes.append(self.block_start({'type': 'tool_use', 'id': f'chatcmpl-tool-{index + 1}', 'name': name,
                                            'input': {}}))
            writes += [self.delta({'type': 'input_json_delta', 'partial_json': piece}) for piece in parts]
            writes.append(self.block_stop())
        return writes + self.ending(finish)


class GuideMessages(_Messages, GuideProfile):
    """The Messages API in the guide's bytes (CRLF, Content-Length, a comment first, HTML errors)."""


class VllmMessages(_Messages, VllmProfile):
    """The Messages API as vLLM 0.32 streams it, with its error body {"type": "error", "error": {...}}."""

    def error(self, status: int, message: str, kind: str,
              param: str | None = None) -> tuple[list[tuple[str, str]], bytes]:
        body = json.dumps({'type': 'error', 'error': {'type': kind, 'message': message}},
                          separators=(',', ':')).encode()
        return self._error_headers(len(body), 'application/json', vary=True), body


class GuideResponses(_Responses, GuideProfile):
    """The Responses API in the guide's bytes (CRLF, Content-Length, a comment first)."""


class VllmResponses(_Responses, VllmProfile):
    """The Responses API as vLLM 0.32 streams it."""


# The servers users run beside vLLM, each in its own bytes where it departs from vLLM's (docs/dialects.md).
# The fixture still names itself in the server header, beside the server's own product token where the
# server sends one, so that a record made against it is never mistaken for evidence about a model.

class _LlamaHead:
    """llama-server's head (tools/server/server-http.cpp): Server: llama.cpp and X-Accel-Buffering: no."""

    def headers(self) -> list[tuple[str, str]]:
        return [('server', SERVER_NAME + ' llama.cpp'), ('content-type', 'text/event-stream'),
                ('x-accel-buffering', 'no')]


class LlamaCppProfile(_LlamaHead, VllmProfile):
    """Chat completions as llama-server streams them: vLLM's chunk shape, its head."""


class LlamaCppCompletions(_LlamaHead, VllmCompletions):
    """Completions as llama-server streams them."""


class LlamaCppResponses(_LlamaHead, _Responses, VllmProfile):
    """The Responses API as llama-server streams it (server-task.cpp, to_json_oaicompat_resp): no
    sequence_number, output_index or content_index on any event, and response.completed says
    "completed" also when max_output_tokens cut the answer, its usage counting the whole budget."""

    def emit(self, kind: str, body: dict, event: str | None = None) -> bytes:
        body = {key: value for key, value in body.items() if key not in ('output_index', 'content_index')}
        return self.sse(self.dumps({'type': kind, **body}), event or kind)

    def response(self, status: str, reason: str | None = None, output: list | None = None) -> dict:
        cut = status == 'incomplete'
        body = super().response('completed' if cut else status, None, output)
        if cut:
            body['usage'] = {**body['usage'], 'output_tokens': self.budget or 128}
        return body


class LlamaCppMessages(_LlamaHead, _Messages, VllmProfile):
    """The Messages API as llama-server streams it (server-task.cpp, to_json_anthropic): with reasoning,
    the text block starts while the thinking block is open, and both stop at the end, the thinking
    block after an empty signature_delta."""

    def reasoning_plan(self) -> list[bytes]:
        writes = self.started() + [self.block_start({'type': 'thinking', 'thinking': ''})]
        writes += [self.delta({'type': 'thinking_delta', 'thinking': text}) for text in REASONING]
        writes += [self.block_start({'type': 'text', 'text': ''})] + self.answer()
        writes += [self.delta({'type': 'signature_delta', 'signature': ''}, 0), self.emit('content_block_stop',
                                                                                        {'index': 0}),
                   self.block_stop()]
        return writes + self.ending('stop')


class _TgiHead:
    """TGI's head (router/src/server.rs): the x-compute-type header."""

    def headers(self) -> list[tuple[str, str]]:
        return [('server', SERVER_NAME), ('content-type', 'text/event-stream'), ('cache-control', 'no-cache'),
                ('x-compute-type', 'synthetic')]


class TgiProfile(_TgiHead, VllmProfile):
    """Chat completions as TGI streams them (router/src/chat.rs): an empty id, a -native
    system_fingerprint, and a tool-call stream that ends with [DONE] and no finish_reason."""

    def chunk(self, choices: list, **extra) -> bytes:
        body = {'id': '', 'object': self.object, 'created': self.created, 'model': self.model,
                'system_fingerprint': '3.3.6-native', 'choices': choices, **extra}
        return self.sse(self.dumps(body))

    def tool_calls(self, calls: list[tuple[str, tuple[str, ...]]], finish: str = 'tool_calls',
                   interleaved: bool = False) -> list[bytes]:
        writes = super().tool_calls(calls, finish, interleaved)
        if finish == 'tool_calls':
            del writes[-3]  # the finish chunk: TGI buffers the token that carries it and never sends it
        return writes


class TgiCompletions(_TgiHead, VllmCompletions):
    """Completions as TGI streams them."""


class SglangProfile(VllmProfile):
    """Chat completions as SGLang's OpenAI adapter streams them: vLLM's shape, with matched_stop on the
    finish chunk. SGLang follows the vendor rules (no dialect)."""

    def event(self, delta: dict | None = None, reason: str | None = None, index: int = 0,
              token_ids: list[int] | None = None) -> bytes:
        choice = {'index': index, 'delta': delta or {}, 'logprobs': None, 'finish_reason': reason}
        if reason is not None:
            choice['matched_stop'] = None
        return self.chunk([choice])


class OllamaProfile(VllmProfile):
    """Chat completions as Ollama's OpenAI layer streams them (openai/openai.go): the fp_ollama
    system_fingerprint, and an error after the 200 written as a bare JSON line, outside SSE."""

    def chunk(self, choices: list, **extra) -> bytes:
        body = {'id': f'chatcmpl-{self.id[-3:]}', 'object': self.object, 'created': self.created,
                'model': self.model, 'system_fingerprint': 'fp_ollama', 'choices': choices, **extra}
        return self.sse(self.dumps(body))

    def crash(self) -> list[bytes]:
        error = {'error': {'message': ENGINE_CRASH, 'type': 'api_error', 'param': None, 'code': None}}
        return [self.dumps(error) + b'\n']


PROFILES = {'guide': GuideProfile, 'vllm': VllmProfile}  # the wire formats
SERVERS = ('llama.cpp', 'tgi', 'sglang', 'ollama')  # the servers beside vLLM, each in its bytes
PROFILE_NAMES = (*PROFILES, *SERVERS)  # what --profile accepts
API_PATHS = {'/v1/chat/completions': 'chat', '/v1/completions': 'completions', '/v1/responses': 'responses',
             '/v1/messages': 'messages'}
BUILDERS = {('guide', 'chat'): GuideProfile, ('guide', 'completions'): GuideCompletions,
            ('guide', 'responses'): GuideResponses, ('vllm', 'chat'): VllmProfile,
            ('vllm', 'completions'): VllmCompletions, ('vllm', 'responses'): VllmResponses,
            ('guide', 'messages'): GuideMessages, ('vllm', 'messages'): VllmMessages,
            ('llama.cpp', 'chat'): LlamaCppProfile, ('llama.cpp', 'completions'): LlamaCppCompletions,
            ('llama.cpp', 'responses'): LlamaCppResponses, ('llama.cpp', 'messages'): LlamaCppMessages,
            ('tgi', 'chat'): TgiProfile, ('tgi', 'completions'): TgiCompletions,
            ('tgi', 'responses'): VllmResponses, ('tgi', 'messages'): VllmMessages,
            ('sglang', 'chat'): SglangProfile, ('sglang', 'completions'): VllmCompletions,
            ('sglang', 'responses'): VllmResponses, ('sglang', 'messages'): VllmMessages,
            ('ollama', 'chat'): OllamaProfile, ('ollama', 'completions'): VllmCompletions,
            ('ollama', 'responses'): VllmResponses, ('ollama', 'messages'): VllmMessages}


@dataclasses.dataclass
class Plan:
    """What one response sends: its status and body pieces, how they are paced (PACES) and ended (ENDINGS)."""

    writes: list[bytes] = dataclasses.field(default_factory=list)
    status: int = 200
    missing: int = 0        # bytes the framing promises beyond the writes (chunked: no terminator)
    ending: str = 'close'
    pace: str = 'each'

    def __post_init__(self) -> None:
        if self.ending not in ENDINGS or self.pace not in PACES:
            raise ValueError(f'unknown ending {self.ending!r} or pace {self.pace!r}')


def _unterminated(p: GuideProfile) -> Plan:
    *events, terminal = p.opening() + p.closing('stop')
    return Plan(events + [terminal.rstrip(b'\r\n') + b'\n'])


def _cut_mid_answer(p: GuideProfile) -> Plan:
    """What a proxy's read timeout leaves: the first content event, then half of the next, and the
    connection closes with the framing short (no terminating chunk, or fewer bytes than Content-Length)."""
    preamble = p.preamble()  # first: the content events of some APIs name what the preamble opened
    first, second = p.answer()[:2]
    return Plan(preamble + [first, second[:len(second) // 2]], missing=MISSING_BYTES)


def _long(p: GuideProfile) -> GuideProfile:
    """The profile with BURST_TOKENS content events, unless --tokens chose a number."""
    return p if p.tokens is not None else type(p)(p.model, BURST_TOKENS, p.reasoning_field)


def _complete(p: GuideProfile, **pacing) -> Plan:
    return Plan(p.opening() + p.closing('stop'), **pacing)


def _sequence_gap(p: _Responses) -> Plan:
    opening = p.opening()
    p.sequence += 1  # one number never sent: an event lost on the way
    return Plan(opening + p.closing('stop'))


def _type_mismatch(p: _Responses) -> Plan:
    return Plan(p.preamble() + [p.content('READY ', event='response.text.delta')] + p.closing('stop'))


# Pair modes: a streamed chat answer and its unstreamed twin, both with token ids, for the client's
# --cross-check. The stream sends one event per piece with that piece's token ids; a piece it drops still
# sends its ids, with an empty delta, as a parser that loses a piece does. The unstreamed answer is the
# one the tokens make.

class Piece(typing.NamedTuple):
    """One event of a pair's stream: text, or a piece of tool call ``call`` (named as it opens), and the
    tokens it took; ``shown`` false when the stream drops it."""

    tokens: int
    text: str = ''
    call: int | None = None
    name: str | None = None
    arguments: str = ''
    shown: bool = True


@dataclasses.dataclass(frozen=True)
class Pair:
    """A streamed answer (its pieces and finish_reason) and its unstreamed twin (text, calls, finish).
    ``diverge_at``: the twin's token ids differ from this one on (another generation); ``fill_budget``:
    the last piece takes every token the request's max_tokens leaves, so the usage counts the whole budget."""

    pieces: tuple[Piece, ...]
    finish: str
    text: str
    calls: tuple[tuple[str, str], ...]
    unstreamed_finish: str
    diverge_at: int | None = None
    fill_budget: bool = False
    offers_tools: bool = True  # the client's --fixture offers TOOLS with this mode


FIRST_TOKEN_ID = 100
WEATHER_CALL = ('get_weather', ''.join(PARIS))
_OPEN_WEATHER = Piece(3, call=0, name='get_weather')
PAIRS = {
    'pair-honest': Pair((_OPEN_WEATHER, Piece(4, call=0, arguments=PARIS[0]), Piece(2, call=0, arguments=PARIS[1])),
                        'tool_calls', '', (WEATHER_CALL,), 'tool_calls'),
    'pair-args-dropped': Pair((_OPEN_WEATHER, Piece(4, call=0, arguments='{"city": "Paris"'),
                               Piece(4, call=0, arguments=', "unit": "celsius"', shown=False),
                               Piece(1, call=0, arguments='}')),
                              'tool_calls', '', (('get_weather', '{"city": "Paris", "unit": "celsius"}'),),
                              'tool_calls'),
    'pair-call-dropped': Pair((_OPEN_WEATHER, Piece(4, call=0, arguments=PARIS[0]),
                               Piece(2, call=0, arguments=PARIS[1]),
                               Piece(3, call=1, name='get_weather', shown=False),
                               Piece(4, call=1, arguments='{"city": "Tokyo"}', shown=False)),
                              'tool_calls', '', (WEATHER_CALL, ('get_weather', '{"city": "Tokyo"}')), 'tool_calls'),
    'pair-markup-leak': Pair((Piece(1, '<tool_call>\n'), Piece(4, '{"name": "get_weather", '),
                              Piece(4, '"arguments": {"city": "Paris"}}'), Piece(2, '\n</tool_call>')),
                             'stop', '', (WEATHER_CALL,), 'tool_calls'),
    'pair-budget-relabelled': Pair((_OPEN_WEATHER, Piece(4, call=0, arguments=PARIS[0]),
                                    Piece(1, call=0, arguments='"Par')),
                                   'tool_calls', '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Par', (),
                                   'length', fill_budget=True),
    'pair-diverged': Pair((Piece(1, ANSWER[0]), Piece(2, ANSWER[1])), 'stop', 'READY!', (), 'stop', diverge_at=1,
                          offers_tools=False),
}


def _pair_tokens(pair: Pair, budget: int | None) -> list[int]:
    """How many tokens each piece took."""
    counts = [piece.tokens for piece in pair.pieces]
    if pair.fill_budget:
        counts[-1] = max(1, (budget or 128) - sum(counts[:-1]))
    return counts


def _piece_delta(p: GuideProfile, piece: Piece) -> dict:
    if not piece.shown:
        return {}
    if piece.call is None:
        return {'content': piece.text}
    if piece.name is not None:
        return p.tool_delta({'id': f'chatcmpl-tool-{piece.call + 1}', 'type': 'function', 'index': piece.call,
                             'function': {'name': piece.name}})
    return p.tool_delta({'index': piece.call, 'function': {'arguments': piece.arguments}})


def pair_stream(p: GuideProfile, pair: Pair) -> list[bytes]:
    """The streamed side of a pair: each piece with its token ids, the finish, the usage and [DONE]."""
    counts = _pair_tokens(pair, p.budget)
    ids = iter(range(FIRST_TOKEN_ID, FIRST_TOKEN_ID + sum(counts)))
    writes = p.preamble() + [p.event(_piece_delta(p, piece), token_ids=[next(ids) for _ in range(count)])
                             for piece, count in zip(pair.pieces, counts)]
    return writes + [p.event({}, pair.finish, token_ids=[]), p.usage(sum(counts)), p.done()]


def pair_unstreamed(p: GuideProfile, pair: Pair) -> tuple[int, list[tuple[str, str]], bytes]:
    """The unstreamed side of a pair: the chat completion its tokens make, in vLLM 0.32's shape."""
    total = sum(_pair_tokens(pair, p.budget))
    ids = list(range(FIRST_TOKEN_ID, FIRST_TOKEN_ID + total))
    if pair.diverge_at is not None:
        ids[pair.diverge_at:] = [token + 1000 for token in ids[pair.diverge_at:]]
    calls = [{'id': f'chatcmpl-tool-{index + 1}', 'type': 'function',
              'function': {'name': name, 'arguments': arguments}}
             for index, (name, arguments) in enumerate(pair.calls)]
    message = {'role': 'assistant', 'content': pair.text or None, 'refusal': None, 'annotations': None, 'audio': None,
               'function_call': None, 'tool_calls': calls, 'reasoning': None}
    body = {'id': f'chatcmpl-{os.urandom(8).hex()}', 'object': 'chat.completion', 'created': int(time.time()),
            'model': p.model, 'choices': [{'index': 0, 'message': message, 'logprobs': None,
                                           'finish_reason': pair.unstreamed_finish, 'stop_reason': None,
                                           'token_ids': ids}],
            'service_tier': None, 'system_fingerprint': None,
            'usage': {'prompt_tokens': 9, 'total_tokens': 9 + total, 'completion_tokens': total,
                      'prompt_tokens_details': None},
            'prompt_logprobs': None, 'prompt_token_ids': None, 'kv_transfer_params': None}
    data = json.dumps(body, ensure_ascii=False, separators=(',', ':')).encode()
    return 200, p._error_headers(len(data), 'application/json', vary=True), data


# The modes whose answer is tool calls, or JSON: the client's --fixture sends TOOLS or JSON_SCHEMA with them.
TOOL_MODES = ('tool-call', 'tool-args-cut', 'tool-args-empty', 'tool-args-array', 'tool-args-schema', 'tool-parallel',
              'tool-args-mismatch', *(mode for mode, pair in PAIRS.items() if pair.offers_tools), 'agent')
JSON_MODES = ('json-ok', 'json-invalid')

# Each mode maps a profile to a plan. Add a mode by adding a line (and to ONLY_ON if it is API-specific).
MODES = {
    'ok': _complete,
    'capacity': _complete,  # ok, each answer started in its turn: at most the server's capacity per second
    'broken': lambda p: Plan(p.opening()),
    'length': lambda p: Plan(p.opening() + p.closing('length')),
    'malformed': lambda p: Plan(p.opening() + [b'data: {invalid}\n\n']),
    'http-error': lambda p: Plan(status=503),
    'truncated': lambda p: Plan(p.opening() + p.closing('stop'), missing=MISSING_BYTES),
    'cut-mid-answer': _cut_mid_answer,
    'no-done': lambda p: Plan(p.opening() + p.closing('stop')[:-1]),
    'unterminated': _unterminated,
    'held-open': lambda p: Plan(p.opening() + p.closing('stop'), missing=MISSING_BYTES, ending='hold'),
    'after-done': lambda p: Plan(p.opening() + p.closing('stop') + [p.content(' again')]),
    'reasoning': lambda p: Plan(p.reasoning_plan()),
    'tool-call': lambda p: Plan(p.tool_calls([('get_weather', PARIS)])),
    'tool-args-cut': lambda p: Plan(p.tool_calls([('get_weather', ('{"city": ', '"Par'))])),
    'tool-args-empty': lambda p: Plan(p.tool_calls([('get_weather', ())])),
    'tool-args-array': lambda p: Plan(p.tool_calls([('get_weather', ('[]',))])),
    'tool-args-schema': lambda p: Plan(p.tool_calls([('get_weather', ('{"town": ', '"Paris"}'))])),
    'tool-parallel': lambda p: Plan(p.tool_calls([('get_weather', PARIS), ('get_weather', ('{"city": ', '"Tokyo"}'))],
                                                 interleaved=True)),
    'tool-args-mismatch': lambda p: Plan(p.tool_calls([('get_weather', PARIS)], claimed='{"city": "Lyon"}')),
    'json-ok': lambda p: Plan(p.preamble() + [p.content(piece) for piece in PARIS] + p.closing('stop')),
    'json-invalid': lambda p: Plan(p.preamble() + [p.content('{"city": 3}')] + p.closing('stop')),
    'block-unclosed': lambda p: Plan(p.preamble() + p.answer() + p.ending('stop')),
    'block-unknown-index': lambda p: Plan(p.preamble() + [p.content(ANSWER[0]), p.delta({'type': 'text_delta',
                                                                                         'text': ANSWER[1]}, 5)]
                                          + p.closing('stop')),
    'error-event': lambda p: Plan(p.preamble() + [p.content(ANSWER[0])] + p.crash()),
    'stall': lambda p: Plan(missing=MISSING_BYTES, ending='hold'),
    'drip': lambda p: Plan(missing=2**40, ending='drip'),
    'buffered': lambda p: _complete(_long(p), pace='burst'),
    'paired': lambda p: _complete(_long(p), pace='pairs'),
    'multi-choice': lambda p: Plan(p.multi_choice_plan()),
    'split-utf8': lambda p: _complete(p, pace='bytes'),
    'flood': lambda p: Plan([b'data: '] + [FLOOD_PIECE] * FLOOD_PIECES, pace='flat-out'),
    'sequence-gap': _sequence_gap,
    'type-mismatch': _type_mismatch,
    'text-mismatch': lambda p: Plan(p.opening() + p.closing('stop', final_text='READY!')),
    'failed': lambda p: Plan(p.opening() + p.failed()),
    'incomplete': lambda p: Plan(p.opening() + p.closing('length', terminal='response.incomplete')),
    **{mode: (lambda pair: lambda p: Plan(pair_stream(p, pair)))(pair) for mode, pair in PAIRS.items()},
}
# The modes that only some APIs have; every other mode works on all four.
ONLY_ON = {'reasoning': ('chat', 'responses', 'messages'),
           **dict.fromkeys(TOOL_MODES, ('chat', 'responses', 'messages')),
           'tool-args-mismatch': ('responses',), 'block-unclosed': ('messages',), 'block-unknown-index': ('messages',),
           'multi-choice': ('chat', 'completions'), 'sequence-gap': ('responses',), 'type-mismatch': ('responses',),
           'text-mismatch': ('responses',), 'failed': ('responses',), 'incomplete': ('responses',),
           **dict.fromkeys(PAIRS, ('chat',))}


def applies(mode: str, api: str) -> bool:
    return api in ONLY_ON.get(mode, tuple(set(API_PATHS.values())))


# The agent mode: a model in an agent's loop. It reads the request (stateless: the conversation says where
# it is) and answers with a call of the first tool offered when the last message is a user turn, and with
# text after a tool result; the usage counts the prompt with prompt_tokens(). Told to (cut_turn), it cuts
# the first answer of turn N of a session: the call's arguments, or the text.
AGENT = 'agent'
AGENT_ARGUMENT_VALUES = {'string': 'Paris', 'integer': 1, 'number': 1.5, 'boolean': True, 'array': [], 'object': {}}


def _strings(value: object):
    """Every string in a JSON value, keys aside, in order."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def count_tokens(text: str) -> int:
    """The fixture's tokenizer: one token per run of non-space characters."""
    return len(text.split())


def conversation(api: str, request: dict) -> list:
    """The request's conversation, in its API's shape: the system part first (if any), then the messages
    (chat, messages) or the input items (responses; a string input is one user message)."""
    if api == 'responses':
        given = request.get('input')
        items = [{'role': 'user', 'content': given}] if isinstance(given, str) else list(given or [])
        return ([request['instructions']] if request.get('instructions') is not None else []) + items
    system = [request['system']] if api == 'messages' and request.get('system') is not None else []
    return system + list(request.get('messages') or [])


def prompt_tokens(api: str, request: dict) -> int:
    """The prompt tokens the agent mode reports: count_tokens() of every string of the conversation
    (roles, contents, tool calls and results alike), the tools offered left out. Tests know the truth so."""
    return sum(count_tokens(text) for text in _strings(conversation(api, request)))


def _is_tool_result(api: str, item: object) -> bool:
    if not isinstance(item, dict):
        return False
    if api == 'chat':
        return item.get('role') == 'tool'
    if api == 'responses':
        return item.get('type') == 'function_call_output'
    content = item.get('content')
    return item.get('role') == 'user' and isinstance(content, list) and \
        any(isinstance(block, dict) and block.get('type') == 'tool_result' for block in content)


def _is_user_turn(api: str, item: object) -> bool:
    return isinstance(item, dict) and item.get('role') == 'user' and not _is_tool_result(api, item)


def agent_turn(api: str, request: dict) -> tuple[int, bool]:
    """(turn, answering a user): the number of user turns so far, and whether the last message is one."""
    items = conversation(api, request)
    turns = sum(1 for item in items if _is_user_turn(api, item))
    return turns, bool(items) and _is_user_turn(api, items[-1])


def first_user_text(api: str, request: dict) -> str:
    """The text of the session's first user turn, which names the session for cut_session."""
    first = next((item for item in conversation(api, request) if _is_user_turn(api, item)), None)
    return ' '.join(_strings(first.get('content'))) if first else ''


def offered_tool(request: dict) -> tuple[str, dict] | None:
    """The first tool offered, as (name, parameters), in any API's shape; None if none is."""
    tools = request.get('tools')
    if not isinstance(tools, list) or not tools or not isinstance(tools[0], dict):
        return None
    tool = tools[0].get('function', tools[0])
    if not isinstance(tool, dict) or not isinstance(tool.get('name'), str):
        return None
    parameters = tool.get('parameters', tool.get('input_schema'))
    return tool['name'], parameters if isinstance(parameters, dict) else {}


def call_arguments(parameters: dict) -> str:
    """The arguments the agent mode calls a tool with: each required property, a value of its type."""
    properties = parameters.get('properties') if isinstance(parameters.get('properties'), dict) else {}
    required = parameters.get('required') if isinstance(parameters.get('required'), list) else []
    return json.dumps({name: AGENT_ARGUMENT_VALUES.get((properties.get(name) or {}).get('type'), 'x')
                       for name in required if isinstance(name, str)})


class AgentAnswer(typing.NamedTuple):
    """What the agent mode sent to one request (kept by a server built with record=True): the request's
    body as received, its turn, whether it was cut, and the answer: text, or calls (id, name, arguments)."""

    api: str
    body: bytes
    turn: int
    cut: bool
    text: str
    calls: tuple[tuple[str, str, str], ...]


def agent_plan(profile: GuideProfile, request: dict, body: bytes = b'', cut_turn: int | None = None,
               cut_session: str | None = None) -> tuple[Plan, AgentAnswer]:
    """The agent mode's answer to one request (see AGENT), and what it says; cut_session, if given,
    limits the cut to the sessions whose first user turn contains it."""
    api = profile.api
    profile.prompt_tokens = prompt_tokens(api, request)
    turn, answering_user = agent_turn(api, request)
    cut = answering_user and turn == cut_turn and (cut_session is None or cut_session in first_user_text(api, request))
    tool = offered_tool(request) if answering_user else None
    if tool is None:
        plan = _cut_mid_answer(profile) if cut else _complete(profile)
        text = ANSWER[0] if cut else ''.join(ANSWER) if profile.tokens is None else \
            ''.join(f'token{i} ' for i in range(profile.tokens))
        return plan, AgentAnswer(api, body, turn, cut, text, ())
    name, parameters = tool
    arguments = call_arguments(parameters)
    half = len(arguments) // 2
    pieces = (arguments[:half], arguments[half:-3]) if cut else (arguments[:half], arguments[half:])
    return Plan(profile.tool_calls([(name, pieces)])), AgentAnswer(api, body, turn, cut, '',
                                                                  (('chatcmpl-tool-1', name, ''.join(pieces)),))


MIXED = 'mixed'
MIXED_OK_SHARE = 0.6
# The failures a mixed fixture picks from: one of each layer's quick failures, all valid on every API.
MIXED_FAILURES = ('broken', 'length', 'malformed', 'http-error', 'truncated', 'no-done', 'unterminated',
                  'after-done', 'error-event')
CHOICES = (*MODES, MIXED, AGENT)  # what --mode accepts


class Schedule:
    """The modes a mixed fixture serves, one per request in arrival order, drawn from a seeded generator:
    MIXED_OK_SHARE of them ok, the rest spread over MIXED_FAILURES. ``served`` counts what was sent."""

    def __init__(self, seed: int) -> None:
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self.served: collections.Counter = collections.Counter()

    def next_mode(self) -> str:
        with self._lock:
            mode = 'ok' if self._rng.random() < MIXED_OK_SHARE else self._rng.choice(MIXED_FAILURES)
            self.served[mode] += 1
        return mode


def parse_capture(raw: bytes) -> tuple[bytes, list[bytes]]:
    """Split a captured response into its head and body writes (one per HTTP chunk when chunked)."""
    head, separator, body = raw.partition(b'\r\n\r\n')
    if not separator or not head.startswith(b'HTTP/'):
        raise ValueError('not a captured HTTP response: expected a status line, headers and a blank line')
    head += separator
    if b'\ntransfer-encoding: chunked' not in head.lower():
        return head, [body] if body else []
    writes, pos = [], 0
    while pos < len(body):
        eol = body.find(b'\r\n', pos)
        if eol < 0:
            break
        try:
            size = int(body[pos:eol].split(b';')[0], 16)
        except ValueError:
            break
        end = eol + 2 + size + 2 if size else len(body)
        writes.append(body[pos:end])
        pos = end
    if pos < len(body):
        writes.append(body[pos:])  # bytes that are not well-formed chunks are replayed as they are
    return head, writes


def pace_each(handler: "Handler", writes) -> None:
    """Sleep --delay before each write."""
    delay = handler.server.delay
    for data in writes:
        if delay:
            time.sleep(delay)
        handler.wfile.write(data)


def pace_burst(handler: "Handler", writes) -> None:
    """A buffering proxy: nothing for as long as the writes would take, then everything at once."""
    writes = list(writes)
    time.sleep(handler.server.delay * len(writes))
    handler.wfile.write(b''.join(writes))


def pace_bytes(handler: "Handler", writes) -> None:
    """One byte per write (Nagle off), so that UTF-8 characters and line ends arrive split."""
    handler.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    delay = min(handler.server.delay / 20, 0.001)
    for data in writes:
        for i in range(len(data)):
            if delay:
                time.sleep(delay)
            handler.wfile.write(data[i:i + 1])


def pace_pairs(handler: "Handler", writes) -> None:
    """A proxy that holds the events back and passes them on two at a time (HAProxy without
    option http-no-delay): each pair is written together, four delays after the last."""
    writes = iter(writes)
    for pair in itertools.zip_longest(writes, writes, fillvalue=b''):
        time.sleep(handler.server.delay * 4)
        handler.wfile.write(b''.join(pair))


def pace_flat_out(handler: "Handler", writes) -> None:
    """No delay at all."""
    for data in writes:
        handler.wfile.write(data)


def end_close(handler: "Handler", frame) -> None:
    """Close the connection once the writes are done."""


def end_hold(handler: "Handler", frame) -> None:
    """Keep the connection open and silent until the client leaves (or HOLD_LIMIT)."""
    end = time.monotonic() + HOLD_LIMIT
    left = HOLD_LIMIT
    while left > 0:
        readable, _, _ = select.select([handler.connection], [], [], min(left, 0.2))
        if readable and not handler.connection.recv(4096):
            return
        left = end - time.monotonic()


def end_drip(handler: "Handler", frame) -> None:
    """Send a keepalive comment every DRIP_INTERVAL seconds (for up to HOLD_LIMIT)."""
    end = time.monotonic() + HOLD_LIMIT
    while time.monotonic() < end:
        time.sleep(DRIP_INTERVAL)
        handler.wfile.write(frame(b': keep-alive\n\n'))


# How a plan's writes are spaced, and what happens after them. Add a strategy by adding a line.
PACES = {'each': pace_each, 'burst': pace_burst, 'pairs': pace_pairs, 'bytes': pace_bytes,
         'flat-out': pace_flat_out}
ENDINGS = {'close': end_close, 'hold': end_hold, 'drip': end_drip}


def mark_replay(head: bytes, writes: list[bytes]) -> tuple[bytes, list[bytes]]:
    """The captured head with REPLAY_MARK added after its status line, so the client can tell a replay,
    and "Connection: close" unless the capture names its connection: a replay ends its connection
    (a capture's framing is whatever it was), and says so, so that a kept-alive client does not take
    the close for a stale connection."""
    status, separator, rest = head.partition(b'\r\n')
    says_connection = any(line.lower().startswith(b'connection:') for line in rest.split(b'\r\n'))
    closing = b'' if says_connection else b'connection: close\r\n'
    return status + separator + REPLAY_MARK + b'\r\n' + closing + rest, writes


class Handler(BaseHTTPRequestHandler):
    """Answers POST on the four API paths according to the server's settings, and GET on /v1/models and /health."""

    protocol_version = 'HTTP/1.1'
    server_version = SERVER_NAME

    def setup(self) -> None:
        # The socket timeout is how long a kept-alive connection waits for its next request: when it runs
        # out, BaseHTTPRequestHandler closes the connection without a word (--idle-close).
        self.timeout = self.server.idle_close
        super().setup()

    def log_message(self, format, *args):
        pass

    def do_GET(self):
        """The routes a user checks before streaming: the model list and the health check; and /metrics."""
        model = self.server.model_name or 'synthetic-fixture'
        if self.path == '/metrics':
            body = self.server.metrics.exposition(model)
            self._send(200, [('content-type', 'text/plain; version=0.0.4; charset=utf-8'),
                             ('content-length', str(len(body)))], body)
            return
        profile = BUILDERS[self.server.profile, 'chat'](model)
        answer = {'/v1/models': profile.models, '/health': profile.health,
                  **{path: profile.method_not_allowed for path in API_PATHS}}
        self._send(*answer.get(self.path, profile.not_found)())

    def do_POST(self):
        settings = self.server
        api = API_PATHS.get(self.path)
        if self.path == '/tokenize' and settings.tokenize:
            self._tokenize()
            return
        if api is None:
            self._send_error(404, f'only {", ".join(API_PATHS)} are served', 'NotFoundError', keep_alive=False)
            return
        request = self._read_request()
        if request is None:
            return
        settings.last_request = (dict(self.headers), request)
        if settings.api_key and self.headers.get('Authorization') != f'Bearer {settings.api_key}':
            self._send(*BUILDERS[settings.profile, 'chat']().unauthorized())  # vLLM's auth middleware answers early
            return
        model = request.get('model')
        if settings.model_name is not None and model != settings.model_name:
            message = f'The model `{model}` does not exist. Valid aliases: {settings.model_name}.'  # vLLM's words
            self._send(404, *BUILDERS[settings.profile, api]().error(404, message, 'NotFoundError', 'model'))
            return
        try:
            if settings.replay is not None:
                unstreamed = request['stream'] is False and settings.replay_twin is not None
                self._replay(*(settings.replay_twin if unstreamed else settings.replay))
                self.close_connection = True  # a capture's framing is whatever it was
            else:
                with settings.metrics.stream(request):
                    self._stream(settings.mode, api, request)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client left; nothing to report to it

    def _stream(self, mode: str, api: str, request: dict) -> None:
        origin = f'the fixture was started in {mode} mode'
        if mode == MIXED:
            mode = self.server.schedule.next_mode()
            origin = f'the fixture in mixed mode served {mode} to this request'
        if not applies(mode, api):
            self._send_error(400, f'mode {mode} does not apply to {self.path}; it applies to '
                                  f'{" and ".join(ONLY_ON[mode])}', 'BadRequestError')
            return
        if request['stream'] is False and mode not in PAIRS:
            self._send_error(400, f'mode {mode} only streams; an unstreamed request (stream false) needs a pair mode '
                                  f'({", ".join(PAIRS)})', 'BadRequestError')
            return
        model = request.get('model') if isinstance(request.get('model'), str) else 'synthetic-fixture'
        budget = next((request[key] for key in ('max_tokens', 'max_output_tokens') if type(request.get(key)) is int),
                      None)
        profile = BUILDERS[self.server.profile, api](model, self.server.tokens, self.server.reasoning_field, budget)
        if self.server.prefix_cache is not None:
            time.sleep(self.server.prefix_cache.admit(cache_text(api, request)))
        if mode == AGENT:
            plan, answer = agent_plan(profile, request, self.body, self.server.cut_turn, self.server.cut_session)
            if self.server.received is not None:
                self.server.received.append(answer)
            self._answer(plan, profile, origin)
            return
        if request['stream'] is False:
            self._send(*pair_unstreamed(profile, PAIRS[mode]))
            return
        if mode == 'capacity':
            self.server.turns.wait()
        self._answer(MODES[mode](profile), profile, origin)

    def _tokenize(self) -> None:
        """POST /tokenize as vLLM answers it, with the fixture's tokenizer (count_tokens()): a "prompt", or
        "messages" counted as the agent mode counts a chat prompt (prompt_tokens())."""
        request = self._read_request(needs_stream=False)
        if request is None:
            return
        count = (count_tokens(request['prompt']) if isinstance(request.get('prompt'), str)
                 else prompt_tokens('chat', request))
        body = json.dumps({'count': count, 'max_model_len': 1 << 20, 'tokens': list(range(count)),
                           'token_strs': None}, separators=(',', ':')).encode()
        self._send(200, GuideProfile._error_headers(len(body), 'application/json', vary=True), body)

    def _read_request(self, needs_stream: bool = True) -> dict | None:
        """The JSON request, or None after answering 413 or 400."""
        length = self.headers.get('Content-Length', '')
        if not length.isdigit() or not 0 < int(length) <= MAX_REQUEST_BYTES:
            self._send_error(413, f'expected a JSON body of 1 to {MAX_REQUEST_BYTES} bytes', 'BadRequestError',
                             keep_alive=False)  # the body was not read
            return None
        self.body = self.rfile.read(int(length))
        try:
            request = json.loads(self.body)
        except (ValueError, RecursionError):
            self._send_error(400, 'the body is not JSON', 'BadRequestError')
            return None
        if not isinstance(request, dict) or needs_stream and not isinstance(request.get('stream'), bool):
            self._send_error(400, 'expected a JSON object with "stream": true (or false, for a pair mode)',
                             'BadRequestError')
            return None
        return request

    def _send_error(self, status: int, message: str, kind: str, keep_alive: bool = True) -> None:
        self._send(status, *BUILDERS[self.server.profile, 'chat']().error(status, message, kind), keep_alive=keep_alive)

    def _send(self, status: int, headers: list[tuple[str, str]], body: bytes, keep_alive: bool = True) -> None:
        """A complete response with a Content-Length body. The connection stays open for the next request
        unless keep_alive is false or the headers say Connection: close, and then it says so."""
        closing = not keep_alive or ('connection', 'close') in {(n.lower(), v.lower()) for n, v in headers}
        self.send_response_only(status)
        for name, value in headers:
            self.send_header(name, value)
        if closing and not any(name.lower() == 'connection' for name, _ in headers):
            self.send_header('connection', 'close')
        self.end_headers()
        self.wfile.write(body)
        if closing:
            self.close_connection = True

    def _answer(self, plan: Plan, profile: GuideProfile, origin: str) -> None:
        """Send a plan; origin, why its mode was chosen, is the message of an error status."""
        if plan.status != 200:
            self._send(plan.status, *profile.error(plan.status, origin, 'Service Unavailable'))
            return
        chunked = profile.framing == 'chunked'
        self.send_response_only(200)
        if not chunked:
            self.send_header('Server', self.version_string())
            self.send_header('Date', self.date_time_string())
        for name, value in profile.headers():
            self.send_header(name, value)
        if chunked:
            self.send_header('transfer-encoding', 'chunked')
        else:
            self.send_header('Content-Length', str(sum(map(len, plan.writes)) + plan.missing))
        self.end_headers()
        frame = (lambda piece: b'%x\r\n%s\r\n' % (len(piece), piece)) if chunked else (lambda piece: piece)
        writes = map(frame, plan.writes)  # lazily: flood mode sends a gigabyte
        if chunked and not plan.missing:
            writes = itertools.chain(writes, [b'0\r\n\r\n'])
        PACES[plan.pace](self, writes)
        ENDINGS[plan.ending](self, frame)
        if plan.missing or plan.ending != 'close':  # the message did not end as framed: the connection cannot go on
            self.close_connection = True

    def _replay(self, head: bytes, writes: list[bytes]) -> None:
        self.wfile.write(head)
        for data in writes:
            time.sleep(self.server.delay)
            self.wfile.write(data)


class Turns:
    """The capacity mode's admission: answers start at least 1/capacity seconds apart, each request in
    its turn in arrival order, so that the server serves at most capacity streams per second; a request
    that arrives while the server is behind waits, and its first text comes that much later."""

    def __init__(self, capacity: float) -> None:
        self.spacing = 1 / capacity
        self.lock = threading.Lock()
        self.next_turn = 0.0

    def wait(self) -> None:
        with self.lock:
            turn = max(time.monotonic(), self.next_turn)
            self.next_turn = turn + self.spacing
        time.sleep(max(0.0, turn - time.monotonic()))


class PrefixCache:
    """The --prefix-cache option: a server whose prefill is saved by a prefix cache, as vLLM's automatic
    prefix caching saves it. The prompt's words (every string of its conversation, in order, the system part
    first; a completion's prompt) are cut into blocks of BLOCK_WORDS, each named by a hash of every word up
    to its end, so a block is found only behind the very same prefix; a request waits ``prefill`` seconds
    times the share of its words not in the blocks found from its start, then its blocks are kept. Every
    request's (cached words, words) is in ``served``, in arrival order, for tests."""

    BLOCK_WORDS = 8

    def __init__(self, prefill: float) -> None:
        self.prefill = prefill
        self.lock = threading.Lock()
        self.blocks: set[str] = set()
        self.served: list[tuple[int, int]] = []

    def admit(self, text: str) -> float:
        """The seconds of prefill the prompt text costs, its cached prefix counted; its blocks kept."""
        words = text.split()
        digest, names = hashlib.sha256(), []
        for start in range(0, len(words) - self.BLOCK_WORDS + 1, self.BLOCK_WORDS):
            digest.update(' '.join(words[start:start + self.BLOCK_WORDS]).encode() + b'\n')
            names.append(digest.hexdigest())  # of every word up to the block's end
        with self.lock:
            found = next((index for index, name in enumerate(names) if name not in self.blocks), len(names))
            self.blocks.update(names)
            self.served.append((found * self.BLOCK_WORDS, len(words)))
        return self.prefill * (len(words) - found * self.BLOCK_WORDS) / max(1, len(words))


def cache_text(api: str, request: dict) -> str:
    """What the prefix cache reads of a request: a completion's prompt, or every string of its conversation
    in order (conversation(): the system part first), so that a marker at the start is at the start here."""
    if api == 'completions':
        return request.get('prompt') if isinstance(request.get('prompt'), str) else ''
    return ' '.join(_strings(conversation(api, request)))


KV_CACHE_SLOTS = 16  # streams that fill the fixture's pretend KV cache: its usage is running / KV_CACHE_SLOTS


class ServerMetrics:
    """What GET /metrics says, in vLLM's names and the Prometheus text format, and true of this fixture: the
    streams in flight (running), none waiting (it has no queue), the KV cache usage they make, no preemption,
    and the prompt tokens received (one per whitespace-separated word of the prompt's text)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running = 0
        self.prompt_tokens = 0

    @contextlib.contextmanager
    def stream(self, request: dict):
        """Count a streamed request as running for as long as it is answered, and its prompt's tokens."""
        with self.lock:
            self.running += 1
            self.prompt_tokens += len(prompt_text(request).split())
        try:
            yield
        finally:
            with self.lock:
                self.running -= 1

    def exposition(self, model: str) -> bytes:
        with self.lock:
            running, prompt_tokens = self.running, self.prompt_tokens
        labels = f'{{engine="0",model_name="{model}"}}'
        families = (('vllm:num_requests_running', 'gauge', 'Number of requests in model execution batches.', running),
                    ('vllm:num_requests_waiting', 'gauge', 'Number of requests waiting to be processed.', 0),
                    ('vllm:kv_cache_usage_perc', 'gauge', 'KV-cache usage. 1 means 100 percent usage.',
                     min(1.0, running / KV_CACHE_SLOTS)),
                    ('vllm:num_preemptions_total', 'counter', 'Cumulative number of preemption from the engine.', 0.0),
                    ('vllm:prompt_tokens_total', 'counter', 'Number of prefill tokens processed.',
                     float(prompt_tokens)))
        return ''.join(f'# HELP {name} {text}\n# TYPE {name} {kind}\n{name}{labels} {value}\n'
                       for name, kind, text, value in families).encode()


def prompt_text(request: dict) -> str:
    """The text of a request's prompt, on every API: the messages' string contents, the prompt, the input."""
    parts = [request.get('prompt'), request.get('input'), request.get('system'), request.get('instructions')]
    for message in request.get('messages') if isinstance(request.get('messages'), list) else ():
        parts.append(message.get('content') if isinstance(message, dict) else None)
    return ' '.join(part for part in parts if isinstance(part, str))


class FixtureServer(ThreadingHTTPServer):
    """The fixture's HTTP server on 127.0.0.1, its settings given when it is built (see server()).
    A client that drops the connection or fails the TLS handshake is not an error here."""

    request_queue_size = 128  # the listen backlog: many clients may connect at once

    def __init__(self, port: int = 18080, *, mode: str = 'ok', delay: float | None = None, profile: str = 'guide',
                 api_key: str | None = None, tokens: int | None = None, reasoning_field: str = 'reasoning',
                 replay: bytes | None = None, replay_twin: bytes | None = None,
                 tls_cert: str | None = None, tls_key: str | None = None,
                 seed: int = 0, model_name: str | None = None, idle_close: float = KEEP_ALIVE_TIMEOUT,
                 close_notify: bool = True, cut_turn: int | None = None, cut_session: str | None = None,
                 record: bool = False, tokenize: bool = True, capacity: float = CAPACITY,
                 prefix_cache: float | None = None) -> None:
        if mode not in CHOICES:
            raise ValueError(f'unknown mode {mode!r}; choose from {", ".join(CHOICES)}')
        if profile not in PROFILE_NAMES:
            raise ValueError(f'unknown profile {profile!r}; choose from {", ".join(PROFILE_NAMES)}')
        delay = DELAY if delay is None else delay
        if not delay >= 0:
            raise ValueError('delay must be non-negative')
        if tokens is not None and tokens < 1:
            raise ValueError('tokens must be at least 1')
        if reasoning_field not in ('reasoning', 'reasoning_content'):
            raise ValueError('reasoning_field must be reasoning or reasoning_content')
        if model_name is not None and not model_name:
            raise ValueError('model_name must not be empty')
        if not idle_close > 0:
            raise ValueError('idle_close must be a positive number of seconds')
        if not 0 < capacity < float('inf'):
            raise ValueError('capacity must be a positive number of streams per second')
        if prefix_cache is not None and not 0 < prefix_cache < float('inf'):
            raise ValueError('prefix_cache must be a positive number of seconds of prefill')
        if not close_notify and not tls_cert:
            raise ValueError('close_notify is TLS\'s closure alert: it needs tls_cert')
        if (cut_turn is not None or cut_session is not None) and mode != AGENT:
            raise ValueError(f'cut_turn and cut_session are for the {AGENT} mode')
        if cut_turn is not None and (isinstance(cut_turn, bool) or not isinstance(cut_turn, int) or cut_turn < 1):
            raise ValueError('cut_turn must be a turn number from 1')
        if cut_session is not None and cut_turn is None:
            raise ValueError('cut_session names the session whose cut_turn is cut: give cut_turn too')
        self.tokenize = tokenize  # answer POST /tokenize (with count_tokens()), as vLLM does
        self.cut_turn, self.cut_session = cut_turn, cut_session  # the agent mode cuts turn cut_turn's first answer
        self.received: list[AgentAnswer] | None = [] if record else None  # the agent mode's answers, for tests
        self.mode, self.delay, self.profile, self.api_key = mode, delay, profile, api_key
        self.tokens, self.reasoning_field, self.model_name = tokens, reasoning_field, model_name
        self.idle_close = idle_close  # seconds a kept-alive connection waits for its next request
        self.close_notify = close_notify  # TLS: end each connection with the closure alert (see shutdown_request)
        self.replay = mark_replay(*parse_capture(replay)) if replay is not None else None
        if replay_twin is not None and replay is None:
            raise ValueError('replay_twin is the unstreamed twin of a replay; give replay too')
        # the answer to an unstreamed request (stream false) while replaying: a capture of its own
        self.replay_twin = mark_replay(*parse_capture(replay_twin)) if replay_twin is not None else None
        self.schedule = Schedule(seed)  # the mixed mode's modes, and what it served
        self.turns = Turns(capacity)    # the capacity mode's start times
        self.prefix_cache = PrefixCache(prefix_cache) if prefix_cache is not None else None  # --prefix-cache
        self.last_request = None  # (headers, JSON body) of the last request answered, for tests
        self.metrics = ServerMetrics()  # what GET /metrics says
        self.scheme = 'https' if tls_cert else 'http'
        super().__init__(('127.0.0.1', port), Handler)
        if tls_cert:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            try:
                context.load_cert_chain(tls_cert, tls_key)
            except BaseException:
                self.server_close()
                raise
            # The handshake happens in the handler's thread, on its first read, not in the accept loop.
            self.socket = context.wrap_socket(self.socket, server_side=True, do_handshake_on_connect=False)

    def handle_error(self, request, client_address) -> None:
        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)

    def shutdown_request(self, request) -> None:
        """Close a connection as a correct server does: over TLS, with close_notify first, without waiting
        for the client's own (a TLS close without it is an incomplete close, RFC 9112 9.8, which
        close_notify False reproduces)."""
        if isinstance(request, ssl.SSLSocket) and self.close_notify:
            with contextlib.suppress(OSError, ValueError):
                request.setblocking(False)  # the alert is sent at once; waiting for the client's raises
                request.unwrap()
        super().shutdown_request(request)


def server(port: int = 18080, mode: str = 'ok', delay: float | None = None, **settings) -> FixtureServer:
    """A fixture server bound to 127.0.0.1:port (0 picks a free port); call serve_forever().
    delay is the seconds before each write, DELAY when None.

    settings are FixtureServer's: profile, api_key, tokens, reasoning_field; replay, a captured
    response (status line, headers, body) sent instead of the mode, and replay_twin, the one sent
    instead to an unstreamed request (a --cross-check pair); tls_cert and tls_key (PEM files)
    to serve HTTPS; seed, of the mixed mode's schedule (its counts are in ``schedule.served``);
    model_name, the one model served (others get vLLM's 404; without it any model is answered);
    idle_close, the seconds after which a kept-alive connection with no new request is closed
    without a word (default KEEP_ALIVE_TIMEOUT); close_notify False, with tls_cert, to end TLS
    connections without their closure alert, as a cut does. In the agent mode: cut_turn N cuts the
    first answer of turn N of every session, or with cut_session TEXT of the sessions whose first user
    turn contains TEXT; record True keeps each request and its answer in ``received`` (AgentAnswer).
    POST /tokenize is answered as vLLM does, with count_tokens(), unless tokenize is False. capacity,
    the streams per second the capacity mode starts at most (default CAPACITY). prefix_cache S, in every
    mode: a prompt's prefill takes S seconds less the share its cached prefix saves (PrefixCache, whose
    ``served`` the server keeps as ``prefix_cache``).
    """
    return FixtureServer(port, mode=mode, delay=delay, **settings)


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line on stderr and exit status 2 (no usage first)."""

    def error(self, message: str):
        self.exit(2, f'{self.prog}: error: {message}\n')


def _program_name(module: str) -> str | None:
    """``python3 -m MODULE`` when started so; None (argparse's default, the script's name) otherwise."""
    spec = getattr(sys.modules.get('__main__'), '__spec__', None)
    if spec is not None and spec.name == module:
        return f'{os.path.basename(sys.executable)} -m {module}'
    return None


def mode_choice(mode: str) -> str:
    """--mode's value, if it is a mode; else an error naming the closest modes."""
    if mode in CHOICES:
        return mode
    close = difflib.get_close_matches(mode, CHOICES, n=3)
    hint = f'; did you mean {" or ".join(close)}?' if close else ''
    raise argparse.ArgumentTypeError(f'no mode {mode!r}{hint} (--help lists the {len(CHOICES)} modes)')


def _stop(signum, frame) -> None:
    """SIGTERM's handler: stop serving as Ctrl+C does (and print what the mixed mode served)."""
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog=_program_name('fixture_server'), description=__doc__.splitlines()[0],
                           allow_abbrev=False)
    parser.add_argument('--port', type=int, default=18080, help='port on 127.0.0.1; 0 picks a free one')
    parser.add_argument('--mode', type=mode_choice, default='ok', metavar='MODE',
                        help=f'how the stream behaves: {", ".join(CHOICES)} (default ok). Slow on purpose: stall '
                             f'and held-open keep the connection until the client leaves, drip sends keepalives; '
                             f'all three for at most {HOLD_LIMIT:g} s. mixed picks a mode per request from a '
                             f'seeded schedule, mostly ok, and prints what it served when it stops')
    parser.add_argument('--seed', type=int, default=0, help='the seed of the mixed schedule (default 0)')
    parser.add_argument('--profile', choices=list(PROFILE_NAMES), default='guide',
                        help="bytes to speak: the guide's fixture or vLLM 0.32 (default guide), or a server "
                             "beside vLLM in its own bytes: llama.cpp, tgi, sglang, ollama (docs/fixture.md)")
    parser.add_argument('--delay', type=float, default=DELAY, help=f'seconds before each write (default {DELAY:g})')
    parser.add_argument('--api-key', metavar='KEY', help='answer 401 unless "Authorization: Bearer KEY" is sent')
    parser.add_argument('--model-name', metavar='NAME',
                        help='serve only this model: /v1/models lists it, and a request for any other model gets '
                             "vLLM's 404 (default: answer any model, listed as synthetic-fixture)")
    parser.add_argument('--tokens', type=int, metavar='N', help='send N content events (with --rate)')
    parser.add_argument('--rate', type=float, metavar='R', help='events per second with --tokens')
    parser.add_argument('--reasoning-field', choices=['reasoning', 'reasoning_content'], default='reasoning',
                        help='delta field of reasoning mode (reasoning_content: vLLM before 0.11.1)')
    parser.add_argument('--replay', metavar='FILE', help='answer with a captured response (a .http file)')
    parser.add_argument('--replay-twin', metavar='FILE',
                        help='with --replay: answer an unstreamed request (stream false, as --cross-check sends) '
                             'with this captured response')
    parser.add_argument('--idle-close', type=float, default=KEEP_ALIVE_TIMEOUT, metavar='S',
                        help='close a kept-alive connection after S idle seconds without a word, as proxies and load '
                             f'balancers do (default {KEEP_ALIVE_TIMEOUT:g}); the race that SDKs meet as "server '
                             'disconnected" on a reused connection')
    parser.add_argument('--tls-cert', metavar='PEM', help='serve HTTPS with this certificate (chain)')
    parser.add_argument('--tls-key', metavar='PEM', help='the private key of --tls-cert')
    parser.add_argument('--capacity', type=float, default=CAPACITY, metavar='R',
                        help=f'the capacity mode starts at most R answers per second, each in its turn (default '
                             f'{CAPACITY:g})')
    parser.add_argument('--prefix-cache', type=float, metavar='S',
                        help='any mode: a prefix cache; a prompt waits S seconds of prefill before its answer, less '
                             'the share of its words whose prefix an earlier request sent (blocks of '
                             f'{PrefixCache.BLOCK_WORDS} words)')
    parser.add_argument('--tls-no-close-notify', action='store_true',
                        help='with --tls-cert: end connections without TLS\'s closure alert, as a cut does (a '
                             '--replay without Content-Length or chunking then ends unfinished)')
    parser.add_argument('--cut-turn', type=int, metavar='N',
                        help='agent mode: cut the first answer of turn N of each session (a tool call\'s '
                             'arguments, or the text)')
    parser.add_argument('--cut-session', metavar='TEXT',
                        help='with --cut-turn: cut only the sessions whose first user turn contains TEXT')
    args = parser.parse_args(argv)
    if bool(args.tls_cert) != bool(args.tls_key):
        parser.error('--tls-cert and --tls-key go together')
    if args.tls_no_close_notify and not args.tls_cert:
        parser.error('--tls-no-close-notify needs --tls-cert')
    if args.rate is not None:
        if args.tokens is None or not args.rate > 0:
            parser.error('--rate needs --tokens and a positive number')
        args.delay = 1 / args.rate
    if args.replay_twin and not args.replay:
        parser.error('--replay-twin needs --replay')

    def read_capture(flag: str, path: str | None) -> bytes | None:
        try:
            with open(path, 'rb') as capture:
                return capture.read()
        except OSError as exc:
            parser.error(f'cannot read {flag} {path}: {exc.strerror}')
    replay = read_capture('--replay', args.replay) if args.replay else None
    replay_twin = read_capture('--replay-twin', args.replay_twin) if args.replay_twin else None
    try:
        instance = server(args.port, args.mode, args.delay, profile=args.profile, api_key=args.api_key,
                          tokens=args.tokens, reasoning_field=args.reasoning_field, replay=replay,
                          replay_twin=replay_twin,
                          tls_cert=args.tls_cert, tls_key=args.tls_key, seed=args.seed,
                          model_name=args.model_name, idle_close=args.idle_close,
                          close_notify=not args.tls_no_close_notify, cut_turn=args.cut_turn,
                          cut_session=args.cut_session, capacity=args.capacity, prefix_cache=args.prefix_cache)
    except ValueError as exc:
        parser.error(str(exc))
    except OSError as exc:  # includes ssl.SSLError for an unusable certificate or key
        parser.exit(2, f'{parser.prog}: error: cannot serve on 127.0.0.1:{args.port}: '
                       f'{exc.strerror or exc}\n')
    with instance:
        what = f'replay of {args.replay}' if args.replay else f'{args.mode}, {args.profile} profile'
        print(f'Synthetic fixture ({what}; /v1/completions, /v1/responses and /v1/messages too) listening on '
              f'{instance.scheme}://127.0.0.1:{instance.server_port}/v1/chat/completions', flush=True)
        signal.signal(signal.SIGTERM, _stop)  # a SIGTERM (kill, docker stop) stops it as Ctrl+C does
        try:
            instance.serve_forever()
        except KeyboardInterrupt:
            pass
    if args.mode == MIXED:
        served = instance.schedule.served
        print('served: ' + (', '.join(f'{mode} {count}' for mode, count in served.most_common()) or 'nothing'))
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
