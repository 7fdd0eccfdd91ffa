"""Model-zoo sweep (a tool, not part of tests or CI).

Phase `gen` scripts and/or traces many models (torchvision classification, detection and
segmentation, torchvision quantized models, dynamic quantization, HF transformers, hand-written
modules exercising language features) with random init, and writes into OUT (default /tmp/zoo):

    NAME.pt                 the archive (torch.jit.save)
    NAME.in0.npy ...        inputs (tensors), or NAME.meta.json "inputs" literals
    NAME.out.npz            PyTorch's outputs of the loaded archive, leaves named as `tsrun run -o`
    NAME.code.txt / NAME.graph.txt / NAME.inlined.txt   str(m.code), str(m.graph), str(m.inlined_graph)
    NAME.meta.json          {"inputs": [...], "atol": ..., "error": ...}

Phase `run` calls `tsrun compare`, `tsrun code`, `tsrun graph`, `tsrun graph --inlined` on each
archive and classifies it (load failure, run error, wrong values, print mismatch), writing
OUT/results.json and a markdown table (`--table`).

    .venv/bin/python tools/zoo_sweep.py gen [--only NAME...] [--group G...]
    .venv/bin/python tools/zoo_sweep.py run --tsrun /work/target-zoo/release/tsrun [--table tools/zoo_sweep_results.md]
"""
import argparse
import json
import math
import os
import re
import subprocess
import sys
import time
import traceback
import warnings
from collections import OrderedDict
from typing import Dict, List, NamedTuple, Optional, Tuple

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

warnings.filterwarnings("ignore")
MODELS: "OrderedDict[str, tuple]" = OrderedDict()  # name -> (group, builder)


def register(name, group):
    def deco(fn):
        MODELS[name] = (group, fn)
        return fn
    return deco


def img(size=64, n=1):
    return (torch.randn(n, 3, size, size),)


# ---------------------------------------------------------------------------------------------
# torchvision classification
import torchvision  # noqa: E402
from torchvision import models as tvm  # noqa: E402

TOO_BIG = {  # > ~100M parameters: archives of hundreds of MB; their blocks are covered by smaller siblings
    "vit_h_14", "vit_l_16", "vit_l_32", "regnet_y_128gf", "regnet_y_32gf", "regnet_x_32gf",
    "regnet_y_16gf", "regnet_x_16gf", "convnext_large", "convnext_base", "swin_b", "swin_v2_b",
    "efficientnet_v2_l", "efficientnet_v2_m", "efficientnet_b7", "efficientnet_b6", "efficientnet_b5",
    "wide_resnet101_2", "resnext101_64x4d", "resnext101_32x8d", "vgg13", "vgg13_bn", "vgg16", "vgg19",
    "vgg19_bn", "vit_b_16", "regnet_x_8gf", "regnet_y_8gf", "densenet161", "convnext_small", "swin_s",
    "swin_v2_s", "efficientnet_b4", "resnet152",
}
SIZE = {"alexnet": 96, "inception_v3": 96, "maxvit_t": 224, "vit_b_32": 224, "vgg11": 32,
        "vgg11_bn": 32, "vgg16_bn": 32}
KW = {"googlenet": dict(aux_logits=False, init_weights=True),
      "inception_v3": dict(aux_logits=False, init_weights=True)}
TRACE_TOO = {"resnet18", "mobilenet_v2", "mobilenet_v3_small", "efficientnet_b0", "convnext_tiny",
             "swin_t", "densenet121", "shufflenet_v2_x1_0", "regnet_y_400mf", "squeezenet1_0",
             "googlenet", "inception_v3", "mnasnet0_5", "vit_b_32", "maxvit_t", "efficientnet_v2_s"}


def _tv(name, how):
    def build():
        m = getattr(tvm, name)(weights=None, num_classes=10, **KW.get(name, {})).eval()
        x = img(SIZE.get(name, 64))
        if how == "script":
            return torch.jit.script(m), x
        with torch.no_grad():
            return torch.jit.trace(m, x, check_trace=False), x
    return build


for _name in tvm.list_models(module=tvm):
    if _name in TOO_BIG:
        continue
    MODELS[f"tv_{_name}"] = ("vision", _tv(_name, "script"))
    if _name in TRACE_TOO:
        MODELS[f"tv_{_name}_traced"] = ("vision", _tv(_name, "trace"))

MODELS["tv_r3d_18"] = ("vision", lambda: (torch.jit.script(tvm.video.r3d_18(weights=None, num_classes=5).eval()),
                                          (torch.randn(1, 3, 4, 32, 32),)))
MODELS["tv_mc3_18_traced"] = ("vision", lambda: (torch.jit.trace(tvm.video.mc3_18(weights=None, num_classes=5).eval(),
                                                                 (torch.randn(1, 3, 4, 32, 32),)),
                                                 (torch.randn(1, 3, 4, 32, 32),)))
MODELS["tv_s3d"] = ("vision", lambda: (torch.jit.script(tvm.video.s3d(weights=None, num_classes=5).eval()),
                                       (torch.randn(1, 3, 16, 112, 112),)))


