"""Every hostile input (bad labels, corrupt images, unwritable paths, bad splits, policy files
and store contents, ...), run through the real ``autoaug`` CLI (one process each), and
the Markdown table ``input | exit code | message (as the user sees it)`` they produce.

    python benchmarks/hostile_inputs.py --data ../shared/data/cifar10-jpeg [--out docs/hostile-inputs.md]

The message column is the last line the command printed on stderr (or stdout when it succeeded),
clipped to 300 characters (its full length is then given). Inputs are built in a temporary folder;
``AUTOAUG_STORE`` and ``AUTOAUG_RUNS`` point there, so nothing outside it is touched. A read-only
filesystem is a read-only tmpfs mount when run as root (else a folder of mode 0555).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image

EXE = [sys.executable, "-m", "autoaug.launch.cli"]
TINY = [
    "--preset",
    "smoke",
    "--set",
    "epochs=1",
    "--set",
    "batch_size=16",
    "--set",
    "train_size=64",
    "--set",
    "val_size=32",
]
SEARCH_TINY = [
    "--preset",
    "smoke",
    "--num-trials",
    "1",
    "--set",
    "train.epochs=1",
    "--set",
    "train.batch_size=16",
    "--set",
    "train.train_size=64",
    "--set",
    "train.val_size=32",
]


def _png(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(array).save(buf, format="PNG")
    return buf.getvalue()


def _parquet(path: Path, images, labels, *, classes=None, extra=None) -> Path:
    table = pa.table({"image": pa.array(images, pa.binary()), "label": pa.array(labels, pa.int64()), **(extra or {})})
    if classes:
        table = table.replace_schema_metadata({"classes": ",".join(classes)})
    pq.write_table(table, path)
    return path


def _cifar_rows(cifar: Path, n: int) -> tuple[list[bytes], list[int]]:
    """``n`` rows taking the classes in turn (the file is sorted by class), so that every prefix
    of them has every class: data of one class is an input of its own, refused before training."""
    table = pq.read_table(cifar / "train.parquet", columns=["image", "label"])
    labels = np.asarray(table.column("label").to_pylist())
    by_class = [np.flatnonzero(labels == c) for c in np.unique(labels)]
    order = [int(rows[i]) for i in range(max(map(len, by_class))) for rows in by_class if i < len(rows)][:n]
    table = table.take(order)
    return table.column("image").to_pylist(), [int(v) for v in table.column("label").to_pylist()]


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


class Runner:
    def __init__(self, root: Path):
        self.root = root
        self.rows: list[tuple[str, int, str]] = []
        self.env = {**os.environ, "AUTOAUG_STORE": str(root / "store"), "AUTOAUG_RUNS": str(root / "runs")}

    def run(
        self, label: str, argv: list[str], *, cwd: Path | None = None, stdin: str | None = None, env: dict | None = None
    ) -> int:
        started = time.monotonic()
        proc = subprocess.run(
            [*EXE, *argv],
            cwd=cwd or self.root,
            env=env or self.env,
            capture_output=True,
            text=True,
            input=stdin,
            timeout=1800,
        )
        return self.add(label, proc.returncode, proc.stdout, proc.stderr, started)

    def add(self, label: str, code: int, stdout: str, stderr: str, started: float) -> int:
        """One row: a command's exit code and the message the user sees from its output."""
        err = [line for line in stderr.splitlines() if line.strip()]
        out = [line for line in stdout.splitlines() if line.strip()]
        if code == 0:
            warnings = [line for line in err if line.startswith("autoaug: warning:")]
            message = " / ".join([*(out[-1:]), *warnings[:1]])
        else:
            message = err[-1] if err else (out[-1] if out else "")
            if len(err) > 1 and any("Traceback" in line for line in err):
                message = f"TRACEBACK ({len(err)} lines): {message}"
        shown = message if len(message) <= 300 else message[:297] + f"... ({len(message):,} characters)"
        self.rows.append((label, code, shown))
        print(f"[{time.monotonic() - started:5.1f}s] exit {code}  {label}: {shown}", flush=True)
        return code

    def full_disk(self, labels: list[str], script: str) -> None:
        """Rows for ``autoaug`` commands run by ``script`` on a real full filesystem: a tmpfs mounted
        at ``$D`` in a new user and mount namespace (``unshare``), so no root is needed. The script
        runs the k-th command as ``$AUTOAUG <args> >$LOG/k.out 2>$LOG/k.err; echo $? >$LOG/k.rc``."""
        self.disks = getattr(self, "disks", 0) + 1
        logs, mnt = self.root / f"log{self.disks}", self.root / f"full{self.disks}"
        logs.mkdir(), mnt.mkdir()
        env = {**self.env, "D": str(mnt), "LOG": str(logs), "AUTOAUG": " ".join(EXE), "PYTHONUNBUFFERED": "1"}
        started = time.monotonic()
        argv = ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", "set -u\n" + script]
        if (
            shutil.which("unshare") is None
            or subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "true"]).returncode != 0
        ):
            for label in labels:
                self.rows.append((label, -1, "not run: needs unprivileged user+mount namespaces (unshare)"))
            return
        subprocess.run(argv, cwd=self.root, env=env, capture_output=True, text=True, timeout=1800)
        for k, label in enumerate(labels, 1):
            rc = logs / f"{k}.rc"
            if not rc.exists():
                self.rows.append((label, -1, "not run (the script stopped before it)"))
                continue
            self.add(
                label, int(rc.read_text()), (logs / f"{k}.out").read_text(), (logs / f"{k}.err").read_text(), started
            )

    def table(self) -> str:
        def cell(text: str) -> str:
            return text.replace("|", "\\|").replace(str(self.root), "$TMP")

        lines = ["| input | exit code | message (as the user sees it) |", "| --- | --- | --- |"]
        lines += [f"| {cell(a)} | {b} | `{cell(c)}` |" if c else f"| {cell(a)} | {b} | |" for a, b, c in self.rows]
        return "\n".join(lines)


