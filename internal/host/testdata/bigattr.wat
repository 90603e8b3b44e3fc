;; Type "bigattr.example". Hostile to a sink every type shares: register publishes id=big and
;; one attribute, blob, of 65,000 bytes ('b'), as large as one publish call may be
;; (handlers.limits.publishBytes), then accepts.
(module
  (import "wasmhost" "result_set" (func $result_set (param i32 i32) (result i32)))
  (import "wasmhost" "publish" (func $publish (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "\0a\0fbigattr.example")
  (data (i32.const 100) "id")
  (data (i32.const 110) "big")
  (data (i32.const 200) "blob")
  (func (export "wasmhost_abi_version") (result i32) (i32.const 1))
  (func (export "wasmhost_manifest") (result i32)
    (drop (call $result_set (i32.const 0) (i32.const 17)))
    (i32.const 0))
  (func (export "wasmhost_validate") (param i32) (result i32) (i32.const 0))
  (func (export "wasmhost_register") (param i32) (result i32)
    (local $i i32)
    (loop $fill
      (i32.store8 (i32.add (i32.const 300) (local.get $i)) (i32.const 0x62))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $fill (i32.lt_u (local.get $i) (i32.const 65000))))
    (if (i32.ne (call $publish (i32.const 100) (i32.const 2) (i32.const 110) (i32.const 3)) (i32.const 0))
      (then (return (i32.const 2))))
    (if (i32.ne (call $publish (i32.const 200) (i32.const 4) (i32.const 300) (i32.const 65000)) (i32.const 0))
      (then (return (i32.const 2))))
    (i32.const 0))
  (func (export "wasmhost_deregister") (param i32) (result i32) (i32.const 0)))
