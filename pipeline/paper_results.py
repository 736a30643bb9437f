"""Published numbers the comparison tables print beside ours (copied from the papers' tables).

Every table is a dict of the same shape as ``COPYNET_TABLE1``::

    {"columns": [metric keys], "rows": {row key: [one value per column]}, "source": "paper, Table N",
     # optional:
     "labels": {row key: the row's name as the paper prints it},
     "analogues": {our mechanism key: row key of a published system of the same family},
     "paper_columns": [the paper's own column headers], "decimals": digits the paper prints,
     "metric_convention": "...", "note": "..."}

Row keys: a mechanism key of this project (``MECHANISM_KEYS``) when the row is the paper's own run of
the architecture the project builds under that key (CopyNet's Enc-Dec/RNNSearch, Pointer Softmax's
NMT = Bahdanau RNNSearch, WEAN's Seq2seq = ``luong``); otherwise the system's name from the paper
(ABS+, RAS-Elman, RNN context ...): those are published rows of systems that are not ours
(``published_systems``). ``analogues`` pairs such a row with the mechanism of ours it is closest
to (e.g. Hu et al.'s "RNN context" with ``rnnsearch``), for a reader who wants them side by side.

Column keys are the metric keys of the task's evaluation. They follow the task's convention
(``metric_convention``): on ``duc2004`` "rouge1" is ROUGE-1 recall at 75 bytes, on ``gigaword`` it is
ROUGE-1 F1 at full length. A table whose metric differs from its task's convention gets distinct keys
(Pointer Softmax's Table 3, full-length recall: ``rouge1_r`` ...). Values are as printed
(percent); ``None`` is a cell the paper leaves empty.

Papers (text conversions in ../shared/papers, README.md there): CopyNet = Gu et al. 2016 (000_...),
Pointer Softmax = Gulcehre et al. 2016 (001_...), WEAN = Ma et al. 2018 (002_...), Read-Again = Zeng
et al. 2016 (004_...). The "paper line" comments give the line of the number in that text file.
"""
from __future__ import annotations

# The mechanism keys of this project (params.yaml `mechanisms`, plus WEAN's Seq2seq baseline `luong`).
MECHANISM_KEYS = frozenset(
    {"encdec", "rnnsearch", "copynet", "pointer_softmax", "wean", "luong", "read_again", "pointer_generator"}
)

# CopyNet (Gu et al. 2016), Table 1: top-1 exact-match accuracy (%) on the synthetic rule data.
COPYNET_TABLE1 = {
    "columns": ["x->0", "x->x", "x->xx", "xy->x", "xy->xy"],
    "rows": {
        "encdec": [100.0, 3.3, 1.5, 2.9, 0.0],
        "rnnsearch": [99.0, 69.4, 22.3, 40.7, 2.6],
        "copynet": [97.3, 93.7, 98.3, 68.2, 77.5],
    },
    "source": "Gu et al. 2016, Table 1 (test accuracy, beam 10, 200 rules x 200 instances)",
}

# ---------------------------------------------------------------------------------------------
# CopyNet (Gu et al. 2016), Table 3: LCSTS (000_..., lines 208-217). Char (+C) and word (+W) rows.
_COPYNET_LCSTS_CONVENTION = (
    "ROUGE-1/2/L (%) on LCSTS PART III, pairs scored 3-5 (725). CopyNet 5.2 does not say recall or "
    "F1 ('Following (Hu et al., 2015) ... ROUGE-1, ROUGE-2 and ROUGE-L'); WEAN's Table 4 reprints "
    "these same numbers as ROUGE F1."
)
COPYNET_TABLE3_CHAR = {
    "columns": ["rouge1", "rouge2", "rougeL"],
    "paper_columns": ["R-1", "R-2", "R-L"],
    "rows": {
        "RNN": [21.5, 8.9, 18.6],  # paper line 210
        "RNN context": [29.9, 17.4, 27.2],  # paper line 212
        "copynet": [34.4, 21.6, 31.3],  # paper line 214
    },
    "labels": {"RNN": "RNN (Hu et al., 2015) +C", "RNN context": "RNN context (Hu et al., 2015) +C",
               "copynet": "COPYNET +C"},
    "analogues": {"encdec": "RNN", "rnnsearch": "RNN context"},
    "source": "Gu et al. 2016 (CopyNet), Table 3, character-based rows (+C)",
    "metric_convention": _COPYNET_LCSTS_CONVENTION,
    "note": ("Trained on LCSTS PART I (2,400,591 pairs), vocabulary 3,000 characters, emb 350, hidden 500. "
             "'RNN' and 'RNN context' are Hu et al. (2015)'s canonical Enc-Dec and its attentive variant, "
             "numbers as reported in Hu et al. and reprinted by CopyNet, not CopyNet's own runs."),
    "decimals": 1,
}
COPYNET_TABLE3_WORD = {
    "columns": ["rouge1", "rouge2", "rougeL"],
    "paper_columns": ["R-1", "R-2", "R-L"],
    "rows": {
        "RNN": [17.7, 8.5, 15.8],  # paper line 211
        "RNN context": [26.8, 16.1, 24.1],  # paper line 213
        "copynet": [35.0, 22.3, 32.0],  # paper line 215
    },
    "labels": {"RNN": "RNN (Hu et al., 2015) +W", "RNN context": "RNN context (Hu et al., 2015) +W",
               "copynet": "COPYNET +W"},
    "analogues": {"encdec": "RNN", "rnnsearch": "RNN context"},
    "source": "Gu et al. 2016 (CopyNet), Table 3, word-based rows (+W, jieba segmentation)",
    "metric_convention": _COPYNET_LCSTS_CONVENTION,
    "note": ("Trained on LCSTS PART I, jieba words, vocabulary 10,000, emb 350, hidden 500. 'RNN' / "
             "'RNN context' are Hu et al. (2015)'s word-based models (their vocabulary: 50,000 words)."),
    "decimals": 1,
}

