"""The statistics benchmarks/search_quality.py reports: which ``--also`` searches count as the same
search with another seed, and what the found policies of several seeds give together."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def sq(load_benchmark):
    return load_benchmark("search_quality")


def _result(seed: int, name: str, fingerprint: str = "bf23", **changes) -> dict:
    config = {
        "name": name,
        "seed": seed,
        "storage": f"/w/{name}/runs",
        "store": f"/w/{name}/store",
        "num_trials": 28,
        "grace_period": 20,
        "concurrency": 2,
        "warm_start": ["autoaugment-cifar10"],
        "train": {"model": "resnet-8", "seed": seed, "data": "/data", "epochs": 120},
    }
    for key, value in changes.items():
        if key.startswith("train_"):
            config["train"][key[6:]] = value
        else:
            config[key] = value
    return {"provenance": {"search": {"config": config}, "dataset": {"fingerprint": fingerprint}}}


def test_a_search_with_another_seed_name_and_place_is_the_same_recipe(sq):
    a = sq.search_recipe(_result(0, "sq-a"))
    assert sq.same_recipe(a, sq.search_recipe(_result(1, "sq-b")))


@pytest.mark.parametrize(
    "change", [{"num_trials": 16}, {"grace_period": 40}, {"train_epochs": 60}, {"warm_start": []}, {"concurrency": 1}]
)
def test_a_search_that_differs_in_what_it_does_is_another_recipe(sq, change):
    a = sq.search_recipe(_result(0, "sq-a"))
    assert not sq.same_recipe(a, sq.search_recipe(_result(0, "sq-b", **change)))


def test_searches_that_measured_another_base_or_warm_start_are_the_same_recipe(sq):
    """--base auto / --warm-start auto: what each seed's calibration chose is not the recipe."""

    def measured(seed, base, warm):
        result = _result(seed, f"sq-{seed}", base=base, warm_start=[warm], space={"base": base, "num_sub_policies": 5})
        result["provenance"]["calibration"] = {"base": {"chosen": base}, "transfer": {"warm_start": [warm]}}
        return sq.search_recipe(result)

    assert sq.same_recipe(measured(0, "standard", "autoaugment-cifar10"), measured(1, "crop", "autoaugment-imagenet"))
    # A search given its base and warm start is another recipe than one that measured them.
    given = sq.search_recipe(_result(1, "sq-g", base="standard", space={"base": "standard", "num_sub_policies": 5}))
    assert not sq.same_recipe(measured(0, "standard", "autoaugment-cifar10"), given)


def test_searches_whose_space_family_was_measured_are_the_same_recipe_whatever_family_they_got(sq):
    """``--space auto``: two seeds whose calibration chose RandAugment's and AutoAugment's family."""
    ra = _result(0, "a", family="randaugment", space={"family": "randaugment", "num_magnitude_bins": 31})
    aa = _result(1, "b", family="aa", space={"num_sub_policies": 5, "num_magnitude_bins": 10})
    for r, family in ((ra, "randaugment"), (aa, "aa")):
        r["provenance"]["calibration"] = {"transfer": {"best": "x", "family": family}}
    assert sq.same_recipe(sq.search_recipe(ra), sq.search_recipe(aa))
    chosen = _result(1, "c", family="aa", space={"num_sub_policies": 5, "num_magnitude_bins": 10})
    chosen["provenance"]["calibration"] = {"transfer": {"best": "x"}}  # --space aa: a recipe of its own
    assert not sq.same_recipe(sq.search_recipe(ra), sq.search_recipe(chosen))


def test_a_search_on_other_data_is_another_recipe_wherever_the_data_lies(sq):
    a = sq.search_recipe(_result(0, "sq-a"))
    assert not sq.same_recipe(a, sq.search_recipe(_result(1, "sq-b", fingerprint="9e11")))


def test_a_key_only_a_newer_version_records_does_not_make_searches_differ(sq):
    old = sq.search_recipe(_result(0, "sq-a"))
    new = sq.search_recipe(_result(1, "sq-b", startup_trials=None, train_eval_from=1))
    assert sq.same_recipe(old, new) and sq.same_recipe(new, old)


