"""The shared encoder-decoder skeleton; a mechanism is its output layer (the plug-in seam), plus,
where its paper says so, its own encoder or decoder recurrence.

One decoding step, for every mechanism:
  x_t = [e(y_{t-1}); extra(y_{t-1})]     e: the embedding, which an output layer may replace for
                                         copied words (Read-Again eq. 15); extra: e.g. CopyNet's
                                         selective read zeta(y_{t-1}) (eq. 9)
  s_t, c_t, a_t = decoder(x_t, state)    Bahdanau: attend with s_{t-1}, then GRU (CopyNet eq. 2-3);
                                         Luong: LSTM, then attend with s_t (WEAN)
  log p(y_t | .) over the extended vocabulary = output_layer(s_t, c_t, state + {"attn": a_t})

``step(state, prev_ids) -> (log_probs_ext, state)`` is the one interface that training
(teacher forcing), greedy and beam search all use, so they cannot disagree. The state is a
flat dict whose tensors all have the batch (or batch x beam) as first dimension; search
reorders it with ``index_select`` on dim 0.

Training maximises, per target token, ``output_layer.gold_score`` (default: log p(y_t), CopyNet
eq. 10); a mechanism whose paper trains another per-step objective overrides it (Pointer
Softmax: log p(y_t, z_t), with the switch z_t observed; coverage: minus the coverage penalty).
Validation (eval mode) always scores log p(y_t), the same quantity for every mechanism.
"""
from __future__ import annotations

import torch
from torch import nn

from models.config import ModelConfig
from models.decoder import BahdanauDecoder
from models.encoder import make_encoder
from pipeline.extended_vocab import NEG
from pipeline.vocab import BOS, PAD, UNK

State = dict[str, torch.Tensor | int]


class OutputLayer(nn.Module):
    """Plug-in seam. Subclasses return log-probabilities over the extended vocabulary."""

    extra_input_dim: int = 0  # size of an extra decoder input fed with e(y_{t-1}) (0: none)
    can_copy: bool = False  # False: an OOV target is only reachable as <unk> (its gold id becomes UNK)
    shortlist: int | None = None  # generate only ids < shortlist (None: all of V); the rest are copied or <unk>
    static_keys: frozenset[str] = frozenset()  # state keys fixed per source (never change while decoding)
    # A copying layer keeps "copy_logp" (B, S) in its state updates: log p(copy x_j at step t), the
    # copy-mode probabilities the Figure 3-style heat map draws (else the attention is drawn).

    def init_state(self, state: State) -> State:
        """Keys this layer keeps in the decoder state (computed once per source)."""
        return {}

    def embed_input(self, state: State, prev_ids: torch.Tensor, emb: torch.Tensor) -> torch.Tensor:
        """The decoder's input embedding of y_{t-1}, (B, E); default: the word embedding."""
        return emb

    def extra_input(self, state: State, prev_ids: torch.Tensor) -> torch.Tensor | None:
        return None

    def forward(self, s_t: torch.Tensor, context: torch.Tensor, state: State) -> tuple[torch.Tensor, State]:
        """s_t (B, H), c_t (B, M), state (with this step's decoder input "x_t" (B, E + extra) and
        attention "attn" (B, S) when the decoder attends) -> log p over V + X (B, V + X), updates."""
        raise NotImplementedError

    def gold_score(self, log_probs: torch.Tensor, state: State, target: torch.Tensor, t: int, batch) -> torch.Tensor:
        """Per-example training objective of step t (maximised): log p(y_t), (B,)."""
        return log_probs.gather(1, target.unsqueeze(1)).squeeze(1)

    def mask_unemittable(self, scores: torch.Tensor) -> torch.Tensor:
        """<pad> and <s> are never emitted, nor words past the shortlist: their scores leave the normaliser."""
        scores = scores.clone()
        scores[:, PAD] = NEG
        scores[:, BOS] = NEG
        if self.shortlist is not None:
            scores[:, self.shortlist :] = NEG
        return scores


