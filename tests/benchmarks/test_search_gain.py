"""benchmarks/search_gain.py: the gain table's statistics (pure), and its stages' bookkeeping: a
re-run reuses finished searches and runs, resumes an unfinished search, and trains only the runs
it lacks (no real training here: the searches and the runs are faked)."""

from __future__ import annotations

import contextlib
import json
import math
from pathlib import Path

import pytest

#: Student's t for a two-sided 95% interval with 2 degrees of freedom (published tables).
T_975_DF2 = 4.302653


@pytest.fixture(scope="module")
def sg(load_benchmark):
    return load_benchmark("search_gain")


@pytest.fixture(scope="module")
def stats(load_benchmark):
    return load_benchmark("search_gain_stats")


# ------------------------------------------------------------------------------------ statistics
def test_a_cell_is_the_paired_difference_with_its_t_interval(stats):
    stored = {3000: 0.52, 3001: 0.55, 3002: 0.51}
    warm = {3000: 0.50, 3001: 0.50, 3002: 0.50}
    cell = stats.gain_cell(stored, warm)
    diffs = [0.02, 0.05, 0.01]
    mean = sum(diffs) / 3
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / 2)
    assert cell["n"] == 3 and cell["seeds"] == [3000, 3001, 3002]
    assert cell["mean"] == pytest.approx(mean)
    assert cell["low"] == pytest.approx(mean - T_975_DF2 * sd / math.sqrt(3), abs=1e-6)
    assert cell["high"] == pytest.approx(mean + T_975_DF2 * sd / math.sqrt(3), abs=1e-6)
    assert cell["beyond"] is (cell["low"] > 0)


def test_the_seeds_a_gain_would_need_are_the_fewest_whose_interval_excludes_zero(stats):
    # mean 1, spread 1: K=7 gives t(0.975, 6) = 2.447 / sqrt(7) = 0.925 < 1; K=6: 2.571 / sqrt(6) = 1.05
    assert stats.seeds_needed(0.01, 0.01) == 7 and stats.seeds_needed(-0.01, 0.01) == 7
    assert stats.seeds_needed(0.01, 0.0) == 2  # no spread: two seeds already clear it
    assert stats.seeds_needed(0.0, 0.01) is None and stats.seeds_needed(None, 0.01) is None
    assert stats.seeds_needed(0.0001, 0.01) is None  # about 38,000 seeds: more than any affordable K
    cells = {
        (28, "random"): {"n": 10, "mean": 0.005, "std": 0.01, "beyond": False},
        (28, "tpe"): {"n": 10, "mean": 0.0, "std": 0.0, "beyond": False, "same_policy": True},
        (100, "tpe"): {"n": 10, "mean": 0.03, "std": 0.01, "beyond": True},
    }
    text = stats.needed_text(cells)
    assert "random at 28 trials +0.50 (spread of the differences 1.00): K = 18" in text
    assert "tpe" not in text  # the warm start stored, and a gain that already clears: nothing to say
    assert stats.needed_text({(28, "tpe"): cells[(28, "tpe")]}) == ""
    # a loss is said as one: the seeds for its interval to lie below 0
    loss = stats.needed_text({(0, "pba"): {"n": 5, "mean": -0.005, "std": 0.01, "beyond": False}})
    assert "pba -0.50 (spread of the differences 1.00): K = 18" in loss and "a loss below it" in loss


def test_a_gain_beyond_the_interval_is_marked_and_one_within_it_is_not(stats):
    warm = {s: 0.5 for s in range(5)}
    clear = stats.gain_cell({s: 0.53 + 0.001 * s for s in range(5)}, warm)
    noisy = stats.gain_cell({0: 0.56, 1: 0.45, 2: 0.52, 3: 0.47, 4: 0.51}, warm)
    assert clear["beyond"] is True and stats.cell_text(clear).startswith("**+3.")
    assert noisy["beyond"] is False and not stats.cell_text(noisy).startswith("**")
    assert stats.cell_text(noisy).endswith("K=5")


def test_only_seeds_both_policies_ran_are_paired(stats):
    cell = stats.gain_cell({1: 0.6, 2: 0.6, 3: 0.9}, {1: 0.5, 2: 0.5, 4: 0.1})
    assert cell["n"] == 2 and cell["seeds"] == [1, 2] and cell["mean"] == pytest.approx(0.1)
    assert stats.gain_cell({}, {1: 0.5})["n"] == 0
    assert stats.cell_text(stats.gain_cell({}, {1: 0.5})) == "–"


def test_a_search_that_stored_its_warm_start_says_so(stats):
    same = stats.gain_cell({1: 0.5, 2: 0.6}, {1: 0.5, 2: 0.6}, same_policy=True)
    assert "stored the warm start" in stats.cell_text(same)


def test_the_table_has_a_row_per_trials_and_cells_per_sampler(stats):
    warm = {s: 0.5 for s in range(5)}
    cells = {(28, "tpe"): stats.gain_cell({s: 0.51 + 0.001 * s for s in range(5)}, warm)}
    costs = {(28, "tpe"): {"wall_s": 1800.0, "cpu_s": 3500.0, "finished": True}}
    rows = stats.gain_table(cells, costs, [28, 100], ["tpe", "random"])
    assert rows[0].count("tpe:") == 2 and rows[0].count("random:") == 2
    assert rows[2].startswith("| 28 |") and "30.0 min / 3,500 CPU-s" in rows[2] and "K=5" in rows[2]
    assert rows[3] == "| 100 | – | – | – | – |"
    unfinished = stats.cost_text({"wall_s": 60.0, "cpu_s": 100.0, "finished": False})
    assert unfinished.endswith("(unfinished)")


