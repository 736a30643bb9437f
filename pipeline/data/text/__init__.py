"""Textual steps the corpus readers share: PTB tokens, Rush-style normalisation, rare-word ``<unk>``,
Chinese segmentation, named entities, pointer annotation and sentencepiece subwords. Purely textual:
it never imports ``pipeline.data.corpora`` (the readers import it)."""
