"""Shared helpers: spaces, schedules, metrics, seeding, loggers."""