def test_a_third_sampler_is_a_third_pair_of_columns(stats):
    warm = {s: 0.5 for s in range(5)}
    cells = {(28, "local"): stats.gain_cell({s: 0.52 + 0.001 * s for s in range(5)}, warm)}
    rows = stats.gain_table(cells, {}, [28], ["tpe", "random", "local"])
    assert rows[0].count(": gain, points") == 3 and rows[0].index("random:") < rows[0].index("local:")
    assert rows[1] == "|---:|" + "---|---:|" * 3
    assert rows[2].startswith("| 28 | – | – | – | – | **+2.") and rows[2].count("|") == 8
    assert stats.best_cell(cells) == (28, "local")


def test_the_best_cell_has_the_highest_gain_and_never_the_warm_start_itself(stats):
    cell = {"n": 5, "mean": 0.01}
    cells = {
        (28, "tpe"): {**cell, "mean": 0.02},
        (100, "tpe"): {**cell, "mean": 0.02},  # a tie: more trials win
        (100, "random"): {**cell, "mean": 0.005},
        (300, "tpe"): {**cell, "mean": 0.5, "same_policy": True},
    }
    assert stats.best_cell(cells) == (100, "tpe")
    assert stats.best_cell({(28, "tpe"): {**cell, "same_policy": True}}) is None


def test_the_training_key_ignores_seed_threads_and_place_but_not_the_recipe(stats):
    train = {"model": "resnet-8", "epochs": 120, "seed": 0, "num_threads": 1, "data": "/a"}
    key = stats.train_key(train)
    assert stats.train_key({**train, "seed": 7, "num_threads": 2, "data": "/b"}) == key
    assert stats.train_key({**train, "epochs": 60}) != key


def test_sessions_of_a_search_add_up(stats):
    ledger: dict = {}
    stats.add_session(ledger, "s", 60.0, 100.0, "autoaug search ...", False, "t1")
    stats.add_session(ledger, "s", 30.0, 50.0, "autoaug search --resume s", True, "t2")
    assert ledger["s"]["wall_s"] == 90.0 and ledger["s"]["cpu_s"] == 150.0 and ledger["s"]["finished"]
    assert [s["finished"] for s in ledger["s"]["sessions"]] == [False, True]


def test_a_session_recorded_again_under_its_id_is_updated_not_added(stats):
    ledger: dict = {}
    stats.add_session(ledger, "s", 60.0, 100.0, "autoaug search ...", False, "t1", session="a")
    stats.add_session(ledger, "s", 120.0, 190.0, "autoaug search ...", False, "t2", session="a")  # a minute on
    stats.add_session(ledger, "s", 30.0, 50.0, "autoaug search --resume s", True, "t3", session="b")
    assert [x["wall_s"] for x in ledger["s"]["sessions"]] == [120.0, 30.0]
    assert ledger["s"]["wall_s"] == 150.0 and ledger["s"]["cpu_s"] == 240.0 and ledger["s"]["finished"]
    assert stats.cost_text(ledger["s"]) == "2.5 min / 240 CPU-s"
    # a session the benchmark lost, recovered from the search's own time: its CPU not measured
    stats.add_session(ledger, "s", 60.0, None, "recovered", False, "t0", session="lost")
    assert ledger["s"]["cpu_s"] == 240.0 and ledger["s"]["cpu_unmeasured"] == 1
    assert stats.cost_text(ledger["s"]) == "3.5 min / 240 CPU-s + 1 session not measured"


def test_each_search_says_where_asha_could_stop_its_trials(stats):
    # the table's rows ran under different presets (the cpu preset's first rung moved to epoch 60)
    train = {"method": "train", "train": {"epochs": 120}, "reduction_factor": 3.0, "early_stopping": True}
    assert stats.rungs_text({**train, "grace_period": 20}) == "20, 60 of 120"
    assert stats.rungs_text({**train, "grace_period": 60}) == "60 of 120"
    assert stats.rungs_text({**train, "grace_period": 60, "early_stopping": False}) == "none (120 epochs)"
    assert stats.rungs_text({**train, "grace_period": 120}) == "none (120 epochs)"
    assert stats.rungs_text({"method": "pba", "grace_period": 1, "reduction_factor": 3.0}) == "–"


def test_trials_text_says_what_ran(stats):
    counts = {"trials": 28, "completed": 9, "early_stopped": 18, "budget_stopped": 1, "failed": 0}
    assert stats.trials_text(counts) == "28 (9 full, 18 stopped early, 1 cut by the time budget)"


# ------------------------------------------------------------------------------- bookkeeping
def _result(name: str, data: str, stored: dict) -> dict:
    from autoaug.search.config import SearchConfig

    config = SearchConfig.from_dict({"preset": "smoke", "name": name, "data": data, "base": "crop", "rescore": True})
    return {
        "policy": stored,
        "policy_hash": "x",
        "stored": {"ref": f"{name}@1"},
        "provenance": {
            "search": {"name": name, "config": config.to_dict()},
            "counts": {"trials": 5, "completed": 2, "early_stopped": 3},
            "calibration": {
                "epochs": 2,
                "transfer": {"base": "crop", "best": "randaugment", "warm_start": ["randaugment"]},
            },
        },
    }


