"""The operator's web console: server-rendered pages over the same functions as the `fleet` CLI."""
