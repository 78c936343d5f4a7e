"""The trainer: config validation, presets, schedule, and real smoke runs on CIFAR-10 (seeded,
reported per epoch, checkpointed, resumed to the same metrics)."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest
import torch

from autoaug.policies import presets
from autoaug.proxy_models.learner import Learner, WarmupCosine
from autoaug.proxy_models.train import (
    CHECKPOINT_NAME,
    PRESETS,
    TrainConfig,
    TrainResult,
    load_checkpoint,
    train,
    write_history_csv,
)

# What must agree between two runs of one seed (timings may not).
METRIC_KEYS = ("epoch", "train_loss", "train_accuracy", "val_loss", "val_accuracy", "lr")
REPORTED_KEYS = {"epoch", "train_loss", "train_accuracy", "val_accuracy", "val_loss", "images_per_sec", "epoch_time_s"}


def metrics_of(history):
    return [{k: row[k] for k in METRIC_KEYS} for row in history]


# ------------------------------------------------------------------------------------------------
# TrainConfig and presets (no data)
# ------------------------------------------------------------------------------------------------
def test_presets_are_the_documented_ones():
    assert set(PRESETS) == {"smoke", "cpu", "proxy-cpu", "eval-cpu", "paper", "final"}
    assert TrainConfig.PRESETS is PRESETS
    paper = TrainConfig.from_preset("paper")
    assert (paper.model, paper.train_size, paper.epochs, paper.batch_size, paper.lr, paper.weight_decay) == (
        "wrn-40-2",
        4000,
        120,
        128,
        0.1,
        5e-4,
    )
    assert paper.device == "cuda" and paper.val_size is None  # the rest of the training set validates
    final = TrainConfig.from_preset("final")
    assert (final.model, final.train_size, final.val_size, final.epochs) == ("wrn-28-10", None, 0, 200)
    for name in ("smoke", "cpu", "proxy-cpu", "eval-cpu"):
        cfg = TrainConfig.from_preset(name)
        assert cfg.device == "cpu" and cfg.model == "resnet-8" and cfg.deterministic
    assert TrainConfig.from_preset("cpu").train_size == 4000
    # The evaluation regime trains the proxy's recipe on another split, without validation.
    proxy, evaluation = TrainConfig.from_preset("proxy-cpu"), TrainConfig.from_preset("eval-cpu")
    assert proxy.val_size and not evaluation.val_size and proxy.split_seed != evaluation.split_seed
    assert (proxy.model, proxy.epochs, proxy.lr) == (evaluation.model, evaluation.epochs, evaluation.lr)
    for cfg in PRESETS.values():
        assert cfg.momentum == 0.9 and cfg.nesterov


def test_from_preset_applies_overrides_and_replace_keeps_validation(tmp_path):
    cfg = TrainConfig.from_preset("smoke", data=tmp_path / "train.parquet", epochs=1)
    assert cfg.epochs == 1 and cfg.data == str(tmp_path / "train.parquet")  # PathLike -> str
    assert PRESETS["smoke"].data is None  # the preset itself is untouched
    assert dataclasses.replace(cfg, seed=1).seed == 1
    with pytest.raises(ValueError, match=r"TrainConfig.seed must be an integer in \[0, 2\*\*31\), got -1"):
        dataclasses.replace(cfg, seed=-1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.epochs = 3  # type: ignore[misc]


def test_from_preset_rejects_unknown_names_and_fields():
    from autoaug.proxy_models.train import PRESETS

    # the message lists every preset there is (not a copy of today's list)
    with pytest.raises(ValueError, match=rf"unknown training preset 'fast': expected one of {', '.join(PRESETS)}$"):
        TrainConfig.from_preset("fast")
    with pytest.raises(ValueError, match=r"unknown override for preset 'smoke' 'epoch': expected one of"):
        TrainConfig.from_preset("smoke", epoch=3)


def test_to_dict_is_json_and_round_trips():
    cfg = TrainConfig.from_preset("cpu", data="cifar10:/data", seed=4, amp=False, warmup_epochs=2)
    d = json.loads(json.dumps(cfg.to_dict()))
    assert d["warmup_epochs"] == 2.0 and isinstance(d["lr"], float)
    assert TrainConfig.from_dict(d) == cfg
    with pytest.raises(ValueError, match=r"unknown TrainConfig key 'colour'"):
        TrainConfig.from_dict({**d, "colour": "red"})


@pytest.mark.parametrize(
    "overrides, match",
    [
        ({"model": "vgg-11"}, r"unknown model 'vgg-11'"),
        (
            {"epochs": 0},
            r"TrainConfig.epochs must be an integer from 1 to 10,000 \(5.5x the longest published .*, got 0",
        ),
        ({"epochs": 10**12}, r"TrainConfig.epochs must be an integer from 1 to 10,000 .*, got 1000000000000$"),
        ({"batch_size": 2.5}, r"TrainConfig.batch_size must be a positive integer, got 2.5"),
        ({"lr": 0}, r"TrainConfig.lr must be a positive number, got 0"),
        ({"lr": float("nan")}, r"TrainConfig.lr must be a positive number, got nan"),
        ({"momentum": 1.0}, r"TrainConfig.momentum must be a number in \[0, 1\), got 1.0"),
        ({"momentum": 0.0}, r"nesterov=True needs momentum > 0"),
        ({"weight_decay": -1e-4}, r"TrainConfig.weight_decay must be a non-negative number"),
        ({"label_smoothing": 1.0}, r"TrainConfig.label_smoothing must be a number in \[0, 1\)"),
        ({"warmup_epochs": 5, "epochs": 2}, r"TrainConfig.warmup_epochs must be a number in \[0, epochs=2\], got 5"),
        ({"train_size": -5}, r"TrainConfig.train_size must be a non-negative integer or None, got -5"),
        ({"train_size": 0, "val_size": None}, r"leave the split undefined"),
        ({"device": "tpu"}, r"TrainConfig.device must be 'cpu', 'cuda', 'cuda:N' or 'auto', got 'tpu'"),
        ({"num_threads": 0}, r"TrainConfig.num_threads must be a positive integer or None, got 0"),
        ({"amp": "yes"}, r"TrainConfig.amp must be true, false, None \(automatic: on for CUDA\) or 'native'"),
        ({"nesterov": 1}, r"TrainConfig.nesterov must be true or false, got 1"),
        ({"eval_every": 0}, r"TrainConfig.eval_every must be a positive integer"),
        ({"eval_from": 3, "epochs": 2}, r"TrainConfig.eval_from must be an integer in \[1, epochs=2\], got 3"),
        ({"data": 3}, r"TrainConfig.data must be a path or URI string, got 3"),
        (
            {"image_size": 0},
            r"TrainConfig.image_size must be a positive integer, or 'auto'/None \(the data's own size\), got 0",
        ),
        ({"image_size": "big"}, r"TrainConfig.image_size must be a positive integer, or 'auto'/None .*, got 'big'"),
        ({"train_per_class": 0}, r"TrainConfig.train_per_class must be a positive integer or None, got 0"),
        ({"train_per_class": 2.5}, r"TrainConfig.train_per_class must be a positive integer or None, got 2.5"),
        (
            {"train_per_class": 50, "min_train_size": -1},
            r"TrainConfig.min_train_size must be a positive integer or None, got -1",
        ),
        (
            {"train_per_class": 50, "train_size": 500},
            r"TrainConfig.train_size=500 and train_per_class=50 both size the training split; set one of them",
        ),
        (
            {"max_train_size": 2000},
            r"TrainConfig.max_train_size=2000 bounds a training split sized per class, but "
            r"train_per_class is None; set train_per_class too \(or size the split with train_size\)",
        ),
        (
            {"train_per_class": 50, "min_train_size": 3000, "max_train_size": 2000},
            r"TrainConfig.min_train_size=3000 exceeds max_train_size=2000; expected min_train_size <= max_train_size",
        ),
    ],
)
def test_bad_config_values_raise_naming_field_and_value(overrides, match):
    with pytest.raises(ValueError, match=match) as info:
        TrainConfig.from_preset("smoke", **overrides)
    assert "\n" not in str(info.value)


# ------------------------------------------------------------------------------------------------
# Regimes sized to the data: a split per class with a floor and a cap, the data's own image size
# ------------------------------------------------------------------------------------------------
RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"


def _recorded_train_configs():
    """The training configs CIFAR-10 runs recorded before the CPU presets were sized per class:
    the search's proxy (``proxy-cpu``) and the evaluation regime (``eval-cpu``) of the measured
    search-quality benchmark."""
    search = json.loads((RESULTS / "search-quality-cpu-eval-cpu" / "search_result.json").read_text())
    quality = json.loads((RESULTS / "search-quality-cpu-eval-cpu" / "quality.json").read_text())
    return {"proxy-cpu": search["provenance"]["search"]["config"]["train"], "eval-cpu": quality["eval_train_config"]}


def test_cpu_presets_resolve_on_cifar10_to_exactly_the_recorded_regimes():
    """On CIFAR-10 (10 classes of 5,000 32x32 images) the per-class presets are what they were:
    1,000 training images (1,000 validating for the proxy, none for the evaluation), 32x32, and the
    resolved config is field for field the one the earlier runs recorded (so their records are
    reused and their digests unchanged)."""
    for name, recorded in _recorded_train_configs().items():
        resolved = TrainConfig.from_preset(name).resolved([5000] * 10, data_image_size=32)
        assert (resolved.train_size, resolved.val_size, resolved.image_size) == (
            (1000, 1000, 32) if name == "proxy-cpu" else (1000, 0, 32)
        )
        # proxy-cpu has trained in bf16 + channels_last since they were measured (on purpose: another
        # recipe, so earlier proxy runs are not reused), bf16 only on CPUs with native bf16 since
        # amp "native"; eval-cpu, the yardstick, is what it was.
        numerics = [("amp", None, "native"), ("channels_last", None, True), ("amp_dtype", None, "bfloat16")]
        assert resolved.changed_fields(recorded, ignore=("data", "test_data")) == (
            numerics if name == "proxy-cpu" else []
        )
        new_keys = {"eval_from"} | ({"amp_dtype"} if name == "proxy-cpu" else set())
        assert set(resolved.to_dict()) == set(recorded) | new_keys  # no other new keys in its records
        assert resolved.is_resolved and resolved.resolved([1] * 10) is resolved  # nothing left to resolve


def test_cifar10_resolution_reproduces_the_recorded_split_fingerprint(cifar_train):
    """The real CIFAR-10 labels through the per-class ``proxy-cpu``: the very split (fingerprint)
    the recorded search trained its trials on."""
    from autoaug.proxy_models.data import open_dataset
    from autoaug.proxy_models.splits import reduced_split
    from autoaug.proxy_models.train import resolve_config

    recorded = json.loads((RESULTS / "search-quality-cpu-eval-cpu" / "search_result.json").read_text())["provenance"]
    ds = open_dataset(cifar_train)
    config = resolve_config(TrainConfig.from_preset("proxy-cpu", data=str(cifar_train)), ds)
    split = reduced_split(
        ds.labels, config.train_size, config.val_size, seed=config.split_seed, dataset_fingerprint=ds.fingerprint()
    )
    assert ds.fingerprint() == recorded["dataset"]["fingerprint"]
    assert split.fingerprint == recorded["split"]["fingerprint"]


def test_cpu_presets_on_gtsrb_train_on_the_cap(gtsrb_counts):
    """GTSRB's 43 classes (210-2,250 images): 100 per class would be 4,300 images, 4.3 times
    CIFAR-10's epoch cost; the cap keeps it at 2,000 (twice). Validation stays 1,000 in all."""
    proxy = TrainConfig.from_preset("proxy-cpu").resolved(gtsrb_counts, data_image_size=32)
    evaluation = TrainConfig.from_preset("eval-cpu").resolved(gtsrb_counts, data_image_size=32)
    assert (proxy.train_size, proxy.val_size, evaluation.train_size, evaluation.val_size) == (2000, 1000, 2000, 0)
    assert (
        TrainConfig.from_preset("eval-cpu", max_train_size=None).resolved(gtsrb_counts, data_image_size=32).train_size
        == 4300
    )


