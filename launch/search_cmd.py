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
import dataclasses

from autoaug.core.errors import UserInputError
from autoaug.core.ray_session import parse_address
from autoaug.launch.config import build_config
from autoaug.launch.options import (
    CONFIG,
    JSON,
    SET,
    Once,
    Option,
    add_options,
    base_option,
    group_by_option,
    image_size_option,
    layered,
    option,
    per_class_option,
    space_option,
    split_size_options,
    warm_start_options,
)
from autoaug.search import config as search_config
from autoaug.search.config import METHODS, SEARCH_PRESETS, SearchConfig
from autoaug.search.decide.calibrate import AUTO
from autoaug.search.decide.calibration_choices import TRANSFER_REFS
from autoaug.search.run_dir import RunDir
from autoaug.search.space import FAMILIES
from autoaug.search.tune.study import study_url

__all__ = ["register", "run", "build_search_config"]

#: Checked by ``autoaug``'s main before the command runs (the search extra, autoaug.core.extras).
REQUIRES = ("ray", "optuna", "nvidia.dali")

DEFAULT_PRESET = "cpu"

# Flags that define a search and therefore cannot change when resuming one (and every method's own).
_DEFINING = (
    "data",
    "name",
    "concurrency",
    "cpus_per_trial",
    "gpus_per_trial",
    "optuna_storage",
    "seed",
    "sampler",
    "max_failures",
    "warm_start",
    "startup_trials",
    "rescore",
    "rescore_seeds",
    "rescore_max_seeds",
    "rescore_val_size",
    "exclude_ops",
    "sub_policies",
    "space",
    "preset",
    "config",
    "assignments",
    "overwrite",
    "train_size",
    "val_size",
    "train_per_class",
    "image_size",
    "group_by",
    "base",
    "calibration_from",
    "mlflow_uri",
    "method",
    "time_budget",
)


def _defining() -> tuple[str, ...]:
    return (*_DEFINING, *(opt.dest for opt in _method_options()))


def build_search_config(args: argparse.Namespace):
    """The :class:`autoaug.search.config.SearchConfig` the flags, the YAML file and the preset describe."""
    merged = layered(args, _options(), own=SearchConfig.config_keys())  # --set epochs=2: train.epochs
    preset = args.preset or merged.pop("preset", None) or DEFAULT_PRESET
    merged.pop("preset", None)
    if preset not in SEARCH_PRESETS:
        raise UserInputError(f"unknown preset {preset!r}; expected one of {', '.join(SEARCH_PRESETS)}")
    config = build_config(lambda d: SearchConfig.from_dict({"preset": preset, **d}), merged, what="search config")
    _check_auto_family(merged, config, preset)
    return config.with_warm_start_family()


def _check_auto_family(merged: dict, config, preset: str) -> None:
    """``--space auto`` asked for (the flag, ``--set family=auto``, ``family: auto`` in the file)
    means the family measured with the warm start: refused without ``--warm-start auto`` (the
    configuration alone would search its space's own family without a word). A preset's own
    ``family: auto`` with another warm start given is the family that warm start is a point of
    (:meth:`SearchConfig.with_warm_start_family`), as documented."""
    if merged.get("family") != AUTO or config.warm_start == AUTO:
        return
    warm = ", ".join(config.warm_start) if config.warm_start else "none"
    source = "" if "warm_start" in merged else f", the {preset} preset's"
    raise UserInputError(
        f"--space auto needs --warm-start auto (the family of the published policy that transfers best, measured "
        f"with it); the warm start is {warm}{source}: give --warm-start auto, or --space "
        f"{'|'.join(FAMILIES)}"
    )


def _describe(config, address: str | None) -> str:
    concurrency = config.concurrency or "as resources allow"
    startup = "" if config.startup_trials is None else f", {config.startup_trials} startup trials"
    studies = config.search_method.reporter.optuna_studies(config)  # None: the method uses no study
    return "\n".join(
        [
            f"search {config.name}: concurrency {concurrency}, "
            + (
                "packs of as many trials per process as measure fastest (--pack auto), "
                if config.pack == "auto"
                else f"packs of {config.pack} trials per process, "
                if config.pack != 1
                else ""
            )
            + (
                f"{config.cpus_per_trial:g} CPU per pack + {config.gpus_per_trial:g} GPU per trial"
                if config.pack != 1
                else f"{config.cpus_per_trial:g} CPU + {config.gpus_per_trial:g} GPU per trial"
            )
            + f", sampler {config.sampler} (seed {config.seed}{startup})",
            *config.search_method.reporter.describe(config),
            f"  space: {config.space.describe()}"
            + (
                "; family: auto (that of the published policy that transfers best, measured first)"
                if config.family == "auto" and config.warm_start == "auto"
                else ""
            ),
            f"  {_start_line(config)}",
            f"  run directory: {RunDir(config.storage, config.name).uri}",
            *([f"  Optuna {studies} in {study_url(config)}"] if studies is not None else []),
        ]
    )


