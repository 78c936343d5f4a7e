"""Shared fixtures.

The real CIFAR-10 Parquet is located through ``AUTOAUG_CIFAR10`` (a folder holding
``train.parquet``/``test.parquet``), falling back to ``../shared/data/cifar10-jpeg`` next to the
checkout; GTSRB (32x32 PNGs in Parquet, with ``source_path``) likewise through ``AUTOAUG_GTSRB``,
falling back to ``../shared/data/gtsrb-32-png``. When they are absent, tests that need them are
skipped, unless ``AUTOAUG_REQUIRE_DATA=1`` (set by ``.ci/run``), in which case they fail: CI must
never pass by skipping real-data tests.
"""

from __future__ import annotations

import io
import os
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parent.parent
_DEFAULT_DATA = REPO.parent / "shared" / "data" / "cifar10-jpeg"
_DEFAULT_GTSRB = REPO.parent / "shared" / "data" / "gtsrb-32-png"


def worker_threads() -> int:
    """The threads a test process may use: its share of this machine's cores.

    Under ``pytest -n N`` (``make test``: one process per core) N processes run tests at once; a
    process that trained with torch's default, one thread per core, would oversubscribe the cores,
    and OpenMP threads spin while they wait for a descheduled peer (a smoke training took 5x its
    CPU beside one other busy process). Outside xdist: every core."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cores // max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1)))


def pytest_configure(config: pytest.Config) -> None:
    """An xdist test process (and the commands it starts, through ``OMP_NUM_THREADS``) uses its share
    of the cores (:func:`worker_threads`), unless ``OMP_NUM_THREADS`` is set already; so does
    ``torch.compile``'s code generation (``TORCHINDUCTOR_COMPILE_THREADS``: with one, it compiles in
    the process instead of starting a pool of compiler processes, each importing torch)."""
    if os.environ.get("PYTEST_XDIST_WORKER") and "OMP_NUM_THREADS" not in os.environ:
        threads = worker_threads()
        os.environ["OMP_NUM_THREADS"] = str(threads)
        os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", str(threads))
        if "torch" in sys.modules:  # read OMP_NUM_THREADS when imported: tell it now
            sys.modules["torch"].set_num_threads(threads)


def _torch_flag() -> tuple[bool, bool]:
    """torch's deterministic-algorithms flag and its warn-only mode (both off where torch is not
    imported yet: its defaults)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return (False, False)
    return torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()


