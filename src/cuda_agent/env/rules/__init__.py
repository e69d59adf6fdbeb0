"""The rules: every check that can reject a candidate, static, at link time, at run time and on outputs."""
