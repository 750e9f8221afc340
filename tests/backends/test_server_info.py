"""Context windows learned from what servers publish (vLLM, llama.cpp, Ollama, LM Studio), and
the gateway refusing, before sending, a request that cannot fit the learned window."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from codexgate.backends import server_info
from codexgate.backends.server_info import ContextWindow, ContextWindows, probe_context_window, server_root
from tests.server.test_app import UPSTREAM, gateway
from tests.support.asgi_upstream import ASGIUpstreamTransport
from tests.support.fake_upstream import FakeUpstream, text_reply

BASE = UPSTREAM
LLAMA_PROPS = {"/props": {"default_generation_settings": {"n_ctx": 2048}, "total_slots": 1}}
OLLAMA_SHOW = {
    "parameters": 'stop "<|im_end|>"\nnum_ctx 8192\ntemperature 0.7',
    "model_info": {"general.architecture": "qwen2", "qwen2.context_length": 32768},
}


async def probe(fake: FakeUpstream, model: str = "fake-model") -> ContextWindow | None:
    return await probe_context_window(ASGIUpstreamTransport(fake), BASE, {}, model, timeout=2)


def test_server_root_strips_the_openai_prefix() -> None:
    assert server_root("http://h:11434/v1/") == "http://h:11434"
    assert server_root("https://openrouter.ai/api/v1") == "https://openrouter.ai/api"
    assert server_root("http://h:8080") == "http://h:8080"


async def test_vllm_max_model_len_in_the_model_list() -> None:
    fake = FakeUpstream(model_fields={"fake-model": {"max_model_len": 32768}})
    assert await probe(fake) == ContextWindow(32768, "/v1/models max_model_len")


async def test_llama_cpp_runtime_context_from_props() -> None:
    # llama.cpp's /v1/models carries only the trained size (meta.n_ctx_train): ignored.
    fake = FakeUpstream(model_fields={"fake-model": {"meta": {"n_ctx_train": 8192}}}, endpoints=LLAMA_PROPS)
    assert await probe(fake) == ContextWindow(2048, "llama.cpp /props n_ctx", trained=8192)


async def test_ollama_num_ctx_parameter_wins_over_the_trained_length() -> None:
    fake = FakeUpstream(endpoints={"/api/show": OLLAMA_SHOW})
    assert await probe(fake) == ContextWindow(8192, "Ollama num_ctx parameter", trained=32768)


async def test_ollama_loaded_model_context_wins_over_everything() -> None:
    running = {"models": [{"name": "fake-model", "model": "fake-model", "context_length": 4096}]}
    fake = FakeUpstream(endpoints={"/api/show": OLLAMA_SHOW, "/api/ps": running})
    window = await probe(fake)
    assert window == ContextWindow(4096, "Ollama /api/ps context_length", trained=32768)


async def test_ollama_without_runtime_facts_reports_the_trained_length_as_such() -> None:
    show = {"parameters": "temperature 0.7", "model_info": {"llama.context_length": 131072}}
    window = await probe(FakeUpstream(endpoints={"/api/show": show}))
    assert window is not None and window.tokens == 131072 and not window.runtime


async def test_lm_studio_loaded_context() -> None:
    info = {"id": "fake-model", "max_context_length": 131072, "loaded_context_length": 16384}
    fake = FakeUpstream(endpoints={"/api/v0/models/fake-model": info})
    window = await probe(fake)
    assert window == ContextWindow(16384, "LM Studio loaded_context_length", trained=131072)


async def test_a_server_that_tells_nothing_gives_none() -> None:
    assert await probe(FakeUpstream()) is None
    transport = ASGIUpstreamTransport(None)  # unreachable
    assert await probe_context_window(transport, BASE, {}, "m", timeout=1) is None


def big_request(model: str = "fake-model") -> dict[str, Any]:
    return {"model": model, "input": "word " * 4000, "stream": True}  # 20 kB: > 3300 tokens


async def gateway_post(
    fake: FakeUpstream, bodies: list[dict[str, Any]], **settings: Any
) -> list[httpx.Response]:
    async with gateway(fake=fake, **settings) as (client, _, _):
        return list(await asyncio.gather(*(client.post("/v1/responses", json=b) for b in bodies)))


async def test_a_request_beyond_the_learned_window_is_refused_before_it_is_sent() -> None:
    fake = FakeUpstream([], endpoints=LLAMA_PROPS)
    responses = await gateway_post(fake, [big_request(), big_request()])
    for response in responses:
        assert response.status_code == 400
        error = response.json()["error"]
        assert error["code"] == "context_length_exceeded" and "2048" in error["message"]
    assert fake.requests == []
    assert fake.endpoint_requests == ["/props"]  # one probe, shared by both requests


async def test_a_request_within_the_learned_window_goes_through() -> None:
    fake = FakeUpstream([text_reply("hi")], endpoints=LLAMA_PROPS)
    [response] = await gateway_post(fake, [{"model": "fake-model", "input": "hello"}])
    assert response.status_code == 200 and response.json()["status"] == "completed"


async def test_an_output_asked_for_beyond_the_window_is_lowered_to_what_fits_beside_the_prompt(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """As Claude Code asks for 32,000 tokens of a 2k model: vLLM would refuse the request."""
    fake = FakeUpstream([text_reply("a"), text_reply("b"), text_reply("c")], endpoints=LLAMA_PROPS)
    asks = [
        {"model": "fake-model", "input": "word " * 240, "max_output_tokens": 32000},  # 1.2 kB
        {"model": "fake-model", "input": "word " * 240, "max_output_tokens": 100},
        {"model": "fake-model", "input": "word " * 1400, "max_output_tokens": 32000},  # 7 kB
    ]
    with caplog.at_level("INFO", "codexgate.backend"):
        async with gateway(fake=fake) as (client, _, _):
            for body in asks:
                assert (await client.post("/v1/responses", json=body)).status_code == 200
    sent = [request.body["max_tokens"] for request in fake.requests]
    assert 2048 - 1000 < sent[0] <= 2048 - 400  # the window less the prompt, estimated high
    assert sent[1] == 100  # fits: untouched
    assert sent[2] == 1024  # no room left: never below 1024 (the upstream says if it cannot fit)
    said = [r.getMessage() for r in caplog.records if "lowered" in r.getMessage()]
    assert len(said) == 1 and "2048 tokens" in said[0]


async def test_a_name_the_upstream_does_not_list_is_answered_as_the_one_model_it_runs() -> None:
    """llama.cpp answers any name with the model it runs: Codex's default name (or Claude Code's
    claude-*) gets that model's window and its family's sampling, under the client's own."""
    fake = FakeUpstream([text_reply("a"), text_reply("b")], models=("qwen3-coder",), endpoints=LLAMA_PROPS)
    asks = [
        {"model": "gpt-5.5", "input": "word " * 240, "max_output_tokens": 32000, "temperature": 0.3},
        {"model": "gpt-5.5", "input": "hi"},
        big_request("gpt-5.5"),
    ]
    async with gateway(fake=fake) as (client, _, _):
        answers = [await client.post("/v1/responses", json=body) for body in asks]
    assert [a.status_code for a in answers] == [200, 200, 400]  # the last past the window: unsent
    assert answers[1].json()["temperature"] == 0.7  # the echo says what was sent
    first, second = (request.body for request in fake.requests)
    assert (first["temperature"], first["top_p"]) == (0.3, 0.8)  # the client's, then Qwen3-Coder's
    assert (second["temperature"], second["top_p"]) == (0.7, 0.8)
    assert 2048 - 1000 < first["max_tokens"] <= 2048 - 400  # lowered to the window of what runs
    assert fake.endpoint_requests == ["/props"]  # one probe, of qwen3-coder


