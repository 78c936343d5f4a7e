"""Versioned, immutable policy artifacts on any filesystem pyarrow reaches.

A :class:`PolicyStore` keeps every saved :class:`~policies.policy.Policy` as one Parquet file per
version (its content: :mod:`autoaug.policies.artifact`)::

    <root>/<name>/v000001.parquet
    <root>/<name>/v000002.parquet
    <root>/<name>/_index/v000002.json                               (its index entry: hash, time, digest)
    <root>/<name>/_evaluations/v000002/<attached-at>-<token>.json   (results attached later)
    <root>/<name>/_issued/v000002                                   (numbers ever issued, never reused)
    <root>/<name>/.claims/...                                       (version claims, transient)

Files and folders whose name starts with ``.`` or ``_`` are skipped by ``pyarrow.dataset``'s
discovery, so ``pyarrow.dataset.dataset(root, format="parquet")`` reads the whole store as one
table (one row per version) and never sees temporary files, claims or evaluations.

All I/O goes through :mod:`pyarrow.fs`: a local folder (the default, ``$AUTOAUG_STORE`` or
``~/.autoaug/policies``), ``file://``, ``s3://``, ``gs://``, ``hdfs://`` URIs, or any
``pyarrow.fs.FileSystem`` instance (for example a ``SubTreeFileSystem``) or ``(filesystem, path)``
pair. Loading reads Parquet columns and JSON only: nothing is unpickled or evaluated.

Guarantees
----------
* **Immutable versions.** A version file is written once under a temporary name in the same
  folder and then moved to its final name; readers see either no file or the complete file. Its
  policy content hash is stored next to it and re-checked on every load, so a tampered or truncated
  artifact is rejected with :class:`CorruptArtifactError` naming the file.
* **Race-free version numbers.** Before writing, a saver *claims* its version number
  (:mod:`autoaug.policies.claims`: an atomic rename on local filesystems, announce-then-list on
  object stores), so concurrent savers under one name get distinct versions; numbers increase
  monotonically, are never reused (even after a version file is deleted) and may have gaps.
* **Healing.** A corrupt version is reported as such by :meth:`PolicyStore.list` and
  :meth:`PolicyStore.history` (``include_corrupt=True``) without hiding the others, and does not
  block new saves under its name. :meth:`PolicyStore.check` verifies every version and removes
  what killed saves leave behind (temporary files, claims) once older than a grace period.
* **De-duplication.** Saving a policy whose content hash equals the latest version's returns that
  version instead of writing a new one (unless ``force=True``); a policy saved as the last stage of
  a schedule (the schedule in its provenance, ``schedule``) only when the schedules match too. Two processes saving the same new
  content at the same moment may both write it (the check is not part of the claim).
"""

from __future__ import annotations

import json
import os
import re
import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any, Union

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from autoaug.core import failpoints
from autoaug.core.errors import StoreError, UserInputError
from autoaug.core.location import Location, delete_quietly, list_dir, storage_error, writing
from autoaug.policies.artifact import (
    SCHEMA,
    SCHEMA_VERSION,
    CorruptArtifactError,
    canonical_json,
    decode_version,
    encode_version,
    iso_utc,
)
from autoaug.policies.claims import VersionClaims, is_local
from autoaug.policies.diff import PolicyDiff, diff_policies
from autoaug.policies.index import (
    ENV_VAR,
    INDEX_DIR,
    VERSION_FILE_RE,
    PolicySummary,
    default_store_uri,
    index_path,
    make_entry,
    summarize,
    verified_entry,
)
from autoaug.policies.names import NAME_RE, NAME_RULE
from autoaug.policies.policy import Policy
from autoaug.policies.schedule import provenance_schedule
from autoaug.policies.stored import EVALUATIONS_DIR, CheckReport, CorruptVersion, Evaluation, StoredPolicy

