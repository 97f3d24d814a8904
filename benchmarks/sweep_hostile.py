"""Every hostile and grammar case of the test suite, split in two at every byte.

    python3 benchmarks/sweep_hostile.py

The suite splits each case around its line ends and at a stride (tests/test_reader.py, hostile_splits); this
sweep tries every split (about 240,000), which takes about a minute. Prints the splits whose verdict differs from
the case's whole verdict and exits 1 if there is one. Standard library only; no socket.
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests import test_reader  # noqa: E402


def cases():
    """(name, case, raw response, expected verdict) of every single-run hostile case and grammar case."""
    for case in test_reader.HOSTILE_CASES:
        if case['runs'] == 1:
            expected = case['expect_ok'], case['expect_layer'], test_reader.HOSTILE_KINDS.get(case['file'][:2])
            yield case['file'], case, (test_reader.HOSTILE / 'cases' / case['file']).read_bytes(), expected
    for name, (api, events, kind) in test_reader.GRAMMAR_CASES.items():
        expected = kind is None, None if kind is None else 'protocol', kind
        yield name, {'api': api, 'args': []}, test_reader.typed_response(events), expected


def main() -> int:
    splits = wrong = 0
    for name, case, raw, expected in cases():
        for at in range(len(raw) + 1):
            splits += 1
            got = test_reader.verdict_of(case, [raw[:at], raw[at:]])
            if got != expected:
                wrong += 1
                print(f'{name}: split at {at}: {got}, expected {expected}')
    print(f'{splits} splits, {wrong} with another verdict')
    return 1 if wrong else 0


if __name__ == '__main__':
    sys.exit(main())
