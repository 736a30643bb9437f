"""A trained backbone row as a Hugging Face model folder: :func:`write_hf` (``copyseq export MODEL
--format hf --out DIR``).

From a checkpoint directory as the training stage writes it (``data/checkpoints/<task>/<row>/model.pt``,
what :class:`~pipeline.serving.predictor.Predictor` loads) and its backbone's vocabulary directory (the
vocab stage's ``data/vocab/<task>/backbones/<name>/``: the tokenizer), it writes a folder that a user's
own code loads without this pipeline's settings:

  config.json, model.safetensors   ``CopyHeadForConditionalGeneration.from_pretrained(DIR)`` (models/hf)
  generation_config.json           the row's decoding settings (``evaluate``) as ``generate()``'s defaults
  tokenizer files, copy_head_processor.json   ``CopyHeadProcessor.from_pretrained(DIR)``

Decoding settings map as: ``beam_size`` -> ``num_beams``, ``max_len`` -> ``max_new_tokens``, ``min_len``
-> ``min_new_tokens``, ``block_ngram`` -> ``no_repeat_ngram_size``, ``ban_unk`` -> ``suppress_tokens``
(the unknown token), ``length_penalty`` -> ``length_penalty`` (equal rankings at 0 only: the pipeline
divides by GNMT's ((5 + |y|) / 6) ** alpha, Hugging Face by |y| ** alpha); ``replace_unk`` (the
pipeline's post-processing with the attention) has no counterpart and is left out.

Only the copy heads on a pretrained backbone export this way (:data:`models.hf.HEADS`); another row is
refused with one line naming them.

An earlier folder is recognised (:func:`earlier_export`) by its ``config.json`` of this model type and
its ``copy_head_processor.json``; the names such a folder may hold are :func:`own_file`'s.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import fields
from pathlib import Path

import transformers
from transformers import GenerationConfig
from transformers import tokenization_utils_base as tokenization
from transformers import utils as hf_utils

from models.hf import HEADS, CopyHeadForConditionalGeneration, CopyHeadProcessor
from models.hf.configuration import MODEL_TYPE
from models.hf.processing import PROCESSOR_FILE
from pipeline.config.backbones import row_vocab_dir
from pipeline.config.params import project_root
from pipeline.config.schema import check_params_file
from pipeline.config.tasks import effective_params
from pipeline.config.variants import resolve
from pipeline.serving.predictor import DECODE_KEYS, ServingConfig
from pipeline.training.checkpoints import load_file, load_model
from pipeline.vocab.tokenizer import BackboneTokenizer

CHECKPOINT = "model.pt"
CONFIG = hf_utils.CONFIG_NAME
SHARD = re.compile(r"model-\d{5}-of-\d{5}\.safetensors")  # save_pretrained's shards of a large model
# the tokenizers of the backbones a copy head runs on (BART, T5, Marian) and the fast one's own file
TOKENIZER_CLASSES = ("BartTokenizer", "T5Tokenizer", "MarianTokenizer", "PreTrainedTokenizerFast")


@functools.cache
def own_files() -> frozenset[str]:
    """The names :func:`write_hf` may write (built once): the model's (save_pretrained), the processor's and those of
    the tokenizer of any supported backbone (transformers' own names for them)."""
    names = {
        CONFIG,
        hf_utils.GENERATION_CONFIG_NAME,
        hf_utils.SAFE_WEIGHTS_NAME,
        hf_utils.SAFE_WEIGHTS_INDEX_NAME,
        PROCESSOR_FILE,
        tokenization.ADDED_TOKENS_FILE,
        tokenization.CHAT_TEMPLATE_FILE,
        tokenization.FULL_TOKENIZER_FILE,
        tokenization.SPECIAL_TOKENS_MAP_FILE,
        tokenization.TOKENIZER_CONFIG_FILE,
    }
    for name in TOKENIZER_CLASSES:
        names.update((getattr(getattr(transformers, name, None), "vocab_files_names", None) or {}).values())
    return frozenset(names)


def own_file(name: str) -> bool:
    """Whether an entry ``name`` of an earlier folder is one :func:`write_hf` writes."""
    return name in own_files() or SHARD.fullmatch(name) is not None


def earlier_export(out: Path) -> str | None:
    """None when ``out`` is a folder :func:`write_hf` wrote (a ``config.json`` of this model type and
    a ``copy_head_processor.json``), else why it is not one."""
    try:
        config = json.loads((Path(out) / CONFIG).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return f"no {CONFIG} in it"
    except (OSError, ValueError):  # a directory of that name, not UTF-8, not JSON
        return f"its {CONFIG} is not JSON"
    if not isinstance(config, dict) or config.get("model_type") != MODEL_TYPE:
        return f"its {CONFIG} is not of a {MODEL_TYPE} model"
    if not (Path(out) / PROCESSOR_FILE).is_file():
        return f"no {PROCESSOR_FILE} in it"
    return None


def exported_mechanism(model_dir: Path) -> tuple[str, str]:
    """(row, base mechanism) of ``model_dir/model.pt``; a ValueError of one line when it is not a copy
    head on a backbone (or no checkpoint)."""
    path = Path(model_dir) / CHECKPOINT
    if not path.is_file():
        raise ValueError(f"{path}: no trained model (run the train stage first)")
    ckpt = load_file(path)
    base = ckpt.get("mechanism") or Path(model_dir).name
    if base not in HEADS:
        raise ValueError(
            f"{model_dir}: a {base} model; the Hugging Face export supports the copy heads on a pretrained "
            f"backbone only: {', '.join(sorted(HEADS))}"
        )
    return ckpt.get("variant") or base, base


def row_settings(model_dir: Path, row: str, params: str | Path | None) -> tuple[Path, dict]:
    """(the row's backbone vocabulary directory, its decoding settings) from the params file, as
    ``predict --checkpoint`` finds them: the task is the checkpoint directory's parent's name."""
    task = Path(model_dir).parent.name
    settings = check_params_file(params)
    effective = effective_params(settings, task, row)
    vocab_dir = row_vocab_dir(
        project_root(params) / "data" / "vocab" / task, effective.get("model"), resolve(settings, row).mechanism
    )
    return vocab_dir, dict(effective.get("evaluate") or {})


def generation_config(model: CopyHeadForConditionalGeneration, decoding: dict) -> GenerationConfig:
    """``generate()``'s defaults from the pipeline's decoding settings (the module docstring's map;
    a setting not given takes the serving default)."""
    defaults = {f.name: f.default for f in fields(ServingConfig) if f.name in DECODE_KEYS}
    settings = {**defaults, **{k: v for k, v in decoding.items() if k in DECODE_KEYS}}
    config = GenerationConfig(**model.generation_config.to_dict())
    config.num_beams = int(settings["beam_size"])
    config.max_new_tokens = int(settings["max_len"])
    if settings["min_len"]:
        config.min_new_tokens = int(settings["min_len"])
    if settings["block_ngram"]:
        config.no_repeat_ngram_size = int(settings["block_ngram"])
    if config.num_beams > 1:
        config.length_penalty = float(settings["length_penalty"])
    if settings["ban_unk"]:
        config.suppress_tokens = [model.config.token_ids["unk"]]
    return config


def write_hf(
    model_dir: Path,
    out_dir: Path,
    *,
    vocab_dir: Path | None = None,
    decoding: dict | None = None,
    params: str | Path | None = None,
) -> Path:
    """Write ``model_dir``'s trained copy head as a Hugging Face model folder ``out_dir`` (returned).
    ``vocab_dir``: the backbone's vocabulary directory, and ``decoding``: the decoding settings (the
    evaluate section's keys); each found from ``params`` (default: the repository's params.yaml) when
    not given. A model that is not a copy head on a backbone is a ValueError naming the supported ones."""
    model_dir, out_dir = Path(model_dir), Path(out_dir)
    row, base = exported_mechanism(model_dir)
    if vocab_dir is None or decoding is None:
        found_vocab, found_decoding = row_settings(model_dir, row, params)
        vocab_dir = found_vocab if vocab_dir is None else vocab_dir
        decoding = found_decoding if decoding is None else decoding
    tokenizer = BackboneTokenizer.load(vocab_dir)
    seq2seq, _ = load_model(model_dir / CHECKPOINT, row, "cpu", (tokenizer.vocab, tokenizer.vocab))
    model = CopyHeadForConditionalGeneration.from_seq2seq(seq2seq, base)
    model.generation_config = generation_config(model, decoding)
    model.save_pretrained(str(out_dir))
    CopyHeadProcessor.from_config(tokenizer.tokenizer, model.config).save_pretrained(out_dir)
    return out_dir
