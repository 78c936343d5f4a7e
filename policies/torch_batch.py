"""Apply a :class:`~autoaug.policies.policy.Policy` to a batch of images on any device, each sample
its own draw, with batched torch operations (:func:`apply_policy_batch`), and a base before it
(:func:`apply_base_batch`).

What it applies is what :class:`autoaug.policies.torch_apply.PolicyTransform` applies to a batch,
image by image: per sample one sub-policy drawn uniformly, each of its operations applied in order
with its probability, at the parameter of its bin (:meth:`autoaug.policies.ops.OpSpec.param` for
the images' size), a signed operation negated with probability 1/2; the same fill (grey 128) and
interpolation (nearest by default); SamplePairing blends sample ``i`` with sample ``i - 1`` of the
batch as it came in (``batch.roll(1, 0)``). The difference is how: instead of a Python loop over
the images, every operation is one tensor computation over the samples that apply it at that
step (``index_select`` of those samples, the operation with its per-sample parameters as tensors,
``index_copy_`` back), so the cost of a batch is a few dozen kernel launches whatever its size,
and the images never leave their device. Randomness comes from the ``torch.Generator`` passed in
(on the images' device or the CPU), all of it drawn before anything is applied, one call to the
generator per batch (:func:`draw_uniforms`: a row of uniform numbers per sample, which
:meth:`PolicyPlan.decode` turns into its crop, flip, sub-policy, and per step whether the
operation applies, its sign and Cutout's centre): the same generator state gives the same batch. A :class:`PolicyPlan` may hold
several policies (a pack's members, each its own policy and generator): their batches, each with
its own draws, are then augmented by one application (:func:`apply_drawn`), the launches those of
one batch whatever their number, and what a sample gets depends on its own draws only.

Each built-in operation's batched form is :data:`BATCH_OPS`, keyed by the torch_apply function
its declaration names (so an operation derived from a built-in one, :meth:`OpSpec.derive`, is
batched as that one is). Each computes, for the same parameter, what that function computes, bit
for bit on the CPU (``tests/policies/test_torch_batch.py``): the warps (ShearX/Y, TranslateX/Y,
Rotate) through torchvision's own inverse matrix, a batched affine grid and its sampling, and
``F.rotate``'s shortcuts for multiples of 90 degrees; the blends (Contrast, Color, Sharpness)
rounded as torchvision's fused multiply-add is (computed in float64, rounded once to float32);
Brightness, Solarize, Posterize, Cutout and SamplePairing as tensors of per-sample parameters;
AutoContrast as torchvision's (per-image, per-channel extremes), Invert and Equalize through
torchvision's batched kernels (Equalize: per-image, per-channel histograms of the whole batch at
once). An operation declared without a batched form
(:func:`autoaug.policies.ops.declare_op` with its own torch function) still works: its samples go
through that per-image function one by one (with a CPU generator seeded from the sample's draws).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torchvision.transforms.v2 import functional as F
from torchvision.transforms.v2.functional._geometry import _get_inverse_affine_matrix

from autoaug.policies import bases as _bases
from autoaug.policies import ops as _ops
from autoaug.policies import torch_apply as _ta
from autoaug.policies.policy import Policy

__all__ = [
    "BATCH_OPS",
    "BatchOp",
    "Draws",
    "OpContext",
    "PolicyPlan",
    "apply_base_batch",
    "apply_base_drawn",
    "apply_drawn",
    "apply_policy_batch",
    "batch_op",
    "crop_at",
    "cutout_at",
    "SELECTIONS",
    "draw",
    "draw_uniforms",
    "partners",
]

_MODES = ("nearest", "bilinear")


# --------------------------------------------------------------------------- one operation
@dataclass(frozen=True)
class OpContext:
    """What an operation's batched form may read besides its images and parameters.

    Attributes:
        fill: the grey level per channel of uncovered pixels and of the Cutout square.
        interpolation: ``"nearest"`` or ``"bilinear"`` (the warps).
        other: SamplePairing's partner of each selected sample (the sample before it in its batch).
        paired: whether each selected sample has a partner (not in a batch of one).
        extra: the uniform numbers in [0, 1) drawn for each selected sample at this step, as
            many as the operation asked for (:attr:`BatchOp.extra`: Cutout's centre).
        rows: the distinct parameter rows of this operation in the plan (host values).
    """

    fill: list[float]
    interpolation: str
    other: torch.Tensor
    paired: torch.Tensor
    extra: torch.Tensor
    rows: tuple[tuple[float, ...], ...] = ()


def _scalar(param: Any, height: int, width: int) -> tuple[float, ...]:
    return (0.0 if param is None else float(param),)


@dataclass(frozen=True)
class BatchOp:
    """The batched form of one torch_apply operation.

    Attributes:
        apply: ``fn(images uint8 [m, C, H, W], params float64 [m, D], ctx) -> images``: the
            operation on the ``m`` samples that apply it, each at its own row of ``params``.
        prepare: ``fn(param, height, width) -> row``: the D floats its apply reads for the
            declaration's parameter (:meth:`OpSpec.param`), computed once per policy on the host
            (default: the parameter itself, 0 for none).
        extra: uniform numbers it needs per sample (drawn with the policy's draws, so that a
            sample's outcome depends on its own generator only: :attr:`OpContext.extra`).
    """

    apply: Callable[[torch.Tensor, torch.Tensor, OpContext], torch.Tensor]
    prepare: Callable[[Any, int, int], Sequence[float]] = field(default=_scalar)
    extra: int = 0


def _constant(values: Sequence[float], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """``values`` per channel as a [1, C, 1, 1] tensor, made on the device by fill kernels (no
    copy from the host: no wait for the device's queue)."""
    values = [float(v) for v in values]
    if len(set(values)) == 1:
        return torch.full((1, len(values), 1, 1), values[0], dtype=dtype, device=device)
    return torch.stack([torch.full((), v, dtype=dtype, device=device) for v in values]).view(1, -1, 1, 1)


def _col(params: torch.Tensor, i: int = 0) -> torch.Tensor:
    """Column ``i`` of ``params`` shaped to broadcast over [m, C, H, W]."""
    return params[:, i].view(-1, 1, 1, 1)


def _fma_blend(image1: torch.Tensor, image2: torch.Tensor, ratio: torch.Tensor) -> torch.Tensor:
    """torchvision's ``_blend`` per sample (``ratio``: float64 [m, 1, 1, 1]): ``image1 * ratio``
    in float32, then ``+ image2 * (1 - ratio)`` as the fused multiply-add torchvision's ``add_``
    with ``alpha`` is (exact in float64 for images and ratios in their ranges, rounded once)."""
    first = image1.float() * ratio.float()
    alpha = (1.0 - ratio).float().double()
    out = (first.double() + image2.double() * alpha).float()
    return out.clamp_(0, 255).to(image1.dtype)


def _identity(images, params, ctx):
    return images


def _invert(images, params, ctx):
    return _ta.invert(images, None)


def _auto_contrast(images, params, ctx):
    # torchvision's autocontrast, its boolean-mask assignments as `where` (a mask index waits for
    # the device to count the mask)
    x = images.float()
    low, high = x.amin(dim=(-2, -1), keepdim=True), x.amax(dim=(-2, -1), keepdim=True)
    flat = high == low
    inv_scale = torch.where(flat, 1.0, (high - low).mul_(1.0 / 255))
    return (x - torch.where(flat, 0.0, low)).div_(inv_scale).clamp_(0, 255).to(images.dtype)


def _equalize(images, params, ctx):
    return _ta.equalize(images, None)


def _solarize(images, params, ctx):
    # threshold > 255 (bin 0: 256) inverts nothing, as torch_apply.solarize returns the image
    return torch.where(images.float() >= _col(params).float(), images.bitwise_not(), images)


def _posterize(images, params, ctx):
    bits = params[:, 0].round().long().clamp_(0, 8)
    mask = (((torch.ones_like(bits) << bits) - 1) << (8 - bits)).to(torch.uint8)
    return images & mask.view(-1, 1, 1, 1)


def _brightness(images, params, ctx):
    return (images.float() * _col(params).float()).clamp_(0, 255).to(images.dtype)


def _grey(images: torch.Tensor) -> torch.Tensor:
    """torchvision's greyscale of uint8 images, floored, as float32 (one channel)."""
    return F.rgb_to_grayscale(images).float()


def _contrast(images, params, ctx):
    grey = _grey(images) if images.shape[1] == 3 else images.float()
    mean = grey.mean(dim=(-3, -2, -1), keepdim=True)
    return _fma_blend(images, mean, _col(params))


def _color(images, params, ctx):
    if images.shape[1] == 1:
        return images
    return _fma_blend(images, _grey(images), _col(params))


def _sharpness(images, params, ctx):
    m, c, h, w = images.shape
    if h <= 2 or w <= 2:
        return images
    kernel = torch.full((3, 3), 1.0 / 13.0, dtype=torch.float32, device=images.device)  # torchvision's
    kernel[1, 1] = 5.0 / 13.0
    out = images.to(torch.float32, copy=True)
    # The convolution over a batch of a power-of-two size (zero images added): a few shapes, so
    # that oneDNN's primitives and cuDNN's autotuning are made once each, not once per count.
    size = 1 << (m - 1).bit_length()
    batch = out if size == m else torch.cat([out, out.new_zeros(size - m, c, h, w)])
    blurred = torch.nn.functional.conv2d(batch, kernel.expand(c, 1, 3, 3), groups=c)[:m].round_()
    inner = out[..., 1:-1, 1:-1]
    alpha = (1.0 - _col(params)).float().double()
    inner.copy_((inner.double() + (blurred - inner).double() * alpha).float())
    return out.clamp_(0, 255).to(images.dtype)


def cutout_at(
    images: torch.Tensor, sides: torch.Tensor, cy: torch.Tensor, cx: torch.Tensor, fill: Sequence[float]
) -> torch.Tensor:
    """Cutout of each sample: a square of side ``sides[i]`` (pixels) centred at ``(cy[i], cx[i])``,
    clipped at the border, filled with ``fill`` (per channel): torch_apply's cutout at a given centre."""
    h, w = images.shape[-2:]
    dev = images.device
    sides, cy, cx = sides.to(dev).long(), cy.to(dev).long(), cx.to(dev).long()
    top, left = (cy - sides // 2).clamp(min=0), (cx - sides // 2).clamp(min=0)
    bottom, right = (cy - sides // 2 + sides).clamp(max=h), (cx - sides // 2 + sides).clamp(max=w)
    rows, cols = torch.arange(h, device=dev), torch.arange(w, device=dev)
    in_rows = (rows >= top[:, None]) & (rows < bottom[:, None])
    in_cols = (cols >= left[:, None]) & (cols < right[:, None])
    inside = in_rows[:, None, :, None] & in_cols[:, None, None, :] & (sides > 0).view(-1, 1, 1, 1)
    return torch.where(inside, _constant(fill, images.dtype, dev), images)


def _cutout(images, params, ctx):
    h, w = images.shape[-2:]
    cy = (ctx.extra[:, 0] * h).long().clamp_(max=h - 1)  # uniform over the rows, as randint(h)
    cx = (ctx.extra[:, 1] * w).long().clamp_(max=w - 1)
    return cutout_at(images, params[:, 0].round(), cy, cx, ctx.fill)


def _sample_pairing(images, params, ctx):
    weight = _col(params)
    out = images.float() * (1.0 - weight).float() + ctx.other.float() * weight.float()
    blended = out.round_().clamp_(0, 255).to(images.dtype)
    return torch.where(ctx.paired.view(-1, 1, 1, 1), blended, images)  # a batch of one: no partner


# ---- the warps: torchvision's inverse matrix per parameter (host), a batched grid, its sampling
#: Rows of the warps: a code, then the 2 x 3 inverse affine matrix. Codes: an affine warp, or one
#: of F.rotate's shortcuts (the image itself at 0 degrees, a quarter turn at 90 / 180 / 270).
_WARP, _SAME, _ROT90, _ROT180, _ROT270 = range(5)


def _warp_row(center: list[float], angle: float, translate: list[float], shear: list[float]) -> tuple[float, ...]:
    return (float(_WARP), *_get_inverse_affine_matrix(center, angle, translate, 1.0, shear))


def _shear_x_row(m, height, width):  # torch_apply.shear_x: F.affine about the top-left corner
    return _warp_row([-0.5 * width, -0.5 * height], 0.0, [0.0, 0.0], [math.degrees(math.atan(m)), 0.0])


def _shear_y_row(m, height, width):
    return _warp_row([-0.5 * width, -0.5 * height], 0.0, [0.0, 0.0], [0.0, math.degrees(math.atan(m))])


def _translate_x_row(px, height, width):
    return _warp_row([0.0, 0.0], 0.0, [float(px), 0.0], [0.0, 0.0])


def _translate_y_row(px, height, width):
    return _warp_row([0.0, 0.0], 0.0, [0.0, float(px)], [0.0, 0.0])


def _rotate_row(degrees, height, width):  # torch_apply.rotate: F.rotate, shortcuts included
    angle = float(degrees) % 360
    square = height == width
    shortcut = {0.0: _SAME, 180.0: _ROT180, **({90.0: _ROT90, 270.0: _ROT270} if square else {})}.get(angle)
    if shortcut is not None:
        return (float(shortcut), 1.0, 0.0, 0.0, 0.0, 1.0, 0.0)
    return _warp_row([0.0, 0.0], -angle, [0.0, 0.0], [0.0, 0.0])


def _affine_grid(theta: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """torchvision's ``_affine_grid`` for a batch of matrices (``theta`` float32 [m, 2, 3]): the
    sampling grid [m, H, W, 2] of each sample, each the grid torchvision computes for its matrix."""
    dtype, dev = theta.dtype, theta.device
    base = torch.empty(1, height, width, 3, dtype=dtype, device=dev)
    base[..., 0].copy_(torch.linspace((1.0 - width) * 0.5, (width - 1.0) * 0.5, steps=width, device=dev))
    base[..., 1].copy_(torch.linspace((1.0 - height) * 0.5, (height - 1.0) * 0.5, steps=height, device=dev)[:, None])
    base[..., 2].fill_(1)
    scaled = theta.transpose(1, 2).clone()
    scaled[..., 0].div_(0.5 * width)
    scaled[..., 1].div_(0.5 * height)
    m = theta.shape[0]
    return base.view(1, height * width, 3).expand(m, -1, -1).bmm(scaled).view(m, height, width, 2)


def _sample(images: torch.Tensor, grid: torch.Tensor, mode: str, fill: Sequence[float]) -> torch.Tensor:
    """torchvision's ``_apply_grid_transform`` of uint8 images (a mask channel sampled with them
    marks the pixels the grid leaves uncovered, those filled with ``fill``), its fill made on the
    device."""
    m, _, h, w = images.shape
    x = torch.cat((images.float(), torch.ones((m, 1, h, w), dtype=torch.float32, device=images.device)), dim=1)
    x = torch.nn.functional.grid_sample(x, grid, mode=mode, padding_mode="zeros", align_corners=False)
    x, mask = torch.tensor_split(x, indices=(-1,), dim=-3)
    mask = mask.expand_as(x)
    value = _constant(fill, x.dtype, x.device)
    if mode == "nearest":
        x = torch.where(mask < 0.5, value.expand_as(x), x)
    else:
        x = x.sub_(value).mul_(mask).add_(value)
    return x.round_().to(images.dtype)


def _warp(images, params, ctx):
    m, _, h, w = images.shape
    theta = params[:, 1:7].float().view(m, 2, 3)
    out = _sample(images, _affine_grid(theta, h, w), ctx.interpolation, ctx.fill)
    codes = {int(r[0]) for r in ctx.rows}
    turns = {_SAME: 0, _ROT90: 1, _ROT180: 2, _ROT270: 3}
    for code in sorted(codes - {_WARP}):
        chosen = (params[:, 0] == code).view(-1, 1, 1, 1)
        out = torch.where(chosen, torch.rot90(images, k=turns[code], dims=(-2, -1)), out)
    return out


#: The batched forms of torch_apply's operations, keyed by the function a declaration names.
BATCH_OPS: Mapping[Callable[..., Any], BatchOp] = {
    _ta.identity: BatchOp(_identity),
    _ta.shear_x: BatchOp(_warp, _shear_x_row),
    _ta.shear_y: BatchOp(_warp, _shear_y_row),
    _ta.translate_x: BatchOp(_warp, _translate_x_row),
    _ta.translate_y: BatchOp(_warp, _translate_y_row),
    _ta.rotate: BatchOp(_warp, _rotate_row),
    _ta.auto_contrast: BatchOp(_auto_contrast),
    _ta.invert: BatchOp(_invert),
    _ta.equalize: BatchOp(_equalize),
    _ta.solarize: BatchOp(_solarize),
    _ta.posterize: BatchOp(_posterize),
    _ta.contrast: BatchOp(_contrast),
    _ta.color: BatchOp(_color),
    _ta.brightness: BatchOp(_brightness),
    _ta.sharpness: BatchOp(_sharpness),
    _ta.cutout: BatchOp(_cutout, extra=2),
    _ta.sample_pairing: BatchOp(_sample_pairing),
}


def batch_op(name: str) -> BatchOp | None:
    """The batched form of the declared operation ``name`` (by the torch function its declaration
    names), or None: it is then applied per image by that function."""
    return BATCH_OPS.get(_ta.TORCH_OPS[name].apply)


# --------------------------------------------------------------------------- policies
#: Uniform numbers an operation without a batched form gets per sample: the seed of its generator.
_PER_IMAGE_EXTRA = 1
#: A sample's draws (:func:`draw_uniforms`), column by column: the crop's top and left, the flip,
#: the sub-policy, then per step of its policy the operation's chance, its sign and its extras.
_TOP, _LEFT, _FLIP, _SUB, _FIRST_STEP = range(5)
#: How an application picks the samples of an operation: ``index`` (gather them, apply, scatter
#: back: one host synchronisation per step) or ``mask`` (apply to every sample, keep the result
#: where it applies: more arithmetic, no synchronisation).
SELECTIONS = ("auto", "index", "mask")


class PolicyPlan:
    """What applying ``policies`` to ``height`` x ``width`` images on ``device`` needs, computed
    once: per (sub-policy, step) the operation, its probability and whether it is signed, and per
    operation its parameter for each (sub-policy, step, sign) -- the declaration's
    :meth:`~autoaug.policies.ops.OpSpec.param`, as torch_apply computes it -- and the rows its
    batched form reads; per policy its base and the shape of its draws.

    One policy, or several (the members of a pack, each with its own policy): their sub-policies
    are numbered one after the other (policy ``p``'s from ``offsets[p]``), so one application serves
    samples of every policy at once, each sample with the draws of its own (:func:`draw_uniforms`,
    :meth:`decode`). A sample's entry is ``(sub_policy * steps + step) * 2 + negated``."""

    def __init__(
        self, policies: Policy | Sequence[Policy], height: int, width: int, device: torch.device | str = "cpu"
    ) -> None:
        self.policies = (policies,) if isinstance(policies, Policy) else tuple(policies)
        for policy in self.policies:
            if not isinstance(policy, Policy):
                raise ValueError(f"policy must be a policies.Policy, got {type(policy).__name__}")
        self.height, self.width = int(height), int(width)
        self.device = torch.device(device)
        self.offsets = [0]
        for policy in self.policies:
            self.offsets.append(self.offsets[-1] + len(policy.sub_policies))
        self.steps = max([0, *(p.max_ops_per_sub_policy for p in self.policies)])
        index = self._op_tables()
        self._draw_layout()
        self._parameter_rows(index)

    def _op_tables(self) -> list[list[int]]:
        """Per (sub-policy, step): the operation (an index into :attr:`names`, -1 for none), its
        probability and whether it is signed; per operation its parameter at each (sub-policy,
        step, sign). Returns the operations' index table."""
        steps, dev = self.steps, self.device
        subs = [(policy, sub) for policy in self.policies for sub in policy.sub_policies]
        self.names: list[str] = []
        index = [[-1] * steps for _ in subs]
        prob = [[0.0] * steps for _ in subs]
        signed = [[False] * steps for _ in subs]
        self.params: dict[str, list[Any]] = {}
        for k, (policy, sub) in enumerate(subs):
            for j, op in enumerate(sub):
                if op.op == _ops.IDENTITY:
                    continue
                spec = _ops.get(op.op)
                if op.op not in self.params:
                    self.names.append(op.op)
                    self.params[op.op] = [None] * (len(subs) * steps * 2)
                index[k][j] = self.names.index(op.op)
                prob[k][j], signed[k][j] = float(op.probability), bool(spec.signed)
                for negated in (0, 1):
                    self.params[op.op][(k * steps + j) * 2 + negated] = spec.param(
                        op.magnitude_bin,
                        policy.num_magnitude_bins,
                        policy.ranges,
                        image_size=(self.height, self.width),
                        negate=bool(negated),
                    )
        self.index = torch.tensor(index, dtype=torch.int64, device=dev).view(len(subs), steps)
        self.probability = torch.tensor(prob, dtype=torch.float64, device=dev).view(len(subs), steps)
        self.signed = torch.tensor(signed, dtype=torch.bool, device=dev).view(len(subs), steps)
        #: Per step, the indices (into :attr:`names`) of the operations some sub-policy has there.
        self.at_step = [sorted({index[k][j] for k in range(len(subs)) if index[k][j] >= 0}) for j in range(steps)]
        self.batched: dict[str, BatchOp | None] = {name: batch_op(name) for name in self.names}
        return index

    def _draw_layout(self) -> None:
        """Per policy, the uniform numbers its operations need per sample and step, its base's crop
        and flip, and the columns of its draws (:func:`draw_uniforms`)."""
        self.extra_of = [
            max([0, *(self._extra(op.op) for sub in policy.sub_policies for op in sub)]) for policy in self.policies
        ]
        self.extra = max([0, *self.extra_of])
        self.crop_of = [_bases.get(p.base).crop for p in self.policies]
        self.flip_of = [_bases.get(p.base).flip for p in self.policies]
        self.columns_of = [
            _FIRST_STEP + p.max_ops_per_sub_policy * (2 + e) for p, e in zip(self.policies, self.extra_of)
        ]
        self.padding = _bases.crop_padding(self.height, self.width)
        per_policy = {
            "count": [len(p.sub_policies) for p in self.policies],
            "offset": self.offsets[:-1],
            "crop": self.crop_of,
            "flip": self.flip_of,
            "stride": [2 + e for e in self.extra_of],
        }
        self._per_policy = {k: torch.tensor(v, device=self.device) for k, v in per_policy.items()}
        self._layouts: dict[tuple, torch.Tensor] = {}

    def _parameter_rows(self, index: list[list[int]]) -> None:
        """Per batched operation, its parameter rows (float64 [entries, D]; zeros where unused) and
        the distinct rows the plan uses."""
        steps = self.steps
        self.rows: dict[str, torch.Tensor] = {}
        self.distinct_rows: dict[str, tuple[tuple[float, ...], ...]] = {}
        for name, batched in self.batched.items():
            if batched is None:
                continue
            params = self.params[name]
            used = {
                e: tuple(float(v) for v in batched.prepare(p, self.height, self.width))
                for e, p in enumerate(params)
                if index[e // (2 * steps)][(e // 2) % steps] == self.names.index(name)
            }
            size = len(next(iter(used.values())))
            table = [used.get(e, (0.0,) * size) for e in range(len(params))]
            self.rows[name] = torch.tensor(table, dtype=torch.float64, device=self.device).view(len(params), size)
            self.distinct_rows[name] = tuple(sorted(set(used.values())))

    def _extra(self, name: str) -> int:
        if name == _ops.IDENTITY:
            return 0
        batched = batch_op(name)
        return _PER_IMAGE_EXTRA if batched is None else batched.extra

    @property
    def policy(self) -> Policy:
        """The plan's one policy (``ValueError`` for a plan of several)."""
        if len(self.policies) != 1:
            raise ValueError(f"this plan applies {len(self.policies)} policies; name the one (member=...)")
        return self.policies[0]

    def _layout(self, members: tuple[int, ...], sizes: tuple[int, ...]) -> torch.Tensor:
        """Each sample's policy, for batches of ``sizes`` of the policies ``members`` (kept: a
        pack's steps all have one layout)."""
        key = (members, sizes)
        if key not in self._layouts:
            each = [m for m, n in zip(members, sizes) for _ in range(n)]
            self._layouts[key] = torch.tensor(each, dtype=torch.int64, device=self.device)
        return self._layouts[key]

    def decode(self, blocks: Sequence[torch.Tensor], members: Sequence[int] | None = None) -> Draws:
        """The draws of batches whose uniform numbers are ``blocks`` (one :func:`draw_uniforms`
        per batch, of the plan's policy ``members[i]``; default: 0, 1, ...), their samples one
        after the other: every sample's sub-policy, crop, flip and, per step, whether the
        operation applies, its sign and its extras -- computed for all batches at once."""
        members = tuple(range(len(blocks))) if members is None else tuple(members)
        sizes = tuple(int(b.shape[0]) for b in blocks)
        dev, width = self.device, max([_FIRST_STEP, *(int(b.shape[1]) for b in blocks)])
        u = torch.cat([torch.nn.functional.pad(b.to(dev), (0, width - b.shape[1])) for b in blocks])
        of = self._layout(members, sizes)
        count, offset = self._per_policy["count"][of], self._per_policy["offset"][of]
        positions = 2 * self.padding + 1
        top = (u[:, _TOP] * positions).long().clamp_(max=positions - 1)
        left = (u[:, _LEFT] * positions).long().clamp_(max=positions - 1)
        crop = self._per_policy["crop"][of]
        top, left = torch.where(crop, top, self.padding), torch.where(crop, left, self.padding)
        flip = self._per_policy["flip"][of] & (u[:, _FLIP] < _bases.FLIP_PROBABILITY)
        total = self.offsets[-1]
        n = u.shape[0]
        fire = torch.zeros((self.steps, n), dtype=torch.bool, device=dev)
        negate = torch.zeros((self.steps, n), dtype=torch.bool, device=dev)
        extra = torch.zeros((self.steps, n, self.extra), dtype=torch.float64, device=dev)
        sub = torch.zeros(n, dtype=torch.int64, device=dev)
        if total:
            local = torch.minimum((u[:, _SUB] * count).long(), (count - 1).clamp(min=0))
            sub = (offset + local).clamp_(0, total - 1)
            stride = self._per_policy["stride"][of]
            has = count > 0  # an identity policy: nothing applies
            for j in range(self.steps):
                column = (_FIRST_STEP + j * stride).clamp(max=width - 1)
                chance = u.gather(1, column[:, None])[:, 0]
                sign = u.gather(1, (column + 1).clamp(max=width - 1)[:, None])[:, 0]
                fire[j] = has & (chance < self.probability[sub, j]) & (self.index[sub, j] >= 0)
                negate[j] = fire[j] & (sign >= 0.5) & self.signed[sub, j]
                if self.extra:
                    spots = (column[:, None] + 2 + torch.arange(self.extra, device=dev)).clamp(max=width - 1)
                    extra[j] = u.gather(1, spots)
        crops = any(self.crop_of[m] for m in members)
        flips = any(self.flip_of[m] for m in members)
        return Draws(sub, fire, negate, extra, top, left, flip, self.padding, crops, flips)


@dataclass(frozen=True)
class Draws:
    """The per-sample draws of one application (:meth:`PolicyPlan.decode`): ``sub`` [N] the
    sub-policy (numbered in the plan), ``fire`` [steps, N] whether the operation at each step
    applies, ``negate`` [steps, N] whether its magnitude is negated (False for unsigned operations
    and steps that do not apply), ``extra`` [steps, N, E] the uniform numbers the operations at each
    step may read; the base's ``top``, ``left`` [N] (``padding``: no shift) and ``flip`` [N], and
    whether any sample's base crops / flips (``crops``, ``flips``)."""

    sub: torch.Tensor
    fire: torch.Tensor
    negate: torch.Tensor
    extra: torch.Tensor
    top: torch.Tensor
    left: torch.Tensor
    flip: torch.Tensor
    padding: int
    crops: bool
    flips: bool


def draw_uniforms(plan: PolicyPlan, n: int, generator: torch.Generator, member: int = 0) -> torch.Tensor:
    """The draws of ``n`` samples for the plan's policy ``member``: one call to ``generator``,
    ``n`` rows of uniform numbers in [0, 1) (float64), as many columns as that policy needs
    (:data:`_FIRST_STEP` for the base and the sub-policy, then per step of its longest sub-policy
    the operation's chance, its sign and its operations' extras): what is drawn depends on that
    policy alone, not on the plan's other policies. :meth:`PolicyPlan.decode` reads them."""
    gdev = generator.device
    return torch.rand((n, plan.columns_of[member]), dtype=torch.float64, generator=generator, device=gdev)


def draw(plan: PolicyPlan, n: int, generator: torch.Generator, member: int = 0) -> Draws:
    """``n`` samples' draws for the plan's policy ``member``, decoded (:func:`draw_uniforms`)."""
    return plan.decode([draw_uniforms(plan, n, generator, member)], [member])


def partners(sizes: Sequence[int], device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """SamplePairing's partner of each sample of batches of ``sizes`` concatenated: the sample
    before it in its own batch (the first: the last; ``batch.roll(1, 0)``), and whether it has one
    (not in a batch of one)."""
    index, paired = [], []
    start = 0
    for n in sizes:
        index += [start + (i - 1) % n for i in range(n)]
        paired += [n > 1] * n
        start += n
    return (
        torch.tensor(index, dtype=torch.int64, device=device),
        torch.tensor(paired, dtype=torch.bool, device=device),
    )


def apply_policy_batch(
    images: torch.Tensor,
    policy: Policy,
    generator: torch.Generator,
    *,
    interpolation: str = "nearest",
    fill: int = 128,
    plan: PolicyPlan | None = None,
    draws: Draws | None = None,
    select: str = "auto",
) -> torch.Tensor:
    """``policy`` applied to ``images`` (uint8 [N, C, H, W] on any device), each sample its own
    draw from ``generator`` (see the module's documentation); a new tensor on the images' device.
    ``plan``: the policy's :class:`PolicyPlan` for this size and device (built here when None);
    ``draws``: the draws to apply instead of drawing them (tests); ``select``: see
    :func:`apply_drawn`."""
    _check_images(images, interpolation)
    n, _, h, w = images.shape
    if policy.is_identity or n == 0:
        return images
    if plan is None:
        plan = PolicyPlan(policy, h, w, images.device)
    elif (plan.policy, plan.height, plan.width) != (policy, h, w):
        raise ValueError("apply_policy_batch: the plan was made for another policy or image size")
    if draws is None:
        draws = draw(plan, n, generator)
    partner, paired = partners([n], images.device)
    return apply_drawn(images, plan, draws, partner, paired, interpolation=interpolation, fill=fill, select=select)


def _check_images(images: torch.Tensor, interpolation: str) -> None:
    if images.dtype != torch.uint8 or images.ndim != 4 or images.shape[1] not in (1, 3):
        raise ValueError(
            f"apply_policy_batch expects uint8 images of shape [N, C, H, W] with C in (1, 3), got "
            f"{images.dtype} {tuple(images.shape)}"
        )
    if interpolation not in _MODES:
        raise ValueError(f"interpolation={interpolation!r}; expected one of {list(_MODES)}")


def apply_drawn(
    images: torch.Tensor,
    plan: PolicyPlan,
    draws: Draws,
    partner: torch.Tensor,
    paired: torch.Tensor,
    *,
    interpolation: str = "nearest",
    fill: int = 128,
    select: str = "auto",
) -> torch.Tensor:
    """The plan's policies applied to ``images`` with ``draws`` (:meth:`PolicyPlan.decode`),
    SamplePairing's ``partner`` index and ``paired`` mask of each sample (:func:`partners`): per
    step, each operation once over the samples that apply it there, whichever policy drew it. A
    sample's result depends on its own draws and partner only.

    ``select``: ``"index"`` gathers each operation's samples, applies it to them and scatters the
    result back (one host synchronisation a step, to learn how many); ``"mask"`` applies each
    operation to every sample and keeps its result where it applies (no synchronisation: the
    device is never waited for); ``"auto"`` (default): ``mask`` on a CUDA device, ``index``
    elsewhere. Both give the same images. An operation without a batched form is always gathered."""
    _check_images(images, interpolation)
    if select not in SELECTIONS:
        raise ValueError(f"select={select!r}; expected one of {list(SELECTIONS)}")
    if select == "auto":
        select = "mask" if images.device.type == "cuda" else "index"
    fills = [float(fill)] * images.shape[1]
    partner_images = images.index_select(0, partner.to(images.device))
    paired = paired.to(images.device)
    out = images.clone()
    steps, names = plan.steps, plan.names
    for j in range(steps):
        present = plan.at_step[j]
        if not present:
            continue
        key = torch.where(draws.fire[j], plan.index[draws.sub, j], -1)
        entry = (draws.sub * steps + j) * 2 + draws.negate[j].long()
        extra = draws.extra[j]
        gathered = [i for i in present if select == "index" or plan.batched[names[i]] is None]
        for i in present:
            batched = plan.batched[names[i]]
            if i in gathered:
                continue
            ctx = OpContext(fills, interpolation, partner_images, paired, extra, plan.distinct_rows[names[i]])
            y = batched.apply(out, plan.rows[names[i]].index_select(0, entry), ctx)
            out = torch.where((key == i).view(-1, 1, 1, 1), y, out)
        if not gathered:
            continue
        order = torch.argsort(key, stable=True)
        counts = torch.bincount(key + 1, minlength=len(names) + 1).tolist()  # the one host sync of a step
        starts = [0]
        for count in counts:
            starts.append(starts[-1] + count)
        for i in gathered:
            count = counts[i + 1]
            if count == 0:
                continue
            chosen = order[starts[i + 1] : starts[i + 1] + count]
            name = names[i]
            x = out.index_select(0, chosen)
            other, has = partner_images.index_select(0, chosen), paired.index_select(0, chosen)
            more, rows = extra.index_select(0, chosen), entry.index_select(0, chosen)
            batched = plan.batched[name]
            if batched is not None:
                ctx = OpContext(fills, interpolation, other, has, more, plan.distinct_rows[name])
                y = batched.apply(x, plan.rows[name].index_select(0, rows), ctx)
            else:
                y = _per_image(name, x, plan.params[name], rows, fills, interpolation, other, has, more)
            out.index_copy_(0, chosen, y)
    return out


def _per_image(
    name: str,
    images: torch.Tensor,
    params: list[Any],
    entry: torch.Tensor,
    fill: list[float],
    interpolation: str,
    other: torch.Tensor,
    paired: torch.Tensor,
    extra: torch.Tensor,
) -> torch.Tensor:
    """An operation without a batched form: its torch_apply function on each sample in turn, with
    a CPU generator seeded from the sample's own uniform number."""
    apply = _ta.TORCH_OPS[name].apply
    mode = _ta._INTERP[interpolation]
    seeds = (extra[:, 0] * 2**53).long().tolist()
    out = [
        apply(
            x,
            params[e],
            fill=fill,
            interpolation=mode,
            other=o if has else None,
            generator=torch.Generator().manual_seed(seed),
        )
        for x, e, o, has, seed in zip(images, entry.tolist(), other, paired.tolist(), seeds)
    ]
    return torch.stack(out)


# --------------------------------------------------------------------------- the base
def crop_at(images: torch.Tensor, top: torch.Tensor, left: torch.Tensor, padding: int) -> torch.Tensor:
    """Each sample zero-padded by ``padding`` px on each side and cropped back to its size at
    ``(top[i], left[i])`` (0..2 * padding): :class:`~autoaug.policies.torch_apply.RandomPadCrop`
    at a given offset."""
    n, c, h, w = images.shape
    dev = images.device
    padded = torch.nn.functional.pad(images, (padding, padding, padding, padding))
    windows = padded.unfold(2, h, 1).unfold(3, w, 1)  # [n, c, 2p + 1, 2p + 1, h, w], a view
    return windows[torch.arange(n, device=dev), :, top.to(dev).long(), left.to(dev).long()]


def apply_base_drawn(images: torch.Tensor, draws: Draws) -> torch.Tensor:
    """The bases' crop and flip with ``draws`` (:meth:`PolicyPlan.decode`) on each sample of
    ``images``: each sample shifted by its offsets (none where its base does not crop), then
    mirrored where it drew a flip."""
    out = images
    if draws.crops:
        out = crop_at(out, draws.top, draws.left, draws.padding)
    if draws.flips:
        out = torch.where(draws.flip.to(out.device).view(-1, 1, 1, 1), out.flip(-1), out)
    return out


def apply_base_batch(images: torch.Tensor, base: str, generator: torch.Generator) -> torch.Tensor:
    """The base ``base`` (:data:`autoaug.policies.bases.REGISTRY`) on each sample of ``images``
    (uint8 [N, C, H, W]): pad-and-random-crop at an offset drawn uniformly per sample
    (:func:`~autoaug.policies.bases.crop_padding`), then a horizontal flip with probability
    :data:`~autoaug.policies.bases.FLIP_PROBABILITY`, as the DALI pipeline and
    :func:`~autoaug.policies.torch_apply.base_transforms` apply them (the draws of
    :func:`draw_uniforms` for a policy of that base and no sub-policy)."""
    n, _, h, w = images.shape
    plan = PolicyPlan(Policy(base, 10, [], base=_bases.check_name(base)), h, w, images.device)
    return apply_base_drawn(images, draw(plan, n, generator))
