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
