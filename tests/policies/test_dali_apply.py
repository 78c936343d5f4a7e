"""The DALI policy step: determinism, fixed graph size, presets, trace, errors."""

from __future__ import annotations

import numpy as np
import pytest
from nvidia.dali import fn, pipeline_def

from autoaug.policies import Policy, presets
from autoaug.policies.dali_apply import affine_terms, apply_policy, decode_trace, stage_tables
from autoaug.policies.ops import RANDAUGMENT_OPS
from autoaug.policies.torch_apply import apply_op


def build(policy, images, **kwargs):
    batch = list(images)

    @pipeline_def(batch_size=len(batch), num_threads=1, device_id=None, seed=0, enable_conditionals=True)
    def pipe():
        x = fn.external_source(source=lambda: batch, batch=True, layout="HWC")
        return apply_policy(policy, x, **kwargs)

    p = pipe()
    p.build()
    return p


def test_same_seed_same_output_different_seed_different(images64, dali_run):
    policy = presets.resolve("autoaugment-cifar10")
    a1, a2 = dali_run(policy, images64, seed=42, iterations=2)
    b1, b2 = dali_run(policy, images64, seed=42, iterations=2, num_threads=1)
    c1, _ = dali_run(policy, images64, seed=43, iterations=2)
    assert np.array_equal(a1, b1) and np.array_equal(a2, b2)  # any thread count
    assert not np.array_equal(a1, a2)  # successive batches get new draws
    assert not np.array_equal(a1, c1)
    assert (np.abs(a1.astype(int) - images64).mean(axis=(1, 2, 3)) > 0).mean() > 0.3


def test_graph_size_does_not_grow_with_the_number_of_sub_policies(images64):
    kinds = RANDAUGMENT_OPS  # 14 operations
    small = Policy("small", 31, [[(k, 1.0, 30)] for k in kinds], ranges="wide")
    trivial = presets.resolve("trivialaugment")  # 434 sub-policies, the same 14 kinds
    assert len(build(small, images64[:4])._ops) == len(build(trivial, images64[:4])._ops)
    ra1, ra2 = presets.resolve("randaugment:n=1"), presets.resolve("randaugment:n=2")
    # 14 vs 196 sub-policies: each stage adds the same constant number of operators
    one, two = len(build(ra1, images64[:4])._ops), len(build(ra2, images64[:4])._ops)
    assert two - one < one


@pytest.mark.parametrize("ref", ["randaugment:n=2,m=9", "trivialaugment", "autoaugment-svhn", "autoaugment-imagenet"])
def test_presets_run(ref, images64, dali_run):
    policy = presets.resolve(ref)
    [(out, trace)] = dali_run(policy, images64, seed=1, return_trace=True)
    assert out.shape == images64.shape and out.dtype == np.uint8
    decoded = decode_trace(policy, trace)
    assert all(0 <= k < len(policy) for k, _ in decoded)
    assert len({k for k, _ in decoded}) > 10  # many different sub-policies drawn
    unchanged = np.all(out == images64, axis=(1, 2, 3))
    fired = np.array([bool(f) for _, f in decoded])
    # an image no op fired on is untouched
    assert np.all(unchanged[~fired])


def test_trace_matches_the_images(images64, dali_run):
    # deterministic exact ops: the output must be what the trace says was applied
    policy = Policy("exact", 10, [[("Invert", 0.5, 0), ("Posterize", 0.5, 9)], [("Solarize", 0.5, 5)]])
    [(out, trace)] = dali_run(policy, images64, seed=3, return_trace=True)
    import torch

    for img, src, (k, fired) in zip(out, images64, decode_trace(policy, trace)):
        x = torch.from_numpy(src).permute(2, 0, 1)
        for name in fired:
            op = next(o for o in policy.sub_policies[k] if o.op == name)
            x = apply_op(x, name, op.magnitude_bin, 10)
        assert np.array_equal(img, x.permute(1, 2, 0).numpy())


def test_identity_policies_return_the_input(images64, dali_run):
    for ref in ("none", "standard"):
        [out] = dali_run(presets.resolve(ref), images64)
        assert np.array_equal(out, images64)
    never = Policy("never", 10, [[("Invert", 0.0, 0), ("Rotate", 0.0, 9)]])
    [out] = dali_run(never, images64)
    assert np.array_equal(out, images64)