@pytest.fixture
def fake(sg, tmp_path, monkeypatch):
    """A work folder, a data folder, and fakes of ``autoaug search`` (writes result.json; records
    its arguments), the run loop (records what it trains; scores each run) and Ray."""
    from autoaug.policies import presets

    data = tmp_path / "data"
    data.mkdir()
    (data / "train.parquet").write_bytes(b"")
    work = tmp_path / "work"
    calls: dict = {"search": [], "trained": []}
    policies = {
        5: presets.resolve("autoaugment-cifar10").with_base("crop"),
        6: presets.resolve("trivialaugment"),
        "density": presets.resolve("autoaugment-imagenet").with_base("crop"),
        "pba": presets.resolve("autoaugment-svhn"),
    }
    raced = presets.resolve("autoaugment-svhn").with_base("crop")

    def autoaug(args, log):
        calls["search"].append(list(args))
        storage = Path(args[args.index("--storage") + 1])
        if "--resume" in args:
            name = args[args.index("--resume") + 1]
        else:
            name = args[args.index("--name") + 1]
            (storage / name).mkdir(parents=True)
            calibrated_by = args[args.index("--calibration-from") + 1] if "--calibration-from" in args else None
            config = {"name": name, "calibration_from": calibrated_by}
            (storage / name / "search_config.json").write_text(json.dumps({"config": config}))
        # another method's search (sg-density, sg-pba) stores a policy of its own
        n = name.split("-")[1] if name in ("sg-density", "sg-pba") else int(name.split("-")[1][1:])
        # a search finished again with the race (work/race<M>/runs) stores another policy
        stored = (raced if "race" in storage.parent.name else policies[n]).with_name(name).to_dict()
        (storage / name / "result.json").write_text(json.dumps(_result(name, str(data), stored)))
        return 0, 0.1

    def train_runs(runs, config, *, cached=None, save=None, task_name="", deadline=None):
        from autoaug.search.score import METRIC

        out = dict(cached or {})
        for key, policy, cfg in runs:
            if key in out:
                continue
            calls["trained"].append(key)
            out[key] = {
                METRIC: 0.5 + (0.01 if policy.name.startswith("sg-") else 0.0) + cfg.seed * 1e-6,
                "seed": cfg.seed,
            }
            save(out)
        return out

    import autoaug.core.ray_session as ray_session
    import autoaug.search.decide.proxy_runs as proxy_runs

    monkeypatch.setattr(sg, "_autoaug", autoaug)
    monkeypatch.setattr(proxy_runs, "train_runs", train_runs)
    monkeypatch.setattr(ray_session, "ray_session", lambda *a, **k: contextlib.nullcontext())
    argv = ["--data", str(data), "--smoke", "--work", str(work), "--out", str(tmp_path / "out")]
    return {"argv": argv, "calls": calls, "work": work, "out": tmp_path / "out"}


def test_the_first_search_calibrates_and_the_others_reuse_its_runs(sg, fake):
    assert sg.main(fake["argv"]) == 0
    searches = fake["calls"]["search"]
    names = [a[a.index("--name") + 1] for a in searches]
    assert names == ["sg-n5-tpe", "sg-n5-random", "sg-n6-tpe", "sg-n6-random"]
    assert "--calibration-from" not in searches[0]
    assert all(a[a.index("--calibration-from") + 1] == "sg-n5-tpe" for a in searches[1:])
    assert [a[a.index("--sampler") + 1] for a in searches] == ["tpe", "random"] * 2


def test_a_later_run_with_other_columns_reuses_the_calibration_already_there(sg, fake):
    # a column added another day starts from the base and warm start of the cells already measured,
    # not from a calibration of its own
    assert sg.main([*fake["argv"], "--samplers", "tpe"]) == 0
    fake["calls"]["search"].clear()
    assert sg.main([*fake["argv"], "--samplers", "random"]) == 0
    searches = fake["calls"]["search"]
    assert [a[a.index("--name") + 1] for a in searches] == ["sg-n5-random", "sg-n6-random"]
    assert all(a[a.index("--calibration-from") + 1] == "sg-n5-tpe" for a in searches)
    assert "The first search (`sg-n5-tpe`) measured the bases" in (fake["out"] / "results.md").read_text()


def test_the_table_pairs_each_stored_policy_with_the_shared_warm_start(sg, fake):
    sg.main(fake["argv"])
    doc = json.loads((fake["out"] / "gain.json").read_text())
    # the warm start (randaugment on crop) is trained once for the four searches: K = 2 runs;
    # each search's stored policy: the two searches of 5 trials stored the same one
    assert len(fake["calls"]["trained"]) == 2 + 2 * 2
    for cell in doc["cells"].values():
        assert cell["n"] == 2 and cell["mean"] == pytest.approx(0.01)
    assert "| 5 |" in (fake["out"] / "results.md").read_text()


def test_a_rerun_reuses_finished_searches_and_runs_and_resumes_the_rest(sg, fake):
    sg.main(fake["argv"])
    work, calls = fake["work"], fake["calls"]
    (work / "runs" / "sg-n6-random" / "result.json").unlink()  # interrupted before it finished
    done = json.loads((work / "rescore.json").read_text())
    lost = sorted(done)[0]
    del done[lost]  # and one re-scoring run never finished
    (work / "rescore.json").write_text(json.dumps(done))
    calls["search"].clear()
    calls["trained"].clear()
    assert sg.main(fake["argv"]) == 0
    assert calls["search"] == [["search", "--resume", "sg-n6-random", "--storage", str(work / "runs")]]
    assert calls["trained"] == [lost]
    ledger = json.loads((work / "searches.json").read_text())
    assert len(ledger["sg-n6-random"]["sessions"]) == 2 and len(ledger["sg-n5-tpe"]["sessions"]) == 1


XEON = "cpu Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz (avx2 fma avx512f avx512_bf16 amx_bf16)"


def test_a_proxy_run_of_another_kind_of_machine_is_trained_again_here_not_paired(sg, fake, capsys):
    """A work folder resumed on another kind of machine: its runs of the other kind would pair by
    seed with this one's (one seed trains another model there); they are trained again, said."""
    from autoaug.core.machine import machine_kind

    sg.main(fake["argv"])
    work, calls = fake["work"], fake["calls"]
    done = json.loads((work / "rescore.json").read_text())
    moved = sorted(done)[0]
    for key in done:
        done[key]["machine"] = XEON if key == moved else machine_kind()
    (work / "rescore.json").write_text(json.dumps(done))
    calls["trained"].clear()
    capsys.readouterr()
    assert sg.main(fake["argv"]) == 0
    assert calls["trained"] == [moved]
    assert f"rescore: 1 runs in rescore.json were trained on another kind of machine ({XEON}): trained again here" in (
        capsys.readouterr().out
    )


