"""SIGTERM stops a command as Ctrl-C does.

SIGTERM is what Slurm, Kubernetes, systemd, ``kill PID`` and ``ray job stop`` send before
SIGKILL. Left alone, a search's driver met it with Ray's handlers: ``ray.init`` sets one that
calls ``sys.exit``, and Ray's core worker adds a native one that prints a stack dump and aborts
(exit 134), with no word on resuming. :func:`sigterm_as_interrupt` (installed by ``autoaug``'s
``main`` for every command) makes SIGTERM do what SIGINT does at that moment: during a Ray Tune
``fit``, Tune's handler (the trials saved, the experiment ended, the search raising its resumable
:class:`~autoaug.core.errors.SearchInterruptedError`); anywhere else, ``KeyboardInterrupt`` -- also
where SIGINT is ignored (a background job of a non-interactive shell), which SIGTERM is not.
:func:`autoaug.core.ray_session.connect` puts a handler set before it back once Ray is connected
(``ray.init`` replaces it). ``main`` then exits 143 (128 + SIGTERM) instead of Ctrl-C's 130.

Example::

    with sigterm_as_interrupt() as term:
        try:
            run()
        except KeyboardInterrupt:
            return 143 if term.received else 130
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

__all__ = ["EXIT_SIGTERM", "TermAsInterrupt", "keeping_sigterm_handler", "sigterm_as_interrupt"]

#: The exit status of a command stopped by SIGTERM (the shell's 128 + 15).
EXIT_SIGTERM = 128 + signal.SIGTERM


class TermAsInterrupt:
    """A SIGTERM handler doing what SIGINT's handler does now; ``received`` says it ran."""

    def __init__(self) -> None:
        self.received = False

    def __call__(self, signum, frame) -> None:
        self.received = True
        handler = signal.getsignal(signal.SIGINT)
        if callable(handler):  # Tune's graceful stop during a fit, else Python's KeyboardInterrupt
            handler(signal.SIGINT, frame)
        else:  # SIG_DFL, a handler not set from Python, or SIGINT ignored (a job started in the
            # background by a non-interactive shell: nohup, &, batch scripts): SIGTERM still stops
            raise KeyboardInterrupt


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[TermAsInterrupt]:
    """SIGTERM handled as Ctrl-C for the block (in the main thread; elsewhere, signals cannot be
    handled and SIGTERM keeps its handler); the previous handler back after it."""
    term = TermAsInterrupt()
    if threading.current_thread() is not threading.main_thread():
        yield term
        return
    previous = signal.signal(signal.SIGTERM, term)
    try:
        yield term
    finally:
        signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)


@contextlib.contextmanager
def keeping_sigterm_handler() -> Iterator[None]:
    """Around ``ray.init``: a Python SIGTERM handler set before it (:class:`TermAsInterrupt`) is
    put back after it, replacing Ray's (``sys.exit``, and the core worker's native stack dump)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.getsignal(signal.SIGTERM)
    try:
        yield
    finally:
        if isinstance(before, TermAsInterrupt):
            signal.signal(signal.SIGTERM, before)
