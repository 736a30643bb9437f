"""WEAN (Ma, Sun, Li, Li, Li, Ren 2018), "Word Embedding Attention Network", sections 2 and 3,
and the paper's Luong-attention seq2seq baseline (its "Seq2seq", Tables 1, 2, 4, 5).

Both share the skeleton's encoder and the Luong decoder (section 2.2, 3.1.3): a stacked LSTM
computes s_t, then attention over the encoder states gives

  c_t = sum_i alpha_ti h_i,  alpha_ti = softmax_i g(s_t, h_i)                     (eq. 1-2)

with Luong's 'general' score g (models.decoder.LuongDecoder). The decoder input at step t is the
embedding of y_{t-1} only: neither the paper nor its released code feeds the previous attentional
vector back (no Luong input feeding). Both output layers start from the query / attentional vector

  q_t = tanh(W_c [s_t; c_t])                                                      (eq. 4)

- WEAN (``WEANOutput``) scores every candidate word w_i by its embedding e_i, the *same* tensor
  the decoder reads as input (section 2.4: "decoder input and the predicted output share the same
  vocabulary and word embeddings"):

    f(q_t, e_i) = q_t^T e_i                      dot
                = q_t^T W_a e_i                  general (the paper's choice, section 2.3)
                = v^T tanh(W_q q_t + W_e e_i)    concat                            (eq. 5)
    p(y_t) = softmax_i f(q_t, e_i)                                                 (eq. 6)

  q_t lives in the embedding space: W_c maps [s_t; c_t] (H + 2H) to E, so dot works for any
  emb/hidden sizes; W_a, W_q, W_e are E x E and v has E entries, so concat has
  E x E x 2 + E parameters: Table 5's 256 x 256 x 2 + 256 = 131,328 at the paper's E = H = 256.
- Seq2seq (``LuongOutput``): p(y_t) = softmax(W q_t), W in R^{H x n} (eq. 3, with Luong et al.
  2015's attentional vector as the hidden state it reads; q_t has the hidden size H here).

Candidates (section 2.4): the n most frequent words (option ``candidates``; None = the whole
decoder vocabulary). Vocabulary ids are sorted by frequency, so the candidates are ids < n, which
is ``OutputLayer.shortlist``; scores are computed for those n only, and a gold word outside them
trains as <unk> (``Seq2Seq.training_target``). Neither layer can copy: the extended slots V..V+X-1
get NEG (``pad_extended``), so a source-only word can only come out as <unk>.

No biases anywhere in the output layers: eq. 3-5 have none, and Table 5's arithmetic counts
"two parameter matrices and one parameter vector at most".
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from models.config import ModelConfig, parse_options
from models.decoder import LuongDecoder
from models.encoder import make_encoder
from models.extended import NEG
from models.param_count import output_layer_parameters, word_generator_parameters
from models.seq2seq import ANY_DECODER, Mechanism, OutputLayer, Scores, Seq2Seq, State, at_least_fp32
from models.specials import PAD, SPECIALS
from models.transformer_decoder import recurrent_or_transformer

log = logging.getLogger(__name__)

SCORES = ("dot", "general", "concat")
CONCAT_CHUNK = 1 << 24  # elements of one (rows, n, E) block of the concat score


@dataclass(frozen=True)
class WEANOptions:
    """params.yaml ``model.wean``."""

    score: str = "general"  # f(q_t, e_i) of eq. 5: dot | general | concat (2.3: general, chosen on validation)
    candidates: int | None = None  # n most frequent words (2.4); None: the whole decoder vocabulary
    layers: int = 2  # decoder LSTM layers (3.1.3: two; 3.2.3 LCSTS: one)

    def __post_init__(self) -> None:
        if self.score not in SCORES:
            raise ValueError(f"model.wean.score must be one of {SCORES}, not {self.score!r}")
        _check_common(self.candidates, self.layers, "wean")


@dataclass(frozen=True)
class LuongOptions:
    """params.yaml ``model.luong``: the paper's Seq2seq baseline."""

    candidates: int | None = None  # generate only the n most frequent words; None: all of V
    layers: int = 2  # decoder LSTM layers (3.1.3)

    def __post_init__(self) -> None:
        _check_common(self.candidates, self.layers, "luong")


