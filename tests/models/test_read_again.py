"""Read-Again + copy (Zeng et al. 2016, section 3) checked against hand computation.

Expected numbers are computed independently of models/read_again.py, per example and per
sentence, in float64, straight from the paper's equations with the model's weights read out:

  GRU read-again (3.1.1):  h_i^1 = GRU^1(x_i, h_{i-1}^1)                                  (eq. 2-3)
                           alpha_i = tanh(W_e h_i^1 + U_e h_n^1 + V_e x_i)                 (eq. 5)
                           h_i^2 = (1 - alpha_i) h_{i-1}^2 + alpha_i GRU^2(x_i, h_{i-1}^2) (eq. 4)
  LSTM read-again (3.1.2): h_i^2 = LSTM^2([x_i, h_i^1, h_n^1], h_{i-1}^2)                  (eq. 8)
  Several sentences (3.1.3): each sentence read on its own; Opt-1 feeds [h_n^1; h_m^1] (eq. 9),
      Opt-2 feeds [own h_n^1; h_global], h_global = tanh(W_r h_n^1 + U_r h_m^1 + v_r) (eq. 10-11)
  Decoder (3.2): beta = softmax(v_a^T tanh(W_a s_{t-1} + U_a h_i^2)) (eq. 14), c_t = sum beta h^2
      (eq. 13), s_t = LSTM([y_{t-1}, c_t], s_{t-1}) (eq. 12); y_{t-1} = word embedding if in Y,
      else p_i = tanh(W_c h_i^2 + b_c) at its (first) source position, else <unk> (eq. 15).
  Output: one normaliser over generate scores on Y and copy scores on source positions (the
      implicit gating of Gu et al. that section 2.3 says the decoder resembles; CopyNet eq. 4-8).

torch's GRU cells keep the gate 1 - z_i where the paper writes z_i; the hand formulas below use
the paper's z_i = 1 - sigmoid(.) on torch's weights.
"""

from __future__ import annotations

import math
import re

import pytest
import torch

from models.config import ModelConfig
from models.read_again import ReadAgainOptions, build_read_again
from pipeline.vocab.batching import collate
from pipeline.vocab.vocabulary import BOS, EOS, PAD, SPECIALS, UNK, Vocab
from tests.helpers import (
    assert_step_distributions_normalised,
    toy_copy_scores,
    toy_model,
)

SRC_WORDS = ["a", "b", "c", "d", "e", "f", "g", "."]  # encoder vocabulary
TGT_WORDS = ["a", "b", "c", "d", "e"]  # decoder vocabulary V = 9; f, g, zz, qq are OOV for it
SRC_VOCAB = Vocab(list(SPECIALS) + SRC_WORDS, [0] * 4 + [1] * len(SRC_WORDS))
TGT_VOCAB = Vocab(list(SPECIALS) + TGT_WORDS, [0] * 4 + [1] * len(TGT_WORDS))
V = len(TGT_VOCAB)
K_DEC = 7  # decoder vocabulary Y = the specials + a, b, c; d and e are in V but outside Y
# Two sentences with a repeated OOV (zz at 2 and 5: the first one gives p_i) and d (outside Y) in
# the source; one sentence ending in "."; three sentences (the third merges into slot 2 when K = 2).
SRCS = [
    ["a", "d", "zz", ".", "b", "zz"],
    ["c", "e", "."],
    ["b", "a", ".", "f", "c", ".", "g", "a"],
]
# Copied OOVs (zz, g, f), copied words outside Y (d, e), a word of Y also in the source (b), a word
# outside Y and not in the source (e in example 0: target <unk>, input <unk> embedding), qq -> <unk>.
TGTS = [
    ["zz", "d", "b", "e", "qq"],
    ["e", "a"],
    ["g", "f", "a"],
]
VARIANTS = [(cell, mode) for cell in ("gru", "lstm") for mode in ("single", "opt1", "opt2")]


def _batch(srcs=SRCS, tgts=TGTS):
    return collate(srcs, tgts, SRC_VOCAB, TGT_VOCAB)


def _model(**kw):
    return toy_model(build_read_again, SRC_VOCAB, TGT_VOCAB, **kw)


