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
    b = Policy("a", 10, [[{"op": o, "probability": p, "magnitude_bin": m} for o, p, m in s] for s in SUBS])
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
        (
            dict(sub_policies=[[("Rotat", 0.5, 1)]]),
            r"sub-policy 0, op 0: field 'op': unknown op 'Rotat' \(did you mean 'Rotate'\?\); "
            r"expected one of \['Identity', 'ShearX'",
        ),
        (
            dict(sub_policies=[[("Rotate", 0.5, 1)], [("Invert", 1.5, 0)]]),
            r"sub-policy 1, op 0: field 'probability': 1.5 is outside the allowed range \[0, 1\]",
        ),
        (
            dict(sub_policies=[[("Rotate", -0.1, 1)]]),
            r"sub-policy 0, op 0: field 'probability': -0.1 is outside the allowed range \[0, 1\]",
        ),
        (dict(sub_policies=[[("Rotate", float("nan"), 1)]]), r"field 'probability': nan is not a finite number"),
        (dict(sub_policies=[[("Rotate", "0.5", 1)]]), r"field 'probability': '0.5' is not a finite number"),
        (
            dict(sub_policies=[[("Rotate", 0.5, 1), ("Rotate", 0.5, 10)]]),
            r"sub-policy 0, op 1 \(Rotate\): field 'magnitude_bin': 10 is outside the allowed "
            r"range \[0, 9\]",
        ),
        (dict(sub_policies=[[("Rotate", 0.5, -1)]]), r"sub-policy 0, op 0: field 'magnitude_bin': -1 is negative"),
        (dict(sub_policies=[[("Rotate", 0.5, 1.5)]]), r"field 'magnitude_bin': 1.5 is not an integer"),
        (dict(sub_policies=[[("Rotate", 0.5, True)]]), r"field 'magnitude_bin': True is not an integer"),
        (dict(sub_policies=[[("Rotate", 0.5, 1)], []]), r"sub-policy 1: is empty; expected at least one operation"),
        (
            dict(sub_policies=[[("Rotate", 0.5)]]),
            r"sub-policy 0, op 0: op \('Rotate', 0.5\) has 2 elements; expected a tuple "
            r"\(op, probability, magnitude_bin\)",
        ),
        (
            dict(sub_policies=[[{"op": "Rotate", "probability": 0.5}]]),
            r"sub-policy 0, op 0: op dict has keys .*\(missing: \['magnitude_bin'\]\)",
        ),
        (
            dict(sub_policies=[[{"op": "Rotate", "probability": 0.5, "magnitude_bin": 1, "mag": 2}]]),
            r"\(unknown: \['mag'\]\)",
        ),
        (dict(sub_policies=["Rotate"]), r"sub-policy 0: 'Rotate' is not a sequence of operations"),
        (dict(sub_policies="Rotate"), r"field 'sub_policies': 'Rotate' is not a sequence"),
        (dict(name="has space"), r"field 'name': 'has space' is invalid; expected a string"),
        (dict(name="a@3"), r"field 'name': 'a@3' is invalid"),
        (dict(name=""), r"field 'name': '' is invalid"),
        (
            dict(num_magnitude_bins=0),
            r"field 'num_magnitude_bins': 0 is invalid; expected an "
            r"int from 1 to 1,000",
        ),
        (
            dict(base="flip"),
            r"field 'base': 'flip' is invalid; expected one of "
            r"\['none', 'crop', 'standard'\]",
        ),
        (
            dict(ranges="paper"),
            r"field 'ranges': 'paper' is invalid; expected one of "
            r"\['autoaugment', 'wide'\]",
        ),
    ],
)
def test_validation_errors(kwargs, match):
    args = dict(name="p", num_magnitude_bins=10, sub_policies=[[("Rotate", 0.5, 1)]])
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        Policy(**args)


def test_op_validates_on_its_own():
    with pytest.raises(ValueError, match=r"field 'op': unknown op 'rotate' \(did you mean"):
        Op("rotate", 0.5, 1)
    assert Op("Rotate", 1, 3).probability == 1.0 and isinstance(Op("Rotate", 1, 3).probability, float)


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