@pytest.fixture(autouse=True)
def _torch_flag_put_back(request: pytest.FixtureRequest):
    """A test that leaves torch's deterministic-algorithms flag changed in its process is named in a
    warning, and the flag is put back for the tests after it (a run sets it for itself and puts it
    back: what a test leaves changed would change the tests that follow it in the process)."""
    before = _torch_flag()
    yield
    after = _torch_flag()
    if after != before:
        from autoaug.proxy_models.train import _use_deterministic_algorithms

        _use_deterministic_algorithms(before[0], warn_only=before[1], compiling=False)
        warnings.warn(
            f"{request.node.nodeid} left torch's deterministic-algorithms flag at {after} (it was {before}): put back",
            pytest.PytestWarning,
            stacklevel=1,
        )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Run the test files that cost the most first (longest first: with ``make test``'s
    ``--dist loadfile --no-loadscope-reorder`` the two processes then start on the integration
    searches and end on the many quick files together, instead of one process running the last
    search alone while the other idles). A file's cost: its ``slow`` tests' timeouts (300 s when a
    slow test has none) plus 1 per other test. The files that share an embedded Ray
    (:func:`shared_ray`) come before the others, so that a process runs them one after another on
    one Ray. Tests keep their order within a file."""
    cost: dict[Path, float] = {}
    for item in items:
        weight = 1.0
        if item.get_closest_marker("slow") is not None:
            timeout = item.get_closest_marker("timeout")
            weight = float(timeout.args[0]) if timeout is not None and timeout.args else 300.0
        cost[item.path] = cost.get(item.path, 0.0) + weight
    first_seen = {path: rank for rank, path in enumerate(dict.fromkeys(item.path for item in items))}
    _SHARED_RAY_FILES.update(item.path for item in items if _uses_shared_ray(item))
    items.sort(key=lambda item: (item.path not in _SHARED_RAY_FILES, -cost[item.path], first_seen[item.path]))


def cifar10_dir() -> Path | None:
    path = Path(os.environ.get("AUTOAUG_CIFAR10", _DEFAULT_DATA))
    return path if (path / "train.parquet").is_file() else None


def gtsrb_dir() -> Path | None:
    path = Path(os.environ.get("AUTOAUG_GTSRB", _DEFAULT_GTSRB))
    return path if (path / "train.parquet").is_file() else None


def _missing(msg: str) -> None:
    """Skip a test whose real data are absent (fail instead under ``AUTOAUG_REQUIRE_DATA=1``)."""
    if os.environ.get("AUTOAUG_REQUIRE_DATA") == "1":
        pytest.fail(msg)
    pytest.skip(msg)


@pytest.fixture(scope="session")
def cifar_dir() -> Path:
    path = cifar10_dir()
    if path is None:
        _missing(
            "real CIFAR-10 Parquet not found: set AUTOAUG_CIFAR10 to a folder holding "
            f"train.parquet and test.parquet (looked in {os.environ.get('AUTOAUG_CIFAR10', _DEFAULT_DATA)})"
        )
    return path


@pytest.fixture(scope="session")
def gtsrb_train() -> Path:
    """GTSRB's training split (39,209 frames of 1,307 tracks; ``source_path`` names the track)."""
    path = gtsrb_dir()
    if path is None:
        _missing(
            "real GTSRB Parquet not found: set AUTOAUG_GTSRB to a folder holding train.parquet "
            f"(looked in {os.environ.get('AUTOAUG_GTSRB', _DEFAULT_GTSRB)})"
        )
    return path / "train.parquet"


@pytest.fixture(scope="session")
def gtsrb_counts() -> list[int]:
    """GTSRB's training images per class (the README of shared/data/gtsrb-32-png): 43 classes,
    210-2,250 (what sizing a regime to the data needs, without the data)."""
    counts = (
        "210 2220 2250 1410 1980 1860 420 1440 1410 1470 2010 1320 2100 2160 780 630 420 1110 1200 210 360 "
        "330 390 510 270 1500 600 240 540 270 450 780 240 689 420 1200 390 210 2070 300 360 240 240"
    )
    return [int(n) for n in counts.split()]


@pytest.fixture(scope="session")
def cifar_train(cifar_dir: Path) -> Path:
    return cifar_dir / "train.parquet"


@pytest.fixture(scope="session")
def every_nth_row_of():
    """:func:`every_nth_row`, for test modules (conftest is not importable under importlib mode)."""
    return every_nth_row


def every_nth_row(source: Path, n: int, path: Path) -> Path:
    """Every ``n``-th row of the Parquet file ``source`` (a dataset sorted by class keeps every
    class), written to ``path`` with the same schema and metadata; returns ``path``."""
    import pyarrow.parquet as pq

    table = pq.read_table(source)
    pq.write_table(table.take(list(range(0, table.num_rows, n))).replace_schema_metadata(table.schema.metadata), path)
    return path


