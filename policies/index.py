"""The policy store's index: one small JSON file per version, and a store listed from it without pyarrow.

Each version file ``<name>/vNNNNNN.parquet`` of a :class:`~autoaug.policies.store.PolicyStore` has
an index entry ``<name>/_index/vNNNNNN.json``, written by the save once the version file's bytes
are complete and before the version is published::

    {"name": "cifar10-r8", "version": 3, "content_hash": "...", "created_at": "2026-...Z",
     "size": 5402, "sha256": "...", "schema_version": 1}

The entry records the SHA-256 of the version file's bytes. A version file that still has them is,
byte for byte, the file its save wrote from a validated policy; and the content hash and creation
time the entry gives must be among those bytes (a one-row Parquet file keeps each column's value
in its statistics: the hash as text, the time as a little-endian int64 of microseconds). So what
:meth:`PolicyStore.list` needs of a version is read from its entry, and the file is checked
without decoding its Parquet: a changed file, or an entry claiming what its file does not hold,
is not believed. A version whose entry is missing (a store written before the
index existed, or a save killed between the two writes; ``policies check`` writes them), unreadable,
or no longer matching its file is read from its Parquet file and verified, as every version was
before; a corrupt file is reported as such.

:func:`list_local` lists a local store from its index with the standard library alone, so
``autoaug policies list`` starts without importing pyarrow (a quarter of a second); it returns
None when some version needs its Parquet file, and the caller lists through the store. Folders and
files starting with ``_`` are skipped by ``pyarrow.dataset``'s discovery, so the index is invisible
to ``PolicyStore.to_table``.

The store's default location lives here too (no pyarrow needed to know it).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from autoaug.policies.names import NAME_RE

__all__ = [
    "ENV_VAR",
    "DEFAULT_LOCAL_STORE",
    "INDEX_DIR",
    "VERSION_FILE_RE",
    "IndexEntry",
    "PolicySummary",
    "default_store_uri",
    "index_path",
    "make_entry",
    "verified_entry",
    "summarize",
    "list_local",
]

#: The environment variable naming the default policy store.
ENV_VAR = "AUTOAUG_STORE"
DEFAULT_LOCAL_STORE = os.path.join("~", ".autoaug", "policies")
#: Per name: the index entries of its versions.
INDEX_DIR = "_index"
#: A version file's name.
VERSION_FILE_RE = re.compile(r"v(\d+)\.parquet")


def default_store_uri() -> str:
    """``$AUTOAUG_STORE`` if set and non-empty, else ``~/.autoaug/policies``."""
    return os.environ.get(ENV_VAR) or DEFAULT_LOCAL_STORE


def index_path(name: str, version: int) -> str:
    """The index entry of ``name@version``, relative to the store's root."""
    return f"{name}/{INDEX_DIR}/v{version:06d}.json"


@dataclass(frozen=True)
class IndexEntry:
    """What the index says of a version whose file still matches it."""

    name: str
    version: int
    content_hash: str
    created_at: str  # as the version file records it (ISO 8601 UTC, microseconds)


@dataclass(frozen=True)
class PolicySummary:
    """One row of :meth:`PolicyStore.list`. When the first or latest version is corrupt, its
    times/hash are ``""`` and ``corrupt`` lists it (with the error in ``problems``)."""

    name: str
    latest_version: int
    num_versions: int
    created_at: str  # creation time of the first stored version
    updated_at: str  # creation time of the latest version
    content_hash: str  # of the latest version
    corrupt: tuple[int, ...] = ()
    problems: tuple[str, ...] = ()


def make_entry(name: str, version: int, content_hash: str, created_at: str, data: bytes, schema_version: int) -> bytes:
    """The index entry (JSON bytes) of version file bytes ``data``."""
    entry = {
        "name": name,
        "version": version,
        "content_hash": content_hash,
        "created_at": created_at,
        "size": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "schema_version": schema_version,
    }
    return json.dumps(entry, sort_keys=True).encode("utf-8")


def verified_entry(raw: bytes | None, data: bytes | None, name: str, version: int) -> IndexEntry | None:
    """The entry ``raw`` (JSON bytes) of ``name@version`` if it is well formed and the version
    file's bytes ``data`` are the ones it records; None otherwise (read the version file)."""
    if raw is None or data is None:
        return None
    try:
        entry = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    if not isinstance(entry, Mapping) or entry.get("name") != name or entry.get("version") != version:
        return None
    content_hash, created_at = entry.get("content_hash"), entry.get("created_at")
    if not isinstance(content_hash, str) or not isinstance(created_at, str):
        return None
    if entry.get("size") != len(data) or entry.get("sha256") != hashlib.sha256(data).hexdigest():
        return None
    micros = _micros(created_at)
    if micros is None or content_hash.encode("utf-8") not in data or struct.pack("<q", micros) not in data:
        return None  # the entry claims what the file does not hold
    return IndexEntry(name, version, content_hash, created_at)


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def _micros(created_at: str) -> int | None:
    """Microseconds since the epoch of a creation time as the store writes it (``...T07:35:25.123456Z``)."""
    try:
        at = datetime.strptime(created_at, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc)
    except ValueError:
        return None
    return (at - _EPOCH) // timedelta(microseconds=1)


def summarize(name: str, versions: Sequence[int], read: Mapping[int, Any]) -> PolicySummary:
    """The summary of ``name`` from its first and latest versions as read: an
    :class:`IndexEntry` or a ``StoredPolicy`` (both have ``content_hash`` and ``created_at``), or
    a ``CorruptVersion`` (``error``)."""
    first, last = read[versions[0]], read[versions[-1]]
    bad = sorted(v for v, r in read.items() if not hasattr(r, "content_hash"))
    return PolicySummary(
        name=name,
        latest_version=versions[-1],
        num_versions=len(versions),
        created_at=getattr(first, "created_at", ""),
        updated_at=getattr(last, "created_at", ""),
        content_hash=getattr(last, "content_hash", ""),
        corrupt=tuple(bad),
        problems=tuple(read[v].error for v in bad),
    )


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


def list_local(root: str) -> list[PolicySummary] | None:
    """What :meth:`PolicyStore.list` returns for the local store folder ``root``, from the index
    alone (standard library only); None when ``root`` is not a folder or when the first or latest
    version of some name has no entry matching its file (list it through the store then)."""
    try:
        names = sorted(e.name for e in os.scandir(root) if e.is_dir() and NAME_RE.fullmatch(e.name))
    except OSError:
        return None
    out = []
    for name in names:
        folder = os.path.join(root, name)
        try:
            versions = sorted(
                int(m.group(1))
                for e in os.scandir(folder)
                if (m := VERSION_FILE_RE.fullmatch(e.name)) is not None and e.is_file()
            )
        except OSError:
            return None
        if not versions:
            continue
        read: dict[int, IndexEntry] = {}
        for v in {versions[0], versions[-1]}:
            entry = verified_entry(
                _read(os.path.join(root, index_path(name, v))),
                _read(os.path.join(folder, f"v{v:06d}.parquet")),
                name,
                v,
            )
            if entry is None:
                return None
            read[v] = entry
        out.append(summarize(name, versions, read))
    return out
