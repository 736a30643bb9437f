"""The transformer decoder (``model.decoder: transformer``, models/transformer_decoder.py) and the
encoder size apart from the decoder's (``model.encoder_hidden``).

The mechanism contract (tests/models/test_contract.py) runs every variant of every mechanism that
accepts the transformer decoder on it too (cases ``<name>-tf<i>``). This file adds what is the
decoder's own: the whole-target pass equals the cached steps for every output layer (log-likelihoods
and gradients, float64, 1e-9), the cache reorders under beam search (beam = brute force), dropout is
off in eval mode, the refusals and size errors, and that a default configuration builds exactly the
model it built before these settings existed. The learning test (CopyNet and the pointer-generator
copy unseen strings on this decoder) is in tests/models/test_learning.py's style, below.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from models.config import ModelConfig
from models.registry import DECLARED, build_model, model_config, runs_on_backbone
from models.transformer_decoder import TransformerDecoder
from tests.helpers import (
    CONTRACT_SRC_VOCAB,
    CONTRACT_TGT_VOCAB,
    SEARCH_SRC_VOCAB,
    SEARCH_TGT_VOCAB,
    SEEN,
    TRANSFORMER_DECODER,
    UNSEEN,
    check_beam_equals_brute_force,
    check_distributions,
    check_two_phase,
    contract_batch,
    exact_match,
    gold_and_grads,
    toy_model,
    train_toy,
)

ON_TRANSFORMER = sorted(name for name, m in DECLARED.items() if "transformer" in m.decoders)
# The mechanisms built on the project's own encoder and decoder (a pretrained backbone brings its own:
# tests/models/test_backbone.py).
OWN_SKELETON = sorted(name for name in DECLARED if not runs_on_backbone(name))
TF = {k: v for k, v in TRANSFORMER_DECODER.items() if k not in ("hidden",)}  # decoder, heads, encoder size


def _model(name: str, dtype=torch.float64, seed: int = 3, **config):
    sizes = {**TRANSFORMER_DECODER, **config}
    return toy_model(name, CONTRACT_SRC_VOCAB, CONTRACT_TGT_VOCAB, seed=seed, scale=1.5, config=sizes).to(dtype=dtype)


def test_every_mechanism_but_read_again_accepts_the_transformer_decoder() -> None:
    assert ON_TRANSFORMER == sorted(set(OWN_SKELETON) - {"read_again"})
    for name in ON_TRANSFORMER:
        assert isinstance(_model(name).decoder, TransformerDecoder), name


@pytest.mark.device
@pytest.mark.parametrize("training", [False, True], ids=["eval", "train"])
@pytest.mark.parametrize("name", ON_TRANSFORMER)
def test_whole_target_equals_cached_steps(name: str, training: bool, device) -> None:
    """Teacher forcing (one pass over the target, CopyNet's selective read step by step) against
    ``step`` with the per-layer key/value cache: log-likelihoods, training objectives and every
    gradient agree to 1e-9 in float64 (dropout 0; training mode takes the train-time code paths)."""
    model = _model(name).to(device).train(training)
    batch = contract_batch(model.output.reads_pointers, device)
    for objective in (False, True):
        whole, grads = gold_and_grads(model, batch, objective, stepwise=False)
        steps, grads_ref = gold_and_grads(model, batch, objective, stepwise=True)
        assert whole.dtype == torch.float64
        assert torch.allclose(whole, steps, rtol=0, atol=1e-9), (whole - steps).abs().max()
        assert grads.keys() == grads_ref.keys() and any(k.startswith("decoder.layers.1.") for k in grads)
        for key, grad in grads.items():
            assert torch.allclose(grad, grads_ref[key], rtol=0, atol=1e-9), key


@pytest.mark.parametrize("name", ON_TRANSFORMER)
def test_teacher_forcing_is_one_pass_except_copynet_selective_read(name: str, monkeypatch) -> None:
    """Every output layer but CopyNet's runs the decoder once over the whole target; CopyNet feeds
    step t-1's copy scores into step t (eq. 9), so its teacher forcing steps through the cache."""
    model = _model(name)
    batch = contract_batch(False, "cpu")
    calls = {"step": 0, "sequence": 0}
    step, sequence = model.decoder.forward, model.decoder.forward_sequence

    def count_step(*args):
        calls["step"] += 1
        return step(*args)

    def count_sequence(*args):
        calls["sequence"] += 1
        return sequence(*args)

    monkeypatch.setattr(model.decoder, "forward", count_step)
    monkeypatch.setattr(model.decoder, "forward_sequence", count_sequence)
    model(batch)
    if name == "copynet":
        assert calls == {"step": batch.tgt_in.size(1), "sequence": 0}
    else:
        assert calls == {"step": 0, "sequence": 1}


@pytest.mark.parametrize("coverage", [False, True], ids=["plain", "coverage"])
@pytest.mark.parametrize("attention", [True, False], ids=["attention", "encdec"])
def test_decoder_pass_equals_its_cached_steps(attention: bool, coverage: bool) -> None:
    """The decoder alone: s_t, c_t, a_t and the coverage c^t of the one pass equal the cached steps'
    (float64, 1e-12); the cache grows by one position per step, batch-first; the alignment head's
    a_t is a distribution over the real source positions; c_t = sum_j a_tj h_j."""
    if coverage and not attention:
        with pytest.raises(ValueError, match="coverage needs the attention"):
            TransformerDecoder(5, 6, 8, 2, 2, 12, 0.0, attention, coverage)
        return
    torch.manual_seed(0)
    dec = TransformerDecoder(5, 6, 8, 3, 2, 12, 0.0, attention, coverage).double().eval()
    if coverage:
        torch.nn.init.constant_(dec.coverage_weight, -0.7)
    b, s, t = 3, 7, 6
    memory, summary = torch.randn(b, s, 8, dtype=torch.float64), torch.randn(b, 8, dtype=torch.float64)
    mask = torch.arange(s).unsqueeze(0) < torch.tensor([[7], [4], [1]])  # (B, S)
    memory = memory.masked_fill(~mask.unsqueeze(-1), 0.0)
    x = torch.randn(b, t, 5, dtype=torch.float64)
    state = {"memory": memory, "src_mask": mask, **dec.init_state(memory, summary, mask)}
    s_all, c_all, a_all, more = dec.forward_sequence(state, x)
    for step in range(t):
        s_t, c_t, a_t, updates = dec(state, x[:, step])
        assert torch.allclose(s_t, s_all[:, step], rtol=0, atol=1e-12)
        assert torch.allclose(c_t, c_all[:, step], rtol=0, atol=1e-12)
        if attention:
            assert torch.allclose(a_t, a_all[:, step], rtol=0, atol=1e-12)
            assert torch.allclose(a_t.sum(-1), torch.ones(b, dtype=torch.float64))
            assert (a_t[~mask] == 0).all()
            assert torch.allclose(c_t, torch.bmm(a_t.unsqueeze(1), memory).squeeze(1))
        else:
            assert a_t is None and a_all is None and torch.equal(c_t, summary)
        if coverage:
            assert torch.allclose(state["coverage"], more["coverage"][:, step], rtol=0, atol=1e-12)
            assert torch.allclose(updates["coverage"], state["coverage"] + a_t, rtol=0, atol=1e-15)
        assert updates["tf_self_k0"].shape == (b, 2, step + 1, 3)
        state = {**state, **updates}


@pytest.mark.device
@pytest.mark.parametrize("name", ON_TRANSFORMER)
def test_beam_search_equals_brute_force_on_the_transformer_decoder(name: str, device) -> None:
    """The cached keys and values reorder with their hypotheses (batch-first, dim 0); the cross-
    attention's stay (static): beam search as wide as the search space equals enumeration."""
    model = toy_model(name, SEARCH_SRC_VOCAB, SEARCH_TGT_VOCAB, seed=0, scale=3.0, emb=8, hidden=16, config=TF).to(
        device
    )
    assert {k for k in model.static_state_keys if k.startswith("tf_mem")}
    check_beam_equals_brute_force(model, device)


@pytest.mark.parametrize("name", ["copynet", "pointer_generator", "encdec"])
def test_dropout_is_off_in_eval_mode(name: str) -> None:
    model = _model(name, dropout=0.3)
    batch = contract_batch(False, "cpu")
    with torch.no_grad():
        assert torch.equal(model.eval()(batch), model(batch))
        torch.manual_seed(1)
        first = model.train()(batch)
        assert not torch.equal(first, model(batch))  # it is on in training mode


def test_read_again_refuses_the_transformer_decoder() -> None:
    with pytest.raises(ValueError, match="read_again has its own decoder"):
        build_model("read_again", ModelConfig(src_vocab=12, tgt_vocab=10, emb=4, hidden=4, decoder="transformer"))
    with pytest.raises(ValueError, match="not available for read_again"):
        model_config({"emb": 4, "hidden": 4, "decoder": "transformer"}, "read_again", src_vocab=12, tgt_vocab=10)


def test_decoder_settings_in_the_model_section() -> None:
    """``model.decoder`` is shared (a mechanism's section may override it); Read-Again's own
    ``model.read_again.decoder`` (lstm | gru) stays its option."""
    section = {
        "emb": 4,
        "hidden": 8,
        "decoder": "transformer",
        "decoder_heads": 2,
        "encoder_hidden": 3,
        "copynet": {"decoder": "recurrent"},
        "read_again": {"decoder": "gru"},
    }
    cfg = model_config(section, "wean", src_vocab=12, tgt_vocab=10)
    assert (cfg.decoder, cfg.decoder_heads, cfg.memory, cfg.options) == ("transformer", 2, 6, {})
    assert model_config(section, "copynet", src_vocab=12, tgt_vocab=10).decoder == "recurrent"
    own = model_config({**section, "decoder": "recurrent"}, "read_again", src_vocab=12, tgt_vocab=10)
    assert own.decoder == "recurrent" and own.options == {"decoder": "gru"}
    with pytest.raises(ValueError, match="read_again decoder 'tranformer'"):
        model_config({**section, "read_again": {"decoder": "tranformer"}}, "wean", src_vocab=12, tgt_vocab=10)


@pytest.mark.parametrize(
    "bad,match",
    [
        ({"decoder": "gru"}, "unknown model.decoder 'gru'"),
        ({"encoder": "lstm"}, "unknown encoder 'lstm'"),
        ({"decoder": "transformer", "decoder_heads": 3}, "decoder_heads 3 must divide .* hidden = 8"),
        ({"decoder_layers": 0}, "decoder_layers must be a positive integer"),
        ({"encoder_hidden": 0}, "encoder_hidden must be a positive integer or null"),
        ({"decoder_ff": -4}, "decoder_ff must be a positive integer or null"),
        ({"dropout": 1.0}, r"dropout must be in \[0, 1\)"),
    ],
)
def test_unknown_or_inconsistent_sizes_are_errors(bad: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ModelConfig(src_vocab=12, tgt_vocab=10, emb=4, hidden=8, **bad)


def test_encoder_heads_must_divide_the_memory_size() -> None:
    cfg = ModelConfig(src_vocab=12, tgt_vocab=10, emb=4, hidden=8, encoder="transformer", encoder_hidden=3)
    with pytest.raises(ValueError, match=r"transformer_heads 4 must divide .* 2 \* encoder_hidden = 6"):
        build_model("copynet", cfg)


# Every mechanism on its own skeleton with either encoder, but Read-Again on the transformer encoder:
# it has its own (the refusal is tests/models/test_read_again.py::test_options_parse_and_reject_unknown).
ENCODER_CASES = [
    (name, encoder)
    for encoder in ("bigru", "transformer")
    for name in OWN_SKELETON
    if not (name == "read_again" and encoder == "transformer")
]


@pytest.mark.parametrize("name,encoder", ENCODER_CASES, ids=[f"{e}-{n}" for n, e in ENCODER_CASES])
def test_encoder_size_apart_from_the_decoder(name: str, encoder: str) -> None:
    """OpenNMT-py's brnn shape (an encoder of half the decoder's size per direction, memory = decoder
    size) and the opposite, on the recurrent decoders: the memory has 2 * encoder_hidden entries and
    every bridge, attention and output layer reads it; each mechanism still meets the contract."""
    for hidden, encoder_hidden in ((6, 3), (4, 5)):
        config = {"encoder": encoder, "transformer_heads": 2, "hidden": hidden, "encoder_hidden": encoder_hidden}
        model = toy_model(name, CONTRACT_SRC_VOCAB, CONTRACT_TGT_VOCAB, seed=3, scale=1.5, config=config).double()
        assert model.encoder.out_dim == model.cfg.memory == 2 * encoder_hidden
        assert model.decoder.out_dim == hidden and model.decoder.context_dim == 2 * encoder_hidden
        batch = contract_batch(False, "cpu")
        state = model.encode(batch)
        assert state["memory"].shape[-1] == 2 * encoder_hidden
        check_distributions(model, batch)
        check_two_phase(model, batch, False)


@pytest.mark.parametrize("name", OWN_SKELETON)
def test_default_sizes_build_the_same_model_as_before(name: str) -> None:
    """The new settings at their defaults change nothing: the same parameter names, shapes and (same
    seed) values as a configuration that spells them out, and no transformer decoder."""
    base = {"src_vocab": 12, "tgt_vocab": 10, "emb": 4, "hidden": 6}
    torch.manual_seed(0)
    default = build_model(name, ModelConfig(**base))
    torch.manual_seed(0)
    explicit = build_model(
        name, ModelConfig(**base, decoder="recurrent", encoder_hidden=6, decoder_layers=3, decoder_heads=5)
    )
    assert not isinstance(default.decoder, TransformerDecoder)
    a, b = default.state_dict(), explicit.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert not any("tf_" in k or "self_attn" in k for k in a)


@pytest.fixture(scope="module")
def trained_on_transformer():
    def builder(name):
        def build(cfg):
            return build_model(name, replace(cfg, decoder="transformer", decoder_heads=4))

        return build

    return {name: train_toy(name, builder(name)) for name in ("copynet", "pointer_generator")}


@pytest.mark.parametrize("name", ["copynet", "pointer_generator"])
def test_copies_unseen_strings_on_the_transformer_decoder(trained_on_transformer, name: str) -> None:
    """tests/models/test_learning.py's toy task (``a X b -> b X``, test fillers in no vocabulary) on
    the transformer decoder: the copy mechanism reproduces strings it never saw."""
    model = trained_on_transformer[name]
    assert isinstance(model.decoder, TransformerDecoder)
    seen, unseen = exact_match(model, SEEN, seed=1), exact_match(model, UNSEEN, seed=2)
    print(f"{name} on the transformer decoder: exact match seen {seen:.2f}, unseen {unseen:.2f}")
    assert seen >= 0.9
    assert unseen >= 0.9
