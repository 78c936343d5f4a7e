"""The Optuna side of a search: samplers (one table), storages, the study and its consistency
with Ray Tune's trials.

Every Optuna trial of a search carries the user attribute :data:`TUNE_TRIAL_ATTR` (its Ray Tune
trial id); the other attributes below are written by :mod:`autoaug.search.tune.searcher` (at a trial's
end, and after a driver crash).
"""

from __future__ import annotations

import math
import os
import re
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from autoaug.core import extras
from autoaug.core.errors import MissingExtraError, RunExistsError, UserInputError
from autoaug.search.decide.assemble import TrialRecord
from autoaug.search.decide.warm_start import WARM_START_ATTR
from autoaug.search.run_dir import SEARCH_ATTR, STUDY_FILE, RunDir, default_runs_root
from autoaug.search.space import SearchSpace

if TYPE_CHECKING:  # optuna is imported where used: `autoaug --help` lists SAMPLERS without it
    import optuna

__all__ = [
    "SAMPLERS",
    "Sampler",
    "make_sampler",
    "make_storage",
    "redact",
    "open_study",
    "study_url",
    "run_study_url",
    "check_studies",
    "study_owner",
    "SEARCH_ATTR",
    "delete_study",
    "study_trials_by_tune_id",
    "replaced_trials",
    "final_step",
    "check_study",
    "TUNE_TRIAL_ATTR",
    "ORPHAN_ATTR",
    "FINAL_STEP_ATTR",
    "RETRY_ATTR",
    "REPLACES_ATTR",
    "WARM_START_ATTR",
    "PARAMS_ATTR",
    "label_study",
]

#: Optuna user attribute holding the Ray Tune trial id of each Optuna trial.
TUNE_TRIAL_ATTR = "tune_trial_id"
#: Optuna user attribute of a proposal no Tune trial took (the time budget ended the trials first).
ORPHAN_ATTR = "autoaug_orphaned"
#: Optuna user attribute: the epoch of the trial's final result (named after Tune's
#: ``training_iteration``, the same number while every trial reported every epoch).
FINAL_STEP_ATTR = "training_iteration"
#: Optuna user attribute (the failed attempt's number) of a retried failure's new trial.
RETRY_ATTR = "autoaug_retry_of"
#: Optuna user attribute (a trial's number) of the trial asked again in its place after a driver
#: crash left it RUNNING: its proposal, and its Tune trial if Tune resumed that one; the replaced
#: trial is FAIL.
REPLACES_ATTR = "autoaug_replaces"
#: Optuna study user attribute: what each parameter name means (what Optuna Dashboard shows a
#: person beside ``sp0_op1_type``, ``use_Rotate``, ``n``...).
PARAMS_ATTR = "autoaug_parameters"


def _param_legend(space: SearchSpace) -> dict[str, str]:
    """What the parameter names of ``space``'s study mean, by name pattern."""
    if space.family == "aa":
        return {
            "spI_opJ_type": f"sub-policy I's J-th operation (of {space.num_sub_policies} sub-policies)",
            "spI_opJ_prob": "its probability of being applied",
            "spI_opJ_mag": "its magnitude bin (0 = weakest)",
        }
    legend = {"use_OP": "whether operation OP is among those drawn from"}
    if space.family == "randaugment":
        legend.update({"n": "N: operations applied per image", "m": "M: their magnitude bin"})
    else:
        legend["max_bin"] = "the highest magnitude bin drawn (uniform from 0)"
    return legend


def label_study(study: optuna.Study, space: SearchSpace, metric: str) -> None:
    """Name what Optuna Dashboard shows of a search's study: the objective (``metric``, not
    "Objective 0") and, in the study user attribute :data:`PARAMS_ATTR`, what each parameter name
    means. Trials are untouched (idempotent: a resumed search calls it again)."""
    optuna = _optuna()

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        study.set_metric_names([metric])
    study.set_user_attr(PARAMS_ATTR, _param_legend(space))


def _optuna() -> Any:
    """The optuna module (imported where used: `autoaug --help` reads this module without it)."""
    import optuna

    return optuna


@dataclass(frozen=True)
class Sampler:
    """One sampler ``autoaug search --sampler`` offers."""

    description: str
    requires: str | None  # a Python package it needs besides Optuna
    build: Callable[[int, dict[str, Any]], optuna.samplers.BaseSampler]  # (seed, extra kwargs) -> sampler
    #: Takes ``n_startup_trials``: random proposals before its model of the scores takes over.
    models_scores: bool = False
    #: Moves from an incumbent, replaced only beyond ``margin`` (the measured noise): takes ``margin``.
    takes_margin: bool = False


