"""The model catalog: models.catalog.toml shipped with the server plus each plugin's hypnos_catalog_entries."""

from __future__ import annotations

import copy
import logging
import platform
import sys
import tomllib
from collections.abc import Mapping
from importlib.resources import files
from pathlib import Path
from typing import Any

import msgspec
import pluggy
from hypnos.config import ModelConfig
from hypnos.engine import EngineKind
from hypnos.errors import invalid_request
from hypnos.tomlw import dumps

logger = logging.getLogger(__name__)

ROLE_KEYS = {
    "weights": "weights_path",
    "aux": "aux_path",
    "text_encoder": "text_encoder_path",
    "tokenizer": "tokenizer_path",
    "voices": "voices_path",
}


class CatalogFile(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """One file a variant needs: where it comes from and where it goes under models_dir."""

    role: str
    repo: str
    remote: str
    local: str
    entry: str | None = None
    size: int | None = None
    platform: str = "all"
    gated: bool = False


class CatalogVariant(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """One quantization of a catalog model."""

    quant: str
    default: bool = False
    config: dict[str, Any] = {}
    files: list[CatalogFile] = []


class CatalogEntry(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """One catalog model with its variants."""

    id: str
    name: str
    engine: str
    modality: str
    publisher: str = ""
    license: str = ""
    architecture: str | None = None
    additional_modalities: list[str] = []
    capabilities: list[str] = []
    summary: str = ""
    lineup: bool = False
    params_b: float | None = None
    # Figures the advisor plans with in place of what the weights report: layers, kv_bytes_per_token,
    # workspace_bytes, expert_fraction, max_context_len.
    estimate: dict[str, Any] = {}
    config: dict[str, Any] = {}
    variants: list[CatalogVariant] = []

    @property
    def modalities(self) -> list[str]:
        """The primary modality and the additional ones."""
        return [self.modality, *self.additional_modalities]

    def default_variant(self) -> CatalogVariant:
        """The variant marked default (else the first)."""
        return next((v for v in self.variants if v.default), self.variants[0])


class CatalogDocument(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A models.catalog.toml file."""

    catalog_version: int = 1
    models: list[CatalogEntry] = []


def this_platform() -> str:
    """`macos-arm64` on Apple Silicon, else `other`."""
    return "macos-arm64" if sys.platform == "darwin" and platform.machine() == "arm64" else "other"


def shipped_catalog_path() -> Path:
    """The models.catalog.toml shipped inside hypnos-server."""
    return Path(str(files("hypnos_server") / "models.catalog.toml"))


class Catalog:
    """The merged catalog entries, by id, with variant lookup and config blocks."""

    def __init__(self, entries: list[CatalogEntry], version: int = 1) -> None:
        self.version = version
        self.entries: dict[str, CatalogEntry] = {}
        for entry in entries:
            if not entry.variants:
                logger.warning("catalog entry %s has no variants and is skipped", entry.id)
            elif entry.id in self.entries:
                logger.warning("catalog entry %s is listed twice; keeping the first", entry.id)
            else:
                self.entries[entry.id] = entry

    @classmethod
    def load(cls, path: Path | None, manager: pluggy.PluginManager | None) -> Catalog | None:
        """The catalog file at `path` plus the plugins' entries; None when there is no catalog file."""
        if path is None or not path.is_file():
            return None
        document = msgspec.convert(tomllib.loads(path.read_text(encoding="utf-8")), CatalogDocument)
        entries = list(document.models)
        if manager is not None:
            for batch in manager.hook.hypnos_catalog_entries():
                for raw in batch or []:
                    try:
                        entries.append(msgspec.convert(raw, CatalogEntry))
                    except msgspec.ValidationError as error:
                        logger.warning("a plugin's catalog entry %r is skipped: %s", raw.get("id"), error)
        return cls(entries, document.catalog_version)

    @property
    def tested_architectures(self) -> list[str]:
        """The architectures the entries name (what their weights report)."""
        return sorted({e.architecture for e in self.entries.values() if e.architecture})

    def tested_architectures_of(self, engine: str) -> list[str]:
        """The architectures of the entries run by this engine kind."""
        return sorted({e.architecture for e in self.entries.values() if e.architecture and e.engine == engine})

    def find(self, spec: str) -> tuple[CatalogEntry, CatalogVariant]:
        """`<id>` (default variant) or `<id>:<quant>`; 400 naming the known ids otherwise."""
        entry = self.entries.get(spec)
        if entry is not None:
            return entry, entry.default_variant()
        model_id, _, quant = spec.rpartition(":")
        entry = self.entries.get(model_id)
        if entry is not None:
            for variant in entry.variants:
                if variant.quant.lower() == quant.lower():
                    return entry, variant
            quants = ", ".join(v.quant for v in entry.variants)
            raise invalid_request(f"the catalog model `{model_id}` has no variant `{quant}` (variants: {quants})")
        raise invalid_request(f"`{spec}` is not in the model catalog (GET /v1/models/catalog)")

    def model_block(self, entry: CatalogEntry, variant: CatalogVariant) -> dict[str, Any]:
        """The [[models]] table that runs this variant, paths relative to models_dir."""
        block: dict[str, Any] = {"id": entry.id, "modality": entry.modality, "engine": entry.engine}
        if entry.additional_modalities:
            block["modalities"] = list(entry.additional_modalities)
        for file in variant.files:
            key = ROLE_KEYS.get(file.role)
            if key is not None and file.platform in ("all", this_platform()):
                local = file.local.rstrip("/") if file.entry is None else f"{file.local.rstrip('/')}/{file.entry}"
                block[key] = local
        block.update(copy.deepcopy(entry.config))
        block.update(copy.deepcopy(variant.config))
        block.setdefault("arch", {})
        return block

    def config_block(self, entry: CatalogEntry, variant: CatalogVariant) -> str:
        """The commented TOML of model_block."""
        comment = f"# {entry.name} ({variant.quant}), {entry.publisher}, license {entry.license}. {entry.summary}"
        return comment.rstrip() + "\n" + dumps({"models": [self.model_block(entry, variant)]})


def file_state(models_dir: Path, file: CatalogFile) -> tuple[bool, bool]:
    """(present, outdated) of one catalog file under models_dir."""
    path = models_dir / file.local
    if file.local.endswith("/"):
        return path.is_dir() and any(path.iterdir()), False
    if not path.is_file():
        return False, False
    return True, file.size is not None and path.stat().st_size != file.size


def variant_files(variant: CatalogVariant) -> list[CatalogFile]:
    """The variant's files this machine needs."""
    here = this_platform()
    return [f for f in variant.files if f.platform in ("all", here)]


def architecture_problem(
    models_dir: Path, entry: CatalogEntry, variant: CatalogVariant, kinds: Mapping[str, EngineKind]
) -> str | None:
    """A message when the downloaded weights report another architecture than the entry (read by the entry's kind,
    when installed and it reads architectures)."""
    kind = kinds.get(entry.engine)
    if kind is None or kind.architecture_of is None or entry.architecture is None:
        return None
    for file in variant_files(variant):
        path = models_dir / file.local
        if file.role == "weights" and path.is_file():
            try:
                found = kind.architecture_of(path)
            except (OSError, ValueError) as error:
                return f"{file.local} cannot be read by the `{kind.name}` engine ({error})"
            if found != entry.architecture:
                return f"{file.local} reports the architecture `{found}`, the catalog expects `{entry.architecture}`"
    return None


def catalog_spec_block(catalog: Catalog, spec: str) -> dict[str, Any]:
    """The [[models]] table of a catalog spec (POST /v1/models {"catalog": ...})."""
    entry, variant = catalog.find(spec)
    return catalog.model_block(entry, variant)


def configured_quant(model: ModelConfig | None, entry: CatalogEntry) -> str | None:
    """The variant whose weights file the configured model runs."""
    if model is None:
        return None
    for variant in entry.variants:
        for file in variant.files:
            if file.role == "weights" and model.weights_path in (file.local.rstrip("/"), file.local):
                return variant.quant
    return None
