"""The built-in search methods, registered in :data:`autoaug.search.method.METHODS` in this order
(the first is the default): the one place that lists them. :mod:`autoaug.search.config` imports
this module, so every configuration sees them; another method is one module and one
:func:`~autoaug.search.method.register_method` call."""

from __future__ import annotations

from autoaug.search import density, pba, train_method
from autoaug.search.method import register_method

__all__ = ["BUILT_IN"]

#: The training method (AutoAugment), density matching (Fast AutoAugment), Population Based Augmentation.
BUILT_IN = tuple(register_method(m) for m in (train_method.METHOD, density.METHOD, pba.METHOD))
