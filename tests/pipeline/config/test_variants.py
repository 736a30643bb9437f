"""Variants (params.yaml ``variants``): a mechanism under other settings as a row of its own, resolved
in one place (pipeline.config.variants), merged by effective_params, built by the train job and
recorded in model.pt so that loading needs no params."""

from __future__ import annotations

import copy
import re

import pytest
import yaml

from models.registry import DISPLAY_NAMES, MECHANISMS, runs_on_backbone
from pipeline.config.paths import TaskPaths
from pipeline.config.tasks import effective_params
from pipeline.config.variants import Variant, check_variants, display_names, resolve
from pipeline.data.corpora.copynet_rules import SCHEMA, RulesConfig, generate_examples
from pipeline.training.checkpoints import CheckpointError, load_file, load_model
from pipeline.training.job import TrainJob
from tests.helpers import REPO, encoded_task


def _params(**variants) -> dict:
    params = {
        "mechanisms": ["copynet", "copynet_tf"],
        "model": {"emb": 8, "hidden": 12, "decoder": "recurrent", "decoder_layers": 2, "decoder_heads": 4},
        "train": {"epochs": 10, "lr": 0.002},
        "evaluate": {"beam_size": 10},
        "variants": variants or {"copynet_tf": {"mechanism": "copynet", "model": {"decoder": "transformer"}}},
        "task_settings": {},
    }
    return params


def test_a_plain_mechanism_is_its_own_base():
    assert resolve(_params(), "copynet") == Variant("copynet", "copynet")
    assert resolve({}, "rnnsearch", known=MECHANISMS) == Variant("rnnsearch", "rnnsearch")
    assert not resolve(_params(), "copynet").is_variant


def test_a_variant_resolves_to_its_base_and_overrides():
    params = _params(
        copynet_tf={"mechanism": "copynet", "display": "CopyNet (TF)", "model": {"decoder": "transformer"}}
    )
    v = resolve(params, "copynet_tf", known=MECHANISMS)
    assert (v.name, v.mechanism, v.display, v.overrides) == (
        "copynet_tf",
        "copynet",
        "CopyNet (TF)",
        {"model": {"decoder": "transformer"}},
    )
    assert v.is_variant


def test_effective_params_merge_base_then_variant_then_its_own_entries():
    """shared < task < base's entry < the variant's sections < the variant's entry (and presets' the same)."""
    params = _params(
        copynet_tf={"mechanism": "copynet", "model": {"decoder": "transformer"}, "train": {"lr": 0.001, "epochs": 7}}
    )
    params["task_settings"]["t"] = {
        "train": {"lr": 0.005},
        "mechanisms": {"copynet": {"train": {"epochs": 13, "clip": 1.0}}, "copynet_tf": {"train": {"epochs": 4}}},
    }
    base = effective_params(params, "t", "copynet")
    assert (base["model"]["decoder"], base["train"]) == ("recurrent", {"epochs": 13, "lr": 0.005, "clip": 1.0})
    tf = effective_params(params, "t", "copynet_tf")
    assert tf["model"]["decoder"] == "transformer" and tf["model"]["hidden"] == 12
    assert tf["train"] == {"epochs": 4, "lr": 0.001, "clip": 1.0}  # its entry, its section, the base's entry
    # without the task's per-mechanism entries (scripts/convergence.py): the variant's own sections only
    bare = effective_params(params, "t", "copynet_tf", task_overrides=False)
    assert (bare["model"]["decoder"], bare["train"]) == ("transformer", {"epochs": 7, "lr": 0.001})
    # the task's own sections (no mechanism) see no variant
    assert effective_params(params, "t")["model"]["decoder"] == "recurrent"


@pytest.mark.parametrize(
    ("variants", "message"),
    [
        ({"copynet": {"mechanism": "rnnsearch"}}, r"variant 'copynet' has the name of a mechanism"),
        ({"x_tf": {"mechanism": "copynett"}}, r"variants.x_tf.mechanism 'copynett' is not a mechanism; mechanisms: "),
        (
            {"a": {"mechanism": "copynet"}, "b": {"mechanism": "a"}},
            r"variants.b.mechanism 'a' is another variant \(a variant's base must be a mechanism\)",
        ),
        ({"x_tf": {"model": {"decoder": "transformer"}}}, r"variants.x_tf needs 'mechanism: <the base mechanism>'"),
        ({"x_tf": {"mechanism": "copynet", "vocab": {}}}, r"variants.x_tf has unknown keys \['vocab'\]"),
        ({"x_tf": {"mechanism": "copynet", "model": "transformer"}}, r"variants.x_tf.model must be a mapping"),
        ({"x_tf": "copynet"}, r"variants.x_tf must be a mapping with 'mechanism'"),
    ],
)
def test_a_bad_variant_is_a_clear_error(variants, message):
    params = _params(**variants)
    with pytest.raises(ValueError, match=message):
        check_variants(params, MECHANISMS)
    with pytest.raises(ValueError, match=message):
        resolve(params, next(iter(variants)), known=MECHANISMS)


