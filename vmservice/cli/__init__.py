# -*- test-case-name: tests.cli -*-
