"""The outside-zoo battery's models: architectures that are not in tlm's zoo (tlm/graph/zoo.py).

Random weights only: Hugging Face models are built from their config objects (nothing is
downloaded), the plain-PyTorch ones are in bench/outside_plain*.py, the fourth batch in
bench/outside_batch_d.py. Configurations are small so
that each compiles quickly, but each keeps its architecture's characteristic operators. Every
module's forward returns one float tensor; batch 1.

    from outside_models import entries, get
    module, inputs = get("swin_tiny").make()
"""

from __future__ import annotations

try:
    import outside_batch_d as batch_d
    import outside_ops as ops
    import outside_plain as plain
    import outside_plain_b as plain_b
    import outside_plain_c as plain_c
    from outside_common import Entry, _audio, _plain, _text, _vision
except ImportError:  # imported as bench.outside_models
    from bench import outside_batch_d as batch_d
    from bench import outside_ops as ops
    from bench import outside_plain as plain
    from bench import outside_plain_b as plain_b
    from bench import outside_plain_c as plain_c
    from bench.outside_common import Entry, _audio, _plain, _text, _vision


_W2V_CONV = dict(conv_dim=(32,) * 7, conv_stride=(5, 2, 2, 2, 2, 2, 2), conv_kernel=(10, 3, 3, 3, 3, 2, 2),
                 num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4)
_AUDIO_TF = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128)

