"""Validate llm-d Benchmark Reports against the published schema with jsonschema, a second validator
beside the project's own (tests/test_benchmark_report.py). CI only: .ci/run runs it from its tools'
virtual environment, where jsonschema is installed; the project never imports it (which is why it lives
in .ci/, outside the folders the stdlib-only check reads).

usage: check_benchmark_report.py SCHEMA REPORT...   (exit 1 when a report is not valid, 2 on bad usage)
"""
import importlib.metadata
import json
import sys

import jsonschema


def problems(schema: dict, report: object) -> list[str]:
    """Every violation of the report, by its path. The schema names no $schema: it is read as draft
    2020-12, as its README links and as the project's JsonSchema reads it; date-time is asserted."""
    validator = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    validator.check_schema(schema)
    checker = validator.FORMAT_CHECKER
    if 'date-time' not in checker.checkers:
        raise SystemExit('jsonschema cannot check date-time here: install rfc3339-validator beside it')
    errors = [jsonschema.exceptions.best_match([error])  # the deepest cause of an anyOf that failed
              for error in validator(schema, format_checker=checker).iter_errors(report)]
    return [f'{"/".join(map(str, error.absolute_path)) or "(the report)"}: {error.message[:300]}'
            for error in sorted(errors, key=lambda error: list(map(str, error.absolute_path)))]


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    with open(argv[0], encoding='utf-8') as file:
        schema = json.load(file)
    failed, version = 0, importlib.metadata.version('jsonschema')
    for path in argv[1:]:
        with open(path, encoding='utf-8') as file:
            found = problems(schema, json.load(file))
        for line in found:
            print(f'FAIL {path}: {line}')
        print(f'{"FAIL" if found else "PASS"} {path}: {len(found)} problems (jsonschema {version}, '
              f'draft 2020-12, date-time asserted)')
        failed += bool(found)
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
