"""Every example an ``autoaug ... --help`` gives runs as written (as tests/test_doc_snippets.py does
for the docs): a new user copies them first.

The examples are found in the help itself (``e.g. ...`` in an option's help, ``e.g. --flag ...`` in
a description or epilog), so an example added later is tested too. An example is run as far as a
command can go without data or a cluster: parsed by the command's parser and turned into the
command's configuration by the same functions the command uses (which refuse unknown keys and
bad values with one line).
"""

from __future__ import annotations

import re
import shlex

import pytest

from autoaug.launch.cli import build_parser, command_parsers

#: ``e.g. EXAMPLE`` up to the closing parenthesis, semicolon or the end of the sentence.
EXAMPLE = re.compile(r"e\.g\. ((?:'[^']*'|[^\s;)]+)(?: (?:'[^']*'|--?[\w-]+(?:=\S+)?|[^\s;()-][^\s;)]*))*)")


def _text(value: str | None) -> str:
    return " ".join((value or "").split())


def examples(command: str) -> list[list[str]]:
    """The examples of ``command``'s help as argument lists (an option's bare value example
    prefixed with that option)."""
    parser = command_parsers()[command]
    found: list[list[str]] = []
    for action in parser._actions:
        for text in EXAMPLE.findall(_text(action.help)):
            argv = shlex.split(text)
            if action.option_strings and not argv[0].startswith("-"):
                argv = [action.option_strings[-1], *argv[:1]]  # "--group-by ... (e.g. track)"
            elif not action.option_strings and argv[0] == "--":
                argv = argv  # launch's "-- COMMAND ARGS"
            found.append(argv)
    for text in EXAMPLE.findall(_text(parser.description) + " " + _text(parser.epilog)):
        if text.startswith("-"):
            found.append(shlex.split(text))
    return found


def _build(command: str, argv: list[str]):
    """The configuration ``command`` builds for ``argv`` (no data read, nothing trained)."""
    args = build_parser().parse_args([command, *argv])
    if command == "search":
        from autoaug.launch.search_cmd import build_search_config

        return build_search_config(args).train
    if command == "compare":
        from autoaug.launch.compare_cmd import build_compare_config

        return build_compare_config(args).train
    if command == "train":
        from autoaug.launch.train_cmd import _settings

        return _settings(args)[1]
    return args


@pytest.fixture
def base(cifar_train, tmp_path):
    """The arguments each command needs besides the example (compare checks that the data exist)."""
    data = ["--data", str(cifar_train)]
    return {"search": data, "compare": data, "train": [*data, "--out", str(tmp_path / "out")]}


def test_the_helps_have_the_examples_this_test_runs():
    """The finder sees the examples there are (a finder that finds nothing would test nothing)."""
    assert ["--set", "epochs=2"] in examples("search")
    assert ["--set", "epochs=2"] in examples("train") and ["--set", "epochs=2"] in examples("compare")
    assert ["--group-by", "track"] in examples("train")
    assert ["--exclude-ops", "SamplePairing,Invert"] in examples("search")
    assert any(argv[0] == "--" for argv in examples("launch"))


@pytest.mark.parametrize("command", ["search", "train", "compare"])
def test_every_help_example_of_the_commands_that_train_runs_as_written(command, base, tmp_path, monkeypatch):
    monkeypatch.setenv("AUTOAUG_RUNS", str(tmp_path / "runs"))
    monkeypatch.setenv("AUTOAUG_STORE", str(tmp_path / "store"))
    for argv in examples(command):
        config = _build(command, [*base[command], *argv])
        if argv[0] == "--set":  # the setting lands where the example says: the trainer's epochs
            key, _, value = argv[1].partition("=")
            assert getattr(config, key) == int(value), (command, argv)
        if argv[0] == "--group-by":
            assert config.group_by is not None, (command, argv)


def test_launchs_example_command_parses_as_written():
    for argv in examples("launch"):
        assert argv[0] == "--"
        args = build_parser().parse_args(["launch", *argv])
        inner = [a for a in args.command if a != "--"]
        parsed = build_parser().parse_args(inner)  # the command it would submit
        assert parsed.command == inner[0] and callable(parsed.func)


def test_a_trainer_key_given_to_search_or_compare_means_train_key(base, tmp_path, monkeypatch):
    """``--set epochs=2`` (what `autoaug train` takes) means ``train.epochs`` for search and compare;
    a key of the command's own keeps its meaning; an unknown key is still refused, naming it."""
    from autoaug.core.errors import UserInputError

    monkeypatch.setenv("AUTOAUG_RUNS", str(tmp_path / "runs"))
    for command in ("search", "compare"):
        config = _build(
            command, [*base[command], "--set", "epochs=3", "--set", "train.batch_size=16", "--set", "lr=0.05"]
        )
        assert (config.epochs, config.batch_size, config.lr) == (3, 16, 0.05)
    args = build_parser().parse_args(["search", *base["search"], "--set", "seed=7", "--set", "epochs=2"])
    from autoaug.launch.search_cmd import build_search_config

    search = build_search_config(args)
    assert search.seed == 7 and search.train.epochs == 2  # the search's own seed, not the trainer's
    with pytest.raises(UserInputError, match=r"unknown search config key\(s\) \['epoch'\]"):
        _build("search", [*base["search"], "--set", "epoch=2"])
