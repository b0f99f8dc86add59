"""Persistence: SQLAlchemy 2 tables, versioned migrations, and the repository."""
