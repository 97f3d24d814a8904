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

for flag, val, why in [("--prompt", "hi", "no"), ("--warmup", "1", "no session left to summarise"),
                       ("--duration", "5", "no rate")]:
    case("S13-refuses" + flag, "sessions",
         "docs/cli.md#flags-and-workloads: %s with --sessions is '%s': refused, exit 2, one line naming it and the workload, before anything is sent or any file created" % (flag, why),
         SURL + ["--sessions", "s.jsonl", "--output", "o.jsonl", flag] + ([val] if val else []),
         dict(NO_TB, absent=["o.jsonl"], stderr_contains=[flag], asserts=["len(reqs) == 0"]),
         files={"s.jsonl": jl({"id": "a", "turns": ["hi"]})}, server={"responses": [chat_text()]})

case("S13-honours--shard", "sessions",
     "docs/cli.md#flags-and-workloads: --shard with --sessions is honoured since issue 46: shard 1/2 of two sessions runs the second (session_index 1), exit 0",
     SURL + ["--sessions", "s.jsonl", "--output", "o.jsonl", "--shard", "1/2"],
     {"rc": 0, "asserts": ["[(r['session'], r['session_index']) for r in R('o.jsonl')] == [('b', 1)]", "len(reqs) == 1"]},
     files={"s.jsonl": jl({"id": "a", "turns": ["hi"]}, {"id": "b", "turns": ["hi"]})}, server={"responses": [chat_text()]})

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

for flag, val, why in [("--rate", "5", "no"), ("--arrivals", "constant", "no"),
                       ("--prompt", "x", "no"), ("--input-tokens", "10", "no"), ("--repeat-seeds", "same", "no"),
                       ("--start-at", "2030-01-01T00:00:00Z", "more than a day ahead")]:
    case("T20-refuses" + flag, "traces",
         "docs/cli.md#flags-and-workloads: %s with --trace is '%s': exit 2, one line naming it, nothing sent, no file" % (flag, why),
         CURL + ["--trace", "t.jsonl", "--output", "o.jsonl", flag] + ([val] if val else []),
         dict(NO_TB, absent=["o.jsonl"], stderr_contains=[flag], asserts=["len(reqs) == 0"]),
         files={"t.jsonl": jl({"timestamp": 0, "prompt": "a"}, {"timestamp": 1, "prompt": "b"})}, server={"responses": [comp_text()]})

