"""Tests of launch.compare: statistics, configuration, outputs, resume and store evaluations.

The unit tests build run records by hand; the ``slow`` test trains real runs on CIFAR-10.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from autoaug.launch import compare
from autoaug.launch.compare import CompareError, parse_baselines, runner

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


def test_paired_difference_is_the_paired_t_test_over_shared_seeds():
    from scipy import stats

    from autoaug.launch.compare.stats import paired_difference

    a, b = {0: 0.50, 1: 0.60, 2: 0.70, 7: 0.9}, {0: 0.40, 1: 0.45, 2: 0.70, 3: 0.1}
    d = paired_difference(a, b)
    assert d.seeds == (0, 1, 2) and d.diffs == pytest.approx((0.10, 0.15, 0.0))
    assert d.mean == pytest.approx(0.25 / 3)
    assert (d.mean, d.std, d.ci95_low, d.ci95_high) == pytest.approx(compare.mean_ci([0.10, 0.15, 0.0]))
    assert d.p_value == pytest.approx(stats.ttest_rel([0.5, 0.6, 0.7], [0.4, 0.45, 0.7]).pvalue)
    assert math.isnan(paired_difference({0: 0.5}, {0: 0.4}).p_value)  # one pair: no test
    assert paired_difference({0: 0.5, 1: 0.5}, {0: 0.2, 1: 0.2}).p_value == 0.0  # same difference every seed
    assert paired_difference({0: 0.5, 1: 0.6}, {0: 0.5, 1: 0.6}).p_value == 1.0


def test_benjamini_hochberg_adjustment_skips_tests_not_made():
    from autoaug.launch.compare.stats import adjust_p_values

    # Sorted p: 0.01, 0.02, 0.5 over m=3 tests: 0.01*3/1=0.03, 0.02*3/2=0.03, 0.5*3/3=0.5.
    adjusted = adjust_p_values([math.nan, 0.02, 0.01, 0.5])
    assert math.isnan(adjusted[0]) and adjusted[1:] == pytest.approx([0.03, 0.03, 0.5])
    assert adjust_p_values([]) == [] and all(math.isnan(q) for q in adjust_p_values([math.nan]))


# ----------------------------------------------------------------------------------------------
# Configuration


def test_parse_baselines_keeps_preset_parameters_together():
    assert (
        parse_baselines("none,crop,standard,randaugment:n=2,m=9,trivialaugment,autoaugment-cifar10")
        == compare.DEFAULT_BASELINES
    )
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
        {
            "data": str(data / "train.parquet"),
            "preset": "smoke",
            "seeds": 2,
            "first_seed": 5,
            "policies": "mine@1",
            "baselines": "standard",
            "train": {"epochs": 1},
            "out": str(tmp_path / "o"),
        }
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
        ({"train": {"epochs": 0}}, "epochs must be an integer from 1 to 10,000"),
        ({"seeds": 0}, "--seeds must be >= 1"),
        (
            {"seeds": 100_000_000, "policies": ["found.json"]},
            r"--seeds 100000000 is more than a comparison trains \(100,000,000 seeds x 7 policies = "
            r"700,000,000 training runs\); expected at most 1,000 seeds per policy",
        ),
        (
            {"seeds": list(range(1001)), "baselines": "standard"},
            r"--seeds 1001 is .*\(1,001 seeds x 1 policy = 1,001 training runs\)",
        ),
        ({"seeds": [1, 1]}, "distinct"),
        ({"preset": "huge"}, "unknown training preset 'huge'"),
        ({"cpus_per_run": 0}, "cpus_per_run must be a positive integer"),
        ({"pack": 0}, r"pack must be an integer from 1 \(one run per process\) to 256, got 0"),
        ({"pack": "4"}, "pack must be an integer from 1"),
        (
            {"pack": 2, "preset": "paper"},  # float16 on the GPU, the preset's
            r"pack 2: a pack trains in float32 or bfloat16, .*--set train.amp_dtype=bfloat16, or --pack 1",
        ),
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
    cands = compare.resolve_candidates(
        ["found@latest", str(path), "preset:trivialaugment"], ["none", "randaugment:n=2,m=9"], store
    )
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
    cands = compare.resolve_candidates(
        ["found@latest", str(path)], ["none", "crop", "standard", "autoaugment-imagenet"], store, base="crop"
    )
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
    code = main(
        [
            "compare",
            "--data",
            str(data / "train.parquet"),
            "--baselines",
            "standard",
            "--out",
            str(tmp_path / "o"),
            *how,
        ]
    )
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


def _fake_comparison(
    tmp_path,
    store,
    accuracies=None,
    *,
    correct=None,
    total=None,
    classes=(),
    policies=("found@1",),
    baselines="standard",
    precision=None,
    **settings,
):
    """A comparison of hand-made run records. ``accuracies``: ``{label: [test accuracy per seed]}``
    (records without per-class counts, as written before they existed); or ``correct``:
    ``{label: [[right predictions per class] per seed]}`` with ``total`` (test images per class).
    ``precision``: ``{label: precision of its runs}`` (absent: not recorded, as before runs kept it).
    ``settings``: more of the comparison's configuration (e.g. ``base``)."""
    per_seed = accuracies if accuracies is not None else correct
    data = _parquet_pair(tmp_path / "d")
    cfg = compare.config_from_dict(
        {
            "data": str(data / "train.parquet"),
            "preset": "smoke",
            "seeds": len(next(iter(per_seed.values()))),
            "policies": list(policies),
            "baselines": baselines,
            "out": str(tmp_path / "out"),
            "store": store.uri,
            **settings,
        }
    )
    cands = compare.resolve_candidates(cfg.policies, cfg.baselines, store, cfg.base)
    runs = []
    for c in cands:
        for seed, value in zip(cfg.seeds, per_seed[c.label]):
            acc = value if accuracies is not None else sum(value) / sum(total)
            outcome = {
                "test_accuracy": acc,
                "test_loss": 1.0,
                "val_accuracy": acc - 0.01,
                "train_time_s": 10.0 + seed,
                "history": [{"epoch": e, "val_accuracy": acc * e / 2} for e in (1, 2)],
                "dataset_fingerprint": "f" * 64,
                "split_fingerprint": "s" * 64,
                "node_id": "n" * 56,
                "hostname": "h",
                "pid": 1,
            }
            if accuracies is None:
                outcome |= {"test_class_correct": list(value), "test_class_total": list(total)}
            if (precision or {}).get(c.label):
                outcome["precision"] = precision[c.label]
            runs.append(runner.run_record(c, seed, cfg.run_config(seed), outcome))
    return compare.Comparison(
        config=cfg,
        candidates=cands,
        runs=runs,
        classes=tuple(classes),
        summaries=compare.summarize(cands, runs),
        dataset_fingerprint="f" * 64,
    )


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


