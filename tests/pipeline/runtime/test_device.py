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
from models.registry import MECHANISMS, mechanism, runs_on_backbone
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


def _train(task, mechanism: str, device, out, sizes: dict | None = None, **settings) -> tuple[dict, list[dict]]:
    encoded, src, tgt = task
    cfg = ModelConfig(
        src_vocab=len(src), tgt_vocab=len(tgt), **{"emb": 12, "hidden": 16, "dropout": 0.1, **(sizes or {})}
    )
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


# The Transformer decoder under the recurrent rows' encoder (model.decoder: transformer).
TRANSFORMER = {"decoder": "transformer", "decoder_layers": 2, "decoder_heads": 2}
ON_TRANSFORMER = sorted(m for m in MECHS if "transformer" in mechanism(m).decoders)


@pytest.mark.parametrize("name", ON_TRANSFORMER)
def test_deterministic_training_repeats_itself_on_the_transformer_decoder(
    name: str, rules_task, device, tmp_path, deterministic_restored
) -> None:
    """As for the recurrent rows: ``train.deterministic`` runs on the device, learns, and repeats itself
    bit for bit, for every mechanism that runs on the transformer decoder."""
    weights, history = _train(rules_task, name, device, tmp_path / "a", TRANSFORMER, deterministic=True)
    again, history_again = _train(rules_task, name, device, tmp_path / "b", TRANSFORMER, deterministic=True)
    assert history[-1]["valid_loss"] < history[0]["valid_loss"], history
    assert all(torch.equal(weights[k], again[k]) for k in weights)
    assert _losses(history) == _losses(history_again)


@pytest.mark.parametrize("name", ["copynet", "pointer_generator"])
def test_bf16_autocast_on_the_transformer_decoder(name: str, rules_task, device, tmp_path) -> None:
    """bf16 autocast on the transformer decoder trains within BF16_RELATIVE_TOLERANCE of float32."""
    _, fp32 = _train(rules_task, name, device, tmp_path / "fp32", TRANSFORMER, amp="off")
    weights, bf16 = _train(rules_task, name, device, tmp_path / "bf16", TRANSFORMER, amp="bf16")
    assert all(torch.isfinite(v).all() for v in weights.values())
    assert bf16[-1]["valid_loss"] < bf16[0]["valid_loss"]
    gap = abs(bf16[-1]["valid_loss"] - fp32[-1]["valid_loss"]) / fp32[-1]["valid_loss"]
    assert gap < BF16_RELATIVE_TOLERANCE, (bf16[-1]["valid_loss"], fp32[-1]["valid_loss"])


def test_update_freq_and_averaging_on_the_device(rules_task, device, tmp_path, deterministic_restored) -> None:
    """``train.update_freq`` (gradients of 2 batches accumulated per optimizer step) counts its steps,
    learns and repeats itself bit for bit on the device; the kept step checkpoints
    (``train.keep_checkpoints``) average to their mean, as evaluate.average_last reads them."""
    from pipeline.training.averaging import snapshots, write_average

    settings = dict(batch_size=4, update_freq=2, keep_checkpoints=2, deterministic=True, seed=3)
    weights, history = _train(rules_task, "copynet", device, tmp_path / "a", **settings)
    again, history_again = _train(rules_task, "copynet", device, tmp_path / "b", **settings)
    train_rows = len(rules_task[0]["train"])
    batches = math.ceil(train_rows / 4)
    steps_per_epoch = math.ceil(batches / 2)  # batches of 4, two per step
    assert [r["step"] for r in history] == [0, steps_per_epoch, 2 * steps_per_epoch, 3 * steps_per_epoch]
    assert history[-1]["valid_loss"] < history[0]["valid_loss"]
    assert all(torch.equal(weights[k], again[k]) for k in weights) and _losses(history) == _losses(history_again)
    kept = snapshots(tmp_path / "a")
    assert len(kept) == 2
    out = write_average(tmp_path / "a", 2, tmp_path / "avg.pt")
    first, last, averaged = (torch.load(p, map_location="cpu", weights_only=True) for p in (*kept, out))
    assert all(torch.equal(last["model"][k].cpu(), v) for k, v in weights.items())
    for key, value in averaged["model"].items():
        by_hand = ((first["model"][key].double() + last["model"][key].double()) / 2).to(value.dtype)
        assert torch.equal(value.cpu(), by_hand.cpu()), key


