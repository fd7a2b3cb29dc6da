"""Settings: the TOML config decoded with msgspec into Structs, plus the HYPNOS_* environment overrides."""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec

from hypnos.config_checks import model_problems, path_problem, raw_model_problem
from hypnos.types import MemoryTier, Modality, ModelPriority, MoeOffload

MiB = 1024 * 1024
GiB = 1024 * MiB


class ConfigError(Exception):
    """A config that cannot be used; the message names the file, the key and what was expected."""


class TlsConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """[server.tls]: serve https with this certificate and key."""

    cert_path: str
    key_path: str


class ApiKeyConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """[[server.keys]]: one API key with its label, admin right and limits."""

    key: str
    label: str | None = None
    admin: bool = False
    requests_per_minute: int | None = None
    max_concurrent: int | None = None
    tokens_per_day: int | None = None


class ProfileObjective(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A workload profile's objective: first_token, first_audio (with target_ms) or throughput."""

    metric: Literal["first_token", "first_audio", "throughput"]
    target_ms: int | None = None


class ServerConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """[server]: where to listen, who may call, and server-wide behaviour."""

    host: str = "127.0.0.1"
    port: int = 9999
    tls: TlsConfig | None = None
    api_keys: list[str] = []
    keys: list[ApiKeyConfig] = []
    allowed_origins: list[str] = []
    profile: str | None = None
    metrics_require_auth: bool = False
    request_log_capacity: int = 200
    request_log_level: Literal["off", "error", "warn", "info", "debug", "trace"] = "info"
    request_log_redact: list[str] = []
    document_pictures_ttl_secs: int = 3600
    kv_idle_timeout_secs: int | None = None
    workflow_idle_secs: float = 30.0
    # the realtime server VAD's speech detector: "auto" (the first a plugin offers, e.g. the audio plugin's "silero",
    # else "energy"), or one by name; a session.update may pick another (`hypnos.speech_detector`)
    realtime_vad: str = "auto"
    # where engines run: "process" (one engine host process per model: a crash or a hang loses only that model) or
    # "thread" (inside the server process); a model's own `isolation` overrides it
    isolation: Literal["process", "thread"] = "process"
    # how long SIGTERM may take: engine hosts still running after it are killed
    shutdown_grace_secs: float = 10.0
    # a plugin that fails to import or implements an unknown hook: "fail" stops `hypnos serve` (exit 2), "warn" logs
    plugin_errors: Literal["fail", "warn"] = "fail"
    # where the server keeps its own data (stored responses); relative to the config file's folder; unset: `data`
    # next to the config file, or memory only when there is no config file
    data_dir: str | None = None
    # per API key: stored /v1/responses (and message threads, conversations) kept, its oldest dropped first
    responses_max_count: int = 10_000
    # per API key: the bytes those may hold (its oldest dropped first; a conversation growing past it alone: 400)
    responses_max_bytes: int = 256 * MiB
    responses_max_age_secs: int = 30 * 86_400  # stored /v1/responses older than this are dropped
    # folders besides models_dir whose files the pool API (POST/PUT /v1/models) may name, directly or through a
    # symlink in models_dir (relative to the config file's folder); the config file itself may name any readable file
    model_roots: list[str] = []
    # the Files and Batches APIs: one upload's size cap, one key's files together, the priority of batch lines (below
    # 0: below every interactive request) and the lines run at once
    files_max_bytes: Annotated[int, msgspec.Meta(ge=1)] = 200 * MiB
    files_quota_bytes: Annotated[int, msgspec.Meta(ge=1)] = 2048 * MiB
    batch_priority: Annotated[int, msgspec.Meta(lt=0)] = -1
    batch_max_concurrent_lines: Annotated[int, msgspec.Meta(ge=1)] = 4
    # a model counts as in interactive use for batch_interactive_secs after an interactive request: meanwhile batch
    # lines leave batch_reserved_slots of its slots free (never every slot: a one-slot model lends it and takes it back)
    # and a batch line's load never evicts it
    batch_reserved_slots: Annotated[int, msgspec.Meta(ge=0)] = 1
    batch_interactive_secs: Annotated[float, msgspec.Meta(ge=0)] = 600.0
    # whose cached prompt states a request may restore: "model" (any caller's: a prefix is the same computation whoever
    # sent it) or "key" (only those of the same API key, slots included)
    prompt_cache_isolation: Literal["model", "key"] = "model"


class LimitsConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """[limits]: the body, time and queue limits of spec section 1 with their defaults."""

    max_body_bytes: int = 256 * MiB
    max_audio_bytes: int = 64 * MiB
    max_image_bytes: int = 32 * MiB
    max_image_pixels: int = 32 * 1024 * 1024  # width x height an image header may declare (checked before decoding)
    max_document_bytes: int = 100 * MiB
    max_document_inflated_bytes: int = 64 * MiB  # what one compressed stream or part of a document may inflate to
    max_prompt_chars: int = 1_000_000
    max_tokens_cap: int = 8192
    max_images_per_request: int = 4
    request_timeout_secs: float = 900.0
    # the longest one engine call of a non-streamed request may run while its client waits: past it the work is
    # cancelled and the request answers 504 timeout (0: no bound; the load before the call is not counted)
    engine_timeout_secs: Annotated[float, msgspec.Meta(ge=0)] = 600.0
    body_timeout_secs: float = 30.0  # the longest wait for the next part of a request body (408 past it)
    # once a body has taken body_timeout_secs, it must have come at this many bytes per second on average (408 past
    # it, the connection closed); 0: no minimum
    min_body_bytes_per_sec: Annotated[float, msgspec.Meta(ge=0)] = 1024.0
    # the longest a streamed engine call (chat, speech, documents) may run in its engine host: past it the stream ends
    # with a 504 timeout error and the engine is stopped (0: no bound)
    stream_timeout_secs: Annotated[float, msgspec.Meta(ge=0)] = 1800.0
    max_queue_per_model: int = 8
    max_realtime_frame_bytes: int = 15 * MiB  # one /v1/realtime WebSocket frame; a larger one closes it with 1009
    # server events a /v1/realtime client has not taken yet: past this the session is closed (1008), the server's
    # memory stays bounded when a client stops reading
    max_realtime_pending_bytes: int = 32 * MiB
    # a /v1/realtime session with no client event and nothing running for this long is closed (0: never)
    realtime_idle_timeout_secs: Annotated[float, msgspec.Meta(ge=0)] = 600.0
    max_rerank_documents: int = 1000  # documents one rerank request may score
    allow_remote_image_urls: bool = True
    allow_private_urls: bool = False
    overload: Literal["queue", "shed"] = "queue"


class KvParkConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """[hardware.kv_park]: keep llama.cpp conversations in host RAM when their model leaves tier 1."""

    enabled: bool = False
    max_bytes: int = 4 * GiB


class HardwareConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """[hardware]: tier budgets, simulation without a GPU, process cap."""

    simulate: bool = False
    simulate_vram_bytes: int | None = None
    vram_reserve_bytes: int = 512 * MiB
    vram_budget_bytes: int | None = None
    warm_ram_fraction: float = 0.5
    pinned_ram_budget_bytes: int | None = None
    max_process_memory_bytes: int | None = None
    min_gpu_layer_ratio: float = 0.5
    tier2_to_tier1_bandwidth_gbps: float | None = None
    tier3_to_tier2_bandwidth_gbps: float | None = None
    # after each load into tier 1, book what the engine host holds (NVML on a GPU, its resident set's growth on the
    # CPU) and correct the model's next estimate by it; false: bookings stay the estimates
    measured_placement: bool = True
    # the cores (affinity mask, cut to the cgroup CPU quota) are a budget: each computing model gets a share, its
    # engine host pinned there and told its thread count; false: every host may use every core (no shares)
    share_cores: bool = True
    kv_park: KvParkConfig = msgspec.field(default_factory=KvParkConfig)


class ClusterConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The `[cluster]` table: serve from a Ray cluster (needs `hypnos-server[ray]`); absent: this machine alone."""

    # the Ray address to join ("auto", "ray://host:10001", "host:6379"); "local" starts a one-node Ray here
    address: str = "auto"
    # the Ray resource that marks a machine's GPUs: agents go on the nodes that have it (on every node when none has)
    gpu_resource: str = "GPU"
    # how long a node agent gathers stream pieces (tokens, speech chunks) before sending them to the front
    stream_window_ms: float = 5.0
    # how often the front looks for nodes that joined (they get an agent) and refreshes its routing figures
    watch_secs: float = 2.0


class ProcessConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """[models.process]: the engine host process of a model (with isolation "process"): environment and supervision."""

    # extra environment of the host (CUDA_VISIBLE_DEVICES, OMP_*, ...), over the server's and the engine kind's
    env: dict[str, str] = {}
    # OMP_NUM_THREADS (and MKL_NUM_THREADS) of the host; None: the library's default
    threads: int | None = None
    # sessions per thread count an ONNX Runtime or CTranslate2 model keeps (their threads are fixed when a session is
    # made; each call runs on the one matching the model's core share, each one a copy of the weights); 1: one session
    # with the engine's configured threads, pinned to the share; None: 2 for a session of at most 1 GiB, else 1
    thread_sessions: Annotated[int, msgspec.Meta(ge=1)] | None = None
    # OMP_WAIT_POLICY of the host (it drops the kind's GOMP_SPINCOUNT); None: the kind's measured default
    omp_wait_policy: Literal["ACTIVE", "PASSIVE"] | None = None
    # the host's CPU niceness (0 as the server .. 19 yields the most; below 0 needs privileges); None: the engine
    # kind's measured default (batch torch engines 10, so a chat decoding beside them keeps its cores)
    nice: Annotated[int, msgspec.Meta(ge=-20, le=19)] | None = None
    # a request that makes no progress (no token, chunk, page or step, no cancellation check) this long kills the host;
    # None: the engine kind's default (60 s for llama.cpp, whose steps are short; 300 s for the others)
    hang_secs: float | None = None
    # after its client left, a request must reach a cancellation check within this many seconds, or the host is killed
    cancel_grace_secs: float = 10.0
    # after this many crashes within crash_window_secs the model stays unavailable until an admin enables it
    max_crashes: int = 5
    crash_window_secs: float = 600.0
    # how long a new host may take to start (import the plugin, build the engine) before it counts as failed
    start_timeout_secs: float = 120.0
    # the host's memory wall: a request that takes it past this fails with 400 host_memory_limit (the host may be
    # restarted; never counted as the model's crash). None: what the host held at start, plus the model's booking
    # (one whole context's KV more with the prompt cache or KV parking on), plus memory_headroom_bytes; 0: no wall
    memory_limit_bytes: Annotated[int, msgspec.Meta(ge=0)] | None = None
    memory_headroom_bytes: Annotated[int, msgspec.Meta(ge=0)] = 2 * GiB


class PromptCacheConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """[models.prompt_cache]: a chat model's saved prompt states (KV) in host RAM and on disk, restored by prefix."""

    enabled: bool = True
    # a slot's state is saved only when it holds at least this many tokens (shorter prompts prefill fast enough)
    min_tokens: Annotated[int, msgspec.Meta(ge=1)] = 512
    # host RAM the model's saved states may hold (counted in tier 2 and the process cap; less when those leave less)
    ram_bytes: Annotated[int, msgspec.Meta(ge=0)] = 1 * GiB
    # bytes of saved states under server.data_dir (0 or no data_dir: no disk tier)
    disk_bytes: Annotated[int, msgspec.Meta(ge=0)] = 4 * GiB


class ModelConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """[[models]]: one model in the pool; paths are relative to models_dir."""

    id: str
    modality: Modality
    engine: str
    modalities: list[Modality] = []
    weights_path: str | None = None
    aux_path: str | None = None
    text_encoder_path: str | None = None
    tokenizer_path: str | None = None
    voices_path: str | None = None
    priority: ModelPriority = ModelPriority.NORMAL
    initial_tier: MemoryTier = MemoryTier.TIER3
    slots: int = 1
    context_len: int | None = None
    moe_offload: MoeOffload = MoeOffload.OFF
    enabled: bool = True
    # "process" or "thread" (see [server] isolation); None: the server's
    isolation: Literal["process", "thread"] | None = None
    # CPU ids the model always computes on (its engine host pinned there, kept out of other models' shares while it
    # computes); empty: a share of the machine's cores the scheduler plans with the other models computing
    cores: list[Annotated[int, msgspec.Meta(ge=0)]] = []
    process: ProcessConfig = msgspec.field(default_factory=ProcessConfig)
    prompt_cache: PromptCacheConfig = msgspec.field(default_factory=PromptCacheConfig)
    arch: dict[str, Any] = {}
    # Engine-specific tables ([models.image], [models.llama], ...), checked against the engine kind's config_keys.
    engine_options: dict[str, dict[str, Any]] = {}

    @property
    def all_modalities(self) -> list[Modality]:
        """The primary modality followed by the additional ones, without repeats."""
        seen = [self.modality]
        seen.extend(m for m in self.modalities if m not in seen)
        return seen

    def resolve(self, models_dir: Path, relative: str | None) -> Path | None:
        """An absolute path for one of this model's path keys."""
        if relative is None:
            return None
        path = Path(relative).expanduser()
        return path if path.is_absolute() else models_dir / path


class Settings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The whole decoded config, passed down explicitly; never read at import time."""

    config_version: int = 1
    models_dir: str = "models"
    server: ServerConfig = msgspec.field(default_factory=ServerConfig)
    limits: LimitsConfig = msgspec.field(default_factory=LimitsConfig)
    hardware: HardwareConfig = msgspec.field(default_factory=HardwareConfig)
    models: list[ModelConfig] = []
    cluster: ClusterConfig | None = None
    source: str | None = None

    @property
    def models_path(self) -> Path:
        """models_dir as an absolute path (relative to the config file's folder)."""
        path = Path(self.models_dir).expanduser()
        if path.is_absolute() or self.source is None:
            return path.resolve()
        return (Path(self.source).parent / path).resolve()

    @property
    def model_root_paths(self) -> list[Path]:
        """models_dir and server.model_roots as absolute, resolved paths: where the pool API may take files from."""
        base = Path(self.source).parent if self.source else Path.cwd()
        roots = [self.models_path]
        for root in self.server.model_roots:
            path = Path(root).expanduser()
            roots.append((path if path.is_absolute() else base / path).resolve())
        return roots

    @property
    def data_path(self) -> Path | None:
        """server.data_dir as an absolute path; None when the server keeps its data in memory only."""
        if self.server.data_dir is None:
            return None if self.source is None else (Path(self.source).parent / "data").resolve()
        path = Path(self.server.data_dir).expanduser()
        if path.is_absolute() or self.source is None:
            return path.resolve()
        return (Path(self.source).parent / path).resolve()


_MODEL_FIELDS = set(ModelConfig.__struct_fields__) - {"engine_options"}


def _split_engine_tables(raw_models: Any, source: str) -> Any:
    """Move a model's engine-specific tables ([models.image] ...) into engine_options."""
    if not isinstance(raw_models, list):
        return raw_models
    out = []
    for index, entry in enumerate(raw_models):
        if not isinstance(entry, dict):
            out.append(entry)
            continue
        known: dict[str, Any] = {}
        tables: dict[str, dict[str, Any]] = {}
        for key, value in entry.items():
            if key in _MODEL_FIELDS:
                known[key] = value
            elif isinstance(value, dict):
                tables[key] = value
            else:
                raise ConfigError(f"{source}: unknown key `models[{index}].{key}`")
        known["engine_options"] = tables
        out.append(known)
    return out


def _explain(error: msgspec.ValidationError, source: str) -> ConfigError:
    """Rewrite msgspec's `... - at `$.server.port`` into `file: key: what was expected`."""
    text = str(error)
    key = ""
    if " - at `$" in text:
        text, _, where = text.partition(" - at `$")
        key = where.rstrip("`").lstrip(".")
    message = text.replace("Object contains unknown field", "unknown key")
    unknown = re.match(r"unknown key `([^`]*)`", message)
    if unknown:
        key = f"{key}.{unknown.group(1)}" if key else unknown.group(1)
        message = "unknown key"
    if key:
        return ConfigError(f"{source}: `{key}`: {message}")
    return ConfigError(f"{source}: {message}")


def settings_from_mapping(raw: dict[str, Any], source: str = "<config>") -> Settings:
    """Decode an already-parsed TOML mapping into Settings, with errors naming the key."""
    raw = dict(raw)
    if "models" in raw:
        for index, entry in enumerate(raw["models"] if isinstance(raw["models"], list) else []):
            problem = raw_model_problem(entry)
            if problem:
                raise ConfigError(f"{source}: `models[{index}]`: {problem}")
        raw["models"] = _split_engine_tables(raw["models"], source)
    try:
        settings = msgspec.convert(raw, Settings, strict=True)
    except msgspec.ValidationError as error:
        raise _explain(error, source) from None
    settings.source = None if source.startswith("<") else source
    _check_models(settings, source)
    return settings


def _check_models(settings: Settings, source: str) -> None:
    """Cross-field checks: unique ids in the documented alphabet, values in range, paths without control chars."""
    seen: set[str] = set()
    for index, model in enumerate(settings.models):
        if not model.id.strip():
            raise ConfigError(f"{source}: `models[{index}].id`: expected a non-empty string")
        problems = model_problems(model)
        if problems:
            raise ConfigError(f"{source}: " + "; ".join(f"`models[{index}].{problem[1:]}" for problem in problems))
        if model.id in seen:
            raise ConfigError(f"{source}: `models[{index}].id`: the id `{model.id}` is used twice")
        seen.add(model.id)
        _check_process(model.process, f"{source}: `models[{index}].process")
    problem = path_problem("models_dir", settings.models_dir)
    if problem:
        raise ConfigError(f"{source}: {problem}")
    if not settings.limits.body_timeout_secs > 0:
        raise ConfigError(f"{source}: `limits.body_timeout_secs`: expected a number of seconds > 0")
    if not 0.0 <= settings.hardware.min_gpu_layer_ratio <= 1.0:
        raise ConfigError(f"{source}: `hardware.min_gpu_layer_ratio`: expected a number between 0 and 1")
    if not 0.0 < settings.hardware.warm_ram_fraction <= 1.0:
        raise ConfigError(f"{source}: `hardware.warm_ram_fraction`: expected a number in (0, 1]")


def _check_process(process: ProcessConfig, where: str) -> None:
    """The engine host's bounds: positive times, a thread count >= 1, at least one crash allowed."""
    for name in ("hang_secs", "cancel_grace_secs", "crash_window_secs", "start_timeout_secs"):
        if (value := getattr(process, name)) is not None and not value > 0:
            raise ConfigError(f"{where}.{name}`: expected a number > 0")
    if process.threads is not None and process.threads < 1:
        raise ConfigError(f"{where}.threads`: expected an integer >= 1")
    if process.max_crashes < 1:
        raise ConfigError(f"{where}.max_crashes`: expected an integer >= 1")
    for key, value in process.env.items():
        if not key or "=" in key or "\0" in key or "\0" in value:
            raise ConfigError(f"{where}.env`: `{key}` is not a usable environment variable")


def apply_environment(settings: Settings, environ: dict[str, str] | os._Environ[str]) -> Settings:
    """Apply HYPNOS_PORT and HYPNOS_API_KEYS on top of the file's values."""
    port = environ.get("HYPNOS_PORT")
    if port:
        try:
            settings.server.port = int(port)
        except ValueError:
            raise ConfigError(f"HYPNOS_PORT: expected an integer port, got {port!r}") from None
    keys = environ.get("HYPNOS_API_KEYS")
    if keys:
        extra = [k.strip() for k in keys.split(",") if k.strip()]
        settings.server.api_keys = [*settings.server.api_keys, *extra]
    return settings


def load_settings(path: str | Path | None = None, environ: dict[str, str] | None = None) -> Settings:
    """Read the config named by `path` or HYPNOS_CONFIG (none: defaults), then apply the environment."""
    env = os.environ if environ is None else environ
    chosen = path or env.get("HYPNOS_CONFIG")
    if chosen:
        file = Path(chosen).expanduser()
        try:
            text = file.read_text(encoding="utf-8")
        except OSError as error:
            raise ConfigError(f"{file}: cannot read the config file ({error.strerror})") from None
        try:
            raw = tomllib.loads(text)
        except tomllib.TOMLDecodeError as error:
            raise ConfigError(f"{file}: not valid TOML ({error})") from None
        except RecursionError:
            raise ConfigError(f"{file}: not valid TOML (arrays or tables nested too deeply)") from None
        settings = settings_from_mapping(raw, str(file.resolve()))
    else:
        settings = Settings()
    return apply_environment(settings, env)
