"""The ``local`` sampler (``--sampler local``): candidates as moves from the incumbent. Its
decisions on an Optuna study in memory (no Ray, no training): each proposal is the incumbent with
one thing changed, none repeats a tried or running point, the incumbent is the warm start until a
finished trial beats it beyond the margin, a rebuilt sampler decides the same; on a synthetic
score with a known better neighbour of the warm start it finds that neighbour where random search
does not. Through the real search plumbing (Ray Tune, the training method's trial replaced):
``test_local_search_through_the_search_finds_the_better_neighbour_and_stores_it``."""

from __future__ import annotations

import json
import random
import shutil

import optuna
import pytest

from autoaug.policies import Policy
from autoaug.search.decide import proxy_runs
from autoaug.search.decide.warm_start import WARM_START_ATTR
from autoaug.search.space import SearchSpace
from autoaug.search.tune.local_sampler import LocalSampler, point_key
from autoaug.search.tune.study import SAMPLERS, SEARCH_ATTR, make_sampler

optuna.logging.set_verbosity(optuna.logging.WARNING)

#: One sub-policy of two operations over AutoAugment's 16: 6 parameters, (16 x 11 x 10)^2 points.
SPACE = SearchSpace(num_sub_policies=1, base="crop")
DISTS = SPACE.distributions()
WARM_POLICY = Policy("warm", 10, [[("Rotate", 0.5, 4), ("Color", 0.6, 5)]], base="crop")
WARM = SPACE.to_params(WARM_POLICY)
#: The known better neighbour of the warm start: Color at bin 7 (two steps from 5), +2 points.
GAIN = 0.02
#: Each other parameter away from the warm start costs half a point.
COST = 0.005
#: The noise of one trial's score (sd), and the margin a search that measured it replaces its
#: incumbent by: twice the standard error of two single runs' difference.
NOISE = 0.003
MARGIN = 2 * NOISE * 2**0.5


def is_target(params) -> bool:
    return params["sp0_op1_type"] == "Color" and params["sp0_op1_mag"] == 7 and params["sp0_op1_prob"] > 0


def true_score(params, best_is_warm: bool = False) -> float:
    """0.80 at the warm start, half a point less per other parameter changed; the better
    neighbour ``GAIN`` more (with ``best_is_warm`` none, and a point less per change: the warm
    start is the best point)."""
    key = point_key(params, DISTS)
    warm = point_key(WARM, DISTS)
    names = sorted(DISTS)
    target = is_target(params) and not best_is_warm
    changed = sum(1 for n, a, b in zip(names, key, warm) if a != b and not (target and n == "sp0_op1_mag"))
    return 0.80 - (2 * COST if best_is_warm else COST) * changed + (GAIN if target else 0.0)


def noisy(seed: int, number: int, sd: float = NOISE) -> float:
    return random.Random(f"noise:{seed}:{number}").gauss(0.0, sd)


def new_study(sampler, *, warm=True, storage=None, name="s") -> optuna.Study:
    study = optuna.create_study(direction="maximize", sampler=sampler, storage=storage, study_name=name)
    study.set_user_attr(SEARCH_ATTR, {"name": name, "space": SPACE.to_dict()})
    if warm:
        study.enqueue_trial(WARM, user_attrs={WARM_START_ATTR: 0})
    return study


def search(sampler_name, seed, trials, *, margin=None, best_is_warm=False, study=None) -> optuna.Study:
    """``trials`` trials, one after another, each scored ``true_score`` plus noise seeded by
    (seed, trial number)."""
    study = study or new_study(make_sampler(sampler_name, seed, margin=margin))
    for _ in range(trials):
        trial = study.ask(fixed_distributions=DISTS)
        study.tell(trial, true_score(trial.params, best_is_warm) + noisy(seed, trial.number))
    return study


