"""The one CLI option layer: train, search and compare take --config FILE and --set KEY=VALUE with
the same layering, and `autoaug launch` knows path arguments from their declared kind."""

from __future__ import annotations

import pytest

from autoaug.core.errors import UserInputError
from autoaug.launch import cli, compare_cmd, launch_run, search_cmd, train_cmd
from autoaug.launch.options import path_flags


def _args(argv):
    return cli.build_parser().parse_args(argv)


@pytest.mark.parametrize("command", ["train", "search", "compare"])
def test_every_configurable_command_takes_config_and_set(command):
    parsers = cli.command_parsers()
    args = parsers[command].parse_args(["--config", "c.yaml", "--set", "a=1", "--set", "b.c=x"])
    assert args.config == "c.yaml" and args.assignments == ["a=1", "b.c=x"]


def test_train_layers_preset_file_set_then_flags(tmp_path):
    data = tmp_path / "train.parquet"
    data.write_bytes(b"PAR1")
    config = tmp_path / "train.yaml"
    config.write_text(f"preset: smoke\ndata: {data}\nepochs: 3\nlr: 0.05\npolicy: trivialaugment\nbatch_size: 32\n")
    argv = ["train", "--config", str(config), "--set", "epochs=4", "--set", "lr=0.07", "--lr", "0.09"]
    command, train = train_cmd._settings(_args(argv))
    assert train.epochs == 4  # --set beats the file
    assert train.lr == 0.09  # a flag beats --set
    assert train.batch_size == 32 and train.data == str(data)  # from the file
    assert command["policy"] == "trivialaugment" and command["preset"] == "smoke"


def test_train_without_data_anywhere_is_one_clear_line():
    with pytest.raises(UserInputError, match=r"no training data: give --data \(or data: in the --config file\)"):
        train_cmd._settings(_args(["train", "--preset", "smoke"]))


def test_train_rejects_an_unknown_setting(tmp_path):
    with pytest.raises(UserInputError, match="epoch"):
        train_cmd._settings(_args(["train", "--data", str(tmp_path), "--set", "epoch=3"]))


def test_search_and_compare_layer_the_same_way(tmp_path):
    config = tmp_path / "s.yaml"
    config.write_text("num_trials: 7\ntrain:\n  epochs: 3\n")
    search = search_cmd.build_search_config(
        _args(
            ["search", "--config", str(config), "--set", "train.epochs=2", "--data", str(tmp_path), "--num-trials", "9"]
        )
    )
    assert search.method_config.num_trials == 9 and search.train.epochs == 2
    (tmp_path / "train.parquet").write_bytes(b"PAR1")
    (tmp_path / "test.parquet").write_bytes(b"PAR1")
    config.write_text("seeds: 4\ntrain:\n  epochs: 3\n")
    compare = compare_cmd.build_compare_config(
        _args(
            [
                "compare",
                "--config",
                str(config),
                "--set",
                "train.epochs=2",
                "--data",
                str(tmp_path / "train.parquet"),
                "--seeds",
                "2",
                "--preset",
                "smoke",
            ]
        )
    )
    assert compare.seeds == (0, 1) and compare.train.epochs == 2


def test_path_flags_come_from_the_declared_options():
    assert {"--data", "--test-data", "--store", "--out", "--config"} <= cli.command_path_flags("train")
    assert {"--data", "--storage", "--store", "--config"} <= cli.command_path_flags("search")
    assert "--name" not in cli.command_path_flags("search") and "--epochs" not in cli.command_path_flags("train")
    assert path_flags(compare_cmd.OPTIONS) == cli.command_path_flags("compare")
    assert {"--store", "--data", "--out"} <= cli.command_path_flags("policies")


def test_launch_rewrites_a_declared_path_without_a_slash(tmp_path):
    (tmp_path / "runs").mkdir()
    prepared = launch_run.prepare_command(["search", "--storage", "runs", "--name", "runs"], cwd=tmp_path)
    # --storage is declared a path: made absolute; --name is not, even though a folder has that name
    assert prepared.args == ["search", "--storage", str(tmp_path / "runs"), "--name", "runs"]


def test_flags_that_set_the_same_setting_conflict_instead_of_the_last_winning(capsys):
    """``--warm-start X --no-warm-start`` is refused (exit 2, the error naming both flags), in
    either order; each alone still works."""
    from autoaug.launch.cli import build_parser

    for argv in (["--warm-start", "autoaugment-svhn", "--no-warm-start"], ["--no-warm-start", "--warm-start", "auto"]):
        with pytest.raises(SystemExit) as exc:
            build_parser().parse_args(["search", "--data", "d.parquet", *argv])
        assert exc.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert "not allowed with argument" in err[-1] and "--warm-start" in err[-1] and "--no-warm-start" in err[-1]
    assert build_parser().parse_args(["search", "--no-warm-start"]).warm_start == []
    assert build_parser().parse_args(["search", "--warm-start", "autoaugment-svhn"]).warm_start == ["autoaugment-svhn"]


@pytest.mark.parametrize("command", ["search", "train", "compare"])
def test_a_preset_given_twice_with_two_values_is_refused_instead_of_the_last_winning(command, capsys):
    from autoaug.launch.cli import build_parser

    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args([command, "--preset", "cpu", "--preset", "smoke"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == f"autoaug {command}: error: argument --preset: given twice, 'cpu' then 'smoke'; expected one"
    assert build_parser().parse_args([command, "--preset", "smoke", "--preset", "smoke"]).preset == "smoke"
    assert build_parser().parse_args([command, "--preset", "smoke"]).preset == "smoke"
