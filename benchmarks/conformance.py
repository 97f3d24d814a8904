"""stream_client's JSON and JSON Schema verdicts against two public conformance suites.

    python3 benchmarks/conformance.py [--list]

Reads the suites from ../shared/conformance beside the checkout (they are never copied into the
project); without them it prints one line saying so and exits 0. For each suite it prints the cases
that agree with the suite, the false oks (called valid although the suite says invalid), the false
rejects, the cases whose schema was refused, and the crashes. --list also names each case that does
not agree.

Exits 1 when a required case of draft 2020-12 or draft 7 does not agree (except the groups whose
schema needs another document: those must be refused as such), when anything crashes, when
optional/ecmascript-regex has a false ok, or when JSONTestSuite does worse than its known figures
(every n_ file rejected; every y_ file parsed except the two with repeated keys, refused by design).
Each case goes through what a JSON answer goes through: strict_json() on the text, then the schema.
"""
from __future__ import annotations

import collections
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
import stream_client  # noqa: E402

SUITES = ROOT.parent / 'shared' / 'conformance'
SCHEMA_TESTS = SUITES / 'JSON-Schema-Test-Suite' / 'tests'
PARSING_TESTS = SUITES / 'JSONTestSuite' / 'test_parsing'
DRAFT_7 = 'http://json-schema.org/draft-07/schema#'
# The "must parse" files that strict_json refuses on purpose: a repeated key is ambiguous.
REFUSED_BY_DESIGN = {'y_object_duplicated_key.json', 'y_object_duplicated_key_and_value.json'}
KNOWN_DRAFTS = ('https://json-schema.org/draft/2020-12/schema', 'http://json-schema.org/draft-07/schema')
OUTCOMES = ('agree', 'false ok', 'false reject', 'refused', 'crash')


def schema_case(schema: object, draft: str, tests: list[dict]) -> tuple[list[str], str]:
    """The outcome of each test of one group, and why the schema was refused ('' when it was not)."""
    if draft == '7' and isinstance(schema, dict) and '$schema' not in schema:
        schema = {'$schema': DRAFT_7, **schema}  # the suite's draft 7 schemas do not name their draft
    try:
        checker = stream_client.JsonSchema(schema)
    except stream_client.SchemaError as exc:
        return ['refused'] * len(tests), f'{exc.kind}: {exc}'
    except Exception as exc:  # noqa: BLE001 -- a crash is what this runner counts
        return ['crash'] * len(tests), f'{type(exc).__name__}: {exc}'
    outcomes = []
    for test in tests:
        try:
            value = stream_client.strict_json(json.dumps(test['data']))
            valid = checker.problem(value) is None
        except Exception:  # noqa: BLE001
            outcomes.append('crash')
            continue
        outcomes.append('agree' if valid == test['valid'] else 'false ok' if valid else 'false reject')
    return outcomes, ''


def outside_references(schema: object) -> list[str]:
    """The references of a schema that are not fragments of the same document (a URI or a relative
    path in $ref or $dynamicRef, a meta-schema in $schema that no draft names), read without the
    code under test."""
    found = []
    if isinstance(schema, dict):
        for key, value in schema.items():
            if key in ('$ref', '$dynamicRef') and isinstance(value, str) and not value.startswith('#'):
                found.append(value)
            elif key == '$schema' and isinstance(value, str) and value.rstrip('#') not in KNOWN_DRAFTS:
                found.append(value)
            found += outside_references(value)
    elif isinstance(schema, list):
        for item in schema:
            found += outside_references(item)
    return found


def needs_another_document(schema: object, reason: str) -> bool:
    """Refused as needing another document, and it does refer outside its own fragments."""
    return reason.startswith('remote:') and bool(outside_references(schema))


