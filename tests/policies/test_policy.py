"""Policy / Op value object: construction, validation, canonical JSON, hash, pickle."""
from __future__ import annotations

import dataclasses
import json
import pickle

import pytest

from autoaug.policies import Op, Policy, presets

SUBS = [[("Rotate", 0.7, 2), ("TranslateX", 0.3, 9)], [("Invert", 0.1, 0), ("Contrast", 0.2, 6)]]

# sha256 of the canonical content JSON of the published AutoAugment CIFAR-10 policy. If this
# changes, every stored policy's hash changes: do not update it casually.
AUTOAUGMENT_CIFAR10_HASH = "c424b554ff77753e2646ce00f5b444d884d266bc2e6a54ba346b27aaba696690"


def test_architecture_example():
    p = Policy(name="mine", num_magnitude_bins=10, sub_policies=SUBS)
    assert p.sub_policies[0][0] == Op(op="Rotate", probability=0.7, magnitude_bin=2)
    assert isinstance(p.sub_policies, tuple) and isinstance(p.sub_policies[0], tuple)
    assert p.base == "standard" and p.ranges == "autoaugment"
    assert len(p) == 2
    assert p.ops_used == ("TranslateX", "Rotate", "Invert", "Contrast")
    assert p.max_ops_per_sub_policy == 2
    assert not p.is_identity


def test_accepts_tuples_dicts_and_ops_alike():
    a = Policy("a", 10, SUBS)
    b = Policy("a", 10, [[{"op": o, "probability": p, "magnitude_bin": m} for o, p, m in s]
                         for s in SUBS])  # fmt: skip
    c = Policy("a", 10, [[Op(*t) for t in s] for s in SUBS])
    assert a == b == c
    assert hash(a) == hash(b)


def test_immutable():
    p = Policy("a", 10, SUBS)
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.name = "b"
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.sub_policies[0][0].probability = 1.0
    with pytest.raises(TypeError):
        p.sub_policies[0][0] = Op("Invert", 1.0, 0)


def test_equality_includes_name_hash_does_not():
    a, b = Policy("a", 10, SUBS), Policy("b", 10, SUBS)
    assert a != b
    assert a.content_hash == b.content_hash
    assert a.with_name("b") == b


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(sub_policies=[[("Rotat", 0.5, 1)]]),
         r"sub-policy 0, op 0: field 'op': unknown op 'Rotat' \(did you mean 'Rotate'\?\); "
         r"expected one of \['Identity', 'ShearX'"),
        (dict(sub_policies=[[("Rotate", 0.5, 1)], [("Invert", 1.5, 0)]]),
         r"sub-policy 1, op 0: field 'probability': 1.5 is outside the allowed range \[0, 1\]"),
        (dict(sub_policies=[[("Rotate", -0.1, 1)]]),
         r"sub-policy 0, op 0: field 'probability': -0.1 is outside the allowed range \[0, 1\]"),
        (dict(sub_policies=[[("Rotate", float("nan"), 1)]]),
         r"field 'probability': nan is not a finite number"),
        (dict(sub_policies=[[("Rotate", "0.5", 1)]]),
         r"field 'probability': '0.5' is not a finite number"),
        (dict(sub_policies=[[("Rotate", 0.5, 1), ("Rotate", 0.5, 10)]]),
         r"sub-policy 0, op 1 \(Rotate\): field 'magnitude_bin': 10 is outside the allowed "
         r"range \[0, 9\]"),
        (dict(sub_policies=[[("Rotate", 0.5, -1)]]),
         r"sub-policy 0, op 0: field 'magnitude_bin': -1 is negative"),
        (dict(sub_policies=[[("Rotate", 0.5, 1.5)]]),
         r"field 'magnitude_bin': 1.5 is not an integer"),
        (dict(sub_policies=[[("Rotate", 0.5, True)]]),
         r"field 'magnitude_bin': True is not an integer"),
        (dict(sub_policies=[[("Rotate", 0.5, 1)], []]),
         r"sub-policy 1: is empty; expected at least one operation"),
        (dict(sub_policies=[[("Rotate", 0.5)]]),
         r"sub-policy 0, op 0: op \('Rotate', 0.5\) has 2 elements; expected a tuple "
         r"\(op, probability, magnitude_bin\)"),
        (dict(sub_policies=[[{"op": "Rotate", "probability": 0.5}]]),
         r"sub-policy 0, op 0: op dict has keys .*\(missing: \['magnitude_bin'\]\)"),
        (dict(sub_policies=[[{"op": "Rotate", "probability": 0.5, "magnitude_bin": 1,
                              "mag": 2}]]),
         r"\(unknown: \['mag'\]\)"),
        (dict(sub_policies=["Rotate"]), r"sub-policy 0: 'Rotate' is not a sequence of operations"),
        (dict(sub_policies="Rotate"), r"field 'sub_policies': 'Rotate' is not a sequence"),
        (dict(name="has space"), r"field 'name': 'has space' is invalid; expected a string"),
        (dict(name="a@3"), r"field 'name': 'a@3' is invalid"),
        (dict(name=""), r"field 'name': '' is invalid"),
        (dict(num_magnitude_bins=0), r"field 'num_magnitude_bins': 0 is invalid; expected an "
                                     r"int >= 1"),
        (dict(base="crop"), r"field 'base': 'crop' is invalid; expected one of "
                            r"\['standard', 'none'\]"),
        (dict(ranges="paper"), r"field 'ranges': 'paper' is invalid; expected one of "
                               r"\['autoaugment', 'wide'\]"),
    ],
)  # fmt: skip
def test_validation_errors(kwargs, match):
    args = dict(name="p", num_magnitude_bins=10, sub_policies=[[("Rotate", 0.5, 1)]])
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        Policy(**args)


