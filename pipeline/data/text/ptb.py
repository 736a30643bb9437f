"""Penn-Treebank tokenisation as in the Rush et al. (2015) Gigaword data, and lead-sentence splitting.

Rush, Chopra & Weston (2015, section 7) build their (first sentence, headline) pairs from the
Annotated Gigaword, which was tokenised by Stanford CoreNLP's ``PTBTokenizer`` (PTB3 escaping).
The released files (``train.article.txt``, ``input.txt``, ...) show its conventions, which
:func:`tokenize` reproduces (case preserved; lowercasing and ``#`` digits are
:func:`pipeline.data.text.normalize.rush_normalize`):

* clitics split: ``Japan's -> Japan 's``, ``can't -> ca n't``, ``won't -> wo n't``, ``'re 've 'll 'd
  'm`` likewise; ``cannot -> can not``, ``gonna -> gon na``; a plural possessive's apostrophe
  is its own token (``guards ' command``);
* double quotes become ````` / ``''`` by position, an opening single quote `````; TREC text that already
  has ````` / ``''`` keeps them; Unicode curly quotes map to the same;
* brackets ``( ) [ ] { }`` -> ``-LRB- -RRB- -LSB- -RSB- -LCB- -RCB-``; ``/`` -> ``\\/`` and ``*`` -> ``\\*``
  (``1\\/2``, ``dutch\\/shell``);
* numbers stay whole (``1,000  3.5  12:30  .300``), ``$``/``%`` split off; currency prefixes stay
  whole (``US$``, ``NT$``, ``HK$``), as ``us$``/``nt$`` in the Rush files;
* hyphenated and slashed compounds, ``AT&T`` and internal-period words stay whole
  (``power-sharing``, ``U.S.-led``); a prefix before a space keeps its hyphen (``pro-``); ``--``;
* a word-final period is split off unless the word is an abbreviation (``Corp.``, ``Mr.``, ``U.S.``,
  initials ``W.``); an abbreviation that ends the text also gets a sentence-final ``.``, as
  CoreNLP does (``co. .`` in ``input.txt``).

Written by hand: nltk's ``TreebankWordTokenizer`` (what Rush's ``make_DUC.py`` used for DUC) leaves
brackets unescaped, splits ``AT&T`` and keeps ``U.S`` without its period at a sentence end, and
the CoreNLP tokeniser itself is Java. One compiled regex scans the text once.

:func:`first_sentence_end` finds the end of the first sentence that ends with a period (the Rush
pipeline cuts the lead at the first ``.`` token, ``process_agiga.py``); see its docstring.
"""

from __future__ import annotations

import re

# Abbreviations that keep their period (lowercase, without it). NONFINAL ones precede a name or a
# number and never end a sentence; AMBIGUOUS ones end one only before a typical sentence opener.
# Both lists apply to capitalised words only (``Corp.``, ``CORP.``; not ``ill.`` or ``no.``), as
# CoreNLP's lists are of capitalised forms; LOWERCASE_ABBREVIATIONS are the exceptions.
NONFINAL_ABBREVIATIONS = frozenset(
    """mr mrs ms messrs dr prof gen sen rep gov lt col capt cmdr sgt maj adm rev hon pres supt
    brig cpl pvt gens sens reps govs st mt ft no nos vol fig vs
    jan feb mar apr jun jul aug sep sept oct nov dec""".split()
)
AMBIGUOUS_ABBREVIATIONS = frozenset(
    """corp inc co ltd bros plc cos llc assn dept govt jr sr esq etc approx est ave blvd rd
    mon tue tues wed thu thur thurs fri sat sun ph.d
    ala ariz ark calif colo conn del fla ga ill ind kan kans ky la md mass mich minn miss mo mont
    neb nev okla ore pa tenn tex va vt wash wis wyo""".split()
)
LOWERCASE_ABBREVIATIONS = frozenset("etc approx vs".split())
# Words that typically open a sentence: after an AMBIGUOUS abbreviation they mark a boundary.
SENTENCE_OPENERS = frozenset(
    """the a an he she it they we i you this that these those there his her its their our my
    in on at as but and or so yet after before when while if however meanwhile also then
    some many most one two several both all each no not mr mrs ms dr officials police""".split()
)

_ACRONYM = re.compile(r"(?:[A-Za-z]\.)+[A-Za-z]")  # U.S (final period matched separately)
_CLOSERS = "\"'`)]}"

_BRACKETS = {"(": "-LRB-", ")": "-RRB-", "[": "-LSB-", "]": "-RSB-", "{": "-LCB-", "}": "-RCB-"}
_OPENING_CONTEXT = set(" \t\n\r([{<-")  # a quote after one of these (or at the start) opens
_UNICODE = str.maketrans(
    {
        "\u201c": "``",
        "\u201e": "``",
        "\u201d": "''",
        "\u2018": "`",
        "\u2019": "'",
        "\u2026": "...",
        "\u2014": "--",
        "\u2013": "--",
        "\u00a0": " ",
    }
)
_CLITIC = re.compile(r"(?i)^(.+?)('s|'m|'d|'ll|'re|'ve|n't)$")
_SPLIT_WORDS = {"cannot": 3, "gonna": 3, "gotta": 3, "wanna": 3}  # cannot -> can not, gonna -> gon na

