"""PolicyStore: round trips on several pyarrow filesystems, versions, references, integrity."""

from __future__ import annotations

import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from autoaug.policies import presets
from autoaug.policies.diff import diff_policies
from autoaug.policies.policy import Policy
from autoaug.policies.store import (
    SCHEMA,
    SCHEMA_VERSION,
    AmbiguousReferenceError,
    CorruptArtifactError,
    InvalidNameError,
    PolicyNotFoundError,
    PolicyStore,
    StoreError,
)


def make_policy(name: str = "mine", p: float = 0.7) -> Policy:
    return Policy(
        name,
        10,
        [[("Rotate", p, 2), ("TranslateX", 0.3, 9)], [("Invert", 0.1, 0), ("Contrast", 0.2, 6)]],
    )


@pytest.fixture
def store(tmp_path) -> PolicyStore:
    return PolicyStore(str(tmp_path / "store"))


# ---------------------------------------------------------------------------------------------
# Round trips on different pyarrow filesystems


def _round_trip(store: PolicyStore) -> None:
    policy = presets.resolve("autoaugment-cifar10")
    provenance = {"search": {"trials": 3, "seed": 0}, "scores": [0.5, 0.61], "dataset": "abc123"}
    assert store.save(policy, "cifar10-wrn", metadata=provenance) == 1
    loaded = store.load("cifar10-wrn@latest")
    assert loaded == policy
    assert loaded.content_hash == policy.content_hash
    record = store.get("cifar10-wrn@1")
    assert record.provenance == provenance
    assert record.content_hash == policy.content_hash
    assert record.created_at.endswith("Z") and record.created_at[4] == "-"
    # a policy with non-default base/ranges and a different policy name keeps both
    wide = Policy("other-name", 31, [[("Identity", 1.0, 0)], [("Solarize", 0.25, 30)]], base="none", ranges="wide")
    assert store.save(wide, "cifar10-wrn") == 2
    assert store.load("cifar10-wrn") == wide
    assert store.load("cifar10-wrn@1") == policy


def test_round_trip_local_path(store):
    _round_trip(store)
    assert os.path.isfile(os.path.join(store.root, "cifar10-wrn", "v000001.parquet"))


def test_round_trip_subtree_filesystem(tmp_path, monkeypatch):
    """Paths inside a SubTreeFileSystem are relative: any use of open()/os on them would fail."""
    (tmp_path / "base").mkdir()
    subtree = pafs.SubTreeFileSystem(str(tmp_path / "base"), pafs.LocalFileSystem())
    monkeypatch.chdir(tmp_path)  # so relative paths could not accidentally resolve
    store = PolicyStore(subtree)
    _round_trip(store)
    assert (tmp_path / "base" / "cifar10-wrn" / "v000002.parquet").is_file()
    # the same files through a (filesystem, path) pair and a plain local path
    assert PolicyStore((subtree, "")).load("cifar10-wrn@1") == presets.resolve("autoaugment-cifar10")
    assert PolicyStore(str(tmp_path / "base")).load("cifar10-wrn@2").name == "other-name"
    record = store.get("cifar10-wrn@1")
    assert record.location == str(tmp_path / "base" / "cifar10-wrn" / "v000001.parquet")


def test_round_trip_file_uri(tmp_path):
    # file:// is a local path (autoaug.core.location), the same store as the plain path
    store = PolicyStore((tmp_path / "s").as_uri())  # file:///...
    assert store.uri == str(tmp_path / "s")
    _round_trip(store)
    assert PolicyStore(str(tmp_path / "s")).versions("cifar10-wrn") == [1, 2]
    assert store.get("cifar10-wrn@2").location == str(tmp_path / "s" / "cifar10-wrn" / "v000002.parquet")


def test_round_trip_in_memory_filesystem():
    """Arrow's in-memory mock filesystem (``mock://``) has no local files at all."""
    store = PolicyStore("mock:///policies")  # claim="auto": the announce-then-list protocol there
    with pytest.raises(ValueError, match="needs a local filesystem"):  # no POSIX rename on it
        PolicyStore("mock:///policies", claim="rename")
    _round_trip(store)
    store.attach_evaluation("cifar10-wrn@1", {"acc": 0.9})
    assert store.get("cifar10-wrn@1").evaluations[0].results == {"acc": 0.9}
    assert store.to_table(["name", "version"]).num_rows == 2


