"""Choosing the stored policy among the assembled policy and the best single trial."""
from __future__ import annotations

from autoaug.policies import Policy
from autoaug.search.rescore import Candidate, choose


def _candidates():
    assembled = Candidate("assembled", Policy("a", 10, [[("Rotate", 0.7, 2)], [("Invert", 0.1, 0)]]), ("t1", "t2"), None)
    best = Candidate("best_trial", Policy("b", 10, [[("Rotate", 0.7, 2)]]), ("t1",), 0.61)
    return assembled, best


def test_the_higher_rescored_validation_accuracy_wins_and_every_score_is_recorded():
    assembled, best = _candidates()
    chosen, record = choose([assembled, best], {assembled.key: {"val_accuracy": 0.55}, best.key: {"val_accuracy": 0.58}})
    assert chosen is best and record["chosen"] == "best_trial"
    assert [c["val_accuracy"] for c in record["candidates"]] == [0.55, 0.58]
    assert record["candidates"][1]["search_score"] == 0.61  # the trial's own (optimistic) score is kept apart


def test_a_tie_goes_to_the_assembled_policy_and_a_missing_score_never_wins():
    assembled, best = _candidates()
    chosen, _ = choose([assembled, best], {assembled.key: {"val_accuracy": 0.58}, best.key: {"val_accuracy": 0.58}})
    assert chosen is assembled
    chosen, _ = choose([assembled, best], {best.key: {"val_accuracy": 0.1}})
    assert chosen is best
