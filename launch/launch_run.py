"""What ``autoaug launch`` runs (:mod:`autoaug.launch.launch_cmd` builds its parser): the command
checked against the other commands' parsers, its local paths rewritten or shipped
(:func:`prepare_command`), the Ray Job submitted (:func:`submit`) and followed (:func:`follow`),
and ``status``, ``logs``, ``stop`` and ``list`` of submitted jobs."""

from __future__ import annotations

import argparse
import asyncio
import getpass
import json
import os
import secrets
import shlex
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from autoaug.core import ray_session as cluster
from autoaug.core.errors import UserInputError
from autoaug.launch import cli

__all__ = [
    "JOB_ACTIONS",
    "PreparedCommand",
    "prepare_command",
    "run",
    "submit",
    "wait_for_job",
]

#: ``autoaug launch ACTION JOB_ID`` actions on existing jobs.
JOB_ACTIONS = ("status", "logs", "stop", "list")

#: Local files up to this size named by the command are shipped with the job.
MAX_SHIPPED_FILE_BYTES = 1 << 20

_FILE_SUFFIXES = (".yaml", ".yml", ".json", ".toml", ".parquet", ".csv", ".txt", ".db", ".sqlite")
_TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")
_SHIPPED_FOLDER = "_autoaug_files"


# ----------------------------------------------------------------------------------------------
# Preparing the command


@dataclass
class PreparedCommand:
    """The command as it will run on the cluster."""

    args: list[str]
    working_dir: str | None = None  # folder uploaded as the job's working_dir
    staged_dir: str | None = None  # temporary folder created for shipped files (delete after submit)
    notes: list[str] = field(default_factory=list)

    def cleanup(self) -> None:
        if self.staged_dir is not None:
            shutil.rmtree(self.staged_dir, ignore_errors=True)
            self.staged_dir = None


def _is_uri(value: str) -> bool:
    # s3://..., file://..., sqlite:///..., and scheme-like references such as cifar10:ROOT,
    # preset:NAME or randaugment:n=2,m=9 (but not a Windows drive letter).
    head, sep, _ = value.partition(":")
    return bool(sep) and len(head) > 1 and head.replace("+", "").replace("-", "").replace(".", "").isalnum()


def _path_like(value: str, flag: str | None, path_flags: frozenset[str]) -> bool:
    if not value or value.startswith("-") or _is_uri(value):
        return False
    if flag in path_flags:
        return True
    return "/" in value or os.sep in value or value.startswith(("~", ".")) or value.lower().endswith(_FILE_SUFFIXES)


def _within(path: Path, folder: Path) -> bool:
    try:
        path.relative_to(folder)
        return True
    except ValueError:
        return False


def prepare_command(
    args: Sequence[str],
    *,
    working_dir: str | os.PathLike | None = None,
    keep_paths: bool = False,
    cwd: str | os.PathLike | None = None,
) -> PreparedCommand:
    """Rewrite the local paths in ``args`` for a job on the cluster (see the module docs).

    ``cwd`` is where relative paths are resolved (default: the current directory). Returns the
    new arguments, the working directory to upload and notes to show the user.
    """
    args = [str(a) for a in args]
    wd = Path(working_dir).expanduser().resolve() if working_dir is not None else None
    if wd is not None and not wd.is_dir():
        raise UserInputError(f"--working-dir {str(working_dir)!r} does not exist or is not a folder")
    prepared = PreparedCommand(args=list(args), working_dir=str(wd) if wd else None)
    if keep_paths:
        return prepared
    base = Path(cwd) if cwd is not None else Path.cwd()
    # Flags whose values are paths even without a '/' in them: those the command declares so.
    path_flags = cli.command_path_flags(args[0]) if args else frozenset()
    shipped: dict[Path, str] = {}
    out: list[str] = []
    flag: str | None = None
    for token in args:
        prefix, value, this_flag = "", token, flag
        if token.startswith("--") and "=" in token:
            name, _, value = token.partition("=")
            prefix, this_flag = name + "=", name
        elif token.startswith("-") and not _looks_negative_number(token):
            out.append(token)
            flag = token
            continue
        flag = None
        if not _path_like(value, this_flag, path_flags):
            out.append(token)
            continue
        local = (base / Path(value).expanduser()).resolve()
        if local.is_file() and local.stat().st_size <= MAX_SHIPPED_FILE_BYTES:
            if wd is not None and _within(local, wd):
                new = local.relative_to(wd).as_posix()
            elif wd is not None:
                new = str(local)
                prepared.notes.append(
                    f"{value} is outside --working-dir {wd}: passed as {new}, which the cluster's nodes must see"
                )
            else:
                if local not in shipped:
                    if prepared.staged_dir is None:
                        prepared.staged_dir = tempfile.mkdtemp(prefix="autoaug-launch-")
                        prepared.working_dir = prepared.staged_dir
                    rel = f"{_SHIPPED_FOLDER}/{len(shipped)}/{local.name}"
                    target = Path(prepared.staged_dir) / rel
                    target.parent.mkdir(parents=True)
                    shutil.copy2(local, target)
                    shipped[local] = rel
                    prepared.notes.append(f"shipping {value} with the job (as {rel})")
                new = shipped[local]
        else:
            new = str(local)
            if new != value:
                what = "folder" if local.is_dir() else ("file" if local.exists() else "path")
                prepared.notes.append(
                    f"{value} is a local {what}: passed as {new}; the cluster's nodes must see it there "
                    "(shared filesystem), otherwise give a URI such as s3://..."
                )
        out.append(prefix + new)
    prepared.args = out
    return prepared


