"""Metrics equal to the official tools: exact match (CopyNet Table 1) and the text metrics by name
(``registry``: ``TEXT_METRICS``, the one place a metric is added), ROUGE-1.5.5 ported with its own
Porter stemmer and WordNet exceptions (``rouge``, ``rouge_stem``), multi-bleu BLEU (``bleu``) and
SARI (``sari``); beside them the copy analysis of outputs and references (``copy_analysis``: copied
tokens, novel n-grams, repeated trigrams, OOV recall, lengths; See et al. 2017) and the outputs'
bytes against a byte budget (``byte_budget``: DUC's 75 bytes). It imports no other package of
``pipeline``."""
