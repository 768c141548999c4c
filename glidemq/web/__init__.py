"""ASGI pieces the web faces share (the dashboard now, an HTTP proxy later): authentication
(a callable hook and HTTP basic auth from a file), CSRF tokens, form parsing, server-sent
events and error pages. Needs the `dashboard` extra (Starlette); the core never imports it."""
