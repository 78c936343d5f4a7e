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


def _blur_dali(data, _, param):
    return data


def _blur_torch(img, param, **_):
    return img


def _blur(**changes):
    """The fields of a well-formed declaration of an op "Blur", with ``changes``."""
    fields = dict(
        name="Blur",
        description="blurs",
        ranges=ops.MagnitudeRange(0.0, 1.0, "sigma"),
        dali=ops.DaliImpl(branch=_blur_dali, table="param", operator="fn.gaussian_blur"),
        torch=ops.TorchImpl(_blur_torch, "F.gaussian_blur"),
    )
    return {**fields, **changes}


@pytest.mark.parametrize(
    "fields, message",
    [
        (_blur(name="Rotate"), r"^declare_op: op 'Rotate' is already declared; remove its declaration first"),
        (_blur(name="blur op"), r"^declare_op: name 'blur op'; expected a letter then up to 63 letters or digits$"),
        (_blur(dali=None), r"^declare_op 'Blur': dali=None; expected a DaliImpl \(every op is applied by both"),
        (_blur(torch=None), r"^declare_op 'Blur': torch=None; expected a TorchImpl"),
        (
            _blur(dali=ops.DaliImpl(kind="Warp", table="matrix", operator="fn.warp_affine")),
            r"^declare_op 'Blur': dali: with kind='Warp', table / sized / arguments are the branch's; pass none",
        ),
        (
            _blur(dali=ops.DaliImpl(operator="fn.gaussian_blur")),
            r"^declare_op 'Blur': dali: give branch= \(its own branch\) or kind= \(the branch it joins\)",
        ),
        (
            _blur(dali=ops.DaliImpl(branch=_blur_dali, table="kernel", operator="fn.filter")),
            r"^declare_op 'Blur': dali.branch _blur_dali takes no 'kernel' argument, its table$",
        ),
        (
            _blur(dali=ops.DaliImpl(branch=_blur_dali, table="sigma", operator="fn.filter")),
            r"^declare_op 'Blur': dali.table='sigma'; expected None or one of \['param', 'matrix', 'kernel'\]$",
        ),
        (
            _blur(ranges={"autoaugment": ops.MagnitudeRange(0.0, 1.0, "sigma")}),
            r"^declare_op 'Blur': ranges=.*; expected a MagnitudeRange, or one per convention",
        ),
        (_blur(colour=1), r"^declare_op: .*unexpected keyword argument 'colour'; expected the fields of OpSpec$"),
        (
            _blur(dali_export="gaussian blur"),
            r"^declare_op 'Blur': dali_export.augmentation='gaussian blur'; expected the name of a function of nvidia",
        ),
        (
            _blur(timm_export=ops.TimmExport("GaussianBlur")),
            r"^declare_op 'Blur': timm_export: the op has a magnitude; give unit= \(magnitude per timm level\) or level=$",
        ),
        (
            _blur(timm_export="GaussianBlur"),
            r"^declare_op 'Blur': timm_export='GaussianBlur'; expected a TimmExport or None$",
        ),
        (_blur(randaugment=True), r"^declare_op 'Blur': randaugment=True; expected None or its place in RandAugment's"),
    ],
)
def test_declare_op_refuses_a_declaration_in_one_line(fields, message):
    from autoaug.policies import dali_apply, torch_apply

    before = (ops.OP_NAMES, dict(dali_apply.DALI_OPS), dict(torch_apply.TORCH_OPS))
    with pytest.raises(ValueError, match=message):
        ops.declare_op(**fields)
    assert (ops.OP_NAMES, dict(dali_apply.DALI_OPS), dict(torch_apply.TORCH_OPS)) == before  # nothing declared


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


def test_a_declared_op_is_in_every_table_when_read_and_gone_when_removed():
    from autoaug.policies import Policy, dali_apply, torch_apply
    from autoaug.policies.policy import PolicyError
    from autoaug.search.space import SearchSpace

    kinds_before = dali_apply.kind_order()
    with ops.declare_op(**_blur()) as spec:
        assert ops.REGISTRY["Blur"] is spec and ops.get("Blur") is spec and ops.OP_NAMES[-1] == "Blur"
        dali = dali_apply.DALI_OPS["Blur"]
        assert dali.kind == "Blur" and dali.branch.table == "param" and dali_apply.DALI_BRANCHES["Blur"] is dali.branch
        assert dali_apply.DALI_OPS["Blur"] is dali  # built once per declaration
        assert dali_apply.kind_order() == (*kinds_before, "Blur")
        assert torch_apply.TORCH_OPS["Blur"].apply is _blur_torch
        assert Policy("p", 10, [[("Blur", 0.5, 3)]]).ops_used == ("Blur",)
        assert SearchSpace(ops=["Rotate", "Blur"]).op_choices == ("Rotate", "Blur")
        assert "| Blur | 0 -> 1 sigma | 0 -> 1 sigma | no | `fn.gaussian_blur` | `F.gaussian_blur` |" in ops.docs_table(
            ["Blur"]
        )
    for table in (ops.REGISTRY, dali_apply.DALI_OPS, dali_apply.DALI_BRANCHES, torch_apply.TORCH_OPS):
        assert "Blur" not in table and "Blur" not in list(table)
    assert "Blur" not in ops.OP_NAMES and dali_apply.kind_order() == kinds_before
    with pytest.raises(PolicyError, match=r"field 'op': unknown op 'Blur'"):
        Policy("p", 10, [[("Blur", 0.5, 3)]])
    with pytest.raises(ValueError, match=r"SearchSpace.ops: unknown op 'Blur'"):
        SearchSpace(ops=["Rotate", "Blur"])


def test_a_derived_op_is_the_same_op_under_another_range():
    from autoaug.policies import dali_apply, torch_apply

    wide = ops.MagnitudeRange(0.0, 60.0, "degrees")
    with ops.declare_op(ops.get("Rotate").derive("Rotate60", ranges=wide)) as spec:
        assert spec.signed and spec.param(9, 10, negate=True) == pytest.approx(-60.0)
        assert ops.get("Rotate").param(9, 10) == pytest.approx(30.0)  # the original keeps its range
        assert dali_apply.DALI_OPS["Rotate60"].branch is dali_apply.DALI_BRANCHES["Warp"]
        assert torch_apply.TORCH_OPS["Rotate60"].apply is torch_apply.TORCH_OPS["Rotate"].apply
    with ops.declare_op(ops.get("Solarize").derive("Solarize2", ranges=ops.MagnitudeRange(256.0, 128.0, "t"))):
        assert dali_apply.DALI_OPS["Solarize2"].branch is dali_apply.DALI_OPS["Solarize"].branch  # joins, no twin
    with pytest.raises(ValueError, match=r"^Rotate.derive: cannot change \['dali'\]; expected ranges, signed"):
        ops.get("Rotate").derive("Rotate2", dali=None)


def test_an_implementation_named_but_missing_is_refused_when_the_backend_reads_it():
    from autoaug.policies import dali_apply, torch_apply

    with ops.declare_op(**_blur(torch=ops.TorchImpl("no_such_function", "F.gaussian_blur"))):
        with pytest.raises(
            ValueError,
            match=r"^op 'Blur': torch.apply='no_such_function', but autoaug.policies.torch_apply has no function",
        ):
            torch_apply.TORCH_OPS["Blur"]
    with ops.declare_op(**_blur(dali=ops.DaliImpl(kind="Sharpen", operator="fn.filter"))):
        with pytest.raises(ValueError, match=r"^op 'Blur': dali.kind='Sharpen' is no branch; expected one of \["):
            dali_apply.DALI_OPS["Blur"]
