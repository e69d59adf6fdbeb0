"""The worker processes, judge and candidate, and the protocol between them and the harness:
typed messages (messages.py) as JSON lines on their own pipe (protocol.py), inputs and outputs (draws, transfer)."""
