# -*- test-case-name: tests.test_tap -*-
"""
The ``vmservice`` twistd plugin: ``twistd -n vmservice --config PATH``.
"""

from twisted.application.service import ServiceMaker

vmservice = ServiceMaker(
    "vmservice",
    "vmservice.tap",
    "Boots and manages micro-VMs through an HTTP REST API",
    "vmservice",
)
