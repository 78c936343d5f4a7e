"""benchmarks/per_test_cpu.py: each test is charged the CPU it spent, costliest first, per test and
per file (a check of the tool on a suite of two tests, not a timing)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def test_each_test_is_charged_its_own_cpu_costliest_first(tmp_path):
    (tmp_path / "test_two.py").write_text(
        "import time\n"
        "def test_quick():\n    pass\n"
        "def test_burns_a_cpu_second():\n"
        "    end = time.process_time() + 1.0\n"
        "    while time.process_time() < end:\n        pass\n"
    )
    out = tmp_path / "per-test.json"
    env = {**os.environ, "PYTHONPATH": str(BENCHMARKS)}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "per_test_cpu", "-p", "no:cacheprovider", "-p", "no:xdist"]
        + ["--per-test-cpu", str(out), "test_two.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    record = json.loads(out.read_text())
    names = [t["name"] for t in record["tests"]]
    assert names == ["test_two.py::test_burns_a_cpu_second", "test_two.py::test_quick"]
    burner, quick = record["tests"]
    # The machine's busy time: the burner's second, plus whatever else ran meanwhile (another
    # test process of the suite: at most as much again on 2 cores, far less in the quick test).
    assert burner["cpu_s"] >= 0.9 and burner["wall_s"] >= 0.9
    assert quick["cpu_s"] < burner["cpu_s"] / 2
    (file,) = record["files"]
    assert file["name"] == "test_two.py"
    assert file["cpu_s"] == pytest.approx(burner["cpu_s"] + quick["cpu_s"], abs=0.02)
    assert "per-test CPU: 2 tests" in proc.stdout and "test_two.py::test_burns_a_cpu_second" in proc.stdout
