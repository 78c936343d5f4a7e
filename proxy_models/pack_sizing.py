"""How large a pack to train on a device (``pack: auto``): the images per second of packs of K
members (:class:`~autoaug.proxy_models.pack.PackLearner`; one: the solo learner) measured on
synthetic images resident on the device (:func:`pack_rate`), and the fastest that fits its memory
(:func:`choose_pack`). ``benchmarks/pack_throughput.py`` times with the same :func:`pack_rate`."""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from autoaug.proxy_models.learner import Learner
from autoaug.proxy_models.pack import PackLearner
from autoaug.proxy_models.train import TrainConfig, _TorchState

__all__ = [
    "AUTO_SIZES",
    "MEMORY_SHARE",
    "choose_pack",
    "device_copies",
    "pack_device_share",
    "pack_gpus",
    "pack_rate",
    "shared_rate",
]

#: The pack sizes ``pack: auto`` measures.
AUTO_SIZES = (1, 2, 4, 8, 16, 32, 64)
#: The share of the device's memory a pack may take (``pack: auto``).
MEMORY_SHARE = 0.8


def pack_rate(
    config: TrainConfig,
    k: int,
    *,
    train_size: int,
    seconds: float = 2.0,
    warmup: int = 2,
    graphs: bool = False,
    ready: Callable[[], Any] | None = None,
) -> dict[str, Any]:
    """Images per second (all members) of a pack of ``k`` members of ``config`` (1: the solo
    learner) over about ``seconds`` of training steps on ``train_size`` synthetic images resident
    on the device (uint8, each member its own order, normalised there): the model's side of a
    trial, what a pack changes. With CUDA also its peak memory (``peak_bytes``).

    ``graphs`` (CUDA only): the step -- the batch gathered from the images, forward, backward,
    the SGD step -- captured once in a CUDA graph after the warm-up and replayed, only the batch's
    indices drawn outside it (what CUDA graphs would save a step of launches; a measurement:
    the learning rates stay those of the capture). ``ready``: called after the warm-up, before
    the clock starts (processes measuring at once wait for each other there: :func:`shared_rate`)."""
    dev = config.resolve_device()
    if graphs and dev.type != "cuda":
        raise ValueError(f"CUDA graphs need a CUDA device, not {dev.type}")
    n, b = int(train_size), config.batch_size
    steps_per_epoch = max(1, n // b)
    gen = torch.Generator(device="cpu").manual_seed(0)
    images = torch.randint(0, 256, (n, 3, 32, 32), dtype=torch.uint8, generator=gen).to(dev)
    labels = torch.randint(0, 10, (n,), generator=gen).to(dev)
    mean = torch.tensor([125.3, 123.0, 113.9], device=dev).view(1, 3, 1, 1)
    std = torch.tensor([63.0, 62.1, 66.7], device=dev).view(1, 3, 1, 1)
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
    if k == 1:
        learner = Learner(config, num_classes=10, steps_per_epoch=steps_per_epoch, device=dev)
        fmt = torch.channels_last if learner.channels_last else torch.contiguous_format

        index_shape: tuple[int, ...] = (b,)

        def body(idx: torch.Tensor) -> None:
            learner._forward_backward(((images[idx].float() - mean) / std).contiguous(memory_format=fmt), labels[idx])
            learner.scaler.step(learner.optimizer)
            learner.scaler.update()

        def step(i: int) -> None:
            body(torch.randint(0, n, index_shape, device=dev))
            learner.scheduler.step()
    else:
        pack = PackLearner(config, num_classes=10, steps_per_epoch=steps_per_epoch, device=dev)
        states = []
        for seed in range(k):
            torch.manual_seed(seed)
            states.append(Learner(config, num_classes=10, steps_per_epoch=steps_per_epoch, device=dev).state_dict())
        pack.load(states)

        index_shape = (k, b)  # each member its own order

        def body(idx: torch.Tensor, i: int = 0) -> None:
            _, _, grads = pack.forward_backward((images[idx].float() - mean) / std, labels[idx])
            pack.apply_gradients(grads, pack.lrs(i % steps_per_epoch))

        def step(i: int) -> None:
            body(torch.randint(0, n, index_shape, device=dev), i)

    def sync() -> None:
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    for i in range(warmup):
        step(i)
    sync()
    if graphs:
        step = _graphed(body, torch.randint(0, n, index_shape, device=dev), n, dev)
    if ready is not None:
        ready()
    t0 = time.perf_counter()
    done = 0
    while True:
        step(done)
        done += 1
        if done % 4 == 0:
            sync()
            if time.perf_counter() - t0 >= seconds:
                break
    sync()
    elapsed = time.perf_counter() - t0
    out: dict[str, Any] = {"k": k, "steps": done, "seconds": elapsed, "images_per_s": done * b * k / elapsed}
    if dev.type == "cuda":
        out["peak_bytes"] = int(torch.cuda.max_memory_allocated(dev))
    return out


def shared_rate(
    config: TrainConfig, k: int, processes: int, *, train_size: int, seconds: float = 2.0, warmup: int = 2
) -> dict[str, Any]:
    """:func:`pack_rate` of ``processes`` processes at once on ``config``'s device, each a pack of
    ``k`` (one: the solo learner): what as many pack servers -- or, for ``k`` 1, as many trials --
    sharing the device train. Each process is started (``spawn``), warms up, waits for the others
    and then measures for ``seconds``; their images per second are added (``images_per_s``), with
    the largest peak memory of one (``peak_bytes``, CUDA) and ``processes``. One process: measured
    in this one. A process that fails raises ``RuntimeError`` naming what it met (running out of
    memory as ``torch.cuda.OutOfMemoryError``, a pack that cannot train float16 as ``ValueError``)."""
    if processes <= 1:
        return pack_rate(config, k, train_size=train_size, seconds=seconds, warmup=warmup)
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(processes)
    pipes = [ctx.Pipe(duplex=False) for _ in range(processes)]
    procs = [
        ctx.Process(
            target=_shared_worker,
            args=(config.to_dict(), k, train_size, seconds, warmup, barrier, send),
            name=f"autoaug-pack-size-{i}",
            daemon=True,
        )
        for i, (_, send) in enumerate(pipes)
    ]
    for p in procs:
        p.start()
    for _, send in pipes:
        send.close()  # (the children's ends: a child gone is EOF here)
    rows: list[dict[str, Any]] = []
    waiting = {receive: p for (receive, _), p in zip(pipes, procs)}
    deadline = time.monotonic() + _SHARED_TIMEOUT_S
    try:
        while waiting:
            ready = multiprocessing.connection.wait(list(waiting), timeout=max(0.0, deadline - time.monotonic()))
            if not ready:
                rows.append({"error": "no answer in time"})
                break
            for receive in ready:
                p = waiting.pop(receive)
                try:
                    rows.append(receive.recv())
                except EOFError:
                    p.join(5)
                    rows.append({"error": f"the process ended (exit code {p.exitcode}) before it answered"})
                if "error" in rows[-1]:
                    barrier.abort()  # the others stop waiting for it
    finally:
        barrier.abort()  # (a child still waiting for a failed one stops waiting)
        for p in procs:
            p.join(30)
            if p.is_alive():
                p.kill()
    failed = [r for r in rows if "error" in r]
    if failed:
        cause = next((r for r in failed if r.get("type") != "BrokenBarrierError"), failed[0])
        text = f"{processes} processes of a pack of {k} at once: {cause['error']}"
        raise {"OutOfMemoryError": torch.cuda.OutOfMemoryError, "ValueError": ValueError}.get(
            cause.get("type"), RuntimeError
        )(text)
    out: dict[str, Any] = {
        "k": k,
        "processes": processes,
        "steps": sum(r["steps"] for r in rows),
        "seconds": max(r["seconds"] for r in rows),
        "images_per_s": sum(r["images_per_s"] for r in rows),
    }
    if any("peak_bytes" in r for r in rows):
        out["peak_bytes"] = max(r.get("peak_bytes", 0) for r in rows)
    return out


#: How long :func:`shared_rate` waits for a process's answer (its start-up, warm-up and measurement).
_SHARED_TIMEOUT_S = 600.0


def _shared_worker(
    config: dict[str, Any], k: int, train_size: int, seconds: float, warmup: int, barrier: Any, send: Any
) -> None:
    """One process of :func:`shared_rate`: its :func:`pack_rate`, started with the others', sent
    back (or ``{"error": ...}``)."""
    try:
        cfg = TrainConfig.from_dict(config)
        dev = cfg.resolve_device()
        with _TorchState(cfg, dev):
            row = pack_rate(
                cfg, k, train_size=train_size, seconds=seconds, warmup=warmup, ready=lambda: barrier.wait(300)
            )
        send.send(row)
    except threading.BrokenBarrierError:
        send.send({"error": "another process failed before the measurement started", "type": "BrokenBarrierError"})
    except Exception as exc:  # noqa: BLE001 - what the process met is its answer
        text = str(exc).strip().splitlines()
        send.send({"error": (text[0] if text else type(exc).__name__)[:300], "type": type(exc).__name__})
    finally:
        send.close()


def device_copies(k: int, member_share: float) -> int:
    """How many packs of ``k`` share one device when each member's trial takes ``member_share``
    of it (:func:`pack_device_share`): as many as their shares fit, at least one; 1 for
    ``member_share`` 0 (the device is not shared out)."""
    return max(1, int(1 / pack_device_share(k, member_share) + 1e-9))


def _graphed(body: Any, static_idx: torch.Tensor, n: int, dev: torch.device) -> Any:
    """``body(idx)`` captured in a CUDA graph (warmed up on a side stream first, as capture
    needs), and the step that replays it: new indices below ``n`` copied into ``static_idx``,
    the graph replayed."""
    side = torch.cuda.Stream(dev)
    side.wait_stream(torch.cuda.current_stream(dev))
    with torch.cuda.stream(side):
        for _ in range(3):
            body(static_idx)
    torch.cuda.current_stream(dev).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        body(static_idx)

    def replay(i: int) -> None:
        static_idx.copy_(torch.randint(0, n, static_idx.shape, device=dev))
        graph.replay()

    return replay


def choose_pack(
    config: TrainConfig,
    *,
    train_size: int,
    sizes: Sequence[int] = AUTO_SIZES,
    seconds: float = 2.0,
    member_share: float = 0.0,
) -> tuple[int, list[dict[str, Any]]]:
    """The pack size that trains the most images per second on this device (``pack: auto``), and
    what was measured: each size in ``sizes`` in turn until one is slower than the best by a
    fifth, needs more than :data:`MEMORY_SHARE` of the device's memory that is its own, or runs
    out of it. ``member_share``: the fraction of the device each member's trial takes (a
    search's ``gpus_per_trial``): a pack of K takes K of them, up to the whole device
    (:func:`pack_device_share`), and each size is measured as the search would run it: as many
    packs at once as share the device (:func:`device_copies`, :func:`shared_rate`; K = 1: the
    trials one per process, as many as share it -- 8 at 0.125 a trial), their images per second
    added; 0: each size alone on the whole device. A size that cannot train here (float16 in a
    pack; any error of a pack on this device) is not taken, its row says why, and no larger size
    is tried; the first size failing raises (every trial would fail the same way)."""
    if not member_share >= 0:
        raise ValueError(f"member_share {member_share!r}: expected a fraction of the device, 0 or more")
    dev = config.resolve_device()
    total = _device_memory(dev)
    measured: list[dict[str, Any]] = []
    best = (1, 0.0)
    with _TorchState(config, dev), torch.random.fork_rng(devices=[dev] if dev.type == "cuda" else []):
        for k in sizes:
            try:
                row = shared_rate(config, k, device_copies(k, member_share), train_size=train_size, seconds=seconds)
            except torch.cuda.OutOfMemoryError:
                measured.append({"k": k, "error": "out of memory"})
                break
            except Exception as exc:  # a size that cannot train here: not taken, no larger one tried
                if not measured:  # (the first size, one run alone, is what every trial does)
                    raise
                text = str(exc).strip().splitlines()
                plain = isinstance(exc, (ValueError, RuntimeError))  # (float16 in a pack; a process that failed)
                measured.append(
                    {"k": k, "error": (text[0] if plain and text else f"{type(exc).__name__}: {' '.join(text)}")[:300]}
                )
                break
            limit = None if total is None else MEMORY_SHARE * total * pack_device_share(k, member_share)
            if limit is not None and row.get("peak_bytes", 0) > limit:
                measured.append(
                    {**row, "error": f"needs {row['peak_bytes'] / 2**30:.1f} GiB, over {limit / 2**30:.1f}"}
                )
                break
            measured.append(row)
            if row["images_per_s"] > best[1]:
                best = (k, row["images_per_s"])
            if row["images_per_s"] < 0.8 * best[1]:
                break
    return best[0], measured


def pack_device_share(k: int, member_share: float) -> float:
    """The share of a device a pack of ``k`` members takes when each member's trial takes
    ``member_share`` of it (a search's ``gpus_per_trial``): theirs together, at most the whole
    device (a pack trains on one); 1 for ``member_share`` 0 (the device is not shared out)."""
    return min(1.0, k * member_share) if member_share > 0 else 1.0


def pack_gpus(k: int, gpus_per_run: float) -> float:
    """The GPUs a pack of ``k`` runs reserves from Ray when each run alone would reserve
    ``gpus_per_run``: theirs together, at most one GPU (a pack trains on one device,
    :func:`pack_device_share`); 0 without GPUs."""
    return pack_device_share(k, gpus_per_run) if gpus_per_run > 0 else 0.0


def _device_memory(dev: torch.device) -> int | None:
    """The bytes of ``dev``'s memory (CUDA), or None (a CPU: not bounded here)."""
    return torch.cuda.get_device_properties(dev).total_memory if dev.type == "cuda" else None
