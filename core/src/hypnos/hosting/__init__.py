"""Engine hosts: each model's engine in a process of its own, driven by the server through the Engine contract."""

from hypnos.hosting.proxy import HostedEngine, host_factory_path
from hypnos.hosting.supervision import CrashPolicy, EngineProcessInfo

__all__ = ["CrashPolicy", "EngineProcessInfo", "HostedEngine", "host_factory_path"]
