"""The kind of machine a run trained on, and runs kept within one kind.

One training configuration and seed give another model on another kind of machine: the kernels a
library picks depend on the processor's instruction sets (oneDNN's AVX2, AVX-512, AVX-512 BF16 or
AMX kernels sum in other orders; ``amp: native`` trains in bfloat16 only where the CPU has the
instructions) or on the GPU. The same ``eval-cpu`` run of one seed gave 96.03% on an AMD Zen 3 and
97.32% on an Intel Xeon (GTSRB): more than most policies differ. So every run record keeps its
:func:`machine_kind` beside its precision, and a comparison pairs runs by seed only within one kind
(:func:`one_kind`), saying in one line what it left out (:func:`left_out_line`).

A kind is a string: ``"cpu AMD EPYC 7B13 64-Core Processor (avx2 fma)"`` -- the CPU's model name
and the instruction sets that change numerics -- or ``"gpu NVIDIA H200"``. Light: reading
``/proc/cpuinfo``; torch only for a GPU's name.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import platform
from collections.abc import Callable, Iterable, Mapping
from typing import Any

__all__ = ["NUMERIC_FLAGS", "OneKind", "cpu_kind", "kind_of", "left_out_line", "machine_kind", "one_kind"]

#: The CPU flags (``/proc/cpuinfo``) that change which kernels compute a float32 or autocast run:
#: x86 vector widths and FMA, bfloat16 / float16 instructions and AMX tiles; on ARM, SVE and BF16.
NUMERIC_FLAGS: tuple[str, ...] = (
    "avx2",
    "fma",
    "avx512f",
    "avx512_bf16",
    "avx512_fp16",
    "amx_bf16",
    "amx_fp16",
    "asimd",
    "sve",
    "sve2",
    "bf16",
)


def _cpuinfo(text: str) -> tuple[str | None, list[str]]:
    """The model name and the flags of the first processor in ``/proc/cpuinfo``'s ``text``."""
    name, flags = None, []
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip().lower()
        if key in ("model name", "cpu model", "hardware") and name is None and value.strip():
            name = " ".join(value.split())
        elif key in ("flags", "features") and not flags:
            flags = value.split()
        elif not line.strip() and (name or flags):
            break  # the first processor's block ends
    return name, flags


def cpu_kind(cpuinfo: str | None = None) -> str:
    """This machine's CPU as a kind: ``"cpu MODEL NAME (FLAGS)"``, the flags those of
    :data:`NUMERIC_FLAGS` it has, in that order (``cpuinfo``: a ``/proc/cpuinfo`` text to read
    instead of this machine's)."""
    if cpuinfo is None:
        return _this_cpu()
    name, flags = _cpuinfo(cpuinfo)
    name = name or platform.processor() or platform.machine() or "unknown"
    have = [f for f in NUMERIC_FLAGS if f in flags]
    return f"cpu {name}" + (f" ({' '.join(have)})" if have else "")


@functools.lru_cache(maxsize=1)
def _this_cpu() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:  # not Linux
        text = ""
    return cpu_kind(text)


def machine_kind(device: Any = "cpu") -> str:
    """The kind of machine a run on ``device`` (a ``torch.device`` or its name) trains on: the
    GPU's model for a CUDA device (``"gpu NVIDIA H200"``), else this machine's :func:`cpu_kind`."""
    name = str(getattr(device, "type", device) or "cpu")
    if name.startswith("cuda"):
        import torch

        index = getattr(device, "index", None)
        if index is None and ":" in str(device):
            index = int(str(device).split(":", 1)[1])
        return f"gpu {torch.cuda.get_device_name(index)}"
    return cpu_kind()


def kind_of(record: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """A run record's (or a ``runs.csv`` row's) ``(machine, precision)``; None for what it does
    not record (written before runs kept it: an empty cell of a CSV too)."""
    return (record.get("machine") or None, record.get("precision") or None)


def _describe(kind: tuple[str | None, str | None]) -> str:
    machine, precision = kind
    return f"{machine or 'machine not recorded'}, {precision or 'precision not recorded'}"


@dataclasses.dataclass(frozen=True)
class OneKind:
    """Runs split by kind: ``kept``, those of ``kind`` (the most runs' ``(machine, precision)``;
    None when no run records its machine) and those that record none (counted in ``unrecorded``);
    ``left_out``, the runs of every other kind."""

    kind: tuple[str, str | None] | None
    kept: list[Any]
    left_out: list[Any]
    unrecorded: int = 0

    def describe(self) -> str:
        """The kind in words, for a table: ``"cpu AMD EPYC (avx2 fma), float32"``."""
        if self.kind is None:
            return "machine not recorded"
        return _describe(self.kind) + (f" ({self.unrecorded} runs recorded no machine)" if self.unrecorded else "")


def one_kind(records: Iterable[Any], get: Callable[[Any], Mapping[str, Any]] = lambda r: r) -> OneKind:
    """Keep the runs of one kind of machine: the kind of the most runs (ties: the first seen). A run
    that records no machine (older records) is kept when its precision is that kind's or unknown:
    nothing says it is of another kind. ``get`` maps a record to its fields."""
    records = list(records)
    kinds = collections.Counter(kind_of(get(r)) for r in records if kind_of(get(r))[0] is not None)
    if not kinds:
        return OneKind(None, records, [])
    kind = max(kinds, key=lambda k: kinds[k])  # (Counter keeps first-seen order: ties go to the first)
    kept, left, unrecorded = [], [], 0
    for r in records:
        machine, precision = kind_of(get(r))
        if (machine, precision) == kind:
            kept.append(r)
        elif machine is None and precision in (None, kind[1]):
            kept.append(r)
            unrecorded += 1
        else:
            left.append(r)
    return OneKind(kind, kept, left, unrecorded)


def left_out_line(
    split: OneKind,
    label: Callable[[Any], str],
    what: str = "runs",
    hint: str = "train them on one kind of machine",
    get: Callable[[Any], Mapping[str, Any]] = lambda r: r,
) -> str | None:
    """One line saying which runs :func:`one_kind` left out (``label``: a run's name, e.g. its policy
    and seed), of which kinds, and why; None when it left none."""
    if not split.left_out:
        return None
    by_kind: dict[tuple[str | None, str | None], list[str]] = {}
    for r in split.left_out:
        by_kind.setdefault(kind_of(get(r)), []).append(label(r))
    parts = "; ".join(
        f"{len(names)} on {_describe(k)} ({', '.join(names[:6])}{', ...' if len(names) > 6 else ''})"
        for k, names in by_kind.items()
    )
    kept = _describe(split.kind) if split.kind else "unknown"
    n = len(split.left_out)
    return (
        f"left out {n} {what if n != 1 else what.removesuffix('s')} of another kind of machine than the "
        f"{len(split.kept)} compared ({kept}): {parts}; one seed trains another model on another kind, so runs "
        f"pair only within one; {hint}"
    )
