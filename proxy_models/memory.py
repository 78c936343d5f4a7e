"""Memory before work: what one training run will hold at its peak, estimated before anything is
decoded or allocated, and a one-line refusal when it cannot fit (without it, ``--image-size 100000``
on 200 images grows until the kernel kills the run, and a ``compare``'s workers with it).

:func:`estimate_run_memory` is a pure function of the resolved :class:`TrainConfig`, the split's
sizes and the number of classes; :func:`check_memory` compares it with what the machine has
(:func:`available_memory`) and raises :class:`~autoaug.core.errors.UserInputError`. The preflight
of ``train``, ``search`` (per trial x trials at once; in packs, per pack x pack servers and
the trials' processes waiting on them) and ``compare`` (per run x runs at once, or per pack x
packs at once)
and the trainer itself (:func:`autoaug.proxy_models.train.train`, before its loaders are built)
call :func:`check_memory`.

The estimate, for ``S`` = image size, ``px = S * S``, ``B`` = batch size, ``E`` = evaluation batch
size, ``n`` = images of a set (training, validation, test):

``process``
    the interpreter with torch and DALI loaded and a pipeline built: :data:`PROCESS_BYTES`.
``data``
    the decoded sets a loader keeps in memory (``DaliLoader(decode="auto")`` keeps a set whose
    ``n * px * 3`` bytes fit :data:`~autoaug.proxy_models.pipeline.MEMORY_DECODE_LIMIT_BYTES`,
    else DALI decodes batch by batch): their sum, plus the largest once more (``ImageDataset.images``
    stacks a list of decoded images into one array: both exist for a moment), plus one image
    being decoded by PIL (:data:`DECODE_BYTES_PER_PIXEL` per pixel: PIL's 4-byte RGB, the
    resized copy, the uint8 array).
``pipeline``
    the DALI batches in flight, per loader (training with ``B``, validation and test with ``E``):
    ``batch * px * (depth * stages + 2 * 12)`` where ``depth`` is the prefetch queue depth
    (:data:`~autoaug.proxy_models.pipeline.PREFETCH_QUEUE_DEPTH`, every operator's output buffer
    is kept once per queued iteration), ``stages`` the bytes per pixel of one image through the
    graph of :meth:`DaliLoader._build` (:func:`pipeline_bytes_per_pixel`: 3 per uint8 operator
    output -- the source, the base's pad/crop/flip, two per policy operation (the branch and the
    merge of the conditional selection), the decoder's resize and crop when DALI decodes -- and
    12 for the float32 CHW output of ``crop_mirror_normalize``), and ``2 * 12`` the torch copies
    of the float32 batch (the one being trained on and the next).
``model``
    weights, gradients and SGD momentum (``3 * 4`` bytes per parameter, twice for the state dict
    a checkpoint serializes), the activations autograd saves for one training batch (measured
    with ``saved_tensors_hooks`` on one :data:`REFERENCE_SIZE` image on the CPU, scaled by
    ``px / REFERENCE_SIZE**2`` and ``B``, times :data:`BACKWARD_FACTOR` for the gradients of the
    activations during the backward pass) or those of an evaluation batch under
    ``inference_mode`` (``E`` times the three largest activations of one image, the ones alive at
    once), whichever is larger. Not counted on CUDA, where they live in the GPU's memory.

Measured against this estimate (peak RSS, ``resource.getrusage(...).ru_maxrss``, of a process
training ResNet-8 for one epoch on the CPU: 512 training and 256 validation images of CIFAR-10,
batch 64, ``autoaugment-cifar10``, one thread; ``benchmarks/memory_estimate.py``)::

    image size   estimate (data / pipeline / model)   measured peak RSS   estimate / measured
        32        1.4 GB  (4 MB / 21 MB / 81 MB)           1.3 GB              1.08
        64        1.7 GB  (16 MB / 83 MB / 318 MB)         1.8 GB              0.98
       128        3.0 GB  (63 MB / 333 MB / 1.3 GB)        2.5 GB              1.17
       256        8.0 GB  (252 MB / 1.3 GB / 5.1 GB)       6.1 GB              1.30

(the process part, 1.3 GB, is the rest of each estimate). The peak of a run at a given size varies
by about 15% between measurements (2.5 to 2.9 GB at 128): the allocator's reuse of freed blocks.
Where the pixels dominate, the estimate is 1.2-1.3x the peak; training and evaluation are counted
as one pass at a time (their sum was 1.8x the peak at 256).
"""

from __future__ import annotations

import dataclasses
import functools
import resource
from typing import Any