def test_gtsrb_like_labels_give_a_stratified_split_of_the_resolved_size(gtsrb_counts):
    """Drawn as a total is: every one of the 43 imbalanced classes is in the split, in proportion
    to its size (the smallest classes of 210 give 10-11 images, the largest of 2,250 about 115)."""
    import numpy as np

    from autoaug.proxy_models.splits import reduced_split

    labels = np.repeat(np.arange(43), gtsrb_counts)
    config = TrainConfig.from_preset("proxy-cpu").resolved(np.bincount(labels), data_image_size=32)
    split = reduced_split(labels, config.train_size, config.val_size, seed=config.split_seed)
    per_class = np.bincount(labels[split.train], minlength=43)
    assert len(split.train) == 2000 and len(split.val) == 1000 and not np.intersect1d(split.train, split.val).size
    assert per_class.min() in (10, 11) and per_class.max() in (114, 115)
    assert np.all(np.abs(per_class - 2000 * np.asarray(gtsrb_counts) / sum(gtsrb_counts)) < 1)


@pytest.mark.parametrize(
    "counts, sizing, val_size, expected",
    [
        ([5000] * 10, {"train_per_class": 100}, 1000, 1000),  # CIFAR-10-like
        ([30, 250, 80], {"train_per_class": 100}, 0, 210),  # small classes give all they have
        ([30, 250, 80], {"train_per_class": 100, "min_train_size": 300}, 0, 300),  # the floor
        ([30, 250, 80], {"train_per_class": 100, "max_train_size": 150}, 0, 150),  # the cap
        ([30, 250, 80], {"train_per_class": 100, "min_train_size": 200, "max_train_size": 200}, 0, 200),
        ([30, 40], {"train_per_class": 100, "min_train_size": 1000}, 20, 50),  # floor > what is not held out
        ([30, 40], {"train_per_class": 100, "min_train_size": 1000}, None, 70),  # val_size None: no image left over
        ([0, 12, 7], {"train_per_class": 5}, 0, 10),  # a class without images gives none
    ],
)
def test_per_class_resolution_floor_and_cap(counts, sizing, val_size, expected):
    config = TrainConfig(train_size=None, val_size=val_size, **sizing)
    resolved = config.resolved(counts, data_image_size=32)
    assert resolved.train_size == expected
    assert (resolved.train_per_class, resolved.min_train_size, resolved.max_train_size) == (None, None, None)
    assert resolved.val_size == val_size
    import numpy as np

    from autoaug.proxy_models.splits import reduced_split

    labels = np.repeat(np.arange(len(counts)), counts)
    assert len(reduced_split(labels, resolved.train_size, resolved.val_size, seed=0).train) == expected


