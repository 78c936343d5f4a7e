"""How far apart two policies' scores must be to be told apart, measured from the runs a search has.

A run's score (:data:`~autoaug.search.score.METRIC`: the mean validation accuracy over the last
``score_window`` epochs) is the mean over the validation images of each image's score in that
window (the share of the window's epochs it was classified right). Every run of the search's own
runs outside Tune (calibration, re-scoring: :func:`autoaug.search.decide.proxy_runs.train_and_score`) keeps
those per-image scores, so the difference between two policies scored on the same images has two
measurable parts:

- **per image** (``sampling``): the variance over the images of the two runs' per-image
  difference, over n. It holds what 1,000 validation images can and cannot tell, and the part of
  a run's seed-to-seed luck that falls on single images. It is measured from one run of each,
  on the user's data (at 98% accuracy it is a fraction of what it is at 60%).
- **per run** (``training``): the part of the seed-to-seed spread that moves the whole run (one
  seed better on every image), which only repeated runs of one policy show: the spread of their
  scores beyond what their per-image difference explains.

The per-run part is measured from the repeated runs the search has (``df`` pairs of them). With
few of them that estimate is itself noisy (a single pair can show a tenth of the true spread one
time in four), so it is pooled with the per-image part, measured on the same runs, as if that
were one more repeat: on CIFAR-10's proxy the two are of the same size (0.74 and 1.03 points of a
run's 1.29, benchmarks/results/score-noise-cifar10). With no repeats at all the per-run part is
taken equal to the per-image part; the record says so. No constant of another dataset is used.

Runs without per-image scores (saved by an earlier version) count with the binomial variance of
their accuracy, p(1 - p)/n per run: an upper bound of the per-image part that needs no pairing.
"""

from __future__ import annotations

import base64
import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

from autoaug.search.score import METRIC

__all__ = [
    "IMAGE_SCORES",
    "Noise",
    "as_runs",
    "score_of",
    "encode_image_scores",
    "decode_image_scores",
    "measure",
    "difference_se",
]

#: Key of a run's per-image scores in its result: ``{"window": k, "counts": base64 of one uint8 per
#: image, the epochs of the window it was right in, "val": fingerprint of the validation images}``.
IMAGE_SCORES = "image_scores"


def encode_image_scores(counts: Any, window: int, val_fingerprint: str) -> dict[str, Any]:
    import numpy as np

    arr = np.asarray(counts, dtype=np.uint8)
    return {"window": int(window), "counts": base64.b64encode(arr.tobytes()).decode("ascii"), "val": val_fingerprint}


def decode_image_scores(record: Mapping[str, Any] | None) -> tuple[Any, str] | None:
    """``(per-image scores in [0, 1] as a float array, validation fingerprint)``, or None."""
    if not record or not record.get("counts"):
        return None
    import numpy as np

    counts = np.frombuffer(base64.b64decode(record["counts"]), dtype=np.uint8).astype(np.float64)
    return counts / max(1, int(record["window"])), str(record.get("val", ""))


@dataclasses.dataclass(frozen=True)
class Noise:
    """One run's score spread as measured (fractions of accuracy), and where it comes from.

    ``sampling``: the per-image part of one run's score sd; ``training``: the per-run part (as
    used: pooled with the per-image part as one more repeat); ``measured_training``: the per-run
    part the repeats alone show (None without repeats); ``df``: the repeated pairs behind it."""

    sampling: float
    training: float
    measured_training: float | None
    df: int
    paired: bool  # the per-image part measured from per-image scores (else binomial)

    @property
    def sd(self) -> float:
        return math.sqrt(self.sampling**2 + self.training**2)

    def source(self) -> str:
        """What a person reads: the spread, its parts and what measured them."""
        pts = lambda v: f"{v * 100:.2f}"  # noqa: E731
        part = "per image" if self.paired else "binomial (no per-image scores)"
        if self.df == 0:
            run = f"per run {pts(self.training)} taken equal to it, no run repeated yet"
        else:
            pairs = f"{self.df} repeated pair{'s' if self.df != 1 else ''}"
            run = (
                f"per run {pts(self.training)} from {pts(self.measured_training or 0.0)} over {pairs} "
                "pooled with the per-image part"
            )
        return f"a run's spread {pts(self.sd)} points measured on these runs: {part} {pts(self.sampling)}, {run}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "sd": self.sd,
            "sampling": self.sampling,
            "training": self.training,
            "measured_training": self.measured_training,
            "df": self.df,
            "paired": self.paired,
        }


def as_runs(runs: Mapping[str, Sequence[Any]]) -> dict[str, list[Mapping[str, Any]]]:
    """``{label: [run result, ...]}`` with bare scores as runs without per-image scores, and
    labels without runs left out."""
    return {
        label: [r if isinstance(r, Mapping) else {METRIC: float(r)} for r in rs] for label, rs in runs.items() if rs
    }


