"""``PolicyInputs``: the policy step whose tables are pipeline inputs. The tables of a policy
agree with :func:`stage_tables` (the constant-table step's), a policy the graph was not built for
is refused with a message naming why, and the identity is all-Identity tables."""

from __future__ import annotations

import numpy as np
import pytest

from autoaug.policies import Policy
from autoaug.policies.dali_apply import PolicyInputs, stage_tables
from autoaug.policies.ops import AUTOAUGMENT_OPS


def _spec():
    return PolicyInputs(AUTOAUGMENT_OPS, 5, 2, 32)


def test_tables_agree_with_the_constant_step():
    spec = _spec()
    p = Policy("p", 10, [[("Rotate", 0.7, 2), ("Invert", 0.1, 0)], [("Color", 0.4, 9), ("Cutout", 1.0, 3)]])
    arrays = spec.tables(p)
    assert len(arrays) == len(spec.input_names()) == 1 + 5 * 2
    assert float(arrays[0]) == 2  # sub-policies drawn from
    for stage in range(2):
        t = stage_tables(p, stage)
        kind, prob, param, matrix, kernel = arrays[1 + 5 * stage : 6 + 5 * stage]
        assert kind.shape == (10,) and matrix.shape == (10, 2, 3) and kernel.shape == (10, 3, 3)
        assert [spec.kinds[i] for i in kind[:4]] == [t.kinds[i] for i in t.kind]
        assert np.allclose(prob[:4], t.prob) and np.allclose(param[:4], t.param)
        assert np.all(kind[4:] == 0) and np.all(prob[4:] == 0)  # unused sub-policy slots: Identity


def test_identity_policy_is_all_identity():
    spec = _spec()
    arrays = spec.tables(Policy("none", 10, []))
    assert float(arrays[0]) == 1
    assert all(np.all(a == 0) for a in arrays[1::5])


@pytest.mark.parametrize(
    "policy, message",
    [
        (Policy("big", 10, [[("Rotate", 0.5, 1)]] * 6), "has 6 sub-policies; this pipeline takes at most 5"),
        (Policy("long", 10, [[("Rotate", 0.5, 1)] * 3]), "sub-policies of 3 operations; this pipeline takes at most 2"),
    ],
)
def test_policies_that_do_not_fit_are_refused(policy, message):
    with pytest.raises(ValueError, match=message):
        _spec().tables(policy)


def test_ops_outside_the_graph_are_refused():
    spec = PolicyInputs(["Rotate", "Color"], 5, 2, 32)
    with pytest.raises(ValueError, match=r"uses \['Invert'\], which this pipeline's policy step was not built for"):
        spec.tables(Policy("p", 10, [[("Invert", 0.5, 0)]]))
    with pytest.raises(ValueError, match="needs image_size"):
        PolicyInputs(["Rotate"], 5, 2, None)