def test_runs_trained_in_two_precisions_are_said_and_each_runs_precision_is_in_runs_csv(tmp_path, store):
    """``amp: native`` trains in bfloat16 on CPUs with native instructions and in float32 elsewhere:
    a comparison whose runs came from both kinds of machine (a cluster, or runs resumed on another
    machine) mixes the precision's effect into the policies' differences, and says so."""
    accuracies = {"found@1": [0.80, 0.82, 0.84], "standard": [0.70, 0.71, 0.72]}
    same = _fake_comparison(
        tmp_path / "a", store, accuracies, precision={"found@1": "bfloat16", "standard": "bfloat16"}
    )
    assert "precision" not in same.table() and "precision:" not in same.markdown()
    mixed = _fake_comparison(
        tmp_path / "b", store, accuracies, precision={"found@1": "bfloat16", "standard": "float32"}
    )
    line = "precision: the runs trained in more than one (bfloat16 3, float32 3 runs;"
    assert line in mixed.table() and line in mixed.markdown()
    files = compare.write_outputs(mixed)
    with open(files["runs_csv"], newline="") as f:
        assert {(r["policy"], r["precision"]) for r in csv.DictReader(f)} == {
            ("found@1", "bfloat16"),
            ("standard", "float32"),
        }


ZEN = "cpu AMD EPYC 7B13 64-Core Processor (avx2 fma)"
XEON = "cpu Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz (avx2 fma avx512f avx512_bf16 amx_bf16)"


