"""`hypnos ls`, `ps`, `show`, `add`, `rm`: the model pool, from the running server when one answers, else from the
config and its pool overlay (`<config>.models.toml`, applied at the next start)."""

from __future__ import annotations

import argparse
import re
import sys
import tomllib
from pathlib import Path
from typing import Any

from hypnos.config import ConfigError
from hypnos.overlay import validate_model_block
from hypnos.tomlw import dumps

from hypnos_server.cli_connect import ClientError, Target, add_connection_arguments, answer_of, target_of

RESIDENT = ("tier1_gpu_vram", "tier2_pinned_ram")
TIER_NAMES = {"tier1_gpu_vram": "1 GPU", "tier2_pinned_ram": "2 RAM", "tier3_nvme_ssd": "3 disk"}


def register(commands: Any) -> None:
    """Add the pool commands to the `hypnos` parser."""
    listed = commands.add_parser("ls", help="the configured models: modality, size, tier")
    resident = commands.add_parser("ps", help="the models in memory: tier, measured memory, leases, queue")
    shown = commands.add_parser("show", help="a model's config block and its file's facts (architecture, context...)")
    shown.add_argument("model")
    shown.add_argument("--template", action="store_true", help="print only the chat template")
    added = commands.add_parser("add", help="add a model file or folder where it lies (a [[models]] block)")
    added.add_argument("path", type=Path)
    added.add_argument("--id", dest="model_id", help="the model id (default: from the file name)")
    removed = commands.add_parser("rm", help="take a model out of the pool (its files stay where they are)")
    removed.add_argument("model")
    for parser in (listed, resident, shown, added, removed):
        add_connection_arguments(parser)


def console() -> Any:
    """A rich console on stdout (plain text when stdout is not a terminal)."""
    from rich.console import Console

    return Console(soft_wrap=True, width=None if sys.stdout.isatty() else 200)


def size(value: int | None) -> str:
    """Bytes as a short decimal size."""
    from rich.filesize import decimal

    return "-" if value is None else decimal(value)


def _table(*columns: str) -> Any:
    from rich import box
    from rich.table import Table

    table = Table(*columns, box=box.SIMPLE_HEAD, pad_edge=False)
    return table


def ls_command(args: argparse.Namespace) -> int:
    """List the models: the server's view (tier, state), else the config's (files on disk)."""
    target = target_of(args)
    table = _table("ID", "MODALITY", "SIZE", "TIER", "STATE")
    if target.server_up():
        for model in target.get("/v1/memory/status")["models"]:
            state = "disabled" if not model["enabled"] else model.get("unavailable_reason") or "ready"
            modalities = ",".join(model["modalities"])
            tier = TIER_NAMES.get(model["current_tier"], model["current_tier"])
            table.add_row(model["id"], modalities, size(model["total_weight_bytes"]), tier, state)
        where = target.url
    else:
        root = target.settings.models_path
        for model in target.settings.models:
            files = [model.resolve(root, getattr(model, key)) for key in PATH_KEYS]
            present = [path for path in files if path is not None]
            missing = [path for path in present if not path.exists()]
            total = sum(_bytes_of(path) for path in present if path.exists())
            state = f"missing {missing[0]}" if missing else ("disabled" if not model.enabled else "not served")
            table.add_row(model.id, ",".join(model.all_modalities), size(total), "-", state)
        where = f"{target.config or 'the built-in defaults'} (no server answers at {target.url})"
    out = console()
    out.print(table)
    out.print(f"[dim]from {where}[/dim]", highlight=False)
    return 0


PATH_KEYS = ("weights_path", "aux_path", "text_encoder_path", "tokenizer_path", "voices_path")


def _bytes_of(path: Path) -> int:
    """A file's size, or a folder's files added up."""
    if path.is_dir():
        return sum(item.stat().st_size for item in path.rglob("*") if item.is_file())
    return path.stat().st_size