# ---------------------------------------------------------------------------------------------
# Options and sentence boundaries
# ---------------------------------------------------------------------------------------------
def test_options_parse_and_reject_unknown() -> None:
    opts = ReadAgainOptions(sentence_end=[".", "!"])
    assert opts.sentence_end == (".", "!") and opts.cell == "lstm" and opts.sentences == "single"
    cfg = ModelConfig(src_vocab=12, tgt_vocab=V, emb=4, hidden=3, options={"cells": "gru"})
    with pytest.raises(ValueError, match="cells"):
        build_read_again(cfg)
    # Each bad option with the message it raises (anchored: a ValueError for another reason fails).
    errors = [
        ({"cell": "rnn"}, "read_again cell 'rnn'; known: ('gru', 'lstm')"),
        ({"sentences": "opt3"}, "read_again sentences 'opt3'; known: ('single', 'opt1', 'opt2')"),
        ({"decoder": "rnn"}, "read_again decoder 'rnn'; known: ('gru', 'lstm')"),
        ({"decoder_vocab": 4}, "read_again decoder_vocab 4 must exceed the 4 specials"),
        ({"max_sentences": 0}, "read_again max_sentences must be >= 1"),
    ]
    for bad, message in errors:
        with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
            ReadAgainOptions(**bad)
    with pytest.raises(ValueError, match="own encoder"):
        build_read_again(ModelConfig(src_vocab=12, tgt_vocab=V, emb=4, hidden=3, encoder="transformer"))


def test_sentence_slots_from_end_tokens() -> None:
    batch = _batch()
    mask = batch.src != PAD
    enc2 = _model(sentences="opt1").encoder
    enc3 = _model(sentences="opt2", max_sentences=3).encoder
    single = _model().encoder
    sid2 = enc2.sentence_ids(batch, mask)
    assert sid2[0].tolist()[:6] == [0, 0, 0, 0, 1, 1]  # "." closes sentence 0
    assert sid2[1].tolist()[:3] == [0, 0, 0]
    assert sid2[2].tolist() == [0, 0, 0, 1, 1, 1, 1, 1]  # the third sentence is read within slot 2
    assert enc3.sentence_ids(batch, mask)[2].tolist() == [0, 0, 0, 1, 1, 1, 2, 2]
    assert single.sentence_ids(batch, mask).abs().sum().item() == 0


# ---------------------------------------------------------------------------------------------
# Encoder: float64 reference straight from the equations
# ---------------------------------------------------------------------------------------------
def _sig(x):
    return 1.0 / (1.0 + torch.exp(-x))


def _gru(x, h, w_ih, w_hh, b_ih, b_hh):
    """Standard GRU (eq. 3) in the paper's form: h = (1 - z) h + z h~, with z = 1 - torch's gate."""
    m = h.numel()
    gi, gh = w_ih @ x + b_ih, w_hh @ h + b_hh
    r = _sig(gi[:m] + gh[:m])
    z = 1.0 - _sig(gi[m : 2 * m] + gh[m : 2 * m])
    cand = torch.tanh(gi[2 * m :] + r * gh[2 * m :])
    return (1.0 - z) * h + z * cand


def _lstm(x, h, c, w_ih, w_hh, b_ih, b_hh):
    """eq. 7 (torch's gate order i, f, g, o)."""
    m = h.numel()
    a = w_ih @ x + b_ih + w_hh @ h + b_hh
    i, f, g, o = _sig(a[:m]), _sig(a[m : 2 * m]), torch.tanh(a[2 * m : 3 * m]), _sig(a[3 * m :])
    c = f * c + i * g
    return o * torch.tanh(c), c


def _p64(module, name):
    return getattr(module, name).detach().double()


def _read(rnn, xs, cell, suffix="_l0"):
    """One pass of a torch GRU/LSTM (its weights) over the list of inputs xs, from zero state."""
    w = [_p64(rnn, n + suffix) for n in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]
    m = w[1].size(1)
    h, c, out = torch.zeros(m, dtype=torch.float64), torch.zeros(m, dtype=torch.float64), []
    for x in xs:
        if cell == "gru":
            h = _gru(x, h, *w)
        else:
            h, c = _lstm(x, h, c, *w)
        out.append(h)
    return out


def _sentences(tokens: list[str], mode: str, k: int) -> list[list[int]]:
    """Positions of each sentence (3.1.3): a sentence ends at "."; sentences past the K-th join it."""
    if mode == "single":
        return [list(range(len(tokens)))]
    sents, cur = [], []
    for i, tok in enumerate(tokens):
        cur.append(i)
        if tok == ".":
            sents.append(cur)
            cur = []
    if cur:
        sents.append(cur)
    return sents[: k - 1] + [sum(sents[k - 1 :], [])] if len(sents) > k else sents


