"""What a search returns or raises, without torch: the n-best entries (:class:`Hypothesis`) and the
interruptions a deadline or a stop event cause (:func:`check_interrupt`). Shared by the PyTorch search
(:mod:`pipeline.decoding.search`) and the onnxruntime one (:mod:`pipeline.serving.onnx_search`), so a
server catches one set of exceptions whichever runtime decodes."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass


@dataclass
class Hypothesis:
    ids: list[int]  # extended ids, without <s>, up to and including </s> when finished
    score: float  # sum of log-probabilities (before any length penalty)
    rank_score: float  # score used for ranking (length-penalised when asked)
    trace: dict | None = None  # per-step weights when asked: greedy's trace_keys, beam's "attn" (T, S)


class DecodeInterrupted(RuntimeError):
    """Decoding stopped before it finished; nothing of it is returned."""


class DecodeTimeout(DecodeInterrupted, TimeoutError):
    """The decoding deadline passed (a request that took too long)."""


class DecodeCancelled(DecodeInterrupted):
    """The stop event was set (e.g. the server is shutting down)."""


def check_interrupt(deadline: float | None = None, stop: threading.Event | None = None, step: int = 0) -> None:
    """Raise :class:`DecodeCancelled` when ``stop`` is set, :class:`DecodeTimeout` when
    ``time.monotonic()`` is past ``deadline``; ``step`` (the decoding step) goes into the message."""
    if stop is not None and stop.is_set():
        raise DecodeCancelled(f"decoding cancelled at step {step}")
    if deadline is not None:
        late = time.monotonic() - deadline
        if late > 0:
            raise DecodeTimeout(f"decoding deadline passed {late:.2f} s ago, at step {step}")
