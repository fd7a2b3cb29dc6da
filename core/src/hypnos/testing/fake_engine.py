"""A deterministic fake engine serving every modality, tunable from the model's `[models.fake]` table."""

from __future__ import annotations

import asyncio
import hashlib
import io
import math
import os
import signal
import struct
import time
from collections.abc import AsyncGenerator
from typing import Any

import msgspec

from hypnos.engine import (
    AudioChunk,
    CancelToken,
    ChatAccepted,
    ChatEvent,
    ChatFinished,
    ChatInput,
    ContentDelta,
    DeviceOutOfMemory,
    DocumentInput,
    EmbeddingResult,
    Engine,
    EngineCapabilities,
    EngineContext,
    EngineKind,
    Entity,
    EntityInput,
    EntityResult,
    GeneratedImage,
    ImageInput,
    ImageResult,
    MemoryEstimate,
    ParkedSlot,
    ReasoningDelta,
    RerankInput,
    RerankResult,
    SpeechInput,
    ToolCallEvent,
    TranscriptionInput,
    TranscriptionResult,
)
from hypnos.errors import HypnosError, server_error
from hypnos.hosting.host import HOST_ENV
from hypnos.kit.audio import audio_file
from hypnos.testing.fake_outputs import Pace, png, prompt_words, tool_call
from hypnos.types import SPEC_KIND_BY_MODALITY, EngineTiming, LayerPlacementPlan, MemoryTier, Modality, TierSwitchPhases