def test_runs_of_two_kinds_pair_only_within_the_kind_of_the_most_and_say_what_they_left_out(sg, capsys):
    here = "cpu AMD EPYC 7B13 64-Core Processor (avx2 fma)"
    done = {f"{k}{'0' * 11}": {"seed": s, "machine": here, "precision": "float32"} for k, s in zip("abc", (1, 2, 3))}
    done["d" * 12] = {"seed": 4, "machine": XEON, "precision": "float32"}
    done["e" * 12] = {"seed": 5}  # recorded before runs kept their machine: kept
    kept, machine = sg.one_kind_of(done)
    assert sorted(kept) == sorted(k for k in done if k != "d" * 12) and machine.startswith(f"{here}, float32")
    line = capsys.readouterr().out.strip()
    assert line.startswith(f"rescore: left out 1 proxy run of another kind of machine than the 4 compared ({here}")
    assert f"1 on {XEON}, float32 (dddddddddddd seed 4)" in line and "delete their entries in rescore.json" in line


def test_a_search_is_charged_the_cpu_of_the_processes_it_starts_not_the_benchmarks(sg, fake, monkeypatch):
    import subprocess
    import sys
    import time

    autoaug = sg._autoaug

    def busy(args, log):  # the first search: a child process spinning for a second of CPU
        if args[args.index("--name") + 1] == "sg-n5-tpe":
            subprocess.run(
                [sys.executable, "-c", "import time\nt = time.process_time()\nwhile time.process_time() - t < 1: pass"]
            )
        return autoaug(args, log)

    monkeypatch.setattr(sg, "_autoaug", busy)
    monkeypatch.setattr(sg, "CPU_SAMPLE_S", 0.05)
    start = time.process_time()
    while time.process_time() - start < 0.5:  # the benchmark's own CPU before the search: not charged
        pass
    sg.main(fake["argv"])
    ledger = json.loads((fake["work"] / "searches.json").read_text())
    assert 0.8 <= ledger["sg-n5-tpe"]["cpu_s"] <= 1.5
    assert all(entry["cpu_s"] < 0.3 for name, entry in ledger.items() if name != "sg-n5-tpe")


def test_a_running_search_is_in_the_ledger_before_it_ends(sg, fake, monkeypatch):
    """A search killed with the machine (no ``finally`` runs) keeps the time it had spent: its
    session is recorded while it runs, then updated in place when it ends."""
    import threading

    autoaug, written, seen = sg._autoaug, threading.Event(), []
    write_json = sg.write_json

    def recorded(path, doc):
        write_json(path, doc)
        if path.name == sg.SEARCHES_FILE:
            written.set()

    def slow(args, log):
        if args[args.index("--name") + 1] == "sg-n5-tpe":
            written.clear()
            assert written.wait(timeout=60)  # the recorder wrote the running session
            seen.append(json.loads((fake["work"] / sg.SEARCHES_FILE).read_text())["sg-n5-tpe"])
        return autoaug(args, log)

    monkeypatch.setattr(sg, "write_json", recorded)
    monkeypatch.setattr(sg, "LEDGER_EVERY_S", 0.05)
    monkeypatch.setattr(sg, "_autoaug", slow)
    assert sg.main(fake["argv"]) == 0
    (running,) = seen[0]["sessions"]
    assert not running["finished"] and not seen[0]["finished"] and running["wall_s"] >= 0
    final = json.loads((fake["work"] / sg.SEARCHES_FILE).read_text())["sg-n5-tpe"]
    assert len(final["sessions"]) == 1 and final["finished"] and final["sessions"][0]["session"] == running["session"]


def test_a_search_that_fails_stops_the_benchmark_with_one_line(sg, fake, monkeypatch):
    monkeypatch.setattr(sg, "_autoaug", lambda args, log: (1, 0.1))
    with pytest.raises(SystemExit, match="the search sg-n5-tpe failed .*re-run this command to resume it"):
        sg.main(fake["argv"])


@pytest.mark.parametrize(
    "args, message",
    [
        (["--trials", "28,x"], "--trials '28,x': expected whole numbers"),
        (["--samplers", "tpe,anneal"], "--samplers 'tpe,anneal': expected some of"),
        (["--rescore-seeds", "3"], "--rescore-seeds 3: expected 5 or more"),
        (["--preset", "nope"], "--preset 'nope': expected one of"),
        (["--methods", "density,train"], "--methods 'density,train': expected some of density, pba"),
        (["--samplers", "tpe,tpe-g60"], "or S-LABEL with a --variant LABEL (given: none)"),
        (["--variant", "G60=--grace-period 60"], "--variant 'G60=--grace-period 60': expected LABEL=ARGS"),
        (["--variant", "g60"], "--variant 'g60': expected LABEL=ARGS"),
        (["--import-runs", "/nowhere/eval_runs.csv"], "--import-runs /nowhere/eval_runs.csv: no such file"),
        (["--trials", "28", "--eval-cell", "100/tpe"], "--eval-cell '100/tpe': expected N/SAMPLER with N of --trials"),
        (["--eval-cell", "pba"], "--eval-cell 'pba': expected N/SAMPLER"),  # pba is not of --methods
    ],
)
def test_bad_options_are_refused_in_one_line(sg, fake, capsys, args, message):
    argv = [a for a in fake["argv"] if a != "--smoke"] + args
    with pytest.raises(SystemExit):
        sg.main(argv)
    assert message in capsys.readouterr().err
    assert fake["calls"]["search"] == []


