"""The search space: parameter dict <-> Policy, and what Optuna can sample from it."""

from __future__ import annotations

import json
import random

import optuna
import pytest

from autoaug.policies import Policy, ops
from autoaug.policies.presets import resolve
from autoaug.search.space import MAX_PROBABILITIES, SearchSpace

optuna.logging.set_verbosity(optuna.logging.WARNING)

GRID = [k / 10 for k in range(11)]


def _sample(space: SearchSpace, n: int, sampler: optuna.samplers.BaseSampler) -> list[dict]:
    study = optuna.create_study(direction="maximize", sampler=sampler)
    out = []
    for k in range(n):
        trial = study.ask(fixed_distributions=space.distributions())
        out.append(trial.params)
        study.tell(trial, float(k % 7))
    return out


def test_defaults_are_the_autoaugment_space():
    space = SearchSpace()
    assert space.num_sub_policies == 5 and space.ops_per_sub_policy == 2
    assert space.op_choices == ops.AUTOAUGMENT_OPS and len(space.op_choices) == 16
    assert space.probabilities == tuple(GRID)
    assert len(space.param_names()) == 5 * 2 * 3
    # (16 x 11 x 10) ** 10, as in the paper
    assert space.size == (16 * 11 * 10) ** 10


def test_round_trip_policy_params_policy():
    space = SearchSpace()
    published = resolve("autoaugment-cifar10")
    policy = Policy("mine", 10, [list(sub) for sub in published.sub_policies[:5]])
    params = space.to_params(policy)
    assert set(params) == set(space.param_names())
    assert space.to_policy(params, name="mine") == policy


@pytest.mark.parametrize("sampler", ["tpe", "random"])
def test_round_trip_params_policy_params_on_sampled_trials(sampler):
    space = SearchSpace(exclude_ops=("SamplePairing",))
    if sampler == "tpe":
        s = optuna.samplers.TPESampler(seed=3, multivariate=True, n_startup_trials=5)
    else:
        s = optuna.samplers.RandomSampler(seed=3)
    seen_probs = set()
    for params in _sample(space, 40, s):
        policy = space.to_policy(params, name="cand")
        again = space.to_params(policy)
        assert again.keys() == params.keys()
        for key, value in params.items():
            if key.endswith("_prob"):
                assert again[key] == pytest.approx(value, abs=1e-9)
                assert again[key] in GRID  # snapped exactly onto the grid
                seen_probs.add(again[key])
            else:
                assert again[key] == value
        assert space.to_policy(again, name="cand") == policy
        assert all(op.op != "SamplePairing" for sub in policy.sub_policies for op in sub)
        assert all(op.probability in GRID for sub in policy.sub_policies for op in sub)
    assert len(seen_probs) > 5


def test_define_by_run_matches_the_dict_space():
    space = SearchSpace(num_sub_policies=3)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    trial = study.ask()
    policy = space.suggest(trial, name="dbr")
    assert set(trial.params) == set(space.param_names())
    assert trial.distributions == space.distributions()
    assert space.to_policy(trial.params, name="dbr") == policy
    assert len(policy.sub_policies) == 3


def test_probability_distribution_only_holds_the_eleven_values():
    dist = SearchSpace().distributions()["sp0_op0_prob"]
    assert (dist.low, dist.high, dist.step) == (0.0, 1.0, 0.1)
    assert dist._contains(0.3) and not dist._contains(0.35)


def test_random_params_cover_the_space_on_its_grid_and_repeat_with_the_seed():
    """The benchmarks' random policies and PBA's random members: every parameter drawn on the
    space's grid (a policy it encodes), the same seed drawing the same ones."""
    import random

    space = SearchSpace(exclude_ops=("Invert",))
    draws = [space.random_params(random.Random(seed)) for seed in range(40)]
    for params in draws:
        assert list(params) == space.param_names()
        space.to_policy(params)  # on the grid, or it raises
    values = {name: {d[name] for d in draws} for name in space.param_names()}
    assert values["sp0_op0_type"] <= set(space.op_choices) and len(values["sp0_op0_type"]) > 8
    assert values["sp0_op0_prob"] <= set(GRID) and len(values["sp0_op0_prob"]) > 6
    assert values["sp0_op0_mag"] <= set(range(space.num_magnitude_bins)) and len(values["sp0_op0_mag"]) > 5
    assert space.random_params(random.Random(3)) == draws[3]


