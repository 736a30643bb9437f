"""Reporting: comparison pages shaped like the papers' tables, ours beside the published rows
(``compare``, with ``paper_results`` and its ``paper_results.yaml``), model-free baselines scored like
a mechanism (``baselines``), experiments that collect several runs (``experiments``) and the PNG
figures (``plots``). It may import ``pipeline.config``, ``pipeline.io``, ``pipeline.decoding`` (the
scoring and the evaluate settings), ``pipeline.metrics`` and ``models`` (display names); no MLflow."""
