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
