"""Typed model configuration shared by every mechanism.

params.yaml's ``model:`` slice holds the sizes every mechanism shares plus one sub-section per
mechanism (``model.pointer_softmax``, ``model.wean`` ...). ``models.registry.model_config`` keeps the
shared sizes and the sub-section of the mechanism being built, as ``options``, after checking every
sub-section against its mechanism's declared options class (an unknown key is an error).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class NoOptions:
    """The options of a mechanism that has none of its own (``model.<name>`` absent or empty)."""


def parse_options(cls: type[T], options: dict, mechanism: str) -> T:
    """A mechanism's typed options from its ``model.<mechanism>`` section: an unknown key is an error
    naming the section, a bad value the options class's own error."""
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(options) - known)
    if unknown:
        raise ValueError(f"model.{mechanism}: unknown settings {unknown}; known: {sorted(known)}")
    return cls(**options)


ENCODERS = ("bigru", "transformer")
DECODERS = ("recurrent", "transformer")


@dataclass(frozen=True)
class ModelConfig:
    """The shared sizes; a wrong or inconsistent one is a ValueError here, before any module is built."""

    src_vocab: int  # encoder vocabulary size
    tgt_vocab: int  # decoder vocabulary size V (specials included)
    emb: int = 150  # word embedding size (CopyNet 5.1: 150)
    hidden: int = 300  # decoder size (GRU/LSTM state, or the transformer decoder's d_model) (CopyNet 5.1: 300)
    dropout: float = 0.0
    encoder: str = "bigru"  # bigru | transformer (any output layer; memory size 2 * encoder_hidden)
    transformer_layers: int = 2  # encoder layers (encoder: transformer)
    transformer_heads: int = 4  # encoder heads; must divide 2 * encoder_hidden
    # Encoder size per direction (None: = hidden). The memory h_j has M = 2 * encoder_hidden entries,
    # which every bridge, attention and output layer reads (OpenNMT-py brnn: 150 per direction, 300 decoder).
    encoder_hidden: int | None = None
    decoder: str = "recurrent"  # recurrent (each mechanism's own: Bahdanau GRU, Luong LSTM, See's GRU) | transformer
    decoder_layers: int = 2  # transformer decoder layers (decoder: transformer)
    decoder_heads: int = 4  # transformer decoder heads; must divide hidden
    decoder_ff: int | None = None  # transformer decoder feed-forward size (None: 4 * hidden)
    # A pretrained Hugging Face encoder-decoder (a local directory or a hub name) for the mechanisms that
    # run on one (models/backbone_heads.py); the others refuse it (models.registry.model_config).
    backbone: str | None = None
    # Size of the features vocabulary (tags kept apart from the source: prepare's ``features_col``);
    # 0: no features, nothing of the model changes. Else their mean embedding, projected, joins
    # the decoder's input at every step and a recurrent decoder's initial state
    # (models.seq2seq.Seq2Seq.encode_features, decoder_input); never copied: they are not in the source.
    features_vocab: int = 0
    options: dict = field(default_factory=dict)  # the mechanism's own settings (model.<mechanism>)

    def __post_init__(self) -> None:
        if self.encoder not in ENCODERS:
            raise ValueError(f"unknown encoder {self.encoder!r}; known: {', '.join(ENCODERS)}")
        if self.decoder not in DECODERS:
            raise ValueError(f"unknown model.decoder {self.decoder!r}; known: {', '.join(DECODERS)}")
        for name in ("emb", "hidden", "transformer_layers", "transformer_heads", "decoder_layers", "decoder_heads"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"model.{name} must be a positive integer, not {value!r}")
        for name in ("encoder_hidden", "decoder_ff"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise ValueError(f"model.{name} must be a positive integer or null, not {value!r}")
        features = self.features_vocab
        if isinstance(features, bool) or not isinstance(features, int) or features < 0:
            raise ValueError(f"model.features_vocab must be an integer >= 0 (0: no features), not {features!r}")
        if self.backbone is not None and (not isinstance(self.backbone, str) or not self.backbone):
            raise ValueError(f"model.backbone must be a directory or a hub name, or null, not {self.backbone!r}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"model.dropout must be in [0, 1), not {self.dropout!r}")
        # (transformer_heads against 2 * encoder_hidden: checked by the encoder a mechanism builds, since
        # Read-Again's own encoder ignores both)
        if self.decoder == "transformer" and self.hidden % self.decoder_heads:
            raise ValueError(
                f"model.decoder_heads {self.decoder_heads} must divide the transformer decoder's size "
                f"hidden = {self.hidden}"
            )

    @property
    def memory(self) -> int:
        """M, the size of the encoder memory h_j (B, S, M): 2 * encoder_hidden (both directions)."""
        return 2 * (self.encoder_hidden if self.encoder_hidden is not None else self.hidden)

    @property
    def feed_forward(self) -> int:
        """The transformer decoder's feed-forward size (Vaswani et al. 2017 sec. 3.3: d_ff = 4 d_model)."""
        return self.decoder_ff if self.decoder_ff is not None else 4 * self.hidden
