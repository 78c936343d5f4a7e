"""Unit tests of launch.cluster (no Ray cluster needed; see test_cluster_ray.py for the real one)."""
from __future__ import annotations

import socket
from pathlib import Path

import pytest

from launch import cluster
from launch.cluster import ClusterError, parse_address
from launch.errors import UserError


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


@pytest.mark.parametrize("text, fragment", [("", "empty"), ("s3://bucket", "unsupported scheme"),
                                            ("head:99999", "out of range"), ("a b:1", "malformed")])
def test_parse_address_rejects_bad_input(text, fragment):
    with pytest.raises(ClusterError, match=fragment):
        parse_address(text)


def test_cluster_error_is_a_user_error():
    assert issubclass(ClusterError, UserError)


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


def test_project_runtime_env_ships_the_four_packages(tmp_path):
    env = cluster.project_runtime_env(working_dir=tmp_path, env_vars={"A": "1"}, excludes=["data/"])
    names = sorted(Path(p).name for p in env["py_modules"])
    assert names == sorted(cluster.PROJECT_PACKAGES)
    for path in env["py_modules"]:
        assert (Path(path) / "__init__.py").is_file()
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
    info = cluster.ClusterInfo(address="10.0.0.5:6379", embedded=False, num_nodes=3,
                               resources={"CPU": 48.0, "GPU": 4.0})
    assert info.describe() == "Ray cluster at 10.0.0.5:6379: 3 nodes, 48 CPUs, 4 GPUs"
    local = cluster.ClusterInfo(address=None, embedded=True, num_nodes=1, resources={"CPU": 2.0})
    assert local.describe() == "local Ray (embedded): 1 node, 2 CPUs, 0 GPUs"
