"""The copy heads on pretrained encoder-decoders (models/backbone.py, models/backbone_heads.py) on tiny
BART-, T5- and Marian-shaped backbones made by the test: a tokenizer trained on the test's own text and
a model with fresh weights, saved to a temporary directory and loaded through ``from_pretrained`` as a
user's model is (``model.backbone``). The mechanism contract (tests/models/test_contract.py) runs the
heads on BART and T5 built from a config; here each head's maths by hand against the backbone's own
forward pass, the cache, checkpoints without the directory, fine-tuning options and learning."""

from __future__ import annotations

import random
import shutil
import time

import pytest
import torch

from benchmarks.toy import TOY_SEEN, toy_copy_example
from models.backbone import BackboneSeq2Seq
from models.extended import NEG
from models.registry import build_model, model_config
from pipeline.decoding.decode import copy_shares
from pipeline.decoding.search import beam_search, greedy
from pipeline.training import loop
from pipeline.training.checkpoints import load_model, save_atomic
from pipeline.training.distributed import ONE_PROCESS
from pipeline.training.loop import nll_loss, parameter_groups
from pipeline.training.schedule import LRSchedule
from pipeline.training.settings import TrainConfig
from pipeline.vocab.batching import collate
from pipeline.vocab.extended import ext_ids_to_tokens
from pipeline.vocab.tiny_backbone import KINDS, make_tiny_backbone
from pipeline.vocab.tokenizer import BackboneTokenizer
from pipeline.vocab.vocabulary import PAD, UNK
from tests.helpers import assert_step_distributions_normalised

HEADS = ("backbone_lm", "backbone_pointer_generator", "backbone_copynet", "backbone_pointer_softmax")
# "U" never occurs in the tokenizer's text: its pieces are <unk>, i.e. source pieces outside the vocabulary.
SRCS = [["a", "s1", "U7", "s2", "U7", "b"], ["a", "s3", "s3", "b"], ["a", "U2", "b"]]
TGTS = [["b", "s1", "U7", "s2", "U7"], ["b", "s3", "s3"], ["b", "U2"]]


def toy_texts(n: int = 300) -> list[str]:
    rng = random.Random(0)
    pairs = [toy_copy_example(rng, TOY_SEEN) for _ in range(n)]
    return [" ".join(side) for pair in pairs for side in pair]


@pytest.fixture(scope="module")
def backbones(tmp_path_factory) -> dict:
    """kind -> (directory, its tokenizer as the vocab stage reads it)."""
    root = tmp_path_factory.mktemp("backbones")
    texts = toy_texts()
    out = {}
    for kind in KINDS:
        path = make_tiny_backbone(kind, texts, root / kind, d_model=16, layers=2, heads=2, vocab_size=120)
        out[kind] = (path, BackboneTokenizer.from_backbone(str(path)))
    return out


def backbone_model(path, tok: BackboneTokenizer, name: str, seed: int = 0, **options) -> BackboneSeq2Seq:
    torch.manual_seed(seed)
    size = len(tok.vocab)
    cfg = model_config({"backbone": str(path), name: options}, name, src_vocab=size, tgt_vocab=size)
    return build_model(name, cfg).double().eval()


def piece_batch(tok: BackboneTokenizer, srcs=SRCS, tgts=TGTS):
    return collate(tok.words_to_pieces(srcs), tok.words_to_pieces(tgts, "tgt") if tgts else None, tok.vocab, tok.vocab)


