"""EntityEngine: the plugin splits a job into passes and runs a batch of passes; the kit checks the job and batches.

A request's texts and labels become passes (a window of a text x a family of labels, say) that the plugin plans on
the worker; the passes of concurrent requests share `run_passes` calls (hypnos.kit.batching); the plugin assembles
each request's answer from its passes' results.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from hypnos.engine import CancelToken, EngineCapabilities, EngineContext, Entity, EntityInput, EntityResult
from hypnos.errors import invalid_request
from hypnos.kit.batching import BATCHING_TABLE, Batched, Batcher, BatchingOptions, BatchLimits
from hypnos.kit.staged import ModelNotLoaded, StagedEngine, check_cancelled
from hypnos.types import EngineTiming

if TYPE_CHECKING:
    from hypnos.config import ModelConfig


def check_entity_job(job: EntityInput) -> None:
    """A 400 naming the field: no texts or an empty one, no labels or a blank one, a threshold outside 0..1."""
    if not job.texts:
        raise invalid_request("`input` must be a string or a non-empty array of strings")
    for index, text in enumerate(job.texts):
        if not text:
            where = "`input`" if len(job.texts) == 1 else f"`input[{index}]`"
            raise invalid_request(f"{where} is empty; send the text to extract entities from")
    if not job.labels or not all(label.strip() for label in job.labels):
        raise invalid_request("`labels` must be a non-empty array of non-empty strings")
    if not 0.0 <= job.threshold <= 1.0:
        raise invalid_request(f"`threshold` must be between 0 and 1 (got {job.threshold})")


class EntityEngine(StagedEngine):
    """An entity model whose passes are batched across requests. Besides the four tier hooks, write:

      plan(job) -> (passes, plan)                blocking, on the worker: the job's passes, and what assemble needs
      run_passes(passes) -> results              blocking, on the worker: one result per pass, in order
      assemble(job, plan, results) -> entities   each text's entities, from its passes' results

    `batching` holds the measured defaults of `[models.batching]` (passes per call).
    """

    batching: ClassVar[BatchLimits] = BatchLimits(max_batch_size=8, max_wait_ms=2.0)

    def __init__(self, model: ModelConfig, context: EngineContext) -> None:
        super().__init__(model, context)
        limits = self.batching.configured(context.options_for(model, BATCHING_TABLE, BatchingOptions))
        self.batcher: Batcher[Any, Any, Any] = Batcher(self.worker, self._passes_on_worker, limits)

    # ---- the plugin's part ----------------------------------------------------------------------------------------

    def plan(self, job: EntityInput) -> tuple[list[Any], Any]:
        """The job's passes and the plan its answer is assembled by (blocking, on the worker)."""
        raise NotImplementedError

    def run_passes(self, passes: list[Any]) -> Sequence[Any]:
        """One result per pass, in order (blocking, on the worker)."""
        raise NotImplementedError

    def assemble(self, job: EntityInput, plan: Any, results: list[Any]) -> list[list[Entity]]:
        """Each text's entities from its passes' results."""
        raise NotImplementedError

    # ---- the kit's part -------------------------------------------------------------------------------------------

    def capabilities(self) -> EngineCapabilities:
        """Batched."""
        return EngineCapabilities(batching=True)

    async def extract_entities(self, job: EntityInput, cancel: CancelToken) -> EntityResult:
        """The job's entities; its passes may share library calls with other requests' passes."""
        self.require_ready()
        check_entity_job(job)
        check_cancelled(cancel)
        passes, plan = await self.run_blocking(self._plan_on_worker, job)
        batched: Batched[Any] = await self.batcher.run(passes, cancel) if passes else Batched([], 1)
        check_cancelled(cancel)
        entities = self.assemble(job, plan, batched.results)
        return EntityResult(entities=entities, timing=EngineTiming(concurrent_slots=batched.shared))

    def _plan_on_worker(self, job: EntityInput) -> tuple[list[Any], Any]:
        if not self.ready:
            raise ModelNotLoaded(self.model.id)
        return self.plan(job)

    def _passes_on_worker(self, passes: list[Any]) -> Sequence[Any]:
        if not self.ready:  # demoted while the batch waited on the worker
            raise ModelNotLoaded(self.model.id)
        return self.run_passes(passes)
