"""Id-encoded splits: a task's training and validation shards as vocabulary ids, written once by the
vocab stage, so the training loop does no string work per step.

``data/vocab/<task>/ids/<split>/part-NNNNN.arrow`` (+ ``manifest.json``), one row per shard row:

  id           string          the shard row's id (named in error messages)
  src          list<int32>     source-vocabulary ids (<unk> for its OOVs)
  src_ext      list<int32>     extended ids of the source: decoder-vocabulary id, or V + k for the
                               k-th distinct source word outside the decoder vocabulary (in order of
                               first appearance), as ``pipeline.vocab.extended.extend_example``
  tgt          list<int32>     extended ids of the target (an OOV found in the source gets its V + k,
                               any other OOV <unk>); no <s>/</s>
  tgt_pointer  list<int32>     copied from the shard when it has pointer annotations
  tgt_switch   list<bool>      (Pointer Softmax 5.2-5.3)
  features     list<int32>     when the shard has a features column: ids in the features vocabulary
                               (<unk> for a tag it lacks)

Encoding is vectorised with pyarrow/numpy over whole shard parts (no Python loop over tokens); a
part is read memory-mapped and written before the next one is read, so memory stays flat in the
corpus size. ``EncodedSplit`` memory-maps the parts back and builds padded batches for any row set.
"""

from __future__ import annotations

import mmap
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc
import torch

from models.batch import Batch
from pipeline.io.shards import ShardWriter, read_manifest
from pipeline.vocab.vocabulary import BOS, EOS, FEATURES, PAD, UNK, Vocab

POINTER_COLUMNS = ("tgt_pointer", "tgt_switch")
RELEASE_EVERY = 16  # batches between EncodedSplit.release_pages (about 25 MB of mapped pages each at 64 rows)


def encoded_schema(annotated: bool, features: bool = False) -> pa.Schema:
    fields = [
        pa.field("id", pa.string()),
        pa.field("src", pa.list_(pa.int32())),
        pa.field("src_ext", pa.list_(pa.int32())),
        pa.field("tgt", pa.list_(pa.int32())),
    ]
    if annotated:
        fields += [pa.field("tgt_pointer", pa.list_(pa.int32())), pa.field("tgt_switch", pa.list_(pa.bool_()))]
    if features:
        fields.append(pa.field(FEATURES, pa.list_(pa.int32())))
    return pa.schema(fields)


def _flat(column: pa.ChunkedArray | pa.Array) -> tuple[pa.Array, np.ndarray]:
    """A list<string> column -> (its flat values, offsets (rows + 1,) int64, starting at 0)."""
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    arr = arr.cast(pa.large_list(pa.string()))
    offsets = np.asarray(arr.offsets, dtype=np.int64)
    values = arr.values.slice(offsets[0], offsets[-1] - offsets[0])
    return values, offsets - offsets[0]


def _lookup(values: pa.Array, vocab: Vocab) -> np.ndarray:
    """Vocabulary id of every token, -1 where it is not in the vocabulary."""
    index = pc.index_in(values, value_set=pa.array(vocab.itos, type=pa.string()))
    return np.asarray(index.fill_null(-1), dtype=np.int64)


def _row_of(offsets: np.ndarray) -> np.ndarray:
    """The row of each flat position: offsets (rows + 1,) -> (n,)."""
    return np.repeat(np.arange(len(offsets) - 1, dtype=np.int64), np.diff(offsets))


