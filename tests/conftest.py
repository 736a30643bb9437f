"""Shared fixtures and helpers: a tiny params file (seconds, not minutes), quiet, local tool settings,
toy models and batches checked by hand, the toy copy task, and readers of written splits."""

from __future__ import annotations

import copy
import json
import os
import socket
from pathlib import Path

import pytest
import torch
import yaml

REPO = Path(__file__).resolve().parent.parent

# Quiet and local before any test imports Prefect or MLflow.
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("DVC_NO_ANALYTICS", "1")


def pytest_addoption(parser):
    parser.addoption(
        "--device",
        default="cpu",
        help="where the tests marked 'device' run their models and training: cpu (default), cuda or cuda:N. "
        "On a GPU: pytest --device cuda -m device",
    )


def pytest_configure(config):
    if config.getoption("--device").startswith("cuda"):
        # Deterministic cuBLAS needs its workspace setting before the first cuBLAS call of the process.
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        # float32 means float32 in the checks: PyTorch runs cuDNN (the RNNs) in TF32 by default,
        # whose 10-bit mantissa moves scores by ~5e-4 (measured on an H100: beam search scores of
        # one example alone and in a batch then differ by 1.3e-4).
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False


@pytest.fixture(scope="session")
def device(request) -> torch.device:
    """The device of the tests marked ``device`` (``--device``); asking for CUDA without one fails
    loudly rather than testing the CPU under a CUDA label."""
    device = torch.device(request.config.getoption("--device"))
    if device.type == "cuda":
        if not torch.cuda.is_available():
            pytest.fail(f"--device {device} was asked for, but torch {torch.__version__} sees no CUDA device")
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
    elif device.type != "cpu":
        pytest.fail(f"--device must be cpu, cuda or cuda:N, got {device}")
    return device


@pytest.fixture(autouse=True, scope="session")
def _one_torch_thread():
    """Tiny tensors: one thread is fastest, and robust when other jobs share the 2 CPU cores."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def harness():
    """Prefect's test harness (one temporary server, ~22 s) shared by every flow test."""
    from prefect.testing.utilities import prefect_test_harness

    import flows  # noqa: F401  (quiet settings)

    with prefect_test_harness(server_startup_timeout=120):
        yield


SHARED_DATA = REPO.parent / "shared" / "data"


def shared_path(*parts: str) -> Path:
    """A path under ../shared/data; the test is skipped when it is absent (users won't have it)."""
    path = SHARED_DATA.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} not present")
    return path


def sharpened(model, scale: float):
    """``model`` with every parameter multiplied by ``scale``, in eval mode: sharper distributions
    than the default init, so numeric checks discriminate (fewer near-ties)."""
    import torch

    with torch.no_grad():
        for p in model.parameters():
            p.mul_(scale)
    return model.eval()


def tiny_params() -> dict:
    """The repo's params.yaml scaled down so the whole pipeline runs in seconds."""
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params = copy.deepcopy(params)
    params["prepare"]["copy_rules"].update(n_rules=5, instances_per_rule=8, unseen_per_rule=2, max_filler=4)
    params["model"].update(emb=8, hidden=12)
    params["model"]["pointer_softmax"]["shortlist"] = 20  # the tiny vocabulary has fewer words than 250
    # Training must beat the untrained model's validation loss (pipeline.training.loop.NoImprovement). On
    # these 15 rows WEAN at the default seed 1234 does not within 4 steps: its validation loss rises
    # for the first 28 epochs while the training loss falls (measured). At seed 2 every mechanism
    # improves within the 4 steps (by 1.3% for RNNSearch and Read-Again up to 3.7% for Pointer Softmax).
    params["train"].update(epochs=2, batch_size=8, seed=2, threads=1)  # tiny models: one thread is fastest
    params["evaluate"].update(beam_size=3, max_len=20, batch_size=16, threads=1)
    params["task_settings"]["copy_rules"].pop("mechanisms", None)  # the default run's longer trainings
    return params


@pytest.fixture
def tiny_project(tmp_path, monkeypatch) -> Path:
    """A project root in tmp_path holding a tiny params.yaml; MLflow tracks into it."""
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(tiny_params(), sort_keys=False))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.chdir(tmp_path)  # MLflow puts artifacts under ./mlruns
    return tmp_path


def assert_gradients_reach_every_parameter(model, zero_pad_rows: tuple[str, ...] = ("tgt_emb",)) -> None:
    """After ``loss.backward()``: every parameter has a finite, non-zero gradient, and the ``<pad>``
    row of each named embedding gets none (``padding_idx``)."""
    from pipeline.vocab.vocabulary import PAD

    for name, p in model.named_parameters():
        assert p.grad is not None, name
        assert torch.isfinite(p.grad).all(), name
        assert p.grad.abs().max().item() > 0, name
    for emb in zero_pad_rows:
        assert getattr(model, emb).weight.grad[PAD].abs().max().item() == 0.0, emb


