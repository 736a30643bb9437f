"""Tiny BART-, T5- and Marian-shaped backbones made here, with fresh weights and a tokenizer trained on
the task's own text: what the CPU preset, the tests and the benchmarks run the backbone rows on (no
download anywhere). Real pretrained backbones are a directory or a hub name (docs/pretrained.md).

``python -m pipeline.vocab.tiny_backbone --kind bart --shards data/shards/copy_rules/train --out data/backbones/tiny_bart``

BART and T5: a fast BPE tokenizer without byte fallback (Metaspace pre-tokenizer and decoder, as
sentencepiece's ``▁`` pieces). Marian: the real ``MarianTokenizer`` (slow: Marian has no fast one),
over two sentencepiece models trained here, the source's on the sources and the target's on the
targets, and one shared ``vocab.json``, as the Helsinki-NLP opus-mt models have them. Either way a
character absent from the text it was trained on is its <unk>, so a source piece outside the
vocabulary exists, as with real tokenizers on unseen scripts. The special tokens sit where each
family puts them (BART: <s> <pad> </s> <unk>; T5: <pad> </s> <unk>; Marian: </s> <unk> first and
<pad>, the decoder start, last), so the id map (models/backbone_ids.py) is exercised as with the
real ones.
"""

from __future__ import annotations

import argparse
import io
import json
import tempfile
from collections.abc import Iterable
from pathlib import Path

import torch

from pipeline.io.shards import read_split

KINDS = ("bart", "t5", "marian")
SPECIALS_BY_KIND = {
    "bart": ["<s>", "<pad>", "</s>", "<unk>"],
    "t5": ["<pad>", "</s>", "<unk>"],
    "marian": ["</s>", "<unk>", "<pad>"],
}


