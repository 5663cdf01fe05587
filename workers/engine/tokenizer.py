"""The CLIP BPE tokenizer, built offline from the vocabulary that open-clip-torch ships.

``transformers.CLIPTokenizer`` wants ``vocab.json`` and ``merges.txt``; open_clip ships the same
BPE merges as ``bpe_simple_vocab_16e6.txt.gz``. The vocabulary is rebuilt the way CLIP defines
it (256 byte symbols, the same with ``</w>``, one entry per merge, then the two special tokens),
so token ids match OpenAI's CLIP tokenizer and the files need no download.
"""

from __future__ import annotations

import gzip
import json
import os
import tempfile
from functools import lru_cache
from pathlib import Path

#: CLIP's merges: the file's first line is a header; 49152 - 256 - 2 merges follow.
_N_MERGES = 49152 - 256 - 2
VOCAB_SIZE = 49408


def _byte_symbols() -> list[str]:
    """GPT-2/CLIP's reversible byte -> printable unicode table, in byte order of CLIP's vocab."""
    printable = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    codes = printable[:]
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            codes.append(256 + extra)
            extra += 1
    return [chr(c) for c in codes]


def write_vocab_files(directory: str | os.PathLike[str]) -> tuple[Path, Path]:
    """Write ``vocab.json`` and ``merges.txt`` into ``directory``; returns their paths."""
    import open_clip

    bpe = Path(open_clip.__file__).parent / "bpe_simple_vocab_16e6.txt.gz"
    with gzip.open(bpe) as f:
        lines = f.read().decode("utf-8").split("\n")[1 : _N_MERGES + 1]
    symbols = _byte_symbols()
    vocab = symbols + [s + "</w>" for s in symbols] + ["".join(m.split()) for m in lines]
    vocab += ["<|startoftext|>", "<|endoftext|>"]
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    vocab_file, merges_file = directory / "vocab.json", directory / "merges.txt"
    vocab_file.write_text(json.dumps({tok: i for i, tok in enumerate(vocab)}), encoding="utf-8")
    merges_file.write_text("#version: 0.2\n" + "\n".join(lines) + "\n", encoding="utf-8")
    return vocab_file, merges_file


@lru_cache(maxsize=1)
def clip_tokenizer(model_max_length: int = 77):
    """A ``CLIPTokenizer`` with CLIP's vocabulary, built from open_clip's files."""
    from transformers import CLIPTokenizer

    directory = Path(tempfile.mkdtemp(prefix="genloop-clip-tokenizer-"))
    vocab_file, merges_file = write_vocab_files(directory)
    # transformers 5 names the files ``vocab``/``merges``; 4.x named them ``*_file``.
    try:
        return CLIPTokenizer(
            vocab=str(vocab_file), merges=str(merges_file), model_max_length=model_max_length
        )
    except TypeError:
        return CLIPTokenizer(
            vocab_file=str(vocab_file), merges_file=str(merges_file),
            model_max_length=model_max_length,
        )