async def test_on_an_upstream_that_lists_several_models_an_unlisted_name_is_left_as_it_is() -> None:
    fake = FakeUpstream([text_reply("a")], models=("qwen3-coder", "llama-3.1"), endpoints=LLAMA_PROPS)
    async with gateway(fake=fake) as (client, _, _):
        body = {"model": "gpt-5.5", "input": "hi", "max_output_tokens": 32000}
        assert (await client.post("/v1/responses", json=body)).status_code == 200
    [sent] = (request.body for request in fake.requests)
    assert "temperature" not in sent and sent["max_tokens"] == 32000
    assert fake.endpoint_requests == []


@pytest.mark.parametrize("setting", [{"learn_context_window": False}, {"context_window": 100_000}])
async def test_learning_can_be_switched_off_or_overridden(tmp_path: Any, setting: dict[str, Any]) -> None:
    fake = FakeUpstream([text_reply("fits")], endpoints=LLAMA_PROPS)
    key, value = next(iter(setting.items()))
    config = tmp_path / "c.toml"
    if key == "learn_context_window":
        config.write_text(f'[[upstreams]]\nname = "u"\nbase_url = "{BASE}"\nlearn_context_window = false\n')
    else:
        config.write_text(
            f'[[upstreams]]\nname = "u"\nbase_url = "{BASE}"\n'
            f'[[models]]\nname = "fake-model"\ncontext_window = {value}\n'
        )
    async with gateway(fake=fake, config=config) as (client, _, _):
        response = await client.post("/v1/responses", json=big_request())
    assert response.status_code == 200 and "response.completed" in response.text
    assert fake.endpoint_requests == []


