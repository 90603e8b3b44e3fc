// Package interop runs plugins that wasmhost did not write (the Kubernetes DRA kubelet-plugin
// helper, the kubelet's own example plugin) against wasmhost's registration protocol: first
// against a minimal registration probe in this package, then against the real daemon.
//
// It is a module of its own, so that the daemon's go.mod does not carry the Kubernetes
// dependencies these plugins need. It is part of wasmhost's test suite, not an API: everything
// here lives in _test.go files; see README.md for what each test proves and how to run it.
package interop
