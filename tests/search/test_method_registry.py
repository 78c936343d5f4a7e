"""A search method is one module and one registration: a toy fourth method (it scores candidates
at random) registered here is offered by ``--method``, takes its own flag, section and preset
settings, is checked, described, run end to end by ``run_search`` on real data, summarised and
refused by ``autoaug report`` in its own words -- without a line of the shared modules naming it."""

from __future__ import annotations

import ast
import contextlib
import importlib.metadata
import json
import random
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pytest

from autoaug.core.values import is_int
from autoaug.search.config import SEARCH_PRESETS, SearchConfig
from autoaug.search.decide.assemble import TrialRecord, assemble_policy
from autoaug.search.decide.rescore import Candidate
from autoaug.search.methods.base import (
    METHODS,
    Method,
    MethodReporter,
    MethodResult,
    MethodSettings,
    PreparedSearch,
    register_method,
)
from autoaug.search.run_dir import RunDir

REPO = Path(__file__).resolve().parents[2]


# ------------------------------------------------------------------------------------------------
# The toy method: everything it needs, in one place
@dataclass(frozen=True)
class RandomScoreConfig(MethodSettings):
    WHAT: ClassVar[str] = "random-score"
    FIELD: ClassVar[str] = "random_score"
    PRESETS: ClassVar[Mapping[str, Mapping[str, Any]]] = {"smoke": {"candidates": 3}}

    candidates: int = 6

    def __post_init__(self) -> None:
        if not is_int(self.candidates) or self.candidates < 1:
            raise self.invalid("candidates", "an integer >= 1")


class RandomScoreReporter(MethodReporter):
    """What a person sees of a random-score search (every hook a reporter has but the --json fields)."""

    def describe(self, config: SearchConfig) -> list[str]:
        return [f"  method: random scores, {config.method_settings(RandomScoreConfig).candidates} candidates"]

    def optuna_studies(self, config: SearchConfig) -> str | None:
        return None

    def summary(self, record: Mapping[str, Any]) -> list[str]:
        return [f"random scores: {record.get('candidates')} candidates drawn"]

    def report_note(self, name: str, run_uri: str) -> str | None:
        return f"search {name!r} scored its candidates at random: no study to draw ({run_uri})"


class RandomScoreMethod(Method):
    name = "random"
    reporter_class = RandomScoreReporter
    help = "candidates drawn from the space and scored at random (a test of the registry)"
    settings = RandomScoreConfig
    unit = "candidates"
    options = (
        RandomScoreConfig.option(
            "--candidates", "candidates", "random: candidates drawn (default 6)", type=int, metavar="N"
        ),
    )

    def check(self, config: SearchConfig) -> None:
        candidates = config.method_settings(RandomScoreConfig).candidates
        if candidates > 50:
            raise ValueError(f"random_score.candidates {candidates} is above 50: a toy draws few")

    def num_trials(self, config: SearchConfig) -> int:
        return config.method_settings(RandomScoreConfig).candidates

    def max_candidates(self, config: SearchConfig) -> int:
        return 1

    def warm_start_capacity(self, config: SearchConfig) -> tuple[int, str]:
        return config.method_settings(RandomScoreConfig).candidates, "candidates; raise random_score.candidates"

    def can_resume(self, run: RunDir) -> bool:
        return False

    def run(self, search: PreparedSearch) -> MethodResult:
        config, space = search.config, search.config.space
        rng = random.Random(config.seed)
        steps = space.num_probabilities - 1
        trials = []
        for i in range(config.method_settings(RandomScoreConfig).candidates):
            params = {
                name: (
                    rng.choice(space.op_choices)
                    if name.endswith("_type")
                    else rng.randint(0, steps) / steps
                    if name.endswith("_prob")
                    else rng.randint(0, space.num_magnitude_bins - 1)
                )
                for name in space.param_names()
            }
            trials.append(
                TrialRecord(
                    trial_id=f"r{i}",
                    index=i,
                    status="completed",
                    params=params,
                    policy=space.to_policy(params, name=f"{config.name}-r{i}"),
                    score=rng.random(),
                    epochs=1,
                    train_time_s=0.0,
                )
            )
            search.display.log(f"random: candidate r{i} scored {trials[-1].score:.4f}")
        assembled = assemble_policy(
            trials,
            name=config.name,
            top_n=2,
            num_magnitude_bins=space.num_magnitude_bins,
            base=space.base,
            ranges=space.ranges,
        )
        return MethodResult(
            trials=trials,
            assembled=assembled,
            candidates=[Candidate("assembled", assembled.policy, tuple(t.trial_id for t in assembled.selected), None)],
            optuna={"storage": None, "study_name": None, "num_trials": 0, "consistent_with_tune": True, "problems": []},
            provenance={"name": "random", "candidates": len(trials)},
        )


