"""The kit's batcher: concurrent requests share library calls, a lone one goes at once, failures and cancellations
stay with their own request."""

from __future__ import annotations

import asyncio
import threading

import pytest
from hypnos.engine import CancelToken
from hypnos.errors import HypnosError, invalid_request
from hypnos.kit.batching import Batcher, BatchingOptions, BatchLimits
from hypnos.kit.worker import ModelWorker


class Library:
    """A library call that records its batches, can be held at a gate, and refuses the item 'boom'."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()

    def __call__(self, batch: list[str]) -> list[str]:
        self.calls.append(list(batch))
        self.entered.set()
        self.gate.wait(30)
        if "boom" in batch:
            raise ValueError("the library refuses boom")
        return [item.upper() for item in batch]


def refuse_bad(items: list[str]) -> list[str]:
    """A prepare step that refuses a request holding 'bad' (as a tokenizer refuses a too-long input)."""
    if "bad" in items:
        raise invalid_request("`input` holds bad")
    return items


def batcher(library: Library, size: int = 8, wait_ms: float = 0.0) -> Batcher[str, str, str]:
    return Batcher(ModelWorker("test"), library, BatchLimits(size, wait_ms), prepare=refuse_bad)


async def held(library: Library) -> None:
    """Wait (off the loop) until the library's first call is running, so that what follows queues behind it."""
    await asyncio.to_thread(library.entered.wait, 30)


def test_a_lone_request_never_waits_for_the_window() -> None:
    library = Library()
    work = batcher(library, wait_ms=600_000)  # ten minutes: a lone request waiting for it would time out below

    async def walk() -> list[str]:
        return (await asyncio.wait_for(work.run(["a", "b"], CancelToken()), 30)).results

    assert asyncio.run(walk()) == ["A", "B"]
    assert library.calls == [["a", "b"]]


def test_requests_queued_behind_a_call_share_the_next_one() -> None:
    library = Library()
    library.gate.clear()
    work = batcher(library)

    async def walk() -> list[list[str]]:
        first = asyncio.ensure_future(work.run(["first"], CancelToken()))
        await held(library)
        rest = [asyncio.ensure_future(work.run([f"t{i}"], CancelToken())) for i in range(4)]
        await asyncio.sleep(0.01)
        library.gate.set()
        answers = await asyncio.gather(first, *rest)
        assert [answer.shared for answer in answers] == [1, 4, 4, 4, 4]
        return [answer.results for answer in answers]

    assert asyncio.run(walk()) == [["FIRST"], ["T0"], ["T1"], ["T2"], ["T3"]]
    assert library.calls == [["first"], ["t0", "t1", "t2", "t3"]]


@pytest.mark.parametrize(("wait_ms", "calls"), [(60_000, [["a", "b", "c"]]), (0, [["a", "b"], ["c"]])])
def test_a_batch_of_several_requests_waits_for_the_window_to_fill(wait_ms: float, calls: list[list[str]]) -> None:
    library = Library()
    work = batcher(library, size=3, wait_ms=wait_ms)  # a full batch leaves at once, whatever is left of the window

    async def walk() -> None:
        first = [asyncio.ensure_future(work.run([item], CancelToken())) for item in ("a", "b")]
        await asyncio.sleep(0.02)  # a third request, a little later
        await asyncio.gather(*first, work.run(["c"], CancelToken()))

    asyncio.run(walk())
    assert library.calls == calls


def test_a_batch_takes_at_most_max_batch_size_items_in_arrival_order() -> None:
    library = Library()
    work = batcher(library, size=4)

    async def walk() -> tuple[list[str], list[str]]:
        one, two = await asyncio.gather(
            work.run([f"a{i}" for i in range(6)], CancelToken()), work.run(["b0", "b1", "b2"], CancelToken())
        )
        return one.results, two.results

    one, two = asyncio.run(walk())
    assert one == [f"A{i}" for i in range(6)] and two == ["B0", "B1", "B2"]
    assert library.calls == [["a0", "a1", "a2", "a3"], ["a4", "a5", "b0", "b1"], ["b2"]]
    assert work.largest_batch == 4 and work.batches_run == 3


