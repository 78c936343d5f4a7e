"""The batched policy step (policies/torch_batch.py): every declared operation computes, for the
same per-sample parameter, what torch_apply's per-image function computes -- exactly, on real
CIFAR-10 images and on non-square ones, nearest and bilinear; a whole policy applied with given
draws equals torch_apply image by image; the draws follow the policy (sub-policy, probability,
sign) within binomial tolerances; an operation without a batched form goes through its own
function; the base crops and flips as RandomPadCrop and the flip do."""

from __future__ import annotations

import math

import pytest
import torch
from torchvision.transforms.v2 import functional as F

from autoaug.policies import Policy, bases, ops, presets
from autoaug.policies import torch_apply as ta
from autoaug.policies.torch_batch import (
    OpContext,
    PolicyPlan,
    apply_base_batch,
    apply_base_drawn,
    apply_drawn,
    apply_policy_batch,
    batch_op,
    crop_at,
    cutout_at,
    draw,
    draw_uniforms,
    partners,
)

BINS = 31  # bin 20 of Rotate under "wide" is 90 degrees: F.rotate's shortcut
Z = 4.5  # binomial tolerance in standard deviations (seeds are fixed: the outcome is deterministic)


@pytest.fixture(scope="module")
def chw(images64) -> torch.Tensor:
    return torch.from_numpy(images64).permute(0, 3, 1, 2).contiguous()


@pytest.fixture(scope="module")
def odd() -> torch.Tensor:
    """32 random non-square images (24 x 40): size-relative parameters, no quarter-turn shortcut;
    the first of one grey level (AutoContrast's and Equalize's flat case)."""
    images = torch.randint(0, 256, (32, 3, 24, 40), dtype=torch.uint8, generator=torch.Generator().manual_seed(3))
    images[0] = 77
    return images


