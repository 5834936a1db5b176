"""Tests for :mod:`vmservice.client` without a server, one module per module of the package."""
