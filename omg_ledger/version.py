"""This omg-ledger's version, as pyproject.toml states it (tests/test_startup.py keeps the
two equal). A constant, because asking importlib.metadata costs more than the rest of
`omg-ledger --version` together (it imports the email package to read METADATA)."""

VERSION = "0.1.0"