# ---------------------------------------------------------------------------------------------
# WEAN (Ma et al. 2018). Table 1 PWKP BLEU (002_..., lines 131-138); Table 2 EW-SEW BLEU (142-152);
# Table 3 human evaluation (166-178); Table 4 LCSTS ROUGE F1 (193-204); Table 5 output-layer params (236-238).
WEAN_TABLE1_PWKP = {
    "columns": ["bleu"],
    "paper_columns": ["BLEU"],
    "rows": {
        "PBMT": [46.31],  # paper line 132
        "Hybrid": [53.94],  # paper line 133
        "EncDecA": [47.93],  # paper line 134
        "DRESS": [34.53],  # paper line 135
        "DRESS-LS": [36.32],  # paper line 136
        "luong": [48.26],  # paper line 137
        "wean": [54.54],  # paper line 138
    },
    "labels": {"PBMT": "PBMT (Wubben et al., 2012)", "Hybrid": "Hybrid (Narayan and Gardent, 2014)",
               "EncDecA": "EncDecA (Zhang and Lapata, 2017)", "DRESS": "DRESS (Zhang and Lapata, 2017)",
               "DRESS-LS": "DRESS-LS (Zhang and Lapata, 2017)", "luong": "Seq2seq (our implementation)",
               "wean": "WEAN (our proposal)"},
    "analogues": {"rnnsearch": "EncDecA"},
    "source": "Ma et al. 2018 (WEAN), Table 1 (PWKP test set)",
    "metric_convention": "BLEU (%) against the single reference, PWKP test (100 pairs); the paper does not name its BLEU script.",
    "note": ("PWKP deduplicated, split 89,042 / 205 / 100 (Zhang and Lapata 2017). WEAN reports no SARI or "
             "FKGL. Table 1 and 3.1.5 name the first system 'PBMT' (Table 2: 'PBMT-R'), both Wubben et al. (2012)."),
    "decimals": 2,
}
WEAN_TABLE2_EWSEW = {
    "columns": ["bleu"],
    "paper_columns": ["BLEU"],
    "rows": {
        "PBMT-R": [67.79],  # paper line 143
        "Hybrid": [48.97],  # paper line 144
        "SBMT-SARI": [73.62],  # paper line 145
        "NTS": [84.70],  # paper line 146
        "NTS-w2v": [87.50],  # paper line 147
        "EncDecA": [88.85],  # paper line 148
        "DRESS": [77.18],  # paper line 149
        "DRESS-LS": [80.12],  # paper line 150
        "luong": [88.97],  # paper line 151
        "wean": [94.45],  # paper line 152
    },
    "labels": {"PBMT-R": "PBMT-R (Wubben et al., 2012)", "Hybrid": "Hybrid (Narayan and Gardent, 2014)",
               "SBMT-SARI": "SBMT-SARI (Xu et al., 2016)", "NTS": "NTS (Nisioi et al., 2017)",
               "NTS-w2v": "NTS-w2v (Nisioi et al., 2017)", "EncDecA": "EncDecA (Zhang and Lapata, 2017)",
               "DRESS": "DRESS (Zhang and Lapata, 2017)", "DRESS-LS": "DRESS-LS (Zhang and Lapata, 2017)",
               "luong": "Seq2seq (our implementation)", "wean": "WEAN (our proposal)"},
    "analogues": {"rnnsearch": "EncDecA"},
    "source": "Ma et al. 2018 (WEAN), Table 2 (EW-SEW; test = Xu et al. 2016's 359 Turk sentences)",
    "metric_convention": "BLEU (%) against the 8 Turk references (multi-reference), test 359 pairs.",
    "note": ("Trained on Hwang et al. (2015)'s EW-SEW good + good-partial matches (~150K + 130K, "
             "threshold 0.45); valid 2,000 / test 359 from Xu et al. (2016). No SARI column in the paper."),
    "decimals": 2,
}
_HUMAN_COLUMNS = ["fluency", "adequacy", "simplicity", "all"]
WEAN_TABLE3_PWKP_HUMAN = {
    "columns": _HUMAN_COLUMNS,
    "paper_columns": ["Fluency", "Adequacy", "Simplicity", "All"],
    "rows": {
        "NTS-w2v": [3.54, 3.47, 3.38, 3.46],  # paper line 167
        "DRESS-LS": [3.68, 3.55, 3.50, 3.58],  # paper line 168
        "wean": [3.77, 3.66, 3.58, 3.67],  # paper line 169
        "Reference": [3.76, 3.60, 3.44, 3.60],  # paper line 170
    },
    "labels": {"wean": "WEAN"},
    "source": "Ma et al. 2018 (WEAN), Table 3, PWKP half (human evaluation)",
    "metric_convention": "Human ratings 1-5; 'All' is the mean of the three (to 2 decimals). Not computed by the pipeline.",
    "decimals": 2,
}
WEAN_TABLE3_EWSEW_HUMAN = {
    "columns": _HUMAN_COLUMNS,
    "paper_columns": ["Fluency", "Adequacy", "Simplicity", "All"],
    "rows": {
        "PBMT-R": [3.36, 2.92, 3.37, 3.22],  # paper line 173
        "SBMT-SARI": [3.41, 3.63, 3.25, 3.43],  # paper line 174
        "NTS-w2v": [3.56, 3.52, 3.42, 3.50],  # paper line 175
        "DRESS-LS": [3.59, 3.43, 3.65, 3.56],  # paper line 176
        "wean": [3.61, 3.56, 3.65, 3.61],  # paper line 177
        "Reference": [3.71, 3.64, 3.45, 3.60],  # paper line 178
    },
    "labels": {"wean": "WEAN"},
    "source": "Ma et al. 2018 (WEAN), Table 3, EW-SEW half (human evaluation)",
    "metric_convention": "Human ratings 1-5; 'All' is the mean of the three (to 2 decimals). Not computed by the pipeline.",
    "decimals": 2,
}
WEAN_TABLE4_LCSTS = {
    "columns": ["rouge1", "rouge2", "rougeL"],
    "paper_columns": ["R-1", "R-2", "R-L"],
    "rows": {
        "RNN-W": [17.7, 8.5, 15.8],  # paper line 194
        "RNN": [21.5, 8.9, 18.6],  # paper line 195
        "RNN-cont-W": [26.8, 16.1, 24.1],  # paper line 196
        "RNN-cont": [29.9, 17.4, 27.2],  # paper line 197
        "SRB": [33.3, 20.0, 30.1],  # paper line 198
        "CopyNet-W": [35.0, 22.3, 32.0],  # paper line 199
        "CopyNet": [34.4, 21.6, 31.3],  # paper line 200
        "RNN-dist": [35.2, 22.6, 32.5],  # paper line 201
        "DRGD": [37.0, 24.2, 34.2],  # paper line 202
        "luong": [32.1, 19.9, 29.2],  # paper line 203
        "wean": [37.8, 25.6, 35.2],  # paper line 204
    },
    "labels": {"RNN-W": "RNN-W (Hu et al., 2015)", "RNN": "RNN (Hu et al., 2015)",
               "RNN-cont-W": "RNN-cont-W (Hu et al., 2015)", "RNN-cont": "RNN-cont (Hu et al., 2015)",
               "SRB": "SRB (Ma et al., 2017)", "CopyNet-W": "CopyNet-W (Gu et al., 2016)",
               "CopyNet": "CopyNet (Gu et al., 2016)", "RNN-dist": "RNN-dist (Chen et al., 2016)",
               "DRGD": "DRGD (Li et al., 2017)", "luong": "Seq2seq", "wean": "WEAN"},
    "analogues": {"encdec": "RNN", "rnnsearch": "RNN-cont", "copynet": "CopyNet"},
    "source": "Ma et al. 2018 (WEAN), Table 4 (LCSTS test set, PART III score >= 3)",
    "metric_convention": ("ROUGE F1 (%) (Table 4 caption). Rows with suffix 'W' are word-based, the rest "
                          "character-based; WEAN and Seq2seq are character-based."),
    "note": ("WEAN: vocabulary 4,000 characters shared by source and target, emb = hidden = 512, 2-layer LSTM "
             "encoder, 1-layer decoder, batch 64, no dropout, beam 5 (3.2.3). The CopyNet and Hu et al. rows "
             "are reprints of CopyNet's Table 3."),
    "decimals": 1,
}
WEAN_TABLE5_PARAMS = {
    "columns": ["pwkp", "ewsew", "lcsts"],
    "paper_columns": ["PWKP", "EWSEW", "LCSTS"],
    "rows": {
        "luong": [12.80, 12.80, 2.05],  # paper line 237 (millions)
        "wean": [0.13, 0.13, 0.52],  # paper line 238 (millions)
    },
    "labels": {"luong": "Seq2seq", "wean": "WEAN"},
    "source": "Ma et al. 2018 (WEAN), Table 5 (parameters of the output layer)",
    "metric_convention": ("Millions of output-layer parameters: 50000 x 256 and 256 x 256 x 2 + 256 (PWKP, "
                          "EWSEW), 4000 x 512 and 512 x 512 x 2 + 512 (LCSTS), section 4.1."),
    "decimals": 2,
}

