"""Where a dataset's parts are: the test split that goes with the training data
(:func:`default_test_data`), for ``autoaug train`` and ``autoaug compare``."""

from __future__ import annotations

import os

from autoaug.core.errors import UserInputError
from autoaug.core.location import Location

__all__ = ["default_test_data"]


def default_test_data(data: str) -> str | None:
    """The test split that goes with the training data ``data``, or None if there is none.

    * a folder holding ``test.parquet``: the folder (the trainer opens its ``test`` split);
    * ``.../train.parquet`` with a ``test.parquet`` next to it (local or any pyarrow URI);
    * ``cifar10:ROOT`` / ``cifar10``: the same (torchvision's test split).
    """
    text = os.fspath(data)
    if text == "cifar10" or text.startswith("cifar10:"):
        return text
    try:
        train = Location.parse(text, what="training data")
    except UserInputError:
        return None
    try:
        if train.is_dir():
            return train.uri if train.exists("test.parquet") else None
        if train.name == "train.parquet":
            sibling = Location.parse(train.uri[: -len("train.parquet")] + "test.parquet")
            return sibling.uri if sibling.exists() else None
    except OSError:
        return None
    return None
