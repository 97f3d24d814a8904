#!/usr/bin/env python3
"""Builds streams/*.http: streams written from the stream formatters of llama.cpp and TGI, event for
event, as their source writes them (standard library only). Each is one HTTP response, one HTTP chunk
per write of the server.

- llama.cpp (tools/server/server-task.cpp, as of ggml-org/llama.cpp in 2026): the Responses events of
  server_task_result_cmpl_partial::to_json_oaicompat_resp (each token's diffs) and
  server_task_result_cmpl_final::to_json_oaicompat_resp_stream (the closing events), and the Messages
  events of to_json_anthropic (partial) and to_json_anthropic_stream (final). Its SSE writer sends
  "event: NAME\\ndata: JSON\\n\\n" with compact JSON, and the head says "Server: llama.cpp".
- TGI (router/src/chat.rs, ChatState::push): a tool-call stream, whose tokens are buffered until the
  call's name is known, then sent as argument pieces until the call's JSON is whole, after which the
  router buffers again, so that the token carrying the finish is never sent; then "data: [DONE]".
"""
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
STREAMS = os.path.join(HERE, 'streams')
LLAMA_HEAD = ('HTTP/1.1 200 OK\r\nServer: llama.cpp\r\nAccess-Control-Allow-Origin: \r\n'
              'Content-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\nX-Accel-Buffering: no\r\n'
              'Keep-Alive: timeout=5, max=100\r\n\r\n')
TGI_HEAD = ('HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n'
            'x-compute-type: cpu\r\ntransfer-encoding: chunked\r\n\r\n')


def dumps(value):
    return json.dumps(value, separators=(',', ':'), ensure_ascii=False)


def http(head, writes):
    """writes: a list of writes, each a list of SSE events (event name or None, data)."""
    out = [head]
    for write in writes:
        text = ''.join((f'event: {name}\n' if name else '') + f'data: {data if isinstance(data, str) else dumps(data)}\n\n'
                       for name, data in write)
        out.append(f'{len(text.encode()):x}\r\n{text}\r\n')
    return ''.join(out) + '0\r\n\r\n'


def ev(name, **data):
    return (name, {'type': name, **data})


# ---------------------------------------------------------------- llama.cpp: Responses
def llama_responses(reasoning, content, calls, output_tokens, prompt_tokens=9):
    """reasoning and content: the pieces, one per token; calls: (id, name, [argument pieces])."""
    resp, rs, msg = 'resp_8Yk2', 'rs_Qm3x', 'msg_Lp7d'
    writes, first = [], True
    thinking_started = text_started = False

    def token(diffs):
        nonlocal first, thinking_started, text_started
        events = []
        if first:
            events += [ev('response.created', response={'id': resp, 'object': 'response', 'status': 'in_progress'}),
                       ev('response.in_progress', response={'id': resp, 'object': 'response', 'status': 'in_progress'})]
            first = False
        for kind, value in diffs:
            if kind == 'reasoning':
                if not thinking_started:
                    events.append(ev('response.output_item.added', item={
                        'id': rs, 'summary': [], 'type': 'reasoning', 'content': [], 'encrypted_content': '',
                        'status': 'in_progress'}))
                    thinking_started = True
                events.append(ev('response.reasoning_text.delta', delta=value, item_id=rs))
            elif kind == 'content':
                if not text_started:
                    events.append(ev('response.output_item.added', item={
                        'content': [], 'id': msg, 'role': 'assistant', 'status': 'in_progress', 'type': 'message'}))
                    events.append(ev('response.content_part.added', item_id=msg,
                                     part={'type': 'output_text', 'text': ''}))
                    text_started = True
                events.append(ev('response.output_text.delta', item_id=msg, delta=value))
            elif kind == 'call_name':
                call_id, name = value
                events.append(ev('response.output_item.added', item={
                    'arguments': '', 'call_id': 'fc_' + call_id, 'name': name, 'type': 'function_call',
                    'status': 'in_progress'}))
            else:  # call arguments
                call_id, piece = value
                events.append(ev('response.function_call_arguments.delta', delta=piece, item_id='fc_' + call_id))
        writes.append(events)

    for piece in reasoning:
        token([('reasoning', piece)])
    for piece in content:
        token([('content', piece)])
    for call_id, name, pieces in calls:
        token([('call_name', (call_id, name)), ('arguments', (call_id, pieces[0]))])
        for piece in pieces[1:]:
            token([('arguments', (call_id, piece))])
    final, output = [], []
    if reasoning:
        item = {'id': rs, 'summary': [], 'type': 'reasoning',
                'content': [{'text': ''.join(reasoning), 'type': 'reasoning_text'}], 'encrypted_content': ''}
        final.append(ev('response.output_item.done', item=item))
        output.append(item)
    if content:
        text = ''.join(content)
        part = {'type': 'output_text', 'annotations': [], 'logprobs': [], 'text': text}
        final.append(ev('response.output_text.done', item_id=msg, text=text))
        final.append(ev('response.content_part.done', item_id=msg, part=part))
        item = {'type': 'message', 'status': 'completed', 'id': msg, 'content': [part], 'role': 'assistant'}
        final.append(ev('response.output_item.done', item=item))
        output.append(item)
    for call_id, name, pieces in calls:
        item = {'type': 'function_call', 'status': 'completed', 'arguments': ''.join(pieces),
                'call_id': 'fc_' + call_id, 'name': name}
        final.append(ev('response.output_item.done', item=item))
        output.append(item)
    final.append(ev('response.completed', response={
        'id': resp, 'object': 'response', 'created_at': 1796170000, 'status': 'completed', 'model': 'tiny',
        'output': output, 'usage': {'input_tokens': prompt_tokens, 'output_tokens': output_tokens,
                                    'total_tokens': prompt_tokens + output_tokens}}))
    writes.append(final)
    return http(LLAMA_HEAD, writes)


