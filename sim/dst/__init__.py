"""Deterministic simulation of the whole system (``warmpool sim``): see
:mod:`sim.dst.world` (the world), :mod:`sim.dst.schedule` (what a seed
draws), :mod:`sim.dst.checks` (the invariants), :mod:`sim.dst.runner`
(seeds, summary, replay, shrinking)."""
