r"""Group keys (``COLUMN`` / ``COLUMN:REGEX``) and the grouped split of real data.

A user gives ``--group-by track`` or ``--group-by 'source_path:Images/(\d+)/(\d+)_'`` and relies
on: a malformed spec, a missing column or a pattern that misses rows being one line naming the
spec, the bad value and what was expected, before anything trains; the groups being read
without decoding an image; ``TrainConfig.group_by`` giving the trainer a split with no group on
both sides; and GTSRB's tracks (30 near-identical frames of one sign) staying on one side.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from PIL import Image

from autoaug.core.errors import DataWarning, UserInputError
from autoaug.proxy_models.data import DatasetError, ImageDataset, open_dataset
from autoaug.proxy_models.groups import GroupSpec
from autoaug.proxy_models.splits import config_groups, config_split, reduced_split
from autoaug.proxy_models.train_config import TrainConfig

GTSRB_TRACK = r"source_path:Images/(\d+)/(\d+)_"


@pytest.fixture(scope="module")
def tracks(tmp_path_factory, write_tracks) -> Path:
    return write_tracks(tmp_path_factory.mktemp("tracks") / "train.parquet")


# ----------------------------------------------------------------------------------------------
# The spec


@pytest.mark.parametrize(
    "spec, column, pattern",
    [
        ("track", "track", None),
        (GTSRB_TRACK, "source_path", r"Images/(\d+)/(\d+)_"),
        ("source_path:a:b", "source_path", "a:b"),  # the pattern is everything after the first ':'
    ],
)
def test_spec_is_a_column_and_an_optional_pattern(spec, column, pattern):
    parsed = GroupSpec.parse(spec)
    assert (parsed.column, parsed.pattern) == (column, pattern) and parsed.text == spec


@pytest.mark.parametrize(
    "spec, message",
    [
        (
            "source_path:Images/(\\d+",
            re.escape(
                "group_by 'source_path:Images/(\\d+': the pattern 'Images/(\\d+' is not a "
                "valid regular expression (missing ), unterminated subpattern at position "
                "7); expected COLUMN or COLUMN:REGEX"
            ),
        ),
        ("", r"group_by is empty; expected COLUMN or COLUMN:REGEX, e\.g\. track or source_path:"),
        (":abc", r"group_by ':abc' names no column before ':'; expected COLUMN or COLUMN:REGEX"),
        ("track:", r"group_by 'track:' has an empty pattern after ':'; expected"),
        (3, r"group_by 3 is a int; expected COLUMN or COLUMN:REGEX"),
    ],
)
def test_a_bad_spec_is_one_line_naming_it_and_what_was_expected(spec, message):
    with pytest.raises(UserInputError, match=message) as info:
        GroupSpec.parse(spec)
    assert "\n" not in str(info.value)


def test_train_config_validates_group_by_when_built():
    assert TrainConfig(group_by="track").group_by == "track"
    # Unset, it is left out of the dict, so the records of ungrouped runs keep their digests.
    assert TrainConfig().group_by is None and "group_by" not in TrainConfig().to_dict()
    assert TrainConfig(group_by="track").to_dict()["group_by"] == "track"
    with pytest.raises(
        ValueError,
        match=r"^TrainConfig\.group_by 'track:x\(': the pattern 'x\(' is not a valid "
        r"regular expression",
    ):
        TrainConfig(group_by="track:x(")
    with pytest.raises(ValueError, match=r"TrainConfig\.group_by is empty"):
        TrainConfig.from_preset("smoke", group_by="")
    assert TrainConfig.from_dict(TrainConfig(group_by=GTSRB_TRACK).to_dict()).group_by == GTSRB_TRACK


def test_group_by_decides_whether_a_run_is_the_same_run():
    """A checkpoint or a compare record of another grouping is not resumed or reused; records
    written before the field existed count as ungrouped."""
    from autoaug.proxy_models.train_config import RESUMABLE_CHANGES

    old_record = {k: v for k, v in TrainConfig().to_dict().items() if k != "group_by"}
    assert TrainConfig().changed_fields(old_record, ignore=RESUMABLE_CHANGES) == []
    assert TrainConfig(group_by="track").changed_fields(old_record, ignore=RESUMABLE_CHANGES) == [
        ("group_by", None, "track")
    ]


# ----------------------------------------------------------------------------------------------
# Groups of a dataset


def test_parquet_groups_by_column_or_pattern_without_decoding(tracks, monkeypatch):
    ds = open_dataset(tracks)
    monkeypatch.setattr(ImageDataset, "image", lambda *a, **k: pytest.fail("an image was decoded"))
    by_track = ds.groups("track")
    assert by_track.dtype == np.int64 and by_track.max() + 1 == 24
    assert np.array_equal(by_track, np.repeat(np.arange(24), 5))  # numbered in order of first appearance
    assert np.array_equal(ds.groups("session"), by_track)
    assert np.array_equal(ds.groups(GTSRB_TRACK), by_track)  # class folder + track
    assert ds.groups(r"source_path:Images/(\d+)/").max() + 1 == 4  # one group per class folder
    assert ds.groups(r"source_path:_\d+").max() + 1 == 5  # no capture group: the whole match (the frame)


@pytest.mark.parametrize(
    "spec, message",
    [
        (
            "tracks",
            r"train\.parquet: group_by 'tracks': no column 'tracks'; the file has columns \['image', 'label', "
            r"'track', .*\(expected a column of group keys",
        ),
        ("label", r"group_by 'label': 'label' is the class label column, so every class would be one group"),
        ("score", r"group_by 'score': column 'score' has type float; expected integer or text group keys"),
        (
            "track:1",
            r"group_by 'track:1': column 'track' has type int32; a pattern searches text: group by 'track' alone",
        ),
        (
            r"source_path:Images/000(0[01])/",
            r"group_by 'source_path:Images/000\(0\[01\]\)/': the pattern matches 60 of "
            r"the 120 'source_path' values; 60 do not, e\.g\. row 60 "
            r"'GTSRB/Final_Training/Images/00002/00000_00000\.ppm'; expected a pattern "
            r"that matches every row",
        ),
        (
            r"source_path:Test/(\d+)",
            r"the pattern matches none of the 120 'source_path' values; 120 do not, e\.g\. row 0 "
            r"'GTSRB/Final_Training/Images/00000/00000_00000\.ppm'",
        ),
    ],
)
def test_group_key_problems_with_the_data_are_one_line(tracks, spec, message):
    ds = open_dataset(tracks)
    with pytest.raises(DatasetError, match=message) as info:
        ds.groups(spec)
    assert "\n" not in str(info.value)


def test_a_null_group_names_the_row(tmp_path, write_tracks):
    track = pa.array([None if i == 7 else i // 5 for i in range(120)], pa.int64())
    ds = open_dataset(write_tracks(tmp_path / "train.parquet", extra={"track": track}))
    with pytest.raises(
        DatasetError,
        match=r"train\.parquet row 7 \(.*00001_00002\.ppm\): group_by 'track': the "
        r"'track' value is null; every row needs a group",
    ):
        ds.groups("track")


def test_imagefolder_groups_by_file_path(tmp_path):
    for c in range(2):
        for t in range(3):
            for f in range(2):
                folder = tmp_path / "tree" / f"class{c}"
                folder.mkdir(parents=True, exist_ok=True)
                Image.fromarray(np.zeros((4, 4, 3), np.uint8)).save(folder / f"{t:05d}_{f:05d}.png")
    ds = open_dataset(tmp_path / "tree")
    assert np.array_equal(ds.groups(r"source_path:^(\w+)/(\d+)_"), np.repeat(np.arange(6), 2))
    with pytest.raises(
        DatasetError,
        match=r"group_by 'track': an ImageFolder tree has no column 'track'; group its "
        r"images by their paths with source_path:REGEX \(paths relative to the "
        r"root, e\.g\. 'class0/00000_00000\.png'\)",
    ):
        ds.groups("track")


def test_a_dataset_without_columns_or_paths_says_so():
    class Arrays(ImageDataset):
        source = "cifar10:/data"
        classes = ("a", "b")
        labels = np.array([0, 1])

    with pytest.raises(
        DatasetError,
        match=r"cifar10:/data: group_by 'track': this dataset has no columns or file "
        r"paths to group by",
    ):
        Arrays().groups("track")


# ----------------------------------------------------------------------------------------------
# The split a TrainConfig describes


def test_config_split_is_the_grouped_split_and_names_the_key(tracks, write_tracks):
    ds = open_dataset(tracks)
    config = TrainConfig(data=str(tracks), train_size=40, val_size=40, group_by="track")
    split = config_split(ds, config)
    assert split.grouping is not None
    assert split.fingerprint == reduced_split(ds.labels, 40, 40, seed=0, groups=ds.groups("track")).fingerprint
    assert not set(ds.groups("track")[split.train]) & set(ds.groups("track")[split.val])
    assert config_groups(ds, TrainConfig()) is None
    ungrouped = config_split(ds, TrainConfig(data=str(tracks), train_size=40, val_size=40))
    assert ungrouped.grouping is None
    assert ungrouped.fingerprint == reduced_split(ds.labels, 40, 40, seed=0).fingerprint
    # Errors and warnings name the group key.
    with pytest.raises(
        DatasetError,
        match=r"^group_by 'source_path:Images/\(\\d\+\)/': cannot stratify a grouped "
        r"split by class: 4 of the 4 classes cannot get their counts",
    ):
        config_split(ds, TrainConfig(train_size=40, val_size=40, group_by=r"source_path:Images/(\d+)/"))
    with pytest.raises(
        DatasetError,
        match=r"^group_by 'track': cannot draw train_size 62 \+ val_size 57 with each "
        r"group on one side: .*ask for smaller sizes, or leave val_size unset",
    ):
        config_split(ds, TrainConfig(train_size=62, val_size=57, group_by="track"))  # tracks of 5
    merged = pa.array([0 if i < 30 else i // 5 for i in range(120)], pa.int64())  # class 0: one track of 30
    one = open_dataset(write_tracks(tracks.parent / "one.parquet", extra={"track": merged}))
    with pytest.warns(
        DataWarning,
        match=r"^group_by 'track': grouped split: 1 of the 4 classes cannot get their "
        r"counts with each group on one side: label 0 \(30 images in 1 group\): 0 of "
        r"10 validation images; 10 validation images come from other classes",
    ):
        config_split(one, TrainConfig(train_size=40, val_size=40, group_by="track"))


def test_gtsrb_grouped_split_keeps_every_track_on_one_side(gtsrb_train):
    ds = open_dataset(gtsrb_train)
    tracks = ds.groups(GTSRB_TRACK)
    assert tracks.max() + 1 == 1307
    with warnings.catch_warnings():
        warnings.simplefilter("error", DataWarning)  # exactly stratified: no warning
        split = config_split(
            ds, TrainConfig(data=str(gtsrb_train), train_size=1000, val_size=1000, group_by=GTSRB_TRACK)
        )
    assert len(split.train) == 1000 and len(split.val) == 1000
    assert not np.isin(tracks[split.val], tracks[split.train]).any()
    ungrouped = reduced_split(ds.labels, 1000, 1000, seed=0)
    assert np.array_equal(np.bincount(ds.labels[split.train]), np.bincount(ds.labels[ungrouped.train]))
    assert np.array_equal(np.bincount(ds.labels[split.val]), np.bincount(ds.labels[ungrouped.val]))
