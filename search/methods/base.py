"""The interface of a search method, and the registry of methods.

A method turns a prepared search into scored candidate policies. It does not decide how the
search starts or ends: :mod:`autoaug.search.driver` checks the configuration and the data, opens
the run directory and the Ray session, runs the method, re-scores its candidates, chooses one,
stores it and writes the result -- the same for every method. Everything that differs between
methods is the method's own, in its own folder (``search/methods/<name>/``); no shared module
names a method or imports its folder. A method is an instance of a subclass of the abstract base
class :class:`Method`, registered by an entry point of the group :data:`ENTRY_POINT_GROUP`
(``autoaug.methods``; this project's ``pyproject.toml`` lists the built-in ones, and a method
installed from another package is found by its own): :data:`METHODS` loads them when it is
first read, each checked by :func:`register_method`'s rules (an incomplete one is refused), and
importing a module registers nothing; :func:`register_method` adds one in a running process. The
default method says it is (``default``). It defines:

* ``name``, ``help`` (for ``--method``) and ``unit`` (what it scores, in messages: ``trials``,
  ``candidates``, ``members``);
* ``settings``: the frozen dataclass of its settings (a :class:`MethodSettings`): their checks,
  their dict form (a section of a configuration file, or top-level keys), its values in each
  preset (``PRESETS``: ``--preset smoke`` runs every method in about a minute), read typed with
  ``config.method_settings(ItsSettings)`` (or :meth:`Method.settings_in`; at a prompt,
  ``config.method_config``): a configuration holds its own method's settings only;
* three abstract methods, what every search calls: ``num_trials(config)``, how many candidates
  it scores; ``can_resume(run)``, whether a stopped search left enough to continue from;
  ``run(search)``: inside the Ray session, score candidates and return a :class:`MethodResult`.
  ``run`` resumes by itself from what earlier sessions left in the run directory, raises
  :class:`~autoaug.core.errors.SearchInterruptedError` when stopped before its candidates are
  all scored and :class:`~autoaug.core.errors.SearchFailedError` when every one failed, and
  reports through ``search.display`` (:class:`autoaug.core.progress.Progress`). With a time
  budget (``search.budget``, :class:`autoaug.search.budget.Budget`) it passes the budget to its
  Tune experiments, proposes nothing more once the budget says trials must end, and then
  returns what it scored instead of raising ``SearchInterruptedError`` (``budget.ended`` set);
* and, where the defaults do not fit: ``presets`` of its own (``pba-cpu``); ``options``, its
  ``autoaug search`` flags (:class:`OptionSpec`, turned into options by
  :mod:`autoaug.launch.search_cmd`); ``space_families``; ``check(config)``, the checks of its
  settings that need the whole configuration (``ValueError``, before anything starts);
  ``study_names(config)``, every Optuna study it opens (checked in a shared
  database before it starts; default: one named like the search); ``max_candidates(config)``, how many final candidates it can return for
  re-scoring at most, and ``candidates_to_train(config, warm_start_measured=...)``, how many of them
  re-scoring trains (what a time budget keeps time for); ``warm_start_capacity(config)``;
  ``rungs(config)``, the epochs at which a search of a recorded configuration stops trials early,
  for ``autoaug report`` and the benchmarks to rank its trials at (none by default);
* ``reporter_class``: what a person sees of its searches, a :class:`MethodReporter` subclass in its
  folder (``search/methods/<name>/reporter.py``), reached as ``method.reporter``: the lines
  ``autoaug search`` prints about it before it starts (``describe``, ``optuna_studies``), what a
  finished search's summary and ``--json`` result say about its provenance record
  (``summary``, ``best_policy_line``, ``result_fields``), and why ``autoaug report`` has no Optuna
  study of it to draw (``report_note``). The defaults: one line describing it, one study named like
  the search, nothing more in the summary or the result, a study to report.

What a method's ``run`` shares with every other is outside its folder, one place each: a Tune
experiment built, or restored from what earlier sessions left, and run
(:func:`autoaug.search.tune.experiment.run_experiment`), the time budget's trials read back
(:meth:`PreparedSearch.budget_stopped`), and a stop before its candidates are all scored
(:func:`interrupted`).

What every method's result may carry besides its own record is generic: ``MethodResult.schedule``,
the schedule a user trains with (its last stage the stored policy), stored as the provenance's
``schedule`` that :mod:`autoaug.policies` reads without knowing which method wrote it.

Methods import nothing of each other; what they share is outside their folders: building,
restoring and running a Ray Tune experiment (:mod:`autoaug.search.tune.experiment`), what a
trial that trains the proxy reports (:mod:`autoaug.search.tune.epochs`), Tune's trials read back
(:mod:`autoaug.search.tune.results`).
"""

