"""A real two-node Ray cluster on this machine: ``autoaug launch`` (Ray Jobs) and
``autoaug search --address`` run smoke searches on it, and Ray's own records show where the trials ran.

The cluster is started with ``ray start --block`` processes (head: 1 CPU, second node: 1 CPU and a
custom resource ``node2``) on 127.0.0.1 (dashboard/job server) with free ports, a private temp
dir and token authentication (a fresh ``RAY_AUTH_TOKEN`` given to every process that joins or
talks to it). Teardown stops exactly these processes: SIGTERM to the ``ray start --block``
processes (which stop their node's raylet, GCS, dashboard and workers), then SIGKILL to any
process still carrying this cluster's token in its environment. ``ray stop`` is deliberately
not used: it kills every Ray process on the machine, including other users' clusters.

The node-loss tests (in any order among the others) kill the second node mid-search, every process of it by PID
(:meth:`LocalCluster.kill_node2`), and start a fresh one afterwards (:meth:`LocalCluster.start_node2`).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent


def _free_ports(n: int) -> list[int]:
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


@dataclass
class LocalCluster:
    gcs_address: str
    dashboard_url: str
    token: str
    env: dict[str, str]
    temp_dir: Path
    node2_argv: list[str] = field(default_factory=list)
    procs: list[subprocess.Popen] = field(default_factory=list)
    logs: list[Path] = field(default_factory=list)
    #: The value of :data:`NODE_ENV_VAR` that the second node's processes carry (raylet, agents, workers).
    node2_marker: str = ""

    def run(self, *args: str, timeout: float = 600, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        """Run a command with this cluster's environment (token, PATH with the venv)."""
        return subprocess.run(
            list(args), env=env or self.env, capture_output=True, text=True, timeout=timeout, cwd=str(self.temp_dir)
        )

    def api(self, path: str, **params: object) -> object:
        """GET a dashboard REST endpoint (Ray's job and state APIs) with this cluster's token."""
        query = ("?" + urllib.parse.urlencode(params, doseq=True)) if params else ""
        request = urllib.request.Request(
            self.dashboard_url + path + query, headers={"Authorization": f"Bearer {self.token}"}
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())

    def state(self, resource: str, **filters: str) -> list[dict]:
        """``ray.util.state.list_<resource>(detail=True, filters=[(k, "=", v)...])`` over REST."""
        params: dict[str, object] = {"limit": 10000, "detail": "true"}
        if filters:
            params.update(
                filter_keys=list(filters), filter_predicates=["="] * len(filters), filter_values=list(filters.values())
            )
        return self.api(f"/api/v0/{resource}", **params)["data"]["result"]["result"]

    def alive_nodes(self) -> list[dict]:
        return [n for n in self.state("nodes") if n["state"] == "ALIVE"]

    def log_tail(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-2000:]}" for p in self.logs if p.exists())

    def start_node(self, name: str, argv: list[str], extra_env: dict[str, str] | None = None) -> None:
        """Start one ``ray start --block`` node (its own process group, its output in ``NAME.log``) and
        wait for the event that it joined: ``ray start`` prints ``Ray runtime started.`` once the GCS
        lists its node (Ray's ``Node`` waits for that; on the head, for the dashboard too). A thread
        copies the output to the log and sets the event at that line, or when the output ends (the
        process exited)."""
        want = len(self.alive_nodes()) + 1 if self.procs else 1
        log = self.temp_dir / f"{name}.log"
        if log not in self.logs:
            self.logs.append(log)
        proc = subprocess.Popen(
            argv,
            env={**self.env, **(extra_env or {})},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=str(self.temp_dir),
        )
        self.procs.append(proc)
        joined, said = threading.Event(), []

        def copy() -> None:
            with open(log, "ab") as out:
                for line in proc.stdout:
                    out.write(line)
                    out.flush()
                    if b"Ray runtime started." in line:
                        said.append(line)
                        joined.set()
            joined.set()  # the output ended: the process exited

        threading.Thread(target=copy, name=f"ray-{name}-output", daemon=True).start()
        if not joined.wait(timeout=120):
            raise RuntimeError(f"the Ray {name} did not come up within 120 s:\n{self.log_tail()}")
        if not said:
            proc.wait(timeout=30)
            raise RuntimeError(f"`ray start` ({name}) exited early:\n{self.log_tail()}")
        alive = self.alive_nodes()
        if len(alive) < want:
            raise RuntimeError(f"the Ray {name} started but the GCS lists {len(alive)} node(s) alive, not {want}")

    def start_node2(self) -> None:
        """(Re)start the second node (1 CPU, resource ``node2``, free ports of its own). Every process
        of the node (its raylet, so every worker it starts) carries a fresh :data:`NODE_ENV_VAR`
        value, by which :meth:`kill_node2` finds them and a node-loss test's search arms its
        failpoint in them alone (:func:`_search_losing_node2`)."""
        agent, metrics = _free_ports(2)
        argv = [*self.node2_argv, f"--dashboard-agent-listen-port={agent}", f"--metrics-export-port={metrics}"]
        self.node2_marker = f"{self.token[:12]}-node2-{secrets.token_hex(4)}"
        env = {NODE_ENV_VAR: self.node2_marker}
        try:
            self.start_node("node2", argv, env)
        except RuntimeError as e:
            # `ray start` gives a node's raylet 30 s to register (Ray's own limit): on a loaded machine
            # it may need more. Once more, after what is left of this try is gone.
            if "timed out during startup" not in str(e):
                raise
            self.kill_node2()
            self.wait_nodes(1)
            self.start_node("node2", argv, env)

    @property
    def gate(self) -> Path:
        return self.temp_dir / "gate"

    def node2_pids(self) -> list[int]:
        """Every live process of the second node: the ``ray start --block`` process, its raylet and
        agents, and the workers the raylet started (found by their environment)."""
        marker = f"{NODE_ENV_VAR}={self.node2_marker}".encode() + b"\0"
        return [pid for pid in _pids_with(marker) if pid != os.getpid()]

    def kill_node2(self) -> list[int]:
        """The second node lost, as a machine is: SIGKILL to every one of its processes at once, by PID
        (nothing else on this machine). Returns the PIDs killed."""
        killed = []
        for pid in self.node2_pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
        for proc in self.procs[1:]:
            if proc.poll() is None and proc.pid in killed:
                proc.wait(timeout=30)
        return killed

    def wait_nodes(self, n: int, timeout: float = 120) -> None:
        """Wait until Ray lists exactly ``n`` nodes alive (the GCS marks a lost node dead after its
        health checks fail)."""
        deadline = time.monotonic() + timeout
        while len(self.alive_nodes()) != n:
            if time.monotonic() > deadline:
                raise RuntimeError(f"Ray did not list {n} node(s) alive within {timeout:.0f} s: {self.alive_nodes()}")
            time.sleep(1.0)

    def stop(self) -> None:
        """The cluster gone at once: SIGKILL to each node's process group (created for it), then to
        any process left with this cluster's token. Nothing of a test cluster is worth a graceful
        stop: ``ray start --block`` took up to the whole 40 s it was given on SIGTERM."""
        for proc in reversed(self.procs):  # the second node first, the head last
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        self._kill_leftovers()
        shutil.rmtree(self.temp_dir, ignore_errors=True)

    def _kill_leftovers(self) -> None:
        """SIGKILL any process that still carries this cluster's unique token (workers, agents)."""
        marker = f"RAY_AUTH_TOKEN={self.token}".encode() + b"\0"
        for pid in _pids_with(marker):
            if pid != os.getpid():
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)


