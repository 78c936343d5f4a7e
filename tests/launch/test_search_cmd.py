"""``autoaug search``: configuration layering, user errors, and (slow) real searches on CIFAR-10:
a smoke search, a search whose trials all fail, a driver killed with SIGKILL then resumed, and a
search killed in calibration then sent SIGTERM in its trials and while re-scoring."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import optuna
import pytest

from autoaug.core.errors import UserInputError
from autoaug.launch.cli import build_parser, main
from autoaug.launch.search_cmd import build_search_config
from autoaug.proxy_models.train import TrainConfig
from autoaug.search.methods.train.method import TrainMethodConfig
from autoaug.search.run_dir import CONFIG_FILE, autoaug_version
from autoaug.search.tune.tune_storage import StateCopy

REPO = Path(__file__).resolve().parents[2]
SEARCH = [sys.executable, "-m", "autoaug.launch.cli", "search"]

# A few hundred real images, one epoch: seconds per trial on a CPU.
TINY = ["--set", "train.epochs=1", "--set", "train.train_size=256", "--set", "train.val_size=128"]


def _config(argv):
    return build_search_config(build_parser().parse_args(["search", *argv]))


def _dirs(tmp_path):
    return ["--storage", str(tmp_path / "runs"), "--store", str(tmp_path / "store")]


# ----------------------------------------------------------------------------------------------
# Configuration layering


def test_preset_file_set_and_flags_layer_in_that_order(tmp_path):
    path = tmp_path / "search.yaml"
    path.write_text(
        "preset: smoke\nname: from-file\nnum_trials: 7\nsampler: random\n"
        "train: {epochs: 3, lr: 0.2}\nspace: {num_sub_policies: 3}\n"
    )
    config = _config(
        [
            "--config",
            str(path),
            "--set",
            "train.epochs=4",
            "--set",
            "num_trials=9",
            "--num-trials",
            "11",
            "--data",
            "d.parquet",
            "--seed",
            "5",
        ]
    )
    assert config.name == "from-file" and config.sampler == "random"
    assert config.method_config.num_trials == 11  # flag > --set > file
    assert config.train == TrainConfig.from_preset("smoke", epochs=4, lr=0.2, data="d.parquet", seed=5)
    assert config.seed == 5  # --seed seeds the sampler and the trials' shared model init
    assert config.space.num_sub_policies == 3
    assert config.concurrency == 2  # from the smoke preset


def test_flags_map_onto_the_config(tmp_path):
    config = _config(
        [
            "--preset",
            "cpu",
            "--concurrency",
            "0",
            "--cpus-per-trial",
            "0.5",
            "--gpus-per-trial",
            "0.25",
            "--no-early-stopping",
            "--grace-period",
            "3",
            "--reduction-factor",
            "4",
            "--max-failures",
            "2",
            "--top-n",
            "3",
            "--exclude-ops",
            "SamplePairing, Invert",
            "--sub-policies",
            "4",
            "--sampler",
            "random",
            "--optuna-storage",
            "sqlite:////tmp/x.db",
            "--name",
            "n",
            *_dirs(tmp_path),
        ]
    )
    assert config.concurrency is None and config.cpus_per_trial == 0.5 and config.gpus_per_trial == 0.25
    assert config.method_config == TrainMethodConfig(
        num_trials=TrainMethodConfig.PRESETS["cpu"]["num_trials"],  # the preset's: no --num-trials given
        early_stopping=False,
        grace_period=3,
        reduction_factor=4,
        top_n=3,
    )
    assert config.max_failures == 2 and config.sampler == "random"
    assert config.space.exclude_ops == ("SamplePairing", "Invert") and config.space.num_sub_policies == 4
    assert config.optuna_storage == "sqlite:////tmp/x.db"
    assert config.storage == str(tmp_path / "runs") and config.store == str(tmp_path / "store")
    assert config.train == TrainConfig.from_preset("proxy-cpu", max_val_size=5000)
    assert config.startup_trials is None
    assert _config(["--preset", "cpu", "--startup-trials", "5", *_dirs(tmp_path)]).startup_trials == 5


def test_default_preset_is_cpu():
    assert _config(["--name", "n"]).train == TrainConfig.from_preset("proxy-cpu", max_val_size=5000)


def test_base_and_warm_start_flags(tmp_path):
    """The cpu preset measures both on the data; the flags give them, or turn the warm start off."""
    default = _config(["--name", "n", *_dirs(tmp_path)])
    assert (default.base, default.warm_start) == ("auto", "auto")
    given = _config(
        ["--name", "n", "--base", "crop", "--warm-start", "autoaugment-svhn, autoaugment-imagenet", *_dirs(tmp_path)]
    )
    assert (given.base, given.space.base) == ("crop", "crop")
    assert given.warm_start == ("autoaugment-svhn", "autoaugment-imagenet")
    assert _config(["--name", "n", "--no-warm-start", *_dirs(tmp_path)]).warm_start == ()
    # A preset's parameters stay attached to it: randaugment:n=2,m=9 is one reference.
    listed = _config(
        [
            "--name",
            "n",
            "--space",
            "randaugment",
            "--warm-start",
            "randaugment:n=2,m=9,trivialaugment",
            *_dirs(tmp_path),
        ]
    )
    assert listed.warm_start == ("randaugment:n=2,m=9", "trivialaugment")
    assert _config(["--name", "n", "--warm-start", "AUTO", "--preset", "smoke", *_dirs(tmp_path)]).warm_start == "auto"
    assert _config(["--name", "n", "--set", "base=none", *_dirs(tmp_path)]).space.base == "none"
    with pytest.raises(
        UserInputError, match="SearchConfig.base: 'flip' is invalid; expected one of none, crop, standard, or 'auto'"
    ):
        _config(["--base", "flip"])


def test_the_regime_and_grouping_flags_reach_the_trials_config(tmp_path):
    config = _config(
        ["--name", "n", "--train-per-class", "50", "--image-size", "auto", "--group-by", "track", *_dirs(tmp_path)]
    )
    assert (config.train.train_per_class, config.train.image_size, config.train.group_by) == (50, None, "track")


def test_invalid_values_become_one_line_user_errors(tmp_path):
    with pytest.raises(UserInputError, match="invalid search config: SearchConfig.num_trials: 0 is invalid"):
        _config(["--num-trials", "0"])
    path = tmp_path / "c.yaml"
    path.write_text("preset: huge\n")
    with pytest.raises(UserInputError, match="unknown preset 'huge'"):
        _config(["--config", str(path)])
    with pytest.raises(UserInputError, match=r"unknown op 'Rotat' \(did you mean 'Rotate'\?\)"):
        _config(["--exclude-ops", "Rotat"])


def test_the_space_flag_set_and_file_choose_the_space_family(tmp_path):
    assert _config(["--name", "n", *_dirs(tmp_path)]).space.family == "aa"
    config = _config(["--name", "n", "--space", "randaugment", "--exclude-ops", "Identity", *_dirs(tmp_path)])
    assert (config.space.family, config.space.num_magnitude_bins, config.space.exclude_ops) == (
        "randaugment",
        31,
        ("Identity",),
    )
    assert _config(["--name", "n", "--set", "space.family=trivialaugment", *_dirs(tmp_path)]).space.ranges == "wide"
    path = tmp_path / "s.yaml"
    path.write_text("space: {family: randaugment}\n")
    assert _config(["--name", "n", "--config", str(path), *_dirs(tmp_path)]).space.family == "randaugment"
    # the flag wins over the file, as every flag does
    flagged = _config(["--name", "n", "--config", str(path), "--space", "aa", *_dirs(tmp_path)])
    assert flagged.space.family == "aa" and flagged.space.num_magnitude_bins == 10
    # auto: measured in calibration (with the warm start); the aa space until then
    auto = _config(["--name", "n", "--space", "auto", "--warm-start", "auto", *_dirs(tmp_path)])
    assert (auto.family, auto.space.family) == ("auto", "aa")


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["--space", "rand"],
            "SearchConfig.family: 'rand' is invalid; expected one of aa, randaugment, trivialaugment, or 'auto'",
        ),
        (["--set", "space.family=auto"], "SearchSpace.family: 'auto' is invalid"),
        (
            ["--space", "randaugment", "--sub-policies", "3"],
            "SearchSpace.num_sub_policies: 3 does not apply to the randaugment family",
        ),
        (
            ["--space", "trivialaugment", "--method", "pba", "--data", "x.parquet"],
            "method pba searches the aa space only; space.family is 'trivialaugment' "
            "(use --method train for the trivialaugment family)",
        ),
        (["--resume", "x", "--space", "randaugment"], "cannot be combined with --name, --space"),
    ],
)
def test_bad_or_conflicting_space_families_are_one_line(tmp_path, capsys, argv, message):
    assert main(["search", "--name", "n", *argv, *_dirs(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("autoaug: error: ") and message in err
    assert len(err.splitlines()) == 1


# ----------------------------------------------------------------------------------------------
# User errors: exit status 2 and one line, before Ray starts


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--name", "x"], "no training data: give --data"),
        (["--data", "/nonexistent/train.parquet", "--name", "x"], "dataset not found: /nonexistent/train.parquet"),
        (["--resume", "x", "--num-trials", "3"], "cannot be combined with --num-trials"),
        (["--resume", "nothing-here"], "no search named 'nothing-here'"),
    ],
)
def test_user_errors_exit_2(tmp_path, capsys, argv, message):
    assert main(["search", *argv, *_dirs(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("autoaug: error: ") and message in err
    assert len(err.splitlines()) == 1


# Settings that would fail in every trial or run until stopped: refused at the configuration, before
# the data is decoded or Ray starts.
@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["--space", "trivialaugment", "--set", "space.num_magnitude_bins=5000"],
            "invalid search config: SearchSpace.num_magnitude_bins: 5000 is invalid; expected an integer from 1 to "
            "1,000 (the magnitude bins a policy may have)",
        ),
        (
            ["--set", "space.num_sub_policies=40000"],
            "invalid search config: SearchSpace.num_sub_policies: 40000 is invalid; expected an integer from 1 to "
            "32,768 (the sub-policies a policy may hold",
        ),
        (
            ["--sub-policies", "10000"],
            "top_n 5 x space.num_sub_policies 10,000 = 50,000 sub-policies in the assembled policy, more than a "
            "policy may hold (32,768)",
        ),
        (
            ["--set", "train.epochs=1000000000000"],
            "invalid search config: TrainConfig.epochs must be an integer from 1 to 10,000 (5.5x the longest "
            "published schedule, AutoAugment's 1,800 epochs), got 1000000000000",
        ),
        (
            ["--space", "auto"],  # the smoke preset warm-starts from nothing: the aa space, without a word
            "--space auto needs --warm-start auto (the family of the published policy that transfers best, measured "
            "with it); the warm start is none, the smoke preset's: give --warm-start auto, or --space "
            "aa|randaugment|trivialaugment",
        ),
        (
            ["--space", "auto", "--warm-start", "autoaugment-svhn"],
            "--space auto needs --warm-start auto (the family of the published policy that transfers best, measured "
            "with it); the warm start is autoaugment-svhn: give",
        ),
        (["--set", "family=auto"], "--space auto needs --warm-start auto"),
    ],
)
def test_a_search_beyond_a_limit_or_asking_auto_without_its_measure_is_one_line_before_any_work(
    tmp_path, capsys, cifar_train, argv, message
):
    code = main(["search", "--preset", "smoke", "--data", str(cifar_train), "--name", "n", *argv, *_dirs(tmp_path)])
    out, err = capsys.readouterr()
    assert code == 2 and err.startswith(f"autoaug: error: {message}") and err.count("\n") == 1, err
    assert "decoded" not in out + err and "Ray" not in out + err  # before the data is read, before Ray
    assert not (tmp_path / "runs").exists()


def test_the_cpu_presets_auto_family_with_another_warm_start_is_the_spaces_own(tmp_path):
    # What the preset sets is not what the user asked: --preset cpu --no-warm-start searches aa, as documented.
    config = _config(["--preset", "cpu", "--no-warm-start", "--name", "n", *_dirs(tmp_path)])
    assert (config.family, config.warm_start, config.space.family) == ("auto", (), "aa")
    asked = _config(["--space", "auto", "--name", "n", *_dirs(tmp_path)])  # the cpu preset warm-starts auto
    assert (asked.family, asked.warm_start) == ("auto", "auto")


@pytest.mark.parametrize(
    ("warm_start", "family"),
    [("randaugment", "randaugment"), ("trivialaugment", "trivialaugment"), ("autoaugment-svhn", "aa")],
)
def test_the_cpu_presets_auto_family_follows_a_warm_start_given_as_a_point_of_another_family(
    tmp_path, warm_start, family
):
    # --preset cpu --warm-start randaugment searches around RandAugment (as --warm-start auto does
    # when it transfers best); before, the aa space refused it ("num_magnitude_bins=31, but the
    # search space has num_magnitude_bins=10"). AutoAugment's policies stay in the space's own aa.
    argv = ["--preset", "cpu", "--warm-start", warm_start, "--base", "standard", "--data", "x", "--name", "n"]
    config = _config([*argv, *_dirs(tmp_path)])
    assert config.space.family == family and config.warm_start == (warm_start,)
    config.check_runnable()


@pytest.mark.parametrize(
    "argv",
    [
        ["--no-rescore", "--rescore-max-seeds", "5"],  # before: re-scored and raced 4 rounds, --no-rescore lost
        ["--rescore-max-seeds", "5", "--no-rescore"],
        ["--no-rescore", "--rescore-seeds", "2"],
        ["--rescore-val-size", "100", "--no-rescore"],  # before: silently unused
    ],
)
def test_no_rescore_with_a_rescore_or_race_flag_is_one_line_naming_both_before_any_work(tmp_path, capsys, argv):
    code = main(["search", "--preset", "smoke", "--data", "/nowhere/d.parquet", "--name", "n", *argv, *_dirs(tmp_path)])
    err = capsys.readouterr().err
    other = " ".join(a for a in argv if a != "--no-rescore")
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith(f"autoaug: error: --no-rescore and {other} contradict each other"), err
    assert err.rstrip().endswith("give one") and not (tmp_path / "runs").exists()


def test_an_existing_run_name_is_refused(tmp_path, capsys, cifar_small):
    # (cifar_small: the preflight decodes every image of the data before this check; 50,000 cost 5 s)
    run = tmp_path / "runs" / "taken"
    run.mkdir(parents=True)
    (run / "search_config.json").write_text("{}")
    assert main(["search", "--preset", "smoke", "--data", str(cifar_small), "--name", "taken", *_dirs(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "a search named 'taken' already exists" in err and "--resume taken" in err and "--overwrite" in err


def test_a_calibration_to_reuse_that_is_not_there_is_one_line_before_any_work(tmp_path, capsys, cifar_small):
    argv = [
        "search",
        "--preset",
        "smoke",
        "--data",
        str(cifar_small),
        "--name",
        "b",
        "--base",
        "auto",
        *_dirs(tmp_path),
    ]
    assert main([*argv, "--calibration-from", "a"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"autoaug: error: --calibration-from a: no search named 'a' in {tmp_path / 'runs'}"
    assert not (tmp_path / "runs" / "b").exists()  # nothing started


# ----------------------------------------------------------------------------------------------
# Real searches (Ray + the real trainer on the real CIFAR-10 Parquet)


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.usefixtures("shared_ray")
def test_a_smoke_search_stopped_by_a_full_store_is_one_line_then_resumes_and_stores_its_policy_with_provenance(
    tmp_path, capsys, cifar_small
):
    """A smoke search whose policy store is full when it stores (the failpoint
    ``store.after_version_write=enospc``): one line, no traceback, no half-written version; its
    resume stores the assembled policy (as version 2: the failed save's number is not reused),
    with the provenance an uninterrupted search records.
    (One search for both: a search costs the suite about 20 CPU-s.)"""
    from autoaug.core.failpoints import armed
    from autoaug.policies.store import PolicyStore
    from autoaug.proxy_models.data import open_dataset
    from autoaug.proxy_models.splits import reduced_split

    argv = [
        "search",
        "--preset",
        "smoke",
        "--data",
        str(cifar_small),
        "--name",
        "smoke",
        "--num-trials",
        "3",
        "--concurrency",
        "1",
        *TINY,
        *_dirs(tmp_path),
    ]
    with armed("store.after_version_write=enospc"):
        assert main(argv) == 1
    captured = capsys.readouterr()
    out, err = captured.out, captured.err
    assert out.count("] trial ") >= 3 and "best " in out  # a progress line per finished trial
    assert "stored as" not in out and "Traceback" not in err
    errors = [line for line in err.splitlines() if line.startswith("autoaug: error:")]
    assert len(errors) == 1 and errors[0].startswith(
        f"autoaug: error: cannot write policy store {tmp_path / 'store'}: no spa"
    )
    assert "autoaug search --resume smoke" in errors[0]  # the run is kept: once space is freed, it stores
    folder = tmp_path / "store" / "smoke"
    left = [p.name for p in folder.iterdir()] if folder.exists() else []
    assert [n for n in left if n.endswith(".parquet") or ".tmp-" in n] == []  # no version, no temporary file

    assert main(["search", "--resume", "smoke", *_dirs(tmp_path)]) == 0
    out = capsys.readouterr().out
    # The failed save's number stays issued (docs/store.md: numbers are never reused): version 2.
    assert "stored as smoke@2 in " + str(tmp_path / "store") in out
    assert PolicyStore(str(tmp_path / "store")).versions("smoke") == [2]

    stored = PolicyStore(str(tmp_path / "store")).get("smoke@2")
    policy, prov = stored.policy, stored.provenance
    # 3 trials x 5 sub-policies of 2 ops, duplicates removed
    assert 5 <= len(policy.sub_policies) <= 15 and all(len(s) == 2 for s in policy.sub_policies)
    assert policy.num_magnitude_bins == 10
    trials = prov["trials"]
    assert len(trials) == 3 and len({t["trial_id"] for t in trials}) == 3
    for t in trials:
        assert t["status"] in ("completed", "early_stopped") and 0.0 <= t["score"] <= 1.0
        assert len(t["policy"]["sub_policies"]) == 5 and t["epochs"] == 1
    # the final policy starts with the best trial's sub-policies
    best = max(trials, key=lambda t: t["score"])
    assert prov["best"]["score"] == best["score"]
    first = [(o["op"], o["probability"], o["magnitude_bin"]) for o in best["policy"]["sub_policies"][0]]
    assert [(o.op, o.probability, o.magnitude_bin) for o in policy.sub_policies[0]] == first
    # fingerprints are those of the split every trial trained on
    ds = open_dataset(str(cifar_small))
    split = reduced_split(ds.labels, train_size=256, val_size=128, seed=0, dataset_fingerprint=ds.fingerprint())
    assert prov["dataset"]["fingerprint"] == ds.fingerprint()
    assert prov["split"]["fingerprint"] == split.fingerprint
    assert prov["search"]["config"]["num_trials"] == 3 and prov["search"]["config"]["train"]["epochs"] == 1
    for lib in ("torch", "torchvision", "ray", "optuna", "nvidia-dali", "pyarrow"):
        assert prov["versions"][lib]
    assert prov["time"]["elapsed_s"] > 0 and "git" in prov
    assert prov["optuna"]["consistent_with_tune"] is True
    # result.json in the run directory, and the Optuna study readable with optuna.load_study
    result = json.loads((tmp_path / "runs" / "smoke" / "result.json").read_text())
    assert result["stored"]["ref"] == "smoke@2" and result["policy_hash"] == policy.content_hash
    study = optuna.load_study(study_name="smoke", storage=f"sqlite:///{tmp_path}/runs/smoke/optuna.db")
    assert sorted(t.user_attrs["tune_trial_id"] for t in study.trials) == sorted(t["trial_id"] for t in trials)
    assert all(t.state.name == "COMPLETE" for t in study.trials)
    # finished search: --resume just reports it
    assert main(["search", "--resume", "smoke", *_dirs(tmp_path)]) == 0
    assert "stored as smoke@2" in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.slow
@pytest.mark.usefixtures("shared_ray")
@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (
            ["--gpus-per-trial", "0.125", "--set", "train.device=cuda"],
            "each trial needs 0.125 GPU(s) but the largest node has 0",
        ),
        (["--cpus-per-trial", "64"], "each trial needs 64 CPU(s) but the largest node has"),
    ],
    ids=["gpus", "cpus"],
)
def test_a_search_no_node_can_run_is_refused_before_any_work_and_leaves_no_run(
    tmp_path, capsys, cifar_small, flags, says
):
    """A trial asking for more than any node of the local Ray has would wait forever (e.g. the
    ``gpu`` preset on a laptop): one line, exit 2, no run directory (the name stays free)."""
    argv = ["search", "--preset", "smoke", "--data", str(cifar_small), "--name", "big", *TINY, *flags, *_dirs(tmp_path)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0] and "it would never start" in err[0], err
    assert not (tmp_path / "runs" / "big").exists()


@pytest.mark.usefixtures("shared_ray")
def test_search_whose_trials_all_fail_exits_nonzero_with_the_first_error(tmp_path, capsys, cifar_small, monkeypatch):
    def exploding_trial(config, *, train_config, space, policy_prefix, score_window):
        raise ValueError(f"proxy training exploded for {policy_prefix}")

    monkeypatch.setattr("autoaug.search.methods.train.trial.run_trial", exploding_trial)
    argv = [
        "search",
        "--preset",
        "smoke",
        "--data",
        str(cifar_small),
        "--name",
        "doomed",
        "--num-trials",
        "2",
        "--concurrency",
        "1",
        "--max-failures",
        "0",
        *TINY,
        *_dirs(tmp_path),
    ]
    assert main(argv) == 1
    captured = capsys.readouterr()
    assert "autoaug: error: all 2 trials of search 'doomed' failed; first error (trial " in captured.err
    assert "ValueError: proxy training exploded for doomed" in captured.err
    assert captured.out.count("FAILED: ValueError: proxy training exploded") == 2
    assert not (tmp_path / "runs" / "doomed" / "result.json").exists()
    assert not (tmp_path / "store" / "doomed").exists()


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.usefixtures("shared_ray")  # the resume runs in this process, as `autoaug search --resume crash` does
def test_killed_driver_resumes_to_exactly_the_requested_trials_with_the_budget_it_left(
    tmp_path, capsys, cifar_small, failpoints_armed
):
    """The first trial's worker killed mid-epoch (the crash matrix's ``train.mid_epoch``: Tune
    retries the trial, ASHA's rungs go on), then kill -9 of the driver right after the 2nd trial's end was saved -- in Tune's state (the
    guard's snapshot), in the study (before the progress line; Tune's state holds it RUNNING, the
    study finished) and in budget.json --, its last Tune snapshot then cut short as a full disk
    would: the resume runs exactly the requested trials, none twice, keeps the study consistent,
    and starts with the time budget less what the killed session spent (the time no driver ran is
    not counted), says so, and the result records both sessions. The killed driver was one of two
    started at once with the same name and storage: the other is refused (exit 2, one line)
    before it trains anything, and the run the first one holds finishes intact (through its
    resume). (One pair of drivers for the five behaviours: each pair costs about 40 CPU-s of the
    suite.)"""
    from autoaug.search.budget import format_duration

    num_trials, kill_after = 5, 2
    dirs = _dirs(tmp_path)
    argv = [
        *SEARCH,
        "--preset",
        "smoke",
        "--data",
        str(cifar_small),
        "--name",
        "crash",
        "--num-trials",
        str(num_trials),
        "--concurrency",
        "1",
        "--set",
        "train.epochs=2",
        "--set",
        "train.train_size=256",
        "--set",
        "train.val_size=128",
        "--time-budget",
        "1h",
        *dirs,
    ]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    run = tmp_path / "runs" / "crash"
    # Two drivers started at once, the same command (the failpoint fires once, in whichever trains):
    # one takes the run and is killed by SIGKILL there; the other is refused before it trains.
    armed = failpoints_armed(f"train.mid_epoch:2=kill;search.after_trial_saved:{kill_after}=kill", env)
    logs = [(tmp_path / f"driver{i}.out", tmp_path / f"driver{i}.err") for i in range(2)]
    files = [(open(out, "w"), open(err, "w")) for out, err in logs]  # (files: no pipe to drain or hold open)
    procs = [
        subprocess.Popen(argv, cwd=REPO, env=armed, stdout=out, stderr=err, start_new_session=True)
        for out, err in files
    ]
    try:
        for p in procs:
            p.wait(timeout=300)  # an event: the process ends (refused, or killed at the failpoint)
    finally:
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)  # leftover Ray processes of the killed driver's session
            except ProcessLookupError:
                pass
        for out, err in files:
            out.close(), err.close()
    outputs = [(out.read_text(), err.read_text()) for out, err in logs]
    codes = [p.returncode for p in procs]
    assert sorted(codes) == [-signal.SIGKILL, 2], [o[1][-2000:] for o in outputs]
    assert failpoints_armed.fired("search.after_trial_saved") and failpoints_armed.fired("train.mid_epoch")
    killed_out, loser = outputs[codes.index(-signal.SIGKILL)], outputs[codes.index(2)]
    err = [line for line in loser[1].splitlines() if line.strip()]
    assert err[-1].startswith(f"autoaug: error: a search named 'crash' is running in {tmp_path / 'runs'} (pid "), err
    assert not any("Traceback" in line for line in err)
    assert "] trial " not in loser[0] and "stored as" not in loser[0]  # refused before any trial
    assert "] trial " in killed_out[0]  # the other trained until the failpoint
    assert not (run / "result.json").exists()
    study = optuna.load_study(study_name="crash", storage=f"sqlite:///{run}/optuna.db")
    before = sorted(t.user_attrs["tune_trial_id"] for t in study.trials if t.state.is_finished())
    assert len(before) == kill_after
    killed = json.loads((run / "budget.json").read_text())
    assert [s["session"] for s in killed["sessions"]] == ["start 1"] and killed["ended"] is None
    spent = killed["sessions"][0]["spent_s"]
    assert spent > 0
    # A full disk could have cut Tune's last snapshot short: resume puts back its last complete copy
    # (the one the driver's StateCopy would have kept of that snapshot).
    assert StateCopy(str(run)).keep()
    state = sorted(run.glob("experiment_state-*.json"))[-1]
    state.write_bytes(state.read_bytes()[:100])

    capsys.readouterr()
    code = main(["search", "--resume", "crash", *dirs])
    resumed = capsys.readouterr()
    assert code == 0, resumed.out[-3000:] + resumed.err[-3000:]
    assert "stored as crash@1" in resumed.out
    assert (
        f"Ray Tune's saved state {state.name} was cut short or damaged (JSONDecodeError) at 100 bytes (a full "
        "disk?); resuming from its last complete copy" in resumed.out + resumed.err
    )

    result = json.loads((run / "result.json").read_text())
    trials = result["provenance"]["trials"]
    ids = [t["trial_id"] for t in trials]
    assert len(ids) == num_trials and len(set(ids)) == num_trials  # exactly the requested, no duplicates
    assert all(t["status"] in ("completed", "early_stopped") for t in trials)
    assert sum(t["num_failures"] for t in trials) == 1  # the trial whose worker was killed, retried once
    hashes = [t["policy_hash"] for t in trials]
    assert len(set(hashes)) == num_trials  # no candidate trained twice under another id
    for trial_id in before:  # the trials finished before the kill are kept
        assert trial_id in ids
    # The Optuna study agrees with Tune: one finished Optuna trial per Tune trial, same score,
    # nothing left RUNNING, every Optuna trial accounted for.
    assert result["provenance"]["optuna"]["problems"] == []
    study = optuna.load_study(study_name="crash", storage=f"sqlite:///{run}/optuna.db")
    tagged = [t for t in study.trials if "tune_trial_id" in t.user_attrs]
    assert sorted(t.user_attrs["tune_trial_id"] for t in tagged) == sorted(ids)
    # completed trials are COMPLETE, trials ASHA stopped early PRUNED (since a81caef)
    expected = {t["trial_id"]: {"completed": "COMPLETE", "early_stopped": "PRUNED"}[t["status"]] for t in trials}
    assert {t.user_attrs["tune_trial_id"]: t.state.name for t in tagged} == expected
    scores = {t["trial_id"]: t["score"] for t in trials}
    assert all(t.value == pytest.approx(scores[t.user_attrs["tune_trial_id"]]) for t in tagged)
    others = [t for t in study.trials if "tune_trial_id" not in t.user_attrs]
    assert all(t.state.name == "FAIL" and t.user_attrs.get("autoaug_orphaned") for t in others)
    # Where ASHA's rungs were measured: each trial once, at the epoch it ended, the orphans left out
    ends: dict[str, int] = {}
    for t in trials:
        ends[str(t["epochs"])] = ends.get(str(t["epochs"]), 0) + 1
    if len(ends) > 1:  # ASHA stopped some (it does on most orders of these scores)
        rungs = result["provenance"]["method"]["rungs"]
        assert rungs["ended"] == dict(sorted(ends.items(), key=lambda kv: int(kv[0])))
        assert "early stopping: do ASHA's rungs rank these trials? epoch 1 -> 2" in resumed.out
    else:  # every trial ended at one epoch: nothing to rank, nothing said
        assert "rungs" not in (result["provenance"].get("method") or {}) and "ASHA's rungs" not in resumed.out

    # The time budget: the killed session's time, as it had saved it, is taken off.
    assert (
        f"time budget: {format_duration(3600 - spent)} left of 1h ({format_duration(spent)} spent in earlier "
        "driver sessions)" in resumed.out
    )
    assert "time budget: 1h, " in resumed.out and "it did not end the search" in resumed.out
    after = json.loads((run / "budget.json").read_text())
    first, second = after["sessions"]
    assert (first["session"], second["session"]) == ("start 1", "resume 2")
    assert first["spent_s"] == spent
    assert second["remaining_at_start_s"] == pytest.approx(3600 - spent)
    assert after["spent_s"] == pytest.approx(spent + second["spent_s"])
    prov = result["provenance"]
    assert prov["budget"]["sessions"][1]["remaining_at_start_s"] == pytest.approx(3600 - spent)
    assert prov["budget"]["ended"] is None
    # The run the refused driver would have shared: one stored version, the first driver's search.
    from autoaug.policies.store import PolicyStore

    assert PolicyStore(str(tmp_path / "store")).versions("crash") == [1]


def test_one_driver_per_run_directory(tmp_path):
    """RunDir.driver_lock: while one driver holds a run, another (another open of the lock file, as
    another process would) is refused with RunExistsError naming the holder; released on exit."""
    from autoaug.core.errors import RunExistsError
    from autoaug.search.run_dir import RunDir

    first = RunDir(str(tmp_path / "runs"), "same")
    with first.driver_lock():
        with pytest.raises(
            RunExistsError,
            match=rf"^a search named 'same' is running in {tmp_path / 'runs'} "
            rf"\(pid {os.getpid()} on .*\); wait for it to finish",
        ):
            with RunDir(str(tmp_path / "runs"), "same").driver_lock():
                pass
        with RunDir(str(tmp_path / "runs"), "other").driver_lock():  # another name: its own lock
            pass
    with RunDir(str(tmp_path / "runs"), "same").driver_lock():  # released
        pass
    assert not (tmp_path / "runs" / "same").exists()  # the lock lives beside the run directory, not in it


# ----------------------------------------------------------------------------------------------
# The time budget (--time-budget): real searches


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.usefixtures("shared_ray")
def test_a_search_with_a_budget_of_seconds_ends_by_it_with_a_stored_policy_and_says_so(tmp_path, capsys, cifar_small):
    """2 seconds are gone before Ray has started: the first trials run to their first report (the
    budget never leaves a search without a result), are stopped there, nothing more is proposed,
    and the policy assembled from them is stored; stdout and the provenance say the budget ended it."""
    from autoaug.policies.store import PolicyStore

    argv = [
        "search",
        "--preset",
        "smoke",
        "--data",
        str(cifar_small),
        "--name",
        "brief",
        "--num-trials",
        "4",
        "--concurrency",
        "1",
        "--set",
        "train.epochs=3",
        "--set",
        "train.train_size=256",
        "--set",
        "train.val_size=128",
        "--time-budget",
        "2s",
        *_dirs(tmp_path),
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "time budget: 2s for the whole search (calibration, trials, re-scoring, storing)" in out
    assert "nothing new starts, running trials end at their next report" in out  # said when it happens
    assert "(stopped by the time budget)" in out  # the progress line of a trial it stopped
    assert "the time budget (2s) ended the search after " in out and " of 4 trials" in out
    assert "stored as brief@1 in " + str(tmp_path / "store") in out

    run = tmp_path / "runs" / "brief"
    prov = json.loads((run / "result.json").read_text())["provenance"]
    budget = prov["budget"]
    assert prov["search"]["config"]["time_budget_s"] == 2.0
    assert budget["time_budget_s"] == 2.0 and budget["ended"]["stage"] == "trials" and budget["spent_s"] > 2
    trials = prov["trials"]
    scored = [t for t in trials if t["score"] is not None]
    # every trial ended by the budget: scored at its first report, or never started
    assert all(t["status"] == "budget_stopped" for t in trials)
    assert scored and all(t["epochs"] == 1 for t in scored) and len(trials) < 4
    assert budget["trials"] == {
        "unit": "trials",
        "planned": 4,
        "scored": len(scored),
        "stopped": len(scored),
        "not_started": len(trials) - len(scored),
    }
    assert set(budget["stopped_trials"]["brief"]) == {t["trial_id"] for t in trials}
    assert prov["counts"]["budget_stopped"] == len(trials)
    # Optuna agrees: the trials the budget ended are PRUNED, as an ASHA stop, nothing left RUNNING
    assert prov["optuna"]["problems"] == []
    study = optuna.load_study(study_name="brief", storage=f"sqlite:///{run}/optuna.db")
    assert {t.state.name for t in study.trials} == {"PRUNED"} and len(study.trials) == len(trials)
    stored = PolicyStore(str(tmp_path / "store")).get("brief@1")
    assert stored.provenance["budget"]["ended"]["stage"] == "trials"
    assert prov["assembly"]["selected_trials"][0] in {t["trial_id"] for t in scored}
    on_disk = json.loads((run / "budget.json").read_text())
    assert on_disk["ended"] == budget["ended"] and len(on_disk["sessions"]) == 1
    # A search the budget ended and that stored its policy: --resume returns that outcome
    assert main(["search", "--resume", "brief", *_dirs(tmp_path)]) == 0
    again = capsys.readouterr().out
    assert "stored as brief@1" in again and "the time budget (2s) ended the search" in again
    assert PolicyStore(str(tmp_path / "store")).versions("brief") == [1]


# The driver stalls at a failpoint once the first trial's end is saved (it says so on the named
# pipe "$LOG/gate" and waits there to be released through it); the disk is filled while it is
# stalled and it is let go: its next write meets the full disk, whatever the trials' timing.
SEARCH_ON_A_FILLING_DISK = r"""
set -u
mount -t tmpfs -o size=8m tmpfs "$D"
mkfifo "$LOG/gate"
# The driver, stalled at the failpoint: it writes "PID NAME" into the gate there and waits for a
# release; once it exits, "exited STATUS" follows. Each read below waits for one of them.
( AUTOAUG_FAILPOINTS="search.after_trial_saved:1=stall($LOG/gate)" AUTOAUG_FAILPOINTS_FIRED="$LOG/fired" \
  autoaug search $ARGS --storage "$D/runs" --store "$D/store" >"$LOG/out1" 2>"$LOG/err1"
  echo "exited $?" >"$LOG/gate" ) &
