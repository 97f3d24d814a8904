#!/usr/bin/env python3
"""Rebuild cases/*.http and cases.json: hostile and valid LiteLLM-dialect Responses streams.

Derived from the real LiteLLM 1.108.7 capture (testdata/litellm-1.108.7/
e3_responses_budget.http) and the rule in docs/dialects.md (dialect `litellm`).
Standard library only.
"""
import copy, json, os, re

HERE = os.path.dirname(os.path.abspath(__file__))
CAPTURE = os.path.join(HERE, "..", "litellm-1.108.7", "e3_responses_budget.http")
CASES = os.path.join(HERE, "cases")
DONE = "[DONE]"


def parse_capture(path):
    raw = open(path, "rb").read()
    head, body = raw.split(b"\r\n\r\n", 1) if b"\r\n\r\n" in raw else raw.split(b"\n\n", 1)
    head_lines = head.decode().replace("\r\n", "\n").split("\n")
    status, headers = head_lines[0], [l for l in head_lines[1:] if l]
    # de-chunk
    data, rest = b"", body
    while True:
        line, rest = rest.split(b"\n", 1)
        size = int(line.strip(), 16)
        if size == 0:
            break
        data += rest[:size]
        rest = rest[size:]
        rest = rest.split(b"\n", 1)[1]  # CRLF / LF after chunk data
    events = []
    for block in data.decode().split("\n\n"):
        block = block.strip("\n")
        if not block:
            continue
        assert block.startswith("data: "), block
        payload = block[len("data: "):]
        events.append(DONE if payload == DONE else json.loads(payload))
    return status, headers, events


STATUS, HEADERS, CAPTURED = parse_capture(CAPTURE)
BASE_HEADERS = [h for h in HEADERS if not h.lower().startswith("transfer-encoding")]
NO_LITELLM = [h for h in BASE_HEADERS if not h.lower().startswith("x-litellm-version")]


def completed_events():
    """The capture edited into a finished answer: status completed, below the budget."""
    ev = copy.deepcopy(CAPTURED)
    term = ev[-2]
    assert term["type"] == "response.completed"
    r = term["response"]
    r["status"] = "completed"
    r["incomplete_details"] = None
    r["max_output_tokens"] = 64
    r["usage"]["output_tokens"] = 16
    for e in ev:
        if isinstance(e, dict) and "response" in e:
            e["response"]["max_output_tokens"] = 64
    return ev


def sse(ev, event_line=None):
    """One SSE event; event_line: None (LiteLLM: none), True (the data's type) or a string."""
    if ev == DONE:
        return "data: [DONE]\n\n"
    text = ""
    if event_line is True:
        text += "event: %s\n" % ev["type"]
    elif isinstance(event_line, str):
        text += "event: %s\n" % event_line
    return text + "data: " + json.dumps(ev, separators=(",", ":")) + "\n\n"


def http(blocks, headers, framing="chunked"):
    head = STATUS + "\r\n" + "".join(h + "\r\n" for h in headers)
    if framing.startswith("chunked"):
        body = b""
        for b in blocks:
            bb = b.encode()
            body += b"%x\r\n" % len(bb) + bb + b"\r\n"
        if framing != "chunked-no-last":
            body += b"0\r\n\r\n"
        head += "Transfer-Encoding: chunked\r\n\r\n"
    else:
        body = "".join(blocks).encode()
        head += "Content-Length: %d\r\n\r\n" % (len(body) + (64 if framing == "content-length-short" else 0))
    return head.encode() + body


def reseq(ev):
    n = 0
    for e in ev:
        if isinstance(e, dict):
            e["sequence_number"] = n
            n += 1
    return ev


def idx(ev, typ):
    return next(i for i, e in enumerate(ev) if isinstance(e, dict) and e["type"] == typ)


CASE_LIST = []
DOC = "docs/dialects.md, dialect litellm (Responses)"


def case(name, blocks, args, ok, layer, kind, rule, headers=BASE_HEADERS, framing="chunked"):
    n = len(CASE_LIST) + 1
    fname = "%02d_%s.http" % (n, name)
    with open(os.path.join(CASES, fname), "wb") as f:
        f.write(http(blocks, headers, framing))
    CASE_LIST.append({"name": "%02d_%s" % (n, name), "files": [fname], "api": "responses",
                      "args": args, "expect_ok": ok, "expect_layer": layer,
                      "expect_kind": kind, "rule": rule})