@pytest.mark.parametrize(
    "counts, sizing, expected",
    [
        ([5000] * 10, {"train_per_class": 100, "max_val_size": 10000}, (1000, 10000)),  # CIFAR-10: the cap
        ([300] * 10, {"train_per_class": 100, "max_val_size": 10000}, (1000, None)),  # 2,000 left: the rest
        ([5000] * 10, {"train_size": 4000, "max_val_size": 5000}, (4000, 5000)),  # a total trains
        ([5000] * 10, {"train_size": 49000, "max_val_size": 5000}, (49000, None)),
    ],
)
def test_max_val_size_validates_on_what_the_split_leaves_up_to_the_cap(counts, sizing, expected):
    """A search's score is read on as many unused images as the data spare, up to a bound: the
    cap when the data leave more, else every image left (None: whole groups on a grouped split)."""
    import numpy as np

    from autoaug.proxy_models.splits import reduced_split

    config = TrainConfig(val_size=None, **{"train_size": None, **sizing})
    assert not config.is_resolved
    resolved = config.resolved(counts, data_image_size=32)
    assert (resolved.train_size, resolved.val_size) == expected and resolved.max_val_size is None
    assert resolved.is_resolved
    labels = np.repeat(np.arange(len(counts)), counts)
    split = reduced_split(labels, resolved.train_size, resolved.val_size, seed=0)
    assert len(split.val) == (expected[1] or len(labels) - expected[0])