# Honoured since issue 46 (one engine): a trace takes the load's --keep-alive, --repeat and --processes.
for flag, val, records in [("--keep-alive", None, 2), ("--repeat", "2", 4), ("--processes", "2", 2)]:
    case("T20-honours" + flag, "traces",
         "docs/cli.md#flags-and-workloads: %s with --trace is honoured: every line of every pass has its record, exit 0" % flag,
         CURL + ["--trace", "t.jsonl", "--output", "o.jsonl", flag] + ([val] if val else []),
         {"rc": 0, "asserts": ["len(R('o.jsonl')) == %d" % records, "len(reqs) == %d" % records]},
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

# =========================================================================================
# Gates (docs/decisions.md "Gates", docs/loads.md)
# =========================================================================================
G = "docs/decisions.md#gates---fail-if: "
LOAD_OK = {"args": ["--fixture", "ok", "--runs", "4", "--concurrency", "4", "--output", "load.jsonl", "--quiet"], "rc": 0}


def bad_gate(id, expr, why):
    case(id, "gates", G + "a bad expression (" + why + ") is one line on stderr and exit 2, before anything is sent or any file is created",
         ["--fixture", "ok", "--runs", "2", "--output", "o.jsonl", "--quiet", "--fail-if", expr],
         dict(NO_TB, absent=["o.jsonl"]))


bad_gate("G01-p95", "first_text_ms.p95 > 1", "a percentile it does not compute, p95")
bad_gate("G02-unknown-kind", "error_kind.eof_before_the_end > 0", "an unknown failure kind")
bad_gate("G03-bound-word", "ok_ratio < abc", "a bound that is not a number")
bad_gate("G04-bound-nan", "ok_ratio < nan", "a bound that is not a number: nan")
bad_gate("G05-delta-without-compare", "delta.first_text_ms.p99 > 10", "a delta. gate without --compare")
bad_gate("G06-percent-on-plain-figure", "ok_ratio < 50%", "a % bound on a figure that is not a difference")
bad_gate("G07-unknown-figure", "tokens_per_s > 1", "a figure the summary does not have")

case("G08-default-gate-recorded", "gates", G + "without --fail-if the gate is every run ok, written 'ok_ratio < 1', and the summary's gates says so",
     ["--fixture", "ok", "--runs", "2", "--output", "o.jsonl", "--quiet"],
     {"rc": 0, "asserts": ["out['gates'] == [{'expr': 'ok_ratio < 1', 'value': 1.0, 'held': True}]"]})
case("G09-percentile-of-no-ok-run", "gates", G + "a gate fails when the summary lacks its figure (a percentile when no run was ok): value null, held false, exit 1",
     ["--fixture", "http-error", "--runs", "2", "--output", "o.jsonl", "--quiet", "--fail-if", "first_text_ms.p99 > 100000"],
     {"rc": 1, "asserts": ["out['gates'][0]['value'] is None", "out['gates'][0]['held'] is False"]})
case("G10-gate-replaces-default", "gates", G + "the exit status is what the gates say: 'ok_ratio > 0.5' holds on a load of failures, exit 0",
     ["--fixture", "broken", "--runs", "2", "--output", "o.jsonl", "--quiet", "--fail-if", "ok_ratio > 0.5"],
     {"rc": 0, "asserts": ["out['gates'][0]['held'] is True", "out['not_ok'] == 2"]})
case("G11-one-run-refuses-gate", "gates", G + "one run takes no gate (flag table: --fail-if 'no' for one run): exit 2, nothing sent, no file",
     ["--fixture", "ok", "--output", "o.jsonl", "--quiet", "--fail-if", "ok_ratio < 1"], dict(NO_TB, absent=["o.jsonl"]))
case("G12-summary-empty-file-gate", "gates", "docs/loads.md: --summary of no record is 'no runs', exit 1 (a gate that would hold cannot change it)",
     ["--summary", "empty.jsonl", "--fail-if", "runs < 1"], {"rc": 1}, files={"empty.jsonl": ""})
case("G13-summary-cut-line-beats-gate", "gates", "docs/cli.md exit status: --summary of a file that is not whole (a cut line) exits 1 whatever the gates say",
     ["--summary", "cut.jsonl", "--fail-if", "runs < 1"], {"rc": 1, "stderr_contains": ["skipped"]},
     pre=[dict(LOAD_OK, then=[{"file": "load.jsonl", "to": "cut.jsonl", "truncate_last": True}])])
case("G14-sessions-ratio-on-plain-load", "gates", G + "a load of no sessions has no sessions_ok_ratio, and its gate fails (value null, exit 1)",
     ["--fixture", "ok", "--runs", "2", "--output", "o.jsonl", "--quiet", "--fail-if", "sessions_ok_ratio < 0.5"],
     {"rc": 1, "asserts": ["out['gates'][0]['value'] is None", "out['gates'][0]['held'] is False"]})
case("G15-sessions-ratio-summary-plain-file", "gates", G + "--summary of a plain load: sessions_ok_ratio has no figure, the gate fails, exit 1",
     ["--summary", "load.jsonl", "--fail-if", "sessions_ok_ratio < 0.5"], {"rc": 1}, pre=[LOAD_OK])
case("G16-warmup-left-out-of-gates", "gates", G.replace("gates---fail-if", "warm-up-runs---warmup") + "warm-up runs are left out of the summary and its gates: --runs 3 --warmup 1 gives runs 2, warmup_runs 1",
     ["--fixture", "ok", "--runs", "3", "--warmup", "1", "--output", "o.jsonl", "--quiet", "--fail-if", "runs != 2"],
     {"rc": 0, "asserts": ["out['warmup_runs'] == 1", "out['gates'][0]['held'] is True", "sum(r['warmup'] for r in R('o.jsonl')) == 1"]})
case("G17-summary-slo-override", "gates", "docs/goodput.md: --summary FILE --slo judges saved runs by other bounds: first_text_ms=1 makes no run good, the slo_attainment gate fails, exit 1",
     ["--summary", "load.jsonl", "--slo", "first_text_ms=1", "--fail-if", "slo_attainment < 0.99"],
     {"rc": 1, "asserts": ["out['good'] == 0", "out['gates'][0]['held'] is False"]}, pre=[LOAD_OK])
case("G18-known-kind-zero", "gates", G + "error_kind.KIND is 0 when no run failed with it: 'error_kind.client_error > 0' holds, exit 0",
     ["--summary", "load.jsonl", "--fail-if", "error_kind.client_error > 0"],
     {"rc": 0, "asserts": ["out['gates'][0]['value'] == 0"]}, pre=[LOAD_OK])
case("G19-summary-of-not-ok-default-gate", "gates", "docs/loads.md: --summary exits 1 when a run summarised was not ok (the default gate)",
     ["--summary", "b.jsonl"], {"rc": 1, "asserts": ["out['gates'][0]['held'] is False"]},
     pre=[{"args": ["--fixture", "broken", "--runs", "2", "--output", "b.jsonl", "--quiet"], "rc": 1}])

# =========================================================================================
# Comparisons (docs/decisions.md "Comparing two loads")
# =========================================================================================
CP = "docs/decisions.md#comparing-two-loads---compare-base-candidate: "
BASE = {"args": ["--fixture", "ok", "--runs", "4", "--concurrency", "4", "--output", "base.jsonl", "--quiet"], "rc": 0}
CAND = {"args": ["--fixture", "ok", "--runs", "4", "--concurrency", "4", "--output", "cand.jsonl", "--quiet"], "rc": 0}
BROKEN = {"args": ["--fixture", "broken", "--runs", "4", "--concurrency", "4", "--output", "cand.jsonl", "--quiet"], "rc": 1}

case("C01-two-loads", "compare", CP + "two loads: one JSON line with base, candidate, delta (p50/p90/p99 with ci95 and significant), gates; exit 0 without --fail-if",
     ["--compare", "base.jsonl", "cand.jsonl"],
     {"rc": 0, "asserts": ["set(['base', 'candidate', 'delta']) <= set(out)",
                           "set(['first_text_ms.p50', 'first_text_ms.p90', 'first_text_ms.p99']) <= set(out['delta'])",
                           "'ci95' in out['delta']['first_text_ms.p99'] and 'significant' in out['delta']['first_text_ms.p99']",
                           "out['delta']['not_ok']['relative_pct'] is None"]}, pre=[BASE, CAND])
case("C02-load-vs-single-record", "compare", CP + "a load and a single record are not compared: exit 2, one line",
     ["--compare", "base.jsonl", "one.json"], NO_TB,
     pre=[BASE, {"args": ["--fixture", "ok", "--output", "one.json", "--quiet"], "rc": 0}])
case("C03-empty-file", "compare", CP + "a file that holds no load (an empty file) is refused before anything is compared: exit 2, one line",
     ["--compare", "base.jsonl", "empty.jsonl"], NO_TB, files={"empty.jsonl": ""}, pre=[BASE])
case("C04-csv-file", "compare", CP + "a --csv table (lines that are not JSON) is refused: exit 2, one line",
     ["--compare", "base.jsonl", "cand.csv"], NO_TB,
     pre=[BASE, {"args": ["--fixture", "ok", "--runs", "2", "--output", "c.jsonl", "--csv", "cand.csv", "--quiet"], "rc": 0}])
case("C05-candidate-lacks-record", "compare", CP + "a side with fewer records than its load planned gets the --summary warning, and the exit status is 1 without any gate",
     ["--compare", "base.jsonl", "cut.jsonl"], {"rc": 1, "stderr_contains": ["warning"]},
     pre=[BASE, dict(CAND, then=[{"file": "cand.jsonl", "to": "cut.jsonl", "drop_lines": [1]}])])
case("C06-delta-ok-ratio-gate", "compare", CP + "'delta.ok_ratio < -0.01' fails when the candidate's runs all failed: exit 1",
     ["--compare", "base.jsonl", "cand.jsonl", "--fail-if", "delta.ok_ratio < -0.01"],
     {"rc": 1, "asserts": ["out['gates'][0]['held'] is False"]}, pre=[BASE, BROKEN])
case("C07-delta-schedule-figure-closed-loops", "compare", CP + "a delta. figure neither load has (a schedule's figure of closed loops) fails its gate: exit 1",
     ["--compare", "base.jsonl", "cand.jsonl", "--fail-if", "delta.first_text_from_schedule_ms.p99 > 10"],
     {"rc": 1, "asserts": ["out['gates'][0]['held'] is False"]}, pre=[BASE, CAND])
case("C08-differ-in-api-warns", "compare", CP + "loads that differ in API: one warning line naming it, the comparison goes on, exit 0",
     ["--compare", "base.jsonl", "cand.jsonl"], {"rc": 0, "stderr_contains": ["differ in", "API"]},
     pre=[BASE, {"args": ["--fixture", "ok", "--api", "completions", "--runs", "4", "--concurrency", "4", "--output", "cand.jsonl", "--quiet"], "rc": 0}])
case("C09-markdown", "compare", CP + "--format markdown prints a Markdown table instead of the JSON line",
     ["--compare", "base.jsonl", "cand.jsonl", "--format", "markdown"],
     {"rc": 0, "asserts": ["out is None", "'|' in stdout"]}, pre=[BASE, CAND])
case("C10-compare-refuses-runs", "compare", "docs/loads.md: --summary and --compare only read; a flag only a run uses (--runs) is exit 2",
     ["--compare", "base.jsonl", "cand.jsonl", "--runs", "3"], NO_TB, pre=[BASE, CAND])
case("C11-percent-gate-base-zero", "compare", CP + "relative_pct is null when the base is 0; 'delta.not_ok > 10%' with base 0 and candidate 4 cannot show the candidate is good: the gate must not hold (exit 1)",
     ["--compare", "base.jsonl", "cand.jsonl", "--fail-if", "delta.not_ok > 10%"],
     {"rc": 1, "asserts": ["out['gates'][0]['held'] is False"]}, pre=[BASE, BROKEN])
case("C12-mixed-sources-refused", "compare", "docs/cli.md: --compare refuses records of different sources (fixture, endpoint) without --mixed-sources",
     ["--compare", "base.jsonl", "cand.jsonl"], {"rc": 2},
     pre=[BASE, {"args": ["--url", "{ORIGIN}/v1/chat/completions", "--model", "m", "--runs", "4", "--concurrency", "4", "--output", "cand.jsonl", "--quiet"], "rc": 0}],
     server={"responses": [chat_text()]})
case("C13-delta-kind-gate", "compare", CP + "error_kind.KIND deltas for every kind either load failed with: 'delta.error_kind.eof_before_done > 0' fails, exit 1",
     ["--compare", "base.jsonl", "cand.jsonl", "--fail-if", "delta.error_kind.eof_before_done > 0"],
     {"rc": 1, "asserts": ["out['gates'][0]['value'] == 4"]}, pre=[BASE, BROKEN])
case("C14-candidate-cut-line", "compare", CP + "a cut line is left out with the --summary warning, and the exit status is 1 whatever the gates say",
     ["--compare", "base.jsonl", "cut.jsonl", "--fail-if", "delta.ok_ratio < -1"], {"rc": 1, "stderr_contains": ["warning"]},
     pre=[BASE, dict(CAND, then=[{"file": "cand.jsonl", "to": "cut.jsonl", "truncate_last": True}])])
case("C15-dialect-differs-warns", "compare", CP + "the dialect (request.dialect) is one of the request settings compared: loads run with --dialect strict and --dialect tgi get the warning line",
     ["--compare", "base.jsonl", "cand.jsonl"], {"rc": 0, "stderr_contains": ["differ in", "dialect"]},
     pre=[{"args": BASE["args"] + ["--dialect", "strict"], "rc": 0}, {"args": CAND["args"] + ["--dialect", "tgi"], "rc": 0}])

# =========================================================================================
# Shards (docs/goodput.md "One load from many machines", docs/cli.md)
# =========================================================================================
SH = "docs/goodput.md#one-load-from-many-machines: "
SHARD = lambda i, n, runs=6, extra=(): {"args": ["--fixture", "ok", "--runs", str(runs), "--rate", "50", "--seed", "3", "--shard", "%d/%d" % (i, n), "--output", "s%d.jsonl" % i, "--quiet"] + list(extra), "rc": 0}

for id, flag, why in [("H01-index-equals-n", ["--shard", "2/2"], "I is from 0 to N-1"), ("H02-zero-shards", ["--shard", "0/0"], "N of 0"),
                      ("H03-with-rates", ["--shard", "0/2", "--rates", "5,10", "--duration", "1"], "not with --rates"),
                      ("H04-start-at-no-z", ["--shard", "0/2", "--start-at", "{UTC_PLUS_2S_NOZ}"], "the Z is required"),
                      ("H05-start-at-2-days", ["--start-at", "{UTC_PLUS_2D}"], "at most a day ahead"),
                      ("H06-start-at-2-hours-behind", ["--start-at", "{UTC_MINUS_2H}"], "at most an hour behind"),
                      ("H07-shard-negative", ["--shard", "-1/2"], "I from 0")]:
    case(id, "shards", SH + "bad --shard/--start-at (" + why + "): exit 2, one line, no file",
         ["--fixture", "ok", "--runs", "4", "--rate", "20", "--output", "o.jsonl", "--quiet"] + flag, dict(NO_TB, absent=["o.jsonl"]))
case("H08-one-run-start-at", "shards", "docs/cli.md flag table: --start-at with one run is 'no': exit 2",
     ["--fixture", "ok", "--output", "o.jsonl", "--quiet", "--start-at", "{UTC_MINUS_10S}"], dict(NO_TB, absent=["o.jsonl"]))
case("H09-two-shards-add-up", "shards", SH + "shard I sends the runs i with i % N == I; --summary of the N files counts the runs, verdicts and planned runs one process's load would (6, 6, 6), exit 0",
     ["--summary", "s0.jsonl", "s1.jsonl"],
     {"rc": 0, "asserts": ["out['runs'] == 6 and out['ok'] == 6 and out['planned_runs'] == 6",
                           "sorted(r['run'] for r in R('s0.jsonl')) == [0, 2, 4]", "sorted(r['run'] for r in R('s1.jsonl')) == [1, 3, 5]",
                           "R('s0.jsonl')[0]['load']['plan']['id'] == R('s1.jsonl')[0]['load']['plan']['id']"]},
     pre=[SHARD(0, 2), SHARD(1, 2)])
case("H10-shard-missing", "shards", SH + "--summary of shard 0 of 2 alone: exit 2 and a line naming 'shard 1/2 missing'",
     ["--summary", "s0.jsonl"], {"rc": 2, "stderr_contains": ["1/2", "missing"]}, pre=[SHARD(0, 2)])
case("H11-shard-twice", "shards", SH + "a shard given twice: exit 2, 'given twice'",
     ["--summary", "s0.jsonl", "s0.jsonl", "s1.jsonl"], {"rc": 2, "stderr_contains": ["twice"]}, pre=[SHARD(0, 2), SHARD(1, 2)])
case("H12-shard-share", "shards", "docs/record.md load.plan: with --shard, load.runs is the shard's share (runs 1, 3 of 5: 2) and plan.runs the plan's (5)",
     ["--summary", "s1.jsonl", "s0.jsonl"],
     {"rc": 0, "asserts": ["sorted(r['run'] for r in R('s1.jsonl')) == [1, 3]", "R('s1.jsonl')[0]['load']['runs'] == 2",
                           "R('s1.jsonl')[0]['load']['plan']['runs'] == 5", "R('s1.jsonl')[0]['load']['plan']['shards'] == 2",
                           "out['runs'] == 5 and out['planned_runs'] == 5"]},
     pre=[SHARD(0, 2, 5), SHARD(1, 2, 5)])
case("H13-shard-lacks-line", "shards", SH + "a shard file with a record removed: the summary of both warns of the missing run, exit 1",
     ["--summary", "s0.jsonl", "cut1.jsonl"], {"rc": 1, "stderr_contains": ["warning"]},
     pre=[SHARD(0, 2), dict(SHARD(1, 2), then=[{"file": "s1.jsonl", "to": "cut1.jsonl", "drop_lines": [0]}])])
case("H14-more-shards-than-runs", "shards", SH + "(not documented) --runs 2 over 3 shards: shard 2 would send no run; it is refused up front with one line and no file, never a run that writes an empty file",
     ["--fixture", "ok", "--runs", "2", "--rate", "50", "--seed", "3", "--shard", "2/3", "--output", "s2.jsonl", "--quiet"],
     dict(NO_TB, absent=["s2.jsonl"]))
case("H15-different-plans", "shards", SH + "shards of two different plans (seeds 3 and 4): each plan lacks a shard, exit 2",
     ["--summary", "s0.jsonl", "s1.jsonl"], {"rc": 2, "stderr_contains": ["missing"]},
     pre=[SHARD(0, 2), dict(SHARD(1, 2), args=SHARD(1, 2)["args"][:7] + ["4"] + SHARD(1, 2)["args"][8:])])
case("H16-start-at-behind-sends-at-once", "shards", SH + "a process that starts late sends the runs already due at once, and their queued_ms says how late (start 10 s ago: > 5000 ms)",
     ["--fixture", "ok", "--runs", "2", "--rate", "20", "--start-at", "{UTC_MINUS_10S}", "--output", "o.jsonl", "--quiet"],
     {"rc": 0, "asserts": ["min(r['queued_ms'] for r in R('o.jsonl')) > 5000", "R('o.jsonl')[0]['load']['plan']['start_at'] is not None"]})
case("H17-refusal-message", "shards", "docs/cli.md#flags-and-workloads: the example line 'stream_client.py: error: --prompt does not go with --sessions: each session brings its own turns (docs/cli.md#flags-and-workloads)' (since issue 46 no pair is refused 'not yet')",
     ["--fixture", "agent", "--sessions", "s.jsonl", "--prompt", "hi", "--output", "o.jsonl"],
     dict(NO_TB, stderr_contains=["stream_client.py: error: --prompt does not go with --sessions: each session brings its own turns (docs/cli.md#flags-and-workloads)"]),
     files={"s.jsonl": jl({"id": "s", "turns": ["a"]})})
case("H18-shard-gate-over-files", "shards", SH + "--summary of the shard files with --fail-if gates the whole load: 'runs != 6' holds, exit 0",
     ["--summary", "s0.jsonl", "s1.jsonl", "--fail-if", "runs != 6"], {"rc": 0}, pre=[SHARD(0, 2), SHARD(1, 2)])
case("H19-shard-unsharded-merge", "shards", SH + "a load that is not sharded is shard 0 of 1 (load.plan.shard 0, shards 1)",
     ["--summary", "o.jsonl"], {"rc": 0, "asserts": ["R('o.jsonl')[0]['load']['plan']['shard'] == 0", "R('o.jsonl')[0]['load']['plan']['shards'] == 1"]},
     pre=[{"args": ["--fixture", "ok", "--runs", "2", "--output", "o.jsonl", "--quiet"], "rc": 0}])

# =========================================================================================
# Dialects (docs/dialects.md) in sessions, traces and loads; vendor streams (OpenAI, Anthropic)
# =========================================================================================
DI = "docs/dialects.md: "
ONE = ["--model", "m", "--quiet", "--output", "o.json"]
TOOLS_FILE = {"tools.json": TOOLS_JSON}


def one_run(id, doc, url_path, responses, rc, asserts, extra=(), files=None):
    case(id, "dialects", doc, ["--url", "{ORIGIN}" + url_path] + ONE + list(extra),
         {"rc": rc, "asserts": asserts}, server={"responses": responses}, files=dict(files or {}))


TGI_CALL = chat_call(args_pieces=['{', ' "city": "Paris"', '}'], tgi=True, finish=None, fp=TGI_FP, headers=TGI_H)

case("D01-tgi-call-in-session", "dialects",
     DI + "TGI's tool call ([DONE], no finish_reason, one call with valid arguments, detected by x-compute-type) is ok under the tgi dialect, so the session executes it: the next request carries the assistant call (id '0') and the tool result",
     SURL + ["--sessions", "s.jsonl", "--output", "o.jsonl"],
     {"rc": 0, "asserts": ["len(reqs) == 2", "R('o.jsonl')[0]['ok'] is True", "R('o.jsonl')[0]['dialect'] == 'tgi'",
                           "reqs[1]['body']['messages'][-1]['tool_call_id'] == '0'",
                           "json.loads(reqs[1]['body']['messages'][-2]['tool_calls'][0]['function']['arguments']) == {'city': 'Paris'}"]},
     files={"s.jsonl": jl(SES_TOOLS)},
     server={"responses": [TGI_CALL, chat_text(headers=TGI_H, fp=TGI_FP)]})

one_run("D02-tgi-two-calls", DI + "under tgi, two calls without a finish_reason are not TGI's shape: no_finish_reason, exit 1", "/v1/chat/completions",
        [chat_call(args_pieces=['{"city": "Paris"}'], tgi=True, finish=None, fp=TGI_FP, headers=TGI_H, second_call=True)], 1,
        ["R('o.json')[0]['error_kind'] == 'no_finish_reason'"], ["--tools", "tools.json"], TOOLS_FILE)
one_run("D03-tgi-call-with-text", DI + "under tgi, a call with text beside it is not TGI's shape: not ok (no_finish_reason or text_in_tool_call), exit 1", "/v1/chat/completions",
        [chat_call(args_pieces=['{"city": "Paris"}'], tgi=True, finish=None, fp=TGI_FP, headers=TGI_H, text_beside="hi")], 1,
        ["R('o.json')[0]['ok'] is False"], ["--tools", "tools.json"], TOOLS_FILE)
one_run("D04-tgi-args-cut-then-done", DI + "under tgi the call's arguments must be one complete JSON object: '{\"city\": \"Par' then [DONE] is not ok, exit 1", "/v1/chat/completions",
        [chat_call(args_pieces=['{', ' "city": "Par'], tgi=True, finish=None, fp=TGI_FP, headers=TGI_H)], 1,
        ["R('o.json')[0]['ok'] is False"], ["--tools", "tools.json"], TOOLS_FILE)
one_run("D05-strict-refuses-tgi-call", DI + "--dialect strict applies the vendor rules only: TGI's finish-less call is no_finish_reason", "/v1/chat/completions",
        [TGI_CALL], 1, ["R('o.json')[0]['error_kind'] == 'no_finish_reason'", "R('o.json')[0]['dialect'] == 'strict'"],
        ["--tools", "tools.json", "--dialect", "strict"], TOOLS_FILE)
one_run("D06-tgi-detected-by-fingerprint", DI + "a chat chunk whose system_fingerprint ends in -native selects tgi (no header): ok, dialect tgi, notes say what detected it", "/v1/chat/completions",
        [chat_call(args_pieces=['{', ' "city": "Paris"', '}'], tgi=True, finish=None, fp=TGI_FP)], 0,
        ["R('o.json')[0]['dialect'] == 'tgi'", "any('tgi' in n for n in R('o.json')[0]['notes'])"], ["--tools", "tools.json"], TOOLS_FILE)
one_run("D07-tgi-text-needs-finish", DI + "the tgi exception is for one tool call alone: a text answer with [DONE] and no finish_reason is no_finish_reason", "/v1/chat/completions",
        [chat_text(finish=None, headers=TGI_H, fp=TGI_FP)], 1, ["R('o.json')[0]['error_kind'] == 'no_finish_reason'"])
one_run("D08-tgi-call-length", DI + "under tgi a finish_reason that does come decides as usual: length on the call is budget_exhausted", "/v1/chat/completions",
        [chat_call(args_pieces=['{', ' "city": "Paris"', '}'], tgi=True, finish="length", fp=TGI_FP, headers=TGI_H)], 1,
        ["R('o.json')[0]['error_kind'] == 'budget_exhausted'"], ["--tools", "tools.json"], TOOLS_FILE)
one_run("D09-tgi-forced-no-header", DI + "--dialect tgi applies the rule with no header or fingerprint", "/v1/chat/completions",
        [chat_call(args_pieces=['{', ' "city": "Paris"', '}'], tgi=True, finish=None)], 0,
        ["R('o.json')[0]['ok'] is True", "R('o.json')[0]['dialect'] == 'tgi'"], ["--tools", "tools.json", "--dialect", "tgi"], TOOLS_FILE)
one_run("D10-tgi-schema-violation", DI + "under tgi the call's arguments must be valid against the tool's parameters: {\"town\": ...} is tool_arguments_schema", "/v1/chat/completions",
        [chat_call(args_pieces=['{', ' "town": "Paris"', '}'], tgi=True, finish=None, fp=TGI_FP, headers=TGI_H)], 1,
        ["R('o.json')[0]['error_kind'] == 'tool_arguments_schema'"], ["--tools", "tools.json"], TOOLS_FILE)

case("D11-llama-detection-per-response", "dialects",
     DI + "without --dialect the response chooses: in a load, the run whose response says Server: llama.cpp is judged by llama.cpp, the run whose response does not is judged by the vendor rules (no sequence_number: not ok); exit 1",
     ["--url", "{ORIGIN}/v1/responses", "--model", "m", "--quiet", "--runs", "2", "--output", "o.jsonl", "--max-tokens", "64"],
     {"rc": 1, "asserts": ["sorted(r['ok'] for r in R('o.jsonl')) == [False, True]",
                           "[r['dialect'] for r in sorted(R('o.jsonl'), key=lambda r: r['run'])] == ['llama.cpp', None]"]},
     server={"responses": [resp_llama(), resp_llama(headers=())]})

case("D12-llama-trace-budget", "dialects",
     DI + "llama.cpp Responses: usage.output_tokens must be below max_output_tokens; a trace line's output_length 3 is the budget: 3 output tokens is budget_exhausted, 2 is ok",
     ["--url", "{ORIGIN}/v1/responses", "--model", "m", "--quiet", "--trace", "t.jsonl", "--output", "o.jsonl"],
     {"rc": 1, "asserts": ["[q['body']['max_output_tokens'] for q in reqs] == [3, 3]",
                           "sorted((r['ok'], r['error_kind']) for r in R('o.jsonl')) == [(False, 'budget_exhausted'), (True, None)]"]},
     files={"t.jsonl": jl({"timestamp": 0, "prompt": "a", "output_length": 3}, {"timestamp": 300, "prompt": "b", "output_length": 3})},
     server={"responses": [resp_llama(out_tokens=3), resp_llama(out_tokens=2)]})

one_run("D13-llama-no-usage", DI + "llama.cpp Responses without usage.output_tokens is dialect_unproven", "/v1/responses",
        [resp_llama(usage=False)], 1, ["R('o.json')[0]['error_kind'] == 'dialect_unproven'"], ["--max-tokens", "64"])
one_run("D14-llama-messages-interleaved-ok", DI + "llama.cpp Messages: the text block starts while the thinking block is open, all stop at the end before message_delta end_turn: ok", "/v1/messages",
        [llama_msg_thinking_text()], 0, ["R('o.json')[0]['ok'] is True", "R('o.json')[0]['dialect'] == 'llama.cpp'", "R('o.json')[0]['text'] == 'Paris'"])
one_run("D15-llama-messages-block-open-at-delta", DI + "llama.cpp Messages: every block must stop before message_delta: the text block left open is not ok", "/v1/messages",
        [llama_msg_thinking_text(close_before_delta=False)], 1, ["R('o.json')[0]['ok'] is False"])
one_run("D16-llama-messages-max-tokens", DI + "llama.cpp Messages: stop_reason max_tokens decides as in the vendor protocol: budget_exhausted", "/v1/messages",
        [llama_msg_thinking_text(stop_reason="max_tokens")], 1, ["R('o.json')[0]['error_kind'] == 'budget_exhausted'"])

LL = ["x-litellm-version: 1.108.7"]
one_run("D17-litellm-responses-ok", DI + "LiteLLM Responses: no event: lines, [DONE] after response.completed; x-litellm-version selects litellm: ok", "/v1/responses",
        [resp_vendor(headers=LL, event_lines=False, done_after=True)], 0, ["R('o.json')[0]['ok'] is True", "R('o.json')[0]['dialect'] == 'litellm'"])
one_run("D18-litellm-two-done", DI + "LiteLLM: after the terminal event one data: [DONE] and nothing else: a second [DONE] is not ok", "/v1/responses",
        [resp_vendor(headers=LL, event_lines=False, done_after=True, extra_after=["[DONE]"])], 1, ["R('o.json')[0]['ok'] is False"])
one_run("D19-litellm-event-message", DI + "LiteLLM: 'event: message' is no line to SSE (its default type): accepted", "/v1/responses",
        [resp_vendor(headers=LL, event_lines="message", done_after=True)], 0, ["R('o.json')[0]['ok'] is True"])
one_run("D20-litellm-before-llama", DI + "LiteLLM's header selects litellm first, whatever the server behind it (Server: llama.cpp too)", "/v1/responses",
        [resp_vendor(headers=LL + ["Server: llama.cpp"], event_lines=False, done_after=True)], 0, ["R('o.json')[0]['dialect'] == 'litellm'"])
one_run("D21-litellm-done-missing", DI + "LiteLLM: after the terminal event one data: [DONE] is expected; (inferred) without it the proxy's stream is judged as a vendor one: the answer finished by response.completed is ok or refused, never a traceback", "/v1/responses",
        [resp_vendor(headers=LL, event_lines=False, done_after=False)], [0, 1], ["R('o.json') is not None"])
case("D22-dialect-bogus", "dialects", "docs/cli.md: --dialect is strict, llama.cpp, tgi or litellm: another name is exit 2, one line, nothing sent",
     ["--url", "{ORIGIN}/v1/chat/completions"] + ONE + ["--dialect", "vllm"], dict(NO_TB, absent=["o.json"], asserts=["len(reqs) == 0"]),
     server={"responses": [chat_text()]})
one_run("D23-llama-no-chat-exception", DI + "llama.cpp's rules are for Responses and Messages: a chat stream from llama-server without finish_reason is no_finish_reason", "/v1/chat/completions",
        [chat_text(finish=None, headers=["Server: llama.cpp"])], 1, ["R('o.json')[0]['error_kind'] == 'no_finish_reason'"])
one_run("D24-anthropic-pings", "Anthropic Messages streaming (docs.anthropic.com messages-streaming): 'event streams may also include any number of ping events'; docs/apis.md: ping is accepted in every state: ok", "/v1/messages",
        [msg_events([("ping", {}), ("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}), ("ping", {}),
                     ("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": "Paris"}}), ("ping", {}),
                     ("content_block_stop", {"index": 0}), ("ping", {})])], 0, ["R('o.json')[0]['ok'] is True"])