from __future__ import annotations

import abc
import dataclasses
import importlib.metadata
from collections.abc import Callable, Iterator, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from autoaug.core.errors import SearchFailedError, SearchInterruptedError
from autoaug.core.values import check_keys, invalid
from autoaug.search.decide.assemble import AssembledPolicy, TrialRecord
from autoaug.search.decide.rescore import Candidate
from autoaug.search.run_dir import RunDir, RunState

if TYPE_CHECKING:
    from autoaug.core.progress import Progress
    from autoaug.search.budget import Budget
    from autoaug.search.config import SearchConfig

__all__ = [
    "Method",
    "MethodReporter",
    "MethodSettings",
    "OptionSpec",
    "PreparedSearch",
    "MethodResult",
    "no_study",
    "METHODS",
    "register_method",
    "default_method",
    "method_of",
    "all_failed",
    "interrupted",
    "resume_hint",
    "check_validation_left_to_the_method",
    "check_space_family",
]


@dataclass(frozen=True)
class OptionSpec:
    """One ``autoaug search`` flag of a method: the flag, the key of the configuration's dict form
    it sets (``density.folds``), its help, the ``--help`` group it is listed in (``what``,
    ``method``, ``how``) and its ``argparse`` settings (``type``, ``metavar``, ``choices``...).
    :mod:`autoaug.launch.search_cmd` turns it into an option (``search`` imports nothing of
    ``launch``). Built by :meth:`MethodSettings.option`."""

    flag: str
    key: str
    help: str
    group: str = "method"
    argparse: Mapping[str, Any] = field(default_factory=dict)


