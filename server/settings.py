"""Server settings: a YAML file, the environment (``FOREWARN_*``) and the command line.

Precedence, highest first: command-line options, environment variables, the YAML
file given with ``--config``, the defaults below. Unknown keys in the file are
errors that name the key, so a typo never silently falls back to a default.
"""
from __future__ import annotations

import hashlib
import ipaddress
import re
from contextvars import ContextVar
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, PydanticBaseSettingsSource, SettingsConfigDict

from ..errors import ConfigError

__all__ = ["ApiKey", "ConfigError", "Limits", "Role", "ServerSettings", "is_loopback", "load_settings"]

MODEL_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
BUILTIN_MODEL = "builtin"


class Role(str, Enum):
    """What a key may do. ``admin`` may do everything the other two may."""

    AGENT = "agent"
    APPROVER = "approver"
    ADMIN = "admin"


class ApiKey(BaseModel):
    """One API key. ``name`` is who the audit log says acted (default: a key fingerprint)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    key: SecretStr = Field(min_length=1)
    role: Role
    name: str | None = None
    # an agent key's sessions belong to its tenant (default: the key's own name, so two agent keys
    # never see each other's sessions); an approver key sees the tenants listed (default: all)
    tenant: str | None = Field(default=None, min_length=1, max_length=128)
    tenants: tuple[str, ...] | None = None

    @property
    def principal(self) -> str:
        # never the key itself: the audit log may be read by people who must not act as the key
        return self.name or "key-" + hashlib.sha256(self.key.get_secret_value().encode()).hexdigest()[:10]

    @property
    def own_tenant(self) -> str:
        return self.tenant or self.principal


class Limits(BaseModel):
    """Bounds on what one request may ask of the server."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_body_bytes: int = Field(default=1 << 20, ge=1024)
    max_state_depth: int = Field(default=32, ge=1, le=512)
    # JSON values in a step's state / action (or characters of a text action): the predicates' work
    max_state_items: int = Field(default=50_000, ge=10)
    max_action_items: int = Field(default=10_000, ge=10)
    max_metadata_bytes: int = Field(default=16 << 10, ge=256)  # a session's metadata, as JSON
    max_metadata_items: int = Field(default=2_000, ge=10)  # JSON values in a session's metadata (max_state_depth too)
    # the memory the metadata of a tenant's open sessions holds together, as Python objects (estimated:
    # server._http.held_bytes; a closed or expired session's is released), not its JSON size, which can
    # be 20 times smaller (`[[],[],…]`: 3 bytes of JSON, 72 of memory per list)
    max_tenant_metadata_bytes: int = Field(default=16 << 20, ge=1024)
    max_batch: int = Field(default=1000, ge=1)
    max_wait_seconds: float = Field(default=60.0, gt=0)
    max_page: int = Field(default=1000, ge=1)
    max_session_steps: int = Field(default=1_000_000, ge=1)
    memo_bytes: int = Field(default=64 << 20, ge=1 << 16)  # per model: the predicates' memo tables
    # seconds of CPU one step's CEL predicates may cost, estimated before they run (guard/_cel_cost.py);
    # a step past it is answered with the unseen-state action. null: unbounded
    predicate_cpu_seconds: float | None = Field(default=0.05, gt=0, le=60)
    header_timeout: float = Field(default=10.0, gt=0)  # seconds to send a request's headers
    body_timeout: float = Field(default=30.0, gt=0)  # seconds to send a whole body, from its headers
    max_connections: int = Field(default=1000, ge=1)
    # open connections per client address (0: no cap; behind a reverse proxy the proxy caps per client)
    max_connections_per_client: int = Field(default=64, ge=0)
    # at max_connections, a new connection closes the one whose request has been incomplete (headers or body
    # not all in) the longest, if for more than this many seconds (null: the new one is refused instead)
    evict_stalled_after: float | None = Field(default=1.0, gt=0)
    keep_alive_seconds: float = Field(default=5.0, gt=0)
    rate_per_key: float | None = Field(default=None, gt=0)  # requests per second per key (a token bucket)
    rate_burst: int = Field(default=100, ge=1)


_CONFIG_FILE: ContextVar[Path | None] = ContextVar("forewarn_server_config", default=None)


class _YamlFile(PydanticBaseSettingsSource):
    """The ``--config`` file, read with errors that name it."""

    def __init__(self, settings_cls: type[BaseSettings], path: Path | None) -> None:
        super().__init__(settings_cls)
        self.data: dict[str, Any] = {}
        if path is None:
            return
        try:
            document = yaml.safe_load(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read config file: {exc.strerror}") from exc
        except UnicodeDecodeError as exc:
            raise ConfigError(f"{path}: not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset {exc.start}); "
                              "a server config is a YAML file") from exc
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path}: YAML does not parse: {exc}") from exc
        if document is None:
            return
        if not isinstance(document, dict):
            raise ConfigError(f"{path}: a server config must be a YAML mapping, got {type(document).__name__}")
        self.data = document

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        return self.data.get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return dict(self.data)


