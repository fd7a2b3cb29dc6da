"""The batch loop's threads: the core share, cut while other programs want the cores, raised when calm again."""

from __future__ import annotations

from pathlib import Path

from hypnos.config import LimitsConfig
from hypnos.engine import EngineContext
from hypnos_llama.testing import chat_request, collect, make_engine, tier1
from hypnos_llama.thread_governor import EARLY, READ_EVERY_SECS, WINDOW, CpuPressure, ThreadGovernor


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Pressure:
    """A CPU pressure reading the test sets."""

    def __init__(self, value: float | None = None) -> None:
        self.value = value

    def __call__(self) -> float | None:
        return self.value


def steps(governor: ThreadGovernor, secs_by_threads: dict[int, float], count: int = WINDOW + 1) -> None:
    """Run `count` decode steps of one token, each taking what the chosen thread count takes now."""
    for _ in range(count):
        threads = governor.next_threads()
        governor.record(secs_by_threads[threads], tokens=1)


def run_for(governor: ThreadGovernor, clock: Clock, secs_by_threads: dict[int, float], seconds: float) -> None:
    """Decode one-token steps for `seconds` of the clock, each taking what the chosen thread count takes now."""
    end = clock.now + seconds
    while clock.now < end:
        secs = secs_by_threads[governor.next_threads()]
        clock.now += secs
        governor.record(secs, tokens=1)


QUIET = {2: 0.035, 1: 0.07}
ONE_BUSY_CORE = {2: 0.14, 1: 0.065}  # another program on one core: one thread is faster, and reads calm
HOG_PER_CORE = {2: 0.3, 1: 0.1}  # a busy program per core: one thread is faster, and the machine reads busy


def test_the_full_share_is_back_within_steps_of_the_contention_ending() -> None:
    clock, pressure, changes = Clock(), Pressure(5.0), []
    governor = ThreadGovernor(2, pressure=pressure, clock=clock, on_change=changes.append)
    run_for(governor, clock, QUIET, 1.0)
    run_for(governor, clock, ONE_BUSY_CORE, 130.0)  # tries of two threads fail: each waits twice as long
    assert governor.threads == 1
    tries = len(changes)
    run_for(governor, clock, ONE_BUSY_CORE, 60.0)
    assert len(changes) - tries <= 2  # steady contention: at most one try a minute, no flapping
    pressure.value = 80.0
    tries = len(changes)
    run_for(governor, clock, HOG_PER_CORE, 30.0)
    assert len(changes) == tries  # busy all along: no try
    pressure.value = 2.0  # the programs ended
    steps(governor, QUIET, count=3)
    assert governor.threads == 2  # at once, not after the failed tries' backoff
    steps(governor, QUIET)
    assert governor.threads == 2  # and kept: faster


def test_one_step_far_past_its_quiet_pace_cuts_a_thread_at_once() -> None:
    """A hog starting beside two decode threads: the first step took 2.3 s against 0.036 quiet (bench cores); waiting
    for two more such steps cost seconds of the answer."""
    clock = Clock()
    governor = ThreadGovernor(2, pressure=Pressure(None), clock=clock)
    steps(governor, QUIET)
    steps(governor, QUIET, count=3)
    steps(governor, {2: 2.3, 1: 0.1}, count=1)
    assert governor.threads == 1
    steps(governor, {2: 2.3, 1: 0.1})  # and kept: faster
    assert governor.threads == 1


def test_a_spinning_pair_beside_a_hog_is_cut_within_a_few_steps() -> None:
    clock = Clock()
    governor = ThreadGovernor(2, pressure=Pressure(None), clock=clock)
    steps(governor, QUIET)
    steps(governor, QUIET, count=3)  # the quiet pace is known, a window is under way
    steps(governor, HOG_PER_CORE, count=EARLY)
    assert governor.threads == 1  # far past the quiet pace: not a whole window of slow steps
    steps(governor, HOG_PER_CORE)
    assert governor.threads == 1  # kept