@pytest.fixture
def random_method():
    method = register_method(RandomScoreMethod())  # the one registration
    try:
        yield method
    finally:
        METHODS.pop(method.name)


def _config(argv: list[str]) -> SearchConfig:
    from autoaug.launch.cli import build_parser
    from autoaug.launch.search_cmd import build_search_config

    return build_search_config(build_parser().parse_args(["search", *argv]))


# ------------------------------------------------------------------------------------------------
def test_a_registered_method_takes_its_flag_section_and_preset_settings(random_method):
    c = _config(["--data", "x.parquet", "--preset", "smoke", "--method", "random"])
    assert c.method == "random" and c.search_method is random_method
    assert c.method_config == RandomScoreConfig(candidates=3)  # its settings of the smoke preset
    assert SEARCH_PRESETS["smoke"]["random_score"] == {"candidates": 3}
    assert _config(["--data", "x", "--method", "random", "--candidates", "5"]).method_config.candidates == 5
    assert (
        _config(["--data", "x", "--method", "random", "--set", "random_score.candidates=7"]).method_config.candidates
        == 7
    )
    # Its section of the dict form round-trips, alone: no built-in method's settings are written.
    saved = json.loads(json.dumps(c.to_dict()))
    assert saved["random_score"] == {"candidates": 3} and not {"density", "pba", "num_trials"} & set(saved)
    assert SearchConfig.from_dict(saved) == c
    # Its own checks: the settings' and the method's, each one line naming the value.
    with pytest.raises(
        ValueError,
        match=r"SearchConfig\.random_score\.candidates: 0 is invalid; expected an "
        r"integer >= 1",
    ):
        _config(["--data", "x", "--method", "random", "--candidates", "0"])
    with pytest.raises(ValueError, match=r"unknown random-score setting\(s\) \['bogus'\]"):
        _config(["--data", "x", "--set", "random_score.bogus=1"])
    with pytest.raises(ValueError, match="random_score.candidates 60 is above 50"):
        _config(["--data", "x", "--preset", "smoke", "--method", "random", "--candidates", "60"]).check_runnable()


def test_the_cli_offers_describes_and_guards_a_registered_method(random_method, capsys):
    from autoaug.launch.cli import command_parsers, main
    from autoaug.launch.search_cmd import _describe

    help_text = command_parsers()["search"].format_help()
    assert "{train,density,pba,random}" in help_text and "--candidates N" in help_text
    described = _describe(_config(["--data", "x", "--preset", "smoke", "--method", "random", "--name", "toy"]), None)
    assert "  method: random scores, 3 candidates" in described
    assert "Optuna" not in described  # it uses no study: no line names one
    # Its flag defines a search: a resume cannot change it.
    assert main(["search", "--resume", "toy", "--candidates", "4"]) == 2
    assert "cannot be combined with --candidates" in capsys.readouterr().err


def test_a_method_cannot_take_a_registered_name_or_settings_key(random_method):
    with pytest.raises(ValueError, match="method name 'random' is taken"):
        register_method(RandomScoreMethod())

    class Clash(RandomScoreMethod):
        name = "other"

    with pytest.raises(ValueError, match=r"settings key\(s\) \['random_score'\] are those of method 'random'"):
        register_method(Clash())
    assert "other" not in METHODS


