"""autoaug.core.machine: the kind of machine a run trained on (the CPU's model and the instruction
sets that change numerics, or the GPU's model), and runs kept within one kind."""

from __future__ import annotations

from autoaug.core.machine import cpu_kind, left_out_line, machine_kind, one_kind

ZEN3 = """processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC 7B13 64-Core Processor
flags\t\t: fpu sse sse2 avx fma avx2 sha_ni

processor\t: 1
model name\t: AMD EPYC 7B13 64-Core Processor
flags\t\t: fpu sse sse2 avx fma avx2 sha_ni
"""
SAPPHIRE_RAPIDS = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz
flags\t\t: fpu avx fma avx2 avx512f avx512_vnni avx512_bf16 avx512_fp16 amx_bf16 amx_tile amx_int8
"""
GRAVITON = """processor\t: 0
BogoMIPS\t: 2100.00
Features\t: fp asimd evtstrm aes sve bf16 i8mm
CPU part\t: 0xd40
"""


def test_a_cpu_kind_is_its_model_and_the_instruction_sets_that_change_numerics():
    assert cpu_kind(ZEN3) == "cpu AMD EPYC 7B13 64-Core Processor (avx2 fma)"
    assert cpu_kind(SAPPHIRE_RAPIDS) == (
        "cpu Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz (avx2 fma avx512f avx512_bf16 avx512_fp16 amx_bf16)"
    )
    assert cpu_kind(GRAVITON).endswith("(asimd sve bf16)")
    assert machine_kind("cpu") == machine_kind() == cpu_kind(open("/proc/cpuinfo").read())


def _run(seed, machine, precision="float32"):
    return {"policy": "p", "seed": seed, "machine": machine, "precision": precision}


def test_runs_of_one_kind_are_kept_and_the_others_left_out_in_one_line():
    zen, xeon = cpu_kind(ZEN3), cpu_kind(SAPPHIRE_RAPIDS)
    runs = [_run(0, zen), _run(1, xeon), _run(2, zen), _run(3, None), _run(4, zen, "bfloat16"), _run(5, None, "")]
    split = one_kind(runs)
    assert split.kind == (zen, "float32")
    assert [r["seed"] for r in split.kept] == [0, 2, 3, 5] and split.unrecorded == 2
    assert [r["seed"] for r in split.left_out] == [1, 4]  # another machine; the same one in another precision
    line = left_out_line(split, lambda r: f"{r['policy']} seed {r['seed']}")
    assert line.startswith(f"left out 2 runs of another kind of machine than the 4 compared ({zen}, float32): ")
    assert f"1 on {xeon}, float32 (p seed 1); 1 on {zen}, bfloat16 (p seed 4)" in line
    assert split.describe() == f"{zen}, float32 (2 runs recorded no machine)"


def test_runs_that_record_no_machine_are_all_kept():
    runs = [_run(0, None), _run(1, "")]
    split = one_kind(runs)
    assert split.kind is None and split.kept == runs and left_out_line(split, str) is None
