"""Pointer Softmax (Gulcehre, Ahn, Nallapati, Zhou, Bengio 2016, "Pointing the Unknown Words"), section 4.

Three components (section 4.1), on top of the shared Bahdanau decoder (section 3; the paper "just
replaced the softmax layer with pointer softmax layer"):

- shortlist softmax w_t = p(w_t | z_t = 1, (y, z)_{<t}, x): a softmax over the shortlist (ids
  ``< shortlist``, the most frequent words; specials included), read out linearly from [s_t; c_t]
  as the project's RNNSearch baseline does (models.baselines). <pad> and <s> are never emitted.
- location softmax l_t = p(l_t | z_t = 0, (y, z)_{<t}, x): the decoder's attention weights reused
  (eq. 1, "we can reuse the probability distributions over the source words"), ``state["attn"]``.
- switching network d_t = p(z_t = 1 | (y, z)_{<t}, x) = sigmoid(T * f([h_t; c_t])) (eq. 8-9, 4.1:
  conditioned on the decoder state h_t = s_t and the context c_t). The paper's convention is kept:
  **z_t = 1 / d_t is the shortlist side, 1 - d_t the location side**, and the output is the
  concatenation [d_t * w_t; (1 - d_t) * l_t] (4.1). f is ``switch: mlp`` (one tanh hidden layer, then
  a scalar) or ``switch: noisy_residual`` (5.3: two noisy-tanh layers, Gulcehre et al. 2016b
  "Noisy activation functions" Algorithm 1, the upper one with a residual connection from the
  lower). T is ``temperature`` ("inverse temperature", 5.1: d_t = sigma(2x)). The last bias starts
  at ``switch_bias`` = -1 (5.3). NB with d_t = p(shortlist), bias -1 makes d_t = sigma(-T) < 1/2 at
  the start, i.e. biased toward the *location* softmax, while 5.3's text says the -1 was meant to
  bias it toward the shortlist: the equations and the text disagree; set ``switch_bias: 1.0`` for
  the text's intent.

Training (eq. 4-7, 10) maximises log p(y_t, z_t | (y, z)_{<t}, x) with z_t observed (4.1: "during
the training, d_t is observed"), per token (``gold_score``):
  z_t = 1 (shortlist): log d_t + log w_t[y_t]                    (eq. 6, 8)
  z_t = 0 (pointer):   log (1 - d_t) + log l_t[pointer_t]         (eq. 7, 9)
The switch and pointer come from the batch's ``tgt_switch``/``tgt_pointer`` annotations (5.2/5.3
data; ``tgt_switch`` True is the paper's z_t = 0) or, without annotations, from the rule "target word
not in the shortlist but in the source" (pointer = its first source position, 5.2's conflict rule).
A target scored on the shortlist side that the shortlist cannot emit (outside the shortlist or the
batch vocabulary) is scored as <unk> ("neither in the shortlist nor in the context sequence ... the
shortlist softmax predicts UNK", section 4). A switch True with pointer -1 (Europarl's
``unmatched: location``, or a pointer past a truncated source) is scored per ``unknown_pointer``:
``argmax`` (default, 5.3: "we just use the argmax of l_t as the target", the argmax taken as a fixed
index) or ``switch`` (log (1 - d_t) only, no location term).

Decoding. ``forward`` returns log-probabilities over the extended vocabulary V + X for the shared
greedy/beam search. With ``decode: marginal`` (default) it is the marginal over the switch and the
locations, p(w) = d_t w_t(w) + (1 - d_t) sum_{j: x_j = w} l_tj, a normalised distribution (repeated
source words merge, source OOVs get their V + k slots). With ``decode: max`` (only in eval mode) it
is the best single derivation, max(d_t w_t(w), max_{j: x_j = w} (1 - d_t) l_tj): its argmax is the
paper's test-time rule ("compute Eqn. (6) and (7) for all shortlist words and all locations, and
pick the word or location of the highest probability", 4.1; ``paper_decision``), and beam search
over it searches for the best (word, switch, location) path. The two argmaxes differ only when a
word's mass is split over several source positions or over both sides.

Large-vocabulary trick (``batch_vocab: K``; Jean et al. 2015 as used in 5.2): the shortlist softmax
of a batch normalises over the K most frequent target words (ids < K: vocabularies are sorted by
frequency) plus the words of the batch's sources (``batch_vocab_scope: batch``, the paper's "words
... from the words in the source documents of each batch"; ``example``: each example's own source,
so that a decoded output does not depend on the rest of its batch), always within the shortlist.
It saves nothing here (the readout still scores every shortlist word), but it changes the model as
in the paper: words outside a batch's vocabulary get probability 0 and, as targets, become <unk>.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from models.config import ModelConfig, parse_options
from models.extended import NEG, gold_log_probs, pad_extended
from models.seq2seq import ANY_DECODER, Mechanism, OutputLayer, Scores, Seq2Seq, State, at_least_fp32, gather_last
from models.specials import PAD, SPECIALS, UNK

SWITCHES = ("mlp", "noisy_residual")
DECODES = ("marginal", "max")
UNKNOWN_POINTER = ("argmax", "switch")
SCOPES = ("batch", "example")


@dataclass(frozen=True)
class PointerSoftmaxOptions:
    """``model.pointer_softmax`` in params.yaml."""

    shortlist: int | None = None  # generate ids < shortlist (4 specials included; 5.1: 4 + 540); None: all of V
    switch: str = "mlp"  # mlp (tanh hidden layer) | noisy_residual (5.3)
    switch_hidden: int | None = None  # hidden size of the switch MLP; None: the decoder's hidden size
    temperature: float = 1.0  # d_t = sigmoid(temperature * f) (5.1 uses 2.0)
    switch_bias: float = -1.0  # initial bias of the switch's last layer (5.3)
    noise_alpha: float = 1.1  # noisy tanh: leak from the hard to the linear function (Algorithm 1)
    noise_c: float = 0.5  # noisy tanh: noise scale (Algorithm 1)
    batch_vocab: int | None = None  # large-vocabulary trick: K most frequent ids + the sources' words
    batch_vocab_scope: str = "batch"  # batch | example: whose source words join the K frequent ones
    unknown_pointer: str = "argmax"  # switch on, pointer -1: argmax (5.3) | switch (log(1 - d) only)
    decode: str = "marginal"  # marginal | max (the paper's test-time rule; eval mode only)

    def __post_init__(self) -> None:
        checks = [
            (self.switch in SWITCHES, f"switch in {SWITCHES}"),
            (self.decode in DECODES, f"decode in {DECODES}"),
            (self.unknown_pointer in UNKNOWN_POINTER, f"unknown_pointer in {UNKNOWN_POINTER}"),
            (self.batch_vocab_scope in SCOPES, f"batch_vocab_scope in {SCOPES}"),
            (self.temperature > 0, "temperature > 0"),
            (self.shortlist is None or self.shortlist > len(SPECIALS), f"shortlist > {len(SPECIALS)}"),
            (self.batch_vocab is None or self.batch_vocab > len(SPECIALS), f"batch_vocab > {len(SPECIALS)}"),
            (self.switch_hidden is None or self.switch_hidden >= 1, "switch_hidden >= 1"),
        ]
        failed = [msg for ok, msg in checks if not ok]
        if failed:
            raise ValueError(f"invalid pointer_softmax options {self}: need {', '.join(failed)}")


class NoisyTanh(nn.Module):
    """Noisy hard-tanh with half-normal noise (Gulcehre, Moczulski, Denil, Bengio 2016, Algorithm 1):

      h(x) = max(min(x, 1), -1),  u(x) = x (first-order Taylor expansion of tanh at 0),
      Delta = h(x) - u(x),  d(x) = -sgn(x) sgn(1 - alpha),  sigma(x) = c (sigmoid(p Delta) - 1/2)^2,
      phi(x, xi) = alpha h(x) + (1 - alpha) u(x) + d(x) sigma(x) |xi|,  xi ~ N(0, 1).

    p is learned (one per unit, initialised to 1). In eval mode |xi| is replaced by its expectation
    sqrt(2 / pi), so the function is deterministic. Inside [-1, 1] it is the identity.
    """

    def __init__(self, size: int, alpha: float = 1.1, c: float = 0.5):
        super().__init__()
        self.alpha, self.c = alpha, c
        self.p = nn.Parameter(torch.ones(size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.clamp(-1.0, 1.0)  # hard tanh
        delta = h - x
        d = -torch.sign(x) * float((1.0 - self.alpha > 0) - (1.0 - self.alpha < 0))  # -sgn(x) sgn(1 - alpha)
        sigma = self.c * (torch.sigmoid(self.p * delta) - 0.5) ** 2
        xi = torch.randn_like(x).abs() if self.training else math.sqrt(2.0 / math.pi)
        return self.alpha * h + (1.0 - self.alpha) * x + d * sigma * xi


def shortlist_size(shortlist: int | None, vocab: int) -> int | None:
    """The K most frequent words; a vocabulary of fewer words is all shortlist (as WEAN's candidates):
    the shared default (250) then fits a small corpus of one's own instead of failing its training.
    None: the whole vocabulary."""
    return None if shortlist is None else min(shortlist, vocab)


class SwitchMLP(nn.Module):
    """f([h_t; c_t]) -> one pre-sigmoid scalar per example (eq. 8; 4.1 "an MLP with sigmoid output").

    ``mlp``:            f = v^T tanh(W x + b) + b_o
    ``noisy_residual``: a1 = phi(W1 x + b1); a2 = phi(W2 a1 + b2) + a1; f = v^T a2 + b_o (5.3: two
                        noisy-tanh layers, residual connection from the lower layer to the upper)
    b_o starts at ``switch_bias``.
    """

    def __init__(self, in_dim: int, hidden: int, kind: str, bias: float, alpha: float, c: float):
        super().__init__()
        self.kind = kind
        self.layer1 = nn.Linear(in_dim, hidden)
        if kind == "noisy_residual":
            self.act1 = NoisyTanh(hidden, alpha, c)
            self.layer2 = nn.Linear(hidden, hidden)
            self.act2 = NoisyTanh(hidden, alpha, c)
        self.out = nn.Linear(hidden, 1)
        with torch.no_grad():
            self.out.bias.fill_(bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (B, In) -> (B,)"""
        if self.kind == "mlp":
            hidden = torch.tanh(self.layer1(x))  # (B, Hs)
        else:
            lower = self.act1(self.layer1(x))  # (B, Hs)
            hidden = self.act2(self.layer2(lower)) + lower  # (B, Hs) residual
        return self.out(hidden).squeeze(-1)


class PointerSoftmaxOutput(OutputLayer):
    can_copy = True
    reads_pointers = True  # the observed switch and pointer (5.2-5.3)
    static_keys = frozenset({"ps_allowed"})

    def __init__(self, cfg: ModelConfig, opts: PointerSoftmaxOptions | None = None, context_dim: int | None = None):
        super().__init__()
        self.opts = opts = opts or PointerSoftmaxOptions()
        self.vocab = cfg.tgt_vocab
        shortlist = shortlist_size(opts.shortlist, cfg.tgt_vocab)
        self.shortlist = shortlist  # OutputLayer.shortlist: Seq2Seq.training_target reads it
        self.limit = shortlist or cfg.tgt_vocab  # ids < limit are generated
        self.decode = opts.decode
        feat = cfg.hidden + (context_dim if context_dim is not None else cfg.memory)  # [s_t; c_t]
        self.readout = nn.Linear(feat, self.limit)  # shortlist softmax logits, one row per shortlist id
        self.switch = SwitchMLP(
            feat, opts.switch_hidden or cfg.hidden, opts.switch, opts.switch_bias, opts.noise_alpha, opts.noise_c
        )

    # -- state --------------------------------------------------------------------------------

    def init_state(self, state: State) -> State:
        """``ps_allowed`` (B, V): the ids the shortlist softmax may emit for each example."""
        src_ext = state["src_ext"]  # (B, S)
        bsz = src_ext.size(0)
        ids = torch.arange(self.vocab, device=src_ext.device)  # (V,)
        allowed = (ids < self.limit).unsqueeze(0).expand(bsz, self.vocab)  # (B, V)
        k = self.opts.batch_vocab
        if k is not None:
            src_words = src_ext.masked_fill(src_ext >= self.vocab, PAD)  # (B, S) OOVs cannot be generated
            in_src = torch.zeros(bsz, self.vocab, dtype=torch.bool, device=src_ext.device)
            in_src = in_src.scatter(1, src_words, True)  # (B, V)
            if self.opts.batch_vocab_scope == "batch":
                in_src = in_src.any(dim=0, keepdim=True).expand(bsz, self.vocab)  # union over the batch
            allowed = allowed & (in_src | (ids < max(k, len(SPECIALS))).unsqueeze(0))
        return {"ps_allowed": allowed}

    # -- scores ---------------------------------------------------------------------------------

    def score_all(self, s: torch.Tensor, context: torch.Tensor, view: State) -> Scores:
        """The three components at every position, in log space (float32 also under autocast):
        the shortlist softmax log w_t (B, T, V) with gen_shift = log d_t, the location softmax
        log l_t (B, T, S) with copy_shift = log(1 - d_t) (eq. 8-9)."""
        feats = torch.cat([s, context], dim=-1)  # (B, T, H + M)
        gen = self.project(feats, self.readout)  # (B, T, L), <pad> and <s> at NEG
        if self.limit < self.vocab:
            gen = torch.cat([gen, gen.new_full((*gen.shape[:-1], self.vocab - self.limit), NEG)], dim=-1)  # (B, T, V)
        gen = gen.masked_fill(~view["ps_allowed"].unsqueeze(1), NEG)
        switch = self.opts.temperature * at_least_fp32(self.switch(feats))  # (B, T) T * f([h_t; c_t])
        log_d, log_1md = F.logsigmoid(switch), F.logsigmoid(-switch)  # log p(z_t = 1), log p(z_t = 0): eq. 8, 9
        return Scores(
            torch.log_softmax(gen, dim=-1),
            log_d.unsqueeze(-1),
            self.log_location(view),
            log_1md.unsqueeze(-1),
            {"log_d": log_d, "log_1md": log_1md},
        )

    @staticmethod
    def log_location(view: State) -> torch.Tensor:
        """log l_t (B, T, S), NEG at padding. The attention gives probabilities; a weight that underflowed
        to 0 is clamped to the smallest normal float (log ~ -87), which keeps every gradient finite."""
        attn = at_least_fp32(view["attn"])  # (B, T, S)
        return attn.clamp_min(torch.finfo(attn.dtype).tiny).log().masked_fill(~view["src_mask"].unsqueeze(1), NEG)

    def step_updates(self, scores: Scores) -> State:
        """The components of the step, (B, ...): what ``gold_score`` and ``paper_decision`` read."""
        parts = scores.parts
        return {
            "ps_log_d": parts["log_d"].squeeze(1),  # (B,) log d_t
            "ps_log_1md": parts["log_1md"].squeeze(1),  # (B,) log(1 - d_t)
            "ps_log_w": scores.gen.squeeze(1),  # (B, V) shortlist softmax
            "ps_log_l": scores.copy.squeeze(1),  # (B, S) location softmax
            "copy_logp": scores.copy_log_probs().squeeze(1),  # (B, S) log (1 - d) l_j: the heat map's pointing
        }

    @property
    def scores_are_probabilities(self) -> bool:
        """``decode: max`` ranks search by the best derivation (eval mode), not by p(w)."""
        return self.decode == "marginal"

    def distribution(self, scores: Scores, view: State) -> torch.Tensor:
        """The marginal p(w) = d w(w) + (1 - d) sum_{x_j = w} l_j over V + X, or, with ``decode: max``
        in eval mode, the best derivation max(d w(w), max_{x_j = w} (1 - d) l_j)."""
        if not (self.decode == "max" and not self.training):
            return super().distribution(scores, view)
        n_ext = view["n_ext"]
        word = pad_extended(scores.gen_log_probs(), n_ext)  # (B, T, V+X) log d w
        loc = scores.copy_log_probs()  # (B, T, S) log (1 - d) l_j
        bsz, steps, src_len = loc.shape
        best = loc.new_full((bsz * steps, word.size(-1)), NEG)
        index = view["src_ext"].unsqueeze(1).expand(bsz, steps, src_len).reshape(-1, src_len)
        best = best.scatter_reduce(1, index, loc.reshape(-1, src_len), reduce="amax", include_self=True)
        return torch.maximum(word, best.view_as(word))

    def step_log_likelihood(self, log_probs: torch.Tensor, state: State, target: torch.Tensor) -> torch.Tensor:
        """log p(y_t), the marginal, also when search ranks by the best derivation (``decode: max``)."""
        return gold_log_probs(
            state["ps_log_w"],
            state["ps_log_d"].unsqueeze(-1),
            state["ps_log_l"],
            state["ps_log_1md"].unsqueeze(-1),
            state["src_ext"],
            state["src_mask"],
            target,
        )

    # -- training objective -------------------------------------------------------------------

    def rule_switch(self, state: State, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Without annotations: pointed where the target (B, ...) is not in the shortlist but in the
        source, at the first source position holding its extended id; pointer -1 elsewhere."""
        src_ext, mask = state["src_ext"], state["src_mask"]  # (B, S)
        shape = (src_ext.size(0), *([1] * (target.dim() - 1)), src_ext.size(1))
        match = (src_ext.view(shape) == target.unsqueeze(-1)) & mask.view(shape)  # (B, ..., S)
        pointed = (target >= self.limit) & match.any(dim=-1)
        first = match.int().argmax(dim=-1)  # first True (argmax returns the first maximum)
        return pointed, torch.where(pointed, first, torch.full_like(first, -1))

    def observed_switch(self, state: State, target: torch.Tensor, t: int, batch) -> tuple[torch.Tensor, torch.Tensor]:
        """(pointed (B,) bool = the paper's z_t = 0, pointer (B,) long, -1: unknown) of step t.

        From the batch's annotations when it has them; else ``rule_switch``."""
        if batch.tgt_pointer is not None and batch.tgt_switch is not None:
            return batch.tgt_switch[:, t], batch.tgt_pointer[:, t]
        return self.rule_switch(state, target)

    def joint_log_likelihood(
        self,
        log_d: torch.Tensor,
        log_1md: torch.Tensor,
        log_w: torch.Tensor,
        log_l: torch.Tensor,
        target: torch.Tensor,
        pointed: torch.Tensor,
        pointer: torch.Tensor,
        allowed: torch.Tensor,
    ) -> torch.Tensor:
        """log p(y_t, z_t) with z_t observed (eq. 6-7, 10), for targets of any shape (B, ...):
        log d_t + log w_t[y_t] on the shortlist side (log_w (B, ..., V)), log(1 - d_t) +
        log l_t[pointer] (log_l (B, ..., S)) when pointed; allowed (B, V)."""
        # Shortlist side: a word the shortlist cannot emit (here) is <unk> (section 4).
        in_vocab = target.clamp(max=self.vocab - 1)
        emittable = (target < self.vocab) & allowed.gather(1, in_vocab.reshape(in_vocab.size(0), -1)).view_as(target)
        word_id = torch.where(emittable, target, torch.full_like(target, UNK))
        word = log_d + gather_last(log_w, word_id)
        # Pointer side: the annotated position; unknown position (-1): argmax of l_t or the switch alone.
        if self.opts.unknown_pointer == "argmax":
            at = torch.where(pointer >= 0, pointer, log_l.detach().argmax(dim=-1))
            loc_term = gather_last(log_l, at)
        else:
            known = gather_last(log_l, pointer.clamp(min=0))
            loc_term = torch.where(pointer >= 0, known, torch.zeros_like(known))
        return torch.where(pointed, log_1md + loc_term, word)

    def gold_score(self, log_probs: torch.Tensor, state: State, target: torch.Tensor, t: int, batch) -> torch.Tensor:
        """Stepwise: log p(y_t, z_t) of step t, (B,)."""
        pointed, pointer = self.observed_switch(state, target, t, batch)
        return self.joint_log_likelihood(
            state["ps_log_d"],
            state["ps_log_1md"],
            state["ps_log_w"],
            state["ps_log_l"],
            target,
            pointed,
            pointer,
            state["ps_allowed"],
        )

    def sequence_gold(self, scores: Scores, view: State, target: torch.Tensor, batch, objective: bool) -> torch.Tensor:
        """log p(y_t, z_t) for every step (B, T) when ``objective``, else the marginal log p(y_t)."""
        if not objective:
            return super().sequence_gold(scores, view, target, batch, objective)
        if batch.tgt_pointer is not None and batch.tgt_switch is not None:
            pointed, pointer = batch.tgt_switch, batch.tgt_pointer  # (B, T)
        else:
            pointed, pointer = self.rule_switch(view, target)
        parts = scores.parts
        return self.joint_log_likelihood(
            parts["log_d"], parts["log_1md"], scores.gen, scores.copy, target, pointed, pointer, view["ps_allowed"]
        )


def paper_decision(state: State) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The paper's test-time rule on the state after a step (4.1): the argmax over the concatenation
    [d_t w_t; (1 - d_t) l_t]. Returns the emitted extended id (B,), whether it was pointed (B,) and
    the position pointed at (B,) (-1 for a shortlist word)."""
    word_lp, word = (state["ps_log_d"].unsqueeze(1) + state["ps_log_w"]).max(dim=1)  # (B,)
    loc_lp, pos = (state["ps_log_1md"].unsqueeze(1) + state["ps_log_l"]).max(dim=1)  # (B,)
    pointed = loc_lp > word_lp
    ids = torch.where(pointed, state["src_ext"].gather(1, pos.unsqueeze(1)).squeeze(1), word)
    return ids, pointed, torch.where(pointed, pos, torch.full_like(pos, -1))


def build_pointer_softmax(cfg: ModelConfig) -> Seq2Seq:
    """Bahdanau encoder-decoder (section 3) with the pointer softmax output layer (section 4)."""
    opts = parse_options(PointerSoftmaxOptions, cfg.options, "pointer_softmax")
    return Seq2Seq(cfg, PointerSoftmaxOutput(cfg, opts), attention=True)


MECHANISMS = (
    Mechanism(
        "pointer_softmax",
        "Pointer Softmax",
        build_pointer_softmax,
        options=PointerSoftmaxOptions,
        variants=(
            {},
            {"shortlist": 7, "temperature": 2.0},
            {"switch": "noisy_residual", "unknown_pointer": "switch"},
            {"batch_vocab": 6, "batch_vocab_scope": "example", "decode": "max"},
            {"batch_vocab": 6, "shortlist": 8},
        ),
        decoders=ANY_DECODER,
    ),
)