class FakeOptions(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The `[models.fake]` table: sizes, delays and failures to simulate."""

    layers: int = 8
    layer_bytes: int = 64 * 1024 * 1024
    non_layer_bytes: int = 32 * 1024 * 1024
    kv_bytes_per_token: int = 16 * 1024
    workspace_bytes: int = 16 * 1024 * 1024
    expert_bytes_per_layer: int = 0
    max_context_len: int = 32768
    load_ms: float = 0.0
    token_ms: float = 0.0
    first_token_ms: float = 0.0  # a chat's prefill before its first token, ended early by a cancellation
    tokens: int = 8
    # work steps of a non-chat request (per input text for embeddings; transcription, images), each token_ms long;
    # the CancelToken is checked before every step
    steps: int = 1
    fail_load: bool = False
    oom_once: bool = False
    # the first N chats, embeddings or images of the engine raise FakeLibraryOutOfMemory, standing for an engine
    # library's own device OOM error, which the engine's device_oom recognizes (the host or the lease maps it to 507)
    library_oom: int = 0
    fail_every: int = 0  # every Nth chat fails after its first token (0: never): an engine failing mid-request
    embedding_dim: int = 16
    # KV parking (section 14): bytes of one conversation parked when the model leaves tier 1 after serving a chat
    # (0: nothing; one token per kv_bytes_per_token), taken back when it returns with the same context
    park_bytes: int = 0
    # a chat at tier 1 grows the context to this many cells and says so (context_resized), as llama.cpp's engine does
    grow_context_to: int = 0
    voices: list[str] | None = None  # a speech model's voices, reported as a capability (GET /v1/models lists them)
    # faults of an engine host process (isolation "process"; in the server's own process they raise instead):
    crash_after_tokens: int = 0  # SIGKILL itself after this many chat tokens (0: never), as a native crash does
    crash_after_chunks: int = 0  # the same after this many speech chunks (in the server's process: raises)
    exit_on_load: bool = False  # exit (status 3) while loading
    hang_after_tokens: int = 0  # block the host in a call that never checks cancellation after this many tokens
    # a chat allocates (and touches) this many bytes after its first token and holds them to its end: a request
    # whose input makes the library allocate more than its host may take (in a host only; raises elsewhere)
    grab_bytes: int = 0
    # bytes the engine really holds at tier 1 (allocated and touched by the load, freed below tier 1), whatever its
    # estimate says: an estimate that is off, for measured placement
    hold_bytes: int = 0


class FakeLibraryOutOfMemory(RuntimeError):
    """An engine library's own "out of device memory" error (not a HypnosError): what torch, ONNX Runtime,
    CTranslate2 or llama.cpp raise, for the fake engine."""


class FakeImageOptions(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The `[models.image]` table: whether the model edits images (reported as a capability)."""

    edit: bool = False


class FakeEngine(Engine):
    """Answers every modality deterministically from its input; load time, size and failures come from config."""

    def __init__(self, model, context: EngineContext) -> None:  # type: ignore[no-untyped-def]
        super().__init__(model, context)
        self.options = context.options_for(model, "fake", FakeOptions)
        self.image_options = context.options_for(model, "image", FakeImageOptions)
        self.tier = MemoryTier.TIER3
        self.loads = 0
        self.cancelled_requests = 0  # requests that stopped at a cancellation check
        self.works_started = 0  # non-chat requests whose work began (a test waits on it before hanging up)
        self._oom_pending = self.options.oom_once
        self._library_ooms = self.options.library_oom
        self._chats = 0
        self._context_len = 0  # the tier-1 context a parked conversation must come back to
        self._conversation = False  # a chat ran since the last load: there is a conversation to park
        self._held = b""  # hold_bytes while at tier 1

    def capabilities(self) -> EngineCapabilities:
        """Edits images when `[models.image] edit = true`; speaks the configured voices."""
        return EngineCapabilities(image_edit=self.image_options.edit, voices=self.options.voices)

    def estimate(self) -> MemoryEstimate:
        """Sizes as configured."""
        o = self.options
        return MemoryEstimate(
            weight_bytes=o.layers * o.layer_bytes + o.non_layer_bytes + o.layers * o.expert_bytes_per_layer,
            layer_bytes=[o.layer_bytes + o.expert_bytes_per_layer] * o.layers,
            non_layer_bytes=o.non_layer_bytes,
            kv_bytes_per_token=o.kv_bytes_per_token,
            workspace_bytes=o.workspace_bytes,
            expert_bytes_per_layer=[o.expert_bytes_per_layer] * o.layers if o.expert_bytes_per_layer else [],
            max_context_len=o.max_context_len,
            default_context_len=min(4096, o.max_context_len),
            supports_partial_offload=True,
        )

    async def load(self, plan: LayerPlacementPlan) -> TierSwitchPhases:
        """Sleep load_ms (scaled down from tier 2), or fail when fail_load is set."""
        started = time.perf_counter()
        delay = self.options.load_ms / 1000.0
        if self.tier == MemoryTier.TIER2:
            delay /= 4
        if delay:
            await asyncio.sleep(delay)
        if self.options.fail_load:
            raise server_error(f"fake load failure for {self.model.id}")
        if self.options.exit_on_load:
            self._fault("exit")
        self.loads += 1
        self.tier = plan.primary_tier
        restored = None
        if plan.primary_tier == MemoryTier.TIER1:
            self._context_len = plan.allocated_context_len
            restored = self._restore()
            self._held = b"\x01" * self.options.hold_bytes  # filled: every page resident
        total = (time.perf_counter() - started) * 1000
        return TierSwitchPhases(
            load_mode="read", weights_ms=total, context_ms=0.0, total_ms=total, kv_restored_tokens=restored
        )

    async def demote(self, tier: MemoryTier) -> None:
        """Forget the placement (parking the conversation when leaving tier 1 with park_bytes set)."""
        if self.tier == MemoryTier.TIER1:
            self._park()
        self._held = b""
        self.tier = tier

    def _park(self) -> None:
        store, size = self.context.kv_park, self.options.park_bytes
        if store is None or not store.enabled or not size or not self._conversation:
            return
        tokens = list(range(max(1, size // max(1, self.options.kv_bytes_per_token))))
        slot = ParkedSlot(seq_id=0, tokens=tokens, state=bytes(size))
        store.park(self.model.id, self._context_len, [slot])
        self._conversation = False

    def _restore(self) -> int | None:
        store = self.context.kv_park
        slots = store.take(self.model.id, self._context_len) if store is not None else []
        self._conversation = bool(slots)
        return sum(len(slot.tokens) for slot in slots) if slots else None

    def _grow(self) -> None:
        cells = self.options.grow_context_to
        if self.tier == MemoryTier.TIER1 and cells > self._context_len:
            self._context_len = cells
            if self.context.context_resized is not None:
                self.context.context_resized(self.model.id, cells)

    def _pace(self) -> Pace:
        return Pace(self.options.token_ms)

    async def _prefill(self, cancel: CancelToken) -> None:
        steps = max(1, math.ceil(self.options.first_token_ms / 10))  # a cancellation check every 10 ms
        for _ in range(steps):
            if cancel.cancelled:
                return
            await asyncio.sleep(self.options.first_token_ms / 1000.0 / steps)

    async def _work(self, cancel: CancelToken, inputs: int = 1) -> None:
        """`steps` steps of work per input, stopping at the first step after a cancellation."""
        self.works_started += 1
        pace = self._pace()
        for _ in range(max(1, self.options.steps * inputs)):
            if cancel.cancelled:
                self.cancelled_requests += 1
                raise HypnosError(499, "cancelled", "the request was cancelled")
            await pace.tick()

    def _fault(self, what: str) -> None:
        """Die or hang as a native library would, when running in an engine host; raise anywhere else."""
        if not os.environ.get(HOST_ENV):
            raise RuntimeError(f"fake engine fault `{what}` outside an engine host")
        if what == "crash":
            os.kill(os.getpid(), signal.SIGKILL)
        elif what == "exit":
            os._exit(3)
        time.sleep(24 * 3600)  # "hang": the whole host stops, as in a stuck native call holding the GIL

    @staticmethod
    def _grab(size: int) -> bytearray:
        """`size` bytes allocated and touched (MemoryError past the host's RLIMIT_DATA), in an engine host only."""
        if not os.environ.get(HOST_ENV):
            raise RuntimeError("fake engine grab_bytes outside an engine host")
        return bytearray(size)

    def device_oom(self, error: BaseException) -> bool:
        """FakeLibraryOutOfMemory is this engine's library's device OOM."""
        return isinstance(error, FakeLibraryOutOfMemory)

    def _maybe_oom(self) -> None:
        if self._library_ooms:
            self._library_ooms -= 1
            raise FakeLibraryOutOfMemory("CUDA out of memory. Tried to allocate 2.00 GiB")
        if self._oom_pending:
            self._oom_pending = False
            raise DeviceOutOfMemory("fake device out of memory")

    async def chat(self, request: ChatInput, cancel: CancelToken) -> AsyncGenerator[ChatEvent, None]:
        """ChatAccepted, then thoughts when thinking is on, a call of the chosen tool when tools are offered, else
        words, one per token, up to max_tokens or a word that is a `stop` string; ends "cancelled" when cancelled."""
        self._maybe_oom()
        prompt = "\n".join(message.text() for message in request.messages)
        prompt_tokens = max(1, len(prompt.split()))
        count = min(self.options.tokens, request.max_tokens)
        self._chats += 1
        self._conversation = True
        self._grow()
        failing = self.options.fail_every > 0 and self._chats % self.options.fail_every == 0
        started = time.perf_counter()
        pace = self._pace()
        produced = 0
        cancelled = False
        yield ChatAccepted(prompt_tokens=prompt_tokens)
        if self.options.first_token_ms:
            await self._prefill(cancel)
        if request.thinking:
            for index, word in enumerate(prompt_words("thought " + prompt, 4)):
                await pace.tick()
                produced += 1
                yield ReasoningDelta(("thinking: " if index == 0 else " ") + word)
        call = tool_call(request)
        if call is not None:
            yield ToolCallEvent(call)
            yield ChatFinished(finish_reason="tool_calls", prompt_tokens=prompt_tokens, completion_tokens=produced + 1)
            return
        options = self.options
        stopped_at: str | None = None
        grabbed: list[bytearray] = []  # held to the chat's end
        for index, word in enumerate(prompt_words(prompt + str(request.sampling.seed or 0), count)):
            if word in request.stop:  # a stop string that is a whole word ends the answer before it
                stopped_at = word
                break
            if options.crash_after_tokens and index == options.crash_after_tokens:
                self._fault("crash")
            if options.grab_bytes and index == 1:
                grabbed.append(self._grab(options.grab_bytes))
            if options.hang_after_tokens and index == options.hang_after_tokens:
                self._fault("hang")
            if cancel.cancelled:
                cancelled = True
                self.cancelled_requests += 1
                break
            if failing and index == 1:
                raise RuntimeError(f"fake engine failure in {self.model.id} after one token")
            await pace.tick()
            produced += 1
            yield ContentDelta(word if index == 0 else " " + word)
        decode_ms = (time.perf_counter() - started) * 1000
        finish = "length" if count == request.max_tokens and count < self.options.tokens else "stop"
        finish = "cancelled" if cancelled else "stop" if stopped_at is not None else finish
        yield ChatFinished(
            finish_reason=finish,
            prompt_tokens=prompt_tokens,
            completion_tokens=produced,
            timing=EngineTiming(prefill_ms=0.0, decode_ms=decode_ms, concurrent_slots=1),
            stop_sequence=stopped_at,
        )

    async def rerank(self, job: RerankInput, cancel: CancelToken) -> RerankResult:
        """The share of the query's words each document holds (a score in 0..1)."""
        words = set(job.query.lower().split())
        scores = [len(words & set(doc.lower().split())) / max(1, len(words)) for doc in job.documents]
        await self._work(cancel, len(job.documents))
        tokens = sum(max(1, len(doc.split())) for doc in job.documents) + len(job.documents) * len(words)
        return RerankResult(scores=scores, prompt_tokens=tokens)

    async def embed(self, texts: list[Any], cancel: CancelToken) -> EmbeddingResult:
        """Unit vectors from a hash of each text."""
        self._maybe_oom()
        vectors = []
        texts = [text if isinstance(text, str) else " ".join(map(str, text)) for text in texts]
        for text in texts:
            digest = hashlib.sha256(text.encode()).digest()
            raw = [(digest[i % len(digest)] - 127.5) for i in range(self.options.embedding_dim)]
            norm = math.sqrt(sum(v * v for v in raw)) or 1.0
            vectors.append([v / norm for v in raw])
        await self._work(cancel, len(texts))
        return EmbeddingResult(vectors=vectors, prompt_tokens=sum(max(1, len(t.split())) for t in texts))

    async def transcribe(self, audio: TranscriptionInput, cancel: CancelToken) -> TranscriptionResult:
        """A transcript naming the byte count of the audio as a file (handed PCM: in a WAV)."""
        await self._work(cancel)
        data, _ = audio_file(audio)
        return TranscriptionResult(text=f"fake transcript of {len(data)} bytes", duration_secs=None)

    async def speak(self, speech: SpeechInput, cancel: CancelToken) -> AsyncGenerator[AudioChunk, None]:
        """A 440 Hz tone per phrase, 0.1 s per word."""
        pace = self._pace()
        phrases = [p for p in speech.text.replace("!", ".").split(".") if p.strip()] or [speech.text]
        for index, phrase in enumerate(phrases):
            if cancel.cancelled:
                return
            if self.options.crash_after_chunks and index == self.options.crash_after_chunks:
                self._fault("crash")
            await pace.tick()
            samples = int(24000 * 0.1 * max(1, len(phrase.split())) / max(speech.speed, 0.1))
            buffer = io.BytesIO()
            for i in range(samples):
                buffer.write(struct.pack("<h", int(8000 * math.sin(2 * math.pi * 440 * i / 24000))))
            yield AudioChunk(pcm16=buffer.getvalue(), sample_rate=24000)

    async def generate_images(self, job: ImageInput, cancel: CancelToken) -> ImageResult:
        """One flat-colour PNG per image, coloured by its seed."""
        self._maybe_oom()
        await self._work(cancel)
        images = [GeneratedImage(png=png(job.width, job.height, job.seed + i), seed=job.seed + i) for i in range(job.n)]
        return ImageResult(images=images)

    async def convert_document(
        self, document: DocumentInput, cancel: CancelToken
    ) -> AsyncGenerator[dict[str, Any], None]:
        """One page whose markdown is the decoded text."""
        await self._pace().tick()
        yield {"page": 1, "markdown": document.data.decode("utf-8", "replace")}

    async def extract_entities(self, job: EntityInput, cancel: CancelToken) -> EntityResult:
        """Every capitalised word, labelled with the first label."""
        await self._pace().tick()
        results = []
        for text in job.texts:
            found = []
            position = 0
            for word in text.split():
                start = text.index(word, position)
                position = start + len(word)
                if word[:1].isupper() and job.labels:
                    clean = word.strip(".,;:!?")
                    found.append(
                        Entity(text=clean, label=job.labels[0], start=start, end=start + len(clean), score=0.9)
                    )
            results.append(found)
        return EntityResult(entities=results)


def fake_engine_kind(name: str = "fake") -> EngineKind:
    """The fake engine kind, serving all eight modalities."""
    return EngineKind(
        name=name,
        modalities=frozenset(Modality),
        factory=FakeEngine,
        description="deterministic fake engine for tests",
        options={"fake": FakeOptions, "image": FakeImageOptions},
        spec_kind=SPEC_KIND_BY_MODALITY,  # it stands in for every engine: the API's kind of each modality
    )