def test_any_image_size(cifar_sample, dali_run):
    images = np.ascontiguousarray(np.repeat(np.repeat(cifar_sample[0][:8], 2, 1), 3, 2))  # 64x96
    policy = presets.resolve("autoaugment-cifar10")
    [out] = dali_run(policy, images, seed=4)
    [sized] = dali_run(policy, images, seed=4, image_size=(64, 96))
    assert out.shape == images.shape and np.array_equal(out, sized)
    cut = Policy("cut", 10, [[("Cutout", 1.0, 9), ("SamplePairing", 1.0, 3)]])
    [out] = dali_run(cut, images, seed=4)
    [sized] = dali_run(cut, images, seed=4, image_size=(64, 96))
    assert np.array_equal(out, sized)


def test_stage_tables_fold_kinds():
    t = stage_tables(
        Policy("p", 10, [[("ShearX", 0.5, 3)], [("Rotate", 1.0, 9)], [("Invert", 0.2, 0)], [("Solarize", 1.0, 9)]]), 0
    )
    assert t.kinds == ("Identity", "Warp", "Solarize")  # 4 ops, 2 branches
    assert list(t.kind) == [1, 1, 1, 1, 2, 2, 2, 2]
    assert list(t.prob) == [0.5, 0.5, 1.0, 1.0, 0.2, 0.2, 1.0, 1.0]
    assert t.signed and not t.all_certain
    assert list(t.param[4:]) == [0.0, 0.0, 0.0, 0.0]  # invert = solarize at threshold 0
    assert t.affine.shape == (8, 3, 2, 3) and t.kernel.shape == (8, 3, 3)
    # ShearX at bin 3 of 10 (0.1), both signs: the forward matrix of out(x, y) = in(x + m*y, y)
    assert np.allclose(t.affine[0, 0], [[1.0, -0.1, 0.0], [0.0, 1.0, 0.0]])
    assert np.allclose(t.affine[1, 0], [[1.0, 0.1, 0.0], [0.0, 1.0, 0.0]])
    assert not t.affine[:2, 1:].any()  # shear does not depend on the size


def test_stage_tables_convert_parameters_per_op():
    t = stage_tables(
        Policy(
            "p",
            10,
            [
                [("Posterize", 1.0, 9)],
                [("Cutout", 1.0, 9)],
                [("Sharpness", 1.0, 9)],
                [("TranslateX", 1.0, 9)],
                [("AutoContrast", 1.0, 0)],
            ],
        ),
        0,
    )
    assert t.kinds == ("Identity", "Warp", "AutoContrast", "Posterize", "Sharpness", "Cutout")
    assert t.param[0] == t.param[1] == 0xF0  # 4 bits kept: the uint8 mask
    assert t.param[2] == t.param[3] == pytest.approx(60 / 331)  # cutout: a fraction of the shorter side
    blur, ident = np.array([[1, 1, 1], [1, 5, 1], [1, 1, 1]]) / 13.0, np.zeros((3, 3))
    ident[1, 1] = 1.0
    assert np.allclose(t.kernel[4], 1.9 * ident - 0.9 * blur)  # factor 1.9
    assert np.allclose(t.kernel[5], 0.1 * ident + 0.9 * blur)  # negated: factor 0.1
    assert t.affine[6, 1, 0, 2] == pytest.approx(150 / 331) and t.affine[7, 1, 0, 2] == pytest.approx(-150 / 331)
    assert t.param[8] == 0.0 and t.kind[8] == 2


def test_affine_terms_refuses_other_ops():
    with pytest.raises(
        ValueError,
        match=r"Color is not a geometric op; expected one of \['ShearX', 'ShearY', "
        r"'TranslateX', 'TranslateY', 'Rotate'\]",
    ):
        affine_terms("Color", 0.5)


def test_errors(images64):
    policy = presets.resolve("autoaugment-cifar10")
    with pytest.raises(ValueError, match="policy must be a policies.Policy, got str"):
        apply_policy("autoaugment-cifar10", None)
    with pytest.raises(ValueError, match="images must be a DALI DataNode .* got ndarray"):
        apply_policy(policy, images64)
    with pytest.raises(
        ValueError,
        match=r"interpolation='cubic'; expected one of "
        r"\['bilinear', 'nearest'\]",
    ):
        build(policy, images64[:2], interpolation="cubic")
    with pytest.raises(ValueError, match=r"image_size=\(32, 0\); expected positive integers"):
        build(policy, images64[:2], image_size=(32, 0))
    with pytest.raises(ValueError, match=r"fill_value=300; expected an int in \[0, 255\]"):
        build(policy, images64[:2], fill_value=300)


