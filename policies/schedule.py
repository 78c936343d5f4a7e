"""A policy schedule: the augmentation policy as a function of the training epoch.

Population Based Augmentation (Ho et al., ICML 2019) does not find one policy but a *schedule*: the policy the best member of the population trained with, stage
by stage. A :class:`Schedule` is a sequence of stages ``(start, policy)``, ``start`` a fraction of
training in ``[0, 1)`` (the first stage starts at 0), so that a schedule found over a 120-epoch
proxy run stretches to a 300-epoch final training::

    from autoaug.policies.schedule import Schedule
    s = Schedule("mine", [(0.0, p0), (0.25, p1), (0.5, p2)])
    s.at(epoch=40, epochs=120)      # p1 (0-based epoch; stage k covers epochs ceil(start_k * epochs) ..)
    s.start_epochs(300)             # [0, 75, 150]
    Schedule.fixed(p)               # a fixed policy is a schedule of one stage
    s.content_hash                  # sha256 of the stages' starts and policy contents (not the names)
    s.to_torchvision(epochs=300)    # a transform following the epoch: transform.set_epoch(e)

Every stage has the same base (the crop/flip before the policy is built once into a training
pipeline; :mod:`autoaug.policies.bases`). The JSON form is ``{"kind": "schedule", "name": ...,
"stages": [{"start": 0.0, "policy": {...}}, ...]}``.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from autoaug.policies.policy import Policy, PolicyError

__all__ = [
    "Schedule",
    "Stage",
    "SCHEDULE_KIND",
    "PROVENANCE_KEY",
    "is_schedule_dict",
    "trainable_from_dict",
    "provenance_schedule",
    "EpochTransform",
]

#: The ``kind`` of a schedule's JSON document (a policy's has no ``kind``).
SCHEDULE_KIND = "schedule"
#: The key of a stored version's provenance that holds the schedule a user trains with (the
#: version's policy is its last stage): a search's result whose method found a schedule, an imported
#: schedule. Whoever wrote it, it is read here alone.
PROVENANCE_KEY = "schedule"
#: Stage starts are kept to this many decimals (a fraction of training: 1e-9 of 10^6 epochs).
START_DECIMALS = 9


def is_schedule_dict(d: Any) -> bool:
    """Whether a parsed JSON document is a schedule (rather than a policy)."""
    return isinstance(d, Mapping) and d.get("kind") == SCHEDULE_KIND


def trainable_from_dict(d: Mapping[str, Any]) -> Policy | Schedule:
    """What a training run takes, from its JSON form: a :class:`Schedule` for a schedule's document,
    else a :class:`Policy` (a run's arguments cross process boundaries as dicts)."""
    return Schedule.from_dict(d) if is_schedule_dict(d) else Policy.from_dict(d)


def provenance_schedule(provenance: Any, policy: Policy) -> Schedule | None:
    """The schedule a stored version's provenance holds (:data:`PROVENANCE_KEY`: a search's result
    that found a schedule, an imported schedule), or None. The store keeps a schedule's last stage
    as the version's (hash-verified) policy; raises :class:`PolicyError` when the schedule does not
    match its own content hash or does not end with ``policy``."""
    data = provenance.get(PROVENANCE_KEY) if isinstance(provenance, Mapping) else None
    if data is None and isinstance(provenance, Mapping) and isinstance(provenance.get("method"), Mapping):
        # versions stored before 2026-11-29 kept it in the search record's own section
        data = provenance["method"].get(PROVENANCE_KEY)
    if not is_schedule_dict(data):
        return None
    try:
        schedule = Schedule.from_dict(data)
    except PolicyError as exc:
        raise PolicyError(f"its schedule is damaged: {exc}") from None
    if schedule.final.content_hash != policy.content_hash:
        raise PolicyError(
            f"its schedule's last stage ({schedule.final.content_hash[:12]}) is not the stored policy "
            f"({policy.content_hash[:12]}): the provenance was altered"
        )
    return schedule


@dataclass(frozen=True)
class Stage:
    """One stage of a schedule: ``policy`` from ``start`` (a fraction of training) on."""

    start: float
    policy: Policy


@dataclass(frozen=True)
class Schedule:
    """Stages of ``(start fraction, Policy)``; see the module documentation.

    Raises:
        PolicyError: (a ``ValueError``) for no stage, a first start other than 0, starts not
            strictly increasing or outside ``[0, 1)``, a stage that is not a Policy, or stages of
            different bases.
    """

    name: str
    stages: tuple[Stage, ...]

    def __init__(self, name: str, stages: Iterable[Any]) -> None:
        if not isinstance(name, str) or not name:
            raise PolicyError(f"schedule name {name!r} is invalid; expected a policy name")
        Policy(name, 10, [])  # the name rule of a policy
        out: list[Stage] = []
        for i, stage in enumerate(stages):
            start, policy = (stage.start, stage.policy) if isinstance(stage, Stage) else stage
            if not isinstance(policy, Policy):
                raise PolicyError(f"schedule stage {i}: {type(policy).__name__} is not a Policy")
            if isinstance(start, bool) or not isinstance(start, (int, float)) or not math.isfinite(start):
                raise PolicyError(f"schedule stage {i}: start {start!r} is not a number in [0, 1)")
            start = round(float(start), START_DECIMALS) + 0.0
            if not 0.0 <= start < 1.0:
                raise PolicyError(f"schedule stage {i}: start {start!r} is outside [0, 1) (a fraction of training)")
            if i == 0 and start != 0.0:
                raise PolicyError(f"schedule stage 0 starts at {start!r}; the first stage starts at 0")
            if out and start <= out[-1].start:
                raise PolicyError(
                    f"schedule stage {i}: start {start!r} does not follow stage {i - 1}'s "
                    f"{out[-1].start!r}; starts increase strictly"
                )
            if out and policy.base != out[0].policy.base:
                raise PolicyError(
                    f"schedule stage {i}: base {policy.base!r} differs from stage 0's "
                    f"{out[0].policy.base!r}; every stage of a schedule has one base"
                )
            out.append(Stage(start, policy))
        if not out:
            raise PolicyError("a schedule needs at least one stage")
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "stages", tuple(out))

    # ------------------------------------------------------------------ construction
    @classmethod
    def fixed(cls, policy: Policy) -> Schedule:
        """The schedule of one stage: ``policy`` all training long."""
        return cls(policy.name, [(0.0, policy)])

    @classmethod
    def coerce(cls, value: Schedule | Policy) -> Schedule:
        """``value`` itself when a Schedule, :meth:`fixed` when a Policy."""
        if isinstance(value, Schedule):
            return value
        if isinstance(value, Policy):
            return cls.fixed(value)
        raise PolicyError(f"expected a Policy or a Schedule, got {type(value).__name__}")

    def then(self, start: float, policy: Policy) -> Schedule:
        """This schedule up to ``start``, then ``policy`` (stages starting at or after ``start``
        are dropped; a policy equal in content to the stage it would follow adds no stage)."""
        kept = [s for s in self.stages if s.start < round(float(start), START_DECIMALS)]
        if kept and kept[-1].policy.content_hash == policy.content_hash:
            return Schedule(self.name, kept)
        return Schedule(self.name, [*kept, (start, policy)])

    def with_name(self, name: str) -> Schedule:
        return Schedule(name, self.stages)

    # ------------------------------------------------------------------ reading
    @property
    def is_fixed(self) -> bool:
        return len(self.stages) == 1

    @property
    def final(self) -> Policy:
        """The last stage's policy."""
        return self.stages[-1].policy

    @property
    def base(self) -> str:
        return self.stages[0].policy.base

    @staticmethod
    def _start_epoch(start: float, epochs: int) -> int:
        return math.ceil(start * epochs - 1e-6)

    def start_epochs(self, epochs: int) -> list[int]:
        """The 0-based first epoch of each stage in a training of ``epochs`` epochs (a stage
        shorter than one epoch there starts where the next does, and never applies)."""
        _check_epochs(epochs)
        return [self._start_epoch(s.start, epochs) for s in self.stages]

    def stage_index(self, epoch: int, epochs: int) -> int:
        """The stage that applies in 0-based ``epoch`` of ``epochs``."""
        _check_epochs(epochs)
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise PolicyError(f"epoch {epoch!r} is invalid; expected an integer >= 0 (0-based)")
        index = 0
        for i, first in enumerate(self.start_epochs(epochs)):
            if first <= epoch:
                index = i
        return index

    def at(self, epoch: int, epochs: int) -> Policy:
        """The policy of 0-based ``epoch`` in a training of ``epochs`` epochs."""
        return self.stages[self.stage_index(epoch, epochs)].policy

    # ------------------------------------------------------------------ forms
    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": SCHEDULE_KIND,
            "name": self.name,
            "stages": [{"start": s.start, "policy": s.policy.to_dict()} for s in self.stages],
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Schedule:
        if not is_schedule_dict(d):
            raise PolicyError(f'a schedule document has "kind": "{SCHEDULE_KIND}"')
        unknown = sorted(set(d) - {"kind", "name", "stages", "content_hash"})
        if unknown or "stages" not in d or "name" not in d:
            raise PolicyError(f"schedule keys {sorted(d)}; expected kind, name, stages (and optionally content_hash)")
        stages = d["stages"]
        if not isinstance(stages, list):
            raise PolicyError('schedule \'stages\' must be a list of {"start", "policy"}')
        parsed = []
        for i, s in enumerate(stages):
            if not isinstance(s, Mapping) or set(s) != {"start", "policy"}:
                raise PolicyError(f"schedule stage {i}: expected an object with keys start and policy")
            try:
                parsed.append((s["start"], Policy.from_dict(s["policy"])))
            except PolicyError as exc:
                raise PolicyError(f"schedule stage {i}: {exc}") from None
        schedule = cls(d["name"], parsed)
        recorded = d.get("content_hash")
        if recorded is not None and recorded != schedule.content_hash:
            raise PolicyError(
                f"schedule {d['name']!r}: content_hash {str(recorded)[:12]} does not match its "
                f"stages ({schedule.content_hash[:12]}): the document was altered"
            )
        return schedule

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps({**self.to_dict(), "content_hash": self.content_hash}, indent=indent)

    @classmethod
    def from_json(cls, s: str | bytes) -> Schedule:
        from autoaug.core.values import DuplicateKeyError, loads_strict

        try:
            return cls.from_dict(loads_strict(s if isinstance(s, str) else bytes(s).decode("utf-8")))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise PolicyError(f"schedule JSON is not valid JSON: {exc}") from None
        except DuplicateKeyError as exc:
            raise PolicyError(str(exc)) from None

    def canonical_content_json(self) -> str:
        """Canonical JSON of the content (starts and policy contents; no names)."""
        return json.dumps(
            [[s.start, json.loads(s.policy.canonical_content_json())] for s in self.stages],
            sort_keys=True,
            separators=(",", ":"),
            ensure_ascii=True,
        )

    @property
    def content_hash(self) -> str:
        """sha256 hex of :meth:`canonical_content_json`; a one-stage schedule hashes as its policy
        (a fixed policy and its schedule are one content)."""
        if self.is_fixed:
            return self.final.content_hash
        return hashlib.sha256(self.canonical_content_json().encode("ascii")).hexdigest()

    def table(self, epochs: int | None = None) -> str:
        """A readable listing: each stage's start (and first epoch of ``epochs``) and policy."""
        lines = [f"schedule {self.name}: {len(self.stages)} stage{'s' if len(self.stages) > 1 else ''}"]
        firsts = self.start_epochs(epochs) if epochs else [None] * len(self.stages)
        for i, (s, first) in enumerate(zip(self.stages, firsts)):
            when = f"from {s.start:.0%} of training" + (
                f" (epoch {first + 1} of {epochs})" if first is not None else ""
            )
            lines.append(
                f"stage {i}: {when}, {len(s.policy.sub_policies)} sub-policies, hash {s.policy.content_hash[:12]}"
            )
            lines += ["  " + line for line in s.policy.table().splitlines()]
        return "\n".join(lines)

    def to_torchvision(self, *, epochs: int, **kwargs: Any) -> EpochTransform:
        """A torchvision transform that applies the policy of the current epoch: call
        ``transform.set_epoch(e)`` (0-based) at the start of every epoch of an ``epochs``-epoch
        training. ``kwargs`` go to :meth:`Policy.to_torchvision` of each stage."""
        return EpochTransform(self, epochs, **kwargs)


