"""The server's web UI (docs/architecture.md §11.4): server-rendered pages under /ui/, htmx for partial updates,
server-sent events for live state and logs; actions as the logged-in user, under Kubernetes RBAC."""
