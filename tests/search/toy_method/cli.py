"""``python -m toy_method.cli ARGS``: the ``autoaug`` CLI with the toy method registered -- the one
registration a new method needs (a built-in one's is a line of ``search/methods/builtin.py``)."""

from __future__ import annotations

import sys

from autoaug.launch.cli import main
from autoaug.search.methods.base import register_method

from .method import METHOD

register_method(METHOD)

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
