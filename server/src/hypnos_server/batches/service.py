"""The batch runner: each batch validated, then its lines run (a few at a time, each leased below every interactive
request), every finished line appended and fsynced before it counts; unfinished batches resume at start; a batch
past its completion_window expires with what it finished, a cancelled one stops."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

import anyio
import msgspec

from hypnos_server.batches.dispatch import run_line
from hypnos_server.batches.files_store import FileStore, write_atomically
from hypnos_server.batches.lines import BatchLine, answer_line, error_line, read_input
from hypnos_server.batches.store import ERRORS, INVALID, OUTPUT, BatchRecord, BatchStore

if TYPE_CHECKING:
    from hypnos_server.state import HypnosState

logger = logging.getLogger(__name__)

# Answers that mean "not now" (the model busy, loading, the server staging or stopping): the line runs again later.
RETRY_STATUSES = frozenset({429, 503})
RETRY_SECS = (0.05, 0.25, 1.0, 2.0, 5.0)


class BatchCounters:
    """What /metrics shows of the batches (hypnos_batch_*)."""

    def __init__(self) -> None:
        self.lines: dict[tuple[str, str], int] = {}  # (endpoint, outcome) -> lines
        self.yields = 0
        self.statuses: dict[str, str] = {}  # batch id -> status

    def line(self, endpoint: str, outcome: str) -> None:
        """Count one finished line (outcome: completed, failed or invalid)."""
        self.lines[(endpoint, outcome)] = self.lines.get((endpoint, outcome), 0) + 1


class BatchService:
    """The Files and Batches APIs' state: the stores, the running batches, the counters."""

    def __init__(self, state: HypnosState, dispatch: Any) -> None:
        server = state.settings.server
        data = state.settings.data_path
        self.state = state
        self.dispatch = dispatch
        self.files = FileStore(data, server.files_max_bytes, server.files_quota_bytes)
        self.store = BatchStore(data)
        self.counters = BatchCounters()
        self._slots = asyncio.Semaphore(server.batch_max_concurrent_lines)
        self._running: dict[str, asyncio.Task[None]] = {}
        self.live: dict[str, BatchRecord] = {}  # the running batches' records, the one copy routes read and change
        self._stops: dict[str, asyncio.Event] = {}

    # ---- lifecycle -----------------------------------------------------------------------------------------------

    async def start(self) -> None:
        """Resume every unfinished batch (after a crash or a restart)."""
        records = await anyio.to_thread.run_sync(self.store.list)
        for record in reversed(records):  # oldest first
            self.counters.statuses[record.id] = record.status
            if not record.finished:
                logger.info("resuming batch %s (%s)", record.id, record.status)
                self.submit(record)

    def submit(self, record: BatchRecord) -> None:
        """Start running a batch."""
        self.counters.statuses[record.id] = record.status
        self.live[record.id] = record
        self._stops[record.id] = asyncio.Event()
        task = asyncio.get_running_loop().create_task(self._run(record), name=f"hypnos-{record.id}")
        self._running[record.id] = task
        task.add_done_callback(lambda _: self._running.pop(record.id, None))

    async def get(self, owner: str, batch_id: str) -> BatchRecord | None:
        """This key's batch as it stands (a running one live), None for an unknown id or another key's."""
        live = self.live.get(batch_id)
        if live is not None:
            return live if live.owner == owner else None
        return await anyio.to_thread.run_sync(self.store.get, owner, batch_id)

    async def cancel(self, record: BatchRecord) -> None:
        """Stop a running batch: `cancelling` now, its lines in flight cancelled, `cancelled` once its files are
        stored (an ended batch stays as it is)."""
        if record.finished or record.status == "cancelling" or record.ending is not None:
            return
        record.status, record.cancelling_at = "cancelling", int(time.time())
        await self.save(record)
        stop = self._stops.get(record.id)
        if stop is not None:
            stop.set()

    async def halt(self) -> None:
        """At shutdown, before the leases in flight end: stop the runs (a line in flight is not answered; the
        batches stay unfinished on disk and resume at the next start)."""
        tasks = list(self._running.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def close(self) -> None:
        """Remove the temporary folders of stores without a data dir."""
        self.files.close()
        self.store.close()

    async def save(self, record: BatchRecord) -> None:
        """Write the batch (atomically) and note its status."""
        self.counters.statuses[record.id] = record.status
        await anyio.to_thread.run_sync(self.store.save, record)

    # ---- one batch -----------------------------------------------------------------------------------------------

    async def _run(self, record: BatchRecord) -> None:
        try:
            if record.ending is None:
                lines = await self._validate(record)
                if lines is None:
                    return
                if record.status == "in_progress":
                    await self._run_lines(record, lines)
                await self._count_ending(record)
            await anyio.to_thread.run_sync(self._hand_over, record)
            now = int(time.time())
            record.status = record.ending or "completed"
            field_name = {
                "completed": "completed_at",
                "expired": "expired_at",
                "cancelled": "cancelled_at",
                "failed": "failed_at",
            }
            setattr(record, field_name[record.status], getattr(record, field_name[record.status]) or now)
            await self.save(record)
        except asyncio.CancelledError:
            raise
        except Exception as error:
            logger.exception("batch %s failed", record.id)
            record.errors = [{"code": "server_error", "message": f"The batch failed: {type(error).__name__}"}]
            record.status, record.failed_at = "failed", int(time.time())
            await self.save(record)
        finally:
            self.live.pop(record.id, None)
            self._stops.pop(record.id, None)

    async def _validate(self, record: BatchRecord) -> list[BatchLine] | None:
        """The lines still to run (all of them at first; after a restart those without an answer on disk); a batch
        whose input is gone fails."""
        try:
            data = await anyio.to_thread.run_sync(self._input, record)
        except Exception:
            record.errors = [{"code": "invalid_file", "message": "The input file was deleted", "param": None}]
            record.status, record.failed_at = "failed", int(time.time())
            await self.save(record)
            return None
        checked = await anyio.to_thread.run_sync(read_input, data, record.endpoint)
        if record.in_progress_at is None:  # the first validation (a restart reads the input again, nothing else)
            invalid = b"".join(msgspec.json.encode(line) + b"\n" for line in checked.invalid)
            if invalid:
                await anyio.to_thread.run_sync(write_atomically, self.store.progress(record, INVALID), invalid)
            for _ in checked.invalid:
                self.counters.line(record.endpoint, "invalid")
            record.total = len(checked.lines) + len(checked.invalid)
            record.errors = checked.problems or None
            record.model = next((line.model for line in checked.lines if line.model), None)
            record.in_progress_at = int(time.time())
            if record.status == "validating":  # not cancelled meanwhile
                record.status = "in_progress"
            await self.save(record)
        done = await anyio.to_thread.run_sync(self._answered, record)
        first: dict[str | None, int] = {}
        for line in checked.lines:
            first.setdefault(line.model, len(first))
        # the lines of one model together (in file order within it): a batch naming several models swaps them once
        return sorted((line for line in checked.lines if line.custom_id not in done), key=lambda x: first[x.model])

    def _input(self, record: BatchRecord) -> bytes:
        return self.files.content_path(record.owner, record.input_file_id).read_bytes()

    def _answered(self, record: BatchRecord) -> set[str]:
        """The custom_ids already answered on disk, counted into the record."""
        output = self.store.finished_lines(self.store.progress(record, OUTPUT))
        errors = self.store.finished_lines(self.store.progress(record, ERRORS))
        invalid = self.store.finished_lines(self.store.progress(record, INVALID))
        record.completed = len(output)
        record.failed = len(errors) + len(invalid)
        return {line["custom_id"] for line in (*output, *errors)}

    async def _run_lines(self, record: BatchRecord, lines: list[BatchLine]) -> None:
        stop = self._stops.setdefault(record.id, asyncio.Event())
        queue = iter(lines)
        keys = self.state.keys
        key = keys.labelled(record.owner) if keys.enabled else None
        if keys.enabled and key is None:
            gone = "The key that created the batch is no longer configured"
            record.errors = [{"code": "invalid_key", "message": gone, "param": None}]
            record.ending = "failed"
            stop.set()

        async def worker() -> None:
            for line in queue:
                if stop.is_set():
                    return
                async with self._slots:
                    if stop.is_set():
                        return
                    await self._run_one(record, line, key, stop)

        count = self.state.settings.server.batch_max_concurrent_lines
        workers = [asyncio.ensure_future(worker()) for _ in range(count)]
        try:
            left = max(0.0, record.expires_at - time.time())
            done, _ = await asyncio.wait(workers, timeout=left)
            if len(done) < len(workers):  # the completion window passed
                record.ending = "expired"
        finally:
            stop.set()  # lines in flight are cancelled (a hang-up), and no new one starts
            await asyncio.gather(*workers, return_exceptions=True)

    async def _run_one(self, record: BatchRecord, line: BatchLine, key: Any, stop: asyncio.Event) -> None:
        """Run a line until it has an answer (again after yielding its slot or a busy model), then append it."""
        attempt = 0
        while True:
            answer = await run_line(
                self.state, self.dispatch, batch_id=record.id, endpoint=record.endpoint, line=line, key=key, stop=stop
            )
            if stop.is_set():
                return  # cancelled or expired meanwhile: the line stays unanswered
            if answer.yielded or answer.status in RETRY_STATUSES:
                self.counters.yields += answer.yielded
                await asyncio.sleep(RETRY_SECS[min(attempt, len(RETRY_SECS) - 1)])
                attempt += 0 if answer.yielded else 1
                continue
            break
        entry = answer_line(line.custom_id, answer.status, answer.request_id, answer.body)
        ok = 200 <= answer.status < 300
        path = self.store.progress(record, OUTPUT if ok else ERRORS)
        await anyio.to_thread.run_sync(self.store.append, path, msgspec.json.encode(entry))
        if ok:
            record.completed += 1
        else:
            record.failed += 1
        self.counters.line(record.endpoint, "completed" if ok else "failed")

    async def _count_ending(self, record: BatchRecord) -> None:
        """Decide how the batch ends, put a cancelled or expired batch's unanswered lines in the error file, count
        the lines and store all that before the files are handed over."""
        if record.status == "cancelling" and record.ending is None:
            record.ending = "cancelled"
        record.ending = record.ending or "completed"
        if record.ending != "completed":
            await anyio.to_thread.run_sync(self._mark_unanswered, record)
        await anyio.to_thread.run_sync(self._answered, record)
        if record.status != "cancelling":
            record.status, record.finalizing_at = "finalizing", int(time.time())
        await self.save(record)

    def _mark_unanswered(self, record: BatchRecord) -> None:
        done = self._answered(record)
        code = f"batch_{record.ending}"
        message = f"The batch ended ({record.ending}) before this line ran"
        left = [
            msgspec.json.encode(error_line(line.custom_id, code, message))
            for line in read_input(self._input(record), record.endpoint).lines
            if line.custom_id not in done
        ]
        if left:  # one append: a crash midway leaves a torn last line, cut off when read
            self.store.append(self.store.progress(record, ERRORS), b"\n".join(left))

    def _hand_over(self, record: BatchRecord) -> None:
        """Store the output and error files (the failed lines, then the invalid ones) as the key's `batch_output`
        files, under ids made from the batch's (a restart midway takes over what is left)."""
        suffix = record.id.removeprefix("batch_")
        invalid, errors, output = (self.store.progress(record, kind) for kind in (INVALID, ERRORS, OUTPUT))
        if output.is_file() and not output.stat().st_size:
            output.unlink()
        stored = self.files.adopt(record.owner, f"file-{suffix}o", f"{record.id}_output.jsonl", output)
        record.output_file_id = None if stored is None else stored.id
        joined = self.store.progress(record, "joined.jsonl")
        if not joined.is_file():
            parts = [path.read_bytes() for path in (errors, invalid) if path.is_file()]
            if any(parts):
                write_atomically(joined, b"".join(parts))
        stored = self.files.adopt(record.owner, f"file-{suffix}e", f"{record.id}_error.jsonl", joined)
        record.error_file_id = None if stored is None else stored.id
        errors.unlink(missing_ok=True)
        invalid.unlink(missing_ok=True)
        joined.unlink(missing_ok=True)
