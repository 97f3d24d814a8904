"""The tests of each layer, one file per layer; what they share is in support.py (docs/development.md)."""
