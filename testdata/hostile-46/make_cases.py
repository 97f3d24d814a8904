#!/usr/bin/env python3
"""Write cases.json: the hostile-46 cases (sessions and traces on the load's engine: shards, warm-up,
repeats, processes, sweeps, gates, CSV, report, server metrics, signals).

Black box: written from README.md and docs/ only (cli.md's flag table and the paragraph after it,
workloads.md, goodput.md's shards, decisions.md's warm-up and gates, loads.md). Each case says what the
docs promise (`doc`) and how it is checked (`expect`); the case format is hostile-44's.
Run: python3 make_cases.py && python3 run_cases.py [-j N]
"""
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = []


def case(id, area, doc, args, expect, **kw):
    c = {"id": id, "area": area, "doc": doc, "args": args, "expect": expect}
    c.update(kw)
    CASES.append(c)


def jl(*objs):
    return "".join(json.dumps(o) + "\n" for o in objs)


# ---- scripted answers (the hostile-44 shapes) ----------------------------------------------------

def chunk(delta, finish=None):
    return {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}


def chat_text(text="READY", done=True):
    ev = [chunk({"role": "assistant", "content": ""}), chunk({"content": text}), chunk({}, finish="stop"),
          {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": [],
           "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}}]
    if done:
        ev.append("[DONE]")
    return {"headers": [], "events": ev}


OK = chat_text()
BROKEN = chat_text(done=False)  # no [DONE]: application, eof_before_done
SERVER = {"responses": [OK], "match": [{"contains": "BREAK", "response": BROKEN}]}
SLOW = dict(SERVER, delay_s=0.4)

TOOL = {"type": "function", "function": {"name": "get_weather", "description": "Get the weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


def sessions(n, turns=2, brk=None, **extra):
    """n sessions s0..s(n-1) of `turns` turns; session `brk` has BREAK in its first turn."""
    out = []
    for i in range(n):
        t = ["S%d turn %d%s" % (i, k + 1, " BREAK" if (i == brk and k == 0) else "") for k in range(turns)]
        s = {"id": "s%d" % i, "turns": t}
        s.update(extra)
        out.append(s)
    return jl(*out)


def trace(n, step_ms=20, brk=None, **extra):
    out = []
    for i in range(n):
        line = {"timestamp": i * step_ms, "prompt": "L%d%s" % (i, " BREAK" if i == brk else "")}
        line.update(extra)
        out.append(line)
    return jl(*out)


S4 = sessions(4)            # 4 sessions, 8 runs
S6 = sessions(6)            # 6 sessions, 12 runs
T6 = trace(6)               # 6 lines
URL = ["--url", "{ORIGIN}/v1/chat/completions", "--model", "m", "--quiet"]
SES = URL + ["--sessions", "s.jsonl"]
TRC = URL + ["--trace", "t.jsonl"]
FX = ["--fixture", "ok", "--quiet"]
REFUSED = {"rc": 2, "one_line_error": True, "absent": ["o.jsonl"], "asserts": ["len(reqs) == 0"]}

# Python expressions the asserts reuse ------------------------------------------------------------
GEN = "[q for q in reqs if q['path'].endswith('/chat/completions')]"
IDX = "sorted(r['session_index'] for r in R('o.jsonl') if r.get('session_end'))"
RUNS_CONTIGUOUS = "sorted(r['run'] for r in R('o.jsonl')) == list(range(len(R('o.jsonl'))))"
ONE_END_PER_SESSION = ("all(sum(1 for r in R('o.jsonl') if r['session_index'] == i and r.get('session_end')) == 1 "
                       "for i in set(r['session_index'] for r in R('o.jsonl')))")
END_IS_LAST = ("all(max((r for r in R('o.jsonl') if r['session_index'] == i), key=lambda r: (r['turn'], r['round']))"
               ".get('session_end') is not None for i in set(r['session_index'] for r in R('o.jsonl')))")

CLI_T = "docs/cli.md#flags-and-workloads: "
WL = "docs/workloads.md: "
GP = "docs/goodput.md#one-load-from-many-machines: "
DEC = "docs/decisions.md: "
LD = "docs/loads.md: "

# =================================================================================================
# F: the flag table's "no" cells, and bad values: refused before anything is sent or created
# =================================================================================================
REFUSE_DOC = CLI_T + ("'A flag the workload does not honour is never ignored: it is refused before anything is sent and "
                      "before any file is created, exit 2 and one line that names it and the workload'; the table says "
                      "%s is 'no' for %s")
for fid, flag, extra, wl, files in [
    ("F01-ses-prompt", "--prompt", ["--prompt", "hi"], "sessions", None),
    ("F02-ses-tools", "--tools", ["--tools", "tools.json"], "sessions", {"tools.json": json.dumps([TOOL])}),
    ("F03-ses-json-schema", "--json-schema", ["--json-schema", "sc.json"], "sessions",
     {"sc.json": json.dumps({"type": "object"})}),
    ("F04-ses-prompts", "--prompts", ["--prompts", "p.jsonl"], "sessions", {"p.jsonl": jl("a", "b")}),
    ("F05-ses-input-tokens", "--input-tokens", ["--input-tokens", "20"], "sessions", None),
    ("F06-ses-capture", "--capture", ["--capture", "c.http"], "sessions", None),
    ("F07-ses-trace-speed", "--trace-speed", ["--trace-speed", "2"], "sessions", None),
    ("F08-ses-block-size", "--block-size", ["--block-size", "16"], "sessions", None),
    ("F09-trc-rate", "--rate", ["--rate", "5"], "trace", None),
    ("F10-trc-duration", "--duration", ["--duration", "1"], "trace", None),
    ("F11-trc-arrivals", "--arrivals", ["--arrivals", "constant"], "trace", None),
    ("F12-trc-output-tokens", "--output-tokens", ["--output-tokens", "8"], "trace", None),
    ("F13-trc-repeat-seeds", "--repeat-seeds", ["--repeat", "2", "--repeat-seeds", "same"], "trace", None),
    ("F14-trc-rates", "--rates", ["--rates", "1,2"], "trace", None),
    ("F15-trc-concurrencies", "--concurrencies", ["--concurrencies", "1,2"], "trace", None),
    ("F16-trc-find-capacity", "--find-capacity", ["--find-capacity", "1:4"], "trace", None),
]:
    base = SES if wl == "sessions" else TRC
    fl = dict(files or {})
    fl.update({"s.jsonl": S4} if wl == "sessions" else {"t.jsonl": T6})
    exp = dict(REFUSED, stderr_contains=[flag, "--sessions" if wl == "sessions" else "--trace"])
    case(fid, "flags", REFUSE_DOC % (flag, "--" + wl), base + extra + ["--output", "o.jsonl"], exp, files=fl,
         server=SERVER)

case("F17-ses-arrivals-default-value", "flags",
     CLI_T + "'--arrivals spaces an open loop's starts: without --rate (or --rates, --find-capacity) it is refused. A flag "
     "on the command line counts as given whatever its value (--arrivals poisson, the default, is refused without --rate "
     "as --arrivals constant is)' -- with --sessions too",
     SES + ["--arrivals", "poisson", "--output", "o.jsonl"], dict(REFUSED, stderr_contains=["--arrivals"]),
     files={"s.jsonl": S4}, server=SERVER)
case("F18-trc-seed-to-server", "flags",
     CLI_T + "'--seed seeds whatever the workload draws ...; where nothing is drawn (one run or a trace to a server, say) "
     "it is refused'",
     TRC + ["--seed", "3", "--output", "o.jsonl"], dict(REFUSED, stderr_contains=["--seed"]),
     files={"t.jsonl": T6}, server=SERVER)
for fid, val, why in [("F19-shard-I-eq-N", "2/2", "I must be below N (shard I from 0 of N)"),
                      ("F20-shard-zero", "0/0", "N of 0 shards"),
                      ("F21-shard-garbage", "1-2", "not I/N")]:
    case(fid, "shards", "docs/cli.md: '--shard I/N: send shard I (from 0) of N'; docs/cli.md exit 2: 'bad arguments ... one "
         "line on stderr naming the flag as typed, nothing sent, no file created' (%s)" % why,
         SES + ["--shard", val, "--output", "o.jsonl"], dict(REFUSED, stderr_contains=["--shard"]),
         files={"s.jsonl": S4}, server=SERVER)
for fid, val, why in [("F22-start-at-no-Z", "{UTC_PLUS_2S_NOZ}", "the Z is required"),
                      ("F23-start-at-2h-behind", "{UTC_MINUS_2H}", "at most an hour behind"),
                      ("F24-start-at-2d-ahead", "{UTC_PLUS_2D}", "at most a day ahead")]:
    case(fid, "shards", GP + "'--start-at is a UTC time (the Z is required), at most a day ahead and an hour behind' "
         "(%s); exit 2 before anything is sent, with --sessions" % why,
         SES + ["--start-at", val, "--output", "o.jsonl"], dict(REFUSED, stderr_contains=["--start-at"]),
         files={"s.jsonl": S4}, server=SERVER)
case("F25-ses-bad-gate", "gates",
     DEC + "'A bad expression (... a percentile it does not compute such as p95 ...) is one line on stderr and exit status "
     "2, before anything is sent or any file is created' -- on a --sessions load",
     SES + ["--fail-if", "first_text_ms.p95 > 1", "--output", "o.jsonl"], REFUSED,
     files={"s.jsonl": S4}, server=SERVER)
case("F26-ses-bad-warmup", "warmup",
     "docs/cli.md: '--warmup N or Ss'; a value that is neither is a bad argument: exit 2, one line, nothing sent, no file",
     SES + ["--warmup", "abc", "--output", "o.jsonl"], dict(REFUSED, stderr_contains=["--warmup"]),
     files={"s.jsonl": S4}, server=SERVER)
case("F27-ses-shard-with-rates", "shards",
     GP + "'Not with --rates: a sweep's later steps start when the earlier ones end in each process, so shards would "
     "drift apart; shard one rate at a time' -- a sharded sweep of sessions must not run silently drifting: refused",
     SES + ["--shard", "0/2", "--rates", "2,4", "--duration", "1", "--output", "o.jsonl"], REFUSED,
     files={"s.jsonl": S4}, server=SERVER)
case("F28-summary-with-shard", "shards",
     LD + "'--summary and --compare only read: a flag that only a run uses (--runs, --concurrency, --capture, --url...) is "
     "exit 2 with them' -- --shard sends a share of a load",
     ["--summary", "x.jsonl", "--shard", "0/2"], {"rc": 2, "one_line_error": True},
     files={"x.jsonl": ""})
case("F29-ses-csv-exists", "csv",
     "docs/cli.md: '--csv FILE: new file'; 'An existing file is refused and left as it was'; exit 2: 'an unusable output "
     "path ... nothing sent, no file created' -- with --sessions",
     SES + ["--csv", "c.csv", "--output", "o.jsonl"],
     dict(REFUSED, asserts=["len(reqs) == 0", "open(os.path.join(D, 'c.csv')).read() == 'keep\\n'"]),
     files={"s.jsonl": S4, "c.csv": "keep\n"}, server=SERVER)
case("F30-ses-metrics-file-exists", "metrics",
     LD + "'Every scrape is one line of OUTPUT.server-metrics.jsonl ... created with the output, never overwritten, so "
     "an existing one is exit 2 before anything is sent' -- with --sessions",
     SES + ["--server-metrics", "--output", "o.jsonl"], REFUSED,
     files={"s.jsonl": S4, "o.server-metrics.jsonl": "old\n"}, server=SERVER)

# =================================================================================================
# D: shards of sessions and traces
# =================================================================================================
case("D01-ses-shard-0-of-2", "shards",
     CLI_T + "'--shard I/N sends the sessions or lines i with i % N == I'; docs/workloads.md: session_index 'the "
     "session's number in the load ... --shard I/N sends the sessions with session_index % N == I'; goodput.md: "
     "load.plan's shard and shards",
     SES + ["--shard", "0/2", "--output", "o.jsonl"],
     {"rc": 0, "asserts": [IDX + " == [0, 2, 4]",
                           "sorted(set(r['session'] for r in R('o.jsonl'))) == ['s0', 's2', 's4']",
                           "len(R('o.jsonl')) == 6", "len(%s) == 6" % GEN,
                           "all(r['load']['plan']['shard'] == 0 and r['load']['plan']['shards'] == 2 for r in R('o.jsonl'))",
                           "out['sessions']['sessions'] == 3"]},
     files={"s.jsonl": S6}, server=SERVER)
case("D02-ses-shard-1-of-2", "shards",
     CLI_T + "'--shard I/N sends the sessions or lines i with i % N == I' (shard 1 of 2: sessions 1, 3, 5, whole)",
     SES + ["--shard", "1/2", "--output", "o.jsonl"],
     {"rc": 0, "asserts": [IDX + " == [1, 3, 5]", "len(R('o.jsonl')) == 6", "len(%s) == 6" % GEN,
                           "sorted(set(r['session'] for r in R('o.jsonl'))) == ['s1', 's3', 's5']",
                           "sorted((r['session'], r['turn']) for r in R('o.jsonl')) == "
                           "[(s, t) for s in ('s1', 's3', 's5') for t in (1, 2)]"]},
     files={"s.jsonl": S6}, server=SERVER)
SH3 = [SES + ["--start-at", "{UTC_PLUS_4S}", "--shard", "%d/3" % i,
                   "--output", "sh%d.jsonl" % i] for i in range(3)]
case("D03-ses-three-shards-merge", "shards",
     GP + "'Sessions (--sessions) are sharded by the session: shard I runs the sessions i with i % N == I, whole ... "
     "The summary of the N files then counts the runs, verdicts and planned runs that one process's load would'; "
     "three shards started together by --start-at",
     ["--summary", "sh0.jsonl", "sh1.jsonl", "sh2.jsonl"],
     {"rc": 0, "asserts": ["out['runs'] == 12", "out['planned_runs'] == 12", "out['sessions']['sessions'] == 6",
                           "out['sessions']['planned'] == 6", "out['sessions']['turns'] == 12",
                           "sorted(r['session_index'] for f in ('sh0.jsonl', 'sh1.jsonl', 'sh2.jsonl') for r in R(f) "
                           "if r.get('session_end')) == list(range(6))",
                           "len(set(r['load']['plan']['id'] for f in ('sh0.jsonl', 'sh1.jsonl', 'sh2.jsonl') "
                           "for r in R(f))) == 1", "len(%s) == 12" % GEN]},
     files={"s.jsonl": S6}, server=SERVER, pre=[{"parallel": SH3, "rc": 0, "timeout": 40}], timeout=40)
SKEYS = ["runs", "ok", "not_ok", "planned_runs", "warmup_runs", "not_ok_by_kind", "ok_ratio"]
SSKEYS = ["sessions", "planned", "ok", "not_ok", "runs", "turns", "turns_not_started", "tool_rounds", "not_ok_by_kind"]
case("D04-ses-shards-equal-whole", "shards",
     GP + "'the N shards together send exactly the load one process would ... The summary of the N files then counts the "
     "runs, verdicts and planned runs that one process's load would' (a load with one failing session: the merged "
     "summary's counts and sessions block equal the unsharded load's)",
     ["--summary", "a.jsonl", "b.jsonl"],
     {"rc": 1, "asserts": ["all(out[k] == P[0]['out'][k] for k in %r)" % SKEYS,
                           "all(out['sessions'][k] == P[0]['out']['sessions'][k] for k in %r)" % SSKEYS,
                           "out['sessions']['not_ok'] == 1 and out['sessions']['turns_not_started'] == 1"]},
     files={"s.jsonl": sessions(5, brk=3)}, server=SERVER,
     pre=[{"args": SES + ["--output", "whole.jsonl"], "rc": 1},
          {"args": SES + ["--shard", "0/2", "--output", "a.jsonl"], "rc": 0},
          {"args": SES + ["--shard", "1/2", "--output", "b.jsonl"], "rc": 1}],
     post=[{"args": ["--summary", "whole.jsonl"], "rc": 1}])
case("D05-summary-shard-missing", "shards",
     GP + "'--summary of the files checks, for each sharded plan, that every shard is there and none is given twice, and "
     "refuses otherwise with exit 2 and a line that names the shard: plan 3f0c...: shard 2/4 missing' (sessions)",
     ["--summary", "a.jsonl"], {"rc": 2, "stderr_contains": ["1/2"]},
     files={"s.jsonl": S4}, server=SERVER,
     pre=[{"args": SES + ["--shard", "0/2", "--output", "a.jsonl"], "rc": 0}])
case("D06-summary-shard-twice", "shards",
     GP + "'... refuses otherwise with exit 2 and a line that names the shard: ... shard 1/4 of plan 3f0c... is given "
     "twice' (sessions; the same shard's file under two names)",
     ["--summary", "a.jsonl", "b.jsonl", "a2.jsonl"], {"rc": 2, "stderr_contains": ["twice"]},
     files={"s.jsonl": S4}, server=SERVER,
     pre=[{"args": SES + ["--shard", "0/2", "--output", "a.jsonl"], "rc": 0,
           "then": [{"file": "a.jsonl", "to": "a2.jsonl"}]},
          {"args": SES + ["--shard", "1/2", "--output", "b.jsonl"], "rc": 0}])
case("D07-trc-shards-merge", "shards",
     GP + "'A trace (--trace) is sharded the same way, by its lines: shard I replays the lines i with i % N == I ... "
     "(a test replays a 40-line trace as 4 processes and finds each line once, in one plan)'; workloads.md: "
     "'--summary of their files is the trace's'",
     ["--summary", "a.jsonl", "b.jsonl"],
     {"rc": 0, "asserts": ["out['runs'] == 6", "out['planned_runs'] == 6",
                           "sorted(r['trace']['line'] for f in ('a.jsonl', 'b.jsonl') for r in R(f)) == "
                           "sorted(r['trace']['line'] for r in R('whole.jsonl'))",
                           "len(set(r['trace']['line'] for f in ('a.jsonl', 'b.jsonl') for r in R(f))) == 6",
                           "len(set(r['load']['plan']['id'] for f in ('a.jsonl', 'b.jsonl') for r in R(f))) == 1"]},
     files={"t.jsonl": T6}, server=SERVER,
     pre=[{"parallel": [TRC + ["--shard", "0/2", "--start-at", "{UTC_PLUS_4S}", "--output", "a.jsonl"],
                        TRC + ["--shard", "1/2", "--start-at", "{UTC_PLUS_4S}", "--output", "b.jsonl"]], "rc": 0},
          {"args": TRC + ["--output", "whole.jsonl"], "rc": 0}], timeout=40)
case("D08-trc-shard-1-of-2-prompts", "shards",
     WL + "'shard I replays the lines i (from 0) with i % N == I' -- shard 1/2 of 6 lines sends the prompts of lines "
     "1, 3 and 5, each once",
     TRC + ["--shard", "1/2", "--output", "o.jsonl"],
     {"rc": 0, "asserts": ["sorted(q['body']['messages'][-1]['content'] for q in %s) == ['L1', 'L3', 'L5']" % GEN,
                           "len(R('o.jsonl')) == 3"]},
     files={"t.jsonl": T6}, server=SERVER)
case("D09-ses-more-shards-than-sessions", "shards",
     GP + "'A shard that the plan leaves nothing to send (--shard 2/3 of 2 sessions, runs or lines) is refused, exit 2 "
     "and one line, before anything is sent' (the docs said nothing of it when this case was first written: triage.json) "
     "-- and the other two shards' files are then not the whole plan: --summary says shard 2/3 is missing, exit 2",
     ["--summary", "a.jsonl", "b.jsonl"], {"rc": 2, "stderr_contains": ["shard 2/3"]},
     files={"s.jsonl": sessions(2)}, server=SERVER,
     pre=[{"args": SES + ["--shard", "0/3", "--output", "a.jsonl"], "rc": 0},
          {"args": SES + ["--shard", "1/3", "--output", "b.jsonl"], "rc": 0},
          {"args": SES + ["--shard", "2/3", "--output", "c.jsonl"], "rc": 2}])
case("D10-summary-shards-of-two-plans", "shards",
     GP + "'--summary of the files checks, for each sharded plan, that every shard is there' -- shard 0/2 of one plan and "
     "shard 1/2 of another sessions file (the same ids and first turns, but one turn per session instead of two) are "
     "two plans each missing a shard: exit 2, not a whole",
     ["--summary", "a.jsonl", "b.jsonl"], {"rc": 2, "stderr_contains": ["missing"]},
     files={"s.jsonl": S4, "s2.jsonl": sessions(4, turns=1)}, server=SERVER,
     pre=[{"args": SES + ["--shard", "0/2", "--output", "a.jsonl"], "rc": 0},
          {"args": URL + ["--sessions", "s2.jsonl", "--shard", "1/2", "--output", "b.jsonl"], "rc": 0}])
case("D11-ses-shards-with-repeat", "shards",
     CLI_T + "'--repeat K runs the whole file K times' and '--shard I/N sends the sessions ... i with i % N == I': two "
     "shards of --repeat 2 summarize as the unsharded --repeat 2 load (16 runs, 8 sessions), exit 0",
     ["--summary", "a.jsonl", "b.jsonl"],
     {"rc": 0, "asserts": ["out['runs'] == 16", "out['sessions']['sessions'] == 8", "out['planned_runs'] == 16"]},
     files={"s.jsonl": S4}, server=SERVER,
     pre=[{"args": SES + ["--repeat", "2", "--shard", "0/2", "--output", "a.jsonl"], "rc": 0},
          {"args": SES + ["--repeat", "2", "--shard", "1/2", "--output", "b.jsonl"], "rc": 0}])
case("D12-ses-shard-with-processes", "shards",
     GP + "'each shard may add --processes of its own' -- shard 1/2 of 6 sessions with --processes 2 runs sessions "
     "1, 3, 5, each whole and once",
     SES + ["--shard", "1/2", "--processes", "2", "--concurrency", "2", "--output", "o.jsonl"],
     {"rc": 0, "asserts": [IDX + " == [1, 3, 5]", "len(R('o.jsonl')) == 6", "len(%s) == 6" % GEN, RUNS_CONTIGUOUS]},
     files={"s.jsonl": S6}, server=SERVER)
case("D13-ses-start-at-in-plan", "shards",
     GP + "'Every record of a load carries load.plan: ... its shard, its shards, its runs and its start_at' and "
     "'Each process waits for it' -- a --sessions load with --start-at 4 s ahead: plan.start_at is that time, and no "
     "run starts before it",
     SES + ["--start-at", "{UTC_PLUS_4S}", "--output", "o.jsonl"],
     {"rc": 0, "asserts": ["all(r['load']['plan']['start_at'] is not None for r in R('o.jsonl'))",
                           "min(r['started_at'] for r in R('o.jsonl'))[:19] >= "
                           "R('o.jsonl')[0]['load']['plan']['start_at'][:19]"]},
     files={"s.jsonl": sessions(2, turns=1)}, server=SERVER, timeout=40)
case("D14-trc-shard-keeps-timestamps", "shards",
     WL + "'shard I replays the lines i (from 0) with i % N == I, each at its timestamp after the shared start'; "
     "'Each record keeps trace.scheduled_ms' -- in shard 1/2 line 3 (timestamp 300 ms) is scheduled at 300 ms, not at "
     "the shard's own second slot",
     TRC + ["--shard", "1/2", "--output", "o.jsonl"],
     {"rc": 0, "asserts": ["sorted(round(r['trace']['scheduled_ms']) for r in R('o.jsonl')) == [100, 300, 500]"]},
     files={"t.jsonl": trace(6, step_ms=100)}, server=SERVER)
case("D15-summary-shards-lost-record", "lost",
     GP + "'The summary of the N files then counts the runs, verdicts and planned runs that one process's load would'; "
     "loads.md: 'When the records of a load fall short of that, one line names what is missing and the exit status is "
     "1' -- a session's last record removed from one shard's file",
     ["--summary", "a.jsonl", "b.jsonl"], {"rc": 1, "stderr_contains": ["warning"]},
     files={"s.jsonl": S4}, server=SERVER,
     pre=[{"args": SES + ["--shard", "0/2", "--output", "a.jsonl"], "rc": 0, "then": [{"file": "a.jsonl",
                                                                                        "drop_lines": [-1]}]},
          {"args": SES + ["--shard", "1/2", "--output", "b.jsonl"], "rc": 0}])

# =================================================================================================
# W: warm-up
# =================================================================================================
WU = DEC + "'So do --sessions: the first N sessions (or those started in the first S seconds) run whole, every one of " \
           "their runs marked, and are left out of the summary and of its sessions block'"
case("W01-ses-warmup-2", "warmup",
     WU + "; loads.md: warmup_runs counts them, runs the others",
     SES + ["--warmup", "2", "--output", "o.jsonl"],
     {"rc": 0, "asserts": ["sorted(set(r['session_index'] for r in R('o.jsonl') if r['warmup'])) == [0, 1]",
                           "all(r['warmup'] is False for r in R('o.jsonl') if r['session_index'] >= 2)",
                           "out['warmup_runs'] == 4", "out['runs'] == 8", "out['sessions']['sessions'] == 4",
                           "out['sessions']['planned'] == 4", "out['planned_runs'] >= out['runs']",
                           "len(R('o.jsonl')) == 12"]},
     files={"s.jsonl": S6}, server=SERVER)
case("W02-ses-warmup-failure-left-out", "warmup",
     WU + "; decisions.md: 'the summary, its gates and the report leave them out' -- a warm-up session that fails does "
     "not fail the load (exit 0, not_ok 0)",
     SES + ["--warmup", "1", "--output", "o.jsonl"],
     {"rc": 0, "asserts": ["out['not_ok'] == 0", "out['sessions']['not_ok'] == 0", "out['warmup_runs'] == 1",
                           "out['not_ok_by_kind'] == {}"]},
     files={"s.jsonl": sessions(4, brk=0)}, server=SERVER)
case("W03-ses-failure-after-warmup", "warmup",
     WU + " -- the control: the failing session is the second, not warmed up: exit 1",
     SES + ["--warmup", "1", "--output", "o.jsonl"],
     {"rc": 1, "asserts": ["out['not_ok'] == 1", "out['sessions']['not_ok'] == 1"]},
     files={"s.jsonl": sessions(4, brk=1)}, server=SERVER)
case("W04-ses-warmup-summary-again", "warmup",
     DEC + "'--summary of the file leaves them out the same way' (sessions): the saved file of a load whose warm-up "
     "session failed summarizes to exit 0, the same counts",
     ["--summary", "o.jsonl"],
     {"rc": 0, "asserts": ["out['not_ok'] == 0",          "out['warmup_runs'] == 1", "out['sessions']['sessions'] == 3"]},
     files={"s.jsonl": sessions(4, brk=0)}, server=SERVER,
     pre=[{"args": SES + ["--warmup", "1", "--output", "o.jsonl"], "rc": [0, 1]}])  # the load's own exit: W02
case("W05-trc-warmup-failure-left-out", "warmup",
     DEC + "'A --trace replay takes --warmup too: its first N lines ... run at their timestamps, marked, and are left out "
     "of the summary and of its trace block' -- a failing first line under --warmup 2: exit 0",
     TRC + ["--warmup", "2", "--output", "o.jsonl"],
     {"rc": 0, "asserts": ["out['runs'] == 4", "out['warmup_runs'] == 2", "out['not_ok'] == 0",
                           "sorted(r['trace']['line'] for r in R('o.jsonl') if r['warmup']) == "
                           "sorted(r['trace']['line'] for r in R('o.jsonl'))[:2]", "len(R('o.jsonl')) == 6"]},
     files={"t.jsonl": trace(6, brk=0)}, server=SERVER)
case("W06-ses-warmup-all", "warmup",
     DEC + "'(a summary of no runs has no ratio, and fails)' -- every session warmed up leaves no run to judge: the "
     "default gate cannot hold, so the exit status is not 0",
     SES + ["--warmup", "4", "--output", "o.jsonl"], {"rc": [1, 2]},
     files={"s.jsonl": S4}, server=SERVER)
case("W07-ses-warmup-seconds-whole-sessions", "warmup",
     WU + " -- --warmup 0.75s with sessions started at 2/s (constant): session 0 (at 0 s) is warm-up, sessions from "
     "index 2 (at 1 s and later) are not, and every run of a session carries its session's mark",
     SES + ["--rate", "2", "--arrivals", "constant", "--duration", "2", "--warmup", "0.75s", "--output", "o.jsonl"],
     {"rc": 0, "asserts": ["all(r['warmup'] for r in R('o.jsonl') if r['session_index'] == 0)",
                           "not any(r['warmup'] for r in R('o.jsonl') if r['session_index'] >= 2)",
                           "all(len(set(r['warmup'] for r in R('o.jsonl') if r['session_index'] == i)) == 1 "
                           "for i in set(r['session_index'] for r in R('o.jsonl')))"]},
     files={"s.jsonl": S4}, server=dict(SERVER, delay_s=0.3), timeout=40)
case("W08-ses-warmup-processes", "warmup",
     WU + "; cli.md: '--warmup N marks the first N sessions ... --processes P spreads them over P forked processes' -- "
     "with --processes 2 the warm-up is still sessions 0 and 1 of the load, not the first of each process",
     SES + ["--warmup", "2", "--processes", "2", "--concurrency", "2", "--output", "o.jsonl"],
     {"rc": 0, "asserts": ["sorted(set(r['session_index'] for r in R('o.jsonl') if r['warmup'])) == [0, 1]",
                           "out['warmup_runs'] == 4", "out['runs'] == 8"]},
     files={"s.jsonl": S6}, server=SERVER)
case("W09-ses-warmup-csv", "warmup",
     LD + "'--csv ... one row per run ... warmup ... ok and warmup are True or False' -- with --sessions --warmup 1, the "
     "CSV's warm-up rows are the first session's runs, and there is a row per record",
     SES + ["--warmup", "1", "--csv", "c.csv", "--output", "o.jsonl"],
     {"rc": 0, "asserts": ["len(lines('c.csv')) == 1 + len(R('o.jsonl'))",
                           "sum(1 for row in __import__('csv').DictReader(open(os.path.join(D, 'c.csv'))) "
                           "if row['warmup'] == 'True') == 2"]},
     files={"s.jsonl": S4}, server=SERVER)
case("W10-trc-warmup-seconds", "warmup",
     DEC + "'its first N lines (or those due in its first S seconds) run at their timestamps, marked' -- lines due at 0, "
     "100, 200 ... ms with --warmup 0.15s: lines 0 and 1 are warm-up, the rest not",
     TRC + ["--warmup", "0.15s", "--output", "o.jsonl"],
     {"rc": 0, "asserts": ["sorted(r['trace']['scheduled_ms'] for r in R('o.jsonl') if r['warmup']) == [0, 100]",
                           "out['warmup_runs'] == 2"]},
     files={"t.jsonl": trace(6, step_ms=100)}, server=SERVER)
case("W11-ses-warmup-report", "warmup",
     DEC + "'the summary, its gates and the report leave them out' -- a --sessions report with the warm-up session's "
     "failure: the page must not count the warm-up's failure (its error kind appears nowhere)",
     SES + ["--warmup", "1", "--report", "r.html", "--output", "o.jsonl"],
     {"rc": 0, "asserts": ["os.path.exists(os.path.join(D, 'r.html'))",
                           "'eof_before_done' not in open(os.path.join(D, 'r.html')).read()"]},
     files={"s.jsonl": sessions(3, brk=0)}, server=SERVER)

# =================================================================================================
# R: repeats
# =================================================================================================
REP = LD + "'Each repeat is a load of its own (its own load.id, and load.repeat from 0) in the one evidence file ... The " \
           "summary counts every run of every repeat'; cli.md: '--repeat K runs the whole file K times'"
case("R01-ses-repeat-2", "repeat",
     REP + " -- sessions: each repeat runs every session, session keys (load.id, session_index) do not collide",
     SES + ["--repeat", "2", "--output", "o.jsonl"],
     {"rc": 0, "asserts": ["len(set(r['load']['id'] for r in R('o.jsonl'))) == 2",
                           "sorted(set(r['load']['repeat'] for r in R('o.jsonl'))) == [0, 1]",
                           "all(sorted(r['session_index'] for r in R('o.jsonl') if r.get('session_end') and "
                           "r['load']['repeat'] == k) == [0, 1, 2, 3] for k in (0, 1))",
                           "out['runs'] == 16", "out['sessions']['sessions'] == 8", "out['sessions']['planned'] == 8",
                           "out['repeats']['count'] == 2"]},
     files={"s.jsonl": S4}, server=SERVER)
case("R02-ses-repeat-summary", "repeat",
     REP + "; '--summary of the file recomputes them' -- the saved file of a sessions --repeat 2: exit 0, 16 runs, "
     "8 sessions, none reported missing",
     ["--summary", "o.jsonl"],
     {"rc": 0, "stderr_lacks": ["warning"],
      "asserts": ["out['runs'] == 16", "out['sessions']['sessions'] == 8", "out['repeats']['count'] == 2",
                  "out['planned_runs'] == 16"]},
     files={"s.jsonl": S4}, server=SERVER, pre=[{"args": SES + ["--repeat", "2", "--output", "o.jsonl"], "rc": 0}])
case("R03-ses-repeat-lost-end", "lost",
     WL + "'--summary FILE ... checks that the file is whole: each of the load's load.sessions sessions has records, each "
     "ends on its session_end record' -- the last record of a --repeat 2 file removed: exit 1 with one warning",
     ["--summary", "o.jsonl"], {"rc": 1, "stderr_contains": ["warning"]},
     files={"s.jsonl": S4}, server=SERVER,
     pre=[{"args": SES + ["--repeat", "2", "--output", "o.jsonl"], "rc": 0,
           "then": [{"file": "o.jsonl", "drop_lines": [-1]}]}])
case("R04-trc-repeat-3", "repeat",
     REP + " -- a trace replayed 3 times: 18 runs, every line once per repeat; --summary of the file: exit 0",
     TRC + ["--repeat", "3", "--output", "o.jsonl"],
     {"rc": 0, "asserts": ["out['runs'] == 18", "len(R('o.jsonl')) == 18",
                           "len(set((r['load']['repeat'], r['trace']['line']) for r in R('o.jsonl'))) == 18",
                           "P[0]['rc'] == 0 and P[0]['out']['runs'] == 18"]},
     files={"t.jsonl": T6}, server=SERVER, post=[{"args": ["--summary", "o.jsonl"]}])
# a session's due time: its first run's start less how late it started (offset_ms - queued_ms), to the 5 ms
SCHED = ("{k: sorted((r['session_index'], round((r['offset_ms'] - r['queued_ms']) / 5)) for r in R('o.jsonl') "
         "if r['load']['repeat'] == k and r['turn'] == 1) for k in (0, 1)}")
case("R05-ses-repeat-seeds-same", "repeat",
     LD + "'With --repeat-seeds fresh (the default) repeat i seeds its arrivals with --seed + i; with same, every repeat "
     "has --seed's schedule' -- sessions at --rate 6 (Poisson, seed 5): under same, both repeats have the same "
     "sessions due at the same times",
     SES + ["--rate", "6", "--duration", "1", "--seed", "5", "--repeat", "2", "--repeat-seeds", "same",
            "--output", "o.jsonl"],
     {"rc": 0, "asserts": ["(lambda s: s[0] == s[1] and len(s[0]) > 0)(%s)" % SCHED]},
     files={"s.jsonl": sessions(4, turns=1)}, server=SERVER, timeout=40)
case("R06-ses-repeat-seeds-fresh", "repeat",
     LD + "'With --repeat-seeds fresh (the default) repeat i seeds its arrivals with --seed + i' -- sessions at --rate 6 "
     "(Poisson, seed 5): the two repeats' schedules differ",
     SES + ["--rate", "6", "--duration", "1", "--seed", "5", "--repeat", "2", "--output", "o.jsonl"],
     {"rc": 0, "asserts": ["(lambda s: s[0] != s[1])(%s)" % SCHED]},
     files={"s.jsonl": sessions(4, turns=1)}, server=SERVER, timeout=40)
case("R07-ses-repeat-processes", "repeat",
     REP + "; goodput.md: --processes: 'Every record comes back to the first process' -- --repeat 2 --processes 2: "
     "every (repeat, session, turn) exactly once",
     SES + ["--repeat", "2", "--processes", "2", "--concurrency", "2", "--output", "o.jsonl"],
     {"rc": 0, "asserts": ["len(R('o.jsonl')) == 16",
                           "len(set((r['load']['repeat'], r['session_index'], r['turn']) for r in R('o.jsonl'))) == 16",
                           "all(sorted(r['run'] for r in R('o.jsonl') if r['load']['repeat'] == k) == list(range(8)) "
                           "for k in (0, 1))"]},
     files={"s.jsonl": S4}, server=SERVER)
case("R08-ses-repeat-warmup", "repeat",
     LD + "'Each repeat is a load of its own'; decisions.md: warm-up sessions are 'left out of the summary' -- with "
     "--repeat 2 --warmup 1 no warm-up run is counted in runs: runs + warmup_runs == every record",
     SES + ["--repeat", "2", "--warmup", "1", "--output", "o.jsonl"],
     {"rc": 0, "asserts": ["out['runs'] + out['warmup_runs'] == len(R('o.jsonl'))",
                           "out['warmup_runs'] == sum(1 for r in R('o.jsonl') if r['warmup'])",
                           "out['sessions']['sessions'] == len(set((r['load']['id'], r['session_index']) "
                           "for r in R('o.jsonl') if not r['warmup']))"]},
     files={"s.jsonl": S4}, server=SERVER)

# =================================================================================================
# P: processes, and signals
# =================================================================================================
PROC = CLI_T + "'--processes P spreads them over P forked processes the same way'; goodput.md: 'Every record comes " \
               "back to the first process, which alone writes the evidence file'"
case("P01-ses-processes-2", "processes",
     PROC + " -- 6 sessions of 2 turns over 2 processes: 12 records, each session once and whole, runs 0..11",
     SES + ["--processes", "2", "--concurrency", "2", "--output", "o.jsonl"],
     {"rc": 0, "asserts": [IDX + " == list(range(6))", "len(R('o.jsonl')) == 12", RUNS_CONTIGUOUS,
                           ONE_END_PER_SESSION, END_IS_LAST, "len(%s) == 12" % GEN, "out['runs'] == 12"]},
     files={"s.jsonl": S6}, server=SERVER)
case("P02-ses-processes-more-than-sessions", "processes",
     PROC + " -- 3 processes for 2 sessions: each session once, exit 0",
     SES + ["--processes", "3", "--concurrency", "3", "--output", "o.jsonl"],
     {"rc": 0, "asserts": [IDX + " == [0, 1]", "len(R('o.jsonl')) == 4", "len(%s) == 4" % GEN]},
     files={"s.jsonl": sessions(2)}, server=SERVER)
case("P03-trc-processes-2", "processes",
     PROC + " -- a trace of 6 lines over 2 processes: each line once",
     TRC + ["--processes", "2", "--output", "o.jsonl"],
     {"rc": 0, "asserts": ["len(R('o.jsonl')) == 6", "len(set(r['trace']['line'] for r in R('o.jsonl'))) == 6",
                           "len(%s) == 6" % GEN, "sorted(r['run'] for r in R('o.jsonl')) == list(range(6))"]},
     files={"t.jsonl": T6}, server=SERVER)
case("P04-ses-processes-agent-tools", "processes",
     PROC + "; workloads.md 'How a session runs' -- the example sessions (tools) on --fixture agent over 2 processes: 3 "
     "sessions whole, every tool round sent, exit 0",
     ["--fixture", "agent", "--quiet", "--sessions", "sessions.jsonl", "--runs", "3", "--processes", "2",
               "--concurrency", "2", "--output", "o.jsonl"],
     {"rc": 0, "asserts": ["out['sessions']['sessions'] == 3", "out['sessions']['ok'] == 3",
                           "out['sessions']['turns'] == 9", "out['sessions']['tool_rounds'] == 9",
                           "out['runs'] == 18", RUNS_CONTIGUOUS]},
     files={"sessions.jsonl": open(os.path.join(HERE, "..", "examples", "sessions.jsonl")).read()})
case("P05-ses-processes-failing-session", "processes",
     PROC + "; workloads.md: 'A run that is not ok ends its session there ... The session's last record (the failing "
     "run) carries session_end; the turns after it are not started' -- with --processes 2",
     SES + ["--processes", "2", "--concurrency", "2", "--output", "o.jsonl"],
     {"rc": 1, "asserts": ["[r['session_end']['ended_by'] for r in R('o.jsonl') if r['session_index'] == 2] == "
                           "['eof_before_done']",
                           "[r['session_end']['not_started_turns'] for r in R('o.jsonl') if r['session_index'] == 2]"
                           " in ([1], [[2]], [['S2 turn 2']])",
                           "len(R('o.jsonl')) == 7", RUNS_CONTIGUOUS, ONE_END_PER_SESSION]},
     files={"s.jsonl": sessions(4, brk=2)}, server=SERVER)
case("P06-ses-processes-csv", "processes",
     PROC + "; cli.md: '--csv writes a row per run' -- with --processes 2, the CSV's runs are the records' runs",
     SES + ["--processes", "2", "--concurrency", "2", "--csv", "c.csv", "--output", "o.jsonl"],
     {"rc": 0, "asserts": ["sorted(int(row['run']) for row in __import__('csv').DictReader(open(os.path.join(D, "
                           "'c.csv')))) == sorted(r['run'] for r in R('o.jsonl'))", "len(R('o.jsonl')) == 8"]},
     files={"s.jsonl": S4}, server=SERVER)
SIGDOC = (LD + "'Ctrl+C (or SIGTERM) stops new runs from starting and interrupts the runs in flight, which end with "
          "error_layer interrupted and keep what had arrived. The file ends with exactly one valid line per run that "
          "started ... the exit status is 130 (143 for SIGTERM)'; workloads.md: 'SIGINT or SIGTERM starts no new session, "
          "and the runs in flight end as interrupted'; session_end ended_by 'interrupted'")
SIG_ASSERTS = ["valid('o.jsonl')", "len(R('o.jsonl')) >= 2",
               "len(set(r['run'] for r in R('o.jsonl'))) == len(R('o.jsonl'))",
               "len(set((r['session_index'], r['turn'], r['round']) for r in R('o.jsonl'))) == len(R('o.jsonl'))",
               ONE_END_PER_SESSION, END_IS_LAST,
               "any(r['error_layer'] == 'interrupted' for r in R('o.jsonl'))",
               "P[0]['rc'] == 1 and 'Traceback' not in P[0]['stderr']"]
case("P07-ses-processes-sigint", "signals",
     SIGDOC + " -- Ctrl+C (to the process group, as a terminal sends it) during sessions over --processes 2: exit 130, "
     "every line valid, no record lost or doubled, every started session ends on its session_end; --summary of "
     "the file is exit 1 (not whole), no traceback",
     SES + ["--processes", "2", "--concurrency", "4", "--output", "o.jsonl"],
     {"rc": 130, "asserts": SIG_ASSERTS},
     files={"s.jsonl": sessions(8, turns=3)}, server=SLOW,
     signal={"when_lines": ["o.jsonl", 2], "group": True, "then_wait": 0.1},
     post=[{"args": ["--summary", "o.jsonl"]}])
case("P08-ses-processes-sigterm", "signals",
     SIGDOC + " -- SIGTERM to the first process during sessions over --processes 2: exit 143, same wholeness",
     SES + ["--processes", "2", "--concurrency", "4", "--output", "o.jsonl"],
     {"rc": 143, "asserts": SIG_ASSERTS},
     files={"s.jsonl": sessions(8, turns=3)}, server=SLOW,
     signal={"when_lines": ["o.jsonl", 2], "sig": "TERM", "then_wait": 0.1},
     post=[{"args": ["--summary", "o.jsonl"]}])
case("P09-ses-processes-sigint-csv-metrics", "signals",
     SIGDOC + "; every file the load creates is evidence: after Ctrl+C with --processes 2, --csv has a row per record and "
     "the server-metrics file holds only valid scrape lines, at least one (the start's)",
     ["--fixture", "ok", "--quiet", "--sessions", "s.jsonl", "--processes", "2", "--concurrency", "4", "--csv", "c.csv",
      "--server-metrics", "--output", "o.jsonl"],
     {"rc": 130, "asserts": ["valid('o.jsonl')", "len(lines('c.csv')) == 1 + len(R('o.jsonl'))",
                             "valid('o.server-metrics.jsonl') and len(lines('o.server-metrics.jsonl')) >= 1",
                             ONE_END_PER_SESSION]},
     files={"s.jsonl": sessions(8, turns=3)},
     signal={"when_lines": ["o.jsonl", 3], "group": True, "then_wait": 0.1})
case("P10-ses-sigint-during-start-at", "signals",
     GP + "'Each process waits for it (Ctrl+C still cancels)'; cli.md: 130 'interrupted by Ctrl+C' -- Ctrl+C while a "
     "--processes 2 sessions load waits for --start-at 30 s ahead: exit 130 at once, nothing sent, the evidence file "
     "(if any) holds only valid lines",
     SES + ["--processes", "2", "--start-at", "{UTC_PLUS_30S}", "--output", "o.jsonl"],
     {"rc": 130, "asserts": ["len(reqs) == 0", "not os.path.exists(os.path.join(D, 'o.jsonl')) or valid('o.jsonl')"]},
     files={"s.jsonl": S4}, server=SERVER, signal={"when_lines": [None, 0], "then_wait": 2.5, "group": True},
     timeout=20)
case("P11-trc-processes-sigint", "signals",
     SIGDOC + " -- a trace over --processes 2: exit 130, one valid line per line that started, none doubled",
     TRC + ["--processes", "2", "--concurrency", "4", "--output", "o.jsonl"],
     {"rc": 130, "asserts": ["valid('o.jsonl')", "len(R('o.jsonl')) >= 2",
                             "len(set(r['trace']['line'] for r in R('o.jsonl'))) == len(R('o.jsonl'))",
                             "any(r['error_layer'] == 'interrupted' for r in R('o.jsonl'))"]},
     files={"t.jsonl": trace(30, step_ms=50)}, server=SLOW,
     signal={"when_lines": ["o.jsonl", 2], "group": True, "then_wait": 0.1})
case("P12-ses-sigint-summary-not-ok", "signals",
     SIGDOC + "; loads.md: 'The summary is printed with planned_runs beside runs' and exit 130 -- the printed summary of "
     "an interrupted sessions load says that sessions are missing: sessions.planned above sessions.sessions, or "
     "interrupted runs counted not ok",
     SES + ["--concurrency", "2", "--output", "o.jsonl"],
     {"rc": 130, "asserts": ["out is not None", "out['sessions']['planned'] > out['sessions']['ok']"]},
     files={"s.jsonl": sessions(8, turns=3)}, server=SLOW,
     signal={"when_lines": ["o.jsonl", 2], "then_wait": 0.1})

# =================================================================================================
# K: keep-alive, cross-check, output budgets
# =================================================================================================
case("K01-ses-keep-alive-one-session", "keepalive",
     WL + "'With --keep-alive, each session keeps one connection for all its runs' -- one session of 3 turns: its "
     "runs after the first are on a reused connection (not refused for want of --runs 2)",
     ["--fixture", "ok", "--quiet", "--sessions", "s.jsonl", "--keep-alive", "--output", "o.jsonl"],
     {"rc": 0, "asserts": ["[r['connection']['reused'] for r in sorted(R('o.jsonl'), key=lambda r: r['turn'])] == "
                           "[False, True, True]"]},
     files={"s.jsonl": sessions(1, turns=3)})
case("K02-ses-no-keep-alive", "keepalive",
     WL + "the control of K01: without --keep-alive no run of a session reuses a connection",
     ["--fixture", "ok", "--quiet", "--sessions", "s.jsonl", "--output", "o.jsonl"],
     {"rc": 0, "asserts": ["not any(r['connection']['reused'] for r in R('o.jsonl'))"]},
     files={"s.jsonl": sessions(1, turns=3)})
case("K03-trc-keep-alive", "keepalive",
     CLI_T + "'--keep-alive keeps each worker's connection between runs' (trace: yes) -- 4 lines 400 ms apart at "
     "--concurrency 1: the later runs reuse the connection",
     ["--fixture", "ok", "--quiet", "--trace", "t.jsonl", "--concurrency", "1", "--keep-alive", "--output", "o.jsonl"],
     {"rc": 0, "asserts": ["sum(1 for r in R('o.jsonl') if r['connection']['reused']) >= 2"]},
     files={"t.jsonl": trace(4, step_ms=400)})
case("K04-ses-keep-alive-processes", "keepalive",
     CLI_T + "'--keep-alive keeps each worker's connection between runs' with '--processes P': 2 sessions of 3 turns "
     "over 2 processes still reuse their connections",
     ["--fixture", "ok", "--quiet", "--sessions", "s.jsonl", "--keep-alive", "--processes", "2", "--concurrency", "2",
      "--output", "o.jsonl"],
     {"rc": 0, "asserts": ["sum(1 for r in R('o.jsonl') if r['connection']['reused']) >= 4"]},
     files={"s.jsonl": sessions(2, turns=3)})
XC = [q for q in ["[q for q in reqs if q['body'] and q['body'].get('stream') is False]"]][0]
case("K05-ses-cross-check-history", "crosscheck",
     CLI_T + "'--cross-check sends each run's unstreamed twin, a session's turns with the history as it stood' -- each "
     "run has a twin (stream false), and turn 2's twin carries turn 1's answer",
     SES + ["--cross-check", "--output", "o.jsonl"],
     {"asserts": ["len(%s) == len(R('o.jsonl')) == 2" % XC,
                  "any(len(q['body']['messages']) >= 3 and any(m.get('role') == 'assistant' for m in q['body']['messages'])"
                  " for q in %s)" % XC,
                  "all(r.get('cross_check') is not None for r in R('o.jsonl'))"]},
     files={"s.jsonl": sessions(1, turns=2)}, server=SERVER)
case("K06-trc-cross-check", "crosscheck",
     CLI_T + "table: --cross-check is 'yes' for --trace; cli.md: 'after each streamed request, send the same body "
     "unstreamed' -- 3 lines, 3 twins",
     TRC + ["--cross-check", "--output", "o.jsonl"],
     {"asserts": ["len(%s) == 3" % XC, "all(r.get('cross_check') is not None for r in R('o.jsonl'))"]},
     files={"t.jsonl": trace(3)}, server=SERVER)
case("K07-ses-output-tokens-fixed", "budget",
     CLI_T + "table: --output-tokens 'yes' for --sessions; 'Every workload honours ... --max-tokens (a trace line's or an "
     "--output-tokens budget first)' -- --output-tokens 7 with --max-tokens 99: every request asks for 7",
     SES + ["--output-tokens", "7", "--max-tokens", "99", "--output", "o.jsonl"],
     {"rc": 0, "asserts": ["sorted(set(q['body']['max_tokens'] for q in %s)) == [7]" % GEN,
                           "all(r['request']['max_tokens'] == 7 for r in R('o.jsonl'))"]},
     files={"s.jsonl": S4}, server=SERVER)
BUD = "sorted((r['session'], r['turn'], r['request']['max_tokens']) for r in R('%s'))"
case("K08-ses-output-tokens-seeded", "budget",
     "docs/workloads.md: '--output-tokens MEAN[:SPREAD]: each run's output budget, drawn the same way' ('by a generator "
     "seeded with --seed: the same seed gives the same load, byte for byte') -- with --sessions, --output-tokens 20:10 "
     "--seed 3 twice gives the same budgets, each within 10..30, and they are drawn (not all equal)",
     SES + ["--output-tokens", "20:10", "--seed", "3", "--output", "o.jsonl"],
     {"rc": 0, "asserts": [BUD % "o.jsonl" + " == " + BUD % "p.jsonl",
                           "all(10 <= r['request']['max_tokens'] <= 30 for r in R('o.jsonl'))",
                           "len(set(r['request']['max_tokens'] for r in R('o.jsonl'))) > 1"]},
     files={"s.jsonl": S6}, server=SERVER,
     pre=[{"args": SES + ["--output-tokens", "20:10", "--seed", "3", "--output", "p.jsonl"], "rc": 0}])
case("K09-trc-line-budget-first", "budget",
     CLI_T + "'--max-tokens (a trace line's or an --output-tokens budget first)'; workloads.md 'output_length ... without "
     "it, --max-tokens' -- a line with output_length 4 asks 4, a line without asks --max-tokens 9",
     TRC + ["--max-tokens", "9", "--output", "o.jsonl"],
     {"rc": 0, "asserts": ["sorted(q['body']['max_tokens'] for q in %s) == [4, 9]" % GEN]},
     files={"t.jsonl": jl({"timestamp": 0, "prompt": "a", "output_length": 4}, {"timestamp": 10, "prompt": "b"})},
     server=SERVER)
case("K10-ses-runs-first-n", "sessions",
     WL + "'--runs N runs the first N sessions of the file' -- --runs 2 of 4 sessions runs s0 and s1 only",
     SES + ["--runs", "2", "--output", "o.jsonl"],
     {"rc": 0, "asserts": ["sorted(set(r['session'] for r in R('o.jsonl'))) == ['s0', 's1']",
                           "R('o.jsonl')[0]['load']['sessions'] == 2", "len(%s) == 4" % GEN]},
     files={"s.jsonl": S4}, server=SERVER)

# =================================================================================================
# G: gates
# =================================================================================================
AGENT_ROUNDS0 = jl({"id": "w", "turns": ["Weather in Paris?", "And Rome?"], "tools": [TOOL],
                    "tool_results": {"get_weather": [{"temp": 20}]}, "max_tool_rounds": 0},
                   {"id": "v", "turns": ["Hello"]})
case("G01-ses-default-session-gate", "gates",
     DEC + "'a load of --sessions has a second [default gate], every planned session ok, sessions_ok_ratio < 1'; "
     "sessions_ok_ratio: 'a session can end not ok with every run of it ok (max_tool_rounds)' -- exit 1",
     ["--fixture", "agent", "--quiet", "--sessions", "s.jsonl", "--output", "o.jsonl"],
     {"rc": 1, "asserts": ["out['ok_ratio'] == 1.0", "out['sessions']['not_ok'] == 1",
                           "[g['held'] for g in out['gates'] if g['expr'].startswith('sessions_ok_ratio')] == [False]"]},
     files={"s.jsonl": AGENT_ROUNDS0})
case("G02-ses-fail-if-replaces", "gates",
     DEC + "'Giving --fail-if replaces them' -- the same sessions with --fail-if 'ok_ratio < 1' only: every run ok, exit 0",
     ["--fixture", "agent", "--quiet", "--sessions", "s.jsonl", "--fail-if", "ok_ratio < 1", "--output", "o.jsonl"],
     {"rc": 0, "asserts": ["len(out['gates']) == 1"]},
     files={"s.jsonl": AGENT_ROUNDS0})
case("G03-ses-gate-holds-despite-failure", "gates",
     CLI_T + "'--fail-if gates the summary's figures as it gates a load's ... the exit status is 0 when every session ... "
     "ran and was ok' only 'without --fail-if'; decisions.md: 'the exit status is 0 when every gate holds' -- a failing "
     "session with --fail-if 'runs > 1000': exit 0",
     SES + ["--fail-if", "runs > 1000", "--output", "o.jsonl"],
     {"rc": 0, "asserts": ["out['gates'] == [{'expr': 'runs > 1000', 'value': out['runs'], 'held': True}]"]},
     files={"s.jsonl": sessions(3, brk=1)}, server=SERVER)
case("G04-ses-gate-error-kind", "gates",
     DEC + "'error_kind.KIND: the count of runs that failed with that kind' -- sessions with one cut answer: the gate "
     "reads 1 and fails, exit 1",
     SES + ["--fail-if", "error_kind.eof_before_done > 0", "--output", "o.jsonl"],
     {"rc": 1, "asserts": ["out['gates'][0]['value'] == 1", "out['gates'][0]['held'] is False"]},
     files={"s.jsonl": sessions(3, brk=1)}, server=SERVER)
case("G05-trc-sessions-gate-no-figure", "gates",
     DEC + "'sessions_ok_ratio: with --sessions ...; a load of no sessions has no figure, and its gate fails' and 'A gate "
     "also fails when the summary lacks its figure' -- on a trace, every line ok: exit 1, value null",
     TRC + ["--fail-if", "sessions_ok_ratio < 0.5", "--output", "o.jsonl"],
     {"rc": 1, "asserts": ["out['gates'][0]['value'] is None", "out['gates'][0]['held'] is False"]},
     files={"t.jsonl": trace(2)}, server=SERVER)
case("G06-summary-ses-gate", "gates",
     DEC + "'It works on a load as it ends (sessions and trace replays too) and on --summary FILE... of saved evidence ... "
     "(the same records give the same verdicts)' -- --summary with --fail-if 'sessions_ok_ratio < 1' of a file whose "
     "session ended on max_tool_rounds: exit 1",
     ["--summary", "o.jsonl", "--fail-if", "sessions_ok_ratio < 1"],
     {"rc": 1, "asserts": ["out['gates'][0]['held'] is False", "out['gates'][0]['value'] == 0.5"]},
     files={"s.jsonl": AGENT_ROUNDS0},
     pre=[{"args": ["--fixture", "agent", "--quiet", "--sessions", "s.jsonl", "--output", "o.jsonl"], "rc": 1}])
case("G07-ses-gate-line-on-stderr", "gates",
     CLI_T + "'--fail-if gates the summary's figures ... (the summary gets gates, and elsewhere than a terminal stderr a "
     "line per gate that failed' -- without --quiet, stderr not a terminal: a 'gate FAILED' line",
     ["--url", "{ORIGIN}/v1/chat/completions", "--model", "m", "--sessions", "s.jsonl",
      "--fail-if", "not_ok > 0", "--output", "o.jsonl"],
     {"rc": 1, "stderr_contains": ["gate FAILED", "not_ok > 0"]},
     files={"s.jsonl": sessions(2, brk=0)}, server=SERVER)
case("G08-trc-gate-holds-output", "gates",
     CLI_T + "'--fail-if gates the summary's figures as it gates a load's' (trace); cli.md '--fail-if EXPR: exit 1 when "
     "EXPR ... is true' -- a gate that holds (ok > 5 is false) on a trace whose lines were truncated: exit 0, its "
     "gate in the summary, the failures still counted",
     ["--fixture", "truncated", "--quiet", "--trace", "t.jsonl", "--fail-if", "ok > 5", "--output", "o.jsonl"],
     {"rc": 0, "asserts": ["out['gates'] == [{'expr': 'ok > 5', 'value': 0, 'held': True}]", "out['not_ok'] == 2",
                           "out['not_ok_by_kind'] == {'body_truncated': 2}"]},
     files={"t.jsonl": trace(2)})
case("G09-ses-slo-gate", "gates",
     "docs/cli.md table: --slo and --fail-if 'yes' for --sessions; goodput.md 'A run is good when it is ok ... and within "
     "every bound' -- an impossible bound: good 0, the attainment gate fails, exit 1",
     SES + ["--slo", "duration_ms=0.001", "--fail-if", "slo_attainment < 0.5", "--output", "o.jsonl"],
     {"rc": 1, "asserts": ["out['good'] == 0", "out['gates'][0]['held'] is False"]},
     files={"s.jsonl": S4}, server=SERVER)
case("G10-trc-default-gate", "gates",
     WL + "'The exit status is 0 when every line ran and was ok' -- a replay of --fixture truncated: exit 1",
     ["--fixture", "truncated", "--quiet", "--trace", "t.jsonl", "--output", "o.jsonl"],
     {"rc": 1, "asserts": ["out['not_ok'] == 2"]}, files={"t.jsonl": trace(2)})

# =================================================================================================
# S: rates, sweeps and searches of sessions
# =================================================================================================
case("S01-ses-rate-cycles-file", "sweeps",
     CLI_T + "'--rate, --rates, --duration and --find-capacity start sessions at a rate, cycling through the file (each "
     "record's session_index is the session's number in the load, so a file's session run twice is two sessions)' -- "
     "2 sessions at 6/s for 1 s: more sessions than the file, session = file[i % 2], load.sessions their number",
     SES + ["--rate", "6", "--arrivals", "constant", "--duration", "1", "--output", "o.jsonl"],
     {"rc": 0, "asserts": [IDX + " == list(range(len(" + IDX + ")))", "len(" + IDX + ") >= 4",
                           "all(r['session'] == 's%d' % (r['session_index'] % 2) for r in R('o.jsonl'))",
                           "all(r['load']['sessions'] == len(" + IDX + ") for r in R('o.jsonl'))",
                           "out['sessions']['sessions'] == len(" + IDX + ")",
                           "P[0]['rc'] == 0 and P[0]['out']['sessions']['sessions'] == out['sessions']['sessions']"]},
     files={"s.jsonl": sessions(2, turns=1)}, server=SERVER, post=[{"args": ["--summary", "o.jsonl"]}], timeout=40)
case("S02-ses-rates-sweep", "sweeps",
     "docs/goodput.md 'Rate sweeps': 'The summary has a list steps, one block per rate' and 'Every record carries its "
     "step in load.step'; cli.md: --rates 'yes' for --sessions -- two steps, each with runs; --summary of the file "
     "recomputes them, exit 0",
     SES + ["--rates", "3,6", "--arrivals", "constant", "--duration", "1", "--output", "o.jsonl"],
     {"rc": 0, "asserts": ["len(out['steps']) == 2", "all(s['runs'] > 0 for s in out['steps'])",
                           "sorted(set(r['load']['step'] for r in R('o.jsonl'))) == [0, 1]",
                           "P[0]['rc'] == 0 and [s['runs'] for s in P[0]['out']['steps']] == "
                           "[s['runs'] for s in out['steps']]"]},
     files={"s.jsonl": sessions(2, turns=1)}, server=SERVER, post=[{"args": ["--summary", "o.jsonl"]}], timeout=40)
case("S03-ses-concurrencies", "sweeps",
     CLI_T + "'for sessions --concurrencies runs every session at each concurrency'; goodput.md: the summary gains "
     "concurrency_steps -- 4 sessions of 2 turns at 1 and 2: each step 8 runs, 16 in all; --summary again exit 0",
     SES + ["--concurrencies", "1,2", "--output", "o.jsonl"],
     {"rc": 0, "asserts": ["[s['runs'] for s in out['concurrency_steps']] == [8, 8]",
                           "[s['concurrency'] for s in out['concurrency_steps']] == [1, 2]", "out['runs'] == 16",
                           "len(R('o.jsonl')) == 16", "P[0]['rc'] == 0"]},
     files={"s.jsonl": S4}, server=SERVER, post=[{"args": ["--summary", "o.jsonl"]}])
case("S04-ses-find-capacity", "sweeps",
     "docs/goodput.md 'Capacity at an SLO': 'capacity gives the rate found, its bracket ... and how many probes ran'; "
     "cli.md: --find-capacity 'yes' for --sessions -- single-turn sessions on --fixture ok between 2 and 4/s",
     ["--fixture", "ok", "--quiet", "--sessions", "s.jsonl", "--find-capacity", "2:4", "--duration", "0.5",
      "--arrivals", "constant", "--output", "o.jsonl"],
     {"rc": 0, "asserts": ["out['capacity'] is not None", "out['capacity']['probes'] >= 2",
                           "len(out['steps']) == out['capacity']['probes']"]},
     files={"s.jsonl": sessions(2, turns=1)}, timeout=60)
case("S05-ses-rate-queued-first-run", "sweeps",
     WL + "'queued_ms: under --rate, on a session's first run: how late the session started; null otherwise'",
     SES + ["--rate", "4", "--arrivals", "constant", "--duration", "1", "--output", "o.jsonl"],
     {"rc": 0, "asserts": ["all(r['queued_ms'] is not None for r in R('o.jsonl') if r['turn'] == 1 and r['round'] == 0)",
                           "all(r['queued_ms'] is None for r in R('o.jsonl') if r['turn'] > 1)"]},
     files={"s.jsonl": sessions(2, turns=2)}, server=SERVER, timeout=40)
case("S06-ses-duration-without-rate", "sweeps",
     CLI_T + "table: --duration is 'yes' for --sessions; cli.md: '--duration S: bound an open loop (--rate, or each step of "
     "--rates) by time' -- --duration without --rate must not be silently ignored: refused (exit 2) or a bounded "
     "load; here it must not run the sessions as if it were absent and exit 0 with no trace of it",
     SES + ["--duration", "1", "--output", "o.jsonl"],
     {"rc": [0, 2], "asserts": ["rc == 2 or all(r['load']['duration'] == 1 for r in R('o.jsonl'))"]},
     files={"s.jsonl": S4}, server=SERVER)

# =================================================================================================
# C: CSV, report, server metrics
# =================================================================================================
case("C01-ses-csv", "csv",
     CLI_T + "'--csv writes a row per run'; loads.md: 'a header, then one row per run' -- sessions: rows are the records",
     SES + ["--csv", "c.csv", "--output", "o.jsonl"],
     {"rc": 0, "asserts": ["len(lines('c.csv')) == 1 + len(R('o.jsonl')) == 9",
                           "lines('c.csv')[0].split(',')[0] == 'run'"]},
     files={"s.jsonl": S4}, server=SERVER)
case("C02-trc-csv", "csv",
     CLI_T + "'--csv writes a row per run' -- a trace: a row per line, the failing line's error_kind in its row",
     TRC + ["--csv", "c.csv", "--output", "o.jsonl"],
     {"rc": 1, "asserts": ["len(lines('c.csv')) == 7",
                           "sum(1 for row in __import__('csv').DictReader(open(os.path.join(D, 'c.csv'))) "
                           "if row['error_kind'] == 'eof_before_done') == 1"]},
     files={"t.jsonl": trace(6, brk=2)}, server=SERVER)
case("C03-ses-report", "report",
     WL + "'--report FILE draws the load's page with, after it, a row of turns per session ... each turn green ..., red "
     "(the kind that ended it) or grey (not started, with the reason)' -- the page names the sessions and the kind",
     SES + ["--report", "r.html", "--output", "o.jsonl"],
     {"rc": 1, "asserts": ["all(s in open(os.path.join(D, 'r.html')).read() for s in ('s0', 's1', 's2', "
                           "'eof_before_done'))"]},
     files={"s.jsonl": sessions(3, brk=1)}, server=SERVER)
case("C04-ses-server-metrics", "metrics",
     CLI_T + "'--server-metrics scrapes during each step'; loads.md: 'Every scrape is one line of "
     "OUTPUT.server-metrics.jsonl' with phase start and end; 'The summary's server_metrics holds the URL, the file' -- "
     "with --sessions on --fixture ok",
     ["--fixture", "ok", "--quiet", "--sessions", "s.jsonl", "--server-metrics", "--output", "o.jsonl"],
     {"rc": 0, "asserts": ["valid('o.server-metrics.jsonl')",
                           "{'start', 'end'} <= set(json.loads(l)['phase'] for l in lines('o.server-metrics.jsonl'))",
                           "out['server_metrics'] is not None"]},
     files={"s.jsonl": sessions(2, turns=2)})
case("C05-trc-server-metrics", "metrics",
     CLI_T + "'--server-metrics scrapes during each step' (trace: yes) -- a replay on --fixture ok keeps its scrapes",
     ["--fixture", "ok", "--quiet", "--trace", "t.jsonl", "--server-metrics", "--output", "o.jsonl"],
     {"rc": 0, "asserts": ["valid('o.server-metrics.jsonl')", "len(lines('o.server-metrics.jsonl')) >= 2",
                           "out['server_metrics'] is not None"]},
     files={"t.jsonl": trace(3)})
case("C06-summary-shards-report", "report",
     LD + "'--report FILE.html (with a load, or with --summary FILE... to draw saved runs)'; 'a page drawn from several "
     "merged files is byte for byte the page drawn from one file holding them all' -- two session shards",
     ["--summary", "a.jsonl", "b.jsonl", "--report", "r.html"],
     {"rc": 0, "asserts": ["open(os.path.join(D, 'r.html')).read() == open(os.path.join(D, 'r2.html')).read()"]},
     files={"s.jsonl": S4}, server=SERVER,
     pre=[{"args": SES + ["--shard", "0/2", "--output", "a.jsonl"], "rc": 0},
          {"args": SES + ["--shard", "1/2", "--output", "b.jsonl"], "rc": 0,
           "then": [{"file": "a.jsonl", "concat": ["a.jsonl", "b.jsonl"], "to": "ab.jsonl"}]}],
     post=[{"args": ["--summary", "ab.jsonl", "--report", "r2.html"]}])
case("C07-ses-metrics-per-step", "metrics",
     LD + "'Each step has its own scraping thread' and 'scrapes at the start of the load (of each step of --rates)'; "
     "cli.md: '--server-metrics scrapes during each step' -- sessions under --concurrencies 1,2: scrapes of both steps",
     ["--fixture", "ok", "--quiet", "--sessions", "s.jsonl", "--concurrencies", "1,2", "--server-metrics",
      "--output", "o.jsonl"],
     {"rc": 0, "asserts": ["valid('o.server-metrics.jsonl')",
                           "len(set(json.loads(l)['step'] for l in lines('o.server-metrics.jsonl'))) == 2"]},
     files={"s.jsonl": sessions(2, turns=1)}, timeout=40)

# =================================================================================================
# L: lost and doubled records; what a sessions record carries
# =================================================================================================
case("L01-ses-summary-lost-session-end", "lost",
     WL + "'--summary FILE ... checks that the file is whole: ... each ends on its session_end record ... A file that "
     "lacks any of them ... gets one warning line naming what is missing, and exit status 1'",
     ["--summary", "o.jsonl"], {"rc": 1, "stderr_contains": ["warning"]},
     files={"s.jsonl": sessions(2, turns=2)}, server=SERVER,
     pre=[{"args": SES + ["--output", "o.jsonl"], "rc": 0, "then": [{"file": "o.jsonl", "drop_where": ["turn", 2]}]}])
case("L02-ses-summary-run-gap", "lost",
     WL + "'... and the runs are numbered from 0 without a gap' -- a first-turn record removed (its session still ends "
     "on session_end): exit 1, one warning",
     ["--summary", "o.jsonl"], {"rc": 1, "stderr_contains": ["warning"]},
     files={"s.jsonl": sessions(2, turns=2)}, server=SERVER,
     pre=[{"args": SES + ["--output", "o.jsonl"], "rc": 0, "then": [{"file": "o.jsonl", "drop_lines": [0]}]}])
case("L03-ses-summary-doubled-line", "lost",
     WL + "'--summary FILE ... checks that the file is whole'; loads.md: 'a summary of two files equals the summary of one "
     "file holding both' -- a sessions file with its first record doubled is not the load: not exit 0",
     ["--summary", "o.jsonl"], {"rc": [1, 2]},
     files={"s.jsonl": sessions(2, turns=2)}, server=SERVER,
     pre=[{"args": SES + ["--output", "o.jsonl"], "rc": 0, "then": [{"file": "o.jsonl", "dup_first": True}]}])
case("L04-ses-summary-same-file-twice", "lost",
     GP + "'checks ... that every shard is there and none is given twice' (an unsharded load is shard 0 of 1) -- a "
     "sessions file given twice counts its sessions twice if accepted: not exit 0",
     ["--summary", "o.jsonl", "o.jsonl"], {"rc": [1, 2]},
     files={"s.jsonl": sessions(2, turns=2)}, server=SERVER, pre=[{"args": SES + ["--output", "o.jsonl"], "rc": 0}])
case("L05-trc-summary-lost-line", "lost",
     WL + "'--summary of a replay's file that lacks a line's record says so in one warning line, exit 1'",
     ["--summary", "o.jsonl"], {"rc": 1, "stderr_contains": ["warning"]},
     files={"t.jsonl": T6}, server=SERVER,
     pre=[{"args": TRC + ["--output", "o.jsonl"], "rc": 0, "then": [{"file": "o.jsonl", "drop_lines": [-1]}]}])
case("L06-ses-record-fields", "records",
     WL + "records: 'session, turn, round', 'session_index', 'warmup', 'load ... with sessions ..., runs null ... and "
     "plan', 'session_end on a session's last run only'",
     SES + ["--output", "o.jsonl"],
     {"rc": 0, "asserts": ["all(r['load']['runs'] is None and r['load']['sessions'] == 4 for r in R('o.jsonl'))",
                           "all(isinstance(r['load']['plan'], dict) for r in R('o.jsonl'))",
                           "all(r['warmup'] is False for r in R('o.jsonl'))",
                           "sum(1 for r in R('o.jsonl') if r.get('session_end')) == 4", ONE_END_PER_SESSION,
                           END_IS_LAST, RUNS_CONTIGUOUS]},
     files={"s.jsonl": S4}, server=SERVER)
case("L07-ses-cut-ends-session", "records",
     WL + "'A run that is not ok ends its session there ... the turns after it are not started, and it says so'; "
     "session_end: ok, ended_by, turns, turns_run, not_started_turns; summary turns_not_started",
     SES + ["--output", "o.jsonl"],
     {"rc": 1, "asserts": ["[r['turn'] for r in R('o.jsonl') if r['session'] == 's1'] == [1]",
                           "[(e['ok'], e['ended_by'], e['turns'], e['turns_run']) for e in "
                           "(r['session_end'] for r in R('o.jsonl') if r['session'] == 's1')] == "
                           "[(False, 'eof_before_done', 3, 1)]",
                           "out['sessions']['turns_not_started'] == 2", "out['sessions']['not_ok'] == 1"]},
     files={"s.jsonl": sessions(3, turns=3, brk=1)}, server=SERVER)
case("L08-ses-compare-repeats-not-lost", "lost",
     "docs/decisions.md: '--compare ... Each side is read as --summary reads it ... fewer records than the load planned ... "
     "then the exit status is 1' -- two whole sessions loads (one --repeat 2) compare with exit 0 and no warning",
     ["--compare", "a.jsonl", "b.jsonl"], {"rc": 0, "stderr_lacks": ["warning: a.jsonl", "warning: b.jsonl",
                                                                     "planned"]},
     files={"s.jsonl": S4}, server=SERVER,
     pre=[{"args": SES + ["--output", "a.jsonl"], "rc": 0},
          {"args": SES + ["--repeat", "2", "--output", "b.jsonl"], "rc": 0}])
case("L09-ses-sharegpt-shards", "shards",
     WL + "ShareGPT 'An item without id is named sharegpt-N'; goodput.md: sessions are sharded by the session -- a "
     "ShareGPT file's shards 0/2 and 1/2 merge to the whole: 3 sessions, exit 0, sharegpt-1..3 each once",
     ["--summary", "a.jsonl", "b.jsonl"],
     {"rc": 0, "asserts": ["out['sessions']['sessions'] == 3", "out['runs'] == 3",
                           "sorted(r['session'] for f in ('a.jsonl', 'b.jsonl') for r in R(f)) == "
                           "['sharegpt-1', 'sharegpt-2', 'sharegpt-3']"]},
     files={"g.json": json.dumps([{"conversations": [{"from": "human", "value": "q%d" % i},
                                                     {"from": "gpt", "value": "a"}]} for i in range(3)])},
     server=SERVER,
     pre=[{"args": URL + ["--sessions", "g.json", "--shard", "0/2", "--output", "a.jsonl"], "rc": 0},
          {"args": URL + ["--sessions", "g.json", "--shard", "1/2", "--output", "b.jsonl"], "rc": 0}])
case("L10-trc-warmup-summary-block", "warmup",
     DEC + "'[warm-up lines] are left out of the summary and of its trace block' -- the trace block's lateness covers the "
     "4 counted lines, not 6 (its count, where it gives one, is 4); --summary recomputes the same runs",
     TRC + ["--warmup", "2", "--output", "o.jsonl"],
     {"rc": 0, "asserts": ["out['runs'] == 4", "P[0]['rc'] == 0 and P[0]['out']['runs'] == 4",
                           "P[0]['out']['warmup_runs'] == 2",
                           "all(v == 4 for k, v in (out.get('trace') or {}).items() if k in ('runs', 'lines', 'count'))"]},
     files={"t.jsonl": T6}, server=SERVER, post=[{"args": ["--summary", "o.jsonl"]}])


# ---- added after the first run: what the first failures pointed at -----------------------------
case("S07-ses-rate-schedule-figures", "sweeps",
     DEC + "'Under --rate (and each step of --rates) every record keeps scheduled_ms ... The summary's latency_ms then has "
     "two more figures ... --slo can bound them'; workloads.md: a session's record 'has the fields of a load's run' -- "
     "sessions under --rate with a generous --slo first_text_from_schedule_ms=60000: either refused (exit 2) or the "
     "figure exists and the ok runs are good; never every run silently 'not good' for a missing figure",
     SES + ["--rate", "4", "--arrivals", "constant", "--duration", "1", "--slo", "first_text_from_schedule_ms=60000",
            "--fail-if", "slo_attainment < 0.5", "--output", "o.jsonl"],
     {"rc": [0, 2], "asserts": ["rc == 2 or (out['good'] == out['ok'] and "
                                "out['latency_ms']['first_text_from_schedule_ms'] is not None)"]},
     files={"s.jsonl": sessions(2, turns=1)}, server=SERVER, timeout=40)
case("D16-summary-trace-shards-of-two-traces", "shards",
     GP + "'The plan id ... a hash of the load's settings, each request as the record describes it' and '--summary of the "
     "files checks, for each sharded plan, that every shard is there' -- shard 0/2 of one trace and shard 1/2 of "
     "another (other prompts, same timestamps) are not one replay: exit 2",
     ["--summary", "a.jsonl", "b.jsonl"], {"rc": 2, "one_line_error": True},
     files={"t.jsonl": T6, "u.jsonl": jl(*[{"timestamp": i * 20, "prompt": "other %d" % i} for i in range(6)])},
     server=SERVER,
     pre=[{"args": TRC + ["--shard", "0/2", "--output", "a.jsonl"], "rc": 0},
          {"args": URL + ["--trace", "u.jsonl", "--shard", "1/2", "--output", "b.jsonl"], "rc": 0}])
case("D17-summary-ses-shards-other-settings", "shards",
     GP + "'The plan id ... a hash of the load's settings, each request as the record describes it ... so the same flags "
     "give the same id on every machine' -- shard 0/2 run with --max-tokens 10 and shard 1/2 with --max-tokens 20 are "
     "two plans, each missing a shard: exit 2",
     ["--summary", "a.jsonl", "b.jsonl"], {"rc": 2, "one_line_error": True},
     files={"s.jsonl": S4}, server=SERVER,
     pre=[{"args": SES + ["--max-tokens", "10", "--shard", "0/2", "--output", "a.jsonl"], "rc": 0},
          {"args": SES + ["--max-tokens", "20", "--shard", "1/2", "--output", "b.jsonl"], "rc": 0}])
case("D18-ses-shards-under-rate", "shards",
     CLI_T + "'--shard I/N sends the sessions or lines i with i % N == I' and '--rate ... start sessions at a rate, cycling "
     "through the file'; goodput.md: the N shards together send exactly the load -- two shards of --rate 6 --duration 1 "
     "from one --start-at: disjoint session_index sets whose union is 0..k-1, and --summary of both exit 0",
     ["--summary", "a.jsonl", "b.jsonl"],
     {"rc": 0, "asserts": ["(lambda a, b: not (a & b) and sorted(a | b) == list(range(len(a | b))) and len(a | b) >= 4)"
                           "(set(r['session_index'] for r in R('a.jsonl')), set(r['session_index'] for r in R('b.jsonl')))",
                           "all(r['session_index'] % 2 == 0 for r in R('a.jsonl'))",
                           "out['sessions']['sessions'] == out['sessions']['planned']"]},
     files={"s.jsonl": sessions(3, turns=1)}, server=SERVER,
     pre=[{"parallel": [SES + ["--rate", "6", "--arrivals", "constant", "--duration", "1", "--start-at", "{UTC_PLUS_4S}",
                               "--shard", "%d/2" % i, "--output", "ab"[i] + ".jsonl"] for i in range(2)], "rc": 0}],
     timeout=40)
case("F31-shard-repeat-refusal-names-flag", "flags",
     "docs/cli.md exit 2: 'bad arguments ...: one line on stderr naming the flag as typed'; flag table: --shard and --repeat "
     "are both 'yes' for --sessions -- if the pair is refused, the line names --repeat (typed), not a flag not given",
     SES + ["--shard", "0/2", "--repeat", "2", "--output", "o.jsonl"],
     {"rc": [0, 2], "asserts": ["rc == 0 or ('--repeat' in stderr and '--rates' not in stderr)"]},
     files={"s.jsonl": S4}, server=SERVER)
case("P13-ses-processes-rate", "processes",
     PROC + "; '--rate ... start sessions at a rate, cycling through the file' -- 2 sessions at 6/s for 1 s over "
     "--processes 2: session_index 0..k-1 each once, session = file[i % 2], every record back",
     SES + ["--rate", "6", "--arrivals", "constant", "--duration", "1", "--processes", "2", "--output", "o.jsonl"],
     {"rc": 0, "asserts": [IDX + " == list(range(len(" + IDX + ")))", "len(" + IDX + ") >= 4",
                           "all(r['session'] == 's%d' % (r['session_index'] % 2) for r in R('o.jsonl'))",
                           "len(%s) == len(R('o.jsonl'))" % GEN, RUNS_CONTIGUOUS]},
     files={"s.jsonl": sessions(2, turns=2)}, server=SERVER, timeout=40)
case("P14-trc-processes-warmup", "processes",
     DEC + "'its first N lines ... marked' with cli.md '--processes P spreads them over P forked processes the same way' -- "
     "--warmup 2 over --processes 2 marks lines 0 and 1 of the trace (not the first of each process)",
     TRC + ["--warmup", "2", "--processes", "2", "--output", "o.jsonl"],
     {"rc": 0, "asserts": ["sorted(r['trace']['scheduled_ms'] for r in R('o.jsonl') if r['warmup']) == [0, 100]",
                           "out['runs'] == 4"]},
     files={"t.jsonl": trace(6, step_ms=100)}, server=SERVER)
case("P15-ses-processes-concurrencies", "processes",
     CLI_T + "'for sessions --concurrencies runs every session at each concurrency' with --processes 2: each step has "
     "every session's runs, once",
     SES + ["--concurrencies", "1,2", "--processes", "2", "--output", "o.jsonl"],
     {"rc": 0, "asserts": ["[s['runs'] for s in out['concurrency_steps']] == [8, 8]",
                           "len(set((r['load']['step'], r['session_index'], r['turn']) for r in R('o.jsonl'))) == 16",
                           "len(R('o.jsonl')) == 16"]},
     files={"s.jsonl": S4}, server=SERVER)

# ---- a second round: shards with warm-up, dead workers, determinism across processes -------------
case("D19-trc-shards-warmup-equal-whole", "shards",
     GP + "'The summary of the N files then counts the runs, verdicts and planned runs that one process's load would'; "
     "cli.md: '--warmup N marks the first N ... lines, --shard I/N sends the ... lines i with i % N == I' -- two shards of "
     "a trace with --warmup 2 merge to the unsharded replay's runs and warmup_runs (2 warm-up lines, not 2 per shard)",
     ["--summary", "a.jsonl", "b.jsonl"],
     {"rc": 0, "asserts": ["(out['runs'], out['warmup_runs'], out['planned_runs']) == "
                           "(P[0]['out']['runs'], P[0]['out']['warmup_runs'], P[0]['out']['planned_runs'])",
                           "out['warmup_runs'] == 2"]},
     files={"t.jsonl": trace(6, step_ms=100)}, server=SERVER,
     pre=[{"args": TRC + ["--warmup", "2", "--output", "whole.jsonl"], "rc": 0},
          {"args": TRC + ["--warmup", "2", "--shard", "0/2", "--output", "a.jsonl"], "rc": 0},
          {"args": TRC + ["--warmup", "2", "--shard", "1/2", "--output", "b.jsonl"], "rc": 0}],
     post=[{"args": ["--summary", "whole.jsonl"]}])
case("D20-ses-shards-warmup-equal-whole", "shards",
     GP + "'The summary of the N files then counts the runs, verdicts and planned runs that one process's load would'; "
     "cli.md: '--warmup N marks the first N sessions' -- two shards of 6 sessions with --warmup 2 merge to the unsharded "
     "load's counts (runs, warmup_runs, sessions block) and its exit status",
     ["--summary", "a.jsonl", "b.jsonl"],
     {"asserts": ["rc == P[0]['rc']", "all(out[k] == P[0]['out'][k] for k in %r)" % SKEYS,
                  "all(out['sessions'][k] == P[0]['out']['sessions'][k] for k in %r)" % SSKEYS,
                  "out['warmup_runs'] == 4"]},
     files={"s.jsonl": S6}, server=SERVER,
     pre=[{"args": SES + ["--warmup", "2", "--output", "whole.jsonl"], "rc": [0, 1]},
          {"args": SES + ["--warmup", "2", "--shard", "0/2", "--output", "a.jsonl"], "rc": [0, 1]},
          {"args": SES + ["--warmup", "2", "--shard", "1/2", "--output", "b.jsonl"], "rc": [0, 1]}],
     post=[{"args": ["--summary", "whole.jsonl"]}])
DEAD = ("docs/cli.md 'Evidence is never lost': 'A load that runs to its end and still lacks a planned run's record (a "
        "--processes worker that died, a bug) says so in one line and exits 1, whatever its gates say'")
case("P16-ses-worker-killed", "processes",
     DEAD + " -- a sessions load over --processes 2 whose first worker is SIGKILLed mid-load: exit 1 (never 0), a "
     "warning line, every line of the file valid",
     SES + ["--processes", "2", "--concurrency", "2", "--output", "o.jsonl"],
     {"rc": 1, "stderr_contains": ["not every planned"], "asserts": ["valid('o.jsonl')", "'Traceback' not in stderr"]},
     files={"s.jsonl": sessions(8, turns=3)}, server=SLOW,
     signal={"when_lines": ["o.jsonl", 2], "sig": "KILL", "child": True}, timeout=60)
case("P17-trc-worker-killed", "processes",
     DEAD + " -- a trace over --processes 2 whose first worker is SIGKILLed: exit 1, a warning line",
     TRC + ["--processes", "2", "--concurrency", "2", "--output", "o.jsonl"],
     {"rc": 1, "stderr_contains": ["not every planned"], "asserts": ["valid('o.jsonl')"]},
     files={"t.jsonl": trace(20, step_ms=50)}, server=SLOW,
     signal={"when_lines": ["o.jsonl", 2], "sig": "KILL", "child": True}, timeout=60)
case("P18-ses-processes-budgets-same", "processes",
     "docs/workloads.md: '--output-tokens ... drawn ... by a generator seeded with --seed: the same seed gives the same "
     "load, byte for byte'; cli.md: '--processes P spreads them' (the same load) -- the budgets of each (session, turn) "
     "are the same with --processes 2 as in one process",
     SES + ["--output-tokens", "20:10", "--seed", "3", "--processes", "2", "--concurrency", "2", "--output", "o.jsonl"],
     {"rc": 0, "asserts": [BUD % "o.jsonl" + " == " + BUD % "p.jsonl"]},
     files={"s.jsonl": S6}, server=SERVER,
     pre=[{"args": SES + ["--output-tokens", "20:10", "--seed", "3", "--output", "p.jsonl"], "rc": 0}])
case("P19-ses-processes-cross-check", "crosscheck",
     CLI_T + "'--cross-check sends each run's unstreamed twin' with '--processes P' -- 4 sessions of 2 turns over 2 "
     "processes: 8 twins, each record with its cross_check",
     SES + ["--cross-check", "--processes", "2", "--concurrency", "2", "--output", "o.jsonl"],
     {"asserts": ["len(%s) == len(R('o.jsonl')) == 8" % XC,
                  "all(r.get('cross_check') is not None for r in R('o.jsonl'))"]},
     files={"s.jsonl": S4}, server=SERVER)
case("P20-ses-sigint-ended-by-interrupted", "signals",
     WL + "session_end 'ended_by (null, the error_kind of the run that ended it, max_tool_rounds, interrupted, ...)'; "
     "'SIGINT ... the runs in flight end as interrupted' -- Ctrl+C with sessions in flight (--processes 2): the "
     "sessions it cut end with ended_by interrupted and their later turns not started",
     SES + ["--processes", "2", "--concurrency", "4", "--output", "o.jsonl"],
     {"rc": 130, "asserts": ["any(r['session_end']['ended_by'] == 'interrupted' for r in R('o.jsonl') "
                             "if r.get('session_end'))",
                             "all(r['session_end']['ok'] is False for r in R('o.jsonl') if r.get('session_end') and "
                             "r['session_end']['ended_by'] == 'interrupted')"]},
     files={"s.jsonl": sessions(8, turns=3)}, server=SLOW,
     signal={"when_lines": ["o.jsonl", 2], "group": True, "then_wait": 0.1})
case("S08-ses-duration-runs-started-whole", "sweeps",
     CLI_T + "'--rate, --rates, --duration ... start sessions at a rate'; workloads.md: a session ends on its session_end "
     "'ok (every run ok and every turn run)' -- 3-turn sessions started at 4/s for 1 s (answers 0.2 s each): every "
     "session started runs whole, none cut by the duration, exit 0",
     SES + ["--rate", "4", "--arrivals", "constant", "--duration", "1", "--output", "o.jsonl"],
     {"rc": 0, "asserts": ["all(r['session_end']['ok'] for r in R('o.jsonl') if r.get('session_end'))",
                           "out['sessions']['turns_not_started'] == 0", ONE_END_PER_SESSION]},
     files={"s.jsonl": sessions(2, turns=3)}, server=dict(SERVER, delay_s=0.2), timeout=40)
case("C08-trc-warmup-report", "report",
     DEC + "'the summary, its gates and the report leave them out' -- a trace whose warm-up line failed: its page does not "
     "show that failure",
     TRC + ["--warmup", "1", "--report", "r.html", "--output", "o.jsonl"],
     {"rc": 0, "asserts": ["'eof_before_done' not in open(os.path.join(D, 'r.html')).read()"]},
     files={"t.jsonl": trace(3, brk=0)}, server=SERVER)

# ---- a third round: whole sessions lost, plans that differ, flags that must have their effect ----
case("L11-ses-summary-lost-middle-session", "lost",
     WL + "'--summary FILE ... checks that the file is whole: each of the load's load.sessions sessions has records' -- "
     "every record of session s1 removed: exit 1, one warning",
     ["--summary", "o.jsonl"], {"rc": 1, "stderr_contains": ["warning"]},
     files={"s.jsonl": S4}, server=SERVER,
     pre=[{"args": SES + ["--output", "o.jsonl"], "rc": 0,
           "then": [{"file": "o.jsonl", "drop_where": ["session", "s1"]}]}])
case("L12-ses-summary-lost-last-session", "lost",
     WL + "'each of the load's load.sessions sessions has records' -- every record of the last session removed (the last "
     "run numbers, so no gap shows in the numbering): exit 1, one warning",
     ["--summary", "o.jsonl"], {"rc": 1, "stderr_contains": ["warning"]},
     files={"s.jsonl": S4}, server=SERVER,
     pre=[{"args": SES + ["--output", "o.jsonl"], "rc": 0,
           "then": [{"file": "o.jsonl", "drop_where": ["session", "s3"]}]}])
case("L13-ses-rate-summary-lost-last-session", "lost",
     WL + "load.sessions: 'how many sessions the load ... planned'; '--summary FILE ... checks that the file is whole' -- "
     "a --rate load's last session removed: exit 1, one warning",
     ["--summary", "o.jsonl"], {"rc": 1, "stderr_contains": ["warning"]},
     files={"s.jsonl": sessions(2, turns=1)}, server=SERVER,
     pre=[{"args": SES + ["--rate", "5", "--arrivals", "constant", "--duration", "1", "--output", "o.jsonl"], "rc": 0,
           "then": [{"file": "o.jsonl", "drop_lines": [-1]}]}], timeout=40)
case("D21-summary-shards-other-N", "shards",
     GP + "'--summary of the files checks, for each sharded plan, that every shard is there' (the plan id hashes 'the "
     "number of shards') -- shard 0/2 and shard 1/3 of the same sessions are not a whole: exit 2",
     ["--summary", "a.jsonl", "b.jsonl"], {"rc": 2, "one_line_error": True},
     files={"s.jsonl": S6}, server=SERVER,
     pre=[{"args": SES + ["--shard", "0/2", "--output", "a.jsonl"], "rc": 0},
          {"args": SES + ["--shard", "1/3", "--output", "b.jsonl"], "rc": 0}])
case("D22-summary-shards-other-start", "shards",
     GP + "'the plan's id (a hash of the load's settings, ..., the number of shards and the start ...)' -- shard 0/2 with "
     "--start-at and shard 1/2 without are two plans: exit 2",
     ["--summary", "a.jsonl", "b.jsonl"], {"rc": 2, "one_line_error": True},
     files={"s.jsonl": S4}, server=SERVER,
     pre=[{"args": SES + ["--shard", "0/2", "--start-at", "{UTC_PLUS_4S}", "--output", "a.jsonl"], "rc": 0},
          {"args": SES + ["--shard", "1/2", "--output", "b.jsonl"], "rc": 0}], timeout=40)
OVERLAP = ("max(sum(1 for b in R('o.jsonl') if b['offset_ms'] <= a['offset_ms'] < b['offset_ms'] + b['duration_ms']) "
           "for a in R('o.jsonl'))")
case("K11-trc-concurrency-bounds", "flags",
     WL + "'Line i starts at its timestamp ... (at most --concurrency runs in flight ...; a run that waits for a slot is "
     "late)' -- 4 lines due at once with --concurrency 1 (answers 0.3 s): never two in flight, later lines late",
     TRC + ["--concurrency", "1", "--output", "o.jsonl"],
     {"rc": 0, "asserts": [OVERLAP + " == 1", "max(r['trace']['late_ms'] for r in R('o.jsonl')) > 500"]},
     files={"t.jsonl": trace(4, step_ms=0)}, server=dict(SERVER, delay_s=0.3))
case("K12-ses-concurrency-bounds", "flags",
     WL + "'--concurrency sessions in flight (default 1)' -- 4 sessions of 2 turns at --concurrency 2 (answers 0.2 s): "
     "at most 2 sessions' runs in flight at once",
     SES + ["--concurrency", "2", "--output", "o.jsonl"],
     {"rc": 0, "asserts": [OVERLAP + " <= 2", OVERLAP + " == 2"]},
     files={"s.jsonl": S4}, server=dict(SERVER, delay_s=0.2))
case("K13-ses-header-every-request", "flags",
     "docs/cli.md: '--header ... is sent on every request of a run or a load'; table: --header 'yes' for --sessions -- "
     "every turn's request carries it, and the record keeps the name only",
     SES + ["--header", "X-Tenant: blue-tenant-7", "--output", "o.jsonl"],
     {"rc": 0, "asserts": ["all(q['headers'].get('x-tenant') == 'blue-tenant-7' for q in %s)" % GEN,
                           "len(%s) == 8" % GEN, "'blue-tenant-7' not in open(os.path.join(D, 'o.jsonl')).read()"]},
     files={"s.jsonl": S4}, server=SERVER)
case("K14-ses-system-own-first", "flags",
     CLI_T + "'Every workload honours ... --system (a session's own system first)'; workloads.md 'system ... without it, "
     "--system if given' -- a session with its own system sends it; one without sends --system",
     SES + ["--system", "FLAG-SYSTEM", "--output", "o.jsonl"],
     {"rc": 0, "asserts": ["sorted(set((q['body']['messages'][0]['role'], q['body']['messages'][0]['content']) "
                           "for q in %s)) == [('system', 'FLAG-SYSTEM'), ('system', 'OWN-SYSTEM')]" % GEN]},
     files={"s.jsonl": jl({"id": "a", "turns": ["x"], "system": "OWN-SYSTEM"}, {"id": "b", "turns": ["y"]})},
     server=SERVER)
case("K15-ses-tool-choice", "flags",
     WL + "'--tool-choice for the sessions that bring tools' -- --tool-choice required: the tools session's request asks "
     "it, the session without tools sends no tool_choice",
     SES + ["--tool-choice", "required", "--output", "o.jsonl"],
     {"asserts": ["sorted(str(q['body'].get('tool_choice')) for q in %s) == ['None', 'required']" % GEN]},
     files={"s.jsonl": jl({"id": "a", "turns": ["x"], "tools": [TOOL], "tool_results": {"get_weather": "sunny"}},
                          {"id": "b", "turns": ["y"]})},
     server=SERVER)
case("K16-trc-speed", "flags",
     WL + "'Line i starts at its timestamp less the first line's, divided by --trace-speed' -- --trace-speed 2 halves "
     "trace.scheduled_ms",
     TRC + ["--trace-speed", "2", "--output", "o.jsonl"],
     {"rc": 0, "asserts": ["sorted(round(r['trace']['scheduled_ms']) for r in R('o.jsonl')) == [0, 50, 100, 150]"]},
     files={"t.jsonl": trace(4, step_ms=100)}, server=SERVER)
case("K17-trc-block-size", "flags",
     WL + "'hash_ids ... the blocks of the prompt's prefix, each --block-size tokens'; the record's trace has block_size -- "
     "--block-size 16: block_size 16, and two lines sharing block 0 send the same first 16 words",
     TRC + ["--block-size", "16", "--output", "o.jsonl"],
     {"rc": 0, "asserts": ["all(r['trace']['block_size'] == 16 for r in R('o.jsonl'))",
                           "len(set(' '.join(q['body']['messages'][-1]['content'].split()[:16]) for q in %s)) == 1" % GEN,
                           "len(set(' '.join(q['body']['messages'][-1]['content'].split()[:17]) for q in %s)) == 2" % GEN]},
     files={"t.jsonl": jl({"timestamp": 0, "input_length": 20, "hash_ids": [0]},
                          {"timestamp": 10, "input_length": 40, "hash_ids": [0, 1]})},
     server=SERVER)
case("K18-trc-runs-first-n", "flags",
     WL + "'--runs N replays the first N lines' -- --runs 2 of 6 lines sends L0 and L1",
     TRC + ["--runs", "2", "--output", "o.jsonl"],
     {"rc": 0, "asserts": ["sorted(q['body']['messages'][-1]['content'] for q in %s) == ['L0', 'L1']" % GEN,
                           "out['planned_runs'] == 2"]},
     files={"t.jsonl": T6}, server=SERVER)
case("C09-ses-metrics-interval", "metrics",
     CLI_T + "table: --metrics-interval 'yes' for --sessions; loads.md: each scrape line has interval_s -- "
     "--metrics-interval 0.2 on a sessions load of about 1 s: scrapes at 0.2 s, several of phase every",
     ["--fixture", "ok", "--quiet", "--sessions", "s.jsonl", "--server-metrics", "--metrics-interval", "0.2",
      "--output", "o.jsonl"],
     {"rc": 0, "asserts": ["all(json.loads(l)['interval_s'] == 0.2 for l in lines('o.server-metrics.jsonl'))",
                           "sum(1 for l in lines('o.server-metrics.jsonl') if json.loads(l)['phase'] == 'every') >= 2"]},
     files={"s.jsonl": sessions(1, turns=3)})

case("K19-trc-system", "flags",
     CLI_T + "'Every workload honours the flags of the request ...: ... --system ...' -- a trace replay with --system "
     "sends it as the first message of each request",
     TRC + ["--system", "FLAG-SYSTEM", "--output", "o.jsonl"],
     {"rc": 0, "asserts": ["all(q['body']['messages'][0] == {'role': 'system', 'content': 'FLAG-SYSTEM'} for q in %s)" % GEN,
                           "len(%s) == 2" % GEN]},
     files={"t.jsonl": trace(2)}, server=SERVER)
case("K20-ses-system-record-truthful", "records",
     "docs/record.md: request 'system (whether one was sent)'; workloads.md 'system ... without it, --system if "
     "given' -- for a session without its own system, the record's request.system is true only if a system message was "
     "really sent",
     SES + ["--system", "FLAG-SYSTEM", "--output", "o.jsonl"],
     {"rc": 0, "asserts": ["R('o.jsonl')[0]['request']['system'] == (reqs[0]['body']['messages'][0]['role'] == 'system')"]},
     files={"s.jsonl": jl({"id": "b", "turns": ["y"]})}, server=SERVER)

# ---- a fourth round: think time under Ctrl+C, --runs beyond the file, sweeps with warm-up ---------
case("P21-ses-sigint-during-think-time", "signals",
     SIGDOC + "; workloads.md: 'The session's last record ... carries session_end' -- Ctrl+C while the sessions think "
     "between turns (think_time_s 3, --processes 2): exit 130, each started session's last record carries session_end "
     "(interrupted), none is left without it",
     SES + ["--processes", "2", "--concurrency", "2", "--output", "o.jsonl"],
     {"rc": 130, "asserts": ["valid('o.jsonl')", "len(R('o.jsonl')) >= 1", ONE_END_PER_SESSION, END_IS_LAST,
                             "all(r['session_end']['ended_by'] == 'interrupted' for r in R('o.jsonl') if r.get('session_end'))",
                             "P[0]['rc'] == 1 and 'Traceback' not in P[0]['stderr']"]},
     files={"s.jsonl": sessions(3, turns=3, think_time_s=3)}, server=SERVER,
     signal={"when_lines": [None, 0], "then_wait": 2.5, "group": True},
     post=[{"args": ["--summary", "o.jsonl"]}])
case("K21-ses-runs-beyond-file", "flags",
     "docs/cli.md: '--sessions FILE ...: --concurrency, --rate and --runs then count sessions'; flags and workloads: 'a "
     "file's session run twice is two sessions' -- --runs 5 of a 2-session file: 5 sessions (the file cycled), or a "
     "refusal (exit 2); not 2 sessions and exit 0 as if --runs were 2",
     SES + ["--runs", "5", "--output", "o.jsonl"],
     {"rc": [0, 2], "asserts": ["rc == 2 or out['sessions']['sessions'] == 5"]},
     files={"s.jsonl": sessions(2, turns=1)}, server=SERVER)
case("K22-trc-runs-beyond-file", "flags",
     WL + "'--runs N replays the first N lines'; cli.md '--runs N: how many runs' -- --runs 10 of a 6-line trace cannot "
     "replay 10 lines: a refusal (exit 2), or 6 runs with planned_runs 6; never 10 planned and 6 run silently",
     TRC + ["--runs", "10", "--output", "o.jsonl"],
     {"rc": [0, 2], "asserts": ["rc == 2 or (out['runs'] == 6 and out['planned_runs'] == 6)"]},
     files={"t.jsonl": T6}, server=SERVER)
case("W12-ses-rates-warmup-per-step", "warmup",
     DEC + "'Under --rates each step has its own warm-up'; cli.md: '--warmup N marks the first N sessions' -- sessions "
     "--rates 3,6 --warmup 1: in each step, session 0 (and only it) is warm-up",
     SES + ["--rates", "3,6", "--arrivals", "constant", "--duration", "1", "--warmup", "1", "--output", "o.jsonl"],
     {"asserts": ["sorted(set((r['load']['step'], r['session_index']) for r in R('o.jsonl') if r['warmup'])) == "
                  "[(0, 0), (1, 0)]"]},
     files={"s.jsonl": sessions(2, turns=1)}, server=SERVER, timeout=40)
case("P22-ses-sigint-repeat", "signals",
     SIGDOC + "; loads.md 'Each repeat is a load of its own' -- Ctrl+C during the first of --repeat 3: exit 130, the later "
     "repeats never start, the file valid, --summary of it exit 1 (not whole), not 2",
     SES + ["--repeat", "3", "--concurrency", "2", "--output", "o.jsonl"],
     {"rc": 130, "asserts": ["valid('o.jsonl')", "set(r['load']['repeat'] for r in R('o.jsonl')) == {0}",
                             "P[0]['rc'] == 1"]},
     files={"s.jsonl": sessions(6, turns=2)}, server=SLOW,
     signal={"when_lines": ["o.jsonl", 2], "then_wait": 0.1, "group": True},
     post=[{"args": ["--summary", "o.jsonl"]}])
case("L14-compare-sessions-vs-trace", "lost",
     DEC + "'When the two loads differ in what decides what the server was asked, one line says in what ...: the workload "
     "(a load of requests, synthetic lengths, a trace or sessions ...)' -- --compare of a sessions load and a trace: "
     "the warning names the workload",
     ["--compare", "a.jsonl", "b.jsonl"], {"rc": 0, "stderr_contains": ["workload"]},
     files={"s.jsonl": S4, "t.jsonl": T6}, server=SERVER,
     pre=[{"args": SES + ["--output", "a.jsonl"], "rc": 0}, {"args": TRC + ["--output", "b.jsonl"], "rc": 0}])
case("L15-summary-csv-sessions", "csv",
     LD + "'--summary FILE... --format csv prints the summary as figure,value rows ...: nested objects are flattened to "
     "dotted names' -- a sessions file's CSV summary has sessions.sessions",
     ["--summary", "o.jsonl", "--format", "csv"],
     {"rc": 0, "asserts": ["'sessions.sessions,4' in stdout.splitlines()"]},
     files={"s.jsonl": S4}, server=SERVER, pre=[{"args": SES + ["--output", "o.jsonl"], "rc": 0}])

# ---- a fifth round: the schedule of sessions, and the request flags on every turn ----------------
DUE = "sorted(round((r['offset_ms'] - r['queued_ms']) / 10) for r in R('%s') if r['turn'] == 1)"
case("S09-ses-constant-arrivals", "sweeps",
     "docs/loads.md: '--rate R is an open loop: R runs start per second (--arrivals poisson ... or constant)'; workloads.md: "
     "'--rate sessions started per second (an open loop, --arrivals and --seed as for runs)' -- --rate 5 constant for "
     "1 s: sessions due at 0, 200, 400, 600, 800 ms (offset_ms less queued_ms, to 10 ms)",
     SES + ["--rate", "5", "--arrivals", "constant", "--duration", "1", "--output", "o.jsonl"],
     {"rc": 0, "asserts": [DUE % "o.jsonl" + " == [0, 20, 40, 60, 80]"]},
     files={"s.jsonl": sessions(2, turns=1)}, server=SERVER, timeout=40)
case("D23-ses-shards-keep-poisson-plan", "shards",
     GP + "'What the flags and the seed fix before anything is sent is the plan: the runs, each one's arrival ... Shard I "
     "sends the runs i with i % N == I, each at its planned time' -- sessions at --rate 6 (Poisson, seed 2) for 1 s: the "
     "two shards' sessions are due when the unsharded load had them due",
     ["--summary", "a.jsonl", "b.jsonl"],
     {"rc": 0, "asserts": ["sorted(set((r['session_index'], round((r['offset_ms'] - r['queued_ms']) / 10)) for f in "
                           "('a.jsonl', 'b.jsonl') for r in R(f) if r['turn'] == 1)) == sorted(set((r['session_index'], "
                           "round((r['offset_ms'] - r['queued_ms']) / 10)) for r in R('whole.jsonl') if r['turn'] == 1))"]},
     files={"s.jsonl": sessions(3, turns=1)}, server=SERVER,
     pre=[{"args": SES + ["--rate", "6", "--seed", "2", "--duration", "1", "--output", "whole.jsonl"], "rc": 0},
          {"parallel": [SES + ["--rate", "6", "--seed", "2", "--duration", "1", "--start-at", "{UTC_PLUS_4S}",
                               "--shard", "%d/2" % i, "--output", "ab"[i] + ".jsonl"] for i in range(2)], "rc": 0}],
     timeout=40)
case("K23-ses-request-flags-every-turn", "flags",
     CLI_T + "'Every workload honours the flags of the request ...: ... --temperature, --stop, --extra ...' -- each turn's "
     "request of a session carries them",
     SES + ["--temperature", "0.5", "--stop", "END", "--extra", '{"top_k": 7}', "--dialect", "strict",
            "--output", "o.jsonl"],
     {"rc": 0, "asserts": ["all(q['body'].get('temperature') == 0.5 and q['body'].get('top_k') == 7 and "
                           "q['body'].get('stop') in (['END'], 'END') for q in %s)" % GEN, "len(%s) == 8" % GEN,
                           "all(r['request']['dialect'] == 'strict' for r in R('o.jsonl'))"]},
     files={"s.jsonl": S4}, server=SERVER)
case("K24-ses-expect-finish-length", "flags",
     CLI_T + "'Every workload honours ... --expect-finish'; loads.md: 'a run is ok only with finish_reason length' -- "
     "sessions answered with finish stop under --expect-finish length: every session ends on its first run, exit 1",
     SES + ["--expect-finish", "length", "--output", "o.jsonl"],
     {"rc": 1, "asserts": ["out['sessions']['not_ok'] == 4", "out['sessions']['turns_not_started'] == 4",
                           "len(R('o.jsonl')) == 4"]},
     files={"s.jsonl": S4}, server=SERVER)

# ---- a sixth round: a start in the past, warm-up seconds at speed, cross-check of tool sessions --------
case("D24-ses-start-at-behind", "shards",
     GP + "'--start-at ... at most a day ahead and an hour behind ... a process that starts late sends the runs already "
     "due at once, and their queued_ms says how late' -- sessions at --rate 4 for 1 s from a start 10 s ago: every "
     "session starts at once, each first run's queued_ms over 8 s",
     SES + ["--rate", "4", "--arrivals", "constant", "--duration", "1", "--start-at", "{UTC_MINUS_10S}",
            "--output", "o.jsonl"],
     {"rc": 0, "asserts": ["all(r['queued_ms'] > 8000 for r in R('o.jsonl') if r['turn'] == 1)",
                           "len(R('o.jsonl')) >= 3"]},
     files={"s.jsonl": sessions(2, turns=1)}, server=SERVER)
case("D25-trc-start-at-behind", "shards",
     GP + "'a process that starts late sends the runs already due at once, and their queued_ms says how late'; "
     "workloads.md trace.late_ms -- a trace from a start 10 s ago: every line over 8 s late",
     TRC + ["--start-at", "{UTC_MINUS_10S}", "--output", "o.jsonl"],
     {"rc": 0, "asserts": ["all(r['trace']['late_ms'] > 8000 and r['queued_ms'] > 8000 for r in R('o.jsonl'))"]},
     files={"t.jsonl": trace(3)}, server=SERVER)
case("W13-trc-warmup-seconds-at-speed", "warmup",
     DEC + "'its first N lines (or those due in its first S seconds)'; workloads.md: 'Line i starts at its timestamp less "
     "the first line's, divided by --trace-speed' -- lines at 0, 100, 200, 300 ms replayed at --trace-speed 2 are due at "
     "0, 50, 100, 150 ms: --warmup 0.12s marks the three due before 120 ms",
     TRC + ["--trace-speed", "2", "--warmup", "0.12s", "--output", "o.jsonl"],
     {"rc": 0, "asserts": ["sum(1 for r in R('o.jsonl') if r['warmup']) == 3", "out['runs'] == 1"]},
     files={"t.jsonl": trace(4, step_ms=100)}, server=SERVER)
case("K25-ses-cross-check-agent", "crosscheck",
     "docs/fixture.md: 'An unstreamed request ... in any other mode it is a 400 ..., so --cross-check against it keeps the "
     "streamed verdict and says why in cross_check.unstreamed_problem'; cli.md: --cross-check 'yes' for --sessions -- "
     "the example tool sessions on --fixture agent with --cross-check: every session still runs whole and ok",
     ["--fixture", "agent", "--quiet", "--sessions", "sessions.jsonl", "--runs", "2", "--concurrency", "2",
      "--cross-check", "--output", "o.jsonl"],
     {"rc": 0, "asserts": ["out['sessions']['ok'] == 2", "out['sessions']['tool_rounds'] == 6",
                           "all(r['cross_check'] is not None for r in R('o.jsonl'))"]},
     files={"sessions.jsonl": open(os.path.join(HERE, "..", "examples", "sessions.jsonl")).read()})

for api in ("messages", "responses"):
    case("P23-ses-processes-agent-" + api, "processes",
         PROC + "; workloads.md: the history 'in the API's own shape' (%s); fixture.md agent mode answers chat, responses "
         "and messages -- the example tool sessions over --processes 2 on the %s API: 3 sessions whole and ok, every "
         "tool round sent" % (api, api),
         ["--fixture", "agent", "--api", api, "--quiet", "--sessions", "sessions.jsonl", "--runs", "3", "--processes", "2",
          "--concurrency", "2", "--output", "o.jsonl"],
         {"rc": 0, "asserts": ["out['sessions']['ok'] == 3", "out['sessions']['tool_rounds'] == 9",
                               "out['runs'] == 18", RUNS_CONTIGUOUS]},
         files={"sessions.jsonl": open(os.path.join(HERE, "..", "examples", "sessions.jsonl")).read()})

case("P24-ses-sigint-before-start-files", "signals",
     GP + "'Each process waits for it (Ctrl+C still cancels)'; loads.md: '--csv ... a header, then one row per run'; "
     "'Every scrape is one line of OUTPUT.server-metrics.jsonl' -- Ctrl+C during the --start-at wait of a sessions load "
     "with --processes 2, --csv and --server-metrics: exit 130, and every file it created is valid (the CSV at least its "
     "header line, the JSON Lines files only whole lines)",
     ["--fixture", "ok", "--quiet", "--sessions", "s.jsonl", "--processes", "2", "--csv", "c.csv", "--server-metrics",
      "--start-at", "{UTC_PLUS_30S}", "--output", "o.jsonl"],
     {"rc": 130, "asserts": ["not os.path.exists(os.path.join(D, 'o.jsonl')) or valid('o.jsonl')",
                             "not os.path.exists(os.path.join(D, 'o.server-metrics.jsonl')) or "
                             "valid('o.server-metrics.jsonl')",
                             "not os.path.exists(os.path.join(D, 'c.csv')) or (lines('c.csv') or [''])[0].startswith('run,')"]},
     files={"s.jsonl": S4}, signal={"when_lines": [None, 0], "then_wait": 2.5, "group": True}, timeout=20)
case("S10-ses-rates-processes", "sweeps",
     "docs/goodput.md 'Rate sweeps' with cli.md '--processes P spreads them over P forked processes the same way' -- "
     "sessions --rates 3,6 over --processes 2: every step's sessions whole and once (session_index unique in a step), "
     "--summary again exit 0",
     SES + ["--rates", "3,6", "--arrivals", "constant", "--duration", "1", "--processes", "2", "--output", "o.jsonl"],
     {"rc": 0, "asserts": ["all(len([r for r in R('o.jsonl') if r['load']['step'] == k and r.get('session_end')]) == "
                           "len(set(r['session_index'] for r in R('o.jsonl') if r['load']['step'] == k)) for k in (0, 1))",
                           "len(set((r['load']['step'], r['session_index'], r['turn']) for r in R('o.jsonl'))) == "
                           "len(R('o.jsonl'))", "P[0]['rc'] == 0"]},
     files={"s.jsonl": sessions(2, turns=2)}, server=SERVER, post=[{"args": ["--summary", "o.jsonl"]}], timeout=40)

case("C10-summary-shards-both-scraped", "metrics",
     LD + "'The scrapes of several loads (say, of shards that each scraped the server) are not merged: --summary of several "
     "files of which more than one has scrapes is exit 2, naming them' -- two session shards, each with --server-metrics",
     ["--summary", "a.jsonl", "b.jsonl"], {"rc": 2, "one_line_error": True,
      "asserts": ["all(n + '.jsonl' in stderr or n + '.server-metrics.jsonl' in stderr for n in ('a', 'b'))"]},
     files={"s.jsonl": sessions(2, turns=1)},
     pre=[{"args": ["--fixture", "ok", "--quiet", "--sessions", "s.jsonl", "--server-metrics", "--shard", "%d/2" % i,
                    "--output", "ab"[i] + ".jsonl"], "rc": 0} for i in range(2)])
case("C11-ses-summary-finds-scrapes", "metrics",
     LD + "'--summary load.jsonl finds load.server-metrics.jsonl beside it and gives the same server_metrics the load "
     "printed' -- a sessions load",
     ["--fixture", "ok", "--quiet", "--sessions", "s.jsonl", "--server-metrics", "--output", "o.jsonl"],
     {"rc": 0, "asserts": ["P[0]['rc'] == 0 and P[0]['out']['server_metrics'] == out['server_metrics']"]},
     files={"s.jsonl": sessions(2, turns=2)}, post=[{"args": ["--summary", "o.jsonl"]}])

# =================================================================================================
ids = [c["id"] for c in CASES]
assert len(ids) == len(set(ids)), "duplicate ids"
with open(os.path.join(HERE, "cases.json"), "w", encoding="utf-8") as f:
    json.dump(CASES, f, indent=1, ensure_ascii=True)
    f.write("\n")
print("%d cases written" % len(CASES))
