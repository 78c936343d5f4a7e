"""The reconciliation of Optuna and Tune uses private attributes of both: it must run only on the
Ray and Optuna versions it was written against, and the install pins must say so."""
from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from autoaug.core.errors import SearchError
from autoaug.search.reconcile import WRITTEN_AGAINST, check_versions

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def test_installed_ray_and_optuna_are_versions_the_reconciliation_was_written_against():
    # Fails loudly (with the versions and what to do) after an upgrade of Ray or Optuna.
    check_versions()


@pytest.mark.parametrize("installed, named", [({"ray": "2.70.1"}, "ray 2.70.1"), ({"optuna": "6.0.0"}, "optuna 6.0.0"),
                                              ({"ray": "2.39.0"}, "ray 2.39.0")])
def test_an_unknown_version_is_refused_with_a_clear_message(installed, named):
    with pytest.raises(SearchError, match=re.escape(named) + r" \(known: .*\).*widen WRITTEN_AGAINST"):
        check_versions(installed)


def test_pyproject_pins_the_versions_as_upper_bounds():
    deps = tomllib.loads(PYPROJECT.read_text())["project"]["optional-dependencies"]["search"]  # the search extra
    for dist, (_, newest) in WRITTEN_AGAINST.items():
        (spec,) = [d for d in deps if re.match(rf"{dist}(\[|>|<|=|$)", d)]
        upper = re.search(r"<\s*([\d.]+)", spec)
        assert upper, f"{spec!r} has no upper bound"
        major, minor = (int(x) for x in newest.split("."))
        assert upper.group(1) == f"{major}.{minor + 1}", f"{spec!r} should end below {major}.{minor + 1}"
