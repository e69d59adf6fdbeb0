"""The test suite is a package, so that `tests.*` resolves here and not to a `tests` package
that some wheels (verl 0.9.1) install into site-packages."""