def hf_forward(model: BackboneSeq2Seq, batch):
    """The backbone's own forward pass on the batch (input ids, not our embeddings): (LM log-softmax
    over the project's V (B, T, V), the last layer's mean cross-attention renormalised (B, T, S), the
    encoder states (B, S, D), the decoder states (B, T, D))."""
    vocab = model.cfg.tgt_vocab
    mask = batch.src != PAD
    dec_ids = model.tgt_ids[batch.tgt_in.masked_fill(batch.tgt_in >= vocab, UNK)]
    out = model.net(
        input_ids=model.src_ids[batch.src],
        attention_mask=mask.long(),
        decoder_input_ids=dec_ids,
        output_attentions=True,
        output_hidden_states=True,
    )
    logits = out.logits.index_select(-1, model.tgt_ids).double()
    logits[..., PAD] = NEG
    logits[..., 2] = NEG  # <s>
    attn = out.cross_attentions[-1].mean(dim=1).masked_fill(~mask.unsqueeze(1), 0.0)
    attn = attn / attn.sum(-1, keepdim=True)
    dec_states = model.net.get_decoder()(
        input_ids=dec_ids, encoder_hidden_states=out.encoder_last_hidden_state, encoder_attention_mask=mask.long()
    ).last_hidden_state
    return torch.log_softmax(logits, -1), attn.double(), out.encoder_last_hidden_state, dec_states


def merged_copy(attn: torch.Tensor, batch, size: int) -> torch.Tensor:
    """sum_{j: x_j = w} a_tj over the extended vocabulary, by a loop: (B, T, S) -> (B, T, size)."""
    out = torch.zeros(*attn.shape[:2], size, dtype=attn.dtype)
    for b in range(attn.size(0)):
        for j in range(attn.size(2)):
            if batch.src[b, j] != PAD:
                out[b, :, batch.src_ext[b, j]] += attn[b, :, j]
    return out


def gold(dist: torch.Tensor, model, batch) -> torch.Tensor:
    """log of dist (B, T, V + X) read at the training targets, 0 at padding."""
    target = model.training_target(batch)
    return dist.clamp_min(1e-300).log().gather(-1, target.unsqueeze(-1)).squeeze(-1).masked_fill(target == PAD, 0.0)


@pytest.mark.parametrize("kind", KINDS)
def test_backbone_alone_equals_its_own_forward_and_the_cache_equals_recomputation(backbones, kind):
    """backbone_lm's log p(y_t) is the backbone's own forward pass (its embeddings, positions, LM head,
    T5's output scaling) at the project's ids; the cached step-by-step path gives the same numbers."""
    path, tok = backbones[kind]
    model = backbone_model(path, tok, "backbone_lm")
    batch = piece_batch(tok)
    assert batch.n_ext >= 1  # the U pieces are outside the vocabulary
    with torch.no_grad():
        lp, _, _, _ = hf_forward(model, batch)
        expected = gold(lp.exp(), model, batch)
        one_pass, stepwise = model(batch), model(batch, stepwise=True)
    real = model.training_target(batch) != PAD
    assert torch.allclose(one_pass, expected, atol=1e-9, rtol=0)
    assert torch.allclose(stepwise, one_pass, atol=1e-9, rtol=0)
    assert (one_pass[real] < 0).all()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", HEADS)
def test_every_step_is_a_distribution_and_one_pass_equals_the_cache(backbones, kind, name):
    path, tok = backbones[kind]
    model = backbone_model(path, tok, name)
    batch = piece_batch(tok)
    assert_step_distributions_normalised(model, batch, atol=1e-9)
    with torch.no_grad():
        assert torch.allclose(model(batch), model(batch, stepwise=True), atol=1e-9, rtol=0)
        assert torch.allclose(model(batch, objective=True), model(batch, objective=True, stepwise=True), atol=1e-9)


def pinned(model, attribute: str, value: float):
    with torch.no_grad():
        layer = getattr(model.output, attribute)
        layer = layer.out if hasattr(layer, "out") else layer
        layer.weight.zero_()
        layer.bias.fill_(value)
    return model


