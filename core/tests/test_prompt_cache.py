"""The prompt cache store: the longest prefix found across RAM and disk, caps that spill RAM to disk, a disk tier
indexed again at start, and cache files that are torn, truncated, foreign or of a changed model refused and dropped."""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

import pytest
from hypnos.config import KvParkConfig, PromptCacheConfig
from hypnos.kit.prompt_cache import BLOCK_TOKENS, PromptSaver, cache_namespace, file_identity
from hypnos.scheduler.kv_park import KvParkStore
from hypnos.scheduler.prompt_cache import PromptCacheStore

NS = cache_namespace("weights", "f16", 4096)
SYSTEM = list(range(1000, 1000 + 3 * BLOCK_TOKENS))  # three blocks every conversation shares


def conversation(n: int, blocks: int = 2) -> list[int]:
    return SYSTEM + [n] * (blocks * BLOCK_TOKENS + 5)


def make_store(folder: Path | None, **config: int) -> PromptCacheStore:
    settings = PromptCacheConfig(**{"min_tokens": 1, **config})  # type: ignore[arg-type]
    return PromptCacheStore(folder, lambda model_id: settings if model_id in ("chat", "other") else None)


@pytest.fixture
def weights(tmp_path: Path) -> list[str]:
    path = tmp_path / "model.gguf"
    path.write_bytes(b"weights")
    return [file_identity(path)]


def state_of(tokens: list[int]) -> bytes:
    return bytes(t % 251 for t in tokens) * 4


def test_the_longest_shared_prefix_is_found(tmp_path: Path, weights: list[str]) -> None:
    store = make_store(None)
    assert store.lookup("chat", NS, conversation(1), 0) is None  # nothing saved: a miss
    store.save("chat", NS, SYSTEM, state_of(SYSTEM), weights)
    store.save("chat", NS, conversation(1), state_of(conversation(1)), weights)
    hit = store.lookup("chat", NS, [*conversation(1), 7, 7, 7], 0)
    assert hit is not None and hit.tokens == conversation(1) and hit.state == state_of(conversation(1))
    assert hit.tier == "ram"
    shared = store.lookup("chat", NS, conversation(2), 0)  # another conversation: the shared system prompt
    assert shared is not None and shared.tokens[: len(SYSTEM)] == SYSTEM
    assert store.lookup("chat", cache_namespace("other layout"), conversation(1), 0) is None
    assert store.lookup("chat", NS, conversation(1), len(conversation(1))) is None  # a slot holds it already
    assert store.hits == {"slots": 1, "ram": 2, "disk": 0} and store.misses == 2


def test_a_longer_save_of_the_same_conversation_replaces_the_shorter(weights: list[str]) -> None:
    store = make_store(None)
    store.save("chat", NS, conversation(1, 1), state_of(conversation(1, 1)), weights)
    store.save("chat", NS, conversation(1, 2), state_of(conversation(1, 2)), weights)
    (model,) = store.status().models
    assert model.entries == 1 and model.ram_bytes == len(state_of(conversation(1, 2)))


def test_ram_over_its_cap_spills_to_disk_and_a_restart_finds_it_there(tmp_path: Path, weights: list[str]) -> None:
    size = len(state_of(conversation(1)))
    store = make_store(tmp_path / "cache", ram_bytes=size)
    for n in (1, 2):
        assert store.save("chat", NS, conversation(n), state_of(conversation(n)), weights)
    store.flush()
    status = store.status()
    assert status.ram_bytes == size and status.disk_bytes > 2 * size  # one in RAM, both on disk
    hit = store.lookup("chat", NS, conversation(1), 0)  # the least recently used went out of RAM
    assert hit is not None and hit.tier == "disk" and hit.state == state_of(conversation(1))
    restarted = make_store(tmp_path / "cache")
    assert restarted.status().ram_bytes == 0 and restarted.status().models[0].entries == 2
    hit = restarted.lookup("chat", NS, [*conversation(2), 1, 2, 3], 0)
    assert hit is not None and hit.tier == "disk" and hit.tokens == conversation(2)
    assert restarted.hits["disk"] == 1


def test_the_disk_cap_drops_the_least_recently_used_file(tmp_path: Path, weights: list[str]) -> None:
    settings = PromptCacheConfig(min_tokens=1)
    store = PromptCacheStore(tmp_path / "cache", lambda model_id: settings)
    store.save("chat", NS, conversation(1), state_of(conversation(1)), weights)
    store.flush()
    (first,) = (tmp_path / "cache").glob("*/*.hpc")
    settings.disk_bytes = first.stat().st_size * 3 // 2  # room for one file, not two
    store.save("chat", NS, conversation(2), state_of(conversation(2)), weights)
    store.flush()
    assert [p.name for p in (tmp_path / "cache").glob("*/*.hpc")] != [first.name] and not first.exists()
    restarted = make_store(tmp_path / "cache")
    assert restarted.lookup("chat", NS, conversation(1), 0).tokens == conversation(2)  # type: ignore[union-attr]