def test_max_val_size_replaces_a_presets_val_size_and_conflicts_are_refused():
    sized = TrainConfig.from_preset("proxy-cpu", max_val_size=5000)  # the preset's val_size 1000 gives way
    assert (sized.val_size, sized.max_val_size) == (None, 5000)
    assert sized.describe_val() == "the rest validate (at most 5,000)"
    assert (
        TrainConfig.from_preset("proxy-cpu").to_dict()
        == TrainConfig.from_preset("proxy-cpu", max_val_size=None).to_dict()
    )
    assert "max_val_size" not in TrainConfig.from_preset("proxy-cpu").to_dict()  # records of other runs unchanged
    with pytest.raises(ValueError, match=r"val_size=1000 and max_val_size=5 both size the validation split"):
        TrainConfig(train_size=100, val_size=1000, max_val_size=5)
    with pytest.raises(ValueError, match=r"max_val_size=5 caps .* the training split is not sized"):
        TrainConfig(train_size=None, val_size=None, max_val_size=5)
    with pytest.raises(ValueError, match=r"max_val_size=10 is resolved against the data"):
        TrainConfig(train_size=100, val_size=None, max_val_size=10).resolved(data_image_size=32)


def test_a_validation_set_larger_than_the_data_is_left_to_the_split_to_refuse():
    """Per-class sizes never fail on small classes; a validation *total* that the data cannot hold
    is refused, in one line saying what fits, by the split itself."""
    import numpy as np

    from autoaug.proxy_models.data import DatasetError
    from autoaug.proxy_models.splits import reduced_split

    counts = [20] * 10
    resolved = TrainConfig.from_preset("proxy-cpu").resolved(counts, data_image_size=32)
    assert (resolved.train_size, resolved.val_size) == (1000, 1000)
    with pytest.raises(
        DatasetError,
        match=r"train_size 1000 \+ val_size 1000 exceeds the dataset's 200 images; .*"
        r"--train-size 100 --val-size 100",
    ):
        reduced_split(np.repeat(np.arange(10), counts), resolved.train_size, resolved.val_size, seed=0)


def test_resolution_needs_the_data_it_depends_on():
    per_class = TrainConfig.from_preset("eval-cpu")
    with pytest.raises(
        ValueError, match=r"train_per_class=100 is resolved against the data: pass the images per class"
    ):
        per_class.resolved(data_image_size=32)
    with pytest.raises(ValueError, match=r"image_size is automatic \(the data's own size\): pass data_image_size"):
        per_class.resolved([5000] * 10)
    with pytest.raises(ValueError, match=r"class_counts must be non-negative image counts with at least one image"):
        per_class.resolved([0, 0], data_image_size=32)
    totals = TrainConfig.from_preset("smoke")  # nothing to resolve: a total split, 32x32
    assert totals.is_resolved and totals.resolved() is totals
    # Totals are kept as they are, "the rest" (None) included: only the per-class and automatic fields change.
    final = TrainConfig.from_preset("final").resolved([5000] * 10, data_image_size=32)
    assert (final.train_size, final.val_size, final.image_size) == (None, 0, 32)


