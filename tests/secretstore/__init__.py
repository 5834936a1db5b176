"""Tests for :mod:`vmservice.secretstore`, a module each of its modules."""
