"""AutoAugment's reduced splits and their folds: stratified, seeded, disjoint index sets into one
dataset (:class:`Split`, :func:`reduced_split`, :func:`stratified_folds`), optionally keeping
groups of related images (frames of one object, photos of one patient) on one side
(``groups=``; the group key of a dataset: :meth:`autoaug.proxy_models.data.ImageDataset.groups`).
:func:`config_split` and :func:`config_groups` are the split and the groups a
:class:`autoaug.proxy_models.train.TrainConfig` describes: what ``train`` trains on.

Grouped splits (the reasoning behind :func:`_grouped_split`): every group goes whole to one side
(training or validation); each side then draws its per-class counts at random from the images of
its groups, so a side may use only part of a group, but no group ever has images on both sides.
The per-class counts are the ungrouped split's (:func:`_joint_counts`) whenever the groups allow.
"""

from __future__ import annotations

import dataclasses
import hashlib
import warnings
from typing import Any, Sequence

import numpy as np

from autoaug.core.errors import DataWarning
from autoaug.core.values import short_repr
from autoaug.proxy_models.data import DatasetError


@dataclasses.dataclass(frozen=True)
class Split:
    """Disjoint, stratified, seeded train/validation indices into one dataset."""

    train: np.ndarray
    val: np.ndarray
    seed: int
    dataset_fingerprint: str | None = None
    #: :func:`grouping_fingerprint` of the groups the split was drawn with; None: drawn image by image.
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
    images on both sides (see :func:`_grouped_split` for the allocation and its tolerance). An
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
    gid = None if groups is None else _canonical_groups(groups, n)
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
        return _grouped_split(
            classes,
            inverse,
            sizes,
            gid,
            (want_train, want_val),
            (not train_size, val_size is None),
            seed,
            dataset_fingerprint,
            grouping,
        )
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


# ----------------------------------------------------------------------------------------------
# Groups


def _canonical_groups(groups: Sequence[Any] | np.ndarray, n: int) -> np.ndarray:
    """``groups`` (one hashable key per image: ints or strings) as int64 ids ``0..G-1`` numbered
    in order of first appearance: the same partition of the images gives the same ids whatever
    the keys are."""
    arr = np.asarray(groups)
    if arr.ndim != 1 or len(arr) != n:
        raise DatasetError(f"groups has shape {arr.shape} for {n:,} labels; expected one group key per image")
    if (
        arr.dtype.kind not in "iuUSO"
        or arr.dtype.kind == "O"
        and not all(isinstance(x, (int, str, np.integer)) and not isinstance(x, bool) for x in arr.tolist())
    ):
        raise DatasetError(
            f"groups must be integer or string keys, got {arr.dtype} values such as {short_repr(arr[:3].tolist())}"
        )
    try:
        _, first, inverse = np.unique(arr, return_index=True, return_inverse=True)
    except TypeError:  # ints and strings mixed in an object array
        raise DatasetError(
            f"groups mixes key types ({short_repr(arr[:6].tolist())}); expected integer or string keys"
        ) from None
    rank = np.empty(len(first), dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(first))
    return rank[inverse.reshape(-1)]


def grouping_fingerprint(groups: Sequence[Any] | np.ndarray) -> str:
    """sha256 of the partition ``groups`` makes of the images (not of the keys' spelling): what
    :attr:`Split.grouping` records."""
    arr = np.asarray(groups)
    ids = arr if arr.dtype == np.int64 and (len(arr) == 0 or _is_canonical(arr)) else _canonical_groups(arr, len(arr))
    return hashlib.sha256(ids.astype("<i8").tobytes()).hexdigest()


def _is_canonical(ids: np.ndarray) -> bool:
    """Numbered 0..G-1 in order of first appearance (each new id is one more than the largest so far)."""
    running = np.maximum.accumulate(ids)
    return ids[0] == 0 and bool(np.all(np.diff(running) <= 1)) and bool(np.all(ids >= 0))


