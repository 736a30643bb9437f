"""The Transformer decoder (Vaswani et al. 2017, sections 3.1-3.5), ``model.decoder: transformer``,
under any output layer whose maths allows it (every mechanism but Read-Again).

Pre-norm layers (the residual stream is normalised before each sub-layer and once after the last
layer, as the encoder of models/encoder.py; Xiong et al. 2020), N = ``decoder_layers`` of
  h <- h + Dropout(SelfAttention(LN(h)))       causal: position t sees y_0 .. y_{t-1} only
  h <- h + Dropout(CrossAttention(LN(h), M))   over the encoder memory h_j (B, S, M)
  h <- h + Dropout(FFN(LN(h)))                 FFN(x) = W_2 Dropout(ReLU(W_1 x)), d_ff = ``decoder_ff``
with ``decoder_heads`` heads of size hidden / heads (Vaswani eq. 1 and section 3.2.2) and the input
h^0_t = W_in x_t + PE(t): x_t = [e(y_{t-1}); extra] is the skeleton's decoder input (dropout applied),
PE the sinusoidal positions of Vaswani section 3.5 (no parameters, no maximum length; the encoder's).
Dropout is on the sub-layer outputs and inside the FFN, never on attention weights: the alignment
head's weights are a distribution the output layer copies with.

What the output layers read at step t (the skeleton's s_t, c_t, a_t):
- s_t = LN(h^N_t) (B, H): the last layer's output, H = ``hidden`` (= d_model);
- a_t (B, S): the cross-attention weights of one dedicated *alignment head* (head 0 of the last
  layer), as fairseq's transformer_pg (``alignment_heads 1``, ``alignment_layer -1``; Garg et al.
  2019): the copy distribution (pointer-generator eq. 9) and location softmax (Pointer Softmax) is
  one softmax, as sharp as a recurrent decoder's attention, while the other heads attend freely;
- c_t = sum_j a_{t,j} h_j (B, M): the memory weighted by a_t, the context of CopyNet eq. 3 and See
  et al. eq. 3, so every output layer keeps its [s_t; c_t] sizes (M = 2 * encoder_hidden);
- coverage (``coverage=True``, the pointer-generator): c^t = sum_{t' < t} a^{t'} (See et al. eq. 10)
  over the alignment head's weights, entering that head's logits as w_c c_j^t (the dot-product
  counterpart of eq. 11's w_c c_i^t): a^t = softmax_j(q_t . k_j / sqrt(d_k) + w_c c_j^t). The
  teacher-forced pass computes every other quantity for all t at once and runs this one softmax as
  a scan over t (a^t needs c^t).
- Enc-Dec (``attention=False``): the decoder reads one fixed code c (the summary), as Cho et al.
  2014, at every step and in every layer: cross-attention over a memory of that one vector gives it
  weight 1 whatever the query, i.e. W_O W_V c, so the sub-layer is that map, h <- h + Dropout(W_l c)
  (without the query side, whose parameters would get no gradient); c_t = c, no a_t.

Teacher forcing runs the whole target in one pass (``forward_sequence``). Search steps through
``forward`` with the keys and values of every earlier position cached per layer in the state,
batch-first so beam search reorders dim 0: "tf_self_k{i}", "tf_self_v{i}" (B, heads, t, d_k). The
cross-attention keys and values "tf_mem_k{i}", "tf_mem_v{i}" (B, heads, S, d_k) are computed once per
source (static: never reordered). Both paths compute the same numbers (tests/models/test_transformer_decoder.py).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from models.encoder import sinusoid_positions
from models.extended import NEG

State = dict


def _positions(start: int, length: int, dim: int, like: torch.Tensor) -> torch.Tensor:
    """PE(start) .. PE(start + length - 1), (length, dim), in ``like``'s dtype and device."""
    return sinusoid_positions(start + length, dim, like.device)[start:].to(like.dtype)


