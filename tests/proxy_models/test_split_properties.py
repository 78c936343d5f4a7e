"""Property-based tests of ``reduced_split`` over random class counts, class sizes and requests.

For every request that fits the data (``train_size >= 1`` after defaults and ``train_size +
val_size <= N``): the split is accepted, has exactly the requested sizes, train and validation are
disjoint, no class gives more images than it has, and every class's train (validation) count is
within 1 of its proportional share (the floor or the ceiling of ``size * n_c / N``). Requests that
do not fit are refused with :class:`DatasetError`. When rounding train and validation independently
(the allocation before joint rounding) fits every class, the split is exactly that one, so the
splits (and fingerprints) recorded before joint rounding are unchanged.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autoaug.proxy_models.data import DatasetError
from autoaug.proxy_models.splits import _joint_counts, reduced_split

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def requests(draw):
    """(labels, train_size, val_size) with train_size in 0..N and val_size None or 0..N."""
    sizes = draw(st.lists(st.integers(1, 60), min_size=1, max_size=25))
    # Class labels need not be 0..K-1 here: reduced_split works on whatever labels it is given.
    codes = draw(st.lists(st.integers(-5, 10**6), min_size=len(sizes), max_size=len(sizes), unique=True))
    labels = np.repeat(np.asarray(codes, dtype=np.int64), sizes)
    order = draw(st.randoms(use_true_random=False))
    perm = list(range(len(labels)))
    order.shuffle(perm)
    labels = labels[perm]
    n = len(labels)
    train = draw(st.integers(0, n))
    val = draw(st.one_of(st.none(), st.integers(0, n)))
    return labels, train, val


def _independent_counts(sizes: np.ndarray, total: int) -> np.ndarray:
    """The earlier allocation: largest remainder for one subset on its own (float64 remainders,
    ties by class index)."""
    exact = sizes / sizes.sum() * total
    counts = np.floor(exact).astype(np.int64)
    order = np.lexsort((np.arange(len(exact)), -(exact - counts)))
    counts[order[: total - counts.sum()]] += 1
    return counts


def _resolved(n: int, train: int, val: int | None) -> tuple[int, int] | None:
    """(train, val) the request means, or None when it does not fit the data."""
    if train + (val or 0) > n:
        return None
    v = n - train if val is None else val
    t = train or n - v
    return (t, v) if t >= 1 else None


@SETTINGS
@given(requests(), st.integers(0, 2**32 - 1))
def test_never_refuses_a_request_that_fits_and_stays_stratified(request, seed):
    labels, train, val = request
    n = len(labels)
    want = _resolved(n, train, val)
    if want is None:
        with pytest.raises(DatasetError):
            reduced_split(labels, train, val, seed=seed)
        return
    split = reduced_split(labels, train, val, seed=seed)
    t, v = want
    assert len(split.train) == t and len(split.val) == v
    assert len(np.unique(split.train)) == t and len(np.unique(split.val)) == v
    assert len(np.intersect1d(split.train, split.val)) == 0
    assert split.train.min(initial=0) >= 0 and split.train.max(initial=0) < n
    assert split.val.min(initial=0) >= 0 and split.val.max(initial=0) < n

    classes, inverse = np.unique(labels, return_inverse=True)
    sizes = np.bincount(inverse)
    per_class_train = np.bincount(inverse[split.train], minlength=len(classes))
    per_class_val = np.bincount(inverse[split.val], minlength=len(classes))
    assert np.all(per_class_train + per_class_val <= sizes)  # never exceeds a class
    # Within 1 of the proportional share: floor or ceiling (exact integer arithmetic).
    for counts, total in ((per_class_train, t), (per_class_val, v)):
        for c, n_c in enumerate(sizes.tolist()):
            lo, rem = divmod(n_c * total, n)
            assert counts[c] in ((lo,) if rem == 0 else (lo, lo + 1)), (c, counts[c], n_c * total / n)

    # Deterministic: same labels and seed, same split.
    again = reduced_split(labels, train, val, seed=seed)
    assert again.fingerprint == split.fingerprint

    # Where the independent rounding fits every class, the joint one is exactly it.
    ind_t, ind_v = _independent_counts(sizes, t), _independent_counts(sizes, v)
    if np.all(ind_t + ind_v <= sizes):
        assert np.array_equal(per_class_train, ind_t) and np.array_equal(per_class_val, ind_v)


@SETTINGS
@given(st.lists(st.integers(1, 10**6), min_size=1, max_size=40), st.data())
def test_joint_counts_on_large_classes(sizes, data):
    """Class sizes up to 10^6 (no labels materialised): totals exact, floor/ceiling, never over."""
    n = sum(sizes)
    train = data.draw(st.integers(0, n))
    val = data.draw(st.integers(0, n - train))
    t, v = _joint_counts(sizes, train, val)
    assert sum(t) == train and sum(v) == val
    for n_c, t_c, v_c in zip(sizes, t, v):
        assert t_c + v_c <= n_c
        assert n_c * train // n <= t_c <= -(-n_c * train // n)
        assert n_c * val // n <= v_c <= -(-n_c * val // n)