def test_custom_shape_and_exclusions():
    space = SearchSpace(
        num_sub_policies=2,
        ops_per_sub_policy=3,
        ops=("Rotate", "Invert", "Color"),
        exclude_ops=("Invert",),
        num_magnitude_bins=5,
    )
    assert space.op_choices == ("Rotate", "Color")
    assert space.distributions()["sp1_op2_type"].choices == ("Rotate", "Color")
    assert space.distributions()["sp1_op2_mag"].high == 4
    assert SearchSpace.from_dict(space.to_dict()) == space


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"num_sub_policies": 0}, "num_sub_policies: 0"),
        ({"ops": ("Rotate", "Rotat")}, "did you mean 'Rotate'"),
        ({"exclude_ops": ("Nope",)}, "exclude_ops: unknown op 'Nope'"),
        ({"ops": ("Rotate",), "exclude_ops": ("Rotate",)}, "leaves no operation"),
        ({"num_probabilities": 1}, "num_probabilities"),
        ({"ranges": "huge"}, "ranges: 'huge'"),
        ({"ops": "Rotate"}, "not a list of operation names"),
    ],
)
def test_bad_space_is_rejected_with_the_field_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SearchSpace(**kwargs)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (
            {"num_sub_policies": 40_000},  # about 10^259641 policies, none of which a Policy may hold
            r"SearchSpace.num_sub_policies: 40000 is invalid; expected an integer from 1 to 32,768 \(the sub-policies "
            "a policy may hold",
        ),
        (
            {"ops_per_sub_policy": 17},
            r"SearchSpace.ops_per_sub_policy: 17 is invalid; expected an integer from 1 to 16 \(the operations",
        ),
        (
            {"family": "trivialaugment", "num_magnitude_bins": 5000},  # every trial would fail with it
            r"SearchSpace.num_magnitude_bins: 5000 is invalid; expected an integer from 1 to 1,000 \(the magnitude",
        ),
        ({"num_magnitude_bins": 1001}, r"num_magnitude_bins: 1001 is invalid; expected an integer from 1 to 1,000"),
        (
            {"num_probabilities": 10**9},  # a billion-value grid: a tuple of 10^9 floats before the first trial
            r"SearchSpace.num_probabilities: 1000000000 is invalid; expected an integer from 2 to 101",
        ),
    ],
)
def test_a_space_larger_than_a_policy_may_hold_is_refused_with_the_limit(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SearchSpace(**kwargs)


def test_a_space_at_the_policy_limits_makes_policies():
    from autoaug.policies.policy import MAX_MAGNITUDE_BINS, MAX_OPS_PER_SUB_POLICY, MAX_SUB_POLICIES

    space = SearchSpace(num_sub_policies=MAX_SUB_POLICIES, ops_per_sub_policy=2, num_magnitude_bins=MAX_MAGNITUDE_BINS)
    policy = space.to_policy(space.random_params(random.Random(0)))
    assert len(policy.sub_policies) == MAX_SUB_POLICIES and policy.num_magnitude_bins == MAX_MAGNITUDE_BINS
    deep = SearchSpace(num_sub_policies=1, ops_per_sub_policy=MAX_OPS_PER_SUB_POLICY)
    assert len(deep.to_policy(deep.random_params(random.Random(0))).sub_policies[0]) == MAX_OPS_PER_SUB_POLICY
    fine = SearchSpace(num_probabilities=MAX_PROBABILITIES)
    assert fine.probabilities[1] == 0.01 and fine.to_policy(fine.random_params(random.Random(0))).sub_policies
    wide = SearchSpace(family="trivialaugment", num_magnitude_bins=MAX_MAGNITUDE_BINS)
    assert wide.to_policy(wide.random_params(random.Random(0))).num_magnitude_bins == MAX_MAGNITUDE_BINS


def test_decoding_rejects_bad_parameters():
    space = SearchSpace(num_sub_policies=1)
    good = {
        "sp0_op0_type": "Rotate",
        "sp0_op0_prob": 0.5,
        "sp0_op0_mag": 3,
        "sp0_op1_type": "Color",
        "sp0_op1_prob": 1.0,
        "sp0_op1_mag": 9,
    }
    space.to_policy(good)
    with pytest.raises(ValueError, match=r"'sp0_op0_prob': 0.55 is not on the probability grid"):
        space.to_policy({**good, "sp0_op0_prob": 0.55})
    with pytest.raises(ValueError, match=r"'sp0_op1_mag': 10 is not a magnitude bin"):
        space.to_policy({**good, "sp0_op1_mag": 10})
    with pytest.raises(ValueError, match=r"'sp0_op0_type': 'Identity' is not a candidate"):
        space.to_policy({**good, "sp0_op0_type": "Identity"})
    with pytest.raises(ValueError, match=r"missing: \['sp0_op1_mag'\]"):
        space.to_policy({k: v for k, v in good.items() if k != "sp0_op1_mag"})
    with pytest.raises(ValueError, match=r"unexpected: \['sp1_op0_type'\]"):
        space.to_policy({**good, "sp1_op0_type": "Rotate"})


def test_encoding_rejects_policies_that_do_not_fit():
    space = SearchSpace(num_sub_policies=1)
    with pytest.raises(ValueError, match="has 2 sub-policies; the search space has 1"):
        space.to_params(Policy("p", 10, [[("Rotate", 0.5, 1), ("Color", 0.5, 1)]] * 2))
    with pytest.raises(ValueError, match="has 1 operations"):
        space.to_params(Policy("p", 10, [[("Rotate", 0.5, 1)]]))
    with pytest.raises(ValueError, match="probability: 0.25 is not on the probability grid"):
        space.to_params(Policy("p", 10, [[("Rotate", 0.25, 1), ("Color", 0.5, 1)]]))
    with pytest.raises(ValueError, match="num_magnitude_bins=31"):
        space.to_params(Policy("p", 31, [[("Rotate", 0.5, 1), ("Color", 0.5, 1)]]))


# ----------------------------------------------------------------------------------------------
# Space families: randaugment and trivialaugment

FAMILIES = ("randaugment", "trivialaugment")


def test_family_defaults_resolve_to_concrete_values_and_aa_dicts_are_unchanged():
    aa = SearchSpace()
    assert aa.family == "aa" and aa.num_magnitude_bins == 10 and aa.ranges == "autoaugment"
    # the aa dict is what it always was (no "family"), and an old dict loads as aa
    old = {
        "num_sub_policies": 5,
        "ops_per_sub_policy": 2,
        "ops": list(ops.AUTOAUGMENT_OPS),
        "exclude_ops": [],
        "num_magnitude_bins": 10,
        "num_probabilities": 11,
        "base": "standard",
        "ranges": "autoaugment",
    }
    assert aa.to_dict() == old and list(aa.to_dict()) == list(old)
    assert SearchSpace.from_dict(old) == aa
    ra = SearchSpace(family="randaugment")
    assert (ra.op_choices, ra.num_magnitude_bins, ra.ranges) == (ops.RANDAUGMENT_OPS, 31, "autoaugment")
    ta = SearchSpace(family="trivialaugment")
    assert (ta.op_choices, ta.num_magnitude_bins, ta.ranges) == (ops.RANDAUGMENT_OPS, 31, "wide")
    for space in (ra, ta, SearchSpace(family="randaugment", exclude_ops=("Identity",), num_magnitude_bins=11)):
        d = space.to_dict()
        assert d["family"] == space.family and "num_sub_policies" not in d
        assert SearchSpace.from_dict(d) == space
        assert SearchSpace.from_dict(json.loads(json.dumps(d))) == space


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"family": "rand"}, r"SearchSpace.family: 'rand' is invalid; expected one of \['aa', 'randaugment'"),
        (
            {"family": "randaugment", "num_sub_policies": 3},
            "SearchSpace.num_sub_policies: 3 does not apply to the randaugment family",
        ),
        ({"family": "trivialaugment", "ops_per_sub_policy": 1}, "ops_per_sub_policy: 1 does not apply to the trivial"),
        ({"family": "randaugment", "num_probabilities": 5}, "num_probabilities: 5 does not apply"),
        ({"family": "trivialaugment", "ops": ("Rotate",), "exclude_ops": ("Rotate",)}, "leaves no operation"),
    ],
)
def test_bad_family_settings_are_one_line(kwargs, message):
    with pytest.raises(ValueError, match=message) as info:
        SearchSpace(**kwargs)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("base", ["standard", "crop"])
