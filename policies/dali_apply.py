"""Apply a :class:`~policies.Policy` inside a DALI pipeline.

:func:`apply_policy` is the policy step of a ``pipeline_def(enable_conditionals=True)`` pipeline.
Per sample it draws one sub-policy uniformly and applies each of its operations, in order, with
the operation's probability. It runs on CPU or GPU ``DataNode`` s with the same code and draws all
its randomness from DALI random operators, so it is seeded by the pipeline ``seed``.

The DALI side of each operation is declared in :mod:`autoaug.policies.dali_ops` (re-exported
here); this module holds the tables and the two policy steps that read those declarations
(:func:`apply_policy`, :class:`PolicyInputs`).

Design: a table-driven graph of fixed size
------------------------------------------
The graph does not grow with the number of sub-policies, only with the number of *kinds* of
operation at each stage, so RandAugment (196 sub-policies) and TrivialAugment (434) cost about
the same as a 25-sub-policy AutoAugment policy:

1. ``k = fn.random.uniform(values=range(K))``: the sub-policy of each sample (drawn once);
2. per stage ``s`` (0 .. longest sub-policy - 1), with ``sign`` a fair coin when the stage has a
   signed operation, ``idx = 2 * k + sign`` keys a set of ``fn.lookup_table`` tables built from
   the policy in Python: the operation kind, its probability (``fn.random.coin_flip(probability=
   <per-sample node>)`` decides whether it is applied; not applied -> Identity) and its
   parameter, already converted by :mod:`autoaug.policies.ops` (enhance factor, solarize threshold,
   posterize mask, blend weight...). Geometric operations look up a whole 2x3 affine matrix
   (``types.Constant(table)[idx]``), Sharpness a 3x3 kernel;
3. one conditional selection over the stage's kinds (:func:`_select`, a binary tree of ``if``
   split as ``nvidia.dali.auto_aug.core.select`` splits): each branch receives only the samples
   that drew it, together with their share of the parameter nodes. It is the only function with
   an ``if`` on a DataNode, so the only one (with the two thin policy steps that loop over the
   stages) DALI's AutoGraph converts; everything else is ``@do_not_convert``.

All parameters are computed before branching, once per stage, so a branch holds only the operator
itself. ShearX/ShearY/TranslateX/TranslateY/Rotate share one ``fn.warp_affine`` branch (their
matrices differ only in the table) and Invert is Solarize with threshold 0; this keeps the number
of conditional splits low, which is what dominates on small images (see docs/policies.md for the
measurements against DALI's ``apply_auto_augment``).

Each operation is declared once, in :mod:`autoaug.policies.ops` (its ``OpSpec.dali``, a
:class:`~autoaug.policies.ops.DaliImpl`): the branch its samples go to (its *kind*; ``Warp`` is a
branch several operations share, declared in :mod:`autoaug.policies.dali_ops` with
:func:`dali_branch`), which per-sample table the branch reads (``param``, ``matrix`` or ``kernel``)
and how the operation's parameter becomes its entry of that table. :data:`DALI_OPS`,
:data:`DALI_BRANCHES` and ``kind_order()`` are derived from the declarations when read, so an
operation declared at any time is applied here. The branches are ``@augmentation`` objects
(``nvidia.dali.auto_aug``), declared without a magnitude range because their parameters arrive
pre-computed as named arguments; Brightness, Color, Contrast, AutoContrast and Posterize call the
operator functions of DALI's own ``auto_aug.augmentations`` (``.op``), Equalize and Sharpness the
non-deprecated ``fn.equalize`` / ``fn.filter``, and Cutout / SamplePairing are written in
:mod:`autoaug.policies.dali_ops` (neither DALI nor torchvision has them).

SamplePairing blends each image with another image of the same batch: ``fn.permute_batch`` with a
``fn.batch_permutation(no_fixed_points=True)`` computed once before any branching (the partner
enters as it was *before* this policy step).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from nvidia.dali import fn, types
from nvidia.dali import math as dmath
from nvidia.dali.data_node import DataNode
from nvidia.dali.pipeline import do_not_convert

from autoaug.policies import bases as _bases
from autoaug.policies import ops as _ops
from autoaug.policies.dali_ops import (  # the operations' DALI side, re-exported here
    _SHARP_IDENT,
    DALI_BRANCHES,
    DALI_OPS,
    TABLES,
    DaliBranch,
    DaliOp,
    _terms,
    dali_branch,
    kind_order,
)
from autoaug.policies.policy import Policy

__all__ = [
    "apply_base",
    "apply_policy",
    "decode_trace",
    "DALI_OPS",
    "DALI_BRANCHES",
    "DaliOp",
    "DaliBranch",
    "dali_branch",
    "kind_order",
    "StageTables",
    "stage_tables",
    "affine_terms",
    "PolicyInputs",
    "apply_policy_inputs",
]

_INTERP = {"nearest": types.INTERP_NN, "bilinear": types.INTERP_LINEAR}


# --------------------------------------------------------------------------- parameters
@do_not_convert
def affine_terms(name: str, param: float) -> np.ndarray:
    """Forward (source -> destination) affine matrix of a geometric op as ``A + W*B + H*C``.

    Returns ``[A, B, C]`` (shape 3x2x3) for an image of width ``W`` and height ``H`` in pixels;
    ``param`` is the op's signed parameter with translation as a fraction of the size.
    Shear is about the top-left corner with PIL's sign (``out(x, y) = in(x + m*y, y)``, as
    torchvision's AutoAugment), translation moves the content by ``+param * size``, rotation is
    about the centre, counter-clockwise for positive angles (as ``fn.rotate`` and ``F.rotate``).
    """
    op = DALI_OPS.get(name)
    if op is None or op.branch.table != "matrix":
        geometric = [n for n, d in DALI_OPS.items() if d.branch.table == "matrix"]
        raise ValueError(f"{name} is not a geometric op; expected one of {geometric}")
    return op.to_table(param)


@dataclass(frozen=True, eq=False)
class StageTables:
    """The lookup tables of one stage of a policy, indexed by ``2 * sub_policy + sign`` (sign 1 =
    the magnitude negated). Size-relative parameters (translate, cutout) are fractions of the size.

    Attributes:
        kinds: the stage's branch kinds, Identity first.
        kind: int64 ``[2K]``, index into ``kinds``.
        prob: ``[2K]``, the op's probability.
        param: ``[2K]``, the ``param`` table (float scalars).
        affine: ``[2K, 3, 2, 3]``, the ``matrix`` table as :func:`affine_terms`.
        kernel: ``[2K, 3, 3]``, the ``kernel`` table.
        signed: any signed op at the stage.
        all_certain: every present op has probability 1.
    """

    kinds: tuple[str, ...]
    kind: np.ndarray
    prob: np.ndarray
    param: np.ndarray
    affine: np.ndarray
    kernel: np.ndarray
    signed: bool
    all_certain: bool


@do_not_convert
def stage_tables(policy: Policy, stage: int) -> StageTables:
    """The :class:`StageTables` of stage ``stage`` of ``policy``."""
    subs = policy.sub_policies
    used = {DALI_OPS[s[stage].op].kind for s in subs if stage < len(s) and s[stage].op != _ops.IDENTITY}
    kinds = (_ops.IDENTITY, *(k for k in kind_order() if k in used))
    n = 2 * len(subs)
    kind = np.zeros(n, dtype=np.int64)
    prob = np.zeros(n)
    tables = {
        "param": np.zeros(n),
        "matrix": np.tile(_terms(), (n, 1, 1, 1)),
        "kernel": np.tile(_SHARP_IDENT, (n, 1, 1)),
    }
    signed, all_certain = False, True
    for k, sub in enumerate(subs):
        if stage >= len(sub) or sub[stage].op == _ops.IDENTITY:
            continue
        op = sub[stage]
        spec, dali = _ops.REGISTRY[op.op], DALI_OPS[op.op]
        signed |= spec.signed
        all_certain &= op.probability >= 1.0
        for sign in (0, 1):
            i = 2 * k + sign
            kind[i] = kinds.index(dali.kind)
            prob[i] = op.probability
            if dali.branch.table is None:
                continue
            if dali.table_input == "magnitude":
                value = spec.magnitude(op.magnitude_bin, policy.num_magnitude_bins, policy.ranges)
            else:
                value = policy.magnitude(op, image_size=(1, 1), negate=bool(sign))
            tables[dali.branch.table][i] = dali.to_table(value)
    return StageTables(
        kinds=kinds,
        kind=kind,
        prob=prob,
        param=tables["param"],
        affine=tables["matrix"],
        kernel=tables["kernel"],
        signed=signed,
        all_certain=all_certain,
    )


@do_not_convert
def _lookup(idx, values, dtype):
    return fn.lookup_table(
        idx,
        keys=list(range(len(values))),
        values=[float(v) for v in values],
        dtype=dtype,
        default_value=0.0,
    )


@do_not_convert
def _normalize_size(image_size) -> tuple[int, int] | None:
    if image_size is None:
        return None
    if isinstance(image_size, int) and not isinstance(image_size, bool):
        size = (image_size, image_size)
    elif isinstance(image_size, Sequence) and len(image_size) == 2:
        size = tuple(image_size)
    else:
        raise ValueError(f"image_size={image_size!r}; expected None, an int or (height, width)")
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in size):
        raise ValueError(f"image_size={image_size!r}; expected positive integers")
    return size  # type: ignore[return-value]


@do_not_convert
def apply_base(base, images: DataNode, *, image_size: int | tuple[int, int]) -> DataNode:
    """The base augmentation ``base`` (a name of :data:`autoaug.policies.bases.REGISTRY`, or a
    policy: its ``base``) as DALI operators on uint8 HWC images of ``image_size`` (an int or
    ``(height, width)``, CPU or GPU), as :func:`autoaug.policies.torch_apply.base_transforms`
    does in torchvision: pad-and-random-crop (zero padding of
    :func:`~autoaug.policies.bases.crop_padding` px, a crop of the original size at an offset
    uniform over the ``2 * pad + 1`` positions of each axis) when the base crops, then a
    horizontal flip with probability 1/2 when it flips. Randomness from the pipeline seed."""
    spec = _bases.get(getattr(base, "base", base))
    size = _normalize_size(image_size)
    if size is None:
        raise ValueError("apply_base needs image_size (the crop keeps the images' size)")
    height, width = size
    if spec.crop:
        pad = _bases.crop_padding(height, width)
        padded = fn.crop(
            images,
            crop=(height + 2 * pad, width + 2 * pad),
            crop_pos_x=0.5,
            crop_pos_y=0.5,
            out_of_bounds_policy="pad",
            fill_values=0,
        )
        positions = [k / (2 * pad) for k in range(2 * pad + 1)]
        images = fn.crop(
            padded,
            crop=(height, width),
            crop_pos_x=fn.random.uniform(values=positions),
            crop_pos_y=fn.random.uniform(values=positions),
        )
    if spec.flip:
        images = fn.flip(images, horizontal=fn.random.coin_flip(probability=_bases.FLIP_PROBABILITY))
    return images


def apply_policy(
    policy: Policy,
    images: DataNode,
    *,
    image_size: int | tuple[int, int] | None = None,
    interpolation: str = "nearest",
    fill_value: int = 128,
    return_trace: bool = False,
):
    """Apply ``policy`` to a batch of uint8 HWC RGB images inside a DALI pipeline.

    Must be called inside ``@pipeline_def(enable_conditionals=True)``. Works for CPU and GPU
    ``images``; the randomness comes from the pipeline seed.

    Args:
        policy: the policy (one with no sub-policies returns ``images`` unchanged).
        images: uint8 ``HWC`` DataNode with 3 channels.
        image_size: ``(height, width)`` or an int when every image has that size: the
            size-dependent parameters (translate, rotation centre, cutout side) are then
            pre-computed. ``None`` (default) reads each sample's shape, so any sizes work.
        interpolation: ``"nearest"`` (default, as torchvision's AutoAugment and the paper's PIL
            code) or ``"bilinear"``, for the geometric operations.
        fill_value: grey level of uncovered pixels and of the Cutout square (default 128).
        return_trace: also return a per-sample int32 vector ``[k, fired_0, negated_0, fired_1,
            negated_1, ...]`` (sub-policy index, and per stage whether its operation was applied
            and with a negated magnitude); :func:`decode_trace` turns it into op names.

    Returns:
        the augmented uint8 HWC DataNode (same device as ``images``), or ``(images, trace)``.
    """
    # AutoGraph converts this function (the pipeline calls it): it only loops over the stages and
    # branches; the checks and the tables are built in _PolicyStep, which it does not convert.
    step = _PolicyStep(policy, images, image_size, interpolation, fill_value, return_trace)
    for stage in range(step.stages):
        calls, selected = step.stage(stage)
        if calls:
            images = _select(calls, selected, 0, len(calls) - 1, images)
    return step.result(images)


class _PolicyStep:
    """The DataNodes of :func:`apply_policy` built outside the branches (not converted by
    AutoGraph): the argument checks, each sample's sub-policy ``k``, the arguments every branch
    shares and, per stage (:meth:`stage`, called in stage order so the graph's random operators
    are created in the same order as ever), the selection and each branch's call."""

    @do_not_convert
    def __init__(self, policy, images, image_size, interpolation, fill_value, return_trace):
        if not isinstance(policy, Policy):
            raise ValueError(f"policy must be a policies.Policy, got {type(policy).__name__}")
        if not isinstance(images, DataNode):
            raise ValueError(f"images must be a DALI DataNode (inside a pipeline_def), got {type(images).__name__}")
        if interpolation not in _INTERP:
            raise ValueError(f"interpolation={interpolation!r}; expected one of {sorted(_INTERP)}")
        if isinstance(fill_value, bool) or not isinstance(fill_value, int) or not 0 <= fill_value <= 255:
            raise ValueError(f"fill_value={fill_value!r}; expected an int in [0, 255]")
        self.size = size = _normalize_size(image_size)
        self.policy = policy
        self.return_trace = return_trace
        if policy.is_identity:
            self.stages = 0
            self.trace = [fn.random.uniform(values=[-1], dtype=types.INT32, shape=[1])] if return_trace else []
            return
        self.stages = policy.max_ops_per_sub_policy
        used = set(policy.ops_used)
        self.height = self.width = None
        if any(DALI_OPS[o].branch.sized for o in used):
            if size is not None:
                self.height, self.width = float(size[0]), float(size[1])
            else:
                shape = images.shape(device="cpu")
                self.height = fn.cast(shape[0], dtype=types.FLOAT)
                self.width = fn.cast(shape[1], dtype=types.FLOAT)
        self.kwargs = _branch_kwargs(
            images, {DALI_OPS[o].kind for o in used}, fill_value, interpolation, size, self.height, self.width
        )
        self.k = fn.random.uniform(values=list(range(len(policy))), dtype=types.INT32)
        self.k2 = self.k * 2
        self.trace = [self.k]

    @do_not_convert
    def stage(self, stage: int) -> tuple[list, Any]:
        """``(calls, selected)`` of stage ``stage`` for :func:`_select` (no calls: only Identity)."""
        t = stage_tables(self.policy, stage)
        k = self.k
        if len(t.kinds) == 1:  # only Identity at this stage
            if self.return_trace:
                self.trace += [k * 0, k * 0]
            return [], None
        sign = fn.random.coin_flip(dtype=types.INT32) if t.signed else None
        idx = self.k2 + sign if sign is not None else self.k2
        selected = _lookup(idx, t.kind, types.INT32)
        if not t.all_certain:
            applied = fn.random.coin_flip(probability=_lookup(idx, t.prob, types.FLOAT), dtype=types.INT32)
            selected = selected * applied
        size, height, width = self.size, self.height, self.width

        def matrix():
            if size is not None:
                mats = t.affine[:, 0] + width * t.affine[:, 1] + height * t.affine[:, 2]
                return types.Constant(mats.astype(np.float32))[idx]
            per_sample = types.Constant(t.affine.astype(np.float32))[idx]
            return per_sample[0] + width * per_sample[1] + height * per_sample[2]

        calls = _stage_calls(
            t.kinds,
            self.kwargs,
            param=lambda: _lookup(idx, t.param, types.FLOAT),
            matrix=matrix,
            kernel=lambda: types.Constant(t.kernel.astype(np.float32))[idx],
        )
        if self.return_trace:
            self.trace += [fn.cast(selected > 0, dtype=types.INT32), sign if sign is not None else k * 0]
        return calls, selected

    @do_not_convert
    def result(self, images):
        if self.return_trace:
            return images, fn.stack(*self.trace) if len(self.trace) > 1 else self.trace[0]
        return images


