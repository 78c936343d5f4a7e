"""What ``autoaug search`` runs, once :mod:`autoaug.launch.search_cmd` has read the flags and built
the configuration: the preflight, the Ray session, the driver, the search's logging, the result
printed (or as ``--json``) and the next steps. It imports Optuna, Ray's session and the driver,
so the parser never imports it: ``search_cmd.run`` does, when the command runs."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os

import optuna

from autoaug.core.errors import AutoaugError, SearchInterruptedError, UserInputError
from autoaug.core.ray_session import output_settings, ray_session
from autoaug.launch import preflight
from autoaug.launch.output import display_for, json_result
from autoaug.launch.summary import next_steps
from autoaug.policies.index import default_store_uri
from autoaug.policies.schedule import PROVENANCE_KEY as SCHEDULE_KEY
from autoaug.search import driver
from autoaug.search.run_dir import CONFIG_FILE, RESULT_FILE, RunDir, default_runs_root

__all__ = ["search", "resume", "next_steps_of", "outcome_json"]


def _print(text: str = "") -> None:
    # stdout, or stderr during a --json run (launch.output.json_result)
    print(text, flush=True)


def _session_factory(address: str | None, verbose: int, display):
    """Connect through :mod:`autoaug.core.ray_session` (embedded Ray, ``--address``, or the Ray Job's
    cluster; the project's packages are shipped to remote workers)."""

    @contextlib.contextmanager
    def session():
        with ray_session(address, **output_settings(verbose >= 2)) as info:
            display.log(f"  Ray: {info.describe()}")
            yield info

    return session


def _configure_logging(verbose: int) -> None:
    optuna.logging.set_verbosity(optuna.logging.INFO if verbose >= 2 else optuna.logging.WARNING)
    logging.getLogger("autoaug.search").setLevel(logging.INFO if verbose >= 2 else logging.WARNING)


def search(config, args: argparse.Namespace, description: str) -> int:
    """Run the search ``config`` (checked runnable) describes; ``description``: its first lines
    (:func:`autoaug.launch.search_cmd._describe`)."""
    _configure_logging(config.verbose)
    with display_for(args, verbose=config.verbose) as display:
        display.log(description)
        # Paths absolute, storage and store writable, data checked and decoded: before Ray starts.
        config = preflight.for_search(config, say=display.log, address=args.address, overwrite=bool(args.overwrite))
        session = _session_factory(args.address, config.verbose, display)
        with RunDir(config.storage, config.name).driver_lock():  # one driver per run: a second is refused
            return _execute(
                lambda: driver.run_search(config, session=session, overwrite=bool(args.overwrite), display=display),
                config.verbose,
                args,
                display,
                RunDir(config.storage, config.name),
            )


def resume(args: argparse.Namespace) -> int:
    """Continue the search ``args.resume`` where it stopped."""
    verbose = 1 if args.verbose is None else args.verbose
    args.storage, args.store = preflight.for_resume(_storage(args), args.store)
    _configure_logging(verbose)
    with display_for(args, verbose=verbose) as display:
        display.log(f"resuming search {args.resume} from {RunDir(_storage(args), args.resume).uri}")
        session = _session_factory(args.address, verbose, display)
        with RunDir(_storage(args), args.resume).driver_lock():  # not while another driver runs it
            return _execute(
                lambda: driver.resume_search(
                    args.resume,
                    _storage(args),
                    store=args.store,
                    resume_errored=args.resume_errored,
                    session=session,
                    display=display,
                ),
                verbose,
                args,
                display,
                RunDir(_storage(args), args.resume),
            )


def _storage(args: argparse.Namespace) -> str:
    return args.storage or default_runs_root()


def _execute(call, verbose: int, args: argparse.Namespace, display, run=None) -> int:
    with json_result(bool(args.json)) as emit:
        try:
            outcome = call()
        except AutoaugError:
            raise  # autoaug.launch.cli.main prints it and picks the exit status
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM outside Tune's trials (calibration, re-scoring...)
            interrupted = _interrupted(run)
            if interrupted is None:
                raise
            raise interrupted from None
        except (ValueError, FileNotFoundError) as exc:
            raise UserInputError(" ".join(str(exc).split())) from None
        display.stop()
        if args.json:
            emit(outcome_json(outcome))
            return 0
    if verbose >= 0:
        _print()
        _print(outcome.summary())
    if not args.quiet:  # a person reading: what to do with the stored policy
        _print()
        for line in next_steps_of(outcome):
            _print(line)
    return 0


def _interrupted(run):
    """The resumable line of a search stopped by Ctrl-C or SIGTERM where Tune does not catch it
    (Tune's trials end in the method's own :class:`SearchInterruptedError`): None before its run
    directory holds its state (nothing to resume) or once it finished."""
    try:
        resumable = run is not None and run.exists(CONFIG_FILE) and not run.exists(RESULT_FILE)
    except OSError:
        return None
    if not resumable:
        return None
    return SearchInterruptedError(
        f"search {run.name!r} stopped; resume it with: autoaug search --resume {run.name} --storage {run.storage}"
    )


def next_steps_of(outcome) -> list[str]:
    """The next steps (:func:`autoaug.launch.summary.next_steps`) of a finished search's stored
    policy: its reference, its store (unless the default one), the data it was searched on."""
    provenance = outcome.provenance or {}
    data = (provenance.get("dataset") or {}).get("source")
    schedule = outcome.provenance.get(SCHEDULE_KEY) or {}  # the schedule a user trains with (a method found one)
    store = outcome.store_uri
    if "://" not in store and os.path.abspath(os.path.expanduser(default_store_uri())) == os.path.abspath(store):
        store = None
    return next_steps(
        outcome.reference,
        store=store,
        data=data if isinstance(data, str) else None,
        schedule_stages=len(schedule.get("stages") or ()) if len(schedule.get("stages") or ()) > 1 else None,
        base=outcome.policy.base,
    )


def outcome_json(outcome) -> dict:
    """The ``--json`` document of a finished search."""
    counts = outcome.provenance["counts"]
    return {
        "ref": outcome.reference,
        "name": outcome.policy.name,
        "version": outcome.version,
        "store": outcome.store_uri,
        "run_dir": outcome.run_dir,
        "policy_hash": outcome.policy.content_hash,
        "policy": outcome.policy.to_dict(),
        "best_trial": None  # no trial ran (the time budget went to calibration)
        if outcome.best_trial is None
        else {
            "trial_id": outcome.best_trial.trial_id,
            "score": outcome.score,
            "epochs": outcome.best_trial.epochs,
        },
        "counts": dict(counts),
        "trials": [
            {
                "trial_id": t.trial_id,
                "status": t.status,
                "score": t.score,
                "epochs": t.epochs,
                "train_time_s": t.train_time_s,
                "error": t.error,
            }
            for t in outcome.trials
        ],
        "selection": outcome.provenance.get("selection"),
        "budget": outcome.provenance.get("budget"),  # the time budget: spent, sessions, what it ended
        "study_problems": list(outcome.study_problems),
        # the schedule a user trains with, when the method found one (policy: its last stage)
        **({SCHEDULE_KEY: outcome.provenance[SCHEDULE_KEY]} if outcome.provenance.get(SCHEDULE_KEY) else {}),
        **outcome.method_fields(),  # the method's own
    }
