"""What the quality benchmarks share: an ``autoaug`` command run and timed (:func:`_autoaug`,
:class:`Timings`), the evaluation regime's runs through ``autoaug compare`` (:func:`_compare`) and
read back (:func:`_read_runs`), and runs recorded by an earlier benchmark reused instead of trained
again (:func:`import_runs`). ``benchmarks/search_quality.py`` and ``benchmarks/search_gain.py`` use them."""

from __future__ import annotations

import argparse
import collections
import json
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
#: The baselines every evaluation compares with: ``autoaug compare``'s default baselines
#: (``autoaug.launch.compare.DEFAULT_BASELINES``, not imported: this module stays free of autoaug's
#: import, 1.2 s, until a function needs it) and AutoAugment's SVHN and ImageNet policies.
BASELINES = (
    "none",
    "crop",
    "standard",
    "randaugment:n=2,m=9",
    "trivialaugment",
    "autoaugment-cifar10",
    "autoaugment-svhn",
    "autoaugment-imagenet",
)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def _autoaug(args: Sequence[str], log: Path) -> tuple[int, float]:
    """Run ``autoaug ARGS`` (this interpreter), tee its output to ``log``; (exit code, seconds)."""
    cmd = [sys.executable, "-m", "autoaug.launch.cli", *args]
    print("$ autoaug " + shlex.join(args), flush=True)
    start = time.monotonic()
    with open(log, "a") as f:
        f.write(f"\n# {_now()} $ autoaug {shlex.join(args)}\n")
        f.flush()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert proc.stdout is not None
        for line in proc.stdout:
            f.write(line)
            f.flush()
            if "WARNING" not in line and "INFO" not in line:
                print("  " + line.rstrip(), flush=True)
        code = proc.wait()
    return code, time.monotonic() - start