def score_of(run: Mapping[str, Any]) -> float:
    """A run's score (:data:`METRIC`; ``val_accuracy`` in runs saved before it existed)."""
    return float(run.get(METRIC, run.get("val_accuracy")))


def _image_vectors(runs: Sequence[Mapping[str, Any]]) -> list[tuple[Any, str] | None]:
    return [decode_image_scores(r.get(IMAGE_SCORES)) for r in runs]


def _binomial(run: Mapping[str, Any]) -> float:
    p = min(max(score_of(run), 0.0), 1.0)
    n = max(1, int(run.get("val_size") or 1000))
    return p * (1 - p) / n


def _pair_var(a: tuple[Any, str] | None, b: tuple[Any, str] | None, ra: Mapping, rb: Mapping) -> tuple[float, bool]:
    """Variance of the difference of two single runs' scores from their images (paired when both
    have per-image scores on the same images, else the sum of their binomial variances)."""
    if a is not None and b is not None and a[1] == b[1] and len(a[0]) == len(b[0]) and len(a[0]) > 1:
        d = a[0] - b[0]
        return float(d.var(ddof=1)) / len(d), True
    return _binomial(ra) + _binomial(rb), False


def measure(runs: Mapping[str, Sequence[Any]], repeats: Sequence[tuple[float, int]] = ()) -> Noise:
    """The noise of one run's score from ``runs`` (``{label: [run result, ...]}``, every run of a
    stage: scored on the same validation images; a bare score counts as a run without per-image
    scores).

    Per-image part: half the mean variance of the paired per-image difference over every pair of
    runs of different labels (their disagreement; runs of one label disagree less). Per-run part:
    for each label with several runs, the variance of its runs' scores beyond the mean per-image
    variance of their pairs, pooled over labels by degrees of freedom, then pooled with the
    per-image part as one more degree of freedom (see the module docs). ``repeats``: per-run
    parts measured elsewhere on the same data and proxy, ``(sd, df)`` each (the calibration's,
    for re-scoring), pooled with these runs' own by their degrees of freedom."""
    runs = as_runs(runs)
    labels = list(runs)
    vectors = {label: _image_vectors(runs[label]) for label in labels}
    between: list[float] = []
    paired_all = True
    for i, a in enumerate(labels):
        for b in labels[i + 1 :]:
            for ra, va in zip(runs[a], vectors[a]):
                for rb, vb in zip(runs[b], vectors[b]):
                    var, paired = _pair_var(va, vb, ra, rb)
                    between.append(var)
                    paired_all = paired_all and paired
    within_excess: list[tuple[float, int]] = []  # (sum of squares beyond the per-image part, df)
    within_image: list[float] = []
    for label in labels:
        rs, vs = list(runs[label]), vectors[label]
        if len(rs) < 2:
            continue
        scores = [score_of(r) for r in rs]
        mean = math.fsum(scores) / len(scores)
        ss = math.fsum((s - mean) ** 2 for s in scores)
        pairs = [_pair_var(vs[i], vs[j], rs[i], rs[j]) for i in range(len(rs)) for j in range(i + 1, len(rs))]
        image = math.fsum(v for v, _ in pairs) / len(pairs) / 2  # per-image variance of one run
        paired_all = paired_all and all(p for _, p in pairs)
        within_image.append(image)
        within_excess.append((ss - (len(rs) - 1) * image, len(rs) - 1))
    if between:
        sampling_var = math.fsum(between) / len(between) / 2
    elif within_image:
        sampling_var = math.fsum(within_image) / len(within_image)
    else:  # a single run
        only = runs[labels[0]][0] if labels else {}
        sampling_var = _binomial(only) if only else 0.0
        paired_all = False
    within_excess += [(float(sd) ** 2 * int(df), int(df)) for sd, df in repeats if df and sd is not None]
    df = sum(d for _, d in within_excess)
    measured = None
    if df:
        measured = math.sqrt(max(0.0, math.fsum(s for s, _ in within_excess) / df))
        training_var = (df * measured**2 + sampling_var) / (df + 1)
    else:
        training_var = sampling_var
    return Noise(
        sampling=math.sqrt(sampling_var),
        training=math.sqrt(training_var),
        measured_training=measured,
        df=df,
        paired=paired_all,
    )


def difference_se(noise: Noise, runs_a: int, runs_b: int) -> float:
    """Standard error of the difference of two policies' mean scores over ``runs_a`` and
    ``runs_b`` runs."""
    return noise.sd * math.sqrt(1 / max(1, runs_a) + 1 / max(1, runs_b))
