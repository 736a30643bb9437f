"""Helpers the tests share (one module; tests/conftest.py holds the pytest fixtures): the repository and
its fixtures, a tiny params file (seconds, not minutes), toy models checked by hand and the mechanism
contract every mechanism must meet (tests/models/test_contract.py runs it over every discovered
mechanism), the toy copy task (from :mod:`benchmarks.toy`, which the serving benchmark shares), and
readers of written splits."""

from __future__ import annotations

import copy
import importlib.util
import json
import math
import os
import random
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
import warnings
from pathlib import Path

import pyarrow as pa
import pytest
import torch
import yaml

from benchmarks.toy import (  # noqa: F401  (re-exported: the toy copy task and project)
    EVALUATE,
    PREPARE,
    TASK,
    TOY_RARE,
    TOY_SEEN,
    TOY_UNSEEN,
    build_toy_project,
    free_port,
    start_mlflow_server,
    stop_server,
    toy_copy_batch,
    toy_copy_example,
    toy_copy_vocab,
)
from models import registry
from models.config import ModelConfig
from models.extended import NEG
from models.registry import build_model
from pipeline.data import tasks
from pipeline.data.prepare import prepare_job, write_job
from pipeline.decoding.search import beam_search, greedy
from pipeline.io.parallel import serial_map
from pipeline.io.shards import ShardWriter, read_split
from pipeline.serving.predictor import ServingConfig
from pipeline.training.checkpoints import load_model, save_atomic, vocab_identity
from pipeline.training.loop import build_seeded_model, nll_loss, train
from pipeline.training.settings import TrainConfig
from pipeline.vocab.batching import collate
from pipeline.vocab.encoded import EncodedSplit, write_encoded_split
from pipeline.vocab.extended import ext_ids_to_tokens
from pipeline.vocab.vocabulary import (
    BOS,
    EOS,
    PAD,
    SPECIALS,
    Vocab,
    build_vocab,
    count_split_tokens,
    count_tokens,
    load_features_vocab,
    save_features_vocab,
)

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures"

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
    params["model"]["pointer_softmax"]["shortlist"] = 20  # a real shortlist: 250 is the whole tiny vocabulary
    # Training must beat the untrained model's validation loss (pipeline.training.loop.NoImprovement). On
    # these 15 rows WEAN at the default seed 1234 does not within 4 steps: its validation loss rises
    # for the first 28 epochs while the training loss falls (measured). At seed 2 every mechanism
    # improves within the 4 steps (by 1.3% for RNNSearch and Read-Again up to 3.7% for Pointer Softmax).
    params["train"].update(epochs=2, batch_size=8, seed=2, threads=1)  # tiny models: one thread is fastest
    params["evaluate"].update(beam_size=3, max_len=20, batch_size=16, threads=1)
    params["task_settings"]["copy_rules"].pop("mechanisms", None)  # the default run's longer trainings
    # The Transformer-decoder variants run here too (whether or not the default run lists them).
    variants = ["copynet_transformer", "pointer_generator_transformer"]
    params["mechanisms"] = [*(m for m in params["mechanisms"] if m not in variants), *variants]
    return params


def assert_gradients_reach_every_parameter(model, zero_pad_rows: tuple[str, ...] = ("tgt_emb",)) -> None:
    """After ``loss.backward()``: every trainable parameter has a finite, non-zero gradient, and the
    ``<pad>`` row of each named embedding gets none (``padding_idx``). A parameter the model freezes
    (``requires_grad`` false: a pretrained backbone's fixed positions, or its key biases, which no
    gradient reaches) is left out."""
    for name, p in model.named_parameters():
        if not p.requires_grad:
            assert p.grad is None, name
            continue
        assert p.grad is not None, name
        assert torch.isfinite(p.grad).all(), name
        assert p.grad.abs().max().item() > 0, name
    for emb in zero_pad_rows:
        assert getattr(model, emb).weight.grad[PAD].abs().max().item() == 0.0, emb


