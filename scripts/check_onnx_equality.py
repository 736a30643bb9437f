"""Do a task's trained models give the same n-best lists exported to ONNX as in PyTorch, on its test split?

For every row (``--mechanisms``; default: every row of params.yaml trained for the task), the
checkpoint ``data/checkpoints/<task>/<row>`` is exported (:func:`pipeline.serving.export.export_onnx`,
as ``copyseq export`` does) and the split (its first ``--limit`` rows) is decoded twice with the
evaluate stage's settings for that row: by PyTorch (:func:`pipeline.decoding.decode.decode_table`, the
evaluate stage's path) and by onnxruntime and numpy (:func:`pipeline.serving.onnx_predictor.decode_rows`,
in the same batches). Prints one markdown row per mechanism:

    | mechanism | examples | identical n-best lists | max score difference | PyTorch s | ONNX s |

"identical" means the same hypotheses in the same order (the evaluate stage's ``nbest``: top 10 with
beam 10); the score difference is between the unrounded scores of the hypotheses of the identical
lists (the records round them to 4 places, so both searches are recorded as they return). A row that cannot be
exported is listed with the export's one-line reason. Runs in a project checkout after ``dvc repro``:

    .venv/bin/python scripts/check_onnx_equality.py --task copy_rules --mechanisms copynet pointer_generator
"""

from __future__ import annotations

from pipeline.runtime.math_pins import pin_math_libraries  # noqa: E402  (before torch loads)

pin_math_libraries()

import argparse  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from dataclasses import replace  # noqa: E402
from pathlib import Path  # noqa: E402

import pyarrow.compute as pc  # noqa: E402
import torch  # noqa: E402

from pipeline.config.params import project_root  # noqa: E402
from pipeline.config.paths import TaskPaths  # noqa: E402
from pipeline.config.rows import stage_params  # noqa: E402
from pipeline.config.schema import check_params_file  # noqa: E402
from pipeline.decoding import decode as decode_module  # noqa: E402
from pipeline.decoding.decode import decode_table  # noqa: E402
from pipeline.decoding.search import beam_search as torch_search  # noqa: E402
from pipeline.decoding.settings import EvalConfig  # noqa: E402
from pipeline.io.shards import first_rows, read_split  # noqa: E402
from pipeline.serving import onnx_predictor  # noqa: E402
from pipeline.serving.export import ExportRefused, checkpoint_source, export_onnx  # noqa: E402
from pipeline.serving.onnx_model import OnnxModel  # noqa: E402
from pipeline.serving.onnx_predictor import decode_rows  # noqa: E402
from pipeline.serving.onnx_search import beam_search as onnx_search  # noqa: E402
from pipeline.training.checkpoints import load_model  # noqa: E402
from pipeline.vocab.vocabulary import FEATURES_VOCAB, Vocab  # noqa: E402


def recording(search, calls: list):
    """``search`` that also appends what it returns to ``calls``: the hypotheses with their unrounded
    scores, per batch, in the order the batches are decoded (the same order on both sides)."""

    def recorded(*args, **kwargs):
        out = search(*args, **kwargs)
        calls.extend(out)
        return out

    return recorded


def compare(torch_records, onnx_records, torch_hyps, onnx_hyps) -> tuple[int, float]:
    """(n-best lists identical, the largest difference of unrounded scores over their hypotheses)."""
    same, worst = 0, 0.0
    for a, b in zip(torch_records, onnx_records, strict=True):
        same += a["nbest"] == b["nbest"]
    for a, b in zip(torch_hyps, onnx_hyps, strict=True):
        if [h.ids for h in a] == [h.ids for h in b]:
            worst = max([worst, *(abs(x.score - y.score) for x, y in zip(a, b))])
    return same, worst


def check_row(task: str, row: str, params_file: str | None, split: str, limit: int | None, threads: int) -> dict:
    root = project_root(params_file)
    paths = TaskPaths(task, root)
    params = stage_params(check_params_file(params_file), task, row)
    cfg = EvalConfig.from_params(params)
    checkpoint = paths.checkpoints(row)
    source = checkpoint_source(checkpoint, task, row, params_file)
    vocab_dir = source.vocab_dir
    table = first_rows(read_split(paths.split(split)), limit)
    vocabs = (Vocab.load(vocab_dir / "src.vocab"), Vocab.load(vocab_dir / "tgt.vocab"))
    features_vocab = Vocab.load(vocab_dir / FEATURES_VOCAB) if (vocab_dir / FEATURES_VOCAB).is_file() else None
    with tempfile.TemporaryDirectory(prefix=f"onnx-{row}-") as tmp:
        export_onnx(source, Path(tmp) / "export")
        onnx_model = OnnxModel(Path(tmp) / "export", threads=threads)
        model, _ = load_model(checkpoint / "model.pt", row, "cpu", vocabs)
        torch_hyps, onnx_hyps = [], []
        decode_module.beam_search = recording(torch_search, torch_hyps)
        onnx_predictor.beam_search = recording(onnx_search, onnx_hyps)
        start = time.perf_counter()
        want = decode_table(
            model, table, *vocabs, cfg, torch.device("cpu"), desc=f"{row} torch", features_vocab=features_vocab
        )
        torch_s = time.perf_counter() - start
        lengths = (
            pc.list_value_length(table.column("src")).to_numpy() + pc.list_value_length(table.column("tgt")).to_numpy()
        ).tolist()
        features = table.column("features").to_pylist() if "features" in table.column_names else None
        start = time.perf_counter()
        got = decode_rows(
            onnx_model,
            table.column("src").to_pylist(),
            *vocabs,
            replace(cfg),
            features=features,
            features_vocab=features_vocab,
            lengths=lengths,
        )
        onnx_s = time.perf_counter() - start
    decode_module.beam_search, onnx_predictor.beam_search = torch_search, onnx_search
    same, worst = compare(want, got, torch_hyps, onnx_hyps)
    return {
        "mechanism": row,
        "examples": len(want),
        "identical": same,
        "max_diff": worst,
        "torch_s": torch_s,
        "onnx_s": onnx_s,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", default="copy_rules")
    parser.add_argument("--mechanisms", nargs="*", default=None, help="rows (default: every trained row)")
    parser.add_argument("--params", default=None, help="params file (default: the repository's)")
    parser.add_argument("--split", default="test")
    parser.add_argument("--limit", type=int, default=None, help="the first N rows of the split (default: all)")
    parser.add_argument("--threads", type=int, default=1, help="torch and onnxruntime threads (default 1)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    params = check_params_file(args.params)
    paths = TaskPaths(args.task, project_root(args.params))
    rows = args.mechanisms or [m for m in params["mechanisms"] if (paths.checkpoints(m) / "model.pt").is_file()]
    print("| mechanism | examples | identical n-best lists | max score difference | PyTorch s | ONNX s |")
    print("|---|---:|---:|---:|---:|---:|")
    for row in rows:
        try:
            r = check_row(args.task, row, args.params, args.split, args.limit, args.threads)
        except ExportRefused as err:
            print(f"| {row} | not exported: {str(err).split(': ', 1)[-1]} | | | | |")
            continue
        print(
            f"| {r['mechanism']} | {r['examples']} | {r['identical']} | {r['max_diff']:.1e} | "
            f"{r['torch_s']:.1f} | {r['onnx_s']:.1f} |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
