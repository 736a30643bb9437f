"""The torch side of the ONNX export: a trained :class:`models.seq2seq.Seq2Seq` as two graphs, the
encoder and one decoder step, with the decoder state flattened into named tensors.

- ``encoder.onnx``: ``src`` (B, S), ``src_len`` (B,), ``src_ext`` (B, S) (and ``features`` (B, F) for a
  model with features) -> ``state.<key>`` for every tensor of ``Seq2Seq.encode``'s state: the source
  side (memory, masks, attention keys, CopyNet's tanh(h_j W_c), the Transformer decoder's
  cross-attention keys and values) and the decoder's initial state (s_0, the empty key/value caches,
  coverage 0, CopyNet's selective-read scores).
- ``step.onnx``: ``prev_ids`` (R,) extended ids of y_{t-1}, ``ext_slots`` (X,) (its length is the
  number X of source-OOV slots of the batch; its values are not read) and every ``state.<key>`` ->
  ``log_probs`` (R, V + X), the mechanism's log-probabilities over the extended vocabulary (what
  ``Seq2Seq.step`` returns), ``next.<key>`` for each *recurrent* key (the state a step changes: s_t,
  the Transformer caches grown by one position, coverage, the selective-read scores) and ``attn``
  (R, S), the step's attention a_t (for ``replace_unk``; absent when the decoder has none). The
  *static* keys (``Seq2Seq.static_state_keys``: fixed per source) are never reordered by beam search.
- ``weights.bin``: both graphs' weights, each tensor once (:mod:`pipeline.serving.onnx_weights`).

Both graphs call the model's own ``encode`` and ``step``, so every mechanism's maths is the code the
PyTorch search runs. Three things differ from a search step, all numerically the same function:

- the bidirectional GRU encoder runs as two unidirectional ``nn.GRU`` over the padded batch (ONNX
  ``GRU`` nodes; the backward one over each row reversed within its length), because the CPU encoder
  (``models.bigru``) is a Python loop over source positions, which an export would unroll for one
  source length (:class:`ExportBiGRU`);
- Read-Again's encoder (Zeng et al. 2016, section 3.1) runs its two reads over the padded rows
  (ONNX ``LSTM``/``GRU`` nodes; the GRU read-again of eq. 4-6 as an ONNX ``Scan``), with the
  sentences of opt1/opt2 (eq. 9-11) found in ``src`` by the source ids of the ``sentence_end``
  tokens, where the model loops over positions in Python and reads the source words
  (:class:`ExportReadAgain`);
- parameters are frozen and gradients stay enabled while tracing, so the output projection takes its
  plain ``F.linear`` path (``OutputLayer.project`` without gradients reads MKL's packed weights, an
  operator ONNX does not have) while the extended-vocabulary maths takes its search path
  (``models.extended.extended_log_probs`` untracked: nothing requires a gradient).

The exporter is torch.onnx's dynamo exporter (``torch.export`` + onnxscript, ``dynamo=True``): it
keeps sizes symbolic (batch, source length, OOV slots, cache length), where the TorchScript exporter
(``dynamo=False``) traces Python ints such as ``n_ext`` and the cache length into constants. Two of its
translations are replaced (``CUSTOM_TRANSLATIONS``): onnxscript writes ``logaddexp`` as
log(exp(a) + exp(b)) and ``log_sigmoid`` as log(sigmoid(x)), which underflow to -inf below about -88 in
float32 (every masked entry, at -1e9, would come out -inf); here they are the stable forms torch
computes. Axes are found by running the model on two probe sizes (:func:`state_axes`), not assumed.
"""

from __future__ import annotations

import contextlib
import io
import logging
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING

import onnx
import torch
import torch.nn.functional as F
from onnxscript import opset18 as op
from onnxscript.function_libs.torch_lib.ops.core import aten_slice_scatter
from torch import nn
from torch._higher_order_ops.scan import scan  # torch's scan (no public name yet): an ONNX Scan node

from models.encoder import BiGRUEncoder, TransformerEncoder
from models.read_again import ReadAgainEncoder
from models.specials import BOS, PAD
from pipeline.serving.onnx_weights import SharedWeights

if TYPE_CHECKING:
    from pipeline.vocab.vocabulary import Vocab