@pytest.mark.parametrize("name", ["copynet", "pointer_generator"])
def test_training_with_cuda_graphs(
    name: str, rules_task, device, tmp_path, deterministic_restored, monkeypatch, capsys
):
    """``train.cuda_graphs``: on CUDA the recurrence is captured (one graph per bucketed batch shape),
    the training learns, repeats itself bit for bit under ``train.deterministic``, and ends within
    1% of the eager run's validation loss (float32; the padded shapes change cuBLAS's summation
    order, not the maths). On the CPU the setting is reported and training runs eagerly."""
    captures = []
    make = torch.cuda.make_graphed_callables
    monkeypatch.setattr(torch.cuda, "make_graphed_callables", lambda *a, **k: captures.append(1) or make(*a, **k))
    settings = dict(deterministic=True, amp="off")
    weights, history = _train(rules_task, name, device, tmp_path / "a", cuda_graphs=True, **settings)
    if device.type != "cuda":
        assert "train.cuda_graphs needs a CUDA device" in capsys.readouterr().err and not captures
        return
    assert 1 <= len(captures) <= 64
    again, history_again = _train(rules_task, name, device, tmp_path / "b", cuda_graphs=True, **settings)
    _, eager = _train(rules_task, name, device, tmp_path / "c", **settings)
    assert history[-1]["valid_loss"] < history[0]["valid_loss"]
    assert all(torch.equal(weights[k], again[k]) for k in weights) and _losses(history) == _losses(history_again)
    gap = abs(history[-1]["valid_loss"] - eager[-1]["valid_loss"]) / eager[-1]["valid_loss"]
    assert gap < 0.01, (history[-1]["valid_loss"], eager[-1]["valid_loss"])


# The Pointer Softmax head is left out: on this toy task its training objective (log p(y, z)) falls
# while its validation log p(y) rises from the untrained model's, on the CPU too, so the run ends in
# NoImprovement (its maths on the device: tests/models/test_contract.py).
HEADS = sorted(m for m in MECHANISMS if runs_on_backbone(m) and m != "backbone_pointer_softmax")


@pytest.fixture(scope="module")
def backbone_task(tmp_path_factory):
    """A tiny BART-shaped backbone made here (tokenizer trained on the toy copy task's text, fresh
    weights, loaded through from_pretrained as a user's is) and the toy task encoded in its pieces."""
    import random

    from benchmarks.toy import TOY_SEEN, toy_copy_example
    from pipeline.io.shards import ShardWriter, make_schema
    from pipeline.vocab.encoded import EncodedSplit, write_encoded_split
    from pipeline.vocab.tiny_backbone import make_tiny_backbone
    from pipeline.vocab.tokenizer import BackboneTokenizer

    root = tmp_path_factory.mktemp("backbone")
    rng = random.Random(0)
    pairs = {split: [toy_copy_example(rng, TOY_SEEN) for _ in range(n)] for split, n in (("train", 48), ("valid", 8))}
    texts = [" ".join(side) for rows in pairs.values() for pair in rows for side in pair]
    path = make_tiny_backbone("bart", texts, root / "bart", d_model=16, layers=2, heads=2, vocab_size=120)
    tok = BackboneTokenizer.from_backbone(str(path))
    for split, rows in pairs.items():
        with ShardWriter(root / "shards" / split, make_schema()) as writer:
            writer.write([{"id": str(i), "src": s, "tgt": t, "refs": []} for i, (s, t) in enumerate(rows)])
        write_encoded_split(root / "shards" / split, root / "ids" / split, tok.vocab, tok.vocab, tok.piece_table)
    return path, tok, {split: EncodedSplit(root / "ids" / split, len(tok.vocab)) for split in pairs}


def _train_head(task, name: str, device, out, **settings) -> tuple[dict, list[dict]]:
    from models.registry import build_model, model_config

    path, tok, encoded = task
    torch.manual_seed(3)
    cfg = model_config({"backbone": str(path)}, name, src_vocab=len(tok.vocab), tgt_vocab=len(tok.vocab))
    model = build_model(name, cfg)
    train_cfg = TrainConfig(
        **{"epochs": 3, "batch_size": 8, "lr": 1e-3, "device": str(device), "threads": 1, "seed": 7, **settings}
    )
    history = train(model, encoded["train"], encoded["valid"], train_cfg, out, model_config=vars(cfg), progress=False)
    return {k: v.detach().cpu() for k, v in model.state_dict().items()}, history


@pytest.mark.parametrize("name", HEADS)
def test_backbone_heads_train_deterministically_and_in_bf16(
    name: str, backbone_task, device, tmp_path, deterministic_restored
) -> None:
    """Each head on the tiny BART on the device: ``train.deterministic`` learns and repeats itself bit
    for bit, and bf16 autocast ends within BF16_RELATIVE_TOLERANCE of float32's validation loss."""
    weights, fp32 = _train_head(backbone_task, name, device, tmp_path / "a", deterministic=True, amp="off")
    again, fp32_again = _train_head(backbone_task, name, device, tmp_path / "b", deterministic=True, amp="off")
    assert fp32[-1]["valid_loss"] < fp32[0]["valid_loss"], fp32
    assert all(torch.equal(weights[k], again[k]) for k in weights) and _losses(fp32) == _losses(fp32_again)
    bf16_weights, bf16 = _train_head(backbone_task, name, device, tmp_path / "c", amp="bf16")
    assert all(torch.isfinite(v).all() for v in bf16_weights.values() if v.is_floating_point())
    gap = abs(bf16[-1]["valid_loss"] - fp32[-1]["valid_loss"]) / fp32[-1]["valid_loss"]
    assert gap < BF16_RELATIVE_TOLERANCE, (bf16[-1]["valid_loss"], fp32[-1]["valid_loss"])
