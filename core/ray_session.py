"""The one Ray session module: connecting this process to Ray (an embedded local instance or an
existing cluster), what is shipped to the workers, and the Ray Jobs client. ``autoaug search``,
``autoaug compare``, ``autoaug launch``, the Python API (:func:`autoaug.search.driver.run_search`)
and ``benchmarks/search_overhead.py`` all connect through :func:`ray_session`.

Three ways a command reaches Ray:

* **embedded** (no address): :func:`local` starts a private Ray instance in this process
  (``ray.init()`` without an address, no dashboard by default) and uses this machine's CPUs/GPUs.
  It listens on loopback only where Ray allows (:func:`embedded_on_loopback`, which ``autoaug``'s
  ``main`` applies before Ray is imported) and authenticates with a token only this user can read
  (:func:`private_token_env`: a fresh token in a 0600 file, never Ray's world-readable
  ``~/.ray/auth_token``);
* **an existing cluster** (``--address``): :func:`connect` joins it, either as a driver on one of
  the cluster's machines (GCS address ``HOST:6379``, or ``auto`` for the cluster started on this
  machine) or from anywhere through Ray Client (``ray://HOST:10001``). The project's packages are
  shipped to the workers in the connection's ``runtime_env`` (:func:`project_runtime_env`), so
  the nodes need the dependencies (torch, DALI, ...) but not this checkout;
* **a Ray Job** (``autoaug launch``, see :mod:`autoaug.launch.launch_cmd`): the command runs as the job's
  driver on the cluster; inside it ``RAY_ADDRESS`` is set and :func:`connect` with no address joins
  that cluster.

Every failure a user can fix (unreachable head, a dashboard URL where a GCS address is expected,
token authentication without a token, ...) raises :class:`autoaug.core.errors.ClusterError`,
which the CLI prints as one line (exit status 1).

Example::

    from autoaug.core import ray_session

    with ray_session.ray_session(args.address, num_cpus=args.num_cpus) as info:
        print(info.describe())          # "Ray cluster at 10.0.0.5:6379: 3 nodes, 48 CPUs, 4 GPUs"
        ...                             # ray.tune.Tuner(...).fit()
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import socket
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from autoaug.core.errors import ClusterError, ClusterInputError
from autoaug.core.interrupt import keeping_sigterm_handler

__all__ = [
    "AUTH_HELP",
    "DEFAULT_EXCLUDES",
    "PROJECT_PACKAGES",
    "ClusterInfo",
    "LOCAL_ONLY_ENV_VAR",
    "check_reachable",
    "embedded_on_loopback",
    "connect",
    "dashboard_url",
    "in_ray_job",
    "job_client",
    "local",
    "parse_address",
    "project_root",
    "project_runtime_env",
    "private_token_env",
    "ray_session",
    "output_settings",
    "tasks_at_once",
]

#: The packages that make up the project; shipped to the cluster as ``runtime_env["py_modules"]``
#: (with the project's metadata: :func:`staged_metadata`).
PROJECT_PACKAGES: tuple[str, ...] = ("core", "policies", "proxy_models", "search", "launch")

#: Never uploaded to the cluster (gitignore-style patterns, as ``runtime_env["excludes"]`` takes).
DEFAULT_EXCLUDES: tuple[str, ...] = (
    ".venv",
    "venv",
    ".git",
    "runs",
    "__pycache__",
    "*.pyc",
    "*.egg-info",
    ".pytest_cache",
    ".mypy_cache",
    "benchmarks/results",
)

AUTH_HELP = (
    "clusters started with `ray start` use token authentication: give this process the "
    "cluster's token with RAY_AUTH_MODE=token and RAY_AUTH_TOKEN=<token> (or RAY_AUTH_TOKEN_PATH=<file>; "
    "`ray get-auth-token` prints it on the head node); see docs/cluster.md"
)

_DEFAULT_GCS_PORT = 6379
_DEFAULT_CLIENT_PORT = 10001
_DEFAULT_DASHBOARD_PORT = 8265
_HOST_PORT_RE = re.compile(r"^(?P<host>\[[0-9a-fA-F:]+\]|[A-Za-z0-9_.-]+)(?::(?P<port>\d{1,5}))?$")


# ----------------------------------------------------------------------------------------------
# Addresses


@dataclasses.dataclass(frozen=True)
class Address:
    """A parsed cluster address.

    ``kind`` is ``"gcs"`` (``HOST:PORT``: join as a driver), ``"client"`` (``ray://HOST:PORT``:
    Ray Client), ``"dashboard"`` (``http(s)://HOST:PORT``: the job server), or ``"auto"`` (the
    cluster started with ``ray start`` on this machine).
    """

    kind: str
    text: str
    host: str | None = None
    port: int | None = None

    @property
    def url(self) -> str:
        if self.kind == "dashboard":
            return self.text.rstrip("/")
        return self.text


def parse_address(address: str, *, default_kind: str = "gcs") -> Address:
    """Parse ``HOST[:PORT]``, ``ray://HOST[:PORT]``, ``http(s)://HOST[:PORT]`` or ``auto``.

    ``default_kind`` says what a bare ``HOST:PORT`` is: ``"gcs"`` (for :func:`connect`) or
    ``"dashboard"`` (for :func:`job_client`). Raises :class:`ClusterError` for anything else.
    """
    if not isinstance(address, str) or not address.strip():
        raise ClusterInputError(
            f"empty Ray cluster address {address!r}: expected HOST:PORT, ray://HOST:PORT or http://HOST:PORT"
        )
    text = address.strip()
    if text == "auto":
        return Address("auto", "auto")
    scheme, sep, rest = text.partition("://")
    if sep:
        kinds = {"ray": "client", "http": "dashboard", "https": "dashboard"}
        kind = kinds.get(scheme.lower())
        if kind is None:
            raise ClusterInputError(
                f"unsupported scheme {scheme + '://'!r} in Ray cluster address {text!r}: expected "
                "ray://HOST:PORT (Ray Client), http(s)://HOST:PORT (dashboard / job server) or HOST:PORT (GCS)"
            )
        hostport = rest.rstrip("/")
        if "/" in hostport and kind == "dashboard":  # a dashboard behind a path prefix (proxy)
            hostport = hostport.split("/", 1)[0]
        default_port = _DEFAULT_CLIENT_PORT if kind == "client" else (443 if scheme.lower() == "https" else 80)
    else:
        kind, hostport = default_kind, text
        default_port = _DEFAULT_GCS_PORT if kind == "gcs" else _DEFAULT_DASHBOARD_PORT
    match = _HOST_PORT_RE.match(hostport)
    if not match:
        raise ClusterInputError(
            f"malformed Ray cluster address {text!r}: expected HOST:PORT, ray://HOST:PORT or http://HOST:PORT"
        )
    port = int(match.group("port")) if match.group("port") else default_port
    if not 0 < port < 65536:
        raise ClusterInputError(f"port {port} in Ray cluster address {text!r} is out of range 1-65535")
    host = match.group("host").strip("[]")
    if kind == "dashboard" and not sep:
        text = f"http://{hostport}"
    return Address(kind, text, host, port)


def check_reachable(host: str, port: int, *, timeout: float = 5.0, what: str = "Ray cluster") -> None:
    """Raise :class:`ClusterError` unless a TCP connection to ``host:port`` opens within ``timeout``.

    Ray itself retries an unreachable GCS for tens of seconds and then reports a generic error;
    this check fails fast and names the address.
    """
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        if isinstance(exc, socket.timeout):
            reason = f"no answer within {timeout:g} s"
        raise ClusterError(
            f"cannot reach the {what} at {host}:{port} ({reason}); is it running and reachable from "
            "here? Start one with `ray start --head` (docs/cluster.md)"
        ) from None


def in_ray_job() -> bool:
    """True inside the driver of a Ray Job (``RAY_ADDRESS`` and the job's config are set by Ray)."""
    return bool(os.environ.get("RAY_ADDRESS")) and "RAY_JOB_CONFIG_JSON_ENV_VAR" in os.environ


def _token_mode() -> bool:
    return os.environ.get("RAY_AUTH_MODE", "").strip().lower() == "token"


# ----------------------------------------------------------------------------------------------
# An embedded Ray: loopback only, a private token

#: Ray's switch of multi-node clusters (documented for macOS and Windows, where it is off). Off, a
#: ``ray.init()`` that starts a local instance gives its node the loopback address, and Ray then
#: binds every server of it -- the GCS, the raylet, the object manager, the dashboard and runtime
#: env agents, the metrics endpoint, each worker's and the driver's own gRPC server -- to 127.0.0.1.
#: (On Linux ``ray.init(_node_ip_address="127.0.0.1")`` is replaced by the machine's address; this
#: switch is read once, when Ray is imported.)
LOCAL_ONLY_ENV_VAR = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


@contextlib.contextmanager
def embedded_on_loopback() -> Iterator[bool]:
    """For a command that starts an embedded Ray (no cluster address, no ``RAY_ADDRESS``): Ray's
    multi-node switch off (:data:`LOCAL_ONLY_ENV_VAR`) for the block, so the embedded instance and
    every process it starts listen on 127.0.0.1 only. Yields whether it applies: not when Ray was
    imported already (the switch is read at import: a Python session that imported Ray first sets
    ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` itself) or when the variable is set (the user's word)."""
    import sys

    if LOCAL_ONLY_ENV_VAR in os.environ or "ray" in sys.modules:
        yield False
        return
    os.environ[LOCAL_ONLY_ENV_VAR] = "0"
    try:
        yield True
    finally:
        os.environ.pop(LOCAL_ONLY_ENV_VAR, None)


_TOKEN_FILE: Path | None = None


def private_token_env() -> dict[str, str]:
    """The environment an embedded Ray authenticates with: ``RAY_AUTH_TOKEN_PATH`` naming a fresh
    random token in a file only this user can read (mode 0600, in a 0700 folder made once per
    process, removed at exit). Ray 2.60 turns token authentication on for a new local instance and
    otherwise writes its token to ``~/.ray/auth_token`` with the umask's mode (0644: readable by
    every local user who can enter the home folder, and a process holding the token can run code as
    this user). Empty -- Ray's own settings -- when the user chose: a token given
    (``RAY_AUTH_TOKEN`` / ``RAY_AUTH_TOKEN_PATH``) or authentication off (``RAY_AUTH_MODE=disabled``)."""
    global _TOKEN_FILE
    if os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH"):
        return {}
    if os.environ.get("RAY_AUTH_MODE", "").strip().lower() == "disabled":
        return {}
    if _TOKEN_FILE is None or not _TOKEN_FILE.is_file():
        import atexit
        import secrets
        import shutil
        import tempfile

        folder = Path(tempfile.mkdtemp(prefix="autoaug-ray-auth-"))  # 0700
        path = folder / "auth_token"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32))
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        _TOKEN_FILE = path
    return {"RAY_AUTH_TOKEN_PATH": str(_TOKEN_FILE)}


