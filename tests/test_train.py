"""Training loop: an interrupted run resumes to exactly the weights of an uninterrupted one."""
from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
import torch

from models import build_model
from models.config import ModelConfig
from pipeline.corpora.copynet_rules import SCHEMA, RulesConfig, generate_examples
from pipeline.train import TrainConfig, train
from pipeline.vocab import build_vocab, count_tokens


@pytest.fixture(scope="module")
def data():
    splits = generate_examples(RulesConfig(n_rules=5, instances_per_rule=10, unseen_per_rule=1, max_filler=4))
    tables = {k: pa.Table.from_pylist(v, schema=SCHEMA) for k, v in splits.items()}
    src = build_vocab(count_tokens(tables["train"], "src"))
    tgt = build_vocab(count_tokens(tables["train"], "tgt"))
    return tables, src, tgt


class Interrupt(Exception):
    pass


def _run(data, ckpt: Path, stop_after: int | None = None):
    tables, src, tgt = data
    cfg = ModelConfig(src_vocab=len(src), tgt_vocab=len(tgt), emb=8, hidden=12, dropout=0.2)  # dropout uses the RNG
    torch.manual_seed(0)
    model = build_model("copynet", cfg)

    def on_epoch(row):
        if stop_after is not None and row["epoch"] == stop_after:
            raise Interrupt

    history = train(model, tables["train"], tables["valid"], src, tgt,
                    TrainConfig(epochs=3, batch_size=8, seed=7), ckpt, model_config=vars(cfg), data_hash="d",
                    on_epoch=on_epoch, progress=False)
    return model, history


def test_resume_after_interruption_equals_uninterrupted(data, tmp_path):
    straight, history = _run(data, tmp_path / "a")
    assert [r["epoch"] for r in history] == [1, 2, 3]
    assert history[-1]["train_loss"] < history[0]["train_loss"]

    with pytest.raises(Interrupt):
        _run(data, tmp_path / "b", stop_after=1)
    assert torch.load(tmp_path / "b" / "last.pt", weights_only=False)["epoch"] == 1
    resumed, history_b = _run(data, tmp_path / "b")
    assert [r["epoch"] for r in history_b] == [1, 2, 3]
    for (name, p), q in zip(straight.state_dict().items(), resumed.state_dict().values()):
        assert torch.equal(p, q), name
    for a, b in zip(history, history_b):
        assert a["train_loss"] == pytest.approx(b["train_loss"], abs=1e-9)
        assert a["valid_loss"] == pytest.approx(b["valid_loss"], abs=1e-9)


def test_rerun_after_a_completed_run_starts_afresh(data, tmp_path):
    """DVC reruns a finished training after a code change: that must retrain, not resume."""
    first, _ = _run(data, tmp_path / "d")
    again, history = _run(data, tmp_path / "d")
    assert [r["epoch"] for r in history] == [1, 2, 3]  # trained again from epoch 1
    for p, q in zip(first.state_dict().values(), again.state_dict().values()):
        assert torch.equal(p, q)  # seeded: the same result


def test_changed_settings_start_afresh(data, tmp_path):
    _run(data, tmp_path / "c", stop_after=None)
    tables, src, tgt = data
    cfg = ModelConfig(src_vocab=len(src), tgt_vocab=len(tgt), emb=8, hidden=12)
    history = train(build_model("copynet", cfg), tables["train"], tables["valid"], src, tgt,
                    TrainConfig(epochs=1, batch_size=8, seed=7), tmp_path / "c", model_config=vars(cfg),
                    data_hash="d", progress=False)
    assert [r["epoch"] for r in history] == [1]  # not a continuation of the 3-epoch run
    assert not list((tmp_path / "c").glob(".*.tmp"))  # no temp files left behind


def test_seeded_model_builds_identical_weights(data):
    from pipeline.train import build_seeded_model

    _, src, tgt = data
    cfg = ModelConfig(src_vocab=len(src), tgt_vocab=len(tgt), emb=8, hidden=12)
    a = build_seeded_model("copynet", cfg, seed=11)
    torch.rand(100)  # whatever ran before must not matter
    b = build_seeded_model("copynet", cfg, seed=11)
    c = build_seeded_model("copynet", cfg, seed=12)
    assert all(torch.equal(p, q) for p, q in zip(a.state_dict().values(), b.state_dict().values()))
    assert not all(torch.equal(p, q) for p, q in zip(a.state_dict().values(), c.state_dict().values()))
