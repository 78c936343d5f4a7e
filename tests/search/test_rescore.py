"""Choosing the stored policy among the final candidates: their re-scoring runs and the choice."""

from __future__ import annotations

import pytest

from autoaug.policies import Policy
from autoaug.search.decide.rescore import Candidate, choose


def _candidates():
    assembled = Candidate(
        "assembled", Policy("a", 10, [[("Rotate", 0.7, 2)], [("Invert", 0.1, 0)]]), ("t1", "t2"), None
    )
    best = Candidate("best_trial", Policy("b", 10, [[("Rotate", 0.7, 2)]]), ("t1",), 0.61)
    return assembled, best


def test_the_higher_rescored_validation_accuracy_wins_and_every_score_is_recorded():
    assembled, best = _candidates()
    chosen, record = choose(
        [assembled, best], {assembled.key: {"val_accuracy": 0.55}, best.key: {"val_accuracy": 0.58}}
    )
    assert chosen is best and record["chosen"] == "best_trial"
    assert [c["val_accuracy"] for c in record["candidates"]] == [0.55, 0.58]
    assert record["candidates"][1]["trial_score"] == 0.61  # the trial's own (optimistic) score is kept apart


def test_a_tie_goes_to_the_assembled_policy_and_a_missing_score_never_wins():
    assembled, best = _candidates()
    chosen, _ = choose([assembled, best], {assembled.key: {"val_accuracy": 0.58}, best.key: {"val_accuracy": 0.58}})
    assert chosen is assembled
    chosen, _ = choose([assembled, best], {best.key: {"val_accuracy": 0.1}})
    assert chosen is best


def _rescore_config(**overrides):
    from autoaug.search.config import SearchConfig

    return SearchConfig.from_dict({"preset": "cpu", "name": "r", "data": "unused.parquet", **overrides})


def test_rescore_runs_keep_the_proxy_recipe_with_fresh_seeds_and_validate_only_the_scored_epochs():
    config = _rescore_config(rescore_seeds=3, rescore_val_size=10_000)
    runs = [config.rescore_train_config(i) for i in range(3)]
    assert [r.seed for r in runs] == [1000, 1001, 1002]  # seeds no trial used
    assert {(r.val_size, r.max_val_size) for r in runs} == {(10_000, None)}  # replaces the preset's cap
    assert {r.eval_from for r in runs} == {config.epochs - config.score_window + 1}  # the 5 scored epochs
    same = {"model", "train_size", "split_seed", "epochs", "batch_size", "lr", "weight_decay", "warmup_epochs", "data"}
    assert all(getattr(r, f) == getattr(config.train, f) for r in runs for f in same)
    own = _rescore_config(rescore_val_size=None).rescore_train_config()
    assert (own.val_size, own.max_val_size) == (config.train.val_size, config.train.max_val_size)  # the trials' own


def test_a_larger_rescoring_validation_set_keeps_the_trials_training_images():
    import numpy as np

    from autoaug.proxy_models.splits import reduced_split

    rng = np.random.default_rng(5)
    for labels in (np.repeat(np.arange(10), 500), rng.choice(7, size=3_000, p=[0.3, 0.2, 0.15, 0.1, 0.1, 0.1, 0.05])):
        proxy = reduced_split(labels, train_size=400, val_size=100, seed=3)
        wide = reduced_split(labels, train_size=400, val_size=2_000, seed=3)
        assert np.array_equal(proxy.train, wide.train)
        assert np.isin(proxy.val, wide.val).all() and not np.isin(wide.val, wide.train).any()


