"""The DALI side of each operation of :data:`autoaug.policies.ops.REGISTRY`, declared once, next
to its code, with :func:`dali_op`: the branch its samples go to (its *kind*; :func:`dali_branch`
declares a branch several operations share, such as ``Warp``), which per-sample table the branch
reads (``param``, ``matrix`` or ``kernel``) and how the operation's parameter becomes its entry of
that table. The policy steps that read these declarations are in :mod:`autoaug.policies.dali_apply`.

The branches are ``@augmentation`` objects (``nvidia.dali.auto_aug``), declared without a magnitude
range because their parameters arrive pre-computed as named arguments, and not converted by DALI's
AutoGraph (``@do_not_convert``: a branch has no condition on a DataNode).
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

import numpy as np
from nvidia.dali import fn, types
from nvidia.dali import math as dmath
from nvidia.dali.auto_aug import augmentations as _a
from nvidia.dali.auto_aug.core import augmentation
from nvidia.dali.pipeline import do_not_convert

from autoaug.policies import ops as _ops

if TYPE_CHECKING:  # DALI's private class of @augmentation objects (pyproject.toml bounds DALI's version)
    from nvidia.dali.auto_aug.core import _Augmentation

__all__ = ["DALI_OPS", "DALI_BRANCHES", "DaliOp", "DaliBranch", "dali_op", "dali_branch", "TABLES"]

# --------------------------------------------------------------------------- registration
#: The per-sample tables a branch may read, by the name of its argument (all computed before branching).
TABLES = ("param", "matrix", "kernel")


@dataclass(frozen=True)
class DaliBranch:
    """One branch of a stage's conditional selection: the ``@augmentation`` applied to the samples
    that drew its ``kind``.

    Attributes:
        kind: the branch's name (an op's name, or a name several ops share: ``Warp``).
        augmentation: ``fn(data, _, **arguments)`` as an ``nvidia.dali.auto_aug`` augmentation.
        table: the per-sample table it reads (:data:`TABLES`: ``param`` a float, ``matrix`` a 2x3
            affine matrix, ``kernel`` a 3x3 kernel), or ``None``.
        sized: it needs the image size (computed once per policy step when any branch does).
        arguments: ``(images, size, height, width) -> dict``, the arguments it shares with every
            stage (built once per policy step, before any branching), or ``None``.
        accepts: the names of the arguments it takes after ``(data, _)``: what a stage passes it.
    """

    kind: str
    augmentation: _Augmentation
    table: str | None = None
    sized: bool = False
    arguments: Callable[..., dict] | None = None
    accepts: tuple[str, ...] = ()


@dataclass(frozen=True)
class DaliOp:
    """How DALI applies one operation of :data:`autoaug.policies.ops.REGISTRY`.

    Attributes:
        name: the registry name.
        branch: the branch its samples go to.
        to_table: its entry of the branch's table from ``table_input``.
        table_input: ``"param"``, the op's parameter (:meth:`~autoaug.policies.ops.OpSpec.param`,
            size-relative magnitudes as fractions of the size), or ``"magnitude"``, the unsigned
            magnitude (the branch converts it once the size is known: Cutout).
        operator: the DALI operators used, for the docs (docs/policies.md's op table).
    """

    name: str
    branch: DaliBranch
    to_table: Callable[[Any], Any]
    table_input: str
    operator: str

    @property
    def kind(self) -> str:
        return self.branch.kind


#: Registry name -> :class:`DaliOp` (filled by :func:`dali_op`, checked against the registry by
#: tests/policies/test_ops_registry.py).
DALI_OPS: dict[str, DaliOp] = {}
#: Kind -> :class:`DaliBranch` (filled by :func:`dali_branch` and :func:`dali_op`).
DALI_BRANCHES: dict[str, DaliBranch] = {}


def dali_branch(kind: str, *, table: str | None = None, sized: bool = False, arguments=None):
    """Declare the function below (``fn(data, _, **arguments)``) as the branch ``kind``; it is
    replaced by its :class:`DaliBranch`. See :class:`DaliBranch` for the arguments."""

    def register(function) -> DaliBranch:
        if kind in DALI_BRANCHES:
            raise ValueError(f"dali_branch: kind {kind!r} is declared twice")
        if table not in (None, *TABLES):
            raise ValueError(f"dali_branch {kind!r}: table={table!r}; expected None or one of {list(TABLES)}")
        if table is not None and table not in inspect.signature(function).parameters:
            raise ValueError(f"dali_branch {kind!r}: {function.__name__} takes no {table!r} argument, its table")
        # Not converted by AutoGraph: a branch has no condition on a DataNode, and converting each
        # one cost every process that builds a policy pipeline about 0.1 s (see _select).
        params = list(inspect.signature(function).parameters.values())[2:]
        accepts = tuple(q.name for q in params if q.kind in (q.POSITIONAL_OR_KEYWORD, q.KEYWORD_ONLY))
        branch = DaliBranch(kind, augmentation(do_not_convert(function)), table, sized, arguments, accepts)
        DALI_BRANCHES[kind] = branch
        return branch

    return register


def _scalar(value) -> float:
    return 0.0 if value is None else float(value)


def dali_op(
    name: str,
    *,
    operator: str,
    kind: str | None = None,
    table: str | None = None,
    to_table: Callable[[Any], Any] = _scalar,
    table_input: str = "param",
    sized: bool = False,
    arguments=None,
):
    """Declare how DALI applies the registry op ``name`` (refused in one line when the registry has
    no such op, or when it is declared twice).

    Without ``kind``, it decorates the op's own branch ``fn(data, _, **arguments)`` (kind ``name``;
    ``table``, ``sized``, ``arguments`` as :class:`DaliBranch`) and the op's parameter becomes its
    table entry through ``to_table`` (a float by default). With ``kind``, the op joins that
    already declared branch and the decorated function is its ``to_table``. ``operator``: the DALI
    operators used, for the docs.
    """
    _ops.check_backend_name("dali_op", name, DALI_OPS)
    if table_input not in ("param", "magnitude"):
        raise ValueError(f"dali_op {name!r}: table_input={table_input!r}; expected 'param' or 'magnitude'")
    if kind is not None and (table, sized, arguments, to_table) != (None, False, None, _scalar):
        raise ValueError(
            f"dali_op {name!r}: with kind={kind!r}, table / sized / arguments are the branch's and "
            "the decorated function is to_table; pass none of them"
        )

    def register(function):
        if kind is None:
            branch = dali_branch(name, table=table, sized=sized, arguments=arguments)(function)
            DALI_OPS[name] = DaliOp(name, branch, to_table, table_input, operator)
            return branch
        if kind not in DALI_BRANCHES:
            raise ValueError(f"dali_op {name!r}: no branch {kind!r}; expected one of {sorted(DALI_BRANCHES)}")
        DALI_OPS[name] = DaliOp(name, DALI_BRANCHES[kind], function, table_input, operator)
        return function

    return register


# --------------------------------------------------------------------------- operations
# Each branch takes the (partial) batch and named per-sample arguments computed before branching:
# its table (``param`` float scalar, ``matrix`` 2x3, ``kernel`` 3x3), ``paired``, ``cutout_center``,
# ``min_side``, ``hw``, plus the constants ``fill_value`` / ``interp_type``.


def _like(node, data):
    """``node`` on the device of ``data`` (DALI auto_aug's ``param_device="auto"``)."""
    return node.gpu() if data.device == "gpu" else node


@dali_op("Identity", operator="-")
def _identity(data, _):
    return data


@dali_branch("Warp", table="matrix", sized=True)
def _warp(data, _, matrix, fill_value=128, interp_type=None):
    """ShearX/ShearY/TranslateX/TranslateY/Rotate: one affine warp with a per-sample matrix
    (source -> destination, pixels) looked up from the policy table (see :func:`affine_terms`)."""
    return fn.warp_affine(data, matrix=matrix, fill_value=fill_value, interp_type=interp_type, inverse_map=False)


def _terms(linear=((1.0, 0.0), (0.0, 1.0)), per_width=(0.0, 0.0), per_height=(0.0, 0.0)) -> np.ndarray:
    """``[A, B, C]`` (3x2x3) of the forward matrix ``A + W*B + H*C``: ``linear`` its 2x2 part,
    its translation ``per_width * W + per_height * H``."""
    terms = np.zeros((3, 2, 3), dtype=np.float64)
    terms[0, :, :2] = linear
    terms[1, :, 2] = per_width
    terms[2, :, 2] = per_height
    return terms


# PIL's AutoAugment shear is the inverse map (1, m, 0, 0, 1, 0): out(x, y) = in(x + m*y, y), as
# torchvision's F.affine(shear=atan(m)); the forward matrix is its inverse.
@dali_op("ShearX", kind="Warp", operator="fn.warp_affine (per-sample matrix from the policy table)")
def _shear_x(m: float) -> np.ndarray:
    return _terms(np.array([[1.0, -m], [0.0, 1.0]]))


@dali_op("ShearY", kind="Warp", operator="fn.warp_affine (per-sample matrix from the policy table)")
def _shear_y(m: float) -> np.ndarray:
    return _terms(np.array([[1.0, 0.0], [-m, 1.0]]))


# Translation moves the content by +param * size (param a fraction of the size).
@dali_op("TranslateX", kind="Warp", operator="fn.warp_affine (per-sample matrix from the policy table)")
def _translate_x(m: float) -> np.ndarray:
    return _terms(per_width=(m, 0.0))


@dali_op("TranslateY", kind="Warp", operator="fn.warp_affine (per-sample matrix from the policy table)")
def _translate_y(m: float) -> np.ndarray:
    return _terms(per_height=(0.0, m))


@dali_op("Rotate", kind="Warp", operator="fn.warp_affine (rotation about the centre, as fn.rotate)")
def _rotate(degrees: float) -> np.ndarray:
    # y points down, so a counter-clockwise turn on screen is (x, y) -> R(-a) (x, y)
    a = math.radians(degrees)
    lin = np.array([[math.cos(a), math.sin(a)], [-math.sin(a), math.cos(a)]])
    # about the centre c = (W/2, H/2): offset (I - L) c
    q = (np.eye(2) - lin) / 2.0
    return _terms(lin, q[:, 0], q[:, 1])


@dali_op("AutoContrast", operator="auto_aug.auto_contrast (fn.reductions.min/max + arithmetic)")
def _auto_contrast(data, _):
    return _a.auto_contrast.op(data, None)


@dali_op("Equalize", operator="fn.equalize")
def _equalize(data, _):
    """Per-channel histogram equalization, ``fn.equalize`` (OpenCV's formula)."""
    return fn.equalize(data)


@dali_op("Solarize", table="param", operator="x ^ 255 where x >= threshold (arithmetic)")
def _solarize(data, _, param):
    """Inverts pixels >= ``param`` (Invert is threshold 0): ``x ^ 255`` where ``x >= t``."""
    return data ^ ((data >= _like(param, data)) * np.uint8(255))


@dali_op("Invert", kind="Solarize", operator="x ^ 255 (the Solarize branch at threshold 0)")
def _invert(_) -> float:
    return 0.0  # the threshold inverting every pixel


def _posterize_mask(bits) -> float:
    """The uint8 mask keeping the top ``bits`` bits (as a float: the ``param`` table is float)."""
    return float(0xFF ^ ((1 << (8 - int(bits))) - 1))


@dali_op("Posterize", table="param", to_table=_posterize_mask, operator="auto_aug.posterize (x & mask)")
def _posterize(data, _, param):
    """Keeps the top bits: ``param`` is the uint8 mask (as float), DALI's ``posterize`` op."""
    return _a.posterize.op(data, _like(fn.cast(param, dtype=types.UINT8), data))


@dali_op("Contrast", table="param", operator="auto_aug.contrast (fn.reductions.mean + arithmetic)")
def _contrast(data, _, param):
    return _a.contrast.op(data, param)


@dali_op("Color", table="param", operator="fn.saturation (auto_aug.color)")
def _color(data, _, param):
    return _a.color.op(data, param)


@dali_op("Brightness", table="param", operator="fn.brightness (auto_aug.brightness)")
def _brightness(data, _, param):
    return _a.brightness.op(data, param)


_SHARP_BLUR = np.array([[1, 1, 1], [1, 5, 1], [1, 1, 1]], dtype=np.float64) / 13.0
_SHARP_IDENT = np.array([[0, 0, 0], [0, 1, 0], [0, 0, 0]], dtype=np.float64)


def _sharpness_kernel(factor: float) -> np.ndarray:
    m = factor - 1.0  # factor 1 + m: (1 + m) * identity - m * blur
    return (1.0 + m) * _SHARP_IDENT - m * _SHARP_BLUR


@dali_op(
    "Sharpness",
    table="kernel",
    to_table=_sharpness_kernel,
    operator="fn.filter (PIL's 3x3 smoothing kernel, per-sample)",
)
def _sharpness(data, _, kernel):
    """PIL's Sharpness as one 3x3 convolution (DALI auto_aug's kernel) with ``fn.filter``.
    Border pixels are filtered with reflect-101 padding (PIL / torchvision leave them as is)."""
    return fn.filter(data, _like(kernel, data))


def _cutout_arguments(images, size, height, width) -> dict:
    """Each image's shorter side and size, and the square's centre (a uniform [0, 1) pair)."""
    if size is not None:
        min_side, hw = float(min(size)), np.array(size, dtype=np.float32)
    else:
        min_side, hw = dmath.min(height, width), fn.stack(height, width)
    return {"min_side": min_side, "hw": hw, "cutout_center": fn.random.uniform(range=[0.0, 1.0], shape=[2])}


@dali_op(
    "Cutout",
    table="param",
    table_input="magnitude",
    sized=True,
    arguments=_cutout_arguments,
    operator="fn.erase (hand-written: random centre, fill 128)",
)
def _cutout(data, _, param, min_side, cutout_center, hw, fill_value=128):
    """Fills a square of side ``round(param * min_side)`` px centred on a random pixel
    (``cutout_center`` is a uniform [0, 1) pair), clipped at the border by ``fn.erase``."""
    side = dmath.floor(param * min_side + 0.5)
    anchor = dmath.floor(cutout_center * hw) - dmath.floor(side * 0.5)
    return fn.erase(
        data,
        anchor=anchor,
        shape=fn.stack(side, side),
        axis_names="HW",
        fill_value=fill_value,
    )


def _sample_pairing_arguments(images, size, height, width) -> dict:
    """Each image's partner: the batch as it entered the policy step, permuted without fixed points."""
    return {"paired": fn.permute_batch(images, indices=fn.batch_permutation(no_fixed_points=True))}


@dali_op(
    "SamplePairing",
    table="param",
    arguments=_sample_pairing_arguments,
    operator="hand-written: fn.permute_batch(fn.batch_permutation) + blend",
)
def _sample_pairing(data, _, param, paired):
    """``(1 - w) * image + w * paired``, rounded; ``paired`` is another image of the batch."""
    return fn.cast_like(data * (1.0 - param) + paired * param, data)


#: Branch kinds in registry order (Identity first): the order of a stage's selection.
_KIND_ORDER = tuple(dict.fromkeys(DALI_OPS[n].kind for n in _ops.OP_NAMES if n in DALI_OPS))