def train_tokenizer(texts: Iterable[str], kind: str, vocab_size: int = 400, target_texts: Iterable[str] | None = None):
    """A tokenizer trained on ``texts`` with ``kind``'s special tokens: a fast BPE (no byte fallback),
    or for Marian the real MarianTokenizer (its target model trained on ``target_texts``, default
    ``texts``)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    if kind == "marian":
        return train_marian_tokenizer(texts, texts if target_texts is None else target_texts, vocab_size)
    specials = SPECIALS_BY_KIND[kind]
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    tok.train_from_iterator(
        list(texts), trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials, show_progress=False)
    )
    named = {"unk_token": "<unk>", "pad_token": "<pad>", "eos_token": "</s>"}
    if "<s>" in specials:
        named["bos_token"] = "<s>"
    return PreTrainedTokenizerFast(tokenizer_object=tok, **named)


def _sentencepiece_model(texts: Iterable[str], vocab_size: int) -> bytes:
    import sentencepiece as spm

    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(list(texts)),
        model_writer=model,
        vocab_size=vocab_size,
        model_type="unigram",
        character_coverage=1.0,
        hard_vocab_limit=False,  # a tiny text may hold fewer pieces than asked for
        unk_id=0,
        bos_id=-1,
        eos_id=1,
        pad_id=-1,
        minloglevel=2,
    )
    return model.getvalue()


def train_marian_tokenizer(texts: Iterable[str], target_texts: Iterable[str], vocab_size: int = 400):
    """Marian's own tokenizer: ``source.spm`` trained on ``texts``, ``target.spm`` on ``target_texts``
    (half ``vocab_size`` each), one ``vocab.json`` over both models' pieces: </s> 0, <unk> 1, the
    pieces, <pad> last (as opus-mt's)."""
    import sentencepiece as spm
    from transformers import MarianTokenizer

    vocab = {"</s>": 0, "<unk>": 1}
    with tempfile.TemporaryDirectory(prefix="tiny_marian_") as tmp:  # the tokenizer holds what it read
        files = Path(tmp)
        for name, side in (("source.spm", texts), ("target.spm", target_texts)):
            (files / name).write_bytes(_sentencepiece_model(side, max(vocab_size // 2, 8)))
            model = spm.SentencePieceProcessor(model_file=str(files / name))
            for i in range(model.get_piece_size()):
                if not (model.is_unknown(i) or model.is_control(i)):
                    vocab.setdefault(model.id_to_piece(i), len(vocab))
        vocab["<pad>"] = len(vocab)
        (files / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
        return MarianTokenizer(str(files / "source.spm"), str(files / "target.spm"), str(files / "vocab.json"))


def tiny_config(kind: str, tokenizer, d_model: int = 32, layers: int = 2, heads: int = 2, dropout: float = 0.0):
    """A Hugging Face config of ``kind`` sized for a CPU, with the tokenizer's special ids."""
    from transformers import BartConfig, MarianConfig, T5Config

    pad, eos = tokenizer.pad_token_id, tokenizer.eos_token_id
    size = len(tokenizer)
    if kind == "t5":
        return T5Config(
            vocab_size=size,
            d_model=d_model,
            d_kv=d_model // heads,
            d_ff=2 * d_model,
            num_layers=layers,
            num_decoder_layers=layers,
            num_heads=heads,
            dropout_rate=dropout,
            pad_token_id=pad,
            eos_token_id=eos,
            decoder_start_token_id=pad,
        )
    shared = dict(
        vocab_size=size,
        d_model=d_model,
        encoder_layers=layers,
        decoder_layers=layers,
        encoder_attention_heads=heads,
        decoder_attention_heads=heads,
        encoder_ffn_dim=2 * d_model,
        decoder_ffn_dim=2 * d_model,
        max_position_embeddings=512,
        dropout=dropout,
        attention_dropout=0.0,
        activation_dropout=0.0,
        pad_token_id=pad,
        eos_token_id=eos,
        forced_eos_token_id=None,
    )
    if kind == "bart":
        return BartConfig(
            **shared, bos_token_id=tokenizer.bos_token_id, decoder_start_token_id=eos, forced_bos_token_id=None
        )
    return MarianConfig(**shared, decoder_start_token_id=pad, share_encoder_decoder_embeddings=True)


def make_tiny_backbone(
    kind: str,
    texts: Iterable[str],
    out: str | Path,
    seed: int = 0,
    vocab_size: int = 400,
    target_texts: Iterable[str] | None = None,
    **sizes,
) -> Path:
    """Train a tokenizer on ``texts`` (Marian's target model on ``target_texts``, default ``texts``),
    build a ``kind`` model with fresh weights (``seed``) and save both to ``out`` (safetensors),
    loadable by ``from_pretrained(out)``."""
    from transformers import AutoModelForSeq2SeqLM

    if kind not in KINDS:
        raise ValueError(f"unknown backbone kind {kind!r}; known: {', '.join(KINDS)}")
    out = Path(out)
    tokenizer = train_tokenizer(texts, kind, vocab_size, target_texts)
    torch.manual_seed(seed)
    model = AutoModelForSeq2SeqLM.from_config(tiny_config(kind, tokenizer, **sizes))
    model.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    return out


def shard_texts(split_dir: str | Path, columns: Iterable[str] = ("src", "tgt")) -> list[str]:
    """Every source and target (``columns``) of a shard split, tokens joined by spaces."""
    table = read_split(Path(split_dir))
    return [" ".join(row) for column in columns for row in table.column(column).to_pylist()]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kind", choices=KINDS, required=True)
    parser.add_argument(
        "--shards", required=True, help="a shard split whose text trains the tokenizer (data/shards/<task>/train)"
    )
    parser.add_argument("--out", required=True, help="the directory to write (model.backbone names it)")
    parser.add_argument("--d-model", type=int, default=32)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=2)
    parser.add_argument("--vocab-size", type=int, default=400)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    separate = args.kind == "marian"  # Marian's source and target sentencepiece models
    out = make_tiny_backbone(
        args.kind,
        shard_texts(args.shards, ("src",) if separate else ("src", "tgt")),
        args.out,
        args.seed,
        args.vocab_size,
        shard_texts(args.shards, ("tgt",)) if separate else None,
        d_model=args.d_model,
        layers=args.layers,
        heads=args.heads,
    )
    print(f"{out}: a {args.kind}-shaped backbone with fresh weights and a tokenizer trained on {args.shards}")


if __name__ == "__main__":
    main()