class _GroupTable:
    """Which classes each group holds: for group ``g``, ``cls[start[g]:start[g+1]]`` and
    ``count[...]`` (plain lists: the allocation loops run in Python), ``size[g]`` its images."""

    def __init__(self, inverse: np.ndarray, gid: np.ndarray, num_classes: int):
        self.num_groups = int(gid.max()) + 1 if len(gid) else 0
        pair = gid.astype(np.int64) * num_classes + inverse
        keys, counts = np.unique(pair, return_counts=True)
        pg = keys // num_classes
        self.cls = (keys % num_classes).tolist()
        self.count = counts.tolist()
        self.start = np.searchsorted(pg, np.arange(self.num_groups + 1)).tolist()
        self.size = np.bincount(gid, minlength=self.num_groups)
        #: Groups holding images of each class.
        self.groups_per_class = np.bincount(keys % num_classes, minlength=num_classes)

    def pairs(self, g: int) -> range:
        return range(self.start[g], self.start[g + 1])

    def largest_first(self, rng: np.random.Generator) -> list[int]:
        """Groups by decreasing size, equal sizes in a seeded random order."""
        return np.lexsort((rng.permutation(self.num_groups), -self.size)).tolist()


#: Passes of single-group moves :func:`_improve_sides` makes at most.
_MAX_PASSES = 10


def _grouped_split(
    classes: np.ndarray,
    inverse: np.ndarray,
    sizes: np.ndarray,
    gid: np.ndarray,
    want: tuple[int, int],
    take_all: tuple[bool, bool],
    seed: int,
    dataset_fingerprint: str | None,
    grouping: str,
) -> Split:
    """A reduced split with every group on one side. ``want``: the resolved (train, validation)
    sizes; ``take_all``: which side was asked for as "every remaining image" (size None).

    1. Targets: the ungrouped split's per-class counts ``t_c``, ``v_c`` (:func:`_joint_counts`).
    2. Sides: groups are dealt largest first (equal sizes in seeded order). A group of one class
       ``c`` goes to training when the training side's images of ``c`` are at or below its share
       of the images of ``c`` dealt so far, share ``t_c / (t_c + v_c)`` (both sizes given: the
       spare images of the class are spread over both sides in proportion, so both draw from
       as many groups as possible); when the validation side takes every remaining image,
       while training holds fewer than ``t_c`` images of ``c`` (and the other way round). A
       group of several classes goes by the sum of its classes' (normalised) positions.
    3. If a side then lacks images (in total, or of a class), single-group moves that reduce
       (size shortfall, classes missing from a side -- from training counting double --,
       per-class shortfall as a fraction of the side) lexicographically are made, in seeded
       order, for at most :data:`_MAX_PASSES` passes.
    4. Each side draws ``t_c`` (``v_c``) images of each class at random from its groups; a class
       with too few there gives what it has and the rest comes from the other classes, in
       proportion to their sizes (:func:`_fill`). A side taken whole takes every image of its groups.

    Tolerance. An explicit size is met exactly, or the split is refused. For groups of one class,
    step 2 keeps the training side's images of class ``c`` within ``[-f g, (1 - f) g]`` of
    ``f n_c`` (``f = t_c / (t_c + v_c)``, ``g`` its largest group) at every step, so a class
    whose spare images ``n_c - t_c - v_c`` number at least its largest group gets exactly its
    ungrouped counts on both sides; when validation takes every remaining image, step 2 gives every
    class at least ``t_c`` training images and at most one group more, so a class whose validation
    share ``v_c`` is at least its largest group gets exactly ``t_c`` (the validation side has the
    rest of its groups). Classes that cannot (e.g. all their images in one
    group) are reported: a :class:`DataWarning` naming them and the counts, or a
    :class:`DatasetError` when more than half of the classes are affected or more than half of a
    side's images would have to come from other classes (or, for a side taken whole, belong to
    classes missing from it) -- the split would then be stratified in name only, as when the
    group key is the class itself.
    """
    n, num_classes = len(inverse), len(sizes)
    table = _GroupTable(inverse, gid, num_classes)
    if table.num_groups < 2:
        raise DatasetError(
            f"cannot split {n:,} images that form one group: a split needs at least two groups (check the group key)"
        )
    want_train, want_val = want
    train_all, val_all = take_all
    t, v = _joint_counts(sizes, want_train, want_val)
    rng = np.random.default_rng(seed)
    on_train = _deal_sides(table, sizes.tolist(), t, v, want, take_all, rng)
    on_train = _improve_sides(table, on_train, sizes.tolist(), t, v, want, take_all, rng)

    row_train = on_train[gid]
    cap_t = np.bincount(inverse[row_train], minlength=num_classes)
    cap_v = sizes - cap_t
    t, v = np.asarray(t, dtype=np.int64), np.asarray(v, dtype=np.int64)
    shortfall = _size_shortfall(int(cap_t.sum()), int(cap_v.sum()), want, take_all)
    if shortfall:
        smallest, largest = int(table.size.min()), int(table.size.max())
        groups_text = f"{smallest:,}" if smallest == largest else f"{smallest:,} to {largest:,}"
        asked = (
            f"train_size {want_train:,} (validation: every image of the other groups)"
            if val_all
            else f"val_size {want_val:,} (training: every image of the other groups)"
            if train_all
            else f"train_size {want_train:,} + val_size {want_val:,}"
        )
        hint = (
            "" if train_all or val_all else ", or leave val_size unset (validation on every image of the other groups)"
        )
        raise DatasetError(
            f"cannot draw {asked} with each group on one side: the best grouping found puts {int(cap_t.sum()):,} "
            f"images on the training side and {int(cap_v.sum()):,} on the validation side ({table.num_groups:,} "
            f"groups of {groups_text} images); ask for smaller sizes{hint}"
        )
    _report_strata(classes, sizes, table.groups_per_class, (t, v), (cap_t, cap_v), want, take_all)

    counts_t = cap_t if train_all else _fill(t, cap_t, want_train, sizes)
    counts_v = cap_v if val_all else _fill(v, cap_v, want_val, sizes)
    by_class = np.argsort(inverse, kind="stable")
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    train_parts, val_parts = [], []
    for c in range(num_classes):
        members = by_class[bounds[c] : bounds[c + 1]]
        side = row_train[members]
        train_parts.append(rng.permutation(members[side])[: counts_t[c]])
        val_parts.append(rng.permutation(members[~side])[: counts_v[c]])
    return Split(
        train=np.sort(np.concatenate(train_parts)),
        val=np.sort(np.concatenate(val_parts)),
        seed=seed,
        dataset_fingerprint=dataset_fingerprint,
        grouping=grouping,
    )


