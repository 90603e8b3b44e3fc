;; A WASI command: every ABI export, and _start, as a Go module built without
;; -buildmode=c-shared or a C module linked without -mexec-model=reactor has. Refused at load
;; with how to build a reactor; its _start traps, so a host that ran it would fail loudly.
(module
  (import "wasmhost" "result_set" (func $result_set (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "\0a\0fcommand.example")
  (func (export "_start") (unreachable))
  (func (export "wasmhost_abi_version") (result i32) (i32.const 1))
  (func (export "wasmhost_manifest") (result i32)
    (drop (call $result_set (i32.const 0) (i32.const 17)))
    (i32.const 0))
  (func (export "wasmhost_validate") (param i32) (result i32) (i32.const 0))
  (func (export "wasmhost_register") (param i32) (result i32) (i32.const 0))
  (func (export "wasmhost_deregister") (param i32) (result i32) (i32.const 0)))
