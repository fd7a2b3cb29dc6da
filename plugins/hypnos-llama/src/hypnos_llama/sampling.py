"""Sampling parameters of a chat request and the llama.cpp sampler chain built from them."""

from __future__ import annotations

import ctypes
import logging
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from hypnos.chat import ChatInput

logger = logging.getLogger(__name__)

DEFAULT_TEMPERATURE = 0.8
DEFAULT_TOP_P = 0.95
DEFAULT_TOP_K = 40
DEFAULT_MIN_P = 0.05
# the repetition penalty (1.0: off) and how many of the latest tokens, prompt included, it looks at (llama.cpp's and
# Ollama's default window; -1: the whole context)
DEFAULT_REPEAT_PENALTY = 1.0
DEFAULT_REPEAT_LAST_N = 64
# The GGUF keys a model's converter writes from its generation_config.json (gguf-py's Keys.General.SAMPLING_*)
GGUF_SAMPLING_KEYS = {
    "temperature": "general.sampling.temp",
    "top_p": "general.sampling.top_p",
    "top_k": "general.sampling.top_k",
    "min_p": "general.sampling.min_p",
    "repeat_penalty": "general.sampling.penalty_repeat",
    "repeat_last_n": "general.sampling.penalty_last_n",
}
WHOLE_NUMBERS = ("top_k", "repeat_last_n")
# presence / frequency penalties look at this many of the latest tokens (-1 would be the whole context)
PENALTY_LAST_N = 256
# a whole-context repetition window (repeat_last_n -1) holds the prompt and this many answer tokens
REPEAT_ANSWER_ROOM = 8192


@dataclass(frozen=True)
class SamplingDefaults:
    """What a request that leaves a sampling field unset gets: the model's own values, else the engine's."""

    temperature: float = DEFAULT_TEMPERATURE
    top_p: float = DEFAULT_TOP_P
    top_k: int = DEFAULT_TOP_K
    min_p: float = DEFAULT_MIN_P
    repeat_penalty: float = DEFAULT_REPEAT_PENALTY
    repeat_last_n: int = DEFAULT_REPEAT_LAST_N

    @classmethod
    def of_model(cls, configured: dict[str, float | int | None], metadata: dict[str, Any]) -> SamplingDefaults:
        """Each field from the model's config (`[models.llama]`), else its GGUF's `general.sampling.*` key (as
        llama.cpp reads them), else the engine's default; a GGUF value of the wrong type is skipped."""
        found: dict[str, Any] = {}
        for name, key in GGUF_SAMPLING_KEYS.items():
            value = configured.get(name)
            if value is None:
                value = metadata.get(key)
                if isinstance(value, bool) or not isinstance(value, int | float):
                    continue
            found[name] = int(value) if name in WHOLE_NUMBERS else float(value)
        return cls(**found)


@dataclass(frozen=True)
class SamplingParams:
    """temperature, top_p, top_k, seed, penalties, logit_bias and a grammar as the engine applies them (greedy when
    temperature is 0)."""

    temperature: float = DEFAULT_TEMPERATURE
    top_p: float = DEFAULT_TOP_P
    top_k: int = DEFAULT_TOP_K
    min_p: float = DEFAULT_MIN_P
    seed: int = 0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    # over the latest repeat_last_n tokens, the prompt's included: a logit above 0 divided by it, one below multiplied
    repeat_penalty: float = DEFAULT_REPEAT_PENALTY
    repeat_last_n: int = DEFAULT_REPEAT_LAST_N
    logit_bias: dict[int, float] = field(default_factory=dict)
    grammar: str | None = None  # GBNF the answer must follow (response_format, tool calls)
    # Regexes that switch the grammar on (lazy: free text until one shows; `^` ones anchored at the answer's start)
    triggers: tuple[str, ...] = ()
    # With tool_choice "auto": how the answer's first token weighs a call (hypnos_llama.call_gate.CallGate)
    gate: Any = None

    @property
    def greedy(self) -> bool:
        """True when sampling reduces to argmax."""
        return self.temperature <= 0.0

    @property
    def repeats(self) -> bool:
        """True when the repetition penalty is on."""
        return self.repeat_penalty != 1.0 and self.repeat_last_n != 0

    @classmethod
    def from_request(
        cls,
        request: ChatInput,
        grammar: str | None = None,
        choice: int = 0,
        triggers: tuple[str, ...] = (),
        gate: Any = None,
        defaults: SamplingDefaults = SamplingDefaults(),
    ) -> SamplingParams:
        """The request's sampling fields, `defaults` where it left them unset; no seed means a fresh random one
        (choice `i` of `n` samples with seed + i)."""
        given = request.sampling
        seed = given.seed if given.seed is not None else random.getrandbits(31)
        temperature = defaults.temperature if given.temperature is None else given.temperature
        top_p = defaults.top_p if given.top_p is None else given.top_p
        return cls(
            temperature=max(0.0, float(temperature)),
            top_p=min(1.0, max(0.0, float(top_p))),
            top_k=max(0, int(defaults.top_k if given.top_k is None else given.top_k)),
            min_p=min(1.0, max(0.0, defaults.min_p)),
            seed=(seed + choice) & 0xFFFFFFFF,
            presence_penalty=given.presence_penalty,
            frequency_penalty=given.frequency_penalty,
            repeat_penalty=defaults.repeat_penalty if given.repeat_penalty is None else given.repeat_penalty,
            repeat_last_n=defaults.repeat_last_n,
            logit_bias=dict(given.logit_bias),
            grammar=grammar,
            triggers=triggers if grammar is not None else (),
            gate=gate if grammar is not None and triggers else None,
        )


