"""What the throughput benchmarks share: the rows (mechanism x decoder), the synthetic batches
(Gigaword-shaped, and the CopyNet rule task's), timed training steps, matrix-multiply FLOPs per
token, the device's measured matrix-product peak, the environment header, and a report printed as
Markdown rows and rewritten as JSON after each row.

Used by bench_mechanisms.py (every training and decoding figure of the project's mechanisms),
bench_process_settings.py, bench_backbones.py and bench_search_overheads.py.
"""

from __future__ import annotations

import argparse
import copy
import json
import platform
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch.utils.flop_counter import FlopCounterMode

from benchmarks.gigaword_shaped import SRC_LEN, TGT_LEN, sample_pairs, words
from models.config import ModelConfig
from models.copynet import CopyNetOutput
from models.graphed import bucket_shape
from models.registry import DISPLAY_NAMES, MECHANISMS, build_model, mechanism, runs_on_backbone
from models.seq2seq import Seq2Seq
from pipeline.config.validation import SettingsError
from pipeline.data.corpora.copynet_rules import RulesConfig, generate_examples, regular_symbol
from pipeline.runtime.device import autocast, resolve_device
from pipeline.vocab.batching import collate, token_batches
from pipeline.vocab.vocabulary import SPECIALS, Vocab

# --------------------------------------------------------------------------------------------
# Rows: a mechanism on a decoder
# --------------------------------------------------------------------------------------------
DECODERS = ("recurrent", "transformer")


class NoSelectiveReadOutput(CopyNetOutput):
    """CopyNet's output layer (eq. 4-8) without the selective read of eq. 9: nothing is fed back, so
    the Transformer decoder runs the target in one pass. A benchmark row only (what keeping eq. 9
    costs on that decoder), never a model of the pipeline."""

    def __init__(self, cfg: ModelConfig):
        super().__init__(cfg)
        self.extra_input_dim = 0

    def extra_input(self, state, prev_ids):
        return None

    def feedback(self, s_t, state):
        return {}


# Rows that exist in the benchmarks only: name -> (display name, the mechanism it varies, builder).
VARIANTS = {
    "copynet_no_selective_read": (
        "CopyNet without the selective read (eq. 9)",
        "copynet",
        lambda cfg: Seq2Seq(cfg, NoSelectiveReadOutput(cfg)),
    ),
}


def own_mechanisms() -> list[str]:
    """The registry's mechanisms with a decoder of their own (backbone_*: bench_backbones.py)."""
    return [m for m in MECHANISMS if not runs_on_backbone(m)]


def add_decoder_args(p: argparse.ArgumentParser, default: tuple[str, ...] = ("recurrent",)) -> None:
    """``--decoders`` (a row per mechanism and decoder) and the Transformer decoder's sizes
    (params.yaml's defaults; d_model = hidden, feed-forward 4 x hidden)."""
    p.add_argument("--decoders", nargs="+", default=list(default), choices=DECODERS, help="a row per decoder")
    p.add_argument("--decoder-layers", type=int, default=2, help="Transformer decoder layers")
    p.add_argument("--decoder-heads", type=int, default=4, help="Transformer decoder heads (must divide hidden)")


def decoder_sizes(decoder: str, args: argparse.Namespace) -> dict:
    """The ModelConfig fields of ``decoder``."""
    if decoder == "recurrent":
        return {}
    return {"decoder": decoder, "decoder_layers": args.decoder_layers, "decoder_heads": args.decoder_heads}


def rows(names: list[str], decoders: list[str]) -> list[tuple[str, str]]:
    """(mechanism, decoder) pairs, decoder-major as given; a mechanism that refuses a decoder
    (Read-Again: the Transformer) is left out of that decoder's rows."""
    return [(name, d) for d in decoders for name in names if d in mechanism(varied_mechanism(name)).decoders]


def varied_mechanism(name: str) -> str:
    """The registry's mechanism behind row ``name`` (itself, or the one a :data:`VARIANTS` row varies)."""
    return VARIANTS[name][1] if name in VARIANTS else name


