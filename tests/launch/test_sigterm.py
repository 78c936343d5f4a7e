"""SIGTERM (``kill PID``; what Slurm, Kubernetes and systemd send before SIGKILL) stops a command as
Ctrl-C does (``autoaug.core.interrupt``): a search's trials saved, one line with the resume command,
exit 143; no native stack dump from Ray's handlers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

from autoaug.core import errors
from autoaug.core.interrupt import EXIT_SIGTERM, TermAsInterrupt, keeping_sigterm_handler, sigterm_as_interrupt
from autoaug.launch import cli
from autoaug.launch.cli import main
from autoaug.search.run_dir import CONFIG_FILE, autoaug_version

REPO = Path(__file__).resolve().parents[2]
SEARCH = [sys.executable, "-m", "autoaug.launch.cli", "search"]
TINY = ["--set", "train.epochs=1", "--set", "train.train_size=256", "--set", "train.val_size=128"]


@pytest.fixture(autouse=True)
def python_sigint():
    """Each test starts from Python's own Ctrl-C handler (raising KeyboardInterrupt), whatever an
    earlier test of this process left (Ray Tune's graceful stop, after an in-process experiment)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _with_command(monkeypatch, command) -> None:
    real = cli.build_parser

    def parser():
        p = real()
        p.set_defaults(func=command)
        return p

    monkeypatch.setattr(cli, "build_parser", parser)


def test_sigterm_raises_keyboard_interrupt_where_sigint_would():
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # Python's own: Ctrl-C raises
    try:
        _raises_keyboard_interrupt()
    finally:
        signal.signal(signal.SIGINT, previous)


def _raises_keyboard_interrupt():
    with sigterm_as_interrupt() as term:
        assert signal.getsignal(signal.SIGTERM) is term
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGTERM)
            threading.Event().wait(60)  # the handler runs at the next bytecode: never waited for
        assert term.received
    assert not isinstance(signal.getsignal(signal.SIGTERM), TermAsInterrupt)  # the previous handler back


def test_sigterm_calls_the_sigint_handler_in_place_tune_s_graceful_stop():
    seen = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: seen.append(signum))
    try:
        with sigterm_as_interrupt() as term:
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(3):  # (the handler ran before the loop's next bytecode)
                pass
            assert seen == [signal.SIGINT] and term.received
    finally:
        signal.signal(signal.SIGINT, previous)


def test_the_handler_replaced_by_ray_init_is_put_back():
    with sigterm_as_interrupt() as term:
        with keeping_sigterm_handler():
            signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(signum))  # what ray.init sets
        assert signal.getsignal(signal.SIGTERM) is term


def test_sigterm_stops_a_command_whose_sigint_is_ignored(monkeypatch, capsys):
    """A background job of a non-interactive shell (nohup, ``&``, a batch script) starts with SIGINT
    ignored: SIGTERM must still stop it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # (put back by the python_sigint fixture)

    def command(args):
        os.kill(os.getpid(), signal.SIGTERM)
        threading.Event().wait(60)

    _with_command(monkeypatch, command)
    assert main([]) == EXIT_SIGTERM
    assert capsys.readouterr().err.strip() == "autoaug: terminated (SIGTERM)"


def test_a_command_terminated_exits_143_with_one_line(monkeypatch, capsys):
    def command(args):
        os.kill(os.getpid(), signal.SIGTERM)
        threading.Event().wait(60)

    _with_command(monkeypatch, command)
    assert main([]) == EXIT_SIGTERM == 143
    assert capsys.readouterr().err.strip() == "autoaug: terminated (SIGTERM)"


def test_a_search_terminated_in_tune_says_how_to_resume_and_exits_143(monkeypatch, capsys):
    def command(args):  # Tune's handler during a fit: the experiment ends, the method raises
        stop = threading.Event()
        previous = signal.signal(signal.SIGINT, lambda signum, frame: stop.set())
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            stop.wait(60)
        finally:
            signal.signal(signal.SIGINT, previous)
        raise errors.SearchInterruptedError("search 'x' stopped with 1 of 3 trials finished; resume it with: ...")

    _with_command(monkeypatch, command)
    assert main([]) == 143
    assert capsys.readouterr().err.strip() == (
        "autoaug: terminated (SIGTERM): search 'x' stopped with 1 of 3 trials finished; resume it with: ..."
    )


def test_tune_s_signal_handlers_are_put_back_after_its_fit():
    """Tune's ``fit`` installs its graceful stop on SIGINT and SIGUSR1 and leaves it there: a Ctrl-C or
    SIGTERM while the search re-scores or stores would only set the finished experiment's flag."""
    from autoaug.search.tune.experiment import signal_handlers_kept

    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGUSR1)
    with signal_handlers_kept():
        signal.signal(signal.SIGINT, lambda signum, frame: None)  # what Tune's fit does
        signal.signal(signal.SIGUSR1, lambda signum, frame: None)
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGUSR1)) == before


