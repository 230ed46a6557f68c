"""Data for MLM pretraining: corpus -> WordPiece tokenizer -> packed, cached token ids
-> masked, deterministic batches (numpy, on the host).

Entry points for train.py: `build_pretraining_data` and `from_config` (config.data of
configs/pretrain.py); see input_pipeline/pipeline.py.
Modules: corpus (text sources and documents), tokenizer (WordPiece train/load, special
ids), packing (fixed-length sequences, train/eval split), cache (atomic .npy cache),
masking (BERT's 80/10/10 corruption), batches (step -> batch, process shards, eval).
"""

from input_pipeline.batches import Batcher, EvalBatches, process_rows
from input_pipeline.corpus import (
    Document,
    HubDataset,
    StdlibDocstrings,
    TextFiles,
    documents_from_dataset,
    parse_corpus_spec,
    read_text_file,
)
from input_pipeline.errors import CorpusError, InputPipelineError, TokenizerError
from input_pipeline.masking import Masker
from input_pipeline.packing import PackedSplit, pack_documents, split_documents
from input_pipeline.pipeline import PretrainingData, build_pretraining_data, from_config
from input_pipeline.tokenizer import (
    SpecialIds,
    TokenizedDocs,
    load_tokenizer,
    tokenize_documents,
    train_tokenizer,
)

__all__ = [
    "Batcher",
    "CorpusError",
    "Document",
    "EvalBatches",
    "HubDataset",
    "InputPipelineError",
    "Masker",
    "PackedSplit",
    "PretrainingData",
    "SpecialIds",
    "StdlibDocstrings",
    "TextFiles",
    "TokenizedDocs",
    "TokenizerError",
    "build_pretraining_data",
    "documents_from_dataset",
    "from_config",
    "load_tokenizer",
    "pack_documents",
    "parse_corpus_spec",
    "process_rows",
    "read_text_file",
    "split_documents",
    "tokenize_documents",
    "train_tokenizer",
]
