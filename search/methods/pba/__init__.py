"""Population Based Augmentation: a population of members trains under a PBT scheduler
(:mod:`.scheduler`, with its event log), each member following its schedule of policies
(:mod:`.trial`); :mod:`.method` is the method."""
