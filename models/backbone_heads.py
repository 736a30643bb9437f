"""The copy heads on a pretrained encoder-decoder (models/backbone.py), each its paper's output layer
with the backbone's LM head as the generate side, and the backbone without a copy head beside them.

Every head reads, per position, s_t (B, T, D) the backbone decoder's output, the copy attention a_t
(B, T, S) (a cross-attention layer's head, or its heads' mean), c_t = sum_j a_tj h_j (B, T, D) over
the encoder states h_j, x_t (B, T, D) the decoder's input embedding, and psi_g (B, T, V) the LM
head's scores (``view["lm_logits"]``). Copy mass of a word is summed over every source position
holding it (scatter over the extended ids, models/extended.py), so subword pieces merge onto their
token ids; the extended ids V + k are only the source pieces the tokenizer maps to <unk>.

- ``backbone_lm``: log p = log_softmax(psi_g): the backbone fine-tuned alone, the baseline each head
  is measured against.
- ``backbone_pointer_generator`` (See et al. 2017): P_vocab = softmax(psi_g) (eq. 4's role),
  p_gen = sigmoid(w_c^T c_t + w_s^T s_t + w_x^T x_t + b) (eq. 8), P(w) = p_gen P_vocab(w) +
  (1 - p_gen) sum_{j: x_j = w} a_tj (eq. 9); optional coverage c^t = sum_{t'<t} a^{t'} (eq. 10) with
  the loss sum_j min(a_tj, c_tj) weighted by lambda (eq. 12-13) (not eq. 11's attention input: see
  models/backbone.py).
- ``backbone_copynet`` (Gu et al. 2016): generate scores psi_g from the LM head (eq. 7's role), copy
  scores psi_c(x_j) = tanh(h_j^T W_c) s_t (eq. 8) against the encoder states, one normaliser over
  both (eq. 4-6); the selective read zeta(y_{t-1}) = sum_tau rho_{t,tau} h_tau (eq. 9) enters the
  decoder through a learned projection added to its input embedding, x_t = E(y_{t-1}) + W_r zeta
  (W_r starts at 0: the pretrained decoder's input is unchanged until training moves it).
- ``backbone_pointer_softmax`` (Gulcehre et al. 2016): shortlist softmax w_t = softmax(psi_g) (over
  ids < ``shortlist`` and the batch vocabulary when set), location softmax l_t = a_t, switch
  d_t = sigmoid(T f([s_t; c_t])) (eq. 8-9); trained on log p(y_t, z_t) with the switch observed, as
  models/pointer_softmax.py (whose code it reuses): pointed where the target is outside the
  shortlist but in the source.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from models.backbone import BackboneOptions, build_backbone_model
from models.config import ModelConfig
from models.copynet import CopyNetOutput
from models.extended import NEG
from models.pointer_generator import PointerGeneratorOptions, PointerGeneratorOutput
from models.pointer_softmax import PointerSoftmaxOptions, PointerSoftmaxOutput, SwitchMLP, shortlist_size
from models.seq2seq import Mechanism, OutputLayer, Scores, State, at_least_fp32, shared_softmax

# Tiny backbones for the mechanism contract (tests/models/test_contract.py): built from a config, fresh
# weights, dropout 0 (two runs of a training step are then equal), special ids the project's own.
_IDS = {"pad_token_id": 0, "bos_token_id": 2, "eos_token_id": 3, "decoder_start_token_id": 2}
TINY_BART = {
    "model_type": "bart",
    "d_model": 16,
    "encoder_layers": 1,
    "decoder_layers": 2,
    "encoder_attention_heads": 2,
    "decoder_attention_heads": 2,
    "encoder_ffn_dim": 32,
    "decoder_ffn_dim": 32,
    "max_position_embeddings": 64,
    "dropout": 0.0,
    "attention_dropout": 0.0,
    "activation_dropout": 0.0,
    "forced_eos_token_id": None,
    **_IDS,
}
TINY_T5 = {
    "model_type": "t5",
    "d_model": 16,
    "d_kv": 8,
    "d_ff": 32,
    "num_layers": 1,
    "num_decoder_layers": 2,
    "num_heads": 2,
    "relative_attention_num_buckets": 8,
    "dropout_rate": 0.0,
    **_IDS,
}
CONTRACT_VARIANTS = ({"backbone_config": TINY_BART}, {"backbone_config": TINY_T5, "copy_head": 1})


class BackboneHead(OutputLayer):
    """What every head on a backbone shares: the generate side is the LM head (``view["lm_logits"]``)."""

    feeds_back = False  # True: the next decoder input needs this step's output (teacher forcing steps)


class BackboneLMOutput(BackboneHead):
    """The backbone alone: log p(w) = log_softmax(psi_g)(w); source pieces outside V come out as <unk>."""

    def score_all(self, s: torch.Tensor, context: torch.Tensor, view: State) -> Scores:
        return Scores(torch.log_softmax(view["lm_logits"], dim=-1))  # (B, T, V)


class BackbonePointerGeneratorOutput(BackboneHead, PointerGeneratorOutput):
    """See et al. eq. 8-9 (and 10, 12-13) with P_vocab the LM head's softmax (``PointerGeneratorOutput``'s
    objective, heat-map and coverage-loss code, its own gate)."""

    gen_is_logits = False  # Scores.gen is the LM head's log-softmax: the generic readers

    def __init__(self, d_model: int, opts: BackbonePointerGeneratorOptions):
        OutputLayer.__init__(self)
        self.gate = nn.Linear(3 * d_model, 1)  # [w_c; w_s; w_x], b of eq. 8 over [c_t; s_t; x_t]
        self.coverage = opts.coverage
        self.coverage_loss_weight = opts.coverage_loss_weight
        self.sequence_keys = ("coverage",) if opts.coverage else ()

    def score_all(self, s: torch.Tensor, context: torch.Tensor, view: State) -> Scores:
        gate = at_least_fp32(self.gate(torch.cat([context, s, view["x"]], dim=-1)))  # (B, T, 1), eq. 8
        attn = at_least_fp32(view["attn"])  # (B, T, S) a^t, 0 at padding
        log_attn = attn.clamp_min(torch.finfo(attn.dtype).tiny).log().masked_fill(~view["src_mask"].unsqueeze(1), NEG)
        parts = {}
        if self.coverage:  # covloss_t = sum_i min(a_i^t, c_i^t) (eq. 12)
            parts["covloss"] = torch.minimum(attn, at_least_fp32(view["coverage"])).sum(dim=-1)  # (B, T)
        # eq. 9: p_gen P_vocab(w) + (1 - p_gen) sum_{i: w_i = w} a_i^t
        return Scores(
            torch.log_softmax(view["lm_logits"], dim=-1), F.logsigmoid(gate), log_attn, F.logsigmoid(-gate), parts
        )


class BackboneCopyNetOutput(BackboneHead, CopyNetOutput):
    """CopyNet eq. 4-9 with psi_g from the LM head (``CopyNetOutput``'s copy scores, selective read and
    state); the selective read is added to the input embedding through ``read`` (W_r)."""

    feeds_back = True

    def __init__(self, d_model: int):
        OutputLayer.__init__(self)
        self.extra_input_dim = 0  # zeta enters through W_r, added to E(y_{t-1}), not concatenated
        self.w_c = nn.Linear(d_model, d_model, bias=False)  # eq. 8: h_j^T W_c
        self.read = nn.Linear(d_model, d_model, bias=False)  # W_r: zeta (eq. 9) -> the input embedding's space
        nn.init.zeros_(self.read.weight)

    def embed_input(self, state: State, prev_ids: torch.Tensor, emb: torch.Tensor) -> torch.Tensor:
        """x_t = E(y_{t-1}) + W_r zeta(y_{t-1}): (B, D)."""
        return emb + self.read(CopyNetOutput.extra_input(self, state, prev_ids).to(emb.dtype))

    def extra_input(self, state: State, prev_ids: torch.Tensor) -> None:
        return None

    def score_all(self, s: torch.Tensor, context: torch.Tensor, view: State) -> Scores:
        return shared_softmax(view["lm_logits"], self.copy_scores(s, view))  # eq. 4-6 over psi_g and psi_c (eq. 8)

    # psi_g comes from the LM head, not from a projection of this layer's (CopyNetOutput reads W_o's
    # rows at the gold words): the generic reader gathers the gold words' scores.
    sequence_gold = OutputLayer.sequence_gold


class BackbonePointerSoftmaxOutput(BackboneHead, PointerSoftmaxOutput):
    """Pointer Softmax section 4 with the LM head as the shortlist softmax (``PointerSoftmaxOutput``'s
    switch, objective, decoding and batch vocabulary, without its own readout)."""

    def __init__(self, d_model: int, cfg: ModelConfig, opts: BackbonePointerSoftmaxOptions):
        OutputLayer.__init__(self)
        self.opts = opts
        self.vocab = cfg.tgt_vocab
        self.shortlist = shortlist_size(opts.shortlist, cfg.tgt_vocab)  # as the recurrent head
        self.limit = self.shortlist or cfg.tgt_vocab
        self.decode = opts.decode
        self.switch = SwitchMLP(
            2 * d_model, opts.switch_hidden or d_model, opts.switch, opts.switch_bias, opts.noise_alpha, opts.noise_c
        )  # f([s_t; c_t]), eq. 8

    def score_all(self, s: torch.Tensor, context: torch.Tensor, view: State) -> Scores:
        gen = view["lm_logits"]  # (B, T, V)
        if self.limit < self.vocab:
            gen = gen.masked_fill(torch.arange(self.vocab, device=gen.device) >= self.limit, NEG)
        gen = gen.masked_fill(~view["ps_allowed"].unsqueeze(1), NEG)
        switch = self.opts.temperature * at_least_fp32(self.switch(torch.cat([s, context], dim=-1)))  # (B, T)
        log_d, log_1md = F.logsigmoid(switch), F.logsigmoid(-switch)  # eq. 8, 9
        return Scores(
            torch.log_softmax(gen, dim=-1),
            log_d.unsqueeze(-1),
            self.log_location(view),
            log_1md.unsqueeze(-1),
            {"log_d": log_d, "log_1md": log_1md},
        )


@dataclass(frozen=True)
class BackboneLMOptions(BackboneOptions):
    """``model.backbone_lm``: the backbone's settings only."""


