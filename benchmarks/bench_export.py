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
   memory (VmHWM) of that process (the model loaded, one sentence decoded) and of one answering 64
   sentences at beam 10.

``--backbone bart-base`` adds the copy heads on a pretrained backbone (``--backbone-heads``: the
pointer-generator with coverage and CopyNet, :mod:`pipeline.serving.onnx_backbone`), measured the same
way on the same kind of sources: a BART of BART-base's shape (d_model 768, 6 + 6 layers, 12 heads,
feed-forward 3072) with fresh weights, its BPE tokenizer trained here on the sources' words (asked for
BART-base's 50,265 pieces; the table's vocab column is the size the row got), saved with its tokenizer
directory as the vocab stage writes it, so ``predict --checkpoint`` and ``copyseq export`` read it as
they read a trained backbone row. Output steps are the tokenizer's pieces. ``--backbone tiny``: the same
on a BART of d_model 32, 2 + 2 layers and 2,000 pieces, to check the code in seconds. ``--vocabs``
given no sizes: the backbone rows alone.

Prints two markdown tables and the ONNX/PyTorch ratios. ``--quick``: the 16,000-word vocabulary,
fewer sentences and shorter outputs (about a minute on two cores).

    python -m benchmarks.bench_export --quick
    python -m benchmarks.bench_export --vocabs 16000 50000 --threads 1 2
    python -m benchmarks.bench_export --vocabs --backbone bart-base --threads 1 2
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
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import yaml

from models.registry import model_config
from pipeline.config.backbones import backbone_vocab_dir
from pipeline.config.params import load_params
from pipeline.serving.export import Source, export_onnx
from pipeline.serving.onnx_predictor import OnnxPredictor
from pipeline.serving.onnx_weights import WEIGHTS_FILE
from pipeline.serving.predictor import ServingConfig
from pipeline.serving.pyfunc import local_model
from pipeline.training.checkpoints import save_atomic, vocab_identity
from pipeline.training.loop import build_seeded_model
from pipeline.vocab.vocabulary import SPECIALS, Vocab

REPO = Path(__file__).resolve().parents[1]
TASK = "bench_export"
PREPARE = {"reader": "copynet_rules"}  # whitespace tokens
MECHANISMS = ("copynet", "pointer_generator")
# --backbone: BART shapes (vocab: the pieces the tokenizer trainer is asked for, as many source words)
BACKBONES = {
    "bart-base": {"d_model": 768, "layers": 6, "heads": 12, "ffn": 3072, "vocab": 50265},
    "tiny": {"d_model": 32, "layers": 2, "heads": 2, "ffn": 64, "vocab": 2000},
}
BACKBONE_HEADS = {"backbone_pointer_generator": {"coverage": True}, "backbone_copynet": {}}


@dataclass(frozen=True)
class Row:
    """A model saved as the train stage saves it, with what its sources and tables need."""

    label: str  # the tables' mechanism column
    ckpt: Path  # data/checkpoints/<task>/<mechanism>
    vocab_dir: Path  # src.vocab, tgt.vocab (and a backbone's tokenizer)
    config: ServingConfig
    vocab: int  # the model's vocabulary size
    words: int  # sources draw w0 .. w{words - 1}


def save_row(root: Path, mechanism: str, model: torch.nn.Module, vocab: Vocab, model_section: dict, max_len: int):
    """``model`` saved as the train stage saves it and a params.yaml naming it (for ``predict
    --checkpoint``): (checkpoint dir, serving config)."""
    ckpt = root / "data/checkpoints" / TASK / mechanism
    ckpt.mkdir(parents=True, exist_ok=True)
    identity = vocab_identity(vocab)
    save_atomic(
        {
            "model": model.state_dict(),
            "model_config": vars(model.cfg),
            "mechanism": mechanism,
            "vocab": {"src": identity, "tgt": identity},
        },
        ckpt / "model.pt",
    )
    evaluate = {"beam_size": 10, "max_len": max_len, "batch_size": 64}
    # no deadline: 64 sentences at beam 10 on a BART-base-shaped row take minutes on one thread
    serving = {"max_inputs": 64, "max_output_len": max(200, max_len), "request_timeout_s": 24 * 3600}
    params = {
        "tasks": {TASK: "data"},
        "mechanisms": [mechanism],
        "prepare": {TASK: PREPARE},
        "model": model_section,
        "evaluate": evaluate,
        "serving": serving,
        "tracking": {"experiment_prefix": ""},
    }
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    return ckpt, ServingConfig.from_params(TASK, mechanism, PREPARE, evaluate, serving)


