"""A full, over-quota, read-only or denying filesystem met by a write of ``core.location``: one
StorageError line naming the path and what to do, the old file intact, no temporary file left."""

from __future__ import annotations

import errno
import os

import pytest

from autoaug.core.errors import StorageAccessError, StorageError
from autoaug.core.location import Location, storage_error


def _failing_fsync(code):
    def fsync(fd):
        raise OSError(code, os.strerror(code))

    return fsync


@pytest.mark.parametrize(
    "code, kind, words",
    [
        (errno.ENOSPC, StorageError, "no space left on the filesystem (ENOSPC); free space there"),
        (errno.EDQUOT, StorageError, "the disk quota is exceeded (EDQUOT); free space there"),
        (errno.EROFS, StorageAccessError, "the filesystem is read-only (EROFS); make it writable"),
        (errno.EACCES, StorageAccessError, "permission denied (EACCES); make it writable"),
    ],
)
def test_a_refused_write_is_one_line_and_leaves_the_old_file(tmp_path, monkeypatch, code, kind, words):
    run = Location.parse(tmp_path / "run")
    run.write_json({"trials": 1}, "result.json")
    monkeypatch.setattr(os, "fsync", _failing_fsync(code))
    with pytest.raises(kind) as info:
        run.write_json({"trials": 2}, "result.json")
    message = str(info.value)
    assert message.startswith(f"cannot write {tmp_path / 'run' / 'result.json'}: ") and words in message
    assert "\n" not in message and info.value.__cause__ is None
    monkeypatch.undo()
    assert run.read_json("result.json") == {"trials": 1}  # the old file, whole
    assert os.listdir(tmp_path / "run") == ["result.json"]  # no temporary file


def test_other_errors_pass_unchanged_and_pyarrow_texts_are_read():
    assert storage_error(OSError(errno.ENOENT, "gone"), "x") is None
    assert storage_error(ValueError("no"), "x") is None
    arrow = OSError("Error writing bytes to file. Detail: [errno 28] No space left on device")
    assert "ENOSPC" in str(storage_error(arrow, "s3://b/k", what="policy store"))
    assert str(storage_error(arrow, "/s", what="policy store", hint="x")).startswith("cannot write policy store /s: ")


FULL_DISK = r"""
set -u
mount -t tmpfs -o size=256k tmpfs "$D"
autoaug policies import "$P1" --name p --store "$D/store"; echo "rc1=$?"
dd if=/dev/zero of="$D/filler" bs=4k 2>/dev/null; sync
autoaug policies import "$P2" --name p --store "$D/store"; echo "rc2=$?"
echo "claims=$(ls -A "$D/store/p/.claims" | wc -l) tmp=$(ls -A "$D/store/p" | grep -c tmp)"
rm "$D/filler"
autoaug policies import "$P2" --name p --store "$D/store"; echo "rc3=$?"
autoaug policies check --grace 0 --store "$D/store"; echo "rc4=$?"
"""


@pytest.mark.slow
def test_policies_import_on_a_full_filesystem_is_one_line_and_resumes_once_space_is_freed(tmp_path, in_mount_namespace):
    """A real full filesystem (a 256 KiB tmpfs mounted in a user namespace, no root needed) and real
    processes: `policies import` exits 1 with one line naming the store and saying to free space,
    leaves no claim or temporary file, and works once space is freed."""
    import sys
    from pathlib import Path

    from autoaug.policies import presets

    (tmp_path / "mnt").mkdir()
    p1, p2 = tmp_path / "p1.json", tmp_path / "p2.json"
    p1.write_text(presets.resolve("autoaugment-svhn").to_json())
    p2.write_text(presets.resolve("autoaugment-cifar10").to_json())
    bin_dir = str(Path(sys.executable).parent)
    env = {
        **os.environ,
        "D": str(tmp_path / "mnt"),
        "P1": str(p1),
        "P2": str(p2),
        "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),
    }
    proc = in_mount_namespace(FULL_DISK, env)
    out, err = proc.stdout, proc.stderr
    assert "rc1=0" in out, out + err
    assert "rc2=1" in out, out + err
    errors = [line for line in err.splitlines() if line.strip()]
    store = tmp_path / "mnt" / "store"
    assert errors == [
        f"autoaug: error: cannot write policy store {store}: no space left on the filesystem "
        "(ENOSPC); free space there (or write elsewhere), then run the command again"
    ], err
    assert "claims=0 tmp=0" in out
    assert "rc3=0" in out and "saved p@2 (hash" in out
    assert "rc4=0" in out and "2 version(s) verified, 0 corrupt, 0 leftover(s) removed" in out  # nothing left over
