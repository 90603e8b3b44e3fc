;; A handler of plugin type traced.example that asks its plugin /svc.Echo/Echo (plugin_call,
;; "x" as the request) in validate: it accepts the plugin when the call succeeds and fails with
;; the reason when it does not. For the tracing tests (trace_test.go): the handler's call and
;; its plugin_call are spans of the registration's trace.
(module
  (import "wasmhost" "result_set" (func $result_set (param i32 i32) (result i32)))
  (import "wasmhost" "error_read" (func $error_read (param i32 i32) (result i32)))
  (import "wasmhost" "plugin_call" (func $plugin_call (param i32 i32 i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "\0a\0etraced.example")
  (data (i32.const 100) "/svc.Echo/Echo")
  (data (i32.const 120) "x")
  (func (export "wasmhost_abi_version") (result i32) (i32.const 1))
  (func (export "wasmhost_manifest") (result i32)
    (drop (call $result_set (i32.const 0) (i32.const 16)))
    (i32.const 0))
  (func (export "wasmhost_validate") (param i32) (result i32)
    (local $n i32)
    (local.set $n (call $plugin_call (i32.const 100) (i32.const 14) (i32.const 120) (i32.const 1) (i32.const 4096) (i32.const 256)))
    (if (i32.lt_s (local.get $n) (i32.const 0))
      (then
        (local.set $n (call $error_read (i32.const 2048) (i32.const 1024)))
        (drop (call $result_set (i32.const 2048) (select (local.get $n) (i32.const 1024) (i32.lt_u (local.get $n) (i32.const 1024)))))
        (return (i32.const 2))))
    (i32.const 0))
  (func (export "wasmhost_register") (param i32) (result i32) (i32.const 0))
  (func (export "wasmhost_deregister") (param i32) (result i32) (i32.const 0)))