def test_default_base_stays_out_of_the_dict_and_hash_other_bases_round_trip():
    """Adding bases must not change a stored policy's hash: ``base`` is written only when it is not
    ``standard`` (the hashes below are sha256 of the canonical JSON written out by hand)."""
    assert presets.resolve("autoaugment-cifar10").with_base("standard").content_hash == AUTOAUGMENT_CIFAR10_HASH
    standard = presets.resolve("standard")
    assert "base" not in standard.to_dict() and standard.canonical_content_json() == (
        '{"num_magnitude_bins":10,"sub_policies":[]}'
    )
    assert standard.content_hash == "3d3be33ce31b0ead6765da7c3b2b7764153856085d683742dd467668d1641cf5"
    assert presets.resolve("none").content_hash == "6a3a82ff57e067f91fd666339996547369a39b6c1c2e9306f4b3b0fab3d63605"
    crop = Policy("mine", 10, SUBS, base="crop")
    assert crop.to_dict()["base"] == "crop" and '"base":"crop"' in crop.canonical_content_json()
    assert Policy.from_dict(crop.to_dict()) == crop and Policy.from_json(crop.to_json()) == crop
    assert len({Policy("mine", 10, SUBS, base=b).content_hash for b in ("none", "crop", "standard")}) == 3
    assert "base=crop" in str(crop)


def test_with_base_moves_only_the_base():
    aa = presets.resolve("autoaugment-cifar10")
    moved = aa.with_base("crop")
    assert moved.base == "crop" and aa.base == "standard"  # a new value, the original untouched
    assert (moved.name, moved.sub_policies, moved.num_magnitude_bins, moved.ranges) == (
        aa.name,
        aa.sub_policies,
        aa.num_magnitude_bins,
        aa.ranges,
    )
    assert moved.content_hash != aa.content_hash and moved.with_base("standard") == aa
    with pytest.raises(
        ValueError, match=r"field 'base': 'flip' is invalid; expected one of \['none', 'crop', 'standard'\]"
    ):
        aa.with_base("flip")


def test_rebase_moves_policies_with_a_policy_step_and_leaves_the_bases_alone():
    from autoaug.core.errors import UserInputError
    from autoaug.policies.bases import rebase

    aa = presets.resolve("autoaugment-cifar10")
    assert rebase(aa, "crop") == aa.with_base("crop") and rebase(aa, None) is aa
    for name in ("none", "crop", "standard"):  # identity policies are bases: they keep theirs
        assert rebase(presets.resolve(name), "crop") == presets.resolve(name)
    with pytest.raises(UserInputError, match=r"^base 'flip' is not a base; expected one of none, crop, standard$"):
        rebase(aa, "flip")


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


# ----------------------------------------------------------------------------------------------
# Limits and hostile input: one line of bounded length, PolicyError (a ValueError), quickly
# ----------------------------------------------------------------------------------------------

from autoaug.core.errors import UserInputError  # noqa: E402
from autoaug.policies.policy import (  # noqa: E402
    MAX_JSON_DEPTH,
    MAX_OPS_PER_SUB_POLICY,
    MAX_POLICY_JSON_BYTES,
    MAX_SUB_POLICIES,
    PolicyError,
)


def _one_line(exc: BaseException, limit: int = 400) -> str:
    text = str(exc)
    assert "\n" not in text and len(text) <= limit, (len(text), text[:200])
    return text


def test_policy_error_fits_the_error_hierarchy():
    assert issubclass(PolicyError, UserInputError) and issubclass(PolicyError, ValueError)
    with pytest.raises(PolicyError):
        Policy("p", 10, [[("Rotat", 0.5, 1)]])


def test_too_many_sub_policies_is_refused_quickly():
    # Before: a policy of 380,000 sub-policies was accepted and `autoaug train` hung building it.
    # Refused by its count before the sub-policies past the limit are read: those are not even
    # sub-policies here, and the message is still the count's.
    over = [[("Rotate", 0.5, 1)]] * (MAX_SUB_POLICIES + 1) + [None] * (380_000 - MAX_SUB_POLICIES - 1)
    with pytest.raises(
        PolicyError,
        match=r"field 'sub_policies': more than 32,768 sub-policies "
        r"\(the limit: DALI's lookup tables hold 65,536 entries",
    ) as info:
        Policy("big", 10, over)
    _one_line(info.value)
    assert len(Policy("max", 10, [[("Rotate", 0.5, 1)]] * MAX_SUB_POLICIES)) == MAX_SUB_POLICIES
    doc = json.dumps(
        {"name": "big", "num_magnitude_bins": 10, "sub_policies": [[["Rotate", 0.5, 1]]] * 380_000},
        separators=(",", ":"),
    )
    with pytest.raises(PolicyError, match="more than 32,768 sub-policies"):
        Policy.from_json(doc)
    # A generator is not consumed beyond the limit.
    endless = ([("Rotate", 0.5, 1)] for _ in iter(int, 1))
    with pytest.raises(PolicyError, match="more than 32,768 sub-policies"):
        Policy("gen", 10, endless)