def test_a_candidates_rescore_is_the_mean_of_its_runs_and_waits_for_all_of_them():
    from autoaug.search.config import METRIC
    from autoaug.search.decide.rescore import candidate_scores, run_key

    config = _rescore_config(rescore_seeds=2, rescore_val_size=5_000)
    assembled, best = _candidates()
    cfg0, cfg1 = config.rescore_train_config(0), config.rescore_train_config(1)
    runs = {
        run_key(assembled, cfg0): {
            METRIC: 0.60,
            "val_accuracy": 0.61,
            "seed": 1000,
            "val_size": 5000,
            "train_time_s": 10,
        },
        run_key(assembled, cfg1): {
            METRIC: 0.58,
            "val_accuracy": 0.57,
            "seed": 1001,
            "val_size": 5000,
            "train_time_s": 12,
        },
        run_key(best, cfg0): {METRIC: 0.65, "val_accuracy": 0.65, "seed": 1000, "val_size": 5000, "train_time_s": 9},
    }
    scores = candidate_scores([assembled, best], config, runs)
    assert list(scores) == [assembled.key]  # best_trial's second run is missing: no score yet
    assert scores[assembled.key][METRIC] == pytest.approx(0.59)
    assert [r["seed"] for r in scores[assembled.key]["runs"]] == [1000, 1001]
    runs[run_key(best, cfg1)] = {METRIC: 0.51, "val_accuracy": 0.5, "seed": 1001, "val_size": 5000, "train_time_s": 9}
    chosen, record = choose([assembled, best], candidate_scores([assembled, best], config, runs))
    assert chosen is assembled  # 0.59 against 0.58: one lucky run of best_trial does not win
    assert record["candidates"][1][METRIC] == pytest.approx(0.58)
    # Runs of another protocol (a different validation size) are not taken for this one.
    assert candidate_scores([assembled, best], _rescore_config(rescore_seeds=2, rescore_val_size=None), runs) == {}


def test_a_candidate_measured_already_is_scored_by_its_own_runs_and_not_trained_again():
    import dataclasses

    from autoaug.search.config import METRIC
    from autoaug.search.decide.rescore import candidate_scores, missing_runs

    config = _rescore_config(rescore_seeds=2)
    assembled, best = _candidates()
    measured = dataclasses.replace(
        best, kind="transfer", runs=({METRIC: 0.7, "seed": 2000}, {METRIC: 0.6, "seed": 2001})
    )
    assert missing_runs([assembled, measured], config, {}) == 2  # assembled's two; none for the measured one
    scores = candidate_scores([assembled, measured], config, {})
    assert list(scores) == [measured.key] and scores[measured.key][METRIC] == pytest.approx(0.65)
    assert [r["seed"] for r in scores[measured.key]["runs"]] == [2000, 2001]


def test_rescore_files_of_the_first_format_are_read_as_one_run_at_the_proxys_validation_size():
    from autoaug.search.config import METRIC
    from autoaug.search.decide.rescore import candidate_scores

    assembled, best = _candidates()
    legacy = {
        assembled.key: {METRIC: 0.61, "val_accuracy": 0.6, "seed": 1000},
        best.key: {METRIC: 0.6, "val_accuracy": 0.6, "seed": 1000},
    }
    scores = candidate_scores([assembled, best], _rescore_config(rescore_seeds=1, rescore_val_size=None), legacy)
    assert scores[assembled.key][METRIC] == 0.61 and scores[best.key][METRIC] == 0.6
    assert candidate_scores([assembled, best], _rescore_config(rescore_seeds=1, rescore_val_size=5_000), legacy) == {}


def test_the_search_score_is_preferred_over_the_last_epochs_accuracy():
    from autoaug.search.config import METRIC

    assembled, best = _candidates()
    scores = {assembled.key: {METRIC: 0.60, "val_accuracy": 0.55}, best.key: {METRIC: 0.57, "val_accuracy": 0.58}}
    chosen, record = choose([assembled, best], scores)
    assert chosen is assembled
    assert [c[METRIC] for c in record["candidates"]] == [0.60, 0.57]


# ---------------------------------------------------------------- the final candidates
WARM = Policy(
    "warm",
    10,
    [
        [("Rotate", 0.7, 2), ("Invert", 0.1, 0)],
        [("Color", 0.4, 9), ("Equalize", 1.0, 3)],
        [("Cutout", 0.5, 5), ("Posterize", 0.3, 4)],
        [("ShearX", 0.2, 7), ("Solarize", 0.6, 1)],
    ],
)
FOUND_A = [[("TranslateX", 0.9, 4), ("Brightness", 0.6, 8)], [("Sharpness", 0.3, 1), ("AutoContrast", 0.5, 0)]]
FOUND_B = [[("Contrast", 0.2, 6), ("ShearY", 0.8, 3)], [("Rotate", 0.7, 2), ("Invert", 0.1, 0)]]