def test_smoke_sets_defaults_and_an_option_given_keeps_its_value(sg, fake):
    """--smoke is a plumbing check's defaults (5 and 6 trials, K = 2): --trials or --rescore-seeds
    given with it are what runs, not silently replaced."""
    assert sg.main([*fake["argv"], "--trials", "6", "--rescore-seeds", "3"]) == 0
    names = [a[a.index("--name") + 1] for a in fake["calls"]["search"]]
    assert names == ["sg-n6-tpe", "sg-n6-random"]
    doc = json.loads((fake["out"] / "gain.json").read_text())
    assert doc["rescore_seeds"] == 3 and {cell["n"] for cell in doc["cells"].values()} == {3}


def test_a_variant_column_is_its_sampler_with_the_variants_arguments(sg, fake):
    argv = [*fake["argv"], "--samplers", "random,random-g60", "--variant", "g60=--grace-period 60"]
    assert sg.main(argv) == 0
    searches = fake["calls"]["search"]
    names = [a[a.index("--name") + 1] for a in searches]
    assert names == ["sg-n5-random", "sg-n5-random-g60", "sg-n6-random", "sg-n6-random-g60"]
    assert [a[a.index("--sampler") + 1] for a in searches] == ["random"] * 4
    assert ["--grace-period" in a for a in searches] == [False, True, False, True]
    assert searches[1][searches[1].index("--grace-period") + 1] == "60"
    doc = json.loads((fake["out"] / "gain.json").read_text())
    assert any("random-g60" in k for k in doc["cells"])
    assert "random-g60: gain" in (fake["out"] / "results.md").read_text()


def test_more_trials_than_the_preset_lift_its_time_budget(sg, tmp_path):
    import argparse

    a = argparse.Namespace(
        data="/d",
        preset="cpu",
        search_seed=0,
        smoke=False,
        address=None,
        search_args="",
        preset_trials=28,
        preset_budget=1800,
    )
    assert "time_budget_s=null" not in sg.search_args(a, tmp_path, 28, "tpe", None)
    lifted = sg.search_args(a, tmp_path, 100, "random", "sg-n28-tpe")
    assert lifted[lifted.index("--set") + 1] == "time_budget_s=null"
    assert lifted[lifted.index("--sampler") + 1] == "random" and lifted[-2:] == ["--calibration-from", "sg-n28-tpe"]


def _kept_warm_start(result: dict, found: dict, *, own: str = "runner_up", trials: int = 1) -> dict:
    """``result`` as a search that stored its warm start after re-scoring ``found`` (a trial's policy)."""
    from autoaug.policies import Policy

    tid = "t1"
    result["provenance"]["trials"] = [{"trial_id": tid, "policy": found}]
    result["provenance"]["selection"] = {
        "chosen": "transfer",
        "versus_transfer": {"own": own},
        "candidates": [
            {"kind": "transfer", "policy_hash": "w", "trial_ids": []},
            {"kind": own, "policy_hash": Policy.from_dict(found).content_hash, "trial_ids": [tid] * trials},
        ],
    }
    return result


def test_the_best_own_candidate_of_a_search_that_kept_its_warm_start_is_rebuilt_from_its_trial(sg):
    from autoaug.policies import presets

    found = presets.resolve("trivialaugment").with_base("crop").with_name("sg").to_dict()
    warm = presets.resolve("randaugment").with_base("crop").to_dict()
    result = _kept_warm_start(_result("sg-n5-tpe", "/d", warm), found)
    policy, kind = sg.challenger(result)
    assert kind == "runner_up" and policy.to_dict() == found
    # a search that stored its own candidate: nothing to add (its stored policy is the cell)
    assert (
        sg.challenger(
            {
                **result,
                "provenance": {
                    **result["provenance"],
                    "selection": {**result["provenance"]["selection"], "chosen": "runner_up"},
                },
            }
        )
        is None
    )
    # a trial whose policy hashes otherwise is not taken for the candidate
    other = _kept_warm_start(_result("s", "/d", warm), found)
    other["provenance"]["trials"][0]["policy"] = warm
    assert sg.challenger(other) is None


def test_an_assembled_best_own_candidate_is_rebuilt_as_the_union_of_its_trials(sg):
    """In the aa family the best own candidate is often the assembled policy (the best trials'
    sub-policies): rebuilt in the candidate's trial order, duplicates removed, when it hashes as
    the search recorded; a union that also holds the warm start's sub-policies is not."""
    from autoaug.policies import Policy, presets
    from autoaug.search.decide.assemble import union_policy

    warm = presets.resolve("autoaugment-imagenet").with_base("crop")
    a = Policy("t-a", 10, presets.resolve("autoaugment-cifar10").sub_policies[:5], base="crop")
    b = Policy("t-b", 10, presets.resolve("autoaugment-cifar10").sub_policies[3:8], base="crop")  # 2 shared with a
    assembled = union_policy("sg", [b, a])
    result = _result("sg-n28-tpe", "/d", warm.to_dict())
    result["provenance"]["trials"] = [
        {"trial_id": "ta", "policy": a.to_dict()},
        {"trial_id": "tb", "policy": b.to_dict()},
    ]
    result["provenance"]["selection"] = {
        "chosen": "transfer",
        "versus_transfer": {"own": "assembled"},
        "candidates": [
            {"kind": "transfer", "policy_hash": warm.content_hash, "trial_ids": []},
            {"kind": "assembled", "policy_hash": assembled.content_hash, "trial_ids": ["tb", "ta"]},
        ],
    }
    policy, kind = sg.challenger(result)
    assert kind == "assembled" and policy.content_hash == assembled.content_hash and len(policy.sub_policies) == 8
    extended = union_policy("sg", [warm, b])  # warm_start+found: its trials alone do not make it
    result["provenance"]["selection"]["versus_transfer"]["own"] = "warm_start+found"
    result["provenance"]["selection"]["candidates"][1].update(
        kind="warm_start+found", policy_hash=extended.content_hash, trial_ids=["tb"]
    )
    assert sg.challenger(result) is None