OPSET = 18  # ScatterElements(reduction=add) from 16, the opset-18 Reduce* with axes as inputs
ENCODER_FILE, STEP_FILE = "encoder.onnx", "step.onnx"
ENCODER_INPUTS = ("src", "src_len", "src_ext")
FEATURES_INPUT = "features"
STATE, NEXT = "state.", "next."  # prefixes of the state tensors' names: step inputs, step outputs
ATTENTION = "attn"  # the step's attention weights a_t (B, S), when the decoder attends


def _logaddexp(a, b):
    """log(exp(a) + exp(b)) as torch computes it: max + log1p(exp(-|a - b|)), and a itself where
    a == b is infinite (Log(1 + x) stands for log1p: equal to float32 rounding)."""
    big = op.Max(a, b)
    gap = op.Neg(op.Abs(op.Sub(a, b)))
    out = op.Add(big, op.Log(op.Add(op.CastLike(1.0, a), op.Exp(gap))))
    return op.Where(op.And(op.IsInf(a), op.Equal(a, b)), a, out)


def _log_sigmoid(x):
    """log sigmoid(x) = min(x, 0) - log1p(exp(-|x|)), finite for every finite x."""
    zero = op.CastLike(0.0, x)
    return op.Sub(op.Min(x, zero), op.Log(op.Add(op.CastLike(1.0, x), op.Exp(op.Neg(op.Abs(x))))))


INT64_MAX = 2**63 - 1


def _slice_scatter(self, src, dim: int = 0, start=None, end=None, step=1):
    """``self`` with ``src`` written over ``self[start:end]`` along ``dim``; with step 1 as the part
    before, ``src`` and the part after, concatenated (onnxscript's translation transposes the whole
    tensor around a ScatterND: four passes over each step's (R, V + X) distribution, written by
    ``models.extended.extended_log_probs``, took 45% of a beam step)."""
    if not isinstance(step, int) or step != 1:
        return aten_slice_scatter(self, src, dim, start, end, step)
    zero = op.Constant(value_ints=[0])
    axis = op.Constant(value_ints=[dim])
    first = zero if start is None else op.Unsqueeze(start, zero)
    last = op.Constant(value_ints=[INT64_MAX]) if end is None else op.Unsqueeze(end, zero)
    head = op.Slice(self, zero, first, axis)
    tail = op.Slice(self, last, op.Constant(value_ints=[INT64_MAX]), axis)
    return op.Concat(head, src, tail, axis=dim)


CUSTOM_TRANSLATIONS = {
    torch.ops.aten.logaddexp.default: _logaddexp,
    torch.ops.aten.log_sigmoid.default: _log_sigmoid,
    torch.ops.aten.slice_scatter.default: _slice_scatter,
}


# The encoders the export traces: the BiGRU (as ExportBiGRU), the Transformer encoder and Read-Again's (as
# ExportReadAgain).
TRACED_ENCODERS = (BiGRUEncoder, TransformerEncoder, ReadAgainEncoder)


def sentence_end_ids(model: nn.Module, src_vocab: Vocab | None) -> tuple[int, ...]:
    """The source ids of Read-Again's ``sentence_end`` tokens, for an encoder that reads several
    sentences (opt1/opt2); () for any other model (one on a pretrained backbone has no ``encoder``)."""
    encoder = getattr(model, "encoder", None)
    if not isinstance(encoder, ReadAgainEncoder) or encoder.k == 1 or src_vocab is None:
        return ()
    return tuple(sorted(src_vocab.id(tok) for tok in encoder.ends if tok in src_vocab))


def untraceable(model: nn.Module, src_vocab: Vocab | None = None) -> str | None:
    """Why ``model`` cannot be exported, before anything is traced; None when it may be. Read-Again
    over several sentences (``model.read_again.sentences`` opt1/opt2) finds the sentence ends by the
    source ids of its ``sentence_end`` tokens: a token the source vocabulary lacks reads as <unk> in
    the graph, while PyTorch reads the raw word, so such a model is refused."""
    if not isinstance(model.encoder, TRACED_ENCODERS):
        return (
            f"its encoder ({type(model.encoder).__name__}) is not one the export traces "
            "(the BiGRU, the Transformer or Read-Again's)"
        )
    encoder = model.encoder
    if isinstance(encoder, ReadAgainEncoder) and encoder.k > 1:
        missing = sorted(tok for tok in encoder.ends if src_vocab is None or tok not in src_vocab)
        if missing:
            return (
                f"model.read_again.sentences {encoder.mode}: the sentence_end token(s) {missing} are not in the "
                "source vocabulary, so the graph cannot find those sentence ends (PyTorch reads the raw words)"
            )
    return None


