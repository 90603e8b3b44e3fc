// Package conformance is the test kit every wasmhost handler module should pass. A handler
// author calls Run from a Go test with the path of the built module, a plugin the handler must
// accept and a few it must refuse:
//
//	func TestConformance(t *testing.T) {
//		conformance.Run(t, "handler.wasm", conformance.Options{
//			PluginType: "example.wasmhost.dev",
//			Valid:      registration.PluginInfo{Name: "demo", Versions: []string{"v1"}},
//			Invalid:    []registration.PluginInfo{{Name: "old", Versions: []string{"v0"}}},
//		})
//	}
//
// Run loads the module in the daemon's own host, with the grants, memory limit and deadline of
// Options, and checks, each as a subtest:
//
//   - module, exports, imports: the file is WebAssembly; it exports memory and every ABI
//     function with the signature of abi.ExportSignatures; it imports only host functions of
//     abi.ImportSignatures (with their signatures) and WASI, and no memory, table or global;
//   - abi-version, manifest: its ABI version is one the host supports, and its manifest
//     declares Options.PluginType;
//   - grants: every capability its imports need is granted (so the daemon would load it with
//     the same handlers.types.<T>.capabilities), and a grant it does not use is pointed out;
//   - load: the daemon's host loads it (host.(*Host).LoadFile; file permissions aside);
//   - validate, register: the valid plugin is accepted, and Validate leaves the store as it was;
//   - register-again: in a fresh module (new instances, with none of the first one's memory,
//     and the same key-value store), Validate and Register of the same plugin succeed again
//     with the same published keys and the same store: Register is idempotent, and a
//     handler copes with a plugin it finds recorded already (as after a daemon restart);
//   - deregister: in another fresh module, Deregister of the plugin succeeds and leaves the
//     store as it was before Register: what Deregister needs was in the store, not in guest
//     memory (skip the last part with Options.KeepsState);
//   - deregister-unknown: Deregister of a plugin that was never registered does not fail and
//     changes nothing;
//   - reject/<name>: each invalid plugin is refused by Validate (abi.StatusRejected, not an
//     error) with a reason, and the store is unchanged;
//   - deadline, no-traps: every call finished within a quarter of the deadline, and none
//     trapped (a trap throws the instance away: a Go panic that was not recovered, running out
//     of memory).
//
// Check runs the same checks and returns their results, for use outside a test.
//
// Unlike package abi, which is the contract and has no dependency on the daemon, this package
// and its subpackage harness import the daemon's host (package host), so that a handler is
// checked by the code that will run it. Import them from tests only.
package conformance