#: The samplers, by the name ``--sampler`` / ``sampler:`` takes (the first is the default).
SAMPLERS: Mapping[str, Sampler] = {
    # multivariate: models the joint distribution of the parameters; constant_liar: concurrent
    # trials do not all get the same proposal.
    "tpe": Sampler(
        "multivariate TPE with constant liar",
        None,
        lambda seed, kw: _optuna().samplers.TPESampler(seed=seed, multivariate=True, constant_liar=True, **kw),
        models_scores=True,
    ),
    "random": Sampler("uniform random", None, lambda seed, kw: _optuna().samplers.RandomSampler(seed=seed)),
    "qmc": Sampler(
        "scrambled Sobol sequence", "scipy", lambda seed, kw: _optuna().samplers.QMCSampler(seed=seed, scramble=True)
    ),
    "cmaes": Sampler(
        "CMA-ES (categorical parameters fall back to random sampling)",
        "cmaes",
        lambda seed, kw: _optuna().samplers.CmaEsSampler(seed=seed, warn_independent_sampling=False, **kw),
        models_scores=True,
    ),
    "gp": Sampler(
        "Gaussian-process Bayesian optimisation",
        "scipy",
        lambda seed, kw: _optuna().samplers.GPSampler(seed=seed, **kw),
        models_scores=True,
    ),
    # Candidates as moves from the incumbent (the warm start until a trial beats it beyond the
    # margin): search/tune/local_sampler.py.
    "local": Sampler(
        "moves from the incumbent: one op, probability or magnitude changed at a time",
        None,
        lambda seed, kw: _local_sampler(seed, **kw),
        takes_margin=True,
    ),
}


def _local_sampler(seed: int, margin: float | None = None) -> optuna.samplers.BaseSampler:
    from autoaug.search.tune.local_sampler import LocalSampler

    return LocalSampler(seed=seed, margin=margin or 0.0)


def model_samplers() -> list[str]:
    """Names of the samplers that take ``startup_trials`` (they propose from a model of the scores)."""
    return [name for name, s in SAMPLERS.items() if s.models_scores]


def make_sampler(
    name: str, seed: int, startup_trials: int | None = None, margin: float | None = None
) -> optuna.samplers.BaseSampler:
    """The Optuna sampler called ``name`` (see :data:`SAMPLERS`), seeded.

    ``startup_trials``: a model-based sampler (``tpe``, ``gp``, ``cmaes``) proposes at random
    until this many trials have finished (enqueued warm-start trials included), then from its
    model; None: Optuna's default (10 for TPE and GP, 1 for CMA-ES). ``margin``: how far a
    finished trial must beat the incumbent to replace it, for a sampler that moves from one
    (``local``; the others ignore it); None: 0.
    """
    optuna = _optuna()

    if name not in SAMPLERS:
        raise UserInputError(f"unknown sampler {name!r}; expected one of {', '.join(SAMPLERS)}")
    spec = SAMPLERS[name]
    if startup_trials is not None and not spec.models_scores:
        raise UserInputError(
            f"startup_trials is {startup_trials} but sampler {name!r} proposes without a model of the "
            f"scores; expected startup_trials unset, or one of the samplers "
            f"{', '.join(model_samplers())}"
        )
    kwargs: dict[str, Any] = {} if startup_trials is None else {"n_startup_trials": startup_trials}
    if spec.takes_margin and margin is not None:
        kwargs["margin"] = margin
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return spec.build(seed, kwargs)


# ----------------------------------------------------------------------------------------------
# Storages


#: The driver ``postgresql://`` means: psycopg 3, which the ``postgres`` extra installs (SQLAlchemy
#: 2.0 would take psycopg2 by default, 2.1 psycopg: the same on both).
POSTGRES_DRIVER = "psycopg"
INSTALL_POSTGRES = "pip install 'autoaug[postgres]'"
#: Seconds a PostgreSQL connection may take before it is refused (a host that drops packets).
CONNECT_TIMEOUT_S = 10

# What a server or driver said -> what the user checks (the driver's own words come first).
_HINTS = (
    (
        re.compile(r"connection refused|could not connect|timeout expired|no route to host", re.I),
        "is the database server running and listening at that host and port?",
    ),
    (
        re.compile(r"could not translate host name|name or service not known|nodename nor servname", re.I),
        "is the host name in the URL right?",
    ),
    (
        re.compile(r"authentication failed|role \S+ does not exist|no pg_hba\.conf entry|access denied", re.I),
        "the server refused the login: check the user and password (the URL's, PGPASSWORD or ~/.pgpass)",
    ),
    (
        re.compile(r"database \S+ does not exist|unknown database", re.I),
        "create the database first (createdb NAME), or name one that exists",
    ),
)