def changed(params, base, space=SPACE) -> list[str]:
    """The parameters that differ between two points (but those neither depends on)."""
    dists = space.distributions()
    inert = space.inert_params(params) & space.inert_params(base)
    a, b = point_key(params, dists), point_key(base, dists)
    return [n for n, x, y in zip(sorted(dists), a, b) if x != y and n not in inert]


# ----------------------------------------------------------------------------------------------
# The registry


def test_local_is_a_sampler_of_the_search_and_takes_no_startup_trials():
    from autoaug.search.config import SearchConfig

    assert "local" in SAMPLERS and SAMPLERS["local"].takes_margin and not SAMPLERS["local"].models_scores
    assert isinstance(make_sampler("local", 3, margin=0.01), LocalSampler)
    assert make_sampler("local", 3, margin=0.01).margin == 0.01
    config = SearchConfig(name="s", train={"preset": "smoke"}, sampler="local")
    assert config.sampler == "local"
    with pytest.raises(ValueError, match=r"startup_trials.*'local'"):
        SearchConfig(name="s", train={"preset": "smoke"}, sampler="local", startup_trials=5)
    with pytest.raises(ValueError, match="margin"):
        LocalSampler(margin=-0.1)


def test_the_margin_is_the_noise_calibration_measured_for_two_single_runs():
    from autoaug.search.decide.calibration_choices import incumbent_margin
    from autoaug.search.decide.noise import Noise

    def stage(noise):
        return {"noise": {**noise.to_dict(), "threshold": 0.01, "source": "..."}}

    bases = Noise(sampling=0.002, training=0.003, measured_training=0.004, df=1, paired=True)
    published = Noise(sampling=0.003, training=0.004, measured_training=None, df=0, paired=True)
    margin, source = incumbent_margin({"base": stage(bases), "transfer": stage(published)})
    assert margin == pytest.approx(2 * 0.005 * 2**0.5) and source == published.source()  # the published policies' race
    assert incumbent_margin({"base": stage(bases)})[0] == pytest.approx(2 * bases.sd * 2**0.5)
    assert incumbent_margin({}) is None and incumbent_margin(None) is None


def test_autoaug_search_takes_sampler_local(tmp_path):
    from autoaug.launch.cli import build_parser
    from autoaug.launch.search_cmd import build_search_config

    argv = ["search", "--preset", "cpu", "--sampler", "local", "--name", "n", "--storage", str(tmp_path)]
    config = build_search_config(build_parser().parse_args(argv))
    assert config.sampler == "local" and config.warm_start == "auto"  # the preset's calibration gives the margin
    with pytest.raises(SystemExit):
        build_parser().parse_args(["search", "--sampler", "locale"])


# ----------------------------------------------------------------------------------------------
# Its decisions


def test_each_proposal_is_the_warm_start_with_one_thing_changed_and_none_repeats_while_they_run():
    # The warm start is asked (running), then 40 proposals are asked with none told: each moves one
    # parameter of the warm start (an op, a probability or a bin by one or two steps, or a
    # probability to 0), and none is a point asked before -- concurrent trials get different ones.
    study = new_study(make_sampler("local", 0))
    warm = study.ask(fixed_distributions=DISTS)
    assert warm.params == WARM
    seen = {point_key(WARM, DISTS, SPACE.inert_params)}
    kinds = set()
    for _ in range(40):
        params = study.ask(fixed_distributions=DISTS).params
        (name,) = changed(params, WARM)
        kinds.add(name.rsplit("_", 1)[1])
        if name.endswith("_mag"):
            assert 1 <= abs(params[name] - WARM[name]) <= 2
        if name.endswith("_prob"):
            assert params[name] == 0 or 1 <= round(abs(params[name] - WARM[name]) * 10) <= 2
        key = point_key(params, DISTS, SPACE.inert_params)
        assert key not in seen
        seen.add(key)
    assert kinds == {"type", "prob", "mag"}


