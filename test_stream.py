"""The guide's contract, and what users rely on: the public surface, the file copied alone, the docs.

``GuideContractTests`` needs only the three files the guide hands out (stream_client.py,
fixture_server.py and this one); the other classes need the checkout. The tests of each layer are in
tests/, one file per layer (docs/development.md)."""
from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import unittest
from pathlib import Path

import importlib.util

import fixture_server


def _the_shipped_file(path: Path):
    """stream_client.py beside this file, the one file users copy, as a module of its own: whatever this
    process imports as stream_client elsewhere (tests/ runs the package in src/), the tests here run the
    generated file, and leave sys.modules as they found it."""
    spec = importlib.util.spec_from_file_location('stream_client', path)
    module = importlib.util.module_from_spec(spec)
    before = sys.modules.get('stream_client')
    sys.modules['stream_client'] = module  # while it runs: its dataclasses look their module up
    try:
        spec.loader.exec_module(module)
    finally:
        if before is None:
            del sys.modules['stream_client']
        else:
            sys.modules['stream_client'] = before
    return module


stream_client = _the_shipped_file(Path(__file__).resolve().parent / 'stream_client.py')
Events, stream = stream_client.Events, stream_client.stream

try:
    from tests.support import AMALGAMATE, CLIENT, Fixture, HERE, script_command, script_env, shipped_command
except ImportError:  # the guide's three files alone
    AMALGAMATE, HERE = None, Path(__file__).resolve().parent
CHECKOUT = unittest.skipIf(AMALGAMATE is None, 'needs the checkout (tests/support.py), not only the guide\'s files')


class GuideContractTests(unittest.TestCase):
    """The five behaviours the guide's own tests check, through the guide's interfaces: ``Events``,
    ``stream()`` and ``fixture_server.server()``."""

    def record_of(self, mode: str = 'ok', **options) -> dict:
        instance = fixture_server.server(0, mode, 0.02)  # 20 ms apart: the first text and the end in reads of their own
        thread = threading.Thread(target=instance.serve_forever, args=(0.01,), daemon=True)  # shutdown() within 10 ms
        thread.start()
        try:
            return stream(f'http://127.0.0.1:{instance.server_port}/v1/chat/completions', 'synthetic-fixture',
                          'READY', **options)
        finally:
            instance.shutdown()
            thread.join()
            instance.server_close()

    def test_utf8_and_every_line_end_survive_every_chunk_boundary(self):
        body = '\ufeff: a comment\rdata: one \u2713\rdata: two\r\rdata: three\n\ndata: four\r\n\r\n'.encode()
        for size in range(1, len(body) + 1):
            parser, events = Events(), []
            for at in range(0, len(body), size):
                events += parser.feed(body[at:at + size])
            parser.finish()
            self.assertEqual(events, ['one \u2713\ntwo', 'three', 'four'], f'{size}-byte reads')

    def test_an_unfinished_event_is_dropped_and_the_guides_bounds_hold(self):
        parser = Events()
        self.assertEqual(parser.feed(b'data: no blank line yet'), [])
        parser.finish()  # an event without its blank line is not dispatched, and not an error either
        with self.assertRaises(ValueError):
            Events().feed(b'x' * 65_537)  # the guide bounds a line at 65,536 characters
        Events().feed(b'x' * 65_536)
        with self.assertRaises(ValueError):
            Events().feed(b''.join(b'data: ' + b'x' * 60_000 + b'\n' for _ in range(18)))  # an event over 1 MiB
        parser = Events()
        parser.feed('data: \u2713'.encode()[:-1])
        with self.assertRaises(UnicodeDecodeError):
            parser.finish()

    def test_a_finished_stream_keeps_its_text_usage_and_clock_order(self):
        record = self.record_of()
        self.assertTrue(record['ok'], record['error'])
        self.assertEqual((record['text'], record['finish_reason'], record['done']), ('READY \u2713', 'stop', True))
        self.assertEqual((record['completion_tokens'], record['content_events'], len(record['event_gaps_ms'])),
                         (3, 2, 1))
        self.assertLess(0, record['first_text_ms'])
        self.assertLess(record['first_text_ms'], record['duration_ms'])

    def test_no_failure_mode_becomes_a_success(self):
        for mode in ('broken', 'length', 'malformed', 'http-error'):
            with self.subTest(mode=mode):
                record = self.record_of(mode)
                self.assertFalse(record['ok'])
                self.assertTrue(record['error'])
                self.assertEqual(record['text'], '' if mode == 'http-error' else 'READY \u2713')

    def test_the_deadline_and_plain_http_beyond_loopback_are_refused(self):
        self.assertFalse(self.record_of(deadline=0.001)['ok'])
        for url in ('http://192.0.2.1:8000/v1/chat/completions', 'https://user:secret@example.com/v1/chat/completions'):
            with self.subTest(url=url), self.assertRaises(ValueError):
                stream(url, 'demo', 'hi')


