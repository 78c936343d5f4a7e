"""An operation added with one declaration (``ops.declare_op``) is searched, applied by both
backends, trains and is exported: search spaces propose it and decode it; a policy using it agrees
between DALI (CPU) and torchvision, trains a step through the project's DALI training path
(``train``: a fixed policy and a schedule) and through the ``Learner`` on torchvision batches; the
DALI and timm exports its declaration gives run in those libraries and darken as it does; declared
with a place among RandAugment's operations, it is one of them (and of the RandAugment and
TrivialAugment presets); and the declaration is gone after the test."""

from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest
import torch

from autoaug.policies import Policy, ops, presets
from autoaug.policies.dali_apply import decode_trace
from autoaug.policies.export import UnsupportedOpError, to_dali_source, to_timm
from autoaug.policies.torch_apply import apply_op, to_torchvision

# The op: every channel times 1 - m (m from 0, the identity, to 0.6), rounded. Unsigned.
DARKEN_RANGE = ops.MagnitudeRange(0.0, 0.6, "fraction darker")
# As the op-backend tests allow an op whose backends round differently (Brightness).
TOLERANCE = 1.0


def darken_dali(data, _, param):
    from nvidia.dali import fn

    return fn.cast_like(data * param, data)


def darken_torch(img, factor, **_):
    return (img.float() * factor).round_().clamp_(0, 255).to(img.dtype)


def darken_timm_level(m, rng):
    # timm's Brightness (not BrightnessIncreasing) multiplies by level / 10 * 1.8 + 0.1
    return (0.9 - m) / 0.18


#: RandAugment's operations and the presets' hashes as they are with the built-in operations alone.
RANDAUGMENT_14 = ops.BUILTIN_OPS[:6] + ("Brightness", "Color", "Contrast", "Sharpness", "Posterize", "Solarize")
RANDAUGMENT_14 += ("AutoContrast", "Equalize")
RANDAUGMENT_HASH = "e61b119662095084b1b0b3bdd2eff6e44f0405afd7613e2a33561e5741563676"  # randaugment:n=2,m=9
TRIVIALAUGMENT_HASH = "136a784bc6b0d4938f29720e0e23d0c99539e8e0f15402d4769af70d03c683de"


@pytest.fixture
def darken():
    """The op ``Darken``, declared for one test (its declaration removed afterwards), with its
    exports (DALI's brightness at 1 - m, timm's Brightness) and a place after RandAugment's 14."""
    with ops.declare_op(
        name="Darken",
        description="multiplies every channel by 1 - m",
        ranges=DARKEN_RANGE,
        to_param=lambda m: 1.0 - m,
        dali=ops.DaliImpl(branch=darken_dali, table="param", operator="x * (1 - m), fn.cast_like"),
        torch=ops.TorchImpl(darken_torch, "x * (1 - m), rounded"),
        # DALI's brightness multiplies by 1 + magnitude, and never negates it here: magnitude -m
        dali_export=ops.DaliExport("brightness", scale=-1.0, randomly_negate=False),
        timm_export=ops.TimmExport("Brightness", level=darken_timm_level),
        randaugment=14,
    ) as spec:
        yield spec
    assert "Darken" not in ops.REGISTRY


def mad(a, b) -> np.ndarray:
    return np.abs(a.astype(np.int32) - b.astype(np.int32)).mean(axis=(1, 2, 3))


def torch_per_image(images: np.ndarray, policy: Policy, trace) -> np.ndarray:
    """Each image through torchvision's ``apply_op``, with the sub-policy and signs DALI drew."""
    out = []
    for img, (k, fired) in zip(images, decode_trace(policy, trace)):
        x = torch.from_numpy(img).permute(2, 0, 1)
        for op, name in zip(policy.sub_policies[k], fired):
            assert name.lstrip("-") == op.op  # probability 1: every op fires
            x = apply_op(x, op.op, op.magnitude_bin, policy.num_magnitude_bins, negate=name.startswith("-"))
        out.append(x.permute(1, 2, 0).numpy())
    return np.stack(out)


