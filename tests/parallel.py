"""The suite in a few processes at once: most tests wait on loopback servers and paced streams, not on
the CPU, so a few processes finish the same tests in a fraction of the time (docs/development.md).

``python3 -m unittest`` (discovery) hands the tests of this package to ``ParallelSuite``: its tests go, those
of the slowest classes first, to worker processes (``python3 -m tests.parallel``), one at a time (a class
with class fixtures whole) to whichever worker is free; each worker runs it and writes what each test did,
one JSON line an outcome, to a pipe, and this process gives every outcome to the runner's own result
object, so that the runner prints and counts as it always does. A module, class or test named on the
command line (``python3 -m unittest tests.test_load``) runs in this process, as do the tests when
STREAM_TESTS_SERIAL is set or one CPU is all there is. Each test still runs alone in its process: nothing
is shared between workers but the machine."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import traceback
import unittest
from pathlib import Path

TOP = Path(__file__).resolve().parent.parent
# Classes known to take seconds, slowest first (a serial run's times, 2026-12-02), sent first so that no
# worker is left with one at the end: a guess that only orders the queue (a class missing here runs all the
# same, after these).
_SLOW_FIRST = ('DocCommandTests', 'GoodputTests', 'SessionLoadTests', 'TierTests', 'FlagTableTests',
               'CommandLineTests', 'ServerMetricsTests', 'FixtureVerdictTests', 'LoadTests', 'ReactorTests',
               'HostileCaseTests', 'TimeoutUnderAttackTests', 'ManifestTests', 'FuzzTests', 'ShardTests',
               'FixtureCommandLineTests', 'CaptureReplayTests', 'TraceReplayTests')


def workers() -> int:
    """How many worker processes: none (run here) when asked or with one CPU, else two per CPU this process
    may use (the tests mostly wait), at most four."""
    if os.environ.get('STREAM_TESTS_SERIAL'):
        return 0
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else (os.cpu_count() or 1)
    return 0 if cpus < 2 else min(2 * cpus, 4)


def _slowest_first(name: str) -> tuple[int, str]:
    """The place of a class ('tests.test_load.LoadTests') in the queue: the known slow ones first."""
    short = name.rsplit('.', 1)[1]
    return (_SLOW_FIRST.index(short) if short in _SLOW_FIRST else len(_SLOW_FIRST), name)


def _units(name: str, tests: list[unittest.TestCase]) -> list[str]:
    """What one worker takes at a time of a class: each test alone, or the whole class when it has class
    fixtures (set up once for all its tests)."""
    case = type(tests[0])
    if 'setUpClass' in vars(case) or 'tearDownClass' in vars(case):
        return [name]
    return [test.id() for test in tests]


def _classes(suite: unittest.TestSuite) -> dict[str, list[unittest.TestCase]]:
    """The tests of suite by the name of their class ('tests.test_load.LoadTests'), in order."""
    found: dict[str, list] = {}
    for test in _flattened(suite):
        found.setdefault(f'{type(test).__module__}.{type(test).__qualname__}', []).append(test)
    return found


def _flattened(suite):
    for item in suite:
        if isinstance(item, unittest.TestSuite):
            yield from _flattened(item)
        else:
            yield item


class _Remote:
    """A test, subtest or class fixture as a worker named it, for the runner's messages."""

    failureException = AssertionError

    def __init__(self, ident: str, text: str) -> None:
        self._id, self._text = ident, text

    def id(self) -> str:
        return self._id

    def __str__(self) -> str:
        return self._text

    def shortDescription(self) -> None:
        return None


class RemoteFailure(AssertionError):
    """A failure or error in a worker process; its message is the worker's traceback."""


class RemoteError(Exception):
    """An error in a worker process; its message is the worker's traceback."""


class ParallelSuite(unittest.TestSuite):
    """The tests of the package, run by worker processes (see the module's docstring)."""

    def __init__(self, tests: unittest.TestSuite, processes: int) -> None:
        super().__init__([tests])
        self.processes = processes

    def run(self, result: unittest.TestResult, debug: bool = False) -> unittest.TestResult:
        classes = _classes(self)
        order = [unit for name in sorted(classes, key=_slowest_first) for unit in _units(name, classes[name])]
        queue, lock = list(order), threading.Lock()
        tests = {test.id(): test for group in classes.values() for test in group}

        def take() -> str | None:
            with lock:
                return queue.pop(0) if queue else None

        def serve() -> None:
            _serve(take, tests, result, lock)
        threads = [threading.Thread(target=serve, daemon=True) for _ in range(min(self.processes, len(order)))]
        for thread in threads:
            thread.start()
        for thread in threads:
            while thread.is_alive():
                thread.join(0.1)  # in short waits, so that Ctrl+C is handled
        return result


def _serve(take, tests: dict, result: unittest.TestResult, lock: threading.Lock) -> None:
    """Give tests to a worker until none is left; one that dies is replaced by another for the rest."""
    while _one_worker(take, tests, result, lock):
        pass