class MultiHeadAttention(nn.Module):
    """Scaled dot-product attention with h heads (Vaswani et al. eq. 1, section 3.2.2); keys and values
    of any size ``kv_dim`` (the memory's M for cross-attention)."""

    def __init__(self, d_model: int, kv_dim: int, heads: int):
        super().__init__()
        self.heads, self.d_head = heads, d_model // heads
        self.query = nn.Linear(d_model, d_model)
        # No key bias: q . b_k is the same for every key, so softmax cancels it (a parameter with no gradient).
        self.key = nn.Linear(kv_dim, d_model, bias=False)
        self.value = nn.Linear(kv_dim, d_model)
        self.out = nn.Linear(d_model, d_model)

    def split(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, D) -> (B, heads, T, d_k)."""
        return x.view(x.size(0), x.size(1), self.heads, self.d_head).transpose(1, 2)

    def keys_values(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, S, kv_dim) -> keys, values (B, heads, S, d_k)."""
        return self.split(self.key(x)), self.split(self.value(x))

    def logits(self, x: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        """q k^T / sqrt(d_k): queries from x (B, T, D), keys (B, heads, S, d_k) -> (B, heads, T, S)."""
        return torch.matmul(self.split(self.query(x)), keys.transpose(-1, -2)) / math.sqrt(self.d_head)

    def combine(self, weights: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        """weights (B, heads, T, S), values (B, heads, S, d_k) -> W_O [head_1; ...; head_h] (B, T, D)."""
        heads = torch.matmul(weights, values)  # (B, heads, T, d_k)
        return self.out(heads.transpose(1, 2).reshape(heads.size(0), heads.size(2), -1))


class DecoderLayer(nn.Module):
    """One pre-norm layer: causal self-attention, cross-attention over the memory (``attention``; else
    the fixed code's W_l c, Enc-Dec), feed-forward."""

    def __init__(self, d_model: int, memory_dim: int, heads: int, feed_forward: int, dropout: float, attention=True):
        super().__init__()
        self.norm_self, self.self_attn = nn.LayerNorm(d_model), MultiHeadAttention(d_model, d_model, heads)
        if attention:
            self.norm_cross, self.cross_attn = nn.LayerNorm(d_model), MultiHeadAttention(d_model, memory_dim, heads)
        else:
            self.code = nn.Linear(memory_dim, d_model)  # W_l: the one-position cross-attention's W_O W_V
        self.norm_ff = nn.LayerNorm(d_model)
        self.ff = nn.Sequential(
            nn.Linear(d_model, feed_forward), nn.ReLU(), nn.Dropout(dropout), nn.Linear(feed_forward, d_model)
        )
        self.drop = nn.Dropout(dropout)

    def forward(
        self,
        h: torch.Tensor,
        past: tuple[torch.Tensor, torch.Tensor],
        memory_kv: tuple[torch.Tensor, torch.Tensor],
        memory_mask: torch.Tensor | None,
        coverage: tuple[torch.Tensor, torch.Tensor] | None = None,
    ):
        """h (B, T, D) at positions t0 .. t0 + T - 1; past: cached keys, values (B, heads, t0, d_k);
        memory_kv (B, heads, S, d_k) each (Enc-Dec: (W_l c (B, 1, D), None)); memory_mask (B, S);
        coverage: (c^{t0} (B, S), w_c) for the alignment head or None -> h (B, T, D), the keys and
        values of positions 0 .. t0 + T - 1, the cross-attention weights (B, heads, T, S) (Enc-Dec:
        None) and the coverage before each step (B, T, S) or None."""
        steps, start = h.size(1), past[0].size(2)
        x = self.norm_self(h)
        new_k, new_v = self.self_attn.keys_values(x)  # (B, heads, T, d_k)
        keys, values = torch.cat([past[0], new_k], dim=2), torch.cat([past[1], new_v], dim=2)  # (B, heads, t0+T, d_k)
        query_pos = torch.arange(start, start + steps, device=h.device)
        future = torch.arange(start + steps, device=h.device).unsqueeze(0) > query_pos.unsqueeze(1)  # (T, t0+T)
        logits = self.self_attn.logits(x, keys).masked_fill(future, NEG)  # (B, heads, T, t0+T)
        h = h + self.drop(self.self_attn.combine(torch.softmax(logits, dim=-1), values))
        if memory_kv[1] is None:  # Enc-Dec: the fixed code's W_l c, the same at every position
            h = h + self.drop(memory_kv[0])
            return h + self.drop(self.ff(self.norm_ff(h))), (keys, values), None, None

        x = self.norm_cross(h)
        logits = self.cross_attn.logits(x, memory_kv[0])  # (B, heads, T, S)
        logits = logits.masked_fill(~memory_mask[:, None, None, :], NEG)
        weights = torch.softmax(logits, dim=-1)  # (B, heads, T, S)
        covered = None
        if coverage is not None:
            aligned, covered = coverage_scan(logits[:, 0], coverage[0], coverage[1], memory_mask)  # (B, T, S) each
            weights = torch.cat([aligned.unsqueeze(1), weights[:, 1:]], dim=1)
        h = h + self.drop(self.cross_attn.combine(weights, memory_kv[1]))
        h = h + self.drop(self.ff(self.norm_ff(h)))
        return h, (keys, values), weights, covered


def coverage_scan(
    logits: torch.Tensor, coverage: torch.Tensor, weight: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The alignment head with coverage, step by step (a^t needs c^t = sum_{t' < t} a^{t'}, See et al.
    eq. 10-11): logits (B, T, S) (masked), c^{t0} (B, S), w_c (1,) -> a (B, T, S), c^t before each step
    (B, T, S). The one sequential part of the teacher-forced pass: T softmaxes over (B, S)."""
    rows, before = [], []
    for t in range(logits.size(1)):
        before.append(coverage)
        a_t = torch.softmax((logits[:, t] + weight * coverage).masked_fill(~mask, NEG), dim=-1)  # (B, S)
        rows.append(a_t)
        coverage = coverage + a_t
    return torch.stack(rows, dim=1), torch.stack(before, dim=1)


class TransformerDecoder(nn.Module):
    """The decoder of the module docstring: ``forward`` one step (search, stepwise teacher forcing),
    ``forward_sequence`` every step at once (teacher forcing)."""

    def __init__(
        self,
        in_dim: int,
        d_model: int,
        memory_dim: int,
        layers: int,
        heads: int,
        feed_forward: int,
        dropout: float,
        attention: bool = True,
        coverage: bool = False,
    ):
        super().__init__()
        if d_model % heads:
            raise ValueError(f"model.decoder_heads {heads} must divide the transformer decoder's size {d_model}")
        if coverage and not attention:
            raise ValueError("coverage needs the attention (See et al. eq. 10-11)")
        self.out_dim, self.context_dim, self.heads = d_model, memory_dim, heads
        self.attention, self.coverage = attention, coverage
        self.proj = nn.Linear(in_dim, d_model)  # W_in: x_t -> d_model
        self.layers = nn.ModuleList(
            DecoderLayer(d_model, memory_dim, heads, feed_forward, dropout, attention) for _ in range(layers)
        )
        self.norm = nn.LayerNorm(d_model)  # pre-norm: the last layer's output is normalised once
        # w_c of the alignment head's logits (eq. 11's counterpart); 0 at first: coverage starts neutral
        self.coverage_weight = nn.Parameter(torch.zeros(1)) if coverage else None
        self.static_keys = frozenset(
            {f"tf_mem_{kv}{i}" for i in range(layers) for kv in ("kv" if attention else "k")}
            | ({"summary"} if not attention else set())
        )  # per source: cross-attention keys and values (Enc-Dec: "tf_mem_k{i}" = W_l c), the code
        self.sequence_keys = ("coverage",) if coverage else ()  # what forward_sequence gives per step

    @classmethod
    def from_config(cls, cfg, in_dim: int, memory_dim: int, attention: bool = True, coverage: bool = False):
        """The decoder ``cfg`` (a ``ModelConfig``) sizes: d_model = hidden, ``decoder_layers``,
        ``decoder_heads``, ``decoder_ff`` (None: 4 * hidden), ``dropout``."""
        return cls(
            in_dim,
            cfg.hidden,
            memory_dim,
            cfg.decoder_layers,
            cfg.decoder_heads,
            cfg.feed_forward,
            cfg.dropout,
            attention,
            coverage,
        )

    def init_state(self, memory: torch.Tensor, summary: torch.Tensor, mask: torch.Tensor) -> State:
        """Per-source keys and values of every layer's cross-attention (Enc-Dec: W_l c), empty
        self-attention caches."""
        state: State = {}
        for i, layer in enumerate(self.layers):
            if self.attention:
                state[f"tf_mem_k{i}"], state[f"tf_mem_v{i}"] = layer.cross_attn.keys_values(
                    memory
                )  # (B, heads, S, d_k)
            else:
                state[f"tf_mem_k{i}"] = layer.code(summary).unsqueeze(1)  # (B, 1, D)
            empty = memory.new_zeros(memory.size(0), self.heads, 0, self.out_dim // self.heads)  # (B, heads, 0, d_k)
            state[f"tf_self_k{i}"], state[f"tf_self_v{i}"] = empty, empty
        if not self.attention:
            state["summary"] = summary  # (B, M): c_t of Enc-Dec
        if self.coverage:
            state["coverage"] = memory.new_zeros(mask.shape)  # (B, S): c^1 = 0 (eq. 10)
        return state

    def _run(self, state: State, x: torch.Tensor):
        """x (B, T, In) at the positions after the cached ones -> s (B, T, H), c (B, T, M), a (B, T, S) or
        None, the coverage before each step (B, T, S) or None, state updates."""
        start = state["tf_self_k0"].size(2)
        h = self.proj(x)  # (B, T, D)
        h = h + _positions(start, x.size(1), self.out_dim, h)
        mask = state["src_mask"] if self.attention else None
        updates: State = {}
        last = len(self.layers) - 1
        for i, layer in enumerate(self.layers):
            coverage = (state["coverage"], self.coverage_weight) if self.coverage and i == last else None
            past = (state[f"tf_self_k{i}"], state[f"tf_self_v{i}"])
            h, (keys, values), weights, covered = layer(
                h, past, (state[f"tf_mem_k{i}"], state.get(f"tf_mem_v{i}")), mask, coverage
            )
            updates[f"tf_self_k{i}"], updates[f"tf_self_v{i}"] = keys, values
        s = self.norm(h)  # (B, T, H)
        if not self.attention:
            summary = state["summary"]
            return s, summary.unsqueeze(1).expand(-1, x.size(1), -1), None, None, updates
        attn = weights[:, 0]  # (B, T, S): the alignment head of the last layer
        context = torch.bmm(attn, state["memory"])  # (B, T, M): c_t = sum_j a_{t,j} h_j
        if covered is not None:
            updates["coverage"] = covered[:, -1] + attn[:, -1]  # c^{t+1} = c^t + a^t
        return s, context, attn, covered, updates

    def forward(self, state: State, x: torch.Tensor):
        """One step, x_t (B, In) -> s_t (B, H), c_t (B, M), a_t (B, S) or None, state updates (the
        caches grown by one position, the coverage c^{t+1})."""
        s, context, attn, _, updates = self._run(state, x.unsqueeze(1))
        return s[:, 0], context[:, 0], None if attn is None else attn[:, 0], updates

    def forward_sequence(self, state: State, x: torch.Tensor):
        """Teacher forcing, the whole target in one pass: x (B, T, In) -> s (B, T, H), c (B, T, M),
        a (B, T, S) or None, and the ``sequence_keys`` per step ({"coverage": c^t (B, T, S)})."""
        s, context, attn, covered, _ = self._run(state, x)
        return s, context, attn, ({"coverage": covered} if covered is not None else {})


def recurrent_or_transformer(
    cfg, recurrent, in_dim: int, memory_dim: int, attention: bool = True, coverage: bool = False
) -> nn.Module:
    """The decoder ``cfg.decoder`` names: ``recurrent()`` (a builder of the mechanism's own recurrent
    decoder) or the transformer decoder reading inputs of ``in_dim`` and a memory of ``memory_dim``."""
    if cfg.decoder == "transformer":
        return TransformerDecoder.from_config(cfg, in_dim, memory_dim, attention, coverage)
    return recurrent()
