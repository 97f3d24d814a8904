"""What the benchmark scripts share: the peak-memory wrapper and the report of targets."""
from __future__ import annotations

# Runs a script (or nothing) and then prints this process's peak RSS in KiB to stderr.
# VmHWM belongs to the process image, so unlike a child's ru_maxrss it does not
# include the parent's memory copied by fork before exec.
PEAK_WRAPPER = """
import os, runpy, sys
sys.argv = sys.argv[1:]
if sys.argv:
    sys.path.insert(0, os.path.dirname(sys.argv[0]))
    try:
        runpy.run_path(sys.argv[0], run_name='__main__')
    except SystemExit:
        pass
for line in open('/proc/self/status'):
    if line.startswith('VmHWM:'):
        print(line.split()[1], file=sys.stderr)
"""


def report(results: list[tuple[str, float, float, str]]) -> int:
    """Print each (name, value, target, 'at least' or 'at most'); return 1 if a target was missed."""
    missed = 0
    for name, value, target, direction in results:
        met = value >= target if direction == 'at least' else value <= target
        missed += not met
        print(f'{"ok  " if met else "MISS"} {name}: {value:.2f} (target {direction} {target:g})')
    return 1 if missed else 0
