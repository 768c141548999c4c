"""Benchmarks of glidemq (the side-by-side harness with BullMQ builds on these)."""
