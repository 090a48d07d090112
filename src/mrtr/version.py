"""The package's version, in a module of its own so that any module can read it without
importing `mrtr/__init__.py`, which imports everything."""

__version__ = "0.1.0"
"""The version of this package."""