@CHECKOUT
class ModuleShapeTests(unittest.TestCase):
    """What a maintainer relies on: ``__all__`` names exactly the public API (as httpx's
    tests/test_exported_members.py checks), and the map in the docstring stays true."""

    def test_all_names_exactly_the_public_names(self):
        tree = ast.parse(Path(CLIENT).read_text(encoding='utf-8'))
        defined = {node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))}
        defined |= {target.id for node in tree.body if isinstance(node, (ast.Assign, ast.AnnAssign))
                    for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
                    if isinstance(target, ast.Name)}
        public = sorted(name for name in defined if not name.startswith('_'))
        self.assertEqual(public, sorted(stream_client.__all__))  # a new name is public only when it says so
        self.assertEqual(len(stream_client.__all__), len(set(stream_client.__all__)))
        for name in stream_client.__all__:
            self.assertTrue(getattr(stream_client, name).__doc__ or name.isupper(), f'{name} has no docstring')

    def test_the_map_names_every_module_in_the_order_of_the_layers(self):
        doc = stream_client.__doc__
        self.assertEqual(tuple(re.findall(r'^(_\w+) ', doc, re.M)), AMALGAMATE.MODULES)
        banners = re.findall(r'^# ==== src/stream_client/(\w+)\.py ====$', Path(CLIENT).read_text(encoding='utf-8'),
                             re.M)
        self.assertEqual(tuple(banners), AMALGAMATE.MODULES + ('__main__',))
        named = set(re.findall(r'``(\w+)(?:\(\))?``', doc))
        for validator in stream_client.VALIDATORS.values():
            self.assertIn(validator.__name__, named)
        instances = (stream_client.ChatChunks(), stream_client.ResponseReader(stream_client.ChatChunks()))
        for name in named - {'__all__'}:
            with self.subTest(name=name):  # every name the docstring gives exists, so none goes stale
                self.assertTrue(hasattr(stream_client, name) or any(hasattr(thing, name) for thing in instances), name)


def github_anchor(heading: str) -> str:
    """The #anchor GitHub gives a Markdown heading."""
    return re.sub(r'[^\w\- ]', '', heading.strip().lower()).replace(' ', '-')


