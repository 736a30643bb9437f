"""Torch's fused recurrent layers (nn.GRU, nn.LSTM) under mixed precision.

Under CUDA autocast PyTorch runs cuDNN's RNN kernels in float16 whatever dtype autocast was asked
for: its autocast wrapper of ``_cudnn_rnn`` casts to half, bf16 autocast included (found on an
H100, torch 2.11: CopyNet's encoder memory came out float16 under ``train.amp: auto``, and filling
its mask with NEG (-1e9) raised "value cannot be converted to type c10::Half without overflow").
float16 holds neither NEG nor, without loss scaling, small gradients (they underflow to 0). So
:func:`run_rnn` runs the layer with autocast off, in float32; the rest of the model keeps
autocast's bf16 matrix products. Without autocast it is the plain call.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.utils.rnn import PackedSequence


def run_rnn(rnn: nn.Module, inputs: torch.Tensor | PackedSequence, hx=None):
    """``rnn(inputs, hx)``, in float32 and outside autocast when autocast is on for the inputs'
    device. ``hx``: None, a tensor (GRU) or an (h, c) pair (LSTM)."""
    device_type = (inputs.data if isinstance(inputs, PackedSequence) else inputs).device.type
    if not torch.is_autocast_enabled(device_type):
        return rnn(inputs, hx)
    if hx is not None:
        hx = tuple(h.float() for h in hx) if isinstance(hx, tuple) else hx.float()
    with torch.autocast(device_type, enabled=False):
        return rnn(inputs.float(), hx)