def test_when_every_neighbour_was_tried_it_moves_two_things_and_still_repeats_nothing():
    # Two operations without a magnitude (their bins are inert: not moved, not told apart), in a
    # space of three operations: the warm start has 2 x 2 op moves + 2 x 5 probability moves = 14
    # neighbours; the 15th and later proposals change two things, all different.
    space = SearchSpace(num_sub_policies=1, ops=("Invert", "Equalize", "AutoContrast"), base="crop")
    dists = space.distributions()
    warm = space.to_params(Policy("w", 10, [[("Invert", 0.5, 0), ("Equalize", 0.5, 0)]], base="crop"))
    study = optuna.create_study(direction="maximize", sampler=make_sampler("local", 1))
    study.set_user_attr(SEARCH_ATTR, {"space": space.to_dict()})
    study.enqueue_trial(warm, user_attrs={WARM_START_ATTR: 0})
    study.ask(fixed_distributions=dists)
    keys = [point_key(warm, dists, space.inert_params)]
    distances = []
    for _ in range(30):
        params = study.ask(fixed_distributions=dists).params
        keys.append(point_key(params, dists, space.inert_params))
        distances.append(len(changed(params, warm, space)))
    assert len(set(keys)) == len(keys)
    assert distances[:14] == [1] * 14 and all(d >= 2 for d in distances[14:])


def test_in_the_randaugment_family_a_move_is_an_operation_in_or_out_or_n_or_m_by_one_or_two():
    from autoaug.policies import presets

    space = SearchSpace(family="randaugment", base="crop")
    dists = space.distributions()
    warm = space.to_params(presets.randaugment(2, 9).with_base("crop"))
    study = optuna.create_study(direction="maximize", sampler=make_sampler("local", 2))
    study.set_user_attr(SEARCH_ATTR, {"space": space.to_dict()})
    study.enqueue_trial(warm, user_attrs={WARM_START_ATTR: 0})
    study.ask(fixed_distributions=dists)
    moved = []
    for _ in range(20):
        params = study.ask(fixed_distributions=dists).params
        (name,) = changed(params, warm, space)
        moved.append(name)
        if name in ("n", "m"):
            assert 1 <= abs(params[name] - warm[name]) <= 2
        else:
            assert name.startswith("use_") and params[name] is not warm[name]
    assert len(set(moved)) >= 10  # a parameter is drawn first: not 20 moves of m


def test_a_parameter_the_policy_does_not_depend_on_is_not_moved():
    # At the identity point of the randaugment family (no operation chosen), N and M change nothing:
    # every proposal turns one operation on. The bins of Invert and Equalize are no moves either.
    space = SearchSpace(family="randaugment", base="crop")
    dists = space.distributions()
    identity = {**{space.use_name(op): False for op in space.op_choices}, "n": 1, "m": 0}
    assert space.inert_params(identity) == {"n", "m"}
    study = optuna.create_study(direction="maximize", sampler=make_sampler("local", 0))
    study.set_user_attr(SEARCH_ATTR, {"space": space.to_dict()})
    study.enqueue_trial(identity, user_attrs={WARM_START_ATTR: 0})
    study.ask(fixed_distributions=dists)
    for _ in range(5):
        params = study.ask(fixed_distributions=dists).params
        assert (params["n"], params["m"]) == (1, 0) and sum(params[space.use_name(op)] for op in space.op_choices) == 1
    aa = SearchSpace(num_sub_policies=1, base="crop")
    inert = aa.to_params(Policy("p", 10, [[("Invert", 0.5, 3), ("Equalize", 0.5, 3)]], base="crop"))
    assert aa.inert_params(inert) == {"sp0_op0_mag", "sp0_op1_mag"}


