"""The client events of a realtime session, one handler each: session, input audio buffer, items, responses."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hypnos_server.realtime.conversation import output_limit, parse_item
from hypnos_server.realtime.events import RealtimeError
from hypnos_server.realtime.input_audio import append, commit, drop_early, new_segmenter
from hypnos_server.realtime.session import apply_update, is_ga, render
from hypnos_server.realtime.stage import decode_audio

if TYPE_CHECKING:
    from hypnos_server.realtime.surface import SessionSurface


async def _session_update(session: SessionSurface, event: dict[str, Any]) -> None:
    update = event.get("session")
    session.ga = session.ga or (is_ga(update) and not session.beta)
    before = (session.config.turn_detection, session.config.speech_detector)
    session.config = apply_update(session.config, update, session.state.scheduler, session.detectors.kinds)
    if (session.config.turn_detection, session.config.speech_detector) != before:
        drop_early(session)
        session.segmenter = new_segmenter(session)
    await session.send({"type": "session.updated", "session": render(session.config)})


async def _append(session: SessionSurface, event: dict[str, Any]) -> None:
    await append(session, decode_audio(event.get("audio")))


async def _commit(session: SessionSurface, _: dict[str, Any]) -> None:
    await commit(session)


async def _clear(session: SessionSurface, _: dict[str, Any]) -> None:
    session.buffer = bytearray()
    drop_early(session)
    session.segmenter = new_segmenter(session)
    await session.send({"type": "input_audio_buffer.cleared"})


async def _item_create(session: SessionSurface, event: dict[str, Any]) -> None:
    item = parse_item(event.get("item"))
    after = event.get("previous_item_id")
    session.add_item(item, after if isinstance(after, str) else None)
    await session.send(
        {
            "type": "conversation.item.created",
            "previous_item_id": session.previous_id(item),
            "item": item.render(session.ga),
        }
    )
    await session.item_done(item)


async def _item_truncate(session: SessionSurface, event: dict[str, Any]) -> None:
    item = session.items[session.index_of(event.get("item_id"))]
    end = event.get("audio_end_ms")
    if item.role != "assistant" or not item.audio:
        raise RealtimeError("Only an assistant audio message can be truncated", "invalid_value", "item_id")
    if not isinstance(end, (int, float)) or isinstance(end, bool) or end < 0:
        raise RealtimeError("`audio_end_ms` must be a number >= 0", "invalid_value", "audio_end_ms")
    item.truncate(float(end))
    await session.send(
        {"type": "conversation.item.truncated", "item_id": item.id, "content_index": 0, "audio_end_ms": end}
    )


async def _item_delete(session: SessionSurface, event: dict[str, Any]) -> None:
    item = session.items.pop(session.index_of(event.get("item_id")))
    await session.send({"type": "conversation.item.deleted", "item_id": item.id})


async def _item_retrieve(session: SessionSurface, event: dict[str, Any]) -> None:
    item = session.items[session.index_of(event.get("item_id"))]
    await session.send({"type": "conversation.item.retrieved", "item": item.render(session.ga)})


async def _response_create(session: SessionSurface, event: dict[str, Any]) -> None:
    if session.responding:
        raise RealtimeError(
            "The conversation already has an active response", "conversation_already_has_active_response"
        )
    options = event.get("response")
    options = options if isinstance(options, dict) else {}
    output_limit(options, None)  # a bad max_output_tokens is refused before the key's limits count the response
    session.start_response(options)


async def _response_cancel(session: SessionSurface, _: dict[str, Any]) -> None:
    if not session.responding or session.response is None:
        raise RealtimeError("There is no active response to cancel", "response_cancel_not_active")
    session.response.cancel("client_cancelled")


HANDLERS = {
    "session.update": _session_update,
    "input_audio_buffer.append": _append,
    "input_audio_buffer.commit": _commit,
    "input_audio_buffer.clear": _clear,
    "conversation.item.create": _item_create,
    "conversation.item.truncate": _item_truncate,
    "conversation.item.delete": _item_delete,
    "conversation.item.retrieve": _item_retrieve,
    "response.create": _response_create,
    "response.cancel": _response_cancel,
}
