"""A real two-node Ray cluster on this machine: ``autoaug launch`` (Ray Jobs) and
``autoaug search --address`` run smoke searches on it, and Ray's own records show where the trials ran.

The cluster is started with ``ray start --block`` processes (head: 1 CPU, second node: 1 CPU and a
custom resource ``node2``) on 127.0.0.1 (dashboard/job server) with free ports, a private temp
dir and token authentication (a fresh ``RAY_AUTH_TOKEN`` given to every process that joins or
talks to it). Teardown stops exactly these processes: SIGTERM to the ``ray start --block``
processes (which stop their node's raylet, GCS, dashboard and workers), then SIGKILL to any
process still carrying this cluster's token in its environment. ``ray stop`` is deliberately
not used: it kills every Ray process on the machine, including other users' clusters.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
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
    procs: list[subprocess.Popen] = field(default_factory=list)
    logs: list[Path] = field(default_factory=list)

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

    def stop(self) -> None:
        for proc in reversed(self.procs):  # the second node first, the head last
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 40
        for proc in reversed(self.procs):
            try:
                proc.wait(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)  # the process group we created for this node
                proc.wait(timeout=10)
        self._kill_leftovers()
        shutil.rmtree(self.temp_dir, ignore_errors=True)

    def _kill_leftovers(self) -> None:
        """SIGKILL any process that still carries this cluster's unique token (workers, agents)."""
        marker = f"RAY_AUTH_TOKEN={self.token}".encode() + b"\0"
        for entry in Path("/proc").glob("[0-9]*"):
            try:
                if marker in (entry / "environ").read_bytes() and int(entry.name) != os.getpid():
                    os.kill(int(entry.name), signal.SIGKILL)
            except (OSError, ValueError):
                continue


def start_cluster() -> LocalCluster:
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
    (gcs, dash, client, agent1, agent2, metrics1, metrics2) = _free_ports(7)
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
        f"--dashboard-agent-listen-port={agent2}",
        f"--metrics-export-port={metrics2}",
        *common,
    ]
    try:
        for name, argv in (("head", head), ("node2", second)):
            log = temp_dir / f"{name}.log"
            cluster.logs.append(log)
            with open(log, "wb") as out:
                cluster.procs.append(
                    subprocess.Popen(
                        argv, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, cwd=str(temp_dir)
                    )
                )
            want = 1 if name == "head" else 2
            deadline = time.monotonic() + 120
            while True:
                if cluster.procs[-1].poll() is not None:
                    raise RuntimeError(f"`ray start` ({name}) exited early:\n{cluster.log_tail()}")
                try:
                    if len(cluster.alive_nodes()) >= want:
                        break
                except OSError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the Ray {name} did not come up within 120 s:\n{cluster.log_tail()}")
                time.sleep(1.0)
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


