"""The `gliner` engine: GLiNER on torch or ONNX Runtime, label families and text windows resolved into one answer."""

from __future__ import annotations

import gc
import importlib.util
import logging
from dataclasses import dataclass, replace
from typing import Annotated, Any, Literal

import msgspec
from hypnos.config import ModelConfig
from hypnos.engine import EngineContext, Entity, EntityInput, MemoryEstimate, missing_library
from hypnos.kit.batching import BATCHING_TABLE, BatchingOptions, BatchLimits
from hypnos.kit.device_oom import onnxruntime_out_of_memory, torch_out_of_memory
from hypnos.kit.entities import EntityEngine
from hypnos.kit.staged import ModelNotLoaded
from hypnos.kit.thread_sessions import SessionKey, ThreadSessions, session_limit, sessions_bytes
from hypnos.types import LayerPlacementPlan

from hypnos_gliner.runner import GlinerRunner, Pass, WordSpan
from hypnos_gliner.spans import Candidate, Window, label_families, plan_windows, resolve, unique_labels
from hypnos_gliner.weights import ModelFiles, find_files, weight_bytes, workspace_bytes

logger = logging.getLogger(__name__)


class GlinerOptions(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The `[models.gliner]` table."""

    runtime: Literal["auto", "torch", "onnx"] = "auto"  # auto: ONNX Runtime where the folder has model.onnx
    device: Literal["auto", "cpu", "cuda"] = "auto"
    threads: int = 0  # 0: the library's default
    flat: bool = True  # the default of a request's `flat`
    labels_per_pass: int = 8  # more labels run in families of this size
    window_words: int = 0  # 0: the model's max_len
    window_overlap_words: int = 64  # raised to twice the model's max_width when smaller
    workspace_bytes: int | None = None  # None: from the model's config and [models.batching] max_batch_size
    # deprecated: [models.batching] max_batch_size (read when that key is not set, with a warning at load)
    batch_size: Annotated[int, msgspec.Meta(ge=1, le=65536)] | None = None


@dataclass
class _TextPlan:
    """One text's words (with offsets) and the windows it runs in."""

    text: str
    words: list[tuple[str, int, int]]
    windows: list[Window]


@dataclass
class _JobPlan:
    """Where each pass of a job came from (text, family, window), and each text's plan."""

    texts: list[_TextPlan]
    families: list[list[str]]
    where: list[tuple[int, int, Window]]


class GlinerEngine(EntityEngine):
    """Tier 3 nothing; tier 2 the weights in RAM (torch state dict or the ONNX file's bytes); tier 1 built.

    Every text x window x label family is one pass; the passes of one request and of concurrent ones run together
    in batches of [models.batching] max_batch_size (the kit's batcher), each family's spans resolved per text."""

    options_table = "gliner"
    options_type = GlinerOptions
    batching = BatchLimits(max_batch_size=8, max_wait_ms=2.0)

    def __init__(self, model: ModelConfig, context: EngineContext) -> None:
        super().__init__(model, context)
        self.options: GlinerOptions
        batching = context.options_for(model, BATCHING_TABLE, BatchingOptions)
        if self.options.batch_size is not None and (batching is None or batching.max_batch_size is None):
            logger.warning(
                "%s: [models.gliner] batch_size is deprecated; set [models.batching] max_batch_size", model.id
            )
            self.batcher.limits = replace(self.batcher.limits, max_batch_size=self.options.batch_size)
        folder = self.model_path("weights_path", "its GLiNER folder")
        self.files: ModelFiles = find_files(folder, self.options.runtime, model.id)
        if importlib.util.find_spec("gliner") is None:
            raise missing_library("gliner", "hypnos-gliner[cpu]")
        if self.files.runtime == "onnx" and importlib.util.find_spec("onnxruntime") is None:
            raise missing_library("onnxruntime", "hypnos-gliner[cpu]")
        # ONNX Runtime copies the bytes into its session: the RAM copy is dropped once built, read again on demote
        self.build_consumes_warm_copy = self.files.runtime == "onnx"
        self._warm: Any = None
        self._runner: GlinerRunner | None = None

    # ---- lifecycle hooks (on the worker thread) -----------------------------------------------------------------

    def device_oom(self, error: BaseException) -> bool:
        """torch.OutOfMemoryError, or ONNX Runtime's failed allocation (the ONNX runtime)."""
        return torch_out_of_memory(error) or onnxruntime_out_of_memory(error)

    def estimate(self) -> MemoryEstimate:
        """The weights' bytes from the files' headers (ONNX: times the sessions kept per thread count, plus the
        bytes they are made from), plus the configured inference workspace."""
        weights = weight_bytes(self.files)
        if self.files.runtime == "onnx":
            weights = sessions_bytes(weights, weights, self._session_limit(weights))
        workspace = self.options.workspace_bytes
        if workspace is None:
            workspace = workspace_bytes(self.files, self.batcher.limits.max_batch_size)
        return MemoryEstimate(weight_bytes=weights, non_layer_bytes=weights, workspace_bytes=workspace)

    def read_weights(self) -> None:
        """Tier 3 -> 2: the torch state dict (CPU tensors) or the ONNX export's bytes."""
        if self.files.runtime == "onnx":
            self._warm = self.files.weights.read_bytes()
        else:
            from hypnos_gliner.runner import read_state_dict

            self._warm = read_state_dict(self.files)

    def build(self, plan: LayerPlacementPlan) -> None:
        """Tier 2 -> 1: the model on the device, from the RAM copy."""
        device = self._pick_device()
        if self.files.runtime == "onnx":
            limit = self._session_limit(len(self._warm), device)
            sessions = ThreadSessions(self._onnx_runner, threads=self.options.threads, spin=False, limit=limit)
            self._runner = sessions.session(self.core_threads, self.core_alone)
            self.thread_sessions = sessions
            self.build_consumes_warm_copy = limit == 1
            if limit == 1:
                self._warm = None
        else:
            self._runner = GlinerRunner.from_torch(self.files, self._warm, device, self.options.threads)
        self.device = self._runner.device
        logger.info("%s: GLiNER built (%s on %s)", self.model.id, self.files.runtime, self.device)

    def _onnx_runner(self, key: SessionKey) -> GlinerRunner:
        """A runner on an ONNX Runtime session with the key's intra-op threads, from the export's bytes in RAM (its
        threads never spin: the configured session's measured choice, so the key's spin is always off)."""
        assert self._warm is not None
        return GlinerRunner.from_onnx(self.files, self._warm, self._pick_device(), key.threads, key.spin)

    def _session_limit(self, size: int, device: str | None = None) -> int:
        return session_limit(self.model, size, device or self.options.device, self.context.accelerator)

    def release_device(self) -> None:
        """Tier 1 -> 2: drop the built model (the state dict stays; ONNX keeps its bytes with several sessions, else
        reads them again)."""
        cuda = self.device == "cuda"
        self._runner = None
        self.thread_sessions = None
        gc.collect()
        if cuda and self.files.runtime == "torch":
            import torch

            torch.cuda.empty_cache()

    def release_warm(self) -> None:
        """Tier 2 -> 3: drop the RAM copy."""
        self._warm = None
        gc.collect()

    def _pick_device(self) -> str:
        wanted = self.options.device
        if wanted != "auto":
            return wanted
        if "cuda" not in self.context.accelerator.lower():
            return "cpu"
        if self.files.runtime == "onnx":
            import onnxruntime as ort

            return "cuda" if "CUDAExecutionProvider" in ort.get_available_providers() else "cpu"
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"

    # ---- entities -----------------------------------------------------------------------------------------------

    def plan(self, job: EntityInput) -> tuple[list[Pass], _JobPlan]:
        """Every text x window x label family as one pass (worker thread)."""
        families = label_families(unique_labels(job.labels), self.options.labels_per_pass)
        plans = self._plan_texts(job.texts, families)
        passes: list[Pass] = []
        where: list[tuple[int, int, Window]] = []
        for index, plan in enumerate(plans):
            for window in plan.windows:
                words = [word for word, _, _ in plan.words[window.first : window.stop]]
                for number, family in enumerate(families):
                    passes.append(Pass(words, family, job.threshold))
                    where.append((index, number, window))
        return passes, _JobPlan(plans, families, where)

    def run_passes(self, passes: list[Pass]) -> list[list[WordSpan]]:
        """A batch of passes in one model call (worker thread)."""
        return self._runner_or_raise().run(passes)

    def assemble(self, job: EntityInput, plan: _JobPlan, results: list[list[WordSpan]]) -> list[list[Entity]]:
        """Each family's spans resolved as its own pass would be, then the families' answers resolved together."""
        # pools[text][family]: the family's spans over all windows, each span from the window that owns its start
        pools: list[list[list[Candidate]]] = [[[] for _ in plan.families] for _ in plan.texts]
        for (index, number, window), spans in zip(plan.where, results, strict=True):
            words = plan.texts[index].words
            for span in spans:
                first = window.first + span.first
                if window.owns(first):
                    end = words[window.first + span.last][2]
                    pools[index][number].append(Candidate(words[first][1], end, span.label, span.score))
        flat = self.options.flat if job.flat is None else job.flat
        entities = []
        for text, by_family in zip(plan.texts, pools, strict=True):
            merged = resolve([c for pool in by_family for c in resolve(pool, flat)], flat)
            entities.append(
                [
                    Entity(text=text.text[c.start : c.end], label=c.label, start=c.start, end=c.end, score=c.score)
                    for c in merged
                ]
            )
        return entities

    def _runner_or_raise(self) -> GlinerRunner:
        sessions = self.thread_sessions
        if sessions is not None and self._runner is not None:  # ONNX: the session for the core share now
            self._runner = sessions.session(self.core_threads, self.core_alone)
        runner = self._runner
        if runner is None:
            raise ModelNotLoaded(self.model.id)
        return runner

    def _plan_texts(self, texts: list[str], families: list[list[str]]) -> list[_TextPlan]:
        runner = self._runner_or_raise()
        max_words = min(self.options.window_words or runner.max_words, runner.max_words)
        overlap = max(self.options.window_overlap_words, 2 * runner.max_width)
        budget = runner.text_token_budget(families)
        plans = []
        for text in texts:
            words = runner.words(text)
            # without a token limit only the word count shapes the windows: no need to tokenize
            counts = [1] * len(words) if budget is None else runner.subword_counts([word for word, _, _ in words])
            plans.append(_TextPlan(text, words, plan_windows(counts, max_words, budget, overlap)))
        return plans
