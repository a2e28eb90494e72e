"""Local stand-ins for AWS services (DynamoDB Local, template loading) used by tests and the demo."""
