"""The token-review throttle the server's REST API and UI use: it lives beside the datastore's authenticator, which
uses it too (`datastore/review_throttle.py`, docs/architecture.md §10.2, §11.2)."""

from burrito_py.datastore.review_throttle import (
    ADDRESS_BURST,
    ADDRESS_PER_MINUTE,
    TOKEN_BURST,
    TOKEN_PER_MINUTE,
    Buckets,
    ReviewThrottle,
    Throttled,
    ThrottledAuthenticator,
)

__all__ = ["ADDRESS_BURST", "ADDRESS_PER_MINUTE", "TOKEN_BURST", "TOKEN_PER_MINUTE", "Buckets", "ReviewThrottle",
           "Throttled", "ThrottledAuthenticator"]