def encoded_task(root: Path, splits: dict[str, list[dict]], src_vocab=None, tgt_vocab=None, schema=None):
    """Shards of ``splits`` (split -> shard rows) under ``root/shards``, vocabularies from the train
    split (unless given), and the train/valid splits id-encoded as the vocab stage writes them.
    Returns ``(encoded splits by name, src_vocab, tgt_vocab)``."""

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
    torch.manual_seed(seed)
    sizes = {"emb": emb, "hidden": hidden, **(config or {})}  # ``config`` may resize (e.g. the transformer's)
    cfg = ModelConfig(src_vocab=len(src_vocab), tgt_vocab=len(tgt_vocab), options=options, **sizes)
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
# Written splits
# ---------------------------------------------------------------------------------------------
def shard_row(i: str, src: str, tgt: str, **extra) -> dict:
    """A shard row from whitespace-separated text: id, src, tgt, the target as its one reference."""
    return {"id": i, "src": src.split(), "tgt": tgt.split(), "refs": [tgt.split()], **extra}


def split_rows(split_dir: Path) -> list[dict]:
    """The rows of a written split, in order."""
    return read_split(split_dir).to_pylist()


def rows_by_id(split_dir: Path) -> dict[str, dict]:
    """The rows of a written split by id."""
    return {r["id"]: r for r in split_rows(split_dir)}


def quarantine(split_dir: Path) -> list[dict]:
    """The records of a written split's quarantine.jsonl, in order."""
    return [json.loads(line) for line in (split_dir / "quarantine.jsonl").read_text(encoding="utf-8").splitlines()]


# ---------------------------------------------------------------------------------------------
# The toy copy task: a small model trained on it (tests/models/test_learning.py and per mechanism)
# ---------------------------------------------------------------------------------------------
SEEN, UNSEEN = TOY_SEEN, TOY_UNSEEN
# Rare words in training (TOY_RARE): out of vocabulary like the test's unseen fillers, but a
# different pool. As in real corpora (rare words -> <unk>), the encoder meets <unk> fillers in training,
# so a copy mechanism learns to copy them by position; without them the <unk> embedding stays at its
# random init and unseen-filler accuracy depends on the seed.
RARE_RATE = 0.1
VOCAB = toy_copy_vocab()
STEPS, BATCH = 300, 32


def train_toy(name: str, builder=build_model, **options):
    """A small model of mechanism ``name`` trained on the toy task (seen fillers only)."""
    random.seed(0)
    torch.manual_seed(0)
    rng = random.Random(f"train-{name}")
    cfg = ModelConfig(src_vocab=len(VOCAB), tgt_vocab=len(VOCAB), emb=32, hidden=64, options=options)
    model = builder(name, cfg) if builder is build_model else builder(cfg)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(STEPS):
        _, batch = toy_copy_batch(rng, SEEN, BATCH, RARE_RATE)
        loss, _ = nll_loss(model, batch)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        opt.step()
    return model.eval()


def toy_copy_scores(label: str, name: str, builder=build_model, **options) -> tuple[float, float]:
    """:func:`train_toy` ``name``, then its exact match on seen and on unseen fillers (printed with the
    training time under ``label``): what a copying mechanism's learning test asserts on."""
    t0 = time.perf_counter()
    model = train_toy(name, builder, **options)
    seen, unseen = exact_match(model, SEEN, seed=1), exact_match(model, UNSEEN, seed=2)
    print(f"{label}: trained in {time.perf_counter() - t0:.1f}s; exact match seen {seen:.2f}, unseen {unseen:.2f}")
    return seen, unseen


def exact_match(model, pool: list[str], seed: int, n: int = 100) -> float:
    data, batch = toy_copy_batch(random.Random(seed), pool, n)
    hyps = greedy(model, batch, max_len=12)
    hits = sum(ext_ids_to_tokens(h.ids, batch.oovs[i], VOCAB) == data[i][1] for i, h in enumerate(hyps))
    return hits / n


# ---------------------------------------------------------------------------------------------
# The toy project served (tests/pipeline/serving, tests/pipeline/tracking)
# ---------------------------------------------------------------------------------------------
OOV_TEXT = "a u1 zz9 u2 b"  # u1, zz9, u2: in no vocabulary
LONG_TEXT = " ".join(["a"] + [f"s{i % 50}" for i in range(398)] + ["b"])  # 400 tokens: CopyNet copies on and on


def serving_config(mech: str, **overrides) -> ServingConfig:
    return ServingConfig.from_params(TASK, mech, PREPARE, EVALUATE, **overrides)


def local(project: Path, mech: str, **overrides):
    # Imported here: pyfunc needs MLflow, which the GPU machine (pytest --device cuda) does not have.
    from pipeline.serving.pyfunc import local_model

    return local_model(
        project / "data/checkpoints" / TASK / mech, project / "data/vocab" / TASK, serving_config(mech, **overrides)
    )


