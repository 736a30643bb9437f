"""Read-Again + copy (Zeng, Luo, Fidler, Urtasun 2016, "Efficient Summarization with Read-Again
and Copy Mechanism"), section 3.

Encoder (3.1). Both reads are uni-directional ("we only use our model in a uni-directional
manner", 3.1); h_n^1 is the last state of the first read of a sentence (its "sentence feature
vector"). The recurrent size is the memory size M = 2 * encoder_hidden (``ModelConfig.memory``;
encoder_hidden defaults to hidden), so the memory keeps the encoder contract (B, S, M) without any
extra projection. Read-Again keeps its own decoder too: ``model.decoder: transformer`` is refused.
- ``cell: gru`` (3.1.1): h_i^1 = GRU^1(x_i, h_{i-1}^1) (eq. 2-3);
  alpha_i = tanh(W_e h_i^1 + U_e h_n^1 + V_e x_i), a vector (eq. 5);
  h_i^2 = (1 - alpha_i * z_i) h_{i-1}^2 + (alpha_i * z_i) h~_i^2 (eq. 4, 6).
- ``cell: lstm`` (3.1.2): h_i^1 = LSTM^1(x_i, h_{i-1}^1) (eq. 7);
  h_i^2 = LSTM^2([x_i, h_i^1, h_n^1], h_{i-1}^2) (eq. 8).
- Several sentences (3.1.3): the first read runs over each sentence independently, giving one
  vector h_{n_k}^1 per sentence, and the second read restarts from h_0^2 = 0 per sentence (eq. 9).
  The sentence-level vector g that eq. 8 feeds as h_n^1 becomes
    ``single``: g = h_n^1 over the whole source (one sentence);
    ``opt1`` (eq. 9): g = [h_{n_1}^1; ...; h_{n_K}^1], the same for every sentence;
    ``opt2`` (eq. 10-11): g = [h_{n_k}^1; h_global] for sentence k, with
      h_global = tanh(W_r h_{n_1}^1 + U_r h_{n_2}^1 + ... + v_r) (eq. 10: one matrix per sentence slot).
  alpha_i has the size M of h^2 (eq. 4 multiplies it into the state elementwise; the paper's
  "each dimension in the word embedding" assumes emb = hidden = 512).
  For the GRU read-again (whose GRU^2 reads only x_i, eq. 4) g takes the place of h_n^1 in eq. 5:
  alpha_i = tanh(W_e h_i^1 + U_e g + V_e x_i). K = ``max_sentences`` slots (the paper: 2);
  a source with fewer sentences has zero vectors in the missing slots, and every sentence past the
  K-th is read as part of the K-th. A sentence ends at a token listed in ``sentence_end``.

Decoder (3.2). s_t = LSTM([y_{t-1}, c_t], s_{t-1}) (eq. 12), c_t = sum_i beta_it h_i^2 (eq. 13),
beta = softmax_i(v_a^T tanh(W_a s_{t-1} + U_a h_i^2)) (eq. 14; the shared BahdanauAttention adds a
bias to U_a h_i^2); s_0 = tanh(W h_n^2 + b), which the paper leaves unsaid. ``decoder: gru`` uses
the shared BahdanauDecoder (same attention, GRU cell) instead. The previous word's input y_{t-1}
(eq. 15): the word embedding if y_{t-1} is in the decoder vocabulary Y (``decoder_vocab``, the
first K ids; only those K rows of embeddings exist, as the paper's Y in R^{|Y| x dim});
otherwise, if it occurs in the source as x_i, p_i = tanh(W_c h_i^2 + b_c) (the first occurrence
when it occurs several times: the paper names one x_i, and the first one is fixed per source, so
teacher forcing and search agree); otherwise the <unk> embedding. This holds for copied words
too: a copied word of Y is fed its embedding, a generated one can only be in Y.

Output (3.2, last paragraph; 2.3). The paper gives no formula, only that the decoder "outputs a
distribution over generating words from Y, as well as over copying a specific word x_i from the
source" with an implicit gating "similar to" Gu et al. (2016). We therefore use CopyNet's
scores under one shared normaliser (CopyNet eq. 4-8): psi_g(y) = w_y^T s_t for y in Y,
psi_c(i) = tanh(W h_i^2)^T s_t for each source position, p(y) = (exp psi_g(y) [y in Y] +
sum_{i: x_i = y} exp psi_c(i)) / Z, in log space via models.seq2seq.shared_softmax (as CopyNet).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from models.attention import BahdanauAttention
from models.config import ModelConfig, parse_options
from models.extended import NEG
from models.rnn import run_rnn
from models.seq2seq import Mechanism, OutputLayer, Scores, Seq2Seq, State, at_least_fp32, shared_softmax
from models.specials import PAD, SPECIALS, UNK

CELLS = ("gru", "lstm")
SENTENCE_MODES = ("single", "opt1", "opt2")


@dataclass(frozen=True)
class ReadAgainOptions:
    cell: str = "lstm"  # gru (3.1.1, eq. 2-6) | lstm (3.1.2, eq. 7-8); Tables 3-5 use LSTM
    sentences: str = "single"  # single (3.1.1-3.1.2) | opt1 (eq. 9) | opt2 (eq. 10-11)
    sentence_end: tuple[str, ...] = (".",)  # tokens that end a sentence (3.1.3; opt1/opt2 only)
    max_sentences: int = 2  # K sentence slots of opt1/opt2 (3.1.3 and Table 1: 2 sentences)
    decoder_vocab: int | None = None  # |Y|: generate only the K most frequent ids (3.2; 2k-69k); null = V
    decoder: str = "lstm"  # lstm (eq. 12-14) | gru (the shared BahdanauDecoder)

    def __post_init__(self) -> None:
        object.__setattr__(self, "sentence_end", tuple(self.sentence_end))
        if self.cell not in CELLS:
            raise ValueError(f"read_again cell {self.cell!r}; known: {CELLS}")
        if self.sentences not in SENTENCE_MODES:
            raise ValueError(f"read_again sentences {self.sentences!r}; known: {SENTENCE_MODES}")
        if self.decoder not in CELLS:
            raise ValueError(f"read_again decoder {self.decoder!r}; known: {CELLS}")
        if self.max_sentences < 1:
            raise ValueError("read_again max_sentences must be >= 1")
        if self.decoder_vocab is not None and self.decoder_vocab <= len(SPECIALS):
            raise ValueError(f"read_again decoder_vocab {self.decoder_vocab} must exceed the {len(SPECIALS)} specials")

    @property
    def reads_source_words(self) -> bool:
        """Opt-1/Opt-2 find sentence ends by their words (``sentence_end``, 3.1.3): the batches must
        carry the source words, not only their ids."""
        return self.sentences != "single"

    @property
    def source_words(self) -> tuple[str, ...]:
        """The words it reads in a source (the sentence ends of opt1/opt2): each must be in the source
        vocabulary, or a training batch, whose words are read back from ids, sees ``<unk>`` where a
        batch of raw text (decoding, serving) sees the word."""
        return self.sentence_end if self.reads_source_words else ()


# ---------------------------------------------------------------------------------------------
# Encoder
# ---------------------------------------------------------------------------------------------
class SentenceLayout:
    """Moves a batch of sources (B, S) to one row per sentence slot (B*K, S) and back.

    ``sid`` (B, S) is each position's sentence slot in [0, K), non-decreasing along real positions.
    Position i of sentence k of example b goes to row b*K + k at its offset in the sentence.
    """

    def __init__(self, sid: torch.Tensor, mask: torch.Tensor, k: int):
        bsz, steps = sid.shape
        self.bsz, self.steps, self.k, self.mask = bsz, steps, k, mask
        pos = torch.arange(steps, device=sid.device).expand(bsz, steps)  # (B, S)
        new = torch.ones_like(mask)
        new[:, 1:] = sid[:, 1:] != sid[:, :-1]  # first position of each sentence
        start = torch.where(new, pos, torch.zeros_like(pos)).cummax(dim=1).values  # (B, S)
        # Padding goes to a trash slot k*S, dropped afterwards.
        self.dest = torch.where(mask, sid * steps + pos - start, torch.full_like(pos, k * steps))  # (B, S)
        slot = torch.where(mask, sid, torch.full_like(sid, k))  # (B, S)
        counts = torch.zeros(bsz, k + 1, dtype=torch.long, device=sid.device)
        self.lengths = counts.scatter_add(1, slot, torch.ones_like(slot))[:, :k].reshape(-1)  # (B*K,)
        self.row_mask = torch.arange(steps, device=sid.device) < self.lengths.unsqueeze(1)  # (B*K, S)

    def group(self, x: torch.Tensor) -> torch.Tensor:
        """(B, S, D) -> (B*K, S, D), zero past each sentence's end."""
        dim = x.size(-1)
        out = x.new_zeros(self.bsz, self.k * self.steps + 1, dim)
        out = out.scatter(1, self.dest.unsqueeze(-1).expand(-1, -1, dim), x)  # (B, K*S + 1, D)
        return out[:, : self.k * self.steps].reshape(self.bsz * self.k, self.steps, dim)

    def ungroup(self, y: torch.Tensor) -> torch.Tensor:
        """(B*K, S, D) -> (B, S, D), zero at padding."""
        dim = y.size(-1)
        flat = y.reshape(self.bsz, self.k * self.steps, dim)
        index = self.dest.clamp(max=self.k * self.steps - 1).unsqueeze(-1).expand(-1, -1, dim)
        return flat.gather(1, index) * self.mask.unsqueeze(-1).to(flat.dtype)


