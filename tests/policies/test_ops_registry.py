"""The op registry: names, magnitude ranges per convention, signs, bin -> parameter mapping."""

from __future__ import annotations

import pytest

from autoaug.policies import ops

AUTOAUGMENT_16 = {
    "ShearX",
    "ShearY",
    "TranslateX",
    "TranslateY",
    "Rotate",
    "AutoContrast",
    "Invert",
    "Equalize",
    "Solarize",
    "Posterize",
    "Contrast",
    "Color",
    "Brightness",
    "Sharpness",
    "Cutout",
    "SamplePairing",
}


def test_registry_has_the_16_autoaugment_ops_plus_identity():
    assert set(ops.AUTOAUGMENT_OPS) == AUTOAUGMENT_16
    assert set(ops.OP_NAMES) == AUTOAUGMENT_16 | {"Identity"}
    assert ops.OP_NAMES[0] == "Identity"
    assert len(ops.RANDAUGMENT_OPS) == 14 and set(ops.RANDAUGMENT_OPS) <= set(ops.OP_NAMES)
    for name, spec in ops.REGISTRY.items():
        assert spec.name == name and spec.description


def backends() -> dict:
    from autoaug.policies import dali_apply, torch_apply

    return {"dali_apply.DALI_OPS": dali_apply.DALI_OPS, "torch_apply.TORCH_OPS": torch_apply.TORCH_OPS}


@pytest.mark.parametrize("backend", ["dali_apply.DALI_OPS", "torch_apply.TORCH_OPS"])
def test_each_backend_declares_exactly_the_registered_ops(backend):
    declared = backends()[backend]
    missing = [n for n in ops.OP_NAMES if n not in declared]
    extra = sorted(set(declared) - set(ops.OP_NAMES))
    assert not missing, f"{backend} declares no implementation of {missing} (the registry has them)"
    assert not extra, f"{backend} declares {extra}, which the registry does not have"
    for name, op in declared.items():
        assert op.name == name and op.operator, name


def test_backend_records_are_usable():
    from autoaug.policies import dali_apply, torch_apply

    for name in ops.OP_NAMES:
        dali, torch_ = dali_apply.DALI_OPS[name], torch_apply.TORCH_OPS[name]
        assert callable(torch_.apply) and callable(dali.branch.augmentation), name
        assert dali_apply.DALI_BRANCHES[dali.kind] is dali.branch
    # ops sharing an operator share a branch: the five geometric ops one warp, Invert the Solarize branch
    kinds = {name: op.kind for name, op in dali_apply.DALI_OPS.items()}
    assert {n for n, k in kinds.items() if k == "Warp"} == {"ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate"}
    assert kinds["Invert"] == "Solarize" and kinds["Cutout"] == "Cutout"


@pytest.mark.parametrize(
    "decorate, message",
    [
        (
            lambda dali, torch_: dali.dali_op("Blur", operator="fn.gaussian_blur"),
            r"^dali_op: unknown op 'Blur'; expected one of \['Identity', .*declare the op in "
            r"autoaug.policies.ops.REGISTRY first$",
        ),
        (
            lambda dali, torch_: torch_.torch_op("Blur", operator="F.gaussian_blur"),
            r"^torch_op: unknown op 'Blur'; expected one of .*declare the op in autoaug.policies.ops.REGISTRY first$",
        ),
        (
            lambda dali, torch_: torch_.torch_op("rotate", operator="F.rotate"),
            r"^torch_op: unknown op 'rotate' \(did you mean 'Rotate'\?\)",
        ),
        (
            lambda dali, torch_: dali.dali_op("Rotate", kind="Warp", operator="fn.warp_affine"),
            r"^dali_op: op 'Rotate' is declared twice; each backend declares each op once$",
        ),
        (
            lambda dali, torch_: torch_.torch_op("Rotate", operator="F.rotate"),
            r"^torch_op: op 'Rotate' is declared twice",
        ),
    ],
)
def test_a_backend_refuses_an_op_the_registry_does_not_have(decorate, message):
    from autoaug.policies import dali_apply, torch_apply

    before = {k: dict(v) for k, v in backends().items()}
    with pytest.raises(ValueError, match=message):
        decorate(dali_apply, torch_apply)
    assert backends() == before  # nothing was registered


def test_a_dali_branch_must_read_the_table_it_declares():
    from autoaug.policies import dali_apply

    with pytest.raises(ValueError, match=r"dali_branch 'Blur2': blur takes no 'kernel' argument, its table"):

        def blur(data, _, param):
            return data

        dali_apply.dali_branch("Blur2", table="kernel")(blur)
    assert "Blur2" not in dali_apply.DALI_BRANCHES


def test_signed_and_magnitude_free_ops():
    signed = {n for n, s in ops.REGISTRY.items() if s.signed}
    assert signed == {
        "ShearX",
        "ShearY",
        "TranslateX",
        "TranslateY",
        "Rotate",
        "Contrast",
        "Color",
        "Brightness",
        "Sharpness",
    }
    no_mag = {n for n, s in ops.REGISTRY.items() if not s.has_magnitude}
    assert no_mag == {"Identity", "AutoContrast", "Invert", "Equalize"}


