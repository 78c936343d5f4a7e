"""Property-based tests of ``stratified_folds``: the K held-out parts of the reduced training split
are disjoint, cover it exactly, are stratified (each class gives each part the floor or the
ceiling of ``n_c / K``), have sizes within one of each other, and each fold trains on exactly the
images it does not hold out. Same input and seed, same folds."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autoaug.proxy_models.data import DatasetError
from autoaug.proxy_models.splits import reduced_split, stratified_folds

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def fold_requests(draw):
    sizes = draw(st.lists(st.integers(1, 50), min_size=1, max_size=12))
    codes = draw(st.lists(st.integers(-3, 10**6), min_size=len(sizes), max_size=len(sizes), unique=True))
    labels = np.repeat(np.asarray(codes, dtype=np.int64), sizes)
    draw(st.randoms(use_true_random=False)).shuffle(perm := list(range(len(labels))))
    labels = labels[perm]
    n = len(labels)
    train = draw(st.integers(1, n))
    k = draw(st.integers(2, 10))
    return labels, train, k


@SETTINGS
@given(fold_requests(), st.integers(0, 2**32 - 1))
def test_folds_are_disjoint_cover_the_split_and_are_stratified(request, seed):
    labels, train_size, k = request
    split = reduced_split(labels, train_size, 0, seed=seed % 1000)
    if len(split.train) < k:
        with pytest.raises(DatasetError, match="folds"):
            stratified_folds(split, labels, k, seed=seed)
        return
    folds = stratified_folds(split, labels, k, seed=seed)
    assert len(folds) == k
    held = [f.val for f in folds]
    # Disjoint and covering: the held-out parts are a partition of split.train.
    together = np.concatenate(held)
    assert len(together) == len(split.train)
    assert np.array_equal(np.sort(together), np.sort(split.train))
    # Each fold trains on the rest of the split, nothing else.
    for f in folds:
        assert len(np.intersect1d(f.train, f.val)) == 0
        assert np.array_equal(np.sort(np.concatenate([f.train, f.val])), np.sort(split.train))
    # Sizes within one of each other; every part non-empty.
    sizes = [len(h) for h in held]
    assert max(sizes) - min(sizes) <= 1 and min(sizes) >= 1
    # Stratified: class c of n_c images gives each part floor(n_c/k) or ceil(n_c/k).
    train_labels = labels[split.train]
    for c in np.unique(train_labels):
        n_c = int(np.sum(train_labels == c))
        lo, hi = n_c // k, -(-n_c // k)
        for h in held:
            assert lo <= int(np.sum(labels[h] == c)) <= hi
    # Deterministic; another seed reshuffles (when there is anything to shuffle).
    again = stratified_folds(split, labels, k, seed=seed)
    assert [f.fingerprint for f in again] == [f.fingerprint for f in folds]


@pytest.mark.parametrize("k", [0, 1, -2, 2.5, True, "5"])
def test_bad_fold_count_is_one_clear_error(k):
    labels = np.repeat(np.arange(3), 10)
    split = reduced_split(labels, 20, 0, seed=0)
    with pytest.raises(DatasetError, match=r"folds must be an integer >= 2"):
        stratified_folds(split, labels, k)


def test_cifar_like_split_gives_equal_class_counts():
    labels = np.repeat(np.arange(10), 500)
    split = reduced_split(labels, 4000, 0, seed=0)
    folds = stratified_folds(split, labels, 5, seed=0)
    for f in folds:
        assert len(f.val) == 800 and len(f.train) == 3200
        assert np.all(np.bincount(labels[f.val], minlength=10) == 80)
    other = stratified_folds(split, labels, 5, seed=1)
    assert [f.fingerprint for f in other] != [f.fingerprint for f in folds]