__all__ = [
    "SCHEMA",
    "SCHEMA_VERSION",
    "AmbiguousReferenceError",
    "CheckReport",
    "CorruptArtifactError",
    "CorruptVersion",
    "Evaluation",
    "InvalidNameError",
    "PolicyNotFoundError",
    "PolicyStore",
    "PolicySummary",
    "StoreError",
    "StoreNotFoundError",
    "StoredPolicy",
    "default_store_uri",
    "validate_name",
]

_HEX_RE = re.compile(r"[0-9a-f]{6,64}")
_MIN_HASH_PREFIX = 6
#: Default age (seconds) below which :meth:`PolicyStore.check` leaves temporary files and claims
#: alone: a save in progress holds them for milliseconds, a killed one forever.
DEFAULT_GRACE_SECONDS = 3600.0
_MAX_LISTED = 20


# ----------------------------------------------------------------------------------------------
# Errors


class PolicyNotFoundError(StoreError, LookupError):
    """A reference names no stored policy (the message lists what exists)."""


class StoreNotFoundError(PolicyNotFoundError):
    """The store itself does not exist (a read of a location nothing was ever saved to)."""


class AmbiguousReferenceError(StoreError, LookupError):
    """A content-hash prefix matches more than one stored policy (the message lists them)."""


class InvalidNameError(StoreError, ValueError):
    """A policy name that cannot be used in the store."""


# ----------------------------------------------------------------------------------------------
# Records


# ----------------------------------------------------------------------------------------------
# Helpers


def validate_name(name: Any) -> str:
    """Return ``name`` if it can name a stored policy, else raise :class:`InvalidNameError`."""
    if not isinstance(name, str):
        raise InvalidNameError(f"policy name must be a string, got {type(name).__name__} {name!r}")
    if not NAME_RE.fullmatch(name):
        shown = repr(name) if len(name) <= 140 else f"{name[:100]!r}... ({len(name):,} characters)"
        raise InvalidNameError(f"invalid policy name {shown}: expected {NAME_RULE}")
    return name


def _utcnow() -> datetime:
    return datetime.now(timezone.utc)


def _listing(names: Iterable[str]) -> str:
    names = list(names)
    if not names:
        return "(none)"
    shown = ", ".join(names[:_MAX_LISTED])
    if len(names) > _MAX_LISTED:
        shown += f", ... ({len(names) - _MAX_LISTED} more)"
    return shown


StoreLocation = Union[str, "os.PathLike[str]", pafs.FileSystem, "tuple[pafs.FileSystem, str]", None]


# ----------------------------------------------------------------------------------------------
# The store


