"""``autoaug search``: find an augmentation policy with Ray Tune + Optuna and store it.

::

    autoaug search --data train.parquet --preset cpu --name cifar10-r8
    autoaug search --config search.yaml --num-trials 64 --address ray://head:10001
    autoaug search --resume cifar10-r8            # after Ctrl-C, kill -9, a crash...

Configuration layers, later ones winning: the preset (``--preset``, default ``cpu``), the YAML
file (``--config``), ``--set KEY=VALUE`` assignments, then the dedicated flags. See
docs/search.md.

Exit status: 0 success; 1 every trial failed (the first error is shown) or Ray failed; 2 bad
input (flags, config, data, an existing run name); 130 interrupted (resume with ``--resume``).
"""
from __future__ import annotations

import argparse
import logging
from typing import Any

from autoaug.launch.config import build_config, flag_overrides, layered_config
from autoaug.core.errors import UserInputError

__all__ = ["register", "run", "build_search_config"]

PRESETS = ("smoke", "cpu", "paper")
DEFAULT_PRESET = "cpu"

# argparse dest -> key of the nested search configuration (see search.config.SearchConfig)
_FLAG_KEYS: dict[str, Any] = {
    "data": "data",
    "name": "name",
    "num_trials": "num_trials",
    "concurrency": lambda v: {"concurrency": v or None},  # 0: as many as resources allow
    "cpus_per_trial": "cpus_per_trial",
    "gpus_per_trial": "gpus_per_trial",
    "storage": "storage",
    "store": "store",
    "optuna_storage": "optuna_storage",
    "seed": lambda v: {"seed": v, "train": {"seed": v}},
    "sampler": "sampler",
    "early_stopping": "early_stopping",
    "grace_period": "grace_period",
    "reduction_factor": "reduction_factor",
    "max_failures": "max_failures",
    "top_n": "top_n",
    "warm_start": lambda v: {"warm_start": [s.strip() for s in v.split(",") if s.strip()]},
    "rescore": "rescore",
    "exclude_ops": lambda v: {"space": {"exclude_ops": [s.strip() for s in v.split(",") if s.strip()]}},
    "sub_policies": "space.num_sub_policies",
    "verbose": "verbose",
}
# Flags that define a search and therefore cannot change when resuming one.
_DEFINING = (
    "data", "name", "num_trials", "concurrency", "cpus_per_trial", "gpus_per_trial", "optuna_storage",
    "seed", "sampler", "early_stopping", "grace_period", "reduction_factor", "max_failures", "top_n",
    "warm_start", "rescore", "exclude_ops", "sub_policies", "preset", "config", "assignments", "overwrite",
)  # fmt: skip


def build_search_config(args: argparse.Namespace):
    """The :class:`autoaug.search.config.SearchConfig` the flags, the YAML file and the preset describe."""
    from autoaug.search.config import SEARCH_PRESETS, SearchConfig

    flags = flag_overrides(args, _FLAG_KEYS)
    merged = layered_config(file=args.config, assignments=args.assignments, flags=flags)
    preset = args.preset or merged.pop("preset", None) or DEFAULT_PRESET
    merged.pop("preset", None)
    if preset not in SEARCH_PRESETS:
        raise UserInputError(f"unknown preset {preset!r}; expected one of {', '.join(SEARCH_PRESETS)}")
    return build_config(lambda d: SearchConfig.from_dict({"preset": preset, **d}), merged, what="search config")


def _print(text: str = "") -> None:
    print(text, flush=True)


def _describe(config, address: str | None) -> str:
    from autoaug.search.run_dir import RunDir
    from autoaug.search.study import study_url

    t = config.train
    concurrency = config.concurrency or "as resources allow"
    stopping = (
        f"ASHA (grace {config.grace_period} epochs, reduction factor {config.reduction_factor:g})"
        if config.early_stopping else "off"
    )  # fmt: skip
    return "\n".join(
        [
            f"search {config.name}: {config.num_trials} trials, concurrency {concurrency}, "
            f"{config.cpus_per_trial:g} CPU + {config.gpus_per_trial:g} GPU per trial, "
            f"sampler {config.sampler} (seed {config.seed}), early stopping {stopping}",
            f"  proxy: {t.model} on {t.data} (train {t.train_size or 'all'}, val {t.val_size or 'rest'}, "
            f"split seed {t.split_seed}), {t.epochs} epochs, batch {t.batch_size}, lr {t.lr:g}, seed {t.seed}",
            f"  space: {config.space.describe()}",
            f"  run directory: {RunDir(config.storage, config.name).uri}",
            f"  Optuna study: {config.name} in {study_url(config)}",
        ]
    )