def decode_trace(policy: Policy, trace) -> list[tuple[int, list[str]]]:
    """``[(sub_policy_index, ["Rotate", "-TranslateX", ...]), ...]`` from the trace vectors of
    :func:`apply_policy` (``-`` marks a negated magnitude); ``(-1, [])`` for an identity policy."""
    out = []
    for row in np.asarray(trace).reshape(len(trace), -1):
        k = int(row[0])
        if k < 0:
            out.append((-1, []))
            continue
        fired = []
        for stage, op in enumerate(policy.sub_policies[k]):
            if row[1 + 2 * stage]:
                neg = bool(row[2 + 2 * stage]) and _ops.REGISTRY[op.op].signed
                fired.append(("-" if neg else "") + op.op)
        out.append((k, fired))
    return out


# --------------------------------------------------------------------------- the stage, shared
@do_not_convert
def _branch_kwargs(images, kinds, fill_value: int, interpolation: str, size, height=None, width=None) -> dict:
    """The arguments every stage's branches share (both policy steps): fill value and
    interpolation, and those the branches of ``kinds`` declare (:attr:`DaliBranch.arguments`: with
    Cutout its side and centre; with SamplePairing each image's partner, the batch as it entered the
    policy step). ``size``: ``(h, w)`` when known, else per-sample ``height``/``width`` nodes."""
    kwargs: dict = {"fill_value": fill_value, "interp_type": _INTERP[interpolation]}
    for kind in kind_order():
        branch = DALI_BRANCHES[kind]
        if kind in kinds and branch.arguments is not None:
            kwargs.update(branch.arguments(images, size, height, width))
    return kwargs


