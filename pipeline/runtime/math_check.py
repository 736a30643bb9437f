"""Does this machine compute the same bits as another? ``python -m pipeline.runtime.math_check`` prints, as
JSON, this process's CPU, instruction sets and math pins (:mod:`pipeline.runtime.math_pins`; a ``python -m
pipeline.*`` process pins per params.yaml, like every stage) and a fingerprint (sha256 prefix) of
each operation whose code path the pins fix: a matrix product and a batched one (MKL), ``exp`` and
``log`` (MKL's VML), ``log_softmax`` and normal random numbers (ATen's vectorised kernels), a GRU
forward and backward (MKL + ATen) and an LSTM forward and backward (oneDNN). Run it on two machines:
equal fingerprints mean the pipeline's arithmetic is the same there.
"""

from __future__ import annotations

import hashlib
import json

import torch

from pipeline.runtime.math_pins import math_state


def _digest(*tensors: torch.Tensor) -> str:
    h = hashlib.sha256()
    for t in tensors:
        h.update(t.detach().contiguous().numpy().tobytes())
    return h.hexdigest()[:12]


def fingerprints(seed: int = 0) -> dict[str, str]:
    """One digest per operation on fixed seeded inputs (one thread)."""
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(seed)
    a, b = torch.randn(64, 300, generator=gen), torch.randn(300, 1000, generator=gen)
    x = torch.randn(50_000, generator=gen)
    out = {
        "randn": _digest(torch.randn(4096, generator=gen)),
        "matmul": _digest(a @ b),
        "bmm": _digest(torch.bmm(torch.randn(8, 30, 50, generator=gen), torch.randn(8, 50, 40, generator=gen))),
        "exp": _digest(torch.exp(x)),
        "log": _digest(torch.log(x.abs() + 1e-3)),
        "log_softmax": _digest(torch.log_softmax(a @ b, dim=-1)),
    }
    seq = torch.randn(12, 16, 64, generator=gen)  # (T, B, E)
    torch.manual_seed(seed)
    for name, rnn in (
        ("gru", torch.nn.GRU(64, 32, bidirectional=True)),
        ("lstm", torch.nn.LSTM(64, 32, num_layers=2)),
    ):
        y, _ = rnn(seq)  # (T, B, H)
        y.pow(2).sum().backward()
        out[name] = _digest(y, *(p.grad for p in rnn.parameters()))
    return out


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--params", default=None, help="params file whose deterministic settings decide the pins")
    parser.parse_args()
    print(json.dumps({**math_state(), "torch": torch.__version__, "fingerprints": fingerprints()}, indent=2))


if __name__ == "__main__":
    main()