def test_dali_is_bounded_to_the_versions_the_policy_step_was_written_against():
    # dali_apply builds on nvidia.dali.auto_aug's private `_Augmentation` and its augmentations' `.op`:
    # pyproject.toml bounds DALI from above, and the installed DALI is within the bound.
    import re
    from importlib import metadata
    from pathlib import Path

    import tomllib

    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    extras = tomllib.loads(pyproject.read_text())["project"]["optional-dependencies"]
    # whichever DALI build is installed (the `search` extra's CUDA 12 one, or `search-cuda13`'s)
    builds = {
        extra: [d for d in extras[extra] if d.startswith("nvidia-dali-cuda")] for extra in ("search", "search-cuda13")
    }
    installed = {}
    for extra, [spec] in builds.items():
        name = re.match(r"[\w-]+", spec).group(0)
        upper = re.search(r"<\s*([\d.]+)", spec)
        assert upper, f"{spec!r} ({extra}) has no upper bound"
        try:
            installed[spec] = (metadata.version(name), upper.group(1))
        except metadata.PackageNotFoundError:
            continue
    assert installed, "no DALI build of the search extras is installed"
    for spec, (version, bound) in installed.items():
        release = tuple(int(x) for x in re.findall(r"\d+", version)[:3])
        assert release < tuple(int(x) for x in bound.split(".")), f"DALI {version} is outside {spec!r}"


_CONVERTED = r"""
import json
import numpy as np
from nvidia.dali import fn, pipeline_def
from nvidia.dali._autograph.pyct import transpiler
from autoaug.policies import presets
from autoaug.policies.dali_apply import PolicyInputs, apply_base, apply_policy, apply_policy_inputs

converted = []
transform = transpiler.GenericTranspiler.transform_function
def spy(self, fn_, user_context):
    converted.append(f"{fn_.__module__}.{fn_.__qualname__}")
    return transform(self, fn_, user_context)
transpiler.GenericTranspiler.transform_function = spy

images = [np.zeros((32, 32, 3), dtype=np.uint8)] * 4
spec = PolicyInputs(["Rotate", "Cutout", "Color", "SamplePairing", "Sharpness"], 4, 2, 32)
tables = spec.tables(presets.resolve("none"))
policy = presets.resolve("autoaugment-cifar10")

def feed(table):
    return lambda: [table] * 4

@pipeline_def(enable_conditionals=True, batch_size=4, num_threads=1, device_id=None, seed=0)
def graph():
    x = apply_base("standard", fn.external_source(source=lambda: images, batch=True, layout="HWC"), image_size=32)
    y = apply_policy(policy, x, image_size=32, return_trace=True)[0]
    inputs = [fn.external_source(source=feed(t), batch=True) for t in tables]
    return y, apply_policy_inputs(spec, x, inputs)
pipe = graph()
pipe.build()
pipe.run()
print(json.dumps(sorted(set(converted))))
"""


def test_autograph_converts_only_the_conditional_selection_of_a_policy_step(tmp_path):
    """DALI's AutoGraph converts every function a conditional pipeline calls, unless it is
    ``@do_not_convert``; each conversion costs the process's first build about 0.1 CPU-s (34 of
    them cost every trial, calibration and compare run about 3 s). Only the functions with an
    ``if`` on a DataNode, or that lead to one, may be converted (a fresh process: conversions are
    cached per process)."""
    import json
    import subprocess
    import sys

    script = tmp_path / "build.py"  # AutoGraph reads the source of what it converts: a file, not -c
    script.write_text(_CONVERTED)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    converted = json.loads(out.stdout.strip().splitlines()[-1])
    ours = [name for name in converted if not name.startswith("__main__.")]
    assert ours == [
        "autoaug.policies.dali_apply._select",
        "autoaug.policies.dali_apply.apply_policy",
        "autoaug.policies.dali_apply.apply_policy_inputs",
    ], converted
