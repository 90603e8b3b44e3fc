// Package sandbox runs WebAssembly handler modules for the host (package host): what a host's
// modules share (loader.go: the compile cache and its integrity, the turns to run guest code,
// instance memory, the key-value stores of the plugin types), a module loaded and checked
// (Load), its pool of instances, a call of one of its exports under its deadline, CPU and
// budgets, and the host functions (module.go, sandbox.go, hostfuncs.go, and the files beside
// them).
//
// It knows nothing of the policies of a handler's revisions and failures, of the handler
// directory nor of the registry: the policy layer (package policy) serves a handler call
// through Module.Serve with itself as the call's Policy (admit, refused, outcome), and that
// policy is the sandbox's only way to the layer. The package imports neither internal/host nor
// internal/host/policy, nor the stages before them (a test in internal/daemon keeps it so).
//
// Its Config is the part of the host's configuration (host.Config) the sandbox uses, with the
// host's defaults filled in: New takes it as it is.
//
// This package is part of the wasmhost daemon, not a stable API.
package sandbox