_ENTRIES = [
    # ------------------------------------------------------------------ vision (transformers)
    Entry("vit_p8", "vision", "transformers ViTModel, 64x64, patch 8, hidden 96, 2 layers, 3 heads, mlp 192",
          _vision("ViTModel", "ViTConfig", 64, image_size=64, patch_size=8, hidden_size=96, num_hidden_layers=2,
                  num_attention_heads=3, intermediate_size=192)),
    Entry("deit", "vision", "transformers DeiTModel (cls + distillation tokens), 64x64, patch 8, hidden 64, "
          "2 layers, 2 heads, mlp 256",
          _vision("DeiTModel", "DeiTConfig", 64, image_size=64, patch_size=8, hidden_size=64, num_hidden_layers=2,
                  num_attention_heads=2, intermediate_size=256)),
    Entry("swin_tiny", "vision", "transformers SwinModel, 64x64, patch 4, embed 48, depths [2,2], heads [3,6], "
          "window 4",
          _vision("SwinModel", "SwinConfig", 64, image_size=64, patch_size=4, embed_dim=48, depths=[2, 2],
                  num_heads=[3, 6], window_size=4)),
    Entry("convnext", "vision", "transformers ConvNextModel, 64x64, hidden [32,64,128], depths [1,1,2], "
          "layer scale 0.5",
          _vision("ConvNextModel", "ConvNextConfig", 64, image_size=64, num_stages=3, hidden_sizes=[32, 64, 128],
                  depths=[1, 1, 2], layer_scale_init_value=0.5, reset=True)),
    Entry("segformer", "vision", "transformers SegformerForSemanticSegmentation, 64x64, hidden [16,32,64,128], "
          "depths [1,1,1,1], decoder 64, 8 labels (logits at 16x16)",
          _vision("SegformerForSemanticSegmentation", "SegformerConfig", 64, field="logits", image_size=64,
                  hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1], num_attention_heads=[1, 2, 4, 8],
                  decoder_hidden_size=64, num_labels=8, reset=True)),
    Entry("poolformer", "vision", "transformers PoolFormerModel, 64x64, hidden [32,64,96,128], depths [1,1,2,1], "
          "layer scale 0.5",
          _vision("PoolFormerModel", "PoolFormerConfig", 64, image_size=64, hidden_sizes=[32, 64, 96, 128],
                  depths=[1, 1, 2, 1], layer_scale_init_value=0.5, reset=True)),
    Entry("mobilevit", "vision", "transformers MobileViTModel, 64x64, hidden [48,64,80], "
          "neck [16,16,24,48,64,80,320], expand 2, 2 heads",
          _vision("MobileViTModel", "MobileViTConfig", 64, image_size=64, hidden_sizes=[48, 64, 80],
                  neck_hidden_sizes=[16, 16, 24, 48, 64, 80, 320], expand_ratio=2.0, num_attention_heads=2,
                  reset=True)),
    Entry("dinov2", "vision", "transformers Dinov2Model, 56x56, patch 8, hidden 64, 2 layers, 2 heads, "
          "mlp ratio 2, layer scale",
          _vision("Dinov2Model", "Dinov2Config", 56, image_size=56, patch_size=8, hidden_size=64,
                  num_hidden_layers=2, num_attention_heads=2, mlp_ratio=2)),
    Entry("resnet_odd", "vision", "transformers ResNetModel, 80x80, bottleneck, embedding 24, hidden [48,96,160], "
          "depths [1,2,1]",
          _vision("ResNetModel", "ResNetConfig", 80, layer_type="bottleneck", embedding_size=24,
                  hidden_sizes=[48, 96, 160], depths=[1, 2, 1], reset=True)),
    Entry("regnet_y", "vision", "transformers RegNetModel, 64x64, RegNetY (squeeze-excite), embedding 16, "
          "hidden [24,48,96,192], depths [1,1,2,1], group width 8",
          _vision("RegNetModel", "RegNetConfig", 64, layer_type="y", embedding_size=16,
                  hidden_sizes=[24, 48, 96, 192], depths=[1, 1, 2, 1], groups_width=8, reset=True)),
    # ------------------------------------------------------------------- audio (transformers)
    Entry("wav2vec2", "audio", "transformers Wav2Vec2Model, 0.5 s at 16 kHz, 7 conv1d layers (dim 32, group norm), "
          "conv pos-embedding, hidden 64, 2 layers",
          _audio("Wav2Vec2Model", "Wav2Vec2Config", (1, 8000), **_W2V_CONV, **_AUDIO_TF)),
    Entry("hubert", "audio", "transformers HubertModel, 0.5 s at 16 kHz, conv1d layer-norm features, stable "
          "layer norm, hidden 64, 2 layers",
          _audio("HubertModel", "HubertConfig", (1, 8000), feat_extract_norm="layer", do_stable_layer_norm=True,
                 conv_bias=True, **_W2V_CONV, **_AUDIO_TF)),
    Entry("whisper_enc", "audio", "transformers WhisperModel encoder, 40 mel bins x 100 frames (1 s), d_model 64, "
          "2 layers, 2 heads, ffn 128",
          _audio("WhisperModel", "WhisperConfig", (1, 40, 100), encoder=True, num_mel_bins=40,
                 max_source_positions=50, d_model=64, encoder_layers=2, encoder_attention_heads=2,
                 encoder_ffn_dim=128, decoder_layers=1, decoder_attention_heads=2, decoder_ffn_dim=128)),
    Entry("ast", "audio", "transformers ASTModel (audio spectrogram transformer), 100 frames x 64 mel bins, "
          "patch 16, strides 10, hidden 64, 2 layers",
          _audio("ASTModel", "ASTConfig", (1, 100, 64), max_length=100, num_mel_bins=64, patch_size=16,
                 frequency_stride=10, time_stride=10, **_AUDIO_TF)),
    Entry("data2vec_audio", "audio", "transformers Data2VecAudioModel, 0.5 s at 16 kHz, conv1d features, "
          "5-layer conv pos-embedding, hidden 64, 2 layers",
          _audio("Data2VecAudioModel", "Data2VecAudioConfig", (1, 8000), conv_dim=(32,) * 7,
                 conv_stride=(5, 2, 2, 2, 2, 2, 2), conv_kernel=(10, 3, 3, 3, 3, 2, 2), num_conv_pos_embeddings=5,
                 num_conv_pos_embedding_groups=4, num_conv_pos_embedding_layers=5, **_AUDIO_TF)),
    # -------------------------------------------------------------------- text (transformers)
    Entry("distilbert", "text", "transformers DistilBertModel, 32 tokens, dim 64, 2 layers, 2 heads, ffn 256",
          _text("DistilBertModel", "DistilBertConfig", 32, dim=64, n_layers=2, n_heads=2, hidden_dim=256)),
    Entry("roberta", "text", "transformers RobertaModel, 48 tokens, hidden 96, 2 layers, 3 heads, ffn 192 "
          "(position ids from the padding mask)",
          _text("RobertaModel", "RobertaConfig", 48, hidden_size=96, num_hidden_layers=2, num_attention_heads=3,
                intermediate_size=192, max_position_embeddings=130)),
    Entry("albert", "text", "transformers AlbertModel, 64 tokens, embedding 32, hidden 64, 2 layers (shared), "
          "2 heads, ffn 128",
          _text("AlbertModel", "AlbertConfig", 64, embedding_size=32, hidden_size=64, num_hidden_layers=2,
                num_attention_heads=2, intermediate_size=128)),
    Entry("electra", "text", "transformers ElectraModel, 40 tokens, embedding 48, hidden 96, 2 layers, 3 heads, "
          "ffn 256",
          _text("ElectraModel", "ElectraConfig", 40, embedding_size=48, hidden_size=96, num_hidden_layers=2,
                num_attention_heads=3, intermediate_size=256)),
    Entry("t5_enc", "text", "transformers T5EncoderModel, 32 tokens, d_model 64, d_kv 16, 4 heads, ffn 128, "
          "2 layers, relative position buckets",
          _text("T5EncoderModel", "T5Config", 32, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4)),
    Entry("gpt_neo", "text", "transformers GPTNeoModel (causal), 64 tokens, hidden 64, layers [global, local], "
          "4 heads, window 16",
          _text("GPTNeoModel", "GPTNeoConfig", 64, causal=True, hidden_size=64, num_layers=2,
                attention_types=[[["global", "local"], 1]], num_heads=4, intermediate_size=128, window_size=16,
                max_position_embeddings=128)),
    Entry("opt", "text", "transformers OPTModel (causal), 48 tokens, hidden 64, 2 layers, 4 heads, ffn 128",
          _text("OPTModel", "OPTConfig", 48, causal=True, position_ids=True, hidden_size=64, num_hidden_layers=2,
                num_attention_heads=4, ffn_dim=128, word_embed_proj_dim=64, max_position_embeddings=128)),
    Entry("qwen2", "text", "transformers Qwen2Model (causal, RoPE, GQA 6q/2kv, qkv bias), 45 tokens, hidden 96, "
          "ffn 200, 2 layers",
          _text("Qwen2Model", "Qwen2Config", 45, causal=True, hidden_size=96, intermediate_size=200,
                num_hidden_layers=2, num_attention_heads=6, num_key_value_heads=2, max_position_embeddings=256)),
    Entry("deberta_v2", "text", "transformers DebertaV2Model, 32 tokens, hidden 64, 2 layers, 2 heads, "
          "disentangled attention (c2p, p2c), 16 position buckets",
          _text("DebertaV2Model", "DebertaV2Config", 32, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                intermediate_size=128, relative_attention=True, pos_att_type=["p2c", "c2p"], position_buckets=16,
                max_relative_positions=64)),
    Entry("mpnet", "text", "transformers MPNetModel, 24 tokens, hidden 64, 2 layers, 2 heads, ffn 128, "
          "relative position bias",
          _text("MPNetModel", "MPNetConfig", 24, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                intermediate_size=128)),
    # ---------------------------------------------------------------------- plain PyTorch
    Entry("unet", "plain", "U-Net, 64x64, 2 levels (16/32/64 ch), 3x3 conv+BN+ReLU, max pool, ConvTranspose2d "
          "k2 s2, cat skips", _plain(plain.UNet, 1, 3, 64, 64)),
    Entry("convnext_cnn", "plain", "ConvNeXt-style CNN, 64x64, dims [32,64,96], depths [1,2,1], depthwise 7x7, "
          "NHWC LayerNorm, GELU MLP", _plain(plain.ConvNeXtCNN, 1, 3, 64, 64)),
    Entry("conv1d_audio", "plain", "conv1d audio encoder, 0.5 s at 16 kHz, 5 strided Conv1d + GELU, then a "
          "TransformerEncoderLayer (d 64)", _plain(plain.Conv1dAudioEncoder, 1, 8000)),
    Entry("mlp_mixer", "plain", "MLP-Mixer, 64x64, patch 8 (64 tokens), dim 96, 2 blocks",
          _plain(plain.MLPMixer, 1, 3, 64, 64)),
    Entry("gn_decoder", "plain", "GroupNorm + SiLU conv decoder, latent 64x8x8 -> 3x32x32, nearest x2 then "
          "bilinear x2 upsampling", _plain(plain.GroupNormDecoder, 1, 64, 8, 8)),
    Entry("transformer_enc", "plain", "torch.nn.TransformerEncoder, 2 layers, d_model 96, 4 heads, ffn 192, "
          "batch_first, 50 tokens", _plain(plain.PlainTransformer, 1, 50, 96)),
    Entry("prime_mlp", "plain", "Linear(512, 1031) + ReLU on (1, 64, 512): a prime output width",
          _plain(plain.PrimeMLP, 1, 64, 512)),
    Entry("densenet_block", "plain", "DenseNet-like, 64x64, 2 dense blocks of 4 layers (growth 12, "
          "BN-ReLU-1x1-3x3, cat) + transition", _plain(plain.DenseNetSmall, 1, 3, 64, 64)),
    Entry("mobilenet_se", "plain", "MobileNet-like, 64x64, inverted residuals: depthwise 3x3, SiLU, squeeze-excite",
          _plain(plain.MobileNetSE, 1, 3, 64, 64)),
    Entry("lstm", "plain", "nn.LSTM, 2 layers, hidden 96, on (1, 32, 48) features + Linear",
          _plain(plain.LSTMTagger, 1, 32, 48)),
    Entry("embedding_bag", "plain", "nn.Embedding + nn.EmbeddingBag (mean, bags of 8) on 64 token ids + Linear",
          _plain(plain.EmbeddingBagModel, 1, 64, ids=1000)),
    Entry("tcn", "plain", "temporal conv net, (1, 16, 256), causal dilated Conv1d residual blocks, dilations "
          "1/2/4/8", _plain(plain.TCN, 1, 16, 256)),
    # ------------------------------------------------- second batch (2026-12-02): vision
    Entry("beit", "vision", "transformers BeitModel, 64x64, patch 8, hidden 64, 2 layers, 2 heads, relative "
          "position bias, layer scale, mean pooling",
          _vision("BeitModel", "BeitConfig", 64, image_size=64, patch_size=8, hidden_size=64, num_hidden_layers=2,
                  num_attention_heads=2, intermediate_size=128, use_relative_position_bias=True,
                  use_mean_pooling=True)),
    Entry("levit", "vision", "transformers LevitModel, 64x64, hidden [32,48,64], heads [1,2,2], depths [1,1,1], "
          "attention biases, hardswish, BN after every Linear",
          _vision("LevitModel", "LevitConfig", 64, image_size=64, hidden_sizes=[32, 48, 64],
                  num_attention_heads=[1, 2, 2], depths=[1, 1, 1], key_dim=[8, 8, 8], reset=True)),
    Entry("efficientnet", "vision", "transformers EfficientNetModel, 64x64, width 0.25, depth 0.3, SE, SiLU, "
          "TF 'same' padding, batch-norm statistics from the input",
          _vision("EfficientNetModel", "EfficientNetConfig", 64, image_size=64, width_coefficient=0.25,
                  depth_coefficient=0.3, hidden_dim=320, reset=True,
                  calibrate=True)),
    Entry("convnextv2", "vision", "transformers ConvNextV2Model, 64x64, hidden [24,48,96], depths [1,1,1], "
          "global response norm",
          _vision("ConvNextV2Model", "ConvNextV2Config", 64, image_size=64, num_stages=3, hidden_sizes=[24, 48, 96],
                  depths=[1, 1, 1], reset=True)),
    Entry("clip_vision", "vision", "transformers CLIPVisionModel, 64x64, patch 8, hidden 64, 2 layers, quick GELU",
          _vision("CLIPVisionModel", "CLIPVisionConfig", 64, image_size=64, patch_size=8, hidden_size=64,
                  num_hidden_layers=2, num_attention_heads=2, intermediate_size=128)),
    Entry("mobilenet_v2_tf", "vision", "transformers MobileNetV2Model, 64x64, depth 0.35, TF padding "
          "(computed per layer), ReLU6",
          _vision("MobileNetV2Model", "MobileNetV2Config", 64, image_size=64, depth_multiplier=0.35,
                  tf_padding=True, reset=True)),
    Entry("bit", "vision", "transformers BitModel, 64x64, hidden [32,64], depths [1,1], weight-standardized "
          "convs (the weights normalised in the forward), group norm",
          _vision("BitModel", "BitConfig", 64, embedding_size=16, hidden_sizes=[32, 64], depths=[1, 1],
                  num_groups=8, layer_type="bottleneck", reset=True)),
    Entry("swinv2", "vision", "transformers Swinv2Model, 64x64, patch 4, embed 32, depths [2,2], heads [2,4], "
          "window 4, cosine attention, log-spaced position MLP",
          _vision("Swinv2Model", "Swinv2Config", 64, image_size=64, patch_size=4, embed_dim=32, depths=[2, 2],
                  num_heads=[2, 4], window_size=4)),
    # ------------------------------------------------------- second batch: audio and text
    Entry("wavlm", "audio", "transformers WavLMModel, 0.5 s at 16 kHz, conv1d features, gated relative "
          "position bias, hidden 64, 2 layers",
          _audio("WavLMModel", "WavLMConfig", (1, 8000), **_W2V_CONV, **_AUDIO_TF)),
    Entry("llama", "text", "transformers LlamaModel (causal, RoPE, RMSNorm, SwiGLU, GQA 4q/2kv), 40 tokens, "
          "hidden 64, ffn 176, 2 layers",
          _text("LlamaModel", "LlamaConfig", 40, causal=True, hidden_size=64, intermediate_size=176,
                num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)),
    Entry("llama_own_mask", "text", "transformers LlamaModel as a user calls it: token ids only, the causal "
          "mask built by transformers inside the graph; 40 tokens, hidden 64, 2 layers",
          _text("LlamaModel", "LlamaConfig", 40, hidden_size=64, intermediate_size=176, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)),
    Entry("bloom", "text", "transformers BloomModel (causal mask and ALiBi built inside), 36 tokens, hidden 64, 2 layers, 4 heads",
          _text("BloomModel", "BloomConfig", 36, hidden_size=64, n_layer=2, n_head=4)),
    Entry("gpt_neox", "text", "transformers GPTNeoXModel (causal, partial rotary 0.25, parallel residual), "
          "48 tokens, hidden 64, 2 layers, 4 heads",
          _text("GPTNeoXModel", "GPTNeoXConfig", 48, causal=True, hidden_size=64, num_hidden_layers=2,
                num_attention_heads=4, intermediate_size=256, rotary_pct=0.25, max_position_embeddings=128)),
    Entry("phi", "text", "transformers PhiModel (causal, partial rotary 0.5, parallel attention and MLP, "
          "gelu_new), 32 tokens, hidden 64, 2 layers",
          _text("PhiModel", "PhiConfig", 32, causal=True, hidden_size=64, intermediate_size=128,
                num_hidden_layers=2, num_attention_heads=4, partial_rotary_factor=0.5, max_position_embeddings=128)),
    Entry("gemma", "text", "transformers GemmaModel (causal, RMSNorm 1+w, GeGLU tanh, embeddings scaled, "
          "MQA), 32 tokens, hidden 64, 2 layers",
          _text("GemmaModel", "GemmaConfig", 32, causal=True, hidden_size=64, intermediate_size=128,
                num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=1, head_dim=16,
                max_position_embeddings=128)),
    Entry("bart", "text", "transformers BartModel (encoder-decoder; decoder ids the shifted input, cross "
          "attention), 32 tokens, d_model 64, 1+1 layers",
          _text("BartModel", "BartConfig", 32, d_model=64, encoder_layers=1, decoder_layers=1,
                encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=128, decoder_ffn_dim=128,
                max_position_embeddings=64)),
    Entry("squeezebert", "text", "transformers SqueezeBertModel (grouped Conv1d projections), 32 tokens, "
          "hidden 64, 2 layers",
          _text("SqueezeBertModel", "SqueezeBertConfig", 32, hidden_size=64, embedding_size=64,
                num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, q_groups=2, k_groups=2,
                v_groups=2, post_attention_groups=2, intermediate_groups=2, output_groups=2)),
    Entry("funnel", "text", "transformers FunnelBaseModel (sequence pooled between blocks, relative "
          "attention), 32 tokens, d_model 64, blocks [1,1]",
          _text("FunnelBaseModel", "FunnelConfig", 32, d_model=64, n_head=2, d_head=32, d_inner=128,
                block_sizes=[1, 1])),
    Entry("convbert", "text", "transformers ConvBertModel (span-based dynamic convolution), 32 tokens, "
          "hidden 64, 2 layers",
          _text("ConvBertModel", "ConvBertConfig", 32, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                intermediate_size=128, embedding_size=64)),
    Entry("mamba", "text", "transformers MambaModel (selective state space, the sequential scan), 16 tokens, "
          "hidden 32, state 8, 2 layers",
          _text("MambaModel", "MambaConfig", 16, hidden_size=32, state_size=8, num_hidden_layers=2,
                expand=2, conv_kernel=4)),
    Entry("fnet", "text", "transformers FNetModel (Fourier token mixing, torch.fft.fftn), 32 tokens, hidden 64, "
          "2 layers", _text("FNetModel", "FNetConfig", 32, hidden_size=64, num_hidden_layers=2,
                            intermediate_size=128, max_position_embeddings=64)),
    # ----------------------------------------------------------------- second batch: plain
    Entry("bigru", "plain", "bidirectional nn.GRU, 2 layers, hidden 64, on (1, 30, 40) features + Linear",
          _plain(plain_b.BiGRU, 1, 30, 40)),
    Entry("padded_mha", "plain", "nn.MultiheadAttention with a key padding mask computed from the input "
          "(boolean ops), residual LayerNorm, (1, 32, 64)", _plain(plain_b.PaddedAttention, 1, 32, 64)),
    Entry("seq2seq", "plain", "nn.Transformer, 1 encoder + 1 decoder layer, d 64, generated causal target mask, "
          "(1, 40, 64)", _plain(plain_b.Seq2SeqTransformer, 1, 40, 64)),
    Entry("espcn", "plain", "ESPCN super-resolution, 1x48x48 -> 1x144x144, tanh convs, PixelShuffle x3",
          _plain(plain_b.ESPCN, 1, 1, 48, 48)),
    Entry("graph_conv", "plain", "two rounds of message passing on a fixed graph (index_select, index_add_, "
          "degree normalisation), 60 nodes x 32", _plain(plain_b.GraphConv, 60, 32)),
    Entry("batched_cnn", "plain", "small CNN at batch 4, channels_last weights, BN, hardswish, log_softmax",
          _plain(plain_b.BatchedCNN, 4, 3, 48, 48)),
    # ----------------------------------------------------------------- third batch: whole plain models
    Entry("style_transfer", "plain", "fast neural style TransformerNet at width 16: reflection padding, instance "
          "norm, strided and nearest-upsampling convs, (1, 3, 64, 64)", _plain(plain_c.StyleTransfer, 1, 3, 64, 64)),
    Entry("hifigan", "plain", "HiFi-GAN vocoder generator: weight-normed Conv1d and ConvTranspose1d (8x, 8x, 4x), "
          "dilated residual blocks, leaky ReLU, tanh; 80 mels x 32 frames", _plain(plain_c.HiFiGAN, 1, 80, 32)),
    Entry("tiny_yolo", "plain", "YOLOv8-style detector at width 16: Conv-BN-SiLU, C2f (chunk, concat), SPPF max "
          "pools, nearest-upsampling FPN, two-scale head, (1, 3, 96, 96)", _plain(plain_c.TinyYOLO, 1, 3, 96, 96)),
] + batch_d.ENTRIES + [Entry(name, "op", desc, lambda name=name: ops.make(name))
                      for name, (desc, *_) in ops.OPS.items()]
_BY_NAME = {e.name: e for e in _ENTRIES}
assert len(_BY_NAME) == len(_ENTRIES)


def entries() -> list[Entry]:
    """Every model of the battery, in a stable order (vision, audio, text, plain)."""
    return list(_ENTRIES)


def get(name: str) -> Entry:
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"unknown outside-zoo model {name!r}; known: {', '.join(_BY_NAME)}") from None


def load_named(name: str, target):
    """(ImportedModel, tasks) of a battery model by name, else of a zoo workload (a tlm source name)."""
    from tlm.graph.extract import load

    if name in _BY_NAME:
        return load(*get(name).make(), target)
    return load(name, None, target)
