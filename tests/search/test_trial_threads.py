"""A search trial's torch and DALI threads fit the CPUs Ray gave it, whatever OMP_NUM_THREADS says."""

from __future__ import annotations

import ray

from autoaug.proxy_models.train_config import TrainConfig
from autoaug.search.tune.epochs import with_trial_threads


class _Context:
    def __init__(self, cpus):
        self.cpus = cpus

    def get_assigned_resources(self):
        return {} if self.cpus is None else {"CPU": self.cpus}


def test_an_unset_thread_count_becomes_the_trials_cpus(monkeypatch):
    cfg = TrainConfig.from_preset("proxy-cpu")
    assert cfg.num_threads is None
    assert with_trial_threads(cfg) is cfg  # outside Ray: unchanged
    monkeypatch.setattr(ray, "is_initialized", lambda: True)
    for cpus, threads in ((1.0, 1), (2.0, 2), (0.5, 1), (2.5, 2)):
        monkeypatch.setattr(ray, "get_runtime_context", lambda cpus=cpus: _Context(cpus))
        got = with_trial_threads(cfg)
        assert got.num_threads == threads and got.loader_threads is None  # DALI follows num_threads
        assert got.changed_fields(cfg.to_dict()) == [("num_threads", None, threads)]
    monkeypatch.setattr(ray, "get_runtime_context", lambda: _Context(None))
    assert with_trial_threads(cfg) is cfg  # no CPU assigned: as before
    given = TrainConfig.from_preset("proxy-cpu", num_threads=3)
    assert with_trial_threads(given) is given  # an explicit count is kept
