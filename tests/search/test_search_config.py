"""SearchConfig: presets, the nested dict form, validation."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from autoaug.proxy_models.train import TrainConfig
from autoaug.search.config import SEARCH_PRESETS, SearchConfig
from autoaug.search.methods.train.method import TrainMethodConfig
from autoaug.search.space import SearchSpace


def test_presets_pick_the_trainer_preset_and_search_settings():
    smoke = SearchConfig.from_preset("smoke", name="s")
    assert smoke.train == TrainConfig.from_preset("smoke")
    assert (smoke.method_settings(TrainMethodConfig).num_trials, smoke.concurrency, smoke.cpus_per_trial) == (4, 2, 1.0)
    paper = SearchConfig.from_preset("paper", name="p")
    assert paper.train.model == "wrn-40-2" and paper.train.epochs == 120
    assert paper.gpus_per_trial == 0.25
    assert set(SEARCH_PRESETS) == {"smoke", "cpu", "gpu", "paper", "density-cpu", "pba-cpu"}
    gpu = SearchConfig.from_preset("gpu")
    assert gpu.train.model == "wrn-40-2" and gpu.train.device == "cuda" and gpu.train.max_val_size == 10000
    assert (gpu.gpus_per_trial, gpu.cpus_per_trial, gpu.concurrency) == (0.125, 2.0, None)
    assert (gpu.method_config.num_trials, gpu.method_config.grace_period, gpu.time_budget_s) == (200, 60, 3600)


def test_the_cpu_preset_validates_on_up_to_5000_images_and_a_given_validation_size_replaces_that(tmp_path):
    """The cpu search scores its trials, calibration and re-scoring runs on up to 5,000 of the
    images its training split leaves (the noise of a score: benchmarks/results/score-noise-cifar10);
    a validation size given in any later layer sizes it instead, without a conflict."""
    from autoaug.launch.cli import build_parser
    from autoaug.launch.search_cmd import build_search_config

    cpu = SearchConfig.from_preset("cpu", name="c")
    assert (cpu.train.val_size, cpu.train.max_val_size) == (None, 5000)
    assert cpu.train.train_per_class == 100 and cpu.rescore_train_config().max_val_size == 5000
    given = SearchConfig.from_dict({"preset": "cpu", "name": "c", "train": {"val_size": 1000}})
    assert (given.train.val_size, given.train.max_val_size) == (1000, None)
    dirs = ["--storage", str(tmp_path / "r"), "--store", str(tmp_path / "s")]
    for argv in (["--val-size", "2000"], ["--set", "train.val_size=2000"]):
        flagged = build_search_config(build_parser().parse_args(["search", "--name", "c", *argv, *dirs]))
        assert (flagged.train.val_size, flagged.train.max_val_size) == (2000, None)
    # and the other way: a cap given later replaces a size
    capped = SearchConfig.from_dict({"preset": "smoke", "name": "c", "train": {"train_size": 64, "max_val_size": 300}})
    assert (capped.train.val_size, capped.train.max_val_size) == (None, 300)


def test_nested_form_overrides_the_preset_and_round_trips_through_json(tmp_path):
    config = SearchConfig.from_dict(
        {
            "preset": "cpu",
            "name": "exp.1",
            "data": "/d/train.parquet",
            "num_trials": 32,
            "train": {"epochs": 3, "lr": 0.1},
            "space": {"exclude_ops": ["SamplePairing"]},
            "storage": str(tmp_path),
            "concurrency": None,
        }
    )
    assert config.train == TrainConfig.from_preset(
        "proxy-cpu", epochs=3, lr=0.1, max_val_size=5000, data="/d/train.parquet"
    )
    assert config.warm_start == "auto" and config.base == "auto" and config.rescore  # measured on the data
    assert config.space == SearchSpace(exclude_ops=("SamplePairing",))
    assert config.method_settings(TrainMethodConfig).num_trials == 32 and config.concurrency is None
    assert config.method_config.grace_period == SEARCH_PRESETS["cpu"]["grace_period"]
    again = SearchConfig.from_dict(json.loads(json.dumps(config.to_dict())))
    assert again == config


def test_a_default_name_is_generated():
    assert SearchConfig.from_preset("smoke").name.startswith("search-")


def test_local_storage_is_made_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert SearchConfig.from_preset("smoke", name="n", storage="runs").storage == str(tmp_path / "runs")
    assert SearchConfig.from_preset("smoke", name="n", storage="s3://b/runs").storage == "s3://b/runs"


def test_relative_warm_start_files_and_sqlite_paths_are_pinned_for_a_resume_from_elsewhere(tmp_path, monkeypatch):
    from autoaug.policies import presets

    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine.json").write_text(presets.resolve("autoaugment-svhn").to_json())
    config = SearchConfig.from_preset(
        "smoke",
        name="n",
        warm_start=["mine.json", "autoaugment-cifar10", "other@2"],
        optuna_storage="sqlite:///studies/s.db",
    )
    assert config.warm_start == (str(tmp_path / "mine.json"), "autoaugment-cifar10", "other@2")
    assert config.optuna_storage == f"sqlite:///{tmp_path}/studies/s.db"
    # Saved and read back from another directory: the same locations.
    monkeypatch.chdir("/")
    again = SearchConfig.from_dict(json.loads(json.dumps(config.to_dict())))
    assert again.warm_start == config.warm_start and again.optuna_storage == config.optuna_storage
    for url in ("sqlite:////abs/s.db", "sqlite:///:memory:", "postgresql://u@h/db"):
        assert SearchConfig.from_preset("smoke", name="n", optuna_storage=url).optuna_storage == url


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"name": "bad name"}, "SearchConfig.name: 'bad name' is invalid"),
        ({"name": "a@b"}, "SearchConfig.name"),
        ({"num_trials": 0}, "num_trials: 0 is invalid; expected an integer >= 1"),
        ({"concurrency": 0}, "concurrency: 0 is invalid"),
        ({"cpus_per_trial": 0}, "cpus_per_trial"),
        ({"gpus_per_trial": 1.5}, "gpus_per_trial: 1.5"),
        ({"sampler": "grid"}, r"sampler: 'grid' is invalid; expected one of \['tpe'"),
        ({"reduction_factor": 1}, "reduction_factor"),
        ({"optuna_storage": "study.db"}, "optuna_storage"),
        ({"verbose": 5}, "verbose"),
        ({"colour": "red"}, r"unknown search config key\(s\) \['colour'\]"),
        ({"train": {"epochz": 2}}, "epochz"),
        ({"space": {"num_sub_policies": 0}}, "SearchSpace.num_sub_policies"),
        ({"startup_trials": -1}, r"startup_trials: -1 is invalid; expected an integer >= 0"),
        ({"sampler": "qmc", "startup_trials": 5}, r"startup_trials: 5 is invalid; expected unset with sampler 'qmc'"),
        ({"rescore_seeds": 0}, r"rescore_seeds: 0 is invalid; expected an integer in \[1, 100\]"),
        ({"rescore_max_seeds": 101}, r"rescore_max_seeds: 101 is invalid; expected an integer in \[1, 100\], or None"),
        ({"rescore_max_seeds": "3"}, "rescore_max_seeds: '3' is invalid"),
        ({"rescore_val_size": -1}, "rescore_val_size: -1 is invalid"),
        ({"pack": 0}, r"pack: 0 is invalid; expected an integer from 1 \(one trial per process\) to 256, or 'auto'"),
        ({"pack": "many"}, "pack: 'many' is invalid"),
        ({"report_every": 0}, "report_every: 0 is invalid; expected an integer >= 1"),
        ({"report_every": 2.5}, "report_every: 2.5 is invalid"),
    ],
)
def test_invalid_settings_are_named(overrides, message):
    with pytest.raises(ValueError, match=message):
        SearchConfig.from_dict({"preset": "smoke", "name": "n", **overrides})


def test_unknown_preset():
    with pytest.raises(
        ValueError,
        match=r"unknown search preset 'tpu'; expected one of \['smoke', 'cpu', 'gpu', 'paper', 'density-cpu', 'pba-cpu'\]",
    ):
        SearchConfig.from_preset("tpu")


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({}, "no training data: give --data"),
        ({"data": "x", "train": {"val_size": 0}}, "val_size is 0"),
        ({"data": "x", "train": {"eval_every": 2}}, "eval_every is 2"),
        ({"data": "x", "train": {"eval_from": 2}}, "eval_from is 2"),
        ({"data": "x", "grace_period": 5, "train": {"epochs": 2}}, "grace_period 5 exceeds train.epochs 2"),
        ({"data": "x", "storage": "s3://bucket/runs"}, "remote: the default SQLite study file needs a local folder"),
        ({"data": "x", "train": {"device": "cuda"}}, "train.device is 'cuda' but gpus_per_trial is 0"),
        ({"data": "x", "gpus_per_trial": 0.5}, "gpus_per_trial is 0.5 but train.device is 'cpu'"),
        (
            {"data": "x", "pack": 4, "gpus_per_trial": 1, "train": {"device": "cuda"}},
            r"pack 4: a pack trains in float32 or bfloat16, and the trials train in float16 on the GPU .*"
            r"--set train.amp_dtype=bfloat16, or --pack 1",
        ),
        (
            {"data": "x", "space": {"num_sub_policies": 10_000}},  # the assembled policy: 5 trials' sub-policies
            r"top_n 5 x space.num_sub_policies 10,000 = 50,000 sub-policies in the assembled policy, more than a "
            r"policy may hold \(32,768\); lower --top-n or --sub-policies",
        ),
    ],
)
def test_check_runnable(overrides, message):
    config = SearchConfig.from_dict({"preset": "smoke", "name": "n", **overrides})
    with pytest.raises(ValueError, match=message):
        config.check_runnable()


def test_a_pack_on_the_gpu_in_bfloat16_and_auto_are_runnable():
    for pack in (4, "auto", "AUTO"):
        config = SearchConfig.from_dict(
            {"preset": "smoke", "name": "n", "data": "x", "pack": pack, "gpus_per_trial": 1}
            | {"train": {"device": "cuda", "amp_dtype": "bfloat16"}}
        )
        config.check_runnable()
        assert config.pack in (4, "auto")
        assert SearchConfig.from_dict(config.to_dict()).pack == config.pack


def test_grace_period_is_not_checked_without_early_stopping():
    SearchConfig.from_preset(
        "smoke", name="n", data="x", grace_period=5, early_stopping=False, train={"epochs": 2}
    ).check_runnable()


def test_sampler_with_a_missing_dependency_is_refused_up_front(monkeypatch):
    # scipy is a dependency; simulate an environment where it is missing.
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "scipy" else real_find_spec(name, *a)
    )
    config = SearchConfig.from_preset("smoke", name="n", data="x", sampler="qmc")
    with pytest.raises(ValueError, match="sampler 'qmc' needs the Python package 'scipy'"):
        config.check_runnable()


# ----------------------------------------------------------------------------------------------
# Space families


@pytest.mark.parametrize(
    "preset, method",
    [("pba-cpu", "pba"), ("density-cpu", "density"), ("smoke", "pba"), ("smoke", "density")],
)
@pytest.mark.parametrize("family", ["randaugment", "trivialaugment"])
def test_pba_and_density_refuse_another_space_family_before_anything_starts(preset, method, family):
    config = SearchConfig.from_dict(
        {"preset": preset, "name": "n", "data": "x", "method": method, "space": {"family": family}}
    )
    with pytest.raises(ValueError) as info:
        config.check_runnable()
    assert str(info.value) == (
        f"method {method} searches the aa space only; space.family is {family!r} "
        f"(use --method train for the {family} family)"
    )


@pytest.mark.parametrize("family", ["aa", "randaugment", "trivialaugment"])
def test_a_family_search_config_round_trips_and_its_auto_warm_start_is_checked_against_the_family(family):
    config = SearchConfig.from_dict({"preset": "cpu", "name": "n", "data": "x", "space": {"family": family}})
    assert config.space.family == family and config.warm_start == "auto"
    config.check_runnable()  # "auto" is a published point of every family
    again = SearchConfig.from_dict(json.loads(json.dumps(config.to_dict())))
    assert again == config and again.space == config.space
    assert ("family" in config.to_dict()["space"]) == (family != "aa")


def test_a_search_config_saved_before_space_families_loads_as_aa():
    old = SearchConfig.from_preset("smoke", name="old").to_dict()
    assert "family" not in old["space"]
    assert SearchConfig.from_dict(old).space == SearchSpace()


def test_an_auto_family_takes_the_family_a_given_warm_start_is_a_point_of_only_where_its_own_does_not_fit():
    def config(warm_start, **more):
        return SearchConfig.from_dict({"preset": "cpu", "name": "n", "data": "x", "warm_start": warm_start, **more})

    moved = config(["trivialaugment"]).with_warm_start_family()
    assert (moved.family, moved.space.family) == ("trivialaugment", "trivialaugment")
    moved.check_runnable()
    # what the space's own family takes, what no family takes, and a family given, are left alone
    for kept in (config(["autoaugment-cifar10"]), config(["randaugment", "autoaugment-svhn"]), config("auto")):
        assert kept.with_warm_start_family() is kept and kept.space.family == "aa"
    given = config(["randaugment"], family="aa")
    assert given.with_warm_start_family() is given
    with pytest.raises(ValueError, match="warm start 'randaugment' does not fit the search space"):
        given.check_runnable()
    # a method that searches aa only keeps aa (and says why the warm start does not fit)
    pba = SearchConfig.from_dict(
        {"preset": "pba-cpu", "name": "n", "data": "x", "warm_start": ["randaugment"], "family": "auto"}
    )
    assert pba.with_warm_start_family().space.family == "aa"


def test_a_family_refuses_a_warm_start_that_is_not_its_point():
    config = SearchConfig.from_dict(
        {
            "preset": "smoke",
            "name": "n",
            "data": "x",
            "space": {"family": "randaugment"},
            "warm_start": ["autoaugment-svhn"],
        }
    )
    with pytest.raises(ValueError, match="warm start 'autoaugment-svhn' is not a point of the randaugment family"):
        config.check_runnable()


# ----------------------------------------------------------------------------------------------
# The chosen method's settings, and the others'

#: ``search_config.json``'s configuration as this project wrote it while a configuration held every
#: registered method's settings (a smoke PBA search: the training method's top-level keys and
#: density's section besides PBA's own): what a search started then is resumed from.
EVERY_METHOD = Path(__file__).parent / "data" / "search_config_every_method.json"


def test_a_configuration_holds_its_method_s_settings_only_and_writes_them_only():
    from autoaug.search.methods.pba.method import PbaConfig

    pba = SearchConfig.from_dict({"preset": "smoke", "name": "n", "method": "pba", "pba": {"population": 3}})
    assert pba.method_config == PbaConfig(population=3, perturbation_interval=1)  # the preset's, then the given
    assert pba.method_settings(PbaConfig) is pba.method_config
    saved = pba.to_dict()
    assert saved["pba"] == pba.method_config.to_dict()
    assert not {"density", "num_trials", "grace_period"} & set(saved)  # the preset's other methods' are dropped
    assert SearchConfig.from_dict(json.loads(json.dumps(saved))) == pba
    with pytest.raises(ValueError, match=r"^TrainMethodConfig are the settings of method 'train'; this search runs "):
        pba.method_settings(TrainMethodConfig)
    # built directly: the settings object, a mapping of them, or None (the method's defaults)
    direct = SearchConfig(name="n", train={"preset": "smoke"}, method="pba", method_config={"population": 3})
    assert direct.method_config == PbaConfig(population=3)
    assert SearchConfig(name="n", train={"preset": "smoke"}).method_config == TrainMethodConfig()
    with pytest.raises(ValueError, match=r"method_config: .* is invalid; expected the settings of method 'train'"):
        SearchConfig(name="n", train={"preset": "smoke"}, method_config=PbaConfig())
    # another method: its own settings (the given ones, else its defaults)
    assert pba.replace(method="train").method_config == TrainMethodConfig()


def test_another_method_s_settings_given_are_checked_as_before_and_not_kept():
    """As when every method's settings were held: another method's keys given are refused when
    unknown or invalid (merged with the preset's, as that method checks them); valid, they change
    nothing of this search and are not written."""
    config = SearchConfig.from_dict({"preset": "smoke", "name": "n", "method": "pba", "num_trials": 9})
    assert "num_trials" not in config.to_dict()
    assert config == SearchConfig.from_dict({"preset": "smoke", "name": "n", "method": "pba"})
    with pytest.raises(ValueError, match=r"SearchConfig\.num_trials: 0 is invalid; expected an integer >= 1"):
        SearchConfig.from_dict({"preset": "smoke", "name": "n", "method": "pba", "num_trials": 0})
    with pytest.raises(ValueError, match=r"unknown pba setting\(s\) \['bogus'\]"):
        SearchConfig.from_dict({"preset": "smoke", "name": "n", "pba": {"bogus": 1}})
    with pytest.raises(ValueError, match=r"SearchConfig\.density\.top_per_round: 6 is invalid; expected at most "):
        SearchConfig.from_dict({"preset": "smoke", "name": "n", "density": {"top_per_round": 6}})  # the preset's 4


def test_a_saved_configuration_with_every_method_s_settings_is_read():
    """A run directory written while every method's settings were saved resumes: its configuration
    reads as its own method's, and writes back as that alone."""
    from autoaug.search.methods.pba.method import PbaConfig

    saved = json.loads(EVERY_METHOD.read_text())
    assert {"num_trials", "density", "pba"} <= set(saved) and saved["method"] == "pba"
    config = SearchConfig.from_dict(saved)
    assert config.method == "pba" and config.method_config == PbaConfig(population=3, perturbation_interval=1)
    assert config.name == "old-pba" and config.train.data == "/d/train.parquet" and config.storage == "/runs"
    again = config.to_dict()
    others = {"num_trials", "early_stopping", "grace_period", "reduction_factor", "top_n", "density"}
    assert set(again) == set(saved) - others and again["pba"] == saved["pba"]
    assert SearchConfig.from_dict(again) == config
