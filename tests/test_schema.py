"""Strict JSON, ECMA-262 patterns and JSON Schema (_json, _ecma, _schema)."""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

import stream_client
from .support import CLIENT, Fixture, run_cli
from .tiers import sans_io


DRAFT_7 = 'http://json-schema.org/draft-07/schema#'


class JsonSchemaTests(unittest.TestCase):
    """JSON Schema drafts 2020-12 and 7 without a socket: each keyword's verdict and message, references
    within the document, ECMA-262 patterns, and what is refused. The official suites run in
    benchmarks/conformance.py, not here."""

    def verdicts(self, cases: list) -> None:
        for schema, value, words in cases:
            with self.subTest(schema=schema, value=value):
                problem = stream_client.JsonSchema(schema).problem(value)
                self.assertEqual(problem is None, words is None, problem)
                self.assertIn(words or '', problem or '')

    def refused(self, schema: object, kind: str, words: str) -> None:
        with self.subTest(schema=schema), self.assertRaises(stream_client.SchemaError) as caught:
            stream_client.JsonSchema(schema)
        self.assertEqual(caught.exception.kind, kind, caught.exception)
        self.assertIn(words, str(caught.exception))
        self.assertNotIn('\n', str(caught.exception))

    @sans_io
    def test_the_applicator_and_validation_keywords(self):
        self.verdicts([
            ({'not': {'type': 'string'}}, 'a', '$: expected not to match the schema under "not", got "a"'),
            ({'not': {'type': 'string'}}, 1, None),
            ({'if': {'minimum': 10}, 'then': {'multipleOf': 5}, 'else': {'maximum': 3}}, 12, 'a multiple of 5'),
            ({'if': {'minimum': 10}, 'then': {'multipleOf': 5}, 'else': {'maximum': 3}}, 4, 'a number at most 3'),
            ({'if': {'minimum': 10}, 'then': {'multipleOf': 5}, 'else': {'maximum': 3}}, 15, None),
            ({'dependentRequired': {'a': ['b']}}, {'a': 1}, '$.b: required when $.a is present, but missing'),
            ({'dependentSchemas': {'a': {'required': ['c']}}}, {'a': 1}, '$.c: required, but missing'),
            ({'prefixItems': [{'type': 'string'}], 'items': {'type': 'integer'}}, ['a', 1, 'b'],
             '$[2]: expected integer, got "b"'),
            ({'prefixItems': [{'type': 'string'}], 'items': False}, ['a'], None),
            ({'contains': {'type': 'integer'}, 'minContains': 2}, [1, 'a'], 'expected at least 2 items matching'),
            ({'contains': {'type': 'integer'}, 'maxContains': 1}, [1, 2], 'expected at most 1 item matching'),
            ({'contains': {'type': 'integer'}, 'minContains': 0}, ['a'], None),
            ({'uniqueItems': True}, ['a', 'b', 'a'], '$[2]: expected unique items, got "a" twice'),
            ({'uniqueItems': True}, [1, 1.0], '$[1]: expected unique items, got 1.0 twice'),
            ({'uniqueItems': True}, [1, True, [0], [False], {'a': 1, 'b': 2}, {'b': 2, 'a': 1}],
             '$[5]: expected unique items'),
            ({'uniqueItems': True}, [1, True, 0, False, [0], [False]], None),
            ({'multipleOf': 0.01}, 19.99, None), ({'multipleOf': 0.0001}, 0.0075, None),
            ({'multipleOf': 0.01}, 0.075, '$: expected a multiple of 0.01, got 0.075'),
            ({'multipleOf': 3}, 10 ** 30 + 1, 'a multiple of 3'), ({'multipleOf': 1e-8}, 12391239123, None),
            ({'patternProperties': {'^x-': {'type': 'string'}}, 'additionalProperties': False},
             {'x-a': 'ok', 'b': 1}, '$.b: not allowed (additionalProperties is false)'),
            ({'patternProperties': {'^x-': {'type': 'string'}}}, {'x-a': 2}, '$["x-a"]: expected string, got 2'),
            ({'propertyNames': {'maxLength': 3}}, {'abcd': 1}, 'the name of $.abcd: expected at most 3 characters'),
            ({'minProperties': 2}, {'a': 1}, '$: expected at least 2 properties, got 1'),
            ({'maxProperties': 1}, {'a': 1, 'b': 2}, 'expected at most 1 property, got 2'),
            ({'const': {'a': [1.0]}}, {'a': [1]}, None), ({'const': 1}, True, '$: expected 1, got true'),
            ({'enum': [[0]]}, [False], 'expected one of [[0]], got [false]'), ({'enum': []}, 1, 'expected one of []'),
            ({'minLength': 2.0, 'maxItems': 1.0}, 'ab', None), ({'minItems': 2.0}, [1], 'expected at least 2 items'),
            ({'properties': {'a': False}}, {'a': 1}, '$.a: no value is allowed here, got 1'),
            ({'items': True, 'maxItems': 2}, [1, 2, 3], 'expected at most 2 items, got 3 items'),
        ])

    @sans_io
    def test_unevaluated_keywords_see_what_every_applicator_evaluated(self):
        schema = {'type': 'object', 'properties': {'kind': {}},
                  'allOf': [{'properties': {'a': {}}}],
                  'anyOf': [{'properties': {'b': {}}, 'required': ['b']}, {'patternProperties': {'^c': {}}}],
                  'if': {'properties': {'kind': {'const': 'x'}}}, 'then': {'properties': {'x': {}}},
                  '$ref': '#/$defs/more', '$defs': {'more': {'properties': {'d': {}}}},
                  'unevaluatedProperties': False}
        self.verdicts([
            (schema, {'kind': 'x', 'a': 1, 'b': 2, 'c1': 3, 'd': 4, 'x': 5}, None),
            (schema, {'kind': 'y', 'x': 5}, '$.x: not allowed (unevaluatedProperties is false)'),
            (schema, {'e': 1}, '$.e: not allowed (unevaluatedProperties is false)'),
            # a failed branch evaluates nothing
            ({'anyOf': [{'properties': {'a': {}}, 'allOf': [False]}, {'properties': {'b': {}}}],
              'unevaluatedProperties': False}, {'a': 1, 'b': 2}, '$.a: not allowed'),
            ({'not': {'not': {'properties': {'a': {}}}}, 'unevaluatedProperties': False}, {'a': 1}, '$.a: not allowed'),
            ({'prefixItems': [{}], 'allOf': [{'contains': {'const': 'z'}}], 'unevaluatedItems': {'type': 'integer'}},
             [0, 'z', 2, 'y'], '$[3]: expected integer, got "y"'),
            ({'prefixItems': [{}], 'allOf': [{'contains': {'const': 'z'}}], 'unevaluatedItems': {'type': 'integer'}},
             [0, 'z', 2], None),
        ])

    @sans_io
    def test_references_within_the_document(self):
        self.verdicts([
            ({'$defs': {'a/b': {'type': 'integer'}, 'c~d': {'type': 'string'}, 'e%f': {'type': 'null'}},
              'prefixItems': [{'$ref': '#/$defs/a~1b'}, {'$ref': '#/$defs/c~0d'}, {'$ref': '#/$defs/e%25f'}]},
             [1, 'x', 0], '$[2]: expected null, got 0'),
            ({'properties': {'next': {'$ref': '#'}}, 'required': ['v']}, {'v': 1, 'next': {'v': 2, 'next': {}}},
             '$.next.next.v: required, but missing'),
            ({'$defs': {'n': {'$anchor': 'num', 'type': 'number'}}, 'items': {'$ref': '#num'}}, [1, 'a'],
             '$[1]: expected number, got "a"'),
            ({'$id': 'https://example.com/root', '$defs': {'s': {'$id': 'str', 'type': 'string'}},
              '$ref': 'str'}, 3, '$: expected string, got 3'),
            ({'$schema': DRAFT_7, 'items': [{'type': 'integer'}, {'$ref': '#/items/0'}]}, [1, 'a'],
             '$[1]: expected integer, got "a"'),
            ({'$ref': '#/$defs/a', '$defs': {'a': {'$ref': '#/$defs/b'}, 'b': {'type': 'boolean'}}}, 1,
             '$: expected boolean, got 1'),
            ({'$ref': '#/$defs/loop', '$defs': {'loop': {'$ref': '#/$defs/loop'}}}, 1,
             'the schema refers to itself more than 256 times here'),
            ({'$id': 'https://example.com/root', '$ref': 'list',  # the outermost $dynamicAnchor "items" wins
              '$defs': {'items': {'$dynamicAnchor': 'items', 'type': 'string'},
                        'list': {'$id': 'list', 'items': {'$dynamicRef': '#items'},
                                 '$defs': {'items': {'$dynamicAnchor': 'items'}}}}}, ['a', 1],
             '$[1]: expected string, got 1'),
            ({'$dynamicAnchor': 'node', 'properties': {'kids': {'items': {'$dynamicRef': '#node'}}},
              'type': 'object'}, {'kids': [{'kids': [3]}]}, '$.kids[0].kids[0]: expected object, got 3'),
        ])

    @sans_io
    def test_draft_7_keeps_its_own_rules(self):
        self.verdicts([
            ({'$schema': DRAFT_7, '$ref': '#/definitions/s', 'definitions': {'s': {'type': 'string'}},
              'minLength': 5}, 'ab', None),  # $ref overrides its siblings
            ({'$ref': '#/$defs/s', '$defs': {'s': {'type': 'string'}}, 'minLength': 5}, 'ab',
             'expected at least 5 characters'),  # 2020-12: it does not
            ({'$schema': DRAFT_7, 'items': [{'type': 'string'}], 'additionalItems': {'type': 'integer'}},
             ['a', 'b'], '$[1]: expected integer, got "b"'),
            ({'$schema': DRAFT_7, 'dependencies': {'a': ['b'], 'c': {'required': ['d']}}}, {'c': 1},
             '$.d: required, but missing'),
            ({'$schema': DRAFT_7, 'prefixItems': [{'type': 'string'}]}, [1], None),  # not a draft 7 keyword
            ({'$schema': 'http://json-schema.org/draft-04/schema#', 'maximum': 1, 'exclusiveMaximum': True}, 1,
             'less than 1'),
        ])
        self.assertEqual(stream_client.JsonSchema({'$schema': DRAFT_7, 'prefixItems': [], 'properties': {
            'a': {'$ref': '#', 'minLength': 5, 'title': 'A'}}}).unchecked,
            ['prefixItems at #', 'minLength at #/properties/a (ignored beside $ref, as draft 7 says)'])

    @sans_io
    def test_patterns_mean_what_ecma_262_says(self):
        self.verdicts([
            ({'pattern': '^[a-z]+$'}, 'abc\n', "$: expected a match of '^[a-z]+$', got \"abc\\n\""),
            ({'pattern': '^\\d+$'}, '\u0661\u0662', 'expected a match'), ({'pattern': '^\\d+$'}, '12', None),
            ({'pattern': '^\\w$'}, '\u00e9', 'expected a match'), ({'pattern': '^\\W$'}, '\u00e9', None),
            ({'pattern': '^\\s$'}, '\ufeff', None), ({'pattern': '^\\S$'}, '\ufeff', 'expected a match'),
            ({'pattern': '^\\s$'}, '\x1c', 'expected a match'),  # Python's \s has U+001C; ECMA-262's does not
            ({'pattern': '^.$'}, '\u2028', 'expected a match'), ({'pattern': '^.$'}, '\U0001f600', None),
            ({'pattern': '^\\p{Letter}+$'}, '\u00e9cole', None), ({'pattern': '^\\p{L}$'}, '1', 'expected a match'),
            ({'pattern': '^\\p{digit}+$'}, '\u0661', None), ({'pattern': '^[^\\S ]$'}, '\t', None),
            ({'pattern': '^[^\\S ]$'}, ' ', 'expected a match'),
            ({'pattern': '^\\cC\\u{1F600}$'}, '\x03\U0001f600', None),
            ({'pattern': 'es'}, 'test', None), ({'pattern': '^a{,2}$'}, 'a{,2}', None),
            ({'patternProperties': {'^\\d+$': True}, 'additionalProperties': False}, {'\u0661': 1}, 'not allowed'),
        ])
        for pattern, words in (('(a)\\1', 'the backreference \\1 is not supported'),
                               ('\\p{Script=Greek}', 'the property class \\p{Script=Greek} is not supported'),
                               ('(?<=a+)b', 'cannot be checked here'), ('\\k<n>', 'named backreference')):
            self.refused({'pattern': pattern}, 'unsupported', words)
        for pattern, words in (('(?i)a', 'the group (?i is not ECMA-262'), ('\\a', 'the escape \\a is not ECMA-262'),
                               ('a**', 'nothing to repeat'), ('[z-a]', 'out of order'), ('[a', 'never closed')):
            self.refused({'pattern': pattern}, 'invalid', words)
        # compiled once
        self.assertIs(stream_client._ecma._ecma_pattern('^x$'), stream_client._ecma._ecma_pattern('^x$'))

    @sans_io
    def test_what_is_refused_and_what_is_only_listed(self):
        for schema, kind, words in (
                ({'$ref': 'https://example.com/s.json'}, 'remote', "$ref 'https://example.com/s.json' is another "
                                                                   'document, which is never fetched'),
                ({'$ref': 'other.json#/a'}, 'remote', 'never fetched'),
                ({'$ref': 'urn:uuid:1234'}, 'remote', 'never fetched'),
                ({'$schema': 'https://example.com/meta'}, 'remote', 'another meta-schema'),
                ({'$ref': '#/$defs/a', '$defs': [1]}, 'invalid', '#/$defs: expected an object of schemas, got [1]'),
                ({'$ref': '#/$defs/none', '$defs': {}}, 'invalid', 'points to nothing in this schema'),
                ({'$ref': '#/required', 'required': ['a']}, 'invalid', 'which is not a schema'),
                ({'$ref': '#nowhere'}, 'invalid', 'names no $anchor'),
                ({'items': [{'type': 'integer'}, {'$ref': '#/items/0'}]}, 'invalid', "draft 7's items"),
                ({'minLength': 1.5}, 'invalid', 'expected a non-negative integer'),
                ({'multipleOf': 0}, 'invalid', 'expected a number above 0'),
                ({'type': ['string', 'string']}, 'invalid', 'expected one of null'),
                ({'$schema': 'https://json-schema.org/draft/2020-12/schema',
                  '$defs': {'a': {'$schema': DRAFT_7}}}, 'unsupported', 'one draft per document')):
            self.refused(schema, kind, words)
        checker = stream_client.JsonSchema({'properties': {'when': {'format': 'date-time', 'x-unit': 's'},
                                                           'blob': {'contentEncoding': 'base64'}}})
        self.assertEqual(checker.unchecked, ['format at #/properties/when (an annotation, not asserted)',
                                             'x-unit at #/properties/when',
                                             'contentEncoding at #/properties/blob (an annotation, not asserted)'])
        self.assertIsNone(checker.problem({'when': 'not a date'}))

    def test_the_schema_command_line(self):
        """--json-schema and --tools through the command line, against the fixture's JSON answer
        {"city": "Paris"} and its get_weather call with the same arguments."""
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        folder = Path(tmp.name)
        schemas = {'ok': {'type': 'object', 'properties': {'city': {'type': 'string', 'pattern': '^\\p{Lu}',
                                                                    'format': 'city'}}},
                   'short': {'properties': {'city': {'$ref': '#/$defs/name'}},
                             '$defs': {'name': {'maxLength': 3}}},
                   'unique': {'properties': {'city': {'enum': ['Rome', 'Lyon']}}},
                   'remote': {'properties': {'city': {'$ref': 'https://example.com/city.json'}}},
                   'list-ref': {'items': [{'type': 'integer'}, {'$ref': '#/items/0'}]},
                   'bad-defs': {'$ref': '#/$defs/a', '$defs': [1]}}
        for name, schema in schemas.items():
            (folder / f'{name}.json').write_text(json.dumps(schema))
            tool = [{'type': 'function', 'function': {'name': 'get_weather', 'parameters': schema}}]
            (folder / f'tools-{name}.json').write_text(json.dumps(tool))

        def run(args: tuple) -> subprocess.CompletedProcess:
            mode, flag, name = args
            file = f'{name}.json' if flag == '--json-schema' else f'tools-{name}.json'
            with Fixture(mode) as fixture:
                return run_cli('--url', fixture.url, '--model', 'synthetic-fixture', flag, file,
                               '--output', f'{mode}-{name}.json', cwd=tmp.name)
        cases = {
            ('json-ok', '--json-schema', 'ok'): (0, 'checked against its schema, and matching: the JSON answer'),
            ('tool-call', '--tools', 'ok'): (0, 'checked against its schema, and matching: tool call 0 (get_weather)'),
            ('json-ok', '--json-schema', 'short'): (1, '$.city: expected at most 3 characters, got 5 characters'),
            ('tool-call', '--tools', 'unique'): (1, '$.city: expected one of ["Rome", "Lyon"], got "Paris"'),
            ('json-ok', '--json-schema', 'remote'): (2, "--json-schema is a schema that needs another document: "
                                                        "#/properties/city/$ref: $ref 'https://example.com/city.json'"),
            ('tool-call', '--tools', 'remote'): (2, '--tools[0] (get_weather) has parameters that are a schema that '
                                                    'needs another document'),
            ('json-ok', '--json-schema', 'list-ref'): (2, "--json-schema is not a valid schema: #/items: a list of "
                                                          "schemas is draft 7's items"),
            ('json-ok', '--json-schema', 'bad-defs'): (2, '#/$defs: expected an object of schemas, got [1]'),
        }
        for (args, (status, words)), done in zip(cases.items(), map(run, cases)):
            with self.subTest(args=args):
                self.assertEqual(done.returncode, status, done.stderr)
                self.assertIn(words, done.stderr)
                self.assertNotIn('Traceback', done.stderr)
                record = folder / f'{args[0]}-{args[2]}.json'
                self.assertEqual(record.exists(), status != 2)
                if status == 2:
                    self.assertEqual((done.stdout, done.stderr.count('\n')), ('', 1))
                if args[2] == 'ok':
                    self.assertIn('note: not checked against the schema: ', done.stderr)
                    self.assertIn('format at #/properties/city (an annotation, not asserted)', done.stderr)
                    self.assertEqual(json.loads(record.read_text())['unchecked_schema_keywords'],
                                     [f'{"json-schema" if args[1] == "--json-schema" else "tool get_weather"}: '
                                      'format at #/properties/city (an annotation, not asserted)'])
                else:
                    self.assertNotIn('not checked', done.stderr)
                    self.assertNotIn('and matching', done.stderr)

    def test_the_conformance_runner_says_when_the_suites_are_not_beside_it(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        checkout = Path(tmp.name) / 'checkout'
        (checkout / 'benchmarks').mkdir(parents=True)
        for name in ('stream_client.py', 'benchmarks/conformance.py'):
            (checkout / name).write_text((Path(CLIENT).parent / name).read_text())
        done = subprocess.run([sys.executable, 'benchmarks/conformance.py'], cwd=checkout, capture_output=True,
                              text=True, timeout=30)
        self.assertEqual((done.returncode, done.stdout.count('\n')), (0, 1), done.stderr)
        self.assertIn('conformance: skipped, the suites are not at', done.stdout)