def _reference_encoder(enc, xs, tokens, cell, mode, k):
    """Memory (n, M) and summary (M,) of one example, float64, per sentence."""
    sents = _sentences(tokens, mode, k)
    m = enc.out_dim
    h1 = {}
    vecs = []
    for pos in sents:  # first read: each sentence on its own (3.1.3)
        out = _read(enc.rnn1, [xs[i] for i in pos], cell)
        h1.update(zip(pos, out))
        vecs.append(out[-1])  # h_n^1 of this sentence
    slots = vecs + [torch.zeros(m, dtype=torch.float64)] * (k - len(vecs)) if mode != "single" else vecs
    memory, last = [None] * len(tokens), None
    for s, pos in enumerate(sents):
        if mode == "single":
            g = vecs[0]  # h_n^1
        elif mode == "opt1":
            g = torch.cat(slots)  # [h_n^1; h_m^1] (eq. 9)
        else:
            w_r, v_r = _p64(enc.w_global, "weight"), _p64(enc.w_global, "bias")  # [W_r U_r], v_r
            h_global = torch.tanh(w_r @ torch.cat(slots) + v_r)  # eq. 10
            g = torch.cat([vecs[s], h_global])  # eq. 11
        if cell == "gru":
            w = [_p64(enc.rnn2, n) for n in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]
            h = torch.zeros(m, dtype=torch.float64)  # h_0^2 = 0 per sentence (eq. 9)
            for i in pos:
                alpha = torch.tanh(
                    _p64(enc.w_e, "weight") @ h1[i] + _p64(enc.u_e, "weight") @ g + _p64(enc.v_e, "weight") @ xs[i]
                )  # eq. 5
                h = (1.0 - alpha) * h + alpha * _gru(xs[i], h, *w)  # eq. 4
                memory[i] = h
        else:
            out = _read(enc.rnn2, [torch.cat([xs[i], h1[i], g]) for i in pos], "lstm")  # eq. 8 / 9 / 11
            for i, h in zip(pos, out):
                memory[i] = h
        last = memory[pos[-1]]
    return torch.stack(memory), last


@pytest.mark.parametrize("cell,mode", VARIANTS)
def test_encoder_matches_equations_per_sentence(cell: str, mode: str) -> None:
    model = _model(seed=1, cell=cell, sentences=mode)
    batch = _batch()
    with torch.no_grad():
        embedded = model.src_emb(batch.src)  # (B, S, E)
        memory, summary = model.encoder(embedded, batch.src_len, batch)
    assert memory.shape == (3, 8, 10) and summary.shape == (3, 10)
    for b, tokens in enumerate(SRCS):
        n = len(tokens)
        xs = list(embedded[b, :n].double())
        want_mem, want_sum = _reference_encoder(model.encoder, xs, tokens, cell, mode, k=2)
        assert torch.allclose(memory[b, :n].double(), want_mem, atol=1e-5), (b, (memory[b, :n] - want_mem).abs().max())
        assert torch.allclose(summary[b].double(), want_sum, atol=1e-5), b
        assert memory[b, n:].abs().sum().item() == 0.0  # padding is zero
    # Padding never reaches real positions: each example alone gives the same memory.
    with torch.no_grad():
        alone = collate([SRCS[1]], [TGTS[1]], SRC_VOCAB, TGT_VOCAB)
        mem1, sum1 = model.encoder(model.src_emb(alone.src), alone.src_len, alone)
    assert torch.allclose(mem1[0], memory[1, :3], atol=1e-6) and torch.allclose(sum1[0], summary[1], atol=1e-6)