def encode_table(table: pa.Table, src_vocab: Vocab, tgt_vocab: Vocab, features_vocab: Vocab | None = None) -> pa.Table:
    """A shard table (id, src, tgt[, tgt_pointer, tgt_switch][, features]) -> its encoded table (module
    docstring); ``features_vocab``: encode the ``features`` column with it (None: the table has none)."""
    size = len(tgt_vocab)
    src_values, src_off = _flat(table.column("src"))
    tgt_values, tgt_off = _flat(table.column("tgt"))
    src_ids = _lookup(src_values, src_vocab)
    src_in_tgt = _lookup(src_values, tgt_vocab)
    tgt_ids = _lookup(tgt_values, tgt_vocab)

    # One dictionary over source and target words, so a word has the same code on both sides.
    codes = np.asarray(pc.dictionary_encode(pa.concat_arrays([src_values, tgt_values])).indices, dtype=np.int64)
    src_codes, tgt_codes = codes[: len(src_values)], codes[len(src_values) :]
    n_codes = int(codes.max()) + 1 if len(codes) else 1
    src_rows, tgt_rows = _row_of(src_off), _row_of(tgt_off)

    # Source OOVs (w.r.t. the decoder vocabulary): number each row's distinct OOV words V, V+1, ...
    # in order of first appearance.
    src_ext = src_in_tgt.copy()
    oov = np.flatnonzero(src_in_tgt < 0)
    oov_keys = np.empty(0, dtype=np.int64)
    oov_rank = np.empty(0, dtype=np.int64)
    if len(oov):
        keys = src_rows[oov] * n_codes + src_codes[oov]  # (row, word)
        oov_keys, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
        first_pos = oov[first]  # flat position of each (row, word)'s first occurrence
        order = np.lexsort((first_pos, oov_keys // n_codes))  # by row, then by first position
        key_row = (oov_keys // n_codes)[order]
        row_start = np.searchsorted(key_row, key_row, side="left")
        oov_rank = np.empty(len(oov_keys), dtype=np.int64)
        oov_rank[order] = np.arange(len(order)) - row_start  # k: rank within its row
        src_ext[oov] = size + oov_rank[inverse]

    # Target words outside the decoder vocabulary: the source OOV's V + k when the row's source
    # holds the word, else <unk>.
    tgt_ext = tgt_ids.copy()
    missing = np.flatnonzero(tgt_ids < 0)
    if len(missing) and not len(oov_keys):  # no source OOV in this part: every target OOV is <unk>
        tgt_ext[missing] = UNK
    elif len(missing):
        keys = tgt_rows[missing] * n_codes + tgt_codes[missing]
        at = np.minimum(np.searchsorted(oov_keys, keys), len(oov_keys) - 1)
        found = oov_keys[at] == keys
        tgt_ext[missing] = np.where(found, size + oov_rank[at], UNK)
    src_ids[src_ids < 0] = UNK

    def lists(offsets: np.ndarray, values: np.ndarray) -> pa.Array:
        return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), pa.array(values.astype(np.int32)))

    columns = {
        "id": table.column("id"),
        "src": lists(src_off, src_ids),
        "src_ext": lists(src_off, src_ext),
        "tgt": lists(tgt_off, tgt_ext),
    }
    annotated = all(c in table.column_names for c in POINTER_COLUMNS)
    if annotated:
        columns.update({c: table.column(c) for c in POINTER_COLUMNS})
    if features_vocab is not None:
        values, offsets = _flat(table.column(FEATURES))
        ids = _lookup(values, features_vocab)
        ids[ids < 0] = UNK
        columns[FEATURES] = lists(offsets, ids)
    return pa.table(columns, schema=encoded_schema(annotated, features_vocab is not None))


def _read_part(path: Path) -> pa.Table:
    with pa.memory_map(str(path), "r") as source:
        return pa.ipc.open_file(source).read_all()


def write_encoded_split(
    split_dir: str | Path,
    out_dir: str | Path,
    src_vocab: Vocab,
    tgt_vocab: Vocab,
    transform: Callable[[pa.Table], pa.Table] | None = None,
    features_vocab: Vocab | None = None,
) -> dict:
    """Encode every part of a shard split into ``out_dir``, part by part; published atomically
    (ShardWriter) with a manifest naming the shard split and vocabulary sizes it was made from.
    ``transform``: applied to each part first (a backbone's tokenizer turning words into pieces).
    ``features_vocab``: the task's features vocabulary, required exactly when the split (after
    ``transform``) has a features column."""
    split_dir = Path(split_dir)
    manifest = read_manifest(split_dir)
    if not manifest["parts"]:
        raise ValueError(f"{split_dir}: the manifest lists no parts")
    with pa.memory_map(str(split_dir / manifest["parts"][0]["file"]), "r") as source:
        names = pa.ipc.open_file(source).schema.names
    if transform is not None:
        names = transform(_read_part(split_dir / manifest["parts"][0]["file"]).slice(0, 0)).column_names
    if (FEATURES in names) != (features_vocab is not None):
        raise ValueError(
            f"{split_dir}: "
            + (
                "the shards have a features column: encode them with the task's features vocabulary (features.vocab)"
                if FEATURES in names
                else "a features vocabulary was given but the shards have no features column"
            )
        )
    params = {
        "source_split": split_dir.name,
        "source_content_sha256": manifest.get("content_sha256"),
        "src_vocab": len(src_vocab),
        "tgt_vocab": len(tgt_vocab),
        **({"features_vocab": len(features_vocab)} if features_vocab is not None else {}),
    }
    schema = encoded_schema(all(c in names for c in POINTER_COLUMNS), features_vocab is not None)
    with ShardWriter(out_dir, schema, params=params) as writer:
        for part in manifest["parts"]:
            table = _read_part(split_dir / part["file"])
            table = transform(table) if transform else table
            writer.write_table(encode_table(table, src_vocab, tgt_vocab, features_vocab))
    return writer.close()


class EncodedSplit:
    """The memory-mapped encoded split; ``batch(rows)`` builds a padded Batch of those rows.

    Only paths are pickled (DataLoader workers reopen the memory map), never the data.
    """

    def __init__(self, split_dir: str | Path, tgt_vocab_size: int, max_src_len: int | None = None):
        self.split_dir = Path(split_dir)
        self.vocab = tgt_vocab_size
        self.max_src_len = max_src_len
        self.manifest = read_manifest(self.split_dir)
        self.bounds = np.cumsum(
            [0] + [part["rows"] for part in self.manifest["parts"]]
        )  # (parts + 1,) first row of each
        self._parts: list[pa.Table] | None = None
        self._maps: list[mmap.mmap] = []
        self._view_cache: dict[str, list] = {}
        self._batches_built = 0

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_parts": None, "_maps": [], "_view_cache": {}}

    @property
    def parts(self) -> list[pa.Table]:
        """The memory-mapped part tables (one Arrow chunk per column each), opened on first use.

        Mapped with ``MADV_RANDOM``: training reads rows in random order, and the kernel's
        read-ahead would otherwise fault in (and count as this process's resident memory) far
        more of the file than the rows a batch takes."""
        if self._parts is None:
            self._parts, self._maps = [], []
            for part in self.manifest["parts"]:
                with open(self.split_dir / part["file"], "rb") as fh:
                    mapped = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
                mapped.madvise(mmap.MADV_RANDOM)
                self._maps.append(mapped)
                self._parts.append(pa.ipc.open_file(pa.BufferReader(pa.py_buffer(mapped))).read_all())
        return self._parts

    def release_pages(self) -> None:
        """Unmap the file pages batches have touched from this process (MADV_DONTNEED; they stay in
        the page cache and fault back in when read again). Without it, every mapped page a run has
        read counts in its resident memory, up to the whole split over an epoch."""
        for mapped in self._maps:
            mapped.madvise(mmap.MADV_DONTNEED)

    def __len__(self) -> int:
        return int(self.manifest["rows"])

    @property
    def annotated(self) -> bool:
        return all(c in self.parts[0].column_names for c in POINTER_COLUMNS)

    @property
    def has_features(self) -> bool:
        return FEATURES in self.parts[0].column_names

    def lengths(self) -> tuple[np.ndarray, np.ndarray]:
        """(source length as batched (<= max_src_len, >= 1), target length + 1 for </s>) per row, int32,
        read from the list offsets of each part (no list values are touched)."""

        def length(column: str) -> np.ndarray:
            return np.concatenate(
                [np.diff(np.asarray(part.column(column).chunk(0).offsets, dtype=np.int32)) for part in self.parts]
            )

        src, tgt = length("src"), length("tgt")
        if self.max_src_len:
            src = np.minimum(src, self.max_src_len)
        return np.maximum(src, 1), tgt + 1

    def _views(self, column: str) -> list[tuple[np.ndarray, np.ndarray, bool]]:
        """Per part: (offsets into the values buffer, values, values are bit-packed booleans) of a list
        column, zero-copy numpy views of the mapped file (nothing is read until an element is)."""
        views = self._view_cache.get(column)
        if views is None:
            views = []
            for part in self.parts:
                arr = part.column(column).chunk(0)
                child = arr.values
                bits = pa.types.is_boolean(child.type)
                offsets = np.frombuffer(arr.buffers()[1], dtype=np.int32)[arr.offset : arr.offset + len(arr) + 1]
                values = np.frombuffer(child.buffers()[1], dtype=np.uint8 if bits else np.int32)
                views.append((offsets + child.offset if child.offset else offsets, values, bits))
            self._view_cache[column] = views
        return views

    def _gather(
        self,
        column: str,
        part_of: np.ndarray,
        local: np.ndarray,
        pad: int,
        max_len: int | None = None,
        empty: int | None = None,
        width: int | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """The rows' lists of ``column`` -> (padded (N, W) int64 matrix, lengths (N,)).

        Only the selected rows' offsets and values are touched. (pyarrow's ``take`` reads far more
        of each part than the rows it takes, and on the concatenated parts copies the whole split.)
        ``max_len`` cuts rows; ``empty``: the single id an empty row gets (an empty source still
        needs one position); ``width``: the matrix width (default: the longest row)."""
        views = self._views(column)
        starts = np.empty(len(local), dtype=np.int64)
        lengths = np.empty(len(local), dtype=np.int64)
        for p in np.unique(part_of):
            sel = part_of == p
            offsets = views[p][0]
            starts[sel] = offsets[local[sel]]
            lengths[sel] = offsets[local[sel] + 1] - starts[sel]
        kept = np.minimum(lengths, max_len) if max_len else lengths
        kept_out = np.maximum(kept, 1) if empty is not None else kept
        cols = max(1, int(kept_out.max(initial=0))) if width is None else width
        out = np.full((len(local), cols), pad, dtype=np.int64)
        pos = np.arange(cols)
        filled = pos[None, :] < np.minimum(kept, cols)[:, None]  # (N, W) positions that hold a value
        for p in np.unique(part_of):
            sel = np.flatnonzero(part_of == p)
            _, values, bits = views[p]
            index = starts[sel, None] + pos[None, :]  # (n, W) element positions in the part
            mask = filled[sel]
            at = index[mask]
            block = out[sel]
            block[mask] = (values[at >> 3] >> (at & 7)) & 1 if bits else values[at]
            out[sel] = block
        if empty is not None:
            out[kept == 0, 0] = empty
        return out, kept_out

    def batch(self, rows: np.ndarray, source_tokens: Vocab | None = None) -> Batch:
        """Rows (N,) -> Batch (no string work; ``source_tokens``: also give the source words, read from
        the source vocabulary, for a model that reads them, e.g. Read-Again's sentence ends)."""
        rows = np.asarray(rows, dtype=np.int64)
        self._batches_built += 1
        if self._batches_built % RELEASE_EVERY == 0:
            self.release_pages()
        part_of = np.searchsorted(self.bounds, rows, side="right") - 1  # (N,)
        local = rows - self.bounds[part_of]  # (N,) row within its part
        src, src_len = self._gather("src", part_of, local, PAD, self.max_src_len, empty=EOS)
        src_ext, _ = self._gather("src_ext", part_of, local, PAD, self.max_src_len, empty=EOS)
        tgt, tgt_len = self._gather("tgt", part_of, local, PAD)
        # Extended ids past the truncated source's own OOVs become <unk> (they were numbered by first
        # appearance, so the OOVs kept by a cut are exactly V .. V + k - 1).
        n_oov = np.maximum(src_ext.max(axis=1) - self.vocab + 1, 0)  # (B,)
        if self.max_src_len:
            tgt = np.where(tgt >= self.vocab + n_oov[:, None], UNK, tgt)
        bsz, width = tgt.shape
        tgt_in = np.full((bsz, width + 1), PAD, dtype=np.int64)
        tgt_out = np.full((bsz, width + 1), PAD, dtype=np.int64)
        tgt_in[:, 0] = BOS
        tgt_in[:, 1:] = tgt
        tgt_out[:, :width] = tgt
        tgt_out[np.arange(bsz), tgt_len] = EOS
        pointer = switch = None
        if self.annotated:
            ptr, _ = self._gather("tgt_pointer", part_of, local, -1, width=width + 1)
            sw, _ = self._gather("tgt_switch", part_of, local, 0, width=width + 1)
            cut = ptr >= src_len[:, None]  # a pointer past a truncated source points nowhere
            pointer = torch.from_numpy(np.where(cut, -1, ptr))
            switch = torch.from_numpy((sw != 0) & ~cut)
        features = None
        if self.has_features:
            features = torch.from_numpy(self._gather(FEATURES, part_of, local, PAD)[0])  # (B, F)
        tokens = []
        if source_tokens is not None:
            tokens = [[source_tokens.itos[i] for i in row[:n]] for row, n in zip(src.tolist(), src_len.tolist())]
        return Batch(
            src=torch.from_numpy(src),
            src_len=torch.from_numpy(src_len),
            src_ext=torch.from_numpy(src_ext),
            tgt_in=torch.from_numpy(tgt_in),
            tgt_out=torch.from_numpy(tgt_out),
            n_ext=int(n_oov.max(initial=0)),
            oovs=[],
            ids=[self.parts[p].column("id").chunk(0)[j].as_py() for p, j in zip(part_of.tolist(), local.tolist())],
            src_tokens=tokens,
            tgt_tokens=[],
            tgt_pointer=pointer,
            tgt_switch=switch,
            features=features,
        )
