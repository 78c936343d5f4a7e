"""The training configuration: :class:`TrainConfig` (everything one run depends on) and its named
:data:`PRESETS`. :mod:`autoaug.proxy_models.train` runs it (and re-exports both names).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import types
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from autoaug.core.values import check_keys, invalid
from autoaug.core.values import is_int as _is_int
from autoaug.core.values import is_number as _is_number
from autoaug.proxy_models.model_names import check_model_name

if TYPE_CHECKING:
    import torch

__all__ = [
    "TrainConfig",
    "MAX_EPOCHS",
    "PRESETS",
    "RESUMABLE_CHANGES",
    "SIZING_FIELDS",
    "AMP_DTYPES",
    "COMPILE_MODES",
    "LOADERS",
    "sizing_record",
    "resolve_config",
    "EVAL_BATCH_SIZE",
    "eval_batch_size",
]

#: The longest run a configuration may ask for: 5.5 times the longest published schedule of the
#: policies this project searches for (AutoAugment's Shake-Shake and PyramidNet on CIFAR-10, 1,800
#: epochs). Beyond it a number is a slip (a run that would never end), refused before any work.
MAX_EPOCHS = 10_000

# Config fields that may differ between a checkpoint and the run resuming it: they do not change
# what is computed (where the data lives, where it runs, how many threads run it -- DALI's output
# does not depend on its thread count --, how often and in which batches validation is reported).
RESUMABLE_CHANGES = frozenset(
    {
        "data",
        "test_data",
        "device",
        "num_threads",
        "loader_threads",
        "eval_every",
        "eval_from",
        "eval_epochs",
        "eval_batch_size",
    }
)

#: The fields that size a run to its data: the split (totals, or per class with a floor and a cap)
#: and the image size (``None``: the data's own). :meth:`TrainConfig.resolved` turns them into
#: concrete numbers; :func:`sizing_record` records what was asked and what it resolved to.
SIZING_FIELDS = (
    "train_size",
    "val_size",
    "train_per_class",
    "min_train_size",
    "max_train_size",
    "max_val_size",
    "image_size",
)

#: Fields added after run records existed: :meth:`TrainConfig.to_dict` leaves them out while they
#: hold their default (None, or False for ``compile``), so a config that does not use them has the
#: dictionary (and the digests of records holding it) that it had before they existed; a record
#: that lacks one had the default (:meth:`TrainConfig.changed_fields`).
_OMITTED_AT_DEFAULT = (
    "train_per_class",
    "min_train_size",
    "max_train_size",
    "max_val_size",
    "group_by",
    "amp_dtype",
    "tf32",
    "compile",
    "eval_batch_size",
    "loader_threads",
    "eval_epochs",
    "loader",
)

#: ``amp_dtype`` values (``None``: the device's default, float16 on CUDA, bfloat16 on the CPU).
AMP_DTYPES = ("bfloat16", "float16")
#: ``compile`` values besides true/false: the modes of ``torch.compile`` (true is ``"default"``).
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
#: ``loader`` values: where a run's training batches are made (:class:`TrainConfig`).
LOADERS = ("dali", "device")


# --------------------------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Everything one training run depends on (frozen, JSON-able through :meth:`to_dict`).

    Data and split
        ``data``: training source as :func:`autoaug.proxy_models.data.open_dataset` accepts it (Parquet
        file or folder, ImageFolder root, ``cifar10:ROOT``); ``test_data``: optional source of a
        test set (a folder holding ``train.parquet``/``test.parquet`` may be given for both: the
        test set is opened with ``split="test"``). ``train_size``: images in the reduced training
        split (``None``/0: every image not used for validation); ``val_size``: images held out for
        validation (``None``: every image not in the training split, as in AutoAugment; 0: no
        validation, ``val_accuracy`` is then ``None``); both stratified by class and drawn with
        ``split_seed``. ``train_per_class``: size the training split per class instead (exclusive
        with ``train_size``): the total is the sum over classes of ``min(train_per_class, class
        size)``, raised to ``min_train_size`` and capped at ``max_train_size`` (both optional), and
        never more than the images not held out for validation; the split is then drawn stratified
        as for a total (in proportion to the class sizes), so ``train_per_class`` is the *average*
        per class. ``max_val_size``: with ``val_size`` None, validate on the images the training
        split leaves unused, at most this many (a search's score is read on as many images as the
        data spare, up to a bound that keeps validation cheap: ``benchmarks/score_noise.py``).
        :meth:`resolved` turns it into ``train_size`` against the data's class counts
        (``train`` does this at its start, and records the resolved config). ``group_by``: None
        (the default: images are split one by one), or a group key, ``COLUMN`` or ``COLUMN:REGEX``
        (:mod:`autoaug.proxy_models.groups`), e.g. ``track`` or ``source_path:Images/(\\d+)/(\\d+)_``:
        no group then has images on both sides of the split
        (:func:`autoaug.proxy_models.splits.config_split`). ``image_size``: images are resized
        (shorter side) and center-cropped to this square size; ``None`` (or ``"auto"``): the data's
        own size, which needs every image to have one size (H x W; the shorter side is used).

    Optimisation
        ``epochs``, ``batch_size``, ``lr`` (peak, reached after ``warmup_epochs`` of linear
        warm-up, then cosine decay to 0 at the last step), ``momentum``, ``nesterov``,
        ``weight_decay`` (on all parameters), ``label_smoothing``.

    Execution
        ``seed``: model initialisation, data order and augmentation draws. ``device``: ``"cpu"``,
        ``"cuda"`` (or ``"cuda:N"``), or ``"auto"`` (CUDA when available). ``amp``: mixed
        precision (float16 autocast + gradient scaling on CUDA, bfloat16 autocast on CPU);
        ``None`` = on for CUDA, off for CPU; ``"native"`` = on for CUDA and on a CPU with native
        instructions for ``amp_dtype`` (AVX512-BF16/AMX for bfloat16), float32 on other CPUs, where
        emulated bfloat16 costs 3-4x the CPU of float32 (``benchmarks/score_noise.py --fp32``'s
        note). ``amp_dtype``: the autocast dtype when ``amp`` is on,
        ``"bfloat16"`` or ``"float16"`` (``None``: float16 on CUDA, bfloat16 on the CPU); float16
        adds gradient scaling; bfloat16 on a GPU without it falls back to float16 with one
        warning. ``channels_last``: ``None`` = on for CUDA. ``tf32``: TF32 matmuls and
        convolutions on CUDA for the run (``None``: torch's settings as they are; no effect on
        the CPU). ``compile``: ``torch.compile`` the training step (true, or a mode:
        ``"default"``, ``"reduce-overhead"``, ``"max-autotune"``, ``"max-autotune-no-cudagraphs"``;
        evaluation stays eager); when compiling fails (no C++ compiler, an unsupported op) the
        run trains eagerly after one warning. ``num_threads``: torch intra-op threads and DALI
        worker threads (``None``: torch's current setting); ``loader_threads``: DALI's worker
        threads when they should differ from ``num_threads``. ``loader``: where the training
        batches are made: ``"dali"`` (the default: the DALI pipeline,
        :class:`~autoaug.proxy_models.pipeline.DaliLoader`, decoding and augmenting on the host or
        the GPU) or ``"device"`` (:class:`~autoaug.proxy_models.device_feed.DeviceFeed`: the
        images decoded once and kept on the run's device, the base and the policy applied there
        per sample by batched torch operations); the two draw different streams, so a run resumes
        only with its own. Validation and test batches come from DALI either way. ``eval_batch_size``: images per
        evaluation batch (``None``: ``max(batch_size, 256)``); evaluation runs under
        ``torch.inference_mode``, batch norm in eval mode, so it changes no result beyond the
        last bits of float sums. ``eval_every``: validate every N epochs (and always after the last);
        ``eval_from``: validate no epoch before this one (1-based; the last is always validated),
        e.g. only the last few epochs of a run scored on a large validation set; ``eval_epochs``:
        exactly these epochs (1-based, and the last), instead of ``eval_every``/``eval_from``
        (a search's trials validate only the epochs its score is read from: the windows before
        ASHA's rungs and the last); other epochs report ``val_accuracy``/``val_loss`` as ``None``.
        Validation changes nothing in training (its own loader, the model in eval mode). ``deterministic``:
        ``torch.use_deterministic_algorithms`` (+ cuDNN deterministic kernels, no autotuning) for
        the run; on the CPU this costs nothing and is on in every preset; on the GPU the ``paper``
        and ``final`` presets turn it off for speed, so GPU runs of one seed agree only
        statistically (atomics in cuDNN/cuBLAS backward kernels reorder float sums).
    """

    model: str = "resnet-8"
    data: str | None = None
    test_data: str | None = None
    train_size: int | None = 4000
    val_size: int | None = 1000
    train_per_class: int | None = None
    min_train_size: int | None = None
    max_train_size: int | None = None
    max_val_size: int | None = None
    split_seed: int = 0
    group_by: str | None = None
    seed: int = 0
    epochs: int = 10
    batch_size: int = 128
    lr: float = 0.1
    momentum: float = 0.9
    nesterov: bool = True
    weight_decay: float = 5e-4
    warmup_epochs: float = 0.0
    label_smoothing: float = 0.0
    image_size: int | None = None
    num_threads: int | None = None
    device: str = "auto"
    amp: bool | str | None = None
    channels_last: bool | None = None
    eval_every: int = 1
    eval_from: int = 1
    deterministic: bool = True
    # Speed options added after run records existed (left out of to_dict() at their defaults).
    amp_dtype: str | None = None
    tf32: bool | None = None
    compile: bool | str = False
    eval_batch_size: int | None = None
    loader_threads: int | None = None
    eval_epochs: tuple[int, ...] | None = None
    loader: str = "dali"

    PRESETS: ClassVar[Mapping[str, TrainConfig]]

    def __post_init__(self) -> None:
        bad = functools.partial(invalid, self, template="{prefix}{name} must be {expected}, got {value!r}")
        for name in ("data", "test_data"):
            value = getattr(self, name)
            if isinstance(value, os.PathLike):
                object.__setattr__(self, name, os.fspath(value))
            elif value is not None and not isinstance(value, str):
                raise bad(name, "a path or URI string")
            if value == "":
                object.__setattr__(self, name, None)
        check_model_name(self.model)
        object.__setattr__(self, "model", self.model.strip().lower())

        for name in ("train_size", "val_size"):
            v = getattr(self, name)
            if v is not None and (not _is_int(v) or v < 0):
                raise bad(name, "a non-negative integer or None")
        for name in ("train_per_class", "min_train_size", "max_train_size", "max_val_size"):
            v = getattr(self, name)
            if v is not None and (not _is_int(v) or v < 1):
                raise bad(name, "a positive integer or None")
        if self.train_per_class is not None and self.train_size is not None:
            raise ValueError(
                f"TrainConfig.train_size={self.train_size!r} and train_per_class={self.train_per_class!r} both size "
                "the training split; set one of them and the other to None"
            )
        if self.train_per_class is None:
            for name in ("min_train_size", "max_train_size"):
                if getattr(self, name) is not None:
                    raise ValueError(
                        f"TrainConfig.{name}={getattr(self, name)!r} bounds a training split sized per class, but "
                        "train_per_class is None; set train_per_class too (or size the split with train_size)"
                    )
        if self.max_val_size is not None and self.val_size is not None:
            raise ValueError(
                f"TrainConfig.val_size={self.val_size!r} and max_val_size={self.max_val_size!r} both size the "
                "validation split; set val_size to None (the images the training split leaves, at most "
                "max_val_size) or max_val_size to None"
            )
        if self.max_val_size is not None and not (self.train_size or self.train_per_class):
            raise ValueError(
                f"TrainConfig.max_val_size={self.max_val_size!r} caps the images a sized training split leaves "
                "for validation, but the training split is not sized; set train_size or train_per_class"
            )
        if (
            self.min_train_size is not None
            and self.max_train_size is not None
            and self.min_train_size > self.max_train_size
        ):
            raise ValueError(
                f"TrainConfig.min_train_size={self.min_train_size} exceeds max_train_size={self.max_train_size}; "
                "expected min_train_size <= max_train_size"
            )
        if self.image_size == "auto":
            object.__setattr__(self, "image_size", None)
        if self.image_size is not None and (not _is_int(self.image_size) or self.image_size < 1):
            raise bad("image_size", "a positive integer, or 'auto'/None (the data's own size)")
        for name in ("split_seed", "seed"):
            v = getattr(self, name)
            if not _is_int(v) or not 0 <= v < 2**31:
                raise bad(name, "an integer in [0, 2**31)")
        if not _is_int(self.epochs) or not 1 <= self.epochs <= MAX_EPOCHS:
            raise bad(
                "epochs",
                f"an integer from 1 to {MAX_EPOCHS:,} (5.5x the longest published schedule, AutoAugment's 1,800 "
                "epochs)",
            )
        for name in ("batch_size", "eval_every"):
            v = getattr(self, name)
            if not _is_int(v) or v < 1:
                raise bad(name, "a positive integer")
        if not _is_int(self.eval_from) or not 1 <= self.eval_from <= self.epochs:
            raise bad("eval_from", f"an integer in [1, epochs={self.epochs}]")
        if self.eval_epochs is not None:
            epochs = self.eval_epochs
            if (
                isinstance(epochs, (str, bytes))
                or not hasattr(epochs, "__iter__")
                or not all(_is_int(e) and 1 <= e <= self.epochs for e in epochs)
            ):
                raise bad("eval_epochs", f"a list of epochs, integers in [1, epochs={self.epochs}], or None")
            object.__setattr__(self, "eval_epochs", tuple(sorted(set(int(e) for e in epochs))))
        for name in ("num_threads", "loader_threads", "eval_batch_size"):
            v = getattr(self, name)
            if v is not None and (not _is_int(v) or v < 1):
                raise bad(name, "a positive integer or None")
        if self.amp_dtype is not None and self.amp_dtype not in AMP_DTYPES:
            raise bad("amp_dtype", f"{' or '.join(map(repr, AMP_DTYPES))} or None (the device's default)")
        if self.tf32 not in (None, True, False):
            raise bad("tf32", "true, false or None (torch's settings as they are)")
        if not (isinstance(self.compile, bool) or self.compile in COMPILE_MODES):
            raise bad("compile", f"true, false or a torch.compile mode ({', '.join(map(repr, COMPILE_MODES))})")
        if self.compile == "default":  # one spelling per setting: the same run records one dict
            object.__setattr__(self, "compile", True)
        if not isinstance(self.loader, str) or self.loader not in LOADERS:
            raise bad("loader", f"one of {', '.join(map(repr, LOADERS))}")
        if not _is_number(self.lr) or self.lr <= 0:
            raise bad("lr", "a positive number")
        if not _is_number(self.momentum) or not 0 <= self.momentum < 1:
            raise bad("momentum", "a number in [0, 1)")
        if not _is_number(self.weight_decay) or self.weight_decay < 0:
            raise bad("weight_decay", "a non-negative number")
        if not _is_number(self.label_smoothing) or not 0 <= self.label_smoothing < 1:
            raise bad("label_smoothing", "a number in [0, 1)")
        if not _is_number(self.warmup_epochs) or not 0 <= self.warmup_epochs <= self.epochs:
            raise bad("warmup_epochs", f"a number in [0, epochs={self.epochs}]")
        for name in ("nesterov", "deterministic"):
            if not isinstance(getattr(self, name), bool):
                raise bad(name, "true or false")
        if self.amp not in (None, True, False, "native"):
            raise bad(
                "amp",
                "true, false, None (automatic: on for CUDA) or 'native' (on for CUDA and on a CPU with "
                "native instructions for the dtype)",
            )
        if self.channels_last not in (None, True, False):
            raise bad("channels_last", "true, false or None (automatic: on for CUDA)")
        if self.nesterov and self.momentum == 0:
            raise ValueError("TrainConfig.nesterov=True needs momentum > 0 (got momentum=0); set nesterov=False")
        if not isinstance(self.device, str) or not (
            self.device in ("cpu", "cuda", "auto") or (self.device.startswith("cuda:") and self.device[5:].isdigit())
        ):
            raise bad("device", "'cpu', 'cuda', 'cuda:N' or 'auto'")
        if self.group_by is not None:
            from autoaug.proxy_models.groups import GroupSpec

            try:
                GroupSpec.parse(self.group_by)
            except ValueError as exc:  # UserInputError: "group_by ...: ...; expected ..."
                raise ValueError(f"TrainConfig.{exc}") from None
        if self.train_size == 0 and self.val_size is None:
            raise ValueError(
                "TrainConfig.train_size=0 (all images not used for validation) and val_size=None (all images not "
                "used for training) leave the split undefined; set one of them to a number"
            )
        # Floats given as ints (JSON, YAML, CLI) are normalised so that to_dict() round-trips.
        for name in ("lr", "momentum", "weight_decay", "warmup_epochs", "label_smoothing"):
            object.__setattr__(self, name, float(getattr(self, name)))

    # -- construction -------------------------------------------------------------------------
    @classmethod
    def from_preset(cls, name: str, **overrides: Any) -> TrainConfig:
        """The preset ``name`` (see :data:`PRESETS`) with ``overrides`` applied."""
        if name not in PRESETS:
            raise ValueError(f"unknown training preset {name!r}: expected one of {', '.join(PRESETS)}")
        _check_field_names(overrides, f"override for preset {name!r}")
        return dataclasses.replace(PRESETS[name], **_sizing_overrides(overrides))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TrainConfig:
        """Inverse of :meth:`to_dict`; missing keys take the field defaults (a mapping that sizes the
        training split per class and gives no ``train_size`` has none, rather than the default's
        4,000)."""
        if not isinstance(data, Mapping):
            raise ValueError(f"TrainConfig.from_dict expects a mapping, got {type(data).__name__}")
        _check_field_names(data, "TrainConfig key")
        return cls(**_sizing_overrides(data))

    def to_dict(self) -> dict[str, Any]:
        """The fields as a JSON-able dict; the fields added after run records existed
        (``train_per_class``, ``min_train_size``, ``max_train_size``, ``group_by``, the speed
        options ``amp_dtype``, ``tf32``, ``compile``, ``eval_batch_size``, ``loader_threads``,
        and ``eval_epochs``, ``loader``) only when they differ from their default (see
        :data:`_OMITTED_AT_DEFAULT`)."""
        d = dataclasses.asdict(self)
        for name in _OMITTED_AT_DEFAULT:
            if d[name] == _DEFAULTS[name] and type(d[name]) is type(_DEFAULTS[name]):
                del d[name]
        return d

    def changed_fields(self, saved: Mapping[str, Any], ignore: Iterable[str] = ()) -> list[tuple[str, Any, Any]]:
        """``(field, saved value, this config's value)`` for every field that differs from
        ``saved`` (an earlier run's :meth:`to_dict`), ``ignore`` left out. A field ``saved``
        lacks was added after that run was recorded: the run had the field's default."""
        defaults = {f.name: f.default for f in dataclasses.fields(self) if f.default is not dataclasses.MISSING}
        out = []
        for key, value in dataclasses.asdict(self).items():
            before = saved.get(key, defaults.get(key))
            if key not in ignore and before != value:
                out.append((key, before, value))
        return out

    # -- sized to the data ---------------------------------------------------------------------
    @property
    def is_resolved(self) -> bool:
        """Whether the split and image size are concrete (nothing left to resolve against data)."""
        return self.train_per_class is None and self.max_val_size is None and self.image_size is not None

    def resolved(self, class_counts: Sequence[int] | None = None, *, data_image_size: int | None = None) -> TrainConfig:
        """This config sized to a dataset: a pure function of the dataset's ``class_counts``
        (images per class, in class order) and its own image size (``data_image_size``, used only
        when ``image_size`` is None). Returns ``self`` when there is nothing to resolve.

        ``train_per_class`` becomes ``train_size``: ``sum(min(train_per_class, n_c))``, raised to
        ``min_train_size``, capped at ``max_train_size``, and at most the images not held out
        for validation (``len - val_size``; when that leaves nothing, the total is kept and the
        split reports that it does not fit). ``train_per_class``, ``min_train_size`` and
        ``max_train_size`` become None, ``image_size`` the data's size. ``max_val_size`` becomes
        ``val_size``: ``max_val_size`` when the training split leaves more images, else None (the rest). Other totals
        (``train_size``, ``val_size``) are kept as they are, ``None`` included. The resolved config is what a
        run records and what decides whether two runs computed the same thing.

        >>> TrainConfig.from_preset("eval-cpu").resolved([5000] * 10, data_image_size=32).train_size
        1000
        """
        changes: dict[str, Any] = {}
        if (self.train_per_class is not None or self.max_val_size is not None) and class_counts is not None:
            n = sum(int(c) for c in class_counts)
        if self.train_per_class is not None:
            if class_counts is None:
                raise ValueError(
                    f"TrainConfig.train_per_class={self.train_per_class} is resolved against the data: "
                    "pass the images per class (class_counts)"
                )
            counts = [int(c) for c in class_counts]
            if any(c < 0 for c in counts) or sum(counts) == 0:
                raise ValueError(
                    f"class_counts must be non-negative image counts with at least one image, "
                    f"got {counts[:10]}{'...' if len(counts) > 10 else ''}"
                )
            n = sum(counts)
            total = sum(min(self.train_per_class, c) for c in counts)
            if self.min_train_size is not None:
                total = max(total, self.min_train_size)
            if self.max_train_size is not None:
                total = min(total, self.max_train_size)
            not_held_out = n - (self.val_size or 0)
            if not_held_out >= 1:
                total = min(total, not_held_out)
            changes.update(train_size=total, train_per_class=None, min_train_size=None, max_train_size=None)
        if self.max_val_size is not None:
            if class_counts is None:
                raise ValueError(
                    f"TrainConfig.max_val_size={self.max_val_size} is resolved against the data: "
                    "pass the images per class (class_counts)"
                )
            left = n - int(changes.get("train_size", self.train_size))
            # The cap not reached: "the rest" (None), which a grouped split meets by whole groups.
            changes.update(val_size=self.max_val_size if self.max_val_size < left else None, max_val_size=None)
        if self.image_size is None:
            if data_image_size is None:
                raise ValueError("TrainConfig.image_size is automatic (the data's own size): pass data_image_size")
            changes["image_size"] = data_image_size
        return dataclasses.replace(self, **changes) if changes else self

    def validates(self, epoch: int) -> bool:
        """Whether 1-based ``epoch`` is validated (the last always is): one of ``eval_epochs``,
        or, without them, every ``eval_every``-th epoch from ``eval_from``."""
        if epoch == self.epochs:
            return True
        if self.eval_epochs is not None:
            return epoch in self.eval_epochs
        return epoch >= self.eval_from and epoch % self.eval_every == 0

    def describe_split(self) -> str:
        """The training and validation split in words (``"100 training images per class (1,000 to
        2,000 in all), 1,000 validation images"``)."""
        return ", ".join(p for p in (self.describe_train(), self.describe_val()) if p)

    def describe_train(self) -> str:
        """The training split in words (``"100 training images per class (1,000 to 2,000 in all)"``)."""
        if self.train_per_class is not None:
            low, high = self.min_train_size, self.max_train_size
            bound = (
                f"{low:,} to {high:,}"
                if low and high
                else f"at least {low:,}"
                if low
                else f"at most {high:,}"
                if high
                else ""
            )
            return f"{self.train_per_class:,} training images per class" + (f" ({bound} in all)" if bound else "")
        if self.train_size:
            return f"{self.train_size:,} training images"
        return "every image trains" if self.val_size == 0 else "every image not held out trains"

    def describe_recipe(self) -> str:
        """Epochs, batch, learning rate, seed and the numerics when not float32
        (``"120 epochs, batch 64, lr 0.2, seed 0, bfloat16 autocast, channels-last"``)."""
        parts = [f"{self.epochs} epochs", f"batch {self.batch_size}", f"lr {self.lr:g}", f"seed {self.seed}"]
        if self.amp:
            parts.append(f"{self.amp_dtype} autocast" if self.amp_dtype else "autocast (the device's dtype)")
            if self.amp == "native":
                parts[-1] += " where native"
        if self.channels_last:
            parts.append("channels-last")
        if self.compile:
            parts.append("compiled" if self.compile is True else f"compiled ({self.compile})")
        return ", ".join(parts)

    def describe_val(self) -> str:
        """The validation split in words (``""`` when it is the rest of an unsized training split)."""
        if self.val_size is None:
            if self.max_val_size is not None:
                return f"the rest validate (at most {self.max_val_size:,})"
            return "the rest validate" if (self.train_size or self.train_per_class) else ""
        return "no validation" if self.val_size == 0 else f"{self.val_size:,} validation images"

    # -- derived ------------------------------------------------------------------------------
    def float16_on_cuda(self) -> bool:
        """Whether runs of this configuration autocast in float16 on a GPU (CUDA's default when
        ``amp_dtype`` is not given): what a pack cannot train, its gradient scaler skipping every
        member's step when one overflows (:class:`autoaug.proxy_models.pack.PackLearner`)."""
        return self.device.startswith("cuda") and self.amp is not False and (self.amp_dtype or "float16") == "float16"

    def resolve_device(self) -> torch.device:
        """The torch device this config runs on (``auto`` resolved); raises if CUDA is missing."""
        import torch

        if self.device == "auto":
            return torch.device("cuda" if torch.cuda.is_available() else "cpu")
        device = torch.device(self.device)
        if device.type == "cuda":
            if not torch.cuda.is_available():
                raise ValueError(
                    f"TrainConfig.device={self.device!r} but CUDA is not available on this machine "
                    "(use device='cpu' or 'auto')"
                )
            if device.index is not None and device.index >= torch.cuda.device_count():
                raise ValueError(
                    f"TrainConfig.device={self.device!r} but only {torch.cuda.device_count()} CUDA device(s) exist"
                )
        return device


