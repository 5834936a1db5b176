"""Tests for :mod:`vmservice.api.inputs`, one module per module."""