def _deal_sides(
    table: _GroupTable,
    sizes: list[int],
    t: list[int],
    v: list[int],
    want: tuple[int, int],
    take_all: tuple[bool, bool],
    rng: np.random.Generator,
) -> np.ndarray:
    """Step 2 of :func:`_grouped_split`: ``on_train[g]`` for every group, dealt largest first."""
    total_t, total_v = want
    train_all, val_all = take_all
    k = len(sizes)
    cap_t, dealt = [0] * k, [0] * k
    both = [t[c] + v[c] for c in range(k)]

    def position(c: int) -> int:
        """<= 0: class ``c`` wants its next group on the training side."""
        if val_all:
            return cap_t[c] - t[c] + 1
        if train_all:
            return v[c] - (dealt[c] - cap_t[c])
        if both[c]:
            return cap_t[c] * both[c] - t[c] * dealt[c]
        return cap_t[c] * (total_t + total_v) - total_t * dealt[c]

    scale = [sizes[c] * (1 if val_all or train_all else (both[c] or total_t + total_v)) for c in range(k)]
    on_train = np.zeros(table.num_groups, dtype=bool)
    cls, count = table.cls, table.count
    for g in table.largest_first(rng):
        pairs = table.pairs(g)
        if len(pairs) == 1:
            to_train = position(cls[pairs[0]]) <= 0
        else:
            to_train = sum(count[j] * position(cls[j]) / scale[cls[j]] for j in pairs) <= 0
        on_train[g] = to_train
        for j in pairs:
            dealt[cls[j]] += count[j]
            if to_train:
                cap_t[cls[j]] += count[j]
    return on_train


