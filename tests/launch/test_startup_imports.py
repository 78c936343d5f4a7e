"""`autoaug --help` builds its parser without the heavy libraries (start-up time), and the light
commands load only what they use: the rule of docs/ARCHITECTURE.md ("Imports at the top, light
paths kept light").

Timings are measured by benchmarks/startup.py; this checks the import structure that makes them."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("torch", "torchvision", "ray", "optuna", "nvidia.dali", "pyarrow", "pandas", "scipy", "matplotlib")
#: What starting ``autoaug`` -- its parser, built from every command module -- does not load either.
NOT_FOR_THE_PARSER = (*HEAVY, "numpy", "yaml", "PIL")
#: What ``autoaug policies show`` of a stored policy does not load (it reads the store: pyarrow, numpy).
NOT_FOR_SHOW = ("torch", "torchvision", "ray", "optuna", "nvidia.dali", "pandas", "scipy", "matplotlib", "PIL")


def _imported_after(code: str, names: tuple[str, ...] = HEAVY) -> set[str]:
    probe = f"import sys\n{code}\nprint(' '.join(m for m in {names!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return set(out.stdout.split())


def test_building_the_parser_imports_no_heavy_library():
    assert _imported_after("from autoaug.launch.cli import build_parser; build_parser()") == set()


def test_the_help_of_autoaug_and_of_every_command_loads_no_heavy_library():
    """``autoaug --help``, ``autoaug policies show --help`` and every other command's ``--help``, as
    the command line runs them (one process: what any of them loads counts)."""
    helps = [
        ["--help"],
        ["policies", "--help"],
        *(["policies", sub, "--help"] for sub in ("list", "show", "export", "preview")),
        *([command, "--help"] for command in ("search", "train", "compare", "report", "launch")),
    ]
    code = (
        "import contextlib, io\nfrom autoaug.launch.cli import main\n"
        f"for argv in {helps!r}:\n"
        "    with contextlib.redirect_stdout(io.StringIO()) as out:\n"
        "        try:\n"
        "            main(argv)\n"
        "        except SystemExit as exc:\n"
        "            assert exc.code == 0, (argv, exc.code)\n"
        "    assert out.getvalue().startswith('usage: autoaug'), (argv, out.getvalue()[:200])"
    )
    assert _imported_after(code, NOT_FOR_THE_PARSER) == set()


def test_showing_a_stored_policy_loads_nothing_of_training_searching_or_plotting(tmp_path):
    """``autoaug policies show NAME@1`` (its summary, ``--provenance``, ``--json``) reads the store,
    and no training, search or plotting library."""
    from autoaug.policies.presets import resolve
    from autoaug.policies.store import PolicyStore

    PolicyStore(str(tmp_path)).save(resolve("autoaugment-cifar10"), "p", {"note": "saved by the test"})
    code = (
        "import contextlib, io\nfrom autoaug.launch.cli import main\n"
        f"for flags in ([], ['--provenance'], ['--json']):\n"
        "    with contextlib.redirect_stdout(io.StringIO()) as out:\n"
        f"        assert main(['policies', 'show', 'p@1', '--store', {str(tmp_path)!r}, *flags]) == 0\n"
        "    assert 'p@1' in out.getvalue()"
    )
    assert _imported_after(code, NOT_FOR_SHOW) == set()


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
