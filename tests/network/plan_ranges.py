"""
The address ranges of the network plan tests: an ``allow`` and a ``drop`` list and the protected
ranges (:mod:`tests.network.test_plans`, :mod:`tests.integration.network.test_plans`).
"""

from __future__ import annotations

from ipaddress import IPv4Network

ALLOW = [IPv4Network("10.0.0.0/8"), IPv4Network("192.0.2.0/24")]
DROP = [IPv4Network("10.1.0.0/16")]
PROTECTED = [IPv4Network("10.77.0.0/22"), IPv4Network("192.168.1.20/32")]
