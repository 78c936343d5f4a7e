"""``autoaug policies``: every sub-command on a store made here, in-process and as a real process."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from autoaug.launch.cli import main
from autoaug.policies import presets
from autoaug.policies.policy import Policy
from autoaug.policies.store import PolicyStore

REPO = Path(__file__).resolve().parents[2]

V1 = Policy("found", 10, [[("Rotate", 0.7, 2), ("TranslateX", 0.3, 9)], [("Invert", 0.1, 0), ("Contrast", 0.2, 6)]])
V2 = Policy(
    "found",
    10,
    [
        [("Rotate", 0.8, 2), ("TranslateX", 0.3, 9)],
        [("Invert", 0.1, 0), ("Contrast", 0.2, 6)],
        [("Color", 0.9, 9), ("Brightness", 0.1, 3)],
    ],
)


@pytest.fixture
def store(tmp_path, monkeypatch) -> PolicyStore:
    monkeypatch.delenv("AUTOAUG_STORE", raising=False)
    s = PolicyStore(str(tmp_path / "store"))
    s.save(V1, "cifar10-wrn", metadata={"search": {"trials": 32}, "dataset_fingerprint": "abc"})
    s.save(V2, "cifar10-wrn", metadata={"search": {"trials": 64}})
    s.save(presets.resolve("autoaugment-svhn"), "svhn")
    s.attach_evaluation("cifar10-wrn@2", {"model": "wrn-40-2", "test_accuracy": [0.961, 0.963]})
    return s


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# ---------------------------------------------------------------------------------------------


def test_list(store, capsys):
    code, out, err = run(capsys, "policies", "list", "--store", store.uri)
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0] == f"2 policies in {store.uri}"
    assert lines[1].split() == ["NAME", "LATEST", "VERSIONS", "CREATED", "UPDATED", "HASH"]
    assert lines[2].split()[:3] == ["cifar10-wrn", "@2", "2"] and lines[2].split()[-1] == V2.content_hash[:12]
    assert lines[3].split()[:3] == ["svhn", "@1", "1"]
    # --store before the sub-command works too
    assert run(capsys, "policies", "--store", store.uri, "list")[1] == out


def test_list_name_and_json(store, capsys):
    code, out, _ = run(capsys, "policies", "list", "cifar10-wrn", "--store", store.uri)
    assert code == 0
    rows = [line.split() for line in out.splitlines()[2:]]
    assert [r[0] for r in rows] == ["@1", "@2"]
    assert rows[1][-3:] == [V2.content_hash[:12], "3", "1"]  # hash, sub-policies, evaluations
    code, out, _ = run(capsys, "policies", "list", "--json", "--store", store.uri)
    data = json.loads(out)
    assert [(d["name"], d["latest_version"], d["num_versions"]) for d in data] == [
        ("cifar10-wrn", 2, 2),
        ("svhn", 1, 1),
    ]
    code, out, _ = run(capsys, "policies", "list", "cifar10-wrn", "--json", "--store", store.uri)
    data = json.loads(out)
    assert [d["ref"] for d in data] == ["cifar10-wrn@1", "cifar10-wrn@2"]
    assert Policy.from_dict(data[0]["policy"]) == V1


def test_list_prints_the_same_from_the_index_as_from_the_version_files(store, capsys):
    """A local store is listed from its index (no pyarrow); without it, from the version files
    (a store saved before the index existed): the same table and the same --json, byte for byte;
    `policies check` writes the index such a store lacks."""
    import shutil

    indexed = [run(capsys, "policies", "list", *flags, "--store", store.uri)[1] for flags in ([], ["--json"])]
    for name in store.names():
        shutil.rmtree(os.path.join(store.uri, name, "_index"))
    assert [run(capsys, "policies", "list", *flags, "--store", store.uri)[1] for flags in ([], ["--json"])] == indexed
    code, out, _ = run(capsys, "policies", "check", "--store", store.uri)
    assert code == 0 and "indexed 3 version(s) saved before the store had an index" in out
    assert json.loads(run(capsys, "policies", "check", "--json", "--store", store.uri)[1])["indexed"] == []
    assert [run(capsys, "policies", "list", *flags, "--store", store.uri)[1] for flags in ([], ["--json"])] == indexed


def test_list_empty_store_and_default_store(tmp_path, capsys, monkeypatch):
    (tmp_path / "empty").mkdir()
    monkeypatch.setenv("AUTOAUG_STORE", str(tmp_path / "empty"))
    code, out, _ = run(capsys, "policies", "list")
    assert code == 0 and out.strip() == f"no policies in {tmp_path / 'empty'}"


@pytest.mark.parametrize(
    "argv",
    [["list"], ["list", "x"], ["show", "x"], ["show", "x@1"], ["export", "abcdef12"], ["diff", "x", "y"], ["check"]],
)
def test_read_commands_on_a_store_that_does_not_exist_exit_2(tmp_path, capsys, argv):
    missing = tmp_path / "nope"
    code, out, err = run(capsys, "policies", *argv, "--store", str(missing))
    assert code == 2 and out == "" and err.count("\n") == 1
    assert f"policy store {missing} does not exist" in err
    assert not missing.exists()


def _damage(store: PolicyStore, name: str, version: int) -> str:
    path = os.path.join(store.uri, name, f"v{version:06d}.parquet")
    with open(path, "r+b") as f:
        f.truncate(100)
    return path


def test_list_and_history_show_a_corrupt_version_and_carry_on(store, capsys):
    path = _damage(store, "cifar10-wrn", 2)
    code, out, err = run(capsys, "policies", "list", "--store", store.uri)
    assert code == 0
    rows = [line.split() for line in out.splitlines()[2:]]
    assert rows[0][:3] == ["cifar10-wrn", "@2", "2"] and rows[0][-2:] == ["CORRUPT", "CORRUPT"]
    assert rows[1][:3] == ["svhn", "@1", "1"]  # the other names are listed
    assert f"autoaug: warning: cifar10-wrn@2 is corrupt: cannot read policy artifact {path}" in err
    code, out, err = run(capsys, "policies", "list", "cifar10-wrn", "--store", store.uri)
    assert code == 0
    rows = [line.split() for line in out.splitlines()[2:]]
    assert rows[0][0] == "@1" and rows[0][-3] == V1.content_hash[:12]
    assert rows[1][:2] == ["@2", "CORRUPT"]
    assert "cifar10-wrn@2 is corrupt" in err
    data = json.loads(run(capsys, "policies", "list", "cifar10-wrn", "--json", "--store", store.uri)[1])
    assert data[1]["corrupt"] is True and path in data[1]["error"]


def test_a_corrupt_latest_version_does_not_block_imports(store, capsys, tmp_path):
    _damage(store, "svhn", 1)
    good = tmp_path / "svhn.json"
    good.write_text(presets.resolve("autoaugment-svhn").to_json())
    code, out, _ = run(capsys, "policies", "import", str(good), "--name", "svhn", "--store", store.uri)
    assert code == 0 and out.startswith("saved svhn@2 ")
    assert run(capsys, "policies", "show", "svhn", "--store", store.uri)[0] == 0


def test_check_verifies_every_version_and_removes_old_leftovers(store, capsys):
    root = store.uri
    claims = os.path.join(root, "svhn", ".claims")
    os.makedirs(os.path.join(claims, "v000009"))  # the claim of a save killed before it wrote
    tmp = os.path.join(root, "svhn", ".v000009.parquet.tmp-0123")
    open(tmp, "wb").close()
    fresh = os.path.join(claims, "v000010.0123456789abcdef0123456789abcdef")
    open(fresh, "wb").close()
    old = time.time() - 7200
    for path in (os.path.join(claims, "v000009"), tmp):
        os.utime(path, (old, old))
    code, out, err = run(capsys, "policies", "check", "--store", root)
    assert code == 0, err
    assert f"removed leftover of a killed save: {tmp}" in out
    assert f"removed leftover of a killed save: {os.path.join(claims, 'v000009')}" in out
    assert f"kept (younger than 3600 s, a save may be running): {fresh}" in out
    assert out.splitlines()[-1] == f"{root}: 3 version(s) verified, 0 corrupt, 2 leftover(s) removed"
    assert sorted(os.listdir(claims)) == [os.path.basename(fresh)] and not os.path.exists(tmp)

    path = _damage(store, "cifar10-wrn", 1)
    code, out, err = run(capsys, "policies", "check", "--store", root, "--grace", "0")
    assert code == 2
    assert f"CORRUPT cifar10-wrn@1: cannot read policy artifact {path}" in out
    assert (
        err.strip() == f"autoaug: error: 1 corrupt version(s) in {root}: cifar10-wrn@1 (delete or restore those files)"
    )
    assert not os.listdir(claims)  # --grace 0: every leftover goes


def test_show_stored(store, capsys):
    code, out, err = run(capsys, "policies", "show", "cifar10-wrn", "--store", store.uri)
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0] == "cifar10-wrn@2"
    assert f"content hash  {V2.content_hash}" in out
    assert "location      " + os.path.join(store.uri, "cifar10-wrn", "v000002.parquet") in out
    assert "'found': 3 sub-policies, 10 magnitude bins, base=standard, ranges=autoaugment" in out
    start = lines.index("") + 1
    table = [line.split() for line in lines[start : lines.index("", start)]]
    assert table[0] == ["#", "op", "1", "p", "bin", "op", "2", "p", "bin"]
    assert table[1:] == [
        ["0", "Rotate", "0.8", "2", "TranslateX", "0.3", "9"],
        ["1", "Invert", "0.1", "0", "Contrast", "0.2", "6"],
        ["2", "Color", "0.9", "9", "Brightness", "0.1", "3"],
    ]
    assert '"trials": 64' in out
    assert "evaluations (1)" in out and '"test_accuracy": [0.961, 0.963]' in out


def test_show_by_version_hash_preset_and_file(store, capsys, tmp_path):
    code, out, _ = run(capsys, "policies", "show", "cifar10-wrn@1", "--store", store.uri)
    assert code == 0 and out.startswith("cifar10-wrn@1\n") and "  dataset_fingerprint abc\n" in out
    assert "evaluations   (none attached)" in out
    code, out, _ = run(capsys, "policies", "show", V1.content_hash[:8], "--store", store.uri)
    assert out.startswith("cifar10-wrn@1\n")
    code, out, _ = run(capsys, "policies", "show", "preset:autoaugment-cifar10", "--store", store.uri)
    assert code == 0 and out.startswith("preset:autoaugment-cifar10 (not stored)")
    assert "25 sub-policies" in out and "provenance" not in out
    path = tmp_path / "mine.json"
    path.write_text(V1.to_json())
    code, out, _ = run(capsys, "policies", "show", str(path), "--store", store.uri)
    assert code == 0 and out.startswith(f"{path} (not stored)") and V1.content_hash in out
    code, out, _ = run(capsys, "policies", "show", "cifar10-wrn@2", "--json", "--store", store.uri)
    data = json.loads(out)
    assert data["ref"] == "cifar10-wrn@2" and data["evaluations"][0]["results"]["model"] == "wrn-40-2"
    assert Policy.from_dict(data["policy"]) == V2


def test_reference_precedence(store, capsys, tmp_path, monkeypatch):
    # a bare preset name works when no stored policy has that name...
    code, out, _ = run(capsys, "policies", "show", "trivialaugment", "--store", store.uri)
    assert code == 0 and out.startswith("preset:trivialaugment (not stored)")
    # ...a preset name is reserved: a stored policy of that name is reached with NAME@latest
    # (the one precedence, autoaug.policies.reference; test_policy_reference.py checks it is every command's)
    store.save(V1, "standard")
    monkeypatch.chdir(tmp_path)
    assert run(capsys, "policies", "show", "standard", "--store", store.uri)[1].startswith(
        "preset:standard (not stored)"
    )
    assert run(capsys, "policies", "show", "standard@latest", "--store", store.uri)[1].startswith("standard@1\n")
    # a stored name wins over a file of the same name in the cwd; ./NAME is the file
    (tmp_path / "svhn").write_text(V1.to_json())
    assert run(capsys, "policies", "show", "svhn", "--store", store.uri)[1].startswith("svhn@1\n")
    assert run(capsys, "policies", "show", "./svhn", "--store", store.uri)[1].startswith("./svhn (not stored)")
    (tmp_path / "loose").write_text(V2.to_json())
    assert run(capsys, "policies", "show", "loose", "--store", store.uri)[1].startswith("loose (not stored)")


def test_export(store, capsys, tmp_path):
    code, out, _ = run(capsys, "policies", "export", "cifar10-wrn@1", "--store", store.uri)
    assert code == 0 and out == V1.to_json() + "\n"
    assert Policy.from_json(out) == V1
    target = tmp_path / "out.json"
    code, out, err = run(
        capsys, "policies", "export", "svhn", "--format", "json", "--out", str(target), "--store", store.uri
    )
    assert code == 0 and out == "" and str(target) in err
    assert Policy.from_json(target.read_text()) == presets.resolve("autoaugment-svhn")
    code, out, _ = run(capsys, "policies", "export", "preset:randaugment:n=1,m=5")
    assert Policy.from_json(out) == presets.resolve("randaugment:n=1,m=5")


def test_import(store, capsys, tmp_path):
    path = tmp_path / "p.json"
    policy = presets.resolve("autoaugment-imagenet")
    path.write_text(policy.to_json())
    code, out, _ = run(
        capsys,
        "policies",
        "import",
        str(path),
        "--name",
        "imagenet",
        "--store",
        store.uri,
        "--metadata",
        '{"note": "from the paper"}',
    )
    assert code == 0 and out.startswith(f"saved imagenet@1 (hash {policy.content_hash[:12]})")
    record = store.get("imagenet")
    assert record.policy == policy
    assert record.provenance == {"note": "from the paper", "imported_from": str(path)}
    code, out, _ = run(capsys, "policies", "import", str(path), "--name", "imagenet", "--store", store.uri)
    assert code == 0 and out.startswith("imagenet@1 already holds this policy")
    code, out, _ = run(capsys, "policies", "import", str(path), "--name", "imagenet", "--force", "--store", store.uri)
    assert out.startswith("saved imagenet@2")
    assert store.versions("imagenet") == [1, 2]


def test_diff(store, capsys):
    code, out, err = run(capsys, "policies", "diff", "cifar10-wrn@1", "cifar10-wrn@2", "--store", store.uri)
    assert code == 0 and err == ""
    assert out.splitlines() == [
        "--- cifar10-wrn@1",
        "+++ cifar10-wrn@2",
        "~ [0]->[0] Rotate(p=0.7->0.8 m2)  ->  TranslateX(p=0.3 m9)",
        "+ [2] Color(p=0.9 m9)  ->  Brightness(p=0.1 m3)",
        "1 added, 0 removed, 1 changed, 1 unchanged sub-policies",
    ]
    code, out, _ = run(capsys, "policies", "diff", "svhn", "preset:autoaugment-svhn", "--store", store.uri)
    assert (
        code == 0 and out.splitlines()[-1] == "0 added, 0 removed, 0 changed, 25 unchanged sub-policies (same content)"
    )


def test_a_policy_on_base_crop_through_the_store_show_diff_and_export(store, capsys, tmp_path):
    """The base survives saving and loading, and every view says which one it is."""
    on_crop = V2.with_base("crop")
    path = tmp_path / "crop.json"
    path.write_text(on_crop.to_json())
    code, out, _ = run(capsys, "policies", "import", str(path), "--name", "signs", "--store", store.uri)
    assert code == 0 and f"(hash {on_crop.content_hash[:12]})" in out
    assert store.load("signs@1") == on_crop and store.get("signs@1").content_hash == on_crop.content_hash
    code, out, _ = run(capsys, "policies", "show", "signs@1", "--store", store.uri)
    assert "base=crop" in out and "  base          crop: pad-and-random-crop, before the policy in training" in out
    code, out, _ = run(capsys, "policies", "show", "cifar10-wrn@2", "--store", store.uri)
    assert "  base          standard: pad-and-random-crop + horizontal flip, before the policy in training" in out
    code, out, _ = run(capsys, "policies", "show", "signs@1", "--json", "--store", store.uri)
    assert json.loads(out)["base"] == "crop" and Policy.from_dict(json.loads(out)["policy"]) == on_crop
    code, out, _ = run(capsys, "policies", "diff", "cifar10-wrn@2", "signs@1", "--store", store.uri)
    assert out.splitlines()[2] == "  base: standard -> crop"
    assert out.splitlines()[-1] == "0 added, 0 removed, 0 changed, 3 unchanged sub-policies"  # the base is content
    code, out, _ = run(capsys, "policies", "export", "signs@1", "--format", "timm", "--store", store.uri)
    assert json.loads(out)["base"] == "crop" and "no flip" in json.loads(out)["note"]
    code, out, _ = run(capsys, "policies", "show", "crop")
    assert out.startswith("preset:crop (not stored)")
    assert "(no sub-policies: the identity policy)" in out and "base=crop" in out


def test_preview(store, capsys, tmp_path, cifar_train):
    from PIL import Image

    def preview(out, *extra):
        code, stdout, err = run(
            capsys,
            "policies",
            "preview",
            "cifar10-wrn@2",
            "--data",
            str(cifar_train),
            "--out",
            str(out),
            "--num-images",
            "3",
            "--columns",
            "2",
            "--backend",
            "torchvision",
            "--store",
            store.uri,
            *extra,
        )
        assert code == 0, err
        return stdout

    out = tmp_path / "grids" / "a.png"
    assert preview(out) == f"wrote {out}: 3 images x 2 draws of cifar10-wrn@2 (torchvision)\n"
    with Image.open(out) as image:
        assert image.format == "PNG" and image.mode == "RGB" and image.height > image.width
    preview(tmp_path / "b.png")
    preview(tmp_path / "c.png", "--seed", "1")
    assert out.read_bytes() == (tmp_path / "b.png").read_bytes()  # same seed, same grid
    assert out.read_bytes() != (tmp_path / "c.png").read_bytes()
    assert preview(tmp_path / "d.png", "--with-base") == (
        f"wrote {tmp_path / 'd.png'}: 3 images x 2 draws of cifar10-wrn@2 (torchvision, base standard drawn first)\n"
    )
    assert (tmp_path / "d.png").read_bytes() != (tmp_path / "b.png").read_bytes()


@pytest.mark.slow
def test_a_preview_too_large_for_memory_is_refused_in_one_line_before_decoding(capsys, tmp_path, cifar_test):
    code, out, err = run(
        capsys,
        "policies",
        "preview",
        "autoaugment-cifar10",
        "--data",
        str(cifar_test),
        "--out",
        str(tmp_path / "p.png"),
        "--image-size",
        "100000",
        "--backend",
        "torchvision",
    )
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert "--image-size 100000 needs about " in err and "to preview " in err and "use a smaller --image-size" in err
    assert not (tmp_path / "p.png").exists()


def test_preview_dali_of_a_preset(capsys, tmp_path, cifar_test):
    out = tmp_path / "grid.png"
    code, stdout, err = run(
        capsys,
        "policies",
        "preview",
        "preset:autoaugment-cifar10",
        "--data",
        str(cifar_test),
        "--out",
        str(out),
        "--num-images",
        "2",
        "--columns",
        "3",
        "--store",
        str(tmp_path / "unused"),
    )
    assert code == 0, err
    assert stdout == f"wrote {out}: 2 images x 3 draws of preset:autoaugment-cifar10 (dali)\n"
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    "argv, message",
    [
        (["show", "nope"], "no stored policy matches 'nope' in store {uri}; stored names: cifar10-wrn, svhn"),
        (["show", "cifar10-wrn@7"], "policy 'cifar10-wrn' has no version 7 in store {uri}; stored versions: 1, 2"),
        (["show", "cifar10-wrn@newest"], "invalid version 'newest' in reference 'cifar10-wrn@newest'"),
        (["export", "preset:nonesuch"], "unknown preset 'preset:nonesuch'; known presets:"),
        (["diff", "svhn", "missing.json"], "policy file 'missing.json' does not exist"),
        (["import", "missing.json", "--name", "x"], "policy file 'missing.json' does not exist"),
        (["import", "{bad}", "--name", "a/b"], "invalid policy name 'a/b'"),
        (["import", "{bad}", "--name", "x"], "is not a valid policy JSON"),
        (["import", "{good}", "--name", "x", "--metadata", "[1]"], "--metadata must be a JSON object"),
        (["export", "svhn", "--out", "/nonexistent/dir/x.json"], "folder '/nonexistent/dir' does not exist"),
        (["list", "nobody"], "no policy named 'nobody'"),
        (["preview", "svhn", "--data", "/nonexistent.parquet", "--out", "{tmp}/g.png"], "dataset not found"),
        (["preview", "svhn", "--data", "x", "--out", "g.png", "--num-images", "0"], "--num-images must be >= 1"),
        (["preview", "svhn", "--data", "x", "--out", "g.png", "--columns", "0"], "--columns must be >= 1"),
        (["preview", "nope", "--data", "x", "--out", "g.png"], "no stored policy matches 'nope'"),
    ],
)
def test_errors_are_one_line_exit_2(store, capsys, tmp_path, argv, message):
    bad = tmp_path / "bad.json"
    bad.write_text('{"name": "x", "num_magnitude_bins": 10, "sub_policies": [[["Nope", 0.5, 1]]]}')
    good = tmp_path / "good.json"
    good.write_text(V1.to_json())
    argv = [a.format(bad=bad, good=good, tmp=tmp_path) for a in argv]
    code, out, err = run(capsys, "policies", *argv, "--store", store.uri)
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("autoaug: error: ")
    assert message.format(uri=store.uri) in err


def test_corrupt_store_file_is_reported(store, capsys):
    path = os.path.join(store.uri, "svhn", "v000001.parquet")
    with open(path, "r+b") as f:
        f.truncate(100)
    code, _, err = run(capsys, "policies", "show", "svhn", "--store", store.uri)
    assert code == 2 and f"cannot read policy artifact {path}" in err and err.count("\n") == 1


def test_bad_store_uri(capsys):
    code, _, err = run(capsys, "policies", "list", "--store", "nosuchscheme://bucket")
    assert code == 2 and "cannot open store 'nosuchscheme://bucket'" in err


def test_policies_without_subcommand_prints_help(capsys):
    code, out, _ = run(capsys, "policies")
    assert code == 2 and "SUBCOMMAND" in out and "preview" in out


def test_real_process(store):
    exe = REPO / ".venv" / "bin" / "autoaug"
    assert exe.is_file(), f"{exe} missing: install the project into .venv"
    env = {**os.environ, "AUTOAUG_STORE": store.uri}
    proc = subprocess.run([str(exe), "policies", "list"], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == f"2 policies in {store.uri}"
    proc = subprocess.run([str(exe), "policies", "show", "ghost"], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("autoaug: error: not a preset (autoaugment-cifar10, ")
    assert proc.stderr.strip().endswith(
        f"not in the policy store: no stored policy matches 'ghost' in store {store.uri}; stored names: cifar10-wrn, svhn"
    )


def test_import_errors_name_the_file_and_stay_short(tmp_path, capsys):
    latin1 = tmp_path / "latin1.json"
    latin1.write_bytes('{"name": "caf\xe9", "num_magnitude_bins": 10, "sub_policies": []}'.encode("latin-1"))
    code, _, err = run(capsys, "policies", "import", str(latin1), "--name", "x", "--store", str(tmp_path / "s"))
    assert code == 2 and err.count("\n") == 1 and str(latin1) in err and "UTF-8" in err
    good = tmp_path / "good.json"
    good.write_text(V1.to_json())
    code, _, err = run(capsys, "policies", "import", str(good), "--name", "n" * 100_000, "--store", str(tmp_path / "s"))
    assert code == 2 and err.count("\n") == 1 and len(err) < 500 and "(100,000 characters)" in err
    (tmp_path / "afile").write_text("x")
    code, _, err = run(capsys, "policies", "import", str(good), "--name", "x", "--store", str(tmp_path / "afile"))
    assert code == 2 and err.count("\n") == 1 and f"cannot write to policy store {tmp_path / 'afile'}" in err


def test_show_says_what_the_search_measured_before_its_trials(store, capsys):
    """A searched policy's calibration -- the base chosen and which published policy transferred
    best, by how much -- is shown in words above the whole provenance (``--provenance``)."""
    from autoaug.search.decide.calibrate import choose_base, rank_transfer

    record = {
        "base": choose_base({"none": [0.8666], "crop": [0.963], "standard": [0.9034]}),
        "transfer": {
            "base": "crop",
            **rank_transfer(
                {"autoaugment-cifar10": [0.97], "autoaugment-svhn": [0.90], "randaugment": [0.975]},
                {"autoaugment-cifar10": None, "autoaugment-svhn": None, "randaugment": "31 magnitude bins"},
            ),
        },
    }
    store.save(
        Policy("signs", 10, [[("Rotate", 0.8, 2), ("Color", 0.3, 9)]], base="crop"),
        "signs",
        metadata={"calibration": record},
    )
    code, out, _ = run(capsys, "policies", "show", "signs@latest", "--provenance", "--store", store.uri)
    assert code == 0
    measured = out[out.index("measured before the search") : out.index("provenance")]
    assert (
        "base: crop (proxy score %, each base alone: crop 96.30, standard 90.34, none 86.66); ahead of the "
        "others beyond the noise" in measured
    )
    assert "transferred best: randaugment by 0.50 points over the next" in measured
    assert "warm start: autoaugment-cifar10 (randaugment: 31 magnitude bins)" in measured


def _autoaug(*argv: str, env: dict, stdin: str | None = None) -> subprocess.CompletedProcess:
    exe = REPO / ".venv" / "bin" / "autoaug"
    return subprocess.run([str(exe), *argv], capture_output=True, text=True, env=env, input=stdin, timeout=300)


def test_a_new_users_first_list_of_the_default_store_is_no_error(tmp_path):
    """On a fresh machine (no ~/.autoaug/policies, no $AUTOAUG_STORE) `policies list` says there is
    nothing yet and exits 0 (`[]` with --json) without creating the store; a store the user named
    (--store, $AUTOAUG_STORE) that does not exist stays an error."""
    env = {k: v for k, v in os.environ.items() if k != "AUTOAUG_STORE"}
    env["HOME"] = str(tmp_path / "home")
    default = tmp_path / "home" / ".autoaug" / "policies"
    proc = _autoaug("policies", "list", env=env)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert proc.stdout.splitlines()[0].startswith(f"no policies yet in {default}")
    proc = _autoaug("policies", "list", "--json", env=env)
    assert proc.returncode == 0 and json.loads(proc.stdout) == []
    assert not default.exists()
    proc = _autoaug("policies", "list", "--store", str(tmp_path / "typo"), env=env)
    assert proc.returncode == 2 and f"policy store {tmp_path / 'typo'} does not exist" in proc.stderr
    proc = _autoaug("policies", "list", env={**env, "AUTOAUG_STORE": str(tmp_path / "typo")})
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "does not exist" in proc.stderr
    # once something was saved, the default store lists it
    proc = _autoaug("policies", "import", "-", "--name", "first", env=env, stdin=V1.to_json())
    assert proc.returncode == 0, proc.stderr
    proc = _autoaug("policies", "list", "--json", env=env)
    assert [row["name"] for row in json.loads(proc.stdout)] == ["first"]


DUPLICATED_OP = (
    '{"name": "dup", "num_magnitude_bins": 10, "sub_policies": [[{"op": "Rotate", "probability": 0.5, '
    '"magnitude_bin": 3}], [{"op": "Rotate", "op": "Invert", "probability": 0.5, "magnitude_bin": 3}]]}'
)


def test_a_policy_with_a_duplicated_key_is_refused_by_every_reader(tmp_path, cifar_train):
    """`policies import` (file and stdin) and `train --policy` refuse a policy JSON whose object gives
    one key twice, naming the key, its place and both values, in one line, before anything is
    stored or trained (json.loads alone would keep "Invert")."""
    env = {**os.environ, "AUTOAUG_STORE": str(tmp_path / "store")}
    dup = tmp_path / "dup.json"
    dup.write_text(DUPLICATED_OP)
    expected = (
        'the key "op" appears twice in one object at sub_policies[1][0] (first "Rotate", then "Invert"); '
        "expected each key once"
    )
    for argv, stdin in (
        (["policies", "import", str(dup), "--name", "dup"], None),
        (["policies", "import", "-", "--name", "dup"], DUPLICATED_OP),
        (
            [
                "train",
                "--data",
                str(cifar_train),
                "--policy",
                str(dup),
                "--preset",
                "smoke",
                "--out",
                str(tmp_path / "out"),
            ],
            None,
        ),
    ):
        proc = _autoaug(*argv, env=env, stdin=stdin)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.count("\n") == 1 and proc.stderr.rstrip().endswith(expected), proc.stderr
    assert not (tmp_path / "store").exists() and not (tmp_path / "out").exists()
    proc = _autoaug(
        "policies", "import", "-", "--name", "dup", "--metadata", '{"a": 1, "a": 2}', env=env, stdin=V1.to_json()
    )
    assert proc.returncode == 2 and 'the key "a" appears twice' in proc.stderr


def test_train_policy_and_policies_import_give_one_message_for_a_utf16_file(tmp_path, cifar_train):
    """The one policy reader: a UTF-16 policy file gets the same one-line reason from `train --policy`
    as from `policies import` (not Python's codec message)."""
    env = {**os.environ, "AUTOAUG_STORE": str(tmp_path / "store")}
    utf16 = tmp_path / "utf16.json"
    utf16.write_bytes(V1.to_json().encode("utf-16"))
    reason = "the file is not UTF-8 text (invalid start byte: byte 0xff at offset 0); expected a policy JSON document"
    for argv in (
        ["policies", "import", str(utf16), "--name", "x"],
        [
            "train",
            "--data",
            str(cifar_train),
            "--policy",
            str(utf16),
            "--preset",
            "smoke",
            "--out",
            str(tmp_path / "out"),
        ],
    ):
        proc = _autoaug(*argv, env=env)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
        assert str(utf16) in proc.stderr and proc.stderr.rstrip().endswith(reason), proc.stderr
        assert "codec" not in proc.stderr


# ---------------------------------------------------------------------------------------------
# `policies show` for a person: the provenance summarised, all of it on request


def _search_provenance(tmp_path, method: str, trials: int = 300) -> dict:
    """A search's provenance as the driver builds it (:func:`build_provenance`, with the records
    calibration, re-scoring and the budget add), of ``trials`` trials: a long record."""
    from autoaug.search.config import SearchConfig
    from autoaug.search.decide.assemble import TrialRecord, assemble_policy, build_provenance

    config = SearchConfig.from_preset("smoke", data=str(tmp_path / "data"), name="found", method=method)
    published = presets.resolve("autoaugment-cifar10").sub_policies
    records = [
        TrialRecord(
            trial_id=f"t{i:04d}",
            index=i,
            status="completed" if i % 3 else "early_stopped",
            params={"sp0_op0": i},
            policy=Policy(f"found-t{i:04d}", 10, [published[i % 25], published[(i + 7) % 25]]),
            score=0.5 + (i % 17) / 100,
            epochs=2 if i % 3 else 1,
            train_time_s=3.0,
        )
        for i in range(trials)
    ]
    assembled = assemble_policy(records, name="found", top_n=5)
    provenance = build_provenance(
        search_config=config.to_dict(),
        data={
            "dataset": {
                "source": "/data/cifar10-jpeg",
                "fingerprint": "bf23b9040452aa18",
                "num_images": 50000,
                "classes": [f"c{i}" for i in range(10)],
            },
            "split": {
                "fingerprint": "9d2a2fbf880afda9",
                "seed": 0,
                "train_size": 1024,
                "val_size": 256,
                "group_by": None,
            },
        },
        trials=records,
        assembled=assembled,
        metric="search_score",
        mode="max",
        run_dir="/runs/found",
        optuna={
            "storage": "sqlite:////runs/found/optuna.db",
            "study_name": "found",
            "num_trials": trials,
            "consistent_with_tune": True,
            "problems": [],
        },
        timing={"started_at": "2026-11-27T14:25:19Z", "elapsed_s": 1712.5, "sessions": [{"kind": "start"}]},
    )
    noise = {
        "sd": 0.0112,
        "sampling": 0.0074,
        "training": 0.0084,
        "measured_training": 0.0062,
        "df": 2,
        "paired": True,
        "source": "a run's spread 1.12 points measured on these runs",
    }
    from autoaug.search.decide.calibrate import choose_base, rank_transfer

    provenance["calibration"] = {
        "epochs": 2,
        "base": choose_base({"none": [0.41], "crop": [0.45], "standard": [0.47]}),
        "transfer": {
            "base": "standard",
            **rank_transfer({"autoaugment-cifar10": [0.523], "trivialaugment": [0.513]}, {}),
        },
    }
    provenance["selection"] = {
        "method": "rescore",
        "chosen": "assembled",
        "candidates": [{"kind": "assembled", "search_score": 0.5239}, {"kind": "transfer", "search_score": 0.523}],
        "versus_transfer": {"own": "assembled", "margin": 0.0009, "threshold": 0.0064, "beyond": False, "noise": noise},
    }
    provenance["budget"] = {
        "time_budget_s": 1800.0,
        "spent_s": 1712.5,
        "ended": None,
        "trials": {"unit": "trials", "planned": trials, "scored": trials},
    }
    return provenance


def _sections(out: str) -> dict[str, list[str]]:
    """The lines under each unindented heading of `policies show`'s output."""
    sections: dict[str, list[str]] = {}
    heading = None
    for line in out.splitlines():
        if line and not line.startswith(" "):
            heading = line
            sections[heading] = []
        elif heading is not None and line:
            sections[heading].append(line)
    return sections


@pytest.mark.parametrize("method", ["train", "density", "pba"])
def test_show_summarises_a_search_provenance_and_prints_it_all_on_request(store, capsys, tmp_path, method):
    from autoaug.search.config import METHODS

    provenance = _search_provenance(tmp_path, method)
    if method == "train":  # the rung record every train-method search with early stopping keeps
        pair = {"from": 20, "to": 60, "n": 15, "rho": 0.15, "p_value": 0.59, "low": -0.39, "high": 0.61}
        provenance["method"] = {"rungs": {"pairs": [pair], "ended": {"20": 10, "60": 5}}}
    store.save(V1, "found", metadata=provenance)
    code, out, err = run(capsys, "policies", "show", "found@1", "--store", store.uri)
    assert code == 0 and err == ""
    full = json.dumps(provenance, indent=2, sort_keys=True)
    assert len(full.splitlines()) > 10_000  # what `show` printed before, indented JSON of every trial
    lines = out.splitlines()
    sections = _sections(out)
    made, measured, origin = (
        sections["what made it"],
        sections["what the search measured"],
        sections["where it came from"],
    )
    assert list(sections).index("what made it") < list(sections).index("where it came from")
    provenance_lines = len(made) + len(measured) + len(origin) + 3
    assert provenance_lines <= 25, out
    assert len(lines) <= 60, out  # header, 2-row table, provenance, evaluations, next steps
    assert "t0299" not in out and '"params"' not in out  # no trial, no JSON

    text = "\n".join(made)
    assert "  search        'found', preset smoke, seed 0" in text
    assert f"  method        {method}: {METHODS[method].help}" in text
    assert "  data          /data/cifar10-jpeg: 50,000 images, 10 classes; fingerprint bf23b9040452" in text
    assert "  split         train 1,024, val 256, seed 0; fingerprint 9d2a2fbf880a" in text
    text = "\n".join(measured)
    assert f"{trials_of(provenance)} {METHODS[method].unit}" in text and "best t" in text
    assert "  base          standard, measured first (proxy score %: standard 47.00, crop 45.00, none 41.00)" in text
    assert "  transfer      autoaugment-cifar10 transferred best" in text
    assert (
        f"  margin        +0.09 [-0.55, +0.73] points, assembled over autoaugment-cifar10 after {trials_of(provenance)} "
        f"{METHODS[method].unit} (95% interval, re-scored)"
    ) in text
    assert "within the noise; stored: assembled" in text
    assert "  noise         a run's spread 1.12 points measured on these runs" in text
    assert "  time budget   30m, 28m32s spent; it did not end the search" in text
    if method == "train":  # under its own label, not a second "method"
        assert "  early stopping do ASHA's rungs rank these trials? epoch 20 -> 60: rho +0.15" in text
    text = "\n".join(origin)
    assert "  run directory /runs/found" in text
    assert "  Optuna study  found in sqlite:////runs/found/optuna.db" in text
    assert (
        f"  code          commit {provenance['git']['commit'][:12]}" in text
        if provenance["git"].get("commit")
        else True
    )
    assert "torch " in text and "ray " in text and "optuna " in text  # library versions
    assert f"policies show found@1 --store {store.uri} --provenance" in out

    # --provenance: every word of the record, as text; --json: the document, unchanged
    code, out, _ = run(capsys, "policies", "show", "found@1", "--provenance", "--store", store.uri)
    assert code == 0 and all("  " + line in out for line in full.splitlines()[:50])
    assert out.count('"trial_id": "t0299"') == 1 and "what made it" not in out
    code, out, _ = run(capsys, "policies", "show", "found@1", "--json", "--store", store.uri)
    assert json.loads(out)["provenance"] == json.loads(json.dumps(provenance))


def trials_of(provenance: dict) -> int:
    return provenance["counts"]["trials"]


def test_show_of_a_provenance_saved_by_hand_and_of_none(store, capsys, tmp_path):
    store.save(V1, "hand", metadata={"note": "from the paper", "imported_from": "/x/p.json", "big": list(range(500))})
    code, out, _ = run(capsys, "policies", "show", "hand@1", "--store", store.uri)
    assert code == 0 and "what made it" not in out
    sections = _sections(out)
    (heading,) = [h for h in sections if h.startswith("provenance")]
    assert heading == "provenance (not a search's: saved by hand or by other code)"
    big, imported, note, whole = sections[heading]  # the keys in the stored (sorted) order
    assert (imported, note) == ("  imported_from /x/p.json", "  note          from the paper")
    assert big.startswith("  big           [0, 1, 2,") and big.endswith("...") and "--provenance" in whole
    assert max(len(line) for line in out.splitlines() if "big" in line) <= 120
    code, out, _ = run(capsys, "policies", "show", "hand@1", "--provenance", "--store", store.uri)
    assert "      499" in out  # all of it
    store.save(V2, "bare")
    code, out, _ = run(capsys, "policies", "show", "bare@1", "--store", store.uri)
    assert "provenance    (none recorded)" in out


def test_show_summarises_evaluations(store, capsys):
    evaluation = {
        "kind": "autoaug compare",
        "metric": "test_accuracy",
        "n": 3,
        "mean": 0.2741,
        "std": 0.0175,
        "ci95": [0.2306, 0.3175],
        "seeds": [0, 1, 2],
        "rank": 2,
        "out": "/runs/compare-r8",
        "compared_with": {f"p{i}": {"mean": 0.2, "n": 3} for i in range(6)},
        "train_config": {"model": "resnet-8", "epochs": 2, **{f"k{i}": i for i in range(40)}},
    }
    store.attach_evaluation("cifar10-wrn@2", evaluation)
    code, out, _ = run(capsys, "policies", "show", "cifar10-wrn@2", "--store", store.uri)
    sections = _sections(out)
    assert sections["evaluations (2)"][0].endswith('{"model": "wrn-40-2", "test_accuracy": [0.961, 0.963]}')
    assert sections["evaluations (2)"][1].endswith(
        "autoaug compare: test_accuracy 27.41% [23.06, 31.75] over 3 seeds, rank 2 of 7 (/runs/compare-r8)"
    )
    code, out, _ = run(capsys, "policies", "show", "cifar10-wrn@2", "--provenance", "--store", store.uri)
    assert '"k39": 39' in out  # in full


def test_show_ends_with_the_next_steps_of_the_stored_version(store, capsys, tmp_path, monkeypatch):
    """Each command line parses as the real CLI's, and the Python lines load the version."""
    import shlex

    code, out, _ = run(capsys, "policies", "show", "cifar10-wrn", "--store", store.uri)
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("next steps"))
    steps = [line.strip() for line in lines[start + 1 :]]
    assert start + 6 == len(lines)  # the last lines of the output
    compare, export, *python = steps
    assert compare == f"autoaug compare --policy cifar10-wrn@2 --store {store.uri} --data DATA"
    assert (
        export == f"autoaug policies export cifar10-wrn@2 --store {store.uri} --format timm --out cifar10-wrn.timm.json"
    )
    assert python[1] == f'policy = PolicyStore("{store.uri}").load("cifar10-wrn@2")'
    assert V2.base == "standard" and python[2].endswith(
        "# its base standard (pad-and-random-crop + horizontal flip), then the policy"
    )
    from autoaug.launch.cli import build_parser

    parser = build_parser()
    args = parser.parse_args(shlex.split(compare)[1:])
    assert args.policies == ["cifar10-wrn@2"] and args.store == store.uri
    monkeypatch.chdir(tmp_path)
    args = shlex.split(export)
    assert main(args[1:]) == 0 and json.loads((tmp_path / "cifar10-wrn.timm.json").read_text())["policy"]
    scope: dict = {}
    exec("\n".join(python), scope)
    assert scope["policy"] == V2 and scope["transform"] is not None

    # the default store: no --store, PolicyStore() (it reads $AUTOAUG_STORE)
    monkeypatch.setenv("AUTOAUG_STORE", store.uri)
    code, out, _ = run(capsys, "policies", "show", "svhn")
    assert "autoaug compare --policy svhn@1 --data DATA" in out and 'PolicyStore().load("svhn@1")' in out
    # a preset or a file is not stored: nothing to compare by name
    code, out, _ = run(capsys, "policies", "show", "trivialaugment")
    assert "next steps" not in out


def test_the_next_steps_of_a_schedule_export_its_last_stage_and_load_it_per_epoch(store, capsys, tmp_path, monkeypatch):
    import shlex

    from autoaug.policies.schedule import Schedule

    schedule = Schedule("sched", [(0.0, V1), (0.5, V2.with_base("standard"))])
    path = tmp_path / "sched.json"
    path.write_text(schedule.to_json())
    assert run(capsys, "policies", "import", str(path), "--name", "sched", "--store", store.uri)[0] == 0
    code, out, _ = run(capsys, "policies", "show", "sched@1", "--store", store.uri)
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("next steps"))
    assert "(a schedule: docs/search.md)" in lines[start]
    export, *python = (line.strip() for line in lines[start + 2 :])
    assert export.endswith("--format timm --stage 1 --out sched.timm.json")
    monkeypatch.chdir(tmp_path)
    assert main(shlex.split(export)[1:]) == 0  # timm takes the last stage
    scope: dict = {"EPOCHS": 10}
    exec("\n".join(python), scope)
    assert scope["schedule"].content_hash == schedule.content_hash
    scope["transform"].set_epoch(6)
    assert scope["transform"].policy == V2
