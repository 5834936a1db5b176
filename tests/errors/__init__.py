"""Tests for :mod:`vmservice.errors`, a module each of its modules."""
