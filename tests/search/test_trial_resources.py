"""What a search's trials, re-scoring and calibration runs, fold models and compare's runs ask Ray
for, checked on a CPU: with a configuration asking for GPUs each asks for exactly that, with none
for 0 GPUs; a device of ``"auto"`` becomes the one they reserve; and Tune, through the project's
own experiment builder, places 4 trials of 0.25 GPU at once on a Ray node declaring one (fake)
GPU, each seeing the GPU it was given.

The Ray tasks' requests are read where the project hands them to Ray (``ray.remote(fn).options(...)``):
``ray.remote`` is replaced by a recorder whose ``.remote()`` stops the caller, so nothing trains.
"""

from __future__ import annotations

import contextlib
import dataclasses

import numpy as np
import pytest
import ray

from autoaug.core.errors import CompareError
from autoaug.core.progress import Progress
from autoaug.search.config import SearchConfig
from autoaug.search.score import METRIC


class _Submitted(Exception):
    """Raised by the recorder's ``.remote()``: the request was made, the test has what it needs."""


class _Task:
    def __init__(self, fn, asked: list):
        self.fn, self.asked = fn, asked

    def options(self, **options):
        self.asked.append((self.fn.__name__, options))
        return self

    def remote(self, *args, **kwargs):
        raise _Submitted


@pytest.fixture
def asked(monkeypatch) -> list:
    """``[(function name, options)]`` of every ``ray.remote(fn).options(...)`` made."""
    asked: list = []
    monkeypatch.setattr(ray, "remote", lambda fn: _Task(fn, asked))
    return asked


def _search(tmp_path, preset: str, **changes) -> SearchConfig:
    data = {"preset": preset, "name": "res", "data": str(tmp_path / "unused"), "storage": str(tmp_path / "runs")}
    return SearchConfig.from_dict({**data, **changes})


# The paper preset: 2 CPUs and a quarter of a GPU per trial; smoke: 1 CPU, no GPU.
SEARCHES = [("paper", {}, 2.0, 0.25), ("smoke", {}, 1.0, 0.0), ("paper", {"gpus_per_trial": 2}, 2.0, 2.0)]


@pytest.mark.parametrize("preset,changes,cpus,gpus", SEARCHES)
def test_a_trial_asks_tune_for_the_searchs_cpus_and_gpus(tmp_path, preset, changes, cpus, gpus):
    """Every method's trials (the training method's, each density round's, PBA's members) run
    through search.tune.experiment.build_tuner: the resources Tune reserves per trial are these."""
    from autoaug.search.tune.experiment import Experiment, build_tuner

    config = _search(tmp_path, preset, **changes)
    exp = Experiment(
        name="res",
        storage=str(tmp_path / "runs"),
        study_url=f"sqlite:///{tmp_path}/optuna.db",
        num_trials=4,
        max_steps=1,
        seed=0,
        trainable=lambda config: None,
        parameters={},
    )
    tuner = build_tuner(config, exp, Progress("quiet"))
    # What tune.with_resources attached, which Tune's controller reserves for each trial.
    request = tuner._local_tuner.trainable._resources
    expected = {"CPU": cpus, **({"GPU": gpus} if gpus else {})}
    assert request.required_resources == expected
    assert len(request.bundles) == 1  # one bundle: the trial's CPUs and GPU on the same node


@pytest.mark.parametrize("preset,changes,cpus,gpus", SEARCHES)
def test_rescoring_and_calibration_runs_ask_ray_for_the_trials_resources(tmp_path, asked, preset, changes, cpus, gpus):
    from autoaug.policies.presets import resolve
    from autoaug.search.decide.proxy_runs import train_runs

    config = _search(tmp_path, preset, **changes)
    # train_runs is the one loop of re-scoring (rescore_candidates) and calibration runs.
    with pytest.raises(_Submitted):
        train_runs([("k", resolve("autoaugment-cifar10"), config.train)], config)
    assert asked == [("train_and_score", {"num_cpus": cpus, "num_gpus": gpus, "name": "autoaug-run:k"})]


