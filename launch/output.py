"""What a command prints: its progress display and, with ``--json``, one JSON document.

* :func:`display_for` -- the :class:`autoaug.core.progress.Progress` a command's flags ask for:
  nothing with ``-q``; with ``--json`` on stderr (stdout is kept for the document); otherwise on
  stdout; rich bars when that stream is a terminal, plain lines when it is not.
* :func:`json_result` -- a context manager for a ``--json`` run: while the command works, file
  descriptor 1 points at stderr, so that nothing else -- our messages, Ray's or Tune's output,
  a C library writing to fd 1 -- lands on stdout; the document given to ``emit`` is written to
  the real stdout at the end.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

from autoaug.core.metrics import clean_metrics
from autoaug.core.progress import Progress

__all__ = ["display_for", "json_result", "dump_json"]


def display_for(args: Any, *, verbose: int | None = None):
    """The progress display of a command run with ``args`` (``quiet``, ``json``, ``verbose``)."""
    if getattr(args, "quiet", False) or verbose == 0:
        return Progress("quiet")
    if getattr(args, "json", False):
        return Progress("auto", stream=sys.stderr)
    return Progress("auto", stream=sys.stdout)


def dump_json(obj: Any) -> str:
    """``obj`` as standard JSON (NaN and infinities as null), indented."""
    return json.dumps(clean_metrics(obj), indent=2, sort_keys=False, default=str)


@contextlib.contextmanager
def json_result(enabled: bool) -> Iterator[Callable[[Any], None]]:
    """``with json_result(args.json) as emit: ...; emit(document)``; the document is written to
    stdout when the block ends without an exception (no-op wrapper when ``enabled`` is false:
    ``emit`` then prints nothing)."""
    if not enabled:
        yield lambda obj: None
        return
    result: list[Any] = []
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield result.append
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved, 1)
        os.close(saved)
    if result:
        sys.stdout.write(dump_json(result[-1]) + "\n")
        sys.stdout.flush()
