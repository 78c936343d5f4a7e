"""The sub-commands of ``autoaug policies`` that open the policy store (and so import pyarrow):
``list`` of a store its index does not answer for, ``check``, ``show``, ``export``, ``import`` and
``diff`` (:data:`COMMANDS`). :mod:`autoaug.launch.policies_cmd` builds their parser and imports
this module when one of them runs."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from autoaug.core.errors import UserInputError
from autoaug.core.values import loads_strict
from autoaug.launch.policies_print import CORRUPT, corrupt_note, print_summaries, record_dict, short_time, table
from autoaug.launch.summary import evaluation_lines, next_steps, provenance_lines
from autoaug.policies.bases import get
from autoaug.policies.describe import MAX_ROWS, describe, family_of
from autoaug.policies.diff import diff_policies
from autoaug.policies.policy import Policy, read_policy_text
from autoaug.policies.reference import resolve
from autoaug.policies.schedule import PROVENANCE_KEY, SCHEDULE_KIND, Schedule
from autoaug.policies.store import (
    ENV_VAR,
    CorruptArtifactError,
    CorruptVersion,
    PolicyStore,
    default_store_uri,
    validate_name,
)
from autoaug.search.budget import describe_budget
from autoaug.search.decide.calibration_choices import describe_calibration
from autoaug.search.decide.rescore import describe_selection

__all__ = ["COMMANDS", "resolve_ref"]


# ----------------------------------------------------------------------------------------------
# Helpers


def _open_store(args: argparse.Namespace):
    try:
        return PolicyStore(args.store)
    except (TypeError, ValueError) as exc:
        raise UserInputError(str(exc)) from None


def resolve_ref(ref: str, args: argparse.Namespace):
    """``(policy, record or None, label)`` for a REF, by the one precedence
    (:mod:`autoaug.policies.reference`)."""
    found = resolve(ref, store=args.store or default_store_uri())
    label = {"preset": f"preset:{found.label}", "file": ref}.get(found.source, found.label)
    return found.policy, found.record, label


def _schedule_of(ref: str, args: argparse.Namespace):
    """The schedule REF names when it has more than one stage (a PBA search's result, a schedule
    file), else None."""
    schedule = resolve(ref, store=args.store or default_store_uri()).schedule
    return schedule if schedule is not None and not schedule.is_fixed else None


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
    return "\n".join("  " + line for line in table(rows, header).splitlines())


def _policy_line(policy) -> str:
    return (
        f"{policy.name!r}: {len(policy.sub_policies)} sub-policies, {policy.num_magnitude_bins} "
        f"magnitude bins, base={policy.base}, ranges={policy.ranges}"
    )


def _base_line(policy) -> str:
    return f"{policy.base}: {get(policy.base).summary}, before the policy in training"


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


def cmd_list(args: argparse.Namespace) -> int:
    """``policies list`` read from the store itself (:mod:`autoaug.launch.policies_cmd` lists a local
    store its index answers for without it)."""
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
                        else record_dict(r)
                        for r in records
                    ],
                    indent=2,
                )
            )
            corrupt_note([r.ref for r in bad], [r.error for r in bad])
            return 0
        rows = [
            [f"@{r.version}", CORRUPT, "-", "-", "-"]
            if isinstance(r, CorruptVersion)
            else [
                f"@{r.version}",
                short_time(r.created_at),
                r.content_hash[:12],
                str(len(r.policy.sub_policies)),
                str(len(r.evaluations)),
            ]
            for r in records
        ]
        print(f"{args.name} in {store.uri}")
        print(table(rows, ["VERSION", "CREATED", "HASH", "SUB-POLICIES", "EVALUATIONS"]))
        corrupt_note([r.ref for r in bad], [r.error for r in bad])
        return 0
    return print_summaries(store.list(), store.uri, args.json)


def cmd_check(args: argparse.Namespace) -> int:
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
    return f" --store {shlex.quote(args.store)}" if args.store else ""


def _print_full_provenance(record) -> None:
    """``policies show --provenance``: what each record says at length, then the whole provenance
    and every evaluation as indented JSON."""
    if record.provenance:
        # What only --provenance prints: `policies show` of its summary does not load them (light path).
        from autoaug.search.decide.op_effects import describe_effects
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
    policy, record, label = resolve_ref(args.ref, args)
    schedule = _schedule_of(args.ref, args)
    if args.json:
        if record is not None:
            out = record_dict(record)
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
    """``policies export``."""
    # The export formats, read by `export` alone: `show` and `list` do not load them (light path).
    from autoaug.policies.export import UnsupportedOpError, schedule_to_dali_source, to_dali_source, to_timm

    policy, _, label = resolve_ref(args.ref, args)
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
    validate_name(args.name)
    if args.file == "-":
        text, source = sys.stdin.read(), "<stdin>"
    else:
        path = Path(args.file).expanduser()
        if not path.is_file():
            raise UserInputError(f"policy file {args.file!r} does not exist")
        source = str(path.resolve())
        try:
            text = read_policy_text(path)  # size limit and UTF-8 checked; the message below names the file
        except OSError as exc:
            raise UserInputError(f"policy file {source} cannot be read: {exc.strerror or exc}") from None
        except ValueError as exc:
            raise UserInputError(f"{source} is not a valid policy JSON: {exc}") from None
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
    a, _, label_a = resolve_ref(args.a, args)
    b, _, label_b = resolve_ref(args.b, args)
    print(diff_policies(a, b, label_a=label_a, label_b=label_b))
    return 0


#: Each sub-command of this module, by its name (``args.policies_command``).
COMMANDS = {
    "list": cmd_list,
    "check": cmd_check,
    "show": cmd_show,
    "export": cmd_export,
    "import": cmd_import,
    "diff": cmd_diff,
}
