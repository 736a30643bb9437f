"""Pointer Softmax section 5.1, the rarest-word detection task: pointer softmax vs a plain softmax.

(a) ``pointer_softmax``: shortlist softmax over the 540 most frequent words (option shortlist = 4
    specials + 540), pointers for the rarest 60 (the batch's ``tgt_pointer``/``tgt_switch``), switch
    d_t = sigmoid(2x) (temperature 2, as 5.1); decoded with the paper's test-time rule (argmax over
    [d w; (1 - d) l], ``decode: max``) and, for comparison, with the marginal view.
(b) ``softmax``: RNNSearch (models.baselines) with a plain softmax over all 600 words.
(c) ``encdec_softmax`` (optional): Enc-Dec, the same plain softmax read from the encoder's summary
    only, without attention -- closer to 5.1's baseline ("a GRU layer over the input sequence and
    take the last hidden state ... to get the summary c_t").

Both are the project's shared encoder-decoder (BiGRU encoder, Bahdanau GRU decoder), trained on
freshly generated batches every step (the same stream for both), Adam; the paper's batch size 250
and learning rate 8e-4 are the defaults, its hidden size 1000 is not (CPU budget). Error rate = the
fraction of the fixed, seeded test set whose first greedy output token is not the rarest word,
also split by whether that word is one of the 60 pointer words. Prints the numbers and wall times;
``--out`` writes them as JSON.

    python scripts/rarest_word_experiment.py --steps 3000 --out rarest_word.json
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

import torch

from models.baselines import build_encdec, build_rnnsearch  # noqa: E402
from models.config import ModelConfig  # noqa: E402
from models.pointer_softmax import build_pointer_softmax  # noqa: E402
from pipeline.data.corpora.rarest_word import Config, fixed_split, sample_examples, vocabulary
from pipeline.decoding.search import greedy  # noqa: E402
from pipeline.training.loop import nll_loss  # noqa: E402
from pipeline.vocab.batching import collate  # noqa: E402
from pipeline.vocab.vocabulary import SPECIALS  # noqa: E402


def to_batch(rows: list[dict], vocab):
    return collate(
        [r["src"] for r in rows],
        [r["tgt"] for r in rows],
        vocab,
        vocab,
        pointers=[r["tgt_pointer"] for r in rows],
        switches=[r["tgt_switch"] for r in rows],
    )


def build(name: str, task: Config, vocab, args) -> torch.nn.Module:
    options = {}
    if name == "pointer_softmax":
        options = {
            "shortlist": len(SPECIALS) + task.shortlist_words,
            "temperature": args.temperature,
            "switch_bias": args.switch_bias,
        }
    cfg = ModelConfig(src_vocab=len(vocab), tgt_vocab=len(vocab), emb=args.emb, hidden=args.hidden, options=options)
    torch.manual_seed(args.seed)
    builders = {"pointer_softmax": build_pointer_softmax, "softmax": build_rnnsearch, "encdec_softmax": build_encdec}
    return builders[name](cfg)


@torch.no_grad()
def error_rates(model, rows: list[dict], vocab, task: Config, decode: str | None = None) -> dict:
    """Error rate of the first greedy token, overall and on pointer / shortlist answers."""
    model.eval()
    if decode is not None:
        model.output.decode = decode
    wrong = {True: 0, False: 0}
    total = {True: 0, False: 0}
    for i in range(0, len(rows), 500):
        chunk = rows[i : i + 500]
        batch = to_batch(chunk, vocab)
        hyps = greedy(model, batch, max_len=1)
        for row, hyp, gold in zip(chunk, hyps, batch.tgt_out[:, 0].tolist()):
            pointed = bool(row["tgt_switch"][0])
            total[pointed] += 1
            wrong[pointed] += hyp.ids[:1] != [gold]
    model.train()
    n = total[True] + total[False]
    return {
        "error": (wrong[True] + wrong[False]) / n,
        "error_pointer_words": wrong[True] / max(1, total[True]),
        "error_shortlist_words": wrong[False] / max(1, total[False]),
        "n": n,
        "n_pointer_words": total[True],
    }


def train(name: str, task: Config, vocab, valid: list[dict], args) -> tuple[torch.nn.Module, list[dict], float]:
    model = build(name, task, vocab, args).train()
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    rng = random.Random(f"rarest-word/{task.seed}/fresh/{args.seed}")  # same stream for both models
    curve, t0 = [], time.perf_counter()
    for step in range(1, args.steps + 1):
        batch = to_batch(sample_examples(task, rng, args.batch), vocab)
        loss, _ = nll_loss(model, batch)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        opt.step()
        if step % args.eval_every == 0 or step == args.steps:
            err = error_rates(model, valid, vocab, task)
            curve.append(
                {"step": step, "loss": loss.item(), "valid_error": err["error"], "seconds": time.perf_counter() - t0}
            )
            print(
                f"[{name}] step {step} loss {loss.item():.4f} valid error {err['error']:.3f} "
                f"(pointer words {err['error_pointer_words']:.3f}) {time.perf_counter() - t0:.0f}s",
                flush=True,
            )
    return model, curve, time.perf_counter() - t0


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--batch", type=int, default=250)  # paper: 250
    ap.add_argument("--lr", type=float, default=8e-4)  # paper: 8e-4 (Adam)
    ap.add_argument("--emb", type=int, default=64)
    ap.add_argument("--hidden", type=int, default=128)  # paper: 1000
    ap.add_argument("--clip", type=float, default=5.0)
    ap.add_argument("--temperature", type=float, default=2.0)  # 5.1: d_t = sigma(2x)
    ap.add_argument("--switch-bias", type=float, default=-1.0)
    ap.add_argument("--ratio", type=float, default=Config.ratio)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--valid-size", type=int, default=2000)
    ap.add_argument("--test-size", type=int, default=2000)
    ap.add_argument("--eval-every", type=int, default=500)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--models", default="pointer_softmax,softmax")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)

    torch.set_num_threads(args.threads)
    task = Config(ratio=args.ratio, seed=args.seed, valid_size=args.valid_size, test_size=args.test_size)
    vocab = vocabulary(task)
    valid, test = fixed_split(task, "valid"), fixed_split(task, "test")
    results = {
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "task": {
            "vocab_size": task.vocab_size,
            "seq_len": task.seq_len,
            "ratio": task.ratio,
            "n_pointer": task.n_pointer,
            "test_pointer_answers": sum(r["tgt_switch"][0] for r in test),
        },
        "paper": {"pointer_softmax": 0.174, "softmax (over all 600 tokens)": 0.482},
    }
    for name in args.models.split(","):
        model, curve, seconds = train(name, task, vocab, valid, args)
        entry = {"train_seconds": seconds, "curve": curve}
        if name == "pointer_softmax":
            entry["test"] = error_rates(model, test, vocab, task, decode="max")  # the paper's rule (4.1)
            entry["test_marginal"] = error_rates(model, test, vocab, task, decode="marginal")
        else:
            entry["test"] = error_rates(model, test, vocab, task)
        results[name] = entry
        print(
            f"[{name}] TEST error {entry['test']['error']:.3f} (pointer words "
            f"{entry['test']['error_pointer_words']:.3f}, shortlist words {entry['test']['error_shortlist_words']:.3f})"
            f"; trained {args.steps} steps in {seconds:.0f}s",
            flush=True,
        )
    if args.out:
        args.out.write_text(json.dumps(results, indent=2))
    return results


if __name__ == "__main__":
    main()
