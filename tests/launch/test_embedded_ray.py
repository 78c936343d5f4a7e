"""The embedded Ray of a search (no ``--address``) opens nothing to the network and nothing to the
machine's other users: every process of the search listens on loopback only, and the token its Ray
authenticates with is in a file only this user can read (``autoaug.core.ray_session``:
``embedded_on_loopback``, ``private_token_env``). Before: the GCS, the raylet, the agents, the workers
and the driver listened on every interface, behind Ray's ``~/.ray/auth_token``, mode 0644."""

from __future__ import annotations

import ipaddress
import os
import socket
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from autoaug.core import ray_session

REPO = Path(__file__).resolve().parents[2]
TINY = ["--set", "train.epochs=1", "--set", "train.train_size=256", "--set", "train.val_size=128"]


def _process_tree(root: int) -> list[int]:
    """``root`` and every process descended from it (by their parent's pid, ``/proc/PID/stat``)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo += children.get(pid, [])
    return tree


def _listening(pids: list[int]) -> list[tuple[str, int, int, str]]:
    """``(address, port, pid, command)`` of every TCP socket in LISTEN state that a process of ``pids``
    holds (``/proc/net/tcp[6]``, matched to the processes' descriptors by inode: what ``ss -ltnp`` shows)."""
    owner: dict[str, int] = {}
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with_link = os.readlink(f"/proc/{pid}/fd/{fd}")
                if with_link.startswith("socket:["):
                    owner[with_link[8:-1]] = pid
        except OSError:  # gone, or not ours
            continue
    found = []
    for table, family in (("/proc/net/tcp", socket.AF_INET), ("/proc/net/tcp6", socket.AF_INET6)):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state != "0A" or inode not in owner:  # 0A: LISTEN
                continue
            hex_address, hex_port = local.split(":")
            raw = bytes.fromhex(hex_address)
            raw = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))  # each 32-bit word, host order
            pid = owner[inode]
            command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
            found.append((socket.inet_ntop(family, raw), int(hex_port, 16), pid, command))
    return sorted(found)


def _loopback(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    return ip.is_loopback or (ip.version == 6 and ip.ipv4_mapped is not None and ip.ipv4_mapped.is_loopback)


def _environment(pid: int) -> dict[str, str]:
    try:
        entries = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return {}
    return dict(e.decode(errors="replace").split("=", 1) for e in entries if b"=" in e)


def test_the_embedded_session_s_token_is_private_and_a_given_one_is_kept(monkeypatch):
    for var in ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_AUTH_MODE"):
        monkeypatch.delenv(var, raising=False)
    env = ray_session.private_token_env()
    path = Path(env["RAY_AUTH_TOKEN_PATH"])
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert len(path.read_text()) == 64 and path.parent != Path.home() / ".ray"
    assert ray_session.private_token_env() == env  # one per process: Ray caches the token it read
    monkeypatch.setenv("RAY_AUTH_TOKEN", "given")  # the user's token (a cluster's): Ray's own settings
    assert ray_session.private_token_env() == {}
    monkeypatch.delenv("RAY_AUTH_TOKEN")
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")  # the user's choice
    assert ray_session.private_token_env() == {}


def test_ray_s_multi_node_switch_is_off_for_a_command_without_address_before_ray_is_imported():
    code = (
        "import os, sys\n"
        "from autoaug.core.ray_session import LOCAL_ONLY_ENV_VAR, embedded_on_loopback\n"
        "with embedded_on_loopback() as applied:\n"
        "    print(applied, os.environ.get(LOCAL_ONLY_ENV_VAR))\n"
        "print(os.environ.get(LOCAL_ONLY_ENV_VAR))\n"
        "import ray\n"
        "with embedded_on_loopback() as applied:\n"  # Ray imported: its switch was read already
        "    print(applied)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != ray_session.LOCAL_ONLY_ENV_VAR}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.stdout.split("\n")[:3] == ["True 0", "None", "False"], out.stderr[-2000:]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_search_s_processes_listen_on_loopback_only_and_its_token_is_private(tmp_path, cifar_small):
    """A smoke search with ``--pack auto`` stalled at a failpoint once its first trial ended (the
    event: it says so on a named pipe), so that its embedded Ray's every process is up -- the GCS,
    the raylet, the agents, the pack-size measurement's and the trials' workers (a pack server when
    it chose packs), the driver: each listening socket of its process tree is on 127.0.0.1 or ::1;
    its Ray processes authenticate with a token file of mode 0600 in a 0700 folder. ``--pack auto``
    measured the pack sizes on the trials' resources first and said which it took, in one line."""
    gate = tmp_path / "gate"
    os.mkfifo(gate)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env |= {"PYTHONUNBUFFERED": "1", "AUTOAUG_FAILPOINTS": f"search.after_trial_saved:1=stall({gate})"}
    argv = [sys.executable, "-m", "autoaug.launch.cli", "search", "--preset", "smoke", "--data", str(cifar_small)]
    argv += ["--name", "net", "--num-trials", "2", "--concurrency", "1", "--pack", "auto", *TINY]
    argv += ["--storage", str(tmp_path / "runs"), "--store", str(tmp_path / "store")]
    proc = subprocess.Popen(
        argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    out: list[str] = []
    reader = threading.Thread(target=lambda: out.extend(proc.stdout), daemon=True)
    reader.start()
    try:
        with open(gate) as at_point:  # the driver writes "PID NAME" once it is at the point
            assert at_point.read().split() == [str(proc.pid), "search.after_trial_saved"]
        tree = _process_tree(proc.pid)
        sockets = _listening(tree)
        tokens = {_environment(pid).get("RAY_AUTH_TOKEN_PATH") for pid in tree} - {None}
        modes = {
            t: (stat.S_IMODE(os.stat(t).st_mode), stat.S_IMODE(os.stat(os.path.dirname(t)).st_mode)) for t in tokens
        }
        with open(gate, "w"):  # released: the search goes on
            pass
        assert proc.wait(timeout=300) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        try:
            os.killpg(proc.pid, 9)  # what is left of its session (the embedded Ray)
        except ProcessLookupError:
            pass
    reader.join(timeout=30)
    said = [line for line in "".join(out).splitlines() if line.startswith("pack auto: ")]
    assert len(said) == 1 and "the fastest measured (images/s by pack size: 1: " in said[0], said
    assert "stored as net@1" in "".join(out)
    assert "packs of as many trials per process as measure fastest (--pack auto)" in "".join(out)
    commands = {command.rsplit("/", 1)[-1] for _, _, _, command in sockets}
    assert {"gcs_server", "raylet"} <= commands and len(sockets) >= 5, sockets  # Ray's servers were up
    assert [s for s in sockets if not _loopback(s[0])] == [], "".join(out)[-2000:]
    (token,) = tokens  # one token, which every process of the embedded Ray was given
    assert modes[token] == (0o600, 0o700) and not token.startswith(str(Path.home() / ".ray"))
    assert not os.path.exists(token)  # removed with the driver