def _final_candidates_for(tmp_path, ranked_subs, epochs=None):
    """_final_candidates of a search warm-started from WARM whose trials ranked as given
    (``epochs``: how many epochs each trial ran; default all the budget of 2)."""
    from autoaug.search.config import SearchConfig
    from autoaug.search.decide.assemble import TrialRecord, assemble_policy
    from autoaug.search.methods.train.method import final_candidates as _final_candidates

    (tmp_path / "warm.json").write_text(WARM.to_json())
    config = SearchConfig.from_dict(
        {
            "preset": "smoke",
            "name": "cands",
            "data": "unused.parquet",
            "top_n": 3,
            "space": {"num_sub_policies": 2},
            "warm_start": [str(tmp_path / "warm.json")],
            "rescore": True,
            "storage": str(tmp_path / "runs"),
            "store": str(tmp_path / "store"),
        }
    )
    trials = [
        TrialRecord(
            f"t{i}",
            i,
            "completed",
            {},
            config.space.to_policy(config.space.to_params(Policy(f"p{i}", 10, subs)), name=f"p{i}"),
            0.9 - 0.1 * i,
            epochs=(epochs or [2] * len(ranked_subs))[i],
        )
        for i, subs in enumerate(ranked_subs)
    ]
    assert config.epochs == 2 and config.method_config.early_stopping
    assembled = assemble_policy(trials, name="cands", top_n=3)
    return _final_candidates(config, trials, assembled)


def test_a_warm_started_search_also_offers_the_warm_start_extended_by_the_found_trials(tmp_path):
    # Ranked: a found trial, a warm-start chunk, another found trial (its second sub-policy is
    # also WARM's first), and a found trial outside the top 3.
    ranked = [
        FOUND_A,
        WARM.sub_policies[2:],
        FOUND_B,
        [[("Equalize", 0.1, 0), ("Color", 0.3, 3)], [("Invert", 0.2, 0), ("Solarize", 0.9, 8)]],
    ]
    cands = _final_candidates_for(tmp_path, ranked, epochs=[2, 2, 2, 1])  # the 4th was stopped early
    assert [c.kind for c in cands] == ["assembled", "best_trial", "warm_start+found"]
    extended = cands[2]
    assert extended.trial_ids == ("t0", "t2")  # the selected trials that are not warm-start candidates
    as_lists = [[(op.op, op.probability, op.magnitude_bin) for op in sub] for sub in extended.policy.sub_policies]
    warm_lists = [[(op.op, op.probability, op.magnitude_bin) for op in sub] for sub in WARM.sub_policies]
    # WARM's four sub-policies first, then the found ones; the duplicate of WARM's first is dropped.
    assert as_lists == warm_lists + [list(s) for s in FOUND_A] + [list(FOUND_B[0])]


def test_no_extended_candidate_when_the_search_found_nothing_better_than_the_warm_start(tmp_path):
    cands = _final_candidates_for(tmp_path, [WARM.sub_policies[:2], WARM.sub_policies[2:]])
    # Only warm-start chunks were selected: the assembled policy is the warm start itself; no third candidate.
    assert [c.kind for c in cands] == ["assembled", "best_trial"]


def test_survivors_assembles_every_trial_that_ran_the_full_budget_when_more_than_top_n_did(tmp_path):
    other = [[("Equalize", 0.1, 0), ("Color", 0.3, 3)], [("Invert", 0.2, 0), ("Solarize", 0.9, 8)]]
    stopped = [[("ShearY", 0.4, 4), ("Brightness", 0.1, 2)], [("Sharpness", 0.6, 6), ("Contrast", 0.9, 1)]]
    # Ranked: 4 trials ran both epochs (top_n is 3), one was stopped after its first.
    cands = _final_candidates_for(
        tmp_path, [FOUND_A, WARM.sub_policies[2:], FOUND_B, other, stopped], epochs=[2, 2, 2, 2, 1]
    )
    assert [c.kind for c in cands] == ["assembled", "best_trial", "warm_start+found", "survivors"]
    survivors = cands[3]
    assert survivors.trial_ids == ("t0", "t1", "t2", "t3")  # the stopped trial is left out
    subs = [tuple((op.op, op.probability, op.magnitude_bin) for op in sub) for sub in survivors.policy.sub_policies]
    # The assembled policy's sub-policies (duplicates removed), then the fourth survivor's.
    assert subs[: len(cands[0].policy.sub_policies)] == [
        tuple((op.op, op.probability, op.magnitude_bin) for op in sub) for sub in cands[0].policy.sub_policies
    ]
    assert subs[len(cands[0].policy.sub_policies) :] == [tuple(sub) for sub in other]
    # With no more survivors than top_n, it would equal the assembled policy: not offered.
    fewer = _final_candidates_for(tmp_path, [FOUND_A, WARM.sub_policies[2:], FOUND_B, other], epochs=[2, 2, 2, 1])
    assert "survivors" not in [c.kind for c in fewer]