# ---------------------------------------------------------------------------------------------
# Pointer Softmax (Gulcehre et al. 2016): 5.1 rarest word (001_..., line 169); Tables 1-3
# Gigaword (lines 189-200); Table 5 Europarl (lines 227-230).
_PS_GIGAWORD_NOTE = (
    "Rush et al. (2015)'s scripts on annotated Gigaword (~3.8M training pairs), test = 2,000 pairs sampled "
    "from the validation set (Rush's test set was not public). Bi-GRU encoder, GRU decoder, emb 100, "
    "hidden 200, large-vocabulary trick with 2,000 words per batch, vocabularies 125K source / 75K target, "
    "word2vec-initialised embeddings (5.2). 'NMT + lvt' is the paper's own Bahdanau NMT baseline (key rnnsearch)."
)
PS_TABLE1_UNK = {
    "columns": ["rouge1", "rouge2", "rougeL"],
    "paper_columns": ["Rouge-1", "Rouge-2", "Rouge-L"],
    "rows": {
        "rnnsearch": [34.87, 16.54, 32.27],  # paper line 191
        "pointer_softmax": [35.19, 16.66, 32.51],  # paper line 192
    },
    "labels": {"rnnsearch": "NMT + lvt", "pointer_softmax": "NMT + lvt + PS"},
    "source": "Gulcehre et al. 2016 (Pointer Softmax), Table 1 (Gigaword, pointers for UNKs)",
    "metric_convention": "Full-length ROUGE F1 (%) with the official ROUGE tool (5.2).",
    "note": "UNK-pointers data: words seen < 5 times become UNK; target UNKs point at the same source word. "
            + _PS_GIGAWORD_NOTE,
    "decimals": 2,
}
PS_TABLE2_ENTITY = {
    "columns": ["rouge1", "rouge2", "rougeL"],
    "paper_columns": ["Rouge-1", "Rouge-2", "Rouge-L"],
    "rows": {
        "rnnsearch": [34.89, 16.78, 32.37],  # paper line 195
        "pointer_softmax": [35.11, 16.76, 32.55],  # paper line 196
    },
    "labels": {"rnnsearch": "NMT + lvt", "pointer_softmax": "NMT + lvt + PS"},
    "source": "Gulcehre et al. 2016 (Pointer Softmax), Table 2 (anonymized Gigaword, pointers for entities)",
    "metric_convention": "Full-length ROUGE F1 (%) with the official ROUGE tool (5.2), on entity-anonymised text.",
    "note": "Entity-pointers data: entities replaced by per-document integer ids, pointers between equal ids. "
            + _PS_GIGAWORD_NOTE,
    "decimals": 2,
}
PS_TABLE3_UNK_RECALL = {
    "columns": ["rouge1_r", "rouge2_r", "rougeL_r"],
    "paper_columns": ["Rouge-1", "Rouge-2", "Rouge-L"],
    "rows": {
        "rnnsearch": [36.45, 17.41, 33.90],  # paper line 199
        "pointer_softmax": [37.29, 17.75, 34.70],  # paper line 200
    },
    "labels": {"rnnsearch": "NMT + lvt", "pointer_softmax": "NMT + lvt + PS"},
    "source": "Gulcehre et al. 2016 (Pointer Softmax), Table 3 (Gigaword, UNK pointers, recall)",
    "metric_convention": ("ROUGE recall (%) (Table 3 caption, 'as ... done by Rush et al.'); 5.2 speaks of "
                          "full-length recall on this corpus. Distinct keys: the task's own convention is F1."),
    "note": "Same models and test set as Table 1. " + _PS_GIGAWORD_NOTE,
    "decimals": 2,
}
PS_TABLE5_EUROPARL = {
    "columns": ["bleu"],
    "paper_columns": ["BLEU-4"],
    "rows": {
        "rnnsearch": [20.19],  # paper line 229
        "pointer_softmax": [23.76],  # paper line 230
    },
    "labels": {"rnnsearch": "NMT", "pointer_softmax": "NMT + PS"},
    "source": "Gulcehre et al. 2016 (Pointer Softmax), Table 5 (Europarl en-fr, tested on newstest2011)",
    "metric_convention": "BLEU-4 (%) with Moses multi-bleu.perl on tokenized sentences (5.3, footnote 4).",
    "note": ("Trained on Europarl v7 en-fr pairs up to 50 tokens with dl4mt-material, shortlists of 30,000 "
             "on both sides, early stopping on validation NLL; pointers from the copy / dictionary heuristic."),
    "decimals": 2,
}
PS_RAREST_WORD = {
    "columns": ["error_rate"],
    "paper_columns": ["error rate (%)"],
    "rows": {
        "Softmax (600)": [48.2],  # paper line 169
        "pointer_softmax": [17.4],  # paper line 169
    },
    "labels": {"Softmax (600)": "softmax over all 600 tokens", "pointer_softmax": "pointer softmax"},
    "analogues": {"encdec": "Softmax (600)"},
    "source": "Gulcehre et al. 2016 (Pointer Softmax), section 5.1 (text, no table number)",
    "metric_convention": "Error rate (%) = 100 - top-1 accuracy on the test set of the rarest-word task.",
    "note": ("|V| 600, sequences of 7 words from a geometric unigram distribution; one GRU layer, last state "
             "as summary; hidden 1000, batch 250, Adam lr 8e-4; pointers for the rarest 60 words, shortlist "
             "540, switch d_t = sigmoid(2x)."),
    "decimals": 1,
}

