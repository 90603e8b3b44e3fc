;; Type "trap.example". validate hits unreachable; register divides by zero; deregister
;; accepts.
(module
  (import "wasmhost" "result_set" (func $result_set (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "\0a\0ctrap.example")
  (func (export "wasmhost_abi_version") (result i32) (i32.const 1))
  (func (export "wasmhost_manifest") (result i32)
    (drop (call $result_set (i32.const 0) (i32.const 14)))
    (i32.const 0))
  (func (export "wasmhost_validate") (param i32) (result i32) (unreachable))
  (func (export "wasmhost_register") (param $len i32) (result i32)
    (i32.div_u (i32.const 1) (i32.sub (local.get $len) (local.get $len))))
  (func (export "wasmhost_deregister") (param i32) (result i32) (i32.const 0)))
