"""Tests for :mod:`vmservice.service`, a module each of its modules."""