def _size_shortfall(cap_t: int, cap_v: int, want: tuple[int, int], take_all: tuple[bool, bool]) -> int:
    """Images an explicit side lacks in total (a side taken whole: 1 when it is empty)."""
    out = 0
    for cap, size, whole in ((cap_t, want[0], take_all[0]), (cap_v, want[1], take_all[1])):
        out += (cap == 0 and size > 0) if whole else max(0, size - cap)
    return out


def _improve_sides(
    table: _GroupTable,
    on_train: np.ndarray,
    sizes: list[int],
    t: list[int],
    v: list[int],
    want: tuple[int, int],
    take_all: tuple[bool, bool],
    rng: np.random.Generator,
) -> np.ndarray:
    """Step 3 of :func:`_grouped_split`: single-group moves while they reduce (size shortfall,
    classes missing from a side, per-class shortfall as a fraction of the side) lexicographically."""
    k = len(sizes)
    total_t, total_v = want
    train_all, val_all = take_all
    cap_t = [0] * k
    cls, count = table.cls, table.count
    for g in np.flatnonzero(on_train).tolist():
        for j in table.pairs(g):
            cap_t[cls[j]] += count[j]

    def cost(c: int, ct: int) -> tuple[int, float]:
        cv = sizes[c] - ct
        missing = 2 * (t[c] > 0 and ct == 0) + (v[c] > 0 and cv == 0)
        short = (0.0 if train_all else max(0, t[c] - ct) / total_t) + (0.0 if val_all else max(0, v[c] - cv) / total_v)
        return missing, short

    sum_t = sum(cap_t)
    n = sum(sizes)
    parts = [cost(c, cap_t[c]) for c in range(k)]
    missing, short = sum(p[0] for p in parts), sum(p[1] for p in parts)
    size_short = _size_shortfall(sum_t, n - sum_t, want, take_all)
    if not (size_short or missing or short > 1e-12):
        return on_train
    on_train = on_train.copy()
    for _ in range(_MAX_PASSES):
        moved = False
        for g in rng.permutation(table.num_groups).tolist():
            sign = -1 if on_train[g] else 1
            d_missing, d_short, d_sum = 0, 0.0, 0
            for j in table.pairs(g):
                c, a = cls[j], count[j] * sign
                before, after = cost(c, cap_t[c]), cost(c, cap_t[c] + a)
                d_missing += after[0] - before[0]
                d_short += after[1] - before[1]
                d_sum += a
            new_size_short = _size_shortfall(sum_t + d_sum, n - sum_t - d_sum, want, take_all)
            better = (new_size_short, missing + d_missing) < (size_short, missing) or (
                (new_size_short, missing + d_missing) == (size_short, missing) and d_short < -1e-12
            )
            if better:
                on_train[g] = not on_train[g]
                for j in table.pairs(g):
                    cap_t[cls[j]] += count[j] * sign
                sum_t += d_sum
                size_short, missing, short = new_size_short, missing + d_missing, short + d_short
                moved = True
        if not moved or not (size_short or missing or short > 1e-12):
            break
    return on_train


def _fill(targets: np.ndarray, caps: np.ndarray, total: int, weights: np.ndarray) -> np.ndarray:
    """Per-class counts: each class its target when it has that many (``caps``), the rest of
    ``total`` from the classes with images to spare, in proportion to ``weights`` (largest
    remainder, ties by class index)."""
    counts = np.minimum(targets, caps).astype(np.int64)
    spare = caps - counts
    left = int(total - counts.sum())
    while left > 0 and spare.sum() > 0:
        open_ = np.flatnonzero(spare > 0)
        share = left * weights[open_] / weights[open_].sum()
        add = np.minimum(np.floor(share).astype(np.int64), spare[open_])
        if add.sum() == 0:  # every share below one image: the largest remainders get one each
            add[np.lexsort((open_, -(share - np.floor(share))))[:left]] = 1
        counts[open_] += add
        spare[open_] -= add
        left -= int(add.sum())
    return counts


