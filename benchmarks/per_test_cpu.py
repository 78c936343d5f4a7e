"""Which tests the suite's CPU goes to: a pytest plugin charging each test the machine's busy CPU.

``benchmarks/suite_cpu.py`` says what kind of process spends the suite's CPU; this says which
test does. Each test is charged the machine's busy CPU time (``/proc/stat``) from the start of its
setup to the end of its teardown, so everything it starts (``autoaug`` subprocesses, embedded Ray
sessions and their workers) is counted, and a module-scoped fixture is charged to the first test
that uses it. Run the suite in one process on an otherwise idle machine, or the tests' CPU mixes:

    PYTHONPATH=benchmarks .venv/bin/pytest -n 0 -p per_test_cpu -q -p no:cacheprovider \\
        --per-test-cpu benchmarks/results/suite-time/per-test.json

The JSON holds every test's CPU-s and wall seconds, costliest first, and per file; the 30
costliest tests and files are printed at the end.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from suite_cpu import _busy_seconds

_charged: dict[str, tuple[float, float]] = {}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--per-test-cpu", metavar="JSON", help="write each test's machine CPU-s and wall seconds here")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    busy, start = _busy_seconds(), time.monotonic()
    try:
        return (yield)
    finally:
        _charged[item.nodeid] = (_busy_seconds() - busy, time.monotonic() - start)


def _table(rows: dict[str, tuple[float, float]]) -> list[dict]:
    return [
        {"name": name, "cpu_s": round(cpu, 2), "wall_s": round(wall, 2)}
        for name, (cpu, wall) in sorted(rows.items(), key=lambda kv: -kv[1][0])
    ]


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    if not _charged:
        return
    files: dict[str, tuple[float, float]] = {}
    for nodeid, (cpu, wall) in _charged.items():
        path = nodeid.split("::", 1)[0]
        old = files.get(path, (0.0, 0.0))
        files[path] = (old[0] + cpu, old[1] + wall)
    tests, by_file = _table(_charged), _table(files)
    total = sum(cpu for cpu, _ in _charged.values())
    write = terminalreporter.write_line
    write(f"per-test CPU: {len(tests)} tests, {total:,.0f} machine CPU-s")
    for title, rows in (("costliest tests", tests), ("costliest files", by_file)):
        write(f"{title}:   CPU-s   wall s")
        for row in rows[:30]:
            write(f"  {row['cpu_s']:8.1f} {row['wall_s']:8.1f}  {row['name']}")
    out = config.getoption("--per-test-cpu")
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(
            json.dumps({"total_cpu_s": round(total, 1), "tests": tests, "files": by_file}, indent=1) + "\n"
        )
