"""Shared fixtures: a tiny params file (seconds, not minutes) and quiet, local tool settings."""
from __future__ import annotations

import copy
import os
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
    import flows  # noqa: F401  (quiet settings)
    from prefect.testing.utilities import prefect_test_harness

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
    params["train"].update(epochs=2, batch_size=8)
    params["evaluate"].update(beam_size=3, max_len=20, batch_size=16)
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
    from pipeline.vocab import PAD

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

    from pipeline.encoded import EncodedSplit, write_encoded_split
    from pipeline.shards import ShardWriter
    from pipeline.vocab import build_vocab, count_tokens

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
