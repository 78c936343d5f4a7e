"""``autoaug policies``: inspect and move policies in a policy store.

Sub-commands::

    autoaug policies list [NAME]                       names (or the versions of NAME)
    autoaug policies show REF [--provenance]           sub-policies, provenance (summarised; all of it), evaluations
    autoaug policies export REF [--format json] [--out FILE]
    autoaug policies import FILE --name NAME [--metadata JSON] [--force]
    autoaug policies diff A B
    autoaug policies check [--grace SECONDS]           verify every version, remove leftovers (fsck)
    autoaug policies preview REF --data PATH --out grid.png [--num-images 8] [--columns 8]

``--store URI`` selects the store (default ``$AUTOAUG_STORE``, else ``~/.autoaug/policies``).
A REF is a preset (``trivialaugment``, ``preset:randaugment:n=2,m=9``...; not stored), a path
to a policy JSON file, or a stored reference (``name``, ``name@latest``, ``name@3``, a
content-hash prefix), in that order of precedence (:mod:`autoaug.policies.reference`): a stored
policy named like a preset is reached with ``name@latest``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from autoaug.core.errors import UserInputError
from autoaug.launch.options import JSON, Option, add_options, option

_REF_HELP = (
    "policy reference, first match wins: a preset (NAME or preset:NAME), a path to a policy JSON file, "
    "a stored NAME, NAME@latest, NAME@VERSION or content-hash prefix (>= 6 hex digits)"
)


# ----------------------------------------------------------------------------------------------
# Helpers


def _open_store(args: argparse.Namespace):
    from autoaug.policies.store import PolicyStore

    try:
        return PolicyStore(args.store)
    except (TypeError, ValueError) as exc:
        raise UserInputError(str(exc)) from None


def _resolve(ref: str, args: argparse.Namespace):
    """``(policy, record or None, label)`` for a REF, by the one precedence
    (:mod:`autoaug.policies.reference`)."""
    from autoaug.policies.reference import resolve
    from autoaug.policies.store import default_store_uri

    found = resolve(ref, store=args.store or default_store_uri())
    label = {"preset": f"preset:{found.label}", "file": ref}.get(found.source, found.label)
    return found.policy, found.record, label


def _schedule_of(ref: str, args: argparse.Namespace):
    """The schedule REF names when it has more than one stage (a PBA search's result, a schedule
    file), else None."""
    from autoaug.policies.reference import resolve
    from autoaug.policies.store import default_store_uri

    schedule = resolve(ref, store=args.store or default_store_uri()).schedule
    return schedule if schedule is not None and not schedule.is_fixed else None


def _table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(header, widths)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    return "\n".join(lines)


def _short_time(iso: str) -> str:
    # 2026-05-09T07:35:25.123456Z -> 2026-05-09 07:35:25Z
    return iso.replace("T", " ").split(".")[0] + "Z" if "." in iso else iso.replace("T", " ")


def _sub_policy_table(policy) -> str:
    if not policy.sub_policies:
        return "  (no sub-policies: the identity policy)"
    width = policy.max_ops_per_sub_policy
    header = ["#"]
    for k in range(1, width + 1):
        header += [f"op {k}", "p", "bin"]
    rows = []
    for i, sub in enumerate(policy.sub_policies):
        row = [str(i)]
        for op in sub:
            row += [op.op, f"{op.probability:g}", str(op.magnitude_bin)]
        row += [""] * (len(header) - len(row))
        rows.append(row)
    return "\n".join("  " + line for line in _table(rows, header).splitlines())


def _policy_line(policy) -> str:
    return (
        f"{policy.name!r}: {len(policy.sub_policies)} sub-policies, {policy.num_magnitude_bins} "
        f"magnitude bins, base={policy.base}, ranges={policy.ranges}"
    )


def _base_line(policy) -> str:
    from autoaug.policies.bases import get

    return f"{policy.base}: {get(policy.base).summary}, before the policy in training"


def _record_dict(record) -> dict[str, Any]:
    return {
        "ref": record.ref,
        "name": record.name,
        "version": record.version,
        "content_hash": record.content_hash,
        "base": record.policy.base,
        "created_at": record.created_at,
        "location": record.location,
        "policy": record.policy.to_dict(),
        "provenance": record.provenance,
        "evaluations": [asdict(e) for e in record.evaluations],
    }


def _write_text(text: str, out: str | None) -> None:
    if out is None or out == "-":
        sys.stdout.write(text)
        return
    path = Path(out).expanduser()
    if not path.parent.is_dir():
        raise UserInputError(f"cannot write {out!r}: folder {str(path.parent)!r} does not exist")
    path.write_text(text, encoding="utf-8")


# ----------------------------------------------------------------------------------------------
# Sub-commands


_CORRUPT = "CORRUPT"


def _corrupt_note(refs: list[str], problems: list[str]) -> None:
    """The corrupt versions a listing met, one line each on stderr (the listing goes on)."""
    for ref, problem in zip(refs, problems):
        print(f"autoaug: warning: {ref} is corrupt: {problem}", file=sys.stderr)
    if refs:
        print("autoaug: warning: run 'autoaug policies check' to verify every version", file=sys.stderr)


def _list_local_store(args: argparse.Namespace) -> tuple[list, str] | None:
    """``(summaries, store uri)`` of a local store listed from its index alone, without pyarrow
    (:func:`autoaug.policies.index.list_local`); None when that is not enough (a store behind a
    URI, one that does not exist, a version without a matching index entry)."""
    from autoaug.core.location import Location
    from autoaug.policies.index import default_store_uri, list_local

    try:
        location = Location.parse(args.store or default_store_uri(), what="policy store")
    except (UserInputError, ValueError):
        return None  # the store says what is wrong with it
    if not location.local:
        return None
    summaries = list_local(location.path)
    return None if summaries is None else (summaries, location.uri)


def _print_summaries(summaries: list, uri: str, as_json: bool) -> int:
    refs = [f"{s.name}@{v}" for s in summaries for v in s.corrupt]
    problems = [p for s in summaries for p in s.problems]
    if as_json:
        print(json.dumps([asdict(s) for s in summaries], indent=2))
        _corrupt_note(refs, problems)
        return 0
    if not summaries:
        print(f"no policies in {uri}")
        return 0
    rows = [
        [
            s.name,
            f"@{s.latest_version}",
            str(s.num_versions),
            _short_time(s.created_at) or _CORRUPT,
            _short_time(s.updated_at) or _CORRUPT,
            s.content_hash[:12] or _CORRUPT,
        ]
        for s in summaries
    ]
    print(f"{len(summaries)} polic{'y' if len(summaries) == 1 else 'ies'} in {uri}")
    print(_table(rows, ["NAME", "LATEST", "VERSIONS", "CREATED", "UPDATED", "HASH"]))
    _corrupt_note(refs, problems)
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    if not args.name:
        # A local store whose index matches its files is listed without pyarrow (start-up time).
        fast = _list_local_store(args)
        if fast is not None:
            return _print_summaries(*fast, args.json)

    from autoaug.policies.store import ENV_VAR, CorruptVersion

    store = _open_store(args)
    if (
        not args.name
        and not args.store
        and not os.environ.get(ENV_VAR)
        and not store.exists()
        and not os.path.isfile(store.uri)
    ):
        # The built-in default store (~/.autoaug/policies) is created by the first save: on a fresh
        # machine, listing it is the first command a new user types, and nothing saved is no error.
        if args.json:
            print("[]")
        else:
            print(
                f"no policies yet in {store.uri} (the default store: searches and 'autoaug policies import' save there)"
            )
        return 0
    # A store the user named (--store, $AUTOAUG_STORE) that does not exist is an error: a typo
    # must not read as "no policies".
    store.require_exists()
    if args.name:
        records = store.history(args.name, include_corrupt=True)
        bad = [r for r in records if isinstance(r, CorruptVersion)]
        if args.json:
            print(
                json.dumps(
                    [
                        {
                            "ref": r.ref,
                            "name": r.name,
                            "version": r.version,
                            "corrupt": True,
                            "error": r.error,
                            "location": r.location,
                        }
                        if isinstance(r, CorruptVersion)
                        else _record_dict(r)
                        for r in records
                    ],
                    indent=2,
                )
            )
            _corrupt_note([r.ref for r in bad], [r.error for r in bad])
            return 0
        rows = [
            [f"@{r.version}", _CORRUPT, "-", "-", "-"]
            if isinstance(r, CorruptVersion)
            else [
                f"@{r.version}",
                _short_time(r.created_at),
                r.content_hash[:12],
                str(len(r.policy.sub_policies)),
                str(len(r.evaluations)),
            ]
            for r in records
        ]
        print(f"{args.name} in {store.uri}")
        print(_table(rows, ["VERSION", "CREATED", "HASH", "SUB-POLICIES", "EVALUATIONS"]))
        _corrupt_note([r.ref for r in bad], [r.error for r in bad])
        return 0
    return _print_summaries(store.list(), store.uri, args.json)


def cmd_check(args: argparse.Namespace) -> int:
    from autoaug.policies.store import CorruptArtifactError

    if args.grace < 0:
        raise UserInputError(f"--grace must be >= 0 seconds, got {args.grace:g}")
    store = _open_store(args)
    report = store.check(grace_seconds=args.grace)
    if args.json:
        print(
            json.dumps(
                {
                    "store": report.uri,
                    "verified": list(report.verified),
                    "corrupt": [asdict(c) for c in report.corrupt],
                    "removed": list(report.removed),
                    "kept": list(report.kept),
                    "indexed": list(report.indexed),
                },
                indent=2,
            )
        )
    else:
        for path in report.removed:
            print(f"removed leftover of a killed save: {path}")
        for path in report.kept:
            print(f"kept (younger than {args.grace:g} s, a save may be running): {path}")
        for c in report.corrupt:
            print(f"CORRUPT {c.ref}: {c.error}")
        if report.indexed:
            print(
                f"indexed {len(report.indexed)} version(s) saved before the store had an index "
                f"(so that listing verifies them without pyarrow): {', '.join(report.indexed[:10])}"
                + (", ..." if len(report.indexed) > 10 else "")
            )
        print(
            f"{report.uri}: {len(report.verified)} version(s) verified, {len(report.corrupt)} corrupt, "
            f"{len(report.removed)} leftover(s) removed"
        )
    if report.corrupt:
        refs = ", ".join(c.ref for c in report.corrupt[:10]) + (", ..." if len(report.corrupt) > 10 else "")
        raise CorruptArtifactError(
            f"{len(report.corrupt)} corrupt version(s) in {report.uri}: {refs} (delete or restore those files)"
        )
    return 0


def _store_flag(args: argparse.Namespace) -> str:
    """`` --store URI`` as the person gave it (nothing for the default store)."""
    import shlex

    return f" --store {shlex.quote(args.store)}" if args.store else ""


def _print_full_provenance(record) -> None:
    """``policies show --provenance``: what each record says at length, then the whole provenance
    and every evaluation as indented JSON."""
    if record.provenance:
        from autoaug.search.budget import describe_budget
        from autoaug.search.decide.calibrate import describe_calibration  # light: no Ray, no Optuna
        from autoaug.search.decide.op_effects import describe_effects
        from autoaug.search.decide.rescore import describe_selection
        from autoaug.search.records import ran_text

        for heading, lines in (
            ("measured before the search", describe_calibration(record.provenance.get("calibration"))),
            ("measured by the search", describe_effects(record.provenance.get("op_effects"), unclear=20)),
            (
                "re-scored after the trials",
                describe_selection(record.provenance.get("selection"), ran_text(record.provenance)),
            ),
            ("time budget", describe_budget(record.provenance.get("budget"))),
        ):
            if lines:
                print(heading)
                for line in lines:
                    print("  " + line)
                print()
        print("provenance")
        for line in json.dumps(record.provenance, indent=2, sort_keys=True).splitlines():
            print("  " + line)
    else:
        print("provenance    (none recorded)")
    print()
    if record.evaluations:
        print(f"evaluations ({len(record.evaluations)})")
        for ev in record.evaluations:
            print(f"  attached {ev.attached_at}")
            for line in json.dumps(ev.results, indent=2, sort_keys=True).splitlines():
                print("    " + line)
    else:
        print("evaluations   (none attached)")


def _print_next_steps(record, schedule, args: argparse.Namespace) -> None:
    from autoaug.launch.summary import next_steps

    data = (record.provenance or {}).get("dataset", {}).get("source") if isinstance(record.provenance, dict) else None
    lines = next_steps(
        record.ref,
        store=args.store or None,
        data=data if isinstance(data, str) else None,
        schedule_stages=len(schedule.stages) if schedule is not None else None,
        base=record.policy.base,
    )
    for line in lines:
        print(line)


def cmd_show(args: argparse.Namespace) -> int:
    policy, record, label = _resolve(args.ref, args)
    schedule = _schedule_of(args.ref, args)
    if args.json:
        if record is not None:
            out = _record_dict(record)
        else:
            out = {"ref": label, "content_hash": policy.content_hash, "base": policy.base, "policy": policy.to_dict()}
        if schedule is not None:
            out["schedule"] = {**schedule.to_dict(), "content_hash": schedule.content_hash}
        print(json.dumps(out, indent=2))
        return 0
    print(label if record is not None else f"{label} (not stored)")
    fields = [("content hash", policy.content_hash)]
    if record is not None:
        fields += [("created", record.created_at), ("location", record.location)]
    fields.append(("policy", _policy_line(policy)))
    fields.append(("base", _base_line(policy)))
    if schedule is not None:
        fields.append(
            (
                "schedule",
                f"{len(schedule.stages)} stages from {', '.join(f'{s.start:.0%}' for s in schedule.stages)} "
                f"of training (hash {schedule.content_hash[:12]}); the policy is the last stage",
            )
        )
    for key, value in fields:
        print(f"  {key:<13} {value}")
    print()
    from autoaug.policies.describe import MAX_ROWS, describe, family_of

    if args.all or (family_of(policy) is None and len(policy.sub_policies) <= MAX_ROWS):
        print(_sub_policy_table(policy))  # every sub-policy
    else:  # a family point by its parameters, a large union by operation
        print("\n".join(describe(policy)))
    if schedule is not None:
        print()
        print(schedule.table())
    if record is None:
        return 0
    print()
    if args.provenance:
        _print_full_provenance(record)
    else:
        from autoaug.launch.summary import evaluation_lines, provenance_lines

        lines = provenance_lines(record.provenance)
        for line in lines or ["provenance    (none recorded)"]:
            print(line)
        if lines:
            print(f"  (all of it: autoaug policies show {record.ref}{_store_flag(args)} --provenance, or --json)")
        print()
        for line in evaluation_lines(record.evaluations):
            print(line)
    print()
    _print_next_steps(record, schedule, args)
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from autoaug.policies.export import UnsupportedOpError, schedule_to_dali_source, to_dali_source, to_timm

    policy, _, label = _resolve(args.ref, args)
    schedule = _schedule_of(args.ref, args)
    if args.stage is not None:
        stages = schedule.stages if schedule is not None else (None,)
        if not 0 <= args.stage < len(stages):
            raise UserInputError(f"--stage {args.stage}: {label} has {len(stages)} stage(s), 0 to {len(stages) - 1}")
        if schedule is not None:
            policy, schedule, label = schedule.stages[args.stage].policy, None, f"{label} stage {args.stage}"
    try:
        if schedule is not None and args.format == "timm":
            raise UserInputError(
                f"{label} is a schedule of {len(schedule.stages)} stages (from "
                f"{', '.join(f'{s.start:.0%}' for s in schedule.stages)} of training) and timm takes one policy: "
                f"export one stage with --stage K (0 to {len(schedule.stages) - 1}; the last is the stored policy)"
            )
        if schedule is not None:
            text = schedule_to_dali_source(schedule) if args.format == "dali" else schedule.to_json() + "\n"
        elif args.format == "dali":
            text = to_dali_source(policy)
        elif args.format == "timm":
            text = json.dumps(to_timm(policy), indent=2) + "\n"
        else:
            text = policy.to_json() + "\n"
    except UnsupportedOpError as exc:
        raise UserInputError(str(exc)) from None
    _write_text(text, args.out)
    if args.out not in (None, "-"):
        print(f"exported {label} to {args.out}", file=sys.stderr)
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    from autoaug.policies.policy import Policy
    from autoaug.policies.store import validate_name

    validate_name(args.name)
    if args.file == "-":
        text, source = sys.stdin.read(), "<stdin>"
    else:
        path = Path(args.file).expanduser()
        if not path.is_file():
            raise UserInputError(f"policy file {args.file!r} does not exist")
        from autoaug.policies.policy import read_policy_text

        source = str(path.resolve())
        try:
            text = read_policy_text(path)  # size limit and UTF-8 checked; the message below names the file
        except OSError as exc:
            raise UserInputError(f"policy file {source} cannot be read: {exc.strerror or exc}") from None
        except ValueError as exc:
            raise UserInputError(f"{source} is not a valid policy JSON: {exc}") from None
    from autoaug.policies.schedule import PROVENANCE_KEY, SCHEDULE_KIND, Schedule

    schedule = None
    try:
        if f'"{SCHEDULE_KIND}"' in text and '"stages"' in text:
            schedule = Schedule.from_json(text)  # stored as its last stage, the schedule in the provenance
            policy = schedule.final
        else:
            policy = Policy.from_json(text)
    except ValueError as exc:
        raise UserInputError(f"{source} is not a valid policy JSON: {exc}") from None
    metadata: dict[str, Any] = {}
    if args.metadata:
        from autoaug.core.values import loads_strict

        try:
            metadata = loads_strict(args.metadata)  # as strict as the policy: each key once
        except ValueError as exc:  # invalid JSON, or a key given twice
            raise UserInputError(f"--metadata is not valid JSON: {exc}") from None
        if not isinstance(metadata, dict):
            raise UserInputError(f"--metadata must be a JSON object, got {type(metadata).__name__}")
    metadata.setdefault("imported_from", source)
    if schedule is not None and not schedule.is_fixed:
        if PROVENANCE_KEY in metadata:
            raise UserInputError(f"--metadata: {PROVENANCE_KEY!r} holds an imported schedule; use another key")
        metadata[PROVENANCE_KEY] = {**schedule.to_dict(), "content_hash": schedule.content_hash}
    store = _open_store(args)
    before = store.versions(args.name)
    version = store.save(policy, args.name, metadata, force=args.force)
    if before and version == before[-1]:
        print(f"{args.name}@{version} already holds this policy (hash {policy.content_hash[:12]}); nothing written")
    else:
        print(f"saved {args.name}@{version} (hash {policy.content_hash[:12]}) to {store.uri}")
    return 0


def cmd_diff(args: argparse.Namespace) -> int:
    from autoaug.policies.diff import diff_policies

    a, _, label_a = _resolve(args.a, args)
    b, _, label_b = _resolve(args.b, args)
    print(diff_policies(a, b, label_a=label_a, label_b=label_b))
    return 0


def _preview_images(data: str, num_images: int, image_size: int | None, draws: int = 1):
    """``num_images`` images spread evenly over the dataset (rows are often sorted by class),
    refused in one line before decoding when they and their ``draws`` cannot fit in memory."""
    import numpy as np

    from autoaug.proxy_models.data import DatasetError, open_dataset
    from autoaug.proxy_models.memory import check_preview_memory

    dataset = open_dataset(data)
    n = len(dataset)
    if n == 0:
        raise UserInputError(f"dataset {data!r} has no images")
    if image_size is not None and image_size < 1:
        raise UserInputError(f"--image-size must be >= 1, got {image_size}")
    indices = np.unique(np.linspace(0, n - 1, min(num_images, n)).round().astype(np.int64))
    size = image_size
    if size is None:
        try:
            size = dataset.own_image_size()
        except DatasetError:  # images of several sizes: the decode below says so
            size = None
    if size is not None:
        check_preview_memory(len(indices), draws, size)
    images, _ = dataset.images(indices, size=image_size)
    return images


def cmd_preview(args: argparse.Namespace) -> int:
    if args.num_images < 1:
        raise UserInputError(f"--num-images must be >= 1, got {args.num_images}")
    if args.columns < 1:
        raise UserInputError(f"--columns must be >= 1, got {args.columns}")
    if args.backend == "dali":
        from autoaug.core.extras import require

        require(
            ("nvidia.dali",), "autoaug policies preview --backend dali", alternative="or pass --backend torchvision"
        )
    policy, _, label = _resolve(args.ref, args)
    images = _preview_images(args.data, args.num_images, args.image_size, args.columns)
    try:
        from autoaug.policies.preview import render_grid
    except ImportError as exc:
        raise UserInputError(f"preview is not available: {exc}") from None
    path = render_grid(
        policy,
        images,
        Path(args.out).expanduser(),
        columns=args.columns,
        seed=args.seed,
        backend=args.backend,
        base=args.with_base,
    )
    drawn = f", base {policy.base} drawn first" if args.with_base else ""
    print(f"wrote {path}: {len(images)} images x {args.columns} draws of {label} ({args.backend}{drawn})")
    return 0


# ----------------------------------------------------------------------------------------------
# Registration


_STORE = option(
    "--store",
    kind="path",
    default=None,
    metavar="URI",
    help="policy store: a local folder or a pyarrow URI (s3://, gs://, hdfs://, file://); "
    "default $AUTOAUG_STORE, else ~/.autoaug/policies",
)
_EXPORT_OUT = option("--out", kind="path", metavar="FILE", help="write to FILE instead of stdout")
_PREVIEW_DATA = option(
    "--data",
    kind="path",
    required=True,
    metavar="PATH",
    help="dataset: a Parquet file or folder, an ImageFolder tree, or cifar10:ROOT",
)
_PREVIEW_OUT = option("--out", kind="path", required=True, metavar="FILE", help="PNG file to write")
#: The options of ``autoaug policies`` and its sub-commands that name paths (``autoaug launch``
#: rewrites them); the others are plain argparse arguments.
OPTIONS: tuple[Option, ...] = (_STORE, _EXPORT_OUT, _PREVIEW_DATA, _PREVIEW_OUT)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``autoaug policies`` and its sub-commands."""
    parser = subparsers.add_parser(
        "policies",
        help="list, show, export, import, diff and preview stored policies",
        description=(
            "Inspect the versioned policy store. A REF is, first match winning, a preset (NAME or "
            "preset:NAME), a path to a policy JSON file, or a stored NAME, NAME@latest, NAME@VERSION or "
            "content-hash prefix."
        ),
    )
    add_options(parser, [_STORE])
    parser.set_defaults(func=lambda args: (parser.print_help(), 2)[1])
    sub = parser.add_subparsers(dest="policies_command", metavar="SUBCOMMAND")

    # --store is accepted after the sub-command too; SUPPRESS keeps the value given before it.
    store_opt = argparse.ArgumentParser(add_help=False)
    add_options(
        store_opt,
        [
            dataclasses.replace(
                _STORE, argparse={**_STORE.argparse, "default": argparse.SUPPRESS, "help": "policy store (see above)"}
            )
        ],
    )

    p = sub.add_parser("list", parents=[store_opt], help="stored names, or the versions of one name")
    p.add_argument("name", nargs="?", help="show every version of this name")
    add_options(p, [JSON])
    p.set_defaults(func=cmd_list)

    p = sub.add_parser(
        "check", parents=[store_opt], help="verify every stored version; remove leftovers of killed saves (fsck)"
    )
    p.add_argument(
        "--grace",
        type=float,
        default=3600.0,
        metavar="SECONDS",
        help="leave temporary files and claims younger than this alone (default 3600)",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_check)

    p = sub.add_parser(
        "show",
        parents=[store_opt],
        help="sub-policies, provenance (summarised) and evaluations of a policy, and what to do with it next",
    )
    p.add_argument("ref", metavar="REF", help=_REF_HELP)
    p.add_argument(
        "--provenance",
        action="store_true",
        help="the whole provenance (every trial, the configuration, ...) and every evaluation in full, "
        "instead of their summary",
    )
    p.add_argument(
        "--all",
        action="store_true",
        help="every sub-policy in a table (by default a RandAugment or TrivialAugment point is shown by its "
        "family's parameters, and a policy of more than 25 sub-policies grouped by operation)",
    )
    add_options(p, [JSON])
    p.set_defaults(func=cmd_show)

    p = sub.add_parser(
        "export",
        parents=[store_opt],
        help="write a policy as JSON, as DALI auto_aug Python source, or for timm's AutoAugment",
    )
    p.add_argument("ref", metavar="REF", help=_REF_HELP)
    p.add_argument(
        "--format",
        choices=["json", "dali", "timm"],
        default="json",
        help="json: the canonical policy JSON (default); dali: Python building an nvidia.dali.auto_aug "
        "Policy from DALI's own augmentations; timm: timm's AutoAugment format (JSON)",
    )
    p.add_argument(
        "--stage",
        type=int,
        metavar="K",
        help="of a schedule (a PBA search's result): export its stage K alone, as a policy "
        "(default: the whole schedule; timm takes one stage)",
    )
    add_options(p, [_EXPORT_OUT])
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("import", parents=[store_opt], help="store a policy JSON file as the next version of NAME")
    p.add_argument("file", metavar="FILE", help="policy JSON file ('-' for stdin)")
    p.add_argument("--name", required=True, help="name to store it under")
    p.add_argument("--metadata", metavar="JSON", help="provenance to record, a JSON object")
    p.add_argument("--force", action="store_true", help="write a new version even if the latest one is identical")
    p.set_defaults(func=cmd_import)

    p = sub.add_parser("diff", parents=[store_opt], help="sub-policies added, removed and changed from A to B")
    p.add_argument("a", metavar="A", help=_REF_HELP)
    p.add_argument("b", metavar="B", help=_REF_HELP)
    p.set_defaults(func=cmd_diff)

    p = sub.add_parser("preview", parents=[store_opt], help="render a grid of images augmented by a policy")
    p.add_argument("ref", metavar="REF", help=_REF_HELP)
    add_options(p, [_PREVIEW_DATA, _PREVIEW_OUT])
    p.add_argument("--num-images", type=int, default=8, help="source images, spread over the dataset (rows; default 8)")
    p.add_argument("--columns", type=int, default=8, help="independent draws per image (default 8)")
    p.add_argument("--image-size", type=int, default=None, help="resize images to this size (needed when they differ)")
    p.add_argument("--seed", type=int, default=0, help="random seed of the draws (default 0)")
    p.add_argument(
        "--backend",
        choices=["dali", "torchvision"],
        default="dali",
        help="implementation that applies the policy (default dali)",
    )
    p.add_argument(
        "--with-base",
        action="store_true",
        help="draw the policy's base (crop, or crop + flip) before the policy, as in training; default: "
        "the policy step alone",
    )
    p.set_defaults(func=cmd_preview)