one_run("D25-anthropic-two-message-deltas", "Anthropic: 'one or more message_delta events'; docs/apis.md: the last stop_reason is kept: end_turn then max_tokens is budget_exhausted", "/v1/messages",
        [dict(msg_text(), events=msg_text()["events"][:-1] + [{"event": "message_delta", "data": {"type": "message_delta", "delta": {"stop_reason": "max_tokens", "stop_sequence": None}, "usage": {"output_tokens": 12}}}] + msg_text()["events"][-1:])],
        1, ["R('o.json')[0]['error_kind'] == 'budget_exhausted'"])
one_run("D26-openai-include-usage", "OpenAI chat streaming (stream_options.include_usage): an extra chunk before [DONE] with usage and choices an empty array, other chunks usage null: ok", "/v1/chat/completions",
        [{"events": [chunk({"role": "assistant", "content": ""}, usage=None, extra={"usage": None}), chunk({"content": "READY"}, extra={"usage": None}),
                     chunk({}, finish="stop", extra={"usage": None}),
                     {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}},
                     "[DONE]"]}], 0, ["R('o.json')[0]['ok'] is True"])
one_run("D27-openai-content-filter", "OpenAI chat: finish_reason content_filter is not a finished answer (unexpected_finish)", "/v1/chat/completions",
        [chat_text(finish="content_filter")], 1, ["R('o.json')[0]['error_kind'] == 'unexpected_finish'"])
