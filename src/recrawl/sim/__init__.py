"""Replays and generators: policies against change traces, health scenarios."""
