"""The suite's two tiers (docs/development.md), as urllib3 keeps test/ and test/with_dummyserver/ apart:

- the core tier, ``python3 -m unittest tests.core``: the tests (and test classes) marked ``@sans_io``, which feed bytes,
  events, records and files to the sans-IO layers (HTTP, SSE, JSON, the grammars, the validator, schemas,
  the verdict, gates, workload files, the plan, the summary) and open no socket, start no thread or
  process and never sleep: each such test watches itself (``sans_io`` wraps it) and fails if it did;
- the loopback tier, ``python3 -m unittest tests.loopback``: every other class, with loopback servers,
  the fixture, the command line and processes.

``python3 -m unittest`` runs both. Each layer keeps one test file; a file may hold classes of both tiers."""
from __future__ import annotations

import contextlib
import functools
import importlib
import os
import socket
import subprocess
import threading
import time
import unittest
from pathlib import Path
from unittest import mock

HERE = Path(__file__).resolve().parent


# What a test of the core tier may not do, and how its failure says so.
_WATCHED = ((socket.socket, '__init__', 'opened a socket'), (threading.Thread, 'start', 'started a thread'),
            (subprocess.Popen, '__init__', 'started a process'), (os, 'fork', 'forked'), (time, 'sleep', 'slept'))


@contextlib.contextmanager
def io_watched():
    """A list that gets, while the block runs, what the thread that runs it does that a sans-IO test may not
    (a thread a loopback test left behind is not watched: one the block starts is seen starting)."""
    seen: list[str] = []
    here = threading.current_thread()

    def watched(what: str, real):
        @functools.wraps(real)
        def call(*args, **kwargs):
            if threading.current_thread() is here:
                seen.append(what)
            return real(*args, **kwargs)
        return call
    with contextlib.ExitStack() as patches:
        for owner, name, what in _WATCHED:
            patches.enter_context(mock.patch.object(owner, name, watched(what, getattr(owner, name))))
        yield seen


def _watching(method):
    """The test method, failing when what it did is not sans-IO."""
    @functools.wraps(method)
    def test(self, *args, **kwargs):
        with io_watched() as seen:
            method(self, *args, **kwargs)
        if seen:
            self.fail(f'a test of the core tier (sans_io) {", ".join(sorted(set(seen)))}')
    test.sans_io = True
    return test


def sans_io(test):
    """Mark a test class, or one test of a class whose other tests need a socket, as the core tier's: no
    socket, thread, process or sleep in it. Each test so marked watches itself and fails if it used one."""
    if isinstance(test, type):
        for name, method in list(vars(test).items()):
            if name.startswith('test') and callable(method):
                setattr(test, name, _watching(method))
        test.sans_io = True
        return test
    return _watching(test)


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
