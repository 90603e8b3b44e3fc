;; Type "logflood.example". Hostile: validate logs empty lines for ever (each costs a log
;; record, not a byte); register logs 4096-byte lines for ever. Both must end at the per-call
;; output budget (handlers.limits.logLinesPerCall, logBytesPerCall).
(module
  (import "wasmhost" "result_set" (func $result_set (param i32 i32) (result i32)))
  (import "wasmhost" "log" (func $log (param i32 i32 i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "\0a\10logflood.example")
  (func (export "wasmhost_abi_version") (result i32) (i32.const 1))
  (func (export "wasmhost_manifest") (result i32)
    (drop (call $result_set (i32.const 0) (i32.const 18)))
    (i32.const 0))
  (func (export "wasmhost_validate") (param i32) (result i32)
    (loop $forever
      (call $log (i32.const 1) (i32.const 0) (i32.const 0))
      (br $forever))
    (i32.const 0))
  (func (export "wasmhost_register") (param i32) (result i32)
    (loop $forever
      (call $log (i32.const 1) (i32.const 0) (i32.const 4096))
      (br $forever))
    (i32.const 0))
  (func (export "wasmhost_deregister") (param i32) (result i32) (i32.const 0)))
