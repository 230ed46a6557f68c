"""Peak memory and throughput of a data cache build: this code against an older commit,
in one run, on the same machine.

  python scripts/benchmark_ingest.py --corpus ../shared/data/corpus --scales 1,8 \
      --old_ref 2164e58^ --out /tmp/ingest_bench [--scale_1gb] [--repeats 1]

For each scale k a corpus of k copies of --corpus is written under --out (copy 0 as is;
in copy c > 0 the words of every line are shuffled and 2% of them get a per-copy
suffix, so the tokenizer sees new sentences and some new words; Gutenberg marker lines,
WikiText headings and blank lines are kept, so the layouts do not change). --scale_1gb
adds the scale that makes about 1 GB (new code only unless --old_on_1gb).

Every build runs in its own subprocess with a fresh cache directory (vocabulary 8192,
128 tokens, eval fraction 0.02, as configs/pretrain.py):
  full       trains the WordPiece tokenizer and packs (what a first run does)
  tokenizer  packs with a given tokenizer (the one the new full build trained)
The old code is a `git worktree` of --old_ref (the commit before the streaming ingest),
put on the subprocess's PYTHONPATH. Old and new builds alternate, so a busy machine
slows both alike. Reported: wall seconds, MB/s (input bytes / wall), peak RSS of the
build's main process (its ru_maxrss), of its largest child (RUSAGE_CHILDREN; the new
code's encoding workers: note that a child is charged with the parent's pages between
fork and exec, so this mirrors the parent's RSS at that moment), and of the whole
process tree (the sum of /proc RSS, sampled every 0.1 s). Results: --out/results.json
and results.md.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# Runs one build; prints a JSON line with its own and its largest child's ru_maxrss.
_RUNNER = """
import json, resource, sys, time
root, corpus, cache, tokenizer, sample = sys.argv[1:6]
sys.path.insert(0, root)
import input_pipeline as ip
kwargs = dict(vocab_size=8192, max_seq_length=128, eval_fraction=0.02)
if tokenizer:
    kwargs["tokenizer"] = tokenizer
if float(sample) != 1.0:
    kwargs["tokenizer_sample"] = float(sample)
t0 = time.time()
data = ip.build_pretraining_data(corpus, cache, **kwargs)
seconds = time.time() - t0
print(json.dumps({
    "seconds": seconds, "train": len(data.train), "eval": len(data.eval),
    "tokenizer_dir": str(data.tokenizer_dir), "module": ip.__file__,
    "tokens": int(sum(int(s.num_tokens) for s in (data.train, data.eval))),
    "self_maxrss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    "children_maxrss_mib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
}))
"""


# --------------------------------------------------------------------------------------
# Corpora
# --------------------------------------------------------------------------------------


def _keep_line(line: str) -> bool:
    s = line.strip()
    return not s or s.startswith("***") or (s.startswith("= ") and s.endswith(" ="))


def _vary(line: str, rng: random.Random, suffix: str) -> str:
    words = line.split()
    rng.shuffle(words)
    return " ".join(w + suffix if rng.random() < 0.02 else w for w in words)


def make_corpus(source: Path, copies: int, out: Path) -> Path:
    """`copies` copies of the files under `source` (see the module docstring)."""
    done = out / "DONE"
    if done.is_file():
        return out
    shutil.rmtree(out, ignore_errors=True)
    files = sorted(p for p in source.rglob("*") if p.is_file() and not p.name.startswith("."))
    for c in range(copies):
        for i, f in enumerate(files):
            target = out / f"copy{c:03d}" / f.relative_to(source)
            target.parent.mkdir(parents=True, exist_ok=True)
            if c == 0:
                shutil.copyfile(f, target)
                continue
            rng = random.Random(c * 100_003 + i)
            suffix = "".join(rng.choice("qxzjkv") for _ in range(2))
            with open(f, encoding="utf-8", errors="replace", newline="") as src, \
                    open(target, "w", encoding="utf-8", newline="") as dst:
                for line in src:
                    body = line.rstrip("\r\n")
                    end = line[len(body):]
                    dst.write((body if _keep_line(body) else _vary(body, rng, suffix)) + end)
    done.write_text("ok\n")
    return out


def corpus_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and p.name != "DONE")


# --------------------------------------------------------------------------------------
# Measuring a build
# --------------------------------------------------------------------------------------


def _tree_rss_bytes(root_pid: int) -> int:
    """Summed RSS of a process and all its descendants (Linux /proc)."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    page = os.sysconf("SC_PAGE_SIZE")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            fields = stat[stat.rindex(")") + 2:].split()
            children.setdefault(int(fields[1]), []).append(int(entry))
            rss[int(entry)] = int(fields[21]) * page
        except (OSError, ValueError, IndexError):
            continue  # exited meanwhile
    total, stack = 0, [root_pid]
    while stack:
        pid = stack.pop()
        total += rss.get(pid, 0)
        stack.extend(children.get(pid, []))
    return total


