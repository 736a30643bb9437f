"""The copy heads as Hugging Face models (models/hf) on tiny BART-, T5- and Marian-shaped backbones made
by the test (no network): the processor's ids equal the pipeline's, every step is a distribution over
the extended vocabulary equal to the pipeline's step, the loss is the labels' mean negative
log-likelihood (in training mode the pipeline's objective), ``generate()`` equals the project's greedy
and beam search on the same weights, the cache equals recomputation, ``save_pretrained`` ->
``from_pretrained`` gives the same outputs, the ``Seq2SeqTrainer`` trains a head, and the example of
docs/pretrained.md runs."""

from __future__ import annotations

import random
import re

import pytest
import torch
import transformers
from transformers import AutoModelForSeq2SeqLM, Seq2SeqTrainer, Seq2SeqTrainingArguments

from benchmarks.toy import TOY_SEEN, toy_copy_example
from models.extended import NEG
from models.hf import CopyHeadConfig, CopyHeadForConditionalGeneration, CopyHeadProcessor
from models.registry import build_model, model_config
from pipeline.decoding.search import beam_search, greedy
from pipeline.training.loop import nll_loss
from pipeline.vocab.batching import collate
from pipeline.vocab.extended import ext_ids_to_tokens
from pipeline.vocab.tiny_backbone import KINDS
from pipeline.vocab.tokenizer import BackboneTokenizer
from tests.helpers import REPO, tiny_backbones

HEADS = ("backbone_pointer_generator", "backbone_copynet", "backbone_pointer_softmax")
# "U" and "R" never occur in the tokenizers' text: their pieces are <unk>, the source's extended ids.
SOURCES = ["a s1 U7 s2 U7 b", "a s3 s3 b", "a U2 b", "a s4 s40 R1 s12 U3 b", ""]
TARGETS = ["b s1 U7 s2 U7", "b s3 s3", "b U2", "b s4 s40 R1 s12 U3", "b"]
UNSEEN, RARE = [f"U{i}" for i in range(10)], [f"R{i}" for i in range(10)]


@pytest.fixture(autouse=True, scope="module")
def quiet():
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()


@pytest.fixture(scope="module")
def backbones(tmp_path_factory) -> dict:
    """kind -> (directory, its tokenizer as the vocab stage reads it)."""
    return tiny_backbones(tmp_path_factory.mktemp("hf_backbones"))


def pipeline_model(backbones, kind: str, head: str, seed: int = 0, **options):
    """(the pipeline's model, its Hugging Face face sharing its weights, the processor), in eval mode."""
    path, tok = backbones[kind]
    torch.manual_seed(seed)
    size = len(tok.vocab)
    model = build_model(
        head, model_config({"backbone": str(path), head: options}, head, src_vocab=size, tgt_vocab=size)
    )
    hf = CopyHeadForConditionalGeneration.from_seq2seq(model, head).eval()
    return model, hf, CopyHeadProcessor.from_config(tok.tokenizer, hf.config)


def to_backbone(model, ids: list[int], vocab_size: int) -> list[int]:
    """Project (extended) ids -> backbone (extended) ids."""
    size = model.cfg.tgt_vocab
    return [int(model.tgt_ids[i]) if i < size else i - size + vocab_size for i in ids]


def batches(tok: BackboneTokenizer, processor: CopyHeadProcessor, sources=SOURCES, targets=TARGETS):
    """The same examples as the pipeline's batch and as the processor's encoding."""
    pieces = tok.pieces(sources)
    batch = collate(pieces, tok.pieces(targets, "tgt") if targets else None, tok.vocab, tok.vocab)
    return batch, processor(sources, text_target=targets) if targets else processor(sources)


def until_eos(ids: list[int], eos: int) -> list[int]:
    """generate()'s row after the decoder start, cut after its first </s>."""
    out = []
    for i in ids:
        out.append(i)
        if i == eos:
            break
    return out


