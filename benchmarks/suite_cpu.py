"""Where a command's CPU goes, by kind of process: the tool behind the test suite's time budget.

Runs a command (``make test``, one pytest file, a search) and samples ``/proc`` every
``--interval`` seconds meanwhile: each process started after the command began is charged the CPU
time (user + system) it had used when last seen, under a kind read from its command line and,
for Ray workers, from the titles Ray gives them as they change roles (``ray::ImplicitFunc.train``:
a Tune trial actor; ``ray::autoaug-calibrate:...``: a calibration, re-scoring or compare task;
``ray::IDLE``: a pooled worker that never ran anything). Processes that existed before the
command are left out. A process that lives less than one interval may be missed, and each loses
at most one interval of CPU: the total is a floor, compared with the machine's busy time from
``/proc/stat`` over the same span.

    .venv/bin/python benchmarks/suite_cpu.py --json benchmarks/results/suite-time/cpu.json -- \\
        make test PYTEST_ARGS="-q -p no:cacheprovider --durations=80"

Linux only (``/proc``). Measure on an otherwise idle machine: every process started meanwhile
is counted, the command's or not.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import threading
import time

_TICK = os.sysconf("SC_CLK_TCK")
#: (kind, test on the joined command line and titles), first match wins.
_KINDS = (
    ("ray gcs_server", lambda t: "gcs_server" in t),
    ("ray raylet", lambda t: "/raylet" in t),
    ("ray dashboard agent", lambda t: "dashboard" in t),
    ("ray log_monitor", lambda t: "log_monitor" in t),
    ("ray runtime_env agent", lambda t: "runtime_env" in t),
    ("ray autoscaler monitor", lambda t: "monitor.py" in t),
)


def _stat(pid: str) -> tuple[float, str] | None:
    """``(CPU seconds so far, parent pid)`` of ``pid``, or None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / _TICK, fields[1]


def _cmdline(pid: str) -> str | None:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()[:300]
    except OSError:
        return None


def _busy_seconds() -> float:
    with open("/proc/stat") as f:
        user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, f.readline().split()[1:9])
    return (user + nice + system + irq + softirq + steal) / _TICK


def kind_of(names: list[str]) -> str:
    """The kind of a process from its command line and the titles it had (in order)."""
    text = " | ".join(names)
    for kind, test in _KINDS:
        if test(text):
            return kind
    roles = [m.group(1) for m in (re.match(r"ray::([\w.:-]+)", n) for n in names) if m and m.group(1) != "IDLE"]
    if roles:
        role = roles[-1]
        if role.startswith("autoaug-"):  # the project's tasks: autoaug-calibrate:..., autoaug-compare:...
            role = role.split(":")[0]
        return "ray worker: " + role
    if "ray::IDLE" in text:
        return "ray worker: idle, never ran anything"
    if "autoaug.launch.cli" in text or "/bin/autoaug " in text + " ":
        return "autoaug command (subprocess)"
    if "sys.stdin.readline" in text:  # execnet: a pytest-xdist worker
        return "pytest-xdist worker (in-process tests)"
    if "pytest" in text:
        return "pytest (collection, scheduling)"
    return "other: " + (names[-1].split(" ")[0].rsplit("/", 1)[-1] if names[-1] else "?")


def sweep(before: set[str], procs: dict, root: str | None = None, foreign: set[str] | None = None) -> None:
    """One pass over ``/proc``: each process not in ``before``, its CPU so far and any new title.

    With ``root`` (a pid), only ``root`` and the processes it started, directly or not (a new
    process is taken when its parent is one of them; the others go to ``foreign``): what one
    command costs while other work runs on the machine."""
    stats = {}
    for pid in os.listdir("/proc"):
        if pid.isdigit() and pid not in before and (foreign is None or pid not in foreign):
            stat = _stat(pid)
            if stat is not None:
                stats[pid] = stat
    if root is not None:
        taken = {pid for pid in procs} | {root}
        new = {pid for pid in stats if pid not in taken}
        grew = True
        while grew:  # a parent listed after its child is taken first
            grew = False
            for pid in sorted(new):
                if stats[pid][1] in taken:
                    taken.add(pid)
                    new.discard(pid)
                    grew = True
        if foreign is not None:
            foreign |= new
        stats = {pid: stat for pid, stat in stats.items() if pid in taken}
    for pid, (cpu, _parent) in stats.items():
        entry = procs.get(pid)
        if entry is None:
            line = _cmdline(pid)
            if not line:
                continue
            entry = procs[pid] = {"names": [line], "cpu_s": cpu}
        entry["cpu_s"] = max(entry["cpu_s"], cpu)
        line = _cmdline(pid)
        if line and line != entry["names"][-1]:
            entry["names"].append(line)


def sample(stop: threading.Event, interval: float, before: set[str], procs: dict, root=None) -> None:
    """:func:`sweep` every ``interval`` s until ``stop``, and once more when it is set. ``root``:
    a callable giving the command's pid (known once it has started), to count its processes only."""
    foreign: set[str] = set()

    def once() -> None:
        if root is None:
            sweep(before, procs)
        elif root() is not None:  # not before the command has started
            sweep(before, procs, root(), foreign)

    while not stop.wait(interval):
        once()
    once()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--interval", type=float, default=0.5, help="seconds between samples (default 0.5)")
    p.add_argument("--json", help="write the table and the per-process records here")
    p.add_argument(
        "--tree",
        action="store_true",
        help="count only the command and the processes it starts (directly or not), not everything "
        "started meanwhile: for a machine with other work on it",
    )
    p.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")
    args = p.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        p.error("give the command to measure after --")
    before = {pid for pid in os.listdir("/proc") if pid.isdigit()}
    procs: dict[str, dict] = {}
    stop = threading.Event()
    child: list[subprocess.Popen] = []
    root = (lambda: str(child[0].pid) if child else None) if args.tree else None
    sampler = threading.Thread(target=sample, args=(stop, args.interval, before | {str(os.getpid())}, procs, root))
    busy0, wall0 = _busy_seconds(), time.monotonic()
    sampler.start()
    child.append(subprocess.Popen(command))
    code = child[0].wait()
    stop.set()
    sampler.join()
    wall, busy = time.monotonic() - wall0, _busy_seconds() - busy0
    table: dict[str, dict] = {}
    for entry in procs.values():
        row = table.setdefault(kind_of(entry["names"]), {"cpu_s": 0.0, "processes": 0})
        row["cpu_s"] += entry["cpu_s"]
        row["processes"] += 1
    total = sum(row["cpu_s"] for row in table.values())
    print(
        f"\n{' '.join(command)}: exit {code}, {wall:.0f} s wall, machine busy {busy:.0f} CPU-s, processes seen {total:.0f}"
    )
    print(f"{'CPU-s':>8} {'share':>6} {'procs':>6} {'per proc':>9}  kind")
    for kind, row in sorted(table.items(), key=lambda kv: -kv[1]["cpu_s"]):
        n = row["processes"]
        print(
            f"{row['cpu_s']:8.0f} {100 * row['cpu_s'] / max(total, 1e-9):5.1f}% {n:6d} {row['cpu_s'] / n:8.1f}s  {kind}"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "command": command,
                    "exit": code,
                    "wall_s": wall,
                    "machine_busy_cpu_s": busy,
                    "cpus": os.cpu_count(),
                    "by_kind": table,
                    "processes": list(procs.values()),
                },
                f,
                indent=1,
            )
    return code


if __name__ == "__main__":
    sys.exit(main())
