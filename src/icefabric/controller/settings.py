"""Controller settings, from the environment (``ICE_*``) or arguments."""

from __future__ import annotations

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """Every knob of the controller service.

    ``ICE_DATABASE_URL`` is a SQLAlchemy URL: ``sqlite:///./ice.db`` (default, nothing to
    install) or ``postgresql+psycopg://user:pw@host/db`` (``pip install 'ice-fabric[postgres]'``).
    The admin token is required: ``ICE_ADMIN_TOKEN``, or ``ICE_ADMIN_TOKEN_FILE`` (a file
    holding it; created with a random token, mode 0600, if it does not exist). Only
    ``insecure_local`` runs without one (loopback clients without a token are the admin).
    Tokens are never logged.
    """

    model_config = SettingsConfigDict(env_prefix="ICE_", extra="ignore")

    database_url: str = "sqlite:///./ice.db"
    admin_token: SecretStr | None = None
    admin_token_file: str | None = None
    enrol_token: SecretStr | None = Field(
        None, description="token agents enrol with (defaults to the admin token)")
    scheduler_token: SecretStr | None = Field(
        None, description="token that may only create and delete jobs (a job scheduler's "
        "hook); the admin token may too")
    insecure_local: bool = Field(False, description="no admin token needed from loopback "
                                 "clients (development only; `serve` binds 127.0.0.1)")
    policy: str = "ice"
    max_body_bytes: int = Field(4 << 20, ge=1024)
    max_fabric_bytes: int = Field(256 << 20, ge=1024)
    max_json_depth: int = Field(32, ge=4, le=1000, description="deepest JSON nesting "
                                "accepted in a request body")
    enrol_rate_per_s: float = Field(20.0, gt=0, description="enrolments per second per "
                                    "client address (token bucket)")
    enrol_burst: int = Field(200, ge=1, description="enrolments a client address may make "
                             "at once before the rate applies")
    long_poll_max_s: float = Field(30.0, ge=0)
    agent_timeout_s: float = Field(60.0, gt=0, description="seen within -> 'connected'")
    planner_processes: int = Field(0, ge=0, le=1, description="1: plan in a separate "
                                   "process (no GIL contention with request handling)")
    plan_debounce_s: float = Field(0.02, ge=0)
    plan_retry_s: float = Field(1.0, gt=0, description="retry a plan that could not be "
                                "stored (database unavailable) after this long")
    db_lock_timeout_s: float = Field(10.0, gt=0, description="how long a write waits for a "
                                     "locked SQLite file, or a connection for PostgreSQL")
    tune_gc: bool = Field(False, description="for a long-running server: keep the "
                          "long-lived heap (imports, the fabric) out of the garbage "
                          "collector's scans and make full collections rare; "
                          "`controller serve` turns it on")
    log_level: str = "info"

    @model_validator(mode="after")
    def _admin_token_required(self) -> Settings:
        if self.admin_token is None and self.admin_token_file is None and \
                not self.insecure_local:
            raise ValueError("no admin token: set ICE_ADMIN_TOKEN, or ICE_ADMIN_TOKEN_FILE "
                             "(a file with the token, created if missing); only an "
                             "--insecure-local controller on 127.0.0.1 runs without one")
        return self
