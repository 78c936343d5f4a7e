"""Grouped splits and folds: every group of related images (frames of one object, photos of one
patient; :mod:`autoaug.proxy_models.groups` reads the keys) lies whole on one side of a reduced
split (:func:`grouped_split`) and in one part of its folds (:func:`grouped_folds`).
:func:`autoaug.proxy_models.splits.reduced_split` and ``stratified_folds`` call them when given
``groups=``.

The reasoning behind :func:`grouped_split`: every group goes whole to one side (training or
validation); each side then draws its per-class counts at random from the images of its groups,
so a side may use only part of a group, but no group ever has images on both sides. The
per-class counts are the ungrouped split's (``autoaug.proxy_models.splits._joint_counts``)
whenever the groups allow.
"""

from __future__ import annotations

import hashlib
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from autoaug.core.errors import DataWarning
from autoaug.core.values import short_repr
from autoaug.proxy_models.data import DatasetError

__all__ = ["canonical_groups", "grouping_fingerprint", "grouped_split", "grouped_folds"]


def canonical_groups(groups: Sequence[Any] | np.ndarray, n: int) -> np.ndarray:
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
    ids = arr if arr.dtype == np.int64 and (len(arr) == 0 or _is_canonical(arr)) else canonical_groups(arr, len(arr))
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


def grouped_split(
    classes: np.ndarray,
    inverse: np.ndarray,
    sizes: np.ndarray,
    gid: np.ndarray,
    want: tuple[int, int],
    take_all: tuple[bool, bool],
    seed: int,
    targets: tuple[Sequence[int], Sequence[int]],
) -> tuple[np.ndarray, np.ndarray]:
    """The (training, validation) indices of a reduced split with every group on one side.
    ``want``: the resolved (train, validation) sizes; ``take_all``: which side was asked for as
    "every remaining image" (size None); ``targets``: the ungrouped split's per-class counts.

    1. Targets: the ungrouped split's per-class counts ``t_c``, ``v_c`` (``targets``).
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
    t, v = (list(x) for x in targets)
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
    return np.sort(np.concatenate(train_parts)), np.sort(np.concatenate(val_parts))


def _deal_sides(
    table: _GroupTable,
    sizes: list[int],
    t: list[int],
    v: list[int],
    want: tuple[int, int],
    take_all: tuple[bool, bool],
    rng: np.random.Generator,
) -> np.ndarray:
    """Step 2 of :func:`grouped_split`: ``on_train[g]`` for every group, dealt largest first."""
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
    """Step 3 of :func:`grouped_split`: single-group moves while they reduce (size shortfall,
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
    :func:`grouped_split`)."""
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


def grouped_folds(
    members: np.ndarray, labels: np.ndarray, k: int, seed: int, gid_all: np.ndarray
) -> list[tuple[np.ndarray, np.ndarray]]:
    """The (training, held-out) indices of ``k`` folds of the training images ``members``, every
    group in one part (:func:`autoaug.proxy_models.splits.stratified_folds` with ``groups=``)."""
    gid = canonical_groups(gid_all[members], len(members))
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
    return [(np.sort(members[row_part != i]), np.sort(members[row_part == i])) for i in range(k)]


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