def test_a_run_of_another_kind_of_machine_is_not_paired_and_the_comparison_says_so(
    tmp_path, store, capsys, write_images
):
    """The same seed trains another model on another kind of machine (96.03% on an AMD Zen 3 against
    97.32% on an Intel Xeon, one GTSRB run): compare, resuming from run records of which one was
    trained on a Xeon (a doctored record), pairs only the runs of one kind, says in one line what it
    left out, and its table and runs.csv say which kind produced them."""
    from PIL import Image

    data = tmp_path / "d"
    data.mkdir()
    for name, n in (("train.parquet", 40), ("test.parquet", 10)):
        images = [Image.new("RGB", (8, 8), (40 * (i % 2), 0, 0)) for i in range(n)]
        write_images(data / name, images, [i % 2 for i in range(n)], ["a", "b"])
    asked = compare.config_from_dict(
        {
            "data": str(data / "train.parquet"),
            "preset": "smoke",
            "seeds": 3,
            "policies": ["found@1"],
            "baselines": "standard",
            "out": str(tmp_path / "out"),
            "store": store.uri,
            "train": {"train_size": 20, "val_size": 10},
        }
    )
    config, fingerprint, _, _ = runner.sized_to_data(asked)
    (tmp_path / "out" / "runs").mkdir(parents=True)
    accuracies = {"found@1": [0.80, 0.82, 0.84], "standard": [0.70, 0.71, 0.72]}
    for c in compare.resolve_candidates(config.policies, config.baselines, store, None):
        for seed, acc in zip(config.seeds, accuracies[c.label]):  # the records compare wrote, on a Zen 3 but one
            machine = XEON if (c.label, seed) == ("standard", 1) else ZEN
            outcome = {"test_accuracy": acc, "test_loss": 1.0, "val_accuracy": acc, "train_time_s": 10.0}
            outcome |= {"precision": "float32", "machine": machine, "dataset_fingerprint": fingerprint, "history": []}
            record = runner.run_record(c, seed, config.run_config(seed), outcome)
            (tmp_path / "out" / "runs" / f"{record['run_id']}.json").write_text(json.dumps(record))

    comparison = runner.run_compare(asked, progress=print)  # every run finished: nothing trains
    assert comparison.trained == 0 and len(comparison.runs) == 5
    assert [(r["policy"], r["seed"]) for r in comparison.left_out] == [("standard", 1)]
    standard = next(s for s in comparison.summaries if s.policy == "standard")
    assert standard.seeds == (0, 2) and standard.test_accuracies == (0.70, 0.72)  # seed 1 paired with nothing
    said = [line for line in capsys.readouterr().out.splitlines() if "left out" in line]
    assert said == [
        f"compare: left out 1 run of another kind of machine than the 5 compared ({ZEN}, float32): 1 on {XEON}, "
        "float32 (standard seed 1); one seed trains another model on another kind, so runs pair only within one; "
        f"train them on one kind: delete their records in {tmp_path / 'out' / 'runs'} to train them here, or compare "
        "in another --out"
    ]
    for text in (comparison.table(), comparison.markdown()):
        assert f"machine: {ZEN}, float32 (every run compared" in text and said[0].removeprefix("compare: ") in text
    with open(tmp_path / "out" / "runs.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 5 and {r["machine"] for r in rows} == {ZEN}


# ----------------------------------------------------------------------------------------------
# Per class: an imbalanced test set where one policy destroys the rare class

CLASSES = ("car", "truck", "stop", "keep_left")
TOTAL = [500, 300, 150, 20]  # test images per class: keep_left is rare
SEEDS5 = 5
# Right predictions per class, one row per seed (seeds 0-4).
IMBALANCED = {
    # Best overall on the frequent classes, but keep_left is destroyed in every seed.
    "found@1": [[480, 280, 135, 3], [478, 282, 136, 2], [481, 279, 134, 4], [479, 281, 137, 3], [482, 280, 135, 2]],
    # One bad seed on keep_left: a big mean difference that is not consistent, so not beyond the noise.
    "trivialaugment": [
        [460, 270, 135, 18],
        [462, 268, 134, 3],
        [459, 271, 136, 17],
        [461, 270, 135, 18],
        [460, 269, 136, 19],
    ],
    "standard": [
        [455, 265, 133, 18],
        [457, 266, 134, 17],
        [454, 264, 135, 18],
        [456, 265, 133, 19],
        [455, 267, 134, 18],
    ],
    "none": [[400, 230, 110, 12], [402, 228, 112, 13], [401, 231, 111, 11], [399, 229, 110, 12], [400, 230, 111, 12]],
}


@pytest.fixture()
def imbalanced(tmp_path, store):
    return _fake_comparison(
        tmp_path,
        store,
        correct=IMBALANCED,
        total=TOTAL,
        classes=CLASSES,
        policies=("found@1", "trivialaugment"),
        baselines="none,standard",
    )


def test_balanced_accuracy_is_the_mean_per_class_accuracy(imbalanced):
    by = {s.policy: s for s in imbalanced.summaries}
    for label, rows in IMBALANCED.items():
        expected = [sum(c / t for c, t in zip(row, TOTAL)) / len(TOTAL) for row in rows]
        assert by[label].balanced_accuracies == pytest.approx(expected)
        assert by[label].balanced_n == SEEDS5 and by[label].balanced_seeds == (0, 1, 2, 3, 4)
        assert (
            by[label].balanced_mean,
            by[label].balanced_std,
            by[label].balanced_ci95_low,
            by[label].balanced_ci95_high,
        ) == pytest.approx(compare.mean_ci(expected))
    # Overall accuracy hides the rare class; balanced accuracy does not.
    assert by["found@1"].mean > by["standard"].mean
    assert by["found@1"].balanced_mean < by["standard"].balanced_mean


def test_balanced_accuracy_in_every_output(imbalanced, capsys):
    from autoaug.launch.compare_run import comparison_json

    files = compare.write_outputs(imbalanced)
    with open(files["results_csv"], newline="") as f:
        rows = {r["policy"]: r for r in csv.DictReader(f)}
    summary = {s.policy: s for s in imbalanced.summaries}
    assert float(rows["found@1"]["balanced_mean"]) == pytest.approx(summary["found@1"].balanced_mean)
    assert float(rows["found@1"]["balanced_ci95_low"]) == pytest.approx(summary["found@1"].balanced_ci95_low)
    table = {r["policy"]: r for r in pq.read_table(files["results_parquet"]).to_pylist()}
    assert table["standard"]["balanced_accuracies"] == pytest.approx(list(summary["standard"].balanced_accuracies))
    with open(files["runs_csv"], newline="") as f:
        run = next(r for r in csv.DictReader(f) if r["policy"] == "none" and r["seed"] == "0")
    assert float(run["balanced_accuracy"]) == pytest.approx((400 / 500 + 230 / 300 + 110 / 150 + 12 / 20) / 4)
    md = Path(files["results_md"]).read_text()
    assert "balanced acc % (mean)" in md
    s = summary["found@1"]
    assert f"| {100 * s.balanced_mean:.2f} | {100 * s.balanced_std:.2f} | [{100 * s.balanced_ci95_low:.2f}, " in md
    assert "balanced acc % (mean)" in imbalanced.table()
    doc = comparison_json(imbalanced)
    assert doc["summaries"][0]["balanced_mean"] == pytest.approx(s.balanced_mean)
    assert doc["runs"][0]["balanced_accuracy"] == pytest.approx(s.balanced_accuracies[0])
    assert [r["class"] for r in doc["per_class"]["worse"]["found@1"]] == ["keep_left"]


def test_per_class_table_has_every_class_of_every_policy_by_name(imbalanced):
    files = compare.write_outputs(imbalanced)
    with open(files["per_class_csv"], newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(CLASSES) * len(IMBALANCED)
    assert {(r["class"], r["policy"]) for r in rows} == {(c, p) for c in CLASSES for p in IMBALANCED}
    keep_left = {r["policy"]: r for r in rows if r["class"] == "keep_left"}
    assert int(keep_left["none"]["test_images"]) == 20 and keep_left["none"]["class_index"] == "3"
    assert float(keep_left["found@1"]["mean"]) == pytest.approx((3 + 2 + 4 + 3 + 2) / 5 / 20)
    # The best baseline by mean test accuracy is the reference; the baselines are not tested.
    assert keep_left["found@1"]["baseline"] == "standard" and keep_left["none"]["baseline"] == ""
    md = Path(files["results_md"]).read_text()
    section = md[md.index("### Per-class accuracy") :]
    for label, name in enumerate(CLASSES):
        assert f"| {label} | {name} | {TOTAL[label]} |" in section
    assert "| 3 | keep_left | 20 | 14.00 ▼ |" in section  # found@1's column first


def test_a_class_worse_beyond_the_noise_is_named_and_a_noisy_one_is_not(imbalanced):
    per_class = imbalanced.per_class
    assert per_class.baseline == "standard" and per_class.compared == ("found@1", "trivialaugment")
    (worse,) = per_class.worse("found@1")
    assert worse.class_name == "keep_left" and worse.verdict == "worse"
    diffs = [(f[3] - s[3]) / 20 for f, s in zip(IMBALANCED["found@1"], IMBALANCED["standard"])]
    assert worse.diff.diffs == pytest.approx(diffs)
    assert worse.diff.mean == pytest.approx(sum(diffs) / 5) and worse.p_adjusted <= 0.05
    # trivialaugment loses 2.7 points on keep_left on average (one seed at 3/20), but not consistently.
    noisy = next(r for r in per_class.of("trivialaugment") if r.class_name == "keep_left")
    assert noisy.diff.mean < -0.02 and noisy.p_adjusted > 0.05 and noisy.verdict == ""
    assert per_class.worse("trivialaugment") == []
    # found@1 is better on car beyond the noise (consistently +24 images of 500).
    assert "car" in [r.class_name for r in per_class.better("found@1")]
    text = imbalanced.table()
    assert "found@1 is worse than standard on 1 class(es): keep_left -76.00 points [" in text
    assert "trivialaugment: no class worse than standard beyond the noise" in text
    md = imbalanced.markdown()
    assert "best baseline is `standard`" in md and "Benjamini-Hochberg" in md
    assert "| `found@1` |" in md and "**keep_left** -76.00 points" in md
    assert "| `trivialaugment` |" in md and "none beyond the noise" in md


def test_a_drop_below_zero_for_one_class_but_not_after_correction_is_listed_apart(tmp_path, store):
    """keep_left drops by 5-8 images of 20 in each of 3 seeds: its own 95% CI is below 0 (p = 0.019),
    but after Benjamini-Hochberg over the 4 classes (q = 0.076) it is not beyond the noise."""
    counts = {
        "standard": [[455, 265, 133, 18], [457, 266, 134, 17], [454, 264, 135, 18]],
        "trivialaugment": [[458, 262, 135, 12], [452, 268, 131, 9], [457, 263, 136, 13]],
    }
    comparison = _fake_comparison(
        tmp_path,
        store,
        correct=counts,
        total=TOTAL,
        classes=CLASSES,
        policies=("trivialaugment",),
        baselines="standard",
    )
    per_class = comparison.per_class
    (suspect,) = per_class.suspects("trivialaugment")
    assert suspect.class_name == "keep_left" and suspect.diff.ci95_high < 0
    assert suspect.diff.p_value == pytest.approx(0.0189, abs=1e-3) and suspect.p_adjusted == pytest.approx(
        4 * suspect.diff.p_value
    )
    assert per_class.worse("trivialaugment") == [] and suspect.verdict == ""
    line = next(v for v in per_class.verdict_lines() if v.startswith("trivialaugment"))
    assert "no class worse than standard beyond the noise" in line
    assert "1 class(es) with their own 95% CI below 0, not beyond the noise over 4 classes" in line
    assert "keep_left -31.67" in line
    assert "| 3 | keep_left | 20 | 56.67 ▽ |" in comparison.markdown()
    files = compare.write_outputs(comparison)
    with open(files["per_class_csv"], newline="") as f:
        verdicts = {(r["policy"], r["class"]): r["verdict"] for r in csv.DictReader(f)}
    assert verdicts[("trivialaugment", "keep_left")] == "suspect" and verdicts[("trivialaugment", "car")] == ""


def test_a_class_without_test_images_has_no_accuracy_and_malformed_counts_count_as_missing(tmp_path, store):
    from autoaug.launch.compare.per_class import class_counts

    total = [500, 300, 150, 0]  # no keep_left image in the test set
    counts = {
        label: [row[:3] + [0] for row in rows[:3]]
        for label, rows in IMBALANCED.items()
        if label in ("found@1", "standard")
    }
    comparison = _fake_comparison(tmp_path, store, correct=counts, total=total, classes=CLASSES)
    found = comparison.summaries[0]
    assert found.balanced_accuracies[0] == pytest.approx((480 / 500 + 280 / 300 + 135 / 150) / 3)
    keep_left = next(r for r in comparison.per_class.of("found@1") if r.class_name == "keep_left")
    assert keep_left.test_images == 0 and math.isnan(keep_left.mean) and keep_left.diff is None
    assert "| 3 | keep_left | 0 | - | - |" in comparison.markdown()
    assert class_counts({"test_class_correct": ["x"], "test_class_total": [3]}) is None
    assert class_counts({"test_class_correct": [4], "test_class_total": [3]}) is None
    assert class_counts({"test_class_correct": [1, 2], "test_class_total": [3]}) is None


def test_per_class_plot_is_written_for_the_compared_policies(imbalanced):
    files = compare.write_outputs(imbalanced)
    png = Path(files["per_class_plot"]).read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000


def test_evaluation_of_a_stored_policy_holds_balanced_accuracy_and_worse_classes(imbalanced, store):
    assert compare.attach_evaluations(imbalanced) == ["found@1"]
    results = store.get("found@1").evaluations[0].results
    assert results["balanced_accuracy"]["n"] == 5
    assert results["worse_classes"]["baseline"] == "standard"
    assert [c["class"] for c in results["worse_classes"]["classes"]] == ["keep_left"]


def test_without_baseline_or_with_one_seed_nothing_is_tested(tmp_path, store):
    one_seed = {label: rows[:1] for label, rows in IMBALANCED.items()}
    comparison = _fake_comparison(
        tmp_path / "a",
        store,
        correct=one_seed,
        total=TOTAL,
        classes=CLASSES,
        policies=("found@1", "trivialaugment"),
        baselines="none,standard",
    )
    assert comparison.per_class.worse("found@1") == [] and comparison.per_class.available
    assert "found@1: not tested (needs 2 seeds" in comparison.table()
    files = compare.write_outputs(comparison)
    assert "per_class_csv" in files  # differences without intervals are still drawn
    no_baseline = _fake_comparison(
        tmp_path / "b", store, correct={"found@1": IMBALANCED["found@1"]}, total=TOTAL, classes=CLASSES, baselines=""
    )
    assert no_baseline.per_class.compared == () and "No baseline to compare with" in no_baseline.markdown()
    files = compare.write_outputs(no_baseline)
    assert "per_class_csv" in files and "per_class_plot" not in files


def test_runs_recorded_without_per_class_counts_still_load_and_are_reported_unavailable(tmp_path, store):
    """Run records written before per-class counts existed are reused; their balanced accuracy is
    unavailable, and the report says how to get it."""
    old = _fake_comparison(tmp_path / "old", store, {"found@1": [0.80, 0.82, 0.84], "standard": [0.70, 0.71, 0.72]})
    cand, cfg = old.candidates[0], old.config.run_config(0)
    record = runner.load_run(json.dumps(old.runs[0]).encode(), "r.json", cand, 0, cfg, "f" * 64)
    assert record["test_accuracy"] == 0.80 and "test_class_total" not in record
    assert all(s.balanced_n == 0 and math.isnan(s.balanced_mean) for s in old.summaries)
    files = compare.write_outputs(old)
    assert "per_class_csv" not in files and "per_class_plot" not in files
    md = Path(files["results_md"]).read_text()
    assert "6 run(s) were recorded before compare kept per-class counts" in md
    assert "delete those run files and run the same command again" in md
    assert "| found@1 * | policy | 3 | 82.00 | 2.00 | [77.03, 86.97] | - | - | - |" in md
    with open(files["runs_csv"], newline="") as f:
        assert {r["balanced_accuracy"] for r in csv.DictReader(f)} == {""}
    compare.attach_evaluations(old)
    assert "balanced_accuracy" not in store.get("found@1").evaluations[0].results

    # Some runs old, some new: balanced accuracy over the new ones (marked), the old ones listed.
    mixed = _fake_comparison(
        tmp_path / "mixed",
        store,
        correct=IMBALANCED,
        total=TOTAL,
        classes=CLASSES,
        policies=("found@1",),
        baselines="standard",
    )
    for key in ("test_class_correct", "test_class_total"):
        del mixed.runs[0][key]
    mixed.summaries = compare.summarize(mixed.candidates, mixed.runs)
    found = mixed.summaries[0]
    assert (found.n, found.balanced_n, found.balanced_seeds) == (5, 4, (1, 2, 3, 4))
    text = mixed.table()
    assert " †" in text and f"runs/{mixed.runs[0]['run_id']}.json" in text
    assert [r.class_name for r in mixed.per_class.worse("found@1")] == ["keep_left"]  # 4 paired seeds left
    assert mixed.per_class.worse("found@1")[0].diff.n == 4


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
        runner.load_run(
            json.dumps(older).encode(), "r.json", cand, seed, dataclasses.replace(cfg, eval_from=2), "f" * 64
        )


def _images_pair(folder: Path, counts, shape=(48, 40, 3)) -> Path:
    """train.parquet and test.parquet of random PNGs of ``shape`` (HWC), ``counts`` images per class."""
    import io

    import numpy as np
    import pyarrow as pa
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(len(counts)), counts)
    for name in ("train.parquet", "test.parquet"):
        images = []
        for i in range(len(labels)):
            buf = io.BytesIO()
            Image.fromarray(rng.integers(0, 256, shape(i) if callable(shape) else shape, dtype=np.uint8)).save(
                buf, "PNG"
            )
            images.append(buf.getvalue())
        table = pa.table({"image": pa.array(images, pa.binary()), "label": pa.array(labels, pa.int16())})
        pq.write_table(
            table.replace_schema_metadata({"classes": ",".join(f"c{c}" for c in range(len(counts)))}), folder / name
        )
    return folder


def test_a_comparison_is_sized_to_its_data_once_and_records_both(tmp_path):
    """The per-class split and the automatic image size become numbers before any run: every run
    trains (and its record keeps) the resolved config; compare.json keeps what was asked too."""
    data = _images_pair(tmp_path / "d", [12, 30, 6])
    cfg = compare.config_from_dict(
        {
            "data": str(data),
            "preset": "eval-cpu",
            "baselines": "standard",
            "train": {"train_per_class": 8, "min_train_size": 10, "max_train_size": 20},
        }
    )
    assert (cfg.train.train_size, cfg.train.train_per_class, cfg.train.image_size) == (None, 8, None)  # as asked
    sized, fingerprint, sizing, _ = runner.sized_to_data(cfg)
    assert (sized.train.train_size, sized.train.val_size, sized.train.image_size) == (20, 0, 40)  # 8+8+6 = 22, capped
    assert sized.train.is_resolved and sized.run_config(1).train_size == 20
    assert sizing["requested"]["train_per_class"] == 8 and sizing["resolved"] == {
        "train_size": 20,
        "val_size": 0,
        "image_size": 40,
    }
    assert sizing["num_classes"] == 3 and len(fingerprint) == 64
    flags = compare_cmd_config(
        ["--data", str(data), "--preset", "smoke", "--train-per-class", "8", "--image-size", "auto"]
    )
    assert (flags.train.train_per_class, flags.train.train_size, flags.train.image_size) == (8, None, None)


def compare_cmd_config(argv):
    from autoaug.launch import compare_cmd
    from autoaug.launch.cli import build_parser

    return compare_cmd.build_compare_config(build_parser().parse_args(["compare", *argv]))


def test_a_comparison_on_images_of_several_sizes_asks_for_one(tmp_path):
    data = _images_pair(tmp_path / "d", [4, 4], shape=lambda i: (32, 32, 3) if i % 3 else (40, 40, 3))
    cfg = compare.config_from_dict({"data": str(data), "preset": "eval-cpu"})
    with pytest.raises(CompareError, match=r"the images come in 2 sizes .*give one: --image-size N") as info:
        runner.sized_to_data(cfg)
    assert "\n" not in str(info.value)
    assert runner.sized_to_data(dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, image_size=32)))[0]