def test_over_search_seeds_averages_paired_differences_and_gives_both_intervals(sq):
    runs = []
    base = {0: 0.50, 1: 0.52, 2: 0.51}
    found_a = {0: 0.52, 1: 0.53, 2: 0.54}  # +0.02, +0.01, +0.03: mean +0.02
    found_b = {0: 0.49, 1: 0.52, 2: 0.50}  # -0.01, 0, -0.01: mean -0.0067
    for label, accs in {"base": base, "a": found_a, "b": found_b}.items():
        runs += [{"policy": label, "seed": s, "test_accuracy": v} for s, v in accs.items()]
    summary = sq.summarize(runs)
    over = sq.over_search_seeds(summary, ["a", "b"], ["base"])
    d = over["vs"]["base"]
    assert d["per_search"] == pytest.approx([0.02, -0.02 / 3])
    assert over["mean"] == pytest.approx((0.53 + 0.5033333) / 2, abs=1e-6)
    # Over evaluation seeds: each seed's difference averaged over the searches, then a t interval over 3 seeds.
    per_seed = [(0.02 - 0.01) / 2, (0.01 + 0.0) / 2, (0.03 - 0.01) / 2]
    assert d["over_eval_seeds"]["diffs"] == pytest.approx(per_seed)
    assert d["over_eval_seeds"]["mean"] == pytest.approx(sum(per_seed) / 3)
    # Over searches: a t interval with 1 degree of freedom over the two per-search means: much wider.
    s = d["over_searches"]
    assert s["mean"] == pytest.approx(d["over_eval_seeds"]["mean"])
    half = 12.706 * abs(0.02 + 0.02 / 3) / 2  # t(0.975, 1) * std / sqrt(2), std = |x1 - x2| / sqrt(2)
    assert s["high"] - s["mean"] == pytest.approx(half, rel=1e-3)
    assert s["high"] - s["low"] > d["over_eval_seeds"]["high"] - d["over_eval_seeds"]["low"]


def test_over_search_seeds_pairs_only_the_evaluation_seeds_every_search_has(sq):
    runs = [{"policy": "base", "seed": s, "test_accuracy": 0.5} for s in (0, 1, 2)]
    runs += [{"policy": "a", "seed": s, "test_accuracy": 0.6} for s in (0, 1, 2)]
    runs += [{"policy": "b", "seed": s, "test_accuracy": 0.4} for s in (0, 1)]
    over = sq.over_search_seeds(sq.summarize(runs), ["a", "b"], ["base"])
    assert over["seeds"] == [0, 1]
    assert over["vs"]["base"]["over_eval_seeds"]["seeds"] == [0, 1]
    assert over["vs"]["base"]["over_eval_seeds"]["mean"] == pytest.approx(0.0)