@pytest.mark.parametrize("kind", KINDS)
def test_pointer_generator_limits_by_hand(backbones, kind):
    """p_gen = 1: P = the LM head's softmax; p_gen = 0: P(w) = sum_{j: x_j = w} a_tj with a_t the
    backbone's last cross-attention (its heads' mean), both from the backbone's own forward pass."""
    path, tok = backbones[kind]
    batch = piece_batch(tok)
    for bias, expected_of in ((60.0, "gen"), (-60.0, "copy")):
        model = pinned(backbone_model(path, tok, "backbone_pointer_generator"), "gate", bias)
        with torch.no_grad():
            lp, attn, _, _ = hf_forward(model, batch)
            size = model.cfg.tgt_vocab + batch.n_ext
            if expected_of == "gen":
                dist = torch.cat([lp.exp(), torch.zeros(*lp.shape[:2], batch.n_ext, dtype=lp.dtype)], -1)
            else:
                dist = merged_copy(attn, batch, size)
            got, want = model(batch), gold(dist, model, batch)
            # a token the limit gives probability 0 keeps e^-60 of the other side: compared where it is not 0
            live = want > -100
            assert live.sum() > 10 and torch.allclose(got[live], want[live], atol=1e-9, rtol=0), expected_of
            assert (got[~live] < -55).all()


@pytest.mark.parametrize("kind", KINDS)
def test_pointer_softmax_limits_by_hand(backbones, kind):
    """d_t = 1: the shortlist softmax is the LM head's; d_t = 0: the location softmax is a_t."""
    path, tok = backbones[kind]
    batch = piece_batch(tok)
    for bias, side in ((60.0, "shortlist"), (-60.0, "location")):
        model = pinned(backbone_model(path, tok, "backbone_pointer_softmax"), "switch", bias)
        with torch.no_grad():
            lp, attn, _, _ = hf_forward(model, batch)
            size = model.cfg.tgt_vocab + batch.n_ext
            if side == "shortlist":
                dist = torch.cat([lp.exp(), torch.zeros(*lp.shape[:2], batch.n_ext, dtype=lp.dtype)], -1)
            else:
                dist = merged_copy(attn, batch, size)
            got, want = model(batch, objective=False), gold(dist, model, batch)
            live = want > -100
            assert live.sum() > 10 and torch.allclose(got[live], want[live], atol=1e-9, rtol=0), side
            assert (got[~live] < -55).all()


@pytest.mark.parametrize("kind", KINDS)
def test_copynet_by_hand(backbones, kind):
    """CopyNet eq. 4-8 by hand: psi_g = the LM head's logits, psi_c(x_j) = tanh(h_j^T W_c) s_t with h the
    encoder states and s_t the decoder states of the backbone's own pass (W_r = 0 at the start, so the
    selective read leaves the input as it is), p(w) = (exp psi_g(w) + sum_{x_j = w} exp psi_c(x_j)) / Z."""
    path, tok = backbones[kind]
    model = backbone_model(path, tok, "backbone_copynet")
    assert model.output.read.weight.abs().max() == 0
    with torch.no_grad():
        torch.nn.init.normal_(model.output.w_c.weight, std=0.5)
    batch = piece_batch(tok)
    with torch.no_grad():
        mask = batch.src != PAD
        dec_ids = model.tgt_ids[batch.tgt_in.masked_fill(batch.tgt_in >= model.cfg.tgt_vocab, UNK)]
        out = model.net(input_ids=model.src_ids[batch.src], attention_mask=mask.long(), decoder_input_ids=dec_ids)
        psi_g = out.logits.index_select(-1, model.tgt_ids).double()
        psi_g[..., PAD] = NEG
        psi_g[..., 2] = NEG
        h = out.encoder_last_hidden_state
        s = model.net.get_decoder()(input_ids=dec_ids, encoder_hidden_states=h, encoder_attention_mask=mask.long())[0]
        psi_c = torch.einsum("bsd,btd->bts", torch.tanh(h @ model.output.w_c.weight.T), s)
        exp_c = psi_c.exp() * mask.unsqueeze(1)
        size = model.cfg.tgt_vocab + batch.n_ext
        numer = torch.cat([psi_g.exp(), torch.zeros(*psi_g.shape[:2], batch.n_ext, dtype=psi_g.dtype)], -1)
        numer = numer + merged_copy(exp_c, batch, size)
        dist = numer / numer.sum(-1, keepdim=True)
        assert torch.allclose(model(batch), gold(dist, model, batch), atol=1e-9, rtol=0)