def test_a_search_that_kept_its_warm_start_reports_its_best_own_candidate_against_it(sg, fake, monkeypatch):
    from autoaug.policies import presets

    autoaug = sg._autoaug

    def kept(args, log):  # the 6-trial random search stored the warm start (randaugment on crop)
        code = autoaug(args, log)
        name = args[args.index("--resume") + 1] if "--resume" in args else args[args.index("--name") + 1]
        if name == "sg-n6-random":
            path = fake["work"] / "runs" / name / "result.json"
            result = json.loads(path.read_text())
            result["policy"] = presets.resolve("randaugment").with_base("crop").with_name(name).to_dict()
            found = presets.resolve("autoaugment-svhn").with_base("crop").with_name(name).to_dict()
            path.write_text(json.dumps(_kept_warm_start(result, found)))
        return code

    monkeypatch.setattr(sg, "_autoaug", kept)
    assert sg.main(fake["argv"]) == 0
    doc = json.loads((fake["out"] / "gain.json").read_text())
    # the warm start (2 runs), the two other stored policies (2 each), the kept search's candidate (2)
    assert len(fake["calls"]["trained"]) == 2 + 2 * 2 + 2
    search = doc["searches"]["sg-n6-random"]
    assert doc["cells"]["6/random"]["same_policy"] and search["challenger"] == "runner_up"
    assert search["challenger_gain"]["n"] == 2 and search["challenger_gain"]["mean"] == pytest.approx(0.01)
    text = (fake["out"] / "results.md").read_text()
    assert f"| `sg-n6-random` | runner_up (`{search['challenger_hash'][:12]}`) | **+1.00" in text
    assert all(doc["searches"][s]["challenger"] is None for s in ("sg-n5-tpe", "sg-n5-random", "sg-n6-tpe"))


def test_a_search_whose_calibration_used_the_budget_is_reported_as_storing_the_transfer_with_no_trial(
    sg, fake, monkeypatch
):
    """The first search's calibration left its trials no time (it stored the published policy that
    transferred best, as measured); the next, reusing those runs, chose another warm start: the
    report says both, not "the method's own" nor "not rebuilt", and names each search's warm start."""
    from autoaug.policies import presets

    autoaug = sg._autoaug

    def first_spent(args, log):
        code = autoaug(args, log)
        name = args[args.index("--name") + 1]
        path = fake["work"] / "runs" / name / "result.json"
        result = json.loads(path.read_text())
        if name == "sg-n5-tpe":  # stored its warm start, no trial, the budget ended it in calibration
            result["policy"] = presets.resolve("randaugment").with_base("crop").with_name(name).to_dict()
            result["provenance"]["counts"] = {"trials": 0, "completed": 0, "early_stopped": 0}
            result["provenance"]["budget"] = {"time_budget_s": 1800, "ended": {"stage": "calibration"}}
        else:  # measured another round: trivialaugment transferred best this time
            result["provenance"]["calibration"]["transfer"]["best"] = "trivialaugment"
        path.write_text(json.dumps(result))
        return code

    monkeypatch.setattr(sg, "_autoaug", first_spent)
    assert sg.main(fake["argv"]) == 0
    text = (fake["out"] / "results.md").read_text()
    assert "| `sg-n5-tpe` | none: no trial ran | – |" in text
    assert "| transfer, as calibration measured it (no trial ran) |" in text
    assert (
        "over its warm start (randaugment on crop (transferred best in calibration): `sg-n5-tpe`; "
        "trivialaugment on crop (transferred best in calibration): `sg-n5-random`, `sg-n6-tpe`, `sg-n6-random`)"
    ) in text


def test_trial_scores_are_each_ended_trials_scores_by_epoch_from_the_searchs_study(load_benchmark, tmp_path):
    # the benchmark's rung figure reads the same scores as a search's own rung record
    import optuna

    report = load_benchmark("search_gain_report")
    run = tmp_path / "work" / "runs" / "sg-n5-tpe"
    run.mkdir(parents=True)
    study = optuna.create_study(study_name="sg-n5-tpe", storage=f"sqlite:///{run / 'optuna.db'}")
    for state, scores in [("COMPLETE", {1: 0.1, 2: 0.25}), ("PRUNED", {1: 0.05}), ("FAIL", {1: 0.3})]:
        trial = study.ask()
        for step, score in scores.items():
            trial.report(score, step)
        study.tell(
            trial, scores[max(scores)] if state == "COMPLETE" else None, state=getattr(optuna.trial.TrialState, state)
        )
    assert report.trial_scores(tmp_path / "work", "sg-n5-tpe") == [{1: 0.1, 2: 0.25}, {1: 0.05}]
    assert report.trial_scores(tmp_path / "work", "sg-density") == []  # no study there: no trials
    # a run folder linked under the table's name to a search run under its own name: its study is
    # the one its search_config.json names
    own = tmp_path / "elsewhere" / "c10-long"
    own.parent.mkdir()
    run.rename(own)
    (own / "search_config.json").write_text(json.dumps({"config": {"name": "c10-long"}}))
    optuna.copy_study(
        from_study_name="sg-n5-tpe",
        from_storage=f"sqlite:///{own / 'optuna.db'}",
        to_storage=f"sqlite:///{own / 'copy.db'}",
        to_study_name="c10-long",
    )
    (own / "copy.db").replace(own / "optuna.db")
    run.symlink_to(own)
    assert report.trial_scores(tmp_path / "work", "sg-n5-tpe") == [{1: 0.1, 2: 0.25}, {1: 0.05}]


