"""What does serving an exported model with onnxruntime give against PyTorch: speed, cold start, memory?

For CopyNet and the pointer-generator (with coverage) at each ``--vocabs`` size, with random weights
and the sizes of params.yaml's ``model`` section (emb 64, hidden 128), a model is saved as the train
stage saves it, exported (:func:`pipeline.serving.export.export_onnx`), and served both ways:

1. throughput, in this process, for each ``--threads`` value (torch's intra-op threads, onnxruntime's):
   sentences/s of the predictors (:class:`pipeline.serving.predictor.Predictor`,
   :class:`pipeline.serving.onnx_predictor.OnnxPredictor`) with greedy decoding (beam 1) and beam 10,
   one sentence per request and 64 per request; sources of ``--src-len`` words (a few outside the
   vocabulary, copied), ``--max-len`` output steps (random weights rarely end early); whether both
   runtimes gave the same outputs;
2. cold start: ``predict`` (``--checkpoint``, or ``--runtime onnx --model DIR``) started in a fresh
   process, from its start to the first output line (one sentence, beam 10), and the peak resident
   memory (VmHWM) of such a process answering 64 sentences at beam 10.

Prints two markdown tables and the ONNX/PyTorch ratios. ``--quick``: the 16,000-word vocabulary,
fewer sentences and shorter outputs (about a minute on two cores).

    python -m benchmarks.bench_export --quick
    python -m benchmarks.bench_export --vocabs 16000 50000 --threads 1 2
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict
from pathlib import Path

import torch
import yaml

from models.registry import model_config
from pipeline.config.params import load_params
from pipeline.serving.export import Source, export_onnx
from pipeline.serving.onnx_predictor import OnnxPredictor
from pipeline.serving.predictor import ServingConfig
from pipeline.serving.pyfunc import local_model
from pipeline.training.checkpoints import save_atomic, vocab_identity
from pipeline.training.loop import build_seeded_model
from pipeline.vocab.vocabulary import SPECIALS, Vocab

REPO = Path(__file__).resolve().parents[1]
TASK = "bench_export"
PREPARE = {"reader": "copynet_rules"}  # whitespace tokens
MECHANISMS = ("copynet", "pointer_generator")


def write_model(root: Path, mechanism: str, vocab_size: int, max_len: int) -> tuple[Path, Path, ServingConfig]:
    """A random model of params.yaml's sizes saved as the train stage saves it, its vocabularies and a
    params.yaml (for ``predict --checkpoint``): (checkpoint dir, vocab dir, serving config)."""
    words = [f"w{i}" for i in range(vocab_size - len(SPECIALS))]
    vocab = Vocab(list(SPECIALS) + words, [0] * len(SPECIALS) + [1] * len(words))
    vocab_dir = root / "data/vocab" / TASK
    vocab_dir.mkdir(parents=True, exist_ok=True)
    vocab.save(vocab_dir / "src.vocab")
    vocab.save(vocab_dir / "tgt.vocab")
    section = load_params()["model"]
    cfg = model_config(section, mechanism, src_vocab=vocab_size, tgt_vocab=vocab_size)
    model = build_seeded_model(mechanism, cfg, 0).eval()
    ckpt = root / "data/checkpoints" / TASK / mechanism
    ckpt.mkdir(parents=True, exist_ok=True)
    identity = vocab_identity(vocab)
    save_atomic(
        {
            "model": model.state_dict(),
            "model_config": vars(cfg),
            "mechanism": mechanism,
            "vocab": {"src": identity, "tgt": identity},
        },
        ckpt / "model.pt",
    )
    evaluate = {"beam_size": 10, "max_len": max_len, "batch_size": 64}
    serving = {"max_inputs": 64, "max_output_len": max(200, max_len)}
    params = {
        "tasks": {TASK: "data"},
        "mechanisms": list(MECHANISMS),
        "prepare": {TASK: PREPARE},
        "model": {k: v for k, v in section.items() if not isinstance(v, dict)},
        "evaluate": evaluate,
        "serving": serving,
        "tracking": {"experiment_prefix": ""},
    }
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    return ckpt, vocab_dir, ServingConfig.from_params(TASK, mechanism, PREPARE, evaluate, serving)


def sentences(n: int, vocab_size: int, length: int, seed: int = 0) -> list[str]:
    """Random sources of ``length`` words, two of them outside the vocabulary (copied)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        words = [f"w{rng.randrange(vocab_size - len(SPECIALS))}" for _ in range(length - 2)]
        words[rng.randrange(len(words))] = f"oov{i}"
        words.append(f"oov{i}x")
        out.append(" ".join(["w0", *words]))
    return out


def rate(predict, texts: list[str], per_request: int, beam: int, max_len: int) -> tuple[float, list]:
    """Sentences per second of ``predict`` over ``texts`` in requests of ``per_request``; the outputs."""
    predict(texts[:1], beam, max_len)  # warm-up: first-call allocations, lazily built weights
    outputs = []
    start = time.perf_counter()
    for i in range(0, len(texts), per_request):
        outputs += [r["tokens"] for r in predict(texts[i : i + per_request], beam, max_len)]
    return len(texts) / (time.perf_counter() - start), outputs


def throughput(ckpt: Path, vocab_dir: Path, config: ServingConfig, export: Path, args, vocab_size: int) -> list[dict]:
    torch_predictor = local_model(ckpt, vocab_dir, config).python_model.predictor
    rows = []
    for threads in args.threads:
        torch.set_num_threads(threads)
        onnx_predictor = OnnxPredictor(export, threads=threads)
        row = {"threads": threads}
        for name, beam in (("greedy", 1), ("beam10", 10)):
            for per_request, count in ((1, args.single), (64, args.batched)):
                texts = sentences(count, vocab_size, args.src_len, seed=per_request)
                key = f"{name}/{per_request}"

                row[f"torch {key}"], want = rate(torch_predictor.predict, texts, per_request, beam, args.max_len)
                row[f"onnx {key}"], got = rate(onnx_predictor.predict, texts, per_request, beam, args.max_len)
                row[f"same {key}"] = want == got
        rows.append(row)
    return rows


