"""Recurring jobs: declarations, expressions, plan/apply against EventBridge Scheduler, local firing."""
