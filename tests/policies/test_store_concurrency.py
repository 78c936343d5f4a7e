"""PolicyStore under concurrency and crashes: separate processes (spawn), SIGKILL mid-save."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from autoaug.policies.policy import Policy
from autoaug.policies.store import PolicyStore

NUM_PROCS = 4  # racing savers (the machine has 2 cores: more only interleave the same races)
SAVES_PER_PROC = 5


@pytest.fixture(autouse=True)
def _children_can_import_this_module(monkeypatch):
    """Spawned children re-import this module by its name in pytest's importlib mode
    (``tests.policies.test_store_concurrency``) with the parent's ``sys.path``: it must hold the
    repository root."""
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2]))


def make_policy(i: int) -> Policy:
    return Policy(f"p{i}", 10, [[("Rotate", round(0.01 * (i % 100), 2), i % 10), ("Equalize", 0.5, 0)]])


def _save_worker(root: str, claim: str, worker: int, barrier, results) -> None:
    try:
        store = PolicyStore(root, claim=claim)
        barrier.wait(timeout=600)
        for k in range(SAVES_PER_PROC):
            i = worker * SAVES_PER_PROC + k
            results.put(("ok", i, store.save(make_policy(i), "shared", metadata={"item": i, "pid": os.getpid()})))
    except BaseException:  # report it to the test instead of dying silently
        import traceback

        results.put(("error", worker, traceback.format_exc()))


def _run_concurrent_saves(root: str, claim: str) -> dict[int, int]:
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(NUM_PROCS)
    results = ctx.Queue()
    procs = [ctx.Process(target=_save_worker, args=(root, claim, w, barrier, results)) for w in range(NUM_PROCS)]
    for p in procs:
        p.start()
    out, errors = {}, []
    try:
        for _ in range(NUM_PROCS * SAVES_PER_PROC):
            status, i, value = results.get(timeout=900)
            if status == "error":
                errors.append(f"worker {i}:\n{value}")
                break
            out[i] = value
    finally:
        for p in procs:
            p.join(timeout=60)
            if p.is_alive():
                p.kill()
    assert not errors, "\n".join(errors)
    assert [p.exitcode for p in procs] == [0] * NUM_PROCS
    return out


@pytest.mark.parametrize("claim", ["rename", "announce"])
def test_concurrent_saves_get_distinct_versions(tmp_path, claim):
    root = str(tmp_path / "store")
    versions = _run_concurrent_saves(root, claim)
    total = NUM_PROCS * SAVES_PER_PROC
    assert len(versions) == total
    assert len(set(versions.values())) == total, versions
    store = PolicyStore(root)
    assert store.versions("shared") == sorted(versions.values())
    if claim == "rename":  # nobody crashed, so no number was burnt
        assert sorted(versions.values()) == list(range(1, total + 1))
    for i, version in versions.items():
        record = store.get(f"shared@{version}")
        assert record.policy == make_policy(i)
        assert record.provenance["item"] == i
    assert ds.dataset(root, format="parquet").to_table().num_rows == total
    # no claim is left behind by a save that completed
    assert os.listdir(os.path.join(root, "shared", ".claims")) == []


# ---------------------------------------------------------------------------------------------
# A saver killed with SIGKILL in the middle of a save


def _killed_after_write(root: str) -> None:
    """Write the temporary version file completely, then die before the rename."""
    import autoaug.policies.store as store_module

    def die(self, tmp, final):
        os.kill(os.getpid(), signal.SIGKILL)

    store_module.PolicyStore._publish = die
    PolicyStore(root).save(make_policy(2), "x", metadata={"big": "y" * 1_000_000})


def _killed_during_write(root: str) -> None:
    """Write half of the Parquet bytes to the temporary file, then die."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    real_write_table = pq.write_table

    def half_then_die(table, where, **kwargs):
        buf = pa.BufferOutputStream()
        real_write_table(table, buf, **kwargs)
        data = buf.getvalue().to_pybytes()
        where.write(data[: len(data) // 2])
        where.flush()
        os.kill(os.getpid(), signal.SIGKILL)

    pq.write_table = half_then_die
    PolicyStore(root).save(make_policy(3), "x", metadata={"big": "z" * 1_000_000})


@pytest.mark.parametrize("victim", [_killed_after_write, _killed_during_write])
def test_killed_save_leaves_no_visible_version(tmp_path, victim):
    root = str(tmp_path / "store")
    store = PolicyStore(root)
    assert store.save(make_policy(1), "x") == 1

    proc = mp.get_context("spawn").Process(target=victim, args=(root,))
    proc.start()
    proc.join(timeout=120)
    assert proc.exitcode == -signal.SIGKILL

    # the partial file is there, hidden under a temporary name
    leftovers = [n for n in os.listdir(os.path.join(root, "x")) if n.startswith(".v000002.parquet.tmp-")]
    assert len(leftovers) == 1 and os.path.getsize(os.path.join(root, "x", leftovers[0])) > 0

    # readers see only the complete version
    assert store.versions("x") == [1]
    assert [(s.name, s.latest_version, s.num_versions) for s in store.list()] == [("x", 1, 1)]
    assert store.load("x@latest") == make_policy(1)
    assert ds.dataset(root, format="parquet").to_table().num_rows == 1

    # the next save succeeds; the dead saver's claimed number stays unused
    version = store.save(make_policy(4), "x")
    assert version == 3
    assert store.versions("x") == [1, 3]
    assert store.load("x") == make_policy(4)
