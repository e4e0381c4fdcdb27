"""Pull and merge requests: affected layers and the comment renderer (issue 15; the rest of the flow is not built
yet)."""
