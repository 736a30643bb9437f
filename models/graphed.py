"""CUDA graphs of the recurrent decoder's teacher forcing (``train.cuda_graphs``).

Phase 1 of teacher forcing (``Seq2Seq.teacher_forced``) runs the decoder recurrence one step at a
time: T steps of a few dozen small kernels each, forward and backward, every one launched from
Python. On a GPU the step waits on those launches (measured 10-60 ms a step on an H100 whatever the
model size: docs/training.md). A CUDA graph records the whole loop once per batch shape, forward and
backward, and replays it with one launch.

A graph holds fixed shapes, so the training loop pads each batch up to a bucketed shape first
(:func:`bucket_shape`, :meth:`models.batch.Batch.padded`): B, S and T to multiples of ``BATCH_STEP``,
``SRC_STEP`` and ``TGT_STEP`` (T finer: every added target position is one more sequential step). The padding changes no real row's log-likelihood or gradient (added
source positions are masked out of attention and copying, added target positions and rows are
padding, which the objective zeroes: tests/models/test_graphed.py checks both, on the CPU too), and
token-budget batches then come in few shapes: one graph per shape, at most ``max_graphs`` (past that,
new shapes run eagerly).

How: :func:`torch.cuda.make_graphed_callables` over a module that runs the loop
(``Seq2Seq.step_through``); the decoder state's tensors are its inputs, the model's parameters its
further inputs, so the replayed backward pass hands every parameter its gradient through autograd as
the eager loop does. The encoder (one cuDNN call over a packed batch, whose lengths a graph would
freeze) and phase 2 (a few large products) stay eager. Under autocast the graphs need autocast's
weight cache off (``pipeline.runtime.device.autocast(cache=False)``).
"""

from __future__ import annotations

import logging

import torch
from torch import nn

log = logging.getLogger(__name__)

BATCH_STEP = 32  # rows: B is padded up to a multiple of this
SRC_STEP = 8  # source positions
TGT_STEP = 4  # target positions


def round_up(n: int, step: int) -> int:
    return -(-n // step) * step


def bucket_shape(batch) -> tuple[int, int, int]:
    """(B, S, T) of ``batch`` padded up to the graph buckets."""
    return (
        round_up(batch.src.size(0), BATCH_STEP),
        round_up(batch.src.size(1), SRC_STEP),
        round_up(batch.tgt_in.size(1), TGT_STEP),
    )


class _Loop(nn.Module):
    """The step-through recurrence as a module of tensors: (tgt_in, emb, *state tensors) -> the
    tensors it adds to the state (stacked per step, and the last step's updates)."""

    def __init__(self, model: nn.Module, keys: tuple[str, ...], constants: dict):
        super().__init__()
        self.model = model  # a submodule: its parameters become the graph's further inputs
        self.keys, self.constants = keys, constants
        self.out_keys: tuple[str, ...] | None = None

    def forward(self, tgt_in: torch.Tensor, emb: torch.Tensor, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        state = {**self.constants, **dict(zip(self.keys, tensors))}
        view = self.model.step_through(state, tgt_in, emb)
        if self.out_keys is None:  # what the loop made (the inputs it passes through stay outside the graph)
            self.out_keys = tuple(k for k, v in view.items() if torch.is_tensor(v) and not any(v is t for t in tensors))
        return tuple(view[k] for k in self.out_keys)


class GraphedRecurrence:
    """``Seq2Seq.step_through`` replayed from one CUDA graph per shape (see the module docstring)."""

    def __init__(self, model: nn.Module, max_graphs: int = 64):
        self.model, self.max_graphs = model, max_graphs
        self.graphs: dict[tuple, _Loop] = {}
        self.capture_seconds = 0.0
        self._warned = False

    def __call__(self, state: dict, tgt_in: torch.Tensor, emb: torch.Tensor) -> dict:
        keys = tuple(sorted(k for k, v in state.items() if torch.is_tensor(v)))
        constants = {k: v for k, v in state.items() if not torch.is_tensor(v)}
        if not all(isinstance(v, (int, float, bool, str, type(None))) for v in constants.values()):
            return self.model.step_through(state, tgt_in, emb)  # e.g. a pretrained decoder's cache object
        tensors = [state[k] for k in keys]
        signature = (
            keys,
            tuple(sorted(constants.items())),
            tuple((tuple(t.shape), t.dtype, t.requires_grad) for t in (tgt_in, emb, *tensors)),
            torch.is_autocast_enabled("cuda"),
        )
        loop = self.graphs.get(signature)
        if loop is None:
            if len(self.graphs) >= self.max_graphs:
                if not self._warned:
                    log.warning("%d CUDA graphs captured: new batch shapes train eagerly", self.max_graphs)
                    self._warned = True
                return self.model.step_through(state, tgt_in, emb)
            loop = self._capture(keys, constants, tgt_in, emb, tensors)
            self.graphs[signature] = loop
        outputs = loop(tgt_in, emb, *tensors)
        return {**state, **dict(zip(loop.out_keys, outputs))}

    def _capture(self, keys, constants, tgt_in, emb, tensors) -> _Loop:
        # The graph's own input buffers: leaves with the inputs' shapes and gradient flags.
        sample = tuple(t.detach().clone().requires_grad_(t.requires_grad) for t in (tgt_in, emb, *tensors))
        loop = _Loop(self.model, keys, constants)
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        # The warm-up runs draw dropout masks: keep the random stream where the eager loop would find it.
        rng = torch.cuda.get_rng_state(tgt_in.device)
        graphed = torch.cuda.make_graphed_callables(loop, sample, allow_unused_input=True)
        torch.cuda.set_rng_state(rng, tgt_in.device)
        end.record()
        end.synchronize()
        self.capture_seconds += begin.elapsed_time(end) / 1000
        return graphed
