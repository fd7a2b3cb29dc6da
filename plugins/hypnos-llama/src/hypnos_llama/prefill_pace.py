"""How many prompt tokens the batch loop's next step prefills: chunks short enough that a cancellation is seen
soon, and beside answers that stream, only as much prefill (and batch lines' decoding) as keeps their pace."""

from __future__ import annotations

MIN_CHUNK = 16  # the smallest chunk a time bound makes (smaller batches waste most of a step's fixed cost)
# Alone, the smallest chunk a time bound makes: each step reads the whole KV cache, so deep in a long prompt a short
# chunk spends most of its step on that, its measured rate falls, and the next chunk is cut shorter still. On the 0.5B
# starter (2 cores), an 8k-token prompt prefilled at 30 tokens/s in ~1 s chunks, 64 in 128-token ones, 67 in 256.
EFFICIENT_CHUNK = 128
FIRST_CHUNK = 128  # the most a chunk takes before any rate was measured (a slow CPU: 512 tokens can take 20 s)
DECODE_WEIGHT = 0.2  # how much a new decode-only step moves the running mean of their duration
BACKGROUND_STEP = 0.25  # a batch line's prompt chunk alone: this share of step_secs (an interactive one waits less)


class PrefillPace:
    """Sizes the prompt chunks of each step and keeps prefill's share of the loop's time beside streams.

    Alone, a step takes up to `n_batch` prompt tokens (FIRST_CHUNK before any rate is known), fewer when the last
    chunk's rate says that many would take longer than `step_secs` (the cancellation check between steps is then at
    most about that far away), but not fewer than EFFICIENT_CHUNK. Beside slots that are answering, a step takes at
    most `chunk_beside` prompt tokens, and only while prefill's time beside them (a mixed step's duration beyond a
    decode-only step's) stays within `share` of their decode-only time: their streams keep about 1 / (1 + share) of
    their pace while a long prompt prefills. Batch lines' work beside interactive streams (their tokens in a decode
    step) draws on the same credit.
    """

    def __init__(self, n_batch: int, chunk_beside: int, share: float, step_secs: float) -> None:
        self.n_batch = max(1, n_batch)
        self.chunk_beside = max(1, min(chunk_beside, self.n_batch))
        self.share = share
        self.step_secs = step_secs
        self.credit = 0.0  # seconds of prefill still allowed beside streams (negative: owed back in decode time)
        self.decode_s: float | None = None  # running mean of a decode-only step
        self.rate: float | None = None  # prompt tokens a second in the last step that prefilled (falls as KV fills)

    def budget(self, streaming: bool, background: bool = False) -> int:
        """The most prompt tokens the next step may take (0: this step only decodes); `background`: a batch line's
        prompt, in shorter steps (an interactive request arriving waits for the step under way)."""
        if streaming and self.credit < 0:
            return 0
        cap = self.chunk_beside if streaming else self.n_batch
        if self.rate is None:
            cap = min(cap, FIRST_CHUNK)
        elif self.step_secs > 0:
            secs = self.step_secs * (BACKGROUND_STEP if background else 1.0)
            floor = MIN_CHUNK if streaming or background else EFFICIENT_CHUNK
            cap = min(cap, max(floor, int(self.rate * secs)))
        return cap

    def lends(self) -> bool:
        """Whether batch lines may decode beside interactive streams this step (their decode step is measured and
        no prefill or batch work is owed back)."""
        return self.decode_s is not None and self.credit >= 0

    def record(self, elapsed: float, prefilled: int, streaming: bool, background: bool = False) -> None:
        """Account a decoded step: `prefilled` prompt tokens in `elapsed` seconds, beside streams or not;
        `background`: batch lines decoded in it beside interactive streams."""
        if prefilled == 0 and not background:
            if streaming:
                mean = self.decode_s
                self.decode_s = elapsed if mean is None else mean + DECODE_WEIGHT * (elapsed - mean)
                self.credit = min(0.0, self.credit + self.share * elapsed)
            return
        extra = elapsed - (self.decode_s or 0.0) if streaming else elapsed
        if prefilled:
            extra = max(extra, elapsed * 0.5, 1e-6)  # a noisy decode mean never makes a chunk look free
            self.rate = prefilled / extra
        else:  # batch lines' tokens only: a few more rows of the same step
            extra = max(extra, elapsed * 0.05, 1e-6)
        if streaming:
            self.credit -= extra
