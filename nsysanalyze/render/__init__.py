"""Renderers: format the report dict (``Analysis.to_dict()``) and never compute metrics."""
