"""What a search decides around its method, the same for every method: the base and the warm start
measured on the data (:mod:`.calibrate`), how far apart two scores must be (:mod:`.noise`), the
candidates re-scored and one chosen (:mod:`.rescore`), the best trials assembled into a policy
(:mod:`.assemble`), the published policies a search starts from (:mod:`.warm_start`) and what each
operation did to the scores (:mod:`.op_effects`).

Imports only the search's vocabulary (:mod:`autoaug.search.score`, :mod:`~autoaug.search.space`,
:mod:`~autoaug.search.budget`, :mod:`~autoaug.search.run_dir`); nothing of Tune's plumbing or of a method."""
