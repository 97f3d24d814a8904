#!/usr/bin/env python3
"""Build the hostile cases: raw HTTP/1.1 responses shaped like vLLM 0.32's captures
(testdata/vllm-0.32.0-cpu/*.http), each changed in one deliberate way."""
import copy, json, os

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = os.path.join(HERE, "cases")
os.makedirs(CASES, exist_ok=True)

HEAD = ("HTTP/1.1 200 OK\r\ndate: Tue, 01 Dec 2026 07:40:00 GMT\r\nserver: uvicorn\r\n"
        "content-type: text/event-stream; charset=utf-8\r\nvary: Origin\r\n")


def js(o):
    return json.dumps(o, separators=(",", ":"), ensure_ascii=False)


def chunked(events, head=HEAD, tail=b""):
    out = (head + "transfer-encoding: chunked\r\n\r\n").encode()
    for ev in events:
        b = ev.encode() if isinstance(ev, str) else ev
        out += b"%x\r\n" % len(b) + b + b"\r\n"
    return out + b"0\r\n\r\n" + tail


def body_of(events):
    return b"".join(e.encode() if isinstance(e, str) else e for e in events)


def sse(data, event=None):
    return (f"event: {event}\n" if event else "") + f"data: {data}\n\n"


# ---------------------------------------------------------------- chat
CID = "chatcmpl-9d3c1f7a2b6e4c81"
CREATED = 1796111200


def chat_chunk(delta, finish=None, first=False):
    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
    if finish is not None:
        choice["stop_reason"] = None
    if not first:
        choice["token_ids"] = None
    o = {"id": CID, "object": "chat.completion.chunk", "created": CREATED, "model": "tiny",
         "choices": [choice]}
    if first:
        o["prompt_token_ids"] = None
        o["prompt_text"] = None
    return sse(js(o))


def chat_role():
    return chat_chunk({"role": "assistant", "content": ""}, first=True)


def chat_usage(p=20, c=12):
    return sse(js({"id": CID, "object": "chat.completion.chunk", "created": CREATED, "model": "tiny",
                   "choices": [], "usage": {"prompt_tokens": p, "total_tokens": p + c, "completion_tokens": c},
                   "system_fingerprint": "vllm-0.32.0-4c84b9b1"}))


DONE = "data: [DONE]\n\n"


def chat_text(pieces=("Paris", " is", " sunny.")):
    return [chat_role()] + [chat_chunk({"content": p}) for p in pieces]


def tc_open(i, cid, name):
    return chat_chunk({"content": None, "tool_calls": [{"id": cid, "type": "function", "index": i,
                                                          "function": {"name": name}}]})


def tc_args(i, piece):
    return chat_chunk({"content": None, "tool_calls": [{"index": i, "function": {"arguments": piece}}]})


def chat_tool_base():
    return [chat_role(), tc_open(0, "chatcmpl-tool-b4ca0d77485612cd", "get_weather"),
            tc_args(0, '{"city": '), tc_args(0, '"Paris"}')]


FIN_TOOL = chat_chunk({}, "tool_calls")
FIN_STOP = chat_chunk({"content": ""}, "stop")


# ---------------------------------------------------------------- completions
CMPL = "cmpl-a6c4595783f2e961"


def cmpl_chunk(text, finish=None):
    return sse(js({"id": CMPL, "object": "text_completion", "created": CREATED, "model": "tiny",
                   "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish,
                                "stop_reason": None, "prompt_token_ids": None, "token_ids": None}]}))


def cmpl_usage():
    return sse(js({"id": CMPL, "object": "text_completion", "created": CREATED, "model": "tiny", "choices": [],
                   "usage": {"prompt_tokens": 2, "total_tokens": 6, "completion_tokens": 4},
                   "system_fingerprint": "vllm-0.32.0-2eb79f9e"}))


# ---------------------------------------------------------------- responses
RID = "resp_b7e2c9d41a6f0e35"
MSG = "msg_8cefedd24ff889ba"
FC0 = "fc_b32906b26ff30dff"
FC1 = "fc_c41a07e3d9b2514e"
CALL0 = "chatcmpl-tool-a05e51ffe044707e"
CALL1 = "chatcmpl-tool-f1d2e3c4b5a69788"
TOOLS_R = [{"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                  "required": ["city"]},
            "strict": None, "type": "function", "allowed_callers": None, "async": None, "defer_loading": None,
            "description": "Current weather in a city", "output_schema": None}]


def resp_obj(status, output, usage=None, tools=False):
    return {"id": RID, "created_at": 1796111200, "incomplete_details": None, "instructions": None,
            "metadata": None, "model": "tiny", "object": "response", "output": output,
            "parallel_tool_calls": True, "temperature": 0.0, "tool_choice": "auto" if tools else "none",
            "tools": TOOLS_R if tools else [], "top_p": 1.0, "background": False, "max_output_tokens": 128,
            "max_tool_calls": None, "previous_response_id": None, "prompt": None, "reasoning": None,
            "service_tier": "auto", "status": status, "text": None, "top_logprobs": None,
            "truncation": "disabled", "usage": usage, "user": None, "presence_penalty": 0.0,
            "frequency_penalty": 0.0, "kv_transfer_params": None, "ec_transfer_params": None,
            "input_messages": None, "output_messages": None}


USAGE_R = {"input_tokens": 9, "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0,
                                                       "input_tokens_per_turn": [], "cached_tokens_per_turn": []},
           "output_tokens": 9, "output_tokens_details": {"reasoning_tokens": 0, "tool_output_tokens": 0,
                                                          "output_tokens_per_turn": [],
                                                          "tool_output_tokens_per_turn": []},
           "total_tokens": 18}


