#!/usr/bin/env python3
"""Write the hostile-49 captures (*.http) and cases.json, black box, from the docs and vLLM's code.

Every .http file is a raw HTTP response as vLLM 0.32 would frame it (chunked SSE for a stream, one
JSON body with Content-Length for an unstreamed twin), served by
`fixture_server.py --replay STREAM.http --replay-twin TWIN.http`. Standard library only; deterministic.

    python3 make_cases.py      # rewrites the .http files and cases.json beside this file
"""
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = []
TOOLS = "testdata/examples/tools.json"
CREATED = 1796206524


def _dumps(obj, ascii_=None):
    """Compact JSON as vLLM writes it; escaped (\\uXXXX) when a lone surrogate is inside (no UTF-8 for it)."""
    if ascii_ is None:
        try:
            json.dumps(obj, ensure_ascii=False).encode("utf-8")
            ascii_ = False
        except UnicodeEncodeError:
            ascii_ = True
    return json.dumps(obj, ensure_ascii=ascii_, separators=(",", ":"))


def _sse_http(events):
    head = ("HTTP/1.1 200 OK\r\ndate: Wed, 02 Dec 2026 10:15:24 GMT\r\nserver: uvicorn\r\n"
            "content-type: text/event-stream; charset=utf-8\r\nvary: Origin\r\nconnection: close\r\n"
            "transfer-encoding: chunked\r\n\r\n").encode("ascii")
    out = [head]
    for ev in events:
        b = ev.encode("utf-8")
        out.append(b"%x\r\n%s\r\n" % (len(b), b))
    out.append(b"0\r\n\r\n")
    return b"".join(out)


def _json_http(obj, ascii_=None, status="200 OK"):
    body = _dumps(obj, ascii_).encode("utf-8")
    head = ("HTTP/1.1 %s\r\ndate: Wed, 02 Dec 2026 10:15:25 GMT\r\nserver: uvicorn\r\ncontent-length: %d\r\n"
            "content-type: application/json\r\nvary: Origin\r\nconnection: close\r\n\r\n" % (status, len(body))).encode("ascii")
    return head + body


# ---------------------------------------------------------------- chat completions