@CHECKOUT
class DocsTests(unittest.TestCase):
    """The manual in docs/ stays whole: every flag and fixture mode is documented, and no link is dead."""

    PAGES = [HERE / 'README.md', *sorted((HERE / 'docs').glob('*.md'))]

    def docs_text(self) -> str:
        return '\n'.join(page.read_text(encoding='utf-8') for page in self.PAGES[1:])

    def test_every_flag_that_help_prints_is_in_the_docs(self):
        docs = self.docs_text()
        for name, command in (('stream_client.py', shipped_command('--help')),
                              ('fixture_server.py', script_command(str(HERE / 'fixture_server.py'), '--help'))):
            usage = subprocess.run(command, capture_output=True, text=True, timeout=30, env=script_env()).stdout
            flags = set(re.findall(r'(?<![\w-])(--[a-z][a-z-]*)', re.sub(r'-\n\s+', '-', usage)))
            self.assertGreater(len(flags), 10)
            for flag in sorted(flags):
                with self.subTest(script=name, flag=flag):
                    self.assertTrue(re.search(rf'(?<![\w-]){re.escape(flag)}(?![a-z-])', docs),
                                    f'{flag} is not in docs/')

    def test_every_fixture_mode_is_in_the_docs(self):
        docs = self.docs_text()
        for mode in fixture_server.CHOICES:
            with self.subTest(mode=mode):
                self.assertIn(f'| `{mode}` |', docs)  # a row of the fixture's table of modes

    def test_every_relative_link_resolves(self):
        anchors = {}
        for page in self.PAGES:
            text = re.sub(r'```.*?```', '', page.read_text(encoding='utf-8'), flags=re.S)
            anchors[page.resolve()] = {github_anchor(heading) for heading in re.findall(r'^#+ (.+)$', text, re.M)}
        links = 0
        for page in self.PAGES:
            text = re.sub(r'```.*?```', '', page.read_text(encoding='utf-8'), flags=re.S)
            for target in re.findall(r'\]\(([^)\s]+)\)', text):
                if re.match(r'[a-z]+:', target):
                    continue  # not relative
                links += 1
                path, _, anchor = target.partition('#')
                destination = (page.parent / path).resolve() if path else page.resolve()
                with self.subTest(page=page.name, link=target):
                    self.assertTrue(destination.exists(), f'{page.name} links to {target}, which does not exist')
                    if anchor and destination.suffix == '.md':
                        self.assertIn(anchor, anchors.get(destination, set()), f'{page.name}: no heading #{anchor}')
        self.assertGreater(links, 20)

    def test_each_doc_opens_with_what_it_is_for_and_who_needs_it(self):
        for page in self.PAGES[1:]:
            with self.subTest(page=page.name):
                title, blank, first, *_ = page.read_text(encoding='utf-8').splitlines()
                self.assertTrue(title.startswith('# ') and blank == '', page.name)
                self.assertRegex(first, r'^For (anyone|everyone)')

    def test_the_readme_stays_short_and_its_test_command_is_what_ci_runs(self):
        readme = (HERE / 'README.md').read_text(encoding='utf-8')
        self.assertLessEqual(len(readme.splitlines()), 250)
        self.assertTrue(readme.split('```sh\n')[1].startswith('python3 stream_client.py --fixture ok --output '
                                                               'fixture-ok.json\npython3 -m unittest\n```'))
        self.assertIn('"$python" -m unittest 2>&1', (HERE / '.ci' / 'run').read_text())

    def test_the_readme_says_how_to_install_the_commands_the_package_gives(self):
        readme = (HERE / 'README.md').read_text(encoding='utf-8')
        scripts = re.search(r'^\[project\.scripts\]\n((?:.+\n)+)', (HERE / 'pyproject.toml').read_text(), re.M)[1]
        commands = re.findall(r'^([\w-]+) = "(\w+):main"$', scripts, re.M)
        self.assertEqual(commands, [('stream-client', 'stream_client'), ('stream-fixture', 'fixture_server')])
        for words in ('`pipx install .`', '`pip install .`', '`stream-client`', '`stream-fixture`',
                      '[install.md](docs/install.md)'):
            self.assertIn(words, readme)
        install = (HERE / 'docs' / 'install.md').read_text(encoding='utf-8')
        for command, module in commands:
            self.assertIn(f'| `{command}` | `python3 {module}.py` |', install)