def grammar_sampler(lib: Any, vocab: Any, grammar: str) -> Any:
    """llama.cpp's grammar sampler for a GBNF text (None when llama.cpp cannot parse it)."""
    sampler = lib.llama_sampler_init_grammar(vocab, grammar.encode("utf-8"), b"root")
    return sampler or None


def _logit_bias(lib: Any, n_vocab: int, bias: dict[int, float]) -> Any:
    entries = [(token, value) for token, value in bias.items() if 0 <= token < n_vocab]
    array = (lib.llama_logit_bias * len(entries))()
    for slot, (token, value) in zip(array, entries, strict=True):
        slot.token, slot.bias = token, value
    return lib.llama_sampler_init_logit_bias(n_vocab, len(entries), array)


def build_sampler_chain(lib: Any, params: SamplingParams, n_vocab: int = 0, prompt: Sequence[int] = ()) -> Any:
    """A llama.cpp sampler chain: logit_bias -> repetition penalty (it has seen the prompt's last tokens) ->
    presence / frequency penalties (the answer's tokens only, as OpenAI has them), then greedy, or top_k -> top_p ->
    min_p -> temperature -> dist(seed). A grammar is not in it (SlotSampler checks the chain's pick against it)."""
    chain = lib.llama_sampler_chain_init(lib.llama_sampler_chain_default_params())
    if params.logit_bias and n_vocab:
        lib.llama_sampler_chain_add(chain, _logit_bias(lib, n_vocab, params.logit_bias))
    if params.repeats and n_vocab:
        window = params.repeat_last_n if params.repeat_last_n > 0 else len(prompt) + REPEAT_ANSWER_ROOM
        repeat = lib.llama_sampler_init_penalties(n_vocab, window, params.repeat_penalty, 0.0, 0.0)
        for token in prompt[-window:]:
            lib.llama_sampler_accept(repeat, token)
        lib.llama_sampler_chain_add(chain, repeat)
    if (params.presence_penalty or params.frequency_penalty) and n_vocab:
        penalties = lib.llama_sampler_init_penalties(
            n_vocab, PENALTY_LAST_N, 1.0, params.frequency_penalty, params.presence_penalty
        )
        lib.llama_sampler_chain_add(chain, penalties)
    if params.greedy:
        lib.llama_sampler_chain_add(chain, lib.llama_sampler_init_greedy())
        return chain
    if params.top_k > 0:
        lib.llama_sampler_chain_add(chain, lib.llama_sampler_init_top_k(params.top_k))
    if params.top_p < 1.0:
        lib.llama_sampler_chain_add(chain, lib.llama_sampler_init_top_p(params.top_p, 1))
    if params.min_p > 0.0:
        lib.llama_sampler_chain_add(chain, lib.llama_sampler_init_min_p(params.min_p, 1))
    lib.llama_sampler_chain_add(chain, lib.llama_sampler_init_temp(params.temperature))
    lib.llama_sampler_chain_add(chain, lib.llama_sampler_init_dist(params.seed))
    return chain


