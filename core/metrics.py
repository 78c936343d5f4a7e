"""The one metrics cleaner: metrics and records as standard JSON values.

NaN and infinities (a diverged loss, a missing score) become ``None`` (JSON ``null``, which
every JSON reader accepts; ``NaN`` is not JSON); numpy scalars and arrays become Python numbers
and lists; tuples and sets become lists; mapping keys become strings; anything else that JSON
cannot hold becomes its ``str``.

Also the definition of the one derived metric more than one package computes:
:func:`balanced_accuracy` (the trainer's test pass, compare's per-run and per-class reports).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["balanced_accuracy", "clean_metrics", "epoch_record", "metrics_json"]

#: Keys of a trainer's per-epoch metrics that only make sense in the process that trained
#: (``checkpoint_dir``: a local scratch folder); left out of records.
LOCAL_ONLY_KEYS = frozenset({"checkpoint_dir"})


def clean_metrics(value: Any) -> Any:
    """``value`` with every part replaced by a standard JSON value (see the module docs)."""
    if value is None or isinstance(value, (str, bool)):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): clean_metrics(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        items = sorted(value, key=repr) if isinstance(value, (set, frozenset)) else value
        return [clean_metrics(v) for v in items]
    if hasattr(value, "dtype") and hasattr(value, "tolist"):  # numpy scalars and arrays
        return clean_metrics(value.tolist())
    return str(value)


def metrics_json(value: Any, *, indent: int | None = 2) -> str:
    """``value`` cleaned by :func:`clean_metrics`, as standard JSON text."""
    return json.dumps(clean_metrics(value), indent=indent, allow_nan=False)


def epoch_record(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """One epoch's metrics, as :func:`autoaug.proxy_models.train.train` reports them, ready for a
    record (``metrics.json``, a comparison's run file): cleaned, without :data:`LOCAL_ONLY_KEYS`."""
    return clean_metrics({k: v for k, v in metrics.items() if k not in LOCAL_ONLY_KEYS})


def balanced_accuracy(correct: Iterable[int], total: Iterable[int]) -> float:
    """Mean per-class accuracy (recall) over the classes with at least one image; NaN if none.

    ``correct[c]`` / ``total[c]``: images of class ``c`` predicted right / evaluated. A class absent
    from the evaluated data has no accuracy and does not count (as in scikit-learn's
    ``balanced_accuracy_score``).
    """
    rates = [c / t for c, t in zip(correct, total) if t > 0]
    return math.fsum(rates) / len(rates) if rates else math.nan
