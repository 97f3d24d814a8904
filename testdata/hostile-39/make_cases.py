#!/usr/bin/env python3
"""Builds cases/*.http and cases.json: hostile and valid streams for the planned dialects
(llama.cpp /v1/responses, llama.cpp /v1/messages, TGI chat tool calls). Standard library only.

Every stream is written from the servers' own source (read through the search tool, cited in
each case's `rule`), not from the client under test:

  llama.cpp  ggml-org/llama.cpp
             tools/server/server-task.cpp @ 00efb3e1 (the version with the Responses and thinking
               formatters): server_task_result_cmpl_partial::to_json_oaicompat_resp,
               ::to_json_anthropic, server_task_result_cmpl_final::to_json_oaicompat_resp_stream,
               ::to_json_anthropic_stream
             tools/server/server-common.cpp: format_oai_resp_sse, format_anthropic_sse,
               random_string / gen_tool_call_id / gen_chatcmplid
             tools/server/server-context.cpp @ 001d906a: handle_completions_impl's set_next
               (no [DONE] for OAI_RESP and ANTHROPIC, ':\\n\\n' SSE ping, errors as
               format_oai_sse({"error": ...}) or an Anthropic 'error' event)
             tools/server/server-http.cpp @ 00dd0816: set_default_headers Server: llama.cpp,
               process_handler_response X-Accel-Buffering: no, one HTTP chunk per next() output,
               Access-Control-Allow-Origin set to the request's (absent) Origin
  TGI        huggingface/text-generation-inference
             router/src/chat.rs @ 03fe626a: ChatState::push (Buffering -> Tool -> Buffering,
               first piece "{", last '}' trimmed, the EOS token after the call emits nothing, the
               usage chunk from the last token's details), create_event_from_stream_token
             router/src/server.rs @ 003eaec0: generate_stream_internal headers (x-compute-type,
               x-compute-characters, X-Accel-Buffering: no), chat_completions' final
               Event::default().data("[DONE]"), Sse keep_alive
             integration-tests snapshot as kept in /work/shared/peer_streams/tgi_*.http
"""
import json
import os
import shutil

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = os.path.join(HERE, "cases")
PEER_TOOLS = "/work/shared/peer_streams/tools/tgi_get_current_weather.json"


def dumps(obj):
    # nlohmann::ordered_json::dump() and serde_json: compact, insertion order, raw UTF-8
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def http(head_lines, chunks):
    """One HTTP/1.1 response, chunked, one HTTP chunk per element of `chunks` (each a str
    holding one or several whole SSE events, as the server writes them), then the last chunk."""
    out = ["HTTP/1.1 200 OK\r\n"]
    for h in head_lines:
        out.append(h + "\r\n")
    out.append("\r\n")
    for c in chunks:
        b = c.encode("utf-8")
        out.append("%x\r\n" % len(b))
        out.append(c)
        out.append("\r\n")
    out.append("0\r\n\r\n")
    return "".join(out)


# ------------------------------------------------------------------ heads
# cpp-httplib writes its headers (Server from set_default_headers, the CORS header the
# pre-routing handler sets from the request's Origin, which this client never sends, so an
# empty value, Content-Type from set_chunked_content_provider, Keep-Alive, Transfer-Encoding)
# plus X-Accel-Buffering from process_handler_response.
LLAMA_HEAD = [
    "Access-Control-Allow-Origin: ",
    "Content-Type: text/event-stream",
    "Keep-Alive: timeout=5, max=100",
    "Server: llama.cpp",
    "Transfer-Encoding: chunked",
    "X-Accel-Buffering: no",
]
LLAMA_HEAD_NO_CORS = [h for h in LLAMA_HEAD if not h.startswith("Access-Control")]
# the same server behind a proxy that rewrote Server and dropped the rest
LLAMA_HEAD_PROXIED = [
    "server: nginx/1.24.0",
    "date: Tue, 01 Dec 2026 23:40:00 GMT",
    "content-type: text/event-stream",
    "transfer-encoding: chunked",
    "connection: keep-alive",
]
# vLLM 0.32 as captured in /work/main/testdata/vllm-0.32.0-cpu
VLLM_HEAD = [
    "date: Tue, 01 Dec 2026 23:40:00 GMT",
    "server: uvicorn",
    "content-type: text/event-stream; charset=utf-8",
    "vary: Origin",
    "transfer-encoding: chunked",
]
# TGI: generate_stream_internal's headers + axum's Sse (content-type, cache-control)
TGI_HEAD = [
    "content-type: text/event-stream",
    "cache-control: no-cache",
    "x-compute-type: gpu+optimized",
    "x-compute-characters: 27",
    "x-accel-buffering: no",
    "transfer-encoding: chunked",
    "date: Tue, 01 Dec 2026 23:40:00 GMT",
]

# ------------------------------------------------------------------ llama.cpp ids
# random_string(): 32 characters of [0-9A-Za-z]
RESP_ID = "resp_Qm3Xv8LrT2pZk9WcN4bHy7JdF1sEa6Ug"
MSG_ID = "msg_Hb7Kq2Xw9LmN4cVt6RzP1sYd8FgJ3eUa"
RS_ID = "rs_Zp4Ty8Nc2Vk6Xm1Qw9Lr3Hs7Bd5Fj0Ga"
CALL_A = "Kx8Vn3Qp7Lw2Zr6Tm9Hb4Yc1Ds5Fg0Je"      # gen_tool_call_id(): no call_/toolu_ prefix
CALL_B = "Wd5Pm9Rs2Xk7Hq3Vn8Lc1Tz6Yb4Jg0Fa"
CMPL_ID = "chatcmpl-Ra8Ln2Wq6Xv3Tk9Pm1Zc7Hs4Yd5Bf0Gj"
CREATED = 1796168400
MODEL = "tiny"


def ev(event, data):
    """format_oai_resp_sse / format_anthropic_sse: 'event: X\\ndata: JSON\\n\\n'."""
    return "event: %s\ndata: %s\n\n" % (event, dumps(data))


PING = ":\n\n"   # server-context.cpp set_next: SSE ping when no result within sse_ping_interval


# ---- Responses partial events (to_json_oaicompat_resp) and final (to_json_oaicompat_resp_stream)
def r_created():
    return (ev("response.created", {"type": "response.created", "response": {
        "id": RESP_ID, "object": "response", "status": "in_progress"}})
        + ev("response.in_progress", {"type": "response.in_progress", "response": {
            "id": RESP_ID, "object": "response", "status": "in_progress"}}))


def r_reasoning_added():
    return ev("response.output_item.added", {"type": "response.output_item.added", "item": {
        "id": RS_ID, "summary": [], "type": "reasoning", "content": [], "encrypted_content": "",
        "status": "in_progress"}})


def r_reasoning_delta(t):
    return ev("response.reasoning_text.delta", {"type": "response.reasoning_text.delta",
                                                "delta": t, "item_id": RS_ID})


def r_message_added():
    return (ev("response.output_item.added", {"type": "response.output_item.added", "item": {
        "content": [], "id": MSG_ID, "role": "assistant", "status": "in_progress",
        "type": "message"}})
        + ev("response.content_part.added", {"type": "response.content_part.added",
                                             "item_id": MSG_ID,
                                             "part": {"type": "output_text", "text": ""}}))


def r_text_delta(t):
    return ev("response.output_text.delta", {"type": "response.output_text.delta",
                                             "item_id": MSG_ID, "delta": t})