read -r event <"$LOG/gate"
case "$event" in
  exited*) echo "the driver ended before the failpoint: $event"; exit 3 ;;
esac
dd if=/dev/zero of="$D/filler" bs=64k 2>/dev/null
echo go >"$LOG/gate"
read -r event <"$LOG/gate"; echo "rc1=${event#exited }"
wait
rm "$D/filler"
autoaug search --resume full --storage "$D/runs" >"$LOG/out2" 2>"$LOG/err2"; echo "rc2=$?"
cp "$D/runs/full/result.json" "$LOG/result.json" 2>/dev/null
"""


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_search_stopped_by_a_full_disk_is_one_line_and_resumes_once_space_is_freed(
    tmp_path, cifar_small, in_mount_namespace
):
    """A real full filesystem (an 8 MiB tmpfs in a user namespace, filled while the driver is
    stalled at a failpoint after the first trial's end is saved), real processes: the search stops at the first write that fails, with one line
    naming the run directory and how to resume, no traceback; resumed once space is freed, it
    finishes exactly the requested trials and stores the policy."""
    mnt, logs = tmp_path / "mnt", tmp_path / "logs"
    mnt.mkdir(), logs.mkdir()
    args = (
        f"--preset smoke --data {cifar_small} --name full --num-trials 3 --concurrency 1 --set train.epochs=1 "
        f"--set train.train_size=256 --set train.val_size=128"
    )
    env = {
        **os.environ,
        "D": str(mnt),
        "LOG": str(logs),
        "ARGS": args,
        "PYTHONUNBUFFERED": "1",
        "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""),
    }
    proc = in_mount_namespace(SEARCH_ON_A_FILLING_DISK, env, timeout=800)
    out1, err1 = (logs / "out1").read_text(), (logs / "err1").read_text()
    assert "rc1=1" in proc.stdout, proc.stdout + proc.stderr + err1[-3000:]
    assert (logs / "fired" / "search.after_trial_saved").is_file()  # the disk filled while the driver waited there
    errors = [line for line in err1.splitlines() if line.startswith("autoaug: error:")]
    assert len(errors) == 1, err1[-3000:]
    assert "cannot write " in errors[0] and str(mnt / "runs" / "full") in errors[0], errors[0]
    assert (
        "no space left on the filesystem (ENOSPC); free space there (or write elsewhere), then resume it with: "
        f"autoaug search --resume full --storage {mnt / 'runs'}" in errors[0]
    ), errors[0]
    assert "Traceback" not in err1 and "Unhandled error" not in err1, err1[-3000:]
    assert "stored as" not in out1

    err2 = (logs / "err2").read_text()
    assert "rc2=0" in proc.stdout, proc.stdout + err2[-3000:]
    assert "stored as full@1" in (logs / "out2").read_text()
    trials = json.loads((logs / "result.json").read_text())["provenance"]["trials"]
    assert len({t["trial_id"] for t in trials}) == 3
    assert all(t["status"] in ("completed", "early_stopped") for t in trials), trials


# ---------------------------------------------------------------------------------------------
# SIGTERM (what Slurm, Kubernetes and systemd send before SIGKILL) to a real search: the unit tests
# of the handler are in tests/launch/test_sigterm.py


def _terminated_at(point: str, argv: list[str], tmp_path: Path) -> tuple[int, str, str]:
    """Run the search ``argv`` with the failpoint ``point`` armed to stall (a named pipe); once its
    driver is there (the event: it says so on the pipe), send it SIGTERM and release it; return its
    exit status, stdout and stderr."""
    where = Path(tempfile.mkdtemp(dir=tmp_path, prefix="term-"))
    gate, fired = where / "gate", where / "fired"
    os.mkfifo(gate)
    env = {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "AUTOAUG_FAILPOINTS": f"{point}=stall({gate})",
        "AUTOAUG_FAILPOINTS_FIRED": str(fired),
    }
    proc = subprocess.Popen(
        argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    out: list[str] = []
    err: list[str] = []
    readers = [
        threading.Thread(target=lambda: out.extend(proc.stdout), daemon=True),
        threading.Thread(target=lambda: err.extend(proc.stderr), daemon=True),
    ]
    for reader in readers:
        reader.start()
    # The release: opens the gate to write once the driver opens it to read (after the signal).
    release = threading.Thread(target=lambda: open(gate, "w").close(), daemon=True)
    try:
        with open(gate) as at_point:  # the driver writes "PID NAME" once it is at the point
            assert at_point.read().split() == [str(proc.pid), point.split(":")[0]]
        os.kill(proc.pid, signal.SIGTERM)
        release.start()
        proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if release.is_alive():  # the driver died before opening the gate again: let the thread go
            os.close(os.open(gate, os.O_RDONLY | os.O_NONBLOCK))
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # what is left of its session (the embedded Ray)
        except ProcessLookupError:
            pass
    for reader in readers:
        reader.join(timeout=30)
    return proc.returncode, "".join(out), "".join(err)


def _one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("autoaug:")]
    assert len(lines) == 1 and "Traceback" not in err, err[-3000:]
    return lines[0]


def _doctored_run_files_are_refused_in_one_line_each(run: Path, dirs: list[str], tmp_path: Path, capsys) -> None:
    """The stopped search's files doctored as a tampered, damaged or upgraded-under-it run directory
    would have them: ``--resume`` (and ``report``) say which file, which version made it and what to
    do, exit 2, no traceback (``tests/search/test_run_files.py`` has the same cases on files made up
    in the test); the original files put back."""
    name = run.name
    state_text, tuner = (run / CONFIG_FILE).read_text(), (run / "tuner.pkl").read_bytes()
    assert json.loads(state_text)["autoaug"] == autoaug_version()
    resume = ["search", "--resume", name, *dirs]
    start_again = f"start the search again with `autoaug search --name {name} --overwrite ...`"

    # search_config.json cut short: --resume and report name it (before: "Expecting value: ...")
    (run / CONFIG_FILE).write_text(state_text[:11])
    for command in (resume, ["report", name, "--storage", dirs[1], "--out", str(tmp_path / "r.png")]):
        assert main(command) == 2
        line = _one_error_line(capsys.readouterr().err)
        assert line.startswith(f"autoaug: error: {run}/{CONFIG_FILE} is damaged (not JSON: "), line
        assert line.endswith(f"or {start_again}")

    # tuner.pkl from autoaug 0.0.9, whose module autoaug.search.tune.progress was renamed since
    (run / CONFIG_FILE).write_text(json.dumps({**json.loads(state_text), "autoaug": "0.0.9"}))
    gone = b"autoaug.search.tune.progress"
    assert gone in tuner
    (run / "tuner.pkl").write_bytes(tuner.replace(gone, b"autoaug.search.tune.progres0"))
    assert main(resume) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert line == (
        f"autoaug: error: {run}/tuner.pkl was written by autoaug 0.0.9 (this is {autoaug_version()}): it names the "
        "module autoaug.search.tune.progres0, which this version does not have; finish the search with autoaug "
        f"0.0.9 (`pip install autoaug==0.0.9`), or start it again with `autoaug search --name {name} --overwrite ...`"
    )

    # ... whose class StudySearcher was renamed, by this very version (an edited checkout)
    (run / CONFIG_FILE).write_text(state_text)
    (run / "tuner.pkl").write_bytes(tuner.replace(b"StudySearcher", b"StudySearchex"))
    assert main(resume) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert line.startswith(f"autoaug: error: {run}/tuner.pkl was written by another build of autoaug "), line
    assert "it names autoaug.search.tune.searcher.StudySearchex, which this one does not have" in line

    # ... corrupted (before: "unregistered extension code 35551")
    (run / "tuner.pkl").write_bytes(tuner[:200] + bytes(255 - b for b in tuner[200:600]) + tuner[600:])
    assert main(resume) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert line.startswith(f"autoaug: error: {run}/tuner.pkl is damaged (not a pickle Ray Tune can read: "), line

    (run / CONFIG_FILE).write_text(state_text)
    (run / "tuner.pkl").write_bytes(tuner)


@pytest.mark.slow
@pytest.mark.timeout(1200)
@pytest.mark.usefixtures("shared_ray")  # the last resume runs in this process
def test_a_search_killed_in_calibration_then_sent_sigterm_in_its_trials_and_while_re_scoring_resumes_with_what_it_saved(
    tmp_path, cifar_small, capsys, kill_driver
):
    """One real search stopped three times, resumed each time:

    1. killed by SIGKILL in calibration once its first base run is saved (the crash matrix's
       ``calibrate.after_run_saved``);
    2. resumed -- calibration trains only the bases not saved -- and sent SIGTERM at a failpoint
       once its first trial's end is saved (the event: it says so on a named pipe): it ends its
       Tune experiment as Ctrl-C does, exit 143 with one line naming the resume command, no native
       dump from Ray's handler. Its run directory, doctored, is refused in one line a file;
    3. restored and resumed: it trains the other trial and is sent SIGTERM while re-scoring, once
       its first run is saved (after Tune's ``fit`` its graceful-stop handler stayed on SIGINT: the
       signal set a finished experiment's flag and the search went on to store, exit 0): exit 143
       again, the resume line, nothing stored, the run saved;
    4. the last ``--resume`` trains nothing of calibration again, keeps the saved re-scoring run,
       and stores the policy with exactly the requested trials."""
    dirs = ["--storage", str(tmp_path / "runs"), "--store", str(tmp_path / "store")]
    argv = [*SEARCH, "--preset", "smoke", "--data", str(cifar_small), "--name", "term", "--num-trials", "2"]
    argv += ["--concurrency", "1", "--no-warm-start", "--base", "auto", "--set", "base_extra_seeds=0"]
    argv += ["--set", "rescore=true", *TINY, *dirs]  # re-scoring's candidates: the two trials assembled, the best one
    resume = [*SEARCH, "--resume", "term", *dirs]
    resume_line = f"resume it with: autoaug search --resume term --storage {tmp_path / 'runs'}"
    run = tmp_path / "runs" / "term"

    kill_driver(argv, {**os.environ, "PYTHONUNBUFFERED": "1"}, "calibrate.after_run_saved:1", 300)
    saved = json.loads((run / "calibration.json").read_text())["runs"]
    assert len(saved) == 1 and not (run / "result.json").exists()  # the first base run, nothing after it
    ((key, first),) = saved.items()

    code, stdout, stderr = _terminated_at("search.after_trial_saved:1", resume, tmp_path)
    assert code == 143, stdout[-3000:] + stderr[-3000:]
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert lines == [
        f"autoaug: terminated (SIGTERM): search 'term' stopped with 1 of 2 trials finished; {resume_line}"
    ], stderr[-3000:]
    assert "SIGTERM received" not in stderr and "Traceback" not in stderr
    assert f"calibration: {key}:" not in stdout + stderr  # the saved run not trained again
    runs = json.loads((run / "calibration.json").read_text())["runs"]
    assert runs[key] == first and len(runs) >= 3  # every base measured, the saved run as it was

    _doctored_run_files_are_refused_in_one_line_each(run, dirs, tmp_path, capsys)

    code, stdout, stderr = _terminated_at("rescore.after_run_saved:1", resume, tmp_path)
    assert code == 143, stdout[-3000:] + stderr[-3000:]
    assert [line for line in stderr.splitlines() if line.strip()] == [
        f"autoaug: terminated (SIGTERM): search 'term' stopped; {resume_line}"
    ], stderr[-3000:]
    assert not (run / "result.json").exists()
    rescored = json.loads((run / "rescore.json").read_text())
    assert len(rescored) == 1
    ((rescore_key, rescore_first),) = rescored.items()

    capsys.readouterr()
    code = main(["search", "--resume", "term", *dirs])  # as `autoaug search --resume term` runs
    resumed = capsys.readouterr()
    assert code == 0, resumed.out[-3000:] + resumed.err[-3000:]
    assert "stored as term@1" in resumed.out
    assert "calibration: base:" not in resumed.out  # calibration ended before: nothing trained again
    assert json.loads((run / "calibration.json").read_text())["runs"] == runs
    rescored = json.loads((run / "rescore.json").read_text())
    assert rescored[rescore_key] == rescore_first and len(rescored) >= 2  # the saved run kept, the others trained
    prov = json.loads((run / "result.json").read_text())["provenance"]
    assert len({t["trial_id"] for t in prov["trials"]}) == len(prov["trials"]) == 2  # exactly the requested
    assert set(prov["calibration"]["base"]["scores"]) == {"none", "crop", "standard"}
    selection = prov["selection"]
    assert len(selection["candidates"]) == len(rescored) and all(c["runs"] for c in selection["candidates"])


# ---------------------------------------------------------------------------------------------
# The end of a search, for a person: the summary, then what to do with the stored policy


def _finished(tmp_path, store: str):
    """The outcome of a finished search of 3 trials stored as found@2 in ``store`` (as
    ``result.json`` describes it)."""
    from autoaug.policies import presets
    from autoaug.policies.policy import Policy
    from autoaug.search.config import SearchConfig
    from autoaug.search.decide.assemble import TrialRecord, assemble_policy, build_provenance
    from autoaug.search.records import outcome_from_result
    from autoaug.search.run_dir import RunDir

    published = presets.resolve("autoaugment-cifar10").sub_policies
    trials = [
        TrialRecord(f"t{i}", i, "completed", {}, Policy(f"found-t{i}", 10, [published[i]]), 0.5 + i / 100, 2)
        for i in range(3)
    ]
    assembled = assemble_policy(trials, name="found", top_n=2)
    data = str(tmp_path / "my data")
    provenance = build_provenance(
        search_config=SearchConfig.from_preset("smoke", data=data, name="found").to_dict(),
        data={"dataset": {"source": data}, "split": {}},
        trials=trials,
        assembled=assembled,
        metric="search_score",
        mode="max",
        run_dir=str(tmp_path / "runs" / "found"),
        optuna={"problems": []},
        timing={},
    )
    result = {
        "policy": assembled.policy.to_dict(),
        "stored": {"name": "found", "version": 2, "ref": "found@2", "store": store},
        "provenance": provenance,
    }
    return outcome_from_result(result, RunDir(str(tmp_path / "runs"), "found"))


@pytest.mark.parametrize("quiet, as_json", [(False, False), (True, False), (False, True)])
def test_a_search_ends_with_the_next_steps_for_a_person(tmp_path, capsys, monkeypatch, quiet, as_json):
    import argparse
    import shlex

    from autoaug.core.progress import Progress
    from autoaug.launch.search_run import _execute
    from autoaug.policies import bases

    store = str(tmp_path / "store")
    outcome = _finished(tmp_path, store)
    args = argparse.Namespace(quiet=quiet, json=as_json)
    assert _execute(lambda: outcome, 0 if quiet else 1, args, Progress("quiet")) == 0
    out = capsys.readouterr().out
    if as_json:
        assert json.loads(out)["ref"] == "found@2"  # one document, nothing else
        return
    assert "stored as found@2" in out
    if quiet:  # -q: only the result
        assert "next steps" not in out
        return
    lines = out.rstrip("\n").splitlines()
    assert lines[-6].startswith("next steps: compare with the baselines")
    compare, export = lines[-5].strip(), lines[-4].strip()
    assert shlex.split(compare)[:8] == [
        "autoaug",
        "compare",
        "--policy",
        "found@2",
        "--store",
        store,
        "--data",
        str(tmp_path / "my data"),
    ]
    assert build_parser().parse_args(shlex.split(compare)[1:]).policies == ["found@2"]
    assert export == f"autoaug policies export found@2 --store {store} --format timm --out found.timm.json"
    assert [line.strip() for line in lines[-3:-1]] == [
        "from autoaug.policies.store import PolicyStore",
        f'policy = PolicyStore("{store}").load("found@2")',
    ]
    base = outcome.policy.base  # the transform line says what to_torchvision() applies before the policy
    assert lines[-1].endswith(f"# its base {base} ({bases.get(base).summary}), then the policy")

    # stored in the default store: no --store to give, PolicyStore() finds it
    monkeypatch.setenv("AUTOAUG_STORE", store)
    assert _execute(lambda: _finished(tmp_path, store), 1, args, Progress("quiet")) == 0
    out = capsys.readouterr().out
    assert "--store" not in out.split("next steps")[1] and 'PolicyStore().load("found@2")' in out