def chat_stream(deltas, finish="tool_calls", usage=None, ids=True, ascii_=None, finish_ids=(2,), raw_data=None):
    """deltas: list of (delta dict, token ids list). The finish chunk carries finish_ids."""
    cid = "chatcmpl-h49"
    def chunk(delta, tids, fin=None):
        ch = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": fin}
        if fin is not None:
            ch["stop_reason"] = None
        if ids and tids is not None:
            ch["token_ids"] = list(tids)
        return {"id": cid, "object": "chat.completion.chunk", "created": CREATED, "model": "m", "choices": [ch]}
    evs = []
    first = {"id": cid, "object": "chat.completion.chunk", "created": CREATED, "model": "m",
             "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                          "finish_reason": None}]}
    if ids:
        first["prompt_token_ids"] = [1, 85, 394]
        first["prompt_text"] = None
    evs.append(first)
    n = 0
    for d, t in deltas:
        evs.append(chunk(d, t))
        n += len(t or ())
    evs.append(chunk({}, list(finish_ids), finish))
    n += len(finish_ids)
    if usage is None:
        usage = n
    evs.append({"id": cid, "object": "chat.completion.chunk", "created": CREATED, "model": "m", "choices": [],
                "usage": {"prompt_tokens": 3, "total_tokens": 3 + usage, "completion_tokens": usage}})
    text = ["data: " + _dumps(e, ascii_) + "\n\n" for e in evs]
    if raw_data:
        text = [raw_data.get(i, t) for i, t in enumerate(text)]
    text.append("data: [DONE]\n\n")
    return _sse_http(text)


def call_start(i, name="get_weather", cid=None):
    return {"content": None, "tool_calls": [{"id": cid or "chatcmpl-tool-h49-%d" % i, "type": "function", "index": i,
                                             "function": {"name": name}}]}


def call_args(i, piece):
    return {"content": None, "tool_calls": [{"index": i, "function": {"arguments": piece}}]}


def chat_twin(content=None, calls=(), finish="tool_calls", token_ids=None, usage=None, reasoning=None,
              ascii_=None, drop_ids_key=False, status="200 OK"):
    tcs = [{"id": "chatcmpl-tool-twin-%d" % i, "type": "function", "function": {"name": n, "arguments": a}}
           for i, (n, a) in enumerate(calls)]
    ch = {"index": 0, "message": {"role": "assistant", "content": content, "refusal": None, "annotations": None,
                                  "audio": None, "function_call": None, "tool_calls": tcs, "reasoning": reasoning},
          "logprobs": None, "finish_reason": finish, "stop_reason": None}
    if not drop_ids_key:
        ch["token_ids"] = token_ids
    ch["routed_experts"] = None
    if usage is None:
        usage = len(token_ids or ())
    body = {"id": "chatcmpl-h49-twin", "object": "chat.completion", "created": CREATED + 1, "model": "m",
            "choices": [ch], "service_tier": None, "system_fingerprint": "vllm-0.32.0-b3d04284",
            "usage": {"prompt_tokens": 3, "total_tokens": 3 + usage, "completion_tokens": usage,
                      "prompt_tokens_details": None}, "prompt_logprobs": None, "prompt_token_ids": [1, 85, 394],
            "prompt_text": None, "kv_transfer_params": None}
    return _json_http(body, ascii_, status)


def ids_of(deltas, finish_ids=(2,)):
    out = []
    for _, t in deltas:
        out.extend(t or ())
    return out + list(finish_ids)


ARGS_PARIS = '{"city": "Paris"}'


def weather_call_deltas(i=0, pieces=('{"', 'city', '": "', "Paris", '"}'), start_ids=(275,), base=300):
    ds = [(call_start(i), list(start_ids))]
    for k, p in enumerate(pieces):
        ds.append((call_args(i, p), [base + k]))
    return ds


def reasoning_then(content_pieces):
    ds = [({"reasoning": "\n"}, [201]), ({"reasoning": "I will call get_weather."}, [368, 457, 339]),
          ({"reasoning": "\n"}, [201])]
    for k, c in enumerate(content_pieces):
        ds.append(({"content": c}, [1153 + k if k == 0 else 201]))
    ds.append(({}, [1148, 201]))
    return ds


REASONING = "\nI will call get_weather.\n"


def case(cid, files, flags, ok, error_kind, reason, source, checks=None):
    CASES.append({"id": cid, "files": files, "flags": flags, "expect": {"ok": ok, "error_kind": error_kind},
                  "checks": checks or {}, "reason": reason, "source": source})


def write(name, data):
    with open(os.path.join(HERE, name), "wb") as f:
        f.write(data)
    return name


CHAT = ["--api", "chat", "--tools", TOOLS, "--cross-check"]
SRC_WS = ("docs/cross-check.md (white-space rule: 'The rule is that one and no wider'); docs/live.md "
          "('white space only (Python's str.strip, as vLLM's)'); vllm/parser/abstract_parser.py "
          "DelegatingParser._extract_tool_calls: auto path, after tools_called, "
          "'if content and content.strip() == \"\": content = None'")


def ws_pair(cid, stream_content, twin_content, ok, kind, reason, twin_calls=None, stream_calls=None,
            source=SRC_WS, twin_reasoning=REASONING, finish="tool_calls", checks=None, twin_finish=None):
    ds = reasoning_then(stream_content)
    calls = stream_calls if stream_calls is not None else [ARGS_PARIS]
    for i, a in enumerate(calls):
        ds += weather_call_deltas(i, pieces=(a,), base=300 + 10 * i, start_ids=(275 + i,))
    s = write(cid + "_stream.http", chat_stream(ds, finish=finish))
    tc = twin_calls if twin_calls is not None else [("get_weather", a) for a in calls]
    t = write(cid + "_twin.http", chat_twin(content=twin_content, calls=tc, token_ids=ids_of(ds),
                                            reasoning=twin_reasoning, finish=twin_finish or finish))
    case(cid, [s, t], CHAT, ok, kind, reason, source, checks)


def build_whitespace():
    ws_pair("ws01_newlines_control", ["\n", "\n"], None, True, None,
            "Qwen3's shape: reasoning, '\\n\\n' as content, a call; the twin drops the white space: a note, not a difference",
            checks={"cross_check.same": True, "cross_check.comparable": True, "cross_check.notes": "nonempty"})
    ws_pair("ws02_nbsp_python_strips", ["\u00a0"], None, True, None,
            "U+00A0 is white space to Python's str.strip ('\\u00a0'.strip() == ''), so vLLM's unstreamed path drops it "
            "exactly as it drops '\\n\\n': same answer (the brief suggested otherwise; vLLM's code decides)")
    ws_pair("ws03_line_separator_python_strips", ["\u2028"], None, True, None,
            "U+2028 is white space to str.strip (isspace() True): vLLM drops it unstreamed; same answer")
    ws_pair("ws04_zero_width_space", ["\u200b"], None, False, "cross_check_differs",
            "U+200B ZERO WIDTH SPACE is not white space to str.strip ('\\u200b'.strip() == '\\u200b'): vLLM keeps it "
            "unstreamed, so a twin without it is another answer from the same tokens")
    ws_pair("ws05_bom", ["\ufeff"], None, False, "cross_check_differs",
            "U+FEFF is not white space to str.strip: vLLM would keep it; its absence unstreamed is a difference")
    ws_pair("ws06_mongolian_vowel_separator", ["\u180e"], None, False, "cross_check_differs",
            "U+180E is format (Cf) since Unicode 6.3, '\\u180e'.isspace() is False: vLLM keeps it")
    ws_pair("ws07_newlines_then_text", ["\n", "\nX"], None, False, "cross_check_differs",
            "'\\n\\nX' is not white space only: vLLM's rule keeps it (content.strip() == 'X'); the twin without it differs")
    ws_pair("ws08_text_only_in_stream_X", ["X"], None, False, "cross_check_differs",
            "visible text 'X' beside a call in the stream, none unstreamed: a difference (or a stream failure of its own)")
    ws_pair("ws09_kept_on_both_sides", ["\n", "\n"], "\n\n", True, None,
            "white space on both sides, the same white space: the same text, no difference at all",
            checks={"cross_check.same": True})
    ws_pair("ws10_other_whitespace_kept_unstreamed", ["\n", "\n"], " ", False, "cross_check_differs",
            "docs/cross-check.md: 'other white space kept unstreamed ... still differ': '\\n\\n' against ' '")
    ws_pair("ws11_less_whitespace_kept_unstreamed", ["\n", "\n"], "\n", False, "cross_check_differs",
            "'\\n\\n' streamed, '\\n' unstreamed: other white space kept unstreamed, a difference")
    ws_pair("ws12_calls_differ", ["\n", "\n"], None, False, "cross_check_differs",
            "the white space is excused, the calls are not: Paris streamed, Lyon unstreamed, same token ids",
            twin_calls=[("get_weather", '{"city": "Lyon"}')])
    ws_pair("ws13_twin_has_no_calls", ["\n", "\n"], None, False, "cross_check_differs",
            "the rule needs unstreamed calls ('no unstreamed calls still differ'); here the twin has none at all",
            twin_calls=[], twin_finish="stop")
    ws_pair("ws14_twin_has_two_calls", ["\n", "\n"], None, False, "cross_check_differs",
            "white space excused, but the stream dropped the second call the twin has",
            twin_calls=[("get_weather", ARGS_PARIS), ("get_weather", '{"city": "Lyon"}')])
    ws_pair("ws15_all_ascii_whitespace", ["\t\r\n", " \x0b\x0c"], None, True, None,
            "tab, CR, LF, space, VT, FF: all white space to str.strip; vLLM drops them unstreamed")
    ws_pair("ws16_ideographic_space", ["\u3000"], None, True, None,
            "U+3000 IDEOGRAPHIC SPACE is white space to str.strip: dropped unstreamed by vLLM; same answer")
    ws_pair("ws17_reasoning_differs", ["\n", "\n"], None, False, "cross_check_differs",
            "white space excused, reasoning not: the twin's reasoning differs with the same ids",
            twin_reasoning="\nI will call get_time.\n")
    ws_pair("ws18_file_separator_python_strips", ["\x1c"], None, True, None,
            "U+001C is white space to str.strip ('\\x1c'.isspace() True): vLLM drops it exactly like '\\n\\n'")
    ws_pair("ws23_twin_empty_string_content", ["\n", "\n"], "", "ANY", None,
            "the twin's content is '' (not null) beside its call: vLLM's 'if content and ...' leaves '' as it is, "
            "so '' cannot come from '\n\n'; either verdict is defensible (probe only: the record is printed)")
    ws_pair("ws19_nbsp_plus_letter", ["\u00a0", "a"], None, False, "cross_check_differs",
            "U+00A0 then 'a': content.strip() == 'a', vLLM keeps it; twin without it differs")
    # white space with no calls at all, on either side: the stream is a text answer of white space
    ds = [({"content": "\n"}, [201]), ({"content": "\n"}, [201])]
    s = write("ws20_no_calls_either_side_stream.http", chat_stream(ds, finish="stop", finish_ids=(2,)))
    t = write("ws20_no_calls_either_side_twin.http", chat_twin(content=None, calls=[], finish="stop",
                                                               token_ids=ids_of(ds)))
    case("ws20_no_calls_either_side", [s, t], CHAT, False, "ANY_NOT_OK",
         "no calls on either side: vLLM's rule applies only after tools_called (the else branch returns the content "
         "as it is), so a twin with null content is another answer (cross_check_differs), unless a white-space-only "
         "stream is already not ok on its own", SRC_WS)
    # comparable false: ids differ, the white space rule is moot, never a failure
    ds = reasoning_then(["X"]) + weather_call_deltas(0, pieces=(ARGS_PARIS,))
    s = write("ws21_ids_differ_stream.http", chat_stream(ds))
    tids = ids_of(ds)
    tids[2] = 999
    t = write("ws21_ids_differ_twin.http", chat_twin(content=None, calls=[("get_weather", ARGS_PARIS)],
                                                      token_ids=tids, reasoning=REASONING))
    case("ws21_ids_differ_text_differs_not_failure", [s, t], CHAT, "ANY", None,
         "ids differ (comparable false): another generation, the verdict is the stream's own; the difference is "
         "recorded, never a cross-check failure", "docs/cross-check.md, table 'When a pair is comparable'",
         checks={"cross_check.comparable": False, "error_kind!": "cross_check_differs"})
    # twin content "\n\n" but stream has none: the rule goes one way only
    ds = reasoning_then([]) + weather_call_deltas(0, pieces=(ARGS_PARIS,))
    s = write("ws22_whitespace_only_unstreamed_stream.http", chat_stream(ds))
    t = write("ws22_whitespace_only_unstreamed_twin.http", chat_twin(content="\n\n", calls=[("get_weather", ARGS_PARIS)],
                                                                      token_ids=ids_of(ds), reasoning=REASONING))
    case("ws22_whitespace_only_unstreamed", [s, t], CHAT, False, "cross_check_differs",
         "the stream has no content, the twin keeps '\\n\\n' beside its call: vLLM 0.32 would have dropped it "
         "unstreamed, the stream would have carried it; the rule excuses only stream white space absent unstreamed",
         SRC_WS)
    # Responses API: the same whitespace/no-text pair, no token ids: never a cross-check failure
    # (built in build_responses)


# ---------------------------------------------------------------- budget (rule 2)

SRC_B = ("docs/cross-check.md ('Signals one stream shows': 'if it generates exactly the stream's token ids, fewer "
         "than its budget, and stops (stop or tool_calls) ... cleared'; 'A twin that uses the token more (the stream "
         "was cut), sends no ids, or ends by the budget clears nothing'); docs/failures.md; "
         "vllm/v1/core/sched/utils.py check_stop (num_output_tokens >= max_tokens -> FINISHED_LENGTH_CAPPED before "
         "the eos check)")


def budget_stream_deltas():
    # 24 token ids with the finish chunk's [1149, 2]: <|im_end|> as the 24th
    ds = [({}, [1152]), ({}, [1153]), ({}, [1148]), ({}, [201]), ({}, [267]), ({}, [285]), ({}, [259]),
          ({}, [260]), ({}, [320]), ({}, [65]), ({}, [324]),
          (call_start(0), [275]), ({}, [260]), ({}, [346]), ({}, [259]),
          (call_args(0, '{"'), [279]), (call_args(0, "city"), [311]), (call_args(0, '":'), [259]),
          (call_args(0, ' "'), [260]), (call_args(0, "Paris"), [472]), (call_args(0, '"}'), [343]), ({}, [201])]
    return ds


def budget_pair(cid, ok, kind, reason, twin_ids="same", twin_finish="tool_calls", twin_usage=None,
                twin_calls=None, drop_ids_key=False, stream_ids=True, max_tokens="24", checks=None,
                stream_deltas=None, stream_finish_ids=(1149, 2), stream_usage=None, status="200 OK", twin_content=None):
    ds = stream_deltas or budget_stream_deltas()
    sids = ids_of(ds, stream_finish_ids)
    s = write(cid + "_stream.http", chat_stream(ds, finish="tool_calls", ids=stream_ids,
                                                finish_ids=stream_finish_ids, usage=stream_usage))
    if twin_ids == "same":
        tids = sids
    elif callable(twin_ids):
        tids = twin_ids(list(sids))
    else:
        tids = twin_ids
    t = write(cid + "_twin.http", chat_twin(content=twin_content,
                                            calls=twin_calls if twin_calls is not None else [("get_weather", ARGS_PARIS)],
                                            finish=twin_finish, token_ids=tids, usage=twin_usage,
                                            drop_ids_key=drop_ids_key, status=status))
    case(cid, [s, t], CHAT + ["--max-tokens", max_tokens], ok, kind, reason, SRC_B, checks)


def build_budget():
    budget_pair("b01_eos_on_last_token_control", True, None,
                "the twin, given 25, generates the same 24 ids and stops with tool_calls: the model ended by itself",
                checks={"cross_check.ended_by_itself": True, "cross_check.unstreamed_max_tokens": 25})
    budget_pair("b02_twin_one_token_later", False, "budget_used_by_tool_call",
                "the twin uses the 25th token (ids = stream's + one more), so the stream was cut by the budget",
                twin_ids=lambda x: x[:-1] + [201, 2], checks={"cross_check.ended_by_itself": "not_true"})
    budget_pair("b03_twin_different_ids", False, "budget_used_by_tool_call",
                "the twin's 24 ids differ from the stream's (one replaced): another generation proves nothing",
                twin_ids=lambda x: x[:5] + [999] + x[6:], checks={"cross_check.ended_by_itself": "not_true"})
    budget_pair("b04_twin_token_ids_null", False, "budget_used_by_tool_call",
                "the twin sends token_ids null: 'sends no ids ... clears nothing'", twin_ids=None, twin_usage=24)
    budget_pair("b05_twin_token_ids_key_missing", False, "budget_used_by_tool_call",
                "the twin has no token_ids key at all: clears nothing", drop_ids_key=True, twin_ids=None, twin_usage=24)
    budget_pair("b06_twin_token_ids_empty_list", False, "budget_used_by_tool_call",
                "the twin's token_ids is []: not the stream's ids", twin_ids=[], twin_usage=24)
    budget_pair("b07_twin_says_length", False, "budget_used_by_tool_call",
                "same 24 ids but the twin's finish is 'length': 'ends by the budget clears nothing'",
                twin_finish="length")
    budget_pair("b08_twin_usage_counts_budget", False, "budget_used_by_tool_call",
                "same 24 ids, finish tool_calls, but the twin's usage counts 25 completion tokens = its whole budget: "
                "not 'fewer than its budget'", twin_usage=25)
    budget_pair("b09_twin_finish_stop_clears_then_finish_differs", False, "cross_check_differs",
                "same 24 ids, finish 'stop' (the docs: 'stops (stop or tool_calls)'): the budget signal is cleared, "
                "but the finish is compared too and vLLM's auto path says tool_calls on both sides for the same "
                "tokens: streamed tool_calls against unstreamed stop is a difference",
                twin_finish="stop", checks={"cross_check.ended_by_itself": True})
    budget_pair("b10_stream_without_ids", False, "budget_used_by_tool_call",
                "the stream carries no token ids: nothing can show its last token was the model's end",
                stream_ids=False)
    budget_pair("b11_twin_prefix_23_ids", False, "budget_used_by_tool_call",
                "the twin stops after 23 of the stream's 24 ids: not 'exactly the stream's token ids'",
                twin_ids=lambda x: x[:-1])
    budget_pair("b12_twin_http_400", False, "budget_used_by_tool_call",
                "the twin is a 400: nothing is cleared, the streamed verdict stands", twin_ids="same",
                status="400 Bad Request")
    budget_pair("b13_cleared_but_calls_differ", False, "cross_check_differs",
                "the budget is cleared by the same 24 ids, but the twin's call is Lyon: a cross-check failure",
                twin_calls=[("get_weather", '{"city": "Lyon"}')])
    budget_pair("b14_twin_finish_abort", False, "budget_used_by_tool_call",
                "same ids, finish 'abort' (vLLM's aborted request): not a stop, clears nothing", twin_finish="abort")
    budget_pair("b15_twin_finish_null", False, "budget_used_by_tool_call",
                "same ids, finish null: no stop shown, clears nothing", twin_finish=None)
    # the stream's last event lost its ids: 23 ids, usage 24; the twin has those 23 ids and usage 23
    budget_pair("b16_stream_ids_short_of_usage", False, "ANY_NOT_OK",
                "the stream's ids (23) are short of its usage (24); the twin has those 23 ids and used 23: the twin "
                "stopped a token before the stream did, so it does not show the stream's 24th token was the model's "
                "end; not ok either way (budget_used_by_tool_call, or the usage difference)",
                stream_finish_ids=(1149,), stream_usage=24, twin_ids="same", twin_usage=23)
    budget_pair("b24_stream_usage_over_budget_twin_same", False, "budget_used_by_tool_call",
                "the stream's usage says 25 tokens against --max-tokens 24 (24 ids), the twin the same 24 ids and "
                "usage 25, its whole raised budget: 'fewer than its budget' fails on the twin's own count, so "
                "nothing is cleared", stream_usage=25, twin_usage=25)
    ds = budget_stream_deltas()
    ds[5] = ({}, None)   # one chunk without its token_ids: 23 ids streamed, usage 24
    budget_pair("b27_stream_chunk_without_ids_twin_full", False, "budget_used_by_tool_call",
                "one streamed chunk lacks its token_ids (23 ids, usage 24); the twin has all 24: the twin's ids are "
                "not the stream's ids, so nothing is shown about the stream's last token",
                stream_deltas=ds, stream_usage=24, twin_ids=lambda x: x[:5] + [285] + x[5:])
    # the twin answered with a stream (the server ignored stream false)
    ds = budget_stream_deltas()
    a = write("b28_twin_is_a_stream_stream.http", chat_stream(ds, finish="tool_calls", finish_ids=(1149, 2)))
    b = write("b28_twin_is_a_stream_twin.http", chat_stream(ds, finish="tool_calls", finish_ids=(1149, 2)))
    case("b28_twin_is_a_stream", [a, b], CHAT + ["--max-tokens", "24"], False, "budget_used_by_tool_call",
         "the twin's answer is an event stream, not one JSON body: an unstreamed_problem, the streamed verdict stands",
         SRC_B, checks={"cross_check.unstreamed_problem": "nonempty"})
    # named tool choice: vLLM finishes 'stop', which counts as the tool-call finish (docs/apis.md)
    NAMED = ["--tool-choice", "get_weather"]
    ds = budget_stream_deltas()
    for cid, tw, ok, kind, why in (
            ("b25_named_stop_twin_one_more", lambda x: x[:-1] + [201, 2], False, "budget_used_by_tool_call",
             "named tool_choice: finish 'stop' counts as the tool-call finish (docs/apis.md); the whole budget used "
             "and the twin uses the token more: the stream was cut"),
            ("b26_named_stop_twin_same_clears", "same", True, None,
             "named tool_choice, 24 of 24, the twin the same 24 ids and 'stop' under its 25: ended by itself")):
        sids = ids_of(ds, (1149, 2))
        a = write(cid + "_stream.http", chat_stream(ds, finish="stop", finish_ids=(1149, 2)))
        tids = sids if tw == "same" else tw(list(sids))
        b = write(cid + "_twin.http", chat_twin(calls=[("get_weather", ARGS_PARIS)], finish="stop", token_ids=tids))
        case(cid, [a, b], CHAT + NAMED + ["--max-tokens", "24"], ok, kind, why, SRC_B)
    # no budget signal at all: max_tokens 25 > 24 used: ok, twin not raised
    budget_pair("b17_not_whole_budget_control", True, None,
                "24 of 25 tokens used: no budget signal; the twin is the same request",
                max_tokens="25", checks={"cross_check.unstreamed_max_tokens": None})
    # budget cleared, then the arguments' own problem stands
    ds = budget_stream_deltas()
    ds[20] = (call_args(0, 'Paris'), [343])  # args '{"city": "Paris' : not JSON
    budget_pair("b18_cleared_args_not_json", False, "tool_arguments_not_json",
                "the twin clears the budget signal; the stream's arguments '{\"city\": \"Paris' (no closing) stay not "
                "JSON: 'every other signal of the streamed answer alone stands'", stream_deltas=ds,
                twin_calls=[("get_weather", ARGS_PARIS)])
    budget_pair("b19_twin_extra_ids_finish_stop", False, "budget_used_by_tool_call",
                "the twin has 25 ids (one more) and says stop: it used the token more, the stream was cut",
                twin_ids=lambda x: x + [2], twin_finish="stop")
    # Responses and Messages: budget used by a call, no ids: nothing clears it
    build_budget_other_apis()


def resp_events(items, status="completed", usage_out=10, max_out=200, text_done=None, item_done=None,
                completed_output=None, ascii_=None, incomplete=None):
    """items: list of ('message', [deltas]) or ('function_call', [deltas]); overrides per item index."""
    rid = "resp_h49"
    base = {"id": rid, "created_at": CREATED, "incomplete_details": None, "instructions": None, "metadata": None,
            "model": "m", "object": "response", "output": [], "parallel_tool_calls": True, "temperature": 0.0,
            "tool_choice": "auto", "tools": [], "top_p": 1.0, "background": False, "max_output_tokens": max_out,
            "status": "in_progress", "usage": None}
    evs = []
    seq = [0]
    def ev(typ, data):
        data = dict(data)
        data["sequence_number"] = seq[0]
        data["type"] = typ
        seq[0] += 1
        evs.append("event: %s\ndata: %s\n\n" % (typ, _dumps(data, ascii_)))
    ev("response.created", {"response": base})
    ev("response.in_progress", {"response": base})
    out = []
    for oi, (kind, deltas) in enumerate(items):
        full = "".join(deltas)
        if kind == "message":
            iid = "msg_h49_%d" % oi
            ev("response.output_item.added", {"item": {"id": iid, "content": [], "role": "assistant",
                                                       "status": "in_progress", "type": "message"}, "output_index": oi})
            ev("response.content_part.added", {"content_index": 0, "item_id": iid, "output_index": oi,
                                               "part": {"annotations": [], "text": "", "type": "output_text"}})
            for d in deltas:
                ev("response.output_text.delta", {"content_index": 0, "delta": d, "item_id": iid, "logprobs": [],
                                                  "output_index": oi})
            td = (text_done or {}).get(oi, full)
            ev("response.output_text.done", {"content_index": 0, "item_id": iid, "logprobs": [], "output_index": oi,
                                             "text": td})
            ev("response.content_part.done", {"content_index": 0, "item_id": iid, "output_index": oi,
                                              "part": {"annotations": [], "text": td, "type": "output_text"}})
            idt = (item_done or {}).get(oi, td)
            item = {"id": iid, "content": [{"annotations": [], "text": idt, "type": "output_text", "logprobs": None}],
                    "role": "assistant", "status": "completed", "type": "message"}
            ev("response.output_item.done", {"item": item, "output_index": oi})
            co = (completed_output or {}).get(oi, idt)
            out.append({"id": iid, "content": [{"annotations": [], "text": co, "type": "output_text",
                                                 "logprobs": None}], "role": "assistant", "status": "completed",
                        "type": "message"})
        else:
            iid = "fc_h49_%d" % oi
            cid = "call_h49_%d" % oi
            ev("response.output_item.added", {"item": {"arguments": "", "call_id": cid, "name": "get_weather",
                                                       "type": "function_call", "id": iid, "status": "in_progress"},
                                              "output_index": oi})
            for d in deltas:
                ev("response.function_call_arguments.delta", {"delta": d, "item_id": iid, "output_index": oi})
            td = (text_done or {}).get(oi, full)
            ev("response.function_call_arguments.done", {"arguments": td, "item_id": iid, "output_index": oi,
                                                         "name": "get_weather"})
            idt = (item_done or {}).get(oi, td)
            item = {"arguments": idt, "call_id": cid, "name": "get_weather", "type": "function_call", "id": iid,
                    "status": "completed"}
            ev("response.output_item.done", {"item": item, "output_index": oi})
            co = (completed_output or {}).get(oi, idt)
            out.append(dict(item, arguments=co))
    fin = dict(base, output=out, status=status, incomplete_details=incomplete,
               usage={"input_tokens": 3, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": usage_out,
                      "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 3 + usage_out})
    ev("response.completed", {"response": fin})
    return _sse_http(evs), fin


def resp_twin(fin, ascii_=None):
    return _json_http(fin, ascii_)


def msg_events(blocks, stop_reason="end_turn", out_tokens=10, ascii_=None):
    evs = []
    def ev(typ, data):
        data = dict({"type": typ}, **data)
        evs.append("event: %s\ndata: %s\n\n" % (typ, _dumps(data, ascii_)))
    ev("message_start", {"message": {"id": "msg_h49", "type": "message", "role": "assistant", "content": [],
                                     "model": "m", "stop_reason": None, "stop_sequence": None,
                                     "usage": {"input_tokens": 3, "output_tokens": 0}}})
    content = []
    for i, (kind, deltas) in enumerate(blocks):
        if kind == "text":
            ev("content_block_start", {"content_block": {"type": "text", "text": ""}, "index": i})
            for d in deltas:
                ev("content_block_delta", {"delta": {"type": "text_delta", "text": d}, "index": i})
            content.append({"type": "text", "text": "".join(deltas)})
        else:
            ev("content_block_start", {"content_block": {"type": "tool_use", "id": "toolu_h49_%d" % i,
                                                         "name": "get_weather", "input": {}}, "index": i})
            for d in deltas:
                ev("content_block_delta", {"delta": {"type": "input_json_delta", "partial_json": d}, "index": i})
            content.append({"type": "tool_use", "id": "toolu_h49_%d" % i, "name": "get_weather",
                            "input": json.loads("".join(deltas))})
        ev("content_block_stop", {"index": i})
    ev("message_delta", {"delta": {"stop_reason": stop_reason, "stop_sequence": None},
                         "usage": {"input_tokens": 3, "output_tokens": out_tokens}})
    ev("message_stop", {})
    twin = {"id": "msg_h49_twin", "type": "message", "role": "assistant", "content": content, "model": "m",
            "stop_reason": stop_reason, "stop_sequence": None, "usage": {"input_tokens": 3, "output_tokens": out_tokens}}
    return _sse_http(evs), twin


def build_budget_other_apis():
    RESP = ["--api", "responses", "--tools", TOOLS, "--cross-check"]
    MSG = ["--api", "messages", "--tools", TOOLS, "--cross-check"]
    s, fin = resp_events([("function_call", ['{"city": ', '"Paris"}'])], usage_out=24, max_out=24)
    a = write("b20_responses_budget_stream.http", s)
    b = write("b20_responses_budget_twin.http", resp_twin(dict(fin, id="resp_h49_twin")))
    case("b20_responses_budget_twin_completed", [a, b], RESP + ["--max-tokens", "24"], False,
         "budget_used_by_tool_call",
         "Responses: a completed function call with all 24 output tokens used; no token ids on Responses, so the "
         "twin (completed, same call) cannot clear it ('With --cross-check on chat (token ids on both sides)')",
         SRC_B)
    # a twin that smuggles chat-style token_ids into a Responses body: still no ids on the stream
    fin2 = dict(fin, id="resp_h49_twin", usage=dict(fin["usage"], output_tokens=24), token_ids=list(range(24)))
    b = write("b21_responses_budget_twin_with_ids.http", resp_twin(fin2))
    case("b21_responses_budget_twin_with_ids", [a, b], RESP + ["--max-tokens", "24"], False,
         "budget_used_by_tool_call",
         "Responses: the twin carries a token_ids key Responses does not have; the stream has none: clears nothing",
         SRC_B)
    s, twin = msg_events([("tool_use", ['{"city": ', '"Paris"}'])], stop_reason="tool_use", out_tokens=24)
    a = write("b22_messages_budget_stream.http", s)
    b = write("b22_messages_budget_twin.http", _json_http(twin))
    case("b22_messages_budget_twin_tool_use", [a, b], MSG + ["--max-tokens", "24"], False, "budget_used_by_tool_call",
         "Messages: tool_use with all 24 output tokens used; Messages has no token ids, the twin cannot clear it",
         SRC_B)
    # chat with a twin that lies about ids being fine but the stream's usage exceeds max_tokens? (control: Messages
    # with 23 of 24 tokens is ok)
    s, twin = msg_events([("tool_use", ['{"city": ', '"Paris"}'])], stop_reason="tool_use", out_tokens=23)
    a = write("b23_messages_under_budget_stream.http", s)
    b = write("b23_messages_under_budget_twin.http", _json_http(twin))
    case("b23_messages_under_budget_control", [a, b], MSG + ["--max-tokens", "24"], True, None,
         "Messages: 23 of 24 tokens, a finished tool_use: ok, and the twin (same call) is the same", SRC_B)


# ---------------------------------------------------------------- surrogate pairs (rule 3)

SRC_S = ("RFC 8259 section 7 (a character beyond the BMP escaped as a 12-character UTF-16 surrogate pair, e.g. "
         "\"\\uD834\\uDD1E\"); docs/workloads.md (a pair split across two events, 'X\\ud83d' then '\\ude00Y'); "
         "docs/apis.md (closing copies must equal what the deltas assembled: closing_copy_differs); "
         "docs/cross-check.md (text compared with the same ids)")
EMOJI = "\U0001F600"          # U+1F600, \ud83d\ude00
HI, LO = "\ud83d", "\ude00"
BOLD_A = "\U0001D400"         # MATHEMATICAL BOLD CAPITAL A, NFKC -> 'A'; \ud835\udc00


def chat_text_pair(cid, pieces, twin_text, ok, kind, reason, checks=None, twin_ascii=None, stream_ascii=None,
                   twin_ids_same=True, finish="stop"):
    ds = [({"content": p}, [400 + k]) for k, p in enumerate(pieces)]
    s = write(cid + "_stream.http", chat_stream(ds, finish=finish, ascii_=stream_ascii))
    tids = ids_of(ds)
    t = write(cid + "_twin.http", chat_twin(content=twin_text, calls=[], finish=finish, token_ids=tids,
                                            ascii_=twin_ascii))
    case(cid, [s, t], ["--api", "chat", "--cross-check"], ok, kind, reason, SRC_S, checks)


def build_surrogates():
    chat_text_pair("s01_split_pair_twin_raw_utf8", ["X" + HI, LO + "Y"], "X" + EMOJI + "Y", True, None,
                   "the halves of U+1F600 split across two deltas; the twin carries the whole character in UTF-8: "
                   "the same text", checks={"cross_check.same": True})
    chat_text_pair("s02_split_pair_twin_escaped_pair", ["X" + HI, LO + "Y"], "X" + EMOJI + "Y", True, None,
                   "the same, the twin writing the character as the escaped pair '\\ud83d\\ude00'",
                   twin_ascii=True, checks={"cross_check.same": True})
    chat_text_pair("s03_reversed_halves", ["X" + LO, HI + "Y"], "X" + EMOJI + "Y", False, "cross_check_differs",
                   "low half first, then the high half: two lone halves, not U+1F600 (RFC 8259 pairs are high then "
                   "low); a client that sorts or joins them regardless passes a false ok")
    chat_text_pair("s04_dropped_low_half", ["X" + HI, "Y"], "X" + EMOJI + "Y", False, "cross_check_differs",
                   "the low half never came: 'a dropped half is not' the same text")
    chat_text_pair("s05_dropped_high_half", ["X", LO + "Y"], "X" + EMOJI + "Y", False, "cross_check_differs",
                   "the high half never came")
    chat_text_pair("s06_other_character", ["X" + HI, "\ude01Y"], "X" + EMOJI + "Y", False, "cross_check_differs",
                   "the stream's halves make U+1F601, the twin has U+1F600: another character")
    chat_text_pair("s07_lone_half_vs_replacement_char", ["X" + HI, "Y"], "X\ufffdY", False, "cross_check_differs",
                   "a lone high half against U+FFFD: not the same text (a client that decodes with 'replace' "
                   "would equate them)")
    chat_text_pair("s08_nfkc_lookalike", ["X\ud835", "\udc00Y"], "XAY", False, "cross_check_differs",
                   "the halves make U+1D400 MATHEMATICAL BOLD CAPITAL A, whose NFKC form is 'A'; the twin has 'A': "
                   "another character, not the same text")
    chat_text_pair("s09_pair_in_one_delta_escaped", ["X" + EMOJI + "Y"], "X" + EMOJI + "Y", True, None,
                   "control: the pair in one delta, escaped on the wire (ensure_ascii), twin raw", stream_ascii=True)
    chat_text_pair("s10_high_half_then_empty_delta_then_low", ["X" + HI, "", LO + "Y"], "X" + EMOJI + "Y", True, None,
                   "the halves separated by an empty content delta: still one character once assembled "
                   "(the text is the deltas joined)")
    chat_text_pair("s11_two_emojis_split_mid", ["X" + EMOJI + HI, LO + "Y"], "X" + EMOJI + EMOJI + "Y", True, None,
                   "a whole emoji then a split one: the same text")
    chat_text_pair("s12_twin_extra_lone_half", ["X" + HI, LO + "Y"], "X" + EMOJI + HI + "Y", False,
                   "cross_check_differs", "the twin carries an extra lone high half: not the same text")
    chat_text_pair("s13_twin_lone_half_stream_whole", ["X" + EMOJI + "Y"], "X" + HI + "Y", False, "cross_check_differs",
                   "the stream's whole character against a twin with only the high half")
    # split across two tool calls' arguments (outer JSON escapes): the halves belong to different calls
    ds = [(call_start(0), [275]), (call_args(0, '{"city": "X' + HI), [300]),
          (call_start(1), [276]), (call_args(1, LO + 'Y"}'), [301]),
          (call_args(0, '"}'), [302]), (call_args(1, ""), [303])]
    # call 0 assembled: {"city": "X\ud83d"}  call 1 assembled: \ude00Y"}  -> call 1 is not JSON; use a valid split:
    ds = [(call_start(0), [275]), (call_args(0, '{"city": "X' + HI), [300]),
          (call_start(1), [276]), (call_args(1, '{"city": "' + LO + 'Y"}'), [301]),
          (call_args(0, '"}'), [302])]
    s = write("s14_halves_across_two_calls_stream.http", chat_stream(ds))
    t = write("s14_halves_across_two_calls_twin.http",
              chat_twin(calls=[("get_weather", '{"city": "X' + EMOJI + '"}'), ("get_weather", '{"city": "Y"}')],
                        token_ids=ids_of(ds)))
    case("s14_halves_across_two_calls", [s, t], CHAT, False, "cross_check_differs",
         "a high half ends call 0's piece, a low half starts call 1's: halves of different calls are not a pair. "
         "Call 0 is 'X'+lone high, call 1 lone low+'Y'; the twin has 'X\U0001F600' and 'Y': different arguments", SRC_S)
    # split inside one call's arguments at the outer level: a pair
    ds = [(call_start(0), [275]), (call_args(0, '{"city": "X' + HI), [300]), (call_args(0, LO + 'Y"}'), [301])]
    s = write("s15_halves_in_one_call_stream.http", chat_stream(ds))
    t = write("s15_halves_in_one_call_twin.http",
              chat_twin(calls=[("get_weather", '{"city": "X' + EMOJI + 'Y"}')], token_ids=ids_of(ds)))
    case("s15_halves_in_one_call_args", [s, t], CHAT, True, None,
         "one call's arguments split between the halves (outer escapes): assembled, 'X\U0001F600Y', the twin's same "
         "arguments", SRC_S, checks={"cross_check.same": True})
    # split inside the arguments' own JSON escapes (inner level): text '\\ud83d' + '\\ude00'
    ds = [(call_start(0), [275]), (call_args(0, '{"city": "X\\ud83d'), [300]), (call_args(0, '\\ude00Y"}'), [301])]
    s = write("s16_inner_escaped_halves_stream.http", chat_stream(ds))
    t = write("s16_inner_escaped_halves_twin.http",
              chat_twin(calls=[("get_weather", '{"city": "X' + EMOJI + 'Y"}')], token_ids=ids_of(ds)))
    case("s16_inner_escaped_halves_args", [s, t], CHAT, True, None,
         "the arguments' own JSON writes the pair as escapes split across two pieces; equal as JSON to the twin's "
         "raw character (docs/cross-check.md: arguments equal as JSON are the same call, with a note)", SRC_S)
    # inner level, reversed halves: parsed JSON is two lone halves != emoji
    ds = [(call_start(0), [275]), (call_args(0, '{"city": "X\\ude00'), [300]), (call_args(0, '\\ud83dY"}'), [301])]
    s = write("s17_inner_reversed_halves_stream.http", chat_stream(ds))
    t = write("s17_inner_reversed_halves_twin.http",
              chat_twin(calls=[("get_weather", '{"city": "X' + EMOJI + 'Y"}')], token_ids=ids_of(ds)))
    case("s17_inner_reversed_halves_args", [s, t], CHAT, False, "cross_check_differs",
         "the arguments' escapes in the wrong order ('\\ude00\\ud83d'): as JSON two lone halves, not the twin's "
         "U+1F600", SRC_S)
    # reasoning split: compared too
    ds = [({"reasoning": "R" + HI}, [500]), ({"reasoning": "\ude01"}, [501]), ({"content": "ok"}, [502])]
    s = write("s18_reasoning_other_char_stream.http", chat_stream(ds, finish="stop"))
    t = write("s18_reasoning_other_char_twin.http",
              chat_twin(content="ok", calls=[], finish="stop", token_ids=ids_of(ds), reasoning="R" + EMOJI))
    case("s18_reasoning_other_character", [s, t], ["--api", "chat", "--cross-check"], False, "cross_check_differs",
         "the streamed reasoning's halves make U+1F601, the twin's reasoning has U+1F600", SRC_S)

    chat_text_pair("s20_reversed_both_sides", ["X" + LO, HI + "Y"], "X" + LO + HI + "Y", True, None,
                   "the stream's lone halves low-then-high and the twin's the same two escapes in the same order: "
                   "the same text (nothing joined, nothing lost)", checks={"cross_check.same": True})
    # halves split across reasoning and content: not a pair
    ds = [({"reasoning": "R" + HI}, [500]), ({"content": LO + "Y"}, [501])]
    s = write("s19_halves_across_reasoning_and_content_stream.http", chat_stream(ds, finish="stop"))
    t = write("s19_halves_across_reasoning_and_content_twin.http",
              chat_twin(content="Y", calls=[], finish="stop", token_ids=ids_of(ds), reasoning="R" + EMOJI))
    case("s19_halves_across_reasoning_and_content", [s, t], ["--api", "chat", "--cross-check"], False,
         "cross_check_differs",
         "a high half ends the reasoning, a low half starts the content: halves of two texts are no pair; the "
         "twin's reasoning 'R\U0001F600' and text 'Y' differ from the stream's", SRC_S)
    # ---- Responses closing copies
    RESP = ["--api", "responses"]
    def resp_case(cid, items, ok, kind, reason, flags=RESP, **kw):
        s, fin = resp_events(items, **kw)
        a = write(cid + "_stream.http", s)
        case(cid, [a], flags, ok, kind, reason, SRC_S)
    resp_case("r01_split_pair_done_whole", [("message", ["X" + HI, LO + "Y"])], True, None,
              "Responses: output_text.delta 'X'+high, low+'Y'; every closing copy carries 'X\U0001F600Y': the same text")
    resp_case("r02_split_pair_done_whole_escaped", [("message", ["X" + HI, LO + "Y"])], True, None,
              "the same, every event written with \\u escapes", ascii_=True)
    resp_case("r03_done_other_char", [("message", ["X" + HI, LO + "Y"])], False, "closing_copy_differs",
              "the .done copies carry U+1F601 where the deltas make U+1F600",
              text_done={0: "X\U0001F601Y"})
    resp_case("r04_done_nfkc_lookalike", [("message", ["X\ud835", "\udc00Y"])], False, "closing_copy_differs",
              "the deltas make U+1D400 (NFKC 'A'), the copies say 'XAY': another character",
              text_done={0: "XAY"})
    resp_case("r05_reversed_halves_done_whole", [("message", ["X" + LO, HI + "Y"])], False, "closing_copy_differs",
              "the deltas carry the halves low-then-high; the copies carry U+1F600: not the same text",
              text_done={0: "X" + EMOJI + "Y"})
    resp_case("r06_dropped_half_done_whole", [("message", ["X" + HI, "Y"])], False, "closing_copy_differs",
              "the low half dropped from the deltas; the copies carry the whole character",
              text_done={0: "X" + EMOJI + "Y"})
    resp_case("r07_done_replacement_char", [("message", ["X" + HI, LO + "Y"])], False, "closing_copy_differs",
              "the copies carry U+FFFD U+FFFD where the deltas make U+1F600",
              text_done={0: "X\ufffd\ufffdY"})
    resp_case("r08_only_completed_output_differs", [("message", ["X" + HI, LO + "Y"])], False, "closing_copy_differs",
              "every .done is right; only the terminal response.output has U+1F601: 'Every copy is compared'",
              completed_output={0: "X\U0001F601Y"})
    resp_case("r09_args_split_pair_done_whole", [("function_call", ['{"city": "X' + HI, LO + 'Y"}'])], True, None,
              "function_call_arguments.delta split between the halves; .done and the item carry the whole character",
              flags=RESP + ["--tools", TOOLS])
    resp_case("r10_args_done_other_char", [("function_call", ['{"city": "X' + HI, LO + 'Y"}'])], False,
              "closing_copy_differs", "the arguments' .done copy has U+1F601 where the deltas make U+1F600",
              flags=RESP + ["--tools", TOOLS], text_done={0: '{"city": "X\U0001F601Y"}'})
    resp_case("r11_combining_vs_precomposed", [("message", ["cafe", "\u0301"])], False, "closing_copy_differs",
              "the deltas 'cafe'+U+0301 (combining acute), the copies 'caf\u00e9' (NFC-equal, another text)",
              text_done={0: "caf\u00e9"})
    resp_case("r12_item_done_dropped_half", [("message", ["X" + HI, LO + "Y"])], False, "closing_copy_differs",
              "output_text.done and content_part.done right; output_item.done lost the low half",
              item_done={0: "X" + HI + "Y"})
    resp_case("r13_lone_half_copied_as_is", [("message", ["X" + HI, "Y"])], True, None,
              "a lone half in the deltas and the same lone half in every copy: the copies equal what the deltas "
              "assembled (RFC 8259 lets a lone escape parse; docs/record.md keeps such text escaped)")
    resp_case("r14_halves_across_two_items", [("message", ["X" + HI]), ("message", [LO + "Y"])], False,
              "closing_copy_differs",
              "the high half ends message item 0, the low half starts item 1; the copies say item 0 is "
              "'X\U0001F600' and item 1 'Y': halves of two items are no pair",
              text_done={0: "X" + EMOJI, 1: "Y"})
    resp_case("r15_args_split_pair_escaped_everywhere", [("function_call", ['{"city": "X' + HI, LO + 'Y"}'])],
              True, None, "r09 with every event written with \\u escapes (as an ensure_ascii server writes it)",
              flags=RESP + ["--tools", TOOLS], ascii_=True)
    resp_case("r16_args_inner_escaped_halves", [("function_call", ['{"city": "X\\ud83d', '\\ude00Y"}'])],
              True, None, "the arguments' own JSON escapes split across two deltas (text '\\ud83d' + '\\ude00'): "
              "plain text concatenation, every copy the same text", flags=RESP + ["--tools", TOOLS])
    resp_case("r17_args_item_done_other_char", [("function_call", ['{"city": "X' + EMOJI + 'Y"}'])], False,
              "closing_copy_differs", "function call: .done right, output_item.done's arguments carry U+1F601: "
              "'Every copy is compared with the assembled value'", flags=RESP + ["--tools", TOOLS],
              item_done={0: '{"city": "X\U0001F601Y"}'})
    resp_case("r18_args_completed_other_char", [("function_call", ['{"city": "X' + EMOJI + 'Y"}'])], False,
              "closing_copy_differs", "function call: .done and output_item.done right, response.completed's "
              "output carries U+1F601", flags=RESP + ["--tools", TOOLS],
              completed_output={0: '{"city": "X\U0001F601Y"}'})
    resp_case("r19_args_unsplit_pair_control", [("function_call", ['{"city": "X' + EMOJI + 'Y"}'])], True, None,
              "control for r09: the same arguments with the character whole in one delta", flags=RESP + ["--tools", TOOLS])
    # ---- completions: the same split, cross-checked with token ids
    for cid, pieces, twin, ok, kind, why in (
            ("c01_completions_split_pair_twin_whole", ["X" + HI, LO + "Y"], "X" + EMOJI + "Y", True, None,
             "completions text split between the halves; the twin's text has the whole character: the same text"),
            ("c02_completions_split_other_char", ["X" + HI, "\ude01Y"], "X" + EMOJI + "Y", False,
             "cross_check_differs", "completions: the stream's halves make U+1F601, the twin's text U+1F600")):
        evs = []
        for k, p in enumerate(pieces):
            evs.append({"id": "cmpl-h49", "object": "text_completion", "created": CREATED, "model": "m",
                        "choices": [{"index": 0, "text": p, "logprobs": None, "finish_reason": None,
                                     "stop_reason": None, "prompt_token_ids": None, "token_ids": [400 + k]}]})
        evs.append({"id": "cmpl-h49", "object": "text_completion", "created": CREATED, "model": "m",
                    "choices": [{"index": 0, "text": "", "logprobs": None, "finish_reason": "stop",
                                 "stop_reason": None, "prompt_token_ids": None, "token_ids": [2]}]})
        n = len(pieces) + 1
        evs.append({"id": "cmpl-h49", "object": "text_completion", "created": CREATED, "model": "m", "choices": [],
                    "usage": {"prompt_tokens": 3, "total_tokens": 3 + n, "completion_tokens": n}})
        a = write(cid + "_stream.http", _sse_http(["data: " + _dumps(e) + "\n\n" for e in evs] + ["data: [DONE]\n\n"]))
        body = {"id": "cmpl-h49-twin", "object": "text_completion", "created": CREATED, "model": "m",
                "choices": [{"index": 0, "text": twin, "logprobs": None, "finish_reason": "stop", "stop_reason": None,
                             "prompt_logprobs": None, "prompt_token_ids": [1, 85, 394],
                             "token_ids": [400 + k for k in range(len(pieces))] + [2]}],
                "usage": {"prompt_tokens": 3, "total_tokens": 3 + n, "completion_tokens": n}}
        b = write(cid + "_twin.http", _json_http(body))
        case(cid, [a, b], ["--api", "completions", "--cross-check"], ok, kind, why, SRC_S,
             {"cross_check.comparable": True})
    # ---- Messages: halves split in text_delta; the twin whole: comparable null, never a failure; ok
    s, twin = msg_events([("text", ["X" + HI, LO + "Y"])], stop_reason="end_turn")
    a = write("m01_messages_split_pair_stream.http", s)
    b = write("m01_messages_split_pair_twin.http", _json_http(twin))
    case("m01_messages_split_pair_twin_whole", [a, b], ["--api", "messages", "--cross-check"], True, None,
         "Messages text_delta split between the halves; the twin's text has the whole character: the same (and "
         "without token ids never a failure)", SRC_S, checks={"cross_check.same": True})


def main():
    for name in os.listdir(HERE):
        if name.endswith(".http"):
            os.remove(os.path.join(HERE, name))
    build_whitespace()
    build_budget()
    build_surrogates()
    with open(os.path.join(HERE, "cases.json"), "w", encoding="utf-8") as f:
        json.dump(CASES, f, indent=1, ensure_ascii=True)
        f.write("\n")
    print(len(CASES), "cases")


if __name__ == "__main__":
    main()
