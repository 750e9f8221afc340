"""`codexgate doctor` against scripted servers of each kind: what it reports, what it
recommends, and the config it writes. (The real llama.cpp server is in test_llama_cpp.py.)"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from codexgate.backends.http.transport import HttpRequest
from codexgate.cli import main
from codexgate.commands.doctor.anthropic import AnthropicDoctor
from codexgate.commands.doctor.command import write_settings
from codexgate.commands.doctor.probe import Doctor, Report
from codexgate.config import load_settings
from tests.support.asgi_upstream import ASGIUpstreamTransport
from tests.support.fake_llama_server import fake_runtime
from tests.support.fake_messages_upstream import FakeMessagesUpstream, Text, anthropic_error, message_reply
from tests.support.fake_upstream import (
    JSON,
    FakeUpstream,
    Reply,
    error_reply,
    openai_error,
    raw_reply,
    text_reply,
    tool_calls_reply,
)
from tests.support.processes import free_port
from tests.support.servers import run_asgi_server

BASE = "http://upstream.test/v1"
HERMES_CALL = '<tool_call>\n{"name": "exec_command", "arguments": {"cmd": "ls -la"}}\n</tool_call>'
OLLAMA_4K = {
    "/api/show": {"parameters": "num_ctx 4096", "model_info": {"qwen2.context_length": 32768}},
    "/api/version": {"version": "0.12.0"},
}


def server(*, tools: str = "structured", usage: bool = True, context_error: bool = True) -> Any:
    """A scripted server: plain prompts get text, prompts with tools get `tools` behaviour,
    an unknown model gets 404, a prompt over the window gets a context error."""

    def reply(body: JSON) -> Reply:
        if body["model"] == "codexgate-doctor-no-such-model":
            return error_reply(404, openai_error("model 'x' not found", code="model_not_found"))
        if len(body["messages"][-1]["content"]) > 10_000:
            if context_error:
                return error_reply(400, openai_error("This model's maximum context length is 32768 tokens."))
            return text_reply("ok", usage=True)
        if body.get("tools"):
            if tools == "structured":
                return tool_calls_reply([("exec_command", '{"cmd": "ls -la"}')])
            if tools == "hermes":
                return text_reply(HERMES_CALL, usage=usage)
            if tools == "rejected":
                return error_reply(500, openai_error("Failed to parse tools", error_type="server_error"))
            return text_reply("I would run ls -la.", usage=usage)
        return text_reply("Paris is the capital of France.", usage=usage)

    return reply


async def doctor(fake: FakeUpstream, model: str | None = None) -> Report:
    steps: list[str] = []
    report = await Doctor(
        ASGIUpstreamTransport(fake), BASE, model=model, timeout=5, on_step=steps.append
    ).run()
    assert steps[0] == "reachable"  # the progress display is told before each probe
    return report


def check(report: Report, name: str) -> tuple[str, str, list[str]]:
    found = next(c for c in report.checks if c.name == name)
    return found.status, found.summary, found.details


async def test_a_vllm_like_server_with_structured_tools_and_a_big_window_is_all_good() -> None:
    fake = FakeUpstream(
        server(),
        models=["Qwen/Qwen3-Coder-30B-A3B-Instruct"],
        model_fields={"Qwen/Qwen3-Coder-30B-A3B-Instruct": {"max_model_len": 65536}},
        endpoints={"/version": {"version": "0.11.0"}},
    )
    report = await doctor(fake)
    assert report.ok, report.checks
    assert [c.status for c in report.checks] == ["ok"] * 5
    assert report.findings.server == "vLLM" and report.findings.usage_in_stream
    assert (
        "prompt over the window: 400 → codexgate sends context_length_exceeded" in check(report, "errors")[2]
    )
    assert report.recommended["upstream"] == {"name": "vllm", "base_url": BASE, "text_tool_calls": "off"}
    model = report.recommended["model"]
    assert model["context_window"] == 65536
    assert model["extra_body"] == {
        "temperature": 0.7, "top_p": 0.8, "top_k": 20, "repetition_penalty": 1.05, "max_tokens": 16384}  # fmt: skip


async def test_ollama_with_a_small_context_and_hermes_text_calls() -> None:
    fake = FakeUpstream(server(tools="hermes", usage=False), models=["qwen2.5:7b"], endpoints=OLLAMA_4K)
    report = await doctor(fake)
    assert not report.ok
    assert report.findings.server == "Ollama"
    status, summary, details = check(report, "tool calls")
    assert status == "warn" and "hermes" in summary
    status, summary, details = check(report, "context window")
    assert status == "fail" and summary.startswith("4096 tokens (Ollama num_ctx parameter)")
    assert any("truncates it silently" in d for d in details)
    assert any("OLLAMA_CONTEXT_LENGTH=32768" in d for d in details)
    assert check(report, "streaming")[0] == "warn"  # no usage in the stream
    assert report.recommended["upstream"]["text_tool_calls"] == "hermes"
    assert "top_k" not in report.recommended["model"]["extra_body"]  # Ollama's /v1 takes no top_k


async def test_a_server_that_truncates_silently_is_caught_by_the_overflow_probe() -> None:
    fake = FakeUpstream(
        server(context_error=False), endpoints={"/props": {"default_generation_settings": {"n_ctx": 32768}}}
    )
    report = await doctor(fake)
    status, _, details = check(report, "errors")
    assert status == "fail" and any("truncates silently" in d for d in details)
    assert report.findings.overflow == "truncated"


async def test_a_server_that_rejects_tools_fails_the_tool_check() -> None:
    report = await doctor(FakeUpstream(server(tools="rejected")))
    status, summary, _ = check(report, "tool calls")
    assert status == "fail" and "500" in summary and "Failed to parse tools" in summary
    assert check(report, "context window")[0] == "warn"  # the fake says nothing about its window
    assert any("not probed" in d for d in check(report, "errors")[2])  # unknown server: nothing big sent


async def test_reasoning_in_a_reasoning_field_is_replayed_in_that_field() -> None:
    chunk = {"choices": [{"index": 0, "delta": {"reasoning": "The user asks..."}, "finish_reason": None}]}
    answer = {"choices": [{"index": 0, "delta": {"content": "Paris."}, "finish_reason": "stop"}]}
    usage = {"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12}}
    events = [f"data: {json.dumps(c)}\n\n".encode() for c in (chunk, answer, usage)] + [b"data: [DONE]\n\n"]
    replies = iter([raw_reply(events)])
    fake = FakeUpstream(lambda body: next(replies, None) or server()(body))
    report = await doctor(fake)
    assert report.findings.reasoning_field == "reasoning"
    assert report.recommended["upstream"]["reasoning_replay"] == "reasoning"


async def test_an_unreachable_server_stops_after_the_first_check() -> None:
    report = await Doctor(ASGIUpstreamTransport(None), BASE, timeout=1).run()
    assert [(c.name, c.status) for c in report.checks] == [("reachable", "fail")]


def test_written_settings_merge_into_an_existing_config_and_load(tmp_path: Path) -> None:
    config = tmp_path / "codexgate.toml"
    config.write_text(
        "# my gateway\nidle_timeout = 120\n\n"
        '[[upstreams]]\nname = "ollama"\nbase_url = "http://old:11434/v1"\n\n'
        '[[upstreams]]\nname = "cloud"\nbase_url = "https://api.example/v1"\n'
    )
    recommended = {
        "upstream": {"name": "ollama", "base_url": "http://127.0.0.1:11434/v1", "text_tool_calls": "hermes"},
        "model": {"name": "qwen2.5:7b", "upstream": "ollama", "context_window": 32768,
                  "extra_body": {"temperature": 0.2, "max_tokens": 8192}},
    }  # fmt: skip
    write_settings(config, recommended)
    write_settings(config, recommended)  # twice: replaced, not duplicated
    text = config.read_text()
    assert text.startswith("# my gateway") and text.count('name = "ollama"') == 1
    settings = load_settings({}, config, environ={})
    assert settings.idle_timeout == 120
    assert [(u.name, u.base_url) for u in settings.upstreams] == [
        ("ollama", "http://127.0.0.1:11434/v1"),
        ("cloud", "https://api.example/v1"),
    ]
    [model] = settings.models
    assert model.context_window == 32768 and model.extra_body["max_tokens"] == 8192


def test_the_command_prints_the_report_and_writes_the_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = FakeUpstream(server(tools="hermes"), models=["qwen2.5:7b"], endpoints=OLLAMA_4K)
    config = tmp_path / "c.toml"
    with run_asgi_server(fake) as url:
        code = main(["doctor", "--upstream", url + "/v1", "--timeout", "5", "--write", str(config)])
    out = capsys.readouterr().out
    assert code == 1  # the 4k window breaks Codex
    assert "probing tool calls ..." in out  # progress, shown line by line off a terminal
    assert "✗ context window: 4096 tokens" in out and 'text_tool_calls = "hermes"' in out
    assert load_settings({}, config, environ={}).models[0].name == "qwen2.5:7b"


async def models_but_no_chat(scope: Any, receive: Any, send: Any) -> None:
    """A server that lists models at this base URL but has no chat API there."""
    if scope["type"] != "http":
        return
    found = scope["path"].endswith("/models")
    body = json.dumps({"object": "list", "data": [{"id": "m"}]} if found else {"detail": "Not Found"})
    await send({"type": "http.response.start", "status": 200 if found else 404,
                "headers": [(b"content-type", b"application/json")]})  # fmt: skip
    await send({"type": "http.response.body", "body": body.encode()})


async def test_a_chat_path_that_is_wrong_stops_the_probes_and_nothing_is_recommended() -> None:
    report = await Doctor(ASGIUpstreamTransport(models_but_no_chat), BASE, timeout=5).run()
    assert [(c.name, c.status) for c in report.checks] == [("reachable", "ok"), ("streaming", "fail")]
    assert not report.ok and report.unwritable is not None
    assert report.unwritable.startswith("the upstream URL is wrong: ") and "404" in report.unwritable


async def test_a_probe_that_gets_no_answer_fails_its_check() -> None:
    from codexgate.errors import UpstreamConnectError

    class DiesOnTheUnknownModel(ASGIUpstreamTransport):
        async def open(self, request: HttpRequest) -> Any:
            if request.body and b"codexgate-doctor-no-such-model" in request.body:
                raise UpstreamConnectError("the server died")  # no answer at all
            return await super().open(request)

    report = await Doctor(DiesOnTheUnknownModel(FakeUpstream(server())), BASE, timeout=5).run()
    status, _, details = check(report, "errors")
    assert status == "fail" and any(d.startswith("unknown model: no answer") for d in details)
    assert not report.ok
    assert report.unwritable is None  # chat requests were answered: the URL is right


@pytest.mark.parametrize("app", [models_but_no_chat, None])
def test_write_never_saves_a_url_found_wrong(
    app: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.test_first_contact import closed_port_url

    config = tmp_path / "c.toml"
    if app is None:
        code = main(["doctor", "--upstream", closed_port_url(), "--timeout", "2", "--write", str(config)])
    else:
        with run_asgi_server(app) as url:
            code = main(["doctor", "--upstream", url + "/v1", "--timeout", "5", "--write", str(config)])
    out = capsys.readouterr().out
    assert code == 1 and not config.exists()
    assert "nothing written to" in out and "No settings recommended" in out and "[[upstreams]]" not in out


# -- an Anthropic Messages upstream (--kind anthropic)


def test_doctor_probes_an_anthropic_upstream_and_recommends_its_settings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CLAUDE_KEY", "sk-ant-good")
    fake = FakeMessagesUpstream(lambda body: message_reply(Text("ok")), api_key="sk-ant-good")
    written = tmp_path / "codexgate.toml"
    with run_asgi_server(fake) as url:
        code = main(["doctor", "--kind", "anthropic", "--upstream", url + "/v1", "--api-key-env", "CLAUDE_KEY",
                     "--write", str(written)])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0, out
    assert "key: sent as x-api-key, from CLAUDE_KEY" in out
    assert "claude-sonnet-4-5: context window 200000 (/v1/models max_input_tokens), thinks" in out
    assert "streaming: a streamed message" in out
    settings = load_settings({}, written, environ={})
    upstream, model = settings.upstreams[0], settings.models[0]
    assert (upstream.kind, getattr(upstream, "api_key_env", None)) == ("anthropic", "CLAUDE_KEY")
    assert (model.name, model.context_window, model.supports_reasoning) == (
        "claude-sonnet-4-5",
        200_000,
        True,
    )
    assert fake.requests[0].headers["anthropic-version"] == "2023-06-01"


async def anthropic_report(
    fake: FakeMessagesUpstream, key_env: str | None, key: str | None, model: str | None = None
) -> Report:
    doctor = AnthropicDoctor(
        ASGIUpstreamTransport(fake), BASE, key_env=key_env, key=key, model=model, timeout=5
    )
    return await doctor.run()


def summaries(report: Report) -> dict[str, tuple[str, str]]:
    return {c.name: (c.status, c.summary) for c in report.checks}


async def test_doctor_says_plainly_when_the_anthropic_key_is_missing() -> None:
    report = await anthropic_report(FakeMessagesUpstream(api_key="sk-ant-good"), "ANTHROPIC_API_KEY", None)
    checks = summaries(report)
    assert checks["key"] == ("fail", "no key: ANTHROPIC_API_KEY is not set")
    assert checks["reachable"] == (
        "fail",
        "the server wants a key (HTTP 401) and ANTHROPIC_API_KEY is not set",
    )
    assert not report.ok


async def test_doctor_says_plainly_when_the_anthropic_key_is_wrong() -> None:
    report = await anthropic_report(FakeMessagesUpstream(api_key="sk-ant-good"), "K", "sk-ant-stale")
    assert summaries(report)["reachable"] == (
        "fail",
        "the key was refused (HTTP 401): the key in K is wrong or revoked",
    )
    assert report.unwritable is not None


async def test_doctor_says_plainly_when_the_model_is_unknown() -> None:
    fake = FakeMessagesUpstream(models=["claude-sonnet-4-5", "claude-haiku-4-5"])
    report = await anthropic_report(fake, None, None, model="claude-sonet-4-5")
    checks = summaries(report)
    assert checks["key"][0] == "warn"  # a local server needs none
    assert checks["model"] == ("fail", "unknown model: claude-sonet-4-5 is not one the server has")
    assert report.checks[-1].details == ["it lists: claude-sonnet-4-5, claude-haiku-4-5"]


async def test_doctor_names_an_unknown_model_the_messages_endpoint_refuses() -> None:
    # A server that lists nothing: the model is tried, and its 404 is the unknown model.
    def answer(body: JSON) -> Any:
        return anthropic_error(404, "not_found_error", f"model: {body['model']}")

    fake = FakeMessagesUpstream(answer, models=[])
    checks = summaries(await anthropic_report(fake, None, None, model="qwen-nope"))
    assert checks["streaming"] == ("fail", "unknown model: qwen-nope (the server said: model: qwen-nope)")


@pytest.fixture
def nothing_local(monkeypatch: pytest.MonkeyPatch) -> None:
    """Discovery looks at one closed port: nothing is found."""
    url = f"http://127.0.0.1:{free_port()}/v1"
    monkeypatch.setattr("codexgate.backends.discovery.LOCAL_SERVERS", (("Test server", url),))


def test_with_no_server_found_doctor_says_serve_would_run_the_embedded_model(
    tmp_path: Path, nothing_local: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CODEXGATE_LLAMA_DIR", str(tmp_path / "llama"))
    monkeypatch.delenv("CODEXGATE_EMBEDDED", raising=False)
    assert main(["doctor", "--timeout", "2"]) == 2
    said = capsys.readouterr().err
    assert "no local model server found (looked at Test server http://127.0.0.1:" in said
    assert "`codexgate serve` would answer with its embedded model instead: SmolLM2-135M (98 MB)" in said
    assert (
        f"fetched once per user when serve first starts it, about 130 MB, into {tmp_path / 'llama'}" in said
    )
    assert said.rstrip().endswith("or pass --upstream URL")
    fake_runtime(tmp_path / "llama")
    assert main(["doctor", "--timeout", "2"]) == 2
    assert f"already fetched, in {tmp_path / 'llama'}" in capsys.readouterr().err


def test_doctor_says_nothing_of_the_embedded_model_where_serve_would_not_run_it(
    tmp_path: Path, nothing_local: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CODEXGATE_LLAMA_DIR", str(tmp_path / "llama"))
    assert main(["doctor", "--no-discover"]) == 2
    assert "embedded" not in capsys.readouterr().err  # no discovery, no fallback
    monkeypatch.setenv("CODEXGATE_EMBEDDED", "false")
    assert main(["doctor", "--timeout", "2"]) == 2
    said = capsys.readouterr().err
    assert "no local model server found" in said and "embedded" not in said
