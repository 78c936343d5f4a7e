"""Unit tests of core.ray_session (no Ray cluster needed; see test_cluster_ray.py for the real one)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from autoaug.core import ray_session as cluster
from autoaug.core.errors import ClusterError
from autoaug.core.ray_session import parse_address


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when the socket is


@pytest.mark.parametrize(
    "text, kind, host, port",
    [
        ("10.0.0.5:6379", "gcs", "10.0.0.5", 6379),
        ("head", "gcs", "head", 6379),
        ("ray://head:10001", "client", "head", 10001),
        ("ray://head", "client", "head", 10001),
        ("http://127.0.0.1:8265", "dashboard", "127.0.0.1", 8265),
        ("https://ray.example.com", "dashboard", "ray.example.com", 443),
        ("auto", "auto", None, None),
    ],
)
def test_parse_address_kinds(text, kind, host, port):
    parsed = parse_address(text)
    assert (parsed.kind, parsed.host, parsed.port) == (kind, host, port)


def test_parse_address_bare_host_port_is_a_dashboard_for_jobs():
    parsed = parse_address("127.0.0.1:8265", default_kind="dashboard")
    assert parsed.kind == "dashboard" and parsed.url == "http://127.0.0.1:8265"


@pytest.mark.parametrize(
    "text, fragment",
    [("", "empty"), ("s3://bucket", "unsupported scheme"), ("head:99999", "out of range"), ("a b:1", "malformed")],
)
def test_parse_address_rejects_bad_input(text, fragment):
    with pytest.raises(ClusterError, match=fragment):
        parse_address(text)


def test_check_reachable_names_the_address():
    port = _closed_port()
    with pytest.raises(ClusterError, match=f"cannot reach the Ray cluster at 127.0.0.1:{port}"):
        cluster.check_reachable("127.0.0.1", port, timeout=2)


def test_connect_refuses_a_dashboard_address_without_touching_ray():
    with pytest.raises(ClusterError, match="dashboard / job server address.*autoaug launch"):
        cluster.connect("http://127.0.0.1:8265")


def test_connect_fails_fast_for_an_unreachable_head():
    port = _closed_port()
    with pytest.raises(ClusterError, match=f"127.0.0.1:{port}"):
        cluster.connect(f"127.0.0.1:{port}", timeout=2)


def test_connect_refuses_resources_for_an_existing_cluster():
    with pytest.raises(ClusterError, match="num_cpus/num_gpus"):
        cluster.connect("ray://127.0.0.1:1", num_cpus=2)


def test_dashboard_url_defaults_from_environment(monkeypatch):
    monkeypatch.delenv("RAY_API_SERVER_ADDRESS", raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    with pytest.raises(ClusterError, match="--address http://HEAD:8265"):
        cluster.dashboard_url(None)
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.5:6379")  # a GCS address is not a job server
    with pytest.raises(ClusterError, match="no Ray job server address"):
        cluster.dashboard_url(None)
    monkeypatch.setenv("RAY_API_SERVER_ADDRESS", "http://head:8265/")
    assert cluster.dashboard_url(None) == "http://head:8265"
    assert cluster.dashboard_url("other:8266") == "http://other:8266"


def test_dashboard_url_refuses_gcs_and_client_addresses():
    with pytest.raises(ClusterError, match="not a Ray job server address"):
        cluster.dashboard_url("ray://head:10001")


def test_job_client_unreachable_server():
    port = _closed_port()
    with pytest.raises(ClusterError, match="Ray job server"):
        cluster.job_client(f"http://127.0.0.1:{port}", timeout=2)


def test_project_runtime_env_ships_the_project_under_its_import_name(tmp_path):
    env = cluster.project_runtime_env(working_dir=tmp_path, env_vars={"A": "1"}, excludes=["data/"])
    shipped, metadata = env["py_modules"]
    assert Path(shipped).name == "autoaug" and Path(metadata).name.startswith("autoaug-")
    for name in cluster.PROJECT_PACKAGES:
        assert (Path(shipped) / name / "__init__.py").is_file()
    # A worker with the shipped folder first on sys.path (as Ray puts py_modules) imports
    # autoaug.* from it, not from an installation.
    import subprocess
    import sys

    code = (
        f"import sys; sys.path.insert(0, {str(Path(shipped).parent)!r}); import autoaug.search.methods.train.trial as m; "
        "print(m.__file__)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().startswith(str(shipped)), result.stdout
    # ... and, without the installation's site-packages, finds the project's entry points (the
    # search methods) in the metadata shipped with it.
    code = (
        f"import sys; sys.path.insert(0, {str(Path(metadata).parent)!r}); from importlib.metadata import entry_points; "
        "print(sorted(e.value for e in entry_points(group='autoaug.methods')))"
    )
    result = subprocess.run(
        [sys.executable, "-S", "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "autoaug.search.methods.train.method:METHOD" in result.stdout, result.stdout
    for pattern in (".venv", ".git", "runs", "__pycache__", "data/"):
        assert pattern in env["excludes"]
    assert env["working_dir"] == str(tmp_path.resolve())
    assert env["env_vars"] == {"A": "1"}
    # Extending another runtime_env keeps what it had and does not duplicate.
    again = cluster.project_runtime_env(base=env, env_vars={"B": "2"})
    assert again["py_modules"] == env["py_modules"]
    assert again["env_vars"] == {"A": "1", "B": "2"}
    assert len(again["excludes"]) == len(set(again["excludes"]))


def test_project_runtime_env_rejects_bad_input(tmp_path):
    with pytest.raises(ClusterError, match="does not exist"):
        cluster.project_runtime_env(working_dir=tmp_path / "missing")
    with pytest.raises(ClusterError, match="invalid environment variable name '1X'"):
        cluster.project_runtime_env(env_vars={"1X": "v"})


def test_cluster_info_describe():
    info = cluster.ClusterInfo(
        address="10.0.0.5:6379", embedded=False, num_nodes=3, resources={"CPU": 48.0, "GPU": 4.0}
    )
    assert info.describe() == "Ray cluster at 10.0.0.5:6379: 3 nodes, 48 CPUs, 4 GPUs"
    local = cluster.ClusterInfo(address=None, embedded=True, num_nodes=1, resources={"CPU": 2.0})
    assert local.describe() == "local Ray (embedded): 1 node, 2 CPUs, 0 GPUs"


# ----------------------------------------------------------------------------------------------
# autoaug launch without a cluster: path rewriting and the submit/follow flow on a fake client


from autoaug.launch import launch_run  # noqa: E402
from autoaug.launch.cli import main  # noqa: E402


def test_prepare_command_ships_small_files_and_absolutises_paths(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cfg.yaml").write_text("num_trials: 2\n")
    (tmp_path / "data").mkdir()
    big = tmp_path / "big.parquet"
    big.write_bytes(b"0" * (launch_run.MAX_SHIPPED_FILE_BYTES + 1))
    args = [
        "search",
        "--config",
        "cfg.yaml",
        "--data",
        "data",
        "--storage",
        "runs",
        "--name",
        "demo",
        "--store=s3://bucket/policies",
        "--set",
        "train.epochs=2",
        "--test-data",
        str(big),
        "--policy",
        "randaugment:n=2,m=9",
        "--extra=cfg.yaml",
    ]
    prepared = launch_run.prepare_command(args)
    try:
        shipped = "_autoaug_files/0/cfg.yaml"
        assert prepared.args == [
            "search",
            "--config",
            shipped,
            "--data",
            str(tmp_path / "data"),
            "--storage",
            str(tmp_path / "runs"),
            "--name",
            "demo",
            "--store=s3://bucket/policies",
            "--set",
            "train.epochs=2",
            "--test-data",
            str(big),
            "--policy",
            "randaugment:n=2,m=9",
            f"--extra={shipped}",
        ]
        assert prepared.working_dir == prepared.staged_dir
        assert (Path(prepared.working_dir) / shipped).read_text() == "num_trials: 2\n"
        notes = "\n".join(prepared.notes)
        assert "shipping cfg.yaml" in notes and "data is a local folder" in notes and "runs is a local path" in notes
    finally:
        prepared.cleanup()
    assert not Path(prepared.working_dir).exists()


def test_prepare_command_with_working_dir_and_keep_paths(tmp_path, monkeypatch):
    project = tmp_path / "project"
    (project / "configs").mkdir(parents=True)
    (project / "configs" / "s.yaml").write_text("{}\n")
    outside = tmp_path / "outside.json"
    outside.write_text("{}")
    monkeypatch.chdir(project)
    prepared = launch_run.prepare_command(
        ["search", "--config", "configs/s.yaml", "--policy", str(outside)], working_dir=project
    )
    assert prepared.args == ["search", "--config", "configs/s.yaml", "--policy", str(outside)]
    assert prepared.working_dir == str(project) and prepared.staged_dir is None
    assert any("outside --working-dir" in n for n in prepared.notes)
    kept = launch_run.prepare_command(["search", "--storage", "runs"], keep_paths=True)
    assert kept.args == ["search", "--storage", "runs"] and kept.working_dir is None


class _Status:
    def __init__(self, value):
        self.value = value


class _Info:
    def __init__(self, job_id, status, entrypoint=""):
        self.submission_id, self.job_id, self.status = job_id, "02000000", _Status(status)
        self.message = f"Job {status.lower()}"
        self.entrypoint, self.start_time, self.end_time = entrypoint, 1_700_000_000_000, None
        self.driver_exit_code, self.metadata = None, {}


class FakeJobClient:
    """Stands in for ``JobSubmissionClient``: records submissions, replays a job's life."""

    def __init__(self, final_status="SUCCEEDED", lines=("epoch 1\n", "done\n")):
        self.final_status, self.lines, self.submitted, self.stopped = final_status, lines, [], []

    def get_address(self):
        return "http://fake:8265"

    def submit_job(self, **kwargs):
        self.submitted.append(kwargs)
        return kwargs["submission_id"]

    async def tail_job_logs(self, job_id):
        for line in self.lines:
            yield line

    def get_job_info(self, job_id):
        if job_id == "nope":
            raise RuntimeError("Request failed with status code 404: Job nope does not exist.")
        entry = self.submitted[-1]["entrypoint"] if self.submitted else ""
        return _Info(job_id, "STOPPED" if job_id in self.stopped else self.final_status, entry)

    def get_job_logs(self, job_id):
        return "".join(self.lines)

    def stop_job(self, job_id):
        self.stopped.append(job_id)
        return True