def test_selective_read_moves_the_decoder_input(backbones):
    """x_t = E(y_{t-1}) + W_r zeta(y_{t-1}): with W_r != 0 a step after a copied piece differs from the
    plain backbone's, and teacher forcing (stepping through the cache) still equals search's steps."""
    path, tok = backbones["bart"]
    model = backbone_model(path, tok, "backbone_copynet")
    batch = piece_batch(tok)
    with torch.no_grad():
        before = model(batch)
        torch.nn.init.normal_(model.output.read.weight, std=0.5)
        after = model(batch)
        assert not torch.allclose(before, after)
        assert torch.allclose(after, model(batch, stepwise=True), atol=1e-9, rtol=0)


def test_checkpoint_rebuilds_without_the_backbone_directory(backbones, tmp_path):
    """model.pt records the backbone's config and special ids: loaded with the directory gone, the model
    gives the same outputs and the same beam search, and the vocabulary's hash is checked."""
    path, tok = backbones["t5"]
    copy = shutil.copytree(path, tmp_path / "t5")
    model = backbone_model(copy, tok, "backbone_pointer_generator", coverage=True).float()
    options = model.cfg.options
    assert options["backbone_config"]["model_type"] == "t5" and options["token_ids"] == tok.token_ids
    save_atomic(
        {"model": model.state_dict(), "model_config": vars(model.cfg), "mechanism": "backbone_pointer_generator"},
        tmp_path / "model.pt",
    )
    shutil.rmtree(copy)
    loaded, _ = load_model(tmp_path / "model.pt", "backbone_pointer_generator", "cpu", (tok.vocab, tok.vocab))
    batch = piece_batch(tok)
    with torch.no_grad():
        assert torch.equal(model(batch), loaded(batch))
    src_only = piece_batch(tok, tgts=None)
    first = [h.ids for h in beam_search(model, src_only, beam_size=3, max_len=6)[0]]
    again = [h.ids for h in beam_search(loaded, src_only, beam_size=3, max_len=6)[0]]
    assert first == again


def test_freezing_and_the_heads_learning_rate(backbones):
    """freeze_encoder: no gradient reaches the encoder's layers (its token embeddings, shared with the
    decoder, still train); freeze_embeddings: none reaches them; head_lr: the head is its own optimizer
    group, at head_lr / train.lr of the schedule."""
    path, tok = backbones["bart"]
    batch = piece_batch(tok)
    model = backbone_model(path, tok, "backbone_pointer_generator", freeze_encoder=True, head_lr=0.01).float().train()
    nll_loss(model, batch)[0].backward()
    encoder_layers = [p for n, p in model.net.named_parameters() if n.startswith("model.encoder.layers")]
    assert encoder_layers and all(p.grad is None for p in encoder_layers)
    assert model.net.get_input_embeddings().weight.grad.abs().max() > 0
    assert all(p.grad is not None for p in model.output.parameters())
    groups = parameter_groups(model, 0.001)
    assert len(groups) == 2 and groups[1]["lr"] == 0.01 and groups[1]["lr_scale"] == pytest.approx(10.0)
    assert {id(p) for p in groups[1]["params"]} == {id(p) for p in model.output.parameters()}
    trained = {id(p) for g in groups for p in g["params"]}
    assert not any(id(p) in trained for p in encoder_layers)

    frozen = backbone_model(path, tok, "backbone_copynet", freeze_embeddings=True).float().train()
    nll_loss(frozen, batch)[0].backward()
    assert frozen.net.get_input_embeddings().weight.grad is None
    assert frozen.net.get_output_embeddings().weight.requires_grad is False


def copy_task_exact_match(model, tok, pool, seed: int, n: int = 60) -> float:
    rng = random.Random(seed)
    pairs = [toy_copy_example(rng, pool) for _ in range(n)]
    batch = piece_batch(tok, [s for s, _ in pairs], None)
    hyps = greedy(model, batch, max_len=16)
    outs = [tok.detokenise(ext_ids_to_tokens(h.ids, batch.oovs[i], tok.vocab)) for i, h in enumerate(hyps)]
    return sum(out.split() == tgt for out, (_, tgt) in zip(outs, pairs)) / n


