#!/usr/bin/env python3
"""Builds cases/*.http and cases.json for rule A (empty choice-0 chunk after the finish)
and rule B (--cross-check may only add a failure). Standard library only.

Every stream is shaped like vLLM 0.32's captures (testdata/vllm-0.32.0-cpu: a2, g2, t6, x1-x3):
chunked transfer coding, one SSE event per HTTP chunk, LF inside events, CRLF in the framing,
compact JSON. The LiteLLM closing chunk is {"id",...,"choices":[{"index":0,"delta":{}}],"usage":{...}}.
"""
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = os.path.join(HERE, "cases")

HEAD_SSE = ("HTTP/1.1 200 OK\r\n"
            "date: Tue, 01 Dec 2026 08:00:00 GMT\r\n"
            "server: uvicorn\r\n"
            "content-type: text/event-stream; charset=utf-8\r\n"
            "vary: Origin\r\n"
            "transfer-encoding: chunked\r\n\r\n")

CHAT_ID = "chatcmpl-h34000000000000a"
CMPL_ID = "cmpl-h34000000000000b"
CREATED = 1796112000
FP = "vllm-0.32.0-4c84b9b1"


def dumps(obj):
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def sse(data):
    return "data: " + (data if isinstance(data, str) else dumps(data)) + "\n\n"


def http_stream(events):
    out = [HEAD_SSE]
    for ev in events:
        b = ev.encode("utf-8")
        out.append("%x\r\n" % len(b))
        out.append(ev)
        out.append("\r\n")
    out.append("0\r\n\r\n")
    return "".join(out)


def http_json(obj):
    body = dumps(obj)
    b = body.encode("utf-8")
    return ("HTTP/1.1 200 OK\r\n"
            "date: Tue, 01 Dec 2026 08:00:01 GMT\r\n"
            "server: uvicorn\r\n"
            "content-length: %d\r\n"
            "content-type: application/json\r\n"
            "vary: Origin\r\n\r\n" % len(b)) + body


# ---------------------------------------------------------------- chat chunks
def chunk(choices, **top):
    d = {"id": CHAT_ID, "object": "chat.completion.chunk", "created": CREATED, "model": "tiny",
         "choices": choices}
    d.update(top)
    return sse(d)


def choice(delta, finish=None, ids=None, index=0, **extra):
    c = {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish}
    if finish is not None:
        c["stop_reason"] = None
    c["token_ids"] = ids
    c.update(extra)
    return c


def role():
    return chunk([{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                   "finish_reason": None}], prompt_token_ids=None, prompt_text=None)


def text(t, ids=None):
    return chunk([choice({"content": t}, ids=ids)])


def finish(reason, ids=None, delta=None):
    return chunk([choice({} if delta is None else delta, finish=reason, ids=ids)])


def usage_vllm(n, prompt=9):
    return chunk([], usage={"prompt_tokens": prompt, "total_tokens": prompt + n,
                            "completion_tokens": n}, system_fingerprint=FP)


def usage_litellm(n, prompt=9, delta=None, **choice_extra):
    c = {"index": 0, "delta": {} if delta is None else delta}
    c.update(choice_extra)
    return chunk([c], usage={"prompt_tokens": prompt, "total_tokens": prompt + n,
                             "completion_tokens": n}, system_fingerprint=FP)


def empty(delta=None, index=0, **extra):
    return chunk([choice({} if delta is None else delta, index=index, **extra)])


def open_call(cid, name, ids=None, index=0):
    return chunk([choice({"content": None, "tool_calls": [
        {"id": cid, "type": "function", "index": index, "function": {"name": name}}]}, ids=ids)])


def args(piece, ids=None, index=0):
    return chunk([choice({"content": None, "tool_calls": [
        {"index": index, "function": {"arguments": piece}}]}, ids=ids)])


DONE = sse("[DONE]")


# --------------------------------------------------------- completions chunks
def cchunk(choices, **top):
    d = {"id": CMPL_ID, "object": "text_completion", "created": CREATED, "model": "tiny",
         "choices": choices}
    d.update(top)
    return sse(d)


