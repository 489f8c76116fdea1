import os

import pytest

# Keep task caches of the test run apart from the user's.
os.environ.setdefault("TLM_CACHE", os.path.join(os.path.dirname(__file__), "..", ".cache", "tlm"))


@pytest.fixture(scope="session")
def host():
    from tlm.graph.target import host_target

    return host_target()


@pytest.fixture(scope="session")
def matmul32():
    """A 32x32x32 float32 matmul task (the tiny workload of TVM CPU tests)."""
    from tlm.graph.tasks import matmul_task

    return matmul_task(32)