def test_copy_head_learns_what_the_backbone_alone_cannot(backbones):
    """The toy copy task a X b -> b X with test fillers made of a character the tokenizer never saw
    (its pieces are <unk>): the same tiny BART, the same steps and data, alone and under the copy heads.
    Training meets such fillers too (10%, another pool), as rare words in real corpora."""
    path, tok = backbones["bart"]
    rare, unseen = [f"R{i}" for i in range(10)], [f"U{i}" for i in range(10)]
    scores = {}
    # Pointer Softmax is not among them: by its design it points only at words outside its shortlist
    # (here none of the seen words, so on this task it generates as the backbone alone does; measured at
    # 0.0 / 0.0 after these steps, as the backbone alone) and is checked by hand above instead.
    for name in ("backbone_lm", "backbone_pointer_generator", "backbone_copynet"):
        t0 = time.perf_counter()
        model = backbone_model(path, tok, name, seed=0).float().train()
        opt = torch.optim.Adam(parameter_groups(model, 3e-3), lr=3e-3)
        rng = random.Random(1)
        for _ in range(150):
            pairs = [toy_copy_example(rng, rare if rng.random() < 0.1 else TOY_SEEN) for _ in range(16)]
            loss, _ = nll_loss(model, piece_batch(tok, [s for s, _ in pairs], [t for _, t in pairs]))
            opt.zero_grad()
            loss.backward()
            opt.step()
        model.eval()
        scores[name] = copy_task_exact_match(model, tok, unseen, seed=2), copy_task_exact_match(model, tok, TOY_SEEN, 3)
        print(f"{name}: {time.perf_counter() - t0:.1f}s, exact match unseen / seen {scores[name]}")
    assert scores["backbone_lm"][0] == 0.0  # its outputs have <unk> where the U is
    for name in ("backbone_pointer_generator", "backbone_copynet"):
        assert scores[name][0] >= 0.5, scores


def test_copy_shares_and_the_search_options(backbones):
    """The copy share of each output token (what serving marks as copied): with p_gen pinned near 0 every
    emitted source piece is copied (share 1), the backbone alone has no copy side (share 0). Beam search's
    options act on a backbone as on every mechanism: ban_unk, n-gram blocking."""
    path, tok = backbones["bart"]
    batch = piece_batch(tok, tgts=None)
    pg = pinned(backbone_model(path, tok, "backbone_pointer_generator", seed=1), "gate", -60.0).float()
    lm = backbone_model(path, tok, "backbone_lm", seed=1).float()
    outs = [nbest[0].ids for nbest in beam_search(pg, batch, beam_size=3, max_len=6)]
    shares = copy_shares(pg, batch, outs)
    checked = 0
    for b, (ids, row) in enumerate(zip(outs, shares)):
        source = set(batch.src_ext[b][batch.src[b] != PAD].tolist())
        for y, share in zip(ids, row):
            if y in source:
                assert share > 0.999
                checked += 1
    assert checked > 0
    assert all(share == 0.0 for row in copy_shares(lm, batch, outs) for share in row)
    for nbest in beam_search(lm, batch, beam_size=3, max_len=10, ban_unk=True, block_ngram=2):
        for hyp in nbest:
            assert UNK not in hyp.ids
            bigrams = list(zip(hyp.ids, hyp.ids[1:]))
            assert len(bigrams) == len(set(bigrams))


def test_the_heads_learning_rate_follows_the_schedule(backbones):
    """One optimizer step of the training loop under warm-up: the backbone's group at the schedule's rate,
    the head's at head_lr / train.lr times it (without ``lr_scale`` both would get the schedule's rate)."""
    path, tok = backbones["bart"]
    model = backbone_model(path, tok, "backbone_pointer_generator", head_lr=0.01).float().train()
    cfg = TrainConfig(lr=0.001, warmup_steps=4)
    optimizer = loop._optimizer(cfg, model, torch.device("cpu"))
    schedule = LRSchedule(cfg.lr, cfg.warmup_steps)
    loop._train_step(
        model, model, optimizer, schedule, [piece_batch(tok)], cfg, torch.device("cpu"), ONE_PROCESS, loop.Progress()
    )
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.001 / 4)
    assert optimizer.param_groups[1]["lr"] == pytest.approx(0.01 / 4)