def test_the_unions_take_the_best_trials_that_fit_in_one_policy(tmp_path, monkeypatch):
    # A search of many thousand trials whose survivors (or warm start plus found trials) hold more
    # sub-policies than a policy may: each union keeps the best trials that fit, so the search still
    # stores a policy. The limit made small here (8 sub-policies; the trials hold 2 each).
    import autoaug.search.methods.train.method as train_method

    monkeypatch.setattr(train_method, "MAX_SUB_POLICIES", 8)
    other = [[("Equalize", 0.1, 0), ("Color", 0.3, 3)], [("Invert", 0.2, 0), ("Solarize", 0.9, 8)]]
    last = [[("ShearY", 0.4, 4), ("Brightness", 0.1, 2)], [("Sharpness", 0.6, 6), ("Contrast", 0.9, 1)]]
    cands = _final_candidates_for(tmp_path, [FOUND_A, WARM.sub_policies[2:], FOUND_B, other, last])
    by_kind = {c.kind: c for c in cands}
    assert by_kind["survivors"].trial_ids == ("t0", "t1", "t2", "t3")  # 5 survived; the best 4 fit
    assert len(by_kind["survivors"].policy.sub_policies) <= 8
    assert by_kind["warm_start+found"].trial_ids == ("t0", "t2")  # WARM's 4 + 2 x 2
    monkeypatch.setattr(train_method, "MAX_SUB_POLICIES", 6)
    by_kind = {c.kind: c for c in _final_candidates_for(tmp_path, [FOUND_A, WARM.sub_policies[2:], FOUND_B, other])}
    assert by_kind["warm_start+found"].trial_ids == ("t0",)  # room for one found trial beside WARM's 4
    assert len(by_kind["warm_start+found"].policy.sub_policies) == 6
    assert "survivors" not in by_kind  # the 3 that fit are the assembled policy's
    monkeypatch.setattr(train_method, "MAX_SUB_POLICIES", 3)  # WARM alone holds more: no room beside it
    kinds = [c.kind for c in _final_candidates_for(tmp_path, [FOUND_A, WARM.sub_policies[2:], FOUND_B, other])]
    assert "warm_start+found" not in kinds and kinds[:2] == ["assembled", "best_trial"]


def test_search_score_is_the_mean_of_the_last_validated_epochs():
    from autoaug.search.score import search_score

    assert search_score([], 5) is None and search_score([None, None], 3) is None
    assert search_score([0.2, None, 0.4, 0.6], 1) == 0.6
    assert search_score([0.2, None, 0.4, 0.6], 2) == pytest.approx(0.5)
    assert search_score([0.3, 0.6], 5) == pytest.approx(0.45)  # fewer epochs than the window: all of them


def _scored(value, correct, n=200):
    """A candidate's re-score with one run whose first ``correct`` of ``n`` images are right."""
    import numpy as np

    from autoaug.search.config import METRIC
    from autoaug.search.decide.noise import IMAGE_SCORES, encode_image_scores

    counts = np.zeros(n, dtype=np.uint8)
    counts[:correct] = 1
    run = {"seed": 1000, METRIC: value, "val_accuracy": value, IMAGE_SCORES: encode_image_scores(counts, 1, "v")}
    return {METRIC: value, "val_accuracy": value, "runs": [run]}