def _start_line(config) -> str:
    """Which base and warm start the search uses, or that it measures them first."""
    base = (
        "base: auto (each base alone trained under the proxy first; of those within the noise of "
        "the best, the one that augments most)"
        if config.base == AUTO
        else f"base: {config.space.base}"
    )
    if config.warm_start == AUTO:
        warm = f"warm start: auto (the best of {', '.join(TRANSFER_REFS)}, trained under the proxy first)"
    else:
        warm = f"warm start: {', '.join(config.warm_start)}" if config.warm_start else "warm start: none"
    reused = f"; calibration: reused from search {config.calibration_from!r}" if config.calibration_from else ""
    return f"{base}; {warm}{reused}"


def run(args: argparse.Namespace) -> int:
    """Entry point of ``autoaug search`` (``args`` from the parser built by :func:`register`): the
    flags checked and the configuration built here, then :mod:`autoaug.launch.search_run` runs it."""
    if args.verbose is None:
        args.verbose = 0 if args.quiet else None
    if args.quiet and args.json:
        raise UserInputError("--quiet and --json: give one (--json prints only the result, as JSON)")
    if args.address is not None:  # a malformed address: refused before the data are read
        parse_address(args.address)
    if args.resume:
        _check_resume(args)
    else:
        _check_conflicts(args)
        config = build_search_config(args)
        try:
            config.check_runnable()
        except ValueError as exc:
            raise UserInputError(" ".join(str(exc).split())) from None
    from autoaug.launch import search_run  # Optuna, Ray, the driver: what the search runs, not the parser

    if args.resume:
        return search_run.resume(args)
    return search_run.search(config, args, _describe(config, args.address))


def _check_resume(args: argparse.Namespace) -> None:
    """``--resume`` continues the search as it was defined: a flag that defines one is refused."""
    given = [d for d in _defining() if getattr(args, d, None) not in (None, False, [])]
    if given:
        flags = ", ".join("--" + d.replace("_", "-").replace("assignments", "set") for d in given)
        raise UserInputError(
            f"--resume continues the saved search as it was defined; it cannot be combined with {flags} "
            "(allowed: --storage, --store, --address, --resume-errored)"
        )


#: Flags that contradict each other, refused in one line whatever their order (each would
#: otherwise silently override or void the other): (a flag's dest, the value that conflicts, how
#: it is written, what it means; the dests it cannot be given with, what they mean).
CONFLICTS = (
    (
        "rescore",
        False,
        "--no-rescore",
        "no re-scoring, the assembled policy stored as it is",
        ("rescore_seeds", "rescore_max_seeds", "rescore_val_size"),
        "how the final candidates are re-scored and raced",
    ),
)


def _check_conflicts(args: argparse.Namespace) -> None:
    """Refuse two flags that contradict each other (:data:`CONFLICTS`), naming both."""
    for dest, value, flag, what, others, theirs in CONFLICTS:
        if getattr(args, dest, None) is not value:
            continue
        given = " ".join(
            f"--{o.replace('_', '-')} {getattr(args, o)}" for o in others if getattr(args, o, None) is not None
        )
        if given:
            raise UserInputError(
                f"{flag} and {given} contradict each other ({flag}: {what}; {given}: {theirs}); give one"
            )


def _choices(registry: str) -> list[str]:
    """The names a registry of :mod:`autoaug.search.config` offers (presets, methods, samplers...)."""
    return list(getattr(search_config, registry))


def _method_help() -> str:
    return "; ".join(f"{name}: {m.help}" for name, m in METHODS.items())


def _method_options() -> tuple[Option, ...]:
    """The flags the registered methods declare (:class:`autoaug.search.methods.base.OptionSpec`)."""
    return tuple(
        option(spec.flag, key=spec.key, group=spec.group, help=spec.help, **spec.argparse)
        for m in METHODS.values()
        for spec in m.options
    )


def _options() -> tuple[Option, ...]:
    """Every option of ``autoaug search``: the shared ones, then the registered methods' own."""
    return (*_shared(), *_method_options())


def _pack_value(text: str) -> int | str:
    """``--pack``: an integer, or ``auto`` (the range is the configuration's to refuse)."""
    if text.strip().lower() == "auto":
        return "auto"
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer or 'auto', got {text!r}") from None


