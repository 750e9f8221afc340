"""Default sampling: a model family's published values fill in what the client left out, the
family being the model the upstream runs (the route's `model`; the embedded model's own, in
tests/backends/embedded/)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from codexgate.app import build_app
from codexgate.config import load_settings
from codexgate.translate.chat_upstream.request import to_chat_request
from codexgate.translate.dialect import ChatDialect
from codexgate.translate.open_models.sampling import family_sampling, recommended_sampling, turn_token_cap
from codexgate.wire.responses import parse_request
from tests.support.asgi_client import StreamingASGITransport
from tests.support.asgi_upstream import ASGIUpstreamTransport
from tests.support.fake_upstream import FakeUpstream, text_reply


def body(model: str, dialect: ChatDialect | None = None, **fields: Any) -> dict[str, Any]:
    req = parse_request({"model": "codex-name", "input": "hi", **fields})
    return to_chat_request(req, dialect or ChatDialect(), model).body


@pytest.mark.parametrize(
    "model,family",
    [
        ("qwen3-coder:30b", "Qwen3-Coder"),
        ("Qwen/Qwen3-Coder-480B-A35B-Instruct", "Qwen3-Coder"),
        ("qwen2.5-coder:14b", "Qwen2.5-Coder"),
        ("Qwen/Qwen3-8B", "Qwen3 (thinking)"),
        ("deepseek-r1:14b", "DeepSeek-R1"),
        ("openai/gpt-oss-20b", "gpt-oss"),
        ("devstral-small-2507", "Mistral (Devstral, Small)"),
        ("meta-llama/Llama-3.1-8B-Instruct", "Llama 3"),
        ("SmolLM2-135M-Instruct.Q4_1.gguf", "SmolLM2"),
        ("kimi-k2", None),
    ],
)
def test_families_are_recognised_from_the_usual_model_names(model: str, family: str | None) -> None:
    found = family_sampling(model)
    assert (found.family if found else None) == family


def test_a_known_family_fills_in_temperature_and_top_p_but_not_top_k() -> None:
    sent = body("qwen3-coder:30b")
    assert (sent["temperature"], sent["top_p"]) == (0.7, 0.8) and "top_k" not in sent


def test_the_clients_values_and_the_configured_extra_body_win() -> None:
    assert body("qwen3-coder:30b", temperature=0.1)["temperature"] == 0.1
    configured = ChatDialect(extra_body={"temperature": 0.3})
    assert body("qwen3-coder:30b", configured)["temperature"] == 0.3


def test_unknown_models_and_the_off_switch_leave_sampling_to_the_server() -> None:
    assert "temperature" not in body("kimi-k2")
    assert "temperature" not in body("qwen3-coder:30b", ChatDialect(default_sampling="off"))


def test_doctor_recommendations_name_extra_keys_as_each_server_does() -> None:
    assert recommended_sampling("qwen3-coder", "llama.cpp").values == {
        "temperature": 0.7, "top_p": 0.8, "top_k": 20, "repeat_penalty": 1.05}  # fmt: skip
    assert recommended_sampling("qwen3-coder", "vLLM").values["repetition_penalty"] == 1.05
    assert recommended_sampling("qwen3-coder", "Ollama").values == {"temperature": 0.7, "top_p": 0.8}
    assert recommended_sampling("kimi-k2", "llama.cpp").values == {}  # unknown: server defaults


def test_turn_cap_is_a_quarter_of_the_window_within_bounds() -> None:
    assert [turn_token_cap(w) for w in (None, 2048, 32768, 262144)] == [8192, 1024, 8192, 16384]


async def test_a_routes_sampling_follows_the_upstream_model_it_names_not_the_route_name() -> None:
    """`qwen3-coder` routed to an upstream's SmolLM2 is sent as SmolLM2, with SmolLM2's values."""
    fake = FakeUpstream([text_reply("ok")])
    flags = {
        "discover": False,
        "upstreams": [{"name": "local", "base_url": "http://upstream.test/v1"}],
        "models": [{"name": "qwen3-coder", "upstream": "local", "model": "smollm2-135m"}],
    }
    app = build_app(load_settings(flags, environ={}), transport=ASGIUpstreamTransport(fake), environ={})
    async with httpx.AsyncClient(transport=StreamingASGITransport(app), base_url="http://gw") as client:
        response = await client.post("/v1/responses", json={"model": "qwen3-coder", "input": "hi"})
    assert response.status_code == 200, response.text
    sent = fake.requests[0].body
    assert (sent["model"], sent["temperature"], sent["top_p"]) == ("smollm2-135m", 0.2, 0.9)