def test_rescoring_and_calibration_runs_in_packs_ask_for_a_pack_servers_resources(tmp_path, asked, monkeypatch):
    """With --pack K, the runs outside Tune train K at a time too, each pack a task on a pack
    server's resources: the trials' CPUs and its runs' share of a GPU (at most one)."""
    from autoaug.policies.presets import resolve
    from autoaug.search.decide.proxy_runs import train_runs

    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 16.0, "GPU": 1.0})
    config = _search(tmp_path, "paper", pack=4, train={"amp_dtype": "bfloat16"})  # 0.25 GPU a trial
    runs = [(f"k{i}", resolve("autoaugment-cifar10"), dataclasses.replace(config.train, seed=i)) for i in range(5)]
    with pytest.raises(_Submitted):
        train_runs(runs, config)
    # a pack of 4 takes the GPU: one at a time; 5 runs in 2 packs, as even as can be (3 and 2)
    assert asked == [("train_and_score_pack", {"num_cpus": 2.0, "num_gpus": 0.75, "name": "autoaug-run:k0+2"})]


@pytest.mark.parametrize(
    "preset,changes,expected",
    [
        ("paper", {"gpus_per_trial": 0.125, "pack": 8}, 8),  # a pack of 8 a GPU
        ("paper", {"gpus_per_trial": 0.125, "pack": 4}, 8),  # two of 4, half a GPU each
        ("paper", {"gpus_per_trial": 0.125, "pack": 16}, 16),  # a pack takes one GPU at most
        ("smoke", {"pack": 2}, 32),  # no GPU: a pack a trial's CPU
        ("smoke", {"pack": "auto"}, 16),  # not yet measured: one run a task
    ],
)
def test_parallel_runs_counts_the_runs_of_the_packs_that_fit(tmp_path, monkeypatch, preset, changes, expected):
    from autoaug.search.decide.proxy_runs import parallel_runs

    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 16.0, "GPU": 1.0})
    if preset == "paper":
        changes = {**changes, "cpus_per_trial": 1, "train": {"device": "auto", "amp_dtype": "bfloat16"}}
    assert parallel_runs(_search(tmp_path, preset, **changes)) == expected


@pytest.mark.parametrize("preset,changes,cpus,gpus", SEARCHES)
def test_fold_models_ask_ray_for_the_trials_resources(tmp_path, asked, monkeypatch, preset, changes, cpus, gpus):
    from autoaug.proxy_models.splits import Split
    from autoaug.search.methods.density import fold_models
    from autoaug.search.run_dir import RunDir

    config = _search(tmp_path, preset, method="density", **changes)
    split = Split(train=np.arange(0, 8), val=np.arange(8, 10), seed=0)
    monkeypatch.setattr(fold_models, "fold_splits", lambda train, folds, seed: (None, [split] * folds))
    with pytest.raises(_Submitted):
        fold_models.train_fold_models(config, RunDir(config.storage, "res"))
    assert asked == [("train_fold", {"num_cpus": cpus, "num_gpus": gpus, "name": "autoaug-fold:res:0"})]


@contextlib.contextmanager
def _fake_cluster(address=None, **kwargs):
    class Info:
        def describe(self):
            return "a fake node"

    yield Info()


@pytest.mark.parametrize(
    "settings,gpus",
    [
        ({"preset": "paper"}, 1.0),  # a CUDA preset: one GPU per run unless told
        ({"preset": "paper", "gpus_per_run": 0.25}, 0.25),
        ({"preset": "smoke"}, 0.0),
        ({"preset": "smoke", "train": {"device": "auto"}}, 0.0),
    ],
)
def test_compare_runs_ask_ray_for_their_gpus(tmp_path, asked, monkeypatch, settings, gpus):
    from autoaug.core import ray_session
    from autoaug.launch.compare import runner
    from autoaug.launch.compare.candidates import Candidate
    from autoaug.launch.compare.config import config_from_dict
    from autoaug.policies.presets import resolve

    (tmp_path / "train.parquet").touch()
    data = {"data": str(tmp_path / "train.parquet"), "test_data": str(tmp_path / "train.parquet")}
    config = config_from_dict({**data, "out": str(tmp_path / "out"), **settings})
    assert config.gpus_per_run == gpus
    monkeypatch.setattr(ray_session, "ray_session", _fake_cluster)
    monkeypatch.setattr(ray, "nodes", lambda: [{"Alive": True, "Resources": {"CPU": 4.0, "GPU": 1.0}}])
    standard = Candidate(label="standard", ref="standard", policy=resolve("standard"), kind="baseline")
    with pytest.raises(_Submitted):
        runner._run_all(config, [(standard, 0)], {}, None, 1, lambda line: None)
    assert [(name, o["num_cpus"], o["num_gpus"]) for name, o in asked] == [("train_one", 1, gpus)]