def read_only_dir(root: Path) -> tuple[Path, callable]:
    path = root / "readonly"
    path.mkdir()
    if os.geteuid() != 0:
        path.chmod(0o555)
        return path, lambda: path.chmod(0o755)
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(path)]).returncode == 0:
        return path, lambda: subprocess.run(["umount", str(path)], check=True)
    return Path("/sys/fs"), lambda: None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--data",
        default=os.environ.get("AUTOAUG_CIFAR10", "../shared/data/cifar10-jpeg"),
        help="folder with CIFAR-10 train.parquet",
    )
    parser.add_argument("--out", help="write the table to this Markdown file too")
    parser.add_argument(
        "--skip-slow", action="store_true", help="leave out the runs that train (search, 9,999-image split)"
    )
    args = parser.parse_args()
    cifar = Path(args.data).resolve()
    root = Path(tempfile.mkdtemp(prefix="autoaug-hostile-"))
    r = Runner(root)
    ro, undo_ro = read_only_dir(root)
    try:
        images, labels = _cifar_rows(cifar, 600)
        d = root / "d"
        d.mkdir()
        good = _parquet(d / "good.parquet", images[:300], labels[:300], classes=None)

        # --- labels ---------------------------------------------------------------------------
        r.run(
            "Parquet without class names, labels 0..9 and one 17",
            [
                "train",
                "--data",
                str(_parquet(d / "l17.parquet", images[:300], labels[:299] + [17])),
                "--out",
                "o1",
                *TINY,
            ],
        )
        r.run(
            "Parquet without class names, one label 1,000,000",
            [
                "train",
                "--data",
                str(_parquet(d / "l1e6.parquet", images[:300], labels[:299] + [1_000_000])),
                "--out",
                "o2",
                *TINY,
            ],
        )
        r.run(
            "Parquet without class names, one label 10^9",
            [
                "train",
                "--data",
                str(_parquet(d / "l1e9.parquet", images[:300], labels[:299] + [10**9])),
                "--out",
                "o3",
                *TINY,
            ],
        )
        r.run(
            "Parquet with class names (10), one label 10",
            [
                "train",
                "--data",
                str(
                    _parquet(
                        d / "lnamed.parquet", images[:300], labels[:299] + [10], classes=[str(i) for i in range(10)]
                    )
                ),
                "--out",
                "o4",
                *TINY,
            ],
        )

        # --- decoding -------------------------------------------------------------------------
        rng = np.random.default_rng(0)
        px16 = [_png((rng.integers(0, 65535, (32, 32))).astype(np.uint16)) for _ in range(120)]
        r.run(
            "16-bit grayscale PNGs (decoded to correct 8-bit RGB; trains)",
            [
                "train",
                "--data",
                str(_parquet(d / "png16.parquet", px16, [i % 2 for i in range(120)])),
                "--out",
                "o5",
                *TINY,
            ],
        )
        corrupt = list(images[:300])
        corrupt[250] = corrupt[250][: len(corrupt[250]) // 2]
        bad_image = _parquet(d / "corrupt.parquet", corrupt, labels[:300])
        r.run(
            "search on a dataset with one truncated JPEG (row 250, outside the split)",
            ["search", "--data", str(bad_image), *SEARCH_TINY],
        )
        footer = bytearray((d / "good.parquet").read_bytes())
        footer[-40:-8] = b"\xff" * 32
        (d / "footer.parquet").write_bytes(bytes(footer))
        r.run(
            "Parquet with corrupt footer metadata", ["train", "--data", str(d / "footer.parquet"), "--out", "o6", *TINY]
        )
        pq.write_table(pa.table({"img": pa.array(images[:10], pa.binary()), "label": labels[:10]}), d / "nocol.parquet")
        r.run("Parquet without an 'image' column", ["train", "--data", str(d / "nocol.parquet"), "--out", "o7", *TINY])
        r.run("train --data /nope --out x (x is not created)", ["train", "--data", "/nope", "--out", "x"])
        r.rows[-1] = (r.rows[-1][0] + f"; x exists afterwards: {(root / 'x').exists()}", *r.rows[-1][1:])

        # --- paths and writability -------------------------------------------------------------
        (root / "afile").write_text("x")
        r.run(
            "search --store on a read-only filesystem",
            ["search", "--data", str(good), *SEARCH_TINY, "--store", str(ro / "store")],
        )
        r.run(
            "search --storage (run directory) on a read-only filesystem",
            ["search", "--data", str(good), *SEARCH_TINY, "--storage", str(ro)],
        )
        r.run(
            "search --store that is a file",
            ["search", "--data", str(good), *SEARCH_TINY, "--store", str(root / "afile")],
        )
        r.run(
            "search --storage under a file",
            ["search", "--data", str(good), *SEARCH_TINY, "--storage", str(root / "afile" / "runs")],
        )
        r.run("train --out on a read-only filesystem", ["train", "--data", str(good), *TINY, "--out", str(ro / "o")])
        r.run(
            "policies import into a store on a read-only filesystem",
            ["policies", "import", "-", "--name", "x", "--store", str(ro / "store")],
            stdin=json.dumps({"name": "x", "num_magnitude_bins": 10, "sub_policies": [[["Rotate", 0.5, 3]]]}),
        )
        r.run("policies list --store that is a file", ["policies", "list", "--store", str(root / "afile")])
        if not args.skip_slow:
            mine = root / "work" / "mine"
            mine.mkdir(parents=True)
            shutil.copy(good, mine / "train.parquet")
            r.run(
                "search --data mine/train.parquet (relative path, as in the README)",
                ["search", "--data", "mine/train.parquet", *SEARCH_TINY, "--name", "relative"],
                cwd=root / "work",
            )

        # --- splits ---------------------------------------------------------------------------
        if not args.skip_slow:
            many_images, many_labels = _cifar_rows(cifar, 9999)
            many = _parquet(d / "many.parquet", many_images, many_labels)
            r.run(
                "train --train-size 0 --val-size 1001 on 9,999 images",
                [
                    "train",
                    "--data",
                    str(many),
                    "--preset",
                    "smoke",
                    "--set",
                    "epochs=1",
                    "--set",
                    "batch_size=256",
                    "--train-size",
                    "0",
                    "--val-size",
                    "1001",
                    "--out",
                    "o8",
                ],
            )
        r.run(
            "train --train-size 290 --val-size 20 on 300 images (more than there are)",
            [
                "train",
                "--data",
                str(good),
                "--preset",
                "smoke",
                "--train-size",
                "290",
                "--val-size",
                "20",
                "--out",
                "o9",
            ],
        )

        # --- policy files ---------------------------------------------------------------------
        p = root / "p"
        p.mkdir()
        (p / "deep.json").write_text(
            '{"name": "x", "num_magnitude_bins": 10, "sub_policies": ' + _nested(100_000) + "}"
        )
        r.run(
            "policy JSON nested 100,000 levels (train --policy)",
            ["train", "--data", str(good), "--policy", str(p / "deep.json"), *TINY, "--out", "o10"],
        )
        (p / "bins.json").write_text('{"name": "x", "num_magnitude_bins": 1' + "0" * 30 + ', "sub_policies": []}')
        r.run("num_magnitude_bins 10^30 (policies import)", ["policies", "import", str(p / "bins.json"), "--name", "x"])
        r.run(
            "num_magnitude_bins 10^30 (train --policy)",
            ["train", "--data", str(good), "--policy", str(p / "bins.json"), *TINY, "--out", "o11"],
        )
        (p / "latin1.json").write_bytes(
            '{"name": "caf\xe9", "num_magnitude_bins": 10, "sub_policies": []}'.encode("latin-1")
        )
        r.run(
            "policy file that is not UTF-8 (train --policy)",
            ["train", "--data", str(good), "--policy", str(p / "latin1.json"), *TINY, "--out", "o12"],
        )
        r.run(
            "policy file that is not UTF-8 (policies import)",
            ["policies", "import", str(p / "latin1.json"), "--name", "y"],
        )
        r.run(
            "policy name of 100,000 characters (policies import --name)",
            ["policies", "import", str(p / "bins.json"), "--name", "n" * 100_000],
        )
        sub = [["Rotate", 0.5, 3]]
        for n in (40_000, 380_000):
            (p / f"subs{n}.json").write_text(
                json.dumps({"name": "big", "num_magnitude_bins": 10, "sub_policies": [sub] * n})
            )
            r.run(
                f"policy of {n:,} sub-policies (train --policy)",
                ["train", "--data", str(good), "--policy", str(p / f"subs{n}.json"), *TINY, "--out", f"o-{n}"],
            )
        (p / "huge.json").write_bytes(b" " * (65 * 2**20) + b"{}")
        r.run("policy file of 65 MiB (policies import)", ["policies", "import", str(p / "huge.json"), "--name", "z"])

        # --- the store ------------------------------------------------------------------------
        store = root / "s"
        pol = {"name": "a", "num_magnitude_bins": 10, "sub_policies": [[["Rotate", 0.5, 3]]]}
        for i in range(3):
            pol["sub_policies"][0][0][1] = 0.1 * (i + 1)
            r.run(
                f"policies import (version {i + 1})",
                ["policies", "import", "-", "--name", "a", "--store", str(store)],
                stdin=json.dumps(pol),
            )
        with open(store / "a" / "v000003.parquet", "r+b") as f:
            f.truncate(100)
        r.run("policies list, with the latest version a@3 truncated", ["policies", "list", "--store", str(store)])
        with open(store / "a" / "v000002.parquet", "r+b") as f:
            f.truncate(100)
        r.run("policies list a, with a@2 and a@3 truncated", ["policies", "list", "a", "--store", str(store)])
        pol["sub_policies"][0][0][1] = 0.9
        r.run(
            "policies import under 'a' whose latest version (a@3) is corrupt",
            ["policies", "import", "-", "--name", "a", "--store", str(store)],
            stdin=json.dumps(pol),
        )
        os.remove(store / "a" / "v000004.parquet")
        pol["sub_policies"][0][0][1] = 0.8
        r.run(
            "policies import after the latest version file (a@4) was deleted",
            ["policies", "import", "-", "--name", "a", "--store", str(store)],
            stdin=json.dumps(pol),
        )
        (store / "a" / ".claims" / "v000009").mkdir(parents=True)
        (store / "a" / ".v000009.parquet.tmp-dead").write_bytes(b"x")
        old = time.time() - 7200
        for leftover in (store / "a" / ".claims" / "v000009", store / "a" / ".v000009.parquet.tmp-dead"):
            os.utime(leftover, (old, old))
        r.run(
            "policies check (2 corrupt versions, 2 leftovers of a killed save 2 h old)",
            ["policies", "check", "--store", str(store)],
        )
        r.run("policies list --store that does not exist", ["policies", "list", "--store", str(root / "nostore")])
        fresh = {k: v for k, v in r.env.items() if k != "AUTOAUG_STORE"}
        fresh["HOME"] = str(root / "fresh-home")
        r.run("policies list on a fresh machine (default store, nothing saved yet)", ["policies", "list"], env=fresh)
        r.run("policies list --json on a fresh machine", ["policies", "list", "--json"], env=fresh)

        # --- duplicated keys, one-class data, --set of the trainer on search ----------------------
        dup = (
            '{"name": "dup", "num_magnitude_bins": 10, "sub_policies": [[{"op": "Rotate", "op": "Invert", '
            '"probability": 0.5, "magnitude_bin": 3}]]}'
        )
        (p / "dup.json").write_text(dup)
        r.run(
            'policy JSON with "op" twice (policies import)', ["policies", "import", str(p / "dup.json"), "--name", "d"]
        )
        r.run(
            'policy JSON with "op" twice (train --policy)',
            ["train", "--data", str(good), "--policy", str(p / "dup.json"), *TINY, "--out", "o13"],
        )
        r.run(
            "Parquet whose labels are all one class (train)",
            ["train", "--data", str(_parquet(d / "oneclass.parquet", images[:300], [3] * 300)), *TINY, "--out", "o14"],
        )
        r.run(
            "policies import --metadata with a key twice",
            ["policies", "import", "-", "--name", "m", "--metadata", '{"a": 1, "a": 2}'],
            stdin=json.dumps(pol),
        )
        if not args.skip_slow:
            r.run(
                "search --set epochs=1 (a trainer key without train.)",
                [
                    "search",
                    "--data",
                    str(good),
                    "--preset",
                    "smoke",
                    "--num-trials",
                    "1",
                    "--set",
                    "epochs=1",
                    "--set",
                    "train.batch_size=16",
                    "--set",
                    "train.train_size=64",
                    "--set",
                    "train.val_size=32",
                    "--name",
                    "trainer-key",
                ],
            )
        (root / "dup.yaml").write_text("preset: smoke\ntrain:\n  epochs: 2\n  epochs: 5\n")
        r.run(
            "--config YAML with a key twice (search)",
            ["search", "--data", str(good), "--config", str(root / "dup.yaml")],
        )
        r.run(
            "policies show a@1 --store that does not exist",
            ["policies", "show", "a@1", "--store", str(root / "nostore")],
        )

        # --- a full filesystem met mid-run (a real tmpfs that fills up) -------------------------
        (root / "pol.json").write_text(json.dumps(pol))
        r.full_disk(
            [
                "policies import into a store whose filesystem is full (64 KiB tmpfs)",
                "policies import again once space is freed",
            ],
            f"""
mount -t tmpfs -o size=64k tmpfs "$D"
$AUTOAUG policies import {root / "pol.json"} --name x --store "$D/s" >/dev/null 2>&1
dd if=/dev/zero of="$D/filler" bs=4k 2>/dev/null
$AUTOAUG policies import {root / "pol.json"} --name y --store "$D/s" >$LOG/1.out 2>$LOG/1.err; echo $? >$LOG/1.rc
rm "$D/filler"
$AUTOAUG policies import {root / "pol.json"} --name y --store "$D/s" >$LOG/2.out 2>$LOG/2.err; echo $? >$LOG/2.rc
""",
        )
        if not args.skip_slow:
            tiny = " ".join(
                [
                    "--data",
                    str(cifar / "train.parquet"),
                    "--name",
                    "full",
                    "--preset",
                    "smoke",
                    "--num-trials",
                    "4",
                    "--set",
                    "train.epochs=2",
                    "--set",
                    "train.train_size=256",
                    "--set",
                    "train.val_size=128",
                ]
            )
            r.full_disk(
                [
                    "search whose run directory's filesystem fills up once the first trial reported (8 MiB tmpfs)",
                    "search --resume of it once space is freed",
                ],
                f"""
mount -t tmpfs -o size=8m tmpfs "$D"
$AUTOAUG search {tiny} --storage "$D/runs" --store "$D/store" >$LOG/1.out 2>$LOG/1.err &
pid=$!
while ! ls "$D"/runs/full/trial_*/result.json >/dev/null 2>&1 && kill -0 $pid 2>/dev/null; do sleep 0.2; done
dd if=/dev/zero of="$D/filler" bs=64k 2>/dev/null
wait $pid; echo $? >$LOG/1.rc
rm "$D/filler"
$AUTOAUG search --resume full --storage "$D/runs" >$LOG/2.out 2>$LOG/2.err; echo $? >$LOG/2.rc
""",
            )
    finally:
        undo_ro()
    table = r.table()
    print()
    print(table)
    if args.out:
        Path(args.out).write_text(
            "# Hostile inputs: what the user sees\n\nProduced by `python benchmarks/hostile_inputs.py --data "
            "<cifar10-jpeg> --out docs/hostile-inputs.md` (each row is one real `autoaug` process; `$TMP` is "
            "the script's temporary folder).\n\n" + table + "\n"
        )
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
