"""Fixtures of the search tests: a real PostgreSQL server for the Optuna study database.

``postgres`` (module-scoped: stopped when the test file that uses it ends) starts one server from
the PostgreSQL binaries found on the machine (``initdb`` / ``pg_ctl`` on ``PATH``, else the newest
``/usr/lib/postgresql/*/bin``): ``initdb``
into a fresh temporary folder (a superuser ``autoaug`` with a password, checked on TCP;
``fsync`` off: a test's database), ``pg_ctl -w start`` listening on 127.0.0.1 only, on a free port,
its Unix socket in that folder (none in a shared directory); ``pg_ctl -w`` returns once the server
accepts connections. At the end ``pg_ctl stop -m fast`` by the data folder, and the postmaster's
PID (from ``postmaster.pid``) killed if it is still there. PostgreSQL refuses to run as root: as
root, the server runs as the user ``postgres`` (or ``nobody``), which owns the temporary folder.

Nothing is installed here: without the binaries (or the ``psycopg`` driver, which the ``dev`` extra
installs) the tests that use it are skipped in one line, or fail under ``AUTOAUG_REQUIRE_DATA=1``
(CI), like the real-data fixtures of ``tests/conftest.py``.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

USER = "autoaug"
PASSWORD = "autoaug-test-secret"


def _missing(msg: str) -> None:
    if os.environ.get("AUTOAUG_REQUIRE_DATA") == "1":
        pytest.fail(msg)
    pytest.skip(msg)


def postgres_bin() -> Path | None:
    """The folder holding ``initdb`` and ``pg_ctl``, or None."""
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl"):
        return Path(found).parent
    folders = [Path(p) for p in glob.glob("/usr/lib/postgresql/*/bin") if (Path(p) / "initdb").is_file()]
    folders.sort(key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0)
    return folders[-1] if folders else None


def free_port() -> int:
    """A TCP port nothing listens on at 127.0.0.1 now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass(frozen=True)
class PostgresServer:
    host: str
    port: int
    pid: int  # the postmaster's

    def url(self, database: str = "postgres", *, user: str = USER, password: str | None = PASSWORD) -> str:
        login = user if password is None else f"{user}:{password}"
        return f"postgresql://{login}@{self.host}:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        """A new empty database ``name``; returns its URL."""
        import psycopg

        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)


def _alive(pid: int) -> bool:
    """``pid`` is a running process (a zombie left for its parent to reap is not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state not in ("Z", "X")


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresServer]:
    """A PostgreSQL server on 127.0.0.1 for the test module (see this file's documentation)."""
    try:
        import psycopg  # noqa: F401  (the driver `postgresql://` needs: the dev extra's)
    except ImportError:
        _missing("psycopg is not installed (the dev and postgres extras bring it): pip install -e '.[search,dev]'")
    bindir = postgres_bin()
    if bindir is None:
        _missing("PostgreSQL not found: no initdb/pg_ctl on PATH or in /usr/lib/postgresql/*/bin")
    as_user: dict = {}
    folder = Path(tempfile.mkdtemp(prefix="autoaug-pg-"))
    if os.geteuid() == 0:  # initdb and postgres refuse root
        import pwd

        try:
            entry = pwd.getpwnam("postgres")
        except KeyError:
            entry = pwd.getpwnam("nobody")
        as_user = {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}
        os.chown(folder, entry.pw_uid, entry.pw_gid)
    data, sock, log = folder / "data", folder / "sock", folder / "server.log"
    pid: int | None = None

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(bindir / argv[0]), *argv[1:]], cwd=folder, capture_output=True, text=True, timeout=180, **as_user
        )

    try:
        pwfile = folder / "pw"
        pwfile.write_text(PASSWORD + "\n")
        sock.mkdir()
        if as_user:
            for path in (pwfile, sock):
                os.chown(path, as_user["user"], as_user["group"])
        init = run(
            "initdb", "-D", str(data), "-U", USER, f"--pwfile={pwfile}", "--auth-local=trust",
            "--auth-host=scram-sha-256", "-E", "UTF8", "--no-sync", "--no-instructions",
        )  # fmt: skip
        assert init.returncode == 0, f"initdb failed:\n{init.stdout[-2000:]}{init.stderr[-2000:]}"
        for _ in range(3):  # a port taken between free_port() and the server's bind: another one
            port = free_port()
            options = (
                f"-c listen_addresses=127.0.0.1 -c port={port} -c unix_socket_directories='{sock}' "
                "-c fsync=off -c synchronous_commit=off -c full_page_writes=off"
            )
            started = run("pg_ctl", "-D", str(data), "-l", str(log), "-w", "-t", "120", "-o", options, "start")
            if started.returncode == 0:
                break
        else:
            text = log.read_text() if log.exists() else ""
            pytest.fail(f"PostgreSQL did not start:\n{started.stdout}{started.stderr}\n{text[-3000:]}")
        pid = int((data / "postmaster.pid").read_text().split("\n", 1)[0])
        yield PostgresServer("127.0.0.1", port, pid)
    finally:
        if pid is not None:
            run("pg_ctl", "-D", str(data), "-m", "fast", "-w", "stop")
            if _alive(pid):  # stop did not end it: by its PID
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        shutil.rmtree(folder, ignore_errors=True)
