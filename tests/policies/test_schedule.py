"""Schedules: the policy of each epoch (stretched to any training length), the JSON form and its
content hash, the torchvision transform following the epoch, and the round trip through the store
(a schedule stored with its last stage, read back hash-checked)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from autoaug.core.errors import StoreError
from autoaug.launch.cli import main
from autoaug.policies import Policy
from autoaug.policies.reference import resolve, resolve_schedule
from autoaug.policies.schedule import Schedule
from autoaug.policies.store import PolicyStore

P0 = Policy("p0", 10, [], base="none")
P1 = Policy("p1", 10, [[("Invert", 1.0, 0)]], base="none")
P2 = Policy("p2", 10, [[("Rotate", 0.7, 2), ("Color", 0.3, 5)]], base="none")
S = Schedule("s", [(0.0, P0), (0.25, P1), (0.5, P2)])


def test_the_policy_of_an_epoch_follows_the_stages_as_fractions_of_training():
    assert [S.at(e, 12).name for e in range(12)] == ["p0"] * 3 + ["p1"] * 3 + ["p2"] * 6
    assert S.start_epochs(12) == [0, 3, 6] and S.start_epochs(300) == [0, 75, 150]
    assert [S.at(e, 300).name for e in (74, 75, 149, 150, 299)] == ["p0", "p1", "p1", "p2", "p2"]
    assert S.start_epochs(3) == [0, 1, 2] and S.final == P2
    fixed = Schedule.fixed(P1)
    assert fixed.is_fixed and all(fixed.at(e, 5) == P1 for e in range(5))
    with pytest.raises(ValueError, match="epoch -1 is invalid"):
        S.at(-1, 10)


@pytest.mark.parametrize(
    "stages, message",
    [
        ([], "at least one stage"),
        ([(0.1, P0)], "the first stage starts at 0"),
        ([(0.0, P0), (0.5, P1), (0.5, P2)], "starts increase strictly"),
        ([(0.0, P0), (1.0, P1)], "outside [0, 1)"),
        ([(0.0, P0), (0.5, P1.with_base("standard"))], "every stage of a schedule has one base"),
        ([(0.0, "p0")], "is not a Policy"),
    ],
)
def test_bad_schedules_are_refused_naming_the_stage(stages, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace(")", r"\)")):
        Schedule("s", stages)


def test_json_round_trip_and_content_hash():
    back = Schedule.from_json(S.to_json())
    assert back == S and back.content_hash == S.content_hash
    assert S.with_name("other").content_hash == S.content_hash  # names are not content
    assert Schedule("s", [(0.0, P0), (0.3, P1), (0.5, P2)]).content_hash != S.content_hash
    assert Schedule.fixed(P2).content_hash == P2.content_hash  # a fixed policy is one content
    doc = json.loads(S.to_json())
    doc["stages"][1]["start"] = 0.3
    with pytest.raises(ValueError, match="does not match its stages"):
        Schedule.from_dict(doc)
    with pytest.raises(ValueError, match="Duplicate|twice|duplicate"):
        Schedule.from_json('{"kind": "schedule", "kind": "schedule", "name": "s", "stages": []}')


def test_then_grows_a_history_and_keeps_one_stage_for_one_policy():
    grown = Schedule.fixed(P0).then(0.25, P1).then(0.5, P1).then(0.75, P2)
    assert [(s.start, s.policy.name) for s in grown.stages] == [(0.0, "p0"), (0.25, "p1"), (0.75, "p2")]
    # Cloned at 50%: the later stages of the clone are replaced.
    assert [s.start for s in S.then(0.5, P0).stages] == [0.0, 0.25, 0.5]


def test_the_torchvision_transform_follows_the_epoch():
    image = torch.randint(0, 256, (3, 8, 8), dtype=torch.uint8)
    t = S.to_torchvision(epochs=4)  # p0 (identity) in epoch 0, p1 (Invert) in epoch 1, p2 from epoch 2
    assert torch.equal(t(image), image)
    t.set_epoch(1)
    assert torch.equal(t(image), 255 - image) and t.policy == P1
    t.set_epoch(0)
    assert torch.equal(t(image), image)
    with pytest.raises(ValueError):
        t.set_epoch(-2)


def test_a_schedule_round_trips_through_the_store_and_the_resolver(tmp_path, capsys):
    path = tmp_path / "s.json"
    path.write_text(S.to_json())
    store = tmp_path / "store"
    assert main(["policies", "import", str(path), "--name", "sched", "--store", str(store)]) == 0
    found = resolve("sched@1", store=str(store))
    assert found.policy.content_hash == P2.content_hash  # stored: its last stage, hash-verified
    assert (
        found.schedule == S.with_name(found.schedule.name) and resolve_schedule("sched", str(store)) == found.schedule
    )
    assert resolve_schedule(str(path)) == S and resolve(str(path)).policy == P2
    assert resolve_schedule("standard").is_fixed  # a fixed policy: one stage
    capsys.readouterr()
    # export as JSON gives the schedule back; --stage K one policy; timm refuses in one line
    assert main(["policies", "export", "sched", "--store", str(store)]) == 0
    assert Schedule.from_json(capsys.readouterr().out) == found.schedule
    assert main(["policies", "export", "sched", "--stage", "1", "--store", str(store)]) == 0
    assert Policy.from_json(capsys.readouterr().out) == P1
    assert main(["policies", "export", "sched", "--format", "timm", "--store", str(store)]) == 2
    err = capsys.readouterr().err
    assert "is a schedule of 3 stages" in err and "--stage K" in err and len(err.strip().splitlines()) == 1
    assert main(["policies", "show", "sched", "--store", str(store)]) == 0
    out = capsys.readouterr().out
    assert "3 stages from 0%, 25%, 50% of training" in out and "stage 2: from 50% of training" in out
    # A provenance whose schedule no longer ends with the stored policy is refused, not trusted.
    record = PolicyStore(str(store)).get("sched@1")
    meta = json.loads(json.dumps(record.provenance))
    meta["schedule"] = {**Schedule("x", [(0.0, P0), (0.5, P1)]).to_dict()}
    with pytest.raises(StoreError, match="is not the stored policy"):  # refused when saved...
        PolicyStore(str(store)).save(P2, "forged", metadata=meta)
    import datetime

    import pyarrow.parquet as pq

    from autoaug.policies.artifact import canonical_json, encode_version

    (store / "forged").mkdir()  # ... and when a file altered behind the store's back is read
    pq.write_table(
        encode_version(P2, "forged", 1, canonical_json(meta, "metadata"), datetime.datetime.now(datetime.timezone.utc)),
        store / "forged" / "v000001.parquet",
    )
    with pytest.raises(StoreError, match="is not the stored policy"):
        resolve("forged", store=str(store))
    # Another schedule ending with the same policy is a new version, the same schedule is not.
    other = Schedule("s", [(0.0, P1), (0.5, P2)])
    meta_other = {"schedule": other.to_dict()}
    assert PolicyStore(str(store)).save(P2, "sched", metadata=meta_other) == 2
    assert PolicyStore(str(store)).save(P2, "sched", metadata=meta_other) == 2
    assert resolve_schedule("sched@2", str(store)).content_hash == other.content_hash
    with pytest.raises(StoreError, match="is not the stored policy"):  # refused before anything is written
        PolicyStore(str(store)).save(P1, "sched", metadata=meta_other)
    report = PolicyStore(str(store)).check()  # policies check reports it corrupt, the others verified
    assert [c.ref for c in report.corrupt] == ["forged@1"] and {"sched@1", "sched@2"} <= set(report.verified)


def test_a_schedules_dali_export_builds_one_policy_per_stage(tmp_path):
    import runpy

    pytest.importorskip("nvidia.dali")
    from autoaug.policies.export import schedule_to_dali_source

    s = Schedule("s", [(0.0, P1), (0.5, P2)])
    file = tmp_path / "s.py"
    file.write_text(schedule_to_dali_source(s))
    ns = runpy.run_path(str(file))
    assert [ns["policy_at"](e, 4).name for e in range(4)] == ["p1", "p1", "p2", "p2"]
    assert [start for start, _ in ns["STAGES"]] == [0.0, 0.5]
    assert np.isclose(ns["stage_1"].sub_policies[0][0][1], 0.7)


def test_a_version_stored_with_its_schedule_in_the_search_records_own_section_still_gives_it(tmp_path):
    """Versions stored before the schedule had the provenance's own key kept it in the search
    record's section (``method.schedule``): loading them still gives the schedule, not its last stage."""
    from autoaug.policies.schedule import provenance_schedule

    old = {"method": {"name": "pba", "schedule": S.to_dict()}}
    assert provenance_schedule(old, S.final) == S
    assert provenance_schedule({"schedule": S.to_dict()}, S.final) == S
    assert provenance_schedule({"method": {"name": "train"}}, S.final) is None
    store = PolicyStore(str(tmp_path / "store"))
    store.save(S.final, "old", old)
    assert resolve_schedule("old@1", store=str(tmp_path / "store")).content_hash == S.content_hash
