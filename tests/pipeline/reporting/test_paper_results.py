"""The published tables: shape, task wiring, and every number against the papers' text.

Three layers of guard against a typo on an edit:
1. structure (every row as long as its columns, every task's tables exist, labels/analogues sane);
2. hand-picked spot checks, each with the paper line it was read from, and equalities the papers
   state in their prose (WEAN's "+6.3 BLEU", Pointer Softmax's "about 3.6 BLEU" ...) or between
   tables (WEAN reprints CopyNet's LCSTS numbers; Read-Again's Table 4 110K row is Table 3's 15K row);
3. when ../shared/papers is present, each row against the numbers on the line of the paper's text
   that pipeline/reporting/paper_results.yaml records for it, and the table it names against the caption there
   (skipped when absent, never failed for it).
Plus the loader: the YAML read once, every row's provenance present, bad edits refused by name.
"""

from __future__ import annotations

import math
import re
import tomllib

import pytest

from pipeline.reporting import paper_results as pr
from pipeline.reporting.paper_results import MECHANISM_KEYS, PAPER_TABLES
from tests.helpers import REPO

PAPERS = REPO.parent / "shared" / "papers"  # the repository's sibling directory; users won't have it
COPYNET, PS, WEAN, READ_AGAIN = (
    "000_6c68d453ca25dfa2.txt",
    "001_8786b04935cca5e0.txt",
    "002_a6effb58fe8c17e9.txt",
    "004_e802819a41ae8262.txt",
)


def _value(table_id: str, row: str, column: str) -> float:
    table = PAPER_TABLES[table_id]
    return table["rows"][row][table["columns"].index(column)]


# --- 1. structure -------------------------------------------------------------------------------


@pytest.mark.parametrize("table_id", sorted(PAPER_TABLES))
def test_every_row_has_one_value_per_column(table_id):
    table = PAPER_TABLES[table_id]
    for row, values in table["rows"].items():
        assert len(values) == len(table["columns"]), (table_id, row)
        assert all(v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)) for v in values)
    assert "Table" in table["source"] or "section" in table["source"], table_id
    assert set(table.get("labels", {})) <= set(table["rows"])
    for mech, row in table.get("analogues", {}).items():
        assert mech in MECHANISM_KEYS and row in table["rows"] and row not in MECHANISM_KEYS


def tables_for_task(task: str) -> list[dict]:
    """The published tables printed under ``task``'s comparison (its compare.paper_tables in params.yaml)."""
    from pipeline.config.params import load_params
    from pipeline.config.tasks import effective_params

    return [PAPER_TABLES[t] for t in effective_params(load_params(), task)["compare"].get("paper_tables") or {}]


def test_every_task_names_existing_tables_and_the_expected_tasks_are_wired():
    from pipeline.config.params import load_params

    wired = {t for t, s in load_params()["task_settings"].items() if (s.get("compare") or {}).get("paper_tables")}
    assert wired == {
        "copy_rules",
        "rarest_word",
        "gigaword",
        "gigaword_unk_pointers",
        "gigaword_entity_pointers",
        "lcsts_char",
        "lcsts_word",
        "wikismall",
        "ewsew",
        "europarl_en_fr",
    }
    assert all(tables_for_task(task) for task in wired)
    assert tables_for_task("no_such_task") == []


def test_copynet_table1_kept_as_it_was_and_compare_still_imports():
    import pipeline.reporting.compare  # noqa: F401  (it imports from pipeline.reporting.paper_results)

    assert PAPER_TABLES["copynet_table1"] == {
        "columns": ["x->0", "x->x", "x->xx", "xy->x", "xy->xy"],
        "rows": {
            "encdec": [100.0, 3.3, 1.5, 2.9, 0.0],
            "rnnsearch": [99.0, 69.4, 22.3, 40.7, 2.6],
            "copynet": [97.3, 93.7, 98.3, 68.2, 77.5],
        },
        "source": "Gu et al. 2016, Table 1 (test accuracy, beam 10, 200 rules x 200 instances)",
    }


def test_params_yaml_names_only_existing_paper_tables():
    """compare.paper_tables, shared and per task (task_settings.<task>.compare), name tables that exist."""
    from pipeline.config.params import load_params

    params = load_params()
    sections = [params.get("compare") or {}] + [
        (t or {}).get("compare") or {} for t in (params.get("task_settings") or {}).values()
    ]
    named = {tid for sec in sections for tid in (sec.get("paper_tables") or {})}
    assert named <= set(PAPER_TABLES), sorted(named - set(PAPER_TABLES))