class ExportBiGRU(nn.Module):
    """``BiGRUEncoder``'s function with its parameters, as two unidirectional ``nn.GRU`` (ONNX ``GRU``
    nodes, any source length): the forward GRU over the padded rows, the backward GRU over each row
    reversed within its length (positions past it read in place, as ``models.bigru.reverse_index``),
    its outputs put back in source order. Memory (B, S, 2H) is 0 past a row's length; the summary
    [h_fwd at len - 1; h_bwd after the whole row] (B, 2H), as the packed ``nn.GRU`` gives them."""

    def __init__(self, encoder: BiGRUEncoder):
        super().__init__()
        gru = encoder.rnn
        self.out_dim = encoder.out_dim
        self.fwd = nn.GRU(gru.input_size, gru.hidden_size, batch_first=True)
        self.bwd = nn.GRU(gru.input_size, gru.hidden_size, batch_first=True)
        for name in ("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"):
            setattr(self.fwd, name, getattr(gru, name))  # the same Parameter objects: no copy
            setattr(self.bwd, name, getattr(gru, f"{name}_reverse"))

    def forward(self, embedded: torch.Tensor, lengths: torch.Tensor, batch=None) -> tuple[torch.Tensor, torch.Tensor]:
        """embedded (B, S, E), lengths (B,) -> memory (B, S, 2H), summary (B, 2H)."""
        steps = torch.arange(embedded.size(1), device=embedded.device).unsqueeze(0)  # (1, S)
        n = lengths.unsqueeze(1)  # (B, 1)
        valid = steps < n  # (B, S)
        rev = torch.where(valid, n - 1 - steps, steps)  # (B, S): its own inverse
        out_f, _ = self.fwd(embedded)  # (B, S, H)
        reversed_in = embedded.gather(1, rev.unsqueeze(-1).expand(-1, -1, embedded.size(2)))  # (B, S, E)
        out_b, _ = self.bwd(reversed_in)  # (B, S, H) in each row's reverse order
        last = (lengths - 1).view(-1, 1, 1).expand(-1, 1, out_f.size(2))  # (B, 1, H)
        summary = torch.cat([out_f.gather(1, last).squeeze(1), out_b.gather(1, last).squeeze(1)], dim=-1)  # (B, 2H)
        out_b = out_b.gather(1, rev.unsqueeze(-1).expand(-1, -1, out_b.size(2)))  # (B, S, H) source order
        memory = torch.cat([out_f, out_b], dim=-1) * valid.unsqueeze(-1).to(out_f.dtype)  # (B, S, 2H)
        return memory, summary