# ---------------------------------------------------------------------------------------------
# Corpus readers
# ---------------------------------------------------------------------------------------------
class StubTagger:
    """A picklable test tagger: capitalised words are PERSON, the rest O."""

    def __call__(self, batch):
        return [["PERSON" if w[:1].isupper() else "O" for w in words] for words in batch]


# ---------------------------------------------------------------------------------------------
# The mechanism contract: what every mechanism must meet, whatever its paper. tests/models/
# test_contract.py runs every check over every mechanism models.registry discovers and every option
# set it declares (Mechanism.variants); a new mechanism is checked with no test copied.
# ---------------------------------------------------------------------------------------------
CONTRACT_SRC_WORDS = ["a", "b", "c", "d", "e", "f", "g", "."]
CONTRACT_TGT_WORDS = ["a", "b", "c", "d", "e", "."]  # f, g and z* are decoder OOVs
# Several sentences (Read-Again opt1/opt2), repeated words, OOVs copied, an OOV found nowhere (-> <unk>).
CONTRACT_SRCS = [
    ["a", "b", ".", "c"],
    ["c", "f", "a", "f", ".", "d", "e"],
    ["g", "zz", "b", ".", "a", "zz", "c", ".", "e"],
]
CONTRACT_TGTS = [["b", "a", "c", "e", "e"], ["f", "f", "c", "q"], ["zz", "g", "b", "d", "zz", "b", "."]]
# Pointer Softmax 5.2-style annotations: the source position of each target token (-1: none).
CONTRACT_POINTERS = [[1, 0, 3, -1, -1], [1, 3, 0, -1], [1, 0, 2, -1, 5, -1, 3]]
CONTRACT_SWITCHES = [
    [False, True, True, False, False],
    [True, True, False, True],
    [True, True, False, False, True, True, False],
]
# The search's tiny case: V = 6 (4 specials + 2 words), sources holding a decoder OOV, so the extended
# vocabulary (V + X = 7 ids) is part of a search small enough to enumerate.
SEARCH_SRC_WORDS, SEARCH_TGT_WORDS = ["a", "b", "c"], ["a", "b"]
SEARCH_SRCS = [["a", "z", "b"], ["c", "a", "c", "b", "a"], ["b", "a"]]  # OOVs: z / c / none


def vocab_of(words: list[str]) -> Vocab:
    """The specials, then ``words`` (count 1 each)."""
    return Vocab(list(SPECIALS) + words, [0] * len(SPECIALS) + [1] * len(words))


CONTRACT_SRC_VOCAB, CONTRACT_TGT_VOCAB = vocab_of(CONTRACT_SRC_WORDS), vocab_of(CONTRACT_TGT_WORDS)
SEARCH_SRC_VOCAB, SEARCH_TGT_VOCAB = vocab_of(SEARCH_SRC_WORDS), vocab_of(SEARCH_TGT_WORDS)
LIVE = NEG / 2  # a hypothesis scoring below this used an impossible token


# The sizes a contract case on the transformer decoder adds to its variant: 2 heads of size 3 (every
# head path, the alignment head beside another), 2 layers (the cache of a lower layer feeds the next),
# an encoder of another size (memory M = 8, decoder H = 6: every bridge reads M, not 2 * hidden).
TRANSFORMER_DECODER = {"decoder": "transformer", "decoder_heads": 2, "hidden": 6, "encoder_hidden": 4}


def contract_cases() -> list[tuple[str, int, dict]]:
    """``(mechanism, variant number, variant)`` for every declared mechanism and option set, and each
    again on the transformer decoder (variant numbers ``tf<i>``) where the mechanism accepts it."""
    cases = [(m.name, i, dict(variant)) for m in registry.DECLARED.values() for i, variant in enumerate(m.variants)]
    for m in registry.DECLARED.values():
        if "transformer" in m.decoders:
            cases += [(m.name, f"tf{i}", {**v, **TRANSFORMER_DECODER}) for i, v in enumerate(m.variants)]
    return cases