@do_not_convert
def _stage_calls(kinds: Sequence[str], kwargs: dict, *, param, matrix, kernel) -> list:
    """The calls of one stage's branches (both policy steps), in the order of ``kinds`` (Identity
    first): ``(function, arguments)`` for :func:`_select`. Each branch receives the shared
    ``kwargs`` it accepts and, where it reads one, its per-sample table (:data:`TABLES`:
    ``param``, ``matrix`` and ``kernel`` are callables building the parameter, affine matrix and
    sharpness kernel nodes, called only when a branch of the stage reads them)."""
    stage_kwargs = dict(kwargs)
    read = {DALI_BRANCHES[kind].table for kind in kinds}
    for table, build in zip(TABLES, (param, matrix, kernel)):
        if table in read:
            stage_kwargs[table] = build()
    calls = []
    for kind in kinds:
        branch = DALI_BRANCHES[kind]
        calls.append((branch.augmentation.op, {n: stage_kwargs[n] for n in branch.accepts if n in stage_kwargs}))
    return calls


def _select(calls: list, selected, lo: int, hi: int, data):
    """``calls[selected](data)`` per sample: the conditional selection of a stage, a binary tree of
    ``if`` over ``[lo, hi]`` (as DALI's ``auto_aug.core.select``, whose split it keeps, so a graph
    and its random draws are the same as with it). Each branch gets only the samples that drew it
    and their share of the argument nodes.

    The only function of a policy step whose ``if`` tests a DataNode, so the only one AutoGraph has
    to convert besides the two thin policy steps: converting DALI's ``select`` and its
    ``Augmentation`` wrappers and every branch cost each process that builds a policy pipeline
    2.5-4 CPU-s (34 conversions; a trial actor, a compare run, a calibration run each pay it)."""
    if lo == hi:
        function, kwargs = calls[lo]
        out = function(data, None, **kwargs)
    else:
        mid = (lo + hi) // 2
        if selected <= mid:
            out = _select(calls, selected, lo, mid, data)
        else:
            out = _select(calls, selected, mid + 1, hi, data)
    return out


