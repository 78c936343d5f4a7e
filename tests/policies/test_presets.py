"""Presets and resolve_policy."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest

from autoaug import policies
from autoaug.policies import Policy, presets
from autoaug.policies.ops import RANDAUGMENT_OPS


@pytest.mark.parametrize("dataset", ["cifar10", "svhn", "imagenet"])
def test_published_autoaugment_policies(dataset):
    p = presets.resolve(f"autoaugment-{dataset}")
    assert p.name == f"autoaugment-{dataset}"
    assert len(p) == 25 and all(len(s) == 2 for s in p.sub_policies)
    assert p.num_magnitude_bins == 10 and p.ranges == "autoaugment" and p.base == "standard"
    assert all(0 <= op.magnitude_bin <= 9 for s in p.sub_policies for op in s)
    assert "Cutout" not in p.ops_used and "SamplePairing" not in p.ops_used


def test_autoaugment_cifar10_transcription_spot_checks():
    # first, middle and last sub-policies of the paper's reduced CIFAR-10 table
    p = presets.resolve("autoaugment-cifar10").sub_policies
    assert [(o.op, o.probability, o.magnitude_bin) for o in p[0]] == [("Invert", 0.1, 7), ("Contrast", 0.2, 6)]
    assert [(o.op, o.probability, o.magnitude_bin) for o in p[12]] == [("TranslateY", 0.4, 3), ("Sharpness", 0.2, 6)]
    assert [(o.op, o.probability, o.magnitude_bin) for o in p[24]] == [("TranslateY", 0.7, 9), ("AutoContrast", 0.9, 1)]
    svhn = presets.resolve("autoaugment-svhn").sub_policies
    assert [(o.op, o.probability, o.magnitude_bin) for o in svhn[0]] == [("ShearX", 0.9, 4), ("Invert", 0.2, 3)]
    imagenet = presets.resolve("autoaugment-imagenet").sub_policies
    assert [(o.op, o.probability, o.magnitude_bin) for o in imagenet[0]] == [("Posterize", 0.4, 8), ("Rotate", 0.6, 9)]


def test_randaugment_is_every_ordered_tuple():
    p = presets.resolve("randaugment:n=2,m=9")
    assert p == presets.resolve("randaugment") == presets.randaugment()
    assert len(p) == 14**2 and p.num_magnitude_bins == 31
    tuples = [tuple(o.op for o in s) for s in p.sub_policies]
    assert sorted(tuples) == sorted(itertools.product(RANDAUGMENT_OPS, repeat=2))
    assert {(o.probability, o.magnitude_bin) for s in p.sub_policies for o in s} == {(1.0, 9)}
    p3 = presets.resolve("preset:randaugment:n=3,m=30")
    assert len(p3) == 14**3 and p3.sub_policies[0][0].magnitude_bin == 30
    assert presets.resolve("randaugment:m=5").name == "randaugment:n=2,m=5"


def test_trivialaugment_is_uniform_over_op_and_bin():
    p = presets.resolve("trivialaugment")
    assert p.ranges == "wide" and p.num_magnitude_bins == 31 and len(p) == 14 * 31
    pairs = Counter((s[0].op, s[0].magnitude_bin) for s in p.sub_policies)
    assert set(pairs.values()) == {1} and len(pairs) == 434
    assert {s[0].probability for s in p.sub_policies} == {1.0}


def test_none_crop_and_standard_are_the_bases_alone():
    none, crop, standard = presets.resolve("none"), presets.resolve("crop"), presets.resolve("preset:standard")
    assert none.is_identity and none.base == "none"
    assert crop.is_identity and crop.base == "crop" and crop.name == "crop"
    assert standard.is_identity and standard.base == "standard"
    assert len({none.content_hash, crop.content_hash, standard.content_hash}) == 3
    # crop resolves wherever a preset does: the one resolver, bare or prefixed, before any store
    assert policies.resolve_policy("preset:crop") == crop

    class Store:
        def load(self, ref):
            raise AssertionError("a preset name must not reach the store")

    assert policies.resolve_policy("crop", store=Store()) == crop


def test_names_resolve_with_and_without_prefix():
    for name in presets.names():
        assert presets.resolve(name) == presets.resolve("preset:" + name)
        assert presets.is_preset(name)
    assert not presets.is_preset("mine@3")


@pytest.mark.parametrize(
    "ref, match",
    [
        (
            "autoaugment-cifar100",
            r"unknown preset 'autoaugment-cifar100'; known presets: "
            r"autoaugment-cifar10, autoaugment-svhn, autoaugment-imagenet, "
            r"randaugment:n=2,m=9, trivialaugment, none, crop, standard",
        ),
        ("preset:nope", r"unknown preset 'preset:nope'; known presets:"),
        ("randaugment:n=0", r"randaugment: n=0 is invalid; expected an int in \[1, 4\]"),
        ("randaugment:m=31", r"randaugment: m=31 is invalid; expected an int in \[0, 30\]"),
        ("randaugment:k=2", r"bad argument 'k=2'; expected randaugment:n=N,m=M"),
        ("randaugment:n=2,n=3", r"bad argument 'n=3'"),
    ],
)
def test_unknown_or_bad_presets(ref, match):
    with pytest.raises(ValueError, match=match):
        presets.resolve(ref)


def test_resolve_policy_preset_file_and_store(tmp_path):
    assert policies.resolve_policy("trivialaugment") == presets.resolve("trivialaugment")
    mine = Policy("mine", 10, [[("Rotate", 0.5, 3)]])
    assert policies.resolve_policy(mine) is mine
    path = tmp_path / "mine.json"
    path.write_text(mine.to_json())
    assert policies.resolve_policy(str(path)) == mine
    assert policies.resolve_policy(path) == mine

    class FakeStore:
        def load(self, ref):
            assert ref == "mine@latest"
            return mine

    assert policies.resolve_policy("mine@latest", store=FakeStore()) == mine
    with pytest.raises(
        ValueError,
        match=r"cannot resolve policy 'mine@latest': not a preset "
        r"\(known: autoaugment-cifar10",
    ):
        policies.resolve_policy("mine@latest")
    with pytest.raises(ValueError, match=r"policy file '.*missing.json' does not exist"):
        policies.resolve_policy(str(tmp_path / "missing.json"))
    bad = tmp_path / "bad.json"
    bad.write_text('{"name": "x", "num_magnitude_bins": 10, "sub_policies": [[["Nope", 1, 0]]]}')
    with pytest.raises(
        ValueError,
        match=r"bad.json' is not a valid policy: sub-policy 0, op 0: "
        r"field 'op': unknown op 'Nope'",
    ):
        policies.resolve_policy(str(bad))
    with pytest.raises(ValueError, match=r"policy reference 3 is a int"):
        policies.resolve_policy(3)


def test_every_reader_of_a_policy_file_takes_the_same_files(tmp_path):
    """One reader (policies.policy.read_policy_text): a UTF-8 file with a BOM, which `policies
    import` accepts, resolves for `train --policy`/`compare` too; a UTF-16 file is refused by
    each with the reader's one-line reason."""
    from autoaug.policies.policy import Policy
    from autoaug.policies.presets import resolve

    mine = resolve("autoaugment-svhn").with_name("mine")
    bom = tmp_path / "bom.json"
    bom.write_bytes(b"\xef\xbb\xbf" + mine.to_json().encode())
    assert policies.resolve_policy(str(bom)) == mine == Policy.from_file(bom)
    utf16 = tmp_path / "utf16.json"
    utf16.write_bytes(mine.to_json().encode("utf-16"))
    for read in (lambda: policies.resolve_policy(str(utf16)), lambda: Policy.from_file(utf16)):
        with pytest.raises(
            ValueError, match=r"the file is not UTF-8 text \(invalid start byte: byte 0xff at offset 0\)"
        ):
            read()