def test_too_many_ops_in_a_sub_policy():
    assert Policy("p", 10, [[("Rotate", 0.5, 1)] * MAX_OPS_PER_SUB_POLICY]).max_ops_per_sub_policy == 16
    with pytest.raises(PolicyError, match=r"sub-policy 1: has more than 16 operations \(the limit\)"):
        Policy("p", 10, [[("Rotate", 0.5, 1)], [("Rotate", 0.5, 1)] * 100_000])


@pytest.mark.parametrize(
    "bins", [10**30, 1001, 10**5000, -1, 2.5, "10"], ids=["1e30", "1001", "1e5000", "-1", "2.5", "str"]
)
def test_num_magnitude_bins_out_of_range(bins):
    with pytest.raises(
        PolicyError,
        match=r"field 'num_magnitude_bins': .* is invalid; expected an int "
        r"from 1 to 1,000",
    ) as info:
        Policy("p", bins, [[("Rotate", 0.5, 0)]])
    _one_line(info.value, 200)


def test_num_magnitude_bins_huge_in_json():
    with pytest.raises(PolicyError, match=r"field 'num_magnitude_bins': 1000000000000000000000000000000 is"):
        Policy.from_json(
            '{"name": "p", "num_magnitude_bins": 1e30, "sub_policies": []}'.replace("1e30", "1" + "0" * 30)
        )
    # More than 4,300 digits: Python's int parser refuses; still a one-line PolicyError.
    doc = '{"name": "p", "num_magnitude_bins": ' + "9" * 5000 + ', "sub_policies": []}'
    with pytest.raises(PolicyError, match=r"policy JSON holds an integer of more than 4,300 digits") as info:
        Policy.from_json(doc)
    _one_line(info.value)


def test_deeply_nested_json_is_refused_before_parsing():
    # Before: 100,000 levels raised RecursionError from json.loads.
    for doc in (
        "[" * 100_000 + "]" * 100_000,
        '{"name": "p", "num_magnitude_bins": 10, "sub_policies": ' + "[" * 100_000 + "]" * 100_000 + "}",
        "[" * 100_000,
    ):
        with pytest.raises(
            PolicyError,
            match=r"policy JSON is nested more than 32 levels deep \(the "
            r"limit; a policy needs 4\)",
        ):
            Policy.from_json(doc)
    ok = "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH
    with pytest.raises(PolicyError, match="policy must be a dict, got list"):
        Policy.from_json(ok)
    # Brackets inside strings do not count.
    name_with_brackets = json.dumps({"name": "p", "num_magnitude_bins": 10, "sub_policies": [], "base": "[" * 1000})
    with pytest.raises(PolicyError, match=r"field 'base': '\[\[\[\["):
        Policy.from_json(name_with_brackets)


def test_oversized_json_is_refused():
    with pytest.raises(PolicyError, match=r"policy JSON is larger than 67,108,864 bytes \(the limit\)"):
        Policy.from_json(" " * (MAX_POLICY_JSON_BYTES + 1))


def test_long_values_give_short_messages():
    name = "x" * 100_000
    with pytest.raises(PolicyError, match=r"^field 'name': 'xxx+\.\.\.x+' is invalid; expected a string") as info:
        Policy(name, 10, [])
    _one_line(info.value)
    for subs in (
        [[("R" * 100_000, 0.5, 1)]],
        [[(["x"] * 100_000, 0.5, 1)]],
        [[("Rotate", 10**100_000, 1)]],
        [[("Rotate", 0.5, 10**100_000)]],
        [[("Rotate", 0.5, 10**30)]],
        [[("Rotate", "0.5\n" * 1000, 1)]],
        [[{"k" * 100_000: 1, "op": "Rotate"}]],
        [[tuple(range(100_000))]],
        ["x\n" * 100_000],
    ):
        with pytest.raises(PolicyError) as info:
            Policy("p", 10, subs)
        _one_line(info.value)
    with pytest.raises(PolicyError) as info:
        Policy.from_dict({"name": "p", "num_magnitude_bins": 10, "sub_policies": [], "k" * 100_000: 1, 7: 2})
    _one_line(info.value)


