"""The training engine on ``--device`` (cpu by default; ``pytest --device cuda -m device`` on a GPU):
a short training with ``train.deterministic`` runs and repeats itself bit for bit, bf16 autocast
trains within a stated distance of float32, fused RNNs run in float32 under autocast, an operation
without a deterministic kernel is reported by name, and the compiled recurrence (``train.compile``)
computes what the eager one does.

The model maths on the device (every mechanism's contract: distributions, two-phase equals stepwise,
gradients reaching every parameter, checkpoints, beam search equals brute force) is checked by
tests/models/test_contract.py, also marked ``device``.
"""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch

from models.config import ModelConfig
from models.registry import MECHANISMS, runs_on_backbone
from models.rnn import run_rnn
from pipeline.data.corpora.copynet_rules import SCHEMA, RulesConfig, generate_examples
from pipeline.runtime.device import NondeterministicOperation, autocast, nondeterministic_ops_named
from pipeline.training.loop import build_seeded_model, train
from pipeline.training.settings import TrainConfig
from pipeline.vocab.vocabulary import build_vocab
from tests.helpers import contract_batch, contract_model, encoded_task

pytestmark = pytest.mark.device
MECHS = sorted(m for m in MECHANISMS if not runs_on_backbone(m))  # backbone_*: tests/models/test_backbone.py


@pytest.fixture
def deterministic_restored():
    """``train(deterministic=True)`` switches torch's deterministic mode on for the process: put back
    what the other tests run with."""
    before = torch.are_deterministic_algorithms_enabled()
    yield
    torch.use_deterministic_algorithms(before)


@pytest.fixture(scope="module")
def rules_task(tmp_path_factory):
    """A tiny CopyNet rule task, encoded as the vocab stage writes it (vocabularies counted here)."""
    root = tmp_path_factory.mktemp("rules")
    splits = generate_examples(RulesConfig(n_rules=4, instances_per_rule=10, unseen_per_rule=1, max_filler=3))
    counts = {side: Counter(tok for row in splits["train"] for tok in row[side]) for side in ("src", "tgt")}
    return encoded_task(
        root,
        {k: splits[k] for k in ("train", "valid")},
        build_vocab(counts["src"]),
        build_vocab(counts["tgt"]),
        schema=SCHEMA,
    )


def _train(task, mechanism: str, device, out, **settings) -> tuple[dict, list[dict]]:
    encoded, src, tgt = task
    cfg = ModelConfig(src_vocab=len(src), tgt_vocab=len(tgt), emb=12, hidden=16, dropout=0.1)
    model = build_seeded_model(mechanism, cfg, 5)
    train_cfg = TrainConfig(
        **{"epochs": 3, "batch_size": 8, "lr": 0.01, "device": str(device), "threads": 1, **settings}
    )
    history = train(model, encoded["train"], encoded["valid"], train_cfg, out, model_config=vars(cfg), progress=False)
    return {k: v.detach().cpu() for k, v in model.state_dict().items()}, history


def _losses(history: list[dict]) -> list[dict]:
    return [{k: v for k, v in row.items() if k != "tokens_per_s"} for row in history]  # wall clock differs


@pytest.mark.parametrize("name", MECHS)
def test_deterministic_training_repeats_itself(name: str, rules_task, device, tmp_path, deterministic_restored):
    """``train.deterministic: true`` on the device: the training runs (an operation without a
    deterministic kernel would raise NondeterministicOperation here), learns, and a second run gives
    the same weights and the same learning curve, bit for bit."""
    weights, history = _train(rules_task, name, device, tmp_path / "a", deterministic=True)
    again, history_again = _train(rules_task, name, device, tmp_path / "b", deterministic=True)
    assert torch.are_deterministic_algorithms_enabled()
    assert history[-1]["valid_loss"] < history[0]["valid_loss"], history
    assert weights.keys() == again.keys()
    for key in weights:
        assert torch.equal(weights[key], again[key]), key
    assert _losses(history) == _losses(history_again)


# bf16 keeps 8 bits of mantissa. After these 6 steps at lr 0.01 its final validation loss was within
# 0.043% of float32's on the CPU for every mechanism (CPU autocast: matrix products in bf16); a GPU
# runs the recurrent cells in bf16 too (cuDNN), so the bound is wider: 2%. A broken mixed-precision
# path (a normaliser quantised to bf16, a NaN, an overflow) lands outside it.
BF16_RELATIVE_TOLERANCE = 0.02