def test_a_hog_arriving_during_a_backoff_is_cut_at_once() -> None:
    clock, pressure = Clock(), Pressure(50.0)  # busy, but two threads are faster (a niced program beside)
    governor = ThreadGovernor(2, pressure=pressure, clock=clock)
    steps(governor, QUIET, count=2 * (WINDOW + 1))
    assert governor.threads == 2  # the try of one thread failed: the next waits out its backoff
    steps(governor, HOG_PER_CORE, count=1 + EARLY)
    assert governor.threads == 1  # steps far slower than the window before: a new contention, tried at once
    steps(governor, HOG_PER_CORE, count=3 * (WINDOW + 1))
    assert governor.threads == 1  # kept, and no flapping back


def test_a_try_that_is_far_slower_goes_back_within_a_few_steps() -> None:
    clock, pressure = Clock(), Pressure(None)  # no pressure reading: calm, so a try up comes
    governor = ThreadGovernor(2, pressure=pressure, clock=clock)
    steps(governor, QUIET)
    steps(governor, HOG_PER_CORE, count=EARLY + WINDOW + 1)
    assert governor.threads == 1
    clock.now += 10
    assert governor.next_threads() == 2  # the try
    governor.record(HOG_PER_CORE[2], tokens=1)  # its first step is not judged
    steps(governor, HOG_PER_CORE, count=EARLY)
    assert governor.threads == 1


def test_threads_drop_when_steps_stretch_and_fewer_are_faster() -> None:
    clock, pressure = Clock(), Pressure(None)
    governor = ThreadGovernor(2, pressure=pressure, clock=clock)
    steps(governor, {2: 0.035, 1: 0.07})  # quiet: two threads are twice as fast
    assert governor.threads == 2
    steps(governor, {2: 0.14, 1: 0.065})  # a busy program on one core: the spinning pair stalls
    assert governor.threads == 1  # tried one fewer ...
    steps(governor, {2: 0.14, 1: 0.065})
    assert governor.threads == 1  # ... and kept it: faster


def test_a_try_that_is_not_faster_goes_back() -> None:
    clock, pressure = Clock(), Pressure(50.0)  # the machine says busy, but two threads are still faster
    governor = ThreadGovernor(2, pressure=pressure, clock=clock)
    steps(governor, {2: 0.035, 1: 0.07})
    assert governor.threads == 1  # busy: one fewer is tried
    steps(governor, {2: 0.035, 1: 0.07})
    assert governor.threads == 2  # slower: back to two
    steps(governor, {2: 0.035, 1: 0.07}, count=3 * WINDOW)
    assert governor.threads == 2  # the next try waits (its backoff has not passed)


def test_threads_come_back_when_the_machine_is_calm() -> None:
    clock, pressure = Clock(), Pressure(80.0)  # busy from the start: the quiet pace was never seen
    governor = ThreadGovernor(2, pressure=pressure, clock=clock)
    steps(governor, {2: 0.14, 1: 0.065}, count=2 * (WINDOW + 1))
    assert governor.threads == 1
    clock.now += 10
    steps(governor, {2: 0.14, 1: 0.065})
    assert governor.threads == 1  # still busy: no try
    pressure.value = 2.0  # the other program ended
    steps(governor, {2: 0.035, 1: 0.07}, count=2 * (WINDOW + 1))
    assert governor.threads == 2


def test_the_share_limits_the_threads_at_the_next_step() -> None:
    changes: list[int] = []
    governor = ThreadGovernor(4, pressure=Pressure(None), clock=Clock(), on_change=changes.append)
    assert governor.share(1) == 1
    assert governor.next_threads() == 1
    assert governor.share(3) == 3
    assert governor.next_threads() == 3
    assert changes == [1, 3]
    capped = ThreadGovernor(4, cap=2, pressure=Pressure(None), clock=Clock())
    assert capped.share(8) == 2  # n_threads is the most a share gives