# ---------------------------------------------------------------------------------------------
# Read-Again (Zeng et al. 2016): Table 1 Gigaword (004_..., lines 182-193), Table 2 DUC2004 (201-211),
# Tables 3-4 vocabulary sizes (226-241), Table 5 decoding time (249-251).
_RA_GIGAWORD_NOTE = (
    "Rush et al. (2015)'s preprocessing: 3.8M training pairs; ROUGE on 2,000 random test pairs. 1-layer "
    "cells, 512 hidden, 512 embedding, dropout 0.2, SGD lr 2 halved every epoch after the 5th, 10 epochs, "
    "batch 64, clip 10 (4, implementation details). Size = decoder vocabulary; the encoder vocabulary is 110K "
    "(Table 3 caption; Table 1's 15K copy rows equal Table 3's 15K rows)."
)
READ_AGAIN_TABLE1_GIGAWORD = {
    "columns": ["rouge1", "rouge2", "rougeL"],
    "paper_columns": ["Rouge-1", "Rouge-2", "Rouge-L"],
    "rows": {
        "ABS": [24.12, 10.24, 22.61],  # paper line 183
        "GRU (baseline) 69K": [26.79, 12.03, 25.14],  # paper line 184
        "Ours-GRU 69K": [27.26, 12.28, 25.48],  # paper line 185
        "Ours-LSTM 69K": [27.82, 12.74, 26.01],  # paper line 186
        "GRU (baseline) 15K": [24.67, 11.30, 23.28],  # paper line 187
        "Ours-GRU 15K": [25.04, 11.40, 23.47],  # paper line 188
        "Ours-LSTM 15K": [25.30, 11.76, 23.71],  # paper line 189
        "Ours-GRU (C) 15K": [27.41, 12.58, 25.74],  # paper line 190
        "read_again": [27.37, 12.64, 25.69],  # paper line 191
        "Ours-Opt-1 (C) 15K": [27.95, 12.65, 26.10],  # paper line 192
        "Ours-Opt-2 (C) 15K": [27.96, 12.65, 26.18],  # paper line 193
    },
    "labels": {"ABS": "ABS (baseline), 69K", "GRU (baseline) 69K": "GRU (baseline), 69K",
               "Ours-GRU 69K": "Ours-GRU, 69K", "Ours-LSTM 69K": "Ours-LSTM, 69K",
               "GRU (baseline) 15K": "GRU (baseline), 15K", "Ours-GRU 15K": "Ours-GRU, 15K",
               "Ours-LSTM 15K": "Ours-LSTM, 15K", "Ours-GRU (C) 15K": "Ours-GRU (C), 15K",
               "read_again": "Ours-LSTM (C), 15K", "Ours-Opt-1 (C) 15K": "Ours-Opt-1 (C), 15K",
               "Ours-Opt-2 (C) 15K": "Ours-Opt-2 (C), 15K (2 sentences)"},
    "analogues": {"rnnsearch": "GRU (baseline) 15K"},
    "source": "Zeng et al. 2016 (Read-Again), Table 1 (Gigaword, Rush et al. 2015 test set)",
    "metric_convention": "Full-length ROUGE-1/2/L F1 (%) (4, 'Dataset and Evaluation Metric').",
    "note": (_RA_GIGAWORD_NOTE + " read_again = Ours-LSTM (C) (LSTM read-again, one sentence, copy). "
             "'GRU (baseline)' is an attention encoder-decoder with a uni-directional GRU encoder (our "
             "rnnsearch is bi-directional). The paper itself disagrees by 0.01-0.03 between Table 1 and "
             "Table 3 on the no-copy Ours-LSTM rows (R-2 12.74 vs 12.73 at 69K; R-L 23.71 vs 23.74 at 15K)."),
    "decimals": 2,
}
READ_AGAIN_TABLE2_DUC2004 = {
    "columns": ["rouge1", "rouge2", "rougeL"],
    "paper_columns": ["Rouge-1", "Rouge-2", "Rouge-L"],
    "rows": {
        "TOPIARY": [25.12, 6.46, 20.12],  # paper line 202
        "ABS": [26.55, 7.06, 23.49],  # paper line 203
        "ABS+": [28.18, 8.49, 23.81],  # paper line 204
        "RAS-LSTM": [27.41, 7.69, 23.06],  # paper line 205
        "RAS-Elman": [28.97, 8.26, 24.06],  # paper line 206
        "big-words-lvt2k-1sent": [28.35, 9.46, 24.59],  # paper line 207
        "big-words-lvt5k-1sent": [28.61, 9.42, 25.24],  # paper line 208
        "Ours-GRU (C)": [29.08, 9.20, 25.25],  # paper line 209
        "read_again": [29.89, 9.37, 25.93],  # paper line 210
        "Ours-Opt-2 (C)": [29.74, 9.44, 25.94],  # paper line 211
    },
    "labels": {"TOPIARY": "ZOPIARY (Zajic et al. (2004)), -", "ABS": "ABS (Rush et al. (2015)), 69K",
               "ABS+": "ABS+ (Rush et al. (2015)), 69K", "RAS-LSTM": "RAS-LSTM (Chopra et al. (2016)), 69K",
               "RAS-Elman": "RAS-Elman (Chopra et al. (2016)), 69K",
               "big-words-lvt2k-1sent": "big-words-lvt2k-1sent (Nallapati et al. (2016)), 69K",
               "big-words-lvt5k-1sent": "big-words-lvt5k-1sent (Nallapati et al. (2016)), 200K",
               "Ours-GRU (C)": "Ours-GRU (C), 15K", "read_again": "Ours-LSTM (C), 15K",
               "Ours-Opt-2 (C)": "Ours-Opt-2 (C), 15K"},
    "source": "Zeng et al. 2016 (Read-Again), Table 2 (DUC2004, 500 articles x 4 references)",
    "metric_convention": ("ROUGE-1/2/L limited-length recall (%), capped at 75 characters as the paper says "
                          "(ROUGE-1.5.5 -b 75, bytes), 4 references per article; summaries of 15 words, beam 10 "
                          "(4.1, 'Evaluation on DUC2004')."),
    "note": ("Evaluation only: models trained on the Gigaword training set (see the gigaword table). The "
             "paper prints 'ZOPIARY' for the TOPIARY system (Zajic et al. 2004), which 2.1 names correctly."),
    "decimals": 2,
}


