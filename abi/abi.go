// Package abi is the contract between the wasmhost daemon and the WebAssembly handlers it runs:
// the names of every export and import, the status codes, the encoding of requests and
// manifests, and the ABI version. The specification is abi/README.md; this package is its Go
// form and is shared by the host (host/) and the guest SDK (abi/guest). It has no dependency on
// the daemon.
package abi

// Version is the ABI version this package describes. A handler declares the version it was
// written for by exporting ExportABIVersion; the host refuses versions it does not support.
const Version uint32 = 1

// SupportedVersions lists the ABI versions the host can load.
var SupportedVersions = []uint32{Version}

// Exports a handler module must provide.
const (
	// ExportABIVersion: () -> i32. Returns the ABI version the module was written for.
	ExportABIVersion = "wasmhost_abi_version"
	// ExportManifest: () -> i32. Sets the result (ImportResultSet) to an encoded Manifest and
	// returns StatusOK.
	ExportManifest = "wasmhost_manifest"
	// ExportValidate, ExportRegister, ExportDeregister: (request_len i32) -> i32 status. The
	// request (an encoded PluginRequest of request_len bytes) is read with ImportRequestRead.
	ExportValidate   = "wasmhost_validate"
	ExportRegister   = "wasmhost_register"
	ExportDeregister = "wasmhost_deregister"
	// ExportMemory is the module's linear memory, through which all data is passed.
	ExportMemory = "memory"
	// ExportInitialize: () -> (), optional. The WASI reactor initializer (a Go c-shared module
	// runs its package init functions here); the host calls it once, right after
	// instantiation and before any other export.
	ExportInitialize = "_initialize"
	// ExportCommandStart is the entry point of a WASI command, which a handler must not
	// export: a command runs once, from _start to exit, and the host cannot call into it (a
	// Go module built without -buildmode=c-shared, a C module linked without
	// -mexec-model=reactor). A host refuses it and says how to build a reactor.
	ExportCommandStart = "_start"
)

// ImportModule is the module name of every host function.
const ImportModule = "wasmhost"

// Host functions, all in ImportModule.
const (
	// ImportRequestRead: (ptr i32, len i32) -> i32. Copies up to len bytes of the current
	// request to ptr and returns the request's full length.
	ImportRequestRead = "request_read"
	// ImportResultSet: (ptr i32, len i32) -> i32. Sets the call's result: the reason when a call
	// fails, the manifest for ExportManifest. Returns StatusOK or a negative code.
	ImportResultSet = "result_set"
	// ImportLog: (level i32, ptr i32, len i32) -> (). Writes a log line at a LogLevel.
	ImportLog = "log"
	// ImportPublish: (key_ptr, key_len, val_ptr, val_len i32) -> i32. During
	// ExportRegister, publishes a key and value about the plugin being registered.
	ImportPublish = "publish"
	// ImportKVGet: (key_ptr, key_len, buf_ptr, buf_cap i32) -> i32. Copies up to buf_cap bytes
	// of the value to buf_ptr and returns its full length, or CodeNotFound.
	ImportKVGet = "kv_get"
	// ImportKVSet: (key_ptr, key_len, val_ptr, val_len i32) -> i32.
	ImportKVSet = "kv_set"
	// ImportKVDelete: (key_ptr, key_len i32) -> i32. Deleting a missing key is StatusOK.
	ImportKVDelete = "kv_delete"
	// ImportKVCompareAndSet: (key_ptr, key_len, old_ptr, old_len, new_ptr, new_len i32) -> i32.
	// Since v1.1. Atomically: if the key's value is the old_len bytes at old_ptr (old_len -1:
	// if the key does not exist), sets it to the new_len bytes at new_ptr (new_len -1: deletes
	// it) and returns StatusOK; otherwise changes nothing and returns CodeConflict.
	ImportKVCompareAndSet = "kv_compare_and_set"
	// ImportPluginCall: (method_ptr, method_len, req_ptr, req_len, resp_ptr, resp_cap i32) ->
	// i32. Only with the CapabilityPluginCall grant: a unary gRPC call to the endpoint of the
	// plugin being handled. Returns the response's full length (up to resp_cap bytes copied),
	// or a negative code; on failure the reason is readable with ImportErrorRead.
	ImportPluginCall = "plugin_call"
	// ImportErrorRead: (ptr i32, len i32) -> i32. Copies up to len bytes of the reason of the
	// last host function call that failed with CodeFailed in the current export call to ptr,
	// and returns its full length (0 when there is none).
	ImportErrorRead = "error_read"
)

// Capabilities an operator can grant to the handlers of a plugin type. Host functions not named
// by a capability are always available.
const (
	CapabilityPluginCall = "plugin_call"
)

// CapabilityImports maps each capability to the host functions it grants.
var CapabilityImports = map[string][]string{
	CapabilityPluginCall: {ImportPluginCall},
}

// Statuses returned by the handler's exports.
const (
	// StatusOK: the call succeeded.
	StatusOK int32 = 0
	// StatusRejected: the handler refuses the plugin; the result is the reason, told to the
	// plugin. Retrying the same plugin is not expected to help.
	StatusRejected int32 = 1
	// StatusError: the handler failed for a reason of its own; the result is the reason. The
	// host retries later with backoff.
	StatusError int32 = 2
)

// Codes returned by host functions. Non-negative values are lengths or StatusOK.
const (
	CodeNotFound   int32 = -1 // kv_get: no such key
	CodeTooLarge   int32 = -2 // a key, value or result over its limit
	CodeDenied     int32 = -3 // not allowed in this call (e.g. publish outside register)
	CodeFailed     int32 = -4 // plugin_call: the call failed (dial, deadline, gRPC status)
	CodeBadRequest int32 = -5 // an argument is malformed (e.g. an empty key or method)
	CodeConflict   int32 = -6 // kv_compare_and_set: the key's value is not the one expected (v1.1)
)

// KVAbsent is the old_len of ImportKVCompareAndSet that means "the key does not exist", and its
// new_len that means "delete the key".
const KVAbsent int32 = -1

// LogLevel is the level argument of ImportLog. The host maps it onto log/slog levels.
type LogLevel int32

const (
	LogDebug LogLevel = 0
	LogInfo  LogLevel = 1
	LogWarn  LogLevel = 2
	LogError LogLevel = 3
)

// Limits the host enforces. Exceeding one fails the host function call with CodeTooLarge.
const (
	MaxRequestBytes  = 64 << 10 // an encoded PluginRequest
	MaxResultBytes   = 4 << 10  // a result (reason or manifest)
	MaxLogLineBytes  = 4 << 10  // one log line; longer lines are cut
	MaxKeyBytes      = 512      // a kv or publish key: room for a prefix and any plugin name (256); 256 before v1.1
	MaxValueBytes    = 64 << 10 // a kv or publish value
	MaxKVEntries     = 16384    // keys in one plugin type's store: a key per plugin for 16,384 plugins; 4,096 before v1.2
	MaxPublishedKeys = 64       // keys published about one plugin
)