@pytest.mark.parametrize("kind", KINDS)
def test_processor_ids_and_text_are_the_pipelines(backbones, kind):
    """Encoder ids, extended ids (a source piece outside the vocabulary is vocab_size + k, per distinct
    text) and labels equal the pipeline's batch mapped to backbone ids; decoding gives the pipeline's text."""
    _, tok = backbones[kind]
    model, hf, processor = pipeline_model(backbones, kind, "backbone_copynet")
    batch, enc = batches(tok, processor)
    vocab_size = hf.config.vocab_size
    assert batch.n_ext >= 2 and int(enc["src_ext_ids"].max()) == vocab_size + batch.n_ext - 1
    oovs = processor.oovs(SOURCES)
    for b in range(len(SOURCES)):
        n, m = int(enc["attention_mask"][b].sum()), int((enc["labels"][b] >= 0).sum())
        assert enc["input_ids"][b, :n].tolist() == model.src_ids[batch.src[b, :n]].tolist()
        assert enc["src_ext_ids"][b, :n].tolist() == to_backbone(model, batch.src_ext[b, :n].tolist(), vocab_size)
        assert enc["labels"][b, :m].tolist() == to_backbone(model, batch.tgt_out[b, :m].tolist(), vocab_size)
        assert oovs[b] == batch.oovs[b]
        text = tok.detokenise(ext_ids_to_tokens(batch.tgt_out[b].tolist(), batch.oovs[b], tok.vocab))
        assert processor.decode(enc["labels"][b, :m], SOURCES[b]) == text
    assert processor.decode(enc["labels"][0], SOURCES[0]).split() == TARGETS[0].split()  # U7 copied back


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("head", HEADS)
def test_every_step_is_the_pipelines_distribution_over_the_extended_vocabulary(backbones, kind, head):
    """Through the cache (generate's path) each position's log p over vocab_size + X equals the pipeline's
    ``step`` at the same ids, sums to 1, gives <pad> and the decoder start nothing; one teacher-forced
    pass gives the same numbers."""
    _, tok = backbones[kind]
    model, hf, processor = pipeline_model(backbones, kind, head)
    model.double()
    batch, enc = batches(tok, processor)
    inputs = {key: value for key, value in enc.items() if key != "labels"}
    decoder_input_ids = hf.shift_right(enc["labels"])
    with torch.no_grad():
        stepped = hf(**inputs, decoder_input_ids=decoder_input_ids, use_cache=True).logits
        one_pass = hf(**inputs, decoder_input_ids=decoder_input_ids).logits
        state, expected = model.encode(batch), []
        for t in range(batch.tgt_in.size(1)):
            log_probs, state = model.step(state, batch.tgt_in[:, t])
            expected.append(hf.ids.to_backbone_order(log_probs, batch.n_ext))
    expected = torch.stack(expected, dim=1)  # (B, T, vocab_size + X)
    assert stepped.shape == (len(SOURCES), batch.tgt_in.size(1), hf.config.vocab_size + batch.n_ext)
    real = enc["labels"] != -100  # past a target's end the inputs differ (</s> here, <pad> in the batch)
    assert torch.equal(stepped[real], expected[real])
    assert torch.allclose(one_pass, stepped, atol=1e-9, rtol=0)
    assert torch.allclose(stepped.exp().sum(-1), torch.ones(stepped.shape[:2], dtype=stepped.dtype), atol=1e-9)
    never = [hf.config.pad_token_id, hf.config.bos_token_id]
    assert (stepped[..., never] <= NEG / 2).all()
    assert stepped[..., hf.config.vocab_size :].exp().max() > 0.01  # the sources' pieces outside the vocabulary


@pytest.mark.parametrize(
    "head,options",
    [
        ("backbone_pointer_generator", {}),
        ("backbone_pointer_generator", {"coverage": True, "coverage_loss_weight": 1.0}),
        ("backbone_copynet", {}),
        ("backbone_pointer_softmax", {}),
        ("backbone_pointer_softmax", {"shortlist": 20}),
    ],
)
def test_loss_is_the_labels_mean_negative_log_likelihood_and_the_pipelines_objective(backbones, head, options):
    """Eval mode: loss = -mean over the labels (not -100) of the logits read at them, by hand. Training
    mode: the pipeline's training objective on the same batch (coverage loss, Pointer Softmax's joint
    log p(y, z), a word outside the shortlist and the source as <unk>), and the same gradients."""
    _, tok = backbones["bart"]
    model, hf, processor = pipeline_model(backbones, "bart", head, **options)
    model.double()
    batch, enc = batches(tok, processor)
    with torch.no_grad():
        out = hf(**enc)
    labels = enc["labels"]
    real = labels != -100
    by_hand = -out.logits.gather(-1, labels.clamp_min(0).unsqueeze(-1)).squeeze(-1)[real].mean()
    if not options.get("shortlist"):
        assert torch.allclose(out.loss, by_hand, atol=1e-9, rtol=0)
    hf.train()
    loss = hf(**enc).loss
    expected, _ = nll_loss(model, batch)
    assert torch.allclose(loss, expected, atol=1e-9, rtol=0)
    (grad,) = torch.autograd.grad(loss, [model.net.get_input_embeddings().weight])
    (want,) = torch.autograd.grad(nll_loss(model, batch)[0], [model.net.get_input_embeddings().weight])
    assert torch.allclose(grad, want, atol=1e-9, rtol=0)


