#!/usr/bin/env python3
"""Builds cases/*.http and cases.json: the grammar fuzzer's three cases of issue 39, each beside the
stream it was mutated from (which must stay ok). Standard library only.

The Responses streams are shaped like vLLM's (response.reasoning_part.added and .done around a
reasoning item's text); the Messages stream like Anthropic's documented flow. One SSE event per
HTTP chunk, chunked transfer coding.
"""
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = os.path.join(HERE, 'cases')
HEAD = ('HTTP/1.1 200 OK\r\nserver: uvicorn\r\ncontent-type: text/event-stream; charset=utf-8\r\n'
        'transfer-encoding: chunked\r\n\r\n')
TOOLS = [{'type': 'function', 'function': {'name': 'get_weather', 'parameters': {
    'type': 'object', 'properties': {'city': {'type': 'string'}}, 'required': ['city']}}}]


def http_stream(events):
    out = [HEAD]
    for kind, body in events:
        event = f'event: {kind}\ndata: {json.dumps(body, separators=(",", ":"))}\n\n'
        out.append(f'{len(event.encode()):x}\r\n{event}\r\n')
    return ''.join(out) + '0\r\n\r\n'


def responses(mutate=None):
    """A reasoning item (opened and closed by reasoning_part events) then a message."""
    reasoning = {'id': 'rs_1', 'type': 'reasoning', 'summary': [], 'content': None}
    message = {'id': 'msg_1', 'type': 'message', 'role': 'assistant', 'status': 'in_progress', 'content': []}
    text = {'type': 'output_text', 'text': 'Paris.', 'annotations': []}
    done_reasoning = {**reasoning, 'content': [{'type': 'reasoning_text', 'text': 'think'}]}
    done_message = {**message, 'status': 'completed', 'content': [text]}
    response = {'id': 'resp_1', 'object': 'response', 'status': 'in_progress', 'output': []}
    bodies = [
        {'type': 'response.created', 'response': response},
        {'type': 'response.in_progress', 'response': response},
        {'type': 'response.output_item.added', 'output_index': 0, 'item': reasoning},
        {'type': 'response.reasoning_part.added', 'output_index': 0, 'item_id': 'rs_1', 'content_index': 0,
         'part': {'type': 'reasoning_text', 'text': ''}},
        {'type': 'response.reasoning_text.delta', 'output_index': 0, 'item_id': 'rs_1', 'content_index': 0,
         'delta': 'thi'},
        {'type': 'response.reasoning_text.delta', 'output_index': 0, 'item_id': 'rs_1', 'content_index': 0,
         'delta': 'nk'},
        {'type': 'response.reasoning_text.done', 'output_index': 0, 'item_id': 'rs_1', 'content_index': 0,
         'text': 'think'},
        {'type': 'response.reasoning_part.done', 'output_index': 0, 'item_id': 'rs_1', 'content_index': 0,
         'part': {'type': 'reasoning_text', 'text': 'think'}},
        {'type': 'response.output_item.done', 'output_index': 0, 'item': done_reasoning},
        {'type': 'response.output_item.added', 'output_index': 1, 'item': message},
        {'type': 'response.content_part.added', 'output_index': 1, 'item_id': 'msg_1', 'content_index': 0,
         'part': {**text, 'text': ''}},
        {'type': 'response.output_text.delta', 'output_index': 1, 'item_id': 'msg_1', 'content_index': 0,
         'delta': 'Paris.'},
        {'type': 'response.output_text.done', 'output_index': 1, 'item_id': 'msg_1', 'content_index': 0,
         'text': 'Paris.'},
        {'type': 'response.content_part.done', 'output_index': 1, 'item_id': 'msg_1', 'content_index': 0,
         'part': text},
        {'type': 'response.output_item.done', 'output_index': 1, 'item': done_message},
        {'type': 'response.completed', 'response': {**response, 'status': 'completed',
                                                    'output': [done_reasoning, done_message],
                                                    'usage': {'input_tokens': 5, 'output_tokens': 3}}},
    ]
    if mutate:
        mutate(bodies)
    return [(body['type'], {**body, 'sequence_number': number}) for number, body in enumerate(bodies)]


def reasoning_done(bodies, **changes):
    """The reasoning_part.done event (index 7) changed."""
    bodies[7] = {**bodies[7], **changes}


def messages(reasons):
    """A tool_use answer whose message_delta events say these stop_reasons in turn."""
    events = [('message_start', {'type': 'message_start', 'message': {
        'id': 'msg_1', 'type': 'message', 'role': 'assistant', 'model': 'tiny', 'content': [],
        'stop_reason': None, 'stop_sequence': None, 'usage': {'input_tokens': 5, 'output_tokens': 1}}}),
        ('content_block_start', {'type': 'content_block_start', 'index': 0, 'content_block': {
            'type': 'tool_use', 'id': 'toolu_1', 'name': 'get_weather', 'input': {}}}),
        ('content_block_delta', {'type': 'content_block_delta', 'index': 0, 'delta': {
            'type': 'input_json_delta', 'partial_json': '{"city": "Paris"}'}}),
        ('content_block_stop', {'type': 'content_block_stop', 'index': 0})]
    for reason in reasons:
        events.append(('message_delta', {'type': 'message_delta', 'delta': {'stop_reason': reason,
                                                                            'stop_sequence': None},
                                         'usage': {'output_tokens': 9}}))
    return events + [('message_stop', {'type': 'message_stop'})]


CASES_LIST = [
    ('01_responses_reasoning_parts_agree', 'responses', responses(), True, None, None,
     'the stream the two Responses cases are mutated from: reasoning_part.added/done around the reasoning text'),
    ('02_responses_reasoning_part_done_no_item', 'responses',
     responses(lambda b: reasoning_done(b, output_index=5, item_id='rs_9')), False, 'protocol', 'part_not_open',
     'a response.reasoning_part.done whose output_index names no item that was added (fuzzer: false success)'),
    ('03_responses_reasoning_part_done_text_differs', 'responses',
     responses(lambda b: reasoning_done(b, part={'type': 'reasoning_text', 'text': 'thunk'})), False, 'protocol',
     'closing_copy_differs',
     'a response.reasoning_part.done whose text differs from what the reasoning deltas assembled '
     '(fuzzer: false success)'),
    ('04_messages_stop_reason_kept', 'messages', messages(['tool_use']), True, None, None,
     'the stream case 05 is mutated from: one message_delta'),
    ('05_messages_stop_reason_changed', 'messages', messages(['stop_sequence', 'tool_use']), True, None, None,
     'a second message_delta changes stop_reason from stop_sequence to tool_use: Anthropic documents "one or '
     'more message_delta events, indicating top-level changes to the final Message object" and its SDK keeps '
     'the last (fuzzer: false reject)'),
]


def main():
    os.makedirs(CASES, exist_ok=True)
    with open(os.path.join(CASES, 'tools.json'), 'w') as out:
        json.dump(TOOLS, out, indent=1)
    table = []
    for name, api, events, ok, layer, kind, rule in CASES_LIST:
        with open(os.path.join(CASES, name + '.http'), 'w', newline='') as out:
            out.write(http_stream(events))
        args = ['--tools', 'tools.json'] if api == 'messages' else []
        table.append({'name': name, 'api': api, 'files': [name + '.http'], 'args': args, 'expect_ok': ok,
                      'expect_layer': layer, 'expect_kind': kind, 'rule': rule})
    with open(os.path.join(HERE, 'cases.json'), 'w') as out:
        json.dump(table, out, indent=1)
        out.write('\n')


if __name__ == '__main__':
    main()