class OneImage(nn.Module):
    """Detection models take a list of images; the CLI passes tensors."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, x: Tensor):
        return self.m([x])


def _det(name, size, **kw):
    def build():
        m = getattr(tvm.detection, name)(weights=None, weights_backbone=None, **kw).eval()
        return torch.jit.script(OneImage(m)), (torch.rand(3, size, size),)
    return build


def _seg(name, size=64, **kw):
    def build():
        m = getattr(tvm.segmentation, name)(weights=None, weights_backbone=None, num_classes=5, **kw).eval()
        return torch.jit.script(m), img(size)
    return build


def _seg_traced(name, size=64, **kw):
    def build():
        m = getattr(tvm.segmentation, name)(weights=None, weights_backbone=None, num_classes=5, **kw).eval()
        x = img(size)
        return torch.jit.trace(m, x, strict=False, check_trace=False), x
    return build


MODELS["det_fasterrcnn_mobilenet_v3_large_320_fpn"] = ("detection", _det("fasterrcnn_mobilenet_v3_large_320_fpn", 160,
                                                                         num_classes=5))
MODELS["det_maskrcnn_resnet50_fpn"] = ("detection", _det("maskrcnn_resnet50_fpn", 128, num_classes=3,
                                                         min_size=128, max_size=128))
MODELS["det_keypointrcnn_resnet50_fpn"] = ("detection", _det("keypointrcnn_resnet50_fpn", 128, num_classes=2,
                                                             min_size=128, max_size=128))
MODELS["det_retinanet_resnet50_fpn"] = ("detection", _det("retinanet_resnet50_fpn", 128, num_classes=3,
                                                          min_size=128, max_size=128))
MODELS["det_fcos_resnet50_fpn"] = ("detection", _det("fcos_resnet50_fpn", 128, num_classes=3, min_size=128,
                                                     max_size=128))
MODELS["det_ssdlite320_mobilenet_v3_large"] = ("detection", _det("ssdlite320_mobilenet_v3_large", 160, num_classes=4))
MODELS["det_ssd300_vgg16"] = ("detection", _det("ssd300_vgg16", 160, num_classes=3))
MODELS["seg_deeplabv3_mobilenet_v3_large"] = ("segmentation", _seg("deeplabv3_mobilenet_v3_large"))
MODELS["seg_deeplabv3_resnet50"] = ("segmentation", _seg("deeplabv3_resnet50", aux_loss=True))
MODELS["seg_lraspp_mobilenet_v3_large"] = ("segmentation", _seg("lraspp_mobilenet_v3_large"))
MODELS["seg_fcn_resnet50"] = ("segmentation", _seg("fcn_resnet50", aux_loss=False))
MODELS["seg_lraspp_traced"] = ("segmentation", _seg_traced("lraspp_mobilenet_v3_large"))
MODELS["seg_deeplabv3_mobilenet_traced"] = ("segmentation", _seg_traced("deeplabv3_mobilenet_v3_large"))

# ---------------------------------------------------------------------------------------------
# torchvision quantized models (eager-mode post-training static quantization, fbgemm)
from torchvision.models import quantization as tvq  # noqa: E402

Q_SIZE = {"inception_v3": 96}


def _quant(name, how, engine="fbgemm"):
    def build():
        torch.backends.quantized.engine = engine
        kw = {"aux_logits": False, "init_weights": True} if name in ("googlenet", "inception_v3") else {}
        m = getattr(tvq, name)(weights=None, quantize=False, num_classes=10, **kw).eval()
        m.fuse_model()
        m.qconfig = torch.ao.quantization.get_default_qconfig(engine)
        torch.ao.quantization.prepare(m, inplace=True)
        size = Q_SIZE.get(name, 64)
        with torch.no_grad():
            for _ in range(4):
                m(torch.randn(2, 3, size, size))
        torch.ao.quantization.convert(m, inplace=True)
        x = img(size)
        if how == "script":
            return torch.jit.script(m), x
        with torch.no_grad():
            return torch.jit.trace(m, x, check_trace=False), x
    return build


for _q in ["resnet18", "mobilenet_v2", "mobilenet_v3_large", "googlenet", "inception_v3", "shufflenet_v2_x0_5",
           "resnet50"]:
    MODELS[f"q_{_q}"] = ("quantized", _quant(_q, "script"))
    MODELS[f"q_{_q}_traced"] = ("quantized", _quant(_q, "trace"))
MODELS["q_resnet18_x86"] = ("quantized", _quant("resnet18", "script", engine="x86"))


class RnnNet(nn.Module):
    def __init__(self, kind="lstm"):
        super().__init__()
        self.kind = kind
        rnn = nn.LSTM if kind == "lstm" else nn.GRU
        self.rnn = rnn(8, 12, num_layers=2, bidirectional=True, batch_first=True)
        self.fc = nn.Linear(24, 4)

    def forward(self, x: Tensor):
        y, h = self.rnn(x)
        return self.fc(y), h


def _dyn(kind, how, dtype=torch.qint8):
    def build():
        torch.backends.quantized.engine = "fbgemm"
        if kind == "linear":
            m = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).eval()
            x = (torch.randn(3, 8),)
        else:
            m = RnnNet(kind).eval()
            x = (torch.randn(2, 5, 8),)
        q = torch.ao.quantization.quantize_dynamic(m, {nn.Linear, nn.LSTM, nn.GRU}, dtype=dtype)
        if how == "script":
            return torch.jit.script(q), x
        with torch.no_grad():
            return torch.jit.trace(q, x, check_trace=False), x
    return build


for _k in ["linear", "lstm", "gru"]:
    MODELS[f"qdyn_{_k}"] = ("quantized", _dyn(_k, "script"))
    MODELS[f"qdyn_{_k}_traced"] = ("quantized", _dyn(_k, "trace"))
MODELS["qdyn_linear_fp16"] = ("quantized", _dyn("linear", "script", torch.float16))
MODELS["qdyn_lstm_fp16"] = ("quantized", _dyn("lstm", "script", torch.float16))


def _qbert():
    import transformers
    torch.backends.quantized.engine = "fbgemm"
    cfg = transformers.BertConfig(torchscript=True, return_dict=False, hidden_size=32, num_hidden_layers=2,
                                  num_attention_heads=4, intermediate_size=64, vocab_size=100)
    m = transformers.BertModel(cfg).eval()
    q = torch.ao.quantization.quantize_dynamic(m, {nn.Linear}, dtype=torch.qint8)
    x = (torch.randint(0, 100, (1, 12)), torch.ones(1, 12, dtype=torch.long))
    with torch.no_grad():
        return torch.jit.trace(q, x, strict=False, check_trace=False), x


MODELS["qdyn_hf_bert_traced"] = ("quantized", _qbert)

# ---------------------------------------------------------------------------------------------
# HF transformers (traced, torchscript=True, tiny configs)
SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64)


def _hf(config_cls, model_cls, inputs, **cfg):
    def build():
        import transformers
        config = getattr(transformers, config_cls)(torchscript=True, return_dict=False, **cfg)
        if hasattr(config, "use_cache"):
            config.use_cache = False
        model = getattr(transformers, model_cls)(config).eval()
        args = inputs()
        with torch.no_grad():
            try:
                return torch.jit.trace(model, args, strict=False, check_trace=False), args
            except AttributeError:  # transformers 5: some heads need return_dict=True inside
                return torch.jit.trace(AsTuple(model), args, strict=False, check_trace=False), args
    return build


class AsTuple(nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, *args):
        return self.m(*args, return_dict=True).to_tuple()


def ids(n=12, vocab=100):
    return lambda: (torch.randint(0, vocab, (1, n)),)


def ids_mask(n=12, vocab=100):
    return lambda: (torch.randint(0, vocab, (2, n)), torch.ones(2, n, dtype=torch.long).index_fill_(1, torch.tensor([n - 1]), 0))


HF = {
    "hf_bert": ("BertConfig", "BertModel", ids_mask(), dict(SMALL, vocab_size=100)),
    "hf_bert_mlm": ("BertConfig", "BertForMaskedLM", ids_mask(), dict(SMALL, vocab_size=100)),
    "hf_distilbert": ("DistilBertConfig", "DistilBertModel", ids_mask(),
                      dict(dim=32, n_layers=2, n_heads=4, hidden_dim=64, vocab_size=100)),
    "hf_roberta": ("RobertaConfig", "RobertaModel", ids_mask(), dict(SMALL, vocab_size=100)),
    "hf_albert": ("AlbertConfig", "AlbertModel", ids_mask(), dict(SMALL, embedding_size=16, vocab_size=100)),
    "hf_electra": ("ElectraConfig", "ElectraModel", ids_mask(), dict(SMALL, embedding_size=16, vocab_size=100)),
    "hf_deberta_v2": ("DebertaV2Config", "DebertaV2Model", ids_mask(), dict(SMALL, vocab_size=100)),
    "hf_gpt2": ("GPT2Config", "GPT2LMHeadModel", ids(), dict(n_embd=32, n_layer=2, n_head=4, vocab_size=100)),
    "hf_gpt_neo": ("GPTNeoConfig", "GPTNeoModel", ids(), dict(hidden_size=32, num_layers=2, num_heads=4, vocab_size=100,
                                                              attention_types=[[["global", "local"], 1]], window_size=8)),
    "hf_opt": ("OPTConfig", "OPTModel", ids(), dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                                    ffn_dim=64, word_embed_proj_dim=32, vocab_size=100)),
    "hf_llama": ("LlamaConfig", "LlamaModel", ids(), dict(SMALL, num_key_value_heads=2, vocab_size=100)),
    "hf_mistral": ("MistralConfig", "MistralModel", ids(), dict(SMALL, num_key_value_heads=2, vocab_size=100)),
    "hf_qwen2": ("Qwen2Config", "Qwen2Model", ids(), dict(SMALL, num_key_value_heads=2, vocab_size=100)),
    "hf_phi": ("PhiConfig", "PhiModel", ids(), dict(SMALL, vocab_size=100)),
    "hf_gemma": ("GemmaConfig", "GemmaModel", ids(), dict(SMALL, num_key_value_heads=2, head_dim=8, vocab_size=100)),
    "hf_t5_encoder": ("T5Config", "T5EncoderModel", ids(), dict(d_model=32, d_ff=64, num_layers=2, num_heads=4, d_kv=8,
                                                               vocab_size=100)),
    "hf_bart": ("BartConfig", "BartModel", ids(), dict(d_model=32, encoder_layers=1, decoder_layers=1, vocab_size=100,
                                                       encoder_attention_heads=4, decoder_attention_heads=4,
                                                       encoder_ffn_dim=64, decoder_ffn_dim=64)),
    "hf_vit": ("ViTConfig", "ViTModel", lambda: (torch.randn(1, 3, 32, 32),), dict(SMALL, image_size=32, patch_size=8)),
    "hf_deit": ("DeiTConfig", "DeiTModel", lambda: (torch.randn(1, 3, 32, 32),), dict(SMALL, image_size=32, patch_size=8)),
    "hf_swin": ("SwinConfig", "SwinModel", lambda: (torch.randn(1, 3, 32, 32),),
                dict(image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[2, 2], window_size=4)),
    "hf_convnext": ("ConvNextConfig", "ConvNextModel", lambda: (torch.randn(1, 3, 64, 64),),
                    dict(hidden_sizes=[8, 16, 32, 64], depths=[1, 1, 1, 1])),
    "hf_resnet": ("ResNetConfig", "ResNetModel", lambda: (torch.randn(1, 3, 64, 64),),
                  dict(hidden_sizes=[8, 16, 32, 64], depths=[1, 1, 1, 1], embedding_size=8)),
    "hf_clip_text": ("CLIPTextConfig", "CLIPTextModel", ids(), dict(SMALL, vocab_size=100)),
    "hf_clip_vision": ("CLIPVisionConfig", "CLIPVisionModel", lambda: (torch.randn(1, 3, 32, 32),),
                       dict(SMALL, image_size=32, patch_size=8)),
    "hf_whisper_encoder": ("WhisperConfig", "WhisperModel", None,
                           dict(d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
                                decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, num_mel_bins=8,
                                max_source_positions=16, vocab_size=100, pad_token_id=0,
                                bos_token_id=1, eos_token_id=2, decoder_start_token_id=1)),
    "hf_wav2vec2": ("Wav2Vec2Config", "Wav2Vec2Model", lambda: (torch.randn(1, 400),),
                    dict(SMALL, conv_dim=(8, 8), conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=8,
                         num_conv_pos_embedding_groups=2, num_feat_extract_layers=2)),
    "hf_mobilebert": ("MobileBertConfig", "MobileBertModel", ids_mask(),
                      dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                           embedding_size=16, intra_bottleneck_size=16, true_hidden_size=16, vocab_size=100)),
}


def _whisper_encoder():
    import transformers
    c, mc, _, cfg = HF["hf_whisper_encoder"]
    config = transformers.WhisperConfig(torchscript=True, return_dict=False, **cfg)
    model = transformers.WhisperModel(config).eval().get_encoder()
    x = (torch.randn(1, 8, 32),)
    with torch.no_grad():
        return torch.jit.trace(model, x, strict=False, check_trace=False), x


for _n, (_c, _m, _i, _cfg) in HF.items():
    MODELS[_n] = ("hf", _whisper_encoder if _i is None else _hf(_c, _m, _i, **_cfg))


# ---------------------------------------------------------------------------------------------
# hand-written modules exercising nn blocks and language features (scripted)
class Wrap(nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, x: Tensor):
        return self.m(x)


@register("nn_transformer_encoder", "nn")
def _():
    layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
    m = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).eval()
    return torch.jit.script(m), (torch.randn(2, 5, 16),)


@register("nn_transformer_encoder_norm_first_gelu", "nn")
def _():
    layer = nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, activation="gelu", norm_first=True)
    m = nn.TransformerEncoder(layer, 2, norm=nn.LayerNorm(16), enable_nested_tensor=False).eval()
    return torch.jit.script(m), (torch.randn(5, 2, 16),)


class EncMask(nn.Module):
    def __init__(self):
        super().__init__()
        layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, 1, enable_nested_tensor=False)

    def forward(self, x: Tensor, pad: Tensor):
        n = x.size(1)
        mask = torch.triu(torch.full((n, n), float("-inf")), diagonal=1)
        return self.enc(x, mask=mask, src_key_padding_mask=pad)


@register("nn_transformer_encoder_masks", "nn")
def _():
    pad = torch.zeros(2, 5, dtype=torch.bool)
    pad[1, 4] = True
    return torch.jit.script(EncMask().eval()), (torch.randn(2, 5, 16), pad)


@register("nn_transformer", "nn")
def _():
    m = nn.Transformer(d_model=16, nhead=2, num_encoder_layers=1, num_decoder_layers=1, dim_feedforward=32,
                       dropout=0.0).eval()
    return torch.jit.script(m), (torch.randn(5, 1, 16), torch.randn(4, 1, 16))


class MHA(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.MultiheadAttention(16, 4, batch_first=True)
        self.b = nn.MultiheadAttention(16, 2, kdim=8, vdim=12)

    def forward(self, q: Tensor, k: Tensor, v: Tensor):
        y, w = self.a(q, q, q, need_weights=True, average_attn_weights=False)
        qt = q.transpose(0, 1)
        z, w2 = self.b(qt, k, v, need_weights=True)
        return y, w, z, w2


@register("nn_multihead_attention", "nn")
def _():
    return torch.jit.script(MHA().eval()), (torch.randn(2, 5, 16), torch.randn(3, 2, 8), torch.randn(3, 2, 12))


@register("nn_multihead_attention_traced", "nn")
def _():
    x = (torch.randn(2, 5, 16), torch.randn(3, 2, 8), torch.randn(3, 2, 12))
    return torch.jit.trace(MHA().eval(), x, check_trace=False), x


class Rnns(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(6, 8, num_layers=3, bidirectional=True)
        self.gru = nn.GRU(6, 5, num_layers=2, bidirectional=True, batch_first=True)
        self.rnn = nn.RNN(6, 4, num_layers=2, nonlinearity="relu")
        self.proj = nn.LSTM(6, 8, proj_size=3, batch_first=True)
        self.cell = nn.LSTMCell(6, 7)
        self.gcell = nn.GRUCell(6, 7)

    def forward(self, x: Tensor, h0: Tensor, c0: Tensor):
        a, (h, c) = self.lstm(x, (h0, c0))
        b, hg = self.gru(x.transpose(0, 1))
        r, hr = self.rnn(x)
        p, (hp, cp) = self.proj(x)
        hx = torch.zeros(x.size(1), 7)
        cx = torch.zeros(x.size(1), 7)
        outs: List[Tensor] = []
        for t in range(x.size(0)):
            hx, cx = self.cell(x[t], (hx, cx))
            outs.append(self.gcell(x[t], hx))
        return a, h, c, b, hg, r, hr, p, hp, cp, torch.stack(outs)


@register("nn_rnns", "nn")
def _():
    return torch.jit.script(Rnns().eval()), (torch.randn(4, 2, 6), torch.randn(6, 2, 8), torch.randn(6, 2, 8))


@register("nn_rnns_traced", "nn")
def _():
    x = (torch.randn(4, 2, 6), torch.randn(6, 2, 8), torch.randn(6, 2, 8))
    return torch.jit.trace(Rnns().eval(), x, check_trace=False), x


class Blocks(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(8, 8) for _ in range(3)])
        self.acts = nn.ModuleDict({"relu": nn.ReLU(), "gelu": nn.GELU(), "silu": nn.SiLU()})
        self.seq = nn.Sequential(nn.Conv1d(2, 4, 3, padding=1), nn.BatchNorm1d(4), nn.Hardswish(),
                                 nn.GroupNorm(2, 4), nn.Mish(), nn.InstanceNorm1d(4, affine=True), nn.ELU(),
                                 nn.LayerNorm(8), nn.Softplus(), nn.PReLU(), nn.Dropout(0.2), nn.LeakyReLU(0.1),
                                 nn.Hardsigmoid(), nn.Softsign(), nn.CELU(), nn.SELU(), nn.Tanhshrink(),
                                 nn.Hardtanh(-0.5, 0.5), nn.ReLU6(), nn.LogSigmoid(), nn.Softmin(-1))
        self.up = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False)
        self.pix = nn.PixelShuffle(2)
        self.emb = nn.EmbeddingBag(10, 4, mode="mean")
        self.emb2 = nn.Embedding(10, 4, padding_idx=0)

    def forward(self, x: Tensor, img: Tensor, idx: Tensor):
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i % 2 == 0:
                x = self.acts["gelu"](x)
        for name, act in self.acts.items():
            x = x + act(x)
        s = self.seq(x.view(-1, 2, 8))
        u = self.up(img)
        p = self.pix(u)
        e = self.emb(idx, torch.tensor([0, 2]))
        e2 = self.emb2(idx)
        pooled = F.adaptive_max_pool2d(u, (3, 3)) + F.avg_pool2d(u, 2, ceil_mode=True, count_include_pad=False)[:, :, :3, :3]
        g = F.interpolate(img, size=(5, 7), mode="bicubic", align_corners=True)
        n = F.interpolate(img, scale_factor=1.5, mode="nearest")
        return x, s, p, e, e2, pooled, g, n, F.normalize(x, dim=-1), torch.cumsum(x, 1), x.topk(3, dim=1)


@register("nn_blocks", "nn")
def _():
    return torch.jit.script(Blocks().eval()), (torch.randn(4, 8), torch.randn(1, 4, 5, 6), torch.tensor([1, 2, 0, 5]))


@register("nn_blocks_traced", "nn")
def _():
    x = (torch.randn(4, 8), torch.randn(1, 4, 5, 6), torch.tensor([1, 2, 0, 5]))
    return torch.jit.trace(Blocks().eval(), x, check_trace=False), x


@torch.jit.interface
class Scorer(nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        pass


class Double(nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        return x * 2


class Square(nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        return x * x


class Result(NamedTuple):
    score: Tensor
    names: List[str]
    best: Optional[int]


class WithInterface(nn.Module):
    impl: Scorer

    def __init__(self):
        super().__init__()
        self.impl = Double()
        self.others = nn.ModuleDict({"sq": Square(), "db": Double()})
        self.table: Dict[str, int] = {"a": 1, "bb": 2, "ccc": 3}

    def pick(self, key: str, x: Tensor) -> Tensor:
        out = x
        for k, m in self.others.items():
            if k == key:
                out = m(x)
        return out

    def forward(self, x: Tensor) -> Result:
        y = self.impl.forward(x) + self.pick("sq", x)
        names: List[str] = []
        for k in sorted(self.table.keys(), reverse=True):
            names.append(k.upper() + "_" + str(self.table[k]) + f"{len(k)}")
        best: Optional[int] = None
        if bool(y.sum() > 0):
            best = int(torch.argmax(y).item())
        return Result(y, names, best)


@register("lang_interface_namedtuple", "lang")
def _():
    return torch.jit.script(WithInterface().eval()), (torch.randn(2, 3),)


class Containers(nn.Module):
    def helper(self, d: Dict[str, Tensor], xs: List[Tensor], o: Optional[Tensor], scale: float = 2.0) -> Dict[str, Tensor]:
        out: Dict[str, Tensor] = {}
        for k, v in d.items():
            out[k + "_s"] = v * scale
        acc = torch.zeros_like(xs[0])
        for t in xs:
            acc += t
        out["acc"] = acc
        if o is not None:
            out["o"] = o + 1
        out["keys"] = torch.tensor([len(k) for k in d.keys()])
        return out

    def forward(self, a: Tensor, b: Tensor, flag: bool, n: int, text: str, scales: List[float]):
        d = {"a": a, "b": b}
        r = self.helper(d, [a, b, a], b if flag else None, scales[0])
        r2 = self.helper(d, [b], None)
        words = text.split(" ")
        counts: Dict[str, int] = {}
        for w in words:
            w = w.strip().lower()
            if w in counts:
                counts[w] += 1
            else:
                counts[w] = 1
        joined = "-".join(words[::-1])
        t: Tuple[int, str] = (n, joined.replace("-", "+"))
        return r, r2, counts, t, text.startswith("the"), text.find("fox"), joined[1:4], len(scales)


@register("lang_containers", "lang")
def _():
    return torch.jit.script(Containers()), (torch.randn(2, 2), torch.randn(2, 2), True, 3, "the quick brown fox The",
                                            [0.5, 1.5])


@torch.jit.script
def collatz(n: int) -> List[int]:
    out: List[int] = []
    while n != 1:
        out.append(n)
        if n % 2 == 0:
            n = n // 2
        else:
            n = 3 * n + 1
    return out


@torch.jit.script
def checked_div(a: Tensor, b: float) -> Tensor:
    if b == 0.0:
        raise ValueError("division by zero: " + str(b))
    return a / b


class Control(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.depth = 3

    def forward(self, x: Tensor, n: int):
        seq = collatz(n)
        total = 0
        for i in range(len(seq)):
            if seq[i] > 50:
                break
            total += seq[i]
        y = x
        k = 0
        while k < self.depth:
            y = torch.tanh(self.fc(y))
            if k == 1:
                y = checked_div(y, 2.0)
            k += 1
        assert y.dim() == 2, "needs 2-d"
        pairs = [(i, s) for i, s in enumerate(seq[:4])]
        lst = [p[0] * p[1] for p in pairs]
        m = max(lst) if len(lst) > 0 else -1
        z = torch.where(y > 0, y, torch.zeros_like(y)).clamp(max=0.5)
        sizes = list(z.size())
        z = z.reshape(sizes[0], -1).flip(0)
        return y, total, seq, m, z, divmod(total, 7), float(total) ** 0.5, math_ops(float(n))


@torch.jit.script
def math_ops(v: float) -> List[float]:
    return [float(math.floor(v / 3)), math.log(v + 1), math.sqrt(v), math.exp(-v), round(v / 7), abs(-v), math.atan2(v, 2.0)]


@register("lang_control_flow", "lang")
def _():
    return torch.jit.script(Control().eval()), (torch.randn(3, 4), 27)


class Raises(nn.Module):
    def forward(self, x: Tensor, b: float):
        try_ok = checked_div(x, b)
        if x.size(0) > 100:
            raise RuntimeError("too big")
        return try_ok


@register("lang_exceptions", "lang")
def _():
    return torch.jit.script(Raises()), (torch.randn(3), 4.0)


class Indexing(nn.Module):
    def forward(self, x: Tensor, idx: Tensor):
        mask = x > 0
        a = x[mask]
        b = x[:, [0, 2]]
        c = x[..., 1]
        d = x[None, 1:, ::2]
        y = x.clone()
        y[mask] = 0.0
        y[:, 0] += 1.0
        y[idx] = -1.0
        e = y.index_select(0, idx)
        f = torch.einsum("ij,kj->ik", x, x)
        g = x.masked_fill(~mask, -1.0).gather(1, torch.zeros(x.shape[0], 1, dtype=torch.long))
        h = x.unsqueeze(0).expand(2, -1, -1).permute(1, 2, 0).contiguous().view(-1)
        i = torch.stack(torch.chunk(x, 2, dim=1), 0).sum(0)
        j = x.new_zeros(2, 2).scatter_add_(0, torch.tensor([[0, 1], [1, 0]]), x[:2, :2])
        k, kk = torch.sort(x, dim=1, descending=True)
        u = torch.unique(torch.tensor([3, 1, 3, 2]), sorted=True, return_counts=True)
        nz = torch.nonzero(mask)
        return a, b, c, d, y, e, f, g, h, i, j, k, kk, u, nz, x[idx, idx], torch.tril(x, -1), x.argmax(1)


@register("lang_indexing", "lang")
def _():
    return torch.jit.script(Indexing()), (torch.randn(3, 4), torch.tensor([2, 0]))


@register("lang_indexing_traced", "lang")
def _():
    x = (torch.randn(3, 4), torch.tensor([2, 0]))
    return torch.jit.trace(Indexing(), x, check_trace=False), x


class Dtypes(nn.Module):
    def forward(self, x: Tensor, i: Tensor):
        h = x.half()
        bf = x.to(torch.bfloat16)
        d = x.double()
        return (h * 2).float(), (bf + 1).float(), d.sum(), i // 3, i % 3, i.float() / 2, (i > 1).to(torch.int8), \
            torch.div(i, 2, rounding_mode="floor"), x.type_as(i), torch.bitwise_and(i, 5), i << 2, (-i).abs()


@register("lang_dtypes", "lang")
def _():
    return torch.jit.script(Dtypes()), (torch.randn(3, 4), torch.tensor([[5, -7, 2], [9, 0, 3]]))


class Generic(nn.Module):
    def forward(self, x: Tensor):
        b, c, h, w = x.shape
        y = x.flatten(2).transpose(1, 2)
        att = torch.softmax(torch.bmm(y, y.transpose(1, 2)) / (c ** 0.5), dim=-1)
        out = torch.bmm(att, y).transpose(1, 2).reshape(b, c, h, w)
        out = F.layer_norm(out, [c, h, w])
        return out + F.conv2d(x, torch.ones(c, 1, 3, 3) / 9, padding=1, groups=c)


@register("lang_shapes_traced", "lang")
def _():
    x = (torch.randn(2, 3, 4, 5),)
    return torch.jit.trace(Generic(), x), x


@register("lang_shapes", "lang")
def _():
    return torch.jit.script(Generic()), (torch.randn(2, 3, 4, 5),)


# ---------------------------------------------------------------------------------------------
def leaves(v, key, out):
    if isinstance(v, torch.Tensor):
        if v.is_quantized:
            v = v.dequantize()
        out[key] = v.detach().numpy()
    elif isinstance(v, (bool, int, float)):
        out[key] = np.array(v)
    elif isinstance(v, str):
        out[key] = np.array(v)
    elif isinstance(v, (list, tuple)):
        for i, x in enumerate(v):
            leaves(x, f"{key}.{i}", out)
    elif isinstance(v, dict):
        for k, x in v.items():
            leaves(x, f"{key}.{k}", out)
    elif v is None:
        pass
    else:
        raise TypeError(f"unsupported output {type(v)}")


def literal(x):
    if isinstance(x, bool):
        return "true" if x else "false"
    if isinstance(x, (int, float)):
        return repr(x)
    if isinstance(x, str):
        return json.dumps(x)
    if isinstance(x, list):
        return "[" + ",".join(literal(v) for v in x) + "]"
    raise TypeError(f"no CLI literal for {type(x)}")


def gen_one(name, build, out_dir):
    torch.manual_seed(0)
    module, inputs = build()
    path = os.path.join(out_dir, f"{name}.pt")
    module.save(path)
    loaded = torch.jit.load(path)
    engine = torch.backends.quantized.engine
    args = []
    for i, x in enumerate(inputs):
        if isinstance(x, torch.Tensor):
            p = os.path.join(out_dir, f"{name}.in{i}.npy")
            np.save(p, x.numpy())
            args.append(p)
        else:
            args.append(literal(x))
    torch.manual_seed(0)
    torch.backends.quantized.engine = engine
    with torch.no_grad():
        want = loaded(*inputs)
    expected = {}
    leaves(want, "out", expected)
    np.savez(os.path.join(out_dir, f"{name}.out.npz"), **expected)
    scale = max([float(np.nanmax(np.abs(v))) for v in expected.values()
                 if v.dtype.kind == "f" and v.size] or [0.0])
    with open(os.path.join(out_dir, f"{name}.code.txt"), "w") as f:
        f.write(loaded.code)
    with open(os.path.join(out_dir, f"{name}.graph.txt"), "w") as f:
        f.write(str(loaded.graph))
    with open(os.path.join(out_dir, f"{name}.inlined.txt"), "w") as f:
        f.write(str(loaded.inlined_graph))
    meta = {"inputs": args, "atol": 1e-5 + 1e-4 * scale, "rtol": 1e-4,
            "params": sum(p.numel() for p in loaded.parameters())}
    with open(os.path.join(out_dir, f"{name}.meta.json"), "w") as f:
        json.dump(meta, f)


def cmd_gen(args):
    os.makedirs(args.out, exist_ok=True)
    torch.set_num_threads(1)
    for name, (group, build) in MODELS.items():
        if args.only and name not in args.only:
            continue
        if args.group and group not in args.group:
            continue
        if not args.force and os.path.exists(os.path.join(args.out, f"{name}.meta.json")):
            continue
        t = time.time()
        try:
            gen_one(name, build, args.out)
            print(f"gen {name:45s} ok {time.time() - t:.1f}s", flush=True)
        except Exception as e:  # noqa: BLE001 - a model PyTorch cannot export is recorded as skipped
            msg = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:200] if str(e).strip() else ''}"
            with open(os.path.join(args.out, f"{name}.meta.json"), "w") as f:
                json.dump({"error": msg, "traceback": traceback.format_exc()}, f)
            print(f"gen {name:45s} SKIP {msg}", flush=True)


def mask(text):
    return re.sub(r"warn_id=\d+", "warn_id=N", text)


def first_diff(want, got):
    wl, gl = want.splitlines(), got.splitlines()
    for i in range(max(len(wl), len(gl))):
        w = wl[i] if i < len(wl) else "<eof>"
        g = gl[i] if i < len(gl) else "<eof>"
        if w != g:
            return f"line {i + 1}: want `{w.strip()[:120]}` got `{g.strip()[:120]}`"
    return "trailing whitespace"


def last_error_line(proc):
    text = (proc.stderr or proc.stdout).strip()
    lines = [l for l in text.splitlines() if l.strip()]
    if not lines:
        return f"exit {proc.returncode}"
    for l in lines:
        if l.startswith(("error", "tsrun:", "RuntimeError", "Error")):
            return l.strip()[:300]
    return lines[-1].strip()[:300]


def run_one(name, tsrun, out_dir, timeout):
    path = os.path.join(out_dir, f"{name}.pt")
    meta = json.load(open(os.path.join(out_dir, f"{name}.meta.json")))
    if "error" in meta:
        return {"status": "skip", "detail": "pytorch: " + meta["error"]}
    res = {"status": "ok", "detail": "", "print": []}
    t = time.time()
    cmd = [tsrun, "compare", path, "--expected", os.path.join(out_dir, f"{name}.out.npz"), "--json",
           "--rtol", str(meta["rtol"]), "--atol", str(meta["atol"])]
    for a in meta["inputs"]:
        cmd += ["-i", a]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"status": "run error", "detail": f"timeout {timeout}s", "print": []}
    res["seconds"] = round(time.time() - t, 1)
    if proc.returncode != 0:
        report = None
        try:
            report = json.loads(proc.stdout)
        except Exception:  # noqa: BLE001
            pass
        if report and isinstance(report, dict) and "leaves" in report:
            bad = [l for l in report["leaves"] if not l.get("ok")]
            desc = "; ".join(f"{l['leaf']}: " + (f"shape {l['shape_mismatch']}" if l.get("shape_mismatch")
                                                  else f"max abs {l['max_abs_error']:.3g}") for l in bad[:4])
            extra = [k for k in ("missing", "unexpected", "error") if report.get(k)]
            res.update(status="wrong values", detail=desc + " " + " ".join(f"{k}={report[k]}" for k in extra))
        else:
            err = last_error_line(proc)
            load = any(w in (proc.stderr + proc.stdout) for w in ("while loading", "cannot load", "unpickl", "archive"))
            res.update(status="load failure" if load and "no kernel" not in err else "run error", detail=err)
    for what, want_file, extra in [("code", "code.txt", ["code"]), ("graph", "graph.txt", ["graph"]),
                                   ("inlined", "inlined.txt", ["graph", "--inlined"])]:
        want = open(os.path.join(out_dir, f"{name}.{want_file}")).read()
        try:
            proc = subprocess.run([tsrun, *extra, path], capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            res["print"].append(f"{what}: timeout")
            continue
        got = proc.stdout
        if proc.returncode != 0:
            res["print"].append(f"{what}: error {last_error_line(proc)}")
        elif mask(got).rstrip("\n") != mask(want).rstrip("\n"):
            res["print"].append(f"{what}: {first_diff(mask(want), mask(got))}")
    if res["status"] == "ok" and res["print"]:
        res["status"] = "print mismatch"
    return res


def cmd_run(args):
    results_path = os.path.join(args.out, "results.json")
    results = json.load(open(results_path)) if os.path.exists(results_path) else {}
    names = [n for n in MODELS if os.path.exists(os.path.join(args.out, f"{n}.meta.json"))]
    for name in names:
        if args.only and name not in args.only:
            continue
        if args.group and MODELS[name][0] not in args.group:
            continue
        r = run_one(name, args.tsrun, args.out, args.timeout)
        r["group"] = MODELS[name][0]
        results[name] = r
        print(f"{name:45s} {r['status']:15s} {r['detail'][:150]} {' | '.join(r.get('print', []))[:200]}", flush=True)
        with open(results_path, "w") as f:
            json.dump(results, f, indent=1)
    if args.table:
        write_table(results, args.table)


def write_table(results, path):
    order = ["ok", "print mismatch", "wrong values", "run error", "load failure", "skip"]
    counts = {k: sum(1 for r in results.values() if r["status"] == k) for k in order}
    lines = ["# Zoo sweep results", "",
             "Generated by `tools/zoo_sweep.py run` (archives in /tmp/zoo, not committed).", "",
             "| status | count |", "|---|---|"]
    lines += [f"| {k} | {counts[k]} |" for k in order]
    lines += [f"| total | {len(results)} |", ""]
    groups = sorted({r["group"] for r in results.values()})
    lines += ["| group | " + " | ".join(order) + " |", "|---|" + "---|" * len(order)]
    for g in groups:
        lines.append(f"| {g} | " + " | ".join(str(sum(1 for r in results.values() if r["group"] == g and r["status"] == k))
                                           for k in order) + " |")
    lines += ["", "| archive | group | status | detail |", "|---|---|---|---|"]
    for name, r in results.items():
        detail = (r["detail"] + " " + "; ".join(r.get("print", []))).strip().replace("|", "\\|").replace("\n", " ")
        lines.append(f"| {name} | {r['group']} | {r['status']} | {detail[:400]} |")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("phase", choices=["gen", "run", "list", "table"])
    p.add_argument("--out", default="/tmp/zoo")
    p.add_argument("--only", nargs="*")
    p.add_argument("--group", nargs="*")
    p.add_argument("--force", action="store_true")
    p.add_argument("--tsrun", default="/work/target-zoo/release/tsrun")
    p.add_argument("--timeout", type=int, default=600)
    p.add_argument("--table")
    args = p.parse_args()
    if args.phase == "gen":
        cmd_gen(args)
    elif args.phase == "run":
        cmd_run(args)
    elif args.phase == "table":
        write_table(json.load(open(os.path.join(args.out, "results.json"))), args.table)
    else:
        for n, (g, _) in MODELS.items():
            print(g, n)


if __name__ == "__main__":
    sys.exit(main())
