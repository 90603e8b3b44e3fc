;; Type "pcflood.example" (needs the plugin_call grant). Hostile: validate calls plugin_call for
;; ever, whatever it answers (handlers.limits.pluginCallsPerCall).
(module
  (import "wasmhost" "result_set" (func $result_set (param i32 i32) (result i32)))
  (import "wasmhost" "plugin_call" (func $plugin_call (param i32 i32 i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "\0a\0fpcflood.example")
  (data (i32.const 32) "/x.Y/Z")
  (func (export "wasmhost_abi_version") (result i32) (i32.const 1))
  (func (export "wasmhost_manifest") (result i32)
    (drop (call $result_set (i32.const 0) (i32.const 17)))
    (i32.const 0))
  (func (export "wasmhost_validate") (param i32) (result i32)
    (loop $forever
      (drop (call $plugin_call (i32.const 32) (i32.const 6) (i32.const 0) (i32.const 0) (i32.const 64) (i32.const 64)))
      (br $forever))
    (i32.const 0))
  (func (export "wasmhost_register") (param i32) (result i32) (i32.const 0))
  (func (export "wasmhost_deregister") (param i32) (result i32) (i32.const 0)))