def _one_worker(take, tests: dict, result: unittest.TestResult, lock: threading.Lock) -> bool:
    """Start one worker and give it tests (or classes) until none is left, replaying its outcomes into
    result; True when it died first (the tests it had taken and did not end are errors)."""
    read_fd, write_fd = os.pipe()
    worker = subprocess.Popen([sys.executable, '-m', 'tests.parallel', str(write_fd)], cwd=TOP, pass_fds=(write_fd,),
                              stdin=subprocess.PIPE, text=True)
    os.close(write_fd)
    with os.fdopen(read_fd, encoding='utf-8') as outcomes:
        while not result.shouldStop and (name := take()) is not None:
            worker.stdin.write(name + '\n')
            worker.stdin.flush()
            started, stopped = set(), set()
            for line in outcomes:
                event = json.loads(line)
                if event['what'] == 'done':
                    break
                if event['what'] == 'start':
                    started.add(event['id'])
                elif event['what'] == 'stop':
                    stopped.add(event['id'])
                with lock:
                    _replay(event, tests, result)
            else:  # the worker died: each test of what it took that did not end is an error, never lost
                why = f'the worker process running {name} ended with status {worker.wait()}'
                with lock:
                    for ident in [ident for ident in tests
                                  if (ident == name or ident.startswith(name + '.')) and ident not in stopped]:
                        if ident not in started:
                            _replay({'what': 'start', 'id': ident}, tests, result)
                        _replay({'what': 'error', 'id': ident, 'text': why}, tests, result)
                        _replay({'what': 'stop', 'id': ident}, tests, result)
                return True
    worker.stdin.close()
    worker.wait()
    return False


def _replay(event: dict, tests: dict, result: unittest.TestResult) -> None:
    test = tests.get(event['id']) or _Remote(event['id'], event.get('name', event['id']))
    what = event['what']
    if what == 'start':
        result.startTest(test)
    elif what == 'stop':
        result.stopTest(test)
    elif what == 'success':
        result.addSuccess(test)
    elif what == 'skip':
        result.addSkip(test, event['text'])
    elif what in ('failure', 'error'):
        kind = RemoteFailure if what == 'failure' else RemoteError
        getattr(result, 'addFailure' if what == 'failure' else 'addError')(test, (kind, kind(event['text']), None))
    elif what == 'expected_failure':
        result.addExpectedFailure(test, (RemoteError, RemoteError(event['text']), None))
    elif what == 'unexpected_success':
        result.addUnexpectedSuccess(test)
    elif what == 'subtest':
        subtest = _Remote(event['sub_id'], event['sub_name'])
        err = None
        if event['outcome'] is not None:
            kind = RemoteFailure if event['outcome'] == 'failure' else RemoteError
            err = (kind, kind(event['text']), None)
        result.addSubTest(test, subtest, err)


class _Reporting(unittest.TestResult):
    """A worker's result: each outcome written at once as a JSON line."""

    def __init__(self, out) -> None:
        super().__init__()
        self.out = out

    def _write(self, what: str, test, **fields) -> None:
        self.out.write(json.dumps({'what': what, 'id': test.id(), 'name': str(test), **fields}) + '\n')
        self.out.flush()

    def _text(self, err, test) -> str:
        return self._exc_info_to_string(err, test)

    def startTest(self, test) -> None:
        super().startTest(test)
        self._write('start', test)

    def stopTest(self, test) -> None:
        super().stopTest(test)
        self._write('stop', test)

    def addSuccess(self, test) -> None:
        self._write('success', test)

    def addSkip(self, test, reason) -> None:
        self._write('skip', test, text=reason)

    def addFailure(self, test, err) -> None:
        self._write('failure', test, text=self._text(err, test))

    def addError(self, test, err) -> None:
        self._write('error', test, text=self._text(err, test))

    def addExpectedFailure(self, test, err) -> None:
        self._write('expected_failure', test, text=self._text(err, test))

    def addUnexpectedSuccess(self, test) -> None:
        self._write('unexpected_success', test)

    def addSubTest(self, test, subtest, err) -> None:
        outcome = None if err is None else 'failure' if issubclass(err[0], test.failureException) else 'error'
        self._write('subtest', test, sub_id=subtest.id(), sub_name=str(subtest), outcome=outcome,
                    text=None if err is None else self._text(err, test))


def _work(fd: int) -> None:
    """A worker: run each test or class named on stdin, with a result of its own, writing its outcomes to fd,
    then a 'done' line. Each is a top-level run, so that a class's fixtures run once for its tests."""
    loader = unittest.TestLoader()
    with os.fdopen(fd, 'w', encoding='utf-8') as out:
        for line in sys.stdin:
            name, result = line.strip(), _Reporting(out)
            try:
                loader.loadTestsFromName(name).run(result)
            except Exception:  # a class that cannot load: one error, and the worker goes on
                text = traceback.format_exc()
                result.addError(_Remote(name, name), (RemoteError, RemoteError(text), None))
            out.write(json.dumps({'what': 'done', 'id': name}) + '\n')
            out.flush()


if __name__ == '__main__':
    _work(int(sys.argv[1]))