def test_a_declared_op_agrees_between_dali_and_torchvision(darken, images64, dali_run):
    for magnitude_bin in (0, 9):
        policy = Policy("d", 10, [[("Darken", 1.0, magnitude_bin)]])
        [(out, trace)] = dali_run(policy, images64, seed=3, return_trace=True)
        ref = torch_per_image(images64, policy, trace)
        assert mad(out, ref).mean() <= TOLERANCE
        if magnitude_bin == 0:
            assert np.array_equal(out, images64) and np.array_equal(ref, images64)  # bin 0 is the identity
        else:
            expected = np.round(images64 * 0.4)  # 1 - 0.6
            assert np.abs(out - expected).max() <= 1 and np.abs(ref - expected).max() <= 1


def test_a_declared_op_shares_a_stage_with_built_in_ops(darken, images64, dali_run):
    # one stage holding the new branch next to built-in ones (the Warp branch, Solarize's), and a
    # second stage: the selection routes each image to its own op
    policy = Policy(
        "mix",
        10,
        [[("Darken", 1.0, 9), ("Rotate", 1.0, 9)], [("Invert", 1.0, 0), ("Darken", 1.0, 5)], [("Rotate", 1.0, 4)]],
    )
    [(out, trace)] = dali_run(policy, images64, seed=5, return_trace=True)
    assert {k for k, _ in decode_trace(policy, trace)} == {0, 1, 2}
    ref = torch_per_image(images64, policy, trace)
    assert mad(out, ref).mean() <= 0.5 + TOLERANCE  # Rotate's tolerance + Darken's


def test_the_search_space_sees_a_declared_op(darken, images64, dali_run):
    from autoaug.search.space import SearchSpace

    space = SearchSpace(num_sub_policies=1, ops=["Invert", "Darken"])
    params = {"sp0_op0_type": "Darken", "sp0_op0_prob": 1.0, "sp0_op0_mag": 9}
    params |= {"sp0_op1_type": "Invert", "sp0_op1_prob": 1.0, "sp0_op1_mag": 0}
    policy = space.to_policy(params, name="found")
    assert policy.ops_used == ("Invert", "Darken") and space.to_params(policy) == params
    [out] = dali_run(policy, images64[:8])
    assert np.abs(out - (255 - np.round(images64[:8] * 0.4))).max() <= 1


def test_search_spaces_propose_a_declared_op(darken):
    import optuna

    from autoaug.search.space import SearchSpace

    # AutoAugment's family over the 16 and Darken: Optuna proposes it, the space decodes it both ways
    space = SearchSpace(num_sub_policies=2, ops=[*ops.AUTOAUGMENT_OPS, "Darken"])
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    proposed = []
    for _ in range(30):
        trial = study.ask(space.distributions())
        policy = space.to_policy(trial.params, name="candidate")
        assert space.to_policy(space.to_params(policy), name="candidate") == policy
        proposed.append(policy)
        study.tell(trial, 0.0)
    found = [p for p in proposed if "Darken" in p.ops_used]
    assert found
    assert to_dali_source(found[0]) and to_timm(found[0])["policy"]  # a proposal with it exports as is
    # RandAugment's family over RandAugment's operations as declared now: Darken among them
    ra = SearchSpace(family="randaugment", ops=ops.RANDAUGMENT_OPS)
    params = ra.random_params(random.Random(0))
    assert "use_Darken" in params and ra.to_params(ra.to_policy(params)) == params
    every = {f"use_{op}": True for op in ops.RANDAUGMENT_OPS} | {"n": 1, "m": 9}
    assert ra.to_policy(every).content_hash == presets.randaugment(1, 9).content_hash


