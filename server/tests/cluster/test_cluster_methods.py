"""Every method of the engine table has a path through the cluster: the front's RemoteEngine hands it to the node's
agent, which runs it on the leased engine (here the agent runs in this process: no Ray, the same code)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from hypnos.config import settings_from_mapping
from hypnos.engine import ENGINE_METHODS, CancelToken, EngineMethod
from hypnos.testing import fake_plugin
from hypnos.testing.conformance_target import same_answer
from hypnos.testing.method_samples import is_result, sample_answer
from hypnos.types import Modality
from hypnos_server.cluster import agent as agent_module
from hypnos_server.cluster.agent import NodeAgent
from hypnos_server.cluster.lease import RemoteEngine
from hypnos_server.cluster.wire import Failure
from hypnos_server.plugin_loading import server_plugin_manager

MODEL = {
    "id": "m",
    "modality": "text_generation",
    "modalities": [modality.value for modality in Modality],
    "engine": "fake",
    "fake": {"layers": 1, "layer_bytes": 1 << 20, "non_layer_bytes": 0, "workspace_bytes": 0},
}


class NoFront:
    """The front's side of a remote lease, as far as these calls go: no scheduler of its own."""

    front = None


class AgentHere(RemoteEngine):
    """A RemoteEngine whose node is an agent in this process: its calls go to NodeAgent.call and .stream."""

    def __init__(self, agent: NodeAgent, lease_id: str) -> None:
        super().__init__(NoFront(), None, lease_id, "m", None)  # type: ignore[arg-type]
        self.agent = agent

    async def _call(self, method: str, argument: Any) -> Any:
        result = await self.agent.call(self._lease_id, method, argument)
        if isinstance(result, Failure):
            raise result.error()
        return result

    async def _stream(self, method: str, argument: Any) -> AsyncIterator[Any]:
        async for batch in self.agent.stream(self._lease_id, method, argument):
            for piece in batch:
                if isinstance(piece, Failure):
                    raise piece.error()
                yield piece


@pytest.fixture
def agent(monkeypatch: pytest.MonkeyPatch) -> NodeAgent:
    manager = server_plugin_manager(autoload=False, plugins=[fake_plugin])
    monkeypatch.setattr(agent_module, "installed_plugin_manager", lambda: manager)
    settings = settings_from_mapping({"models": [MODEL], "server": {"isolation": "thread"}})
    return NodeAgent(settings, stream_window_ms=0)


@pytest.mark.parametrize("method", ENGINE_METHODS, ids=lambda method: method.name)
async def test_every_method_reaches_the_node_and_answers_as_the_engine_does(
    agent: NodeAgent, method: EngineMethod
) -> None:
    try:
        grant = await agent.open_lease("lease-1", "m", [method.modality], None, None)
        assert not isinstance(grant, Failure), grant
        far = await sample_answer(AgentHere(agent, "lease-1"), method, CancelToken())
        near = await sample_answer(agent.scheduler.get("m").engine, method, CancelToken())
        await agent.close_lease("lease-1")
    finally:
        await agent.shutdown()
    items = far if method.streams else [far]
    assert items and all(is_result(item, method) for item in items), far
    assert same_answer(near, far)


async def test_a_method_the_node_lacks_is_a_failure_not_a_lost_node(agent: NodeAgent) -> None:
    try:
        await agent.open_lease("lease-2", "m", [Modality.TEXT_GENERATION], None, None)
        whole = await agent.call("lease-2", "moderate", "text")  # a plugin's method installed on the front only
        streamed = [batch async for batch in agent.stream("lease-2", "embed", ["text"])]  # not a stream
        await agent.close_lease("lease-2")
    finally:
        await agent.shutdown()
    assert isinstance(whole, Failure) and "`moderate`" in whole.error().message
    assert len(streamed) == 1 and isinstance(streamed[0][0], Failure)