def peak_rss_mb(pid: int) -> float | None:
    """The process's resident-memory high-water mark (VmHWM) in MB; None once it has exited. (Not the
    ru_maxrss of os.wait4: Linux carries the parent's high-water mark into a forked child.)"""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    kb = next((line.split()[1] for line in text.splitlines() if line.startswith("VmHWM:")), None)
    return None if kb is None else int(kb) / 1024


def cold_start(command: list[str], text: str, threads: int) -> tuple[float, float]:
    """(seconds from the process's start to its first output line, its peak RSS in MB: VmHWM read
    every 10 ms until it exits)."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    start = time.perf_counter()
    proc = subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=REPO, env=env
    )
    peak = [0.0]

    def watch() -> None:
        while proc.poll() is None:
            value = peak_rss_mb(proc.pid)
            if value is not None:
                peak[0] = max(peak[0], value)
            time.sleep(0.01)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    proc.stdin.write(text + "\n")
    proc.stdin.close()  # predict reads every line before it decodes any
    proc.stdout.readline()  # written once every line is decoded
    first = time.perf_counter() - start
    proc.stdout.read()
    proc.wait()
    watcher.join()
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited {proc.returncode}")
    return first, peak[0]


def cold_starts(ckpt: Path, root: Path, export: Path, vocab_size: int, args) -> dict:
    one = sentences(1, vocab_size, args.src_len)[0]
    many = "\n".join(sentences(64, vocab_size, args.src_len, seed=9))
    commands = {
        "torch": [
            sys.executable,
            "-m",
            "pipeline.serving.predict",
            "--checkpoint",
            str(ckpt),
            "--params",
            str(root / "params.yaml"),
        ],
        "onnx": [
            sys.executable,
            "-m",
            "pipeline.serving.predict",
            "--runtime",
            "onnx",
            "--model",
            str(export),
            "--threads",
            "1",
        ],
    }
    out = {}
    for runtime, command in commands.items():
        first, _ = cold_start(command, one, 1)
        _, rss = cold_start(command, many, 1)
        out[runtime] = (first, rss)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vocabs", type=int, nargs="+", default=[16000, 50000])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--single", type=int, default=32, help="sentences decoded one per request")
    parser.add_argument("--batched", type=int, default=128, help="sentences decoded 64 per request")
    parser.add_argument("--src-len", type=int, default=30)
    parser.add_argument("--max-len", type=int, default=30)
    parser.add_argument("--quick", action="store_true", help="16,000 words, 8 + 64 sentences, 12 steps")
    args = parser.parse_args(argv)
    if args.quick:
        args.vocabs, args.single, args.batched, args.max_len, args.src_len = [16000], 8, 64, 12, 20
    speed, starts = [], []
    for vocab_size in args.vocabs:
        for mechanism in MECHANISMS:
            with tempfile.TemporaryDirectory(prefix="bench-export-") as tmp:
                root = Path(tmp)
                ckpt, vocab_dir, config = write_model(root, mechanism, vocab_size, args.max_len)
                source = Source(ckpt / "model.pt", vocab_dir, config, None, str(ckpt))
                start = time.perf_counter()
                export_onnx(source, root / "export")
                exported = time.perf_counter() - start
                size = sum(p.stat().st_size for p in (root / "export").glob("*.onnx")) / 2**20
                for row in throughput(
                    ckpt, vocab_dir, ServingConfig.from_dict(asdict(config)), root / "export", args, vocab_size
                ):
                    speed.append({"mechanism": mechanism, "vocab": vocab_size, **row})
                    print(speed[-1], file=sys.stderr, flush=True)
                cold = cold_starts(ckpt, root, root / "export", vocab_size, args)
                starts.append(
                    {"mechanism": mechanism, "vocab": vocab_size, "export_s": exported, "onnx_mb": size, **cold}
                )
                print(starts[-1], file=sys.stderr, flush=True)
    keys = [f"{m}/{n}" for m in ("greedy", "beam10") for n in (1, 64)]
    print(f"sentences/s (source {args.src_len} words, {args.max_len} output steps); ONNX/PyTorch in brackets\n")
    print("| mechanism | vocab | threads | " + " | ".join(f"{k} torch | {k} onnx" for k in keys) + " | same outputs |")
    print("|---|---:|---:|" + "---:|---:|" * len(keys) + "---|")
    for r in speed:
        cells = [
            f"{r[f'torch {k}']:.1f} | {r[f'onnx {k}']:.1f} ({r[f'onnx {k}'] / r[f'torch {k}']:.2f}x)" for k in keys
        ]
        same = "yes" if all(r[f"same {k}"] for k in keys) else "no: " + ", ".join(k for k in keys if not r[f"same {k}"])
        print(f"| {r['mechanism']} | {r['vocab']} | {r['threads']} | " + " | ".join(cells) + f" | {same} |")
    print(
        "\ncold start (process start to the first answer, one sentence, beam 10) and peak RSS (64 sentences, beam 10)\n"
    )
    print("| mechanism | vocab | export s | .onnx MB | torch start s | onnx start s | torch RSS MB | onnx RSS MB |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in starts:
        print(
            f"| {r['mechanism']} | {r['vocab']} | {r['export_s']:.1f} | {r['onnx_mb']:.1f} | {r['torch'][0]:.2f} | "
            f"{r['onnx'][0]:.2f} | {r['torch'][1]:.0f} | {r['onnx'][1]:.0f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
