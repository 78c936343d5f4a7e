"""The one policy-reference resolver: what ``--policy REF`` / ``REF`` means for every command
(``autoaug train``, ``autoaug compare``, ``autoaug policies show|export|diff|preview``) and for
the Python API (:func:`autoaug.policies.resolve_policy`).

A reference is tried in this order; the first rule that applies decides:

1. a :class:`Policy` object: itself;
2. a preset: ``preset:NAME`` (``preset:randaugment:n=2,m=9``), or a bare preset name
   (``standard``, ``autoaugment-cifar10``, ``randaugment:n=2,m=9``) that does not look like a
   path. Built-in names are reserved: a stored policy that happens to have the same name is
   reached with ``NAME@latest`` or ``NAME@VERSION``, a file with ``./NAME``;
3. a policy JSON file (as written by :meth:`Policy.to_json`): anything containing a path
   separator or ending in ``.json``; ``~`` is expanded;
4. a policy-store reference (``NAME`` = its latest version, ``NAME@latest``, ``NAME@3``, a
   content-hash prefix) found in ``store``;
5. an existing file with that bare name (``./NAME`` always means the file).

A reference may name a *schedule* (:class:`~autoaug.policies.schedule.Schedule`, the policy as a
function of the epoch): a schedule JSON file (``"kind": "schedule"``), or a stored version whose
provenance holds one (a search that found a schedule stores its last stage as the policy and the
schedule in the provenance's ``schedule``; it is checked against its content hash and against the
stored policy).
:attr:`ResolvedPolicy.schedule` is then set and :attr:`ResolvedPolicy.policy` is the last stage;
:func:`resolve_schedule` gives every reference as a schedule (a fixed policy: one stage).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autoaug.core.errors import UserInputError
from autoaug.policies.policy import Policy, read_policy_text

__all__ = [
    "ResolvedPolicy",
    "resolve",
    "resolve_policy",
    "resolve_schedule",
    "stored_schedule",
    "looks_like_path",
    "split_references",
]


@dataclass(frozen=True)
class ResolvedPolicy:
    """A resolved reference: the policy, which rule found it, and how to name it."""

    policy: Policy
    source: str  # "object", "preset", "file" or "store"
    label: str  # "standard", "mine.json", "cifar10-r8@3" (the store's NAME@VERSION)
    record: Any = None  # the store's StoredPolicy when source == "store"
    #: The schedule the reference names (None: a fixed policy); ``policy`` is then its last stage.
    schedule: Any = None

    @property
    def store_ref(self) -> str | None:
        return self.record.ref if self.record is not None else None

    @property
    def as_schedule(self) -> Any:
        """The reference as a schedule: its own, or the fixed policy as one stage."""
        from autoaug.policies.schedule import Schedule

        return self.schedule if self.schedule is not None else Schedule.fixed(self.policy)


def split_references(text: str) -> tuple[str, ...]:
    """Split a comma-separated list of references; a preset's parameters stay attached to it.

    ``"none,standard,randaugment:n=2,m=9,trivialaugment"`` gives ``("none", "standard",
    "randaugment:n=2,m=9", "trivialaugment")``: a piece with ``=`` but no ``:`` continues the
    previous piece's parameters when that one has a ``:``. Empty pieces are dropped.
    """
    out: list[str] = []
    for piece in (p.strip() for p in text.split(",")):
        if not piece:
            continue
        if "=" in piece and ":" not in piece and out and ":" in out[-1]:
            out[-1] += "," + piece
        else:
            out.append(piece)
    return tuple(out)


def looks_like_path(ref: str) -> bool:
    """True when ``ref`` is meant as a file: a path separator or a ``.json`` suffix."""
    return "/" in ref or os.sep in ref or ref.lower().endswith(".json")


def _read_file(ref: str) -> ResolvedPolicy:
    path = Path(ref).expanduser()
    if not path.is_file():
        raise UserInputError(f"policy file {ref!r} does not exist")
    from autoaug.policies.schedule import SCHEDULE_KIND, Schedule

    try:
        text = read_policy_text(path)  # the one reader: size limit, UTF-8 (BOM allowed)
        if f'"{SCHEDULE_KIND}"' in text and '"stages"' in text:
            schedule = Schedule.from_json(text)
            return ResolvedPolicy(schedule.final, "file", path.name, schedule=schedule)
        policy = Policy.from_json(text)
    except OSError as exc:
        raise UserInputError(f"policy file {ref!r} cannot be read: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise UserInputError(f"policy file {ref!r} is not a valid policy: {exc}") from None
    return ResolvedPolicy(policy, "file", path.name)


def stored_schedule(record: Any) -> Any:
    """The schedule a stored version's provenance holds (its ``schedule``), or None. Raises
    :class:`~autoaug.core.errors.StoreError` when it does not match its content hash or its last
    stage is not the stored (hash-verified) policy."""
    from autoaug.core.errors import StoreError
    from autoaug.policies.schedule import provenance_schedule

    try:  # the store checked it when it read the version; a record from elsewhere is checked here
        return provenance_schedule(record.provenance, record.policy)
    except ValueError as exc:
        raise StoreError(f"stored policy {record.ref}: {exc}") from None


def _open(store: Any) -> Any:
    if store is None or hasattr(store, "get") or hasattr(store, "load"):
        return store
    from autoaug.policies.store import PolicyStore

    try:
        return PolicyStore(store)
    except (TypeError, ValueError) as exc:
        raise UserInputError(str(exc)) from None


def resolve(ref: str | os.PathLike | Policy, store: Any = None) -> ResolvedPolicy:
    """Resolve ``ref`` by the rules of the module documentation (first match wins).

    ``store``: where rule 4 looks -- a :class:`autoaug.policies.store.PolicyStore` (or any object
    with ``get(ref)`` / ``load(ref)``), a store location (opened only if rule 4 is reached), or
    None (no store: rule 4 is skipped).

    Raises:
        UserInputError: not a reference, a missing or invalid file, no store for rule 4.
        autoaug.core.errors.StoreError: the store has no such policy (a ``LookupError`` too).
    """
    from autoaug.policies import presets

    if isinstance(ref, Policy):
        return ResolvedPolicy(ref, "object", ref.name)
    what = (
        "a preset name, a path to a policy JSON file, a store reference (NAME, NAME@N, NAME@latest, "
        "hash prefix) or a Policy"
    )
    if not isinstance(ref, (str, os.PathLike)):
        raise UserInputError(f"policy reference {ref!r} is a {type(ref).__name__}; expected {what}")
    if not os.fspath(ref).strip():
        raise UserInputError(f"empty policy reference; expected {what}")
    text = os.fspath(ref).strip()
    if text.startswith(presets.PREFIX) or (presets.is_preset(text) and not looks_like_path(text)):
        try:
            policy = presets.resolve(text)
        except ValueError as exc:
            raise UserInputError(f"policy {text!r}: {exc}") from None
        return ResolvedPolicy(policy, "preset", text.removeprefix(presets.PREFIX))
    if looks_like_path(text):
        return _read_file(text)
    opened = _open(store)
    if opened is None:
        if Path(text).is_file():
            return _read_file(text)
        raise UserInputError(
            f"cannot resolve policy {text!r}: not a preset (known: {', '.join(presets.names())}), "
            "not an existing JSON file, and no policy store was given for a store reference"
        )
    from autoaug.policies.store import PolicyNotFoundError

    try:
        if hasattr(opened, "get"):
            record = opened.get(text)
            return ResolvedPolicy(record.policy, "store", record.ref, record, schedule=stored_schedule(record))
        return ResolvedPolicy(opened.load(text), "store", text)
    except PolicyNotFoundError as exc:
        if Path(text).is_file():
            return _read_file(text)
        raise PolicyNotFoundError(
            f"not a preset ({', '.join(presets.names())}), not a policy JSON file, and not in the policy store: {exc}"
        ) from None


def resolve_policy(ref: str | os.PathLike | Policy, store: Any = None) -> Policy:
    """The :class:`Policy` ``ref`` names (see :func:`resolve` and the module documentation; for a
    schedule, its last stage)."""
    return resolve(ref, store).policy


def resolve_schedule(ref: Any, store: Any = None) -> Any:
    """The :class:`~autoaug.policies.schedule.Schedule` ``ref`` names: a schedule (a file, a stored
    PBA result, a Schedule object) or a fixed policy as a schedule of one stage."""
    from autoaug.policies.schedule import Schedule

    if isinstance(ref, Schedule):
        return ref
    return resolve(ref, store).as_schedule