def saved_file(tmp_path: Path, weights: list[str]) -> tuple[PromptCacheStore, Path]:
    store = make_store(tmp_path / "cache")
    store.save("chat", NS, conversation(1), state_of(conversation(1)), weights)
    store.flush()
    store.release_ram(1 << 30)  # only the disk copy is left
    (path,) = (tmp_path / "cache").glob("*/*.hpc")
    return store, path


@pytest.mark.parametrize("damage", ["torn", "truncated", "foreign"])
def test_a_damaged_or_foreign_file_is_refused_and_dropped(
    tmp_path: Path, weights: list[str], damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    store, path = saved_file(tmp_path, weights)
    data = bytearray(path.read_bytes())
    if damage == "torn":  # same length, a page of the state never written
        data[-100:-40] = bytes(60)
    elif damage == "truncated":
        del data[-500:]
    else:  # a valid file of another model, put where this model's file was
        other = make_store(tmp_path / "elsewhere")
        other.save("other", NS, conversation(1), state_of(conversation(1)), weights)
        other.flush()
        (theirs,) = (tmp_path / "elsewhere").glob("*/*.hpc")
        data = bytearray(theirs.read_bytes())
    path.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING):
        assert store.lookup("chat", NS, conversation(1), 0) is None
    assert not path.exists() and "dropping prompt cache file" in caplog.text
    assert store.status().models == [] and store.misses == 1


