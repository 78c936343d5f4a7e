"""The toy method's Ray Tune trial: the candidate policy decoded, its score computed from it (no
training), reported once."""

from __future__ import annotations

from typing import Any

from autoaug.search.score import METRIC
from autoaug.search.space import SearchSpace
from autoaug.search.tune.epochs import trial_policy


def policy_score(policy: Any) -> float:
    """A score in [0, 1] that depends on the policy alone: its operations' mean probability times
    their mean magnitude, as fractions (a search of it prefers strong, frequent operations)."""
    ops = [op for sub in policy.sub_policies for op in sub]
    prob = sum(op.probability for op in ops) / len(ops)
    bins = max(1, policy.num_magnitude_bins - 1)
    return prob * sum(op.magnitude_bin for op in ops) / len(ops) / bins


def score_trial(config: dict, *, space: dict, policy_prefix: str) -> None:
    """Ray Tune function trainable: one candidate policy, scored at once."""
    from ray import tune

    trial_id = tune.get_context().get_trial_id() or "local"
    policy = trial_policy(config, SearchSpace.from_dict(space), f"{policy_prefix}-{trial_id}")
    tune.report({METRIC: policy_score(policy), "epoch": 1})