def test_without_a_warm_start_it_draws_at_random_until_a_trial_finished_then_moves_from_the_best():
    study = new_study(make_sampler("local", 0), warm=False)
    first = [study.ask(fixed_distributions=DISTS) for _ in range(3)]
    # uniform draws: no two share most of their parameters
    assert all(len(changed(a.params, b.params)) >= 3 for a in first for b in first if a is not b)
    for t, value in zip(first, (0.5, 0.7, 0.6)):
        study.tell(t, value)
    params = study.ask(fixed_distributions=DISTS).params
    assert len(changed(params, first[1].params)) == 1


def test_the_incumbent_is_the_warm_start_until_a_finished_trial_beats_it_beyond_the_margin():
    sampler = LocalSampler(seed=0, margin=0.01)
    study = new_study(sampler)
    warm = study.ask(fixed_distributions=DISTS)
    a = study.ask(fixed_distributions=DISTS)
    b = study.ask(fixed_distributions=DISTS)
    c = study.ask(fixed_distributions=DISTS)
    study.tell(a, 0.95)  # finished before the warm start did: nothing to compare with yet
    assert sampler.incumbent(study).number == warm.number
    study.tell(warm, 0.90)  # a beat it by 5 points: a is the incumbent
    assert sampler.incumbent(study).number == a.number
    study.tell(b, 0.955)  # within the margin of a: a stays
    assert sampler.incumbent(study).number == a.number
    study.tell(c, 0.97)  # beyond it
    assert sampler.incumbent(study).number == c.number
    # Without a margin (no noise measured), the best finished trial.
    assert LocalSampler(seed=0).incumbent(study).number == c.number


def test_the_incumbent_is_read_in_the_direction_of_the_study():
    sampler = LocalSampler(seed=0, margin=0.01)
    study = optuna.create_study(direction="minimize", sampler=sampler)
    study.enqueue_trial(WARM, user_attrs={WARM_START_ATTR: 0})
    warm, other = study.ask(fixed_distributions=DISTS), study.ask(fixed_distributions=DISTS)
    study.tell(warm, 0.5)
    study.tell(other, 0.45)
    assert sampler.incumbent(study).number == other.number


def test_a_sampler_rebuilt_on_the_saved_study_makes_the_same_proposals(tmp_path):
    # A search's study on disk: 6 trials, 2 of them still running. The sampler that ran it and a
    # new one with the same seed (as a resumed search builds) propose the same next points; the
    # searcher's restore reseeds from (seed, trials): two restores of one saved study agree too.
    url = f"sqlite:///{tmp_path}/a.db"
    study = new_study(make_sampler("local", 5, margin=MARGIN), storage=url)
    search("local", 5, 4, study=study)
    running = [study.ask(fixed_distributions=DISTS) for _ in range(2)]
    assert len({point_key(t.params, DISTS) for t in running}) == 2
    shutil.copy(tmp_path / "a.db", tmp_path / "b.db")
    shutil.copy(tmp_path / "a.db", tmp_path / "c.db")

    def load(db, seed):
        return optuna.load_study(
            study_name="s", storage=f"sqlite:///{tmp_path}/{db}", sampler=make_sampler("local", seed, margin=MARGIN)
        )

    again, other = load("b.db", 5), load("c.db", 6)
    ran = [study.ask(fixed_distributions=DISTS).params for _ in range(2)]
    assert ran == [again.ask(fixed_distributions=DISTS).params for _ in range(2)]
    # (another seed decides otherwise: the proposals are the seed's and the study's)
    assert ran != [other.ask(fixed_distributions=DISTS).params for _ in range(2)]


