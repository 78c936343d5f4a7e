"""The DALI side of the declared operations (:data:`autoaug.policies.ops.REGISTRY`): the branch
functions the built-in declarations name (``OpSpec.dali``, a :class:`~autoaug.policies.ops.DaliImpl`),
the branches several operations share (:func:`dali_branch`: ``Warp``), and the tables the policy
steps of :mod:`autoaug.policies.dali_apply` read, derived from the declarations when read:
:data:`DALI_OPS` (name -> :class:`DaliOp`), :data:`DALI_BRANCHES` (kind -> :class:`DaliBranch`)
and :func:`kind_order` (the order of a stage's branches). Nothing is registered here at import but
the shared branches; an operation declared later is in these tables at once.

The branches are ``@augmentation`` objects (``nvidia.dali.auto_aug``), declared without a magnitude
range because their parameters arrive pre-computed as named arguments, and not converted by DALI's
AutoGraph (``@do_not_convert``: a branch has no condition on a DataNode).
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from nvidia.dali import fn, types
from nvidia.dali import math as dmath
from nvidia.dali.auto_aug import augmentations as _a
from nvidia.dali.auto_aug.core import augmentation
from nvidia.dali.pipeline import do_not_convert

from autoaug.policies import ops as _ops

if TYPE_CHECKING:  # DALI's private class of @augmentation objects (pyproject.toml bounds DALI's version)
    from nvidia.dali.auto_aug.core import _Augmentation

__all__ = ["DALI_OPS", "DALI_BRANCHES", "DaliOp", "DaliBranch", "dali_branch", "kind_order", "TABLES"]

# --------------------------------------------------------------------------- the tables
#: The per-sample tables a branch may read, by the name of its argument (all computed before branching).
TABLES = _ops.DALI_TABLES


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
    """How DALI applies one declared operation (derived from its ``OpSpec.dali``).

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


#: Kind -> :class:`DaliBranch` of the branches several operations share (:func:`dali_branch`).
_SHARED: dict[str, DaliBranch] = {}
#: Op name -> (the OpSpec it was built from, its DaliOp): each declaration is turned into DALI
#: objects once (a branch is the same object at every read); rebuilt when the name is declared anew.
_BUILT: dict[str, tuple[_ops.OpSpec, DaliOp]] = {}


def _make_branch(kind: str, function, table: str | None, sized: bool, arguments) -> DaliBranch:
    if table not in (None, *TABLES):
        raise ValueError(f"dali_branch {kind!r}: table={table!r}; expected None or one of {list(TABLES)}")
    if table is not None and table not in inspect.signature(function).parameters:
        raise ValueError(f"dali_branch {kind!r}: {function.__name__} takes no {table!r} argument, its table")
    # Not converted by AutoGraph: a branch has no condition on a DataNode, and converting each
    # one cost every process that builds a policy pipeline about 0.1 s (see _select).
    params = list(inspect.signature(function).parameters.values())[2:]
    accepts = tuple(q.name for q in params if q.kind in (q.POSITIONAL_OR_KEYWORD, q.KEYWORD_ONLY))
    return DaliBranch(kind, augmentation(do_not_convert(function)), table, sized, arguments, accepts)


def dali_branch(kind: str, *, table: str | None = None, sized: bool = False, arguments=None):
    """Declare the function below (``fn(data, _, **arguments)``) as the branch ``kind`` that several
    operations may join (``DaliImpl(kind=...)``); it is replaced by its :class:`DaliBranch`. See
    :class:`DaliBranch` for the arguments."""

    def register(function) -> DaliBranch:
        if kind in _SHARED or kind in _ops.REGISTRY:
            raise ValueError(f"dali_branch: kind {kind!r} is declared twice")
        branch = _make_branch(kind, function, table, sized, arguments)
        _SHARED[kind] = branch
        return branch

    return register


def _scalar(value) -> float:
    return 0.0 if value is None else float(value)


def _dali_op(name: str) -> DaliOp:
    """The :class:`DaliOp` of the declared op ``name`` (``KeyError`` when none is declared)."""
    spec = _ops.REGISTRY[name]
    built = _BUILT.get(name)
    if built is not None and built[0] is spec:
        return built[1]
    impl, namespace = spec.dali, globals()
    to_table = _ops.resolve(impl.to_table, namespace, name, "dali.to_table") or _scalar
    if impl.kind is None:
        function = _ops.resolve(impl.branch, namespace, name, "dali.branch")
        arguments = _ops.resolve(impl.arguments, namespace, name, "dali.arguments")
        if name in _SHARED:
            raise ValueError(f"op {name!r}: its own DALI branch takes the name of a shared branch; rename the op")
        branch = _make_branch(name, function, impl.table, impl.sized, arguments)
    else:
        branch = _SHARED.get(impl.kind)
        if branch is None:
            owner = _ops.REGISTRY.get(impl.kind)
            if owner is None or owner.dali.kind is not None:
                kinds = sorted({*_SHARED, *(n for n, s in _ops.REGISTRY.items() if s.dali.kind is None)})
                raise ValueError(f"op {name!r}: dali.kind={impl.kind!r} is no branch; expected one of {kinds}")
            branch = _dali_op(impl.kind).branch
    op = DaliOp(name, branch, to_table, impl.table_input, impl.operator)
    _BUILT[name] = (spec, op)
    return op


def _branch(kind: str) -> DaliBranch:
    if kind in _SHARED:
        return _SHARED[kind]
    spec = _ops.REGISTRY[kind]
    if spec.dali.kind is not None:
        raise KeyError(kind)
    return _dali_op(kind).branch


