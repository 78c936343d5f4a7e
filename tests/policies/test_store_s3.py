"""The policy store on real object storage: an S3-compatible server (moto, started on 127.0.0.1
by tests/conftest.py) reached through pyarrow's S3FileSystem, by ``AWS_ENDPOINT_URL`` or by the
URI's own ``?endpoint_override=`` query string."""

from __future__ import annotations

import multiprocessing as mp
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from autoaug.core.errors import UserInputError
from autoaug.launch.cli import main
from autoaug.launch.preflight import check_writable
from autoaug.policies.policy import Policy
from autoaug.policies.store import CorruptVersion, PolicyStore, StoreNotFoundError

NUM_PROCS = 4
SAVES_PER_PROC = 3


@pytest.fixture(autouse=True)
def _children_can_import_this_module(monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2]))


def make_policy(i: int) -> Policy:
    return Policy(f"p{i}", 10, [[("Rotate", round(0.01 * (i % 100), 2), i % 10), ("Equalize", 0.5, 0)]])


def _fs(uri: str):
    return pafs.FileSystem.from_uri(uri)


def test_save_load_list_history_with_an_endpoint_in_the_uri(s3_server, s3_bucket, monkeypatch):
    monkeypatch.delenv("AWS_ENDPOINT_URL")  # only the URI's query string says where the server is
    host = s3_server.removeprefix("http://")
    uri = f"s3://{s3_bucket}/policies?endpoint_override={host}&scheme=http"
    store = PolicyStore(uri)
    assert store.filesystem.type_name == "s3"
    assert store.save(make_policy(1), "x", metadata={"n": 1}) == 1
    assert store.save(make_policy(2), "x") == 2
    assert store.save(make_policy(2), "x") == 2  # de-duplicated
    again = PolicyStore(uri)
    assert again.load("x@1") == make_policy(1) and again.get("x@1").provenance == {"n": 1}
    assert again.get("x@2").location == f"s3://{s3_bucket}/policies/x/v000002.parquet"
    (summary,) = again.list()
    assert (summary.name, summary.latest_version, summary.num_versions) == ("x", 2, 2)
    assert [r.version for r in again.history("x")] == [1, 2]
    assert again.to_table(["name", "version"]).num_rows == 2


def _save_worker(uri: str, worker: int, barrier, results) -> None:
    try:
        store = PolicyStore(uri)
        barrier.wait(timeout=300)
        for k in range(SAVES_PER_PROC):
            i = worker * SAVES_PER_PROC + k
            results.put(("ok", i, store.save(make_policy(i), "shared")))
    except BaseException:
        import traceback

        results.put(("error", worker, traceback.format_exc()))


@pytest.mark.timeout(600)
def test_concurrent_saves_get_distinct_versions(s3_bucket):
    uri = f"s3://{s3_bucket}/policies"
    ctx = mp.get_context("spawn")
    barrier, results = ctx.Barrier(NUM_PROCS), ctx.Queue()
    procs = [ctx.Process(target=_save_worker, args=(uri, w, barrier, results)) for w in range(NUM_PROCS)]
    for p in procs:
        p.start()
    saved, errors = {}, []
    try:
        for _ in range(NUM_PROCS * SAVES_PER_PROC):
            status, i, value = results.get(timeout=300)
            if status == "error":
                errors.append(value)
                break
            saved[i] = value
    finally:
        for p in procs:
            p.join(timeout=60)
            if p.is_alive():
                p.kill()
    assert not errors, errors[0]
    total = NUM_PROCS * SAVES_PER_PROC
    assert len(set(saved.values())) == total  # every save its own version
    store = PolicyStore(uri)
    assert store.versions("shared") == sorted(saved.values())
    for i, version in saved.items():
        assert store.load(f"shared@{version}") == make_policy(i)
    assert store.check().ok and not store.check(grace_seconds=0).removed  # no claim left behind


def test_claims_numbers_and_check_on_object_storage(s3_bucket):
    uri = f"s3://{s3_bucket}/policies"
    store = PolicyStore(uri)
    assert store.save(make_policy(1), "x") == 1
    fs, root = _fs(uri)
    # A saver killed after announcing its claim of v2: that number is skipped, never shared.
    stale = f"{root}/x/.claims/v000002.0123456789abcdef0123456789abcdef"
    with fs.open_output_stream(stale) as f:
        f.write(b"{}")
    with fs.open_output_stream(f"{root}/x/.v000002.parquet.tmp-abc") as f:
        f.write(b"partial")
    assert store.save(make_policy(3), "x") == 3
    # Deleting the latest version does not hand its number to other content.
    fs.delete_file(f"{root}/x/v000003.parquet")
    assert store.save(make_policy(4), "x") == 4
    # A corrupt version is listed as such; the others are not hidden.
    with fs.open_output_stream(f"{root}/x/v000001.parquet") as f:
        f.write(b"not parquet")
    records = PolicyStore(uri).history("x", include_corrupt=True)
    assert isinstance(records[0], CorruptVersion) and records[1].version == 4
    report = store.check(grace_seconds=0)
    assert [c.ref for c in report.corrupt] == ["x@1"] and report.verified == ("x@4",)
    assert sorted(report.removed) == sorted(
        f"s3://{s3_bucket}/{p}"
        for p in ("policies/x/.claims/v000002.0123456789abcdef0123456789abcdef", "policies/x/.v000002.parquet.tmp-abc")
    )
    assert fs.get_file_info(stale).type == pafs.FileType.NotFound


def test_missing_store_and_unwritable_bucket(s3_bucket, capsys):
    with pytest.raises(StoreNotFoundError, match="does not exist"):
        PolicyStore(f"s3://{s3_bucket}/nothing-here").load("x")
    assert main(["policies", "list", "--store", f"s3://{s3_bucket}/nothing-here"]) == 2
    assert f"policy store s3://{s3_bucket}/nothing-here does not exist" in capsys.readouterr().err
    check_writable(f"s3://{s3_bucket}/policies", what="--store")  # the probe is removed again
    fs, root = _fs(f"s3://{s3_bucket}/policies")
    assert [
        i.base_name
        for i in fs.get_file_info(pafs.FileSelector(s3_bucket, recursive=True))
        if i.type == pafs.FileType.File
    ] == []
    with pytest.raises(UserInputError, match=r"^--store s3://no-such-bucket-[0-9a-f]+/p is not writable"):
        check_writable(f"s3://no-such-bucket-{s3_bucket[-12:]}/p", what="--store")
