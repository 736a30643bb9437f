"""The copy heads on a pretrained encoder-decoder (models/backbone.py, models/backbone_heads.py) as a
``transformers.PreTrainedModel``: :class:`CopyHeadForConditionalGeneration`. ``save_pretrained`` /
``from_pretrained``, ``generate()`` (greedy, beam, sampling, with the decoder's cache) and the
``Seq2SeqTrainer`` work on it as on any Hugging Face encoder-decoder.

It wraps the pipeline's own model (``BackboneSeq2Seq``, built by the head's builder from the config),
so every number is the pipeline's: the encoder, ``start_state``, ``step`` (one decoding step through
the backbone's key/value cache: See et al. eq. 8-9, Gu et al. eq. 4-9 with the selective read,
Gulcehre et al. section 4) and teacher forcing (``teacher_forced``, ``score_all``, ``sequence_gold``).
What is added here is the Hugging Face face: backbone ids in and out (models/hf/id_maps.py), the
decoder state between ``generate``'s steps (:class:`CopyHeadCache`), and the loss on ``labels``.

``forward`` returns, as ``logits``, log-probabilities over the extended vocabulary: the backbone's
``vocab_size`` ids, then the source's pieces outside the vocabulary (``vocab_size + k``, from
``src_ext_ids``; models/hf/processing.py). ``generate()`` takes them as it takes logits: it applies
``log_softmax`` first (beam search) or a processor that only shifts or scales them, and log_softmax
of log-probabilities is the identity up to rounding (docs/pretrained.md says which options differ).
"""

from __future__ import annotations

from types import SimpleNamespace

import torch
from torch import nn
from transformers import (
    AutoConfig,
    AutoModelForSeq2SeqLM,
    AutoTokenizer,
    GenerationConfig,
    GenerationMixin,
    PreTrainedModel,
)
from transformers.modeling_outputs import BaseModelOutput, Seq2SeqLMOutput

from models.backbone import BackboneSeq2Seq, plain_config
from models.backbone_ids import IDENTITY_TOKEN_IDS, project_token_ids, special_token_ids
from models.config import ModelConfig
from models.hf.configuration import HEADS, MODEL_TYPE, CopyHeadConfig, own_options
from models.hf.id_maps import IdMaps
from models.specials import PAD, SPECIALS


class CopyHeadCache:
    """The decoder state between ``generate``'s steps: the pipeline's state dict (the backbone's
    self-attention keys/values per layer, its cross-attention ones, coverage, CopyNet's copy scores of
    the last step ...) and the number of decoder positions it has read. Beam search reorders its rows
    (``reorder_cache``); what depends on the source only is left as it is (a beam's rows share it)."""

    def __init__(self, state: dict, static_keys: frozenset[str], length: int = 0):
        self.state, self.static_keys, self.length = state, static_keys, length

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.length

    def reorder_cache(self, beam_idx: torch.Tensor) -> None:
        """Rows ``beam_idx`` (B*K,) of every per-hypothesis tensor, in place."""
        self.state = {
            key: value.index_select(0, beam_idx.to(value.device))
            if torch.is_tensor(value) and key not in self.static_keys
            else value
            for key, value in self.state.items()
        }


class _SourceEncoder(nn.Module):
    """The backbone's encoder as ``generate`` calls it: only the arguments it reads, so the model's own
    keywords (``src_ext_ids``) are not handed to it. Made on each ``get_encoder()`` call and never
    registered, so its parameters keep their one name under the backbone."""

    def __init__(self, encoder: nn.Module):
        super().__init__()
        self.__dict__["encoder"] = encoder  # not a submodule: no second name for its parameters

    def forward(self, input_ids=None, attention_mask=None, output_attentions=None, output_hidden_states=None, **_):
        return self.encoder(
            input_ids=input_ids,
            attention_mask=attention_mask,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            return_dict=True,
        )


def build_seq2seq(config: CopyHeadConfig) -> BackboneSeq2Seq:
    """The pipeline's model of ``config``: the head's builder on the backbone built from its config."""
    options = {**config.head_options, "backbone_config": plain_config(config.backbone), "token_ids": config.token_ids}
    size = config.head_vocab_size
    return HEADS[config.head].build(ModelConfig(src_vocab=size, tgt_vocab=size, options=options))


