"""The packed data cache under damage, interruption, full disks and concurrent builders.

Issue 11 items 10 and 14, issue 12's reliability list. Tiny corpora in tmp_path; the
subprocess tests run a few seconds each.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from helpers import ENGLISH_SENTENCES, REPO, write_one_file_corpus

import input_pipeline as ip
from input_pipeline import cache


def build(corpus: Path, cache_dir: Path, **kwargs) -> ip.PretrainingData:
    args = dict(vocab_size=200, max_seq_length=32, eval_fraction=0.1)
    args.update(kwargs)
    return ip.build_pretraining_data(str(corpus), cache_dir, **args)


def arrays(data: ip.PretrainingData) -> dict[str, np.ndarray]:
    return {f"{name}_{field}": np.array(getattr(split, field))
            for name, split in (("train", data.train), ("eval", data.eval))
            for field in ("input_ids", "token_type_ids", "lengths")}


def assert_same_arrays(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> None:
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)


def array_files(packed_dir: Path) -> list[Path]:
    return sorted(p for p in packed_dir.iterdir() if "input_ids" in p.name)


def set_aside(cache_dir: Path) -> list[Path]:
    return sorted(cache_dir.glob("packed-*.damaged-*"))


def leftovers(cache_dir: Path) -> list[Path]:
    """Temporary build directories left in the cache (none after any build ends)."""
    return [p for p in cache_dir.iterdir() if ".tmp-" in p.name] if cache_dir.exists() else []


def messages(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


# ------------------------------------------------------------------------------------
# Damaged entries (issue 11 items 10 and 14)
# ------------------------------------------------------------------------------------


def test_corrupted_token_ids_are_detected_set_aside_and_rebuilt(tmp_path, caplog):
    corpus = write_one_file_corpus(tmp_path / "c")
    data = build(corpus, tmp_path / "cache")
    good = arrays(data)
    target = array_files(data.packed_dir)[-1]  # train input ids
    del data  # drop the memory maps before writing under them
    raw = bytearray(target.read_bytes())
    raw[len(raw) // 2] ^= 0xFF  # one flipped byte in the middle of the token ids
    target.write_bytes(bytes(raw))

    with caplog.at_level(logging.WARNING):
        again = build(corpus, tmp_path / "cache")
    assert_same_arrays(arrays(again), good)  # rebuilt, not the damaged ids
    aside = set_aside(tmp_path / "cache")
    assert len(aside) == 1 and (aside[0] / target.name).is_file()  # kept for inspection
    warned = [m for m in messages(caplog) if target.name in m]
    assert len(warned) == 1 and str(aside[0]) in warned[0], messages(caplog)
    assert cache.is_complete(again.packed_dir)


@pytest.mark.parametrize("damage", ["garbage", "truncated", "missing"])
def test_damaged_meta_json_is_rebuilt_with_a_warning_naming_it(tmp_path, caplog, damage):
    corpus = write_one_file_corpus(tmp_path / "c")
    data = build(corpus, tmp_path / "cache")
    good = arrays(data)
    meta = data.packed_dir / "meta.json"
    del data
    if damage == "garbage":
        meta.write_bytes(b"\x00\x13not json")
    elif damage == "truncated":
        meta.write_text(meta.read_text()[:40])
    else:
        meta.unlink()
    with caplog.at_level(logging.WARNING):
        again = build(corpus, tmp_path / "cache")
    assert_same_arrays(arrays(again), good)
    assert again.meta["corpus_identity"] and again.meta["tokenizer_hash"]
    warned = [m for m in messages(caplog) if "meta.json" in m]
    assert len(warned) == 1 and str(meta) in warned[0], messages(caplog)
    assert len(set_aside(tmp_path / "cache")) == 1


def test_truncated_array_file_is_rebuilt(tmp_path, caplog):
    corpus = write_one_file_corpus(tmp_path / "c")
    data = build(corpus, tmp_path / "cache")
    good = arrays(data)
    target = array_files(data.packed_dir)[0]
    del data
    target.write_bytes(target.read_bytes()[:-7])
    with caplog.at_level(logging.WARNING):
        again = build(corpus, tmp_path / "cache")
    assert_same_arrays(arrays(again), good)
    assert any(target.name in m for m in messages(caplog))


# ------------------------------------------------------------------------------------
# Interrupted, failing and concurrent builds (issue 12)
# ------------------------------------------------------------------------------------


def run_python(code: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_unreadable_corpus_file_is_one_error_naming_it(tmp_path, monkeypatch):
    corpus = write_one_file_corpus(tmp_path / "c")
    (tmp_path / "c" / "zz_locked.txt").write_text("More text here.\n")
    real_open = open

    def deny(path, *args, **kwargs):  # root reads any file, so fake the EACCES
        if str(path).endswith("zz_locked.txt"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr("builtins.open", deny)
    with pytest.raises(ip.CorpusError, match=r"zz_locked\.txt.*Permission denied") as err:
        build(corpus.parent, tmp_path / "cache")
    assert "\n" not in str(err.value)
    assert not list((tmp_path / "cache").glob("packed-*"))
    assert not leftovers(tmp_path / "cache")


@pytest.mark.slow
def test_full_disk_during_cache_write_is_one_error_and_nothing_complete(tmp_path):
    """RLIMIT_FSIZE makes the kernel refuse writes past a size, as a full disk does."""
    corpus = write_one_file_corpus(tmp_path / "c", num_docs=400)
    ip.train_tokenizer(ENGLISH_SENTENCES * 3, 200, tmp_path / "tok")
    result = run_python(f"""
        import resource, signal
        import input_pipeline as ip
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of a signal
        resource.setrlimit(resource.RLIMIT_FSIZE, (16_000, 16_000))
        try:
            ip.build_pretraining_data({str(corpus)!r}, {str(tmp_path / 'cache')!r},
                                      tokenizer={str(tmp_path / 'tok')!r},
                                      max_seq_length=32, eval_fraction=0.1)
        except ValueError as e:
            print(f"error: {{type(e).__name__}}: {{e}}")
        """, tmp_path)
    # The build's own progress line ("data: tokenizing and packing ..."), then the error.
    lines = [x for x in result.stdout.strip().splitlines() if not x.startswith("data: ")]
    assert result.returncode == 0 and len(lines) == 1, (result.stdout, result.stderr[-2000:])
    assert lines[0].startswith("error: CacheError: ") and str(tmp_path / "cache") in lines[0]
    assert not list((tmp_path / "cache").glob("packed-*"))
    assert not leftovers(tmp_path / "cache")


@pytest.mark.slow
def test_build_killed_mid_write_restarts_cleanly(tmp_path):
    """SIGKILL while the cache is being written, then an ordinary rebuild."""
    corpus = write_one_file_corpus(tmp_path / "c", num_docs=400)
    tok_dir = tmp_path / "tok"
    ip.train_tokenizer(ENGLISH_SENTENCES * 3, 200, tok_dir)
    kwargs = dict(tokenizer=tok_dir, max_seq_length=32, eval_fraction=0.1)
    reference = arrays(ip.build_pretraining_data(str(corpus), tmp_path / "ref", **kwargs))
    result = run_python(f"""
        import os, signal, numpy as np
        import input_pipeline as ip
        calls = []
        # Every write of cache arrays goes through the module's append helper.
        from input_pipeline import cache
        real_append = cache.append_array
        def append(f, array):
            calls.append(1)
            if len(calls) == 3:
                os.kill(os.getpid(), signal.SIGKILL)
            real_append(f, array)
        cache.append_array = append
        ip.build_pretraining_data({str(corpus)!r}, {str(tmp_path / 'cache')!r},
                                  tokenizer={str(tok_dir)!r}, max_seq_length=32,
                                  eval_fraction=0.1, chunk_chars=2000)
        """, tmp_path)
    assert result.returncode == -9, result.stderr[-2000:]
    assert leftovers(tmp_path / "cache") and not list((tmp_path / "cache").glob("packed-*"))
    data = ip.build_pretraining_data(str(corpus), tmp_path / "cache", **kwargs)
    assert_same_arrays(arrays(data), reference)
    # The dead builder's temporary directory is cleaned up by the next build.
    assert not leftovers(tmp_path / "cache")


@pytest.mark.slow
def test_two_processes_building_the_same_cache(tmp_path):
    corpus = write_one_file_corpus(tmp_path / "c", num_docs=300)
    code = f"""
        import json, sys
        import numpy as np
        import input_pipeline as ip
        data = ip.build_pretraining_data({str(corpus)!r}, {str(tmp_path / 'cache')!r},
                                         vocab_size=200, max_seq_length=32,
                                         eval_fraction=0.1)
        print(json.dumps([str(data.packed_dir), int(np.asarray(data.train.input_ids,
                          np.int64).sum()), len(data.train), len(data.eval)]))
        """
    env = dict(os.environ, PYTHONPATH=str(REPO))
    procs = [subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], cwd=tmp_path,
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(2)]
    outs = [p.communicate(timeout=180) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1][-2000:] for o in outs]
    results = [json.loads(o[0].strip().splitlines()[-1]) for o in outs]
    assert results[0] == results[1]  # one tokenizer, one cache entry, the same arrays
    assert len(list((tmp_path / "cache").glob("packed-*"))) == 1
    assert len(list((tmp_path / "cache").glob("tokenizer-*"))) == 1
    assert not leftovers(tmp_path / "cache")
    data = ip.build_pretraining_data(str(corpus), tmp_path / "cache", vocab_size=200,
                                     max_seq_length=32, eval_fraction=0.1)
    assert str(data.packed_dir) == results[0][0]


# -- token id width (issue 22 item 1) ---------------------------------------------------
SPARSE_ID = 70_000  # above uint16: astype(uint16) would store it as 4464


def sparse_tokenizer(directory: Path) -> Path:
    """A trained WordPiece vocabulary plus "zebra" at id 70000: 45 tokens, ids to 70000
    (a tokenizer.json may number its vocabulary with gaps)."""
    tok = ip.train_tokenizer(ENGLISH_SENTENCES * 4, 100)
    spec = json.loads(tok.to_str())
    spec["model"]["vocab"]["zebra"] = SPARSE_ID
    directory.mkdir(parents=True)
    (directory / "tokenizer.json").write_text(json.dumps(spec))
    return directory


def zebra_corpus(directory: Path) -> Path:
    directory.mkdir()
    text = "\n\n".join("The zebra jumps over the lazy dog.\nA zebra is not gold."
                       for _ in range(30))
    (directory / "corpus.txt").write_text(text + "\n")
    return directory


def test_a_sparse_high_token_id_is_stored_whole_and_sizes_the_model(tmp_path):
    tokenizer_dir = sparse_tokenizer(tmp_path / "tok")
    tok = ip.load_tokenizer(tokenizer_dir)
    assert tok.get_vocab_size() < 65536 and tok.token_to_id("zebra") == SPARSE_ID
    data = build(zebra_corpus(tmp_path / "c"), tmp_path / "cache", tokenizer=tokenizer_dir)
    ids = np.asarray(data.train.input_ids)
    assert ids.dtype == np.int32 and SPARSE_ID in ids and 4464 not in ids
    expected = tok.encode("The zebra jumps over the lazy dog.", add_special_tokens=False).ids
    row = list(ids[0, 1:1 + len(expected)])
    assert row == expected  # the first sentence, as the tokenizer encodes it
    assert data.vocab_size == SPARSE_ID + 1  # embedding rows for every id
    assert ip.tokenizer.vocab_list(tok)[SPARSE_ID] == "zebra"


def test_more_than_65536_tokens_are_stored_whole(tmp_path):
    vocab = list(ip.tokenizer.SPECIAL_TOKENS) + [f"w{i}" for i in range(70_000)]
    (tmp_path / "tok").mkdir()
    (tmp_path / "tok" / "vocab.txt").write_text("\n".join(vocab) + "\n")
    rng = np.random.default_rng(0)
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "corpus.txt").write_text("\n\n".join(
        " ".join(f"w{i}" for i in rng.integers(65_600, 70_000, 8)) for _ in range(40)) + "\n")
    data = build(tmp_path / "c", tmp_path / "cache", tokenizer=tmp_path / "tok")
    tok = ip.load_tokenizer(tmp_path / "tok")
    ids = np.asarray(data.train.input_ids)
    first = (tmp_path / "c" / "corpus.txt").read_text().split("\n\n")[0]
    expected = tok.encode(first, add_special_tokens=False).ids
    assert ids.dtype == np.int32 and list(ids[0, 1:1 + len(expected)]) == expected
    assert min(expected) > 65_536


def test_an_entry_stored_narrower_than_its_tokenizer_needs_is_rebuilt(tmp_path, caplog,
                                                                     monkeypatch):
    """A cache built when the width followed the token count (uint16 for this tokenizer,
    its id 70000 wrapped) is never read: it is set aside, named, and rebuilt."""
    from input_pipeline import packing

    tokenizer_dir = sparse_tokenizer(tmp_path / "tok")
    corpus = zebra_corpus(tmp_path / "c")
    real_dtype, real_narrow = packing.token_dtype, packing.narrow
    monkeypatch.setattr(packing, "token_dtype", lambda bound: np.dtype(np.uint16))
    monkeypatch.setattr(packing, "narrow", lambda tokens, dtype: tokens.astype(dtype))
    old = build(corpus, tmp_path / "cache", tokenizer=tokenizer_dir)
    assert 4464 in np.asarray(old.train.input_ids)  # the wrapped id the old code stored
    monkeypatch.setattr(packing, "token_dtype", real_dtype)
    monkeypatch.setattr(packing, "narrow", real_narrow)
    with caplog.at_level(logging.WARNING):
        data = build(corpus, tmp_path / "cache", tokenizer=tokenizer_dir)
    assert SPARSE_ID in np.asarray(data.train.input_ids)
    assert "token ids stored as uint16, but this tokenizer's ids need int32" in caplog.text
    assert len(list((tmp_path / "cache").glob("packed-*.damaged-*"))) == 1


def test_narrowing_refuses_an_id_that_does_not_fit():
    from input_pipeline import packing

    with pytest.raises(ip.InputPipelineError, match="token id 70000 does not fit .*uint16"):
        packing.narrow(np.asarray([5, 70_000], np.int32), np.dtype(np.uint16))
    np.testing.assert_array_equal(packing.narrow(np.asarray([5, 65_535]), np.uint16),
                                  [5, 65_535])