def test_run_reuse_tells_regimes_apart_by_what_they_resolve_to(tmp_path, store, gtsrb_counts):
    """A finished run is reused exactly when it computed what this comparison would: regimes that
    resolve to other sizes are refused, one asked for another way but resolving alike is reused,
    and the records of CIFAR-10 runs from before the presets were sized per class are reused."""
    from autoaug.proxy_models.train import TrainConfig

    comparison = _fake_comparison(tmp_path, store, {"found@1": [0.8], "standard": [0.7]})
    cand, seed = comparison.candidates[0], 0
    gtsrb = gtsrb_counts

    def run_config(**overrides):
        cfg = TrainConfig.from_preset("eval-cpu", data="/d/train.parquet", test_data="/d/test.parquet", **overrides)
        return dataclasses.replace(cfg.resolved(gtsrb, data_image_size=32), seed=seed, num_threads=1)

    outcome = {"test_accuracy": 0.8, "train_time_s": 1.0, "dataset_fingerprint": "f" * 64}
    record = json.dumps(runner.run_record(cand, seed, run_config(), outcome)).encode()
    assert runner.load_run(record, "r.json", cand, seed, run_config(), "f" * 64)["train_config"]["train_size"] == 2000
    with pytest.raises(CompareError, match=r"r.json holds a run of another comparison \(train_size: 2000 vs 3000\)"):
        runner.load_run(record, "r.json", cand, seed, run_config(max_train_size=3000), "f" * 64)
    with pytest.raises(CompareError, match=r"train_size: 2000 vs 1075"):  # 25 per class
        runner.load_run(record, "r.json", cand, seed, run_config(train_per_class=25), "f" * 64)
    assert runner.load_run(record, "r.json", cand, seed, run_config(train_size=2000), "f" * 64) is not None
    # A CIFAR-10 eval-cpu run recorded before the per-class presets (train_size 1000, 32x32, no new keys).
    quality = json.loads(
        (
            Path(__file__).resolve().parents[2]
            / "benchmarks"
            / "results"
            / "search-quality-cpu-eval-cpu"
            / "quality.json"
        ).read_text()
    )
    old = json.dumps(runner.run_record(cand, seed, TrainConfig.from_dict(quality["eval_train_config"]), outcome))
    now = dataclasses.replace(
        TrainConfig.from_preset("eval-cpu", data="/elsewhere").resolved([5000] * 10, data_image_size=32),
        seed=seed,
        num_threads=1,
    )
    assert runner.load_run(old.encode(), "r.json", cand, seed, now, "f" * 64) is not None


