"""Gather every wheel a machine without network needs to install autoaug with its search stack:
``make wheelhouse`` (docs/cluster.md, "Nodes without network").

Run where there is network, for the nodes' Python and platform::

    make wheelhouse PYTHON_VERSION=3.12 PLATFORM=manylinux_2_28_x86_64 [DALI=cuda130] [TORCH=0]
    python launch/wheelhouse.py --python-version 3.12 --platform manylinux_2_28_x86_64 \\
        [--dali cuda130] [--no-torch] [--dest wheelhouse]

then copy the folder to the nodes and install from it alone::

    pip install --no-index --find-links wheelhouse 'autoaug[search]'          # --dali cuda120
    pip install --no-index --find-links wheelhouse 'autoaug[search-cuda13]'   # --dali cuda130

What it does: builds the project's own wheel into the folder, reads its requirements (the base
ones and the chosen extra's), and has ``pip download --only-binary=:all:`` fetch them and their
dependencies for the nodes' Python (``--python-version``) and platform (``--platform``; a
``manylinux_2_N`` platform also accepts the wheels of every older manylinux, as pip on the node
does). ``--no-torch`` leaves torch and torchvision out (with what only they need: CUDA's ~4 GB of
libraries for a CUDA build): GPU images usually carry them, and pip on the node then takes the
installed ones. ``--dali`` picks the DALI build of the nodes' CUDA driver: ``cuda120`` (the
``search`` extra; drivers 525.60 and later, every GPU from Maxwell on) or ``cuda130`` (the
``search-cuda13`` extra; drivers 580 and later, Turing and newer GPUs only). Standard library only:
it runs with any Python that has pip.
"""

from __future__ import annotations

import argparse
import email.parser
import importlib.util
import re
import subprocess
import sys
import zipfile
from pathlib import Path

#: ``--dali`` -> the extra of pyproject.toml holding that DALI build (the rest of the two is the same).
DALI_EXTRAS = {"cuda120": "search", "cuda130": "search-cuda13"}
#: What ``--no-torch`` leaves out (with the dependencies only they bring in).
TORCH = ("torch", "torchvision")
#: What ``--no-torch`` downloads in their place: torch (2.14) requires setuptools >= 77.0.3, and a
#: virtual environment of Python 3.10 or 3.11 starts with setuptools 65.5, which hides the image's
#: newer one; pip on the node then needs a newer one from the folder.
WITHOUT_TORCH = ("setuptools",)
#: pyproject.toml's requires-python, and the newest Python DALI 2.4 has wheels for.
OLDEST_PYTHON, NEWEST_PYTHON = (3, 10), (3, 15)
#: The manylinux aliases of PEP 600's glibc versions.
_LEGACY = {"manylinux2014": 17, "manylinux2010": 12, "manylinux1": 5}
_PROJECT = Path(__file__).resolve().parent.parent


class UsageError(ValueError):
    """A bad argument: one line naming it, the value and what was expected."""


def check_python_version(text: str) -> str:
    """``text`` (``3.12``) if it is a Python version the project and DALI support."""
    m = re.fullmatch(r"3\.(\d{1,2})", str(text))
    if not m or not OLDEST_PYTHON <= (3, int(m.group(1))) <= NEWEST_PYTHON:
        raise UsageError(
            f"--python-version {text!r}: expected 3.N with "
            f"{OLDEST_PYTHON[0]}.{OLDEST_PYTHON[1]} <= 3.N <= {NEWEST_PYTHON[0]}.{NEWEST_PYTHON[1]} (e.g. 3.12)"
        )
    return text


def platforms(platform: str) -> list[str]:
    """The platform tags pip on a node of ``platform`` installs, newest first: a
    ``manylinux_2_N_ARCH`` node (glibc 2.N) takes the wheels of every older manylinux too, and
    their legacy names (``manylinux2014`` is glibc 2.17)."""
    m = re.fullmatch(r"manylinux_2_(\d+)_(\w+)", platform) or re.fullmatch(
        r"(manylinux\w*?)_(x86_64|aarch64)", platform
    )
    if m and m.group(1) in _LEGACY:
        glibc, arch = _LEGACY[m.group(1)], m.group(2)
    elif m and m.group(1).isdigit() and int(m.group(1)) >= 5:
        glibc, arch = int(m.group(1)), m.group(2)
    else:
        raise UsageError(
            f"--platform {platform!r}: expected manylinux_2_N_ARCH for a node with glibc 2.N "
            "(e.g. manylinux_2_28_x86_64; `ldd --version` on the node tells N) or manylinux2014_ARCH"
        )
    tags = [f"manylinux_2_{n}_{arch}" for n in range(glibc, 4, -1)]
    tags += [f"{alias}_{arch}" for alias, n in _LEGACY.items() if n <= glibc]
    return tags


def _name(requirement: str) -> str:
    return re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement).group(1).lower().replace("_", "-")