def test_default_location_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("AUTOAUG_STORE", str(tmp_path / "env-store"))
    assert PolicyStore().uri == str(tmp_path / "env-store")
    monkeypatch.delenv("AUTOAUG_STORE")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert PolicyStore().uri == str(tmp_path / "home" / ".autoaug" / "policies")


def test_relative_local_path_is_made_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    store = PolicyStore("rel")
    store.save(make_policy(), "a")
    monkeypatch.chdir("/")
    assert store.load("a") == make_policy()


def test_bad_locations():
    with pytest.raises(TypeError, match="uri must be"):
        PolicyStore(42)
    with pytest.raises(ValueError, match="empty store location"):
        PolicyStore("  ")
    with pytest.raises(ValueError, match="cannot open store 'nosuchscheme://x'"):
        PolicyStore("nosuchscheme://x")
    with pytest.raises(ValueError, match="claim="):
        PolicyStore("mock:///x", claim="rename")
    with pytest.raises(ValueError, match="claim must be"):
        PolicyStore("mock:///x", claim="lock")


# ---------------------------------------------------------------------------------------------
# Versions, de-duplication, references


def test_versions_dedup_and_force(store):
    a, b = make_policy(p=0.7), make_policy(p=0.8)
    assert store.save(a, "x") == 1
    assert store.save(a, "x") == 1  # same content as latest: not written again
    assert store.save(a.with_name("renamed"), "x") == 1  # the hash ignores the policy's name
    assert store.save(b, "x") == 2
    assert store.save(a, "x") == 3  # same as v1 but not as the latest: a new version
    assert store.save(a, "x", force=True) == 4
    assert store.versions("x") == [1, 2, 3, 4]
    assert [r.version for r in store.history("x")] == [1, 2, 3, 4]
    assert store.load("x@2") == b
    assert store.load("x") == a
    # versions of other names are independent
    assert store.save(b, "y") == 1


def test_versions_are_immutable_files(store):
    store.save(make_policy(p=0.1), "x")
    path = os.path.join(store.root, "x", "v000001.parquet")
    before = open(path, "rb").read()
    store.save(make_policy(p=0.2), "x")
    store.attach_evaluation("x@1", {"acc": 0.5})
    assert open(path, "rb").read() == before


def test_list_summaries(store):
    assert store.list() == []
    store.save(make_policy(p=0.1), "b-policy")
    store.save(make_policy(p=0.2), "b-policy")
    store.save(make_policy(p=0.3), "a-policy")
    summaries = store.list()
    assert [(s.name, s.latest_version, s.num_versions) for s in summaries] == [("a-policy", 1, 1), ("b-policy", 2, 2)]
    b = summaries[1]
    assert b.created_at <= b.updated_at
    assert b.content_hash == make_policy(p=0.2).content_hash
    assert b.created_at == store.get("b-policy@1").created_at


def test_hash_prefix_references(store):
    p1, p2 = make_policy(p=0.1), make_policy(p=0.2)
    store.save(p1, "one")
    store.save(p2, "two")
    assert store.load(p1.content_hash[:6]) == p1
    assert store.load(p2.content_hash.upper()[:10]) == p2
    assert store.get(p2.content_hash).ref == "two@1"
    # the same content under two names: the newest record wins
    store.save(p1.with_name("copy"), "three")
    assert store.get(p1.content_hash[:8]).ref == "three@1"


def test_ambiguous_hash_prefix_lists_matches(store):
    # two policies whose content hashes share their first 6 hex digits (found by a search)
    p1, p2 = make_policy(p=0.003602), make_policy(p=0.003613)
    assert p1.content_hash[:6] == p2.content_hash[:6] == "e1bb98"
    assert p1.content_hash[:7] != p2.content_hash[:7]
    store.save(p1, "first")
    store.save(p2, "second")
    with pytest.raises(AmbiguousReferenceError) as info:
        store.load("e1bb98")
    message = str(info.value)
    assert "'e1bb98' is ambiguous" in message
    assert f"first@1 ({p1.content_hash[:12]})" in message and f"second@1 ({p2.content_hash[:12]})" in message
    assert store.load(p2.content_hash[:7]) == p2
    with pytest.raises(PolicyNotFoundError, match="at least 6 hex digits"):
        store.load("e1bb9")


