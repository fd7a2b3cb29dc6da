"""The batch loop's thread count: the scheduler's core share, lowered while other programs want the same cores.

llama.cpp's decode threads wait for each other at every layer: one of them preempted by another program stalls them
all, so a decode on every core loses 3-4x as soon as anything else runs. The governor watches the loop's own decode
steps and the machine's CPU pressure over the last quarter second (/proc/pressure/cpu's stall total, else the steal
time in /proc/stat): when steps stretch past their quiet pace, or the machine is busy, it tries one thread fewer and
keeps it when steps got faster; when the machine is calm again it tries one more, up to the share. Each failed try
waits twice as long before the next, but contention seen ending (busy, then calm, at a settled thread count) makes
the next try due at once: the full share is back within a few steps of the other program's end. A try whose first
steps are clearly worse, or steps far past their quiet pace, are judged without waiting for a whole window. The
first step after the loop idled (a new request) is judged before it runs: other programs' recent CPU and the tasks
runnable now say how many cores are taken, so a request arriving beside a busy program never pays the seconds a
spinning pair costs there.
"""

from __future__ import annotations

import os
import statistics
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

from hypnos_llama.options import LlamaOptions

STRETCH = 1.5  # a typical decode step this much slower than its quiet pace: contention
BUSY_PERCENT = 25.0  # CPU pressure (share of time a task waited for a core) above which the machine is busy
CALM_PERCENT = 10.0  # below it, a thread more is worth a try
WINDOW = 8  # decode steps judged together (the first one after a change is left out: the pool warms up)
EARLY = 2  # steps enough to judge a change that is clearly wrong (FAR past the quiet pace, or than before a try)
EXTREME = 8.0  # a step with more than one thread this much slower than its quiet pace is judged alone, at once
FAR = 2.0  # steps this much slower (than their quiet pace times STRETCH, or than before a try): judged at once
KEEP = 0.97  # a try is kept when its typical step is at most this share of the one before
PROBE_SECS = 2.0  # the first wait between tries; doubled after each failed one, up to MAX_BACKOFF_SECS
MAX_BACKOFF_SECS = 60.0
READ_EVERY_SECS = 0.25  # the pressure is measured over the span since the last read, at least this long
OTHERS_PERCENT = 25.0  # other programs' normal-priority CPU (% of one core) under which a stall is niced work's
OTHERS_SPAN_SECS = 1.0  # the span other programs' CPU time is measured over
SETTLE_SECS = 2 * READ_EVERY_SECS  # after a thread change, readings wait this long to show the new count alone
IDLE_SECS = 0.5  # no step for this long (or the loop waited for work): the next one is judged first against what
# other programs take now
IDLE_TICK_SECS = 0.25  # while the loop idles, other programs' CPU is sampled this often (a /proc/stat read)
START_SPAN_SECS = 0.5  # the span other programs' CPU is judged over before a new request's first step
FRESH_SPAN_SECS = 0.06  # after a new request's check, the first pressure reading spans at least this (its first step)
TAKEN_PERCENT = 75.0  # other programs' normal-priority CPU counts as one core taken from this share of one on