@pytest.fixture(scope="session")
def cifar_small(cifar_train: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every 32nd image of CIFAR-10's training Parquet (1,563 images, all 10 classes, the same
    schema and metadata; the smoke preset's split takes 1,280): for searches whose behaviour does
    not need 50,000 images, which every search's preflight would decode (about 16 s on one core,
    twice for a killed-and-resumed one; 0.9 s here)."""
    return every_nth_row(cifar_train, 32, tmp_path_factory.mktemp("cifar-small") / "train.parquet")


@pytest.fixture(scope="session")
def cifar_test(cifar_dir: Path) -> Path:
    return cifar_dir / "test.parquet"


@pytest.fixture(scope="session")
def small_test_split(cifar_test: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """1,000 real CIFAR-10 test images (every 10th row, all classes), to keep a test pass short."""
    return every_nth_row(cifar_test, 10, tmp_path_factory.mktemp("cifar-test") / "test.parquet")


@pytest.fixture(scope="session")
def cifar_sample(cifar_train: Path) -> tuple[np.ndarray, np.ndarray]:
    """256 real CIFAR-10 training images (uint8 NHWC RGB) with their labels, all classes present.

    Decoded with PIL independently of the project's loaders, so tests of those loaders can
    compare against it.
    """
    import pyarrow.parquet as pq
    from PIL import Image

    table = pq.read_table(cifar_train, columns=["image", "label"])
    labels = table.column("label").to_numpy()
    rng = np.random.default_rng(0)
    idx = np.sort(rng.choice(len(labels), size=256, replace=False))
    images = table.column("image").take(idx).to_pylist()
    decoded = np.stack([np.asarray(Image.open(io.BytesIO(b)).convert("RGB")) for b in images])
    return decoded, labels[idx].astype(np.int64)


# Mean absolute difference (grey levels, per image, averaged over the images) allowed between
# the DALI and torchvision outputs of one op at the highest bin, with the same sign.
OP_TOLERANCE = {
    # geometric ops: same matrices and nearest interpolation -> identical in practice
    "ShearX": 0.5,
    "ShearY": 0.5,
    "TranslateX": 0.5,
    "TranslateY": 0.5,
    "Rotate": 0.5,
    "Identity": 0.0,
    "Invert": 0.0,
    "Solarize": 0.0,
    "Posterize": 0.0,
    # rounding (DALI rounds, torchvision truncates) and greyscale weights
    "AutoContrast": 1.0,
    "Contrast": 1.5,
    "Color": 1.5,
    "Brightness": 1.0,
    # DALI filters the 1-px border (reflect-101), PIL/torchvision keep it
    "Sharpness": 2.0,
    # DALI's fn.equalize follows OpenCV (inclusive CDF), torchvision follows PIL (exclusive
    # CDF): on 32x32 images the mapped levels differ by ~10 on average (documented)
    "Equalize": 16.0,
}


@pytest.fixture(scope="session")
def op_tolerance() -> dict[str, float]:
    """:data:`OP_TOLERANCE` (the DALI-vs-torchvision tolerance of each op, CPU and GPU tests)."""
    return OP_TOLERANCE


def mad(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Mean absolute difference per image (grey levels) of two uint8 NHWC batches."""
    return np.abs(a.astype(np.int32) - b.astype(np.int32)).mean(axis=(1, 2, 3))


def torch_reference(images: np.ndarray, name: str, magnitude_bin: int, negated) -> np.ndarray:
    """``images`` (uint8 NHWC) through torchvision's op ``name`` at ``magnitude_bin`` (of 10), each
    image's sign as ``negated`` says: what the DALI outputs are compared with."""
    import torch

    from autoaug.policies.torch_apply import apply_op

    chw = torch.from_numpy(images).permute(0, 3, 1, 2)
    out = [apply_op(chw[i], name, magnitude_bin, 10, negate=bool(negated[i])) for i in range(len(chw))]
    return torch.stack(out).permute(0, 2, 3, 1).numpy()


def cutout_area(out: np.ndarray, images: np.ndarray, side: int) -> float:
    """Mean pixels per image that ``out`` changed from ``images``, checking that each change is one
    grey (128) square of at most ``side`` px: what a Cutout must do, on any backend or device."""
    changed_total = 0
    for img, src in zip(out, images):
        changed = np.any(img != src, axis=-1)
        assert np.all(img[changed] == 128), "cutout fills with grey 128"
        ys, xs = np.nonzero(changed)
        if len(ys):
            assert ys.max() - ys.min() < side and xs.max() - xs.min() < side
        changed_total += changed.sum()
    return changed_total / len(out)


def blend(a: np.ndarray, b: np.ndarray, w: float) -> np.ndarray:
    """SamplePairing's blend of ``a`` with ``b`` at weight ``w``, rounded as uint8."""
    return np.clip(np.round(a.astype(np.float64) * (1 - w) + b.astype(np.float64) * w), 0, 255)


def pairing_partners(out: np.ndarray, images: np.ndarray, weight: float = 0.4) -> list[int]:
    """For each image of ``out``, the other image of the batch it is a SamplePairing blend with
    (within one grey level)."""
    partners = []
    for i, img in enumerate(out):
        errors = [np.abs(img - blend(images[i], images[j], weight)).max() for j in range(len(images))]
        j = int(np.argmin(errors))
        assert errors[j] <= 1.0 and j != i
        partners.append(j)
    return partners


