"""autoaug.launch.config: YAML files, --set assignments, flag overrides, layering."""

from __future__ import annotations

import argparse

import pytest

from autoaug.core.errors import UserInputError
from autoaug.launch.config import (
    build_config,
    deep_merge,
    flag_overrides,
    layered_config,
    load_yaml,
    parse_assignments,
    set_dotted,
)


def test_load_yaml(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("name: x\ntrain:\n  epochs: 3\n")
    assert load_yaml(path) == {"name": "x", "train": {"epochs": 3}}
    (tmp_path / "empty.yaml").write_text("")
    assert load_yaml(tmp_path / "empty.yaml") == {}


@pytest.mark.parametrize(
    "content, message",
    [
        ("name: [unclosed\n", r"is not valid YAML \(line 2, column 1\)"),
        ("- a\n- b\n", "must hold a mapping of keys to values at the top level, got a list"),
        # a key given twice is refused (PyYAML would keep the last value without a word)
        (
            "train:\n  epochs: 2\n  epochs: 5\n",
            r"is not valid YAML \(line 3, column 3\): the key 'epochs' appears "
            r"twice in one mapping \(first at line 2\); expected each key once",
        ),
    ],
)
def test_bad_yaml_is_one_line(tmp_path, content, message):
    path = tmp_path / "c.yaml"
    path.write_text(content)
    with pytest.raises(UserInputError, match=message):
        load_yaml(path)


def test_missing_file(tmp_path):
    with pytest.raises(UserInputError, match="config file .*nope.yaml' does not exist"):
        load_yaml(tmp_path / "nope.yaml")


def test_deep_merge_merges_sections_and_replaces_values():
    base = {"a": 1, "train": {"epochs": 8, "lr": 0.1}, "space": {"exclude_ops": ["Invert"]}}
    out = deep_merge(base, {"train": {"epochs": 2}, "space": {"exclude_ops": []}, "b": None})
    assert out == {"a": 1, "train": {"epochs": 2, "lr": 0.1}, "space": {"exclude_ops": []}, "b": None}
    assert base["train"]["epochs"] == 8  # inputs untouched


def test_assignments_parse_yaml_values():
    out = parse_assignments(
        [
            "train.epochs=2",
            "space.exclude_ops=[Invert, Rotate]",
            "store=s3://b/p",
            "early_stopping=false",
            "concurrency=null",
            "name=",
        ]
    )
    assert out == {
        "train": {"epochs": 2},
        "space": {"exclude_ops": ["Invert", "Rotate"]},
        "store": "s3://b/p",
        "early_stopping": False,
        "concurrency": None,
        "name": None,
    }
    with pytest.raises(UserInputError, match="expected KEY=VALUE"):
        parse_assignments(["train.epochs"])
    with pytest.raises(UserInputError, match="invalid config key 'a..b'"):
        parse_assignments(["a..b=1"])


def test_set_dotted_refuses_to_descend_into_a_value():
    with pytest.raises(UserInputError, match="'train' holds a value, not a section"):
        set_dotted({"train": 3}, "train.epochs", 2)


def test_flag_overrides_only_take_given_flags():
    args = argparse.Namespace(data="d", epochs=None, seed=3)
    out = flag_overrides(
        args, {"data": "data", "epochs": "train.epochs", "seed": lambda v: {"seed": v, "train": {"seed": v}}}
    )
    assert out == {"data": "d", "seed": 3, "train": {"seed": 3}}


def test_layers_win_in_order(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("a: file\nb: file\nc: file\n")
    out = layered_config(
        defaults={"a": "default", "d": "default"}, file=path, assignments=["b=set", "c=set"], flags={"c": "flag"}
    )
    assert out == {"a": "file", "b": "set", "c": "flag", "d": "default"}


def test_build_config_turns_validation_errors_into_user_errors():
    def factory(d):
        raise ValueError("SearchConfig.num_trials: 0 is invalid;\n expected >= 1")

    with pytest.raises(
        UserInputError, match=r"^invalid search config: SearchConfig.num_trials: 0 is invalid; expected >= 1$"
    ):
        build_config(factory, {}, what="search config")