def test_deeply_nested_python_values_give_short_messages():
    nested: list = []
    for _ in range(100_000):
        nested = [nested]
    for subs in ([nested], [[nested]], [[("Rotate", nested, 1)]], nested):
        with pytest.raises(PolicyError) as info:
            Policy("p", 10, subs)
        _one_line(info.value)


def test_policy_file_errors_name_the_file(tmp_path):
    good = tmp_path / "good.json"
    good.write_text(Policy("mine", 10, SUBS).to_json())
    assert Policy.from_file(good) == Policy("mine", 10, SUBS)
    bom = tmp_path / "bom.json"
    bom.write_bytes(b"\xef\xbb\xbf" + Policy("mine", 10, SUBS).to_json().encode())
    assert Policy.from_file(bom).name == "mine"

    latin1 = tmp_path / "latin1.json"
    latin1.write_bytes('{"name": "caf\xe9", "num_magnitude_bins": 10, "sub_policies": []}'.encode("latin-1"))
    with pytest.raises(
        PolicyError,
        match=r"^policy file '.*latin1.json': the file is not UTF-8 text "
        r"\(invalid continuation byte: byte 0xe9 at offset 13\)",
    ) as info:
        Policy.from_file(latin1)
    _one_line(info.value)

    big = tmp_path / "big.json"
    with open(big, "wb") as f:
        f.truncate(MAX_POLICY_JSON_BYTES + 1)
    with pytest.raises(
        PolicyError,
        match=r"^policy file '.*big.json': the file is larger than 67,108,864 "
        r"bytes \(64 MiB\), the limit for a policy file$",
    ):
        Policy.from_file(big)

    with pytest.raises(PolicyError, match=r"^policy file '.*missing.json' cannot be read: No such file"):
        Policy.from_file(tmp_path / "missing.json")
    with pytest.raises(PolicyError, match=r"^policy file '.*' cannot be read: Is a directory"):
        Policy.from_file(tmp_path)
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(PolicyError, match=r"deep.json': policy JSON is nested more than 32 levels"):
        Policy.from_file(deep)
    bad = tmp_path / "bad.json"
    bad.write_text('{"name": "p", "num_magnitude_bins": 10, "sub_policies": [[["Rotate", 1.5, 1]]]}')
    with pytest.raises(PolicyError, match=r"bad.json': sub-policy 0, op 0: field 'probability': 1.5 is outside"):
        Policy.from_file(bad)


def test_a_key_given_twice_is_refused_with_its_place_and_both_values():
    """json.loads keeps the last of two equal keys silently; a policy would then train "Invert" where
    its author may have meant "Rotate". Every policy reader goes through Policy.from_json."""
    from autoaug.core.values import DuplicateKeyError, loads_strict
    from autoaug.policies.policy import PolicyError

    doc = {
        "name": "x",
        "num_magnitude_bins": 10,
        "sub_policies": [[{"op": "Rotate", "probability": 0.5, "magnitude_bin": 3}]],
    }
    text = json.dumps(doc)
    assert Policy.from_json(text) == Policy.from_dict(doc)  # no duplicates: accepted as before
    twice = text.replace('"op": "Rotate"', '"op": "Rotate", "op": "Invert"')
    with pytest.raises(
        PolicyError,
        match=r'^the key "op" appears twice in one object at sub_policies\[0\]\[0\] '
        r'\(first "Rotate", then "Invert"\); expected each key once$',
    ):
        Policy.from_json(twice)
    with pytest.raises(PolicyError, match=r'"name" appears twice in one object at the top level'):
        Policy.from_json(b'{"name": "a", "name": "b", "num_magnitude_bins": 10, "sub_policies": []}')
    with pytest.raises(DuplicateKeyError, match=r'"k" appears twice in one object at a\.b\[1\] \(first 1, then list\)'):
        loads_strict('{"a": {"b": [{}, {"k": 1, "k": []}]}}')
    assert loads_strict('{"a": [{"k": 1}, {"k": 2}]}') == {"a": [{"k": 1}, {"k": 2}]}  # one key per object
