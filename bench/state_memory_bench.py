"""Host memory a prompt state takes on its way to the prompt cache and back, against the state's own size.

A long prompt's KV state is hundreds of MB (a 17k-token Qwen Code prompt on the 0.5B starter: about 200 MB), and
the engine host lives under a memory limit ([models.process]): every extra copy of a state in flight raises the host's
peak. This bench prefills one sequence of `--tokens` tokens on the starter (in-process, the llama plugin's own
context), then measures the peak resident set each way takes over the resident set before it:
- save: the engine's state with its header (`LlamaContext.seq_state`, as the prompt cache saves it), then the frame
  that carries it to the server (`hypnos.hosting.frames.pack` into a shared file);
- restore: that frame read back (`payload_of`) and the state loaded into another sequence (`set_seq_state`).
Reported as the peak's ratio to the state's size (1.0x: the state itself and nothing more). Run from the repo root:
`python -m bench state_memory [--tokens N] [--model GGUF]`.
"""

from __future__ import annotations

import argparse
import struct
import tempfile
from pathlib import Path
from typing import Any

MiB = 1024 * 1024
HEAD = struct.Struct("<q")  # the prompt cache's header before a state (hypnos_llama.prompt_states.OFFSET)


def _resident() -> tuple[int, int]:
    """This process's resident set and its peak since the last reset, in bytes."""
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]) * 1024, int(fields["VmHWM"].split()[0]) * 1024


def _reset_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM starts again from the current resident set


def _prefill(context: Any, tokens: list[int], chunk: int) -> None:
    for start in range(0, len(tokens), chunk):
        context.batch_clear()
        for offset, token in enumerate(tokens[start : start + chunk]):
            context.batch_add(token, start + offset, 0, False)
        if context.decode() != 0:
            raise SystemExit("llama.cpp had no room for the prompt")


def main() -> None:
    """Measure and print the two rows."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=4000, help="the sequence's length (default 4000)")
    parser.add_argument("--model", help="a GGUF (default: the Qwen2.5-Coder-0.5B starter)")
    args = parser.parse_args()
    from hypnos.hosting.frames import Kind, decode_frame, pack, payload_of
    from hypnos_llama.options import LlamaOptions
    from hypnos_llama.runtime import LlamaContext, LlamaModel, context_shape

    from bench.llama_bench import _resolve_model

    model = LlamaModel(_resolve_model(args.model), LlamaOptions(), 0)
    context = LlamaContext(model, LlamaOptions(), context_shape(2 * args.tokens + 128, 2, 512, 512))
    try:
        text = "The quick brown fox jumps over the lazy dog. " * (args.tokens // 8 + 1)
        tokens = model.tokenize(text)[: args.tokens]
        _prefill(context, tokens, 512)
        with tempfile.TemporaryDirectory(prefix="state-memory-") as folder:
            before, _ = _resident()
            _reset_peak()
            blob = context.seq_state(0, head=HEAD.pack(0))
            frame = pack(Kind.ASK, 1, "pc_save", ("model", "ns", tokens, blob, [], False), share_in=Path(folder))
            save_peak = _resident()[1] - before
            size = len(blob) - HEAD.size
            del blob
            before, _ = _resident()
            _reset_peak()
            state = payload_of(decode_frame(frame[4:]))[3]
            restored = context.set_seq_state(1, state, skip=HEAD.size)
            restore_peak = _resident()[1] - before
        print(f"state of {len(tokens)} tokens: {size / MiB:.1f} MiB; restored: {restored}")
        print("| way | peak over the resident set before | ratio to the state |")
        print("|---|---|---|")
        print(f"| save (seq_state + frame) | {save_peak / MiB:.1f} MiB | {save_peak / size:.2f}x |")
        print(f"| restore (frame + set_seq_state) | {restore_peak / MiB:.1f} MiB | {restore_peak / size:.2f}x |")
    finally:
        context.close()
        model.close()


if __name__ == "__main__":
    main()
