;; Type "table.example". Hostile: validate grows its table (declared with no maximum) by 10
;; million elements at a time, 2.4 GB in one call (handlers.limits.maxTableElements).
(module
  (import "wasmhost" "result_set" (func $result_set (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (table 1 funcref)
  (data (i32.const 0) "\0a\0dtable.example")
  (func (export "wasmhost_abi_version") (result i32) (i32.const 1))
  (func (export "wasmhost_manifest") (result i32)
    (drop (call $result_set (i32.const 0) (i32.const 15)))
    (i32.const 0))
  (func (export "wasmhost_validate") (param i32) (result i32)
    (loop $grow
      (drop (table.grow 0 (ref.null func) (i32.const 10000000)))
      (br $grow))
    (i32.const 0))
  (func (export "wasmhost_register") (param i32) (result i32) (i32.const 0))
  (func (export "wasmhost_deregister") (param i32) (result i32) (i32.const 0)))
