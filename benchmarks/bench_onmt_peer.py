"""Peer figure for ``bench_mechanisms.py --data gigaword``: OpenNMT-py 3.5.1's copy-attention model
(``copy_attn: true``), trained by OpenNMT's own ``onmt_train`` on the same Gigaword-shaped synthetic
data: target tokens/s and peak GPU memory.

What runs. For every target vocabulary size V (``--vocabs``, default 16000 50000) and precision
(``--precision``, default fp32): ``--pairs`` source/target pairs from benchmarks/gigaword_shaped.py
(``sample_pairs`` over ``words(1.1 V)``, as bench_mechanisms.py: sources of 31 tokens, targets of 9,
Zipfian words, half of each target copied from its source), written as plain text; one vocabulary
file with the V - 4 most frequent words, shared by source and target (``share_vocab``), to which
OpenNMT adds its 4 specials (<unk> <blank> <s> </s>): exactly V ids, as bench_mechanisms.py's
``Vocab``, so the words beyond them are OOV and reach the output only by copying. Then
``onmt.bin.train.main()`` in a child Python process with this config (the rest at OpenNMT's
defaults):

    copy_attn true, encoder_type brnn, decoder_type rnn, rnn_type GRU, global_attention mlp
    (Bahdanau), word_vec_size 150, hidden_size 300, layers 1, batch_size 64, batch_type sents,
    optim adam, learning_rate 0.001, max_grad_norm 5, dropout 0, no validation, no transforms,
    model_dtype fp32 (``--precision fp16``: OpenNMT's apex-free torch.cuda.amp + GradScaler),
    world_size 1 and gpu_ranks [0] on CUDA, none on the CPU, num_workers 2 (OpenNMT's default),
    seed ``--seed`` + 1 (OpenNMT seeds nothing at seed 0; seeded, it also sets
    cudnn.deterministic). bucket_size is the pairs one data worker reads, and ``--pairs`` defaults
    to enough that each worker's first bucket covers the run and its 200 prefetched batches: no
    worker rebuilds a bucket during the timed steps (OpenNMT's 262144 would make each worker read
    the corpus many times before its first batch; lengths are fixed here, so there is nothing for
    the bucket's length sorting to do).

Sizes differ in one respect: OpenNMT's brnn splits hidden_size over the two directions
(hidden_size 300 = 150 per direction, memory 300, decoder 300), while bench_mechanisms.py's ``hidden``
is per direction (300: memory 600, decoder 300). ``--onmt-hidden 600`` gives OpenNMT our encoder
(300 per direction, memory 600) but a 600-unit decoder and output layer. OpenNMT's rnn decoder
also feeds its previous attentional output back with the word (``input_feed`` 1, its default:
GRUCell(150 + 300, 300)), and copy_attn adds a second mlp attention for copying. The table gives
OpenNMT's parameter count: 11,286,701 at V = 16,000 and hidden_size 300, against 12,531,300 for
our CopyNet and 12,098,951 for our pointer-generator at emb 150 / hidden 300.

What is timed. The child wraps OpenNMT's ``ReportMgrBase.report_training`` (called after every
optimizer step); at each report point (every ``--report-every`` steps) it synchronizes CUDA and
records perf_counter and OpenNMT's counts for the window since the previous one (target tokens =
non-padding target positions with </s>, without <s>: 10 per pair here, as bench_mechanisms.py counts
them). After ``--warmup`` untimed steps come ``--steps`` timed ones:

    target tok/s     (the table's figure) the timed windows' target tokens / the wall-clock between
                     the report points at steps ``warmup`` and ``warmup + steps``
    log tok/s        the mean of OpenNMT's own per-report figure ("... src/tgt tok/s" in its log)
                     over the timed windows: a cross-check, agrees within about 1%
    peak GPU MiB     torch.cuda.max_memory_allocated() in the child at the end of training (the
                     JSON also has max_memory_reserved, the caching allocator's peak, and the
                     child's max RSS; on the CPU only the RSS)

Compared with bench_mechanisms.py's figures, this one is OpenNMT's whole training loop: its data
pipeline (2 DataLoader worker processes that batch ahead, so mostly off the critical path), the
host syncs of its per-step statistics (``.item()``), its copy loss, clipping and Adam
(torch.optim.Adam, not fused), while bench_mechanisms.py times forward, backward, clip and fused
Adam on batches already collated and on the device. On CUDA bench_mechanisms.py uses bf16 autocast;
``--precision bf16`` runs OpenNMT's amp path with bf16 instead of fp16 autocast (a runtime patch,
below) for the like-for-like row. On the CPU, ``--threads`` (default 1, as bench_mechanisms.py) sets
torch's threads in the child (the data workers run beside it).

Installing OpenNMT-py. It is not a project dependency and nothing is downloaded at run time:
install OpenNMT-py==3.5.1 and ConfigArgParse with ``pip install --no-deps`` (OpenNMT's torch<2.3
pin is not a real constraint for this model: it trains on torch 2.13 here), e.g. from the two
wheels in ``.whl/`` (git-ignored):

    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
    PYTHONPATH=/tmp/site python3 benchmarks/bench_onmt_peer.py --device cuda --json out/onmt_peer.json

Beside them it needs torch, numpy and pyyaml. OpenNMT's other requirements are left out; where one
is missing, the child gets a pure-Python stand-in, written into the run's temporary directory and
appended to its PYTHONPATH (the header line says which):

  pyonmttok  imported at module level; training uses only ``pyonmttok.Vocab`` (its tokenizers
             serve the optional onmt_tokenize transform). The stand-in implements that Vocab
             (specials first, then insertion order, or by decreasing count when resized, cut to
             maximum_size; unknowns to <unk>) and saves a 17 MB wheel. Checked against pyonmttok
             1.38.1 on 20,000 random vocabularies, and a seeded single-process OpenNMT run gave
             bit-identical losses with either; a real pyonmttok, when importable, is used instead.
  fasttext, spacy, ahocorasick, rapidfuzz, regex
             imported at module level by onmt/transforms/{clean,terminology,inlinetags,fuzzymatch,
             normalize}.py (OpenNMT imports every transform to register its options), used only
             when that transform is configured, which it is not here; the stubs raise if touched.
  ctranslate2, waitress, apex, bitsandbytes, tensorboard: imported only on optional paths.

Runtime patches, all in the child (monkeypatches, not edits of OpenNMT's files):
  - ``onmt.train_single.build_model_saver`` returns None: no checkpoint is written (the end-of-run
    save would only cost time and disk).
  - ``onmt.train_single.build_model`` is wrapped to keep the model (parameter count, output size).
  - ``ReportMgrBase.report_training`` is wrapped as described above (it then calls the original).
  - ``--precision bf16`` only: ``torch.cuda.amp.autocast``, as onmt/trainer.py calls it, gets
    dtype=torch.bfloat16; the run is otherwise OpenNMT's fp16 amp (fp32 weights, GradScaler).
  - ``onmt.utils.loss.collapse_copy_scores`` (called by the copy loss on every batch) is
    OpenNMT's own loop with its index tensors made on the scores' device
    (:func:`collapse_copy_scores_on_device`): OpenNMT makes them on the CPU, which torch 2.11 on
    CUDA refuses ("index is on cpu"; found on an H100). On the CPU it computes what OpenNMT's does.
FutureWarnings about torch.cuda.amp in the log are expected.

    PYTHONPATH=/tmp/site python3 benchmarks/bench_onmt_peer.py --device cuda            # 16k and 50k, fp32
    PYTHONPATH=/tmp/site python3 benchmarks/bench_onmt_peer.py --device cuda --precision fp32 bf16 fp16
    PYTHONPATH=/tmp/site .venv/bin/python benchmarks/bench_onmt_peer.py --device cpu \\
        --vocabs 1000 16000 --warmup 5 --steps 10 --report-every 5                     # a CPU smoke run
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from benchmarks.gigaword_shaped import sample_pairs, words  # noqa: E402

ONMT_VERSION = "3.5.1"
SPECIALS = 4  # OpenNMT's default_specials: <unk> <blank> <s> </s>
STUBBED = ("fasttext", "spacy", "ahocorasick", "rapidfuzz", "regex")

PYONMTTOK_SHIM = '''"""Pure-Python stand-in for pyonmttok.Vocab, written by benchmarks/bench_onmt_peer.py (see its
docstring): OpenNMT-py 3.5.1 uses only the Vocab of pyonmttok while training. Semantics of
pyonmttok 1.38: specials first and always kept, then the other tokens in insertion order, or, when
resized (maximum_size > 0 or minimum_frequency != 1), by decreasing count (ties in insertion order)
cut to maximum_size (specials included); unknown tokens map to default_id (<unk> by default)."""

__version__ = "0+bench_onmt_peer_shim"


class Vocab:
    def __init__(self, special_tokens=None):
        self._tokens, self._index, self._counts = [], {}, []
        for token in special_tokens or []:
            self.add_token(token)
        self._n_special = len(self._tokens)
        self._default_id = None

    def add_token(self, token, count=1):
        i = self._index.get(token)
        if i is None:
            self._index[token] = len(self._tokens)
            self._tokens.append(token)
            self._counts.append(count)
        else:
            self._counts[i] += count

    def resize(self, maximum_size=0, minimum_frequency=1):
        if maximum_size == 0 and minimum_frequency == 1:  # pyonmttok leaves the order as it is
            return
        n = self._n_special
        rest = sorted(range(n, len(self._tokens)), key=lambda i: -self._counts[i])  # stable
        rest = [i for i in rest if self._counts[i] >= minimum_frequency]
        if maximum_size > 0:
            rest = rest[: max(0, maximum_size - n)]
        keep = list(range(n)) + rest
        self._tokens = [self._tokens[i] for i in keep]
        self._counts = [self._counts[i] for i in keep]
        self._index = {t: i for i, t in enumerate(self._tokens)}

    @property
    def default_id(self):
        if self._default_id is None:  # as pyonmttok: <unk> if present, else the size
            return self._index.get("<unk>", len(self._tokens))
        return self._default_id

    @default_id.setter
    def default_id(self, value):
        self._default_id = value

    @property
    def ids_to_tokens(self):
        return list(self._tokens)

    @property
    def tokens_to_ids(self):
        return dict(self._index)

    @property
    def counters(self):
        return list(self._counts)

    def lookup_token(self, token):
        return self._index.get(token, self.default_id)

    def lookup_index(self, index):
        return self._tokens[index]

    def __getitem__(self, token):
        return self._index.get(token, self.default_id)

    def __call__(self, tokens):
        get, default = self._index.get, self.default_id
        return [get(t, default) for t in tokens]

    def __contains__(self, token):
        return token in self._index

    def __len__(self):
        return len(self._tokens)


def build_vocab_from_tokens(tokens, maximum_size=0, minimum_frequency=1, special_tokens=None):
    vocab = Vocab(special_tokens)
    for token in tokens:
        vocab.add_token(token)
    vocab.resize(maximum_size=maximum_size, minimum_frequency=minimum_frequency)
    return vocab


def __getattr__(name):
    raise ImportError(f"pyonmttok.{name}: only Vocab is provided by bench_onmt_peer.py's stand-in")
'''

IMPORT_STUB = '''"""Stub written by benchmarks/bench_onmt_peer.py: OpenNMT-py imports this module at module level
for an optional transform that the benchmark does not configure. Anything used from it raises."""


class _Missing:
    def __init__(self, name):
        self._name = name

    def __getattr__(self, attr):
        raise ImportError(f"{self._name}.{attr}: a stub (bench_onmt_peer.py); install the real package")

    def __call__(self, *args, **kwargs):
        raise ImportError(f"{self._name}: a stub (bench_onmt_peer.py); install the real package")


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    return _Missing(f"{__name__}.{name}")
'''


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    p.add_argument("--vocabs", nargs="+", type=int, default=[16000, 50000], help="target (= source) vocabulary sizes")
    p.add_argument(
        "--precision", nargs="+", default=["fp32"], choices=["fp32", "fp16", "bf16"], help="one run per vocab each"
    )
    p.add_argument("--fp16", action="store_true", help="shorthand for --precision fp16")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument("--emb", type=int, default=150, help="word_vec_size")
    p.add_argument(
        "--onmt-hidden", type=int, default=300, help="OpenNMT hidden_size (brnn: half per direction; see docstring)"
    )
    p.add_argument("--batch", type=int, default=64, help="batch_size (sentences)")
    p.add_argument("--warmup", type=int, default=50, help="untimed steps (a multiple of --report-every)")
    p.add_argument("--steps", type=int, default=300, help="timed steps (a multiple of --report-every)")
    p.add_argument("--report-every", type=int, default=10)
    p.add_argument("--pairs", type=int, default=0, help="training pairs (0: enough for one pass, see default_pairs)")
    p.add_argument("--num-workers", type=int, default=2, help="OpenNMT's DataLoader workers (its default 2)")
    p.add_argument(
        "--threads", type=int, default=None, help="torch threads in the child (default: 1 on CPU, unset on CUDA)"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=1800, help="seconds per configuration")
    p.add_argument("--json", type=Path, default=None, help="also write the results here")
    p.add_argument("--keep", type=Path, default=None, help="keep data, configs and logs in this directory")
    p.add_argument("--verbose", action="store_true", help="echo OpenNMT's log")
    args = p.parse_args(argv)
    if args.fp16:
        args.precision = ["fp16"]
    for name in ("warmup", "steps"):
        value = getattr(args, name)
        if value <= 0 or value % args.report_every:
            p.error(f"--{name} ({value}) must be a positive multiple of --report-every ({args.report_every})")
    return args


# --------------------------------------------------------------------------------------------------
# parent: environment checks, data, configs, runs, table


def onmt_environment() -> dict:
    """Versions and which stand-ins the child needs; exits with a message if OpenNMT-py is missing."""
    missing = [m for m in ("onmt", "configargparse", "yaml", "torch") if importlib.util.find_spec(m) is None]
    if missing:
        sys.exit(
            f"bench_onmt_peer.py: cannot import {', '.join(missing)}. Install OpenNMT-py {ONMT_VERSION} without its "
            f"dependencies (pip install --no-deps OpenNMT-py=={ONMT_VERSION} ConfigArgParse, or the wheels in .whl/), "
            "see the docstring; nothing is downloaded at run time."
        )
    try:
        version = importlib.metadata.version("OpenNMT-py")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    if version != ONMT_VERSION:
        print(f"# warning: OpenNMT-py {version} found, this benchmark was written for {ONMT_VERSION}", flush=True)
    try:
        pyonmttok = importlib.metadata.version("pyonmttok")
    except importlib.metadata.PackageNotFoundError:
        pyonmttok = None if importlib.util.find_spec("pyonmttok") is None else "unknown"
    stubs = [m for m in STUBBED if importlib.util.find_spec(m) is None]
    return {"onmt": version, "pyonmttok": pyonmttok, "stubs": stubs}


def write_shims(directory: Path, env: dict) -> Path | None:
    if env["pyonmttok"] is None or env["stubs"]:
        directory.mkdir(parents=True, exist_ok=True)
    if env["pyonmttok"] is None:
        (directory / "pyonmttok.py").write_text(PYONMTTOK_SHIM)
    for name in env["stubs"]:
        (directory / f"{name}.py").write_text(IMPORT_STUB)
    return directory if directory.exists() else None


def write_data(directory: Path, vocab_size: int, pairs: int, seed: int) -> dict:
    """src/tgt text and the vocabulary file (V - 4 words, most frequent first, 'word<TAB>count')."""
    directory.mkdir(parents=True, exist_ok=True)
    pool = np.array(words(int(vocab_size * 1.1)), dtype=object)
    rng = np.random.default_rng(seed)
    src, tgt = sample_pairs(rng, pairs, len(pool))
    paths = {name: directory / f"{name}.txt" for name in ("src", "tgt", "vocab")}
    paths["src"].write_text("\n".join(" ".join(row) for row in pool[src]) + "\n")
    paths["tgt"].write_text("\n".join(" ".join(row) for row in pool[tgt]) + "\n")
    in_vocab = pool[: vocab_size - SPECIALS]
    counts = np.bincount(np.concatenate([src.ravel(), tgt.ravel()]), minlength=len(pool))
    paths["vocab"].write_text("".join(f"{w}\t{max(int(c), 1)}\n" for w, c in zip(in_vocab, counts)))
    oov = float(np.mean(tgt >= vocab_size - SPECIALS))
    return {**paths, "tgt_oov_fraction": oov}


PREFETCH = 200  # OpenNMT's default prefetch_factor: batches each data worker prepares ahead


def default_pairs(args) -> int:
    """Enough pairs that each worker's first bucket covers its share of the run plus its prefetch,
    so no worker rebuilds a bucket (reads, numericalizes, sorts) while steps are being timed."""
    workers = max(args.num_workers, 1)
    per_worker = -(-(args.warmup + args.steps) // workers) + (PREFETCH if args.num_workers else 0)
    return args.batch * per_worker * workers


def bucket_size(args) -> int:
    """The pairs one data worker reads (its stride of the corpus), rounded up to whole batches."""
    per_worker = -(-args.pairs // max(args.num_workers, 1))
    return args.batch * -(-per_worker // args.batch)


def onmt_config(args, data: dict, run_dir: Path, vocab_size: int, precision: str, cuda: bool) -> dict:
    """OpenNMT's training config; with ``args.save`` (bench_vs_onmt.py) the model is saved at the last
    step as ``run_dir/model_step_<steps>.pt``, for onmt_translate."""
    train_steps = args.warmup + args.steps
    return {
        "save_data": str(run_dir / "onmt"),
        "save_model": str(run_dir / "model"),
        "overwrite": True,
        "src_vocab": str(data["vocab"]),
        "tgt_vocab": str(data["vocab"]),
        "share_vocab": True,
        "src_vocab_size": vocab_size,
        "tgt_vocab_size": vocab_size,
        "vocab_size_multiple": 1,
        "src_words_min_frequency": 0,
        "tgt_words_min_frequency": 0,
        "data": {"corpus_1": {"path_src": str(data["src"]), "path_tgt": str(data["tgt"]), "transforms": []}},
        "model_task": "seq2seq",
        "encoder_type": "brnn",
        "decoder_type": "rnn",
        "rnn_type": "GRU",
        "global_attention": "mlp",
        "copy_attn": True,
        "word_vec_size": args.emb,
        "hidden_size": args.onmt_hidden,
        "layers": 1,
        "dropout": [0.0],
        "attention_dropout": [0.0],
        "batch_size": args.batch,
        "batch_type": "sents",
        "bucket_size": bucket_size(args),
        "num_workers": args.num_workers,
        "optim": "adam",
        "learning_rate": 0.001,
        "max_grad_norm": 5,
        "train_steps": train_steps,
        "valid_steps": 10 * train_steps,
        "save_checkpoint_steps": train_steps if getattr(args, "save", False) else 10 * train_steps,
        "report_every": args.report_every,
        "seed": args.seed + 1,  # OpenNMT seeds its RNGs only when seed > 0
        "model_dtype": "fp32" if precision == "fp32" else "fp16",
        "world_size": 1,
        "gpu_ranks": [0] if cuda else [],
    }


LOG_STEP = re.compile(r"Step (\d+)/\s*\d+;.*?sents:\s*(\d+);.*?([\d.]+)/\s*([\d.]+) tok/s;")


def parse_log(text: str, warmup: int) -> dict:
    windows = [
        (int(m.group(1)), int(m.group(2)), float(m.group(4)))
        for m in LOG_STEP.finditer(text)
        if int(m.group(1)) > warmup
    ]
    rates = [w[2] for w in windows]
    return {
        "log_windows": len(windows),
        "log_tgt_tok_s_mean": float(np.mean(rates)) if rates else None,
        "log_tgt_tok_s_min": min(rates) if rates else None,
        "log_tgt_tok_s_max": max(rates) if rates else None,
    }


def run_one(args, env: dict, shim_dir: Path | None, data: dict, run_dir: Path, size: int, precision: str, cuda: bool):
    run_dir.mkdir(parents=True, exist_ok=True)
    import yaml

    config = onmt_config(args, data, run_dir, size, precision, cuda)
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    threads = args.threads if args.threads is not None else (0 if cuda else 1)
    spec = {
        "cuda": cuda,
        "precision": precision,
        "threads": threads,
        "warmup": args.warmup,
        "steps": args.steps,
        "save": getattr(args, "save", False),
    }
    (run_dir / "child.json").write_text(json.dumps(spec))
    child_env = dict(os.environ)
    if shim_dir is not None:  # after the existing path: a real package, if any, wins
        child_env["PYTHONPATH"] = os.pathsep.join(p for p in (child_env.get("PYTHONPATH"), str(shim_dir)) if p)
    log_path = run_dir / "onmt.log"
    start = time.perf_counter()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--_child", str(run_dir)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=child_env,
            text=True,
            start_new_session=True,  # its own process group: the timeout also stops its data workers
        )
        watchdog = threading.Timer(args.timeout, lambda: os.killpg(proc.pid, signal.SIGKILL))
        watchdog.start()
        try:
            for line in proc.stdout:
                log.write(line)
                if args.verbose:
                    print("    " + line, end="", flush=True)
            proc.wait()
        finally:
            watchdog.cancel()
    wall = time.perf_counter() - start
    text = log_path.read_text()
    result_path = run_dir / "result.json"
    if proc.returncode != 0 or not result_path.exists():
        tail = "\n".join(text.splitlines()[-25:])
        error = f"timed out after {args.timeout:.0f} s" if wall >= args.timeout else f"exit {proc.returncode}"
        print(
            f"\n# V={size} {precision}: onmt_train failed ({error}); last lines of its log (--keep keeps it):\n{tail}"
        )
        return {"vocab": size, "precision": precision, "error": error, "log_tail": tail}
    child = json.loads(result_path.read_text())
    points = {p["step"]: p for p in child.pop("points")}
    first, last = args.warmup, args.warmup + args.steps
    if first not in points or last not in points:
        error = f"report points {first} and {last} missing (got {sorted(points)})"
        print(f"\n# V={size} {precision}: {error}")
        return {"vocab": size, "precision": precision, "error": error}
    timed = [p for s, p in points.items() if first < s <= last]
    tokens = sum(p["n_words"] for p in timed)
    sents = sum(p["n_sents"] for p in timed)
    batches = sum(p["n_batchs"] for p in timed)
    seconds = points[last]["t"] - points[first]["t"]
    return {
        "vocab": size,
        "precision": precision,
        "tgt_tok_s": tokens / seconds,
        **parse_log(text, args.warmup),
        "timed_steps": args.steps,
        "timed_batches": batches,
        "timed_seconds": seconds,
        "tgt_tokens": tokens,
        "tgt_tokens_per_batch": tokens / batches,
        "sents_per_batch": sents / batches,
        "loss_per_token_last": points[last]["loss"] / max(points[last]["n_words"], 1),
        "tgt_oov_fraction": data["tgt_oov_fraction"],
        **child,
        "wall_seconds_total": wall,
    }


def fmt(value, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def main(argv=None) -> None:
    args = parse_args(argv)
    env = onmt_environment()
    import torch

    cuda = torch.cuda.is_available() if args.device == "auto" else args.device == "cuda"
    if cuda and not torch.cuda.is_available():
        sys.exit("bench_onmt_peer.py: --device cuda but torch sees no GPU")
    if not cuda and any(p != "fp32" for p in args.precision):
        sys.exit("bench_onmt_peer.py: fp16/bf16 need --device cuda (OpenNMT's amp path is CUDA only)")
    if args.pairs <= 0:
        args.pairs = default_pairs(args)
    header = {
        "device": torch.cuda.get_device_name(0) if cuda else f"cpu ({platform.processor() or platform.machine()})",
        "torch": torch.__version__,
        "OpenNMT-py": env["onmt"],
        "python": platform.python_version(),
        "pyonmttok": env["pyonmttok"] or "stand-in (see docstring)",
        "stubs": " ".join(env["stubs"]) or "none",
        "threads": args.threads if args.threads is not None else ("default" if cuda else 1),
        "load_avg": f"{os.getloadavg()[0]:.2f}",
    }
    print("# " + ", ".join(f"{k} {v}" for k, v in header.items()), flush=True)
    print(
        f"# copy_attn brnn/GRU, mlp attention, emb {args.emb}, OpenNMT hidden_size {args.onmt_hidden} "
        f"({args.onmt_hidden // 2} per encoder direction), batch {args.batch} sents, adam 1e-3, clip 5, dropout 0; "
        f"{args.warmup} warm-up + {args.steps} timed steps, {args.pairs} pairs, {args.num_workers} data workers",
        flush=True,
    )
    root = Path(tempfile.mkdtemp(prefix="onmt_peer_")) if args.keep is None else args.keep
    root.mkdir(parents=True, exist_ok=True)
    rows = []
    try:
        shim_dir = write_shims(root / "shims", env)
        for size in args.vocabs:
            data = write_data(root / f"data_{size}", size, args.pairs, args.seed)
            for precision in args.precision:
                rows.append(run_one(args, env, shim_dir, data, root / f"run_{size}_{precision}", size, precision, cuda))
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    print(
        "\n| target vocabulary | precision | params | target tok/s | log tok/s (mean) | peak GPU MiB | steps timed |"
        "\n|---|---|---:|---:|---:|---:|---:|"
    )
    for r in rows:
        if "error" in r:
            print(f"| {r['vocab']:,} | {r['precision']} | failed: {r['error']} | | | | |")
            continue
        print(
            f"| {r['vocab']:,} | {r['precision']} | {r['params']:,} | {r['tgt_tok_s']:,.0f} | "
            f"{fmt(r['log_tgt_tok_s_mean'], ',.0f')} | {fmt(r['cuda_max_allocated_mib'], ',.0f')} | "
            f"{r['timed_steps']} ({r['timed_seconds']:.1f} s) |"
        )
    print(
        "\ntarget tok/s: OpenNMT's counted target tokens (with </s>) over the timed steps / wall-clock between the"
        " CUDA-synchronized report points; log tok/s: the mean of OpenNMT's own per-report figure."
    )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        settings = {**vars(args), "json": str(args.json), "keep": str(args.keep)}
        args.json.write_text(json.dumps({"settings": settings, "environment": header, "results": rows}, indent=2))
    if any("error" in r for r in rows):
        sys.exit(1)


# --------------------------------------------------------------------------------------------------
# child: runs onmt_train in-process, with the timing hooks and the patches of the docstring


def collapse_copy_scores_on_device(scores, batch, tgt_vocab, batch_dim=1):
    """OpenNMT-py 3.5.1's ``onmt.modules.copy_generator.collapse_copy_scores`` (its training loss
    calls it on every batch), the same per-example Python loop, with one change: its two index
    tensors are made on the scores' device. OpenNMT makes them on the CPU, and torch 2.11 on CUDA
    refuses a CPU index for a CUDA ``index_select`` ("index is on cpu"), so copy_attn cannot train
    on a GPU without this."""
    import torch

    offset = len(tgt_vocab)
    for b in range(scores.size(batch_dim)):
        blank, fill = [], []
        src_vocab = batch["src_ex_vocab"][b]
        for i in range(1, len(src_vocab)):
            ti = tgt_vocab[src_vocab.ids_to_tokens[i]]
            if ti != 0:
                blank.append(offset + i)
                fill.append(ti)
        if blank:
            blank = torch.tensor(blank, dtype=torch.int64, device=scores.device)
            fill = torch.tensor(fill, dtype=torch.int64, device=scores.device)
            score = scores[:, b] if batch_dim == 1 else scores[b]
            score.index_add_(1, fill, score.index_select(1, blank))
            score.index_fill_(1, blank, 1e-10)
    return scores


def child_main(run_dir: Path) -> None:
    import resource

    import torch

    spec = json.loads((run_dir / "child.json").read_text())
    cuda = spec["cuda"]
    if spec["threads"]:
        torch.set_num_threads(spec["threads"])
    if spec["precision"] == "bf16":
        plain_autocast = torch.cuda.amp.autocast

        def bf16_autocast(enabled=True, dtype=None, cache_enabled=True):
            return plain_autocast(enabled=enabled, dtype=torch.bfloat16, cache_enabled=cache_enabled)

        torch.cuda.amp.autocast = bf16_autocast

    import onmt.bin.train
    import onmt.train_single
    import onmt.utils.loss as onmt_loss
    import onmt.utils.report_manager as report_manager

    points, built = [], {}
    plain_report = report_manager.ReportMgrBase.report_training

    def report_training(self, step, num_steps, learning_rate, patience, report_stats, multigpu=False):
        if step % self.report_every == 0:
            if cuda:
                torch.cuda.synchronize()
            points.append(
                {
                    "step": step,
                    "t": time.perf_counter(),
                    "n_words": int(report_stats.n_words),
                    "n_sents": int(report_stats.n_sents),
                    "n_batchs": int(report_stats.n_batchs),
                    "loss": float(report_stats.loss),
                }
            )
        return plain_report(self, step, num_steps, learning_rate, patience, report_stats, multigpu)

    report_manager.ReportMgrBase.report_training = report_training
    plain_build = onmt.train_single.build_model

    def build_model(*a, **k):
        built["model"] = plain_build(*a, **k)
        return built["model"]

    onmt.train_single.build_model = build_model
    if not spec.get("save"):
        onmt.train_single.build_model_saver = lambda *a, **k: None
    onmt_loss.collapse_copy_scores = collapse_copy_scores_on_device

    sys.argv = ["onmt_train", "-config", str(run_dir / "config.yaml")]
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    onmt.bin.train.main()
    model = built["model"]
    generator = getattr(model, "generator", None)
    mib = 2**20
    result = {
        "points": points,
        "params": sum(p.numel() for p in model.parameters()),
        "output_size": getattr(getattr(generator, "linear", None), "out_features", None),
        "child_device": torch.cuda.get_device_name(0) if cuda else "cpu",
        "child_threads": torch.get_num_threads(),
        "cuda_max_allocated_mib": torch.cuda.max_memory_allocated() / mib if cuda else None,
        "cuda_max_reserved_mib": torch.cuda.max_memory_reserved() / mib if cuda else None,
        "child_max_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }
    (run_dir / "result.json").write_text(json.dumps(result))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--_child":
        child_main(Path(sys.argv[2]))
    else:
        main()