def test_the_searchers_restore_reseeds_the_local_sampler_and_two_restores_decide_the_same(tmp_path):
    import pickle

    from autoaug.search.score import METRIC
    from autoaug.search.tune.searcher import StudySearcher

    def searcher(db):
        return StudySearcher(
            DISTS,
            metric=METRIC,
            mode="max",
            study_name="s",
            storage_url=f"sqlite:///{tmp_path}/{db}",
            sampler="local",
            seed=4,
            sampler_margin=MARGIN,
        )

    first = searcher("a.db")
    first.study.set_user_attr(SEARCH_ATTR, {"space": SPACE.to_dict()})
    first.study.enqueue_trial(WARM, user_attrs={WARM_START_ATTR: 0})
    for i in range(4):
        params = first.suggest(f"t{i}")
        first.on_trial_complete(f"t{i}", {METRIC: true_score(params) + noisy(4, i), "training_iteration": 1})
    first.save(str(tmp_path / "searcher.pkl"))
    shutil.copy(tmp_path / "a.db", tmp_path / "b.db")
    restored = []
    for db in ("a.db", "b.db"):
        s = pickle.loads(pickle.dumps(searcher(db)))  # as Tune unpickles it from tuner.pkl
        assert s.sampler_margin == MARGIN
        s.restore(str(tmp_path / "searcher.pkl"))
        restored.append([s.suggest(f"n{i}") for i in range(2)])
    assert restored[0] == restored[1]
    warm_key = point_key(WARM, DISTS)
    assert all(len(changed(p, WARM)) >= 1 and point_key(p, DISTS) != warm_key for p in restored[0])


# ----------------------------------------------------------------------------------------------
# What it finds


#: Trials of one search in the comparisons below (the warm start included).
TRIALS = 40
SEEDS = range(10)


def test_it_finds_the_better_neighbour_of_the_warm_start_where_random_search_does_not():
    """Over 10 seeds, 40 trials each, with the margin the measured noise gives: the best trial (the
    policy a search with ``top_n`` 1 stores) is the better neighbour in at least 8 searches of
    ``local`` and at most 4 of ``random``.

    The probabilities, measured over 300 seeds of each (this score, this noise): ``local`` finds it
    in 40 trials in 296 (p = 0.987, 95% interval down to 0.966; a move picks the bin of Color with
    p 1/6, then the right one of its 4 moves: the first hit at a median of about 12 trials),
    ``random`` in 43 (p = 0.143, up to 0.188: a draw holds Color at bin 7 with p 1/176 and must
    then beat the warm start). A sampler no better than random (p <= 0.19) passes the first bound
    with probability 5e-5; a correct one (p >= 0.966) fails it with probability 0.004, and random
    search fails the second with probability 0.027 (0.008 at its measured p) -- for 10 seeds
    drawn afresh; these 10 are fixed, so the test is deterministic."""
    local = sum(is_target(search("local", s, TRIALS, margin=MARGIN).best_trial.params) for s in SEEDS)
    rand = sum(is_target(search("random", s, TRIALS).best_trial.params) for s in SEEDS)
    assert local >= 8, (local, rand)
    assert rand <= 4, (local, rand)


def test_where_nothing_beats_the_warm_start_it_stays_the_incumbent_and_every_proposal_moves_from_it():
    # Every change costs a point, 2.4 standard errors of two trials' difference: a neighbour beats
    # the warm start beyond the margin with p 5e-6 (z = 4.4), so in none of 10 searches of 25 trials
    # is the incumbent replaced, and every proposal is a different neighbour of the warm start.
    for seed in SEEDS:
        study = search("local", seed, 25, margin=MARGIN, best_is_warm=True)
        assert study.sampler.incumbent(study).params == WARM, seed
        assert all(len(changed(t.params, WARM)) == 1 for t in study.trials[1:]), seed
        assert len({point_key(t.params, DISTS, SPACE.inert_params) for t in study.trials}) == 25


# ----------------------------------------------------------------------------------------------
# Through the search


def _noise_images(write_images, path):
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    images = [Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)) for _ in range(48)]
    return write_images(path, images, [i % 2 for i in range(48)], ["a", "b"])


