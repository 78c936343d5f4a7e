"""Warm-starting a search with known policies (published ones, policy files, stored ones).

In the ``aa`` family a search proposes candidates of ``K`` sub-policies
(:class:`~autoaug.search.space.SearchSpace`). A known policy of ``M`` sub-policies becomes ``ceil(M / K)`` candidates: its sub-policies in
their published order, ``K`` at a time; a last, shorter chunk is filled up with the policy's
first sub-policies (so every sub-policy is tried once and every candidate has ``K``). Each
candidate is encoded with :meth:`SearchSpace.to_params` and enqueued in the Optuna study
(``study.enqueue_trial``), so the sampler's first proposals are exactly these candidates and TPE
learns from them like from any other trial.

In the ``randaugment`` and ``trivialaugment`` families a candidate is one point of the family,
not a set of sub-policies: a known policy must itself be a point (``randaugment:n=2,m=9``,
``trivialaugment``, moved onto the space's base) and is one candidate; any other policy is refused
in one line naming it and the family.

>>> space = SearchSpace()                                    # 5 sub-policies x 2 ops
>>> points = warm_start_points(["autoaugment-cifar10"], space)
>>> len(points)                                              # 25 published sub-policies
5
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from autoaug.core.errors import AutoaugError, UserInputError
from autoaug.policies import Policy, resolve_policy
from autoaug.search.space import SearchSpace

__all__ = ["warm_start_policies", "warm_start_points", "warm_start_family", "FAMILY_REFERENCE", "WARM_START_ATTR"]

#: Optuna user attribute (its index among the warm-start points) of a trial enqueued from the warm
#: start: where the ``local`` sampler starts (:mod:`autoaug.search.tune.local_sampler`).
WARM_START_ATTR = "autoaug_warm_start"

#: Per space family, the published policy that is a point of it (what ``warm_start: auto`` checks
#: the space's capacity with: AutoAugment's 25 sub-policies are 5 candidates of the ``aa`` space).
FAMILY_REFERENCE = {
    "aa": "autoaugment-cifar10",
    "randaugment": "randaugment:n=2,m=9",
    "trivialaugment": "trivialaugment",
}


def warm_start_policies(refs: Sequence[Any], space: SearchSpace, store: Any = None) -> list[Policy]:
    """The candidate policies made from ``refs``: in the ``aa`` family each of
    ``space.num_sub_policies`` sub-policies; in the others, each reference itself (on the space's
    base), which must be a point of the family.

    ``refs``: policy references as :func:`autoaug.policies.resolve_policy` takes them (presets
    such as ``autoaugment-cifar10``, policy JSON files, store references with ``store``: a
    :class:`~autoaug.policies.store.PolicyStore` or its location, opened only if a reference needs
    it -- the one resolver's precedence, :mod:`autoaug.policies.reference`).

    Raises:
        UserInputError (a ValueError): naming the reference when it cannot be resolved, is empty, or does not fit
            the space (operations per sub-policy, candidate operations, magnitude bins, ranges,
            probabilities off the grid; not a point of a ``randaugment``/``trivialaugment`` space).
            The candidates are on the space's base, whatever the policy's own.
    """
    k = space.num_sub_policies
    out: list[Policy] = []
    for ref in refs:
        try:
            policy = resolve_policy(ref, store=store)
        except (AutoaugError, ValueError, OSError, LookupError) as exc:
            raise UserInputError(f"warm start {ref!r}: {exc}") from None
        if space.family != "aa":
            # One point of the family: the policy itself, on the search's base.
            moved = policy.with_base(space.base)
            try:
                space.to_params(moved)
            except ValueError as exc:
                raise UserInputError(f"warm start {ref!r} is not a point of the {space.family} family: {exc}") from None
            out.append(moved.with_name(f"warm-{policy.name}"))
            continue
        subs = list(policy.sub_policies)
        if not subs:
            raise UserInputError(f"warm start {ref!r}: the policy has no sub-policies to start from")
        for start in range(0, len(subs), k):
            chunk = subs[start : start + k]
            chunk += subs[: k - len(chunk)]  # fill a short last chunk from the beginning
            while len(chunk) < k:  # a policy with fewer than K sub-policies: repeat them
                chunk += subs[: k - len(chunk)]
            name = f"warm-{policy.name}-{start // k}"
            # The base is the search's (every candidate trains on it), not the published policy's.
            candidate = Policy(name, policy.num_magnitude_bins, chunk, base=space.base, ranges=policy.ranges)
            try:
                space.to_params(candidate)
            except ValueError as exc:
                raise UserInputError(f"warm start {ref!r} does not fit the search space: {exc}") from None
            out.append(candidate)
    return out


def warm_start_family(
    refs: Sequence[Any], space: SearchSpace, families: Sequence[str], store: Any = None
) -> str | None:
    """The family of ``families`` the warm start ``refs`` fits (:func:`warm_start_policies` takes
    every one of them): ``space.family`` when they fit it (AutoAugment's policies in ``aa``), else
    the first other that they do (``randaugment:n=2,m=9`` is a point of ``randaugment`` only);
    None when none does (a reference that cannot be resolved, a policy of another shape: the
    space's own family then says why)."""
    for family in (space.family, *(f for f in families if f != space.family)):
        try:
            warm_start_policies(refs, space.with_family(family), store=store)
        except UserInputError:
            continue
        return family
    return None


def warm_start_points(refs: Sequence[Any], space: SearchSpace, store: Any = None) -> list[dict[str, Any]]:
    """:func:`warm_start_policies` encoded as parameter dicts (what ``study.enqueue_trial`` takes)."""
    return [space.to_params(p) for p in warm_start_policies(refs, space, store=store)]