class EpochTransform:
    """The torchvision transform of a :class:`Schedule` (:meth:`Schedule.to_torchvision`): each
    stage's ``Policy.to_torchvision()`` built once, the one of ``epoch`` applied. Picklable (a
    ``DataLoader`` worker gets a copy: call ``set_epoch`` before creating the epoch's iterator,
    or use persistent workers with care)."""

    def __init__(self, schedule: Schedule, epochs: int, **kwargs: Any) -> None:
        _check_epochs(epochs)
        self.schedule, self.epochs, self.kwargs = schedule, epochs, kwargs
        self.epoch = 0
        self._transforms: dict[int, Any] = {}

    def set_epoch(self, epoch: int) -> None:
        self.schedule.stage_index(epoch, self.epochs)  # validates
        self.epoch = epoch

    @property
    def policy(self) -> Policy:
        return self.schedule.at(self.epoch, self.epochs)

    def __call__(self, *inputs: Any) -> Any:
        index = self.schedule.stage_index(self.epoch, self.epochs)
        if index not in self._transforms:
            self._transforms[index] = self.schedule.stages[index].policy.to_torchvision(**self.kwargs)
        return self._transforms[index](*inputs)

    def __repr__(self) -> str:
        return f"EpochTransform({self.schedule.name!r}, epoch {self.epoch} of {self.epochs})"


def _check_epochs(epochs: Any) -> None:
    if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1:
        raise PolicyError(f"epochs {epochs!r} is invalid; expected an integer >= 1")
