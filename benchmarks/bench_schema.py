"""How the JSON Schema check grows with its instance, as ratios measured in one run.

    python3 benchmarks/bench_schema.py

For each keyword that could blow up, the same schema checks an instance and one ten times larger;
the larger must cost at most 15 times the CPU time of the smaller (linear is 10). The keywords:
uniqueItems over 10,000 items (against 1,000), unevaluatedProperties under nested allOf/anyOf, and
a $ref chain 20 deep applied to every item. Prints every figure and ratio; exits 1 if a target is
missed. Standard library only; a few seconds.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
import stream_client  # noqa: E402
from _common import report  # noqa: E402

SMALL, LARGE = 1_000, 10_000
MAX_RATIO = 15.0
REPEATS = {SMALL: 30, LARGE: 5}  # the least of several runs: the small one more often, as it is short

UNIQUE = {'type': 'array', 'uniqueItems': True}
UNEVALUATED = {
    'type': 'object',
    'allOf': [{'properties': {'id': {'type': 'integer'}}},
              {'anyOf': [{'patternProperties': {'^a': {'type': 'integer'}}},
                         {'allOf': [{'anyOf': [{'patternProperties': {'^b': {'type': 'integer'}}},
                                               {'required': ['x']}]}]}]}],
    'unevaluatedProperties': False,
}
CHAIN = {'type': 'array', 'items': {'$ref': '#/$defs/d0'},
         '$defs': {**{f'd{n}': {'$ref': f'#/$defs/d{n + 1}'} for n in range(19)},
                   'd19': {'type': 'object', 'properties': {'n': {'type': 'integer', 'minimum': 0}}}}}


def unique_instance(size: int) -> list:
    return [{'n': number, 'tag': f't{number}', 'flags': [number % 2 == 0, None]} for number in range(size)]


def unevaluated_instance(size: int) -> dict:
    return {'id': 1, **{f'{"ab"[number % 2]}{number}': number for number in range(size)}}


def chain_instance(size: int) -> list:
    return [{'n': number} for number in range(size)]


def cpu_seconds(schema: stream_client.JsonSchema, value: object, repeats: int) -> float:
    """The least CPU time of a few checks of the value (which must be valid)."""
    best = float('inf')
    for _ in range(repeats):
        start = time.process_time()
        problem = schema.problem(value)
        best = min(best, time.process_time() - start)
        if problem is not None:
            raise SystemExit(f'bench_schema: the benchmark instance is invalid: {problem}')
    return best


def main() -> int:
    results = []
    for name, schema, instance in (('uniqueItems', UNIQUE, unique_instance),
                                   ('unevaluatedProperties under allOf/anyOf', UNEVALUATED, unevaluated_instance),
                                   ('$ref chain 20 deep', CHAIN, chain_instance)):
        checker = stream_client.JsonSchema(schema)
        small, large = (cpu_seconds(checker, instance(size), REPEATS[size]) for size in (SMALL, LARGE))
        print(f'{name}: {SMALL:,} -> {small * 1000:.2f} ms, {LARGE:,} -> {large * 1000:.2f} ms')
        results.append((f'{name}, 10x larger instance / smaller (CPU time)', large / max(small, 1e-9),
                        MAX_RATIO, 'at most'))
    return report(results)


if __name__ == '__main__':
    sys.exit(main())