def _search_config(tmp_path, data, **values):
    from autoaug.search.config import SearchConfig

    return SearchConfig.from_dict(
        {
            "preset": "smoke",
            "data": str(data),
            "sampler": "local",
            "concurrency": 1,  # one trial at a time: the run is deterministic
            "early_stopping": False,
            "train": {"preset": "smoke", "epochs": 1, "train_size": 32, "val_size": 16},
            "storage": str(tmp_path / "runs"),
            "store": str(tmp_path / "store"),
            "verbose": 0,
            **values,
        }
    )


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.usefixtures("shared_ray")
def test_local_search_through_the_search_decides_as_in_memory_and_stores_the_better_neighbour(tmp_path, write_images):
    """``autoaug search``'s own plumbing (the training method's experiment on Ray Tune, the
    study, assembling, storing), the trial's training replaced by the synthetic score plus noise,
    warm-started from a policy file: the 5 trials are the points the in-memory search of the same
    seed and scores proposes (seed 6 moves to the better neighbour at its 4th proposal; the odds
    over seeds are the test above's), and the stored policy (``top_n`` 1) holds it."""
    from autoaug.search.driver import run_search
    from autoaug.search.tune.study import open_study

    warm_file = tmp_path / "warm.json"
    warm_file.write_text(json.dumps(WARM_POLICY.to_dict()))
    config = _search_config(
        tmp_path,
        _noise_images(write_images, tmp_path / "noise.parquet"),
        name="local",
        base="crop",
        space={"num_sub_policies": 1},
        warm_start=[str(warm_file)],
        seed=6,
        num_trials=5,
        top_n=1,
    )
    cost, gain, sd, warm = COST, GAIN, NOISE, dict(WARM)

    def synthetic_trial(trial_config, *, train_config, space, policy_prefix, score_window=1):
        """The training method's trial, its training replaced: the policy's synthetic score."""
        import random as rnd

        from ray import tune

        from autoaug.search.score import METRIC
        from autoaug.search.space import SearchSpace

        params = {k: trial_config[k] for k in SearchSpace.from_dict(space).param_names()}
        target = params["sp0_op1_type"] == "Color" and params["sp0_op1_mag"] == 7 and params["sp0_op1_prob"] > 0
        changed = sum(
            1
            for k, v in warm.items()
            if not (target and k == "sp0_op1_mag")
            and (round(params[k] * 10) != round(v * 10) if isinstance(v, float) else params[k] != v)
        )
        noise = rnd.Random(json.dumps(params, sort_keys=True)).gauss(0.0, sd)
        score = 0.80 - cost * changed + (gain if target else 0.0) + noise
        tune.report({METRIC: score, "val_accuracy": score, "epoch": 1})

    outcome = run_search(config, trainable=synthetic_trial)
    trials = sorted(open_study("local", runs_root=str(tmp_path / "runs")).trials, key=lambda t: t.number)
    assert trials[0].params == WARM and trials[0].user_attrs[WARM_START_ATTR] == 0
    memory = new_study(make_sampler("local", 6))
    for t in trials:
        asked = memory.ask(fixed_distributions=DISTS)
        assert point_key(asked.params, DISTS) == point_key(t.params, DISTS), t.number
        memory.tell(asked, t.value)
    assert [is_target(t.params) for t in trials][:4] == [False, False, False, False] and is_target(trials[4].params)
    assert [(op.op, op.magnitude_bin) for op in outcome.policy.sub_policies[0]][1] == ("Color", 7)
    assert outcome.policy.base == "crop"


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.usefixtures("shared_ray")
def test_where_nothing_beats_the_published_policy_the_search_stores_it_and_says_so(tmp_path, write_images, monkeypatch):
    """``--preset cpu``'s story with ``--sampler local``: calibration chooses the base and the
    published policy (its proxy runs replaced by a table and the synthetic score), the trials move
    from that policy (the synthetic score: the published sub-policies are the best there are), the
    candidates are re-scored beside it. Nothing beats it beyond the noise: the incumbent stays the
    first warm-start point, the search stores the published policy and its summary says so."""
    from autoaug.policies import presets
    from autoaug.search.driver import run_search
    from autoaug.search.tune.study import open_study

    published = [
        tuple((op.op, round(op.probability, 6), op.magnitude_bin) for op in sub)
        for sub in presets.resolve("autoaugment-cifar10").sub_policies
    ]

    def score(subs) -> float:
        """0.80, a point more for holding all the published sub-policies, a point less per other one
        (0.50 at least)."""
        keys = [tuple((op.op, round(op.probability, 6), op.magnitude_bin) for op in sub) for sub in subs]
        inside = len(set(keys) & set(published))
        return max(0.5, 0.80 + 0.01 * inside / len(published) - 0.01 * sum(k not in published for k in keys))

    bases = {"none": 0.70, "crop": 0.78, "standard": 0.72}

    def train_runs(runs, config, *, cached=None, save=None, task_name="", deadline=None):
        results = dict(cached or {})
        for key, policy, cfg in runs:
            if key in results:
                continue
            label = key.split(":", 1)[1].split("/", 1)[0] if key.startswith("base:") else None
            value = (bases[label] if label else score(policy.sub_policies)) + random.Random(key).gauss(0.0, 0.001)
            results[key] = {
                "search_score": value,
                "val_accuracy": value,
                "train_time_s": 1.0,
                "epochs": cfg.epochs,
                "seed": cfg.seed,
                "val_size": 1000,
            }
            if save is not None:
                save(results)
        return results

    monkeypatch.setattr(proxy_runs, "train_runs", train_runs)

    def synthetic_trial(trial_config, *, train_config, space, policy_prefix, score_window=1):
        import random as rnd

        from ray import tune

        from autoaug.search.score import METRIC
        from autoaug.search.space import SearchSpace

        search_space = SearchSpace.from_dict(space)
        params = {k: trial_config[k] for k in search_space.param_names()}
        noise = rnd.Random(json.dumps(params, sort_keys=True)).gauss(0.0, 0.003)
        value = score(search_space.to_policy(params).sub_policies) + noise
        tune.report({METRIC: value, "val_accuracy": value, "epoch": 1})

    config = _search_config(
        tmp_path,
        _noise_images(write_images, tmp_path / "noise.parquet"),
        name="nothing",
        base="auto",
        warm_start="auto",
        rescore=True,
        num_trials=7,
    )
    outcome = run_search(config, trainable=synthetic_trial)
    assert outcome.provenance["calibration"]["transfer"]["warm_start"] == ["autoaugment-cifar10"]
    trials = sorted(open_study("nothing", runs_root=str(tmp_path / "runs")).trials, key=lambda t: t.number)
    assert [t.user_attrs.get(WARM_START_ATTR) for t in trials[:5]] == [0, 1, 2, 3, 4]
    space = SearchSpace(base="crop")
    assert all(len(changed(t.params, trials[0].params, space)) == 1 for t in trials[5:])  # the incumbent stayed
    # Stored: the published sub-policies, all of them and no other (as the transfer candidate, or as
    # the assembled policy of the five warm-start points, which is the same up to their order).
    stored = [
        tuple((op.op, round(op.probability, 6), op.magnitude_bin) for op in sub) for sub in outcome.policy.sub_policies
    ]
    assert sorted(stored) == sorted(published) and outcome.policy.base == "crop"
    from autoaug.launch.summary import provenance_lines

    margin = outcome.provenance["optuna"]["sampler_margin"]  # the calibration's noise of two single runs
    assert 0 < margin < 0.1
    shown = "\n".join(provenance_lines(outcome.provenance))  # autoaug policies show
    assert f"sampler local (its incumbent replaced beyond {margin * 100:.2f} points, the measured noise)" in shown
    summary = outcome.summary()
    assert (
        "none of the search's own candidates beat the best published policy" in summary
        or "the search found nothing measurably better than the published policy" in summary
    ), summary
