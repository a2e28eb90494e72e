"""Adapters to the outside: the only code that knows DynamoDB item and attribute names."""
