"""Does this machine compute the same bits as another? ``python -m pipeline.runtime.math_check`` prints, as
JSON, this process's CPU, instruction sets and math pins (:mod:`pipeline.runtime.math_pins`; a ``python -m
pipeline.*`` process pins per params.yaml, like every stage), a fingerprint (sha256 prefix) of each
operation whose code path the pins fix, and whether each equals the reference machine's
(``reference_fingerprints.json`` beside this file: the machine, torch and date it was made on):
matrix products of an output layer's and a recurrence's shapes, also at misaligned addresses and with MKL's packed weight (MKL),
a batched product, ``exp``, ``log`` and ``tanh`` (MKL's VML), ``log_softmax``, ``logsumexp``,
``sigmoid`` and normal random numbers (ATen's vectorised kernels), a GRU forward and backward as
PyTorch computes it and as the encoder does (``models.bigru``), an LSTM forward and backward
(oneDNN) and a fused Adam step. Equal fingerprints mean the pipeline's arithmetic is the same here.

    python -m pipeline.runtime.math_check                 # exit 1 when a fingerprint differs from the reference
    python -m pipeline.runtime.math_check --write-reference   # make this machine the reference (maintainers)
"""

from __future__ import annotations

import datetime
import hashlib
import json
import sys
from pathlib import Path

import torch

from models.bigru import bigru
from models.extended import logsumexp
from models.seq2seq import packed_product_usable
from pipeline.runtime.math_pins import math_state

REFERENCE = Path(__file__).with_name("reference_fingerprints.json")


def _digest(*tensors: torch.Tensor) -> str:
    h = hashlib.sha256()
    for t in tensors:
        h.update(t.detach().contiguous().numpy().tobytes())
    return h.hexdigest()[:12]


def _misaligned(x: torch.Tensor, offset: int) -> torch.Tensor:
    """A copy of ``x`` starting ``offset`` floats past a 64-byte boundary."""
    buffer = torch.empty(x.numel() + 16)
    view = buffer[offset : offset + x.numel()].view_as(x)
    view.copy_(x)
    return view


def _packed_product(rows: torch.Tensor, weight: torch.Tensor) -> str:
    """MKL's packed-weight product, as a search step of one sentence's beam computes its output
    layer (models.seq2seq.OutputLayer.project)."""
    if not packed_product_usable(rows, weight):
        return "unavailable"
    packed = torch.ops.mkl._mkl_reorder_linear_weight(weight, rows.size(0))
    return _digest(torch.ops.mkl._mkl_linear(rows, packed, weight, torch.zeros(weight.size(0)), rows.size(0)))


def fingerprints(seed: int = 0) -> dict[str, str]:
    """One digest per operation on fixed seeded inputs (one thread)."""
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(seed)
    a, b = torch.randn(64, 300, generator=gen), torch.randn(300, 1000, generator=gen)
    s, w = torch.randn(640, 300, generator=gen), torch.randn(4000, 300, generator=gen)
    x = torch.randn(50_000, generator=gen)
    out = {
        "randn": _digest(torch.randn(4096, generator=gen)),
        "matmul": _digest(a @ b),
        "matmul_output_layer": _digest(torch.nn.functional.linear(s, w)),
        "matmul_one_row": _digest(torch.nn.functional.linear(s[:1], w)),
        "matmul_misaligned": _digest(_misaligned(s[:10], 3) @ _misaligned(w, 5).t()),
        "matmul_packed": _packed_product(s[:10], w),
        "bmm": _digest(torch.bmm(torch.randn(8, 30, 50, generator=gen), torch.randn(8, 50, 40, generator=gen))),
        "exp": _digest(torch.exp(x)),
        "log": _digest(torch.log(x.abs() + 1e-3)),
        "tanh": _digest(torch.tanh(x)),
        "sigmoid": _digest(torch.sigmoid(x)),
        "log_softmax": _digest(torch.log_softmax(a @ b, dim=-1)),
        "logsumexp": _digest(logsumexp(a @ b)),
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
    gru = torch.nn.GRU(64, 32, bidirectional=True, batch_first=True)
    lengths = torch.tensor([12, 5, 9, 1] * 4)
    y, h = bigru(gru, seq.transpose(0, 1), lengths)  # (B, T, 2H)
    (y.pow(2).sum() + h.sum()).backward()
    out["bigru"] = _digest(y, *(p.grad for p in gru.parameters()))
    opt = torch.optim.Adam(gru.parameters(), lr=1e-3, fused=True)
    opt.step()
    out["adam_fused"] = _digest(*gru.parameters())
    return out


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--params", default=None, help="params file whose deterministic settings decide the pins")
    parser.add_argument(
        "--write-reference", action="store_true", help=f"write this machine's fingerprints to {REFERENCE.name}"
    )
    args = parser.parse_args()
    state = math_state()
    prints = fingerprints()
    if args.write_reference:
        if state["math_pinned"] != "true":
            raise SystemExit(
                f"not pinned ({state['math_pinned_why']}): a reference must be made with the pins in force"
            )
        reference = {
            "cpu": state["cpu"],
            "cpu_isa": state["cpu_isa"],
            "torch": torch.__version__,
            "date": datetime.date.today().isoformat(),
            "fingerprints": prints,
        }
        REFERENCE.write_text(json.dumps(reference, indent=2) + "\n", encoding="utf-8")
    reference = json.loads(REFERENCE.read_text(encoding="utf-8")) if REFERENCE.exists() else {"fingerprints": {}}
    same = {op: prints[op] == reference["fingerprints"].get(op) for op in prints}
    print(
        json.dumps(
            {
                **state,
                "torch": torch.__version__,
                "fingerprints": prints,
                "reference": {k: reference.get(k) for k in ("cpu", "torch", "date")},
                "equal_to_reference": same,
            },
            indent=2,
        )
    )
    if not all(same.values()):
        sys.exit(1)


if __name__ == "__main__":
    main()
