"""The suite's two tiers (docs/development.md), as urllib3 keeps test/ and test/with_dummyserver/ apart:

- the core tier, ``python3 -m unittest tests.core``: the tests (and test classes) marked ``@sans_io``, which feed bytes,
  events, records and files to the sans-IO layers (HTTP, SSE, JSON, the grammars, the validator, schemas,
  the verdict, gates, workload files, the plan, the summary) and open no socket, start no thread or
  process and never sleep (``TierTests`` in test_layers.py runs the tier so watched);
- the loopback tier, ``python3 -m unittest tests.loopback``: every other class, with loopback servers,
  the fixture, the command line and processes.

``python3 -m unittest`` runs both. Each layer keeps one test file; a file may hold classes of both tiers."""
from __future__ import annotations

import importlib
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent


def sans_io(test):
    """Mark a test class, or one test of a class whose other tests need a socket, as the core tier's: no
    socket, thread, process or sleep in it."""
    test.sans_io = True
    return test


def is_sans_io(test: unittest.TestCase) -> bool:
    """Whether a test is the core tier's: its class or its method is marked sans_io."""
    return bool(getattr(type(test), 'sans_io', False) or getattr(getattr(test, test._testMethodName), 'sans_io', False))


def tier_suite(loader: unittest.TestLoader, core: bool) -> unittest.TestSuite:
    """The tests of every tests/test_*.py module that are (core) or are not (loopback) the core tier's."""
    suite = unittest.TestSuite()
    for path in sorted(HERE.glob('test_*.py')):
        module = importlib.import_module(f'tests.{path.stem}')
        for name in sorted(vars(module)):
            case = getattr(module, name)
            if isinstance(case, type) and issubclass(case, unittest.TestCase) and case.__module__ == module.__name__:
                suite.addTests(test for test in loader.loadTestsFromTestCase(case) if is_sans_io(test) == core)
    return suite
