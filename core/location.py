"""A place where ``autoaug`` reads or writes files: a local path or a URI, one way.

::

    from autoaug.core.location import Location
    loc = Location.parse("s3://bucket/runs")          # or "~/runs", "runs", "file:///tmp/runs"
    run = loc / "cifar10-r8"
    run.write_json("result.json", {...})              # atomic: temp file + rename
    run.read_json("result.json"); run.list(); run.exists("result.json"); run.delete()

Parsing rules (the only ones in the project):

* no ``://`` -> a local path, ``~`` expanded, made absolute;
* ``file://...`` -> the same local path (``file:///tmp/x`` is ``/tmp/x``);
* any other ``SCHEME://...`` -> a URI opened with ``pyarrow.fs.FileSystem.from_uri`` (s3, gs,
  hdfs, ...); a query string holds pyarrow's options (``s3://bucket/p?endpoint_override=host:9000
  &scheme=http`` for an S3-compatible server; ``AWS_ENDPOINT_URL`` in the environment does the same)
  and is kept at the end of every child location.

Local locations are written with a temp file in the same folder, ``fsync`` and ``os.replace``;
remote ones with a temp object and a move (atomic where the filesystem's move is).

A full filesystem, an exceeded quota, a read-only filesystem or a denied access met by a write is
one :class:`~autoaug.core.errors.StorageError` line naming the path and what to free or fix
(:func:`writing`, :func:`storage_error`), whoever writes: every write of a :class:`Location` and
of :func:`atomic_write_local` goes through it, and the policy store's own writes too.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from autoaug.core.errors import StorageAccessError, StorageError, UserInputError

if TYPE_CHECKING:
    import pyarrow.fs as pafs

__all__ = [
    "Location",
    "atomic_write_local",
    "delete_quietly",
    "filesystem_from_uri",
    "is_uri",
    "list_dir",
    "resume_with",
    "storage_error",
    "writing",
]

#: errno -> (what happened, what to do): the filesystem errors a write can meet mid-run.
_FULL = {
    errno.ENOSPC: ("no space left on the filesystem", "ENOSPC"),
    errno.EDQUOT: ("the disk quota is exceeded", "EDQUOT"),
}
_DENIED = {
    errno.EROFS: ("the filesystem is read-only", "EROFS"),
    errno.EACCES: ("permission denied", "EACCES"),
    errno.EPERM: ("operation not permitted", "EPERM"),
}
# pyarrow's OSError carries the errno in its text when its ``errno`` is unset ("[errno 28] No space...").
_ERRNO_IN_TEXT = re.compile(r"\[errno (\d+)\]", re.I)


def _errno_of(exc: BaseException) -> int | None:
    code = getattr(exc, "errno", None)
    if isinstance(code, int) and code:
        return code
    found = _ERRNO_IN_TEXT.search(str(exc))
    return int(found.group(1)) if found else None


_AGAIN = "run the command again"


def storage_error(
    exc: BaseException, where: str, *, what: str = "", hint: str = "", then: str | None = None
) -> StorageError | None:
    """The one-line :class:`StorageError` for ``exc`` when it is a write refused by a full, over-quota,
    read-only or denying filesystem (else None). ``where``: the path or URI written; ``what``: what
    it is (``"policy store"``, ``"checkpoint"``...); ``hint``: what else to know (appended);
    ``then``: what to do once space is freed (None: run the command again)."""
    if not isinstance(exc, OSError) or isinstance(exc, StorageError):
        return None
    code = _errno_of(exc)
    named = f"{what} {where}" if what else str(where)
    tail = f"; {hint}" if hint else ""
    if code in _FULL:
        reason, name = _FULL[code]
        error = StorageError(
            f"cannot write {named}: {reason} ({name}); free space there (or write elsewhere), then "
            f"{then or _AGAIN}{tail}"
        )
    elif code in _DENIED:
        reason, name = _DENIED[code]
        again = "" if then is None else f"; then {then}"
        error = StorageAccessError(
            f"cannot write {named}: {reason} ({name}); make it writable or choose another location{again}{tail}"
        )
    else:
        return None
    error.then = lambda then: storage_error(exc, where, what=what, hint=hint, then=then)  # see resume_with
    return error


def resume_with(error: StorageError, then: str) -> StorageError:
    """``error`` (from :func:`storage_error`) saying ``then`` is what to do once the filesystem is
    fixed, instead of running the command again (e.g. how to resume the search it stopped)."""
    again = getattr(error, "then", None)
    return again(then) if callable(again) else error


@contextlib.contextmanager
def writing(where: str, *, what: str = "", hint: str = "") -> Iterator[None]:
    """Run a write, turning a full / read-only / denied filesystem into one :class:`StorageError`
    line (:func:`storage_error`); other errors pass unchanged. The writer's own clean-up (temporary
    files) runs before this, in its ``except``/``finally``."""
    try:
        yield
    except OSError as exc:
        error = storage_error(exc, where, what=what, hint=hint)
        if error is None:
            raise
        raise error from None


def _pafs():
    """``pyarrow.fs``, imported on first use (``autoaug --help`` does not need it)."""
    import pyarrow.fs

    return pyarrow.fs


def filesystem_from_uri(uri: str) -> tuple[pafs.FileSystem, str]:
    """``(filesystem, path)`` for a URI: every remote access of a :class:`Location` goes through
    this one function."""
    return _pafs().FileSystem.from_uri(uri)


def is_uri(text: str) -> bool:
    """True for ``SCHEME://...`` other than ``file://`` (which is a local path)."""
    return "://" in text and not text.startswith("file://")