def _looks_negative_number(token: str) -> bool:
    try:
        float(token)
        return True
    except ValueError:
        return False


def _known_commands() -> dict[str, argparse.ArgumentParser]:
    return {k: v for k, v in cli.command_parsers().items() if k != "launch"}


def _check_command(command: Sequence[str]) -> None:
    if not command:
        raise UserInputError(
            "nothing to launch: give the autoaug command after '--', e.g. "
            "`autoaug launch --address http://HEAD:8265 -- search --preset smoke --data ...`"
        )
    commands = _known_commands()
    name = command[0]
    if name not in commands:
        raise UserInputError(
            f"cannot launch {name!r}: expected an autoaug command ({', '.join(sorted(commands))}) after '--'"
        )
    # Check the arguments here, before anything reaches the cluster (argparse prints the error
    # and exits with status 2 itself).
    commands[name].parse_args(list(command[1:]))


# ----------------------------------------------------------------------------------------------
# Submitting and following


def _parse_env(items: Sequence[str]) -> dict[str, str]:
    env: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UserInputError(f"--env {item!r}: expected KEY=VALUE")
        env[key] = value
    return env


def _job_id(command: str) -> str:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    return f"autoaug-{command}-{stamp}-{secrets.token_hex(3)}"


#: Every job's environment (``--env`` overrides): output unbuffered, and the seconds Ray's job
#: supervisor waits after ``autoaug launch stop``'s SIGTERM before its SIGKILL (Ray's default, 3 s,
#: is too short for a search to end its trials and save them; the supervisor reads the job's
#: ``env_vars``).
JOB_ENV_VARS = {"PYTHONUNBUFFERED": "1", "RAY_JOB_STOP_WAIT_TIME_S": "60"}


def submit(
    client: Any,
    command: Sequence[str],
    *,
    working_dir: str | None = None,
    env_vars: dict[str, str] | None = None,
    job_id: str | None = None,
    python: str = "python",
    entrypoint_num_cpus: float | None = None,
) -> tuple[str, str]:
    """Submit ``autoaug COMMAND...`` as a Ray Job; returns ``(job_id, entrypoint)``."""
    runtime_env = cluster.project_runtime_env(working_dir=working_dir, env_vars={**JOB_ENV_VARS, **(env_vars or {})})
    entrypoint = shlex.join([python, "-m", "autoaug.launch.cli", *command])
    submission_id = job_id or _job_id(command[0])
    metadata = {
        "autoaug_command": command[0],
        "submitted_by": f"{getpass.getuser()}@{socket.gethostname()}",
    }
    try:
        submitted = client.submit_job(
            entrypoint=entrypoint,
            submission_id=submission_id,
            runtime_env=runtime_env,
            metadata=metadata,
            entrypoint_num_cpus=entrypoint_num_cpus,
        )
    except Exception as exc:
        raise cluster.job_error(client.get_address(), exc) from None
    return submitted, entrypoint