# (op, ranges, image_size (h, w), expected parameter at the last of 10 bins, at bin 0)
PAPER = [
    ("ShearX", "autoaugment", None, 0.3, 0.0),
    ("ShearY", "wide", None, 0.99, 0.0),
    ("TranslateX", "autoaugment", (331, 331), 150.0, 0.0),  # the paper's 150 px on 331 px
    ("TranslateX", "autoaugment", (24, 32), 150 / 331 * 32, 0.0),  # width
    ("TranslateY", "autoaugment", (24, 32), 150 / 331 * 24, 0.0),  # height
    ("TranslateX", "wide", (32, 32), 32.0, 0.0),  # TA-wide 32 px on 32 px images
    ("Rotate", "autoaugment", None, 30.0, 0.0),
    ("Rotate", "wide", None, 135.0, 0.0),
    ("Solarize", "autoaugment", None, 0.0, 256.0),
    ("Solarize", "wide", None, 0.0, 256.0),
    ("Posterize", "autoaugment", None, 4, 8),  # 4..8 bits (paper), not the TF code's 0..4
    ("Posterize", "wide", None, 2, 8),
    ("Contrast", "autoaugment", None, 1.9, 1.0),
    ("Color", "autoaugment", None, 1.9, 1.0),
    ("Brightness", "wide", None, 1.99, 1.0),
    ("Sharpness", "autoaugment", None, 1.9, 1.0),
    ("Cutout", "autoaugment", (331, 331), 60, 0),
    ("Cutout", "autoaugment", (32, 40), round(60 / 331 * 32), 0),  # of min(H, W)
    ("SamplePairing", "autoaugment", None, 0.4, 0.0),
]


@pytest.mark.parametrize("name, ranges, size, hi, lo", PAPER)
def test_ranges_follow_the_papers(name, ranges, size, hi, lo):
    spec = ops.get(name)
    assert spec.param(9, 10, ranges, image_size=size) == pytest.approx(hi)
    assert spec.param(0, 10, ranges, image_size=size) == pytest.approx(lo)


def test_bins_are_linear_and_signs_negate():
    rot = ops.get("Rotate")
    assert [rot.param(b, 4) for b in range(4)] == pytest.approx([0, 10, 20, 30])
    assert rot.param(3, 4, negate=True) == pytest.approx(-30)
    assert ops.get("Brightness").param(9, 10, negate=True) == pytest.approx(0.1)  # 1 - 0.9
    # unsigned ops ignore negate
    assert ops.get("Solarize").param(9, 10, negate=True) == 0.0
    # posterize rounds half to even like torch.round: linspace(8, 4, 10)
    assert [ops.get("Posterize").param(b, 10) for b in range(10)] == [8, 8, 7, 7, 6, 6, 5, 5, 4, 4]
    # RandAugment's 31 bins: bin 9 of rotate = 9 / 30 * 30 degrees
    assert rot.param(9, 31) == pytest.approx(9.0)
    # one bin only: the identity
    assert rot.param(0, 1) == 0.0


def test_errors_name_the_problem():
    with pytest.raises(ValueError, match=r"unknown op 'Shear' .*expected one of \['Identity'"):
        ops.get("Shear")
    with pytest.raises(
        ValueError,
        match=r"TranslateX: its magnitude is relative to the image "
        r"width; pass image_size",
    ):
        ops.get("TranslateX").param(3, 10)
    with pytest.raises(ValueError, match=r"unknown ranges 'paper'; expected one of"):
        ops.get("Rotate").param(3, 10, "paper")
    with pytest.raises(ValueError, match=r"magnitude_bin 10 is outside \[0, 9\]"):
        ops.get("Rotate").param(10, 10)


def test_describe_ranges_for_docs():
    assert ops.get("TranslateX").magnitude_range("autoaugment").describe() == "0 -> 0.4532*W px"
    assert ops.get("Posterize").magnitude_range("wide").describe() == "8 -> 2 bits kept"
    assert ops.get("Invert").magnitude_range() is None


def test_an_op_added_to_the_registry_is_declared_once_per_backend(monkeypatch):
    from autoaug.policies import dali_ops, torch_apply

    monkeypatch.setitem(ops.REGISTRY, "Blur", ops.OpSpec(name="Blur", description="blurs"))
    for module, table in ((dali_ops, "DALI_OPS"), (dali_ops, "DALI_BRANCHES"), (torch_apply, "TORCH_OPS")):
        monkeypatch.setattr(module, table, dict(getattr(module, table)))  # the declarations below stay here

    @dali_ops.dali_op("Blur", table="param", operator="fn.gaussian_blur")
    def blur(data, _, param):
        return data

    assert dali_ops.DALI_OPS["Blur"].branch is blur and blur.kind == "Blur" and blur.table == "param"
    monkeypatch.delitem(dali_ops.DALI_OPS, "Blur")  # declared again, wrongly: joining a branch with a table
    with pytest.raises(
        ValueError,
        match=r"^dali_op 'Blur': with kind='Warp', table / sized / arguments are the "
        r"branch's and the decorated function is to_table; pass none of them$",
    ):
        dali_ops.dali_op("Blur", kind="Warp", table="matrix", operator="fn.warp_affine")
    torch_apply.torch_op("Blur", operator="F.gaussian_blur")(lambda img, _, **__: img)
    assert torch_apply.TORCH_OPS["Blur"].operator == "F.gaussian_blur"
