"""Errors the user can act on. The CLI prints them as one line and exits with code 2."""


class InputError(Exception):
    """The input is not something we can analyze (missing, not SQLite, not an nsys export, corrupted)."""
