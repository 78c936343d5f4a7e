"""How ``autoaug policies`` prints: text tables, times, a stored version as JSON, a store's
listing and the corrupt versions it met (:mod:`autoaug.launch.policies_cmd` and
:mod:`autoaug.launch.policies_run` share them; nothing here opens a store)."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from typing import Any

__all__ = ["CORRUPT", "table", "short_time", "record_dict", "corrupt_note", "print_summaries"]

CORRUPT = "CORRUPT"


def table(rows: list[list[str]], header: list[str]) -> str:
    """``rows`` under ``header``, each column as wide as its widest cell."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(header, widths)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    return "\n".join(lines)


def short_time(iso: str) -> str:
    # 2026-05-09T07:35:25.123456Z -> 2026-05-09 07:35:25Z
    return iso.replace("T", " ").split(".")[0] + "Z" if "." in iso else iso.replace("T", " ")


def record_dict(record) -> dict[str, Any]:
    """A stored version as ``--json`` shows it."""
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


def corrupt_note(refs: list[str], problems: list[str]) -> None:
    """The corrupt versions a listing met, one line each on stderr (the listing goes on)."""
    for ref, problem in zip(refs, problems):
        print(f"autoaug: warning: {ref} is corrupt: {problem}", file=sys.stderr)
    if refs:
        print("autoaug: warning: run 'autoaug policies check' to verify every version", file=sys.stderr)


def print_summaries(summaries: list, uri: str, as_json: bool) -> int:
    refs = [f"{s.name}@{v}" for s in summaries for v in s.corrupt]
    problems = [p for s in summaries for p in s.problems]
    if as_json:
        print(json.dumps([asdict(s) for s in summaries], indent=2))
        corrupt_note(refs, problems)
        return 0
    if not summaries:
        print(f"no policies in {uri}")
        return 0
    rows = [
        [
            s.name,
            f"@{s.latest_version}",
            str(s.num_versions),
            short_time(s.created_at) or CORRUPT,
            short_time(s.updated_at) or CORRUPT,
            s.content_hash[:12] or CORRUPT,
        ]
        for s in summaries
    ]
    print(f"{len(summaries)} polic{'y' if len(summaries) == 1 else 'ies'} in {uri}")
    print(table(rows, ["NAME", "LATEST", "VERSIONS", "CREATED", "UPDATED", "HASH"]))
    corrupt_note(refs, problems)
    return 0
