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
