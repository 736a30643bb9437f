"""Special tokens and their ids: the first four entries of every vocabulary (pipeline.vocab.vocabulary), read
by the models (padding, <unk> for words a model cannot produce, <s>, </s>)."""

SPECIALS: tuple[str, ...] = ("<pad>", "<unk>", "<s>", "</s>")
PAD, UNK, BOS, EOS = 0, 1, 2, 3