@pytest.mark.timeout(300)
def test_a_registered_method_runs_end_to_end_and_is_summarised_in_its_own_words(
    random_method, tmp_path, capsys, cifar_small
):
    """Preflight (data checked and decoded), run_search (the run directory, the method, storing,
    result.json), the summary, ``autoaug report`` -- no Ray needed by this method."""
    from autoaug.launch import preflight
    from autoaug.launch.cli import main
    from autoaug.policies.store import PolicyStore
    from autoaug.search.driver import run_search

    config = _config(
        [
            "--data",
            str(cifar_small),
            "--preset",
            "smoke",
            "--method",
            "random",
            "--name",
            "toy",
            "--storage",
            str(tmp_path / "runs"),
            "--store",
            str(tmp_path / "store"),
        ]
    )
    config.check_runnable()
    config = preflight.for_search(config)
    outcome = run_search(config, session=contextlib.nullcontext)
    out = capsys.readouterr().out
    assert [f"random: candidate r{i} scored" in out for i in range(3)] == [True] * 3
    assert len(outcome.trials) == 3 and outcome.reference == "toy@1"
    summary = outcome.summary()
    assert "random scores: 3 candidates drawn" in summary and "stored as toy@1" in summary
    stored = PolicyStore(str(tmp_path / "store"))
    assert stored.load("toy@1").content_hash == outcome.policy.content_hash
    prov = stored.get("toy@1").provenance
    assert prov["method"] == {"name": "random", "candidates": 3}
    assert prov["search"]["config"]["method"] == "random" and prov["search"]["config"]["random_score"] == {
        "candidates": 3
    }
    # The same outcome from result.json (what a resumed finished search returns).
    from autoaug.search.driver import resume_search

    assert resume_search("toy", str(tmp_path / "runs")).summary() == summary
    # `autoaug report` says, in the method's words, that it has nothing to draw.
    code = main(["report", "toy", "--storage", str(tmp_path / "runs"), "--out", str(tmp_path / "r.png")])
    err = capsys.readouterr().err
    assert code == 2 and "scored its candidates at random: no study to draw" in err
    assert len(err.strip().splitlines()) == 1


#: Every package of the project; the modules of all but a method's own folder are shared. (The
#: benchmarks are scripts that measure named methods on purpose -- ``search_cost.py`` is density
#: matching's cost -- not code a search runs.)
PACKAGES = ("core", "policies", "proxy_models", "search", "launch")


def _shared_modules() -> list[Path]:
    """Every module that is no method's own: every package's, but the method folders
    (``search/methods/<name>/``)."""
    methods = REPO / "search" / "methods"
    out = [p for part in PACKAGES for p in sorted((REPO / part).rglob("*.py"))]
    return [p for p in out if not (p.parent != methods and methods in p.parents)]


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the docstring nodes of a module, its classes and functions."""
    out = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            if isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
                out.add(id(body[0].value))
    return out


def _code_words(tree: ast.AST) -> list[tuple[int, str]]:
    """The names, attribute names and string constants of a module's code (not its docstrings or
    comments), with their line numbers."""
    docs = _docstrings(tree)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            out.append((node.lineno, node.value))
        elif isinstance(node, ast.Name):
            out.append((node.lineno, node.id))
        elif isinstance(node, ast.Attribute):
            out.append((node.lineno, node.attr))
    return out


def _strings(node: ast.AST) -> list[ast.Constant]:
    """The string constants ``node`` is or holds as a literal collection (``("a", "b")``)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [c for e in node.elts for c in _strings(e)]
    return []


def _methods_read(node: ast.AST) -> bool:
    """``node`` is the registry or something read from a record's ``method`` key: ``METHODS``,
    ``config.get("method")``, ``record["method"]``, ``config.method``, ``search_method.name``."""
    text = ast.unparse(node)
    return "METHODS" in text or bool(re.search(r"\bmethod\b|['\"]method['\"]|search_method", text))


