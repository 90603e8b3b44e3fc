package host

import "github.com/wasmhost/wasmhost/internal/host/sandbox"

// The sandbox's names that the Host's API uses (package sandbox): the same types, values and
// errors, so that errors.Is and the callers of package host work as before.

// Module is a handler module loaded in the sandbox (LoadFile).
type Module = sandbox.Module

// Recorder receives the exchanges of the calls of the plugin types it records (Config.Recorder).
type Recorder = sandbox.Recorder

// Report is what Inspect says of a module; Export and Import, one of its exports and imports.
type (
	Report = sandbox.Report
	Export = sandbox.Export
	Import = sandbox.Import
)

// Sentinel errors (package sandbox's). Callers decide with errors.Is.
var (
	ErrBadModule     = sandbox.ErrBadModule
	ErrNotGranted    = sandbox.ErrNotGranted
	ErrInsecure      = sandbox.ErrInsecure
	ErrTrap          = sandbox.ErrTrap
	ErrBadResult     = sandbox.ErrBadResult
	ErrHandlerFailed = sandbox.ErrHandlerFailed
	ErrRetired       = sandbox.ErrRetired
	ErrClosed        = sandbox.ErrClosed
	ErrBudget        = sandbox.ErrBudget
	ErrCPUBudget     = sandbox.ErrCPUBudget
)

// The reasons a handler file is refused, for the wasmhost_handler_refusals_total metric: the
// sandbox's when it loads a file (package sandbox), the reloader's for a conflict, a binding
// and the directory.
const (
	RefusedNotRegular     = sandbox.RefusedNotRegular
	RefusedUnreadable     = sandbox.RefusedUnreadable
	RefusedInsecure       = sandbox.RefusedInsecure
	RefusedTooLarge       = sandbox.RefusedTooLarge
	RefusedInvalid        = sandbox.RefusedInvalid
	RefusedStructure      = sandbox.RefusedStructure
	RefusedCompileTimeout = sandbox.RefusedCompileTimeout
	RefusedCompileBusy    = sandbox.RefusedCompileBusy
	RefusedMemory         = sandbox.RefusedMemory
	RefusedABI            = sandbox.RefusedABI
	RefusedNotGranted     = sandbox.RefusedNotGranted
	RefusedTrap           = sandbox.RefusedTrap
	RefusedTimeout        = sandbox.RefusedTimeout
	RefusedConflict       = "conflict"           // declares a plugin type another file handles
	RefusedNotBound       = "not_bound"          // declares a plugin type bound to another file or digest
	RefusedDirectory      = "insecure_directory" // the handler directory became insecure
)

// RefusalReason returns the reason (a Refused* constant) of a load error, or "" for nil.
func RefusalReason(err error) string { return sandbox.RefusalReason(err) }
