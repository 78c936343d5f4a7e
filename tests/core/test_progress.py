"""The progress display: rich bars on a terminal, plain lines otherwise, nothing when quiet."""

from __future__ import annotations

import io

import pytest

from autoaug.core.progress import Progress, resolve_mode


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_auto_is_plain_lines_when_not_a_terminal():
    out = io.StringIO()
    with Progress("auto", stream=out) as display:
        assert display.mode == "plain" and not display.live
        display.add("x", "work", total=3, unit="items")  # no bars: nothing printed
        display.update("x", completed=2, status="half")
        display.log("[1/3] done one")
    assert out.getvalue() == "[1/3] done one\n"


def test_auto_is_rich_on_a_terminal():
    assert resolve_mode("auto", _Tty()) == "rich"


def test_quiet_prints_nothing():
    out = io.StringIO()
    with Progress("quiet", stream=out) as display:
        display.log("anything")
        assert not display.active
    assert out.getvalue() == ""


def test_bad_mode_is_refused():
    with pytest.raises(ValueError, match="progress mode 'loud'"):
        Progress("loud")


def test_rich_bars_show_counts_status_and_lines():
    from rich.console import Console

    console = Console(file=io.StringIO(), record=True, width=120, force_terminal=True)
    with Progress(console=console) as display:
        assert display.live
        display.add("search", "search", total=12, unit="epochs")
        display.update("search", completed=6, status="3/6 trials, 2 running | best 0.4100 (abc)")
        display.log("[3/6] trial abc val_accuracy 0.4100")
        display._rich.refresh()
        assert display.has("search")
        display.remove("search")
        assert not display.has("search")
    text = console.export_text()
    assert "[3/6] trial abc val_accuracy 0.4100" in text
    assert "6/12 epochs" in text and "best 0.4100 (abc)" in text