def label(name: str, decoder: str) -> str:
    """The row's name: the display name, with the decoder when it is not the mechanism's own."""
    base = VARIANTS[name][0] if name in VARIANTS else DISPLAY_NAMES[name]
    return base + (" (Transformer decoder)" if decoder == "transformer" else "")


def build_row_model(name: str, vocab: int, emb: int, hidden: int, seed: int, sizes: dict) -> Seq2Seq:
    """A freshly initialised (seeded) model of row ``name`` (a mechanism or one of :data:`VARIANTS`)."""
    torch.manual_seed(seed)
    cfg = ModelConfig(src_vocab=vocab, tgt_vocab=vocab, emb=emb, hidden=hidden, **sizes)
    return VARIANTS[name][2](cfg) if name in VARIANTS else build_model(name, cfg)


def size_pair(text: str) -> tuple[int, int]:
    """``EMBxHIDDEN`` -> (emb, hidden)."""
    emb, hidden = text.lower().split("x")
    return int(emb), int(hidden)


# --------------------------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------------------------
def gigaword_vocab(size: int) -> tuple[Vocab, list[str]]:
    """The vocabulary of ``size`` ids (4 specials + the size - 4 most frequent words) and the word
    pool of 1.1 x size words the pairs draw from: words past the vocabulary are copied."""
    pool = words(int(size * 1.1))
    return Vocab(list(SPECIALS) + pool[: size - len(SPECIALS)], [0] * len(SPECIALS) + [1] * (size - 4)), pool


def gigaword_pairs(
    vocab_size: int, n: int, batch: int, seed: int, src_len: int = SRC_LEN, tgt_len: int = TGT_LEN
) -> tuple[Vocab, list[list[tuple[list[str], list[str]]]]]:
    """n groups of ``batch`` Gigaword-shaped (source, target) word pairs (benchmarks/gigaword_shaped.py)."""
    vocab, pool = gigaword_vocab(vocab_size)
    rng = np.random.default_rng(seed)
    groups = []
    for _ in range(n):
        src, tgt = sample_pairs(rng, batch, len(pool), src_len=src_len, tgt_len=tgt_len)
        groups.append([([pool[i] for i in s], [pool[i] for i in t]) for s, t in zip(src, tgt)])
    return vocab, groups


def collate_pairs(pairs, vocab: Vocab):
    return collate([s for s, _ in pairs], [t for _, t in pairs], vocab, vocab)


def batches_for(
    vocab_size: int, n: int, batch: int, seed: int, src_len: int = SRC_LEN, tgt_len: int = TGT_LEN
) -> tuple[Vocab, list]:
    """n collated Gigaword-shaped batches of ``batch`` pairs; words past the V - 4 most frequent are OOV."""
    vocab, groups = gigaword_pairs(vocab_size, n, batch, seed, src_len, tgt_len)
    return vocab, [collate_pairs(g, vocab) for g in groups]


def budget_sentences(max_tokens: int, src_len: int = SRC_LEN, tgt_len: int = TGT_LEN) -> int:
    """Sentences per batch of a ``max_tokens`` budget (pipeline.vocab.batching.token_batches) when
    every pair has src_len + tgt_len + 1 padded positions (``</s>`` on the target)."""
    lengths = np.full(4096, src_len), np.full(4096, tgt_len + 1)
    return len(token_batches(*lengths, batch_size=10**9, max_tokens=max_tokens, shuffle=False)[0])


