"""Tests for :mod:`vmservice.config`, a module each of its modules."""
