"""The live tier: the client against a real vLLM serving the agent model (serve_agent.sh).

It runs only when STREAM_CLIENT_LIVE_URL names the server's base URL (a loopback address):

    STREAM_CLIENT_LIVE_URL=http://127.0.0.1:8012 python3 -m unittest tests.live

``python3 -m unittest`` (the ordinary suite) leaves it out unless that variable is set; run alone
without it, it is skipped with one line saying why. See docs/live.md.
"""
import os
import unittest


def load_tests(loader: unittest.TestLoader, standard_tests: unittest.TestSuite, pattern: str | None):
    """The ordinary suite's discovery (a pattern) leaves the tier out without a server: no tier, not a skip
    (CI runs it once, apart); named on the command line, it is loaded, and skips with one line."""
    if pattern is not None and not os.environ.get('STREAM_CLIENT_LIVE_URL'):
        return unittest.TestSuite()
    from . import test_agent_live
    standard_tests.addTests(loader.loadTestsFromModule(test_agent_live))
    return standard_tests
