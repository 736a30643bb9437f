"""Data: raw corpora into Arrow shards. The readers and generators, one module per ``reader`` name
(``corpora``; they alone know the corpora's formats and settings), the textual steps they share
(``text``: tokenisers, normalisers, pointer annotation, subwords), the prepare stage's job without
Prefect (``prepare``) and which tasks can run here (``tasks``). It may import ``pipeline.config`` and
``pipeline.io``; no torch, nothing of ``models``."""