_TOKEN = re.compile(
    r"""
      (?P<quote>``|'')                                 # already PTB quotes (TREC text)
    | (?P<dquote>")
    | (?P<ellipsis>\.\.\.+)
    | (?P<dashes>--+)
    | (?P<currency>(?<![A-Za-z])[A-Z]{1,3}\$|\$)        # US$ NT$ HK$ $
    | (?P<acronym>(?:[A-Za-z]\.){2,}(?:-\w+)*)           # U.S. a.m. U.S.-led (period included)
    | (?P<decimal>(?<![\w.])\.\d+(?:[.,]\d+)*)           # .300
    | (?P<word>\w+(?:(?:[-/&'.]|(?<=\d)[,:])\w+)*)       # words, numbers, compounds, AT&T, O'Neill
      (?P<tail>-(?=\s|$)|\.(?![.\w]))?                   # pro- ; a final period (decided below)
    | (?P<other>\S)
    """,
    re.VERBOSE,
)


def abbreviation_kind(word: str) -> str | None:
    """``"nonfinal"``, ``"ambiguous"`` or None (not an abbreviation) for a word before a period."""
    low = word.lower()
    if len(word) == 1 and word.isalpha():
        return "nonfinal" if word.isupper() else None  # initials: W. Bush
    if _ACRONYM.fullmatch(word):
        return "ambiguous"  # U.S. a.m.
    if not word[:1].isupper() and low not in LOWERCASE_ABBREVIATIONS:
        return None
    if low in NONFINAL_ABBREVIATIONS:
        return "nonfinal"
    if low in AMBIGUOUS_ABBREVIATIONS:
        return "ambiguous"
    return None


def _at_text_end(text: str, pos: int) -> bool:
    """True if only closing quotes/brackets and spaces follow ``pos``."""
    return not text[pos:].strip().strip(_CLOSERS)


def _split_word(word: str) -> list[str]:
    """Clitics off a word token (``Japan's -> Japan 's``), ``cannot -> can not``; escape ``/``."""
    word = word.replace("/", "\\/")
    cut = _SPLIT_WORDS.get(word.lower())
    if cut is not None:
        return [word[:cut], word[cut:]]
    if "'" in word:
        m = _CLITIC.match(word)
        if m:
            return [m.group(1), m.group(2)]
    return [word]


def tokenize(text: str) -> list[str]:
    """PTB tokens of ``text`` (case preserved), in the conventions of the Rush et al. files."""
    text = text.translate(_UNICODE)
    tokens: list[str] = []
    for m in _TOKEN.finditer(text):
        kind = m.lastgroup if m.lastgroup != "tail" else "word"
        start = m.start()
        if kind == "word":
            word, tail = m.group("word"), m.group("tail")
            if tail == "." and abbreviation_kind(word) is not None:
                tokens.append(word.replace("/", "\\/") + ".")
                if _at_text_end(text, m.end()):
                    tokens.append(".")  # CoreNLP: a sentence-final abbreviation gets its own '.'
                continue
            tokens.extend(_split_word(word))
            if tail == "-":
                tokens[-1] += "-"
            elif tail == ".":
                tokens.append(".")
        elif kind == "acronym":
            tokens.append(m.group())
            if m.group().endswith(".") and _at_text_end(text, m.end()):
                tokens.append(".")
        elif kind == "dquote":
            tokens.append("``" if start == 0 or text[start - 1] in _OPENING_CONTEXT else "''")
        elif kind == "other":
            tokens.append(_other(m.group(), text, start))
        else:  # quote, ellipsis, dashes, currency, decimal
            tokens.append(m.group())
    return tokens


def _other(char: str, text: str, start: int) -> str:
    """A single punctuation character: brackets escaped, quotes by position, ``/`` ``*`` escaped."""
    if char in _BRACKETS:
        return _BRACKETS[char]
    if char == "'":
        opening = (start == 0 or text[start - 1] in _OPENING_CONTEXT) and not text[start + 1 : start + 2].isspace()
        return "`" if opening else "'"
    if char == "/":
        return "\\/"
    if char == "*":
        return "\\*"
    return char


# --------------------------------------------------------------------------- #
# Lead sentence
# --------------------------------------------------------------------------- #

# A period (not part of an ellipsis) with the word before it and any closing quotes after it,
# followed by whitespace or the end of the text.
_PERIOD = re.compile(r"(?P<word>[\w.&'-]*)(?<!\.)\.(?P<close>(?:''|[\"'`)\]}])*)(?=\s|$)")
_NEXT_WORD = re.compile(r"\s*(?P<lead>[`'\"(\[{]*)(?P<word>[\w'-]*)")


def first_sentence_end(text: str) -> int | None:
    """Offset just past the first sentence of ``text`` that ends with a period, or None.

    The Rush pipeline keeps the lead paragraph's tokens up to its first ``.`` token
    (``process_agiga.py``), so ``?`` and ``!`` do not end the lead. A period ends a sentence when
    it is followed by whitespace (closing quotes may sit between) and:

    * the word before it is no abbreviation, and the next word does not start lowercase; or
    * the word is an ambiguous abbreviation (``Corp.``, ``U.S.``, ``Fla.``) and the next word is
      a typical sentence opener (``The``, ``He``, ``In`` ...); or
    * it is the end of the text.

    Name titles, months and initials (``Mr.``, ``Sept.``, ``W.``) never end a sentence.
    """
    for m in _PERIOD.finditer(text):
        end = m.end()
        nxt = _NEXT_WORD.match(text, end)
        following = nxt.group("word") if nxt else ""
        if not text[end:].strip():
            return end
        kind = abbreviation_kind(m.group("word").rsplit("-", 1)[-1]) if m.group("word") else None
        if kind == "nonfinal":
            continue
        if kind == "ambiguous":
            if following.lower() in SENTENCE_OPENERS and following[:1].isupper():
                return end
            continue
        if following[:1].islower():
            continue
        return end
    return None
