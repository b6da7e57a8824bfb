"""Queries and shaping for the CLI's reports. No printing here."""