case("D28-llama-messages-session", "dialects",
     DI + "llama.cpp Messages tool_use (thinking block open while the tool_use block streams) is ok under the detected dialect; the session sends the tool_result back with its tool_use_id",
     ["--url", "{ORIGIN}/v1/messages", "--model", "m", "--quiet", "--sessions", "s.jsonl", "--output", "o.jsonl"],
     {"rc": 0, "asserts": ["len(reqs) == 2", "R('o.jsonl')[0]['dialect'] == 'llama.cpp'",
                           "reqs[1]['body']['messages'][-1]['content'][0]['tool_use_id'] == 'Kx8Vn3Qp'"]},
     files={"s.jsonl": jl(SES_TOOLS)},
     server={"responses": [msg_events([
         ("content_block_start", {"index": 0, "content_block": {"type": "thinking", "thinking": ""}}),
         ("content_block_delta", {"index": 0, "delta": {"type": "thinking_delta", "thinking": "Need it."}}),
         ("content_block_start", {"index": 1, "content_block": {"type": "tool_use", "id": "Kx8Vn3Qp", "name": "get_weather"}}),
         ("content_block_delta", {"index": 1, "delta": {"type": "input_json_delta", "partial_json": '{"city": "Paris"}'}}),
         ("content_block_delta", {"index": 0, "delta": {"type": "signature_delta", "signature": ""}}),
         ("content_block_stop", {"index": 0}), ("content_block_stop", {"index": 1})], stop_reason="tool_use", headers=("Server: llama.cpp",)),
         llama_msg_thinking_text()]})

