"""`make wheelhouse` (launch/wheelhouse.py): what it asks pip to download for another machine's
Python and platform, with or without torch, with either DALI build; and the two extras it chooses
between. The whole offline install is benchmarks/offline_install.py (minutes and network: not here)."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def wh():
    spec = importlib.util.spec_from_file_location("wheelhouse_under_test", ROOT / "launch" / "wheelhouse.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _extras() -> dict[str, list[str]]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]


@pytest.fixture(scope="module")
def metadata() -> str:
    """The Requires-Dist lines setuptools writes into the project's wheel, from pyproject.toml."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    lines = ["Metadata-Version: 2.1", "Name: autoaug", "Version: 0.1.0"]
    lines += [f"Requires-Dist: {r}" for r in project["dependencies"]]
    for extra, reqs in project["optional-dependencies"].items():
        lines += [f"Provides-Extra: {extra}"] + [f'Requires-Dist: {r}; extra == "{extra}"' for r in reqs]
    return "\n".join(lines) + "\n"


def _names(reqs) -> set[str]:
    return {re.match(r"[A-Za-z0-9._-]+", r).group(0).lower() for r in reqs}


def test_the_cuda13_extra_is_the_search_extra_with_the_other_dali_build():
    extras = _extras()
    search, cuda13 = extras["search"], extras["search-cuda13"]
    (dali12,) = [r for r in search if r.startswith("nvidia-dali-cuda120")]
    (dali13,) = [r for r in cuda13 if r.startswith("nvidia-dali-cuda130")]
    assert [r for r in search if r != dali12] == [r for r in cuda13 if r != dali13]
    # the same upper bound: dali_apply is written against DALI 2.4's internals, whichever build
    assert re.search(r"<\s*([\d.]+)", dali12).group(1) == re.search(r"<\s*([\d.]+)", dali13).group(1)


@pytest.mark.parametrize(
    "dali,with_torch", [("cuda120", True), ("cuda120", False), ("cuda130", True), ("cuda130", False)]
)
def test_the_download_asks_for_the_chosen_extra_for_the_nodes_python_and_platform(wh, metadata, dali, with_torch):
    reqs = wh.requirements(metadata, wh.DALI_EXTRAS[dali], with_torch=with_torch)
    names = _names(reqs)
    assert {"ray", "optuna", "pyarrow", "numpy", "pillow", "scipy"} <= names
    assert {"nvidia-dali-cuda120", "nvidia-dali-cuda130"} & names == {f"nvidia-dali-{dali}"}
    assert {"torch", "torchvision"} & names == ({"torch", "torchvision"} if with_torch else set())
    # torch's setuptools >= 77.0.3: a Python 3.11 venv's own 65.5 would hide the image's
    assert ("setuptools" in reqs) is not with_torch
    assert not {"pytest", "mlflow-skinny", "ruff", "psycopg"} & names  # no other extra
    assert not any("extra" in r for r in reqs)  # markers dropped: pip download gets plain requirements
    assert "ray[tune,default]>=2.40,<3" in reqs

    cmd = wh.download_command("PY", reqs, Path("/w"), "3.12", "manylinux_2_28_x86_64")
    assert cmd[:4] == ["PY", "-m", "pip", "download"] and cmd[-len(reqs) :] == reqs
    assert "--only-binary=:all:" in cmd
    assert cmd[cmd.index("--python-version") + 1] == "3.12" and cmd[cmd.index("--implementation") + 1] == "cp"
    assert cmd[cmd.index("--dest") + 1] == "/w"
    tags = [cmd[i + 1] for i, a in enumerate(cmd) if a == "--platform"]
    # glibc 2.28 takes every older manylinux: Ray's wheels are manylinux2014, DALI's manylinux_2_28
    assert tags[0] == "manylinux_2_28_x86_64" and {"manylinux2014_x86_64", "manylinux_2_17_x86_64"} <= set(tags)
    assert "manylinux_2_29_x86_64" not in tags
    extra = wh.DALI_EXTRAS[dali]
    assert wh.install_command(Path("/w"), dali) == f"pip install --no-index --find-links /w 'autoaug[{extra}]'"


def test_platform_tags_cover_every_older_manylinux(wh):
    assert wh.platforms("manylinux2014_aarch64") == [f"manylinux_2_{n}_aarch64" for n in range(17, 4, -1)] + [
        "manylinux2014_aarch64",
        "manylinux2010_aarch64",
        "manylinux1_aarch64",
    ]
    assert "manylinux2010_x86_64" not in wh.platforms("manylinux_2_11_x86_64")


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--platform", "linux_x86_64"], "--platform 'linux_x86_64': expected manylinux_2_N_ARCH"),
        (["--platform", "macosx_11_0_arm64"], "--platform 'macosx_11_0_arm64': expected manylinux_2_N_ARCH"),
        (["--python-version", "3.9"], "--python-version '3.9': expected 3.N with 3.10 <= 3.N <= 3.15"),
        (["--python-version", "312"], "--python-version '312': expected 3.N"),
        (["--dali", "cuda118"], "--dali 'cuda118': expected one of cuda120, cuda130"),
    ],
)
def test_bad_arguments_are_one_line_before_anything_is_built(wh, tmp_path, monkeypatch, capsys, argv, message):
    def refuse(*args, **kwargs):
        raise AssertionError(f"ran {args}")

    monkeypatch.setattr(wh.subprocess, "run", refuse)
    assert wh.main(["--dest", str(tmp_path / "w"), *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"wheelhouse: error: {message}" in err
    assert not (tmp_path / "w").exists()


def test_an_unknown_extra_in_the_wheel_is_named(wh, metadata):
    with pytest.raises(wh.UsageError, match=r"no extra 'search-cuda99' \(it has \[.*'search', 'search-cuda13'"):
        wh.requirements(metadata, "search-cuda99")
