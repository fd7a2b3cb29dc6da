"""How the Ray front ranks nodes for a model, and the `--ray` address reaching the settings (no Ray needed)."""

from __future__ import annotations

from hypnos.config import ClusterConfig, settings_from_mapping
from hypnos.errors import HypnosError
from hypnos_server.app import with_ray_address
from hypnos_server.cluster.wire import Failure, NodeRoute


def best(*routes: NodeRoute) -> int:
    """The index of the node routing picks."""
    return min(range(len(routes)), key=lambda i: (routes[i].key(), i))


def route(tier: int, fits: bool = True, wait: int | None = 0, queued: int = 0) -> NodeRoute:
    return NodeRoute(tier_rank=tier, fits=fits, estimated_wait_ms=wait, queued=queued)


def test_residency_wins_over_a_shorter_queue() -> None:
    assert best(route(2, wait=100), route(0, wait=900, queued=5)) == 1


def test_tier_two_comes_before_tier_three() -> None:
    assert best(route(2, wait=10), route(1, wait=50)) == 1


def test_a_node_with_room_comes_before_one_that_must_evict() -> None:
    assert best(route(2, fits=False, wait=10), route(2, fits=True, wait=80)) == 1


def test_then_the_nodes_own_estimate_then_the_queue() -> None:
    assert best(route(2, wait=300), route(2, wait=200)) == 1
    assert best(route(0, wait=0, queued=3), route(0, wait=0, queued=1)) == 1
    assert best(route(0, wait=None), route(0, wait=5000)) == 1  # an unknown wait ranks last


def test_a_failure_comes_back_as_the_same_error() -> None:
    error = Failure(status=429, type="model_busy", message="busy").error()
    assert isinstance(error, HypnosError) and (error.status, error.type) == (429, "model_busy")


def test_the_ray_address_adds_the_cluster_table() -> None:
    settings = settings_from_mapping({"models": []})
    assert settings.cluster is None
    assert with_ray_address(settings, None) is settings
    joined = with_ray_address(settings, "head:6379")
    assert joined.cluster == ClusterConfig(address="head:6379")
