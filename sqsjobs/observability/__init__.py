"""Metrics (EMF), structured log fields and trace continuation for jobs."""
