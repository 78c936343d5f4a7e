"""A fourth search method, as one folder (what ``search/methods/<name>/`` holds for a real one):
its settings, its method and its trial. Its trials train nothing: a trial's score is computed from
its policy (:mod:`.trial`), so a search of it runs in seconds through the real Ray Tune and
Optuna plumbing. Registered by its test only (``tests/search/test_fourth_method.py``), with
one :func:`~autoaug.search.methods.base.register_method` call."""
