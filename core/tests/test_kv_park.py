"""The KV park store: what is kept, what a changed layout or a lower cap drops, and the status it reports."""

from __future__ import annotations

from hypnos.config import KvParkConfig
from hypnos.engine import ParkedSlot
from hypnos.scheduler.kv_park import KvParkStore


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _slots(*sizes: int) -> list[ParkedSlot]:
    return [ParkedSlot(seq_id=i, tokens=list(range(size // 10)), state=b"x" * size) for i, size in enumerate(sizes)]


def test_parked_slots_come_back_once_with_the_same_layout() -> None:
    store = KvParkStore(KvParkConfig(enabled=True, max_bytes=1000))
    assert store.park("chat", ("ctx", 4096), _slots(100, 200))
    assert store.used_bytes == 300
    assert store.take("chat", ("ctx", 8192)) == []  # another window: dropped, the conversation prefills again
    assert store.used_bytes == 0
    store.park("chat", ("ctx", 4096), _slots(100))
    assert [slot.seq_id for slot in store.take("chat", ("ctx", 4096))] == [0]
    assert store.take("chat", ("ctx", 4096)) == []


def test_off_empty_or_too_big_parks_nothing() -> None:
    assert not KvParkStore(KvParkConfig(enabled=False)).park("chat", 1, _slots(10))
    store = KvParkStore(KvParkConfig(enabled=True, max_bytes=100))
    assert not store.park("chat", 1, [])
    assert not store.park("chat", 1, _slots(101))
    assert store.status().models == []


def test_the_cap_drops_the_least_recently_parked_first() -> None:
    clock = Clock()
    store = KvParkStore(KvParkConfig(enabled=True, max_bytes=500), clock=clock)
    store.park("a", 1, _slots(200))
    clock.now += 1
    store.park("b", 1, _slots(200))
    clock.now += 1
    store.park("c", 1, _slots(200))  # 600 > 500: "a" goes
    assert [m.model for m in store.status().models] == ["b", "c"]
    store.configure(max_bytes=250)  # a lower cap: the oldest until the rest fits
    status = store.status()
    assert [m.model for m in status.models] == ["c"] and status.used_bytes == 200 and status.max_bytes == 250


def test_status_reports_slots_tokens_bytes_and_age() -> None:
    clock = Clock()
    store = KvParkStore(KvParkConfig(enabled=True, max_bytes=10_000), clock=clock)
    store.park("chat", 1, _slots(300, 500))
    clock.now += 4.25
    (model,) = store.status().models
    assert (model.model, model.slots, model.tokens, model.bytes) == ("chat", 2, 80, 800)
    assert model.parked_secs_ago == 4.25


def test_turning_it_off_drops_everything_and_drop_forgets_one_model() -> None:
    store = KvParkStore(KvParkConfig(enabled=True, max_bytes=10_000))
    store.park("a", 1, _slots(10))
    store.park("b", 1, _slots(10))
    store.drop("a")
    assert [m.model for m in store.status().models] == ["b"]
    store.configure(enabled=False)
    status = store.status()
    assert status.enabled is False and status.models == [] and status.used_bytes == 0
    assert not store.park("b", 1, _slots(10))


def test_the_budget_left_by_the_bookings_limits_parking_older_states_giving_way() -> None:
    clock = Clock()
    room = {"bytes": 450}
    store = KvParkStore(KvParkConfig(enabled=True, max_bytes=10_000), clock=clock, budget=lambda: room["bytes"])
    assert store.park("a", 1, _slots(200))
    clock.now += 1
    assert store.park("b", 1, _slots(200))
    clock.now += 1
    assert not store.park("c", 1, _slots(500))  # larger than the whole room: refused, the others stay
    assert [m.model for m in store.status().models] == ["a", "b"]
    assert store.park("c", 1, _slots(200))  # 600 > 450: the least recently parked gives way
    assert [m.model for m in store.status().models] == ["b", "c"]
    room["bytes"] = 0
    assert not store.park("d", 1, _slots(1)) and store.used_bytes == 400


def test_release_drops_the_least_recently_parked_until_enough_is_freed() -> None:
    clock = Clock()
    store = KvParkStore(KvParkConfig(enabled=True, max_bytes=10_000), clock=clock)
    for model_id in ("a", "b", "c"):
        store.park(model_id, 1, _slots(100))
        clock.now += 1
    assert store.release(150) == ["a", "b"]
    assert [m.model for m in store.status().models] == ["c"] and store.used_bytes == 100
    assert store.release(0) == [] and store.release(1000) == ["c"] and store.used_bytes == 0
