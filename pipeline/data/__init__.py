"""Data: raw corpora into Arrow shards.

- ``corpora``: the readers and generators, one module per ``reader`` name of ``params.yaml``'s ``prepare``
  (found by module name; they alone know the corpora's formats and settings), and the helpers they
  share (``NOT_READERS``: writing shards and manifests, opening and checking raw input, key sets for
  deduplication, LDC SGML, records of table files, the raw-text dispatcher).
- ``text``: the textual steps the readers share: PTB tokens, Rush-style normalisation, rare-word
  ``<unk>``, Chinese segmentation, named entities, pointer annotation, sentencepiece subwords.
- ``prepare``: the prepare stage's job without Prefect (``flows/prepare.py`` runs it as a flow).
- ``tasks``: which tasks can run here, switching them on (``python -m pipeline.data.tasks list|enable|add``);
  ``add_task``: your own corpus as a task (``tasks add``).

Of the project it imports ``pipeline.config``, ``pipeline.io`` and ``pipeline.vocab`` (the vocabulary
that Europarl's shortlist and the rarest-word generator build): lower layers only (docs/design.md). It
loads without torch, so nothing of ``models`` (tests/test_import_direction.py checks both)."""
