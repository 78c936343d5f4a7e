"""Input-pipeline throughput on the real CIFAR-10 Parquet (no policy, no model).

(a) the project's DALI pipeline: decode the JPEG bytes with ``fn.decoders.image`` every epoch +
    pad-4 random crop + flip + normalize, batch 256, CPU (DALI threads = --threads);
(b) the equivalent torchvision ``DataLoader`` with --workers worker processes: decode
    (``torchvision.io.decode_jpeg``) + ``v2.RandomCrop(32, padding=4)`` + ``v2.RandomHorizontalFlip``
    + ``v2.Normalize``, batch 256.

Prints images/s of both (median over --repeats epochs after one warm-up epoch) and the ratio.

    python benchmarks/input_pipeline.py --data ../shared/data/cifar10-jpeg
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from types import SimpleNamespace

import numpy as np
import torch


def median_rate(loader, repeats: int) -> float:
    """Median images/s over ``repeats`` epochs of ``loader``, after one warm-up epoch."""
    rates = []
    for epoch in range(repeats + 1):
        t = time.perf_counter()
        n = sum(len(y) for _, y in loader)
        if epoch:
            rates.append(n / (time.perf_counter() - t))
    return statistics.median(rates)


def dali_rate(ds, indices, batch, threads, repeats, device):
    from autoaug.proxy_models.pipeline import DaliLoader

    standard = SimpleNamespace(sub_policies=(), base="standard")
    loader = DaliLoader(
        ds,
        indices,
        batch_size=batch,
        policy=standard,
        train=True,
        seed=0,
        decode="dali",
        image_size=32,
        num_threads=threads,
        device=device,
    )
    return median_rate(loader, repeats)


class _TorchvisionSet(torch.utils.data.Dataset):
    def __init__(self, ds, indices):
        from torchvision.transforms import v2

        self.ds, self.indices = ds, np.asarray(indices)
        self.tf = v2.Compose(
            [
                v2.RandomCrop(32, padding=4),
                v2.RandomHorizontalFlip(),
                v2.ToDtype(torch.float32, scale=False),
                v2.Normalize([125.31, 122.95, 113.87], [62.99, 62.09, 66.70]),
            ]
        )

    def __len__(self):
        return len(self.indices)

    def __getitem__(self, i):
        from torchvision.io import decode_jpeg

        row = int(self.indices[i])
        data = torch.frombuffer(bytearray(self.ds.encoded(row)), dtype=torch.uint8)
        return self.tf(decode_jpeg(data)), int(self.ds.labels[row])


def torchvision_rate(ds, indices, batch, workers, repeats):
    loader = torch.utils.data.DataLoader(
        _TorchvisionSet(ds, indices),
        batch_size=batch,
        shuffle=True,
        num_workers=workers,
        drop_last=True,
        persistent_workers=workers > 0,
    )
    return median_rate(loader, repeats)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default=os.environ.get("AUTOAUG_CIFAR10"), help="CIFAR-10 Parquet file/folder")
    parser.add_argument("--images", type=int, default=20_000, help="training images per epoch")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--threads", type=int, default=2, help="DALI CPU threads")
    parser.add_argument("--workers", type=int, default=2, help="torchvision DataLoader workers")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if not args.data:
        parser.error("--data (or AUTOAUG_CIFAR10) is required")

    from autoaug.proxy_models.data import open_dataset
    from autoaug.proxy_models.splits import reduced_split

    torch.set_num_threads(1)
    ds = open_dataset(args.data)
    indices = reduced_split(ds.labels, train_size=args.images, val_size=0, seed=0).train
    print(f"{len(indices)} CIFAR-10 JPEGs from {ds.source}, batch {args.batch}, {os.cpu_count()} CPUs")
    dali = dali_rate(ds, indices, args.batch, args.threads, args.repeats, "cpu")
    print(f"DALI (decode+crop+flip+normalize, CPU, {args.threads} threads): {dali:9.0f} images/s")
    tv = torchvision_rate(ds, indices, args.batch, args.workers, args.repeats)
    print(f"torchvision DataLoader ({args.workers} workers):                {tv:9.0f} images/s")
    print(f"ratio DALI / torchvision: {dali / tv:.2f}x")
    if torch.cuda.is_available():
        gpu = dali_rate(ds, indices, args.batch, args.threads, args.repeats, "gpu")
        print(f"DALI GPU (mixed decode): {gpu:9.0f} images/s")


if __name__ == "__main__":
    main()