def test_cpu_pressure_reads_psi_else_steal(tmp_path: Path) -> None:
    psi = tmp_path / "cpu"
    psi.write_text("some avg10=12.50 avg60=4.54 avg300=4.87 total=1\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
    clock = Clock()
    assert CpuPressure(psi, tmp_path / "stat", clock)() == 12.5
    stat = tmp_path / "stat"
    reader = CpuPressure(tmp_path / "missing", stat, clock)
    stat.write_text("cpu  100 0 100 700 0 0 0 100 0 0\ncpu0 1 2 3\n")
    assert reader() is None  # one read: no interval yet
    stat.write_text("cpu  150 0 100 850 0 0 0 150 0 0\ncpu0 1 2 3\n")
    clock.now += 1
    assert reader() == 20.0  # 50 of 250 jiffies stolen


def test_cpu_pressure_is_the_stall_growth_over_the_last_quarter_second(tmp_path: Path) -> None:
    psi = tmp_path / "cpu"
    clock = Clock()
    reader = CpuPressure(psi, tmp_path / "stat", clock)

    def stalled(total_us: int) -> None:
        psi.write_text(f"some avg10=90.00 avg60=60.00 avg300=30.00 total={total_us}\nfull avg10=0 total=0\n")

    stalled(5_000_000)
    assert reader() == 90.0  # the first read: avg10
    clock.now += READ_EVERY_SECS
    stalled(5_000_000 + 125_000)
    assert reader() == 50.0  # 125 ms stalled in 250 ms, whatever avg10 still says
    clock.now += READ_EVERY_SECS
    assert reader() == 0.0  # calm at once: avg10 (90) would take tens of seconds to fall under 10
    clock.now += READ_EVERY_SECS / 2
    stalled(5_000_000 + 250_000)
    assert reader() == 0.0  # read again within the span: the same value
    clock.now += 10 - READ_EVERY_SECS / 2  # an idle loop reads seldom: its span is longer
    assert reader() == 1.25


def test_a_stall_while_only_niced_programs_compute_reads_calm(tmp_path: Path) -> None:
    psi, stat = tmp_path / "cpu", tmp_path / "stat"
    clock = Clock()
    own = [0.0]
    reader = CpuPressure(psi, stat, clock, own_cpu=lambda: own[0])

    def tick(stalled_us: int, user: int, nice: int, own_secs: float) -> None:
        psi.write_text(f"some avg10=40.00 avg60=0 avg300=0 total={stalled_us}\nfull avg10=0 total=0\n")
        stat.write_text(f"cpu  {user} {nice} 0 1000 0 0 0 0 0 0\ncpu0 1 2 3\n")
        own[0] = own_secs

    tick(5_000_000, 1000, 0, 0.0)
    assert reader() == 40.0  # the first read: avg10
    # a niced converter computes beside the decode and waits half the time: its CPU is the nice column, the user
    # column's growth is the decode's own CPU time
    clock.now += 1.0
    tick(5_500_000, 1100, 100, 1.0)
    assert reader() == 0.0
    # a program at normal priority computes too: the same stall is contention
    clock.now += 1.0
    tick(6_000_000, 1300, 200, 2.0)
    assert reader() == 50.0
    # after the loop idled 30 s (no reads), a program that started a second ago is not averaged away over the spell
    clock.now += 30.0
    tick(6_000_000 + 30 * 5_000, 1300 + 200, 200, 2.0)
    assert reader() == 0.5  # the stall itself, not 0: its other programs' share is unknown


async def test_a_loaded_engine_decodes_with_its_share(tiny_gguf: Path) -> None:
    reported: dict[str, int] = {}
    base = make_engine(tiny_gguf, llama={"n_threads": None})
    context = EngineContext(
        models_dir=tiny_gguf.parent, limits=LimitsConfig(), threads_changed=lambda m, n: reported.update({m: n})
    )
    engine = type(base)(base.model, context)
    await engine.load(tier1())
    governor = engine.governor
    assert governor is not None
    # a quiet machine: the share alone decides (another tenant's load on a shared CI box would cut a thread)
    governor._pressure, governor._taken = (lambda: 0.0), (lambda: 0)
    try:
        assert await engine.follow_cores([0, 1]) == 2
        await collect(engine, chat_request("hello"), max_tokens=4)
        assert engine._batch.context.threads == (2, 2)
        assert await engine.follow_cores([1]) == 1  # another model computes beside it now
        await collect(engine, chat_request("hello again"), max_tokens=4)
        assert engine._batch.context.threads == (1, 1)
        assert reported == {"tiny": 1}  # the status hears of it
    finally:
        await engine.unload()


async def test_the_loop_tells_its_governor_when_it_starts_waiting(tiny_gguf: Path) -> None:
    """A request arriving right after another (an agent's next turn, the bench's next row) is a new start: the
    governor hears of the wait at once, not at its next quarter-second tick."""
    base = make_engine(tiny_gguf, llama={"n_threads": None})
    engine = type(base)(base.model, EngineContext(models_dir=tiny_gguf.parent, limits=LimitsConfig()))
    await engine.load(tier1())
    try:
        governor, events = engine.governor, []
        assert governor is not None
        idle, next_threads = governor.idle, governor.next_threads
        governor.idle = lambda: (events.append("idle"), idle())[1]  # type: ignore[method-assign]
        governor.next_threads = lambda: (events.append("step"), next_threads())[1]  # type: ignore[method-assign]
        await collect(engine, chat_request("hello"), max_tokens=4)
        events.append("second")
        await collect(engine, chat_request("hello again"), max_tokens=4)  # at once: well within a tick
        second = events.index("second")
        last = second - events[second::-1].index("step")
        first = second + events[second:].index("step")
        assert "idle" in events[last:first], events
    finally:
        await engine.unload()


class Taken:
    """The cores other programs take now, as the test sets them."""

    def __init__(self, value: int | None = 0) -> None:
        self.value = value

    def __call__(self) -> int | None:
        return self.value


def test_a_request_arriving_beside_busy_programs_starts_with_fewer_threads() -> None:
    """A hog per core started while the loop idled: the first step of the next request ran two threads for 2.4 s
    (bench cores, 0.04 quiet) before any step could be judged."""
    clock, pressure, taken = Clock(), Pressure(None), Taken(0)
    governor = ThreadGovernor(2, pressure=pressure, clock=clock, taken=taken)
    run_for(governor, clock, QUIET, 1.0)
    assert governor.threads == 2
    clock.now += 5.0  # the loop idles; a busy program per core starts
    taken.value, pressure.value = 2, 80.0
    assert governor.next_threads() == 1  # before its first step
    governor.record(HOG_PER_CORE[1], tokens=1)
    run_for(governor, clock, HOG_PER_CORE, 10.0)
    assert governor.threads == 1
    clock.now += 5.0  # the programs end while the loop idles; the last reading still says busy
    taken.value = 0
    assert governor.next_threads() == 2  # the next request tries the full share at once
    governor.record(QUIET[2], tokens=1)
    steps(governor, QUIET)
    assert governor.threads == 2  # and keeps it: faster


def test_a_request_arriving_on_a_quiet_machine_keeps_its_share() -> None:
    clock, taken = Clock(), Taken(0)
    governor = ThreadGovernor(2, pressure=Pressure(None), clock=clock, taken=taken)
    run_for(governor, clock, QUIET, 1.0)
    clock.now += 5.0
    assert governor.next_threads() == 2
    taken.value = None  # nothing to judge by (no /proc/stat): as before
    clock.now += 5.0
    assert governor.next_threads() == 2


def test_taken_cores_are_other_programs_cpu_that_still_runs(tmp_path: Path) -> None:
    psi, stat = tmp_path / "cpu", tmp_path / "stat"
    psi.write_text("some avg10=0.00 avg60=0 avg300=0 total=0\nfull avg10=0 total=0\n")
    clock = Clock()
    reader = CpuPressure(psi, stat, clock, own_cpu=lambda: 0.0)
    quarter = reader._jiffies // 4  # one core busy for a quarter second

    def tick(user: int, nice: int, running: int) -> int | None:
        stat.write_text(f"cpu  {user} {nice} 0 1000 0 0 0 0 0 0\ncpu0 1 2 3\nprocs_running {running}\n")
        return reader.taken_cores()

    assert tick(1000, 0, 1) is None  # the first read: nothing to compare with
    clock.now += 0.25
    tick(1000 + 2 * quarter, 0, 3)  # a busy program per core (and the reader) runs
    clock.now += 0.25
    assert tick(1000 + 4 * quarter, 0, 3) == 2
    clock.now += 0.25
    assert tick(1000 + 6 * quarter, 0, 1) == 0  # they just ended: their CPU is in the span, but nothing else runs
    clock.now += 0.25
    tick(1000 + 6 * quarter, 2 * quarter, 3)  # niced programs compute (the nice column): they give way
    clock.now += 0.25
    assert tick(1000 + 6 * quarter, 4 * quarter, 3) == 0


class Machine:
    """The /proc/pressure/cpu and /proc/stat of a 2-core machine that the test runs forward: a busy program per core
    while `hog`, stalling the decode's thread all along; else nothing but the decode."""

    def __init__(self, tmp_path: Path, clock: Clock) -> None:
        self.psi, self.stat, self.clock = tmp_path / "cpu", tmp_path / "stat", clock
        self.stalled, self.user, self.running, self.hog = 0.0, 1000.0, 1, False
        self.reader = CpuPressure(self.psi, self.stat, clock, own_cpu=lambda: 0.0)
        self._write()

    def _write(self) -> None:
        self.psi.write_text(f"some avg10=0.00 avg60=0 avg300=0 total={int(self.stalled)}\nfull avg10=0 total=0\n")
        self.stat.write_text(f"cpu  {int(self.user)} 0 0 1000 0 0 0 0 0 0\ncpu0 1 2 3\nprocs_running {self.running}\n")

    def advance(self, secs: float) -> None:
        self.clock.now += secs
        if self.hog:
            self.stalled += secs * 1e6
            self.user += 2 * secs * self.reader._jiffies
        self._write()

    def decode(self, governor: ThreadGovernor, secs_by_threads: dict[int, float]) -> int:
        """One decode step of one token; the threads it ran."""
        threads = governor.next_threads()
        self.advance(secs_by_threads[threads])
        governor.record(secs_by_threads[threads], tokens=1)
        return threads


def test_after_the_loop_waited_a_busy_program_just_ended_costs_only_the_first_step(
    tmp_path: Path,
) -> None:
    """The bench's decode alone right after its hog row: without the loop's word that it waited, the first pressure
    reading spanned the hog's last quarter second and the request ran 4-6 steps at one thread before a try (~3% of
    the answer); after it, the reading spans the request's own first step."""
    clock = Clock()
    machine = Machine(tmp_path, clock)
    governor = ThreadGovernor(2, pressure=machine.reader, clock=clock, taken=machine.reader.taken_cores)
    for _ in range(20):
        machine.decode(governor, QUIET)
    machine.hog, machine.running = True, 3
    while clock.now < 110.0:
        machine.decode(governor, HOG_PER_CORE)
    assert governor.threads == 1
    for _ in range(2):  # the hog ends, the answer goes out and the next request comes 0.05 s later
        while clock.now - machine.reader._read_at < 0.15:  # the hog's last reading was a while before its end
            machine.decode(governor, HOG_PER_CORE)
        machine.hog, machine.running = False, 3  # its own client and server are runnable as it arrives
        governor.idle()
        machine.advance(0.05)
        first = [machine.decode(governor, QUIET) for _ in range(4)]
        assert first[0] == 1 and 2 in first[:3], first
        for _ in range(20):
            machine.decode(governor, QUIET)
        assert governor.threads == 2
        machine.hog = True
        while governor.threads == 2 or clock.now < 130.0:
            machine.decode(governor, HOG_PER_CORE)
