"""The search methods: the interface every method implements and the registry of methods
(:mod:`.base`: the ``autoaug.methods`` entry-point group, whose built-in entries ``pyproject.toml``
lists), and one folder per built-in method owning everything about it: its settings, checks,
flags, trials, Tune pieces and summary. A method folder imports nothing of another; no module
outside a method's folder imports it (the registry loads it through its entry point).

Kept empty so that importing :mod:`.base` does not import every method."""