def requirements(metadata: str, extra: str, *, with_torch: bool = True) -> list[str]:
    """The requirements of the project's wheel (its ``METADATA`` text) that an install of
    ``autoaug[extra]`` needs, without their ``extra == ...`` markers; torch and torchvision left out
    unless ``with_torch`` (and :data:`WITHOUT_TORCH` added)."""
    wanted = []
    known = set()
    for line in email.parser.Parser().parsestr(metadata).get_all("Requires-Dist") or []:
        spec, _, marker = line.partition(";")
        extras = re.findall(r"""extra\s*==\s*["']([^"']+)["']""", marker)
        known.update(extras)
        if extras and extra not in extras:
            continue
        if not with_torch and _name(spec) in TORCH:
            continue
        rest = re.sub(r"""(\band\s+)?extra\s*==\s*["'][^"']+["'](\s+and\b)?""", "", marker).strip()
        wanted.append(f"{spec.strip()}; {rest}" if rest else spec.strip())
    if extra not in known:
        raise UsageError(f"the project's wheel has no extra {extra!r} (it has {sorted(known)})")
    return wanted if with_torch else wanted + list(WITHOUT_TORCH)


def download_command(python: str, requirements: list[str], dest: Path, python_version: str, platform: str) -> list[str]:
    """``pip download`` of ``requirements`` and their dependencies, as wheels only, for
    ``python_version`` (CPython) on ``platform`` (:func:`platforms`), into ``dest``."""
    cmd = [python, "-m", "pip", "download", "--only-binary=:all:", "--dest", str(dest)]
    cmd += ["--implementation", "cp", "--python-version", python_version]
    for tag in platforms(platform):
        cmd += ["--platform", tag]
    return cmd + list(requirements)


def install_command(dest: Path, dali: str) -> str:
    """What installs autoaug from ``dest`` alone on a node."""
    return f"pip install --no-index --find-links {dest} 'autoaug[{DALI_EXTRAS[dali]}]'"


def _build_project_wheel(python: str, dest: Path) -> Path:
    for old in dest.glob("autoaug-*.whl"):
        old.unlink()
    # Without build isolation when setuptools and wheel are at hand (no index needed).
    at_hand = all(importlib.util.find_spec(name) is not None for name in ("setuptools", "wheel"))
    isolation = ["--no-build-isolation"] if at_hand else []
    subprocess.run(
        [python, "-m", "pip", "wheel", "--quiet", "--no-deps", *isolation, "--wheel-dir", str(dest), str(_PROJECT)],
        check=True,
    )
    (wheel_path,) = dest.glob("autoaug-*.whl")
    return wheel_path


def _metadata(wheel_path: Path) -> str:
    with zipfile.ZipFile(wheel_path) as zf:
        (name,) = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
        return zf.read(name).decode("utf-8")


def _mib(n: int) -> str:
    return f"{n / 2**20:,.1f} MiB"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], prog="launch/wheelhouse.py")
    parser.add_argument("--dest", default="wheelhouse", help="the folder the wheels go to (default: wheelhouse)")
    parser.add_argument(
        "--python-version",
        default=f"{sys.version_info[0]}.{sys.version_info[1]}",
        help="the nodes' Python, 3.N (default: this one's)",
    )
    parser.add_argument(
        "--platform", default="manylinux_2_28_x86_64", help="the nodes' platform (default: manylinux_2_28_x86_64)"
    )
    parser.add_argument(
        "--dali", default="cuda120", help="DALI build: cuda120 (drivers >= 525.60) or cuda130 (drivers >= 580)"
    )
    parser.add_argument("--no-torch", action="store_true", help="leave torch and torchvision out (the image has them)")
    args = parser.parse_args(argv)
    try:
        check_python_version(args.python_version)
        platforms(args.platform)
        if args.dali not in DALI_EXTRAS:
            raise UsageError(f"--dali {args.dali!r}: expected one of {', '.join(DALI_EXTRAS)}")
    except UsageError as exc:
        print(f"wheelhouse: error: {exc}", file=sys.stderr)
        return 2
    dest = Path(args.dest).resolve()
    dest.mkdir(parents=True, exist_ok=True)
    python = sys.executable
    before = {p.name for p in dest.glob("*.whl")}
    wheel_path = _build_project_wheel(python, dest)
    reqs = requirements(_metadata(wheel_path), DALI_EXTRAS[args.dali], with_torch=not args.no_torch)
    cmd = download_command(python, reqs, dest, args.python_version, args.platform)
    print("wheelhouse: " + " ".join(cmd[:8] + ["--platform", args.platform, "(and older manylinux)", *reqs]))
    subprocess.run(cmd, check=True)
    wheels = sorted(dest.glob("*.whl"), key=lambda p: -p.stat().st_size)
    total = sum(p.stat().st_size for p in wheels)
    print(
        f"wheelhouse: {len(wheels)} wheels, {_mib(total)} in {dest} "
        f"({len([p for p in wheels if p.name not in before])} new); the largest:"
    )
    for p in wheels[:8]:
        print(f"  {_mib(p.stat().st_size):>12}  {p.name}")
    install = install_command(dest, args.dali)
    torch_note = "" if not args.no_torch else " (torch and torchvision must be installed already: --no-torch)"
    (dest / "INSTALL.txt").write_text(
        f"# Python {args.python_version}, {args.platform}, DALI {args.dali}{torch_note}\n{install}\n"
    )
    print(f"wheelhouse: on a node{torch_note}: {install}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
