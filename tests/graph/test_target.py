"""Targets: the host CPU is detected, GPU names resolve, bad targets give one-line errors."""

import pytest

from tlm.errors import TlmError
from tlm.graph.target import GPU_TAGS, host_target, resolve_target


def test_host_target_names_the_cpu_and_cores():
    from tvm.target import codegen

    info = host_target()
    assert info.kind == "llvm"
    assert info.config["mcpu"] == codegen.llvm_get_system_cpu()
    assert info.config["mcpu"] != "native"
    assert info.cores >= 1 and info.config["num-cores"] == info.cores
    assert info.config["mtriple"].split("-")[1] == "unknown"
    assert info.vector_bits in (128, 256, 512)
    info.tvm()  # TVM accepts it


def test_default_and_host_are_the_same():
    assert resolve_target(None).key == resolve_target("host").key


def test_explicit_cpu_gets_its_own_isa():
    info = resolve_target({"kind": "llvm", "mcpu": "haswell", "num-cores": 4})
    assert (info.isa, info.vector_bits, info.cores) == ("avx2", 256, 4)


@pytest.mark.parametrize("name", sorted(GPU_TAGS))
def test_gpu_names(name):
    info = resolve_target(name)
    assert info.kind == "cuda" and info.cpu.startswith("sm_")


@pytest.mark.parametrize(
    "spec",
    ["nonsense", "{bad json", '{"kind": "llvm", "mcpu": "native"}', '{"kind": "llvm", "mcpu": "notacpu"}',
     '{"kind": "nosuchkind"}', '{"kind": "c"}'],
)
def test_bad_targets_raise_one_line_errors(spec):
    with pytest.raises(TlmError) as info:
        resolve_target(spec)
    assert "\n" not in str(info.value)


def test_arch_and_features_come_from_the_target_dict():
    """LLVM's CPU tables, not this machine: the same dict gives the same facts anywhere."""
    icx = resolve_target('{"kind": "llvm", "mcpu": "icelake-server", "num-cores": 2}')
    assert icx.arch == "x86_64" and icx.isa == "avx512"
    assert {"avx2", "fma", "avx512f", "avx512vnni"} <= set(icx.features) and "amx-tile" not in icx.features
    assert resolve_target({"kind": "llvm", "mcpu": "haswell"}).features == ("avx", "avx2", "fma", "f16c")
    arm = resolve_target({"kind": "llvm", "mtriple": "aarch64-unknown-linux-gnu", "mcpu": "neoverse-n1"})
    assert arm.arch == "aarch64" and "neon" in arm.features and "avx2" not in arm.features
    assert resolve_target("a100").arch == "" and resolve_target("a100").features == ()
    assert icx.to_json()["features"] == list(icx.features)


def _threads_in_fresh_process(env_update: dict[str, str]) -> int:
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("TVM_NUM_THREADS", "OMP_NUM_THREADS")}
    env.update(env_update)
    code = "import tlm; from tlm.graph.target import runtime_threads; print(runtime_threads())"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return int(out.stdout.split()[-1])


@pytest.mark.tvm
def test_importing_tlm_gives_tvm_the_host_cores():
    """TVM alone would run one thread on a 2-core host (half the logical CPUs on x86)."""
    import os

    from tlm.graph.target import physical_cores

    assert _threads_in_fresh_process({}) == physical_cores() <= len(os.sched_getaffinity(0))


def test_physical_cores_count_hyperthread_siblings_once(tmp_path, monkeypatch):
    import os

    from tlm.graph import target

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    for cpu, siblings in enumerate(["0,2", "1,3", "0,2", "1,3"]):  # 2 cores x 2 threads
        (tmp_path / f"cpu{cpu}" / "topology").mkdir(parents=True)
        (tmp_path / f"cpu{cpu}" / "topology" / "thread_siblings_list").write_text(siblings + "\n")
    assert target.physical_cores(str(tmp_path)) == 2
    (tmp_path / "cpu3" / "topology" / "thread_siblings_list").unlink()  # unreadable: every CPU counts
    assert target.physical_cores(str(tmp_path)) == 4


@pytest.mark.tvm
def test_a_users_thread_setting_is_kept():
    assert _threads_in_fresh_process({"TVM_NUM_THREADS": "1"}) == 1
    assert _threads_in_fresh_process({"OMP_NUM_THREADS": "1"}) == 1


def test_tvm_default_threads_is_half_the_logical_cpus_on_x86(monkeypatch):
    import platform

    from tlm.graph import target

    monkeypatch.setattr(target.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(platform, "machine", lambda: "x86_64")
    assert target.tvm_default_threads() == 1
    monkeypatch.setattr(platform, "machine", lambda: "aarch64")
    assert target.tvm_default_threads() == 2


# An EfficientNet program (depthwise conv + batch norm + SiLU, NHWC 1x32x32x8) that TVM 0.27's
# TIR common-subexpression elimination miscompiled: 4091 of its 8192 outputs wrong.
_CSE_SENTENCE = ("space 3 1 tile group_conv2d_nhwc 0 1 1 1 1 1 tile group_conv2d_nhwc 1 32 1 2 4 4 tile group_conv2d_nhwc"
                 " 2 32 1 8 1 4 tile group_conv2d_nhwc 3 8 1 1 1 8 tile group_conv2d_nhwc 4 3 1 3 tile "
                 "group_conv2d_nhwc 5 3 1 3 tile group_conv2d_nhwc 6 1 1 1 cat unroll_explicit 16 loc pad_temp inline")


@pytest.mark.tvm
def test_builds_leave_out_tvms_tir_cse_which_miscompiled_a_program():
    """tlm.graph.target.BUILD_CONFIG: the measurer's build (tlm.measure.workers.build_in_worker)
    of that program matches its task's untuned program."""
    import numpy as np
    import torch
    import tvm

    from tlm.graph.extract import extract_tasks
    from tlm.measure.reference import fast_reference
    from tlm.measure.workers import build_in_worker
    from tlm.space.language import parse, prompt_tokens

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(8, 8, 3, padding=1, groups=8, bias=False)
            self.bn = torch.nn.BatchNorm2d(8)

        def forward(self, x):
            return torch.nn.functional.silu(self.bn(self.conv(x)))

    target = resolve_target({"kind": "llvm", "mcpu": "znver3", "num-cores": 2})
    tasks = extract_tasks(Block().eval(), (torch.randn(1, 8, 32, 32),), target)
    (task,) = [t for t in tasks if "conv2d" in t.name and "sigmoid" in t.name]
    prog = parse(" ".join(prompt_tokens(task, target)) + " " + _CSE_SENTENCE, task, target)
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal(a["shape"]).astype(a["dtype"]) for a in task.args]
    inputs[3] = np.abs(inputs[3]) + 0.5  # the batch norm's divisor
    outs = []
    for lib in (build_in_worker(prog.sch.mod, target.tvm(), None), tvm.compile(fast_reference(task.mod), target="llvm")):
        tensors = [tvm.runtime.tensor(x.copy()) for x in inputs]
        lib["main"](*tensors)
        outs.append(tensors[-1].numpy())
    np.testing.assert_allclose(outs[0], outs[1], rtol=1e-4, atol=1e-4)