def encoded_task(root: Path, splits: dict[str, list[dict]], src_vocab=None, tgt_vocab=None, schema=None):
    """Shards of ``splits`` (split -> shard rows) under ``root/shards``, vocabularies from the train
    split (unless given), and the train/valid splits id-encoded as the vocab stage writes them.
    Returns ``(encoded splits by name, src_vocab, tgt_vocab)``."""
    import pyarrow as pa

    from pipeline.io.shards import ShardWriter
    from pipeline.vocab.encoded import EncodedSplit, write_encoded_split
    from pipeline.vocab.vocabulary import build_vocab, count_tokens

    for split, rows in splits.items():
        table = pa.Table.from_pylist(rows, schema=schema)
        with ShardWriter(root / "shards" / split, table.schema, rows_per_part=max(1, len(rows) // 2 or 1)) as writer:
            writer.write_table(table)
    train = pa.Table.from_pylist(splits["train"], schema=schema)
    src_vocab = src_vocab or build_vocab(count_tokens(train, "src"))
    tgt_vocab = tgt_vocab or build_vocab(count_tokens(train, "tgt"))
    encoded = {}
    for split in ("train", "valid"):
        write_encoded_split(root / "shards" / split, root / "ids" / split, src_vocab, tgt_vocab)
        encoded[split] = EncodedSplit(root / "ids" / split, len(tgt_vocab))
    return encoded, src_vocab, tgt_vocab


# ---------------------------------------------------------------------------------------------
# Toy models and their distributions
# ---------------------------------------------------------------------------------------------
def toy_model(
    build,
    src_vocab,
    tgt_vocab,
    seed: int = 0,
    scale: float = 2.0,
    emb: int = 6,
    hidden: int = 5,
    config: dict | None = None,
    **options,
):
    """A small model for checks by hand: ``torch.manual_seed(seed)``, a ``ModelConfig`` sized by the
    two vocabularies (``emb``, ``hidden``, ``config``'s other shared fields such as ``encoder``;
    ``options`` are the mechanism's own settings), built by ``build`` (a builder ``cfg -> model``, or
    a mechanism name for ``models.build_model``), then :func:`sharpened` by ``scale`` (eval mode)."""
    from models.config import ModelConfig
    from models.registry import build_model

    torch.manual_seed(seed)
    cfg = ModelConfig(
        src_vocab=len(src_vocab), tgt_vocab=len(tgt_vocab), emb=emb, hidden=hidden, options=options, **(config or {})
    )
    model = build_model(build, cfg) if isinstance(build, str) else build(cfg)
    return sharpened(model, scale)


def assert_step_distributions_normalised(model, batch, atol: float = 1e-5) -> list[tuple]:
    """Encode ``batch`` and step ``model`` through the gold prefix (``tgt_in``), without gradients:
    every step's log-probabilities are finite, of shape (B, V + X), and their probabilities sum to 1
    within ``atol`` over the extended vocabulary. Returns ``(log_probs, state, before)`` per step:
    ``state`` after the step, ``before`` the state the step read, for the caller's further checks."""
    steps = []
    with torch.no_grad():
        before = model.encode(batch)
        for t in range(batch.tgt_in.size(1)):
            log_probs, state = model.step(before, batch.tgt_in[:, t])
            assert log_probs.shape == (batch.size, model.cfg.tgt_vocab + batch.n_ext), t
            assert torch.isfinite(log_probs).all(), t
            total = log_probs.double().exp().sum(-1)
            assert torch.allclose(total, torch.ones_like(total), atol=atol), (t, total)
            steps.append((log_probs, state, before))
            before = state
    return steps


# ---------------------------------------------------------------------------------------------
# The toy copy task ``a X b -> b X`` (tests/test_learning.py, tests/test_serving.py)
# ---------------------------------------------------------------------------------------------
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
    from pipeline.vocab.vocabulary import SPECIALS, Vocab

    return Vocab(list(SPECIALS) + TOY_SEEN + ["a", "b"], [0] * 4 + [1] * (len(TOY_SEEN) + 2))


def toy_copy_batch(rng, pool: list[str], n: int, rare: float = 0.0):
    """``n`` examples of :func:`toy_copy_example` and their batch (:func:`toy_copy_vocab` on both
    sides): ``(pairs, batch)``."""
    from pipeline.vocab.batching import collate

    pairs = [toy_copy_example(rng, pool, rare) for _ in range(n)]
    vocab = toy_copy_vocab()
    return pairs, collate([s for s, _ in pairs], [t for _, t in pairs], vocab, vocab)


# ---------------------------------------------------------------------------------------------
# Written splits and small utilities
# ---------------------------------------------------------------------------------------------
def shard_row(i: str, src: str, tgt: str, **extra) -> dict:
    """A shard row from whitespace-separated text: id, src, tgt, the target as its one reference."""
    return {"id": i, "src": src.split(), "tgt": tgt.split(), "refs": [tgt.split()], **extra}


def split_rows(split_dir: Path) -> list[dict]:
    """The rows of a written split, in order."""
    from pipeline.io.shards import read_split

    return read_split(split_dir).to_pylist()


def rows_by_id(split_dir: Path) -> dict[str, dict]:
    """The rows of a written split by id."""
    return {r["id"]: r for r in split_rows(split_dir)}


def quarantine(split_dir: Path) -> list[dict]:
    """The records of a written split's quarantine.jsonl, in order."""
    return [json.loads(line) for line in (split_dir / "quarantine.jsonl").read_text(encoding="utf-8").splitlines()]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
