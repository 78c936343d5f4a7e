"""benchmarks/suite_cpu.py: the kinds it sorts processes into, what one sweep of ``/proc``
charges a process, and the command's exit status passed through (a check of the tool, not a
timing)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest


@pytest.fixture(scope="module")
def sc(load_benchmark):
    return load_benchmark("suite_cpu")


@pytest.mark.parametrize(
    "names, kind",
    [
        (
            ["python .../workers/default_worker.py", "ray::IDLE", "ray::ImplicitFunc.train"],
            "ray worker: ImplicitFunc.train",
        ),
        (
            ["python .../workers/default_worker.py", "ray::IDLE", "ray::autoaug-calibrate:base:crop/seed=2000"],
            "ray worker: autoaug-calibrate",
        ),
        (["python .../workers/default_worker.py", "ray::IDLE"], "ray worker: idle, never ran anything"),
        (["/venv/lib/python3.11/site-packages/ray/core/src/ray/gcs/gcs_server --log_dir=x"], "ray gcs_server"),
        (["python -m autoaug.launch.cli search --resume crash"], "autoaug command (subprocess)"),
        (["python -u -c import sys;exec(eval(sys.stdin.readline()))"], "pytest-xdist worker (in-process tests)"),
    ],
)
def test_a_process_is_charged_to_its_kind(sc, names, kind):
    assert sc.kind_of(names) == kind


def test_a_sweep_charges_a_new_process_the_cpu_it_used_and_leaves_older_ones_out(sc):
    before = {pid for pid in os.listdir("/proc") if pid.isdigit()}
    burn = "import sys, time\nt = time.process_time()\nwhile time.process_time() - t < 0.5: pass\nprint('burnt', flush=True)\nsys.stdin.read()"
    child = subprocess.Popen([sys.executable, "-c", burn], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline() == "burnt\n"  # it has used its 0.5 s and waits on its stdin
        procs: dict = {}
        sc.sweep(before - {str(child.pid)}, procs)
        assert procs[str(child.pid)]["cpu_s"] >= 0.5 and "process_time" in procs[str(child.pid)]["names"][0]
        assert not set(procs) & (before - {str(child.pid)})  # processes that were there before: left out
    finally:
        child.stdin.close()
        child.wait()


def test_a_run_passes_the_commands_exit_status_through_and_records_it(sc, tmp_path, capsys):
    out = tmp_path / "cpu.json"
    assert sc.main(["--json", str(out), "--", sys.executable, "-c", "import sys; sys.exit(3)"]) == 3
    record = json.loads(out.read_text())
    assert record["exit"] == 3 and record["command"][-1] == "import sys; sys.exit(3)"
    assert "exit 3" in capsys.readouterr().out


def test_a_sweep_of_a_tree_charges_the_commands_descendants_and_not_other_work(sc):
    before = {pid for pid in os.listdir("/proc") if pid.isdigit()}
    burn = "import sys, time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\nprint('burnt', flush=True)\nsys.stdin.read()"
    # the command: a parent that starts a child (its grandchild burns), and unrelated work beside it
    parent_code = (
        "import subprocess, sys\n"
        f"c = subprocess.Popen([sys.executable, '-c', {burn!r}], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)\n"
        "print(c.pid, c.stdout.readline().strip(), flush=True)\nsys.stdin.read()\nc.stdin.close()\nc.wait()"
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", parent_code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    other = subprocess.Popen([sys.executable, "-c", burn], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        grandchild, word = parent.stdout.readline().split()
        assert word == "burnt" and other.stdout.readline() == "burnt\n"
        procs: dict = {}
        foreign: set = set()
        sc.sweep(before, procs, str(parent.pid), foreign)
        assert procs[grandchild]["cpu_s"] >= 0.3 and str(parent.pid) in procs
        assert str(other.pid) not in procs and str(other.pid) in foreign  # other work: left out
        sc.sweep(before, procs, str(parent.pid), foreign)  # and stays out
        assert str(other.pid) not in procs
    finally:
        for p in (parent, other):
            p.stdin.close()
            p.wait()


def test_tree_mode_counts_the_command_and_its_processes(sc, tmp_path, monkeypatch):
    import threading

    out = tmp_path / "cpu.json"
    gate = tmp_path / "gate"
    os.mkfifo(gate)
    # the command's child holds until the test writes to the gate, which it does once a sweep has
    # charged that child: an event, not a sleep
    child = f"import sys; open({str(gate)!r}).read(); sys.exit(4)"
    code = f"import subprocess, sys; sys.exit(subprocess.call([sys.executable, '-c', {child!r}]))"
    seen = threading.Event()
    sweep = sc.sweep

    def watched(before, procs, root=None, foreign=None):
        sweep(before, procs, root, foreign)
        # the child, not its parent: by its latest title (a sweep between its fork and its exec
        # records the parent's command line first, and the child's after it)
        if any(p["names"][-1].endswith("sys.exit(4)") for p in procs.values()):
            seen.set()

    monkeypatch.setattr(sc, "sweep", watched)
    result: dict = {}
    argv = ["--tree", "--interval", "0.05", "--json", str(out), "--", sys.executable, "-c", code]
    runner = threading.Thread(target=lambda: result.setdefault("exit", sc.main(argv)), daemon=True)
    runner.start()
    assert seen.wait(120), "no sweep charged the command's child"
    with open(gate, "w"):  # opens once the child reads it; closing lets it go
        pass
    runner.join(120)
    assert result["exit"] == 4
    names = [p["names"][-1] for p in json.loads(out.read_text())["processes"]]
    assert len(names) == 2 and any(n.endswith("sys.exit(4)") for n in names), names  # the command and its child only
