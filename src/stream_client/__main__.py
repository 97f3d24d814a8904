"""``python3 -m stream_client`` (from ``src/``), as ``python3 stream_client.py``: the command line."""
import sys

from ._cli import main

if __name__ == '__main__':
    sys.exit(main())