def contract_model(name: str, variant: dict, device, dtype=torch.float64, seed: int = 3, scale: float = 1.5):
    """Mechanism ``name`` with ``variant`` (a ``model.<name>`` section, shared keys allowed) on the
    contract's vocabularies, sharpened, in eval mode, on ``device``."""
    shared, own = registry.split_section(name, variant)
    model = toy_model(name, CONTRACT_SRC_VOCAB, CONTRACT_TGT_VOCAB, seed=seed, scale=scale, config=shared, **own)
    return model.to(device=device, dtype=dtype)


def contract_batch(annotated: bool, device, targets: bool = True):
    """The contract's three examples (with the pointer annotations when ``annotated``) on ``device``."""
    tgts = CONTRACT_TGTS if targets else None
    if annotated:
        batch = collate(
            CONTRACT_SRCS,
            tgts,
            CONTRACT_SRC_VOCAB,
            CONTRACT_TGT_VOCAB,
            pointers=CONTRACT_POINTERS,
            switches=CONTRACT_SWITCHES,
        )
    else:
        batch = collate(CONTRACT_SRCS, tgts, CONTRACT_SRC_VOCAB, CONTRACT_TGT_VOCAB)
    return batch.to(device)


def check_distributions(model, batch) -> None:
    """(1) Every decoding step gives finite log-probabilities over the extended vocabulary V + X that
    sum to 1 (a mechanism whose search ranks by another score, ``scores_are_probabilities`` false,
    at most 1), with nothing on the slots past an example's own OOVs and nothing on any extended slot
    for a mechanism that cannot copy; in eval mode ``forward`` is log p(y_t) at the training target,
    and 0 at padding."""
    v = model.cfg.tgt_vocab
    normalised = model.output.scores_are_probabilities
    with torch.no_grad():
        gold = model(batch)  # (B, T)
        target = model.training_target(batch)  # (B, T): what the model can produce
        state = model.encode(batch)
        for t in range(batch.tgt_in.size(1)):
            log_probs, state = model.step(state, batch.tgt_in[:, t])
            assert log_probs.shape == (batch.size, v + batch.n_ext), t
            assert torch.isfinite(log_probs).all(), t
            p = log_probs.double().exp()
            total = p.sum(-1)
            if normalised:
                assert torch.allclose(total, torch.ones_like(total), atol=1e-5), (t, total)
                by_hand = log_probs.gather(1, target[:, t : t + 1]).squeeze(1)
                real = target[:, t] != PAD
                assert torch.allclose(gold[real, t].double(), by_hand[real].double(), atol=1e-5), t
            else:
                assert (total <= 1 + 1e-5).all(), (t, total)
            for b in range(batch.size):
                own = len(batch.oovs[b])
                if own < batch.n_ext:
                    assert p[b, v + own :].max().item() < 1e-30, (t, b)
                if not model.output.can_copy:
                    assert p[b, v:].max().item() < 1e-30, (t, b)
    real = batch.tgt_out != PAD
    assert (gold[~real] == 0).all()
    assert (gold[real] < 0).all()


def gold_and_grads(model, batch, objective: bool | None, stepwise: bool):
    """Teacher forcing's per-token objective (B, T) and every parameter's gradient of its sum."""
    model.zero_grad(set_to_none=True)
    # cuDNN's RNN backward runs in training mode only: an eval-mode model on a GPU (the float64
    # maths checks) runs PyTorch's own CUDA RNN kernels instead.
    with torch.backends.cudnn.flags(enabled=model.training):
        gold = model(batch, objective=objective, stepwise=stepwise)  # (B, T)
        gold.sum().backward()
    return gold.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def check_two_phase(model, batch, objective: bool | None, atol: float = 1e-9) -> None:
    """(2) Two-phase teacher forcing (recurrence first, then the output layer on all B x T positions at
    once) equals the stepwise computation through ``step``: the per-token log-likelihoods or training
    objectives and every parameter's gradient, to ``atol`` (float64)."""
    two_phase, grads = gold_and_grads(model, batch, objective, stepwise=False)
    stepwise, grads_ref = gold_and_grads(model, batch, objective, stepwise=True)
    real = batch.tgt_out != PAD
    assert (two_phase[real] < 0).all() and (two_phase[~real] == 0).all()
    assert torch.allclose(two_phase, stepwise, rtol=0, atol=atol), (two_phase - stepwise).abs().max()
    assert grads.keys() == grads_ref.keys() and len(grads) > 0
    for key, grad in grads.items():
        assert torch.allclose(grad, grads_ref[key], rtol=0, atol=atol), (key, (grad - grads_ref[key]).abs().max())