@pytest.mark.parametrize("name", ["copynet", "pointer_generator", "wean"])
def test_bf16_autocast_trains_within_tolerance_of_float32(name: str, rules_task, device, tmp_path) -> None:
    fp32_weights, fp32 = _train(rules_task, name, device, tmp_path / "fp32", amp="off")
    bf16_weights, bf16 = _train(rules_task, name, device, tmp_path / "bf16", amp="bf16")
    assert all(v.dtype == torch.float32 for v in bf16_weights.values())  # autocast: float32 master weights
    assert all(torch.isfinite(v).all() for v in bf16_weights.values())
    assert all(math.isfinite(r["valid_loss"]) for r in bf16)
    assert bf16[-1]["valid_loss"] < bf16[0]["valid_loss"]  # it learned
    gap = abs(bf16[-1]["valid_loss"] - fp32[-1]["valid_loss"]) / fp32[-1]["valid_loss"]
    assert gap < BF16_RELATIVE_TOLERANCE, (bf16[-1]["valid_loss"], fp32[-1]["valid_loss"])
    assert any(not torch.equal(fp32_weights[k], bf16_weights[k]) for k in fp32_weights)  # bf16 really ran


@pytest.mark.parametrize("layer", [torch.nn.GRU, torch.nn.LSTM], ids=["gru", "lstm"])
def test_fused_rnns_run_in_float32_under_autocast(layer, device) -> None:
    """models.rnn.run_rnn: under bf16 autocast an nn.GRU / nn.LSTM runs in float32 (CUDA autocast
    would run cuDNN's kernel in float16, the CPU's LSTM in bf16) and gives exactly the float32 result."""
    torch.manual_seed(0)
    rnn = layer(4, 5, batch_first=True).to(device)
    x = torch.randn(2, 3, 4, device=device)
    h0 = torch.randn(1, 2, 5, device=device)
    hx = (h0, torch.randn_like(h0)) if layer is torch.nn.LSTM else h0
    with torch.no_grad():
        expected, _ = rnn(x, hx)
        with autocast(device, "bf16"):
            out, _ = run_rnn(rnn, x.bfloat16(), hx)
            assert torch.is_autocast_enabled(device.type)  # still on after the layer
        # The float32 call on the same inputs, in the same (no-grad) mode: oneDNN runs its inference
        # kernel without gradients and its training kernel with them, and on some CPUs (an AMD EPYC)
        # the two differ in the last bits.
        reference = rnn(x.bfloat16().float(), hx)[0]
    assert out.dtype == torch.float32
    assert torch.equal(out, reference)
    assert float((out - expected).abs().max()) < 1e-2  # the input's rounding to bf16 only


def test_an_operation_without_a_deterministic_kernel_is_named(device, deterministic_restored) -> None:
    """PyTorch's error for such an operation becomes one naming it, the device and the setting. On a
    GPU with a real one (``bincount`` with weights has no deterministic CUDA kernel); on the CPU,
    where every operation the models use has one, with PyTorch's message raised by hand."""
    if device.type == "cuda":
        torch.use_deterministic_algorithms(True)
        ids, weights = torch.tensor([0, 1, 1], device=device), torch.ones(3, device=device)
        with pytest.raises(NondeterministicOperation, match=r"train\.deterministic is true, but the operation"):
            with nondeterministic_ops_named(device, "train.deterministic"):
                torch.bincount(ids, weights=weights)
    message = (
        "scatter_add_cuda_kernel does not have a deterministic implementation, but you set "
        "'torch.use_deterministic_algorithms(True)'."
    )
    with pytest.raises(NondeterministicOperation) as caught:
        with nondeterministic_ops_named(torch.device("cuda", 0), "evaluate.deterministic"):
            raise RuntimeError(message)
    text = str(caught.value)
    assert "scatter_add_cuda_kernel" in text and "cuda:0" in text and "evaluate.deterministic: false" in text
    with pytest.raises(RuntimeError, match="^out of memory$"):  # any other error passes unchanged
        with nondeterministic_ops_named(device, "train.deterministic"):
            raise RuntimeError("out of memory")


def test_compiled_recurrence_computes_what_the_eager_one_does(device) -> None:
    """``Seq2Seq.compile_recurrence`` (``train.compile``): CopyNet (selective read fed back, the
    richest per-step work) gives the eager log-likelihoods and gradients to float32's rounding, and
    keeps its parameter names (checkpoints load either way)."""
    eager = contract_model("copynet", {}, device, dtype=torch.float32).train()
    compiled = contract_model("copynet", {}, device, dtype=torch.float32).train().compile_recurrence()
    assert list(compiled.state_dict()) == list(eager.state_dict())
    batch = contract_batch(False, device)
    gold, gold_ref = compiled(batch), eager(batch)
    gold.sum().backward()
    gold_ref.sum().backward()
    assert float((gold - gold_ref).detach().norm() / gold_ref.detach().norm()) < 1e-5
    grads = dict(compiled.named_parameters())
    for key, p in eager.named_parameters():
        assert float((grads[key].grad - p.grad).norm() / p.grad.norm().clamp_min(1e-30)) < 1e-4, key