def varied_budget_batches(vocab_size: int, n: int, max_tokens: int, seed: int) -> list:
    """n token-budget batches over sentences of varied lengths (sources 10-60, targets 3-24 tokens,
    about Gigaword's spread; token_batches, shuffled), so batch shapes vary."""
    vocab, pool = gigaword_vocab(vocab_size)
    rng = np.random.default_rng(seed)
    count = max(4096, 2 * n * max_tokens // 40)
    src_len = np.clip(rng.normal(SRC_LEN, 9, count).round(), 10, 60).astype(int)
    tgt_len = np.clip(rng.normal(TGT_LEN, 3.5, count).round(), 3, 24).astype(int)
    groups = token_batches(src_len, tgt_len + 1, batch_size=10**6, max_tokens=max_tokens, shuffle=True, seed=1)
    out = []
    for rows_of in groups[:n]:
        pairs = []
        for r in rows_of:
            src, tgt = sample_pairs(rng, 1, len(pool), src_len=int(src_len[r]), tgt_len=int(tgt_len[r]))
            pairs.append(([pool[i] for i in src[0]], [pool[i] for i in tgt[0]]))
        out.append(collate_pairs(pairs, vocab))
    return out


def rule_data(seed: int) -> tuple[list, list, Vocab]:
    """CopyNet's rule task (pipeline.data.corpora.copynet_rules: 60 rules x 40 instances, the
    1,000-symbol alphabet): training pairs, decoding pairs (in-vocabulary test and unseen-filler
    test alternating) and the vocabulary (4 specials + the 1,000 symbols)."""
    cfg = RulesConfig(n_rules=60, instances_per_rule=40, vocab_size=1000, unseen_per_rule=8, seed=seed)
    ex = generate_examples(cfg)
    pairs = lambda split: [(r["src"], r["tgt"]) for r in ex[split]]  # noqa: E731
    test, unseen = pairs("test"), pairs("test_unseen")
    rng = random.Random(seed)
    rng.shuffle(test)
    rng.shuffle(unseen)
    decode = [p for pair in zip(test, unseen) for p in pair]
    symbols = [regular_symbol(i) for i in range(cfg.vocab_size)]
    vocab = Vocab(list(SPECIALS) + symbols, [0] * len(SPECIALS) + [1] * len(symbols))
    return pairs("train"), decode, vocab


# --------------------------------------------------------------------------------------------
# Timing
# --------------------------------------------------------------------------------------------
def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


def train_steps(
    model,
    optimizer,
    batches,
    stepwise: bool,
    device: torch.device,
    amp: str = "auto",
    clock: str = "wall",
    bucketed: bool = False,
    cache: bool = True,
) -> tuple[int, float]:
    """(target tokens, seconds) of one optimizer step per batch: forward, backward, clipping at 5, the
    optimizer's step, as pipeline.training.loop (``amp`` as train.amp; ``clock``: wall-clock or this
    process's CPU seconds). ``stepwise``: teacher forcing through ``Seq2Seq.step`` (the reference).
    ``bucketed``: each batch padded up to the CUDA graphs' shape buckets inside the timed step, as the
    loop does under train.cuda_graphs; ``cache``: autocast's weight cache (graphs need it off)."""
    now = CLOCKS[clock]
    tokens = 0
    sync(device)
    start = now()
    for batch in batches:
        n = batch.n_tokens  # padding adds no target token
        if bucketed:
            batch = batch.padded(*bucket_shape(batch))
        with autocast(device, amp, cache=cache):
            gold = model(batch, stepwise=stepwise)  # (B, T)
        loss = -gold.sum() / n
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        optimizer.step()
        tokens += n
    sync(device)
    return tokens, now() - start


# --------------------------------------------------------------------------------------------
# FLOPs and the device's peak
# --------------------------------------------------------------------------------------------
def flops_per_token(model, batch) -> float:
    """Matrix-multiply FLOPs (torch.utils.flop_counter: mm, addmm, bmm, the RNN cells' products) of one
    forward + backward of ``batch``, per target token."""
    counter = FlopCounterMode(display=False)
    with counter:
        (-model(batch).sum()).backward()
    model.zero_grad(set_to_none=True)
    return counter.get_total_flops() / batch.n_tokens


def mflop_per_token(model: torch.nn.Module, batch, device: torch.device) -> float:
    """:func:`flops_per_token` (float32) on a copy of ``model`` on ``device``, in MFLOP. cuDNN is off while
    counting: FlopCounterMode has no formula for its fused RNN kernels (they would count zero); without
    it the recurrences run as the mm/addmm products that the CPU counts."""
    with torch.backends.cudnn.flags(enabled=False):
        flops = flops_per_token(copy.deepcopy(model).to(device).train(), batch)
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return flops / 1e6


def gemm_tflops(device: torch.device, shapes: list[tuple[int, int, int]], dtype=torch.float32) -> float:
    """The best matrix-product throughput over ``shapes`` (m, k, n), TFLOP/s: for each, the median of 10
    products after 5 warm-up ones, each timed alone (CUDA events on a GPU, the wall clock elsewhere)."""
    best = 0.0
    for m, k, n in shapes:
        a, b = torch.randn(m, k, device=device, dtype=dtype), torch.randn(k, n, device=device, dtype=dtype)
        for _ in range(5):
            a @ b
        sync(device)
        seconds = []
        for _ in range(10):
            if device.type == "cuda":
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                a @ b
                end.record()
                end.synchronize()
                seconds.append(start.elapsed_time(end) / 1e3)
            else:
                t0 = time.perf_counter()
                a @ b
                seconds.append(time.perf_counter() - t0)
        best = max(best, 2 * m * k * n / statistics.median(seconds) / 1e12)
        del a, b
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return best


def bf16_peak_tflops(device: torch.device) -> float:
    """The device's measured bf16 matrix-product throughput: 8192^3 on CUDA, 1024^3 elsewhere (so a CPU
    dry run stays quick)."""
    n = 8192 if device.type == "cuda" else 1024
    return gemm_tflops(device, [(n, n, n)], torch.bfloat16)


def peak_environment(device: torch.device, override: float | None) -> dict:
    """The bf16 peak for a header and the JSON environment: always measured, used unless ``override``
    (``--peak-tflops``, e.g. a datasheet figure) is given."""
    n = 8192 if device.type == "cuda" else 1024
    measured = float(f"{bf16_peak_tflops(device):.4g}")
    return {
        "bf16_peak_measured_tflops": measured,
        "bf16_peak_tflops": override if override else measured,
        "bf16_peak_source": "--peak-tflops" if override else f"measured (median of 10 bf16 {n}^3 products)",
    }


# --------------------------------------------------------------------------------------------
# The environment and the report
# --------------------------------------------------------------------------------------------
def device_or_exit(name: str, script: str) -> torch.device:
    """``--device`` resolved, or one line naming the setting and exit 2 (no CUDA device here, ...)."""
    try:
        return resolve_device(name, setting="--device")
    except SettingsError as err:
        print(f"{script}: {err}", file=sys.stderr)
        raise SystemExit(2) from None


def environment(device: torch.device) -> dict:
    env = {"torch": torch.__version__, "python": platform.python_version(), "cpu": platform.processor()}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        env.update(
            device=props.name,
            memory_gib=round(props.total_memory / 2**30, 1),
            sms=props.multi_processor_count,
            cuda=torch.version.cuda,
            cudnn=torch.backends.cudnn.version(),
        )
        try:
            env["driver"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=30,
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            env["driver"] = "unknown"
    else:
        env.update(device="cpu", threads=torch.get_num_threads())
    return env


class Report:
    """Rows printed as Markdown as they come (a table per section), and the whole run rewritten to
    ``path`` as JSON after each, so a run stopped early keeps what it measured."""

    def __init__(self, path: Path | None, settings: dict, env: dict):
        self.path, self.data = path, {"settings": settings, "environment": env, "rows": []}
        self.started = time.perf_counter()
        self.headers: set[str] = set()

    def add(self, section: str, row: dict, columns: list[tuple[str, str, str]]) -> None:
        """``columns``: (title, key, format spec; ``s`` left-aligned text)."""
        if section not in self.headers:
            self.headers.add(section)
            print(f"\n## {section}\n| " + " | ".join(c[0] for c in columns) + " |", flush=True)
            print("|" + "|".join("---" if c[2] == "s" else "---:" for c in columns) + "|", flush=True)
        cells = ("" if row.get(key) is None else format(row[key], fmt) for _, key, fmt in columns)
        print("| " + " | ".join(cells) + " |", flush=True)
        self.data["rows"].append({"section": section, **row, "elapsed_s": time.perf_counter() - self.started})
        if self.path:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_text(json.dumps(self.data, indent=1, default=str))