def test_task_metric_columns_follow_the_tasks_conventions():
    rouge = ["rouge1", "rouge2", "rougeL"]
    for task in ("gigaword", "lcsts_char", "lcsts_word", "gigaword_entity_pointers"):  # gigaword: DUC 2004 too
        assert all(t["columns"] == rouge for t in tables_for_task(task)), task
    # PS Table 3 is recall on a task scored in F1: distinct keys, never mixed with its Table 1
    assert [t["columns"] for t in tables_for_task("gigaword_unk_pointers")] == [
        rouge,
        ["rouge1_r", "rouge2_r", "rougeL_r"],
    ]
    for task in ("wikismall", "ewsew", "europarl_en_fr"):
        assert all(t["columns"] == ["bleu"] for t in tables_for_task(task)), task


def test_published_rows_are_the_systems_that_are_not_ours():
    assert pr.published_systems(PAPER_TABLES["read_again_table2_duc2004"]) == [
        "TOPIARY",
        "ABS",
        "ABS+",
        "RAS-LSTM",
        "RAS-Elman",
        "big-words-lvt2k-1sent",
        "big-words-lvt5k-1sent",
        "Ours-GRU (C)",
        "Ours-Opt-2 (C)",
    ]
    assert pr.published_systems(PAPER_TABLES["copynet_table1"]) == []
    assert pr.row_label(PAPER_TABLES["wean_table4_lcsts"], "luong") == "Seq2seq"
    assert pr.row_label(PAPER_TABLES["copynet_table1"], "copynet") == "copynet"


def test_validate_table_names_the_table_and_row_on_a_bad_edit():
    bad = {"columns": ["rouge1", "rouge2"], "rows": {"wean": [1.0]}, "source": "x, Table 9"}
    with pytest.raises(ValueError, match=r"paper_results.py: table 'demo', row 'wean': 1 values for 2"):
        pr.validate_table("demo", bad)
    with pytest.raises(ValueError, match="analogue 'encdec' -> 'wean'"):
        pr.validate_table(
            "demo", {"columns": ["a"], "rows": {"wean": [1.0]}, "source": "Table 1", "analogues": {"encdec": "wean"}}
        )
    with pytest.raises(ValueError, match="not a number"):
        pr.validate_table("demo", {"columns": ["a"], "rows": {"x": ["1.0"]}, "source": "Table 1"})


# --- 2. spot checks and the papers' own equalities ----------------------------------------------


@pytest.mark.parametrize(
    "table_id,row,column,expected",
    [
        ("copynet_table3_char", "copynet", "rouge2", 21.6),  # CopyNet 000 line 214
        ("copynet_table3_word", "RNN context", "rougeL", 24.1),  # CopyNet 000 line 213
        ("wean_table1_pwkp", "Hybrid", "bleu", 53.94),  # WEAN 002 line 133
        ("wean_table2_ewsew", "NTS-w2v", "bleu", 87.50),  # WEAN 002 line 147
        ("wean_table4_lcsts", "SRB", "rouge2", 20.0),  # WEAN 002 line 198
        ("ps_table1_unk", "pointer_softmax", "rougeL", 32.51),  # PS 001 line 192
        ("ps_table2_entity", "rnnsearch", "rouge2", 16.78),  # PS 001 line 195
        ("ps_table3_unk_recall", "pointer_softmax", "rouge1_r", 37.29),  # PS 001 line 200
        ("ps_table5_europarl", "rnnsearch", "bleu", 20.19),  # PS 001 line 229
        ("ps_rarest_word", "pointer_softmax", "error_rate", 17.4),  # PS 001 line 169
        ("read_again_table1_gigaword", "read_again", "rouge1", 27.37),  # Read-Again 004 line 191
        ("read_again_table1_gigaword", "Ours-Opt-2 (C) 15K", "rougeL", 26.18),  # 004 line 193
        ("read_again_table2_duc2004", "RAS-Elman", "rouge1", 28.97),  # 004 line 206
        ("read_again_table2_duc2004", "read_again", "rougeL", 25.93),  # 004 line 210
        ("read_again_table3_decoder_size", "Ours-LSTM (C) 2K", "rouge2", 11.27),  # 004 line 228
        ("read_again_table4_encoder_size", "Ours-LSTM 30K", "rougeL", 22.28),  # 004 line 240
    ],
)
def test_spot_checks(table_id, row, column, expected):
    assert _value(table_id, row, column) == expected