@pytest.fixture(scope="module")
def trained(backbones, tmp_path_factory) -> dict:
    """head -> (model trained by the Seq2SeqTrainer on BART, processor, held-out training objective
    before, after)."""
    path, _ = backbones["bart"]
    rng = random.Random(1)
    pairs = [toy_copy_example(rng, RARE if rng.random() < 0.1 else TOY_SEEN) for _ in range(320)]
    texts = [(" ".join(s), " ".join(t)) for s, t in pairs]
    out = {}
    for head in HEADS:
        torch.manual_seed(0)
        model = CopyHeadForConditionalGeneration.from_backbone(str(path), head)
        processor = CopyHeadProcessor.from_config(transformers.AutoTokenizer.from_pretrained(str(path)), model.config)
        rows = [processor(s, text_target=t, return_tensors=None) for s, t in texts[:288]]
        held = processor([s for s, _ in texts[288:]], text_target=[t for _, t in texts[288:]])
        with torch.no_grad():  # the objective it trains (Pointer Softmax's joint one), dropout 0 here
            before = float(model.train()(**held).loss)
        args = Seq2SeqTrainingArguments(
            output_dir=str(tmp_path_factory.mktemp(head)),
            max_steps=60,
            per_device_train_batch_size=16,
            learning_rate=5e-3,
            report_to=[],
            use_cpu=True,
            save_strategy="no",
            seed=0,
            disable_tqdm=True,
        )
        Seq2SeqTrainer(model=model, args=args, train_dataset=rows, data_collator=processor.collate).train()
        with torch.no_grad():
            after = float(model.train()(**held).loss)
        out[head] = model.eval(), processor, before, after
    return out


@pytest.mark.parametrize("head", HEADS)
def test_the_trainer_trains_a_head(trained, head):
    """60 steps of Seq2SeqTrainer on the toy copy task: the training objective on held-out examples falls
    below two thirds of where it started (Pointer Softmax's joint objective falls slowest: 5.5 -> 3.3)."""
    _, _, before, after = trained[head]
    assert after < 2 / 3 * before, (before, after)


def held_out_sources(n: int = 16) -> list[str]:
    rng = random.Random(7)
    return [" ".join(toy_copy_example(rng, UNSEEN if k % 3 == 0 else TOY_SEEN)[0]) for k in range(n)]


@pytest.mark.parametrize("head", HEADS)
def test_generate_equals_the_project_search(trained, backbones, head):
    """generate() on the trained head against the project's search on the same weights: greedy and beam 4
    with length_penalty 0 (the pipeline's default) give identical outputs, scores within 1e-5. With n-gram
    blocking (no_repeat_ngram_size = block_ngram) and a minimum length (min_new_tokens = min_len) the
    outputs are identical or, where the beams part, Hugging Face's has the higher log-probability."""
    hf, processor, _, _ = trained[head]
    _, tok = backbones["bart"]
    model, sources = hf.seq2seq, held_out_sources()
    batch, enc = batches(tok, processor, sources, None)
    vocab_size, eos = hf.config.vocab_size, hf.config.eos_token_id
    assert batch.n_ext >= 1
    out = hf.generate(**enc, max_new_tokens=20, output_scores=True, return_dict_in_generate=True)
    ours = greedy(model, batch, max_len=20)
    rows = [until_eos(row, eos) for row in out.sequences[:, 1:].tolist()]
    assert rows == [to_backbone(model, h.ids, vocab_size) for h in ours]
    steps = torch.stack(out.scores, dim=1)  # (B, T, vocab_size + X) the log-probabilities
    scores = [float(steps[b, torch.arange(len(r)), r].sum()) for b, r in enumerate(rows)]
    assert max(abs(s - h.score) for s, h in zip(scores, ours)) < 1e-5
    if head != "backbone_pointer_softmax":  # (its joint objective learns to point slowest: not yet here)
        assert sum(i >= vocab_size for r in rows for i in r) > 0  # the unseen fillers come out as copies
    for options, ours_options in (
        ({}, {}),
        ({"no_repeat_ngram_size": 2}, {"block_ngram": 2}),
        ({"min_new_tokens": 3}, {"min_len": 3}),
    ):
        out = hf.generate(
            **enc,
            max_new_tokens=20,
            num_beams=4,
            length_penalty=0.0,
            output_scores=True,
            return_dict_in_generate=True,
            **options,
        )
        ours = beam_search(model, batch, beam_size=4, max_len=20, **ours_options)
        rows = [until_eos(row, eos) for row in out.sequences[:, 1:].tolist()]
        same = [row == to_backbone(model, nbest[0].ids, vocab_size) for row, nbest in zip(rows, ours)]
        for equal, score, nbest in zip(same, out.sequences_scores, ours):
            if equal:
                assert abs(float(score) - nbest[0].score) < 1e-5
            else:  # the beams' difference (test below): a finished hypothesis the pipeline's beam dropped
                assert float(score) > nbest[0].score, options
        # blocking 2-grams cuts repeated pieces of the unseen fillers (U1 U1: "▁", "U", "1" twice), where
        # the pointer-generator's beams part on 3 of 16 sources
        assert all(same) if not options else sum(same) >= 3 / 4 * len(sources), options


