"""The search methods: the interface every method implements and the registry of methods
(:mod:`.base`), the list of the built-in ones (:mod:`.builtin`), and one folder per method
(:mod:`.train`, :mod:`.density`, :mod:`.pba`) owning everything about it: its settings, checks,
flags, trials, Tune pieces and summary. A method folder imports nothing of another; no module
outside a method's folder imports it, but :mod:`.builtin`.

Kept empty so that importing :mod:`.base` does not import every method."""