def ctext(t, finish_reason=None):
    return cchunk([{"index": 0, "text": t, "logprobs": None, "finish_reason": finish_reason,
                    "stop_reason": None, "prompt_token_ids": None, "token_ids": None}])


def cusage_vllm(n, prompt=2):
    return cchunk([], usage={"prompt_tokens": prompt, "total_tokens": prompt + n,
                             "completion_tokens": n}, system_fingerprint=FP)


def cusage_litellm(n, prompt=2):
    return cchunk([{"index": 0, "text": "", "logprobs": None, "finish_reason": None}],
                  usage={"prompt_tokens": prompt, "total_tokens": prompt + n,
                         "completion_tokens": n}, system_fingerprint=FP)


# -------------------------------------------------------------- twin (chat)
def twin(content, finish_reason, ids, tool_calls=None, n=None, reasoning=None):
    n = len(ids) if n is None else n
    msg = {"role": "assistant", "content": content, "refusal": None, "annotations": None,
           "audio": None, "function_call": None, "tool_calls": tool_calls or [],
           "reasoning": reasoning}
    return http_json({
        "id": "chatcmpl-h34000000000twin", "object": "chat.completion", "created": CREATED + 1,
        "model": "tiny",
        "choices": [{"index": 0, "message": msg, "logprobs": None, "finish_reason": finish_reason,
                     "stop_reason": None, "token_ids": ids, "routed_experts": None}],
        "service_tier": None, "system_fingerprint": FP,
        "usage": {"prompt_tokens": 18, "total_tokens": 18 + n, "completion_tokens": n,
                  "prompt_tokens_details": None, "completion_tokens_details": None},
        "prompt_logprobs": None, "prompt_token_ids": None, "prompt_text": None,
        "kv_transfer_params": None, "ec_transfer_params": None, "metrics": None})


def call(name, arguments, cid="chatcmpl-tool-twin0000000001"):
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": arguments}}


def ids_run(start, k):
    return list(range(start, start + k))


CASES_OUT = []

TOOLS = ["--tools", "tools.json"]
CHAT = "chat"
CMPL = "completions"

R_A = ("Rule A (brief; LiteLLM proxy closes with a choices[{index:0,delta:{}}] usage chunk): "
       "after the finish, a chunk for choice 0 that carries nothing must be accepted; ")
R_B = ("Rule B (brief; cross-check.md 'A streamed answer that is already not ok keeps its own "
       "verdict'): --cross-check may only add a failure; ")


def add(name, events, api, args_, ok, layer, kind, rule, twin_text=None, cc=False):
    fn = name + ".http"
    if events is not None:
        with open(os.path.join(CASES, fn), "w", encoding="utf-8", newline="") as f:
            f.write(http_stream(events))
    files = [fn]
    if twin_text is not None:
        tn = name + "_twin.http"
        with open(os.path.join(CASES, tn), "w", encoding="utf-8", newline="") as f:
            f.write(twin_text)
        files.append(tn)
    CASES_OUT.append({"name": name, "api": api, "files": files, "args": args_,
                      "expect_ok": ok, "expect_layer": layer, "expect_kind": kind, "rule": rule})


def pair(name, events, twin_text, args_, ok, layer, kind, rule, ok_cc=None, layer_cc=None,
         kind_cc=None, api=CHAT):
    """A rule-B case: the same stream judged without and with --cross-check."""
    add(name, events, api, args_, ok, layer, kind, rule + " [without --cross-check]",
        twin_text=twin_text)
    CASES_OUT.append({"name": name + "__cc", "api": api, "files": CASES_OUT[-1]["files"],
                      "args": args_ + ["--cross-check"],
                      "expect_ok": ok if ok_cc is None else ok_cc,
                      "expect_layer": layer if ok_cc is None else layer_cc,
                      "expect_kind": kind if ok_cc is None else kind_cc,
                      "rule": rule + " [with --cross-check: the same verdict as without]"
                      if ok_cc is None else rule + " [with --cross-check]"})