def test_compare_runs_in_packs_ask_for_their_runs_gpus_together(tmp_path, asked, monkeypatch):
    """compare --pack 4 at 0.25 GPU a run: 5 runs in packs of 3 and 2 (one pack of 4 would fill the
    GPU: one at a time), the first asking for 3 runs' share."""
    from autoaug.core import ray_session
    from autoaug.launch.compare import runner
    from autoaug.launch.compare.candidates import Candidate
    from autoaug.launch.compare.config import config_from_dict
    from autoaug.policies.presets import resolve

    (tmp_path / "train.parquet").touch()
    data = {"data": str(tmp_path / "train.parquet"), "test_data": str(tmp_path / "train.parquet")}
    settings = {"preset": "paper", "gpus_per_run": 0.25, "pack": 4, "seeds": 5, "train": {"amp_dtype": "bfloat16"}}
    config = config_from_dict({**data, "out": str(tmp_path / "out"), **settings})
    monkeypatch.setattr(ray_session, "ray_session", _fake_cluster)
    monkeypatch.setattr(ray, "nodes", lambda: [{"Alive": True, "Resources": {"CPU": 4.0, "GPU": 1.0}}])
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 4.0, "GPU": 1.0})
    standard = Candidate(label="standard", ref="standard", policy=resolve("standard"), kind="baseline")
    with pytest.raises(_Submitted):
        runner._run_all(config, [(standard, s) for s in range(5)], {}, None, 5, lambda line: None)
    assert [(name, o["num_cpus"], o["num_gpus"], o["name"]) for name, o in asked] == [
        ("train_pack_runs", 1, 0.75, "autoaug-compare:standard-" + standard.policy_hash[:8] + "-seed0+2")
    ]


@pytest.mark.parametrize("gpus,device", [(0.25, "cuda"), (1, "cuda"), (0, "cpu")])
def test_an_auto_device_is_the_one_the_runs_reserve(tmp_path, gpus, device):
    # Ray (2.60) no longer hides the GPUs from a worker that reserved none: "auto" there would find
    # the node's GPUs and train on one another trial reserved.
    config = _search(tmp_path, "smoke", gpus_per_trial=gpus, train={"device": "auto"})
    assert config.train.device == device
    config.check_runnable()  # the device and the reservation agree
    from autoaug.launch.compare.config import config_from_dict

    (tmp_path / "d.parquet").touch()
    data = {"data": str(tmp_path / "d.parquet"), "test_data": str(tmp_path / "d.parquet"), "preset": "smoke"}
    assert config_from_dict({**data, "train": {"device": "auto"}, "gpus_per_run": gpus}).train.device == device


def test_devices_and_reservations_that_disagree_are_refused_in_one_line(tmp_path):
    from autoaug.launch.compare.config import config_from_dict

    config = _search(tmp_path, "paper", train={"device": "cuda:1"})  # 0.25 GPU per trial
    with pytest.raises(ValueError, match=r"train.device is 'cuda:1' but each trial reserves 0.25 GPU"):
        config.check_runnable()
    _search(tmp_path, "paper", gpus_per_trial=2, train={"device": "cuda:1"}).check_runnable()  # its second GPU

    (tmp_path / "d.parquet").touch()
    data = {"data": str(tmp_path / "d.parquet"), "test_data": str(tmp_path / "d.parquet")}
    for settings, message in [
        ({"preset": "paper", "gpus_per_run": 1.5}, "gpus_per_run must be a fraction <= 1 or a whole number"),
        ({"preset": "paper", "gpus_per_run": 0}, "train.device is 'cuda' but gpus_per_run is 0"),
        ({"preset": "paper", "train": {"device": "cuda:1"}}, "train.device is 'cuda:1' but each run reserves 1 GPU"),
        ({"preset": "smoke", "gpus_per_run": 0.5}, "gpus_per_run is 0.5 but train.device is 'cpu'"),
    ]:
        with pytest.raises(CompareError, match=message) as info:
            config_from_dict({**data, **settings})
        assert "\n" not in str(info.value)


