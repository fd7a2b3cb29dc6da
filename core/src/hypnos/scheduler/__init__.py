"""The tier scheduler: leases, slots, queues, placement and eviction."""

from hypnos.scheduler.budgets import Budgets, compute_budgets
from hypnos.scheduler.lease import Lease
from hypnos.scheduler.lease_context import LeaseContext
from hypnos.scheduler.model_state import ModelState
from hypnos.scheduler.planner import FreeMemory, PlacementRequest, plan_placement
from hypnos.scheduler.records import EvictionRecord, SchedulerCounters
from hypnos.scheduler.scheduler import Scheduler
from hypnos.scheduler.status_types import KvParkStatus, MemoryStatus

__all__ = [
    "Budgets",
    "EvictionRecord",
    "FreeMemory",
    "KvParkStatus",
    "Lease",
    "LeaseContext",
    "MemoryStatus",
    "ModelState",
    "PlacementRequest",
    "Scheduler",
    "SchedulerCounters",
    "compute_budgets",
    "plan_placement",
]
