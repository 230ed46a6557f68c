"""Worker process for input_pipeline.ingest: encodes chunks of sentences.

Protocol over stdin/stdout, pickled objects: first (tokenizer JSON, dtype string), then
per request the sentences joined by newlines (one string pickles as one copy; no
sentence holds a newline), answered by (token ids in that dtype, int32 ids per
sentence, word-level flag) or ("error", message). EOF on stdin (the parent finished,
or died) ends the worker. A plain `python -m` process rather than multiprocessing: the
"spawn" start method re-runs the caller's main script in every worker, and "fork"
copies a parent that may be running JAX threads.
"""

from __future__ import annotations

import pickle
import sys

from tokenizers import Tokenizer

from input_pipeline.encoding import SentenceEncoder
from input_pipeline.packing import narrow


def main() -> None:
    requests, replies = sys.stdin.buffer, sys.stdout.buffer
    tokenizer_json, dtype = pickle.load(requests)
    encoder = SentenceEncoder(Tokenizer.from_str(tokenizer_json))
    while True:
        try:
            sentences = pickle.load(requests).split("\n")
        except EOFError:
            return
        try:
            tokens, lengths = encoder(sentences)
            reply = (narrow(tokens, dtype), lengths.astype("int32"), encoder.word_level)
        except Exception as e:  # reported by the parent as one line
            reply = ("error", f"{type(e).__name__}: {e}")
        pickle.dump(reply, replies, protocol=pickle.HIGHEST_PROTOCOL)
        replies.flush()


if __name__ == "__main__":
    main()