def ev(type_, **kw):
    d = dict(kw)
    d["type"] = type_
    return d


def msg_item(text, status="completed", iid=MSG):
    content = [] if text is None else [{"annotations": [], "text": text, "type": "output_text", "logprobs": None}]
    return {"id": iid, "content": content, "role": "assistant", "status": status, "type": "message", "phase": None}


def fc_item(args, status="completed", iid=FC0, call=CALL0, name="get_weather"):
    return {"arguments": args, "call_id": call, "name": name, "type": "function_call", "id": iid,
            "async": None, "caller": None, "namespace": None, "status": status}


def r_created(tools=False):
    return ev("response.created", response=resp_obj("in_progress", [], tools=tools))


def r_inprog(tools=False):
    return ev("response.in_progress", response=resp_obj("in_progress", [], tools=tools))


def r_completed(output, tools=False, status="completed"):
    return ev("response.completed", response=resp_obj(status, output, USAGE_R, tools=tools))


def text_item_events(pieces, oi=0, iid=MSG, done_text=None, part_text=None, item_text=None):
    full = "".join(pieces)
    evs = [ev("response.output_item.added", item=msg_item(None, "in_progress", iid), output_index=oi),
           ev("response.content_part.added", content_index=0, item_id=iid, output_index=oi,
              part={"annotations": [], "text": "", "type": "output_text", "logprobs": []})]
    for p in pieces:
        evs.append(ev("response.output_text.delta", content_index=0, delta=p, item_id=iid, logprobs=[],
                      output_index=oi))
    evs.append(ev("response.output_text.done", content_index=0, item_id=iid, logprobs=[], output_index=oi,
                  text=full if done_text is None else done_text))
    evs.append(ev("response.content_part.done", content_index=0, item_id=iid, output_index=oi,
                  part={"annotations": [], "text": full if part_text is None else part_text,
                        "type": "output_text", "logprobs": None}))
    evs.append(ev("response.output_item.done", item=msg_item(full if item_text is None else item_text,
                                                             "completed", iid), output_index=oi))
    return evs


def fc_item_events(pieces, oi=0, iid=FC0, call=CALL0, done_args=None, item_args=None):
    full = "".join(pieces)
    evs = [ev("response.output_item.added", item=fc_item("", "in_progress", iid, call), output_index=oi)]
    for p in pieces:
        evs.append(ev("response.function_call_arguments.delta", delta=p, item_id=iid, output_index=oi))
    d = ev("response.function_call_arguments.done", arguments=full if done_args is None else done_args,
           item_id=iid, output_index=oi)
    d["name"] = "get_weather"
    evs.append(d)
    evs.append(ev("response.output_item.done", item=fc_item(full if item_args is None else item_args,
                                                            "completed", iid, call), output_index=oi))
    return evs


TEXT = ["Paris", " is", " sunny."]
ARGS = ['{"city": ', '"Paris"}']


def r_text_base():
    return [r_created(), r_inprog()] + text_item_events(TEXT) + [r_completed([msg_item("".join(TEXT))])]


def r_fc_base():
    return [r_created(True), r_inprog(True)] + fc_item_events(ARGS) + [r_completed([fc_item("".join(ARGS))], True)]


def render_responses(evs, seq=True):
    out = []
    n = 0
    for e in evs:
        e = dict(e)
        t = e.pop("type")
        tail = {}
        if "name" in e and t == "response.function_call_arguments.done":
            tail["name"] = e.pop("name")
        d = dict(e)
        if seq:
            d["sequence_number"] = n
        d["type"] = t
        d.update(tail)
        n += 1
        out.append(sse(js(d), t))
    return out


# ---------------------------------------------------------------- messages
MID = "chatcmpl-a61c05345a434ea5"


def m(type_, event=None, **kw):
    d = {"type": type_}
    d.update(kw)
    return sse(js(d), event or type_)


def m_start(input_tokens=9):
    return m("message_start", message={"id": MID, "type": "message", "role": "assistant", "content": [],
                                       "model": "tiny", "stop_reason": None, "stop_sequence": None,
                                       "usage": {"input_tokens": input_tokens, "output_tokens": 0}})


def m_text_start(i=0):
    return m("content_block_start", content_block={"type": "text", "text": ""}, index=i)


def m_text(t, i=0):
    return m("content_block_delta", delta={"type": "text_delta", "text": t}, index=i)


def m_stop_block(i=0):
    return m("content_block_stop", index=i)


def m_delta(reason="end_turn", out=9):
    return m("message_delta", delta={"stop_reason": reason, "stop_sequence": None},
             usage={"input_tokens": 9, "output_tokens": out})


M_STOP = m("message_stop")


def m_tool_start(i, tid, name="get_weather"):
    return m("content_block_start", content_block={"type": "tool_use", "id": tid, "name": name, "input": {}},
             index=i)


def m_json(piece, i):
    return m("content_block_delta", delta={"type": "input_json_delta", "partial_json": piece}, index=i)


def m_text_base():
    return [m_start(), m_text_start()] + [m_text(t) for t in TEXT] + [m_stop_block(), m_delta(), M_STOP]


TU0 = "chatcmpl-tool-8afb8afc0a0e835a"
TU1 = "chatcmpl-tool-1c2d3e4f5a6b7c8d"


def m_tool_block(i, tid):
    return [m_tool_start(i, tid), m_json('{"city": ', i), m_json('"Paris"}', i), m_stop_block(i)]