@pytest.mark.parametrize("alpha", [1.0, 2.0])
def test_the_two_length_penalties(trained, backbones, alpha):
    """length_penalty alpha in both: Hugging Face ranks by log p / |y|^alpha, the pipeline by
    log p / ((5 + |y|) / 6)^alpha (GNMT). Where they pick the same hypothesis, sequences_scores * |y|^alpha
    is the pipeline's log p; they pick alike less often as alpha grows (on the trained CopyNet, measured:
    16 of 16 sources at 1, 3 of 16 at 2)."""
    hf, processor, _, _ = trained["backbone_copynet"]
    _, tok = backbones["bart"]
    model, sources = hf.seq2seq, held_out_sources()
    batch, enc = batches(tok, processor, sources, None)
    vocab_size, eos = hf.config.vocab_size, hf.config.eos_token_id
    out = hf.generate(
        **enc, max_new_tokens=20, num_beams=4, length_penalty=alpha, output_scores=True, return_dict_in_generate=True
    )
    ours = beam_search(model, batch, beam_size=4, max_len=20, length_penalty=alpha)
    same = 0
    for row, score, nbest in zip(out.sequences[:, 1:].tolist(), out.sequences_scores, ours):
        row, best = until_eos(row, eos), nbest[0]
        assert best.rank_score == pytest.approx(best.score / ((5 + len(best.ids)) / 6) ** alpha, abs=1e-6)
        if row == to_backbone(model, best.ids, vocab_size):
            same += 1
            assert abs(float(score) * len(row) ** alpha - best.score) < 1e-4
    assert same >= 12 if alpha == 1.0 else 0 < same < len(sources)


def test_beam_search_keeps_finished_hypotheses_the_pipelines_beam_drops(backbones):
    """The documented difference: Hugging Face's beam search keeps finished hypotheses aside and K live
    ones going; the pipeline's keeps finished ones in its K rows, where live ones that score higher at
    a step push them out. On random weights (flat distributions) beam 10 finds other outputs on some
    sources, each with a higher log-probability than the pipeline's best."""
    _, tok = backbones["bart"]
    model, hf, processor = pipeline_model(backbones, "bart", "backbone_pointer_generator")
    sources = held_out_sources()
    batch, enc = batches(tok, processor, sources, None)
    out = hf.generate(
        **enc, max_new_tokens=12, num_beams=10, length_penalty=0.0, output_scores=True, return_dict_in_generate=True
    )
    ours = beam_search(model, batch, beam_size=10, max_len=12)
    rows = [until_eos(row, hf.config.eos_token_id) for row in out.sequences[:, 1:].tolist()]
    differ = [b for b, nbest in enumerate(ours) if rows[b] != to_backbone(model, nbest[0].ids, hf.config.vocab_size)]
    assert differ
    assert all(float(out.sequences_scores[b]) > ours[b][0].score for b in differ)


