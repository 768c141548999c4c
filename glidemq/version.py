"""The distribution's version (kept equal to pyproject.toml's by a test)."""

from __future__ import annotations

__all__ = ["__version__"]

__version__ = "0.1.0"
