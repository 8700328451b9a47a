"""A half-precision transformer encoder over a batch of sequences of different lengths: one of
issue 34's six PyTorch workloads (the one that met an unimplemented private driver table).

torch.nn.TransformerEncoder (6 layers, d_model 512, 8 heads, FFN 2048, batch_first) in fp16,
eval mode, no grad: PyTorch's fast path (fused multi-head attention; with the padding mask, nested
tensors). Input: 16 sequences of up to 128 tokens' embeddings, lengths drawn with a fixed seed,
the rest padded. Environment: HOT_ITERS, ENC_LAYERS, ENC_BATCH, ENC_SEQ. Prints one JSON line
(see _common.py).
"""
import os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import run
import torch

LAYERS = int(os.environ.get("ENC_LAYERS", 6))
BATCH = int(os.environ.get("ENC_BATCH", 16))
SEQ = int(os.environ.get("ENC_SEQ", 128))
D, HEADS, FFN = 512, 8, 2048


class Encoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        layer = torch.nn.TransformerEncoderLayer(D, HEADS, FFN, dropout=0.0, batch_first=True)
        self.enc = torch.nn.TransformerEncoder(layer, LAYERS)

    def forward(self, x, pad):
        y = self.enc(x, src_key_padding_mask=pad)
        # A nested-tensor result comes back padded with zeros.
        return y.to_padded_tensor(0.0) if y.is_nested else y


def make_input():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(BATCH, SEQ, D, generator=g).half()
    lengths = torch.randint(SEQ // 4, SEQ + 1, (BATCH,), generator=g)
    pad = torch.arange(SEQ)[None, :] >= lengths[:, None]
    return x.cuda(), pad.cuda()


run("encoder_fp16", lambda: Encoder().half(), make_input)
