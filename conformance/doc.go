// Package conformance is the test kit every wasmhost handler module should pass. A handler
// author calls Run from a Go test with the path of the built module, a plugin the handler must
// accept and a few it must refuse:
//
//	func TestConformance(t *testing.T) {
//		conformance.Run(t, "handler.wasm", conformance.Options{
//			PluginType: "example.wasmhost.dev",
//			Valid:      conformance.Plugin{Name: "demo", Versions: []string{"v1"}},
//			Invalid:    []conformance.Plugin{{Name: "old", Versions: []string{"v0"}}},
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
//   - load: the daemon's host loads it, as the daemon would load it from its handler directory
//     (file permissions aside);
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
// A handler that calls its plugin (plugin_call) gets its answers from a Fixture, a file of
// canned responses (LoadFixture), or from a PluginCaller of one's own (Options.Fixture).
//
// Check runs the same checks and returns their results, for use outside a test.
//
// Unlike the contract module (github.com/wasmhost/wasmhost/abi), which depends on nothing
// outside the standard library, this package is part of the daemon's module and runs the
// daemon's own host, so that a handler is checked by the code that will run it; its API has
// types of its own (Options, Plugin, PluginCaller, Fixture, Result), none of the daemon's. A
// handler's go.mod requires github.com/wasmhost/wasmhost for it, which only the handler's
// tests import: the handler's build needs the contract module alone.
package conformance
