"""nsysanalyze: per-step GPU metrics and optimization advice from Nsight Systems SQLite exports."""
from .analysis import Analysis, open
from .errors import InputError
from .rules import Evidence, Finding

__version__ = "0.1.0"
__all__ = ["Analysis", "open", "InputError", "Finding", "Evidence", "__version__"]
