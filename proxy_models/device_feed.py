"""Training batches made on the device the model trains on (``TrainConfig.loader: device``).

:class:`DeviceFeed` is a run's training loader without a host pipeline: the split's images are
decoded once (:meth:`~autoaug.proxy_models.data.ImageDataset.images`, the in-memory decoding
DALI's loader uses, cached per process) and kept on the run's device as one uint8 NCHW tensor;
each epoch a permutation of them, then per batch the policy's base (pad-and-random-crop, flip) and
the policy itself applied per sample by batched torch operations
(:mod:`autoaug.policies.torch_batch`: what torchvision's transform computes, image by image), and
the normalisation :class:`~autoaug.proxy_models.pipeline.DaliLoader` uses, all on the device::

    images (uint8, on the device) -> [epoch] permutation -> [batch] index_select
      -> base (policies.torch_batch.apply_base_batch) -> policy (apply_policy_batch)
      -> (x - mean) / std, float32 NCHW

The last partial batch is dropped, as the DALI training loader drops it, so an epoch has the same
number of steps either way. Every draw -- the order, the crops and flips, the policy's -- comes
from one ``torch.Generator`` on the device seeded with the run's ``seed``, so a run's stream
depends on its seed, its policy and the kind of device only: not on the other members of a pack,
nor on how many there are. :meth:`DeviceFeed.state_dict` (in the run's checkpoint, where the DALI
loader's state is) holds the epoch and the generator's state after it: a resumed run continues the
stream of the uninterrupted one.

The streams differ from the DALI loader's (another generator, torchvision's operations instead of
DALI's), so the setting is part of what a run computed: a checkpoint resumes, and a pack admits a
member, only with the same ``loader``. Validation and test passes keep the DALI loader.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch

from autoaug.proxy_models.data import DatasetError, ImageDataset
from autoaug.proxy_models.pipeline import CIFAR10_MEAN, CIFAR10_STD

__all__ = ["DeviceFeed", "FEED_KIND"]

#: What a :class:`DeviceFeed`'s state records as its kind (a DALI loader's state has none).
FEED_KIND = "device"


class DeviceFeed:
    """Training batches of ``(images, labels)`` for ``indices`` of ``dataset``, made on ``device``.

    Args:
        dataset: an :class:`~autoaug.proxy_models.data.ImageDataset`.
        indices: rows of ``dataset`` to train on (``split.train``).
        batch_size: images per batch (an epoch: ``len(indices) // batch_size`` batches).
        policy: a :class:`~autoaug.policies.policy.Policy`, applied after its base; ``None``:
            neither base nor policy (as DALI's loader). :meth:`set_policy` changes it between epochs.
        seed: seeds the generator of every draw.
        image_size: resize (shorter side) + center-crop every image to this size when decoding;
            ``None`` keeps the dataset's size (one size for all).
        device: where the images live and the batches are made (``"cpu"``, ``"cuda"``, ``"cuda:N"``).
        mean, std: normalisation per channel on the 0-255 scale (default: CIFAR-10's, as DALI's loader).
        interpolation, fill: of the policy's warps and its fill (torchvision's transform's defaults).
    """

    def __init__(
        self,
        dataset: ImageDataset,
        indices: Sequence[int] | np.ndarray,
        *,
        batch_size: int,
        policy: Any,
        seed: int,
        image_size: int | None,
        device: torch.device | str = "cpu",
        mean: Sequence[float] = CIFAR10_MEAN,
        std: Sequence[float] = CIFAR10_STD,
        interpolation: str = "nearest",
        fill: int = 128,
    ) -> None:
        if not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
        indices = np.asarray(indices, dtype=np.int64)
        if indices.size == 0:
            raise DatasetError(f"{dataset.source}: no images selected (empty index list)")
        if indices.min() < 0 or indices.max() >= len(dataset):
            raise DatasetError(f"{dataset.source}: index {int(indices.max())} out of range for {len(dataset)} images")
        if len(indices) < batch_size:
            raise DatasetError(f"{dataset.source}: {len(indices)} images is fewer than one batch of {batch_size}")
        self.dataset = dataset
        self.batch_size = int(batch_size)
        self.seed = int(seed)
        self.device = torch.device(device)
        self.interpolation, self.fill = interpolation, int(fill)
        decoded, kept = dataset.images(indices, image_size)  # uint8 NHWC, decoded once per process
        self.indices = kept
        self.images = torch.from_numpy(decoded).to(self.device).permute(0, 3, 1, 2).contiguous()
        self.labels = torch.from_numpy(dataset.labels[kept].astype(np.int64)).to(self.device)
        self.image_size = int(self.images.shape[-1]) if self.images.shape[-1] == self.images.shape[-2] else None
        self.mean = torch.tensor([float(m) for m in mean], device=self.device).view(1, -1, 1, 1)
        self.std = torch.tensor([float(s) for s in std], device=self.device).view(1, -1, 1, 1)
        self.generator = torch.Generator(device=self.device).manual_seed(self.seed)
        self.epoch = 0
        self.policy: Any = None
        self._plan: Any = None
        self.set_policy(policy)

    def __len__(self) -> int:
        return len(self.indices) // self.batch_size

    @property
    def num_images(self) -> int:
        """Images served per epoch."""
        return len(self) * self.batch_size

    def set_policy(self, policy: Any) -> None:
        """The policy of the next epochs (``None``: neither base nor policy)."""
        from autoaug.policies.torch_batch import PolicyPlan

        self.policy = policy
        h, w = self.images.shape[-2:]
        self._plan = None if policy is None or policy.is_identity else PolicyPlan(policy, h, w, self.device)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        from autoaug.policies.torch_batch import apply_base_batch, apply_policy_batch

        gen, bs = self.generator, self.batch_size
        order = torch.randperm(len(self.indices), generator=gen, device=self.device)
        self.epoch += 1
        policy, plan = self.policy, self._plan
        for start in range(0, len(self) * bs, bs):
            pos = order[start : start + bs]
            images = self.images.index_select(0, pos)
            if policy is not None:
                images = apply_base_batch(images, getattr(policy, "base", "standard"), gen)
                if plan is not None:
                    images = apply_policy_batch(
                        images, policy, gen, interpolation=self.interpolation, fill=self.fill, plan=plan
                    )
            yield (images.float() - self.mean) / self.std, self.labels.index_select(0, pos)

    # ------------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The epochs served and the generator's state after them; call between epochs."""
        return {
            "kind": FEED_KIND,
            "epoch": self.epoch,
            "seed": self.seed,
            "device": self.device.type,
            "generator": self.generator.get_state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue the stream ``state`` was taken from (one line when it is not this feed's)."""
        if state.get("kind") != FEED_KIND:
            raise ValueError(
                "cannot resume: the checkpoint's training loader is DALI's, this run feeds from the device "
                "(loader: device); resume it with loader: dali"
            )
        if int(state["seed"]) != self.seed:
            raise ValueError(f"the feed's state was saved with seed {state['seed']}, this feed has seed {self.seed}")
        if state["device"] != self.device.type:
            raise ValueError(
                f"cannot resume: the feed's random state was saved on a {state['device']} device, this run is on "
                f"{self.device.type}; resume it on {state['device']}"
            )
        self.generator.set_state(state["generator"])
        self.epoch = int(state["epoch"])