def run_build(code_root: Path, corpus: Path, cache: Path, tokenizer: str = "",
              sample: float = 1.0, keep_tokenizer: Path | None = None) -> dict:
    """One build in a fresh cache (removed afterwards; the trained tokenizer is copied to
    keep_tokenizer first if given)."""
    shutil.rmtree(cache, ignore_errors=True)
    env = dict(os.environ, PYTHONPATH=str(code_root))
    proc = subprocess.Popen([sys.executable, "-c", _RUNNER, str(code_root), str(corpus),
                             str(cache), tokenizer, str(sample)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak = 0
    while proc.poll() is None:
        peak = max(peak, _tree_rss_bytes(proc.pid))
        time.sleep(0.1)
    out, err = proc.communicate()
    if proc.returncode:
        raise SystemExit(f"error: build failed ({code_root}, {corpus}): {err[-3000:]}")
    result = json.loads(out.strip().splitlines()[-1])
    if not result["module"].startswith(str(code_root)):
        raise SystemExit(f"error: {code_root} ran input_pipeline from {result['module']}")
    result["tree_peak_rss_mib"] = peak / 2**20
    if keep_tokenizer is not None:
        shutil.rmtree(keep_tokenizer, ignore_errors=True)
        shutil.copytree(result["tokenizer_dir"], keep_tokenizer)
    shutil.rmtree(cache, ignore_errors=True)
    return result


def old_worktree(ref: str, out: Path) -> Path:
    """A checkout of `ref` (the old code) under `out`, made once."""
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", ref], check=True,
                            capture_output=True, text=True).stdout.strip()
    path = out / f"old-{commit[:10]}"
    if not (path / "input_pipeline").is_dir():
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "-f",
                        str(path), commit], check=True, capture_output=True)
    return path


# --------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------


def markdown(rows: list[dict]) -> str:
    lines = ["| corpus | MB | build | code | s | MB/s | main peak RSS MiB | "
             "largest child MiB | process tree peak MiB |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['corpus']} | {r['mb']:.0f} | {r['build']} | {r['code']} | "
                     f"{r['seconds']:.1f} | {r['mb_per_s']:.2f} | {r['self_maxrss_mib']:.0f} | "
                     f"{r['children_maxrss_mib']:.0f} | {r['tree_peak_rss_mib']:.0f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", default=str(REPO.parent / "shared" / "data" / "corpus"))
    parser.add_argument("--scales", default="1,8", help="comma-separated copy counts")
    parser.add_argument("--scale_1gb", action="store_true", help="add a ~1 GB corpus")
    parser.add_argument("--old_on_1gb", action="store_true", help="old code on 1 GB too")
    parser.add_argument("--old_ref", default="2164e58^", help="the old code's commit")
    parser.add_argument("--builds", default="full,tokenizer")
    parser.add_argument("--tokenizer_sample", type=float, default=0.0,
                        help="also a new full build with this tokenizer_sample (0: no)")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--out", default="/tmp/ingest_bench")
    args = parser.parse_args()

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    source = Path(args.corpus).resolve()
    if not source.is_dir():
        raise SystemExit(f"error: --corpus {source} is not a directory")
    base_mb = corpus_bytes(source) / 1e6
    scales = [int(s) for s in args.scales.split(",") if s]
    if args.scale_1gb:
        scales.append(round(1000 / base_mb))
    old_root = old_worktree(args.old_ref, out)
    builds = args.builds.split(",")
    rows: list[dict] = []
    for scale in scales:
        corpus = make_corpus(source, scale, out / f"corpus-x{scale}")
        mb = corpus_bytes(corpus) / 1e6
        codes = [("new", REPO)]
        if scale * base_mb < 900 or args.old_on_1gb:
            codes.append(("old", old_root))
        trained = out / "tokenizer-trained"  # the new full build's, for "tokenizer" builds
        for _ in range(args.repeats):
            plan = [(build, code, root, 1.0) for build in builds for code, root in codes]
            if args.tokenizer_sample:
                plan.insert(len(codes), (f"full, tokenizer_sample={args.tokenizer_sample}",
                                         "new", REPO, args.tokenizer_sample))
            for build, code, root, sample in plan:
                given = ""
                if build == "tokenizer":
                    if not trained.is_dir():
                        raise SystemExit("error: the tokenizer build needs a full build first")
                    given = str(trained)
                keep = trained if (build, code) == ("full", "new") else None
                r = run_build(root, corpus, out / f"cache-{code}", given, sample, keep)
                r.update(corpus=f"x{scale}", mb=mb, build=build, code=code,
                         mb_per_s=mb / r["seconds"])
                rows.append(r)
                print(markdown([r]).splitlines()[-1], flush=True)
    (out / "results.json").write_text(json.dumps(rows, indent=2) + "\n")
    (out / "results.md").write_text(markdown(rows))
    print(markdown(rows))
    print(f"(this process's children peak, ru_maxrss: "
          f"{resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024:.0f} MiB)")


if __name__ == "__main__":
    main()