def test_the_stored_policys_margin_over_the_best_published_policy_is_measured_and_said():
    from autoaug.search.decide.rescore import describe_selection

    assembled, best = _candidates()
    transfer = Candidate("transfer", Policy("t", 10, [[("Color", 0.5, 4)]]), (), None)
    candidates = [assembled, best, transfer]
    # 0.5 points on 200 images: one image. Within the noise; the record keeps no per-image scores.
    scores = {assembled.key: _scored(0.805, 161), best.key: _scored(0.79, 158), transfer.key: _scored(0.80, 160)}
    chosen, record = choose(candidates, scores)
    versus = record["versus_transfer"]
    assert chosen is assembled and versus["own"] == "assembled" and not versus["beyond"]
    assert versus["margin"] == pytest.approx(0.005) and versus["threshold"] > 0.005
    assert all("image_scores" not in r for c in record["candidates"] for r in c["runs"])
    (line,) = describe_selection(record, "28 trials")
    half = versus["threshold"] * 100
    assert line.startswith(
        f"stored policy vs the best published policy: +0.50 [{0.5 - half:+.2f}, {0.5 + half:+.2f}] points after "
        "28 trials (95% interval, twice the standard error; "
    )
    assert line.endswith("within the noise: the search found nothing measurably better than the published policy")
    # The time budget ended the race with two still within the noise: said, with what would decide it.
    cut = {"max_seeds": 10, "rounds": [{}, {}], "ended": "budget"}
    cut["contenders"] = [{"kind": "assembled", "runs": 3}, {"kind": "transfer", "runs": 4}]
    assert describe_selection({**record, "race": cut})[1] == (
        "the time budget ended the re-scoring race after 2 round(s) with assembled (3 runs), transfer (4 runs) "
        "within the noise of each other: stored the higher mean; a longer --time-budget (or none) lets the race "
        "run up to 10 runs each to tell them apart"
    )
    # ... not when the race ran its most runs, or left one alone ahead
    for race in ({**cut, "ended": "max_seeds"}, {**cut, "contenders": cut["contenders"][:1]}):
        assert len(describe_selection({**record, "race": race})) == 1
    # 20 points: beyond it.
    scores[assembled.key] = _scored(0.99, 198)
    scores[transfer.key] = _scored(0.79, 158)
    chosen, record = choose(candidates, scores)
    assert record["versus_transfer"]["beyond"]
    (line,) = describe_selection(record)
    assert line.startswith("stored policy vs the best published policy: +20.00 [+") and line.endswith(
        "beyond the noise"
    )
    low = float(line.split("[")[1].split(",")[0])
    assert 0 < low < 20  # beyond the noise: the interval excludes 0
    # The published policy stored: none of the search's own candidates beat it.
    scores[transfer.key] = _scored(0.995, 199)
    chosen, record = choose(candidates, scores)
    assert chosen is transfer
    (line,) = describe_selection(record)
    assert line.startswith(
        "none of the search's own candidates beat the best published policy beyond the noise: stored it; the best "
        "of them (assembled) re-scored -0.50 ["
    )
    assert line.endswith(", within the noise")
    # The calibration's repeated runs measured the per-run part: it is pooled in (same data, same proxy).
    scores[transfer.key] = _scored(0.80, 160)
    calibration = {
        "base": {"noise": {"measured_training": 0.01, "df": 3}},
        "transfer": {"noise": {"measured_training": 0.02, "df": 1}},
    }
    alone = choose(candidates, scores)[1]["versus_transfer"]["noise"]
    pooled = choose(candidates, scores, calibration)[1]["versus_transfer"]["noise"]
    assert alone["df"] == 0 and pooled["df"] == 4
    assert pooled["measured_training"] == pytest.approx(((3 * 0.01**2 + 0.02**2) / 4) ** 0.5)
    # ... but not from calibration runs of another schedule (30 epochs against the trials' 120):
    # a shorter run's seed-to-seed spread is its own.
    for key in (assembled.key, transfer.key):
        scores[key]["runs"][0]["epochs"] = 120
    same = choose(candidates, scores, {**calibration, "epochs": 120})[1]["versus_transfer"]["noise"]
    other = choose(candidates, scores, {**calibration, "epochs": 30})[1]["versus_transfer"]["noise"]
    assert same["df"] == 4 and other["df"] == 0
    # No transfer candidate: nothing to say.
    assert describe_selection(choose([assembled, best], scores)[1]) == []


# ----------------------------------------------------------------------------------------------
# The re-scoring race (Ray replaced: a run's score is its candidate's plus its seed's luck)


def _racing(scores_by_kind, luck=None, *, measured=None, **overrides):
    """``(config, candidates, runs after the first round, train, trained)``: candidates named by
    ``scores_by_kind`` whose run with seed s scores ``score + luck.get(s, 0)`` on 5,000 images;
    ``measured``: a ``transfer`` candidate's calibration scores; ``trained`` receives every run
    the fake ``train`` had to train, as ``(kind, seed)``."""
    from autoaug.search.config import METRIC
    from autoaug.search.decide.rescore import candidate_scores, first_count, run_key

    config = _rescore_config(**{"rescore_seeds": 1, "rescore_max_seeds": 3, **overrides})
    luck = luck or {}
    candidates = [
        Candidate(kind, Policy(kind, 10, [[("Rotate", 0.1 * (i + 1), 3)]]), (), None)
        for i, kind in enumerate(scores_by_kind)
    ]
    if measured is not None:
        runs = tuple({METRIC: s, "val_accuracy": s, "seed": 2000 + i, "val_size": 5000} for i, s in enumerate(measured))
        transfer = Candidate("transfer", Policy("t", 10, [[("Invert", 0.5, 0)]]), (), None, runs)
        candidates.append(transfer)
        scores_by_kind = {**scores_by_kind, "transfer": sum(measured) / len(measured)}
    trained = []

    def train(more, counts, saved):
        out = dict(saved)
        for c in more:
            for i in range(counts[c.key] - len(c.runs)):
                cfg = config.rescore_train_config(i)
                key = run_key(c, cfg)
                if key not in out:
                    trained.append((c.kind, cfg.seed))
                    s = scores_by_kind[c.kind] + luck.get(cfg.seed, 0.0)
                    out[key] = {METRIC: s, "val_accuracy": s, "seed": cfg.seed, "val_size": 5000}
        return out

    first = train(candidates, {c.key: first_count(c, config) for c in candidates}, {})
    trained.clear()
    assert len(candidate_scores(candidates, config, first)) == len(candidates)
    return config, candidates, first, train, trained


