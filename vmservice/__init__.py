# -*- test-case-name: tests -*-
"""
vmservice: a Twisted daemon that boots and manages micro-VMs through an HTTP REST API.
"""

__version__ = "0.1.0"
