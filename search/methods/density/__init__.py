"""Density matching (Fast AutoAugment): K fold models trained once (:mod:`.fold_models`), each
candidate policy scored on a held-out fold without training (:mod:`.trial`); :mod:`.method` is the method."""
