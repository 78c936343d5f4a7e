"""The DALI input pipeline feeding PyTorch.

::

    decode (from memory, or fn.decoders.image from the encoded bytes)
      -> [train] the policy's base (policies.dali_apply.apply_base: "standard" pad-4 random crop
         + horizontal flip, "crop" the crop alone, "none" nothing)
      -> [train] the policy step (policies.dali_apply.apply_policy: one sub-policy per image)
      -> normalize, HWC uint8 -> CHW float32
      -> torch tensors (DALIGenericIterator, zero-copy on CPU)

The same graph runs on CPU (``device="cpu"``, DALI ``device_id=None``) and GPU (``device="gpu"``:
``device="mixed"`` decoding and GPU operators); the device is the only difference.

Seeding: the sample order of epoch ``e`` is a pure function of ``(seed, e)`` and every random
operator is seeded from the pipeline seed, so the same seed gives the same batches.
:meth:`DaliLoader.state_dict` captures the epoch counter plus DALI's own checkpoint of its random
operators' state, so a resumed training run sees exactly the batches an uninterrupted run would.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from autoaug.proxy_models.data import DatasetError, ImageDataset, ParquetDataset

# Per-channel statistics of the CIFAR-10 training set (0-255 scale).
CIFAR10_MEAN = (125.31, 122.95, 113.87)
CIFAR10_STD = (62.99, 62.09, 66.70)

# Decode into memory when the decoded split is at most this large; decode with DALI otherwise.
MEMORY_DECODE_LIMIT_BYTES = 1 << 30
#: Iterations DALI prepares ahead of the one being consumed (``DaliLoader``'s default): every
#: operator's output buffers exist once per queued iteration (:mod:`autoaug.proxy_models.memory`).
PREFETCH_QUEUE_DEPTH = 2


def resolve_device(device: str) -> str:
    """``"auto"`` -> ``"gpu"`` when torch sees a CUDA device, else ``"cpu"``; ``"cuda"`` == ``"gpu"``;
    ``"cuda:N"`` / ``"gpu:N"`` -> ``"gpu"`` (the index: :func:`device_index`)."""
    return _parse_device(device)[0]


def device_index(device: str) -> int | None:
    """The CUDA device a DALI pipeline for ``device`` runs on: ``N`` of ``"cuda:N"`` / ``"gpu:N"``,
    torch's current device for ``"gpu"`` / ``"cuda"`` (and ``"auto"`` on a machine with CUDA),
    ``None`` on the CPU."""
    kind, index = _parse_device(device)
    if kind == "cpu":
        return None
    if index is None:
        import torch

        index = torch.cuda.current_device()
    return index


def _parse_device(device: str) -> tuple[str, int | None]:
    if isinstance(device, str):
        name, sep, index = device.partition(":")
        name = {"cuda": "gpu"}.get(name, name)
        if sep and name == "gpu" and index.isdigit():
            return "gpu", int(index)
        if not sep and name == "auto":
            import torch

            return ("gpu" if torch.cuda.is_available() else "cpu"), None
        if not sep and name in ("cpu", "gpu"):
            return name, None
    raise ValueError(f"device must be one of 'cpu', 'gpu', 'cuda', 'cuda:N', 'gpu:N', 'auto'; got {device!r}")


class _EpochSource:
    """External-source iterable: one pass = one epoch of (images|encoded, labels) batches."""

    def __init__(self, loader: DaliLoader):
        self.loader = loader

    def __iter__(self):
        ld = self.loader
        order = ld.epoch_order(ld.epoch)
        ld.epoch += 1
        bs = ld.batch_size
        stop = len(order) - (len(order) % bs if ld.drop_last else 0)
        tables = ld._policy_tables  # fixed for the epoch: set_policy() acts from the next one
        for start in range(0, stop, bs):
            pos = order[start : start + bs]
            labels = ld._labels[pos].reshape(-1, 1)
            extra = tuple([t] * len(pos) for t in tables) if tables is not None else ()
            if ld.decode == "memory":
                yield (ld._images[pos], labels, *extra)
            else:
                yield ([ld._encoded[p] for p in pos], labels, *extra)


def checked_indices(dataset: ImageDataset, indices: Any, batch_size: Any) -> np.ndarray:
    """``indices`` of ``dataset`` as an int64 array, refused in one line when empty or out of range,
    and ``batch_size`` a positive integer: what every loader of a split checks first."""
    if not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
    indices = np.asarray(indices, dtype=np.int64)
    if indices.size == 0:
        raise DatasetError(f"{dataset.source}: no images selected (empty index list)")
    bad = indices[(indices < 0) | (indices >= len(dataset))]
    if bad.size:
        raise DatasetError(f"{dataset.source}: index {int(bad[0])} out of range for {len(dataset)} images")
    return indices


class DaliLoader:
    """Batches of ``(images, labels)`` torch tensors for ``indices`` of ``dataset``.

    Args:
        dataset: an :class:`~proxy_models.data.ImageDataset`.
        indices: rows of ``dataset`` to serve (e.g. ``split.train``).
        batch_size: images per batch.
        policy: a :class:`policies.Policy` applied per image when ``train`` (``None``: no policy
            and no base crop/flip).
        train: shuffle each epoch, apply the base crop/flip and the policy, drop the last partial
            batch. ``False``: fixed order, no augmentation, every image served once.
        seed: seeds the sample order and DALI's random operators.
        image_size: resize (shorter side) + center-crop every image to this size; ``None`` keeps
            the dataset's size (all images must then share one size).
        num_threads: DALI CPU worker threads.
        device: ``"cpu"``, ``"gpu"`` (``"cuda"``: torch's current CUDA device), ``"cuda:N"``
            (``"gpu:N"``: CUDA device N, where the model of a ``cuda:N`` run lives) or ``"auto"``.
        decode: ``"memory"`` (decode once with PIL, keep uint8 arrays; cached per process),
            ``"dali"`` (feed encoded bytes to ``fn.decoders.image`` every epoch) or ``"auto"``
            (memory when the decoded split fits in 1 GiB).
        mean, std: normalization per channel on the 0-255 scale (default: CIFAR-10's).
        skip_corrupt: skip undecodable rows instead of raising; they are listed in
            ``dataset.skipped_rows`` and counted in ``self.num_skipped``.
        policy_inputs: a :class:`autoaug.policies.dali_apply.PolicyInputs`: the policy step takes
            its tables as pipeline inputs, so :meth:`set_policy` changes the policy between
            epochs without rebuilding the pipeline. The policy is then applied whether or not
            ``train`` (with ``train=False``: fixed order, no base crop/flip, every image once --
            an augmented evaluation pass).
    """

    def __init__(
        self,
        dataset: ImageDataset,
        indices: Sequence[int] | np.ndarray,
        *,
        batch_size: int = 128,
        policy: Any = None,
        train: bool = True,
        seed: int = 0,
        image_size: int | None = None,
        num_threads: int = 2,
        device: str = "cpu",
        decode: str = "auto",
        mean: Sequence[float] = CIFAR10_MEAN,
        std: Sequence[float] = CIFAR10_STD,
        skip_corrupt: bool = False,
        drop_last: bool | None = None,
        prefetch_queue_depth: int = PREFETCH_QUEUE_DEPTH,
        policy_inputs: Any = None,
    ):
        if decode not in ("auto", "memory", "dali"):
            raise ValueError(f"decode must be 'auto', 'memory' or 'dali', got {decode!r}")
        indices = checked_indices(dataset, indices, batch_size)
        self.dataset = dataset
        self.batch_size = int(batch_size)
        self.policy = policy
        self.train = train
        self.seed = int(seed)
        self.num_threads = num_threads
        self.device = resolve_device(device)
        self._device_spec = device  # "cuda:N": the CUDA device DALI runs on (device_index, at build)
        self.mean, self.std = tuple(float(m) for m in mean), tuple(float(s) for s in std)
        self.drop_last = train if drop_last is None else drop_last
        self.prefetch_queue_depth = prefetch_queue_depth
        self.epoch = 0
        self._dali_state: bytes | None = None
        self._pipe = None
        self._iter = None
        self.policy_inputs = policy_inputs
        self._policy_tables = None
        if policy_inputs is not None:
            if image_size is None:
                raise ValueError("policy_inputs needs image_size")
            self.set_policy(policy)

        if decode == "auto":
            probe = dataset.image(int(indices[0]), image_size)
            decode = "memory" if probe.nbytes * len(indices) <= MEMORY_DECODE_LIMIT_BYTES else "dali"
        self.decode = decode
        if decode == "memory":
            self._images, kept = dataset.images(indices, image_size, skip_corrupt=skip_corrupt)
        else:
            kept = dataset.validate_encoded(indices, skip_corrupt=skip_corrupt)
            fetch = (
                dataset.encoded_numpy
                if isinstance(dataset, ParquetDataset)
                else (lambda i: np.frombuffer(dataset.encoded(i), dtype=np.uint8))
            )
            self._encoded = [fetch(int(i)) for i in kept]
        self.num_skipped = int(len(indices) - len(kept))
        self.indices = kept
        self._labels = dataset.labels[kept].astype(np.int64)
        if image_size is None and decode == "memory":
            image_size = int(self._images.shape[1]) if self._images.shape[1] == self._images.shape[2] else None
            self.image_shape = tuple(self._images.shape[1:3])
        else:
            if image_size is None:
                raise DatasetError(f"{dataset.source}: decode='dali' needs image_size (images may differ in size)")
            self.image_shape = (image_size, image_size)
        self.image_size = image_size
        if self.drop_last and len(kept) < self.batch_size:
            raise DatasetError(f"{dataset.source}: {len(kept)} images is fewer than one batch of {self.batch_size}")

    # ------------------------------------------------------------------------------------------
    def __len__(self) -> int:
        n = len(self.indices)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    @property
    def num_images(self) -> int:
        """Images served per epoch."""
        return len(self) * self.batch_size if self.drop_last else len(self.indices)

    def epoch_order(self, epoch: int) -> np.ndarray:
        """Positions (into ``self.indices``) in the order epoch ``epoch`` serves them."""
        if not self.train:
            return np.arange(len(self.indices))
        return np.random.default_rng([self.seed, epoch]).permutation(len(self.indices))

    def set_policy(self, policy: Any) -> None:
        """With ``policy_inputs``: the policy of the next epoch (None: the identity); the pipeline
        is not rebuilt. Raises ``ValueError`` for a policy the policy step was not built for."""
        if self.policy_inputs is None:
            raise ValueError("set_policy needs a loader built with policy_inputs")
        if policy is None:
            from autoaug.policies import Policy

            policy = Policy("identity", 10, [])
        self._policy_tables = self.policy_inputs.tables(policy)
        self.policy = policy

    def _build(self):
        from nvidia.dali import fn, pipeline_def, types
        from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

        gpu = self.device == "gpu"
        h, w = self.image_shape
        apply_policy = None
        spec = self.policy_inputs
        if spec is None and self.train and self.policy is not None and len(self.policy.sub_policies) > 0:
            from autoaug.policies.dali_apply import apply_policy
        n_tables = len(spec.input_names()) if spec is not None else 0
        table_types = [types.FLOAT] + [types.INT32, types.FLOAT, types.FLOAT, types.FLOAT, types.FLOAT] * (
            spec.stages if spec is not None else 0
        )

        @pipeline_def(enable_conditionals=apply_policy is not None or spec is not None)
        def graph():
            data, labels, *tables = fn.external_source(
                source=_EpochSource(self),
                num_outputs=2 + n_tables,
                batch=True,
                cycle="raise",
                layout=["HWC" if self.decode == "memory" else "", ""] + [""] * n_tables,
                dtype=[types.UINT8, types.INT64] + table_types,
            )
            if self.decode == "memory":
                images = data.gpu() if gpu else data
            else:
                images = fn.decoders.image(data, device="mixed" if gpu else "cpu", output_type=types.RGB)
                images = fn.resize(images, resize_shorter=self.image_size)
                images = fn.crop(images, crop=(h, w))
            if self.train and self.policy is not None:
                from autoaug.policies.dali_apply import apply_base

                images = apply_base(getattr(self.policy, "base", "standard"), images, image_size=(h, w))
            if apply_policy is not None:
                images = apply_policy(self.policy, images)
            if spec is not None:
                from autoaug.policies.dali_apply import apply_policy_inputs

                images = apply_policy_inputs(spec, images, tables)  # argument inputs: on the CPU
            images = fn.crop_mirror_normalize(
                images, dtype=types.FLOAT, output_layout="CHW", mean=list(self.mean), std=list(self.std)
            )
            return images, (labels.gpu() if gpu else labels)

        with warnings.catch_warnings():
            # Our external source is re-positioned by the epoch counter we checkpoint ourselves.
            warnings.filterwarnings("ignore", message="Checkpointing enabled in a pipeline with external source")
            pipe = graph(
                batch_size=self.batch_size,
                num_threads=self.num_threads,
                device_id=device_index(self._device_spec),
                seed=self.seed,
                prefetch_queue_depth=self.prefetch_queue_depth,
                enable_checkpointing=self.train,
                checkpoint=self._dali_state,
                exec_dynamic=True,
            )
            pipe.build()
        self._pipe = pipe
        self._iter = DALIGenericIterator(
            pipe,
            ["images", "labels"],
            last_batch_policy=LastBatchPolicy.PARTIAL,
            auto_reset=False,
            prepare_first_batch=False,
        )
        self._fresh = True

    def __iter__(self):
        if self._iter is None:
            self._build()
        elif not self._fresh:
            # Reset only when the next epoch starts (not when the last one ends), so that DALI
            # does not prefetch ahead of a state_dict() taken between epochs.
            self._iter.reset()
        self._fresh = False
        for batch in self._iter:
            out = batch[0]
            yield out["images"], out["labels"].view(-1)

    # ------------------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """Epoch counter + DALI's checkpoint of its random operators; call between epochs."""
        state = {"epoch": self.epoch, "seed": self.seed}
        if self._pipe is not None and self.train:
            state["dali"] = self._iter.checkpoints()[0]
        elif self._dali_state is not None:
            state["dali"] = self._dali_state
        return state

    def load_state_dict(self, state: dict) -> None:
        if int(state.get("seed", self.seed)) != self.seed:
            raise ValueError(f"loader state was saved with seed {state['seed']}, this loader has seed {self.seed}")
        self.epoch = int(state["epoch"])
        self._dali_state = state.get("dali")
        self._pipe = self._iter = None  # rebuilt from the checkpoint on next iteration