# ---------------------------------------------------------------- files for args
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Current weather in a city",
                                           "parameters": {"type": "object",
                                                          "properties": {"city": {"type": "string"}},
                                                          "required": ["city"]}}}]
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
          "additionalProperties": False}

with open(os.path.join(CASES, "tools_weather.json"), "w") as f:
    json.dump(TOOLS, f, indent=1)
with open(os.path.join(CASES, "schema_city.json"), "w") as f:
    json.dump(SCHEMA, f, indent=1)

T = ["--tools", "tools_weather.json"]
J = ["--json-schema", "schema_city.json"]

cases = []


def add(name, api, data, expect_ok, layer, rule, args=(), runs=1, keep_alive=False, split_at=None):
    nn = "%02d" % (len(cases) + 1)
    fname = f"{nn}_{name}.http"
    with open(os.path.join(CASES, fname), "wb") as f:
        f.write(data)
    a = list(args)
    if keep_alive:
        a += ["--keep-alive", "--runs", str(runs)]
    cases.append({"name": name, "file": fname, "api": api, "args": a, "runs": runs, "keep_alive": keep_alive,
                  "expect_ok": expect_ok, "expect_layer": layer, "rule": rule})
    if split_at is not None:
        cases[-1]["split_at"] = split_at


CHAT_REF = "OpenAI chat-completions streaming reference (chat.completion.chunk: choices[].finish_reason, delta.tool_calls[].index/id; stream ends with data: [DONE]); vLLM 0.32 captures t6, a2"
RESP_REF = "OpenAI Responses API streaming events reference"
MSG_REF = "Anthropic Messages streaming docs, 'Event types' / 'Streaming request' (message_start, content blocks start/delta/stop, message_delta, message_stop)"
RFC_CL = "RFC 9112 section 6.3 (message body length) and 9.3 (persistent connections)"

# =============================== valid but unusual (must be ok) ===============================
add("msg_ping_events", "messages",
    chunked([m_start(), m("ping"), m_text_start(), m_text("Paris"), m("ping"), m_text(" is"), m_text(" sunny."),
             m_stop_block(), m("ping"), m_delta(), m("ping"), M_STOP]),
    True, None, MSG_REF + ": 'Each stream may also include any number of ping events' (anywhere)")

add("msg_citations_delta", "messages",
    chunked([m_start(), m_text_start(), m_text("Paris is sunny."),
             m("content_block_delta", delta={"type": "citations_delta", "citation": {
                 "type": "char_location", "cited_text": "Paris is sunny today.", "document_index": 0,
                 "document_title": "Weather report", "start_char_index": 0, "end_char_index": 21}}, index=0),
             m_stop_block(), m_delta(), M_STOP]),
    True, None, MSG_REF + ", 'Content block delta types' / citations: a citations_delta adds a citation to the text block")

add("msg_unknown_event_type", "messages",
    chunked([m_start(), m_text_start(), m_text("Paris"), m("content_block_annotation", index=0, note="x"),
             m_text(" is sunny."), m_stop_block(), m_delta(), M_STOP]),
    True, None, MSG_REF + ": 'we may add new event types, and your code should handle unknown event types gracefully' (versioning policy)")

add("msg_thinking_signature", "messages",
    chunked([m_start(), m("content_block_start", content_block={"type": "thinking", "thinking": "", "signature": ""}, index=0),
             m("content_block_delta", delta={"type": "thinking_delta", "thinking": "The user asks the weather."}, index=0),
             m("content_block_delta", delta={"type": "signature_delta", "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"}, index=0),
             m_stop_block(0), m_text_start(1), m_text("Paris is sunny.", 1), m_stop_block(1), m_delta(), M_STOP]),
    True, None, MSG_REF + ", 'Thinking delta' and 'signature_delta' just before content_block_stop of a thinking block")

add("chat_empty_delta_midstream", "chat",
    chunked(chat_text(("Paris",)) + [chat_chunk({}), chat_chunk({"content": ""}), chat_chunk({"content": " is sunny."}),
                                       FIN_STOP, chat_usage(), DONE]),
    True, None, CHAT_REF + "; vLLM format ref 3.7: a delta may be {} or {\"content\":\"\"} (u2 capture: empty content deltas)")

add("chat_text_on_finish_chunk_usage_last", "chat",
    chunked(chat_text(("Paris", " is")) + [chat_chunk({"content": " sunny."}, "stop"), chat_usage(), DONE]),
    True, None, "vLLM format ref 3.7: the finish chunk's delta can carry real text; 3.8: usage-only final chunk with choices: []")

add("chat_parallel_calls_distinct_ids", "chat",
    chunked([chat_role(), tc_open(0, "chatcmpl-tool-aaaa000000000001", "get_weather"), tc_args(0, '{"city": '),
             tc_open(1, "chatcmpl-tool-aaaa000000000002", "get_weather"), tc_args(1, '{"city": "Rome"}'),
             tc_args(0, '"Paris"}'), FIN_TOOL, chat_usage(), DONE]),
    True, None, CHAT_REF + ": parallel calls are told apart by index, each opened once with its own id", T)

add("resp_two_calls_distinct_ids", "responses",
    chunked(render_responses([r_created(True), r_inprog(True)] + fc_item_events(ARGS)
                             + fc_item_events(['{"city": "Rome"}'], 1, FC1, CALL1)
                             + [r_completed([fc_item("".join(ARGS)), fc_item('{"city": "Rome"}', iid=FC1, call=CALL1)], True)])),
    True, None, RESP_REF + ": one output item per output_index, each with its own id and call_id", T)

