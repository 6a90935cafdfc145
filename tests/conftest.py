"""Every test tier: hypothesis is imported up front.

Its pytest plugin otherwise imports it at session end (for the statistics summary), under pytest's assertion
rewriting, and CPython 3.11.7's parser can then fail with "SystemError: AST constructor recursion depth
mismatch" when earlier tests left its recursion counter off (python/cpython#106905, fixed in 3.11.8): the
tests pass and the session exits 1. A session that imports hypothesis while collecting never meets it.
"""

import hypothesis  # noqa: F401
