"""The install for nodes without network, checked end to end on this machine:

1. ``launch/wheelhouse.py`` (``make wheelhouse``) gathers the wheels of ``autoaug[search]`` for
   this machine's Python, ``manylinux_2_28_x86_64``, DALI ``cuda120``, torch left out (the one
   step with network);
2. a folder standing for a GPU image's torch: torch, torchvision and what they require, hard-linked
   from this Python's environment (a CUDA build of torch from PyPI is ~4 GB of wheels: GPU images
   carry it, and ``--no-torch`` is what such a node uses), put on the new environment's path by a
   ``.pth`` file (so pip counts them as installed, as it would an image's);
3. in a network namespace with only loopback (``unshare -n``; ``--user --map-root-user`` when
   not root): a fresh virtual environment, ``pip install --no-index --find-links WHEELHOUSE
   'autoaug[search]'`` with pip's configuration files and ``PIP_*`` variables switched off (the
   folder alone), ``pip check``, and ``autoaug search --preset smoke`` on the real CIFAR-10;
4. what DALI's ``libdali_operators.so`` needs of NPP (``libnpp*.so.12``, which no wheel of the
   install brings): its ``NEEDED`` entries (``readelf -d``), the NPP names in it, and whether any
   process of the smoke search loaded or looked for an NPP library (the search runs under
   ``LD_DEBUG=libs``, one log per process).

    .venv/bin/python benchmarks/offline_install.py --data /work/shared/data/cifar10-jpeg
    .venv/bin/python benchmarks/offline_install.py --data ... --wheelhouse /tmp/wh --reuse   # no download

It prints each step, its time and its output's last lines; ``--json FILE`` writes the figures
(benchmarks/results/offline-install/README.md has a run). Minutes and ~700 MiB of downloads: not
in the test suite (tests/test_wheelhouse.py checks what the wheelhouse command asks pip for).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _say(text: str) -> None:
    print(text, flush=True)


def _run(cmd: list[str], *, env: dict | None = None, tail: int = 12, check: bool = True) -> tuple[str, float]:
    """Run ``cmd``; print its last ``tail`` lines and its time. Returns (output, seconds)."""
    _say("$ " + " ".join(cmd if len(cmd) < 40 else cmd[:12] + ["..."]))
    t0 = time.monotonic()
    proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    took = time.monotonic() - t0
    lines = [ln for ln in proc.stdout.splitlines() if "is ignored: it is neither a file nor a directory" not in ln]
    for line in lines[-tail:]:
        _say("  | " + line)
    _say(f"  ({took:.1f} s, exit {proc.returncode})")
    if check and proc.returncode != 0:
        raise SystemExit(f"offline_install: failed: {' '.join(cmd[:6])} ... exit {proc.returncode}")
    return proc.stdout, took


def offline(cmd: list[str]) -> list[str]:
    """``cmd`` in a new network namespace whose only interface is loopback (Ray talks to itself
    over 127.0.0.1)."""
    unshare = ["unshare", "-n"] if os.geteuid() == 0 else ["unshare", "--user", "--map-root-user", "-n"]
    return unshare + ["sh", "-c", 'ip link set lo up && exec "$@"', "sh", *cmd]


def clean_env(**extra: str) -> dict:
    """This environment without pip's settings (its configuration files and ``PIP_*`` name other
    wheel folders and indexes) or another environment's path."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    for key in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME"):
        env.pop(key, None)
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1", **extra)
    return env


def torch_site() -> Path:
    """The site-packages folder this Python's torch is installed in."""
    return Path(metadata.distribution("torch").locate_file(""))


def torch_closure(site: Path, roots=("torch", "torchvision")) -> dict[str, metadata.Distribution]:
    """The distributions of ``roots`` and of everything they require (extras left out), as
    ``site`` has them installed: what a GPU image's torch comes with. (Looked up in ``site`` only:
    another folder on this Python's path may hold other versions, e.g. a venv's own setuptools.)"""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    seen: dict[str, metadata.Distribution] = {}
    done: set[tuple[str, str]] = set()
    todo = [(name, "") for name in roots]  # (distribution, one of its extras that is asked for)
    while todo:
        name, extra = todo.pop()
        name = canonicalize_name(name)
        if (name, extra) in done:
            continue
        done.add((name, extra))
        found = list(metadata.Distribution.discover(name=name, path=[str(site)]))
        if not found:
            continue
        dist = seen.setdefault(name, found[0])
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": extra}):
                todo += [(req.name, "")] + [(req.name, e) for e in req.extras]
    return seen