def test_the_race_finishes_each_search_again_from_a_copy_and_reports_what_it_stored(sg, fake, capsys):
    work, calls = fake["work"], fake["calls"]
    assert sg.main([*fake["argv"], "--race", "3"]) == 0
    resumed = [a for a in calls["search"] if "--resume" in a]
    assert [a[a.index("--resume") + 1] for a in resumed] == ["sg-n5-tpe", "sg-n5-random", "sg-n6-tpe", "sg-n6-random"]
    assert {a[a.index("--storage") + 1] for a in resumed} == {str(work / "race3" / "runs")}
    copied = json.loads((work / "race3" / "runs" / "sg-n5-random" / "search_config.json").read_text())["config"]
    assert copied["rescore_max_seeds"] == 3 and copied["storage"] == str(work / "race3" / "runs")
    assert copied["store"] == str(work / "race3" / "store")
    original = json.loads((work / "runs" / "sg-n5-random" / "search_config.json").read_text())["config"]
    assert "rescore_max_seeds" not in original  # the search itself is left as it was
    doc = json.loads((fake["out"] / "gain.json").read_text())
    assert doc["race"] == 3 and set(doc["race_cells"]) == {"5/tpe", "5/random", "6/tpe", "6/random"}
    assert all(c["n"] == 2 and c["mean"] == pytest.approx(0.01) for c in doc["race_cells"].values())
    ledger = json.loads((work / "searches.json").read_text())
    assert len(ledger["sg-n5-tpe-race3"]["sessions"]) == 1  # the replay's own time, apart from the search's
    assert "**With the re-scoring race** (`rescore_max_seeds: 3`)" in (fake["out"] / "results.md").read_text()
    # Run again: the replays are reused, nothing is trained or searched.
    calls["search"].clear()
    calls["trained"].clear()
    assert sg.main([*fake["argv"], "--race", "3"]) == 0
    assert calls["search"] == [] and calls["trained"] == []


def test_a_search_under_a_time_budget_is_not_replayed_with_the_race(sg, fake, capsys, monkeypatch):
    autoaug = sg._autoaug

    def budgeted(args, log):  # sg-n6-random ran under a budget: the race would have changed its trials
        code = autoaug(args, log)
        storage = Path(args[args.index("--storage") + 1])
        name = args[args.index("--resume") + 1] if "--resume" in args else args[args.index("--name") + 1]
        if name == "sg-n6-random":
            path = storage / name / "result.json"
            result = json.loads(path.read_text())
            result["provenance"]["search"]["config"]["time_budget_s"] = 1800
            path.write_text(json.dumps(result))
        return code

    monkeypatch.setattr(sg, "_autoaug", budgeted)
    assert sg.main([*fake["argv"], "--race", "3"]) == 0
    out = capsys.readouterr().out
    assert "race: sg-n6-random not replayed: it ran under a time budget or without re-scoring" in out
    assert not (fake["work"] / "race3" / "runs" / "sg-n6-random").exists()
    assert "6/random" not in json.loads((fake["out"] / "gain.json").read_text())["race_cells"]


def test_other_methods_get_a_row_each_against_the_first_searchs_warm_start(sg, fake):
    assert sg.main([*fake["argv"], "--methods", "density,pba"]) == 0
    searches = {a[a.index("--name") + 1]: a for a in fake["calls"]["search"]}
    for method in ("density", "pba"):
        args = searches[f"sg-{method}"]
        # its own method and preset; its proxy is not the training searches', so no calibration reused
        assert args[args.index("--method") + 1] == method and args[args.index("--preset") + 1] == "smoke"
        assert "--calibration-from" not in args and "--num-trials" not in args and "--sampler" not in args
    doc = json.loads((fake["out"] / "gain.json").read_text())
    # measured against the warm start the training searches share, with their seeds and runs:
    # the warm start's K = 2 runs are trained once; 2 stored policies of the training searches + 2
    assert len(fake["calls"]["trained"]) == 2 + 2 * 2 + 2 * 2
    warm = {c["warm_start"] for c in doc["searches"].values()}
    assert len(warm) == 1 and doc["searches"]["sg-density"]["warm_hash"] == doc["searches"]["sg-n5-tpe"]["warm_hash"]
    for method in ("density", "pba"):
        assert doc["cells"][f"0/{method}"]["n"] == 2 and doc["cells"][f"0/{method}"]["mean"] == pytest.approx(0.01)
    text = (fake["out"] / "results.md").read_text()
    assert (
        "| density | `smoke` | 5 (2 full, 3 stopped early) | **+1.00 [+1.00, +1.00]**, K=2 |" in text
        and "| pba | `smoke` |" in text
    )


