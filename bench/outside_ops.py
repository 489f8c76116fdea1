"""Operator-level entries of the outside-zoo battery (bench/outside_models.py lists them, family
"op"): one small module per PyTorch operator or idiom that the zoo's and the battery's models do
not use, so that a graph pass, a legalization or a build that fails on it shows up by name.

Each is (module class, its keyword arguments, the input's shape); forward takes one float32 tensor
and returns one float tensor (integer results are cast), constants (indices, masks) are buffers.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class Lambda(nn.Module):
    """forward(x) = fn(self, x); `setup(self)` registers the parameters and buffers it reads."""

    def __init__(self, fn, setup=None):
        super().__init__()
        self.fn = fn
        if setup is not None:
            setup(self)

    def forward(self, x):
        return self.fn(self, x)


def _linear(n_in: int, n_out: int):
    return lambda m: setattr(m, "lin", nn.Linear(n_in, n_out))


def _index(name: str, values):
    return lambda m: m.register_buffer(name, torch.tensor(values))


def _conv(*args, **kw):
    return lambda m: setattr(m, "conv", nn.Conv2d(*args, **kw))


# name -> (description, forward, setup or None, input shape)
OPS: dict[str, tuple] = {
    "op_bilinear_ac": ("F.interpolate bilinear x2, align_corners=True",
                       lambda m, x: F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=True),
                       None, (1, 8, 15, 17)),
    "op_bicubic": ("F.interpolate bicubic to 23x29", lambda m, x: F.interpolate(x, size=(23, 29), mode="bicubic"),
                   None, (1, 4, 16, 16)),
    "op_pixel_shuffle": ("nn.PixelShuffle(2) after a 3x3 conv", lambda m, x: F.pixel_shuffle(m.conv(x), 2),
                         _conv(8, 32, 3, padding=1), (1, 8, 16, 16)),
    "op_pixel_unshuffle": ("F.pixel_unshuffle(2) then a 1x1 conv", lambda m, x: m.conv(F.pixel_unshuffle(x, 2)),
                           _conv(32, 16, 1), (1, 8, 16, 16)),
    "op_reflect_pad": ("F.pad reflect then a 3x3 conv", lambda m, x: m.conv(F.pad(x, (1, 1, 1, 1), mode="reflect")),
                       _conv(8, 8, 3), (1, 8, 20, 20)),
    "op_replicate_pad": ("F.pad replicate (2, 3, 1, 0)", lambda m, x: F.pad(x, (2, 3, 1, 0), mode="replicate"),
                         None, (1, 4, 12, 12)),
    "op_dilated_conv": ("Conv2d 3x3 dilation 2, padding 2", lambda m, x: m.conv(x),
                        _conv(16, 16, 3, padding=2, dilation=2), (1, 16, 28, 28)),
    "op_grouped_conv": ("Conv2d groups 3 (24 -> 36 channels), stride 2", lambda m, x: m.conv(x),
                        _conv(24, 36, 3, stride=2, padding=1, groups=3), (1, 24, 28, 28)),
    "op_asym_conv": ("Conv2d kernel (1, 7) then (7, 1)", lambda m, x: m.c2(m.c1(x)),
                     lambda m: (setattr(m, "c1", nn.Conv2d(8, 8, (1, 7), padding=(0, 3))),
                                setattr(m, "c2", nn.Conv2d(8, 8, (7, 1), padding=(3, 0)))), (1, 8, 17, 17)),
    "op_conv_transpose1d": ("ConvTranspose1d k4 s2 p1", lambda m, x: m.up(x),
                            lambda m: setattr(m, "up", nn.ConvTranspose1d(16, 8, 4, stride=2, padding=1)), (1, 16, 50)),
    "op_conv_transpose_odd": ("ConvTranspose2d k3 s2 p1 output_padding 1", lambda m, x: m.up(x),
                              lambda m: setattr(m, "up", nn.ConvTranspose2d(8, 4, 3, stride=2, padding=1,
                                                                            output_padding=1)), (1, 8, 9, 9)),
    "op_conv3d": ("Conv3d 3x3x3 on a 8-frame clip", lambda m, x: m.conv(x),
                  lambda m: setattr(m, "conv", nn.Conv3d(4, 8, 3, padding=1)), (1, 4, 8, 16, 16)),
    "op_avgpool_ceil": ("AvgPool2d 3 s2 ceil_mode, count_include_pad False",
                        lambda m, x: F.avg_pool2d(x, 3, 2, padding=1, ceil_mode=True, count_include_pad=False),
                        None, (1, 8, 15, 15)),
    "op_maxpool_dilated": ("MaxPool2d 3 s2 dilation 2", lambda m, x: F.max_pool2d(x, 3, 2, dilation=2),
                           None, (1, 8, 20, 20)),
    "op_adaptive_avg": ("AdaptiveAvgPool2d((5, 7)) on 17x19", lambda m, x: F.adaptive_avg_pool2d(x, (5, 7)),
                        None, (1, 8, 17, 19)),
    "op_adaptive_max": ("AdaptiveMaxPool2d(3)", lambda m, x: F.adaptive_max_pool2d(x, 3), None, (1, 8, 12, 12)),
    "op_instance_norm": ("InstanceNorm2d affine", lambda m, x: m.norm(x),
                         lambda m: setattr(m, "norm", nn.InstanceNorm2d(8, affine=True)), (2, 8, 12, 12)),
    "op_layer_norm_chw": ("LayerNorm over (C, H, W)", lambda m, x: m.norm(x),
                          lambda m: setattr(m, "norm", nn.LayerNorm([8, 6, 6])), (2, 8, 6, 6)),
    "op_rms_norm": ("nn.RMSNorm(64)", lambda m, x: m.norm(x),
                    lambda m: setattr(m, "norm", nn.RMSNorm(64)), (2, 10, 64)),
    "op_l2_normalize": ("F.normalize over the last dim", lambda m, x: F.normalize(x, dim=-1), None, (4, 33)),
    "op_activations": ("hardswish, mish, softplus, elu, selu, leaky_relu, prelu",
                       lambda m, x: m.prelu(F.leaky_relu(F.selu(F.elu(F.softplus(F.mish(F.hardswish(x))))), 0.1)),
                       lambda m: setattr(m, "prelu", nn.PReLU(8)), (1, 8, 10, 10)),
    "op_log_softmax": ("log_softmax and logsumexp", lambda m, x: F.log_softmax(x, -1) + torch.logsumexp(x, -1, True),
                       None, (3, 7, 50)),
    "op_var_std": ("var (unbiased) and std over a dim", lambda m, x: x.var(1, keepdim=True) + x.std(-1, keepdim=True),
                   None, (4, 9, 13)),
    "op_amax_argmax": ("amax plus argmax (cast)", lambda m, x: x.amax(-1) + x.argmax(-1).float(), None, (5, 6, 31)),
    "op_cumsum": ("cumsum over the last dim", lambda m, x: torch.cumsum(x, -1), None, (3, 100)),
    "op_topk": ("topk(5) values", lambda m, x: torch.topk(x, 5, dim=-1).values, None, (4, 40)),
    "op_sort": ("sort descending", lambda m, x: torch.sort(x, -1, descending=True).values, None, (3, 33)),
    "op_gather": ("torch.gather along dim 1", lambda m, x: torch.gather(x, 1, m.idx),
                  _index("idx", [[0, 2, 2, 1], [3, 3, 0, 1]]), (2, 5)),
    "op_index_select": ("index_select rows", lambda m, x: x.index_select(0, m.idx), _index("idx", [4, 0, 2, 2]),
                        (6, 9)),
    "op_fancy_index": ("x[:, idx] with a tensor index", lambda m, x: x[:, m.idx], _index("idx", [1, 1, 0, 5]),
                       (3, 7, 2)),
    "op_masked_fill": ("masked_fill with a causal mask", lambda m, x: x.masked_fill(m.mask, -1e4).softmax(-1),
                       lambda m: m.register_buffer("mask", torch.ones(12, 12, dtype=torch.bool).triu(1)), (2, 12, 12)),
    "op_where": ("torch.where(x > 0, x, 0.1 * x)", lambda m, x: torch.where(x > 0, x, 0.1 * x), None, (4, 17)),
    "op_clamp_round": ("clamp, round, floor, remainder", lambda m, x: torch.round(x.clamp(-1, 1) * 4)
                       + torch.floor(x) + torch.remainder(x, 0.7), None, (4, 19)),
    "op_einsum": ("einsum bhqd,bhkd->bhqk", lambda m, x: torch.einsum("bhqd,bhkd->bhqk", x, x * 0.5), None,
                  (1, 2, 10, 8)),
    "op_baddbmm": ("torch.baddbmm", lambda m, x: torch.baddbmm(m.b, x, x.transpose(1, 2)),
                   lambda m: m.register_buffer("b", torch.randn(3, 6, 6)), (3, 6, 5)),
    "op_matmul_bcast": ("4-D matmul broadcast against a 2-D weight", lambda m, x: x @ m.w,
                        lambda m: m.register_buffer("w", torch.randn(24, 20)), (2, 3, 5, 24)),
    "op_sdpa_causal": ("F.scaled_dot_product_attention is_causal", lambda m, x: F.scaled_dot_product_attention(
        x, x, x, is_causal=True), None, (1, 4, 16, 8)),
    "op_mha": ("nn.MultiheadAttention, batch_first, 3 heads", lambda m, x: m.mha(x, x, x, need_weights=False)[0],
               lambda m: setattr(m, "mha", nn.MultiheadAttention(24, 3, batch_first=True)), (2, 9, 24)),
    "op_gru": ("nn.GRU, 1 layer, hidden 20", lambda m, x: m.gru(x)[0],
               lambda m: setattr(m, "gru", nn.GRU(12, 20, batch_first=True)), (1, 10, 12)),
    "op_repeat_interleave": ("repeat_interleave 3 on dim 1", lambda m, x: x.repeat_interleave(3, dim=1), None,
                             (2, 5, 4)),
    "op_roll_flip": ("roll and flip", lambda m, x: torch.roll(x, 3, -1) + torch.flip(x, [1]), None, (2, 6, 11)),
    "op_tril_triu": ("tril + triu", lambda m, x: torch.tril(x) + torch.triu(x, 1) * 2, None, (2, 9, 9)),
    "op_unfold": ("F.unfold 3x3 patches (im2col) then a Linear", lambda m, x: m.lin(F.unfold(x, 3).transpose(1, 2)),
                  _linear(36, 10), (1, 4, 8, 8)),
    "op_split_cat": ("chunk into 3, reorder, cat", lambda m, x: torch.cat(list(reversed(x.chunk(3, 1))), 1), None,
                     (2, 9, 5)),
    "op_expand_mul": ("expand a (1, C, 1, 1) gate", lambda m, x: x * torch.sigmoid(x.mean((2, 3), keepdim=True)),
                      None, (2, 16, 7, 7)),
    "op_embedding_pad": ("nn.Embedding(padding_idx=0) on ids from a float input",
                         lambda m, x: m.emb((x.abs() * 10).long().clamp(max=49)).sum(1),
                         lambda m: setattr(m, "emb", nn.Embedding(50, 16, padding_idx=0)), (2, 7)),
    "op_linear_no_bias_3d": ("Linear without bias on (2, 5, 7, 33)", lambda m, x: m.lin(x),
                             lambda m: setattr(m, "lin", nn.Linear(33, 17, bias=False)), (2, 5, 7, 33)),
    "op_pow_sqrt": ("pow, rsqrt, exp2, log1p", lambda m, x: torch.pow(x.abs() + 1, 1.7) + torch.rsqrt(x.abs() + 1)
                    + torch.exp2(x) + torch.log1p(x.abs()), None, (3, 21)),
    "op_grid_sample": ("F.grid_sample bilinear on a fixed sampling grid", lambda m, x: F.grid_sample(
        x, m.grid, mode="bilinear", padding_mode="zeros", align_corners=False),
        lambda m: m.register_buffer("grid", torch.rand(1, 6, 7, 2) * 2.2 - 1.1), (1, 3, 9, 11)),
    "op_nearest_exact": ("F.interpolate nearest-exact to 13x9", lambda m, x: F.interpolate(x, size=(13, 9),
                         mode="nearest-exact"), None, (1, 4, 8, 6)),
    "op_circular_pad": ("F.pad circular then a 3x3 conv", lambda m, x: m.conv(F.pad(x, (1, 1, 1, 1), mode="circular")),
                        _conv(4, 4, 3), (1, 4, 10, 10)),
    "op_trilinear": ("F.interpolate trilinear x2", lambda m, x: F.interpolate(x, scale_factor=2, mode="trilinear"),
                     None, (1, 2, 4, 5, 6)),
    "op_conv_transpose3d": ("ConvTranspose3d k2 s2", lambda m, x: m.up(x),
                            lambda m: setattr(m, "up", nn.ConvTranspose3d(4, 2, 2, stride=2)), (1, 4, 3, 4, 4)),
    "op_lp_pool": ("LPPool2d norm 2, kernel 2", lambda m, x: F.lp_pool2d(x, 2, 2), None, (1, 4, 8, 8)),
    "op_adaptive_avg3d": ("AdaptiveAvgPool3d((2, 3, 3))", lambda m, x: F.adaptive_avg_pool3d(x, (2, 3, 3)), None,
                          (1, 2, 5, 7, 8)),
    "op_bilstm": ("nn.LSTM bidirectional, 1 layer, hidden 12", lambda m, x: m.lstm(x)[0],
                  lambda m: setattr(m, "lstm", nn.LSTM(10, 12, batch_first=True, bidirectional=True)), (2, 7, 10)),
    "op_transformer_dec": ("nn.TransformerDecoderLayer with a causal mask, memory = input",
                           lambda m, x: m.dec(x, x, tgt_mask=m.mask, tgt_is_causal=True),
                           lambda m: (setattr(m, "dec", nn.TransformerDecoderLayer(32, 4, 64, batch_first=True,
                                                                                  dropout=0.0)),
                                      m.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(9))),
                           (1, 9, 32)),
    "op_cdist": ("torch.cdist p=2 between halves", lambda m, x: torch.cdist(x[:, :5], x[:, 5:]), None, (2, 11, 6)),
    "op_cosine_sim": ("F.cosine_similarity over the last dim", lambda m, x: F.cosine_similarity(x, x.flip(1), dim=-1),
                      None, (3, 8, 16)),
    "op_linalg_norm": ("torch.linalg.vector_norm ord 3 and matrix norm fro",
                       lambda m, x: torch.linalg.vector_norm(x, 3, dim=-1) + torch.linalg.matrix_norm(x)[..., None],
                       None, (2, 6, 7)),
    "op_bucketize": ("torch.bucketize against fixed boundaries (cast)",
                     lambda m, x: torch.bucketize(x, m.edges).float() * x,
                     lambda m: m.register_buffer("edges", torch.tensor([-1.0, -0.2, 0.0, 0.5, 1.5])), (4, 9)),
    "op_math_misc": ("atan2, hypot, lerp, logaddexp, erfinv, sign, trunc",
                     lambda m, x: torch.atan2(x, x.flip(-1) + 0.1) + torch.hypot(x, x * 0.5) + torch.lerp(x, x.cos(), 0.3)
                     + torch.logaddexp(x, -x) + torch.erfinv(torch.tanh(x) * 0.9) + torch.sign(x) + torch.trunc(x * 3),
                     None, (3, 17)),
    "op_softmin_glu": ("F.softmin and F.glu", lambda m, x: F.softmin(x, -1)[..., :8] + F.glu(x, -1), None, (4, 16)),
    "op_group_conv1d": ("Conv1d groups 4, dilation 3, then AdaptiveAvgPool1d(5)",
                        lambda m, x: F.adaptive_avg_pool1d(m.conv(x), 5),
                        lambda m: setattr(m, "conv", nn.Conv1d(8, 12, 3, dilation=3, groups=4)), (2, 8, 40)),
    "op_channel_shuffle": ("channel shuffle (view, transpose, view), groups 4",
                           lambda m, x: x.view(1, 4, 4, 6, 6).transpose(1, 2).reshape(1, 16, 6, 6), None, (1, 16, 6, 6)),
    "op_max_unpool_like": ("max_pool2d with indices gathered back (scatter-free unpool)",
                           lambda m, x: F.max_pool2d(x, 2, return_indices=True)[0].repeat_interleave(2, -1)
                           .repeat_interleave(2, -2) * (x > 0), None, (1, 3, 8, 8)),
    "op_int_math": ("integer floor_divide, remainder and bitwise ops (cast back)",
                    lambda m, x: (torch.floor_divide((x * 7).long(), 3) + torch.remainder((x * 5).long(), 4)
                                  + ((x * 9).long() & 6) + ((x * 3).long() ^ 1)).float(), None, (4, 10)),
}


def make(name: str):
    """(module in eval mode, (input,)) of an operator entry, seeded."""
    _, fn, setup, shape = OPS[name]
    torch.manual_seed(0)
    module = Lambda(fn, setup).eval()
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(0))
    return module, (x,)
