#!/usr/bin/env python3
"""Run the hostile-49 cases (cases.json) against ../../stream_client.py, black box.

Each case: `fixture_server.py --port 0 --replay STREAM.http [--replay-twin TWIN.http]` on 127.0.0.1, then
`stream_client.py --url http://127.0.0.1:PORT/v1/... --model m FLAGS --output OUT.json`, then the record's
`ok` and `error_kind` against the expectation (and a few record fields in "checks").

    python3 run_cases.py [ID_PREFIX ...] [-v]

Standard library only. Prints PASS/FAIL per case and a final count; exit 1 when a case fails.
"""
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CLIENT = os.path.join(ROOT, "stream_client.py")
FIXTURE = os.path.join(ROOT, "fixture_server.py")
PATHS = {"chat": "/v1/chat/completions", "completions": "/v1/completions", "responses": "/v1/responses",
         "messages": "/v1/messages"}


def start_fixture(files):
    cmd = [sys.executable, "-u", FIXTURE, "--port", "0", "--delay", "0", "--replay", os.path.join(HERE, files[0])]
    if len(files) > 1:
        cmd += ["--replay-twin", os.path.join(HERE, files[1])]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=ROOT, text=True)
    deadline = time.monotonic() + 10
    port = None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        i = line.find("http://127.0.0.1:")
        if i >= 0:
            port = int(line[i + len("http://127.0.0.1:"):].split("/")[0])
            break
    if port is None:
        proc.kill()
        proc.wait()
        raise RuntimeError("fixture did not start: %r" % (cmd,))
    return proc, port


def get(rec, path):
    cur = rec
    for k in path.split("."):
        if not isinstance(cur, dict) or k not in cur:
            return "<missing>"
        cur = cur[k]
    return cur


def check(rec, exp, checks):
    problems = []
    if exp["ok"] == "ANY":
        pass
    elif exp["ok"] is True:
        if rec.get("ok") is not True:
            problems.append("expected ok, got %s" % rec.get("error_kind"))
    elif exp["ok"] is False:
        if rec.get("ok") is not False:
            problems.append("expected not ok (%s), got ok" % exp["error_kind"])
        elif exp["error_kind"] not in (None, "ANY_NOT_OK") and rec.get("error_kind") != exp["error_kind"]:
            problems.append("expected %s, got %s" % (exp["error_kind"], rec.get("error_kind")))
    for path, want in checks.items():
        if path.endswith("!"):
            got = get(rec, path[:-1])
            if got == want:
                problems.append("%s is %r" % (path[:-1], got))
            continue
        got = get(rec, path)
        if want == "nonempty":
            if not got or got == "<missing>":
                problems.append("%s empty: %r" % (path, got))
        elif want == "not_true":
            if got is True:
                problems.append("%s is true" % path)
        elif got != want:
            problems.append("%s = %r, expected %r" % (path, got, want))
    return problems


def run_case(c, tmp, verbose):
    api = "chat"
    flags = list(c["flags"])
    if "--api" in flags:
        api = flags[flags.index("--api") + 1]
    proc, port = start_fixture(c["files"])
    out = os.path.join(tmp, c["id"] + ".json")
    try:
        cmd = [sys.executable, CLIENT, "--url", "http://127.0.0.1:%d%s" % (port, PATHS[api]), "--model", "m",
               "--idle", "5", "--deadline", "10", "--quiet"] + flags + ["--output", out]
        t0 = time.monotonic()
        r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=30)
        took = time.monotonic() - t0
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
    if not os.path.exists(out):
        return ["no record; exit %d; stderr %s" % (r.returncode, r.stderr.strip()[-300:])], None, took
    with open(out, encoding="utf-8") as f:
        rec = json.load(f)
    problems = check(rec, c["expect"], c.get("checks", {}))
    want_rc = 0 if rec.get("ok") else 1
    if r.returncode != want_rc:
        problems.append("exit %d for ok=%s" % (r.returncode, rec.get("ok")))
    if "Traceback" in r.stderr:
        problems.append("traceback on stderr")
    return problems, rec, took


def main(argv):
    verbose = "-v" in argv
    prefixes = [a for a in argv if not a.startswith("-")]
    with open(os.path.join(HERE, "cases.json"), encoding="utf-8") as f:
        cases = json.load(f)
    if prefixes:
        cases = [c for c in cases if any(c["id"].startswith(p) for p in prefixes)]
    passed = failed = 0
    with tempfile.TemporaryDirectory(prefix="hostile49-") as tmp:
        for c in cases:
            try:
                problems, rec, took = run_case(c, tmp, verbose)
            except Exception as e:  # a runner problem is a FAIL, never silent
                problems, rec, took = ["runner: %r" % (e,)], None, 0.0
            got = "ok" if rec and rec.get("ok") else (rec or {}).get("error_kind")
            if problems:
                failed += 1
                print("FAIL %s (%.2fs): %s; got %s" % (c["id"], took, "; ".join(problems), got))
                if rec and verbose:
                    print("     error: %s" % rec.get("error"))
                    print("     cross_check: %s" % json.dumps(rec.get("cross_check"), ensure_ascii=True)[:800])
            else:
                passed += 1
                print("PASS %s (%.2fs): %s" % (c["id"], took, got))
    print("%d passed, %d failed, %d cases" % (passed, failed, passed + failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