# ---------------------------------------------------------------- llama.cpp: Messages
def llama_messages(reasoning, content, calls, stop_reason, output_tokens):
    writes, first = [], True
    has_reasoning = bool(reasoning)
    thinking_started = text_started = False
    text_index = 1 if has_reasoning else 0

    def token(diffs):
        nonlocal first, thinking_started, text_started
        events = []
        if first:
            events.append(ev('message_start', message={
                'id': 'chatcmpl-Wd3s', 'type': 'message', 'role': 'assistant', 'content': [], 'model': 'tiny',
                'stop_reason': None, 'stop_sequence': None, 'usage': {'input_tokens': 9, 'output_tokens': 0}}))
            first = False
        for kind, value in diffs:
            if kind == 'reasoning':
                if not thinking_started:
                    events.append(ev('content_block_start', index=0, content_block={'type': 'thinking', 'thinking': ''}))
                    thinking_started = True
                events.append(ev('content_block_delta', index=0, delta={'type': 'thinking_delta', 'thinking': value}))
            elif kind == 'content':
                if not text_started:
                    events.append(ev('content_block_start', index=text_index,
                                     content_block={'type': 'text', 'text': ''}))
                    text_started = True
                events.append(ev('content_block_delta', index=text_index, delta={'type': 'text_delta', 'text': value}))
            else:
                number, call_id, name, piece = value
                index = (1 if has_reasoning else 0) + (1 if text_started else 0) + number
                if name:
                    events.append(ev('content_block_start', index=index, content_block={
                        'type': 'tool_use', 'id': call_id, 'name': name}))
                events.append(ev('content_block_delta', index=index,
                                 delta={'type': 'input_json_delta', 'partial_json': piece}))
        writes.append(events)

    for piece in reasoning:
        token([('reasoning', piece)])
    for piece in content:
        token([('content', piece)])
    for number, (call_id, name, pieces) in enumerate(calls):
        for at, piece in enumerate(pieces):
            token([('call', (number, call_id, name if at == 0 else '', piece))])
    final = []
    if has_reasoning:
        final.append(ev('content_block_delta', index=0, delta={'type': 'signature_delta', 'signature': ''}))
        final.append(ev('content_block_stop', index=0))
    if content:
        final.append(ev('content_block_stop', index=text_index))
    for number in range(len(calls)):
        final.append(ev('content_block_stop', index=(1 if has_reasoning else 0) + (1 if content else 0) + number))
    final.append(ev('message_delta', delta={'stop_reason': stop_reason, 'stop_sequence': None},
                    usage={'output_tokens': output_tokens}))
    final.append(ev('message_stop'))
    writes.append(final)
    return http(LLAMA_HEAD, writes)


# ---------------------------------------------------------------- TGI: a tool call
def tgi_tool_call(name, argument_tokens, finish=None):
    """The first piece is "{" with the call's name, then one per token; the last token's closing brace
    (the call's own) is trimmed, and the router buffers what follows, finish included."""
    def chunk(arguments, name_or_none, finish_reason=None):
        return (None, {'choices': [{'delta': {'content': None, 'role': 'assistant', 'tool_calls': [
            {'function': {'arguments': arguments, 'name': name_or_none}, 'id': '0', 'index': 0, 'type': 'function'}]},
            'finish_reason': finish_reason, 'index': 0, 'logprobs': None}], 'created': 1796170000, 'id': '',
            'model': 'tiny', 'object': 'chat.completion.chunk', 'system_fingerprint': '3.3.6-native', 'usage': None})
    writes = [[chunk('{', name)]]
    for at, piece in enumerate(argument_tokens):
        last = at == len(argument_tokens) - 1
        writes.append([chunk(piece, None, finish if last else None)])
    writes.append([(None, '[DONE]')])
    return http(TGI_HEAD, writes)


STREAMS_LIST = {
    'llama_responses_text': llama_responses([], ['The', ' capital', ' is', ' Paris', '.'], [], 5),
    'llama_responses_reasoning': llama_responses(['Paris', ' is', ' it'], ['Paris', '.'], [], 5),
    'llama_responses_tool_call': llama_responses([], [], [('Xb7QkR2', 'get_weather', ['{"city"', ': "Paris"', '}'])], 7),
    'llama_responses_budget_used': llama_responses([], ['The', ' capital', ' of', ' France'], [], 4),
    'llama_messages_thinking': llama_messages(['Paris', ' is', ' it'], ['Paris', '.'], [], 'end_turn', 5),
    'llama_messages_thinking_tool_call': llama_messages(
        ['call', ' it'], ['Checking', '.'], [('Xb7QkR2', 'get_weather', ['{"city"', ': "Paris"', '}'])], 'tool_use', 7),
    'llama_messages_thinking_budget': llama_messages(['Paris', ' is'], ['Par'], [], 'max_tokens', 3),
    'tgi_tool_call': tgi_tool_call('get_weather', ['"city', '": "', 'Paris', '"}']),
    'tgi_tool_call_budget': tgi_tool_call('get_weather', ['"city', '": "', 'Par'], finish='length'),
    'tgi_tool_call_not_json': tgi_tool_call('get_weather', ['"city', '": "', 'Paris', '"']),
}


def main():
    os.makedirs(STREAMS, exist_ok=True)
    for name, text in STREAMS_LIST.items():
        with open(os.path.join(STREAMS, name + '.http'), 'w', newline='') as out:
            out.write(text)


if __name__ == '__main__':
    main()