def current_umask() -> int:
    """The process's umask (read from /proc on Linux; elsewhere set and restored at once)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write_local(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to the local file ``path`` atomically (temp file in the same folder, fsync,
    rename); creates the folder. The file's mode honours the umask (0644 under umask 022), as a
    plain ``open`` would."""
    path = os.fspath(path)
    with writing(path):
        _atomic_write_local(path, data)


def _atomic_write_local(path: str, data: bytes) -> None:
    folder = os.path.dirname(path) or "."
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=folder)
    try:
        # mkstemp creates the file 0600; the file we publish gets what open() would give it.
        os.fchmod(fd, 0o666 & ~current_umask())
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def list_dir(fs: pafs.FileSystem, path: str) -> list:
    """Entries (``pyarrow.fs.FileInfo``) of the folder ``path`` on ``fs`` ([] if it does not exist).

    pyarrow's ``LocalFileSystem`` raises ``FileNotFoundError`` despite ``allow_not_found`` when
    another process creates the folder at the same moment (seen with pyarrow 26 when concurrent
    first saves of the policy store create ``<name>/``), so that error is retried.
    """
    pafs_ = _pafs()
    selector = pafs_.FileSelector(path, allow_not_found=True, recursive=False)
    for attempt in range(20):
        try:
            return fs.get_file_info(selector)
        except FileNotFoundError:
            if fs.get_file_info(path).type == pafs_.FileType.NotFound:
                return []
            time.sleep(0.001 * (attempt + 1))
    return fs.get_file_info(selector)


def delete_quietly(fs: pafs.FileSystem, path: str) -> None:
    """Delete the file or folder ``path`` on ``fs`` if it is there; errors are ignored (clean-up
    of temporary files, which a later check removes anyway)."""
    pafs_ = _pafs()
    try:
        info = fs.get_file_info(path)
        if info.type == pafs_.FileType.File:
            fs.delete_file(path)
        elif info.type == pafs_.FileType.Directory:
            fs.delete_dir(path)
    except OSError:
        pass


