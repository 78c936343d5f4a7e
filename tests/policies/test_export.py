"""policies export --format dali / timm: the exported policy, parsed and applied by the other
library, draws the same ops with the same probabilities and magnitudes (docs/store.md)."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from autoaug.launch.cli import main
from autoaug.policies import ops as O
from autoaug.policies.export import UnsupportedOpError, to_dali_source, to_timm
from autoaug.policies.policy import Policy
from autoaug.policies.presets import resolve

EVERY_OP = Policy(
    "every-op",
    10,
    [
        [("ShearX", 0.7, 9), ("ShearY", 0.2, 3)],
        [("TranslateX", 0.5, 4), ("TranslateY", 1.0, 9)],
        [("Rotate", 0.4, 7), ("AutoContrast", 0.3, 0)],
        [("Invert", 0.1, 0), ("Equalize", 0.6, 0)],
        [("Solarize", 0.8, 5), ("Posterize", 0.9, 9)],
        [("Contrast", 0.2, 6), ("Color", 0.3, 1)],
        [("Brightness", 0.5, 8), ("Sharpness", 0.6, 2)],
        [("Identity", 1.0, 0), ("Posterize", 0.4, 0)],
    ],
)


def _dali_policy(policy):
    scope: dict = {}
    exec(compile(to_dali_source(policy), "<export>", "exec"), scope)
    return scope["policy"]


@pytest.mark.parametrize("policy", [EVERY_OP, resolve("autoaugment-cifar10")])
def test_dali_export_same_ops_probabilities_and_magnitudes(policy):
    exported = _dali_policy(policy)
    assert exported.num_magnitude_bins == policy.num_magnitude_bins
    assert len(exported.sub_policies) == len(policy.sub_policies)
    for ours, theirs in zip(policy.sub_policies, exported.sub_policies):
        assert len(ours) == len(theirs)
        for op, (aug, prob, bin_) in zip(ours, theirs):
            spec = O.REGISTRY[op.op]
            assert aug.name == spec.dali_export.augmentation and prob == op.probability
            if not spec.has_magnitude:
                assert bin_ is None and aug.mag_range is None
                continue
            assert bin_ == op.magnitude_bin
            assert aug.randomly_negate == spec.signed
            lo, hi = aug.mag_range
            dali_mag = np.linspace(lo, hi, exported.num_magnitude_bins)[bin_]
            assert dali_mag == pytest.approx(spec.magnitude(bin_, policy.num_magnitude_bins, policy.ranges), abs=1e-9)
            if op.op in ("Brightness", "Color", "Contrast"):
                assert aug.mag_to_param(dali_mag) == pytest.approx(spec.param(bin_, policy.num_magnitude_bins))
            if op.op == "Posterize":  # DALI's mask keeps the same number of bits
                bits = spec.param(bin_, policy.num_magnitude_bins)
                assert int(aug.mag_to_param(dali_mag)) == 255 ^ (2 ** (8 - bits) - 1)


def _run_dali(source_policy, image, batches, shape=False):
    from nvidia.dali import fn, pipeline_def, types
    from nvidia.dali.auto_aug.auto_augment import apply_auto_augment

    exported = _dali_policy(source_policy)

    @pipeline_def(enable_conditionals=True, batch_size=64, num_threads=1, device_id=None, seed=7)
    def pipe():
        images = fn.external_source(lambda: [image] * 64, batch=True, dtype=types.UINT8, layout="HWC")
        kwargs = {"shape": images.shape(dtype=types.FLOAT)} if shape else {}  # TranslateX/Y: relative
        return apply_auto_augment(exported, images, **kwargs)

    p = pipe()
    p.build()
    return [np.stack([np.asarray(out.at(i)) for i in range(64)]) for (out,) in (p.run() for _ in range(batches))]


def test_dali_export_applies_with_the_policy_probability():
    policy = Policy("p", 10, [[("Invert", 0.3, 0)], [("Identity", 1.0, 0)]])  # P(inverted) = 0.5 * 0.3
    out = np.concatenate(_run_dali(policy, np.zeros((8, 8, 3), np.uint8), batches=16))
    rate = float((out.reshape(len(out), -1).max(axis=1) == 255).mean())
    assert abs(rate - 0.15) < 3 * np.sqrt(0.15 * 0.85 / len(out))


def test_dali_export_of_every_op_runs():
    image = np.random.default_rng(0).integers(0, 256, (32, 32, 3), dtype=np.uint8)
    (out,) = _run_dali(EVERY_OP, image, batches=1, shape=True)
    assert out.shape == (64, 32, 32, 3) and (out != image).any()


def _timm_aa(doc):
    from timm.data.auto_augment import AugmentOp, AutoAugment

    hparams = dict(doc["hparams"], img_mean=tuple(doc["hparams"]["img_mean"]))
    return AutoAugment([[AugmentOp(n, p, m, hparams=hparams) for n, p, m in sp] for sp in doc["policy"]])


def test_timm_export_same_ops_probabilities_and_magnitudes():
    doc = json.loads(json.dumps(to_timm(EVERY_OP)))  # through JSON, as a file would
    aa = _timm_aa(doc)
    random.seed(0)
    for ours, theirs in zip(EVERY_OP.sub_policies, aa.policy):
        kept = [op for op in ours if op.op != "Identity"]  # Identity is left out: exact
        assert len(kept) == len(theirs)
        for op, t in zip(kept, theirs):
            spec = O.REGISTRY[op.op]
            assert t.prob == op.probability
            if not spec.has_magnitude:
                assert t.level_fn is None
                continue
            (arg,) = t.level_fn(t.magnitude, t.hparams)
            ours_param = spec.param(
                op.magnitude_bin, 10, image_size=(1, 1) if spec.magnitude_range().relative_to else None
            )
            if op.op in ("Brightness", "Color", "Contrast", "Sharpness"):
                assert abs(arg - 1) == pytest.approx(abs(ours_param - 1), abs=1e-6)
            elif op.op == "Solarize":
                assert abs(arg - ours_param) <= 1  # timm truncates the threshold to an integer
            elif op.op == "Posterize":
                assert arg == ours_param
            else:  # shear factor, degrees, translate fraction of the width (image_size 1 x 1)
                assert abs(arg) == pytest.approx(abs(ours_param), abs=1e-6)


def test_timm_export_of_the_wide_ranges_keeps_magnitudes_above_level_10():
    # timm clips a level to 10 unless hparams' magnitude_max says more: Rotate 135 degrees is level 45
    from timm.data.auto_augment import AugmentOp

    policy = Policy("w", 31, [[("Rotate", 1.0, 30), ("ShearX", 1.0, 30)], [("Rotate", 1.0, 10)]], ranges="wide")
    doc = to_timm(policy)
    assert doc["hparams"]["magnitude_max"] == 45.0
    assert "magnitude_max" not in to_timm(resolve("autoaugment-cifar10"))["hparams"]  # levels up to 10: as before
    seen = []
    for name, prob, level in doc["policy"][0]:
        aug = AugmentOp(name, prob, level, hparams=doc["hparams"])
        aug.aug_fn = lambda img, *args, **_: seen.append(args[0])  # the argument timm's op receives
        aug(None)
    rotate, shear = seen
    assert abs(rotate) == pytest.approx(135.0) and abs(shear) == pytest.approx(0.99)  # the wide maxima


def test_timm_export_applies_with_the_policy_probability():
    from PIL import Image

    policy = Policy("p", 10, [[("Invert", 0.3, 0)], [("Identity", 1.0, 0)]])
    aa = _timm_aa(to_timm(policy))
    random.seed(0)
    black = Image.new("RGB", (4, 4))
    n = 2000
    rate = sum(np.asarray(aa(black)).max() == 255 for _ in range(n)) / n
    assert abs(rate - 0.15) < 3 * np.sqrt(0.15 * 0.85 / n)


def test_ops_without_an_equivalent_are_refused_in_one_line(tmp_path, capsys):
    policy = Policy("c", 10, [[("Cutout", 0.5, 3)]])
    with pytest.raises(UnsupportedOpError, match="uses Cutout"):
        to_dali_source(policy)
    with pytest.raises(UnsupportedOpError, match="uses Cutout"):
        to_timm(policy)
    path = tmp_path / "c.json"
    path.write_text(policy.to_json())
    assert main(["policies", "export", str(path), "--format", "timm"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("autoaug: error: cannot export 'c' to timm") and err.count("\n") == 1


def test_export_cli_writes_the_formats(tmp_path, capsys):
    assert main(["policies", "export", "autoaugment-cifar10", "--format", "dali", "--out", str(tmp_path / "p.py")]) == 0
    assert "Policy(" in (tmp_path / "p.py").read_text()
    assert main(["policies", "export", "autoaugment-cifar10", "--format", "timm"]) == 0
    assert json.loads(capsys.readouterr().out)["format"] == "timm-autoaugment"