def _session_factory(address: str | None, verbose: int):
    """Connect through :mod:`autoaug.core.ray_session` (embedded Ray, ``--address``, or the Ray Job's
    cluster; the project's packages are shipped to remote workers)."""
    import contextlib

    from autoaug.core.ray_session import ray_session

    @contextlib.contextmanager
    def session():
        with ray_session(
            address, log_to_driver=verbose >= 2, logging_level=logging.INFO if verbose >= 2 else logging.WARNING
        ) as info:
            if verbose >= 1:
                _print(f"  Ray: {info.describe()}")
            yield info

    return session


def run(args: argparse.Namespace) -> int:
    """Entry point of ``autoaug search`` (``args`` from the parser built by :func:`register`)."""
    if args.verbose is None:
        args.verbose = 0 if args.quiet else None
    if args.resume:
        given = [d for d in _DEFINING if getattr(args, d, None) not in (None, False, [])]
        if given:
            flags = ", ".join("--" + d.replace("_", "-").replace("assignments", "set") for d in given)
            raise UserInputError(
                f"--resume continues the saved search as it was defined; it cannot be combined with {flags} "
                "(allowed: --storage, --store, --address, --resume-errored)"
            )
        return _resume(args)
    config = build_search_config(args)
    return _search(config, args)


def _configure_logging(verbose: int) -> None:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.INFO if verbose >= 2 else optuna.logging.WARNING)
    logging.getLogger("search").setLevel(logging.INFO if verbose >= 2 else logging.WARNING)


def _search(config, args: argparse.Namespace) -> int:
    from autoaug.search import tuner
    from autoaug.search.records import describe_data

    try:
        config.check_runnable()
        describe_data(config.train)  # unreadable data: one line, before anything starts
    except ValueError as exc:
        raise UserInputError(" ".join(str(exc).split())) from None
    _configure_logging(config.verbose)
    if config.verbose >= 1:
        _print(_describe(config, args.address))
    session = _session_factory(args.address, config.verbose)
    return _execute(
        lambda: tuner.run_search(config, session=session, overwrite=bool(args.overwrite)), config.verbose
    )


def _resume(args: argparse.Namespace) -> int:
    from autoaug.search import tuner

    verbose = 1 if args.verbose is None else args.verbose
    _configure_logging(verbose)
    if verbose >= 1:
        from autoaug.search.run_dir import RunDir

        _print(f"resuming search {args.resume} from {RunDir(_storage(args), args.resume).uri}")
    session = _session_factory(args.address, verbose)
    return _execute(
        lambda: tuner.resume_search(
            args.resume, _storage(args), store=args.store, resume_errored=args.resume_errored, session=session,
        ),  # fmt: skip
        verbose,
    )


def _storage(args: argparse.Namespace) -> str:
    from autoaug.search.config import default_runs_root

    return args.storage or default_runs_root()