add("msg_two_tool_use_distinct_ids", "messages",
    chunked([m_start(20)] + m_tool_block(0, TU0) + m_tool_block(1, TU1) + [m_delta("tool_use", 30), M_STOP]),
    True, None, MSG_REF + "; Anthropic tool use: each tool_use block has its own id (parallel tool use)", T)

add("chat_sse_keepalive_comments", "chat",
    chunked([": keep-alive\n\n"] + chat_text(("Paris",)) + [": keep-alive\n\n", chat_chunk({"content": " is sunny."}),
             FIN_STOP, chat_usage(), ": keep-alive\n\n", DONE]),
    True, None, "WHATWG HTML 'Server-sent events' (a line starting with a colon is a comment, ignored); vLLM format ref 0/2: ': keep-alive' comments with --sse-keep-alive-interval (0.29+)")

add("cmpl_text_on_finish_chunk", "completions",
    chunked([cmpl_chunk("Paris"), cmpl_chunk(""), cmpl_chunk(" is sunny.", "stop"), cmpl_usage(), DONE]),
    True, None, "OpenAI completions streaming; vLLM capture g2: an empty text chunk, text on the finish chunk, usage-only final chunk")

add("resp_empty_text_delta", "responses",
    chunked(render_responses([r_created(), r_inprog()] + text_item_events(["Paris", "", " is sunny."])
                             + [r_completed([msg_item("Paris is sunny.")])])),
    True, None, RESP_REF + ": response.output_text.delta with an empty delta adds nothing (vLLM emits empty deltas while UTF-8 is incomplete, cf. u2)")

# =============================== chat: after close ===============================
add("chat_args_after_finish", "chat",
    chunked(chat_tool_base()[:-1] + [tc_args(0, '"Pa'), FIN_TOOL, tc_args(0, 'ris"}'), chat_usage(), DONE]),
    False, "protocol", CHAT_REF + ": finish_reason closes the choice; no delta may follow (only the usage chunk with choices: [])", T)

add("chat_content_after_finish", "chat",
    chunked(chat_text() + [FIN_STOP, chat_chunk({"content": " Really."}), chat_usage(), DONE]),
    False, "protocol", CHAT_REF + ": no content after the choice's finish_reason")

add("chat_new_call_after_finish", "chat",
    chunked(chat_tool_base() + [FIN_TOOL, tc_open(1, "chatcmpl-tool-ccccdddd00000001", "get_weather"),
                                tc_args(1, '{"city": "Rome"}'), chat_usage(), DONE]),
    False, "protocol", CHAT_REF + ": a new tool call opened after finish_reason 'tool_calls' closed the choice", T)

add("chat_empty_choice_after_finish", "chat",
    chunked(chat_text() + [FIN_STOP, chat_chunk({}), chat_usage(), DONE]),
    True, None, CHAT_REF + "; issue 34: a chunk for choice 0 after the finish that carries nothing (delta {}, every other field null) cannot change the answer: LiteLLM ends every stream with such an entry beside its usage, so it is accepted")

add("chat_args_after_finish_in_usage_chunk", "chat",
    chunked(chat_tool_base()[:-1] + [FIN_TOOL,
            sse(js({"id": CID, "object": "chat.completion.chunk", "created": CREATED, "model": "tiny",
                    "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": '"Paris"}'}}]},
                                 "logprobs": None, "finish_reason": None, "token_ids": None}],
                    "usage": {"prompt_tokens": 20, "total_tokens": 32, "completion_tokens": 12}})), DONE]),
    False, "protocol", CHAT_REF + ": the last piece of a call arrives after finish_reason, in the chunk that carries usage", T)

add("chat_second_finish", "chat",
    chunked(chat_text() + [FIN_STOP, chat_chunk({"content": ""}, "length"), chat_usage(), DONE]),
    False, "protocol", CHAT_REF + ": one finish_reason per choice")

# =============================== chat: duplicate ids ===============================
add("chat_dup_tool_call_id", "chat",
    chunked([chat_role(), tc_open(0, "chatcmpl-tool-b4ca0d77485612cd", "get_weather"), tc_args(0, '{"city": "Paris"}'),
             tc_open(1, "chatcmpl-tool-b4ca0d77485612cd", "get_weather"), tc_args(1, '{"city": "Rome"}'),
             FIN_TOOL, chat_usage(), DONE]),
    False, "protocol", CHAT_REF + ": tool_calls[].id identifies a call (the tool message answers it by tool_call_id), so ids are unique within the answer", T)

# =============================== chat / completions: order ===============================
add("chat_done_twice", "chat",
    chunked(chat_text() + [FIN_STOP, chat_usage(), DONE, DONE]),
    False, "protocol", CHAT_REF + ": data: [DONE] is the last event")

add("chat_chunk_after_done", "chat",
    chunked(chat_text() + [FIN_STOP, DONE, chat_usage()]),
    False, "protocol", CHAT_REF + ": nothing follows data: [DONE] (the usage chunk comes before it)")

add("chat_args_before_open", "chat",
    chunked([chat_role(), tc_args(0, '{"city": '), tc_open(0, "chatcmpl-tool-b4ca0d77485612cd", "get_weather"),
             tc_args(0, '"Paris"}'), FIN_TOOL, chat_usage(), DONE]),
    False, "protocol", CHAT_REF + ": the first delta of a tool-call index carries id, type and function.name; vLLM capture t6", T)

add("cmpl_text_after_finish", "completions",
    chunked([cmpl_chunk("Paris"), cmpl_chunk(" is"), cmpl_chunk(" sunny.", "stop"), cmpl_chunk(" Really."),
             cmpl_usage(), DONE]),
    False, "protocol", "OpenAI completions streaming (choices[].text, finish_reason); vLLM capture g2: text after the choice's finish_reason")

