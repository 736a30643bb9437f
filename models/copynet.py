"""CopyNet (Gu, Lu, Li, Li 2016), section 3: generate and copy modes under one normaliser.

- eq. 7, generate score: psi_g(v_i) = v_i^T W_o s_t over V (with UNK).
- eq. 8, copy score: psi_c(x_j) = tanh(h_j^T W_c) s_t for every source position j.
- eq. 4-6, one shared normaliser Z over both modes; generate-mode probability 0 for words only
  in the source (their ids are extended ids >= V); copy mass summed over repeated source words.
  Both are done by pipeline.extended_vocab.mix_scores in log space.
- eq. 9, selective read: zeta(y_{t-1}) = sum_tau rho_{t,tau} h_tau with
  rho_{t,tau} = p(x_tau, c | s_{t-1}) / K over the positions where x_tau = y_{t-1}, 0 elsewhere;
  zeta = 0 when y_{t-1} is not in the source. It is fed with e(y_{t-1}) into the state update.
- Attentive read (eq. 3) as RNNSearch.
"""
from __future__ import annotations

import torch
from torch import nn

from models.config import ModelConfig
from models.seq2seq import OutputLayer, Seq2Seq, State
from pipeline.extended_vocab import NEG, mix_scores


class CopyNetOutput(OutputLayer):
    static_keys = frozenset({"copy_keys"})
    can_copy = True

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.extra_input_dim = 2 * cfg.hidden  # zeta(y_{t-1}) has the size of h_tau
        self.w_o = nn.Linear(cfg.hidden, cfg.tgt_vocab, bias=False)  # eq. 7
        self.w_c = nn.Linear(2 * cfg.hidden, cfg.hidden, bias=False)  # eq. 8

    def init_state(self, state: State) -> State:
        memory = state["memory"]  # (B, S, 2H)
        return {
            "copy_keys": torch.tanh(self.w_c(memory)),  # (B, S, H): tanh(h_j^T W_c), once per source
            # log p(x_tau, c | s_{t-1}); at t = 1, y_0 = <s> is never in the source, so zeta = 0.
            "copy_logp": memory.new_full(memory.shape[:2], NEG),  # (B, S)
        }

    def extra_input(self, state: State, prev_ids: torch.Tensor) -> torch.Tensor:
        """Selective read zeta(y_{t-1}) (eq. 9): (B,) -> (B, 2H)."""
        match = (state["src_ext"] == prev_ids.unsqueeze(1)) & state["src_mask"]  # (B, S)
        # rho = p(x_tau, c) / K over matching positions: a softmax of the log-probs restricted to them
        # (non-matching positions sit at 2*NEG, below any log-prob, even a masked one at NEG).
        rho = torch.softmax(state["copy_logp"].masked_fill(~match, 2 * NEG), dim=-1)  # (B, S)
        rho = rho * match.any(dim=1, keepdim=True)  # zeta = 0 when y_{t-1} is not in the source
        return torch.bmm(rho.unsqueeze(1), state["memory"]).squeeze(1)  # (B, 2H)

    def forward(self, s_t: torch.Tensor, context: torch.Tensor, state: State) -> tuple[torch.Tensor, State]:
        # Scores in float32 even under CUDA autocast: the shared normaliser (logsumexp, scatter)
        # is not on autocast's float32 list, and bf16 would quantise the log-likelihood.
        gen = self.mask_unemittable(self.w_o(s_t).float())  # (B, V) psi_g, eq. 7
        copy = torch.bmm(state["copy_keys"], s_t.unsqueeze(2)).squeeze(2).float()  # (B, S) psi_c, eq. 8
        copy = copy.masked_fill(~state["src_mask"], NEG)
        log_probs, copy_logp = mix_scores(gen, copy, state["src_ext"], state["n_ext"])  # eq. 4-6
        return log_probs, {"copy_logp": copy_logp}


def build_copynet(cfg: ModelConfig) -> Seq2Seq:
    return Seq2Seq(cfg, CopyNetOutput(cfg), attention=True)