def _last(out: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Each row's output at its last position (N, S, H), (N,) -> (N, H); 0 for an empty row (as
    ``models.read_again.run_packed`` gives it)."""
    at = (lengths - 1).clamp_min(0).view(-1, 1, 1).expand(-1, 1, out.size(2))  # (N, 1, H)
    return out.gather(1, at).squeeze(1) * (lengths > 0).unsqueeze(1).to(out.dtype)


class ExportReadAgain(nn.Module):
    """``ReadAgainEncoder``'s function (Zeng et al. 2016, section 3.1) with its parameters, for any
    source length and sentence layout:

    - both reads run over the padded rows as plain ``nn.LSTM`` / ``nn.GRU`` (ONNX ``LSTM`` / ``GRU``
      nodes), not packed: a uni-directional read's outputs before a row's length do not depend on
      what follows, and the last state is read at position len - 1 (:func:`_last`);
    - the GRU read-again (eq. 4-6: the importance alpha_i scales the update gate, which no ONNX
      ``GRU`` node can do) runs as ``torch``'s ``scan`` (an ONNX ``Scan`` node), with the step maths
      of ``ReadAgainEncoder._gru_read_again``, where the model loops over positions in Python;
    - opt1/opt2 (eq. 9-11) find the sentence ends in ``batch.src`` by the source ids of the
      ``sentence_end`` tokens (``end_ids``), where the model reads ``batch.src_tokens``, and lay the
      sentences out in K = ``max_sentences`` rows per source by a cumulative sum (the model's
      ``SentenceLayout`` takes a cumulative max, which ONNX lacks); K is fixed by the model, the
      sentence lengths are data."""

    def __init__(self, encoder: ReadAgainEncoder, end_ids: tuple[int, ...] = ()):
        super().__init__()
        self.encoder = encoder  # its parameters, global_vectors (eq. 9-11) and importance (eq. 5)
        self.out_dim, self.k = encoder.out_dim, encoder.k
        self.register_buffer("end_ids", torch.tensor(end_ids, dtype=torch.long), persistent=False)  # (E_n,)

    def sentence_ids(self, src: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """(B, S) each position's sentence slot: the sentence ends before it, capped at K - 1."""
        if self.k == 1:
            return torch.zeros_like(src)
        ends = ((src.unsqueeze(-1) == self.end_ids).any(-1) & mask).long()  # (B, S)
        return (ends.cumsum(dim=1) - ends).clamp(max=self.k - 1)

    def layout(self, sid: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``SentenceLayout``'s destinations (B, S) (position i of slot k at k*S + its offset in the
        sentence; padding at the trash slot K*S), the offsets (B, S) (0 at padding) and the row
        lengths (B*K,)."""
        bsz, steps = sid.shape
        pos = torch.arange(steps, device=sid.device).unsqueeze(0)  # (1, S)
        one_hot = (sid.unsqueeze(-1) == torch.arange(self.k, device=sid.device)) & mask.unsqueeze(-1)  # (B, S, K)
        counts = one_hot.long().sum(dim=1)  # (B, K) tokens per sentence
        start = (counts.cumsum(dim=1) - counts).gather(1, sid)  # (B, S) first position of each one's sentence
        offset = torch.where(mask, pos - start, torch.zeros_like(sid))  # (B, S)
        dest = torch.where(mask, sid * steps + offset, torch.full_like(sid, self.k * steps))  # (B, S)
        return dest, offset, counts.reshape(-1)

    def _gru_read_again(self, x: torch.Tensor, alpha: torch.Tensor, lengths: torch.Tensor):
        """eq. 6 over (N, S, E), alpha (N, S, M), lengths (N,) -> outputs (N, S, M), last state (N, M)."""
        cell = self.encoder.rnn2
        gi = F.linear(x, cell.weight_ih, cell.bias_ih)  # (N, S, 3M)
        live = (torch.arange(x.size(1), device=x.device).unsqueeze(0) < lengths.unsqueeze(1)).unsqueeze(-1)  # (N, S, 1)

        def read(h, xs):  # one position: the body of ReadAgainEncoder._gru_read_again's loop
            gi_t, alpha_t, live_t = xs  # (N, 3M), (N, M), (N, 1)
            gh = F.linear(h, cell.weight_hh, cell.bias_hh)  # (N, 3M)
            i_r, i_z, i_n = gi_t.chunk(3, dim=-1)
            h_r, h_z, h_n = gh.chunk(3, dim=-1)
            r = torch.sigmoid(i_r + h_r)
            z = 1.0 - torch.sigmoid(i_z + h_z)
            cand = torch.tanh(i_n + r * h_n)
            gate = alpha_t * z
            h = torch.where(live_t, (1.0 - gate) * h + gate * cand, h)
            return h, h.clone()  # a scan output may not alias its carry

        h0 = gi.new_zeros(x.size(0), self.out_dim)  # h_0^2 = 0 (eq. 9)
        last, outs = scan(read, h0, (gi.transpose(0, 1), alpha.transpose(0, 1), live.transpose(0, 1)))
        return outs.transpose(0, 1), last  # (N, S, M), (N, M)

    def forward(self, embedded: torch.Tensor, lengths: torch.Tensor, batch) -> tuple[torch.Tensor, torch.Tensor]:
        """embedded (B, S, E), lengths (B,) -> memory h^2 (B, S, M), summary (B, M)."""
        enc = self.encoder
        bsz, steps, dim = embedded.shape
        mask = torch.arange(steps, device=embedded.device).unsqueeze(0) < lengths.unsqueeze(1)  # (B, S)
        sid = self.sentence_ids(batch.src, mask)  # (B, S)
        dest, offset, row_len = self.layout(sid, mask)  # (B, S), (N,) with N = B*K
        grouped = embedded.new_zeros(bsz, self.k * steps + 1, dim).scatter(
            1, dest.unsqueeze(-1).expand(-1, -1, dim), embedded
        )  # (B, K*S + 1, E)
        x = grouped[:, : self.k * steps].reshape(bsz * self.k, steps, dim)  # (N, S, E), 0 past each sentence
        h1, _ = enc.rnn1(x)  # (N, S, M) first read
        g = enc.global_vectors(_last(h1, row_len).view(bsz, self.k, -1)).reshape(bsz * self.k, -1)  # (N, G)
        if enc.cell == "gru":
            h2, last2 = self._gru_read_again(x, enc.importance(h1, g, x), row_len)
        else:
            g_seq = g.unsqueeze(1).expand(-1, steps, -1)  # (N, S, G)
            h2, _ = enc.rnn2(torch.cat([x, h1, g_seq], dim=-1))  # (N, S, M) eq. 8
            last2 = _last(h2, row_len)  # (N, M)
        # Back to source order by (row, offset) indices, not by reshaping h2: the exporter gives an
        # LSTM's output the traced source length, which a reshape of it would keep as a constant.
        row = torch.arange(bsz, device=sid.device).unsqueeze(1) * self.k + sid  # (B, S) padding: zeroed below
        memory = h2[row, offset] * mask.unsqueeze(-1).to(h2.dtype)  # (B, S, M) source order
        last_sid = sid.gather(1, (lengths - 1).clamp_min(0).unsqueeze(1))  # (B, 1)
        summary = last2.view(bsz, self.k, -1).gather(1, last_sid.unsqueeze(-1).expand(-1, 1, last2.size(1)))
        return memory, summary.squeeze(1)  # (B, S, M), (B, M)


def probe_batch(
    src: torch.Tensor, src_len: torch.Tensor, src_ext: torch.Tensor, n_ext: int, features=None, src_tokens=None
) -> SimpleNamespace:
    """The fields of a ``models.batch.Batch`` that ``Seq2Seq.encode`` reads (``src_tokens``: the
    source words, which Read-Again over several sentences reads in PyTorch)."""
    return SimpleNamespace(
        src=src, src_len=src_len, src_ext=src_ext, n_ext=n_ext, features=features, src_tokens=src_tokens
    )


class EncoderGraph(nn.Module):
    """``Seq2Seq.encode`` -> its state's tensors in ``keys`` order."""

    def __init__(self, model: nn.Module, keys: tuple[str, ...]):
        super().__init__()
        self.model, self.keys = model, keys

    def forward(self, src, src_len, src_ext, features=None):
        state = self.model.encode(probe_batch(src, src_len, src_ext, 0, features))
        return tuple(state[k] for k in self.keys)


