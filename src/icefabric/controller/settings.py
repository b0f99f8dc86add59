"""Controller settings, from the environment (``ICE_*``) or arguments."""

from __future__ import annotations

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """Every knob of the controller service.

    ``ICE_DATABASE_URL`` is a SQLAlchemy URL: ``sqlite:///./ice.db`` (default, nothing to
    install) or ``postgresql+psycopg://user:pw@host/db``. When ``ICE_ADMIN_TOKEN`` is not set
    a random one is generated and written (mode 0600) to ``admin_token_file``; tokens are
    never logged.
    """

    model_config = SettingsConfigDict(env_prefix="ICE_", extra="ignore")

    database_url: str = "sqlite:///./ice.db"
    admin_token: SecretStr | None = None
    admin_token_file: str = "./ice-admin.token"
    enrol_token: SecretStr | None = Field(
        None, description="token agents enrol with (defaults to the admin token)")
    policy: str = "ice"
    max_body_bytes: int = Field(4 << 20, ge=1024)
    max_fabric_bytes: int = Field(256 << 20, ge=1024)
    long_poll_max_s: float = Field(30.0, ge=0)
    agent_timeout_s: float = Field(60.0, gt=0, description="seen within -> 'connected'")
    planner_processes: int = Field(0, ge=0, le=1, description="1: plan in a separate "
                                   "process (no GIL contention with request handling)")
    plan_debounce_s: float = Field(0.02, ge=0)
    log_level: str = "info"
