"""Baselines of CopyNet Table 1: Enc-Dec (no attention) and RNNSearch (Bahdanau attention).

Both share the skeleton of models.seq2seq and predict with a plain softmax over the decoder
vocabulary, readout from [s_t; c_t] (Bahdanau et al. 2014, with a linear readout). They cannot
copy: the extended slots of the batch carry log-probability NEG, so an OOV target is only
reachable as <unk>.
"""

from __future__ import annotations

import torch
from torch import nn

from models.config import ModelConfig
from models.seq2seq import ANY_DECODER, Mechanism, OutputLayer, Scores, Seq2Seq, State


class SoftmaxOutput(OutputLayer):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.readout = nn.Linear(cfg.hidden + cfg.memory, cfg.tgt_vocab)  # [s_t (H); c_t (M)] -> V

    def score_all(self, s: torch.Tensor, context: torch.Tensor, view: State) -> Scores:
        logits = self.project(torch.cat([s, context], dim=-1), self.readout)  # (B, T, V)
        return Scores(torch.log_softmax(logits, dim=-1))  # softmax over V; no copy term


def build_encdec(cfg: ModelConfig) -> Seq2Seq:
    """Enc-Dec (Cho et al. 2014 as compared in CopyNet 5.1): the decoder reads one fixed code."""
    return Seq2Seq(cfg, SoftmaxOutput(cfg), attention=False)


def build_rnnsearch(cfg: ModelConfig) -> Seq2Seq:
    """RNNSearch (Bahdanau et al. 2014): bidirectional GRU encoder, GRU decoder, additive attention."""
    return Seq2Seq(cfg, SoftmaxOutput(cfg), attention=True)


MECHANISMS = (
    Mechanism("encdec", "Enc-Dec", build_encdec, decoders=ANY_DECODER),
    Mechanism(
        "rnnsearch",
        "RNNSearch",
        build_rnnsearch,
        variants=({}, {"encoder": "transformer", "transformer_heads": 2}),
        decoders=ANY_DECODER,
    ),
)
