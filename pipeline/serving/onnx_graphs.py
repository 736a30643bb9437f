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

Both graphs call the model's own ``encode`` and ``step``, so every mechanism's maths is the code the
PyTorch search runs. Two things differ from a search step, both numerically the same function:

- the bidirectional GRU encoder runs as two unidirectional ``nn.GRU`` over the padded batch (ONNX
  ``GRU`` nodes; the backward one over each row reversed within its length), because the CPU encoder
  (``models.bigru``) is a Python loop over source positions, which an export would unroll for one
  source length (:class:`ExportBiGRU`);
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

import onnx
import torch
from onnxscript import opset18 as op
from onnxscript.function_libs.torch_lib.ops.core import aten_slice_scatter
from torch import nn

from models.encoder import BiGRUEncoder, TransformerEncoder
from models.specials import BOS, PAD

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


# The encoders the export traces: the BiGRU (as ExportBiGRU) and the Transformer encoder. Another (Read-Again's,
# a Python loop over the sentences of each source) would be unrolled for the traced source.
TRACED_ENCODERS = (BiGRUEncoder, TransformerEncoder)


def untraceable(model: nn.Module) -> str | None:
    """Why ``model`` cannot be exported, before anything is traced; None when it may be."""
    if not isinstance(model.encoder, TRACED_ENCODERS):
        return (
            f"its encoder ({type(model.encoder).__name__}) is not one the export traces (the BiGRU or the Transformer)"
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


def probe_batch(
    src: torch.Tensor, src_len: torch.Tensor, src_ext: torch.Tensor, n_ext: int, features=None
) -> SimpleNamespace:
    """The fields of a ``models.batch.Batch`` that ``Seq2Seq.encode`` reads."""
    return SimpleNamespace(src=src, src_len=src_len, src_ext=src_ext, n_ext=n_ext, features=features)


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
def exportable(model: nn.Module) -> Iterator[nn.Module]:
    """``model`` ready to trace (see the module docstring): eval mode, parameters frozen, gradients
    enabled, a ``BiGRUEncoder`` replaced by :class:`ExportBiGRU`; everything restored afterwards."""
    frozen = [(p, p.requires_grad) for p in model.parameters()]
    encoder = model.encoder
    training = model.training
    model.eval()
    for p, _ in frozen:
        p.requires_grad_(False)
    if isinstance(encoder, BiGRUEncoder):
        model.encoder = ExportBiGRU(encoder)
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


def probe_inputs(model: nn.Module, rows: int, steps: int, n_ext: int, seed: int) -> tuple:
    """A batch of ``rows`` sources of lengths up to ``steps`` with ``n_ext`` OOV slots (random ids of
    the model's vocabularies; the last row shorter, so padding is exercised): (src, src_len, src_ext,
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
def _probe_runs(model: nn.Module) -> list[dict]:
    """Encode each of :data:`PROBES` and take two search steps, as PyTorch search does."""
    runs = []
    for seed, (rows, steps, n_ext) in enumerate(PROBES):
        src, src_len, src_ext, features = probe_inputs(model, rows, steps, n_ext, seed)
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


def graph_specs(model: nn.Module) -> GraphSpecs:
    """The names, dtypes and axes of both graphs' tensors, read off the model run on two probe sizes:
    ``batch`` (rows: examples x beam), ``src`` (source positions), ``ext`` (OOV slots) and ``cache``
    (the Transformer decoder's positions so far, in the recurrent state after one and two steps)."""
    runs = _probe_runs(model)
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


def _export(module: nn.Module, args: tuple, names: tuple, dynamic: tuple, outputs: tuple, path: Path) -> None:
    """One graph through the dynamo exporter, written to ``path`` with its outputs' shapes."""
    exporter_log = logging.getLogger("torch.onnx")
    level = exporter_log.level
    exporter_log.setLevel(logging.ERROR)  # its notes on optional packages (torchvision) it does not need
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
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
    onnx.checker.check_model(proto)
    onnx.save(proto, str(path))


def export_graphs(model: nn.Module, out_dir: Path) -> GraphSpecs:
    """Write ``encoder.onnx`` and ``step.onnx`` of ``model`` under ``out_dir``; returns their specs."""
    specs = graph_specs(model)
    rows, steps, n_ext = PROBES[0]
    dims = {
        "batch": torch.export.Dim("batch", min=1),
        "src": torch.export.Dim("src", min=1),
        "ext": torch.export.Dim("ext", min=1),  # the search gives at least one slot (it drops the unused one)
        "cache": torch.export.Dim("cache", min=0),
        "features": torch.export.Dim("features", min=1),
    }
    src, src_len, src_ext, features = probe_inputs(model, rows, steps, n_ext, 0)
    enc_args = (src, src_len, src_ext) + ((features,) if features is not None else ())
    with exportable(model) as traced:
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
            out_dir / ENCODER_FILE,
        )
        shapes = _dynamic_shapes(specs.step_inputs, dims)  # prev_ids, ext_slots, then *tensors (one argument)
        _export(
            StepGraph(traced, specs.keys, specs.recurrent, specs.attention),
            (prev, torch.zeros(n_ext), *(state[k] for k in specs.keys)),
            tuple(s.name for s in specs.step_inputs),
            (shapes[0], shapes[1], tuple(shapes[2:])),
            specs.step_outputs,
            out_dir / STEP_FILE,
        )
    return specs
