"""The conformance suite runs in a project of its own (as a third party's repo) and fails an engine that breaks it."""

from __future__ import annotations

import pytest

MODULE = '''
import pytest
from hypnos.config import LimitsConfig, ModelConfig
from hypnos.engine import CancelToken, EngineContext
from hypnos.testing.conformance import ConformanceTarget, MissingLibrary
from hypnos.testing.example_engine import ExampleEngine, example_engine_kind, write_example_weights

BROKEN = {broken}


class Forgetful(ExampleEngine):
    """Serves below tier 1 (no require_ready) and ignores cancellation."""

    async def embed(self, texts, cancel):
        if self._rows is None:
            self._rows, self._crc = [], hash
        return self._embed(texts, CancelToken())


@pytest.fixture
def conformance_engine(tmp_path):
    write_example_weights(tmp_path / "w.bin", 16 * 1024 * 1024)
    kind = example_engine_kind()
    if BROKEN:
        kind = type(kind)(kind.name, kind.modalities, Forgetful, options=kind.options)
    model = ModelConfig(id="ex", modality="embeddings", engine="example", weights_path="w.bin")

    async def request(engine, cancel):
        return await engine.embed([f"text {{i}}" for i in range(6)], cancel)

    async def bad(engine, cancel):
        from hypnos.errors import invalid_request
        raise invalid_request("no")

    return ConformanceTarget(kind, model, EngineContext(models_dir=tmp_path, limits=LimitsConfig()), request,
                             bad_request=bad, missing_library=MissingLibrary("zlib", modules=("zlib",)))
'''


@pytest.mark.parametrize("broken", [False, True])
def test_suite_in_a_project_of_its_own(pytester: pytest.Pytester, broken: bool) -> None:
    pytester.makepyfile(test_my_engine=MODULE.format(broken=broken))
    result = pytester.runpytest_subprocess("-p", "hypnos.testing.conformance", "-q", "-p", "no:cacheprovider")
    if broken:
        result.assert_outcomes(passed=5, failed=3)  # the in-host tier walk fails it too
        result.stdout.fnmatch_lines(["*TestConformance::test_tier_walk_serves_at_tier1_only*"])
        result.stdout.fnmatch_lines(["*TestConformanceInHost::test_tier_walk_in_a_host*"])
    else:
        result.assert_outcomes(passed=8)