def link_image_torch(site: Path, dest: Path) -> tuple[list[str], int]:
    """Hard-link (copy across filesystems) the files of :func:`torch_closure` of ``site`` into
    ``dest``, laid out as a site-packages folder. Returns (``name==version`` of each, bytes)."""
    if dest.exists():
        shutil.rmtree(dest)
    names, size = [], 0
    for name, dist in sorted(torch_closure(site).items()):
        names.append(f"{name}=={dist.version}")
        for rel in dist.files or []:
            if str(rel).startswith(".."):  # scripts in bin/: not needed
                continue
            src = Path(dist.locate_file(rel))
            if not src.is_file():
                continue
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(src, target)
            except OSError:
                shutil.copy2(src, target)
            size += src.stat().st_size
    return names, size


def npp_facts(site: Path) -> dict:
    """What ``libdali_operators.so`` under ``site`` says about NPP: its ``NEEDED`` entries that are
    CUDA libraries, the NPP library names and NPP functions in it, and whether any NPP library
    lies where its RPATH looks (``nvidia/npp/lib``)."""
    so = site / "nvidia" / "dali" / "libdali_operators.so"
    needed = subprocess.run(["readelf", "-d", str(so)], capture_output=True, text=True).stdout
    needed_libs = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", needed)
    data = so.read_bytes()
    npp_libs = sorted({m.decode() for m in re.findall(rb"libnpp\w*\.so(?:\.\d+)?", data)})
    npp_calls = sorted({m.decode() for m in re.findall(rb"\bnppi\w+|\bnpp(?:Get|Set)\w+", data)})
    rpath = re.findall(r"\((?:RPATH|RUNPATH)\)\s+Library (?:rpath|runpath): \[([^\]]+)\]", needed)
    return {
        "file": str(so),
        "size_mib": round(len(data) / 2**20, 1),
        "needed": needed_libs,
        "needed_npp": [n for n in needed_libs if "npp" in n],
        "npp_names_in_binary": npp_libs,
        "npp_functions": npp_calls,
        "rpath": rpath[0] if rpath else None,
        "npp_installed": sorted(str(p.relative_to(site)) for p in site.glob("nvidia/npp/lib/*")),
    }