def _status(client: Any, job_id: str) -> Any:
    try:
        return client.get_job_info(job_id)
    except Exception as exc:
        raise cluster.job_error(client.get_address(), exc, job_id) from None


def _status_name(info: Any) -> str:
    status = info.status
    return getattr(status, "value", str(status))


def wait_for_job(client: Any, job_id: str, *, poll_s: float = 0.5, timeout_s: float | None = None) -> Any:
    """Poll until the job reaches a terminal state; returns its ``JobDetails``."""
    start = time.monotonic()
    while True:
        info = _status(client, job_id)
        if _status_name(info) in _TERMINAL:
            return info
        if timeout_s is not None and time.monotonic() - start > timeout_s:
            return info
        time.sleep(poll_s)


async def _tail(client: Any, job_id: str, out: Any) -> int:
    written = 0
    async for chunk in client.tail_job_logs(job_id):
        out.write(chunk)
        out.flush()
        written += len(chunk)
    return written


def follow(client: Any, job_id: str, *, out: Any = None) -> Any:
    """Stream the job's logs to ``out`` (default stdout) until it ends; returns its ``JobDetails``.

    If the log stream breaks, the rest of the log is fetched once the job has ended.
    """
    out = out or sys.stdout
    written = 0
    try:
        written = asyncio.run(_tail(client, job_id, out))
    except (RuntimeError, OSError) as exc:
        if "does not exist" in str(exc):
            raise cluster.job_error(client.get_address(), exc, job_id) from None
        print(f"autoaug launch: log stream interrupted ({exc}); waiting for the job to end", file=sys.stderr)
        info = wait_for_job(client, job_id)
        try:
            logs = client.get_job_logs(job_id)
        except Exception:
            logs = ""
        out.write(logs[written:] if written <= len(logs) else logs)
        out.flush()
        return info
    return wait_for_job(client, job_id)


def _exit_code(info: Any) -> int:
    return 0 if _status_name(info) == "SUCCEEDED" else 1


def _final_line(info: Any) -> str:
    status = _status_name(info)
    line = f"job {info.submission_id or info.job_id} {status}"
    if info.message:
        line += f": {info.message}"
    if getattr(info, "driver_exit_code", None) not in (None, 0):
        line += f" (driver exit code {info.driver_exit_code})"
    return line


# ----------------------------------------------------------------------------------------------
# Sub-commands


def cmd_submit(args: argparse.Namespace, command: list[str]) -> int:
    _check_command(command)
    prepared = prepare_command(command, working_dir=args.working_dir, keep_paths=args.keep_paths)
    env_vars = _parse_env(args.env or [])
    client = cluster.job_client(args.address)
    try:
        job_id, entrypoint = submit(
            client,
            prepared.args,
            working_dir=prepared.working_dir,
            env_vars=env_vars,
            job_id=args.job_id,
            python=args.python,
            entrypoint_num_cpus=args.entrypoint_num_cpus,
        )
    finally:
        prepared.cleanup()
    url = client.get_address()
    for note in prepared.notes:
        print(f"autoaug launch: {note}", file=sys.stderr)
    print(f"autoaug launch: submitted job {job_id} to {url}: {entrypoint}", file=sys.stderr)
    if args.no_wait:
        print(job_id)
        print(
            f"autoaug launch: follow it with `autoaug launch logs {job_id} --follow --address {url}`",
            file=sys.stderr,
        )
        return 0
    try:
        info = follow(client, job_id)
    except KeyboardInterrupt:
        print(
            f"\nautoaug launch: detached; job {job_id} keeps running on the cluster. Stop it with "
            f"`autoaug launch stop {job_id} --address {url}`",
            file=sys.stderr,
        )
        return 130
    print(f"autoaug launch: {_final_line(info)}", file=sys.stderr)
    return _exit_code(info)


def _when(ms: int | None) -> str:
    if not ms:
        return "-"
    return datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ")


def _info_dict(info: Any) -> dict[str, Any]:
    return {
        "job_id": info.submission_id or info.job_id,
        "status": _status_name(info),
        "message": info.message,
        "entrypoint": info.entrypoint,
        "start_time": _when(info.start_time),
        "end_time": _when(info.end_time),
        "driver_exit_code": getattr(info, "driver_exit_code", None),
        "metadata": info.metadata or {},
    }


