"""The GGUF header reader against the gguf package's own reader."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypnos_llama.gguf_meta import GgufError, read_gguf


def test_reads_metadata_and_tensor_sizes_like_gguf_reader(tiny_gguf: Path) -> None:
    import gguf

    ours = read_gguf(tiny_gguf)
    theirs = gguf.GGUFReader(str(tiny_gguf))
    assert ours.arch == "llama"
    assert ours.arch_value("block_count") == 2
    assert ours.arch_value("attention.head_count_kv") == 2
    assert "im_start" in (ours.chat_template or "")
    assert ours.array_lengths["tokenizer.ggml.tokens"] == len(theirs.fields["tokenizer.ggml.tokens"].data)
    expected = {t.name: int(t.n_bytes) for t in theirs.tensors}
    sizes = {t.name: t.nbytes for t in ours.tensors}
    # sizes come from the offsets: the last tensor's runs to the end of the file, so it may count the file's final
    # alignment padding (under 32 bytes)
    last = max(theirs.tensors, key=lambda t: int(t.data_offset)).name
    assert 0 <= sizes.pop(last) - expected.pop(last) < 32
    assert sizes == expected


def test_rejects_a_file_that_is_not_gguf(tmp_path: Path) -> None:
    path = tmp_path / "x.gguf"
    path.write_bytes(b"not a gguf at all")
    with pytest.raises(GgufError):
        read_gguf(path)
