"""Test kit for engines on llama.cpp: a tiny random-weight llama GGUF writer and helpers to drive an engine."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hypnos.chat import ChatInput, InputMessage, MessagePart, Sampling, TextPart
from hypnos.config import LimitsConfig, ModelConfig
from hypnos.engine import CancelToken, ChatFinished, ContentDelta, EngineContext
from hypnos.types import LayerPlacementPlan, MemoryTier, Modality

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

# ChatML whose generation prompt opens a thinking block (Qwen 3 style) unless enable_thinking is false.
THINKING_TEMPLATE = CHATML_TEMPLATE.replace(
    "{{ '<|im_start|>assistant\\n' }}",
    "{{ '<|im_start|>assistant\\n' }}{% if enable_thinking is defined and not enable_thinking %}"
    "{{ '<think>\\n\\n</think>\\n\\n' }}{% else %}{{ '<think>\\n' }}{% endif %}",
)

SPECIAL = ["<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"]
WORDS = ["\u2581the", "\u2581a", "\u2581is", "\u2581of", "\u2581Paris", "\u2581capital", "\u2581France", "\u2581and"]


def write_tiny_llama(
    path: Path,
    *,
    layers: int = 2,
    dim: int = 64,
    heads: int = 4,
    kv_heads: int = 2,
    ff: int = 128,
    context: int = 4096,
    seed: int = 0,
    chat_template: str = CHATML_TEMPLATE,
    experts: int = 0,
    sampling: dict[str, float] | None = None,
) -> Path:
    """Write the model to path and return it (`experts` > 0: a Mixtral-style MoE, two experts used per token;
    `sampling`: `general.sampling.*` keys, as a converter writes them from generation_config.json)."""
    import gguf
    import numpy as np

    rng = np.random.default_rng(seed)
    tokens = SPECIAL + [f"<0x{b:02X}>" for b in range(256)] + WORDS
    types = (
        [
            gguf.TokenType.UNKNOWN,
            gguf.TokenType.CONTROL,
            gguf.TokenType.CONTROL,
            gguf.TokenType.CONTROL,
            gguf.TokenType.CONTROL,
        ]
        + [gguf.TokenType.BYTE] * 256
        + [gguf.TokenType.NORMAL] * len(WORDS)
    )
    scores = [0.0] * len(SPECIAL) + [-1000.0] * 256 + [-float(i + 1) for i in range(len(WORDS))]
    vocab = len(tokens)
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("tiny-llama")
    writer.add_block_count(layers)
    writer.add_context_length(context)
    writer.add_embedding_length(dim)
    writer.add_feed_forward_length(ff)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_dimension_count(dim // heads)
    writer.add_rope_freq_base(10000.0)
    writer.add_vocab_size(vocab)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)
    if experts:
        writer.add_expert_count(experts)
        writer.add_expert_used_count(min(2, experts))
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(4)
    writer.add_unk_token_id(0)
    writer.add_bool("tokenizer.ggml.add_bos_token", False)
    writer.add_chat_template(chat_template)
    for key, value in (sampling or {}).items():
        if key == "top_k":
            writer.add_int32(f"general.sampling.{key}", int(value))
        else:
            writer.add_float32(f"general.sampling.{key}", float(value))

    def weight(*shape: int) -> Any:
        return (rng.standard_normal(shape) * 0.2).astype(np.float32)

    def add_matrix(name: str, array: Any) -> None:
        # Matmul weights in q8_0, as in the quantized models users serve: llama.cpp's q8_0 kernels give a row the
        # same sums whether one sequence or several share a step (its AVX-512 f32 kernels do not always).
        qtype = gguf.GGMLQuantizationType.Q8_0
        writer.add_tensor(name, gguf.quants.quantize(array, qtype), raw_dtype=qtype)

    # Dimension 0 of the residual stream is a constant the layers never write to; the output rows of the special
    # tokens weigh it strongly negative, so a random model does not end its answers early (EOG).
    kv_dim = dim // heads * kv_heads
    embeddings = weight(vocab, dim)
    embeddings[:, 0] = 30.0
    writer.add_tensor("token_embd.weight", embeddings)
    for i in range(layers):
        writer.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(dim, dtype=np.float32))
        add_matrix(f"blk.{i}.attn_q.weight", weight(dim, dim))
        add_matrix(f"blk.{i}.attn_k.weight", weight(kv_dim, dim))
        add_matrix(f"blk.{i}.attn_v.weight", weight(kv_dim, dim))
        attn_output = weight(dim, dim)
        attn_output[0, :] = 0.0
        add_matrix(f"blk.{i}.attn_output.weight", attn_output)
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(dim, dtype=np.float32))
        if experts:
            writer.add_tensor(f"blk.{i}.ffn_gate_inp.weight", weight(experts, dim))
            add_matrix(f"blk.{i}.ffn_gate_exps.weight", weight(experts, ff, dim))
            add_matrix(f"blk.{i}.ffn_up_exps.weight", weight(experts, ff, dim))
            ffn_down = weight(experts, dim, ff)
            ffn_down[:, 0, :] = 0.0
            add_matrix(f"blk.{i}.ffn_down_exps.weight", ffn_down)
            continue
        add_matrix(f"blk.{i}.ffn_gate.weight", weight(ff, dim))
        add_matrix(f"blk.{i}.ffn_up.weight", weight(ff, dim))
        ffn_down = weight(dim, ff)
        ffn_down[0, :] = 0.0
        add_matrix(f"blk.{i}.ffn_down.weight", ffn_down)
    writer.add_tensor("output_norm.weight", np.ones(dim, dtype=np.float32))
    output = weight(vocab, dim) * 4
    output[: len(SPECIAL), 0] = -40.0
    add_matrix("output.weight", output)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def make_engine(
    path: Path, *, slots: int = 4, context_len: int = 8192, llama: dict[str, Any] | None = None, model_id: str = "tiny"
) -> Any:
    """A LlamaEngine for a GGUF (not loaded); one thread unless `llama` says otherwise (tiny models need no more)."""
    from hypnos_llama.engine import LlamaEngine

    options = {"n_threads": 1, **(llama or {})}
    config = ModelConfig(
        id=model_id,
        modality=Modality.TEXT_GENERATION,
        engine="ggml_llama",
        weights_path=str(path),
        slots=slots,
        context_len=context_len,
        engine_options={"llama": options},
    )
    return LlamaEngine(config, EngineContext(models_dir=path.parent, limits=LimitsConfig()))


def tier1(context_len: int = 8192, layers: int = 2) -> LayerPlacementPlan:
    """A whole-model tier 1 plan."""
    return LayerPlacementPlan(primary_tier=MemoryTier.TIER1, gpu_layers=layers, allocated_context_len=context_len)


def tier2() -> LayerPlacementPlan:
    """A tier 2 plan (weights warm in RAM)."""
    return LayerPlacementPlan(primary_tier=MemoryTier.TIER2)


SAMPLING_FIELDS = ("temperature", "top_p", "top_k", "seed", "repeat_penalty")


def chat_input(messages: list[InputMessage], *, model: str = "", **fields: Any) -> ChatInput:
    """A ChatInput from messages and wire-like fields: temperature/top_p/top_k/seed, num_ctx, reasoning_effort
    ("none" turns thinking off), tools, tool_choice and ChatInput's own fields (`model` is ignored)."""
    sampling = Sampling(**{name: fields.pop(name) for name in SAMPLING_FIELDS if name in fields})
    if "num_ctx" in fields:
        fields["context_len"] = fields.pop("num_ctx")
    if fields.pop("reasoning_effort", None) == "none":
        fields["thinking"] = False
    choice = fields.pop("tool_choice", None)
    if choice is not None and not isinstance(choice, str):
        fields.update(tool_choice="required", forced_tool=choice.function.name)
    elif choice is not None:
        fields["tool_choice"] = choice
    fields.setdefault("max_tokens", 16)
    return ChatInput(messages=messages, sampling=sampling, **fields)