def _names_used_as_methods(tree: ast.AST) -> list[tuple[int, str]]:
    """The string constants of ``tree`` used where a method's name is meant: compared with a
    method (``config.method == "x"``, ``record.get("method") in ("x", "y")``), a method looked up
    (``METHODS["x"]``), a method's default (``config.get("method", "x")``), a method passed
    (``method="x"``, ``{"method": "x"}``); with the constants' line numbers."""
    used: list[ast.Constant] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(_methods_read(side) for side in sides):
                used += [c for side in sides for c in _strings(side)]
        elif isinstance(node, ast.Subscript) and _methods_read(node.value):
            used += _strings(node.slice)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
            if _methods_read(node.func.value) or (
                node.args and _strings(node.args[0]) and node.args[0].value == "method"
            ):
                used += [c for a in node.args[1:] for c in _strings(a)] + (
                    [c for a in node.args[:1] for c in _strings(a)] if _methods_read(node.func.value) else []
                )
        elif isinstance(node, ast.keyword) and node.arg == "method":
            used += _strings(node.value)
        elif isinstance(node, ast.Dict):
            used += [
                c
                for k, v in zip(node.keys, node.values)
                if k is not None and _strings(k) == [k] and k.value == "method"
                for c in _strings(v)
            ]
    return [(c.lineno, c.value) for c in used]


def test_no_shared_module_names_a_built_in_method():
    """A built-in method's settings attribute (``config.pba``, ``density: {...}``) appears nowhere
    in the shared code, nor a method's name where a method is meant (compared with the configured
    method, looked up, a default, passed; ``--method NAME`` in a string): the shared code asks the
    method (:data:`METHODS`), it does not name one. Every package is scanned; no name is exempt."""
    names = set(METHODS)
    fields = {m.settings.FIELD for m in METHODS.values()}
    flag = re.compile(rf"--method ({'|'.join(sorted(names))})\b")
    found = []
    for path in _shared_modules():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        where = path.relative_to(REPO)
        found += [
            f"{where}:{line}: {word!r}" for line, word in _code_words(tree) if word in fields or flag.search(word)
        ]
        found += [
            f"{where}:{line}: {word!r} as a method" for line, word in _names_used_as_methods(tree) if word in names
        ]
    assert not found, "\n".join(sorted(set(found)))


def _read_key(node: ast.AST) -> tuple[ast.AST, str] | None:
    """``(mapping, key)`` of ``mapping["key"]`` or ``mapping.get("key", ...)``; None otherwise."""
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
        return node.value, node.slice.value
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "get"
        and node.args
        and isinstance(node.args[0], ast.Constant)
    ):
        return node.func.value, node.args[0].value
    return None


def test_no_shared_module_reads_a_method_s_own_record():
    """The provenance's ``method`` record is the method's: the shared code hands it to the method
    (``summary``, ``result_fields``) and reads none of its keys (``provenance["method"]["schedule"]``)."""
    found = []
    for path in _shared_modules():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            read = _read_key(node)
            if read is None:
                continue
            inner = read[0]
            while isinstance(inner, ast.BoolOp):  # (record.get("method") or {}).get(...)
                inner = inner.values[0]
            inner_read = _read_key(inner)
            if inner_read is not None and inner_read[1] == "method":
                found.append(f"{path.relative_to(REPO)}:{node.lineno}: reads {read[1]!r} of the method's record")
    assert not found, "\n".join(found)


#: The story of a search and the CLI, where a branch on a space family is a method in disguise
#: (the space itself, the decisions made on its points and the report drawing a study's parameters
#: branch on families by nature).
STORY = [p for p in (REPO / "search").glob("*.py") if p.name not in ("space.py", "report.py")]