def test_differences_the_papers_state_in_their_prose():
    d = lambda t, a, b, c: _value(t, a, c) - _value(t, b, c)  # noqa: E731
    # WEAN abstract / 6: +6.3 and +5.5 BLEU over Seq2seq on PWKP and EW-SEW (002 lines 18, 300)
    assert round(d("wean_table1_pwkp", "wean", "luong", "bleu"), 1) == 6.3
    assert round(d("wean_table2_ewsew", "wean", "luong", "bleu"), 1) == 5.5
    # WEAN 3.2.5: +5.7 R-1, +5.7 R-2, +6.0 R-L over Seq2seq; +0.8 / +1.4 / +1.0 over DRGD (002 line 250)
    for column, over_s2s, over_drgd in (("rouge1", 5.7, 0.8), ("rouge2", 5.7, 1.4), ("rougeL", 6.0, 1.0)):
        assert round(d("wean_table4_lcsts", "wean", "luong", column), 1) == over_s2s
        assert round(d("wean_table4_lcsts", "wean", "DRGD", column), 1) == over_drgd
    # PS 5.3: "about 3.6 BLEU score improvement" (001 line 232)
    assert round(d("ps_table5_europarl", "pointer_softmax", "rnnsearch", "bleu"), 1) == 3.6


def test_wean_reprints_copynet_table3():
    wean, char, word = (
        PAPER_TABLES[t]["rows"] for t in ("wean_table4_lcsts", "copynet_table3_char", "copynet_table3_word")
    )
    assert wean["CopyNet"] == char["copynet"] and wean["CopyNet-W"] == word["copynet"]
    assert wean["RNN"] == char["RNN"] and wean["RNN-W"] == word["RNN"]
    assert wean["RNN-cont"] == char["RNN context"] and wean["RNN-cont-W"] == word["RNN context"]


def test_read_again_tables_agree_where_they_report_the_same_model():
    t1, t3, t4 = (
        PAPER_TABLES[t]["rows"]
        for t in ("read_again_table1_gigaword", "read_again_table3_decoder_size", "read_again_table4_encoder_size")
    )
    # Table 4's 110K-encoder rows are Table 3's 15K-decoder rows (both: decoder 15K, encoder 110K)
    assert t4["Ours-LSTM 110K"] == t3["Ours-LSTM 15K"] and t4["Ours-LSTM (C) 110K"] == t3["Ours-LSTM (C) 15K"]
    assert t1["read_again"] == t3["Ours-LSTM (C) 15K"]
    # the paper's own 0.01-0.03 disagreements, kept as printed (noted in the table's note)
    assert t1["Ours-LSTM 69K"][1] == 12.74 and t3["Ours-LSTM 69K"][1] == 12.73
    assert t1["Ours-LSTM 15K"][2] == 23.71 and t3["Ours-LSTM 15K"][2] == 23.74


@pytest.mark.parametrize("table_id", ["wean_table3_pwkp_human", "wean_table3_ewsew_human"])
def test_wean_human_all_is_the_mean_of_the_three_ratings(table_id):
    for row, (fluency, adequacy, simplicity, all_) in PAPER_TABLES[table_id]["rows"].items():
        assert abs((fluency + adequacy + simplicity) / 3 - all_) <= 0.005 + 1e-9, row


def test_wean_table5_is_its_own_arithmetic():
    rows = PAPER_TABLES["wean_table5_params"]["rows"]
    assert rows["luong"] == [round(50000 * 256 / 1e6, 2)] * 2 + [round(4000 * 512 / 1e6, 2)]
    assert rows["wean"] == [round((256 * 256 * 2 + 256) / 1e6, 2)] * 2 + [round((512 * 512 * 2 + 512) / 1e6, 2)]


# --- 3. every row against its line in the paper's text ------------------------------------------

NUMBER = re.compile(r"\d+(?:\.\d+)?")
CAPTION = re.compile(r"(Table \d+):")
SECTION_HEADING = re.compile(r"(\d+(?:\.\d+)+) [A-Z]")
# Read-Again Tables 3-4: one line per size holds a (no copy, copy) pair of rows, columns interleaved.
INTERLEAVED = {"read_again_table3_decoder_size", "read_again_table4_encoder_size"}
# copynet_table1's dict has no "decimals" (kept exactly as it was, see above); the paper prints one digit.
DECIMALS = {"copynet_table1": 1}
PAPER_OF = {"copynet_": COPYNET, "wean_": WEAN, "ps_": PS, "read_again_": READ_AGAIN}


def _paper_lines(name: str) -> list[str]:
    if not PAPERS.is_dir():
        pytest.skip(f"{PAPERS} absent (the papers' text conversions are not shipped with the project)")
    path = PAPERS / name
    assert path.is_file(), f"{path}: named by pipeline/reporting/paper_results.yaml but not in {PAPERS}"
    return path.read_text(encoding="utf-8").splitlines()


