"""The controllers' process: one kopf operator composing the kind controllers (controllers/), the AGL (agl/) and
leader election (kube/leader/), and its `burrito-py controllers` commands."""