@pytest.fixture(scope="session")
def op_checks():
    """:func:`mad`, :func:`torch_reference`, :func:`cutout_area`, :func:`blend` and
    :func:`pairing_partners`: what the CPU and GPU tests of the ops compare with (test modules
    cannot import a conftest by name)."""
    import types

    return types.SimpleNamespace(
        mad=mad,
        torch_reference=torch_reference,
        cutout_area=cutout_area,
        blend=blend,
        pairing_partners=pairing_partners,
    )


def run_dali(
    policy,
    images,
    *,
    seed=0,
    iterations=1,
    image_size=None,
    return_trace=False,
    interpolation="nearest",
    num_threads=2,
    device="cpu",
):
    """Run ``apply_policy`` on ``images`` (uint8 NHWC, one batch) ``iterations`` times, in a DALI
    pipeline on the CPU (``device_id=None``) or, with ``device="gpu"``, on CUDA device 0 (the
    images moved there before the policy step; the results copied back).

    Returns a list (one entry per iteration) of uint8 NHWC arrays, or of ``(images, trace)``
    when ``return_trace``.
    """
    from nvidia.dali import fn, pipeline_def

    from autoaug.policies.dali_apply import apply_policy

    batch = [np.ascontiguousarray(x) for x in images]
    gpu = device == "gpu"

    @pipeline_def(
        batch_size=len(batch),
        num_threads=num_threads,
        device_id=0 if gpu else None,
        seed=seed,
        enable_conditionals=True,
    )
    def pipe():
        x = fn.external_source(source=lambda: batch, batch=True, layout="HWC")
        if gpu:
            x = x.gpu()
        return apply_policy(policy, x, image_size=image_size, return_trace=return_trace, interpolation=interpolation)

    p = pipe()
    p.build()
    results = []
    for _ in range(iterations):
        outs = [o.as_cpu() if hasattr(o, "as_cpu") else o for o in p.run()]
        arrays = [np.stack([np.asarray(o[i]) for i in range(len(batch))]) for o in outs]
        results.append(tuple(arrays) if return_trace else arrays[0])
    return results


@pytest.fixture(scope="session")
def dali_run():
    """:func:`run_dali` as a fixture (test modules cannot import a conftest by name)."""
    return run_dali


@pytest.fixture(scope="session")
def images64(cifar_sample) -> np.ndarray:
    """64 real CIFAR-10 images (uint8 NHWC)."""
    return np.ascontiguousarray(cifar_sample[0][:64])


@pytest.fixture(scope="session")
def images256(cifar_sample) -> np.ndarray:
    return np.ascontiguousarray(cifar_sample[0])


