"""What a comparison compares: candidates (found policies and baseline presets), and the test
split that goes with the training data (:func:`autoaug.launch.data_paths.default_test_data`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from autoaug.core.errors import AutoaugError, CompareError
from autoaug.launch.data_paths import default_test_data
from autoaug.policies import presets
from autoaug.policies.bases import rebase
from autoaug.policies.reference import resolve, split_references
from autoaug.policies.schedule import Schedule
from autoaug.policies.store import default_store_uri

__all__ = ["DEFAULT_BASELINES", "Candidate", "parse_baselines", "resolve_candidates", "default_test_data"]

#: The baselines a found policy is compared with unless told otherwise: the three bases alone
#: (none, crop, standard) and the published policies.
DEFAULT_BASELINES: tuple[str, ...] = (
    "none",
    "crop",
    "standard",
    "randaugment:n=2,m=9",
    "trivialaugment",
    "autoaugment-cifar10",
)


@dataclasses.dataclass(frozen=True)
class Candidate:
    """One policy of the comparison."""

    label: str  # shown in tables and plots: "standard", "mine@3", "found.json"
    ref: str  # as the user gave it
    policy: Any  # policies.Policy
    kind: str  # "policy" (given with --policy) or "baseline"
    store_ref: str | None = None  # "name@version" when it came from the policy store
    rebased_from: str | None = None  # the policy's own base when --base moved it (the label says so)
    #: A schedule (a PBA search's result, a schedule file): trained with its stages switched at their
    #: epochs; ``policy`` is then its last stage. None: the fixed ``policy``.
    schedule: Any = None

    @property
    def policy_hash(self) -> str:
        """What identifies the candidate's augmentation: the schedule's hash, else the policy's."""
        return self.trained.content_hash

    @property
    def trained(self) -> Any:
        """What the runs train with: the schedule, else the policy."""
        return self.schedule if self.schedule is not None else self.policy

    @property
    def base(self) -> str:
        """The base this candidate trains on."""
        return self.policy.base

    def on_base(self, base: str | None) -> Candidate:
        """This candidate as ``--base`` means it (:func:`autoaug.policies.bases.rebase`): a policy with
        sub-policies moved onto ``base``, labelled ``LABEL [base BASE]``; a base alone (the presets none,
        crop, standard) or a policy already on ``base``: itself."""
        moved = rebase(self.policy, base)
        if moved.base == self.policy.base:
            return self
        schedule = self.schedule
        if schedule is not None:
            schedule = Schedule(schedule.name, [(s.start, rebase(s.policy, base)) for s in schedule.stages])
        return dataclasses.replace(
            self,
            label=f"{self.label} [base {moved.base}]",
            policy=moved,
            rebased_from=self.policy.base,
            schedule=schedule,
        )


def parse_baselines(text: str | Sequence[str] | None) -> tuple[str, ...]:
    """Split a comma-separated baseline list (:func:`autoaug.policies.reference.split_references`:
    preset parameters stay attached to their preset). ``""`` gives no baselines; ``None`` the
    defaults."""
    if text is None:
        return DEFAULT_BASELINES
    if not isinstance(text, str):
        return tuple(str(t).strip() for t in text if str(t).strip())
    return split_references(text)


def resolve_candidates(
    policies: Sequence[str], baselines: Sequence[str], store: Any = None, base: str | None = None
) -> list[Candidate]:
    """Resolve ``--policy`` references and baseline presets into candidates.

    A ``--policy`` reference follows the one precedence of :mod:`autoaug.policies.reference`
    (preset, then policy JSON file, then a stored policy: ``name``, ``name@3``, ``name@latest``,
    hash prefix). Baselines must be presets. ``base`` (``--base``): every candidate with
    sub-policies, given with ``--policy`` or as a baseline, trains on that base instead of its own
    (:meth:`Candidate.on_base`); the bases alone (none, crop, standard) keep theirs. Raises
    :class:`CompareError` naming the reference.
    """
    candidates: list[Candidate] = []
    for ref in policies:
        ref = str(ref).strip()
        if not ref:
            raise CompareError("empty --policy reference")
        try:
            found = resolve(ref, store=store if store is not None else default_store_uri())
        except (AutoaugError, ValueError, LookupError) as exc:
            raise CompareError(f"--policy {ref!r}: {exc}") from None
        schedule = found.schedule if found.schedule is not None and not found.schedule.is_fixed else None
        candidates.append(
            Candidate(found.label, ref, found.policy, "policy", store_ref=found.store_ref, schedule=schedule)
        )
    for ref in baselines:
        ref = str(ref).strip()
        if not presets.is_preset(ref):
            raise CompareError(
                f"baseline {ref!r} is not a preset policy; known presets: {', '.join(presets.names())} "
                "(give other policies with --policy)"
            )
        try:
            policy = presets.resolve(ref)
        except ValueError as exc:
            raise CompareError(f"policy {ref!r}: {exc}") from None
        candidates.append(Candidate(ref.removeprefix(presets.PREFIX), ref, policy, "baseline"))
    if base is not None:
        try:
            candidates = [c.on_base(base) for c in candidates]
        except ValueError as exc:
            raise CompareError(str(exc)) from None
    if not candidates:
        raise CompareError("nothing to compare: give --policy REF and/or baselines")
    seen_labels: dict[str, str] = {}
    seen_hashes: dict[str, str] = {}
    for c in candidates:
        if c.label in seen_labels:
            raise CompareError(f"policy {c.label!r} is given twice ({seen_labels[c.label]!r} and {c.ref!r})")
        if c.policy_hash in seen_hashes:
            raise CompareError(
                f"{c.ref!r} and {seen_hashes[c.policy_hash]!r} are the same policy (content hash "
                f"{c.policy_hash[:12]}); compare each policy once"
            )
        seen_labels[c.label] = c.ref
        seen_hashes[c.policy_hash] = c.ref
    return candidates
