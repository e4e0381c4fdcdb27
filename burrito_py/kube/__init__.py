"""The Kubernetes toolkit below the controllers, the server and the AGL (docs/architecture.md, "Map"): the API
client, the watch-fed inventory, the work queues, conditions, events, 403 reporting, shards, leader election,
and the two seams a local kubelet's pods need (pod paths, cluster DNS). Nothing here knows a burrito-py kind's
behaviour."""