def _size_ablation(sizes: list[str], rows: dict[str, tuple[list[float], list[float]]]) -> dict[str, list[float]]:
    """Tables 3-4 print one line per size with (no copy, copy) pairs per metric; one row each here."""
    out: dict[str, list[float]] = {}
    for size in sizes:
        plain, copy = rows[size]
        out[f"Ours-LSTM {size}"] = plain
        out[f"Ours-LSTM (C) {size}"] = copy
    return out


READ_AGAIN_TABLE3_DECODER_SIZE = {
    "columns": ["rouge1", "rouge2", "rougeL"],
    "paper_columns": ["Rouge-1", "Rouge-2", "Rouge-L"],
    "rows": _size_ablation(["2K", "5K", "15K", "30K", "69K"], {
        # (Ours-LSTM [R-1, R-2, R-L], Ours-LSTM (C) [R-1, R-2, R-L]), from the paper's interleaved columns
        "2K": ([14.39, 6.46, 13.74], [24.21, 11.27, 23.09]),  # paper line 228
        "5K": ([20.61, 9.67, 19.58], [26.83, 12.66, 25.31]),  # paper line 229
        "15K": ([25.30, 11.76, 23.74], [27.37, 12.64, 25.69]),  # paper line 230
        "30K": ([26.86, 11.93, 25.16], [27.49, 12.75, 25.77]),  # paper line 231
        "69K": ([27.82, 12.73, 26.01], [27.89, 12.69, 26.03]),  # paper line 232
    }),
    "source": "Zeng et al. 2016 (Read-Again), Table 3 (decoder vocabulary size, encoder vocabulary 110K)",
    "metric_convention": "As Table 1: full-length ROUGE F1 (%) on Gigaword.",
    "note": ("Row key = model + decoder vocabulary size (read_again.decoder_vocab). Ours-LSTM (C) 15K here "
             "is Table 1's read_again row. " + _RA_GIGAWORD_NOTE),
    "decimals": 2,
}
READ_AGAIN_TABLE4_ENCODER_SIZE = {
    "columns": ["rouge1", "rouge2", "rougeL"],
    "paper_columns": ["Rouge-1", "Rouge-2", "Rouge-L"],
    "rows": _size_ablation(["5K", "15K", "30K", "110K"], {
        "5K": ([21.82, 9.80, 20.60], [26.57, 11.98, 25.00]),  # paper line 238
        "15K": ([23.84, 10.69, 22.50], [27.79, 12.54, 25.96]),  # paper line 239
        "30K": ([23.78, 10.68, 22.28], [27.48, 12.56, 25.94]),  # paper line 240
        "110K": ([25.30, 11.76, 23.74], [27.37, 12.64, 25.69]),  # paper line 241
    }),
    "source": "Zeng et al. 2016 (Read-Again), Table 4 (encoder vocabulary size, decoder vocabulary 15K)",
    "metric_convention": "As Table 1: full-length ROUGE F1 (%) on Gigaword.",
    "note": "Row key = model + encoder vocabulary size (vocab.src_max_size). " + _RA_GIGAWORD_NOTE,
    "decimals": 2,
}
READ_AGAIN_TABLE5_DECODE_TIME = {
    "columns": ["2k", "5k", "15k", "30k", "69k"],
    "paper_columns": ["2k", "5k", "15k", "30k", "69k"],
    "rows": {
        "Ours-LSTM": [0.076, 0.081, 0.111, 0.161, 0.356],  # paper line 250
        "Ours-LSTM (C)": [0.084, 0.090, 0.123, 0.171, 0.376],  # paper line 251
    },
    "source": "Zeng et al. 2016 (Read-Again), Table 5 (decoding time per sentence)",
    "metric_convention": "Seconds per sentence by decoder vocabulary size, NVIDIA Titan X, TensorFlow.",
    "decimals": 3,
}