class StepGraph(nn.Module):
    """``Seq2Seq.step`` on a state given as tensors in ``keys`` order -> (log_probs, the ``recurrent``
    keys of the next state, and the attention when ``attention``)."""

    def __init__(self, model: nn.Module, keys: tuple[str, ...], recurrent: tuple[str, ...], attention: bool):
        super().__init__()
        self.model, self.keys, self.recurrent, self.attention = model, keys, recurrent, attention

    def forward(self, prev_ids, ext_slots, *tensors):
        state = dict(zip(self.keys, tensors))
        state["n_ext"] = ext_slots.size(0)  # X, a symbolic size: the width of the extended slots
        log_probs, new = self.model.step(state, prev_ids)  # (R, V + X)
        extra = (new[ATTENTION],) if self.attention else ()
        return (log_probs, *(new[k] for k in self.recurrent), *extra)


@contextmanager
def exportable(model: nn.Module, end_ids: tuple[int, ...] = ()) -> Iterator[nn.Module]:
    """``model`` ready to trace (see the module docstring): eval mode, parameters frozen, gradients
    enabled, a ``BiGRUEncoder`` replaced by :class:`ExportBiGRU`, a ``ReadAgainEncoder`` by
    :class:`ExportReadAgain` (``end_ids``: :func:`sentence_end_ids`); everything restored afterwards."""
    frozen = [(p, p.requires_grad) for p in model.parameters()]
    encoder = model.encoder
    training = model.training
    model.eval()
    for p, _ in frozen:
        p.requires_grad_(False)
    if isinstance(encoder, BiGRUEncoder):
        model.encoder = ExportBiGRU(encoder)
    if isinstance(encoder, ReadAgainEncoder):
        model.encoder = ExportReadAgain(encoder, end_ids)
    try:
        with torch.enable_grad():
            yield model
    finally:
        model.encoder = encoder
        for p, flag in frozen:
            p.requires_grad_(flag)
        model.train(training)


