"""The trainer's speed options (``amp``/``amp_dtype``, ``tf32``, ``compile``, ``eval_batch_size``,
``loader_threads``): validated in one line, absent from the records of configs that do not use
them (so old run records keep their digests and are reused), reachable with ``--set`` on
``train``/``compare``/``search``; the smoke preset trains with compile and bfloat16 on the CPU,
and a lever that fails falls back with one warning and trains on."""

from __future__ import annotations

import dataclasses
import json
import warnings
from pathlib import Path

import pytest
import torch
from torch import nn

from autoaug.core.errors import AutoaugWarning
from autoaug.proxy_models.learner import Learner
from autoaug.proxy_models.train import PRESETS, TrainConfig, amp_dtype, load_checkpoint, train
from autoaug.proxy_models.train_config import RESUMABLE_CHANGES

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
SPEED_FIELDS = ("amp_dtype", "tf32", "compile", "eval_batch_size", "loader_threads")
METRIC_KEYS = ("epoch", "train_loss", "train_accuracy", "val_loss", "val_accuracy", "lr")


def metrics_of(history):
    return [{k: row[k] for k in METRIC_KEYS} for row in history]


def autoaug_warnings(records):
    return [str(w.message) for w in records if issubclass(w.category, AutoaugWarning)]


# ------------------------------------------------------------------------------------------------
# Validation
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "overrides, match",
    [
        (
            {"amp_dtype": "fp8"},
            r"^TrainConfig.amp_dtype must be 'bfloat16' or 'float16' or None \(the device's "
            r"default\), got 'fp8'$",
        ),
        ({"amp_dtype": True}, r"^TrainConfig.amp_dtype must be .*, got True$"),
        (
            {"tf32": "yes"},
            r"^TrainConfig.tf32 must be true, false or None \(torch's settings as they are\), got 'yes'$",
        ),
        (
            {"compile": "fast"},
            r"^TrainConfig.compile must be true, false or a torch.compile mode \('default', "
            r"'reduce-overhead', 'max-autotune', 'max-autotune-no-cudagraphs'\), got 'fast'$",
        ),
        ({"compile": None}, r"^TrainConfig.compile must be true, false or a torch.compile mode .*, got None$"),
        ({"compile": 1}, r"^TrainConfig.compile must be .*, got 1$"),
        ({"eval_batch_size": 0}, r"^TrainConfig.eval_batch_size must be a positive integer or None, got 0$"),
        ({"eval_batch_size": 2.5}, r"^TrainConfig.eval_batch_size must be a positive integer or None, got 2.5$"),
        ({"loader_threads": -1}, r"^TrainConfig.loader_threads must be a positive integer or None, got -1$"),
        (
            {"eval_epochs": [0]},
            r"^TrainConfig.eval_epochs must be a list of epochs, integers in \[1, epochs=2\], "
            r"or None, got \[0\]$",
        ),
        ({"eval_epochs": [3]}, r"^TrainConfig.eval_epochs must be a list of epochs, .*, got \[3\]$"),
        ({"eval_epochs": "1,2"}, r"^TrainConfig.eval_epochs must be a list of epochs, .*, got '1,2'$"),
        ({"eval_epochs": [1.5]}, r"^TrainConfig.eval_epochs must be a list of epochs, .*, got \[1.5\]$"),
    ],
)
def test_bad_speed_options_are_one_line_naming_key_value_and_expected(overrides, match):
    with pytest.raises(ValueError, match=match) as info:
        TrainConfig.from_preset("smoke", **overrides)
    assert "\n" not in str(info.value)


def test_good_speed_options_round_trip_and_compile_has_one_spelling():
    cfg = TrainConfig.from_preset(
        "smoke",
        amp=True,
        amp_dtype="bfloat16",
        tf32=True,
        compile="max-autotune",
        eval_batch_size=1024,
        loader_threads=1,
    )
    d = json.loads(json.dumps(cfg.to_dict()))
    assert {k: d[k] for k in SPEED_FIELDS} == {
        "amp_dtype": "bfloat16",
        "tf32": True,
        "compile": "max-autotune",
        "eval_batch_size": 1024,
        "loader_threads": 1,
    }
    assert TrainConfig.from_dict(d) == cfg
    # compile=true and compile="default" are the same run: one dict, one digest
    assert TrainConfig(compile="default") == TrainConfig(compile=True)
    assert TrainConfig(compile="default").to_dict() == TrainConfig(compile=True).to_dict()