def _branch_kinds() -> tuple[str, ...]:
    return (*_SHARED, *(n for n, s in _ops.REGISTRY.items() if s.dali.kind is None))


#: Declared op name -> :class:`DaliOp`, derived from the declarations when read.
DALI_OPS: Mapping[str, DaliOp] = _ops.LiveTable("DALI_OPS", _ops.op_names, _dali_op)
#: Kind -> :class:`DaliBranch`: the shared branches and the declared ops' own, when read.
DALI_BRANCHES: Mapping[str, DaliBranch] = _ops.LiveTable("DALI_BRANCHES", _branch_kinds, _branch)


def kind_order() -> tuple[str, ...]:
    """Branch kinds in declaration order (Identity first): the order of a stage's selection."""
    return tuple(dict.fromkeys(_dali_op(n).kind for n in _ops.op_names()))


# --------------------------------------------------------------------------- operations
# The functions the built-in declarations of autoaug.policies.ops name (``DaliImpl(branch=...,
# to_table=..., arguments=...)``), and the shared Warp branch. Each branch takes the (partial)
# batch and named per-sample arguments computed before branching: its table (``param`` float scalar, ``matrix`` 2x3, ``kernel`` 3x3), ``paired``, ``cutout_center``,
# ``min_side``, ``hw``, plus the constants ``fill_value`` / ``interp_type``.


def _like(node, data):
    """``node`` on the device of ``data`` (DALI auto_aug's ``param_device="auto"``)."""
    return node.gpu() if data.device == "gpu" else node


def identity(data, _):
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
def shear_x_matrix(m: float) -> np.ndarray:
    return _terms(np.array([[1.0, -m], [0.0, 1.0]]))


def shear_y_matrix(m: float) -> np.ndarray:
    return _terms(np.array([[1.0, 0.0], [-m, 1.0]]))


# Translation moves the content by +param * size (param a fraction of the size).
def translate_x_matrix(m: float) -> np.ndarray:
    return _terms(per_width=(m, 0.0))


def translate_y_matrix(m: float) -> np.ndarray:
    return _terms(per_height=(0.0, m))


def rotate_matrix(degrees: float) -> np.ndarray:
    # y points down, so a counter-clockwise turn on screen is (x, y) -> R(-a) (x, y)
    a = math.radians(degrees)
    lin = np.array([[math.cos(a), math.sin(a)], [-math.sin(a), math.cos(a)]])
    # about the centre c = (W/2, H/2): offset (I - L) c
    q = (np.eye(2) - lin) / 2.0
    return _terms(lin, q[:, 0], q[:, 1])


def auto_contrast(data, _):
    return _a.auto_contrast.op(data, None)


def equalize(data, _):
    """Per-channel histogram equalization, ``fn.equalize`` (OpenCV's formula)."""
    return fn.equalize(data)


def solarize(data, _, param):
    """Inverts pixels >= ``param`` (Invert is threshold 0): ``x ^ 255`` where ``x >= t``."""
    return data ^ ((data >= _like(param, data)) * np.uint8(255))


def invert_threshold(_) -> float:
    return 0.0  # the threshold inverting every pixel


def posterize_mask(bits) -> float:
    """The uint8 mask keeping the top ``bits`` bits (as a float: the ``param`` table is float)."""
    return float(0xFF ^ ((1 << (8 - int(bits))) - 1))


def posterize(data, _, param):
    """Keeps the top bits: ``param`` is the uint8 mask (as float), DALI's ``posterize`` op."""
    return _a.posterize.op(data, _like(fn.cast(param, dtype=types.UINT8), data))


def contrast(data, _, param):
    return _a.contrast.op(data, param)


def color(data, _, param):
    return _a.color.op(data, param)


def brightness(data, _, param):
    return _a.brightness.op(data, param)


_SHARP_BLUR = np.array([[1, 1, 1], [1, 5, 1], [1, 1, 1]], dtype=np.float64) / 13.0
_SHARP_IDENT = np.array([[0, 0, 0], [0, 1, 0], [0, 0, 0]], dtype=np.float64)


def sharpness_kernel(factor: float) -> np.ndarray:
    m = factor - 1.0  # factor 1 + m: (1 + m) * identity - m * blur
    return (1.0 + m) * _SHARP_IDENT - m * _SHARP_BLUR


def sharpness(data, _, kernel):
    """PIL's Sharpness as one 3x3 convolution (DALI auto_aug's kernel) with ``fn.filter``.
    Border pixels are filtered with reflect-101 padding (PIL / torchvision leave them as is)."""
    return fn.filter(data, _like(kernel, data))


def cutout_arguments(images, size, height, width) -> dict:
    """Each image's shorter side and size, and the square's centre (a uniform [0, 1) pair)."""
    if size is not None:
        min_side, hw = float(min(size)), np.array(size, dtype=np.float32)
    else:
        min_side, hw = dmath.min(height, width), fn.stack(height, width)
    return {"min_side": min_side, "hw": hw, "cutout_center": fn.random.uniform(range=[0.0, 1.0], shape=[2])}


def cutout(data, _, param, min_side, cutout_center, hw, fill_value=128):
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


def sample_pairing_arguments(images, size, height, width) -> dict:
    """Each image's partner: the batch as it entered the policy step, permuted without fixed points."""
    return {"paired": fn.permute_batch(images, indices=fn.batch_permutation(no_fixed_points=True))}


def sample_pairing(data, _, param, paired):
    """``(1 - w) * image + w * paired``, rounded; ``paired`` is another image of the batch."""
    return fn.cast_like(data * (1.0 - param) + paired * param, data)