def test_a_layer_that_sizes_the_split_one_way_replaces_the_presets_other_way():
    """--train-size (or train_size: in a file) on a per-class preset gives a total; --train-per-class
    on a total preset sizes per class; the bounds alone keep the preset's per-class sizing."""
    total = TrainConfig.from_preset("proxy-cpu", train_size=500)
    assert (total.train_size, total.train_per_class, total.min_train_size, total.max_train_size) == (
        500,
        None,
        None,
        None,
    )
    rest = TrainConfig.from_preset("eval-cpu", train_size=None)  # every image trains
    assert (rest.train_size, rest.train_per_class) == (None, None)
    per_class = TrainConfig.from_preset("cpu", train_per_class=50)
    assert (per_class.train_size, per_class.train_per_class) == (None, 50)
    wider = TrainConfig.from_preset("proxy-cpu", max_train_size=4300)
    assert (wider.train_per_class, wider.min_train_size, wider.max_train_size) == (100, 1000, 4300)
    with pytest.raises(ValueError, match="both size the training split"):
        TrainConfig.from_preset("cpu", train_size=500, train_per_class=50)


def test_sizing_fields_round_trip_and_appear_in_records_only_when_used():
    per_class = TrainConfig.from_preset("proxy-cpu", data="d.parquet")
    d = json.loads(json.dumps(per_class.to_dict()))
    assert (d["train_per_class"], d["min_train_size"], d["max_train_size"], d["image_size"]) == (100, 1000, 2000, None)
    assert TrainConfig.from_dict(d) == per_class
    plain = TrainConfig.from_preset("cpu", image_size="auto")
    assert plain.image_size is None and "train_per_class" not in plain.to_dict()
    assert TrainConfig.from_dict(plain.to_dict()) == plain
    assert TrainConfig.from_dict({"train_per_class": 50}).train_size is None  # not the default's 4,000
    with pytest.raises(ValueError, match="both size the training split"):
        TrainConfig.from_dict({"train_per_class": 50, "train_size": 4000})
    # A record that lacks the fields (written before they existed) had them unset.
    resolved = per_class.resolved([5000] * 10, data_image_size=32)
    assert resolved.changed_fields(resolved.to_dict()) == []
    assert [k for k, _, _ in per_class.changed_fields(resolved.to_dict())] == [
        "train_size",
        "train_per_class",
        "min_train_size",
        "max_train_size",
        "image_size",
    ]


def test_sizing_record_and_descriptions(gtsrb_counts):
    from autoaug.proxy_models.train import sizing_record

    requested = TrainConfig.from_preset("proxy-cpu")
    resolved = requested.resolved(gtsrb_counts, data_image_size=32)
    record = sizing_record(requested, resolved, num_classes=43)
    assert record == {
        "requested": {
            "train_size": None,
            "val_size": 1000,
            "train_per_class": 100,
            "min_train_size": 1000,
            "max_train_size": 2000,
            "image_size": None,
        },
        "resolved": {"train_size": 2000, "val_size": 1000, "image_size": 32},
        "num_classes": 43,
    }
    assert (
        requested.describe_split() == "100 training images per class (1,000 to 2,000 in all), 1,000 validation images"
    )
    assert resolved.describe_split() == "2,000 training images, 1,000 validation images"
    assert TrainConfig.from_preset("final").describe_split() == "every image trains, no validation"
    assert TrainConfig.from_preset("paper").describe_split() == "4,000 training images, the rest validate"
    # what a search prints of its proxy: the recipe, and the numerics when they are not float32
    assert (
        requested.describe_recipe()
        == "120 epochs, batch 64, lr 0.2, seed 0, bfloat16 autocast where native, channels-last"
    )
    assert TrainConfig.from_preset("eval-cpu").describe_recipe() == "120 epochs, batch 64, lr 0.2, seed 0"


def test_warmup_cosine_schedule():
    f = WarmupCosine(warmup_steps=10, total_steps=110)
    assert [f(s) for s in (0, 4, 9)] == pytest.approx([0.1, 0.5, 1.0])  # linear warm-up, per step
    assert f(10) == pytest.approx(1.0)
    assert f(60) == pytest.approx(0.5)  # half-way through the cosine
    assert f(109) == pytest.approx(0.5 * (1 + math.cos(math.pi * 99 / 100)))
    values = [f(s) for s in range(10, 110)]
    assert all(a >= b for a, b in zip(values, values[1:]))
    assert WarmupCosine(0, 100)(0) == 1.0


def test_learner_schedules_per_step_and_is_seeded():
    cfg = TrainConfig.from_preset("smoke", epochs=2, warmup_epochs=1, lr=0.2)
    torch.manual_seed(0)
    a = Learner(cfg, num_classes=3, steps_per_epoch=4)
    torch.manual_seed(0)
    b = Learner(cfg, num_classes=3, steps_per_epoch=4)
    assert all(torch.equal(x, y) for x, y in zip(a.model.state_dict().values(), b.model.state_dict().values()))
    assert a.optimizer.param_groups[0]["nesterov"] and a.optimizer.param_groups[0]["weight_decay"] == 5e-4
    g = torch.Generator().manual_seed(0)
    batch = (torch.randn(8, 3, 16, 16, generator=g), torch.randint(0, 3, (8,), generator=g))
    lrs = []
    for _ in range(8):
        lrs.append(a.lr)
        a.train_epoch([batch])
    assert lrs[:4] == pytest.approx([0.05, 0.1, 0.15, 0.2])  # warm-up over the first epoch's 4 steps
    assert lrs[4] == pytest.approx(0.2) and lrs[7] < lrs[5] < lrs[4]
    assert a.lr == pytest.approx(0.0, abs=1e-12)  # cosine reaches 0 after the last step
    stats = b.train_epoch([batch, batch])
    assert stats.seen == 16 and 0 <= stats.accuracy <= 1 and stats.loss > 0