@contextlib.contextmanager
def _environment(values: Mapping[str, str]) -> Iterator[None]:
    """``values`` in this process's environment for the block (the processes Ray starts inherit them)."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


# ----------------------------------------------------------------------------------------------
# What gets shipped


def project_root() -> Path:
    """The folder holding the project's packages (a source checkout or ``site-packages``)."""
    return Path(__file__).resolve().parent.parent


def staged_package() -> Path:
    """A folder ``autoaug/`` holding a copy of this installation's :data:`PROJECT_PACKAGES`
    (``autoaug/core``, ``autoaug/policies``, ...), made once per process in a temporary folder:
    the source folders are named ``core``, ``policies``... but the code imports
    ``autoaug.core``, ``autoaug.policies``..., so shipping them one by one would not import on a
    node without the project installed."""
    global _STAGED
    if _STAGED is not None and _STAGED.is_dir():
        return _STAGED
    import shutil
    import tempfile

    root = project_root()
    target = Path(tempfile.mkdtemp(prefix="autoaug-ship-")) / "autoaug"
    target.mkdir()
    (target / "__init__.py").write_text('"""autoaug, as shipped to Ray workers."""\n')
    for name in PROJECT_PACKAGES:
        path = root / name
        if not (path / "__init__.py").is_file():
            raise ClusterError(f"cannot ship package {name!r}: {path} is not a Python package folder")
        shutil.copytree(path, target / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    _STAGED = target
    return target


_STAGED: Path | None = None

#: The distribution whose metadata is shipped with the project (its entry points: the search methods).
DISTRIBUTION = "autoaug"


def staged_metadata() -> Path | None:
    """A folder ``autoaug-VERSION.dist-info`` holding this installation's metadata (``METADATA``, and
    ``entry_points.txt``: the registry of search methods reads its entry points), made once per
    process beside :func:`staged_package`: shipped with it, a node without the project installed
    finds the entry points on its path as an installed project's. None when this code runs
    without installed metadata."""
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        dist = distribution(DISTRIBUTION)
    except PackageNotFoundError:
        return None
    target = staged_package().parent / f"{DISTRIBUTION}-{dist.version}.dist-info"
    if not target.is_dir():
        target.mkdir()
        for name in ("METADATA", "entry_points.txt"):
            text = dist.read_text(name)
            if text is not None:
                (target / name).write_text(text)
    return target


def project_runtime_env(
    *,
    working_dir: str | os.PathLike | None = None,
    env_vars: Mapping[str, str] | None = None,
    excludes: Sequence[str] = (),
    base: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A Ray ``runtime_env`` that carries this project to every worker of a job or connection.

    ``py_modules`` holds the project as one ``autoaug`` package (:func:`staged_package`: the
    :data:`PROJECT_PACKAGES` of this installation under their installed names) and its metadata
    (:func:`staged_metadata`: its entry points), so workers import exactly the code that submitted
    the work (nodes need the third-party dependencies installed, not the project). ``working_dir`` (optional) is uploaded too and
    becomes the current directory of the job's driver and workers. ``excludes`` adds patterns to
    :data:`DEFAULT_EXCLUDES`. ``env_vars`` are set in every process. ``base`` is another
    ``runtime_env`` to extend (its ``py_modules``, ``excludes`` and ``env_vars`` are kept).
    """
    env: dict[str, Any] = dict(base or {})
    modules = list(env.get("py_modules", []))
    metadata = staged_metadata()
    for staged in (str(staged_package()), *([str(metadata)] if metadata is not None else [])):
        if staged not in modules:
            modules.append(staged)
    env["py_modules"] = modules
    patterns = list(env.get("excludes", []))
    patterns += [p for p in (*DEFAULT_EXCLUDES, *excludes) if p not in patterns]
    env["excludes"] = patterns
    if working_dir is not None:
        wd = Path(working_dir).expanduser()
        if not wd.is_dir():
            raise ClusterInputError(f"working directory {str(working_dir)!r} does not exist or is not a folder")
        env["working_dir"] = str(wd.resolve())
    if env_vars:
        merged = dict(env.get("env_vars", {}))
        for key, value in env_vars.items():
            if not isinstance(key, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
                raise ClusterInputError(f"invalid environment variable name {key!r}: expected letters, digits and '_'")
            if not isinstance(value, str):
                raise ClusterInputError(f"environment variable {key} must be a string, got {type(value).__name__}")
            merged[key] = value
        env["env_vars"] = merged
    return env


# ----------------------------------------------------------------------------------------------
# Connecting


@dataclasses.dataclass(frozen=True)
class ClusterInfo:
    """What :func:`connect` / :func:`local` joined."""

    address: str | None  # as given ("127.0.0.1:6379", "ray://...", "auto"), None when embedded
    embedded: bool  # True: a private Ray instance started by this process
    num_nodes: int
    resources: dict[str, float]
    dashboard_url: str | None = None

    @property
    def num_cpus(self) -> float:
        return float(self.resources.get("CPU", 0.0))

    @property
    def num_gpus(self) -> float:
        return float(self.resources.get("GPU", 0.0))

    def describe(self) -> str:
        where = "local Ray (embedded)" if self.embedded else f"Ray cluster at {self.address}"
        nodes = f"{self.num_nodes} node{'s' if self.num_nodes != 1 else ''}"
        text = f"{where}: {nodes}, {self.num_cpus:g} CPUs, {self.num_gpus:g} GPUs"
        if self.dashboard_url:
            text += f", dashboard {self.dashboard_url}"
        return text


def _info(address: str | None, embedded: bool, context: Any = None) -> ClusterInfo:
    import ray

    alive = [n for n in ray.nodes() if n.get("Alive")]
    url = getattr(context, "dashboard_url", None) or None  # what ray.init returned, if we called it
    if url and "://" not in url:
        url = f"http://{url}"
    return ClusterInfo(
        address=address,
        embedded=embedded,
        num_nodes=len(alive),
        resources={k: float(v) for k, v in ray.cluster_resources().items()},
        dashboard_url=url,
    )


def local(
    num_cpus: int | None = None,
    num_gpus: int | None = None,
    *,
    include_dashboard: bool = False,
    runtime_env: Mapping[str, Any] | None = None,
    **init_kwargs: Any,
) -> ClusterInfo:
    """Start an embedded Ray instance on this machine (or reuse the one this process started).

    ``num_cpus``/``num_gpus`` cap what Ray schedules on (default: all of the machine's).
    ``RAY_ADDRESS`` is ignored here: this always starts a private instance (``address="local"``).
    """
    import ray

    for name, value in (("num_cpus", num_cpus), ("num_gpus", num_gpus)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise ClusterInputError(f"{name} must be a non-negative integer, got {value!r}")
    if ray.is_initialized():
        return _info(None, embedded=True)
    kwargs: dict[str, Any] = dict(init_kwargs)
    kwargs.setdefault("log_to_driver", True)
    if runtime_env:
        kwargs["runtime_env"] = dict(runtime_env)
    # Ray starts one idle worker per CPU when the first driver connects, for tasks to come. A
    # search's trials run in Tune's actors, which start workers of their own, so in a search with
    # no Ray task these sat idle to the end: 2.6 CPU-s a session here (benchmarks/suite_cpu.py
    # --tree on a smoke search). Tasks (calibration, re-scoring, compare) start theirs on demand.
    kwargs["_system_config"] = {"prestart_worker_first_driver": False, **kwargs.get("_system_config", {})}
    try:
        # SIGTERM as Ctrl-C (autoaug's main), not Ray's stack dump; the token only this user reads.
        with keeping_sigterm_handler(), _environment(private_token_env()):
            context = ray.init(
                address="local", num_cpus=num_cpus, num_gpus=num_gpus, include_dashboard=include_dashboard, **kwargs
            )
    except (KeyboardInterrupt, SystemExit):
        raise
    except Exception as exc:  # e.g. "The current node timed out during startup" on an overloaded machine
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ClusterError(
            f"could not start a local Ray instance: {first[:300]} (if the machine is busy, retry when it is "
            "less loaded; `ray status` shows other Ray instances)"
        ) from None
    return _info(None, embedded=True, context=context)


def connect(
    address: str | None = None,
    *,
    num_cpus: int | None = None,
    num_gpus: int | None = None,
    runtime_env: Mapping[str, Any] | None = None,
    ship_project: bool = True,
    include_dashboard: bool = False,
    timeout: float = 5.0,
    **init_kwargs: Any,
) -> ClusterInfo:
    """Initialise Ray for this process: join ``address``, or run locally when it is ``None``.

    Args:
        address: ``None`` (the default) starts an embedded instance (:func:`local`), except inside
            a Ray Job, where the job's cluster is joined; ``"local"`` always starts one. ``"auto"`` joins the cluster started with
            ``ray start`` on this machine; ``HOST:PORT`` joins the cluster whose GCS listens there
            (this process becomes a driver on the local node, so it must run on a cluster
            machine); ``ray://HOST:PORT`` connects through Ray Client from anywhere.
            ``http(s)://`` addresses are the job server's and are refused here (use
            ``autoaug launch``).
        num_cpus, num_gpus: resources of an embedded instance; refused when joining a cluster
            (the cluster's nodes declare their own).
        runtime_env: extra ``runtime_env`` for the connection (merged with the project's).
        ship_project: when joining a cluster, upload the project's packages to the workers
            (:func:`project_runtime_env`). Inside a Ray Job the job already carries them.
        timeout: seconds to wait for the head's port to answer before failing.
        init_kwargs: passed on to ``ray.init``.

    Returns:
        A :class:`ClusterInfo` (nodes and resources seen after connecting).

    Raises:
        ClusterError: unreachable head, wrong kind of address, missing or rejected token.
    """

    from autoaug.core.failpoints import runtime_env_vars

    # A test's armed failpoints reach every worker (core/failpoints.py); inside a Ray Job they came
    # with the job's runtime_env, which Ray refuses to see given again by its driver ("conflict").
    if runtime_env_vars() and not in_ray_job():
        base_env = dict(runtime_env or {})
        runtime_env = {**base_env, "env_vars": {**base_env.get("env_vars", {}), **runtime_env_vars()}}
    if address is None or (isinstance(address, str) and not address.strip()):
        if os.environ.get("RAY_ADDRESS"):
            # A Ray Job's driver (or a user who exported RAY_ADDRESS): join that cluster as is.
            env = dict(runtime_env) if runtime_env else None
            if ship_project and not in_ray_job():
                env = project_runtime_env(base=runtime_env)
            return _join(os.environ["RAY_ADDRESS"], env, num_cpus, num_gpus, timeout, init_kwargs)
        return local(num_cpus, num_gpus, include_dashboard=include_dashboard, runtime_env=runtime_env, **init_kwargs)
    if address.strip() == "local":  # Ray's own spelling of "start a new local instance"
        return local(num_cpus, num_gpus, include_dashboard=include_dashboard, runtime_env=runtime_env, **init_kwargs)
    env = project_runtime_env(base=runtime_env) if ship_project else (dict(runtime_env) if runtime_env else None)
    return _join(address, env, num_cpus, num_gpus, timeout, init_kwargs)


def _join(
    address: str,
    runtime_env: Mapping[str, Any] | None,
    num_cpus: int | None,
    num_gpus: int | None,
    timeout: float,
    init_kwargs: Mapping[str, Any],
) -> ClusterInfo:
    import ray

    parsed = parse_address(address, default_kind="gcs")
    if parsed.kind == "dashboard":
        raise ClusterInputError(
            f"{address!r} is a Ray dashboard / job server address; to run a driver against the cluster "
            f"give its GCS address (HOST:{_DEFAULT_GCS_PORT}, on a cluster machine) or its Ray Client "
            f"address (ray://HOST:{_DEFAULT_CLIENT_PORT}), or submit the command as a Ray Job with "
            f"`autoaug launch --address {parsed.url} -- ...`"
        )
    if num_cpus is not None or num_gpus is not None:
        raise ClusterInputError(
            f"cannot set num_cpus/num_gpus when joining the Ray cluster at {address}: its nodes declare "
            "their own resources (`ray start --num-cpus/--num-gpus`); use per-trial resources instead"
        )
    if ray.is_initialized():
        return _info(address, embedded=False)
    if parsed.kind != "auto":
        check_reachable(parsed.host, parsed.port, timeout=timeout)
    kwargs: dict[str, Any] = dict(init_kwargs)
    kwargs.setdefault("log_to_driver", True)
    if runtime_env:
        kwargs["runtime_env"] = dict(runtime_env)
    try:
        with keeping_sigterm_handler():
            context = ray.init(address=parsed.text, **kwargs)
    except Exception as exc:  # Ray raises ConnectionError, RuntimeError, AuthenticationError...
        raise _connection_error(address, exc) from None
    return _info(address, embedded=False, context=context)


def _connection_error(address: str, exc: BaseException) -> ClusterError:
    name = type(exc).__name__
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else name
    if name == "AuthenticationError" or "auth" in str(exc).lower():
        return ClusterError(f"the Ray cluster at {address} rejected this process ({first}); {AUTH_HELP}")
    if isinstance(exc, ConnectionError) or "connect" in str(exc).lower():
        hint = (
            "if the cluster was started with `ray start`, it probably requires a token this process "
            f"does not have ({AUTH_HELP})"
            if not _token_mode()
            else "the token in RAY_AUTH_TOKEN / RAY_AUTH_TOKEN_PATH may not be this cluster's, or the "
            "address is not the cluster's GCS port (`ray start --head --port`)"
        )
        return ClusterError(f"could not connect to the Ray cluster at {address}: {first}; {hint}")
    return ClusterError(f"could not connect to the Ray cluster at {address}: {name}: {first}")


def shutdown() -> None:
    """Disconnect from Ray (stops an embedded instance; a cluster keeps running)."""
    import ray

    if ray.is_initialized():
        ray.shutdown()


def output_settings(verbose: bool) -> dict[str, Any]:
    """``ray.init`` settings for a command's verbosity: Ray's own output -- the workers' stdout
    and stderr, its start-up banner, its warnings (token authentication...) -- only when
    ``verbose`` (``-v``); otherwise only Ray's errors reach the terminal."""
    import logging

    return {"log_to_driver": bool(verbose), "logging_level": logging.INFO if verbose else logging.ERROR}


@contextlib.contextmanager
def ray_session(address: str | None = None, **kwargs: Any) -> Iterator[ClusterInfo]:
    """:func:`connect` for the duration of a ``with`` block, then disconnect.

    If Ray was already initialised in this process the existing connection is used and left
    open.
    """
    import ray

    owned = not ray.is_initialized()
    info = connect(address, **kwargs)
    try:
        yield info
    finally:
        if owned:
            shutdown()


@dataclasses.dataclass(frozen=True)
class Shortfall:
    """What no live node of the connected Ray has for a task: ``resource`` is ``"CPU"``, ``"GPU"``
    or ``"CPU+GPU"`` (each exists, but not on one node); ``text`` ends a line (``"needs 0.5 GPU(s)
    but the largest node has 0"``)."""

    resource: str
    text: str


def shortfall(cpus: float, gpus: float) -> Shortfall | None:
    """Why a task asking for ``cpus`` CPUs and ``gpus`` GPUs cannot start on the connected Ray (no
    live node declares that much: it would wait forever, or until an autoscaler adds such a node);
    None when a node can run it (or when this process is connected to no Ray)."""
    import ray

    if not ray.is_initialized():  # no Ray to ask (a caller that runs without one)
        return None
    nodes = [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")]
    if any(float(r.get("CPU", 0)) >= cpus and float(r.get("GPU", 0)) >= gpus for r in nodes):
        return None
    most_cpus = max((float(r.get("CPU", 0)) for r in nodes), default=0.0)
    most_gpus = max((float(r.get("GPU", 0)) for r in nodes), default=0.0)
    if most_cpus < cpus:
        return Shortfall("CPU", f"needs {cpus:g} CPU(s) but the largest node has {most_cpus:g}")
    if most_gpus < gpus:
        return Shortfall("GPU", f"needs {gpus:g} GPU(s) but the largest node has {most_gpus:g}")
    return Shortfall("CPU+GPU", f"needs {cpus:g} CPU(s) and {gpus:g} GPU(s) on one node, and no node has both")


def tasks_at_once(cpus: float, gpus: float) -> int:
    """How many tasks of ``cpus`` CPUs and ``gpus`` GPUs the connected Ray cluster's resources hold
    at once (at least 1), counted as Ray counts them, in 1/10,000ths (1 GPU holds ten 0.1-GPU
    tasks, where ``1 // 0.1`` is 9)."""
    import ray

    total = ray.cluster_resources()
    at_once = _fits(total.get("CPU", 1), cpus)
    if gpus:
        at_once = min(at_once, _fits(total.get("GPU", 0), gpus))
    return max(1, at_once)


def _fits(total: float, each: float) -> int:
    return int(round(total * 10_000)) // max(1, int(round(each * 10_000)))


# ----------------------------------------------------------------------------------------------
# Ray Jobs


_ADDRESS_ENV_VARS = ("RAY_API_SERVER_ADDRESS", "RAY_ADDRESS")


def dashboard_url(address: str | None) -> str:
    """The job server URL for ``address`` (default: ``$RAY_API_SERVER_ADDRESS``, then an http(s)
    ``$RAY_ADDRESS``). ``HOST:PORT`` means ``http://HOST:PORT``; ``ray://HOST:PORT`` and GCS
    addresses are refused with the hint to give the dashboard address."""
    if address is None or not address.strip():
        for var in _ADDRESS_ENV_VARS:
            value = os.environ.get(var, "").strip()
            if value and (var == "RAY_API_SERVER_ADDRESS" or value.startswith(("http://", "https://"))):
                address = value
                break
        else:
            raise ClusterInputError(
                "no Ray job server address: give --address http://HEAD:8265 (the head's dashboard) or set "
                "RAY_API_SERVER_ADDRESS"
            )
    parsed = parse_address(address, default_kind="dashboard")
    if parsed.kind != "dashboard":
        raise ClusterInputError(
            f"{address!r} is not a Ray job server address: Ray Jobs are submitted to the head's dashboard, "
            f"http://HEAD:{_DEFAULT_DASHBOARD_PORT} (`ray start --head --dashboard-port`)"
        )
    return parsed.url


@contextlib.contextmanager
def _explicit_address() -> Iterator[None]:
    # JobSubmissionClient lets $RAY_API_SERVER_ADDRESS / $RAY_ADDRESS override its address
    # argument; an explicitly given address must win, so hide them while it is constructed.
    saved = {var: os.environ.pop(var) for var in _ADDRESS_ENV_VARS if var in os.environ}
    try:
        yield
    finally:
        os.environ.update(saved)


def job_client(address: str | None = None, *, timeout: float = 5.0):
    """A ``ray.job_submission.JobSubmissionClient`` for the job server at ``address``.

    Checks that the server answers and that this process is allowed in (token authentication),
    turning Ray's errors into :class:`ClusterError`.
    """
    url = dashboard_url(address)
    parsed = parse_address(url, default_kind="dashboard")
    try:
        from ray.job_submission import JobSubmissionClient
    except ImportError as exc:  # pragma: no cover - ray[default] is a dependency
        raise ClusterError(f"Ray Jobs need the ray[default] extra (`pip install 'ray[default]'`): {exc}") from None
    check_reachable(parsed.host, parsed.port, timeout=timeout, what="Ray job server (dashboard)")
    try:
        with _explicit_address():
            return JobSubmissionClient(url)
    except Exception as exc:
        raise job_error(url, exc) from None


def job_error(url: str, exc: BaseException, job_id: str | None = None) -> ClusterError:
    """A :class:`ClusterError` for an exception raised by the job client."""
    name = type(exc).__name__
    text = " ".join(str(exc).split())
    if name == "AuthenticationError":
        first = str(exc).strip().splitlines()[0]
        return ClusterError(f"the Ray job server at {url} refused the request ({first}); {AUTH_HELP}")
    if job_id is not None and ("does not exist" in text or "404" in text):
        return ClusterInputError(
            f"no job {job_id!r} on the Ray cluster at {url} (see `autoaug launch list --address {url}`)"
        )
    if isinstance(exc, ConnectionError):
        return ClusterError(f"cannot talk to the Ray job server at {url}: {text}")
    return ClusterError(f"Ray job server at {url}: {name}: {text[:500]}")
