"""Helpers shared by several test modules (not tests themselves: pytest collects
``test_*.py`` only). A test module imports from here or gets a fixture from a
``conftest.py``, never from another test module."""
