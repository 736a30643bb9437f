"""Does a model whose graph holds more than 2 GB of weights export to ONNX and answer as PyTorch?

protobuf refuses to serialize a message over 2 GB, so a graph with its weights inline cannot be
saved or checked past that size. The export keeps the weights in ``weights.bin``
(:mod:`pipeline.serving.onnx_weights`), out of the graphs. This builds a pointer-generator with random
weights and a large decoder vocabulary (``--vocab`` words at emb = hidden = 1024: the step graph's
embedding and output layer together over 2 GB), exports it, shows that the step graph's weights would
not fit inline (the in-memory check that saving inline needs), and runs four decoder steps on three
sources against the PyTorch model.

    python -m benchmarks.bench_export_large            # 260,000 words: 2.3 GB of weights, under 2 min, 8 GB RAM
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import torch

from models.extended import NEG
from models.registry import build_model, model_config
from models.specials import BOS
from pipeline.io.files import write_json_atomic
from pipeline.serving.onnx_graphs import STEP_FILE, export_graphs, probe_batch, probe_inputs
from pipeline.serving.onnx_model import FORMAT, MANIFEST, OnnxModel
from pipeline.serving.onnx_weights import WEIGHTS_FILE

SIZE = 1024  # emb and hidden


def inline_check(step_graph: Path) -> str:
    """What the in-memory checker (the one an inline save goes through) says of the step graph with
    its weights loaded into it."""
    proto = onnx.load(str(step_graph))
    inline_gb = sum(len(t.raw_data) for t in proto.graph.initializer) / 1e9
    try:
        onnx.checker.check_model(proto)
        verdict = "passes"
    except Exception as err:  # noqa: BLE001 - protobuf's EncodeError, or onnx's ValueError on the size
        verdict = f"fails: {type(err).__name__}: {str(err)[:80]}"
    return f"{inline_gb:.2f} GB of weights inline; the in-memory check {verdict}"


@torch.no_grad()
def largest_difference(model, out: Path, specs) -> float:
    """Four greedy steps on three sources of nine words (two source-only words): the largest
    difference of log p over V + X between onnxruntime and PyTorch."""
    write_json_atomic(
        out / MANIFEST,
        {
            "format": FORMAT,
            "graphs": {"encoder": {"file": "encoder.onnx"}, "step": {"file": STEP_FILE}},
            "state": {"keys": list(specs.keys), "recurrent": list(specs.recurrent)},
            "vocab": {"tgt_size": model.cfg.tgt_vocab},
        },
    )
    onnx_model = OnnxModel(out, threads=2)
    src, src_len, src_ext, _ = probe_inputs(model, 3, 9, 2, 11)
    state = model.encode(probe_batch(src, src_len, src_ext, 2))
    onnx_state = onnx_model.encode({"src": src.numpy(), "src_len": src_len.numpy(), "src_ext": src_ext.numpy()})
    prev, worst = torch.full((3,), BOS, dtype=torch.long), 0.0
    for _ in range(4):
        log_probs, state = model.step(state, prev)
        got, updates = onnx_model.step(onnx_state, prev.numpy(), 2)
        onnx_state.update(updates)
        want = log_probs.numpy()
        live = want > NEG / 2
        worst = max(worst, float(np.abs(got[live] - want[live]).max()))
        prev = log_probs.argmax(-1)
    return worst


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vocab", type=int, default=260_000, help="decoder vocabulary")
    args = parser.parse_args(argv)
    cfg = model_config({"emb": SIZE, "hidden": SIZE}, "pointer_generator", src_vocab=1000, tgt_vocab=args.vocab)
    torch.manual_seed(0)
    model = build_model("pointer_generator", cfg).eval()
    weights_gb = sum(p.numel() * p.element_size() for p in model.parameters()) / 1e9
    print(f"pointer_generator, emb = hidden = {SIZE}, {args.vocab:,} decoder words: {weights_gb:.2f} GB of weights")
    with tempfile.TemporaryDirectory(prefix="bench-export-large-") as tmp:
        out = Path(tmp)
        start = time.perf_counter()
        specs = export_graphs(model, out)
        print(f"export: {time.perf_counter() - start:.0f} s")
        for name in ("encoder.onnx", STEP_FILE, WEIGHTS_FILE):
            print(f"  {name}: {(out / name).stat().st_size / 1e6:,.1f} MB")
        print(f"step graph: {inline_check(out / STEP_FILE)}")
        print(f"largest |log p| difference from PyTorch, 4 steps x 3 rows: {largest_difference(model, out, specs):.1e}")
    print(f"peak RSS of this process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6:.1f} GB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
