"""Race-free version numbers for the policy store (:mod:`autoaug.policies.store`).

Before writing a version file, a saver *claims* its number in ``<name>/.claims/``:

- Local filesystems (``LocalFileSystem``, or a ``SubTreeFileSystem`` over one), mode ``rename``:
  the claim is an atomic ``rename(2)`` of a private, non-empty folder onto ``.claims/vNNNNNN``,
  which POSIX refuses (``ENOTEMPTY``/``EEXIST``) when another saver got there first. Any number of
  processes on one machine (or on one NFS export with atomic rename) can save under one name at
  the same time; each gets a distinct version.
- Every other filesystem (S3, GCS, HDFS, in-memory...), mode ``announce``: pyarrow exposes no
  conditional write there, so a saver announces ``.claims/vNNNNNN.<token>``, lists the claims, and
  keeps the number only if its claim is the only one (otherwise it withdraws and retries after a
  random back-off). This is safe on stores with read-after-write and list-after-write consistency
  (S3 since December 2020, GCS, HDFS); an eventually consistent object store would need a
  different scheme (conditional ``If-None-Match`` puts or an external lock service).

Versions increase monotonically per name and are never reused: every claimed number is also
*issued* for good in ``<name>/_issued/`` (an empty marker written before the version file), so
deleting a version file (even the latest) does not hand its number to different content. A saver
killed after claiming leaves its number unused, so numbers can have gaps, never duplicates.
:class:`VersionClaims` owns both folders; the store decides what a version is and when it exists.
"""

from __future__ import annotations

import errno
import json
import os
import random
import re
import socket
import time
import uuid
from collections.abc import Callable
from datetime import datetime, timezone

import pyarrow.fs as pafs

from autoaug.core.errors import StoreError
from autoaug.core.location import delete_quietly, list_dir

__all__ = ["CLAIMS_DIR", "ISSUED_DIR", "VersionClaims", "is_local"]

#: Per name: the transient claims, and one marker per number ever issued.
CLAIMS_DIR = ".claims"
ISSUED_DIR = "_issued"
_CLAIM_RE = re.compile(r"v(\d+)(?:\.([0-9a-f]{32}))?")
_MAX_CLAIM_ATTEMPTS = 200


def is_local(fs: pafs.FileSystem) -> bool:
    """True for a local filesystem (also behind a ``SubTreeFileSystem``): POSIX rename semantics."""
    if isinstance(fs, pafs.SubTreeFileSystem):
        return is_local(fs.base_fs)
    return isinstance(fs, pafs.LocalFileSystem)


