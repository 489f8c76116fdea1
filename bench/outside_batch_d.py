"""The outside-zoo battery's fourth batch (2026-12-04): architectures and operators the first three
did not reach. Plain PyTorch: channel shuffles, fire modules, a spatial transformer (affine_grid),
PointNet, a VQ-VAE's nearest-codebook lookup, a diffusion U-Net block with a timestep input, a
dense-routed mixture of experts (top-k + scatter), CBAM, a NeRF MLP, a ConvLSTM. Transformers:
sliding-window and soft-capped causal LMs built from token ids alone, a sparse mixture of experts,
a protein LM, an audio codec, time-series, hierarchical vision and depth models, and more
(ENTRIES lists them; bench/outside_models.py appends them to the battery). Random weights; every
forward returns one float tensor.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

try:
    from outside_common import Entry, _audio, _hf, _plain, _text, _vision
except ImportError:  # imported as bench.outside_batch_d
    from bench.outside_common import Entry, _audio, _hf, _plain, _text, _vision


# ------------------------------------------------------------------ plain PyTorch
def _shuffle(x: torch.Tensor, groups: int) -> torch.Tensor:
    n, c, h, w = x.shape
    return x.view(n, groups, c // groups, h, w).transpose(1, 2).reshape(n, c, h, w)


class _ShuffleUnit(nn.Module):
    """ShuffleNetV2's unit: split channels (stride 1) or branch both (stride 2), 1x1-dw3x3-1x1, shuffle."""

    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.stride = stride
        mid = cout // 2
        bin_ = cin if stride == 2 else cin // 2
        if stride == 2:
            self.left = nn.Sequential(nn.Conv2d(cin, cin, 3, 2, 1, groups=cin, bias=False), nn.BatchNorm2d(cin),
                                      nn.Conv2d(cin, mid, 1, bias=False), nn.BatchNorm2d(mid), nn.ReLU())
        self.right = nn.Sequential(nn.Conv2d(bin_, mid, 1, bias=False), nn.BatchNorm2d(mid), nn.ReLU(),
                                   nn.Conv2d(mid, mid, 3, stride, 1, groups=mid, bias=False), nn.BatchNorm2d(mid),
                                   nn.Conv2d(mid, mid, 1, bias=False), nn.BatchNorm2d(mid), nn.ReLU())

    def forward(self, x):
        if self.stride == 1:
            a, b = x.chunk(2, dim=1)
            out = torch.cat([a, self.right(b)], 1)
        else:
            out = torch.cat([self.left(x), self.right(x)], 1)
        return _shuffle(out, 2)


class ShuffleNetV2(nn.Module):
    """ShuffleNetV2 at width 0.5-like (24 -> 48 -> 96 -> 192), (1, 3, 96, 96) -> 10 logits."""

    def __init__(self, widths: tuple[int, ...] = (48, 96, 192)):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 24, 3, 2, 1, bias=False), nn.BatchNorm2d(24), nn.ReLU(),
                                  nn.MaxPool2d(3, 2, 1))
        layers, cin = [], 24
        for w in widths:
            layers += [_ShuffleUnit(cin, w, 2), _ShuffleUnit(w, w, 1)]
            cin = w
        self.stages = nn.Sequential(*layers)
        self.head = nn.Linear(cin, 10)

    def forward(self, x):
        return self.head(self.stages(self.stem(x)).mean((2, 3)))


class _Fire(nn.Module):
    def __init__(self, cin: int, squeeze: int, expand: int):
        super().__init__()
        self.squeeze = nn.Conv2d(cin, squeeze, 1)
        self.e1 = nn.Conv2d(squeeze, expand, 1)
        self.e3 = nn.Conv2d(squeeze, expand, 3, padding=1)

    def forward(self, x):
        s = F.relu(self.squeeze(x))
        return torch.cat([F.relu(self.e1(s)), F.relu(self.e3(s))], 1)


