;; Type "bulk.example". validate is bulk memory operations (memory.fill, memory.copy) in an exponential call tree, no loop.
(module
  (import "wasmhost" "result_set" (func $result_set (param i32 i32) (result i32)))
  (memory (export "memory") 32)
  (data (i32.const 0) "\0a\0cbulk.example")
  (func (export "wasmhost_abi_version") (result i32) (i32.const 1))
  (func (export "wasmhost_manifest") (result i32)
    (drop (call $result_set (i32.const 0) (i32.const 14)))
    (i32.const 0))
  ;; Each call fills 1 MiB and copies it over the other MiB, then calls itself twice.
  (func $f (param $n i32) (result i32)
    (memory.fill (i32.const 0) (local.get $n) (i32.const 0x100000))
    (memory.copy (i32.const 0x100000) (i32.const 0) (i32.const 0x100000))
    (if (result i32) (i32.eqz (local.get $n))
      (then (i32.const 1))
      (else (i32.add
        (call $f (i32.sub (local.get $n) (i32.const 1)))
        (call $f (i32.sub (local.get $n) (i32.const 1)))))))
  (func (export "wasmhost_validate") (param i32) (result i32)
    (drop (call $f (i32.const 45)))
    (i32.const 0))
  (func (export "wasmhost_register") (param i32) (result i32) (i32.const 0))
  (func (export "wasmhost_deregister") (param i32) (result i32) (i32.const 0)))
