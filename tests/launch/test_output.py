"""--json: one JSON document on stdout and nothing else, whatever writes to stdout meanwhile."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from autoaug.launch.output import json_result


def test_only_the_document_reaches_stdout(capfd):
    with json_result(True) as emit:
        print("a progress line")
        os.write(1, b"a C library writing to fd 1\n")
        emit({"ref": "x@1", "score": float("nan")})
    out, err = capfd.readouterr()
    assert json.loads(out) == {"ref": "x@1", "score": None}  # standard JSON: NaN -> null
    assert "a progress line" in err and "a C library writing to fd 1" in err


def test_an_error_emits_nothing(capfd):
    with pytest.raises(RuntimeError):
        with json_result(True) as emit:
            emit({"never": True})
            raise RuntimeError("boom")
    out, _ = capfd.readouterr()
    assert out == ""


def test_disabled_is_a_no_op(capfd):
    with json_result(False) as emit:
        print("plain output")
        emit({"ignored": 1})
    out, _ = capfd.readouterr()
    assert out == "plain output\n"


@pytest.mark.parametrize(
    "argv", [["policies", "show", "autoaugment-cifar10", "--json"], ["policies", "list", "--json"]]
)
def test_policies_json_is_one_document(argv, tmp_path):
    from autoaug.policies.presets import resolve
    from autoaug.policies.store import PolicyStore

    PolicyStore(str(tmp_path / "store")).save(resolve("autoaugment-cifar10"), "aa")  # a store that exists
    proc = subprocess.run(
        [sys.executable, "-m", "autoaug.launch.cli", *argv, "--store", str(tmp_path / "store")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    json.loads(proc.stdout)  # the whole of stdout is one document


def test_json_is_declared_once_and_used_by_every_command():
    from autoaug.launch import compare_cmd, options, search_cmd, train_cmd
    from autoaug.launch.cli import command_parsers

    for module in (search_cmd, train_cmd, compare_cmd):
        assert any(o.flags == options.JSON.flags for o in module.OPTIONS), module.__name__
    parsers = command_parsers()
    for command, argv in (("search", []), ("train", []), ("compare", []), ("report", ["NAME"])):
        assert parsers[command].parse_known_args([*argv, "--json"])[0].json is True


def test_quiet_and_json_together_are_refused(capsys):
    from autoaug.launch.cli import main

    assert main(["search", "--data", "x", "-q", "--json"]) == 2
    assert "--quiet and --json" in capsys.readouterr().err


def test_the_document_reaches_stdout_after_live_bars_on_a_terminal(capfd):
    """`autoaug search --json` on a terminal: the bars are drawn on stderr, started before the
    document's block and stopped in it (launch.search_cmd); the document still goes to stdout
    (`make demo` redirects it to a file), not through the bars' console to stderr."""
    from rich.console import Console

    from autoaug.core.progress import Progress

    terminal = Console(file=sys.stderr, force_terminal=True)  # rich redirects print() only on a terminal
    with Progress("rich", stream=sys.stderr, console=terminal) as display:
        display.add("trials", "search", total=2, unit="trials")
        with json_result(True) as emit:
            print("a line above the bars")
            display.stop()
            emit({"ref": "demo@1"})
    out, err = capfd.readouterr()
    assert json.loads(out) == {"ref": "demo@1"}
    assert "a line above the bars" in err and "demo@1" not in err