def _report_strata(
    classes: np.ndarray,
    sizes: np.ndarray,
    groups_per_class: np.ndarray,
    targets: tuple[np.ndarray, np.ndarray],
    caps: tuple[np.ndarray, np.ndarray],
    want: tuple[int, int],
    take_all: tuple[bool, bool],
) -> None:
    """Classes a grouped split cannot give their counts: a :class:`DataWarning`, or a
    :class:`DatasetError` when more than half of the classes, or of a side, would be affected (see
    :func:`_grouped_split`)."""
    problems: list[str] = []
    affected: set[int] = set()
    lost: list[tuple[str, int, int, bool]] = []
    for side, target, cap, size, whole in (
        ("training", targets[0], caps[0], want[0], take_all[0]),
        ("validation", targets[1], caps[1], want[1], take_all[1]),
    ):
        bad = np.flatnonzero((target > 0) & (cap == 0)) if whole else np.flatnonzero(cap < target)
        affected.update(bad.tolist())
        for c in bad.tolist():
            got = int(min(cap[c], target[c]))
            groups = int(groups_per_class[c])
            problems.append(
                f"label {int(classes[c])} ({int(sizes[c]):,} images in {groups:,} group"
                f"{'s' if groups != 1 else ''}): {got:,} of {int(target[c]):,} {side} images"
            )
        lost.append((side, int(np.maximum(target - cap, 0)[bad].sum()), size, whole))
    if not problems:
        return
    shown = "; ".join(problems[:5]) + (f"; ... ({len(problems):,} in all)" if len(problems) > 5 else "")
    classes_text = (
        f"{len(affected):,} of the {len(sizes):,} classes cannot get their counts with each group on one side"
    )
    if 2 * len(affected) > len(sizes) or any(2 * missing > size for _, missing, size, _ in lost):
        what = "; ".join(
            f"{missing:,} of the {size:,} {side} images would "
            + ("belong to classes missing from it" if whole else "have to come from other classes")
            for side, missing, size, whole in lost
            if missing
        )
        raise DatasetError(
            f"cannot stratify a grouped split by class: {classes_text} ({shown}); {what}; check the "
            "group key (does it group by class?)"
        )
    instead = [f"{missing:,} {side}" for side, missing, _, whole in lost if missing and not whole]
    tail = f"; {' and '.join(instead)} images come from other classes instead" if instead else ""
    warnings.warn(f"grouped split: {classes_text}: {shown}{tail}", DataWarning, stacklevel=4)


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
        return _grouped_folds(split, labels, int(k), seed, _canonical_groups(groups, len(labels)))
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


def _grouped_folds(split: Split, labels: np.ndarray, k: int, seed: int, gid_all: np.ndarray) -> list[Split]:
    """:func:`stratified_folds` with every group in one part."""
    grouping = grouping_fingerprint(gid_all)
    if split.grouping is not None and split.grouping != grouping:
        raise DatasetError(
            f"the groups given differ from the ones the split was drawn with (grouping "
            f"{grouping[:12]} vs {split.grouping[:12]}); pass the same groups"
        )
    members = np.asarray(split.train, dtype=np.int64)
    gid = _canonical_groups(gid_all[members], len(members))
    classes, inverse = np.unique(labels[members], return_inverse=True)
    table = _GroupTable(inverse, gid, len(classes))
    if table.num_groups < k:
        raise DatasetError(
            f"cannot make {k} folds of a training split of {len(members):,} images in "
            f"{table.num_groups:,} group(s): each group lies in one fold, so at least {k} are needed"
        )
    rng = np.random.default_rng([seed, k])
    sizes = np.bincount(inverse, minlength=len(classes)).tolist()
    load = [[0] * len(classes) for _ in range(k)]
    total = [0] * k
    part_of = np.zeros(table.num_groups, dtype=np.int64)
    cls, count = table.cls, table.count
    for g in table.largest_first(rng):
        pairs = table.pairs(g)
        best = min(
            range(k), key=lambda f: (sum(count[j] * load[f][cls[j]] / sizes[cls[j]] for j in pairs), total[f], f)
        )
        part_of[g] = best
        for j in pairs:
            load[best][cls[j]] += count[j]
        total[best] += int(table.size[g])
    _balance_folds(table, part_of, load, total)
    row_part = part_of[gid]
    return [
        Split(
            train=np.sort(members[row_part != i]),
            val=np.sort(members[row_part == i]),
            seed=split.seed,
            dataset_fingerprint=split.dataset_fingerprint,
            grouping=grouping,
        )
        for i in range(k)
    ]


