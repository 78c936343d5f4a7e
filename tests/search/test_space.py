"""The search space: parameter dict <-> Policy, and what Optuna can sample from it."""

from __future__ import annotations

import optuna
import pytest

from autoaug.policies import Policy, ops
from autoaug.policies.presets import resolve
from autoaug.search.space import SearchSpace

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
