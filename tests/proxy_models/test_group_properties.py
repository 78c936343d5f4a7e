"""Property-based tests of grouped splits: ``reduced_split(..., groups=)`` and
``stratified_folds(..., groups=)`` over random classes, group sizes, class imbalance and requests.

What a user relies on:

* no group ever has images on both sides of a split, or in two folds;
* an explicit size is met exactly (or the request is refused with a ``DatasetError``); a side
  asked for as "the rest" (``val_size=None``) holds every image of the groups on its side;
* no :class:`DataWarning` means every class has exactly its ungrouped counts (the floor or the
  ceiling of its proportional share, ``_joint_counts``); and the documented tolerance: with groups
  of one class, a class whose spare images (``n_c - t_c - v_c``) number at least its largest
  group always gets exactly those counts (``val_size=None``: when its validation share is at
  least its largest group, its training count is exact);
* folds: each class's counts in any two folds differ by at most its largest group (groups of one
  class); fold sizes by at most twice the largest group;
* same input and seed, same split; the fingerprint records the grouping, and a split drawn
  without groups has exactly the fingerprint it had before groups existed.
"""

from __future__ import annotations

import hashlib
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autoaug.core.errors import DataWarning
from autoaug.proxy_models.data import DatasetError
from autoaug.proxy_models.grouped_splits import grouping_fingerprint
from autoaug.proxy_models.splits import _joint_counts, reduced_split, stratified_folds

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def grouped_data(draw, *, mixed: bool | None = None):
    """(labels, groups, largest group per class): 1-8 classes of 1-10 groups of 1-15 images each
    (imbalanced at random); with ``mixed``, some groups then merged across classes."""
    num_classes = draw(st.integers(1, 8))
    group_sizes = [draw(st.lists(st.integers(1, 15), min_size=1, max_size=10)) for _ in range(num_classes)]
    labels, groups = [], []
    for c, sizes in enumerate(group_sizes):
        for size in sizes:
            groups += [len(groups) and groups[-1] + 1] * size
            labels += [c] * size
    labels, groups = np.asarray(labels, dtype=np.int64), np.asarray(groups, dtype=np.int64)
    if mixed if mixed is not None else draw(st.booleans()):
        merge = draw(st.lists(st.integers(0, int(groups.max())), max_size=6))
        for a, b in zip(merge[::2], merge[1::2]):
            groups[groups == a] = b
    codes = draw(st.lists(st.integers(-5, 10**6), min_size=num_classes, max_size=num_classes, unique=True))
    labels = np.asarray(codes, dtype=np.int64)[labels]  # any label values, as reduced_split allows
    perm = draw(st.permutations(range(len(labels))))
    return labels[list(perm)], groups[list(perm)]