#: Moves :func:`_balance_folds` makes at most (each strictly reduces the sum of squared fold sizes),
#: and groups of one size it tries as the partner of a swap.
_MAX_BALANCING_MOVES = 10_000
_SWAP_CANDIDATES = 8


def _balance_folds(table: _GroupTable, part_of: np.ndarray, load: list[list[int]], total: list[int]) -> None:
    """Even out the fold sizes the class-first dealing left (in place): repeatedly move a group
    from the largest fold to the smallest, or swap a group of each, choosing the change that
    brings the two closest, as long as no class's spread over the folds (largest minus smallest
    count) grows beyond the larger of its current spread and its largest group. Each change
    strictly reduces the sum of squared fold sizes, so this ends; deterministic (ties by group id)."""
    k = len(total)
    cls, count, size = table.cls, table.count, table.size.tolist()
    bound = [0] * len(load[0])  # a class's largest count in one group
    for g in range(table.num_groups):
        for j in table.pairs(g):
            bound[cls[j]] = max(bound[cls[j]], count[j])
    folds: list[list[int]] = [[] for _ in range(k)]
    for g, f in enumerate(part_of.tolist()):
        folds[f].append(g)

    def spread(c: int) -> int:
        column = [load[f][c] for f in range(k)]
        return max(column) - min(column)

    def allowed(changes: list[tuple[int, int, int]]) -> bool:
        """``changes``: (class, fold, delta); is every touched class's spread still acceptable?"""
        touched = {c for c, _, _ in changes}
        limit = {c: max(bound[c], spread(c)) for c in touched}
        for c, f, d in changes:
            load[f][c] += d
        ok = all(spread(c) <= limit[c] for c in touched)
        for c, f, d in changes:
            load[f][c] -= d
        return ok

    def moves(g: int, src: int, dst: int) -> list[tuple[int, int, int]]:
        return [(cls[j], f, d) for j in table.pairs(g) for f, d in ((src, -count[j]), (dst, count[j]))]

    for _ in range(_MAX_BALANCING_MOVES):
        hi = max(range(k), key=lambda f: (total[f], -f))
        lo = min(range(k), key=lambda f: (total[f], f))
        diff = total[hi] - total[lo]
        best: tuple[int, int, int] | None = None  # (|new difference|, group out of hi, group out of lo or -1)
        for g in folds[hi]:
            if (
                0 < size[g] < diff
                and (best is None or (abs(diff - 2 * size[g]), g, -1) < best)
                and allowed(moves(g, hi, lo))
            ):
                best = (abs(diff - 2 * size[g]), g, -1)
        if best is None or best[0] > 1:
            by_size: dict[int, list[int]] = {}
            for h in sorted(folds[lo]):
                by_size.setdefault(size[h], []).append(h)
            for g in folds[hi]:
                for other, candidates in by_size.items():
                    delta = size[g] - other
                    if not 0 < delta < diff or (best is not None and (abs(diff - 2 * delta), g) >= best[:2]):
                        continue
                    # the first few groups of that size whose swap keeps the classes spread
                    h = next(
                        (h for h in candidates[:_SWAP_CANDIDATES] if allowed(moves(g, hi, lo) + moves(h, lo, hi))), -1
                    )
                    if h >= 0:
                        best = (abs(diff - 2 * delta), g, h)
        if best is None:
            return
        _, g, h = best
        for group, src, dst in ((g, hi, lo), (h, lo, hi)) if h >= 0 else ((g, hi, lo),):
            for c, f, d in moves(group, src, dst):
                load[f][c] += d
            folds[src].remove(group)
            folds[dst].append(group)
            part_of[group] = dst
            total[src] -= size[group]
            total[dst] += size[group]


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