def test_results_table_shows_balanced_accuracy_and_says_where_it_is_missing(sq):
    """compare's runs.csv has a balanced_accuracy column (empty for runs recorded without per-class
    counts); committed CSVs from before it have none at all."""
    runs = [
        {"policy": "found", "seed": s, "test_accuracy": a, "balanced_accuracy": b}
        for s, a, b in ((0, 0.60, 0.50), (1, 0.62, 0.54), (2, 0.61, 0.52))
    ]
    runs += [
        {"policy": "standard", "seed": s, "test_accuracy": a, "balanced_accuracy": b}
        for s, a, b in ((0, 0.58, 0.56), (1, 0.57, ""), (2, 0.59, 0.58))
    ]
    runs += [{"policy": "none", "seed": s, "test_accuracy": 0.4} for s in (0, 1, 2)]  # an older runs.csv
    summary = sq.summarize(runs)
    assert summary["found"]["balanced"]["mean"] == pytest.approx(0.52)
    assert summary["found"]["balanced"]["seeds"] == {0: 0.50, 1: 0.54, 2: 0.52}
    assert summary["standard"]["balanced"]["n"] == 2 and summary["none"]["balanced"] is None
    table = "\n".join(sq.results_table(summary, {"found": " **(found)**"}))
    assert "| balanced acc % | std | 95% CI |" in table.splitlines()[0]
    b = summary["found"]["balanced"]
    assert (
        f"| 1 | `found` **(found)** | 3 | 61.00 | 1.00 | [{100 * summary['found']['low']:.2f}, "
        f"{100 * summary['found']['high']:.2f}] | 52.00 | 2.00 | [{100 * b['low']:.2f}, {100 * b['high']:.2f}] |"
    ) in table
    assert "| 57.00 (2 of 3 seeds) |" in table
    assert "| `none` | 3 | 40.00 | 0.00 | [40.00, 40.00] | – | – | – |" in table
    assert "re-run the same command" in table
    # Paired differences of the balanced accuracies, over the seeds both have.
    d = sq.balanced_paired(summary, "found", "standard")
    assert d["seeds"] == [0, 2] and d["mean"] == pytest.approx(((0.50 - 0.56) + (0.52 - 0.58)) / 2)
    assert sq.balanced_paired(summary, "found", "none") is None
    diff_table = "\n".join(
        sq._diff_table(
            "t",
            {
                "standard": sq.paired(summary["found"]["seeds"], summary["standard"]["seeds"]),
                "none": sq.paired(summary["found"]["seeds"], summary["none"]["seeds"]),
            },
            {"standard": d, "none": None},
        )
    )
    assert "| `standard` | 3.00 | [" in diff_table and "| -6.00 | [" in diff_table
    assert diff_table.rstrip().endswith("| – | – |")


def test_results_table_of_a_file_with_balanced_accuracy_everywhere_has_no_note(sq):
    runs = [
        {"policy": p, "seed": s, "test_accuracy": 0.5, "balanced_accuracy": 0.4} for p in ("a", "b") for s in (0, 1)
    ]
    assert "re-run" not in "\n".join(sq.results_table(sq.summarize(runs)))


def _write_runs_csv(path, rows):
    """A committed ``eval_runs.csv`` of ``rows`` (dicts with the first row's columns)."""
    import csv

    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def test_imported_runs_are_the_records_compare_reuses_for_a_regime_sized_per_class(sq, tmp_path, cifar_dir):
    """A committed runs.csv seeds a comparison whose regime (eval-cpu) is asked per class: the
    records must hold the regime as compare resolves it, or compare refuses them as another
    comparison's."""
    import argparse

    from autoaug.launch.compare.candidates import resolve_candidates
    from autoaug.launch.compare.config import config_from_dict
    from autoaug.launch.compare.runner import load_run, run_id, sized_to_data

    (none,) = resolve_candidates((), ["none"], None)
    rows = [
        {
            "run_id": "x",
            "policy": "none",
            "policy_hash": none.policy_hash,
            "seed": s,
            "test_accuracy": 0.45,
            "test_loss": 1.7,
            "val_accuracy": "",
            "train_time_s": 200.0,
            "node_id": "",
            "hostname": "vm",
            "finished_at": "2026-11-23T03:32:16Z",
        }
        for s in (0, 1)
    ]
    rows.append({**rows[0], "policy": "gone", "policy_hash": "0" * 64})  # a policy this comparison lacks
    csv_path = _write_runs_csv(tmp_path / "eval_runs.csv", rows)
    out = tmp_path / "eval"
    a = argparse.Namespace(data=str(cifar_dir))
    assert sq.import_runs(a, csv_path, out, ["--preset", "eval-cpu"]) == 2
    assert sq.import_runs(a, csv_path, out, ["--preset", "eval-cpu"]) == 0  # never overwrites a record
    config, fingerprint, _, _ = sized_to_data(
        config_from_dict({"data": str(cifar_dir), "preset": "eval-cpu", "baselines": ["none"], "out": str(out)})
    )
    assert config.train.train_size == 1000 and config.train.train_per_class is None  # resolved: 100 per class
    for seed in (0, 1):
        path = out / "runs" / f"{run_id(none, seed)}.json"
        record = load_run(path.read_bytes(), str(path), none, seed, config.run_config(seed), fingerprint)
        assert record["test_accuracy"] == 0.45 and record["imported_from"] == str(csv_path)


