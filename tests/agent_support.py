"""The agent model's cases and an independent reading of raw vLLM bytes, shared by the live tier
(tests/live/) and the replay of its kept captures (testdata/vllm-0.32.0-agent/, tests/test_agent_captures.py).

``raw_answer()`` reads a captured response without the client: its own dechunking, its own split of the
events, json.loads; so that "the calls' names and arguments equal what the raw bytes carry" compares the
client with something that shares none of its code.
"""
from __future__ import annotations

import json
import typing
from pathlib import Path

import stream_client

HERE = Path(__file__).resolve().parent.parent
AGENT_CAPTURES = HERE / 'testdata' / 'vllm-0.32.0-agent'
PATHS = {'chat': '/v1/chat/completions', 'responses': '/v1/responses', 'messages': '/v1/messages'}
APIS = tuple(PATHS)

WEATHER_TOOL = {'type': 'function', 'function': {
    'name': 'get_weather', 'description': 'The current weather in a city',
    'parameters': {'type': 'object', 'properties': {'city': {'type': 'string'}}, 'required': ['city']}}}
CITY_SCHEMA = {'type': 'object', 'properties': {'city': {'type': 'string'}, 'country': {'type': 'string'}},
               'required': ['city', 'country'], 'additionalProperties': False}
THINK = 'You are a helpful assistant. Think first.'


class Case(typing.NamedTuple):
    """One question to the agent model (served by serve_agent.sh), and the answer it gives greedily."""

    name: str
    prompt: str
    system: str | None = None
    tools: bool = True
    tool_choice: str | None = None
    json_schema: dict | None = None
    calls: tuple = ()            # ((name, arguments as a dict), ...) expected
    text: str | None = None      # the visible text expected, when it is text (None: not checked)
    reasoning: bool = False      # reasoning expected before the answer
    max_tokens: int = 200


PARIS = (('get_weather', {'city': 'Paris'}),)
CASES = (
    Case('single_call', 'What is the weather in Paris?', calls=PARIS),
    Case('named_tool', 'What is the weather in Paris?', tool_choice='get_weather', calls=PARIS),
    Case('required', 'What is the weather in Paris?', tool_choice='required', calls=PARIS),
    Case('parallel_calls', 'What is the weather in Paris and Tokyo?',
         calls=(('get_weather', {'city': 'Paris'}), ('get_weather', {'city': 'Tokyo'}))),
    Case('think_then_call', 'What is the weather in Paris?', system=THINK, calls=PARIS, reasoning=True),
    Case('think_then_text', 'Reply with exactly the word READY.', system=THINK, tools=False, text='READY',
         reasoning=True),
    Case('json_schema', 'Give Paris and its country as JSON.', tools=False, json_schema=CITY_SCHEMA,
         text='{"city": "Paris", "country": "France"}'),
)

# The answer after a tool result: the history a client sends back, in each API's own shape.
AFTER_TOOL_RESULT = Case('after_tool_result', 'What is the weather in Paris?', text='It is sunny in Paris.')
RESULT = '{"condition": "sunny"}'
HISTORY = {
    'chat': ('messages', [
        {'role': 'user', 'content': AFTER_TOOL_RESULT.prompt},
        {'role': 'assistant', 'content': None, 'tool_calls': [{'id': 'call_1', 'type': 'function', 'function': {
            'name': 'get_weather', 'arguments': '{"city": "Paris"}'}}]},
        {'role': 'tool', 'tool_call_id': 'call_1', 'content': RESULT}]),
    'responses': ('input', [
        {'role': 'user', 'content': AFTER_TOOL_RESULT.prompt},
        {'type': 'function_call', 'call_id': 'call_1', 'name': 'get_weather', 'arguments': '{"city": "Paris"}'},
        {'type': 'function_call_output', 'call_id': 'call_1', 'output': RESULT}]),
    'messages': ('messages', [
        {'role': 'user', 'content': AFTER_TOOL_RESULT.prompt},
        {'role': 'assistant', 'content': [{'type': 'tool_use', 'id': 'toolu_1', 'name': 'get_weather',
                                           'input': {'city': 'Paris'}}]},
        {'role': 'user', 'content': [{'type': 'tool_result', 'tool_use_id': 'toolu_1', 'content': RESULT}]}]),
}


def after_tool_result(api: str, body: dict) -> dict:
    """A prepared body of AFTER_TOOL_RESULT with the history of one call and its result in place of the prompt."""
    key, history = HISTORY[api]
    return {**body, key: history}


