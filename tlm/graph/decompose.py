"""Operators TVM's PyTorch importer has no conversion for, rewritten into ones it has.

`nn.EmbeddingBag` (and `F.embedding_bag`) reach torch.export as `aten.embedding_bag`, which
becomes `aten._embedding_bag` in TVM 0.27's importer, which refuses it (torch has no decomposition
for it). `decompose_unsupported` replaces it,
in the exported program, by its definition over static shapes: with n indices in B bags,

    member[b, j] = offsets[b] <= j < end[b]                  (and indices[j] != padding_idx)
    rows = weight[indices] * per_sample_weights               (n, D)
    sum = member @ rows;  mean = sum / max(1, |bag|);  max = max over the bag's rows (0 if empty)

a (B, n) mask and a matmul instead of a segment reduction: TVM has every one of those operators,
and bags of a model's size (hundreds of indices) cost little. Only the bags themselves are
computed: a program that also reads the operator's other outputs (offset2bag, bag sizes, the
max's indices; training code) is left as it was, and its refusal stands.
"""

from __future__ import annotations

from typing import Any


def _embedding_bag(weight, indices, offsets, scale_grad_by_freq=False, mode=0, sparse=False,
                   per_sample_weights=None, include_last_offset=False, padding_idx=-1):
    """aten._embedding_bag over static shapes (its first output; the other three are placeholders
    that `decompose_unsupported` makes sure no one reads)."""
    import torch

    n = indices.shape[0]
    starts = offsets[:-1] if include_last_offset else offsets
    ends = offsets[1:] if include_last_offset else torch.cat([offsets[1:], offsets.new_full((1,), n)])
    pos = torch.arange(n, dtype=offsets.dtype, device=offsets.device)
    member = (pos[None, :] >= starts[:, None]) & (pos[None, :] < ends[:, None])  # (B, n)
    if padding_idx is not None and padding_idx >= 0:
        member = member & (indices != padding_idx)[None, :]
    rows = torch.index_select(weight, 0, indices)  # (n, D)
    if per_sample_weights is not None:
        rows = rows * per_sample_weights[:, None]
    mask = member.to(weight.dtype)
    size = mask.sum(dim=1)  # (B,)
    if mode == 2:  # max
        picked = torch.where(member[:, :, None], rows[None, :, :], torch.finfo(weight.dtype).min)
        out = torch.where(size[:, None] > 0, picked.amax(dim=1), 0.0)
    else:
        out = mask @ rows
        if mode == 1:  # mean
            out = out / torch.clamp(size, min=1.0)[:, None]
    unused = offsets.new_zeros(offsets.shape)
    return out, indices.new_zeros(indices.shape), unused, unused


def _only_first_output_read(node) -> bool:
    import operator

    return all(u.op == "call_function" and u.target is operator.getitem and (u.args[1] == 0 or not u.users)
               for u in node.users)


def decompose_unsupported(exported) -> Any:
    """`exported` (a torch.export ExportedProgram) with the operators this module knows rewritten
    into ones TVM's importer converts; the same program where there are none (or where one of
    them has an output other than its first read)."""
    import torch

    aten = torch.ops.aten  # export keeps `embedding_bag`; TVM's importer decomposes it to `_embedding_bag`
    ops = {op: _embedding_bag for op in (aten.embedding_bag.default, aten.embedding_bag.padding_idx,
                                         aten._embedding_bag.default, aten._embedding_bag_forward_only.default)}
    found = {n.target for n in exported.graph.nodes if n.op == "call_function" and n.target in ops
             and _only_first_output_read(n)}
    if not found:
        return exported
    return exported.run_decompositions({op: ops[op] for op in found})
