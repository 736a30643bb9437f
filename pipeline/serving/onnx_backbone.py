"""The ONNX export of a copy head on a pretrained backbone (:class:`models.backbone.BackboneSeq2Seq`:
``backbone_pointer_generator``, ``backbone_copynet``, ``backbone_pointer_softmax``, ``backbone_lm`` on
BART, T5, Marian ...) to the two graphs of :mod:`pipeline.serving.onnx_graphs`, so the same search
(:mod:`pipeline.serving.onnx_search`) and runtime (:class:`pipeline.serving.onnx_model.OnnxModel`) serve it.

- ``encoder.onnx``: ``src``, ``src_len``, ``src_ext`` -> ``state.<key>``: the backbone encoder's states
  (``memory``), the source mask and extended ids, what the head precomputes per source (CopyNet's
  tanh(h_j W_c) and selective-read scores, Pointer Softmax's allowed ids, coverage 0), and the backbone
  decoder's cache: the cross-attention keys and values of every layer (``bb_cross_k{i}``,
  ``bb_cross_v{i}`` (B, heads, S, d): *static*, never reordered by beam search) and empty self-attention
  ones (``bb_self_k{i}``, ``bb_self_v{i}`` (B, heads, 0, d)).
- ``step.onnx``: ``Seq2Seq.step`` of the model, every state tensor in, ``log_probs`` (R, V + X) out, the
  self-attention caches grown by one position (axis ``cache``), the head's recurrent state (coverage,
  the selective-read scores) and the copy attention ``attn`` (R, S).

The PyTorch model computes the cross-attention keys and values at its first step (Hugging Face's
``EncoderDecoderCache`` fills them when first asked); here the encoder graph computes them once per
source by running the decoder one step on a zero input and keeping only the cross-attention part of its
cache (a function of the encoder states alone), so every step graph is the same one (a cache that
exists from the start, one position longer each step). Nothing reads the rest of that step (the empty
self-attention caches are new zeros), so the exporter keeps only the cross-attention projections of the
decoder in the encoder graph: its other layers' weights are in the step graph alone. The step's numbers
are those of the PyTorch step: the self-attention over an empty cache plus the new position is the
attention over that position.

Everything else is :func:`pipeline.serving.onnx_graphs.export_graphs`: the probes that name the axes,
the dynamo exporter at opset 18 with its stable ``logaddexp``/``log_sigmoid`` translations.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from models.backbone import BackboneSeq2Seq
from models.seq2seq import State
from pipeline.serving.onnx_graphs import GraphSpecs, export_graphs

SELF_CACHE, CROSS_CACHE = "bb_self_", "bb_cross_"  # models.backbone's state keys of the decoder's cache


class BackboneExport(nn.Module):
    """A :class:`BackboneSeq2Seq` as :func:`export_graphs` reads a model: ``encode`` gives the state with
    the decoder's cache already in it (cross-attention keys and values computed, self-attention ones
    empty), ``step`` is the model's own."""

    encoder = None  # onnx_graphs.exportable swaps a BiGRU encoder here; the backbone's is traced as it is

    def __init__(self, model: BackboneSeq2Seq):
        super().__init__()
        self.model = model
        self.cfg = model.cfg
        self.static_state_keys = model.static_state_keys

    def encode(self, batch) -> State:
        state = self.model.encode(batch)
        memory = state["memory"]  # (B, S, D)
        x = memory.new_zeros(memory.size(0), 1, memory.size(2))  # (B, 1, D): any input; only the cross part is kept
        _, _, cache = self.model.run_decoder(state, x, self.model._cache(state))
        for key, value in self.model._cache_state(cache).items():
            # cross (B, heads, S, d) as computed; self (B, heads, 0, d): no position decoded yet. New zeros,
            # not a slice of the step's own: nothing then reads the decoder's layers past their cross-attention
            # projections, so the exporter drops them (their weights, the output layer's, a step per source).
            b, heads, _, d = value.shape
            state[key] = value if key.startswith(CROSS_CACHE) else value.new_zeros(b, heads, 0, d)
        return state

    def step(self, state: State, prev_ids: torch.Tensor) -> tuple[torch.Tensor, State]:
        return self.model.step(state, prev_ids)


def export_backbone_graphs(model: BackboneSeq2Seq, out_dir: Path) -> GraphSpecs:
    """Write ``encoder.onnx`` and ``step.onnx`` of a model on a pretrained backbone under ``out_dir``."""
    return export_graphs(BackboneExport(model), out_dir)