def test_a_rebased_run_is_recorded_and_reported_with_its_base(tmp_path, store):
    comparison = _fake_comparison(
        tmp_path, store, {"found@1 [base crop]": [0.8, 0.9], "standard": [0.7, 0.75]}, base="crop"
    )
    record = comparison.runs[0]
    assert (record["policy"], record["base"], record["rebased_from"]) == ("found@1 [base crop]", "crop", "standard")
    assert record["policy_json"]["base"] == "crop" and record["run_id"].startswith("found_1_base_crop-")
    assert comparison.runs[-1]["base"] == "standard" and comparison.runs[-1]["rebased_from"] is None
    files = compare.write_outputs(comparison)
    with open(files["results_csv"], newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(r["policy"], r["base"], r["rebased_from"]) for r in rows] == [
        ("found@1 [base crop]", "crop", "standard"),
        ("standard", "standard", ""),
    ]
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
    with pytest.raises(
        CompareError, match=r"holds a run of another comparison \(policy hash .*; base standard vs crop\)"
    ):
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


@pytest.mark.slow
@pytest.mark.usefixtures("shared_ray")
def test_smoke_compare_trains_resumes_and_attaches(tmp_path, cifar_small, small_test_split, store, capsys):
    from autoaug.launch.cli import main

    out = tmp_path / "cmp"
    argv = [
        "compare",
        "--policy",
        "found@1",
        "--baselines",
        "standard",
        "--seeds",
        "2",
        "--preset",
        "smoke",
        "--data",
        str(cifar_small),
        "--test-data",
        str(small_test_split),
        "--store",
        store.uri,
        "--out",
        str(out),
        "--set",
        "train.train_size=512",
        "--set",
        "train.val_size=256",
    ]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert printed.count("trained ") >= 4 and "[4/4]" in printed
    assert "found@1" in printed and "95% CI" in printed

    run_files = sorted((out / "runs").glob("*.json"))
    assert len(run_files) == 4
    records = [json.loads(p.read_text()) for p in run_files]
    assert {(r["policy"], r["seed"]) for r in records} == {
        ("found@1", 0),
        ("found@1", 1),
        ("standard", 0),
        ("standard", 1),
    }
    for r in records:
        assert 0.0 < r["test_accuracy"] <= 1.0
        assert [h["epoch"] for h in r["history"]] == [1, 2]
    # Different seeds give different models.
    assert (
        len(
            {r["test_accuracy"] for r in records if r["policy"] == "standard"}
            | {r["history"][0]["train_loss"] for r in records if r["policy"] == "standard"}
        )
        > 1
    )

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
        x["test_accuracy"] for x in records if x["policy"] == "found@1"
    )
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