@dataclass(frozen=True)
class Location:
    """A folder or file, local or behind a URI.

    ``uri`` is what users see (the local absolute path, or the URI); ``fs`` and ``path`` are the
    ``pyarrow.fs`` filesystem and the path inside it; ``local_path`` is the local path or None.
    """

    uri: str
    path: str
    local: bool

    @classmethod
    def parse(cls, text: str | os.PathLike, *, what: str = "location") -> Location:
        """A location from a local path or a URI (see the module documentation)."""
        if isinstance(text, Location):
            return text
        if not isinstance(text, (str, os.PathLike)) or not os.fspath(text).strip():
            raise UserInputError(f"{what} {text!r} is not a path or URI: expected a folder path or SCHEME://...")
        raw = os.fspath(text).strip()
        if not is_uri(raw):
            local = os.path.abspath(os.path.expanduser(raw.removeprefix("file://")))
            return cls(uri=local, path=local, local=True)
        try:
            _, path = filesystem_from_uri(raw)
        except Exception as exc:  # pyarrow: ArrowInvalid, unknown scheme, missing credentials
            raise UserInputError(f"{what} {raw!r} is not a URI pyarrow can open: {exc}") from None
        base, mark, query = raw.partition("?")
        return cls(uri=base.rstrip("/") + mark + query, path=path.rstrip("/") or "/", local=False)

    # -- the filesystem --------------------------------------------------------------------------
    @property
    def fs(self) -> pafs.FileSystem:
        if self.local:
            return _pafs().LocalFileSystem()
        return filesystem_from_uri(self.uri)[0]

    @property
    def local_path(self) -> str | None:
        return self.path if self.local else None

    def __str__(self) -> str:
        return self.uri

    def __truediv__(self, name: str) -> Location:
        return self.child(name)

    def child(self, *names: str) -> Location:
        """The location ``self/name/...``."""
        uri, path = self.uri, self.path
        # A query string (``s3://b/p?endpoint_override=host:9000``: options pyarrow reads) stays last.
        uri, mark, query = uri.partition("?") if not self.local else (uri, "", "")
        for name in names:
            name = str(name).strip("/")
            if self.local:
                uri = path = os.path.join(path, name)
            else:
                uri, path = f"{uri.rstrip('/')}/{name}", f"{path.rstrip('/')}/{name}"
        return Location(uri=uri + mark + query, path=path, local=self.local)

    @property
    def name(self) -> str:
        return self.path.rstrip("/").rsplit("/", 1)[-1]

    def _target(self, filename: str | None) -> Location:
        return self if filename is None else self.child(filename)

    # -- queries ---------------------------------------------------------------------------------
    def exists(self, filename: str | None = None) -> bool:
        target = self._target(filename)
        return target.fs.get_file_info(target.path).type != _pafs().FileType.NotFound

    def is_dir(self) -> bool:
        return self.fs.get_file_info(self.path).type == _pafs().FileType.Directory

    def list(self) -> list[str]:
        """Names directly inside this folder, sorted (empty when it does not exist)."""
        if self.local:
            try:
                return sorted(os.listdir(self.path))
            except (FileNotFoundError, NotADirectoryError):
                return []
        try:
            infos = self.fs.get_file_info(_pafs().FileSelector(self.path, allow_not_found=True))
        except FileNotFoundError:
            return []
        return sorted(i.base_name for i in infos)

    # -- reading ---------------------------------------------------------------------------------
    def read_bytes_if_exists(self, filename: str | None = None) -> bytes | None:
        """The file's bytes, or None when there is no such file."""
        target = self._target(filename)
        if target.fs.get_file_info(target.path).type != _pafs().FileType.File:
            return None
        return target.read_bytes()

    def read_bytes(self, filename: str | None = None) -> bytes:
        target = self._target(filename)
        if target.local:
            with open(target.path, "rb") as f:
                return f.read()
        with target.fs.open_input_stream(target.path) as f:
            return f.read()

    def read_text(self, filename: str | None = None) -> str:
        return self.read_bytes(filename).decode("utf-8")

    def read_json(self, filename: str | None = None) -> Any:
        return json.loads(self.read_text(filename))

    # -- writing ---------------------------------------------------------------------------------
    def mkdir(self) -> None:
        with writing(self.uri):
            if self.local:
                os.makedirs(self.path, exist_ok=True)
            else:
                self.fs.create_dir(self.path, recursive=True)

    def write_bytes(self, data: bytes, filename: str | None = None) -> None:
        """Write ``data`` atomically (readers see the old file or the new one, never a part). A full,
        read-only or denying filesystem is a :class:`StorageError` naming the file; the temporary
        file is removed first."""
        target = self._target(filename)
        if target.local:
            atomic_write_local(target.path, data)
            return
        fs = target.fs
        parent = target.path.rsplit("/", 1)[0]
        tmp = f"{parent}/.{target.name}.tmp-{uuid.uuid4().hex[:12]}"
        with writing(target.uri):
            fs.create_dir(parent, recursive=True)
            try:
                with fs.open_output_stream(tmp) as f:
                    f.write(data)
                fs.move(tmp, target.path)
            except BaseException:
                delete_quietly(fs, tmp)
                raise

    def write_text(self, text: str, filename: str | None = None) -> None:
        self.write_bytes(text.encode("utf-8"), filename)

    def write_json(
        self, obj: Any, filename: str | None = None, *, default: Callable[[Any], Any] | None = None, indent: int = 2
    ) -> None:
        self.write_text(json.dumps(obj, indent=indent, default=default), filename)

    def delete(self, filename: str | None = None) -> None:
        """Delete this file or folder (recursively); nothing happens when it does not exist."""
        target = self._target(filename)
        info = target.fs.get_file_info(target.path)
        if info.type == _pafs().FileType.Directory:
            target.fs.delete_dir(target.path)
        elif info.type != _pafs().FileType.NotFound:
            target.fs.delete_file(target.path)