@pytest.fixture()
def fake_client(monkeypatch):
    holder = {}

    def make(address=None, **kwargs):
        holder["address"] = cluster.dashboard_url(address)
        return holder["client"]

    monkeypatch.setattr(cluster, "job_client", make)
    return holder


@pytest.mark.parametrize("final, code", [("SUCCEEDED", 0), ("FAILED", 1), ("STOPPED", 1)])
def test_launch_streams_logs_and_exits_with_the_job_status(fake_client, capsys, final, code):
    fake_client["client"] = client = FakeJobClient(final)
    rc = main(
        [
            "launch",
            "--address",
            "http://head:8265",
            "--env",
            "A=1",
            "--job-id",
            "j1",
            "--",
            "policies",
            "list",
            "--store",
            "s3://bucket/p",
        ]
    )
    assert rc == code
    out, err = capsys.readouterr()
    assert out == "epoch 1\ndone\n"
    assert f"job j1 {final}" in err
    (sub,) = client.submitted
    assert sub["entrypoint"] == "python -m autoaug.launch.cli policies list --store s3://bucket/p"
    assert sub["submission_id"] == "j1" and sub["metadata"]["autoaug_command"] == "policies"
    env = sub["runtime_env"]
    assert [Path(p).name.split("-")[0] for p in env["py_modules"]] == [
        "autoaug",
        "autoaug",
    ]  # the package, its metadata
    assert env["env_vars"] == {"PYTHONUNBUFFERED": "1", "RAY_JOB_STOP_WAIT_TIME_S": "60", "A": "1"}
    assert ".venv" in env["excludes"] and "working_dir" not in env
    assert fake_client["address"] == "http://head:8265"