@pytest.mark.parametrize("damage", ["truncated", "foreign magic", "stale temp file"])
def test_a_restart_drops_files_it_cannot_trust(
    tmp_path: Path, weights: list[str], damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    _, path = saved_file(tmp_path, weights)
    if damage == "truncated":
        path.write_bytes(path.read_bytes()[:-1])
    elif damage == "foreign magic":
        path.write_bytes(b"GGUF" + path.read_bytes()[4:])
    else:
        path = path.with_name(".tmp-abc.hpc")
        path.write_bytes(b"half a write")
    with caplog.at_level(logging.WARNING):
        restarted = make_store(tmp_path / "cache")
    assert not path.exists()
    if damage != "stale temp file":
        assert "dropping prompt cache file" in caplog.text and restarted.status().models == []


def test_a_changed_model_file_invalidates_its_saved_states(tmp_path: Path, weights: list[str]) -> None:
    _, path = saved_file(tmp_path, weights)
    model = tmp_path / "model.gguf"
    model.write_bytes(b"other weights")
    os.utime(model, ns=(1, 1))
    restarted = make_store(tmp_path / "cache")
    assert restarted.status().models == [] and not path.exists()


def test_dropping_a_model_deletes_its_files(tmp_path: Path, weights: list[str]) -> None:
    store, _ = saved_file(tmp_path, weights)
    store.save("chat", NS, conversation(2), state_of(conversation(2)), weights)
    store.flush()
    store.drop("chat")
    assert store.status().models == [] and list((tmp_path / "cache").glob("*/*.hpc")) == []


def test_off_or_unknown_models_save_nothing(weights: list[str]) -> None:
    store = PromptCacheStore(None, lambda model_id: PromptCacheConfig(enabled=False))
    assert not store.save("chat", NS, SYSTEM, state_of(SYSTEM), weights)
    assert not make_store(None).save("unknown", NS, SYSTEM, state_of(SYSTEM), weights)
    assert not make_store(None).save("chat", NS, SYSTEM[:10], b"short", weights)  # less than a block


def test_ram_copies_are_booked_with_parked_kv_and_released_first(weights: list[str]) -> None:
    room = [10_000]
    park = KvParkStore(KvParkConfig(enabled=True, max_bytes=1 << 30), budget=lambda: room[0])
    store = make_store(None)
    park.attach_prompt_cache(store)
    size = len(state_of(conversation(1)))
    store.save("chat", NS, conversation(1), state_of(conversation(1)), weights)
    assert park.used_bytes == size == store.ram_bytes
    room[0] = size // 2  # the budgets leave less: a new save keeps only what fits
    store.save("chat", NS, conversation(2), state_of(conversation(2)), weights)
    assert store.ram_bytes == 0
    room[0] = 10_000
    store.save("chat", NS, conversation(3), state_of(conversation(3)), weights)
    assert park.release(1) == ["prompt cache"] and store.ram_bytes == 0 and park.used_bytes == 0


def test_parked_states_are_held_under_the_kv_park_cap_until_their_model_is_back(
    tmp_path: Path, weights: list[str]
) -> None:
    now = [100.0]
    size = len(state_of(conversation(1)))
    park = KvParkStore(KvParkConfig(enabled=True, max_bytes=2 * size), clock=lambda: now[0])
    store = make_store(tmp_path / "cache", ram_bytes=1)  # the cache's own RAM cap holds nothing
    park.attach_prompt_cache(store)
    assert store.save("chat", NS, conversation(1), state_of(conversation(1)), weights, parked=True)
    (held,) = park.status().models
    assert (held.model, held.slots, held.tokens, held.bytes) == ("chat", 1, len(conversation(1)), size)
    assert park.parked_bytes == park.used_bytes == store.ram_bytes == size  # in RAM, past ram_bytes
    now[0] = 101.0
    store.save("other", NS, conversation(2), state_of(conversation(2)), weights, parked=True)
    now[0] = 102.0
    store.save("other", NS, conversation(3), state_of(conversation(3)), weights, parked=True)
    store.flush()
    # past the cap the least recently parked model gave way: its state is on disk, no longer parked
    (held,) = park.status().models
    assert (held.model, held.slots, held.bytes) == ("other", 2, 2 * size)
    hit = store.lookup("chat", NS, conversation(1), 0)
    assert hit is not None and hit.tier == "disk" and hit.state == state_of(conversation(1))
    hit = store.lookup("other", NS, conversation(2), 0)  # found by prefix like any saved state
    assert hit is not None and hit.tier == "ram"
    store.unpark("other")  # its model is back in tier 1: ordinary states under its RAM cap (spilled to disk)
    assert park.status().models == [] and park.used_bytes == 0
    hit = store.lookup("other", NS, conversation(3), 0)
    assert hit is not None and hit.tier == "disk"
    park.configure(enabled=False)  # parking off: a parked save is an ordinary one
    store.save("chat", NS, conversation(4), state_of(conversation(4)), weights, parked=True)
    assert park.status().models == [] and store.ram_bytes == 0


def test_parked_states_give_way_after_the_cache_and_before_any_model(weights: list[str]) -> None:
    now = [100.0]
    size = len(state_of(conversation(1)))
    park = KvParkStore(KvParkConfig(enabled=True, max_bytes=1 << 30), clock=lambda: now[0])
    store = make_store(None)
    park.attach_prompt_cache(store)
    store.save("chat", NS, conversation(1), state_of(conversation(1)), weights, parked=True)
    now[0] = 101.0
    store.save("other", NS, conversation(2), state_of(conversation(2)), weights, parked=True)
    store.save("other", NS, conversation(3), state_of(conversation(3)), weights)  # an ordinary one
    assert park.used_bytes == 3 * size and park.parked_bytes == 2 * size
    assert park.release(1) == ["prompt cache"] and park.parked_bytes == 2 * size
    assert park.release(1) == ["chat"]  # the least recently parked
    assert [m.model for m in park.status().models] == ["other"]
    park.drop("other")
    assert park.used_bytes == 0 and store.lookup("other", NS, conversation(2), 0) is None


class SlowStore:
    """A store whose first save waits until released (the saver falls behind meanwhile)."""

    def __init__(self) -> None:
        self.saved: list[list[int]] = []
        self.entered, self.release = threading.Event(), threading.Event()

    def save(
        self, model_id: str, namespace: str, tokens: list[int], state: bytes, files: list[str], parked: bool
    ) -> bool:
        self.entered.set()
        self.release.wait(10)
        self.saved.append(tokens)
        return True


def test_a_saver_that_falls_behind_drops_a_superseded_save_before_the_oldest() -> None:
    store = SlowStore()
    saver = PromptSaver(store, "chat", [])  # type: ignore[arg-type]
    first, grown, longer = conversation(1, 1), conversation(1, 2), conversation(1, 3)
    saver.save(NS, first, b"1")
    assert store.entered.wait(10)  # the store holds the first one
    saver.save(NS, conversation(2), b"2")
    saver.save(NS, grown, b"3")
    saver.save(NS, longer, b"4")  # two wait: `grown`, which this one extends, gives way, not the older other one
    store.release.set()
    saver.close()
    assert store.saved == [first, conversation(2), longer] and saver.dropped == 1
