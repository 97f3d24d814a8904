"""The command line end to end (_args, _views, _evidence, _cli)."""
from __future__ import annotations

import ast
import hashlib
import itertools
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest
from pathlib import Path

import fixture_server
import stream_client
from .support import (
    CLIENT, fake_record, Fixture, FIXTURE_SCRIPT, HERE, LoopbackServer, replay, run_cli, run_in_terminal,
    script_command, script_env, SRC, TRACES)
from .tiers import sans_io


class CommandLineTests(unittest.TestCase):
    def setUp(self) -> None:
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.dir = Path(self.tmp.name)

    def cli(self, mode: str, *args: str, **kwargs) -> subprocess.CompletedProcess:
        """The command line against a fast fixture in MODE (the built-in --fixture paces writes 50 ms apart)."""
        with Fixture(mode) as fixture:
            return run_cli('--url', fixture.url, '--model', 'synthetic-fixture', *args, cwd=self.tmp.name, **kwargs)

    def test_a_lone_surrogate_from_the_server_still_gets_whole_records(self):
        """JSON's escape \\ud800 decodes to a character UTF-8 cannot encode: the record, the load's lines (one
        process and two) and the summary are still written whole, the text kept exactly."""
        events = [b'data: {"choices":[{"index":0,"delta":{"content":"Hel\\ud800lo"},"finish_reason":null}]}\n\n',
                  b'data: {"choices":[{"index":0,"delta":{"content":" w\xc3\xa9"},"finish_reason":"stop"}]}\n\n',
                  b'data: [DONE]\n\n']
        response = (b'HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n'
                    % len(b''.join(events))) + b''.join(events)
        with Fixture(replay=response) as fixture:
            url = ('--url', fixture.url, '--model', 'm')
            done = run_cli(*url, '--output', 'one.json', cwd=self.tmp.name)
            self.assertEqual(done.returncode, 0, done.stderr)
            self.assertEqual(json.loads((self.dir / 'one.json').read_text())['text'], 'Hel\ud800lo w\u00e9')
            for processes in ('1', '2'):
                done = run_cli(*url, '--runs', '2', '--processes', processes, '--output', f'load{processes}.jsonl',
                               cwd=self.tmp.name)
                self.assertEqual(done.returncode, 0, done.stderr)
                lines = (self.dir / f'load{processes}.jsonl').read_text().splitlines()
                self.assertEqual([json.loads(line)['text'] for line in lines], ['Hel\ud800lo w\u00e9'] * 2)
                self.assertEqual(json.loads(done.stdout.splitlines()[-1])['ok'], 2)
        self.assertEqual(stream_client._json._json_text({'text': 'w\u00e9'}), '{"text": "w\u00e9"}')  # kept as itself

    def test_fixture_demo_writes_an_ok_record_and_one_summary_line(self):
        done = run_cli('--fixture', 'ok', '--output', 'run.json', cwd=self.tmp.name)
        self.assertEqual(done.returncode, 0, done.stderr)
        record = json.loads((self.dir / 'run.json').read_text())
        self.assertEqual((record['ok'], record['text'], record['model']), (True, 'READY \u2713', 'synthetic-fixture'))
        summary = json.loads(done.stdout)
        self.assertEqual(done.stdout.count('\n'), 1)
        self.assertTrue(summary['ok'])
        self.assertEqual(os.stat(self.dir / 'run.json').st_mode & 0o777, 0o600)

    def test_not_ok_run_exits_1_with_its_record(self):
        done = self.cli('broken', '--output', 'run.json')
        self.assertEqual(done.returncode, 1)
        record = json.loads((self.dir / 'run.json').read_text())
        self.assertEqual((record['ok'], record['text'], record['done']), (False, 'READY \u2713', False))

    def test_existing_output_is_refused_and_untouched(self):
        (self.dir / 'run.json').write_text('precious')
        done = run_cli('--fixture', 'ok', '--output', 'run.json', cwd=self.tmp.name)
        self.assertEqual(done.returncode, 2)
        self.assertEqual((self.dir / 'run.json').read_text(), 'precious')
        self.assertEqual(done.stderr.count('\n'), 1)
        self.assertIn('already exists', done.stderr)

    def test_bad_command_lines_exit_2_with_one_line_no_file_and_no_request(self):
        (self.dir / 'taken.json').write_text('kept')
        with Fixture() as fixture:
            good = ['--url', fixture.url, '--model', 'm', '--output', 'run.json']
            cases = {
                'ftp URL': good + ['--url', 'ftp://127.0.0.1/v1/chat/completions'],
                'credentials in URL': good + ['--url', 'https://user:secret@localhost/v1/chat/completions'],
                'plain http to a remote host': good + ['--url', 'http://203.0.113.9/v1/chat/completions'],
                'negative idle': good + ['--idle', '-1'],
                'NaN deadline': good + ['--deadline', 'nan'],
                'infinite idle': good + ['--idle', 'inf'],
                'max tokens 0': good + ['--max-tokens', '0'],
                'max tokens 40000': good + ['--max-tokens', '40000'],
                'max tokens not a number': good + ['--max-tokens', 'many'],
                'extra not JSON': good + ['--extra', '{not json'],
                'extra not an object': good + ['--extra', '[1]'],
                'extra overrides stream': good + ['--extra', '{"stream": false}'],
                'missing CA file': good + ['--url', 'https://localhost:9/v1/chat/completions', '--ca-file', 'no.pem'],
                'output exists': good + ['--output', 'taken.json'],
                'output directory missing': good + ['--output', 'missing/run.json'],
                'unknown fixture mode': ['--fixture', 'no-such-mode', '--output', 'run.json'],
                'fixture and URL': good + ['--fixture', 'ok'],
                'missing prompt file': good + ['--prompt-file', 'absent.txt'],
                'prompt twice': good + ['--prompt', 'a', '--prompt-file', '-'],
                'capture is the output': good + ['--capture', 'run.json'],
                'unknown flag': good + ['--verify', 'no'],
                'a path of no known API': good + ['--url', fixture.url.replace('/v1/chat/completions', '/v2/chat')],
                'an unknown --api': good + ['--api', 'embeddings'],
                'a fixture mode of another API': ['--fixture', 'sequence-gap', '--output', 'run.json'],
            }
            results = {name: run_cli(*args, cwd=self.tmp.name) for name, args in cases.items()}
            for name, done in results.items():
                with self.subTest(name):
                    self.assertEqual(done.returncode, 2, done.stderr)
                    self.assertEqual(done.stderr.count('\n'), 1, done.stderr)
                    self.assertNotIn('Traceback', done.stderr)
                    self.assertNotIn('secret', done.stderr)
                    self.assertEqual(sorted(p.name for p in self.dir.iterdir()), ['taken.json'])
            self.assertIsNone(fixture.last_request)
        self.assertEqual((self.dir / 'taken.json').read_text(), 'kept')

    def test_messages_name_what_the_user_typed(self):
        load = self.dir / 'load.jsonl'
        load.write_text(''.join(json.dumps(fake_record(run)) + '\n' for run in range(2)))
        cases = {
            ('--fixture', 'ok', '--max-tokens', '0', '--output', 'a.json'):
                '--max-tokens must be an integer from 1 to 32768, got 0',
            ('--fixture', 'ok', '--idle', '0', '--output', 'a.json'): '--idle must be a finite number more than 0',
            ('--fixture', 'ok', '--temperature', '-1', '--output', 'a.json'): '--temperature must be a finite number',
            ('--fixture', 'ok', '--runs', '0', '--output', 'a.jsonl'): '--runs must be a positive integer, got 0',
            ('--fixture', 'ok', '--output', ''): "cannot create '': the file name is empty",
            ('--fixture', 'ok', '--output', '-'): '--output - is not supported: stdout carries the summary line',
            ('--fixture', 'ok', '--output', 'missing/a.json'): "cannot create 'missing/a.json': its directory does",
            ('--summary', 'load.jsonl', '--runs', '5', '--concurrency', '3'):
                '--summary only reads saved evidence; --runs, --concurrency are for runs that send requests',
            ('--compare', 'load.jsonl', '--capture', 'c.http'):
                '--compare only reads saved evidence; --capture is for runs that send requests',
            ('--summary', 'load.jsonl', '--compare', 'load.jsonl'): '--compare and --summary exclude each other',
            ('--fixture', 'ok', '--keep-alive', '--output', 'a.jsonl'): '--keep-alive is for a load, not a single run',
            ('--compare', 'load.jsonl'): '--compare of loads takes two files, BASE CANDIDATE, not 1; use --summary '
                                         'load.jsonl to read one load',
        }
        results = [run_cli(*args, cwd=self.tmp.name) for args in cases]
        for (args, words), done in zip(cases.items(), results):
            with self.subTest(args=args):
                self.assertEqual((done.returncode, done.stdout), (2, ''))
                self.assertEqual(done.stderr.count('\n'), 1, done.stderr)
                self.assertIn(words, done.stderr)
        self.assertEqual(sorted(p.name for p in self.dir.iterdir()), ['load.jsonl'])

    def test_tool_and_json_flags_that_cannot_be_sent_exit_2_before_anything(self):
        (self.dir / 'tools.json').write_text(json.dumps(fixture_server.TOOLS))
        (self.dir / 'bad-schema.json').write_text('{"type": "strng"}')
        (self.dir / 'not-json.json').write_text('[{')
        (self.dir / 'not-a-tool.json').write_text('[{"name": "get_weather"}]')
        cases = {
            ('--api', 'completions', '--tools', 'tools.json'): 'the completions API has no tools',
            ('--tool-choice', 'required'): '--tool-choice needs --tools',
            ('--tools', 'tools.json', '--tool-choice', 'get_time'): "--tool-choice 'get_time' is none of auto, "
                                                                     'required, none and names no tool offered',
            ('--tools', 'absent.json'): "cannot read --tools 'absent.json': No such file or directory",
            ('--tools', 'not-json.json'): "--tools 'not-json.json' is not JSON",
            ('--tools', 'not-a-tool.json'): '--tools[0] is not {"type": "function", "function": {"name": ...',
            ('--json-schema', 'bad-schema.json'): '--json-schema is not a valid schema: #/type: expected one of null,',
            ('--extra', '{"tools": []}'): "--extra may not set 'tools'; use --tools",
        }
        results = [run_cli('--fixture', 'ok', '--output', 'run.json', *args, cwd=self.tmp.name) for args in cases]
        for (args, words), done in zip(cases.items(), results):
            with self.subTest(args=args):
                self.assertEqual((done.returncode, done.stdout, done.stderr.count('\n')), (2, '', 1), done.stderr)
                self.assertIn(words, done.stderr)
        self.assertFalse((self.dir / 'run.json').exists())

    def test_the_tool_call_demo_is_ok_and_a_cut_call_is_caught(self):
        done = run_cli('--fixture', 'tool-call', '--output', 'call.json', cwd=self.tmp.name)  # the fixture's own tool
        record = json.loads((self.dir / 'call.json').read_text())
        self.assertEqual((done.returncode, record['ok'], record['answer_kind']), (0, True, 'tool_calls'))
        self.assertEqual(record['tool_calls'], [{'index': 0, 'id': 'chatcmpl-tool-1', 'name': 'get_weather',
                                                 'arguments': '{"city": "Paris"}', 'arguments_problem': None}])
        cut = run_cli('--fixture', 'tool-args-cut', '--output', 'cut.json', cwd=self.tmp.name)
        self.assertEqual(cut.returncode, 1)
        self.assertIn('NOT OK [application]: tool call 0 (get_weather): the arguments are not JSON', cut.stderr)
        status, screen = run_in_terminal('--fixture', 'tool-call', '--api', 'responses', '--output', 'live.json',
                                         cwd=self.tmp.name)
        self.assertEqual(status, 0, screen)
        self.assertIn('get_weather({"city": "Paris"})\r\nok: 3 content events', screen)

    def test_capture_replays_to_the_same_verdict(self):
        done = self.cli('error-event', '--output', 'run.json', '--capture', 'run.http')
        self.assertEqual(done.returncode, 1, done.stderr)
        original = json.loads((self.dir / 'run.json').read_text())
        captured = (self.dir / 'run.http').read_bytes()
        self.assertTrue(captured.startswith(b'HTTP/1.1 200 OK\r\n'))
        replayed = replay(captured)
        for key in ('ok', 'error', 'text', 'server_error', 'transport_complete', 'data_events'):
            self.assertEqual(replayed[key], original[key], key)
        self.assertEqual(original['capture'], {'bytes': len(captured), 'truncated': False, 'file': 'run.http'})

    @sans_io
    def test_capture_masks_the_key_without_changing_lengths(self):
        fd = os.open(self.dir / 'c.http', os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        capture = stream_client.Capture()
        capture.keep(b'5\r\nsk-ab\r\n')
        self.assertEqual(stream_client._evidence._save_capture(fd, str(self.dir / 'c.http'), capture, ('sk-ab',)),
                         str(self.dir / 'c.http'))
        self.assertEqual((self.dir / 'c.http').read_bytes(), b'5\r\n*****\r\n')

    def test_a_capture_of_nothing_is_removed_and_the_record_says_so(self):
        with socket.create_server(('127.0.0.1', 0)) as probe:
            port = probe.getsockname()[1]
        done = run_cli('--url', f'http://127.0.0.1:{port}/v1/chat/completions', '--model', 'm',
                       '--output', 'run.json', '--capture', 'run.http', cwd=self.tmp.name)
        self.assertEqual(done.returncode, 1)
        record = json.loads((self.dir / 'run.json').read_text())
        self.assertEqual((record['error_layer'], record['capture']), ('connect', {'bytes': 0, 'truncated': False,
                                                                                 'file': None}))
        self.assertFalse((self.dir / 'run.http').exists())

    def test_a_failed_run_keeps_what_arrived_in_its_capture(self):
        done = self.cli('truncated', '--output', 'run.json', '--capture', 'run.http')
        self.assertEqual(done.returncode, 1)
        record = json.loads((self.dir / 'run.json').read_text())
        captured = (self.dir / 'run.http').read_bytes()
        self.assertEqual(record['capture'], {'bytes': len(captured), 'truncated': False, 'file': 'run.http'})
        self.assertTrue(captured.endswith(b'data: [DONE]\n\n'))

    def test_existing_capture_file_is_refused_before_anything_is_created(self):
        (self.dir / 'run.http').write_text('old')
        done = run_cli('--fixture', 'ok', '--output', 'run.json', '--capture', 'run.http', cwd=self.tmp.name)
        self.assertEqual(done.returncode, 2)
        self.assertEqual(sorted(p.name for p in self.dir.iterdir()), ['run.http'])

    def test_prompt_file_and_stdin_become_the_user_message(self):
        with Fixture() as fixture:
            done = run_cli('--url', fixture.url, '--model', 'm', '--prompt-file', '-', '--output', 'run.json',
                           cwd=self.tmp.name, input='from stdin\n')
            self.assertEqual(done.returncode, 0, done.stderr)
            self.assertEqual(fixture.last_request[1]['messages'], [{'role': 'user', 'content': 'from stdin\n'}])
        record = json.loads((self.dir / 'run.json').read_text())
        self.assertEqual(record['request']['prompt_sha256'], hashlib.sha256(b'from stdin\n').hexdigest())

    def run_in_pty(self, mode: str, *args: str) -> tuple[int, str]:
        """Run against a fast fixture with stderr on a pseudo-terminal, as a person would; stdout stays a pipe."""
        with Fixture(mode) as fixture:
            return run_in_terminal('--url', fixture.url, '--model', 'synthetic-fixture', *args, cwd=self.tmp.name)

    def test_terminal_shows_reasoning_dimmed_then_the_answer_then_a_verdict(self):
        status, screen = self.run_in_pty('reasoning', '--output', 'run.json')
        self.assertEqual(status, 0)
        lines = screen.replace('\r\n', '\n').split('\n')
        self.assertEqual(lines[0], '\x1b[2mreasoning: The user wants \x1b[0m\x1b[2mone word.\x1b[0m')
        self.assertEqual(lines[1], 'READY \u2713')
        self.assertRegex(lines[2], r'^ok: 2 content events, first text \d+ ms, done \d+ ms$')

    @sans_io
    def test_the_verdict_line_names_the_dialect_that_judged_the_run(self):
        ok = {'ok': True, 'content_events': 2, 'first_text_ms': 5.0, 'duration_ms': 9.0, 'cross_check': None}
        self.assertEqual(stream_client._views._verdict_line({**ok, 'dialect': 'llama.cpp'}),
                         'ok: 2 content events, first text 5 ms, done 9 ms; dialect llama.cpp (docs/dialects.md)')
        for dialect in (None, 'strict'):
            self.assertEqual(stream_client._views._verdict_line({**ok, 'dialect': dialect}),
                             'ok: 2 content events, first text 5 ms, done 9 ms')
        failed = {'ok': False, 'error_layer': 'application', 'error': 'application: x', 'cross_check': None,
                  'dialect': 'tgi'}
        self.assertEqual(stream_client._views._verdict_line(failed),
                         'NOT OK [application]: x; dialect tgi (docs/dialects.md)')

    def test_terminal_verdict_names_the_failing_layer(self):
        status, screen = self.run_in_pty('truncated', '--output', 'run.json')
        self.assertEqual(status, 1)
        self.assertIn('READY \u2713\r\nNOT OK [transport]: connection closed after 445 of 509 body bytes\r\n', screen)

    def test_quiet_keeps_the_terminal_silent(self):
        status, screen = self.run_in_pty('broken', '--output', 'run.json', '--quiet')
        self.assertEqual((status, screen), (1, ''))

    def test_without_a_terminal_only_failures_reach_stderr(self):
        ok = self.cli('ok', '--output', 'ok.json')
        failed = self.cli('broken', '--output', 'broken.json')
        self.assertEqual(ok.stderr, '')
        self.assertEqual(failed.stderr, 'NOT OK [application]: EOF before [DONE] after 2 content events\n')

    def test_compare_prints_one_aligned_column_per_record(self):
        for mode in ('ok', 'broken'):
            self.cli(mode, '--output', f'{mode}.json')
        done = run_cli('--compare', 'ok.json', 'broken.json', cwd=self.tmp.name)
        self.assertEqual((done.returncode, done.stderr), (0, ''))
        lines = done.stdout.splitlines()
        self.assertEqual([line[:12].rstrip() for line in lines],
                         [name for name, _ in stream_client._views._COMPARE_COLUMNS])
        rows = {name: line[12:].split() for (name, _), line in zip(stream_client._views._COMPARE_COLUMNS, lines)}
        reads = json.loads((self.dir / 'ok.json').read_text())['content_reads']  # 1 or 2, as the reads fell
        self.assertEqual(rows['file'], ['ok.json', 'broken.json'])
        self.assertEqual([rows[name] for name in ('source', 'ok', 'layer', 'events', 'tokens', 'text reads')],
                         [['fixture', 'fixture'], ['yes', 'no'], ['-', 'application'], ['2', '2'], ['3', '-'],
                          [str(reads), rows['text reads'][1]]])
        self.assertEqual(lines[0].index('broken.json'), lines[3].index('no'))  # aligned

    def test_compare_refuses_to_mix_sources_unless_asked(self):
        self.cli('ok', '--output', 'fixture.json')
        capture = (TRACES / 'a2_chat_stream_usage_eos_stop.http').read_bytes()
        with Fixture(replay=capture) as fixture:
            run_cli('--url', fixture.url, '--model', 'tiny', '--output', 'replay.json', cwd=self.tmp.name)
            fixture.instance.replay = (b'', [capture])  # the bytes exactly as a live vLLM sent them
            run_cli('--url', fixture.url, '--model', 'tiny', '--output', 'endpoint.json', cwd=self.tmp.name)
        sources = {name: json.loads((self.dir / f'{name}.json').read_text())['source']
                   for name in ('fixture', 'replay', 'endpoint')}
        self.assertEqual(sources, {'fixture': 'fixture', 'replay': 'replay', 'endpoint': 'endpoint'})
        for pair in (('fixture', 'endpoint'), ('replay', 'endpoint'), ('fixture', 'replay')):
            with self.subTest(pair=pair):
                done = run_cli('--compare', *(f'{name}.json' for name in pair), cwd=self.tmp.name)
                self.assertEqual((done.returncode, done.stdout), (2, ''))
                self.assertIn(f'refusing to compare records of different sources ({", ".join(sorted(pair))})',
                              done.stderr)
        done = run_cli('--compare', 'replay.json', 'endpoint.json', '--mixed-sources', cwd=self.tmp.name)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual(len(done.stdout.splitlines()), len(stream_client._views._COMPARE_COLUMNS))

    def test_compare_warns_when_the_configurations_differ(self):
        self.cli('ok', '--output', 'a.json')
        self.cli('ok', '--output', 'b.json', '--max-tokens', '64', '--prompt', 'other')
        self.cli('ok', '--output', 'c.json', '--stop', 'END', '--extra', '{"min_tokens": 2}')
        done = run_cli('--compare', 'a.json', 'b.json', cwd=self.tmp.name)
        self.assertEqual(done.returncode, 0)
        self.assertIn('the records differ in max_tokens, prompt;', done.stderr)
        done = run_cli('--compare', 'a.json', 'c.json', cwd=self.tmp.name)
        self.assertIn('the records differ in extra_keys, stop;', done.stderr)
        same = run_cli('--compare', 'a.json', 'a.json', cwd=self.tmp.name)
        self.assertEqual(same.stderr, '')

    def test_fixture_profile_and_the_modes_in_help(self):
        done = run_cli('--fixture', 'ok', '--fixture-profile', 'vllm', '--output', 'run.json', cwd=self.tmp.name)
        self.assertEqual(done.returncode, 0, done.stderr)
        record = json.loads((self.dir / 'run.json').read_text())
        self.assertEqual((record['http']['framing'], record['source']), ('chunked', 'fixture'))
        self.assertRegex(record['response_id'], r'^chatcmpl-[0-9a-f]{16}$')
        usage = re.sub(r'-\n\s+', '-', run_cli('--help', cwd=self.tmp.name).stdout)  # argparse wraps at hyphens
        self.assertIn('drip until --deadline', ' '.join(usage.split()))
        self.assertEqual(stream_client._args._FIXTURE_PROFILES, fixture_server.PROFILE_NAMES)

    def test_a_mistyped_fixture_mode_gets_the_close_ones_in_one_line(self):
        done = run_cli('--fixture', 'okk', '--output', 'run.json', cwd=self.tmp.name)
        self.assertEqual((done.returncode, done.stderr.count('\n')), (2, 1), done.stderr)
        self.assertIn("no mode 'okk'; did you mean ok?", done.stderr)
        self.assertFalse((self.dir / 'run.json').exists())
        for args, words in ((['--mode', 'okk'], "no mode 'okk'; did you mean ok?"),
                            (['--mode', 'tool-cal'], 'did you mean tool-call'),
                            (['--tls-cert', 'a.pem'], '--tls-cert and --tls-key go together')):
            with self.subTest(args=args):
                done = subprocess.run(script_command(FIXTURE_SCRIPT, '--port', '0', *args),
                                      capture_output=True, text=True, timeout=30, env=script_env())
                self.assertEqual((done.returncode, done.stderr.count('\n')), (2, 1), done.stderr)
                self.assertIn(words, done.stderr)
                self.assertTrue(done.stderr.startswith('fixture_server.py: error: '), done.stderr)

    def test_abbreviated_flags_are_refused(self):
        done = run_cli('--fixture', 'ok', '--max-token', '64', '--output', 'run.json', cwd=self.tmp.name)
        self.assertEqual(done.returncode, 2)
        self.assertIn('unrecognized arguments: --max-token', done.stderr)
        done = subprocess.run(script_command(FIXTURE_SCRIPT, '--mod', 'ok'), capture_output=True, text=True, timeout=30,
                              env=script_env())
        self.assertEqual(done.returncode, 2)
        self.assertIn('unrecognized arguments: --mod', done.stderr)

    def test_scripts_name_themselves_as_invoked(self):
        for script, name in (('stream_client.py', 'stream-client'), ('fixture_server.py', 'stream-fixture')):
            with self.subTest(name=name):
                link = self.dir / name
                link.symlink_to(HERE / script)
                done = subprocess.run([sys.executable, str(link), '--bogus'], capture_output=True, text=True,
                                      timeout=30, env=dict(os.environ, PYTHONPATH=str(HERE)))
                self.assertEqual(done.returncode, 2)
                self.assertTrue(done.stderr.endswith(f'{name}: error: unrecognized arguments: --bogus\n'), done.stderr)
                self.assertNotIn(script, done.stderr)
        version = subprocess.run([sys.executable, str(self.dir / 'stream-client'), '--version'], capture_output=True,
                                 text=True, timeout=30, env=dict(os.environ, PYTHONPATH=str(HERE)))
        self.assertEqual(version.stdout.strip(), f'stream-client {stream_client.__version__}')

    def test_the_suites_launcher_runs_a_script_as_its_file_does(self):
        probe = self.dir / 'probe.py'
        probe.write_text('import __main__, json, sys\n'
                         "print(json.dumps([sys.argv, sys.path[0], __file__, __name__, __main__.__spec__]))\n")
        as_file = subprocess.run([sys.executable, str(probe), '--x', 'y'], capture_output=True, text=True, timeout=30)
        launched = subprocess.run(script_command(str(probe), '--x', 'y'), capture_output=True, text=True, timeout=30,
                                  env=script_env())
        self.assertEqual(json.loads(launched.stdout), json.loads(as_file.stdout))
        self.assertEqual(json.loads(as_file.stdout)[0], [str(probe), '--x', 'y'])
        for args in (['--bogus'], ['--fixture', 'okk']):
            with self.subTest(args=args):
                as_file = subprocess.run([sys.executable, CLIENT, *args], capture_output=True, text=True, timeout=30)
                launched = subprocess.run(script_command(CLIENT, *args), capture_output=True, text=True, timeout=30,
                                          env=script_env())
                self.assertEqual((launched.returncode, launched.stderr), (as_file.returncode, as_file.stderr))
                self.assertEqual(as_file.returncode, 2)

    def test_python_3_6_to_3_9_get_one_line_instead_of_a_traceback(self):
        # Each old interpreter must be able to read the whole file for its first statement, the version
        # check, to run: so the modules use no syntax newer than 3.6 (no walrus, no future import).
        for script in ('stream_client.py', 'fixture_server.py'):
            source = (HERE / script).read_text(encoding='utf-8')
            ast.parse(source, script, feature_version=(3, 6))
            self.assertNotIn('from __future__', source)
        versions = Path(os.environ.get('PYENV_ROOT', Path.home() / '.pyenv'), 'versions')
        pythons = [python for minor in ('3.6', '3.7', '3.8', '3.9')
                   for python in sorted(versions.glob(f'{minor}.*/bin/python3'))[-1:]]
        if not pythons:
            self.skipTest('no Python 3.6 to 3.9 installed under pyenv')
        for python, script in itertools.product(pythons, ('stream_client.py', 'fixture_server.py')):
            with self.subTest(python=python.parts[-3], script=script):
                done = subprocess.run([str(python), str(HERE / script), '--help'], capture_output=True,
                                      text=True, timeout=30)
                self.assertEqual((done.returncode, done.stdout), (1, ''))
                self.assertRegex(done.stderr, rf'^{script}: needs Python 3.10 or newer, not 3\.[6-9]\.\d+\n$')

    def test_a_closed_stdout_loses_nothing_and_shows_no_traceback(self):
        read, write = os.pipe()
        os.close(read)  # like `| head -c 0`: nobody reads the summary line
        try:
            done = subprocess.run(script_command(CLIENT, '--fixture', 'ok', '--runs', '2', '--output', 'run.jsonl'),
                                  cwd=self.tmp.name, stdout=write, stderr=subprocess.PIPE, text=True, timeout=30,
                                  env=script_env())
        finally:
            os.close(write)
        self.assertEqual((done.returncode, done.stderr), (0, ''))
        self.assertEqual(len((self.dir / 'run.jsonl').read_text().splitlines()), 2)

    def test_module_entry_points_and_version(self):
        version = subprocess.run([sys.executable, '-m', 'stream_client', '--version'], cwd=HERE,
                                 capture_output=True, text=True, timeout=30)
        python = os.path.basename(sys.executable)
        self.assertEqual(version.stdout.strip(), f'{python} -m stream_client {stream_client.__version__}')
        fixture_help = subprocess.run([sys.executable, '-m', 'fixture_server', '--help'], cwd=HERE,
                                      capture_output=True, text=True, timeout=30)
        self.assertIn('--profile', fixture_help.stdout)
        self.assertTrue(fixture_help.stdout.startswith(f'usage: {python} -m fixture_server'), fixture_help.stdout)

    def test_signals_leave_a_valid_record(self):
        for signum, status in ((signal.SIGINT, 130), (signal.SIGTERM, 143)):
            with self.subTest(signal=signum.name), Fixture('held-open') as fixture:
                output = self.dir / f'{signum.name}.json'
                process = subprocess.Popen(script_command(CLIENT, '--url', fixture.url, '--model', 'm',
                                                   '--idle', '20', '--output', str(output)), stdout=subprocess.PIPE,
                                           stderr=subprocess.PIPE, text=True, env=script_env())
                for _ in range(200):  # until the fixture has the request, then until the stream is under way
                    if fixture.last_request is not None:
                        break
                    time.sleep(0.02)
                time.sleep(0.2)
                process.send_signal(signum)
                stdout, stderr = process.communicate(timeout=10)
                self.assertEqual(process.returncode, status, stderr)
                record = json.loads(output.read_text())
                self.assertEqual((record['ok'], record['error_layer'], record['text']),
                                 (False, 'interrupted', 'READY \u2713'))
                self.assertRegex(record['error'], rf'^interrupted: {signum.name} during the \w+ phase after ')
                self.assertFalse(json.loads(stdout)['ok'])


    def test_a_signal_once_the_evidence_is_on_disk_changes_nothing(self):
        # The client, made to signal itself just before it prints its summary line: a run and a load.
        late = ('import os, signal, sys\n'
                f'sys.path.insert(0, {SRC!r})\n'
                'import stream_client, stream_client._cli\n'
                'emit = stream_client._cli._emit\n'
                'def signalled(text):\n'
                '    os.kill(os.getpid(), getattr(signal, os.environ["LATE_SIGNAL"]))\n'
                '    emit(text)\n'
                'stream_client._cli._emit = signalled\n'
                'sys.exit(stream_client.main(sys.argv[1:]))\n')
        for name, args in (('one run', []), ('a load', ['--runs', '3', '--concurrency', '3'])):
            for signum in ('SIGINT', 'SIGTERM'):
                with self.subTest(name, signal=signum), Fixture() as fixture:
                    output = self.dir / f'{name}-{signum}.jsonl'
                    done = subprocess.run([sys.executable, '-c', late, '--url', fixture.url, '--model', 'm', *args,
                                           '--output', str(output)], capture_output=True, text=True, timeout=60,
                                          env=script_env(dict(os.environ, LATE_SIGNAL=signum)))
                    self.assertEqual((done.returncode, done.stderr), (0, ''))
                    self.assertTrue(json.loads(done.stdout)['ok'])
                    text = output.read_text()
                    records = [json.loads(line) for line in text.splitlines()] if args else [json.loads(text)]
                    self.assertEqual([record['ok'] for record in records], [True] * (3 if args else 1))


class ModelsServer(LoopbackServer):
    """Answers every request with one JSON response (status and body), as GET /v1/models would, and keeps
    the request lines it got."""

    def __init__(self, body: object, status: str = '200 OK') -> None:
        super().__init__()
        self.body, self.status, self.requests = json.dumps(body).encode(), status, []
        self.start()

    def serve(self, sock: socket.socket) -> None:
        with sock:
            request = b''
            while b'\r\n\r\n' not in request:
                piece = sock.recv(65536)
                if not piece:
                    return
                request += piece
            self.requests.append(request.split(b'\r\n')[0].decode())
            sock.sendall(f'HTTP/1.1 {self.status}\r\nContent-Type: application/json\r\nContent-Length: '
                         f'{len(self.body)}\r\nConnection: close\r\n\r\n'.encode() + self.body)


class ModelAndKeyTests(unittest.TestCase):
    """Without --model, the one model /v1/models lists (as vllm chat takes it); a 401 says when MODEL_API_KEY is
    unset."""

    KEY = 'sk-served-3f1e77'

    def setUp(self) -> None:
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.dir = Path(self.tmp.name)
        self.env = {name: value for name, value in os.environ.items() if name != 'MODEL_API_KEY'}

    def server(self, body: object, status: str = '200 OK') -> ModelsServer:
        server = ModelsServer(body, status)
        self.addCleanup(server.close)
        return server

    def test_without_model_the_one_model_the_server_lists_is_asked_for(self):
        with Fixture(model_name='tiny-served') as fixture:  # any other model gets vLLM's 404
            done = run_cli('--url', fixture.url.replace('/chat/completions', '/responses'), '--output', 'run.json',
                           cwd=self.tmp.name, env=self.env)
            sent = fixture.last_request[1]
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual(sent['model'], 'tiny-served')
        self.assertEqual(json.loads((self.dir / 'run.json').read_text())['model'], 'tiny-served')
        self.assertIn('note: model tiny-served, the one GET http://127.0.0.1:', done.stderr)

    def test_several_models_or_none_or_no_answer_is_one_line_exit_2_before_any_file(self):
        several = self.server({'object': 'list', 'data': [{'id': f'model-{n}'} for n in range(12)]})
        cases = {
            'several': (several.url, '--model not given, and GET http://127.0.0.1:%d/v1/models lists 12 models: '
                        'model-0, model-1, model-2, model-3, model-4, model-5, model-6, model-7, model-8, model-9 and '
                        '2 more; choose one with --model' % several.listener.getsockname()[1]),
            'none': (self.server({'data': []}).url, 'lists no model; give --model'),
            'not a list': (self.server({'models': ['a']}).url, 'did not answer with a list of models'),
            'unauthorized': (self.server({'error': {'message': 'Unauthorized'}}, '401 Unauthorized').url,
                             'failed: expected status 200, got 401 Unauthorized'),
            'nobody there': ('http://127.0.0.1:9/v1/chat/completions', 'failed: cannot connect to 127.0.0.1:9'),
        }
        for name, (url, words) in cases.items():
            with self.subTest(name):
                done = run_cli('--url', url, '--runs', '3', '--output', 'load.jsonl', '--report', 'load.html',
                               cwd=self.tmp.name, env=self.env)
                self.assertEqual((done.returncode, done.stdout), (2, ''), done.stderr)
                self.assertEqual(done.stderr.count('\n'), 1, done.stderr)
                self.assertIn(words, done.stderr)
                self.assertEqual(list(self.dir.iterdir()), [])
        self.assertEqual(several.requests, ['GET /v1/models HTTP/1.1'])  # asked once, and nothing was sent
        self.assertIn('MODEL_API_KEY is not set: no API key was sent', run_cli(
            '--url', cases['unauthorized'][0], '--output', 'run.json', cwd=self.tmp.name, env=self.env).stderr)

    def test_a_401_says_when_model_api_key_is_unset_and_never_prints_a_key(self):
        with Fixture(api_key=self.KEY) as fixture:
            unset = run_cli('--url', fixture.url, '--model', 'm', '--output', 'unset.json', cwd=self.tmp.name,
                            env=self.env)
            empty = run_cli('--url', fixture.url, '--model', 'm', '--runs', '2', '--output', 'empty.jsonl',
                            cwd=self.tmp.name, env={**self.env, 'MODEL_API_KEY': ''})
            wrong = run_cli('--url', fixture.url, '--model', 'm', '--output', 'wrong.json', cwd=self.tmp.name,
                            env={**self.env, 'MODEL_API_KEY': self.KEY[::-1]})
            right = run_cli('--url', fixture.url, '--model', 'm', '--output', 'right.json', cwd=self.tmp.name,
                            env={**self.env, 'MODEL_API_KEY': self.KEY})
        self.assertEqual((unset.returncode, empty.returncode, wrong.returncode, right.returncode), (1, 1, 1, 0))
        self.assertIn('note: the server answered 401 Unauthorized and MODEL_API_KEY is not set: no API key was sent',
                      unset.stderr)
        self.assertIn('note: the server answered 401 Unauthorized and MODEL_API_KEY is empty', empty.stderr)
        self.assertEqual(empty.stderr.count('answered 401'), 1)  # once for the load, not once per run
        self.assertNotIn('MODEL_API_KEY', wrong.stderr)  # a key was sent: the server refused it
        for done in (unset, empty, wrong, right):
            self.assertNotIn(self.KEY, done.stderr + done.stdout)
            self.assertNotIn(self.KEY[::-1], done.stderr + done.stdout)