@dataclass(frozen=True)
class BackboneCopyNetOptions(BackboneOptions):
    """``model.backbone_copynet``: the backbone's settings only (the copy scores read the encoder states)."""


@dataclass(frozen=True)
class BackbonePointerGeneratorOptions(BackboneOptions, PointerGeneratorOptions):
    """``model.backbone_pointer_generator``: the backbone's settings and See et al.'s coverage."""

    coverage: bool = False  # coverage loss (eq. 10, 12-13); off by default on a pretrained backbone


@dataclass(frozen=True)
class BackbonePointerSoftmaxOptions(BackboneOptions, PointerSoftmaxOptions):
    """``model.backbone_pointer_softmax``: the backbone's settings and Pointer Softmax's (shortlist, switch ...)."""

    def __post_init__(self) -> None:
        BackboneOptions.__post_init__(self)
        PointerSoftmaxOptions.__post_init__(self)


def build_lm(cfg: ModelConfig):
    return build_backbone_model(cfg, "backbone_lm", BackboneLMOptions, lambda d, cfg, opts: BackboneLMOutput())


def build_copynet(cfg: ModelConfig):
    return build_backbone_model(
        cfg, "backbone_copynet", BackboneCopyNetOptions, lambda d, cfg, opts: BackboneCopyNetOutput(d)
    )