def r_call_added(cid, name):
    return ev("response.output_item.added", {"type": "response.output_item.added", "item": {
        "arguments": "", "call_id": "fc_" + cid, "name": name, "type": "function_call",
        "status": "in_progress"}})


def r_args_delta(cid, piece):
    return ev("response.function_call_arguments.delta", {
        "type": "response.function_call_arguments.delta", "delta": piece, "item_id": "fc_" + cid})


def r_final_events(text=None, reasoning=None, calls=(), in_tok=12, out_tok=8, status="completed",
                   with_completed=True):
    """The events of the final result: output_item.done (reasoning), output_text.done,
    content_part.done, output_item.done (message), output_item.done per call, response.completed.
    Returned as a list of event strings (the server sends them in one HTTP chunk)."""
    events, output = [], []
    if reasoning:
        item = {"id": RS_ID, "summary": [], "type": "reasoning",
                "content": [{"text": reasoning, "type": "reasoning_text"}], "encrypted_content": ""}
        events.append(ev("response.output_item.done", {"type": "response.output_item.done",
                                                       "item": item}))
        output.append(item)
    if text:
        events.append(ev("response.output_text.done", {"type": "response.output_text.done",
                                                       "item_id": MSG_ID, "text": text}))
        part = {"type": "output_text", "annotations": [], "logprobs": [], "text": text}
        events.append(ev("response.content_part.done", {"type": "response.content_part.done",
                                                        "item_id": MSG_ID, "part": part}))
        item = {"type": "message", "status": "completed", "id": MSG_ID, "content": [part],
                "role": "assistant"}
        events.append(ev("response.output_item.done", {"type": "response.output_item.done",
                                                       "item": item}))
        output.append(item)
    for cid, name, args in calls:
        item = {"type": "function_call", "status": "completed", "arguments": args,
                "call_id": "fc_" + cid, "name": name}
        events.append(ev("response.output_item.done", {"type": "response.output_item.done",
                                                       "item": item}))
        output.append(item)
    if with_completed:
        events.append(ev("response.completed", {"type": "response.completed", "response": {
            "id": RESP_ID, "object": "response", "created_at": CREATED, "status": status,
            "model": MODEL, "output": output,
            "usage": {"input_tokens": in_tok, "output_tokens": out_tok,
                      "total_tokens": in_tok + out_tok}}}))
    return events


def resp_text_chunks(pieces, out_tok, in_tok=12, final=True, status="completed"):
    """A plain text answer as llama-server sends it: the first result (created, in_progress,
    the message item and its part, the first delta) in one chunk, one chunk per later token,
    the final result in one chunk."""
    chunks = [r_created() + r_message_added() + r_text_delta(pieces[0])]
    chunks += [r_text_delta(p) for p in pieces[1:]]
    if final:
        chunks.append("".join(r_final_events(text="".join(pieces), in_tok=in_tok,
                                             out_tok=out_tok, status=status)))
    return chunks


# ---- Messages partial events (to_json_anthropic) and final (to_json_anthropic_stream)
def m_start(in_tok=14):
    return ev("message_start", {"type": "message_start", "message": {
        "id": CMPL_ID, "type": "message", "role": "assistant", "content": [], "model": MODEL,
        "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": in_tok, "output_tokens": 0}}})


def m_block_start(index, block):
    return ev("content_block_start", {"type": "content_block_start", "index": index,
                                      "content_block": block})


def m_thinking_start():
    return m_block_start(0, {"type": "thinking", "thinking": ""})


def m_text_start(index):
    return m_block_start(index, {"type": "text", "text": ""})


def m_tool_start(index, cid, name):
    return m_block_start(index, {"type": "tool_use", "id": cid, "name": name})


def m_delta(index, delta):
    return ev("content_block_delta", {"type": "content_block_delta", "index": index,
                                      "delta": delta})


def m_thinking(t):
    return m_delta(0, {"type": "thinking_delta", "thinking": t})


def m_text(index, t):
    return m_delta(index, {"type": "text_delta", "text": t})


def m_json(index, piece):
    return m_delta(index, {"type": "input_json_delta", "partial_json": piece})


def m_signature():
    return m_delta(0, {"type": "signature_delta", "signature": ""})


def m_stop(index):
    return ev("content_block_stop", {"type": "content_block_stop", "index": index})