def test_ctrl_c_still_exits_130(monkeypatch, capsys):
    def command(args):
        raise KeyboardInterrupt

    _with_command(monkeypatch, command)
    assert main([]) == 130
    assert capsys.readouterr().err.strip() == "autoaug: interrupted"


def _terminated_at(point: str, argv: list[str], tmp_path: Path) -> tuple[int, str, str]:
    """Run the search ``argv`` with the failpoint ``point`` armed to stall (a named pipe); once its
    driver is there (the event: it says so on the pipe), send it SIGTERM and release it; return its
    exit status, stdout and stderr."""
    where = Path(tempfile.mkdtemp(dir=tmp_path, prefix="term-"))
    gate, fired = where / "gate", where / "fired"
    os.mkfifo(gate)
    env = {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "AUTOAUG_FAILPOINTS": f"{point}=stall({gate})",
        "AUTOAUG_FAILPOINTS_FIRED": str(fired),
    }
    proc = subprocess.Popen(
        argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    out: list[str] = []
    err: list[str] = []
    readers = [
        threading.Thread(target=lambda: out.extend(proc.stdout), daemon=True),
        threading.Thread(target=lambda: err.extend(proc.stderr), daemon=True),
    ]
    for reader in readers:
        reader.start()
    # The release: opens the gate to write once the driver opens it to read (after the signal).
    release = threading.Thread(target=lambda: open(gate, "w").close(), daemon=True)
    try:
        with open(gate) as at_point:  # the driver writes "PID NAME" once it is at the point
            assert at_point.read().split() == [str(proc.pid), point.split(":")[0]]
        os.kill(proc.pid, signal.SIGTERM)
        release.start()
        proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if release.is_alive():  # the driver died before opening the gate again: let the thread go
            os.close(os.open(gate, os.O_RDONLY | os.O_NONBLOCK))
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # what is left of its session (the embedded Ray)
        except ProcessLookupError:
            pass
    for reader in readers:
        reader.join(timeout=30)
    return proc.returncode, "".join(out), "".join(err)


def _one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("autoaug:")]
    assert len(lines) == 1 and "Traceback" not in err, err[-3000:]
    return lines[0]


