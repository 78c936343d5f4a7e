"""Tests of launch.compare: statistics, configuration, outputs, resume and store evaluations.

The unit tests build run records by hand; the ``slow`` test trains real runs on CIFAR-10.
"""
from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pyarrow.parquet as pq
import pytest


from autoaug.launch import compare
from autoaug.launch.compare import runner
from autoaug.launch.compare import CompareError, parse_baselines


# ----------------------------------------------------------------------------------------------
# Statistics


def test_mean_ci():
    mean, std, lo, hi = compare.mean_ci([0.5, 0.6, 0.7])
    assert mean == pytest.approx(0.6)
    assert std == pytest.approx(0.1)
    half = 4.302652730 * 0.1 / math.sqrt(3)  # Student t quantile t(0.975, 2) from the tables
    assert (lo, hi) == (pytest.approx(0.6 - half), pytest.approx(0.6 + half))
    one = compare.mean_ci([0.42])
    assert one[0] == 0.42 and all(math.isnan(v) for v in one[1:])
    assert all(math.isnan(v) for v in compare.mean_ci([]))


# ----------------------------------------------------------------------------------------------
# Configuration


def test_parse_baselines_keeps_preset_parameters_together():
    assert parse_baselines("none,crop,standard,randaugment:n=2,m=9,trivialaugment,autoaugment-cifar10") == compare.DEFAULT_BASELINES
    assert parse_baselines("randaugment:n=1,m=5, standard") == ("randaugment:n=1,m=5", "standard")
    assert parse_baselines("") == ()
    assert parse_baselines(None) == compare.DEFAULT_BASELINES
    assert parse_baselines(["standard", " none "]) == ("standard", "none")