class CpuPressure:
    """The machine's CPU pressure in percent since the last read (READ_EVERY_SECS or more before): the growth of
    /proc/pressure/cpu's `some total` (stalled microseconds; `avg10` at the first read), else the steal share of
    /proc/stat's jiffies; None when neither can be read. Not avg10: it decays over tens of seconds, far too slowly
    to see another program end. A stall while no other program computes at normal priority (the CPU time of
    /proc/stat's user, system and irq columns, less this process's own, under OTHERS_PERCENT of a core) reads 0:
    it is niced programs waiting (a batch engine host), which give way to the decode, or the decode's own threads."""

    def __init__(
        self,
        psi: str | Path = "/proc/pressure/cpu",
        stat: str | Path = "/proc/stat",
        clock: Callable[[], float] = time.monotonic,
        own_cpu: Callable[[], float] = time.process_time,
    ) -> None:
        self._psi, self._stat, self._clock, self._own_cpu = Path(psi), Path(stat), clock, own_cpu
        self._read_at = -1e18
        self._span = READ_EVERY_SECS  # the shortest span of the next reading
        self._value: float | None = None
        self._last: tuple[int, int] | None = None  # (steal, total) jiffies at the last read
        self._stalled: float | None = None  # PSI's `some total` (microseconds) at the last read
        self._samples: deque[tuple[float, float, float]] = deque()  # (clock, normal-priority CPU secs, own CPU secs)
        self._jiffies = _clock_ticks()
        self.running: int | None = None  # tasks runnable at the last /proc/stat read (procs_running), the reader's too

    def __call__(self) -> float | None:
        now = self._clock()
        span = now - self._read_at
        if span >= self._span:
            self._read_at, self._span = now, READ_EVERY_SECS
            self._value = self._read(span)
        return self._value

    def _read(self, span: float) -> float | None:
        try:
            if (fields := self._psi_some()) is not None:
                stalled, self._stalled = self._stalled, float(fields["total"])
                others = self._others()
                if stalled is None:
                    return float(fields["avg10"])
                if others is not None and others < OTHERS_PERCENT:
                    return 0.0
                return min(100.0, max(0.0, (self._stalled - stalled) / (span * 1e4)))
        except (OSError, ValueError, KeyError):
            pass
        try:
            numbers = [int(n) for n in self._stat.read_text().splitlines()[0].split()[1:]]
        except (OSError, ValueError, IndexError):
            return None
        steal, total = (numbers[7] if len(numbers) > 7 else 0), sum(numbers[:8])
        last, self._last = self._last, (steal, total)
        if last is None or total <= last[1]:
            return None
        return 100.0 * (steal - last[0]) / (total - last[1])

    def _others(self, span: float = OTHERS_SPAN_SECS) -> float | None:
        """Other programs' CPU time at normal priority over about the last `span` seconds, in percent of one core
        (None at the first read or without /proc/stat): user, system, irq and softirq jiffies (not the nice column),
        less this process's own CPU time. Over a second, not a quarter: jiffies are too coarse for that; never over an
        idle spell of the loop (no reads for seconds), whose average would hide a program that just started."""
        try:
            lines = self._stat.read_text().splitlines()
            numbers = [int(n) for n in lines[0].split()[1:]]
            busy = (numbers[0] + numbers[2] + numbers[5] + numbers[6]) / self._jiffies
            self.running = next((int(line.split()[1]) for line in lines if line.startswith("procs_running ")), None)
        except (OSError, ValueError, IndexError):
            return None
        now = (self._clock(), busy, self._own_cpu())
        while self._samples and now[0] - self._samples[0][0] > 2 * OTHERS_SPAN_SECS:  # before an idle spell: stale
            self._samples.popleft()
        while len(self._samples) > 1 and now[0] - self._samples[1][0] >= OTHERS_SPAN_SECS:
            self._samples.popleft()
        self._samples.append(now)
        first = next((s for s in reversed(self._samples) if now[0] - s[0] >= span), self._samples[0])
        if first is now or now[0] <= first[0]:
            return None
        return max(0.0, (now[1] - first[1]) - (now[2] - first[2])) * 100.0 / (now[0] - first[0])

    def _rebase(self) -> None:
        """The next reading spans from now (FRESH_SPAN_SECS at least): after an idle spell the first steps of a new
        request are judged on themselves, not on a span that saw a program that has just ended."""
        try:
            if (fields := self._psi_some()) is not None:
                self._stalled = float(fields["total"])
                self._read_at, self._span = self._clock(), FRESH_SPAN_SECS
        except (OSError, ValueError, KeyError):
            pass

    def _psi_some(self) -> dict[str, str] | None:
        """The fields of the pressure file's `some` line (avg10 ... total); None without one."""
        for line in self._psi.read_text().splitlines():
            if line.startswith("some "):
                return dict(part.split("=", 1) for part in line.split()[1:])
        return None

    def taken_cores(self) -> int | None:
        """Cores other programs take now (None when unknown): their normal-priority CPU over the last START_SPAN_SECS,
        a core for each TAKEN_PERCENT of one, and no more than the other tasks runnable at this instant (/proc/stat's
        procs_running, less the reader), so a program that just ended does not count."""
        others = self._others(START_SPAN_SECS)
        self._rebase()
        if others is None or self.running is None:
            return None
        return max(0, min(int((others + 100.0 - TAKEN_PERCENT) // 100.0), self.running - 1))


class ThreadGovernor:
    """Chooses the threads of each decode step; `share` comes from any thread, the rest runs on the batch loop's."""

    def __init__(
        self,
        limit: int,
        *,
        cap: int | None = None,
        pressure: Callable[[], float | None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        on_change: Callable[[int], None] | None = None,
        taken: Callable[[], int | None] | None = None,
    ) -> None:
        self._cap = cap  # the configured thread count (n_threads): a share never raises it
        self._limit = max(1, min(limit, cap or limit))
        self.threads = self._limit
        if pressure is None:
            reader = CpuPressure(clock=clock)
            pressure, taken = reader, taken or reader.taken_cores
        self._pressure = pressure
        self._taken = taken  # cores other programs take now (CpuPressure.taken_cores)
        self._stepped_at = -1e18  # when next_threads last ran
        self._idled = False  # the loop waited for work since the last step
        self._clock = clock
        self.on_change = on_change
        self._limit_seen = self._limit
        self._cut = 0  # threads below the limit the governor chose (contention)
        self._quiet: dict[tuple[int, int], float] = {}  # fastest step per (threads, tokens decoded)
        self._steps: list[float] = []
        self._ratios: list[float] = []
        self._typical: float | None = None  # the last window's typical step at the current count
        self._fresh = True  # the next step is the first at this count: not judged
        self._trying: tuple[int, float] | None = None  # (the cut before the try, its typical step)
        self._backoff = PROBE_SECS
        self._try_at = 0.0
        self._changed_at = -1e18  # when the thread count last changed
        self._contended = False  # a settled reading below the limit said busy: a calm one makes a try due at once

    @property
    def limit(self) -> int:
        """The most threads allowed now (the core share, or the configured count when lower)."""
        return self._limit

    def share(self, threads: int) -> int:
        """A new limit (the scheduler's share of `threads` cores, at most the configured count); it takes effect at
        the next step, less what the governor cut for contention. Returns the threads that step will use."""
        self._limit = max(1, min(threads, self._cap or threads))
        return max(1, self._limit - min(self._cut, self._limit - 1))

    def idle(self) -> None:
        """Called when the batch loop starts waiting for work and every IDLE_TICK_SECS while it waits: keeps the
        reading of other programs' CPU current, so a new request's first step is judged on the last half second, not
        on a stale spell."""
        self._idled = True
        if self._taken is not None:
            self._taken()

    def next_threads(self) -> int:
        """The threads for the next decode step (called before it)."""
        if self._limit != self._limit_seen:  # the share changed: a try in flight compares nothing any more
            self._limit_seen = self._limit
            if self._trying is not None:
                self._cut, self._trying, self._typical = self._trying[0], None, None
        now = self._clock()
        if (self._idled or now - self._stepped_at >= IDLE_SECS) and self._trying is None and self._taken is not None:
            self._start_cut()
        self._stepped_at, self._idled = now, False
        self._cut = min(self._cut, self._limit - 1)
        if self._cut and self._trying is None:
            now = self._clock()
            value = self._pressure()
            calm = value is None or value < CALM_PERCENT
            if now - self._changed_at >= SETTLE_SECS:  # the reading shows this thread count alone
                if value is not None and value > BUSY_PERCENT:
                    self._contended = True
                elif calm and self._contended:  # the contention ended: the full share is worth a try now
                    self._contended, self._backoff, self._try_at = False, PROBE_SECS, now
            if calm and now >= self._try_at:
                self._try(self._cut - 1, self._typical)
        self._set(max(1, self._limit - self._cut))
        return self.threads

    def record(self, secs: float, tokens: int) -> None:
        """A decode step of `tokens` generated tokens (no prompt chunk) took `secs`."""
        if tokens <= 0 or secs <= 0:
            return
        key = (self.threads, tokens)
        quiet = self._quiet[key] = min(self._quiet.get(key, secs), secs)
        extreme = self.threads > 1 and secs >= EXTREME * quiet  # one step decides: threads preempted mid-barrier
        if self._fresh and not extreme:
            self._fresh = False
            return
        self._fresh = False
        self._steps.append(secs)
        self._ratios.append(secs / quiet)
        far = extreme or self._far_off()
        if len(self._steps) < WINDOW and not far:
            return
        typical = secs if extreme else statistics.median(self._steps[-EARLY:] if far else self._steps)
        stretched = far or statistics.median(self._ratios) > STRETCH
        self._steps.clear()
        self._ratios.clear()
        now = self._clock()
        if self._trying is not None:
            before, before_typical = self._trying
            self._trying = None
            if typical <= before_typical * KEEP:  # the try paid: keep it
                self._backoff = PROBE_SECS
                self._try_at = now + PROBE_SECS
                self._typical = typical
            else:
                self._backoff = min(self._backoff * 2, MAX_BACKOFF_SECS)
                self._try_at = now + self._backoff
                self._cut = before
                self._set(max(1, self._limit - before))
            return
        self._typical = typical
        if self.threads > 1 and (far or (now >= self._try_at and (stretched or self._busy()))):
            self._try(self._cut + 1, typical)
            self._set(max(1, self._limit - self._cut))

    def _far_off(self) -> bool:
        """The last EARLY steps already decide: a try far slower than before it, or, with more than one thread,
        steps far past their quiet pace (a spinning pair beside a busy program) once the backoff passed, or at once
        when they are also far slower than this count's last window (a new contention: the failed tries that set
        the backoff saw another one)."""
        if len(self._steps) < EARLY:
            return False
        recent = min(self._steps[-EARLY:])
        if self._trying is not None:
            return recent > self._trying[1] * FAR
        if self.threads == 1 or min(self._ratios[-EARLY:]) <= STRETCH * FAR:
            return False
        return self._clock() >= self._try_at or recent > FAR * (self._typical or float("inf"))

    def _start_cut(self) -> None:
        """Before the first step after an idle spell: one thread fewer for each core other programs take now (a
        spinning pair beside a hog makes steps of seconds; a calm reading later tries the full share again), or, when
        the busy programs that cost threads are gone, a try of what they left at once (else when the backoff allows)."""
        assert self._taken is not None
        taken = self._taken()
        if taken is None:
            return
        cut = min(taken, self._limit - 1)
        if cut > self._cut:  # readings from before this step say nothing of it: the next tries wait for new ones
            now = self._clock()
            self._cut, self._typical, self._contended = cut, None, True
            self._changed_at, self._try_at = now, max(self._try_at, now + PROBE_SECS)
        elif cut < self._cut and (self._contended or self._clock() >= self._try_at):
            self._try(cut, self._typical)

    def _try(self, cut: int, typical: float | None) -> None:
        self._trying = (self._cut, float("inf") if typical is None else typical)
        self._cut = cut
        self._contended = False

    def _set(self, threads: int) -> None:
        if threads == self.threads:
            return
        self.threads = threads
        self._fresh = True
        self._changed_at = self._clock()
        self._steps.clear()
        self._ratios.clear()
        if self.on_change is not None:
            self.on_change(threads)

    def _busy(self) -> bool:
        value = self._pressure()
        return value is not None and value > BUSY_PERCENT


def _clock_ticks() -> int:
    """/proc/stat's jiffies per second (USER_HZ)."""
    try:
        return max(1, os.sysconf("SC_CLK_TCK"))
    except (ValueError, OSError):
        return 100


def engine_governor(
    options: LlamaOptions, model_id: str, report: Callable[[str, int], None] | None
) -> ThreadGovernor | None:
    """The governor of a model's batch loop (None with adapt_threads off); `report` hears of each change."""
    if not options.adapt_threads:
        return None
    on_change = (lambda threads: report(model_id, threads)) if report is not None else None
    return ThreadGovernor(options.threads(), cap=options.n_threads, on_change=on_change)
