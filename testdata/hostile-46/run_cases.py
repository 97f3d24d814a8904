#!/usr/bin/env python3
"""Run the hostile-46 cases (cases.json) against ../../stream_client.py, black box.

The runner of hostile-44, with the same case format, extended: a scripted response may be chosen by
what the request body contains (`match`) and delayed (`delay_s`); a pre-step may run several
commands at once (`parallel`, for shards sharing a --start-at); a case may send a signal to the
command under test once a file has N lines (`signal`); `post` steps run after it (a --summary of
its files), their results in the asserts as P[i] (rc, out, stderr).

Each case: files written into a fresh temp dir, an optional scripted loopback server (127.0.0.1 only)
that answers every generation request with the next scripted raw response and counts requests,
optional pre-steps (commands whose output the case needs), then the command under test, then
checks: exit status, one-line stderr, no traceback, files present or absent, and Python
expressions over the results (records, stdout JSON, requests the server saw).

    python3 run_cases.py [ID_PREFIX ...] [-j N]

Standard library only. Prints one line per case and a final count.
"""
import json
import os
import shutil
import signal
import socket
import socketserver
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CLIENT = os.path.join(ROOT, "stream_client.py")


def build_response(spec):
    """A raw HTTP response (bytes) from a spec: raw text, or head + headers + SSE events + framing."""
    if "raw" in spec:
        return spec["raw"].encode("utf-8", "surrogatepass")
    status = spec.get("status", "HTTP/1.1 200 OK")
    headers = list(spec.get("headers", []))
    if not any(h.lower().startswith("content-type:") for h in headers):
        headers.append("Content-Type: text/event-stream")
    nl = spec.get("nl", "\n")
    body_parts = []
    for ev in spec.get("events", []):
        if isinstance(ev, dict) and "data_raw" in ev:
            body_parts.append(ev["data_raw"])
            continue
        lines = []
        if isinstance(ev, dict) and "data" in ev and set(ev) <= {"event", "data"}:
            if ev.get("event"):
                lines.append("event: " + ev["event"])
            data = ev["data"]
        else:
            data = ev
        if not isinstance(data, str):
            data = json.dumps(data, separators=(",", ":"))
        lines.append("data: " + data)
        body_parts.append(nl.join(lines) + nl + nl)
    framing = spec.get("framing", "chunked")
    cut = spec.get("cut", False)
    out = []
    if framing == "chunked":
        headers.append("Transfer-Encoding: chunked")
        for p in body_parts:
            b = p.encode("utf-8", "surrogatepass")
            out.append(b"%x\r\n%s\r\n" % (len(b), b))
        if not cut:
            out.append(b"0\r\n\r\n")
    else:
        body = "".join(body_parts).encode("utf-8", "surrogatepass")
        headers.append("Content-Length: %d" % len(body))
        out.append(body[: len(body) // 2] if cut else body)
    headers.append("Connection: close")
    head = status + "\r\n" + "".join(h + "\r\n" for h in headers) + "\r\n"
    return head.encode("latin-1") + b"".join(out)


class Scripted:
    """A loopback HTTP server answering generation requests with scripted raw responses, in order."""

    def __init__(self, spec):
        self.responses = [build_response(r) for r in spec.get("responses", [])]
        self.match = [(m["contains"], build_response(m["response"])) for m in spec.get("match", [])]
        self.delay_s = spec.get("delay_s", 0)
        self.tokenize = spec.get("tokenize")  # None -> 404; else a JSON value to answer
        self.requests = []
        self.lock = threading.Lock()
        outer = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self):
                sock = self.request
                sock.settimeout(10)
                buf = b""
                while b"\r\n\r\n" not in buf:
                    d = sock.recv(65536)
                    if not d:
                        return
                    buf += d
                head, _, rest = buf.partition(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path = lines[0].split(" ")[:2]
                hdrs = {}
                for l in lines[1:]:
                    k, _, v = l.partition(":")
                    hdrs[k.strip().lower()] = v.strip()
                n = int(hdrs.get("content-length", "0") or 0)
                while len(rest) < n:
                    d = sock.recv(65536)
                    if not d:
                        break
                    rest += d
                body = rest[:n]
                try:
                    bj = json.loads(body.decode("utf-8")) if body else None
                except ValueError:
                    bj = None
                if path.endswith("/models"):
                    b = b'{"object":"list","data":[{"id":"m","object":"model"}]}'
                    sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(b), b))
                    return
                if path.endswith("/tokenize"):
                    if outer.tokenize is None:
                        sock.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}")
                    else:
                        b = json.dumps(outer.tokenize).encode()
                        sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(b), b))
                    return
                if path.endswith("/metrics"):
                    sock.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                    return
                with outer.lock:
                    i = len(outer.requests)
                    outer.requests.append({"path": path, "body": bj, "raw": body.decode("utf-8", "replace"), "headers": hdrs})
                resp = outer.responses[min(i, len(outer.responses) - 1)] if outer.responses else b"HTTP/1.1 500 X\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                for needle, r in outer.match:
                    if needle in body.decode("utf-8", "replace"):
                        resp = r
                        break
                if outer.delay_s:
                    time.sleep(outer.delay_s)
                try:
                    sock.sendall(resp)
                    sock.shutdown(socket.SHUT_WR)
                except OSError:
                    pass

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self.server = Server(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def subst(s, env):
    for k, v in env.items():
        s = s.replace("{" + k + "}", str(v))
    return s


def client_env(env_vars):
    env = dict(os.environ)
    env.pop("MODEL_API_KEY", None)
    env["NO_COLOR"] = "1"
    env.update(env_vars)
    return env


def run_cmd(args, cwd, env_vars, timeout, signal_spec=None):
    """Run the client; with signal_spec, send it a signal once a file of cwd has enough lines."""
    p = subprocess.Popen([sys.executable, CLIENT] + args, cwd=cwd, stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=client_env(env_vars),
                         start_new_session=bool(signal_spec and signal_spec.get("group")))
    if signal_spec:
        threading.Thread(target=send_signal_when, args=(p, cwd, signal_spec), daemon=True).start()
    try:
        so, se = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        raise
    return p.returncode, so.decode("utf-8", "replace"), se.decode("utf-8", "replace")


def count_lines(path):
    try:
        with open(path, "rb") as f:
            return f.read().count(b"\n")
    except OSError:
        return 0


def send_signal_when(p, cwd, spec):
    """Signal p (SIGINT by default) once spec's file has spec's lines, or after max_wait seconds."""
    name, n = spec.get("when_lines", [None, 0])
    deadline = time.monotonic() + spec.get("max_wait", 10)
    while p.poll() is None and time.monotonic() < deadline:
        if name is None or count_lines(os.path.join(cwd, name)) >= n:
            break
        time.sleep(0.02)
    time.sleep(spec.get("then_wait", 0))
    if p.poll() is None:
        sig = getattr(signal, "SIG" + spec.get("sig", "INT"))
        if spec.get("child"):  # a forked worker of the client, not the client itself
            kids = children(p.pid)
            if kids:
                os.kill(kids[0], sig)
            return
        if spec.get("group"):  # as a terminal's Ctrl+C: the whole process group
            os.killpg(p.pid, sig)
        else:
            p.send_signal(sig)


def children(pid):
    """The child processes of pid, from /proc (Linux), lowest pid first."""
    kids = set()
    try:
        for tid in os.listdir("/proc/%d/task" % pid):
            with open("/proc/%d/task/%s/children" % (pid, tid)) as f:
                kids.update(int(k) for k in f.read().split())
    except OSError:
        pass
    return sorted(kids)


def run_steps(steps, d, env):
    """Run pre- or post-steps in order (a step with `parallel` runs its commands at once)."""
    results = []
    for step in steps:
        if "parallel" in step:
            with ThreadPoolExecutor(max_workers=len(step["parallel"])) as ex:
                got = list(ex.map(lambda a: run_cmd([subst(x, env) for x in a], d, {}, step.get("timeout", 30)),
                                  step["parallel"]))
        elif "args" in step:
            got = [run_cmd([subst(a, env) for a in step["args"]], d, {}, step.get("timeout", 30))]
        else:  # a step of edits only
            got = []
        for rc, so, se in got:
            results.append({"rc": rc, "out": last_json_line(so), "stdout": so, "stderr": se})
            if "rc" in step and rc not in (step["rc"] if isinstance(step["rc"], list) else [step["rc"]]):
                raise StepFailed("step %s exited %s (wanted %s): %s" % (
                    (step.get("args") or step["parallel"][0])[:3], rc, step["rc"], se.strip()[-300:]))
        for edit in step.get("then", []):
            apply_edit(d, edit)
    return results


class StepFailed(Exception):
    """A pre-step did not give what the case needs."""


def load_records(path):
    out = []
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        text = f.read()
    try:
        return [json.loads(text)] if text.lstrip().startswith("{") and "\n{" not in text.strip() else [json.loads(l) for l in text.splitlines() if l.strip()]
    except ValueError:
        return [json.loads(l) for l in text.splitlines() if l.strip()]


def last_json_line(stdout):
    for line in reversed(stdout.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                return None
    return None


def run_case(case):
    try:
        return _run_case(case)
    except Exception as e:  # the runner's own failure, reported as the case's
        return False, "runner error %s: %s" % (type(e).__name__, e)


def _run_case(case):
    d = tempfile.mkdtemp(prefix="h46-")
    srv = None
    try:
        for name, content in case.get("files", {}).items():
            p = os.path.join(d, name)
            with open(p, "w", encoding="utf-8", errors="surrogatepass") as f:
                f.write(content if isinstance(content, str) else "\n".join(json.dumps(x) for x in content) + "\n")
        now = time.time()
        env = {"UTC_PLUS_4S": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now + 4)),
               "UTC_PLUS_30S": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now + 30)),
               "DIR": d, "UTC_MINUS_10S": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now - 10)),
               "UTC_MINUS_2H": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now - 7200)),
               "UTC_PLUS_2D": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now + 2 * 86400)),
               "UTC_PLUS_2S_NOZ": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now + 2))}
        if "server" in case:
            srv = Scripted(case["server"])
            env["PORT"] = srv.port
            env["ORIGIN"] = "http://127.0.0.1:%d" % srv.port
        try:
            run_steps(case.get("pre", []), d, env)
        except StepFailed as e:
            return False, "pre-" + str(e)
        for edit in case.get("edits", []):
            apply_edit(d, edit)
        t0 = time.monotonic()
        rc, so, se = run_cmd([subst(a, env) for a in case["args"]], d, case.get("env", {}), case.get("timeout", 30),
                             case.get("signal"))
        try:
            post = run_steps(case.get("post", []), d, env)
        except StepFailed as e:
            return False, "post-" + str(e)
        took = time.monotonic() - t0
        exp = case["expect"]
        fails = []
        if "Traceback (most recent call last)" in se:
            fails.append("traceback on stderr: " + se.strip().splitlines()[-1][:200])
        if "rc" in exp:
            want = exp["rc"] if isinstance(exp["rc"], list) else [exp["rc"]]
            if rc not in want:
                fails.append("exit %s, expected %s" % (rc, exp["rc"]))
        if exp.get("one_line_error"):
            lines = [l for l in se.splitlines() if l.strip()]
            if len(lines) != 1:
                fails.append("stderr has %d lines, expected one: %r" % (len(lines), se.strip()[:300]))
        for s in exp.get("stderr_contains", []):
            if s not in se:
                fails.append("stderr lacks %r (stderr: %r)" % (s, se.strip()[:300]))
        for s in exp.get("stderr_lacks", []):
            if s in se:
                fails.append("stderr has %r" % s)
        for f in exp.get("absent", []):
            if os.path.exists(os.path.join(d, f)):
                fails.append("file %s exists, expected none" % f)
        recs = {}

        def R(name):
            if name not in recs:
                recs[name] = load_records(os.path.join(d, name))
            return recs[name]

        ctx = {"rc": rc, "stdout": so, "stderr": se, "out": last_json_line(so), "R": R,
               "reqs": srv.requests if srv else [], "json": json, "os": os, "D": d, "P": post,
               "lines": lambda n: raw_lines(os.path.join(d, n)), "valid": lambda n: all_valid(os.path.join(d, n))}
        for a in exp.get("asserts", []):
            try:
                v = eval(a, ctx)
            except Exception as e:  # a failed assertion, reported with its error
                v = "error %s: %s" % (type(e).__name__, e)
            if v is not True:
                fails.append("assert %s -> %s" % (a, str(v)[:200]))
        if fails:
            detail = "; ".join(fails)
            return False, detail + " | stderr: " + se.strip().replace("\n", " / ")[:400]
        return True, "(%.1f s)" % took
    except subprocess.TimeoutExpired:
        return False, "timed out"
    finally:
        if srv:
            srv.close()
        shutil.rmtree(d, ignore_errors=True)


