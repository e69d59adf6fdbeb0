"""The worker processes, judge and candidate, and the protocol between them and the harness."""
