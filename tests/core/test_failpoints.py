"""Failpoints (autoaug.core.failpoints): the spec a test arms, each action, once across processes,
and that every point in the list is one call in the product code and one entry in the docs."""

from __future__ import annotations

import errno
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from autoaug.core import failpoints
from autoaug.core.failpoints import ENV_VAR, FIRED_ENV_VAR, POINTS, Failpoint, FailpointError, armed, hit, parse

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("core", "policies", "proxy_models", "search", "launch")


def test_a_spec_arms_named_points_with_a_count_and_an_argument():
    assert parse(
        "store.after_version_write=kill; train.mid_epoch:3=stall(/tmp/go);rescore.after_run_saved=raise(KeyboardInterrupt)"
    ) == {
        "store.after_version_write": Failpoint("store.after_version_write", "kill"),
        "train.mid_epoch": Failpoint("train.mid_epoch", "stall", 3, "/tmp/go"),
        "rescore.after_run_saved": Failpoint("rescore.after_run_saved", "raise", 1, "KeyboardInterrupt"),
    }
    assert parse("") == {} and parse(None) == {}


@pytest.mark.parametrize(
    "spec, message",
    [
        ("store.after_write=kill", "unknown failpoint 'store.after_write': expected one of search.after_trial_saved, "),
        (
            "train.mid_epoch=explode",
            "unknown action 'explode' of train.mid_epoch: expected one of kill, raise, enospc, stall",
        ),
        ("train.mid_epoch", "bad entry 'train.mid_epoch': expected NAME[:N]=ACTION[(ARG)]"),
        ("train.mid_epoch:0=kill", "the hit of train.mid_epoch must be 1 or more, got 0"),
        ("train.mid_epoch=raise(NoSuchError)", "train.mid_epoch=raise(NoSuchError): not a built-in exception"),
    ],
)
def test_a_bad_spec_is_refused_naming_the_entry(spec, message):
    with pytest.raises(ValueError, match=re.escape(f"{ENV_VAR}: {message}")):
        parse(spec)


def test_unarmed_points_do_nothing():
    assert failpoints._ARMED is None  # the test process is not armed
    for name in POINTS:
        hit(name)


def test_raise_and_enospc_fire_on_the_nth_hit_only():
    with armed("train.mid_epoch:3=raise;store.after_version_write=enospc"):
        hit("train.mid_epoch")
        hit("train.mid_epoch")
        hit("budget.after_save")  # another point, not armed
        with pytest.raises(FailpointError, match="failpoint train.mid_epoch"):
            hit("train.mid_epoch")
        hit("train.mid_epoch")  # it fired: the 4th hit passes
        with pytest.raises(OSError) as exc:
            hit("store.after_version_write")
        assert exc.value.errno == errno.ENOSPC
    hit("train.mid_epoch")  # disarmed after the block


def _python(code: str, env: dict, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True, **kwargs)


def test_kill_sends_sigkill_to_its_own_process_and_fires_once_across_processes(tmp_path):
    import os

    env = {**os.environ, ENV_VAR: "budget.after_save=kill", FIRED_ENV_VAR: str(tmp_path / "fired")}
    code = "from autoaug.core import failpoints; failpoints.hit('budget.after_save'); print('alive')"
    first = _python(code, env)
    assert first.wait(timeout=60) == -signal.SIGKILL and first.stdout.read() == ""
    assert (tmp_path / "fired" / "budget.after_save").read_text() == f"{first.pid}\n"
    second = _python(code, env)  # the point fired in another process: this one goes on
    assert second.wait(timeout=60) == 0 and second.stdout.read() == "alive\n"


def test_stall_says_on_its_pipe_that_it_is_at_the_point_and_waits_there_until_released(tmp_path):
    import os

    gate = tmp_path / "gate"
    os.mkfifo(gate)
    env = {**os.environ, ENV_VAR: f"rescore.after_run_saved=stall({gate})"}
    proc = _python(
        "from autoaug.core import failpoints; print('before', flush=True); "
        "failpoints.hit('rescore.after_run_saved'); print('released', flush=True)",
        env,
    )
    assert proc.stdout.readline() == "before\n"
    # The event: the process is at the point (reading blocks until it writes; nothing polls).
    assert gate.read_text() == f"{proc.pid} rescore.after_run_saved\n"
    assert proc.poll() is None  # it waits there...
    gate.write_text("go\n")  # ... until released
    assert proc.wait(timeout=60) == 0 and proc.stdout.read() == "released\n"


def test_stall_on_a_path_that_is_not_a_pipe_raises_naming_it(tmp_path):
    gate = tmp_path / "go"
    gate.touch()
    with failpoints.armed(f"rescore.after_run_saved=stall({gate})"):
        with pytest.raises(failpoints.FailpointError, match=r"stall\(.*go\): expected a named pipe \(mkfifo\)"):
            failpoints.hit("rescore.after_run_saved")


def test_a_bad_spec_in_the_environment_stops_the_process_at_import(tmp_path):
    import os

    proc = subprocess.run(
        [sys.executable, "-c", "import autoaug.core.failpoints"],
        capture_output=True,
        text=True,
        env={**os.environ, ENV_VAR: "nope=kill"},
        timeout=60,
    )
    assert proc.returncode != 0 and "AUTOAUG_FAILPOINTS: unknown failpoint 'nope'" in proc.stderr


def test_the_armed_spec_is_what_ray_workers_get(monkeypatch, tmp_path):
    monkeypatch.delenv(ENV_VAR, raising=False)
    assert failpoints.runtime_env_vars() == {}
    monkeypatch.setenv(ENV_VAR, "train.mid_epoch=kill")
    monkeypatch.setenv(FIRED_ENV_VAR, str(tmp_path))
    assert failpoints.runtime_env_vars() == {ENV_VAR: "train.mid_epoch=kill", FIRED_ENV_VAR: str(tmp_path)}


def _hits_in_code() -> list[str]:
    found = []
    for package in PACKAGES:
        for path in (REPO / package).rglob("*.py"):
            if path.name == "failpoints.py":  # its own documentation shows a call
                continue
            found += re.findall(r"failpoints\.hit\(\"([^\"]+)\"\)", path.read_text())
    return found


def test_every_point_is_one_call_in_the_code_and_documented():
    hits = _hits_in_code()
    assert sorted(hits) == sorted(POINTS)  # each listed point is hit once, and nothing else is hit
    docs = (REPO / "docs" / "failpoints.md").read_text()
    for name in POINTS:
        assert f"`{name}`" in docs, f"docs/failpoints.md does not describe {name}"
