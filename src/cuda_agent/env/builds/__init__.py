"""Building solutions: cached extension builds, the load_inline drop-in, and the libraries handed in."""