def relative_error(x: torch.Tensor, ref: torch.Tensor) -> float:
    return float((x - ref).norm() / ref.norm().clamp_min(1e-30))


def check_two_phase_float32(model, batch) -> None:
    """(2, at the training precision) float32 in training mode: the two computations sum in other
    orders, so they agree to float32's rounding, not to the bit: relative error of the objectives and
    of every gradient under 1e-4 (float32 rounding is ~1e-7 per operation; a wrong term is off by far
    more)."""
    two_phase, grads = gold_and_grads(model, batch, True, stepwise=False)
    stepwise, grads_ref = gold_and_grads(model, batch, True, stepwise=True)
    assert two_phase.dtype == torch.float32
    assert relative_error(two_phase, stepwise) < 1e-4
    assert grads.keys() == grads_ref.keys() and len(grads) > 0
    for key, grad in grads.items():
        assert relative_error(grad, grads_ref[key]) < 1e-4, key


def check_gradients(model, batch) -> None:
    """(3) Training mode: one backward pass of the training objective reaches every parameter with a
    finite, non-zero gradient, and none reaches the ``<pad>`` rows of the embeddings."""
    model.train().zero_grad(set_to_none=True)
    (-model(batch).sum()).backward()
    assert_gradients_reach_every_parameter(model, ("tgt_emb", "src_emb"))


def check_checkpoint_round_trip(model, name: str, batch, path: Path) -> None:
    """(4) model.pt as the train stage writes it (weights and the config they were built with),
    loaded through :func:`pipeline.training.checkpoints.load_model`, is the same model: the same
    parameters, bit for bit, and the same outputs."""
    save_atomic({"model": model.state_dict(), "model_config": vars(model.cfg), "mechanism": name}, path)
    loaded, _ = load_model(path, name, batch.src.device)
    saved, back = model.state_dict(), loaded.state_dict()
    assert saved.keys() == back.keys()
    assert all(torch.equal(saved[k], back[k]) for k in saved)
    with torch.no_grad():
        assert torch.equal(model.eval()(batch), loaded(batch))


def search_model(name: str, device, seed: int = 0, scale: float = 3.0):
    """Mechanism ``name`` under its first declared option set (its defaults, ``{}``, for a mechanism
    that needs none; a backbone's config for one that runs on a backbone) on the search's tiny
    vocabularies."""
    shared, own = registry.split_section(name, dict(registry.mechanism(name).variants[0]))
    sizes = {"emb": 8, "hidden": 16, **shared}
    return toy_model(name, SEARCH_SRC_VOCAB, SEARCH_TGT_VOCAB, seed=seed, scale=scale, config=sizes, **own).to(device)


def search_batch(device, srcs: list[list[str]] = SEARCH_SRCS):
    return collate(srcs, None, SEARCH_SRC_VOCAB, SEARCH_TGT_VOCAB).to(device)


@torch.no_grad()
def brute_force(model, batch, max_len: int) -> list[tuple[list[int], float]]:
    """Every sequence over a one-example batch's extended ids, ending at </s> or cut at ``max_len``,
    best first."""
    device = batch.src.device
    out: list[tuple[list[int], float]] = []

    def expand(state, prev: int, prefix: list[int], score: float) -> None:
        log_probs, state = model.step(state, torch.tensor([prev], device=device))
        for y, lp_y in enumerate(log_probs[0].double().tolist()):
            seq, s = prefix + [y], score + lp_y
            if y == EOS or len(seq) == max_len:
                out.append((seq, s))
            else:
                expand(state, y, seq, s)

    expand(model.encode(batch), BOS, [], 0.0)
    out.sort(key=lambda h: -h[1])
    return out