def test_unknown_references_list_what_exists(store):
    store.save(make_policy(p=0.1), "alpha")
    store.save(make_policy(p=0.2), "alpha")
    store.save(make_policy(), "beta")
    with pytest.raises(PolicyNotFoundError, match=r"no stored policy matches 'gamma'.*stored names: alpha, beta"):
        store.load("gamma")
    with pytest.raises(PolicyNotFoundError, match=r"no policy named 'gamma'.*stored names: alpha, beta"):
        store.load("gamma@1")
    with pytest.raises(PolicyNotFoundError, match=r"'alpha' has no version 7.*stored versions: 1, 2"):
        store.load("alpha@7")
    with pytest.raises(PolicyNotFoundError, match="invalid version 'x'"):
        store.load("alpha@x")
    with pytest.raises(PolicyNotFoundError, match="invalid version '0'"):
        store.load("alpha@0")
    with pytest.raises(PolicyNotFoundError, match="content hash starting with 'abcdef12'"):
        store.load("abcdef12")
    with pytest.raises(PolicyNotFoundError, match="empty policy reference"):
        store.load("")
    with pytest.raises(PolicyNotFoundError, match=r"no policy named 'gamma'.*stored names: alpha, beta"):
        store.history("gamma")


def test_names_are_validated(store):
    policy = make_policy()
    for bad in ["", "a/b", "a\\b", "a@b", "../x", ".hidden", "_private", "a b", "x:y", "é", "a" * 129]:
        with pytest.raises(InvalidNameError, match="invalid policy name"):
            store.save(policy, bad)
    with pytest.raises(InvalidNameError, match="must be a string"):
        store.save(policy, 3)
    with pytest.raises(InvalidNameError):
        store.load("a/b@1")
    assert store.save(policy, "ok.name_1-2+x") == 1
    assert store.list()[0].name == "ok.name_1-2+x"


def test_save_validates_arguments(store):
    with pytest.raises(TypeError, match="must be a policies.Policy"):
        store.save(make_policy().to_dict(), "x")
    with pytest.raises(TypeError, match=r"metadata must be a dict"):
        store.save(make_policy(), "x", metadata=[1, 2])
    with pytest.raises(
        TypeError,
        match=r"metadata\['cfg'\]\['fn'\] is a builtins.builtin_function_or_method, which is not JSON-serializable",
    ):
        store.save(
            make_policy(), "x", metadata={"cfg": {"fn": len}}
        )  # not print: Ray Tune replaces builtins.print in a process that ran a search (tqdm_ray)
    with pytest.raises(ValueError, match=r"metadata\['scores'\]\[1\] is nan"):
        store.save(make_policy(), "x", metadata={"scores": [0.1, float("nan")]})
    with pytest.raises(TypeError, match="keys must be strings"):
        store.save(make_policy(), "x", metadata={1: "a"})
    assert store.versions("x") == []
    # numpy values are converted exactly
    store.save(make_policy(), "x", metadata={"n": np.int64(3), "a": np.arange(3), "f": np.float32(0.5)})
    assert store.get("x").provenance == {"n": 3, "a": [0, 1, 2], "f": 0.5}


# ---------------------------------------------------------------------------------------------
# Evaluations