def test_the_published_randaugment_and_trivialaugment_are_points_of_their_families(base):
    ra = SearchSpace(family="randaugment", base=base)
    published = resolve("randaugment:n=2,m=9").with_base(base)
    params = ra.to_params(published)
    assert params == {**{f"use_{op}": True for op in ops.RANDAUGMENT_OPS}, "n": 2, "m": 9}
    assert ra.to_policy(params, name="other-name").content_hash == published.content_hash
    ta = SearchSpace(family="trivialaugment", base=base)
    published = resolve("trivialaugment").with_base(base)
    params = ta.to_params(published)
    assert params == {**{f"use_{op}": True for op in ops.RANDAUGMENT_OPS}, "max_bin": 30}
    assert ta.to_policy(params).content_hash == published.content_hash
    # any other RandAugment(n, m) too
    for n, m in ((1, 0), (3, 30)):
        p = resolve(f"randaugment:n={n},m={m}").with_base(base)
        assert ra.to_policy(ra.to_params(p)).content_hash == p.content_hash


@pytest.mark.parametrize("family", FAMILIES)
def test_params_policy_params_round_trip_and_the_identity_point(family):
    import random

    space = SearchSpace(family=family, exclude_ops=("Posterize",))
    rng = random.Random(7)
    for _ in range(30):
        params = space.random_params(rng)
        policy = space.to_policy(params, name="c")
        again = space.to_params(policy)
        if policy.is_identity:  # n/m/max_bin are free at the identity: the lowest values come back
            assert not any(again[f"use_{op}"] for op in space.op_choices)
            assert {k: v for k, v in again.items() if not k.startswith("use_")} == (
                {"n": 1, "m": 0} if family == "randaugment" else {"max_bin": 0}
            )
        else:
            assert again == params
        assert space.to_policy(again, name="c").content_hash == policy.content_hash
    # the identity (the base alone) is a point: every use_ False
    none = space.to_policy(space.to_params(Policy("i", 31, [], ranges=space.ranges)), name="none")
    assert none.is_identity and (none.base, none.num_magnitude_bins, none.ranges) == ("standard", 31, space.ranges)


