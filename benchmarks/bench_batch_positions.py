"""How much does ``serving.max_batch_positions`` lower the peak memory of a busy ``predict`` process?

A CopyNet model at params.yaml's sizes with ``--vocab`` words and random weights (as bench_export
builds it) is exported, then 64 sentences of 30 words are decoded at beam 10 by ``predict`` in a fresh
process per runtime (``--checkpoint``, and ``--runtime onnx --model DIR``) and per ``--caps`` value of
``max_batch_positions`` (hypothesis rows x source tokens per decoding batch): the process's peak RSS
(VmHWM), its wall time, and whether every run wrote the same lines.

    python -m benchmarks.bench_batch_positions                      # 50,000 words, caps 100000 3000
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import yaml

from benchmarks.bench_export import cold_start, sentences, write_model
from pipeline.serving.export import Source, export_onnx


def with_cap(root: Path, export: Path, cap: int) -> tuple[Path, Path]:
    """(a params file, an export directory) whose ``max_batch_positions`` is ``cap``."""
    params = yaml.safe_load((root / "params.yaml").read_text(encoding="utf-8"))
    params.setdefault("serving", {})["max_batch_positions"] = cap
    params_file = root / f"params_{cap}.yaml"  # beside params.yaml: the same data/ paths
    params_file.write_text(yaml.safe_dump(params, sort_keys=False), encoding="utf-8")
    capped = root / f"export_{cap}"
    shutil.copytree(export, capped)
    serving = json.loads((capped / "serving.json").read_text(encoding="utf-8"))
    serving["max_batch_positions"] = cap
    (capped / "serving.json").write_text(json.dumps(serving, indent=1), encoding="utf-8")
    return params_file, capped


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vocab", type=int, default=50000)
    parser.add_argument("--caps", type=int, nargs="+", default=[100000, 3000])
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-batch-positions-") as tmp:
        root = Path(tmp)
        row = write_model(root, "copynet", args.vocab, 30)
        export_onnx(Source(row.ckpt / "model.pt", row.vocab_dir, row.config, None, str(row.ckpt)), root / "export")
        text = "\n".join(sentences(64, row.words, 30, seed=9))
        print(f"CopyNet, {args.vocab} words: 64 sentences of 30 words, beam 10, one process per run\n")
        print("| max_batch_positions | runtime | peak RSS MB | s |")
        print("|---:|---|---:|---:|")
        outputs = set()
        for cap in args.caps:
            params_file, export = with_cap(root, root / "export", cap)
            commands = {
                "torch": ["--checkpoint", str(row.ckpt), "--params", str(params_file)],
                "onnx": ["--runtime", "onnx", "--model", str(export), "--threads", "1"],
            }
            for runtime, command in commands.items():
                start = time.perf_counter()
                _, peak, output = cold_start([sys.executable, "-m", "pipeline.serving.predict", *command], text, 1)
                outputs.add(output)
                print(f"| {cap} | {runtime} | {peak:.0f} | {time.perf_counter() - start:.1f} |", flush=True)
        print(f"\nthe same lines from every run: {'yes' if len(outputs) == 1 else 'no'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
