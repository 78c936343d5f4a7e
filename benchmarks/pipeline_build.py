"""What building a policy's DALI pipeline costs a process: the fixed price every trial process,
calibration run and ``compare`` run pays before its first batch.

``apply_policy`` runs inside ``pipeline_def(enable_conditionals=True)``, so DALI's AutoGraph fork
converts (parses, rewrites and compiles) every Python function the pipeline definition calls, the
first time a process calls it, and runs the converted code afterwards. Each measurement is a fresh
Python process that builds the pipelines of ``--policies`` in turn (the first pays the
conversions; the later ones show what a process that builds a second policy pays: a PBA member,
a re-used trial actor), on 32x32 images in memory, batch 64, one DALI CPU thread; the time from
calling the pipeline definition to the first batch out (graph, ``build()``, one ``run()``). CPU
time is the process's own (``time.process_time``), which a busy machine disturbs less than the
wall time. Medians over ``--runs`` processes.

    .venv/bin/python benchmarks/pipeline_build.py --runs 5
    .venv/bin/python benchmarks/pipeline_build.py --runs 5 --json benchmarks/results/pipeline-build/after.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

POLICIES = ("autoaugment-cifar10", "randaugment", "autoaugment-imagenet", "trivialaugment")


def _one_process(policies: list[str]) -> list[dict]:
    """In this process: each policy's build, in turn."""
    import numpy as np
    from nvidia.dali import fn, pipeline_def, types

    from autoaug.policies import presets
    from autoaug.policies.dali_apply import apply_base, apply_policy

    rng = np.random.default_rng(0)
    images = [rng.integers(0, 256, (32, 32, 3), dtype=np.uint8) for _ in range(64)]
    out = []
    for ref in policies:
        policy = presets.resolve(ref)

        @pipeline_def(enable_conditionals=True)
        def graph():
            data = fn.external_source(source=lambda: images, batch=True, layout="HWC", dtype=types.UINT8)
            return apply_policy(policy, apply_base(policy.base, data, image_size=(32, 32)))

        wall, cpu = time.perf_counter(), time.process_time()
        pipe = graph(batch_size=64, num_threads=1, device_id=None, seed=0, exec_dynamic=True)
        pipe.build()
        pipe.run()
        out.append({"policy": ref, "wall_s": time.perf_counter() - wall, "cpu_s": time.process_time() - cpu})
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=5, help="fresh processes")
    p.add_argument("--policies", default=",".join(POLICIES), help="presets, built in this order in each process")
    p.add_argument("--json", default=None, help="write the figures here")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    policies = a.policies.split(",")
    if a.child:
        print(json.dumps(_one_process(policies)))
        return 0
    runs = []
    for _ in range(a.runs):
        proc = subprocess.run(
            [sys.executable, __file__, "--child", "--policies", a.policies],
            capture_output=True,
            text=True,
            check=True,
            env=os.environ,
        )
        runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    rows = []
    print(f"{'order':>5}  {'policy':<22} {'wall s (median)':>16} {'cpu s (median)':>15}")
    for i, ref in enumerate(policies):
        wall = statistics.median(r[i]["wall_s"] for r in runs)
        cpu = statistics.median(r[i]["cpu_s"] for r in runs)
        rows.append({"order": i + 1, "policy": ref, "wall_s": wall, "cpu_s": cpu})
        print(f"{i + 1:>5}  {ref:<22} {wall:>16.2f} {cpu:>15.2f}")
    if a.json:
        os.makedirs(os.path.dirname(a.json) or ".", exist_ok=True)
        with open(a.json, "w") as f:
            json.dump(
                {
                    "what": "DALI pipeline build of a policy, per process (benchmarks/pipeline_build.py)",
                    "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "loadavg": os.getloadavg()},
                    "runs": a.runs,
                    "rows": rows,
                    "per_process": runs,
                },
                f,
                indent=2,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