def _shared() -> tuple[Option, ...]:
    """The options of ``autoaug search`` every method shares, with the key of the nested search
    configuration each sets (see :class:`autoaug.search.config.SearchConfig`); the presets and
    methods offered are those registered when the parser is built; in the order of the help."""
    return (
        *_data_options(),
        *_space_options(),
        *_proxy_options(),
        *_rescore_options(),
        option("--method", key="method", group="method", choices=_choices("METHODS"), help=_method_help()),
        *_how_options(),
        *_where_options(),
        *_again_and_output_options(),
    )


def _data_options() -> tuple[Option, ...]:
    """What to search: the data, the preset and configuration layers, the run's name, the seed."""
    return (
        option(
            "--data",
            key="data",
            kind="path",
            group="what",
            metavar="PATH",
            help="training data: Parquet file/folder, ImageFolder, cifar10:ROOT or a URI",
        ),
        option(
            "--preset",
            group="what",
            action=Once,
            choices=_choices("SEARCH_PRESETS"),
            help=f"starting configuration (default {DEFAULT_PRESET})",
        ),
        CONFIG,
        SET,
        option(
            "--name",
            key="name",
            group="what",
            help="run name: run directory, Optuna study and stored policy name (default: search-DATE-TIME)",
        ),
        option(
            "--seed",
            key=lambda v: {"seed": v, "train": {"seed": v}},
            group="what",
            type=int,
            help="seed of the sampler and of every trial's model init / data order",
        ),
    )


def _space_options() -> tuple[Option, ...]:
    """The sampler and the space it proposes candidates in."""
    return (
        option(
            "--sampler",
            key="sampler",
            group="what",
            choices=_choices("SAMPLERS"),
            help="Optuna sampler (default tpe: multivariate TPE; local: moves from the incumbent, the warm start)",
        ),
        option(
            "--startup-trials",
            key="startup_trials",
            group="what",
            type=int,
            metavar="N",
            help="tpe/gp/cmaes propose at random until N trials (warm start included) have finished",
        ),
        space_option(group="what"),
        option(
            "--exclude-ops",
            key=lambda v: {"space": {"exclude_ops": [s.strip() for s in v.split(",") if s.strip()]}},
            group="what",
            metavar="OP,OP",
            help="operations left out of the search space, e.g. SamplePairing,Invert",
        ),
        option(
            "--sub-policies",
            key="space.num_sub_policies",
            group="what",
            type=int,
            metavar="K",
            help="sub-policies per candidate (default 5; the aa space only)",
        ),
    )


def _proxy_options() -> tuple[Option, ...]:
    """The proxy's split and image size, the groups kept on one side, the base, the warm start and a
    reused calibration."""
    return (
        *split_size_options("train.", group="what"),
        per_class_option("train.", group="what"),
        image_size_option("train.", group="what"),
        group_by_option("train.", group="what"),
        base_option(
            "or auto (the cpu preset's default): the proxy trained with each base alone before the search; of "
            "the best and the bases within the noise of it, the one that augments most (docs/search.md, "
            '"Searching your own dataset")',
            group="what",
            auto=True,
        ),
        *warm_start_options(group="what"),
        option(
            "--calibration-from",
            key="calibration_from",
            group="what",
            metavar="NAME",
            help="reuse the calibration of the earlier search NAME (same --storage, data, split and proxy) instead "
            "of measuring the bases and published policies again: its time budget goes to the trials "
            '(docs/search.md, "Reusing a calibration")',
        ),
    )


def _rescore_options() -> tuple[Option, ...]:
    """How the final candidates are re-scored and raced."""
    return (
        option(
            "--no-rescore",
            key="rescore",
            group="what",
            dest="rescore",
            action="store_const",
            const=False,
            help="store the assembled policy without re-scoring the final candidates under the proxy",
        ),
        option(
            "--rescore-seeds",
            key=lambda v: {"rescore": True, "rescore_seeds": v},
            group="what",
            type=int,
            metavar="N",
            help="re-score each final candidate with N proxy runs (fresh seeds) and store the best mean",
        ),
        option(
            "--rescore-max-seeds",
            key=lambda v: {"rescore": True, "rescore_max_seeds": v or None},
            group="what",
            type=int,
            metavar="N",
            help="race the final candidates: those within the noise of the leader get more runs, up to N each "
            "(0 or at most --rescore-seeds: no race; the cpu and gpu presets: 3)",
        ),
        option(
            "--rescore-val-size",
            key="rescore_val_size",
            group="what",
            type=int,
            metavar="N",
            help="validation images of the re-scoring runs (default: the proxy's --val-size)",
        ),
    )


