"""The Responses and Anthropic Messages routes against Chat Completions on the same model and prompt, and a
`previous_response_id` turn against resending the whole history.

Run from the repo root: `python -m bench.api_bench` (`nox -s bench -- api`: hypnos-llama and the Qwen2.5-Coder-0.5B
starter). One `hypnos serve` holds two models: a tiny random llama GGUF (written here, one slot) for requests/s, where
the model's work is small enough that a route's own cost shows, and the starter for time to first token and for the
stored conversation.
- requests/s: POST /v1/chat/completions, /v1/responses (store false, as a chat request stores nothing) and
  /v1/messages with the same prompt and 1 output token, driven by bench.http_bench's load generator in alternating
  rounds; target >= 0.97 of chat.
- TTFT: the same streamed prompt on each route (2 output tokens), time to the first event that carries text, medians
  of interleaved requests; target within 1 ms of chat.
- previous_response_id: 3-turn conversations on a long first message; turns 2-3 sent with `previous_response_id`
  against the whole history resent (`store` false), alternating; prints the prompt and cached tokens and the time
  of each.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench.http_bench import RouteResult, load, merge

TINY, STARTER = "bench-tiny", "qwen2.5:0.5b"
PROMPT = "Name one colour of the sea."


def bodies(model: str, max_tokens: int, stream: bool) -> dict[str, tuple[str, dict[str, Any]]]:
    """The same prompt on each route: path and body."""
    user = [{"role": "user", "content": PROMPT}]
    return {
        "chat": (
            "/v1/chat/completions",
            {"model": model, "messages": user, "max_tokens": max_tokens, "temperature": 0, "stream": stream},
        ),
        "responses": (
            "/v1/responses",
            {
                "model": model,
                "input": PROMPT,
                "max_output_tokens": max_tokens,
                "temperature": 0,
                "store": False,
                "stream": stream,
            },
        ),
        "messages": (
            "/v1/messages",
            {"model": model, "messages": user, "max_tokens": max_tokens, "temperature": 0, "stream": stream},
        ),
    }


def has_text(route: str, payload: dict[str, Any]) -> bool:
    """Whether one SSE payload of `route` carries generated text."""
    if route == "chat":
        choices = payload.get("choices") or [{}]
        return bool((choices[0].get("delta") or {}).get("content"))
    if route == "responses":
        return payload.get("type") == "response.output_text.delta" and bool(payload.get("delta"))
    delta = payload.get("delta") or {}
    return payload.get("type") == "content_block_delta" and bool(delta.get("text"))


def ttft_ms(client: httpx.Client, route: str, path: str, body: dict[str, Any]) -> float:
    """Milliseconds from sending a streamed request to its first text event (the stream is read to its end)."""
    started = time.perf_counter()
    first = None
    with client.stream("POST", path, json=body) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if first is None and line.startswith("data: ") and line[6:].strip() != "[DONE]":
                if has_text(route, json.loads(line[6:])):
                    first = (time.perf_counter() - started) * 1000
    if first is None:
        raise RuntimeError(f"{route}: no text event in the stream")
    return first


def requests_per_second(port: int, args: argparse.Namespace) -> dict[str, RouteResult]:
    """Each route on the tiny GGUF, alternating rounds (the order turned every round)."""
    routes = bodies(TINY, 1, False)
    rounds: dict[str, list[RouteResult]] = {name: [] for name in routes}
    for index in range(args.rounds):
        order = list(routes) if index % 2 == 0 else list(reversed(routes))
        for name in order:
            path, body = routes[name]
            result = asyncio.run(
                load(
                    port,
                    "POST",
                    path,
                    body,
                    concurrency=args.concurrency,
                    requests=args.requests,
                    seconds=args.seconds,
                    warmup=args.warmup if index == 0 else 0,
                )
            )
            rounds[name].append(result)
    return {name: merge(results) for name, results in rounds.items()}


def time_to_first_token(client: httpx.Client, samples: int) -> dict[str, list[float]]:
    """Interleaved streamed requests of the same prompt on the starter, per route."""
    routes = bodies(STARTER, 2, True)
    for route, (path, body) in routes.items():  # warm: the prompt is in the slot's cache for every route alike
        ttft_ms(client, route, path, body)
    times: dict[str, list[float]] = {name: [] for name in routes}
    for index in range(samples):
        order = list(routes) if index % 2 == 0 else list(reversed(routes))
        for route in order:
            path, body = routes[route]
            times[route].append(ttft_ms(client, route, path, body))
    return times


def conversation(client: httpx.Client, stored: bool, tag: str, words: int) -> list[dict[str, Any]]:
    """One 3-turn conversation on the starter; the figures of turns 2 and 3."""
    facts = " ".join(f"{tag} item{i % 97} sits on shelf {i % 13}." for i in range(words // 6))
    questions = ["Which shelf holds item5?", "And item7?"]
    base = {"model": STARTER, "temperature": 0, "max_output_tokens": 8}
    first = client.post("/v1/responses", json={**base, "input": f"Remember this list: {facts}", "store": stored}).json()
    history: list[dict[str, Any]] = [
        {"role": "user", "content": f"Remember this list: {facts}"},
        {"role": "assistant", "content": _text_of(first)},
    ]
    previous, figures = first["id"], []
    for question in questions:
        history.append({"role": "user", "content": question})
        body = (
            {**base, "input": question, "previous_response_id": previous}
            if stored
            else {
                **base,
                "input": history,
                "store": False,
            }
        )
        started = time.perf_counter()
        answer = client.post("/v1/responses", json=body)
        seconds = time.perf_counter() - started
        answer.raise_for_status()
        reply = answer.json()
        usage = reply["usage"]
        figures.append(
            {
                "seconds": seconds,
                "input_tokens": usage["input_tokens"],
                "cached_tokens": (usage.get("input_tokens_details") or {}).get("cached_tokens", 0),
                "request_bytes": len(json.dumps(body)),
            }
        )
        history.append({"role": "assistant", "content": _text_of(reply)})
        previous = reply["id"]
    return figures


def _text_of(response: dict[str, Any]) -> str:
    return "".join(
        part.get("text", "")
        for item in response.get("output", [])
        if item.get("type") == "message"
        for part in item.get("content", [])
    )


def main() -> None:
    """Start the server, measure the three parts, print the tables and ratios."""
    parser = argparse.ArgumentParser(prog="python -m bench.api_bench", description=__doc__.split("\n")[0])
    parser.add_argument("--concurrency", type=int, default=8, help="keep-alive connections for requests/s")
    parser.add_argument("--requests", type=int, default=20000, help="request cap per route and round")
    parser.add_argument("--seconds", type=float, default=3.0, help="time cap per route and round")
    parser.add_argument("--rounds", type=int, default=4, help="alternating requests/s rounds per route")
    parser.add_argument("--warmup", type=int, default=300, help="requests before the first requests/s round")
    parser.add_argument("--ttft-samples", type=int, default=30, help="streamed requests per route")
    parser.add_argument("--conversations", type=int, default=3, help="3-turn conversations per way")
    parser.add_argument("--history-words", type=int, default=900, help="length of the first message")
    parser.add_argument("--model", help="a GGUF for the TTFT and conversation parts (default: the starter)")
    args = parser.parse_args()

    from bench.llama_bench import _resolve_model

    starter = _resolve_model(args.model)
    with tempfile.TemporaryDirectory(prefix="hypnos-api-bench-") as scratch:
        rps, ttft, ways = measure(Path(scratch), starter, args)
    report(args, rps, ttft, ways)


def measure(
    work: Path, starter: Path, args: argparse.Namespace
) -> tuple[dict[str, RouteResult], dict[str, list[float]], dict[bool, list[dict[str, Any]]]]:
    """Serve both models from `work` and run the three parts."""
    from hypnos_llama.testing import toml_model_config, write_tiny_llama
    from hypnos_server.testing import free_port, live_server

    tiny = write_tiny_llama(work / "tiny.gguf", context=2048)
    common = {"modality": "text_generation", "engine": "ggml_llama", "initial_tier": "tier1_gpu_vram"}
    models = [
        {"id": TINY, "weights_path": str(tiny), "context_len": 512, "slots": 1, **common},
        {"id": STARTER, "weights_path": str(starter), "context_len": 4096, "slots": 2, **common},
    ]
    config = work / "hypnos.toml"
    config.write_text(toml_model_config(work, models))
    port = free_port()
    with live_server(config, port=port) as base, httpx.Client(base_url=base, timeout=600) as client:
        rps = requests_per_second(port, args)
        ttft = time_to_first_token(client, args.ttft_samples)
        ways: dict[bool, list[dict[str, Any]]] = {True: [], False: []}
        for index in range(args.conversations):
            for stored in (True, False) if index % 2 == 0 else (False, True):
                ways[stored] += conversation(client, stored, f"c{index}{stored}", args.history_words)
    return rps, ttft, ways


def report(
    args: argparse.Namespace,
    rps: dict[str, RouteResult],
    ttft: dict[str, list[float]],
    ways: dict[bool, list[dict[str, Any]]],
) -> None:
    """Print the three tables with their ratios."""
    print(f"requests/s on {TINY} (1 output token), concurrency {args.concurrency}, {args.rounds} alternating rounds")
    print(f"{'route':<12}{'req/s':>10}{'p50 ms':>10}{'p99 ms':>10}{'errors':>8}{'vs chat':>10}")
    for name, result in rps.items():
        ratio = result.rps / rps["chat"].rps if rps["chat"].rps else float("nan")
        print(
            f"{name:<12}{result.rps:>10.0f}{result.quantile(0.5):>10.2f}{result.quantile(0.99):>10.2f}"
            f"{result.errors:>8}{ratio:>9.3f}x"
        )
    print(f"\nTTFT on {STARTER}, {args.ttft_samples} interleaved streamed requests per route (median ms)")
    chat_ttft = statistics.median(ttft["chat"])
    for name, samples in ttft.items():
        median = statistics.median(samples)
        print(f"{name:<12}{median:>10.2f}   {median - chat_ttft:+.2f} ms vs chat   (target within 1 ms)")
    print(f"\nturns 2-3 of {args.conversations} conversations per way, first message ~{args.history_words} words")
    print(f"{'way':<22}{'median s':>10}{'input tok':>11}{'cached tok':>12}{'request B':>11}")
    medians = {}
    for stored, label in ((True, "previous_response_id"), (False, "whole history resent")):
        turns = ways[stored]
        medians[stored] = statistics.median(turn["seconds"] for turn in turns)
        print(
            f"{label:<22}{medians[stored]:>10.3f}{statistics.median(t['input_tokens'] for t in turns):>11.0f}"
            f"{statistics.median(t['cached_tokens'] for t in turns):>12.0f}"
            f"{statistics.median(t['request_bytes'] for t in turns):>11.0f}"
        )
    print(f"previous_response_id / resent time: {medians[True] / medians[False]:.3f}")
    if any(result.errors for result in rps.values()):
        raise SystemExit("some requests failed: the figures are not comparable")


if __name__ == "__main__":
    main()