class Seq2Seq(nn.Module):
    # State entries that depend on the source only: beam search never needs to reorder them,
    # because a beam's hypotheses always share their source.
    STATIC_KEYS = frozenset({"memory", "src_mask", "src_ext", "n_ext"})

    def __init__(self, cfg: ModelConfig, output_layer: OutputLayer, attention: bool = True,
                 encoder: nn.Module | None = None, decoder: nn.Module | None = None,
                 tgt_emb: nn.Embedding | None = None):
        super().__init__()
        self.cfg = cfg
        self.src_emb = nn.Embedding(cfg.src_vocab, cfg.emb, padding_idx=PAD)
        self.tgt_emb = tgt_emb if tgt_emb is not None else nn.Embedding(cfg.tgt_vocab, cfg.emb, padding_idx=PAD)
        self.encoder = encoder if encoder is not None else make_encoder(cfg)
        self.decoder = decoder if decoder is not None else BahdanauDecoder(
            self.tgt_emb.embedding_dim + output_layer.extra_input_dim, cfg.hidden, self.encoder.out_dim, attention)
        self.output = output_layer
        self.static_state_keys = self.STATIC_KEYS | self.decoder.static_keys | output_layer.static_keys
        self.drop = nn.Dropout(cfg.dropout)

    def encode(self, batch) -> State:
        mask = batch.src != PAD  # (B, S)
        memory, summary = self.encoder(self.drop(self.src_emb(batch.src)), batch.src_len, batch)  # (B, S, M), (B, M)
        state: State = {"memory": memory, "src_mask": mask, "src_ext": batch.src_ext, "n_ext": batch.n_ext}
        state.update(self.decoder.init_state(memory, summary, mask))
        state.update(self.output.init_state(state))
        return state

    def step(self, state: State, prev_ids: torch.Tensor) -> tuple[torch.Tensor, State]:
        """prev_ids (B,) extended ids of y_{t-1} -> log p(y_t) (B, V + X), next state."""
        in_vocab = prev_ids.masked_fill(prev_ids >= self.cfg.tgt_vocab, UNK)
        inputs = [self.output.embed_input(state, prev_ids, self.tgt_emb(in_vocab))]  # (B, E)
        extra = self.output.extra_input(state, prev_ids)
        if extra is not None:
            inputs.append(extra)
        x_t = self.drop(torch.cat(inputs, dim=-1))  # (B, E + extra)
        s_t, context, weights, dec_updates = self.decoder(state, x_t)
        view = {**state, "x_t": x_t} if weights is None else {**state, "x_t": x_t, "attn": weights}
        log_probs, out_updates = self.output(self.drop(s_t), context, view)
        new_state = {**state, **dec_updates, **out_updates}
        if weights is not None:
            new_state["attn"] = weights
        return log_probs, new_state

    def training_target(self, batch) -> torch.Tensor:
        """Gold extended ids (B, T), with every word the model cannot produce replaced by <unk>.

        Without copying, a word outside the generated ids (V, or the shortlist) is <unk>; with
        copying, so is a word outside the shortlist that is not in the source either.
        """
        target = batch.tgt_out  # (B, T)
        limit = self.output.shortlist or self.cfg.tgt_vocab
        unreachable = target >= limit
        if self.output.can_copy:
            in_src = ((target.unsqueeze(2) == batch.src_ext.unsqueeze(1))
                      & (batch.src_ext != PAD).unsqueeze(1)).any(dim=2)  # (B, T)
            unreachable = unreachable & ~in_src
        return target.masked_fill(unreachable, UNK)

    def forward(self, batch, objective: bool | None = None) -> torch.Tensor:
        """Teacher forcing: per gold token (B, T), 0 at padding. In training mode the output layer's
        objective (``gold_score``: log p(y_t | y_<t, X) unless the mechanism says otherwise); in
        eval mode always log p(y_t | y_<t, X) from ``step``, so validation loss and perplexity mean
        the same for every mechanism (the model of the best epoch is chosen by it). ``objective``
        overrides the mode's choice (True: the training objective, e.g. to test it in eval mode)."""
        state = self.encode(batch)
        target = self.training_target(batch)
        objective = self.training if objective is None else objective
        gold = []
        for t in range(batch.tgt_in.size(1)):
            log_probs, state = self.step(state, batch.tgt_in[:, t])
            if objective:  # the mechanism's own objective (e.g. Pointer Softmax's joint, coverage)
                gold.append(self.output.gold_score(log_probs, state, target[:, t], t, batch))
            else:  # evaluation: log p(y_t) itself, so validation loss compares across mechanisms
                gold.append(OutputLayer.gold_score(self.output, log_probs, state, target[:, t], t, batch))
        gold_lp = torch.stack(gold, dim=1)  # (B, T)
        return gold_lp.masked_fill(target == PAD, 0.0)