def _run_exported_dali(policy: Policy, images: np.ndarray) -> np.ndarray:
    """``images`` through the DALI export of ``policy``, run by DALI's own ``apply_auto_augment``."""
    from nvidia.dali import fn, pipeline_def, types
    from nvidia.dali.auto_aug.auto_augment import apply_auto_augment

    scope: dict = {}
    exec(compile(to_dali_source(policy), "<export>", "exec"), scope)

    @pipeline_def(enable_conditionals=True, batch_size=len(images), num_threads=1, device_id=None, seed=7)
    def pipe():
        batch = fn.external_source(lambda: list(images), batch=True, dtype=types.UINT8, layout="HWC")
        return apply_auto_augment(scope["policy"], batch)

    p = pipe()
    p.build()
    (out,) = p.run()
    return np.stack([np.asarray(out.at(i)) for i in range(len(images))])


@pytest.mark.parametrize("magnitude_bin", [0, 4, 9])
def test_a_declared_op_is_exported_for_dali_and_timm(darken, images64, magnitude_bin):
    from PIL import Image
    from timm.data.auto_augment import AugmentOp, AutoAugment

    policy = Policy("dark", 10, [[("Darken", 1.0, magnitude_bin), ("Invert", 1.0, 0)]])
    expected = 255 - np.round(images64 * darken.param(magnitude_bin, 10))  # darkened, then inverted
    # DALI: the exported source, run by DALI
    assert "aug.brightness.augmentation(mag_range=(0.0, -0.6), randomly_negate=False)" in to_dali_source(policy)
    assert np.abs(_run_exported_dali(policy, images64) - expected).max() <= 1
    # timm: the exported JSON, loaded as its docs say, on PIL images
    doc = json.loads(json.dumps(to_timm(policy)))
    [[(name, prob, level), invert]] = doc["policy"]
    assert (name, prob, invert) == ("Brightness", 1.0, ["Invert", 1.0, 0.0])
    assert level == pytest.approx(darken_timm_level(darken.magnitude(magnitude_bin, 10), DARKEN_RANGE), abs=1e-6)
    hparams = dict(doc["hparams"], img_mean=tuple(doc["hparams"]["img_mean"]))
    aa = AutoAugment([[AugmentOp(n, p, m, hparams=hparams) for n, p, m in sp] for sp in doc["policy"]])
    out = np.stack([np.asarray(aa(Image.fromarray(image))) for image in images64])
    assert np.abs(out - expected).max() <= 1


def test_an_op_without_an_export_is_refused_in_one_line_naming_it_and_the_format(darken):
    # derived with another to_param: the libraries' ops would compute another parameter, so no exports
    with ops.declare_op(darken.derive("Darken2", to_param=lambda m: 1.0 - m / 2)) as spec:
        assert (spec.dali_export, spec.timm_export, spec.randaugment) == (None, None, None)
        policy = Policy("d2", 10, [[("Darken2", 0.5, 9)]])
        for export, target, field in ((to_dali_source, "DALI", "dali_export"), (to_timm, "timm", "timm_export")):
            with pytest.raises(UnsupportedOpError) as info:
                export(policy)
            message = str(info.value)
            assert "\n" not in message and message.startswith(
                f"cannot export 'd2' to {target}: sub-policy 0 uses Darken2, which {target}'s AutoAugment does not "
                f"have (its declaration has no {field}; exportable ops: "
            )
            assert "--exclude-ops Cutout,SamplePairing,Darken2," in message
        # at probability 0 it is left out, as the built-ins without an export are
        [[(name, _, _)]] = to_timm(Policy("d0", 10, [[("Darken2", 0.0, 9), ("Darken", 1.0, 9)]]))["policy"]
        assert name == "Brightness"
    # re-ranged only: the same exports (DALI re-declares the range; timm's unit is unchanged), not RandAugment's
    derived = darken.derive("Darken3", ranges=ops.MagnitudeRange(0.0, 0.3, "fraction darker"))
    assert derived.dali_export == darken.dali_export and derived.timm_export is darken.timm_export
    assert derived.randaugment is None