# =========================================================================================
# Cross-area: --summary of saved sessions/loads/traces that are doubled (found while probing)
# =========================================================================================
MTR = jl({"id": "a", "turns": ["hello"]}, dict(SES_TOOLS, max_tool_rounds=0))
MAKE_MTR = {"args": ["--fixture", "agent", "--sessions", "s.jsonl", "--output", "ses.jsonl", "--quiet"], "rc": 1}
case("X01-summary-session-not-ok-verdict", "sessions",
     "docs/decisions.md: '--summary FILE ... the same records give the same verdicts'; docs/loads.md: 'a load's printed summary equals --summary of its file'; docs/workloads.md: a sessions load exits 1 when a session is not ok. The load with a session ended by max_tool_rounds exits 1, so --summary of its file must too",
     ["--summary", "ses.jsonl"], {"rc": 1}, files={"s.jsonl": MTR}, pre=[MAKE_MTR])
case("X02-sessions-file-twice-gate", "gates",
     "docs/workloads.md: sessions.ok_ratio is the ok sessions over the sessions the load planned; a session ended by max_tool_rounds is not ok. The same file given twice to --summary must not make 'sessions_ok_ratio < 1' hold (ok_ratio never above the truth 0.5, or the double refused as shards are)",
     ["--summary", "ses.jsonl", "ses.jsonl", "--fail-if", "sessions_ok_ratio < 1"], {"rc": [1, 2]},
     files={"s.jsonl": MTR}, pre=[MAKE_MTR])
