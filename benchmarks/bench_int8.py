"""What does ``copyseq export --int8`` change: size, speed, and what trained models output?

1. **Trained models, on validation.** Every row of ``--task`` with a checkpoint (or ``--rows``) is exported
   twice from ``data/checkpoints/<task>/<row>`` (:func:`pipeline.serving.export.export_onnx`, as ``copyseq
   export`` and ``copyseq export --int8`` do), and both exports decode the task's validation split with
   the evaluate stage's settings for the row (:func:`pipeline.serving.onnx_predictor.decode_rows`, one
   onnxruntime thread). Per row: the weights file's MB, validation top-1 (the best output equals the
   reference, as the evaluate stage counts it) of each, the examples right in one only, the share of
   examples whose best output is the same, the share whose n-best lists are identical, and the decoding
   time of each. The test split is never read.
2. **``--backbone bart-base``**: the pointer-generator head (coverage) on a BART-base-shaped backbone with
   fresh weights (:func:`benchmarks.bench_export.write_backbone_model`), exported both ways: MB, and
   sentences/s of :class:`pipeline.serving.onnx_predictor.OnnxPredictor` one sentence per request, greedy
   and beam 10, on ``--threads`` threads, with the share of identical outputs; and a ``predict --runtime
   onnx --threads 1`` process answering one sentence at beam 10: seconds to its answer and its peak RSS.
   Fresh weights say how fast and how small, not what a trained model loses: part 1 says that.

    .venv/bin/python -m benchmarks.bench_int8 --task copy_rules
    .venv/bin/python -m benchmarks.bench_int8 --rows --backbone bart-base --threads 1 2
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.bench_export import cold_start, rate, sentences, write_backbone_model
from pipeline.config.params import project_root
from pipeline.config.paths import TaskPaths
from pipeline.config.rows import stage_params
from pipeline.config.schema import check_params_file
from pipeline.decoding.settings import EvalConfig
from pipeline.io.shards import read_split
from pipeline.serving.export import ExportRefused, Source, checkpoint_source, export_onnx
from pipeline.serving.onnx_model import OnnxModel
from pipeline.serving.onnx_predictor import OnnxPredictor, decode_rows
from pipeline.serving.onnx_weights import WEIGHTS_FILE
from pipeline.vocab.vocabulary import FEATURES_VOCAB, Vocab

KINDS = ("float32", "int8")


def megabytes(export: Path) -> float:
    return (export / WEIGHTS_FILE).stat().st_size / 1e6


def trained_row(task: str, row: str, params_file: str | None, tmp: Path) -> dict:
    """Both exports of one trained row decoding the validation split."""
    paths = TaskPaths(task, project_root(params_file))
    cfg = EvalConfig.from_params(stage_params(check_params_file(params_file), task, row))
    source = checkpoint_source(paths.checkpoints(row), task, row, params_file)
    vocab_dir = source.vocab_dir
    table = read_split(paths.split("valid"))
    golds = table.column("tgt").to_pylist()
    features = table.column("features").to_pylist() if "features" in table.column_names else None
    vocabs = (Vocab.load(vocab_dir / "src.vocab"), Vocab.load(vocab_dir / "tgt.vocab"))
    features_vocab = Vocab.load(vocab_dir / FEATURES_VOCAB) if (vocab_dir / FEATURES_VOCAB).is_file() else None
    result = {"row": row, "examples": len(golds)}
    records = {}
    for kind in KINDS:
        export = tmp / f"{row}-{kind}"
        export_onnx(source, export, int8=kind == "int8")
        start = time.perf_counter()
        records[kind] = decode_rows(
            OnnxModel(export, threads=1),
            table.column("src").to_pylist(),
            *vocabs,
            cfg,
            features=features,
            features_vocab=features_vocab,
        )
        result[f"{kind} s"] = time.perf_counter() - start
        result[f"{kind} MB"] = megabytes(export)
        result[f"{kind} top1"] = 100 * sum(r["pred"] == g for r, g in zip(records[kind], golds)) / len(golds)
    pairs = list(zip(*(records[kind] for kind in KINDS)))
    right = [(a["pred"] == g, b["pred"] == g) for (a, b), g in zip(pairs, golds)]
    result["lost"] = sum(f and not q for f, q in right)  # right in float32 only
    result["gained"] = sum(q and not f for f, q in right)  # right in int8 only
    result["same best"] = 100 * sum(a["pred"] == b["pred"] for a, b in pairs) / len(pairs)
    result["same n-best"] = 100 * sum(a["nbest"] == b["nbest"] for a, b in pairs) / len(pairs)
    return result


def backbone_row(shape: str, threads: list[int], count: int, src_len: int, max_len: int, tmp: Path) -> list[dict]:
    """The pointer-generator head on a ``shape``-shaped BART, both exports, one sentence per request."""
    row = write_backbone_model(tmp, "backbone_pointer_generator", shape, max_len)
    exports = {}
    for kind in KINDS:
        exports[kind] = tmp / f"backbone-{kind}"
        export_onnx(
            Source(row.ckpt / "model.pt", row.vocab_dir, row.config, None, str(row.ckpt)), exports[kind], kind == "int8"
        )
    one = sentences(1, row.words, src_len, seed=99)[0]
    starts = {}
    for kind in KINDS:
        command = [sys.executable, "-m", "pipeline.serving.predict", "--runtime", "onnx", "--model", str(exports[kind])]
        starts[kind] = cold_start([*command, "--threads", "1"], one, 1)[:2]  # (s to the answer, peak RSS MB)
    results = []
    for n in threads:
        result = {"threads": n, "starts": starts, **{f"{kind} MB": megabytes(exports[kind]) for kind in KINDS}}
        for name, beam in (("greedy", 1), ("beam10", 10)):
            texts = sentences(count, row.words, src_len, seed=n)
            outputs = {}
            for kind in KINDS:
                predictor = OnnxPredictor(exports[kind], threads=n)
                result[f"{kind} {name}"], outputs[kind] = rate(predictor.predict, texts, 1, beam, max_len)
            result[f"same {name}"] = 100 * sum(a == b for a, b in zip(*outputs.values())) / len(texts)
        results.append(result)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", default="copy_rules")
    parser.add_argument("--rows", nargs="*", default=None, help="rows (default: every trained row; none: skip)")
    parser.add_argument("--params", default=None, help="params file (default: the repository's)")
    parser.add_argument("--backbone", choices=("bart-base", "tiny"), help="also a head on a BART of this shape")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="threads of the backbone part")
    parser.add_argument("--sentences", type=int, default=16, help="sentences of the backbone part")
    parser.add_argument("--src-len", type=int, default=30)
    parser.add_argument("--max-len", type=int, default=30)
    args = parser.parse_args(argv)
    params = check_params_file(args.params)
    paths = TaskPaths(args.task, project_root(args.params))
    if args.rows is None:
        args.rows = [m for m in params["mechanisms"] if (paths.checkpoints(m) / "model.pt").is_file()]
    with tempfile.TemporaryDirectory(prefix="bench-int8-") as tmp:
        if args.rows:
            print(f"{args.task}, validation split, one onnxruntime thread:\n")
            print(
                "| row | examples | weights MB float32 -> int8 | top-1 float32 | top-1 int8 | right in float32 only "
                "| right in int8 only | same best output | same n-best list | decode s float32 -> int8 |"
            )
            print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
            for row in args.rows:
                try:
                    r = trained_row(args.task, row, args.params, Path(tmp))
                except ExportRefused as err:
                    print(f"| {row} | not exported: {str(err).split(': ', 1)[-1]} | | | | | | | | |")
                    continue
                print(
                    f"| {row} | {r['examples']} | {r['float32 MB']:.2f} -> {r['int8 MB']:.2f} | "
                    f"{r['float32 top1']:.1f} | {r['int8 top1']:.1f} | {r['lost']} | {r['gained']} | "
                    f"{r['same best']:.1f}% | {r['same n-best']:.1f}% "
                    f"| {r['float32 s']:.1f} -> {r['int8 s']:.1f} |",
                    flush=True,
                )
        if args.backbone:
            print(f"\nThe pointer-generator head (coverage) on a {args.backbone}-shaped BART, fresh weights,")
            print(f"{args.sentences} sentences of {args.src_len} words, one per request, up to {args.max_len} steps:\n")
            print(
                "| threads | weights MB float32 -> int8 | greedy sentences/s float32 -> int8 | same | "
                "beam 10 sentences/s float32 -> int8 | same |"
            )
            print("|---:|---:|---:|---:|---:|---:|")
            results = backbone_row(args.backbone, args.threads, args.sentences, args.src_len, args.max_len, Path(tmp))
            for r in results:
                print(
                    f"| {r['threads']} | {r['float32 MB']:.1f} -> {r['int8 MB']:.1f} | "
                    f"{r['float32 greedy']:.2f} -> {r['int8 greedy']:.2f} ({r['int8 greedy'] / r['float32 greedy']:.2f}x) "
                    f"| {r['same greedy']:.0f}% | {r['float32 beam10']:.2f} -> {r['int8 beam10']:.2f} "
                    f"({r['int8 beam10'] / r['float32 beam10']:.2f}x) | {r['same beam10']:.0f}% |",
                    flush=True,
                )
            print("\n| predict process, one sentence, beam 10 | float32 | int8 |\n|---|---:|---:|")
            (f_s, f_mb), (q_s, q_mb) = (results[0]["starts"][kind] for kind in KINDS)
            print(f"| seconds to the answer | {f_s:.2f} | {q_s:.2f} |\n| peak RSS MB | {f_mb:.0f} | {q_mb:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
