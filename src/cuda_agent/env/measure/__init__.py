"""Measurement: timing a forward pass, the device hold, statistics of timed calls, the view from outside."""