def check_beam_equals_brute_force(model, device, max_len: int = 3, alpha: float = 1.0) -> None:
    """(5) Batched beam search, with a beam as wide as the search space, equals brute-force
    enumeration: it returns every genuine sequence (ending in </s> or cut at ``max_len``, no impossible
    token) and nothing else, with the same scores, best first; with the GNMT length penalty ``alpha``
    the same sequences and scores, ranked by score / ((5 + |y|) / 6) ** alpha (|y| counting </s>).
    A mechanism uses an OOV slot only if it can copy, and the enumerated sequences form a
    distribution (their probabilities sum to 1)."""
    v = len(SEARCH_TGT_VOCAB)
    width = (v + 1) ** max_len  # at least the number of prefixes of any example (V + X = 7 ids here)
    batch = search_batch(device)
    plain = beam_search(model, batch, beam_size=width, max_len=max_len)
    penalised = beam_search(model, batch, beam_size=width, max_len=max_len, length_penalty=alpha)
    for i, src in enumerate(SEARCH_SRCS):
        one = search_batch(device, [src])
        brute = brute_force(model, one, max_len)
        n_own = v + len(one.oovs[0])
        # All sequences: those ending in </s> at step 1, 2, 3 and the ones cut at 3.
        assert len(brute) == 1 + (n_own - 1) + (n_own - 1) ** 2 * n_own
        genuine = {tuple(ids): score for ids, score in brute if score > LIVE}
        assert max(genuine.values()) > -50  # (the best are likely sequences, not barely possible ones)
        for hyps, penalty in ((plain[i], 0.0), (penalised[i], alpha)):
            got = {tuple(h.ids): h for h in hyps}
            assert len(got) == len(hyps) and got.keys() == genuine.keys(), (i, penalty)
            for ids, h in got.items():
                assert h.score == pytest.approx(genuine[ids], abs=1e-4), (i, ids)
                length_penalty = ((5.0 + len(ids)) / 6.0) ** penalty
                assert h.rank_score == pytest.approx(genuine[ids] / length_penalty, abs=1e-4), (i, ids, penalty)
            ranks = [h.rank_score for h in hyps]
            assert ranks == sorted(ranks, reverse=True), (i, penalty)
        uses_oov = any(v in ids for ids in genuine)
        assert uses_oov == (model.output.can_copy and len(one.oovs[0]) > 0)
        assert sum(math.exp(s) for _, s in brute) == pytest.approx(1.0, abs=1e-4)


def check_batched_beam_equals_one_at_a_time(model, batch, srcs: list[list[str]], one) -> None:
    """(5) A batch decodes as its examples do alone (``one(src)``: the one-example batch)."""
    batched = beam_search(model, batch, beam_size=4, max_len=6)
    for i, src in enumerate(srcs):
        alone = beam_search(model, one(src), beam_size=4, max_len=6)[0]
        assert [h.ids for h in batched[i]] == [h.ids for h in alone], i
        for hb, ha in zip(batched[i], alone):
            assert hb.score == pytest.approx(ha.score, abs=1e-4)
        assert batched[i][0].score > -50


def check_greedy_equals_beam_one(model, batch) -> None:
    """(5) Greedy decoding is beam search of width 1, and the first example's score is the sum of its
    chosen tokens' log-probabilities (checked by stepping the batch through greedy's choices again:
    the batch, not the example alone, since a mechanism may draw on the batch, e.g. Pointer Softmax's
    batch vocabulary)."""
    g = greedy(model, batch, max_len=8)
    b = beam_search(model, batch, beam_size=1, max_len=8)
    for i in range(batch.size):
        assert g[i].ids == b[i][0].ids, i
        assert g[i].score == pytest.approx(b[i][0].score, abs=1e-4)
    device = batch.src.device
    chosen = [h.ids for h in g]
    with torch.no_grad():
        state, prev, total = model.encode(batch), torch.full((batch.size,), BOS, device=device), 0.0
        for t, y in enumerate(chosen[0]):
            lp, state = model.step(state, prev)
            assert int(lp[0].argmax()) == y
            total += float(lp[0, y])
            prev = torch.tensor([ids[t] if t < len(ids) else PAD for ids in chosen], device=device)
    assert g[0].score == pytest.approx(total, abs=1e-4)


class StopTraining(Exception):
    """Raised by :func:`stop_at` to interrupt a training in-process (as a crash would)."""


def stop_at(step: int):
    """An ``on_step`` callback that raises :class:`StopTraining` when optimizer step ``step`` is done
    (before that step's checkpoint is written)."""

    def on_step(row: dict) -> None:
        if row["step"] == step:
            raise StopTraining

    return on_step


