"""The built-in search methods, registered in :data:`autoaug.search.methods.base.METHODS` in this order
(the first is the default): the one place that lists them. :mod:`autoaug.search.config` imports
this module, so every configuration sees them; another method is one folder and one
:func:`~autoaug.search.methods.base.register_method` call."""

from __future__ import annotations

from autoaug.search.methods.base import register_method
from autoaug.search.methods.density import method as density
from autoaug.search.methods.pba import method as pba
from autoaug.search.methods.train import method as train

__all__ = ["BUILT_IN"]

#: The training method (AutoAugment), density matching (Fast AutoAugment), Population Based Augmentation.
BUILT_IN = tuple(register_method(m) for m in (train.METHOD, density.METHOD, pba.METHOD))