def _doctored_run_files_are_refused_in_one_line_each(run: Path, dirs: list[str], tmp_path: Path, capsys) -> None:
    """The stopped search's files doctored as a tampered, damaged or upgraded-under-it run directory
    would have them: ``--resume`` (and ``report``) say which file, which version made it and what to
    do, exit 2, no traceback (``tests/search/test_run_files.py`` has the same cases on files made up
    in the test); the original files put back."""
    name = run.name
    state_text, tuner = (run / CONFIG_FILE).read_text(), (run / "tuner.pkl").read_bytes()
    assert json.loads(state_text)["autoaug"] == autoaug_version()
    resume = ["search", "--resume", name, *dirs]
    start_again = f"start the search again with `autoaug search --name {name} --overwrite ...`"

    # search_config.json cut short: --resume and report name it (before: "Expecting value: ...")
    (run / CONFIG_FILE).write_text(state_text[:11])
    for command in (resume, ["report", name, "--storage", dirs[1], "--out", str(tmp_path / "r.png")]):
        assert main(command) == 2
        line = _one_error_line(capsys.readouterr().err)
        assert line.startswith(f"autoaug: error: {run}/{CONFIG_FILE} is damaged (not JSON: "), line
        assert line.endswith(f"or {start_again}")

    # tuner.pkl from autoaug 0.0.9, whose module autoaug.search.tune.progress was renamed since
    (run / CONFIG_FILE).write_text(json.dumps({**json.loads(state_text), "autoaug": "0.0.9"}))
    gone = b"autoaug.search.tune.progress"
    assert gone in tuner
    (run / "tuner.pkl").write_bytes(tuner.replace(gone, b"autoaug.search.tune.progres0"))
    assert main(resume) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert line == (
        f"autoaug: error: {run}/tuner.pkl was written by autoaug 0.0.9 (this is {autoaug_version()}): it names the "
        "module autoaug.search.tune.progres0, which this version does not have; finish the search with autoaug "
        f"0.0.9 (`pip install autoaug==0.0.9`), or start it again with `autoaug search --name {name} --overwrite ...`"
    )

    # ... whose class StudySearcher was renamed, by this very version (an edited checkout)
    (run / CONFIG_FILE).write_text(state_text)
    (run / "tuner.pkl").write_bytes(tuner.replace(b"StudySearcher", b"StudySearchex"))
    assert main(resume) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert line.startswith(f"autoaug: error: {run}/tuner.pkl was written by another build of autoaug "), line
    assert "it names autoaug.search.tune.searcher.StudySearchex, which this one does not have" in line

    # ... corrupted (before: "unregistered extension code 35551")
    (run / "tuner.pkl").write_bytes(tuner[:200] + bytes(255 - b for b in tuner[200:600]) + tuner[600:])
    assert main(resume) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert line.startswith(f"autoaug: error: {run}/tuner.pkl is damaged (not a pickle Ray Tune can read: "), line

    (run / CONFIG_FILE).write_text(state_text)
    (run / "tuner.pkl").write_bytes(tuner)


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_a_search_killed_in_calibration_then_sent_sigterm_in_its_trials_and_while_re_scoring_resumes_with_what_it_saved(
    tmp_path, cifar_small, capsys, kill_driver
):
    """One real search stopped three times, resumed each time:

    1. killed by SIGKILL in calibration once its first base run is saved (the crash matrix's
       ``calibrate.after_run_saved``);
    2. resumed -- calibration trains only the bases not saved -- and sent SIGTERM at a failpoint
       once its first trial's end is saved (the event: it says so on a named pipe): it ends its
       Tune experiment as Ctrl-C does, exit 143 with one line naming the resume command, no native
       dump from Ray's handler. Its run directory, doctored, is refused in one line a file;
    3. restored and resumed: it trains the other trial and is sent SIGTERM while re-scoring, once
       its first run is saved (after Tune's ``fit`` its graceful-stop handler stayed on SIGINT: the
       signal set a finished experiment's flag and the search went on to store, exit 0): exit 143
       again, the resume line, nothing stored, the run saved;
    4. the last ``--resume`` trains nothing of calibration again, keeps the saved re-scoring run,
       and stores the policy with exactly the requested trials."""
    dirs = ["--storage", str(tmp_path / "runs"), "--store", str(tmp_path / "store")]
    argv = [*SEARCH, "--preset", "smoke", "--data", str(cifar_small), "--name", "term", "--num-trials", "2"]
    argv += ["--concurrency", "1", "--no-warm-start", "--base", "auto", "--set", "base_extra_seeds=0"]
    argv += ["--set", "rescore=true", *TINY, *dirs]  # re-scoring's candidates: the two trials assembled, the best one
    resume = [*SEARCH, "--resume", "term", *dirs]
    resume_line = f"resume it with: autoaug search --resume term --storage {tmp_path / 'runs'}"
    run = tmp_path / "runs" / "term"

    kill_driver(argv, {**os.environ, "PYTHONUNBUFFERED": "1"}, "calibrate.after_run_saved:1", 300)
    saved = json.loads((run / "calibration.json").read_text())["runs"]
    assert len(saved) == 1 and not (run / "result.json").exists()  # the first base run, nothing after it
    ((key, first),) = saved.items()

    code, stdout, stderr = _terminated_at("search.after_trial_saved:1", resume, tmp_path)
    assert code == 143, stdout[-3000:] + stderr[-3000:]
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert lines == [
        f"autoaug: terminated (SIGTERM): search 'term' stopped with 1 of 2 trials finished; {resume_line}"
    ], stderr[-3000:]
    assert "SIGTERM received" not in stderr and "Traceback" not in stderr
    assert f"calibration: {key}:" not in stdout + stderr  # the saved run not trained again
    runs = json.loads((run / "calibration.json").read_text())["runs"]
    assert runs[key] == first and len(runs) >= 3  # every base measured, the saved run as it was

    _doctored_run_files_are_refused_in_one_line_each(run, dirs, tmp_path, capsys)

    code, stdout, stderr = _terminated_at("rescore.after_run_saved:1", resume, tmp_path)
    assert code == 143, stdout[-3000:] + stderr[-3000:]
    assert [line for line in stderr.splitlines() if line.strip()] == [
        f"autoaug: terminated (SIGTERM): search 'term' stopped; {resume_line}"
    ], stderr[-3000:]
    assert not (run / "result.json").exists()
    rescored = json.loads((run / "rescore.json").read_text())
    assert len(rescored) == 1
    ((rescore_key, rescore_first),) = rescored.items()

    resumed = subprocess.run(
        resume,
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        timeout=400,
        start_new_session=True,
    )
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert "stored as term@1" in resumed.stdout
    assert "calibration: base:" not in resumed.stdout  # calibration ended before: nothing trained again
    assert json.loads((run / "calibration.json").read_text())["runs"] == runs
    rescored = json.loads((run / "rescore.json").read_text())
    assert rescored[rescore_key] == rescore_first and len(rescored) >= 2  # the saved run kept, the others trained
    prov = json.loads((run / "result.json").read_text())["provenance"]
    assert len({t["trial_id"] for t in prov["trials"]}) == len(prov["trials"]) == 2  # exactly the requested
    assert set(prov["calibration"]["base"]["scores"]) == {"none", "crop", "standard"}
    selection = prov["selection"]
    assert len(selection["candidates"]) == len(rescored) and all(c["runs"] for c in selection["candidates"])