add("cmpl_done_twice", "completions",
    chunked([cmpl_chunk("Paris"), cmpl_chunk(" is"), cmpl_chunk(" sunny.", "stop"), cmpl_usage(), DONE, DONE]),
    False, "protocol", "OpenAI completions streaming; vLLM capture g2: data: [DONE] is the last event")

add("chat_json_after_finish", "chat",
    chunked([chat_role(), chat_chunk({"content": '{"city": '}), chat_chunk({"content": '"Paris"}'}, "stop"),
             chat_chunk({"content": "}"}), chat_usage(), DONE]),
    False, "protocol", CHAT_REF + ": content after finish_reason; the JSON answer must not be extended after close", J)

# =============================== responses: after close ===============================
b = r_text_base()
late = ev("response.output_text.delta", content_index=0, delta=" Really.", item_id=MSG, logprobs=[], output_index=0)
i = [k for k, e in enumerate(b) if e["type"] == "response.output_text.done"][0]
add("resp_text_delta_after_text_done", "responses",
    chunked(render_responses(b[:i + 1] + [late] + b[i + 1:])),
    False, "protocol", RESP_REF + ": response.output_text.done is emitted when the text content is finalized; no delta follows it")

b = r_text_base()
i = [k for k, e in enumerate(b) if e["type"] == "response.output_item.done"][0]
add("resp_text_delta_after_item_done", "responses",
    chunked(render_responses(b[:i + 1] + [late] + b[i + 1:])),
    False, "protocol", RESP_REF + ": response.output_item.done marks the item done; nothing more for that item")

b = r_fc_base()
i = [k for k, e in enumerate(b) if e["type"] == "response.function_call_arguments.done"][0]
latefc = ev("response.function_call_arguments.delta", delta=" ", item_id=FC0, output_index=0)
add("resp_args_delta_after_args_done", "responses",
    chunked(render_responses(b[:i + 1] + [latefc] + b[i + 1:])),
    False, "protocol", RESP_REF + ": response.function_call_arguments.done is emitted when the arguments are finalized", T)

b = r_fc_base()
i = [k for k, e in enumerate(b) if e["type"] == "response.output_item.done"][0]
add("resp_args_delta_after_item_done", "responses",
    chunked(render_responses(b[:i + 1] + [latefc] + b[i + 1:])),
    False, "protocol", RESP_REF + ": nothing for an item after its response.output_item.done", T)

b = r_text_base()
i = [k for k, e in enumerate(b) if e["type"] == "response.content_part.done"][0]
add("resp_text_delta_after_part_done", "responses",
    chunked(render_responses(b[:i + 1] + [late] + b[i + 1:])),
    False, "protocol", RESP_REF + ": response.content_part.done closes the content part")

b = r_text_base()
extra_item = text_item_events([" Later."], 1, "msg_0aa1bb2cc3dd4ee5")
add("resp_item_after_completed", "responses",
    chunked(render_responses(b + extra_item)),
    False, "protocol", RESP_REF + ": response.completed is the terminal event; nothing follows it")

# =============================== responses: duplicate ids ===============================
add("resp_dup_item_id", "responses",
    chunked(render_responses([r_created(True), r_inprog(True)] + fc_item_events(ARGS)
                             + fc_item_events(['{"city": "Rome"}'], 1, FC0, CALL1)
                             + [r_completed([fc_item("".join(ARGS)), fc_item('{"city": "Rome"}', iid=FC0, call=CALL1)], True)])),
    False, "protocol", RESP_REF + ": item_id identifies an output item; two items at output_index 0 and 1 share one id", T)

add("resp_dup_call_id", "responses",
    chunked(render_responses([r_created(True), r_inprog(True)] + fc_item_events(ARGS)
                             + fc_item_events(['{"city": "Rome"}'], 1, FC1, CALL0)
                             + [r_completed([fc_item("".join(ARGS)), fc_item('{"city": "Rome"}', iid=FC1, call=CALL0)], True)])),
    False, "protocol", RESP_REF + " and Responses function calling: call_id is what the function_call_output answers, unique per call", T)

add("resp_dup_message_item_id", "responses",
    chunked(render_responses([r_created(), r_inprog()] + text_item_events(["Paris"]) + text_item_events([" is sunny."], 1)
                             + [r_completed([msg_item("Paris"), msg_item(" is sunny.")])])),
    False, "protocol", RESP_REF + ": two message items (output_index 0 and 1) with one item id")

# =============================== responses: closing copies disagree ===============================
add("resp_text_done_differs", "responses",
    chunked(render_responses([r_created(), r_inprog()] + text_item_events(TEXT, done_text="Paris is rainy.")
                             + [r_completed([msg_item("Paris is sunny.")])])),
    False, "protocol", RESP_REF + ": response.output_text.done 'text' is the finalized text of the deltas")

add("resp_part_done_differs", "responses",
    chunked(render_responses([r_created(), r_inprog()] + text_item_events(TEXT, part_text="Paris is rainy.")
                             + [r_completed([msg_item("Paris is sunny.")])])),
    False, "protocol", RESP_REF + ": response.content_part.done 'part' is the finished part; it differs from .done")

add("resp_item_done_text_differs", "responses",
    chunked(render_responses([r_created(), r_inprog()] + text_item_events(TEXT, item_text="Paris is rainy.")
                             + [r_completed([msg_item("Paris is sunny.")])])),
    False, "protocol", RESP_REF + ": response.output_item.done carries the finished item; its text differs from the deltas and .done")

