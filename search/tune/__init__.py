"""The search's plumbing to Ray Tune and Optuna: a Tune experiment built, restored and run
(:mod:`.experiment`), the Optuna study and its storage (:mod:`.study`), keeping the two consistent
(:mod:`.reconcile`), Tune's writes on a failing filesystem (:mod:`.tune_storage`), the progress
callback (:mod:`.progress`), TensorBoard / MLflow (:mod:`.loggers`).

Imports the search's vocabulary and its decisions (:mod:`autoaug.search.decide`); nothing of a method."""
