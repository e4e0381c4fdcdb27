"""burrito-py: a Kubernetes-native Terraform/OpenTofu runner."""

__version__ = "0.1.0"
