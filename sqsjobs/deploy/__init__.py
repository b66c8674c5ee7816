"""Getting an App onto AWS: resource provisioning, the Lambda zip, and the rules infra/ synthesizes from."""