add("resp_item_done_args_differ", "responses",
    chunked(render_responses([r_created(True), r_inprog(True)] + fc_item_events(ARGS, item_args='{"city": "Rome"}')
                             + [r_completed([fc_item("".join(ARGS))], True)])),
    False, "protocol", RESP_REF + ": output_item.done's function_call arguments differ from the deltas and function_call_arguments.done", T)

add("resp_completed_args_differ", "responses",
    chunked(render_responses([r_created(True), r_inprog(True)] + fc_item_events(ARGS)
                             + [r_completed([fc_item('{"city": "Rome"}')], True)])),
    False, "protocol", RESP_REF + ": response.completed's output is the final copy of every item; its arguments differ", T)

add("resp_completed_output_empty", "responses",
    chunked(render_responses([r_created(), r_inprog()] + text_item_events(TEXT) + [r_completed([])])),
    False, "protocol", RESP_REF + ": response.completed's output must hold the items streamed; here it is []")

add("resp_completed_call_id_differs", "responses",
    chunked(render_responses([r_created(True), r_inprog(True)] + fc_item_events(ARGS)
                             + [r_completed([fc_item("".join(ARGS), call=CALL1)], True)])),
    False, "protocol", RESP_REF + ": the terminal copy of the function_call item names another call_id than output_item.added/done", T)

# reasoning .done differs
RS = "rs_c271d29256d31f67"
def rs_events(pieces, done_text=None):
    full = "".join(pieces)
    evs = [ev("response.output_item.added", item={"id": RS, "summary": [], "type": "reasoning", "content": [],
                                                  "encrypted_content": None, "status": "in_progress"}, output_index=0)]
    for p in pieces:
        evs.append(ev("response.reasoning_text.delta", content_index=0, delta=p, item_id=RS, output_index=0))
    evs.append(ev("response.reasoning_text.done", content_index=0, item_id=RS, output_index=0,
                  text=full if done_text is None else done_text))
    evs.append(ev("response.output_item.done", item={"id": RS, "summary": [], "type": "reasoning",
                                                     "content": [{"text": full, "type": "reasoning_text"}],
                                                     "encrypted_content": None, "status": "completed"}, output_index=0))
    return evs, {"id": RS, "summary": [], "type": "reasoning", "content": [{"text": full, "type": "reasoning_text"}],
                 "encrypted_content": None, "status": "completed"}

rsev, rsitem = rs_events(["The user wants ", "the weather."], done_text="The user wants nothing.")
add("resp_reasoning_done_differs", "responses",
    chunked(render_responses([r_created(), r_inprog()] + rsev + text_item_events(TEXT, oi=1)
                             + [r_completed([rsitem, msg_item("Paris is sunny.")])])),
    False, "protocol", RESP_REF + ": response.reasoning_text.done 'text' is the finalized reasoning of its deltas")

# =============================== responses: order ===============================
b = r_text_base()
add("resp_created_missing", "responses",
    chunked(render_responses(b[1:])),
    False, "protocol", RESP_REF + ": response.created is the first event of a stream (sequence_number 0)")

b = r_text_base()
add("resp_created_late", "responses",
    chunked(render_responses([b[1], b[0]] + b[2:])),
    False, "protocol", RESP_REF + ": response.created comes first, before response.in_progress")

b = r_text_base()
# move output_item.added after the first delta
add_ev = b[2]; part = b[3]
add("resp_delta_before_item_added", "responses",
    chunked(render_responses(b[:2] + [b[4], add_ev, part] + b[5:])),
    False, "protocol", RESP_REF + ": response.output_item.added opens an item before any of its deltas")

b = r_text_base()
b[2] = dict(b[2]); b[2]["output_index"] = 1
add("resp_item_added_other_index", "responses",
    chunked(render_responses(b)),
    False, "protocol", RESP_REF + ": output_item.added says output_index 1, its part and deltas say 0 (same item_id)")

b = r_text_base()
add("resp_missing_content_part_added", "responses",
    chunked(render_responses(b[:3] + b[4:])),
    False, "protocol", RESP_REF + ": response.content_part.added opens content_index 0 before its output_text deltas")

b = r_text_base()
i = [k for k, e in enumerate(b) if e["type"] == "response.output_item.done"][0]
add("resp_second_item_done", "responses",
    chunked(render_responses(b[:i + 1] + [b[i]] + b[i + 1:])),
    False, "protocol", RESP_REF + ": one response.output_item.done per item")

b = r_text_base()
i = [k for k, e in enumerate(b) if e["type"] == "response.output_text.done"][0]
add("resp_second_text_done", "responses",
    chunked(render_responses(b[:i + 1] + [b[i]] + b[i + 1:])),
    False, "protocol", RESP_REF + ": one response.output_text.done per content part")

b = r_fc_base()
add("resp_args_delta_before_item_added", "responses",
    chunked(render_responses(b[:2] + [b[3], b[2]] + b[4:])),
    False, "protocol", RESP_REF + ": function_call_arguments.delta before the function_call item was added", T)

b = r_text_base()
i = [k for k, e in enumerate(b) if e["type"] == "response.output_item.done"][0]
add("resp_completed_before_item_done", "responses",
    chunked(render_responses(b[:i] + [b[-1]])),
    False, "protocol", RESP_REF + ": response.completed is emitted when all output items are done; here the message item's response.output_item.done never came")