def test_a_declared_op_with_a_place_is_one_of_randaugments(darken):
    assert ops.RANDAUGMENT_OPS == (*RANDAUGMENT_14, "Darken") and ops.randaugment_ops() == ops.RANDAUGMENT_OPS
    ra = presets.resolve("randaugment:n=1,m=9")
    assert ra.ops_used[-1] == "Darken" and len(ra.sub_policies) == 15 and ra.content_hash != RANDAUGMENT_HASH
    assert len(presets.trivialaugment().sub_policies) == 15 * 31
    # a place among the 14 puts it there; a place taken: after the op declared first (Brightness's 6)
    with ops.declare_op(darken.derive("Darken4", randaugment=6)):
        assert ops.RANDAUGMENT_OPS[5:9] == ("Rotate", "Brightness", "Darken4", "Color")
    with pytest.raises(ValueError, match=r"^declare_op 'Darken5': randaugment=-1; expected None or its place"):
        ops.declare_op(darken.derive("Darken5", randaugment=-1))


def _normalized(images: torch.Tensor) -> torch.Tensor:
    from autoaug.proxy_models.pipeline import CIFAR10_MEAN, CIFAR10_STD

    mean = torch.tensor(CIFAR10_MEAN).view(1, 3, 1, 1)
    std = torch.tensor(CIFAR10_STD).view(1, 3, 1, 1)
    return (images.float() - mean) / std


def test_a_policy_with_a_declared_op_trains_a_step_on_both_backends(darken, cifar_train, cifar_sample):
    from autoaug.policies.schedule import Schedule
    from autoaug.proxy_models.learner import Learner
    from autoaug.proxy_models.train import TrainConfig, train

    policy = Policy("dark", 10, [[("Darken", 1.0, 9)], [("Darken", 0.5, 4), ("Invert", 0.2, 0)]], base="crop")
    config = TrainConfig.from_preset(
        "smoke", data=str(cifar_train), train_size=64, val_size=0, batch_size=64, epochs=1, num_threads=1
    )
    # DALI: the training run (DaliLoader -> apply_policy), and a schedule (PolicyInputs over every
    # declared op: the switchable policy step of PBA and of schedules)
    for trained in (policy, Schedule("s", [(0.0, policy)])):
        result = train(config, trained)
        [epoch] = result.history
        assert math.isfinite(epoch["train_loss"]) and result.history[0]["epoch"] == 1

    # torchvision: the transform a user trains with, batches through the same Learner step
    images, labels = cifar_sample
    transform = to_torchvision(policy)
    torch.manual_seed(0)
    batch = torch.stack([transform(torch.from_numpy(x).permute(2, 0, 1)) for x in images[:64]])
    assert batch.float().mean() < 0.9 * torch.from_numpy(images[:64]).float().mean()  # darkened
    learner = Learner(config, num_classes=10, steps_per_epoch=1)
    before = [p.detach().clone() for p in learner.model.parameters()]
    stats = learner.train_epoch([(_normalized(batch), torch.from_numpy(labels[:64]))])
    assert stats.seen == 64 and math.isfinite(stats.loss)
    assert any(not torch.equal(a, b) for a, b in zip(before, learner.model.parameters()))  # a step was taken


def test_the_declaration_is_scoped():
    assert "Darken" not in ops.REGISTRY and "Darken" not in ops.OP_NAMES
    assert ops.RANDAUGMENT_OPS == RANDAUGMENT_14  # RandAugment's 14 again, in the paper's order
    assert presets.resolve("randaugment").content_hash == RANDAUGMENT_HASH
    assert presets.resolve("trivialaugment").content_hash == TRIVIALAUGMENT_HASH
    with pytest.raises(ValueError, match=r"unknown op 'Darken'"):
        Policy("d", 10, [[("Darken", 1.0, 9)]])