def test_a_run_trained_in_another_precision_than_this_machines_is_not_imported(
    sq, tmp_path, cifar_dir, monkeypatch, capsys
):
    """Under ``amp: native`` the same seed trains in float32 on a CPU without native bfloat16 and in
    bfloat16 on one with it, two different models: a committed row of the other precision is
    trained again here, not paired with this machine's runs; a row of a CSV written before runs
    kept their precision is imported, and the line says how many were."""
    import argparse
    import json

    import autoaug.proxy_models.precision as precision
    from autoaug.launch.compare.candidates import resolve_candidates
    from autoaug.launch.compare.runner import run_id

    monkeypatch.setattr(precision, "run_precision", lambda config, device: "bfloat16")
    (none,) = resolve_candidates((), ["none"], None)
    base = {"policy": "none", "policy_hash": none.policy_hash, "test_accuracy": 0.45, "test_loss": 1.7}
    base |= {"val_accuracy": "", "train_time_s": 200.0, "hostname": "vm", "finished_at": "2026-11-23T03:32:16Z"}
    rows = [{**base, "seed": 0, "precision": "float32"}, {**base, "seed": 1, "precision": "bfloat16"}]
    rows.append({**base, "seed": 2, "precision": ""})  # written before runs kept their precision
    csv_path = _write_runs_csv(tmp_path / "eval_runs.csv", rows)
    out = tmp_path / "eval"
    assert sq.import_runs(argparse.Namespace(data=str(cifar_dir)), csv_path, out, ["--preset", "eval-cpu"]) == 2
    said = capsys.readouterr().out
    assert "imported 2 finished runs" in said and "1 of them recorded no precision" in said
    assert "not imported: 1 trained in float32 (this machine trains them in another precision" in said
    assert not (out / "runs" / f"{run_id(none, 0)}.json").exists()
    recorded = [json.loads((out / "runs" / f"{run_id(none, s)}.json").read_text())["precision"] for s in (1, 2)]
    assert recorded == ["bfloat16", None]


def test_a_run_of_another_kind_of_machine_than_this_ones_is_not_imported(sq, tmp_path, cifar_dir, capsys):
    """One seed of the ``eval-cpu`` regime, float32 both, gave 96.03% on an AMD Zen 3 and 97.32% on an
    Intel Xeon (GTSRB): a committed row trained on another kind of machine than this one is trained
    again here, not paired with this machine's runs; a row that records no kind is imported and counted."""
    import argparse
    import json

    from autoaug.core.machine import machine_kind
    from autoaug.launch.compare.candidates import resolve_candidates
    from autoaug.launch.compare.runner import run_id
    from autoaug.proxy_models.precision import run_precision
    from autoaug.proxy_models.train_config import TrainConfig

    here = run_precision(TrainConfig.from_preset("eval-cpu"), TrainConfig.from_preset("eval-cpu").resolve_device())
    other = "cpu Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz (avx2 fma avx512f avx512_bf16 amx_bf16)"
    assert other != machine_kind()
    (none,) = resolve_candidates((), ["none"], None)
    base = {"policy": "none", "policy_hash": none.policy_hash, "test_accuracy": 0.45, "test_loss": 1.7}
    base |= {"val_accuracy": "", "train_time_s": 200.0, "hostname": "vm", "precision": here}
    rows = [{**base, "seed": 0, "machine": other}, {**base, "seed": 1, "machine": machine_kind()}]
    rows.append({**base, "seed": 2, "machine": ""})  # written before runs kept their machine
    csv_path = _write_runs_csv(tmp_path / "eval_runs.csv", rows)
    out = tmp_path / "eval"
    assert sq.import_runs(argparse.Namespace(data=str(cifar_dir)), csv_path, out, ["--preset", "eval-cpu"]) == 2
    said = capsys.readouterr().out
    assert "1 of them recorded no kind of machine" in said
    assert f"not imported: 1 trained on {other} (another kind of machine than this one, {machine_kind()}" in said
    assert not (out / "runs" / f"{run_id(none, 0)}.json").exists()
    recorded = [json.loads((out / "runs" / f"{run_id(none, s)}.json").read_text())["machine"] for s in (1, 2)]
    assert recorded == [machine_kind(), None]


