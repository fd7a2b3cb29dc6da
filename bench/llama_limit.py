"""The engine's own limit for llama_bench: an in-process batched decode with llama.cpp's low-level API.

All prompts are prefilled in one `llama_decode`, then each step decodes one token of every live sequence in one
`llama_decode` (greedy, llama.cpp's own sampler), until a sequence ends or has `max_tokens`. Same model weights (the
in-process `Llama`'s), threads, batch sizes, flash attention off and a unified KV cache like Hypnos' default.
"""

from __future__ import annotations

import time
from typing import Any


def chat_tokens(llm: Any, prompt: str) -> list[int]:
    """The prompt as one user message through the model's chat template, tokenized as create_chat_completion does."""
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    model = llm._model
    formatter = Jinja2ChatFormatter(
        template=llm.metadata["tokenizer.chat_template"],
        eos_token=model.token_get_text(llm.token_eos()),
        bos_token=model.token_get_text(llm.token_bos()),
    )
    text = formatter(messages=[{"role": "user", "content": prompt}]).prompt
    return llm.tokenize(text.encode("utf-8"), add_bos=False, special=True)


def batched_decode(llm: Any, prompts: list[str], max_tokens: int, threads: int, n_ctx: int) -> float:
    """Generated tokens per second of wall time (prefill included) for all prompts decoded together."""
    import llama_cpp as lib

    prompt_tokens = [chat_tokens(llm, prompt) for prompt in prompts]
    model = llm._model.model
    vocab = lib.llama_model_get_vocab(model)
    params = lib.llama_context_default_params()
    params.n_ctx = n_ctx * len(prompts)
    params.n_batch = params.n_ubatch = 512
    params.n_seq_max = len(prompts)
    params.n_threads = params.n_threads_batch = threads
    params.kv_unified = True
    params.no_perf = True
    params.flash_attn_type = lib.LLAMA_FLASH_ATTN_TYPE_DISABLED
    context = lib.llama_init_from_model(model, params)
    batch = lib.llama_batch_init(512, 0, 1)
    sampler = lib.llama_sampler_init_greedy()
    try:
        started = time.perf_counter()
        count = 0
        rows: list[tuple[int, int, int]] = []  # (sequence, token, position) of the batch being built
        for seq, tokens in enumerate(prompt_tokens):
            rows += [(seq, token, pos) for pos, token in enumerate(tokens)]
        logit_rows = {seq: sum(len(t) for t in prompt_tokens[: seq + 1]) - 1 for seq in range(len(prompts))}
        positions = {seq: len(tokens) for seq, tokens in enumerate(prompt_tokens)}
        generated = dict.fromkeys(positions, 0)
        while rows:
            for index, (seq, token, pos) in enumerate(rows):
                batch.token[index] = token
                batch.pos[index] = pos
                batch.n_seq_id[index] = 1
                batch.seq_id[index][0] = seq
                batch.logits[index] = index == logit_rows.get(seq, -1)
            batch.n_tokens = len(rows)
            if lib.llama_decode(context, batch) != 0:
                raise RuntimeError("llama_decode failed in the batched baseline")
            next_rows, next_logits = [], {}
            for seq, index in logit_rows.items():
                token = lib.llama_sampler_sample(sampler, context, index)
                if lib.llama_vocab_is_eog(vocab, token):
                    continue
                count += 1
                generated[seq] += 1
                if generated[seq] >= max_tokens:
                    continue
                next_logits[seq] = len(next_rows)
                next_rows.append((seq, token, positions[seq]))
                positions[seq] += 1
            rows, logit_rows = next_rows, next_logits
        return count / (time.perf_counter() - started)
    finally:
        lib.llama_sampler_free(sampler)
        lib.llama_batch_free(batch)
        lib.llama_free(context)
