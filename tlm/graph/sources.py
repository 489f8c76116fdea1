"""What a command's SOURCE argument names, checked before anything is imported.

Kept out of `tlm.graph.extract.code_digest` (which keys the task caches and the corpus' task
archive, `tlm.search.collect.tasks_archive`): it decides nothing about the tasks extracted.
"""

from __future__ import annotations

import os

from tlm.errors import TlmError


def check_source(source: str) -> None:
    """TlmError unless `source` names a zoo workload or an existing .onnx file (cheap: nothing built),
    so a command says what is wrong with its first argument before it checks the others. The same
    rule as `tlm.graph.importer.import_source`: a path ending in .onnx, or any existing path, is an
    ONNX file; anything else a workload name."""
    if source.endswith(".onnx") or os.path.exists(source):
        if not os.path.isfile(source):
            raise TlmError(f"no such ONNX file: {source}")
        return
    from tlm.graph.zoo import get_workload

    get_workload(source)