@dataclass(frozen=True)
class TensorSpec:
    """One graph input or output: name, numpy dtype name and axes (a name for a symbolic size)."""

    name: str
    dtype: str
    axes: tuple[str | int, ...]

    def as_dict(self) -> dict:
        return {"name": self.name, "dtype": self.dtype, "shape": list(self.axes)}


def _dtype(t: torch.Tensor) -> str:
    return str(t.detach().cpu().numpy().dtype) if t.dtype != torch.bool else "bool"


PROBES = ((3, 5, 2), (2, 7, 3))  # (rows, source length, OOV slots): sizes >= 2 (torch.export specialises 0 and 1)
FEATURE_TAGS = (4, 6)  # tags per row of the two probes, for a model with features (sizes no other axis has)


def probe_inputs(
    model: nn.Module, rows: int, steps: int, n_ext: int, seed: int, end_ids: tuple[int, ...] = ()
) -> tuple:
    """A batch of ``rows`` sources of lengths up to ``steps`` with ``n_ext`` OOV slots (random ids of
    the model's vocabularies; the last row shorter, so padding is exercised; a sentence end of
    ``end_ids`` at every third position, so several sentences are read): (src, src_len, src_ext,
    features or None)."""
    gen = torch.Generator().manual_seed(seed)
    src_vocab, tgt_vocab = model.cfg.src_vocab, model.cfg.tgt_vocab
    lengths = torch.full((rows,), steps, dtype=torch.long)
    lengths[-1] = max(1, steps - 2)
    src = torch.randint(4, max(5, src_vocab), (rows, steps), generator=gen)
    src_ext = torch.randint(4, max(5, tgt_vocab), (rows, steps), generator=gen)
    for b in range(rows):  # a few source OOVs per row, numbered from V as pipeline.vocab.extended does
        for k in range(min(n_ext, int(lengths[b]))):
            src_ext[b, k * 2 % int(lengths[b])] = tgt_vocab + k
    if end_ids:
        at = torch.arange(2, steps, 3)  # (n,)
        src[:, at] = torch.tensor(end_ids)[torch.arange(len(at)) % len(end_ids)]
    pad = torch.arange(steps).unsqueeze(0) >= lengths.unsqueeze(1)
    src, src_ext = src.masked_fill(pad, PAD), src_ext.masked_fill(pad, PAD)
    features = None
    if getattr(model.cfg, "features_vocab", 0):
        tags = FEATURE_TAGS[seed % 2]
        features = torch.randint(4, max(5, model.cfg.features_vocab), (rows, tags), generator=gen)
    return src, lengths, src_ext, features


def _axes(shapes: list[tuple[int, ...]], sizes: list[dict[str, int]]) -> tuple[str | int, ...]:
    """The axes of one tensor seen at several probe sizes: a dim that follows a named size in every
    probe is that size; one that never changes is a constant."""
    axes: list[str | int] = []
    for d in range(len(shapes[0])):
        values = [s[d] for s in shapes]
        if len(set(values)) == 1:
            axes.append(values[0])
            continue
        names = [n for n in sizes[0] if all(size[n] == v for size, v in zip(sizes, values))]
        if len(names) != 1:
            raise ValueError(f"cannot tell which size axis {d} follows (sizes {values})")
        axes.append(names[0])
    return tuple(axes)


LOG_PROBS_AXES = ("batch", "vocab_ext")  # (R, V + X)


@dataclass(frozen=True)
class GraphSpecs:
    """What :func:`graph_specs` found: the state keys (encoder outputs and step inputs, in order), the
    recurrent ones (step outputs), whether the step gives its attention, and every graph input and
    output."""

    keys: tuple[str, ...]
    recurrent: tuple[str, ...]
    attention: bool
    encoder_inputs: tuple[TensorSpec, ...]
    encoder_outputs: tuple[TensorSpec, ...]
    step_inputs: tuple[TensorSpec, ...]
    step_outputs: tuple[TensorSpec, ...]


