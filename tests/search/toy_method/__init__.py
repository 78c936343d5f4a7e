"""A fourth search method, as the package another project would ship (what
``search/methods/<name>/`` holds for a built-in one): its settings, its method and its trial. Its
trials train nothing: a trial's score is computed from its policy (:mod:`.trial`), so a search of it
runs in seconds through the real Ray Tune and Optuna plumbing. ``tests/search/test_fourth_method.py``
builds and installs it with one entry point of the ``autoaug.methods`` group, its only
registration."""
