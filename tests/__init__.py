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
