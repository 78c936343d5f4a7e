"""The search's stack for a lent GPU machine, as parts that travel with ``run``'s ``carry``.

The lent machine (benchmarks/results/gpu/README.md) has CPython 3.12, torch, torchvision, numpy,
pandas, pyarrow and Pillow, but not Ray, Optuna or DALI, and no network. This builds, here, what a
search needs there: Ray Tune, Optuna and DALI for CUDA 13 at the versions installed here, with
the packages they need that the machine's image lacks, for CPython 3.12 on x86-64, as one
``tar.xz`` cut into parts that each fit a call::

    python benchmarks/gpu_stack.py .gpu-stack          # .gpu-stack/stack.tar.xz.000, .001, ...

Each call carries one part (``carry: [".gpu-stack/stack.tar.xz.000"]``, and so on) while the
machine stays warm (it goes back after 30 s idle: send the parts in consecutive calls) and copies
it to /tmp/parts; the last joins and unpacks them (``--device-command`` prints the lines), and
every later call starts with ``export PYTHONPATH=/tmp/site``. A call carries the whole working tree too, so keep
``benchmarks/results`` (48 MB) from travelling: ``git sparse-checkout set --no-cone '/*'
'!/benchmarks/results/'`` before, ``git sparse-checkout disable`` after.

``--data DIR`` adds every ``--every``-th image of ``DIR``'s ``train.parquet`` and ``test.parquet``
(CIFAR-10's, sorted by class: every class kept, in its share) as ``OUT/data``, small enough to
travel beside the working tree in one call (every 5th image of CIFAR-10: 10,000 + 2,000 images,
4 MB), what ``benchmarks/gpu_check.py --data`` reads there.

What it leaves out: every distribution the image has (:data:`IMAGE_HAS`, from the device
library's KINDS.md: a second copy on the path would shadow the image's own, torch's numpy
among them), ``__pycache__`` folders, Ray's Java jars, DALI's extension modules for other
Pythons.
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

#: Distributions the lent machine's image holds (the device library's KINDS.md, "Python packages
#: already there"), by normalised name: left out of the stack.
IMAGE_HAS = frozenset(
    """absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch build
    certifi charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cuda-bindings cuda-core
    cuda-pathfinder cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils execnet filelock
    flatbuffers flax fonttools formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx
    huggingface-hub humanize hypothesis idna imageio iniconfig interface-meta jax jax-cuda13-pjrt
    jax-cuda13-plugin jaxlib jaxtyping jinja2 joblib kiwisolver lazy-loader lightning lightning-utilities
    linear-operator lineax llvmlite lxml markdown markdown-it-py markupsafe matplotlib mdurl meson ml-dtypes
    mpi4py mpmath msgpack multidict multipledispatch mypy-extensions nanobind narwhals networkx ninja numba
    numba-cuda numpy numpyro nvidia-cublas nvidia-cuda-cupti nvidia-cuda-nvrtc nvidia-cuda-runtime
    nvidia-cudnn-cu13 nvidia-cufft nvidia-cufile nvidia-curand nvidia-cusolver nvidia-cusparse
    nvidia-cusparselt-cu13 nvidia-ml-py nvidia-nccl-cu13 nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx onnx
    onnx-ir onnxruntime onnxscript opencv-python-headless optax opt-einsum opt-einsum-fx optimistix
    orbax-checkpoint packaging pandas pathspec patsy peft pillow pip pluggy portalocker prometheus-client
    propcache protobuf psutil pyarrow pybind11 py-cpuinfo pygments pyparsing pyproject-hooks pyre-extensions
    pytest pytest-benchmark pytest-cov pytest-mock pytest-timeout pytest-xdist python-dateutil
    pytorch-lightning pyyaml regex requests rich sacrebleu safetensors scikit-build-core scikit-image
    scikit-learn scipy seaborn sentencepiece sentence-transformers setuptools shellingham simplejson six
    sortedcontainers statsmodels sympy tabulate tensorboard tensorboard-data-server tensorstore threadpoolctl
    tifffile tiktoken timm tokenizers toolz torch torchaudio torchdiffeq torch-geometric torchmetrics
    torchvision tqdm transformers treescope triton typer typing-extensions typing-inspect urllib3 uvloop
    wadler-lindig werkzeug wheel wrapt xarray xxhash yarl zipp""".split()
)
#: The lent machine's Python and processor.
PYTHON, PLATFORMS = "3.12", ("manylinux2014_x86_64", "manylinux_2_17_x86_64", "manylinux_2_28_x86_64")
#: A part's size: a call carries at most 64 MiB, the working tree included.
PART_BYTES = 56 * 2**20


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirements() -> list[str]:
    """Ray Tune, Optuna and DALI for CUDA 13 at the versions this environment runs."""
    dali = next((md.version(d) for d in ("nvidia-dali-cuda120", "nvidia-dali-cuda130") if _has(d)), None)
    reqs = [f"ray[tune]=={md.version('ray')}", f"optuna=={md.version('optuna')}"]
    return reqs + ([f"nvidia-dali-cuda130=={dali}"] if dali else ["nvidia-dali-cuda130"])


def _has(dist: str) -> bool:
    try:
        md.version(dist)
    except md.PackageNotFoundError:
        return False
    return True


def prune(target: Path, image_has: frozenset[str] = IMAGE_HAS, python: str = PYTHON) -> list[str]:
    """Remove from ``target`` (a ``pip install --target`` tree) every distribution ``image_has``
    names (the files its RECORD lists, and its dist-info), ``__pycache__`` folders, Ray's jars and
    extension modules built for other Pythons than ``python``. Returns the distributions removed."""
    removed = []
    for info in sorted(target.glob("*.dist-info")):
        name = normalise(info.name.removesuffix(".dist-info").rsplit("-", 1)[0])
        if name not in image_has:
            continue
        record = info / "RECORD"
        for line in record.read_text().splitlines() if record.exists() else ():
            path = target / line.split(",", 1)[0]
            if path.is_file() and target in path.resolve().parents:
                path.unlink()
        shutil.rmtree(info, ignore_errors=True)
        removed.append(name)
    tag = "cpython-" + python.replace(".", "")
    for path in sorted(target.rglob("*"), key=lambda p: len(p.parts), reverse=True):
        if path.is_dir() and (path.name == "__pycache__" or (path.name == "jars" and path.parent.name == "ray")):
            shutil.rmtree(path, ignore_errors=True)
        elif path.is_file() and ".cpython-3" in path.name and tag not in path.name:
            path.unlink()
        elif path.is_dir() and not any(path.iterdir()):
            path.rmdir()  # (folders the removed distributions leave empty)
    return removed


def split(archive: Path, part_bytes: int = PART_BYTES) -> list[Path]:
    """``archive`` cut into ``archive.000``, ``.001``, ... of at most ``part_bytes`` each (removed)."""
    parts = []
    with archive.open("rb") as f:
        while chunk := f.read(part_bytes):
            part = archive.with_name(f"{archive.name}.{len(parts):03d}")
            part.write_bytes(chunk)
            parts.append(part)
    archive.unlink()
    return parts


def data_subset(src: Path, dst: Path, every: int) -> dict[str, int]:
    """Every ``every``-th row of ``src``'s ``train.parquet`` and ``test.parquet`` (those there)
    written to ``dst`` with their schema's metadata (the class names); the rows each kept."""
    import pyarrow.parquet as pq

    dst.mkdir(parents=True, exist_ok=True)
    kept = {}
    for name in ("train.parquet", "test.parquet"):
        if not (src / name).is_file():
            continue
        table = pq.read_table(src / name)
        table = table.take(list(range(0, table.num_rows, every)))
        pq.write_table(table, dst / name)
        kept[name] = table.num_rows
    return kept


