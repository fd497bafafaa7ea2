"""Kubernetes side of the AWS engine (EKS): the manifests benchctl renders and how it talks to the cluster."""