from autoaug.core.errors import UserInputError
from autoaug.proxy_models.pipeline import MEMORY_DECODE_LIMIT_BYTES, PREFETCH_QUEUE_DEPTH

__all__ = [
    "MemoryEstimate",
    "estimate_run_memory",
    "available_memory",
    "check_memory",
    "format_bytes",
    "pipeline_bytes_per_pixel",
]

#: Resident memory of a training process besides its decoded images, batches and model: Python,
#: torch, DALI, pyarrow, the dataset opened, the pipelines built (measured: 0.58 GB once torch and
#: DALI are imported, 1.05 GB with CIFAR-10's 48 MB Parquet opened and split, 1.26 GB at the peak
#: of a 32x32 run whose images, batches and activations take about 0.1 GB).
PROCESS_BYTES = 1300 * 10**6
#: Memory of a search trial's process whose training a pack server does (it only waits on the
#: server and reports: Ray, Ray Tune and torch imported): what each one more takes, its
#: proportional set size (the libraries' pages it shares with the others counted once among them).
#: Measured (2026-11-30) on the 8 trial actors of ``autoaug search --method pba --preset smoke
#: --pack 2 --set pba.population=8`` on CIFAR-10: at most 425 MB proportional, 378 MB private,
#: 675 MB resident (``benchmarks/results/pack-memory``). Its pack server of 8 members peaked at
#: 1.84 GB resident, where :func:`check_memory` counts 1.86 GB (each member its pipeline and model).
WAITING_PROCESS_BYTES = 450 * 10**6
#: One image decoded and resized by PIL: its RGB image (4 bytes per pixel), the resized copy and
#: the uint8 array handed on.
DECODE_BYTES_PER_PIXEL = 11
#: Side of the image the model's activations are measured on (then scaled by the pixels).
REFERENCE_SIZE = 16
#: The backward pass holds the gradients of the activations it walks through next to the saved ones.
BACKWARD_FACTOR = 2.0
#: Bytes of one float32 pixel of 3 channels (the normalized batch DALI hands over, its torch copy).
_FLOAT_PIXEL = 3 * 4
_UINT8_PIXEL = 3


@dataclasses.dataclass(frozen=True)
class MemoryEstimate:
    """Bytes one training run holds at its peak, by part (see the module's documentation)."""

    process: int
    data: int
    pipeline: int
    model: int

    @property
    def total(self) -> int:
        return self.process + self.data + self.pipeline + self.model


def format_bytes(n: float) -> str:
    """``"1.2 TB"``, ``"21.3 GB"``, ``"512 MB"`` (decimal units)."""
    for unit, scale in (("PB", 1e15), ("TB", 1e12), ("GB", 1e9)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n / 1e6:.0f} MB"


def pipeline_bytes_per_pixel(*, train: bool, policy_stages: int = 2, dali_decode: bool = False) -> int:
    """Bytes per pixel of one image through one iteration of the DALI graph (the operator outputs
    of :meth:`autoaug.proxy_models.pipeline.DaliLoader._build`): the uint8 source; when DALI
    decodes, the decoded image, its resize and its crop; when training, the base's pad, crop and
    flip (the pad a little larger than the image: counted as two) and two outputs per policy stage
    (the selected branch and the merged batch); the float32 CHW normalized output."""
    uint8_outputs = 1 + (3 if dali_decode else 0)
    if train:
        uint8_outputs += 4 + 2 * policy_stages
    return uint8_outputs * _UINT8_PIXEL + _FLOAT_PIXEL


@functools.lru_cache(maxsize=16)
def _activation_bytes(model: str, num_classes: int) -> tuple[int, int, int]:
    """``(parameters, bytes autograd saves for one REFERENCE_SIZE image, the three largest
    activations of that image)`` of ``model``: one forward pass on the CPU (milliseconds for
    ResNet-8, about a second for WRN-28-10)."""
    import torch

    from autoaug.proxy_models.models import build_model

    with torch.random.fork_rng(devices=[]):
        net = build_model(model, num_classes=num_classes)
    params = sum(p.numel() for p in net.parameters())
    param_ptrs = {p.untyped_storage().data_ptr() for p in net.parameters()}
    saved: dict[int, int] = {}
    keep: list[Any] = []

    def pack(t: Any) -> Any:
        ptr = t.untyped_storage().data_ptr()
        if ptr not in param_ptrs:
            saved[ptr] = max(saved.get(ptr, 0), t.untyped_storage().nbytes())
        keep.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        net(torch.zeros(1, 3, REFERENCE_SIZE, REFERENCE_SIZE))
    largest = sum(sorted(saved.values(), reverse=True)[:3])
    return params, sum(saved.values()), largest


