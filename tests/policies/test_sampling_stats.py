"""Chi-square tests of the policy sampling, on both backends, judged from the images themselves.

* sub-policies are drawn uniformly: 6 sub-policies of exact, deterministic, distinguishable ops;
* an op with probability p is applied to a fraction p of the images, the two ops of a
  sub-policy are drawn independently and applied in order (Invert then Posterize differs from
  Posterize then Invert).

scipy is not installed, so the statistic is compared with hard-coded critical values. Seeds are
fixed, so the outcome is deterministic; alpha = 0.001 keeps it robust to library changes.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from autoaug.policies import Policy
from autoaug.policies.torch_apply import PolicyTransform, apply_op

CHI2_CRITICAL = {
    3: 16.266,  # df = 3, alpha = 0.001
    5: 20.515,  # df = 5, alpha = 0.001
}
UNIFORM = Policy(
    "uniform6",
    10,
    [
        [("Identity", 1.0, 0)],
        [("Invert", 1.0, 0)],
        [("Solarize", 1.0, 5)],  # threshold 113.8
        [("Solarize", 1.0, 2)],  # threshold 199.1
        [("Posterize", 1.0, 9)],  # 4 bits
        [("Posterize", 1.0, 4)],  # 6 bits
    ],
)
ORDERED = Policy("ordered", 10, [[("Invert", 0.3, 0), ("Posterize", 0.6, 9)]])
# outcomes of ORDERED: nothing, Invert only, Posterize only, Invert then Posterize
ORDERED_P = np.array([0.7 * 0.4, 0.3 * 0.4, 0.7 * 0.6, 0.3 * 0.6])
BACKENDS = ["dali", "torchvision", "torchvision-batched"]
ITERATIONS = 8


def chi_square(counts, probabilities) -> float:
    counts = np.asarray(counts, dtype=np.float64)
    expected = counts.sum() * np.asarray(probabilities, dtype=np.float64)
    return float(((counts - expected) ** 2 / expected).sum())


def _op(images, name, magnitude_bin):
    chw = torch.from_numpy(images).permute(0, 3, 1, 2)
    return torch.stack([apply_op(x, name, magnitude_bin, 10) for x in chw]).permute(0, 2, 3, 1)


def references(images: np.ndarray, policy: Policy) -> np.ndarray:
    """[outcome, image, H, W, C]: the exact output of each outcome for each image."""
    if policy is UNIFORM:
        return np.stack([_op(images, s[0].op, s[0].magnitude_bin).numpy() for s in UNIFORM.sub_policies])
    inverted = _op(images, "Invert", 0).numpy()
    return np.stack([images, inverted, _op(images, "Posterize", 9).numpy(), _op(inverted, "Posterize", 9).numpy()])


def distinguishable(refs: np.ndarray) -> np.ndarray:
    keep = np.ones(refs.shape[1], dtype=bool)
    for a in range(len(refs)):
        for b in range(a + 1, len(refs)):
            keep &= np.any(refs[a] != refs[b], axis=(1, 2, 3))
    return keep


def outputs(backend: str, policy: Policy, images: np.ndarray, dali_run) -> list[np.ndarray]:
    if backend == "dali":
        return dali_run(policy, images, seed=11, iterations=ITERATIONS)
    torch.manual_seed(11)
    transform = PolicyTransform(policy)
    chw = torch.from_numpy(images).permute(0, 3, 1, 2).contiguous()
    if backend == "torchvision-batched":
        return [transform(chw).permute(0, 2, 3, 1).numpy() for _ in range(ITERATIONS)]
    return [torch.stack([transform(x) for x in chw]).permute(0, 2, 3, 1).numpy() for _ in range(ITERATIONS)]


def outcome_counts(policy, images, backend, dali_run) -> np.ndarray:
    refs = references(images, policy)
    keep = distinguishable(refs)
    assert keep.mean() > 0.9, "most real images tell the outcomes apart"
    images, refs = images[keep], refs[:, keep]
    counts = np.zeros(len(refs), dtype=np.int64)
    for out in outputs(backend, policy, images, dali_run):
        match = np.all(out[None] == refs, axis=(2, 3, 4))  # [outcome, image]
        assert np.all(match.sum(axis=0) == 1), "every output is exactly one outcome"
        counts += match.sum(axis=1)
    return counts


@pytest.mark.parametrize("backend", BACKENDS)
def test_sub_policies_are_drawn_uniformly(backend, images256, dali_run):
    counts = outcome_counts(UNIFORM, images256, backend, dali_run)
    stat = chi_square(counts, np.full(6, 1 / 6))
    assert stat < CHI2_CRITICAL[5], (counts, stat)
    # the test has power: a 2x over-representation of one sub-policy would be rejected
    skewed = np.array([2, 1, 1, 1, 1, 1]) / 7
    assert chi_square(counts, skewed) > CHI2_CRITICAL[5]


@pytest.mark.parametrize("backend", BACKENDS)
def test_ops_applied_with_their_probability_independently_and_in_order(backend, images256, dali_run):
    counts = outcome_counts(ORDERED, images256, backend, dali_run)
    stat = chi_square(counts, ORDERED_P)
    assert stat < CHI2_CRITICAL[3], (counts, stat)
    # marginals: Invert fired in ~30 % of the images, Posterize in ~60 %
    n = counts.sum()
    assert abs((counts[1] + counts[3]) / n - 0.3) < 0.03
    assert abs((counts[2] + counts[3]) / n - 0.6) < 0.03
    # power: probabilities 0.4 / 0.5 instead of 0.3 / 0.6 are rejected
    wrong = np.array([0.6 * 0.5, 0.4 * 0.5, 0.6 * 0.5, 0.4 * 0.5])
    assert chi_square(counts, wrong) > CHI2_CRITICAL[3]