def judge_raw(path: str, body: dict, streamed: bytes, unstreamed: bytes | None = None):
    """(verdict, reader, cross_check) of a raw response to body at path (and of its unstreamed twin), judged
    as a run judges them, sans-IO: the answer spec rebuilt from the body in its API's shape."""
    api = next(api for api, suffix in PATHS.items() if path.endswith(suffix))
    tools = body.get('tools')
    if tools and api != 'chat':
        tools = [{'type': 'function', 'function': {'name': tool['name'], 'parameters': tool.get('parameters') or
                                                    tool.get('input_schema')}} for tool in tools]
    choice = body.get('tool_choice')
    if isinstance(choice, dict):
        choice = choice.get('name') or (choice.get('function') or {}).get('name') or \
            {'any': 'required', 'auto': 'auto'}.get(choice.get('type'))
    schema = {'chat': lambda: ((body.get('response_format') or {}).get('json_schema') or {}).get('schema'),
              'responses': lambda: ((body.get('text') or {}).get('format') or {}).get('schema'),
              'messages': lambda: ((body.get('output_config') or {}).get('format') or {}).get('schema')}[api]()
    request = stream_client.prepare('http://127.0.0.1:9' + path, 'agent', 'kept', cross_check=unstreamed is not None,
                                    max_tokens=body.get('max_tokens') or body.get('max_output_tokens'), tools=tools,
                                    tool_choice=choice, json_schema=schema)
    reader = stream_client.ResponseReader(request.new_validator())
    reader.feed(streamed)
    reader.eof()
    cross = None
    if unstreamed is not None:
        twin = stream_client.UnstreamedReader()
        twin.feed(unstreamed)
        twin.eof()
        cross = stream_client.compare_twin(reader, twin, request)
    return stream_client.judge(reader, None, cross), reader, cross


def dechunk(body: bytes) -> bytes:
    """A chunked body's payload (the last chunk may be missing: a cut stream)."""
    payload, at = bytearray(), 0
    while at < len(body):
        eol = body.find(b'\r\n', at)
        if eol < 0:
            break
        size = int(body[at:eol].split(b';')[0], 16)
        if size == 0:
            break
        payload += body[eol + 2:eol + 2 + size]
        at = eol + 2 + size + 2
    return bytes(payload)


def raw_events(response: bytes) -> list[tuple[str | None, dict | str]]:
    """(event type, data as JSON or the string "[DONE]") of a raw HTTP response carrying SSE."""
    head, _, body = response.partition(b'\r\n\r\n')
    if b'transfer-encoding: chunked' in head.lower():
        body = dechunk(body)
    events = []
    for block in body.decode('utf-8', 'replace').replace('\r\n', '\n').split('\n\n')[:-1]:  # whole events only
        kind, data = None, []
        for line in block.split('\n'):
            if line.startswith('event:'):
                kind = line[6:].strip()
            elif line.startswith('data:'):
                data.append(line[5:].lstrip(' '))
        if data:
            text = '\n'.join(data)
            events.append((kind, text if text == '[DONE]' else json.loads(text)))
    return events


def raw_answer(api: str, response: bytes) -> dict:
    """What the raw bytes carry: the calls (name, arguments text) in order, the text and the reasoning."""
    calls: dict = {}
    text, reasoning = [], []
    for kind, data in raw_events(response):
        if data == '[DONE]':
            continue
        if api == 'chat':
            for choice in data.get('choices') or []:
                delta = choice.get('delta') or {}
                text.append(delta.get('content') or '')
                reasoning.append(delta.get('reasoning') or delta.get('reasoning_content') or '')
                for piece in delta.get('tool_calls') or []:
                    call = calls.setdefault(piece['index'], ['', ''])
                    function = piece.get('function') or {}
                    call[0] += function.get('name') or ''
                    call[1] += function.get('arguments') or ''
        elif api == 'responses':
            if kind == 'response.output_item.added' and data['item'].get('type') == 'function_call':
                calls.setdefault(data['output_index'], ['', ''])[0] = data['item']['name']
            elif kind == 'response.function_call_arguments.delta':
                calls[data['output_index']][1] += data['delta']
            elif kind == 'response.output_text.delta':
                text.append(data['delta'])
            elif kind in ('response.reasoning_text.delta', 'response.reasoning_summary_text.delta'):
                reasoning.append(data['delta'])
        else:
            if kind == 'content_block_start' and data['content_block'].get('type') == 'tool_use':
                calls.setdefault(data['index'], ['', ''])[0] = data['content_block']['name']
            elif kind == 'content_block_delta':
                delta = data['delta']
                if delta.get('type') == 'input_json_delta':
                    calls[data['index']][1] += delta.get('partial_json') or ''
                elif delta.get('type') == 'text_delta':
                    text.append(delta['text'])
                elif delta.get('type') == 'thinking_delta':
                    reasoning.append(delta['thinking'])
    return {'calls': [tuple(calls[index]) for index in sorted(calls)], 'text': ''.join(text),
            'reasoning': ''.join(reasoning)}


def record_calls(record: dict) -> list[tuple[str, str]]:
    """The calls of a client's record, as raw_answer() gives them."""
    return [(call['name'], call['arguments']) for call in record['tool_calls'] or []]
