"""The loopback tier: ``python3 -m unittest tests.loopback`` (see tiers.py)."""
from .tiers import tier_suite


def load_tests(loader, standard_tests, pattern):
    return tier_suite(loader, core=False)