def build_pointer_generator(cfg: ModelConfig):
    return build_backbone_model(
        cfg,
        "backbone_pointer_generator",
        BackbonePointerGeneratorOptions,
        lambda d, cfg, opts: BackbonePointerGeneratorOutput(d, opts),
    )


def build_pointer_softmax(cfg: ModelConfig):
    return build_backbone_model(
        cfg,
        "backbone_pointer_softmax",
        BackbonePointerSoftmaxOptions,
        lambda d, cfg, opts: BackbonePointerSoftmaxOutput(d, cfg, opts),
    )


MECHANISMS = (
    Mechanism("backbone_lm", "Backbone, no copy head", build_lm, BackboneLMOptions, CONTRACT_VARIANTS),
    Mechanism("backbone_copynet", "CopyNet on a backbone", build_copynet, BackboneCopyNetOptions, CONTRACT_VARIANTS),
    Mechanism(
        "backbone_pointer_generator",
        "Pointer-generator on a backbone",
        build_pointer_generator,
        BackbonePointerGeneratorOptions,
        (*CONTRACT_VARIANTS, {"backbone_config": TINY_BART, "coverage": True, "copy_layer": 0, "copy_head": 0}),
    ),
    Mechanism(
        "backbone_pointer_softmax",
        "Pointer Softmax on a backbone",
        build_pointer_softmax,
        BackbonePointerSoftmaxOptions,
        (*CONTRACT_VARIANTS, {"backbone_config": TINY_BART, "shortlist": 7, "decode": "max", "batch_vocab": 6}),
    ),
)