def _sqlalchemy_url(url: str) -> Any:
    """``url`` parsed by SQLAlchemy (what Optuna's RDB storage connects with, installed with Optuna;
    imported where used, as Optuna is)."""
    from sqlalchemy.engine import make_url

    return make_url(url)


def _engine_url(url: str) -> tuple[Any, dict[str, Any]]:
    """The SQLAlchemy URL Optuna connects to, and the engine's ``connect_args``."""
    parsed = _sqlalchemy_url(url)
    connect_args: dict[str, Any] = {}
    if parsed.drivername == "sqlite":
        # Several writers (the driver, a user inspecting the study) may hold the file.
        connect_args["timeout"] = 60
    elif parsed.get_backend_name() == "postgresql":
        if parsed.drivername == "postgresql":
            parsed = parsed.set(drivername=f"postgresql+{POSTGRES_DRIVER}")
        if "connect_timeout" not in parsed.query:
            connect_args["connect_timeout"] = CONNECT_TIMEOUT_S
    return parsed, connect_args


def _one_line(exc: BaseException, url: str) -> str:
    """What a storage driver raised, as one line without the password."""
    cause = getattr(exc, "orig", None) or exc  # SQLAlchemy's wrapper: the driver's own error
    text = " ".join(str(cause).split()) or type(cause).__name__
    text = re.sub(r"\s*\(Background on this error at: \S+\)", "", text)
    try:
        password = _sqlalchemy_url(url).password
    except Exception:
        password = None
    if password:
        text = text.replace(str(password), "***")
    hint = next((h for pattern, h in _HINTS if pattern.search(text)), None)
    if hint is None or "is the server running" in text.lower():  # (libpq asks it itself)
        return text
    return f"{text}; {hint}"


def make_storage(url: str) -> optuna.storages.BaseStorage:
    """The Optuna RDB storage at ``url`` (connected: a server that is down or refuses the login is
    found here); errors become one :class:`UserInputError` line without the password, a missing
    database driver one :class:`MissingExtraError` line naming the extra. ``postgresql://`` connects
    with psycopg 3 (:data:`POSTGRES_DRIVER`), with a :data:`CONNECT_TIMEOUT_S` connect timeout."""
    optuna = _optuna()

    try:
        engine_url, connect_args = _engine_url(url)
    except Exception as exc:  # sqlalchemy.exc.ArgumentError: not a database URL
        raise UserInputError(f"Optuna storage {redact(url)} is not a database URL: {_one_line(exc, url)}") from None
    if engine_url.get_backend_name() == "postgresql" and engine_url.get_driver_name() == POSTGRES_DRIVER:
        if extras.missing(["psycopg"]):
            raise MissingExtraError(
                f"the Optuna storage {redact(url)} needs the PostgreSQL driver psycopg (3), which is not "
                f"installed; install it with: {INSTALL_POSTGRES}"
            )
    kwargs: dict[str, Any] = {"engine_kwargs": {"connect_args": connect_args}} if connect_args else {}
    try:
        return optuna.storages.RDBStorage(engine_url.render_as_string(hide_password=False), **kwargs)
    except ImportError:  # another driver named in the URL (postgresql+psycopg2://, mysql://) and absent
        raise MissingExtraError(
            f"the Optuna storage {redact(url)} needs the database driver {engine_url.get_driver_name()!r} "
            f"of {engine_url.get_backend_name()}, which is not installed"
        ) from None
    except Exception as exc:  # sqlalchemy / driver errors: show them as one line
        raise UserInputError(f"cannot open Optuna storage {redact(url)}: {_one_line(exc, url)}") from None


def redact(url: str) -> str:
    """``url`` with its password hidden."""
    try:
        return _sqlalchemy_url(url).render_as_string(hide_password=True)
    except Exception:
        return url


def run_study_url(config: Any, run: RunDir) -> str:
    """The Optuna storage URL of ``config``'s study in the run directory ``run``."""
    if config.optuna_storage:
        return config.optuna_storage
    if run.local_path is None:  # check_runnable() refuses this earlier
        raise UserInputError("a remote run directory needs an explicit Optuna storage URL")
    return "sqlite:///" + os.path.join(run.local_path, STUDY_FILE)


def study_url(config: Any, *, hide_password: bool = True) -> str:
    """The Optuna storage URL of ``config``'s study (password hidden unless ``hide_password=False``)."""
    url = run_study_url(config, RunDir(config.storage, config.name))
    return redact(url) if hide_password else url