b = r_text_base()
i = [k for k, e in enumerate(b) if e["type"] == "response.output_text.delta"][1]
b[i] = dict(b[i]); b[i]["item_id"] = "msg_ffff0000eeee1111"
add("resp_delta_unknown_item_id", "responses",
    chunked(render_responses(b)),
    False, "protocol", RESP_REF + ": output_text.delta item_id is 'the ID of the output item'; this one names an item never added (output_index 0 is another item)")

b = r_text_base()
i = [k for k, e in enumerate(b) if e["type"] == "response.output_text.delta"][1]
b[i] = dict(b[i]); b[i]["content_index"] = 1
add("resp_delta_undeclared_content_index", "responses",
    chunked(render_responses(b)),
    False, "protocol", RESP_REF + ": a delta for content_index 1, a content part never added by response.content_part.added")

b = r_fc_base()
i = [k for k, e in enumerate(b) if e["type"] == "response.function_call_arguments.done"][0]
b[i] = dict(b[i]); b[i]["name"] = "get_time"
add("resp_args_done_name_differs", "responses",
    chunked(render_responses(b)),
    False, "protocol", RESP_REF + ": function_call_arguments.done names the function get_time, while the item (added, done, completed) is get_weather: a closing event disagrees", T)

b = r_text_base()
dup_added = ev("response.output_item.added", item=msg_item(None, "in_progress", "msg_0aa1bb2cc3dd4ee5"), output_index=0)
add("resp_item_added_twice_same_index", "responses",
    chunked(render_responses(b[:3] + [dup_added] + b[3:])),
    False, "protocol", RESP_REF + ": output_index is 'the index of the output item'; a second item added at output_index 0 (another id) before the first is done")

# =============================== messages: after close ===============================
add("msg_block_after_message_delta", "messages",
    chunked([m_start(), m_text_start(), m_text("Paris is sunny."), m_stop_block(), m_delta(),
             m_text_start(1), m_text(" Really.", 1), m_stop_block(1), M_STOP]),
    False, "protocol", MSG_REF + ": message_delta comes after all content blocks; a new block after it")

add("msg_delta_after_block_stop", "messages",
    chunked([m_start(), m_text_start(), m_text("Paris"), m_stop_block(), m_text(" is sunny."), m_delta(), M_STOP]),
    False, "protocol", MSG_REF + ": content_block_stop closes the block; a text_delta for index 0 after it")

add("msg_text_after_message_stop", "messages",
    chunked(m_text_base() + [m_text(" Really.")]),
    False, "protocol", MSG_REF + ": message_stop is the final event")

add("msg_json_delta_after_tool_stop", "messages",
    chunked([m_start(20), m_tool_start(0, TU0), m_json('{"city": ', 0), m_json('"Paris"', 0), m_stop_block(0),
             m_json('}', 0), m_delta("tool_use", 30), M_STOP]),
    False, "protocol", MSG_REF + ": an input_json_delta for a tool_use block after its content_block_stop", T)

# =============================== messages: duplicate ids ===============================
add("msg_dup_tool_use_id", "messages",
    chunked([m_start(20)] + m_tool_block(0, TU0) + m_tool_block(1, TU0) + [m_delta("tool_use", 30), M_STOP]),
    False, "protocol", MSG_REF + "; Anthropic tool use: tool_use.id is what tool_result.tool_use_id answers, unique within a message", T)

# =============================== messages: order ===============================
add("msg_delta_before_last_block_stop", "messages",
    chunked([m_start(), m_text_start(), m_text("Paris is sunny."), m_delta(), m_stop_block(), M_STOP]),
    False, "protocol", MSG_REF + ": message_delta follows the content_block_stop of the last block")

add("msg_block_delta_before_start", "messages",
    chunked([m_start(), m_text("Paris"), m_text_start(), m_text(" is sunny."), m_stop_block(), m_delta(), M_STOP]),
    False, "protocol", MSG_REF + ": content_block_delta for a block before its content_block_start")

add("msg_message_start_twice", "messages",
    chunked([m_start(), m_text_start(), m_text("Paris is sunny."), m_stop_block(), m_start(), m_delta(), M_STOP]),
    False, "protocol", MSG_REF + ": one message_start, first")

add("msg_block_started_twice", "messages",
    chunked([m_start(), m_text_start(), m_text("Paris"), m_text_start(), m_text(" is sunny."), m_stop_block(), m_delta(), M_STOP]),
    False, "protocol", MSG_REF + ": content_block_start for index 0 twice (index names one block)")

add("msg_block_stop_never_started", "messages",
    chunked([m_start(), m_text_start(), m_text("Paris is sunny."), m_stop_block(), m_stop_block(1), m_delta(), M_STOP]),
    False, "protocol", MSG_REF + ": content_block_stop closes a block that content_block_start opened; index 1 never started")

# =============================== kept-alive connections ===============================
ok_chat = chat_text() + [FIN_STOP, chat_usage(), DONE]
add("ka_control_chunked", "chat", chunked(ok_chat), [True, True], [None, None],
    RFC_CL + ": a well framed chunked response keeps the connection reusable", runs=2, keep_alive=True)

add("ka_bytes_after_last_chunk", "chat", chunked(ok_chat, tail=DONE.encode()), [False, False], ["transport", "transport"],
    RFC_CL + ": extra data arrives with the response, after its terminating chunk: the server sent more than its framing says (6.3: the client may 'attempt to determine if that data belongs as part of the prior message body'), so the framing is not to be trusted: a transport failure; the data MUST NOT be processed as a separate response, and the out-of-step connection must not carry run 2",
    runs=2, keep_alive=True)
