"""Small datasets and consistent flags: --train-size/--val-size on every command that
trains, an unfitting split says what fits and which flags ask for it, `train` finds the test split
as `compare` does, and written files honour the umask."""

from __future__ import annotations

import os
import stat

import numpy as np
import pytest
from PIL import Image

from autoaug.core.location import atomic_write_local
from autoaug.launch import cli, compare_cmd, search_cmd, train_cmd


def _args(argv):
    return cli.build_parser().parse_args(argv)


@pytest.fixture(scope="module")
def small_imagefolder(tmp_path_factory):
    """300 images: 10 classes x 30 PNGs of 8x8."""
    root = tmp_path_factory.mktemp("small") / "images"
    rng = np.random.default_rng(0)
    for c in range(10):
        (root / f"class{c}").mkdir(parents=True)
        for i in range(30):
            Image.fromarray(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)).save(root / f"class{c}" / f"{i}.png")
    return root


def test_every_training_command_takes_train_size_and_val_size(tmp_path):
    (tmp_path / "train.parquet").write_bytes(b"PAR1")
    (tmp_path / "test.parquet").write_bytes(b"PAR1")
    data = str(tmp_path / "train.parquet")
    sizes = ["--train-size", "120", "--val-size", "30"]
    search = search_cmd.build_search_config(_args(["search", "--data", data, *sizes]))
    _, train = train_cmd._settings(_args(["train", "--data", data, *sizes]))
    compare = compare_cmd.build_compare_config(_args(["compare", "--data", data, "--preset", "smoke", *sizes]))
    for config in (search.train, train, compare.train):
        assert (config.train_size, config.val_size) == (120, 30)


def test_the_size_flags_are_declared_once():
    from autoaug.launch.options import split_size_options

    declared = {o.flags for o in split_size_options()}
    for module in (search_cmd, train_cmd, compare_cmd):
        flags = {o.flags for o in module.OPTIONS if o.flags in declared}
        assert flags == {("--train-size",), ("--val-size",)}, module.__name__


def test_the_per_class_and_image_size_flags_are_declared_once():
    """``train`` and ``compare`` take --train-per-class and --image-size from the one option layer."""
    from autoaug.launch.options import image_size_option, per_class_option

    declared = {per_class_option().flags, image_size_option().flags}
    for module in (train_cmd, compare_cmd):
        assert {o.flags for o in module.OPTIONS if o.flags in declared} == declared, module.__name__


def test_a_split_too_big_for_the_data_names_the_sizes_and_flags_that_fit(small_imagefolder, tmp_path, capsys):
    code = cli.main(
        [
            "search",
            "--preset",
            "smoke",
            "--data",
            str(small_imagefolder),
            "--storage",
            str(tmp_path / "runs"),
            "--store",
            str(tmp_path / "store"),
        ]
    )
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1
    assert "exceeds the dataset's 300 images" in err
    assert "--train-size 240 --val-size 60" in err
    # The sizes it names do fit.
    from autoaug.search.records import describe_data

    config = search_cmd.build_search_config(
        _args(
            ["search", "--preset", "smoke", "--data", str(small_imagefolder), "--train-size", "240", "--val-size", "60"]
        )
    )
    describe_data(config.train)


def test_train_finds_the_test_split_next_to_the_training_data(tmp_path):
    (tmp_path / "train.parquet").write_bytes(b"PAR1")
    _, alone = train_cmd._settings(_args(["train", "--data", str(tmp_path / "train.parquet")]))
    assert alone.test_data is None
    (tmp_path / "test.parquet").write_bytes(b"PAR1")
    _, found = train_cmd._settings(_args(["train", "--data", str(tmp_path / "train.parquet")]))
    assert found.test_data == str(tmp_path / "test.parquet")
    _, folder = train_cmd._settings(_args(["train", "--data", str(tmp_path)]))
    assert folder.test_data == str(tmp_path)  # a folder with test.parquet: its test split
    _, given = train_cmd._settings(_args(["train", "--data", str(tmp_path), "--test-data", "cifar10:x"]))
    assert given.test_data == "cifar10:x"


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_atomic_writes_honour_the_umask(tmp_path, umask, mode):
    old = os.umask(umask)
    try:
        atomic_write_local(tmp_path / "f.json", b"{}")
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "f.json").st_mode) == mode