def test_the_story_does_not_tell_a_method_by_its_space_family():
    """``if family == "aa":  # a PBA member's last policy`` in the summary was PBA in disguise:
    the story and the CLI ask the method instead."""
    from autoaug.search.space import FAMILIES

    found = []
    for path in [*STORY, *sorted((REPO / "launch").rglob("*.py"))]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Compare):
                constants = [c for c in [node.left, *node.comparators] if isinstance(c, ast.Constant)]
                if any(c.value in FAMILIES for c in constants):
                    found.append(f"{path.relative_to(REPO)}:{node.lineno}: compares with a space family")
    assert not found, "\n".join(found)


def test_tune_experiments_are_built_and_restored_in_one_module():
    users = {
        p.relative_to(REPO / "search").as_posix()
        for p in (REPO / "search").rglob("*.py")
        if "tune.Tuner(" in p.read_text() or "Tuner.restore(" in p.read_text()
    }
    assert users == {"tune/experiment.py"}
    # every method restores or builds its experiments through run_experiment (resume, budget, display)
    own = [
        p.relative_to(REPO).as_posix()
        for p in (REPO / "search" / "methods").rglob("*.py")
        if any(f"{call}(" in p.read_text() for call in ("restore_tuner", "build_tuner"))
    ]
    assert own == []


def test_an_incomplete_method_is_refused_at_registration_in_one_line():
    """A method lacking what a search calls fails at registration, not in the middle of a search."""

    class NoRun(Method):
        name = "norun"
        help = "forgot run"
        settings = RandomScoreConfig
        unit = "candidates"

        def num_trials(self, config: SearchConfig) -> int:
            return 1

    with pytest.raises(
        ValueError, match=r"^method 'norun' \(NoRun\) is incomplete: it does not define can_resume, run$"
    ):
        register_method(NoRun)

    class NoUnit(NoRun):
        name = "nounit"
        unit = None  # as if unset
        can_resume = RandomScoreMethod.can_resume
        run = RandomScoreMethod.run

    with pytest.raises(ValueError, match=r"^method 'nounit': unit must be a non-empty string, got None$"):
        register_method(NoUnit())

    class Duck:  # every callable, but not a Method
        name = "duck"

    with pytest.raises(ValueError, match=r"^method 'duck': Duck is not a subclass of .*Method"):
        register_method(Duck())

    class SaysItself(RandomScoreMethod):  # what a person sees belongs to the reporter
        name = "says"

        def summary(self, record: Mapping[str, Any]) -> list[str]:
            return ["never called"]

    with pytest.raises(
        ValueError,
        match=r"^method 'says' \(SaysItself\) defines summary: what a person sees is its reporter's "
        r"\(subclass .*MethodReporter and set reporter_class\)$",
    ):
        register_method(SaysItself)

    class NotAReporter(RandomScoreMethod):
        name = "notreporter"
        reporter_class = dict

    with pytest.raises(ValueError, match=r"^method 'notreporter': reporter_class must be a MethodReporter subclass"):
        register_method(NotAReporter)

    class AllAtOnce(RandomScoreMethod):  # a misspelt way for pack servers to run its trials
        name = "allatonce"
        packs = True
        pack_trials = "all"

    with pytest.raises(
        ValueError, match=r"^method 'allatonce': pack_trials must be one of \[None, 'pack', 'population'\], got 'all'$"
    ):
        register_method(AllAtOnce)
    assert not {"norun", "nounit", "duck", "says", "notreporter", "allatonce"} & set(METHODS)


def test_a_method_reads_its_settings_typed(random_method):
    """``config.method_settings(Settings)``: the settings' own class (the object the configuration
    holds, ``config.method_config``); another method's settings class, or one no method has, is
    refused in one line (the configuration holds the settings of its own method only)."""
    from autoaug.search.methods.pba.method import PbaConfig

    c = _config(["--data", "x", "--method", "random", "--candidates", "5"])
    assert c.method_settings(RandomScoreConfig) == RandomScoreConfig(candidates=5) == random_method.settings_in(c)
    assert c.method_settings(RandomScoreConfig) is c.method_config
    assert not hasattr(c, "random_score") and not hasattr(c, "pba")  # no attribute per method
    with pytest.raises(
        ValueError,
        match=r"^PbaConfig are the settings of method 'pba'; this search runs method 'random' "
        r"\(its settings: RandomScoreConfig\)$",
    ):
        c.method_settings(PbaConfig)
    with pytest.raises(ValueError, match="no registered method has the settings MethodSettings"):
        c.method_settings(MethodSettings)


