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


def test_stall_on_a_path_that_is_no_pipe_when_hit_raises_naming_it(tmp_path):
    gate = tmp_path / "go"  # nothing there when armed (the test may make it later), a plain file when hit
    with failpoints.armed(f"rescore.after_run_saved=stall({gate})"):
        gate.touch()
        with pytest.raises(failpoints.FailpointError, match=r"stall\(.*go\): expected a named pipe \(mkfifo\)"):
            failpoints.hit("rescore.after_run_saved")


# Malformed specs: each ends `autoaug` with one line and exit 2 before any work; importing this
# module with one does not raise (the first hit does).
BAD_SPECS = [
    ("search.after_trial_save=kill", "unknown failpoint 'search.after_trial_save': expected one of "),
    ("train.mid_epoch=crash", "unknown action 'crash' of train.mid_epoch: expected one of kill, raise, enospc, stall"),
    ("train.mid_epoch=stall(", "bad entry 'train.mid_epoch=stall(': unclosed '('; expected NAME[:N]=ACTION[(ARG)]"),
    ("train.mid_epoch=stall({file})", "train.mid_epoch=stall({file}): not a named pipe; expected one made with mkfifo"),
    ("train.mid_epoch=raise(object)", "train.mid_epoch=raise(object): not a built-in exception; expected the name"),
    ("train.mid_epoch=raise(NotAnException)", "train.mid_epoch=raise(NotAnException): not a built-in exception"),
    ("train.mid_epoch:0=kill", "the hit of train.mid_epoch must be 1 or more, got 0"),
    ("train.mid_epoch:-1=kill", "the hit of train.mid_epoch must be 1 or more, got -1"),
    ("0", "bad entry '0': expected NAME[:N]=ACTION[(ARG)]"),
]


@pytest.mark.parametrize("spec, message", BAD_SPECS)
def test_a_malformed_spec_is_one_line_and_exit_2_from_autoaug_before_any_work(
    spec, message, tmp_path, monkeypatch, capsys
):
    from autoaug.launch.cli import main

    plain = tmp_path / "plain-file"
    plain.write_text("not a pipe\n")
    spec, message = spec.format(file=plain), message.format(file=plain)
    monkeypatch.setenv(ENV_VAR, spec)
    # A search whose data is missing: refused for the spec first, so before the data is looked at.
    code = main(
        ["search", "--data", str(tmp_path / "absent"), "--preset", "smoke", "--storage", str(tmp_path / "runs")]
    )
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err.startswith(f"autoaug: error: {ENV_VAR}: {message}") and err.count("\n") == 1, err
    assert "Traceback" not in err and not (tmp_path / "runs").exists()


def test_importing_with_a_malformed_spec_does_not_raise_and_the_first_hit_does(tmp_path):
    import os

    code = (
        "from autoaug.core import failpoints\n"
        "print('imported', flush=True)\n"
        "try:\n"
        "    failpoints.hit('train.mid_epoch')\n"
        "except ValueError as exc:\n"
        "    print(type(exc).__name__, exc)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, ENV_VAR: "nope=kill"},
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "imported",
        f"UserInputError {ENV_VAR}: unknown failpoint 'nope': expected one of {', '.join(POINTS)}",
    ]


def test_the_autoaug_command_refuses_a_malformed_spec_in_one_line(tmp_path):
    import os

    proc = subprocess.run(
        [sys.executable, "-m", "autoaug.launch.cli", "policies", "list", "--store", str(tmp_path / "store")],
        capture_output=True,
        text=True,
        env={**os.environ, ENV_VAR: "train.mid_epoch:-1=kill"},
        timeout=120,
    )
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == f"autoaug: error: {ENV_VAR}: the hit of train.mid_epoch must be 1 or more, got -1\n"


def test_the_armed_spec_is_what_ray_workers_get(monkeypatch, tmp_path):
    monkeypatch.delenv(ENV_VAR, raising=False)
    assert failpoints.runtime_env_vars() == {}
    monkeypatch.setenv(ENV_VAR, "train.mid_epoch=kill")
    monkeypatch.setenv(FIRED_ENV_VAR, str(tmp_path))
    assert failpoints.runtime_env_vars() == {ENV_VAR: "train.mid_epoch=kill", FIRED_ENV_VAR: str(tmp_path)}
    monkeypatch.setenv(failpoints.ONLY_ENV_VAR, "NODE=2")  # and the marker of the processes it arms
    assert failpoints.runtime_env_vars()[failpoints.ONLY_ENV_VAR] == "NODE=2"


def test_only_a_process_whose_environment_has_the_marker_is_armed(tmp_path):
    """``AUTOAUG_FAILPOINTS_ONLY=VAR=VALUE``: a spec shipped with one job reaches every worker of it,
    and arms only those carrying a node's marker (the node-loss tests)."""
    import os

    from autoaug.core.failpoints import ONLY_ENV_VAR

    code = "from autoaug.core import failpoints; failpoints.hit('budget.after_save'); print('alive')"
    env = {**os.environ, ENV_VAR: "budget.after_save=kill", ONLY_ENV_VAR: "AUTOAUG_TEST_NODE=node2-abc"}
    elsewhere = _python(code, {k: v for k, v in env.items() if k != "AUTOAUG_TEST_NODE"})
    assert elsewhere.wait(timeout=60) == 0 and elsewhere.stdout.read() == "alive\n"  # no marker: unarmed
    other = _python(code, {**env, "AUTOAUG_TEST_NODE": "node2-old"})
    assert other.wait(timeout=60) == 0  # another node's marker: unarmed
    marked = _python(code, {**env, "AUTOAUG_TEST_NODE": "node2-abc"})
    assert marked.wait(timeout=60) == -signal.SIGKILL  # the marked process: armed
    proc = subprocess.run(
        [sys.executable, "-m", "autoaug.launch.cli", "policies", "list", "--store", str(tmp_path / "store")],
        capture_output=True,
        text=True,
        env={**env, ONLY_ENV_VAR: "no value"},
        timeout=120,
    )
    assert (proc.returncode, proc.stderr) == (
        2,
        f"autoaug: error: {ONLY_ENV_VAR}: bad value 'no value': expected VAR=VALUE (an environment variable's name)\n",
    )


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
