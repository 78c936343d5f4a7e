"""What a :class:`~autoaug.policies.store.PolicyStore` hands out: a stored version, a version that
does not verify, the evaluations attached to a version, and the report of ``policies check``.

Plain frozen records, apart from the store's operations (:mod:`autoaug.policies.store`) and its
maintenance (:mod:`autoaug.policies.store_check`), which both build them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from autoaug.policies.policy import Policy

__all__ = ["EVALUATIONS_DIR", "Evaluation", "StoredPolicy", "CorruptVersion", "CheckReport"]

#: The folder of a name that holds the evaluations attached to its versions (``<name>/_evaluations/vNNNNNN/``).
EVALUATIONS_DIR = "_evaluations"


@dataclass(frozen=True)
class Evaluation:
    """Results attached to a stored version after it was saved (e.g. test accuracy per seed)."""

    attached_at: str
    results: dict[str, Any]


@dataclass(frozen=True)
class StoredPolicy:
    """One stored version: the policy and everything recorded with it."""

    name: str
    version: int
    policy: Policy
    content_hash: str
    created_at: str  # UTC, ISO 8601 (``2026-05-09T07:35:25.123456Z``)
    provenance: dict[str, Any]
    evaluations: tuple[Evaluation, ...] = ()
    location: str = field(default="", compare=False)

    @property
    def ref(self) -> str:
        """The exact reference of this version, ``name@version``."""
        return f"{self.name}@{self.version}"


@dataclass(frozen=True)
class CorruptVersion:
    """A stored version that cannot be read or does not verify (listed by
    :meth:`PolicyStore.history` with ``include_corrupt=True`` and by :meth:`PolicyStore.check`)."""

    name: str
    version: int
    error: str  # the CorruptArtifactError's message (names the file)
    location: str = field(default="", compare=False)

    @property
    def ref(self) -> str:
        return f"{self.name}@{self.version}"


@dataclass(frozen=True)
class CheckReport:
    """What :meth:`PolicyStore.check` found and did."""

    uri: str
    verified: tuple[str, ...]  # refs of the versions that verified
    corrupt: tuple[CorruptVersion, ...]
    removed: tuple[str, ...]  # leftovers of killed saves, deleted
    kept: tuple[str, ...]  # leftovers younger than the grace period (a save may be running)
    indexed: tuple[str, ...] = ()  # verified versions given the index entry they lacked (autoaug.policies.index)

    @property
    def ok(self) -> bool:
        return not self.corrupt