class MethodSettings:
    """Base of a method's settings dataclass: built from its mapping form (unknown keys refused
    in one line) and written back to it.

    ``WHAT`` names the settings in messages; ``FIELD`` names them in error messages
    (``SearchConfig.pba.quantile``) and is their section of the dict form
    (``pba: {population: 8}``), unless ``TOP_LEVEL``: then
    the settings are top-level keys of the dict form (the training method's ``num_trials``, as
    they always were). ``PRESETS``: the settings in each preset of :data:`SEARCH_PRESETS
    <autoaug.search.config.SEARCH_PRESETS>` (a preset not named: the defaults)."""

    WHAT: ClassVar[str]
    FIELD: ClassVar[str]
    TOP_LEVEL: ClassVar[bool] = False
    PRESETS: ClassVar[Mapping[str, Mapping[str, Any]]] = {}

    @classmethod
    def from_value(cls, value: Any) -> Any:
        if isinstance(value, cls):
            return value
        if not isinstance(value, Mapping):
            raise ValueError(f"SearchConfig.{cls.FIELD} must be a mapping of its settings, got {type(value).__name__}")
        check_keys(value, cls.names(), f"{cls.WHAT} setting(s)")
        return cls(**value)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def names(cls) -> list[str]:
        """The settings' names (the dataclass's fields)."""
        return [f.name for f in dataclasses.fields(cls)]

    @classmethod
    def key(cls, name: str) -> str:
        """The dotted key of setting ``name`` in a configuration's dict form (``--set``)."""
        return name if cls.TOP_LEVEL else f"{cls.FIELD}.{name}"

    @classmethod
    def config_keys(cls) -> set[str]:
        """The top-level keys of a configuration's dict form that hold these settings."""
        return set(cls.names()) if cls.TOP_LEVEL else {cls.FIELD}

    @classmethod
    def take(cls, data: dict[str, Any]) -> Any:
        """Remove these settings from a configuration's dict form ``data``; returns them (a mapping,
        or the settings object a section held)."""
        if cls.TOP_LEVEL:
            return {k: data.pop(k) for k in cls.names() if k in data}
        return data.pop(cls.FIELD, {})

    def dict_form(self) -> dict[str, Any]:
        """These settings as a configuration's dict form holds them."""
        return self.to_dict() if self.TOP_LEVEL else {self.FIELD: self.to_dict()}

    @classmethod
    def preset(cls, name: str) -> dict[str, Any]:
        """The settings of preset ``name``, as a configuration's dict form holds them ({}: none)."""
        values = dict(cls.PRESETS.get(name, {}))
        if not values:
            return {}
        return values if cls.TOP_LEVEL else {cls.FIELD: values}

    @classmethod
    def option(cls, flag: str, name: str, help: str, *, group: str = "method", **argparse: Any) -> OptionSpec:
        """The ``autoaug search`` flag ``flag`` that sets setting ``name`` (``argparse``: its
        ``type``, ``metavar``, ``choices``, ``action``...)."""
        return OptionSpec(flag, cls.key(name), help, group, argparse)

    def invalid(self, name: str, expected: str) -> ValueError:
        """The one-line error of setting ``name`` (``SearchConfig.pba.quantile: 0.7 is invalid; ...``)."""
        return invalid(self, name, expected, prefix="SearchConfig." + ("" if self.TOP_LEVEL else f"{self.FIELD}."))


@dataclass(frozen=True)
class PreparedSearch:
    """What a method gets: a checked configuration, its run directory and saved state, where the
    progress goes, and the caller's replacements."""

    config: SearchConfig
    run: RunDir
    state: RunState
    display: Progress
    #: Replaces the method's trial function (same signature), e.g. for another trainer.
    trainable: Callable | None = None
    #: A resumed search also retries the trials that had failed.
    resume_errored: bool = False
    #: The search's time budget; None: no budget.
    budget: Budget | None = None

    def budget_stopped(self, experiment: str) -> frozenset[str]:
        """The trials of Tune experiment ``experiment`` the time budget stopped (none without one)."""
        return self.budget.stopped(experiment) if self.budget is not None else frozenset()

    def budget_ended(self) -> bool:
        """The time budget ended the search (it stopped trials or proposals, in any session)."""
        return self.budget is not None and self.budget.ended is not None

    @property
    def study_url(self) -> str:
        return self.state.study_url


@dataclass(frozen=True)
class MethodResult:
    """What a method found: every trial, the assembled policy, the candidates re-scoring chooses
    from (the first is the one stored without re-scoring) and the method's records for the
    provenance."""

    trials: Sequence[TrialRecord]
    assembled: AssembledPolicy
    candidates: Sequence[Candidate]
    #: The provenance's ``optuna`` record (storage, study names, consistency with Tune).
    optuna: Mapping[str, Any]
    #: Method-specific entries of the provenance's ``time`` record.
    timing: Mapping[str, Any] = field(default_factory=dict)
    #: The provenance's ``method`` record (None: the method keeps none).
    provenance: Mapping[str, Any] | None = None
    #: The schedule a user trains with (a :class:`autoaug.policies.schedule.Schedule`) when the first
    #: candidate is the last stage of one; stored as the provenance's ``schedule`` (None: a fixed policy).
    schedule: Any | None = None


def no_study(note: str) -> dict[str, Any]:
    """:attr:`MethodResult.optuna` of a result no Optuna study proposed (PBA; a search whose
    calibration left no time for trials), with ``note`` saying why."""
    return {
        "storage": None,
        "study_name": None,
        "num_trials": 0,
        "consistent_with_tune": True,
        "problems": [],
        "note": note,
    }


