"""Trace strings and paths made safe to print: control characters and escape sequences shown, not obeyed.

Names in a trace (processes, GPUs, NVTX ranges, kernels, file names) are arbitrary bytes; printed raw, an
ANSI/OSC sequence clears the screen, retitles the terminal or plants a hyperlink, and a newline breaks
the one-line error contract. ``printable`` replaces every C0/C1 control character (ESC included, so no
sequence survives), DEL, the bidirectional overrides and undecodable bytes of a file name (lone
surrogates) with a visible escape: ``\\n``, ``\\x1b``, ``\\u202e``.
"""
from __future__ import annotations

import re

UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(m: re.Match) -> str:
    c = m.group()
    code = ord(c)
    if c in NAMED:
        return NAMED[c]
    if 0xDC80 <= code <= 0xDCFF:  # an undecodable file-name byte (surrogateescape)
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def printable(text: object) -> str:
    """``text`` as one line of inert characters (see the module docstring)."""
    return UNPRINTABLE.sub(_escape, str(text))


# Markdown syntax a trace string could use to inject headings, emphasis, links, images, HTML, math or
# code (pipes are escaped by the table writers; parentheses mean nothing once '[' is escaped).
MARKDOWN_SYNTAX = re.compile(r"([\\`*_\[\]<>#!~&$])")
# Autolinks and @-mentions are not undone by a backslash: a zero-width space breaks them.
AUTOLINK = re.compile(r"(@|://|www\.)", re.I)
ZWSP = "\u200b"
# Report/comparison keys whose values the markdown renderers put in code spans or compare as words.
MARKDOWN_VERBATIM = frozenset({"path", "step_family", "rule", "severity", "base_severity", "unit", "kind",
                               "gate_scope", "scope", "metric"})


def markdown_text(text: object) -> str:
    """``text`` as inert markdown: printable, markdown syntax backslash-escaped, links and mentions broken."""
    escaped = MARKDOWN_SYNTAX.sub(r"\\\1", printable(text))
    return AUTOLINK.sub(lambda m: m.group()[0] + ZWSP + m.group()[1:], escaped)


def code_span(text: object) -> str:
    """``text`` as a markdown code span (a fence longer than any backtick run inside; printable)."""
    body = printable(text)
    fence = "`" * (1 + max((len(run) for run in re.findall("`+", body)), default=0))
    pad = " " if body.startswith("`") or body.endswith("`") else ""
    return f"{fence}{pad}{body}{pad}{fence}"


# Keys whose values are this package's own multi-line text (code snippets of fixes), left as they are.
OWN_TEXT = frozenset({"snippet"})


def for_text(doc):
    """A copy of a report/comparison/rank view with every string printable (text renderers)."""
    return _map_strings(doc, printable, printable, frozenset())


def for_markdown(doc, verbatim: frozenset[str] = MARKDOWN_VERBATIM):
    """A copy with every string as inert markdown, except the values of ``verbatim`` keys (only
    printable: the renderer puts them in code spans or compares them)."""
    return _map_strings(doc, markdown_text, printable, verbatim)


def _map_strings(doc, fn, verbatim_fn, verbatim: frozenset[str]):
    if isinstance(doc, str):
        return fn(doc)
    if isinstance(doc, dict):
        return {k: (v if k in OWN_TEXT else verbatim_fn(v) if isinstance(v, str) and k in verbatim else
                    _map_strings(v, fn, verbatim_fn, verbatim)) for k, v in doc.items()}
    if isinstance(doc, (list, tuple)):
        return [_map_strings(v, fn, verbatim_fn, verbatim) for v in doc]
    return doc
