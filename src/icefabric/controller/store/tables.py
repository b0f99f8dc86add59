"""Database tables (SQLAlchemy 2 typed mappings), separate from the API models.

JSON documents (topology, reports, plans) are stored as text so that SQLite and PostgreSQL
behave the same; tokens are stored only as SHA-256 digests.
"""

from __future__ import annotations

from sqlalchemy import Float, Index, Integer, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    pass


class SchemaMigration(Base):
    __tablename__ = "ice_schema_migrations"

    version: Mapped[int] = mapped_column(Integer, primary_key=True)
    description: Mapped[str] = mapped_column(String(200))
    applied_at: Mapped[float] = mapped_column(Float)


class FabricRow(Base):
    """Fabric versions; the highest version is current."""

    __tablename__ = "ice_fabric"

    version: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    document: Mapped[str] = mapped_column(Text)
    plan_seed: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[float] = mapped_column(Float)


class LinkDownV1Row(Base):
    """Node pairs whose cables were down, schema 1-3 (every cable of the pair); migration 4
    moves them to :class:`CableDownRow`."""

    __tablename__ = "ice_link_down"

    a: Mapped[str] = mapped_column(String(128), primary_key=True)
    b: Mapped[str] = mapped_column(String(128), primary_key=True)
    since: Mapped[float] = mapped_column(Float)


class CableDownRow(Base):
    """Cables currently down: node names ordered a < b, and the cable's index among the
    parallel cables between them (-1: every one, from a schema-3 database, until the
    controller next loads it against its fabric)."""

    __tablename__ = "ice_cable_down"

    a: Mapped[str] = mapped_column(String(128), primary_key=True)
    b: Mapped[str] = mapped_column(String(128), primary_key=True)
    cable: Mapped[int] = mapped_column(Integer, primary_key=True)
    since: Mapped[float] = mapped_column(Float)


class HostRow(Base):
    __tablename__ = "ice_hosts"

    host: Mapped[str] = mapped_column(String(128), primary_key=True)
    token_sha256: Mapped[str] = mapped_column(String(64), unique=True)
    nics: Mapped[str] = mapped_column(Text, default="[]")
    agent_version: Mapped[str] = mapped_column(String(64), default="")
    actuator: Mapped[str] = mapped_column(String(64), default="")
    enrolled_at: Mapped[float] = mapped_column(Float)
    last_seen: Mapped[float] = mapped_column(Float)
    applied_version: Mapped[int] = mapped_column(Integer, default=0)


class JobRow(Base):
    """A job as its creator (admin or scheduler) registered it: the hosts it runs on
    (JSON list); only those hosts may report it."""

    __tablename__ = "ice_jobs"

    job: Mapped[str] = mapped_column(String(128), primary_key=True)
    hosts: Mapped[str] = mapped_column(Text)
    created_at: Mapped[float] = mapped_column(Float)


class ReportRow(Base):
    __tablename__ = "ice_reports"

    job: Mapped[str] = mapped_column(String(128), primary_key=True)
    host: Mapped[str] = mapped_column(String(128), primary_key=True)
    document: Mapped[str] = mapped_column(Text)
    updated_at: Mapped[float] = mapped_column(Float)


class PlanRow(Base):
    """One plan version: summary, the PathPlan arrays (for re-planning after a restart)."""

    __tablename__ = "ice_plans"

    version: Mapped[int] = mapped_column(Integer, primary_key=True)
    policy: Mapped[str] = mapped_column(String(64))
    reason: Mapped[str] = mapped_column(String(200))
    created_at: Mapped[float] = mapped_column(Float)
    planning_ms: Mapped[float] = mapped_column(Float)
    fabric_version: Mapped[int] = mapped_column(Integer)
    summary: Mapped[str] = mapped_column(Text)
    path_plan: Mapped[str] = mapped_column(Text)


class HostPlanRow(Base):
    """A host's QP plans (JSON array) as of ``version``; written only when they change."""

    __tablename__ = "ice_host_plans"

    version: Mapped[int] = mapped_column(Integer, primary_key=True)
    host: Mapped[str] = mapped_column(String(128), primary_key=True)
    document: Mapped[str] = mapped_column(Text)


class EventRow(Base):
    __tablename__ = "ice_events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    t: Mapped[float] = mapped_column(Float)
    host: Mapped[str] = mapped_column(String(128))
    kind: Mapped[str] = mapped_column(String(32))
    document: Mapped[str] = mapped_column(Text)


Index("ix_ice_events_t", EventRow.t)
