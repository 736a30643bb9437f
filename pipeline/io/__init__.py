"""Files and shards: atomic writes and file hashes (``files``), the Arrow shard splits with their
manifests and quarantine that every stage reads and writes (``shards``), and ordered, bounded mapping
of CPU-bound work over chunks (``parallel``). It may import ``pipeline.config`` only; no torch."""
