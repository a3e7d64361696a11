"""Renderers: format the report dict (``render.contract.report``) and never compute metrics."""