def cmd_status(args: argparse.Namespace) -> int:
    client = cluster.job_client(args.address)
    info = _status(client, args.job_id)
    data = _info_dict(info)
    if args.json:
        print(json.dumps(data, indent=2))
        return 0
    for key in ("job_id", "status", "message", "entrypoint", "start_time", "end_time", "driver_exit_code"):
        if data[key] not in (None, ""):
            print(f"{key.replace('_', ' '):<17} {data[key]}")
    return 0


def cmd_logs(args: argparse.Namespace) -> int:
    client = cluster.job_client(args.address)
    info = _status(client, args.job_id)  # a clear error for an unknown id
    if args.follow:
        info = follow(client, args.job_id)
        print(f"autoaug launch: {_final_line(info)}", file=sys.stderr)
        return _exit_code(info)
    try:
        sys.stdout.write(client.get_job_logs(args.job_id))
    except Exception as exc:
        raise cluster.job_error(client.get_address(), exc, args.job_id) from None
    sys.stdout.flush()
    return 0


def cmd_stop(args: argparse.Namespace) -> int:
    client = cluster.job_client(args.address)
    info = _status(client, args.job_id)
    if _status_name(info) in _TERMINAL:
        print(f"job {args.job_id} already ended: {_status_name(info)}")
        return 0
    try:
        client.stop_job(args.job_id)
    except Exception as exc:
        raise cluster.job_error(client.get_address(), exc, args.job_id) from None
    if args.no_wait:
        print(f"requested job {args.job_id} to stop")
        return 0
    info = wait_for_job(client, args.job_id, timeout_s=args.timeout)
    print(_final_line(info))
    return 0 if _status_name(info) in _TERMINAL else 1


def cmd_list(args: argparse.Namespace) -> int:
    client = cluster.job_client(args.address)
    try:
        jobs = [j for j in client.list_jobs() if j.submission_id]
    except Exception as exc:
        raise cluster.job_error(client.get_address(), exc) from None
    jobs.sort(key=lambda j: j.start_time or 0)
    if args.json:
        print(json.dumps([_info_dict(j) for j in jobs], indent=2))
        return 0
    if not jobs:
        print(f"no submitted jobs on {client.get_address()}")
        return 0
    rows = [[j.submission_id, _status_name(j), _when(j.start_time), j.entrypoint] for j in jobs]
    header = ["JOB ID", "STATUS", "STARTED", "ENTRYPOINT"]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(3)]
    for row in [header, *rows]:
        print("  ".join(c.ljust(w) for c, w in zip(row[:3], widths)) + "  " + row[3])
    return 0


def _job_parser(action: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=f"autoaug launch {action}")
    if action != "list":
        parser.add_argument("job_id", metavar="JOB_ID", help="the job's submission id (printed by `autoaug launch`)")
    parser.add_argument("--address", default=argparse.SUPPRESS, help="Ray job server (dashboard) address")
    if action in ("status", "list"):
        parser.add_argument("--json", action="store_true", help="machine-readable output")
    if action == "logs":
        parser.add_argument(
            "--follow", "-f", action="store_true", help="stream the logs until the job ends; exit with its status"
        )
    if action == "stop":
        parser.add_argument("--no-wait", action="store_true", help="return once the stop was requested")
        parser.add_argument(
            "--timeout", type=float, default=60.0, help="seconds to wait for the job to stop (default 60)"
        )
    return parser


def run(args: argparse.Namespace) -> int:
    """``autoaug launch``: an action on a submitted job, or the command after ``--`` submitted."""
    rest = list(args.command or [])
    if rest and rest[0] == "--":
        rest = rest[1:]
    elif rest and rest[0] in JOB_ACTIONS:
        action = rest[0]
        sub = _job_parser(action).parse_args(rest[1:], namespace=argparse.Namespace(address=args.address))
        return {"status": cmd_status, "logs": cmd_logs, "stop": cmd_stop, "list": cmd_list}[action](sub)
    if args.entrypoint_num_cpus is not None and args.entrypoint_num_cpus < 0:
        raise UserInputError(f"--entrypoint-num-cpus must be >= 0, got {args.entrypoint_num_cpus}")
    return cmd_submit(args, rest)
