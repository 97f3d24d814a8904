"""Every command of README.md and docs/ runs, as a reader types it, and ends as the doc says it ends.

A command is a line of a fenced code block (```sh, ```console or a bare ```; not ```text, which shows
output) that starts with `python3 stream_client.py` or `python3 fixture_server.py` (after a `$ ` prompt,
if any), with its continuation lines. It must exit 0 unless the doc marks it, on its last line, with a
comment `# exits N: why`. Each page runs in a fresh folder of its own, in the page's order (the README's
as on a fresh clone), with `testdata/` of the checkout beside it; what is substituted:

- `fixture_server.py --port N` serves on a free port instead, and a later `--url` to port N goes there;
  a second server on the same N replaces the first (as the doc's Ctrl+C and restart do). A server is
  stopped with SIGINT (Ctrl+C) when its page is done, and must exit 0;
- `--exporter HOST:PORT` listens on a free port; it must answer a probe, and exit 143 on SIGTERM;
- `--url` to another loopback port (a vLLM on this machine, in the doc) goes to the test's fixture server,
  in the mode of FIXTURE_FOR (ok unless the command needs an agent's or a cross-check's answers);
- `> FILE` gets the command's stdout.

Commands that cannot run here (another host, a cluster, many machines) are in SKIPPED, with the reason.
--fixture writes FIXTURE_DELAY apart, as in every test, except for the commands of USER_PACED, whose
verdict in the doc comes from the user's pacing (50 ms).
"""
from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import tempfile
import threading
import unittest
import urllib.parse
import urllib.request
from pathlib import Path
from typing import NamedTuple

from .support import CLIENT, Fixture, FIXTURE_SCRIPT, HERE, run_cli, script_command, script_env
from .tiers import sans_io

PAGES = [HERE / 'README.md', *sorted((HERE / 'docs').glob('*.md'))]
COMMAND = re.compile(r'^\s*(?:\$ )?python3 (stream_client|fixture_server)\.py(?=\s|$)')
TYPED = ('', 'sh', 'console', 'shell', 'bash')  # the fenced blocks whose lines are typed; text, json... are shown
EXITS = re.compile(r'#\s*exits (\d+)\b')
OUTPUTS = ('--output', '--report', '--csv', '--capture')  # the files a command creates, and refuses to overwrite

# (page, words of the command): why it does not run here. Each must match one command.
SKIPPED = {
    ('connections.md', '--ca-file internal-ca.pem'): 'a server on another host, behind a private CA (HTTPS to '
                                                     'loopback: tests/test_transport.py)',
    ('connections.md', '--output proxied-run.json'): 'a proxy and a server on other hosts (proxies: '
                                                     'tests/test_transport.py)',
    ('goodput.md', '--shard I/4'): 'one load from 4 machines, each with its own I, at a --start-at (shards: '
                                   'tests/test_plan.py)',
    ('goodput.md', '--summary shard-0.jsonl'): 'the files of the 4 machines above',
    ('kubernetes.md', '--summary load-1-shard-*.jsonl'): 'the files kubectl copies out of the cluster',
    ('loads.md', '--expect-finish length'): 'a real vLLM: "ignore_eos" makes it write exactly --max-tokens '
                                            'tokens, where the fixture always ends at 3',
}
# words of a command: the fixture mode that stands in for the real server of its --url (default ok)
FIXTURE_FOR = {'--sessions': 'agent', '--cross-check': 'pair-honest'}
# (page, words of the command): run at the user's pacing of --fixture (50 ms), because the doc's verdict is
# that pacing's (at the tests' 2 ms every run of the schedule's example would start on time), or to keep a
# timed verdict far from the machine's speed (the buffered candidate's first text is 17 writes after its
# send, the base's 3: 850 ms against 150, not 34 against 6)
USER_PACED = {('decisions.md', '--slo first_text_from_schedule_ms=800'), ('decisions.md', '--output base.jsonl'),
              ('decisions.md', '--output candidate.jsonl')}
