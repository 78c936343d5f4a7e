"""``autoaug policies preview``: a PNG grid of images of a dataset augmented by a policy
(:func:`autoaug.policies.preview.render_grid`), and the images it draws (:func:`preview_images`,
also the grids of ``autoaug report --html``)."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from autoaug.core.errors import UserInputError
from autoaug.core.extras import require
from autoaug.launch.policies_run import resolve_ref
from autoaug.proxy_models.data import DatasetError, open_dataset
from autoaug.proxy_models.memory import check_preview_memory

__all__ = ["preview_images", "cmd_preview"]


def preview_images(data: str, num_images: int, image_size: int | None, draws: int = 1):
    """``num_images`` images spread evenly over the dataset (rows are often sorted by class),
    refused in one line before decoding when they and their ``draws`` cannot fit in memory."""
    dataset = open_dataset(data)
    n = len(dataset)
    if n == 0:
        raise UserInputError(f"dataset {data!r} has no images")
    if image_size is not None and image_size < 1:
        raise UserInputError(f"--image-size must be >= 1, got {image_size}")
    indices = np.unique(np.linspace(0, n - 1, min(num_images, n)).round().astype(np.int64))
    size = image_size
    if size is None:
        try:
            size = dataset.own_image_size()
        except DatasetError:  # images of several sizes: the decode below says so
            size = None
    if size is not None:
        check_preview_memory(len(indices), draws, size)
    images, _ = dataset.images(indices, size=image_size)
    return images


def cmd_preview(args: argparse.Namespace) -> int:
    """``autoaug policies preview``."""
    if args.num_images < 1:
        raise UserInputError(f"--num-images must be >= 1, got {args.num_images}")
    if args.columns < 1:
        raise UserInputError(f"--columns must be >= 1, got {args.columns}")
    if args.backend == "dali":
        require(
            ("nvidia.dali",), "autoaug policies preview --backend dali", alternative="or pass --backend torchvision"
        )
    policy, _, label = resolve_ref(args.ref, args)
    images = preview_images(args.data, args.num_images, args.image_size, args.columns)
    try:  # Pillow, which only the grid needs: without it, one line instead of a traceback
        from autoaug.policies.preview import render_grid
    except ImportError as exc:
        raise UserInputError(f"preview is not available: {exc}") from None
    path = render_grid(
        policy,
        images,
        Path(args.out).expanduser(),
        columns=args.columns,
        seed=args.seed,
        backend=args.backend,
        base=args.with_base,
    )
    drawn = f", base {policy.base} drawn first" if args.with_base else ""
    print(f"wrote {path}: {len(images)} images x {args.columns} draws of {label} ({args.backend}{drawn})")
    return 0
