"""Pull and merge requests: the comment renderer (issue 15; the rest of the flow is not built yet)."""
