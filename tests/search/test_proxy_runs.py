"""The search's proxy runs outside Tune (search.decide.proxy_runs): a run scored as a trial is, with
every validation image's outcome; runs trained as a pack, each scored as its own; a schedule's run."""

from __future__ import annotations

import pytest

from autoaug.policies import Policy


def test_a_run_keeps_each_validation_images_score_over_the_window_and_they_average_to_its_score(cifar_train):
    """The per-image scores a comparison's noise is measured from (search.decide.noise): one per
    validation image, the share of the score's window it was right in, in the same order for
    every run of one split."""
    from autoaug.proxy_models.train import TrainConfig
    from autoaug.search.decide.noise import IMAGE_SCORES, decode_image_scores
    from autoaug.search.decide.proxy_runs import train_and_score

    cfg = TrainConfig(data=str(cifar_train), model="resnet-8", train_size=64, val_size=48, epochs=2, batch_size=32)
    policy = Policy("p", 10, [[("Rotate", 0.5, 3)]])
    a = train_and_score(cfg.to_dict(), policy.to_dict(), score_window=2)
    b = train_and_score({**cfg.to_dict(), "seed": 7}, policy.to_dict(), score_window=2)
    (va, fa), (vb, fb) = decode_image_scores(a[IMAGE_SCORES]), decode_image_scores(b[IMAGE_SCORES])
    assert a[IMAGE_SCORES]["window"] == 2 and len(va) == 48 and set(va) <= {0.0, 0.5, 1.0}
    assert va.mean() == pytest.approx(a["search_score"]) and vb.mean() == pytest.approx(b["search_score"])
    assert fa == fb  # the same validation images: the two runs can be compared image by image
    # the score after each validated epoch (calibration's at ASHA's rungs measure how they rank), and
    # the run's wall time, its start-up in it once (the budget's measured run)
    assert set(a["scores"]) == {"1", "2"} and a["scores"]["2"] == pytest.approx(a["search_score"])
    assert a["wall_s"] >= a["train_time_s"] > 0


def test_runs_trained_as_a_pack_are_scored_each_as_its_own_run(cifar_train):
    """Calibration's and re-scoring's runs in a pack (--pack K): each run's result as its own
    task's, per-image scores on the same validation images; a pack of one is its solo run bit
    for bit, and a run's score does not depend on its pack-mate beyond float rounding."""
    import dataclasses

    from autoaug.proxy_models.train import TrainConfig
    from autoaug.search.decide.noise import IMAGE_SCORES, decode_image_scores
    from autoaug.search.decide.proxy_runs import train_and_score, train_and_score_pack

    cfg = TrainConfig(data=str(cifar_train), model="resnet-8", train_size=64, val_size=48, epochs=2, batch_size=32)
    other = dataclasses.replace(cfg, seed=7)
    a, b = Policy("a", 10, [[("Rotate", 0.5, 3)]]), Policy("b", 10, [[("Invert", 1.0, 0)]])
    solo = train_and_score(cfg.to_dict(), a.to_dict(), score_window=2)
    (alone,) = train_and_score_pack([cfg.to_dict()], [a.to_dict()], score_window=2)
    keep = ("search_score", "val_accuracy", "scores", "epochs", "precision", IMAGE_SCORES)
    assert {k: alone[k] for k in keep} == {k: solo[k] for k in keep} and alone["pack"] == 1
    first, second = train_and_score_pack([cfg.to_dict(), other.to_dict()], [a.to_dict(), b.to_dict()], score_window=2)
    assert first["pack"] == second["pack"] == 2 and first["wall_s"] >= first["train_time_s"] > 0
    for run in (first, second):
        values, val_id = decode_image_scores(run[IMAGE_SCORES])
        assert len(values) == 48 and values.mean() == pytest.approx(run["search_score"])
        assert val_id == decode_image_scores(solo[IMAGE_SCORES])[1]  # paired with every other run
        assert set(run["scores"]) == {"1", "2"}
    # each member is its own solo run (its seed, its policy), up to the rounding of a stacked
    # model's arithmetic: the images it gets right are those its solo run gets right (another
    # run's agree on about 70% of them here)
    solo_b = train_and_score(other.to_dict(), b.to_dict(), score_window=2)
    for member, alone in ((first, solo), (second, solo_b)):
        right = decode_image_scores(member[IMAGE_SCORES])[0] == decode_image_scores(alone[IMAGE_SCORES])[0]
        assert right.mean() >= 0.9 and member["search_score"] == pytest.approx(alone["search_score"], abs=0.05)


def test_a_proxy_run_of_a_schedule_trains_each_epoch_with_its_stages_policy(cifar_train, monkeypatch):
    """A PBA search's product is a schedule: a re-scoring run of it (search_gain's PBA row) trains
    the schedule, not one of its stages."""
    import autoaug.proxy_models.train as train_module
    from autoaug.policies.schedule import Schedule
    from autoaug.proxy_models.train import TrainConfig
    from autoaug.search.decide.proxy_runs import train_and_score

    given = []
    real = train_module.train
    monkeypatch.setattr(
        train_module, "train", lambda cfg, policy, **kw: given.append(policy) or real(cfg, policy, **kw)
    )
    cfg = TrainConfig(data=str(cifar_train), model="resnet-8", train_size=64, val_size=48, epochs=2, batch_size=32)
    schedule = Schedule(
        "s", [(0.0, Policy("a", 10, [[("Rotate", 0.5, 3)]])), (0.5, Policy("b", 10, [[("Invert", 1.0, 0)]]))]
    )
    out = train_and_score(cfg.to_dict(), schedule.to_dict())
    (trained,) = given
    assert isinstance(trained, Schedule) and trained.content_hash == schedule.content_hash
    assert out["epochs"] == 2 and 0.0 <= out["search_score"] <= 1.0