def estimate_run_memory(
    config: Any,
    *,
    num_classes: int,
    train_images: int,
    val_images: int = 0,
    test_images: int = 0,
    eval_batch_size: int | None = None,
    cuda: bool = False,
) -> MemoryEstimate:
    """The peak memory of one training run of ``config`` (a resolved
    :class:`~autoaug.proxy_models.train_config.TrainConfig`: ``image_size`` a number) on
    ``train_images`` / ``val_images`` / ``test_images`` images of ``num_classes`` classes, by part;
    ``eval_batch_size``: the evaluation loaders' batch
    (:func:`autoaug.proxy_models.train_config.eval_batch_size`; ``None``: the training batch);
    ``cuda``: the model lives on a GPU (its part is not host memory). The formula is the module's
    documentation; it errs on the high side, never far below what a run holds."""
    if config.image_size is None:
        raise ValueError("estimate_run_memory needs a resolved config (image_size a number)")
    px = int(config.image_size) ** 2
    batch, eval_batch = int(config.batch_size), int(eval_batch_size or config.batch_size)
    sets = [(n, train) for n, train in ((train_images, True), (val_images, False), (test_images, False)) if n]
    held = [n * px * _UINT8_PIXEL for n, _ in sets]
    in_memory = [b for b in held if b <= MEMORY_DECODE_LIMIT_BYTES]
    data = sum(in_memory) + max(in_memory, default=0) + DECODE_BYTES_PER_PIXEL * px
    pipeline = 0
    for (n, train), b in zip(sets, held):
        per_pixel = pipeline_bytes_per_pixel(train=train, dali_decode=b > MEMORY_DECODE_LIMIT_BYTES)
        size = min(batch if train else eval_batch, n)
        pipeline += size * px * (PREFETCH_QUEUE_DEPTH * per_pixel + 2 * _FLOAT_PIXEL)
    model = 0
    if not cuda:
        params, saved, largest = _activation_bytes(config.model, int(num_classes))
        scale = px / REFERENCE_SIZE**2
        training = BACKWARD_FACTOR * saved * scale * batch
        evaluation = largest * scale * min(eval_batch, max(val_images, test_images))
        model = 2 * 3 * 4 * params + int(max(training, evaluation))  # one pass at a time
    return MemoryEstimate(PROCESS_BYTES, int(data), int(pipeline), int(model))


# ----------------------------------------------------------------------------------------------
# What the machine has


def _meminfo_available() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _address_space_left() -> int | None:
    """Bytes this process may still map under ``ulimit -v`` (``RLIMIT_AS`` minus its current
    virtual size); ``None`` without a limit."""
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        return None
    size = 0
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    size = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError, IndexError):
        pass
    return max(0, soft - size)


def available_memory() -> tuple[int | None, int | None]:
    """``(bytes the machine can still give, bytes this process may still map under ulimit -v)``:
    ``MemAvailable`` of ``/proc/meminfo`` (``None`` where there is none) and ``RLIMIT_AS`` minus
    this process's virtual size (``None`` without a limit). A worker process inherits the limit,
    so the second bounds one run, the first all the runs at once."""
    return _meminfo_available(), _address_space_left()


def _on_cuda(config: Any) -> bool:
    device = str(config.device)
    if device == "auto":
        import torch

        return torch.cuda.is_available()
    return device.startswith("cuda") or device == "gpu"


def _shortfall(process: int, total: int) -> str | None:
    """What is short when one process needs ``process`` bytes and the machine ``total``: the
    address space ``ulimit -v`` leaves, or ``MemAvailable``; None when both fit."""
    machine, address_space = available_memory()
    if address_space is not None and process > address_space:
        return f"{format_bytes(address_space)} of address space is left under ulimit -v"
    if machine is not None and total > machine:
        return f"{format_bytes(machine)} is available"
    return None


