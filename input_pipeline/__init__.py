"""Data for MLM pretraining: corpus -> WordPiece tokenizer -> packed, cached token ids
-> masked, deterministic batches (numpy, on the host).

Entry points for train.py: `build_pretraining_data` and `from_config` (config.data of
configs/pretrain.py); see input_pipeline/pipeline.py.
Modules: corpus (text sources, streamed as chunks), textfiles (reading files in blocks),
documents (lines -> sentences numbered by document), tokenizer (WordPiece train/load,
special ids), encoding (fast exact sentence encoding via a word cache), packing
(fixed-length sequences, train/eval split), ingest (the streaming cache build), cache
(atomic, checksummed .bin cache), masking (BERT's 80/10/10 corruption), batches
(step -> batch, process shards, eval). docs/INGEST.md: design and measurements.
"""

from input_pipeline.batches import Batcher, EvalBatches, process_rows
from input_pipeline.corpus import (
    Document,
    HubDataset,
    StdlibDocstrings,
    TextChunk,
    TextFiles,
    dataset_chunks,
    documents_from_dataset,
    parse_corpus_spec,
    read_text_file,
)
from input_pipeline.encoding import SentenceEncoder
from input_pipeline.errors import CacheError, CorpusError, InputPipelineError, TokenizerError
from input_pipeline.masking import Masker
from input_pipeline.packing import PackedSplit, StreamPacker, pack_documents, split_documents
from input_pipeline.pipeline import PretrainingData, build_pretraining_data, from_config
from input_pipeline.tokenizer import (
    SpecialIds,
    TokenizedDocs,
    load_tokenizer,
    save_tokenizer,
    tokenize_documents,
    train_tokenizer,
)

__all__ = [
    "Batcher",
    "CacheError",
    "CorpusError",
    "Document",
    "EvalBatches",
    "HubDataset",
    "InputPipelineError",
    "Masker",
    "PackedSplit",
    "PretrainingData",
    "SentenceEncoder",
    "SpecialIds",
    "StdlibDocstrings",
    "StreamPacker",
    "TextChunk",
    "TextFiles",
    "TokenizedDocs",
    "TokenizerError",
    "build_pretraining_data",
    "dataset_chunks",
    "documents_from_dataset",
    "from_config",
    "load_tokenizer",
    "pack_documents",
    "parse_corpus_spec",
    "process_rows",
    "read_text_file",
    "save_tokenizer",
    "split_documents",
    "tokenize_documents",
    "train_tokenizer",
]