# --------------------------------------------------------------------------- tables as inputs
class PolicyInputs:
    """The policy step with its tables as *pipeline inputs*: one graph serves every policy of a
    search space, so a new policy needs no new pipeline (density-matching search scores hundreds
    of candidates on one held-out fold with one pipeline).

    The graph is fixed by the operation names it may meet (``ops``), the number of sub-policies
    (at most ``num_sub_policies``) and of operations per sub-policy (``stages``); the policy
    arrives as arrays (:meth:`tables`) fed through ``fn.external_source`` with every batch. Per
    sample, as in :func:`apply_policy`: a sub-policy is drawn uniformly, each stage draws a sign
    and a coin with the operation's probability, and one conditional selection over the stage's
    kinds applies the operation. The randomness comes from DALI random operators (the pipeline
    seed).

    ``image_size`` (int or ``(height, width)``) is required: geometric matrices and the cutout
    side are computed for it.
    """

    def __init__(self, ops: Sequence[str], num_sub_policies: int, stages: int, image_size):
        unknown = [o for o in ops if o not in _ops.REGISTRY]
        if unknown:
            raise ValueError(_ops.unknown_op_message(unknown[0]))
        if not isinstance(num_sub_policies, int) or num_sub_policies < 1:
            raise ValueError(f"num_sub_policies={num_sub_policies!r}; expected an integer >= 1")
        if not isinstance(stages, int) or stages < 1:
            raise ValueError(f"stages={stages!r}; expected an integer >= 1")
        size = _normalize_size(image_size)
        if size is None:
            raise ValueError("PolicyInputs needs image_size (an int or (height, width))")
        self.ops = tuple(dict.fromkeys(ops))
        self.num_sub_policies = num_sub_policies
        self.stages = stages
        self.image_size = size
        used = {DALI_OPS[o].kind for o in self.ops if o != _ops.IDENTITY}
        self.kinds = (_ops.IDENTITY, *(k for k in kind_order() if k in used))

    #: Names of the per-stage input arrays, in the order :meth:`input_names` lists them.
    _FIELDS = ("kind", "prob", "param", "matrix", "kernel")

    def input_names(self) -> list[str]:
        """``["count", "s0_kind", "s0_prob", ..., "s1_kernel", ...]``: the arrays of :meth:`tables`."""
        return ["count"] + [f"s{s}_{f}" for s in range(self.stages) for f in self._FIELDS]

    def check(self, policy: Policy) -> None:
        """Raise ``ValueError`` when ``policy`` does not fit this graph."""
        if not isinstance(policy, Policy):
            raise ValueError(f"policy must be a policies.Policy, got {type(policy).__name__}")
        extra = sorted(set(policy.ops_used) - set(self.ops) - {"Identity"})
        if extra:
            raise ValueError(
                f"policy {policy.name!r} uses {extra}, which this pipeline's policy step was not "
                f"built for (ops {list(self.ops)})"
            )
        if len(policy.sub_policies) > self.num_sub_policies:
            raise ValueError(
                f"policy {policy.name!r} has {len(policy.sub_policies)} sub-policies; this pipeline "
                f"takes at most {self.num_sub_policies}"
            )
        if policy.sub_policies and policy.max_ops_per_sub_policy > self.stages:
            raise ValueError(
                f"policy {policy.name!r} has sub-policies of {policy.max_ops_per_sub_policy} "
                f"operations; this pipeline takes at most {self.stages}"
            )

    def tables(self, policy: Policy) -> list[np.ndarray]:
        """The input arrays for ``policy`` (one sample's worth; the same for every sample),
        in the order of :meth:`input_names`. A policy with no sub-policies is the identity."""
        self.check(policy)
        k_max = self.num_sub_policies
        n = 2 * k_max
        h, w = float(self.image_size[0]), float(self.image_size[1])
        count = max(1, len(policy.sub_policies))
        out: list[np.ndarray] = [np.array(count, dtype=np.float32)]
        for stage in range(self.stages):
            kind = np.zeros(n, dtype=np.int32)
            prob = np.zeros(n, dtype=np.float32)
            param = np.zeros(n, dtype=np.float32)
            matrix = np.tile(np.array([[1, 0, 0], [0, 1, 0]], dtype=np.float32), (n, 1, 1))
            kernel = np.tile(_SHARP_IDENT.astype(np.float32), (n, 1, 1))
            if policy.sub_policies and stage < policy.max_ops_per_sub_policy:
                t = stage_tables(policy, stage)
                m = 2 * len(policy.sub_policies)
                kind[:m] = [self.kinds.index(t.kinds[i]) for i in t.kind]
                prob[:m] = t.prob
                param[:m] = t.param
                terms = t.affine
                matrix[:m] = terms[:, 0] + w * terms[:, 1] + h * terms[:, 2]
                kernel[:m] = t.kernel
            out += [kind, prob, param, matrix, kernel]
        return out


