r"""Group keys: which images belong together (frames of one physical object, photos of one
patient, one recording session), so that a split never puts one group on both of its sides
(:func:`autoaug.proxy_models.splits.reduced_split` and ``stratified_folds`` with ``groups=``).

The key is given as a spec (``TrainConfig.group_by``, ``--group-by``):

* ``COLUMN``: the values of a column of the data (a Parquet column of integers or text), e.g.
  ``track``: rows with the same value form one group;
* ``COLUMN:REGEX``: a regular expression searched (:func:`re.search`) in each row's text in
  ``COLUMN``; the group is the match's capture groups taken together, or the whole match when the
  pattern has none. ``source_path:Images/(\d+)/(\d+)_`` groups GTSRB's frames by class folder and
  track (``GTSRB/Final_Training/Images/00014/00023_00005.ppm`` -> ``("00014", "00023")``).
  Every row must match: a pattern that misses some rows is refused, with how many and one of them.

For an ImageFolder tree, ``source_path`` is each image's path relative to the root, with ``/``
(``00014/00023_00005.png``); such a tree has no other column. A column name cannot contain ``:``
(everything after the first ``:`` is the pattern). Images never need decoding: a Parquet dataset
reads the one column (:meth:`autoaug.proxy_models.data.ImageDataset.groups`).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from autoaug.core.errors import UserInputError
from autoaug.core.values import clip, short_repr
from autoaug.proxy_models.data import DatasetError

__all__ = ["GroupSpec", "EXPECTED", "group_ids"]

#: What a group spec looks like (the end of every spec error).
EXPECTED = r"expected COLUMN or COLUMN:REGEX, e.g. track or source_path:Images/(\d+)/(\d+)_"


@dataclasses.dataclass(frozen=True)
class GroupSpec:
    """A parsed group key: a ``column`` and an optional ``pattern`` (see the module docs)."""

    column: str
    pattern: str | None = None

    @classmethod
    def parse(cls, spec: Any) -> GroupSpec:
        """``spec`` (``"track"``, ``"source_path:Images/(\\d+)/(\\d+)_"`` or a GroupSpec) as a
        GroupSpec; :class:`UserInputError` (one line) for anything else, a bad regular expression
        included."""
        if isinstance(spec, GroupSpec):
            return spec
        if not isinstance(spec, str):
            raise UserInputError(f"group_by {short_repr(spec)} is a {type(spec).__name__}; {EXPECTED}")
        if not spec.strip():
            raise UserInputError(f"group_by is empty; {EXPECTED}")
        column, sep, pattern = spec.partition(":")
        if not column.strip():
            raise UserInputError(f"group_by {_quote(spec)} names no column before ':'; {EXPECTED}")
        if not sep:
            return cls(column)
        if not pattern:
            raise UserInputError(f"group_by {_quote(spec)} has an empty pattern after ':'; {EXPECTED}")
        try:
            re.compile(pattern)
        except re.error as exc:
            where = f" at position {exc.pos}" if exc.pos is not None else ""
            raise UserInputError(
                f"group_by {_quote(spec)}: the pattern {_quote(pattern)} is not a valid regular "
                f"expression ({exc.msg}{where}); {EXPECTED}"
            ) from None
        return cls(column, pattern)

    @property
    def text(self) -> str:
        """The spec as written (``column`` or ``column:pattern``)."""
        return self.column if self.pattern is None else f"{self.column}:{self.pattern}"

    @property
    def quoted(self) -> str:
        """The spec in quotes as written (no escaping, unlike repr), for messages."""
        return _quote(self.text)

    def __str__(self) -> str:
        return self.text


def _quote(text: str) -> str:
    """``text`` in single quotes as the user wrote it (one line, clipped), for messages; ``repr``
    would double every backslash of a regular expression."""
    return f"'{clip(text, 120)}'"


def group_ids(values: Sequence[Any], spec: GroupSpec, source: str, describe_row: Any = None) -> np.ndarray:
    """int64 group ids ``0..G-1`` of ``values`` (one per row: the column's values, or the text
    the pattern is searched in), numbered in order of first appearance, so that the same
    partition of the rows always gets the same ids. :class:`DatasetError` naming ``source`` and a
    row for a null value, or for rows the pattern does not match (how many, and the first)."""
    describe = describe_row or (lambda i: f"{source} row {i}")
    ids = np.empty(len(values), dtype=np.int64)
    seen: dict[Any, int] = {}
    rx = re.compile(spec.pattern) if spec.pattern is not None else None
    missed, first_miss = 0, None
    for i, value in enumerate(values):
        if value is None:
            raise DatasetError(
                f"{describe(i)}: group_by {spec.quoted}: the {short_repr(spec.column)} value is "
                "null; every row needs a group"
            )
        if rx is not None:
            m = rx.search(value)
            if m is None:
                missed += 1
                if first_miss is None:
                    first_miss = i
                continue
            value = m.groups() if rx.groups else m.group(0)
        ids[i] = seen.setdefault(value, len(seen))
    if missed:
        n = len(values)
        how = f"matches none of the {n:,}" if missed == n else f"matches {n - missed:,} of the {n:,}"
        raise DatasetError(
            f"{source}: group_by {spec.quoted}: the pattern {how} {short_repr(spec.column)} values; {missed:,} do "
            f"not, e.g. row {first_miss} {short_repr(values[first_miss], 200)}; expected a pattern that matches every row"
        )
    return ids