def test_a_cancelled_request_ends_at_once_and_its_batch_serves_the_others() -> None:
    library = Library()
    library.gate.clear()
    work = batcher(library)

    async def walk() -> list[str]:
        blocker = asyncio.ensure_future(work.run(["first"], CancelToken()))
        await held(library)
        token = CancelToken()
        leaving = asyncio.ensure_future(work.run(["gone"], token))
        staying = asyncio.ensure_future(work.run(["stays"], CancelToken()))
        await asyncio.sleep(0.01)
        token.cancel()  # while its batch has not run: it ends now, the gate still closed
        with pytest.raises(HypnosError) as caught:
            await asyncio.wait_for(leaving, 30)
        assert caught.value.status == 499
        library.gate.set()
        await blocker
        return (await staying).results

    assert asyncio.run(walk()) == ["STAYS"]
    assert library.calls == [["first"], ["stays"]]


def test_a_request_cancelled_mid_call_ends_and_the_call_serves_the_rest_of_its_batch() -> None:
    library = Library()
    library.gate.clear()
    work = batcher(library)

    async def walk() -> list[str]:
        token = CancelToken()
        leaving = asyncio.ensure_future(work.run(["gone"], token))
        staying = asyncio.ensure_future(work.run(["stays"], CancelToken()))
        await held(library)  # both are inside the one call now
        token.cancel()
        with pytest.raises(HypnosError):
            await asyncio.wait_for(leaving, 30)
        library.gate.set()
        return (await staying).results

    assert asyncio.run(walk()) == ["STAYS"]
    assert library.calls == [["gone", "stays"]]


def test_a_refused_input_fails_only_its_own_request() -> None:
    library = Library()
    library.gate.clear()
    work = batcher(library)

    async def walk() -> tuple[list[object], int]:
        blocker = asyncio.ensure_future(work.run(["first"], CancelToken()))
        await held(library)
        queued = [work.run(items, CancelToken()) for items in (["ok1"], ["bad"], ["boom"], ["ok2"])]
        tasks = [asyncio.ensure_future(job) for job in queued]
        await asyncio.sleep(0.01)
        library.gate.set()
        await blocker
        outcomes = await asyncio.gather(*tasks, return_exceptions=True)
        return [o.results if not isinstance(o, BaseException) else o for o in outcomes], work.batches_run

    outcomes, calls = asyncio.run(walk())
    assert outcomes[0] == ["OK1"] and outcomes[3] == ["OK2"]
    assert isinstance(outcomes[1], HypnosError) and outcomes[1].status == 400  # refused before the call
    assert isinstance(outcomes[2], ValueError)  # the library's own refusal, its request alone
    # the shared call failed on boom, so each request ran again on its own; bad never reached the library
    assert library.calls[1] == ["ok1", "boom", "ok2"] and sorted(library.calls[2:]) == [["boom"], ["ok1"], ["ok2"]]
    assert calls == 5


def test_the_model_options_override_the_engine_defaults() -> None:
    defaults = BatchLimits(max_batch_size=32, max_wait_ms=2.0)
    assert defaults.configured(None) == defaults
    assert defaults.configured(BatchingOptions(max_batch_size=4)) == BatchLimits(4, 2.0)
    assert defaults.configured(BatchingOptions(max_wait_ms=0)) == BatchLimits(32, 0.0)


class FailingOnce(ModelWorker):
    """A worker whose first job fails before it runs (as a closed or broken worker would)."""

    def __init__(self) -> None:
        super().__init__("failing")
        self.failed = False

    async def run(self, function, *args):  # type: ignore[no-untyped-def]
        if not self.failed:
            self.failed = True
            raise RuntimeError("the worker broke")
        return await super().run(function, *args)


def test_a_failing_worker_fails_its_batch_and_the_next_requests_are_served() -> None:
    library = Library()
    work: Batcher[str, str, str] = Batcher(FailingOnce(), library, BatchLimits(8, 0.0))

    async def walk() -> list[str]:
        with pytest.raises(RuntimeError, match="the worker broke"):
            await asyncio.wait_for(work.run(["lost"], CancelToken()), 30)
        return (await asyncio.wait_for(work.run(["next"], CancelToken()), 30)).results

    assert asyncio.run(walk()) == ["NEXT"]