def _draw(labels, groups, train, val, seed):
    """The split, or None when refused; the DataWarnings it gave."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            split = reduced_split(labels, train, val, seed=seed, groups=groups)
        except DatasetError:
            split = None
    assert all(issubclass(w.category, DataWarning) for w in caught), [str(w.message) for w in caught]
    assert all("\n" not in str(w.message) for w in caught)
    return split, caught


def _largest_group_per_class(labels, groups):
    out = {}
    for c in np.unique(labels):
        out[c] = int(np.bincount(groups[labels == c]).max())
    return out


@SETTINGS
@given(grouped_data(), st.data(), st.integers(0, 2**32 - 1))
def test_no_group_on_both_sides_and_explicit_sizes_are_exact(data, draw, seed):
    labels, groups = data
    n = len(labels)
    train = draw.draw(st.integers(0, n))
    val = draw.draw(st.one_of(st.none(), st.integers(0, n - train)))
    split, caught = _draw(labels, groups, train, val, seed)
    if split is None:
        return
    assert len(np.intersect1d(groups[split.train], groups[split.val])) == 0
    assert len(np.intersect1d(split.train, split.val)) == 0
    assert len(np.unique(split.train)) == len(split.train) and len(np.unique(split.val)) == len(split.val)
    if train:
        assert len(split.train) == train
    if val is not None:
        assert len(split.val) == val
    if val is None and train < n:  # validation: every image of the groups it has
        in_val = np.isin(groups, groups[split.val])
        assert np.array_equal(np.flatnonzero(in_val), split.val)
    if not train and val:  # training: every image of its groups
        in_train = np.isin(groups, groups[split.train])
        assert np.array_equal(np.flatnonzero(in_train), split.train)
    # Deterministic, and the grouping is part of the fingerprint.
    again, _ = _draw(labels, groups, train, val, seed)
    assert again.fingerprint == split.fingerprint
    assert np.array_equal(again.train, split.train) and np.array_equal(again.val, split.val)
    assert split.grouping == grouping_fingerprint(groups)
    assert split.fingerprint != _old_fingerprint(split)
    # No warning: every class has exactly its ungrouped counts.
    if not caught:
        classes, inverse = np.unique(labels, return_inverse=True)
        sizes = np.bincount(inverse)
        t_total = train or n - (val or 0)
        v_total = n - t_total if val is None else val
        t, v = _joint_counts(sizes, t_total, v_total)
        got_t = np.bincount(inverse[split.train], minlength=len(sizes))
        got_v = np.bincount(inverse[split.val], minlength=len(sizes))
        if train:
            assert got_t.tolist() == t
        if val is not None:
            assert got_v.tolist() == v


@SETTINGS
@given(grouped_data(mixed=False), st.data(), st.integers(0, 2**32 - 1))
def test_classes_with_enough_spare_images_get_exactly_their_ungrouped_counts(data, draw, seed):
    """The documented tolerance, groups of one class each."""
    labels, groups = data
    n = len(labels)
    largest = _largest_group_per_class(labels, groups)
    classes, inverse = np.unique(labels, return_inverse=True)
    sizes = np.bincount(inverse)
    train = draw.draw(st.integers(1, n))
    val = draw.draw(st.integers(0, n - train))
    t, v = _joint_counts(sizes, train, val)
    spare_enough = all(sizes[c] - t[c] - v[c] >= largest[classes[c]] for c in range(len(classes)))
    if spare_enough and val:
        split, caught = _draw(labels, groups, train, val, seed)
        assert split is not None and not caught
        assert np.bincount(inverse[split.train], minlength=len(sizes)).tolist() == t
        assert np.bincount(inverse[split.val], minlength=len(sizes)).tolist() == v
    # Validation = everything else: exact training counts when every class's validation share is
    # at least its largest group.
    t, v = _joint_counts(sizes, train, n - train)
    if train < n and all(v[c] >= largest[classes[c]] for c in range(len(classes))):
        split, caught = _draw(labels, groups, train, None, seed)
        assert split is not None and not caught
        assert np.bincount(inverse[split.train], minlength=len(sizes)).tolist() == t


def _old_fingerprint(split) -> str:
    """The fingerprint formula of splits drawn image by image (unchanged since before groups)."""
    h = hashlib.sha256()
    h.update(np.asarray(split.train, dtype="<i8").tobytes())
    h.update(b"|")
    h.update(np.asarray(split.val, dtype="<i8").tobytes())
    if split.dataset_fingerprint:
        h.update(split.dataset_fingerprint.encode())
    return h.hexdigest()


@SETTINGS
@given(grouped_data(), st.data(), st.integers(0, 2**32 - 1), st.sampled_from([None, "dataset-fp"]))
def test_without_groups_the_split_and_fingerprint_are_the_ungrouped_ones(data, draw, seed, dataset_fp):
    labels, _ = data
    n = len(labels)
    train = draw.draw(st.integers(1, n))
    val = draw.draw(st.one_of(st.none(), st.integers(0, n - train)))
    split = reduced_split(labels, train, val, seed=seed, dataset_fingerprint=dataset_fp)
    assert split.grouping is None and "grouping" not in split.to_dict()
    assert split.fingerprint == _old_fingerprint(split)


# Fingerprints computed before grouped splits existed (commit 5cb8976): they must never change.
GOLDEN = [
    (
        np.repeat(np.arange(10), 500),
        4000,
        1000,
        0,
        None,
        "5e2c5fef11492caa2102202599cce738eccb7335927286fb0539b07bb5cb4e7c",
    ),
    (
        np.repeat(np.arange(10), 500),
        4000,
        None,
        3,
        "abc",
        "1c84b77e30152afd68ce60f270edbc36894213281b96aa362e7d96f311f0305a",
    ),
    (
        np.random.default_rng(7).integers(0, 7, 333),
        100,
        50,
        11,
        None,
        "653de4f572fa6be75ed677cece2cf8c5218dbffcc8c9eabdd21b310cdfa23874",
    ),
]


@pytest.mark.parametrize("labels, train, val, seed, dataset_fp, expected", GOLDEN)
def test_ungrouped_fingerprints_are_the_ones_recorded_before(labels, train, val, seed, dataset_fp, expected):
    assert reduced_split(labels, train, val, seed=seed, dataset_fingerprint=dataset_fp).fingerprint == expected


def test_ungrouped_fold_fingerprints_are_the_ones_recorded_before():
    labels = np.repeat(np.arange(10), 500)
    folds = stratified_folds(reduced_split(labels, 4000, 1000, seed=0), labels, 5, seed=0)
    assert [f.fingerprint for f in folds[:2]] == [
        "39b64e553f6e8378e72f405b12821d32916bf91d442a5248d9f3b9d7815e4f4c",
        "a5a6a9c0980342db5fc02b7879b5c7c2451979219ad285ee4190442e546f3616",
    ]


def test_the_grouping_is_the_partition_not_the_keys():
    labels = np.repeat([0, 1], 6)
    ints = np.array([5, 5, 9, 9, 2, 2, 7, 7, 3, 3, 8, 8])
    names = np.array([f"g{k}" for k in ints])
    a = reduced_split(labels, 4, 4, seed=1, groups=ints)
    b = reduced_split(labels, 4, 4, seed=1, groups=names)
    assert a.fingerprint == b.fingerprint and a.grouping == grouping_fingerprint(ints)
    other = reduced_split(labels, 4, 4, seed=1, groups=np.arange(12))  # each image its own group
    assert other.grouping != a.grouping and other.fingerprint != a.fingerprint


# ----------------------------------------------------------------------------------------------
# Folds


@SETTINGS
@given(grouped_data(), st.data(), st.integers(0, 2**32 - 1))
def test_folds_keep_groups_whole_cover_the_split_and_are_stratified(data, draw, seed):
    labels, groups = data
    n = len(labels)
    train = draw.draw(st.integers(1, n))
    k = draw.draw(st.integers(2, 8))
    split, _ = _draw(labels, groups, train, 0, seed % 1000)
    assert split is not None  # nothing to leak into: never refused
    in_train = len(np.unique(groups[split.train]))
    if in_train < k:
        with pytest.raises(DatasetError, match=rf"cannot make {k} folds of a training split"):
            stratified_folds(split, labels, k, seed=seed, groups=groups)
        return
    folds = stratified_folds(split, labels, k, seed=seed, groups=groups)
    held = [f.val for f in folds]
    assert np.array_equal(np.sort(np.concatenate(held)), np.sort(split.train))
    for f in folds:
        assert len(f.val) >= 1
        assert np.array_equal(np.sort(np.concatenate([f.train, f.val])), np.sort(split.train))
        assert len(np.intersect1d(groups[f.train], groups[f.val])) == 0  # every group in one fold
        assert f.grouping == split.grouping
    largest = int(np.bincount(groups[split.train]).max())
    sizes = [len(h) for h in held]
    assert max(sizes) - min(sizes) <= 2 * largest, (sizes, largest)
    # Groups of one class: a class's counts in two folds differ by at most its largest group.
    single_class = all(
        len(np.unique(labels[split.train][groups[split.train] == g])) == 1 for g in np.unique(groups[split.train])
    )
    if single_class:
        for c in np.unique(labels[split.train]):
            rows = split.train[labels[split.train] == c]
            per_fold = [int(np.isin(h, rows).sum()) for h in held]
            assert max(per_fold) - min(per_fold) <= int(np.bincount(groups[rows]).max())
    again = stratified_folds(split, labels, k, seed=seed, groups=groups)
    assert [f.fingerprint for f in again] == [f.fingerprint for f in folds]


def test_folds_of_a_grouped_split_need_its_groups():
    labels = np.repeat(np.arange(2), 30)
    groups = np.arange(60) // 3
    split = reduced_split(labels, 30, 20, seed=0, groups=groups)
    with pytest.raises(DatasetError, match="drawn with groups: pass the same groups= to stratified_folds"):
        stratified_folds(split, labels, 3)
    with pytest.raises(DatasetError, match="groups given differ from the ones the split was drawn with"):
        stratified_folds(split, labels, 3, groups=np.arange(60) // 2)
    assert len(stratified_folds(split, labels, 3, groups=groups)) == 3
