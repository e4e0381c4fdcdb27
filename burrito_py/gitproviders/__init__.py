"""Git providers (GitHub, GitLab, Gitea/Forgejo, Bitbucket Cloud and Data Center): one module per provider behind
one Protocol, and their registry
(docs/architecture.md §11.1, §11.3).

`base.py` holds the Protocol (`GitProvider`) and what every provider shares: the pull request event's shape and
its parsing helpers, HMAC keys. `client.py` the API clients' shared HTTP (rate limits, the outbound guard, one
origin). `github.py`, `gitlab.py`, `gitea.py`, `bitbucket.py`,
`bitbucket_datacenter.py` are the providers, each exposing `PROVIDER`. `registry.py` loads one
module per name of `PullRequestProvider` (`burrito_py/api/pullrequest.py`, the one list) and answers by name;
`delivery.py` is a webhook delivery read into one shape. The server, the pull request controller and
`pullrequests/` ask the registry: none of them branches on a provider's name.
"""