def test_evaluation_counts_right_predictions_per_class():
    """The per-class counts are those of the predictions the accuracy is computed from: correct and
    seen per label; balanced accuracy is their mean recall over the classes present."""
    from autoaug.core.metrics import balanced_accuracy

    cfg = TrainConfig.from_preset("smoke")
    torch.manual_seed(0)
    learner = Learner(cfg, num_classes=4, steps_per_epoch=1)
    g = torch.Generator().manual_seed(1)
    # Class 3 is absent: it has no accuracy and does not count in the balanced accuracy.
    batches = [(torch.randn(n, 3, 16, 16, generator=g), torch.randint(0, 3, (n,), generator=g)) for n in (7, 5)]
    stats = learner.evaluate_per_class(batches)
    learner.model.eval()
    with torch.inference_mode():
        preds = torch.cat([learner.model(x).argmax(1) for x, _ in batches])
    labels = torch.cat([y for _, y in batches])
    assert stats.class_total == tuple(int((labels == c).sum()) for c in range(4)) and stats.class_total[3] == 0
    assert stats.class_correct == tuple(int(((labels == c) & (preds == c)).sum()) for c in range(4))
    assert stats.seen == 12 and stats.accuracy == pytest.approx(float((preds == labels).float().mean()))
    assert learner.evaluate(batches) == (stats.accuracy, stats.loss)
    assert stats.image_correct is None and stats.image_loss is None  # only when asked
    per = learner.evaluate_per_class(batches, per_image=True)
    assert per.image_correct.tolist() == (preds == labels).tolist()  # each image, in the loader's order
    assert per.image_loss.shape == (12,) and per.image_loss.mean() == pytest.approx(stats.loss, rel=1e-5)
    assert (per.accuracy, per.class_correct) == (stats.accuracy, stats.class_correct)
    recalls = [stats.class_correct[c] / stats.class_total[c] for c in range(3)]
    assert stats.balanced_accuracy == pytest.approx(sum(recalls) / 3)
    assert balanced_accuracy([1, 0, 5], [1, 4, 10]) == pytest.approx((1 + 0 + 0.5) / 3)
    assert math.isnan(balanced_accuracy([0], [0]))


def test_result_history_csv(tmp_path):
    history = [
        {"epoch": 1, "val_accuracy": None, "lr": 0.1},
        {"epoch": 2, "val_accuracy": 0.5, "lr": 0.0, "test_accuracy": 0.4},
    ]
    write_history_csv(history, tmp_path / "m.csv")
    assert (tmp_path / "m.csv").read_text().splitlines() == [
        "epoch,val_accuracy,lr,test_accuracy",
        "1,,0.1,",
        "2,0.5,0.0,0.4",
    ]


# ------------------------------------------------------------------------------------------------
# Errors before the first epoch
# ------------------------------------------------------------------------------------------------
def _never(metrics):
    raise AssertionError(f"report called although the run should not start: {metrics}")


def test_missing_data_source_is_an_error():
    with pytest.raises(ValueError, match=r"TrainConfig.data is not set"):
        train(TrainConfig.from_preset("smoke"), presets.resolve("standard"), report=_never)


def test_nonexistent_data_path_raises_before_training(tmp_path):
    cfg = TrainConfig.from_preset("smoke", data=str(tmp_path / "nope.parquet"))
    with pytest.raises(ValueError, match=r"dataset not found: .*nope.parquet"):
        train(cfg, presets.resolve("standard"), report=_never)


def test_bad_policy_is_an_error(cifar_train):
    cfg = TrainConfig.from_preset("smoke", data=str(cifar_train))
    with pytest.raises(ValueError, match=r"policy must be a policies.Policy"):
        train(cfg, 42, report=_never)
    with pytest.raises(ValueError, match=r"no-such-policy"):
        train(cfg, "no-such-policy", report=_never)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error on a machine without CUDA")
def test_cuda_device_without_cuda_is_an_error(cifar_train):
    cfg = TrainConfig.from_preset("smoke", data=str(cifar_train), device="cuda")
    with pytest.raises(ValueError, match=r"device='cuda' but CUDA is not available"):
        train(cfg, "standard", report=_never)