class MethodReporter:
    """What a person sees of a method's searches (the module documentation): a method's
    ``reporter_class`` subclasses it in the method's folder and overrides what differs; made with
    the method (``self.method``). Nothing here runs a search."""

    def __init__(self, method: Method) -> None:
        self.method = method

    def describe(self, config: SearchConfig) -> list[str]:
        """The lines ``autoaug search`` prints about the method before it starts."""
        m = self.method
        return [f"  method: {m.help}, {m.num_trials(config)} {m.unit}"]

    def proxy_line(self, train: Any) -> str:
        """The line naming the proxy training (``train``, a ``TrainConfig``) a method's candidates
        are trained with: model, data, split and recipe."""
        return (
            f"  proxy: {train.model} on {train.data} ({train.describe_split()}, split seed {train.split_seed}), "
            f"{train.describe_recipe()}"
        )

    def optuna_studies(self, config: SearchConfig) -> str | None:
        """How those lines name its Optuna studies (None: it uses none)."""
        return f"study: {config.name}"

    def summary(self, record: Mapping[str, Any]) -> list[str]:
        """The lines a finished search's summary adds about its provenance record."""
        return []

    def best_policy_line(self, num_sub_policies: int) -> str | None:
        """How the summary says that the final policy is the best trial's own (assembly rule
        ``best``); None: as the best trial's point of the space family, described."""
        return None

    def result_fields(self, record: Mapping[str, Any]) -> dict[str, Any]:
        """What ``autoaug search --json`` adds to its result from the provenance record."""
        return {}

    def report_note(self, name: str, run_uri: str) -> str | None:
        """Why ``autoaug report`` has no Optuna study of it to draw, and where its record is
        (None: it has one)."""
        return None


#: What a :class:`MethodReporter` answers: a :class:`Method` subclass defining one of these is
#: refused at registration (they would never be called).
REPORTER_HOOKS = ("describe", "optuna_studies", "summary", "best_policy_line", "result_fields", "report_note")


