"""The values job and worker options are made of: range checks, rate limits, token buckets,
groups and ordering keys, sandbox settings, fallback chains and usage records.

Nothing here talks to a server; `glidemq.types` builds the option classes from these."""
