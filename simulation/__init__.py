"""Deterministic simulation of the whole system (``warmpool sim``): see
:mod:`simulation.world` (the world), :mod:`simulation.schedule` (what a seed
draws), :mod:`simulation.checks` (the invariants), :mod:`simulation.runner`
(seeds, summary, replay, shrinking)."""
