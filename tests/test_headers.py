"""--header: the headers a user adds to every request, and where their values never go (_headers)."""
from __future__ import annotations

import json
import os
import tempfile
import unittest
from pathlib import Path

import stream_client
from .support import Fixture, run_cli
from .tiers import sans_io

SECRET = 'tenant-7f3a9c2e41d8'


def written(folder: str) -> dict[str, str]:
    """Every file under folder, by name, as text (bytes that are not UTF-8 replaced)."""
    return {str(path.relative_to(folder)): path.read_bytes().decode('utf-8', 'replace')
            for path in Path(folder).rglob('*') if path.is_file()}


class HeaderTests(unittest.TestCase):
    def test_each_header_is_sent_on_every_request_of_a_load(self):
        with tempfile.TemporaryDirectory() as tmp, Fixture() as fixture:
            done = run_cli('--url', fixture.url, '--model', 'm', '--runs', '3', '--header', f'X-Tenant: {SECRET}',
                           '--header', 'x-route:  eu-west ', '--header', 'User-Agent: gateway-test',
                           '--output', 'load.jsonl', cwd=tmp)
            sent = fixture.last_request[0]
            records = [json.loads(line) for line in Path(tmp, 'load.jsonl').read_text().splitlines()]
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual((sent['X-Tenant'], sent['x-route'], sent['User-Agent']), (SECRET, 'eu-west', 'gateway-test'))
        self.assertEqual([record['request']['headers'] for record in records],
                         [['X-Tenant', 'x-route', 'User-Agent']] * 3)

    def test_a_header_value_is_in_no_file_written_nor_on_stderr_even_when_the_server_echoes_it(self):
        echo = json.dumps({'error': {'message': f'unknown tenant {SECRET}', 'type': 'BadRequestError', 'code': 400}})
        response = (f'HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\nx-echo: {SECRET}\r\n'
                    f'content-length: {len(echo)}\r\n\r\n{echo}').encode()
        with tempfile.TemporaryDirectory() as tmp:
            with Fixture(replay=response) as fixture:
                one = run_cli('--url', fixture.url, '--model', 'm', '--header', f'X-Tenant: {SECRET}',
                              '--output', 'run.json', '--capture', 'run.http', cwd=tmp)
                self.assertEqual(fixture.last_request[0]['X-Tenant'], SECRET)
                load = run_cli('--url', fixture.url, '--model', 'm', '--runs', '4', '--concurrency', '2',
                               '--header', f'X-Tenant: {SECRET}', '--output', 'load.jsonl', '--report', 'load.html',
                               cwd=tmp)
            summary = run_cli('--summary', 'load.jsonl', '--report', 'again.html', cwd=tmp)
            files = written(tmp)
        self.assertEqual((one.returncode, load.returncode, summary.returncode), (1, 1, 1))
        self.assertEqual(sorted(files), ['again.html', 'load.html', 'load.jsonl', 'run.http', 'run.json'])
        self.assertIn('[redacted]', files['run.json'])
        self.assertIn('X-Tenant', files['run.json'])  # the name is kept
        outputs = {**files, **{f'{name} {stream}': getattr(done, stream) for name, done in
                               (('one', one), ('load', load), ('summary', summary)) for stream in ('stdout', 'stderr')}}
        for name, text in outputs.items():
            with self.subTest(output=name):
                self.assertNotIn(SECRET, text)
                self.assertNotIn(SECRET[-8:], text)

    def test_the_names_the_client_owns_are_refused_with_one_line_before_anything_is_sent(self):
        for name in ('Host', 'content-length', 'Transfer-Encoding', 'CONNECTION', 'Authorization'):
            with self.subTest(name=name), tempfile.TemporaryDirectory() as tmp, Fixture() as fixture:
                done = run_cli('--url', fixture.url, '--model', 'm', '--header', f'{name}: {SECRET}',
                               '--output', 'run.json', cwd=tmp)
                self.assertIsNone(fixture.last_request)
                self.assertEqual(done.returncode, 2)
                self.assertEqual(os.listdir(tmp), [])
                self.assertEqual(len(done.stderr.splitlines()), 1, done.stderr)
                self.assertIn(f"--header {name!r} is set by the client", done.stderr)
                self.assertNotIn(SECRET, done.stderr)
        self.assertIn('MODEL_API_KEY', done.stderr)

    def test_a_header_that_cannot_be_sent_is_refused_without_showing_its_value(self):
        cases = {
            'no colon': (f'X-Tenant {SECRET}', "--header takes 'Name: value'"),
            'a space in the name': (f'X Tenant: {SECRET}', '--header[0]: a name is letters'),
            'a line break in the value': (f'X-Tenant: {SECRET}\r\nX-Evil: 1', "--header 'X-Tenant': the value"),
            'no value': ('X-Tenant:', "--header 'X-Tenant': the value"),
            'a value not ASCII': (f'X-Tenant: {SECRET}é', "--header 'X-Tenant': the value"),
        }
        with tempfile.TemporaryDirectory() as tmp:
            for case, (header, message) in cases.items():
                with self.subTest(case=case):
                    done = run_cli('--fixture', 'ok', '--header', header, '--output', 'run.json', cwd=tmp)
                    self.assertEqual((done.returncode, os.listdir(tmp)), (2, []))
                    self.assertIn(message, done.stderr)
                    self.assertEqual(len(done.stderr.splitlines()), 1, done.stderr)
                    self.assertNotIn(SECRET, done.stderr)
            twice = run_cli('--fixture', 'ok', '--header', 'X-A: 1', '--header', 'x-a: 2', '--output', 'run.json',
                            cwd=tmp)
        self.assertEqual(twice.returncode, 2)
        self.assertIn("--header 'x-a' is given twice", twice.stderr)

    @sans_io
    def test_prepare_takes_headers_keeps_their_names_and_masks_their_values(self):
        request = stream_client.prepare('http://127.0.0.1:8000/v1/chat/completions', 'm', 'p',
                                        headers={'X-Session': SECRET, 'X-Short': 'eu'})
        self.assertIn(f'X-Session: {SECRET}\r\n'.encode(), request.wire)
        self.assertEqual(request.settings['headers'], ['X-Session', 'X-Short'])
        self.assertEqual(request.secrets(), (SECRET,))  # a value under 8 characters would mask every "eu"
        self.assertNotIn(SECRET, repr(request))
        with self.assertRaisesRegex(ValueError, "^header 'Authorization' is set by the client"):
            stream_client.prepare('http://127.0.0.1:8000/v1/chat/completions', 'm', 'p',
                                  headers=[('Authorization', 'Bearer x')])


if __name__ == '__main__':
    unittest.main()