def open_study(name: str, storage: str | None = None, *, runs_root: str | None = None) -> optuna.Study:
    """Load the Optuna study of search ``name`` (read it while the search runs, or after).

    ``storage``: the Optuna storage URL; default: ``optuna.db`` in the run directory
    ``{runs_root}/{name}``.
    """
    optuna = _optuna()

    if storage is None:
        run = RunDir(runs_root or default_runs_root(), name)
        if run.local_path is None:
            raise UserInputError("the run directory is remote: pass the Optuna storage URL explicitly")
        storage = "sqlite:///" + os.path.join(run.local_path, STUDY_FILE)
    return optuna.load_study(study_name=name, storage=make_storage(storage))


def study_owner(user_attrs: Mapping[str, Any]) -> str | None:
    """The run directory of the search a study belongs to (:data:`SEARCH_ATTR`); None: no search
    recorded it (made by hand, or by a search killed before it wrote the attribute)."""
    record = user_attrs.get(SEARCH_ATTR)
    run_dir = record.get("run_dir") if isinstance(record, Mapping) else None
    return run_dir if isinstance(run_dir, str) else None


def _is_own(owner: str | None, run_uri: str) -> bool:
    # A density round's study records its round's folder, inside the run directory.
    return owner is not None and (owner == run_uri or owner.startswith(run_uri.rstrip("/") + "/"))


def check_studies(url: str, names: Sequence[str], run_uri: str, *, own_ok: bool, resuming: bool = False) -> None:
    """Refuse, in one line, a search whose study names ``names`` clash in the storage at ``url``
    (which is connected first: :func:`make_storage`'s errors). A study of one of ``names`` that
    another search wrote (:data:`SEARCH_ATTR` names another run directory than ``run_uri``), or that
    no search recorded, is refused (:class:`RunExistsError`); this search's own (an earlier run of
    it) is refused unless ``own_ok`` (``--overwrite``, or a run directory the driver refuses
    itself). ``resuming`` (``--resume``): its own studies are expected, one no search recorded may be
    its own (killed before it wrote the record); another search's is refused."""
    optuna = _optuna()

    storage = make_storage(url)
    if not names:
        return
    wanted = set(names)
    for summary in optuna.get_all_study_summaries(storage, include_best_trial=False):
        if summary.study_name not in wanted:
            continue
        owner = study_owner(summary.user_attrs)
        where = f"the Optuna storage {redact(url)} already holds a study named {summary.study_name!r}"
        if resuming:
            if owner is not None and not _is_own(owner, run_uri):
                raise RunExistsError(
                    f"cannot resume the search in {run_uri}: the Optuna storage {redact(url)} holds its study "
                    f"{summary.study_name!r}, but of another search now (run directory {owner}); start it "
                    "again under another --name"
                )
            continue
        if owner is None:
            raise RunExistsError(
                f"{where} that no autoaug search recorded as its own; choose another --name, or delete "
                "that study first (optuna.delete_study)"
            )
        if not _is_own(owner, run_uri):
            raise RunExistsError(
                f"{where}, of another search (run directory {owner}); choose another --name, or delete "
                "that study first (optuna.delete_study)"
            )
        if not own_ok:
            raise RunExistsError(
                f"{where}, of an earlier search in {run_uri} whose run directory is gone; pass --overwrite "
                "to delete it and start again, or choose another --name"
            )


def delete_study(name: str, url: str, *, run_uri: str | None = None) -> None:
    """Delete the study ``name`` from the storage at ``url`` (nothing if it is not there); with
    ``run_uri``, only if it is the study of the search in that run directory."""
    optuna = _optuna()

    storage = make_storage(url)
    if run_uri is not None:
        summaries = optuna.get_all_study_summaries(storage, include_best_trial=False)
        if not any(s.study_name == name and _is_own(study_owner(s.user_attrs), run_uri) for s in summaries):
            return
    try:
        optuna.delete_study(study_name=name, storage=storage)
    except KeyError:
        pass


# ----------------------------------------------------------------------------------------------
# Reading the study


def final_step(frozen: optuna.trial.FrozenTrial) -> int:
    """Last epoch the study recorded for a trial (0 if none)."""
    step = frozen.user_attrs.get(FINAL_STEP_ATTR)
    return int(step) if step is not None else max(frozen.intermediate_values, default=0)


def replaced_trials(study: optuna.Study) -> set[int]:
    """Numbers of the trials another trial replaces (:data:`REPLACES_ATTR`)."""
    return {ft.user_attrs[REPLACES_ATTR] for ft in study.get_trials(deepcopy=False) if REPLACES_ATTR in ft.user_attrs}


