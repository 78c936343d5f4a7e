"""The benchmarks are scripts, not a package: their tests load them by path."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

_BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(scope="session")
def load_benchmark():
    """``load_benchmark(name)``: the module ``benchmarks/<name>.py``, loaded once per session under
    ``<name>_under_test`` (registered in ``sys.modules``: dataclasses look their module up)."""
    loaded: dict = {}

    def load(name: str):
        if name not in loaded:
            spec = importlib.util.spec_from_file_location(f"{name}_under_test", _BENCHMARKS / f"{name}.py")
            module = importlib.util.module_from_spec(spec)
            sys.modules[spec.name] = module
            spec.loader.exec_module(module)
            loaded[name] = module
        return loaded[name]

    return load