def _as_printed(token: str, value: float, digits: int) -> bool:
    """``token`` is ``value`` (no more precise than printed) as the paper prints it at ``digits`` decimals
    ('93.70' for 93.7 at 2), or an integral value printed without decimals (CopyNet Table 1's '100')."""
    return math.isclose(float(token), value) and (
        token == f"{value:.{digits}f}" or (float(value).is_integer() and token == str(int(value)))
    )


def _row_is_printed(
    text: str, values: list[float], digits: int, *, half: int | None = None, prose: bool = False
) -> bool:
    """The row's values are the last numbers of ``text``, in order; ``half`` 0 / 1: the no-copy / copy
    columns of an interleaved pair (every other one of the last 2k); ``prose``: each value anywhere."""
    tokens = NUMBER.findall(text)
    if prose:
        return all(any(_as_printed(t, v, digits) for t in tokens) for v in values)
    k = len(values)
    printed = tokens[-k:] if half is None else tokens[-2 * k :][half::2] if len(tokens) >= 2 * k else []
    return len(printed) == k and all(_as_printed(t, v, digits) for t, v in zip(printed, values))


def _caption(lines: list[str], n: int) -> str | None:
    """The "Table N" whose rows include line ``n``: a caption above it in the same block of non-blank lines
    (Pointer Softmax prints captions above), else the first caption below (the other papers)."""
    i = n - 1
    while i >= 0 and lines[i].strip():
        if m := CAPTION.match(lines[i]):
            return m.group(1)
        i -= 1
    return next((m.group(1) for text in lines[n : n + 30] if (m := CAPTION.match(text))), None)


def test_every_row_records_where_the_paper_prints_it():
    """No row without provenance: its paper (the table's paper), table (or prose section) and line."""
    for table_id, table in PAPER_TABLES.items():
        paper = next(f for prefix, f in PAPER_OF.items() if table_id.startswith(prefix))
        for row in table["rows"]:
            src = pr.row_source(table_id, row)
            assert src.paper == paper and src.line >= 1, (table_id, row, src)
            assert (src.table is not None) != (src.section is not None), (table_id, row, src)
            assert (src.table or src.section) in table["source"], (table_id, row, src)


@pytest.mark.parametrize("table_id", sorted(PAPER_TABLES))
def test_rows_equal_the_numbers_on_their_paper_lines(table_id):
    """Each row's values, as the paper prints them (table's decimals), on its recorded line; a row the
    paper breaks over two lines may go on to the next one. The recorded table is the caption there."""
    table = PAPER_TABLES[table_id]
    digits = table.get("decimals", DECIMALS.get(table_id))
    assert digits is not None, table_id
    sources = {row: pr.row_source(table_id, row) for row in table["rows"]}
    for row, values in table["rows"].items():
        src = sources[row]
        lines = _paper_lines(src.paper)
        assert src.line <= len(lines), (table_id, row, src)
        half = None
        if src.table is None:
            heading = next(m.group(1) for text in reversed(lines[: src.line - 1]) if (m := SECTION_HEADING.match(text)))
            assert heading == src.section, (table_id, row, src, heading)
        else:
            same_line = [r for r, s in sources.items() if s.line == src.line]
            half = same_line.index(row) if table_id in INTERLEAVED else None
            assert len(same_line) == (2 if table_id in INTERLEAVED else 1), (table_id, row, same_line)
            assert _caption(lines, src.line) == src.table, (table_id, row, src, _caption(lines, src.line))
        texts = [lines[src.line - 1]] + ([lines[src.line - 1] + " " + lines[src.line]] if src.line < len(lines) else [])
        assert any(_row_is_printed(text, values, digits, half=half, prose=src.table is None) for text in texts), (
            table_id,
            row,
            values,
            src,
            lines[src.line - 1],
        )


def test_a_misrecorded_line_or_value_fails_the_check():
    """The check above is not vacuous: a neighbour's line, or one digit off, does not pass."""
    lines = _paper_lines(COPYNET)
    values = PAPER_TABLES["copynet_table1"]["rows"]["copynet"]
    assert _row_is_printed(lines[181 - 1], values, 1)
    assert _row_is_printed(lines[179 - 1], PAPER_TABLES["copynet_table1"]["rows"]["encdec"], 1)  # '100'
    assert not _row_is_printed(lines[180 - 1], values, 1)
    assert not _row_is_printed(lines[181 - 1], [97.3, 93.7, 98.3, 68.2, 77.6], 1)
    assert not _row_is_printed(lines[181 - 1], values, 2)  # '97.30' is not what the paper prints
    assert not _row_is_printed(lines[181 - 1], [97.3, 93.7, 98.3, 68.2, 77.5001], 1)  # rounds to '77.5'
    pair = PAPER_TABLES["read_again_table3_decoder_size"]["rows"]
    line = _paper_lines(READ_AGAIN)[228 - 1]
    assert _row_is_printed(line, pair["Ours-LSTM 2K"], 2, half=0)
    assert _row_is_printed(line, pair["Ours-LSTM (C) 2K"], 2, half=1)
    assert not _row_is_printed(line, pair["Ours-LSTM 2K"], 2, half=1)  # the halves swapped
    assert not _row_is_printed(line, pair["Ours-LSTM 2K"], 2)  # read as a plain row


