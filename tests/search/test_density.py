"""The density-matching method (Fast AutoAugment): its configuration and CLI flags, the scoring
path (an identity candidate scores exactly the fold model's plain held-out accuracy and loss), and
a search whose driver is killed with SIGKILL and whose resumed search reuses the fold models
instead of training them again, then stores a policy with method provenance."""

from __future__ import annotations

import json
import os
import sys

import pytest

from autoaug.launch.cli import build_parser, main
from autoaug.launch.search_cmd import build_search_config
from autoaug.search.config import SearchConfig
from autoaug.search.methods.density.method import DensityConfig

# Two folds of 256 images, one epoch: seconds per fold model on a CPU; one candidate scored at a
# time (one actor per round, whose imports and DALI graph cost more than the scoring).
TINY = [
    "--set",
    "train.epochs=1",
    "--set",
    "train.train_size=256",
    "--set",
    "train.batch_size=32",
    "--concurrency",
    "1",
]


def _config(argv):
    return build_search_config(build_parser().parse_args(["search", *argv]))


def _dirs(tmp_path):
    return ["--storage", str(tmp_path / "runs"), "--store", str(tmp_path / "store")]


def test_method_flags_map_onto_the_config(tmp_path):
    c = _config(
        [
            "--data",
            "x.parquet",
            "--method",
            "density",
            "--folds",
            "3",
            "--rounds",
            "1",
            "--trials-per-round",
            "20",
            "--top-per-round",
            "4",
            "--objective",
            "loss",
        ]
    )
    assert c.method == "density"
    assert c.method_settings(DensityConfig) == DensityConfig(
        folds=3, rounds=1, trials_per_round=20, top_per_round=4, objective="loss"
    )
    objective = _config(
        ["--data", "x.parquet", "--method", "density", "--objective", "accuracy"]
    ).method_config.objective
    assert objective == "accuracy"
    assert c.method_config.num_trials == 60
    assert SearchConfig.from_dict(c.to_dict()) == c
    preset = _config(["--data", "x.parquet", "--preset", "density-cpu"])
    assert preset.method == "density" and preset.method_config == DensityConfig()  # the paper's K=5, T=2, B=200, N=10
    assert _config(["--data", "x.parquet"]).method == "train"


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--method", "density", "--folds", "1"], "SearchConfig.density.folds: 1 is invalid; expected an integer >= 2"),
        (
            ["--method", "density", "--rounds", "0"],
            "SearchConfig.density.rounds: 0 is invalid; expected an integer >= 1",
        ),
        (
            ["--method", "density", "--trials-per-round", "5", "--top-per-round", "6"],
            "SearchConfig.density.top_per_round: 6 is invalid; expected at most trials_per_round (5)",
        ),
        (["--method", "density", "--set", "density.bogus=1"], "unknown density setting(s) ['bogus']"),
        (
            ["--method", "density", "--folds", "9", "--set", "train.train_size=64", "--set", "train.batch_size=64"],
            "leave 56 images to train a fold model, fewer than one batch of 64",
        ),
        (
            ["--method", "density", "--folds", "2", "--rounds", "2", "--top-per-round", "3", "--sub-policies", "4096"],
            "density.folds=2 x rounds=2 x top_per_round=3 x space.num_sub_policies=4,096 = 49,152 sub-policies in "
            "the merged policy, more than a policy may hold (32,768); lower one of them",
        ),
    ],
)
def test_bad_density_settings_exit_2_with_one_line_before_work(tmp_path, capsys, cifar_small, argv, message):
    code = main(["search", "--data", str(cifar_small), "--preset", "smoke", "--name", "bad", *argv, *_dirs(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert message in err and "Traceback" not in err
    assert not (tmp_path / "runs" / "bad").exists()


def test_unknown_method_is_refused_by_the_parser(capsys):
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["search", "--method", "fast"])
    assert exc.value.code == 2 and "invalid choice: 'fast'" in capsys.readouterr().err


def test_identity_candidate_scores_the_fold_models_plain_heldout_accuracy(cifar_small):
    """The scoring path is the model's real evaluation: a candidate that leaves every image as it
    is gives exactly the accuracy and loss the fold model's own held-out validation measured, and
    a candidate that changes the images gives another score."""
    from autoaug.policies import Policy
    from autoaug.proxy_models.train import TrainConfig
    from autoaug.search.methods.density.fold_models import FoldScorer, fold_splits
    from autoaug.search.methods.density.fold_models import train_fold as _train_fold
    from autoaug.search.space import SearchSpace

    cfg = TrainConfig.from_preset(
        "smoke", data=str(cifar_small), train_size=512, val_size=0, epochs=2, batch_size=32, num_threads=1
    )
    _, folds = fold_splits(cfg, 2, 0)
    result = _train_fold(cfg.to_dict(), 0, folds[0].train.tolist(), folds[0].val.tolist())
    space = SearchSpace()
    scorer = FoldScorer(cfg, space, result["weights"], folds[0].val, seed=0)
    assert scorer.num_images == len(folds[0].val) == 256

    # Identity through the policy step: every operation has probability 0 (and no policy at all).
    never = Policy("never", 10, [[("Rotate", 0.0, 9), ("Invert", 0.0, 0)]] * 5)
    for candidate in (never, None):
        accuracy, loss = scorer.score(candidate)
        assert accuracy == result["val_accuracy"]
        assert loss == pytest.approx(result["val_loss"], rel=1e-12, abs=1e-12)
    # A real candidate is applied (each image draws its own sub-policy).
    harsh = Policy("harsh", 10, [[("Invert", 1.0, 0), ("Rotate", 1.0, 9)], [("Solarize", 1.0, 9), ("Cutout", 1.0, 9)]])
    accuracy, loss = scorer.score(harsh)
    assert loss != pytest.approx(result["val_loss"])
    # The same pipeline serves the next candidate again (not rebuilt): identity is exact again.
    assert scorer.score(never)[0] == result["val_accuracy"]
    # A policy outside the pipeline's space is refused with a clear message.
    with pytest.raises(ValueError, match="has 6 sub-policies; this pipeline takes at most 5"):
        scorer.score(Policy("big", 10, [[("Rotate", 0.5, 1)]] * 6))


def test_fold_models_in_a_pack_are_each_trained_and_scored_on_its_own_fold(cifar_small):
    """Two fold models trained together in one pack (what ``--pack`` does with a density search's
    folds): each summary is its own fold's (split, sizes), its weights score that fold's held-out
    images exactly as its validation in the pack did, and it is its solo fold model up to float
    rounding."""
    from autoaug.proxy_models.train import TrainConfig
    from autoaug.search.methods.density.fold_models import FoldScorer, fold_splits, train_fold, train_fold_pack
    from autoaug.search.space import SearchSpace

    cfg = TrainConfig.from_preset(
        "smoke", data=str(cifar_small), train_size=512, val_size=0, epochs=2, batch_size=32, num_threads=1
    )
    _, folds = fold_splits(cfg, 2, 0)
    packed = train_fold_pack(
        cfg.to_dict(), [1, 0], [f.train.tolist() for f in folds[::-1]], [f.val.tolist() for f in folds[::-1]], "crop"
    )
    assert [p["fold"] for p in packed] == [1, 0] and all(p["pack"] == 2 and p["base"] == "crop" for p in packed)
    for summary in packed:
        fold = folds[summary["fold"]]
        assert summary["split_fingerprint"] == fold.fingerprint
        assert (summary["train_size"], summary["heldout_size"]) == (len(fold.train), len(fold.val)) == (256, 256)
        scorer = FoldScorer(cfg, SearchSpace(), summary["weights"], fold.val, seed=0)
        accuracy, loss = scorer.score(None)  # its weights on its own held-out fold, no policy
        assert accuracy == summary["val_accuracy"] and loss == pytest.approx(summary["val_loss"], rel=1e-6)  # (float32)
        solo = train_fold(cfg.to_dict(), summary["fold"], fold.train.tolist(), fold.val.tolist(), "crop")
        assert solo["split_fingerprint"] == summary["split_fingerprint"] and "pack" not in solo
        assert summary["val_loss"] == pytest.approx(solo["val_loss"], abs=0.05)
        assert abs(summary["val_accuracy"] - solo["val_accuracy"]) <= 0.05


def test_folds_share_a_pack_only_with_as_many_steps_an_epoch_as_few_packs_as_run_at_once_allow():
    from autoaug.search.methods.density.fold_models import fold_packs

    assert fold_packs([800] * 5, 64, 8) == [[0, 1, 2, 3, 4]]
    assert fold_packs([800] * 5, 64, 2) == [[0, 1], [2, 3], [4]]
    assert fold_packs([800] * 5, 64, 8, at_once=2) == [[0, 1, 2], [3, 4]]  # neither of 2 packs idles
    # 12, 12, 12 and 11 batches of 64 an epoch (the last partial batch dropped): a pack trains in lockstep
    assert fold_packs([800, 799, 768, 767], 64, 4) == [[0, 1, 2], [3]]


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.usefixtures("shared_ray")
def test_a_killed_density_search_resumes_without_training_the_fold_models_again_and_stores_its_policy(
    tmp_path, capsys, cifar_small, kill_driver
):
    """One density search (2 folds, their models trained together in a pack of 2, a round of 2
    candidates each, the best kept per round), its driver killed with SIGKILL once both fold
    models are saved and the first candidate is scored,
    then resumed: no fold model is trained again, the first fold's round goes on from its saved
    experiment and the second fold's starts, and the search stores a policy with the method's whole
    provenance (what a smoke search of the method shows). A fold's rounds are stages as its folds'
    are (``stage_name``): one round a fold covers both kinds of resume."""
    from autoaug.policies.store import PolicyStore

    dirs = _dirs(tmp_path)
    argv = [
        sys.executable,
        "-m",
        "autoaug.launch.cli",
        "search",
        "--data",
        str(cifar_small),
        "--preset",
        "smoke",
        "--name",
        "dens",
        "--method",
        "density",
        "--folds",
        "2",
        "--rounds",
        "1",
        "--trials-per-round",
        "2",
        "--top-per-round",
        "1",
        "--base",
        "crop",
        *TINY,
        "--pack",
        "2",
        "--cpus-per-trial",
        "2",  # (one pack of 2 fits the 2 CPUs; with 1 a trial, 2 packs of 1 train at once)
        *dirs,
    ]
    run = tmp_path / "runs" / "dens"
    # Killed once both fold models are saved and the first round's first candidate is scored and saved.
    killed = kill_driver(argv, {**os.environ, "PYTHONUNBUFFERED": "1"}, "search.after_trial_saved:1", 300)
    assert "2 fold model(s)" in killed and "in packs of up to 2" in killed and "in a pack of 2)" in killed
    assert not (run / "result.json").exists()
    folds = run / "folds"
    saved = {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in sorted(folds.iterdir())}
    assert sorted(saved) == ["fold0.json", "fold0.pt", "fold1.json", "fold1.pt"]

    # Resumed in this process (the module's Ray session), as `autoaug search --resume dens` runs.
    code = main(["search", "--resume", "dens", *dirs])
    out = capsys.readouterr().out
    assert code == 0, out[-3000:]
    assert "stored as dens@1" in out
    assert "training" not in out.split("fold 1/2, round ")[0]  # no fold model trained again before the rounds
    # The fold models are the ones the killed driver saved: same bytes, untouched files.
    assert {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in sorted(folds.iterdir())} == saved

    stored = PolicyStore(str(tmp_path / "store"))
    policy = stored.load("dens@1")
    meta = stored.get("dens@1").provenance
    result = json.loads((run / "result.json").read_text())
    prov = result["provenance"]
    assert result["policy_hash"] == policy.content_hash
    method = prov["method"]
    assert method["name"] == "density" and method["folds"] == 2 and method["rounds"] == 1
    assert method["trials_per_round"] == 2 and method["top_per_round"] == 1 and method["objective"] == "loss"
    assert [f["fold"] for f in method["fold_models"]] == [0, 1]
    assert [f["session"] for f in method["fold_models"]] == ["start 1", "start 1"]  # the killed driver's
    assert [f["pack"] for f in method["fold_models"]] == [2, 2]  # trained together
    assert all(0 < f["val_accuracy"] <= 1 and f["heldout_size"] == 128 for f in method["fold_models"])
    # --base crop: the fold models trained on the crop alone, and the stored policy is on crop.
    assert all(f["base"] == "crop" for f in method["fold_models"]) and policy.base == "crop"
    # Every candidate's score is recorded, the one scored before the kill included: folds x rounds
    # x trials, each scored once.
    trials = prov["trials"]
    assert len(trials) == 4 and all(t["status"] == "completed" and t["score"] is not None for t in trials)
    assert len({t["trial_id"] for t in trials}) == 4
    # The final policy is the union of each round's best, duplicates removed.
    kept = [k for r in method["rounds_kept"] for k in r["kept"]]
    assert len(kept) == 2
    by_id = {t["trial_id"]: t for t in trials}
    for r in method["rounds_kept"]:
        scores = sorted((t["score"] for t in trials if t["trial_id"].startswith(r["stage"] + "/")), reverse=True)
        assert sorted((by_id[k]["score"] for k in r["kept"]), reverse=True) == scores[:1]
    assert len(policy.sub_policies) == 2 * 5 - prov["assembly"]["duplicates_removed"]
    assert prov["optuna"]["problems"] == []
    assert meta["method"]["name"] == "density" and meta["method"]["fold_models"] == method["fold_models"]


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.usefixtures("shared_ray")
def test_a_time_budget_spans_the_fold_models_and_every_round(tmp_path, capsys, cifar_small):
    """Under a budget of seconds the fold models still train (nothing is scored without them), the
    first round scores until its first candidates reported, no more are proposed, the rounds left
    are not run, and what was kept is stored; the study of the round is consistent."""
    code = main(
        [
            "search",
            "--data",
            str(cifar_small),
            "--preset",
            "smoke",
            "--name",
            "dbudget",
            "--method",
            "density",
            "--folds",
            "2",
            "--rounds",
            "2",
            "--trials-per-round",
            "8",
            "--top-per-round",
            "2",
            "--base",
            "crop",
            *TINY,
            "--time-budget",
            "3s",
            *_dirs(tmp_path),
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out[-3000:]
    assert "the time budget (3s) ended the search after " in out and " of 32 candidates" in out
    assert "stored as dbudget@1" in out
    prov = json.loads((tmp_path / "runs" / "dbudget" / "result.json").read_text())["provenance"]
    budget, method = prov["budget"], prov["method"]
    assert budget["ended"]["stage"] == "trials" and budget["trials"]["planned"] == 32
    assert [f["fold"] for f in method["fold_models"]] == [0, 1]  # trained in full
    assert [r["stage"] for r in method["rounds_kept"]] == ["dbudget.f0-r0"]  # the others not run
    trials = prov["trials"]
    assert 1 <= len(trials) < 8 and budget["trials"]["scored"] == sum(t["score"] is not None for t in trials)
    assert prov["optuna"]["problems"] == []
