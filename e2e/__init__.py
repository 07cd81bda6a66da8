"""End-to-end tests on a real Kubernetes control plane (see e2e/controlplane)."""
