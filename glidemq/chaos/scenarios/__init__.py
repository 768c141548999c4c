"""Chaos scenarios, one module each; every module here is imported by the registry.

A module defines a `Scenario` subclass decorated with `@register` (see
`glidemq.chaos.scenario` for the hooks and `kill_workers.py` for a short example).
"""