def build():
    os.makedirs(CASES, exist_ok=True)
    for f in os.listdir(CASES):
        os.remove(os.path.join(CASES, f))
    OK = ["--max-tokens", "64"]
    LL = ["--dialect", "litellm", "--max-tokens", "64"]
    C = completed_events()           # ends with response.completed, [DONE]
    Cnd = C[:-1]                     # no [DONE]

    # ---- valid ----
    case("ok_header_done", [sse(e) for e in C], OK, True, None, None,
         DOC + ": x-litellm-version detects litellm; no event: lines, the data's type stands for them; one [DONE] after response.completed status completed (16 of 64 tokens)")
    case("ok_header_no_done", [sse(e) for e in Cnd], OK, True, None, None,
         DOC + ": one [DONE] MAY follow the terminal event; without it the terminal event still ends the answer")
    case("ok_flag_no_header_done", [sse(e) for e in C], LL, True, None, None,
         DOC + ": --dialect litellm named, no x-litellm-version header: the dialect applies")
    case("ok_some_event_lines", [sse(e, True if i % 3 == 0 else None) for i, e in enumerate(C)], OK, True, None, None,
         DOC + ": an event: line that is there must agree with the data's type; here every third event carries the right one")
    case("ok_all_event_lines_done", [sse(e, True if e != DONE else None) for e in C], OK, True, None, None,
         DOC + ": every event carries its right event: line, [DONE] after the terminal event, header present")
    case("ok_content_length", [sse(e) for e in C], OK, True, None, None,
         DOC + ": the same stream framed by Content-Length instead of chunked", framing="content-length")
    hdr_case = [("X-LiteLLM-Version" + h[len("x-litellm-version"):]) if h.lower().startswith("x-litellm-version") else h for h in BASE_HEADERS]
    case("ok_header_mixed_case", [sse(e) for e in C], OK, True, None, None,
         DOC + " + RFC 9110 5.1 (field names are case-insensitive): X-LiteLLM-Version still detects litellm", headers=hdr_case)

    # ---- cuts before the terminal event (message ends cleanly) ----
    for after in ("response.created", "response.output_text.delta", "response.output_text.done",
                  "response.output_item.done"):
        i = idx(C, after)
        short = after.split(".", 1)[1].replace(".", "_")
        case("cut_after_" + short, [sse(e) for e in C[:i + 1]], OK, False, "application", "eof_before_done",
             DOC + ": every other rule of the vendor protocol holds; docs/apis.md Responses: no terminal event is eof_before_done (cut after %s, HTTP message complete)" % after)

    # ---- [DONE] misuse ----
    case("done_twice", [sse(e) for e in C + [DONE]], OK, False, "protocol", "event_after_terminal",
         DOC + ": after the terminal event ONE data: [DONE] and nothing else; a second [DONE] is an event after the end")
    extra = copy.deepcopy(C[idx(C, "response.output_text.delta")])
    extra["sequence_number"] = C[-2]["sequence_number"] + 1
    case("event_after_done", [sse(e) for e in C + [extra]], OK, False, "protocol", "event_after_terminal",
         DOC + ": after the terminal event one [DONE] and nothing else; docs/apis.md: any event after the one that ends the stream is event_after_terminal")
    i = idx(C, "response.output_item.done")
    case("done_before_terminal", [sse(e) for e in C[:i + 1] + [DONE]], OK, False, None, None,
         DOC + ": [DONE] may follow only the terminal event; here it comes after output_item.done and no terminal event ever comes")
    case("done_then_terminal", [sse(e) for e in C[:i + 1] + [DONE, C[-2]]], OK, False, None, None,
         DOC + ": [DONE] may follow only the terminal event; here [DONE] comes before response.completed, which then arrives")

    # ---- event: line vs data type ----
    j = idx(C, "response.output_text.delta")
    case("event_line_disagrees", [sse(e, "response.output_text.done" if k == j else None) for k, e in enumerate(C)], OK,
         False, "protocol", "event_type_mismatch",
         DOC + ": an event: line that is there must still agree with the data's type (delta labelled output_text.done)")
    case("event_line_message", [sse(e, "message" if k == 1 else None) for k, e in enumerate(C)], OK,
         True, None, None,
         DOC + ": an explicit 'event: message' (the SSE default name) is present and names another type than response.in_progress"
         "; decided otherwise in the repository: to SSE, an event with no event line has the type \"message\" (WHATWG HTML "
         "9.2.6), so `event: message` is the same as no line, and under litellm the data's type stands for it "
         "(docs/dialects.md says so)")
    bad = copy.deepcopy(C); bad[1]["type"] = ["response.in_progress"]
    case("type_not_string", [sse(e) for e in bad], OK, False, "protocol", None,
         DOC + ": the data's type stands for the event field, so it must be a string; here response.in_progress has type as a list (field_type expected)")
    bad = copy.deepcopy(C); del bad[1]["type"]
    case("type_missing", [sse(e) for e in bad], OK, False, "protocol", None,
         DOC + ": no event: line and no type in the data: the event names no type at all (event 1, in place of response.in_progress)")

    # ---- sequence_number ----
    bad = copy.deepcopy(C)
    for e in bad[j:]:
        if isinstance(e, dict):
            e["sequence_number"] += 1
    case("seq_skipped", [sse(e) for e in bad], OK, False, "protocol", "sequence_number",
         DOC + ": sequence_number counts from 0 by 1; one skipped at the first delta")
    bad = copy.deepcopy(C)
    bad = bad[:j + 1] + [copy.deepcopy(bad[j])] + bad[j + 1:]
    # duplicated delta with the same sequence_number; remove its text effect? keep it repeated: the
    # repetition is what is tested (a relayed event sent twice)
    case("seq_repeated", [sse(e) for e in bad], OK, False, "protocol", "sequence_number",
         DOC + ": sequence_number counts by 1; the first delta relayed twice with the same sequence_number")
    bad = copy.deepcopy(C)
    for e in bad:
        if isinstance(e, dict):
            e["sequence_number"] += 1
    case("seq_from_one", [sse(e) for e in bad], OK, False, "protocol", "sequence_number",
         DOC + ": sequence_number counts from 0; here from 1")

    # ---- closing copies ----
    def edit(typ, fn):
        ev = copy.deepcopy(C); fn(ev[idx(ev, typ)]); return ev
    case("text_done_differs", [sse(e) for e in edit("response.output_text.done", lambda e: e.__setitem__("text", e["text"] + "X"))],
         OK, False, "protocol", "closing_copy_differs", DOC + ": closing copies equal what the deltas assembled: output_text.done text differs")
    case("part_done_differs", [sse(e) for e in edit("response.content_part.done", lambda e: e["part"].__setitem__("text", e["part"]["text"][:-1]))],
         OK, False, "protocol", "closing_copy_differs", DOC + ": content_part.done part.text lacks the last character")
    case("item_done_differs", [sse(e) for e in edit("response.output_item.done", lambda e: e["item"]["content"][0].__setitem__("text", "other"))],
         OK, False, "protocol", "closing_copy_differs", DOC + ": output_item.done item text differs from the deltas")
    case("terminal_output_differs", [sse(e) for e in edit("response.completed", lambda e: e["response"]["output"][0]["content"][0].__setitem__("text", " '.AD"))],
         OK, False, "protocol", "closing_copy_differs", DOC + ": the terminal event's response.output text differs from the deltas")

    # ---- outcome ----
    case("budget_real_capture", [sse(e) for e in CAPTURED], ["--max-tokens", "16"], False, "application", "budget_exhausted",
         DOC + ": the real capture unchanged: response.completed with status incomplete, incomplete_details max_output_tokens; the outcome is read from response.status")
    case("budget_flag_no_header", [sse(e) for e in CAPTURED], ["--dialect", "litellm", "--max-tokens", "16"], False, "application", "budget_exhausted",
         DOC + ": the real capture, header removed, --dialect litellm named", headers=NO_LITELLM)
    inc = copy.deepcopy(CAPTURED); inc[-2]["type"] = "response.incomplete"
    case("response_incomplete_done", [sse(e) for e in inc], ["--max-tokens", "16"], False, "application", "budget_exhausted",
         DOC + ": response.incomplete is a terminal event too; [DONE] may follow it; the budget decides")
    fl = copy.deepcopy(C)
    fl[-2]["type"] = "response.failed"
    fl[-2]["response"]["status"] = "failed"
    fl[-2]["response"]["error"] = {"code": "server_error", "message": "upstream failed"}
    case("response_failed_done", [sse(e) for e in fl], OK, False, "application", "response_failed",
         DOC + ": response.failed is terminal; [DONE] after it does not make it ok")
    st = copy.deepcopy(C); st[-2]["response"]["status"] = "in_progress"
    case("completed_status_in_progress", [sse(e) for e in st], OK, False, "application", "unexpected_finish",
         DOC + ": the outcome is read from response.status, not the event's name: response.completed with status in_progress")
    two = copy.deepcopy(C); t2 = copy.deepcopy(two[-2]); t2["sequence_number"] += 1
    case("terminal_twice", [sse(e) for e in two[:-1] + [t2, DONE]], OK, False, "protocol", "event_after_terminal",
         DOC + ": after the terminal event one [DONE] and nothing else: a second response.completed (sequence_number counting on)")

    # ---- where the dialect must not apply ----
    case("strict_default_no_header", [sse(e) for e in C], OK, False, "protocol", "event_type_mismatch",
         DOC + ": under the default (strict) without the header, events without an event: line are refused", headers=NO_LITELLM)
    case("header_but_forced_strict", [sse(e) for e in C], ["--dialect", "strict", "--max-tokens", "64"], False, "protocol", "event_type_mismatch",
         DOC + ": --dialect NAME applies that dialect and nothing else; with --dialect strict the header does not select litellm")
    case("strict_no_header_event_lines_done", [sse(e, True if e != DONE else None) for e in C], OK, False, "protocol", None,
         "docs/apis.md Responses (strict, no header): every event has its event: line, but a data: [DONE] follows response.completed: under the vendor rules anything after the terminal event is refused (event_after_terminal expected)", headers=NO_LITELLM)

    case("strict_event_message_control", [sse(e, "message" if k == 1 else True) for k, e in enumerate(Cnd)], OK, False, "protocol", "event_type_mismatch",
         "control for case 17, docs/apis.md Responses (strict, no header): every event names its type in its event: line; response.in_progress labelled 'event: message'", headers=NO_LITELLM)

    # ---- more: SSE syntax, framing, vendor rules under the dialect ----
    case("ok_done_no_space_and_comment", [sse(e) for e in Cnd] + ["data:[DONE]\n\n", ": keepalive\n\n"], OK, True, None, None,
         DOC + " + WHATWG SSE (one space after the colon is optional; a comment line is no event): 'data:[DONE]' then a comment")
    case("ok_vllm_bytes_with_header", [sse(e, True) for e in Cnd], OK, True, None, None,
         DOC + ": the vendor stream itself (every event: line right, no [DONE]) with the header: the dialect only allows, it must not require [DONE]")
    unk = copy.deepcopy(C)
    unk.insert(idx(unk, "response.output_text.done"), {"type": "response.litellm_extra", "sequence_number": 0})
    reseq(unk)
    case("ok_unknown_event_type", [sse(e) for e in unk], OK, True, None, None,
         "docs/apis.md: an event type the client does not know is skipped and listed in skipped_events; " + DOC + ": its type comes from the data")
    bad = copy.deepcopy(C); del bad[j]["sequence_number"]
    case("seq_missing", [sse(e) for e in bad], OK, False, "protocol", "sequence_number",
         DOC + ": sequence_number (unlike llama.cpp's dialect) must be on every event; one delta without it")
    bad = copy.deepcopy(C); bad[j]["sequence_number"] = str(bad[j]["sequence_number"])
    case("seq_string", [sse(e) for e in bad], OK, False, "protocol", None,
         DOC + ": sequence_number is an integer; one delta carries it as a string ('4')")
    bad = copy.deepcopy(C); k = idx(bad, "response.output_text.done")
    late = copy.deepcopy(bad[j]); bad.insert(k + 1, late); reseq(bad)
    case("delta_after_text_done", [sse(e) for e in bad], OK, False, "protocol", None,
         DOC + " + docs/apis.md: a content part whose text is done accepts only content_part.done; a delta after output_text.done (event_out_of_order expected)")
    bad = copy.deepcopy(C)
    for e in bad:
        if isinstance(e, dict) and "output_index" in e:
            e["output_index"] = 1
    case("output_index_skips", [sse(e) for e in bad], OK, False, "protocol", "part_index_skips",
         DOC + " + docs/apis.md: output_item.added at the next output_index; here the first item opens at 1")
    case("chunked_no_last_chunk", [sse(e) for e in C], OK, False, "transport", None,
         DOC + ": the terminal event and [DONE] arrived, then the connection closed without the last chunk: the HTTP message is not complete", framing="chunked-no-last")
    case("content_length_short", [sse(e) for e in C], OK, False, "transport", "body_truncated",
         DOC + ": everything up to [DONE], then the connection closes 64 bytes short of Content-Length", framing="content-length-short")

    with open(os.path.join(HERE, "cases.json"), "w") as f:
        json.dump(CASE_LIST, f, indent=1)
        f.write("\n")
    print("%d cases written" % len(CASE_LIST))


if __name__ == "__main__":
    build()
