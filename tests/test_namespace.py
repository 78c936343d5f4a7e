"""The installed import names live under ``autoaug``: a user's own ``policies.py`` (or
``search.py``, ``launch.py``, ``proxy_models.py``, ``core.py``) next to their script must not be imported by
autoaug, and autoaug must not install a generic top-level name that would shadow theirs."""

from __future__ import annotations

import subprocess
import sys
import textwrap

GENERIC = ("core", "policies", "search", "launch", "proxy_models")


def test_user_modules_named_like_the_subpackages_are_never_imported(tmp_path):
    for name in GENERIC:
        (tmp_path / f"{name}.py").write_text(f"raise ImportError('the user\\'s own {name}.py was imported')\n")
    script = textwrap.dedent(
        """
        import sys
        import autoaug.policies.store, autoaug.policies.presets, autoaug.proxy_models.data
        import autoaug.search.space, autoaug.launch.cli, autoaug.core.ray_session
        from autoaug.policies import resolve_policy
        p = resolve_policy("autoaugment-cifar10")
        assert len(p.sub_policies) == 25, p
        try:
            autoaug.launch.cli.main(["--help"])
        except SystemExit as exc:
            assert exc.code == 0, exc.code
        # The user's modules stay theirs: importing them still gives their file.
        for name in ("core", "policies", "search", "launch", "proxy_models"):
            try:
                __import__(name)
            except ImportError as exc:
                assert "the user's own" in str(exc), exc
            else:
                raise AssertionError(f"import {name} did not reach the user's file")
        print("ok")
        """
    )
    result = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().endswith("ok")


def test_no_generic_top_level_name_is_installed(tmp_path):
    script = f"import importlib.util as u; print([n for n in {GENERIC!r} if u.find_spec(n) is not None])"
    result = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]", f"generic top-level modules importable: {result.stdout.strip()}"