class VersionClaims:
    """Claims and issued numbers of one store.

    ``path(*parts)``: a path under the store's root; ``mode``: ``rename`` or ``announce``;
    ``uri``: the store, for messages.
    """

    def __init__(self, fs: pafs.FileSystem, path: Callable[..., str], mode: str, uri: str) -> None:
        self._fs = fs
        self._path = path
        self.mode = mode
        self._uri = uri

    def prepare(self, name: str) -> None:
        """Create ``name``'s claim and issued folders (``OSError`` when the store is not writable)."""
        self._fs.create_dir(self._path(name, CLAIMS_DIR), recursive=True)
        self._fs.create_dir(self._path(name, ISSUED_DIR), recursive=True)

    def claimed(self, name: str) -> list[int]:
        """Numbers currently claimed under ``name``."""
        return [
            int(m.group(1))
            for info in list_dir(self._fs, self._path(name, CLAIMS_DIR))
            if (m := _CLAIM_RE.fullmatch(info.base_name)) is not None
        ]

    def issued(self, name: str) -> list[int]:
        """Numbers ever issued under ``name``."""
        return [
            int(m.group(1))
            for info in list_dir(self._fs, self._path(name, ISSUED_DIR))
            if (m := _CLAIM_RE.fullmatch(info.base_name)) is not None and m.group(2) is None
        ]

    def leftovers(self, name: str) -> list[pafs.FileInfo]:
        """Everything in ``name``'s claim folder (claims, staging and released folders): what a
        check removes once old enough."""
        return list_dir(self._fs, self._path(name, CLAIMS_DIR))

    def issue(self, name: str, version: int) -> None:
        """Record ``version`` of ``name`` as issued for good (before its version file is written)."""
        with self._fs.open_output_stream(self._path(name, ISSUED_DIR, f"v{version:06d}")):
            pass

    def claim(
        self, name: str, existing: Callable[[], list[int]], version_path: Callable[[int], str]
    ) -> tuple[int, str]:
        """Claim an unused version number of ``name``; returns it and the claim's path.

        ``existing()``: the complete versions stored under ``name`` now; ``version_path(v)``:
        where version ``v``'s file goes (a number whose file or issued marker exists is taken).
        """
        token = uuid.uuid4().hex
        at = datetime.now(timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")
        owner = json.dumps({"host": socket.gethostname(), "pid": os.getpid(), "token": token, "at": at}).encode()
        rng = random.Random(token)
        for attempt in range(_MAX_CLAIM_ATTEMPTS):
            version = max(existing() + self.claimed(name) + self.issued(name), default=0) + 1
            if self.mode == "rename":
                claim = self._claim_by_rename(name, version, token, owner)
            else:
                claim = self._claim_by_announce(name, version, token, owner)
            if claim is not None:
                # Another saver may have committed this number and released its claim between
                # our listing and our claim: the version file (or its issued marker) then exists.
                taken = any(
                    self._fs.get_file_info(p).type != pafs.FileType.NotFound
                    for p in (version_path(version), self._path(name, ISSUED_DIR, f"v{version:06d}"))
                )
                if not taken:
                    return version, claim
                self.release(claim)
            elif self.mode == "announce":
                time.sleep(rng.uniform(0, 0.005 * 2 ** min(attempt, 6)))
        raise StoreError(
            f"could not claim a new version of {name!r} in store {self._uri} after "
            f"{_MAX_CLAIM_ATTEMPTS} attempts (too many concurrent savers?)"
        )

    def release(self, claim: str) -> None:
        """Withdraw a claim. Claims only matter until the version file exists; a leftover claim
        merely burns a number."""
        if self.mode == "rename":
            # Rename the claim folder away first (atomic), so that no other saver ever sees it
            # half-deleted (empty folders can be renamed over), then delete it at leisure.
            released = f"{claim.rsplit('/', 1)[0]}/.released-{uuid.uuid4().hex}"
            try:
                self._fs.move(claim, released)
            except OSError:
                return
            claim = released
        delete_quietly(self._fs, claim)

    def _claim_by_rename(self, name: str, version: int, token: str, owner: bytes) -> str | None:
        target = self._path(name, CLAIMS_DIR, f"v{version:06d}")
        staging = self._path(name, CLAIMS_DIR, f".staging-{token}")
        self._fs.create_dir(staging, recursive=False)
        try:
            with self._fs.open_output_stream(f"{staging}/owner.json") as f:
                f.write(owner)  # non-empty: rename(2) refuses to replace a non-empty folder
        except BaseException:  # e.g. a full disk: no staging folder left behind for a check to sweep
            delete_quietly(self._fs, staging)
            raise
        try:
            self._fs.move(staging, target)
        except OSError as exc:
            delete_quietly(self._fs, staging)
            taken = getattr(exc, "errno", None) in (errno.ENOTEMPTY, errno.EEXIST)
            if taken or self._fs.get_file_info(target).type != pafs.FileType.NotFound:
                return None  # another saver holds this number
            raise
        return target

    def _claim_by_announce(self, name: str, version: int, token: str, owner: bytes) -> str | None:
        mine = f"v{version:06d}.{token}"
        path = self._path(name, CLAIMS_DIR, mine)
        try:
            with self._fs.open_output_stream(path) as f:
                f.write(owner)
        except BaseException:
            delete_quietly(self._fs, path)
            raise
        rivals = [
            info.base_name
            for info in list_dir(self._fs, self._path(name, CLAIMS_DIR))
            if info.base_name != mine
            and (m := _CLAIM_RE.fullmatch(info.base_name)) is not None
            and int(m.group(1)) == version
        ]
        if rivals:
            delete_quietly(self._fs, path)
            return None
        return path
