#!/usr/bin/env python3
"""Run the hostile-44 cases (cases.json) against ../../stream_client.py, black box: with hostile-46's runner,
which began as a copy of the one first written here and does all it did (and more), so there is one runner.

    python3 run_cases.py [-j N] [ID_PREFIX ...]
"""
import os
import runpy
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.argv[1:1] = ["--cases", os.path.join(HERE, "cases.json")]
runpy.run_path(os.path.join(HERE, "..", "hostile-46", "run_cases.py"), run_name="__main__")