case("X03-load-file-twice", "gates",
     "docs/goodput.md: --summary refuses a shard given twice ('run 0 appears twice'), and a load that is not sharded is shard 0 of 1; so the same load file given twice must not be summarized as 8 runs of 4 planned with exit 0",
     ["--summary", "load.jsonl", "load.jsonl"], {"rc": [1, 2]}, pre=[LOAD_OK])
case("X04-load-record-duplicated", "gates",
     "docs/loads.md: --summary checks the file is whole against load.runs; a record given twice (run 0 appears twice) is not a whole load: not exit 0 with runs 5 of 4 planned",
     ["--summary", "dup.jsonl"], {"rc": [1, 2]},
     pre=[dict(LOAD_OK, then=[{"file": "load.jsonl", "to": "dup.jsonl", "dup_first": True}])])
case("X05-trace-file-twice", "traces",
     "docs/workloads.md: --summary recomputes a trace's block and checks every line has its record; the same replay given twice must not be 4 runs of 2 planned, exit 0",
     ["--summary", "tr.jsonl", "tr.jsonl"], {"rc": [1, 2]},
     files={"t.jsonl": jl({"timestamp": 0, "prompt": "a"}, {"timestamp": 5, "prompt": "b"})},
     pre=[{"args": ["--fixture", "ok", "--trace", "t.jsonl", "--output", "tr.jsonl", "--quiet"], "rc": 0}])