def repository_copy(dst: Path, params: dict) -> dict:
    """The repository's tracked and untracked-but-not-ignored files (not data/ or tests/) copied to
    ``dst`` with ``params`` as its params.yaml, committed in a git repository of its own; returns an
    environment whose MLflow store and Prefect home live there (tools on PATH from this venv)."""
    files = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    for rel in files:
        if (REPO / rel).is_file() and not rel.startswith(("data/", "tests/")):
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / rel, dst / rel)
    (dst / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    store = f"sqlite:///{dst / 'mlflow.db'}"
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "MLFLOW_TRACKING_URI": store,
        "MLFLOW_REGISTRY_URI": store,
        "PREFECT_HOME": str(dst / ".prefect"),
        **{f"GIT_{who}_{what}": v for who in ("AUTHOR", "COMMITTER") for what, v in (("NAME", "t"), ("EMAIL", "t@t"))},
    }
    env.pop("PREFECT_API_URL", None)
    for cmd in (["git", "init", "-q"], ["git", "add", "-A"], ["git", "commit", "-qm", "copy"]):
        subprocess.run(cmd, cwd=dst, env=env, check=True, capture_output=True)
    return env


# ---------------------------------------------------------------------------------------------
# The features task: tags kept apart from the source (a features column), end to end
# ---------------------------------------------------------------------------------------------
FEATURES_TASK = "revcopy"
FEATURE_TAGS = {"REV": lambda chars: chars[::-1], "COPY": lambda chars: chars}  # tag -> what it does
FEATURE_LETTERS = "abcdefgh"


def features_rows(n: int, seed: int) -> list[tuple[str, str, str]]:
    """``n`` (word, tag, output) triples: a word of 3-6 letters, reversed under REV, copied under COPY."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        word = "".join(rng.choice(FEATURE_LETTERS) for _ in range(rng.randint(3, 6)))
        tag = rng.choice(sorted(FEATURE_TAGS))
        rows.append((word, tag, "".join(FEATURE_TAGS[tag](word))))
    return rows


def add_features_task(root: Path, sizes: dict[str, int]) -> str:
    """TSVs (``word<TAB>tag<TAB>output``, ``sizes`` rows per split) under ``root/data/raw`` and
    ``python -m pipeline.data.tasks add ... --tokenizer chars --features-col tag`` on a copy of the
    repository's params.yaml in ``root``; the params file's path."""
    shutil.copy(REPO / "params.yaml", root / "params.yaml")
    raw = root / "data" / "raw" / FEATURES_TASK
    raw.mkdir(parents=True)
    for seed, (split, n) in enumerate(sizes.items()):
        lines = ["word\ttag\toutput", *("\t".join(row) for row in features_rows(n, seed))]
        (raw / f"{split}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    files = [arg for s in sizes for arg in (f"--{s}", str(raw / f"{s}.tsv"))]
    argv = ["--params", str(root / "params.yaml"), "add", FEATURES_TASK, *files, "--src-col", "word"]
    argv += ["--tgt-col", "output", "--features-col", "tag", "--tokenizer", "chars", "--metric", "exact_match"]
    assert tasks.main(argv) == 0
    return str(root / "params.yaml")


def build_features_project(root: Path) -> Path:
    """A character-level task whose output depends on a tag in a features column, made as a user makes
    it and as the stages will: TSVs (``word<TAB>tag<TAB>output``, 2,000 train / 50 valid / 60 test) ->
    ``python -m pipeline.data.tasks add ... --tokenizer chars --features-col tag`` on a copy of the
    repository's params.yaml -> prepare -> the vocabularies with ``features.vocab`` and the id-encoded
    splits -> CopyNet with features trained by :func:`pipeline.training.loop.train` (5 epochs, ~6 s)
    into ``data/checkpoints/revcopy/copynet``. Returns ``root``."""
    add_features_task(root, {"train": 2000, "valid": 50, "test": 60})
    write_job(prepare_job(FEATURES_TASK, str(root / "params.yaml")), serial_map)

    shards, vocab_dir = root / "data/shards" / FEATURES_TASK, root / "data/vocab" / FEATURES_TASK
    vocab_dir.mkdir(parents=True)
    vocabs = {side: build_vocab(count_split_tokens(shards / "train", side)) for side in ("src", "tgt")}
    for side, vocab in vocabs.items():
        vocab.save(vocab_dir / f"{side}.vocab")
    features = save_features_vocab(shards / "train", vocab_dir)  # what the vocab stage writes beside them
    for split in ("train", "valid"):
        write_encoded_split(shards / split, vocab_dir / "ids" / split, *vocabs.values(), features_vocab=features)
    train_features_copynet(root, root / "data/checkpoints" / FEATURES_TASK / "copynet", epochs=5)
    return root


def train_features_copynet(root: Path, out: Path, epochs: int, **options) -> Path:
    """CopyNet with features trained on :func:`build_features_project`'s task into ``out`` (one thread;
    ``options``: ModelConfig fields, e.g. the Transformer decoder's). Returns ``out``."""
    vocab_dir = root / "data/vocab" / FEATURES_TASK
    vocabs = {side: Vocab.load(vocab_dir / f"{side}.vocab") for side in ("src", "tgt")}
    features = load_features_vocab(vocab_dir)
    encoded = {s: EncodedSplit(vocab_dir / "ids" / s, len(vocabs["tgt"])) for s in ("train", "valid")}
    sizes = {"emb": 32, "hidden": 64, **options}
    cfg = ModelConfig(len(vocabs["src"]), len(vocabs["tgt"]), features_vocab=len(features), **sizes)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        train(
            build_seeded_model("copynet", cfg, 0),
            encoded["train"],
            encoded["valid"],
            TrainConfig(epochs=epochs, batch_size=32, lr=3e-3, seed=0),
            out,
            model_config=vars(cfg),
            progress=False,
            model_info={"mechanism": "copynet", "vocab": {s: vocab_identity(v) for s, v in vocabs.items()}},
        )
    finally:
        torch.set_num_threads(threads)
    return out


