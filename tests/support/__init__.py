"""Helpers shared by real-server tests, fault tests and benchmarks."""
