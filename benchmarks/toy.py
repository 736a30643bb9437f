"""The toy copy task ``a X b -> b X`` and a small project trained on it, shared by the tests
(tests/helpers.py re-exports them) and the serving benchmark (benchmarks/bench_serving.py).

Training fillers X are symbols of the vocabulary (:data:`TOY_SEEN`, and with a small probability
:data:`TOY_RARE`, out of vocabulary like the test's); test fillers (:data:`TOY_UNSEEN`) are in no
vocabulary and never occur in training, so only a copy mechanism can output them.
:func:`build_toy_project` writes, in the pipeline's own formats, the shards, vocabularies, a params.yaml
and CopyNet and RNNSearch checkpoints trained for 4 epochs (about 6 s), as the stages would.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
from pathlib import Path

import torch
import yaml

from models.config import ModelConfig
from pipeline.io.shards import ShardWriter, make_schema
from pipeline.training.checkpoints import vocab_identity
from pipeline.training.loop import build_seeded_model, train
from pipeline.training.settings import TrainConfig
from pipeline.vocab.batching import collate
from pipeline.vocab.encoded import EncodedSplit, write_encoded_split
from pipeline.vocab.vocabulary import SPECIALS, Vocab

TOY_SEEN = [f"s{i}" for i in range(50)]  # training fillers, in the vocabulary
TOY_UNSEEN = [f"u{i}" for i in range(30)]  # test fillers: in no vocabulary and never in training
# Rare training fillers: out of vocabulary like the unseen ones, but a different pool, so the
# encoder meets <unk> fillers in training.
TOY_RARE = [f"r{i}" for i in range(20)]


def toy_copy_example(rng, pool: list[str], rare: float = 0.0) -> tuple[list[str], list[str]]:
    """One ``(src, tgt)`` pair ``a X b -> b X``: 2 to 6 fillers X from ``pool``, each from
    :data:`TOY_RARE` instead with probability ``rare``."""
    x = [rng.choice(TOY_RARE if rng.random() < rare else pool) for _ in range(rng.randint(2, 6))]
    return ["a", *x, "b"], ["b", *x]


def toy_copy_vocab():
    """The toy task's vocabulary (encoder and decoder): the specials, :data:`TOY_SEEN`, a and b."""
    return Vocab(list(SPECIALS) + TOY_SEEN + ["a", "b"], [0] * 4 + [1] * (len(TOY_SEEN) + 2))


def toy_copy_batch(rng, pool: list[str], n: int, rare: float = 0.0):
    """``n`` examples of :func:`toy_copy_example` and their batch (:func:`toy_copy_vocab` on both
    sides): ``(pairs, batch)``."""
    pairs = [toy_copy_example(rng, pool, rare) for _ in range(n)]
    vocab = toy_copy_vocab()
    return pairs, collate([s for s, _ in pairs], [t for _, t in pairs], vocab, vocab)


TASK = "toy_copy"
PREPARE = {"reader": "copynet_rules"}  # whitespace tokens
EVALUATE = {"beam_size": 3, "max_len": 12, "batch_size": 16}
MECHANISMS = ("copynet", "rnnsearch")


def write_toy_task(root: Path) -> Vocab:
    """The toy task's data under ``root`` as the prepare and vocab stages write it: shards
    (1,200 train, 64 valid, 20 test pairs), the vocabularies and the id-encoded train and valid
    splits; returns the vocabulary (both sides)."""
    rng = random.Random(0)
    # Rare fillers (TOY_RARE, 10% in training): out of vocabulary, the encoder meets <unk> fillers.
    splits = {
        "train": [toy_copy_example(rng, TOY_SEEN, 0.1) for _ in range(1200)],
        "valid": [toy_copy_example(rng, TOY_SEEN) for _ in range(64)],
        "test": [toy_copy_example(rng, TOY_UNSEEN) for _ in range(20)],
    }
    for split, pairs in splits.items():
        with ShardWriter(root / "data/shards" / TASK / split, make_schema(), params={"toy": split}) as writer:
            writer.write([{"id": f"{split}:{i}", "src": s, "tgt": t, "refs": [t]} for i, (s, t) in enumerate(pairs)])
    vocab = toy_copy_vocab()
    vocab_dir = root / "data/vocab" / TASK
    vocab_dir.mkdir(parents=True, exist_ok=True)
    vocab.save(vocab_dir / "src.vocab")
    vocab.save(vocab_dir / "tgt.vocab")
    for split in ("train", "valid"):
        write_encoded_split(root / "data/shards" / TASK / split, vocab_dir / "ids" / split, vocab, vocab)
    return vocab


def build_toy_project(root: Path) -> Path:
    """Shards, vocabularies, two trained checkpoints and a params.yaml under ``root``."""

    vocab = write_toy_task(root)
    vocab_dir = root / "data/vocab" / TASK
    encoded = {split: EncodedSplit(vocab_dir / "ids" / split, len(vocab)) for split in ("train", "valid")}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for mech in MECHANISMS:
            cfg = ModelConfig(src_vocab=len(vocab), tgt_vocab=len(vocab), emb=32, hidden=64)
            model = build_seeded_model(mech, cfg, 0)
            train(
                model,
                encoded["train"],
                encoded["valid"],
                TrainConfig(epochs=4, batch_size=32, lr=3e-3, seed=0),
                root / "data/checkpoints" / TASK / mech,
                model_config=vars(cfg),
                progress=False,
                # what the train stage records: load_model checks the mechanism and vocabularies
                model_info={"mechanism": mech, "vocab": {"src": vocab_identity(vocab), "tgt": vocab_identity(vocab)}},
            )
    finally:
        torch.set_num_threads(threads)
    params = {
        "tasks": {TASK: "data"},
        "mechanisms": list(MECHANISMS),
        "prepare": {TASK: PREPARE},
        "vocab": {"min_count": 1},
        "model": {"emb": 32, "hidden": 64},
        "train": {"epochs": 4},
        "evaluate": EVALUATE,
        "tracking": {"experiment_prefix": ""},
    }
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    return root


def start_mlflow_server(uri: str, port: int, cwd: Path, stdout) -> subprocess.Popen:
    """`mlflow models serve -m URI` on 127.0.0.1:``port`` (this environment, no telemetry) in a process
    group of its own (:func:`stop_server` stops it), its output to ``stdout`` (a file or PIPE)."""
    # `mlflow models serve` runs `uvicorn` from PATH: the venv's bin must be on it even when this runs
    # as .venv/bin/python without an activated environment (make test, CI)
    env = {
        **os.environ,
        "MLFLOW_DISABLE_TELEMETRY": "true",
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    command = [sys.executable, "-m", "mlflow", "models", "serve", "-m", uri, "--env-manager", "local"]
    command += ["--host", "127.0.0.1", "--port", str(port)]
    return subprocess.Popen(command, cwd=cwd, env=env, stdout=stdout, stderr=subprocess.STDOUT, start_new_session=True)


def stop_server(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
