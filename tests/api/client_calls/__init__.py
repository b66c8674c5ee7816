"""Calls of a client generated from the shop example's OpenAPI document: type-checked, never imported by the suite."""
