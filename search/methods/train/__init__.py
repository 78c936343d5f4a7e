"""The training method (AutoAugment): Optuna proposes policies, each trial trains the proxy model
with one (:mod:`.trial`), ASHA stops the weak ones early; :mod:`.method` is the method."""
