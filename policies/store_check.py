"""``autoaug policies check``: verify every stored version and remove what killed saves left
behind (:meth:`autoaug.policies.store.PolicyStore.check`, which calls :func:`check_store`).

The store's maintenance, apart from its everyday operations in :mod:`autoaug.policies.store`: it
walks every name's folder for the leftovers of the write protocol (temporary version files, version
claims, temporary evaluation and index files), deletes those older than a grace period, reads and
verifies every version, and writes the index entry a version lacks.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from typing import TYPE_CHECKING

import pyarrow.fs as pafs

from autoaug.core.location import writing
from autoaug.policies.index import INDEX_DIR
from autoaug.policies.names import NAME_RE
from autoaug.policies.stored import EVALUATIONS_DIR, CheckReport, CorruptVersion

if TYPE_CHECKING:
    from autoaug.policies.store import PolicyStore

__all__ = ["check_store"]

_TMP_VERSION_RE = re.compile(r"\.v\d+\.parquet\.tmp-.*")
_TMP_INDEX_RE = re.compile(r"\.v\d+\.json\.tmp-.*")


def check_store(store: PolicyStore, *, grace_seconds: float, now: datetime | None = None) -> CheckReport:
    """:meth:`PolicyStore.check` (its docstring says what is verified, removed and kept)."""
    store.require_exists()
    now = now or datetime.now(timezone.utc)
    verified: list[str] = []
    corrupt: list[CorruptVersion] = []
    removed: list[str] = []
    kept: list[str] = []
    indexed: list[str] = []

    def sweep(info: pafs.FileInfo) -> None:
        mtime = info.mtime
        if mtime is not None and mtime.tzinfo is None:
            mtime = mtime.replace(tzinfo=timezone.utc)
        old = grace_seconds <= 0 or (mtime is not None and (now - mtime).total_seconds() >= grace_seconds)
        where = store._location(info.path)
        if not old:
            kept.append(where)
            return
        with writing(
            where, what="leftover of the policy store", hint="policies check removes the leftovers it could not"
        ):
            # not quietly: a read-only or denying store must not report leftovers as removed
            try:
                if info.type == pafs.FileType.Directory:
                    store._fs.delete_dir(info.path)
                else:
                    store._fs.delete_file(info.path)
            except FileNotFoundError:
                pass  # gone already (another check, or the saver finishing its clean-up)
        removed.append(where)

    for info in store._ls(store._root):
        if info.type != pafs.FileType.Directory or not NAME_RE.fullmatch(info.base_name):
            continue
        name = info.base_name
        for entry in store._ls(store._path(name)):
            if _TMP_VERSION_RE.fullmatch(entry.base_name):
                sweep(entry)
        for entry in store._claims.leftovers(name):
            sweep(entry)
        for folder in store._ls(store._path(name, EVALUATIONS_DIR)):
            for entry in store._ls(folder.path) if folder.type == pafs.FileType.Directory else ():
                if entry.base_name.startswith(".") and entry.base_name.endswith(".tmp"):
                    sweep(entry)
        for entry in store._ls(store._path(name, INDEX_DIR)):
            if _TMP_INDEX_RE.fullmatch(entry.base_name):
                sweep(entry)
        for version in store.versions(name):
            record = store._read_or_corrupt(name, version, evaluations=True)
            if isinstance(record, CorruptVersion):
                corrupt.append(record)
                continue
            verified.append(record.ref)
            if store._indexed(name, version) is None:  # none yet (an older store), or a stale one
                data = store._bytes_or_none(store._version_path(name, version))
                if data is not None:
                    with writing(store._location(store._path(name, INDEX_DIR)), what="policy store index"):
                        store._write_index(name, version, record.content_hash, record.created_at, data)
                    indexed.append(record.ref)
    return CheckReport(store._uri, tuple(verified), tuple(corrupt), tuple(removed), tuple(kept), tuple(indexed))
