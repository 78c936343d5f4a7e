"""The foundation every other ``autoaug`` package builds on; it imports none of them.

* :mod:`autoaug.core.errors` -- the error hierarchy (:class:`AutoaugError` and its user-input,
  data, store, search and cluster branches); ``autoaug``'s ``main`` maps it to exit codes.
* :mod:`autoaug.core.location` -- :class:`Location`, a local path or a URI: parse, read, atomic
  write, list, delete.
* :mod:`autoaug.core.ray_session` -- connecting this process to Ray (embedded or a cluster).
"""
