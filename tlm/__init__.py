"""tlm: a tensor language model that schedules deep-learning kernels on Apache TVM.

The stages, in pipeline order (a stage imports only itself and the stages above it):

    graph      model -> Relax -> fused tasks (targets, zoo, import, extraction)
    space      task -> design spaces -> programs as tensor sentences; random sampling
    measure    program -> build, check, time -> durable records
    model      sentences -> TLM-base; best records -> fine-tuned TLM; constrained generation
    search     tasks + budget -> tuners (TLM, MetaSchedule, random) -> records; the SFT loop
    compiler   model + records -> one checked, timed library (`tlm compile`, `tlm.compile`)
    eval       suites -> tuned, compiled, timed -> tables and report

`errors` is shared by all; `cli` (the `tlm` command) sits on top.
"""

from tlm.errors import TlmError
from tlm.graph.target import use_host_threads
from tlm.graph.tasks import Task

# Compiled models run on all the host's cores, as PyTorch and ONNX Runtime do; TVM alone would
# give its pool half the logical CPUs (one thread on a 2-core host). Measurements set their own.
use_host_threads()

__version__ = "0.1.0"

__all__ = ["Task", "TlmError", "compile", "extract_tasks", "load", "__version__"]


def extract_tasks(module, example_inputs, target=None):
    """Tasks (fused subgraphs) of a torch.nn.Module that torch.export accepts; see tlm.graph.extract."""
    from tlm.graph.extract import extract_tasks as _extract

    return _extract(module, example_inputs, target=target)


def compile(module, example_inputs=None, *, db=None, target=None, **kwargs):  # noqa: A001
    """Compile a torch.nn.Module (or zoo name): with `db=` from its records, with `budget=` after
    tuning with the TLM tuner first; see tlm.compiler.job.compile_model."""
    from tlm.compiler.job import compile_model

    return compile_model(module, example_inputs, db=db, target=target, **kwargs)


def load(path: "str | os.PathLike") -> "tlm.compiler.backend.Library":
    """A library saved by `tlm compile -o PATH`, callable with numpy arrays or torch tensors;
    see tlm.compiler.backend.load."""
    from tlm.compiler.backend import load as _load

    return _load(path)