def test_the_rebased_rows_runs_are_imported_like_any_policy_of_the_comparison(sq, tmp_path, cifar_dir):
    """The best published policy moved onto the search's base is written to this benchmark's own
    work folder: an earlier benchmark's runs of it (another folder, the same policy hash) are reused."""
    import argparse
    import csv

    work = tmp_path / "work"
    (work / "eval").mkdir(parents=True)
    with open(work / "eval" / "runs.csv", "w", newline="") as f:  # randaugment leads the evaluation so far
        writer = csv.DictWriter(f, fieldnames=["policy", "seed", "test_accuracy"])
        writer.writeheader()
        writer.writerows(
            {"policy": ref, "seed": seed, "test_accuracy": acc}
            for seed in (0, 1)
            for ref, acc in (("randaugment:n=2,m=9", 0.6), ("autoaugment-cifar10", 0.5))
        )
    rebased = sq.rebased_best(work, "crop")
    assert rebased.endswith("randaugment-on-crop.json")
    from autoaug.launch.compare.candidates import resolve_candidates

    (candidate,) = resolve_candidates((rebased,), [], None)
    rows = [
        {
            "run_id": "x",
            "policy": "randaugment-on-crop.json",
            "policy_hash": candidate.policy_hash,
            "seed": s,
            "test_accuracy": 0.97,
            "test_loss": 0.1,
            "val_accuracy": "",
            "train_time_s": 300.0,
            "node_id": "",
            "hostname": "vm",
            "finished_at": "2026-11-23T03:32:16Z",
        }
        for s in (0, 1)
    ]
    csv_path = _write_runs_csv(tmp_path / "eval_runs.csv", rows)
    a = argparse.Namespace(data=str(cifar_dir))
    assert sq.import_runs(a, csv_path, work / "eval", ["--preset", "eval-cpu"]) == 0  # not a baseline
    assert sq.import_runs(a, csv_path, work / "eval", ["--preset", "eval-cpu"], [rebased]) == 2


def test_also_a_pba_result_compares_its_schedule_not_its_last_stage(sq, tmp_path, cifar_dir):
    """A PBA search stores its schedule's last stage as the version's policy; ``--also`` of its
    results folder must train the schedule, and reuse the runs that folder recorded of it."""
    import argparse
    import csv
    import json

    from autoaug.launch.compare.candidates import resolve_candidates
    from autoaug.policies import resolve_policy
    from autoaug.policies.schedule import Schedule

    first, last = resolve_policy("autoaugment-cifar10"), resolve_policy("autoaugment-svhn")
    schedule = Schedule("sq-pba", [(0.0, first.with_name("sq-pba")), (0.5, last.with_name("sq-pba"))])
    folder = tmp_path / "search-quality-pba"
    folder.mkdir()
    (folder / "search_result.json").write_text(
        json.dumps(
            {
                "policy": json.loads(schedule.final.to_json()),
                "stored": {"name": "sq-pba"},
                "provenance": {"method": {"name": "pba"}, "schedule": schedule.to_dict()},
            }
        )
    )
    a = argparse.Namespace(data=str(cifar_dir), also=[str(folder)])
    (path,) = sq.also_policies(a, tmp_path / "work")
    (candidate,) = resolve_candidates((path,), [], None)
    assert candidate.policy_hash == schedule.content_hash != schedule.final.content_hash
    with open(folder / "eval_runs.csv", "w", newline="") as f:
        writer = csv.DictWriter(
            f,
            fieldnames=[
                "run_id",
                "policy",
                "policy_hash",
                "seed",
                "test_accuracy",
                "test_loss",
                "val_accuracy",
                "train_time_s",
                "node_id",
                "hostname",
                "finished_at",
            ],
        )
        writer.writeheader()
        writer.writerows(
            {
                "run_id": "x",
                "policy": "sq-pba@1",
                "policy_hash": schedule.content_hash,
                "seed": s,
                "test_accuracy": 0.58,
                "test_loss": 1.3,
                "val_accuracy": "",
                "train_time_s": 250.0,
                "node_id": "",
                "hostname": "vm",
                "finished_at": "2026-11-25T17:40:01Z",
            }
            for s in (0, 1)
        )
    assert (
        sq.import_runs(a, folder / "eval_runs.csv", tmp_path / "work" / "eval", ["--preset", "eval-cpu"], [path]) == 2
    )


