"""tlm: a tensor language model that schedules deep-learning kernels on Apache TVM."""

from tlm.errors import TlmError
from tlm.tasks import Task

__version__ = "0.1.0"

__all__ = ["Task", "TlmError", "compile", "extract_tasks", "__version__"]


def extract_tasks(module, example_inputs, target=None):
    """Tasks (fused subgraphs) of a torch.nn.Module that torch.export accepts; see tlm.graph."""
    from tlm.graph import extract_tasks as _extract

    return _extract(module, example_inputs, target=target)


def compile(module, example_inputs=None, *, db=None, target=None, **kwargs):  # noqa: A001
    """Compile a torch.nn.Module (or zoo name): with `db=` from its records, with `budget=` after
    tuning with the TLM tuner first; see tlm.compile_job.compile_model."""
    from tlm.compile_job import compile_model

    return compile_model(module, example_inputs, db=db, target=target, **kwargs)
