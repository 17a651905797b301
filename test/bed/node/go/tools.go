//go:build tools

// Package tools pins the node components (kubelet, kube-proxy) the install test runs. It is a module of its own
// so that the main test bed's cache key, and so its cached binaries, do not change when the node's do.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
