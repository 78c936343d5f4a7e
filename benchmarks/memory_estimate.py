"""The memory estimate of a training run (:func:`autoaug.proxy_models.memory.estimate_run_memory`)
against the peak resident memory a real run reaches.

For each ``--sizes`` image size, one child process trains ResNet-8 for one epoch on the CPU
(``--train`` training and ``--val`` validation images of the real CIFAR-10 training set, batch
``--batch``, ``autoaugment-cifar10``, one thread) and reports its peak RSS
(``resource.getrusage(RUSAGE_SELF).ru_maxrss``); the table puts it next to the estimate::

    python benchmarks/memory_estimate.py --data /work/shared/data/cifar10-jpeg --sizes 32 64 128
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

CHILD = r"""
import json, resource, sys
from autoaug.proxy_models.train import TrainConfig, train
config = TrainConfig(**json.loads(sys.argv[1]))
train(config, "autoaugment-cifar10")
print(json.dumps({"peak": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="folder holding CIFAR-10's train.parquet")
    parser.add_argument("--sizes", type=int, nargs="+", default=[32, 64, 128])
    parser.add_argument("--train", type=int, default=512)
    parser.add_argument("--val", type=int, default=256)
    parser.add_argument("--batch", type=int, default=64)
    args = parser.parse_args()

    from autoaug.proxy_models.memory import estimate_run_memory, format_bytes
    from autoaug.proxy_models.train import TrainConfig, eval_batch_size

    print(f"{'size':>6} {'estimate':>10} {'(data':>10} {'pipeline':>10} {'model)':>10} {'peak RSS':>10} {'ratio':>6}")
    for size in args.sizes:
        fields = dict(
            model="resnet-8",
            data=str(args.data / "train.parquet"),
            train_size=args.train,
            val_size=args.val,
            epochs=1,
            batch_size=args.batch,
            image_size=size,
            device="cpu",
            num_threads=1,
        )
        config = TrainConfig(**fields)
        est = estimate_run_memory(
            config,
            num_classes=10,
            train_images=args.train,
            val_images=args.val,
            eval_batch_size=eval_batch_size(config),
        )
        out = subprocess.run(
            [sys.executable, "-c", CHILD, json.dumps(fields)], capture_output=True, text=True, check=True
        )
        peak = json.loads(out.stdout.strip().splitlines()[-1])["peak"]
        print(
            f"{size:>6} {format_bytes(est.total):>10} {format_bytes(est.data):>10} {format_bytes(est.pipeline):>10} "
            f"{format_bytes(est.model):>10} {format_bytes(peak):>10} {est.total / peak:>6.2f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