def _toy_parquet(path: Path, per_class: dict[str, int], seed: int) -> None:
    """Noisy 32x32 PNGs of one colour per class; the class names in the schema metadata."""
    import io

    import numpy as np
    import pyarrow as pa
    from PIL import Image

    rng = np.random.default_rng(seed)
    colours = [(200, 40, 40), (40, 200, 40), (40, 40, 200)]
    images, labels = [], []
    for label, count in enumerate(per_class.values()):
        for _ in range(count):
            pixels = np.clip(rng.normal(colours[label], 40, size=(32, 32, 3)), 0, 255).astype(np.uint8)
            buf = io.BytesIO()
            Image.fromarray(pixels).save(buf, format="PNG")
            images.append(buf.getvalue())
            labels.append(label)
    table = pa.table({"image": pa.array(images, pa.binary()), "label": pa.array(labels, pa.int64())})
    pq.write_table(table.replace_schema_metadata({"classes": ",".join(per_class)}), path)


@pytest.mark.slow
@pytest.mark.usefixtures("shared_ray")
def test_compare_writes_per_class_results_on_an_imbalanced_dataset(tmp_path, capsys):
    """End to end on a tiny imbalanced dataset (one rare class): the runs record per-class counts,
    and compare writes balanced accuracy, per_class.csv and per_class.png with the class names."""
    from autoaug.launch.cli import main

    data = tmp_path / "toy"
    data.mkdir()
    classes = {"red": 200, "green": 200, "blue_rare": 30}
    _toy_parquet(data / "train.parquet", classes, seed=0)
    _toy_parquet(data / "test.parquet", {"red": 60, "green": 60, "blue_rare": 9}, seed=1)
    out = tmp_path / "cmp"
    argv = [
        "compare",
        "--policy",
        "none",
        "--baselines",
        "standard",
        "--seeds",
        "2",
        "--preset",
        "smoke",
        "--data",
        str(data),
        "--out",
        str(out),
        "--no-attach",
        "--set",
        "train.train_size=192",
        "--set",
        "train.val_size=64",
        "--set",
        "train.epochs=1",
    ]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "balanced acc % (mean)" in printed and "per class, against the best baseline standard" in printed
    assert "wrote " + str(out / "per_class.csv") in printed and "wrote " + str(out / "per_class.png") in printed
    for record in (json.loads(p.read_text()) for p in (out / "runs").glob("*.json")):
        assert record["test_class_total"] == [60, 60, 9]
        assert sum(record["test_class_correct"]) == round(record["test_accuracy"] * 129)
    with open(out / "per_class.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert {(r["class"], r["policy"]) for r in rows} == {(c, p) for c in classes for p in ("none", "standard")}
    assert all(r["baseline"] == "standard" for r in rows if r["policy"] == "none")
    assert (out / "per_class.png").read_bytes()[:4] == b"\x89PNG"
    results = pq.read_table(out / "results.parquet").to_pylist()
    assert all(r["balanced_n"] == 2 and 0.0 <= r["balanced_mean"] <= 1.0 for r in results)
    assert "| 2 | blue_rare | 9 |" in (out / "results.md").read_text()


@pytest.mark.slow
@pytest.mark.usefixtures("shared_ray")
def test_compare_with_base_trains_the_rebased_policy(tmp_path, cifar_small, small_test_split, capsys):
    """--base crop: AutoAugment's CIFAR-10 policy is trained on crop (the run is exactly a training of
    that policy on crop, not of the stored one) and the crop baseline stays the crop alone."""
    import dataclasses

    from autoaug.launch.cli import main
    from autoaug.policies import presets
    from autoaug.proxy_models.train import train

    out = tmp_path / "cmp"
    argv = [
        "compare",
        "--policy",
        "autoaugment-cifar10",
        "--baselines",
        "crop",
        "--base",
        "crop",
        "--seeds",
        "1",
        "--preset",
        "smoke",
        "--epochs",
        "1",
        "--data",
        str(cifar_small),
        "--test-data",
        str(small_test_split),
        "--out",
        str(out),
        "--set",
        "train.train_size=256",
        "--set",
        "train.val_size=64",
        "--no-attach",
    ]
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

    cfg = compare.config_from_dict(
        {
            "data": str(cifar_small),
            "test_data": str(small_test_split),
            "preset": "smoke",
            "train": {"epochs": 1, "train_size": 256, "val_size": 64},
        }
    ).run_config(0)
    cfg = dataclasses.replace(cfg, test_data=None)
    aa = presets.resolve("autoaugment-cifar10")
    losses = {base: train(cfg, aa.with_base(base)).history[0]["train_loss"] for base in ("crop", "standard")}
    assert moved["history"][0]["train_loss"] == losses["crop"] != losses["standard"]


@pytest.mark.slow
@pytest.mark.usefixtures("shared_ray")
def test_compare_in_packs_records_each_run_as_its_own(tmp_path, cifar_small, small_test_split, capsys):
    """--pack 2: the 4 runs (2 policies x 2 seeds) train 2 at a time per process, each run's record
    and the table as without packs, and a re-run reuses them."""
    from autoaug.launch.cli import main

    out = tmp_path / "cmp"
    argv = ["compare", "--baselines", "none,standard", "--seeds", "2", "--preset", "smoke", "--epochs", "1"]
    argv += ["--data", str(cifar_small), "--test-data", str(small_test_split), "--out", str(out), "--pack", "2"]
    argv += ["--set", "train.train_size=256", "--set", "train.val_size=64", "--no-attach"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "in packs of up to 2, 1 CPU(s) per pack" in printed and "[4/4] trained" in printed
    assert printed.count(" s in a pack of 2, node ") == 4
    records = [json.loads(p.read_text()) for p in sorted((out / "runs").glob("*.json"))]
    assert sorted((r["policy"], r["seed"]) for r in records) == [
        ("none", 0),
        ("none", 1),
        ("standard", 0),
        ("standard", 1),
    ]
    assert all(r["pack"] == 2 and 0 <= r["test_accuracy"] <= 1 and len(r["history"]) == 1 for r in records)
    assert json.loads((out / "compare.json").read_text())["pack"] == 2
    assert main(argv) == 0 and "[4/4] reused" in capsys.readouterr().out  # nothing trained again


def test_config_names_missing_training_data(tmp_path):
    with pytest.raises(CompareError, match="training data '.*nothere' does not exist"):
        compare.config_from_dict({"data": str(tmp_path / "nothere")})


@pytest.mark.slow
@pytest.mark.usefixtures("shared_ray")
def test_compare_live_display_shows_epochs_of_running_runs(tmp_path, cifar_small, small_test_split):
    """On a terminal the runs put (run, epoch, val) on a Ray queue and the display shows them."""
    import io

    from rich.console import Console

    from autoaug.core.progress import Progress
    from autoaug.launch.compare import config_from_dict, run_compare

    config = config_from_dict(
        {
            "baselines": "none,standard",
            "seeds": 1,
            "preset": "smoke",
            "data": str(cifar_small),
            "test_data": str(small_test_split),
            "out": str(tmp_path / "cmp"),
            "attach": False,
            "train": {"train_size": 256, "val_size": 128, "epochs": 2},
        }
    )
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


COMPARE_ON_A_FULL_DISK = r"""
set -u
mount -t tmpfs -o size=512k tmpfs "$D"
dd if=/dev/zero of="$D/filler" bs=4k count=124 2>/dev/null  # 16k left: the settings and 3 run records
autoaug compare $ARGS; echo "rc1=$?"
echo "records=$(ls "$D/cmp/runs" | grep -c json) tmp=$(ls -A "$D/cmp/runs" | grep -c tmp)"
rm "$D/filler"
autoaug compare $ARGS; echo "rc2=$?"
"""


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_compare_stopped_by_a_full_disk_is_one_line_and_resumes_once_space_is_freed(
    tmp_path, cifar_train, in_mount_namespace
):
    """A real full filesystem (a 512 KiB tmpfs in a user namespace, 16 KiB left) under --out, real processes: the
    comparison stops at the run record that does not fit, with one line naming it and saying to
    free space; no half-written record is left; run again once space is freed, it trains only the
    run it lacks and writes every output."""
    import os
    import sys

    data = tmp_path / "data"
    data.mkdir()
    table = pq.read_table(cifar_train)  # sorted by class: rows spread over all 10
    pq.write_table(table.take(list(range(0, len(table), len(table) // 300))[:300]), data / "train.parquet")
    pq.write_table(table.take(list(range(7, len(table), len(table) // 100))[:100]), data / "test.parquet")
    (tmp_path / "mnt").mkdir()
    out = tmp_path / "mnt" / "cmp"
    args = (
        f"--data {data / 'train.parquet'} --test-data {data / 'test.parquet'} --policy none --baselines standard "
        f"--seeds 2 --preset smoke --set train.epochs=1 --set train.train_size=128 --set train.val_size=64 "
        f"--out {out} --no-attach --cpus-per-run 1"
    )
    env = {
        **os.environ,
        "D": str(tmp_path / "mnt"),
        "ARGS": args,
        "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""),
    }
    proc = in_mount_namespace(COMPARE_ON_A_FULL_DISK, env)
    text, err = proc.stdout, proc.stderr
    assert "rc1=1" in text, text + err
    first = err[: err.index("autoaug: error:") + 400] if "autoaug: error:" in err else err
    errors = [line for line in err.splitlines() if line.startswith("autoaug: error:")]
    assert len(errors) == 1 and f"cannot write {out / 'runs'}" in errors[0], first
    assert "no space left on the filesystem (ENOSPC); free space there" in errors[0]
    assert "records=3 tmp=0" in text, text  # three whole records, nothing half-written
    assert "rc2=0" in text, text + err
    second = text[text.index("rc1=1") :]
    assert second.count("] reused ") == 3 and second.count("] trained ") == 1, second
    assert "wrote " + str(out / "comparison.png") in second


def _png_width(png: bytes) -> int:
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    return int.from_bytes(png[16:20], "big")  # IHDR: width, then height


def test_the_plot_has_no_validation_panel_where_no_run_validated(tmp_path, store):
    from autoaug.launch.compare.report import plot

    validated = _fake_comparison(tmp_path / "a", store, {"found@1": [0.80, 0.82], "standard": [0.70, 0.71]})
    unvalidated = dataclasses.replace(
        validated, runs=[{**r, "history": [{**h, "val_accuracy": None} for h in r["history"]]} for r in validated.runs]
    )
    # eval-cpu validates nothing: one panel (test accuracy), not an empty second one
    assert _png_width(plot(unvalidated)) < 0.6 * _png_width(plot(validated))