def ld_debug_summary(folder: Path) -> dict:
    """From ``LD_DEBUG=libs`` logs (one per process): processes, those that loaded DALI's
    operators, and every line naming an NPP library (a search for it or a load)."""
    logs = sorted(folder.glob("ld.*"))
    dali = [p.name for p in logs if "libdali_operators.so" in p.read_text(errors="replace")]
    npp = [
        f"{p.name}: {line.strip()}"
        for p in logs
        for line in p.read_text(errors="replace").splitlines()
        if "libnpp" in line
    ]
    return {"processes": len(logs), "loaded_dali_operators": len(dali), "npp_lines": npp[:20], "npp_count": len(npp)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, help="the CIFAR-10 Parquet folder of the smoke search")
    parser.add_argument("--work", default="/tmp/autoaug-offline", help="where the venv, the torch folder and runs go")
    parser.add_argument("--wheelhouse", default=None, help="the wheel folder (default: WORK/wheelhouse)")
    parser.add_argument("--reuse", action="store_true", help="use the wheelhouse as it is (no download)")
    parser.add_argument("--dali", default="cuda120", choices=("cuda120", "cuda130"))
    parser.add_argument("--platform", default="manylinux_2_28_x86_64")
    parser.add_argument("--json", default=None, help="write the figures here")
    args = parser.parse_args(argv)

    work = Path(args.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    wheelhouse = Path(args.wheelhouse).resolve() if args.wheelhouse else work / "wheelhouse"
    pyver = f"{sys.version_info[0]}.{sys.version_info[1]}"
    base_python = getattr(sys, "_base_executable", sys.executable)
    out: dict = {"python": pyver, "base_python": base_python, "platform": args.platform, "dali": args.dali}

    _say(f"== 1. wheelhouse for Python {pyver}, {args.platform}, DALI {args.dali}, without torch (network)")
    if not args.reuse:
        _, out["wheelhouse_s"] = _run(
            [sys.executable, str(ROOT / "launch" / "wheelhouse.py"), "--dest", str(wheelhouse)]
            + ["--python-version", pyver, "--platform", args.platform, "--dali", args.dali, "--no-torch"],
            tail=14,
        )
    wheels = sorted(wheelhouse.glob("*.whl"), key=lambda p: -p.stat().st_size)
    out["wheels"] = {p.name: p.stat().st_size for p in wheels}
    out["wheelhouse_mib"] = round(sum(out["wheels"].values()) / 2**20, 1)
    _say(f"  {len(wheels)} wheels, {out['wheelhouse_mib']:,} MiB")

    _say("== 2. the image's torch: torch, torchvision and what they require, linked from this environment")
    image = work / "image-torch"
    names, size = link_image_torch(torch_site(), image)
    out["image_torch"] = names
    _say(f"  from {torch_site()}: {len(names)} distributions, {size / 2**30:.2f} GiB (hard links): {', '.join(names)}")

    _say("== 3. offline: a fresh venv, pip install from the wheelhouse alone, the smoke search")
    env = clean_env()
    probe = "import socket\ntry:\n socket.create_connection(('pypi.org', 443), timeout=5)\n print('network: reachable')\nexcept OSError as e:\n print('network: unreachable:', e)"
    text, _ = _run(offline([base_python, "-c", probe]), env=env)
    out["network_in_namespace"] = text.strip()
    if "unreachable" not in text:
        raise SystemExit("offline_install: the namespace reaches the network; not an offline check")
    venv = work / "venv"
    if venv.exists():
        shutil.rmtree(venv)
    _run(offline([base_python, "-m", "venv", str(venv)]), env=env)
    site = Path(
        subprocess.run(
            [str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    (site / "image-torch.pth").write_text(f"{image}\n")
    extra = "search" if args.dali == "cuda120" else "search-cuda13"
    text, out["install_s"] = _run(
        offline(
            [str(venv / "bin" / "python"), "-m", "pip", "install", "--no-index", "--find-links", str(wheelhouse)]
            + [f"autoaug[{extra}]"]
        ),
        env=env,
        tail=4,
    )
    installed = re.search(r"Successfully installed (.*)", text)
    out["installed"] = installed.group(1).split() if installed else []
    _say(f"  installed {len(out['installed'])} distributions from the wheelhouse")
    text, _ = _run(offline([str(venv / "bin" / "python"), "-m", "pip", "check"]), env=env, check=False)
    out["pip_check"] = text.strip().splitlines()[-1] if text.strip() else ""
    out["venv_mib"] = round(sum(p.stat().st_size for p in venv.rglob("*") if p.is_file()) / 2**20, 1)

    runs = work / "runs"
    shutil.rmtree(runs, ignore_errors=True)
    ld = work / "ld-debug"
    shutil.rmtree(ld, ignore_errors=True)
    ld.mkdir()
    search_env = clean_env(LD_DEBUG="libs", LD_DEBUG_OUTPUT=str(ld / "ld"), AUTOAUG_STORE=str(runs / "store"))
    cmd = [str(venv / "bin" / "autoaug"), "search", "--preset", "smoke", "--data", args.data, "--name", "offline"]
    cmd += ["--storage", str(runs / "runs"), "--store", str(runs / "store"), "--overwrite"]
    text, out["search_s"] = _run(offline(cmd), env=search_env, tail=8)
    out["search_tail"] = text.strip().splitlines()[-8:]
    text, _ = _run(
        offline([str(venv / "bin" / "autoaug"), "policies", "show", "offline@latest", "--store", str(runs / "store")]),
        env=clean_env(),
        tail=6,
    )
    out["stored"] = text.strip().splitlines()[:6]

    _say("== 4. DALI and NPP")
    out["npp"] = npp_facts(site)
    out["ld_debug"] = ld_debug_summary(ld)
    for key, value in {**out["npp"], **out["ld_debug"]}.items():
        _say(f"  {key}: {value}")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
        _say(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
