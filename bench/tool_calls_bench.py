"""Tool calls with tool_choice "auto" on the starter model through chat, Responses and Messages: a fixed set of 32
prompts (one tool, several tools, no tool needed, a tool result to answer from), temperature 0.

Run from the repo root: `python -m bench.tool_calls_bench` (`nox -s bench -- tool_calls`: hypnos-llama and the
Qwen2.5-Coder-0.5B starter). Prints, per API: intended calls parsed (a call of the expected function with JSON-object
arguments), false calls (a call where none was wanted), answers in words after a tool result (prose, no call; a call
echoed as JSON text is not words) and with the result's fact in them, and the no-tool prompts answered in words.
Issue 40's bar: >= 90% of intended calls parsed and 0 false calls. `--apis` picks APIs, `--label` names the run,
`--json FILE` keeps every answer, `--lines FILE` appends each as it comes, `--report FILE...` prints their table.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

MODEL = "qwen2.5:0.5b"


def _tool(name: str, description: str, **properties: str) -> dict[str, Any]:
    schema = {
        "type": "object",
        "properties": {key: {"type": kind} for key, kind in properties.items()},
        "required": list(properties),
    }
    return {"name": name, "description": description, "parameters": schema}


WEATHER = _tool("get_weather", "Current weather for a city", city="string")
TIME = _tool("get_time", "The current time in a time zone", zone="string")
STOCK = _tool("get_stock_price", "The latest price of a stock ticker", ticker="string")
READ = _tool("read_file", "Read a text file from disk", path="string")
EMAIL = _tool("send_email", "Send an email", to="string", subject="string", body="string")
SEARCH = _tool("search_web", "Search the web", query="string")
ALL = [WEATHER, TIME, STOCK, READ, EMAIL, SEARCH]

# (kind, prompt, tools, expected function or None, result given or None: (call name, arguments, result, fact))
ONE = [
    ("What's the weather in Paris?", WEATHER),
    ("Is it raining in Tokyo right now?", WEATHER),
    ("Tell me the current weather in Berlin.", WEATHER),
    ("What time is it in Europe/London?", TIME),
    ("Get me the time in America/New_York.", TIME),
    ("What is Apple's stock price? The ticker is AAPL.", STOCK),
    ("Read the file hello.txt and tell me what it says.", READ),
    ("Open notes/todo.md and show me its contents.", READ),
    ("Search the web for the latest Python release.", SEARCH),
    ("Email bob@example.com with the subject Hi and the body See you soon.", EMAIL),
]
SEVERAL = [
    ("What's the weather like in Madrid?", WEATHER),
    ("What time is it in Asia/Tokyo?", TIME),
    ("How much is one share of MSFT?", STOCK),
    ("Please read config.toml for me.", READ),
    ("Look up on the web who won the 2022 World Cup.", SEARCH),
    ("Send an email to alice@example.com saying the report is ready, subject Report.", EMAIL),
    ("Check the weather in Oslo.", WEATHER),
    ("Find the current price of the TSLA stock.", STOCK),
    ("What does the file README.md contain?", READ),
    ("What is the time in Australia/Sydney?", TIME),
]
NONE = [
    "What is 2 + 2? Answer with the number only.",
    "Say hello in French.",
    "Write a haiku about the sea.",
    "What is the capital of Italy?",
    "Translate 'thank you' into Spanish.",
    "Explain in one sentence what a Python list is.",
]
RESULTS = [
    ("What's the weather in Paris?", WEATHER, {"city": "Paris"}, {"temperature_c": 18, "condition": "sunny"}, "18"),
    ("What time is it in Europe/London?", TIME, {"zone": "Europe/London"}, {"time": "14:05"}, "14:05"),
    ("Read hello.txt and tell me what it says.", READ, {"path": "hello.txt"}, "Hello from Hypnos!", "Hypnos"),
    ("What is the price of AAPL?", STOCK, {"ticker": "AAPL"}, {"price": 231.5, "currency": "USD"}, "231.5"),
    ("What's the weather in Oslo?", WEATHER, {"city": "Oslo"}, {"temperature_c": -3, "condition": "snow"}, "snow"),
    (
        "Search the web for the tallest mountain.",
        SEARCH,
        {"query": "tallest mountain"},
        "Mount Everest, 8849 m",
        "Everest",
    ),
]


def cases() -> list[dict[str, Any]]:
    """The fixed prompts as dicts: kind, prompt, tools, expected call, and the tool result turn where there is one."""
    out = [{"kind": "one tool", "prompt": p, "tools": [t], "expect": t["name"]} for p, t in ONE]
    out += [{"kind": "several tools", "prompt": p, "tools": ALL, "expect": t["name"]} for p, t in SEVERAL]
    out += [{"kind": "no tool needed", "prompt": p, "tools": ALL, "expect": None} for p in NONE]
    for prompt, tool, arguments, result, fact in RESULTS:
        result_text = result if isinstance(result, str) else json.dumps(result)
        turn = {"name": tool["name"], "arguments": arguments, "result": result_text, "fact": fact}
        out.append({"kind": "tool result", "prompt": prompt, "tools": ALL, "expect": None, "result": turn})
    kinds = {case["kind"]: [c for c in out if c["kind"] == case["kind"]] for case in out}
    # interleaved by kind, so that the first prompts of a run (or a run cut short) cover every kind
    return [group[i] for i in range(max(map(len, kinds.values()))) for group in kinds.values() if i < len(group)]


def chat_body(case: dict[str, Any], max_tokens: int) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": case["prompt"]}]
    if (turn := case.get("result")) is not None:
        call = {
            "id": "call_1",
            "type": "function",
            "function": {"name": turn["name"], "arguments": json.dumps(turn["arguments"])},
        }
        messages += [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_1", "content": turn["result"]},
        ]
    tools = [{"type": "function", "function": tool} for tool in case["tools"]]
    return {
        "model": MODEL,
        "messages": messages,
        "tools": tools,
        "tool_choice": "auto",
        "temperature": 0,
        "max_tokens": max_tokens,
    }


def responses_body(case: dict[str, Any], max_tokens: int) -> dict[str, Any]:
    items: list[dict[str, Any]] = [{"role": "user", "content": case["prompt"]}]
    if (turn := case.get("result")) is not None:
        items += [
            {
                "type": "function_call",
                "call_id": "call_1",
                "name": turn["name"],
                "arguments": json.dumps(turn["arguments"]),
            },
            {"type": "function_call_output", "call_id": "call_1", "output": turn["result"]},
        ]
    tools = [{"type": "function", **tool} for tool in case["tools"]]
    return {
        "model": MODEL,
        "input": items,
        "tools": tools,
        "tool_choice": "auto",
        "temperature": 0,
        "max_output_tokens": max_tokens,
        "store": False,
    }


def messages_body(case: dict[str, Any], max_tokens: int) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": case["prompt"]}]
    if (turn := case.get("result")) is not None:
        messages += [
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "toolu_1", "name": turn["name"], "input": turn["arguments"]}],
            },
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": turn["result"]}]},
        ]
    tools = [
        {"name": t["name"], "description": t["description"], "input_schema": t["parameters"]} for t in case["tools"]
    ]
    return {
        "model": MODEL,
        "messages": messages,
        "tools": tools,
        "tool_choice": {"type": "auto"},
        "temperature": 0,
        "max_tokens": max_tokens,
    }


def read_chat(answer: dict[str, Any]) -> tuple[list[tuple[str, str]], str]:
    message = answer["choices"][0]["message"]
    calls = [(c["function"]["name"], c["function"]["arguments"]) for c in message.get("tool_calls") or []]
    return calls, message.get("content") or ""


def read_responses(answer: dict[str, Any]) -> tuple[list[tuple[str, str]], str]:
    calls, text = [], []
    for item in answer.get("output") or []:
        if item.get("type") == "function_call":
            calls.append((item["name"], item["arguments"]))
        elif item.get("type") == "message":
            text += [part.get("text", "") for part in item.get("content") or []]
    return calls, "".join(text)


def read_messages(answer: dict[str, Any]) -> tuple[list[tuple[str, str]], str]:
    calls, text = [], []
    for block in answer.get("content") or []:
        if block.get("type") == "tool_use":
            calls.append((block["name"], json.dumps(block["input"])))
        elif block.get("type") == "text":
            text.append(block["text"])
    return calls, "".join(text)


APIS = {
    "chat": ("/v1/chat/completions", chat_body, read_chat),
    "responses": ("/v1/responses", responses_body, read_responses),
    "messages": ("/v1/messages", messages_body, read_messages),
}


def judge(case: dict[str, Any], calls: list[tuple[str, str]], text: str) -> dict[str, bool]:
    """What one answer counts for."""
    parsed = False
    for name, arguments in calls:
        try:
            parsed = parsed or (name == case["expect"] and isinstance(json.loads(arguments), dict))
        except ValueError:
            pass
    turn = case.get("result")
    # words: an answer in prose, not a call echoed as JSON text (`{"name": ...}`, `({...`, a code block)
    prose = bool(text.strip()) and not text.strip().lstrip("(`").startswith(("{", "[", "json"))
    return {
        "parsed": case["expect"] is not None and parsed,
        "false": case["expect"] is None and bool(calls),
        "words": case["expect"] is None and not calls and prose,
        "fact": turn is not None and not calls and prose and turn["fact"].lower() in text.lower(),
    }


def run(client: httpx.Client, max_tokens: int, apis: list[str], lines: Any = None) -> list[dict[str, Any]]:
    """Every case through every API named; a record per answer (a line on stderr each, and a JSON line in `lines`
    when given)."""
    records = []
    for api in apis:  # one API after the other: its prompts share their tools' prefix in the slot's cache
        path, body, read = APIS[api]
        for case in cases():
            started = time.perf_counter()
            response = client.post(path, json=body(case, max_tokens))
            seconds = time.perf_counter() - started
            if response.status_code != 200:
                calls, text = [], f"HTTP {response.status_code}: {response.text[:200]}"
            else:
                calls, text = read(response.json())
            print(f"{api:<10} {case['kind']:<15} {seconds:6.1f}s calls={calls} text={text[:60]!r}", file=sys.stderr)
            if lines is not None:
                lines.write(json.dumps({"api": api, **case, "calls": calls, "text": text}) + "\n")
                lines.flush()
            records.append(
                {
                    "api": api,
                    **case,
                    "calls": calls,
                    "text": text,
                    "seconds": seconds,
                    **judge(case, calls, text),
                    "status": response.status_code,
                }
            )
    return records


def report(records: list[dict[str, Any]], label: str, apis: list[str]) -> None:
    """The table: per API, calls parsed / intended, false calls, words after a result, no-tool prompts in words."""
    print(f"tool_choice auto on {MODEL}, temperature 0, a fixed set of {len(cases())} prompts ({label})")
    header = f"{'API':<10}{'calls parsed':>16}{'false calls':>13}{'result -> words':>17}{'fact in answer':>16}"
    print(header + f"{'no tool -> words':>18}{'non-200':>9}{'answers':>9}")
    for api in apis:
        rows = [r for r in records if r["api"] == api]
        wanted = [r for r in rows if r["expect"] is not None]
        results = [r for r in rows if r.get("result")]
        plain = [r for r in rows if r["kind"] == "no tool needed"]
        unwanted = [r for r in rows if r["expect"] is None]

        def share(hits: int, total: int) -> str:
            return f"{hits}/{total} ({100 * hits / total:.0f}%)" if total else "-"

        print(
            f"{api:<10}{share(sum(r['parsed'] for r in wanted), len(wanted)):>16}"
            f"{sum(r['false'] for r in unwanted):>13}{share(sum(r['words'] for r in results), len(results)):>17}"
            f"{share(sum(r['fact'] for r in results), len(results)):>16}"
            f"{share(sum(r['words'] for r in plain), len(plain)):>18}{sum(r['status'] != 200 for r in rows):>9}"
            f"{len(rows):>9}"
        )


def main() -> None:
    """Serve the starter, send every prompt through the three APIs, print the table."""
    parser = argparse.ArgumentParser(prog="python -m bench.tool_calls_bench", description=__doc__.split("\n")[0])
    parser.add_argument("--model", help="a GGUF (default: the starter)")
    parser.add_argument("--max-tokens", type=int, default=64, help="output tokens per answer")
    parser.add_argument("--apis", default=",".join(APIS), help="comma-separated: chat, responses, messages")
    parser.add_argument("--label", default="this checkout", help="what the run measured, printed with the table")
    parser.add_argument("--json", help="write every answer to this file")
    parser.add_argument("--base-url", help="an already running server (its model must be served as qwen2.5:0.5b)")
    parser.add_argument("--lines", help="append each answer to this JSON-lines file as it comes")
    parser.add_argument("--report", nargs="+", help="print the table of these JSON-lines files and exit")
    args = parser.parse_args()
    apis = [api.strip() for api in args.apis.split(",") if api.strip()]
    if args.report:
        records = [json.loads(line) for name in args.report for line in Path(name).read_text().splitlines()]
        records = [{**record, **judge(record, record["calls"], record["text"]), "status": 200} for record in records]
        report(records, args.label, [api for api in APIS if any(r["api"] == api for r in records)])
        return
    lines = open(args.lines, "a", encoding="utf-8") if args.lines else None
    if args.base_url:
        with httpx.Client(base_url=args.base_url, timeout=600) as client:
            records = run(client, args.max_tokens, apis, lines)
    else:
        from hypnos_llama.testing import toml_model_config
        from hypnos_server.testing import free_port, live_server

        from bench.llama_bench import _resolve_model

        model = _resolve_model(args.model)
        with tempfile.TemporaryDirectory(prefix="hypnos-tool-bench-") as scratch:
            work = Path(scratch)
            config = work / "hypnos.toml"
            entry = {"id": MODEL, "weights_path": str(model), "context_len": 4096, "slots": 1}
            entry |= {"modality": "text_generation", "engine": "ggml_llama", "initial_tier": "tier1_gpu_vram"}
            config.write_text(toml_model_config(work, [entry]))
            with live_server(config, port=free_port()) as base, httpx.Client(base_url=base, timeout=600) as client:
                records = run(client, args.max_tokens, apis, lines)
    if args.json:
        Path(args.json).write_text(json.dumps(records, indent=1))
    report(records, args.label, apis)


if __name__ == "__main__":
    main()
