"""The ggml_llama engine: GGUF chat models on llama.cpp with tiers, slots, continuous batching and prefix reuse."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator, Callable
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec
from hypnos.chat import AudioPart, ChatInput, ImagePart
from hypnos.config import ModelConfig
from hypnos.engine import (
    CancelToken,
    ChatAccepted,
    ChatEvent,
    ChatFinished,
    ContentDelta,
    EngineContext,
    EngineUnavailable,
    MemoryEstimate,
    TranscriptionInput,
    TranscriptionResult,
)
from hypnos.errors import HypnosError
from hypnos.kit.device_oom import llama_cpp_out_of_memory
from hypnos.kit.staged import StagedEngine
from hypnos.kit.warm_pages import WarmPages
from hypnos.types import LayerPlacementPlan, Modality, TierSwitchPhases

from hypnos_llama.batch_loop import BatchLoop
from hypnos_llama.call_gate import call_gate
from hypnos_llama.chat_plan import ChatPlan, ChoiceReader, plan_chat, thinking_guard
from hypnos_llama.echo_guard import echo_guard
from hypnos_llama.estimate import estimate_gguf
from hypnos_llama.gguf_meta import GgufFile, read_gguf
from hypnos_llama.grammar import check_grammar, request_grammar
from hypnos_llama.handoff import Handoff
from hypnos_llama.moe_offload import expert_layers, expert_pattern
from hypnos_llama.multimodal import Projector, load_projector, media_kinds, media_prompt, projector_modalities_of
from hypnos_llama.options import LlamaOptions
from hypnos_llama.prompt_size import estimate_num_ctx, short_prompt
from hypnos_llama.prompt_states import PromptStates
from hypnos_llama.runtime import context_shape
from hypnos_llama.sampling import GGUF_SAMPLING_KEYS, SamplingDefaults, SamplingParams
from hypnos_llama.slots import ChatJob
from hypnos_llama.template import CHATML_FALLBACK, ChatTemplate
from hypnos_llama.thread_governor import engine_governor
from hypnos_llama.tokenize_bound import check_chars, tokenize_chars_cap, tokenize_stoppable
from hypnos_llama.tool_grammar import call_opener
from hypnos_llama.transcription import transcription_chat

if TYPE_CHECKING:
    from hypnos_llama.runtime import LlamaModel

logger = logging.getLogger(__name__)


class LlamaEngine(StagedEngine):
    """Serves one GGUF chat model: tier 1 = model and context built, tier 2 = file pages warm, tier 3 = nothing."""

    options_table = "llama"
    options_type = LlamaOptions

    def __init__(self, model: ModelConfig, context: EngineContext) -> None:
        super().__init__(model, context)
        self.options: LlamaOptions
        self.path: Path = self.model_path()
        self.projector_path = model.resolve(context.models_dir, model.aux_path)
        # what the projector file adds (vision, speech_to_text), read once from its header before the first request
        self._projector_modalities = projector_modalities_of(self.projector_path)
        self._projector: Projector | None = None
        self._projector_ms: float | None = None
        self._parked = False  # whether the model parked conversations when it left tier 1
        self.cpu_expert_pattern: str | None = None  # MoE offload: the expert tensors kept on the CPU at tier 1
        self._built_ms: tuple[float, float] = (0.0, 0.0)  # the last build's (weights, context) milliseconds
        self._gguf: GgufFile | None = None
        self._sampling_defaults: SamplingDefaults | None = None
        self._warm = WarmPages(self.path, lock=self.options.lock_warm_pages)
        # The projector's bytes move with the model: warm at tier 2, released at tier 3.
        self._projector_warm = (
            WarmPages(self.projector_path, lock=self.options.lock_warm_pages) if self.projector_path else None
        )
        self.load_mode = "mmap" if self.options.use_mmap else "read"  # how llama.cpp brings the weights in
        self._runtime_model: LlamaModel | None = None
        self._batch: BatchLoop | None = None
        self._states: PromptStates | None = None
        self._template: ChatTemplate | None = None
        # each decode's threads: the core share (n_threads caps it), less what contention costs
        self.governor = engine_governor(self.options, model.id, context.threads_changed)

    def served_modalities(self) -> list[Modality]:
        """The config's modalities plus the projector's (an audio projector makes the model transcribe too)."""
        served = self.model.all_modalities
        return [*served, *(m for m in self._projector_modalities if m not in served)]

    def sampling_defaults(self) -> SamplingDefaults:
        """What the model samples with where a request leaves a field unset: its config, its GGUF, the engine's."""
        if self._sampling_defaults is None:
            configured = {name: getattr(self.options, name) for name in GGUF_SAMPLING_KEYS}
            self._sampling_defaults = SamplingDefaults.of_model(configured, self.gguf().metadata)
        return self._sampling_defaults

    # ---- memory --------------------------------------------------------------------------------------------------

    def gguf(self) -> GgufFile:
        """The model file's header (read once)."""
        if self._gguf is None:
            if not self.path.is_file():
                raise EngineUnavailable(
                    f"the weights of `{self.model.id}` are missing: {self.path}; put the file there (`hypnos pull "
                    "<catalog id>` downloads a catalog model, `hypnos starter` the starter ones) or fix `weights_path`"
                )
            self._gguf = read_gguf(self.path)
        return self._gguf

    async def follow_cores(self, cores: list[int], alone: bool = False) -> int | None:
        """The scheduler's share: the batch loop's next decodes use as many threads (at most n_threads); `alone`
        changes nothing (OpenMP's spin policy is fixed when the host starts). A share smaller than the threads of the
        step in flight aborts that step (it is fed again with fewer) and returns once it ended: the host pins its
        threads to the share after this returns, and a step's threads crowded onto fewer cores spin for seconds."""
        self.core_threads = max(1, len(cores))
        self.core_alone = alone
        if self.governor is None:
            return None
        threads = self.governor.share(self.core_threads)
        if self._batch is not None:
            await self._batch.abort.narrowed(threads)
        return threads

    def device_oom(self, error: BaseException) -> bool:
        """llama-cpp-python's failed allocation (`llama_decode returned -2`); the batch loop maps its own status."""
        return llama_cpp_out_of_memory(error)

    def estimate(self) -> MemoryEstimate:
        """Per-layer weights, experts, KV bytes per token and workspace from the GGUF header."""
        projector = None
        aux = self.model.resolve(self.context.models_dir, self.model.aux_path)
        if aux is not None and aux.is_file():
            projector = read_gguf(aux)
        return estimate_gguf(self.gguf(), self.options, slots=self.model.slots, projector=projector)

    # ---- tiers ---------------------------------------------------------------------------------------------------

    def read_weights(self) -> None:
        """Tier 3 -> 2: the header read, the weights' and the projector's pages held in RAM."""
        self.gguf()
        self._warm_all()

    def build(self, plan: LayerPlacementPlan) -> None:
        """Tier 2 -> 1: the model, the projector and the context built, the batch loop started."""
        self._built_ms = self._build(plan)
        on_device = plan.gpu_layers > 0 and self.context.accelerator == "NvidiaCuda"
        self.device = "cuda" if on_device else "cpu"

    def build_phases(self, phases: TierSwitchPhases) -> TierSwitchPhases:
        """Pages and model load as weights_ms, the context as context_ms, and the projector (parked conversations come
        back on their next turn, through the prompt cache: cached_tokens)."""
        weights_ms, context_ms = self._built_ms
        return msgspec.structs.replace(
            phases,
            weights_ms=round((phases.weights_ms or 0.0) + weights_ms, 3),
            context_ms=round(context_ms, 3),
            projector_ms=self._projector_ms,
        )

    def release_device(self) -> None:
        """Tier 1 -> 2: stop the batch loop, save (or park) the idle slots' KV, free the context, projector and
        model."""
        batch, model, projector = self._batch, self._runtime_model, self._projector
        self._batch = self._runtime_model = self._projector = self._states = None
        if batch is not None:
            self._teardown(batch, model, projector)

    def release_warm(self) -> None:
        """Tier 2 -> 3: let the weights' and the projector's pages go."""
        self._warm.release()
        if self._projector_warm is not None:
            self._projector_warm.release()

    def _warm_all(self) -> float:
        """Hold the weights' and the projector's pages; the milliseconds it took."""
        warm_ms = self._warm.hold()
        if self._projector_warm is not None and self.projector_path is not None and self.projector_path.is_file():
            warm_ms += self._projector_warm.hold()
        return warm_ms

    @property
    def projector_pages_held(self) -> bool:
        """True while the projector file's pages are held in RAM (tiers 1 and 2)."""
        return self._projector_warm is not None and self._projector_warm.held

    def _build(self, plan: LayerPlacementPlan) -> tuple[float, float]:
        """Load the model and build the context (runs on a worker thread); returns (weights_ms, context_ms)."""
        from hypnos_llama.runtime import LlamaContext, LlamaModel

        started = time.perf_counter()
        estimate_layers = len(self.estimate().layer_bytes)
        gpu_layers = plan.gpu_layers
        n_gpu_layers = -1 if estimate_layers and gpu_layers >= estimate_layers else gpu_layers
        experts = expert_pattern(expert_layers(int(self.gguf().arch_value("block_count") or 0), plan.cpu_expert_layers))
        model = LlamaModel(self.path, self.options, n_gpu_layers, cpu_experts=experts)
        self.cpu_expert_pattern = experts
        weights_ms = (time.perf_counter() - started) * 1000
        projector = None
        try:
            projector, self._projector_ms = load_projector(
                self.projector_path, model, self.options, self.model.id, use_gpu=gpu_layers > 0
            )
            source = self.options.chat_template or self.gguf().chat_template or CHATML_FALLBACK
            bos, eos = model.bos_eos()
            template = ChatTemplate(source, bos_token=bos, eos_token=eos)
            per_slot = self.model.context_len or self.estimate().default_context_len
            n_ctx = plan.allocated_context_len or per_slot * max(1, self.model.slots)
            built = time.perf_counter()
            context = LlamaContext(model, self.options, self._shape(n_ctx))
            context_ms = (time.perf_counter() - built) * 1000
        except BaseException:
            if projector is not None:
                projector.close()
            model.close()
            raise

        def rebuild(required: int) -> LlamaContext:
            old = batch.context
            cells = required if self.options.kv_unified else required * max(1, self.model.slots)
            shape = self._shape(max(cells, old.shape.n_ctx))
            old.close()
            grown = LlamaContext(model, self.options, shape)
            if self.context.context_resized is not None:  # the scheduler books the larger KV cache
                self.context.context_resized(self.model.id, grown.shape.n_ctx)
            return grown

        idle = self.options.kv_idle_timeout_secs or self.context.kv_idle_timeout_secs
        batch = BatchLoop(
            model,
            context,
            rebuild,
            prefill_chunk=self.options.prefill_chunk,
            name=self.model.id,
            idle_timeout_s=float(idle) if idle else None,
            last_token_alone=self.options.deterministic_prefill,
            prefill_share=self.options.prefill_share,
            prefill_step_secs=self.options.prefill_step_secs,
            governor=self.governor,
            batch_threads=self.options.n_threads_batch,
        )
        store, cache = self.context.prompt_cache, self.model.prompt_cache
        if store is not None and (cache.enabled or self.context.kv_park is not None):  # KV parking goes through it
            store.unpark(self.model.id)  # back in tier 1: what it parked is found by prefix, as any saved state
            parked, self._parked = self._parked, False
            states = PromptStates(store, self.model.id, cache, self.path, self.options, parked=parked)
            batch.states = self._states = states
        batch.start()
        self._runtime_model, self._template, self._batch = model, template, batch
        self._projector = projector
        return weights_ms, context_ms

    def _shape(self, n_ctx: int):
        """The context for n_ctx cells in all (a sequence never exceeds the trained length; the pool may)."""
        trained = int(self.gguf().arch_value("context_length") or n_ctx)
        cells = min(int(n_ctx), trained * max(1, self.model.slots))
        return context_shape(cells, self.model.slots, self.options.n_batch, self.options.n_ubatch)

    def _teardown(self, batch: BatchLoop, model, projector=None) -> None:
        batch.stop()
        if batch.states is not None:  # the prompt cache keeps the idle slots (RAM, then disk), found again by prefix
            try:  # KV parking: all of them, held in RAM under its cap until the model is back
                park = self.context.kv_park is not None and self.context.kv_park.enabled
            except Exception as error:  # the server is gone: an ordinary save
                logger.warning("could not ask whether KV parking is on: %s", error)
                park = False
            self._parked = batch.states.leave(batch.context, batch.slots, park=park)
            batch.states.close()
        batch.context.close()
        if projector is not None:  # before the model it was built on
            projector.close()
        if model is not None:
            model.close()

    # ---- chat ----------------------------------------------------------------------------------------------------

    def _render_prompt(self, request: ChatInput, plan: ChatPlan) -> str:
        assert self._template is not None
        text = self._template.render(plan.render_request(request), extra=plan.template_variables)
        return plan.finish_prompt(text)

    def _bare_prompt(self, request: ChatInput, constrained: bool) -> Callable[[], list[int] | None]:
        """Renders and tokenizes the request without its tool definitions, when the echo guard asks (on the batch
        loop's thread); None where that fails (the guard then samples again as before)."""
        bare = msgspec.structs.replace(request, tools=[])

        def render() -> list[int] | None:
            try:
                source = self._template.source if self._template else None
                return self._tokenize_prompt(bare, plan_chat(source, bare, self.model.id, constrained=constrained))[0]
            except Exception:  # a prompt that no longer fits, a template that wants its tools: sampled again instead
                logger.debug("the prompt without its tools could not be rendered", exc_info=True)
                return None

        return render

    def _tokenize_prompt(
        self, request: ChatInput, plan: ChatPlan, cancel: CancelToken | None = None
    ) -> tuple[list[int], str]:
        model, batch = self._runtime_model, self._batch
        assert model is not None and batch is not None
        text = self._render_prompt(request, plan)
        context = int(model.n_ctx_train or batch.context.shape.n_ctx)
        check_chars(text, tokenize_chars_cap(self.options.max_tokenize_chars, context), self.model.id)
        tokens = tokenize_stoppable(
            lambda piece, first: model.tokenize(piece, add_special=first, parse_special=True),
            text,
            model.vocab_type,
            cancel,
        )
        return tokens, text

    async def chat(self, request: ChatInput, cancel: CancelToken) -> AsyncGenerator[ChatEvent, None]:
        """Stream the answer: ChatAccepted once a slot takes it (before its prefill), content deltas as tokens decode,
        then ChatFinished with usage and timings; the `n` choices decode together in the model's slots, each event
        carrying its choice's index."""
        batch, model = self._batch, self._runtime_model
        if batch is None or model is None:
            raise EngineUnavailable(f"the model `{self.model.id}` is not loaded")
        arrived = time.perf_counter()  # ttft and queue_ms count the prompt's rendering and tokenizing too
        wanted = request.response_format
        constrained = wanted is not None and wanted.type != "text"
        plan = plan_chat(
            self._template.source if self._template else None, request, self.model.id, constrained=constrained
        )
        format_name = plan.tool_format.name if plan.tool_format is not None else None
        constraint = request_grammar(format_name, request, forced=bool(plan.forced_prefix))
        grammar = constraint.grammar if constraint is not None else None
        if grammar is not None:
            check_grammar(model, grammar)
        media = None
        if media_kinds(request):
            media = await media_prompt(
                self._projector, lambda: self._render_prompt(request, plan), request, self.context.limits, self.model.id
            )
            prompt, prompt_text = media.tokens, media.text
        elif short_prompt(request):  # rendered and tokenized in less time than a hop to a thread and back takes
            prompt, prompt_text = self._tokenize_prompt(request, plan)
        else:
            prompt, prompt_text = await asyncio.to_thread(self._tokenize_prompt, request, plan, cancel)
        max_tokens = max(1, request.max_tokens)
        limit = int(model.n_ctx_train or batch.context.shape.n_ctx)
        if len(prompt) >= limit:
            raise HypnosError(
                400,
                "invalid_request_error",
                # Anthropic's words and OpenAI's, which clients (LangChain, litellm) read as a context overflow
                f"prompt is too long: {len(prompt)} tokens > {limit - 1} maximum. This model's maximum context "
                f"length is {limit} tokens, the answer's included (`{self.model.id}`)",
                code="context_length_exceeded",
            )
        images, audios = request.count(ImagePart), request.count(AudioPart)
        required = request.context_len or estimate_num_ctx(len(prompt), max_tokens, images, audios)
        required = min(max(required, len(prompt) + 1), limit)
        loop = asyncio.get_running_loop()
        events: Handoff[ChatEvent | BaseException] = Handoff(loop)
        emit = events.emit

        # a media prompt's chunks are evaluated into one slot: its other choices would need them again
        choices = 1 if media is not None else max(1, request.n)
        top = (request.top_logprobs or 0) if request.logprobs else None
        floors = self.options.call_confidence, self.options.call_name_confidence
        gate = call_gate(constraint, call_opener(format_name), *floors, thinking=plan.thinking_on)
        bare_prompt = self._bare_prompt(request, constrained) if plan.echoes and request.tools else None
        jobs = []
        for index in range(choices):
            job = ChatJob(
                prompt=prompt,
                max_tokens=max_tokens,
                required_ctx=required,
                sampling=SamplingParams.from_request(
                    request, grammar, index, constraint.triggers if constraint else (), gate, self.sampling_defaults()
                ),
                emit=emit,
                cancel=cancel,
                submitted=arrived,
                media=media,
                index=index,
                stop=list(request.stop),
                top_logprobs=top,
                scope=request.cache_scope,
                priority=request.priority,
            )
            job.thinking_guard = thinking_guard(
                plan, prompt_text, lambda text: model.tokenize(text, add_special=False, parse_special=True)
            )
            plain = media is None and not constrained and not plan.thinking_on and not plan.forced_prefix
            job.echo_guard = echo_guard(call_opener(format_name), plan.echoes, enabled=plain, bare_prompt=bare_prompt)
            jobs.append(job)
        readers = [ChoiceReader(plan.output_parser(prompt_text), index) for index in range(choices)]
        if self._states is not None:  # a saved state sharing more of the prompt than any slot
            await self._states.find(batch.context, batch.slots, jobs)
        for job in jobs:
            batch.submit(job)
        try:
            running, accepted = choices, False
            while running:
                event = await events.get()
                if isinstance(event, BaseException):
                    raise event
                if isinstance(event, ChatAccepted):  # the first choice in a slot: its prefill begins
                    if not accepted:
                        accepted = True
                        yield event
                    continue
                for parsed in readers[event.index].read(event):
                    yield parsed
                running -= isinstance(event, ChatFinished)
        finally:
            for job in jobs:
                job.abandoned = True

    # ---- transcription (a projector that takes audio) -------------------------------------------------------------

    async def transcribe(self, audio: TranscriptionInput, cancel: CancelToken) -> TranscriptionResult:
        """Transcribe a clip with the family's instruction (or the request's prompt), greedy, without thinking."""
        if Modality.SPEECH_TO_TEXT not in self._projector_modalities:
            raise self._unsupported(Modality.SPEECH_TO_TEXT)
        chat = transcription_chat(self.gguf().arch, audio, max_tokens=self.context.limits.max_tokens_cap)
        pieces: list[str] = []
        finished: ChatFinished | None = None
        async for event in self.chat(chat, cancel):
            if isinstance(event, ContentDelta):
                pieces.append(event.text)
            elif isinstance(event, ChatFinished):
                finished = event
        timing = finished.timing if finished is not None else None
        result = TranscriptionResult(text="".join(pieces).strip())
        if timing is not None:
            result.timing = timing
        return result