def test_a_lead_beyond_the_noise_on_one_run_is_confirmed_on_a_second_beside_its_nearest_challenger():
    from autoaug.search.decide.rescore import race

    config, candidates, runs, train, trained = _racing({"assembled": 0.70, "far_below": 0.50, "runner_up": 0.60})
    lines = []
    counts, _, record = race(candidates, config, runs, train=train, say=lines.append)
    # one round: the leader and the nearest by mean (runner_up, not far_below), on the same seed
    assert trained == [("assembled", 1001), ("runner_up", 1001)]
    assert record == {
        "max_seeds": 3,
        "rounds": [{"trained": ["assembled", "runner_up"], "leader": "assembled", "confirm": True}],
        "ended": "decided",
        "contenders": [{"kind": "assembled", "runs": 2}],  # alone ahead, on two runs
    }
    assert [counts[c.key] for c in candidates] == [2, 1, 2]
    assert len(lines) == 1
    assert lines[0].startswith("re-scoring race, round 1: assembled leads beyond the noise on one run (a run's spread ")
    assert lines[0].endswith(
        "assembled 0.7000 (1), runner_up 0.6000 (1); one more run for assembled, runner_up: a lead measured on "
        "one run is confirmed on a second"
    )
    # A lead on two runs or more needs no confirmation; nor does one where no round fits.
    config2, candidates2, runs2, train2, trained2 = _racing({"assembled": 0.70, "runner_up": 0.60}, rescore_seeds=2)
    _, _, record2 = race(candidates2, config2, runs2, train=train2)
    assert trained2 == [] and record2["rounds"] == [] and record2["ended"] == "decided"
    _, _, record3 = race(candidates, config, runs, train=train, fits=lambda n: False)
    assert record3["rounds"] == [] and record3["ended"] == "decided"


def test_a_lucky_one_run_lead_the_second_run_does_not_confirm_races_on():
    """What a single run's luck did on GTSRB: a lead beyond the noise on one run, within it once
    the leader has a second."""
    from autoaug.search.config import METRIC
    from autoaug.search.decide.rescore import race

    config, candidates, runs, train, trained = _racing({"assembled": 0.600, "runner_up": 0.605, "far_below": 0.55})
    runs[next(k for k in runs if k.startswith("assembled"))][METRIC] = 0.640  # its first run: lucky
    counts, _, record = race(candidates, config, runs, train=train)
    assert record["rounds"][0] == {"trained": ["assembled", "runner_up"], "leader": "assembled", "confirm": True}
    assert len(record["rounds"]) == 2 and "confirm" not in record["rounds"][1]  # then an ordinary round
    assert record["ended"] == "max_seeds"
    assert [c["kind"] for c in record["contenders"]] == ["assembled", "runner_up"]  # within the noise: said so