@pytest.mark.parametrize("head", ["backbone_copynet", "backbone_pointer_generator"])
def test_the_cache_equals_recomputation_and_sampling_draws_copies(trained, head):
    """generate() with the cache (one step each, CopyNet's selective read from the extended id in the
    state) and without (the whole prefix again each step) give the same outputs; sampling with top_k 1 is
    greedy; plain sampling draws copies of the source's pieces outside the vocabulary."""
    hf, processor, _, _ = trained[head]
    sources = held_out_sources(8)
    enc = processor(sources)
    for options in ({}, {"num_beams": 4, "length_penalty": 0.0}):
        cached = hf.generate(**enc, max_new_tokens=16, **options)
        recomputed = hf.generate(**enc, max_new_tokens=16, use_cache=False, **options)
        assert torch.equal(cached, recomputed), options
    greedy_out = hf.generate(**enc, max_new_tokens=16)
    torch.manual_seed(0)
    assert torch.equal(hf.generate(**enc, max_new_tokens=16, do_sample=True, top_k=1), greedy_out)
    source = "a s5 U3 U4 b"
    torch.manual_seed(0)
    drawn = hf.generate(
        **processor([source]), max_new_tokens=8, do_sample=True, temperature=1.0, num_return_sequences=16
    )
    assert int(drawn.max()) < hf.config.vocab_size + 2
    assert any("U3" in text for text in processor.batch_decode(drawn, [source]))


@pytest.mark.parametrize(
    "kind,head,options",
    [
        ("bart", "backbone_copynet", {}),
        ("t5", "backbone_pointer_generator", {"coverage": True, "copy_head": 1}),
        ("marian", "backbone_pointer_softmax", {"shortlist": 30, "copy_layer": 0}),
    ],
)
def test_save_pretrained_then_from_pretrained_gives_identical_outputs(backbones, tmp_path, kind, head, options):
    """The folder holds the backbone's config, the head's options and weights, the processor: loaded
    (also through AutoModelForSeq2SeqLM, registered by models.hf), the weights and generate()'s outputs are
    identical, the logits equal to float32 rounding."""
    _, hf, processor = pipeline_model(backbones, kind, head, seed=3, **options)
    hf.save_pretrained(str(tmp_path))
    processor.save_pretrained(tmp_path)
    loaded = CopyHeadForConditionalGeneration.from_pretrained(str(tmp_path)).eval()
    auto = AutoModelForSeq2SeqLM.from_pretrained(str(tmp_path)).eval()
    again = CopyHeadProcessor.from_pretrained(tmp_path)
    enc = processor(SOURCES, text_target=TARGETS)
    assert all(torch.equal(enc[k], again(SOURCES, text_target=TARGETS)[k]) for k in enc)
    assert loaded.config.head_options == options and isinstance(auto, CopyHeadForConditionalGeneration)
    saved = hf.state_dict()
    with torch.no_grad():
        first = hf(**enc)
        for other in (loaded, auto):
            assert other.state_dict().keys() == saved.keys()
            assert all(torch.equal(value, saved[key]) for key, value in other.state_dict().items())
            out = other(**enc)
            # the same weights at other addresses: float32 products may round differently in the last bit
            assert torch.allclose(out.logits, first.logits, atol=1e-6, rtol=0)
            assert torch.allclose(out.loss, first.loss, atol=1e-6, rtol=0)
    src = processor(SOURCES)
    assert torch.equal(
        hf.generate(**src, num_beams=3, max_new_tokens=8), loaded.generate(**src, num_beams=3, max_new_tokens=8)
    )


def test_a_config_refuses_an_unknown_head_or_option():
    with pytest.raises(ValueError, match="backbone_copynet"):
        CopyHeadConfig(backbone={"model_type": "bart"}, head="copynet")
    with pytest.raises(ValueError, match="unknown head options"):
        CopyHeadConfig(backbone={"model_type": "bart"}, head="backbone_copynet", head_options={"coverage": True})
    with pytest.raises(ValueError, match="copy_head"):
        CopyHeadConfig(backbone={"model_type": "bart"}, head="backbone_copynet", head_options={"copy_head": -1})


def docs_example() -> str:
    """The python block under "From your own transformers code" in docs/pretrained.md."""
    text = (REPO / "docs" / "pretrained.md").read_text(encoding="utf-8")
    section = text.split("## From your own transformers code", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S)[1]


def test_the_docs_example_runs(backbones, tmp_path, monkeypatch):
    """The example, as written (under 20 lines), against a folder made the way `copyseq export` writes
    one: it loads, generates, decodes and trains."""
    code = docs_example()
    assert len(code.strip().splitlines()) < 20
    _, hf, processor = pipeline_model(backbones, "bart", "backbone_copynet")
    hf.save_pretrained(str(tmp_path / "exported"))
    processor.save_pretrained(tmp_path / "exported")
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(code, "docs/pretrained.md", "exec"), namespace)
    model = namespace["model"]
    assert isinstance(model, CopyHeadForConditionalGeneration)
    assert not torch.equal(model.seq2seq.output.w_c.weight, hf.seq2seq.output.w_c.weight)  # it trained
