"""The pack's SGD step, per parameter (the loop it replaced, copied here) against the multi-tensor
step (``PackLearner.apply_gradients``); and a solo run's (``learner.SGD``, now multi-tensor)
against ``torch.optim.SGD``'s per-parameter loop (``foreach=False``, what it did before):
milliseconds a step on one CPU thread, same gradients.

    python benchmarks/results/pack-sgd/compare.py
"""

from __future__ import annotations

import time

import torch

from autoaug.proxy_models.learner import Learner
from autoaug.proxy_models.pack import PackLearner
from autoaug.proxy_models.train_config import TrainConfig


def per_tensor(pack: PackLearner, grads: list[torch.Tensor], lr: torch.Tensor) -> None:
    """The step before the multi-tensor one: a loop over the parameters, the K learning rates a
    float32 device tensor."""
    cfg = pack.config
    with torch.no_grad():
        for name, grad in zip(pack.param_names, grads):
            param = pack.params[name]
            if cfg.weight_decay:
                grad = grad.add(param, alpha=cfg.weight_decay)
            buf = pack.momentum[name]
            buf.mul_(cfg.momentum).add_(grad)
            grad = grad.add(buf, alpha=cfg.momentum) if cfg.nesterov else buf
            param.sub_(grad * lr.view((pack.size,) + (1,) * (param.dim() - 1)))


def ms_a_step(step) -> float:
    """Milliseconds a call of ``step`` takes, over about 3 seconds after one untimed call."""
    step()
    t0, n = time.perf_counter(), 0
    while time.perf_counter() - t0 < 3:
        step()
        n += 1
    return (time.perf_counter() - t0) / n * 1e3


def main() -> None:
    torch.set_num_threads(1)
    for preset, k in (("proxy-cpu", 16), ("paper", 4)):
        cfg = TrainConfig.from_preset(preset, data="unused")
        states = []
        for seed in range(k):
            torch.manual_seed(seed)
            states.append(Learner(cfg, num_classes=10, steps_per_epoch=8).state_dict())
        pack = PackLearner(cfg, num_classes=10, steps_per_epoch=8)
        pack.load(states)
        grads = [torch.randn(pack.params[n].shape) for n in pack.param_names]
        lr = torch.tensor(pack.lrs(), dtype=torch.float32)
        for name, step in (
            ("per parameter", lambda: per_tensor(pack, grads, lr)),
            ("multi-tensor", lambda: pack.apply_gradients(grads, pack.lrs())),
        ):
            ms = ms_a_step(step)
            print(f"{preset} ({cfg.model}, {len(grads)} parameter tensors) K={k} {name}: {ms:.2f} ms a step")
        solo = Learner(cfg, num_classes=10, steps_per_epoch=8)
        params = list(solo.model.parameters())
        for p, g in zip(params, grads):
            p.grad = g[0].clone()
        loop = torch.optim.SGD(params, lr=0.1, momentum=0.9, nesterov=True, weight_decay=5e-4, foreach=False)
        for name, step in (("solo, per parameter", loop.step), ("solo, multi-tensor", solo.optimizer.step)):
            ms = ms_a_step(step)
            print(f"{preset} ({cfg.model}) {name}: {ms:.2f} ms a step")


if __name__ == "__main__":
    main()