def test_launch_no_wait_prints_the_job_id(fake_client, capsys):
    fake_client["client"] = client = FakeJobClient()
    assert main(["launch", "--address", "head:8265", "--no-wait", "--", "policies", "list"]) == 0
    out, err = capsys.readouterr()
    job_id = out.strip()
    assert job_id.startswith("autoaug-policies-") and client.submitted[0]["submission_id"] == job_id
    assert f"autoaug launch logs {job_id} --follow" in err
    assert fake_client["address"] == "http://head:8265"


def test_launch_job_actions(fake_client, capsys):
    fake_client["client"] = client = FakeJobClient("RUNNING")
    client.submitted.append({"entrypoint": "python -m autoaug.launch.cli search"})
    assert main(["launch", "status", "j2", "--address", "http://head:8265"]) == 0
    assert "RUNNING" in capsys.readouterr().out
    assert main(["launch", "--address", "http://head:8265", "stop", "j2"]) == 0
    assert client.stopped == ["j2"] and "job j2 STOPPED" in capsys.readouterr().out
    assert main(["launch", "logs", "j2", "--address", "http://head:8265"]) == 0
    assert capsys.readouterr().out == "epoch 1\ndone\n"
    assert main(["launch", "status", "nope", "--address", "http://head:8265"]) == 2
    assert "no job 'nope'" in capsys.readouterr().err


def test_launch_refuses_bad_commands_before_submitting(fake_client, capsys):
    fake_client["client"] = client = FakeJobClient()
    assert main(["launch", "--address", "http://head:8265", "--", "launch", "list"]) == 2
    assert "cannot launch 'launch'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:  # argparse rejects the command's own flags locally
        main(["launch", "--address", "http://head:8265", "--", "policies", "--bogus"])
    assert exc.value.code == 2
    assert main(["launch", "--address", "http://head:8265", "--env", "NOEQUALS", "--", "policies", "list"]) == 2
    assert "expected KEY=VALUE" in capsys.readouterr().err
    assert client.submitted == []


def test_a_local_ray_that_cannot_start_is_one_cluster_error(monkeypatch):
    import ray

    def timed_out(*args, **kwargs):
        raise Exception("The current node timed out during startup. This could happen because the GCS is overloaded.")

    monkeypatch.setattr(ray, "init", timed_out)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    with pytest.raises(ClusterError, match=r"could not start a local Ray instance: The current node timed out"):
        cluster.local(1, 0)
