"""The rules: every check that can reject a candidate, static, at link time, at run time and on outputs;
each rule is declared once in `registry.py`, and the checks name it from there."""