_DEFAULTS: Mapping[str, Any] = types.MappingProxyType(
    {f.name: f.default for f in dataclasses.fields(TrainConfig) if f.default is not dataclasses.MISSING}
)


def _sizing_overrides(overrides: Mapping[str, Any]) -> dict[str, Any]:
    """``overrides`` of a preset, where sizing the training split one way replaces the preset's
    other way: ``train_size`` (a total, or None for every image not held out) clears the preset's
    ``train_per_class`` and its bounds; ``train_per_class`` clears the preset's ``train_size``;
    likewise ``max_val_size`` clears the preset's ``val_size`` and a ``val_size`` its ``max_val_size``.
    Overrides that give both are left for the config's own check."""
    out = dict(overrides)
    if "train_size" in out and "train_per_class" not in out:
        out.setdefault("train_per_class", None)
        out.setdefault("min_train_size", None)
        out.setdefault("max_train_size", None)
    elif out.get("train_per_class") is not None and "train_size" not in out:
        out["train_size"] = None
    # Validation sized one way replaces the preset's other way, as training is.
    if out.get("max_val_size") is not None and "val_size" not in out:
        out["val_size"] = None
    elif out.get("val_size") is not None and "max_val_size" not in out:
        out["max_val_size"] = None
    return out


def layer_sizing(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` (a layer of training settings: a preset's section, a configuration file's) less
    the sizing keys a later layer ``override`` replaces by sizing the other way (as
    :func:`_sizing_overrides` does for a preset's fields): a ``val_size`` given later clears an
    earlier ``max_val_size`` and the reverse; a ``train_size`` clears ``train_per_class`` and its
    bounds, and the reverse. Merge ``override`` onto the result."""
    out = dict(base)
    if "val_size" in override and "max_val_size" not in override:
        out.pop("max_val_size", None)
    if "max_val_size" in override and "val_size" not in override:
        out.pop("val_size", None)
    if "train_size" in override and "train_per_class" not in override:
        for key in ("train_per_class", "min_train_size", "max_train_size"):
            out.pop(key, None)
    if "train_per_class" in override and "train_size" not in override:
        out.pop("train_size", None)
    return out


def sizing_record(requested: TrainConfig, resolved: TrainConfig, *, num_classes: int | None = None) -> dict[str, Any]:
    """What a run records about its sizing: the :data:`SIZING_FIELDS` as ``requested`` (None:
    per class, automatic or "the rest", as the fields document) and as ``resolved`` against the
    data, and the data's number of classes."""
    record: dict[str, Any] = {
        "requested": {
            name: getattr(requested, name)
            for name in SIZING_FIELDS
            if name != "max_val_size" or requested.max_val_size is not None  # records before it: unchanged
        },
        "resolved": {name: getattr(resolved, name) for name in ("train_size", "val_size", "image_size")},
    }
    if num_classes is not None:
        record["num_classes"] = int(num_classes)
    return record


def _check_field_names(keys: Iterable[str], what: str) -> None:
    known = sorted(f.name for f in dataclasses.fields(TrainConfig))
    check_keys(keys, known, what, template="unknown {what} {unknown}: expected one of {known}")


#: Named starting points; see docs/training.md for how each was sized.
PRESETS: Mapping[str, TrainConfig] = types.MappingProxyType(
    {
        # A few seconds on 2 CPU cores, for tests and trying the plumbing; 32x32 whatever the data's
        # size, so that it stays a few seconds (docs/training.md, "Configuration and presets").
        "smoke": TrainConfig(
            model="resnet-8",
            train_size=1024,
            val_size=256,
            epochs=2,
            batch_size=32,
            lr=0.1,
            warmup_epochs=0.0,
            image_size=32,
            device="cpu",
        ),
        # A one-minute proxy trial on 2 CPU cores: 15 epochs at a high peak lr. Chosen by
        # benchmarks/policy_sensitivity.py and trial_throughput.py (docs/training.md, "How the `cpu` preset was sized").
        "cpu": TrainConfig(
            model="resnet-8",
            train_size=4000,
            val_size=1000,
            epochs=15,
            batch_size=64,
            lr=0.2,
            warmup_epochs=1.0,
            device="cpu",
        ),
        # The search's proxy on a CPU (the `cpu` search preset): ResNet-8 on 100 training images per
        # class (1,000 to 2,000 in all) of split seed 0, 1,000 validation images, 120 epochs, in bfloat16
        # autocast and channels-last (a CPU without native bfloat16 gets one warning). Chosen by
        # benchmarks/results/proxy-fidelity-cpu and trial-throughput; docs/results.md, "How the presets were chosen".
        "proxy-cpu": TrainConfig(
            model="resnet-8",
            train_size=None,
            train_per_class=100,
            min_train_size=1000,
            max_train_size=2000,
            val_size=1000,
            epochs=120,
            batch_size=64,
            lr=0.2,
            warmup_epochs=1.0,
            device="cpu",
            amp="native",
            amp_dtype="bfloat16",
            channels_last=True,
        ),
        # The evaluation regime on a CPU (benchmarks/search_quality.py, `autoaug compare --preset
        # eval-cpu`): the proxy's recipe, float32, on split seed 1, no validation, scored on the test split.
        # Chosen by measurement on CIFAR-10: docs/training.md, "The evaluation regime (`eval-cpu`)".
        "eval-cpu": TrainConfig(
            model="resnet-8",
            train_size=None,
            train_per_class=100,
            min_train_size=1000,
            max_train_size=2000,
            val_size=0,
            split_seed=1,
            epochs=120,
            batch_size=64,
            lr=0.2,
            warmup_epochs=1.0,
            device="cpu",
        ),
        # AutoAugment's proxy task: WRN-40-2 on reduced CIFAR-10 (4,000 images; the rest of the
        # training set validates), 120 epochs, batch 128, lr 0.1, weight decay 5e-4, cosine.
        "paper": TrainConfig(
            model="wrn-40-2",
            train_size=4000,
            val_size=None,
            epochs=120,
            batch_size=128,
            lr=0.1,
            weight_decay=5e-4,
            device="cuda",
            deterministic=False,
        ),
        # Final evaluation: WRN-28-10 on the whole training set, 200 epochs (pass test_data).
        "final": TrainConfig(
            model="wrn-28-10",
            train_size=None,
            val_size=0,
            epochs=200,
            batch_size=128,
            lr=0.1,
            weight_decay=5e-4,
            device="cuda",
            deterministic=False,
        ),
    }
)
TrainConfig.PRESETS = PRESETS


