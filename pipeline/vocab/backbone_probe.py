"""A pretrained backbone (``model.backbone``: a local directory or a hub name; docs/pretrained.md)
checked before any work, without loading its weights: the vocab stage probes every backbone its
task's rows run on before it reads a split, so a backbone that cannot work is one line naming the
setting, not a traceback in the middle of the stage or a failure in training (or, worse, a model
trained on ids that mean something else to its embeddings).

:func:`probe_backbone` refuses, each as a :class:`~pipeline.config.validation.SettingsError`:

* a name that is no directory here and no hub model reachable: with ``HF_HUB_OFFLINE`` set (the
  tests), one that is not in the local Hugging Face cache; a name that cannot be a hub name (two
  slashes, an absolute path) is a directory that does not exist;
* a directory without ``config.json``, a ``config.json`` that is not JSON or names no (or an
  unknown) ``model_type``, a directory without safetensors weights (the only ones
  :func:`models.backbone.load_pretrained` reads);
* a model that is not an encoder-decoder (``AutoModelForSeq2SeqLM`` cannot load it: BERT, GPT-2);
* a directory without tokenizer files, a tokenizer that does not load, or one with separate source
  and target vocabularies;
* a tokenizer that is not the model's: its pad / eos / bos ids differ from ``config.json``'s
  ``pad_token_id`` / ``eos_token_id`` / ``bos_token_id``, or the config's ``decoder_start_token_id``
  is none of the tokenizer's special tokens (say a T5 tokenizer in a BART directory);
* a tokenizer with more pieces than the model has embeddings (``config.json`` ``vocab_size``).

It reads ``config.json`` (``AutoConfig``) and the tokenizer (``AutoTokenizer``), no remote code, and
hands both back (:class:`BackboneProbe`): the vocab stage builds its tokenizer vocabulary from them
(:class:`pipeline.vocab.tokenizer.BackboneTokenizer`), loading nothing twice.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from models.backbone_ids import special_token_ids
from pipeline.config.validation import SettingsError

CONFIG_FILE = "config.json"
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json")  # save_pretrained's, one file or shards
TRUE = {"1", "on", "yes", "true"}


@dataclass(frozen=True)
class BackboneProbe:
    """A backbone that passed :func:`probe_backbone`: its Hugging Face config and tokenizer, and the
    backbone ids of <pad>, <unk>, the decoder start, </s> and <s> (``models.backbone_ids``)."""

    name: str
    setting: str
    config: object
    tokenizer: object
    token_ids: dict


def offline() -> bool:
    """Whether the Hugging Face hub is out of reach by setting (``HF_HUB_OFFLINE``, read now and as the
    hub library read it at import)."""
    from huggingface_hub import constants

    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in TRUE or bool(constants.HF_HUB_OFFLINE)


def hub_name(name: str) -> bool:
    """Whether ``name`` has the shape of a hub model name (``repo`` or ``namespace/repo``)."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(name)
    except HFValidationError:
        return False
    return True


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def probe_backbone(name: str, setting: str = "model.backbone") -> BackboneProbe:
    """The config and tokenizer of the backbone ``name`` checked (see the module docstring), its weights
    not read; a :class:`SettingsError` that starts ``<setting> '<name>':`` and says what to do."""
    where = f"{setting} {name!r}"
    local = Path(name).expanduser()
    if local.is_dir():
        _check_directory(local, where)
        source = str(local)
    elif local.exists():
        raise SettingsError(f"{where}: is a file, not a directory: give the directory save_pretrained wrote")
    elif not hub_name(name):
        here = "" if local.is_absolute() else f" (relative to {Path.cwd()})"
        raise SettingsError(
            f"{where}: the directory does not exist{here}: give the directory save_pretrained wrote "
            "(python -m pipeline.vocab.tiny_backbone writes tiny ones), or a hub name (namespace/name) on a "
            "machine with network access and HF_HUB_OFFLINE unset"
        )
    else:
        source = name
    config = _config(source, where, local.is_dir())
    tokenizer = _tokenizer(source, where, local.is_dir())
    _check_ids(config, tokenizer, where, local.is_dir())
    try:
        ids = special_token_ids(config, tokenizer)
    except ValueError as err:
        raise SettingsError(f"{where}: {err}") from None
    _check_sizes(config, tokenizer, ids, where)
    return BackboneProbe(name, setting, config, tokenizer, ids)


def _check_directory(directory: Path, where: str) -> None:
    """``config.json`` is there, JSON, with a ``model_type`` transformers knows; safetensors weights are there."""
    from transformers import CONFIG_MAPPING

    path = directory / CONFIG_FILE
    if not path.is_file():
        raise SettingsError(
            f"{where}: the directory has no {CONFIG_FILE}: give the directory save_pretrained wrote (model and tokenizer)"
        )
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise SettingsError(
            f"{where}: its {CONFIG_FILE} is not UTF-8 text: write it again with save_pretrained"
        ) from None
    except json.JSONDecodeError as err:
        raise SettingsError(
            f"{where}: its {CONFIG_FILE} is not JSON (line {err.lineno} column {err.colno}: {err.msg}): "
            "write it again with save_pretrained"
        ) from None
    model_type = data.get("model_type") if isinstance(data, dict) else None
    if not isinstance(model_type, str) or not model_type:
        raise SettingsError(
            f'{where}: its {CONFIG_FILE} names no model_type (the architecture, such as "bart" or "t5"): '
            "write it again with save_pretrained"
        )
    if model_type not in CONFIG_MAPPING:
        raise SettingsError(
            f"{where}: its {CONFIG_FILE} names model_type {model_type!r}, which this transformers does not know "
            "(no remote code is run): use a built-in sequence-to-sequence architecture (BART, T5, Marian, Pegasus ...)"
        )
    if not any((directory / weights).is_file() for weights in WEIGHT_FILES):
        raise SettingsError(
            f"{where}: the directory has no safetensors weights ({WEIGHT_FILES[0]}), the only ones the project "
            "loads: save the model with save_pretrained (safetensors by default)"
        )