class PolicyStore:
    """Versioned policy artifacts under one root folder of a pyarrow filesystem.

    Args:
        uri: where the store lives. ``None`` uses ``$AUTOAUG_STORE`` or ``~/.autoaug/policies``.
            A local path, or a URI pyarrow understands (``file:///...``, ``s3://bucket/prefix``,
            ``gs://...``, ``hdfs://...``); a ``pyarrow.fs.FileSystem`` (its root is the store,
            e.g. a ``SubTreeFileSystem``); or a ``(filesystem, path)`` pair.
        claim: how version numbers are claimed: ``"auto"`` (``"rename"`` on local filesystems,
            ``"announce"`` elsewhere), ``"rename"`` (atomic folder rename, local POSIX only) or
            ``"announce"`` (announce-then-list, for consistent object stores). See the module
            documentation for the guarantees.

    Example::

        store = PolicyStore("s3://my-bucket/autoaug/policies")
        version = store.save(policy, "cifar10-wrn", metadata={"search": {...}})
        policy = store.load("cifar10-wrn@latest")
    """

    def __init__(self, uri: StoreLocation = None, *, claim: str = "auto") -> None:
        self._scheme: str | None = None
        if uri is None:
            uri = default_store_uri()
        if isinstance(uri, tuple):
            if len(uri) != 2 or not isinstance(uri[0], pafs.FileSystem) or not isinstance(uri[1], str):
                raise TypeError("PolicyStore: a tuple location must be (pyarrow.fs.FileSystem, path: str)")
            fs, root = uri
            root = root.rstrip("/") or ("/" if root.startswith("/") else "")
            self._uri = f"{fs.type_name}:{root}"
        elif isinstance(uri, pafs.FileSystem):
            fs, root = uri, ""
            self._uri = f"{fs.type_name}:/"
        elif isinstance(uri, (str, os.PathLike)):
            text = os.fspath(uri)
            if not isinstance(text, str) or not text.strip():
                raise ValueError(f"PolicyStore: empty store location {uri!r}")
            # One parsing rule for paths and URIs (core.location): file:// is a local path.
            try:
                location = Location.parse(text, what="policy store")
                fs = location.fs
            except (UserInputError, pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError, ValueError) as exc:
                raise ValueError(f"PolicyStore: cannot open store {text!r}: {exc}") from exc
            root = location.path
            self._uri = location.uri
            if not location.local:
                self._scheme = text.split("://", 1)[0].lower()
                root = root.rstrip("/") or ("/" if root.startswith("/") else "")
        else:
            raise TypeError(
                "PolicyStore: uri must be a path or URI string, a pyarrow.fs.FileSystem or a "
                f"(filesystem, path) pair, got {type(uri).__name__}"
            )
        if claim == "auto":
            claim = "rename" if is_local(fs) else "announce"
        if claim not in ("rename", "announce"):
            raise ValueError(f"PolicyStore: claim must be 'auto', 'rename' or 'announce', got {claim!r}")
        if claim == "rename" and not is_local(fs):
            raise ValueError(
                f"PolicyStore: claim='rename' relies on POSIX rename semantics and needs a local "
                f"filesystem, got {fs.type_name}"
            )
        self._fs = fs
        self._root = root
        self._claims = VersionClaims(fs, self._path, claim, self._uri)
        self._hash_cache: dict[str, str] = {}

    # -- basic properties -----------------------------------------------------------------------

    @property
    def uri(self) -> str:
        """The store location as given (local paths made absolute)."""
        return self._uri

    @property
    def filesystem(self) -> pafs.FileSystem:
        return self._fs

    @property
    def root(self) -> str:
        """The store's root folder on :attr:`filesystem`."""
        return self._root

    def __repr__(self) -> str:
        return f"PolicyStore({self._uri!r})"

    def _path(self, *parts: str) -> str:
        rel = "/".join(parts)
        if not self._root:
            return rel
        if self._root.endswith("/"):
            return self._root + rel
        return f"{self._root}/{rel}"

    def _location(self, path: str) -> str:
        """A path as the user can find it (for messages)."""
        if self._scheme and self._root and path.startswith(self._root):
            rel = path[len(self._root) :].lstrip("/")
            return f"{self._uri.partition('?')[0].rstrip('/')}/{rel}"
        if isinstance(self._fs, pafs.SubTreeFileSystem):
            return self._fs.base_path.rstrip("/") + "/" + path.lstrip("/")
        return path

    def _version_path(self, name: str, version: int) -> str:
        return self._path(name, f"v{version:06d}.parquet")

    def _ls(self, path: str) -> list[pafs.FileInfo]:
        """Entries of a folder ([] if it does not exist)."""
        return list_dir(self._fs, path)

    # -- listing --------------------------------------------------------------------------------

    def exists(self) -> bool:
        """True when the store's root folder exists (something was saved to it, or it was created)."""
        if not self._root:
            return True
        return self._fs.get_file_info(self._root).type == pafs.FileType.Directory

    def require_exists(self) -> None:
        """Raise :class:`StoreNotFoundError` when the store does not exist (read commands)."""
        if not self.exists():
            info = self._fs.get_file_info(self._root)
            if info.type == pafs.FileType.File:
                raise StoreError(f"policy store {self._uri} is a file, not a store folder")
            raise StoreNotFoundError(
                f"policy store {self._uri} does not exist (nothing was saved there; check --store or ${ENV_VAR})"
            )

    def names(self) -> list[str]:
        """Names with at least one complete version, sorted."""
        out = []
        for info in self._ls(self._root):
            if info.type == pafs.FileType.Directory and NAME_RE.fullmatch(info.base_name):
                if self.versions(info.base_name):
                    out.append(info.base_name)
        return sorted(out)

    def versions(self, name: str) -> list[int]:
        """Complete versions stored under ``name`` (ascending; empty if the name is unknown)."""
        validate_name(name)
        found = []
        for info in self._ls(self._path(name)):
            match = VERSION_FILE_RE.fullmatch(info.base_name)
            if match and info.type == pafs.FileType.File:
                found.append(int(match.group(1)))
        return sorted(found)

    def list(self) -> list[PolicySummary]:
        """One summary per stored name: latest version, number of versions, creation times. A
        corrupt first or latest version is reported in the summary (``corrupt``, ``problems``),
        not raised: the other names are still listed. A version whose index entry matches its file
        is read from the entry (:mod:`autoaug.policies.index`), any other from its file, verified."""
        out = []
        for name in self.names():
            versions = self.versions(name)
            read: dict[int, Any] = {}
            for v in {versions[0], versions[-1]}:
                read[v] = self._indexed(name, v) or self._read_or_corrupt(name, v, evaluations=False)
            out.append(summarize(name, versions, read))
        return out

    def _bytes_or_none(self, path: str) -> bytes | None:
        try:
            with self._fs.open_input_stream(path) as f:
                return f.read()
        except (OSError, pa.ArrowException):
            return None

    def _indexed(self, name: str, version: int) -> Any:
        """The index entry of a version whose file still matches it, else None."""
        return verified_entry(
            self._bytes_or_none(self._path(index_path(name, version))),
            self._bytes_or_none(self._version_path(name, version)),
            name,
            version,
        )

    def _write_index(self, name: str, version: int, content_hash: str, created_at: str, data: bytes) -> str:
        """Write the index entry of version bytes ``data`` (atomically); returns its path."""
        final = self._path(index_path(name, version))
        tmp = self._path(name, INDEX_DIR, f".v{version:06d}.json.tmp-{uuid.uuid4().hex}")
        self._fs.create_dir(self._path(name, INDEX_DIR), recursive=True)
        try:
            with self._fs.open_output_stream(tmp) as sink:
                sink.write(make_entry(name, version, content_hash, created_at, data, SCHEMA_VERSION))
            self._publish(tmp, final)
        except BaseException:
            self._delete_quietly(tmp)
            raise
        return final

    def history(self, name: str, *, include_corrupt: bool = False) -> list[Any]:
        """Every version of ``name``, oldest first, with provenance and evaluations
        (:class:`StoredPolicy`). A corrupt version raises :class:`CorruptArtifactError`, or, with
        ``include_corrupt=True``, is listed as a :class:`CorruptVersion` among the others."""
        validate_name(name)
        versions = self.versions(name)
        if not versions:
            self.require_exists()
            raise PolicyNotFoundError(
                f"no policy named {name!r} in store {self._uri}; stored names: {_listing(self.names())}"
            )
        if not include_corrupt:
            return [self._read(name, v, evaluations=True) for v in versions]
        return [self._read_or_corrupt(name, v, evaluations=True) for v in versions]

    def _read_or_corrupt(self, name: str, version: int, *, evaluations: bool) -> StoredPolicy | CorruptVersion:
        try:
            return self._read(name, version, evaluations=evaluations)
        except CorruptArtifactError as exc:
            return CorruptVersion(name, version, str(exc), self._location(self._version_path(name, version)))

    def to_table(self, columns: Sequence[str] | None = None) -> pa.Table:
        """The whole store as one Arrow table (one row per version), read with ``pyarrow.dataset``."""
        import pyarrow.dataset as ds

        if not self.names():
            return SCHEMA.empty_table() if columns is None else SCHEMA.empty_table().select(list(columns))
        dataset = ds.dataset(self._root, filesystem=self._fs, format="parquet", schema=SCHEMA)
        return dataset.to_table(columns=list(columns) if columns is not None else None)

    # -- references -----------------------------------------------------------------------------

    def resolve(self, ref: str) -> tuple[str, int]:
        """``(name, version)`` for a reference: ``name``, ``name@latest``, ``name@3`` or a hash prefix.

        A bare reference that is a stored name means its latest version; otherwise a string of
        at least 6 hex digits is looked up as a content-hash prefix (if several versions hold the
        same content, the newest one is used). Raises :class:`PolicyNotFoundError` listing what
        exists, or :class:`AmbiguousReferenceError` listing the matches.
        """
        if not isinstance(ref, str) or not ref.strip():
            raise PolicyNotFoundError(
                f"empty policy reference {ref!r}: expected NAME, NAME@latest, NAME@VERSION or a content-hash prefix"
            )
        ref = ref.strip()
        if "@" in ref:
            name, _, tag = ref.partition("@")
            validate_name(name)
            versions = self.versions(name)
            if not versions:
                self.require_exists()
                raise PolicyNotFoundError(
                    f"no policy named {name!r} in store {self._uri}; stored names: {_listing(self.names())}"
                )
            if tag == "latest":
                return name, versions[-1]
            if not tag.isdigit() or int(tag) < 1:
                raise PolicyNotFoundError(
                    f"invalid version {tag!r} in reference {ref!r}: expected 'latest' or a positive integer"
                )
            version = int(tag)
            if version not in versions:
                raise PolicyNotFoundError(
                    f"policy {name!r} has no version {version} in store {self._uri}; stored versions: "
                    f"{_listing(str(v) for v in versions)}"
                )
            return name, version
        if NAME_RE.fullmatch(ref):
            versions = self.versions(ref)
            if versions:
                return ref, versions[-1]
        self.require_exists()
        if _HEX_RE.fullmatch(ref.lower()):
            return self._resolve_hash(ref.lower())
        if len(ref) < _MIN_HASH_PREFIX and all(c in "0123456789abcdefABCDEF" for c in ref):
            hint = f" (content-hash prefixes need at least {_MIN_HASH_PREFIX} hex digits)"
        else:
            hint = ""
        raise PolicyNotFoundError(
            f"no stored policy matches {ref!r} in store {self._uri}{hint}; stored names: {_listing(self.names())}"
        )

    def _resolve_hash(self, prefix: str) -> tuple[str, int]:
        matches: list[tuple[str, int, str]] = []
        for name in self.names():
            for version in self.versions(name):
                content_hash = self._recorded_hash(name, version)
                if content_hash.startswith(prefix):
                    matches.append((name, version, content_hash))
        if not matches:
            raise PolicyNotFoundError(
                f"no stored policy is named {prefix!r} or has a content hash starting with {prefix!r} "
                f"in store {self._uri}; stored names: {_listing(self.names())}"
            )
        hashes = sorted({h for _, _, h in matches})
        if len(hashes) > 1:
            listed = [f"{n}@{v} ({h[:12]})" for n, v, h in matches]
            raise AmbiguousReferenceError(
                f"content-hash prefix {prefix!r} is ambiguous, it matches {len(hashes)} different "
                f"policies: {_listing(listed)}; give more hex digits or NAME@VERSION"
            )
        if len(matches) == 1:
            return matches[0][0], matches[0][1]
        # The same content stored several times: take the newest record.
        records = [self._read(n, v, evaluations=False) for n, v, _ in matches]
        newest = max(records, key=lambda r: (r.created_at, r.name, r.version))
        return newest.name, newest.version

    # -- reading --------------------------------------------------------------------------------

    def load(self, ref: str) -> Policy:
        """The policy a reference points to (its content hash verified)."""
        name, version = self.resolve(ref)
        return self._read(name, version, evaluations=False).policy

    def get(self, ref: str) -> StoredPolicy:
        """The full record of a version: policy, hash, creation time, provenance, evaluations."""
        name, version = self.resolve(ref)
        return self._read(name, version, evaluations=True)

    def diff(self, ref_a: str, ref_b: str) -> PolicyDiff:
        """Sub-policies added, removed and changed from ``ref_a`` to ``ref_b`` (see :class:`PolicyDiff`)."""
        a, b = self.resolve(ref_a), self.resolve(ref_b)
        return diff_policies(
            self._read(*a, evaluations=False).policy,
            self._read(*b, evaluations=False).policy,
            label_a=f"{a[0]}@{a[1]}",
            label_b=f"{b[0]}@{b[1]}",
        )

    def export_json(self, ref: str) -> str:
        """The canonical JSON of a stored policy (``Policy.to_json()``)."""
        return self.load(ref).to_json()

    def _read_table(self, path: str, columns: Sequence[str] | None = None) -> pa.Table:
        where = self._location(path)
        with self._fs.open_input_file(path) as f:  # FileNotFoundError / permission errors propagate
            try:
                return pq.ParquetFile(f, page_checksum_verification=True).read(columns=columns)
            except (pa.ArrowException, OSError) as exc:
                raise CorruptArtifactError(
                    f"cannot read policy artifact {where}: truncated, corrupt or not a Parquet file ({exc})"
                ) from exc

    def _content_hash(self, name: str, version: int) -> str:
        """The verified content hash of a version (cached: versions are immutable)."""
        path = self._version_path(name, version)
        cached = self._hash_cache.get(path)
        if cached is None:
            cached = self._read(name, version, evaluations=False).content_hash
        return cached

    def _recorded_hash(self, name: str, version: int) -> str:
        """The content hash recorded in a version file, reading only that column (for look-ups;
        the version finally chosen is verified when it is read)."""
        path = self._version_path(name, version)
        cached = self._hash_cache.get(path)
        if cached is None:
            table = self._read_table(path, columns=["content_hash"])
            if table.num_rows != 1:
                raise CorruptArtifactError(f"{self._location(path)} holds {table.num_rows} rows, expected exactly 1")
            cached = table.column("content_hash")[0].as_py()
        return cached

    def _read(self, name: str, version: int, *, evaluations: bool) -> StoredPolicy:
        path = self._version_path(name, version)
        where = self._location(path)
        try:
            table = self._read_table(path)
        except FileNotFoundError as exc:
            raise PolicyNotFoundError(f"policy {name}@{version} not found at {where}") from exc
        policy, stored_hash, created_at, provenance = decode_version(table, where, name, version)
        try:  # a schedule kept in the provenance must end with the (hash-verified) policy
            provenance_schedule(provenance, policy)
        except ValueError as exc:
            raise CorruptArtifactError(f"{where}: {exc}") from None
        self._hash_cache[path] = stored_hash
        return StoredPolicy(
            name=name,
            version=version,
            policy=policy,
            content_hash=stored_hash,
            created_at=created_at,
            provenance=provenance,
            evaluations=self._read_evaluations(name, version, stored_hash) if evaluations else (),
            location=where,
        )

    def _read_evaluations(self, name: str, version: int, content_hash: str) -> tuple[Evaluation, ...]:
        folder = self._path(name, EVALUATIONS_DIR, f"v{version:06d}")
        infos = sorted(
            (
                i
                for i in self._ls(folder)
                if i.type == pafs.FileType.File and i.base_name.endswith(".json") and not i.base_name.startswith(".")
            ),
            key=lambda i: i.base_name,
        )
        out = []
        for info in infos:
            where = self._location(info.path)
            with self._fs.open_input_stream(info.path) as f:
                raw = f.read()
            try:
                record = json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError) as exc:
                raise CorruptArtifactError(f"evaluation file {where} is not valid JSON ({exc})") from exc
            if not isinstance(record, dict) or not {"attached_at", "content_hash", "results"} <= record.keys():
                raise CorruptArtifactError(f"evaluation file {where} lacks attached_at/content_hash/results")
            if record["content_hash"] != content_hash:
                raise CorruptArtifactError(
                    f"evaluation file {where} belongs to content hash {str(record['content_hash'])[:16]}..., "
                    f"not to {name}@{version} ({content_hash[:16]}...)"
                )
            out.append(Evaluation(attached_at=record["attached_at"], results=record["results"]))
        return tuple(out)

    # -- writing --------------------------------------------------------------------------------

    def save(
        self,
        policy: Policy,
        name: str,
        metadata: Mapping[str, Any] | None = None,
        *,
        force: bool = False,
    ) -> int:
        """Store ``policy`` as the next version of ``name`` and return that version number.

        ``metadata`` is the provenance (search config, dataset fingerprint, trial scores, library
        versions...): any JSON-serializable dict, stored as canonical JSON. When the latest
        version of ``name`` holds the same content (same :attr:`Policy.content_hash`), nothing is
        written and that version is returned, unless ``force=True``.
        """
        if not isinstance(policy, Policy):
            raise TypeError(f"PolicyStore.save: policy must be a policies.Policy, got {type(policy).__name__}")
        validate_name(name)
        provenance_json = canonical_json(metadata, "metadata")
        content_hash = policy.content_hash
        try:  # a schedule in the provenance must end with this policy (it is checked again when read)
            schedule = provenance_schedule(metadata, policy)
        except ValueError as exc:
            raise StoreError(f"cannot save {name}: {exc}") from None
        if not force:
            versions = self.versions(name)
            if (
                versions
                and self._latest_hash_or_none(name, versions[-1]) == content_hash
                and self._schedule_hash(name, versions[-1]) == (schedule.content_hash if schedule else None)
            ):
                # (a schedule is stored as its last stage: the same last stage after other stages is new content)
                return versions[-1]
        # A full, over-quota, read-only or denying filesystem, wherever the save meets it (claim,
        # issued marker, version file, publication): one StorageError line naming the store; what
        # the save had begun (its temporary file, its claim) is removed before it is raised.
        with writing(self._uri, what="policy store"):
            try:
                self._claims.prepare(name)
            except OSError as exc:  # a file in the way, or a store error of the kinds writing() names
                if storage_error(exc, self._uri) is not None:
                    raise
                raise StoreError(
                    f"cannot write to policy store {self._uri}: {' '.join(str(exc).split())[:300]}"
                ) from None
            version, claim = self._claims.claim(
                name, lambda: self.versions(name), lambda v: self._version_path(name, v)
            )
            final = self._version_path(name, version)
            tmp = self._path(name, f".v{version:06d}.parquet.tmp-{uuid.uuid4().hex}")
            index = None
            try:
                # The number is issued for good before anything is published: even if this version
                # file is deleted later, no other content ever gets it.
                self._claims.issue(name, version)
                now = _utcnow()
                table = encode_version(policy, name, version, provenance_json, now)
                with self._fs.open_output_stream(tmp) as sink:
                    pq.write_table(table, sink, compression="zstd", write_page_checksum=True)
                failpoints.hit("store.after_version_write")
                # Its index entry (the digest of the bytes written) before the version exists: a
                # published version has one, unless the save is killed in between (the version is
                # then read from its file).
                with self._fs.open_input_stream(tmp) as written:
                    data = written.read()
                index = self._write_index(name, version, content_hash, iso_utc(now), data)
                self._publish(tmp, final)
            except BaseException:
                self._delete_quietly(tmp)
                if index is not None:
                    self._delete_quietly(index)
                self._claims.release(claim)
                raise
            self._claims.release(claim)
        self._hash_cache[final] = content_hash
        return version

    def import_json(
        self,
        text: str,
        name: str,
        metadata: Mapping[str, Any] | None = None,
        *,
        force: bool = False,
    ) -> int:
        """Save a policy given as JSON (``Policy.to_json()`` output); returns the version."""
        return self.save(Policy.from_json(text), name, metadata, force=force)

    def attach_evaluation(self, ref: str, evaluation: Mapping[str, Any]) -> Evaluation:
        """Attach results to a stored version (appended; the version itself stays unchanged).

        ``evaluation`` is any JSON-serializable dict, e.g. ``{"model": "wrn-40-2", "seeds": [0, 1],
        "test_accuracy": [0.962, 0.965]}``. Returns the stored :class:`Evaluation`; ``get(ref)``
        lists every evaluation of a version in the order they were attached.
        """
        name, version = self.resolve(ref)
        content_hash = self._content_hash(name, version)
        results_json = canonical_json(evaluation, "evaluation")
        now = _utcnow()
        record = {
            "attached_at": iso_utc(now),
            "name": name,
            "version": version,
            "content_hash": content_hash,
            "results": json.loads(results_json),
        }
        folder = self._path(name, EVALUATIONS_DIR, f"v{version:06d}")
        token = uuid.uuid4().hex
        stem = f"{now.strftime('%Y%m%dT%H%M%S%fZ')}-{token[:12]}.json"
        tmp = self._path(name, EVALUATIONS_DIR, f"v{version:06d}", f".{stem}.tmp")
        with writing(self._location(folder), what="policy store evaluation folder"):
            self._fs.create_dir(folder, recursive=True)
            try:
                with self._fs.open_output_stream(tmp) as sink:
                    sink.write(json.dumps(record, sort_keys=True, ensure_ascii=False, indent=1).encode("utf-8"))
                self._publish(tmp, self._path(name, EVALUATIONS_DIR, f"v{version:06d}", stem))
            except BaseException:
                self._delete_quietly(tmp)
                raise
        return Evaluation(attached_at=record["attached_at"], results=record["results"])

    # -- maintenance (fsck) ---------------------------------------------------------------------

    def check(self, *, grace_seconds: float = DEFAULT_GRACE_SECONDS, now: datetime | None = None) -> CheckReport:
        """Verify every version (and its evaluations) and remove what killed saves left behind.

        Leftovers are temporary version files (``.vNNNNNN.parquet.tmp-*``), version claims and
        their staging/released folders (``.claims/*``), temporary evaluation files
        (``_evaluations/vNNNNNN/.*.tmp``) and index entries (``_index/.vNNNNNN.json.tmp-*``);
        those older than ``grace_seconds`` are deleted (a save in progress holds its own for
        milliseconds), younger ones are reported as kept. Corrupt versions are reported, never
        deleted. A verified version without an index entry matching it (a store written before
        the index existed) gets one (``indexed``). Raises :class:`StoreNotFoundError` when the
        store does not exist.
        """
        from autoaug.policies.store_check import check_store

        return check_store(self, grace_seconds=grace_seconds, now=now)

    # -- writing helpers --------------------------------------------------------------------------

    def _publish(self, tmp: str, final: str) -> None:
        """Make a fully written temporary file visible under its final name."""
        self._fs.move(tmp, final)

    def _delete_quietly(self, path: str) -> None:
        delete_quietly(self._fs, path)

    def _schedule_hash(self, name: str, version: int) -> str | None:
        """The content hash of the schedule a version's provenance holds, or None (none, or corrupt)."""
        try:
            record = self._read(name, version, evaluations=False)
        except CorruptArtifactError:
            return None
        schedule = provenance_schedule(record.provenance, record.policy)
        return schedule.content_hash if schedule is not None else None

    def _latest_hash_or_none(self, name: str, version: int) -> str | None:
        """The verified content hash of a version, or None when it is corrupt (a corrupt latest
        version never blocks a new save)."""
        try:
            return self._content_hash(name, version)
        except CorruptArtifactError:
            return None