class CopyHeadForConditionalGeneration(PreTrainedModel, GenerationMixin):
    """A copy head on a pretrained encoder-decoder. ``forward(input_ids, attention_mask, src_ext_ids,
    decoder_input_ids | labels)``: log-probabilities over the extended vocabulary as ``logits`` (B, T,
    vocab_size + X) and, given ``labels`` (extended ids, -100 ignored), the loss: the head's training
    objective per target token in training mode (log p(y_t), Pointer Softmax's log p(y_t, z_t),
    minus the coverage loss), -log p(y_t) in eval mode, averaged over the target tokens."""

    config_class = CopyHeadConfig
    base_model_prefix = "seq2seq"
    main_input_name = "input_ids"
    _supports_attention_backend = False  # the copy attention needs the eager attention's weights
    accepts_loss_kwargs = False  # the loss is a mean over the batch's tokens: the Trainer scales accumulation

    def __init__(self, config: CopyHeadConfig, seq2seq: BackboneSeq2Seq | None = None):
        super().__init__(config)
        self.seq2seq = seq2seq if seq2seq is not None else build_seq2seq(config)
        self.ids = IdMaps(config.head_vocab_size, config.vocab_size, config.token_ids)
        # post_init gathers the tied weights of direct children only: the backbone's, under our names.
        net = self.seq2seq.net
        self.seq2seq.all_tied_weights_keys = {f"net.{k}": f"net.{v}" for k, v in net.all_tied_weights_keys.items()}
        self.generation_config = GenerationConfig(
            decoder_start_token_id=config.decoder_start_token_id,
            pad_token_id=config.pad_token_id,
            eos_token_id=config.eos_token_id,
            bos_token_id=config.bos_token_id,
        )
        self.post_init()

    @classmethod
    def from_seq2seq(cls, seq2seq: BackboneSeq2Seq, head: str) -> CopyHeadForConditionalGeneration:
        """The Hugging Face face of a pipeline model of mechanism ``head`` (its weights, not a copy)."""
        options = seq2seq.opts
        config = CopyHeadConfig(
            backbone=options.backbone_config,
            head=head,
            head_options=own_options(head, seq2seq.cfg.options),
            token_ids=options.token_ids,
            head_vocab_size=seq2seq.cfg.tgt_vocab,
        )
        return cls(config, seq2seq)

    @classmethod
    def from_backbone(cls, name: str, head: str, **head_options) -> CopyHeadForConditionalGeneration:
        """A head with fresh weights on the pretrained backbone ``name`` (a local directory or a hub name;
        safetensors only, no remote code, eager attention: models.backbone.load_pretrained)."""
        if head not in HEADS:
            raise ValueError(f"head {head!r} is not a copy head on a backbone; known: {', '.join(sorted(HEADS))}")
        tokenizer = AutoTokenizer.from_pretrained(name, trust_remote_code=False)
        ids = special_token_ids(AutoConfig.from_pretrained(name, trust_remote_code=False), tokenizer)
        size = len(SPECIALS) + len(tokenizer) - len({i for i in ids.values() if i < len(tokenizer)})
        seq2seq = HEADS[head].build(ModelConfig(src_vocab=size, tgt_vocab=size, backbone=name, options=head_options))
        return cls.from_seq2seq(seq2seq, head)

    # ------------------------------------------------------------------ Hugging Face hooks
    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        """Nothing to draw: the backbone's modules were initialised by its own class and the head's by
        the project's constructors (CopyNet's W_r at 0, ...). Only the pipeline model's id maps are
        written: non-persistent buffers, which ``from_pretrained`` leaves uninitialised."""
        if isinstance(module, BackboneSeq2Seq):
            ids = module.opts.token_ids or IDENTITY_TOKEN_IDS
            for name, size in (("src_ids", module.cfg.src_vocab), ("tgt_ids", module.cfg.tgt_vocab)):
                getattr(module, name).copy_(torch.tensor(project_token_ids(size, ids)))

    def get_encoder(self) -> nn.Module:
        return _SourceEncoder(self.seq2seq.net.get_encoder())

    def get_input_embeddings(self) -> nn.Module:
        return self.seq2seq.net.get_input_embeddings()

    @classmethod
    def _supports_default_dynamic_cache(cls) -> bool:
        return False  # the decoder state is a CopyHeadCache, made at the first step

    def _reorder_cache(self, past: CopyHeadCache, beam_idx: torch.Tensor) -> CopyHeadCache:
        past.reorder_cache(beam_idx)
        return past

    def generate(self, inputs: torch.Tensor | None = None, **kwargs):
        """``GenerationMixin.generate``; the source's extended ids default to ``input_ids`` (nothing to copy
        beyond the vocabulary) when the processor's ``src_ext_ids`` are not given."""
        if kwargs.get("src_ext_ids") is None:
            kwargs["src_ext_ids"] = inputs if inputs is not None else kwargs.get("input_ids")
        return super().generate(inputs, **kwargs)

    def prepare_inputs_for_generation(
        self,
        input_ids: torch.Tensor,
        past_key_values: CopyHeadCache | None = None,
        attention_mask: torch.Tensor | None = None,
        encoder_outputs=None,
        src_ext_ids: torch.Tensor | None = None,
        use_cache: bool | None = None,
        **kwargs,
    ) -> dict:
        """The decoder positions not yet read (all of them without a cache), extended ids as generated:
        ``forward`` embeds an extended id as the backbone's <unk> and CopyNet's selective read (eq. 9)
        reads the extended id itself."""
        if past_key_values is not None:
            input_ids = input_ids[:, past_key_values.get_seq_length() :]
        return {
            "decoder_input_ids": input_ids,
            "past_key_values": past_key_values,
            "encoder_outputs": encoder_outputs,
            "attention_mask": attention_mask,
            "src_ext_ids": src_ext_ids,
            "use_cache": use_cache,
        }

    # ------------------------------------------------------------------ forward
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        src_ext_ids: torch.Tensor | None = None,
        decoder_input_ids: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        encoder_outputs=None,
        past_key_values: CopyHeadCache | None = None,
        use_cache: bool | None = None,
        return_dict: bool | None = None,
        **kwargs,
    ) -> Seq2SeqLMOutput:
        """Teacher forcing in one pass (``labels``, or ``decoder_input_ids`` without a cache), or, with
        ``use_cache`` or a ``past_key_values``, the decoder positions one step at a time through the
        cache (what ``generate`` runs; the same numbers). ``src_ext_ids`` (B, S): the source in extended
        ids (default: ``input_ids``)."""
        if decoder_input_ids is None:
            if labels is None:
                raise ValueError("forward needs decoder_input_ids or labels")
            decoder_input_ids = self.shift_right(labels)
        if past_key_values is None:  # a new source: its encoder states, mask and extended ids
            memory, mask, src_ext, n_ext = self._source(input_ids, attention_mask, src_ext_ids, encoder_outputs)
        else:  # generate's later steps: the source is in the cache's state
            state = past_key_values.state
            memory, src_ext, n_ext = state["memory"], state["src_ext"], state["n_ext"]
        if labels is not None and int(labels.max()) >= self.config.vocab_size + n_ext:
            raise ValueError(
                f"labels hold extended id {int(labels.max())}, past the source's {n_ext} slot(s) after "
                f"vocab_size {self.config.vocab_size}: encode labels with the processor, with their sources"
            )
        stepping = past_key_values is not None or (bool(use_cache) and labels is None)
        if stepping:
            if past_key_values is None:
                state = self.seq2seq.start_state(memory, mask, src_ext, n_ext)
                past_key_values = CopyHeadCache(state, self.seq2seq.static_state_keys)
            log_probs = self._steps(past_key_values, decoder_input_ids)
            loss = None if labels is None else self._step_loss(log_probs, labels, src_ext)
        else:
            log_probs, loss = self._teacher_forced(memory, mask, src_ext, n_ext, decoder_input_ids, labels)
        return Seq2SeqLMOutput(
            loss=loss,
            logits=self.ids.to_backbone_order(log_probs, n_ext),  # (B, T, vocab_size + X)
            past_key_values=past_key_values if stepping else None,
            encoder_last_hidden_state=memory,
        )

    def _source(self, input_ids, attention_mask, src_ext_ids, encoder_outputs):
        """(encoder states (B, S, D), mask (B, S), extended ids in head ids (B, S), X) of a source."""
        if encoder_outputs is None:
            encoder_outputs = self.get_encoder()(input_ids=input_ids, attention_mask=attention_mask)
        elif not isinstance(encoder_outputs, BaseModelOutput):
            encoder_outputs = BaseModelOutput(last_hidden_state=encoder_outputs[0])
        memory = encoder_outputs.last_hidden_state  # (B, S, D)
        if attention_mask is None:
            mask = torch.ones(memory.shape[:2], dtype=torch.bool, device=memory.device)
        else:
            mask = attention_mask.bool()  # (B, S)
        if src_ext_ids is None:
            if input_ids is None:
                raise ValueError("forward needs src_ext_ids (the processor's) or input_ids")
            src_ext_ids = input_ids
        n_ext = max(0, int(src_ext_ids.max()) - self.config.vocab_size + 1)  # X: the batch's slots
        return memory, mask, self.ids.to_head(src_ext_ids).masked_fill(~mask, PAD), n_ext

    def shift_right(self, labels: torch.Tensor) -> torch.Tensor:
        """Decoder inputs from labels (B, T): the decoder start, then labels[:, :-1] (-100 as <pad>)."""
        shifted = labels.new_full(labels.shape, self.config.pad_token_id)
        shifted[:, 1:] = labels[:, :-1].masked_fill(labels[:, :-1] < 0, self.config.pad_token_id)
        shifted[:, 0] = self.config.decoder_start_token_id
        return shifted

    def _teacher_forced(self, memory, mask, src_ext, n_ext, decoder_input_ids, labels):
        """One pass over the decoder inputs (models/seq2seq.py's two phases): (log p (B, T, V + X), loss)."""
        model = self.seq2seq
        state = model.start_state(memory, mask, src_ext, n_ext)
        view = model.teacher_forced(state, self.ids.to_head(decoder_input_ids, first_is_start=True))
        scores = model.output.score_all(view["s"], view["context"], view)
        log_probs = model.output.distribution(scores, view)  # (B, T, V + X)
        if labels is None:
            return log_probs, None
        target = self._target(labels, src_ext)  # (B, T)
        batch = SimpleNamespace(tgt_pointer=None, tgt_switch=None)  # no word-aligned pointer annotations
        gold = model.output.sequence_gold(scores, view, target, batch, self.training)  # (B, T) objective
        return log_probs, self._mean_loss(gold, target)

    def _target(self, labels: torch.Tensor, src_ext: torch.Tensor) -> torch.Tensor:
        """Labels (B, T) in head ids, as the pipeline trains: a word the head cannot produce (outside
        its shortlist and not in the source) is <unk>; -100 is <pad> (not counted)."""
        return self.seq2seq.training_target(SimpleNamespace(tgt_out=self.ids.to_head(labels), src_ext=src_ext))

    @staticmethod
    def _mean_loss(gold: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """-sum of the per-token objective over the target tokens / their number (pipeline's nll_loss)."""
        real = target != PAD
        return -gold.masked_fill(~real, 0.0).sum() / real.sum().clamp_min(1)

    def _step_loss(self, log_probs: torch.Tensor, labels: torch.Tensor, src_ext: torch.Tensor) -> torch.Tensor:
        target = self._target(labels, src_ext)
        return self._mean_loss(log_probs.gather(-1, target.unsqueeze(-1)).squeeze(-1), target)

    def _steps(self, cache: CopyHeadCache, decoder_input_ids: torch.Tensor) -> torch.Tensor:
        """The decoder positions (B, T) after the cached ones, one pipeline ``step`` each (the cache's
        state moves on): log p (B, T, V + X)."""
        prev = self.ids.to_head(decoder_input_ids, first_is_start=cache.length == 0)  # (B, T)
        out = []
        for t in range(prev.size(1)):
            log_probs, cache.state = self.seq2seq.step(cache.state, prev[:, t])  # (B, V + X)
            out.append(log_probs)
        cache.length += prev.size(1)
        return torch.stack(out, dim=1)


AutoConfig.register(MODEL_TYPE, CopyHeadConfig, exist_ok=True)
AutoModelForSeq2SeqLM.register(CopyHeadConfig, CopyHeadForConditionalGeneration, exist_ok=True)
