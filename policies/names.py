"""The one rule for names: a stored policy's name, and so a search's (its run directory, its
Optuna study and the policy it stores share the name)."""

from __future__ import annotations

import re
from typing import Any

__all__ = ["NAME_RE", "NAME_RULE", "is_valid_name"]

NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,127}")
NAME_RULE = (
    "1-128 characters from letters, digits, '.', '_', '+', '-', starting with a letter or digit "
    "(no path separators, '@', ':' or spaces)"
)


def is_valid_name(name: Any) -> bool:
    return isinstance(name, str) and NAME_RE.fullmatch(name) is not None