def test_op_validates_on_its_own():
    with pytest.raises(ValueError, match=r"field 'op': unknown op 'rotate' \(did you mean"):
        Op("rotate", 0.5, 1)
    assert Op("Rotate", 1, 3).probability == 1.0 and isinstance(Op("Rotate", 1, 3).probability,
                                                                  float)  # fmt: skip


def test_canonical_dict_and_json_round_trip():
    p = Policy("mine", 10, SUBS)
    d = p.to_dict()
    assert list(d) == ["name", "num_magnitude_bins", "sub_policies"]
    assert d["sub_policies"][0][0] == {"op": "Rotate", "probability": 0.7, "magnitude_bin": 2}
    assert Policy.from_dict(d) == p
    assert Policy.from_json(p.to_json()) == p
    assert Policy.from_json(p.to_json(indent=None)) == p
    json.loads(p.to_json())  # valid JSON

    q = Policy("w", 31, [[("Rotate", 1.0, 30)]], base="none", ranges="wide")
    dq = q.to_dict()
    assert dq["base"] == "none" and dq["ranges"] == "wide"
    assert Policy.from_dict(dq) == q
    assert q.content_hash != Policy("w", 31, [[("Rotate", 1.0, 30)]]).content_hash


def test_from_dict_rejects_unknown_and_missing_keys():
    with pytest.raises(ValueError, match=r"\(unknown: \['extra'\]\)"):
        Policy.from_dict({"name": "a", "num_magnitude_bins": 10, "sub_policies": [], "extra": 1})
    with pytest.raises(ValueError, match=r"\(missing: \['num_magnitude_bins'\]\)"):
        Policy.from_dict({"name": "a", "sub_policies": []})
    with pytest.raises(ValueError, match="policy JSON is not valid JSON"):
        Policy.from_json("{not json")
    with pytest.raises(ValueError, match="policy must be a dict, got list"):
        Policy.from_json("[]")


def test_pickle_round_trip():
    for p in (Policy("mine", 10, SUBS), presets.resolve("trivialaugment"), presets.resolve("none")):
        q = pickle.loads(pickle.dumps(p))
        assert q == p and q.content_hash == p.content_hash


def test_content_hash_pinned_for_autoaugment_cifar10():
    p = presets.resolve("autoaugment-cifar10")
    assert p.content_hash == AUTOAUGMENT_CIFAR10_HASH
    # the name is not part of the content
    assert p.with_name("renamed").content_hash == AUTOAUGMENT_CIFAR10_HASH
    # what is hashed: sorted keys, no spaces, no name, no default base/ranges
    assert p.canonical_content_json().startswith(
        '{"num_magnitude_bins":10,"sub_policies":[[{"magnitude_bin":7,"op":"Invert",'
        '"probability":0.1},{"magnitude_bin":6,"op":"Contrast","probability":0.2}],'
    )


def test_content_hash_is_stable_under_float_noise_and_sensitive_to_content():
    a = Policy("a", 10, [[("Rotate", 0.3, 2)]])
    b = Policy("a", 10, [[("Rotate", 0.1 + 0.2, 2)]])  # 0.30000000000000004
    assert a.content_hash == b.content_hash
    assert a.content_hash != Policy("a", 10, [[("Rotate", 0.3, 3)]]).content_hash
    assert a.content_hash != Policy("a", 11, [[("Rotate", 0.3, 2)]]).content_hash
    assert a.content_hash != Policy("a", 10, [[("Rotate", 0.31, 2)]]).content_hash
    # sub-policy order and op order are content
    two = [[("Rotate", 0.3, 2)], [("Invert", 0.5, 0)]]
    assert Policy("a", 10, two).content_hash != Policy("a", 10, two[::-1]).content_hash
    canon = json.loads(a.canonical_content_json())
    assert "name" not in canon and canon["num_magnitude_bins"] == 10


def test_identity_policy_and_readable_table():
    none = Policy("none", 10, [], base="none")
    assert none.is_identity and len(none) == 0 and none.ops_used == ()
    assert "identity" in str(none)
    text = str(Policy("mine", 10, SUBS))
    assert "Policy 'mine': 2 sub-policies" in text
    assert "Rotate(p=0.7 m2)  ->  TranslateX(p=0.3 m9)" in text
    assert "Invert(p=0.1)" in text  # no magnitude shown for magnitude-free ops