def _config(source: str, where: str, local: bool):
    """The Hugging Face config, refused unless ``AutoModelForSeq2SeqLM`` loads its model."""
    from transformers import AutoConfig
    from transformers.models.auto.modeling_auto import MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES

    try:
        config = AutoConfig.from_pretrained(source, trust_remote_code=False, local_files_only=local or offline())
    except (OSError, ValueError, KeyError, TypeError) as err:
        if not local and offline():
            raise SettingsError(
                f"{where}: not a directory here, and not in the local Hugging Face cache while HF_HUB_OFFLINE "
                "is set: give a local directory (save_pretrained), or download the model once on a machine with "
                "network access (HF_HUB_OFFLINE unset)"
            ) from None
        what = "cannot read its config" if local else "not a directory here, and the hub did not give it"
        raise SettingsError(
            f"{where}: {what} ({_first_line(err)}): give the directory save_pretrained wrote, or a hub name "
            "reachable from here"
        ) from None
    model_type = getattr(config, "model_type", None)
    if model_type not in MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES or not getattr(
        config, "is_encoder_decoder", False
    ):
        raise SettingsError(
            f"{where}: a {model_type} model ({type(config).__name__}) is not an encoder-decoder: "
            "AutoModelForSeq2SeqLM cannot load it; give a sequence-to-sequence model (BART, T5, Marian, Pegasus ...)"
        )
    return config


def _tokenizer(source: str, where: str, local: bool):
    """The backbone's tokenizer, refused when it does not load or has two vocabularies."""
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=False, local_files_only=local or offline())
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise SettingsError(
            f"{where}: cannot load its tokenizer ({_first_line(err)}): save the model's tokenizer beside it "
            "(tokenizer.save_pretrained)"
        ) from None
    files = {"tokenizer.json", "tokenizer_config.json", *getattr(type(tokenizer), "vocab_files_names", {}).values()}
    if local and not any((Path(source) / file).is_file() for file in files):  # transformers made an empty one
        raise SettingsError(
            f"{where}: the directory has no tokenizer files ({', '.join(sorted(files))}): save the model's "
            "tokenizer beside it (tokenizer.save_pretrained)"
        )
    if getattr(tokenizer, "separate_vocabs", False):
        raise SettingsError(
            f"{where}: its tokenizer has separate source and target vocabularies; a copy head moves source ids "
            "into the output, so it needs one vocabulary for both"
        )
    return tokenizer


def _as_set(value) -> set[int] | None:
    """A config id (an int, a list of ints, or None) as a set; None when unset."""
    if value is None:
        return None
    return {int(v) for v in value} if isinstance(value, (list, tuple)) else {int(value)}


def _check_ids(config, tokenizer, where: str, local: bool) -> None:
    """The tokenizer's pad/eos/bos ids are the config's (where both name one), and the config's decoder
    start is one of the tokenizer's special tokens, not its <unk>."""
    disagree = []
    for key in ("pad", "eos", "bos"):
        mine, theirs = getattr(tokenizer, f"{key}_token_id", None), _as_set(getattr(config, f"{key}_token_id", None))
        if mine is not None and theirs is not None and int(mine) not in theirs:
            shown = sorted(theirs)[0] if len(theirs) == 1 else sorted(theirs)
            disagree.append(f"{key}_token_id {mine} in the tokenizer, {shown} in {CONFIG_FILE}")
    start = getattr(config, "decoder_start_token_id", None)
    if isinstance(start, int):
        specials = {
            int(i)
            for i in (
                *(getattr(tokenizer, "all_special_ids", None) or ()),
                tokenizer.pad_token_id,
                tokenizer.eos_token_id,
                tokenizer.bos_token_id,
            )
            if i is not None
        }
        if start == tokenizer.unk_token_id or start not in specials:
            piece = tokenizer.convert_ids_to_tokens(start) if 0 <= start < len(tokenizer) else None
            what = f"the tokenizer's {piece!r}" if piece is not None else "no id of the tokenizer"
            disagree.append(f"decoder_start_token_id {start} is {what}, not one of its special tokens")
    if disagree:
        fix = "put the model's own tokenizer files beside its config.json" if local else "use the model's own tokenizer"
        raise SettingsError(
            f"{where}: its tokenizer is not its model's, the special ids disagree ({'; '.join(disagree)}): {fix}"
        )


def _check_sizes(config, tokenizer, ids: dict, where: str) -> None:
    """Every id of the tokenizer (and every special id) has an embedding: ``vocab_size`` covers them."""
    embeddings = getattr(config, "vocab_size", None)
    if not isinstance(embeddings, int) or isinstance(embeddings, bool):
        return
    needed = max(len(tokenizer), max(ids.values()) + 1)
    if needed > embeddings:
        raise SettingsError(
            f"{where}: its tokenizer has {needed} ids but the model has {embeddings} embeddings ({CONFIG_FILE} "
            f"vocab_size): ids {embeddings}..{needed - 1} have none; use the model's own tokenizer, or resize the "
            "embeddings (resize_token_embeddings) and save the model again"
        )