@pytest.mark.parametrize("gpus,cpus,expected", [(0.25, 1, 4), (0.1, 1, 10), (0.3, 1, 3), (0, 1, 16), (0.25, 8, 2)])
def test_parallel_runs_counts_fractional_gpus_as_ray_does(tmp_path, monkeypatch, gpus, cpus, expected):
    from autoaug.search.decide.proxy_runs import parallel_runs

    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 16.0, "GPU": 1.0})
    config = _search(tmp_path, "paper", gpus_per_trial=gpus, cpus_per_trial=cpus, train={"device": "auto"})
    assert parallel_runs(config) == expected  # 1 // 0.1 is 9.0 in floating point


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_tune_runs_four_quarter_gpu_trials_at_once_on_one_gpu_each_seeing_its_gpu(tmp_path, monkeypatch):
    """The paper preset (0.25 GPU and 2 CPUs per trial) on a Ray node declaring 1 GPU and 8 CPUs
    (no GPU needed: Ray schedules what the node declares; the node's GPU is number 7, from
    ``CUDA_VISIBLE_DEVICES``): the project's experiment builder makes Tune run 4 trials at once
    (each waits at a barrier until all 4 have arrived), and each sees the GPU Ray gave it
    (``ray.get_gpu_ids()``, ``CUDA_VISIBLE_DEVICES``) and its reserved share. A task reserving no
    GPU sees it too (Ray 2.60 no longer hides it): why ``train.device: auto`` is the device the
    trials reserve (test_an_auto_device_is_the_one_the_runs_reserve)."""
    from autoaug.core.ray_session import output_settings, ray_session
    from autoaug.search.tune.experiment import Experiment, build_tuner, fit

    wait_s = 180.0

    class Barrier:
        """Trials arrive with what they saw; each is let go when ``count`` have arrived (or at
        ``wait_s``), and learns how many had."""

        def __init__(self, count):
            import threading

            self.count, self.seen, self.cond = count, [], threading.Condition()

        def arrive(self, seen):
            with self.cond:
                self.seen.append(seen)
                self.cond.notify_all()
                self.cond.wait_for(lambda: len(self.seen) >= self.count, timeout=wait_s)
                return len(self.seen)

        def all_seen(self):
            return list(self.seen)

    def trial(config, *, barrier_name):
        import os

        import ray
        from ray import tune

        seen = {
            "gpu_ids": [str(g) for g in ray.get_gpu_ids()],
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "assigned": ray.get_runtime_context().get_assigned_resources(),
        }
        arrived = ray.get(ray.get_actor(barrier_name).arrive.remote(seen))
        tune.report({METRIC: float(arrived), "val_accuracy": 0.5})

    config = _search(tmp_path, "paper")
    assert (config.cpus_per_trial, config.gpus_per_trial, config.concurrency) == (2.0, 0.25, 8)
    exp = Experiment(
        name="res",
        storage=str(tmp_path / "runs"),
        study_url=f"sqlite:///{tmp_path}/optuna.db",
        num_trials=4,
        max_steps=1,
        seed=0,
        trainable=trial,
        parameters={"barrier_name": "autoaug-test-barrier"},
        keep_checkpoints=None,
    )

    def visible():
        import os

        return os.environ.get("CUDA_VISIBLE_DEVICES")

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "7")
    with ray_session("local", num_cpus=8, num_gpus=1, **output_settings(False)):
        barrier = ray.remote(Barrier).options(name="autoaug-test-barrier", num_cpus=0, max_concurrency=8).remote(4)
        fit(build_tuner(config, exp, Progress("quiet")))
        seen = ray.get(barrier.all_seen.remote())
        unreserved = ray.get(ray.remote(visible).options(num_cpus=1, num_gpus=0).remote())
        import optuna

        study = optuna.load_study(study_name="res", storage=exp.study_url)
    assert len(seen) == 4, seen
    for s in seen:
        assert s["gpu_ids"] == ["7"], s
        assert s["cuda_visible_devices"] == "7", s
        assert s["assigned"] == {"CPU": 2.0, "GPU": 0.25}, s
    assert unreserved == "7"
    # Each trial was let go only when all 4 were running at once.
    assert sorted(t.value for t in study.trials) == [4.0, 4.0, 4.0, 4.0]
