"""Fixes in the program's own language: each rule keeps a table framework -> (fix text, snippet).

``pick(table, framework)`` returns the framework's entry, else the table's ``"default"`` entry,
which is plain words with no code: a program whose framework is unknown never gets PyTorch code.
"""
from __future__ import annotations

Fix = tuple[str, str]


def pick(table: dict[str, Fix], framework: str) -> Fix:
    """(fix, snippet) for ``framework`` (framework.Framework.name), falling back to the plain-words default."""
    return table.get(framework, table["default"])
