"""Every test tier: hypothesis is imported up front, and a service's HTTP port is any free one.

Its pytest plugin otherwise imports it at session end (for the statistics summary), under pytest's assertion
rewriting, and CPython 3.11.7's parser can then fail with "SystemError: AST constructor recursion depth
mismatch" when earlier tests left its recursion counter off (python/cpython#106905, fixed in 3.11.8): the
tests pass and the session exits 1. A session that imports hypothesis while collecting never meets it.

GPUPLACE_HTTP_PORT=0: a test that starts a service the way a deployment does (runtime.serve) must not take the
default port 8080, which another test, a demo or a running service on the same machine may hold.
"""

import os

import hypothesis  # noqa: F401

os.environ.setdefault("GPUPLACE_HTTP_PORT", "0")
