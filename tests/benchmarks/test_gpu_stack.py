"""benchmarks/gpu_stack.py: what the stack for the lent GPU machine leaves out (the image's own
distributions, caches, Ray's jars, other Pythons' extension modules) and how it is cut to travel."""

from __future__ import annotations


def _dist(target, name, version, files):
    info = target / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    for f in files:
        (target / f).parent.mkdir(parents=True, exist_ok=True)
        (target / f).write_text("x")
    (info / "RECORD").write_text("".join(f"{f},sha256=,1\n" for f in files))


def test_the_stack_leaves_out_what_the_image_has_and_what_no_python_312_loads(load_benchmark, tmp_path):
    gs = load_benchmark("gpu_stack")
    site = tmp_path / "site"
    _dist(site, "numpy", "2.3.1", ["numpy/__init__.py", "numpy/core/x.py", "bin/f2py"])
    _dist(site, "typing_extensions", "4.15.0", ["typing_extensions.py"])
    _dist(site, "ray", "2.60.0", ["ray/__init__.py", "ray/jars/ray.jar", "ray/__pycache__/a.pyc"])
    _dist(site, "nvidia_dali_cuda130", "2.4.0", ["nvidia/dali/b.cpython-311-x86_64-linux-gnu.so"])
    (site / "nvidia/dali/b.cpython-312-x86_64-linux-gnu.so").write_text("x")
    removed = gs.prune(site)
    assert removed == ["numpy", "typing-extensions"]
    left = sorted(str(p.relative_to(site)) for p in site.rglob("*") if p.is_file())
    assert left == [
        "nvidia/dali/b.cpython-312-x86_64-linux-gnu.so",
        "nvidia_dali_cuda130-2.4.0.dist-info/RECORD",
        "ray-2.60.0.dist-info/RECORD",
        "ray/__init__.py",
    ]
    assert not (site / "numpy").exists() and not (site / "bin").exists()  # (emptied folders go too)


def test_the_archive_is_cut_into_parts_that_join_back(load_benchmark, tmp_path):
    gs = load_benchmark("gpu_stack")
    archive = tmp_path / "stack.tar.xz"
    data = bytes(range(256)) * 40
    archive.write_bytes(data)
    parts = gs.split(archive, part_bytes=4000)
    assert [p.name for p in parts] == ["stack.tar.xz.000", "stack.tar.xz.001", "stack.tar.xz.002"]
    assert b"".join(p.read_bytes() for p in parts) == data and not archive.exists()
    each, last = gs.device_command(".gpu-stack").splitlines()
    assert each.startswith("mkdir -p /tmp/parts && cp .gpu-stack/stack.tar.xz.* /tmp/parts/")
    assert last.startswith("mkdir -p /tmp/site && cat /tmp/parts/stack.tar.xz.* | xz -d | tar -x -C /tmp/site")


def test_the_data_subset_keeps_every_nth_image_of_each_split_and_the_class_names(load_benchmark, cifar_dir, tmp_path):
    import pyarrow.parquet as pq

    gs = load_benchmark("gpu_stack")
    assert gs.main([str(tmp_path / "out"), "--data", str(cifar_dir), "--every", "4", "--data-only"]) == 0
    for name in ("train.parquet", "test.parquet"):
        src = pq.read_table(cifar_dir / name)
        sub = pq.read_table(tmp_path / "out" / "data" / name)
        assert sub.num_rows == (src.num_rows + 3) // 4
        assert sub.column("label").to_pylist() == src.column("label").to_pylist()[::4]
        assert sub.schema.metadata == src.schema.metadata