def run_packed(rnn: nn.Module, x: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A one-layer uni-directional nn.GRU / nn.LSTM over rows (N, S, D) of the given lengths.

    Returns outputs (N, S, H) (zero past the end) and the last state (N, H); empty rows get zeros.
    """
    rows, steps = x.shape[:2]
    live = (lengths > 0).nonzero().squeeze(1)  # (N',)
    packed = pack_padded_sequence(
        x.index_select(0, live), lengths.index_select(0, live).cpu(), batch_first=True, enforce_sorted=False
    )
    out, last = run_rnn(rnn, packed)
    last = last[0] if isinstance(last, tuple) else last  # LSTM: (h_n, c_n)
    out, _ = pad_packed_sequence(out, batch_first=True, total_length=steps)  # (N', S, H)
    full = out.new_zeros(rows, steps, out.size(-1)).index_copy(0, live, out)
    final = out.new_zeros(rows, out.size(-1)).index_copy(0, live, last[-1])
    return full, final


class ReadAgainEncoder(nn.Module):
    """Section 3.1: two uni-directional reads; memory h^2 (B, S, M), summary (B, M) = the last
    second-read state of the source's last sentence (h_n^2; under opt1/opt2 that read already saw
    every sentence vector through g)."""

    def __init__(self, emb: int, size: int, opts: ReadAgainOptions):
        super().__init__()
        self.cell, self.mode = opts.cell, opts.sentences
        self.k = 1 if opts.sentences == "single" else opts.max_sentences
        self.ends = frozenset(opts.sentence_end)
        self.out_dim = size
        rnn = nn.GRU if self.cell == "gru" else nn.LSTM
        self.rnn1 = rnn(emb, size, batch_first=True)  # GRU^1 (eq. 2-3) / LSTM^1 (eq. 7)
        g_dim = {"single": size, "opt1": self.k * size, "opt2": 2 * size}[self.mode]
        if self.mode == "opt2":
            self.w_global = nn.Linear(self.k * size, size)  # eq. 10: [W_r U_r ...] and v_r
        if self.cell == "gru":
            self.rnn2 = nn.GRUCell(emb, size)  # GRU^2's gates (eq. 3), applied by _gru_read_again
            self.w_e = nn.Linear(size, size, bias=False)  # eq. 5: W_e h_i^1
            self.u_e = nn.Linear(g_dim, size, bias=False)  # eq. 5: U_e h_n^1 (U_e g with several sentences)
            self.v_e = nn.Linear(emb, size, bias=False)  # eq. 5: V_e x_i
        else:
            self.rnn2 = nn.LSTM(emb + size + g_dim, size, batch_first=True)  # LSTM^2 (eq. 8, 9, 11)

    def sentence_ids(self, batch, mask: torch.Tensor) -> torch.Tensor:
        """(B, S) sentence slot of every position: the number of sentence ends before it, capped at K-1.

        Read from the batch's token strings (``batch.src_tokens``, aligned with ``batch.src``): the
        model knows no vocabulary, and token ids of "." differ between corpora.
        """
        if self.k == 1 or batch is None:
            return torch.zeros_like(mask, dtype=torch.long)
        steps = mask.size(1)
        ends = torch.tensor(
            [
                [tok in self.ends for tok in row[:steps]] + [False] * (steps - len(row[:steps]))
                for row in batch.src_tokens
            ],
            dtype=torch.long,
            device=mask.device,
        )  # (B, S)
        return (ends.cumsum(dim=1) - ends).clamp(max=self.k - 1)

    def global_vectors(self, last1: torch.Tensor) -> torch.Tensor:
        """Sentence vectors h_{n_k}^1 (B, K, M) -> the vector g each sentence's second read sees (B, K, G)."""
        bsz, k, size = last1.shape
        if self.mode == "single":
            return last1  # h_n^1 (eq. 5, 8)
        every = last1.reshape(bsz, k * size)  # [h_n^1; h_m^1; ...]
        if self.mode == "opt1":
            return every.unsqueeze(1).expand(bsz, k, k * size)  # eq. 9
        h_global = torch.tanh(self.w_global(every))  # (B, M) eq. 10
        return torch.cat([last1, h_global.unsqueeze(1).expand(bsz, k, size)], dim=-1)  # eq. 11

    def importance(self, h1: torch.Tensor, g: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """alpha_i = tanh(W_e h_i^1 + U_e h_n^1 + V_e x_i) (eq. 5): (N, S, M), (N, G), (N, S, E) -> (N, S, M)."""
        return torch.tanh(self.w_e(h1) + self.u_e(g).unsqueeze(1) + self.v_e(x))

    def _gru_read_again(self, x: torch.Tensor, alpha: torch.Tensor, row_mask: torch.Tensor):
        """eq. 6 step by step: h_i^2 = (1 - alpha_i z_i) h_{i-1}^2 + alpha_i z_i h~_i^2.

        GRU^2's gates are torch's GRUCell's (the paper's update gate z_i is 1 - torch's), so with
        alpha = 1 this is exactly nn.GRUCell (eq. 4). x (N, S, E), alpha (N, S, M), row_mask (N, S).
        """
        cell = self.rnn2
        gi = F.linear(x, cell.weight_ih, cell.bias_ih)  # (N, S, 3M) input parts of r, z, h~ at once
        h = gi.new_zeros(x.size(0), self.out_dim)  # h_0^2 = 0 (eq. 9)
        outs = []
        for i in range(x.size(1)):
            gh = F.linear(h, cell.weight_hh, cell.bias_hh)  # (N, 3M)
            i_r, i_z, i_n = gi[:, i].chunk(3, dim=-1)
            h_r, h_z, h_n = gh.chunk(3, dim=-1)
            r = torch.sigmoid(i_r + h_r)  # reset gate r_i
            z = 1.0 - torch.sigmoid(i_z + h_z)  # update gate z_i (paper's convention, eq. 3)
            cand = torch.tanh(i_n + r * h_n)  # h~_i^2
            gate = alpha[:, i] * z  # alpha_i * z_i
            h_new = (1.0 - gate) * h + gate * cand  # eq. 6
            h = torch.where(row_mask[:, i : i + 1], h_new, h)  # padding keeps the state
            outs.append(h)
        out = torch.stack(outs, dim=1) * row_mask.unsqueeze(-1).to(h.dtype)  # (N, S, M)
        return out, h

    def forward(self, embedded: torch.Tensor, lengths: torch.Tensor, batch=None) -> tuple[torch.Tensor, torch.Tensor]:
        """embedded (B, S, E), lengths (B,) -> memory h^2 (B, S, M), summary (B, M)."""
        bsz, steps, _ = embedded.shape
        lengths = lengths.to(embedded.device)
        mask = torch.arange(steps, device=embedded.device) < lengths.unsqueeze(1)  # (B, S)
        sid = self.sentence_ids(batch, mask)  # (B, S)
        layout = SentenceLayout(sid, mask, self.k)
        x = layout.group(embedded)  # (N, S, E), N = B*K, one row per sentence slot
        h1, last1 = run_packed(self.rnn1, x, layout.lengths)  # (N, S, M), (N, M): first read
        g = self.global_vectors(last1.view(bsz, self.k, -1)).reshape(bsz * self.k, -1)  # (N, G)
        if self.cell == "gru":
            h2, last2 = self._gru_read_again(x, self.importance(h1, g, x), layout.row_mask)
        else:
            g_seq = g.unsqueeze(1).expand(-1, steps, -1).to(h1.dtype)  # (N, S, G)
            h2, last2 = run_packed(self.rnn2, torch.cat([x.to(h1.dtype), h1, g_seq], dim=-1), layout.lengths)
        memory = layout.ungroup(h2)  # (B, S, M)
        last_sid = sid.gather(1, (lengths - 1).clamp_min(0).unsqueeze(1)).squeeze(1)  # (B,)
        summary = last2.view(bsz, self.k, -1)[torch.arange(bsz, device=sid.device), last_sid]  # (B, M)
        return memory, summary


# ---------------------------------------------------------------------------------------------
# Decoder and output layer
# ---------------------------------------------------------------------------------------------
class ReadAgainDecoder(nn.Module):
    """eq. 12-14: attend with s_{t-1} (additive), then s_t = LSTM([y_{t-1}; c_t], s_{t-1})."""

    def __init__(self, in_dim: int, hidden: int, memory_dim: int):
        super().__init__()
        self.out_dim, self.context_dim = hidden, memory_dim
        self.bridge = nn.Linear(memory_dim, hidden)  # s_0 = tanh(W h_n^2 + b) (not in the paper)
        self.attention = BahdanauAttention(hidden, memory_dim, hidden)  # eq. 14: v_a, W_a, U_a
        self.cell = nn.LSTMCell(in_dim + memory_dim, hidden)
        self.static_keys = frozenset({"keys"})

    def init_state(self, memory: torch.Tensor, summary: torch.Tensor, mask: torch.Tensor) -> State:
        s0 = torch.tanh(self.bridge(summary))  # (B, H)
        return {"s": s0, "cell": torch.zeros_like(s0), "keys": self.attention.keys(memory)}

    def forward(self, state: State, x: torch.Tensor):
        """x (B, In) -> s_t (B, H), c_t (B, M), beta_t (B, S), state updates."""
        context, weights = self.attention(state["s"], state["keys"], state["memory"], state["src_mask"])  # eq. 13-14
        s_t, cell = self.cell(torch.cat([x, context], dim=-1), (state["s"], state["cell"]))  # eq. 12
        return s_t, context, weights, {"s": s_t, "cell": cell}


class ShortlistEmbedding(nn.Embedding):
    """The decoder's word embeddings, one row per word of Y (the first K ids); any other id is
    embedded as <unk> (eq. 15's fallback; ReadAgainOutput.embed_input replaces source words by p_i)."""

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return super().forward(ids.masked_fill(ids >= self.num_embeddings, UNK))


class ReadAgainOutput(OutputLayer):
    """Generate over Y plus copy over source positions, one normaliser (see the module docstring)."""

    can_copy = True
    static_keys = frozenset({"copy_keys", "oov_emb"})

    def __init__(self, cfg: ModelConfig, decoder_vocab: int, memory_dim: int):
        super().__init__()
        self.vocab, self.k = cfg.tgt_vocab, decoder_vocab
        self.shortlist = decoder_vocab if decoder_vocab < cfg.tgt_vocab else None
        self.w_o = nn.Linear(cfg.hidden, decoder_vocab, bias=False)  # psi_g over Y (CopyNet eq. 7)
        self.w_copy = nn.Linear(memory_dim, cfg.hidden, bias=False)  # psi_c (CopyNet eq. 8)
        self.w_c = nn.Linear(memory_dim, cfg.emb)  # eq. 15: W_c, b_c

    def init_state(self, state: State) -> State:
        memory = state["memory"]  # (B, S, M)
        return {
            "copy_keys": torch.tanh(self.w_copy(memory)),  # (B, S, H)
            "oov_emb": torch.tanh(self.w_c(memory)),  # (B, S, E): p_i = tanh(W_c h_i^2 + b_c), eq. 15
        }

    def embed_input(self, state: State, prev_ids: torch.Tensor, emb: torch.Tensor) -> torch.Tensor:
        """eq. 15: y_{t-1} outside Y but found in the source -> p_i at its first source position."""
        match = (state["src_ext"] == prev_ids.unsqueeze(1)) & state["src_mask"]  # (B, S)
        match = match & (prev_ids >= self.k).unsqueeze(1)  # words of Y keep their embedding
        first = match.int().argmax(dim=1)  # (B,) index of the first match (0 when none)
        p = state["oov_emb"][torch.arange(prev_ids.size(0), device=prev_ids.device), first]  # (B, E)
        return torch.where(match.any(dim=1, keepdim=True), p.to(emb.dtype), emb)

    def score_all(self, s: torch.Tensor, context: torch.Tensor, view: State) -> Scores:
        gen = self.project(s, self.w_o)  # (B, T, K) psi_g over Y, <pad> and <s> at NEG; float32 under autocast
        gen = torch.cat([gen, gen.new_full((*gen.shape[:-1], self.vocab - self.k), NEG)], dim=-1)  # (B, T, V)
        copy = at_least_fp32(torch.matmul(s, view["copy_keys"].transpose(1, 2)))  # (B, T, S) psi_c
        copy = copy.masked_fill(~view["src_mask"].unsqueeze(1), NEG)
        return shared_softmax(gen, copy)  # one normaliser over Y and the source (CopyNet eq. 4-6)

    def step_updates(self, scores: Scores) -> State:
        return {"copy_logp": scores.copy_log_probs().squeeze(1)}  # (B, S)


def build_read_again(cfg: ModelConfig) -> Seq2Seq:
    """Read-Again encoder (3.1) + LSTM attention decoder with copy and OOV embeddings (3.2)."""
    opts = parse_options(ReadAgainOptions, cfg.options, "read_again")
    if cfg.encoder != "bigru":
        raise ValueError(
            f"read_again has its own encoder (section 3.1); model.encoder {cfg.encoder!r} "
            "cannot apply (leave it at 'bigru')"
        )
    if cfg.decoder != "recurrent":
        raise ValueError(
            f"read_again has its own decoder (section 3.2, eq. 12-15: an LSTM fed the copied word's source "
            f"state); model.decoder {cfg.decoder!r} cannot apply (leave it at 'recurrent', or drop read_again "
            "from the mechanisms of a transformer-decoder run)"
        )
    k = min(opts.decoder_vocab or cfg.tgt_vocab, cfg.tgt_vocab)
    encoder = ReadAgainEncoder(cfg.emb, cfg.memory, opts)
    output = ReadAgainOutput(cfg, k, encoder.out_dim)
    decoder = ReadAgainDecoder(cfg.emb, cfg.hidden, encoder.out_dim) if opts.decoder == "lstm" else None
    return Seq2Seq(
        cfg,
        output,
        attention=True,
        encoder=encoder,
        decoder=decoder,
        tgt_emb=ShortlistEmbedding(k, cfg.emb, padding_idx=PAD),
    )


MECHANISMS = (
    Mechanism(
        "read_again",
        "Read-Again + copy",
        build_read_again,
        options=ReadAgainOptions,
        variants=(
            {},
            {"cell": "gru", "sentences": "opt1", "decoder": "gru"},
            {"cell": "lstm", "sentences": "opt2", "decoder_vocab": 7},
        ),
        # decoders: the default, recurrent only: its own LSTM decoder (eq. 12-15); the transformer is refused
    ),
)