def ps_command(args: argparse.Namespace) -> int:
    """The resident models of the running server with their measured memory."""
    target = target_of(args)
    target.need_server()
    status = target.get("/v1/memory/status")
    table = _table("ID", "TIER", "MEASURED", "BOOKED", "LEASES", "QUEUE", "IDLE", "PROCESS")
    for model in status["models"]:
        if model["current_tier"] not in RESIDENT:
            continue
        process = model.get("engine_process") or {}
        table.add_row(
            model["id"],
            TIER_NAMES[model["current_tier"]],
            size(model.get("measured_bytes")),
            size(model.get("booked_bytes")),
            str(model["active_leases"]),
            str(model["queued"]),
            f"{model['idle_seconds']:.0f} s",
            f"pid {process['pid']}" if process.get("pid") else model.get("isolation", "-"),
        )
    out = console()
    if table.row_count:
        out.print(table)
    else:
        out.print("no model is in memory: the first request for one loads it (`hypnos run <model>`)")
    out.print(
        f"[dim]server process {size(status['process_memory_bytes'])}; tier 1 {size(status['tier1_vram_used_bytes'])} "
        f"used of {size(status['capabilities']['usable_vram_budget_bytes'])}"
        f"{' (simulated)' if status['capabilities']['simulated'] else ''}[/dim]",
        highlight=False,
    )
    return 0


def describe_files(path: Path) -> dict[str, Any] | None:
    """What the installed plugins read from a model file or folder (the first that runs it)."""
    from hypnos_server.plugin_loading import installed_plugin_manager

    return installed_plugin_manager().hook.hypnos_describe_model_files(path=path)


def raw_block(target: Target, model_id: str) -> dict[str, Any] | None:
    """The model's `[[models]]` table as written: the overlay's, else the config file's."""
    if model_id in target.overlay.models:
        return target.overlay.models[model_id]
    if target.config is None or model_id in target.overlay.removed:
        return None
    raw = tomllib.loads(target.config.read_text(encoding="utf-8"))
    return next((block for block in raw.get("models", []) if block.get("id") == model_id), None)


def show_command(args: argparse.Namespace) -> int:
    """Print a model's config block and its file facts."""
    target = target_of(args)
    block = raw_block(target, args.model)
    if block is None:
        raise ClientError(f"no model `{args.model}` in {target.config or 'the config'} (`hypnos ls` lists them)")
    model = validate_model_block(dict(block), str(target.config))
    weights = model.resolve(target.settings.models_path, model.weights_path)
    described = describe_files(weights) if weights is not None and weights.exists() else None
    facts = (described or {}).get("facts", {})
    if args.template:
        sys.stdout.write((facts.get("chat_template") or "") + "\n")
        return 0 if facts.get("chat_template") else 1
    out = console()
    out.print(f"[bold]{model.id}[/bold]  ({target.config})", highlight=False)
    out.print(dumps({"models": [block]}), markup=False, highlight=False)
    table = _table("FACT", "VALUE")
    if weights is None:
        table.add_row("weights", "none named")
    elif not weights.exists():
        table.add_row("weights", f"missing: {weights}")
    else:
        table.add_row("weights", str(weights))
    for key, value in facts.items():
        text = str(value)
        if key == "chat_template":
            text = text if len(text) <= 160 else text[:160] + f"... ({len(text)} characters; --template prints it)"
        elif key == "file_bytes":
            text = size(value)
        table.add_row(key.replace("_", " "), text)
    if weights is not None and weights.exists() and described is None:
        table.add_row("facts", "no installed plugin reads this file's metadata")
    if target.server_up():
        status = {m["id"]: m for m in target.get("/v1/memory/status")["models"]}.get(model.id)
        if status is not None:
            table.add_row("tier", TIER_NAMES.get(status["current_tier"], status["current_tier"]))
            table.add_row("state", status.get("unavailable_reason") or ("ready" if status["enabled"] else "disabled"))
    out.print(table)
    return 0