def test_family_policies_are_built_as_the_presets_build_them():
    ra = SearchSpace(family="randaugment")
    params = {**{f"use_{op}": op in ("Rotate", "Color", "Equalize") for op in ra.op_choices}, "n": 2, "m": 4}
    policy = ra.to_policy(params)
    # every ordered pair, in op_choices order (Rotate before Color before Equalize), probability 1, bin 4
    assert len(policy.sub_policies) == 9
    assert [tuple(op.op for op in sub) for sub in policy.sub_policies[:3]] == [
        ("Rotate", "Rotate"),
        ("Rotate", "Color"),
        ("Rotate", "Equalize"),
    ]
    assert {(op.probability, op.magnitude_bin) for sub in policy.sub_policies for op in sub} == {(1.0, 4)}
    ta = SearchSpace(family="trivialaugment")
    params = {**{f"use_{op}": op in ("Rotate", "Color") for op in ta.op_choices}, "max_bin": 2}
    policy = ta.to_policy(params)
    assert [(sub[0].op, sub[0].magnitude_bin) for sub in policy.sub_policies] == [
        ("Rotate", 0),
        ("Rotate", 1),
        ("Rotate", 2),
        ("Color", 0),
        ("Color", 1),
        ("Color", 2),
    ]
    assert policy.ranges == "wide"
    assert ta.describe_point(params) == "2 of 14 ops (Rotate, Color), bins 0..2"
    ra_point = {**{f"use_{op}": op in ("Rotate", "Color") for op in ra.op_choices}, "n": 3, "m": 7}
    assert ra.describe_point(ra_point) == "2 of 14 ops (Rotate, Color), N=3, M=7"
    identity = {**{f"use_{op}": False for op in ra.op_choices}, "n": 2, "m": 5}
    assert ra.to_policy(identity).is_identity and ra.describe_point(identity).startswith("identity")


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("sampler", ["tpe", "random"])
def test_optuna_samples_the_families_and_every_policy_applies_with_torchvision(family, sampler):
    import torch

    space = SearchSpace(family=family)
    if sampler == "tpe":
        s = optuna.samplers.TPESampler(seed=3, multivariate=True, n_startup_trials=4)
    else:
        s = optuna.samplers.RandomSampler(seed=3)
    image = torch.randint(0, 256, (3, 16, 16), dtype=torch.uint8)
    torch.manual_seed(0)
    for params in _sample(space, 8, s):
        assert set(params) == set(space.param_names())
        policy = space.to_policy(params, name="cand")
        assert space.to_policy(space.to_params(policy)).content_hash == policy.content_hash
        out = policy.to_torchvision()(image)
        assert out.shape == image.shape and out.dtype == torch.uint8
    # define-by-run: the same distributions
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    trial = study.ask()
    policy = space.suggest(trial, name="dbr")
    assert trial.distributions == space.distributions()
    assert space.to_policy(trial.params, name="dbr") == policy


