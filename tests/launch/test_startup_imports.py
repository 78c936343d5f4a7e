"""`autoaug --help` builds its parser without the heavy libraries (start-up time).

Timings are measured by benchmarks/startup.py; this checks the import structure that makes them."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("torch", "torchvision", "ray", "optuna", "nvidia.dali", "pyarrow", "pandas", "scipy", "matplotlib")


def _imported_after(code: str) -> set[str]:
    probe = f"import sys\n{code}\nprint(' '.join(m for m in {HEAVY!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return set(out.stdout.split())


def test_building_the_parser_imports_no_heavy_library():
    assert _imported_after("from autoaug.launch.cli import build_parser; build_parser()") == set()


def test_reading_the_store_does_not_import_pandas(tmp_path):
    from autoaug.policies.presets import resolve
    from autoaug.policies.store import PolicyStore

    PolicyStore(str(tmp_path)).save(resolve("autoaugment-cifar10"), "p")
    code = f"from autoaug.policies.store import PolicyStore; s = PolicyStore({str(tmp_path)!r}); s.list(); s.get('p@1')"
    assert "pandas" not in _imported_after(code)
    assert "torch" not in _imported_after(code)


def test_listing_a_local_store_imports_no_heavy_library(tmp_path):
    """`autoaug policies list` of a local store reads its index (autoaug.policies.index): no pyarrow,
    torch, Ray, Optuna or DALI -- the command starts in about a quarter of the time it took."""
    from autoaug.policies.presets import resolve
    from autoaug.policies.store import PolicyStore

    store = PolicyStore(str(tmp_path))
    store.save(resolve("autoaugment-cifar10"), "p")
    store.save(resolve("autoaugment-svhn"), "p")
    store.save(resolve("trivialaugment"), "q")
    for flags in ([], ["--json"]):
        code = (
            "import contextlib, io\nfrom autoaug.launch.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
            f"    assert main(['policies', 'list', '--store', {str(tmp_path)!r}, *{flags!r}]) == 0\n"
            "assert 'p ' in out.getvalue() or '\"p\"' in out.getvalue()"
        )
        assert _imported_after(code) == set()


def test_train_refuses_a_missing_policy_before_importing_torch(tmp_path):
    """`autoaug train --policy missing.json` says so in one line without torch's 2-3 s import."""
    code = (
        "import contextlib, io\nfrom autoaug.launch.cli import main\n"
        "with contextlib.redirect_stderr(io.StringIO()) as err:\n"
        f"    assert main(['train', '--policy', {str(tmp_path / 'missing.json')!r}, '--data', 'x.parquet']) == 2\n"
        "assert 'does not exist' in err.getvalue(), err.getvalue()"
    )
    assert {"torch", "ray", "nvidia.dali"}.isdisjoint(_imported_after(code))