def m_message_delta(stop_reason, out_tok):
    return ev("message_delta", {"type": "message_delta",
                                "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                                "usage": {"output_tokens": out_tok}})


def m_message_stop():
    return ev("message_stop", {"type": "message_stop"})


def m_final(has_thinking, text_index, tool_indexes, stop_reason, out_tok):
    """to_json_anthropic_stream: the closes 'in order' at the end: signature_delta '' and stop for
    the thinking block, stop for the text block, stop per tool block, message_delta, message_stop."""
    events = []
    if has_thinking:
        events += [m_signature(), m_stop(0)]
    if text_index is not None:
        events.append(m_stop(text_index))
    for i in tool_indexes:
        events.append(m_stop(i))
    events += [m_message_delta(stop_reason, out_tok), m_message_stop()]
    return events


THINK = ["The user", " asks for", " the capital", " of France."]
ANSWER = ["Paris", " is the", " capital of", " France."]


def msg_thinking_text_chunks():
    """thinking block 0 opened, then text block 1 opened while 0 is still open, both closed at
    the end: to_json_anthropic never closes the thinking block, to_json_anthropic_stream does."""
    chunks = [m_start() + m_thinking_start() + m_thinking(THINK[0])]
    chunks += [m_thinking(t) for t in THINK[1:]]
    chunks.append(m_text_start(1) + m_text(1, ANSWER[0]))
    chunks += [m_text(1, t) for t in ANSWER[1:]]
    return chunks


# ------------------------------------------------------------------ TGI
TGI_MODEL = "meta-llama/Llama-3.1-8B-Instruct"
TGI_FP = "3.1.2-dev0-native"     # format!("{}-{}", info.version, docker_label or "native")


def tgi_chunk(choices, usage=None, created=1796168400):
    # ChatCompletionChunk fields in declaration order; id is String::new()
    return "data: " + dumps({"id": "", "object": "chat.completion.chunk", "created": created,
                             "model": TGI_MODEL, "system_fingerprint": TGI_FP,
                             "choices": choices, "usage": usage}) + "\n\n"


def tgi_tool(piece, name=None, finish=None):
    # ChatCompletionDelta::Tool(ToolCallDelta { role, tool_calls: [DeltaToolCall { index: 0,
    # id, type: "function", function: Function { name, arguments } }] })
    return tgi_chunk([{"index": 0, "delta": {"role": "assistant", "tool_calls": [
        {"index": 0, "id": "0", "type": "function",
         "function": {"name": name, "arguments": piece}}]},
        "logprobs": None, "finish_reason": finish}])


def tgi_text(t, finish=None):
    return tgi_chunk([{"index": 0, "delta": {"role": "assistant", "content": t},
                       "logprobs": None, "finish_reason": finish}])


def tgi_usage(prompt, completion):
    return tgi_chunk([], usage={"prompt_tokens": prompt, "completion_tokens": completion,
                                "total_tokens": prompt + completion})


TGI_DONE = "data: [DONE]\n\n"
TGI_KEEPALIVE = ":\n\n"   # axum KeepAlive::default() comment

# The generated text is {"function": {"_name": "get_current_weather", "location": "Brooklyn, NY",
# "format": "fahrenheit"}}. ChatState::push buffers until the name parses, sends "{" with the name,
# then every token as an argument piece, the last one with one '}' trimmed.
TGI_ARGS = ["{", " \"", "location", "\":", " \"", "Bro", "oklyn", ",", " NY", "\",", " \"",
            "format", "\":", " \"", "fahren", "heit", "\"}"]


def tgi_tool_chunks(pieces=TGI_ARGS, last_finish=None):
    out = [tgi_tool(pieces[0], name="get_current_weather")]
    out += [tgi_tool(p) for p in pieces[1:-1]]
    out.append(tgi_tool(pieces[-1], finish=last_finish))
    return out


# ------------------------------------------------------------------ the cases
SRC_RESP = ("llama.cpp tools/server/server-task.cpp @00efb3e1 "
            "server_task_result_cmpl_partial::to_json_oaicompat_resp and "
            "server_task_result_cmpl_final::to_json_oaicompat_resp_stream")
SRC_MSG = ("llama.cpp tools/server/server-task.cpp @00efb3e1 "
           "server_task_result_cmpl_partial::to_json_anthropic and "
           "server_task_result_cmpl_final::to_json_anthropic_stream")
SRC_TGI = "TGI router/src/chat.rs @03fe626a ChatState::push"
SRC_DONE_TGI = ("TGI router/src/server.rs chat_completions: "
                "'yield Ok::<Event, Infallible>(Event::default().data(\"[DONE]\"))'")
SRC_CTX = ("llama.cpp tools/server/server-context.cpp @001d906a handle_completions_impl set_next: "
           "'case TASK_RESPONSE_TYPE_OAI_RESP: case TASK_RESPONSE_TYPE_ANTHROPIC: output = \"\"' "
           "(no [DONE])")

CASE_LIST = []


def case(name, api, head, chunks, args, dialect, ok, layer=None, kind=None, rule="",
         extra_files=()):
    CASE_LIST.append(dict(name=name, api=api, head=head, chunks=chunks, args=args,
                          dialect=dialect, expect_ok=ok, expect_layer=layer, expect_kind=kind,
                          rule=rule, extra_files=list(extra_files)))


LC = ["--dialect", "llama.cpp"]
TG = ["--dialect", "tgi"]
TEXT = ["Paris", " is", " the", " capital", " of", " France", "."]      # 7 tokens

# ======================= llama.cpp /v1/responses =======================
case("01_lc_resp_text_ok", "responses", LLAMA_HEAD,
     resp_text_chunks(TEXT, out_tok=7), LC + ["--max-tokens", "64"], "llama.cpp", True,
     rule=SRC_RESP + ": events carry no sequence_number, output_index or content_index; the first "
     "result packs response.created, response.in_progress, output_item.added, content_part.added "
     "and the first output_text.delta into one HTTP chunk (format_oai_resp_sse writes every item "
     "of the array, server-http.cpp writes one chunk per next()); the final result packs "
     "output_text.done, content_part.done, output_item.done and response.completed "
     "{\"status\",\"completed\"} into one chunk; " + SRC_CTX + ". 7 output tokens of 64: finished.")

case("02_lc_resp_text_detected_ok", "responses", LLAMA_HEAD,
     resp_text_chunks(TEXT, out_tok=7), ["--max-tokens", "64"], "llama.cpp", True,
     rule="Detection: no --dialect; the head says 'Server: llama.cpp' (server-http.cpp "
     "server_http_context::init: srv->set_default_headers({{\"Server\", \"llama.cpp\"}})). Same "
     "stream as 01: " + SRC_RESP + ".")

REASON = ["The user", " wants", " the capital."]
case("03_lc_resp_reasoning_then_text_ok", "responses", LLAMA_HEAD,
     [r_created() + r_reasoning_added() + r_reasoning_delta(REASON[0])]
     + [r_reasoning_delta(t) for t in REASON[1:]]
     + [r_message_added() + r_text_delta(TEXT[0])]
     + [r_text_delta(t) for t in TEXT[1:]]
     + ["".join(r_final_events(text="".join(TEXT), reasoning="".join(REASON), out_tok=10))],
     LC + ["--max-tokens", "64"], "llama.cpp", True,
     rule=SRC_RESP + ": a reasoning item (output_item.added with status in_progress, "
     "response.reasoning_text.delta with item_id rs_...) stays open while the message item opens "
     "(thinking_block_started is never reset by a partial); the final result closes it first "
     "with output_item.done (no reasoning_text.done, no status) and then the message. 10 of 64.")

WEATHER_ARGS = ["{\"", "city", "\":", " \"", "Paris", "\"}"]
case("04_lc_resp_tool_call_ok", "responses", LLAMA_HEAD,
     [r_created() + r_call_added(CALL_A, "get_weather") + r_args_delta(CALL_A, WEATHER_ARGS[0])]
     + [r_args_delta(CALL_A, p) for p in WEATHER_ARGS[1:]]
     + ["".join(r_final_events(calls=[(CALL_A, "get_weather", "".join(WEATHER_ARGS))],
                               out_tok=12))],
     LC + ["--max-tokens", "64", "--tools", "tools.json", "--tool-choice", "required"],
     "llama.cpp", True,
     rule=SRC_RESP + ": a call opens with output_item.added {arguments '', call_id 'fc_'+id, "
     "name, type function_call, status in_progress} (no item id: the argument deltas' item_id "
     "is 'fc_'+id), the id is gen_tool_call_id() = random_string() (32 alphanumerics, no call_ "
     "prefix; server-common.cpp), there is no function_call_arguments.done, and the final "
     "result's output_item.done carries the whole arguments. 12 of 64 tokens. NOTE: beyond the "
     "planned rule: with sequence_number/output_index added (probe_gaps.py, probes/results.json) "
     "today's client still refuses this stream because the function_call item has no id; with "
     "id = call_id added it is ok. The dialect must also key a call item by its call_id, or "
     "real llama.cpp calls fail.",
     extra_files=["tools.json"])

ARGS_B = ["{\"", "city", "\":", " \"", "Lyon", "\"}"]
case("05_lc_resp_two_tool_calls_ok", "responses", LLAMA_HEAD,
     [r_created() + r_call_added(CALL_A, "get_weather") + r_args_delta(CALL_A, WEATHER_ARGS[0])]
     + [r_args_delta(CALL_A, p) for p in WEATHER_ARGS[1:]]
     + [r_call_added(CALL_B, "get_weather") + r_args_delta(CALL_B, ARGS_B[0])]
     + [r_args_delta(CALL_B, p) for p in ARGS_B[1:]]
     + ["".join(r_final_events(calls=[(CALL_A, "get_weather", "".join(WEATHER_ARGS)),
                                      (CALL_B, "get_weather", "".join(ARGS_B))], out_tok=24))],
     LC + ["--max-tokens", "64", "--tools", "tools.json"], "llama.cpp", True,
     rule=SRC_RESP + ": two calls, each opened by output_item.added (oai_resp_fc_id follows the "
     "latest name diff) and closed together in the final result, in order. Distinct ids without "
     "a call_ prefix. 24 of 64.", extra_files=["tools.json"])

pinged = resp_text_chunks(TEXT, out_tok=7)
pinged = pinged[:2] + [PING] + pinged[2:5] + [PING, PING] + pinged[5:]
case("06_lc_resp_sse_ping_ok", "responses", LLAMA_HEAD, pinged,
     LC + ["--max-tokens", "64"], "llama.cpp", True,
     rule=SRC_CTX + "; the same set_next sends 'output = \":\\n\\n\"' (an SSE comment) when no "
     "result came within sse_ping_interval, each in its own HTTP chunk. Comments are not events.")

case("07_lc_resp_budget_used_up", "responses", LLAMA_HEAD,
     resp_text_chunks(["Paris", " is", " the", " capital", " of", " France", ",", " a", " city",
                       " of", " two", " million", " people", " and", " many", " museums"],
                      out_tok=16),
     LC + ["--max-tokens", "16"], "llama.cpp", False, "application", "budget_exhausted",
     rule=SRC_RESP + ": response.completed always says {\"status\",\"completed\"} (the final "
     "result sets it unconditionally, whatever slot.stop was); the brief's llama.cpp rule: "
     "finished only if usage.output_tokens < max_output_tokens. Here output_tokens (n_decoded) "
     "16 == --max-tokens 16: the budget ended the answer.")

case("08_lc_resp_budget_used_up_detected", "responses", LLAMA_HEAD,
     resp_text_chunks(["Paris", " is", " the", " capital", " of", " France", ",", " a"],
                      out_tok=8),
     ["--max-tokens", "8"], "llama.cpp", False, "application", "budget_exhausted",
     rule="As 07 with the dialect detected from 'Server: llama.cpp' (server-http.cpp "
     "set_default_headers), no --dialect: output_tokens 8 == --max-tokens 8, status completed.")

case("09_lc_resp_budget_one_below_ok", "responses", LLAMA_HEAD,
     resp_text_chunks(["Paris", " is", " the", " capital", " of", " France", ",", " yes", "."],
                      out_tok=9),
     LC + ["--max-tokens", "10"], "llama.cpp", True,
     rule="Boundary of the brief's budget rule: output_tokens 9 < max_output_tokens 10, so the "
     "model stopped by itself (" + SRC_RESP + ").")

CUT_ARGS = ["{\"", "city", "\":", " \"", "Par"]
case("10_lc_resp_budget_cuts_tool_call", "responses", LLAMA_HEAD,
     [r_created() + r_call_added(CALL_A, "get_weather") + r_args_delta(CALL_A, CUT_ARGS[0])]
     + [r_args_delta(CALL_A, p) for p in CUT_ARGS[1:]]
     + ["".join(r_final_events(calls=[(CALL_A, "get_weather", "".join(CUT_ARGS))], out_tok=5))],
     LC + ["--max-tokens", "5", "--tools", "tools.json", "--tool-choice", "required"],
     "llama.cpp", False, "application", None,
     rule=SRC_RESP + ": a call cut by the budget still ends with output_item.done "
     "{status completed} and response.completed {status completed}; output_tokens 5 == "
     "--max-tokens 5 and the arguments '{\"city\": \"Par' are not JSON. Not ok at application "
     "(budget_exhausted, budget_used_by_tool_call, which a numbered probe of this stream gets "
     "today, or tool_arguments_not_json: each names a real failure).",
     extra_files=["tools.json"])

case("11_lc_resp_cut_after_deltas", "responses", LLAMA_HEAD,
     resp_text_chunks(TEXT, out_tok=7, final=False), LC + ["--max-tokens", "64"],
     "llama.cpp", False, "application", "eof_before_done",
     rule=SRC_RESP + ": the terminal event only comes with the final result; here the message "
     "ends cleanly (terminating chunk) after the last output_text.delta, at an event boundary: "
     "no response.completed, so not finished. The dialect relaxes numbering, not the terminal "
     "event.")

fin = r_final_events(text="".join(TEXT), out_tok=7)
case("12_lc_resp_cut_before_completed", "responses", LLAMA_HEAD,
     resp_text_chunks(TEXT, out_tok=7, final=False) + ["".join(fin[:-1])],
     LC + ["--max-tokens", "64"], "llama.cpp", False, "application", "eof_before_done",
     rule=SRC_RESP + ": the final result's chunk is cut at the event boundary before "
     "response.completed (output_item.done was the last event that came); the message itself "
     "ends cleanly.")

case("13_lc_resp_cut_after_created", "responses", LLAMA_HEAD,
     [r_created()], LC + ["--max-tokens", "64"], "llama.cpp", False, "application",
     "eof_before_done",
     rule=SRC_RESP + ": only the first two events (response.created, response.in_progress) of "
     "the first result, then a clean end: nothing was answered and no terminal event came.")

case("14_lc_resp_error_midstream", "responses", LLAMA_HEAD,
     resp_text_chunks(TEXT[:3], out_tok=3, final=False)
     + ["data: " + dumps({"error": {"code": 500, "message": "Failed to decode the batch, n_batch"
                                    " = 2048, ret = -3", "type": "server_error"}}) + "\n\n"],
     LC + ["--max-tokens", "64"], "llama.cpp", False, "protocol", None,
     rule="llama.cpp server-context.cpp @001d906a set_next format_error: for every res_type but "
     "ANTHROPIC 'return format_oai_sse(json {{ \"error\", res_json }})', so on /v1/responses "
     "the error is a data-only event {\"error\": {code, message, type}} with no event: line and "
     "no type, then the stream ends. The planned dialect does not name this departure, so the "
     "untyped event is refused as under strict rules (a numbered vLLM-shaped probe with the same "
     "event gets protocol/event_type_mismatch today: 'its event field says message but its data "
     "says type None'). If the dialect learns llama.cpp's error shape, application/"
     "server_error_event is the better verdict; either way not ok.")

case("15_lc_resp_delta_after_completed", "responses", LLAMA_HEAD,
     resp_text_chunks(TEXT, out_tok=7) + [r_text_delta(" Extra.")],
     LC + ["--max-tokens", "64"], "llama.cpp", False, "protocol", "event_after_terminal",
     rule=SRC_RESP + ": response.completed is the last event of the final result and nothing "
     "follows it (" + SRC_CTX + "); an output_text.delta after it is an event after the terminal "
     "one, under any dialect.")

case("16_lc_resp_strict_default_proxied", "responses", LLAMA_HEAD_PROXIED,
     resp_text_chunks(TEXT, out_tok=7), ["--max-tokens", "64"], None, False, "protocol",
     "sequence_number",
     rule="Strict default: the llama.cpp stream of 01 behind a proxy that replaced 'Server: "
     "llama.cpp' with 'server: nginx/1.24.0' and dropped X-Accel-Buffering, no --dialect. No "
     "marker, so the strict vendor rules apply: every Responses event needs a sequence_number "
     "counting from 0 (docs/apis.md), and these have none. Strict verdict: protocol, "
     "sequence_number (checked against today's client).")

case("17_vllm_resp_llama_shape_no_marker", "responses", VLLM_HEAD,
     resp_text_chunks(TEXT, out_tok=7), ["--max-tokens", "64"], None, False, "protocol",
     "sequence_number",
     rule="A vLLM-like server (server: uvicorn, vLLM 0.32's head from testdata/vllm-0.32.0-cpu) "
     "sending the llama.cpp-looking shape (no sequence_number/output_index) without any llama.cpp "
     "marker: detection must not apply the dialect, strict verdict protocol/sequence_number.")


def vllm_resp_chunks(text_pieces, out_tok, max_out, status="completed", in_tok=9):
    """vLLM 0.32's numbered Responses stream (r2_responses_stream_stopstring_completed.http),
    trimmed to the fields the vendor protocol names; one event per HTTP chunk."""
    rid, mid = "resp_a46c22d76de42a06", "msg_8cefedd24ff889ba"
    text = "".join(text_pieces)
    seq = [0]

    def e(t, d):
        d = dict(d)
        d["sequence_number"] = seq[0]
        d["type"] = t
        seq[0] += 1
        return "event: %s\ndata: %s\n\n" % (t, dumps(d))
    base = {"id": rid, "created_at": CREATED, "incomplete_details": None, "model": MODEL,
            "object": "response", "output": [], "max_output_tokens": max_out,
            "status": "in_progress", "usage": None}
    out = [e("response.created", {"response": base}), e("response.in_progress", {"response": base})]
    item0 = {"id": mid, "content": [], "role": "assistant", "status": "in_progress",
             "type": "message"}
    out.append(e("response.output_item.added", {"item": item0, "output_index": 0}))
    out.append(e("response.content_part.added", {
        "content_index": 0, "item_id": mid, "output_index": 0,
        "part": {"annotations": [], "text": "", "type": "output_text", "logprobs": []}}))
    for p in text_pieces:
        out.append(e("response.output_text.delta", {"content_index": 0, "delta": p,
                                                    "item_id": mid, "output_index": 0,
                                                    "logprobs": []}))
    out.append(e("response.output_text.done", {"content_index": 0, "item_id": mid,
                                               "output_index": 0, "text": text, "logprobs": []}))
    part = {"annotations": [], "text": text, "type": "output_text", "logprobs": None}
    out.append(e("response.content_part.done", {"content_index": 0, "item_id": mid,
                                                "output_index": 0, "part": part}))
    item = {"id": mid, "content": [part], "role": "assistant",
            "status": "completed" if status == "completed" else "incomplete", "type": "message"}
    out.append(e("response.output_item.done", {"item": item, "output_index": 0}))
    done = dict(base, output=[item], status=status,
                usage={"input_tokens": in_tok, "output_tokens": out_tok,
                       "total_tokens": in_tok + out_tok})
    if status == "incomplete":
        done["incomplete_details"] = {"reason": "max_output_tokens"}
    out.append(e("response.completed", {"response": done}))
    return out


EIGHT = ["Paris", " is", " the", " capital", " of", " France", ",", " a"]
case("18_vllm_resp_budget_equal_no_marker_ok", "responses", VLLM_HEAD,
     vllm_resp_chunks(EIGHT, out_tok=8, max_out=8), ["--max-tokens", "8"], None, True,
     rule="Detection must not over-apply: a vendor-conforming vLLM stream (numbered, status "
     "completed, shape of testdata/vllm-0.32.0-cpu/r2) whose output_tokens equals "
     "max_output_tokens. vLLM says 'incomplete' when the budget ends an answer, so strict rules "
     "trust its 'completed'; the llama.cpp budget rule must not be applied to a server: uvicorn "
     "response. Strict verdict: ok.")

case("19_vllm_resp_incomplete_forced_llama_dialect", "responses", VLLM_HEAD,
     vllm_resp_chunks(EIGHT, out_tok=8, max_out=8, status="incomplete"),
     LC + ["--max-tokens", "8"], "llama.cpp", False, "application", "budget_exhausted",
     rule="A dialect only relaxes a named departure: with --dialect llama.cpp forced on vLLM's "
     "budget-cut stream (response.completed with status 'incomplete', incomplete_details "
     "max_output_tokens, as vLLM 0.32 sends: docs/apis.md), the status still decides, and the "
     "budget rule agrees: budget_exhausted.")

case("20_vllm_resp_numbered_forced_llama_dialect_ok", "responses", VLLM_HEAD,
     vllm_resp_chunks(TEXT, out_tok=7, max_out=64), LC + ["--max-tokens", "64"], "llama.cpp",
     True,
     rule="--dialect llama.cpp on a vendor-conforming numbered stream (7 of 64 tokens, "
     "completed): a dialect tolerates llama.cpp's missing numbers, it does not forbid numbers "
     "(a later llama.cpp server-task.cpp, file id 65741575369 in the index, does add "
     "sequence_number and output_index through oai_resp_seq_num). Ok.")

# ======================= llama.cpp /v1/messages =======================
think_text_final = m_final(True, 1, [], "end_turn", 12)
case("21_lc_msg_thinking_text_ok", "messages", LLAMA_HEAD,
     msg_thinking_text_chunks() + ["".join(think_text_final)],
     LC + ["--max-tokens", "64"], "llama.cpp", True,
     rule=SRC_MSG + ": content_block_start thinking (index 0, {type thinking, thinking ''}, no "
     "signature field), thinking_delta, then content_block_start text at index 1 "
     "(text_block_index = anthropic_has_reasoning ? 1 : 0) while block 0 is still open; the "
     "final result closes 'in order': signature_delta {signature ''} on 0, content_block_stop 0, "
     "content_block_stop 1, message_delta {stop_reason end_turn}, message_stop, all in one "
     "HTTP chunk; " + SRC_CTX + ".")

case("22_lc_msg_thinking_text_detected_ok", "messages", LLAMA_HEAD,
     msg_thinking_text_chunks() + ["".join(think_text_final)], ["--max-tokens", "64"],
     "llama.cpp", True,
     rule="As 21, no --dialect: detected from 'Server: llama.cpp' (server-http.cpp "
     "set_default_headers).")

case("23_lc_msg_text_only_ok", "messages", LLAMA_HEAD,
     [m_start() + m_text_start(0) + m_text(0, ANSWER[0])] + [m_text(0, t) for t in ANSWER[1:]]
     + ["".join(m_final(False, 0, [], "end_turn", 4))],
     LC + ["--max-tokens", "64"], "llama.cpp", True,
     rule=SRC_MSG + ": without reasoning the text block is index 0 and is closed only in the "
     "final result (no interleaving): valid under the dialect as under strict rules.")

TOOL_JSON = ["{\"", "city", "\":", " \"", "Paris", "\"}"]
case("24_lc_msg_thinking_tool_use_ok", "messages", LLAMA_HEAD,
     [m_start() + m_thinking_start() + m_thinking("Need the weather.")]
     + [m_tool_start(1, CALL_A, "get_weather") + m_json(1, TOOL_JSON[0])]
     + [m_json(1, p) for p in TOOL_JSON[1:]]
     + ["".join(m_final(True, None, [1], "tool_use", 14))],
     LC + ["--max-tokens", "64", "--tools", "tools.json", "--tool-choice", "required"],
     "llama.cpp", True,
     rule=SRC_MSG + ": the tool_use block opens at index (anthropic_has_reasoning ? 1 : 0) + "
     "(text_started ? 1 : 0) + tool_call_index = 1 while thinking block 0 is open, with "
     "content_block {type tool_use, id, name} (no input), id = gen_tool_call_id() (32 "
     "alphanumerics, no toolu_ prefix); closes at the end after the empty signature_delta; "
     "stop_reason tool_use (tool_calls not empty).", extra_files=["tools.json"])

case("25_lc_msg_thinking_text_tool_ok", "messages", LLAMA_HEAD,
     [m_start() + m_thinking_start() + m_thinking("Look it up.")]
     + [m_text_start(1) + m_text(1, "Checking.")]
     + [m_tool_start(2, CALL_B, "get_weather") + m_json(2, TOOL_JSON[0])]
     + [m_json(2, p) for p in TOOL_JSON[1:]]
     + ["".join(m_final(True, 1, [2], "tool_use", 18))],
     LC + ["--max-tokens", "64", "--tools", "tools.json"], "llama.cpp", True,
     rule=SRC_MSG + ": thinking 0, text 1 and tool_use 2 all open at once, closed at the end in "
     "order 0, 1, 2 (signature_delta first). Ok under the dialect. Judgement: text before a call "
     "is allowed on Messages here because the blocks are distinct and --tool-choice is auto; if "
     "the client treats text in a tool_use answer as text_in_tool_call on Messages too, that is "
     "its strict rule, not the dialect's.", extra_files=["tools.json"])

msg_pinged = msg_thinking_text_chunks() + ["".join(think_text_final)]
msg_pinged = msg_pinged[:3] + [PING] + msg_pinged[3:]
case("26_lc_msg_sse_ping_ok", "messages", LLAMA_HEAD, msg_pinged,
     LC + ["--max-tokens", "64"], "llama.cpp", True,
     rule=SRC_CTX + "; SSE ping ':\\n\\n' between results (set_next, sse_ping_interval). A "
     "comment is not an event, and llama.cpp sends no Anthropic 'ping' event.")

case("27_lc_msg_thinking_never_closed", "messages", LLAMA_HEAD,
     msg_thinking_text_chunks() + ["".join([m_stop(1), m_message_delta("end_turn", 12),
                                            m_message_stop()])],
     LC + ["--max-tokens", "64"], "llama.cpp", False, "protocol", None,
     rule=SRC_MSG + ": the dialect allows the thinking block to stay open while the text block "
     "opens, because to_json_anthropic_stream closes it at the end ('if (has_thinking)' pushes "
     "signature_delta and content_block_stop). Here the final result closes only the text block: "
     "the thinking block is never closed before message_delta/message_stop. Not ok at protocol "
     "(part_still_open or event_out_of_order).")

case("28_lc_msg_text_after_message_stop", "messages", LLAMA_HEAD,
     msg_thinking_text_chunks() + ["".join(think_text_final), m_text(1, " Also Lyon.")],
     LC + ["--max-tokens", "64"], "llama.cpp", False, "protocol", "event_after_terminal",
     rule=SRC_MSG + ": message_stop is the last event llama-server writes for /v1/messages (" +
     SRC_CTX + "). A text_delta after it is an event after the terminal event.")

case("29_lc_msg_cut_after_text", "messages", LLAMA_HEAD,
     msg_thinking_text_chunks(), LC + ["--max-tokens", "64"], "llama.cpp", False,
     "application", "eof_before_done",
     rule=SRC_MSG + ": both blocks still open (they close only in the final result) and the "
     "message ends cleanly at an event boundary after the last text_delta: no message_stop.")

case("30_lc_msg_cut_before_message_stop", "messages", LLAMA_HEAD,
     msg_thinking_text_chunks() + ["".join(think_text_final[:-1])],
     LC + ["--max-tokens", "64"], "llama.cpp", False, "application", "eof_before_done",
     rule=SRC_MSG + ": the final chunk is cut at the event boundary after message_delta "
     "{stop_reason end_turn}; message_stop never came.")

case("31_lc_msg_max_tokens", "messages", LLAMA_HEAD,
     msg_thinking_text_chunks() + ["".join(m_final(True, 1, [], "max_tokens", 8))],
     LC + ["--max-tokens", "8"], "llama.cpp", False, "application", "budget_exhausted",
     rule=SRC_MSG + ": 'std::string stop_reason = \"max_tokens\"' unless stop is EOS or a stop "
     "word; interleaved blocks closed at the end as the dialect allows, but the budget ended "
     "the answer.")

case("32_lc_msg_thinking_only", "messages", LLAMA_HEAD,
     [m_start() + m_thinking_start() + m_thinking(THINK[0])] + [m_thinking(t) for t in THINK[1:]]
     + ["".join(m_final(True, None, [], "end_turn", 6))],
     LC + ["--max-tokens", "64"], "llama.cpp", False, "application", "no_visible_text",
     rule=SRC_MSG + ": has_text false, so only the thinking block is closed; end_turn with no "
     "text block: reasoning is not the answer (docs/apis.md: thinking goes to reasoning_text, "
     "never to text).")

case("33_lc_msg_error_event", "messages", LLAMA_HEAD,
     [m_start() + m_text_start(0) + m_text(0, ANSWER[0])]
     + [ev("error", {"code": 500, "message": "Failed to decode the batch, n_batch = 2048, "
                     "ret = -3", "type": "server_error"})],
     LC + ["--max-tokens", "64"], "llama.cpp", False, "protocol", None,
     rule="llama.cpp server-context.cpp @001d906a set_next format_error: for ANTHROPIC "
     "'format_anthropic_sse({{\"event\", \"error\"}, {\"data\", res_json}})' where res_json is "
     "format_error_response() {code, message, type: server_error} (not Anthropic's {type: error, "
     "error: {...}}), then the stream ends. The planned dialect does not name this departure; "
     "today's strict verdict is protocol/event_type_mismatch (data type 'server_error' under "
     "event 'error'). application/server_error_event would be the better verdict if the dialect "
     "learns the shape; either way not ok.")

case("34_lc_msg_thinking_delta_after_close", "messages", LLAMA_HEAD,
     msg_thinking_text_chunks() + ["".join(think_text_final[:4] + [m_thinking(" More.")]
                                           + think_text_final[4:])],
     LC + ["--max-tokens", "64"], "llama.cpp", False, "protocol", None,
     rule=SRC_MSG + ": under the dialect the thinking block may stay open past the text block's "
     "start, but once content_block_stop 0 came it is closed; a thinking_delta for index 0 after "
     "both stops (before message_delta) is for a closed block (event_after_close or "
     "event_out_of_order).")

case("35_lc_msg_strict_default_proxied", "messages", LLAMA_HEAD_PROXIED,
     msg_thinking_text_chunks() + ["".join(think_text_final)], ["--max-tokens", "64"], None,
     False, "protocol", "event_out_of_order",
     rule="Strict default: the stream of 21 behind a proxy that replaced the Server header, no "
     "--dialect. Strict Messages rules: 'content_block_start for the next block (after the last "
     "one stopped)' (docs/apis.md), so the text block opening while thinking block 0 is open is "
     "refused. Strict verdict: protocol, event_out_of_order (checked against today's client).")

case("36_vllm_msg_interleaved_no_marker", "messages", VLLM_HEAD,
     msg_thinking_text_chunks() + ["".join(think_text_final)], ["--max-tokens", "64"], None,
     False, "protocol", "event_out_of_order",
     rule="A vLLM-like server (server: uvicorn) sending llama.cpp's interleaved thinking/text "
     "blocks with no llama.cpp marker: the dialect must not be detected; strict verdict as 35.")

# ======================= TGI chat tool calls =======================
TGI_TOOLS = ["--tools", "tgi_get_current_weather.json"]
case("37_tgi_tool_named_ok", "chat", TGI_HEAD, tgi_tool_chunks() + [TGI_DONE],
     TG + TGI_TOOLS + ["--tool-choice", "get_current_weather", "--max-tokens", "64"], "tgi",
     True,
     rule=SRC_TGI + ": Buffering until '{\"function\": {\"_name\": \"get_current_weather\",' "
     "parses, that token sent as arguments '{' with the name; Tool state sends each token as an "
     "argument piece with name null and id \"0\" (no call_ prefix) on every chunk; when the whole "
     "text parses as a Call the last piece loses one '}' and the state returns to Buffering, "
     "where the EOS token (the one with details and the finish reason) emits nothing. So no "
     "chunk has a finish_reason; " + SRC_DONE_TGI + ". Arguments {\"location\": \"Brooklyn, NY\", "
     "\"format\": \"fahrenheit\"} match the schema. Same shape as "
     "peer_streams/tgi_tools_choice_stream.http.", extra_files=["tgi_get_current_weather.json"])

case("38_tgi_tool_auto_usage_ok", "chat", TGI_HEAD,
     tgi_tool_chunks() + [tgi_usage(212, 29), TGI_DONE],
     TG + TGI_TOOLS + ["--max-tokens", "64"], "tgi", True,
     rule=SRC_TGI + ": 'if self.options.include_usage { if let Some(details) = "
     "stream_token.details {... choices: vec![], usage: Some(..) }}' runs whatever the state, "
     "so the EOS token after the call yields only the usage chunk (id \"\", choices []); the "
     "client asks include_usage. 29 of 64 tokens. Then [DONE].",
     extra_files=["tgi_get_current_weather.json"])

case("39_tgi_tool_detected_keepalive_ok", "chat", TGI_HEAD,
     tgi_tool_chunks()[:5] + [TGI_KEEPALIVE] + tgi_tool_chunks()[5:] + [tgi_usage(212, 29),
                                                                          TGI_DONE],
     TGI_TOOLS + ["--max-tokens", "64"], "tgi", True,
     rule="No --dialect: detected from what only TGI sends (x-compute-type / x-compute-characters "
     "headers from server.rs generate_stream_internal, system_fingerprint "
     "'{version}-{docker_label or native}', chunk id \"\", call id \"0\"). Which marker the "
     "detector keys on is the other engineer's choice; this head and body carry all of them. "
     "Axum's KeepAlive::default() comment ':' between events (server.rs "
     "'Sse::new(response_stream).keep_alive(KeepAlive::default())'). Otherwise as 38.",
     extra_files=["tgi_get_current_weather.json"])

TGI_TEXT = ["The", " weather", " in", " Brooklyn", " is", " sunny", "."]
case("40_tgi_text_under_dialect_ok", "chat", TGI_HEAD,
     [tgi_text(t) for t in TGI_TEXT] + [tgi_text("", finish="stop"), tgi_usage(40, 8), TGI_DONE],
     TG + ["--max-tokens", "64"], "tgi", True,
     rule="TGI router/src/chat.rs create_event_from_stream_token, StreamState::Content: every "
     "token is a text delta, the EOS token is special so its content is \"\" and it carries "
     "finish_reason 'stop' (details.finish_reason.format(true)); then usage and [DONE] (as "
     "peer_streams/tgi_chat_openai_usage.http). The TGI dialect only covers tool calls; a text "
     "answer keeps the strict rules and is ok.")

case("41_tgi_text_length_under_dialect", "chat", TGI_HEAD,
     [tgi_text(t) for t in TGI_TEXT[:-1]] + [tgi_text(".", finish="length"), tgi_usage(40, 7),
                                             TGI_DONE],
     TG + ["--max-tokens", "7"], "tgi", False, "application", "budget_exhausted",
     rule="TGI create_event_from_stream_token: the last token before the budget carries "
     "finish_reason 'length' (peer_streams/tgi_completion_stream_usage_length.http); the tgi "
     "dialect does not relax text answers.")

CUT = TGI_ARGS[:9]   # '{ "location": "Brooklyn, NY'
case("42_tgi_tool_args_cut_then_done", "chat", TGI_HEAD,
     [tgi_tool(CUT[0], name="get_current_weather")] + [tgi_tool(p) for p in CUT[1:]]
     + [TGI_DONE],
     TG + TGI_TOOLS + ["--tool-choice", "get_current_weather", "--max-tokens", "64"], "tgi",
     False, "application", "tool_arguments_not_json",
     rule="Brief's TGI rule: finished only if [DONE] came and every call's arguments are complete "
     "JSON. [DONE] came (" + SRC_DONE_TGI + ") but the arguments stop at '{ \"location\": "
     "\"Brooklyn, NY' (" + SRC_TGI + " sends argument pieces as tokens arrive), so the call is "
     "not usable.", extra_files=["tgi_get_current_weather.json"])

case("43_tgi_tool_no_done", "chat", TGI_HEAD, tgi_tool_chunks(),
     TG + TGI_TOOLS + ["--tool-choice", "get_current_weather", "--max-tokens", "64"], "tgi",
     False, "application", "eof_before_done",
     rule="Brief's TGI rule: [DONE] is required (" + SRC_DONE_TGI + " always ends the stream "
     "with it). Complete arguments, no finish_reason, and a clean end without [DONE]: with no "
     "finish_reason either, nothing says the answer ended.",
     extra_files=["tgi_get_current_weather.json"])

case("44_tgi_tool_args_cut_no_done", "chat", TGI_HEAD,
     [tgi_tool(CUT[0], name="get_current_weather")] + [tgi_tool(p) for p in CUT[1:]],
     TG + TGI_TOOLS + ["--max-tokens", "64"], "tgi", False, "application", "eof_before_done",
     rule="Both failures: arguments cut mid-JSON and no [DONE]. The stream ending before its "
     "terminal event is the first thing that went wrong (kind expected eof_before_done; "
     "tool_arguments_not_json would still be not ok).",
     extra_files=["tgi_get_current_weather.json"])

SCHEMA_BAD = ["{", " \"", "location", "\":", " \"", "Brooklyn", "\"}"]
case("45_tgi_tool_schema_violation", "chat", TGI_HEAD,
     tgi_tool_chunks(SCHEMA_BAD) + [TGI_DONE],
     TG + TGI_TOOLS + ["--tool-choice", "get_current_weather", "--max-tokens", "64"], "tgi",
     False, "application", "tool_arguments_schema",
     rule="Brief's TGI rule: complete JSON 'valid against their schema when tools give one'. "
     "{\"location\": \"Brooklyn\"} misses the required 'format' "
     "(peer_streams/tools/tgi_get_current_weather.json). TGI's grammar normally prevents this; "
     "the rule is what stops a bad call from counting as finished.",
     extra_files=["tgi_get_current_weather.json"])

BUDGET_CUT = TGI_ARGS[:8]
case("46_tgi_tool_budget_cut_in_call", "chat", TGI_HEAD,
     tgi_tool_chunks(BUDGET_CUT, last_finish="length") + [tgi_usage(212, 8), TGI_DONE],
     TG + TGI_TOOLS + ["--tool-choice", "get_current_weather", "--max-tokens", "8"], "tgi",
     False, "application", "budget_exhausted",
     rule=SRC_TGI + ": in StreamState::Tool the token is sent through "
     "create_event_from_stream_token, which sets finish_reason from stream_token.details, so "
     "when the budget ends generation inside a call the last argument piece carries "
     "finish_reason 'length'; the arguments '{ \"location\": \"Brooklyn,' are cut. The budget "
     "is the first failure: budget_exhausted (today's strict kind).",
     extra_files=["tgi_get_current_weather.json"])

case("47_tgi_tool_complete_on_length", "chat", TGI_HEAD,
     tgi_tool_chunks(last_finish="length") + [tgi_usage(212, 17), TGI_DONE],
     TG + TGI_TOOLS + ["--tool-choice", "get_current_weather", "--max-tokens", "17"], "tgi",
     False, "application", "budget_exhausted",
     rule=SRC_TGI + ": when the token that completes the call is also the last one the budget "
     "allows, it is handled in StreamState::Tool (trimmed of one '}') and carries "
     "finish_reason 'length'. The arguments parse, but the server said the budget ended the "
     "answer (17 of 17). Judgement: the tgi dialect relaxes a missing finish_reason, not a "
     "'length' one: budget_exhausted (today's strict kind; budget_used_by_tool_call would "
     "also name it).",
     extra_files=["tgi_get_current_weather.json"])

case("48_tgi_tool_delta_after_done", "chat", TGI_HEAD,
     tgi_tool_chunks() + [TGI_DONE, tgi_tool(" ")],
     TG + TGI_TOOLS + ["--tool-choice", "get_current_weather", "--max-tokens", "64"], "tgi",
     False, "protocol", "event_after_terminal",
     rule=SRC_DONE_TGI + " is the last event of chat_completions' stream; an argument piece "
     "after it is an event after the terminal one.",
     extra_files=["tgi_get_current_weather.json"])

case("49_tgi_stream_under_llama_dialect", "chat", TGI_HEAD, tgi_tool_chunks() + [TGI_DONE],
     LC + TGI_TOOLS + ["--tool-choice", "get_current_weather", "--max-tokens", "64"],
     "llama.cpp", False, "application", "no_finish_reason",
     rule="The stream of 37 run with --dialect llama.cpp: that dialect has rules for "
     "/v1/responses and /v1/messages only, so chat keeps the strict rules, which need a "
     "finish_reason ('tool_calls', or 'stop' for a named tool) before [DONE]. Strict verdict "
     "(no_finish_reason, as today's client gives it).",
     extra_files=["tgi_get_current_weather.json"])


def vllm_like_tool_chunks():
    """vLLM-looking chat chunks (chatcmpl id, vllm system_fingerprint) carrying TGI's shape:
    call id "0", no finish_reason, then [DONE]."""
    cid = "chatcmpl-h39000000000000a"

    def c(delta):
        return "data: " + dumps({"id": cid, "object": "chat.completion.chunk", "created": CREATED,
                                 "model": MODEL, "choices": [{"index": 0, "delta": delta,
                                                              "logprobs": None,
                                                              "finish_reason": None}],
                                 "system_fingerprint": "vllm-0.32.0-4c84b9b1"}) + "\n\n"
    out = [c({"role": "assistant", "content": ""})]
    out.append(c({"tool_calls": [{"id": "0", "type": "function", "index": 0,
                                  "function": {"name": "get_current_weather", "arguments": "{"}}]}))
    for p in TGI_ARGS[1:]:
        out.append(c({"tool_calls": [{"index": 0, "function": {"arguments": p}}]}))
    out.append("data: " + dumps({"id": cid, "object": "chat.completion.chunk", "created": CREATED,
                                 "model": MODEL, "choices": [],
                                 "usage": {"prompt_tokens": 212, "total_tokens": 241,
                                           "completion_tokens": 29}}) + "\n\n")
    out.append("data: [DONE]\n\n")
    return out


case("50_vllm_chat_tgi_shape_no_marker", "chat", VLLM_HEAD, vllm_like_tool_chunks(),
     TGI_TOOLS + ["--tool-choice", "get_current_weather", "--max-tokens", "64"], None, False,
     "application", "no_finish_reason",
     rule="A vLLM-like server (server: uvicorn, chatcmpl- id, vllm system_fingerprint) sending "
     "TGI's tool-call shape (call id \"0\", no finish_reason, then [DONE]) with none of TGI's "
     "markers: the tgi dialect must not be detected; strict rules need the finish_reason. Strict "
     "verdict: no_finish_reason (as today's client gives it).",
     extra_files=["tgi_get_current_weather.json"])

UNKNOWN = ["{", " \"", "location", "\":", " \"", "Brooklyn", "\"}"]
case("51_tgi_tool_unknown_name", "chat", TGI_HEAD,
     [tgi_tool(UNKNOWN[0], name="get_forecast")] + [tgi_tool(p) for p in UNKNOWN[1:]] + [TGI_DONE],
     TG + TGI_TOOLS + ["--max-tokens", "64"], "tgi", False, "application", "unknown_tool",
     rule=SRC_TGI + " names the call from the generated '_name' (Some(call.function._name)); "
     "the brief's TGI rule checks each call against its schema 'when tools give one', which "
     "needs the tool to be one the request offered. get_forecast was not offered "
     "(tgi_get_current_weather.json offers get_current_weather only).",
     extra_files=["tgi_get_current_weather.json"])

LOWER_HEAD = [h.lower() if h.startswith("Server") else h for h in LLAMA_HEAD]
LOWER_HEAD = [("server: llama.cpp" if h.lower().startswith("server") else h) for h in LLAMA_HEAD]
case("52_lc_resp_lowercase_server_name_detected_ok", "responses", LOWER_HEAD,
     resp_text_chunks(TEXT, out_tok=7), ["--max-tokens", "64"], "llama.cpp", True,
     rule="Detection: field names are case-insensitive (RFC 9110 5.1), so a proxy that lowercases "
     "names ('server: llama.cpp', as HTTP/2-to-1.1 gateways do) still carries llama.cpp's marker "
     "(server-http.cpp set_default_headers({{\"Server\", \"llama.cpp\"}})); the value is "
     "unchanged. Stream as 01.")


TOOLS_JSON = [{"type": "function", "function": {
    "name": "get_weather", "description": "Get the weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}]

URL_PATH = {"chat": "/v1/chat/completions", "responses": "/v1/responses",
            "messages": "/v1/messages"}


def main():
    if os.path.isdir(CASES):
        for f in os.listdir(CASES):
            os.remove(os.path.join(CASES, f))
    else:
        os.makedirs(CASES)
    with open(os.path.join(CASES, "tools.json"), "w") as f:
        json.dump(TOOLS_JSON, f, indent=1)
        f.write("\n")
    shutil.copyfile(PEER_TOOLS, os.path.join(CASES, "tgi_get_current_weather.json"))
    today = {}
    tpath = os.path.join(HERE, "today.json")
    if os.path.exists(tpath):
        with open(tpath) as f:
            today = json.load(f)
    out = []
    names = set()
    for c in CASE_LIST:
        assert c["name"] not in names, c["name"]
        names.add(c["name"])
        fname = c["name"] + ".http"
        with open(os.path.join(CASES, fname), "w", encoding="utf-8", newline="") as f:
            f.write(http(c["head"], c["chunks"]))
        rec = {"name": c["name"], "files": [fname] + c["extra_files"], "api": c["api"],
               "path": URL_PATH[c["api"]], "args": c["args"], "dialect": c["dialect"],
               "expect_ok": c["expect_ok"], "expect_layer": c["expect_layer"],
               "expect_kind": c["expect_kind"], "rule": c["rule"]}
        if c["name"] in today:
            rec["today"] = today[c["name"]]
        out.append(rec)
    with open(os.path.join(HERE, "cases.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print("%d cases written to %s" % (len(out), CASES))


if __name__ == "__main__":
    main()
