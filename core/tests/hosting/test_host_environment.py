"""An engine host's environment: the server's, then the engine kind's measured defaults, then the model's own."""

from __future__ import annotations

import pytest
from hypnos.config import ModelConfig, ProcessConfig
from hypnos.engine import EngineKind
from hypnos.hosting.host import HOST_ENV, HOST_NICE_ENV
from hypnos.hosting.proxy import host_environment
from hypnos.types import Modality

SPIN = {"GOMP_SPINCOUNT": "3000"}


def kind(env: dict[str, str], nice: int = 0) -> EngineKind:
    return EngineKind(
        "entities", frozenset({Modality.ENTITY_EXTRACTION}), lambda m, c: None, spec_kind="gliner",
        process_env=env, process_nice=nice,
    )  # fmt: skip


def model(**process: object) -> ModelConfig:
    return ModelConfig(id="m", modality=Modality.ENTITY_EXTRACTION, engine="entities", process=ProcessConfig(**process))


@pytest.fixture(autouse=True)
def no_omp_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY", "OMP_NUM_THREADS"):
        monkeypatch.delenv(name, raising=False)


def test_a_host_takes_its_kinds_defaults_and_says_which_model_it_serves() -> None:
    env = host_environment(model(), kind(SPIN, nice=10))
    assert env["GOMP_SPINCOUNT"] == "3000" and "OMP_WAIT_POLICY" not in env
    assert env[HOST_ENV] == "m" and env[HOST_NICE_ENV] == "10"


def test_a_models_wait_policy_replaces_the_kinds_spin_count() -> None:
    env = host_environment(model(omp_wait_policy="PASSIVE", threads=1, nice=0), kind(SPIN, nice=10))
    assert env["OMP_WAIT_POLICY"] == "PASSIVE" and "GOMP_SPINCOUNT" not in env  # libgomp would let the count win
    assert env["OMP_NUM_THREADS"] == env["MKL_NUM_THREADS"] == "1" and env[HOST_NICE_ENV] == "0"


def test_a_spin_count_in_the_servers_or_the_models_environment_stays(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GOMP_SPINCOUNT", "50")
    assert host_environment(model(omp_wait_policy="ACTIVE"), kind(SPIN))["GOMP_SPINCOUNT"] == "50"
    env = host_environment(model(omp_wait_policy="ACTIVE", env={"GOMP_SPINCOUNT": "7"}), kind(SPIN))
    assert env["GOMP_SPINCOUNT"] == "7"  # the model's own env has the last word
