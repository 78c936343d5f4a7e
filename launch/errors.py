"""User-facing errors: raised for bad input, printed by the CLI as one line (exit code 2)."""
from __future__ import annotations


class UserError(Exception):
    """A mistake the user can fix (bad flag, missing file, unknown policy...).

    ``autoaug`` prints ``autoaug: error: <message>`` and exits with status 2 instead of
    showing a traceback.
    """