#: An environment variable that marks every process of one node of a test cluster.
NODE_ENV_VAR = "AUTOAUG_TEST_RAY_NODE"
#: The failpoint a node-loss test's search arms in its own job's processes on the second node: a
#: run starting its second epoch, after its first epoch's checkpoint (whatever the process trained
#: before: a PBA member rotated into a fresh process, a trial on a reused actor).
NODE2_POINT = "train.later_epoch"
#: The density test's: a training step, counted per process (a fold model has no checkpoint: Ray
#: retries its task from the start).
FOLD_POINT = "train.mid_epoch:10"


def _pids_with(marker: bytes) -> list[int]:
    """The PIDs of the processes whose environment holds ``marker`` (``NAME=VALUE\\0``) as one of its
    entries (not inside another's value: a search's driver and workers carry the second node's marker
    in ``AUTOAUG_FAILPOINTS_ONLY``)."""
    pids, entry_wanted = [], marker.rstrip(b"\0")
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            if entry_wanted in (entry / "environ").read_bytes().split(b"\0"):
                pids.append(int(entry.name))
        except (OSError, ValueError):
            continue
    return pids


def start_cluster() -> LocalCluster:
    """A fresh two-node cluster. `ray start` gives a node's raylet 30 s to register (Ray's own limit,
    as for the second node in :meth:`LocalCluster.start_node2`): on a loaded machine the head may
    need more. Then once more, a whole new cluster (token, ports, folder), after everything of the
    first try is stopped."""
    try:
        return _start_cluster()
    except RuntimeError as e:
        if "timed out during startup" not in str(e):
            raise
        return _start_cluster()