def test_a_found_policy_that_is_a_baseline_is_not_trained_twice_and_its_rows_are_the_baselines(sq, tmp_path):
    """A search that stored the published policy it started from (RandAugment on the standard
    base), and a second seed that stored it too: compare refuses a second name for one policy,
    so both are left out of the comparison and read RandAugment's runs under their own labels."""
    from autoaug.policies import Policy, presets

    ra = presets.resolve("randaugment:n=2,m=9")
    found = tmp_path / "found.json"
    found.write_text(Policy("sq-found", ra.num_magnitude_bins, ra.sub_policies, ra.base, ra.ranges).to_json())
    again = tmp_path / "again.json"
    again.write_text(Policy("sq-again", ra.num_magnitude_bins, ra.sub_policies, ra.base, ra.ranges).to_json())
    other = tmp_path / "other.json"
    aa = presets.resolve("autoaugment-cifar10").with_base("crop")
    other.write_text(Policy("sq-other", aa.num_magnitude_bins, aa.sub_policies, aa.base, aa.ranges).to_json())
    same = sq.twins(tmp_path, [str(found), str(other), str(again)])
    assert set(same) == {str(found), str(again)}
    assert same[str(found)]["twin"] == same[str(again)]["twin"] == "randaugment:n=2,m=9"
    assert same[str(found)]["label"] == "found.json"
    runs = [
        {
            "policy": "randaugment:n=2,m=9",
            "ref": "randaugment:n=2,m=9",
            "seed": str(s),
            "test_accuracy": str(0.5 + s / 100),
        }
        for s in range(3)
    ] + [{"policy": "none", "ref": "none", "seed": "0", "test_accuracy": "0.4"}]
    rows = sq.with_twins(runs, same)
    mine = [r for r in rows if r["policy"] == "found.json"]
    assert [(r["seed"], r["test_accuracy"], r["ref"]) for r in mine] == [
        (str(s), str(0.5 + s / 100), str(found)) for s in range(3)
    ]
    summary = sq.summarize(rows)
    d = sq.paired(summary["found.json"]["seeds"], summary["randaugment:n=2,m=9"]["seeds"])
    assert d["mean"] == 0.0 and d["diffs"] == [0.0, 0.0, 0.0]


def test_importing_runs_for_a_policy_that_is_a_baseline_imports_the_baselines_rows_once(sq, tmp_path, cifar_dir):
    """``--also`` a search that stored RandAugment itself: the import does not refuse it."""
    import argparse

    from autoaug.policies import Policy, presets

    ra = presets.resolve("randaugment:n=2,m=9")
    found = tmp_path / "found.json"
    found.write_text(Policy("sq-found", ra.num_magnitude_bins, ra.sub_policies, ra.base, ra.ranges).to_json())
    csv_path = tmp_path / "runs.csv"
    fields = "run_id,policy,kind,ref,store_ref,policy_hash,base,seed,test_accuracy,test_loss,val_accuracy,train_time_s"
    rows = [f'ra-{s},"randaugment:n=2,m=9",baseline,,,{ra.content_hash},standard,{s},0.5,1.2,,100' for s in (0, 1)]
    csv_path.write_text("\n".join([fields, *rows]) + "\n")
    a = argparse.Namespace(data=str(cifar_dir))
    written = sq.import_runs(a, csv_path, tmp_path / "eval", ["--preset", "eval-cpu"], [str(found)])
    assert written == 2 and len(list((tmp_path / "eval" / "runs").glob("*.json"))) == 2