def run_schema_suite(name: str, files: list[Path], draft: str, listing: bool) -> tuple[collections.Counter, list]:
    """Counts of each outcome over the files, and the cases that break the rules for this suite."""
    counts: collections.Counter = collections.Counter()
    broken = []
    for path in files:
        for group in json.loads(path.read_text(encoding='utf-8')):
            outcomes, reason = schema_case(group['schema'], draft, group['tests'])
            counts.update(outcomes)
            for test, outcome in zip(group['tests'], outcomes):
                where = f'{name}/{path.name}: {group["description"]} / {test["description"]}'
                if outcome == 'agree':
                    continue
                if listing:
                    print(f'  {outcome}: {where}' + (f' ({reason})' if reason else ''))
                if outcome == 'refused' and needs_another_document(group['schema'], reason):
                    counts['refused: another document'] += 1
                    continue
                broken.append((outcome, where, reason))
    return counts, broken


def run_parsing_suite(listing: bool) -> tuple[collections.Counter, list]:
    """JSONTestSuite: y_ must parse, n_ must not; i_ files are counted, never judged."""
    counts: collections.Counter = collections.Counter()
    broken = []
    for path in sorted(PARSING_TESTS.glob('*.json')):
        try:
            stream_client.strict_json(path.read_bytes().decode('utf-8'))
            parsed = True
        except (ValueError, UnicodeDecodeError):
            parsed = False
        except Exception:  # noqa: BLE001
            counts['crash'] += 1
            broken.append(('crash', path.name, ''))
            continue
        kind = path.name[0]
        if kind == 'i':
            counts['implementation-defined, parsed' if parsed else 'implementation-defined, refused'] += 1
            continue
        agree = parsed == (kind == 'y')
        outcome = 'agree' if agree else 'false ok' if parsed else 'false reject'
        counts[outcome] += 1
        if not agree and listing:
            print(f'  {outcome}: JSONTestSuite/{path.name}')
        if not agree and path.name not in REFUSED_BY_DESIGN:
            broken.append((outcome, path.name, ''))
    return counts, broken


def line(name: str, counts: collections.Counter) -> str:
    shown = [f'{counts[outcome]} {outcome}' for outcome in OUTCOMES]
    extra = [f'{number} {key}' for key, number in sorted(counts.items()) if key not in OUTCOMES]
    return f'{name}: ' + ', '.join(shown) + (f' ({"; ".join(extra)})' if extra else '')


def main(argv: list[str]) -> int:
    listing = '--list' in argv
    if not SCHEMA_TESTS.is_dir() or not PARSING_TESTS.is_dir():
        print(f'conformance: skipped, the suites are not at {SUITES}')
        return 0
    failures = []
    for name, draft in (('draft2020-12', '2020-12'), ('draft7', '7')):
        counts, broken = run_schema_suite(name, sorted((SCHEMA_TESTS / name).glob('*.json')), draft, listing)
        print(line(f'{name} required', counts))
        failures += broken
    counts, broken = run_schema_suite('draft2020-12/optional', [SCHEMA_TESTS / 'draft2020-12' / 'optional' /
                                                                'ecmascript-regex.json'], '2020-12', listing)
    print(line('draft2020-12 optional/ecmascript-regex', counts))
    failures += [case for case in broken if case[0] in ('false ok', 'crash')]
    for name, draft in (('draft2020-12', '2020-12'), ('draft7', '7')):
        others = [path for path in sorted((SCHEMA_TESTS / name / 'optional').glob('*.json'))
                  if path.name != 'ecmascript-regex.json']
        counts, broken = run_schema_suite(f'{name}/optional', others, draft, listing)
        print(line(f'{name} other optional files (only crashes count)', counts))
        failures += [case for case in broken if case[0] == 'crash']
    counts, broken = run_parsing_suite(listing)
    print(line('JSONTestSuite', counts))
    failures += broken
    for outcome, where, reason in failures:
        print(f'FAIL {outcome}: {where}' + (f' ({reason})' if reason else ''))
    print(f'conformance: {"FAILED, " + str(len(failures)) + " cases" if failures else "ok"}')
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