def test_an_unknown_row_name_names_mechanisms_and_variants():
    with pytest.raises(ValueError, match=r"unknown mechanism 'copynett': neither a mechanism \(.*copynet.*\) nor a "):
        resolve(_params(), "copynett", known=MECHANISMS)


def test_display_names_are_the_variants_own_or_the_base_s_with_the_name():
    params = _params(
        a={"mechanism": "copynet", "display": "CopyNet (Transformer decoder)"}, b={"mechanism": "pointer_generator"}
    )
    assert display_names(params, DISPLAY_NAMES) == {
        "a": "CopyNet (Transformer decoder)",
        "b": "Pointer-generator + coverage (b)",
    }


def test_params_yaml_variants_are_valid_and_listed():
    """The declared variants: well formed; the Transformer-decoder ones with their own (converged)
    epochs, out of the default run (time) but on params.yaml's commented line that adds them; the
    pretrained-backbone ones (docs/pretrained.md): every head
    and the backbone alone on each family (BART, T5, Marian), not in the default run, and the real
    backbones with a fine-tuning recipe under the paper presets of Gigaword, LCSTS and Europarl."""
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    check_variants(params, MECHANISMS)
    names = display_names(params, DISPLAY_NAMES)
    backbone_rows = {n for n in names if runs_on_backbone(resolve(params, n).mechanism)}
    transformer = {n: v for n, v in names.items() if n not in backbone_rows}
    assert transformer == {
        "copynet_transformer": "CopyNet (Transformer decoder)",
        "pointer_generator_transformer": "Pointer-generator + coverage (Transformer decoder)",
    }
    assert not (set(transformer) | backbone_rows) & set(params["mechanisms"])
    added = re.search(r"^# (mechanisms: \[[^\]]*\])", (REPO / "params.yaml").read_text(), re.M | re.S)
    assert added, "params.yaml: the commented `mechanisms:` line that adds the Transformer-decoder rows"
    commented = yaml.safe_load(re.sub(r"\n#\s*", " ", added.group(1)))["mechanisms"]
    assert commented == [*params["mechanisms"], *transformer]
    alone = {
        params["variants"][n]["model"]["backbone"]
        for n in backbone_rows
        if resolve(params, n).mechanism == "backbone_lm"
    }
    heads = {resolve(params, n).mechanism for n in backbone_rows} - {"backbone_lm"}
    assert heads == {"backbone_copynet", "backbone_pointer_generator", "backbone_pointer_softmax"}
    assert {
        params["variants"][n]["model"]["backbone"] for n in backbone_rows
    } == alone  # each beside the backbone alone
    kinds = {params["variants"][n]["model"]["backbone"].rsplit("_", 1)[-1] for n in backbone_rows}
    assert {(resolve(params, n).mechanism, params["variants"][n]["model"]["backbone"]) for n in backbone_rows} == {
        (m, f"data/backbones/tiny_{k}") for m in [*heads, "backbone_lm"] for k in kinds
    } and kinds == {"bart", "t5", "marian"}  # every head and the backbone alone on each family
    # the paper presets fine-tune the real backbones: BART on Gigaword, mT5 on LCSTS, opus-mt on Europarl
    paper = {**params, "preset": "paper"}
    real = {
        "gigaword": ("bart", "facebook/bart-base"),
        "lcsts_char": ("t5", "google/mt5-small"),
        "europarl_en_fr": ("marian", "Helsinki-NLP/opus-mt-en-fr"),
    }
    for task, (kind, backbone) in real.items():
        rows = [n for n in backbone_rows if params["variants"][n]["model"]["backbone"] == f"data/backbones/tiny_{kind}"]
        assert len(rows) == 4, (task, rows)
        for name in rows:
            eff = effective_params(paper, task, name)
            assert eff["model"]["backbone"] == backbone and eff["train"]["lr"] == 3.0e-5, (task, name)
            assert effective_params(params, task, name)["model"]["backbone"] == f"data/backbones/tiny_{kind}"  # cpu
            base = resolve(params, name).mechanism
            if base != "backbone_lm":
                assert eff["model"][base]["head_lr"] == 0.001
    for name in transformer:
        eff = effective_params(params, "copy_rules", name)
        assert eff["model"]["decoder"] == "transformer"
        assert eff["train"]["epochs"] == params["task_settings"]["copy_rules"]["mechanisms"][name]["train"]["epochs"]
    assert effective_params(params, "copy_rules", "copynet")["model"]["decoder"] == "recurrent"


