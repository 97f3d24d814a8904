#!/usr/bin/env python3
"""Write cases.json: the hostile-44 cases (sessions, traces, gates, comparisons, shards, dialects).

Each case says what the docs promise (`doc`, with the page) and how it is checked (`expect`).
Run: python3 make_cases.py && python3 run_cases.py
"""
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = []

TOOL = {"type": "function", "function": {"name": "get_weather", "description": "Get the weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
TOOLS_JSON = json.dumps([TOOL])


def case(id, area, doc, args, expect, **kw):
    c = {"id": id, "area": area, "doc": doc, "args": args, "expect": expect}
    c.update(kw)
    CASES.append(c)


def jl(*objs):
    return "".join(json.dumps(o) + "\n" for o in objs)


# ---- chat stream builders ------------------------------------------------------------------

def chunk(delta, finish=None, fp=None, id="c1", usage=None, extra=None):
    c = {"id": id, "object": "chat.completion.chunk", "created": 1, "model": "m",
         "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}
    if fp is not None:
        c["system_fingerprint"] = fp
    if usage is not None:
        c["usage"] = usage
    if extra:
        c.update(extra)
    return c


def chat_text(text="READY", finish="stop", headers=(), fp=None, done=True, usage=True, pieces=None, **kw):
    ev = [chunk({"role": "assistant", "content": ""}, fp=fp)]
    for p in (pieces or [text]):
        ev.append(chunk({"content": p}, fp=fp))
    ev.append(chunk({}, finish=finish, fp=fp))
    if usage:
        ev.append({"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": [],
                   "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}})
    if done:
        ev.append("[DONE]")
    r = {"headers": list(headers), "events": ev}
    r.update(kw)
    return r


def chat_call(args_pieces=('{"city": ', '"Paris"}'), name="get_weather", call_id="call_1", finish="tool_calls",
              headers=(), fp=None, done=True, tgi=False, second_call=False, text_beside=None, **kw):
    """A chat tool-call answer; tgi=True writes it as TGI 3.x does (id "0", no finish, [DONE])."""
    ev = []
    first = True
    for p in args_pieces:
        tc = {"index": 0, "function": {"arguments": p}}
        if first:
            tc.update({"id": "0" if tgi else call_id, "type": "function"})
            tc["function"]["name"] = name
            first = False
        elif tgi:
            tc.update({"id": "0", "type": "function"})
            tc["function"]["name"] = None
        d = {"role": "assistant", "tool_calls": [tc]}
        ev.append(chunk(d, fp=fp, id="" if tgi else "c1", extra={"usage": None} if tgi else None))
    if second_call:
        ev.append(chunk({"tool_calls": [{"index": 1, "id": "1" if tgi else "call_2", "type": "function",
                                         "function": {"name": name, "arguments": '{"city": "Rome"}'}}]},
                        fp=fp, id="" if tgi else "c1"))
    if text_beside:
        ev.append(chunk({"content": text_beside}, fp=fp, id="" if tgi else "c1"))
    if finish is not None:
        ev.append(chunk({}, finish=finish, fp=fp))
    if done:
        ev.append("[DONE]")
    r = {"headers": list(headers), "events": ev}
    r.update(kw)
    return r


TGI_H = ["x-compute-type: gpu+optimized", "x-compute-characters: 27"]
TGI_FP = "3.1.2-dev0-native"

# ---- Responses (llama.cpp / LiteLLM) and Messages builders -----------------------------------------

def resp_llama(text="Paris", out_tokens=3, status="completed", usage=True, headers=("Server: llama.cpp",)):
    rid, mid = "resp_1", "msg_1"
    resp = {"id": rid, "object": "response", "status": "in_progress"}
    item_open = {"content": [], "id": mid, "role": "assistant", "status": "in_progress", "type": "message"}
    item_done = {"content": [{"type": "output_text", "annotations": [], "text": text}], "id": mid,
                 "role": "assistant", "status": "completed", "type": "message"}
    final = {"id": rid, "object": "response", "status": status, "output": [item_done]}
    if usage:
        final["usage"] = {"input_tokens": 5, "output_tokens": out_tokens, "total_tokens": 5 + out_tokens}
    ev = [("response.created", {"response": resp}), ("response.in_progress", {"response": resp}),
          ("response.output_item.added", {"item": item_open}),
          ("response.content_part.added", {"item_id": mid, "part": {"type": "output_text", "text": ""}}),
          ("response.output_text.delta", {"item_id": mid, "delta": text}),
          ("response.output_text.done", {"item_id": mid, "text": text}),
          ("response.content_part.done", {"item_id": mid, "part": {"type": "output_text", "text": text}}),
          ("response.output_item.done", {"item": item_done}),
          ("response.completed", {"response": final})]
    events = []
    for t, d in ev:
        data = {"type": t}
        data.update(d)
        events.append({"event": t, "data": data})
    return {"headers": list(headers), "events": events}


def resp_vendor(text="Paris", headers=(), event_lines=True, done_after=False, extra_after=None):
    """An OpenAI-shaped Responses stream with sequence numbers, output_index and content_index."""
    rid, mid = "resp_1", "msg_1"
    resp = {"id": rid, "object": "response", "status": "in_progress", "output": []}
    item_open = {"id": mid, "type": "message", "role": "assistant", "status": "in_progress", "content": []}
    part = {"type": "output_text", "text": text, "annotations": []}
    item_done = {"id": mid, "type": "message", "role": "assistant", "status": "completed", "content": [part]}
    final = {"id": rid, "object": "response", "status": "completed", "output": [item_done],
             "usage": {"input_tokens": 5, "output_tokens": 3, "total_tokens": 8}}
    ev = [("response.created", {"response": resp}), ("response.in_progress", {"response": resp}),
          ("response.output_item.added", {"output_index": 0, "item": item_open}),
          ("response.content_part.added", {"item_id": mid, "output_index": 0, "content_index": 0,
                                           "part": {"type": "output_text", "text": "", "annotations": []}}),
          ("response.output_text.delta", {"item_id": mid, "output_index": 0, "content_index": 0, "delta": text}),
          ("response.output_text.done", {"item_id": mid, "output_index": 0, "content_index": 0, "text": text}),
          ("response.content_part.done", {"item_id": mid, "output_index": 0, "content_index": 0, "part": part}),
          ("response.output_item.done", {"output_index": 0, "item": item_done}),
          ("response.completed", {"response": final})]
    events = []
    for i, (t, d) in enumerate(ev):
        data = {"type": t, "sequence_number": i}
        data.update(d)
        events.append({"event": t if event_lines is True else (event_lines or None), "data": data})
    if done_after:
        events.append("[DONE]")
    for e in (extra_after or []):
        events.append(e)
    return {"headers": list(headers), "events": events}


def msg_events(blocks_events, stop_reason="end_turn", headers=(), usage_out=10):
    ev = [{"event": "message_start", "data": {"type": "message_start", "message": {
        "id": "msg_1", "type": "message", "role": "assistant", "content": [], "model": "m",
        "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 5, "output_tokens": 0}}}}]
    for t, d in blocks_events:
        data = {"type": t}
        data.update(d)
        ev.append({"event": t, "data": data})
    if stop_reason is not False:
        ev.append({"event": "message_delta", "data": {"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": None}, "usage": {"output_tokens": usage_out}}})
        ev.append({"event": "message_stop", "data": {"type": "message_stop"}})
    return {"headers": list(headers), "events": ev}


def msg_text(text="Paris", **kw):
    return msg_events([("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}),
                       ("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": text}}),
                       ("content_block_stop", {"index": 0})], **kw)


def msg_tool_use(args='{"city": "Paris"}', tid="toolu_1", **kw):
    return msg_events([("content_block_start", {"index": 0, "content_block": {"type": "tool_use", "id": tid, "name": "get_weather", "input": {}}}),
                       ("content_block_delta", {"index": 0, "delta": {"type": "input_json_delta", "partial_json": args}}),
                       ("content_block_stop", {"index": 0})], stop_reason="tool_use", **kw)


def llama_msg_thinking_text(text="Paris", stop_reason="end_turn", close_before_delta=True):
    """llama-server's Messages: the text block starts while the thinking block is open; both stop at the end."""
    evs = [("content_block_start", {"index": 0, "content_block": {"type": "thinking", "thinking": ""}}),
           ("content_block_delta", {"index": 0, "delta": {"type": "thinking_delta", "thinking": "Hmm."}}),
           ("content_block_start", {"index": 1, "content_block": {"type": "text", "text": ""}}),
           ("content_block_delta", {"index": 1, "delta": {"type": "text_delta", "text": text}}),
           ("content_block_delta", {"index": 0, "delta": {"type": "signature_delta", "signature": ""}})]
    if close_before_delta:
        evs += [("content_block_stop", {"index": 0}), ("content_block_stop", {"index": 1})]
    else:
        evs += [("content_block_stop", {"index": 0})]
    return msg_events(evs, stop_reason=stop_reason, headers=("Server: llama.cpp",))


def chat_url(srv="{ORIGIN}"):
    return srv + "/v1/chat/completions"


NO_TB = {"rc": 2, "one_line_error": True}
SES_TOOLS = {"id": "w", "turns": ["Weather in Paris?"], "tools": [TOOL], "tool_results": {"get_weather": [{"temp": 20}]}}


# =========================================================================================
# Sessions (docs/workloads.md "Sessions", docs/cli.md flag table)
# =========================================================================================
W = "docs/workloads.md#sessions---sessions-file: "
SURL = ["--url", "{ORIGIN}/v1/chat/completions", "--model", "m", "--quiet"]
BAD_FILE = dict(NO_TB, absent=["o.jsonl"], asserts=["len(reqs) == 0"])


def bad_session(id, content, why, fname="s.jsonl"):
    case(id, "sessions", W + "a malformed file (" + why + ") gets one line naming the file, line and field, exit 2, no evidence file, nothing sent",
         SURL + ["--sessions", fname, "--output", "o.jsonl"], BAD_FILE, files={fname: content}, server={"responses": [chat_text()]})


bad_session("S01-misspelt-key", jl({"id": "a", "turn": ["hi"]}), "a misspelt key 'turn': any other key is refused")
bad_session("S02-duplicate-id", jl({"id": "a", "turns": ["hi"]}, {"id": "a", "turns": ["ho"]}), "two sessions of id 'a'")
bad_session("S03-empty-turns", jl({"id": "a", "turns": []}), "turns must be a non-empty list")
bad_session("S04-empty-turn-string", jl({"id": "a", "turns": ["hi", ""]}), "turns must be non-empty strings")
bad_session("S05-tools-without-results", jl({"id": "a", "turns": ["hi"], "tools": [TOOL]}), "every tool offered needs a tool_results entry")
bad_session("S06-result-for-unoffered-tool", jl({"id": "a", "turns": ["hi"], "tools": [TOOL], "tool_results": {"get_weather": ["x"], "get_time": ["y"]}}), "every tool_results name must be a tool offered")
bad_session("S07-max-tool-rounds-65", jl({"id": "a", "turns": ["hi"], "max_tool_rounds": 65}), "max_tool_rounds is 0 to 64")
bad_session("S08-sharegpt-dup-generated-id", json.dumps([
    {"id": "sharegpt-2", "conversations": [{"from": "human", "value": "a"}]},
    {"conversations": [{"from": "human", "value": "b"}]}]), "ShareGPT: an id given as another item's sharegpt-N is a duplicate", fname="s.json")
bad_session("S09-second-line-not-json", jl({"id": "a", "turns": ["hi"]}) + "{not json\n", "line 2 is not JSON: the whole file is read before anything is sent")
bad_session("S10-empty-id", jl({"id": "", "turns": ["hi"]}), "id must be a non-empty string")
bad_session("S11-sharegpt-no-human-turn", json.dumps([{"id": "x", "conversations": [{"from": "gpt", "value": "only the model"}]}]),
            "ShareGPT item with no human/user entry has no user turn (turns must be non-empty)", fname="s.json")

case("S12-sharegpt-model-entries-left-out", "sessions",
     W + "ShareGPT: human entries are the turns, system the system message, gpt entries left out (the live model answers instead); item without id is sharegpt-1",
     SURL + ["--sessions", "s.json", "--output", "o.jsonl"],
     {"rc": 0, "asserts": [
         "len(reqs) == 2", "len(R('o.jsonl')) == 2",
         "all(r['session'] == 'sharegpt-1' for r in R('o.jsonl'))",
         "'FILE-ANSWER' not in reqs[1]['raw']",
         "[m['role'] for m in reqs[1]['body']['messages']] == ['system', 'user', 'assistant', 'user']",
         "reqs[1]['body']['messages'][0]['content'] == 'Be brief.'",
         "reqs[1]['body']['messages'][2]['content'] == 'LIVE1'"]},
     files={"s.json": json.dumps([{"conversations": [
         {"from": "system", "value": "Be brief."}, {"from": "human", "value": "Q1"},
         {"from": "gpt", "value": "FILE-ANSWER"}, {"from": "human", "value": "Q2"}]}])},
     server={"responses": [chat_text("LIVE1"), chat_text("LIVE2")]})

for flag, val, why in [("--prompt", "hi", "no"), ("--warmup", "1", "not yet"), ("--output-tokens", "5", "not yet"),
                       ("--duration", "5", "not yet"), ("--shard", "0/2", "not yet"), ("--cross-check", None, "not yet")]:
    case("S13-refuses" + flag, "sessions",
         "docs/cli.md#flags-and-workloads: %s with --sessions is '%s': refused, exit 2, one line naming it and the workload, before anything is sent or any file created" % (flag, why),
         SURL + ["--sessions", "s.jsonl", "--output", "o.jsonl", flag] + ([val] if val else []),
         dict(NO_TB, absent=["o.jsonl"], stderr_contains=[flag], asserts=["len(reqs) == 0"]),
         files={"s.jsonl": jl({"id": "a", "turns": ["hi"]})}, server={"responses": [chat_text()]})

case("S14-completions-refused", "sessions", W + "Completions has no tools and no turns: --sessions refuses it (exit 2, nothing sent)",
     ["--url", "{ORIGIN}/v1/completions", "--model", "m", "--quiet", "--sessions", "s.jsonl", "--output", "o.jsonl"],
     BAD_FILE, files={"s.jsonl": jl({"id": "a", "turns": ["hi"]})}, server={"responses": [chat_text()]})

case("S15-cut-run-ends-session", "sessions",
     W + "a run not ok ends its session: its record carries session_end (ended_by = its error_kind eof_before_done, the later turn not started); exit 1; one record per request",
     SURL + ["--sessions", "s.jsonl", "--output", "o.jsonl"],
     {"rc": 1, "asserts": ["len(reqs) == 1", "len(R('o.jsonl')) == 1",
                           "R('o.jsonl')[0]['error_kind'] == 'eof_before_done'",
                           "R('o.jsonl')[0]['session_end']['ended_by'] == 'eof_before_done'",
                           "R('o.jsonl')[0]['session_end']['ok'] is False",
                           "R('o.jsonl')[0]['session_end']['turns_run'] == 1",
                           "out['sessions']['not_ok'] == 1 and out['sessions']['turns_not_started'] == 1"]},
     files={"s.jsonl": jl({"id": "a", "turns": ["one", "two"]})}, server={"responses": [chat_text(done=False)]})

case("S16-max-tool-rounds-0", "sessions",
     W + "max_tool_rounds 0: an answer that still calls tools ends the session (ended_by max_tool_rounds): the run is ok, the session not; exit 1 (every session ok is the rule); the call is not executed (no second request)",
     SURL + ["--sessions", "s.jsonl", "--output", "o.jsonl"],
     {"rc": 1, "asserts": ["len(reqs) == 1", "R('o.jsonl')[0]['ok'] is True",
                           "R('o.jsonl')[0]['session_end']['ended_by'] == 'max_tool_rounds'",
                           "R('o.jsonl')[0]['session_end']['ok'] is False",
                           "out['ok_ratio'] == 1.0 and out['sessions']['ok'] == 0"]},
     files={"s.jsonl": jl(dict(SES_TOOLS, max_tool_rounds=0))}, server={"responses": [chat_call()]})

case("S17-runs-caps-sessions", "sessions", W + "--runs N runs the first N sessions of the file; the summary's sessions.planned is N",
     SURL + ["--sessions", "s.jsonl", "--output", "o.jsonl", "--runs", "1"],
     {"rc": 0, "asserts": ["len(reqs) == 1", "[r['session'] for r in R('o.jsonl')] == ['a']",
                           "out['sessions']['planned'] == 1", "out['sessions']['ok_ratio'] == 1.0"]},
     files={"s.jsonl": jl({"id": "a", "turns": ["x"]}, {"id": "b", "turns": ["y"]}, {"id": "c", "turns": ["z"]})},
     server={"responses": [chat_text()]})

SES2 = jl({"id": "a", "turns": ["hello"]}, dict(SES_TOOLS, id="w"))
MAKE_SES = {"args": ["--fixture", "agent", "--sessions", "s.jsonl", "--output", "full.jsonl", "--quiet"], "rc": 0}
case("S18-summary-lacks-session-end", "sessions",
     W + "--summary checks each session ends on its session_end record: the file with the last session's last record removed gets one warning line, exit 1",
     ["--summary", "cut.jsonl"], {"rc": 1, "stderr_contains": ["warning"], "asserts": ["len(R('cut.jsonl')) == 2"]},
     files={"s.jsonl": SES2}, pre=[dict(MAKE_SES, then=[{"file": "full.jsonl", "to": "cut.jsonl", "drop_lines": [-1]}])])
case("S19-summary-session-without-records", "sessions",
     W + "--summary: a planned session with no record is named in one warning line ('1 of 2 planned sessions has no record'), exit 1",
     ["--summary", "cut.jsonl"], {"rc": 1, "stderr_contains": ["1 of 2 planned sessions has no record"]},
     files={"s.jsonl": SES2}, pre=[dict(MAKE_SES, then=[{"file": "full.jsonl", "to": "cut.jsonl", "drop_where": ["session", "a"]}])])
case("S20-summary-run-numbering-gap", "sessions",
     W + "--summary checks the runs are numbered from 0 without a gap: a middle record removed (session w's round 0) is a warning, exit 1",
     ["--summary", "cut.jsonl"], {"rc": 1, "stderr_contains": ["warning"]},
     files={"s.jsonl": SES2}, pre=[dict(MAKE_SES, then=[{"file": "full.jsonl", "to": "cut.jsonl", "drop_lines": [1]}])])

case("S21-history-arguments-byte-exact", "sessions",
     W + "the history sent is exactly what came back: the assistant message's tool_calls arguments byte for byte (odd spacing kept), then one tool message per call with tool_call_id; a string result is sent as it is",
     SURL + ["--sessions", "s.jsonl", "--output", "o.jsonl"],
     {"rc": 0, "asserts": ["len(reqs) == 2",
                           "reqs[1]['body']['messages'][-2]['tool_calls'][0]['function']['arguments'] == '{\"city\":  \"Par' + 'is\" }'",
                           "reqs[1]['body']['messages'][-2]['tool_calls'][0]['id'] == 'call_1'",
                           "reqs[1]['body']['messages'][-1] == {'role': 'tool', 'tool_call_id': 'call_1', 'content': 'sunny'}"]},
     files={"s.jsonl": jl(dict(SES_TOOLS, tool_results={"get_weather": "sunny"}))},
     server={"responses": [chat_call(args_pieces=['{"city":', '  "Par', 'is" }']), chat_text()]})

case("S22-tool-results-list-consumed-last-repeats", "sessions",
     W + "tool_results as a list is consumed in order, its last one repeating once used up; a non-string is sent as its JSON text",
     SURL + ["--sessions", "s.jsonl", "--output", "o.jsonl"],
     {"rc": 0, "asserts": ["len(reqs) == 4",
                           "reqs[1]['body']['messages'][-1]['content'] == 'sunny'",
                           "json.loads(reqs[2]['body']['messages'][-1]['content']) == {'t': 1}",
                           "json.loads(reqs[3]['body']['messages'][-1]['content']) == {'t': 1}",
                           "R('o.jsonl')[-1]['session_end']['tool_rounds'] == 3"]},
     files={"s.jsonl": jl(dict(SES_TOOLS, tool_results={"get_weather": ["sunny", {"t": 1}]}))},
     server={"responses": [chat_call(), chat_call(call_id="call_2"), chat_call(call_id="call_3"), chat_text()]})

case("S23-split-surrogate-pair-in-history", "sessions",
     W + "an emoji's surrogate pair split across two events ('X\\ud83d' then '\\ude00Y') goes back as the two escapes it came as: the next request is ASCII JSON holding X\\ud83d\\ude00Y; no client_error",
     SURL + ["--sessions", "s.jsonl", "--output", "o.jsonl"],
     {"rc": 0, "asserts": ["len(reqs) == 2", "'X\\\\ud83d\\\\ude00Y' in reqs[1]['raw']", "reqs[1]['raw'].isascii()",
                           "all(r['ok'] for r in R('o.jsonl'))"]},
     files={"s.jsonl": jl({"id": "a", "turns": ["one", "two"]})},
     server={"responses": [chat_text(pieces=["X\ud83d", "\ude00Y"]), chat_text()]})

case("S24-messages-tool-use-history", "sessions",
     W + "Messages: the answer goes back as an assistant message of content blocks (tool_use id, name, input) and the results as one user message of tool_result blocks (tool_use_id)",
     ["--url", "{ORIGIN}/v1/messages", "--model", "m", "--quiet", "--sessions", "s.jsonl", "--output", "o.jsonl"],
     {"rc": 0, "asserts": ["len(reqs) == 2",
                           "[b for b in reqs[1]['body']['messages'][-2]['content'] if b.get('type') == 'tool_use'][0]['id'] == 'toolu_1'",
                           "[b for b in reqs[1]['body']['messages'][-2]['content'] if b.get('type') == 'tool_use'][0]['input'] == {'city': 'Paris'}",
                           "reqs[1]['body']['messages'][-1]['role'] == 'user'",
                           "reqs[1]['body']['messages'][-1]['content'][0]['tool_use_id'] == 'toolu_1'",
                           "reqs[1]['body']['messages'][-1]['content'][0]['type'] == 'tool_result'"]},
     files={"s.jsonl": jl(SES_TOOLS)}, server={"responses": [msg_tool_use(), msg_text()]})

case("S25-unknown-tool-ends-session", "sessions",
     W + "a call of a tool not offered is not ok (unknown_tool); a call is executed only when its run is ok, so nothing more is sent; exit 1",
     SURL + ["--sessions", "s.jsonl", "--output", "o.jsonl"],
     {"rc": 1, "asserts": ["len(reqs) == 1", "R('o.jsonl')[0]['error_kind'] == 'unknown_tool'",
                           "R('o.jsonl')[0]['session_end']['ended_by'] == 'unknown_tool'"]},
     files={"s.jsonl": jl(SES_TOOLS)}, server={"responses": [chat_call(name="get_time"), chat_text()]})

case("S26-gate-replaces-session-rule", "sessions",
     "docs/cli.md#flags-and-workloads: with --sessions, --fail-if gates the summary; the exit status is what the gates say (a held gate: 0 though a session failed); gates in the summary",
     SURL + ["--sessions", "s.jsonl", "--output", "o.jsonl", "--fail-if", "ok_ratio < 0.5"],
     {"rc": 0, "asserts": ["out['gates'][0]['held'] is True", "out['gates'][0]['value'] == 0.5", "out['sessions']['not_ok'] == 1"]},
     files={"s.jsonl": jl({"id": "a", "turns": ["x"]}, {"id": "b", "turns": ["y"]})},
     server={"responses": [chat_text(), chat_text(done=False)]})

case("S27-sessions-ok-ratio-gate", "sessions",
     "docs/decisions.md gates: sessions_ok_ratio reads sessions.ok_ratio; a session ended by max_tool_rounds with every run ok fails 'sessions_ok_ratio < 1' (exit 1) while 'ok_ratio < 1' holds",
     SURL + ["--sessions", "s.jsonl", "--output", "o.jsonl", "--fail-if", "sessions_ok_ratio < 1", "--fail-if", "ok_ratio < 1"],
     {"rc": 1, "asserts": ["out['gates'][0]['held'] is False", "out['gates'][0]['value'] == 0.0", "out['gates'][1]['held'] is True"]},
     files={"s.jsonl": jl(dict(SES_TOOLS, max_tool_rounds=0))}, server={"responses": [chat_call()]})

case("S28-rate-queued-ms-first-run-only", "sessions",
     W + "under --rate, queued_ms is set on a session's first run, null on its other runs; load.runs null and load.sessions the planned count",
     SURL + ["--sessions", "s.jsonl", "--output", "o.jsonl", "--rate", "50", "--concurrency", "2"],
     {"rc": 0, "asserts": ["len(R('o.jsonl')) == 4",
                           "all((r['queued_ms'] is not None) == (r['turn'] == 1 and r['round'] == 0) for r in R('o.jsonl'))",
                           "all(r['load']['runs'] is None and r['load']['sessions'] == 2 for r in R('o.jsonl'))"]},
     files={"s.jsonl": jl({"id": "a", "turns": ["x", "y"]}, {"id": "b", "turns": ["z", "w"]})},
     server={"responses": [chat_text()]})

case("S29-no-response-recorded", "sessions",
     "docs/cli.md 'Evidence is never lost': every run that starts has its record; a server that closes without a byte ends the session (no_response), one record per request, the other session goes on",
     SURL + ["--sessions", "s.jsonl", "--output", "o.jsonl"],
     {"rc": 1, "asserts": ["len(reqs) == 2", "len(R('o.jsonl')) == 2",
                           "R('o.jsonl')[0]['error_kind'] in ('no_response', 'connection_failed')",
                           "R('o.jsonl')[1]['ok'] is True"]},
     files={"s.jsonl": jl({"id": "a", "turns": ["x", "y"]}, {"id": "b", "turns": ["z"]})},
     server={"responses": [{"raw": ""}, chat_text()]})

# =========================================================================================
# Traces (docs/workloads.md "Trace replay", docs/cli.md flag table)
# =========================================================================================
T = "docs/workloads.md#trace-replay---trace-file: "
CURL = ["--url", "{ORIGIN}/v1/completions", "--model", "m", "--quiet"]


def comp_text(text="READY", finish="stop", done=True, usage_tokens=3):
    ev = [{"id": "c1", "object": "text_completion", "created": 1, "model": "m",
           "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": None}]},
          {"id": "c1", "object": "text_completion", "created": 1, "model": "m",
           "choices": [{"index": 0, "text": "", "logprobs": None, "finish_reason": finish}]},
          {"id": "c1", "object": "text_completion", "created": 1, "model": "m", "choices": [],
           "usage": {"prompt_tokens": 5, "completion_tokens": usage_tokens, "total_tokens": 5 + usage_tokens}}]
    if done:
        ev.append("[DONE]")
    return {"events": ev}


def bad_trace(id, content, why):
    case(id, "traces", T + "a bad line (" + why + ") gets one line naming the file, the line and the field, exit 2, no evidence file, nothing sent",
         CURL + ["--trace", "t.jsonl", "--output", "o.jsonl"], BAD_FILE, files={"t.jsonl": content}, server={"responses": [comp_text()]})


bad_trace("T01-timestamp-backwards", jl({"timestamp": 100, "prompt": "a"}, {"timestamp": 50, "prompt": "b"}), "a timestamp that goes backwards")
bad_trace("T02-hash-ids-fraction", jl({"timestamp": 0, "input_length": 10, "hash_ids": [1.5]}), "hash_ids that are not whole numbers")
bad_trace("T03-unknown-key", jl({"timestamp": 0, "prompt": "a", "output_len": 5}), "any other key is refused")
bad_trace("T04-output-length-0", jl({"timestamp": 0, "prompt": "a", "output_length": 0}), "output_length is 1 to 32768")
bad_trace("T05-output-length-32769", jl({"timestamp": 0, "prompt": "a", "output_length": 32769}), "output_length is 1 to 32768")
bad_trace("T06-no-length-no-prompt", jl({"timestamp": 0, "output_length": 5}), "input_length is required unless prompt is given")
bad_trace("T07-hash-ids-negative", jl({"timestamp": 0, "input_length": 10, "hash_ids": [-1]}), "hash_ids are non-negative whole numbers")
bad_trace("T08-timestamp-string", jl({"timestamp": "100", "prompt": "a"}), "timestamp is milliseconds, a number")
bad_trace("T09-timestamp-bool", jl({"timestamp": True, "prompt": "a"}, {"timestamp": True, "prompt": "b"}), "timestamp true is not milliseconds (a bool is not a number in JSON)")
bad_trace("T10-hash-ids-bool", jl({"timestamp": 0, "input_length": 10, "hash_ids": [True, False]}), "hash_ids [true, false] are not whole numbers")
bad_trace("T11-input-length-bool", jl({"timestamp": 0, "input_length": True}), "input_length true is not a length in tokens")
bad_trace("T12-output-length-bool", jl({"timestamp": 0, "prompt": "a", "output_length": True}), "output_length true is not a budget 1 to 32768")

case("T13-plain-trace-schedule", "traces",
     T + "line i starts at (timestamp - first) / --trace-speed: timestamps 1000/1200/1400 at speed 2 are scheduled at 0/100/200 ms; trace.line and length_by 'prompt'; one record per line; the prompt sent is the line's",
     CURL + ["--trace", "t.jsonl", "--output", "o.jsonl", "--trace-speed", "2"],
     {"rc": 0, "asserts": ["len(reqs) == 3", "len(R('o.jsonl')) == 3",
                           "sorted(r['trace']['scheduled_ms'] for r in R('o.jsonl')) == [0, 100, 200]",
                           "sorted(r['trace']['line'] for r in R('o.jsonl')) == [1, 2, 3]",
                           "all(r['trace']['length_by'] == 'prompt' for r in R('o.jsonl'))",
                           "sorted(q['body']['prompt'] for q in reqs) == ['alpha', 'beta', 'gamma']",
                           "all(r['load']['arrivals'] == 'trace' and r['load']['trace_speed'] == 2 for r in R('o.jsonl'))"]},
     files={"t.jsonl": jl({"timestamp": 1000, "prompt": "alpha"}, {"timestamp": 1200, "prompt": "beta"}, {"timestamp": 1400, "prompt": "gamma"})},
     server={"responses": [comp_text()]})

case("T14-output-length-is-budget", "traces", T + "output_length becomes the request's budget (max_tokens), over --max-tokens",
     CURL + ["--trace", "t.jsonl", "--output", "o.jsonl", "--max-tokens", "99"],
     {"rc": 0, "asserts": ["sorted(q['body']['max_tokens'] for q in reqs) == [7, 99]"]},
     files={"t.jsonl": jl({"timestamp": 0, "prompt": "a", "output_length": 7}, {"timestamp": 1, "prompt": "b"})},
     server={"responses": [comp_text()]})

case("T15-mooncake-shared-prefix-words", "traces",
     T + "prompts are words: each hash_ids block --block-size words drawn from the block id alone, then the line's own; cut to input_length; without /tokenize one token per word, length_by approximation. Lines [7,8] and [7,9] share exactly the first block",
     CURL + ["--trace", "t.jsonl", "--output", "o.jsonl", "--block-size", "16"],
     {"rc": 0, "asserts": ["len(reqs) == 2",
                           "[len(q['body']['prompt'].split()) for q in reqs] == [40, 40]",
                           "reqs[0]['body']['prompt'].split()[:16] == reqs[1]['body']['prompt'].split()[:16]",
                           "reqs[0]['body']['prompt'].split()[16:32] != reqs[1]['body']['prompt'].split()[16:32]",
                           "all(r['trace']['length_by'] == 'approximation' for r in R('o.jsonl'))",
                           "all(r['trace']['block_size'] == 16 for r in R('o.jsonl'))"]},
     files={"t.jsonl": jl({"timestamp": 0, "input_length": 40, "hash_ids": [7, 8]}, {"timestamp": 1, "input_length": 40, "hash_ids": [7, 9]})},
     server={"responses": [comp_text()]})

case("T16-tokenize-count-string", "traces",
     T + "once /tokenize answers anything but a count (a count \"12\", a string) the approximation is used: length_by approximation, prompt of input_length words",
     CURL + ["--trace", "t.jsonl", "--output", "o.jsonl"],
     {"rc": 0, "asserts": ["R('o.jsonl')[0]['trace']['length_by'] == 'approximation'", "len(reqs[0]['body']['prompt'].split()) == 20"]},
     files={"t.jsonl": jl({"timestamp": 0, "input_length": 20})},
     server={"responses": [comp_text()], "tokenize": {"count": "20", "tokens": []}})

case("T17-tokenize-count-true", "traces",
     T + "a /tokenize count of true is not a count (bool): approximation, not tokenize",
     CURL + ["--trace", "t.jsonl", "--output", "o.jsonl"],
     {"rc": 0, "asserts": ["R('o.jsonl')[0]['trace']['length_by'] == 'approximation'", "len(reqs[0]['body']['prompt'].split()) == 20"]},
     files={"t.jsonl": jl({"timestamp": 0, "input_length": 20})},
     server={"responses": [comp_text()], "tokenize": {"count": True}})

case("T18-tokenize-exact", "traces",
     T + "where /tokenize counts the prompt at input_length, length_by is tokenize and prompt_tokens_counted the count",
     CURL + ["--trace", "t.jsonl", "--output", "o.jsonl"],
     {"rc": 0, "asserts": ["R('o.jsonl')[0]['trace']['length_by'] == 'tokenize'", "R('o.jsonl')[0]['trace']['prompt_tokens_counted'] == 20"]},
     files={"t.jsonl": jl({"timestamp": 0, "input_length": 20})},
     server={"responses": [comp_text()], "tokenize": {"count": 20, "tokens": list(range(20))}})

case("T19-short-input-cuts-blocks", "traces",
     T + "the prompt is cut to its length at the end: input_length 10 with two 512-word blocks is 10 words",
     CURL + ["--trace", "t.jsonl", "--output", "o.jsonl"],
     {"rc": 0, "asserts": ["len(reqs[0]['body']['prompt'].split()) == 10"]},
     files={"t.jsonl": jl({"timestamp": 0, "input_length": 10, "hash_ids": [1, 2]})},
     server={"responses": [comp_text()]})

for flag, val, why in [("--rate", "5", "no"), ("--keep-alive", None, "not yet"), ("--arrivals", "constant", "no"),
                       ("--prompt", "x", "no"), ("--input-tokens", "10", "no"), ("--repeat", "2", "not yet"),
                       ("--processes", "2", "not yet"), ("--start-at", "2030-01-01T00:00:00Z", "not yet")]:
    case("T20-refuses" + flag, "traces",
         "docs/cli.md#flags-and-workloads: %s with --trace is '%s': exit 2, one line naming it, nothing sent, no file" % (flag, why),
         CURL + ["--trace", "t.jsonl", "--output", "o.jsonl", flag] + ([val] if val else []),
         dict(NO_TB, absent=["o.jsonl"], stderr_contains=[flag], asserts=["len(reqs) == 0"]),
         files={"t.jsonl": jl({"timestamp": 0, "prompt": "a"}, {"timestamp": 1, "prompt": "b"})}, server={"responses": [comp_text()]})

case("T21-failed-line-replay-goes-on", "traces",
     T + "exit 0 only when every line ran and was ok: a cut line is not ok, the replay goes on (3 records), exit 1",
     CURL + ["--trace", "t.jsonl", "--output", "o.jsonl"],
     {"rc": 1, "asserts": ["len(reqs) == 3", "len(R('o.jsonl')) == 3", "sum(not r['ok'] for r in R('o.jsonl')) == 1"]},
     files={"t.jsonl": jl({"timestamp": 0, "prompt": "a"}, {"timestamp": 50, "prompt": "b"}, {"timestamp": 100, "prompt": "c"})},
     server={"responses": [comp_text(), comp_text(done=False), comp_text()]})

case("T22-summary-lacks-a-line", "traces",
     T + "--summary of a replay's file that lacks a line's record says so in one warning line, exit 1",
     ["--summary", "cut.jsonl"], {"rc": 1, "stderr_contains": ["warning"]},
     files={"t.jsonl": jl({"timestamp": 0, "prompt": "a"}, {"timestamp": 10, "prompt": "b"}, {"timestamp": 20, "prompt": "c"})},
     pre=[{"args": ["--fixture", "ok", "--api", "completions", "--trace", "t.jsonl", "--output", "full.jsonl", "--quiet"], "rc": 0,
           "then": [{"file": "full.jsonl", "to": "cut.jsonl", "drop_lines": [1]}]}])

case("T23-runs-first-n-lines", "traces", T + "--runs N replays the first N lines; a complete run of them exits 0 and the summary plans N",
     CURL + ["--trace", "t.jsonl", "--output", "o.jsonl", "--runs", "2"],
     {"rc": 0, "asserts": ["len(reqs) == 2", "sorted(r['trace']['line'] for r in R('o.jsonl')) == [1, 2]", "out['planned_runs'] == 2"]},
     files={"t.jsonl": jl(*[{"timestamp": i, "prompt": "p%d" % i} for i in range(4)])}, server={"responses": [comp_text()]})

case("T24-empty-trace-file", "traces", T + "(inferred) an empty trace holds no request: refused with one line (exit 2), no traceback, no evidence file",
     CURL + ["--trace", "t.jsonl", "--output", "o.jsonl"], BAD_FILE, files={"t.jsonl": ""}, server={"responses": [comp_text()]})

case("T25-trace-speed-zero", "traces", T + "(inferred) --trace-speed 0 cannot divide the schedule: exit 2, one line, nothing sent",
     CURL + ["--trace", "t.jsonl", "--output", "o.jsonl", "--trace-speed", "0"], BAD_FILE,
     files={"t.jsonl": jl({"timestamp": 0, "prompt": "a"})}, server={"responses": [comp_text()]})

case("T26-expect-length-usage-differs", "traces",
     T + "with --expect-finish length a run is ok only if its usage counts exactly output_length tokens: 4 of 5 is not ok (length_tokens_differ), exit 1",
     CURL + ["--trace", "t.jsonl", "--output", "o.jsonl", "--expect-finish", "length", "--extra", '{"ignore_eos": true}'],
     {"rc": 1, "asserts": ["R('o.jsonl')[0]['error_kind'] == 'length_tokens_differ'", "reqs[0]['body']['max_tokens'] == 5"]},
     files={"t.jsonl": jl({"timestamp": 0, "prompt": "a", "output_length": 5})},
     server={"responses": [comp_text(finish="length", usage_tokens=4)]})

case("T27-trace-gate", "traces",
     "docs/decisions.md: --fail-if works on trace replays: error_kind.eof_before_done > 0 fails (value 1), exit 1, gates in the summary",
     CURL + ["--trace", "t.jsonl", "--output", "o.jsonl", "--fail-if", "error_kind.eof_before_done > 0"],
     {"rc": 1, "asserts": ["out['gates'][0]['value'] == 1", "out['gates'][0]['held'] is False"]},
     files={"t.jsonl": jl({"timestamp": 0, "prompt": "a"}, {"timestamp": 10, "prompt": "b"})},
     server={"responses": [comp_text(), comp_text(done=False)]})

case("T28-mixed-shapes-equal-timestamps", "traces",
     T + "a file may mix the two shapes; equal timestamps do not go backwards",
     CURL + ["--trace", "t.jsonl", "--output", "o.jsonl"],
     {"rc": 0, "asserts": ["len(R('o.jsonl')) == 2",
                           "sorted(r['trace']['length_by'] for r in R('o.jsonl')) == ['approximation', 'prompt']"]},
     files={"t.jsonl": jl({"timestamp": 5, "prompt": "a"}, {"timestamp": 5, "input_length": 8})}, server={"responses": [comp_text()]})
