"""A (smoke) search whose run storage (``--storage``) and policy store (``--store``) are ``s3://``
URIs on an S3-compatible server (moto on 127.0.0.1, tests/conftest.py); Ray's workers reach it
through ``AWS_ENDPOINT_URL`` inherited from the driver."""

from __future__ import annotations

import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from autoaug.launch.cli import main


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_search_with_s3_storage_and_store(tmp_path, cifar_small, s3_bucket, capsys):
    from autoaug.policies.store import PolicyStore

    data = tmp_path / "d.parquet"
    table = pq.read_table(cifar_small)  # sorted by class: 300 rows spread over all 10
    pq.write_table(table.take(list(range(0, len(table), len(table) // 300))[:300]), data)
    storage, store = f"s3://{s3_bucket}/runs", f"s3://{s3_bucket}/policies"
    argv = [
        "search",
        "--preset",
        "smoke",
        "--name",
        "s3smoke",
        "--num-trials",
        "2",
        "--concurrency",
        "1",
        "--data",
        str(data),
        "--set",
        "train.epochs=1",
        "--set",
        "train.train_size=64",
        "--set",
        "train.val_size=32",
        "--set",
        "train.batch_size=32",
        "--storage",
        storage,
        "--store",
        store,
        "--optuna-storage",
        f"sqlite:///{tmp_path / 'study.db'}",
    ]
    assert main(argv) == 0, capsys.readouterr().err
    assert f"stored as s3smoke@1 in {store}" in capsys.readouterr().out
    stored = PolicyStore(store).get("s3smoke@1")
    assert len(stored.provenance["trials"]) == 2
    fs, root = pafs.FileSystem.from_uri(f"{storage}/s3smoke")
    names = {i.base_name for i in fs.get_file_info(pafs.FileSelector(root))}
    assert {"search_config.json", "result.json"} <= names
    # the search can be reported again from the object store: a resume of a finished run
    assert main(["search", "--resume", "s3smoke", "--storage", storage, "--store", store]) == 0