@pytest.mark.slow
def test_launch_runs_a_search_as_a_ray_job_on_both_nodes(ray_cluster, cifar_small, tmp_path):
    from autoaug.policies.store import PolicyStore

    autoaug = str(BIN / "autoaug")
    job_id = f"autoaug-test-{secrets.token_hex(4)}"
    proc = ray_cluster.run(
        autoaug,
        "launch",
        "--address",
        ray_cluster.dashboard_url,
        "--job-id",
        job_id,
        "--",
        *_search_args(cifar_small, tmp_path, "jobsearch"),
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert f"job {job_id} SUCCEEDED" in proc.stderr
    assert "stored as jobsearch@1" in proc.stdout  # the search's own output, streamed from the job

    record = PolicyStore(str(tmp_path / "store")).get("jobsearch@latest")
    assert record.version == 1 and len(record.policy.sub_policies) > 0

    # Ray's records: the job ran `python -m autoaug.launch.cli search` on the cluster and succeeded...
    job = ray_cluster.api(f"/api/jobs/{job_id}")
    assert job["status"] == "SUCCEEDED" and "-m autoaug.launch.cli search" in job["entrypoint"]
    assert len(job["runtime_env"]["py_modules"]) == 1  # the project, shipped as one autoaug package
    # ... and its Tune trial actors ran on both nodes.
    nodes = _trial_nodes(ray_cluster, job["job_id"])
    assert len(nodes) >= 2, nodes
    assert set(nodes.values()) == {n["node_id"] for n in ray_cluster.alive_nodes()}

    status = ray_cluster.run(autoaug, "launch", "status", job_id, "--address", ray_cluster.dashboard_url)
    assert status.returncode == 0 and "SUCCEEDED" in status.stdout


@pytest.mark.slow
def test_density_search_with_address_trains_fold_models_and_scores_on_both_nodes(ray_cluster, cifar_small, tmp_path):
    """``autoaug search --address`` (the driver an ordinary process joining the cluster; for the
    training method's trials, placed on both nodes through a Ray Job, see
    test_launch_runs_a_search_as_a_ray_job_on_both_nodes; PBA's below)."""
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
def test_pba_search_with_address_runs_its_population_on_both_nodes(ray_cluster, cifar_small, tmp_path):
    from autoaug.policies.reference import resolve_schedule
    from autoaug.policies.store import PolicyStore

    proc = ray_cluster.run(
        str(BIN / "autoaug"),
        *_search_args(cifar_small, tmp_path, "pbaaddr"),
        "--method",
        "pba",
        "--set",
        "pba.population=3",
        "--set",
        "pba.perturbation_interval=1",
        "--set",
        "pba.quantile=0.5",
        "--set",
        "train.epochs=3",
        "--address",
        ray_cluster.gcs_address,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    store = PolicyStore(str(tmp_path / "store"))
    record = store.get("pbaaddr@latest")
    method = record.provenance["method"]
    assert method["name"] == "pba" and len(method["members"]) == 3
    assert resolve_schedule("pbaaddr@latest", store=store).final.content_hash == record.policy.content_hash

    drivers = [
        j for j in ray_cluster.api("/api/jobs/") if j["type"] == "DRIVER" and "pbaaddr" in (j.get("entrypoint") or "")
    ]
    assert len(drivers) == 1, drivers
    # The members' trial actors ran on both nodes.
    assert set(_trial_nodes(ray_cluster, drivers[0]["job_id"]).values()) == {
        n["node_id"] for n in ray_cluster.alive_nodes()
    }


@pytest.mark.slow
def test_no_wait_logs_list_and_stop(ray_cluster, cifar_small, tmp_path):
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

    # Stopping a running job: STOPPED, and following it exits with status 1.
    work = tmp_path / "stopped"
    proc = ray_cluster.run(
        autoaug,
        "launch",
        "--address",
        url,
        "--no-wait",
        "--",
        "search",
        "--preset",
        "smoke",
        "--data",
        str(cifar_small),
        "--name",
        "stopped",
        "--num-trials",
        "50",
        "--storage",
        str(work / "runs"),
        "--store",
        str(work / "store"),
    )
    assert proc.returncode == 0, proc.stderr
    job_id = proc.stdout.strip().splitlines()[-1]
    stopped = ray_cluster.run(autoaug, "launch", "stop", job_id, "--address", url)
    assert stopped.returncode == 0, stopped.stderr
    assert f"job {job_id} STOPPED" in stopped.stdout
    followed = ray_cluster.run(autoaug, "launch", "logs", job_id, "--follow", "--address", url)
    assert followed.returncode == 1 and "STOPPED" in followed.stderr


@pytest.mark.slow
def test_clear_errors_without_the_token(ray_cluster, tmp_path):
    env = {k: v for k, v in ray_cluster.env.items() if not k.startswith("RAY_AUTH")}
    env["HOME"] = str(tmp_path)  # no ~/.ray/auth_token either
    proc = ray_cluster.run(str(BIN / "autoaug"), "launch", "list", "--address", ray_cluster.dashboard_url, env=env)
    assert proc.returncode == 1  # a cluster that refuses this process: ClusterError (docs/cluster.md)
    assert "refused the request" in proc.stderr and "RAY_AUTH_TOKEN" in proc.stderr
    assert "Traceback" not in proc.stderr
