"""The Litestar app: `create_app(settings, plugin_manager)` and the zero-argument `app_factory` granian calls."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import msgspec
import pluggy
from hypnos.config import ClusterConfig, Settings, load_settings
from hypnos.image_header import limit_image_decoders
from hypnos.overlay import load_pool
from hypnos.plugins import collect_engine_kinds
from hypnos.scheduler import Scheduler
from litestar import Litestar
from litestar.types import Receive, Scope, Send

from hypnos_server.asgi.auth import AdminRoutes
from hypnos_server.asgi.keylimits import KeyLimiter
from hypnos_server.asgi.keys import KeyRing
from hypnos_server.asgi.pipeline import RequestPipeline
from hypnos_server.asgi.usage_file import UsageFile
from hypnos_server.batches import routes as batch_routes
from hypnos_server.batches.metrics import BatchCollector
from hypnos_server.batches.service import BatchService
from hypnos_server.catalog import Catalog, shipped_catalog_path
from hypnos_server.errors import exception_handler
from hypnos_server.lifeline import tie_to_parent
from hypnos_server.model_pool import ModelPool
from hypnos_server.observability import install_observability, observability_of, observe_dispatch
from hypnos_server.openapi import openapi_config
from hypnos_server.plugin_loading import collect_routes, installed_plugin_manager
from hypnos_server.realtime.detectors import collect_speech_detectors
from hypnos_server.responses_store import ResponseStore
from hypnos_server.routes import server_routes
from hypnos_server.routes.messages_threads import THREADS_FILE
from hypnos_server.shutdown import GracefulStop, watch_stop_signals
from hypnos_server.state import HypnosState

logger = logging.getLogger(__name__)

RAY_ADDRESS_ENV = "HYPNOS_RAY_ADDRESS"  # `hypnos serve --ray ADDRESS` hands the address to the worker through it


def with_ray_address(settings: Settings, address: str | None) -> Settings:
    """The settings with [cluster] address set (the table added when absent); unchanged without an address."""
    if not address:
        return settings
    cluster = msgspec.structs.replace(settings.cluster or ClusterConfig(), address=address)
    return msgspec.structs.replace(settings, cluster=cluster)


def server_version() -> str:
    """The installed hypnos-server version."""
    try:
        return version("hypnos-server")
    except PackageNotFoundError:
        return "0.0.0"


class HypnosApp(Litestar):
    """Litestar with the Hypnos request pipeline in front, so ids, CORS, limits and auth cover every response."""

    pipeline: RequestPipeline

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:  # type: ignore[override]
        """HTTP goes through the pipeline; lifespan and anything else straight to Litestar."""
        if scope["type"] == "http":
            await self.pipeline(scope, receive, send)
        else:
            await super().__call__(scope, receive, send)

    async def dispatch(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Litestar's own handling, the innermost step of the pipeline."""
        await super().__call__(scope, receive, send)


async def _stage(state: HypnosState) -> None:
    """Stage the startup models: here, or on every node of the Ray cluster when [cluster] is configured."""
    if state.cluster is None:
        await state.scheduler.stage_startup()
        return
    try:
        await state.cluster.start()
    except Exception:
        logger.exception("joining the Ray cluster failed; inference stays unavailable")
        raise
    state.scheduler.ready = True


def _cluster_backend(settings: Settings, scheduler: Scheduler) -> object | None:
    """The Ray backend when [cluster] is configured (imports the cluster package only then)."""
    if settings.cluster is None:
        return None
    from hypnos_server.cluster.front import ClusterBackend

    return ClusterBackend(settings, settings.cluster, scheduler)


def _graceful_stop(state: HypnosState) -> GracefulStop:
    """The stop at SIGTERM: no new work, then background responses and leases in flight ended near the grace's end."""

    async def end_in_flight(settle_secs: float) -> None:
        await state.batches.halt()  # a batch line ended now would be answered as cut short: it resumes at the start
        for running in list(state.background):  # background responses end as failed, stored as such
            running.cancel()
        ended = await state.scheduler.end_in_flight(settle_secs)
        if ended:
            logger.warning("stopping: ended %d request(s) still in flight", ended)

    return GracefulStop(state.settings.server.shutdown_grace_secs, state.scheduler.stop_admitting, end_in_flight)


