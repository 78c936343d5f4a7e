"""SIGTERM (``kill PID``; what Slurm, Kubernetes and systemd send before SIGKILL) stops a command as
Ctrl-C does (``autoaug.core.interrupt``): a search's trials saved, one line with the resume command,
exit 143; no native stack dump from Ray's handlers. A real search sent SIGTERM in its trials and
while re-scoring: ``tests/launch/test_search_cmd.py`` (with the module's shared Ray for its last
resume)."""

from __future__ import annotations

import os
import signal
import sys
import threading

import pytest

from autoaug.core import errors
from autoaug.core.interrupt import EXIT_SIGTERM, TermAsInterrupt, keeping_sigterm_handler, sigterm_as_interrupt
from autoaug.launch import cli
from autoaug.launch.cli import main


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
