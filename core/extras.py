"""What a light install leaves out, and the one check a command makes before it needs it.

``pip install autoaug`` brings what loading, inspecting and applying a stored policy with
torchvision needs (torch, torchvision, pyarrow, numpy, pillow, pyyaml). Searching, training
with the DALI pipeline, comparing and Ray Jobs need the *search stack*, the ``search`` extra::

    pip install 'autoaug[search]'      # ray[tune,default], optuna, nvidia-dali, scipy, cmaes, matplotlib

A command module lists what it needs in ``REQUIRES`` (module names); ``autoaug``'s ``main``
calls :func:`require` before running it, so a missing library is one line naming the extra
(exit status 2), never an ``ImportError`` traceback half-way through.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable

from autoaug.core.errors import MissingExtraError

__all__ = ["SEARCH_EXTRA", "SEARCH_STACK", "INSTALL_SEARCH", "missing", "require"]

#: The extra holding the search stack, and the command that installs it.
SEARCH_EXTRA = "search"
INSTALL_SEARCH = "pip install 'autoaug[search]'"
#: The modules of the search stack (import names).
SEARCH_STACK = ("ray", "optuna", "nvidia.dali")


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing, or a finder refusing it
        return False


def missing(modules: Iterable[str]) -> list[str]:
    """The modules of ``modules`` that cannot be imported (found without importing them)."""
    return [m for m in modules if not _importable(m)]


def require(modules: Iterable[str], what: str, *, alternative: str = "") -> None:
    """Raise :class:`MissingExtraError` naming the extra when one of ``modules`` is missing;
    ``what`` is what needs them (``"autoaug search"``), ``alternative`` a way around it."""
    absent = missing(modules)
    if absent:
        raise MissingExtraError(
            f"{what} needs the search stack, which is not installed (missing: {', '.join(absent)}); "
            f"install it with: {INSTALL_SEARCH}" + (f" ({alternative})" if alternative else "")
        )
