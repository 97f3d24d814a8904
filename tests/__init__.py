"""The tests of each layer, one file per layer; what they share is in support.py (docs/development.md).

They run the package in src/stream_client/, the code that is edited, not the generated stream_client.py:
src/ goes first on the path here, once, before any test module imports stream_client. The generated file
has tests of its own, in test_stream.py at the top of the checkout."""
import sys
from pathlib import Path

_SRC = str(Path(__file__).resolve().parent.parent / 'src')
if sys.path[:1] != [_SRC]:
    sys.path.insert(0, _SRC)
_loaded = sys.modules.get('stream_client')
if _loaded is not None and not getattr(_loaded, '__path__', None):
    raise ImportError(f'stream_client was imported from {_loaded.__file__} before tests/: the tests must run the '
                      f'package in {_SRC}')


def load_tests(loader, standard_tests, pattern):
    """Discovery (python3 -m unittest) of this package: its tests, run by a few worker processes at once
    (tests/parallel.py), or here when STREAM_TESTS_SERIAL is set."""
    from . import parallel
    found = loader.discover(str(Path(__file__).resolve().parent), pattern or 'test*.py',
                            str(Path(__file__).resolve().parent.parent))
    standard_tests.addTests(found)
    processes = parallel.workers()
    return parallel.ParallelSuite(standard_tests, processes) if processes else standard_tests