def tiny_backbones(root: Path, layers: int = 2) -> dict:
    """kind -> (directory, its tokenizer as the vocab stage reads it): a tiny BART, T5 and Marian
    (d_model 16, 2 heads, fresh weights) whose tokenizers learnt the toy copy task's text (120 pieces)."""
    from benchmarks.toy import TOY_SEEN
    from pipeline.vocab.tiny_backbone import KINDS, make_tiny_backbone
    from pipeline.vocab.tokenizer import BackboneTokenizer

    rng = random.Random(0)
    texts = [" ".join(side) for _ in range(300) for side in toy_copy_example(rng, TOY_SEEN)]
    out = {}
    for kind in KINDS:
        path = make_tiny_backbone(kind, texts, root / kind, d_model=16, layers=layers, heads=2, vocab_size=120)
        out[kind] = (path, BackboneTokenizer.from_backbone(str(path)))
    return out


class Server:
    """A model served by `mlflow models serve` on 127.0.0.1, and its requests."""

    def __init__(self, base: str, proc: subprocess.Popen) -> None:
        self.base, self.proc = base, proc

    @classmethod
    def start(cls, model_uri: str, cwd: Path, timeout: float = 180) -> Server:
        """`mlflow models serve -m MODEL_URI` on a free port, once it answers /ping (its process group
        stopped and its output shown when it does not within ``timeout`` s)."""
        port = free_port()
        served = cls(f"http://127.0.0.1:{port}", start_mlflow_server(model_uri, port, cwd, subprocess.PIPE))
        deadline = time.time() + timeout
        while not served.ping():
            if served.proc.poll() is not None or time.time() > deadline:
                stop_server(served.proc)
                output = served.proc.stdout.read().decode(errors="replace")[-3000:]
                raise AssertionError(f"server did not come up: {output}")
            time.sleep(0.5)
        return served

    def invoke(self, texts: list[str], params: dict | None = None, timeout: float = 60) -> tuple[int, dict]:
        """POST /invocations; ``(HTTP status, JSON body)`` (a non-JSON body as ``{"raw": text}``)."""
        body = {"dataframe_split": {"columns": ["text"], "data": [[t] for t in texts]}}
        if params:
            body["params"] = params
        req = urllib.request.Request(
            f"{self.base}/invocations", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                status, raw = r.status, r.read()
        except urllib.error.HTTPError as err:
            status, raw = err.code, err.read()
        try:
            return status, json.loads(raw)
        except ValueError:
            return status, {"raw": raw.decode(errors="replace")}

    def ping(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.base}/ping", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False


def load_script(name: str):
    """scripts/<name>.py as a module (eval_options' import pins the math libraries in os.environ: undone)."""
    saved = dict(os.environ)
    spec = importlib.util.spec_from_file_location(f"script_{name}", REPO / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    with warnings.catch_warnings():  # "pinned after torch was loaded": a test process, its speed is not measured
        warnings.simplefilter("ignore", RuntimeWarning)
        spec.loader.exec_module(module)
    os.environ.clear()
    os.environ.update(saved)
    return module
