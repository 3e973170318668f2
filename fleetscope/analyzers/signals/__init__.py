"""Derived signals the detectors read, each computed once per analysis (``Features.memo``)."""
