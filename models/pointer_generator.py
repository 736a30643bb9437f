"""Pointer-generator network with coverage (See, Liu, Manning 2017, "Get To The Point", sections 2.1-2.3).

One decoding step (equation numbers of See et al. 2017):
- decoder state: s_t = GRU([x_t; h*_{t-1}], s_{t-1}), x_t = e(y_{t-1}) (section 2.1; h*_{t-1} fed back
  as in the authors' released code, "input feeding").
- attention with the *updated* state s_t, and with coverage the coverage vector c^t:
  e_i^t = v^T tanh(W_h h_i + W_s s_t + w_c c_i^t + b_attn)   (eq. 1; eq. 11 with coverage)
  a^t = softmax(e^t)                                        (eq. 2)
  h*_t = sum_i a_i^t h_i                                    (eq. 3)
- P_vocab = softmax(V'(V[s_t; h*_t] + b) + b')                (eq. 4; two linear layers, no nonlinearity)
- p_gen = sigmoid(w_h*^T h*_t + w_s^T s_t + w_x^T x_t + b_ptr) (eq. 8)
- P(w) = p_gen P_vocab(w) + (1 - p_gen) sum_{i: w_i = w} a_i^t (eq. 9), over the extended vocabulary
  V + X: P_vocab(w) = 0 for a source OOV, the copy sum is 0 for a word not in the source.
- coverage c^t = sum_{t' < t} a^{t'} (eq. 10), covloss_t = sum_i min(a_i^t, c_i^t) (eq. 12), per-step
  objective loss_t = -log P(w*_t) + lambda covloss_t (eq. 13); ``gold_score`` returns its negative.

Everything is in log space: log p_gen and log(1 - p_gen) are log-sigmoids, the copy term is a
logsumexp of log a^t over the positions of repeated source words, and the two terms meet in a logaddexp
(``models.extended.extended_log_probs`` for search, ``gold_log_probs`` for training).

Attention order: See et al. attend with s_t after the recurrent update (like Luong et al.), while the
skeleton's ``BahdanauDecoder`` attends with s_{t-1} before it. Here a^t *is* the copy distribution, so
the pointer should see the word just emitted (y_{t-1} enters s_t): this module has its own decoder
(``SeeDecoder``) with See's order, passed to ``Seq2Seq`` through its ``decoder=`` argument. The
recurrence stays the skeleton's GRU (See et al. use an LSTM) so mechanisms differ only in their
output side; s_0 = tanh(W summary) as in the skeleton (See's code: ReLU of a linear map).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import nn
from torch.nn import functional as F

from models.attention import BahdanauAttention
from models.config import ModelConfig, parse_options
from models.extended import NEG, gold_log_probs, logsumexp
from models.seq2seq import ANY_DECODER, Mechanism, OutputLayer, Scores, Seq2Seq, State, at_least_fp32
from models.transformer_decoder import recurrent_or_transformer


@dataclass(frozen=True)
class PointerGeneratorOptions:
    """params.yaml ``model.pointer_generator``."""

    coverage: bool = True  # coverage vector in the attention (eq. 10-11) and coverage loss (eq. 12-13)
    coverage_loss_weight: float = 1.0  # lambda of eq. 13 (See et al. section 4: lambda = 1)


class SeeDecoder(nn.Module):
    """GRU update first, then additive attention with the new state s_t (eq. 1-3, 10-11).

    State (batch-first): "s" (B, H) = s_t; "context" (B, M) = h*_t, fed to the next update;
    "keys" (B, S, A) = W_h h_i + b_attn (static); "coverage" (B, S) = c^{t+1} after step t.
    """

    def __init__(self, in_dim: int, hidden: int, memory_dim: int, coverage: bool):
        super().__init__()
        self.out_dim, self.context_dim = hidden, memory_dim
        self.bridge = nn.Linear(memory_dim, hidden)  # s_0 = tanh(W summary + b)
        self.attention = BahdanauAttention(hidden, memory_dim, hidden, coverage)  # v, W_h, b_attn, W_s, w_c
        self.cell = nn.GRUCell(in_dim + memory_dim, hidden)
        self.coverage = coverage
        self.static_keys = frozenset({"keys"})

    def init_state(self, memory: torch.Tensor, summary: torch.Tensor, mask: torch.Tensor) -> State:
        state = {
            "s": torch.tanh(self.bridge(summary)),  # (B, H)
            "context": memory.new_zeros(memory.size(0), memory.size(2)),  # (B, M): h*_0 = 0
            "keys": self.attention.keys(memory),  # (B, S, A)
        }
        if self.coverage:
            state["coverage"] = memory.new_zeros(mask.shape)  # (B, S): c^1 = 0 (eq. 10)
        return state

    def forward(self, state: State, x: torch.Tensor):
        """x_t (B, In) -> s_t (B, H), h*_t (B, M), a^t (B, S), state updates."""
        s_t = self.cell(torch.cat([x, state["context"]], dim=-1), state["s"])  # (B, H)
        context, weights = self.attention(
            s_t, state["keys"], state["memory"], state["src_mask"], state.get("coverage")
        )  # eq. 1-3 / 11: (B, M), (B, S)
        updates = {"s": s_t, "context": context}
        if self.coverage:
            updates["coverage"] = state["coverage"] + weights  # c^{t+1} = c^t + a^t (eq. 10)
        return s_t, context, weights, updates


class PointerGeneratorOutput(OutputLayer):
    """P(w) of eq. 9 over V + X from P_vocab (eq. 4), p_gen (eq. 8) and the attention a^t."""

    can_copy = True

    def __init__(self, cfg: ModelConfig, opts: PointerGeneratorOptions):
        super().__init__()
        memory = cfg.memory  # M = 2 * encoder_hidden
        self.proj = nn.Linear(cfg.hidden + memory, cfg.hidden)  # V, b of eq. 4
        self.vocab = nn.Linear(cfg.hidden, cfg.tgt_vocab)  # V', b' of eq. 4
        self.gate = nn.Linear(memory + cfg.hidden + cfg.emb, 1)  # [w_h*; w_s; w_x], b_ptr of eq. 8
        self.coverage = opts.coverage
        self.coverage_loss_weight = opts.coverage_loss_weight
        self.sequence_keys = ("coverage",) if opts.coverage else ()  # c^t, read before the step's update

    def score_all(self, s: torch.Tensor, context: torch.Tensor, view: State) -> Scores:
        # float32 even under autocast: logsumexp/scatter of the mixture must not be quantised to bf16.
        hidden = self.proj(torch.cat([s, context], dim=-1))  # (B, T, H) V[s_t; h*_t] + b of eq. 4
        logits = self.project(hidden, self.vocab)  # (B, T, V)
        gate = at_least_fp32(self.gate(torch.cat([context, s, view["x"]], dim=-1)))  # (B, T, 1), eq. 8
        log_gen, log_copy = F.logsigmoid(gate), F.logsigmoid(-gate)  # log p_gen, log(1 - p_gen)
        attn = at_least_fp32(view["attn"])  # (B, T, S) a^t, exactly 0 at padding
        # log a^t without log 0: a weight that underflowed float32 (< 1e-38) counts as ~1e-38.
        log_attn = attn.clamp_min(torch.finfo(attn.dtype).tiny).log().masked_fill(~view["src_mask"].unsqueeze(1), NEG)
        parts = {}
        if self.coverage:
            # covloss_t = sum_i min(a_i^t, c_i^t), c^t = sum of the previous steps' attention (eq. 12)
            parts["covloss"] = torch.minimum(attn, at_least_fp32(view["coverage"])).sum(dim=-1)  # (B, T)
        # eq. 9: p_gen P_vocab(w) + (1 - p_gen) sum_{i: w_i = w} a_i^t, P_vocab = softmax of eq. 4. ``gen``
        # holds the logits, not yet normalised: search normalises them with one log-softmax (distribution),
        # training reads them at the gold words only (sequence_gold), so there the (B, T, V) log-softmax
        # is never written and the normaliser's backward pass is one product (models.extended.logsumexp).
        parts["hidden"] = hidden
        return Scores(logits, log_gen, log_attn, log_copy, parts)

    # True: ``Scores.gen`` holds this layer's logits, normalised by its readers (distribution,
    # sequence_gold); a subclass whose generate side comes normalised (the pretrained backbone's head,
    # models/backbone_heads.py) sets False and gets the generic readers.
    gen_is_logits = True

    def distribution(self, scores: Scores, view: State) -> torch.Tensor:
        """eq. 9 over V + X: P_vocab = log_softmax of the logits (full precision for large logits)."""
        if not self.gen_is_logits:
            return super().distribution(scores, view)
        log_vocab = torch.log_softmax(scores.gen, dim=-1)  # (B, T, V) log P_vocab
        return super().distribution(replace(scores, gen=log_vocab), view)

    def step_updates(self, scores: Scores) -> State:
        updates = {
            "copy_logp": scores.copy_log_probs().squeeze(1)
        }  # (B, S) log (1 - p_gen) a_i^t: the heat map's copy mode
        if self.coverage:
            updates["covloss"] = scores.parts["covloss"].squeeze(1)  # (B,)
        return updates

    def gold_score(self, log_probs: torch.Tensor, state: State, target: torch.Tensor, t: int, batch) -> torch.Tensor:
        """-loss_t of eq. 13: log P(w*_t) - lambda covloss_t (plain log P(w*_t) without coverage)."""
        gold = super().gold_score(log_probs, state, target, t, batch)  # (B,)
        if self.coverage:
            gold = gold - self.coverage_loss_weight * state["covloss"]
        return gold

    def sequence_gold(self, scores: Scores, view: State, target: torch.Tensor, batch, objective: bool) -> torch.Tensor:
        """-loss_t of eq. 13 for every step (B, T) when ``objective``, else log P(w*_t)."""
        if not self.gen_is_logits:
            gold = super().sequence_gold(scores, view, target, batch, objective)  # (B, T) log P(w*_t)
            if objective and self.coverage:
                gold = gold - self.coverage_loss_weight * scores.parts["covloss"]
            return gold
        gen_gold = self.project_gold(scores.parts["hidden"], self.vocab, target)  # (B, T) logit of w*_t, or None
        gold = gold_log_probs(
            scores.gen,
            scores.gen_shift - logsumexp(scores.gen),  # log p_gen - log sum_w exp(logit_w): P_vocab's normaliser
            scores.copy,
            scores.copy_shift,
            view["src_ext"],
            view["src_mask"],
            target,
            gen_gold,
        )  # (B, T) log P(w*_t)
        if objective and self.coverage:
            gold = gold - self.coverage_loss_weight * scores.parts["covloss"]
        return gold


def build_pointer_generator(cfg: ModelConfig) -> Seq2Seq:
    """See et al. (2017): pointer-generator, with coverage unless ``coverage: false``."""
    opts = parse_options(PointerGeneratorOptions, cfg.options, "pointer_generator")
    decoder = recurrent_or_transformer(
        cfg,
        lambda: SeeDecoder(cfg.emb, cfg.hidden, cfg.memory, opts.coverage),
        cfg.emb,
        cfg.memory,
        True,
        opts.coverage,
    )
    return Seq2Seq(cfg, PointerGeneratorOutput(cfg, opts), attention=True, decoder=decoder)


MECHANISMS = (
    Mechanism(
        "pointer_generator",
        "Pointer-generator + coverage",
        build_pointer_generator,
        options=PointerGeneratorOptions,
        variants=(
            {},
            {"coverage": False},
            {"coverage_loss_weight": 0.3},
            {"encoder": "transformer", "transformer_heads": 2},
        ),
        decoders=ANY_DECODER,
    ),
)
