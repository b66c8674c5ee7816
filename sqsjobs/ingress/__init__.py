"""Messages sent from outside sqsjobs (EventBridge, SNS, Step Functions, other services) that become jobs.

A feature of the kernel: ``foreign.foreign_plugin`` registers the ``Foreign`` envelope as a message
kind (``runtime/seams.py``). See ``sqsjobs.ingress.plugin`` and docs/enqueue-from-aws.md.
"""