case("X06-sessions-summary-has-gates", "sessions",
     "docs/loads.md summary keys: 'gates: each --fail-if gate (without one, the gate every run ok)'; docs/cli.md: with --sessions the summary gets gates. A sessions load without --fail-if prints a summary with gates",
     SURL + ["--sessions", "s.jsonl", "--output", "o.jsonl"], {"rc": 0, "asserts": ["'gates' in out"]},
     files={"s.jsonl": jl({"id": "a", "turns": ["x"]})}, server={"responses": [chat_text()]})
case("X07-trace-summary-has-gates", "traces",
     "docs/loads.md summary keys: 'gates: each --fail-if gate (without one, the gate every run ok)'. A trace replay without --fail-if prints a summary with gates",
     CURL + ["--trace", "t.jsonl", "--output", "o.jsonl"], {"rc": 0, "asserts": ["'gates' in out"]},
     files={"t.jsonl": jl({"timestamp": 0, "prompt": "a"})}, server={"responses": [comp_text()]})

# =========================================================================================
ids = [c["id"] for c in CASES]
assert len(ids) == len(set(ids)), "duplicate ids"
with open(os.path.join(HERE, "cases.json"), "w", encoding="utf-8") as f:
    json.dump(CASES, f, indent=1, ensure_ascii=True)
    f.write("\n")
print("%d cases written" % len(CASES))
