"""The configuration of a copy head on a pretrained encoder-decoder as a Hugging Face model:
:class:`CopyHeadConfig` (``model_type`` ``copyseq_copy_head``), the backbone's own config nested in it.

One class serves every head: ``head`` names the project's mechanism (``backbone_pointer_generator``,
``backbone_copynet``, ``backbone_pointer_softmax``, ``backbone_lm``; :data:`models.hf.HEADS`) and
``head_options`` its ``model.<mechanism>`` settings (``copy_layer``, ``coverage``, ``shortlist`` ...),
the same dataclass the pipeline reads (models/backbone_heads.py), checked when the config is made.

Ids are the backbone's own (what its tokenizer gives); ``vocab_size`` is the backbone's, and the
extended ids ``vocab_size + k`` are the source's k-th piece that the tokenizer maps to its unknown
token (models/hf/processing.py). ``token_ids`` are the backbone ids of <pad>, <unk>, the decoder start,
</s> and <s> (models/backbone_ids.py), ``head_vocab_size`` the number of ids the head scores: the
tokenizer's ids with the backbone's specials counted once (the pipeline's V for this backbone).
"""

from __future__ import annotations

from dataclasses import fields

from transformers import AutoConfig, PretrainedConfig
from transformers.configuration_utils import SubConfigSpec

from models.backbone_heads import MECHANISMS
from models.backbone_ids import IDENTITY_TOKEN_IDS
from models.specials import SPECIALS

MODEL_TYPE = "copyseq_copy_head"
# The options a checkpoint carries elsewhere: the backbone's config (``backbone``) and its ids (``token_ids``).
RECORDED_ELSEWHERE = frozenset({"backbone_config", "token_ids"})
HEADS = {mechanism.name: mechanism for mechanism in MECHANISMS}


def head_options_class(head: str) -> type:
    """The options dataclass of a head; a ValueError naming the known heads for another name."""
    if head not in HEADS:
        raise ValueError(f"head {head!r} is not a copy head on a backbone; known: {', '.join(sorted(HEADS))}")
    return HEADS[head].options


def own_options(head: str, options: dict) -> dict:
    """``options`` (a ``model.<head>`` section, possibly with the backbone's config and ids in it) without
    the keys the config records elsewhere; an unknown key is a ValueError naming the head."""
    known = {f.name for f in fields(head_options_class(head))} - RECORDED_ELSEWHERE
    unknown = sorted(set(options) - known - RECORDED_ELSEWHERE)
    if unknown:
        raise ValueError(f"{head}: unknown head options {unknown}; known: {sorted(known)}")
    return {key: value for key, value in options.items() if key in known}


class CopyHeadConfig(PretrainedConfig):
    """A copy head (``head``, ``head_options``) on the encoder-decoder ``backbone`` (a config or its dict)."""

    model_type = MODEL_TYPE
    sub_configs_defaults = {"backbone": SubConfigSpec(config_class=AutoConfig, model_type="bart")}

    backbone: PretrainedConfig | dict | None = None
    head: str = "backbone_pointer_generator"
    head_options: dict | None = None
    token_ids: dict | None = None
    head_vocab_size: int | None = None
    vocab_size: int | None = None
    pad_token_id: int | None = None
    eos_token_id: int | None = None
    bos_token_id: int | None = None
    decoder_start_token_id: int | None = None
    is_encoder_decoder: bool = True
    tie_word_embeddings: bool = False  # the backbone ties its own embeddings; this wrapper ties nothing

    def __post_init__(self, **kwargs):
        super().__post_init__(**kwargs)
        self.head_options = own_options(self.head, dict(self.head_options or {}))
        head_options_class(self.head)(**self.head_options)  # the head's own checks (ranges, choices)
        self.token_ids = {k: int(v) for k, v in (self.token_ids or IDENTITY_TOKEN_IDS).items()}
        if set(self.token_ids) != set(IDENTITY_TOKEN_IDS):
            raise ValueError(f"token_ids needs the keys {sorted(IDENTITY_TOKEN_IDS)}, got {sorted(self.token_ids)}")
        self.vocab_size = int(self.backbone.vocab_size)
        if self.head_vocab_size is None:  # every backbone id a piece, its specials counted once
            specials = {i for i in self.token_ids.values() if i < self.vocab_size}
            self.head_vocab_size = len(SPECIALS) + self.vocab_size - len(specials)
        self.pad_token_id = self.token_ids["pad"]
        self.eos_token_id = self.token_ids["eos"]
        self.bos_token_id = self.token_ids["bos"]
        self.decoder_start_token_id = self.token_ids["start"]