def _write_images(path: Path, images: list, labels: list, classes: list) -> Path:
    """A Parquet file of the dataset shape (``image`` PNG bytes, ``label``, the class names in the
    schema's metadata) from PIL images; returns ``path``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    encoded = []
    for img in images:
        buf = io.BytesIO()
        img.save(buf, format="PNG")
        encoded.append(buf.getvalue())
    table = pa.table({"image": pa.array(encoded, pa.binary()), "label": pa.array(labels, pa.int64())})
    pq.write_table(table.replace_schema_metadata({"classes": ",".join(classes)}), path)
    return path


@pytest.fixture(scope="session")
def write_images():
    """``write_images(path, images, labels, classes)``: PIL images and their labels as a Parquet
    file of the dataset shape (PNG bytes, class names in the metadata). Returns ``path``."""
    return _write_images


@pytest.fixture(scope="session")
def write_tracks():
    """``write_tracks(path, classes=4, tracks=6, frames=5, extra=None)``: a small GTSRB-like Parquet
    file (8x8 PNGs): ``classes`` x ``tracks`` tracks of ``frames`` frames, rows sorted by class,
    with columns ``image``, ``label``, ``track`` (int), ``session`` (text), ``score`` (float) and
    ``source_path`` (``GTSRB/Final_Training/Images/<class>/<track>_<frame>.ppm``); ``extra``
    replaces or adds columns. Returns ``path``."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from PIL import Image

    def png(value: int) -> bytes:
        buf = io.BytesIO()
        Image.fromarray(np.full((8, 8, 3), value, dtype=np.uint8)).save(buf, format="PNG")
        return buf.getvalue()

    def write(path: Path, *, classes: int = 4, tracks: int = 6, frames: int = 5, extra: dict | None = None) -> Path:
        rows = [(c, t, f) for c in range(classes) for t in range(tracks) for f in range(frames)]
        columns = {
            "image": pa.array([png(10 * c + f) for c, _, f in rows], pa.binary()),
            "label": pa.array([c for c, _, _ in rows], pa.int16()),
            "track": pa.array([c * tracks + t for c, t, _ in rows], pa.int32()),
            "session": pa.array([f"s{c}-{t}" for c, t, _ in rows], pa.string()),
            "score": pa.array([0.5] * len(rows), pa.float32()),
            "source_path": pa.array([f"GTSRB/Final_Training/Images/{c:05d}/{t:05d}_{f:05d}.ppm" for c, t, f in rows]),
        }
        columns.update(extra or {})
        table = pa.table(columns).replace_schema_metadata({"classes": ",".join(f"c{i}" for i in range(classes))})
        pq.write_table(table, path)
        return path

    return write


# ----------------------------------------------------------------------------------------------
# A constant-colour image with one marker pixel: where the marker lands tells how a base
# augmentation (autoaug.policies.bases) shifted and mirrored the image


MARKER_COLOUR = (255, 0, 0)
_BACKGROUND = (90, 160, 200)
_MARKER_AT = (10, 5)  # row, column: at most 4 px of shift keeps it inside a 32 x 32 image


@pytest.fixture(scope="session")
def marker_image() -> np.ndarray:
    """A 32 x 32 uint8 HWC image of one colour with one red pixel at row 10, column 5."""
    img = np.empty((32, 32, 3), np.uint8)
    img[:] = _BACKGROUND
    img[_MARKER_AT] = MARKER_COLOUR
    return img


def _shifted(img: np.ndarray, dy: int, dx: int) -> np.ndarray:
    out = np.zeros_like(img)  # the crop's zero padding
    h, w = img.shape[:2]
    out[max(dy, 0) : h + min(dy, 0), max(dx, 0) : w + min(dx, 0)] = img[
        max(-dy, 0) : h - max(dy, 0), max(-dx, 0) : w - max(dx, 0)
    ]
    return out


def base_outcome(original: np.ndarray, out: np.ndarray) -> tuple[int, int, bool]:
    """``(dy, dx, mirrored)`` of ``out``, a draw of a base on the :func:`marker_image`: ``out`` must be
    exactly ``original`` shifted by (dy, dx) px with zero fill, then mirrored left-right or not."""
    found = np.argwhere((np.asarray(out) == MARKER_COLOUR).all(axis=-1))
    assert len(found) == 1, f"expected one marker pixel, found {len(found)}"
    row, col = (int(v) for v in found[0])
    w = original.shape[1]
    dy = row - _MARKER_AT[0]
    mirrored = col >= w // 2  # the marker sits in the left half; only a mirror moves it right
    dx = (w - 1 - col if mirrored else col) - _MARKER_AT[1]
    expected = _shifted(original, dy, dx)
    if mirrored:
        expected = expected[:, ::-1]
    assert np.array_equal(np.asarray(out), expected), f"not a zero-padded shift ({dy}, {dx}) of the image"
    return dy, dx, mirrored


@pytest.fixture(scope="session")
def outcome_of():
    """:func:`base_outcome` as a fixture (test modules cannot import a conftest by name)."""
    return base_outcome


# ----------------------------------------------------------------------------------------------
# An S3-compatible server (moto in server mode) on 127.0.0.1, for the object-storage tests


#: The moto server as a child process: binds a free port on 127.0.0.1 (so the socket listens before
#: anything is printed), writes that port on its stdout, then serves. The parent's blocking read of
#: that line is the event "the server accepts connections": no polling.
_MOTO_SERVER = """
import sys
from werkzeug.serving import make_server
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
server = make_server("127.0.0.1", 0, DomainDispatcherApplication(create_backend_app), threaded=True,
                     request_handler=MotoRequestHandler)
print(server.port, flush=True)
server.serve_forever()
"""