def _lifespan(state: HypnosState):
    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        """Stage the startup models in the background (the port is already open), unload everything at exit, the
        whole stop within shutdown_grace_secs of SIGTERM."""
        stop = _graceful_stop(state)
        restore_signals = watch_stop_signals(asyncio.get_running_loop(), stop.begin)
        state.staging_task = asyncio.create_task(_stage(state), name="hypnos-staging")
        await state.batches.start()  # unfinished batches resume (their lines wait for the staging)
        try:
            yield
        finally:
            await state.batches.halt()
            task = state.staging_task
            if task is not None and not task.done():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
            await stop.finish()
            background = list(state.background)  # background responses end as failed, stored as such
            for running in background:
                running.cancel()
            await asyncio.gather(*background, return_exceptions=True)
            try:
                await state.scheduler.shutdown(within=stop.remaining())
                if state.cluster is not None:
                    await state.cluster.shutdown()
            except Exception:
                logger.exception("scheduler shutdown failed")
            if state.responses is not None:  # after the background responses stored how they ended
                state.responses.close()
            if state.threads is not None:
                state.threads.close()
            state.batches.close()
            state.limiter.save()
            if restore_signals is not None:
                restore_signals()
            left = f" with {stop.remaining():.1f} s of the grace left" if stop.begun else ""
            logger.info("stopped: every model unloaded, the stores saved%s", left)

    return lifespan


def create_app(
    settings: Settings, plugin_manager: pluggy.PluginManager | None = None, catalog_path: Path | None = None
) -> HypnosApp:
    """Build the app for these settings (with the pool overlay next to their config applied) and plugins (all
    installed plugins when none is given); the catalog is the shipped one unless `catalog_path` names another."""
    manager = plugin_manager if plugin_manager is not None else installed_plugin_manager()
    settings, overlay = load_pool(settings)
    if any((model.isolation or settings.server.isolation) == "thread" for model in settings.models):
        limit_image_decoders(settings.limits.max_image_pixels)  # engines in this process decode images here
    scheduler = Scheduler(settings, collect_engine_kinds(manager))
    catalog = Catalog.load(catalog_path or shipped_catalog_path(), manager)
    cluster = _cluster_backend(settings, scheduler)
    state = HypnosState(
        cluster=cluster,
        settings=settings,
        scheduler=scheduler,
        plugin_manager=manager,
        keys=KeyRing(settings),
        limiter=KeyLimiter(store=UsageFile(settings.data_path) if settings.data_path is not None else None),
        version=server_version(),
        catalog=catalog,
        pool=ModelPool(scheduler, overlay, catalog, cluster=cluster),
        responses=ResponseStore(
            settings.data_path,
            settings.server.responses_max_count,
            settings.server.responses_max_age_secs,
            max_bytes=settings.server.responses_max_bytes,
        ),
        threads=ResponseStore(
            settings.data_path,
            settings.server.responses_max_count,
            settings.server.responses_max_age_secs,
            file_name=THREADS_FILE,
            max_bytes=settings.server.responses_max_bytes,
        ),
        speech_detectors=collect_speech_detectors(manager, settings.server.realtime_vad),
    )
    # Observability (request log, /metrics, latency): registers its observer, returns its routes.
    observability_routes = install_observability(state)
    app = HypnosApp(
        route_handlers=[*server_routes(), *batch_routes.ROUTES, *observability_routes, *collect_routes(manager)],  # type: ignore[list-item]
        exception_handlers={Exception: exception_handler},
        lifespan=[_lifespan(state)],
        request_max_body_size=None,
        openapi_config=openapi_config(state.version),
        debug=False,
    )
    app.state.hypnos = state
    # route templates, bodies at trace; the admin-only routes are those their handlers mark (plugins' included)
    dispatch = observe_dispatch(state, app)
    app.pipeline = RequestPipeline(state, dispatch, AdminRoutes.of(app))
    state.batches = BatchService(state, dispatch)  # batch lines go to the routes below the HTTP layers
    obs = observability_of(state)
    if obs is not None:
        obs.metrics.registry.register(BatchCollector(state.batches.counters))
    return app


def app_factory() -> HypnosApp:
    """Granian's factory, in its worker (tied to the main process): settings from the environment, allowed plugins."""
    tie_to_parent()
    settings = with_ray_address(load_settings(), os.environ.get(RAY_ADDRESS_ENV))
    return create_app(settings, installed_plugin_manager())
