"""What an entity request must hold, checked once for the route (before a lease) and the engine (any caller)."""

from __future__ import annotations

from hypnos.engine import EntityInput
from hypnos.errors import invalid_request


def check_job(job: EntityInput) -> None:
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