def test_attach_evaluation(store):
    store.save(make_policy(p=0.1), "x")
    store.save(make_policy(p=0.2), "x")
    first = store.attach_evaluation("x@1", {"model": "wrn-40-2", "seeds": [0, 1], "test_accuracy": [0.95, 0.96]})
    second = store.attach_evaluation("x@1", {"model": "wrn-28-10", "test_accuracy": [0.97]})
    assert first.attached_at <= second.attached_at
    record = store.get("x@1")
    assert [e.results["model"] for e in record.evaluations] == ["wrn-40-2", "wrn-28-10"]
    assert record.evaluations[0].results["test_accuracy"] == [0.95, 0.96]
    assert store.get("x@2").evaluations == ()
    assert store.load("x@1") == make_policy(p=0.1)  # versions unchanged
    with pytest.raises(PolicyNotFoundError):
        store.attach_evaluation("x@3", {"a": 1})
    with pytest.raises(TypeError, match="evaluation must be a dict"):
        store.attach_evaluation("x@1", 0.9)


def test_misplaced_evaluation_is_rejected(store):
    store.save(make_policy(p=0.1), "x")
    store.save(make_policy(p=0.2), "x")
    store.attach_evaluation("x@1", {"a": 1})
    folder1 = os.path.join(store.root, "x", "_evaluations", "v000001")
    folder2 = os.path.join(store.root, "x", "_evaluations", "v000002")
    os.makedirs(folder2)
    (name,) = os.listdir(folder1)
    os.rename(os.path.join(folder1, name), os.path.join(folder2, name))
    with pytest.raises(CorruptArtifactError, match=f"evaluation file .*{name}.* not to x@2"):
        store.get("x@2")


# ---------------------------------------------------------------------------------------------
# Integrity


def _version_file(store, name="x", version=1) -> str:
    return os.path.join(store.root, name, f"v{version:06d}.parquet")


