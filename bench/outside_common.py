"""What the outside-zoo battery's model lists share (bench/outside_models.py, outside_batch_d.py):
the Entry record and the makers of Hugging Face and plain-PyTorch entries (random weights, built
from config objects; nothing is downloaded)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from tlm.graph.zoo import calibrate_batchnorm


@dataclass(frozen=True)
class Entry:
    name: str  # short, unique, [a-z0-9_]
    family: str  # "vision", "audio", "text", "plain" or "op" (one operator, bench/outside_ops.py)
    description: str  # one line: what it is and its configuration
    make: Callable[[], tuple]  # -> (torch.nn.Module in eval mode, tuple of example input tensors)


class HFWrapper(torch.nn.Module):
    """A Hugging Face model whose forward returns one tensor (`field` of its output). `causal_seq`:
    passes an explicit additive 4-D causal mask (transformers' own causal-mask graph failed to
    build until tlm.graph.converters' cumsum; `llama_own_mask` calls a model with token ids alone, as
    a user does) and, with `position_ids`, fixed position ids (OPT would derive them with cumsum)."""

    def __init__(self, model, field: str, causal_seq: int = 0, position_ids: bool = False):
        super().__init__()
        self.model = model
        self.field = field
        mask = positions = None
        if causal_seq:
            mask = torch.full((causal_seq, causal_seq), torch.finfo(torch.float32).min)
            mask = torch.triu(mask, diagonal=1)[None, None].contiguous()
            if position_ids:
                positions = torch.arange(causal_seq)[None]
        self.register_buffer("mask", mask, persistent=False)
        self.register_buffer("positions", positions, persistent=False)

    def forward(self, x):
        kwargs = {}
        if self.mask is not None:
            kwargs["attention_mask"] = self.mask
        if self.positions is not None:
            kwargs["position_ids"] = self.positions
        return getattr(self.model(x, **kwargs), self.field)


def _image(size: int):
    return (torch.randn(1, 3, size, size, generator=torch.Generator().manual_seed(0)),)


def _hf(cls_name: str, cfg_name: str, field: str, inputs: Callable[[], tuple], reset: bool = False,
        causal_seq: int = 0, position_ids: bool = False, encoder: bool = False, calibrate: bool = False, **cfg):
    """make() for a transformers model built from `cfg_name(**cfg)`. `reset`: PyTorch's default init
    for Conv/Linear/BatchNorm, He init for Conv2d (HF's N(0, 0.02) makes deep CNN outputs vanish); `encoder`: the model's
    encoder; `calibrate`: batch-norm statistics from one forward on the inputs (as training leaves
    them), where fixed ones make a deep CNN's outputs vanish whatever the weights."""

    def make():
        import transformers

        torch.manual_seed(0)
        config = getattr(transformers, cfg_name)(attn_implementation="eager", **cfg)
        model = getattr(transformers, cls_name)(config)
        if encoder:
            model = model.get_encoder()
        if reset:
            for module in model.modules():
                if isinstance(module, (torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Linear, torch.nn.BatchNorm2d)):
                    module.reset_parameters()
                if isinstance(module, torch.nn.Conv2d):  # He init: activations neither vanish nor explode
                    torch.nn.init.kaiming_normal_(module.weight, nonlinearity="relu")
        wrapped, x = HFWrapper(model, field, causal_seq, position_ids), inputs()
        if calibrate:  # on the example inputs, the scales and shifts kept
            calibrate_batchnorm(wrapped, x, reset=False)
        return wrapped.eval(), x

    return make


def _vision(cls_name: str, cfg_name: str, size: int, field: str = "last_hidden_state", **cfg):
    return _hf(cls_name, cfg_name, field, lambda: _image(size), **cfg)


def _audio(cls_name: str, cfg_name: str, shape: tuple, **cfg):
    inputs = lambda: (torch.randn(*shape, generator=torch.Generator().manual_seed(0)),)  # noqa: E731
    return _hf(cls_name, cfg_name, "last_hidden_state", inputs, **cfg)


def _text(cls_name: str, cfg_name: str, seq: int, vocab: int = 1000, causal: bool = False, **cfg):
    # ids from 4 up, clear of the special tokens (pad is 0 or 1)
    inputs = lambda: (torch.randint(4, vocab, (1, seq), generator=torch.Generator().manual_seed(0)),)  # noqa: E731
    return _hf(cls_name, cfg_name, "last_hidden_state", inputs, causal_seq=seq if causal else 0,
               vocab_size=vocab, use_cache=False, **cfg)


def _plain(cls, *shape, ids: int = 0, **kw):
    """make() for a plain PyTorch model of one input; its BatchNorm layers calibrated on random
    inputs (calibrate_batchnorm: otherwise some CNNs' logits ignore their input)."""

    def make():
        torch.manual_seed(0)
        model = cls(**kw)
        if not ids:
            batch = (max(2, shape[0]), *shape[1:])
            calibrate_batchnorm(model, (torch.randn(batch, generator=torch.Generator().manual_seed(1)),))
        model.eval()
        gen = torch.Generator().manual_seed(0)
        x = torch.randint(0, ids, shape, generator=gen) if ids else torch.randn(*shape, generator=gen)
        return model, (x,)

    return make
