"""Training batches made on the device the model trains on (``TrainConfig.loader: device``).

:class:`DeviceFeed` is a run's training loader without a host pipeline: the split's images are
decoded once (:meth:`~autoaug.proxy_models.data.ImageDataset.images`, the in-memory decoding
DALI's loader uses, cached per process) and kept on the run's device as one uint8 NCHW tensor;
each epoch a permutation of them, then per batch the policy's base (pad-and-random-crop, flip) and
the policy itself applied per sample by batched torch operations
(:mod:`autoaug.policies.torch_batch`: what torchvision's transform computes, image by image), and
the normalisation :class:`~autoaug.proxy_models.pipeline.DaliLoader` uses, all on the device::

    images (uint8, on the device) -> [epoch] permutation -> [batch] index_select
      -> its draws (torch_batch.draw_uniforms: one generator call) -> base (apply_base_drawn)
      -> policy (apply_drawn) -> (x - mean) / std, float32 NCHW

The feeds of a pack's members are served together (:func:`serve_together`, what
:class:`~autoaug.proxy_models.pack.Pack` does): at each step every member's batch, with the draws
of its own generator, is augmented by one application over all of them, so the kernel launches of
a step do not grow with the number of members, and each member's batches are those it gets alone.
On a CUDA device a step waits for no host work (the policy's operations are masked, not gathered).

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
from autoaug.proxy_models.pipeline import CIFAR10_MEAN, CIFAR10_STD, checked_indices

__all__ = ["DeviceFeed", "FEED_KIND", "serve_together"]

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
        indices = checked_indices(dataset, indices, batch_size)
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
        self.policy: Any = policy

    def __len__(self) -> int:
        return len(self.indices) // self.batch_size

    @property
    def num_images(self) -> int:
        """Images served per epoch."""
        return len(self) * self.batch_size

    def set_policy(self, policy: Any) -> None:
        """The policy of the next epochs (``None``: neither base nor policy)."""
        self.policy = policy

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        return iter(serve_together([self])[0])

    def _begin_epoch(self) -> torch.Tensor:
        """This epoch's order of the images (the epoch's first draw)."""
        order = torch.randperm(len(self.indices), generator=self.generator, device=self.device)
        self.epoch += 1
        return order

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


def serve_together(feeds: Sequence[DeviceFeed]) -> list[Iterator[tuple[torch.Tensor, torch.Tensor]]]:
    """One stream per feed, their epochs made in lockstep: at each step every feed's batch --
    its own order, base and policy draws from its own generator -- is augmented by one application
    (:func:`autoaug.policies.torch_batch.apply_drawn` over all of them), so the launches of a
    step are those of one batch whatever the number of feeds. Each feed's batches are those it
    serves alone (a sample's result depends on its own draws only).

    The streams are consumed as a pack consumes them: one batch of each in turn, the first
    stream's first (its next batch makes the step's batches of all). Every feed needs the same
    device, image size, batch size, normalisation and batches an epoch (a pack's members have them)."""
    feeds = list(feeds)
    first = feeds[0]
    for feed in feeds[1:]:
        same = (
            feed.device == first.device
            and feed.images.shape[1:] == first.images.shape[1:]
            and feed.batch_size == first.batch_size
            and len(feed) == len(first)
            and (feed.interpolation, feed.fill) == (first.interpolation, first.fill)
            and torch.equal(feed.mean, first.mean)
            and torch.equal(feed.std, first.std)
        )
        if not same:
            raise ValueError("device feeds served together need one device, image size, batch size and normalisation")
    lockstep = _Lockstep(feeds)
    return [lockstep.stream(k) for k in range(len(feeds))]


class _Lockstep:
    """The step-by-step maker of :func:`serve_together`'s streams."""

    def __init__(self, feeds: list[DeviceFeed]) -> None:
        self.feeds = feeds
        self.batches: list[tuple[torch.Tensor, torch.Tensor]] = []

    def stream(self, k: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        if k == 0:
            self._begin()
        for step in range(len(self.feeds[0])):
            if k == 0:
                self.batches = self._make(step)
            yield self.batches[k]

    def _begin(self) -> None:
        from autoaug.policies import Policy
        from autoaug.policies.torch_batch import PolicyPlan, partners

        first = self.feeds[0]
        h, w = first.images.shape[-2:]
        nothing = Policy("nothing", 10, [], base="none")  # a feed without a policy: neither base nor policy
        self.orders = [feed._begin_epoch() for feed in self.feeds]
        policies = [nothing if feed.policy is None else feed.policy for feed in self.feeds]
        self.plan = PolicyPlan(policies, h, w, first.device)
        self.partner, self.paired = partners([first.batch_size] * len(self.feeds), first.device)

    def _make(self, step: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        from autoaug.policies.torch_batch import apply_base_drawn, apply_drawn, draw_uniforms

        first, plan = self.feeds[0], self.plan
        bs = first.batch_size
        images, labels, blocks = [], [], []
        for k, (feed, order) in enumerate(zip(self.feeds, self.orders)):
            pos = order[step * bs : (step + 1) * bs]
            images.append(feed.images.index_select(0, pos))
            labels.append(feed.labels.index_select(0, pos))
            blocks.append(draw_uniforms(plan, bs, feed.generator, member=k))  # the batch's one draw
        draws = plan.decode(blocks)
        batch = apply_base_drawn(torch.cat(images), draws)
        if plan.steps:
            batch = apply_drawn(
                batch, plan, draws, self.partner, self.paired, interpolation=first.interpolation, fill=first.fill
            )
        batch = batch.float().sub_(first.mean).div_(first.std)
        return list(zip(batch.split(bs), labels))
