"""A backbone that cannot work is refused before any work (pipeline/vocab/backbone_probe.py, called by the
vocab stage): one line naming the setting, its value and the reason. On tiny BART, T5 and Marian
backbones made by the test, and copies of them broken one way each; nothing is fetched (HF_HUB_OFFLINE)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
import yaml

from pipeline.config.paths import TaskPaths
from pipeline.config.validation import SettingsError
from pipeline.io.shards import ShardWriter, make_schema
from pipeline.stages import vocab
from pipeline.stages.vocab import backbone_setting, backbone_settings
from pipeline.vocab.backbone_probe import probe_backbone
from pipeline.vocab.tiny_backbone import KINDS, make_tiny_backbone
from pipeline.vocab.tokenizer import BackboneTokenizer

TEXTS = ["a s1 s2 b", "b s1 s2", "a s3 s4 s5 b", "b s3 s4 s5", "x y z"] * 20
SETTING = "variants.bart_lm.model.backbone"
# the backbone ids of <pad>, <unk>, the decoder start, </s> and <s> of each family's tiny backbone
TOKEN_IDS = {
    "bart": {"pad": 1, "unk": 3, "start": 2, "eos": 2, "bos": 0},
    "t5": {"pad": 0, "unk": 2, "start": 0, "eos": 1, "bos": 0},
}
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")  # what the tiny BART and T5 tokenizers save


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="module")
def backbones(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("backbones")
    return {kind: make_tiny_backbone(kind, TEXTS, root / kind, d_model=8, layers=1) for kind in KINDS}


def copy_of(backbone: Path, tmp_path: Path, name: str) -> Path:
    out = tmp_path / name
    shutil.copytree(backbone, out)
    return out


def edit_config(directory: Path, **changes) -> None:
    config = json.loads((directory / "config.json").read_text())
    for key, value in changes.items():
        if value is None:
            config.pop(key)
        else:
            config[key] = value
    (directory / "config.json").write_text(json.dumps(config))


def refusal(name: str | Path, setting: str = SETTING) -> str:
    """The one-line message the probe refuses ``name`` with; it starts with the setting and the value."""
    with pytest.raises(SettingsError) as err:
        probe_backbone(str(name), setting)
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"{setting} {str(name)!r}: "), message
    return message


def t5_tokenizer_in_bart_folder(backbones: dict, tmp_path: Path) -> Path:
    mixed = copy_of(backbones["bart"], tmp_path, "bart_with_t5_tokenizer")
    for file in TOKENIZER_FILES:
        shutil.copy2(backbones["t5"] / file, mixed / file)
    return mixed


@pytest.mark.parametrize("kind", KINDS)
def test_the_tiny_backbones_pass_with_their_ids_and_tokenizer(backbones, kind):
    probe = probe_backbone(str(backbones[kind]), SETTING)
    assert probe.config.model_type == kind and probe.config.is_encoder_decoder
    if kind in TOKEN_IDS:
        assert probe.token_ids == TOKEN_IDS[kind]
    else:  # Marian: </s> 0, <unk> 1, <pad> (its decoder start) last
        last = len(probe.tokenizer) - 1
        assert probe.token_ids == {"pad": last, "unk": 1, "start": last, "eos": 0, "bos": last}
    tok = BackboneTokenizer.from_probe(probe)
    assert tok.vocab.itos == BackboneTokenizer.from_backbone(str(backbones[kind])).vocab.itos


def test_a_missing_directory_says_it_does_not_exist(tmp_path, monkeypatch):
    """A path that cannot be a hub name: the directory does not exist; one that could (no network
    here): neither a directory nor in the local cache. Either way no 'Repo id must be ...'."""
    monkeypatch.chdir(tmp_path)
    message = refusal("data/backbones/tiny_bart")
    assert f"the directory does not exist (relative to {tmp_path})" in message
    assert "HF_HUB_OFFLINE unset" in message and "Repo id" not in message
    assert "the directory does not exist:" in refusal(tmp_path / "gone")  # an absolute path: no "relative to"
    message = refusal("backbones/tiny_bart")  # hub-shaped
    assert "not a directory here, and not in the local Hugging Face cache while HF_HUB_OFFLINE is set" in message
    (tmp_path / "a_file").write_text("x")
    assert "is a file, not a directory" in refusal("a_file")


def test_a_hub_name_without_network_is_one_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    message = refusal("copyseq-tests/not-a-cached-model")
    assert "not in the local Hugging Face cache while HF_HUB_OFFLINE is set" in message
    assert "download the model once on a machine with network access (HF_HUB_OFFLINE unset)" in message


def test_a_corrupt_config_json_is_refused(backbones, tmp_path):
    broken = copy_of(backbones["bart"], tmp_path, "not_json")
    (broken / "config.json").write_text('{"model_type": "bart",')
    assert "its config.json is not JSON (line 1 column" in refusal(broken)

    untyped = copy_of(backbones["bart"], tmp_path, "no_model_type")
    edit_config(untyped, model_type=None)
    assert "its config.json names no model_type" in refusal(untyped)

    unknown = copy_of(backbones["bart"], tmp_path, "unknown_model_type")
    edit_config(unknown, model_type="no_such_architecture")
    assert "names model_type 'no_such_architecture', which this transformers does not know" in refusal(unknown)

    empty = tmp_path / "empty"
    empty.mkdir()
    assert "the directory has no config.json" in refusal(empty)


def test_missing_weights_or_tokenizer_files_are_refused(backbones, tmp_path):
    unweighted = copy_of(backbones["bart"], tmp_path, "no_weights")
    (unweighted / "model.safetensors").unlink()
    assert "the directory has no safetensors weights (model.safetensors)" in refusal(unweighted)
    untokenized = copy_of(backbones["bart"], tmp_path, "no_tokenizer")
    for file in TOKENIZER_FILES:
        (untokenized / file).unlink()
    assert "the directory has no tokenizer files" in refusal(untokenized)


def test_a_model_that_is_not_an_encoder_decoder_is_refused(tmp_path):
    from transformers import BertConfig, BertForMaskedLM, BertTokenizerFast

    bert = tmp_path / "tiny_bert"
    bert.mkdir()
    (bert / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b"]) + "\n")
    tokenizer = BertTokenizerFast(vocab_file=str(bert / "vocab.txt"))
    config = BertConfig(
        vocab_size=len(tokenizer), hidden_size=8, num_hidden_layers=1, num_attention_heads=2, intermediate_size=16
    )
    BertForMaskedLM(config).save_pretrained(bert)
    tokenizer.save_pretrained(bert)
    message = refusal(bert)
    assert "a bert model (BertConfig) is not an encoder-decoder: AutoModelForSeq2SeqLM cannot load it" in message


def test_a_tokenizer_of_another_family_is_refused_naming_the_ids_that_disagree(backbones, tmp_path):
    """A T5 tokenizer in a BART folder (<pad> 0, </s> 1, <unk> 2 against BART's <pad> 1, </s> 2 and
    decoder start 2) used to train silently; and a BART tokenizer in a T5 folder."""
    message = refusal(t5_tokenizer_in_bart_folder(backbones, tmp_path))
    assert "its tokenizer is not its model's, the special ids disagree" in message
    assert "pad_token_id 0 in the tokenizer, 1 in config.json" in message
    assert "eos_token_id 1 in the tokenizer, 2 in config.json" in message
    assert "decoder_start_token_id 2 is the tokenizer's '<unk>', not one of its special tokens" in message
    assert message.endswith("put the model's own tokenizer files beside its config.json")

    mixed = copy_of(backbones["t5"], tmp_path, "t5_with_bart_tokenizer")
    for file in TOKENIZER_FILES:
        shutil.copy2(backbones["bart"] / file, mixed / file)
    message = refusal(mixed)
    assert "pad_token_id 1 in the tokenizer, 0 in config.json" in message
    assert "eos_token_id 2 in the tokenizer, 1 in config.json" in message


def test_fewer_embeddings_than_tokenizer_pieces_is_refused(backbones, tmp_path):
    small = copy_of(backbones["bart"], tmp_path, "small_embeddings")
    pieces = len(probe_backbone(str(backbones["bart"])).tokenizer)
    edit_config(small, vocab_size=pieces - 5)
    message = refusal(small)
    assert (
        f"its tokenizer has {pieces} ids but the model has {pieces - 5} embeddings (config.json vocab_size)" in message
    )
    assert f"ids {pieces - 5}..{pieces - 1} have none" in message


def test_the_setting_named_is_where_params_sets_the_backbone():
    params = {
        "preset": "paper",
        "mechanisms": ["copynet", "bart_lm", "t5_lm", "shared"],
        "model": {"backbone": None},
        "variants": {
            "bart_lm": {"mechanism": "backbone_lm", "model": {"backbone": "data/backbones/tiny_bart"}},
            "t5_lm": {"mechanism": "backbone_lm", "model": {"backbone_lm": {"backbone": "data/backbones/tiny_t5"}}},
            "shared": {"mechanism": "backbone_copynet"},
        },
        "task_settings": {"toy": {"presets": {"paper": {"mechanisms": {"t5_lm": {"model": {"backbone": "x"}}}}}}},
    }
    assert backbone_setting(params, "toy", "bart_lm") == "variants.bart_lm.model.backbone"
    # model.<base>.backbone wins over model.backbone, wherever each is set
    assert backbone_setting(params, "toy", "t5_lm") == "variants.t5_lm.model.backbone_lm.backbone"
    params["task_settings"]["toy"]["presets"]["paper"]["mechanisms"]["t5_lm"]["model"] = {
        "backbone_lm": {"backbone": "y"}
    }
    where = "task_settings.toy.presets.paper.mechanisms.t5_lm.model.backbone_lm.backbone"
    assert backbone_setting(params, "toy", "t5_lm") == where
    params["model"]["backbone"] = "z"
    assert backbone_settings(params, "toy") == {
        "data/backbones/tiny_bart": "variants.bart_lm.model.backbone",
        "y": where,
        "z": "model.backbone",
    }


def backbone_task(root: Path, backbone: Path) -> Path:
    """A task ``toy`` with train and valid shards and one row, ``bart_lm``, on ``backbone``; its params file."""
    paths = TaskPaths("toy", root)
    rows = [{"id": str(i), "src": ["a", "s1", "b"], "tgt": ["b", "s1"], "refs": [["b", "s1"]]} for i in range(4)]
    for split in ("train", "valid"):
        with ShardWriter(paths.split(split), make_schema()) as writer:
            writer.write(rows)
    shared = yaml.safe_load((Path(__file__).parents[3] / "params.yaml").read_text())
    params = {
        "tasks": {"toy": "data/raw/toy"},
        "mechanisms": ["copynet", "bart_lm"],
        "vocab": shared["vocab"],
        "model": {"backbone": None},
        "variants": {"bart_lm": {"mechanism": "backbone_lm", "model": {"backbone": str(backbone)}}},
    }
    (root / "params.yaml").write_text(yaml.safe_dump(params))
    return root / "params.yaml"


@pytest.mark.parametrize("through", ["stage", pytest.param("flow", marks=pytest.mark.slow)])
def test_the_vocab_cli_refuses_a_mismatched_tokenizer_in_one_line_before_any_work(
    backbones, tmp_path, monkeypatch, capfd, request, through
):
    """`python -m flows.vocab --task toy` on a BART folder holding a T5 tokenizer: exit 2, one line
    naming the setting and the ids, and nothing written (it used to write everything and exit 0). The
    CLI around the stage function, and (slow) around the Prefect flow."""
    import flows
    from flows.vocab import __doc__ as doc

    mixed = t5_tokenizer_in_bart_folder(backbones, tmp_path)
    project = tmp_path / "project"
    params = backbone_task(project, mixed)
    monkeypatch.chdir(project)
    if through == "flow":
        from flows.vocab import vocab_flow

        request.getfixturevalue("harness")
        target = vocab_flow
    else:
        target = vocab.run
    monkeypatch.setattr(sys, "argv", ["vocab", "--task", "toy", "--params", str(params)])
    with pytest.raises(SystemExit) as exit_:
        flows.cli(target, doc, "task")
    assert exit_.value.code == 2
    err = capfd.readouterr().err
    message = f"error: variants.bart_lm.model.backbone {str(mixed)!r}: its tokenizer is not its model's"
    assert "Traceback" not in err and err.count(message) == 1, err
    last = err.rstrip("\n").splitlines()[-1]
    assert last.startswith(message) and "pad_token_id 0 in the tokenizer, 1 in config.json" in last
    assert not (project / "data" / "vocab").exists()  # refused before the word vocabularies were built

    # the same project with the BART folder as it was: the stage runs and records the tokenizer
    settings = yaml.safe_load(params.read_text())
    settings["variants"]["bart_lm"]["model"]["backbone"] = str(backbones["bart"])
    params.write_text(yaml.safe_dump(settings))
    vocab.run("toy", str(params))
    [record] = (project / "data/vocab/toy/backbones").glob("*/backbone.json")
    assert json.loads(record.read_text())["token_ids"] == TOKEN_IDS["bart"]
