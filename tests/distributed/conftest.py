"""The distributed tests share one Ray cluster and one front for the whole session (see ray_front.py)."""

from .ray_front import cluster, front  # noqa: F401  (fixtures)