def chat_request(*turns: str | list[MessagePart], model: str = "tiny", **fields: Any) -> ChatInput:
    """A chat input whose messages alternate user / assistant, starting with the user."""
    messages = [
        InputMessage(role="user" if i % 2 == 0 else "assistant", parts=[TextPart(text=t)] if isinstance(t, str) else t)
        for i, t in enumerate(turns)
    ]
    return chat_input(messages, **fields)


async def collect(
    engine: Any, request: ChatInput, max_tokens: int = 16, cancel: CancelToken | None = None, **options: Any
) -> tuple[str, ChatFinished, list[Any]]:
    """Run a chat to the end with max_tokens (and thinking options): (text, final event, all events)."""
    import msgspec

    events = []
    request = msgspec.structs.replace(request, max_tokens=max_tokens, **options)
    async for event in engine.chat(request, cancel or CancelToken()):
        events.append(event)
    text = "".join(e.text for e in events if isinstance(e, ContentDelta))
    return text, events[-1], events


def toml_model_config(models_dir: Path, models: list[dict[str, Any]], extra: str = "") -> str:
    """A minimal config file text: models_dir and [[models]] tables (flat values and one level of sub-tables)."""

    def value(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (int, float)):
            return str(v)
        return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'

    lines = [f"models_dir = {value(str(models_dir))}", extra]
    for model in models:
        lines.append("[[models]]")
        tables = {k: v for k, v in model.items() if isinstance(v, dict)}
        lines += [f"{k} = {value(v)}" for k, v in model.items() if not isinstance(v, dict)]
        for name, table in tables.items():
            lines.append(f"[models.{name}]")
            lines += [f"{k} = {value(v)}" for k, v in table.items()]
    return "\n".join(lines) + "\n"


def sample_tokens(model: Any, context: Any, sampler: Any, prompt: list[int], steps: int) -> tuple[list[int], bool]:
    """Decode `prompt` on sequence 0 and sample up to `steps` tokens with a SlotSampler: the tokens, and True when
    the model ended them (an end-of-generation token, left out)."""
    batch, position = prompt, 0
    picked: list[int] = []
    for _ in range(steps):
        context.batch_clear()
        for offset, item in enumerate(batch):
            context.batch_add(item, position + offset, 0, offset == len(batch) - 1)
        position += len(batch)
        assert context.decode() == 0
        token = sampler.sample(context.pointer, context.n_tokens - 1)
        if model.is_eog(token):
            return picked, True
        picked.append(token)
        batch = [token]
    return picked, False


def sample_text(model: Any, context: Any, sampler: Any, prompt: str, steps: int) -> tuple[bytes, bool]:
    """Decode `prompt` and sample up to `steps` tokens with a SlotSampler on one sequence: the text, and True when
    the model ended it (an end-of-generation token)."""
    tokens, ended = sample_tokens(model, context, sampler, model.tokenize(prompt, add_special=True), steps)
    return b"".join(model.piece(token) for token in tokens), ended
