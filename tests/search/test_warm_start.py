"""Warm start: known policies become the first candidates of a search, exactly as published."""

from __future__ import annotations

import pytest

from autoaug.policies import Policy
from autoaug.policies.presets import resolve
from autoaug.search.decide.warm_start import warm_start_points, warm_start_policies
from autoaug.search.space import SearchSpace


def test_published_policy_becomes_chunks_of_its_sub_policies_in_order():
    space = SearchSpace()
    published = resolve("autoaugment-cifar10")
    points = warm_start_points(["autoaugment-cifar10"], space)
    assert len(points) == 5
    decoded = [sub for p in points for sub in space.to_policy(p).sub_policies]
    assert decoded == list(published.sub_policies)


def test_a_short_last_chunk_is_filled_from_the_start_and_every_sub_policy_is_used():
    space = SearchSpace(num_sub_policies=4)
    published = resolve("autoaugment-cifar10")  # 25 = 6 x 4 + 1
    policies = warm_start_policies(["autoaugment-cifar10"], space)
    assert len(policies) == 7
    assert policies[-1].sub_policies == (published.sub_policies[24], *published.sub_policies[:3])
    used = {sub for p in policies for sub in p.sub_policies}
    assert used == set(published.sub_policies)


def test_several_references_and_a_policy_file(tmp_path):
    space = SearchSpace(num_sub_policies=2)
    mine = Policy("mine", 10, [[("Rotate", 0.7, 2), ("Invert", 0.1, 0)], [("Color", 0.4, 9), ("Equalize", 1.0, 3)]])
    path = tmp_path / "mine.json"
    path.write_text(mine.to_json())
    points = warm_start_points([str(path), "autoaugment-svhn"], space)
    assert len(points) == 1 + 13
    assert space.to_policy(points[0]).sub_policies == mine.sub_policies


@pytest.mark.parametrize(
    "ref, message",
    [
        ("randaugment:n=2,m=9", "does not fit the search space: .*num_magnitude_bins=31"),
        ("standard", "has no sub-policies"),
        ("no-such-preset", "warm start 'no-such-preset'"),
    ],
)
def test_a_reference_that_cannot_warm_start_is_named(ref, message):
    with pytest.raises(ValueError, match=message):
        warm_start_points([ref], SearchSpace())


# ----------------------------------------------------------------------------------------------
# Space families: the reference itself is the one candidate, and must be a point of the family


@pytest.mark.parametrize(
    "family, ref",
    [("randaugment", "randaugment:n=2,m=9"), ("randaugment", "randaugment"), ("trivialaugment", "trivialaugment")],
)
@pytest.mark.parametrize("base", ["standard", "crop"])
def test_a_family_warm_starts_from_its_published_point_on_the_spaces_base(family, ref, base):
    space = SearchSpace(family=family, base=base)
    policies = warm_start_policies([ref], space)
    published = resolve(ref).with_base(base)
    assert len(policies) == 1 and policies[0].content_hash == published.content_hash
    (point,) = warm_start_points([ref], space)
    assert space.to_policy(point).content_hash == published.content_hash


def test_a_family_warm_start_from_a_policy_file_point(tmp_path):
    space = SearchSpace(family="randaugment")
    mine = space.to_policy({**{f"use_{op}": op in ("Rotate", "Color") for op in space.op_choices}, "n": 1, "m": 5})
    path = tmp_path / "mine.json"
    path.write_text(mine.with_name("mine").to_json())
    assert warm_start_points([str(path), "randaugment:n=3,m=2"], space)[0] == space.to_params(mine)


@pytest.mark.parametrize(
    "family, ref, message",
    [
        (
            "randaugment",
            "autoaugment-cifar10",
            "warm start 'autoaugment-cifar10' is not a point of the randaugment family: ",
        ),
        ("randaugment", "trivialaugment", "not a point of the randaugment family: .*ranges='wide'"),
        ("trivialaugment", "randaugment:n=2,m=9", "not a point of the trivialaugment family: .*ranges='autoaugment'"),
        ("randaugment", "no-such-preset", "warm start 'no-such-preset'"),
    ],
)
def test_a_reference_that_is_not_a_point_of_the_family_is_one_line(family, ref, message):
    from autoaug.core.errors import UserInputError

    with pytest.raises(UserInputError, match=message) as info:
        warm_start_points([ref], SearchSpace(family=family))
    assert "\n" not in str(info.value)


def test_a_family_point_does_not_warm_start_the_aa_space():
    with pytest.raises(ValueError, match="warm start 'trivialaugment' does not fit the search space"):
        warm_start_points(["trivialaugment"], SearchSpace())