def study_trials_by_tune_id(study: optuna.Study) -> dict[str, optuna.trial.FrozenTrial]:
    """``{tune_trial_id: the latest Optuna trial for it}`` (a retried failure has two, a trial
    continued after a driver crash too); a replaced trial is not its Tune trial's."""
    out: dict[str, optuna.trial.FrozenTrial] = {}
    replaced = replaced_trials(study)
    for ft in study.get_trials(deepcopy=False):
        tid = ft.user_attrs.get(TUNE_TRIAL_ATTR)
        if tid is not None and ft.number not in replaced and (tid not in out or ft.number > out[tid].number):
            out[tid] = ft
    return out


def check_study(
    study: optuna.Study, trials: Sequence[TrialRecord], space: SearchSpace, *, budget_ended: bool = False
) -> list[str]:
    """Problems between the Optuna study and Tune's trials (empty list: consistent).

    Consistent means: every finished Tune trial has an Optuna trial (matched through
    ``tune_trial_id``; for a failure retried with ``resume_errored``, the latest one) with the same
    parameters; a trial that ran all epochs is COMPLETE and one stopped early by ASHA is PRUNED, with
    the same value (a pruned trial's value is its last intermediate value), a failed one FAIL; no Optuna trial
    is left RUNNING/WAITING; every other Optuna trial is an orphan marked ``autoaug_orphaned``, a
    failed attempt followed by a retry, or a FAIL trial asked again after a driver crash
    (``autoaug_replaces``). With ``budget_ended`` (the time budget ended the search), a
    WAITING trial that belongs to no Tune trial is a proposal the search never reached (an enqueued
    warm-start point), not a problem.
    """
    optuna = _optuna()

    problems: list[str] = []
    latest = study_trials_by_tune_id(study)
    replaced = replaced_trials(study)
    for ft in study.get_trials(deepcopy=False):
        tid = ft.user_attrs.get(TUNE_TRIAL_ATTR)
        if ft.number in replaced:
            if ft.state != optuna.trial.TrialState.FAIL:
                problems.append(f"Optuna trial {ft.number} was asked again but is {ft.state.name}, not FAIL")
            continue
        if budget_ended and tid is None and ft.state == optuna.trial.TrialState.WAITING:
            continue
        if ft.state in (optuna.trial.TrialState.RUNNING, optuna.trial.TrialState.WAITING):
            problems.append(f"Optuna trial {ft.number} is still {ft.state.name}")
        if tid is None:
            if not ft.user_attrs.get(ORPHAN_ATTR):
                problems.append(f"Optuna trial {ft.number} belongs to no Tune trial")
            continue
        last = latest[tid]
        if last.number != ft.number and not (
            ft.state == optuna.trial.TrialState.FAIL and last.user_attrs.get(RETRY_ATTR) == ft.number
        ):
            problems.append(f"Tune trial {tid} has two Optuna trials ({ft.number}, {last.number})")
    known = set()
    for rec in trials:
        known.add(rec.trial_id)
        ft = latest.get(rec.trial_id)
        if ft is None:
            if rec.finished:
                problems.append(f"Tune trial {rec.trial_id} has no Optuna trial")
            continue
        try:
            same = space.to_policy(ft.params).content_hash == (rec.policy and rec.policy.content_hash)
        except ValueError:
            same = False
        if not same:
            problems.append(f"Tune trial {rec.trial_id} and Optuna trial {ft.number} have different parameters")
        if rec.succeeded:
            want = optuna.trial.TrialState.COMPLETE if rec.status == "completed" else optuna.trial.TrialState.PRUNED
            if ft.state != want:
                problems.append(
                    f"Tune trial {rec.trial_id} {rec.status.replace('_', ' ')} but Optuna trial {ft.number} is "
                    f"{ft.state.name} (expected {want.name})"
                )
            elif not math.isclose(ft.value, rec.score, rel_tol=1e-9, abs_tol=1e-12):
                problems.append(
                    f"Tune trial {rec.trial_id} scored {rec.score} but Optuna trial {ft.number} holds {ft.value}"
                )
        elif rec.status == "failed" and ft.state != optuna.trial.TrialState.FAIL:
            problems.append(f"Tune trial {rec.trial_id} failed but Optuna trial {ft.number} is {ft.state.name}")
    for tid, ft in latest.items():
        if tid not in known:
            problems.append(f"Optuna trial {ft.number} names Tune trial {tid}, which does not exist")
    return problems
