"""What one version file of the policy store holds (:mod:`autoaug.policies.store` keeps them).

A version file is a one-row Parquet table with the explicit Arrow :data:`SCHEMA`: the store name and
version, the policy (its name, magnitude bins, base, ranges and sub-policies as nested structs), its
content hash, the creation time and the provenance as canonical JSON; the schema's metadata carries
:data:`SCHEMA_VERSION`. :func:`encode_version` builds the table, :func:`decode_version` checks and
reads it back (schema version, columns, one row, the recorded name and version, the policy, its
hash, the provenance JSON), raising :class:`CorruptArtifactError` naming the file.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from datetime import datetime, timedelta, timezone
from typing import Any

import pyarrow as pa

from autoaug.core.errors import StoreError
from autoaug.policies.policy import Policy

__all__ = [
    "SCHEMA",
    "SCHEMA_VERSION",
    "SCHEMA_VERSION_KEY",
    "CorruptArtifactError",
    "canonical_json",
    "decode_version",
    "encode_version",
    "iso_utc",
]


class CorruptArtifactError(StoreError, ValueError):
    """A stored file cannot be read, is truncated, or its content does not match its hash."""


#: Version of the on-disk layout of one version file. Bumped on incompatible changes; readers
#: refuse files written with a newer one.
SCHEMA_VERSION = 1
SCHEMA_VERSION_KEY = b"autoaug.store.schema_version"

OP_TYPE = pa.struct(
    [
        pa.field("op", pa.string(), nullable=False),
        pa.field("probability", pa.float64(), nullable=False),
        pa.field("magnitude_bin", pa.int32(), nullable=False),
    ]
)

#: Explicit Arrow schema of a version file (one row per file).
SCHEMA = pa.schema(
    [
        pa.field("name", pa.string(), nullable=False),
        pa.field("version", pa.int32(), nullable=False),
        pa.field("content_hash", pa.string(), nullable=False),
        pa.field("created_at", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("policy_name", pa.string(), nullable=False),
        pa.field("num_magnitude_bins", pa.int32(), nullable=False),
        pa.field("base", pa.string(), nullable=False),
        pa.field("ranges", pa.string(), nullable=False),
        pa.field(
            "sub_policies",
            pa.list_(pa.field("sub_policy", pa.list_(pa.field("op", OP_TYPE, nullable=False)), nullable=False)),
            nullable=False,
        ),
        pa.field("provenance_json", pa.string(), nullable=False),
        pa.field("schema_version", pa.int32(), nullable=False),
    ],
    metadata={
        SCHEMA_VERSION_KEY: str(SCHEMA_VERSION).encode(),
        b"autoaug.store.format": b"one row per policy version; see policies/store.py",
    },
)
#: Where ``created_at`` counts from (read as microseconds: see ``_read``).
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def iso_utc(dt: datetime) -> str:
    """``dt`` as the store writes times: UTC, microseconds, ``Z``."""
    return dt.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _json_value(obj: Any, where: str) -> Any:
    """``obj`` as plain JSON values (numpy scalars and arrays converted exactly), else raise."""
    if obj is None or isinstance(obj, (str, bool)):
        return obj
    if isinstance(obj, int):
        return int(obj)
    if isinstance(obj, float):
        if not math.isfinite(obj):
            raise ValueError(
                f"{where} is {obj!r}: stored JSON must be standard JSON, which has no NaN or "
                "infinity; store None (null) or a string instead"
            )
        return float(obj)
    if isinstance(obj, Mapping):
        out = {}
        for key, value in obj.items():
            if not isinstance(key, str):
                raise TypeError(
                    f"{where} has a key {key!r} of type {type(key).__name__}; JSON object keys must be strings"
                )
            out[key] = _json_value(value, f"{where}[{key!r}]")
        return out
    if isinstance(obj, (list, tuple)):
        return [_json_value(v, f"{where}[{i}]") for i, v in enumerate(obj)]
    # numpy scalars and arrays, without importing numpy
    if hasattr(obj, "dtype") and hasattr(obj, "tolist"):
        return _json_value(obj.tolist(), where)
    raise TypeError(
        f"{where} is a {type(obj).__module__}.{type(obj).__qualname__}, which is not JSON-serializable; "
        "expected dict, list, str, int, float, bool or None"
    )


def canonical_json(obj: Any, where: str) -> str:
    """``obj`` (a dict; None: {}) as canonical JSON (sorted keys, no NaN); ``where`` names it in errors."""
    if obj is None:
        obj = {}
    if not isinstance(obj, Mapping):
        raise TypeError(f"{where} must be a dict (a JSON object), got {type(obj).__name__}")
    return json.dumps(_json_value(obj, where), sort_keys=True, ensure_ascii=False, allow_nan=False)


def encode_version(policy: Policy, name: str, version: int, provenance_json: str, created_at: datetime) -> pa.Table:
    """The one-row table of version ``version`` of ``name`` holding ``policy``."""
    data = policy.to_dict()
    row = {
        "name": name,
        "version": version,
        "content_hash": policy.content_hash,
        "created_at": created_at,
        "policy_name": policy.name,
        "num_magnitude_bins": policy.num_magnitude_bins,
        "base": policy.base,
        "ranges": policy.ranges,
        "sub_policies": [
            [{"op": op["op"], "probability": op["probability"], "magnitude_bin": op["magnitude_bin"]} for op in sub]
            for sub in data["sub_policies"]
        ],
        "provenance_json": provenance_json,
        "schema_version": SCHEMA_VERSION,
    }
    return pa.Table.from_pylist([row], schema=SCHEMA)


def decode_version(table: pa.Table, where: str, name: str, version: int) -> tuple[Policy, str, str, dict]:
    """``(policy, content hash, created_at as ISO UTC, provenance)`` of a version file read as
    ``table`` from ``where``, expected to hold ``name@version``; :class:`CorruptArtifactError`
    (or :class:`StoreError` for a file of a newer schema) otherwise."""
    meta = table.schema.metadata or {}
    if SCHEMA_VERSION_KEY not in meta:
        raise CorruptArtifactError(
            f"{where} is not a policy store artifact: its schema has no {SCHEMA_VERSION_KEY.decode()!r} metadata"
        )
    try:
        file_schema_version = int(meta[SCHEMA_VERSION_KEY])
    except ValueError as exc:
        raise CorruptArtifactError(f"{where}: invalid schema version {meta[SCHEMA_VERSION_KEY]!r}") from exc
    if file_schema_version > SCHEMA_VERSION:
        raise StoreError(
            f"{where} was written with store schema version {file_schema_version}; this version "
            f"of autoaug reads up to {SCHEMA_VERSION}: upgrade autoaug to read it"
        )
    missing = [f.name for f in SCHEMA if f.name not in table.column_names]
    if missing:
        raise CorruptArtifactError(f"{where} is missing the column(s) {', '.join(missing)}")
    if table.num_rows != 1:
        raise CorruptArtifactError(f"{where} holds {table.num_rows} rows, expected exactly 1")
    # created_at as microseconds since the epoch: converting an Arrow timestamp to a Python
    # datetime makes pyarrow import pandas (over a second), for one value.
    table = table.select([f.name for f in SCHEMA])
    at = table.schema.get_field_index("created_at")
    table = table.set_column(at, "created_at", table.column(at).cast(pa.int64()))
    row = table.to_pylist()[0]
    row["created_at"] = _EPOCH + timedelta(microseconds=row["created_at"])
    if row["name"] != name or row["version"] != version:
        raise CorruptArtifactError(f"{where} records {row['name']}@{row['version']} but is stored as {name}@{version}")
    data: dict[str, Any] = {
        "name": row["policy_name"],
        "num_magnitude_bins": row["num_magnitude_bins"],
        "sub_policies": row["sub_policies"],
        "base": row["base"],
        "ranges": row["ranges"],
    }
    try:
        policy = Policy.from_dict(data)
    except (ValueError, TypeError, KeyError) as exc:
        raise CorruptArtifactError(f"{where} holds an invalid policy: {exc}") from exc
    stored_hash = row["content_hash"]
    if policy.content_hash != stored_hash:
        raise CorruptArtifactError(
            f"content hash mismatch in {where}: recorded {stored_hash[:16]}..., the stored policy "
            f"hashes to {policy.content_hash[:16]}...; the file was modified after it was saved"
        )
    try:
        provenance = json.loads(row["provenance_json"])
    except json.JSONDecodeError as exc:
        raise CorruptArtifactError(f"{where}: provenance_json is not valid JSON ({exc})") from exc
    return policy, stored_hash, iso_utc(row["created_at"]), provenance