def _parquet_pair(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("train.parquet", "test.parquet"):
        (folder / name).write_bytes(b"PAR1")
    return folder


def test_default_test_data(tmp_path):
    both = _parquet_pair(tmp_path / "both")
    assert compare.default_test_data(str(both / "train.parquet")) == str(both / "test.parquet")
    assert compare.default_test_data(str(both)) == str(both)
    only = tmp_path / "only"
    only.mkdir()
    (only / "train.parquet").write_bytes(b"PAR1")
    assert compare.default_test_data(str(only / "train.parquet")) is None
    assert compare.default_test_data(str(only)) is None
    assert compare.default_test_data("cifar10:/data/c10") == "cifar10:/data/c10"
    # Any pyarrow filesystem URI: the sibling test.parquet is looked up there.
    assert compare.default_test_data(f"file://{both}/train.parquet") == str(both / "test.parquet")


def test_config_from_dict(tmp_path):
    data = _parquet_pair(tmp_path / "d")
    cfg = compare.config_from_dict(
        {"data": str(data / "train.parquet"), "preset": "smoke", "seeds": 2, "first_seed": 5,
         "policies": "mine@1", "baselines": "standard", "train": {"epochs": 1}, "out": str(tmp_path / "o")}
    )
    assert cfg.seeds == (5, 6)
    assert cfg.policies == ("mine@1",) and cfg.baselines == ("standard",)
    assert cfg.train.epochs == 1 and cfg.train.test_data == str(data / "test.parquet")
    assert cfg.gpus_per_run == 0.0  # the smoke preset trains on the CPU
    run = cfg.run_config(6)
    assert run.seed == 6 and run.num_threads == cfg.cpus_per_run == 1


@pytest.mark.parametrize(
    "extra, fragment",
    [
        ({"bogus": 1}, "unknown compare setting"),
        ({"train": {"seed": 3}}, "use --seeds"),
        ({"train": {"epochs": 0}}, "epochs must be a positive integer"),
        ({"seeds": 0}, "--seeds must be >= 1"),
        ({"seeds": [1, 1]}, "distinct"),
        ({"preset": "huge"}, "unknown training preset 'huge'"),
        ({"cpus_per_run": 0}, "cpus_per_run must be a positive integer"),
    ],
)
def test_config_from_dict_rejects_bad_settings(tmp_path, extra, fragment):
    data = _parquet_pair(tmp_path / "d")
    with pytest.raises(CompareError, match=fragment):
        compare.config_from_dict({"data": str(data / "train.parquet"), **extra})


def test_config_needs_a_test_split(tmp_path):
    only = tmp_path / "only"
    only.mkdir()
    (only / "train.parquet").write_bytes(b"PAR1")
    with pytest.raises(CompareError, match="no test split found.*--test-data"):
        compare.config_from_dict({"data": str(only / "train.parquet")})


# ----------------------------------------------------------------------------------------------
# Candidates


@pytest.fixture()
def store(tmp_path):
    from autoaug.policies import presets
    from autoaug.policies.store import PolicyStore

    s = PolicyStore(tmp_path / "store")
    s.save(presets.resolve("autoaugment-cifar10").with_name("found"), "found", {"note": "test"})
    return s


def test_resolve_candidates_kinds_and_labels(tmp_path, store):
    from autoaug.policies import presets

    path = tmp_path / "mine.json"
    path.write_text(presets.resolve("autoaugment-svhn").with_name("mine").to_json())
    cands = compare.resolve_candidates(["found@latest", str(path), "preset:trivialaugment"],
                                       ["none", "randaugment:n=2,m=9"], store)
    assert [(c.label, c.kind, c.store_ref) for c in cands] == [
        ("found@1", "policy", "found@1"),
        ("mine.json", "policy", None),
        ("trivialaugment", "policy", None),
        ("none", "baseline", None),
        ("randaugment:n=2,m=9", "baseline", None),
    ]


@pytest.mark.parametrize(
    "policies, baselines, fragment",
    [
        (["nothere@1"], [], "--policy 'nothere@1'.*no policy named 'nothere'"),
        (["missing.json"], [], "policy file 'missing.json' does not exist"),
        ([], ["found@1"], "baseline 'found@1' is not a preset"),
        (["standard"], ["standard"], "given twice"),
        (["found@1"], ["autoaugment-cifar10"], "same policy"),
        ([], [], "nothing to compare"),
    ],
)
def test_resolve_candidates_errors(store, policies, baselines, fragment):
    with pytest.raises(CompareError, match=fragment):
        compare.resolve_candidates(policies, baselines, store)


def test_default_baselines_are_the_three_bases_and_the_published_policies():
    from autoaug.launch import compare_cmd

    assert compare.DEFAULT_BASELINES[:3] == ("none", "crop", "standard")
    cands = compare.resolve_candidates([], compare.DEFAULT_BASELINES)
    assert [c.base for c in cands[:3]] == ["none", "crop", "standard"] and all(c.policy.is_identity for c in cands[:3])
    (option,) = [o for o in compare_cmd.OPTIONS if o.flags == ("--baselines",)]
    assert f"(default: {','.join(compare.DEFAULT_BASELINES)};" in option.argparse["help"]  # --help tells the truth


def test_base_moves_every_candidate_with_sub_policies_and_labels_it(store, tmp_path):
    from autoaug.policies import presets

    signs = presets.resolve("autoaugment-svhn").with_name("signs").with_base("crop")
    path = tmp_path / "signs.json"
    path.write_text(signs.to_json())
    cands = compare.resolve_candidates(["found@latest", str(path)], ["none", "crop", "standard", "autoaugment-imagenet"],
                                       store, base="crop")
    assert [(c.label, c.kind, c.base, c.rebased_from) for c in cands] == [
        ("found@1 [base crop]", "policy", "crop", "standard"),
        ("signs.json", "policy", "crop", None),  # already on crop: not moved, not relabelled
        ("none", "baseline", "none", None),  # the bases alone keep theirs
        ("crop", "baseline", "crop", None),
        ("standard", "baseline", "standard", None),
        ("autoaugment-imagenet [base crop]", "baseline", "crop", "standard"),
    ]
    found = store.load("found@1")
    assert cands[0].policy == found.with_base("crop") and cands[0].store_ref == "found@1"
    assert cands[0].policy_hash != found.content_hash  # so its runs are never taken for the stored policy's
    # without --base (or with the base they already have) nothing moves
    plain = compare.resolve_candidates(["found@latest"], ["autoaugment-imagenet"], store)
    assert plain == compare.resolve_candidates(["found@latest"], ["autoaugment-imagenet"], store, base="standard")
    assert [c.label for c in plain] == ["found@1", "autoaugment-imagenet"]
    with pytest.raises(CompareError, match=r"^base 'flip' is not a base; expected one of none, crop, standard$"):
        compare.resolve_candidates(["found@latest"], [], store, base="flip")


@pytest.mark.parametrize("how", [["--base", "flip"], ["--set", "base=flip"]])
def test_bad_base_is_one_line_exit_2(tmp_path, capsys, how):
    from autoaug.launch.cli import main

    data = _parquet_pair(tmp_path / "d")
    code = main(["compare", "--data", str(data / "train.parquet"), "--baselines", "standard", "--out", str(tmp_path / "o"),
                 *how])
    err = capsys.readouterr().err
    assert code == 2 and err == "autoaug: error: --base 'flip' is not a base; expected one of none, crop, standard\n"
    assert not (tmp_path / "o").exists()


def test_base_from_flag_config_file_and_set(tmp_path):
    from autoaug.launch import cli, compare_cmd

    data = _parquet_pair(tmp_path / "d")
    config = tmp_path / "c.yaml"
    config.write_text(f"data: {data / 'train.parquet'}\nbase: crop\n")
    build = lambda *argv: compare_cmd.build_compare_config(cli.build_parser().parse_args(["compare", *argv]))  # noqa: E731
    assert build("--config", str(config)).base == "crop"
    assert build("--config", str(config), "--set", "base=none").base == "none"
    assert build("--config", str(config), "--base", "standard").base == "standard"
    assert build("--data", str(data / "train.parquet")).base is None


# ----------------------------------------------------------------------------------------------
# Outputs from hand-made runs


def _fake_comparison(tmp_path, store, accuracies, **settings):
    data = _parquet_pair(tmp_path / "d")
    cfg = compare.config_from_dict(
        {"data": str(data / "train.parquet"), "preset": "smoke", "seeds": len(next(iter(accuracies.values()))),
         "policies": ["found@1"], "baselines": "standard", "out": str(tmp_path / "out"), "store": store.uri,
         **settings}
    )
    cands = compare.resolve_candidates(cfg.policies, cfg.baselines, store, cfg.base)
    runs = []
    for c in cands:
        for seed, acc in zip(cfg.seeds, accuracies[c.label]):
            outcome = {
                "test_accuracy": acc, "test_loss": 1.0, "val_accuracy": acc - 0.01, "train_time_s": 10.0 + seed,
                "history": [{"epoch": e, "val_accuracy": acc * e / 2} for e in (1, 2)],
                "dataset_fingerprint": "f" * 64, "split_fingerprint": "s" * 64,
                "node_id": "n" * 56, "hostname": "h", "pid": 1,
            }
            runs.append(runner.run_record(c, seed, cfg.run_config(seed), outcome))
    return compare.Comparison(config=cfg, candidates=cands, runs=runs,
                              summaries=compare.summarize(cands, runs), dataset_fingerprint="f" * 64)


def test_outputs_have_one_row_per_policy_and_run(tmp_path, store):
    comparison = _fake_comparison(tmp_path, store, {"found@1": [0.80, 0.82, 0.84], "standard": [0.70, 0.71, 0.72]})
    files = compare.write_outputs(comparison)
    with open(files["results_csv"], newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["policy"] for r in rows] == ["found@1", "standard"]
    assert float(rows[0]["mean"]) == pytest.approx(0.82)
    assert float(rows[0]["std"]) == pytest.approx(0.02)
    half = 4.302652730 * 0.02 / math.sqrt(3)
    assert float(rows[0]["ci95_low"]) == pytest.approx(0.82 - half)
    assert float(rows[0]["mean_train_time_s"]) == pytest.approx(11.0)
    table = pq.read_table(files["results_parquet"]).to_pylist()
    assert [r["n"] for r in table] == [3, 3]
    assert table[1]["test_accuracies"] == [0.70, 0.71, 0.72]
    with open(files["runs_csv"], newline="") as f:
        runs = list(csv.DictReader(f))
    assert len(runs) == 6 and {r["seed"] for r in runs} == {"0", "1", "2"}
    md = Path(files["results_md"]).read_text()
    assert "| found@1 * | policy | 3 | 82.00 | 2.00 |" in md
    png = Path(files["plot"]).read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    text = comparison.table()
    assert "found@1 *" in text and "[77.03, 86.97]" in text


def test_attach_evaluation_once_per_result(tmp_path, store):
    comparison = _fake_comparison(tmp_path, store, {"found@1": [0.80, 0.82], "standard": [0.70, 0.71]})
    assert compare.attach_evaluations(comparison) == ["found@1"]
    assert compare.attach_evaluations(comparison) == []  # same results: not attached twice
    (evaluation,) = store.get("found@1").evaluations
    results = evaluation.results
    assert results["metric"] == "test_accuracy" and results["n"] == 2
    assert results["test_accuracy"] == [0.80, 0.82]
    assert results["rank"] == 1
    assert results["compared_with"]["standard"]["mean"] == pytest.approx(0.705)


def test_stale_run_records_are_refused(tmp_path, store):
    import dataclasses

    comparison = _fake_comparison(tmp_path, store, {"found@1": [0.8], "standard": [0.7]})
    cand, seed = comparison.candidates[0], 0
    data = json.dumps(comparison.runs[0]).encode()
    cfg = comparison.config.run_config(seed)
    assert runner.load_run(data, "r.json", cand, seed, cfg, "f" * 64)["test_accuracy"] == 0.8
    assert runner.load_run(None, "r.json", cand, seed, cfg, "f" * 64) is None
    with pytest.raises(CompareError, match="r.json holds a run of another comparison.*epochs: 2 vs 5"):
        runner.load_run(data, "r.json", cand, seed, dataclasses.replace(cfg, epochs=5), "f" * 64)
    with pytest.raises(CompareError, match="training data differ"):
        runner.load_run(data, "r.json", cand, seed, cfg, "0" * 64)
    with pytest.raises(CompareError, match="not a readable run record"):
        runner.load_run(b"{trunc", "r.json", cand, seed, cfg, "f" * 64)
    # Where the data live and how many threads ran it do not matter.
    moved = dataclasses.replace(cfg, data="/elsewhere/train.parquet", num_threads=4)
    assert runner.load_run(data, "r.json", cand, seed, moved, "f" * 64) is not None
    # A record written before a TrainConfig setting existed ran with its default: still reused.
    older = dict(comparison.runs[0], train_config={k: v for k, v in cfg.to_dict().items() if k != "eval_from"})
    assert runner.load_run(json.dumps(older).encode(), "r.json", cand, seed, cfg, "f" * 64) is not None
    with pytest.raises(CompareError, match="eval_from: 1 vs 2"):
        runner.load_run(json.dumps(older).encode(), "r.json", cand, seed, dataclasses.replace(cfg, eval_from=2), "f" * 64)


def test_a_rebased_run_is_recorded_and_reported_with_its_base(tmp_path, store):
    comparison = _fake_comparison(tmp_path, store, {"found@1 [base crop]": [0.8, 0.9], "standard": [0.7, 0.75]},
                                  base="crop")
    record = comparison.runs[0]
    assert (record["policy"], record["base"], record["rebased_from"]) == ("found@1 [base crop]", "crop", "standard")
    assert record["policy_json"]["base"] == "crop" and record["run_id"].startswith("found_1_base_crop-")
    assert comparison.runs[-1]["base"] == "standard" and comparison.runs[-1]["rebased_from"] is None
    files = compare.write_outputs(comparison)
    with open(files["results_csv"], newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(r["policy"], r["base"], r["rebased_from"]) for r in rows] == [
        ("found@1 [base crop]", "crop", "standard"), ("standard", "standard", "")]
    with open(files["runs_csv"], newline="") as f:
        assert [r["base"] for r in csv.DictReader(f)] == ["crop", "crop", "standard", "standard"]
    assert pq.read_table(files["results_parquet"]).column("base").to_pylist() == ["crop", "standard"]
    assert "found@1 [base crop] *" in comparison.table()
    assert "`--base crop`: the policies with sub-policies trained on the base `crop`" in comparison.markdown()
    # the stored policy's evaluation says it was trained on another base than the one stored with it
    assert compare.attach_evaluations(comparison) == ["found@1"]
    results = store.get("found@1").evaluations[0].results
    assert (results["base"], results["stored_base"]) == ("crop", "standard")


def test_a_run_on_another_base_is_not_reused(tmp_path, store):
    comparison = _fake_comparison(tmp_path, store, {"found@1": [0.8], "standard": [0.7]})
    stored, seed = comparison.candidates[0], 0
    moved = stored.on_base("crop")
    cfg = comparison.config.run_config(seed)
    assert runner.run_id(moved, seed) != runner.run_id(stored, seed)
    data = json.dumps(comparison.runs[0]).encode()
    with pytest.raises(CompareError, match=r"holds a run of another comparison \(policy hash .*; base standard vs crop\)"):
        runner.load_run(data, "r.json", moved, seed, cfg, "f" * 64)
    # a record written before runs recorded their base: read from the policy it holds
    older = {k: v for k, v in comparison.runs[0].items() if k not in ("base", "rebased_from")}
    assert runner.load_run(json.dumps(older).encode(), "r.json", stored, seed, cfg, "f" * 64) is not None


def test_outputs_to_a_filesystem_uri(tmp_path, store, monkeypatch):
    """--out may be any pyarrow filesystem URI (s3://..., gs://...); here an in-memory one."""
    import pyarrow.fs as pafs

    mock, _ = pafs.FileSystem.from_uri("mock:///")  # one in-memory filesystem for every open
    from autoaug.core import location

    monkeypatch.setattr(location, "filesystem_from_uri", lambda uri: (mock, uri.split("://", 1)[1].lstrip("/")))
    comparison = _fake_comparison(tmp_path, store, {"found@1": [0.8, 0.9], "standard": [0.7, 0.75]})
    comparison.config = dataclasses_replace(comparison.config, out="mock:///bucket/cmp")
    files = compare.write_outputs(comparison)
    assert files["results_csv"] == "mock:///bucket/cmp/results.csv"
    out = location.Location.parse("mock:///bucket/cmp")
    assert not out.local
    assert out.read_text("results.md").startswith("# Policy comparison")
    assert out.read_bytes("comparison.png")[:4] == b"\x89PNG"
    assert out.read_bytes_if_exists("missing.json") is None
    assert compare.attach_evaluations(comparison) == ["found@1"]
    assert json.loads(out.read_bytes("evaluations.json"))
    assert store.get("found@1").evaluations[0].results["out"] == "mock:///bucket/cmp"


def dataclasses_replace(obj, **changes):
    import dataclasses

    return dataclasses.replace(obj, **changes)


# ----------------------------------------------------------------------------------------------
# Real runs


@pytest.fixture(scope="module")
def small_test_split(cifar_test, tmp_path_factory):
    """1,000 real CIFAR-10 test images (every 10th row), to keep the test pass short."""
    table = pq.read_table(cifar_test)
    path = tmp_path_factory.mktemp("cifar-test") / "test.parquet"
    pq.write_table(table.take(list(range(0, table.num_rows, 10))), path)
    return path


@pytest.mark.slow
def test_smoke_compare_trains_resumes_and_attaches(tmp_path, cifar_train, small_test_split, store, capsys):
    from autoaug.launch.cli import main

    out = tmp_path / "cmp"
    argv = [
        "compare", "--policy", "found@1", "--baselines", "standard", "--seeds", "2", "--preset", "smoke",
        "--data", str(cifar_train), "--test-data", str(small_test_split), "--store", store.uri,
        "--out", str(out), "--set", "train.train_size=512", "--set", "train.val_size=256",
    ]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert printed.count("trained ") >= 4 and "[4/4]" in printed
    assert "found@1" in printed and "95% CI" in printed

    run_files = sorted((out / "runs").glob("*.json"))
    assert len(run_files) == 4
    records = [json.loads(p.read_text()) for p in run_files]
    assert {(r["policy"], r["seed"]) for r in records} == {("found@1", 0), ("found@1", 1), ("standard", 0), ("standard", 1)}
    for r in records:
        assert 0.0 < r["test_accuracy"] <= 1.0
        assert [h["epoch"] for h in r["history"]] == [1, 2]
    # Different seeds give different models.
    assert len({r["test_accuracy"] for r in records if r["policy"] == "standard"} |
               {r["history"][0]["train_loss"] for r in records if r["policy"] == "standard"}) > 1

    results = pq.read_table(out / "results.parquet").to_pylist()
    assert [(r["policy"], r["n"]) for r in results] == [("found@1", 2), ("standard", 2)]
    for r in results:
        accs = sorted(x["test_accuracy"] for x in records if x["policy"] == r["policy"])
        assert sorted(r["test_accuracies"]) == accs
        assert r["mean"] == pytest.approx(sum(accs) / 2)
    with open(out / "results.csv", newline="") as f:
        assert len(list(csv.DictReader(f))) == 2
    with open(out / "runs.csv", newline="") as f:
        assert len(list(csv.DictReader(f))) == 4
    assert (out / "comparison.png").read_bytes()[:4] == b"\x89PNG"
    assert "| found@1" in (out / "results.md").read_text()

    # The stored policy carries the evaluation, and `autoaug policies show` displays it.
    (evaluation,) = store.get("found@1").evaluations
    assert sorted(evaluation.results["test_accuracy"]) == sorted(
        x["test_accuracy"] for x in records if x["policy"] == "found@1")
    assert main(["policies", "show", "found@1", "--store", store.uri]) == 0
    shown = capsys.readouterr().out
    assert "evaluations (1)" in shown and "autoaug compare" in shown

    # Re-running reuses every finished run: nothing is trained, nothing rewritten, not attached twice.
    stamps = {p.name: p.stat().st_mtime_ns for p in run_files}
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "trained 0 run(s), reused 4" in printed and printed.count("reused  ") == 4
    assert {p.name: p.stat().st_mtime_ns for p in sorted((out / "runs").glob("*.json"))} == stamps
    assert len(store.get("found@1").evaluations) == 1

    # An interrupted comparison (one run missing) trains only that run.
    missing = run_files[0]
    missing.unlink()
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "trained 1 run(s), reused 3" in printed
    assert missing.exists()
    again = json.loads(missing.read_text())
    before = next(r for r in records if r["run_id"] == again["run_id"])
    assert again["test_accuracy"] == before["test_accuracy"]  # deterministic on the CPU


@pytest.mark.slow
def test_compare_with_base_trains_the_rebased_policy(tmp_path, cifar_train, small_test_split, capsys):
    """--base crop: AutoAugment's CIFAR-10 policy is trained on crop (the run is exactly a training of
    that policy on crop, not of the stored one) and the crop baseline stays the crop alone."""
    import dataclasses

    from autoaug.launch.cli import main
    from autoaug.policies import presets
    from autoaug.proxy_models.train import train

    out = tmp_path / "cmp"
    argv = ["compare", "--policy", "autoaugment-cifar10", "--baselines", "crop", "--base", "crop", "--seeds", "1",
            "--preset", "smoke", "--epochs", "1", "--data", str(cifar_train), "--test-data", str(small_test_split),
            "--out", str(out), "--set", "train.train_size=256", "--set", "train.val_size=64", "--no-attach"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "autoaugment-cifar10 [base crop]" in printed
    records = {r["policy"]: r for r in (json.loads(p.read_text()) for p in (out / "runs").glob("*.json"))}
    assert set(records) == {"autoaugment-cifar10 [base crop]", "crop"}
    moved = records["autoaugment-cifar10 [base crop]"]
    assert (moved["base"], moved["rebased_from"], moved["policy_json"]["base"]) == ("crop", "standard", "crop")
    assert records["crop"]["base"] == "crop" and records["crop"]["rebased_from"] is None
    config = json.loads((out / "compare.json").read_text())
    assert config["base"] == "crop" and [c["base"] for c in config["candidates"]] == ["crop", "crop"]

    cfg = compare.config_from_dict({"data": str(cifar_train), "test_data": str(small_test_split), "preset": "smoke",
                                    "train": {"epochs": 1, "train_size": 256, "val_size": 64}}).run_config(0)
    cfg = dataclasses.replace(cfg, test_data=None)
    aa = presets.resolve("autoaugment-cifar10")
    losses = {base: train(cfg, aa.with_base(base)).history[0]["train_loss"] for base in ("crop", "standard")}
    assert moved["history"][0]["train_loss"] == losses["crop"] != losses["standard"]


def test_config_names_missing_training_data(tmp_path):
    with pytest.raises(CompareError, match="training data '.*nothere' does not exist"):
        compare.config_from_dict({"data": str(tmp_path / "nothere")})


@pytest.mark.slow
def test_compare_live_display_shows_epochs_of_running_runs(tmp_path, cifar_train, small_test_split):
    """On a terminal the runs put (run, epoch, val) on a Ray queue and the display shows them."""
    import io

    from rich.console import Console

    from autoaug.core.progress import Progress
    from autoaug.launch.compare import config_from_dict, run_compare

    config = config_from_dict({
        "baselines": "none,standard", "seeds": 1, "preset": "smoke", "data": str(cifar_train),
        "test_data": str(small_test_split), "out": str(tmp_path / "cmp"), "attach": False,
        "train": {"train_size": 256, "val_size": 128, "epochs": 2},
    })
    seen: list[tuple[str, float]] = []

    class Recording(Progress):
        def update(self, key, **kw):
            if key.startswith("run:") and kw.get("completed") is not None:
                seen.append((key, kw["completed"]))
            super().update(key, **kw)

    console = Console(file=io.StringIO(), record=True, width=160, force_terminal=True)
    with Recording(console=console) as display:
        comparison = run_compare(config, display=display)
    assert len(comparison.runs) == 2
    assert {k for k, _ in seen} == {f"run:{r['run_id']}" for r in comparison.runs}
    assert {e for _, e in seen} <= {1, 2} and seen  # per-epoch updates from inside the Ray tasks
    assert "[2/2] trained" in console.export_text()
