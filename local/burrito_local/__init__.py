"""burrito-py on one machine, for development and tests — not part of the product images.

The Kubernetes API emulator (`apiserver`, `kube_*`), the local kubelet that runs pods as local processes
(`kubelet`, `kubelet_node` when it is a node of a real control plane), a small controller manager, the real
control plane's launcher (`controlplane`, `netns`), and `burrito-py dev` (`dev`), which installs the Helm chart
into one of them. Installed from this folder (`pip install -e ./local`, which `scripts/venv.sh` does);
`burrito-py dev` and `burrito-py local apiserver` import it lazily and say so when it is missing.
"""