def test_candidates_within_the_noise_race_on_the_same_seeds_until_the_most_runs_and_the_best_mean_wins():
    from autoaug.search.config import METRIC
    from autoaug.search.decide.rescore import candidate_scores, race

    # runner_up is 0.4 points better; its first run was unlucky against assembled's (seed 1000).
    config, candidates, runs, train, trained = _racing(
        {"assembled": 0.600, "runner_up": 0.604, "far_below": 0.55}, luck={1000: 0.0}
    )
    runs[next(k for k in runs if k.startswith("runner_up"))][METRIC] = 0.598
    assembled, runner_up, far = candidates
    lines = []
    counts, runs, record = race(candidates, config, runs, train=train, say=lines.append)
    # far_below, 5 points under, is out from the start; the two others get seeds 1001 and 1002
    # (each round's leader first: runner_up leads after seed 1001).
    assert trained == [("assembled", 1001), ("runner_up", 1001), ("runner_up", 1002), ("assembled", 1002)]
    assert counts == {assembled.key: 3, runner_up.key: 3, far.key: 1}
    assert record["ended"] == "max_seeds"
    # where it ended: both still within the noise, the leader first, with their runs
    assert record["contenders"] == [{"kind": "runner_up", "runs": 3}, {"kind": "assembled", "runs": 3}]
    assert [r["trained"] for r in record["rounds"]] == [["assembled", "runner_up"], ["runner_up", "assembled"]]
    assert record["rounds"][0]["leader"] == "assembled" and record["rounds"][1]["leader"] == "runner_up"
    # one line a round, numbered; the first: who leads, a run's spread, the scores and who runs again
    assert [line.split(":")[0] for line in lines] == [f"re-scoring race, round {n}" for n in (1, 2)]
    assert lines[0].split(": ", 1)[1].startswith("within the noise of assembled (a run's spread ")
    assert lines[0].endswith("assembled 0.6000 (1), runner_up 0.5980 (1); one more run for assembled, runner_up")
    scores = candidate_scores(candidates, config, runs, counts)
    chosen, selection = choose(candidates, scores, race=record)
    assert chosen is runner_up and selection["race"] == record  # one unlucky run no longer decides
    assert [r["seed"] for r in selection["candidates"][1]["runs"]] == [1000, 1001, 1002]
    assert len(selection["candidates"][2]["runs"]) == 1


def test_a_measured_candidates_calibration_runs_count_toward_its_most_runs():
    from autoaug.search.decide.rescore import race

    config, candidates, runs, train, trained = _racing({"runner_up": 0.601}, measured=[0.600, 0.600])
    counts, _, record = race(candidates, config, runs, train=train)
    # transfer has 2 calibration runs: one more (the first re-scoring seed); runner_up two more.
    assert trained == [("runner_up", 1001), ("transfer", 1000), ("runner_up", 1002)]
    assert [c.kind for c in candidates] == ["runner_up", "transfer"]
    assert list(counts.values()) == [3, 3] and record["ended"] == "max_seeds"


def test_a_resumed_race_replays_its_saved_rounds_and_trains_only_what_they_lack():
    from autoaug.search.decide.rescore import race

    config, candidates, runs, train, trained = _racing({"assembled": 0.600, "runner_up": 0.601})
    done_counts, done_runs, done = race(candidates, config, runs, train=train)
    assert len(trained) == 4
    trained.clear()
    partial = {k: v for k, v in done_runs.items() if "seed=1002" not in k or k.startswith("assembled")}
    counts, _, record = race(candidates, config, partial, train=train)
    assert trained == [("runner_up", 1002)] and (counts, record) == (done_counts, done)


def test_the_race_stops_where_its_next_round_does_not_fit_or_was_cut_by_the_deadline():
    from autoaug.search.decide.rescore import race

    config, candidates, runs, train, trained = _racing({"assembled": 0.600, "runner_up": 0.601})
    asked = []
    counts, _, record = race(candidates, config, runs, train=train, fits=lambda n: asked.append(n) or False)
    assert asked == [2] and trained == [] and record["ended"] == "budget" and set(counts.values()) == {1}
    assert [c["kind"] for c in record["contenders"]] == ["runner_up", "assembled"]  # left undecided

    def cut(more, counts, saved):  # the deadline cancelled the round's second run
        out = train(more, counts, saved)
        return {k: v for k, v in out.items() if not k.startswith("runner_up") or "seed=1001" not in k}

    counts, _, record = race(candidates, config, runs, train=cut)
    left = [{"kind": "runner_up", "runs": 1}, {"kind": "assembled", "runs": 1}]  # the cut round not counted
    assert record == {"max_seeds": 3, "rounds": [], "ended": "budget", "contenders": left}
    assert set(counts.values()) == {1}