# The pages with commands that wait by design (timed steps, a stall, a server paced as a user's): each runs
# in a thread of its own, its commands in new processes, while the other pages run here, in this process.
WAITING = {'cli.md', 'connections.md', 'decisions.md', 'fixture.md', 'goodput.md', 'workloads.md'}



def _interruptible() -> None:
    """In a server's new process: Ctrl+C (SIGINT) stops it as in a terminal, also when this suite runs as a
    background job, whose children inherit SIGINT ignored (and Python then never turns it into
    KeyboardInterrupt)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)

class DocCommand(NamedTuple):
    """One command of a page: where it is, what it runs, how the doc says it exits, and where its stdout goes."""

    page: str
    line: int
    text: str
    script: str
    args: tuple[str, ...]
    exits: int
    stdout: str | None

    def has(self, words: str) -> bool:
        return words in self.text

    def value(self, flag: str) -> str | None:
        return next((self.args[i + 1] for i, arg in enumerate(self.args[:-1]) if arg == flag), None)


def doc_commands(page: Path) -> tuple[list[DocCommand], list[int]]:
    """The commands of a page, in order, and the lines outside a fenced block that look like one."""
    lines = page.read_text(encoding='utf-8').splitlines()
    commands, stray, fence, info, number = [], [], None, '', 0
    while number < len(lines):
        line = lines[number]
        opening = re.match(r'\s*(```|~~~)\s*([\w-]*)', line)
        if fence is None and opening:
            fence, info = opening[1], opening[2]
        elif fence is not None and line.strip().startswith(fence):
            fence = None
        elif fence is None:
            if COMMAND.match(line):
                stray.append(number + 1)
        elif info in TYPED and COMMAND.match(line):
            first, text = number + 1, line.strip().removeprefix('$ ')
            while text.endswith('\\'):
                number += 1
                text = text[:-1] + ' ' + lines[number].strip()
            commands.append(parse_command(page.name, first, text))
        number += 1
    return commands, stray


def parse_command(page: str, line: int, text: str) -> DocCommand:
    words = shlex.split(text, comments=True)
    stdout = None
    if '>' in words:
        at = words.index('>')
        stdout, words = words[at + 1], words[:at]
    exits = EXITS.search(text)
    return DocCommand(page, line, text, words[1], tuple(words[2:]), int(exits[1]) if exits else 0, stdout)


def first_line(stream) -> str:
    """The first line a starting server prints ('' if it ends first)."""
    return stream.readline()


class PageRun:
    """The commands of one page, run in order in a folder of their own, with the servers they start; what
    went wrong is collected in ``problems`` as (line, message), so that a page can run in a thread."""

    def __init__(self, page: Path, commands: list[DocCommand], in_processes: bool, env: dict) -> None:
        self.page, self.commands, self.in_processes, self.env = page, commands, in_processes, env
        self.problems: list[tuple[int, str]] = []
        self.skipped: set[tuple[str, str]] = set()
        self.user_paced: set[tuple[str, str]] = set()
        self.servers: dict[int, tuple[subprocess.Popen, int]] = {}  # the doc's port: (process, its real port)
        self.fixtures: dict[str, Fixture] = {}  # the test's stand-ins for a real server, by mode

    def run_all(self) -> None:
        with tempfile.TemporaryDirectory(prefix='doc-commands-') as cwd:
            self.cwd = cwd
            os.symlink(HERE / 'testdata', Path(cwd) / 'testdata')
            try:
                for command in self.commands:
                    skip = next((key for key in SKIPPED if key[0] == self.page.name and command.has(key[1])), None)
                    if skip is not None:
                        self.skipped.add(skip)
                        continue
                    try:
                        self.run(command)
                    except Exception as exc:  # noqa: BLE001 (a thread's failure is reported by the test)
                        self.problems.append((command.line, f'{command.text}\n{type(exc).__name__}: {exc}'))
                for port, (process, _) in list(self.servers.items()):
                    self.stop(process, 0, f'the server of port {port}')
            finally:
                for process, _ in self.servers.values():
                    if process.poll() is None:
                        process.kill()
                        process.communicate()
                for fixture in self.fixtures.values():
                    fixture.__exit__()

    def check(self, held: bool, line: int, message: str) -> bool:
        if not held:
            self.problems.append((line, message))
        return held

    def run(self, command: DocCommand) -> None:
        if command.script == 'fixture_server.py':
            self.start_fixture(command)
        elif '--exporter' in command.args:
            self.probe_exporter(command)
        else:
            args = self.substituted(command)
            user_paced = {key for key in USER_PACED if key[0] == command.page and command.has(key[1])}
            self.user_paced |= user_paced
            done = run_cli(*args, cwd=self.cwd, timeout=120, process=self.in_processes,
                           **({'env': self.env} if self.in_processes else {}),
                           **({'fixture_delay': None} if user_paced else {}))
            if command.stdout is not None:
                Path(self.cwd, command.stdout).write_text(done.stdout, encoding='utf-8')
            self.check(done.returncode == command.exits, command.line,
                       f'{command.text}\nexit status {done.returncode}, not {command.exits}\n{done.stderr[-3000:]}')

    def substituted(self, command: DocCommand) -> list[str]:
        args = list(command.args)
        if '--url' in args:
            at = args.index('--url') + 1
            url = urllib.parse.urlsplit(args[at])
            if not self.check(url.hostname == '127.0.0.1', command.line,
                              f'{command.text}\na server on another host: add it to SKIPPED'):
                return args
            if url.port in self.servers:
                port = self.servers[url.port][1]
            else:
                mode = next((mode for words, mode in FIXTURE_FOR.items() if command.has(words)), 'ok')
                if mode not in self.fixtures:
                    self.fixtures[mode] = Fixture(mode).__enter__()
                port = urllib.parse.urlsplit(self.fixtures[mode].url).port
            args[at] = url._replace(netloc=f'127.0.0.1:{port}').geturl()
        return args

    def start_fixture(self, command: DocCommand) -> None:
        args = list(command.args)
        port = int(command.value('--port') or 18080)
        if '--port' in args:
            args[args.index('--port') + 1] = '0'
        if port in self.servers:  # the doc stops it with Ctrl+C and starts another on the same port
            self.stop(self.servers.pop(port)[0], command.line, f'the server of port {port}')
        process = subprocess.Popen(script_command(FIXTURE_SCRIPT, *args), cwd=self.cwd, stdin=subprocess.DEVNULL,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                   env=script_env(self.env), preexec_fn=_interruptible)
        line = first_line(process.stdout)
        if not line:  # it refused to start, as the doc may say
            _, stderr = process.communicate(timeout=30)
            self.check(process.returncode == command.exits, command.line,
                       f'{command.text}\nexit status {process.returncode}, not {command.exits}\n{stderr}')
            return
        self.servers[port] = (process, urllib.parse.urlsplit(line.split()[-1]).port)
        self.check(command.exits == 0, command.line, f'{command.text}\nserves, where the doc says it exits')

    def stop(self, process: subprocess.Popen, line: int, what: str) -> None:
        process.send_signal(signal.SIGINT)
        try:
            _, stderr = process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            _, stderr = process.communicate()
        self.check(process.returncode == 0, line, f'{what}: exit status {process.returncode} after Ctrl+C (-9: it had '
                                                  f'not stopped 30 s after it)\n{stderr}')

    def probe_exporter(self, command: DocCommand) -> None:
        args = list(command.args)
        args[args.index('--exporter') + 1] = '127.0.0.1:0'
        process = subprocess.Popen(script_command(CLIENT, *args), cwd=self.cwd, stdin=subprocess.DEVNULL,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                   env=script_env(self.env))
        try:
            line = first_line(process.stderr)
            listening = re.search(r'listening on (http://\S+/)', line)
            if self.check(listening is not None, command.line, f'{command.text}\n{line}'):
                target = re.search(r'"(demo-[\w-]+)"', Path(self.cwd, command.value('--targets')).read_text())[1]
                with urllib.request.urlopen(f'{listening[1]}probe?target={target}', timeout=60) as answer:
                    self.check(answer.status == 200, command.line, f'{command.text}\n/probe answered {answer.status}')
            process.send_signal(signal.SIGTERM)
            _, stderr = process.communicate(timeout=60)
            self.check(process.returncode == 143, command.line,
                       f'{command.text}\nexit status {process.returncode} after SIGTERM, not 143\n{stderr}')
        finally:
            if process.poll() is None:
                process.kill()
                process.communicate()


class DocCommandTests(unittest.TestCase):
    """The README's and the manual's commands run and end as the docs say, so that a reader's first
    commands work and the docs stay true as the code changes."""

    def test_every_command_of_the_docs_runs_and_exits_as_the_doc_says(self):
        env = dict(os.environ)  # the environment the new processes get, taken before any run changes it
        runs, threads = [], []
        for page in PAGES:
            commands, stray = doc_commands(page)
            outputs = [(command.line, name) for command in commands for flag in OUTPUTS
                       if (name := command.value(flag)) is not None]
            names = [name for _, name in outputs]
            with self.subTest(page=page.name, check='where the commands are and what they write'):
                self.assertEqual(stray, [], f'{page.name}: lines that look like a command outside a fenced ```sh '
                                            'block, which this test would not run')
                self.assertEqual(sorted(set(names)), sorted(names), f'{page.name}: two commands write one file, and '
                                                                    f'the second refuses: {outputs}')
            if commands:
                runs.append(PageRun(page, commands, page.name in WAITING, env))
        for run in runs:  # the pages that wait in threads of their own, their commands in new processes
            if run.in_processes:
                threads.append(threading.Thread(target=run.run_all, name=f'doc commands of {run.page.name}'))
                threads[-1].start()
        for run in runs:  # the others here, one after another, while those wait
            if not run.in_processes:
                run.run_all()
        for thread in threads:
            thread.join()
        for run in runs:
            for line, problem in run.problems:
                with self.subTest(page=run.page.name, line=line):
                    self.fail(f'{run.page.name}:{line}: {problem}')
        self.assertEqual(set().union(*(run.skipped for run in runs)), set(SKIPPED),
                         'an entry of SKIPPED matches no command of the docs')
        self.assertEqual(set().union(*(run.user_paced for run in runs)), USER_PACED,
                         'an entry of USER_PACED matches no command of the docs')
        self.assertGreater(sum(len(run.commands) for run in runs) - len(SKIPPED), 60)

    @sans_io
    def test_the_reader_finds_every_command(self):
        # the parts of a page the command test relies on, on a page made up for it
        page = Path(tempfile.mkdtemp()) / 'page.md'
        self.addCleanup(lambda: (page.unlink(), page.parent.rmdir()))
        page.write_text('text `python3 stream_client.py --fixture ok` in a line\n'
                        '```sh\n'
                        'python3 stream_client.py --fixture ok \\\n'
                        '    --output a.json   # exits 1: on purpose\n'
                        'python3 stream_client.py --summary a.jsonl > s.csv\n'
                        '```\n'
                        '```text\n'
                        'python3 fixture_server.py --port PORT\n'
                        '```\n'
                        '```\n'
                        '$ python3 fixture_server.py --mode okk\n'
                        'fixture_server.py: error: ...\n'
                        '```\n'
                        '    python3 stream_client.py --fixture broken\n', encoding='utf-8')
        commands, stray = doc_commands(page)
        self.assertEqual([(c.line, c.script, c.args, c.exits, c.stdout) for c in commands],
                         [(3, 'stream_client.py', ('--fixture', 'ok', '--output', 'a.json'), 1, None),
                          (5, 'stream_client.py', ('--summary', 'a.jsonl'), 0, 's.csv'),
                          (11, 'fixture_server.py', ('--mode', 'okk'), 0, None)])
        self.assertEqual(stray, [14])
