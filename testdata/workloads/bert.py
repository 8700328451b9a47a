"""BERT-style encoder with random weights (no download): transformers' BertModel built from a
BertConfig (base size by default: 12 layers, hidden 768, 12 heads), batch 8 x sequence 128 of
token ids drawn with a fixed seed. Without transformers, an equivalent torch.nn.TransformerEncoder.

Environment: HOT_ITERS (hot loop length, default 10), BERT_LAYERS, BERT_BATCH, BERT_SEQ.
Prints one JSON line (see _common.py).
"""
import os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
from _common import run
import torch

LAYERS = int(os.environ.get("BERT_LAYERS", 12))
BATCH = int(os.environ.get("BERT_BATCH", 8))
SEQ = int(os.environ.get("BERT_SEQ", 128))
VOCAB, HIDDEN, HEADS, FFN = 30522, 768, 12, 3072


class Encoder(torch.nn.Module):
    """Fallback: token + position embeddings, LayerNorm, post-norm GELU encoder layers."""

    def __init__(self):
        super().__init__()
        self.tok = torch.nn.Embedding(VOCAB, HIDDEN)
        self.pos = torch.nn.Embedding(512, HIDDEN)
        self.norm = torch.nn.LayerNorm(HIDDEN, eps=1e-12)
        layer = torch.nn.TransformerEncoderLayer(HIDDEN, HEADS, FFN, dropout=0.0,
                                                 activation="gelu", batch_first=True)
        self.encoder = torch.nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=False)

    def forward(self, ids):
        pos = torch.arange(ids.shape[1], device=ids.device)
        return self.encoder(self.norm(self.tok(ids) + self.pos(pos)))


def build():
    try:
        from transformers import BertConfig, BertModel
    except ImportError:
        print("bert.py: transformers missing, using torch.nn.TransformerEncoder", file=sys.stderr)
        return Encoder()
    cfg = BertConfig(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS,
                     num_attention_heads=HEADS, intermediate_size=FFN)
    return BertModel(cfg, add_pooling_layer=False)


def make_input():
    g = torch.Generator().manual_seed(1)
    return torch.randint(0, VOCAB, (BATCH, SEQ), generator=g).cuda()


run("bert", build, make_input, hot_iters=10)