# ---------------------------------------------------------------------------------------------
PAPER_TABLES: dict[str, dict] = {
    "copynet_table1": COPYNET_TABLE1,
    "copynet_table3_char": COPYNET_TABLE3_CHAR,
    "copynet_table3_word": COPYNET_TABLE3_WORD,
    "wean_table1_pwkp": WEAN_TABLE1_PWKP,
    "wean_table2_ewsew": WEAN_TABLE2_EWSEW,
    "wean_table3_pwkp_human": WEAN_TABLE3_PWKP_HUMAN,
    "wean_table3_ewsew_human": WEAN_TABLE3_EWSEW_HUMAN,
    "wean_table4_lcsts": WEAN_TABLE4_LCSTS,
    "wean_table5_params": WEAN_TABLE5_PARAMS,
    "ps_table1_unk": PS_TABLE1_UNK,
    "ps_table2_entity": PS_TABLE2_ENTITY,
    "ps_table3_unk_recall": PS_TABLE3_UNK_RECALL,
    "ps_table5_europarl": PS_TABLE5_EUROPARL,
    "ps_rarest_word": PS_RAREST_WORD,
    "read_again_table1_gigaword": READ_AGAIN_TABLE1_GIGAWORD,
    "read_again_table2_duc2004": READ_AGAIN_TABLE2_DUC2004,
    "read_again_table3_decoder_size": READ_AGAIN_TABLE3_DECODER_SIZE,
    "read_again_table4_encoder_size": READ_AGAIN_TABLE4_ENCODER_SIZE,
    "read_again_table5_decode_time": READ_AGAIN_TABLE5_DECODE_TIME,
}

