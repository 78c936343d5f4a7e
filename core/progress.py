"""The live progress display of the long commands (``search``, ``compare``, ``train``).

One :class:`Progress` object per command run, entered as a context manager::

    with Progress("auto") as display:              # rich bars on a terminal, plain lines otherwise
        display.add("epochs", "train resnet-8", total=10, unit="epochs")
        display.add("batches", "  epoch 1", total=32, unit="batches")
        display.update("batches", advance=1, status="loss 2.103")
        display.log("epoch 1/10  val_acc 0.41")       # a line above the bars (or a plain line)

Modes (:data:`MODES`):

* ``"rich"``: live bars (description, bar, ``done/total unit``, a status text, elapsed time and
  ETA -- rich's own estimate from the rate of progress) redrawn a few times a second, with the
  :meth:`Progress.log` lines scrolling above them;
* ``"plain"``: no bars, only the :meth:`Progress.log` lines, flushed one by one -- what a log
  file, a pipe or CI sees;
* ``"quiet"``: nothing at all (``-q``: the command prints only its result);
* ``"auto"``: ``"rich"`` when the stream is a terminal and rich is installed, else ``"plain"``.

``rich`` is imported only in ``"rich"`` mode. A :class:`Progress` is not picklable state for
anyone else: callbacks that Ray Tune pickles (:class:`autoaug.search.tune.progress.ProgressCallback`)
drop their reference to it when pickled.
"""

from __future__ import annotations

import sys
import threading
from typing import Any, TextIO

__all__ = ["MODES", "Progress", "resolve_mode"]

#: The display modes; ``"auto"`` picks ``"rich"`` or ``"plain"``.
MODES = ("auto", "rich", "plain", "quiet")


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def _has_rich() -> bool:
    try:
        import rich.progress  # noqa: F401
    except ImportError:
        return False
    return True


def resolve_mode(mode: str, stream: Any = None) -> str:
    """``mode`` with ``"auto"`` replaced by ``"rich"`` (a terminal, rich installed) or ``"plain"``."""
    if mode not in MODES:
        raise ValueError(f"progress mode {mode!r}: expected one of {', '.join(MODES)}")
    if mode != "auto":
        return mode
    return "rich" if _isatty(stream if stream is not None else sys.stdout) and _has_rich() else "plain"


class Progress:
    """Bars and lines for one command run (see the module docs). Thread-safe: Ray Tune calls its
    callbacks from the driver's thread, the compare runner from its polling loop."""

    def __init__(self, mode: str = "auto", *, stream: TextIO | None = None, console: Any = None):
        self.stream = stream if stream is not None else sys.stdout
        self.mode = resolve_mode(mode, self.stream) if console is None else "rich"
        self._console = console  # a rich Console (tests and screenshots pass a recording one)
        self._rich: Any = None
        self._ids: dict[str, Any] = {}
        self._lock = threading.RLock()

    # -- lifecycle -------------------------------------------------------------------------------

    def __enter__(self) -> Progress:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def start(self) -> None:
        if self.mode != "rich" or self._rich is not None:
            return
        from rich.console import Console
        from rich.progress import BarColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn
        from rich.progress import Progress as RichProgress

        console = self._console or Console(file=self.stream)
        self._rich = RichProgress(
            TextColumn("{task.description}"),
            BarColumn(bar_width=24),
            TextColumn("{task.completed:>.0f}/{task.total:.0f} {task.fields[unit]}"),
            TextColumn("{task.fields[status]}"),
            TimeElapsedColumn(),
            TextColumn("eta"),
            TimeRemainingColumn(),
            console=console,
            refresh_per_second=4,
            # Epochs and trials take minutes: estimate the rate over the last hour, not rich's
            # default 30 s (which leaves the ETA blank when one step takes longer than that).
            speed_estimate_period=3600,
            # Bars drawn on stderr (``--json``: stdout holds the document alone) leave sys.stdout
            # alone: rich would route it through their console to stderr, and a document written
            # after they stop, to a sys.stdout restored to rich's proxy, would land there too.
            redirect_stdout=self.stream is not sys.stderr,
        )
        self._rich.start()

    def stop(self) -> None:
        with self._lock:
            if self._rich is not None:
                self._rich.stop()
                self._rich = None
                self._ids.clear()

    @property
    def active(self) -> bool:
        """False in ``"quiet"`` mode: nothing is shown."""
        return self.mode != "quiet"

    @property
    def live(self) -> bool:
        """True when bars are drawn (``"rich"`` mode, started)."""
        return self._rich is not None

    # -- bars ------------------------------------------------------------------------------------

    def add(
        self, key: str, description: str, total: float, *, unit: str = "", status: str = "", completed: float = 0
    ) -> None:
        """A bar named ``key`` (replaces an existing one of that name). No-op without bars."""
        with self._lock:
            if self._rich is None:
                return
            if key in self._ids:
                self._rich.remove_task(self._ids.pop(key))
            self._ids[key] = self._rich.add_task(
                description, total=total, completed=completed, unit=unit, status=status
            )

    def update(
        self,
        key: str,
        *,
        completed: float | None = None,
        advance: float | None = None,
        total: float | None = None,
        description: str | None = None,
        status: str | None = None,
    ) -> None:
        """Move or relabel the bar ``key`` (no-op if there is none)."""
        with self._lock:
            if self._rich is None or key not in self._ids:
                return
            fields: dict[str, Any] = {}
            if status is not None:
                fields["status"] = status
            self._rich.update(
                self._ids[key], completed=completed, advance=advance, total=total, description=description, **fields
            )

    def remove(self, key: str) -> None:
        with self._lock:
            if self._rich is not None and key in self._ids:
                self._rich.remove_task(self._ids.pop(key))

    def has(self, key: str) -> bool:
        return key in self._ids

    # -- lines -----------------------------------------------------------------------------------

    def log(self, text: str) -> None:
        """One line: above the bars (``"rich"``), on the stream (``"plain"``), nowhere (``"quiet"``)."""
        with self._lock:
            if self.mode == "quiet":
                return
            if self._rich is not None:
                self._rich.console.print(text, markup=False, highlight=False, soft_wrap=True)
            else:
                print(text, file=self.stream, flush=True)