@torch.no_grad()
def _probe_runs(model: nn.Module, end_ids: tuple[int, ...]) -> list[dict]:
    """Encode each of :data:`PROBES` and take two search steps, as PyTorch search does."""
    runs = []
    for seed, (rows, steps, n_ext) in enumerate(PROBES):
        src, src_len, src_ext, features = probe_inputs(model, rows, steps, n_ext, seed, end_ids)
        state = model.encode(probe_batch(src, src_len, src_ext, n_ext, features))
        log_probs, one = model.step(state, torch.full((rows,), BOS, dtype=torch.long))
        _, two = model.step(one, log_probs.argmax(-1))
        inputs = {"src": src, "src_len": src_len, "src_ext": src_ext}
        if features is not None:
            inputs[FEATURES_INPUT] = features
        sizes = {"batch": rows, "src": steps, "ext": n_ext}
        if features is not None:
            sizes["features"] = features.size(1)
        runs.append({"sizes": sizes, "inputs": inputs, "states": (state, one, two)})
    return runs


def graph_specs(model: nn.Module, end_ids: tuple[int, ...] = ()) -> GraphSpecs:
    """The names, dtypes and axes of both graphs' tensors, read off the model run on two probe sizes:
    ``batch`` (rows: examples x beam), ``src`` (source positions), ``ext`` (OOV slots) and ``cache``
    (the Transformer decoder's positions so far, in the recurrent state after one and two steps)."""
    runs = _probe_runs(model, end_ids)
    init = runs[0]["states"][0]
    keys = tuple(k for k, v in init.items() if torch.is_tensor(v))
    static = set(getattr(model, "static_state_keys", ()))
    recurrent = tuple(k for k in keys if k not in static)
    attention = ATTENTION in runs[0]["states"][1]
    sizes = [r["sizes"] for r in runs]
    after = [{**s, "cache": c} for s in sizes for c in (1, 2)]  # after one step, after two

    def spec(name: str, tensors: list[torch.Tensor], at: list[dict]) -> TensorSpec:
        return TensorSpec(name, _dtype(tensors[0]), _axes([tuple(t.shape) for t in tensors], at))

    encoder_inputs = tuple(spec(n, [r["inputs"][n] for r in runs], sizes) for n in runs[0]["inputs"])
    encoder_outputs = tuple(spec(STATE + k, [r["states"][0][k] for r in runs], sizes) for k in keys)
    state_inputs = tuple(
        spec(STATE + k, [r["states"][m][k] for r in runs for m in (1, 2)], after)
        if k in recurrent
        else spec(STATE + k, [r["states"][0][k] for r in runs], sizes)
        for k in keys
    )
    step_inputs = (TensorSpec("prev_ids", "int64", ("batch",)), TensorSpec("ext_slots", "float32", ("ext",)))
    step_outputs = [TensorSpec("log_probs", "float32", LOG_PROBS_AXES)]
    step_outputs += [TensorSpec(NEXT + k, s.dtype, s.axes) for k, s in zip(keys, state_inputs) if k in recurrent]
    if attention:
        step_outputs.append(spec(ATTENTION, [r["states"][1][ATTENTION] for r in runs], sizes))
    return GraphSpecs(
        keys, recurrent, attention, encoder_inputs, encoder_outputs, step_inputs + state_inputs, tuple(step_outputs)
    )


def _dynamic_shapes(specs: tuple[TensorSpec, ...], dims: dict[str, torch.export.Dim]) -> list[dict]:
    return [{i: dims[a] for i, a in enumerate(s.axes) if isinstance(a, str)} for s in specs]


def _set_shapes(model_proto: onnx.ModelProto, outputs: tuple[TensorSpec, ...]) -> None:
    """Write the outputs' symbolic shapes into the graph and drop the exporter's intermediate shape
    annotations: torch.export gives an ``nn.GRU``'s output the probe's source length, which the ONNX
    ``GRU`` node does not have (it runs any length); onnxruntime infers the shapes again."""
    del model_proto.graph.value_info[:]
    by_name = {s.name: s for s in outputs}
    for out in model_proto.graph.output:
        dims = out.type.tensor_type.shape.dim
        for dim, axis in zip(dims, by_name[out.name].axes):
            if isinstance(axis, str):
                dim.dim_param = axis
            else:
                dim.dim_value = axis


# The recurrent ops whose decomposition torch.onnx swaps, while it captures a graph with dynamic sizes,
# for one that keeps the sequence length symbolic (a ``while_loop``; torch.export._patches).
RNN_OPS = (torch.ops.aten.lstm.input, torch.ops.aten.gru.input)