class Method(abc.ABC):
    """A search method (see the module documentation): subclass it, set the four attributes
    (``name``, ``help``, ``settings``, ``unit``), implement the three abstract methods -- how many
    candidates it scores (:meth:`num_trials`), whether a stopped search left enough to continue
    from (:meth:`can_resume`), and the search itself (:meth:`run`) --, say what a person sees
    (``reporter_class``) where the defaults do not fit, and register an instance
    (:func:`register_method`). The other methods have defaults: no checks, presets or flags of its
    own, one Optuna study named like the search, one final candidate, the warm start fitting in
    :meth:`num_trials`."""

    #: ``--method`` / ``method:`` takes this name.
    name: ClassVar[str]
    #: What ``--method`` says about it.
    help: ClassVar[str]
    #: Its settings (a :class:`MethodSettings` dataclass).
    settings: ClassVar[type[MethodSettings]]
    #: What it scores, in messages: ``trials``, ``candidates``, ``members``.
    unit: ClassVar[str]
    #: Presets of its own (the shared settings each changes; the method is set).
    presets: ClassVar[Mapping[str, Mapping[str, Any]]] = {}
    #: Its ``autoaug search`` flags.
    options: ClassVar[Sequence[OptionSpec]] = ()
    #: The space families it searches (:data:`autoaug.search.space.FAMILIES`).
    space_families: ClassVar[Sequence[str]] = ("aa", "randaugment", "trivialaugment")
    #: Whether it takes ``--pack``: its trials train in packs (:mod:`autoaug.search.tune.pack`), or its
    #: own runs (density's fold models); the search's calibration and re-scoring runs then do too.
    packs: ClassVar[bool] = False
    #: How pack servers (:func:`autoaug.search.tune.pack.packed`) run its trials with ``--pack``
    #: above 1: ``"pack"``, a pack's worth per server at a time, the next starting as one ends;
    #: ``"population"``, every trial from its start to its end at once (a population its scheduler
    #: compares as it trains), the servers holding them all and training a pack at a time; None,
    #: its trials are not trained by pack servers (its own runs are, if ``packs``).
    pack_trials: ClassVar[str | None] = None
    #: Whether it is the method a search runs when none is named (exactly one registered method
    #: says so: :func:`default_method`).
    default: ClassVar[bool] = False
    #: What a person sees of its searches (a :class:`MethodReporter` subclass, in its folder).
    reporter_class: ClassVar[type[MethodReporter]] = MethodReporter

    @property
    def reporter(self) -> MethodReporter:
        """Its :attr:`reporter_class`, made with it."""
        return self.reporter_class(self)

    # ---------------------------------------------------------------- what every method answers
    @abc.abstractmethod
    def num_trials(self, config: SearchConfig) -> int:
        """How many candidates it scores (the time budget's plan, messages)."""

    @abc.abstractmethod
    def can_resume(self, run: RunDir) -> bool:
        """Whether a stopped search left enough in ``run`` to continue from."""

    @abc.abstractmethod
    def run(self, search: PreparedSearch) -> MethodResult:
        """Inside the Ray session: score candidates and return what it found (module documentation)."""

    # ---------------------------------------------------------------- defaults
    def check(self, config: SearchConfig) -> None:
        """The checks of its settings that need the whole configuration (``ValueError``)."""
        check_space_family(config, self.name, self.space_families)

    def study_names(self, config: SearchConfig) -> Sequence[str]:
        """The names of every Optuna study it opens (a shared database is checked for them before
        the search starts: :func:`autoaug.search.tune.study.check_studies`)."""
        return (config.name,)

    def max_candidates(self, config: SearchConfig) -> int:
        """How many final candidates it can return for re-scoring at most."""
        return 1

    def candidates_to_train(self, config: SearchConfig, *, warm_start_measured: bool = False) -> int:
        """How many of those re-scoring trains at most: ``warm_start_measured``, calibration
        measured the warm start as the published policy that transferred best (a candidate that
        is that very policy competes with its calibration runs, not trained again)."""
        return self.max_candidates(config)

    def warm_start_capacity(self, config: SearchConfig) -> tuple[int, str]:
        """How many warm-start candidates fit in its first batch, and what they are (a message's
        words: ``trials; raise --num-trials``)."""
        return self.num_trials(config), self.unit

    def rungs(self, config: Mapping[str, Any]) -> tuple[int, ...]:
        """The epochs at which a search of ``config`` (the dict form a result records:
        ``provenance.search.config``) ends trials early, then its last epoch: where
        :func:`autoaug.search.decide.rungs.rung_ranking` compares its trials; ``()``: it stops none
        early, or the configuration does not say."""
        return ()

    def settings_in(self, config: SearchConfig) -> Any:
        """Its settings in ``config`` (an instance of :attr:`settings`)."""
        return config.method_settings(self.settings)


#: The entry-point group of the search methods: each entry ``NAME = module:OBJECT`` names a
#: :class:`Method` (an instance, or a subclass) whose ``name`` is ``NAME``. This project's
#: ``pyproject.toml`` lists the built-in ones; another installed package adds its own.
ENTRY_POINT_GROUP = "autoaug.methods"