def write_model(root: Path, mechanism: str, vocab_size: int, max_len: int) -> Row:
    """A random model of params.yaml's sizes over the words w0, w1, ... and its vocabularies."""
    words = [f"w{i}" for i in range(vocab_size - len(SPECIALS))]
    vocab = Vocab(list(SPECIALS) + words, [0] * len(SPECIALS) + [1] * len(words))
    vocab_dir = root / "data/vocab" / TASK
    vocab_dir.mkdir(parents=True, exist_ok=True)
    vocab.save(vocab_dir / "src.vocab")
    vocab.save(vocab_dir / "tgt.vocab")
    section = load_params()["model"]
    cfg = model_config(section, mechanism, src_vocab=vocab_size, tgt_vocab=vocab_size)
    model = build_seeded_model(mechanism, cfg, 0).eval()
    scalars = {k: v for k, v in section.items() if not isinstance(v, dict)}
    ckpt, config = save_row(root, mechanism, model, vocab, scalars, max_len)
    return Row(mechanism, ckpt, vocab_dir, config, vocab_size, len(words))


def write_backbone_model(root: Path, mechanism: str, shape: str, max_len: int) -> Row:
    """A copy head on a BART of ``shape`` (:data:`BACKBONES`) with fresh weights, its BPE tokenizer
    trained on the words w0, w1, ... (a character outside them, as the sources' ``oov``, is an unknown
    piece: copied), the backbone directory and the vocab stage's tokenizer directory of it."""
    from transformers import AutoModelForSeq2SeqLM

    from pipeline.vocab.tiny_backbone import tiny_config, train_tokenizer
    from pipeline.vocab.tokenizer import BackboneTokenizer

    size = BACKBONES[shape]
    words = size["vocab"]
    texts = [" ".join(f"w{i}" for i in range(k, min(k + 20, words))) for k in range(0, words, 20)]
    tokenizer = train_tokenizer(texts, "bart", size["vocab"])
    hf_config = tiny_config("bart", tokenizer, size["d_model"], size["layers"], size["heads"])
    hf_config.encoder_ffn_dim = hf_config.decoder_ffn_dim = size["ffn"]  # tiny_config's is 2 x d_model
    hf_config.max_position_embeddings = 1024  # BART-base's
    backbone = root / "backbone"
    torch.manual_seed(0)
    AutoModelForSeq2SeqLM.from_config(hf_config).save_pretrained(str(backbone))
    tokenizer.save_pretrained(str(backbone))
    tok = BackboneTokenizer.from_backbone(str(backbone))
    vocab_dir = backbone_vocab_dir(root / "data/vocab" / TASK, str(backbone))  # where predict --checkpoint looks
    tok.save(vocab_dir)
    n = len(tok.vocab)
    section = {"backbone": str(backbone), mechanism: BACKBONE_HEADS[mechanism]}
    model = build_seeded_model(mechanism, model_config(section, mechanism, src_vocab=n, tgt_vocab=n), 0).eval()
    ckpt, config = save_row(root, mechanism, model, tok.vocab, {"backbone": str(backbone)}, max_len)
    coverage = " (coverage)" if BACKBONE_HEADS[mechanism].get("coverage") else ""
    return Row(f"{mechanism}{coverage} on a {shape}-shaped BART", ckpt, vocab_dir, config, n, words)


def sentences(n: int, words: int, length: int, seed: int = 0) -> list[str]:
    """Random sources of ``length`` words among w0 .. w{words - 1}, two of them outside the
    vocabulary (copied)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        drawn = [f"w{rng.randrange(words)}" for _ in range(length - 2)]
        drawn[rng.randrange(len(drawn))] = f"oov{i}"
        drawn.append(f"oov{i}x")
        out.append(" ".join(["w0", *drawn]))
    return out


def rate(predict, texts: list[str], per_request: int, beam: int, max_len: int) -> tuple[float, list]:
    """Sentences per second of ``predict`` over ``texts`` in requests of ``per_request``; the outputs."""
    predict(texts[:1], beam, max_len)  # warm-up: first-call allocations, lazily built weights
    outputs = []
    start = time.perf_counter()
    for i in range(0, len(texts), per_request):
        outputs += [r["tokens"] for r in predict(texts[i : i + per_request], beam, max_len)]
    return len(texts) / (time.perf_counter() - start), outputs


def throughput(row: Row, export: Path, args) -> list[dict]:
    """Sentences/s of both runtimes for each ``--threads`` value, and whether they gave the same outputs."""
    config = ServingConfig.from_dict(asdict(row.config))
    torch_predictor = local_model(row.ckpt, row.vocab_dir, config).python_model.predictor
    results = []
    for threads in args.threads:
        torch.set_num_threads(threads)
        onnx_predictor = OnnxPredictor(export, threads=threads)
        result = {"threads": threads}
        for name, beam in (("greedy", 1), ("beam10", 10)):
            for per_request, count in ((1, args.single), (64, args.batched)):
                texts = sentences(count, row.words, args.src_len, seed=per_request)
                key = f"{name}/{per_request}"

                result[f"torch {key}"], want = rate(torch_predictor.predict, texts, per_request, beam, args.max_len)
                result[f"onnx {key}"], got = rate(onnx_predictor.predict, texts, per_request, beam, args.max_len)
                result[f"same {key}"] = want == got
        results.append(result)
    return results


def peak_rss_mb(pid: int) -> float | None:
    """The process's resident-memory high-water mark (VmHWM) in MB; None once it has exited. (Not the
    ru_maxrss of os.wait4: Linux carries the parent's high-water mark into a forked child.)"""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    kb = next((line.split()[1] for line in text.splitlines() if line.startswith("VmHWM:")), None)
    return None if kb is None else int(kb) / 1024