def device_command(out: str) -> str:
    """The shell line the lent machine runs in each call that carries a part (it keeps the part in
    /tmp/parts) and, after the last, the line that joins and unpacks them."""
    return (
        f"mkdir -p /tmp/parts && cp {out}/stack.tar.xz.* /tmp/parts/   # each call that carries a part\n"
        "mkdir -p /tmp/site && cat /tmp/parts/stack.tar.xz.* | xz -d | tar -x -C /tmp/site"
        " && export PYTHONPATH=/tmp/site   # after the last"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", help="folder for the parts (git-ignored: .gpu-stack)")
    ap.add_argument("--device-command", action="store_true", help="print the lent machine's unpacking line only")
    ap.add_argument(
        "--data", default=None, help="a dataset folder (train.parquet, test.parquet) to subsample into OUT/data"
    )
    ap.add_argument("--every", type=int, default=5, help="--data: keep every N-th image (default 5)")
    ap.add_argument("--data-only", action="store_true", help="--data: the subset only, no stack")
    args = ap.parse_args(argv)
    if args.device_command:
        print(device_command(args.out))
        return 0
    if args.every < 1:
        ap.error(f"--every {args.every}: expected 1 or more")
    if args.data is not None and not (Path(args.data) / "train.parquet").is_file():
        ap.error(f"--data: no train.parquet in {args.data!r}")
    if args.data_only and args.data is None:
        ap.error("--data-only needs --data DIR")
    out = Path(args.out)
    if args.data is not None:
        kept = data_subset(Path(args.data), out / "data", args.every)
        print(
            f"data: every {args.every}th image of {args.data} in {out / 'data'}: "
            + ", ".join(f"{name} {rows:,}" for name, rows in kept.items())
        )
        if args.data_only:
            return 0
    if (out / "stack.tar.xz.000").exists():
        ap.error(f"{out}: holds the parts of an earlier build; give an empty or new folder")
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="autoaug-gpu-stack-") as tmp:
        target = Path(tmp) / "site"
        platforms = [arg for p in PLATFORMS for arg in ("--platform", p)]
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--target",
            str(target),
            "--no-compile",
            "--ignore-installed",
        ]
        cmd += ["--only-binary=:all:", "--python-version", PYTHON, "--implementation", "cp", *platforms]
        subprocess.run([*cmd, *requirements()], check=True)
        removed = prune(target)
        size = sum(p.stat().st_size for p in target.rglob("*") if p.is_file())
        print(f"stack: {size / 2**20:.0f} MiB for Python {PYTHON}; left out (the image has them): {', '.join(removed)}")
        archive = out / "stack.tar.xz"
        subprocess.run(
            f"tar -C {target} -cf - . | xz -6 -T0 > {archive}", shell=True, check=True, executable="/bin/bash"
        )
    parts = split(archive)
    print(f"{len(parts)} parts of at most {PART_BYTES // 2**20} MiB in {out}; on the machine:")
    print(device_command(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