@CHECKOUT
class ShippedFileTests(unittest.TestCase):
    """One run of each command through the generated stream_client.py itself (tests/ runs the package in
    src/): a run and a load of the built-in fixture, --summary and --compare of the load, sessions and a
    trace of the shipped examples, each with the exit status and the figures the package gives."""

    def test_each_command_runs_through_the_generated_file(self):
        examples = HERE / 'testdata' / 'examples'
        with tempfile.TemporaryDirectory() as folder:
            def shipped(*args: str) -> subprocess.CompletedProcess:
                return subprocess.run(shipped_command(*args), cwd=folder, capture_output=True, text=True,
                                      timeout=120, env=script_env(), stdin=subprocess.DEVNULL)
            runs = {'one run': shipped('--fixture', 'ok', '--output', 'one.json'),
                    'a load': shipped('--fixture', 'ok', '--runs', '3', '--concurrency', '3', '--output', 'load.jsonl'),
                    'sessions': shipped('--fixture', 'agent', '--sessions', str(examples / 'sessions.jsonl'),
                                        '--runs', '2', '--output', 'sessions.jsonl'),
                    'a trace': shipped('--fixture', 'ok', '--trace', str(examples / 'mooncake.jsonl'), '--runs', '3',
                                       '--output', 'trace.jsonl')}
            runs['--summary'] = shipped('--summary', 'load.jsonl')
            runs['--compare'] = shipped('--compare', 'load.jsonl', 'load.jsonl', '--format', 'markdown')
            for name, done in runs.items():
                with self.subTest(command=name):
                    self.assertEqual(done.returncode, 0, done.stderr)
            self.assertTrue(json.loads(runs['one run'].stdout)['ok'])
            self.assertEqual(json.loads(runs['--summary'].stdout)['ok'], 3)
            self.assertEqual(json.loads(runs['sessions'].stdout)['sessions']['ok'], 2)
            self.assertEqual(json.loads(runs['a trace'].stdout)['trace']['ok'], 3)


@CHECKOUT
class CopiedAloneTests(unittest.TestCase):
    """stream_client.py copied alone into an empty folder, run by an isolated Python (-I: nothing on the
    path but the standard library), as on a GPU host: everything but --fixture works."""

    def setUp(self) -> None:
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.dir = Path(tmp.name)
        (self.dir / 'stream_client.py').write_bytes(Path(CLIENT).read_bytes())

    def alone(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, '-I', 'stream_client.py', *args], cwd=self.dir, capture_output=True,
                              text=True, timeout=60, stdin=subprocess.DEVNULL, env={'PATH': os.environ['PATH']})

    def test_help_a_run_a_load_and_its_summary(self):
        self.assertEqual(sorted(path.name for path in self.dir.iterdir()), ['stream_client.py'])
        done = self.alone('--help')
        self.assertEqual((done.returncode, done.stderr), (0, ''))
        self.assertIn('--fixture MODE', done.stdout)
        with Fixture() as fixture:
            one = self.alone('--url', fixture.url, '--model', 'm', '--output', 'run.json')
            self.assertEqual(one.returncode, 0, one.stderr)
            self.assertTrue(json.loads((self.dir / 'run.json').read_text())['ok'])
            load = self.alone('--url', fixture.url, '--model', 'm', '--runs', '4', '--concurrency', '2',
                              '--output', 'load.jsonl')
            self.assertEqual(load.returncode, 0, load.stderr)
        self.assertEqual(json.loads(load.stdout)['ok'], 4)
        summary = self.alone('--summary', 'load.jsonl')
        self.assertEqual(summary.returncode, 0, summary.stderr)
        self.assertEqual(json.loads(summary.stdout)['runs'], 4)

    def test_the_guides_three_files_alone_pass_the_guides_tests(self):
        for name in ('fixture_server.py', 'test_stream.py'):
            (self.dir / name).write_bytes((HERE / name).read_bytes())
        done = subprocess.run([sys.executable, '-m', 'unittest', '-v', 'test_stream.py'], cwd=self.dir, text=True,
                              capture_output=True, timeout=120, stdin=subprocess.DEVNULL,
                              env={'PATH': os.environ['PATH']})
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual(len(re.findall(r'^test_\w+ \(test_stream\.GuideContractTests(\.\w+)?\) \.\.\. ok$',
                                        done.stderr, re.M)), 5, done.stderr)

    def test_fixture_without_its_file_is_one_line_and_exit_2(self):
        done = self.alone('--fixture', 'ok', '--output', 'run.json')
        self.assertEqual((done.returncode, done.stdout), (2, ''))
        self.assertRegex(done.stderr, r'^stream_client\.py: error: --fixture needs fixture_server\.py beside '
                                      r'stream_client\.py .*\n$')
        self.assertFalse((self.dir / 'run.json').exists())
        (self.dir / 'fixture_server.py').write_bytes((HERE / 'fixture_server.py').read_bytes())
        done = self.alone('--fixture', 'ok', '--output', 'run.json')  # beside it, -I or not, it is found
        self.assertEqual(done.returncode, 0, done.stderr)


if __name__ == '__main__':
    unittest.main()
