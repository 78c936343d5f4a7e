"""The preflight of ``train``, ``search`` and ``compare`` (autoaug.launch.preflight): paths made
absolute before they reach the workers, data opened and every image decoded, store / run storage /
output proven writable, all before Ray starts and before anything is created."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from autoaug.core.errors import DataError, UserInputError
from autoaug.launch import preflight
from autoaug.launch.cli import main

TINY_TRAIN = ["--set", "epochs=1", "--set", "train_size=64", "--set", "val_size=32", "--set", "batch_size=32"]
TINY_SEARCH = [
    "--set",
    "train.epochs=1",
    "--set",
    "train.train_size=64",
    "--set",
    "train.val_size=32",
    "--set",
    "train.batch_size=32",
]


def _subset(cifar_train: Path, path: Path, n: int, *, corrupt_row: int | None = None) -> Path:
    """``n`` rows spread evenly over the real CIFAR-10 training Parquet (sorted by class: every class
    is there; class names kept), optionally with one JPEG cut in half."""
    table = pq.read_table(cifar_train)
    table = table.take(list(range(0, len(table), len(table) // n))[:n])
    if corrupt_row is not None:
        images = table.column("image").to_pylist()
        images[corrupt_row] = images[corrupt_row][: len(images[corrupt_row]) // 2]
        table = table.set_column(table.schema.get_field_index("image"), "image", pa.array(images, pa.binary()))
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)
    return path


def _error_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err  # one line, never a traceback
    return err


@pytest.fixture
def read_only_dir(tmp_path):
    """A folder nobody can create files in: a read-only tmpfs when running as root (root ignores
    permission bits), else a folder with mode 0555."""
    path = tmp_path / "ro"
    path.mkdir()
    if os.geteuid() != 0:
        path.chmod(0o555)
        yield path
        path.chmod(0o755)
        return
    mounted = (
        subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(path)], capture_output=True).returncode
        == 0
    )
    if not mounted:  # a root without CAP_SYS_ADMIN (a container): /sys refuses new files to anyone
        yield Path("/sys/fs")
        return
    try:
        yield path
    finally:
        subprocess.run(["umount", str(path)], check=True)


# ----------------------------------------------------------------------------------------------
# Paths


def test_paths_become_absolute_and_uris_stay(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert preflight.absolute_source("mine/train.parquet") == str(tmp_path / "mine" / "train.parquet")
    assert preflight.absolute_source("file://mine") == str(tmp_path / "mine")
    assert preflight.absolute_source("cifar10:data") == f"cifar10:{tmp_path / 'data'}"
    assert preflight.absolute_source("cifar10") == "cifar10"
    assert preflight.absolute_source("s3://bucket/train.parquet?endpoint_override=x") == (
        "s3://bucket/train.parquet?endpoint_override=x"
    )
    assert preflight.absolute_location("runs", what="--storage") == str(tmp_path / "runs")


# ----------------------------------------------------------------------------------------------
# Writable locations


def test_a_path_under_a_file_is_refused_and_nothing_is_left(tmp_path):
    (tmp_path / "afile").write_text("x")
    with pytest.raises(UserInputError, match=r"^--store .*afile is a file, not a folder$"):
        preflight.check_writable(tmp_path / "afile", what="--store")
    with pytest.raises(UserInputError, match=r"^--out .*afile/sub/dir cannot be created: .*afile is a file"):
        preflight.check_writable(tmp_path / "afile" / "sub" / "dir", what="--out")
    preflight.check_writable(tmp_path / "new" / "deeper", what="--out")  # will be created: fine
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]  # probes removed, nothing created


def test_a_read_only_folder_is_refused(read_only_dir):
    with pytest.raises(
        UserInputError, match=r"^--storage .* is not writable: (Read-only file system|Permission denied)"
    ):
        preflight.check_writable(read_only_dir, what="--storage")
    with pytest.raises(UserInputError, match=r"^--store .*/store cannot be created: .* is not writable"):
        preflight.check_writable(read_only_dir / "store", what="--store")


# ----------------------------------------------------------------------------------------------
# Data


def test_every_image_is_decoded_even_outside_the_split(tmp_path, cifar_train):
    from autoaug.proxy_models.train import TrainConfig

    data = _subset(cifar_train, tmp_path / "d.parquet", 300, corrupt_row=299)
    config = TrainConfig.from_preset("smoke", data=str(data), train_size=50, val_size=20)
    with pytest.raises(DataError, match=r"d.parquet row 299 .*: truncated JPEG"):
        preflight.check_data(config)


def test_the_preflight_sizes_train_and_search_to_their_data(tmp_path, cifar_train):
    """``train`` and ``search`` get their config resolved against the data: the per-class split as
    a total, the automatic image size as the data's (what the trainer, and the search's trials
    and records, then see)."""
    from autoaug.proxy_models.train import TrainConfig
    from autoaug.search.config import SearchConfig

    data = _subset(cifar_train, tmp_path / "d.parquet", 300)  # 30 images of each of the 10 classes
    requested = TrainConfig.from_preset("eval-cpu", data=str(data), train_per_class=20, min_train_size=50)
    assert (requested.train_size, requested.image_size) == (None, None)
    config = preflight.for_train(requested, tmp_path / "out")
    # 20 per class of 10 classes (each has 30): 200, above the floor of 50
    assert (config.train_size, config.val_size, config.image_size, config.train_per_class) == (200, 0, 32, None)
    search = SearchConfig.from_dict(
        {
            "preset": "cpu",
            "name": "s",
            "data": str(data),
            "storage": str(tmp_path / "runs"),
            "store": str(tmp_path / "store"),
            "train": {"preset": "proxy-cpu", "val_size": 100},
        }
    )
    assert search.train.train_per_class == 100
    checked = preflight.for_search(search).train
    assert (checked.train_size, checked.val_size, checked.image_size) == (200, 100, 32)  # 300 - 100 not held out
    assert not (tmp_path / "out").exists()


def test_the_train_command_decodes_its_split_once(tmp_path, cifar_train, monkeypatch):
    """The preflight decodes the rows the trainer uses the way its loader does: the loader then
    finds them in the decode cache instead of decoding them again."""
    import autoaug.proxy_models.data as data_module
    from autoaug.proxy_models.pipeline import DaliLoader
    from autoaug.proxy_models.train import TrainConfig

    data = _subset(cifar_train, tmp_path / "d.parquet", 200)
    config = preflight.for_train(
        TrainConfig.from_preset("smoke", data=str(data), train_size=64, val_size=32), tmp_path / "out"
    )
    calls = []
    real = data_module.decode_image
    monkeypatch.setattr(data_module, "decode_image", lambda *a, **k: calls.append(1) or real(*a, **k))
    ds = data_module.open_dataset(config.data)
    from autoaug.proxy_models.splits import reduced_split

    split = reduced_split(ds.labels, train_size=64, val_size=32, seed=config.split_seed)
    loader = DaliLoader(ds, split.train, batch_size=32, image_size=config.image_size, decode="auto")
    assert loader.decode == "memory" and len(calls) <= 1  # at most the loader's one-image size probe


# ----------------------------------------------------------------------------------------------
# The commands: one line, exit 2, nothing created, before Ray starts


def test_train_with_missing_data_creates_no_output_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["train", "--data", "/nope", "--out", "x"]) == 2
    assert "dataset not found: /nope" in _error_line(capsys)
    assert not (tmp_path / "x").exists()


def test_train_with_a_corrupt_image_creates_no_output_folder(tmp_path, cifar_train, monkeypatch, capsys):
    data = _subset(cifar_train, tmp_path / "d.parquet", 120, corrupt_row=7)
    assert main(["train", "--data", str(data), "--out", str(tmp_path / "x"), "--preset", "smoke", *TINY_TRAIN]) == 2
    assert "d.parquet row 7" in _error_line(capsys)
    assert not (tmp_path / "x").exists()


def test_train_output_under_a_file_or_read_only(tmp_path, cifar_train, read_only_dir, capsys):
    data = _subset(cifar_train, tmp_path / "d.parquet", 120)
    (tmp_path / "afile").write_text("x")
    argv = ["train", "--data", str(data), "--preset", "smoke", *TINY_TRAIN]
    assert main([*argv, "--out", str(tmp_path / "afile" / "run")]) == 2
    assert "afile is a file, not a folder" in _error_line(capsys)
    assert main([*argv, "--out", str(read_only_dir / "run")]) == 2
    assert "is not writable" in _error_line(capsys)


def _search(tmp_path, *extra):
    return ["search", "--preset", "smoke", "--name", "s", "--num-trials", "1", *TINY_SEARCH, *extra]


def test_search_refuses_unwritable_store_and_storage_before_ray(tmp_path, cifar_train, read_only_dir, capsys):
    import ray

    data = _subset(cifar_train, tmp_path / "d.parquet", 120)
    (tmp_path / "afile").write_text("x")
    cases = [
        (["--storage", str(read_only_dir), "--store", str(tmp_path / "store")], "--storage", "is not writable"),
        (["--storage", str(tmp_path / "runs"), "--store", str(read_only_dir / "store")], "--store", "is not writable"),
        (["--storage", str(tmp_path / "afile"), "--store", str(tmp_path / "store")], "--storage", "is a file"),
        (["--storage", str(tmp_path / "runs"), "--store", str(tmp_path / "afile")], "--store", "is a file"),
    ]
    for extra, flag, what in cases:
        assert main(_search(tmp_path, "--data", str(data), *extra)) == 2
        line = _error_line(capsys)
        assert line.startswith(f"autoaug: error: {flag} ") and what in line, line
    assert not ray.is_initialized()
    assert not (tmp_path / "runs").exists() and not (tmp_path / "store").exists()


def test_search_with_a_corrupt_image_fails_before_ray(tmp_path, cifar_train, capsys):
    import ray

    data = _subset(cifar_train, tmp_path / "d.parquet", 120, corrupt_row=100)
    assert (
        main(
            _search(
                tmp_path, "--data", str(data), "--storage", str(tmp_path / "runs"), "--store", str(tmp_path / "store")
            )
        )
        == 2
    )
    assert "d.parquet row 100" in _error_line(capsys)
    assert not ray.is_initialized() and not (tmp_path / "runs").exists()


def test_compare_refuses_before_ray(tmp_path, cifar_train, read_only_dir, capsys):
    import ray

    data = _subset(cifar_train, tmp_path / "train.parquet", 120, corrupt_row=3)
    test = _subset(cifar_train, tmp_path / "test.parquet", 60)
    argv = [
        "compare",
        "--policy",
        "standard",
        "--baselines",
        "none",
        "--seeds",
        "1",
        "--preset",
        "smoke",
        "--data",
        str(data),
        "--test-data",
        str(test),
        "--train-size",
        "64",
        "--set",
        "train.val_size=32",
    ]
    assert main([*argv, "--out", str(tmp_path / "cmp")]) == 2
    assert "train.parquet row 3" in _error_line(capsys)
    _subset(cifar_train, data, 120)
    assert main([*argv, "--out", str(read_only_dir / "cmp")]) == 2
    assert "--out" in _error_line(capsys)
    assert not ray.is_initialized() and not (tmp_path / "cmp").exists()


# ----------------------------------------------------------------------------------------------
# Memory before work: one line, exit 2, before anything is decoded or Ray starts


def test_an_image_size_beyond_memory_is_one_line_under_ulimit_v(tmp_path, cifar_train):
    """``--image-size 100000`` on 200 images would grow until the kernel killed it. Under
    ``ulimit -v 8000000`` it is one line about memory, exit 2, no traceback, no output."""
    import sys

    data = _subset(cifar_train, tmp_path / "d.parquet", 200)
    cmd = [
        sys.executable,
        "-m",
        "autoaug.launch.cli",
        "train",
        "--data",
        str(data),
        "--preset",
        "smoke",
        *TINY_TRAIN,
        "--image-size",
        "100000",
        "--out",
        str(tmp_path / "x"),
    ]
    done = subprocess.run(
        ["bash", "-c", 'ulimit -v 8000000; exec "$@"', "bash", *cmd], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert lines[0].startswith("autoaug: error: --image-size 100000 needs about "), lines[0]
    assert " TB per run (batch size 32, resnet-8), but " in lines[0]
    assert "use a smaller --image-size or batch size" in lines[0]
    assert not (tmp_path / "x").exists()


@pytest.fixture
def small_machine(monkeypatch):
    """A machine with 2 GB available and no ``ulimit -v``."""
    from autoaug.proxy_models import memory

    monkeypatch.setattr(memory, "_meminfo_available", lambda: 2 * 10**9)
    monkeypatch.setattr(memory, "_address_space_left", lambda: None)


def test_search_and_compare_count_their_runs_at_once(tmp_path, cifar_train, small_machine, monkeypatch, capsys):
    """A search's trials and a comparison's runs are refused before Ray starts when all those Ray
    runs at once cannot fit; the line names the image size, the estimate and what is available."""
    import ray

    data = _subset(cifar_train, tmp_path / "train.parquet", 120)
    test = _subset(cifar_train, tmp_path / "test.parquet", 60)
    at_once = preflight.runs_at_once(1.0, 2)
    assert (
        main(
            _search(
                tmp_path,
                "--data",
                str(data),
                "--image-size",
                "512",
                "--storage",
                str(tmp_path / "runs"),
                "--store",
                str(tmp_path / "store"),
            )
        )
        == 2
    )
    line = _error_line(capsys)
    assert line.startswith("autoaug: error: --image-size 512 needs about ") and " per trial (batch size 32" in line
    assert f"{at_once} trial{'s' if at_once > 1 else ''} at once and the data decoded here" in line
    assert line.endswith("but 2.0 GB is available; use a smaller --image-size or batch size")
    assert (
        main(
            [
                "compare",
                "--policy",
                "standard",
                "--baselines",
                "none",
                "--seeds",
                "2",
                "--preset",
                "smoke",
                "--data",
                str(data),
                "--test-data",
                str(test),
                "--train-size",
                "64",
                "--set",
                "train.val_size=32",
                "--image-size",
                "512",
                "--out",
                str(tmp_path / "cmp"),
            ]
        )
        == 2
    )
    line = _error_line(capsys)
    assert line.startswith("autoaug: error: --image-size 512 needs about ") and " per run (batch size 32" in line
    assert "but 2.0 GB is available" in line
    # In packs: the packs Ray starts at once, each holding its share of the 4 runs (plan_packs: no
    # fewer packs than run at once: 2 on 2 CPUs).
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    compare = ["compare", "--policy", "standard", "--baselines", "none", "--seeds", "2", "--preset", "smoke"]
    sized = ["--train-size", "64", "--set", "train.val_size=32", "--image-size", "512"]
    where = ["--data", str(data), "--test-data", str(test), "--out", str(tmp_path / "cmp")]
    assert main([*compare, *sized, *where, "--pack", "4"]) == 2
    line = _error_line(capsys)
    assert line.startswith("autoaug: error: 2 packs of 2 runs each need about ")
    assert " a pack: --image-size 512, batch size 32, resnet-8; the data decoded here), but " in line
    assert line.endswith("but 2.0 GB is available; use a smaller --pack")
    assert not ray.is_initialized() and not (tmp_path / "runs").exists() and not (tmp_path / "cmp").exists()


def test_a_population_in_packs_counts_every_member_s_process_before_ray_starts(
    tmp_path, cifar_train, monkeypatch, capsys
):
    """PBA in packs runs every member's trial at once, each a process waiting on a pack server that
    holds the members: on a machine where its trials one per process fit (5 GB), a population of
    16 in packs of 2 does not, and says so in one line before Ray starts or anything is created."""
    import ray

    from autoaug.proxy_models import memory
    from autoaug.search.config import SearchConfig

    monkeypatch.setattr(memory, "_meminfo_available", lambda: 5 * 10**9)
    monkeypatch.setattr(memory, "_address_space_left", lambda: None)
    data = _subset(cifar_train, tmp_path / "train.parquet", 120)
    where = ["--data", str(data), "--storage", str(tmp_path / "runs"), "--store", str(tmp_path / "store")]
    pba = [
        "search",
        "--method",
        "pba",
        "--preset",
        "smoke",
        "--name",
        "p",
        *TINY_SEARCH,
        "--set",
        "train.epochs=2",
        *where,
    ]
    config = SearchConfig.from_dict({"preset": "smoke", "method": "pba", "pack": 2, "pba": {"population": 16}})
    assert preflight.search_processes(config)["waiting"] == 16
    assert preflight.search_processes(config.replace(pack=1)) == {"runs": preflight.runs_at_once(1.0, 2)}
    assert main([*pba, "--pack", "2", "--set", "pba.population=16"]) == 2
    line = _error_line(capsys)
    assert line.startswith("autoaug: error: 1 pack of 16 trials and 16 trials' processes waiting on it need ")
    assert " a pack: --image-size 32, batch size 32, resnet-8; 450 MB a waiting process;" in line
    assert line.endswith(
        "but 5.0 GB is available; use a smaller population (every member's trial runs at once in packs), or --pack 1"
    )
    assert not ray.is_initialized() and not (tmp_path / "runs").exists() and not (tmp_path / "store").exists()


def test_a_search_in_packs_on_a_gpu_counts_the_servers_its_gpus_hold(monkeypatch):
    """The `cpu` preset's proxy on one GPU of a 16-core machine, 16 trials' share a GPU, in packs
    of 32: one server (a pack of 16 or more takes a whole GPU) and its 32 trials' processes -- not
    a server per CPU, as without the GPU counted."""
    import torch

    from autoaug.search.config import SearchConfig

    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    config = SearchConfig.from_dict(
        {
            "preset": "cpu",
            "num_trials": 300,
            "pack": 32,
            "concurrency": None,
            "gpus_per_trial": 0.0625,
            "train": {"device": "cuda"},
        }
    )
    assert preflight.search_processes(config) == {
        "runs": 1,
        "members": 32,
        "waiting": 32,
        "fix": "fewer trials at once (--concurrency) or a smaller --pack",
    }
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert preflight.search_processes(config)["runs"] == 2


def test_runs_at_once_are_the_cpus_over_a_run_s_share():
    cpus = os.cpu_count() or 1
    assert preflight.runs_at_once(1.0) == cpus
    assert preflight.runs_at_once(1.0, 1) == 1
    assert preflight.runs_at_once(cpus * 4.0) == 1  # a run larger than the machine: still one
    assert preflight.runs_at_once(1.0, 8, address="ray://head:10001") == 0  # the cluster's memory


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_quiet_search_with_a_relative_data_path_runs_its_trials_and_prints_only_the_result(tmp_path, cifar_train):
    """``autoaug search -q --data mine/train.parquet --storage runs --store store`` (relative, as in
    the README), run from a shell in that folder: the trials run in another working directory, so
    the paths must reach them absolute; and ``-q`` prints only the result (no Ray banner,
    token-auth warning, Tune box or TensorBoard hint on stderr, no progress, no next steps).
    (One search for both: a search process costs the suite about 20 CPU-s.)"""
    import sys

    from autoaug.policies.store import PolicyStore

    _subset(cifar_train, tmp_path / "mine" / "train.parquet", 300)
    argv = [*_search(tmp_path, "--data", "mine/train.parquet", "--storage", "runs", "--store", "store"), "-q"]
    proc = subprocess.run(
        [sys.executable, "-m", "autoaug.launch.cli", *argv], cwd=tmp_path, capture_output=True, text=True, timeout=550
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""  # no Ray banner, token-auth warning, Tune box or TensorBoard hint
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    assert lines[0].startswith("Policy 's'") and "stored as s@1" in proc.stdout
    assert "trial " not in lines[0] and not any(ln.startswith("[1/1]") for ln in lines)
    assert "next steps" not in proc.stdout  # a person's terminal gets them, -q only the result
    stored = PolicyStore(str(tmp_path / "store")).get("s@1")
    assert stored.provenance["trials"][0]["status"] in ("completed", "early_stopped")