def resolve_config(config: TrainConfig, dataset: Any = None) -> TrainConfig:
    """``config`` sized to its data (:meth:`TrainConfig.resolved`): a training split given per
    class becomes a total against the dataset's class counts, an automatic image size becomes the
    data's own (:meth:`ImageDataset.own_image_size`). ``dataset``: ``config.data`` already opened
    (opened here when None). :func:`autoaug.proxy_models.train.train` calls it first; a caller that must know the split or
    the image size before training (the search draws the trials' split, compare keeps run
    records, the preflight decodes) calls it once and passes the result on. Returns ``config``
    itself when there is nothing to resolve; raises ``DatasetError`` for images of several sizes
    with an automatic size."""
    if config.is_resolved:
        return config
    if dataset is None:
        if config.data is None:
            raise ValueError("TrainConfig.data is not set: give the training data source (e.g. a Parquet file)")
        from autoaug.proxy_models.data import open_dataset

        dataset = open_dataset(config.data, split="train")
    import numpy as np

    sized_by_counts = config.train_per_class is not None or config.max_val_size is not None
    counts = np.bincount(dataset.labels, minlength=dataset.num_classes) if sized_by_counts else None
    own = dataset.own_image_size() if config.image_size is None else None
    return config.resolved(counts, data_image_size=own)


#: Evaluation batches are at least this large unless ``TrainConfig.eval_batch_size`` says otherwise
#: (no gradients are kept, and small batches waste most of a CPU's time in per-call overhead);
#: batch norm runs in eval mode, so the batch size does not change what is computed.
EVAL_BATCH_SIZE = 256


def eval_batch_size(config: TrainConfig) -> int:
    """Images per evaluation batch: ``config.eval_batch_size``, else ``max(batch_size, 256)``."""
    return config.eval_batch_size or max(config.batch_size, EVAL_BATCH_SIZE)
