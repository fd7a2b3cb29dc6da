"""The server's stores on a budget: each key's responses and conversations bounded by count and bytes (one key's new
responses never evict another's), and a full disk (SQLite's own SQLITE_FULL, from a database that may not grow)
answers 507, reports a response whose end it could not write as failed, and does not stop the server starting."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
from hypnos.errors import HypnosError
from hypnos_server.responses_store import ResponseStore, StoredResponse
from hypnos_server.storage import StorageFull


def stored(response_id: str, owner: str = "alice", text: str = "hi", status: str = "completed") -> StoredResponse:
    return StoredResponse(
        id=response_id,
        owner=owner,
        created_at=time.time(),
        response={"id": response_id, "status": status, "output": [{"type": "message", "content": text}]},
        input_items=[{"type": "message", "role": "user", "content": text}],
        conversation=[],
    )


def fill_the_disk(db: sqlite3.Connection) -> None:
    """The database may not grow by one page more: SQLite answers SQLITE_FULL as on a full disk."""
    pages = db.execute("PRAGMA page_count").fetchone()[0]
    db.execute(f"PRAGMA max_page_count = {pages}")


def free_the_disk(db: sqlite3.Connection) -> None:
    db.execute("PRAGMA max_page_count = 1073741823")


def test_one_keys_new_responses_never_evict_another_keys(tmp_path: Path) -> None:
    store = ResponseStore(tmp_path, max_count=30, max_age_secs=3600)
    for index in range(10):
        store.put(stored(f"resp_bob_{index}", owner="bob"))
    for index in range(40):
        store.put(stored(f"resp_alice_{index}"))
    assert all(store.get(f"resp_bob_{index}", "bob") is not None for index in range(10))
    kept = [index for index in range(40) if store.get(f"resp_alice_{index}", "alice") is not None]
    assert kept == list(range(10, 40))  # alice's own oldest went
    store.close()


def test_a_keys_responses_are_bounded_in_bytes_the_newest_always_kept(tmp_path: Path) -> None:
    store = ResponseStore(tmp_path, max_count=1000, max_age_secs=3600, max_bytes=20_000)
    store.put(stored("resp_bob", owner="bob", text="b" * 4000))
    for index in range(20):
        store.put(stored(f"resp_{index}", text="a" * 4000))  # ~8 KB each, with its input
    kept = [index for index in range(20) if store.get(f"resp_{index}", "alice") is not None]
    assert kept == [18, 19]
    store.put(stored("resp_huge", text="x" * 50_000))  # alone beyond the bound: kept, the others go
    assert store.get("resp_huge", "alice") is not None and store.get("resp_19", "alice") is None
    assert store.get("resp_bob", "bob") is not None
    store.close()


def test_a_conversation_outgrowing_the_keys_bytes_is_refused_and_old_ones_go(tmp_path: Path) -> None:
    store = ResponseStore(tmp_path, max_count=1000, max_age_secs=3600, max_bytes=10_000)
    conversations = store.conversations
    item = {"id": "msg_1", "type": "message", "content": "c" * 3000}
    first = conversations.create("alice", {}, [item])
    second = conversations.create("alice", {}, [item])
    theirs = conversations.create("bob", {}, [item])
    conversations.create("alice", {}, [item, item])  # past 10 KB for alice: her oldest goes, bob's stays
    assert conversations.get(first.id, "alice") is None and conversations.get(second.id, "alice") is not None
    assert conversations.get(theirs.id, "bob") is not None
    with pytest.raises(HypnosError) as refused:
        conversations.append(second.id, "alice", [item, item, item, item])
    assert refused.value.status == 400 and "responses_max_bytes" in refused.value.message
    assert len(conversations.items(second.id)) == 1  # nothing of the refused append stayed
    store.close()


def test_a_full_disk_refuses_with_507_and_a_final_state_it_cannot_write_reads_back_failed(tmp_path: Path) -> None:
    store = ResponseStore(tmp_path, max_count=100, max_age_secs=3600)
    store.put(stored("resp_bg", status="queued"), pending=True)
    fill_the_disk(store._db)
    with pytest.raises(StorageFull) as full:
        store.put(stored("resp_new", text="n" * 20_000))
    assert full.value.status == 507 and full.value.type == "insufficient_storage"
    with pytest.raises(StorageFull):
        store.put(stored("resp_bg", text="done " * 5000))  # the background response's end
    kept = store.get("resp_bg", "alice")
    assert kept is not None and kept.response["status"] == "failed"
    assert kept.response["error"]["code"] == "insufficient_storage"
    assert store.get("resp_bg", "bob") is None
    free_the_disk(store._db)
    store.put(stored("resp_later"))  # the disk has room again: what it refused is written first
    store.close()
    again = ResponseStore(tmp_path, max_count=100, max_age_secs=3600)
    written = again.get("resp_bg", "alice")
    assert written is not None and written.response["status"] == "failed"
    again.close()


def test_the_store_opens_on_a_full_disk_and_fails_the_interrupted_responses_in_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = ResponseStore(tmp_path, max_count=1000, max_age_secs=3600)
    for index in range(300):  # failing them makes every row longer: the database must grow
        store.put(stored(f"resp_{index}", status="in_progress"), pending=True)
    store.close()
    connect = ResponseStore._connect

    def full_disk(self: ResponseStore, target: str) -> Any:
        db = connect(self, target)
        fill_the_disk(db)
        return db

    monkeypatch.setattr(ResponseStore, "_connect", full_disk)
    reopened = ResponseStore(tmp_path, max_count=1000, max_age_secs=3600)  # before: the startup write raised
    interrupted = reopened.get("resp_7", "alice")
    assert interrupted is not None and interrupted.response["status"] == "failed"
    assert "server stopped" in interrupted.response["error"]["message"]
    reopened.close()


def test_a_full_disk_answers_507_to_a_new_response_and_fails_a_background_one_instead_of_leaving_it_queued(
    tmp_path: Path,
) -> None:
    from litestar.testing import TestClient
    from server_kit import build_app, config, wait_ready

    slow = {"id": "slow-chat", "modality": "text_generation", "engine": "fake", "fake": {"tokens": 400, "token_ms": 2}}
    raw = config(server={"data_dir": str(tmp_path / "data")})
    raw["models"].append(slow)
    with TestClient(build_app(raw)) as client:
        wait_ready(client)
        store = client.app.state.hypnos.responses
        started = client.post("/v1/responses", json={"model": "slow-chat", "input": "go on " * 300, "background": True})
        assert started.status_code == 200 and started.json()["status"] == "queued"
        fill_the_disk(store._db)
        refused = client.post("/v1/responses", json={"model": "fake-chat", "input": "x " * 20_000})
        assert refused.status_code == 507, refused.text
        assert refused.json() == {
            "error": {"message": refused.json()["error"]["message"], "type": "insufficient_storage"}
        }
        for _ in range(500):
            polled = client.get(f"/v1/responses/{started.json()['id']}").json()
            if polled["status"] not in ("queued", "in_progress"):
                break
            time.sleep(0.02)
        assert polled["status"] == "failed" and polled["error"]["code"] == "insufficient_storage"
