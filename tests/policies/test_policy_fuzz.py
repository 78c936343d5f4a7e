"""Fuzz the policy loaders with random and mutated JSON (hypothesis).

Whatever the input, :meth:`Policy.from_json`, :meth:`Policy.from_dict`, :meth:`Policy.from_file`
and the policy-file rule of :func:`autoaug.policies.resolve_policy` either return a valid policy or
raise their documented error -- :class:`PolicyError` (``UserInputError`` for ``resolve_policy``)
-- with a one-line message of bounded length; never another exception (``RecursionError``,
``TypeError``, ``KeyError``, ``OverflowError``, ``UnicodeDecodeError``...).
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autoaug.core.errors import UserInputError
from autoaug.policies import Policy, presets, resolve_policy
from autoaug.policies.policy import MAX_MESSAGE_CHARS, PolicyError

SETTINGS = settings(
    max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)

VALID = [
    presets.resolve("autoaugment-cifar10").to_json(),
    Policy(
        "w", 31, [[("Rotate", 1.0, 30)], [("Invert", 0.0, 0), ("Cutout", 0.5, 3)]], base="none", ranges="wide"
    ).to_json(indent=None),
]

_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(10**40), max_value=10**40),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
    st.sampled_from(
        [
            "Rotate",
            "Invert",
            "standard",
            "none",
            "wide",
            "autoaugment",
            "name",
            "op",
            "probability",
            "magnitude_bin",
            "sub_policies",
            "num_magnitude_bins",
        ]
    ),
)
_json = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=5),
        st.dictionaries(
            st.one_of(
                st.text(max_size=12),
                st.sampled_from(
                    [
                        "name",
                        "num_magnitude_bins",
                        "sub_policies",
                        "base",
                        "ranges",
                        "op",
                        "probability",
                        "magnitude_bin",
                    ]
                ),
            ),
            inner,
            max_size=5,
        ),
    ),
    max_leaves=30,
)


def _check(exc: BaseException) -> None:
    text = str(exc)
    assert "\n" not in text and 0 < len(text) <= MAX_MESSAGE_CHARS, text[:300]


def _load(doc) -> None:
    try:
        policy = Policy.from_json(doc)
    except PolicyError as exc:
        _check(exc)
    else:  # whatever was accepted is a valid policy that round-trips
        assert Policy.from_json(policy.to_json()) == policy


@st.composite
def _policy_like(draw):
    """A dict shaped like a policy, with any field replaced by a random JSON value."""
    d = json.loads(draw(st.sampled_from(VALID)))
    for _ in range(draw(st.integers(1, 4))):
        where = draw(st.sampled_from(["top", "sub", "op", "field"]))
        value = draw(_json)
        if where == "top":
            d[draw(st.sampled_from(["name", "num_magnitude_bins", "sub_policies", "base", "ranges", "extra"]))] = value
        elif where == "sub" and d.get("sub_policies"):
            subs = d["sub_policies"] if isinstance(d["sub_policies"], list) else [d["sub_policies"]]
            if subs:
                subs[draw(st.integers(0, len(subs) - 1))] = value
        elif where in ("op", "field"):
            subs = d.get("sub_policies")
            if isinstance(subs, list) and subs and isinstance(subs[0], list) and subs[0]:
                if where == "op":
                    subs[0][0] = value
                elif isinstance(subs[0][0], dict):
                    subs[0][0][draw(st.sampled_from(["op", "probability", "magnitude_bin", "x"]))] = value
    return d


@SETTINGS
@given(_json)
def test_random_json_values(value):
    _load(json.dumps(value))
    try:
        Policy.from_dict(value)
    except PolicyError as exc:
        _check(exc)


@SETTINGS
@given(_policy_like())
def test_policy_shaped_json_with_random_fields(d):
    _load(json.dumps(d))


@st.composite
def _mutated(draw) -> bytes:
    data = bytearray(draw(st.sampled_from(VALID)).encode())
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["flip", "insert", "delete", "truncate", "nest"]))
        i = draw(st.integers(0, len(data)))
        if kind == "flip" and i < len(data):
            data[i] = draw(st.integers(0, 255))
        elif kind == "insert":
            data[i:i] = draw(st.binary(min_size=1, max_size=8))
        elif kind == "delete":
            del data[i : i + draw(st.integers(1, 16))]
        elif kind == "truncate":
            del data[i:]
        else:  # wrap a span in deep nesting
            depth = draw(st.sampled_from([1, 5, 40, 5000]))
            data[i:i] = b"[" * depth
            data += b"]" * depth
    return bytes(data)


@SETTINGS
@given(_mutated())
def test_mutated_policy_json_bytes_and_text(data):
    _load(data)
    _load(data.decode("utf-8", "replace"))


@SETTINGS
@given(data=st.one_of(_mutated(), st.binary(max_size=200)))
def test_mutated_policy_files(tmp_path, data):
    path = tmp_path / "policy.json"
    path.write_bytes(data)
    try:
        Policy.from_file(path)
    except PolicyError as exc:
        _check(exc)
        assert str(exc).startswith("policy file ") and "policy.json" in str(exc)
    try:
        resolve_policy(str(path))
    except UserInputError as exc:
        assert "\n" not in str(exc) and len(str(exc)) <= 2 * MAX_MESSAGE_CHARS


@pytest.mark.parametrize(
    "doc",
    [
        b"\xff\xfe{}",
        b"",
        b"\x00" * 10,
        "\ud800".encode("utf-8", "surrogatepass"),
        b"[" * 200_000,
        b'{"name": "' + b"x" * 100_000 + b'"}',
        b"1" * 5000,
    ],
)
def test_hostile_documents(doc):
    _load(doc)