def test_split_too_large_for_the_dataset(cifar_test):
    cfg = TrainConfig.from_preset("smoke", data=str(cifar_test), train_size=9000, val_size=2000)
    with pytest.raises(ValueError, match=r"train_size 9000 \+ val_size 2000 exceeds the dataset's 10000 images"):
        train(cfg, "standard", report=_never)


def test_missing_checkpoint_to_resume_from(cifar_train, tmp_path):
    cfg = TrainConfig.from_preset("smoke", data=str(cifar_train))
    with pytest.raises(FileNotFoundError, match=r"no trainer checkpoint at .*checkpoint.pt"):
        train(cfg, "standard", report=_never, resume_from=tmp_path)
    (tmp_path / CHECKPOINT_NAME).write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match=r"is not a readable trainer checkpoint"):
        train(cfg, "standard", report=_never, resume_from=tmp_path)


# ------------------------------------------------------------------------------------------------
# Real smoke runs (shared by the tests below to keep the suite short)
# ------------------------------------------------------------------------------------------------
def small_test_set(cifar_test, folder, n=500):
    """The first ``n`` rows of every 20 of the real CIFAR-10 test Parquet (all classes; the file is
    sorted by class), so that test evaluation stays quick."""
    import pyarrow.parquet as pq

    table = pq.read_table(cifar_test)
    subset = table.take(list(range(0, table.num_rows, table.num_rows // n))[:n])
    path = folder / "test-small.parquet"
    pq.write_table(subset.replace_schema_metadata(table.schema.metadata), path)
    return path


@pytest.fixture(scope="module")
def smoke_config(cifar_train, cifar_test, tmp_path_factory):
    # 3 epochs so that resuming after epoch 1 still has two epochs (and a scheduler) to get right.
    test_data = small_test_set(cifar_test, tmp_path_factory.mktemp("test-data"))
    return TrainConfig.from_preset("smoke", data=str(cifar_train), test_data=str(test_data), epochs=3, num_threads=1)


@pytest.fixture(scope="module")
def aa_policy():
    return presets.resolve("autoaugment-cifar10")


@pytest.fixture(scope="module")
def full_run(smoke_config, aa_policy, tmp_path_factory):
    reports = []
    ckpt = tmp_path_factory.mktemp("full")
    # The run sets torch's threads and deterministic flag to its own and must put the process's
    # back: make them differ (whatever an earlier test of this process left).
    process_threads, process_deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    process_warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    threads_before = smoke_config.num_threads + 1
    deterministic_before = not smoke_config.deterministic
    torch.set_num_threads(threads_before)
    torch.use_deterministic_algorithms(deterministic_before)
    rng_before = torch.get_rng_state()
    validations = []
    try:
        result = train(
            smoke_config,
            aa_policy,
            report=reports.append,
            checkpoint_dir=ckpt,
            on_validate=lambda epoch, stats, val: validations.append((epoch, stats, val)),
        )
        threads_after = torch.get_num_threads()
        deterministic_after = torch.are_deterministic_algorithms_enabled()
    finally:
        torch.set_num_threads(process_threads)
        torch.use_deterministic_algorithms(process_deterministic, warn_only=process_warn_only)
    return {
        "deterministic_before": deterministic_before,
        "deterministic_after": deterministic_after,
        "result": result,
        "reports": reports,
        "ckpt": ckpt,
        "threads_before": threads_before,
        "threads_after": threads_after,
        "rng_before": rng_before,
        "validations": validations,
    }


@pytest.mark.slow
def test_on_validate_gets_each_images_outcome_on_the_splits_validation_images(full_run, smoke_config):
    """What a paired per-image comparison reads: every validated epoch, each validation image's
    right/wrong and loss, in the order of the split's validation indices; the run's reported
    accuracy is their mean (and the hook changes nothing:
    ``test_resume_from_checkpoint_ends_with_the_uninterrupted_metrics`` compares this run with one
    without it)."""
    from autoaug.proxy_models.data import open_dataset
    from autoaug.proxy_models.splits import config_split

    validations, history = full_run["validations"], full_run["result"].history
    assert [e for e, _, _ in validations] == [1, 2, 3]
    split = config_split(open_dataset(smoke_config.data), full_run["result"].config)
    for (_epoch, stats, val), row in zip(validations, history):
        assert list(val) == list(split.val) and stats.image_correct.shape == (len(split.val),)
        assert stats.image_correct.mean() == pytest.approx(row["val_accuracy"])
        assert stats.image_loss.mean() == pytest.approx(row["val_loss"], rel=1e-5)


@pytest.mark.slow
def test_smoke_run_learns_above_chance(full_run):
    result: TrainResult = full_run["result"]
    assert result.val_accuracy > 0.15  # 10 classes: chance is 0.10
    assert result.test_accuracy > 0.15
    # Per-class counts of the test pass: every test image once, summing to the accuracy.
    assert len(result.test_class_total) == 10 and sum(result.test_class_total) == 500
    assert sum(result.test_class_correct) == round(result.test_accuracy * 500)
    assert 0.0 < result.test_balanced_accuracy <= 1.0
    assert result.history[-1]["train_loss"] < result.history[0]["train_loss"]
    assert isinstance(result.model, torch.nn.Module) and not result.model.training
    assert len(result.split_fingerprint) == 64 and len(result.dataset_fingerprint) == 64
    assert result.train_time_s > 0


@pytest.mark.slow
def test_reports_once_per_epoch_after_writing_the_checkpoint(full_run):
    reports = full_run["reports"]
    assert [m["epoch"] for m in reports] == [1, 2, 3]
    for m in reports:
        assert REPORTED_KEYS <= set(m)
        assert 0 <= m["train_accuracy"] <= 1 and 0 <= m["val_accuracy"] <= 1
        assert m["images_per_sec"] > 0 and m["epoch_time_s"] > 0
        assert m["checkpoint_dir"] == str(full_run["ckpt"])
    assert "test_accuracy" in reports[-1] and "test_accuracy" not in reports[0]
    assert reports == full_run["result"].history
    state = load_checkpoint(full_run["ckpt"])
    assert state["epoch"] == 3
    assert {"model", "optimizer", "scheduler", "loader", "rng", "config", "history"} <= set(state)
    assert TrainConfig.from_dict(state["config"]) == full_run["result"].config


@pytest.mark.slow
def test_global_torch_state_is_restored(full_run):
    assert full_run["threads_after"] == full_run["threads_before"]
    assert torch.equal(torch.get_rng_state(), full_run["rng_before"])
    assert full_run["deterministic_after"] == full_run["deterministic_before"]


@pytest.mark.slow
def test_resume_from_checkpoint_ends_with_the_uninterrupted_metrics(full_run, smoke_config, aa_policy, tmp_path):
    """A run of the same seed (without the module run's ``on_validate`` hook), interrupted after its
    first epoch and resumed from its checkpoint, ends with the uninterrupted run's metrics of every
    epoch, its test accuracy and its weights: the same seed gives identical runs, and a resume
    changes nothing. (One run for both: a smoke run costs the suite about 10 CPU-s.)"""

    class Interrupt(Exception):
        pass

    def stop_after_first(metrics):
        if metrics["epoch"] == 1:
            raise Interrupt

    with pytest.raises(Interrupt):
        train(smoke_config, aa_policy, report=stop_after_first, checkpoint_dir=tmp_path)
    assert load_checkpoint(tmp_path)["epoch"] == 1

    reports = []
    resumed = train(smoke_config, aa_policy, report=reports.append, checkpoint_dir=tmp_path, resume_from=tmp_path)
    assert [m["epoch"] for m in reports] == [2, 3]  # only the remaining epochs run
    assert metrics_of(resumed.history) == metrics_of(full_run["result"].history)
    assert resumed.val_accuracy == full_run["result"].val_accuracy
    assert resumed.test_accuracy == full_run["result"].test_accuracy
    first = full_run["result"].model.state_dict()
    assert all(torch.equal(first[k], v) for k, v in resumed.model.state_dict().items())


@pytest.mark.slow
def test_resume_refuses_a_different_config_or_policy(full_run, smoke_config, aa_policy):
    with pytest.raises(ValueError, match=r"cannot resume: the config differs .*lr: checkpoint 0.1 vs now 0.2"):
        train(dataclasses.replace(smoke_config, lr=0.2), aa_policy, report=_never, resume_from=full_run["ckpt"])
    with pytest.raises(
        ValueError, match=r"cannot resume: the checkpoint was trained with policy 'autoaugment-cifar10'"
    ):
        train(smoke_config, presets.resolve("standard"), report=_never, resume_from=full_run["ckpt"])


@pytest.mark.slow
def test_eval_from_validates_only_the_last_epochs_and_leaves_training_unchanged(smoke_config, aa_policy, full_run):
    # The search's re-scoring runs validate a large set over their last epochs only; their score
    # must be the one an every-epoch run gives (validation draws nothing from the training RNGs).
    result = train(dataclasses.replace(smoke_config, eval_from=3, test_data=None), aa_policy)
    assert [m["val_accuracy"] is None for m in result.history] == [True, True, False]
    full = full_run["result"].history
    assert [m["train_loss"] for m in result.history] == [m["train_loss"] for m in full]
    assert result.val_accuracy == full[-1]["val_accuracy"]


@pytest.mark.slow
def test_seed_changes_the_run_and_eval_every_skips_validation(smoke_config, full_run):
    cfg = dataclasses.replace(smoke_config, seed=1, test_data=None, eval_every=2)
    result = train(cfg, "standard")
    assert [m["val_accuracy"] is None for m in result.history] == [True, False, False]  # epoch 2, and the last
    assert result.test_accuracy is None
    assert result.history[0]["train_loss"] != full_run["result"].history[0]["train_loss"]
    # The split depends on split_seed only, so trials with different seeds stay comparable.
    assert result.split_fingerprint == full_run["result"].split_fingerprint
