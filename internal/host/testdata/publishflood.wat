;; Type "publishflood.example". Hostile: register publishes 4 KiB values under new keys until
;; publish refuses, then accepts (handlers.limits.publishKeys, publishBytes).
(module
  (import "wasmhost" "result_set" (func $result_set (param i32 i32) (result i32)))
  (import "wasmhost" "publish" (func $publish (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "\0a\14publishflood.example")
  (func (export "wasmhost_abi_version") (result i32) (i32.const 1))
  (func (export "wasmhost_manifest") (result i32)
    (drop (call $result_set (i32.const 0) (i32.const 22)))
    (i32.const 0))
  (func (export "wasmhost_validate") (param i32) (result i32) (i32.const 0))
  (func (export "wasmhost_register") (param i32) (result i32)
    (local $i i32)
    (loop $fill
      (i32.store (i32.const 65000) (i32.add (i32.const 0x61616161) (local.get $i)))
      (if (i32.eqz (call $publish (i32.const 65000) (i32.const 4) (i32.const 0) (i32.const 4096)))
        (then
          (local.set $i (i32.add (local.get $i) (i32.const 1)))
          (br $fill))))
    (i32.const 0))
  (func (export "wasmhost_deregister") (param i32) (result i32) (i32.const 0)))