def test_rarest_word_error_rates_against_the_text():
    line = _paper_lines(PS)[169 - 1]
    assert "error rate of 17.4%" in line and "600 tokens, we obtain the error-rate of 48.2%" in line
    rows = PAPER_TABLES["ps_rarest_word"]["rows"]
    assert rows == {"Softmax (600)": [48.2], "pointer_softmax": [17.4]}


# --- 4. the loader -------------------------------------------------------------------------------


def test_mechanism_keys_are_the_models_mechanisms():
    from models.registry import MECHANISMS

    assert MECHANISM_KEYS == frozenset(MECHANISMS)
    assert {
        "encdec",
        "rnnsearch",
        "copynet",
        "pointer_softmax",
        "wean",
        "luong",
        "read_again",
        "pointer_generator",
    } <= MECHANISM_KEYS


def test_the_yaml_is_read_once_and_ships_with_the_package():
    assert pr.DATA_FILE == REPO / "pipeline" / "reporting" / "paper_results.yaml" and pr.DATA_FILE.is_file()
    tables, _ = pr.load_tables()
    assert pr.load_tables() is pr.load_tables() and tables is PAPER_TABLES
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    assert "*.yaml" in pyproject["tool"]["setuptools"]["package-data"]["pipeline.reporting"]


def _demo(**row):
    return {
        "demo": {
            "columns": ["a"],
            "source": "x, Table 1",
            "rows": {"r": {"values": [1.0], "paper": COPYNET, "table": "Table 1", "line": 3, **row}},
        }
    }


def test_parse_tables_splits_values_from_provenance():
    tables, sources = pr.parse_tables(_demo())
    assert tables == {"demo": {"columns": ["a"], "source": "x, Table 1", "rows": {"r": [1.0]}}}
    assert sources == {"demo": {"r": pr.RowSource(COPYNET, "Table 1", 3)}}
    _, sources = pr.parse_tables(_demo(table=None, section="5.1"))
    assert sources["demo"]["r"] == pr.RowSource(COPYNET, None, 3, "5.1")


@pytest.mark.parametrize(
    "row,message",
    [
        ({"line": None}, "line None is not a 1-based line number"),
        ({"line": 0}, "line 0 is not"),
        ({"table": "Tab. 1"}, "table 'Tab. 1' is not a table name"),
        ({"table": None}, "needs the paper's section"),
        ({"paper": "../x.txt"}, "not a text file name"),
        ({"values": 1.0}, "are not a list"),
        ({"values": [1.0, 2.0]}, "2 values for 1 columns"),
        ({"page": 3}, r"unknown fields \['page'\]"),
    ],
)
def test_parse_tables_refuses_a_bad_row_naming_the_yaml_table_and_row(row, message):
    with pytest.raises(ValueError, match=r"paper_results.yaml: table 'demo', row 'r'.*" + message):
        pr.parse_tables(_demo(**row))
    bad = _demo()
    del bad["demo"]["rows"]["r"]["line"]
    with pytest.raises(ValueError, match=r"row 'r': missing fields \['line'\]"):
        pr.parse_tables(bad)


def test_load_tables_refuses_a_duplicate_row_and_an_unknown_table_field(tmp_path):
    dup = tmp_path / "dup.yaml"
    dup.write_text(
        "demo:\n  columns: [a]\n  source: x, Table 1\n  rows:\n"
        f"    r: {{values: [1.0], paper: {COPYNET}, table: Table 1, line: 3}}\n"
        f"    r: {{values: [2.0], paper: {COPYNET}, table: Table 1, line: 4}}\n"
    )
    with pytest.raises(ValueError, match="duplicate key 'r'"):
        pr.load_tables(dup)
    typo = _demo()
    typo["demo"]["decimal"] = 2
    with pytest.raises(ValueError, match=r"table 'demo': unknown fields \['decimal'\]"):
        pr.parse_tables(typo)