def _per_sample(name: str, images: torch.Tensor, ranges: str):
    """Each sample a (bin, sign) of its own -- samples 2b and 2b + 1 bin b (mod 31), the second
    negated: the parameters (as torch_apply computes them) and the rows the batched form reads."""
    spec = ops.get(name)
    h, w = images.shape[-2:]
    params = [
        spec.param((i // 2) % BINS, BINS, ranges, image_size=(h, w), negate=bool(i % 2)) for i in range(len(images))
    ]
    op = batch_op(name)
    rows = torch.tensor([list(op.prepare(p, h, w)) for p in params], dtype=torch.float64)
    return params, rows, op


@pytest.mark.parametrize("name", [n for n in ops.BUILTIN_OPS if n != "Cutout"])
@pytest.mark.parametrize("ranges", ["autoaugment", "wide"])
def test_each_op_batched_equals_torch_apply_per_image_exactly(name, ranges, chw, odd):
    """The same parameter per sample: the batched form's output is torch_apply's, bit for bit
    (warps nearest and bilinear, on 32 x 32 real images and 24 x 40 random ones)."""
    if ranges == "wide" and ops.get(name).magnitude_range("wide") is ops.get(name).magnitude_range("autoaugment"):
        pytest.skip("one range for both conventions")
    warps = name in ("ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate")
    for images in (chw, odd):
        params, rows, op = _per_sample(name, images, ranges)
        other = images.roll(1, 0)
        for mode in ("nearest", "bilinear") if warps else ("nearest",):
            fill = [128.0] * images.shape[1]
            rows_used = tuple(sorted({tuple(r) for r in rows.tolist()}))
            ctx = OpContext(fill, mode, other, torch.ones(len(images), dtype=torch.bool), torch.zeros(0), rows_used)
            got = op.apply(images.clone(), rows, ctx)
            want = torch.stack(
                [
                    ta.TORCH_OPS[name].apply(x, p, fill=fill, interpolation=ta._INTERP[mode], other=o)
                    for x, p, o in zip(images, params, other)
                ]
            )
            assert got.dtype == torch.uint8 and got.shape == images.shape
            differ = int((got != want).sum())
            assert differ == 0, f"{name} ({ranges}, {mode}, {tuple(images.shape[-2:])}): {differ} values differ"


def test_rotate_takes_f_rotates_quarter_turn_shortcuts(chw):
    spec = ops.get("Rotate")
    angles = [spec.param(20, BINS, "wide", negate=s) for s in (False, True)]
    assert angles == [90.0, -90.0]
    op = batch_op("Rotate")
    rows = torch.tensor([op.prepare(a, 32, 32) for a in angles] * 8, dtype=torch.float64)
    paired = torch.zeros(16, dtype=torch.bool)
    ctx = OpContext([128.0] * 3, "nearest", chw[:16], paired, torch.zeros(0), tuple({tuple(r) for r in rows.tolist()}))
    got = op.apply(chw[:16], rows, ctx)
    assert torch.equal(got[0], torch.rot90(chw[0], 1, (-2, -1)))  # 90 degrees: a quarter turn
    assert torch.equal(got[1], torch.rot90(chw[1], 3, (-2, -1)))  # -90: 270, three quarter turns


def test_cutout_at_the_centres_torch_apply_draws_equals_torch_apply(chw, odd):
    for images in (chw, odd):
        h, w = images.shape[-2:]
        spec = ops.get("Cutout")
        sides = [spec.param(i % 10, 10, image_size=(h, w)) for i in range(len(images))]
        want, cy, cx = [], [], []
        for i, (x, side) in enumerate(zip(images, sides)):
            g = torch.Generator().manual_seed(100 + i)
            cy.append(int(torch.randint(h, (), generator=g)))
            cx.append(int(torch.randint(w, (), generator=g)))
            want.append(ta.cutout(x, side, fill=[128.0] * 3, generator=torch.Generator().manual_seed(100 + i)))
        got = cutout_at(images, torch.tensor(sides), torch.tensor(cy), torch.tensor(cx), [128.0] * 3)
        assert torch.equal(got, torch.stack(want))
        assert int((got != images).any(dim=(1, 2, 3)).sum()) >= len(images) // 2


def _reference(images: torch.Tensor, policy: Policy, draws, *, interpolation="nearest") -> torch.Tensor:
    """torch_apply image by image with the given draws (SamplePairing's partner: the rolled batch)."""
    partner = images.roll(1, 0)
    out = []
    for i, x in enumerate(images):
        k = int(draws.sub[i])
        for j, op in enumerate(policy.sub_policies[k]):
            if op.op == ops.IDENTITY or not bool(draws.fire[j, i]):
                continue
            x = ta.apply_op(
                x,
                op.op,
                op.magnitude_bin,
                policy.num_magnitude_bins,
                policy.ranges,
                negate=bool(draws.negate[j, i]),
                interpolation=interpolation,
                other=partner[i],
            )
        out.append(x)
    return torch.stack(out)


def _every_op_policy() -> Policy:
    """Every built-in op but Cutout (whose centre is random) twice, at random bins and
    probabilities, in sub-policies of three steps."""
    import random

    rng = random.Random(5)
    names = [n for n in ops.BUILTIN_OPS if n != "Cutout"] * 2
    rng.shuffle(names)
    subs = [
        [(n, round(rng.uniform(0.3, 1.0), 2), rng.randrange(10)) for n in names[i : i + 3]]
        for i in range(0, len(names), 3)
    ]
    return Policy("every-op", 10, subs)


@pytest.mark.parametrize("select", ["index", "mask"])
@pytest.mark.parametrize(
    "ref", ["every-op", "autoaugment-cifar10", "autoaugment-svhn", "randaugment:n=2,m=9", "trivialaugment"]
)
def test_a_policy_with_given_draws_equals_torch_apply_image_by_image(ref, select, chw):
    """Both ways of picking an operation's samples (gathered, or masked: what a GPU runs)."""
    policy = _every_op_policy() if ref == "every-op" else presets.resolve(ref)
    images = torch.cat([chw, chw.flip(-1)])  # 128 samples
    plan = PolicyPlan(policy, 32, 32)
    draws = draw(plan, len(images), torch.Generator().manual_seed(1))
    got = apply_policy_batch(images, policy, torch.Generator(), plan=plan, draws=draws, select=select)
    assert torch.equal(got, _reference(images, policy, draws))
    assert int(draws.fire.sum()) > len(images) // 2
    assert torch.equal(images, torch.cat([chw, chw.flip(-1)]))  # the input is left as it was


@pytest.mark.parametrize("select", ["index", "mask"])
def test_cutout_in_a_policy_fills_the_square_its_draws_centre(select, chw):
    policy = Policy("cut", 10, [[("Cutout", 1.0, 9)]])
    plan = PolicyPlan(policy, 32, 32)
    draws = draw(plan, len(chw), torch.Generator().manual_seed(6))
    got = apply_policy_batch(chw, policy, torch.Generator(), plan=plan, draws=draws, select=select)
    side = ops.get("Cutout").param(9, 10, image_size=(32, 32))
    cy, cx = (draws.extra[0, :, 0] * 32).long(), (draws.extra[0, :, 1] * 32).long()
    assert torch.equal(got, cutout_at(chw, torch.full((len(chw),), side), cy, cx, [128.0] * 3))
    assert len(set(cy.tolist())) > 16 and len(set(cx.tolist())) > 16


@pytest.mark.parametrize("select", ["index", "mask"])
def test_several_policies_in_one_application_give_each_batch_what_it_gets_alone(select, chw):
    """A pack's members: each its own policy, generator and batch size (one a batch of one, one the
    identity); augmented together with their own draws, each batch is what it is alone."""
    members = [
        (_every_op_policy(), 20),
        (Policy("cut-pair", 10, [[("Cutout", 0.8, 9), ("SamplePairing", 0.9, 7)]]), 16),
        (presets.resolve("none"), 8),
        (presets.resolve("autoaugment-svhn"), 19),
        (Policy("pair", 10, [[("SamplePairing", 1.0, 9)]]), 1),
    ]
    plan = PolicyPlan([p for p, _ in members], 32, 32)
    batches, blocks, alone = [], [], []
    start = 0
    for k, (policy, n) in enumerate(members):
        images = chw[start : start + n]
        start += n
        batches.append(images)
        blocks.append(draw_uniforms(plan, n, torch.Generator().manual_seed(k), member=k))
        alone.append(apply_policy_batch(images, policy, torch.Generator().manual_seed(k)))
    index, paired = partners([n for _, n in members])
    together = apply_drawn(torch.cat(batches), plan, plan.decode(blocks), index, paired, select=select)
    assert torch.equal(together, torch.cat(alone))
    assert torch.equal(alone[-1], batches[-1])  # a batch of one: no partner to blend with


def test_a_seeded_generator_gives_the_same_batch_and_another_seed_another(chw):
    policy = presets.resolve("autoaugment-cifar10")
    a = apply_policy_batch(chw, policy, torch.Generator().manual_seed(7))
    b = apply_policy_batch(chw, policy, torch.Generator().manual_seed(7))
    c = apply_policy_batch(chw, policy, torch.Generator().manual_seed(8))
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert apply_policy_batch(chw, presets.resolve("none"), torch.Generator()) is chw


def _within(count: int, n: int, p: float) -> bool:
    return abs(count - n * p) <= Z * math.sqrt(n * p * (1 - p)) + 1


def test_the_draws_follow_the_policy_within_binomial_tolerance():
    policy = Policy(
        "draws",
        10,
        [
            [("Invert", 0.3, 0), ("Rotate", 0.8, 5)],
            [("Color", 0.5, 3)],
            [("Posterize", 1.0, 2), ("ShearX", 0.1, 9)],
            [("Identity", 1.0, 0), ("Solarize", 0.65, 4)],
        ],
    )
    n = 8000
    plan = PolicyPlan(policy, 32, 32)
    d = draw(plan, n, torch.Generator().manual_seed(0))
    subs = policy.sub_policies
    for k, sub in enumerate(subs):
        mine = d.sub == k
        count = int(mine.sum())
        assert _within(count, n, 1 / len(subs)), (k, count)
        for j in range(plan.steps):
            fired = d.fire[j] & mine
            if j >= len(sub) or sub[j].op == "Identity":
                assert not fired.any() and not (d.negate[j] & mine).any()
                continue
            assert _within(int(fired.sum()), count, sub[j].probability), (k, j, int(fired.sum()), count)
            negated = int((d.negate[j] & fired).sum())
            if ops.get(sub[j].op).signed:
                assert _within(negated, int(fired.sum()), 0.5), (k, j, negated)
            else:
                assert negated == 0


def test_the_applied_images_follow_the_draws_frequencies(chw):
    """Judged from the images: Invert at probability 0.3 inverts 30% of 4,096 samples."""
    policy = Policy("inv", 10, [[("Invert", 0.3, 0)]])
    images = chw.repeat(64, 1, 1, 1)
    out = apply_policy_batch(images, policy, torch.Generator().manual_seed(2))
    inverted = (out == images.bitwise_not()).all(dim=(1, 2, 3))
    assert torch.equal(inverted | (out == images).all(dim=(1, 2, 3)), torch.ones(len(images), dtype=torch.bool))
    assert _within(int(inverted.sum()), len(images), 0.3)


def dim_torch(img, factor, **_):
    return (img.float() * factor).round_().clamp_(0, 255).to(img.dtype)


def test_an_op_without_a_batched_form_goes_through_its_own_function(chw):
    dim_range = ops.MagnitudeRange(0.0, 0.6, "fraction darker")
    with (
        ops.declare_op(
            name="DimTest",
            description="multiplies every channel by 1 - m",
            ranges=dim_range,
            to_param=lambda m: 1.0 - m,
            dali=ops.DaliImpl(branch="brightness", table="param", operator="-"),
            torch=ops.TorchImpl(dim_torch, "x * (1 - m), rounded"),
        ),
        ops.declare_op(ops.get("Brightness").derive("BrightTest", ranges=ops.MagnitudeRange(0.0, 0.5, "factor 1+-m"))),
    ):
        assert batch_op("DimTest") is None
        assert batch_op("BrightTest") is batch_op("Brightness")  # derived: batched as its parent
        policy = Policy("p", 10, [[("DimTest", 0.7, 9), ("BrightTest", 0.6, 7)], [("Invert", 1.0, 0)]])
        plan = PolicyPlan(policy, 32, 32)
        draws = draw(plan, len(chw), torch.Generator().manual_seed(4))
        got = apply_policy_batch(chw, policy, torch.Generator(), plan=plan, draws=draws)
        assert torch.equal(got, _reference(chw, policy, draws))
    assert "DimTest" not in ops.REGISTRY and "BrightTest" not in ops.REGISTRY


def test_crop_at_is_random_pad_crop_at_that_offset(chw):
    p = bases.crop_padding(32, 32)
    offsets = torch.tensor([(t, left) for t in range(2 * p + 1) for left in range(2 * p + 1)][: len(chw)])
    got = crop_at(chw, offsets[:, 0], offsets[:, 1], p)
    for x, y, (t, left) in zip(chw, got, offsets.tolist()):
        assert torch.equal(y, F.crop(F.pad(x, [p], fill=0), t, left, 32, 32))


def test_bases_drawn_apart_and_applied_together_give_each_batch_its_own(chw):
    plan = PolicyPlan([presets.resolve(b) for b in bases.NAMES], 32, 32)  # the base presets: no policy
    blocks = [draw_uniforms(plan, 16, torch.Generator().manual_seed(i), member=i) for i in range(3)]
    alone = [
        apply_base_batch(chw[16 * i : 16 * i + 16], b, torch.Generator().manual_seed(i))
        for i, b in enumerate(bases.NAMES)
    ]
    assert torch.equal(apply_base_drawn(chw[:48], plan.decode(blocks)), torch.cat(alone))
    assert torch.equal(alone[0], chw[:16])  # "none"


@pytest.mark.parametrize("base", bases.NAMES)
def test_the_base_shifts_uniformly_and_flips_half_the_samples(base):
    """A marker pixel tells each sample's shift and mirror: uniform offsets in -4..4, flips at 1/2."""
    spec = bases.get(base)
    n = 4000
    img = torch.zeros(n, 1, 32, 32, dtype=torch.uint8)
    img[:, 0, 10, 5] = 255
    out = apply_base_batch(img, base, torch.Generator().manual_seed(9))
    where = (out[:, 0] == 255).flatten(1).float().argmax(1)
    rows, cols = where // 32, where % 32
    assert int((out == 255).flatten(1).sum(1).min()) == 1  # the marker survives every shift
    flipped = (cols - 5).abs() > 4
    if not spec.flip:
        assert not flipped.any()
    else:
        assert _within(int(flipped.sum()), n, bases.FLIP_PROBABILITY)
    cols = torch.where(flipped, 31 - cols, cols)
    if not spec.crop:
        assert torch.equal(rows, torch.full_like(rows, 10)) and torch.equal(cols, torch.full_like(cols, 5))
        return
    for shift in range(-4, 5):
        assert _within(int((rows - 10 == shift).sum()), n, 1 / 9), ("rows", shift)
        assert _within(int((cols - 5 == shift).sum()), n, 1 / 9), ("cols", shift)


def test_bad_input_is_refused_in_one_line(chw):
    policy = presets.resolve("autoaugment-cifar10")
    with pytest.raises(ValueError, match=r"expects uint8 images of shape \[N, C, H, W\]"):
        apply_policy_batch(chw.float(), policy, torch.Generator())
    with pytest.raises(ValueError, match="interpolation='cubic'"):
        apply_policy_batch(chw, policy, torch.Generator(), interpolation="cubic")
    with pytest.raises(ValueError, match="select='sorted'; expected one of"):
        apply_policy_batch(chw, policy, torch.Generator(), select="sorted")
    with pytest.raises(ValueError, match="the plan was made for another policy"):
        apply_policy_batch(chw, policy, torch.Generator(), plan=PolicyPlan(presets.resolve("trivialaugment"), 32, 32))