def test_family_sizes_and_descriptions():
    ra, ta = SearchSpace(family="randaugment"), SearchSpace(family="trivialaugment")
    assert ra.size == 2**14 * 3 * 31 and ta.size == 2**14 * 31
    assert ra.describe() == "randaugment family: 14 candidate ops, N in 1..3, M in 31 bins; 2^14 x 3 x 31 points"
    assert ta.describe().startswith("trivialaugment family: 14 candidate ops") and "2^14 x 31 points" in ta.describe()
    assert ra.param_names() == [f"use_{op}" for op in ops.RANDAUGMENT_OPS] + ["n", "m"]
    assert ta.param_names()[-1] == "max_bin"
    dists = ra.distributions()
    assert dists["use_Rotate"].choices == (False, True)
    assert (dists["n"].low, dists["n"].high, dists["m"].high) == (1, 3, 30)


@pytest.mark.parametrize("family", FAMILIES)
def test_random_params_of_the_families_are_uniform_and_repeat_with_the_seed(family):
    import random

    space = SearchSpace(family=family)
    draws = [space.random_params(random.Random(seed)) for seed in range(60)]
    assert space.random_params(random.Random(5)) == draws[5]
    for params in draws:
        assert list(params) == space.param_names()
        space.to_policy(params)
    chosen = [sum(d[f"use_{op}"] for op in space.op_choices) for d in draws]
    assert 3 < sum(chosen) / len(chosen) < 11  # about 7 of 14
    last = "m" if family == "randaugment" else "max_bin"
    assert len({d[last] for d in draws}) > 15
    if family == "randaugment":
        assert {d["n"] for d in draws} == {1, 2, 3}


