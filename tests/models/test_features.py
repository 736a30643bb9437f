"""Features: tags kept apart from the source condition the decoder, at its start and in its input at
every step (models/seq2seq.py, ``Seq2Seq.encode_features``, ``decoder_input``), and are never copied.

- Without features (``features_vocab`` 0) a model has exactly the parameters it had before features
  existed; with them, the same parameters with the same initial values, plus the features encoder.
- With features, every mechanism on either decoder still gives distributions over the extended
  vocabulary, its two-phase teacher forcing still equals the stepwise one, beam search of a batch
  equals beam search of each example alone, and changing only the features changes the output: at
  the first step, and at every step with the decoder state held fixed (the every-step input).
- The decoder input is x_t = [e(y_{t-1}) + W_f mean(tag embeddings) + b_f; extra], checked by hand.
- A checkpoint of the earlier start-only conditioning is refused in one line naming the mismatch.
- The key test: on a task whose output is the input reversed or copied as a tag says, CopyNet with
  features, trained and decoded through the pipeline's own files (tests.helpers.build_features_project),
  gets both tags right (a model blind to the tag could not), and no hypothesis of any n-best holds a tag.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from models import registry
from models.config import ModelConfig
from pipeline.decoding.decode import decode_table
from pipeline.decoding.search import beam_search
from pipeline.decoding.settings import EvalConfig
from pipeline.io.shards import read_split
from pipeline.training.checkpoints import load_model
from pipeline.vocab.batching import collate
from pipeline.vocab.vocabulary import FEATURES_VOCAB, PAD, UNK, Vocab
from tests.helpers import (
    CONTRACT_SRC_VOCAB,
    CONTRACT_SRCS,
    CONTRACT_TGT_VOCAB,
    FEATURE_TAGS,
    FEATURES_TASK,
    check_distributions,
    check_two_phase,
    contract_batch,
    contract_cases,
    toy_model,
    vocab_of,
)

FEATURE_VOCAB = vocab_of(["X", "Y", "Z"])  # the unit tests' features vocabulary: X 4, Y 5, Z 6
FEATURES = len(FEATURE_VOCAB)
TAG_WORDS = [["X", "Y"], ["Z"], ["Y", "Q"]]  # the contract's three examples' tags (Q: unknown)
TAGS = torch.tensor([[4, 5], [6, PAD], [5, UNK]])  # (B, F) their ids
OTHER_TAGS = torch.tensor([[6, PAD], [4, 5], [4, PAD]])
CASES = [c for c in contract_cases() if not registry.runs_on_backbone(c[0])]
IDS = [f"{name}-{i}" for name, i, _ in CASES]
BACKBONES = [c for c in contract_cases() if registry.runs_on_backbone(c[0])]


def features_model(name: str, variant: dict, features: int = FEATURES, seed: int = 3):
    shared, own = registry.split_section(name, variant)
    config = {**shared, "features_vocab": features}
    return toy_model(name, CONTRACT_SRC_VOCAB, CONTRACT_TGT_VOCAB, seed=seed, scale=1.5, config=config, **own).double()


def features_batch(model, tags: torch.Tensor = TAGS):
    return replace(contract_batch(model.output.reads_pointers, "cpu"), features=tags)


@pytest.mark.parametrize("name,i,variant", CASES, ids=IDS)
def test_the_features_encoder_is_all_a_model_with_features_adds(name, i, variant):
    plain, with_features = features_model(name, variant, 0), features_model(name, variant)
    before, after = plain.state_dict(), with_features.state_dict()
    assert not [k for k in before if "features" in k]  # features_vocab 0: no parameter of them
    added = {"features_emb.weight", "features_in.weight", "features_in.bias"}  # W_f: every step's input
    if with_features.cfg.decoder != "transformer":  # a recurrent decoder's s_0 reads them too
        added |= {"features_start.weight", "features_start.bias"}
    assert set(after) - set(before) == added
    assert all(torch.equal(before[k], after[k]) for k in before)  # drawn last: the rest starts the same
    assert with_features.features_emb.weight.shape == (FEATURES, with_features.cfg.emb)


@pytest.mark.parametrize("name,i,variant", CASES, ids=IDS)
def test_with_features_steps_are_distributions_and_the_features_change_them(name, i, variant):
    model = features_model(name, variant)
    check_distributions(model, features_batch(model))  # the contract's check (1), with features

    def first_step(tags: torch.Tensor) -> torch.Tensor:  # log p(y_1) (B, V + X)
        with torch.no_grad():
            batch = features_batch(model, tags)
            return model.step(model.encode(batch), batch.tgt_in[:, 0])[0]

    mine, other = first_step(TAGS), first_step(OTHER_TAGS)
    for b in range(TAGS.size(0)):  # every example's first step already reads its tags
        assert not torch.allclose(mine[b], other[b], atol=1e-6), b
    reordered = torch.tensor([[5, 4], [6, PAD], [UNK, 5]])  # a set of tags: their order does not matter
    assert torch.allclose(first_step(reordered), mine, rtol=0, atol=1e-12)


@pytest.mark.parametrize("name,i,variant", CASES, ids=IDS)
def test_with_features_two_phase_teacher_forcing_equals_stepwise(name, i, variant):
    model = features_model(name, variant)
    check_two_phase(model, features_batch(model), objective=True)
    for key, param in model.named_parameters():  # the training objective reaches the whole features encoder
        if key.startswith("features_"):
            assert param.grad is not None and param.grad.abs().sum() > 0, key


@pytest.mark.parametrize("name,i,variant", CASES, ids=IDS)
def test_the_features_enter_every_decoder_step(name, i, variant):
    """At every step t of the gold prefix, from the same decoder state (stepped so far with the
    example's own tags), swapping only the every-step f for other tags' changes every example's
    distribution (start-only conditioning, or f dropped after some step, would leave it unchanged
    there). f itself is static: the state carries the same one at every step."""
    model = features_model(name, variant).eval()
    batch = features_batch(model)
    steps = batch.tgt_in.size(1)  # T
    assert steps >= 4
    with torch.no_grad():
        other_f = model.encode(features_batch(model, OTHER_TAGS))["features"]  # (B, E)
        state = model.encode(batch)
        own_f = state["features"]  # (B, E)
        assert not torch.allclose(own_f, other_f)
        for t in range(steps):
            prev = batch.tgt_in[:, t]  # (B,) y_{t-1}, <pad> past an example's end
            swapped = model.step({**state, "features": other_f}, prev)[0]  # (B, V + X)
            mine, state = model.step(state, prev)  # the run goes on with the example's own tags
            assert torch.equal(state["features"], own_f), t  # f is static: the same at every step
            for b in range(TAGS.size(0)):
                assert not torch.allclose(mine[b], swapped[b], atol=1e-6), (t, b)


@pytest.mark.parametrize("name,i,variant", CASES[:1] + [c for c in CASES if c[1] == "tf0"][:1], ids=["rnn", "tf"])
def test_the_decoder_input_adds_the_projected_mean_tag_embedding(name, i, variant):
    """x_t = [e(y_{t-1}) + W_f mean_k emb(tag_k) + b_f; extra] (eval mode: no dropout), by hand: the
    mean skips <pad> and counts <unk>; at every t the same f."""
    model = features_model(name, variant).eval()
    batch = features_batch(model)
    emb, w, bias = model.features_emb.weight, model.features_in.weight, model.features_in.bias
    by_hand = (
        torch.stack(
            [(emb[4] + emb[5]) / 2, emb[6], (emb[5] + emb[UNK]) / 2]  # TAGS: [X, Y], [Z], [Y, <unk>]
        )
        @ w.T
        + bias
    )  # (B, E)
    with torch.no_grad():
        state = model.encode(batch)
        assert torch.allclose(state["features"], by_hand, rtol=0, atol=1e-12)
        for t in range(batch.tgt_in.size(1)):
            prev = batch.tgt_in[:, t]
            x_t = model.decoder_input(state, prev)  # (B, E + extra)
            e = model.output.embed_input(state, prev, model.embed(prev))  # (B, E)
            assert torch.allclose(x_t[:, : e.size(1)], e + by_hand, rtol=0, atol=1e-12), t


def test_a_start_only_checkpoint_is_refused_in_one_line():
    name, _, variant = CASES[0]
    model = features_model(name, variant)
    old = {k: v for k, v in model.state_dict().items() if not k.startswith(("features_in.", "features_start."))}
    old["features_proj.weight"] = torch.zeros(model.encoder.out_dim, model.cfg.emb)  # the start-only projection
    old["features_proj.bias"] = torch.zeros(model.encoder.out_dim)
    with pytest.raises(RuntimeError) as err:
        model.load_state_dict(old)
    message = str(err.value)
    assert "\n" not in message and "features_proj" in message and "features_in" in message
    model.load_state_dict(features_model(name, variant, seed=4).state_dict())  # a current one loads


@pytest.mark.parametrize("name", sorted({c[0] for c in CASES}))
def test_with_features_a_batch_decodes_as_its_examples_alone(name):
    model = features_model(name, registry.mechanism(name).variants[0]).eval()

    def batch(rows: list[int]):  # the contract's sources with their tags, as words (collate encodes them)
        return collate(
            [CONTRACT_SRCS[b] for b in rows],
            None,
            CONTRACT_SRC_VOCAB,
            CONTRACT_TGT_VOCAB,
            features=[TAG_WORDS[b] for b in rows],
            features_vocab=FEATURE_VOCAB,
        )

    together = batch([0, 1, 2])
    assert torch.equal(together.features, TAGS)  # (B, F): ids, <pad>-padded, <unk> for a tag not in the vocabulary
    hyps = beam_search(model, together, beam_size=3, max_len=4)
    for b in range(3):
        alone = beam_search(model, batch([b]), beam_size=3, max_len=4)[0]
        assert [h.ids for h in alone] == [h.ids for h in hyps[b]], b
        assert [h.score for h in alone] == pytest.approx([h.score for h in hyps[b]], abs=1e-9)


def test_a_model_and_a_batch_that_disagree_on_features_are_refused():
    name, _, variant = CASES[0]
    with_features, plain = features_model(name, variant), features_model(name, variant, 0)
    with pytest.raises(ValueError, match="the batch has none"):
        with_features.encode(contract_batch(False, "cpu"))
    with pytest.raises(ValueError, match="built without"):
        plain.encode(features_batch(plain))
    with pytest.raises(ValueError, match="features_vocab must be an integer >= 0"):
        ModelConfig(src_vocab=9, tgt_vocab=9, features_vocab=-1)


@pytest.mark.parametrize("name,i,variant", BACKBONES[:1], ids=[f"{n}-{i}" for n, i, _ in BACKBONES[:1]])
def test_a_backbone_refuses_features_naming_the_setting(name, i, variant):
    with pytest.raises(ValueError, match="model.features_vocab"):
        features_model(name, variant)


def test_batch_padding_keeps_the_features():
    batch = replace(contract_batch(False, "cpu"), features=TAGS)
    padded = batch.padded(5, 12, 9)
    assert torch.equal(padded.features[:3], TAGS) and (padded.features[3:] == PAD).all()
    assert padded.features.shape == (5, TAGS.size(1))


# ---------------------------------------------------------------------------------------------
# The key test: the tag decides, and is never an output
# ---------------------------------------------------------------------------------------------
def test_copynet_with_features_follows_the_tag_and_never_outputs_one(features_project):
    root = features_project
    vocab_dir = root / "data/vocab" / FEATURES_TASK
    src_vocab, tgt_vocab = Vocab.load(vocab_dir / "src.vocab"), Vocab.load(vocab_dir / "tgt.vocab")
    features_vocab = Vocab.load(vocab_dir / FEATURES_VOCAB)
    assert set(features_vocab.itos[4:]) == set(FEATURE_TAGS)
    model, _ = load_model(root / "data/checkpoints" / FEATURES_TASK / "copynet" / "model.pt", "copynet", "cpu")
    assert model.cfg.features_vocab == len(features_vocab)

    test = read_split(root / "data/shards" / FEATURES_TASK / "test")
    cfg = EvalConfig(beam_size=5, topk=5, max_len=10, splits=())
    records = decode_table(model, test, src_vocab, tgt_vocab, cfg, torch.device("cpu"), features_vocab=features_vocab)
    for tag in FEATURE_TAGS:
        rows = [r for r in records if r["features"] == [tag]]
        right = sum(r["pred"] == r["tgt"] for r in rows) / len(rows)
        print(f"{tag}: {right:.2f} of {len(rows)} test words right")
        # A model blind to the tag gets at most one of the two right (but for palindromes): it follows it.
        assert len(rows) >= 20 and right >= 0.8, tag
    hypotheses = [h for r in records for h in r["nbest"]]
    assert len(hypotheses) == 5 * len(records)
    assert not [h for h in hypotheses if set(h) & set(FEATURE_TAGS)]  # no tag in any n-best output
