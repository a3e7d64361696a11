"""DDP rules (second article): calibrated on the project's own ViT-L/32 traces."""
from __future__ import annotations

RULES: list = []