class SqueezeNet(nn.Module):
    """SqueezeNet 1.1 at half width: fire modules, ceil-mode max pools, conv classifier, global pool."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 32, 3, 2), nn.ReLU(), nn.MaxPool2d(3, 2, ceil_mode=True),
            _Fire(32, 8, 32), _Fire(64, 8, 32), nn.MaxPool2d(3, 2, ceil_mode=True),
            _Fire(64, 16, 64), _Fire(128, 16, 64), nn.MaxPool2d(3, 2, ceil_mode=True),
            _Fire(128, 24, 96))
        self.classifier = nn.Sequential(nn.Dropout(0.5), nn.Conv2d(192, 10, 1), nn.ReLU(), nn.AdaptiveAvgPool2d(1))
        for m in self.modules():  # He init (no BatchNorm): PyTorch's default leaves logits that ignore the input
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, nonlinearity="relu")

    def forward(self, x):
        return self.classifier(self.features(x)).flatten(1)


class SpatialTransformer(nn.Module):
    """A spatial transformer network: a localisation CNN regresses a 2x3 affine matrix (initialised near
    the identity), F.affine_grid + F.grid_sample resample the input, a small CNN classifies it."""

    def __init__(self):
        super().__init__()
        self.loc = nn.Sequential(nn.Conv2d(1, 8, 7), nn.MaxPool2d(2), nn.ReLU(), nn.Conv2d(8, 10, 5),
                                 nn.MaxPool2d(2), nn.ReLU())
        self.fc_loc = nn.Sequential(nn.Linear(10 * 3 * 3, 32), nn.ReLU(), nn.Linear(32, 6))
        with torch.no_grad():  # a small random turn of the identity, so the grid is not trivial
            self.fc_loc[2].weight.mul_(0.1)
            self.fc_loc[2].bias.copy_(torch.tensor([1.0, 0.1, 0.0, -0.1, 1.0, 0.05]))
        self.net = nn.Sequential(nn.Conv2d(1, 10, 5), nn.MaxPool2d(2), nn.ReLU(), nn.Conv2d(10, 20, 5),
                                 nn.MaxPool2d(2), nn.ReLU(), nn.Flatten(), nn.Linear(320, 10))

    def forward(self, x):  # (1, 1, 28, 28)
        theta = self.fc_loc(self.loc(x).flatten(1)).view(-1, 2, 3)
        grid = F.affine_grid(theta, list(x.shape), align_corners=False)
        return self.net(F.grid_sample(x, grid, align_corners=False))


class PointNet(nn.Module):
    """PointNet classifier: an input T-Net (shared MLP as Conv1d k=1, max over points, 3x3 transform
    applied with bmm), shared MLP, global max pool, MLP head; (1, 3, 256) points -> 8 logits."""

    def __init__(self):
        super().__init__()
        self.tnet = nn.Sequential(nn.Conv1d(3, 32, 1), nn.BatchNorm1d(32), nn.ReLU(), nn.Conv1d(32, 64, 1),
                                  nn.BatchNorm1d(64), nn.ReLU())
        self.tfc = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 9))
        self.mlp = nn.Sequential(nn.Conv1d(3, 32, 1), nn.BatchNorm1d(32), nn.ReLU(), nn.Conv1d(32, 64, 1),
                                 nn.BatchNorm1d(64), nn.ReLU(), nn.Conv1d(64, 128, 1))
        self.head = nn.Sequential(nn.Linear(128, 64), nn.ReLU(), nn.Linear(64, 8))

    def forward(self, x):
        t = self.tfc(self.tnet(x).amax(2)).view(-1, 3, 3) + torch.eye(3)
        x = torch.bmm(t, x)
        return self.head(self.mlp(x).max(dim=2).values)


class VQVAE(nn.Module):
    """A VQ-VAE autoencoder: strided conv encoder, nearest codebook vector per position (squared
    distances, argmin, embedding lookup), ConvTranspose2d decoder; (1, 3, 32, 32) -> same."""

    def __init__(self, codes: int = 64, dim: int = 16):
        super().__init__()
        self.enc = nn.Sequential(nn.Conv2d(3, 32, 4, 2, 1), nn.ReLU(), nn.Conv2d(32, dim, 4, 2, 1))
        self.codebook = nn.Embedding(codes, dim)
        self.dec = nn.Sequential(nn.ConvTranspose2d(dim, 32, 4, 2, 1), nn.ReLU(), nn.ConvTranspose2d(32, 3, 4, 2, 1))

    def forward(self, x):
        z = self.enc(x)  # (1, dim, 8, 8)
        flat = z.permute(0, 2, 3, 1).reshape(-1, z.shape[1])
        d = (flat ** 2).sum(1, keepdim=True) - 2 * flat @ self.codebook.weight.t() + (self.codebook.weight ** 2).sum(1)
        q = self.codebook(d.argmin(1)).view(z.shape[0], z.shape[2], z.shape[3], -1).permute(0, 3, 1, 2)
        return torch.sigmoid(self.dec(q))


class DiffusionBlock(nn.Module):
    """A diffusion U-Net's ResBlock + spatial self-attention with the timestep as a second input:
    sinusoidal embedding (exp, sin, cos), MLP, added per channel; GroupNorm + SiLU convs;
    F.scaled_dot_product_attention over the 16x16 positions."""

    def __init__(self, ch: int = 64, tdim: int = 64):
        super().__init__()
        self.tdim = tdim
        self.temb = nn.Sequential(nn.Linear(tdim, 4 * tdim), nn.SiLU(), nn.Linear(4 * tdim, ch))
        self.inp = nn.Conv2d(4, ch, 3, padding=1)
        self.n1, self.c1 = nn.GroupNorm(8, ch), nn.Conv2d(ch, ch, 3, padding=1)
        self.n2, self.c2 = nn.GroupNorm(8, ch), nn.Conv2d(ch, ch, 3, padding=1)
        self.na, self.qkv, self.proj = nn.GroupNorm(8, ch), nn.Conv2d(ch, 3 * ch, 1), nn.Conv2d(ch, ch, 1)
        self.out = nn.Conv2d(ch, 4, 3, padding=1)

    def forward(self, x, t):  # x (1, 4, 16, 16), t (1,) float timesteps
        half = self.tdim // 2
        freqs = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float32) / half)
        args = t[:, None] * freqs[None]
        emb = self.temb(torch.cat([torch.cos(args), torch.sin(args)], dim=-1))
        h = self.inp(x)
        r = self.c1(F.silu(self.n1(h))) + emb[:, :, None, None]
        h = h + self.c2(F.silu(self.n2(r)))
        n, c, hh, ww = h.shape
        q, k, v = self.qkv(self.na(h)).reshape(n, 3, 4, c // 4, hh * ww).permute(1, 0, 2, 4, 3)
        a = F.scaled_dot_product_attention(q, k, v).permute(0, 1, 3, 2).reshape(n, c, hh, ww)
        return self.out(h + self.proj(a))


class DenseMoE(nn.Module):
    """A mixture of experts routed densely (static shapes): top-2 of 8 gate logits per token, softmax
    over the two, scattered into a (tokens, experts) weight matrix, every expert's GELU MLP computed
    by einsum and weighted; (1, 32, 64) tokens."""

    def __init__(self, d: int = 64, experts: int = 8, hidden: int = 96, k: int = 2):
        super().__init__()
        self.k = k
        self.norm = nn.LayerNorm(d)
        self.gate = nn.Linear(d, experts, bias=False)
        self.w1 = nn.Parameter(torch.randn(experts, d, hidden) / math.sqrt(d))
        self.w2 = nn.Parameter(torch.randn(experts, hidden, d) / math.sqrt(hidden))

    def forward(self, x):
        h = self.norm(x)
        logits = self.gate(h)
        top, idx = logits.topk(self.k, dim=-1)
        weights = torch.zeros_like(logits).scatter(-1, idx, top.softmax(-1))  # (1, T, E)
        inner = F.gelu(torch.einsum("btd,edh->bteh", h, self.w1))
        out = torch.einsum("bteh,ehd->bted", inner, self.w2)
        return x + (out * weights[..., None]).sum(2)


class _CBAM(nn.Module):
    """Channel attention (avg- and max-pooled MLP) then spatial attention (7x7 conv over channel mean and max)."""

    def __init__(self, ch: int, r: int = 8):
        super().__init__()
        self.mlp = nn.Sequential(nn.Conv2d(ch, ch // r, 1), nn.ReLU(), nn.Conv2d(ch // r, ch, 1))
        self.spatial = nn.Conv2d(2, 1, 7, padding=3)

    def forward(self, x):
        x = x * torch.sigmoid(self.mlp(x.mean((2, 3), keepdim=True)) + self.mlp(x.amax((2, 3), keepdim=True)))
        s = torch.cat([x.mean(1, keepdim=True), x.amax(1, keepdim=True)], 1)
        return x * torch.sigmoid(self.spatial(s))


class CBAMNet(nn.Module):
    """A small ResNet-style CNN with a CBAM module after each stage, (1, 3, 64, 64) -> 10 logits."""

    def __init__(self):
        super().__init__()
        chans, layers, cin = (32, 64, 96), [], 3
        for c in chans:
            layers += [nn.Conv2d(cin, c, 3, 2, 1, bias=False), nn.BatchNorm2d(c), nn.ReLU(), _CBAM(c)]
            cin = c
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(cin, 10)

    def forward(self, x):
        return self.head(self.body(x).mean((2, 3)))


class NeRF(nn.Module):
    """NeRF's MLP: positional encoding of 3-D points (sin, cos at 6 octaves), 6 ReLU layers of 128 with
    the encoding concatenated again at the 4th, density (ReLU) and colour (sigmoid); (1024, 3) -> (1024, 4)."""

    def __init__(self, octaves: int = 6, w: int = 128):
        super().__init__()
        self.register_buffer("freqs", 2.0 ** torch.arange(octaves, dtype=torch.float32) * math.pi)
        din = 3 + 6 * octaves
        self.a = nn.ModuleList([nn.Linear(din, w)] + [nn.Linear(w, w) for _ in range(3)])
        self.b = nn.ModuleList([nn.Linear(w + din, w)] + [nn.Linear(w, w)])
        self.out = nn.Linear(w, 4)

    def forward(self, x):
        xf = (x[:, :, None] * self.freqs).flatten(1)
        enc = torch.cat([x, torch.sin(xf), torch.cos(xf)], -1)
        h = enc
        for m in self.a:
            h = F.relu(m(h))
        h = torch.cat([h, enc], -1)
        for m in self.b:
            h = F.relu(m(h))
        o = self.out(h)
        return torch.cat([F.relu(o[:, :1]), torch.sigmoid(o[:, 1:])], -1)


class ConvLSTM(nn.Module):
    """A ConvLSTM cell unrolled over 4 frames: one 3x3 conv over [frame, hidden] gives the four gates;
    (1, 4, 8, 16, 16) frames -> the last hidden state (1, 16, 16, 16)."""

    def __init__(self, cin: int = 8, hidden: int = 16):
        super().__init__()
        self.hidden = hidden
        self.conv = nn.Conv2d(cin + hidden, 4 * hidden, 3, padding=1)

    def forward(self, x):
        n, steps, _, hh, ww = x.shape
        h = x.new_zeros(n, self.hidden, hh, ww)
        c = torch.zeros_like(h)
        for s in range(steps):
            i, f, o, g = self.conv(torch.cat([x[:, s], h], 1)).chunk(4, 1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(c)
        return h


def _diffusion():
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    return DiffusionBlock().eval(), (torch.randn(1, 4, 16, 16, generator=gen), torch.tensor([417.0]))


def _encodec(**cfg):
    """transformers' EnCodec with its codebooks set from the encoder's frames of the example input,
    as training's k-means init would: left at transformers' zeros, every frame takes code 0 and
    the output is the same for any input (a check of it checks only the decoder)."""
    make = _hf("EncodecModel", "EncodecConfig", "audio_values",
               lambda: (torch.randn(1, 1, 1600, generator=torch.Generator().manual_seed(0)),), **cfg)

    def made():
        wrapped, x = make()
        codec, gen = wrapped.model, torch.Generator().manual_seed(0)
        with torch.no_grad():
            for conv in codec.modules():  # He init under the weight norm: transformers' N(0, 0.02) fades the signal
                if isinstance(conv, (nn.Conv1d, nn.ConvTranspose1d)) and hasattr(conv, "parametrizations"):
                    g, v = conv.parametrizations.weight.original0, conv.parametrizations.weight.original1
                    nn.init.kaiming_normal_(v, generator=gen)
                    g.copy_(torch.linalg.vector_norm(v, dim=[d for d in range(v.dim()) if g.shape[d] == 1],
                                                     keepdim=True))  # weight = g * v / |v| = v
            frames = codec.encoder(x[0]).transpose(1, 2).reshape(-1, codec.config.codebook_dim)
            for layer in codec.quantizer.layers:  # residual vector quantisation: each layer codes what is left
                book = layer.codebook
                pick = torch.randint(0, frames.shape[0], (book.embed.shape[0],), generator=gen)
                book.embed.copy_(frames[pick] + 0.1 * frames.std() * torch.randn(book.embed.shape, generator=gen))
                frames = frames - book.decode(book.encode(frames))
        return wrapped, x

    return made


def _series(cls_name: str, cfg_name: str, shape: tuple, field: str = "last_hidden_state", **cfg):
    inputs = lambda: (torch.randn(*shape, generator=torch.Generator().manual_seed(0)),)  # noqa: E731
    return _hf(cls_name, cfg_name, field, inputs, **cfg)


_SMALL_LM = dict(hidden_size=64, intermediate_size=160, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, max_position_embeddings=128)

ENTRIES = [
    # ------------------------------------------------------------------ plain PyTorch
    Entry("shufflenet_v2", "plain", "ShuffleNetV2-like, widths 48/96/192: channel split (chunk), depthwise 3x3, "
          "channel shuffle (view-transpose-reshape), (1, 3, 96, 96)", _plain(ShuffleNetV2, 1, 3, 96, 96)),
    Entry("squeezenet", "plain", "SqueezeNet 1.1 at half width: fire modules (concatenated 1x1 and 3x3 expands), "
          "ceil-mode max pools, conv classifier, (1, 3, 96, 96)", _plain(SqueezeNet, 1, 3, 96, 96)),
    Entry("stn", "plain", "spatial transformer network: regressed affine matrix, F.affine_grid + F.grid_sample, "
          "small CNN classifier, (1, 1, 28, 28)", _plain(SpatialTransformer, 1, 1, 28, 28)),
    Entry("pointnet", "plain", "PointNet classifier: T-Net 3x3 transform by bmm, Conv1d k=1 shared MLPs, max over "
          "256 points", _plain(PointNet, 1, 3, 256)),
    Entry("vqvae", "plain", "VQ-VAE: conv encoder, nearest of 64 codebook vectors (distances, argmin, embedding), "
          "ConvTranspose2d decoder, (1, 3, 32, 32)", _plain(VQVAE, 1, 3, 32, 32)),
    Entry("diffusion_block", "plain", "diffusion U-Net ResBlock + attention with a timestep input: sinusoidal "
          "embedding, GroupNorm + SiLU, scaled_dot_product_attention, (1, 4, 16, 16) and t", _diffusion),
    Entry("dense_moe", "plain", "mixture of 8 experts routed densely: top-2 gate, softmax, scatter, einsum "
          "expert MLPs, (1, 32, 64)", _plain(DenseMoE, 1, 32, 64)),
    Entry("cbam", "plain", "CNN with CBAM after each stage: channel attention (avg and max pooled MLP), "
          "spatial attention (7x7 conv over channel mean and max), (1, 3, 64, 64)", _plain(CBAMNet, 1, 3, 64, 64)),
    Entry("nerf", "plain", "NeRF MLP: sin/cos positional encoding at 6 octaves, skip concat, density and colour "
          "heads, 1024 points", _plain(NeRF, 1024, 3)),
    Entry("conv_lstm", "plain", "ConvLSTM cell unrolled over 4 frames of (8, 16, 16), hidden 16",
          _plain(ConvLSTM, 1, 4, 8, 16, 16)),
    # ------------------------------------------------------------------ transformers
    Entry("mistral", "text", "transformers MistralModel from token ids alone: sliding-window causal mask (window "
          "16) built inside, GQA 4q/2kv, 40 tokens, hidden 64, 2 layers",
          _text("MistralModel", "MistralConfig", 40, sliding_window=16, **_SMALL_LM)),
    Entry("gemma2", "text", "transformers Gemma2Model from token ids alone: logit soft-capping (tanh), local "
          "(window 16) and global layers, 40 tokens, hidden 64, 2 layers",
          _text("Gemma2Model", "Gemma2Config", 40, sliding_window=16, head_dim=16, **_SMALL_LM)),
    Entry("qwen3", "text", "transformers Qwen3Model from token ids alone: RMS-normed q and k per head, GQA, "
          "40 tokens, hidden 64, 2 layers", _text("Qwen3Model", "Qwen3Config", 40, head_dim=16, **_SMALL_LM)),
    Entry("mixtral", "text", "transformers MixtralModel from token ids alone: sparse mixture of 4 experts, top-2 "
          "routing, 24 tokens, hidden 64, 2 layers",
          _text("MixtralModel", "MixtralConfig", 24, num_local_experts=4, num_experts_per_tok=2, **_SMALL_LM)),
    Entry("modernbert", "text", "transformers ModernBertModel: alternating local (window 16) and global attention, "
          "RoPE, GeGLU, 40 tokens, hidden 64, 3 layers",
          _text("ModernBertModel", "ModernBertConfig", 40, hidden_size=64, intermediate_size=128,
                num_hidden_layers=3, num_attention_heads=4, local_attention=16, global_attn_every_n_layers=3,
                pad_token_id=0, bos_token_id=1, eos_token_id=2, sep_token_id=2, cls_token_id=1)),
    Entry("esm", "text", "transformers EsmModel (protein LM): rotary embeddings, token dropout scaling, 48 tokens "
          "of a 33-letter vocabulary, hidden 64, 2 layers",
          _text("EsmModel", "EsmConfig", 48, vocab=33, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                intermediate_size=128, position_embedding_type="rotary", pad_token_id=1, mask_token_id=32,
                token_dropout=True)),
    Entry("xlnet", "text", "transformers XLNetModel: relative positional attention with its content and position "
          "streams, 32 tokens, d_model 64, 2 layers",
          _text("XLNetModel", "XLNetConfig", 32, d_model=64, n_layer=2, n_head=4, d_inner=128)),
    Entry("encodec", "audio", "transformers EncodecModel (audio codec): SEANet conv encoder with LSTM, residual "
          "vector quantiser (nearest codebook), ConvTranspose1d decoder; 1 ch x 1600 samples",
          _encodec(num_filters=8, upsampling_ratios=[4, 4, 2], codebook_size=64, codebook_dim=32, hidden_size=32,
                   num_lstm_layers=1, target_bandwidths=[1.5], sampling_rate=8000)),
    Entry("speech2text", "audio", "transformers Speech2TextModel encoder: Conv1d subsampler with GLU, sinusoidal "
          "positions; 80 filterbank features x 64 frames, d_model 64, 2 layers",
          _audio("Speech2TextModel", "Speech2TextConfig", (1, 64, 80), encoder=True, d_model=64, encoder_layers=2,
                 encoder_attention_heads=4, encoder_ffn_dim=128, decoder_layers=1, decoder_attention_heads=4,
                 decoder_ffn_dim=128, conv_channels=64, max_source_positions=64)),
    Entry("w2v2_conformer", "audio", "transformers Wav2Vec2ConformerModel: rotary position embeddings, conformer "
          "blocks (GLU, depthwise Conv1d, batch norm, half-step FFNs); 1 s at 16 kHz, hidden 64, 2 layers",
          _audio("Wav2Vec2ConformerModel", "Wav2Vec2ConformerConfig", (1, 16000), hidden_size=64,
                 num_hidden_layers=2, num_attention_heads=2, intermediate_size=128,
                 position_embeddings_type="rotary", conv_depthwise_kernel_size=15, conv_dim=(32,) * 7,
                 conv_stride=(5, 2, 2, 2, 2, 2, 2), conv_kernel=(10, 3, 3, 3, 3, 2, 2),
                 num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4)),
    Entry("patchtst", "audio", "transformers PatchTSTModel (time series): mean/std scaling, patches by unfold, "
          "channel-independent transformer; 96 steps x 3 channels, d_model 32",
          _series("PatchTSTModel", "PatchTSTConfig", (1, 96, 3), num_input_channels=3, context_length=96,
                  patch_length=16, patch_stride=8, d_model=32, num_hidden_layers=2, num_attention_heads=4,
                  ffn_dim=64, do_mask_input=False)),
    Entry("cvt", "vision", "transformers CvtModel: convolutional token embedding, depthwise-conv q/k/v "
          "projections, 64x64, 2 stages (depths 1, 2: transformers indexes stage 1's drop-path rates by stage)", _vision("CvtModel", "CvtConfig", 64, embed_dim=[32, 64], depth=[1, 2],
                                                     num_heads=[1, 2], patch_sizes=[7, 3], patch_stride=[4, 2],
                                                     patch_padding=[2, 1], mlp_ratio=[2.0, 2.0],
                                                     cls_token=[False, True], qkv_bias=[True, True],
                                                     drop_rate=[0.0, 0.0], attention_drop_rate=[0.0, 0.0],
                                                     drop_path_rate=[0.0, 0.0], kernel_qkv=[3, 3],
                                                     padding_kv=[1, 1], stride_kv=[2, 2], padding_q=[1, 1],
                                                     stride_q=[1, 1])),
    Entry("pvt_v2", "vision", "transformers PvtV2Model: overlapping patch embeddings, spatial-reduction attention, "
          "depthwise conv in the MLP, 64x64, 2 stages",
          _vision("PvtV2Model", "PvtV2Config", 64, image_size=64, num_encoder_blocks=2, depths=[1, 1],
                  sr_ratios=[4, 2], hidden_sizes=[32, 64], patch_sizes=[7, 3], strides=[4, 2],
                  num_attention_heads=[1, 2], mlp_ratios=[2, 2])),
    Entry("dpt", "vision", "transformers DPTForDepthEstimation: ViT features reassembled (ConvTranspose2d, "
          "strided convs), fusion blocks with align_corners bilinear upsampling, depth head; 64x64",
          _vision("DPTForDepthEstimation", "DPTConfig", 64, field="predicted_depth", image_size=64, patch_size=8,
                  hidden_size=64, num_hidden_layers=4, num_attention_heads=2, intermediate_size=128,
                  backbone_out_indices=[0, 1, 2, 3], neck_hidden_sizes=[16, 32, 64, 64], fusion_hidden_size=32,
                  head_in_index=-1, reassemble_factors=[4, 2, 1, 0.5], reset=True)),
    Entry("swin2sr", "vision", "transformers Swin2SRForImageSuperResolution: Swin V2 windows with padding to the "
          "window, pixel-shuffle x2 upsampler; 24x24 -> 48x48",
          _vision("Swin2SRForImageSuperResolution", "Swin2SRConfig", 24, field="reconstruction", image_size=24,
                  embed_dim=32, depths=[2], num_heads=[2], window_size=8, upscale=2, upsampler="pixelshuffle")),
    Entry("hiera", "vision", "transformers HieraModel: mask-unit attention, unroll/reroll of tokens, pooled "
          "query strides, 64x64, 2 stages",
          _vision("HieraModel", "HieraConfig", 64, image_size=[64, 64], patch_size=[7, 7], patch_stride=[4, 4],
                  patch_padding=[3, 3], embed_dim=32, depths=[1, 1], num_heads=[1, 2],
                  query_stride=[2, 2], num_query_pool=1, masked_unit_size=[8, 8], masked_unit_attention=[True, False])),
]
