"""Read-Again's several-sentence options (Zeng et al. 2016, 3.1.3: ``sentences: opt1 | opt2``) through
the batches training builds, not only through ``collate``.

Opt-1/Opt-2 find the sentence ends by their words (``ReadAgainOptions.sentence_end``), so the id-encoded
batches of the train stage must carry the source words: ``models.registry.reads_source_words`` tells
the train job (pipeline/training/job.py) to hand the source vocabulary to the training loop, whose
``BatchDataset`` asks ``EncodedSplit.batch(rows, source_tokens=...)`` for them. The test runs the real
``TrainJob`` on a tiny in-memory task (two optimizer steps, stopped by ``on_step``), records every
batch the model is called on (the step-0 validation in eval mode and the training batches), and checks:

- every recorded batch carries, row by row, the words of the shard row's source (a word outside the
  source vocabulary read back as ``<unk>``: the batch is built from ids, with no string work);
- its sentence slots are those of ``collate`` of the same rows (the real strings), and the model's
  log-likelihood on it equals the one on ``collate`` of the same rows, token by token;
- the words really matter: hiding the sentence ends of the same batch changes that log-likelihood;
- a ``sentences: single`` model reads no words, and its batches carry none.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from models.registry import reads_source_words
from pipeline.config.paths import TaskPaths
from pipeline.config.validation import SettingsError
from pipeline.training.job import TrainJob
from pipeline.vocab.batching import collate
from pipeline.vocab.vocabulary import PAD, SPECIALS, UNK
from tests.helpers import StopTraining, encoded_task, shard_row, stop_at

# Train rows: two sentences, three (more than K = 2: the third joins slot 2), consecutive ends, one
# sentence without an end, a source that is a lone ".". Valid rows hold words the source vocabulary
# (built from the train rows) lacks: zz, qq (and qq, zz are copied: extended ids in the target).
TRAIN = [
    ("t0", "a b . c d", "c a"),
    ("t1", "d . a . b c", "b d"),
    ("t2", "c a b", "a"),
    ("t3", "b . . a", "a b"),
    ("t4", "a c . d b . c a", "d c"),
    ("t5", ".", "a"),
]
VALID = [
    ("v0", "a zz . b", "zz b"),
    ("v1", "c . d qq . a", "qq d"),
    ("v2", "b a . c", "c"),
]
MODES = [("opt1", 2), ("opt2", 3), ("single", 2)]


def _vocab_dir(root):
    """TRAIN/VALID id-encoded under ``root`` as the vocab stage writes them; the source vocabulary."""
    splits = {
        "train": [shard_row(i, src, tgt) for i, src, tgt in TRAIN],
        "valid": [shard_row(i, src, tgt) for i, src, tgt in VALID],
    }
    _, src_vocab, tgt_vocab = encoded_task(root, splits)
    src_vocab.save(root / "src.vocab")
    tgt_vocab.save(root / "tgt.vocab")
    return src_vocab


def _train_job(root, sentences: str, max_sentences: int) -> TrainJob:
    """A TrainJob of ``read_again`` on TRAIN/VALID, id-encoded as the vocab stage writes them."""
    _vocab_dir(root)
    params = {
        "model": {"emb": 6, "hidden": 5, "read_again": {"sentences": sentences, "max_sentences": max_sentences}},
        "train": {"epochs": 1, "batch_size": 4, "lr": 0.01, "seed": 0, "threads": 1, "device": "cpu"},
    }
    params["train"].update(select_by="loss", log_every=1)
    return TrainJob(TaskPaths("t", root), "read_again", params, vocab_dir=root)


def _recorded_run(job: TrainJob, root) -> tuple[torch.nn.Module, list[tuple[bool, object]]]:
    """Run ``job`` for two optimizer steps; the model and every ``(training mode, batch)`` it was
    called on (the step-0 validation, then the training batches)."""
    seen: list[tuple[bool, object]] = []
    built = {}
    build = job.build_model

    def recording_build(seed=None):
        model, info = build(seed)
        built["model"], built["hook"] = (
            model,
            model.register_forward_pre_hook(lambda m, args: seen.append((m.training, args[0]))),
        )
        return model, info

    job.build_model = recording_build  # the job's own builder, plus a hook that records the batches
    with pytest.raises(StopTraining):
        job.run(checkpoints=root / "ckpt", on_step=stop_at(2))
    built["hook"].remove()
    return built["model"], seen


@pytest.mark.parametrize("sentences,max_sentences", MODES, ids=[m for m, _ in MODES])
def test_training_batches_carry_the_source_words_and_score_as_collate(tmp_path, sentences, max_sentences):
    job = _train_job(tmp_path, sentences, max_sentences)
    reads = sentences != "single"
    assert reads_source_words(job.base, job.model_cfg) is reads  # what the job asks before training
    model, seen = _recorded_run(job, tmp_path)
    src_vocab, tgt_vocab = job.src_vocab, job.tgt_vocab
    assert "." in src_vocab.stoi and "zz" not in src_vocab.stoi  # the end word is known, zz is not
    rows = {i: (src.split(), tgt.split()) for i, src, tgt in TRAIN + VALID}

    # The step-0 validation (eval mode) saw every valid row, the two training steps every train row.
    assert [training for training, _ in seen] == [False, True, True]
    assert sorted(seen[0][1].ids) == [i for i, *_ in VALID]
    assert sorted(i for _, batch in seen[1:] for i in batch.ids) == [i for i, *_ in TRAIN]

    model.eval()
    encoder = model.encoder
    for _, batch in seen:
        srcs = [rows[i][0] for i in batch.ids]
        tgts = [rows[i][1] for i in batch.ids]
        reference = collate(srcs, tgts, src_vocab, tgt_vocab)  # the same rows from their strings
        for key in ("src", "src_len", "src_ext", "tgt_in", "tgt_out"):
            assert torch.equal(getattr(batch, key), getattr(reference, key)), (batch.ids, key)
        with torch.no_grad():
            got = model(batch)  # (B, T) log p(y_t) at the training target, 0 at padding
            want = model(reference)
        assert got.shape == want.shape == batch.tgt_out.shape
        assert torch.allclose(got, want, rtol=0, atol=1e-6), (batch.ids, (got - want).abs().max())
        if not reads:  # no string work for a model that reads no words
            assert batch.src_tokens == []
            continue
        # The source words of each row, in the batch's row order (an out-of-vocabulary word: <unk>).
        assert batch.src_tokens == [[w if w in src_vocab.stoi else SPECIALS[UNK] for w in src] for src in srcs]
        mask = batch.src != PAD  # (B, S)
        sid = encoder.sentence_ids(batch, mask)  # (B, S) sentence slot of every position
        assert torch.equal(sid, encoder.sentence_ids(reference, mask)), batch.ids
        assert sid.max().item() >= 1  # every batch holds a row of several sentences
        # The sentence ends change the model's reading: without them, another likelihood.
        with torch.no_grad():
            hidden = model(_without_sentence_ends(batch))
        assert (hidden - got).abs().max().item() > 1e-4, batch.ids


def _without_sentence_ends(batch):
    """``batch`` with every "." of its source words hidden (a word that ends no sentence)."""
    return replace(batch, src_tokens=[[";" if w == "." else w for w in row] for row in batch.src_tokens])


@pytest.mark.parametrize(("ends", "missing"), [((".", "zz"), "'zz'"), (("zz", "qq"), "'zz', 'qq'")])
def test_a_sentence_end_outside_the_source_vocabulary_is_refused_before_training(tmp_path, ends, missing):
    """A sentence end the source vocabulary lacks is <unk> in a training batch (words read back from
    ids) but the word itself in raw text (decoding, serving): the two would split sources differently,
    so the train job refuses the setting, naming the words, before any work."""
    src_vocab = _vocab_dir(tmp_path)
    assert "." in src_vocab and "zz" not in src_vocab and "qq" not in src_vocab
    params = {
        "model": {"emb": 6, "hidden": 5, "read_again": {"sentences": "opt1", "sentence_end": list(ends)}},
        "train": {"epochs": 1, "batch_size": 4, "seed": 0, "device": "cpu"},
    }
    with pytest.raises(SettingsError, match=rf"^params\.yaml \(read_again\): model\.read_again looks for {missing} in"):
        TrainJob(TaskPaths("t", tmp_path), "read_again", params, vocab_dir=tmp_path)
    params["model"]["read_again"]["sentence_end"] = ["."]
    TrainJob(TaskPaths("t", tmp_path), "read_again", params, vocab_dir=tmp_path)  # in the vocabulary: accepted
    params["model"]["read_again"] = {"sentences": "single", "sentence_end": list(ends)}
    TrainJob(TaskPaths("t", tmp_path), "read_again", params, vocab_dir=tmp_path)  # single reads no words
