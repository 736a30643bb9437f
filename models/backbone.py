"""A pretrained Hugging Face encoder-decoder (BART, mBART, T5, mT5, Marian, Pegasus: whatever
``AutoModelForSeq2SeqLM`` loads) as a row's encoder and decoder (``model.backbone``), under one of
the output layers of :mod:`models.backbone_heads`.

Loading: ``from_pretrained(model.backbone)`` with safetensors only, no remote code, float32 and the
eager attention (the only implementation that returns the cross-attention weights the copy heads
read); a local directory, or a hub name where the machine reaches the hub (``HF_HUB_OFFLINE=1``
forbids it; the tests set it). The loaded config and the backbone's special token ids are written
into the model's ``ModelConfig`` options (``backbone_config``, ``token_ids``), so ``model.pt`` is
rebuilt from its own record (``from_config``, then the saved weights), without the directory and
without running anything from it.

Ids. The project's ids put ``<pad> <unk> <s> </s>`` at 0..3 (``models.specials``); a backbone has
its own (BART: <s> 0, <pad> 1, </s> 2, <unk> 3; T5: <pad> 0, </s> 1, <unk> 2). :func:`project_token_ids`
is the one map, shared with the vocab stage (``pipeline.vocab.tokenizer`` writes the tokenizer's
pieces in this order as ``src.vocab``/``tgt.vocab``): project id -> backbone id, the four specials
first (``<s>`` is the backbone's ``decoder_start_token_id``), then every other backbone id in
increasing order, the backbone's own specials left out. The encoder reads ``src_ids[src]``, the
decoder ``tgt_ids[y]``, and the LM head's scores are read at ``tgt_ids`` (a slice when the map is
the identity).

One decoding step (``step``), in the skeleton's terms (models/seq2seq.py):
  x_t = E(y_{t-1}) (+ the head's input term: CopyNet's W_r zeta(y_{t-1}), eq. 9)   (B, D)
  s_t, cross-attentions = backbone decoder(x_t, memory, key/value cache)           (B, D)
  a_t = the copy attention: layer ``copy_layer``'s cross-attention, head ``copy_head`` or the mean
        of its heads (fairseq's alignment head: ``alignment_layer``/``alignment_heads``)  (B, S)
  c_t = sum_j a_tj h_j                                                              (B, D)
  psi_g = the backbone's own LM head on s_t (T5's output scaling and BART's final_logits_bias
          included), read at the project ids, <pad> and <s> at NEG                   (B, V)
  log p over V + X = head(s_t, c_t, a_t, psi_g)
The state keeps the self-attention keys/values of every layer ("bb_self_k{i}", "bb_self_v{i}",
(B, heads, t, d), reordered by beam search like every state tensor) and the cross-attention ones
("bb_cross_k{i}", "bb_cross_v{i}", computed at the first step, static). Teacher forcing runs the
decoder once over the whole target (causal mask, no cache) unless the head feeds something back
(CopyNet's selective read: then position by position through the cache, as search does); the
contract tests check both against each other (the cache equals recomputation).

Departures, each for a reason: the copy attention is renormalised to sum to 1 (in training the
backbone's attention dropout acts on the weights it returns); the backbone keeps its own dropout
(``model.dropout`` is not applied on top); coverage (See et al. eq. 10-13) enters through the loss
only, since adding w_c c_t to a pretrained layer's attention logits (eq. 11) would change every
head of that layer.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace

import torch
from torch import nn

from models.backbone_ids import IDENTITY_TOKEN_IDS, project_token_ids, special_token_ids  # noqa: F401 (re-exported)
from models.config import ModelConfig, parse_options
from models.seq2seq import OutputLayer, Seq2Seq, State, at_least_fp32
from models.specials import PAD, SPECIALS, UNK


@dataclass(frozen=True)
class BackboneOptions:
    """What every head on a backbone reads from its ``model.<mechanism>`` section (the backbone
    itself is the shared ``model.backbone``)."""

    copy_layer: int = -1  # the decoder layer whose cross-attention is the copy attention (-1: the last)
    copy_head: int | None = None  # that layer's head (fairseq's alignment head); null: the mean of its heads
    freeze_encoder: bool = (
        False  # the encoder's parameters are not trained (its token embeddings are, unless frozen too)
    )
    freeze_embeddings: bool = False  # the token embeddings (and the LM head tied to them) are not trained
    head_lr: float | None = None  # learning rate of the head's own parameters (null: train.lr); same schedule
    # Written when the backbone is loaded (a checkpoint rebuilds from them); given by hand only for a
    # backbone built from a config (tests): the Hugging Face config as a dict (``model_type`` and sizes)
    # and the backbone ids of <pad>, <unk>, the decoder start, </s> and <s>.
    backbone_config: dict | None = None
    token_ids: dict | None = None

    def __post_init__(self) -> None:
        if self.head_lr is not None and not self.head_lr > 0:
            raise ValueError(f"head_lr must be > 0 or null, got {self.head_lr!r}")
        if self.copy_head is not None and self.copy_head < 0:
            raise ValueError(f"copy_head must be >= 0 or null, got {self.copy_head!r}")
        if self.token_ids is not None and set(self.token_ids) != set(IDENTITY_TOKEN_IDS):
            raise ValueError(
                f"token_ids needs exactly the keys {sorted(IDENTITY_TOKEN_IDS)}, got {sorted(self.token_ids)}"
            )


def plain_config(config) -> dict:
    """A Hugging Face config as plain JSON data (what ``torch.load(weights_only=True)`` reads back)."""
    return json.loads(config.to_json_string(use_diff=False))


def load_pretrained(name: str):
    """``(model, token ids, project vocabulary size)`` of a pretrained encoder-decoder: a local directory
    or a hub name, safetensors weights only, no remote code, float32, eager attention."""
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    try:
        net = AutoModelForSeq2SeqLM.from_pretrained(
            name, use_safetensors=True, trust_remote_code=False, dtype=torch.float32, attn_implementation="eager"
        )
        tokenizer = AutoTokenizer.from_pretrained(name, trust_remote_code=False)
    except (OSError, ValueError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ValueError(
            f"model.backbone {name!r}: cannot load it as a sequence-to-sequence model with safetensors weights "
            f"and a tokenizer ({first}); give a local directory (save_pretrained) or, with network access, a hub name"
        ) from None
    ids = special_token_ids(net.config, tokenizer)
    return net, ids, len(SPECIALS) + len(tokenizer) - len({i for i in ids.values() if i < len(tokenizer)})


def build_from_config(config: dict, vocab_size: int):
    """A backbone with fresh weights from a config dict (``model_type`` plus its sizes), with at least
    ``vocab_size`` embeddings; eager attention."""
    from transformers import AutoConfig, AutoModelForSeq2SeqLM

    settings = dict(config)
    settings["vocab_size"] = max(int(settings.get("vocab_size") or 0), vocab_size)
    hf_config = AutoConfig.for_model(**settings)
    return AutoModelForSeq2SeqLM.from_config(hf_config, attn_implementation="eager")


def decoder_layers(config) -> int:
    """The number of decoder layers of a Hugging Face encoder-decoder config."""
    for key in ("decoder_layers", "num_decoder_layers", "num_layers"):
        value = getattr(config, key, None)
        if value:
            return int(value)
    raise ValueError(f"{type(config).__name__}: no decoder layer count")


def lm_logits(net, hidden: torch.Tensor) -> torch.Tensor:
    """The backbone's own LM head on decoder outputs (..., D) -> (..., V_backbone), as its forward
    computes it: T5's d_model^-1/2 output scaling, BART/Marian/Pegasus's ``final_logits_bias``."""
    if getattr(net.config, "scale_decoder_outputs", False):
        hidden = hidden * (net.config.d_model**-0.5)
    logits = net.get_output_embeddings()(hidden)
    bias = getattr(net, "final_logits_bias", None)
    return logits if bias is None else logits + bias


class BackboneSeq2Seq(Seq2Seq):
    """The skeleton's interface (``encode``, ``step``, ``teacher_forced``, ``forward``) on a pretrained
    encoder-decoder ``net``; ``output`` is one of the heads of :mod:`models.backbone_heads`."""

    def __init__(self, cfg: ModelConfig, net: nn.Module, output: OutputLayer, opts: BackboneOptions):
        nn.Module.__init__(self)
        self.cfg, self.net, self.output, self.opts = cfg, net, output, opts
        ids = opts.token_ids or IDENTITY_TOKEN_IDS
        src_ids, tgt_ids = project_token_ids(cfg.src_vocab, ids), project_token_ids(cfg.tgt_vocab, ids)
        self.register_buffer("src_ids", torch.tensor(src_ids), persistent=False)  # (V_src,) project id -> backbone id
        self.register_buffer("tgt_ids", torch.tensor(tgt_ids), persistent=False)  # (V,)
        self.identity = tgt_ids == list(range(cfg.tgt_vocab))  # LM scores by a slice (lists: no meta tensors)
        self.n_layers = decoder_layers(net.config)
        heads = getattr(net.config, "decoder_attention_heads", None) or getattr(net.config, "num_heads", None)
        layer = opts.copy_layer if opts.copy_layer >= 0 else self.n_layers + opts.copy_layer
        if not 0 <= layer < self.n_layers:
            raise ValueError(f"copy_layer {opts.copy_layer} is not a layer of a {self.n_layers}-layer decoder")
        if opts.copy_head is not None and heads is not None and opts.copy_head >= heads:
            raise ValueError(f"copy_head {opts.copy_head} is not a head of a {heads}-head cross-attention")
        self.copy_layer = layer
        self.cross_keys = frozenset(f"bb_cross_{kv}{i}" for i in range(self.n_layers) for kv in "kv")
        self.static_state_keys = self.STATIC_KEYS | self.cross_keys | output.static_keys
        self.drop = nn.Identity()  # the backbone applies its own dropout
        self.coverage = "coverage" in output.sequence_keys
        self._freeze()

    @property
    def src_emb(self) -> nn.Embedding:
        """The encoder's token embedding (the skeleton's name for it)."""
        return self.net.get_encoder().embed_tokens

    @property
    def tgt_emb(self) -> nn.Embedding:
        """The decoder's token embedding."""
        return self.net.get_decoder().embed_tokens

    # ------------------------------------------------------------------ fine-tuning
    def _freeze(self) -> None:
        """Key biases never train: softmax cancels q . b_k (the same for every key), so no gradient reaches
        them in exact arithmetic, and Adam would turn their rounding noise into lr-sized steps. Then
        ``freeze_encoder`` / ``freeze_embeddings``."""
        for name, p in self.net.named_parameters():
            if name.endswith("k_proj.bias"):
                p.requires_grad_(False)
        embeddings = {id(self.net.get_input_embeddings().weight), id(self.net.get_output_embeddings().weight)}
        if self.opts.freeze_encoder:
            for p in self.net.get_encoder().parameters():
                if id(p) not in embeddings:
                    p.requires_grad_(False)
        if self.opts.freeze_embeddings:
            self.net.get_input_embeddings().weight.requires_grad_(False)
            self.net.get_output_embeddings().weight.requires_grad_(False)

    def optimizer_groups(self, lr: float) -> list[dict]:
        """The trainable parameters as optimizer groups: the backbone's at ``lr`` and, with ``head_lr``,
        the head's at ``head_lr`` (``lr_scale``: its ratio to ``lr``, which the schedule keeps)."""
        head = [p for p in self.output.parameters() if p.requires_grad]
        mine = {id(p) for p in head}
        body = [p for p in self.parameters() if p.requires_grad and id(p) not in mine]
        if self.opts.head_lr is None:
            return [{"params": body + head, "lr": lr}]
        scale = self.opts.head_lr / lr
        return [{"params": body, "lr": lr}, {"params": head, "lr": self.opts.head_lr, "lr_scale": scale}]

    # ------------------------------------------------------------------ pieces
    def encode(self, batch) -> State:
        mask = batch.src != PAD  # (B, S)
        encoder = self.net.get_encoder()
        memory = encoder(input_ids=self.src_ids[batch.src], attention_mask=mask.long()).last_hidden_state  # (B, S, D)
        return self.start_state(memory, mask, batch.src_ext, batch.n_ext)

    def start_state(self, memory: torch.Tensor, mask: torch.Tensor, src_ext: torch.Tensor, n_ext: int) -> State:
        """The state before the first decoding step, from the encoder states (B, S, D), the source mask
        (B, S), the source's extended ids (B, S) and the number of extended slots X (what ``encode``
        builds, and the Hugging Face face in models/hf builds from ``generate``'s encoder outputs)."""
        state: State = {"memory": memory, "src_mask": mask, "src_ext": src_ext, "n_ext": n_ext}
        if self.coverage:
            state["coverage"] = memory.new_zeros(mask.shape, dtype=memory.dtype)  # (B, S) c^1 = 0 (See eq. 10)
        state.update(self.output.init_state(state))
        return state

    def embed(self, prev_ids: torch.Tensor) -> torch.Tensor:
        """E(y) for extended ids (...) -> (..., D): the decoder's token embedding (an id outside V is <unk>)."""
        ids = self.tgt_ids[prev_ids.masked_fill(prev_ids >= self.cfg.tgt_vocab, UNK)]
        return self.net.get_decoder().embed_tokens(ids)

    def lm_scores(self, s: torch.Tensor) -> torch.Tensor:
        """psi_g: the LM head's scores at the project ids, (B, T, D) -> (B, T, V), <pad> and <s> at NEG."""
        logits = at_least_fp32(lm_logits(self.net, s))
        logits = logits[..., : self.cfg.tgt_vocab] if self.identity else logits.index_select(-1, self.tgt_ids)
        return self.output.mask_unemittable(logits)

    def _cache(self, state: State):
        from transformers import DynamicCache, EncoderDecoderCache

        if "bb_self_k0" not in state:
            return EncoderDecoderCache(DynamicCache(), DynamicCache())
        layers = range(self.n_layers)
        own = DynamicCache([(state[f"bb_self_k{i}"], state[f"bb_self_v{i}"]) for i in layers])
        cross = DynamicCache([(state[f"bb_cross_k{i}"], state[f"bb_cross_v{i}"]) for i in layers])
        return EncoderDecoderCache(own, cross)

    def _cache_state(self, cache) -> State:
        out: State = {}
        for i, (self_k, self_v, _, cross_k, cross_v, _) in enumerate(cache):
            out.update({f"bb_self_k{i}": self_k, f"bb_self_v{i}": self_v})
            out.update({f"bb_cross_k{i}": cross_k, f"bb_cross_v{i}": cross_v})
        return out

    def run_decoder(self, state: State, x: torch.Tensor, cache=None):
        """Decoder inputs x (B, T, D) after the cached positions -> s (B, T, D), the copy attention
        a (B, T, S) (rows sum to 1) and the cache (None: one pass over the whole target, no cache)."""
        out = self.net.get_decoder()(
            inputs_embeds=x,
            encoder_hidden_states=state["memory"],
            encoder_attention_mask=state["src_mask"].long(),
            past_key_values=cache,
            use_cache=cache is not None,
            output_attentions=True,
            return_dict=True,
        )
        weights = out.cross_attentions[self.copy_layer]  # (B, heads, T, S)
        attn = weights.mean(dim=1) if self.opts.copy_head is None else weights[:, self.opts.copy_head]
        attn = attn.masked_fill(~state["src_mask"].unsqueeze(1), 0.0)
        attn = attn / attn.sum(dim=-1, keepdim=True).clamp_min(torch.finfo(attn.dtype).tiny)  # (B, T, S)
        return out.last_hidden_state, attn, out.past_key_values

    def context(self, attn: torch.Tensor, memory: torch.Tensor) -> torch.Tensor:
        """c_t = sum_j a_tj h_j: (B, T, S), (B, S, D) -> (B, T, D)."""
        return torch.bmm(attn.to(memory.dtype), memory)

    # ------------------------------------------------------------------ the skeleton's interface
    def step(self, state: State, prev_ids: torch.Tensor) -> tuple[torch.Tensor, State]:
        """prev_ids (B,) extended ids of y_{t-1} -> log p(y_t) (B, V + X), next state."""
        x = self.output.embed_input(state, prev_ids, self.embed(prev_ids))  # (B, D)
        s, attn, cache = self.run_decoder(state, x.unsqueeze(1), self._cache(state))  # (B, 1, D), (B, 1, S)
        view = {**state, "x": x.unsqueeze(1), "attn": attn, "lm_logits": self.lm_scores(s)}
        for key in self.output.sequence_keys:
            view[key] = state[key].unsqueeze(1)  # (B, 1, S): c^t before this step's update
        scores = self.output.score_all(s, self.context(attn, state["memory"]), view)
        log_probs = self.output.distribution(scores, view).squeeze(1)  # (B, V + X)
        new_state = {**state, **self._cache_state(cache), **self.output.step_updates(scores), "attn": attn[:, 0]}
        if self.coverage:
            new_state["coverage"] = state["coverage"] + attn[:, 0]  # c^{t+1} = c^t + a^t (eq. 10)
        return log_probs, new_state

    def teacher_forced(self, state: State, tgt_in: torch.Tensor) -> State:
        """Phase 1 over the gold prefix (B, T): the view the head's ``score_all`` reads ("s", "context",
        "x", "attn", "lm_logits", the head's sequence keys), in one decoder pass, or through the
        cache position by position when the head feeds something back (``feeds_back``)."""
        emb = self.embed(tgt_in)  # (B, T, D)
        if not getattr(self.output, "feeds_back", False):
            s, attn, _ = self.run_decoder(state, emb)  # (B, T, D), (B, T, S)
            view = {**state, "s": s, "x": emb, "attn": attn}
            if self.coverage:
                view["coverage"] = attn.cumsum(dim=1) - attn  # c^t = sum_{t' < t} a^{t'} (eq. 10), (B, T, S)
        else:
            cache, steps = self._cache(state), {"s": [], "x": [], "attn": []}
            for t in range(tgt_in.size(1)):
                x_t = self.output.embed_input(state, tgt_in[:, t], emb[:, t])  # (B, D)
                s_t, a_t, cache = self.run_decoder(state, x_t.unsqueeze(1), cache)
                state = {**state, **self.output.feedback(s_t[:, 0], state)}
                steps["s"].append(s_t[:, 0])
                steps["x"].append(x_t)
                steps["attn"].append(a_t[:, 0])
            view = {**state, **{key: torch.stack(seq, dim=1) for key, seq in steps.items()}}
        view["context"] = self.context(view["attn"], state["memory"])  # (B, T, D)
        view["lm_logits"] = self.lm_scores(view["s"])  # (B, T, V): phase 2's one product over all positions
        return view

    def compile_recurrence(self, **options) -> Seq2Seq:
        """``train.compile``: the head's ``score_all`` (the backbone is Hugging Face's code, left as it is)."""
        self.output.score_all = torch.compile(self.output.score_all, **{"dynamic": None, **options})
        return self


