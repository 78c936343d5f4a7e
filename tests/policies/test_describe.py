"""A policy as people think of it (policies/describe.py): RandAugment and TrivialAugment points by
their family's parameters, small policies as their table, large unions by operation; every preset
and a stored TrivialAugment-family result fit a screen in ``autoaug policies show``, ``--all``
lists every sub-policy."""

from __future__ import annotations

import pytest

from autoaug.launch.cli import main
from autoaug.policies import presets
from autoaug.policies.describe import describe, family_of
from autoaug.policies.policy import Policy
from autoaug.policies.store import PolicyStore


def test_randaugment_and_trivialaugment_points_are_recognised_by_their_parameters():
    ra = family_of(presets.resolve("randaugment:n=2,m=9"))
    assert (ra.kind, ra.n, ra.m, len(ra.ops)) == ("randaugment", 2, 9, 14)
    ta = family_of(presets.resolve("trivialaugment"))
    assert (ta.kind, ta.bins, len(ta.ops)) == ("trivialaugment", (0, 30), 14)
    # a point of a family searched over a subset of the ops and bins
    sub = Policy("p", 31, [[(op, 1.0, b)] for op in ("Rotate", "Color", "Solarize") for b in range(4, 12)])
    assert family_of(sub) == type(ta)("trivialaugment", ("Rotate", "Color", "Solarize"), bins=(4, 11))
    three = Policy("r", 31, [[(a, 1.0, 5), (b, 1.0, 5)] for a in ("Rotate", "Color") for b in ("Rotate", "Color")])
    assert family_of(three).n == 2 and family_of(three).m == 5


@pytest.mark.parametrize(
    "subs",
    [
        [[("Rotate", 1.0, 5), ("Color", 1.0, 5)], [("Color", 1.0, 5), ("Rotate", 1.0, 5)]],  # not every pair
        [[("Rotate", 0.5, 5)], [("Color", 0.5, 5)]],  # probabilities below 1
        [[("Rotate", 1.0, 1)], [("Rotate", 1.0, 2)], [("Color", 1.0, 1)]],  # a bin missing for Color
        [[("Rotate", 1.0, 4)], [("Color", 1.0, 6)]],  # different magnitudes, one per op
    ],
)
def test_what_is_not_a_family_point_is_not_called_one(subs):
    assert family_of(Policy("x", 10, subs)) is None


def test_a_large_union_is_grouped_by_operation():
    aa, svhn = presets.resolve("autoaugment-cifar10"), presets.resolve("autoaugment-svhn")
    union = Policy(
        "u", 10, [[(o.op, o.probability, o.magnitude_bin) for o in s] for s in aa.sub_policies + svhn.sub_policies]
    )
    lines = describe(union)
    assert "50 sub-policies" in lines[0] and "--all" in lines[0]
    rows = {line.split()[0]: line.split() for line in lines[2:]}
    invert = sum(1 for s in union.sub_policies if any(o.op == "Invert" for o in s))
    assert rows["Invert"][1] == str(invert) and rows["Invert"][-1] == "-"  # no magnitude
    assert len(lines) <= 2 + 16


def _show(capsys, *argv) -> list[str]:
    assert main(["policies", "show", *argv]) == 0
    return capsys.readouterr().out.splitlines()


@pytest.mark.parametrize("ref", presets.names())
def test_every_preset_fits_a_screen_and_all_lists_every_sub_policy(ref, capsys):
    policy = presets.resolve(ref)
    assert len(_show(capsys, ref)) <= 40
    table = _show(capsys, ref, "--all")
    assert len(table) >= len(policy.sub_policies)


def test_a_stored_trivialaugment_family_result_fits_a_screen(tmp_path, capsys):
    store = PolicyStore(str(tmp_path / "store"))
    point = Policy(
        "found",
        31,
        [[(op, 1.0, b)] for op in ("Rotate", "Color", "Equalize") for b in range(31)],
        base="crop",
        ranges="wide",
    )
    store.save(point, "found")
    out = _show(capsys, "found@1", "--store", str(tmp_path / "store"))
    assert len(out) <= 40
    assert any(
        "TrivialAugment: one of 3 ops per image, magnitude uniform over bins 0-30 (of 31)" in line for line in out
    )