def main():
    os.makedirs(CASES, exist_ok=True)
    with open(os.path.join(CASES, "tools.json"), "w") as f:
        json.dump([
            {"type": "function", "function": {"name": "get_time", "description": "The current time",
                                              "parameters": {"type": "object", "properties": {}}}},
            {"type": "function", "function": {
                "name": "get_weather", "description": "The current weather in a city",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                               "required": ["city"]}}}], f, indent=1)
    with open(os.path.join(CASES, "schema_city.json"), "w") as f:
        json.dump({"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}, f, indent=1)

    ok_text = [role(), text("READ"), text("Y")]
    # ================================================================ RULE A
    add("01_chat_litellm_usage_after_stop",
        ok_text + [finish("stop", delta={"content": ""}), usage_litellm(2), DONE], CHAT, [],
        True, None, None,
        R_A + "LiteLLM's own closing shape {choices:[{index:0,delta:{}}],usage} after finish stop, then [DONE]")
    add("02_chat_empty_before_finish",
        [role(), empty(), text("READ"), empty({"content": ""}), text("Y"), empty(),
         finish("stop"), usage_vllm(2), DONE], CHAT, [], True, None, None,
        R_A + "an empty chunk BEFORE the finish is always fine (vLLM sends delta {} and content '' mid-stream: x3, u2)")
    add("03_chat_empty_content_after_finish",
        ok_text + [finish("stop"), empty({"content": ""}), usage_vllm(2), DONE], CHAT, [],
        True, None, None, R_A + "delta {\"content\": \"\"} carries nothing")
    add("04_chat_all_null_after_finish",
        ok_text + [finish("stop"),
                   empty({"content": None, "tool_calls": None, "role": None}),
                   usage_vllm(2), DONE], CHAT, [], True, None, None,
        R_A + "delta {content:null, tool_calls:null, role:null}, logprobs null, finish_reason null, token_ids null carries nothing")
    add("05_chat_several_empty_after_finish",
        ok_text + [finish("stop"), empty(), empty({"content": ""}),
                   empty({"content": None, "tool_calls": None}), usage_litellm(2), DONE],
        CHAT, [], True, None, None, R_A + "several empty chunks after the finish, then the LiteLLM usage chunk")
    add("06_chat_empty_reasoning_after_finish",
        ok_text + [finish("stop"), empty({"reasoning": "", "content": ""}), usage_vllm(2), DONE],
        CHAT, [], True, None, None,
        R_A + "delta.reasoning '' is no reasoning text: only empty values")
    add("07_chat_empty_tool_calls_list_after_finish",
        ok_text + [finish("stop"), empty({"content": None, "tool_calls": []}), usage_vllm(2), DONE],
        CHAT, [], True, None, None,
        R_A + "judgement: tool_calls [] is an empty value (no call, no piece), so it carries nothing")
    add("08_chat_content_after_finish",
        ok_text + [finish("stop"), empty({"content": "!"}), usage_vllm(2), DONE], CHAT, [],
        False, "protocol", "event_after_close", R_A + "content text after the finish stays refused")
    add("09_chat_whitespace_after_finish",
        ok_text + [finish("stop"), empty({"content": " "}), usage_litellm(2), DONE], CHAT, [],
        False, "protocol", "event_after_close",
        R_A + "a space is content text (it changes the answer), not an empty value: refused")
    add("10_chat_reasoning_after_finish",
        ok_text + [finish("stop"), empty({"reasoning": "hmm"}), usage_vllm(2), DONE], CHAT, [],
        False, "protocol", "event_after_close", R_A + "reasoning text (delta.reasoning) after finish: refused")
    add("11_chat_reasoning_content_after_finish",
        ok_text + [finish("stop"), empty({"reasoning_content": "hmm"}), usage_vllm(2), DONE],
        CHAT, [], False, "protocol", "event_after_close",
        R_A + "reasoning text (delta.reasoning_content, the older vLLM name) after finish: refused")
    call_ok = [role(), open_call("chatcmpl-tool-h34a0000000001", "get_weather"),
               args('{"city": '), args('"Paris"}')]
    add("12_chat_new_call_after_finish",
        call_ok + [finish("tool_calls"), open_call("chatcmpl-tool-h34a0000000002", "get_time", index=1),
                   args("{}", index=1), usage_vllm(12), DONE], CHAT, TOOLS,
        False, "protocol", "event_after_close", R_A + "a new tool call after finish tool_calls: refused")
    add("13_chat_args_after_finish",
        call_ok + [finish("tool_calls"), args(" "), usage_vllm(12), DONE], CHAT, TOOLS,
        False, "protocol", "event_after_close",
        R_A + "an argument piece after finish tool_calls is a tool-call delta: refused")
    add("14_chat_litellm_usage_repeats_stop",
        ok_text + [finish("stop"), usage_litellm(2, finish_reason="stop"), DONE], CHAT, [],
        False, "protocol", None,
        R_A + "a second finish_reason (the same value, inside the usage chunk) carries something: refused")
    add("15_chat_second_finish_length",
        ok_text + [finish("stop"), finish("length"), usage_vllm(2), DONE], CHAT, [],
        False, "protocol", None, R_A + "a second, different finish_reason: refused")
    add("16_chat_role_reannounced_after_finish",
        ok_text + [finish("stop"), empty({"role": "assistant", "content": ""}), usage_vllm(2), DONE],
        CHAT, [], False, "protocol", None, R_A + "role 'assistant' re-announced after the finish: refused")
    add("17_chat_litellm_usage_with_text",
        ok_text + [finish("stop"), usage_litellm(2, delta={"content": " READY"}), DONE], CHAT, [],
        False, "protocol", "event_after_close",
        R_A + "the LiteLLM usage chunk itself carrying content text: refused")
    add("18_chat_empty_after_done",
        ok_text + [finish("stop"), usage_vllm(2), DONE, usage_litellm(2)], CHAT, [],
        False, "protocol", "event_after_terminal", R_A + "nothing after [DONE], an empty chunk included")
    add("19_chat_empty_index1_after_finish",
        ok_text + [finish("stop"), empty(index=1), usage_vllm(2), DONE], CHAT, [],
        False, "protocol", "choice_index", R_A + "an empty chunk for index 1 (n=1): refused")
    add("20_chat_litellm_length",
        ok_text + [finish("length"), usage_litellm(2), DONE], CHAT, ["--max-tokens", "2"],
        False, "application", "budget_exhausted",
        R_A + "the LiteLLM shape after finish length is accepted by the grammar; the budget still fails the answer")
    add("21_chat_litellm_tool_call",
        call_ok + [finish("tool_calls"), usage_litellm(12), DONE], CHAT, TOOLS,
        True, None, None, R_A + "LiteLLM shape on a valid tool-call answer: ok")
    add("22_cmpl_litellm_usage_after_stop",
        [ctext("READ"), ctext("Y"), ctext("", "stop"), cusage_litellm(2), DONE], CMPL, [],
        True, None, None,
        R_A + "completions: an empty choice 0 (text '') with usage after the finish (LiteLLM on /v1/completions)")
    add("23_cmpl_text_after_finish",
        [ctext("READ"), ctext("Y", "stop"), ctext("!"), cusage_vllm(2), DONE], CMPL, [],
        False, "protocol", "event_after_close", R_A + "completions: choices[0].text after finish: refused")
    add("24_cmpl_litellm_length",
        [ctext("READ"), ctext("Y", "length"), cusage_litellm(2), DONE], CMPL, ["--max-tokens", "2"],
        False, "application", "budget_exhausted",
        R_A + "completions: LiteLLM shape after a length finish: still the budget")
    add("25_chat_litellm_usage_no_done",
        ok_text + [finish("stop"), usage_litellm(2)], CHAT, [],
        False, "application", "eof_before_done",
        R_A + "the empty usage chunk is not the end: without [DONE] the stream is unfinished")

    add("26_chat_token_ids_after_finish",
        ok_text + [finish("stop"), empty(token_ids=[7]), usage_vllm(3), DONE], CHAT, [],
        False, "protocol", None,
        R_A + "token ids after the finish are generated tokens: something carried (limits.md lists token ids)")
    add("27_chat_empty_token_ids_list_after_finish",
        ok_text + [finish("stop"), empty(token_ids=[]), usage_vllm(2), DONE], CHAT, [],
        True, None, None, R_A + "judgement: token_ids [] is an empty value, it carries nothing")
    add("28_chat_logprobs_after_finish",
        ok_text + [finish("stop"),
                   empty(logprobs={"content": [{"token": "!", "logprob": -0.5, "bytes": [33],
                                                "top_logprobs": []}]}), usage_vllm(2), DONE],
        CHAT, [], False, "protocol", None,
        R_A + "judgement: a logprob entry names a token; only null/empty values count as nothing")
    add("29_chat_litellm_tool_call_cut_by_length",
        [role(), open_call("chatcmpl-tool-h34a0000000003", "get_weather"), args('{"city": "Pa'),
         finish("length"), usage_litellm(8), DONE], CHAT, TOOLS + ["--max-tokens", "8"],
        False, "application", "budget_exhausted",
        R_A + "LiteLLM shape after a tool call cut by length: the grammar accepts the close, the budget fails it "
              "(tools.md: 'finish_reason: length inside a call stays output budget exhausted')")

    add("50_chat_refusal_after_finish",
        ok_text + [finish("stop"), empty({"content": None, "refusal": "I cannot help with that."}),
                   usage_vllm(2), DONE], CHAT, [], False, "protocol", None,
        R_A + "judgement: OpenAI's delta.refusal is answer text; a refusal string after the finish carries something")
    add("51_chat_refusal_null_after_finish",
        ok_text + [finish("stop"), empty({"content": None, "refusal": None, "function_call": None}),
                   usage_litellm(2), DONE], CHAT, [], True, None, None,
        R_A + "refusal null and function_call null are null values: nothing carried")

    # ================================================================ RULE B
    W, M = "get_weather", "tools.json"
    # B1: budget_used_by_tool_call, twin agrees (tool_calls, same ids)
    ids = [ids_run(100 + 4 * i, 4) for i in range(6)]
    allids = sum(ids, [])
    ev = [role(), chunk([choice({}, ids=ids[0])]),
          open_call("chatcmpl-tool-h34b0000000001", W, ids=ids[1]),
          args('{"city": ', ids=ids[2]), args('"Paris"}', ids=ids[3]),
          chunk([choice({}, ids=ids[4])]), finish("tool_calls", ids=ids[5]), usage_vllm(24, 18), DONE]
    pair("30_cc_budget_used_twin_agrees", ev,
         twin("", "tool_calls", allids, [call(W, '{"city": "Paris"}')]),
         TOOLS + ["--tool-choice", "required", "--max-tokens", "24"],
         False, "application", "budget_used_by_tool_call",
         R_B + "cross-check.md: budget_used_by_tool_call is a signal of the stream alone; "
               "the brief: it must stand even when the twin agrees exactly (the doc's 'a comparable twin that "
               "finished by itself clears the signal' is the rule being changed)")
    # B2: same, twin says stop (the doc's other clearing finish)
    pair("31_cc_budget_used_twin_stop", ev,
         twin("", "stop", allids, [call(W, '{"city": "Paris"}')]),
         TOOLS + ["--tool-choice", "required", "--max-tokens", "24"],
         False, "application", "budget_used_by_tool_call",
         R_B + "a comparable twin that finished with 'stop' may not clear budget_used_by_tool_call; "
               "the stream's verdict is the first failure, at application")
    # B3: the real capture pair x3 (EOS on the last budget token)
    pair("32_cc_x3_capture_pair", None, None,
         TOOLS + ["--tool-choice", "required", "--max-tokens", "40", "--temperature", "1",
                  "--extra", '{"seed": 22}'],
         False, "application", "budget_used_by_tool_call",
         R_B + "real capture x3 (vLLM 0.32, 40 of 40 tokens, tool_calls, twin equal ids, tool_calls): "
               "the whole-budget signal stands with the twin")
    # B4: tool markup in text, twin agrees
    ids = [ids_run(200 + 4 * i, 4) for i in range(4)]
    allids = sum(ids, [])
    mk = ["<tool_call>\n", '{"name": "get_weather", ', '"arguments": {"city": "Paris"}}', "\n</tool_call>"]
    ev = [role()] + [chunk([choice({"content": mk[i]}, ids=ids[i])]) for i in range(3)] + \
         [chunk([choice({"content": mk[3]}, finish="stop", ids=ids[3])]), usage_vllm(16, 18), DONE]
    pair("33_cc_markup_in_text_twin_agrees", ev, twin("".join(mk), "stop", allids),
         TOOLS + ["--max-tokens", "64"], False, "application", "tool_markup_in_text",
         R_B + "cross-check.md: tool_markup_in_text is a signal of the stream alone, 'with or without --cross-check'")
    # B5: length text, twin agrees
    ids = [ids_run(300 + 4 * i, 4) for i in range(2)]
    ev = [role(), text("READ", ids[0]), chunk([choice({"content": "Y R"}, finish="length", ids=ids[1])]),
          usage_vllm(8, 18), DONE]
    pair("34_cc_length_twin_agrees", ev, twin("READY R", "length", sum(ids, [])),
         ["--max-tokens", "8"], False, "application", "budget_exhausted",
         R_B + "README: finish length is not ok (budget); a twin that also says length changes nothing")
    # B6: args not JSON, twin agrees
    def call_stream(arg_pieces, name=W, fin="tool_calls", n_extra=0, base=400):
        k = len(arg_pieces) + 2
        ids_ = [ids_run(base + 4 * i, 4) for i in range(k)]
        ev_ = [role(), open_call("chatcmpl-tool-h34b0000000009", name, ids=ids_[0])]
        ev_ += [args(p, ids=ids_[i + 1]) for i, p in enumerate(arg_pieces)]
        ev_ += [finish(fin, ids=ids_[-1]), usage_vllm(4 * k, 18), DONE]
        return ev_, sum(ids_, [])
    ev, allids = call_stream(['{"city": ', '"Par'])
    pair("35_cc_args_not_json_twin_agrees", ev, twin("", "tool_calls", allids, [call(W, '{"city": "Par')]),
         TOOLS + ["--tool-choice", "required", "--max-tokens", "64"], False, "application",
         "tool_arguments_not_json", R_B + "tools.md: arguments that are not strict JSON fail; the agreeing twin cannot clear it")
    # B7: args schema, twin agrees
    ev, allids = call_stream(['{', '}'], base=500)
    pair("36_cc_args_schema_twin_agrees", ev, twin("", "tool_calls", allids, [call(W, "{}")]),
         TOOLS + ["--tool-choice", "required", "--max-tokens", "64"], False, "application",
         "tool_arguments_schema", R_B + "tools.md: arguments not matching parameters (required city missing) fail")
    # B8: args not object, twin agrees (vLLM 0.32 '[]' under required, t7)
    ev, allids = call_stream(['[', ']'], base=550)
    pair("37_cc_args_array_twin_agrees", ev, twin("", "tool_calls", allids, [call(W, "[]")]),
         TOOLS + ["--tool-choice", "required", "--max-tokens", "64"], False, "application",
         "tool_arguments_not_object", R_B + "tools.md: '[]' as arguments is not an object")
    # B9: text under required, twin agrees
    ids = [ids_run(600 + 4 * i, 4) for i in range(2)]
    ev = [role(), text("READ", ids[0]), chunk([choice({"content": "Y"}, finish="stop", ids=ids[1])]),
          usage_vllm(8, 18), DONE]
    pair("38_cc_text_under_required_twin_agrees", ev, twin("READY", "stop", sum(ids, [])),
         TOOLS + ["--tool-choice", "required", "--max-tokens", "64"], False, "application",
         "text_not_tool_call", R_B + "failures.md text_not_tool_call: required a call, got text")
    # B10: unknown tool, twin agrees
    ev, allids = call_stream(['{"symbol": ', '"ACME"}'], name="get_stock", base=700)
    pair("39_cc_unknown_tool_twin_agrees", ev,
         twin("", "tool_calls", allids, [call("get_stock", '{"symbol": "ACME"}')]),
         TOOLS + ["--max-tokens", "64"], False, "application", "unknown_tool",
         R_B + "tools.md: every call names a tool that was offered")
    # B11: no visible text, twin agrees
    ids = [ids_run(800, 4), [2]]
    ev = [role(), chunk([choice({}, ids=ids[0])]),
          chunk([choice({"content": ""}, finish="stop", ids=ids[1])]), usage_vllm(5, 18), DONE]
    pair("40_cc_no_visible_text_twin_agrees", ev, twin("", "stop", sum(ids, [])),
         ["--max-tokens", "64"], False, "application", "no_visible_text",
         R_B + "apis.md: a finished text answer has visible text")
    # B12: JSON answer against schema, twin agrees
    ids = [ids_run(900 + 4 * i, 4) for i in range(2)]
    ev = [role(), text('{"city": ', ids[0]), chunk([choice({"content": "3}"}, finish="stop", ids=ids[1])]),
          usage_vllm(8, 18), DONE]
    pair("41_cc_answer_schema_twin_agrees", ev, twin('{"city": 3}', "stop", sum(ids, [])),
         ["--json-schema", "schema_city.json", "--max-tokens", "64"], False, "application", "answer_schema",
         R_B + "tools.md: a JSON answer must match the schema ($.city: expected string)")
    # B13: no [DONE], twin complete
    ids = [ids_run(1000 + 4 * i, 4) for i in range(2)]
    ev = [role(), text("READ", ids[0]), chunk([choice({"content": "Y"}, finish="stop", ids=ids[1])]),
          usage_vllm(8, 18)]
    pair("42_cc_eof_before_done_twin_complete", ev, twin("READY", "stop", sum(ids, [])),
         ["--max-tokens", "64"], False, "application", "eof_before_done",
         R_B + "README: no [DONE] is eof_before_done; a complete twin does not finish the stream")
    # B14: stream cut args, twin has the whole call with the same ids (twin 'repairs' it)
    ev, allids = call_stream(['{"city": ', '"Par'], base=1100)
    pair("43_cc_args_cut_twin_repairs", ev, twin("", "tool_calls", allids, [call(W, '{"city": "Paris"}')]),
         TOOLS + ["--tool-choice", "required", "--max-tokens", "64"], False, "application",
         "tool_arguments_not_json",
         R_B + "cross-check.md: 'A streamed answer that is already not ok keeps its own verdict'; a twin "
               "with a usable call may not turn it ok (nor move it to layer cross-check)")
    # B15: budget + LiteLLM closing chunk (rule A and rule B together)
    ids = [ids_run(1200 + 4 * i, 4) for i in range(4)]
    ev = [role(), open_call("chatcmpl-tool-h34b0000000015", W, ids=ids[0]),
          args('{"city": ', ids=ids[1]), args('"Paris"}', ids=ids[2]),
          finish("tool_calls", ids=ids[3]), usage_litellm(16, 18), DONE]
    pair("44_cc_budget_used_litellm_close", ev,
         twin("", "tool_calls", sum(ids, []), [call(W, '{"city": "Paris"}')]),
         TOOLS + ["--tool-choice", "required", "--max-tokens", "16"], False, "application",
         "budget_used_by_tool_call",
         R_B + "rule A makes the LiteLLM closing chunk acceptable; its usage (16 of 16) still names the "
               "whole-budget tool-call signal, and the agreeing twin may not clear it")
    # B16: honest pair, ok (control)
    ev, allids = call_stream(['{"city": ', '"Paris"}'], base=1300)
    pair("45_cc_honest_pair", ev, twin("", "tool_calls", allids, [call(W, '{"city": "Paris"}')]),
         TOOLS + ["--tool-choice", "required", "--max-tokens", "64"], True, None, None,
         R_B + "control: an ok stream and an agreeing twin stay ok")
    # B17: ok alone, twin differs with the same ids: cross-check adds a failure
    ev, allids = call_stream(['{"city": ', '"Paris"}'], base=1400)
    pair("46_cc_twin_differs_adds_failure", ev,
         twin("", "tool_calls", allids, [call(W, '{"city": "Paris", "unit": "celsius"}')]),
         TOOLS + ["--tool-choice", "required", "--max-tokens", "64"], True, None, None,
         R_B + "cross-check.md: the same ids and another call is a failure at cross-check (the one thing the twin may do: add)",
         ok_cc=False, layer_cc="cross-check", kind_cc="cross_check_differs")

    # B18: protocol failure in the stream, twin agrees on the tokens
    ids = [ids_run(1500 + 4 * i, 4) for i in range(3)]
    ev = [role(), text("READ", ids[0]), chunk([choice({"content": "Y"}, finish="stop", ids=ids[1])]),
          text("!", ids[2]), usage_vllm(12, 18), DONE]
    pair("47_cc_content_after_finish_twin_agrees", ev, twin("READY!", "stop", sum(ids, [])),
         ["--max-tokens", "64"], False, "protocol", "event_after_close",
         R_B + "a protocol failure of the stream is its verdict; the twin (same tokens, 'READY!') may not replace it")
    # B19: in-band engine error after the 200, twin fine
    ids = [ids_run(1600, 4)]
    ev = [role(), text("READ", ids[0]),
          sse('{"error": {"message": "EngineCore encountered an issue. See stack trace (above) for the root cause.", '
              '"type": "InternalServerError", "param": null, "code": 500}}'), DONE]
    pair("48_cc_engine_error_twin_complete", ev, twin("READY", "stop", ids_run(1600, 5)),
         ["--max-tokens", "64"], False, "application", "server_error_event",
         R_B + "README/z1: an error event in the stream is not ok; a twin that finished does not undo it")
    # B20: honest pair closed with the LiteLLM usage chunk (rule A + B, control)
    ids = [ids_run(1700 + 4 * i, 4) for i in range(2)]
    ev = [role(), text("READ", ids[0]), chunk([choice({"content": "Y"}, finish="stop", ids=ids[1])]),
          usage_litellm(8, 18), DONE]
    pair("49_cc_litellm_close_honest", ev, twin("READY", "stop", sum(ids, [])),
         ["--max-tokens", "64"], True, None, None,
         R_B + "control for rule A with the twin: the empty LiteLLM entry adds no tokens and no difference")

    # B21: completions, length, twin agrees
    def cchunk_ids(t, ids_, fin=None):
        return cchunk([{"index": 0, "text": t, "logprobs": None, "finish_reason": fin, "stop_reason": None,
                        "prompt_token_ids": None, "token_ids": ids_}])
    ids = [ids_run(1800 + 4 * i, 4) for i in range(2)]
    ev = [cchunk_ids("READ", ids[0]), cchunk_ids("Y R", ids[1], "length"), cusage_vllm(8), DONE]
    ctwin = http_json({"id": "cmpl-h34twin", "object": "text_completion", "created": CREATED + 1, "model": "tiny",
                       "choices": [{"index": 0, "text": "READY R", "logprobs": None, "finish_reason": "length",
                                    "stop_reason": None, "token_ids": sum(ids, []), "prompt_logprobs": None,
                                    "prompt_token_ids": None}],
                       "service_tier": None, "system_fingerprint": FP,
                       "usage": {"prompt_tokens": 2, "total_tokens": 10, "completion_tokens": 8,
                                 "prompt_tokens_details": None}, "kv_transfer_params": None})
    pair("52_cc_cmpl_length_twin_agrees", ev, ctwin, ["--max-tokens", "8"], False, "application",
         "budget_exhausted", R_B + "completions: a length finish stays not ok with an agreeing twin", api=CMPL)

    # x3 capture copy
    src = os.path.join(HERE, "..", "vllm-0.32.0-cpu", "x3_chat_pair_eos_on_last_budget_token_")
    for e in CASES_OUT:
        if e["name"].startswith("32_cc_x3"):
            e["files"] = ["32_cc_x3_capture_pair.http", "32_cc_x3_capture_pair_twin.http"]
    for suffix, dst in (("stream.http", "32_cc_x3_capture_pair.http"),
                        ("unstreamed.http", "32_cc_x3_capture_pair_twin.http")):
        with open(src + suffix, "rb") as f, open(os.path.join(CASES, dst), "wb") as g:
            g.write(f.read())

    with open(os.path.join(HERE, "cases.json"), "w", encoding="utf-8") as f:
        json.dump(CASES_OUT, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(len(CASES_OUT), "entries")


if __name__ == "__main__":
    main()