def test_a_word_vocabulary_on_a_backbone_is_refused(backbones):
    """A backbone row given another vocabulary than its tokenizer's (e.g. the task's word vocabulary: its
    ids would name other pieces) is an error naming the vocabulary to use, never a silently wrong model."""
    path, tok = backbones["t5"]
    cfg = model_config({"backbone": str(path)}, "backbone_copynet", src_vocab=54, tgt_vocab=54)
    with pytest.raises(ValueError, match="vocab stage wrote for this backbone"):
        build_model("backbone_copynet", cfg)


def test_token_budgets_exact_resume_and_averaging_on_a_backbone(backbones, tmp_path, capsys):
    """The training engine on a backbone row as on every row: token-budget batches, a run stopped mid-way
    resumes from its step checkpoint to the uninterrupted run's weights (the backbone's, tied ones
    included, and the head's), and the last step checkpoints average into a model.pt that loads."""
    from pipeline.io.shards import ShardWriter, make_schema
    from pipeline.training.averaging import snapshots, write_average
    from pipeline.vocab.encoded import EncodedSplit, write_encoded_split
    from tests.helpers import StopTraining, stop_at

    path, tok = backbones["marian"]
    rng = random.Random(4)
    for split, n in (("train", 48), ("valid", 8)):
        pairs = [toy_copy_example(rng, TOY_SEEN) for _ in range(n)]
        with ShardWriter(tmp_path / "shards" / split, make_schema()) as writer:
            writer.write([{"id": str(i), "src": s, "tgt": t, "refs": []} for i, (s, t) in enumerate(pairs)])
        write_encoded_split(
            tmp_path / "shards" / split, tmp_path / "ids" / split, tok.vocab, tok.vocab, tok.piece_table
        )
    train_split, valid_split = (EncodedSplit(tmp_path / "ids" / s, len(tok.vocab)) for s in ("train", "valid"))
    options = dict(
        epochs=2,
        batch_size=64,
        max_tokens=160,
        lr=3e-3,
        seed=7,
        checkpoint_every=1,
        keep_checkpoints=3,
        log_every=1,
        validate_every=4,
    )

    def run(ckpt, on_step=None):
        model = backbone_model(path, tok, "backbone_pointer_generator", seed=3, coverage=True).float().train()
        history = loop.train(
            model, train_split, valid_split, TrainConfig(**options), ckpt,
            model_config=vars(model.cfg), data_hash="d", progress=False, on_step=on_step,
        )  # fmt: skip
        return model, history

    straight, history = run(tmp_path / "a")
    steps = history[-1]["step"]
    assert steps >= 8 and history[-1]["valid_loss"] < history[0]["valid_loss"]  # budgets of 160 tokens: many batches
    with pytest.raises(StopTraining):
        run(tmp_path / "b", stop_at(steps // 2 + 1))
    capsys.readouterr()
    resumed, history_b = run(tmp_path / "b")
    assert "resuming from" in capsys.readouterr().err
    a, b = straight.state_dict(), resumed.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert [r["valid_loss"] for r in history] == [r["valid_loss"] for r in history_b]

    kept = snapshots(tmp_path / "a")
    assert len(kept) == 3
    averaged, _ = load_model(
        write_average(tmp_path / "a", 3, tmp_path / "avg" / "model.pt"), "backbone_pointer_generator", "cpu",
        (tok.vocab, tok.vocab),
    )  # fmt: skip
    weights = [torch.load(p, weights_only=True)["model"] for p in kept]
    for key, value in averaged.state_dict().items():
        mean = sum(w[key].double() for w in weights) / 3
        assert torch.allclose(value.double(), mean, atol=1e-6, rtol=0), key
    hyps = greedy(averaged, piece_batch(tok, tgts=None), max_len=6)
    assert all(len(h.ids) > 0 for h in hyps)