@pytest.fixture(scope="session")
def s3_server():
    """``http://127.0.0.1:PORT`` of a moto S3 server started for the session; stopped by its PID."""
    import signal
    import subprocess
    import sys
    import tempfile

    import moto.server  # noqa: F401  (moto[server] is a dev dependency: if it is missing, fail, never skip)

    # its request log (werkzeug, on stderr) into a file: a pipe nobody reads would fill and stall it
    errors = tempfile.TemporaryFile(mode="w+")
    proc = subprocess.Popen([sys.executable, "-c", _MOTO_SERVER], stdout=subprocess.PIPE, stderr=errors, text=True)
    try:
        line = proc.stdout.readline().strip()  # blocks until the server listens, or the child exits
        if not line.isdigit():
            proc.kill()
            errors.seek(0)
            raise RuntimeError(f"moto server did not start (exit {proc.wait()}): {errors.read()[-2000:]}")
        yield f"http://127.0.0.1:{line}"
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
        errors.close()


@pytest.fixture
def s3_bucket(s3_server, monkeypatch):
    """A fresh bucket on the moto server; credentials and ``AWS_ENDPOINT_URL`` set in the
    environment (inherited by spawned processes and Ray workers). Returns the bucket name."""
    import uuid

    import pyarrow.fs as pafs

    for key, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": s3_server,
        "AWS_EC2_METADATA_DISABLED": "true",
    }.items():
        monkeypatch.setenv(key, value)
    bucket = f"autoaug-{uuid.uuid4().hex[:12]}"
    host = s3_server.removeprefix("http://")
    pafs.S3FileSystem(
        endpoint_override=host,
        scheme="http",
        access_key="testing",
        secret_key="testing",
        region="us-east-1",
        allow_bucket_creation=True,
    ).create_dir(bucket)
    return bucket


