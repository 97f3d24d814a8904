"""Tests for test_layers' check of the worker processes (tests/parallel.py): the second ends its worker
process. Not discovered (its name is not test_*.py); ParallelRunnerTests runs it by name."""
import os
import unittest


class DyingTests(unittest.TestCase):
    def test_a_before(self):
        self.assertTrue(True)

    def test_b_the_worker_dies(self):
        os._exit(3)

    def test_c_after(self):
        self.assertTrue(True)
