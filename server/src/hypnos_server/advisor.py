"""POST /v1/advisor and `hypnos advise`: a lineup from the catalog for a machine and a set of needs.

Budgets are derived as the server derives them; every candidate is placed with the scheduler's own planner
(plan_placement) on an estimate built from the catalog; all combinations serving the needs are scored.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import msgspec
from hypnos.engine import MemoryEstimate
from hypnos.errors import HypnosError, invalid_request
from hypnos.hardware import DeviceInfo
from hypnos.scheduler import FreeMemory, PlacementRequest, plan_placement
from hypnos.tomlw import dumps
from hypnos.types import LayerPlacementPlan, MemoryTier, MoeOffload

from hypnos_server.catalog import Catalog, CatalogEntry, CatalogVariant, variant_files

GiB = 1024**3
MiB = 1024**2
NEEDS: dict[str, list[str]] = {  # each need: the modalities a lineup must serve for it (one model each)
    "chat": ["text_generation"],
    "vision": ["vision"],
    "voice": ["speech_to_text", "text_generation", "text_to_speech"],
    "transcription": ["speech_to_text"],
    "speech": ["text_to_speech"],
    "embeddings": ["embeddings"],
    "images": ["image_generation"],
    "documents": ["document_conversion"],
    "entities": ["entity_extraction"],
}
# Quality levels off early for speech in and out: they count a quarter and a tenth of their parameters.
MODALITY_WEIGHT = {"speech_to_text": 0.25, "text_to_speech": 0.1}
INTERACTIVE = {"text_generation", "vision", "text_to_speech", "embeddings", "speech_to_text"}
QUANT_BITS = {"q4_0": 4.5, "q4_k_m": 4.85, "q5_k_m": 5.7, "q6_k": 6.6, "q8_0": 8.5, "int8": 8.0, "f16": 16.0,
              "bf16": 16.0, "fp16": 16.0, "fp32": 32.0}  # fmt: skip
MAX_COMBINATIONS = 20000
LOAD_GBPS = 3.0


class AdvisorRequest(msgspec.Struct, kw_only=True):
    """POST /v1/advisor body."""

    needs: list[str]
    vram_bytes: int | None = None
    ram_bytes: int | None = None
    unified_memory: bool | None = None


@dataclass(frozen=True)
class Machine:
    """The machine the lineup is for and its tier budgets."""

    vram_bytes: int
    ram_bytes: int
    unified: bool

    @property
    def tier1(self) -> int:
        """GPU budget: VRAM minus 512 MiB, or Metal's default working set minus a 4 GiB OS reserve."""
        if self.unified:
            share = 0.75 if self.ram_bytes > 36 * GiB else 2 / 3
            return max(0, min(int(self.ram_bytes * share), self.ram_bytes - 4 * GiB))
        return max(0, self.vram_bytes - 512 * MiB)

    @property
    def tier2(self) -> int:
        """Warm memory: at most half the RAM (on unified memory, half of what tier 1 leaves)."""
        if self.unified:
            return max(0, (self.ram_bytes - 4 * GiB - self.tier1) // 2)
        return self.ram_bytes // 2


def machine_for(body: AdvisorRequest, info: DeviceInfo) -> Machine:
    """The request's machine; each figure left out is this server's (unified unless vram_bytes is given)."""
    here_unified = not info.discrete and not info.simulated
    unified = body.unified_memory if body.unified_memory is not None else (here_unified and body.vram_bytes is None)
    vram = body.vram_bytes if body.vram_bytes is not None else info.total_vram_bytes
    ram = body.ram_bytes if body.ram_bytes is not None else info.physical_memory_bytes
    return Machine(vram_bytes=vram, ram_bytes=ram, unified=unified)


@dataclass
class Candidate:
    """One catalog variant, its estimate, and the needs it can serve."""

    entry: CatalogEntry
    variant: CatalogVariant
    estimate: MemoryEstimate
    params_b: float

    @property
    def spec(self) -> str:
        """`<id>:<quant>`."""
        return f"{self.entry.id}:{self.variant.quant}"


def _weights_bytes(entry: CatalogEntry, variant: CatalogVariant) -> int:
    listed = sum(f.size or 0 for f in variant_files(variant) if f.role in ("weights", "aux", "text_encoder"))
    if listed:
        return listed
    bits = QUANT_BITS.get(variant.quant.lower(), 8.0)
    return int((entry.params_b or 1.0) * 1e9 * bits / 8)


def candidate(entry: CatalogEntry, variant: CatalogVariant) -> Candidate:
    """The planner's estimate for a catalog variant (catalog values stand in for what the weights report; an entry
    naming an architecture is a layered model)."""
    figures = entry.estimate
    weights = _weights_bytes(entry, variant)
    layers = int(figures.get("layers", 24 if entry.architecture else 0))
    per_layer = int(weights * 0.9 / layers) if layers else 0
    expert_share = float(figures.get("expert_fraction", 0.0))
    estimate = MemoryEstimate(
        weight_bytes=weights,
        layer_bytes=[per_layer] * layers,
        non_layer_bytes=weights - per_layer * layers,
        kv_bytes_per_token=int(figures.get("kv_bytes_per_token", 32 * 1024 if layers else 0)),
        workspace_bytes=int(figures.get("workspace_bytes", 256 * MiB if layers else 64 * MiB)),
        expert_bytes_per_layer=[int(per_layer * expert_share)] * layers if expert_share else [],
        max_context_len=int(figures.get("max_context_len", 32768)) if layers else None,
        default_context_len=8192 if layers else 0,
        supports_partial_offload=bool(layers),
    )
    bits = QUANT_BITS.get(variant.quant.lower(), 8.0)
    params = entry.params_b if entry.params_b is not None else weights * 8 / bits / 1e9
    return Candidate(entry, variant, estimate, params)


def _place(c: Candidate, machine: Machine, context: int, slots: int) -> LayerPlacementPlan | None:
    moe = MoeOffload.AUTO if c.estimate.expert_bytes and not machine.unified else MoeOffload.OFF
    request = PlacementRequest(
        model_id=c.entry.id, estimate=c.estimate, target=MemoryTier.TIER1, context_len=context, slots=slots,
        moe_offload=moe, min_gpu_layer_ratio=0.5, discrete=not machine.unified,
    )  # fmt: skip
    free = FreeMemory(tier1=machine.tier1, tier2=machine.tier2, host_tier1=machine.unified)
    try:
        return plan_placement(request, free)
    except HypnosError:
        return None


def advise(catalog: Catalog, needs: list[str], machine: Machine) -> dict:
    """The advisor's answer (section 6); 400 for unknown needs or when no lineup fits."""
    unknown = [n for n in needs if n not in NEEDS]
    if unknown or not needs:
        raise invalid_request(f"needs: unknown or empty ({', '.join(unknown)}); use some of {', '.join(NEEDS)}")
    pool = [candidate(e, v) for e in catalog.entries.values() for v in e.variants]
    fitting = [c for c in pool if _place(c, machine, 8192, 1) is not None]
    parts = [(need, modality) for need in dict.fromkeys(needs) for modality in NEEDS[need]]
    options: list[list[Candidate]] = []
    for need, modality in parts:
        serving = [c for c in fitting if modality in c.entry.modalities]
        if not serving:
            raise invalid_request(
                f"no catalog model serving {modality} (for `{need}`) fits this machine, not even alone "
                f"(tier 1: {machine.tier1} bytes, tier 2: {machine.tier2} bytes)"
            )
        options.append(serving)
    best: tuple[float, dict] | None = None
    for chosen in itertools.islice(itertools.product(*options), MAX_COMBINATIONS):
        answer = _lineup(parts, list(chosen), machine)
        if best is None or answer[0] > best[0]:
            best = answer
    assert best is not None  # every option list is non-empty
    return best[1]


def _fallback(c: Candidate, machine: Machine) -> LayerPlacementPlan:
    """The plan at one slot and 8k context (every candidate fits so, or it was not a candidate)."""
    plan = _place(c, machine, 8192, 1)
    assert plan is not None
    return plan


def _lineup(parts: list[tuple[str, str]], chosen: list[Candidate], machine: Machine) -> tuple[float, dict]:
    models: dict[str, Candidate] = {}
    serves: dict[str, list[str]] = {}
    score = 0.0
    for (need, modality), c in zip(parts, chosen, strict=True):
        models.setdefault(c.spec, c)
        if need not in serves.setdefault(c.spec, []):
            serves[c.spec].append(need)
        score += MODALITY_WEIGHT.get(modality, 1.0) * c.params_b
    interactive = [s for s, c in models.items() if INTERACTIVE & set(c.entry.modalities)]
    plans: dict[str, tuple[LayerPlacementPlan, int, int]] = {}
    for spec, c in models.items():  # first each model's own slots and context (from the catalog's block)
        wanted = {**c.entry.config, **c.variant.config}
        context, slots = int(wanted.get("context_len", 8192)), int(wanted.get("slots", 1))
        plan = _place(c, machine, context, slots)
        plans[spec] = (plan, context, slots) if plan is not None else (_fallback(c, machine), 8192, 1)
    together = sum(plans[s][0].vram_bytes for s in interactive)
    if together > machine.tier1:  # one slot and 8k context on the chat models, when that makes them fit
        for spec in interactive:
            if {"text_generation", "vision"} & set(models[spec].entry.modalities):
                plans[spec] = (_fallback(models[spec], machine), 8192, 1)
        together = sum(plans[s][0].vram_bytes for s in interactive)
    coresident = together <= machine.tier1
    partial = [s for s, (plan, _, _) in plans.items() if plan.pinned_ram_layers or plan.ssd_layers]
    score *= 1.5 if coresident else 1.0
    score -= 0.5 * len(partial)
    warnings = [f"{s} only partly fits the GPU ({plans[s][0].gpu_layers} layers on it)" for s in partial]
    if not coresident:
        warnings.append("the interactive models do not fit the GPU together; they take turns")
    entries = []
    for spec, c in models.items():
        plan, context, slots = plans[spec]
        tier = MemoryTier.TIER1 if coresident and spec in interactive else MemoryTier.TIER2
        if tier == MemoryTier.TIER2 and c.estimate.weight_bytes > machine.tier2:
            tier = MemoryTier.TIER3
        priority = "high" if {"chat", "voice", "vision"} & set(serves[spec]) else "normal"
        layered = c.estimate.num_layers > 0
        entries.append({
            "id": c.entry.id, "name": c.entry.name, "quant": c.variant.quant, "serves": serves[spec],
            "weights_bytes": c.estimate.weight_bytes, "resident_bytes": plan.vram_bytes,
            "runs_on_cpu": plan.gpu_layers == 0 and layered, "gpu_layers": plan.gpu_layers,
            "num_layers": c.estimate.num_layers, "cpu_expert_layers": plan.cpu_expert_layers,
            "context_len": context if layered else None, "slots": slots, "initial_tier": str(tier),
            "priority": priority, "keep_warm_in_ram": tier != MemoryTier.TIER3,
            "moe_offload": "auto" if c.estimate.expert_bytes and not machine.unified else "off",
            "load_secs_cold": round(c.estimate.weight_bytes / (LOAD_GBPS * 1e9), 1),
            "load_secs_warm": round(c.estimate.weight_bytes / (LOAD_GBPS * 1e9), 1),
        })  # fmt: skip
    answer = {
        "machine": {
            "vram_bytes": machine.vram_bytes,
            "ram_bytes": machine.ram_bytes,
            "unified_memory": machine.unified,
        },
        "budgets": {"tier1_bytes": machine.tier1, "tier2_bytes": machine.tier2, "unified_memory": machine.unified},
        "models": entries,
        "interactive_coresident": coresident,
        "interactive_bytes": together,
        "warnings": warnings,
        "specs": list(models),
    }
    return score, answer


def config_text(catalog: Catalog, answer: dict, models_dir: str = "models") -> str:
    """A complete config file for the advised lineup."""
    tables = []
    for model in answer["models"]:
        entry, variant = catalog.find(f"{model['id']}:{model['quant']}")
        table = catalog.model_block(entry, variant)
        table["initial_tier"] = model["initial_tier"]
        table["priority"] = model["priority"]
        table["slots"] = model["slots"]
        if model["context_len"] is not None:
            table["context_len"] = model["context_len"]
        if model["moe_offload"] != "off":
            table["moe_offload"] = model["moe_offload"]
        tables.append(table)
    header = (
        f"# Generated by the Hypnos advisor for needs: {', '.join(s for m in answer['models'] for s in m['serves'])}\n"
        "# Download the files with `./run.sh models <spec>` for each of: " + " ".join(answer["specs"]) + "\n"
    )
    return header + dumps({"config_version": 1, "models_dir": models_dir, "models": tables})
