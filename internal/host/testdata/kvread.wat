;; Type "kvread.example". Hostile (issue 27): validate writes one 60,000-byte value, reads it
;; with kv_get 5,000 times (into a 16-byte buffer, as kvloop.wat) and accepts; register accepts.
;; Four registrations captured hold what the capture's bounds allow, not 5,000 copies of the
;; value each.
(module
  (import "wasmhost" "result_set" (func $result_set (param i32 i32) (result i32)))
  (import "wasmhost" "kv_get" (func $kv_get (param i32 i32 i32 i32) (result i32)))
  (import "wasmhost" "kv_set" (func $kv_set (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 2)
  (data (i32.const 0) "\0a\0ekvread.example")
  (data (i32.const 100) "v")
  (func (export "wasmhost_abi_version") (result i32) (i32.const 1))
  (func (export "wasmhost_manifest") (result i32)
    (drop (call $result_set (i32.const 0) (i32.const 16)))
    (i32.const 0))
  (func (export "wasmhost_validate") (param i32) (result i32)
    (local $i i32)
    (if (call $kv_set (i32.const 100) (i32.const 1) (i32.const 1024) (i32.const 60000))
      (then (return (i32.const 2))))
    (loop $read
      (if (i32.ne (call $kv_get (i32.const 100) (i32.const 1) (i32.const 65536) (i32.const 16)) (i32.const 60000))
        (then (return (i32.const 2))))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $read (i32.lt_u (local.get $i) (i32.const 5000))))
    (i32.const 0))
  (func (export "wasmhost_register") (param i32) (result i32) (i32.const 0))
  (func (export "wasmhost_deregister") (param i32) (result i32) (i32.const 0)))
