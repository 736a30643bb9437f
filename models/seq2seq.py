"""The shared encoder-decoder skeleton; a mechanism is its output layer (the plug-in seam), plus,
where its paper says so, its own encoder or decoder recurrence.

One decoding step, for every mechanism:
  x_t = [e(y_{t-1}); extra(y_{t-1})]     e: the embedding, which an output layer may replace for
                                         copied words (Read-Again eq. 15); extra: e.g. CopyNet's
                                         selective read zeta(y_{t-1}) (eq. 9); with features, e + f
                                         (see "Features" below)
  s_t, c_t, a_t = decoder(x_t, state)    Bahdanau: attend with s_{t-1}, then GRU (CopyNet eq. 2-3);
                                         Luong: LSTM, then attend with s_t (WEAN);
                                         ``model.decoder: transformer``: causal self-attention over
                                         x_1..x_t, cross-attention; a_t its alignment head
                                         (models/transformer_decoder.py)
  log p(y_t | .) over the extended vocabulary = output_layer(s_t, c_t, state + {"attn": a_t})

``step(state, prev_ids) -> (log_probs_ext, state)`` is the one interface that greedy and beam
search use. The state is a flat dict whose tensors all have the batch (or batch x beam) as first
dimension; search reorders it with ``index_select`` on dim 0.

Teacher forcing runs in two phases (``forward``), as OpenNMT-py applies its generator to all steps
at once:
  1. the recurrence over the gold prefix, keeping only what feeds back into it (``teacher_forced``):
     s_t, c_t, a_t and x_t for every t. CopyNet's selective read needs the copy scores of step t-1,
     and only up to a per-row constant (eq. 9 normalises rho over the matching positions, so the
     shared normaliser Z cancels): ``OutputLayer.feedback`` gives it without the vocabulary-wide
     projection. The Luong decoder (WEAN, Seq2seq) has no input feeding and runs ``nn.LSTM`` over
     the whole target at once (``LuongDecoder.forward_sequence``), and the transformer decoder runs it
     in one pass too (its coverage included; CopyNet's selective read steps through its cache).
  2. the output layer on all B x T positions at once (``OutputLayer.score_all``: one (B*T, H) x (H, V)
     product instead of T small ones), and the per-token objective read off the scores at the gold
     ids (``OutputLayer.sequence_gold``) without building the (B, T, V + X) distribution.
``forward(batch, stepwise=True)`` is the previous, one-step-at-a-time teacher forcing (``step`` for
every position, output layer included); the tests check that both give the same log-likelihoods and
gradients, and ``benchmarks/bench_mechanisms.py --modes stepwise two-phase`` compares their speed.

Every output layer describes its distribution by ``Scores`` in log space:
  log p(w) = logaddexp(gen_shift + gen[w], copy_shift + logsumexp_{j: x_j = w} copy[j])
over the extended vocabulary (gen covers V; the copy term covers source words, OOVs included). Two
readers serve every mechanism: ``extended_log_probs`` (the whole distribution, for search) and
``gold_log_probs`` (the gold entries only, for training).

Training maximises, per target token, the output layer's objective (default: log p(y_t), CopyNet
eq. 10); a mechanism whose paper trains another per-step objective overrides it (Pointer
Softmax: log p(y_t, z_t), with the switch z_t observed; coverage: minus the coverage penalty).
Validation (eval mode) always scores log p(y_t), the same quantity for every mechanism.

Features (``cfg.features_vocab`` > 0: tags kept apart from the source, e.g. ``V;PST;3;SG`` for an
inflection, the batch's ``features`` (B, F)): their own embedding table, mean over the tags
(``encode_features``), f = W_f mean + b_f projected to the target embedding's width, and added to the
decoder input at every step: x_t = [e(y_{t-1}) + f; extra(y_{t-1})] (``decoder_input``; after a
mechanism's own input embedding, so Read-Again's eq. 15 input p_i carries it too). Every recurrent
decoder also starts from them: W_s mean is added to the encoder summary it makes
s_0 = tanh(W summary) from; the transformer decoder has no initial state, its first input e(<s>) + f
is its start. Both: with either alone CopyNet learned less from 300 examples
(docs/experiments/features/features_vs_tags.md). The source, the copy scores and the extended vocabulary never see them, so no
mechanism can copy a tag. With ``features_vocab`` 0 no module, parameter or random draw is added and
every computation is the one without features.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field, fields

import torch
from torch import nn
from torch.nn import functional as F
from torch.optim.optimizer import register_optimizer_step_post_hook

from models.config import ModelConfig, NoOptions, parse_options
from models.decoder import BahdanauDecoder
from models.encoder import make_encoder
from models.extended import (
    NEG,
    extended_log_probs,
    gold_log_probs,
    shared_normaliser,
)
from models.graphed import GraphedRecurrence
from models.specials import BOS, PAD, UNK
from models.transformer_decoder import recurrent_or_transformer

State = dict[str, torch.Tensor | int]


# Optimizer steps taken in this process, by any optimizer, since ``count_optimizer_steps`` first ran:
# what invalidates the output layers' inference copies of their weights (OutputLayer._inference_copy).
_optimizer_steps = [0]
_step_hook_lock = threading.Lock()
_step_hook = []  # the torch.optim hook's handle, once registered


def _count_optimizer_step(optimizer, args, kwargs) -> None:
    _optimizer_steps[0] += 1


def count_optimizer_steps() -> None:
    """From now on, count every optimizer step of this process in ``_optimizer_steps`` (a global post-step
    hook of torch.optim, ``register_optimizer_step_post_hook``); idempotent: the hook is registered once.

    Why: ``OutputLayer._inference_copy`` keeps copies of the output weights between calls, and must
    remake them when the weights change. A fused optimizer (Adam with fused=True, the training loop's)
    writes the weights without moving their version counters, so only a count of steps tells. The
    copies call this before they read the count for the first time, so importing ``models`` registers
    nothing, and nobody else has to call it: a step taken before the first copy invalidates no copy.
    The hook only counts; it changes no weight and no result."""
    if _step_hook:
        return
    with _step_hook_lock:
        if not _step_hook:
            _step_hook.append(register_optimizer_step_post_hook(_count_optimizer_step))


# Search steps of 2 to PACKED_ROWS rows (a beam of one sentence) multiply by MKL's packed output
# weight (OutputLayer.project); above it the packing saves nothing (64 rows: 9.5-11 ms either way).
PACKED_ROWS = 24


def packed_product_usable(rows: torch.Tensor, weight: torch.Tensor) -> bool:
    """MKL's packed-weight product applies: float32 on the CPU, no autocast, a PyTorch built with MKL."""
    return (
        rows.device.type == "cpu"
        and rows.dtype == weight.dtype == torch.float32
        and not torch.is_autocast_enabled("cpu")
        and torch.backends.mkl.is_available()
        and hasattr(torch.ops.mkl, "_mkl_linear")
    )


@dataclass
class Scores:
    """An output layer's log-space scores at every position of (B, T) (T = 1 for one search step).

    log p(w) = logaddexp(gen_shift + gen[w], copy_shift + logsumexp_{j: x_j = w} copy[j]); shifts
    hold the mixture weights (and CopyNet's shared normaliser), so the (B, T, V) ``gen`` is never
    rewritten for them. A softmax over V is given normalised (``torch.log_softmax``): it keeps full
    precision for large logits, which a float32 logsumexp subtracted afterwards would not.
    """

    gen: torch.Tensor  # (B, T, V) generate-mode scores, NEG where a word cannot be generated
    gen_shift: torch.Tensor | None = None  # (B, T, 1); None: 0 (gen is already log p)
    copy: torch.Tensor | None = None  # (B, T, S) copy scores per source position, NEG at padding
    copy_shift: torch.Tensor | None = None  # (B, T, 1)
    parts: dict = field(default_factory=dict)  # the mechanism's own (B, T, ...) quantities

    def gen_log_probs(self) -> torch.Tensor:
        return self.gen if self.gen_shift is None else self.gen + self.gen_shift  # (B, T, V)

    def copy_log_probs(self) -> torch.Tensor | None:
        return None if self.copy is None else self.copy + self.copy_shift  # (B, T, S)


def at_least_fp32(x: torch.Tensor) -> torch.Tensor:
    """bf16/fp16 (autocast) -> float32; float32 and float64 unchanged. Output-layer scores go through
    it: logsumexp and scatter of a normaliser must not be quantised to bf16."""
    return x.float() if x.dtype in (torch.bfloat16, torch.float16) else x


def gather_last(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """x[..., index[...]]: (..., N), (...) long -> (...)."""
    return x.gather(-1, index.unsqueeze(-1)).squeeze(-1)


class OutputLayer(nn.Module):
    """Plug-in seam. Subclasses implement ``score_all`` on (B, T, ...) tensors; one search step is T = 1."""

    extra_input_dim: int = 0  # size of an extra decoder input fed with e(y_{t-1}) (0: none)
    can_copy: bool = False  # False: an OOV target is only reachable as <unk> (its gold id becomes UNK)
    reads_pointers: bool = False  # trains on the batch's pointer annotations (tgt_pointer, tgt_switch) when given
    # False: what ``step`` gives search in eval mode ranks by another score than log p (Pointer Softmax's
    # ``decode: max``: the best derivation), so it sums to at most 1; log p(y) is still ``step_log_likelihood``.
    scores_are_probabilities: bool = True
    shortlist: int | None = None  # generate only ids < shortlist (None: all of V); the rest are copied or <unk>
    static_keys: frozenset[str] = frozenset()  # state keys fixed per source (never change while decoding)
    # Decoder-state keys (B, S) that ``score_all`` reads per step, as they were *before* the step's
    # update (coverage c^t): teacher forcing stacks them to (B, T, S) under the same name.
    sequence_keys: tuple[str, ...] = ()
    # A copying layer keeps "copy_logp" (B, S) in its step updates: log p(copy x_j at step t), the
    # copy-mode probabilities the Figure 3-style heat map draws (else the attention is drawn).

    def init_state(self, state: State) -> State:
        """Keys this layer keeps in the decoder state (computed once per source)."""
        return {}

    def embed_input(self, state: State, prev_ids: torch.Tensor, emb: torch.Tensor) -> torch.Tensor:
        """The decoder's input embedding of y_{t-1}, (B, E); default: the word embedding."""
        return emb

    def extra_input(self, state: State, prev_ids: torch.Tensor) -> torch.Tensor | None:
        return None

    def feedback(self, s_t: torch.Tensor, state: State) -> State:
        """What the next decoder input needs from s_t (B, H) during teacher forcing (CopyNet's copy
        scores); computed without the vocabulary-wide output layer. Default: nothing."""
        return {}

    def score_all(self, s: torch.Tensor, context: torch.Tensor, view: State) -> Scores:
        """s (B, T, H), c (B, T, M), view: the static state plus "x" (B, T, In), "attn" (B, T, S)
        when the decoder attends, and the ``sequence_keys`` (B, T, S) -> Scores."""
        raise NotImplementedError

    def distribution(self, scores: Scores, view: State) -> torch.Tensor:
        """log p over the extended vocabulary V + X, (B, T, V + X), as search ranks it."""
        return extended_log_probs(
            scores.gen,
            scores.gen_shift,
            scores.copy,
            scores.copy_shift,
            view.get("src_ext"),
            view["n_ext"],
            view.get("src_same"),
        )

    def step_updates(self, scores: Scores) -> State:
        """State entries a search step keeps from its (T = 1) scores, (B, ...) each."""
        return {}

    def forward(self, s_t: torch.Tensor, context: torch.Tensor, state: State) -> tuple[torch.Tensor, State]:
        """One step: s_t (B, H), c_t (B, M), state (with this step's decoder input "x_t" (B, In) and
        attention "attn" (B, S) when the decoder attends) -> log p over V + X (B, V + X), updates."""
        view = {**state, "x": state["x_t"].unsqueeze(1)} if "x_t" in state else dict(state)
        for key in ("attn", *self.sequence_keys):
            if key in state:
                view[key] = state[key].unsqueeze(1)  # (B, 1, S)
        scores = self.score_all(s_t.unsqueeze(1), context.unsqueeze(1), view)
        return self.distribution(scores, view).squeeze(1), self.step_updates(scores)

    def gold_score(self, log_probs: torch.Tensor, state: State, target: torch.Tensor, t: int, batch) -> torch.Tensor:
        """Per-example training objective of step t (maximised) from the step's distribution and
        state (stepwise teacher forcing): log p(y_t), (B,)."""
        return gather_last(log_probs, target)

    def step_log_likelihood(self, log_probs: torch.Tensor, state: State, target: torch.Tensor) -> torch.Tensor:
        """log p(y_t) (B,) from one step's distribution and state (stepwise validation)."""
        return gather_last(log_probs, target)

    def sequence_gold(self, scores: Scores, view: State, target: torch.Tensor, batch, objective: bool) -> torch.Tensor:
        """Per-token objective (B, T) from the scores of all steps: ``objective`` True: the training
        objective (default log p(y_t), CopyNet eq. 10); False: log p(y_t)."""
        return gold_log_probs(
            scores.gen, scores.gen_shift, scores.copy, scores.copy_shift, view["src_ext"], view["src_mask"], target
        )

    def unemittable_bias(self, size: int, like: torch.Tensor) -> torch.Tensor:
        """(size,) 0, or NEG for <pad>, <s> and words past the shortlist: added to scores over V, it
        takes them out of any normaliser. Folded into the output projection's bias (one addmm), it
        costs no pass over (B, T, V) and nothing in the backward pass."""
        bias = like.new_zeros(size)
        bias[PAD] = NEG
        bias[BOS] = NEG
        if self.shortlist is not None:
            bias[self.shortlist :] = NEG
        return bias

    def project(self, x: torch.Tensor, linear: nn.Linear) -> torch.Tensor:
        """linear(x) with the unemittable words at NEG, in at least float32: (..., In) -> (..., V).

        Without gradients (search, validation) the product reads copies of the weight kept between
        calls (:meth:`_inference_copy`), because a search step multiplies a few rows by the whole
        (V, In) weight and plain GEMM re-packs that weight on every call (at V = 16,000, one thread,
        measured in benchmarks/bench_vs_onmt.py's setting):
        - one row, or more than ``PACKED_ROWS``: the transposed weight (In, V) contiguous, which MKL
          streams 2-4x faster than F.linear's layout (one row: 1.0-1.9 ms against 3.9-4.2);
        - 2 to ``PACKED_ROWS`` rows (a beam of one sentence: 10), MKL's packed-weight product
          (``cblas_sgemm_pack`` once, ``cblas_sgemm_compute`` per call; PyTorch's ``mkl._mkl_linear``,
          what its graph-freezing passes use): ten rows 2.8-2.9 ms against 5.3-5.9 for the
          transposed product (at 50,000: 10.7 against 19.1). Under the math pins it gives the same
          bits on every simulated machine (benchmarks/bench_math_pins.py), and
          ``pipeline.runtime.math_check`` compares its ``matmul_packed`` fingerprint with the
          reference machine's.
        Values equal F.linear's to float32 rounding, not bit for bit; every search and validation
        reads them, so they are what the pins make the same on every machine."""
        if torch.is_grad_enabled():
            bias = self.unemittable_bias(linear.out_features, linear.weight)
            return at_least_fp32(F.linear(x, linear.weight, bias if linear.bias is None else linear.bias + bias))
        rows = x.reshape(-1, x.size(-1))  # (N, In)
        n = rows.size(0)
        if 2 <= n <= PACKED_ROWS and packed_product_usable(rows, linear.weight):
            packed, bias = self._inference_copy(linear, packed_rows=n)
            out = torch.ops.mkl._mkl_linear(rows, packed, linear.weight, bias, n)  # (N, V)
        else:
            weight_t, bias = self._inference_copy(linear)  # (In, V), (V,)
            out = torch.addmm(bias, rows, weight_t)  # (N, V)
        return at_least_fp32(out.view(*x.shape[:-1], out.size(-1)))

    def _inference_copy(self, linear: nn.Linear, packed_rows: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """(weight^T contiguous (In, V), bias with the unemittable words at NEG (V,)) of ``linear``;
        with ``packed_rows`` N, (MKL's packed weight for N-row products, the same bias). Kept between
        calls and made again when the weights may have changed: another weight tensor, a version
        counter moved (an in-place write, ``load_state_dict``), any optimizer's step since
        (``_optimizer_steps``: a fused optimizer writes without moving the version counter), or the
        layer put in training mode. Transposing costs 15-20 ms at V = 16,000 and packing about 20
        (65 at 50,000), so a copy made per search would cost a one-sentence search more than it
        saves. One packed copy is kept, for the last N (2.5x the weight's memory)."""
        count_optimizer_steps()  # from the first copy on, every step counts (once registered: a no-op)
        weight, bias = linear.weight, linear.bias
        key = (
            weight._version,
            None if bias is None else bias._version,
            _optimizer_steps[0],
            weight.device,
            weight.dtype,
        )
        held = self._inference_copies.get(id(linear))
        if held is None or held[0] is not weight or held[1] != key:
            with torch.no_grad():
                full = self.unemittable_bias(linear.out_features, weight)
                if bias is not None:
                    full = bias + full
                held = [weight, key, weight.t().contiguous(), full, None]  # then (N, packed weight)
            self._inference_copies[id(linear)] = held
        if not packed_rows:
            return held[2], held[3]
        packed = held[4]  # read once: a concurrent search may replace it with another N's
        if packed is None or packed[0] != packed_rows:
            packed = (packed_rows, torch.ops.mkl._mkl_reorder_linear_weight(weight.detach(), packed_rows))
            held[4] = packed
        return packed[1], held[3]

    @property
    def _inference_copies(self) -> dict:
        return self.__dict__.setdefault("_inference_copies_dict", {})

    def train(self, mode: bool = True):
        self._inference_copies.clear()  # training is about to change the weights
        return super().train(mode)

    def project_gold(self, x: torch.Tensor, linear: nn.Linear, target: torch.Tensor) -> torch.Tensor | None:
        """``self.project(x, linear)`` at the ids ``target`` (clamped to V - 1), (B, T), computed from the
        target words' rows of the weight (B*T dot products of size H) instead of read from the (B, T, V)
        scores: then nothing but the normaliser reads those scores, and their gradient is one dense
        tensor instead of the normaliser's plus a scattered one added to it (a pass and a zero-filled
        (B, T, V) tensor saved per step). None under autocast, whose lower-precision product the
        dot products would not reproduce: the caller then gathers from the scores."""
        if torch.is_autocast_enabled(x.device.type):
            return None
        ids = target.clamp(max=linear.out_features - 1)  # (B, T)
        bias = self.unemittable_bias(linear.out_features, linear.weight)
        if linear.bias is not None:
            bias = linear.bias + bias
        rows = F.embedding(ids, linear.weight)  # (B, T, H) the target words' weight rows
        return torch.einsum("bth,bth->bt", x, rows) + bias[ids]  # (B, T)

    def mask_unemittable(self, scores: torch.Tensor) -> torch.Tensor:
        """scores (..., V) with <pad>, <s> and words past the shortlist at NEG (see ``unemittable_bias``)."""
        return scores + self.unemittable_bias(scores.size(-1), scores)


def shared_softmax(gen: torch.Tensor, copy: torch.Tensor) -> Scores:
    """CopyNet eq. 4-6: generate scores (B, T, V) and copy scores (B, T, S) under one normaliser
    log Z = log(sum_v exp(psi_g(v)) + sum_j exp(psi_c(x_j))), kept as both modes' shift."""
    log_z = shared_normaliser(gen, copy)  # (B, T, 1)
    return Scores(gen, -log_z, copy, -log_z)


def _refuse_start_only_features(module, state_dict, prefix, *args) -> None:
    """Load pre-hook of a model with features: a checkpoint written before the features entered every
    decoder step (its one projection ``features_proj``) is refused in one line naming the mismatch, not
    in the state dict's list of missing and unexpected keys."""
    if f"{prefix}features_proj.weight" in state_dict:
        raise RuntimeError(
            "the checkpoint conditions only the decoder's start on the features (its features_proj), this code "
            "conditions every decoder step (features_in): retrain the model"
        )


class Seq2Seq(nn.Module):
    # State entries that depend on the source only: beam search never needs to reorder them,
    # because a beam's hypotheses always share their source.
    STATIC_KEYS = frozenset({"memory", "src_mask", "src_ext", "src_same", "n_ext", "features"})

    def __init__(
        self,
        cfg: ModelConfig,
        output_layer: OutputLayer,
        attention: bool = True,
        encoder: nn.Module | None = None,
        decoder: nn.Module | None = None,
        tgt_emb: nn.Embedding | None = None,
    ):
        super().__init__()
        self.cfg = cfg
        self.src_emb = nn.Embedding(cfg.src_vocab, cfg.emb, padding_idx=PAD)
        self.tgt_emb = tgt_emb if tgt_emb is not None else nn.Embedding(cfg.tgt_vocab, cfg.emb, padding_idx=PAD)
        self.encoder = encoder if encoder is not None else make_encoder(cfg)
        if decoder is None:
            in_dim = self.tgt_emb.embedding_dim + output_layer.extra_input_dim
            decoder = recurrent_or_transformer(
                cfg,
                lambda: BahdanauDecoder(in_dim, cfg.hidden, self.encoder.out_dim, attention),
                in_dim,
                self.encoder.out_dim,
                attention,
            )
        self.decoder = decoder
        self.output = output_layer
        self.static_state_keys = self.STATIC_KEYS | self.decoder.static_keys | output_layer.static_keys
        self.drop = nn.Dropout(cfg.dropout)
        # Features last: every other parameter draws the initial values it draws without them.
        if cfg.features_vocab:
            self.features_emb = nn.Embedding(cfg.features_vocab, cfg.emb, padding_idx=PAD)
            if cfg.decoder != "transformer":  # the transformer decoder has no s_0: its start is e(<s>) + f
                self.features_start = nn.Linear(cfg.emb, self.encoder.out_dim)  # W_s: the summary's width M
            self.features_in = nn.Linear(cfg.emb, self.tgt_emb.embedding_dim)  # W_f: every step's input, E
            self.register_load_state_dict_pre_hook(_refuse_start_only_features)

    def encode_features(self, batch) -> torch.Tensor | None:
        """The batch's features (B, F) -> the mean of their embeddings (B, E_f), which ``encode`` projects;
        None for a model without features. A batch and a model that disagree on having features is an
        error."""
        ids = getattr(batch, "features", None)  # (B, F) or None
        if not self.cfg.features_vocab:
            if ids is not None:
                raise ValueError("the batch carries features but the model was built without (features_vocab 0)")
            return None
        if ids is None:
            raise ValueError(
                f"the model reads features (features_vocab {self.cfg.features_vocab}) but the batch has none: "
                "batch the rows with the task's features.vocab"
            )
        count = (ids != PAD).sum(dim=1, keepdim=True).clamp(min=1)  # (B, 1); no tags: the mean is 0
        return self.features_emb(ids).sum(dim=1) / count  # (B, E_f): <pad> embeds as 0

    def encode(self, batch) -> State:
        mask = batch.src != PAD  # (B, S)
        memory, summary = self.encoder(self.drop(self.src_emb(batch.src)), batch.src_len, batch)  # (B, S, M), (B, M)
        tags = self.encode_features(batch)  # (B, E_f) or None
        if tags is not None and hasattr(self, "features_start"):
            summary = summary + self.features_start(tags)  # (B, M): s_0 = tanh(W summary) starts conditioned
        state: State = {
            "memory": memory,
            "src_mask": mask,
            "src_ext": batch.src_ext,
            # (B, S, S) positions holding the same word: every search step's copy merge reads it
            "src_same": batch.src_ext.unsqueeze(2) == batch.src_ext.unsqueeze(1),
            "n_ext": batch.n_ext,
        }
        if tags is not None:
            state["features"] = self.features_in(tags)  # (B, E): f, added to every decoder input by decoder_input
        state.update(self.decoder.init_state(memory, summary, mask))
        state.update(self.output.init_state(state))
        return state

    def embed(self, prev_ids: torch.Tensor) -> torch.Tensor:
        """e(y) for extended ids of any shape (...) -> (..., E); an id outside V is embedded as <unk>."""
        return self.tgt_emb(prev_ids.masked_fill(prev_ids >= self.cfg.tgt_vocab, UNK))

    def decoder_input(self, state: State, prev_ids: torch.Tensor, emb: torch.Tensor | None = None) -> torch.Tensor:
        """x_t (B, E + extra) from y_{t-1} (B,) extended ids, dropout applied; ``emb``: e(y_{t-1}) (B, E)
        when the caller looked it up already (teacher forcing looks up all steps at once: one
        embedding backward instead of one dense (V, E) gradient per step)."""
        emb = self.embed(prev_ids) if emb is None else emb
        inputs = [self.output.embed_input(state, prev_ids, emb)]  # (B, E)
        if "features" in state:  # the features' f, at every step
            inputs[0] = inputs[0] + state["features"]  # (B, E)
        extra = self.output.extra_input(state, prev_ids)
        if extra is not None:
            inputs.append(extra)
        return self.drop(torch.cat(inputs, dim=-1))

    def step(self, state: State, prev_ids: torch.Tensor) -> tuple[torch.Tensor, State]:
        """prev_ids (B,) extended ids of y_{t-1} -> log p(y_t) (B, V + X), next state."""
        x_t = self.decoder_input(state, prev_ids)  # (B, E + extra)
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
            in_src = ((target.unsqueeze(2) == batch.src_ext.unsqueeze(1)) & (batch.src_ext != PAD).unsqueeze(1)).any(
                dim=2
            )  # (B, T)
            unreachable = unreachable & ~in_src
        return target.masked_fill(unreachable, UNK)

    def teacher_forced(self, state: State, tgt_in: torch.Tensor) -> State:
        """Phase 1: the decoder recurrence over the gold prefix (B, T), without the output layer.

        Returns the view ``OutputLayer.score_all`` reads: the static state plus "s" (B, T, H) (dropout
        applied, as the output layer sees it), "context" (B, T, M), "x" (B, T, In), "attn" (B, T, S)
        when the decoder attends, and the output layer's ``sequence_keys`` (B, T, S).
        """
        emb = self.embed(tgt_in)  # (B, T, E): e(y_0) .. e(y_{T-1}) in one lookup
        whole = getattr(self.decoder, "forward_sequence", None)
        given = set(getattr(self.decoder, "sequence_keys", ()))  # what forward_sequence gives per step
        if whole is not None and not self.output.extra_input_dim and set(self.output.sequence_keys) <= given:
            # No input feeding and nothing fed back: x_1..x_T are known up front (the Luong and the
            # transformer decoders; the transformer's coverage comes with its pass).
            x = torch.stack([self.decoder_input(state, tgt_in[:, t], emb[:, t]) for t in range(tgt_in.size(1))], dim=1)
            s, context, attn, *more = whole(state, x)  # (B, T, H), (B, T, M), (B, T, S)
            view = {**state, "s": self.drop(s), "context": context, "x": x, **(more[0] if more else {})}
            if attn is not None:
                view["attn"] = attn
            return view
        graphed = self.__dict__.get("_graphed")
        if graphed is not None and self.training and torch.is_grad_enabled() and tgt_in.is_cuda:
            return graphed(state, tgt_in, emb)
        return self.step_through(state, tgt_in, emb)

    def step_through(self, state: State, tgt_in: torch.Tensor, emb: torch.Tensor) -> State:
        """Phase 1 one step at a time (a decoder with input feeding, or an output layer that feeds
        back): gold prefix (B, T) and its embeddings (B, T, E) -> the view :meth:`teacher_forced` returns.
        :meth:`graph_recurrence` replays it from CUDA graphs."""
        steps: dict[str, list[torch.Tensor]] = {
            key: [] for key in ("s", "context", "attn", "x", *self.output.sequence_keys)
        }
        for t in range(tgt_in.size(1)):
            for key in self.output.sequence_keys:
                steps[key].append(state[key])  # before this step's update (e.g. coverage c^t)
            # Contiguous copies: a step's slice of (B, T) would differ from the next in storage offset,
            # which a compiled teacher_step would guard on.
            x_t, s_t, context, weights, state = self.teacher_step(
                state, tgt_in[:, t].contiguous(), emb[:, t].contiguous()
            )
            steps["s"].append(s_t)
            steps["context"].append(context)
            steps["x"].append(x_t)
            if weights is not None:
                steps["attn"].append(weights)
        return {**state, **{key: torch.stack(seq, dim=1) for key, seq in steps.items() if seq}}

    def teacher_step(self, state: State, prev_ids: torch.Tensor, emb: torch.Tensor):
        """One step of phase 1: y_{t-1} (B,) and e(y_{t-1}) (B, E) -> x_t (B, In), s_t (B, H) with
        dropout applied (the output layer's and the feedback's view of it), c_t (B, M), a_t (B, S) or
        None, and the state after the decoder's update and the output layer's ``feedback``. The
        per-step work of teacher forcing: :meth:`compile_recurrence` compiles it."""
        x_t = self.decoder_input(state, prev_ids, emb)  # (B, In)
        s_t, context, weights, dec_updates = self.decoder(state, x_t)
        s_t = self.drop(s_t)
        state = {**state, **dec_updates}
        state.update(self.output.feedback(s_t, state))
        return x_t, s_t, context, weights, state

    def compile_recurrence(self, **options) -> Seq2Seq:
        """``torch.compile`` the per-step work of teacher forcing (:meth:`teacher_step`: decoder input,
        attention, the recurrent cell, the output layer's feedback) and the output layer's
        ``score_all`` (phase 2), in place: the parameters and their state_dict names are unchanged.
        A recurrent decoder runs T small steps, each a dozen kernels; compiled, each step's
        element-wise work fuses into a few kernels (``train.compile``; ``options`` go to
        ``torch.compile``, ``dynamic=True`` unless given). Returns the model."""
        options = {"dynamic": None, **options}  # automatic: static first, dynamic sizes after a change
        self.teacher_step = torch.compile(self.teacher_step, **options)
        self.output.score_all = torch.compile(self.output.score_all, **options)
        return self

    def graph_recurrence(self, max_graphs: int = 64) -> Seq2Seq:
        """Replay phase 1's step-by-step recurrence (:meth:`step_through`) from CUDA graphs in training,
        one per batch shape (``train.cuda_graphs``; models/graphed.py). In place; parameters, state_dict
        and every other path (the one-pass decoders, eval mode, search, the CPU) unchanged. Returns
        the model."""
        self.__dict__["_graphed"] = GraphedRecurrence(self, max_graphs)  # not a submodule: no state_dict keys
        return self

    def forward(self, batch, objective: bool | None = None, stepwise: bool = False) -> torch.Tensor:
        """Teacher forcing: per gold token (B, T), 0 at padding. In training mode the output layer's
        objective (log p(y_t | y_<t, X) unless the mechanism says otherwise); in eval mode always
        log p(y_t | y_<t, X), so validation loss and perplexity mean the same for every mechanism
        (the best model is chosen by it). ``objective`` overrides the mode's choice (True: the
        training objective, e.g. to test it in eval mode). ``stepwise``: the one-step-at-a-time
        computation through ``step`` (the reference the two-phase one is tested against)."""
        objective = self.training if objective is None else objective
        state = self.encode(batch)
        target = self.training_target(batch)
        if stepwise:
            gold_lp = self._stepwise_gold(state, batch, target, objective)
        else:
            view = self.teacher_forced(state, batch.tgt_in)
            scores = self.output.score_all(view["s"], view["context"], view)  # phase 2: all steps at once
            gold_lp = self.output.sequence_gold(scores, view, target, batch, objective)  # (B, T)
        return gold_lp.masked_fill(target == PAD, 0.0)

    def _stepwise_gold(self, state: State, batch, target: torch.Tensor, objective: bool) -> torch.Tensor:
        gold = []
        for t in range(batch.tgt_in.size(1)):
            log_probs, state = self.step(state, batch.tgt_in[:, t])
            if objective:  # the mechanism's own objective (e.g. Pointer Softmax's joint, coverage)
                gold.append(self.output.gold_score(log_probs, state, target[:, t], t, batch))
            else:  # evaluation: log p(y_t) itself, so validation loss compares across mechanisms
                gold.append(self.output.step_log_likelihood(log_probs, state, target[:, t]))
        return torch.stack(gold, dim=1)  # (B, T)


ANY_DECODER = ("recurrent", "transformer")  # ``Mechanism.decoders`` of one that runs on either


@dataclass(frozen=True)
class Mechanism:
    """A mechanism as a plug-in declares it: ``MECHANISMS = (Mechanism(...), ...)`` in its module.

    ``options`` is the frozen dataclass of its ``model.<name>`` section: every section in params.yaml
    is parsed with it when the ``model`` section is read (:func:`models.registry.model_config`), so a
    typo fails there, not mid-run. What the rest of the project needs to know of a mechanism, it asks
    the options (e.g. ``reads_source_words``: the batches must carry the source words) or the output
    layer (``can_copy``, ``shortlist``, ``reads_pointers``), never the mechanism's name.
    ``variants``: option sets (as ``model.<name>`` sections; shared keys such as ``encoder`` allowed)
    that together exercise every code path; the contract tests (tests/models/test_contract.py) check
    each one on vocabularies of about ten words."""

    name: str  # the params.yaml name (``mechanisms: [...]``, ``model.<name>`` options section)
    display: str  # the name the comparison tables print (the paper's)
    build: Callable[[ModelConfig], Seq2Seq]
    options: type = NoOptions
    variants: tuple[dict, ...] = ({},)
    # The ``model.decoder`` values its builder accepts: a mechanism opts in to the transformer decoder
    # (``ANY_DECODER``) when it reads the decoder only through s_t, c_t, a_t and the memory size
    # ``cfg.memory``; the contract tests then run every variant on it too. Read-Again keeps its own.
    decoders: tuple[str, ...] = ("recurrent",)

    def parse_options(self, options: dict):
        """The typed options of a ``model.<name>`` section (its shared keys already lifted out)."""
        return parse_options(self.options, options, self.name)

    def own_keys(self) -> frozenset[str]:
        """The keys of its options class: in ``model.<name>`` they are its own, even where a shared
        size has the same name (Read-Again's ``decoder: lstm | gru`` beside ``model.decoder``)."""
        return frozenset(f.name for f in fields(self.options))

    def reads_source_words(self, options: dict) -> bool:
        """Whether a model of these options reads the source words of a batch (not only their ids)."""
        return bool(getattr(self.parse_options(options), "reads_source_words", False))

    def source_words(self, options: dict) -> tuple[str, ...]:
        """The words a model of these options looks for in a source (they must be in its vocabulary)."""
        return tuple(getattr(self.parse_options(options), "source_words", ()))