def cold_start(command: list[str], text: str, threads: int) -> tuple[float, float, str]:
    """(seconds from the process's start to its first output line, its peak RSS in MB: VmHWM read
    every 10 ms until it exits, its whole output)."""
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
    output = proc.stdout.readline()  # written once every line is decoded
    first = time.perf_counter() - start
    output += proc.stdout.read()
    proc.wait()
    watcher.join()
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited {proc.returncode}")
    return first, peak[0], output


def cold_starts(row: Row, root: Path, export: Path, args) -> dict:
    one = sentences(1, row.words, args.src_len)[0]
    many = "\n".join(sentences(64, row.words, args.src_len, seed=9))
    commands = {
        "torch": [
            sys.executable,
            "-m",
            "pipeline.serving.predict",
            "--checkpoint",
            str(row.ckpt),
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
        first, loaded, _ = cold_start(command, one, 1)
        _, rss, _ = cold_start(command, many, 1)
        out[runtime] = (first, loaded, rss)
    return out


def measure(row: Row, root: Path, args, speed: list[dict], starts: list[dict]) -> None:
    """Export ``row`` under ``root``, then add its throughput and cold-start rows."""
    source = Source(row.ckpt / "model.pt", row.vocab_dir, row.config, None, str(row.ckpt))
    start = time.perf_counter()
    export_onnx(source, root / "export")
    exported = time.perf_counter() - start
    graphs = [*(root / "export").glob("*.onnx"), root / "export" / WEIGHTS_FILE]  # the graphs and their weights
    size = sum(p.stat().st_size for p in graphs) / 2**20
    for result in throughput(row, root / "export", args):
        speed.append({"mechanism": row.label, "vocab": row.vocab, **result})
        print(speed[-1], file=sys.stderr, flush=True)
    cold = cold_starts(row, root, root / "export", args)
    starts.append({"mechanism": row.label, "vocab": row.vocab, "export_s": exported, "onnx_mb": size, **cold})
    print(starts[-1], file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--vocabs", type=int, nargs="*", default=None, help="word vocabularies (default 16000 50000; none: skip)"
    )
    parser.add_argument("--backbone", choices=BACKBONES, help="also the copy heads on a BART of this shape")
    parser.add_argument("--backbone-heads", nargs="+", choices=BACKBONE_HEADS, default=list(BACKBONE_HEADS))
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--single", type=int, default=32, help="sentences decoded one per request")
    parser.add_argument("--batched", type=int, default=128, help="sentences decoded 64 per request")
    parser.add_argument("--src-len", type=int, default=30)
    parser.add_argument("--max-len", type=int, default=30)
    parser.add_argument("--quick", action="store_true", help="16,000 words, 8 + 64 sentences, 12 steps")
    args = parser.parse_args(argv)
    if args.quick:
        args.single, args.batched, args.max_len, args.src_len = 8, 64, 12, 20
    if args.vocabs is None:
        args.vocabs = [16000] if args.quick else [16000, 50000]
    builds = [(write_model, m, v) for v in args.vocabs for m in MECHANISMS]
    if args.backbone:
        builds += [(write_backbone_model, m, args.backbone) for m in args.backbone_heads]
    speed, starts = [], []
    for build, mechanism, size in builds:
        with tempfile.TemporaryDirectory(prefix="bench-export-") as tmp:
            root = Path(tmp)
            measure(build(root, mechanism, size, args.max_len), root, args, speed, starts)
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
        "\ncold start (process start to the first answer, one sentence, beam 10); peak RSS of that process "
        "(one sentence) and of one answering 64 sentences at beam 10; ONNX/PyTorch in brackets\n"
    )
    print(
        "| mechanism | vocab | export s | graphs + weights MB | torch start s | onnx start s | torch RSS MB, 1 | onnx RSS MB, 1 "
        "| torch RSS MB, 64 | onnx RSS MB, 64 |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in starts:
        cells = [f"{r['torch'][0]:.2f} | {r['onnx'][0]:.2f} ({r['onnx'][0] / r['torch'][0]:.2f})"]
        cells += [f"{r['torch'][i]:.0f} | {r['onnx'][i]:.0f} ({r['onnx'][i] / r['torch'][i]:.2f})" for i in (1, 2)]
        print(
            f"| {r['mechanism']} | {r['vocab']} | {r['export_s']:.1f} | {r['onnx_mb']:.1f} | "
            + " | ".join(cells)
            + " |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