# Task -> the tables printed under its comparison, in order. Only tables whose columns are metrics the
# task's evaluation computes are listed; human ratings (WEAN Table 3), parameter counts (WEAN Table 5),
# the vocabulary-size ablations and decoding times (Read-Again Tables 3-5) are in PAPER_TABLES only.
TASK_TABLES: dict[str, list[str]] = {
    "copy_rules": ["copynet_table1"],
    "rarest_word": ["ps_rarest_word"],
    "gigaword": ["read_again_table1_gigaword"],
    "duc2004": ["read_again_table2_duc2004"],
    "gigaword_unk_pointers": ["ps_table1_unk", "ps_table3_unk_recall"],
    "gigaword_entity_pointers": ["ps_table2_entity"],
    "lcsts_char": ["copynet_table3_char", "wean_table4_lcsts"],
    "lcsts_word": ["copynet_table3_word"],
    "wikismall": ["wean_table1_pwkp"],
    "ewsew": ["wean_table2_ewsew"],
    "europarl_en_fr": ["ps_table5_europarl"],
}


def validate_table(table_id: str, table: dict) -> None:
    """Raise ValueError naming the table (and row) when a table breaks the shape in the module docstring."""
    where = f"pipeline/paper_results.py: table {table_id!r}"
    for key in ("columns", "rows", "source"):
        if key not in table:
            raise ValueError(f"{where} has no {key!r}")
    columns = table["columns"]
    if not columns or len(set(columns)) != len(columns):
        raise ValueError(f"{where}: columns must be non-empty and distinct, got {columns}")
    if "paper_columns" in table and len(table["paper_columns"]) != len(columns):
        raise ValueError(f"{where}: {len(table['paper_columns'])} paper_columns for {len(columns)} columns")
    if not table["rows"]:
        raise ValueError(f"{where} has no rows")
    for row, values in table["rows"].items():
        if len(values) != len(columns):
            raise ValueError(f"{where}, row {row!r}: {len(values)} values for {len(columns)} columns {columns}")
        for v in values:
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
                raise ValueError(f"{where}, row {row!r}: value {v!r} is not a number or None")
    stray = sorted(set(table.get("labels", {})) - set(table["rows"]))
    if stray:
        raise ValueError(f"{where}: labels for rows it does not have: {stray}")
    for mech, row in table.get("analogues", {}).items():
        if mech not in MECHANISM_KEYS:
            raise ValueError(f"{where}: analogue key {mech!r} is not a mechanism ({sorted(MECHANISM_KEYS)})")
        if row not in table["rows"] or row in MECHANISM_KEYS:
            raise ValueError(f"{where}: analogue {mech!r} -> {row!r} must name a published (non-mechanism) row")


def published_systems(table: dict) -> list[str]:
    """Row keys of systems that are not mechanisms of this project (printed as published rows only)."""
    return [row for row in table["rows"] if row not in MECHANISM_KEYS]


def row_label(table: dict, row: str) -> str:
    """The row's name as the paper prints it (the key itself when no label is recorded)."""
    return table.get("labels", {}).get(row, row)


def tables_for_task(task: str) -> list[dict]:
    """The published tables printed under ``task``'s comparison (empty for a task no paper reports)."""
    return [PAPER_TABLES[t] for t in TASK_TABLES.get(task, [])]


for _tid, _table in PAPER_TABLES.items():  # a malformed edit fails at import, naming the table
    validate_table(_tid, _table)
for _task, _ids in TASK_TABLES.items():
    for _tid in _ids:
        if _tid not in PAPER_TABLES:
            raise ValueError(f"pipeline/paper_results.py: TASK_TABLES[{_task!r}] names unknown table {_tid!r}")