def test_the_pba_row_measures_the_schedule_the_search_found_not_its_last_stage(sg, fake, monkeypatch):
    """A PBA search stores its schedule's last stage as the version's policy and the schedule in
    its provenance: what a user trains with is the schedule, so the row's K runs train it."""
    from autoaug.policies import Policy, presets
    from autoaug.policies.schedule import Schedule

    fake_search = sg._autoaug
    first = presets.resolve("autoaugment-cifar10")

    def autoaug(args, log):
        out = fake_search(args, log)
        if "--method" in args and args[args.index("--method") + 1] == "pba":
            path = Path(args[args.index("--storage") + 1]) / "sg-pba" / "result.json"
            result = json.loads(path.read_text())
            last = Policy.from_dict(result["policy"])
            schedule = Schedule("sg-pba", [(0.0, first.with_base(last.base).with_name("sg-pba")), (0.5, last)])
            result["provenance"]["method"] = {"name": "pba"}
            result["provenance"]["schedule"] = schedule.to_dict()
            path.write_text(json.dumps(result))
        return out

    trained = []
    import autoaug.search.decide.proxy_runs as proxy_runs

    fake_train = proxy_runs.train_runs

    def train_runs(runs, config, **kw):
        trained.extend(policy for _, policy, _ in runs)
        return fake_train(runs, config, **kw)

    monkeypatch.setattr(sg, "_autoaug", autoaug)
    monkeypatch.setattr(proxy_runs, "train_runs", train_runs)
    assert sg.main([*fake["argv"], "--samplers", "random", "--trials", "6", "--methods", "pba"]) == 0
    schedules = [p for p in trained if isinstance(p, Schedule)]
    assert len(schedules) == 2 and {s.content_hash for s in schedules} == {schedules[0].content_hash}
    assert schedules[0].at(0, 10).content_hash == first.with_base(schedules[0].base).content_hash  # stage 0 trained too
    doc = json.loads((fake["out"] / "gain.json").read_text())
    assert doc["searches"]["sg-pba"]["stored_hash"] == schedules[0].content_hash


def test_with_the_race_the_evaluation_takes_the_policy_the_search_stored_with_it(sg, fake, monkeypatch):
    # --race reports what the searches store with the race: --eval trains that policy, not the
    # one stored without it
    compared = []

    def compare(a, work, timings, stage, out, preset, paths, seeds, baselines=True):
        compared.append([json.loads(Path(p).read_text()) for p in paths])
        out.mkdir(parents=True, exist_ok=True)

    monkeypatch.setattr(sg, "_compare", compare)
    monkeypatch.setattr(sg, "_read_runs", lambda folder: [])
    seeds = {"sg-n6-random-race3.json": {"seeds": {0: 0.6, 1: 0.61}}, "warm-start.json": {"seeds": {0: 0.59, 1: 0.6}}}
    monkeypatch.setattr(sg, "summarize", lambda runs: seeds)
    assert sg.main([*fake["argv"], "--samplers", "random", "--trials", "6", "--race", "3", "--eval"]) == 0
    from autoaug.policies import Policy, presets

    ((mine, warm),) = compared
    raced = presets.resolve("autoaugment-svhn").with_base("crop")
    assert Policy.from_dict(mine).content_hash == raced.content_hash  # not trivialaugment, stored without it
    assert mine["name"] == "sg-n6-random-race3" and warm["name"] == "warm-start"
    doc = json.loads((fake["out"] / "gain.json").read_text())
    assert doc["eval"]["role"] == "race" and doc["eval"]["paired"]["mean"] == pytest.approx(0.01)
    assert "(the policy stored with the race of the best cell)" in (fake["out"] / "results.md").read_text()


def test_the_evaluation_reuses_an_earlier_benchmarks_runs_of_its_policies_before_training(
    sg, fake, monkeypatch, tmp_path
):
    """--import-runs CSV: the evaluated policies' runs recorded by an earlier benchmark (e.g. the
    warm start's, by search_quality.py) are written into the evaluation's folder before compare
    runs, so compare trains only what they lack."""
    events = []
    csv_path = tmp_path / "eval_runs.csv"
    csv_path.write_text("policy,seed\n")

    def imported(a, path, out, preset, policies):
        events.append(("import", path, out, preset, [json.loads(Path(p).read_text())["name"] for p in policies]))
        return 0

    def compare(a, work, timings, stage, out, preset, paths, seeds, baselines=True):
        events.append(("compare", out))
        out.mkdir(parents=True, exist_ok=True)

    monkeypatch.setattr(sg, "import_runs", imported)
    monkeypatch.setattr(sg, "_compare", compare)
    monkeypatch.setattr(sg, "_read_runs", lambda folder: [])
    seeds = {"sg-n6-random.json": {"seeds": {0: 0.6, 1: 0.61}}, "warm-start.json": {"seeds": {0: 0.59, 1: 0.6}}}
    monkeypatch.setattr(sg, "summarize", lambda runs: seeds)
    argv = [*fake["argv"], "--samplers", "random", "--trials", "6", "--eval", "--import-runs", str(csv_path)]
    assert sg.main(argv) == 0
    (kind, path, out, preset, names), (then, compared) = events
    assert kind == "import" and then == "compare" and out == compared == fake["work"] / "eval"
    assert path == csv_path and preset[:2] == ["--preset", "smoke"]
    assert names == ["sg-n6-random", "warm-start"]


def test_eval_cell_evaluates_that_cells_policy_instead_of_the_best_cells(sg, fake, monkeypatch):
    """--eval-cell pba: the PBA row's policy (here not the best cell) against the warm start."""
    compared = []

    def compare(a, work, timings, stage, out, preset, paths, seeds, baselines=True):
        compared.append([json.loads(Path(p).read_text())["name"] for p in paths])
        out.mkdir(parents=True, exist_ok=True)

    monkeypatch.setattr(sg, "_compare", compare)
    monkeypatch.setattr(sg, "_read_runs", lambda folder: [])
    seeds = {"sg-pba.json": {"seeds": {0: 0.6, 1: 0.61}}, "warm-start.json": {"seeds": {0: 0.59, 1: 0.6}}}
    monkeypatch.setattr(sg, "summarize", lambda runs: seeds)
    argv = [*fake["argv"], "--samplers", "random", "--trials", "6", "--methods", "pba", "--eval-cell", "pba"]
    assert sg.main(argv) == 0
    assert compared == [["sg-pba", "warm-start"]]
    doc = json.loads((fake["out"] / "gain.json").read_text())
    assert doc["eval"]["cell"] == [0, "pba"] and doc["eval"]["chosen"] is True
    assert "(the stored policy of the cell chosen with --eval-cell)" in (fake["out"] / "results.md").read_text()
