"""What a benchmark's JSON record says about where its figures come from: the command, this
checkout's commit and the date, beside the benchmark's own fields (the machine, the rows)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


def commit() -> str:
    """This checkout's short commit hash ("" outside a git checkout)."""
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO)
    except OSError:
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


def write_record(out: Path, script: str, argv: Sequence[str] | None, **fields: Any) -> dict[str, Any]:
    """``{"command", "commit", "date", **fields}`` written to ``out`` as JSON (its folder made),
    and said in one line; ``argv``: the script's arguments (None: this process's)."""
    record = {
        "command": " ".join(["python", f"benchmarks/{script}", *(argv if argv is not None else sys.argv[1:])]),
        "commit": commit(),
        "date": time.strftime("%Y-%m-%d"),
        **fields,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=2) + "\n")
    print(f"written {out}")
    return record
