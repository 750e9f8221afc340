"""Settings: one typed object built once from, in order of precedence, command-line flags,
`CODEXGATE_*` environment variables, a TOML file and defaults (docs/configuration.md).

- checks.py: the errors, the bounds, the checks the tables share
- upstreams.py: an `[[upstreams]]` table, one model per kind, `UpstreamConfig` their union
- settings.py: `Settings`, with its `[[models]]` and `[[api_keys]]` tables
- load.py: `load_settings` (flags, environment, file) and its errors in plain words
- flags.py: the flags of `serve`, generated from the settings (imported by the CLI only)
"""

from codexgate.config.checks import ConfigError, SettingError, check_upstream_url
from codexgate.config.load import (
    API_KEYS_ENV,
    ENV_PREFIX,
    load_settings,
    read_api_key_configs,
    resolve_config_file,
)
from codexgate.config.settings import (
    LIST_SETTINGS,
    SINGLE_UPSTREAM_NAME,
    TABLE_SETTINGS,
    ApiKeyConfig,
    Balance,
    LogLevel,
    ModelConfig,
    PoolMember,
    Settings,
)
from codexgate.config.upstreams import (
    DIALECT_FIELDS,
    UPSTREAM_CLASSES,
    UPSTREAM_FIELDS,
    UPSTREAM_KINDS,
    AnthropicUpstream,
    ApprovalAnswer,
    ApprovalPolicy,
    ChatUpstream,
    CodexUpstream,
    EmbeddedUpstream,
    HttpUpstream,
    ResponsesUpstream,
    SandboxMode,
    UpstreamBase,
    UpstreamConfig,
    UpstreamKind,
    parse_upstream,
)

__all__ = [
    "API_KEYS_ENV",
    "DIALECT_FIELDS",
    "ENV_PREFIX",
    "LIST_SETTINGS",
    "SINGLE_UPSTREAM_NAME",
    "TABLE_SETTINGS",
    "UPSTREAM_CLASSES",
    "UPSTREAM_FIELDS",
    "UPSTREAM_KINDS",
    "AnthropicUpstream",
    "ApiKeyConfig",
    "ApprovalAnswer",
    "ApprovalPolicy",
    "ChatUpstream",
    "CodexUpstream",
    "ConfigError",
    "EmbeddedUpstream",
    "HttpUpstream",
    "LogLevel",
    "Balance",
    "ModelConfig",
    "PoolMember",
    "ResponsesUpstream",
    "SandboxMode",
    "SettingError",
    "Settings",
    "UpstreamBase",
    "UpstreamConfig",
    "UpstreamKind",
    "check_upstream_url",
    "load_settings",
    "parse_upstream",
    "read_api_key_configs",
    "resolve_config_file",
]
