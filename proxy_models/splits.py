"""AutoAugment's reduced splits and their folds: stratified, seeded, disjoint index sets into one
dataset (:class:`Split`, :func:`reduced_split`, :func:`stratified_folds`), optionally keeping
groups of related images (frames of one object, photos of one patient) on one side
(``groups=``; the group key of a dataset: :meth:`autoaug.proxy_models.data.ImageDataset.groups`).
:func:`config_split` and :func:`config_groups` are the split and the groups a
:class:`autoaug.proxy_models.train.TrainConfig` describes: what ``train`` trains on.

Grouped splits and folds are drawn by :mod:`autoaug.proxy_models.grouped_splits`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from autoaug.core.errors import DataWarning
from autoaug.core.values import short_repr
from autoaug.proxy_models.data import DatasetError
from autoaug.proxy_models.grouped_splits import canonical_groups, grouped_folds, grouped_split, grouping_fingerprint


@dataclasses.dataclass(frozen=True)
class Split:
    """Disjoint, stratified, seeded train/validation indices into one dataset."""

    train: np.ndarray
    val: np.ndarray
    seed: int
    dataset_fingerprint: str | None = None
    #: :func:`~autoaug.proxy_models.grouped_splits.grouping_fingerprint` of the groups the split was drawn with; None: drawn image by image.
    grouping: str | None = None

    @property
    def fingerprint(self) -> str:
        """sha256 over the indices (and the dataset fingerprint when known, and the grouping of a
        grouped split): what a search result records to say exactly what it trained and
        validated on. A split drawn without groups has the fingerprint it always had."""
        h = hashlib.sha256()
        h.update(np.asarray(self.train, dtype="<i8").tobytes())
        h.update(b"|")
        h.update(np.asarray(self.val, dtype="<i8").tobytes())
        if self.dataset_fingerprint:
            h.update(self.dataset_fingerprint.encode())
        if self.grouping is not None:
            h.update(b"|groups:" + self.grouping.encode())
        return h.hexdigest()

    def to_dict(self, include_indices: bool = False) -> dict:
        d = {
            "seed": self.seed,
            "train_size": int(len(self.train)),
            "val_size": int(len(self.val)),
            "fingerprint": self.fingerprint,
            "dataset_fingerprint": self.dataset_fingerprint,
        }
        if self.grouping is not None:
            d["grouping"] = self.grouping
        if include_indices:
            d["train_indices"] = self.train.tolist()
            d["val_indices"] = self.val.tolist()
        return d


def _joint_counts(class_sizes: Sequence[int], train_total: int, val_total: int) -> tuple[list[int], list[int]]:
    """Per-class train and validation counts, allocated jointly.

    Class ``c`` of ``n_c`` images (``N`` in all) gets ``t_c`` train and ``v_c`` validation images
    with ``t_c`` the floor or the ceiling of its proportional share ``train_total * n_c / N``
    (likewise ``v_c``), the totals exact, and ``t_c + v_c <= n_c``. Such an allocation exists
    whenever ``train_total + val_total <= N`` (rounding the table of shares ``(train, val, rest)``
    per class preserving its integer row and column sums, Bacharach 1966), so no request that
    fits the data is refused.

    Largest remainder on both at once: every class starts at its floors; the round-ups ("units":
    a class's train or validation share rounded up) are taken in order of decreasing remainder
    (ties: train before validation, then lower class index), each one only when the rest of the
    allocation can still be completed. Completion is decided exactly and in O(1): the round-ups
    still needed form a bipartite b-matching with two sinks (train, validation), and a class
    that can take one more unit of either but not both competes for it. When rounding train and
    validation independently (the earlier behaviour) fits every class, it is what this returns,
    so those splits and their fingerprints are unchanged.

    Shares, floors and feasibility in integers; the order of the round-ups by the float64
    remainders the earlier rounding used (IEEE arithmetic): the same counts on every machine.
    """
    sizes = [int(x) for x in class_sizes]
    n = sum(sizes)
    t_floor = [x * train_total // n for x in sizes]
    v_floor = [x * val_total // n for x in sizes]
    t_rem = [x * train_total % n for x in sizes]  # remainders as numerators over n
    v_rem = [x * val_total % n for x in sizes]
    need = [train_total - sum(t_floor), val_total - sum(v_floor)]
    cap = [x - t - v for x, t, v in zip(sizes, t_floor, v_floor)]  # round-ups class c can still take
    open_ = [[r > 0 for r in t_rem], [r > 0 for r in v_rem]]  # share not yet rounded up

    def kind(c: int) -> tuple[int, int, int]:
        """(train-only, validation-only, competing) contribution of class ``c``."""
        t_ok = open_[0][c] and cap[c] >= 1
        v_ok = open_[1][c] and cap[c] >= 1
        competing = t_ok and v_ok and cap[c] == 1
        return (int(t_ok and not competing), int(v_ok and not competing), int(competing))

    kinds = [kind(c) for c in range(len(sizes))]
    avail = [sum(k[0] for k in kinds), sum(k[1] for k in kinds), sum(k[2] for k in kinds)]

    def completable(need_t: int, need_v: int, a_t: int, a_v: int, shared: int) -> bool:
        return need_t <= a_t + shared and need_v <= a_v + shared and need_t + need_v <= a_t + a_v + shared

    # Order of the round-ups: the remainder as the earlier independent rounding computed it (float64,
    # the same on every machine), so that exact ties are broken as they were and splits that
    # worked before keep their indices; the integers above decide which round-ups exist.
    def remainders(total: int) -> list[float]:
        exact = np.asarray(sizes, dtype=np.int64) / n * total
        return (exact - np.floor(exact)).tolist()

    t_key, v_key = remainders(train_total), remainders(val_total)
    units = [(-t_key[c], 0, c) for c in range(len(sizes)) if t_rem[c]]
    units += [(-v_key[c], 1, c) for c in range(len(sizes)) if v_rem[c]]
    units.sort()
    for _, col, c in units:
        if need[col] == 0 or cap[c] == 0:
            continue
        old = kinds[c]
        open_[col][c] = False
        cap[c] -= 1
        new = kind(c)
        trial = [avail[i] - old[i] + new[i] for i in range(3)]
        left = [need[0] - (col == 0), need[1] - (col == 1)]
        if completable(left[0], left[1], *trial):
            kinds[c], avail, need = new, trial, left
        else:
            open_[col][c] = True
            cap[c] += 1
    if need != [0, 0]:  # impossible when train_total + val_total <= n (see above)
        raise AssertionError(
            f"joint split allocation failed for sizes {sizes[:10]}..., train {train_total}, val {val_total}"
        )
    train_counts = [f + (not o and r > 0) for f, o, r in zip(t_floor, open_[0], t_rem)]
    val_counts = [f + (not o and r > 0) for f, o, r in zip(v_floor, open_[1], v_rem)]
    return train_counts, val_counts


def _fitting_split(n: int, train_size: int, val_size: int) -> str:
    """The largest sizes in the asked proportion that fit ``n`` images, and the flags that ask for
    them (the same ``--train-size`` / ``--val-size`` on search, train and compare)."""
    if train_size and val_size:
        train = max(1, train_size * n // (train_size + val_size))
        val = min(val_size * n // (train_size + val_size), n - train)
        return (
            f"the largest split in the same proportion is train_size {train} + val_size {val}: pass "
            f"--train-size {train} --val-size {val} (or set train_size/val_size in the config)"
        )
    if train_size:
        return f"train_size {n} at most fits: pass --train-size {n} or smaller (or set train_size in the config)"
    return (
        f"val_size {n - 1} at most fits (one training image must remain): pass --val-size {n - 1} or smaller "
        "(or set val_size in the config)"
    )


def reduced_split(
    labels: Sequence[int] | np.ndarray,
    train_size: int | None = 4000,
    val_size: int | None = None,
    seed: int = 0,
    *,
    dataset_fingerprint: str | None = None,
    groups: Sequence[Any] | np.ndarray | None = None,
) -> Split:
    """AutoAugment's reduced split: a stratified, seeded subset of ``train_size`` images (4,000 =
    400 per class on CIFAR-10) and a disjoint stratified validation subset of ``val_size`` images
    (``None``: every remaining image, as in the paper). ``train_size`` ``None``/0 takes every image
    not used for validation. Same labels + seed -> same indices on any machine (numpy PCG64).

    Train and validation counts are allocated per class jointly (:func:`_joint_counts`): each is
    the floor or the ceiling of the class's proportional share and no class gives more images than
    it has, so every request with ``train_size + val_size <= len(labels)`` that leaves at least one
    training image is accepted.

    ``groups`` (one key per image: ints or strings, e.g. ``ds.groups("track")``): no group has
    images on both sides (see :func:`autoaug.proxy_models.grouped_splits.grouped_split` for the allocation and its tolerance). An
    explicit size is then met exactly or refused; a side whose size is ``None`` (``val_size``
    None, ``train_size`` None/0) takes every image of the groups on its side, i.e. every image
    whose group has none on the other side. The split's :attr:`Split.grouping` and so its
    fingerprint record the grouping; without ``groups`` nothing changes."""
    labels = np.asarray(labels, dtype=np.int64)
    n = len(labels)
    if n == 0:
        raise DatasetError("cannot split an empty dataset")
    classes, inverse = np.unique(labels, return_inverse=True)
    sizes = np.bincount(inverse)
    for name, value in (("train_size", train_size), ("val_size", val_size)):
        if value is not None and (not isinstance(value, (int, np.integer)) or value < 0):
            raise DatasetError(f"{name} must be a non-negative integer or None, got {short_repr(value)}")
    gid = None if groups is None else canonical_groups(groups, n)
    want_train = int(train_size or 0)
    if want_train + int(val_size or 0) > n:
        asked = f"train_size {want_train}" + (f" + val_size {val_size}" if val_size else "")
        raise DatasetError(
            f"{asked} exceeds the dataset's {n} images; {_fitting_split(n, want_train, int(val_size or 0))}"
        )
    want_val = int(val_size) if val_size is not None else n - want_train
    if not want_train:
        want_train = n - want_val
    if want_train <= 0:
        raise DatasetError(f"the split leaves no training images (dataset of {n}, val_size {want_val})")
    grouping = None if gid is None else grouping_fingerprint(gid)
    if gid is not None and want_val:
        train, val = grouped_split(
            classes,
            inverse,
            sizes,
            gid,
            (want_train, want_val),
            (not train_size, val_size is None),
            seed,
            _joint_counts(sizes, want_train, want_val),
        )
        return Split(train=train, val=val, seed=seed, dataset_fingerprint=dataset_fingerprint, grouping=grouping)
    # Image by image (with groups but no validation images there is nothing a group could leak
    # into: the same draw).
    rng = np.random.default_rng(seed)
    train_counts, val_counts = _joint_counts(sizes, want_train, want_val)
    train_parts, val_parts = [], []
    for c in range(len(classes)):
        members = np.flatnonzero(inverse == c)
        perm = rng.permutation(members)
        train_parts.append(perm[: train_counts[c]])
        val_parts.append(perm[train_counts[c] : train_counts[c] + val_counts[c]])
    train = np.sort(np.concatenate(train_parts))
    val = np.sort(np.concatenate(val_parts))
    return Split(train=train, val=val, seed=seed, dataset_fingerprint=dataset_fingerprint, grouping=grouping)


def stratified_folds(
    split: Split,
    labels: Sequence[int] | np.ndarray,
    k: int = 5,
    seed: int = 0,
    *,
    groups: Sequence[Any] | np.ndarray | None = None,
) -> list[Split]:
    """``k`` stratified, seeded folds of ``split.train`` (Fast AutoAugment's K-fold split of the
    reduced training set): fold ``i`` is a :class:`Split` whose ``val`` is the ``i``-th held-out
    part and whose ``train`` is every other image of ``split.train``.

    The held-out parts are disjoint and together are exactly ``split.train``; every class is
    spread over the parts as evenly as possible (a class of ``n_c`` images gives each part the
    floor or the ceiling of ``n_c / k``), and part sizes differ by at most one. ``labels`` are
    the dataset's labels (indexed by the split's indices). Same split, labels and seed -> same
    folds on any machine (numpy PCG64).

    ``groups`` (the dataset's group keys, indexed like ``labels``; the same array the split was
    drawn with): every group of ``split.train`` lies in one part. Groups are dealt largest first
    (equal sizes in seeded order), each to the part holding the fewest images of its class (several
    classes: the least summed share of theirs), then the part with the fewest images. For groups
    of one class, a class's counts in any two parts then differ by at most its largest group (in
    ``split.train``); part sizes are not bounded as tightly (measured in
    ``tests/proxy_models/test_group_properties.py``). A split drawn with groups needs them here
    (and the same ones): folds drawn image by image would put a group in several parts."""
    if not isinstance(k, (int, np.integer)) or isinstance(k, bool) or k < 2:
        raise DatasetError(f"folds must be an integer >= 2, got {short_repr(k)}")
    members = np.asarray(split.train, dtype=np.int64)
    if len(members) < k:
        raise DatasetError(f"cannot make {k} folds of a training split of {len(members)} images")
    labels = np.asarray(labels, dtype=np.int64)
    if groups is not None:
        gid = canonical_groups(groups, len(labels))
        grouping = grouping_fingerprint(gid)
        if split.grouping is not None and split.grouping != grouping:
            raise DatasetError(
                f"the groups given differ from the ones the split was drawn with (grouping "
                f"{grouping[:12]} vs {split.grouping[:12]}); pass the same groups"
            )
        return [
            Split(
                train=train, val=val, seed=split.seed, dataset_fingerprint=split.dataset_fingerprint, grouping=grouping
            )
            for train, val in grouped_folds(members, labels, int(k), seed, gid)
        ]
    if split.grouping is not None:
        raise DatasetError(
            "the split was drawn with groups: pass the same groups= to stratified_folds, or folds "
            "would put one group in several parts"
        )
    classes, inverse = np.unique(labels[members], return_inverse=True)
    rng = np.random.default_rng([seed, k])
    # Each class's members in random order, classes one after another; position i goes to part
    # i mod k. A class of n_c consecutive positions visits every part floor(n_c/k) or ceil(n_c/k)
    # times, and the parts' totals differ by at most one.
    order = np.concatenate([rng.permutation(members[inverse == c]) for c in range(len(classes))])
    part = np.arange(len(order)) % k
    folds = []
    for i in range(int(k)):
        held = np.sort(order[part == i])
        rest = np.sort(order[part != i])
        folds.append(Split(train=rest, val=held, seed=split.seed, dataset_fingerprint=split.dataset_fingerprint))
    return folds


# ----------------------------------------------------------------------------------------------
# The split a training configuration describes


def config_groups(ds: Any, config: Any) -> np.ndarray | None:
    """The group ids of dataset ``ds`` by ``config.group_by`` (a
    :class:`autoaug.proxy_models.train.TrainConfig`), or None when it groups nothing: what
    :func:`reduced_split` and :func:`stratified_folds` take as ``groups=``."""
    spec = getattr(config, "group_by", None)
    return None if spec is None else ds.groups(spec)


_CONFIG = object()


def config_split(ds: Any, config: Any, *, val_size: Any = _CONFIG, dataset_fingerprint: str | None = None) -> Split:
    """The reduced split ``config`` (a :class:`autoaug.proxy_models.train.TrainConfig`) describes
    on dataset ``ds`` -- ``train_size``, ``val_size`` (or the ``val_size`` given here),
    ``split_seed``, ``group_by`` --, exactly what :func:`autoaug.proxy_models.train.train` trains
    and validates on. Errors and warnings of a grouped split name the group key."""
    groups = config_groups(ds, config)
    kwargs = dict(
        train_size=config.train_size or None,
        val_size=config.val_size if val_size is _CONFIG else val_size,
        seed=config.split_seed,
        dataset_fingerprint=dataset_fingerprint,
        groups=groups,
    )
    if groups is None:
        split = reduced_split(ds.labels, **kwargs)
        check_classes(ds, split)
        return split
    from autoaug.proxy_models.groups import GroupSpec

    prefix = f"group_by {GroupSpec.parse(config.group_by).quoted}: "
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", DataWarning)
        try:
            split = reduced_split(ds.labels, **kwargs)
        except DatasetError as exc:
            raise DatasetError(prefix + str(exc)) from None
    explained = False
    for w in caught:
        if issubclass(w.category, DataWarning):
            warnings.warn(prefix + str(w.message), w.category, stacklevel=2)
            explained = True
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    # The grouped split's warning already names the classes whose counts it could not meet: the
    # class checks' own warnings would say it a second time (their error still applies).
    check_classes(ds, split, warn=not explained)
    return split


def _class_list(ds: Any, classes: np.ndarray, counts: np.ndarray, limit: int = 5) -> str:
    names = list(getattr(ds, "classes", ()))
    shown = [
        f"{short_repr(names[c]) if c < len(names) else c} ({int(counts[c]):,} image{'s' if counts[c] != 1 else ''} "
        "in the data)"
        for c in classes[:limit]
    ]
    return ", ".join(shown) + (f", ... ({len(classes):,} in all)" if len(classes) > limit else "")


def check_classes(ds: Any, split: Split, *, warn: bool = True) -> None:
    """The classes a split gives the trainer, checked before any work: fewer than 2 classes in
    training is a :class:`DatasetError` (a classifier of one class learns nothing and scores 100%);
    a class of the data with no training image, or validation without a class that training has,
    is a :class:`DataWarning` (the model never learns that class / its accuracy is not measured),
    each one line with the counts. Silently training on such a split is what this prevents.
    ``warn=False``: the error only (a caller that already warned about these classes)."""
    labels = np.asarray(ds.labels)
    num_classes = max(int(getattr(ds, "num_classes", 0) or 0), int(labels.max(initial=-1)) + 1)
    in_data = np.bincount(labels, minlength=num_classes)
    in_train = np.bincount(labels[split.train], minlength=num_classes)
    trained = np.flatnonzero(in_train)
    if len(trained) < 2:
        present = np.flatnonzero(in_data)
        what = (
            f"all {len(split.train):,} training images are of one class, {_class_list(ds, trained, in_data)}"
            if len(trained) == 1
            else "there are no training images"
        )
        raise DatasetError(
            f"{ds.source}: {what}; the data hold {len(present):,} class{'es' if len(present) != 1 else ''} "
            f"({num_classes:,} declared); expected at least 2 classes in training (a classifier of one class learns "
            "nothing)"
        )
    if not warn:
        return
    missing = np.flatnonzero(in_train == 0)
    if len(missing):
        warnings.warn(
            f"{ds.source}: {len(missing):,} of {num_classes:,} classes have no training image in the split "
            f"({len(split.train):,} training images): {_class_list(ds, missing, in_data)}; the model never learns "
            "them (a larger train_size or --train-per-class gives every class images)",
            DataWarning,
            stacklevel=3,
        )
    if len(split.val):
        in_val = np.bincount(labels[split.val], minlength=num_classes)
        unmeasured = np.flatnonzero((in_train > 0) & (in_val == 0))
        if len(unmeasured):
            warnings.warn(
                f"{ds.source}: validation ({len(split.val):,} images) has no image of {len(unmeasured):,} of the "
                f"{len(trained):,} classes in training: {_class_list(ds, unmeasured, in_data)}; their accuracy is "
                "not measured (a larger val_size covers them)",
                DataWarning,
                stacklevel=3,
            )
