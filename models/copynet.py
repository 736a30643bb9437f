"""CopyNet (Gu, Lu, Li, Li 2016), section 3: generate and copy modes under one normaliser.

- eq. 7, generate score: psi_g(v_i) = v_i^T W_o s_t over V (with UNK).
- eq. 8, copy score: psi_c(x_j) = tanh(h_j^T W_c) s_t for every source position j.
- eq. 4-6, one shared normaliser Z over both modes; generate-mode probability 0 for words only
  in the source (their ids are extended ids >= V); copy mass summed over repeated source words.
  Both are done in log space: ``models.seq2seq.shared_softmax`` puts both modes under log Z (the
  ``Scores`` shifts); ``models.extended.extended_log_probs`` (search) and ``gold_log_probs``
  (training) merge the copy mass of repeated words and add the generate term.
- eq. 9, selective read: zeta(y_{t-1}) = sum_tau rho_{t,tau} h_tau with
  rho_{t,tau} = p(x_tau, c | s_{t-1}) / K over the positions where x_tau = y_{t-1}, 0 elsewhere;
  zeta = 0 when y_{t-1} is not in the source. It is fed with e(y_{t-1}) into the state update.
- Attentive read (eq. 3) as RNNSearch.
"""

from __future__ import annotations

import torch
from torch import nn

from models.config import ModelConfig
from models.extended import NEG, gold_log_probs
from models.seq2seq import ANY_DECODER, Mechanism, OutputLayer, Scores, Seq2Seq, State, at_least_fp32, shared_softmax


class CopyNetOutput(OutputLayer):
    static_keys = frozenset({"copy_keys"})
    can_copy = True

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.extra_input_dim = cfg.memory  # zeta(y_{t-1}) has the size M of h_tau
        self.w_o = nn.Linear(cfg.hidden, cfg.tgt_vocab, bias=False)  # eq. 7
        self.w_c = nn.Linear(cfg.memory, cfg.hidden, bias=False)  # eq. 8: M -> H

    def init_state(self, state: State) -> State:
        memory = state["memory"]  # (B, S, 2H)
        return {
            "copy_keys": torch.tanh(self.w_c(memory)),  # (B, S, H): tanh(h_j^T W_c), once per source
            # log p(x_tau, c | s_{t-1}) up to a per-row constant; at t = 1, y_0 = <s> is never in the
            # source, so zeta = 0.
            "select_scores": memory.new_full(memory.shape[:2], NEG),  # (B, S)
        }

    def copy_scores(self, s: torch.Tensor, state: State) -> torch.Tensor:
        """psi_c(x_j) = tanh(h_j^T W_c) s_t (eq. 8), NEG at padding: s (B, T, H) -> (B, T, S).
        float32 even under CUDA autocast: the shared normaliser must not be quantised to bf16."""
        copy = at_least_fp32(torch.matmul(s, state["copy_keys"].transpose(1, 2)))  # (B, T, S)
        return copy.masked_fill(~state["src_mask"].unsqueeze(1), NEG)

    def extra_input(self, state: State, prev_ids: torch.Tensor) -> torch.Tensor:
        """Selective read zeta(y_{t-1}) (eq. 9): (B,) -> (B, 2H)."""
        match = (state["src_ext"] == prev_ids.unsqueeze(1)) & state["src_mask"]  # (B, S)
        # rho = p(x_tau, c) / K over matching positions: a softmax of the copy scores restricted to
        # them (so Z, shared by every position, cancels; non-matching positions sit at 2*NEG, below
        # any score, even a masked one at NEG).
        rho = torch.softmax(state["select_scores"].masked_fill(~match, 2 * NEG), dim=-1)  # (B, S)
        rho = rho * match.any(dim=1, keepdim=True)  # zeta = 0 when y_{t-1} is not in the source
        return torch.bmm(rho.unsqueeze(1), state["memory"]).squeeze(1)  # (B, 2H)

    def feedback(self, s_t: torch.Tensor, state: State) -> State:
        """Teacher forcing: the selective read of step t+1 needs psi_c of step t only (not Z)."""
        return {"select_scores": self.copy_scores(s_t.unsqueeze(1), state).squeeze(1)}  # (B, S)

    def score_all(self, s: torch.Tensor, context: torch.Tensor, view: State) -> Scores:
        gen = self.project(s, self.w_o)  # (B, T, V) psi_g, eq. 7
        return shared_softmax(gen, self.copy_scores(s, view))  # eq. 4-6, with psi_c (B, T, S) of eq. 8

    def sequence_gold(self, scores: Scores, view: State, target: torch.Tensor, batch, objective: bool) -> torch.Tensor:
        """log p(y_t) of eq. 4-6 at every step (B, T); psi_g(y_t) from W_o's row of y_t (project_gold)."""
        gen_gold = self.project_gold(view["s"], self.w_o, target)  # (B, T) psi_g(y_t), or None: gather
        return gold_log_probs(
            scores.gen,
            scores.gen_shift,
            scores.copy,
            scores.copy_shift,
            view["src_ext"],
            view["src_mask"],
            target,
            gen_gold,
        )

    def step_updates(self, scores: Scores) -> State:
        copy_logp = scores.copy_log_probs().squeeze(1)  # (B, S) log p(x_j, c | s_t)
        return {"copy_logp": copy_logp, "select_scores": copy_logp}


def build_copynet(cfg: ModelConfig) -> Seq2Seq:
    return Seq2Seq(cfg, CopyNetOutput(cfg), attention=True)


MECHANISMS = (
    Mechanism(
        "copynet",
        "CopyNet",
        build_copynet,
        variants=({}, {"encoder": "transformer", "transformer_heads": 2}),
        decoders=ANY_DECODER,
    ),
)