async def test_a_model_the_upstream_does_not_list_is_not_asked_about_again_until_the_list_is_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = [1000.0]
    monkeypatch.setattr(server_info, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    fake = FakeUpstream(models=["other-model"], endpoints=LLAMA_PROPS)
    windows = ContextWindows(ASGIUpstreamTransport(fake), BASE, {}, 2, "llama")
    assert windows.remembered("fake-model") == (False, None)
    assert await windows.get("fake-model") is None
    assert windows.remembered("fake-model") == (True, None)  # known: nothing to wait for
    assert windows.remembered("..") == (False, None)
    assert await windows.get("..") is None and windows.remembered("..") == (True, None)
    assert fake.endpoint_requests == [] and fake.model_list_requests == 1
    fake.models.append("fake-model")  # loaded since
    clock[0] += 61  # the list is a minute old
    assert windows.remembered("fake-model") == (False, None)
    assert await windows.get("fake-model") == 2048
    assert windows.remembered("fake-model") == (True, 2048) and fake.model_list_requests > 1


async def test_a_trained_maximum_is_asked_again_until_the_runtime_window_is_known() -> None:
    show = {"parameters": "", "model_info": {"qwen2.context_length": 32768}}
    fake = FakeUpstream(endpoints={"/api/show": show})
    windows = ContextWindows(ASGIUpstreamTransport(fake), BASE, {}, 2, "ollama")
    windows._RECHECK_SECONDS = 0.0  # type: ignore[misc]
    assert await windows.get("fake-model") == 32768  # not loaded yet: only the trained maximum
    fake.endpoints["/api/ps"] = {"models": [{"name": "fake-model", "context_length": 4096}]}
    assert await windows.get("fake-model") == 4096  # loaded with Ollama's default context
    asked = len(fake.endpoint_requests)
    assert await windows.get("fake-model") == 4096 and len(fake.endpoint_requests) == asked  # kept


async def test_learned_windows_show_in_healthz() -> None:
    fake = FakeUpstream([text_reply("hi")], endpoints=LLAMA_PROPS)
    async with gateway(fake=fake) as (client, _, _):
        await client.post("/v1/responses", json={"model": "fake-model", "input": "hello"})
        health = (await client.get("/healthz")).json()
    assert health["context_windows"] == {"default": {"fake-model": 2048}}
