"""The decoder a benchmark row runs on (``model.decoder``: each mechanism's own recurrent decoder or
the Transformer decoder, models/transformer_decoder.py): command-line options, sizes and row labels,
shared by bench_training.py and bench_mechanisms.py."""

from __future__ import annotations

import argparse

from models.registry import DISPLAY_NAMES, mechanism

DECODERS = ("recurrent", "transformer")


def add_decoder_args(p: argparse.ArgumentParser) -> None:
    """``--decoders`` (rows per decoder) and the Transformer decoder's sizes (params.yaml's defaults)."""
    p.add_argument(
        "--decoders", nargs="+", default=["recurrent"], choices=DECODERS, help="a row per mechanism and decoder"
    )
    p.add_argument("--decoder-layers", type=int, default=2, help="Transformer decoder layers")
    p.add_argument("--decoder-heads", type=int, default=4, help="Transformer decoder heads (must divide --hidden)")


def decoder_sizes(decoder: str, args: argparse.Namespace) -> dict:
    """The ModelConfig fields of ``decoder`` (d_model = hidden, feed-forward 4 x hidden)."""
    if decoder == "recurrent":
        return {}
    return {"decoder": decoder, "decoder_layers": args.decoder_layers, "decoder_heads": args.decoder_heads}


def rows(names: list[str], decoders: list[str]) -> list[tuple[str, str]]:
    """(mechanism, decoder) pairs to run, decoder-major as given; a mechanism that refuses a decoder
    (Read-Again: the transformer) is left out of that decoder's rows."""
    return [(name, d) for d in decoders for name in names if d in mechanism(name).decoders]


def label(name: str, decoder: str) -> str:
    """The row's name: the mechanism's display name, with the decoder when it is not its own."""
    return DISPLAY_NAMES[name] + (" (Transformer decoder)" if decoder == "transformer" else "")