# ------------------------------------------------------------------------------------------------
# Registration: the entry-point group, read when the registry is first read
#: ``importlib.metadata.entry_points`` (before a test replaces it).
_ENTRY_POINTS = importlib.metadata.entry_points


class _Entry:
    """An entry point as ``importlib.metadata`` gives it (``name``, ``value``, ``load()``)."""

    def __init__(self, name: str, obj: Any) -> None:
        self.name, self.value, self._obj = name, f"test:{name}", obj

    def load(self) -> Any:
        if isinstance(self._obj, Exception):
            raise self._obj
        return self._obj


def _registry(monkeypatch, *entries: _Entry):
    """A fresh registry whose entry-point group holds the built-in entries and ``entries``; and the
    groups it was asked for."""
    import importlib.metadata

    from autoaug.search.methods.base import ENTRY_POINT_GROUP, MethodRegistry

    built_in = [e for e in _ENTRY_POINTS(group=ENTRY_POINT_GROUP) if e.dist and e.dist.name == "autoaug"]
    asked = []
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: asked.append(group) or [*entries, *built_in])
    return MethodRegistry(), asked


def test_methods_are_loaded_from_the_entry_point_group_when_first_read(monkeypatch):
    registry, asked = _registry(monkeypatch, _Entry("random", RandomScoreMethod))
    assert asked == []  # nothing loaded until it is read
    assert list(registry) == ["train", "density", "pba", "random"]  # the default first, then by name
    assert asked == ["autoaug.methods"] and isinstance(registry["random"], RandomScoreMethod)
    assert [name for name, m in registry.items() if m.default] == ["train"]  # named by the method itself
    registry.load_entry_points()  # again (a package installed since): nothing loaded twice
    assert list(registry) == ["train", "density", "pba", "random"]


def test_an_entry_point_that_cannot_be_a_method_is_refused_in_one_line(monkeypatch):
    class Default(RandomScoreMethod):
        name = "other"
        default = True

    for entry, message in (
        (_Entry("other", RandomScoreMethod), r"entry point other = test:other .* names method 'random': the entry's"),
        (_Entry("other", ImportError("no module named x")), r"cannot be loaded: ImportError: no module named x"),
        (_Entry("other", Default), r"says it is the default method, as '(train|other)' does"),
        (_Entry("other", object()), r"object is not a subclass of .*Method"),
    ):
        registry, _ = _registry(monkeypatch, entry)
        with pytest.raises(ValueError, match=message):
            list(registry)


def test_importing_the_configuration_registers_nothing():
    """Registration is the entry points', read when the registry is: importing the search's
    configuration imports no method."""
    import subprocess
    import sys

    code = (
        "import sys, autoaug.search.config as c\n"
        "assert not [m for m in sys.modules if m.startswith('autoaug.search.methods.') and m.count('.') > 3]\n"
        "assert c.SearchConfig.from_dict({'data': 'x', 'train': {'preset': 'smoke'}}).method == 'train'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_method_that_does_not_train_in_packs_refuses_pack_in_one_line(random_method):
    assert not random_method.packs
    config = SearchConfig.from_dict({"preset": "smoke", "name": "n", "data": "x", "method": "random", "pack": 2})
    with pytest.raises(ValueError, match=r"^pack 2: the random method trains its runs one per process; --pack 1 "):
        config.check_runnable()
    line = str(pytest.raises(ValueError, config.check_runnable).value)
    assert line.endswith("(methods that train in packs: train, density, pba)") and "\n" not in line