def apply_policy_inputs(
    spec: PolicyInputs,
    images: DataNode,
    inputs: Sequence[DataNode],
    *,
    interpolation: str = "nearest",
    fill_value: int = 128,
) -> DataNode:
    """The policy step of :class:`PolicyInputs` (inside ``pipeline_def(enable_conditionals=True)``):
    ``inputs`` are the DataNodes fed with :meth:`PolicyInputs.tables`, in its order."""
    # Converted by AutoGraph, as apply_policy: only the loop and the branches.
    step = _PolicyInputsStep(spec, images, inputs, interpolation, fill_value)
    for stage in range(step.stages):
        calls, selected = step.stage(stage)
        images = _select(calls, selected, 0, len(calls) - 1, images)
    return images


class _PolicyInputsStep:
    """The DataNodes of :func:`apply_policy_inputs` built outside the branches (not converted by
    AutoGraph), as :class:`_PolicyStep`."""

    @do_not_convert
    def __init__(self, spec: PolicyInputs, images, inputs, interpolation: str, fill_value: int):
        if len(inputs) != len(spec.input_names()):
            raise ValueError(
                f"expected {len(spec.input_names())} policy inputs ({spec.input_names()}), got {len(inputs)}"
            )
        if interpolation not in _INTERP:
            raise ValueError(f"interpolation={interpolation!r}; expected one of {sorted(_INTERP)}")
        self.spec, self.inputs = spec, inputs
        count = inputs[0]
        self.kwargs = _branch_kwargs(images, set(spec.kinds), fill_value, interpolation, spec.image_size)
        self.stages = 0 if len(spec.kinds) == 1 else spec.stages
        if self.stages:
            u = fn.random.uniform(range=[0.0, 1.0])
            k = fn.cast(dmath.min(dmath.floor(u * count), count - 1.0), dtype=types.INT32)
            self.k2 = k * 2

    @do_not_convert
    def stage(self, stage: int) -> tuple[list, Any]:
        kind, prob, param, matrix, kernel = self.inputs[1 + 5 * stage : 6 + 5 * stage]
        idx = self.k2 + fn.random.coin_flip(dtype=types.INT32)
        applied = fn.random.coin_flip(probability=prob[idx], dtype=types.INT32)
        selected = kind[idx] * applied
        calls = _stage_calls(
            self.spec.kinds,
            self.kwargs,
            param=lambda: param[idx],
            matrix=lambda: matrix[idx],
            kernel=lambda: kernel[idx],
        )
        return calls, selected
