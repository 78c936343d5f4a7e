"""``--group-by SPEC`` on ``autoaug train``, ``compare`` and ``search``: declared once in the option
layer (also ``--set group_by=...`` / ``train.group_by`` in a config), checked before anything is
created, problems as one ``autoaug: error:`` line and approximations as one ``autoaug: warning:``
line, the grouping recorded with the run, and a comparison's runs reused only under the same
grouping."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pyarrow as pa
import pytest

from autoaug.launch import cli, compare_cmd, train_cmd
from autoaug.launch.compare import CompareError, runner
from autoaug.launch.options import group_by_option

TRACK = r"source_path:Images/(\d+)/(\d+)_"


def _args(argv):
    return cli.build_parser().parse_args(argv)


@pytest.fixture
def tracks(tmp_path, write_tracks):
    folder = tmp_path / "data"
    folder.mkdir()
    write_tracks(folder / "test.parquet", tracks=2)
    return write_tracks(folder / "train.parquet")


def test_train_and_compare_take_group_by_as_flag_set_and_config(tracks, tmp_path):
    _, train = train_cmd._settings(_args(["train", "--data", str(tracks), "--group-by", TRACK]))
    assert train.group_by == TRACK
    _, train = train_cmd._settings(_args(["train", "--data", str(tracks), "--set", "group_by=track"]))
    assert train.group_by == "track"
    config = tmp_path / "c.yaml"
    config.write_text("train:\n  group_by: session\n")
    compare = compare_cmd.build_compare_config(_args(["compare", "--data", str(tracks), "--config", str(config)]))
    assert compare.train.group_by == "session"
    compare = compare_cmd.build_compare_config(
        _args(["compare", "--data", str(tracks), "--config", str(config), "--group-by", "track"])
    )
    assert compare.train.group_by == "track"  # the flag beats the file
    assert compare_cmd.build_compare_config(_args(["compare", "--data", str(tracks)])).train.group_by is None


def test_the_group_by_flag_is_declared_once():
    from autoaug.launch import search_cmd

    for module in (train_cmd, compare_cmd, search_cmd):
        declared = [o for o in module.OPTIONS if "--group-by" in o.flags]
        assert len(declared) == 1 and declared[0].argparse == group_by_option().argparse, module.__name__


@pytest.mark.parametrize(
    "spec, message",
    [
        (
            "track:x(",
            "autoaug: error: TrainConfig.group_by 'track:x(': the pattern 'x(' is not a valid regular expression "
            "(missing ), unterminated subpattern at position 1); expected COLUMN or COLUMN:REGEX",
        ),
        ("tracks", "train.parquet: group_by 'tracks': no column 'tracks'; the file has columns ['image', 'label', "),
        (
            r"source_path:/0000[01]/",
            "group_by 'source_path:/0000[01]/': the pattern matches 60 of the 120 "
            "'source_path' values; 60 do not, e.g. row 60 "
            "'GTSRB/Final_Training/Images/00002/00000_00000.ppm'",
        ),
        (
            r"source_path:Images/(\d+)/",
            "group_by 'source_path:Images/(\\d+)/': cannot stratify a grouped split by class",
        ),
    ],
)
def test_a_bad_group_key_is_one_line_before_anything_is_created(spec, message, tracks, tmp_path, capsys):
    out = tmp_path / "run"
    code = cli.main(
        [
            "train",
            "--data",
            str(tracks),
            "--preset",
            "smoke",
            "--train-size",
            "40",
            "--val-size",
            "40",
            "--group-by",
            spec,
            "--out",
            str(out),
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and message in err, err
    assert len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_compare_refuses_a_bad_group_key_in_one_line(tracks, tmp_path, capsys):
    code = cli.main(
        [
            "compare",
            "--data",
            str(tracks),
            "--preset",
            "smoke",
            "--group-by",
            "track:(",
            "--baselines",
            "none",
            "--out",
            str(tmp_path / "cmp"),
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and "group_by 'track:(': the pattern '(' is not a valid regular expression" in err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "cmp").exists()


@pytest.mark.slow
def test_train_records_the_grouping_and_warns_once_in_one_line(tmp_path, write_tracks, capsys):
    merged = pa.array([0 if i < 30 else i // 5 for i in range(120)], pa.int64())  # class 0 is one track of 30
    data = write_tracks(tmp_path / "train.parquet", extra={"track": merged})
    out = tmp_path / "run"
    code = cli.main(
        [
            "train",
            "--data",
            str(data),
            "--preset",
            "smoke",
            "--epochs",
            "1",
            "--batch-size",
            "8",
            "--train-size",
            "40",
            "--val-size",
            "40",
            "--group-by",
            "track",
            "--num-threads",
            "1",
            "--out",
            str(out),
            "-q",
        ]
    )
    err = capsys.readouterr().err
    assert code == 0, err
    warning = [line for line in err.splitlines() if line.startswith("autoaug: warning:")]
    assert warning == [
        "autoaug: warning: group_by 'track': grouped split: 1 of the 4 classes cannot get their "
        "counts with each group on one side: label 0 (30 images in 1 group): 0 of 10 validation "
        "images; 10 validation images come from other classes instead"
    ], err
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["config"]["group_by"] == "track"
    from autoaug.proxy_models.data import open_dataset
    from autoaug.proxy_models.splits import reduced_split

    ds = open_dataset(data)
    with pytest.warns(Warning):
        grouped = reduced_split(
            ds.labels, 40, 40, seed=0, groups=ds.groups("track"), dataset_fingerprint=ds.fingerprint()
        )
    assert metrics["final"]["split_fingerprint"] == grouped.fingerprint


def _record(config, policy_hash="h" * 64):
    return {
        "format": 1,
        "run_id": "r",
        "policy": "none",
        "policy_hash": policy_hash,
        "seed": 0,
        "test_accuracy": 0.5,
        "train_config": config.to_dict(),
        "dataset_fingerprint": "f" * 64,
    }


def test_compare_reuses_runs_only_under_the_same_grouping(tracks):
    config = compare_cmd.build_compare_config(_args(["compare", "--data", str(tracks), "--preset", "smoke"]))
    cfg = config.run_config(0)
    candidate = type("C", (), {"policy_hash": "h" * 64, "base": "standard"})()
    before = _record(cfg)
    before["train_config"].pop("group_by", None)  # written before the field existed: ungrouped
    assert runner.load_run(json.dumps(before).encode(), "r.json", candidate, 0, cfg, "f" * 64) is not None
    grouped = dataclasses.replace(cfg, group_by="track")
    with pytest.raises(CompareError, match=r"holds a run of another comparison \(group_by: None vs 'track'\)"):
        runner.load_run(json.dumps(before).encode(), "r.json", candidate, 0, grouped, "f" * 64)
    assert runner.load_run(json.dumps(_record(grouped)).encode(), "r.json", candidate, 0, grouped, "f" * 64)


def test_the_preflight_describes_the_grouping(tracks):
    from autoaug.launch.preflight import check_data
    from autoaug.proxy_models.train_config import TrainConfig

    checked = check_data(TrainConfig(data=str(tracks), train_size=40, val_size=40, group_by="track"))
    assert "(split: train 40, val 40, 8x8, grouped by track: 24 groups, none on both sides)" in checked.describe()
    groups = checked.dataset.groups("track")
    assert not np.isin(groups[checked.split.val], groups[checked.split.train]).any()


def test_search_draws_its_split_and_the_density_folds_by_group(tracks):
    """The search takes --group-by like train and compare; its split record is the trainer's grouped
    split, and no group of the density method's fold models is in two folds."""
    from autoaug.launch.search_cmd import build_search_config
    from autoaug.proxy_models.data import open_dataset
    from autoaug.proxy_models.splits import config_split
    from autoaug.search.methods.density.fold_models import fold_splits
    from autoaug.search.records import describe_data

    config = build_search_config(
        _args(
            [
                "search",
                "--data",
                str(tracks),
                "--preset",
                "smoke",
                "--group-by",
                "track",
                "--train-size",
                "40",
                "--val-size",
                "40",
            ]
        )
    )
    assert config.train.group_by == "track"
    ds = open_dataset(str(tracks))
    groups = ds.groups("track")
    split = config_split(ds, config.train, dataset_fingerprint=ds.fingerprint())
    assert not set(groups[split.val]) & set(groups[split.train])
    described = describe_data(config.train)["split"]
    assert (described["fingerprint"], described["group_by"]) == (split.fingerprint, "track")
    _, folds = fold_splits(config.train, 3, seed=0)
    parts = [set(groups[f.val]) for f in folds]
    assert all(a.isdisjoint(b) for i, a in enumerate(parts) for b in parts[i + 1 :])
    assert set().union(*parts) == set(groups[split.train])
