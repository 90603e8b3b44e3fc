package tracing

// Span names. A registration pass is one trace: SpanRegister (or SpanDeregister) is its root;
// the calls to the plugin and the handler's calls are its children, and a handler's
// plugin_call a child of the handler call that made it.
const (
	SpanRegister   = "wasmhost.register"   // root: one pass over a socket, seen → Notify
	SpanDeregister = "wasmhost.deregister" // root: a plugin forgotten
	SpanQueued     = "wasmhost.queued"     // the wait from the socket seen to the pass's start (a first pass)
	SpanDial       = "wasmhost.dial"       // connecting to the registration socket
	SpanHandler    = "wasmhost.handler"    // prefix: wasmhost.handler.validate, .register, .deregister
	SpanCall       = "wasmhost.call"       // prefix: one guest export called, wasmhost.call.<export>
	SpanPublish    = "wasmhost.publish"    // prefix: one write of a sink, wasmhost.publish.<sink>
	SpanPull       = "wasmhost.oci.pull"   // one handler source pulled from its registry
	SpanVerify     = "wasmhost.oci.verify" // its signatures checked
	SpanReload     = "wasmhost.reload"     // a handler file loaded, replaced or removed
)

// Attribute names of the semantic conventions, where one says what is meant.
const (
	RPCSystem     = "rpc.system"  // "grpc"
	RPCService    = "rpc.service" // the gRPC service, e.g. pluginregistration.Registration
	RPCMethod     = "rpc.method"  // the method, e.g. GetInfo
	RPCStatusCode = "rpc.grpc.status_code"
	ServerAddress = "server.address" // the unix socket dialled
	ErrorType     = "error.type"     // the class of a failure: the metrics' result label
)

// Attribute names of the daemon's own, under wasmhost.
const (
	AttrSocket     = "wasmhost.socket"            // the registration socket's path
	AttrPluginType = "wasmhost.plugin.type"       // as the plugin answered GetInfo
	AttrPluginName = "wasmhost.plugin.name"       // likewise
	AttrAttempt    = "wasmhost.attempt"           // 1 for a socket's first pass, then each retry
	AttrOutcome    = "wasmhost.outcome"           // registered, or the failure's class
	AttrRevision   = "wasmhost.handler.revision"  // sha256:<hex> of the handler module serving
	AttrHandler    = "wasmhost.handler.file"      // the handler file (or source) serving
	AttrStandby    = "wasmhost.standby"           // the plugin registered as a standby instance
	AttrRegistered = "wasmhost.notify.registered" // what NotifyRegistrationStatus told the plugin
	AttrExport     = "wasmhost.call.export"       // the guest export called
	AttrCPU        = "wasmhost.call.cpu_ns"       // CPU the call used, in nanoseconds
	AttrMemory     = "wasmhost.call.memory_bytes" // the instance's linear memory after the call
	AttrHostCalls  = "wasmhost.call.host_calls"   // host functions the guest called
	AttrResultCode = "wasmhost.call.result_code"  // what the export returned (the ABI's code)
	AttrSink       = "wasmhost.publish.sink"      // feature file, NodeFeature, Events
	AttrSource     = "wasmhost.oci.source"        // the OCI reference pulled
	AttrFile       = "wasmhost.file"              // the handler file reloaded
)

// OutcomeRegistered is AttrOutcome of a pass that registered its plugin.
const OutcomeRegistered = "registered"