# Its validators raise plain ValueError, as pydantic requires: load_settings turns the ValidationError
# into a ConfigError naming the key.
class ServerSettings(BaseSettings):
    """Everything ``forewarn serve`` can be told. Environment variables are ``FOREWARN_<FIELD>``.

    ``api_keys`` reads ``"key1:agent,key2:approver:alice,key3:admin"`` (key, role and an
    optional name) from the environment, or a list of ``{key, role, name}`` from the file.
    ``models`` maps names to model files; empty means the built-in demo model.
    """

    model_config = SettingsConfigDict(env_prefix="FOREWARN_", extra="forbid", frozen=True)

    host: str = "127.0.0.1"
    port: int = Field(default=8321, ge=0, le=65535)
    db: Path | str = Path("forewarn.db")  # a SQLite file, or a postgresql:// URL shared by replicas
    models: dict[str, Path] = Field(default_factory=dict)
    default_model: str | None = None
    api_keys: Annotated[tuple[ApiKey, ...], NoDecode] = ()
    insecure_no_auth: bool = False
    metrics_public: bool = False
    synchronous: Literal["normal", "full"] = "normal"
    store_states: bool = False
    session_cache: int = Field(default=10_000, ge=1)
    limits: Limits = Limits()
    access_log: bool = False
    opentelemetry: bool = False  # FastAPI's native OpenTelemetry hooks (costly per request; off by default)
    log_level: Literal["critical", "error", "warning", "info", "debug"] = "info"
    # what a model may name and where it may come from (docs/security.md)
    # retired (the 0.1 allow-list of modules): any value is refused with how to register instead
    python_predicates: Annotated[tuple[str, ...], NoDecode] = ()
    trusted_keys: Annotated[tuple[Path, ...], NoDecode] = ()  # Ed25519 public keys; set: models must be signed
    model_dirs: Annotated[tuple[Path, ...], NoDecode] = ()  # POST /v1/models paths must lie inside one
    idempotency_hours: float = Field(default=24.0, gt=0)  # how long answers to Idempotency-Key writes are kept
    # a session with no step for this long is closed (server/expiry.py); None: never
    session_idle_seconds: float | None = Field(default=3600.0, gt=0)
    # an approver must give a reason to decide on a call that makes a valid_transitions.irreversible predicate hold
    require_reason_irreversible: bool = True

    @classmethod
    def settings_customise_sources(cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
                                   env_settings: PydanticBaseSettingsSource,
                                   dotenv_settings: PydanticBaseSettingsSource,
                                   file_secret_settings: PydanticBaseSettingsSource,
                                   ) -> tuple[PydanticBaseSettingsSource, ...]:
        return init_settings, env_settings, _YamlFile(settings_cls, _CONFIG_FILE.get())

    @field_validator("api_keys", mode="before")
    @classmethod
    def _parse_keys(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        keys = []
        for position, item in enumerate(part.strip() for part in value.split(",")):
            if not item:
                continue
            key, _, rest = item.partition(":")
            role, _, rest = rest.partition(":")
            name, _, tenant = rest.partition(":")
            if not key or not role:
                raise ValueError(f"entry {position + 1} must be written 'key:role', 'key:role:name' or "
                                 f"'key:role:name:tenant' (role one of agent, approver, admin; an approver's "
                                 f"tenants separated by '|')")
            entry: dict[str, Any] = {"key": key, "role": role, "name": name or None}
            if tenant:
                if role == Role.APPROVER.value:
                    entry["tenants"] = tuple(t for t in tenant.split("|") if t)
                else:
                    entry["tenant"] = tenant
            keys.append(entry)
        return keys

    @field_validator("db", mode="before")
    @classmethod
    def _db(cls, value: Any) -> Any:
        # a URL stays a string (as a Path, its "//" would collapse); anything else is a file
        if isinstance(value, str) and value.startswith(("postgresql://", "postgres://")):
            return value
        return Path(value) if isinstance(value, str) else value

    @field_validator("python_predicates", "trusted_keys", "model_dirs", mode="before")
    @classmethod
    def _comma_list(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(part.strip() for part in value.split(",") if part.strip())
        return value

    @field_validator("python_predicates")
    @classmethod
    def _retired(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        from ..guard.trust import RETIRED_ALLOW_LIST

        if value:
            raise ValueError(RETIRED_ALLOW_LIST)
        return value

    @field_validator("models")
    @classmethod
    def _model_names(cls, value: dict[str, Path]) -> dict[str, Path]:
        for name in value:
            if not re.match(MODEL_NAME_PATTERN, name):
                raise ValueError(f"model name {name!r} must match {MODEL_NAME_PATTERN}")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> ServerSettings:
        names = self.model_names
        if self.default_model is not None and self.default_model not in names:
            raise ValueError(f"default_model {self.default_model!r} is not one of the models {names}")
        secrets = [k.key.get_secret_value() for k in self.api_keys]
        if len(set(secrets)) != len(secrets):
            raise ValueError("api_keys: the same key is listed twice")
        if self.insecure_no_auth and not is_loopback(self.host):
            raise ValueError(f"insecure_no_auth serves without any authentication and is only allowed on a "
                             f"loopback address, not host {self.host!r}")
        return self

    @property
    def model_names(self) -> list[str]:
        return list(self.models) or [BUILTIN_MODEL]

    @property
    def default(self) -> str:
        return self.default_model or self.model_names[0]


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def load_settings(config: Path | None = None, **overrides: Any) -> ServerSettings:
    """Settings from ``config`` (YAML), the environment and ``overrides`` (None values ignored).

    Raises:
        ConfigError: naming the file or variable and the key that is wrong.
    """
    token = _CONFIG_FILE.set(config)
    try:
        return ServerSettings(**{k: v for k, v in overrides.items() if v is not None})
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"])
        where = f"{config}: " if config is not None else "server settings: "
        message = first["msg"].removeprefix("Value error, ")
        if not field:  # a check across settings: its message names the keys
            raise ConfigError(f"{where}{message}") from exc
        raise ConfigError(f"{where}{field}: {message} (set on the command line, as FOREWARN_{field.split('.')[0].upper()} "
                          "or in the config file)") from exc
    finally:
        _CONFIG_FILE.reset(token)