def model_id_of(path: Path) -> str:
    """An id from a file or folder name: lower case, letters, digits, . _ - and :, at most 128 characters."""
    stem = (path.stem if path.is_file() else path.name).lower()
    cleaned = re.sub(r"[^a-z0-9._:-]+", "-", stem).strip("-._:")
    return (cleaned or "model")[:128]


def add_command(args: argparse.Namespace) -> int:
    """Add a model file or folder where it lies: live through the pool API, else in the config's overlay."""
    target = target_of(args)
    path = args.path.expanduser().absolute()
    if not path.exists():
        raise ClientError(f"{path}: no such file or folder")
    described = describe_files(path)
    if described is None:
        raise ClientError(f"no installed plugin runs {path} (`hypnos plugins` lists what each one runs)")
    if described.get("block") is None:
        raise ClientError(described.get("problem") or f"{path} cannot be added as a model")
    block = {"id": args.model_id or model_id_of(path), **described["block"]}
    root = target.settings.models_path
    for key in PATH_KEYS:  # a file inside models_dir is named relative to it, as the pool API wants
        value = block.get(key)
        if value and Path(value).is_relative_to(root):
            block[key] = str(Path(value).relative_to(root))
    try:
        validate_model_block(dict(block), "hypnos add")
    except ConfigError as error:
        raise ClientError(f"{error} (pick another with --id)") from None
    text = dumps({"models": [block]})
    out = console()
    if target.server_up():
        with target.client(timeout=None) as client:
            answer = client.post("/v1/models", json={"config": text})
        if answer.status_code == 403:
            raise ClientError(f"{answer_of_text(answer)} (pass an admin key: --api-key or $HYPNOS_API_KEY)")
        if answer.status_code == 400 and "server.model_roots" in answer.text:
            raise ClientError(
                f"{answer_of_text(answer)}; or stop the server and run this `hypnos add` again: with no server "
                f"running it writes {target.overlay.path or 'the config overlay'}, which may name any readable file "
                "(./run.sh keeps it: it rewrites only the starter config)"
            )
        answer_of(answer)
        out.print(f"added `{block['id']}` to the server at {target.url}:", highlight=False)
    else:
        if target.config is None:
            raise ClientError("no config to add it to: pass --config FILE (or run `./run.sh` once, which writes one)")
        if block["id"] in [m.id for m in target.settings.models]:
            raise ClientError(f"`{block['id']}` is already configured: pick another id with --id")
        target.overlay.put(block)
        if not target.overlay.write():
            raise ClientError(f"{target.overlay.path} could not be written")
        out.print(f"added `{block['id']}` to {target.overlay.path} (served from the next start):", highlight=False)
    out.print(text, markup=False, highlight=False)
    out.print(f"chat with it: hypnos run {block['id']}", highlight=False)
    return 0


def answer_of_text(response: Any) -> str:
    """The API error message of a refused call."""
    try:
        answer_of(response)
    except ClientError as error:
        return str(error)
    return ""


def rm_command(args: argparse.Namespace) -> int:
    """Take a model out of the pool: DELETE /v1/models/{id} on the server, else a removal in the overlay."""
    target = target_of(args)
    if target.server_up():
        with target.client(timeout=None) as client:
            answer_of(client.delete(f"/v1/models/{args.model}"))
        where = f"the server at {target.url}"
    else:
        known = [m.id for m in target.settings.models]
        if args.model not in known or target.overlay.path is None:
            raise ClientError(f"no model `{args.model}` in {target.config or 'the config'} (`hypnos ls` lists them)")
        target.overlay.drop(args.model)
        if not target.overlay.write():
            raise ClientError(f"{target.overlay.path} could not be written")
        where = f"{target.overlay.path} (from the next start)"
    console().print(f"removed `{args.model}` from {where}; its files are kept", highlight=False)
    return 0


COMMANDS = {"ls": ls_command, "ps": ps_command, "show": show_command, "add": add_command, "rm": rm_command}
