# -*- test-case-name: tests.guest -*-
