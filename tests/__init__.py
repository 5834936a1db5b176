"""
The test suite.  Property-based tests run without a per-example deadline and
without the too-slow health check: CI runs on a busy 2-core machine, where an
example taking longer than usual says nothing about the code under test.
"""

from hypothesis import HealthCheck, settings

settings.register_profile("vmservice", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("vmservice")
