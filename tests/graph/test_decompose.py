"""tlm.graph.decompose: nn.EmbeddingBag, which TVM's importer refused, rewritten into operators it
converts; exact against PyTorch in every mode (fast, torch only), and imported and built by TVM."""

import numpy as np
import pytest


def _bag(mode: str, padding_idx=None, last: bool = False, weighted: bool = False):
    import torch

    class Bag(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bag = torch.nn.EmbeddingBag(50, 8, mode=mode, padding_idx=padding_idx, include_last_offset=last)

        def forward(self, ids, offsets, weights=None):
            return self.bag(ids, offsets, per_sample_weights=weights) if weighted else self.bag(ids, offsets)

    torch.manual_seed(0)
    ids = torch.randint(0, 6, (20,))  # small ids: padding_idx 3 occurs
    offsets = torch.tensor([0, 4, 4, 11] + ([20] if last else []))  # bag 1 is empty
    args = (ids, offsets) + ((torch.rand(20),) if weighted else ())
    return Bag().eval(), args


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("padding_idx", [None, 3])
@pytest.mark.parametrize("last", [False, True])
def test_embedding_bag_rewritten_exactly(mode, padding_idx, last):
    import torch

    from tlm.graph.decompose import decompose_unsupported

    model, args = _bag(mode, padding_idx, last)
    rewritten = decompose_unsupported(torch.export.export(model, args))
    assert not [n for n in rewritten.graph.nodes if "embedding_bag" in str(n.target)]
    torch.testing.assert_close(rewritten.module()(*args), model(*args), rtol=1e-6, atol=1e-6)


def test_per_sample_weights_and_other_outputs():
    import torch

    from tlm.graph.decompose import decompose_unsupported

    model, args = _bag("sum", weighted=True)
    rewritten = decompose_unsupported(torch.export.export(model, args))
    torch.testing.assert_close(rewritten.module()(*args), model(*args), rtol=1e-6, atol=1e-6)

    class ReadsBagSizes(torch.nn.Module):  # offset2bag and the bag sizes are not computed: left as it was
        def forward(self, w, ids, offsets):
            out = torch.ops.aten._embedding_bag(w, ids, offsets, False, 1)
            return out[0], out[2]

    exported = torch.export.export(ReadsBagSizes(), (torch.rand(50, 8),) + args[:2])
    assert decompose_unsupported(exported) is exported


@pytest.mark.tvm
def test_embedding_bag_imports_and_builds():
    """The battery's embedding_bag model was refused at import (`aten._embedding_bag`)."""
    import torch
    import tvm
    from tvm import relax

    from tlm.graph.importer import import_torch

    model, args = _bag("mean", padding_idx=3)
    mod = import_torch(model, args).mod
    vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
    got = vm["main"](*[tvm.runtime.tensor(a.numpy()) for a in args]).numpy()
    np.testing.assert_allclose(got, model(*args).detach().numpy(), rtol=1e-5, atol=1e-6)