def test_gru_read_again_with_alpha_one_is_a_plain_gru_second_pass() -> None:
    """alpha_i = 1 in eq. 4 leaves GRU^2 alone: the memory is a torch nn.GRU with GRU^2's weights."""
    model = _model(seed=2, cell="gru")
    enc = model.encoder
    enc.importance = lambda h1, g, x: torch.ones_like(h1)  # alpha fixed to 1
    plain = torch.nn.GRU(6, 10, batch_first=True)
    with torch.no_grad():
        for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
            getattr(plain, name + "_l0").copy_(getattr(enc.rnn2, name))
    batch = _batch()
    with torch.no_grad():
        embedded = model.src_emb(batch.src)
        memory, summary = enc(embedded, batch.src_len, batch)
        for b, tokens in enumerate(SRCS):
            n = len(tokens)
            out, h_n = plain(embedded[b : b + 1, :n])  # unpadded, one example
            assert torch.allclose(memory[b, :n], out[0], atol=1e-6), b
            assert torch.allclose(summary[b], h_n[0, 0], atol=1e-6), b
    # And alpha is not 1 in the real model: the second read differs from the plain GRU.
    real = _model(seed=2, cell="gru")
    with torch.no_grad():
        mem_real, _ = real.encoder(embedded, batch.src_len, batch)
    assert (mem_real - memory).abs().max().item() > 1e-2


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_one_sentence_opt1_opt2_reduce_to_single(cell: str) -> None:
    """With one sentence, Opt-1's g = [h_n^1; 0] and the single model is Opt-1 with the extra
    columns unused; Opt-2 with its h_global columns at zero is the single model too."""
    single = _model(seed=3, cell=cell)
    srcs, tgts = [["a", "b", "c", "."], ["d", "a"]], [["a"], ["b"]]
    batch = _batch(srcs, tgts)
    with torch.no_grad():
        emb = single.src_emb(batch.src)
        want_mem, want_sum = single.encoder(emb, batch.src_len, batch)
    m = single.encoder.out_dim
    for mode in ("opt1", "opt2"):
        multi = _model(seed=4, cell=cell, sentences=mode).encoder
        with torch.no_grad():
            for name, p in single.encoder.named_parameters():
                q = multi.get_parameter(name)
                if q.shape == p.shape:
                    q.copy_(p)
                else:  # the input columns of g: h_n^1 first, then the second slot / h_global
                    if mode == "opt2":
                        q.zero_()
                    q[:, : p.size(1)].copy_(p)
            got_mem, got_sum = multi(emb, batch.src_len, batch)
        assert torch.allclose(got_mem, want_mem, atol=1e-6), mode
        assert torch.allclose(got_sum, want_sum, atol=1e-6), mode
        assert got_mem.size(-1) == m


# ---------------------------------------------------------------------------------------------
# Decoder: eq. 12-15 and the copy distribution, step by step in float64
# ---------------------------------------------------------------------------------------------
def _hand_input(model, state, b: int, prev: int):
    """eq. 15 for example b: embedding if prev in Y, p_i at its first source position if in the
    source, else the <unk> embedding."""
    emb = model.tgt_emb.weight.detach().double()
    if prev < K_DEC:
        return emb[prev], "word"
    src = state["src_ext"][b].tolist()
    n = int(state["src_mask"][b].sum())
    if prev in src[:n]:
        i = src.index(prev)  # first occurrence
        h = state["memory"][b, i].double()
        return torch.tanh(_p64(model.output.w_c, "weight") @ h + _p64(model.output.w_c, "bias")), "p"
    return emb[UNK], "unk"


@pytest.mark.parametrize("cell,mode", [("lstm", "single"), ("gru", "opt2")])
def test_decoder_steps_and_likelihood_by_hand(cell: str, mode: str) -> None:
    model = _model(seed=5, cell=cell, sentences=mode, decoder_vocab=K_DEC)
    batch = _batch()
    dec, out = model.decoder, model.output
    att = dec.attention
    w_o = _p64(out.w_o, "weight")  # (K, H)
    w_copy = _p64(out.w_copy, "weight")  # (H, M)
    lstm_w = [_p64(dec.cell, n) for n in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]
    emit = [y for y in range(K_DEC) if y not in (PAD, BOS)]  # Y minus what is never emitted
    paths = set()
    total = [0.0, 0.0, 0.0]
    steps = assert_step_distributions_normalised(model, batch, atol=1e-5)
    with torch.no_grad():
        gold = model(batch)  # (B, T)
        for t, (log_probs, state, before) in enumerate(steps):
            p_all = log_probs.double().exp()
            for b in range(3):
                n = int(batch.src_len[b])
                mem = before["memory"][b, :n].double()  # (n, M)
                x, path = _hand_input(model, before, b, int(batch.tgt_in[b, t]))
                paths.add(path)
                s_prev, c_prev = before["s"][b].double(), before["cell"][b].double()
                o = (
                    torch.tanh(
                        (_p64(att.query, "weight") @ s_prev).unsqueeze(0)
                        + mem @ _p64(att.key, "weight").T
                        + _p64(att.key, "bias")
                    )
                    @ _p64(att.v, "weight")[0]
                )  # eq. 14, (n,)
                beta = torch.softmax(o, dim=0)
                ctx = beta @ mem  # eq. 13
                s_t, _ = _lstm(torch.cat([x, ctx]), s_prev, c_prev, *lstm_w)  # eq. 12
                assert torch.allclose(state["s"][b].double(), s_t, atol=1e-5), (t, b)
                assert torch.allclose(state["attn"][b, :n].double(), beta, atol=1e-6)
                psi_g = (w_o @ s_t).tolist()
                psi_c = [float(torch.tanh(w_copy @ mem[j]) @ s_t) for j in range(n)]
                z = sum(math.exp(psi_g[y]) for y in emit) + sum(math.exp(c) for c in psi_c)
                src = batch.src_ext[b, :n].tolist()
                for y in range(V + batch.n_ext):
                    p_gen = math.exp(psi_g[y]) / z if y in emit else 0.0  # generate only over Y
                    p_copy = sum(math.exp(psi_c[j]) for j in range(n) if src[j] == y) / z
                    assert p_all[b, y].item() == pytest.approx(p_gen + p_copy, abs=1e-6), (t, b, y)
                # The gold: a word outside Y and not in the source can only be <unk>.
                y = int(batch.tgt_out[b, t])
                if y == PAD:
                    continue
                if y >= K_DEC and y not in src:
                    y = UNK
                total[b] += math.log(p_all[b, y].item())
                assert gold[b, t].item() == pytest.approx(math.log(p_all[b, y].item()), abs=1e-5)
            # "e" is outside Y and not in source 0: never generated, not copyable there.
            assert p_all[0, TGT_VOCAB.stoi["e"]].item() < 1e-30
    assert paths == {"word", "p", "unk"}  # every branch of eq. 15 was exercised
    assert gold.sum(1).double().tolist() == pytest.approx(total, abs=1e-4)


