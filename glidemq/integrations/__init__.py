"""Helpers for web frameworks: `glidemq.integrations.starlette` (Starlette and FastAPI) and
`glidemq.integrations.django`. Each needs its framework installed; `import glidemq` imports
none of them."""