def test_a_bad_speed_option_on_the_command_line_is_one_line_exit_2(tmp_path, capsys):
    from autoaug.launch.cli import main

    (tmp_path / "train.parquet").write_bytes(b"PAR1")
    code = main(
        [
            "train",
            "--data",
            str(tmp_path / "train.parquet"),
            "--preset",
            "smoke",
            "--set",
            "compile=fast",
            "--out",
            str(tmp_path / "o"),
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert (
        err.startswith("autoaug: error: ") and "TrainConfig.compile must be true, false or a torch.compile mode" in err
    )
    assert "got 'fast'" in err and not (tmp_path / "o").exists()


# ------------------------------------------------------------------------------------------------
# Records and digests
# ------------------------------------------------------------------------------------------------
def _recorded_train_configs():
    """Training configs recorded by earlier runs (before the speed options existed)."""
    search = json.loads((RESULTS / "search-quality-cpu-eval-cpu" / "search_result.json").read_text())
    quality = json.loads((RESULTS / "search-quality-cpu-eval-cpu" / "quality.json").read_text())
    return [search["provenance"]["search"]["config"]["train"], quality["eval_train_config"]]


#: sha256 of each preset's to_dict() (JSON, sorted keys) as computed before the speed options existed,
#: but for ``proxy-cpu``, which turned bf16 + channels_last on once measured
#: (benchmarks/results/trial-throughput/README.md): another recipe, on purpose.
PRESET_DIGESTS = {
    "smoke": "0e221e6bdb57c86326a2175fdf403273600a2b649845282fa425a2b5723f78ed",
    "cpu": "678e842589f589aa4b17173a793f521124815a8ff29cd52a90ee0d02749489e3",
    # amp "native" (was true): float32 on CPUs that would only emulate bfloat16
    "proxy-cpu": "6a1067e7c65af2fc38ca96ac10a5ad65bbb48e9d087200114acf0068a96df645",
    "eval-cpu": "7ea85dfd1db03f7fc8a438a4462615ad4b3880f9e12536e0169190355d5039b2",
    "paper": "f325c2f9d8e4a832212d72744f448dde46c00585c2a14f3b0a85eb8bb6c318dd",
    "final": "76a61fabafe15ff8591bb731322910a0d51d1d1ef74bc2740415b0b53c381944",
}


def test_configs_without_the_new_keys_keep_their_dicts_and_digests():
    import hashlib

    def digest(d):
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()

    assert {name: digest(cfg.to_dict()) for name, cfg in PRESETS.items()} == PRESET_DIGESTS
    for name, cfg in PRESETS.items():  # only the search's proxy uses one: the others' records are reused
        assert set(SPEED_FIELDS) & set(cfg.to_dict()) == ({"amp_dtype"} if name == "proxy-cpu" else set())
    proxy = PRESETS["proxy-cpu"]
    assert (proxy.amp, proxy.amp_dtype, proxy.channels_last, proxy.compile) == ("native", "bfloat16", True, False)
    assert (PRESETS["eval-cpu"].amp, PRESETS["eval-cpu"].channels_last) == (None, None)  # the yardstick stays float32
    for recorded in _recorded_train_configs():
        again = TrainConfig.from_dict(recorded).to_dict()
        # eval_from predates this change (it is in every record written since it exists)
        assert {k: v for k, v in again.items() if k != "eval_from"} == recorded
        assert TrainConfig.from_dict(recorded).changed_fields(recorded) == []  # reused, resumed
    # Set to their defaults explicitly, they are still left out.
    plain = TrainConfig.from_preset(
        "cpu", amp_dtype=None, tf32=None, compile=False, eval_batch_size=None, loader_threads=None
    )
    assert plain.to_dict() == TrainConfig.from_preset("cpu").to_dict()


def test_which_speed_options_change_what_a_run_computes():
    """Numerics (autocast dtype, TF32, compiled kernels) make another run: not resumed, not reused;
    the loader's threads (DALI's output does not depend on them) and the evaluation batch (training
    is untouched) may change when a run is resumed."""
    from autoaug.launch.compare.runner import _REUSABLE_CHANGES

    recorded = TrainConfig.from_preset("cpu").to_dict()  # a record without the new keys
    defaults = {f.name: f.default for f in dataclasses.fields(TrainConfig)}
    for key, value in (("amp_dtype", "float16"), ("tf32", True), ("compile", True)):
        changed = TrainConfig.from_preset("cpu", **{key: value}).changed_fields(recorded, ignore=RESUMABLE_CHANGES)
        assert changed == [(key, defaults[key], value)]
    assert {"loader_threads", "eval_batch_size"} <= RESUMABLE_CHANGES
    assert "loader_threads" in _REUSABLE_CHANGES and "eval_batch_size" not in _REUSABLE_CHANGES
    assert "compile" not in _REUSABLE_CHANGES and "amp_dtype" not in _REUSABLE_CHANGES


def test_speed_options_are_reachable_with_set_on_train_compare_and_search(tmp_path):
    from autoaug.launch import cli, compare_cmd, train_cmd
    from autoaug.launch.search_cmd import build_search_config

    (tmp_path / "train.parquet").write_bytes(b"PAR1")
    (tmp_path / "test.parquet").write_bytes(b"PAR1")
    data = str(tmp_path / "train.parquet")
    parse = cli.build_parser().parse_args
    sets = [
        "--set",
        "compile=true",
        "--set",
        "amp=true",
        "--set",
        "amp_dtype=bfloat16",
        "--set",
        "eval_batch_size=1000",
        "--set",
        "loader_threads=1",
        "--set",
        "tf32=true",
    ]
    expected = {
        "compile": True,
        "amp": True,
        "amp_dtype": "bfloat16",
        "eval_batch_size": 1000,
        "loader_threads": 1,
        "tf32": True,
    }
    _, trained = train_cmd._settings(parse(["train", "--data", data, "--preset", "smoke", *sets]))
    compared = compare_cmd.build_compare_config(parse(["compare", "--data", data, "--preset", "smoke", *sets])).train
    searched = build_search_config(
        parse(["search", "--data", data, "--preset", "smoke", *[s.replace("compile", "train.compile") for s in sets]])
    ).train
    for cfg in (trained, compared, searched):
        assert {k: getattr(cfg, k) for k in expected} == expected


# ------------------------------------------------------------------------------------------------
# Levers without data
# ------------------------------------------------------------------------------------------------
def test_bfloat16_on_a_gpu_without_it_falls_back_to_float16_with_one_warning(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    with warnings.catch_warnings(record=True) as records:
        warnings.simplefilter("always")
        dtype = amp_dtype(TrainConfig(amp=True, amp_dtype="bfloat16", device="cpu"), torch.device("cuda"))
    assert dtype == torch.float16
    assert autoaug_warnings(records) == [
        "amp_dtype bfloat16: this GPU has no bfloat16 support; autocast uses float16 (with gradient scaling) instead"
    ]
    assert amp_dtype(TrainConfig(amp=True), torch.device("cuda")) == torch.float16  # CUDA's default


def test_autocast_on_a_cpu_without_native_instructions_says_it_runs_emulated(monkeypatch):
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: False)
    with warnings.catch_warnings(record=True) as records:
        warnings.simplefilter("always")
        assert amp_dtype(TrainConfig(amp=True), torch.device("cpu")) == torch.bfloat16
    assert [m for m in autoaug_warnings(records) if "emulated" in m] == [
        "amp on the CPU with bfloat16: this CPU has no native bfloat16 instructions, so autocast runs emulated and "
        "is likely slower than float32 (set amp=false, or amp='native')"
    ]


@pytest.mark.parametrize("native", [True, False])
def test_native_amp_autocasts_only_where_the_cpu_has_the_instructions(monkeypatch, native):
    """The search's proxy (amp 'native'): bfloat16 where the CPU computes it natively, float32
    elsewhere (emulated bfloat16 costs 3-4x the CPU), without a warning either way."""
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: native)
    cfg = TrainConfig.from_preset("smoke", amp="native", amp_dtype="bfloat16")
    with warnings.catch_warnings(record=True) as records:
        warnings.simplefilter("always")
        learner = Learner(cfg, num_classes=3, steps_per_epoch=2)
    assert learner.amp is native and not autoaug_warnings(records)
    assert "bfloat16 autocast where native" in cfg.describe_recipe()
    with pytest.raises(ValueError, match=r"TrainConfig.amp must be true, false, None .* or 'native'"):
        TrainConfig(amp="yes")


def test_float16_autocast_on_the_cpu_scales_the_loss_and_trains():
    cfg = TrainConfig.from_preset("smoke", amp=True, amp_dtype="float16")
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", AutoaugWarning)  # emulated on most CPUs
        learner = Learner(cfg, num_classes=3, steps_per_epoch=2)
    assert learner.amp_dtype == torch.float16 and learner.scaler.is_enabled()
    g = torch.Generator().manual_seed(0)
    batch = (torch.randn(8, 3, 16, 16, generator=g), torch.randint(0, 3, (8,), generator=g))
    stats = learner.train_epoch([batch, batch])
    assert stats.seen == 16 and stats.loss == stats.loss


def test_tf32_is_set_for_a_cuda_run_and_put_back():
    from autoaug.proxy_models.precision import tf32_state as _tf32_state
    from autoaug.proxy_models.train import _TorchState

    before = _tf32_state()
    for on in (True, False):
        with _TorchState(TrainConfig(tf32=on, device="cpu"), torch.device("cuda")):
            kind, (matmul, conv) = _tf32_state()
            assert (
                (matmul, conv) == (("tf32", "tf32") if on else ("ieee", "ieee"))
                if kind == "precision"
                else (matmul, conv) == (on, on)
            )
        assert _tf32_state() == before
    with _TorchState(TrainConfig(tf32=True, device="cpu"), torch.device("cpu")):
        assert _tf32_state() == before  # nothing to do on the CPU


# ------------------------------------------------------------------------------------------------
# The smoke preset on the CPU, for real
# ------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def smoke(cifar_train):
    # One thread: what a search trial runs with (and the runs below compare exactly). A quarter of
    # the preset's images (8 batches, 2 validation batches of 100 with eval_batch_size=100): these
    # tests compare runs with each other, which needs no more.
    return TrainConfig.from_preset(
        "smoke", data=str(cifar_train), epochs=2, num_threads=1, train_size=256, val_size=128
    )


@pytest.fixture(scope="module")
def eager_run(smoke):
    return train(smoke, "autoaugment-cifar10")


def test_validating_only_some_epochs_changes_nothing_in_training(smoke, eager_run):
    """What a search trial does (validate only the epochs its score is read from): every epoch
    trains as before, the validated epochs score as before, the others report no validation."""
    cfg = dataclasses.replace(smoke, eval_epochs=[])  # only the last epoch, which always is
    assert cfg.eval_epochs == () and TrainConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
    sparse = train(cfg, "autoaugment-cifar10")
    full = metrics_of(eager_run.history)
    assert [(m["train_loss"], m["train_accuracy"]) for m in metrics_of(sparse.history)] == [
        (m["train_loss"], m["train_accuracy"]) for m in full
    ]
    assert [m["val_accuracy"] for m in metrics_of(sparse.history)] == [None, full[1]["val_accuracy"]]
    assert sparse.val_accuracy == eager_run.val_accuracy
    assert [cfg.validates(e) for e in (1, 2)] == [False, True]
    assert [dataclasses.replace(cfg, eval_epochs=[1]).validates(e) for e in (1, 2)] == [True, True]


class _Spy:
    """Counts ``torch.compile`` calls and hands back what the real one returns."""

    def __init__(self, real):
        self.real, self.calls = real, 0

    def __call__(self, model, **kwargs):
        self.calls += 1
        return self.real(model, **kwargs)


#: Compiling costs 20-70 s the first time on 2 cores (cached on disk afterwards): with the integration tests.
_SLOW = pytest.mark.slow


@pytest.mark.parametrize(
    "changes",
    [
        pytest.param({"amp": True}, id="bf16"),
        # One compile (a cold cache cost 29-52 s a graph in full suites here): compile and bf16 together, the
        # combination with the most to go wrong; compile alone is the same wrapping without autocast.
        pytest.param({"compile": True, "amp": True}, id="compile+bf16", marks=_SLOW),
    ],
)
def test_the_smoke_preset_trains_on_the_cpu_with_compile_and_bf16(smoke, changes, monkeypatch, tmp_path):
    spy = _Spy(torch.compile)
    monkeypatch.setattr(torch, "compile", spy)
    # 128 images: what is checked is the mechanism (bf16 is emulated, 3.6x float32's CPU, on a CPU without it).
    cfg = dataclasses.replace(smoke, train_size=128, val_size=64, **changes)
    with warnings.catch_warnings(record=True) as records:
        warnings.simplefilter("always")
        result = train(cfg, "autoaugment-cifar10", checkpoint_dir=tmp_path)
    # No fallback: compiled / bf16 for real (on a CPU without native bfloat16, emulated, which it says).
    from autoaug.core.machine import machine_kind
    from autoaug.proxy_models.precision import native_on_cpu

    emulated = cfg.amp and not native_on_cpu("bfloat16")
    assert [m for m in autoaug_warnings(records) if not (emulated and "runs emulated" in m)] == []
    assert spy.calls == (1 if cfg.compile else 0)
    assert [m["epoch"] for m in result.history] == [1, 2]
    assert all(m["train_loss"] == m["train_loss"] and m["train_loss"] < 10 for m in result.history)
    assert result.val_accuracy is not None and 0 <= result.val_accuracy <= 1
    assert result.config.to_dict() == cfg.resolved().to_dict()  # recorded with the options it ran with
    assert result.precision == "bfloat16"  # what it computed in, for the run's record
    assert result.machine == machine_kind("cpu")  # and its kind of machine: one seed trains another model elsewhere
    # The checkpoint holds the plain model's weights (no compiled wrapper's key prefix): it loads anywhere.
    state = load_checkpoint(tmp_path)
    assert state["config"].get("compile", False) is cfg.compile
    assert not any(k.startswith("_orig_mod") for k in state["model"])
    assert set(state["model"]) == set(result.model.state_dict())
    if cfg.compile:  # a compiled run is reproducible (compiled again, from the caches)
        assert metrics_of(train(cfg, "autoaugment-cifar10").history) == metrics_of(result.history)


class _FailsToCompile(nn.Module):
    """What ``torch.compile`` gives back when compiling fails at the first call (no C++ compiler)."""

    def forward(self, x):
        raise RuntimeError("simulated: no working C++ compiler found\nsecond line of the report")


class _BackwardOnly(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        raise RuntimeError("simulated: the backward graph does not compile")


class _FailsInBackward(nn.Module):
    """A compiled model whose forward ran (batch-norm statistics updated) and whose backward fails."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        return _BackwardOnly.apply(self.model(x))


def _raise(*args, **kwargs):
    raise RuntimeError("simulated: torch.compile is not supported here")


@pytest.mark.parametrize(
    "failing",
    [
        lambda model, **kw: _FailsToCompile(),
        lambda model, **kw: _FailsInBackward(model),
        _raise,
    ],
    ids=["at-first-call", "in-backward", "at-wrap"],
)
def test_a_compile_that_fails_falls_back_with_one_warning_and_trains_as_eager(smoke, eager_run, failing, monkeypatch):
    monkeypatch.setattr(torch, "compile", failing)
    with warnings.catch_warnings(record=True) as records:
        warnings.simplefilter("always")
        result = train(dataclasses.replace(smoke, compile=True), "autoaugment-cifar10")
    messages = autoaug_warnings(records)
    assert len(messages) == 1 and messages[0].startswith("compile: torch.compile failed (RuntimeError: simulated: ")
    assert messages[0].endswith("); training eagerly (set compile=false to skip the attempt)")
    assert "\n" not in messages[0]
    # The failed step was undone (weights, batch-norm statistics) and redone eagerly: the run is the eager run.
    assert metrics_of(result.history) == metrics_of(eager_run.history)


def test_eval_batch_size_and_loader_threads_change_no_result(smoke, eager_run):
    result = train(dataclasses.replace(smoke, eval_batch_size=100, loader_threads=2), "autoaugment-cifar10")
    got, want = result.history, eager_run.history
    assert [m["train_loss"] for m in got] == [m["train_loss"] for m in want]  # DALI threads: same batches
    assert [m["val_accuracy"] for m in got] == [m["val_accuracy"] for m in want]
    assert [m["val_loss"] for m in got] == pytest.approx([m["val_loss"] for m in want], rel=1e-5)


@pytest.mark.parametrize(
    "amp, native, expected",
    [
        (False, True, "float32"),
        (True, False, "bfloat16"),  # asked for: emulated where the CPU lacks it, still bfloat16
        ("native", True, "bfloat16"),
        ("native", False, "float32"),  # the same config, another machine: another precision
    ],
)
def test_the_precision_a_run_trains_in_is_known_before_it_runs_and_recorded_after(amp, native, expected, monkeypatch):
    """``amp: native`` makes the precision depend on the CPU: two machines train one config in two
    precisions and give two results for one seed, so a run's record says which it was."""
    import autoaug.proxy_models.precision as precision

    monkeypatch.setattr(precision, "native_on_cpu", lambda name: native)
    cfg = TrainConfig(model="resnet-8", amp=amp)
    assert precision.run_precision(cfg, torch.device("cpu")) == expected
    with warnings.catch_warnings():  # (True, False): "runs emulated", said and tested above
        warnings.simplefilter("ignore", AutoaugWarning)
        learner = Learner(cfg, num_classes=10, steps_per_epoch=1, device="cpu")
    assert learner.precision == expected
