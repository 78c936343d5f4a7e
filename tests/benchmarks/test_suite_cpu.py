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
