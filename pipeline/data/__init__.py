"""Data: raw corpora into Arrow shards. The readers and generators, one module per ``reader`` name
(``corpora``; they alone know the corpora's formats and settings), the textual steps they share
(``text``: tokenisers, normalisers, pointer annotation, subwords), the prepare stage's job without
Prefect (``prepare``), which tasks can run here (``tasks``) and adding your own corpus as a task
(``add_task``, the ``tasks add`` command). It may import ``pipeline.config`` and
``pipeline.io``; no torch, nothing of ``models``."""