class Timings:
    """Wall time per stage, accumulated over resumed sessions (``timings.json``)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.data = json.loads(path.read_text()) if path.exists() else {}

    def add(self, stage: str, seconds: float, command: str) -> None:
        entry = self.data.setdefault(stage, {"wall_s": 0.0, "sessions": []})
        entry["wall_s"] += seconds
        entry["sessions"].append({"finished_at": _now(), "wall_s": round(seconds, 1), "command": command})
        self.path.write_text(json.dumps(self.data, indent=1))


def _read_runs(compare_out: Path) -> list[dict[str, Any]]:
    """``compare_out``'s ``runs.csv`` rows of one kind of machine (:func:`autoaug.core.machine.one_kind`:
    compare writes one kind; a file merged by hand may hold more): the others, paired with nothing,
    left out in one line."""
    import csv

    from autoaug.core.machine import left_out_line, one_kind

    with open(compare_out / "runs.csv", newline="") as f:
        split = one_kind(csv.DictReader(f))
    line = left_out_line(
        split, lambda r: f"{r['policy']} seed {r['seed']}", hint=f"train them on one kind ({compare_out})"
    )
    if line:
        print(f"{compare_out.name}: {line}")
    return split.kept


# ------------------------------------------------------------------------------------------ stages
def _compare(
    a: argparse.Namespace,
    work: Path,
    timings: Timings,
    stage: str,
    out: Path,
    preset_args: list[str],
    policies: list[str],
    seeds: int,
    baselines: bool = True,
) -> Path:
    args = [
        "compare",
        "--data",
        a.data,
        *preset_args,
        "--store",
        str(work / "store"),
        "--baselines",
        ",".join(BASELINES) if baselines else "",
        "--seeds",
        str(seeds),
        "--out",
        str(out),
        "--no-attach",
        "--cpus-per-run",
        str(a.cpus_per_run),
    ]
    for p in policies:
        args += ["--policy", p]
    if a.address:
        args += ["--address", a.address]
    code, seconds = _autoaug(args, work / f"{stage}.log")
    timings.add(stage, seconds, "autoaug " + shlex.join(args))
    if code != 0:
        raise SystemExit(
            f"search_quality: {stage} failed (exit {code}); see {work / (stage + '.log')}; "
            "re-run this command to resume (finished runs are kept)"
        )
    return out


def import_runs(
    a: argparse.Namespace, csv_path: Path, out: Path, preset_args: list[str], policies: Sequence[str] = ()
) -> int:
    """Seed ``out/runs/`` with finished runs recorded in a committed ``runs.csv`` (a results folder
    of an earlier session), so a clean checkout resumes instead of training them again.

    A row becomes the run record ``autoaug compare`` itself would have written when its policy
    reference resolves to the recorded policy hash, and only if no record of that run exists; the
    training configuration is the one this comparison uses (the code and presets must be those
    that produced the CSV: ``git log`` of the CSV says which). Rows of the baselines and of
    ``policies`` (references this comparison trains, e.g. ``--also`` policies) are imported when
    the hash matches; other rows are skipped. Returns the number of records written.

    The precision a run trained in depends on the machine under ``amp: native`` (bfloat16 on CPUs
    with native instructions, float32 elsewhere; the same seed gives another result): a row whose
    ``precision`` differs from the one this machine trains the regime in is not imported (said);
    a row of a CSV written before runs recorded it is imported, and the line says how many were,
    so a reader can check one by training it again. Likewise the kind of machine (``machine``:
    :func:`autoaug.core.machine.machine_kind`; one seed trains another model on another CPU or GPU
    even in one precision): a row of another kind than this machine's is not imported (said), a row
    that records none is imported and counted.
    """
    import csv

    from autoaug.core.machine import machine_kind
    from autoaug.launch.compare.candidates import resolve_candidates
    from autoaug.launch.compare.config import config_from_dict
    from autoaug.launch.compare.runner import run_id, run_record, sized_to_data
    from autoaug.proxy_models.precision import run_precision

    preset = preset_args[preset_args.index("--preset") + 1] if "--preset" in preset_args else "cpu"
    config = config_from_dict({"data": a.data, "preset": preset, "baselines": list(BASELINES), "out": str(out)})
    # The records hold the regime as compare resolves it against the data (a split per class
    # becomes a total): what compare itself would have written, so it reuses them.
    config, fingerprint, _, _ = sized_to_data(config)
    candidates = {c.policy_hash: c for c in resolve_candidates((), config.baselines, None)}
    for ref in policies:  # one at a time: a policy that is a baseline (a twin) reads the baseline's rows
        (c,) = resolve_candidates((ref,), (), None)
        candidates.setdefault(c.policy_hash, c)
    written, other, unrecorded = 0, collections.Counter(), 0
    other_machines, no_machine = collections.Counter(), 0
    (out / "runs").mkdir(parents=True, exist_ok=True)
    with open(csv_path, newline="") as f:
        for row in csv.DictReader(f):
            c = candidates.get(row["policy_hash"])
            if c is None:
                continue
            seed = int(row["seed"])
            path = out / "runs" / f"{run_id(c, seed)}.json"
            if path.exists():
                continue
            run_config = config.run_config(seed)
            here = run_precision(run_config, run_config.resolve_device())
            if row.get("precision") and row["precision"] != here:
                other[row["precision"]] += 1
                continue
            machine = machine_kind(run_config.resolve_device())
            if row.get("machine") and row["machine"] != machine:
                other_machines[row["machine"]] += 1
                continue
            unrecorded += not row.get("precision")
            no_machine += not row.get("machine")
            outcome = {
                "test_accuracy": float(row["test_accuracy"]),
                "test_loss": float(row["test_loss"]),
                "val_accuracy": float(row["val_accuracy"]) if row.get("val_accuracy") else None,
                "train_time_s": float(row["train_time_s"]),
                "precision": row.get("precision") or None,
                "machine": row.get("machine") or None,
                "history": [],
                "dataset_fingerprint": fingerprint,
                "split_fingerprint": None,
                "node_id": row.get("node_id") or None,
                "hostname": row.get("hostname") or None,
                "pid": None,
                "imported_from": str(csv_path.relative_to(REPO)) if csv_path.is_relative_to(REPO) else str(csv_path),
            }
            record = run_record(c, seed, run_config, outcome)
            record["finished_at"] = row.get("finished_at") or record["finished_at"]
            path.write_text(json.dumps(record, indent=1))
            written += 1
    notes = []
    if unrecorded:
        notes.append(
            f"{unrecorded} of them recorded no precision (written before runs kept it): they match this machine's "
            "only if trained on a CPU of its kind; train one again to check"
        )
    if other:
        notes.append(
            "not imported: "
            + ", ".join(f"{n} trained in {name}" for name, n in sorted(other.items()))
            + " (this machine trains them in another precision: they are trained again)"
        )
    if no_machine:
        notes.append(
            f"{no_machine} of them recorded no kind of machine (written before runs kept it): compare pairs them "
            "with this machine's runs as if of its kind"
        )
    if other_machines:
        notes.append(
            "not imported: "
            + ", ".join(f"{n} trained on {kind}" for kind, n in sorted(other_machines.items()))
            + f" (another kind of machine than this one, {machine_kind()}: one seed trains another model there; "
            "they are trained again)"
        )
    print(f"imported {written} finished runs from {csv_path} into {out / 'runs'}" + "".join(f"; {n}" for n in notes))
    return written
