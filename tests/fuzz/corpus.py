"""The hand-written hostile inputs: every route gets path tricks, wrong methods and absurd headers; bodies get more."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from fuzz_kit import AUTH, MAX_BODY_BYTES
from hypnos_server.openapi import ROUTE_DOCS

JSON_TYPE = {"content-type": "application/json"}
BOUNDARY = "corpusboundary"
MULTIPART_TYPE = {"content-type": f"multipart/form-data; boundary={BOUNDARY}"}
DEEP = 10_000
FOREIGN_PREFLIGHT = {"Origin": "http://evil.example", "Access-Control-Request-Method": "POST"}
# a valid request for each route that takes a body, so that a header or a field alone can be made hostile
VALID: dict[str, dict[str, object]] = {
    "/v1/chat/completions": {"model": "fake-chat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
    "/v1/embeddings": {"model": "fake-embed", "input": "hi"},
    "/v1/audio/speech": {"model": "fake-chat", "input": "hi"},
    "/v1/audio/transcriptions": {"model": "fake-chat", "audio_bytes": [82, 73, 70, 70]},
    "/v1/images/generations": {"model": "fake-image", "prompt": "a cat", "size": "256x256"},
    "/v1/memory/tier": {"model": "fake-embed", "target_tier": "tier2_pinned_ram"},
    "/v1/memory/kv-park": {"enabled": False},
    "/v1/logs/level": {"level": "info"},
    "/v1/models/{model_id}/moe-offload": {"mode": "off"},
}
MODEL_FIELD = {path for path, body in VALID.items() if "model" in body}
INFERENCE = {path for (_, path), doc in ROUTE_DOCS.items() if doc.inference}


@dataclass(frozen=True)
class Hostile:
    """One hostile request: where it goes, what it carries, and (for known bugs another branch fixes) why it fails."""

    name: str
    method: str
    target: str
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    owner: str | None = None  # the branch whose fix makes this pass; None: must pass here
    length: int | None = None  # a declared Content-Length other than the body's

    @property
    def id(self) -> str:
        return f"{self.name} {self.method} {self.target[:60]}"


def part(name: str, value: bytes, filename: str | None = None, extra: str = "") -> bytes:
    """One multipart part (file when it has a filename)."""
    disposition = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename else "")
    return f"Content-Disposition: {disposition}\r\n{extra}\r\n".encode() + value


def multipart(*parts: bytes, boundary: str = BOUNDARY, close: bool = True) -> bytes:
    """A multipart body of these parts."""
    body = b"".join(f"--{boundary}\r\n".encode() + p + b"\r\n" for p in parts)
    return body + (f"--{boundary}--\r\n".encode() if close else b"")


def _fill(method: str, path: str) -> str:
    """A concrete target; replacing or removing a pool model names one that is not there (the others stay served)."""
    model = "corpus-missing" if method in {"PUT", "DELETE"} else "fake-chat"
    return path.replace("{model_id}", model).replace("{id}", "req-" + "0" * 32)


def _deep(opening: str, closing: str, inner: str = "1") -> bytes:
    return (opening * DEEP + inner + closing * DEEP).encode()


def _route_cases(method: str, path: str) -> list[Hostile]:
    target = _fill(method, path)
    cases = [
        Hostile("double-slash", method, "/" + target, headers=AUTH),
        Hostile("encoded-slash", method, "/%2F" + target.lstrip("/"), headers=AUTH),
        Hostile("dot-segments", method, "/v1/../" + target.lstrip("/"), headers=AUTH),
        Hostile("trailing-slash", method, target + "/", headers=AUTH),
        Hostile("encoded-nul", method, target + "%00", headers=AUTH),
        Hostile("long-path", method, target + "/" + "a" * 60_000, headers=AUTH),
        Hostile("wrong-method", "PATCH", target, headers=AUTH),
        Hostile("head", "HEAD", target, headers=AUTH),
        Hostile("trace", "TRACE", target, headers=AUTH),
        Hostile("preflight-foreign-origin", "OPTIONS", target, headers=FOREIGN_PREFLIGHT),
        Hostile("no-key", method, target),
        Hostile("huge-key", method, target, headers={"Authorization": "Bearer " + "k" * 60_000}),
        Hostile("bad-scheme", method, target, headers={"Authorization": "Basic \u00e9\u00e9"}),
        Hostile("workflow-junk", method, target, headers={**AUTH, "x-hypnos-workflow": "\u00ff" * 2000}),
    ]
    if path == "/v1/logs":
        for query in ("limit=-1", "limit=1e999", "limit=abc", "limit=99999999999999999999999", "status=%ff%fe"):
            cases.append(Hostile(f"query {query}", method, f"{target}?{query}", headers=AUTH))
    if method in {"POST", "PUT"}:
        cases += _body_cases(method, path, target)
    return cases


def _body_cases(method: str, path: str, target: str) -> list[Hostile]:
    json_auth = {**AUTH, **JSON_TYPE}
    cases = [
        Hostile("oversized-body", method, target, b"", json_auth, length=MAX_BODY_BYTES + 1),
        Hostile("deep-array", method, target, _deep("[", "]"), json_auth),
        Hostile("deep-object", method, target, _deep('{"a":', "}"), json_auth),
        Hostile("invalid-utf8", method, target, b'{"model": "\xff\xfe\xfd", "x": "\xc3\x28"}', json_auth),
        Hostile("surrogate-bytes", method, target, b'{"model": "\xed\xa0\x80"}', json_auth),
        Hostile("not-json", method, target, b"<xml/>", {**AUTH, "content-type": "application/xml"}),
        Hostile("json-null", method, target, b"null", json_auth),
        Hostile("json-array", method, target, b"[1, 2]", json_auth),
        Hostile("huge-number", method, target, b'{"n": ' + b"9" * 5000 + b"}", json_auth),
        Hostile("nan-token", method, target, b'{"n": NaN, "m": 1e999}', json_auth),
        Hostile(
            "multipart-on-json", method, target, multipart(part("model", b"fake-chat")), {**AUTH, **MULTIPART_TYPE}
        ),
        Hostile("truncated-json", method, target, b'{"model": "fake-chat", "messa', json_auth),
        Hostile("bom-json", method, target, b"\xef\xbb\xbf" + json.dumps(VALID.get(path, {})).encode(), json_auth),
    ]
    if path in VALID:
        valid = VALID[path]
        cases += _field_cases(path, target, valid, json_auth)
    if path in ("/v1/audio/transcriptions", "/v1/images/edits"):
        cases += _multipart_cases(target)
    return cases


def _field_cases(path: str, target: str, valid: dict[str, object], json_auth: dict[str, str]) -> list[Hostile]:
    body = json.dumps(valid).encode()
    cases = [
        Hostile("lone-surrogate", "POST", target, json.dumps({**valid, "model": "\ud800x"}).encode(), json_auth),
        Hostile("wrong-content-type", "POST", target, body, {**AUTH, "content-type": "text/plain"}),
        Hostile("no-content-type", "POST", target, body, AUTH),
    ]
    for value in ("1e999", "inf", "-inf", "nan", "-5", "1e20", "abc", "0x10", " "):
        headers = {**json_auth, "x-hypnos-deadline-ms": value}
        cases.append(Hostile(f"deadline {value}", "POST", target, body, headers))
    cases.append(Hostile("next-model-huge", "POST", target, body, {**json_auth, "x-hypnos-next-model": "m" * 60_000}))
    if path in MODEL_FIELD:
        huge = json.dumps({**valid, "model": "m" * (MAX_BODY_BYTES // 2)}).encode()
        cases.append(Hostile("oversized-model-id", "POST", target, huge, json_auth))
    if path == "/v1/chat/completions":
        tool = {"type": "function", "function": {"name": "f", "parameters": json.loads("{}")}}
        deep_tool = (
            json.dumps({**valid, "tools": [tool]})
            .encode()
            .replace(b'"parameters": {}', b'"parameters": ' + _deep('{"a":', "}"))
        )
        cases.append(Hostile("deep-tool-parameters", "POST", target, deep_tool, json_auth))
        cases.append(
            Hostile("huge-max-tokens", "POST", target, json.dumps({**valid, "max_tokens": 10**30}).encode(), json_auth)
        )
    return cases


def _multipart_cases(target: str) -> list[Hostile]:
    mp_auth = {**AUTH, **MULTIPART_TYPE}
    good = [part("model", b"fake-chat"), part("prompt", b"x"), part("file", b"RIFF", "a.wav")]
    good.append(part("image", b"\x89PNG", "a.png"))
    bodies = {
        "multipart-truncated": multipart(*good)[:-20],
        "multipart-unclosed": multipart(*good, close=False),
        "multipart-wrong-boundary": multipart(*good, boundary="other"),
        "multipart-binary-text-part": multipart(part("model", b"\xff\xfe"), *good[1:]),
        "multipart-bad-charset": multipart(
            part("model", b"x", extra="Content-Type: text/plain; charset=nope\r\n"), *good[1:]
        ),
        "multipart-2000-parts": multipart(*good, *[part(f"p{i}", b"v") for i in range(2000)]),
        "multipart-no-name": multipart(b"Content-Disposition: form-data\r\n\r\nv", *good),
        "multipart-empty": b"",
        "multipart-garbage": b"\x00" * 1000,
        "multipart-huge-filename": multipart(part("file", b"RIFF", "f" * 100_000), *good[:2]),
    }
    cases = [Hostile(name, "POST", target, body, mp_auth) for name, body in bodies.items()]
    no_boundary = {**AUTH, "content-type": "multipart/form-data"}
    cases.append(Hostile("multipart-no-boundary", "POST", target, multipart(*good), no_boundary))
    return cases


def _pool_config(model_id: str = "fuzzed", extra: str = "") -> bytes:
    text = f'[[models]]\nid = "{model_id}"\nmodality = "text_generation"\nengine = "fake"\n{extra}'
    return json.dumps({"config": text}).encode()


POOL_CONFIGS = {
    "pool-nul-path": _pool_config(extra='weights_path = "w\\u0000.gguf"\n'),
    "pool-deep-toml": _pool_config(extra="[models.fake]\nx = " + "[" * 3000 + "]" * 3000 + "\n"),
    "pool-many-arch-keys": _pool_config(extra="[models.arch]\n" + "".join(f"k{i} = 1\n" for i in range(12_000))),
    "pool-huge-slots": _pool_config(extra="slots = 100000000\ncontext_len = 100000000\n"),
    "pool-negative-layers": _pool_config(extra="[models.arch]\nnum_layers = -5\n"),
    "pool-slash-id": _pool_config("a/b"),
    "pool-newline-id": _pool_config("a\\nb"),
    "pool-html-id": _pool_config("<img src=x>"),
}


def hostile_requests() -> list[Hostile]:
    """The whole corpus, every route of the server's schema table."""
    cases: list[Hostile] = []
    for method, path in sorted(ROUTE_DOCS):
        cases += _route_cases(method, path)
    cases.append(Hostile("unknown-route", "GET", "/v1/nothing", headers=AUTH))
    pool_auth = {**AUTH, **JSON_TYPE}
    cases += [Hostile(name, "POST", "/v1/models", body, pool_auth) for name, body in POOL_CONFIGS.items()]
    cases += [Hostile(name, "PUT", "/v1/models/fake-embed", body, pool_auth) for name, body in POOL_CONFIGS.items()]
    cases.append(Hostile("asterisk-target", "OPTIONS", "*"))
    cases.append(Hostile("absolute-target", "GET", "http://evil.example/v1/models", headers=AUTH))
    for name in ("..%2f..%2fetc%2fpasswd", "%00", "..", "x" * 5000, "%ff%fe.js"):
        cases.append(Hostile("playground-file", "GET", f"/playground/{name}"))
    return cases
