"""Vocabularies and batches: token <-> id maps stored as text (``vocabulary``), the per-example
extended vocabulary of source OOVs (``extended``), the id-encoded splits training reads
(``encoded``), and the padded batches of ``models.batch.Batch`` built from shard rows or encoded
rows (``batching``). It may import ``pipeline.config``, ``pipeline.io`` and ``models`` (the
specials and the batch type)."""