def check_memory(
    config: Any,
    *,
    num_classes: int,
    train_images: int,
    val_images: int = 0,
    test_images: int = 0,
    eval_batch_size: int | None = None,
    cuda: bool | None = None,
    runs: int = 1,
    unit: str = "run",
    here: bool = True,
    flags: bool = False,
    members: int = 1,
    waiting: int = 0,
    fix: str | None = None,
) -> MemoryEstimate:
    """Refuse runs that cannot fit in memory, before anything is decoded or allocated: raises
    :class:`~autoaug.core.errors.UserInputError`, one line naming the image size, the estimate
    and what is available, when they exceed ``MemAvailable`` or, for one process, the address
    space ``ulimit -v`` leaves (:func:`available_memory`). Returns the estimate of one run.

    One run is :func:`estimate_run_memory` of the same arguments (``cuda`` None: from
    ``config.device``). ``here``: the run is this process (``autoaug train``, the trainer). Else
    ``runs`` of them run at once in worker processes (a search's trials, a comparison's runs; 0:
    on a cluster, not this machine) while this process holds the decoded data too (the
    preflight's decode). ``unit`` names a run in the message (``"trial"``); ``flags``: the
    message names the command-line flag (``--image-size``) instead of the config's field.

    Packs (``members`` above 1): each of the ``runs`` is a process holding ``members`` runs'
    pipelines and models (:func:`estimate_run_memory`'s ``pipeline`` and ``model`` each, besides
    one ``process`` and its ``data``), and ``waiting`` trials' processes wait on them (a search's
    pack servers, :mod:`autoaug.search.tune.pack`; :data:`WAITING_PROCESS_BYTES` each).
    ``fix``: what the message tells to change (default: a smaller image size or batch size)."""
    estimate = estimate_run_memory(
        config,
        num_classes=num_classes,
        train_images=train_images,
        val_images=val_images,
        test_images=test_images,
        eval_batch_size=eval_batch_size,
        cuda=_on_cuda(config) if cuda is None else cuda,
    )
    per_run = estimate.total + (int(members) - 1) * (estimate.pipeline + estimate.model)
    if here:
        runs, process, total = 1, per_run, per_run
    else:  # each worker inherits ulimit -v; this process decodes the data once more
        process = max(per_run if runs else 0, estimate.data)
        total = per_run * runs + (int(waiting) * WAITING_PROCESS_BYTES if runs else 0) + estimate.data
    short = _shortfall(process, total)
    if short is None:
        return estimate
    size = config.image_size
    setting = f"--image-size {size}" if flags else f"TrainConfig.image_size={size}"
    batch = "batch size" if flags else "batch_size"
    what = f"{batch} {config.batch_size}, {config.model}"
    if fix is None:
        fix = "a smaller --image-size or batch size" if flags else "a smaller image_size or batch_size"
    if runs and members > 1:
        packs = f"{runs} packs of {members} {unit}s each" if runs > 1 else f"1 pack of {members} {unit}s"
        if waiting:
            packs += f" and {waiting} {unit}s' processes waiting on {'them' if runs > 1 else 'it'}"
            waits = f"; {format_bytes(WAITING_PROCESS_BYTES)} a waiting process"
        else:
            waits = ""
        raise UserInputError(
            f"{packs} need about {format_bytes(total)} ({format_bytes(per_run)} a pack: {setting}, {what}{waits}; "
            f"the data decoded here), but {short}; use {fix}"
        )
    if runs:
        needs = f"about {format_bytes(per_run)} per {unit} ({what}"
        if total != per_run:
            plural = "s" if runs > 1 else ""
            needs += f"; {runs} {unit}{plural} at once and the data decoded here: {format_bytes(total)}"
        needs += ")"
    else:
        needs = f"about {format_bytes(estimate.data)} here to decode the data"
    raise UserInputError(f"{setting} needs {needs}, but {short}; use {fix}")


#: Bytes per pixel a preview holds per image it draws: the decoded uint8 image, one float32 copy
#: an operation works on, and the uint8 result placed in the grid.
PREVIEW_BYTES_PER_PIXEL = 3 * (1 + 4 + 1)


def check_preview_memory(images: int, draws: int, image_size: int) -> int:
    """Refuse a policy preview (``autoaug policies preview``) whose images cannot fit in memory,
    before any is decoded: ``images`` images of ``image_size`` pixels a side, each drawn
    ``draws`` times into one grid (the grid and the draws held at once). Raises
    :class:`~autoaug.core.errors.UserInputError`, one line naming ``--image-size``, the estimate
    and what is available; returns the estimate in bytes."""
    px = int(image_size) ** 2
    need = PROCESS_BYTES + int(images) * (int(draws) + 1) * px * PREVIEW_BYTES_PER_PIXEL
    short = _shortfall(need, need)
    if short is None:
        return need
    from autoaug.core.errors import UserInputError

    raise UserInputError(
        f"--image-size {image_size} needs about {format_bytes(need)} to preview {images} images x {draws} draws, "
        f"but {short}; use a smaller --image-size or fewer --num-images / --columns"
    )