class MethodRegistry(MutableMapping[str, Method]):
    """:data:`METHODS`: the search methods by the name ``--method`` / ``method:`` takes. Read for
    the first time, it loads every method of the entry-point group :data:`ENTRY_POINT_GROUP`
    (each checked by :func:`register_method`): the default first (:func:`default_method`), the
    others by name; a method registered later (:func:`register_method`, tests) comes after them.
    Importing a module registers nothing."""

    def __init__(self) -> None:
        self._methods: dict[str, Method] = {}
        self._loaded: set[str] = set()  # the entry points loaded (their names)
        self._scanned = self._loading = False

    def load_entry_points(self) -> None:
        """Load the group's methods not loaded yet (on the first read; again after a package was
        installed while this process runs). A method that cannot be loaded, or whose name is not
        its entry's, is refused in one ``ValueError`` line naming the entry."""
        if self._loading:  # (a method's module read the registry while it was imported)
            return
        self._loading = self._scanned = True
        try:
            found = sorted(
                (e for e in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP) if e.name not in self._loaded),
                key=lambda e: e.name,
            )
            checked = dict(self._methods)
            for entry in found:
                self._loaded.add(entry.name)
                where = f"entry point {entry.name} = {entry.value} (group {ENTRY_POINT_GROUP})"
                try:
                    method = entry.load()
                except Exception as exc:
                    raise ValueError(f"search method of {where} cannot be loaded: {type(exc).__name__}: {exc}") from exc
                method = _registered(method, checked)
                if method.name != entry.name:
                    raise ValueError(f"{where} names method {method.name!r}: the entry's name must be the method's")
                checked[method.name] = method
            # the default first, wherever its package put it; then the others by name
            self._methods = dict(sorted(checked.items(), key=lambda kv: not kv[1].default))
        finally:
            self._loading = False

    def _ready(self) -> dict[str, Method]:
        if not self._scanned:
            self.load_entry_points()
        return self._methods

    def __getitem__(self, name: str) -> Method:
        return self._ready()[name]

    def __setitem__(self, name: str, method: Method) -> None:
        self._ready()[name] = method

    def __delitem__(self, name: str) -> None:
        del self._ready()[name]
        self._loaded.discard(name)  # (loaded again by the next load_entry_points while its entry is there)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._ready()))

    def __len__(self) -> int:
        return len(self._ready())

    def __repr__(self) -> str:
        return f"MethodRegistry({list(self._ready())})"


#: The search methods (:class:`MethodRegistry`): loaded from the entry-point group when first read;
#: :func:`register_method` adds one in this process.
METHODS = MethodRegistry()

#: What a method must define (:func:`register_method` checks them at registration).
REQUIRED_ATTRIBUTES = ("name", "help", "settings", "unit")
#: The values of :attr:`Method.pack_trials`.
PACK_TRIALS = (None, "pack", "population")


def register_method(method: Method | type[Method]) -> Method:
    """Add ``method`` (a :class:`Method`, or a subclass: then an instance of it) to :data:`METHODS`
    in this process (after the entry-point group's); returns the instance. Refused in one
    ``ValueError`` line, before anything runs: an object that is not a :class:`Method`, one that
    lacks an attribute or leaves an abstract method unimplemented, a name, settings attribute or
    settings key of another method, a second default."""
    method = _registered(method, METHODS)
    METHODS[method.name] = method
    return method


def _registered(method: Any, methods: Mapping[str, Method]) -> Method:
    """``method`` (an instance, or a subclass: then an instance of it) checked against ``methods``
    (:func:`register_method`'s refusals)."""
    cls = method if isinstance(method, type) else type(method)
    label = getattr(cls, "name", None) or cls.__name__
    if not issubclass(cls, Method):
        raise ValueError(
            f"method {label!r}: {cls.__name__} is not a subclass of {Method.__module__}.Method "
            "(subclass it and implement num_trials, can_resume and run)"
        )
    missing = sorted(cls.__abstractmethods__)  # type: ignore[attr-defined]
    missing += [a for a in REQUIRED_ATTRIBUTES if not hasattr(cls, a)]
    if missing:
        raise ValueError(f"method {label!r} ({cls.__name__}) is incomplete: it does not define {', '.join(missing)}")
    shown = [hook for hook in REPORTER_HOOKS if any(hook in vars(c) for c in cls.__mro__ if c is not Method)]
    if shown:
        raise ValueError(
            f"method {label!r} ({cls.__name__}) defines {', '.join(shown)}: what a person sees is its reporter's "
            f"(subclass {Method.__module__}.MethodReporter and set reporter_class)"
        )
    reporter = getattr(cls, "reporter_class", None)
    if not (isinstance(reporter, type) and issubclass(reporter, MethodReporter)):
        raise ValueError(f"method {label!r}: reporter_class must be a MethodReporter subclass, got {reporter!r}")
    if isinstance(method, type):
        method = method()
    for attribute in ("name", "help", "unit"):
        value = getattr(method, attribute)
        if not isinstance(value, str) or not value:
            raise ValueError(f"method {label!r}: {attribute} must be a non-empty string, got {value!r}")
    if method.pack_trials not in PACK_TRIALS:
        raise ValueError(
            f"method {label!r}: pack_trials must be one of {list(PACK_TRIALS)}, got {method.pack_trials!r}"
        )
    if method.name in methods:
        raise ValueError(f"method name {method.name!r} is taken")
    settings = method.settings
    if not (isinstance(settings, type) and issubclass(settings, MethodSettings) and dataclasses.is_dataclass(settings)):
        raise ValueError(f"method {method.name!r}: settings must be a MethodSettings dataclass, got {settings!r}")
    for other in methods.values():
        taken = ({other.settings.FIELD} | other.settings.config_keys()) & ({settings.FIELD} | settings.config_keys())
        if taken:
            raise ValueError(
                f"method {method.name!r}: settings key(s) {sorted(taken)} are those of method {other.name!r}"
            )
        if method.default and other.default:
            raise ValueError(f"method {method.name!r} says it is the default method, as {other.name!r} does")
    return method


