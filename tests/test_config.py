"""Settings precedence: flags > CODEXGATE_* environment > TOML file > defaults."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from codexgate.config import (
    UPSTREAM_CLASSES,
    UPSTREAM_FIELDS,
    ConfigError,
    UpstreamConfig,
    load_settings,
    read_api_key_configs,
)


def config_error(config: Path, text: str) -> str:
    """The ConfigError's message for a config file holding `text`."""
    config.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_settings({}, config, environ={})
    return str(info.value)


def test_defaults() -> None:
    settings = load_settings({}, environ={})
    assert (settings.host, settings.port, settings.idle_timeout) == ("127.0.0.1", 8787, 300.0)
    assert settings.all_upstreams() == []


def test_flags_beat_environment_beat_file(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text("idle_timeout = 10\nport = 9000\nmax_retries = 5\n")
    env = {"CODEXGATE_IDLE_TIMEOUT": "20", "CODEXGATE_PORT": "9100"}
    settings = load_settings({"idle_timeout": 30.0, "port": None}, config, environ=env)
    assert settings.idle_timeout == 30.0  # flag
    assert settings.port == 9100  # environment (the flag was not given)
    assert settings.max_retries == 5  # file


def test_config_file_from_environment_and_single_upstream_flag(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text('[[upstreams]]\nname = "b"\nbase_url = "http://b/v1"\n')
    settings = load_settings(
        {"upstream": "http://a/v1", "upstream_api_key_env": "A_KEY"},
        environ={"CODEXGATE_CONFIG": str(config)},
    )
    upstreams = settings.all_upstreams()
    assert [(u.name, u.base_url, u.api_key_env) for u in upstreams] == [
        ("default", "http://a/v1", "A_KEY"),
        ("b", "http://b/v1", None),
    ]


def test_boolean_environment_values() -> None:
    assert load_settings({}, environ={"CODEXGATE_DISCOVER": "false"}).discover is False


@pytest.mark.parametrize(
    "toml,fragment",
    [
        ('idle_timeout = "soon"', "idle_timeout"),
        ("unknown_key = 1", "unknown_key"),
        ('[[upstreams]]\nname = "a"\n', "base_url"),
        (
            '[[upstreams]]\nname = "a"\nbase_url = "http://x/v1"\n[[upstreams]]\nname = "a"\nbase_url = "http://y/v1"\n',
            "unique",
        ),
        (
            '[[upstreams]]\nname = "a"\nbase_url = "http://x/v1"\n[[models]]\nname = "m"\nupstream = "zz"\n',
            "unknown upstream",
        ),
        ('[[upstreams]]\nname = "a"\nbase_url = "http://x/v1"\ndeveloper_role = "boss"\n', "developer_role"),
        ("port = [", "not valid TOML"),
    ],
)
def test_bad_settings_say_what_to_fix(tmp_path: Path, toml: str, fragment: str) -> None:
    config = tmp_path / "c.toml"
    message = config_error(config, toml)
    assert fragment in message


def test_missing_config_file() -> None:
    with pytest.raises(ConfigError, match="not found"):
        load_settings({}, Path("/nonexistent/codexgate.toml"), environ={})


def test_api_key_comes_from_the_named_environment_variable() -> None:
    from codexgate.backends.http.target import upstream_target

    settings = load_settings({"upstream": "http://a/v1", "upstream_api_key_env": "MY_KEY"}, environ={})
    target = upstream_target(settings.all_upstreams()[0], settings, {"MY_KEY": "sk-123"})
    assert target.headers["authorization"] == "Bearer sk-123"


@pytest.mark.parametrize(
    "url,fragment",
    [
        ("not a url", "is not a URL"),
        ("localhost:11434", "did you mean http://localhost:11434/v1?"),
        ("ftp://127.0.0.1/v1", "must use http:// or https://"),
        ("http:///v1", "has no host"),
        ("http://127.0.0.1:11434/v1/chat/completions", "names an endpoint; give the API base"),
        ("http://127.0.0.1:8080/v1/models", "http://127.0.0.1:8080/v1"),
        ("http://127.0.0.1:99999/v1", "bad port"),
    ],
)
def test_upstream_urls_are_checked_at_start_with_the_fix(url: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings({"upstream": url}, environ={})
    assert fragment in str(info.value) and "--upstream" in str(info.value)


def test_a_bad_url_in_the_file_names_the_upstream_table(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text('[[upstreams]]\nname = "a"\nbase_url = "127.0.0.1:8000"\n')
    with pytest.raises(
        ConfigError,
        match=r"upstreams\[0\]\.base_url = .127.0.0.1:8000. \(upstream .a., in .*\): .*did you mean http://127.0.0.1:8000/v1",
    ):
        load_settings({}, config, environ={})


@pytest.mark.parametrize(
    "cli,environ,fragment",
    [
        ({"log_level": "loud"}, {}, "log_level = 'loud' (from --log-level): must be 'debug', 'info'"),
        ({"port": 99999}, {}, "port = 99999 (from --port): must be less than or equal to 65535"),
        ({}, {"CODEXGATE_PORT": "eighty"}, "port = 'eighty' (from CODEXGATE_PORT)"),
        ({}, {"CODEXGATE_IDLE_TIMEOUT": "soon"}, "(from CODEXGATE_IDLE_TIMEOUT)"),
    ],
)
def test_bad_values_name_where_they_came_from(
    cli: dict[str, object], environ: dict[str, str], fragment: str
) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(cli, environ=environ)
    assert fragment in str(info.value)


def test_log_level_is_case_insensitive() -> None:
    assert load_settings({"log_level": "DEBUG"}, environ={}).log_level == "debug"


@pytest.mark.parametrize(
    "toml,suggestion",
    [
        ("idle_timout = 3", "did you mean 'idle_timeout'?"),
        (
            '[[upstreams]]\nname = "a"\nbase_url = "http://a/v1"\napi_key_evn = "K"\n',
            "did you mean 'api_key_env'?",
        ),
        (
            '[[models]]\nname = "m"\ncontext_windw = 8\n[[upstreams]]\nname = "a"\nbase_url = "http://a/v1"\n',
            "did you mean 'context_window'?",
        ),
    ],
)
def test_unknown_keys_suggest_the_nearest_known_one(tmp_path: Path, toml: str, suggestion: str) -> None:
    config = tmp_path / "c.toml"
    message = config_error(config, toml)
    assert suggestion in message and str(config) in message


def test_the_example_config_loads_and_names_every_setting() -> None:
    """codexgate.example.toml is the reference a user copies: it must load, and it must mention
    every setting there is (commented out or not)."""
    from codexgate.config import ApiKeyConfig, ModelConfig, Settings

    example = Path(__file__).resolve().parents[1] / "codexgate.example.toml"
    settings = load_settings({}, example, environ={})
    assert settings.upstreams[0].name == "local" and settings.models[0].name == "coder"
    text = example.read_text()
    for fields in (Settings.model_fields, UPSTREAM_FIELDS, ModelConfig.model_fields,
                   ApiKeyConfig.model_fields):  # fmt: skip
        missing = [name for name in fields if f"{name} = " not in text and f"[[{name}]]" not in text]
        assert not missing, f"codexgate.example.toml does not mention {missing}"


def _switched_on(text: str) -> str:
    """The example with every commented-out setting and table switched on (prose left alone)."""
    import tomllib

    lines = []
    for line in text.splitlines():
        candidate = line.removeprefix("# ")
        if line.startswith("# ") and re.match(r"^\[\[\w+\]\]$", candidate):
            line = candidate
        elif line.startswith("# ") and re.match(r"^\w+ = ", candidate):
            try:
                tomllib.loads(candidate)
                line = candidate
            except tomllib.TOMLDecodeError:
                pass  # prose that happens to start like a setting
        lines.append(line)
    return "\n".join(lines) + "\n"


def _accepted(kind: str) -> set[str]:
    return set(UPSTREAM_CLASSES[kind].model_fields)


def test_every_setting_the_example_documents_is_accepted_where_it_stands(tmp_path: Path) -> None:
    """Each commented-out line of codexgate.example.toml, switched on, is a setting accepted
    where it stands (the top level, an upstream of the kind its table names, a model); each
    kind's "Takes:" list is exactly what that kind accepts, and the chat table shows them all."""
    import tomllib

    text = (Path(__file__).resolve().parents[1] / "codexgate.example.toml").read_text()
    config = tmp_path / "all.toml"
    config.write_text(_switched_on(text))
    settings = load_settings({}, config, environ={})
    kinds = [u.kind for u in settings.upstreams]
    assert (
        kinds == ["chat", "responses", "anthropic", "codex", "embedded"]
        and settings.upstream
        and settings.api_keys
    )
    assert set(tomllib.loads(config.read_text())["upstreams"][0]) == _accepted("chat")
    takes = re.findall(r'^# kind = "(\w+)":.*?^# Takes: (.*?)\.$', text, re.M | re.S)
    assert [kind for kind, _ in takes] == ["responses", "anthropic", "codex", "embedded"]
    for kind, listed in takes:
        assert {n.strip() for n in listed.replace("\n#", " ").split(",")} == _accepted(kind), kind


def test_the_configuration_page_s_examples_load(tmp_path: Path) -> None:
    page = (Path(__file__).resolve().parents[1] / "docs" / "configuration.md").read_text()
    blocks = re.findall(r"^```toml\n(.*?)^```", page, re.M | re.S)
    assert blocks
    for i, block in enumerate(blocks):
        config = tmp_path / f"block{i}.toml"
        config.write_text(block)
        load_settings({}, config, environ={})


def test_every_dialect_setting_of_an_upstream_reaches_its_dialect() -> None:
    # The dialect is built from the config by name: a ChatDialect field the config lacks would
    # silently keep its default. context_window is a model's, or an embedded upstream's.
    import dataclasses

    from codexgate.config import DIALECT_FIELDS, ChatUpstream, EmbeddedUpstream, ModelConfig
    from codexgate.translate.dialect import ChatDialect

    assert DIALECT_FIELDS - {"context_window"} <= set(ChatUpstream.model_fields)
    assert "context_window" in EmbeddedUpstream.model_fields
    upstream = ChatUpstream(
        name="u",
        base_url="http://127.0.0.1:8000/v1",
        developer_role="system",
        think_tags="off",
        loop_guard=False,
        max_tokens_field="max_completion_tokens",
        extra_body={"a": 1, "b": 1},
    )
    dialect = upstream.dialect()
    assert (dialect.developer_role, dialect.think_tags, dialect.loop_guard) == ("system", "off", False)
    assert dialect.max_tokens_field == "max_completion_tokens"
    model = ModelConfig(name="m", think_tags="start_inside", context_window=4096, extra_body={"b": 2})
    routed = model.dialect_for(dialect)
    assert routed.think_tags == "start_inside" and routed.context_window == 4096
    assert routed.developer_role == "system" and routed.extra_body == {"a": 1, "b": 2}
    assert routed.text_tool_calls == ChatDialect().text_tool_calls  # unset on the model: the upstream's
    assert {f.name for f in dataclasses.fields(ChatDialect)} == DIALECT_FIELDS


def test_an_upstream_kind_other_than_chat_is_refused() -> None:
    from pydantic import ValidationError

    from codexgate.config import ChatUpstream, CodexUpstream, parse_upstream

    with pytest.raises(ValidationError):
        ChatUpstream(name="u", base_url="http://127.0.0.1:8000/v1", kind="codex")  # type: ignore[arg-type]
    with pytest.raises(
        ValidationError, match="base_url applies to upstreams of kind anthropic or chat or responses"
    ):
        CodexUpstream(name="u", base_url="http://127.0.0.1:8000/v1")  # type: ignore[call-arg]
    with pytest.raises(ValidationError, match="base_url applies"):
        parse_upstream({"name": "u", "base_url": "http://127.0.0.1:8000/v1", "kind": "codex"})


def test_each_kind_of_upstream_takes_its_own_settings_and_refuses_the_others(tmp_path: Path) -> None:
    from codexgate.config import CodexUpstream, ResponsesUpstream

    def load(upstream: str) -> list[UpstreamConfig]:
        config = tmp_path / "c.toml"
        config.write_text(f"[[upstreams]]\n{upstream}\n")
        return load_settings({}, config, environ={}).upstreams

    codex = 'name = "agent"\nkind = "codex"\nsandbox = "workspace-write"\napproval = "on-request"'
    responses = (
        'name = "oa"\nkind = "responses"\nbase_url = "https://api.openai.com/v1"\ntool_format = "native"'
    )
    [agent] = load(codex)
    assert isinstance(agent, CodexUpstream) and not hasattr(agent, "base_url")
    assert (agent.kind, agent.sandbox, agent.approval) == ("codex", "workspace-write", "on-request")
    assert agent.approval_answer == "decline" and agent.codex_bin == "codex"
    [oa] = load(responses)
    assert isinstance(oa, ResponsesUpstream) and (oa.kind, oa.tool_format) == ("responses", "native")
    for bad, named in [
        (
            codex + '\nbase_url = "http://127.0.0.1:1/v1"',
            "base_url applies to upstreams of kind anthropic or chat or responses",
        ),
        (codex + '\ndeveloper_role = "system"', "developer_role applies to upstreams of kind chat"),
        (responses + '\nsandbox = "read-only"', "sandbox applies to upstreams of kind codex"),
        ('name = "c"\nbase_url = "http://127.0.0.1:1/v1"\ntool_format = "native"', "tool_format"),
        ('name = "r"\nkind = "responses"', "needs a base_url"),
    ]:
        with pytest.raises(ConfigError, match=named):
            load(bad)


def _numeric_fields() -> list[tuple[str, str, object]]:
    from codexgate.config import ModelConfig, Settings

    found = []
    tables = (
        ("settings", Settings.model_fields),
        ("upstreams", UPSTREAM_FIELDS),
        ("models", ModelConfig.model_fields),
    )
    for table, fields in tables:
        for name, field in fields.items():
            if field.annotation in (int, float, int | None, float | None):
                found.append((table, name, field))
    return found


@pytest.mark.parametrize("table,name,field", _numeric_fields(), ids=lambda v: v if isinstance(v, str) else "")
def test_every_numeric_setting_has_a_range(table: str, name: str, field: object) -> None:
    """A number out of any sensible range (a negative timeout, a zero body limit, a thousand
    retries) must stop the gateway at start, not make every request fail later."""
    import annotated_types

    metadata = getattr(field, "metadata", [])
    assert any(isinstance(m, (annotated_types.Gt, annotated_types.Ge)) for m in metadata), (
        f"{table}.{name}: no lower bound"
    )
    assert any(isinstance(m, (annotated_types.Lt, annotated_types.Le)) for m in metadata), (
        f"{table}.{name}: no upper bound"
    )


@pytest.mark.parametrize(
    "toml,cli,environ,fragment",
    [
        ("idle_timeout = -5", {}, {}, "idle_timeout = -5 (in {file}): must be greater than 0"),
        (
            "",
            {"max_body_bytes": 0},
            {},
            "max_body_bytes = 0 (from --max-body-bytes): must be greater than or equal to 1024",
        ),
        (
            "",
            {},
            {"CODEXGATE_MAX_RETRIES": "-3"},
            "max_retries = '-3' (from CODEXGATE_MAX_RETRIES): must be greater than or equal to 0",
        ),
        ("max_retries = 1000", {}, {}, "max_retries = 1000 (in {file}): must be less than or equal to 100"),
        (
            '[[upstreams]]\nname = "local"\nbase_url = "http://127.0.0.1:1/v1"\nidle_timeout = -5\n',
            {},
            {},
            "upstreams[0].idle_timeout = -5 (upstream 'local', in {file}): must be greater than 0",
        ),
        (
            '[[upstreams]]\nname = "local"\nbase_url = "http://127.0.0.1:1/v1"\nmax_retries = -1\n',
            {},
            {},
            "upstreams[0].max_retries = -1 (upstream 'local', in {file})",
        ),
        (
            '[[models]]\nname = "m"\ncontext_window = 0\n',
            {"upstream": "http://a/v1"},
            {},
            "models[0].context_window = 0 (model 'm', in {file}): must be greater than 0",
        ),
    ],
)
def test_out_of_range_values_stop_the_start_naming_the_setting_and_its_source(
    tmp_path: Path, toml: str, cli: dict[str, object], environ: dict[str, str], fragment: str
) -> None:
    config = tmp_path / "c.toml"
    config.write_text(toml + "\n")
    with pytest.raises(ConfigError) as info:
        load_settings(cli, config, environ=environ)
    assert fragment.format(file=config) in str(info.value)


def test_a_route_to_an_unknown_upstream_names_the_model_entry_the_file_and_the_upstreams(
    tmp_path: Path,
) -> None:
    config = tmp_path / "codexgate.toml"
    config.write_text(
        '[[upstreams]]\nname = "a"\nbase_url = "http://a/v1"\n[[upstreams]]\nname = "b"\nbase_url = "http://b/v1"\n'
        '[[models]]\nname = "m"\nupstream = "nope"\n'
    )
    with pytest.raises(ConfigError) as info:
        load_settings({}, config, environ={})
    assert str(info.value) == (
        f"invalid settings: models[0] (in {config}): model 'm' routes to unknown upstream 'nope'; "
        "the upstreams are: a, b"
    )


def test_an_unknown_kind_is_echoed_with_the_valid_kinds(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    message = config_error(config, '[[upstreams]]\nname = "x"\nkind = "ollama"\nbase_url = "http://a/v1"\n')
    assert "upstreams[0].kind = 'ollama' (upstream 'x', in " in message
    assert "must be 'chat', 'responses', 'anthropic', 'codex' or 'embedded'" in message


def test_a_setting_of_another_kind_names_the_entry_and_the_setting(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    message = config_error(
        config, '[[upstreams]]\nname = "agent"\nkind = "codex"\ndeveloper_role = "system"\n'
    )
    assert (
        f"upstreams[0].developer_role (upstream 'agent', in {config}): developer_role applies to upstreams of kind chat"
        in message
    )


def test_a_global_setting_inside_an_upstream_says_it_is_global(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    message = config_error(
        config, '[[upstreams]]\nname = "a"\nbase_url = "http://a/v1"\nhistory_cache_mb = 64\n'
    )
    assert "upstreams[0].history_cache_mb = 64 (upstream 'a', in " in message
    assert "history_cache_mb is set at the top level of the file" in message


def test_an_upstream_that_names_no_kind_is_a_chat_upstream_and_each_kind_is_its_own_model() -> None:
    import typing

    from codexgate.config import UPSTREAM_KINDS, ChatUpstream, UpstreamKind, parse_upstream

    assert UPSTREAM_KINDS == typing.get_args(UpstreamKind) == tuple(UPSTREAM_CLASSES)
    bare = parse_upstream({"name": "a", "base_url": "http://a/v1"})
    assert isinstance(bare, ChatUpstream) and bare.kind == "chat" and "kind" not in bare.model_fields_set
    tables = {
        "chat": {"base_url": "http://a/v1"},
        "responses": {"base_url": "http://a/v1"},
        "anthropic": {"base_url": "http://a/v1"},
        "codex": {},
        "embedded": {},
    }
    for kind, cls in UPSTREAM_CLASSES.items():
        upstream = parse_upstream({"name": kind, "kind": kind, **tables[kind]})
        assert type(upstream) is cls and upstream.kind == kind == cls.model_fields["kind"].default


@pytest.mark.parametrize(
    "table,fragment",
    [
        (
            'name = "agent"\nkind = "codex"\nmax_threads = 0',
            "upstreams[0].max_threads = 0 (upstream 'agent', in {file}): must be greater than 0",
        ),
        (
            'name = "r"\nkind = "responses"',
            "upstreams[0].base_url (upstream 'r', in {file}): an upstream of kind 'responses' needs a base_url",
        ),
        (
            'name = "e"\nkind = "embedded"\nextra_body = { top_k = 20 }\ntool_format = "native"',
            "upstreams[0].tool_format (upstream 'e', in {file}): tool_format applies to upstreams of kind "
            "responses, not 'embedded'",
        ),
        (
            'name = "c"\nbase_url = "http://a/v1"\nextra_boddy = {}',
            "upstreams[0].extra_boddy (upstream 'c', in {file}): unknown setting; did you mean 'extra_body'?",
        ),
        (
            'name = "c"\nkind = "codex"\ntext_tool_calls = "yaml"',
            "upstreams[0].text_tool_calls (upstream 'c', in {file}): text_tool_calls must be one of",
        ),
    ],
)
def test_an_error_inside_an_upstream_of_any_kind_names_it_as_written(
    tmp_path: Path, table: str, fragment: str
) -> None:
    config = tmp_path / "c.toml"
    message = config_error(config, f"[[upstreams]]\n{table}\n")
    assert fragment.format(file=config) in message


def test_an_upstream_that_is_not_a_table_says_so(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    message = config_error(config, 'upstreams = ["http://a/v1"]\n')
    assert f"upstreams[0] = 'http://a/v1' (in {config}): must be a valid dictionary" in message


def test_the_single_upstream_flag_is_a_chat_upstream() -> None:
    from codexgate.config import ChatUpstream

    settings = load_settings({"upstream": "http://a/v1"}, environ={})
    [upstream] = settings.all_upstreams()
    assert isinstance(upstream, ChatUpstream) and upstream.name == "default"


KEY = '[[api_keys]]\nname = "alice"\nkey_env = "ALICE_KEY"\n'
ROUTE = '[[upstreams]]\nname = "local"\nbase_url = "http://127.0.0.1:8000/v1"\n[[models]]\nname = "coder"\naliases = ["qc"]\n'


def test_a_key_takes_its_limits_by_their_names(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    limits = (
        "requests_per_minute = 60\ntokens_per_minute = 200000\nmax_concurrent = 4\ntokens_per_day = 5000000\n"
    )
    config.write_text(ROUTE + KEY + limits + 'models = ["coder", "qc"]\nadmin = true\n')
    key = load_settings({}, config, environ={}).api_keys[0]
    assert (key.requests_per_minute, key.tokens_per_minute, key.max_concurrent, key.tokens_per_day) == (
        60, 200000, 4, 5000000,
    )  # fmt: skip
    assert key.models == ["coder", "qc"] and key.admin and key.limited


@pytest.mark.parametrize(
    ("line", "said"),
    [
        ("requests_per_minute = 0", "api_keys[0].requests_per_minute = 0 (api key 'alice', in "),
        ("max_concurrent = -1", "api_keys[0].max_concurrent = -1"),
        ("tokens_per_day = 10000000000000000", "less than or equal to 1000000000000000"),
        ("models = []", "api_keys[0].models"),
        (
            'models = ["coderr"]',
            "key 'alice' names model 'coderr', which is not routed; the models are: coder, qc",
        ),
        ("requests_per_mintue = 5", "did you mean 'requests_per_minute'?"),
    ],
)
def test_a_key_s_wrong_limit_is_named(tmp_path: Path, line: str, said: str) -> None:
    assert said in config_error(tmp_path / "c.toml", ROUTE + KEY + line + "\n")


@pytest.mark.parametrize(
    "table",
    [
        '[[upstreams]]\nname = "gpu1"\nbase_ur = "http://a/v1"\n',
        '[[upstreams]]\nname = "gpu1"\nkind = "responses"\nbaseurl = "http://a/v1"\n',
    ],
)
def test_a_misspelt_required_setting_gets_the_nearest_known_one(tmp_path: Path, table: str) -> None:
    config = tmp_path / "c.toml"
    assert config_error(config, table) == (
        f"invalid settings: upstreams[0].{table.split(chr(10))[-2].split(' = ')[0]} = 'http://a/v1' "
        f"(upstream 'gpu1', in {config}): unknown setting; did you mean 'base_url'?"
    )


def test_a_misspelt_required_key_of_a_route_or_a_key_is_said_once_as_the_misspelling(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    message = config_error(
        config, ROUTE.replace('name = "coder"', 'nmae = "coder"') + KEY.replace("key_env", "key_evn")
    )
    assert message == (
        f"invalid settings: models[0].nmae = 'coder' (in {config}): unknown setting; did you mean 'name'?; "
        f"api_keys[0].key_evn = 'ALICE_KEY' (api key 'alice', in {config}): unknown setting; "
        "did you mean 'key_env'?"
    )


BAD_KEY_LINES = [
    "max_concurrent = -1",
    "tokens_per_day = 10000000000000000",
    "requests_per_mintue = 5",
    "models = []",
    'models = ["coderr"]',
    '[[api_keys]]\nname = "bob"\nkey_env = 7',
]


@pytest.mark.parametrize("line", BAD_KEY_LINES)
def test_a_key_a_start_refuses_is_refused_at_reload_in_the_same_words(tmp_path: Path, line: str) -> None:
    config = tmp_path / "c.toml"
    config.write_text(ROUTE + KEY)
    served = load_settings({}, config, environ={})
    at_start = config_error(config, ROUTE + KEY + line + "\n")
    with pytest.raises(ConfigError) as info:
        read_api_key_configs(config, served)
    assert str(info.value) == at_start
    assert (
        "\n" not in at_start
        and "pydantic" not in at_start
        and at_start.startswith("invalid settings: api_keys[")
    )


def test_a_key_naming_an_unknown_route_is_refused_with_the_nearest_one(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    message = config_error(config, ROUTE + KEY + 'models = ["coder", "qcc"]\n')
    assert message == (
        f"invalid settings: api_keys[0].models[1] (in {config}): key 'alice' names model 'qcc', which is "
        "not routed; the models are: coder, qc; did you mean 'qc'?"
    )
    far = config_error(config, ROUTE + KEY + 'models = ["zzz"]\n')
    assert far.endswith("which is not routed; the models are: coder, qc")


def test_without_routes_a_key_names_the_models_the_upstreams_list(tmp_path: Path) -> None:
    listing = '[[upstreams]]\nname = "local"\nbase_url = "http://127.0.0.1:8000/v1"\nmodels = ["qwen3"]\n'
    config = tmp_path / "c.toml"
    message = config_error(config, listing + KEY + 'models = ["qwen"]\n')
    assert message.endswith(
        "key 'alice' names model 'qwen', which no upstream lists; the upstreams' models are: qwen3; "
        "did you mean 'qwen3'?"
    )
    config.write_text(listing + KEY + 'models = ["qwen3"]\n')
    assert load_settings({}, config, environ={}).api_keys[0].models == ["qwen3"]
    # An upstream that lists no models serves what clients name: only asking it could tell.
    unlisted = '[[upstreams]]\nname = "other"\nbase_url = "http://127.0.0.1:8001/v1"\n'
    config.write_text(listing + unlisted + KEY + 'models = ["anything"]\n')
    assert load_settings({}, config, environ={}).api_keys[0].models == ["anything"]
    config.write_text(KEY + 'models = ["anything"]\n')
    assert load_settings({"upstream": "http://a/v1"}, config, environ={}).api_keys[0].models == ["anything"]


def test_a_reloaded_key_must_name_a_route_being_served(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text(ROUTE + KEY)
    served = load_settings({}, config, environ={})
    # A route added to the file with the key is not served until a restart: the key is refused.
    config.write_text(ROUTE + '[[models]]\nname = "new"\n' + KEY + 'models = ["new"]\n')
    with pytest.raises(ConfigError, match="key 'alice' names model 'new', which is not routed"):
        read_api_key_configs(config, served)
    config.write_text(ROUTE + KEY + 'models = ["qc"]\n')
    assert read_api_key_configs(config, served)[0].models == ["qc"]
