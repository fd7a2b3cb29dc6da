"""The speech detectors a server's realtime VAD can run: the built-in energy gate and those plugins offer through the
`hypnos_speech_detectors` hook, collected once when the app is built, and the one a session starts with."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import pluggy
from hypnos.config import ConfigError

from hypnos_server.plugin_loading import add_server_hooks
from hypnos_server.realtime.vad import ENERGY, SpeechDetectorKind

logger = logging.getLogger(__name__)

AUTO = "auto"


@dataclass(frozen=True)
class SpeechDetectors:
    """Every detector by name and the default one (`server.realtime_vad`)."""

    kinds: dict[str, SpeechDetectorKind] = field(default_factory=lambda: {ENERGY.name: ENERGY})
    default: str = ENERGY.name

    def get(self, name: str) -> SpeechDetectorKind:
        """The detector with this name (the caller checked it exists)."""
        return self.kinds[name]


def collect_speech_detectors(manager: pluggy.PluginManager, configured: str = AUTO) -> SpeechDetectors:
    """The plugins' detectors plus `energy`; the default is `configured`, or for `auto` the first one a plugin offers
    (a model hears speech, not level), else energy. A configured name nobody offers is a ConfigError."""
    kinds: dict[str, SpeechDetectorKind] = {ENERGY.name: ENERGY}
    offered: list[str] = []
    for batch in add_server_hooks(manager).hook.hypnos_speech_detectors():
        for kind in batch or []:
            if kind.name in kinds:
                logger.warning("speech detector %s is offered twice; keeping the first", kind.name)
                continue
            kinds[kind.name] = kind
            offered.append(kind.name)
    if configured == AUTO:
        return SpeechDetectors(kinds, offered[0] if offered else ENERGY.name)
    if configured not in kinds:
        known = ", ".join(sorted(kinds))
        raise ConfigError(f"`server.realtime_vad`: no speech detector `{configured}` (known: auto, {known})")
    return SpeechDetectors(kinds, configured)
