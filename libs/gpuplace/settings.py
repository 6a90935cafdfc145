"""Configuration as one validated object, read once at start-up from `GPUPLACE_*` variables.

Secrets (the database password inside `GPUPLACE_DATABASE_URL`) come only from the environment or a
Kubernetes Secret mounted into it, and never appear in `repr()` or logs: `database_url` is a SecretStr.
"""

from __future__ import annotations

from pydantic import AliasChoices, Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="GPUPLACE_", extra="ignore")

    kafka_bootstrap: str = "127.0.0.1:19092"
    database_url: SecretStr = SecretStr("postgresql+asyncpg://gpuplace:gpuplace@127.0.0.1:55432/gpuplace")
    kubeconfig: str | None = Field(default=None, validation_alias=AliasChoices("GPUPLACE_KUBECONFIG", "KUBECONFIG"))
    cluster: str = Field(default="east", pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
    region: str = "local"
    scheduler_name: str = "gpuplace"
    policy: str = "gpuplace"
    consumer_group_prefix: str = "gpuplace"
    topic_suffix: str = ""  # lets tests share one broker without colliding
    log_level: str = "INFO"

    def topic(self, name: str) -> str:
        return f"{name}{self.topic_suffix}"


def load() -> Settings:
    return Settings()


__all__ = ["Settings", "load"]