def test_oov_embedding_path_eq_15() -> None:
    """The decoder input for y_{t-1} outside Y: p_i = tanh(W_c h_i^2 + b_c) at its first source
    position when it is in the source (OOV or in V outside Y), the word embedding for a word of Y
    even when it is in the source and copied, the <unk> embedding otherwise."""
    model = _model(seed=6, decoder_vocab=K_DEC)
    batch = _batch()
    out = model.output
    assert batch.oovs == [["zz", "."], ["."], [".", "f", "g"]]  # "." is outside V too
    zz, g_, d, b_, e = V, V + 2, TGT_VOCAB.stoi["d"], TGT_VOCAB.stoi["b"], TGT_VOCAB.stoi["e"]
    with torch.no_grad():
        state = model.encode(batch)
        p = torch.tanh(state["memory"] @ out.w_c.weight.T + out.w_c.bias)  # (B, S, E)

        def fed(prev):
            prev = torch.tensor(prev)
            in_vocab = prev.masked_fill(prev >= V, UNK)
            return out.embed_input(state, prev, model.tgt_emb(in_vocab))

        emb = model.tgt_emb.weight
        # Example 0: zz (OOV, positions 2 and 5 -> the first), d (in V, outside Y, position 1);
        # example 1: e (outside Y, position 1); example 2: g (OOV id V+2 there, position 6).
        x = fed([zz, e, g_])
        assert torch.allclose(x[0], p[0, 2], atol=1e-7) and not torch.allclose(x[0], p[0, 5], atol=1e-3)
        assert torch.allclose(x[1], p[1, 1], atol=1e-7)
        assert torch.allclose(x[2], p[2, 6], atol=1e-7)
        x = fed([d, b_, EOS])
        assert torch.allclose(x[0], p[0, 1], atol=1e-7)
        assert torch.allclose(x[1], emb[b_]) and torch.allclose(x[2], emb[EOS])  # b in Y: embedding
        x = fed([b_, e, UNK])  # b is in source 0 and copyable, still in Y -> its embedding
        assert torch.allclose(x[0], emb[b_])
        assert torch.allclose(x[1], p[1, 1])
        assert torch.allclose(x[2], emb[UNK])
        x = fed([e, d, d])  # e not in source 0, d in none of sources 1 and 2 -> <unk> embedding
        assert all(torch.allclose(x[i], emb[UNK]) for i in range(3))
        # The decoder really reads it: feeding zz differs from feeding <unk>.
        _, st = model.step(state, torch.tensor([BOS, BOS, BOS]))
        _, s_oov = model.step(st, torch.tensor([zz, e, g_]))
        _, s_unk = model.step(st, torch.tensor([UNK, UNK, UNK]))
    assert (s_oov["s"] - s_unk["s"]).abs().amax(dim=1).min().item() > 1e-3  # every row
    assert model.tgt_emb.num_embeddings == K_DEC  # learnable embeddings for Y only (3.2)


# ---------------------------------------------------------------------------------------------
# Gradients, search, learning
# ---------------------------------------------------------------------------------------------


def test_learns_to_copy_unseen_fillers() -> None:
    seen, unseen = toy_copy_scores("read_again (lstm)", "read_again", build_read_again)  # LSTM, single sentence
    assert seen >= 0.9
    assert unseen >= 0.9