class SlotSampler:
    """A slot's sampling: the chain alone, or with a grammar the way llama.cpp's own server does it: the chain picks
    from all tokens, the grammar checks that one token, and only when it refuses does the grammar filter the whole
    vocabulary before the chain picks again (a grammar on every token of the vocabulary at every step is slow). A
    grammar with triggers waits for one (LazyGrammar), sampling freely until then.
    Plain greedy (no bias, penalty or grammar) is the logits' argmax read in place: the token llama.cpp's greedy
    sampler picks (the first highest), without filling its candidate array of the whole vocabulary every step."""

    def __init__(self, model: Any, params: SamplingParams, prompt: Sequence[int] = ()) -> None:
        self.lib = lib = model.lib
        self.model = model
        self.n_vocab = model.n_vocab
        self.gate = params.gate
        # after a bare call's trigger, its name so far (None: not naming, or no floor); see _release
        self._naming: bytearray | None = None
        self._name_floor = params.gate.name_floor if params.gate is not None else 0.0
        self.chain = build_sampler_chain(lib, params, model.n_vocab, prompt)
        self.grammar: Any = None
        self.lazy: Any = None
        if params.grammar is not None and params.triggers:
            from hypnos_llama.lazy_grammar import LazyGrammar

            self.lazy = LazyGrammar(model, params.grammar, params.triggers)
        elif params.grammar is not None:
            self.grammar = grammar_sampler(lib, model.vocab, params.grammar)
        plain = not (params.logit_bias or params.presence_penalty or params.frequency_penalty or params.repeats)
        self._logits: Any = None  # numpy's view maker when sampling is the plain argmax
        if params.greedy and plain:
            import numpy as np

            self._logits = np.ctypeslib.as_array
        if params.grammar is not None:
            import numpy as np

            self._data = (lib.llama_token_data * self.n_vocab)()
            self._view = np.frombuffer(self._data, dtype=[("id", "<i4"), ("logit", "<f4"), ("p", "<f4")])
            self._ids = np.arange(self.n_vocab, dtype=np.int32)
            self._one = (lib.llama_token_data * 1)()

    def sample(self, context: Any, index: int) -> int:
        """The next token from batch row `index` (accepted by the chain and the grammar)."""
        lib = self.lib
        if self.gate is not None:  # the answer's first token: is a call meant?
            self._weigh(context, index)
        if self.grammar is None:
            if self._logits is not None:
                token = int(self._logits(lib.llama_get_logits_ith(context, index), shape=(self.n_vocab,)).argmax())
            else:
                token = int(lib.llama_sampler_sample(self.chain, context, index))
            if self.lazy is not None and (grammar := self.lazy.accept(token)) is not None:
                logger.debug("the call grammar holds after %r", bytes(self.lazy.text[-64:]))
                if self._name_floor > 0 and self.lazy.name_from is not None:
                    self._naming = self.lazy.text[self.lazy.name_from :]
                self.grammar, self.lazy = grammar, None  # from the next token on, the grammar holds
            return token
        import numpy as np

        logits = np.ctypeslib.as_array(lib.llama_get_logits_ith(context, index), shape=(self.n_vocab,))
        token = self._pick(logits, grammar_first=False)
        self._one[0].id, self._one[0].logit, self._one[0].p = token, 1.0, 0.0
        lib.llama_sampler_apply(self.grammar, ctypes.byref(lib.llama_token_data_array(self._one, 1, -1, False)))
        if self._one[0].logit == float("-inf"):
            weigh = self._naming is not None or logger.isEnabledFor(logging.DEBUG)
            refused, kept = self._kept(logits, token) if weigh else (b"", 1.0)
            if self._naming is not None and kept < self._name_floor:
                return self._release(token, kept)
            token = self._pick(logits, grammar_first=True)
            if refused:
                logger.debug(
                    "grammar: %r for %r (%.3f of the probability allowed)", self.model.piece(token), refused, kept
                )
        lib.llama_sampler_accept(self.grammar, token)
        lib.llama_sampler_accept(self.chain, token)
        if self._naming is not None:
            self._naming += self.model.piece(token)
            if self._naming.count(b'"') >= 2:  # the name is written: the call goes on under the grammar
                self._naming = None
        return token

    def _release(self, token: int, kept: float) -> int:
        """A bare call's name the model gives the declared names less than the floor for: the grammar lets go and
        the answer is free text (as llama.cpp's trigger, which waits for a declared name, has it); `token` is the
        model's own pick."""
        logger.debug("a bare call names no declared function (%.3f on them): the answer is text", kept)
        self.lib.llama_sampler_free(self.grammar)
        self.grammar, self._naming = None, None
        self.lib.llama_sampler_accept(self.chain, token)
        return token

    def _weigh(self, context: Any, index: int) -> None:
        import numpy as np

        gate, self.gate = self.gate, None
        logits = np.ctypeslib.as_array(self.lib.llama_get_logits_ith(context, index), shape=(self.n_vocab,))
        if gate.weigh(self.model, logits) and self.lazy is not None:
            self.lazy.anchored = []  # no call at the answer's start: bare JSON there is text

    def _kept(self, logits: Any, refused: int) -> tuple[bytes, float]:
        import numpy as np

        self._view["id"], self._view["logit"], self._view["p"] = self._ids, logits, 0.0
        candidates = self.lib.llama_token_data_array(self._data, self.n_vocab, -1, False)
        self.lib.llama_sampler_apply(self.grammar, ctypes.byref(candidates))
        weights = np.exp(logits - logits.max())
        return self.model.piece(refused), float(weights[np.isfinite(self._view["logit"])].sum() / weights.sum())

    def _pick(self, logits: Any, *, grammar_first: bool) -> int:
        self._view["id"] = self._ids
        self._view["logit"] = logits
        self._view["p"] = 0.0
        candidates = self.lib.llama_token_data_array(self._data, self.n_vocab, -1, False)
        if grammar_first:
            self.lib.llama_sampler_apply(self.grammar, ctypes.byref(candidates))
        self.lib.llama_sampler_apply(self.chain, ctypes.byref(candidates))
        return int(candidates.data[candidates.selected].id)

    def free(self) -> None:
        """Free the chain and the grammar (idempotent)."""
        free_sampler_chain(self.lib, self.chain)
        free_sampler_chain(self.lib, self.grammar)
        self.chain = self.grammar = self.lazy = None


def free_sampler_chain(lib: Any, chain: Any) -> None:
    """Free a chain built by build_sampler_chain (its samplers go with it)."""
    if chain:
        lib.llama_sampler_free(chain)
