"""Transitional: the old import path of the analyzer core. Import from core/report instead.

Removed once ``fleetscope/demo`` and ``fleetscope/service/app.py`` have moved over.
"""

from fleetscope.analyzers.core import analyze_file, analyze_prometheus
from fleetscope.analyzers.report import JobSummary, NodeVerdict, Report, StragglerScore

Analysis = Report
__all__ = [
    "Analysis",
    "JobSummary",
    "NodeVerdict",
    "Report",
    "StragglerScore",
    "analyze_file",
    "analyze_prometheus",
]
