"""``pipeline.serving.hf_export.write_hf``: a trained backbone row's checkpoint directory (as the training
stage writes it) -> a Hugging Face model folder that a user's code loads with ``models.hf``'s classes
alone, answering as the pipeline's Predictor does; other rows refused in one line."""

from __future__ import annotations

import random

import pytest
import torch
import transformers
import yaml

from benchmarks.toy import TOY_SEEN, toy_copy_example
from models.hf import CopyHeadForConditionalGeneration, CopyHeadProcessor
from models.registry import build_model, model_config
from pipeline.serving.export import main as export_main
from pipeline.serving.hf_export import write_hf
from pipeline.serving.predictor import Predictor, ServingConfig
from pipeline.training.checkpoints import save_atomic, vocab_identity
from pipeline.training.loop import nll_loss
from pipeline.vocab.batching import collate
from pipeline.vocab.tiny_backbone import make_tiny_backbone
from pipeline.vocab.tokenizer import BackboneTokenizer

HEAD = "backbone_copynet"
RARE, UNSEEN = [f"R{i}" for i in range(10)], [f"U{i}" for i in range(10)]


@pytest.fixture(autouse=True, scope="module")
def quiet():
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()


@pytest.fixture(scope="module")
def row(tmp_path_factory):
    """(checkpoint directory, vocabulary directory) of a CopyNet row on a tiny BART, trained 80 steps on
    the toy copy task (10% of its fillers outside the tokenizer's vocabulary), written as the pipeline
    writes them: the vocab stage's backbones/<name>/ and the training stage's model.pt."""
    root = tmp_path_factory.mktemp("hf_export")
    rng = random.Random(0)
    texts = [" ".join(side) for _ in range(300) for side in toy_copy_example(rng, TOY_SEEN)]
    path = make_tiny_backbone("bart", texts, root / "tiny_bart", d_model=16, layers=2, heads=2, vocab_size=120)
    tok = BackboneTokenizer.from_backbone(str(path))
    vocab_dir = root / "vocab" / "toy" / "backbones" / "tiny_bart"
    tok.save(vocab_dir)
    torch.manual_seed(0)
    size = len(tok.vocab)
    cfg = model_config({"backbone": str(path), HEAD: {}}, HEAD, src_vocab=size, tgt_vocab=size)
    model = build_model(HEAD, cfg).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    rng = random.Random(1)
    for _ in range(80):
        pairs = [toy_copy_example(rng, RARE if rng.random() < 0.1 else TOY_SEEN) for _ in range(16)]
        batch = collate(
            tok.words_to_pieces([s for s, _ in pairs]),
            tok.words_to_pieces([t for _, t in pairs], "tgt"),
            tok.vocab,
            tok.vocab,
        )
        loss, _ = nll_loss(model, batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    checkpoint = root / "checkpoints" / "toy" / HEAD
    checkpoint.mkdir(parents=True)
    identity = vocab_identity(tok.vocab)
    record = {"model": model.state_dict(), "model_config": vars(model.cfg), "mechanism": HEAD}
    save_atomic({**record, "vocab": {"src": identity, "tgt": identity}, "step": 80}, checkpoint / "model.pt")
    return checkpoint, vocab_dir


def sources(n: int = 12) -> list[str]:
    rng = random.Random(5)
    return [" ".join(toy_copy_example(rng, UNSEEN if k % 3 == 0 else TOY_SEEN)[0]) for k in range(n)]


def test_the_exported_folder_answers_as_the_predictor(row, tmp_path):
    """Loaded in a user's code (from_pretrained of the model and of the processor), generate() with the
    exported defaults (the row's beam 4, max_len 16) gives the Predictor's output texts and scores."""
    checkpoint, vocab_dir = row
    out = write_hf(checkpoint, tmp_path / "hf", vocab_dir=vocab_dir, decoding={"beam_size": 4, "max_len": 16})
    config = ServingConfig(task="toy", mechanism=HEAD, prepare={"reader": "copynet_rules"}, beam_size=4, max_len=16)
    predictor = Predictor(
        checkpoint / "model.pt", vocab_dir / "src.vocab", vocab_dir / "tgt.vocab", config, backbone_tokenizer=vocab_dir
    )
    texts = sources()
    expected = predictor.predict(texts)
    model = CopyHeadForConditionalGeneration.from_pretrained(str(out)).eval()
    processor = CopyHeadProcessor.from_pretrained(out)
    generated = model.generate(**processor(texts), output_scores=True, return_dict_in_generate=True)
    outputs = processor.batch_decode(generated.sequences, texts)
    assert outputs == [r["output"] for r in expected]
    assert max(abs(float(s) - r["score"]) for s, r in zip(generated.sequences_scores, expected)) < 1e-4
    copied = [r["output"] for r, text in zip(expected, texts) if "U" in text]
    assert copied and all("U" in output for output in copied)  # the unseen fillers are copied back


def test_decoding_settings_become_generates_defaults(row, tmp_path):
    checkpoint, vocab_dir = row
    decoding = {"beam_size": 5, "max_len": 9, "min_len": 2, "block_ngram": 3, "ban_unk": True, "length_penalty": 0.6}
    out = write_hf(checkpoint, tmp_path / "hf", vocab_dir=vocab_dir, decoding=decoding)
    config = CopyHeadForConditionalGeneration.from_pretrained(str(out)).generation_config
    assert (config.num_beams, config.max_new_tokens, config.min_new_tokens) == (5, 9, 2)
    assert (config.no_repeat_ngram_size, config.length_penalty) == (3, 0.6)
    assert config.suppress_tokens == [BackboneTokenizer.load(vocab_dir).token_ids["unk"]]


def test_other_rows_are_refused_naming_the_supported_heads(tmp_path):
    plain = tmp_path / "checkpoints" / "toy" / "copynet"
    plain.mkdir(parents=True)
    save_atomic({"model": {}, "mechanism": "copynet"}, plain / "model.pt")
    with pytest.raises(ValueError, match="copynet model; the Hugging Face export supports") as err:
        write_hf(plain, tmp_path / "out")
    assert "backbone_copynet" in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(ValueError, match="no trained model"):
        write_hf(tmp_path / "nothing", tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_copyseq_export_format_hf_writes_the_same_folder(row, tmp_path):
    """``copyseq export CHECKPOINT --format hf``: the row's vocabulary and decoding settings found as
    ``predict --checkpoint`` finds them (here given by ``--vocab`` and a params file), the folder
    answering as write_hf's."""
    checkpoint, vocab_dir = row
    params = tmp_path / "params.yaml"
    evaluate = {"beam_size": 4, "max_len": 16}
    settings = {"tasks": {"toy": "data"}, "mechanisms": [HEAD], "prepare": {"toy": {"reader": "copynet_rules"}}}
    params.write_text(yaml.safe_dump({**settings, "evaluate": evaluate}))
    args = [str(checkpoint), "--format", "hf", "--out", str(tmp_path / "cli"), "--params", str(params)]
    assert export_main([*args, "--vocab", str(vocab_dir)]) == 0
    direct = write_hf(checkpoint, tmp_path / "direct", vocab_dir=vocab_dir, decoding=evaluate)
    texts = sources(6)
    outputs = []
    for folder in (tmp_path / "cli", direct):
        model = CopyHeadForConditionalGeneration.from_pretrained(str(folder)).eval()
        processor = CopyHeadProcessor.from_pretrained(folder)
        assert (model.generation_config.num_beams, model.generation_config.max_new_tokens) == (4, 16)
        outputs.append(processor.batch_decode(model.generate(**processor(texts)), texts))
    assert outputs[0] == outputs[1]