add("ka_bytes_after_last_chunk_late", "chat", chunked(ok_chat, tail=DONE.encode()), [True, True], [None, None],
    RFC_CL + ": the same bytes, the stray ones arriving 0.3 s after the terminating chunk, when run 1 has ended ok (it cannot see them): run 2 must not read them as its response (6.3 last paragraph); it must find them before reusing the connection and use a new one (ok), or at worst fail at transport naming them",
    runs=2, keep_alive=True, split_at=len(chunked(ok_chat)))

inj = chunked(chat_text(("INJECTED",)) + [FIN_STOP, chat_usage(), DONE])
body = body_of(chat_text() + [FIN_STOP, chat_usage()])
add("ka_cl_short_smuggled_response", "chat",
    (HEAD + "content-length: %d\r\n\r\n" % len(body)).encode() + body + inj,
    [False, False], ["transport", "transport"],
    RFC_CL + ": more bytes than the Content-Length arrived with the message, so its Content-Length was wrong (6.3: the extra data may belong to the prior body): a transport failure; those bytes (a whole valid response) MUST NOT be processed as the response to run 2 (response splitting, 11.1)",
    runs=2, keep_alive=True)
add("ka_cl_short_smuggled_response_late", "chat",
    (HEAD + "content-length: %d\r\n\r\n" % len(body)).encode() + body + inj,
    [False, False], ["application", "application"],
    RFC_CL + ": as the previous case, but the bytes after the Content-Length arrive 0.3 s later, once run 1 has ended (EOF before [DONE] is all it can see); run 2 MUST NOT take the waiting bytes, a whole valid response to no request, as its answer (6.3 last paragraph, 11.1): it must find them before reusing the connection and use a new one",
    runs=2, keep_alive=True, split_at=len((HEAD + "content-length: %d\r\n\r\n" % len(body)).encode() + body))

full = body_of(ok_chat)
add("ka_cl_shorter_than_body", "chat",
    (HEAD + "content-length: %d\r\n\r\n" % (len(full) - len(DONE))).encode() + full,
    [False, False], ["transport", "transport"],
    RFC_CL + ": the body runs 14 bytes past its Content-Length (the [DONE] event), so the Content-Length was wrong (6.3): a transport failure, and the left-over bytes must not be read as run 2's response",
    runs=2, keep_alive=True)
add("ka_cl_shorter_than_body_late", "chat",
    (HEAD + "content-length: %d\r\n\r\n" % (len(full) - len(DONE))).encode() + full,
    [False, False], ["application", "application"],
    RFC_CL + ": as the previous case, but the 14 extra bytes arrive 0.3 s after the framed message (run 1 can see only EOF before [DONE]); run 2 must not read them as the start of its response (6.3 last paragraph) but use a new connection",
    runs=2, keep_alive=True, split_at=len((HEAD + "content-length: %d\r\n\r\n" % (len(full) - len(DONE))).encode() + full) - len(DONE))

errbody = b'{"error":{"message":"injected","type":"ServiceUnavailableError","param":null,"code":503}}'
err = b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(errbody) + errbody
add("ka_response_after_last_chunk", "chat", chunked(ok_chat, tail=err), [False, False], ["transport", "transport"],
    RFC_CL + ": a whole second response (a 503) arrives with the first, after its terminating chunk, unasked for: the stream is out of step (transport failure, as the previous case); the 503 MUST NOT be processed as the response to run 2 (11.1 response splitting)",
    runs=2, keep_alive=True)
add("ka_response_after_last_chunk_late", "chat", chunked(ok_chat, tail=err), [True, True], [None, None],
    RFC_CL + ": the same bytes, the unasked-for 503 arriving 0.3 s later on the idle connection, after run 1 ended ok: it MUST NOT become run 2's verdict (6.3 last paragraph, 11.1 response splitting); run 2 must use a new connection (ok), or at worst fail at transport naming the stray bytes",
    runs=2, keep_alive=True, split_at=len(chunked(ok_chat)))

add("ka_cl_longer_than_body", "chat",
    (HEAD + "content-length: %d\r\n\r\n" % (len(full) + 40)).encode() + full,
    [False, False], ["transport", "transport"],
    RFC_CL + ": Content-Length promises 40 more bytes than arrive; the message never ends (held open), and the connection cannot be reused",
    ["--idle", "0.3"], runs=2, keep_alive=True)

evs = ok_chat
raw = (HEAD + "transfer-encoding: chunked\r\n\r\n").encode()
for k, e in enumerate(evs):
    bb = e.encode()
    size = len(bb) - 2 if k == len(evs) - 1 else len(bb)
    raw += b"%x\r\n" % size + bb + b"\r\n"
raw += b"0\r\n\r\n"
add("ka_chunk_size_short", "chat", raw, [False, False], ["transport", "transport"],
    "RFC 9112 section 7.1: chunk-data is followed by CRLF; the last event's chunk-size is 2 short, so the framing breaks (and the connection must not be reused)",
    runs=2, keep_alive=True)

add("ka_te_and_cl", "chat",
    (HEAD + "content-length: 20\r\ntransfer-encoding: chunked\r\n\r\n").encode() + chunked(ok_chat, head="")[len(b"transfer-encoding: chunked\r\n\r\n"):],
    [False, False], ["http", "http"],
    "RFC 9112 section 6.3 item 3 (and 6.1: a sender MUST NOT send Content-Length with Transfer-Encoding): both present 'ought to be handled as an error' (response splitting/smuggling)",
    runs=2, keep_alive=True)

with open(os.path.join(HERE, "cases.json.in"), "w") as f:
    json.dump(cases, f, indent=1, ensure_ascii=False)
print(len(cases), "cases")
