"""Outcome rewards that are not the environment's own: the LLM judge (``rewards/judge.py``)."""
