"""One policy-reference precedence (autoaug.policies.reference) for every command and the API:
``autoaug train --policy``, ``autoaug compare --policy``, ``autoaug policies show`` and
``resolve_policy`` pick the same policy for the same reference."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from autoaug.launch.cli import main
from autoaug.policies import Policy, presets, resolve_policy
from autoaug.policies.store import PolicyStore

STORED_STANDARD = Policy("standard", 10, [[("Rotate", 0.5, 3)]])
STORED_MINE = Policy("mine", 10, [[("Invert", 0.2, 0)]])
FILE_MINE = Policy("mine-file", 10, [[("Equalize", 0.4, 0)]])
LOOSE = Policy("loose", 10, [[("Solarize", 0.6, 5)]])


class Picked(Exception):
    """Raised by the stand-ins below with the policy the command resolved."""

    def __init__(self, policy):
        super().__init__(policy.name)
        self.policy = policy


@pytest.fixture
def world(tmp_path, monkeypatch):
    """A store holding 'standard' and 'mine', a file 'mine' and a file 'loose' in the cwd."""
    store = PolicyStore(tmp_path / "store")
    store.save(STORED_STANDARD, "standard")
    store.save(STORED_MINE, "mine")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine").write_text(FILE_MINE.to_json())
    (tmp_path / "loose").write_text(LOOSE.to_json())
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.parquet").write_bytes(b"PAR1")
    (data / "test.parquet").write_bytes(b"PAR1")
    return store, data


# reference -> what every command must pick
CASES = [
    ("standard", presets.resolve("standard")),  # a preset name is reserved, even if stored
    ("standard@latest", STORED_STANDARD),  # ...the stored one is reached with a version
    ("preset:trivialaugment", presets.resolve("trivialaugment")),
    ("mine", STORED_MINE),  # a stored name wins over a file of the same name in the cwd
    ("./mine", FILE_MINE),  # ...which is reached as a path
    ("loose", LOOSE),  # a bare name that is not stored: the file
]


def _via_train(ref, store, data, monkeypatch):
    from autoaug.launch import preflight
    from autoaug.proxy_models import train

    monkeypatch.setattr(
        preflight, "check_data", lambda config: SimpleNamespace(config=config)
    )  # the data here are a stub

    def fake_train(config, policy, **kwargs):
        raise Picked(policy)

    monkeypatch.setattr(train, "train", fake_train)
    with pytest.raises(Picked) as caught:
        main(
            [
                "train",
                "--policy",
                ref,
                "--store",
                store.uri,
                "--data",
                str(data / "train.parquet"),
                "--preset",
                "smoke",
                "--out",
                str(data.parent / "train-out"),
            ]
        )
    return caught.value.policy


def _via_compare(ref, store, data, monkeypatch):
    from autoaug.launch import preflight
    from autoaug.launch.compare import runner

    monkeypatch.setattr(
        preflight, "check_data", lambda config, **_: SimpleNamespace(config=config)
    )  # the data here are a stub

    real = runner.resolve_candidates

    def picking(policies, baselines, store_arg, base=None):
        (candidate,) = real(policies, baselines, store_arg, base)
        raise Picked(candidate.policy)

    monkeypatch.setattr(runner, "resolve_candidates", picking)
    with pytest.raises(Picked) as caught:
        main(
            [
                "compare",
                "--policy",
                ref,
                "--baselines",
                "",
                "--store",
                store.uri,
                "--data",
                str(data / "train.parquet"),
                "--out",
                str(data.parent / "cmp"),
                "--seeds",
                "1",
            ]
        )
    return caught.value.policy


def _via_policies_show(ref, store, data, monkeypatch, capsys):
    capsys.readouterr()
    assert main(["policies", "show", ref, "--json", "--store", store.uri]) == 0
    import json

    return Policy.from_dict(json.loads(capsys.readouterr().out)["policy"])


@pytest.mark.parametrize("ref, expected", CASES, ids=[c[0] for c in CASES])
def test_every_command_resolves_a_reference_the_same_way(ref, expected, world, monkeypatch, capsys):
    store, data = world
    picked = {
        "api": resolve_policy(ref, store=store),
        "train": _via_train(ref, store, data, monkeypatch),
        "compare": _via_compare(ref, store, data, monkeypatch),
        "policies show": _via_policies_show(ref, store, data, monkeypatch, capsys),
    }
    hashes = {where: p.content_hash for where, p in picked.items()}
    assert set(hashes.values()) == {expected.content_hash}, hashes


def test_a_reference_nothing_matches_names_every_rule(world):
    store, _ = world
    with pytest.raises(
        LookupError,
        match=r"not a preset \(autoaugment-cifar10.*not a policy JSON file.*not in the "
        r"policy store: .*'ghost'",
    ):
        resolve_policy("ghost", store=store)
