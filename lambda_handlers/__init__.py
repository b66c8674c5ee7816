"""Deployable Lambda entry points (``sqsjobs package lambda`` puts this package in the zip)."""