def _how_options() -> tuple[Option, ...]:
    """How the search runs: trials at once, packs, resources, retries, the time budget, the cluster."""
    return (
        option(
            "--concurrency",
            key=lambda v: {"concurrency": v or None},
            group="how",
            type=int,
            metavar="N",
            help="trials at once (0: as many as resources allow)",
        ),
        option(
            "--pack",
            key="pack",
            group="how",
            type=_pack_value,
            metavar="K",
            help="trials (candidates, or PBA's members) trained together by one process on one device, each "
            "still its own trial, and "
            "calibration's and re-scoring's runs, and density's fold models, in packs as large (default 1: one "
            "per process; auto: the size measured fastest on the device)",
        ),
        option(
            "--cpus-per-trial",
            key="cpus_per_trial",
            group="how",
            type=float,
            metavar="C",
            help="CPUs reserved per trial (with --pack: per pack server)",
        ),
        option(
            "--gpus-per-trial",
            key="gpus_per_trial",
            group="how",
            type=float,
            metavar="G",
            help="GPUs per trial; fractions share a GPU (0.25); with --pack a server takes its trials' share, at most 1",
        ),
        option(
            "--max-failures",
            key="max_failures",
            group="how",
            type=int,
            metavar="N",
            help="retries of a trial that raises",
        ),
        option(
            "--time-budget",
            key="time_budget_s",
            group="how",
            metavar="DURATION",
            help="wall-time budget of the whole search (calibration, trials, re-scoring, storing; a resume continues "
            "with what is left), e.g. 30m; also 1h30m, 90s or seconds. Trials stop when what is left is what "
            "re-scoring and storing need; no preset sets one",
        ),
        option(
            "--address",
            group="how",
            metavar="ADDR",
            help="Ray cluster to use (ray://head:10001 or auto); default: start an embedded local Ray",
        ),
    )


def _where_options() -> tuple[Option, ...]:
    """Where results go: run directories, the policy store, the Optuna database, MLflow."""
    return (
        option(
            "--storage",
            key="storage",
            kind="path",
            group="where",
            metavar="DIR|URI",
            help="root of run directories (default $AUTOAUG_RUNS or ~/.autoaug/runs)",
        ),
        option(
            "--store",
            key="store",
            kind="path",
            group="where",
            metavar="URI",
            help="policy store (default $AUTOAUG_STORE or ~/.autoaug/policies)",
        ),
        option(
            "--optuna-storage",
            key="optuna_storage",
            group="where",
            metavar="URL",
            help="Optuna storage URL (default: SQLite optuna.db in the run directory); postgresql://USER@HOST/DB "
            "needs the postgres extra",
        ),
        option(
            "--mlflow-uri",
            key="mlflow_uri",
            group="where",
            metavar="URI",
            help="also log every trial to MLflow at this tracking URI (folder, file://, sqlite://, http://); "
            "TensorBoard event files are always in the run directory",
        ),
        option(
            "--overwrite",
            group="where",
            action="store_true",
            default=None,
            help="delete an existing run of the same name first",
        ),
    )


def _again_and_output_options() -> tuple[Option, ...]:
    """Resuming a search, and what it prints."""
    return (
        option(
            "--resume", group="again", metavar="NAME", help="continue the search NAME after an interruption or crash"
        ),
        option(
            "--resume-errored",
            group="again",
            action="store_true",
            help="with --resume: also retry trials that had failed",
        ),
        option("-q", "--quiet", group="output", action="store_true", help="no progress, only the result"),
        option(
            "-v",
            "--verbose",
            key="verbose",
            group="output",
            action="store_const",
            const=2,
            help="also Ray's and Tune's own output: banners, warnings, status table, the trials' logs",
        ),
        dataclasses.replace(JSON, group="output"),
    )


#: Every option of ``autoaug search``: the shared ones and the built-in methods' (a parser built
#: after another method was registered has that one's too: :func:`_options`).
OPTIONS: tuple[Option, ...] = _options()
_GROUPS = {
    "what": "what to search",
    "method": "search method",
    "how": "how to run it",
    "where": "where results go",
    "again": "resuming",
    "output": "output",
}


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``autoaug search``."""
    p = subparsers.add_parser(
        "search",
        help="search for an augmentation policy (Ray Tune + Optuna) and store it",
        description=(
            "Search the AutoAugment policy space (or the RandAugment or TrivialAugment family: --space) with "
            "Optuna (through Ray Tune) on a proxy task, assemble the best trials' sub-policies into one policy "
            "(the best point, in the two families) and store it as NAME@VERSION. "
            "Layers: --preset, then --config FILE, then --set KEY=VALUE, then the flags below."
        ),
    )
    add_options(p, _options(), _GROUPS)
    p.set_defaults(func=run)
