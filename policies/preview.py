"""Preview a policy as a PNG grid of augmented images.

Each row is one input image: the original in the first column, then ``columns`` independent draws
of the policy. Every cell is labelled with the sub-policy drawn (``#k``) and the operations that
fired (``-`` marks a negated magnitude; ``(none)`` when no operation fired). The header names the
policy's base; with ``base=True`` the base (:mod:`autoaug.policies.bases`: crop, crop + flip) is
drawn before the policy, as in training, otherwise the cells show the policy step alone.

>>> render_grid(presets.resolve("autoaugment-cifar10"), images, "preview.png")  # doctest: +SKIP
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from autoaug.policies.policy import Policy

__all__ = ["render_grid", "augment_with_labels"]

_BACKENDS = ("dali", "torchvision")


def _check_images(images) -> np.ndarray:
    arr = np.asarray(images)
    if arr.ndim == 3:
        arr = arr[None]
    if arr.ndim != 4 or arr.shape[-1] != 3 or arr.dtype != np.uint8 or len(arr) == 0:
        raise ValueError(
            f"images must be uint8 RGB in NHWC (or one HWC image), got dtype {arr.dtype} and shape {arr.shape}"
        )
    return np.ascontiguousarray(arr)


def _augment_dali(policy: Policy, images: np.ndarray, columns: int, seed: int, base: bool):
    from nvidia.dali import fn, pipeline_def

    from autoaug.policies.dali_apply import apply_base, apply_policy, decode_trace

    batch = np.repeat(images, columns, axis=0)  # row-major: image r, draws 0..columns-1

    @pipeline_def(batch_size=len(batch), num_threads=1, device_id=None, seed=seed, enable_conditionals=True)
    def pipe():
        x = fn.external_source(source=lambda: list(batch), batch=True, layout="HWC")
        if base:
            x = apply_base(policy.base, x, image_size=images.shape[1:3])
        return apply_policy(policy, x, return_trace=True)

    p = pipe()
    p.build()
    out, trace = p.run()
    augmented = [np.asarray(out[i]) for i in range(len(batch))]
    labels = decode_trace(policy, np.stack([np.asarray(trace[i]) for i in range(len(batch))]))
    return augmented, labels


def _augment_torchvision(policy: Policy, images: np.ndarray, columns: int, seed: int, base: bool):
    import torch
    from torchvision.transforms import v2

    from autoaug.policies.torch_apply import PolicyTransform, base_transforms

    transform = PolicyTransform(policy)
    steps = base_transforms(policy.base) if base else []
    before = v2.Compose(steps) if steps else (lambda x: x)
    augmented, labels = [], []
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        for img in images:
            chw = torch.from_numpy(img).permute(2, 0, 1).contiguous()
            for _ in range(columns):
                out = transform(before(chw))
                augmented.append(out.permute(1, 2, 0).numpy())
                labels.append(transform.last_applied[0])
    return augmented, labels


def augment_with_labels(
    policy: Policy, images, *, columns: int = 8, seed: int = 0, backend: str = "dali", base: bool = False
) -> tuple[list[np.ndarray], list[tuple[int, list[str]]]]:
    """``columns`` independent draws of ``policy`` per image (row-major) and, for each, the
    sub-policy index and fired operations. ``base=True``: the policy's base first, as in training."""
    if not isinstance(policy, Policy):
        raise ValueError(f"policy must be a policies.Policy, got {type(policy).__name__}")
    if backend not in _BACKENDS:
        raise ValueError(f"backend={backend!r}; expected one of {list(_BACKENDS)}")
    if isinstance(columns, bool) or not isinstance(columns, int) or columns < 1:
        raise ValueError(f"columns={columns!r}; expected an int >= 1")
    if base not in (True, False):
        raise ValueError(f"base={base!r}; expected True or False")
    arr = _check_images(images)
    if backend == "dali":
        return _augment_dali(policy, arr, columns, seed, base)
    return _augment_torchvision(policy, arr, columns, seed, base)


def _label(info: tuple[int, list[str]]) -> str:
    k, fired = info
    if k < 0:
        return "identity"
    return f"#{k}: " + (", ".join(fired) if fired else "(none)")


def render_grid(
    policy: Policy,
    images: Sequence[np.ndarray] | np.ndarray,
    out_path: str | Path,
    *,
    columns: int = 8,
    seed: int = 0,
    backend: str = "dali",
    scale: int | None = None,
    base: bool = False,
) -> Path:
    """Write a PNG grid: one row per image (original first), ``columns`` independent draws.

    Args:
        policy: the policy to preview.
        images: uint8 RGB images, NHWC array or a sequence of HWC arrays of one size.
        out_path: PNG file to write (parent folders are created).
        columns: draws per image.
        seed: DALI pipeline seed or torch seed (same seed, same grid).
        backend: ``"dali"`` (CPU pipeline) or ``"torchvision"``.
        scale: integer upscaling of each cell (nearest); default makes cells >= 96 px.
        base: draw the policy's base (crop, crop + flip) before the policy, as in training;
            default False: the policy step alone (the header says which).

    Returns:
        the path written.
    """
    arr = _check_images(images)
    augmented, labels = augment_with_labels(policy, arr, columns=columns, seed=seed, backend=backend, base=base)
    h, w = arr.shape[1:3]
    if scale is None:
        scale = max(1, -(-96 // min(h, w)))
    cw, ch = w * scale, h * scale
    font = ImageFont.load_default(size=10) if _supports_size() else ImageFont.load_default()
    chars = max(8, cw // 6)
    line_h = 12
    text_lines = 3
    pad = 4
    cell_w, cell_h = cw + 2 * pad, ch + pad + text_lines * line_h + pad
    header_h = 2 * line_h + 2 * pad
    grid = Image.new("RGB", ((columns + 1) * cell_w, header_h + len(arr) * cell_h), "white")
    draw = ImageDraw.Draw(grid)
    draw.text(
        (pad, pad),
        f"{policy.name}  ({len(policy)} sub-policies, base {policy.base}, hash "
        f"{policy.content_hash[:12]}, backend {backend}, seed {seed})",
        fill="black",
        font=font,
    )
    shown = f"base {policy.base} drawn first" if base else f"base {policy.base} not drawn"
    draw.text(
        (pad, pad + line_h),
        f"#k = sub-policy drawn; ops listed fired ('-' = negated magnitude); {shown}",
        fill="dimgray",
        font=font,
    )
    for r in range(len(arr)):
        y0 = header_h + r * cell_h
        cells = [(arr[r], "original")] + [
            (augmented[r * columns + c], _label(labels[r * columns + c])) for c in range(columns)
        ]
        for c, (img, label) in enumerate(cells):
            x0 = c * cell_w
            tile = Image.fromarray(np.asarray(img, dtype=np.uint8)).resize((cw, ch), Image.NEAREST)
            grid.paste(tile, (x0 + pad, y0 + pad))
            lines = textwrap.wrap(label, width=chars)[:text_lines]
            for i, line in enumerate(lines):
                draw.text((x0 + pad, y0 + pad + ch + 2 + i * line_h), line, fill="black" if c else "dimgray", font=font)
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    grid.save(out, format="PNG")
    return out


def _supports_size() -> bool:
    import inspect

    try:
        return "size" in inspect.signature(ImageFont.load_default).parameters
    except (TypeError, ValueError):
        return False
