"""The tier scheduler: leases, slots, queues, placement and eviction."""

from hypnos.scheduler.lease import Lease
from hypnos.scheduler.scheduler import ModelState, Scheduler

__all__ = ["Lease", "ModelState", "Scheduler"]
