"""Fixes in the program's own language: each rule keeps a table framework -> (fix text, snippet).

``pick(table, framework)`` returns the framework's entry, else the table's ``"default"`` entry,
which is plain words with no code: a program whose framework is unknown never gets PyTorch code.
"""
from __future__ import annotations

Fix = tuple[str, str]


def pick(table: dict[str, Fix], framework: str) -> Fix:
    """(fix, snippet) for ``framework`` (framework.Framework.name), falling back to the plain-words default."""
    return table.get(framework, table["default"])


def unset_variable(name: str, before: str = "") -> str:
    """A snippet that unsets the environment variable ``name`` in the job's environment and, given ``before`` (what
    reads it, e.g. 'torch starts CUDA'), also first thing in a Python program."""
    shell = f"unset {name}".ljust(35) + " # in the job's environment: shell, launcher script, container, .env\n"
    if not before:
        return shell
    return shell + f"# or first thing in the program, before {before}:\nos.environ.pop(\"{name}\", None)\n"