def build_backbone_model(cfg: ModelConfig, name: str, options_class: type, make_output) -> BackboneSeq2Seq:
    """The builder of every head: ``make_output(d_model, cfg, opts)`` on the backbone ``cfg.backbone``
    (loaded, and recorded in the options) or on the config recorded in ``cfg.options``."""
    opts = parse_options(options_class, cfg.options, name)
    if cfg.features_vocab:
        raise ValueError(
            f"{name} runs on a pretrained backbone, which takes no features (model.features_vocab "
            f"{cfg.features_vocab}, from the task's features column): drop its rows from this task, or the column"
        )
    if opts.backbone_config is not None:
        ids = opts.token_ids or IDENTITY_TOKEN_IDS
        needed = max(project_token_ids(max(cfg.src_vocab, cfg.tgt_vocab), ids)) + 1
        net = build_from_config(opts.backbone_config, needed)
    elif cfg.backbone:
        net, ids, size = load_pretrained(cfg.backbone)
        if (cfg.src_vocab, cfg.tgt_vocab) != (size, size):
            raise ValueError(
                f"{name} on {cfg.backbone}: its tokenizer gives a vocabulary of {size} ids, the model was given "
                f"{cfg.src_vocab} (source) and {cfg.tgt_vocab} (target): use the vocabulary the vocab stage wrote "
                "for this backbone (data/vocab/<task>/backbones/<name>/), not a word vocabulary"
            )
        options = {**cfg.options, "backbone_config": plain_config(net.config), "token_ids": ids}
        cfg = replace(cfg, options=options)
        opts = parse_options(options_class, options, name)
    else:
        raise ValueError(
            f"{name} runs on a pretrained encoder-decoder: set model.backbone (a local directory or a hub name) "
            "for its row (params.yaml variants, docs/pretrained.md)"
        )
    needed = max(project_token_ids(max(cfg.src_vocab, cfg.tgt_vocab), opts.token_ids or IDENTITY_TOKEN_IDS)) + 1
    have = net.get_input_embeddings().num_embeddings
    if needed > have:
        raise ValueError(
            f"{name}: the vocabulary has {max(cfg.src_vocab, cfg.tgt_vocab)} ids, which need backbone ids up to "
            f"{needed - 1}, but {cfg.backbone or 'the backbone'} has {have} embeddings: use the vocabulary the vocab "
            "stage wrote with this backbone's tokenizer"
        )
    return BackboneSeq2Seq(cfg, net, make_output(net.config.d_model, cfg, opts), opts)
