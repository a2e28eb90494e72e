"""Source adapters: turn what a Lambda event source delivers into plain ``SourceRecord`` values."""
