"""Git for the repository controller: bare mirrors, revision lookup, changed-path matching, archives.

Library code with no Kubernetes in it; `tests.support.git_repos` builds real repositories for tests.
"""

from burrito_py.git.mirror import GitError, GitMirror
from burrito_py.git.paths import Change, is_relevant, normalize_repo_path, path_matches
from burrito_py.git.relevance import decide_layer_commits, diff_base

__all__ = [
    "Change",
    "GitError",
    "GitMirror",
    "decide_layer_commits",
    "diff_base",
    "is_relevant",
    "normalize_repo_path",
    "path_matches",
]