def default_method() -> str:
    """The name of the method a search runs when none is named: the registered method that says it
    is the default (:attr:`Method.default`)."""
    named = [name for name, m in METHODS.items() if m.default]
    if not named:
        raise ValueError(f"no registered search method is the default one; registered: {list(METHODS)}")
    return named[0]


def method_of(config: Mapping[str, Any]) -> Method | None:
    """The registered method a search configuration's dict form runs (its ``method``; none named:
    the default); None: a method not registered in this process."""
    name = config.get("method") or default_method()
    return METHODS.get(name) if isinstance(name, str) else None


def check_validation_left_to_the_method(train: Any, why: str) -> None:
    """A ``ValueError`` line when the search's training config sets which epochs validate
    (``eval_every``, ``eval_from``, ``eval_epochs``): a method that scores by validation decides
    that itself (``why`` says how)."""
    for setting, default in (("eval_every", 1), ("eval_from", 1), ("eval_epochs", None)):
        value = getattr(train, setting)
        if value != default:
            raise ValueError(
                f"train.{setting} is {value}: {why}; set {setting} to {'null' if default is None else default}"
            )


def check_space_family(config: SearchConfig, method: str, families: Sequence[str] = ("aa",)) -> None:
    """A ``ValueError`` line when the search space's family is not one of ``families``, those
    ``method`` searches (a method whose machinery reads the ``aa`` family's parameters calls it
    from its ``check``)."""
    family = config.space.family
    if family not in families:
        space = " and ".join(families)
        others = [m.name for m in METHODS.values() if family in m.space_families]
        use = f" (use --method {' or '.join(others)} for the {family} family)" if others else ""
        raise ValueError(f"method {method} searches the {space} space only; space.family is {family!r}{use}")


def all_failed(trials: Sequence[TrialRecord], name: str, what: str = "trials") -> SearchFailedError:
    """The error of a search none of whose trials produced a score (the first error shown)."""
    failed = [t for t in trials if t.status == "failed"]
    first = failed[0] if failed else trials[0]
    return SearchFailedError(
        f"all {len(trials)} {what} of search {name!r} failed; first error "
        f"(trial {first.trial_id}): {first.error or 'no score reported'}"
    )


def interrupted(config: SearchConfig, how_far: str) -> SearchInterruptedError:
    """The error of a search stopped (Ctrl-C, SIGTERM, a lost driver) before its candidates were
    all scored: ``how_far`` it got (``with 3 of 8 trials finished``), then how to resume it."""
    return SearchInterruptedError(f"search {config.name!r} stopped {how_far}; " + resume_hint(config))


def resume_hint(config: SearchConfig) -> str:
    """How to continue a search that stopped: the end of every "interrupted" message."""
    return f"resume it with: autoaug search --resume {config.name} --storage {config.storage}"
