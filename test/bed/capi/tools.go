//go:build tools

// Package tools pins the Cluster API core manager the local environment runs. It is a module of its own: the
// Kubernetes wrapper module replaces every staging module, which must not apply to Cluster API.
package tools

import (
	_ "sigs.k8s.io/cluster-api/core"
)