def test_truncated_artifact_is_rejected(store):
    store.save(make_policy(), "x")
    path = _version_file(store)
    data = open(path, "rb").read()
    with open(path, "wb") as f:
        f.write(data[: len(data) // 2])
    with pytest.raises(CorruptArtifactError, match=f"cannot read policy artifact {path}: truncated"):
        store.load("x")
    with open(path, "wb") as f:
        f.write(b"")
    with pytest.raises(CorruptArtifactError, match=path):
        store.get("x@1")


def test_tampered_artifact_is_rejected(store):
    store.save(make_policy(p=0.7), "x")
    path = _version_file(store)
    table = pq.read_table(path)
    row = table.to_pylist()[0]
    row["sub_policies"][0][0]["probability"] = 1.0  # content changed, recorded hash kept
    pq.write_table(pa.Table.from_pylist([row], schema=table.schema), path)
    with pytest.raises(CorruptArtifactError, match=f"content hash mismatch in {path}.*modified after it was saved"):
        store.load("x")
    # listing reports the damaged version as corrupt (naming the file) instead of raising
    (summary,) = store.list()
    assert summary.corrupt == (1,) and summary.content_hash == "" and path in summary.problems[0]


def test_artifact_with_wrong_identity_or_newer_schema(store):
    store.save(make_policy(), "x")
    path = _version_file(store)
    os.makedirs(os.path.join(store.root, "y"))
    copy = _version_file(store, "y", 1)
    with open(path, "rb") as src, open(copy, "wb") as dst:
        dst.write(src.read())
    with pytest.raises(CorruptArtifactError, match=f"{copy} records x@1 but is stored as y@1"):
        store.load("y")
    table = pq.read_table(path)
    newer = table.replace_schema_metadata({b"autoaug.store.schema_version": str(SCHEMA_VERSION + 1).encode()})
    pq.write_table(newer, path)
    with pytest.raises(StoreError, match="upgrade autoaug"):
        store.load("x")
    pq.write_table(pa.table({"a": [1]}), path)
    with pytest.raises(CorruptArtifactError, match="not a policy store artifact"):
        store.load("x")


def test_loading_never_unpickles(store):
    """Only Parquet columns and JSON are read: a pickle in provenance stays an inert string."""
    import pickle

    payload = pickle.dumps(os.system).hex()
    store.save(make_policy(), "x", metadata={"blob": payload})
    assert store.get("x").provenance == {"blob": payload}


# ---------------------------------------------------------------------------------------------
# Format


def test_whole_store_reads_as_one_arrow_table(store):
    store.save(make_policy(p=0.1), "a", metadata={"k": 1})
    store.save(make_policy(p=0.2), "a")
    store.save(presets.resolve("autoaugment-svhn"), "b")
    store.attach_evaluation("a@1", {"acc": 0.9})  # evaluations are hidden from the dataset
    table = ds.dataset(store.root, format="parquet").to_table()
    assert table.num_rows == 3
    assert table.schema.equals(SCHEMA, check_metadata=False)
    assert table.schema.metadata[b"autoaug.store.schema_version"] == str(SCHEMA_VERSION).encode()
    rows = sorted(
        table.select(["name", "version", "content_hash", "schema_version"]).to_pylist(),
        key=lambda r: (r["name"], r["version"]),
    )
    assert [(r["name"], r["version"]) for r in rows] == [("a", 1), ("a", 2), ("b", 1)]
    assert rows[2]["content_hash"] == presets.resolve("autoaugment-svhn").content_hash
    assert {r["schema_version"] for r in rows} == {SCHEMA_VERSION}
    sub = table.filter(pa.compute.equal(table["name"], "b"))["sub_policies"].to_pylist()[0]
    assert sub == presets.resolve("autoaugment-svhn").to_dict()["sub_policies"]
    by_key = {(r["name"], r["version"]): r for r in table.select(["name", "version", "provenance_json"]).to_pylist()}
    assert json.loads(by_key[("a", 1)]["provenance_json"]) == {"k": 1}
    assert json.loads(by_key[("a", 2)]["provenance_json"]) == {}
    assert store.to_table(["name"]).num_rows == 3


def test_schema_types():
    assert SCHEMA.field("sub_policies").type == pa.list_(
        pa.field(
            "sub_policy",
            pa.list_(
                pa.field(
                    "op",
                    pa.struct(
                        [
                            pa.field("op", pa.string(), nullable=False),
                            pa.field("probability", pa.float64(), nullable=False),
                            pa.field("magnitude_bin", pa.int32(), nullable=False),
                        ]
                    ),
                    nullable=False,
                )
            ),
            nullable=False,
        )
    )
    assert SCHEMA.field("created_at").type == pa.timestamp("us", tz="UTC")


def test_export_and_import_json(store):
    policy = presets.resolve("autoaugment-imagenet")
    store.save(policy, "img")
    text = store.export_json("img")
    assert text == policy.to_json()
    assert store.import_json(text, "img2", {"source": "export"}) == 1
    assert store.load("img2") == policy


# ---------------------------------------------------------------------------------------------
# Diff


def test_diff_added_removed_changed(store):
    a = Policy(
        "a",
        10,
        [
            [("Rotate", 0.7, 2), ("TranslateX", 0.3, 9)],
            [("Invert", 0.1, 0), ("Contrast", 0.2, 6)],
            [("Equalize", 0.5, 0), ("Solarize", 0.4, 5)],
        ],
    )
    b = Policy(
        "a",
        10,
        [
            [("Invert", 0.1, 0), ("Contrast", 0.2, 6)],
            [("Rotate", 0.8, 2), ("TranslateX", 0.3, 7)],  # changed: same ops, other p / bin
            [("Color", 0.9, 9), ("Brightness", 0.1, 3)],  # added
        ],
    )
    store.save(a, "p")
    store.save(b, "p")
    d = store.diff("p@1", "p@2")
    assert d.unchanged == 1
    assert [(c.index_a, c.index_b) for c in d.changed] == [(0, 1)]
    assert [i for i, _ in d.removed] == [2] and d.removed[0][1][0].op == "Equalize"
    assert [i for i, _ in d.added] == [2] and d.added[0][1][0].op == "Color"
    assert not d.same_content and d.fields == ()
    text = str(d)
    assert text.splitlines()[:2] == ["--- p@1", "+++ p@2"]
    assert "~ [0]->[1] Rotate(p=0.7->0.8 m2)  ->  TranslateX(p=0.3 m9->7)" in text
    assert "- [2] Equalize(p=0.5)  ->  Solarize(p=0.4 m5)" in text
    assert "+ [2] Color(p=0.9 m9)  ->  Brightness(p=0.1 m3)" in text
    assert text.splitlines()[-1] == "1 added, 1 removed, 1 changed, 1 unchanged sub-policies"


def test_diff_same_content_reordered_and_fields():
    a = make_policy("one")
    b = Policy("two", 10, list(reversed(a.sub_policies)))
    d = diff_policies(a, b)
    assert d.same_content and d.reordered
    assert d.fields == (("name", "one", "two"),)
    assert "(same content, different order)" in str(d)
    c = Policy("one", 12, a.sub_policies, base="none")
    d2 = diff_policies(a, c, "A", "C")
    assert not d2.same_content
    assert ("num_magnitude_bins", 10, 12) in d2.fields and ("base", "standard", "none") in d2.fields
    assert "  num_magnitude_bins: 10 -> 12" in str(d2)
    identity = diff_policies(presets.resolve("none"), presets.resolve("autoaugment-cifar10"))
    assert len(identity.added) == 25 and identity.unchanged == 0
    with pytest.raises(TypeError, match="must be a policies.Policy"):
        diff_policies(a, "b")


# ---------------------------------------------------------------------------------------------
# Healing: corrupt versions, numbers never reused, leftovers of killed saves


def test_version_numbers_are_never_reused_after_a_delete(store):
    assert store.save(make_policy(p=0.1), "x") == 1
    assert store.save(make_policy(p=0.2), "x") == 2
    os.remove(_version_file(store, "x", 2))  # the latest version deleted
    assert store.versions("x") == [1]
    assert store.save(make_policy(p=0.3), "x") == 3  # not 2: "x@2" never means other content
    with pytest.raises(PolicyNotFoundError, match="has no version 2"):
        store.load("x@2")
    os.remove(_version_file(store, "x", 1))
    os.remove(_version_file(store, "x", 3))
    assert store.save(make_policy(p=0.4), "x") == 4


def test_a_corrupt_latest_version_does_not_block_saves(store):
    store.save(make_policy(p=0.1), "x")
    with open(_version_file(store), "wb") as f:
        f.write(b"garbage")
    again = PolicyStore(store.uri)  # another process: nothing cached
    assert again.save(make_policy(p=0.1), "x") == 2  # same content, but @1 cannot be verified
    assert again.load("x@latest") == make_policy(p=0.1)


def test_history_lists_corrupt_versions_when_asked(store):
    from autoaug.policies.store import CorruptVersion

    for p in (0.1, 0.2, 0.3):
        store.save(make_policy(p=p), "x")
    with open(_version_file(store, "x", 2), "wb") as f:
        f.write(b"garbage")
    with pytest.raises(CorruptArtifactError, match="v000002.parquet"):
        store.history("x")
    records = store.history("x", include_corrupt=True)
    assert [r.version for r in records] == [1, 2, 3]
    assert isinstance(records[1], CorruptVersion) and "v000002.parquet" in records[1].error
    assert records[2].policy == make_policy(p=0.3)


def test_check_reports_corrupt_versions_and_sweeps_by_age(store):
    from datetime import datetime, timedelta, timezone

    store.save(make_policy(p=0.1), "x")
    store.save(make_policy(p=0.2), "x")
    store.attach_evaluation("x@1", {"acc": 0.5})
    leftovers = [
        os.path.join(store.root, "x", ".claims", "v000007.0123456789abcdef0123456789abcdef"),
        os.path.join(store.root, "x", ".claims", ".staging-abc"),
        os.path.join(store.root, "x", ".v000007.parquet.tmp-abc"),
        os.path.join(store.root, "x", "_evaluations", "v000001", ".20260101T000000Z-abc.json.tmp"),
    ]
    for path in leftovers:
        open(path, "wb").close()
    report = store.check()
    assert report.ok and report.verified == ("x@1", "x@2") and not report.removed
    assert sorted(report.kept) == sorted(leftovers)
    later = datetime.now(timezone.utc) + timedelta(hours=2)
    report = store.check(now=later)
    assert sorted(report.removed) == sorted(leftovers) and not any(os.path.exists(p) for p in leftovers)
    assert store.versions("x") == [1, 2] and store.get("x@1").evaluations[0].results == {"acc": 0.5}
    with open(_version_file(store, "x", 2), "r+b") as f:
        f.truncate(50)
    report = store.check()
    assert not report.ok and [c.ref for c in report.corrupt] == ["x@2"] and report.verified == ("x@1",)


def test_check_on_a_read_only_store_does_not_report_leftovers_as_removed(store):
    import errno

    from autoaug.core.errors import StorageAccessError

    store.save(make_policy(p=0.1), "x")
    leftover = os.path.join(store.root, "x", ".v000007.parquet.tmp-abc")
    open(leftover, "wb").close()

    class ReadOnly:  # the store's filesystem, refusing deletes as a read-only mount does
        def __init__(self, fs):
            self._fs = fs

        def __getattr__(self, name):
            return getattr(self._fs, name)

        def delete_file(self, path):
            raise OSError(errno.EROFS, "Read-only file system", path)

    store._fs = ReadOnly(store._fs)
    with pytest.raises(
        StorageAccessError,
        match=r"leftover of the policy store .*\.v000007\.parquet\.tmp-abc: "
        r".*read-only",
    ) as info:
        store.check(grace_seconds=0)
    assert "\n" not in str(info.value) and os.path.exists(leftover)


def test_reads_of_a_store_that_does_not_exist(tmp_path):
    from autoaug.policies.store import StoreNotFoundError

    store = PolicyStore(str(tmp_path / "nope"))
    assert not store.exists() and store.list() == []
    for call in (lambda: store.load("x"), lambda: store.load("x@1"), lambda: store.history("x"), store.check):
        with pytest.raises(StoreNotFoundError, match=f"policy store {tmp_path / 'nope'} does not exist"):
            call()
    assert not (tmp_path / "nope").exists()


# ---------------------------------------------------------------------------------------------
# The index (autoaug.policies.index): one small entry per version, a local store listed from it


def _entry_path(store: PolicyStore, name: str = "x", version: int = 1) -> str:
    return os.path.join(store.root, name, "_index", f"v{version:06d}.json")


def test_every_save_writes_an_index_entry_that_lists_the_store_without_reading_parquet(store):
    import hashlib
    import shutil

    from autoaug.policies.index import list_local

    store.save(make_policy(p=0.1), "b-policy")
    store.save(make_policy(p=0.2), "b-policy")
    store.save(make_policy(p=0.3), "a-policy")
    entry = json.loads(open(_entry_path(store, "b-policy", 2)).read())
    data = open(_version_file(store, "b-policy", 2), "rb").read()
    assert entry == {
        "name": "b-policy",
        "version": 2,
        "content_hash": make_policy(p=0.2).content_hash,
        "created_at": store.get("b-policy@2").created_at,
        "size": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "schema_version": SCHEMA_VERSION,
    }
    listed = store.list()
    assert list_local(store.root) == listed  # what the command prints, from the index alone
    assert ds.dataset(store.root, format="parquet").to_table().num_rows == 3  # the index is not a version
    # Without the index (a store saved before it existed) the files are read: the same summaries
    shutil.rmtree(os.path.join(store.root, "b-policy", "_index"))
    assert list_local(store.root) is None and store.list() == listed
    report = store.check()  # writes the entries it lacked
    assert report.indexed == ("b-policy@1", "b-policy@2") and list_local(store.root) == listed
    assert store.check().indexed == ()


def test_an_index_entry_is_believed_only_while_its_file_holds_what_it_says(store):
    from autoaug.policies.index import list_local

    store.save(make_policy(p=0.7), "x")
    path, good = _entry_path(store), open(_entry_path(store)).read()
    assert list_local(store.root) is not None
    # an entry claiming another hash or time than its file holds (the digest still matching)
    for field, value in (("content_hash", "0" * 64), ("created_at", "2001-01-01T00:00:00.000000Z")):
        forged = json.loads(good)
        forged[field] = value
        open(path, "w").write(json.dumps(forged))
        assert list_local(store.root) is None and store.list()[0].content_hash == make_policy(p=0.7).content_hash
    for broken in ("{", "[]", json.dumps({**json.loads(good), "version": 2})):
        open(path, "w").write(broken)
        assert list_local(store.root) is None
    open(path, "w").write(good)
    # a version file changed after its save: the index is not believed, the listing reports it corrupt
    with open(_version_file(store), "r+b") as f:
        f.truncate(100)
    assert list_local(store.root) is None
    (summary,) = store.list()
    assert summary.corrupt == (1,) and summary.content_hash == ""


def test_a_save_killed_before_publishing_leaves_no_index_entry_behind(store, monkeypatch):
    publish = store._publish

    def die(tmp, final):  # the index entry is published, then the driver dies before the version is
        if final.endswith(".parquet"):
            raise KeyboardInterrupt
        publish(tmp, final)

    store.save(make_policy(p=0.1), "x")
    monkeypatch.setattr(store, "_publish", die)
    with pytest.raises(KeyboardInterrupt):
        store.save(make_policy(p=0.2), "x")
    assert sorted(os.listdir(os.path.join(store.root, "x", "_index"))) == ["v000001.json"]
    assert store.versions("x") == [1]


# ---------------------------------------------------------------------------------------------
# Crashes at a failpoint (autoaug.core.failpoints, docs/failpoints.md)


_SAVE = (
    "from autoaug.policies import presets; from autoaug.policies.store import PolicyStore; "
    "PolicyStore({root!r}).save(presets.resolve('autoaugment-svhn'), 'x')"
)


def test_a_saver_killed_between_the_parquet_and_its_index_leaves_nothing_visible_and_check_repairs(store, tmp_path):
    """SIGKILL at ``store.after_version_write``: the version's Parquet is written under its
    temporary name, its index entry is not; no reader sees a version, ``policies check`` removes
    what the save left, and the next save works (under the next number: the killed one was issued)."""
    import signal
    import subprocess
    import sys

    from autoaug.core.failpoints import ENV_VAR, FIRED_ENV_VAR
    from autoaug.launch.cli import main

    store.save(make_policy(p=0.1), "x")
    env = {**os.environ, ENV_VAR: "store.after_version_write=kill", FIRED_ENV_VAR: str(tmp_path / "fired")}
    saver = subprocess.run([sys.executable, "-c", _SAVE.format(root=store.root)], env=env, timeout=120)
    assert saver.returncode == -signal.SIGKILL and (tmp_path / "fired" / "store.after_version_write").is_file()
    folder = os.path.join(store.root, "x")
    left = sorted(os.listdir(folder))
    assert any(n.startswith(".v000002.parquet.tmp-") for n in left) and "v000002.parquet" not in left
    assert sorted(os.listdir(os.path.join(folder, "_index"))) == ["v000001.json"]  # no index entry for it
    assert store.versions("x") == [1] and [(s.latest_version, s.num_versions, s.corrupt) for s in store.list()] == [
        (1, 1, ())
    ]
    assert store.load("x") == make_policy(p=0.1)

    report = store.check(grace_seconds=0)
    assert report.verified == ("x@1",) and report.corrupt == ()
    assert any(".v000002.parquet.tmp-" in r for r in report.removed)
    assert not [n for n in os.listdir(folder) if ".tmp-" in n]
    assert store.save(presets.resolve("autoaugment-svhn"), "x") == 3  # 2 was issued to the killed save
    assert store.load("x@3") == presets.resolve("autoaugment-svhn") and store.versions("x") == [1, 3]
    assert main(["policies", "check", "--store", store.root]) == 0


def test_a_full_disk_between_the_parquet_and_its_index_is_one_error_and_leaves_no_half_written_version(store):
    from autoaug.core.errors import StorageError
    from autoaug.core.failpoints import armed

    store.save(make_policy(p=0.1), "x")
    with armed("store.after_version_write=enospc"), pytest.raises(StorageError) as exc:
        store.save(make_policy(p=0.2), "x")
    message = str(exc.value)
    assert "\n" not in message and "policy store" in message and store.root in message
    assert [n for n in os.listdir(os.path.join(store.root, "x")) if n.startswith(".v")] == []  # tmp removed
    assert store.versions("x") == [1] and store.check(grace_seconds=0).removed == ()
    assert store.save(make_policy(p=0.2), "x") == 3  # the next save works
