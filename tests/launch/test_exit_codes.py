"""Exit statuses come from one table in ``autoaug.launch.cli.main`` (docs/search.md: 1 when Ray
fails, 2 for bad input, 130 for an interrupted search)."""

from __future__ import annotations

import socket

import pytest

from autoaug.core import errors
from autoaug.launch import cli
from autoaug.launch.cli import main


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_failed_cluster_connection_exits_with_the_documented_status_1(cifar_small, tmp_path, capsys):
    port = _closed_port()
    argv = [
        "search",
        "--preset",
        "smoke",
        "--data",
        str(cifar_small),
        "--name",
        "nowhere",
        "--address",
        f"127.0.0.1:{port}",
        "--storage",
        str(tmp_path / "runs"),
        "--store",
        str(tmp_path / "store"),
        "-q",
    ]
    assert main(argv) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"autoaug: error: cannot reach the Ray cluster at 127.0.0.1:{port}")
    assert len(err.splitlines()) == 1


@pytest.mark.parametrize("command", ["search", "compare"])
def test_a_malformed_cluster_address_is_bad_input_status_2_before_the_data_are_read(
    command, cifar_small, tmp_path, capsys, monkeypatch
):
    def checked(*args, **kwargs):
        raise AssertionError("the data were checked (decoded): the address was refused after work started")

    monkeypatch.setattr("autoaug.launch.preflight.check_data", checked)
    where = (
        ["--name", "bad-address", "--storage", str(tmp_path / "runs"), "--store", str(tmp_path / "store"), "-q"]
        if command == "search"
        else ["--policy", "trivialaugment", "--test-data", str(cifar_small), "--out", str(tmp_path / "cmp")]
    )
    argv = [command, "--preset", "smoke", "--data", str(cifar_small), "--address", "s3://head", *where]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unsupported scheme 's3://' in Ray cluster address" in err[0], err
    assert not (tmp_path / "runs").exists() and not (tmp_path / "cmp").exists()


@pytest.mark.parametrize(
    "error, code, prefix",
    [
        (errors.UserInputError("bad flag"), 2, "autoaug: error: bad flag"),
        (errors.DataError("corrupt image"), 2, "autoaug: error: corrupt image"),
        (errors.StoreError("no such policy"), 2, "autoaug: error: no such policy"),
        (errors.RunExistsError("name taken"), 2, "autoaug: error: name taken"),
        (errors.SearchFailedError("all trials failed"), 1, "autoaug: error: all trials failed"),
        (errors.SearchInterruptedError("resume it with ..."), 130, "autoaug: resume it with ..."),
        (errors.ClusterError("cannot connect"), 1, "autoaug: error: cannot connect"),
        (errors.ClusterInputError("malformed address"), 2, "autoaug: error: malformed address"),
        (errors.RunFailedError("run x failed"), 1, "autoaug: error: run x failed"),
        (ValueError("Policy: bad probability"), 2, "autoaug: error: Policy: bad probability"),
    ],
)
def test_each_kind_of_error_exits_with_its_status_and_one_line(error, code, prefix, monkeypatch, capsys):
    def command(args):
        raise error

    real = cli.build_parser

    def parser():
        p = real()
        p.set_defaults(func=command)
        return p

    monkeypatch.setattr(cli, "build_parser", parser)
    assert main([]) == code
    assert capsys.readouterr().err.strip() == prefix


def test_a_bug_keeps_its_traceback(monkeypatch):
    real = cli.build_parser

    def parser():
        p = real()
        p.set_defaults(func=lambda args: 1 / 0)
        return p

    monkeypatch.setattr(cli, "build_parser", parser)
    with pytest.raises(ZeroDivisionError):
        main([])