@pytest.fixture(scope="session")
def in_mount_namespace():
    """``run(script, env)``: run a ``sh`` script as root of a new user and mount namespace, where
    it can mount a real tmpfs (e.g. a tiny one that fills up) without being root; skips where
    unprivileged namespaces are not available."""
    import shutil
    import subprocess

    probe = ["unshare", "--user", "--map-root-user", "--mount", "true"]
    if not shutil.which("unshare") or subprocess.run(probe, capture_output=True).returncode != 0:
        why = "needs unprivileged user+mount namespaces (unshare) for a real tmpfs"
        if os.environ.get("CI"):  # CI runs on a machine that has them: a skip there would hide a test
            pytest.fail(why)
        pytest.skip(why)

    def run(script: str, env: dict, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", script],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    return run


def armed_env(points: str, fired: Path, env: dict | None = None) -> dict:
    """``env`` (default: this process's) with the failpoints ``points`` armed
    (``AUTOAUG_FAILPOINTS``, :mod:`autoaug.core.failpoints`), each firing at most once across
    processes, with its marker file in ``fired``."""
    from autoaug.core.failpoints import ENV_VAR, FIRED_ENV_VAR

    return {**(os.environ if env is None else env), ENV_VAR: points, FIRED_ENV_VAR: str(fired), "PYTHONUNBUFFERED": "1"}


@pytest.fixture
def failpoints_armed(tmp_path):
    """``failpoints_armed(points, env=None) -> env``: :func:`armed_env` with the markers in
    ``tmp_path/failpoints``; ``failpoints_armed.fired(name)`` tells whether a point fired."""
    fired = tmp_path / "failpoints"

    def arm(points: str, env: dict | None = None) -> dict:
        return armed_env(points, fired, env)

    arm.fired = lambda name: (fired / name).is_file()
    return arm


@pytest.fixture
def kill_driver(tmp_path):
    """``kill(argv, env, point, timeout, also="") -> output``: run an ``autoaug`` driver in its own
    session with the failpoint ``point`` (``NAME[:N]``) armed to ``kill`` (and the failpoints
    ``also``, ``NAME[:N]=ACTION;...``, armed as well: another process of the search killed first),
    and wait for it to end (an event: the process exits); then kill what is left of its session
    (the embedded Ray it started). Fails unless it died by SIGKILL at that point; returns what it
    printed. ``kill.fired(name)`` tells whether a failpoint fired."""
    import signal
    import subprocess
    import threading

    fired = tmp_path / "failpoints"

    def kill(argv: list, env: dict, point: str, timeout: float, also: str = "") -> str:
        name = point.split(":")[0]
        proc = subprocess.Popen(
            argv,
            cwd=REPO,
            env=armed_env(";".join(p for p in (also, f"{point}=kill") if p), fired, env),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        lines: list[str] = []
        timed_out = False
        reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
        reader.start()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            proc.kill()
            proc.wait()
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # leftover Ray processes of the driver's session
            except ProcessLookupError:
                pass
        reader.join(timeout=30)  # every writer of the pipe is gone: it ends
        out = "".join(lines)
        assert not timed_out and proc.returncode == -signal.SIGKILL and (fired / name).is_file(), (
            f"the driver was to die by SIGKILL at the failpoint {point}; it "
            f"{f'did not end in {timeout} s' if timed_out else f'ended with {proc.returncode}'} "
            f"({'reached' if (fired / name).is_file() else 'not reached'}):\n{out[-3000:]}"
        )
        return out

    kill.fired = lambda name: (fired / name).is_file()
    return kill


#: Whether the embedded Ray of this test process is the one :func:`shared_ray` started (kept from
#: one module that asks for it to the next).
_SHARED_RAY = {"ours": False}
#: The test files with a test that asks for :func:`shared_ray` (set at collection).
_SHARED_RAY_FILES: set[Path] = set()


def _uses_shared_ray(item: pytest.Item) -> bool:
    return "shared_ray" in getattr(item, "fixturenames", ())


def _stop_shared_ray() -> None:
    if _SHARED_RAY["ours"]:
        from autoaug.core.ray_session import shutdown

        _SHARED_RAY["ours"] = False
        shutdown()


def _shared_ray_busy() -> bool:
    """Something of an earlier module still holds CPUs of the shared Ray (an actor it left):
    the next module gets a fresh Ray rather than fewer CPUs."""
    import ray

    try:
        return ray.available_resources().get("CPU", 0.0) < ray.cluster_resources().get("CPU", 0.0)
    except Exception:  # noqa: BLE001 - no answer: start afresh
        return True


@pytest.fixture(scope="module")
def shared_ray():
    """One embedded Ray for the in-process commands of a module (``search``, ``compare``), as the
    commands would start it: each command joins it instead of starting and stopping its own
    (about 12 CPU-seconds each), and its Ray tasks (re-scoring, calibration, compare's runs) reuse
    workers that have imported torch and DALI. Only for commands that start an embedded Ray of
    the machine's CPUs and that need no environment given to the workers after they start (a
    test's failpoints, S3 credentials, a working directory).

    It is kept for the next module of this test process that asks for it (such modules run first:
    :func:`pytest_collection_modifyitems`), unless something of the last one still holds its
    CPUs; the first test of a module where no test asks for it stops it
    (:func:`pytest_runtest_setup`), and so does the session's end. (The tests of a module that
    asks for it may find it running before the first that asks: those refuse bad input before
    any work, or run no Ray.)"""
    import ray

    from autoaug.core.ray_session import connect, output_settings

    if _SHARED_RAY["ours"] and ray.is_initialized() and _shared_ray_busy():
        _stop_shared_ray()
    if ray.is_initialized() and not _SHARED_RAY["ours"]:  # a module's own, left by a test: not ours
        yield
        return
    if not ray.is_initialized():
        connect(None, **output_settings(False))
    _SHARED_RAY["ours"] = True
    yield


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test of a module where no test asks for :func:`shared_ray` finds no embedded Ray of an
    earlier module (such a module may start its own, or need none)."""
    if _SHARED_RAY["ours"] and item.path not in _SHARED_RAY_FILES:
        _stop_shared_ray()


def pytest_sessionfinish(session: pytest.Session) -> None:
    _stop_shared_ray()