def test_a_round_the_time_left_does_not_fit_runs_for_the_leader_and_its_nearest_challengers():
    """Four candidates within the noise, time for two runs a round: the leader and the nearest by
    mean run (not the next in the method's order), the line says so; once they have their most
    runs, the others get theirs."""
    from autoaug.search.decide.rescore import race

    config, candidates, runs, train, trained = _racing(
        {"assembled": 0.600, "best_trial": 0.599, "warm_start": 0.6015, "survivors": 0.6005}
    )
    asked, lines = [], []
    counts, _, record = race(
        candidates, config, runs, train=train, fits=lambda n: asked.append(n) or n <= 2, say=lines.append
    )
    assert asked[:3] == [4, 3, 2]
    assert [r["trained"] for r in record["rounds"]] == [
        ["warm_start", "survivors"],
        ["warm_start", "survivors"],
        ["assembled", "best_trial"],  # the two at their most runs: the next two
        ["assembled", "best_trial"],
    ]
    assert lines[0].endswith(
        "one more run for warm_start, survivors (the time left fits 2 of the 4 runs: the leader's nearest "
        "challengers first)"
    )
    assert set(counts.values()) == {3} and record["ended"] == "max_seeds"
    # No time even for the leader and one challenger: the race ends there.
    counts, _, record = race(candidates, config, runs, train=train, fits=lambda n: n <= 1)
    assert record["ended"] == "budget" and record["rounds"] == []


def test_no_race_without_more_seeds_than_the_first_round():
    from autoaug.search.config import SearchConfig

    assert _rescore_config(rescore_max_seeds=None).race_seeds == 1
    assert _rescore_config(rescore_seeds=12).race_seeds == 12  # --rescore-seeds 12 over the cpu preset's 10
    assert SearchConfig.from_preset("smoke", name="r").race_seeds == 1
    assert _rescore_config().race_seeds == 10  # the cpu preset races


def test_the_summary_says_what_the_race_did():
    from autoaug.search.records import rescored_line

    def cand(kind, seeds, score):
        runs = [{"seed": s, "search_score": score} for s in seeds]
        return {"kind": kind, "num_sub_policies": 3, "search_score": score, "val_size": 5000, "runs": runs}

    selection = {
        "chosen": "runner_up",
        "candidates": [cand("assembled", [1000, 1001, 1002], 0.6), cand("runner_up", [1000, 1001, 1002], 0.61)],
        "race": {"max_seeds": 3, "rounds": [{"trained": ["assembled", "runner_up"]}] * 2, "ended": "max_seeds"},
    }
    assert rescored_line(selection) == (
        "re-scored under the proxy (mean over seeds 1000, 1001, 1002, 5000 validation images): assembled "
        "(3 sub-policies) 0.6000, runner_up (3 sub-policies) 0.6100; stored: runner_up (race up to 3 runs each: "
        "2 rounds for the candidates within the noise of the leader; ended as every contender had its most runs)"
    )
    confirmed = [{"trained": ["runner_up", "assembled"], "confirm": True}]
    selection["race"] = {"max_seeds": 3, "rounds": confirmed, "ended": "decided"}
    assert rescored_line(selection).endswith(
        "(race up to 3 runs each: a round confirming a lead measured on one run; ended as one led beyond the noise)"
    )
    selection["race"] |= {"rounds": [{"confirm": True}, {}], "ended": "max_seeds"}
    assert rescored_line(selection).endswith(
        "(race up to 3 runs each: a round confirming a lead measured on one run, then 1 round for the candidates "
        "within the noise of the leader; ended as every contender had its most runs)"
    )
    del selection["race"]
    assert rescored_line(selection).endswith("stored: runner_up")


def test_the_rescoring_line_says_how_many_images_validate_however_the_split_sizes_them():
    import dataclasses

    from autoaug.search.config import SearchConfig
    from autoaug.search.driver import rescoring_text

    cpu = SearchConfig.from_preset("cpu", name="x", data="train.parquet")
    assert rescoring_text(cpu) == "120 epochs, 1 fresh seed, the rest validate (at most 5,000)"
    gpu = SearchConfig.from_preset("gpu", name="x", data="train.parquet")
    # sized to data that leaves fewer than the cap: the rest validate (it said "up to None" on a GPU)
    rest = dataclasses.replace(gpu, train=gpu.train.resolved([1000] * 10, data_image_size=32))
    assert rest.train.max_val_size is None and rest.train.val_size is None
    assert rescoring_text(rest) == "120 epochs, 1 fresh seed, the rest validate"
    sized = dataclasses.replace(cpu, rescore_seeds=2, train=cpu.train.resolved([5000] * 10, data_image_size=32))
    assert rescoring_text(sized) == "120 epochs, 2 fresh seeds, 5,000 validation images"
    packed = sized.replace(pack=4)  # (the cpu preset trains in bfloat16: a pack may)
    assert rescoring_text(packed) == "120 epochs, 2 fresh seeds, 5,000 validation images, in packs of up to 4"
