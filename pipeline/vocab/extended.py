"""The extended vocabulary, per example: source OOVs to ids ``V .. V+X-1`` and back.

``extend_example`` gives one example's source and target in extended ids (its source words outside
the decoder vocabulary numbered from ``V`` in order of first appearance; a target OOV found in the
source gets that id, any other ``<unk>``); ``ext_ids_to_tokens`` maps decoded ids back to words.
The batched maths over these ids (the copy-mass scatter, the normalisers, the gold read) is in
``models.extended``; ``pipeline.vocab.encoded`` numbers OOVs the same way, vectorised over whole shards.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.vocab.vocabulary import EOS, PAD, UNK, Vocab


@dataclass(frozen=True)
class ExtendedExample:
    src_ext: list[int]  # source tokens as decoder ids, OOVs as V + k
    tgt_ext: list[int]  # target tokens as decoder ids; OOVs found in the source as V + k, else UNK
    oovs: list[str]  # oovs[k] is the word with extended id V + k


def extend_example(src: list[str], tgt: list[str] | None, tgt_vocab: Vocab) -> ExtendedExample:
    """Number one example's source OOVs (w.r.t. the decoder vocabulary) from ``len(tgt_vocab)``."""
    size = len(tgt_vocab)
    oov_ids: dict[str, int] = {}
    src_ext = []
    for tok in src:
        i = tgt_vocab.stoi.get(tok)
        if i is None:
            i = oov_ids.setdefault(tok, size + len(oov_ids))
        src_ext.append(i)
    tgt_ext = []
    for tok in tgt or ():
        i = tgt_vocab.stoi.get(tok)
        tgt_ext.append(i if i is not None else oov_ids.get(tok, UNK))
    return ExtendedExample(src_ext, tgt_ext, list(oov_ids))


def ext_ids_to_tokens(ids: list[int], oovs: list[str], tgt_vocab: Vocab) -> list[str]:
    """Map extended ids back to words, stopping at ``</s>``; ``<pad>`` is skipped."""
    size = len(tgt_vocab)
    out = []
    for i in ids:
        if i == EOS:
            break
        if i == PAD:
            continue
        if i >= size:
            k = i - size
            out.append(oovs[k] if k < len(oovs) else tgt_vocab.itos[UNK])
        else:
            out.append(tgt_vocab.itos[i])
    return out
