"""The machine's cores as a budget: a share per model while it computes, planned again whenever one starts or stops."""

from __future__ import annotations

import asyncio
import itertools
import logging
import weakref
from collections.abc import Mapping, Sequence

from hypnos.cpu_cores import CoreDemand, plan_cores
from hypnos.engine import Engine
from hypnos.scheduler.model_state import ModelState

logger = logging.getLogger(__name__)


class CoreShares:
    """Counts each model's computations (leases in flight); every change re-plans the shares (cpu_cores.plan_cores)
    and tells each engine whose share changed, or which computes alone now or no longer, in the background, in order
    per model."""

    def __init__(self, cores: Sequence[int], models: Mapping[str, ModelState]) -> None:
        self.cores = list(cores)
        self._models = models
        self._computing: dict[str, tuple[ModelState, int, int]] = {}  # model id -> (state, leases, order)
        self._order = itertools.count()
        # what each engine was last told (by engine: a model replaced in the pool has a new one to tell)
        self._told: weakref.WeakKeyDictionary[Engine, tuple[list[int], bool]] = weakref.WeakKeyDictionary()
        self._wanted: dict[str, tuple[list[int], bool]] = {}  # model id -> (share, alone)
        self._tellers: dict[str, asyncio.Task[None]] = {}

    def start(self, state: ModelState) -> None:
        """A lease of the model begins computing."""
        if not self.cores:  # [hardware] share_cores = false
            return
        _, count, order = self._computing.get(state.id, (state, 0, next(self._order)))
        self._computing[state.id] = (state, count + 1, order)
        if not count:
            self._replan()

    def stop(self, state: ModelState) -> None:
        """A lease of the model ended: its share goes back to the budget once its last lease ends."""
        held = self._computing.get(state.id)
        if held is None:
            return
        _, count, order = held
        if count > 1:
            self._computing[state.id] = (state, count - 1, order)
            return
        del self._computing[state.id]
        state.core_share = []
        self._replan()

    def threads_changed(self, model_id: str, threads: int) -> None:
        """An engine changed the threads it computes with (from any thread): the status shows it."""
        state = self._models.get(model_id)
        if state is not None:
            state.threads_now = threads

    def demands(self) -> list[CoreDemand]:
        """What the computing models ask of the budget now."""
        return [
            CoreDemand(
                model_id=model_id,
                rank=state.config.priority.rank,
                order=order,
                wants=state.config.process.threads,
                pinned=tuple(state.config.cores),
                yields=_niceness(state) > 0,
            )
            for model_id, (state, _, order) in self._computing.items()
        ]

    def _replan(self) -> None:
        shares = plan_cores(self.cores, self.demands())
        alone = len(self._computing) == 1
        for model_id, (state, _, _) in self._computing.items():
            share = shares.get(model_id, [])
            state.core_share = share
            if share and state.engine is not None and self._told.get(state.engine) != (share, alone):
                self._tell(state, (share, alone))

    def _tell(self, state: ModelState, share: tuple[list[int], bool]) -> None:
        self._wanted[state.id] = share
        running = self._tellers.get(state.id)
        if running is not None and not running.done():
            return  # the teller is awaiting an engine: it checks for the newest share before it ends
        task = asyncio.get_running_loop().create_task(self._teller(state))
        self._tellers[state.id] = task
        task.add_done_callback(
            lambda done: self._tellers.pop(state.id) if self._tellers.get(state.id) is done else None
        )

    async def _teller(self, state: ModelState) -> None:
        while (engine := state.engine) is not None:
            wanted = self._wanted.get(state.id)
            if wanted is None or self._told.get(engine) == wanted:
                return
            self._told[engine] = wanted
            share, alone = wanted
            try:
                threads = await engine.follow_cores(list(share), alone)
            except Exception as error:  # a host that died or is stopping: its next start is told again
                logger.info("telling %s its cores %s failed: %s", state.id, share, error)
                self._told.pop(engine, None)
                return
            if threads is not None:
                state.threads_now = threads

    async def stop_telling(self) -> None:
        """Cancel the tellers in flight (shutdown)."""
        tasks = list(self._tellers.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _niceness(state: ModelState) -> int:
    """The model's host niceness: [models.process] nice, else its engine kind's default (batch engines 10)."""
    if state.config.process.nice is not None:
        return state.config.process.nice
    return state.kind.process_nice if state.kind is not None else 0
