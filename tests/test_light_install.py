"""The light install: without the search stack (ray, optuna, nvidia.dali), a stored policy loads
and applies with torchvision, and the commands that need the stack say which extra to install.

Each test runs Python in a subprocess whose first act is to put a ``sys.meta_path`` finder in
front that refuses ``ray``, ``optuna`` and ``nvidia.dali`` (and their submodules), as if they
were not installed.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from importlib import metadata

import pytest

BLOCK = textwrap.dedent(
    """
    import sys

    BLOCKED = ("ray", "optuna", "nvidia.dali")

    class _Refuse:
        def find_spec(self, name, path=None, target=None):
            if any(name == b or name.startswith(b + ".") for b in BLOCKED):
                raise ImportError(f"No module named {name!r} (blocked: light install)")
            return None

    sys.meta_path.insert(0, _Refuse())
    """
)

# Every module a user of the light install reaches.
LIGHT_MODULES = (
    "autoaug.core.errors",
    "autoaug.core.location",
    "autoaug.core.metrics",
    "autoaug.core.extras",
    "autoaug.core.ray_session",
    "autoaug.policies",
    "autoaug.policies.ops",
    "autoaug.policies.bases",
    "autoaug.policies.policy",
    "autoaug.policies.presets",
    "autoaug.policies.reference",
    "autoaug.policies.store",
    "autoaug.policies.torch_apply",
    "autoaug.policies.preview",
    "autoaug.proxy_models.data",
    "autoaug.launch.cli",
    "autoaug.launch.policies_cmd",
    "autoaug.launch.search_cmd",
    "autoaug.launch.train_cmd",
    "autoaug.launch.compare_cmd",
    "autoaug.launch.launch_cmd",
)


def _run_light(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", BLOCK + textwrap.dedent(code)], capture_output=True, text=True, timeout=300
    )


@pytest.fixture
def store(tmp_path):
    from autoaug.policies.presets import resolve
    from autoaug.policies.store import PolicyStore

    root = tmp_path / "store"
    PolicyStore(str(root)).save(resolve("autoaugment-cifar10"), "found", {"note": "made by the test"})
    return str(root)


def test_the_blocker_makes_the_search_stack_unimportable():
    proc = _run_light(
        """
        for name in ("ray", "optuna", "nvidia.dali", "ray.tune"):
            try:
                __import__(name)
            except ImportError:
                continue
            raise SystemExit(f"{name} imported")
        print("blocked")
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "blocked"


def test_light_modules_import_without_the_search_stack():
    proc = _run_light(
        f"""
        import importlib
        for name in {LIGHT_MODULES!r}:
            importlib.import_module(name)
        from autoaug.launch.cli import build_parser
        build_parser()
        print("ok")
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


def test_a_stored_policy_loads_and_applies_with_torchvision(store):
    proc = _run_light(
        f"""
        import json
        import numpy as np
        import torch
        from PIL import Image
        from autoaug.policies.store import PolicyStore

        policy = PolicyStore({store!r}).load("found@latest")
        transform = policy.to_torchvision()
        image = Image.fromarray(np.random.default_rng(0).integers(0, 256, (32, 32, 3), dtype=np.uint8))
        torch.manual_seed(0)
        outs = [np.asarray(transform(image)) for _ in range(8)]
        print(json.dumps({{
            "name": policy.name, "sub_policies": len(policy.sub_policies), "hash": policy.content_hash,
            "shapes": sorted({{o.shape for o in outs}}), "changed": sum(not np.array_equal(o, np.asarray(image)) for o in outs),
            "loaded": sorted(m for m in ("ray", "optuna", "nvidia.dali") if m in sys.modules),
        }}))
        """
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    from autoaug.policies.presets import resolve

    assert out["name"] == "autoaugment-cifar10"
    assert out["sub_policies"] == 25
    assert out["hash"] == resolve("autoaugment-cifar10").content_hash
    assert out["shapes"] == [[32, 32, 3]]
    assert out["changed"] >= 1  # crop + flip + the policy change the image
    assert out["loaded"] == []


def test_policies_commands_work_without_the_search_stack(store):
    proc = _run_light(
        f"""
        from autoaug.launch.cli import main
        assert main(["policies", "list", "--store", {store!r}]) == 0
        assert main(["policies", "show", "found@1", "--store", {store!r}]) == 0
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert "found" in proc.stdout


@pytest.mark.parametrize(
    "argv, missing",
    [
        (["search", "--data", "nowhere", "--preset", "smoke"], "ray, optuna, nvidia.dali"),
        (["train", "--data", "nowhere"], "nvidia.dali"),
        (["compare", "--data", "nowhere"], "ray, nvidia.dali"),
        (["policies", "preview", "autoaugment-cifar10", "--data", "nowhere", "--out", "x.png"], "nvidia.dali"),
    ],
)
def test_commands_needing_the_search_stack_name_the_extra(argv, missing, tmp_path):
    proc = _run_light(
        f"""
        import os
        os.chdir({str(tmp_path)!r})
        from autoaug.launch.cli import main
        raise SystemExit(main({argv!r}))
        """
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"autoaug: error: autoaug {argv[0]}")
    assert f"(missing: {missing}" in lines[0]
    assert "pip install 'autoaug[search]'" in lines[0]
    assert _listdir(tmp_path) == []  # nothing created before the check


def _listdir(path) -> list[str]:
    return sorted(p.name for p in path.iterdir())


def test_the_base_requirements_leave_out_the_search_stack():
    requires = metadata.requires("autoaug") or []
    base = [r for r in requires if "extra ==" not in r]
    search = [r for r in requires if 'extra == "search"' in r or "extra == 'search'" in r]

    def names(reqs):
        return {r.split(";")[0].split("[")[0].split(">")[0].split("<")[0].split("=")[0].strip().lower() for r in reqs}

    assert {"torch", "torchvision", "pyarrow", "numpy", "pillow"} <= names(base)
    assert not {"ray", "optuna", "nvidia-dali-cuda120", "scipy", "matplotlib", "cmaes"} & names(base)
    assert {"ray", "optuna", "nvidia-dali-cuda120"} <= names(search)