@pytest.fixture(scope="module")
def variant_run(tmp_path_factory):
    """copynet_tf (copynet on the Transformer decoder) trained one epoch by the train job."""
    root = tmp_path_factory.mktemp("variant")
    splits = generate_examples(RulesConfig(n_rules=4, instances_per_rule=8, unseen_per_rule=1, max_filler=3))
    _, src, tgt = encoded_task(root, {k: splits[k] for k in ("train", "valid")}, schema=SCHEMA)
    src.save(root / "src.vocab")
    tgt.save(root / "tgt.vocab")
    params = copy.deepcopy(_params())
    params["train"] = {"epochs": 1, "batch_size": 8, "lr": 0.01, "seed": 2, "threads": 1, "select_by": "loss"}
    job = TrainJob(TaskPaths("t", root), "copynet_tf", effective_params(params, "t", "copynet_tf"), vocab_dir=root)
    job.run(checkpoints=root / "ckpt")
    return root, job, src, tgt


def test_a_variant_trains_its_base_on_its_settings_and_model_pt_names_both(variant_run):
    root, job, src, tgt = variant_run
    assert (job.base, job.model_cfg.decoder, job.model_cfg.decoder_layers) == ("copynet", "transformer", 2)
    ckpt = load_file(root / "ckpt" / "model.pt")
    assert (ckpt["mechanism"], ckpt["variant"], ckpt["model_config"]["decoder"]) == (
        "copynet",
        "copynet_tf",
        "transformer",
    )
    model, _ = load_model(root / "ckpt" / "model.pt", "copynet_tf", vocabs=(src, tgt))  # no params needed
    assert type(model).__name__ == type(job.build_model()[0]).__name__
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in job.build_model()[0].parameters())
    with pytest.raises(CheckpointError, match=r"is a copynet_tf \(a variant of copynet\) model, not copynet"):
        load_model(root / "ckpt" / "model.pt", "copynet")


def test_a_train_job_refuses_an_unknown_base(variant_run):
    root, *_ = variant_run
    params = _params(copynet_tf={"mechanism": "copy_net"})
    with pytest.raises(ValueError, match=r"variants.copynet_tf.mechanism 'copy_net' is not a mechanism"):
        TrainJob(TaskPaths("t", root), "copynet_tf", effective_params(params, "t", "copynet_tf"), vocab_dir=root)


def test_gigaword_paper_preset_gives_the_transformer_rows_fairseq_s_transformer_pg_sizes():
    """The `paper` preset's Transformer rows on Gigaword: fairseq's transformer_pointer_generator example
    (Transformer base, Adam 0.001 with 500 warm-up steps and inverse square root, 4096 tokens x 4); the
    recurrent rows keep Read-Again 4's sizes and SGD. Built as the train job builds them."""
    import torch

    from models.registry import build_model, model_config
    from models.transformer_decoder import DecoderLayer
    from pipeline.training.settings import TrainConfig

    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["preset"] = "paper"
    for name, base in (("copynet_transformer", "copynet"), ("pointer_generator_transformer", "pointer_generator")):
        eff = effective_params(params, "gigaword", name)
        train = TrainConfig.from_dict(eff["train"])
        assert (train.optimizer, train.lr, train.warmup_steps, train.lr_decay) == ("adam", 0.001, 500, "inverse_sqrt")
        assert (train.max_tokens, train.update_freq, train.clip, train.lr_halve_after) == (4096, 4, 0.1, None)
        cfg = model_config(eff["model"], base, src_vocab=50, tgt_vocab=40)
        assert (cfg.encoder, cfg.decoder, cfg.hidden, 2 * cfg.encoder_hidden) == (
            "transformer",
            "transformer",
            512,
            512,
        )
        assert (cfg.transformer_layers, cfg.decoder_layers, cfg.decoder_heads, cfg.decoder_ff) == (6, 6, 8, 2048)
        model = build_model(base, cfg)
        decoder_layers = [m for m in model.modules() if isinstance(m, DecoderLayer)]
        encoder_layers = [m for m in model.modules() if isinstance(m, torch.nn.TransformerEncoderLayer)]
        assert len(decoder_layers) == 6 and len(encoder_layers) == 6
        assert decoder_layers[0].ff[0].weight.shape == (2048, 512)
    recurrent = effective_params(params, "gigaword", "copynet")
    assert (recurrent["model"]["decoder"], recurrent["train"]["optimizer"]) == ("recurrent", "sgd")