def _start_cluster() -> LocalCluster:
    token = secrets.token_hex(32)
    temp_dir = Path(tempfile.mkdtemp(prefix="aa-ray-", dir="/tmp"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(
        RAY_AUTH_MODE="token",
        RAY_AUTH_TOKEN=token,
        RAY_USAGE_STATS_ENABLED="0",
        PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        PYTHONUNBUFFERED="1",
    )
    (gcs, dash, client, agent1, metrics1) = _free_ports(5)
    cluster = LocalCluster(
        gcs_address=f"127.0.0.1:{gcs}",
        dashboard_url=f"http://127.0.0.1:{dash}",
        token=token,
        env=env,
        temp_dir=temp_dir,
    )
    common = ["--num-cpus=1", "--num-gpus=0", "--block", "--disable-usage-stats", "--node-ip-address=127.0.0.1"]
    head = [
        str(BIN / "ray"),
        "start",
        "--head",
        f"--port={gcs}",
        "--dashboard-host=127.0.0.1",
        f"--dashboard-port={dash}",
        f"--ray-client-server-port={client}",
        f"--dashboard-agent-listen-port={agent1}",
        f"--metrics-export-port={metrics1}",
        f"--temp-dir={temp_dir}",
        *common,
    ]
    second = [
        str(BIN / "ray"),
        "start",
        f"--address=127.0.0.1:{gcs}",
        '--resources={"node2": 1}',
        # A temp folder of its own, as a node on a machine of its own has: a node sharing the head's
        # unpacks a job's working_dir (a shipped small file) over the one the job's driver runs in.
        f"--temp-dir={temp_dir / 'node2'}",
        *common,
    ]
    cluster.node2_argv = second
    os.mkfifo(cluster.gate)
    try:
        cluster.start_node("head", head)
        cluster.start_node2()
    except BaseException:
        cluster.stop()
        raise
    return cluster


@pytest.fixture(scope="module")
def ray_cluster():
    cluster = start_cluster()
    try:
        yield cluster
    finally:
        cluster.stop()


#: Ray's class names of Tune trial actors: a function trainable, and a class trainable (the density
#: method's DensityTrial) as tune.with_resources wraps it.
_TRIAL_ACTORS = ("ImplicitFunc", "with_resources.<locals>.ResourceTrainable")


def _trial_nodes(cluster: LocalCluster, ray_job_id: str) -> dict[str, str]:
    """Actor id -> node id of the Tune trial actors of one Ray job that were placed on a node: the
    training method's function trainable or the density method's class trainable
    (:data:`_TRIAL_ACTORS`). Tune may ask for an actor it then no longer needs (the search ended,
    or a finished trial's actor took the next trial): Ray lists it DEAD with no node."""
    actors = cluster.state("actors", job_id=ray_job_id)
    return {a["actor_id"]: a["node_id"] for a in actors if a["class_name"] in _TRIAL_ACTORS and a.get("node_id")}


def _search_args(cifar_small: Path, work: Path, name: str) -> list[str]:
    return [
        "search",
        "--preset",
        "smoke",
        "--data",
        str(cifar_small),
        "--name",
        name,
        "--num-trials",
        "2",
        "--concurrency",
        "2",
        "--cpus-per-trial",
        "1",
        "--storage",
        str(work / "runs"),
        "--store",
        str(work / "store"),
        "--set",
        "train.epochs=1",
        "--set",
        "train.train_size=256",
        "--set",
        "train.val_size=128",
    ]


@pytest.mark.slow
def test_two_node_cluster_is_up(ray_cluster):
    nodes = ray_cluster.alive_nodes()
    assert len(nodes) == 2
    assert sorted(n["is_head_node"] for n in nodes) == [False, True]
    node2 = [n for n in nodes if not n["is_head_node"]][0]
    assert node2["resources_total"].get("node2") == 1.0


def _losable_args(cifar_small: Path, work: Path, name: str) -> list[str]:
    """A training-method search that a lost node leaves unchanged: FIFO, not ASHA (which trial ASHA
    stops depends on which reports first, which a lost node changes), each trial retried once. Its
    two trials start at once, one on each node, each in an actor of its own (``reuse_actors`` off:
    on a loaded machine the first trial, on the head, ended before the second node's fresh actor
    had started, and Tune gave the second trial the first one's actor on the head instead)."""
    return [
        *_search_args(cifar_small, work, name),
        *("--set", "train.epochs=2", "--no-early-stopping", "--max-failures", "1", "--set", "reuse_actors=false"),
    ]


@dataclass
class JobSearch:
    proc: subprocess.CompletedProcess
    job_id: str
    work: Path
    name: str
    #: The cluster's nodes while the search ran (a node-loss test run before or after it replaces
    #: the second node with a fresh one, of another id).
    nodes: set[str]


@pytest.fixture(scope="module")
def job_search(ray_cluster, cifar_small, tmp_path_factory) -> JobSearch:
    """``autoaug launch -- search ...``: the training method's search as a Ray Job on the two nodes,
    nothing lost. The search :func:`test_train_search_survives_losing_the_node_a_trial_runs_on`
    compares with (the same arguments and seed), and the one
    :func:`test_launch_runs_a_search_as_a_ray_job_on_both_nodes` checks."""
    work = tmp_path_factory.mktemp("jobsearch")
    # A name of its own: Ray's job list outlives a test module (the module may run twice on one cluster).
    name, job_id = f"whole{secrets.token_hex(3)}", f"autoaug-test-{secrets.token_hex(4)}"
    proc = ray_cluster.run(
        str(BIN / "autoaug"),
        "launch",
        "--address",
        ray_cluster.dashboard_url,
        "--job-id",
        job_id,
        "--",
        *_losable_args(cifar_small, work, name),
    )
    return JobSearch(proc, job_id, work, name, {n["node_id"] for n in ray_cluster.alive_nodes()})


@pytest.mark.slow
def test_launch_runs_a_search_as_a_ray_job_on_both_nodes(ray_cluster, job_search):
    from autoaug.policies.store import PolicyStore

    autoaug = str(BIN / "autoaug")
    proc, job_id, name = job_search.proc, job_search.job_id, job_search.name
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert f"job {job_id} SUCCEEDED" in proc.stderr
    assert f"stored as {name}@1" in proc.stdout  # the search's own output, streamed from the job

    record = PolicyStore(str(job_search.work / "store")).get(f"{name}@latest")
    assert record.version == 1 and len(record.policy.sub_policies) > 0

    # Ray's records: the job ran `python -m autoaug.launch.cli search` on the cluster and succeeded...
    job = ray_cluster.api(f"/api/jobs/{job_id}")
    assert job["status"] == "SUCCEEDED" and "-m autoaug.launch.cli search" in job["entrypoint"]
    assert len(job["runtime_env"]["py_modules"]) == 2  # the project, shipped as one autoaug package, and its metadata
    # ... and its Tune trial actors ran on both nodes.
    nodes = _trial_nodes(ray_cluster, job["job_id"])
    assert len(nodes) >= 2, nodes
    assert set(nodes.values()) == job_search.nodes

    status = ray_cluster.run(autoaug, "launch", "status", job_id, "--address", ray_cluster.dashboard_url)
    assert status.returncode == 0 and "SUCCEEDED" in status.stdout


@pytest.mark.slow
def test_density_search_with_address_trains_fold_models_and_scores_on_both_nodes(ray_cluster, cifar_small, tmp_path):
    """``autoaug search --address`` (the driver an ordinary process joining the cluster; for the
    training method's trials, placed on both nodes through a Ray Job, see
    test_launch_runs_a_search_as_a_ray_job_on_both_nodes; PBA's population, a member on each node,
    in test_pba_search_survives_losing_the_node_a_member_runs_on)."""
    from autoaug.policies.store import PolicyStore

    proc = ray_cluster.run(
        str(BIN / "autoaug"),
        *_search_args(cifar_small, tmp_path, "densaddr"),
        "--method",
        "density",
        "--folds",
        "2",
        "--rounds",
        "1",
        "--trials-per-round",
        "2",  # the two of a round at once (--concurrency 2): one per 1-CPU node
        "--top-per-round",
        "1",
        "--address",
        ray_cluster.gcs_address,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    record = PolicyStore(str(tmp_path / "store")).get("densaddr@latest")
    assert record.provenance["method"]["name"] == "density"
    assert len(record.provenance["trials"]) == 4 and len(record.policy.sub_policies) > 0

    # The driver was an ordinary process here: find its Ray job by its entrypoint.
    drivers = [
        j for j in ray_cluster.api("/api/jobs/") if j["type"] == "DRIVER" and "densaddr" in (j.get("entrypoint") or "")
    ]
    assert len(drivers) == 1, drivers
    assert "autoaug.launch.cli" not in drivers[0]["entrypoint"]  # not a Ray Job's `python -m` entrypoint
    job = drivers[0]["job_id"]
    alive = {n["node_id"] for n in ray_cluster.alive_nodes()}
    # The two fold models are Ray tasks of 1 CPU each, one per 1-CPU node...
    folds = [t for t in ray_cluster.state("tasks", job_id=job) if t["name"].startswith("autoaug-fold:densaddr:")]
    assert {t["name"] for t in folds} == {"autoaug-fold:densaddr:0", "autoaug-fold:densaddr:1"}
    assert {t["node_id"] for t in folds} == alive
    # ... and the scoring trials ran on both nodes too.
    assert set(_trial_nodes(ray_cluster, job).values()) == alive


@pytest.mark.slow
def test_clear_errors_without_the_token(ray_cluster, tmp_path):
    env = {k: v for k, v in ray_cluster.env.items() if not k.startswith("RAY_AUTH")}
    env["HOME"] = str(tmp_path)  # no ~/.ray/auth_token either
    proc = ray_cluster.run(str(BIN / "autoaug"), "launch", "list", "--address", ray_cluster.dashboard_url, env=env)
    assert proc.returncode == 1  # a cluster that refuses this process: ClusterError (docs/cluster.md)
    assert "refused the request" in proc.stderr and "RAY_AUTH_TOKEN" in proc.stderr
    assert "Traceback" not in proc.stderr


# ----------------------------------------------------------------------------------------------
# A worker node lost mid-search. Each test runs a search against the cluster with a failpoint armed
# in its own Ray job only (the driver's environment, shipped in the job's runtime_env) and in that
# job's processes on the second node only (AUTOAUG_FAILPOINTS_ONLY: the node's marker; the head's
# trials and the driver never arm it, nor any process of another job still training there, whatever
# the order of the tests), waits for the event "a trial of this search on the second node is at the
# failpoint" (a named pipe), kills every process of that node by PID, and lets the search finish on
# the head alone; a fresh second node is started again afterwards, for the other tests.


@dataclass
class NodeLoss:
    """What :func:`_search_losing_node2` saw: the search's exit and output, the PID that stalled at
    the failpoint on the second node, and the second node's PIDs it killed."""

    proc: subprocess.CompletedProcess
    stalled_pid: int
    killed: list[int]
    lost_node: str  # its Ray node id
    seconds: float


def _search_losing_node2(cluster: LocalCluster, argv: list[str], tmp_path: Path, point: str = NODE2_POINT) -> NodeLoss:
    """Run ``autoaug`` ``argv`` against ``cluster`` with ``point`` armed in its job's
    processes on the second node; when one of them is there, kill the node; return when the search
    ends. The cluster has two nodes again afterwards (a fresh second node)."""
    import threading

    from autoaug.core.failpoints import ENV_VAR, FIRED_ENV_VAR, ONLY_ENV_VAR

    at_point: list[str] = []

    def meet() -> None:  # opens once a process at the point opens the pipe to write (the event)
        with open(cluster.gate) as pipe:
            at_point.append(pipe.readline())

    reader = threading.Thread(target=meet, daemon=True)
    reader.start()
    armed = {  # this search's job only (its runtime_env), its processes on the second node only
        ENV_VAR: f"{point}=stall({cluster.gate})",
        FIRED_ENV_VAR: str(tmp_path / "fired"),
        ONLY_ENV_VAR: f"{NODE_ENV_VAR}={cluster.node2_marker}",
    }
    out, err = tmp_path / "search.out", tmp_path / "search.err"
    started = time.monotonic()
    killed: list[int] = []
    try:
        with open(out, "w") as stdout, open(err, "w") as stderr:
            driver = subprocess.Popen(
                [str(BIN / "autoaug"), *argv, "--address", cluster.gcs_address],
                env={**cluster.env, **armed},
                stdout=stdout,
                stderr=stderr,
                text=True,
                cwd=str(cluster.temp_dir),
                start_new_session=True,
            )
            try:
                # Wait for the event; the loop only notices a driver that ended without reaching it.
                while reader.is_alive() and driver.poll() is None and time.monotonic() - started < 400:
                    reader.join(timeout=5)
                if not at_point:
                    os.close(os.open(cluster.gate, os.O_WRONLY | os.O_NONBLOCK))  # let the reader go
                    pytest.fail(
                        f"no process reached {point} on the second node (driver: {driver.poll()}):\n"
                        + out.read_text()[-3000:]
                        + err.read_text()[-3000:]
                    )
                stalled_pid = int(at_point[0].split()[0])
                assert stalled_pid in cluster.node2_pids()  # the point fired on the second node only...
                environ = Path(f"/proc/{stalled_pid}/environ").read_bytes()
                assert f"{ENV_VAR}={armed[ENV_VAR]}\0".encode() in environ  # ... in a process of this search's job
                (lost_node,) = [n["node_id"] for n in cluster.alive_nodes() if not n["is_head_node"]]
                killed = cluster.kill_node2()
                assert stalled_pid in killed
                cluster.wait_nodes(1)  # Ray saw the node die
                driver.wait(timeout=600)
            finally:
                if driver.poll() is None:
                    os.killpg(driver.pid, signal.SIGKILL)
                    driver.wait()
    finally:
        cluster.kill_node2()
        cluster.wait_nodes(1)
        cluster.start_node2()
    proc = subprocess.CompletedProcess(driver.args, driver.returncode, out.read_text(), err.read_text())
    return NodeLoss(proc, stalled_pid, killed, lost_node, time.monotonic() - started)


def _study_states(study_db: Path) -> dict[str, int]:
    """How many Optuna trials of the studies in ``study_db`` (SQLite) are in each state."""
    import optuna

    storage = f"sqlite:///{study_db}"
    states: dict[str, int] = {}
    for summary in optuna.get_all_study_summaries(storage):
        for t in optuna.load_study(study_name=summary.study_name, storage=storage).get_trials(deepcopy=False):
            states[t.state.name] = states.get(t.state.name, 0) + 1
    return states


def _driver_job(cluster: LocalCluster, name: str) -> str:
    """The Ray job id of the ``autoaug search --address`` driver of the search ``name``."""
    drivers = [
        j
        for j in cluster.api("/api/jobs/")
        if j["type"] == "DRIVER" and f"--name {name} " in (j.get("entrypoint") or "")
    ]
    assert len(drivers) == 1, drivers
    return drivers[0]["job_id"]


@pytest.mark.slow
def test_train_search_survives_losing_the_node_a_trial_runs_on(ray_cluster, cifar_small, job_search, tmp_path):
    from autoaug.policies.store import PolicyStore

    # A name of its own: Ray's job list outlives a test (the test may run twice on one cluster).
    name = f"lost{secrets.token_hex(3)}"
    lost = _search_losing_node2(ray_cluster, _losable_args(cifar_small, tmp_path / name, name), tmp_path)
    assert lost.proc.returncode == 0, lost.proc.stdout[-4000:] + lost.proc.stderr[-4000:]
    # What the user sees: one line for the trial the node took with it, which goes on.
    assert "; retrying from its last checkpoint" in lost.proc.stdout + lost.proc.stderr
    run = tmp_path / name / "runs" / name
    trials = json.loads((run / "result.json").read_text())["provenance"]["trials"]
    assert len(trials) == 2 and all(t["status"] == "completed" and t["epochs"] == 2 for t in trials), trials
    (retried,) = [t for t in trials if t["num_failures"] == 1]  # the lost trial, retried once
    # ... from its first epoch's checkpoint: its last result is the second epoch's, the only one it
    # trained since Tune restored it (the first epoch's line of Tune's log may or may not be kept).
    log = (run / f"trial_{retried['trial_id']}" / "result.json").read_text().splitlines()
    last = json.loads(log[-1])
    assert (last["training_iteration"], last["iterations_since_restore"]) == (2, 1), log
    # ... on the head: its actors were one on the lost node, then one on the head.
    head = [n["node_id"] for n in ray_cluster.alive_nodes() if n["is_head_node"]]
    assert sorted(_trial_nodes(ray_cluster, _driver_job(ray_cluster, name)).values()) == sorted(
        [lost.lost_node, *head * 2]
    )
    # The study has exactly the two trials, finished: none left RUNNING.
    assert _study_states(run / "optuna.db") == {"COMPLETE": 2}

    # The same search without the loss (the same arguments and seed, run as a Ray Job on both nodes)
    # stores the same policy, from the same scores.
    twin = job_search.name
    assert job_search.proc.returncode == 0, job_search.proc.stdout[-4000:] + job_search.proc.stderr[-4000:]
    baseline = json.loads((job_search.work / "runs" / twin / "result.json").read_text())["provenance"]["trials"]
    scores = lambda ts: sorted((json.dumps(t["params"], sort_keys=True), t["score"]) for t in ts)  # noqa: E731
    assert scores(trials) == scores(baseline)
    stored = PolicyStore(str(tmp_path / name / "store")).get(f"{name}@latest").policy
    assert stored.content_hash == PolicyStore(str(job_search.work / "store")).get(f"{twin}@latest").policy.content_hash


@pytest.mark.slow
def test_pba_search_survives_losing_the_node_a_member_runs_on(ray_cluster, cifar_small, tmp_path):
    from autoaug.policies.reference import resolve_schedule
    from autoaug.policies.store import PolicyStore

    argv = [
        *_search_args(cifar_small, tmp_path, name := f"pbaloss{secrets.token_hex(3)}"),
        "--method",
        "pba",
        "--set",
        "pba.population=2",  # a member on each 1-CPU node
        "--set",
        "pba.perturbation_interval=1",
        "--set",
        "pba.quantile=0.5",
        "--set",
        "train.epochs=3",
        "--max-failures",
        "1",
        "--set",
        "reuse_actors=false",  # a member on each node at once: as in _losable_args
    ]
    lost = _search_losing_node2(ray_cluster, argv, tmp_path)
    assert lost.proc.returncode == 0, lost.proc.stdout[-4000:] + lost.proc.stderr[-4000:]
    assert "; retrying from its last checkpoint" in lost.proc.stdout + lost.proc.stderr
    store = PolicyStore(str(tmp_path / "store"))
    record = store.get(f"{name}@latest")
    # The population finished whole: both members, each all its epochs, the lost one retried once.
    trials = record.provenance["trials"]
    assert len(trials) == 2 and all(t["status"] == "completed" and t["epochs"] == 3 for t in trials), trials
    assert sorted(t["num_failures"] for t in trials) == [0, 1]
    assert len(record.provenance["method"]["members"]) == 2
    assert resolve_schedule(f"{name}@latest", store=store).final.content_hash == record.policy.content_hash
    # PBT's exploit decisions follow the order in which members report, which the loss changes: the
    # stored schedule is not compared with a search without the loss (docs/cluster.md).


@pytest.mark.slow
def test_density_search_survives_losing_the_node_a_fold_model_trains_on(ray_cluster, cifar_small, tmp_path):
    from autoaug.policies.store import PolicyStore

    argv = [
        *_search_args(cifar_small, tmp_path, name := f"densloss{secrets.token_hex(3)}"),
        "--method",
        "density",
        "--folds",
        "2",
        "--rounds",
        "1",
        "--trials-per-round",
        "2",
        "--top-per-round",
        "1",
        "--set",
        "train.epochs=4",  # a fold model trains on 128 images, 4 steps an epoch: FOLD_POINT is in its 3rd
    ]
    lost = _search_losing_node2(ray_cluster, argv, tmp_path, FOLD_POINT)
    assert lost.proc.returncode == 0, lost.proc.stdout[-4000:] + lost.proc.stderr[-4000:]
    # The fold model on the lost node is a Ray task: Ray ran it again, from its start, on the head.
    job = _driver_job(ray_cluster, name)
    head = [n["node_id"] for n in ray_cluster.alive_nodes() if n["is_head_node"]]
    folds = sorted(
        (t["attempt_number"], t["state"], t["node_id"])
        for t in ray_cluster.state("tasks", job_id=job)
        if t["name"].startswith(f"autoaug-fold:{name}:")
    )
    assert folds == [(0, "FAILED", lost.lost_node), (0, "FINISHED", *head), (1, "FINISHED", *head)], folds
    assert "fold model 1/2" in lost.proc.stdout and "fold model 2/2" in lost.proc.stdout
    # Then every scoring trial of both folds was run once, and the studies hold no trial RUNNING.
    record = PolicyStore(str(tmp_path / "store")).get(f"{name}@latest")
    trials = record.provenance["trials"]
    assert len(trials) == 4 and all(t["status"] == "completed" for t in trials), trials
    assert _study_states(tmp_path / "runs" / name / "optuna.db") == {"COMPLETE": 4}


@pytest.mark.slow
def test_a_search_job_stopped_saves_its_trials_and_says_how_to_resume(ray_cluster, cifar_small, tmp_path):
    """``autoaug launch stop`` (Ray's job stop: SIGTERM to the job's driver, SIGKILL
    ``RAY_JOB_STOP_WAIT_TIME_S`` later, 60 as ``autoaug launch`` sets it) of a search whose first trial
    has ended (its driver stalled at a failpoint there: the event): the stop waits for the job and
    says STOPPED, ``logs --follow`` exits 1; the driver ends its Tune experiment as Ctrl-C does,
    its log ends with the one line naming the resume command, no native dump from Ray's SIGTERM
    handler; ``--resume`` then finishes the search."""
    autoaug, url = str(BIN / "autoaug"), ray_cluster.dashboard_url
    gate = tmp_path / "gate"
    os.mkfifo(gate)
    name = f"term{secrets.token_hex(3)}"
    args = _search_args(cifar_small, tmp_path, name)
    # One trial at a time, 1 of 4 finished at the stop: with 2, the second trial (one epoch) could end
    # the experiment before Tune saw the stop, and the search finished instead of stopping.
    args[args.index("--num-trials") + 1] = "4"
    args[args.index("--concurrency") + 1] = "1"
    point = f"AUTOAUG_FAILPOINTS=search.after_trial_saved:1=stall({gate})"  # the driver runs on the head: here
    proc = ray_cluster.run(autoaug, "launch", "--address", url, "--no-wait", "--env", point, "--", *args)
    assert proc.returncode == 0, proc.stderr
    job_id = proc.stdout.strip().splitlines()[-1]
    at_point: list[str] = []

    def meet() -> None:  # the job's driver writes "PID NAME" once its first trial has ended (the event)
        with open(gate) as pipe:
            at_point.append(pipe.read())

    reader = threading.Thread(target=meet, daemon=True)
    reader.start()
    status = "RUNNING"  # the loop only notices a job that ended without reaching the point
    while reader.is_alive() and status in ("PENDING", "RUNNING"):
        reader.join(timeout=5)
        status = ray_cluster.api(f"/api/jobs/{job_id}")["status"]
    if not at_point:
        os.close(os.open(gate, os.O_WRONLY | os.O_NONBLOCK))  # let the reader go
        logs = ray_cluster.run(autoaug, "launch", "logs", job_id, "--address", url)
        pytest.fail(f"the job ended ({status}) before its first trial did:\n{logs.stdout[-3000:]}")
    assert at_point[0].split()[1] == "search.after_trial_saved"
    # The stop asked for first (Ray's job stop sends the driver its SIGTERM a moment after it
    # returns), the driver released after: released before, it could start and finish the second
    # trial while the stop command was still starting.
    asked = ray_cluster.run(autoaug, "launch", "stop", job_id, "--no-wait", "--address", url)
    assert asked.returncode == 0 and f"requested job {job_id} to stop" in asked.stdout, asked.stderr
    with open(gate, "w"):  # the driver, released, goes on to stop: it saves its trials first
        pass
    # `launch stop` waits for the job to end
    stop = ray_cluster.run(autoaug, "launch", "stop", job_id, "--timeout", "300", "--address", url)
    stop_out, stop_err = stop.stdout, stop.stderr
    assert stop.returncode == 0 and f"job {job_id} STOPPED" in stop_out, stop_out + stop_err
    followed = ray_cluster.run(autoaug, "launch", "logs", job_id, "--follow", "--address", url)
    assert followed.returncode == 1 and "STOPPED" in followed.stderr, followed.stderr
    lines = [line for line in followed.stdout.splitlines() if line.startswith("autoaug:")]
    assert lines == [
        f"autoaug: terminated (SIGTERM): search {name!r} stopped with 1 of 4 trials finished; resume it with: "
        f"autoaug search --resume {name} --storage {tmp_path / 'runs'}"
    ], followed.stdout[-3000:]
    assert "SIGTERM received" not in followed.stdout and "Traceback" not in followed.stdout
    resumed = ray_cluster.run(
        autoaug, "search", "--resume", name, "--storage", str(tmp_path / "runs"), "--address", ray_cluster.gcs_address
    )
    assert resumed.returncode == 0 and f"stored as {name}@1" in resumed.stdout, resumed.stderr[-3000:]


@pytest.mark.slow
def test_no_wait_logs_and_list(ray_cluster, tmp_path):
    """``--no-wait``, ``logs --follow`` and ``list`` of a job that ends by itself (a running job
    stopped: :func:`test_a_search_job_stopped_saves_its_trials_and_says_how_to_resume`)."""
    from autoaug.policies import presets

    autoaug = str(BIN / "autoaug")
    url = ray_cluster.dashboard_url
    # --no-wait prints the job id; a local policy JSON named by the command is shipped with the job.
    policy_file = tmp_path / "found.json"
    policy_file.write_text(presets.resolve("autoaugment-svhn").with_name("found").to_json())
    proc = ray_cluster.run(autoaug, "launch", "--address", url, "--no-wait", "--", "policies", "show", str(policy_file))
    assert proc.returncode == 0, proc.stderr
    job_id = proc.stdout.strip().splitlines()[-1]
    assert "shipping" in proc.stderr and "_autoaug_files/0/found.json" in proc.stderr
    followed = ray_cluster.run(autoaug, "launch", "logs", job_id, "--follow", "--address", url)
    assert followed.returncode == 0, followed.stderr
    assert "_autoaug_files/0/found.json" in followed.stdout and "ShearX" in followed.stdout
    listed = ray_cluster.run(autoaug, "launch", "list", "--address", url)
    assert job_id in listed.stdout and "SUCCEEDED" in listed.stdout