@contextmanager
def fresh_rnn_dispatch() -> Iterator[None]:
    """Each of :data:`RNN_OPS` resolves its decomposition afresh, inside and after the block.

    Written by hand because torch (2.13) swaps the decomposition by assigning it into the op's
    ``py_kernels`` without clearing the op's dispatch cache. Once an earlier export has run an
    ``nn.LSTM``/``nn.GRU`` outside the swap (its step graph's decompositions), the cache keeps the
    default decomposition, which loops over the sequence in Python: the next export in the same process
    specialised its source length to the trace's (a WEAN export, then a Read-Again one), and its graph
    failed on any other length."""

    def clear() -> None:
        for rnn_op in RNN_OPS:
            rnn_op._dispatch_cache.clear()  # torch's private cache: no public way to reset one op's

    clear()
    try:
        yield
    finally:
        clear()


def _export(
    module: nn.Module, args: tuple, names: tuple, dynamic: tuple, outputs: tuple, weights: SharedWeights, name: str
) -> None:
    """One graph through the dynamo exporter, written as ``name`` with its outputs' shapes, its weights
    in the export's shared weights file."""
    exporter_log = logging.getLogger("torch.onnx")
    level = exporter_log.level
    exporter_log.setLevel(logging.ERROR)  # its notes on optional packages (torchvision) it does not need
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), fresh_rnn_dispatch():
            warnings.simplefilter("ignore")  # the exporter's notes on its own internals; its progress lines
            program = torch.onnx.export(
                module,
                args,
                dynamo=True,
                opset_version=OPSET,
                input_names=list(names),
                output_names=[s.name for s in outputs],
                dynamic_shapes=dynamic,
                custom_translation_table=CUSTOM_TRANSLATIONS,
                verbose=False,
                optimize=True,
            )
    finally:
        exporter_log.setLevel(level)
    proto = program.model_proto
    _set_shapes(proto, outputs)
    weights.save(proto, name)


def export_graphs(model: nn.Module, out_dir: Path, end_ids: tuple[int, ...] = ()) -> GraphSpecs:
    """Write ``encoder.onnx`` and ``step.onnx`` of ``model`` under ``out_dir``, their weights in
    ``weights.bin`` (:mod:`pipeline.serving.onnx_weights`); returns their specs.
    ``end_ids``: the source ids that end a sentence (:func:`sentence_end_ids`)."""
    rows, steps, n_ext = PROBES[0]
    dims = {
        "batch": torch.export.Dim("batch", min=1),
        "src": torch.export.Dim("src", min=1),
        "ext": torch.export.Dim("ext", min=1),  # the search gives at least one slot (it drops the unused one)
        "cache": torch.export.Dim("cache", min=0),
        "features": torch.export.Dim("features", min=1),
    }
    src, src_len, src_ext, features = probe_inputs(model, rows, steps, n_ext, 0, end_ids)
    enc_args = (src, src_len, src_ext) + ((features,) if features is not None else ())
    weights = SharedWeights(out_dir)
    with exportable(model, end_ids) as traced:
        specs = graph_specs(traced, end_ids)  # through the export's encoder: it reads the sentence ends from src
        with torch.no_grad():  # the sample state: after two steps (a cache of 2 positions: not specialised)
            state = traced.encode(probe_batch(src, src_len, src_ext, n_ext, features))
            log_probs, state = traced.step(state, torch.full((rows,), BOS, dtype=torch.long))
            prev = log_probs.argmax(-1)
            _, state = traced.step(state, prev)
        _export(
            EncoderGraph(traced, specs.keys),
            enc_args,
            tuple(s.name for s in specs.encoder_inputs),
            tuple(_dynamic_shapes(specs.encoder_inputs, dims)),
            specs.encoder_outputs,
            weights,
            ENCODER_FILE,
        )
        shapes = _dynamic_shapes(specs.step_inputs, dims)  # prev_ids, ext_slots, then *tensors (one argument)
        _export(
            StepGraph(traced, specs.keys, specs.recurrent, specs.attention),
            (prev, torch.zeros(n_ext), *(state[k] for k in specs.keys)),
            tuple(s.name for s in specs.step_inputs),
            (shapes[0], shapes[1], tuple(shapes[2:])),
            specs.step_outputs,
            weights,
            STEP_FILE,
        )
    return specs
