"""The shared encoder-decoder skeleton; a mechanism is its output layer (the plug-in seam).

Decoding follows CopyNet section 3 / Bahdanau et al. for every mechanism:
  c_t = attend(s_{t-1}, M)                                   (CopyNet eq. 3; Enc-Dec: fixed c)
  s_t = GRU([e(y_{t-1}); c_t; extra(y_{t-1})], s_{t-1})       (eq. 2; extra = selective read, eq. 9)
  log p(y_t | .) over the extended vocabulary = output_layer(s_t, c_t, state)

``step(state, prev_ids) -> (log_probs_ext, state)`` is the one interface that training
(teacher forcing), greedy and beam search all use, so they cannot disagree. The state is a
flat dict whose tensors all have the batch (or batch x beam) as first dimension; search
reorders it with ``index_select`` on dim 0.
"""
from __future__ import annotations

import torch
from torch import nn

from models.attention import BahdanauAttention
from models.config import ModelConfig
from models.encoder import BiGRUEncoder
from pipeline.extended_vocab import NEG
from pipeline.vocab import BOS, PAD, UNK

State = dict[str, torch.Tensor | int]


class OutputLayer(nn.Module):
    """Plug-in seam. Subclasses return log-probabilities over the extended vocabulary."""

    extra_input_dim: int = 0  # size of an extra decoder input fed with e(y_{t-1}) (0: none)
    can_copy: bool = False  # False: an OOV target is only reachable as <unk> (its gold id becomes UNK)
    static_keys: frozenset[str] = frozenset()  # state keys fixed per source (never change while decoding)

    def init_state(self, state: State) -> State:
        """Keys this layer keeps in the decoder state (computed once per source)."""
        return {}

    def extra_input(self, state: State, prev_ids: torch.Tensor) -> torch.Tensor | None:
        return None

    def forward(self, s_t: torch.Tensor, context: torch.Tensor, state: State) -> tuple[torch.Tensor, State]:
        raise NotImplementedError

    @staticmethod
    def mask_unemittable(scores: torch.Tensor) -> torch.Tensor:
        """<pad> and <s> are never emitted: their scores leave the normaliser."""
        scores = scores.clone()
        scores[:, PAD] = NEG
        scores[:, BOS] = NEG
        return scores


class Seq2Seq(nn.Module):
    # State entries that depend on the source only: beam search never needs to reorder them,
    # because a beam's hypotheses always share their source.
    STATIC_KEYS = frozenset({"memory", "keys", "summary", "src_mask", "src_ext", "n_ext"})

    def __init__(self, cfg: ModelConfig, output_layer: OutputLayer, attention: bool = True):
        super().__init__()
        self.cfg = cfg
        self.static_state_keys = self.STATIC_KEYS | output_layer.static_keys
        h2 = 2 * cfg.hidden
        self.src_emb = nn.Embedding(cfg.src_vocab, cfg.emb, padding_idx=PAD)
        self.tgt_emb = nn.Embedding(cfg.tgt_vocab, cfg.emb, padding_idx=PAD)
        self.encoder = BiGRUEncoder(cfg.emb, cfg.hidden)
        self.bridge = nn.Linear(h2, cfg.hidden)  # s_0 = tanh(W [h_fwd_last; h_bwd_first])
        self.attention = BahdanauAttention(cfg.hidden, h2, cfg.hidden) if attention else None
        self.cell = nn.GRUCell(cfg.emb + h2 + output_layer.extra_input_dim, cfg.hidden)
        self.output = output_layer
        self.drop = nn.Dropout(cfg.dropout)

    def encode(self, batch) -> State:
        mask = batch.src != PAD  # (B, S)
        memory, summary = self.encoder(self.drop(self.src_emb(batch.src)), batch.src_len)  # (B, S, 2H), (B, 2H)
        state: State = {
            "s": torch.tanh(self.bridge(summary)),  # (B, H)
            "memory": memory,
            "src_mask": mask,
            "src_ext": batch.src_ext,
            "n_ext": batch.n_ext,
        }
        if self.attention is not None:
            state["keys"] = self.attention.keys(memory)  # (B, S, H)
        else:
            state["summary"] = summary  # (B, 2H): Enc-Dec reads one fixed vector
        state.update(self.output.init_state(state))
        return state

    def step(self, state: State, prev_ids: torch.Tensor) -> tuple[torch.Tensor, State]:
        """prev_ids (B,) extended ids of y_{t-1} -> log p(y_t) (B, V + X), next state."""
        in_vocab = prev_ids.masked_fill(prev_ids >= self.cfg.tgt_vocab, UNK)
        emb = self.tgt_emb(in_vocab)  # (B, E)
        if self.attention is not None:
            context, weights = self.attention(state["s"], state["keys"], state["memory"], state["src_mask"])
        else:
            context, weights = state["summary"], None
        inputs = [emb, context]
        extra = self.output.extra_input(state, prev_ids)
        if extra is not None:
            inputs.append(extra)
        s_t = self.cell(self.drop(torch.cat(inputs, dim=-1)), state["s"])  # (B, H)
        log_probs, updates = self.output(self.drop(s_t), context, state)
        new_state = {**state, **updates, "s": s_t}
        if weights is not None:
            new_state["attn"] = weights
        return log_probs, new_state

    def forward(self, batch) -> torch.Tensor:
        """Teacher forcing: log p(y_t | y_<t, X) of every gold token, (B, T); 0 at padding."""
        state = self.encode(batch)
        target = batch.tgt_out  # (B, T) extended ids
        if not self.output.can_copy:  # a word outside V that only copying could give is <unk> here
            target = target.masked_fill(target >= self.cfg.tgt_vocab, UNK)
        gold = []
        for t in range(batch.tgt_in.size(1)):
            log_probs, state = self.step(state, batch.tgt_in[:, t])
            gold.append(log_probs.gather(1, target[:, t : t + 1]))
        gold_lp = torch.cat(gold, dim=1)  # (B, T)
        return gold_lp.masked_fill(target == PAD, 0.0)
