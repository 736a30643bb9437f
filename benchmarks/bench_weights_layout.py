"""What does storing and loading the export's weights once save, against each graph with its own?

A copy head on a BART of ``--shape`` (random weights, as bench_export builds it) is exported as
``copyseq export`` writes it (``weights.bin``, each tensor once; the weights both graphs read loaded
once for both sessions), and a copy of that export is rewritten in the earlier layout: each graph
with all its weights inline, no shared loading (the backbone's embedding then twice on disk and in
memory). ``predict --runtime onnx --threads 1`` then answers one sentence at beam 10 in a fresh
process, the two layouts in turn, ``--runs`` times each: the time to the first answer and the peak
RSS (bench_export's ``cold_start``), their medians, the ratio pair by pair, and whether every run
wrote the same lines.

    python -m benchmarks.bench_weights_layout      # bart-base, CopyNet's head, 7 runs each: ~3 min
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

import onnx

from benchmarks.bench_export import BACKBONES, cold_start, sentences, write_backbone_model
from pipeline.io.files import sha256_tree, write_json_atomic
from pipeline.serving.export import Source, export_onnx
from pipeline.serving.onnx_model import MANIFEST
from pipeline.serving.onnx_predictor import SERVING_JSON
from pipeline.serving.onnx_weights import WEIGHTS_FILE


def inline_copy(export: Path, out: Path) -> None:
    """``export`` with every graph's weights inline (each graph its own copy) and no shared loading:
    the layout before ``weights.bin``."""
    shutil.copytree(export, out)
    for graph in out.glob("*.onnx"):
        proto = onnx.load(str(graph))  # its weights read from weights.bin into the graph
        for tensor in proto.graph.initializer:
            tensor.data_location = onnx.TensorProto.DEFAULT
            del tensor.external_data[:]
        onnx.save(proto, str(graph))
    (out / WEIGHTS_FILE).unlink()
    manifest = json.loads((out / MANIFEST).read_text(encoding="utf-8"))
    del manifest["weights"]
    write_json_atomic(out / MANIFEST, manifest)
    serving = json.loads((out / SERVING_JSON).read_text(encoding="utf-8"))  # the files' sha256, checked at loading
    serving["files"] = {p.name: sha256_tree(p) for p in sorted(out.iterdir()) if p.name != SERVING_JSON}
    write_json_atomic(out / SERVING_JSON, serving)


def size_mb(export: Path) -> float:
    return sum(p.stat().st_size for p in export.iterdir() if p.suffix in (".onnx", ".bin")) / 2**20


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", choices=BACKBONES, default="bart-base")
    parser.add_argument("--head", default="backbone_copynet")
    parser.add_argument("--runs", type=int, default=7, help="runs of each layout, in turn, after one warm-up each")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-weights-layout-") as tmp:
        root = Path(tmp)
        row = write_backbone_model(root, args.head, args.shape, 30)
        layouts = {"weights once (now)": root / "once", "each graph its own (before)": root / "own"}
        once, own = layouts.values()
        export_onnx(Source(row.ckpt / "model.pt", row.vocab_dir, row.config, None, str(row.ckpt)), once)
        inline_copy(once, own)
        text = sentences(1, row.words, 30)[0]
        runs: dict[str, list[tuple[float, float]]] = {name: [] for name in layouts}
        outputs = set()
        for i in range(args.runs + 1):  # the first round warms the page cache: not counted
            for name, export in layouts.items():
                command = [sys.executable, "-m", "pipeline.serving.predict", "--runtime", "onnx"]
                first, peak, output = cold_start([*command, "--model", str(export), "--threads", "1"], text, 1)
                outputs.add(output)
                if i:
                    runs[name].append((first, peak))
        print(f"{args.head} on a {args.shape}-shaped BART: one sentence at beam 10, {args.runs} runs each, medians\n")
        print("| layout | graphs + weights MB | s to the first answer | peak RSS MB |")
        print("|---|---:|---:|---:|")
        for name, export in layouts.items():
            seconds, peaks = zip(*runs[name])
            print(
                f"| {name} | {size_mb(export):.1f} | {statistics.median(seconds):.2f} | {statistics.median(peaks):.0f} |"
            )
        pairs = list(zip(*runs.values()))
        time_ratio = statistics.median(a[0] / b[0] for a, b in pairs)
        rss_ratio = statistics.median(a[1] / b[1] for a, b in pairs)
        print(f"| now / before, pair by pair | | {time_ratio:.2f} | {rss_ratio:.2f} |")
        print(f"\nsame output in every run: {'yes' if len(outputs) == 1 else 'no'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