def _execute(call, verbose: int) -> int:
    from autoaug.core.errors import AutoaugError

    try:
        outcome = call()
    except AutoaugError:
        raise  # autoaug.launch.cli.main prints it and picks the exit status
    except (ValueError, FileNotFoundError) as exc:
        raise UserInputError(" ".join(str(exc).split())) from None
    if verbose >= 0:
        _print()
        _print(outcome.summary())
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``autoaug search``."""
    p = subparsers.add_parser(
        "search",
        help="search for an augmentation policy (Ray Tune + Optuna) and store it",
        description=(
            "Search the AutoAugment policy space with Optuna (through Ray Tune) on a proxy task, "
            "assemble the best trials' sub-policies into one policy and store it as NAME@VERSION. "
            "Layers: --preset, then --config FILE, then --set KEY=VALUE, then the flags below."
        ),
    )
    what = p.add_argument_group("what to search")
    what.add_argument("--data", metavar="PATH", help="training data: Parquet file/folder, ImageFolder, cifar10:ROOT or a URI")
    what.add_argument("--preset", choices=PRESETS, help=f"starting configuration (default {DEFAULT_PRESET})")
    what.add_argument("--config", metavar="FILE", help="YAML file with search settings (flags override it)")
    what.add_argument("--set", dest="assignments", action="append", metavar="KEY=VALUE",
                      help="override one setting, e.g. --set train.epochs=2 (repeatable)")
    what.add_argument("--name", help="run name: run directory, Optuna study and stored policy name (default: search-DATE-TIME)")
    what.add_argument("--num-trials", type=int, metavar="N", help="number of candidate policies to train")
    what.add_argument("--seed", type=int, help="seed of the sampler and of every trial's model init / data order")
    from autoaug.search.study import SAMPLERS

    what.add_argument("--sampler", choices=list(SAMPLERS), help="Optuna sampler (default tpe: multivariate TPE)")
    what.add_argument("--exclude-ops", metavar="OP,OP", help="operations left out of the search space, e.g. SamplePairing,Invert")
    what.add_argument("--sub-policies", type=int, metavar="K", help="sub-policies per candidate (default 5)")
    what.add_argument("--top-n", type=int, metavar="N", help="best trials concatenated into the final policy (default 5)")
    what.add_argument("--warm-start", metavar="REF,REF",
                      help="policies whose sub-policies are the first candidates (cpu preset: autoaugment-cifar10; "
                      "'' for none): presets, policy JSON files, stored versions")
    what.add_argument("--rescore", dest="rescore", action="store_const", const=True,
                      help="re-score the assembled policy against the best trial under the proxy and store the "
                      "better one (cpu preset: on)")
    what.add_argument("--no-rescore", dest="rescore", action="store_const", const=False,
                      help="store the assembled policy without re-scoring it")

    how = p.add_argument_group("how to run it")
    how.add_argument("--concurrency", type=int, metavar="N", help="trials at once (0: as many as resources allow)")
    how.add_argument("--cpus-per-trial", type=float, metavar="C", help="CPUs reserved per trial")
    how.add_argument("--gpus-per-trial", type=float, metavar="G", help="GPUs per trial; fractions share a GPU (0.25)")
    how.add_argument("--no-early-stopping", dest="early_stopping", action="store_const", const=False,
                     help="run every trial for all epochs (no ASHA)")
    how.add_argument("--grace-period", type=int, metavar="EPOCHS", help="ASHA: epochs before a trial can be stopped")
    how.add_argument("--reduction-factor", type=float, metavar="ETA", help="ASHA reduction factor")
    how.add_argument("--max-failures", type=int, metavar="N", help="retries of a trial that raises")
    how.add_argument("--address", metavar="ADDR",
                     help="Ray cluster to use (ray://head:10001 or auto); default: start an embedded local Ray")

    where = p.add_argument_group("where results go")
    where.add_argument("--storage", metavar="DIR|URI", help="root of run directories (default $AUTOAUG_RUNS or ~/.autoaug/runs)")
    where.add_argument("--store", metavar="URI", help="policy store (default $AUTOAUG_STORE or ~/.autoaug/policies)")
    where.add_argument("--optuna-storage", metavar="URL", help="Optuna storage URL (default: SQLite optuna.db in the run directory)")
    where.add_argument("--overwrite", action="store_true", default=None, help="delete an existing run of the same name first")

    again = p.add_argument_group("resuming")
    again.add_argument("--resume", metavar="NAME", help="continue the search NAME after an interruption or crash")
    again.add_argument("--resume-errored", action="store_true", help="with --resume: also retry trials that had failed")

    out = p.add_argument_group("output")
    out.add_argument("-q", "--quiet", action="store_true", help="no progress lines, only the result")
    out.add_argument("-v", "--verbose", action="store_const", const=2, help="also Ray Tune's status table and trial logs")
    p.set_defaults(func=run)