def _check_common(candidates: int | None, layers: int, name: str) -> None:
    if candidates is not None and candidates <= len(SPECIALS):
        raise ValueError(f"model.{name}.candidates must exceed the {len(SPECIALS)} specials, not {candidates}")
    if layers < 1:
        raise ValueError(f"model.{name}.layers must be >= 1, not {layers}")


class _QueryOutput(OutputLayer):
    """Common part: q_t = tanh(W_c [s_t; c_t]) (eq. 4), candidate scores, log-softmax (eq. 6).

    ``attentional_layer`` names the submodules that the paper counts outside "the output layer"
    in Table 5 (W_c: Luong's attentional layer, present in Seq2seq and WEAN alike, section 4.1:
    "the numbers of rest parameters between Seq2seq and WEAN are the same"); see
    models.param_count.word_generator_parameters.
    """

    attentional_layer: tuple[str, ...] = ("w_c",)

    def __init__(self, cfg: ModelConfig, context_dim: int, query_dim: int, candidates: int | None):
        super().__init__()
        self.vocab = cfg.tgt_vocab
        # n = min(candidates, V): with fewer words than asked for, every word is a candidate.
        self.n = self.vocab if candidates is None else min(candidates, self.vocab)
        self.shortlist = self.n if self.n < self.vocab else None
        self.w_c = nn.Linear(cfg.hidden + context_dim, query_dim, bias=False)  # eq. 4

    def query(self, s_t: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
        """q_t = tanh(W_c [s_t; c_t]) (eq. 4): (..., H), (..., 2H) -> (..., Q)."""
        return torch.tanh(self.w_c(torch.cat([s_t, context], dim=-1)))

    def candidate_scores(self, q: torch.Tensor) -> torch.Tensor:
        """(..., Q) -> (..., n) unnormalised scores of the candidate ids 0..n-1."""
        raise NotImplementedError

    def score_all(self, s: torch.Tensor, context: torch.Tensor, view: State) -> Scores:
        # float32 scores even under CUDA autocast, as CopyNet: the normaliser should not be bf16.
        scores = at_least_fp32(self.candidate_scores(self.query(s, context)))  # (B, T, n)
        if self.n < self.vocab:  # non-candidates: probability 0 (mask_unemittable does it again)
            scores = torch.cat([scores, scores.new_full((*scores.shape[:-1], self.vocab - self.n), NEG)], dim=-1)
        scores = self.mask_unemittable(scores)  # (B, T, V): <pad>, <s> never emitted
        return Scores(torch.log_softmax(scores, dim=-1))  # eq. 6; no copy term


class WEANOutput(_QueryOutput):
    """Word generation by querying the decoder's input embeddings (section 2.3, eq. 4-6)."""

    def __init__(self, cfg: ModelConfig, embedding: nn.Embedding, context_dim: int, opts: WEANOptions):
        dim = embedding.embedding_dim  # E: the query lives in the embedding space
        super().__init__(cfg, context_dim, dim, opts.candidates)
        self.score = opts.score
        self.emb = embedding  # the decoder's input embedding itself (section 2.4), not a copy
        if opts.score == "general":
            self.w_a = nn.Linear(dim, dim, bias=False)  # weight = W_a (E x E)
        elif opts.score == "concat":
            self.w_q = nn.Linear(dim, dim, bias=False)  # W_q
            self.w_e = nn.Linear(dim, dim, bias=False)  # W_e
            self.v = nn.Linear(dim, 1, bias=False)  # v^T

    def candidate_scores(self, q: torch.Tensor) -> torch.Tensor:
        """f(q_t, e_i) of eq. 5 for the n candidates: (..., E) -> (..., n)."""
        keys = self.emb.weight[: self.n]  # (n, E): e_i, the decoder input embeddings
        if self.score == "dot":
            return q @ keys.t()  # q_t^T e_i
        if self.score == "general":
            return (q @ self.w_a.weight) @ keys.t()  # (q_t^T W_a) e_i, W_a applied once per query
        # concat: v^T tanh(W_q q + W_e e_i) needs a (rows, n, E) tensor. Rows go in chunks of about
        # CONCAT_CHUNK elements, each recomputed in the backward pass (activation checkpointing), so
        # all B x T queries at once never hold a (B, T, n, E) activation.
        w_e_keys = self.w_e(keys)  # (n, E): depends on the embeddings only, not on the batch
        queries = self.w_q(q).reshape(-1, q.size(-1))  # (N, E)
        rows = max(1, CONCAT_CHUNK // w_e_keys.numel())
        chunks = [
            checkpoint(self._concat_chunk, queries[i : i + rows], w_e_keys, use_reentrant=False)
            if torch.is_grad_enabled()
            else self._concat_chunk(queries[i : i + rows], w_e_keys)
            for i in range(0, queries.size(0), rows)
        ]
        return torch.cat(chunks).view(*q.shape[:-1], -1)  # (..., n)

    def _concat_chunk(self, queries: torch.Tensor, w_e_keys: torch.Tensor) -> torch.Tensor:
        """(rows, E), (n, E) -> (rows, n): v^T tanh(W_q q + W_e e_i)."""
        return self.v(torch.tanh(queries.unsqueeze(1) + w_e_keys)).squeeze(-1)


class LuongOutput(_QueryOutput):
    """Seq2seq's word generator: p(y_t) = softmax(W q_t) over the candidates (eq. 3)."""

    def __init__(self, cfg: ModelConfig, context_dim: int, candidates: int | None):
        super().__init__(cfg, context_dim, cfg.hidden, candidates)
        self.w = nn.Linear(cfg.hidden, self.n, bias=False)  # W: H x n (eq. 3; n = V by default)

    def candidate_scores(self, q: torch.Tensor) -> torch.Tensor:
        return self.w(q)  # (..., n)


def _luong_skeleton(cfg: ModelConfig, layers: int) -> tuple[nn.Module, nn.Module, nn.Embedding]:
    """Encoder, decoder (Luong's stacked LSTM of ``layers``, or the transformer decoder under
    ``model.decoder: transformer``: then s_t is its last layer's output and c_t its alignment
    head's context) and the decoder's input embeddings."""
    encoder = make_encoder(cfg)
    decoder = recurrent_or_transformer(
        cfg,
        lambda: LuongDecoder(cfg.emb, cfg.hidden, encoder.out_dim, layers=layers, dropout=cfg.dropout),
        cfg.emb,
        encoder.out_dim,
    )
    tgt_emb = nn.Embedding(cfg.tgt_vocab, cfg.emb, padding_idx=PAD)
    return encoder, decoder, tgt_emb


def _log_sizes(name: str, model: Seq2Seq) -> None:
    """Section 4.1 / Table 5: the output layer's size is logged whenever a model is built."""
    log.info(
        "%s output layer: %d parameters (%d in the word generator, WEAN Table 5 convention)",
        name,
        output_layer_parameters(model),
        word_generator_parameters(model),
    )


def build_wean(cfg: ModelConfig) -> Seq2Seq:
    """WEAN: Luong decoder (2.2, 3.1.3) + the embedding-querying output layer (2.3-2.4)."""
    opts = parse_options(WEANOptions, cfg.options, "wean")
    encoder, decoder, tgt_emb = _luong_skeleton(cfg, opts.layers)
    output = WEANOutput(cfg, tgt_emb, decoder.context_dim, opts)
    model = Seq2Seq(cfg, output, encoder=encoder, decoder=decoder, tgt_emb=tgt_emb)
    _log_sizes("WEAN", model)
    return model


def build_luong(cfg: ModelConfig) -> Seq2Seq:
    """The paper's Seq2seq: the same encoder and Luong decoder, a plain softmax output (eq. 3)."""
    opts = parse_options(LuongOptions, cfg.options, "luong")
    encoder, decoder, tgt_emb = _luong_skeleton(cfg, opts.layers)
    model = Seq2Seq(
        cfg, LuongOutput(cfg, decoder.context_dim, opts.candidates), encoder=encoder, decoder=decoder, tgt_emb=tgt_emb
    )
    _log_sizes("Seq2seq (Luong)", model)
    return model


MECHANISMS = (
    Mechanism(
        "luong",
        "Seq2seq (Luong)",
        build_luong,
        options=LuongOptions,
        variants=({}, {"candidates": 7, "layers": 1}),
        decoders=ANY_DECODER,
    ),
    Mechanism(
        "wean",
        "WEAN",
        build_wean,
        options=WEANOptions,
        variants=({}, {"score": "dot"}, {"score": "general", "candidates": 8}, {"score": "concat", "layers": 1}),
        decoders=ANY_DECODER,
    ),
)
