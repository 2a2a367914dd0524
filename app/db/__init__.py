"""The database (SQLite by default, PostgreSQL when ``CAPPLAN_DATABASE_URL`` says so), SQLAlchemy 2.

- ``base``     the declarative base and its constraint naming convention
- ``tables``   saved scenarios, shared config.json files, user catalog additions, benchmark runs and samples
- ``engine``   engine and session factory (SQLite foreign keys and transactions)
- ``migrate``  Alembic run from code: `capplan db upgrade|downgrade|check`, tests and `make run`
- ``backup``   `capplan db export|import`: everything saved, as one JSON document
"""