def test_family_decoding_rejects_bad_parameters():
    ra = SearchSpace(family="randaugment")
    good = {**{f"use_{op}": True for op in ra.op_choices}, "n": 2, "m": 9}
    with pytest.raises(ValueError, match=r"'use_Rotate': 1 is not a boolean"):
        ra.to_policy({**good, "use_Rotate": 1})
    with pytest.raises(
        ValueError, match=r"'n': 4 is not a number of operations per image; expected an integer in \[1, 3\]"
    ):
        ra.to_policy({**good, "n": 4})
    with pytest.raises(ValueError, match=r"'m': 31 is not a magnitude bin; expected an integer in \[0, 30\]"):
        ra.to_policy({**good, "m": 31})
    with pytest.raises(ValueError, match=r"randaugment family, 14 candidate ops\); missing: \['m'\]"):
        ra.to_policy({k: v for k, v in good.items() if k != "m"})
    ta = SearchSpace(family="trivialaugment")
    with pytest.raises(ValueError, match=r"unexpected: \['m', 'n'\]"):
        ta.to_policy({**{f"use_{op}": True for op in ta.op_choices}, "max_bin": 3, "n": 2, "m": 9})
    with pytest.raises(ValueError, match=r"'max_bin': -1 is not a magnitude bin"):
        ta.to_policy({**{f"use_{op}": True for op in ta.op_choices}, "max_bin": -1})


def test_family_encoding_refuses_policies_not_of_the_form_in_one_line():
    ra = SearchSpace(family="randaugment")
    published = resolve("randaugment:n=2,m=9")
    subs = [list(sub) for sub in published.sub_policies]
    subs[3][0] = ("Rotate", 0.5, 9)
    cases = [
        (
            Policy("x", 31, subs),
            r"policy 'x' is not a randaugment-family policy: sub-policy 3 has probability 0.5; "
            "the family applies every chosen operation with probability 1",
        ),
        (
            Policy("x", 31, [[("Rotate", 1.0, 9)], [("Color", 1.0, 8)]]),
            "sub-policy 1 has magnitude bin 8, sub-policy 0 has 9",
        ),
        (
            Policy("x", 31, [[("Rotate", 1.0, 9)], [("Color", 1.0, 9), ("Color", 1.0, 9)]]),
            "sub-policy 1 has 2 operations",
        ),
        (Policy("x", 31, [[("Color", 1.0, 9)], [("Rotate", 1.0, 9)]]), "not every ordered 1-tuple"),
        (Policy("x", 31, [[("Invert", 1.0, 9)]]), "uses 'Invert', not a candidate operation"),
        (
            Policy("x", 31, [[("Rotate", 1.0, 9)] * 4]),
            "N=4 operations per image; the family searches N in 1..3",
        ),
        (resolve("autoaugment-cifar10"), "has num_magnitude_bins=10, but the search space has num_magnitude_bins=31"),
        (resolve("randaugment").with_base("crop"), "has base='crop', but the search space has base='standard'"),
        (resolve("trivialaugment"), "has ranges='wide'"),
    ]
    for policy, message in cases:
        with pytest.raises(ValueError, match=message) as info:
            ra.to_params(policy)
        assert "\n" not in str(info.value)
    ta = SearchSpace(family="trivialaugment")
    for policy, message in [
        (
            Policy("x", 31, [[("Rotate", 1.0, 1)], [("Rotate", 1.0, 0)]], ranges="wide"),
            "are not each of its 1 operations at every bin 0..1, in the space's order",
        ),
        (Policy("x", 31, [[("Rotate", 1.0, 0)], [("Rotate", 1.0, 2)]], ranges="wide"), "every bin 0..2"),
        (Policy("x", 31, [[("Rotate", 1.0, 0), ("Color", 1.0, 0)]], ranges="wide"), "one operation per image"),
        (Policy("x", 31, [[("Rotate", 0.9, 0)]], ranges="wide"), "probability 0.9"),
    ]:
        with pytest.raises(ValueError, match=message):
            ta.to_params(policy)
