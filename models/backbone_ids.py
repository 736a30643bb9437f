"""The map between the project's ids and a pretrained backbone's (models/backbone.py), shared with the
vocab stage, which writes the backbone tokenizer's pieces in this order (pipeline/vocab/tokenizer.py).
Imports nothing but the specials, so the vocab stage depends on this file alone."""

from __future__ import annotations

from models.specials import BOS, EOS, PAD, UNK

# Backbone ids of the project's specials when a backbone is built from a config alone (the contract
# tests' tiny ones): the project's own ids, so the map is the identity.
IDENTITY_TOKEN_IDS = {"pad": PAD, "unk": UNK, "start": BOS, "eos": EOS, "bos": BOS}


def project_token_ids(size: int, token_ids: dict) -> list[int]:
    """The backbone id of each project id 0 .. size - 1: <pad>, <unk>, <s> (the decoder start) and
    </s> first, then every other backbone id in increasing order, the backbone's specials (pad, unk,
    decoder start, eos, bos) left out. The same rule numbers the tokenizer's pieces in the vocab stage."""
    first = [token_ids["pad"], token_ids["unk"], token_ids["start"], token_ids["eos"]]
    skip = set(first) | {token_ids["bos"]}
    out, i = list(first), 0
    while len(out) < size:
        if i not in skip:
            out.append(i)
        i += 1
    return out[:size]


def special_token_ids(config, tokenizer) -> dict:
    """The backbone ids of <pad>, <unk>, the decoder start, </s> and <s> from its config and
    tokenizer (the tokenizer's where it has them); a ValueError naming what is missing."""
    ids = {
        "pad": tokenizer.pad_token_id if tokenizer.pad_token_id is not None else config.pad_token_id,
        "unk": tokenizer.unk_token_id,
        "eos": tokenizer.eos_token_id if tokenizer.eos_token_id is not None else config.eos_token_id,
        "start": getattr(config, "decoder_start_token_id", None),
    }
    if ids["start"] is None:
        ids["start"] = getattr(config, "bos_token_id", None)
        ids["start"] = ids["pad"] if ids["start"] is None else ids["start"]
    bos = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else getattr(config, "bos_token_id", None)
    missing = sorted(k for k, v in ids.items() if v is None)
    if missing:
        raise ValueError(
            f"the backbone's tokenizer/config names no {', '.join(missing)} token id: a copy head needs <pad>, "
            "<unk>, </s> and a decoder start token"
        )
    ids["bos"] = ids["start"] if bos is None else bos
    return {k: int(v) for k, v in ids.items()}
