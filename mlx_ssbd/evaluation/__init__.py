"""Evaluation: input stream formats (``streams``), metrics (``metrics``, ``scorers``), the
benchmark runner (``bench``) and its reports (``report``)."""