def raw_lines(path):
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read().splitlines()


def all_valid(path):
    """Every line of the file is one JSON object (an empty file is valid)."""
    for line in raw_lines(path) or []:
        try:
            if not isinstance(json.loads(line), dict):
                return False
        except ValueError:
            return False
    return raw_lines(path) is not None


def apply_edit(d, edit):
    """Edit a file of the case's dir: drop lines (by index) or write a copy."""
    p = os.path.join(d, edit["file"])
    with open(p, encoding="utf-8") as f:
        lines = f.read().splitlines(True)
    if "concat" in edit:  # the files one after another
        lines = []
        for name in edit["concat"]:
            with open(os.path.join(d, name), encoding="utf-8") as f:
                lines += f.read().splitlines(True)
    if "drop_lines" in edit:
        drop = set(i if i >= 0 else len(lines) + i for i in edit["drop_lines"])
        lines = [l for i, l in enumerate(lines) if i not in drop]
    if "drop_where" in edit:  # drop records whose field equals a value
        k, v = edit["drop_where"]
        keep = []
        for l in lines:
            r = json.loads(l)
            cur = r
            for part in k.split("."):
                cur = cur.get(part) if isinstance(cur, dict) else None
            if cur != v:
                keep.append(l)
        lines = keep
    if edit.get("dup_first"):
        lines = lines[:1] + lines
    if "truncate_last" in edit:
        lines[-1] = lines[-1][: len(lines[-1]) // 2]
    target = os.path.join(d, edit.get("to", edit["file"]))
    with open(target, "w", encoding="utf-8") as f:
        f.write("".join(lines))


def main():
    argv = sys.argv[1:]
    jobs = 4
    if "-j" in argv:
        i = argv.index("-j")
        jobs = int(argv[i + 1])
        del argv[i:i + 2]
    cases_file = os.path.join(HERE, "cases.json")
    if "--cases" in argv:  # another folder's cases (hostile-44's), run by this runner
        i = argv.index("--cases")
        cases_file = argv[i + 1]
        del argv[i:i + 2]
    with open(cases_file, encoding="utf-8") as f:
        cases = json.load(f)
    if argv:
        cases = [c for c in cases if any(c["id"].startswith(a) for a in argv)]
    passed = 0
    with ThreadPoolExecutor(max_workers=jobs) as ex:
        for case, (ok, detail) in zip(cases, ex.map(run_case, cases)):
            passed += ok
            print("%s %s [%s] %s" % ("PASS" if ok else "FAIL", case["id"], case["area"], detail if not ok else detail), flush=True)
            if not ok:
                print("     expected: %s" % case["doc"], flush=True)
    print("%d of %d cases pass, %d fail" % (passed, len(cases), len(cases) - passed))
    return 0 if passed == len(cases) else 1


if __name__ == "__main__":
    sys.exit(main())
